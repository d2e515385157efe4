//! The example network function of docs/writing-an-nf.md, a per-port policer, and its host
//! tests. The guide quotes this file whole; its last test fails when the two differ.
//! Run: `cargo test -p unikernel --features host-rig --test example_nf`.

use unikernel::dataplane::nf::{
    CounterDef, CounterValues, KeyError, NetworkFunction, NfKey, Packet, Verdict,
};

/// Nanoseconds per second.
const NS_PER_S: u64 = 1_000_000_000;

/// Fraction bits of [`Policer::byte_time`].
const FRAC: u32 = 20;

/// Polices each local port's incoming frames to `cir` bytes per second with bursts of up to
/// `cbs` bytes, and drops the frames beyond.
///
/// The Generic Cell Rate Algorithm's virtual scheduling form (ITU-T Rec. I.371; ATM Forum
/// TM 4.0), with a frame's bytes for cells: a port's theoretical arrival time (TAT) is when
/// its frames so far would have arrived at exactly `cir`; a frame conforms if, with its own
/// bytes added, the TAT lies at most `cbs` bytes' worth of time ahead of now. That is RFC
/// 2697's committed token bucket (CIR, CBS) without the excess bucket: two colours, forward
/// or drop. Frame bytes exclude the FCS.
pub struct Policer {
    /// Committed information rate, bytes per second (key `cir=`).
    cir: u64,
    /// Committed burst size, bytes (key `cbs=`).
    cbs: u64,
    /// A byte's time at `cir`, in 2^-20 ns, rounded up: a multiply per frame, not a divide.
    byte_time: u64,
    /// `cbs` at `cir`, ns: how far the TAT may run ahead of now.
    burst_ns: u64,
    /// Per local port, its TAT (ns since boot).
    tat: [u64; 2],
    /// Frames that conformed, forwarded (this core's).
    conform: u64,
    /// Frames that exceeded, dropped (this core's).
    exceed: u64,
}

impl Policer {
    /// `cir` bytes per second, at least 1,000 (so that `len × byte_time` fits in 64 bits for
    /// any frame), and `cbs` bytes, 1 to 10^9 (so that `cbs × 10^9` does); no frame seen yet.
    fn new(cir: u64, cbs: u64) -> Policer {
        Policer {
            cir,
            cbs,
            byte_time: (NS_PER_S << FRAC).div_ceil(cir),
            burst_ns: (cbs * NS_PER_S).div_ceil(cir),
            tat: [0; 2],
            conform: 0,
            exceed: 0,
        }
    }

    /// The time `len` bytes take at `cir`, ns, rounded up (the strict side).
    #[inline(always)]
    fn time_ns(&self, len: usize) -> u64 {
        (len as u64 * self.byte_time).div_ceil(1 << FRAC)
    }
}

impl Default for Policer {
    /// 10 Gbit/s (1.25 × 10^9 bytes/s) with bursts of 64 KiB, until `cir=` and `cbs=` say.
    fn default() -> Self {
        Policer::new(1_250_000_000, 65_536)
    }
}

/// The keys, applied before the first frame: `cir=BYTES_PER_S` and `cbs=BYTES` (a frame
/// longer than `cbs` never conforms).
const KEYS: &[NfKey<Policer>] = &[
    NfKey::new("cir", |p, v| {
        let e = KeyError::Expected("a rate in bytes per second, 1000 or more");
        let cir = v.parse().ok().filter(|&r: &u64| r >= 1000).ok_or(e)?;
        *p = Policer::new(cir, p.cbs);
        Ok(())
    }),
    NfKey::new("cbs", |p, v| {
        let e = KeyError::Expected("a burst in bytes, 1 to 1000000000");
        let cbs = v
            .parse()
            .ok()
            .filter(|b: &u64| (1..=NS_PER_S).contains(b))
            .ok_or(e)?;
        *p = Policer::new(p.cir, cbs);
        Ok(())
    }),
];

impl NetworkFunction for Policer {
    const NAME: &'static str = "policer";
    // Forwards or drops; never keeps a frame nor gives one to the management plane.
    const TAKES: bool = false;
    // `process` reads the time: once per burst, as `Packet::now_ns`.
    const CLOCK: bool = true;
    const COUNTERS: &'static [CounterDef] = &[
        CounterDef::one("conform", "Frames within the rate and burst, forwarded."),
        CounterDef::one("exceed", "Frames over the rate and burst, dropped."),
    ];

    fn keys() -> &'static [NfKey<Self>] {
        KEYS
    }

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        let (now, time) = (pkt.now_ns(), self.time_ns(pkt.len()));
        // `in_port` is 0 or 1; `& 1` lets the compiler drop the bounds check.
        let tat = &mut self.tat[pkt.in_port() & 1];
        let after = (*tat).max(now) + time;
        if after - now <= self.burst_ns {
            *tat = after;
            self.conform += 1;
            Verdict::Forward
        } else {
            self.exceed += 1;
            Verdict::Drop
        }
    }

    fn counters(&self, out: &mut CounterValues) {
        out.set(0, self.conform);
        out.set(1, self.exceed);
    }
}

// The host tests: real cores over real drivers whose devices are simulated in host memory
// (`unikernel::dataplane::testing`, feature `host-rig`), the clock set by the test.

