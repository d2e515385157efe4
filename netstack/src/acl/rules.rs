//! The rules file: one [`Rule`] (or the `default` line) per line, parsed into values; the syntax
//! is in the [module documentation](super#the-rules-file). Errors name the line and the word
//! that is wrong ([`AclError`], [`RuleError`]); no input panics.

use super::{Action, FiveTuple, MAX_RULES};
use crate::router::{parse_ipv4_cidr, Ipv4Net, ParseError};
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use core::net::Ipv4Addr;

/// The IPv4 Protocol values a rule matches.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum Proto {
    /// Any protocol (`proto any`, or no `proto` field).
    Any,
    /// Exactly this Protocol number (`tcp` is 6, `udp` 17, `icmp` 1).
    Is(u8),
}

impl Proto {
    /// Whether Protocol number `p` matches.
    pub const fn matches(self, p: u8) -> bool {
        match self {
            Proto::Any => true,
            Proto::Is(q) => p == q,
        }
    }

    /// Whether this is TCP or UDP, the protocols with ports.
    pub const fn has_ports(self) -> bool {
        matches!(self, Proto::Is(IPPROTO_TCP | IPPROTO_UDP))
    }
}

/// An inclusive range of TCP/UDP ports, `lo..=hi` (host order).
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct PortRange {
    /// Lowest port matched.
    pub lo: u16,
    /// Highest port matched (≥ `lo`).
    pub hi: u16,
}

impl PortRange {
    /// Every port (`any`, or no port field).
    pub const ANY: PortRange = PortRange { lo: 0, hi: 65535 };

    /// Whether this is [`PortRange::ANY`].
    pub const fn is_any(self) -> bool {
        self.lo == 0 && self.hi == 65535
    }

    /// Whether port `p` is in the range.
    pub const fn contains(self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

impl core::fmt::Display for PortRange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.is_any() {
            f.write_str("any")
        } else if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// One rule: an action and what a packet must be for it to apply.
///
/// [`Rule::matches`] is the definition of a match; the classifier ([`super::Acl`]) returns
/// the lowest-indexed rule for which it holds (the tests compare the two).
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct Rule {
    /// What the rule does.
    pub action: Action,
    /// Source prefix (network address: no bits set past the length); `0.0.0.0/0` for any.
    pub src: Ipv4Net,
    /// Destination prefix, as `src`.
    pub dst: Ipv4Net,
    /// Protocol.
    pub proto: Proto,
    /// Source ports; [`PortRange::ANY`] unless `proto` is TCP or UDP.
    pub sport: PortRange,
    /// Destination ports; [`PortRange::ANY`] unless `proto` is TCP or UDP.
    pub dport: PortRange,
}

/// `0.0.0.0/0`.
const ANY_NET: Ipv4Net = Ipv4Net {
    addr: Ipv4Addr::UNSPECIFIED,
    len: 0,
};

impl Rule {
    /// A rule that matches every packet.
    pub const fn any(action: Action) -> Rule {
        Rule {
            action,
            src: ANY_NET,
            dst: ANY_NET,
            proto: Proto::Any,
            sport: PortRange::ANY,
            dport: PortRange::ANY,
        }
    }

    /// Whether packet `t` matches the rule: every field holds.
    pub const fn matches(&self, t: &FiveTuple) -> bool {
        self.src.contains(t.src)
            && self.dst.contains(t.dst)
            && self.proto.matches(t.proto)
            && self.sport.contains(t.sport)
            && self.dport.contains(t.dport)
    }
}

/// Written in the file's syntax, wildcard fields left out (`allow proto tcp dport 80`): the
/// text parses back to the same rule.
impl core::fmt::Display for Rule {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.action.as_str())?;
        if self.src.len > 0 {
            write!(f, " src {}", self.src)?;
        }
        if self.dst.len > 0 {
            write!(f, " dst {}", self.dst)?;
        }
        match self.proto {
            Proto::Any => {}
            Proto::Is(IPPROTO_TCP) => f.write_str(" proto tcp")?,
            Proto::Is(IPPROTO_UDP) => f.write_str(" proto udp")?,
            Proto::Is(IPPROTO_ICMP) => f.write_str(" proto icmp")?,
            Proto::Is(n) => write!(f, " proto {n}")?,
        }
        if !self.sport.is_any() {
            write!(f, " sport {}", self.sport)?;
        }
        if !self.dport.is_any() {
            write!(f, " dport {}", self.dport)?;
        }
        Ok(())
    }
}

/// What one line of the file holds, once blank lines and comments are skipped.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum RuleLine {
    /// A rule.
    Rule(Rule),
    /// `default allow|deny`.
    Default(Action),
}

