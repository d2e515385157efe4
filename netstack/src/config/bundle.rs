//! The appliance bundle: the one boot module (QEMU PVH `-initrd` passes one) that carries
//! every file an appliance needs, each owned by the kernel or by a network function like the
//! command line's keys ([`super::keys`]).
//!
//! # Format (UTF-8 text)
//!
//! ```text
//! #!gannet-bundle 1
//! --- routes
//! 192.168.0.0/16,10.0.1.2
//! 0.0.0.0/0,10.0.0.2
//! ```
//!
//! * The first line is `#!gannet-bundle 1` (the format's version).
//! * A line `--- NAME` starts file `NAME` (`[a-z0-9_]`, 1..=32 bytes; each name at most once);
//!   the file is every line up to the next `--- ` line or the end. Lines before the first
//!   header must be blank.
//! * Known files ([`FILES`]): `rules` (the ACL firewall's: `netstack::acl`'s rules syntax) and
//!   `routes` (the router's: one `PREFIX/LEN,GATEWAY` per line, the
//!   routes-file syntax of [`super::parse_routes_file`]).
//! * A module that does not start with `#!gannet-bundle` is one file: the routes file (what
//!   `--routes FILE` has always passed).
//!
//! Errors name the line and the file: an unknown file, a repeated one, a file of a network
//! function `mode=` does not select, a header without a name.

use super::keys::Owner;
use super::nf_files::NfFileNames;
use super::Mode;

/// The first line of a bundle (format version 1).
pub const BUNDLE_MAGIC: &str = "#!gannet-bundle 1";

/// Most files in a bundle.
pub const MAX_FILES: usize = 8;
const _: () = assert!(MAX_FILES <= super::nf_files::MAX_NF_FILES);

/// A file a bundle may carry: its name and owner.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct FileKind {
    /// The name after `--- `.
    pub name: &'static str,
    /// Who reads it.
    pub owner: Owner,
}

/// Every file a bundle may carry.
pub const FILES: &[FileKind] = &[
    FileKind {
        name: "rules",
        // `mode=router` and `mode=firewall` with rules: the ACL in front (a static chain).
        owner: Owner::Nf(&[Mode::Acl, Mode::Router, Mode::Firewall]),
    },
    FileKind {
        name: "routes",
        owner: Owner::Nf(&[Mode::Router]),
    },
];

/// A parsed boot module: its files by name, borrowed from the module's text.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct Bundle<'a> {
    files: heapless::Vec<(&'static str, &'a str), MAX_FILES>,
    /// The module's line of each file's first line (its header's plus one), in `files`' order.
    first_lines: heapless::Vec<usize, MAX_FILES>,
}

impl<'a> Bundle<'a> {
    /// Add file `name` of `text` whose first line is the module's line `first_line`; `Err`
    /// when [`MAX_FILES`] are there.
    fn push(&mut self, name: &'static str, text: &'a str, first_line: usize) -> Result<(), ()> {
        self.files.push((name, text)).map_err(|_| ())?;
        self.first_lines.push(first_line).map_err(|_| ())
    }

    /// File `name`'s text, if the bundle carries it.
    pub fn file(&self, name: &str) -> Option<&'a str> {
        self.files.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
    }

    /// The names of the files it carries, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.files.iter().map(|&(n, _)| n)
    }

    /// The boot module's line number of file `name`'s first line (a file's line `k` is the
    /// module's line `first_line + k - 1`); `None` if it does not carry the file or is not a
    /// bundle.
    pub fn first_line(&self, name: &str) -> Option<usize> {
        let i = self.files.iter().position(|(n, _)| *n == name)?;
        self.first_lines.get(i).copied()
    }

    /// The files it carries, name and text, in order.
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &'a str)> + Clone + '_ {
        self.files.iter().copied()
    }
}

