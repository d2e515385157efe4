//! An appliance on Gannet: one network function, `PortFilter`, on every forwarding core.
//!
//! It drops UDP and TCP to one destination port (`blocked_port=` on the kernel command line,
//! default 5000), and to up to 8 more listed in the file `blocked_ports` of the appliance
//! bundle (the boot module: `#!gannet-bundle 1`, then `--- blocked_ports` and one port per
//! line), and forwards every other frame, unchanged, out of the pair's other port (as the stock
//! `io` mode does). With a management address and `mgmt_token=`, the file is replaced live by
//! `PUT /blocked_ports` (every core restarts this NF with it). The kernel keeps what an appliance needs around it: the boot, the ports, the page pools, the console
//! and `STATS` (`nf.dropped` counts this NF's drops), the management plane with `ip0=`/`ip1=`
//! (its frames never reach the NF), and `quit`.
//!
//! Its own counters (`COUNTERS`, read by the kernel every 10 ms, summed over the cores) show
//! in `STATS` as `"nf_name":"port_filter","nf_counters":{"blocked":N,"forwarded":M}` and in
//! `/metrics` as `gannet_nf_port_filter_blocked_total` and
//! `gannet_nf_port_filter_forwarded_total`.
//!
//! Price it: `cargo xtask bench sim --image PATH --modes io` (deterministic instructions per
//! packet on simulated ports), with the frame `bench_frames` below builds: UDP to port 80,
//! forwarded.
//!
//! Host tests: `cargo test-host` (`cargo test --target x86_64-unknown-linux-gnu`) runs the
//! tests below: the verdict logic alone, and the NF on Gannet's host rig (real cores over the
//! real virtio-net driver, its devices simulated in host memory:
//! `unikernel::dataplane::testing`). Gannet's `docs/writing-an-nf.md` explains the API.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

use netstack::MacAddr;
use unikernel::dataplane::nf::{
    CounterDef, CounterValues, FileError, KeyError, NetworkFunction, NfFile, NfKey, Packet, Verdict,
};

/// The destination port whose UDP and TCP frames are dropped, unless `blocked_port=` says.
const DEFAULT_BLOCKED_PORT: u16 = 5000;

/// The NF's command-line keys: `blocked_port=N` (0..=65535).
const KEYS: &[NfKey<PortFilter>] = &[NfKey::new("blocked_port", |f, v| {
    f.blocked_port = v
        .parse()
        .map_err(|_| KeyError::Expected("a port number in 0..=65535"))?;
    Ok(())
})];

/// Most ports in the `blocked_ports` file.
const MAX_MORE_PORTS: usize = 8;

/// The NF's files in the appliance bundle: `blocked_ports`, one port per line (blank lines and
/// `#` comments skipped), at most [`MAX_MORE_PORTS`].
const FILES: &[NfFile<PortFilter>] = &[NfFile::new("blocked_ports", |f, text| {
    for (i, line) in text.lines().enumerate() {
        let bad = |expected| FileError {
            line: i + 1,
            expected,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let port = line
            .parse()
            .map_err(|_| bad("a port number in 0..=65535"))?;
        let slot = f.more.get_mut(f.n_more).ok_or(bad("at most 8 ports"))?;
        *slot = port;
        f.n_more += 1;
    }
    Ok(())
})];

/// Drops UDP and TCP to one destination port (and those of its file), forwards the rest;
/// counts both.
pub struct PortFilter {
    /// The destination port dropped.
    pub blocked_port: u16,
    /// More destination ports dropped (the `blocked_ports` file): the first `n_more`.
    pub more: [u16; MAX_MORE_PORTS],
    /// How many of `more` are set.
    pub n_more: usize,
    /// Frames dropped (per core).
    pub blocked: u64,
    /// Frames forwarded (per core).
    pub forwarded: u64,
}

impl Default for PortFilter {
    fn default() -> Self {
        PortFilter {
            blocked_port: DEFAULT_BLOCKED_PORT,
            more: [0; MAX_MORE_PORTS],
            n_more: 0,
            blocked: 0,
            forwarded: 0,
        }
    }
}

impl PortFilter {
    /// The verdict for a frame whose destination port is `dport` (`None`: not UDP or TCP).
    fn decide(&mut self, dport: Option<u16>) -> Verdict {
        let listed = |p| p == self.blocked_port || self.more[..self.n_more].contains(&p);
        if dport.is_some_and(listed) {
            self.blocked += 1;
            Verdict::Drop
        } else {
            self.forwarded += 1;
            Verdict::Forward
        }
    }
}

impl NetworkFunction for PortFilter {
    const NAME: &'static str = "port_filter";
    // Never keeps a frame nor gives one to the management plane itself.
    const TAKES: bool = false;
    // Its counters: names (stable: they become metric names) and what they count.
    const COUNTERS: &'static [CounterDef] = &[
        CounterDef::one("blocked", "Frames to the blocked port, dropped."),
        CounterDef::one("forwarded", "Frames forwarded."),
    ];

    /// This core's values, in `COUNTERS` order.
    fn counters(&self, out: &mut CounterValues) {
        out.set(0, self.blocked);
        out.set(1, self.forwarded);
    }

    fn keys() -> &'static [NfKey<Self>] {
        KEYS
    }

    fn files() -> &'static [NfFile<Self>] {
        FILES
    }

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        let dport = match (pkt.udp(), pkt.tcp()) {
            (Some(u), _) => Some(u.dst_port()),
            (None, Some(t)) => Some(t.dst_port()),
            _ => None,
        };
        self.decide(dport)
    }

    /// The benchmark's frame: UDP from 10.0.0.2 to 10.0.1.2, destination port 80 (forwarded
    /// unchanged, so it must leave port 1 as it came).
    fn bench_frames(
        macs: [MacAddr; 2],
        peer: [MacAddr; 2],
        input: &mut [u8],
        want: &mut [u8],
    ) -> bool {
        let len = input.len();
        let (src, dst) = ([10, 0, 0, 2].into(), [10, 0, 1, 2].into());
        netstack::simframes::udp4_frame(input, len, macs[0], peer[0], src, dst, 64);
        // Ethernet 14 + IPv4 20: the UDP destination port (RFC 768); its checksum is not checked.
        input[36..38].copy_from_slice(&80u16.to_be_bytes());
        want.copy_from_slice(input);
        true
    }
}

