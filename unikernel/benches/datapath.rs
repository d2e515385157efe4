//! The host twin of the deterministic datapath benchmark (`cargo xtask bench datapath`).
//!
//! The same steps as the guest's `sim=K` benchmark (`unikernel/src/simbench.rs`), on the host
//! rig (`unikernel::dataplane::testing`, feature `host-rig`): one real [`Core`] over real
//! `VirtioNet` drivers on `drivers::sim` devices, pages from a real `mm::Zone` in host memory.
//! Per iteration, outside the measured part, the device delivers K 60-byte UDP frames on
//! port 0 and takes (and checks) what the forwarder queued on both TX rings; inside, one
//! `poll_once` in [`bench_poll_once`]. Router mode first resolves the next hop (an ARP request
//! from it on port 1), as the guest does.
//!
//! Counting is callgrind's: run under
//! `valgrind --tool=callgrind --toggle-collect='*bench_poll_once*'`, only the measured calls
//! of [`bench_poll_once`] are counted (the warm-up calls `poll_once` directly), so the
//! `totals:` Ir of the output file ÷ `packets` is host instructions per packet. The binary
//! itself prints one line
//!
//! ```text
//! DATAPATH mode=l2 k=4 warmup=256 iters=1024 delivered=4096 packets=4096 out=4096 other=0 kicks=… busy_iters=1024
//! ```
//!
//! and exits non-zero unless every delivered frame left port 1 as expected and every page
//! came back at `quit`.
//!
//! Usage: `datapath --mode l2|io|router --k K [--iters N] [--pages P] [--size BYTES]` (frame
//! size on the wire, FCS included, default 64; above 4,088 the device delivers mergeable).

use std::process::ExitCode;

use netstack::simframes::{bench_frames_into, next_hop_arp, next_hop_arp_reply, BENCH_FRAME_LEN};
use netstack::wire::{ETHERTYPE, ETHERTYPE_ARP};
use netstack::Mode;
use unikernel::dataplane::testing::{port_mac, Rig, SimCore, TestPlatform};
use unikernel::dataplane::Core;

/// Poll iterations before the measured ones (the guest's `WARMUP_ITERS`).
const WARMUP_ITERS: u32 = 256;
/// The guest's default `sim_iters`.
const DEFAULT_ITERS: u32 = 1024;
/// Zone size: 256 MiB, the guest's `-m` (the pcp list's batch and high derive from it).
const DEFAULT_PAGES: usize = 65536;
/// Frame length without FCS (64 bytes on the wire): ARP frames, and the default.
const FRAME_LEN: usize = BENCH_FRAME_LEN;
/// Bytes of the FCS, which `--size` (on the wire) counts and the frames do not.
const FCS_LEN: usize = 4;
/// The largest frame one RX page holds (bytes, no FCS): longer ones are delivered mergeable.
const ONE_PAGE: usize = 4096 - 12;
/// The router-mode configuration of `cargo xtask bench sim` (`bench_sim::ROUTER_APPEND`).
const ROUTER_CMDLINE: &str =
    "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 route=192.168.0.0/16,10.0.1.2";

/// The measured poll iteration: callgrind counts only inside this function
/// (`--toggle-collect='*bench_poll_once*'`). `black_box` keeps `poll_once` a real call (not a
/// tail jump) inside it; the warm-up calls `Core::poll_once` directly (a second wrapper would be
/// merged with this one by rustc's function merging, and counted too).
#[inline(never)]
fn bench_poll_once(core: &mut Core<TestPlatform>) -> usize {
    std::hint::black_box(core.poll_once())
}

/// A warm-up poll iteration (not counted).
fn warm_poll_once(core: &mut Core<TestPlatform>) -> usize {
    core.poll_once()
}

/// What the device took off a TX ring.
#[derive(Default)]
struct Out {
    /// Frames equal to the expected output frame.
    ok: u64,
    /// Anything else.
    other: u64,
}

/// The benchmark: the core, its devices, the frames.
struct Bench {
    rig: Rig,
    k: usize,
    input: Vec<u8>,
    want: Vec<u8>,
    /// Port 1's TX ring: the forwarded frames.
    out: Out,
    /// Port 0's TX ring: nothing expected.
    back: Out,
}

impl Bench {
    fn c(&mut self) -> &mut SimCore {
        &mut self.rig.cores[0]
    }

    /// Take what the forwarder transmitted on both ports.
    fn take_tx(&mut self) {
        let want = &self.want[..];
        let c = &mut self.rig.cores[0];
        let (out, back) = (&mut self.out, &mut self.back);
        c.dev[1].complete_tx(|f| {
            if f == want {
                out.ok += 1
            } else {
                out.other += 1
            }
        });
        c.dev[0].complete_tx(|f| {
            if f == want {
                back.ok += 1
            } else {
                back.other += 1
            }
        });
    }

    /// One iteration: outside the measured part deliver K frames on port 0 and take both TX
    /// rings; then one poll iteration through `poll`. Returns the frames delivered.
    fn step(&mut self, poll: fn(&mut Core<TestPlatform>) -> usize) -> usize {
        let k = self.k;
        let c = &mut self.rig.cores[0];
        let delivered = if self.input.len() <= ONE_PAGE {
            c.dev[0].deliver_rx(&self.input, k)
        } else {
            c.dev[0].deliver_rx_mrg(&self.input, k)
        };
        self.take_tx();
        let c = self.c();
        c.core
            .router_timers_ran(<TestPlatform as unikernel::dataplane::Platform>::uptime_ns());
        poll(&mut c.core);
        delivered
    }
}

