//! The connection table in text, for the console's session listing (issue 38 item 7): one
//! line per entry ([`Line`]) and a filter over entries ([`Filter`]), sans I/O like the router's
//! `show`. A line reads, after `conntrack -L`'s order of fields (protocol, the original
//! direction's tuple, the reply direction's, then state and timer):
//!
//! ```text
//! tcp 192.168.1.2:40000 > 198.51.100.7:80, reply 198.51.100.7:80 > 203.0.113.1:1024, tcp_established, idle 3 s, expires in 7437 s
//! ```
//!
//! The original direction is the inside tuple (as the packet arrived from inside), the reply
//! the outside one (as a reply arrives from outside: for a NAT, to its outside address and
//! port). ICMP queries show their identifier as both ports.

use super::table::{Class, Entry, Timeouts};
use super::Side;
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use core::fmt;
use core::net::Ipv4Addr;

/// The name of `class` in a listing and a filter: `tcp_embryonic`, `tcp_established`,
/// `tcp_closing`, `tcp_closed`, `udp_unreplied`, `udp`, `icmp_unreplied`, `icmp`, `pinned`.
pub const fn class_name(class: Class) -> &'static str {
    match class {
        Class::TcpEmbryonic => "tcp_embryonic",
        Class::TcpEstablished => "tcp_established",
        Class::TcpClosing => "tcp_closing",
        Class::TcpClosed => "tcp_closed",
        Class::UdpUnreplied => "udp_unreplied",
        Class::Udp => "udp",
        Class::IcmpUnreplied => "icmp_unreplied",
        Class::Icmp => "icmp",
        Class::Pinned => "pinned",
    }
}

/// Every class, in [`class_name`]'s order.
const CLASSES: [Class; 9] = [
    Class::TcpEmbryonic,
    Class::TcpEstablished,
    Class::TcpClosing,
    Class::TcpClosed,
    Class::UdpUnreplied,
    Class::Udp,
    Class::IcmpUnreplied,
    Class::Icmp,
    Class::Pinned,
];

/// The protocol's name in a listing: `tcp`, `udp`, `icmp`, else its number.
struct Proto(u8);

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IPPROTO_TCP => f.write_str("tcp"),
            IPPROTO_UDP => f.write_str("udp"),
            IPPROTO_ICMP => f.write_str("icmp"),
            n => write!(f, "proto {n}"),
        }
    }
}

/// One entry in use as a listing line (module doc), at `now_ns` under `timeouts` (the
/// table's). A free slot prints `free`.
pub struct Line<'e, V> {
    /// The entry.
    pub entry: &'e Entry<V>,
    /// The caller's clock, ns (the clock the table is driven with).
    pub now_ns: u64,
    /// The table's timeouts.
    pub timeouts: &'e Timeouts,
}

impl<V> fmt::Display for Line<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(class) = self.entry.class() else {
            return f.write_str("free");
        };
        let (i, o) = (
            self.entry.tuple(Side::Inside),
            self.entry.tuple(Side::Outside),
        );
        write!(
            f,
            "{} {}:{} > {}:{}, reply {}:{} > {}:{}, {}, idle {} s",
            Proto(i.proto),
            Ipv4Addr::from_bits(i.src),
            i.sport,
            Ipv4Addr::from_bits(i.dst),
            i.dport,
            Ipv4Addr::from_bits(o.src),
            o.sport,
            Ipv4Addr::from_bits(o.dst),
            o.dport,
            class_name(class),
            self.now_ns.saturating_sub(self.entry.seen()) / 1_000_000_000
        )?;
        match self.timeouts.of(class) {
            u64::MAX => Ok(()),
            t => write!(
                f,
                ", expires in {} s",
                (self.entry.seen().saturating_add(t)).saturating_sub(self.now_ns) / 1_000_000_000
            ),
        }
    }
}

/// Which entries a listing shows: every condition given holds (none given: all). Written as
/// words, e.g. `tcp port 80 addr 192.168.1.2 class tcp_established`.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct Filter {
    /// The IP protocol number.
    pub proto: Option<u8>,
    /// An address of either tuple, source or destination.
    pub addr: Option<u32>,
    /// A port (ICMP: identifier) of either tuple, source or destination.
    pub port: Option<u16>,
    /// The entry's class.
    pub class: Option<Class>,
}

/// Why a filter's text was refused: the word, and what was expected there.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct FilterError<'t> {
    /// The word refused (empty: the text ended where a value was due).
    pub word: &'t str,
    /// What the filter takes there.
    pub expected: &'static str,
}