/// Why a boot module is not a bundle this kernel takes.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum BundleError<'a> {
    /// `#!gannet-bundle N` with another version.
    Version(&'a str),
    /// Text on line `line` before the first `--- NAME` header.
    BeforeFirstFile(usize),
    /// A header on line `line` whose name is empty, too long or not `[a-z0-9_]`.
    BadName(usize, &'a str),
    /// A file this kernel does not know (line of its header).
    UnknownFile(usize, &'a str),
    /// A file given twice (line of its second header).
    Repeated(usize, &'a str),
    /// More than [`MAX_FILES`] files (the line where the one too many ends).
    TooMany(usize),
    /// In an image of one's own: a stock network function's file, which configures nothing
    /// there.
    StockFile {
        /// The file.
        name: &'static str,
        /// The stock image's modes that read it.
        modes: &'static [Mode],
        /// The image's network function.
        nf: &'static str,
    },
    /// In an image of one's own: a file its network function does not declare (line of its
    /// header, the name, the network function).
    NotDeclared(usize, &'a str, &'static str),
    /// In an image of one's own: a boot module that is not a bundle (no `#!gannet-bundle`
    /// line): such an image reads its files from a bundle only.
    NotBundle(&'static str),
    /// A network function's file while `mode=` selects another one.
    Misplaced {
        /// The file.
        name: &'static str,
        /// The modes whose network function reads it.
        modes: &'static [Mode],
        /// The mode in force.
        mode: Mode,
    },
}

impl core::fmt::Display for BundleError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BundleError::Version(l) => write!(
                f,
                "boot module: `{l}` is not a bundle this kernel reads (`{BUNDLE_MAGIC}`)"
            ),
            BundleError::BeforeFirstFile(n) => {
                write!(f, "boot module line {n}: text before the first `--- NAME`")
            }
            BundleError::BadName(n, name) => write!(
                f,
                "boot module line {n}: bad file name `{name}` (1..=32 of a-z, 0-9, _)"
            ),
            BundleError::UnknownFile(n, name) => {
                write!(f, "boot module line {n}: unknown file `{name}` (known:")?;
                for k in FILES {
                    write!(f, " {}", k.name)?;
                }
                write!(f, ")")
            }
            BundleError::TooMany(n) => {
                write!(f, "boot module line {n}: more than {MAX_FILES} files")
            }
            BundleError::Repeated(n, name) => {
                write!(f, "boot module line {n}: file `{name}` given twice")
            }
            BundleError::StockFile { name, modes, nf } => {
                write!(f, "boot module: file `{name}` belongs to the stock image's ")?;
                super::keys::write_modes(f, modes)?;
                write!(f, "; this image runs `{nf}`")
            }
            BundleError::NotDeclared(n, name, nf) => write!(
                f,
                "boot module line {n}: file `{name}` is not one `{nf}` declares"
            ),
            BundleError::NotBundle(nf) => write!(
                f,
                "boot module: not a bundle (no `{BUNDLE_MAGIC}` line): `{nf}` reads its files from one"
            ),
            BundleError::Misplaced { name, modes, mode } => {
                write!(f, "boot module: file `{name}` belongs to ")?;
                super::keys::write_modes(f, modes)?;
                write!(f, ", not mode={}", mode.as_str())
            }
        }
    }
}

/// Parse boot module `text` for mode `mode` in the stock image: a bundle (first line
/// [`BUNDLE_MAGIC`]) or, without the magic line, one routes file (`routes`, whatever the mode:
/// a routes file outside router mode is refused where routes are read, as before).
///
/// # Errors
/// [`BundleError`], naming the line and the file.
pub fn parse(text: &str, mode: Mode) -> Result<Bundle<'_>, BundleError<'_>> {
    parse_with(text, mode, None)
}

/// The image's own network function for [`parse_with`]: its name (for errors) and the files it
/// declares.
#[derive(Clone, Copy)]
pub struct NfFiles<'n> {
    /// The NF's name (`NetworkFunction::NAME`).
    pub nf: &'static str,
    /// Its files' names.
    pub files: &'n dyn NfFileNames,
}

