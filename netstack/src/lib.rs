//! Gannet netstack: the forwarding fast path and its configuration.
//!
//! Laid out like smoltcp: parsing and value types ([`config`], [`MacAddr`]) are kept apart
//! from behaviour ([`forward`], [`router`]); [`wire`] holds the header field offsets every
//! crate uses (Ethernet, IPv4, UDP, ICMP, ARP); [`simframes`] builds the frames of the
//! deterministic benchmark (`sim=K`); [`stats`] is the schema of the guest's `STATS` line
//! (serde), shared with the host tools, and its Prometheus exposition. Everything here is
//! `no_std`, allocation-free and tested on the host.
//!
//! # Map (lower modules never name upper ones; `cargo xtask lint` checks for cycles)
//!
//! * leaves: [`wire`] (header offsets), [`counters`] (per-port counters, drop reasons), [`rss`]
//!   (the Toeplitz hash, the RSS key and redirection table), and the crate root's [`MacAddr`].
//! * [`config`]: the kernel command line and the routes file.
//! * [`forward`]: the `io`/`l2` rewrite (one [`Verdict`] per frame).
//! * [`router`]: RFC 1812 forwarding, DIR-24-8 FIB, ARP neighbours, ICMP (one action and one
//!   counter per frame).
//! * [`acl`]: a stateless IPv4 access-control list (rules file, tuple-space classifier) for a
//!   network function to run; it reads [`router`]'s prefix type and parser.
//! * [`conntrack`]: connection tracking sans I/O (a fixed-capacity 5-tuple table over caller
//!   storage, Linux's TCP states, expiry per timeout class, embryonic-first eviction) and the
//!   stateful firewall policy on it; [`nat`]: NAT44 (NAPT) on [`conntrack`]'s table (endpoint-
//!   independent mapping, per-core outside port blocks, hairpinning, static forwards, RFC 5508
//!   ICMP errors, RFC 1624 checksum updates). Both read [`wire`], [`rng`] and [`router`]'s
//!   checksum helpers; neither is wired into the kernel yet.
//! * [`http`]: the management plane's HTTP/1.x requests on `httparse`, sans I/O (heads, their
//!   limits and refusals, `PUT /routes` and `PUT /rules` bodies checked as they arrive, over
//!   [`config`]'s and [`acl`]'s syntax and [`router`]'s route checks): here, not in the kernel,
//!   so the host tests and the `mgmt_request` fuzz target reach it without building the kernel
//!   crate; the sockets and timers are the kernel's `control::mgmt`.
//! * [`stats`] (the STATS schema over the counters) and [`simframes`] (benchmark frames) sit
//!   on top and are used by the kernel and the host tools, never by the modules above.
//!
//! Dependencies inside the workspace: `mm` only, for its generic lock-free ring
//! (`mm::ptr_ring::MpscRing`, which is [`router::NeighRing`]); the `unsafe` of that ring and its
//! loom model live in `mm`, so this crate has none (`#![deny(unsafe_code)]`).
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod acl;
pub mod config;
pub mod conntrack;
pub mod counters;
pub mod fib_build;
pub mod forward;
pub mod http;
pub mod nat;
pub mod rng;
pub mod router;
pub mod rss;
pub mod simframes;
pub mod stats;
pub mod wire;

pub use config::{
    parse_routes_file, Config, ConfigError, IdleMode, LogLevel, MgmtPort, MmioDevice, Mode,
    PoolMode, Queues, RefillMode, TlbMode, MAX_QUEUES,
};
pub use counters::{DropReason, PortCounters};
pub use forward::{forward_frame, MacRewrite, Verdict};

/// A 48-bit IEEE 802 MAC address.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Parse `aa:bb:cc:dd:ee:ff` (hex, case-insensitive; `-` also accepted as separator).
    /// Returns `None` for anything else.
    pub fn parse(s: &str) -> Option<MacAddr> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.len() != 2 {
                return None;
            }
            out[n] = u8::from_str_radix(part, 16).ok()?;
            n += 1;
        }
        (n == 6).then_some(MacAddr(out))
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn mac_roundtrip() {
        let m = MacAddr::parse("02:00:00:00:0A:02").unwrap();
        assert_eq!(m.0, [2, 0, 0, 0, 0x0a, 2]);
        assert_eq!(m.to_string(), "02:00:00:00:0a:02");
    }

    #[test]
    fn mac_rejects_garbage() {
        for bad in [
            "",
            "02:00:00:00:0a",
            "02:00:00:00:0a:02:03",
            "0g:00:00:00:00:00",
            "2:0:0:0:0:0",
        ] {
            assert_eq!(MacAddr::parse(bad), None, "{bad}");
        }
    }
}