/// Why a line is not a rule. Words (`&str`) are borrowed from the file's text.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RuleError<'a> {
    /// The first word is not `allow`, `deny` or `default`.
    BadAction(&'a str),
    /// `default` is not followed by `allow` or `deny` (the word found; empty if none).
    BadDefault(&'a str),
    /// A word after `default allow|deny`.
    Extra(&'a str),
    /// A field name this syntax does not have.
    UnknownField(&'a str),
    /// A field name at the end of the line, without its value.
    MissingValue(&'static str),
    /// A field given twice in one rule.
    Repeated(&'static str),
    /// `src` or `dst` is not an IPv4 `PREFIX/LEN` (or `any`); why.
    BadPrefix {
        /// `src` or `dst`.
        field: &'static str,
        /// The value as written.
        value: &'a str,
        /// What is wrong with it (a prefix with host bits set is [`ParseError::HostBitsSet`]).
        why: ParseError,
    },
    /// `src` or `dst` is an IPv6 prefix: not supported yet.
    Ipv6 {
        /// `src` or `dst`.
        field: &'static str,
        /// The value as written.
        value: &'a str,
    },
    /// `proto` is not `tcp`, `udp`, `icmp`, `any` or a number 0..=255.
    BadProto(&'a str),
    /// `sport` or `dport` is not `N`, `N-M` (0..=65535, N ≤ M) or `any`.
    BadPorts {
        /// `sport` or `dport`.
        field: &'static str,
        /// The value as written.
        value: &'a str,
    },
    /// A port field other than `any` in a rule whose protocol is not TCP or UDP.
    PortsNeedTcpUdp(&'static str),
    /// A second `default` line (the line of the first).
    RepeatedDefault(usize),
    /// The rule would be rule number [`MAX_RULES`] + 1.
    TooManyRules,
}

impl core::fmt::Display for RuleError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RuleError::BadAction(w) => {
                write!(f, "expected allow, deny or default, found `{w}`")
            }
            RuleError::BadDefault("") => f.write_str("default needs allow or deny"),
            RuleError::BadDefault(w) => {
                write!(f, "default takes allow or deny, found `{w}`")
            }
            RuleError::Extra(w) => write!(f, "unexpected `{w}` after the default's action"),
            RuleError::UnknownField(w) => write!(
                f,
                "unknown field `{w}` (fields: src, dst, proto, sport, dport)"
            ),
            RuleError::MissingValue(field) => write!(f, "`{field}` without a value"),
            RuleError::Repeated(field) => write!(f, "`{field}` given twice"),
            RuleError::BadPrefix { field, value, why } => {
                write!(f, "{field} `{value}`: {why}")
            }
            RuleError::Ipv6 { field, value } => {
                write!(f, "{field} `{value}`: IPv6 prefixes are not supported yet")
            }
            RuleError::BadProto(w) => write!(
                f,
                "proto `{w}`: expected tcp, udp, icmp, any or a number 0..=255"
            ),
            RuleError::BadPorts { field, value } => write!(
                f,
                "{field} `{value}`: expected N, N-M (0..=65535, N <= M) or any"
            ),
            RuleError::PortsNeedTcpUdp(field) => {
                write!(f, "`{field}` needs proto tcp or proto udp")
            }
            RuleError::RepeatedDefault(first) => {
                write!(f, "a second default line (the first is line {first})")
            }
            RuleError::TooManyRules => write!(f, "more than {MAX_RULES} rules"),
        }
    }
}

impl core::error::Error for RuleError<'_> {}

/// Why a rules file was not built into an ACL.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum AclError<'a> {
    /// Line `line` (1-based) is not a rule.
    Line {
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        error: RuleError<'a>,
    },
    /// The [`super::Storage`] given to [`super::Acl::build`] is smaller than the file needs.
    Storage {
        /// What the file needs ([`super::Acl::sizes`]).
        need: super::Sizes,
    },
}

impl core::fmt::Display for AclError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AclError::Line { line, error } => write!(f, "rules line {line}: {error}"),
            AclError::Storage { need } => write!(
                f,
                "ACL storage too small: need {} rule entries, {} tuples, {} groups, {} pruning words",
                need.rules, need.tuples, need.groups, need.prune
            ),
        }
    }
}

impl core::error::Error for AclError<'_> {}

/// Read prefix `value` of field `field` (`src` or `dst`): `A.B.C.D/LEN` with no host bits, or
/// `any`. The one place the address family is decided: a value with a `:` is IPv6 (refused
/// with [`RuleError::Ipv6`] until IPv6 rules exist; `::/0` is one).
///
/// # Errors
/// [`RuleError::BadPrefix`], [`RuleError::Ipv6`].
pub fn parse_prefix<'a>(field: &'static str, value: &'a str) -> Result<Ipv4Net, RuleError<'a>> {
    if value == "any" {
        return Ok(ANY_NET);
    }
    if value.contains(':') {
        return Err(RuleError::Ipv6 { field, value });
    }
    let bad = |why| RuleError::BadPrefix { field, value, why };
    let net = parse_ipv4_cidr(value).map_err(bad)?;
    if net.network() != net {
        return Err(bad(ParseError::HostBitsSet));
    }
    Ok(net)
}

/// Decimal digits only (no sign, no spaces), as a `u16` or `u8` wants.
fn number<T: core::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Read protocol `value`: `tcp`, `udp`, `icmp`, `any` or 0..=255.
///
/// # Errors
/// [`RuleError::BadProto`].
pub fn parse_proto(value: &str) -> Result<Proto, RuleError<'_>> {
    Ok(match value {
        "any" => Proto::Any,
        "tcp" => Proto::Is(IPPROTO_TCP),
        "udp" => Proto::Is(IPPROTO_UDP),
        "icmp" => Proto::Is(IPPROTO_ICMP),
        n => Proto::Is(number(n).ok_or(RuleError::BadProto(n))?),
    })
}

