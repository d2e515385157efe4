//! What a management plane serves: the files a network function lets `PUT` replace
//! ([`PutKind`]: the router's routes, the ACL's rules, the NAT's timeouts, an image's own NF's
//! files) and, for one network function, the set of them with the bearer token
//! ([`PutFiles`]), with the paths and names its messages use.

use super::*;
use crate::config::nf_files::MAX_NF_FILES;

/// A file a network function lets `PUT` replace.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PutKind {
    /// The router's routes file, `PUT /routes` (`PREFIX/LEN,GATEWAY` per line).
    Routes,
    /// The ACL firewall's rules file, `PUT /rules` (`netstack::acl`'s rules syntax).
    Rules,
    /// The NAT's timeouts, `PUT /nat_timeouts`: one line `EST,TRANS,UDP,ICMP` in seconds, as
    /// the `nat_timeouts=` key (`netstack::config::nat::parse_timeouts`); `#` comments.
    NatTimeouts,
    /// A file of an image's own network function, `PUT /NAME` (its name as the NF declares
    /// it: `crate::config::nf_files::NfFile`): its text, as the appliance bundle's `--- NAME`
    /// carries it. Here only each line's length and UTF-8 are checked; the NF's parser reads
    /// the whole text once it is complete (the kernel's part).
    NfFile(&'static str),
}

/// A file's path (`/routes`, `/NAME`), as [`PutKind::path`] writes it.
#[derive(Copy, Clone, Debug)]
pub struct FilePath(PutKind);

impl core::fmt::Display for FilePath {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            PutKind::NfFile(name) => write!(f, "/{name}"),
            k => f.write_str(k.stock_path()),
        }
    }
}

impl PutKind {
    /// The stock files, in the order [`PutKind::at`] looks them up.
    const STOCK: [PutKind; 3] = [PutKind::Routes, PutKind::Rules, PutKind::NatTimeouts];

    /// The path it is `PUT` at.
    pub const fn path(self) -> FilePath {
        FilePath(self)
    }

    /// A stock file's path (`""` for an NF's own file).
    const fn stock_path(self) -> &'static str {
        match self {
            PutKind::Routes => "/routes",
            PutKind::Rules => "/rules",
            PutKind::NatTimeouts => "/nat_timeouts",
            PutKind::NfFile(_) => "",
        }
    }

    /// Whether `path` (no query) is this file's.
    fn is_at(self, path: &str) -> bool {
        match self {
            PutKind::NfFile(name) => path.strip_prefix('/') == Some(name),
            k => k.stock_path() == path,
        }
    }

    /// The file, as an error names it.
    pub const fn file(self) -> &'static str {
        match self {
            PutKind::Routes => "routes file",
            PutKind::Rules => "rules file",
            PutKind::NatTimeouts => "timeouts",
            PutKind::NfFile(_) => "file",
        }
    }

    /// Whose file it is, as an error names it.
    pub const fn owner(self) -> &'static str {
        match self {
            PutKind::Routes => "the router's",
            PutKind::Rules => "the ACL's",
            PutKind::NatTimeouts => "the NAT's",
            PutKind::NfFile(_) => "the network function's",
        }
    }

    /// What a `PUT` of it publishes, as an error names it (an NF's files share one
    /// generation).
    pub const fn published(self) -> &'static str {
        match self {
            PutKind::Routes => "FIB",
            PutKind::Rules => "rule set",
            PutKind::NatTimeouts => "timeouts",
            PutKind::NfFile(_) => "files",
        }
    }

    /// The header field of a `GET` answer ([`file_head`]) that counts the entries installed
    /// (an NF's file: its lines).
    pub const fn count_field(self) -> &'static str {
        match self {
            PutKind::Routes => "X-Routes",
            PutKind::Rules => "X-Rules",
            PutKind::NatTimeouts => "X-Timeouts",
            PutKind::NfFile(_) => "X-Lines",
        }
    }

    /// The stock file at `path` (its query, after `?`, not looked at), if any; an NF's own
    /// files are found by [`PutFiles::kind_at`].
    pub fn at(path: &str) -> Option<PutKind> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        PutKind::STOCK.into_iter().find(|k| k.is_at(path))
    }
}

