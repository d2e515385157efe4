//! A network function's own files: what an image of one's own (`unikernel::main!(MyNf)`)
//! reads from the appliance bundle ([`super::bundle`]) beside the command line's keys
//! ([`super::nf_keys`]).
//!
//! The NF declares a table of [`NfFile`]s (`NetworkFunction::files` in the unikernel's NF
//! API; the kernel reaches them through [`NfFileSet`], so a composition answers for its parts), each a name (the bundle's `--- NAME`) and a parser that reads the file's text into
//! the NF's per-core state. At boot the kernel reads the bundle with
//! [`super::bundle::parse_with`] (a file the NF does not declare, a stock NF's file, a module
//! that is not a bundle: a named error) and parses each declared file once on a throwaway
//! instance (a bad line stops the boot naming the file and the line); each forwarding core then
//! applies the same files to its own instance with [`apply`], after its keys. A declared file
//! the bundle does not carry leaves the NF as its keys made it.

use core::fmt;

/// Why a file's parser refused its text: the line (1-based; 0 for the file as a whole) and
/// what the file takes there.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct FileError {
    /// The line at fault, from 1; 0 when no one line is (too many lines, a missing one).
    pub line: usize,
    /// What the file takes there (for the boot's `config error`).
    pub expected: &'static str,
}

/// One file a network function declares: its name in the bundle (`[a-z0-9_]`, 1..=32 bytes,
/// not a stock NF's file) and its parser, which reads the whole text (every line up to the
/// next `--- `) into the NF's state `C`.
///
/// ```
/// use netstack::config::nf_files::{FileError, NfFile};
///
/// #[derive(Default)]
/// struct Filter { ports: Vec<u16> }
/// const FILES: &[NfFile<Filter>] = &[NfFile::new("blocked_ports", |f, text| {
///     for (i, line) in text.lines().enumerate() {
///         let port = line.trim().parse().map_err(|_| FileError {
///             line: i + 1,
///             expected: "a port number in 0..=65535",
///         })?;
///         f.ports.push(port);
///     }
///     Ok(())
/// })];
/// # let mut f = Filter::default();
/// # (FILES[0].parse)(&mut f, "5000\n6000\n").unwrap();
/// # assert_eq!(f.ports, [5000, 6000]);
/// ```
pub struct NfFile<C: ?Sized> {
    /// The name after `--- ` in the bundle.
    pub name: &'static str,
    /// Read the file's text into the NF's state, or say which line is wrong.
    pub parse: fn(&mut C, &str) -> Result<(), FileError>,
}

impl<C: ?Sized> Clone for NfFile<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: ?Sized> Copy for NfFile<C> {}

impl<C: ?Sized> NfFile<C> {
    /// A file named `name`, read by `parse`.
    pub const fn new(name: &'static str, parse: fn(&mut C, &str) -> Result<(), FileError>) -> Self {
        NfFile { name, parse }
    }
}

/// A declared file its parser refused: the file's name and why.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct BadFile {
    /// The file.
    pub name: &'static str,
    /// Where and why.
    pub error: FileError,
}

impl fmt::Display for BadFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error.line {
            0 => write!(f, "file `{}`: expected {}", self.name, self.error.expected),
            n => write!(
                f,
                "file `{}` line {n}: expected {}",
                self.name, self.error.expected
            ),
        }
    }
}

/// The names of a network function's files, as the bundle reader looks them up (a
/// [`FileTable`]'s, or both parts' of a composition, the unikernel's `nf::Chain`).
pub trait NfFileNames {
    /// The file named `name`, if it is one of these: its name as declared.
    fn find(&self, name: &str) -> Option<&'static str>;
    /// Call `each` with every file's name, in order.
    fn names(&self, each: &mut dyn FnMut(&'static str));
}

/// A network function's files over its state: read by name.
pub trait NfFileSet: NfFileNames {
    /// Read `text` as file `name` (one [`NfFileNames::find`] knows; another changes nothing)
    /// into the state.
    ///
    /// # Errors
    /// The file's parser's [`FileError`].
    fn parse(&mut self, name: &str, text: &str) -> Result<(), FileError>;
}

/// One network function's file table, over its state (`S` = `&mut C`: an [`NfFileSet`]) or
/// over nothing (`S` = `()`: names only).
pub struct FileTable<'n, C: ?Sized, S> {
    /// Its files.
    pub files: &'n [NfFile<C>],
    /// The state the files are read into (`&mut C`), or `()`.
    pub state: S,
}

impl<C: ?Sized, S> NfFileNames for FileTable<'_, C, S> {
    fn find(&self, name: &str) -> Option<&'static str> {
        self.files.iter().find(|f| f.name == name).map(|f| f.name)
    }

    fn names(&self, each: &mut dyn FnMut(&'static str)) {
        for f in self.files {
            each(f.name);
        }
    }
}

impl<C: ?Sized> NfFileSet for FileTable<'_, C, &mut C> {
    fn parse(&mut self, name: &str, text: &str) -> Result<(), FileError> {
        match self.files.iter().find(|f| f.name == name) {
            Some(f) => (f.parse)(self.state, text),
            None => Ok(()),
        }
    }
}

/// Most files [`apply`] reads into one NF: at least what a bundle carries
/// (`bundle::MAX_FILES`, checked there).
pub const MAX_NF_FILES: usize = 8;

/// Apply the bundle's files (`carried`: name and text, as [`super::bundle::Bundle::files`]
/// yields them) that `files` declares, through it, in `files`' order; others are skipped.
///
/// # Errors
/// [`BadFile`]: the first file whose parser refuses its text.
pub fn apply<'t>(
    carried: impl Iterator<Item = (&'static str, &'t str)> + Clone,
    files: &mut dyn NfFileSet,
) -> Result<(), BadFile> {
    let mut order: heapless::Vec<&'static str, MAX_NF_FILES> = heapless::Vec::new();
    files.names(&mut |n| {
        if carried.clone().any(|(c, _)| c == n) {
            // At most one per carried file, and a bundle carries at most MAX_NF_FILES.
            let _ = order.push(n);
        }
    });
    for name in order {
        if let Some((_, text)) = carried.clone().find(|&(n, _)| n == name) {
            files
                .parse(name, text)
                .map_err(|error| BadFile { name, error })?;
        }
    }
    Ok(())
}
