//! `mode=nat`'s settings, its keys ([`KEY_SET`]) and their values' parsers: the NAT44 gateway's outside address pool, its dynamic port range, its
//! session table's size, its filtering, its timeouts and its static port forwards
//! ([`NatSettings`], read by the kernel's NAT network function into a
//! [`crate::nat::NatConfig`] per core). Each key is parsed on its own here; whether the
//! forwards fit the pool and the port range is [`crate::nat::Nat::new`]'s check, which the
//! boot runs before any core forwards.

use super::keys::{Key, KeyError, KeySet, Owned, Owner};
use super::{Config, ConfigError, Mode};
use crate::nat::ports::MAX_POOL;
use crate::nat::{Filtering, Forward, Timeouts};
use crate::wire::{IPPROTO_TCP, IPPROTO_UDP};
use core::net::Ipv4Addr;

/// Key of the NAT's pairing hash (which pool address an inside address gets, RFC 4787
/// REQ-2, `netstack::nat::ports::paired_address`): fixed, so the pairing is the same on every
/// core and every boot, and the benchmark's expected frame can name it. The tables' hashes take
/// a per-boot seed.
pub const PAIRING_KEY: u64 = 0x6761_6e6e_6574_6e61;

/// Most `nat_forward=` keys on one command line.
pub const MAX_CMDLINE_FORWARDS: usize = 16;
/// Default first port of the dynamic range (`nat_ports=`): the ports below 1,024 stay free for
/// static forwards.
pub const DEFAULT_PORT_LO: u16 = 1024;
/// Default last port of the dynamic range.
pub const DEFAULT_PORT_HI: u16 = 65535;
/// Default sessions per forwarding core (`nat_sessions=`): 16,384 sessions take 2.2 MiB
/// (`NatStorage::bytes`: 136 bytes a session with its mapping, plus the buckets).
pub const DEFAULT_SESSIONS: u32 = 16_384;
/// Most sessions per core: 1,048,576 take 143 MiB.
pub const MAX_SESSIONS: u32 = 1 << 20;

/// The NAT's settings from the command line (`mode=nat`).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct NatSettings {
    /// `nat_pool=A.B.C.D[,A.B.C.D…]` (1 to [`MAX_POOL`] addresses, host order): the outside
    /// addresses, paired to inside addresses (RFC 4787 REQ-2); required with `mode=nat`.
    pub pool: heapless::Vec<u32, MAX_POOL>,
    /// `nat_ports=LO-HI` (default [`DEFAULT_PORT_LO`]-[`DEFAULT_PORT_HI`]): the dynamic range
    /// the mappings' outside ports and ICMP identifiers come from.
    pub port_lo: u16,
    /// Last port of the dynamic range.
    pub port_hi: u16,
    /// `nat_sessions=N` (1..=[`MAX_SESSIONS`], default [`DEFAULT_SESSIONS`]): session table
    /// entries per forwarding core (as many mappings again), allocated at boot.
    pub sessions: u32,
    /// `nat_filtering=apdf|eif` (default `apdf`): address-and-port-dependent or
    /// endpoint-independent filtering (RFC 4787 §5, REQ-8).
    pub filtering: Filtering,
    /// `nat_timeouts=EST,TRANS,UDP,ICMP` (seconds, each 1..=86400; default the RFCs'
    /// minimums, [`Timeouts::default`]): TCP established, TCP transitory, UDP, ICMP query.
    pub timeouts: Timeouts,
    /// `nat_forward=PROTO:OUTSIDE:PORT,INSIDE:PORT` (repeatable, up to
    /// [`MAX_CMDLINE_FORWARDS`]; `PROTO` `tcp` or `udp`): static port forwards (DNAT).
    pub forwards: heapless::Vec<Forward, MAX_CMDLINE_FORWARDS>,
}

impl Default for NatSettings {
    fn default() -> NatSettings {
        NatSettings {
            pool: heapless::Vec::new(),
            port_lo: DEFAULT_PORT_LO,
            port_hi: DEFAULT_PORT_HI,
            sessions: DEFAULT_SESSIONS,
            filtering: Filtering::AddressAndPortDependent,
            timeouts: Timeouts::default(),
            forwards: heapless::Vec::new(),
        }
    }
}

/// What a refused value should have been (the key's `KeyError::Expected`).
pub type Expected = &'static str;

/// An IPv4 address in host order, else `expected`.
fn addr(v: &str, expected: Expected) -> Result<u32, Expected> {
    v.parse::<Ipv4Addr>().map(u32::from).map_err(|_| expected)
}