use netstack::config::nf_keys::{apply, KeyTable};
use netstack::MacAddr;
use std::net::Ipv4Addr;
use unikernel::dataplane::testing::{Rig, NOW_NS};

/// A 1,000-byte UDP frame from 10.0.0.2 to 10.0.1.2.
fn frame() -> Vec<u8> {
    let (mac, mut f) = (MacAddr([2, 0, 0, 0, 0, 1]), vec![0; 1000]);
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
    netstack::simframes::udp4_frame(&mut f, 1000, mac, mac, src, dst, 64);
    f
}

/// At `t_ms` ms, `n[i]` frames arrive on port `i`, then one poll iteration: the frames that
/// left each port.
fn poll_at(rig: &mut Rig, nf: &mut Policer, t_ms: u64, n: [usize; 2]) -> [usize; 2] {
    // The rig's clock: the test's ns (each read moves it 1 µs on, far below a frame's 1 ms).
    NOW_NS.with(|c| c.set(t_ms * 1_000_000));
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&frame(), n[0]);
    c.dev[1].deliver_rx(&frame(), n[1]);
    c.core.poll_nf(nf);
    [c.dev[0].complete_tx(|_| {}), c.dev[1].complete_tx(|_| {})]
}

#[test]
fn the_policer_forwards_within_the_rate_and_drops_over_it() {
    let mut rig = Rig::new("mode=l2", 1, 4096);
    let mut nf = Policer::default();
    // 1 MB/s: a 1,000-byte frame per ms; bursts of 3.5 frames (the half frame is a margin
    // for the rig's clock).
    apply(
        "cir=1000000 cbs=3500",
        &mut KeyTable {
            keys: Policer::keys(),
            state: &mut nf,
        },
    )
    .unwrap();
    // Ten frames at once on each port: each port's bucket passes three.
    assert_eq!(poll_at(&mut rig, &mut nf, 0, [10, 10]), [3, 3]);
    // At the rate, after 10 ms idle: one frame a ms for 100 ms, all forwarded.
    let at_rate: usize = (10..110)
        .map(|t| poll_at(&mut rig, &mut nf, t, [1, 0])[1])
        .sum();
    assert_eq!(at_rate, 100);
    // Twice the rate, 100 ms: 99 ms at the rate plus the 3 frames of the burst (102,000
    // bytes, within cir × 99 ms + cbs = 102,500); the other 98 dropped.
    let over: usize = (200..300)
        .map(|t| poll_at(&mut rig, &mut nf, t, [2, 0])[1])
        .sum();
    assert_eq!(over, 102);

    assert_eq!((nf.conform, nf.exceed), (3 + 3 + 100 + 102, 7 + 7 + 98));
    let mut v = CounterValues::new(Policer::COUNTERS);
    nf.counters(&mut v);
    let stats = v.to_stats();
    assert_eq!(
        (stats.one("conform"), stats.one("exceed")),
        (Some(208), Some(112))
    );
    assert_eq!(
        rig.cores[0].core.nf_counters().dropped,
        112,
        "the core counts the drops"
    );
    rig.quit_and_check(); // every page back in the zone
}

#[test]
fn a_bad_key_value_is_refused_naming_the_key() {
    let mut nf = Policer::default();
    let mut err = |line| {
        apply(
            line,
            &mut KeyTable {
                keys: Policer::keys(),
                state: &mut nf,
            },
        )
        .unwrap_err()
        .to_string()
    };
    assert_eq!(
        err("cir=999"),
        "bad value `999` for key `cir`: expected a rate in bytes per second, 1000 or more"
    );
    assert_eq!(
        err("cbs=2000000000"),
        "bad value `2000000000` for key `cbs`: expected a burst in bytes, 1 to 1000000000"
    );
    assert_eq!(err("cbs=1 cbs=2"), "key `cbs` given more than once");
}

/// docs/writing-an-nf.md quotes this file whole and in order, in the `rust` blocks that follow
/// a `<!-- quote: unikernel/tests/example_nf.rs -->` line (the empty lines between the parts
/// left out): the guide's code is this code.
#[test]
fn the_guide_quotes_this_file_verbatim() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/writing-an-nf.md");
    let guide = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (mut quoted, mut open, mut marked) = (String::new(), false, false);
    for line in guide.lines() {
        match (open, line) {
            (false, "<!-- quote: unikernel/tests/example_nf.rs -->") => marked = true,
            (false, "```rust") if marked => {
                // The blocks are the file's parts, one empty line between two.
                if !quoted.is_empty() {
                    quoted.push('\n');
                }
                (open, marked) = (true, false);
            }
            (true, "```") => open = false,
            (true, _) => quoted += &format!("{line}\n"),
            _ => {}
        }
    }
    let file = include_str!("example_nf.rs");
    let mut lines = file.lines().zip(quoted.lines()).enumerate();
    if let Some((i, (f, g))) = lines.find(|(_, (f, g))| f != g) {
        panic!("line {}: the file has `{f}`, the guide `{g}`", i + 1);
    }
    let (f, g) = (file.lines().count(), quoted.lines().count());
    assert_eq!(
        (f, file.ends_with('\n')),
        (g, true),
        "lines in the file, in the guide"
    );
}