/// The input and expected output frames for the mode, `len` bytes without FCS (the guest's,
/// `simframes::bench_frames_into`).
fn frames(rig: &Rig, len: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut input, mut want) = (vec![0u8; len], vec![0u8; len]);
    bench_frames_into(
        rig.cores[0].core.cfg(),
        [port_mac(0), port_mac(1)],
        &mut input,
        &mut want,
    )
    .expect("router addresses");
    (input, want)
}

/// Router mode: the next hop asks for port 1's address; the router learns it and answers.
fn resolve_next_hop(c: &mut SimCore) {
    let mut arp = [0u8; FRAME_LEN];
    let Some(n) = next_hop_arp(c.core.cfg(), &mut arp) else {
        return;
    };
    assert_eq!(
        c.dev[1].deliver_rx(&arp[..n], 1),
        1,
        "ARP request delivered"
    );
    warm_poll_once(&mut c.core);
    let mut replies = 0;
    let arp_type = ETHERTYPE_ARP.to_be_bytes();
    c.dev[1].complete_tx(|f| replies += usize::from(f.get(ETHERTYPE) == Some(&arp_type[..])));
    assert_eq!(replies, 1, "one ARP reply");
    // Learned from a request the entry is Stale: the next hop's reply confirms it (Reachable).
    let n = next_hop_arp_reply(c.core.cfg(), port_mac(1), &mut arp).expect("router mode");
    assert_eq!(c.dev[1].deliver_rx(&arp[..n], 1), 1, "ARP reply delivered");
    warm_poll_once(&mut c.core);
}

struct Args {
    mode: Mode,
    k: usize,
    iters: u32,
    pages: usize,
    /// Frame size on the wire, FCS included (`--size`, the guest's `sim_size=`).
    size: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        mode: Mode::L2,
        k: 4,
        iters: DEFAULT_ITERS,
        pages: DEFAULT_PAGES,
        size: FRAME_LEN + FCS_LEN,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` passes `--bench`; ignore it.
        if flag == "--bench" {
            continue;
        }
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--mode" => {
                a.mode = match v.as_str() {
                    "l2" => Mode::L2,
                    "io" => Mode::Io,
                    "router" => Mode::Router,
                    _ => return Err(format!("--mode {v}: l2, io or router")),
                }
            }
            "--k" => a.k = num(&v)?,
            "--iters" => a.iters = num(&v)? as u32,
            "--pages" => a.pages = num(&v)?,
            "--size" => a.size = num(&v)?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if !(1..=256).contains(&a.k) {
        return Err(format!("--k {}: not in 1..=256", a.k));
    }
    if !(64..=9018).contains(&a.size) {
        return Err(format!("--size {}: not in 64..=9018", a.size));
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "datapath: {e}\nusage: datapath --mode l2|io|router --k K [--iters N] [--pages P] [--size BYTES]"
            );
            return ExitCode::from(2);
        }
    };
    let mode = match a.mode {
        // Frames over one page: a 9,000-byte MTU on both ports, as `bench sim` gives the
        // guest, so the router forwards them whole instead of fragmenting.
        Mode::Router if a.size - FCS_LEN > ONE_PAGE => {
            format!("{ROUTER_CMDLINE} mtu0=9000 mtu1=9000")
        }
        Mode::Router => ROUTER_CMDLINE.to_string(),
        m => format!("mode={}", m.as_str()),
    };
    // The guest's command line: `sim=K` and `sim_iters=N` as `cargo xtask bench sim` gives them.
    let cmdline = format!("{mode} sim={} sim_iters={}", a.k, a.iters);
    let rig = Rig::new(&cmdline, 1, a.pages);
    let (input, want) = frames(&rig, a.size - FCS_LEN);
    let mut b = Bench {
        rig,
        k: a.k,
        input,
        want,
        out: Out::default(),
        back: Out::default(),
    };
    if a.mode == Mode::Router {
        resolve_next_hop(b.c());
    }
    for _ in 0..WARMUP_ITERS {
        b.step(warm_poll_once);
    }
    b.take_tx();
    let (ok0, other0) = (b.out.ok, b.out.other + b.back.ok + b.back.other);
    let prof = *b.c().core.profile_mut();
    let tx0 = b.c().core.counters()[1].tx;
    let mut delivered = 0u64;
    for _ in 0..a.iters {
        delivered += b.step(bench_poll_once) as u64;
    }
    b.take_tx();
    let packets = b.c().core.counters()[1].tx - tx0;
    let good = b.out.ok - ok0;
    let other = b.out.other + b.back.ok + b.back.other - other0;
    let now = *b.c().core.profile_mut();
    println!(
        "DATAPATH mode={} k={} warmup={WARMUP_ITERS} iters={} delivered={delivered} packets={packets} out={good} other={other} kicks={} busy_iters={}",
        a.mode.as_str(),
        a.k,
        a.iters,
        now.kicks - prof.kicks,
        now.busy_iters - prof.busy_iters,
    );
    b.rig.quit_and_check();
    if packets == 0 || packets != delivered || good != packets || other != 0 {
        eprintln!(
            "datapath: {delivered} frames delivered on port 0, {packets} transmitted on port 1, {good} as expected, {other} other: not every frame was forwarded"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