/// Read port range `value` of field `field` (`sport` or `dport`): `N`, `N-M` or `any`.
///
/// # Errors
/// [`RuleError::BadPorts`].
pub fn parse_ports<'a>(field: &'static str, value: &'a str) -> Result<PortRange, RuleError<'a>> {
    if value == "any" {
        return Ok(PortRange::ANY);
    }
    let bad = RuleError::BadPorts { field, value };
    let (lo, hi) = value.split_once('-').unwrap_or((value, value));
    match (number(lo), number(hi)) {
        (Some(lo), Some(hi)) if lo <= hi => Ok(PortRange { lo, hi }),
        _ => Err(bad),
    }
}

/// Parse one line of a rules file: `None` for a blank or comment-only line.
///
/// Only the line itself is checked; what spans lines (one `default`, [`MAX_RULES`]) is
/// [`parse_rules`]'s.
///
/// # Errors
/// [`RuleError`] (never `RepeatedDefault` or `TooManyRules`).
pub fn parse_line(line: &str) -> Result<Option<RuleLine>, RuleError<'_>> {
    let text = line.split('#').next().unwrap_or("");
    let mut words = text.split_ascii_whitespace();
    let Some(first) = words.next() else {
        return Ok(None);
    };
    let action = match first {
        "allow" => Action::Allow,
        "deny" => Action::Deny,
        "default" => {
            let a = match words.next() {
                Some("allow") => Action::Allow,
                Some("deny") => Action::Deny,
                w => return Err(RuleError::BadDefault(w.unwrap_or(""))),
            };
            if let Some(w) = words.next() {
                return Err(RuleError::Extra(w));
            }
            return Ok(Some(RuleLine::Default(a)));
        }
        w => return Err(RuleError::BadAction(w)),
    };
    let mut rule = Rule::any(action);
    // Fields seen, by bit: src, dst, proto, sport, dport.
    let mut seen = 0u8;
    while let Some(name) = words.next() {
        let (field, bit) = match name {
            "src" => ("src", 1),
            "dst" => ("dst", 2),
            "proto" => ("proto", 4),
            "sport" => ("sport", 8),
            "dport" => ("dport", 16),
            w => return Err(RuleError::UnknownField(w)),
        };
        if seen & bit != 0 {
            return Err(RuleError::Repeated(field));
        }
        seen |= bit;
        let value = words.next().ok_or(RuleError::MissingValue(field))?;
        match bit {
            1 => rule.src = parse_prefix(field, value)?,
            2 => rule.dst = parse_prefix(field, value)?,
            4 => rule.proto = parse_proto(value)?,
            8 => rule.sport = parse_ports(field, value)?,
            _ => rule.dport = parse_ports(field, value)?,
        }
    }
    if !rule.proto.has_ports() {
        if !rule.sport.is_any() {
            return Err(RuleError::PortsNeedTcpUdp("sport"));
        }
        if !rule.dport.is_any() {
            return Err(RuleError::PortsNeedTcpUdp("dport"));
        }
    }
    Ok(Some(RuleLine::Rule(rule)))
}

/// The lines of rules file `text` that are rules or the default, parsed in order, each with its
/// line number (1-based); see [`parse_rules`].
#[derive(Clone, Debug)]
pub struct Rules<'a> {
    lines: core::iter::Enumerate<core::str::Lines<'a>>,
    rules: usize,
    default_line: Option<usize>,
    failed: bool,
}

/// Parse rules file `text` line by line: an iterator of `(line, RuleLine)` that yields the first
/// error and then ends. Checks what spans lines too: a second `default` line
/// ([`RuleError::RepeatedDefault`]) and a rule past [`MAX_RULES`] ([`RuleError::TooManyRules`]).
pub fn parse_rules(text: &str) -> Rules<'_> {
    Rules {
        lines: text.lines().enumerate(),
        rules: 0,
        default_line: None,
        failed: false,
    }
}

impl<'a> Iterator for Rules<'a> {
    type Item = Result<(usize, RuleLine), AclError<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        for (i, text) in self.lines.by_ref() {
            let line = i + 1;
            let error = match parse_line(text) {
                Ok(None) => continue,
                Ok(Some(RuleLine::Default(_))) if self.default_line.is_some() => {
                    RuleError::RepeatedDefault(self.default_line.unwrap_or(0))
                }
                Ok(Some(RuleLine::Rule(_))) if self.rules == MAX_RULES => RuleError::TooManyRules,
                Ok(Some(l)) => {
                    match l {
                        RuleLine::Default(_) => self.default_line = Some(line),
                        RuleLine::Rule(_) => self.rules += 1,
                    }
                    return Some(Ok((line, l)));
                }
                Err(error) => error,
            };
            self.failed = true;
            return Some(Err(AclError::Line { line, error }));
        }
        None
    }
}
