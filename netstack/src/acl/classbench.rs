//! A deterministic ClassBench-like rule-set generator, and 5-tuples aimed at its rules: the
//! workload of the ACL's tests and of `netstack/benches/acl.rs`.
//!
//! ClassBench (D. E. Taylor, J. S. Turner, "ClassBench: a packet classification benchmark",
//! IEEE INFOCOM 2005) synthesises filter sets from the statistics of real ones. This is not
//! ClassBench, only shaped like its ACL sets: a seeded generator, no seed files, with
//!
//! * prefixes of lengths 8 to 32 on both sides, drawn from weighted length tables (sources
//!   mostly /16, /24 and /32, destinations mostly /24 and /32: 7 × 6 = 42 possible length
//!   pairs; the tests' seed uses 39 in 1,000 rules and all 42 in 10,000), on addresses from
//!   pools with a skewed pick (some addresses recur, so rules share hash entries and nest)
//!   under 16 shared first octets (so prefixes of different lengths overlap);
//! * TCP (60%), UDP (25%), any protocol (10%) and ICMP (5%);
//! * for TCP and UDP, source ports mostly `any` (85%; else `1024-65535` or one port) and
//!   destination ports one well-known or random port (45%), a range (25%: `0-1023`,
//!   `1024-65535` or a random span) or `any` (30%);
//! * 70% `allow`, 30% `deny`, and `default deny`.
//!
//! The crate has no heap: [`generate`] writes the text into a [`core::fmt::Write`] (a `String`
//! on the host), and [`tuples`] reads the rules back from a built [`Acl`].

use super::rules::{PortRange, Proto, Rule};
use super::{Acl, Action, FiveTuple};
use crate::router::Ipv4Net;
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use core::fmt::Write;
use core::net::Ipv4Addr;

/// The seed of the benchmarks' rule sets and tuples (`netstack/benches/acl.rs`, `cargo xtask
/// bench sim --modes acl`, the guest's `mode=acl` benchmark): the one the ACL's tests use.
pub const BENCH_SEED: u64 = 0x00ac_1000;

/// 5-tuples the `mode=acl` benchmarks cycle through ([`tuples`] of this count).
pub const BENCH_TUPLES: usize = 1024;

use crate::rng::mix;
pub use crate::rng::Rng;

/// Source prefix lengths and their weights (percent).
const SRC_LENS: [(u8, u32); 7] = [
    (8, 5),
    (12, 3),
    (16, 17),
    (20, 5),
    (24, 35),
    (28, 10),
    (32, 25),
];
/// Destination prefix lengths and their weights (percent).
const DST_LENS: [(u8, u32); 6] = [(8, 3), (16, 10), (20, 3), (24, 30), (28, 4), (32, 50)];
/// Distinct addresses each side draws from, and the first octets they share.
const SRC_POOL: u32 = 512;
const DST_POOL: u32 = 2048;
const ROOTS: u64 = 16;
/// Destination ports of services, for exact-port rules.
const SERVICES: [u16; 16] = [
    80, 443, 22, 25, 53, 110, 143, 123, 161, 389, 445, 993, 1433, 3306, 5060, 8080,
];

/// Address `j` of side `side`'s pool: one of [`ROOTS`] first octets, random below.
fn pool_addr(seed: u64, side: u64, j: u32) -> u32 {
    let base = mix(seed ^ (side << 62));
    let root = (mix(base ^ (u64::from(j) % ROOTS)) >> 56) as u32;
    let low = mix(base ^ (u64::from(j) << 8) ^ 0xff) as u32;
    (root << 24) | (low & 0x00ff_ffff)
}

/// A prefix of side `side`: a pool address (skewed toward low indices: the smaller of two
/// draws) cut to a length drawn from `lens`.
fn prefix(rng: &mut Rng, seed: u64, side: u64, pool: u32, lens: &[(u8, u32)]) -> Ipv4Net {
    let j = rng.below(pool).min(rng.below(pool));
    let mut w = [0u32; 8];
    for (w, &(_, p)) in w.iter_mut().zip(lens) {
        *w = p;
    }
    let len = lens[rng.weighted(&w[..lens.len()])].0;
    let net = Ipv4Net {
        addr: Ipv4Addr::from_bits(pool_addr(seed, side, j)),
        len,
    };
    net.network()
}

/// A random span `lo..=lo+k` of ports.
fn span(rng: &mut Rng) -> PortRange {
    let lo = rng.below(65536) as u16;
    let width = [16u32, 256, 4096][rng.below(3) as usize];
    let hi = (u32::from(lo) + rng.below(width)).min(65535) as u16;
    PortRange { lo, hi }
}

