//! A generated FIB for router-mode benchmarks (`bench --search --routes N`): `N` distinct
//! routes of `tools/scripts/mkroutes.py`'s BGP-like prefix-length mix (mostly /24 and
//! /16../23, a few /8 and /12, 0.5 % /28), from a seeded xorshift, outside 0/8, 10/8, 127/8
//! and 224/3 (so none covers the ports' 10.0.0.0/24 and 10.0.1.0/24), **every one via
//! 10.0.1.2**, the host behind port 1, so every frame the generator offers into port 0 leaves
//! port 1. The offered frames go to one address in each route in turn ([`Fib::destinations`]).

use std::fmt::Write;
use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::gen;

/// Most routes [`Fib::generate`] makes: a bound on the generator's time and memory, not the
/// guest FIB's capacity.
pub const MAX_ROUTES: usize = 1_000_000;

/// Generated routes, `(network address, prefix length)`, all via [`gen::peer_ip`]`(1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fib {
    pub routes: Vec<(u32, u8)>,
}

impl Fib {
    /// `n` distinct routes from `seed` (the same `n` and seed give the same table).
    ///
    /// # Errors
    /// `n` is 0 or above [`MAX_ROUTES`].
    pub fn generate(n: usize, seed: u64) -> Result<Fib> {
        ensure!(
            (1..=MAX_ROUTES).contains(&n),
            "--routes {n}: a route count in 1..={MAX_ROUTES}"
        );
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // mkroutes.py's weights per 1,000: /24 550, /23 150, /22 100, /21 40, /20 30, /19 15,
        // /18 10, /17 5, /16 90, /12 4, /8 1, /28 5.
        const MIX: [(u8, u64); 12] = [
            (24, 550),
            (23, 150),
            (22, 100),
            (21, 40),
            (20, 30),
            (19, 15),
            (18, 10),
            (17, 5),
            (16, 90),
            (12, 4),
            (8, 1),
            (28, 5),
        ];
        let pick = |r: u64| {
            let mut k = r % 1000;
            for (len, w) in MIX {
                if k < w {
                    return len;
                }
                k -= w;
            }
            24
        };
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut routes = Vec::with_capacity(n);
        while routes.len() < n {
            let r = next();
            let len = pick(r & 0xffff_ffff);
            let a = ((r >> 32) as u32) & (u32::MAX << (32 - u32::from(len)));
            let top = a >> 24;
            if [0, 10, 127].contains(&top) || top >= 224 || !seen.insert((a, len)) {
                continue;
            }
            routes.push((a, len));
        }
        Ok(Fib { routes })
    }

    /// The routes file the guest reads (`-initrd`; one `A.B.C.D/LEN,10.0.1.2` per line).
    pub fn file_text(&self) -> String {
        let [g0, g1, g2, g3] = gen::peer_ip(1);
        let mut s = String::with_capacity(self.routes.len() * 28);
        for &(a, len) in &self.routes {
            let [b0, b1, b2, b3] = a.to_be_bytes();
            let _ = writeln!(s, "{b0}.{b1}.{b2}.{b3}/{len},{g0}.{g1}.{g2}.{g3}");
        }
        s
    }

    /// Writes [`Fib::file_text`] to `path`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.file_text())
            .with_context(|| format!("writing the routes file {}", path.display()))
    }

    /// One destination per route, in the table's order: its network address + 1 (a host
    /// inside it; the longest match may be a longer route of the table inside it, which also
    /// goes via 10.0.1.2).
    pub fn destinations(&self) -> Vec<[u8; 4]> {
        self.routes
            .iter()
            .map(|&(a, _)| (a | 1).to_be_bytes())
            .collect()
    }
}

