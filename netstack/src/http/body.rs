//! A `PUT` body's progress ([`PutBody`]): its bytes counted as they arrive and each line checked
//! as it completes, in the file's syntax (the routes file's with the ports' route checks, or
//! the ACL's rules file's), so a bad line is answered at once. The head that admits the body
//! is the parent module's.

use super::*;

/// A `PUT` body on its way in: how much arrived, and its lines checked as they complete (the
/// routes file's syntax, `netstack::config::parse_routes_file`; or the rules file's,
/// `netstack::acl::rules`, with its checks across lines: one `default`, at most
/// [`MAX_RULES`] rules), so a bad one is named without a second pass. The bytes live in the
/// caller's buffer of the body's length; bounded work per call: the bytes that arrived, each
/// scanned for its newline once (a line's start is kept, where the scan stopped too), plus
/// one check of each line they complete (at most [`LINE_MAX`] bytes).
#[derive(Clone, Debug)]
pub struct PutBody {
    /// The file it replaces.
    kind: PutKind,
    /// The body's length.
    len: usize,
    /// Bytes received so far.
    got: usize,
    /// Where the line not yet checked starts.
    line_start: usize,
    /// Bytes from `line_start` up to here hold no newline (the scan resumes here).
    scanned: usize,
    /// Lines checked so far.
    lines: usize,
    /// Rules seen so far (a rules file), timeouts lines (the NAT's: at most one).
    rules: usize,
    /// The line of the `default` seen (a rules file).
    default_line: Option<usize>,
    /// The first bad line, named.
    bad: Option<heapless::String<BAD_LINE_MAX>>,
    /// The router's ports, to check each route as it arrives (`check_route`); without them
    /// (a rules file) only the syntax is checked.
    routes: Option<RouteCheck>,
}

impl PutBody {
    /// A body of `len` bytes for the file `kind`, none received.
    pub fn new(kind: PutKind, len: usize) -> PutBody {
        PutBody {
            kind,
            len,
            got: 0,
            line_start: 0,
            scanned: 0,
            lines: 0,
            rules: 0,
            default_line: None,
            bad: None,
            routes: None,
        }
    }

    /// Check each route of a routes body against `ports` as its line arrives (duplicates are
    /// found by the build, which names the line and the prefix); `None`: the syntax only.
    pub fn with_routes(mut self, ports: Option<RouteCheck>) -> PutBody {
        self.routes = ports;
        self
    }

    /// The file it replaces.
    pub fn kind(&self) -> PutKind {
        self.kind
    }

    /// Lines checked so far.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Bytes received so far: the next ones go to `body[got..]`.
    pub fn got(&self) -> usize {
        self.got
    }

    /// `n` more bytes arrived at `body[got..]` (`body`: the body's buffer, its length's
    /// worth): check the lines they complete. `None` while bytes are missing; once complete,
    /// `Ok` for a clean body or the 400 naming its first bad line (the rest of the body is
    /// received but not checked). A line longer than [`LINE_MAX`] is the 400 at once, before
    /// the body is complete: the caller answers it and stops reading into the buffer.
    pub fn received(&mut self, body: &[u8], n: usize) -> Option<Result<(), Refusal>> {
        self.got = (self.got + n).min(self.len).min(body.len());
        let complete = self.got == self.len;
        while self.bad.is_none() {
            let from = self.scanned.max(self.line_start);
            let end = match body[from..self.got].iter().position(|&c| c == b'\n') {
                Some(k) => from + k,
                None if complete && self.line_start < self.got => self.got,
                None => {
                    self.scanned = self.got;
                    break;
                }
            };
            self.lines += 1;
            if end - self.line_start > LINE_MAX {
                // Over the cap with its newline in the same read: as early as without it.
                self.bad = Some(self.too_long());
                self.line_start = (end + 1).min(self.got);
                return Some(Err(self.refusal()));
            }
            self.bad = self.bad_line(&body[self.line_start..end]);
            self.line_start = (end + 1).min(self.got);
            if end == self.got {
                break;
            }
        }
        if self.bad.is_none() && self.got - self.line_start > LINE_MAX {
            // No newline yet, and already over the cap: named now, not after megabytes.
            self.lines += 1;
            self.bad = Some(self.too_long());
            return Some(Err(self.refusal()));
        }
        if !complete {
            return None;
        }
        Some(match &self.bad {
            None => Ok(()),
            Some(_) => Err(self.refusal()),
        })
    }