/// One generated rule.
fn rule(rng: &mut Rng, seed: u64) -> Rule {
    let action = if rng.below(100) < 70 {
        Action::Allow
    } else {
        Action::Deny
    };
    let src = prefix(rng, seed, 0, SRC_POOL, &SRC_LENS);
    let dst = prefix(rng, seed, 1, DST_POOL, &DST_LENS);
    let proto = match rng.weighted(&[60, 25, 10, 5]) {
        0 => Proto::Is(IPPROTO_TCP),
        1 => Proto::Is(IPPROTO_UDP),
        2 => Proto::Any,
        _ => Proto::Is(IPPROTO_ICMP),
    };
    let (mut sport, mut dport) = (PortRange::ANY, PortRange::ANY);
    if proto.has_ports() {
        sport = match rng.weighted(&[85, 10, 5]) {
            0 => PortRange::ANY,
            1 => PortRange {
                lo: 1024,
                hi: 65535,
            },
            _ => {
                let p = rng.below(65536) as u16;
                PortRange { lo: p, hi: p }
            }
        };
        dport = match rng.weighted(&[30, 15, 10, 10, 5, 30]) {
            0 => {
                let p = SERVICES[rng.below(SERVICES.len() as u32) as usize];
                PortRange { lo: p, hi: p }
            }
            1 => {
                let p = rng.below(65536) as u16;
                PortRange { lo: p, hi: p }
            }
            2 => PortRange { lo: 0, hi: 1023 },
            3 => PortRange {
                lo: 1024,
                hi: 65535,
            },
            4 => span(rng),
            _ => PortRange::ANY,
        };
    }
    Rule {
        action,
        src,
        dst,
        proto,
        sport,
        dport,
    }
}

/// Write a ClassBench-like rules file of `n` rules (see the [module documentation](self)) into
/// `out`: a comment naming `n` and `seed`, `default deny`, then one rule per line. The same
/// (`n`, `seed`) gives the same text, and the first `m` rules of `n` are those of `m`. More
/// than [`super::MAX_RULES`] rules are written, but not built.
///
/// # Errors
/// Only `out`'s.
pub fn generate<W: Write>(n: usize, seed: u64, out: &mut W) -> core::fmt::Result {
    writeln!(
        out,
        "# ClassBench-like ACL: {n} rules, seed {seed:#x} (netstack::acl::classbench::generate)"
    )?;
    writeln!(out, "default deny")?;
    let mut rng = Rng::new(seed);
    for _ in 0..n {
        writeln!(out, "{}", rule(&mut rng, seed))?;
    }
    Ok(())
}

/// A random port in `r`.
fn port_in(rng: &mut Rng, r: PortRange) -> u16 {
    r.lo + rng.below(u32::from(r.hi - r.lo) + 1) as u16
}

/// `count` 5-tuples aimed at the rules of `acl`, spread evenly over them: tuple `k` lies inside
/// rule `k × len / count` (a random address in each prefix, a protocol the rule takes, random
/// ports in its ranges; 0 for protocols without ports), so it matches that rule or an earlier
/// one. Deterministic for a given `seed`. For an ACL without rules the tuples are random.
///
/// With 1,024 tuples and a [`generate`]d set of 10, 1,000 or 10,000 rules, all are distinct (the
/// tests check it for the benchmark's seed).
pub fn tuples<'a>(acl: &Acl<'a>, count: usize, seed: u64) -> Tuples<'a> {
    Tuples {
        acl: *acl,
        k: 0,
        count,
        rng: Rng::new(mix(seed ^ 0x7475_706c_6573)),
    }
}

/// The iterator of [`tuples`].
#[derive(Clone, Debug)]
pub struct Tuples<'a> {
    acl: Acl<'a>,
    k: usize,
    count: usize,
    rng: Rng,
}

impl Iterator for Tuples<'_> {
    type Item = FiveTuple;

    fn next(&mut self) -> Option<FiveTuple> {
        if self.k == self.count {
            return None;
        }
        let index = (self.k as u128 * self.acl.len() as u128 / self.count as u128) as usize;
        self.k += 1;
        let rng = &mut self.rng;
        let r = self.acl.rule(index).unwrap_or(Rule::any(Action::Allow));
        let host = |rng: &mut Rng, net: Ipv4Net| {
            Ipv4Addr::from_bits(net.addr.to_bits() | (rng.next_u64() as u32 & !net.mask()))
        };
        let proto = match r.proto {
            Proto::Is(p) => p,
            Proto::Any => [IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP][rng.below(3) as usize],
        };
        let (sport, dport) = if Proto::Is(proto).has_ports() {
            (port_in(rng, r.sport), port_in(rng, r.dport))
        } else {
            (0, 0)
        };
        Some(FiveTuple {
            src: host(rng, r.src),
            dst: host(rng, r.dst),
            proto,
            sport,
            dport,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.k;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Tuples<'_> {}