/// The routes file text of about `n` IPv6 routes of the global IPv6 table's prefix-length mix
/// (`netstack::router::fib6::synth::synthetic`: mostly /48, then /32–/44, some /64; a few
/// fewer than `n` after duplicates and 2001:db8::/32 are removed), from `seed`, every one via `gateway` (an
/// address on a port's prefix, e.g. `2001:db8:1::2`), one `PREFIX/LEN,GATEWAY` per line. None
/// lies inside 2001:db8::/32 (the documentation prefix the ports' prefixes come from), so they
/// stay connected.
///
/// # Errors
/// `n` is 0 or above [`MAX_ROUTES`].
pub fn routes6_text(n: usize, seed: u64, gateway: std::net::Ipv6Addr) -> Result<String> {
    ensure!(
        (1..=MAX_ROUTES).contains(&n),
        "{n} IPv6 routes: a route count in 1..={MAX_ROUTES}"
    );
    let empty = netstack::router::fib6::Route6 {
        prefix: 0,
        len: 0,
        nh: 0,
    };
    let mut routes = vec![empty; n];
    let kept = netstack::router::fib6::synth::synthetic(seed, 1, &mut routes);
    let mut s = String::with_capacity(kept * 40);
    // The synthetic set puts its first longer prefixes under 2001:db8::/32 (before it draws
    // a /32 of its own): left out, so no route lies near the ports' prefixes.
    for r in routes[..kept]
        .iter()
        .filter(|r| r.prefix >> 96 != 0x2001_0db8)
    {
        let _ = writeln!(
            s,
            "{}/{},{gateway}",
            std::net::Ipv6Addr::from_bits(r.prefix),
            r.len
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_routes_parse_back_and_stay_off_the_ports_prefixes() {
        let gw: std::net::Ipv6Addr = "2001:db8:1::2".parse().unwrap();
        let text = routes6_text(1000, 7, gw).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 950 && lines.len() <= 1000, "{}", lines.len());
        let mut lens = std::collections::BTreeMap::new();
        for l in &lines {
            let (net, via) = l.split_once(',').unwrap();
            assert_eq!(via, "2001:db8:1::2");
            let (a, len) = net.split_once('/').unwrap();
            let a: std::net::Ipv6Addr = a.parse().unwrap();
            let len: u8 = len.parse().unwrap();
            assert!(a.segments()[0] & 0xe000 == 0x2000, "{l}: outside 2000::/3");
            assert!(
                a.segments()[..2] != [0x2001, 0xdb8],
                "{l}: inside 2001:db8::/32"
            );
            *lens.entry(len).or_insert(0) += 1;
        }
        let most = lens.iter().max_by_key(|(_, n)| **n).unwrap();
        assert_eq!(*most.0, 48, "{lens:?}");
        assert!(lens.contains_key(&64) && lens.contains_key(&32), "{lens:?}");
    }

    #[test]
    fn routes_are_distinct_outside_the_ports_and_via_port_1() {
        let f = Fib::generate(2000, 1).unwrap();
        assert_eq!(f.routes.len(), 2000);
        assert_eq!(f, Fib::generate(2000, 1).unwrap());
        let set: std::collections::HashSet<_> = f.routes.iter().collect();
        assert_eq!(set.len(), 2000);
        for &(a, len) in &f.routes {
            assert!(
                ![0, 10, 127].contains(&(a >> 24)) && a >> 24 < 224,
                "{a:#x}/{len}"
            );
            assert_eq!(a & !(u32::MAX << (32 - u32::from(len))), 0, "host bits set");
        }
        let slash24 = f.routes.iter().filter(|r| r.1 == 24).count();
        assert!((900..1300).contains(&slash24), "{slash24} /24s of 2000");
        let text = f.file_text();
        assert_eq!(text.lines().count(), 2000);
        assert!(text.lines().all(|l| l.ends_with(",10.0.1.2")), "{text}");
        assert_eq!(f.destinations()[0], (f.routes[0].0 | 1).to_be_bytes());
        assert_eq!(
            netstack::parse_routes_file(&text)
                .filter(Result::is_ok)
                .count(),
            2000
        );
    }

    #[test]
    fn counts_outside_1_to_a_million_are_refused() {
        assert!(Fib::generate(0, 1).is_err());
        assert!(Fib::generate(MAX_ROUTES + 1, 1).is_err());
    }
}