/// What `PUT` may replace on a management plane: its network function's files.
#[derive(Clone, Debug)]
pub enum PutFiles {
    /// None: the network function (named, as `mode=` says it) has no file to replace; `PUT`
    /// is 404 naming it.
    None(&'static str),
    /// The router's routes file (`PUT /routes`), with `mgmt_token=`'s bearer token; without
    /// one it is refused (403).
    Routes(Option<MgmtToken>),
    /// The ACL firewall's rules file (`PUT /rules`), with `mgmt_token=`'s bearer token;
    /// without one it is refused (403). Also `mode=firewall` with a rules file (the ACL in
    /// front of the connection tracker).
    Rules(Option<MgmtToken>),
    /// Both (`PUT /routes` and `PUT /rules`, one token): `mode=router` with a rules file,
    /// the ACL in front of the router.
    RoutesAndRules(Option<MgmtToken>),
    /// The NAT's timeouts (`PUT /nat_timeouts`), `mode=nat`.
    NatTimeouts(Option<MgmtToken>),
    /// The files an image's own network function declares (`PUT /NAME` for each), with
    /// `mgmt_token=`'s bearer token. A file named `metrics` is not served (`/metrics` is the
    /// metrics').
    Nf {
        /// The network function's name.
        nf: &'static str,
        /// Its files' names, as it declares them.
        files: heapless::Vec<&'static str, MAX_NF_FILES>,
        /// The bearer token.
        token: Option<MgmtToken>,
    },
}

impl PutFiles {
    /// Whether the file `kind` is served: `Some` with its token (if any), else `None`.
    pub fn serves(&self, kind: PutKind) -> Option<Option<&MgmtToken>> {
        match (self, kind) {
            (PutFiles::Routes(t), PutKind::Routes)
            | (PutFiles::Rules(t), PutKind::Rules)
            | (PutFiles::NatTimeouts(t), PutKind::NatTimeouts)
            | (PutFiles::RoutesAndRules(t), PutKind::Routes | PutKind::Rules) => Some(t.as_ref()),
            (PutFiles::Nf { files, token, .. }, PutKind::NfFile(n)) if files.contains(&n) => {
                Some(token.as_ref())
            }
            _ => None,
        }
    }

    /// The file at `path` (its query not looked at): one of the network function's own, or a
    /// stock file ([`PutKind::at`], maybe not served here).
    pub fn kind_at(&self, path: &str) -> Option<PutKind> {
        let bare = path.split_once('?').map_or(path, |(p, _)| p);
        let own = match self {
            PutFiles::Nf { files, .. } => files
                .iter()
                .map(|&n| PutKind::NfFile(n))
                .find(|k| k.is_at(bare)),
            _ => None,
        };
        own.or_else(|| PutKind::at(path))
    }

    /// Whether it serves any file.
    pub fn any(&self) -> bool {
        match self {
            PutFiles::None(_) => false,
            PutFiles::Nf { files, .. } => !files.is_empty(),
            _ => true,
        }
    }

    /// The paths served, for messages: `/routes`, `/rules`, `/routes and /rules`, an NF's
    /// `/a, /b`, or nothing.
    pub fn paths(&self) -> Paths<'_> {
        Paths(self)
    }

    /// The network function as messages name it: `mode=router` (the stock image's), or an
    /// image's own by its name (`` `port_filter` ``).
    pub fn who(&self) -> Who<'_> {
        Who(self)
    }

    /// The network function, as `mode=` names it (an image's own: its name).
    pub fn mode(&self) -> &'static str {
        match self {
            PutFiles::None(nf) | PutFiles::Nf { nf, .. } => nf,
            PutFiles::Routes(_) | PutFiles::RoutesAndRules(_) => "router",
            PutFiles::Rules(_) => "acl",
            PutFiles::NatTimeouts(_) => "nat",
        }
    }
}

/// The network function of a [`PutFiles`], as [`PutFiles::who`] writes it.
#[derive(Copy, Clone, Debug)]
pub struct Who<'a>(&'a PutFiles);

impl core::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            PutFiles::Nf { nf, .. } => write!(f, "`{nf}`"),
            other => write!(f, "mode={}", other.mode()),
        }
    }
}

/// The paths a [`PutFiles`] serves, as [`PutFiles::paths`] writes them.
#[derive(Copy, Clone, Debug)]
pub struct Paths<'a>(&'a PutFiles);

impl core::fmt::Display for Paths<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            PutFiles::None(_) => Ok(()),
            PutFiles::Routes(_) => f.write_str("/routes"),
            PutFiles::Rules(_) => f.write_str("/rules"),
            PutFiles::RoutesAndRules(_) => f.write_str("/routes and /rules"),
            PutFiles::NatTimeouts(_) => f.write_str("/nat_timeouts"),
            PutFiles::Nf { files, .. } => {
                for (i, n) in files.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}/{n}")?;
                }
                Ok(())
            }
        }
    }
}