#[cfg(target_os = "none")]
unikernel::main!(PortFilter);

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("the appliance is an image for x86_64-unknown-none: `cargo build --release`");
}

#[cfg(test)]
mod tests {
    use super::*;
    use unikernel::dataplane::testing::Rig;

    #[test]
    fn the_blocked_port_is_dropped_and_counted() {
        let mut f = PortFilter::default();
        assert_eq!(f.decide(Some(DEFAULT_BLOCKED_PORT)), Verdict::Drop);
        assert_eq!(f.decide(Some(80)), Verdict::Forward);
        assert_eq!(f.decide(None), Verdict::Forward);
        assert_eq!((f.blocked, f.forwarded), (1, 2));
        (KEYS[0].parse)(&mut f, "80").unwrap();
        assert_eq!(f.decide(Some(80)), Verdict::Drop);
        assert!((KEYS[0].parse)(&mut f, "http").is_err());
        // The bundle's file: more ports, each line checked.
        (FILES[0].parse)(&mut f, "# extra\n7000\n\n7001\n").unwrap();
        assert_eq!(f.decide(Some(7001)), Verdict::Drop);
        let e = (FILES[0].parse)(&mut f, "7002\nhttp\n").unwrap_err();
        assert_eq!((e.line, e.expected), (2, "a port number in 0..=65535"));
        let nine = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let e = (FILES[0].parse)(&mut PortFilter::default(), nine).unwrap_err();
        assert_eq!((e.line, e.expected), (9, "at most 8 ports"));
    }

    /// A 60-byte UDP frame from 10.0.0.2 to 10.0.1.2, to port `dport`.
    fn udp(dport: u16) -> Vec<u8> {
        let (mac, mut f) = (MacAddr([2, 0, 0, 0, 0, 1]), vec![0; 60]);
        let (src, dst) = ([10, 0, 0, 2].into(), [10, 0, 1, 2].into());
        netstack::simframes::udp4_frame(&mut f, 60, mac, mac, src, dst, 64);
        // Ethernet 14 + IPv4 20: the UDP destination port (RFC 768).
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    /// The NF on simulated ports: one core, frames into port 0, what port 1 sent, and every
    /// page back at the end (`quit_and_check`).
    #[test]
    fn on_simulated_ports_the_blocked_port_is_dropped_and_the_rest_forwarded() {
        let mut rig = Rig::new("mode=l2", 1, 4096);
        let mut f = PortFilter::default();
        let c = &mut rig.cores[0];
        c.dev[0].deliver_rx(&udp(DEFAULT_BLOCKED_PORT), 3);
        c.dev[0].deliver_rx(&udp(80), 2);
        c.core.poll_nf(&mut f);
        let mut sent = Vec::new();
        c.dev[1].complete_tx(|frame| sent.push(frame.to_vec()));
        assert_eq!(sent, vec![udp(80); 2], "port 80's frames left as they came");
        assert_eq!((f.blocked, f.forwarded), (3, 2));
        assert_eq!(c.core.nf_counters().dropped, 3, "the core counts the drops");
        rig.quit_and_check();
    }
}