impl fmt::Display for FilterError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.word.is_empty() {
            write!(f, "expected {} at the end", self.expected)
        } else {
            write!(f, "`{}`: expected {}", self.word, self.expected)
        }
    }
}

impl Filter {
    /// Parse `text`: words `tcp`, `udp`, `icmp`, `proto N`, `addr A.B.C.D`, `port N`, `class
    /// NAME` ([`class_name`]), in any order, each at most once.
    ///
    /// # Errors
    /// [`FilterError`]: an unknown word, a bad or missing value, a condition given twice.
    pub fn parse(text: &str) -> Result<Filter, FilterError<'_>> {
        const WORDS: &str = "tcp, udp, icmp, proto N, addr A.B.C.D, port N or class NAME";
        let mut f = Filter::default();
        let mut words = text.split_ascii_whitespace();
        while let Some(w) = words.next() {
            let twice = FilterError {
                word: w,
                expected: "each condition once (tcp, udp, icmp and proto N are one: the protocol)",
            };
            let mut value = |expected| words.next().ok_or(FilterError { word: "", expected });
            match w {
                "tcp" | "udp" | "icmp" | "proto" => {
                    let p = match w {
                        "tcp" => IPPROTO_TCP,
                        "udp" => IPPROTO_UDP,
                        "icmp" => IPPROTO_ICMP,
                        _ => {
                            let v = value("a protocol number in 0..=255")?;
                            v.parse().map_err(|_| FilterError {
                                word: v,
                                expected: "a protocol number in 0..=255",
                            })?
                        }
                    };
                    if f.proto.replace(p).is_some() {
                        return Err(twice);
                    }
                }
                "addr" => {
                    let v = value("an IPv4 address")?;
                    let a: Ipv4Addr = v.parse().map_err(|_| FilterError {
                        word: v,
                        expected: "an IPv4 address",
                    })?;
                    if f.addr.replace(a.to_bits()).is_some() {
                        return Err(twice);
                    }
                }
                "port" => {
                    let v = value("a port in 0..=65535")?;
                    let p = v.parse().map_err(|_| FilterError {
                        word: v,
                        expected: "a port in 0..=65535",
                    })?;
                    if f.port.replace(p).is_some() {
                        return Err(twice);
                    }
                }
                "class" => {
                    let v = value("a class name")?;
                    let c = CLASSES
                        .into_iter()
                        .find(|&c| class_name(c) == v)
                        .ok_or(FilterError {
                            word: v,
                            expected: "tcp_embryonic, tcp_established, tcp_closing, tcp_closed, udp_unreplied, udp, icmp_unreplied, icmp or pinned",
                        })?;
                    if f.class.replace(c).is_some() {
                        return Err(twice);
                    }
                }
                _ => {
                    return Err(FilterError {
                        word: w,
                        expected: WORDS,
                    })
                }
            }
        }
        Ok(f)
    }

    /// Whether `entry` (in use) passes every condition; a free slot never does.
    pub fn matches<V>(&self, entry: &Entry<V>) -> bool {
        let Some(class) = entry.class() else {
            return false;
        };
        let tuples = [entry.tuple(Side::Inside), entry.tuple(Side::Outside)];
        self.proto.is_none_or(|p| tuples[0].proto == p)
            && self
                .addr
                .is_none_or(|a| tuples.iter().any(|t| t.src == a || t.dst == a))
            && self
                .port
                .is_none_or(|p| tuples.iter().any(|t| t.sport == p || t.dport == p))
            && self.class.is_none_or(|c| c == class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::table::Table;
    use crate::conntrack::Tuple;
    use std::format;
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec;

    const S: u64 = 1_000_000_000;

    fn ip(s: &str) -> u32 {
        s.parse::<Ipv4Addr>().unwrap().to_bits()
    }

    /// A NAT-shaped TCP entry (inside 192.168.1.2:40000 to 198.51.100.7:80, translated to
    /// 203.0.113.1:1024) and a UDP one, in a table of 4.
    fn two<'a>(e: &'a mut [Entry<u32>], b: &'a mut [u32]) -> (Table<'a, u32>, u32, u32) {
        let mut t = Table::new(e, b, 5, Timeouts::default()).unwrap();
        let inside = Tuple {
            src: ip("192.168.1.2"),
            dst: ip("198.51.100.7"),
            sport: 40000,
            dport: 80,
            proto: IPPROTO_TCP,
        };
        let outside = Tuple {
            src: ip("198.51.100.7"),
            dst: ip("203.0.113.1"),
            sport: 80,
            dport: 1024,
            proto: IPPROTO_TCP,
        };
        let tcp = t
            .insert(
                inside,
                outside,
                Class::TcpEstablished,
                0,
                0,
                1,
                10 * S,
                &mut |_| {},
            )
            .unwrap();
        let u_in = Tuple {
            src: ip("192.168.1.3"),
            dst: ip("192.0.2.53"),
            sport: 5353,
            dport: 53,
            proto: IPPROTO_UDP,
        };
        let u_out = Tuple {
            src: ip("192.0.2.53"),
            dst: ip("203.0.113.1"),
            sport: 53,
            dport: 1025,
            proto: IPPROTO_UDP,
        };
        let udp = t
            .insert(
                u_in,
                u_out,
                Class::UdpUnreplied,
                0,
                0,
                2,
                12 * S,
                &mut |_| {},
            )
            .unwrap();
        (t, tcp, udp)
    }

    #[test]
    fn a_line_names_both_tuples_the_class_and_the_timers() {
        let (mut e, mut b) = (vec![Entry::<u32>::default(); 4], vec![0u32; 4]);
        let (t, tcp, udp) = two(&mut e, &mut b);
        let line = |i| {
            Line {
                entry: t.get(i),
                now_ns: 13 * S,
                timeouts: &t.timeouts,
            }
            .to_string()
        };
        // Established: 2 h 4 min (7,440 s) from its last use at 10 s.
        assert_eq!(
            line(tcp),
            "tcp 192.168.1.2:40000 > 198.51.100.7:80, reply 198.51.100.7:80 > 203.0.113.1:1024, tcp_established, idle 3 s, expires in 7437 s"
        );
        let udp_timeout = t.timeouts.of(Class::UdpUnreplied) / S;
        assert_eq!(
            line(udp),
            format!(
                "udp 192.168.1.3:5353 > 192.0.2.53:53, reply 192.0.2.53:53 > 203.0.113.1:1025, udp_unreplied, idle 1 s, expires in {} s",
                udp_timeout - 1
            )
        );
        let free = Entry::<u32>::default();
        let l = Line {
            entry: &free,
            now_ns: 0,
            timeouts: &t.timeouts,
        };
        assert_eq!(l.to_string(), "free");
    }

    #[test]
    fn a_filter_selects_by_protocol_address_port_and_class() {
        let (mut e, mut b) = (vec![Entry::<u32>::default(); 4], vec![0u32; 4]);
        let (t, tcp, udp) = two(&mut e, &mut b);
        let shown = |text: &str| -> Vec<u32> {
            let f = Filter::parse(text).unwrap();
            t.iter()
                .filter(|(_, e)| f.matches(e))
                .map(|(i, _)| i)
                .collect()
        };
        let mut all = vec![tcp, udp];
        all.sort_unstable();
        let mut got = shown("");
        got.sort_unstable();
        assert_eq!(got, all);
        assert_eq!(shown("tcp"), [tcp]);
        assert_eq!(shown("proto 17"), [udp]);
        // An address or port of either tuple: the outside port the NAT chose, the inside host.
        assert_eq!(shown("port 1025"), [udp]);
        assert_eq!(shown("addr 192.168.1.2"), [tcp]);
        assert_eq!(shown("addr 203.0.113.1 class tcp_established").len(), 1);
        assert_eq!(shown("udp port 80"), Vec::<u32>::new());
        assert!(!Filter::default().matches(&Entry::<u32>::default()));
    }

    #[test]
    fn a_bad_filter_names_its_word() {
        for (text, word, expected) in [
            ("tcpp", "tcpp", "tcp, udp, icmp, proto N, addr A.B.C.D, port N or class NAME"),
            ("port", "", "a port in 0..=65535"),
            ("port 70000", "70000", "a port in 0..=65535"),
            ("addr 10.0.0", "10.0.0", "an IPv4 address"),
            ("tcp udp", "udp", "each condition once (tcp, udp, icmp and proto N are one: the protocol)"),
            ("class syn", "syn", "tcp_embryonic, tcp_established, tcp_closing, tcp_closed, udp_unreplied, udp, icmp_unreplied, icmp or pinned"),
        ] {
            let e = Filter::parse(text).unwrap_err();
            assert_eq!((e.word, e.expected), (word, expected), "{text}");
        }
        assert_eq!(
            Filter::parse("port").unwrap_err().to_string(),
            "expected a port in 0..=65535 at the end"
        );
    }
}