    /// The 400 naming the first bad line.
    fn refusal(&self) -> Refusal {
        let stays = match self.kind {
            PutKind::Routes => "the published FIB stays",
            PutKind::Rules => "the published rules stay",
            PutKind::NatTimeouts => "the timeouts stay",
            PutKind::NfFile(_) => "the published files stay",
        };
        let why = self.bad.as_deref().unwrap_or("");
        Refusal::new(
            Status::BadRequest,
            true,
            format_args!("PUT {}: {why}; {stays}", self.kind.path()),
        )
    }

    /// Why the line just counted is bad: longer than [`LINE_MAX`].
    fn too_long(&self) -> heapless::String<BAD_LINE_MAX> {
        let mut why = heapless::String::new();
        let _ = write!(
            why,
            "{} line {}: longer than {LINE_MAX} bytes",
            self.kind.line_name(),
            self.lines
        );
        why
    }

    /// Why the line just counted (`line`, without its newline) is bad, or `None`.
    fn bad_line(&mut self, line: &[u8]) -> Option<heapless::String<BAD_LINE_MAX>> {
        let n = self.lines;
        let mut why = heapless::String::new();
        let Ok(text) = core::str::from_utf8(line) else {
            let _ = write!(why, "{} line {n}: not UTF-8", self.kind.line_name());
            return Some(why);
        };
        let shown = &text[..text.floor_char_boundary(80)];
        match self.kind {
            // The live reload builds the IPv4 FIB only: an IPv6 line is refused, not dropped.
            PutKind::Routes if crate::router::setup6::is_ipv6_line(text) => {
                let _ = write!(
                    why,
                    "routes line {n}: `{shown}`: IPv6 routes are read at boot only (the routes file, route=)"
                );
            }
            PutKind::Routes => match parse_routes_file(text).next() {
                Some(Err((_, t, e))) => {
                    let _ = write!(
                        why,
                        "routes line {n}: `{}`: {e} (expected PREFIX/LEN,GATEWAY)",
                        &t[..t.floor_char_boundary(80)]
                    );
                }
                Some(Ok((_, (net, gw)))) => {
                    if let Some(Err(e)) = self.routes.map(|p| p.check(net, gw)) {
                        let _ = write!(why, "routes line {n}: `{net},{gw}`: {e}");
                    }
                }
                None => {}
            },
            PutKind::Rules => {
                let error = match parse_line(text) {
                    Ok(None) => None,
                    Ok(Some(RuleLine::Default(_))) => match self.default_line {
                        Some(first) => Some(RuleError::RepeatedDefault(first)),
                        None => {
                            self.default_line = Some(n);
                            None
                        }
                    },
                    Ok(Some(RuleLine::Rule(_))) if self.rules == MAX_RULES => {
                        Some(RuleError::TooManyRules)
                    }
                    Ok(Some(RuleLine::Rule(_))) => {
                        self.rules += 1;
                        None
                    }
                    Err(e) => Some(e),
                };
                if let Some(e) = error {
                    let _ = write!(why, "rules line {n}: `{}`: {e}", shown.trim());
                }
            }
            // One line of four timeouts; comments and blank lines around it.
            PutKind::NatTimeouts => {
                let t = text.trim();
                if t.is_empty() || t.starts_with('#') {
                } else if self.rules == 1 {
                    let _ = write!(
                        why,
                        "timeouts line {n}: `{t}`: one line of EST,TRANS,UDP,ICMP only"
                    );
                } else if let Err(expected) = crate::config::nat::parse_timeouts(t) {
                    let _ = write!(why, "timeouts line {n}: `{t}`: expected {expected}");
                } else {
                    self.rules = 1;
                }
            }
            // The NF's parser reads the whole text once it is complete (the kernel's part):
            // here a line is UTF-8 and within `LINE_MAX`, no more.
            PutKind::NfFile(_) => {}
        }
        (!why.is_empty()).then_some(why)
    }
}

impl PutKind {
    /// What a bad line's message calls the file: `routes`, `rules`, `timeouts`, or an NF's
    /// file by its name (`file `blocked_ports``).
    fn line_name(self) -> LineName {
        LineName(self)
    }
}

/// [`PutKind::line_name`]'s text.
struct LineName(PutKind);

impl core::fmt::Display for LineName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            PutKind::Routes => f.write_str("routes"),
            PutKind::Rules => f.write_str("rules"),
            PutKind::NatTimeouts => f.write_str("timeouts"),
            PutKind::NfFile(name) => write!(f, "file `{name}`"),
        }
    }
}