/// [`parse`] for an image whose network function reads files of its own (`nf`): the bundle
/// may carry those (at most [`MAX_FILES`]) and no stock network function's; a module without
/// the magic line is refused. `None` is the stock image ([`parse`]).
///
/// # Errors
/// As [`parse`], and in an image of one's own [`BundleError::StockFile`],
/// [`BundleError::NotDeclared`] and [`BundleError::NotBundle`].
pub fn parse_with<'a>(
    text: &'a str,
    mode: Mode,
    nf: Option<NfFiles<'_>>,
) -> Result<Bundle<'a>, BundleError<'a>> {
    let mut b = Bundle::default();
    let Some(first) = text.lines().next() else {
        return Ok(b);
    };
    if !first.starts_with("#!gannet-bundle") {
        if let Some(nf) = nf {
            return Err(BundleError::NotBundle(nf.nf));
        }
        let _ = b.files.push(("routes", text));
        return Ok(b);
    }
    if first.trim_end() != BUNDLE_MAGIC {
        return Err(BundleError::Version(first));
    }
    // The file being read: its name, the byte offset where its text starts and its header's
    // line.
    let mut open: Option<(&'static str, usize, usize)> = None;
    let mut offset = 0;
    for (i, seg) in text.split_inclusive('\n').enumerate() {
        let (n, start) = (i + 1, offset);
        offset += seg.len();
        if i == 0 {
            continue;
        }
        let line = seg.trim_end_matches(['\n', '\r']);
        let Some(name) = line.strip_prefix("--- ") else {
            if open.is_none() && !line.trim().is_empty() {
                return Err(BundleError::BeforeFirstFile(n));
            }
            continue;
        };
        let name = name.trim_end();
        if name.is_empty()
            || name.len() > 32
            || !name
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        {
            return Err(BundleError::BadName(n, name));
        }
        let known = match nf {
            None => stock_file(n, name, mode)?,
            Some(nf) => nf_file(n, name, nf)?,
        };
        if b.file(known).is_some() || open.is_some_and(|(o, _, _)| o == known) {
            return Err(BundleError::Repeated(n, name));
        }
        if let Some((o, s, h)) = open.take() {
            b.push(o, &text[s..start], h + 1)
                .map_err(|()| BundleError::TooMany(n))?;
        }
        open = Some((known, offset, n));
    }
    if let Some((o, s, h)) = open {
        b.push(o, &text[s..], h + 1)
            .map_err(|()| BundleError::TooMany(text.lines().count()))?;
    }
    Ok(b)
}

/// Stock file `name` (header on line `n`), if `mode`'s network function reads it.
fn stock_file(n: usize, name: &str, mode: Mode) -> Result<&'static str, BundleError<'_>> {
    let kind = FILES
        .iter()
        .find(|k| k.name == name)
        .ok_or(BundleError::UnknownFile(n, name))?;
    if let Owner::Nf(modes) = kind.owner {
        if !modes.contains(&mode) {
            return Err(BundleError::Misplaced {
                name: kind.name,
                modes,
                mode,
            });
        }
    }
    Ok(kind.name)
}

/// File `name` (header on line `n`) of the image's own network function, if it declares it.
fn nf_file<'a>(n: usize, name: &'a str, nf: NfFiles<'_>) -> Result<&'static str, BundleError<'a>> {
    if let Some(f) = nf.files.find(name) {
        return Ok(f);
    }
    match FILES.iter().find(|k| k.name == name) {
        Some(FileKind {
            name,
            owner: Owner::Nf(modes),
        }) => Err(BundleError::StockFile {
            name,
            modes,
            nf: nf.nf,
        }),
        _ => Err(BundleError::NotDeclared(n, name, nf.nf)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;
    use std::string::ToString;

    #[test]
    fn a_bundle_carries_its_files() {
        let text = "#!gannet-bundle 1\n\n--- routes\n192.168.0.0/16,10.0.1.2\n# default\n0.0.0.0/0,10.0.0.2\n";
        let b = parse(text, Mode::Router).unwrap();
        assert_eq!(b.names().collect::<std::vec::Vec<_>>(), ["routes"]);
        let routes = b.file("routes").unwrap();
        assert_eq!(
            routes,
            "192.168.0.0/16,10.0.1.2\n# default\n0.0.0.0/0,10.0.0.2\n"
        );
        assert_eq!(parse_routes_file(routes).filter(|r| r.is_ok()).count(), 2);
        // CRLF line ends.
        let crlf = "#!gannet-bundle 1\r\n--- routes\r\n10.0.0.0/8,10.0.1.2\r\n";
        let r = parse(crlf, Mode::Router).unwrap().file("routes").unwrap();
        assert_eq!(r, "10.0.0.0/8,10.0.1.2\r\n");
        assert_eq!(parse_routes_file(r).filter(|r| r.is_ok()).count(), 1);
    }

    #[test]
    fn a_module_without_the_magic_line_is_the_routes_file() {
        let text = "10.0.0.0/8,10.0.1.2\n";
        assert_eq!(parse(text, Mode::L2).unwrap().file("routes"), Some(text));
        assert_eq!(parse("", Mode::Router).unwrap(), Bundle::default());
    }

    #[test]
    fn bad_bundles_are_named_errors() {
        let m = |t| parse(t, Mode::Router).unwrap_err();
        assert_eq!(
            m("#!gannet-bundle 2\n"),
            BundleError::Version("#!gannet-bundle 2")
        );
        assert_eq!(
            m("#!gannet-bundle 1\nstray\n--- routes\n"),
            BundleError::BeforeFirstFile(2)
        );
        assert_eq!(
            m("#!gannet-bundle 1\n--- Routes\n"),
            BundleError::BadName(2, "Routes")
        );
        assert_eq!(m("#!gannet-bundle 1\n--- \n"), BundleError::BadName(2, ""));
        let e = m("#!gannet-bundle 1\n--- acl\n");
        assert_eq!(e, BundleError::UnknownFile(2, "acl"));
        assert_eq!(
            e.to_string(),
            "boot module line 2: unknown file `acl` (known: rules routes)"
        );
        assert_eq!(
            m("#!gannet-bundle 1\n--- routes\n--- routes\n"),
            BundleError::Repeated(3, "routes")
        );
        let e = parse("#!gannet-bundle 1\n--- routes\n", Mode::L2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "boot module: file `routes` belongs to mode=router, not mode=l2"
        );
    }

    /// An image's own network function for the tests: the ports in its file.
    #[derive(Default)]
    struct Filter {
        ports: std::vec::Vec<u16>,
    }

    const FILTER_FILES: &[NfFile<Filter>] = &[NfFile::new("blocked_ports", |f, text| {
        for (i, line) in text.lines().enumerate() {
            let port = line.trim().parse().map_err(|_| FileError {
                line: i + 1,
                expected: "a port number in 0..=65535",
            })?;
            f.ports.push(port);
        }
        Ok(())
    })];

    const FILTER_NAMES: FileTable<'static, Filter, ()> = FileTable {
        files: FILTER_FILES,
        state: (),
    };

    fn filter() -> Option<NfFiles<'static>> {
        Some(NfFiles {
            nf: "filter",
            files: &FILTER_NAMES,
        })
    }

    /// [`nf_files::apply`] of `carried` to `f` through its table.
    fn apply<'t>(
        carried: impl Iterator<Item = (&'static str, &'t str)> + Clone,
        f: &mut Filter,
    ) -> Result<(), BadFile> {
        let mut table = FileTable {
            files: FILTER_FILES,
            state: f,
        };
        nf_files::apply(carried, &mut table)
    }

    use crate::config::nf_files::{self, BadFile, FileError, FileTable, NfFile};

    /// Issue 33 item 4: an NF of one's own declares its files; the bundle carries them, only
    /// them, and each core's instance reads them.
    #[test]
    fn an_nf_of_ones_own_reads_the_files_it_declares() {
        let text = "#!gannet-bundle 1\n--- blocked_ports\n5000\n6000\n";
        let b = parse_with(text, Mode::L2, filter()).unwrap();
        assert_eq!(b.file("blocked_ports"), Some("5000\n6000\n"));
        assert_eq!(
            b.first_line("blocked_ports"),
            Some(3),
            "after its header on line 2"
        );
        assert_eq!(b.first_line("rules"), None);
        let mut f = Filter::default();
        apply(b.files(), &mut f).unwrap();
        assert_eq!(f.ports, [5000, 6000]);
        // A bad line is named with its file.
        let bad = "#!gannet-bundle 1\n--- blocked_ports\n5000\nhttp\n";
        let b = parse_with(bad, Mode::L2, filter()).unwrap();
        let e = apply(b.files(), &mut Filter::default()).unwrap_err();
        assert_eq!(
            e,
            BadFile {
                name: "blocked_ports",
                error: FileError {
                    line: 2,
                    expected: "a port number in 0..=65535"
                }
            }
        );
        assert_eq!(
            e.to_string(),
            "file `blocked_ports` line 2: expected a port number in 0..=65535"
        );
        // Absent: the instance stays as it was.
        let mut f = Filter::default();
        let none = parse_with("#!gannet-bundle 1\n", Mode::L2, filter()).unwrap();
        apply(none.files(), &mut f).unwrap();
        assert!(f.ports.is_empty());
    }

    #[test]
    fn an_nf_of_ones_own_refuses_other_files_by_name() {
        let m = |t| parse_with(t, Mode::L2, filter()).unwrap_err().to_string();
        assert_eq!(
            m("#!gannet-bundle 1\n--- routes\n10.0.0.0/8,10.0.1.2\n"),
            "boot module: file `routes` belongs to the stock image's mode=router; this image runs `filter`"
        );
        assert_eq!(
            m("#!gannet-bundle 1\n--- blocked\n"),
            "boot module line 2: file `blocked` is not one `filter` declares"
        );
        assert_eq!(
            m("10.0.0.0/8,10.0.1.2\n"),
            "boot module: not a bundle (no `#!gannet-bundle 1` line): `filter` reads its files from one"
        );
        assert_eq!(
            m("#!gannet-bundle 1\n--- blocked_ports\n1\n--- blocked_ports\n"),
            "boot module line 4: file `blocked_ports` given twice"
        );
    }
}