/// A port 1..=65535, else `expected`.
fn port(v: &str, expected: Expected) -> Result<u16, Expected> {
    v.parse::<u16>().ok().filter(|&p| p != 0).ok_or(expected)
}

const POOL: &str = "1 to 16 distinct addresses like 192.0.2.1,192.0.2.2";
const PORTS: &str = "LO-HI like 1024-65535 (1 <= LO <= HI)";
const SESSIONS: &str = "sessions per core, an integer in 1..=1048576";
const TIMEOUTS: &str = "EST,TRANS,UDP,ICMP in seconds like 7440,240,300,60 (each 1..=86400)";
const FORWARD: &str = "PROTO:OUTSIDE:PORT,INSIDE:PORT like tcp:192.0.2.1:80,10.0.0.2:8080";

/// `nat_forward=`'s value.
pub fn parse_forward(v: &str) -> Result<Forward, Expected> {
    let bad = FORWARD;
    let (proto, rest) = v.split_once(':').ok_or(bad)?;
    let proto = match proto {
        "tcp" => IPPROTO_TCP,
        "udp" => IPPROTO_UDP,
        _ => return Err(bad),
    };
    let (outside, inside) = rest.split_once(',').ok_or(bad)?;
    let (oa, op) = outside.split_once(':').ok_or(bad)?;
    let (ia, ip) = inside.split_once(':').ok_or(bad)?;
    Ok(Forward {
        proto,
        outside_addr: addr(oa, FORWARD)?,
        outside_port: port(op, FORWARD)?,
        inside_addr: addr(ia, FORWARD)?,
        inside_port: port(ip, FORWARD)?,
    })
}

/// `nat_pool=`'s value: 1 to [`MAX_POOL`] distinct unicast-looking addresses (not
/// `0.0.0.0`, not `255.255.255.255`).
pub fn parse_pool(v: &str) -> Result<heapless::Vec<u32, MAX_POOL>, Expected> {
    let mut pool = heapless::Vec::new();
    for a in v.split(',') {
        let a = addr(a, POOL)?;
        if pool.contains(&a) || a == 0 || a == u32::MAX {
            return Err(POOL);
        }
        pool.push(a).map_err(|_| POOL)?;
    }
    Ok(pool)
}

/// `nat_ports=`'s value: `(LO, HI)`, 1 ≤ LO ≤ HI.
pub fn parse_ports(v: &str) -> Result<(u16, u16), Expected> {
    let (lo, hi) = v.split_once('-').ok_or(PORTS)?;
    let (lo, hi) = (port(lo, PORTS)?, port(hi, PORTS)?);
    if lo > hi {
        return Err(PORTS);
    }
    Ok((lo, hi))
}

/// `nat_sessions=`'s value.
pub fn parse_sessions(v: &str) -> Result<u32, Expected> {
    v.parse()
        .ok()
        .filter(|n| (1..=MAX_SESSIONS).contains(n))
        .ok_or(SESSIONS)
}

/// `nat_filtering=`'s value.
pub fn parse_filtering(v: &str) -> Result<Filtering, Expected> {
    match v {
        "apdf" => Ok(Filtering::AddressAndPortDependent),
        "eif" => Ok(Filtering::EndpointIndependent),
        _ => Err("apdf or eif"),
    }
}

/// `nat_timeouts=`'s value.
pub fn parse_timeouts(v: &str) -> Result<Timeouts, Expected> {
    let mut t = [0u32; 4];
    let mut parts = v.split(',');
    for slot in &mut t {
        *slot = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|n| (1..=86_400).contains(n))
            .ok_or(TIMEOUTS)?;
    }
    if parts.next().is_some() {
        return Err(TIMEOUTS);
    }
    Ok(Timeouts {
        tcp_established: t[0],
        tcp_transitory: t[1],
        udp: t[2],
        icmp: t[3],
    })
}

/// `mode=nat`'s keys.
const KEYS: &[Key<NatSettings>] = &[
    Key::new("nat_pool", |n, v| {
        n.pool = parse_pool(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::new("nat_ports", |n, v| {
        (n.port_lo, n.port_hi) = parse_ports(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::new("nat_sessions", |n, v| {
        n.sessions = parse_sessions(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::new("nat_filtering", |n, v| {
        n.filtering = parse_filtering(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::new("nat_timeouts", |n, v| {
        n.timeouts = parse_timeouts(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::repeated("nat_forward", |n, v| {
        let f = parse_forward(v).map_err(KeyError::Expected)?;
        n.forwards.push(f).map_err(|_| KeyError::TooMany)
    }),
];

/// The NAT's keys ([`NatSettings`], [`Config::nat`]); `nat_pool=` is required.
pub const KEY_SET: KeySet = KeySet::new(
    Owner::Nf(&[Mode::Nat]),
    &Owned {
        keys: KEYS,
        settings: |c| &mut c.nat,
        check,
    },
);

/// `nat_pool=` given.
fn check(c: &Config) -> Result<(), ConfigError<'static>> {
    if c.nat.pool.is_empty() {
        return Err(ConfigError::Missing {
            key: "nat_pool",
            because: "with mode=nat",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Mode};
    use crate::nat::{Filtering, Forward};
    use crate::wire::IPPROTO_TCP;

    #[test]
    fn the_nat_keys_parse_into_its_settings() {
        let c = Config::parse(
            "mode=nat nat_pool=192.0.2.1,192.0.2.2 nat_ports=2000-2999 nat_sessions=100 nat_filtering=eif nat_timeouts=600,30,20,10 nat_forward=tcp:192.0.2.1:80,10.0.0.2:8080",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Nat);
        let n = &c.nat;
        assert_eq!(&n.pool[..], &[0xc000_0201, 0xc000_0202]);
        assert_eq!((n.port_lo, n.port_hi, n.sessions), (2000, 2999, 100));
        assert_eq!(n.filtering, Filtering::EndpointIndependent);
        let t = n.timeouts;
        assert_eq!(
            (t.tcp_established, t.tcp_transitory, t.udp, t.icmp),
            (600, 30, 20, 10)
        );
        assert_eq!(
            &n.forwards[..],
            &[Forward {
                proto: IPPROTO_TCP,
                outside_addr: 0xc000_0201,
                outside_port: 80,
                inside_addr: 0x0a00_0002,
                inside_port: 8080,
            }]
        );
        // Defaults: the RFCs' timeouts, APDF, 1024-65535.
        let d = Config::parse("mode=nat nat_pool=192.0.2.1").unwrap().nat;
        assert_eq!((d.port_lo, d.port_hi), (1024, 65535));
        assert_eq!(d.filtering, Filtering::AddressAndPortDependent);
        assert!(d.timeouts.meets_rfcs());
    }

    #[test]
    fn bad_nat_values_and_a_missing_pool_are_named() {
        let bad = |line: &'static str, key: &str| match Config::parse(line) {
            Err(ConfigError::BadValue { key: k, .. }) => assert_eq!(k, key, "{line}"),
            other => panic!("{line}: {other:?}"),
        };
        bad("mode=nat nat_pool=192.0.2.1,192.0.2.1", "nat_pool");
        bad("mode=nat nat_pool=0.0.0.0", "nat_pool");
        bad(
            "mode=nat nat_pool=1.1.1.1,1.1.1.2,1.1.1.3,1.1.1.4,1.1.1.5,1.1.1.6,1.1.1.7,1.1.1.8,1.1.1.9,1.1.1.10,1.1.1.11,1.1.1.12,1.1.1.13,1.1.1.14,1.1.1.15,1.1.1.16,1.1.1.17",
            "nat_pool",
        );
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_ports=3000-2000",
            "nat_ports",
        );
        bad("mode=nat nat_pool=192.0.2.1 nat_ports=0-2000", "nat_ports");
        bad("mode=nat nat_pool=192.0.2.1 nat_sessions=0", "nat_sessions");
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_filtering=full",
            "nat_filtering",
        );
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_timeouts=1,2,3",
            "nat_timeouts",
        );
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_timeouts=1,2,3,0",
            "nat_timeouts",
        );
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_forward=icmp:192.0.2.1:1,10.0.0.2:1",
            "nat_forward",
        );
        bad(
            "mode=nat nat_pool=192.0.2.1 nat_forward=tcp:192.0.2.1:80",
            "nat_forward",
        );
        assert_eq!(
            Config::parse("mode=nat").unwrap_err(),
            ConfigError::Missing {
                key: "nat_pool",
                because: "with mode=nat"
            }
        );
        // Several cores per pair share the flows (hand-offs): allowed.
        assert!(Config::parse("mode=nat nat_pool=192.0.2.1 queues=2").is_ok());
        // The NAT's keys belong to mode=nat.
        assert!(matches!(
            Config::parse("mode=l2 nat_pool=192.0.2.1"),
            Err(ConfigError::Misplaced {
                key: "nat_pool",
                ..
            })
        ));
    }
}
