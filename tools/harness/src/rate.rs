//! The open-loop, paced generator: one trial offers frames into guest port 0 at a constant rate
//! (frames per second) for a fixed time and measures what comes out of port 1, with per-frame
//! latency (issue 42 items 1 and 2); [`trial_bidir`] offers both ports at once (item 3).
//!
//! Past ~800 lines because the paced sender, the receivers, the tally, the bidirectional trial
//! and the ceiling's stand-in share the trial's private types (`Sent`, the legs); the tests are
//! its last ~110 lines.
//!
//! **Backend.** QEMU's unix-datagram backend (`-netdev dgram`), the one the closed-loop
//! generator and the peer benchmarks already run on, with a *non-blocking* send. A send that
//! the host refuses (`EAGAIN`/`ENOBUFS`: QEMU's socket queue is full) is counted as offered and
//! dropped at the host ([`Trial::refused`]) and never retried, so the offered rate is the rate
//! the schedule asked for, not what back-pressure allowed.
//!
//! **Pacing.** Frame `i` of a trial is due at `i / rate` seconds after the trial's start; the
//! sender sleeps while the next frame is more than [`SPIN_BELOW`] away and yields below that, and
//! sends every frame that is due: a late sender catches up in a burst of at most
//! [`CATCH_UP_FRAMES`] frames. A sender later than that (the
//! host preempted it) does not burst the backlog into the guest above the rate asked for, which
//! would turn the host's hiccup into the guest's loss: the rest of the schedule slips by the
//! excess (re-anchored, as MoonGen's rate control keeps inter-frame gaps rather than a frame
//! count), every frame of the schedule is still offered, the trial lasts that much longer and
//! says so ([`Trial::slips`], [`Trial::slip_ms`]). The pacing error is the
//! 99th percentile, over the trial's 10 ms windows, of `|frames offered in the window − rate ×
//! 10 ms| / (rate × 10 ms)` ([`Trial::pacing_p99`]). The sending thread is pinned to the host's
//! last CPU where `sched_setaffinity` allows ([`pin_sender`]).
//!
//! **Latency.** A 64 B frame has no room for a timestamp beside the 16 B payload header
//! (magic, direction, sequence), so send times stay on the host, keyed by direction and sequence
//! number (one table per direction, [`trial_bidir`]; the frames' flows and destinations,
//! [`Offer`], do not enter the key): the send time is read from the monotonic clock immediately
//! before the `sendto` call, the receive time immediately after `recv` returns. Latency =
//! receive − send, so it includes both host socket hops, QEMU and the guest. Latencies go into
//! an HDR histogram (`hdrhistogram`, 3 significant digits, 1 ns .. 60 s); its sample count is
//! the number of frames received.
//!
//! **Ceiling.** [`ceiling`] runs the same sender unpaced for a while into a host thread that
//! stands in the guest's place (receives on `guest-0.sock`, sends each frame on to
//! `host-1.sock`); what comes back per second is the generator's ceiling on this host, printed
//! beside every result with the host's core count.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::gen::{self, HostSock, FCS_LEN};

/// Below this much time before the next frame is due the sender yields instead of sleeping
/// (a sleep overshoots by tens of microseconds).
/// The sender's timer slack is set to 1 ns (`PR_SET_TIMERSLACK`), so a sleep ends within a few
/// microseconds of its deadline instead of the default 50 µs late.
pub const SPIN_BELOW: Duration = Duration::from_micros(30);
/// Most frames a late sender catches up in one burst; a sender further behind re-anchors its
/// schedule instead (module doc). 64: a quarter of the guest's 256-entry virtio-net RX ring
/// and well inside a tap's 1,000-frame queue, so a catch-up burst cannot by itself overflow
/// what receives it (at 20,000 fps, 3.2 ms of schedule).
pub const CATCH_UP_FRAMES: u64 = 64;
/// Width of the windows the pacing error is measured over (issue 42: 10 ms).
pub const PACING_WINDOW: Duration = Duration::from_millis(10);
/// After the last frame is sent, how long the receiver waits for stragglers.
pub const DRAIN: Duration = Duration::from_millis(300);
/// Bytes of preamble, start-of-frame delimiter and inter-frame gap each frame costs on an
/// Ethernet wire besides its own bytes (IEEE 802.3: 7 + 1 + 12).
pub const WIRE_OVERHEAD: usize = 20;
/// The IMIX the search offers as one row: 64, 594 and 1518 B frames at 7:4:1.
pub const IMIX: [(usize, usize); 3] = [(64, 7), (594, 4), (1518, 1)];

/// The frame sizes a trial cycles through, bytes on the wire including the FCS: one size, or a
/// mix ([`IMIX`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sizes {
    /// Name of the row: the size (`"64"`) or `"imix"`.
    pub name: String,
    /// The cycle of sizes frame `i` takes `cycle[i % len]` from.
    pub cycle: Vec<usize>,
}

impl Sizes {
    /// One size, `size` bytes on the wire (FCS included).
    pub fn one(size: usize) -> Sizes {
        Sizes {
            name: size.to_string(),
            cycle: vec![size],
        }
    }

    /// The [`IMIX`] (7:4:1 of 64, 594, 1518 B), interleaved so that every 12 consecutive
    /// frames hold the mix.
    pub fn imix() -> Sizes {
        let mut cycle = Vec::new();
        let mut left: Vec<(usize, usize)> = IMIX.to_vec();
        while left.iter().any(|&(_, n)| n > 0) {
            for (size, n) in &mut left {
                if *n > 0 {
                    cycle.push(*size);
                    *n -= 1;
                }
            }
        }
        Sizes {
            name: "imix".into(),
            cycle,
        }
    }

    /// The row's name for messages: `64 B`, or `imix` for a mix.
    pub fn label(&self) -> String {
        if self.cycle.len() == 1 {
            format!("{} B", self.name)
        } else {
            self.name.clone()
        }
    }

    /// Mean frame size of the cycle, bytes on the wire (FCS included).
    pub fn mean(&self) -> f64 {
        self.cycle.iter().sum::<usize>() as f64 / self.cycle.len() as f64
    }

    /// Gbit/s on an Ethernet wire of `pps` frames per second of these sizes: each frame's bytes
    /// plus [`WIRE_OVERHEAD`].
    pub fn gbps(&self, pps: f64) -> f64 {
        pps * (self.mean() + WIRE_OVERHEAD as f64) * 8.0 / 1e9
    }
}

/// What a trial's frames vary besides their size (`bench --search --flows`, `--routes N`):
/// frame `i` is flow `i % flows` (UDP source port `10000 + i % flows`, [`gen::UDP_SRC_PORT_BASE`])
/// to destination `dsts[i % dsts.len()]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// UDP flows the frames cycle over (at least 1).
    pub flows: u16,
    /// IPv4 destinations the frames cycle over (at least one; default the host behind port 1,
    /// 10.0.1.2).
    pub dsts: Vec<[u8; 4]>,
}

impl Default for Offer {
    fn default() -> Self {
        Offer {
            flows: 1,
            dsts: vec![gen::peer_ip(1)],
        }
    }
}

impl Offer {
    /// Flow and destination of frame `i`: `(i % flows, dsts[i % dsts.len()])`.
    pub fn frame(&self, i: u64) -> (u16, [u8; 4]) {
        (
            (i % u64::from(self.flows.max(1))) as u16,
            self.dsts[(i % self.dsts.len() as u64) as usize],
        )
    }
}

/// Latency of the frames received in one trial, microseconds, from the HDR histogram.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Samples: equal to the frames received.
    pub count: u64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// The CDF: (latency µs, fraction of frames at or below it), from the histogram's quantile
    /// iteration (four points per half-distance to 100 %).
    pub cdf: Vec<(f64, f64)>,
}

impl Latency {
    /// Summarises `h` (values in nanoseconds); `None` if it is empty.
    pub fn from_histogram(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency {
            count: h.len(),
            min_us: us(h.min()),
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
            cdf: h
                .iter_quantiles(4)
                .map(|v| (us(v.value_iterated_to()), v.quantile_iterated_to()))
                .collect(),
        })
    }
}

/// One trial's results.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Trial {
    /// The rate asked for, frames/s (infinite for the unpaced ceiling run: serialised `null`).
    pub rate_pps: f64,
    /// Measured sending time, s (first frame due to last frame offered).
    pub seconds: f64,
    /// Frames offered (sent or refused).
    pub offered: u64,
    /// `offered / seconds`.
    pub offered_pps: f64,
    /// Offered frames the host refused (`EAGAIN`/`ENOBUFS`: QEMU's socket queue full):
    /// dropped by the generator at the host, never retried.
    pub refused: u64,
    /// Distinct valid frames of this trial received out of port 1.
    pub received: u64,
    /// `received / seconds`.
    pub forwarded_pps: f64,
    /// `(offered − received) / offered`.
    pub loss: f64,
    /// Frames the guest counted as dropped during the trial (sum of its drop counters' growth;
    /// 0 when the runner has no guest counters).
    pub guest_dropped: u64,
    /// The guest's drop counters that grew during the trial, by reason.
    pub guest_drops: BTreeMap<String, u64>,
    /// Lost frames neither refused at send nor counted by the guest: QEMU or the host's
    /// receive queue.
    pub unattributed: u64,
    /// Received frames that failed validation, were duplicates or belonged to an earlier trial.
    pub bad: u64,
    /// The pacing error: p99 over 10 ms windows of the offered rate's relative deviation.
    pub pacing_p99: f64,
    /// Times the sender fell more than [`CATCH_UP_FRAMES`] behind its schedule, which then slipped
    /// (re-anchored) rather than burst: 0 on a host that kept up.
    pub slips: u64,
    /// How far the schedule slipped in all, ms (the trial lasted that much longer).
    pub slip_ms: f64,
    /// Latency of the received frames.
    pub latency: Option<Latency>,
    /// Which direction this is, in a bidirectional trial's [`Trial::directions`] (0: port 0 →
    /// port 1, 1: port 1 → port 0); `None` for a one-way trial or the two together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<usize>,
    /// A bidirectional trial's directions, each with its own offered, received, loss,
    /// refused and latency (the guest's drops are not split by direction: they are in the
    /// trial's own `guest_drops`). Empty for a one-way trial.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directions: Vec<Trial>,
}

impl Trial {
    /// Fills the loss attribution from the guest's drop counters' growth during the trial.
    pub fn attribute(&mut self, guest_drops: BTreeMap<String, u64>) {
        self.guest_dropped = guest_drops.values().sum();
        self.guest_drops = guest_drops;
        let lost = self.offered - self.received.min(self.offered);
        self.unattributed = lost.saturating_sub(self.refused + self.guest_dropped);
    }
}

/// Pins the calling thread to the host's last CPU. Returns where it is pinned, or why not
/// (an error from `sched_setaffinity(2)`, or a single-CPU host).
pub fn pin_sender() -> std::result::Result<usize, String> {
    let cpus = host_cores();
    if cpus < 2 {
        return Err("one CPU: nothing to pin apart from".into());
    }
    let cpu = cpus - 1;
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(cpu)
    } else {
        Err(format!(
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// `net.unix.max_dgram_qlen`'s file.
const DGRAM_QLEN: &str = "/proc/sys/net/unix/max_dgram_qlen";

/// `net.unix.max_dgram_qlen`: how many datagrams a unix datagram socket created now will queue
/// before its senders see `EAGAIN` (Linux default 10); `None` if unreadable.
pub fn dgram_qlen() -> Option<u64> {
    std::fs::read_to_string(DGRAM_QLEN)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `net.unix.max_dgram_qlen` raised for the sockets created while this lives (a socket keeps
/// the value it was created with), put back on drop. Raising it gives QEMU's dgram socket a
/// queue as deep as a NIC's ring instead of 10 frames, so a millisecond's scheduling delay of
/// QEMU on a shared host is not loss.
#[derive(Debug)]
pub struct QlenGuard {
    old: u64,
}

impl QlenGuard {
    /// Sets the sysctl to `qlen` (root only).
    ///
    /// # Errors
    /// The sysctl cannot be read or written (not root, or no `/proc/sys/net/unix`).
    pub fn raise(qlen: u64) -> Result<QlenGuard> {
        let old = dgram_qlen().with_context(|| format!("reading {DGRAM_QLEN}"))?;
        std::fs::write(DGRAM_QLEN, qlen.to_string())
            .with_context(|| format!("writing {qlen} to {DGRAM_QLEN} (root only)"))?;
        Ok(QlenGuard { old })
    }

    /// The value it will put back.
    pub fn old(&self) -> u64 {
        self.old
    }
}

impl Drop for QlenGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(DGRAM_QLEN, self.old.to_string());
    }
}

/// Lets the unix-datagram `tx` hold `bytes` of frames not yet read by its peer
/// (`SO_SNDBUFFORCE`, root; else `SO_SNDBUF`, capped by `net.core.wmem_max`): with a deep peer
/// queue the send buffer would otherwise refuse first. Best effort: no-op on a packet socket.
pub fn widen_send_buffer(tx: &HostSock, bytes: usize) {
    use std::os::fd::AsRawFd;
    if let HostSock::Unix { sock, .. } = tx {
        let v = bytes as libc::c_int;
        for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
            // SAFETY: setsockopt reads an int from a valid pointer of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                return;
            }
        }
    }
}

/// The host's online CPU count.
pub fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What the sender returns: per-frame send times (ns since the trial's base; `u64::MAX` for a
/// refused frame) and the per-window offered counts.
struct Sent {
    send_ns: Vec<u64>,
    refused: u64,
    windows: Vec<u64>,
    seconds: f64,
    /// Times the schedule slipped ([`CATCH_UP_FRAMES`]) and by how much in all (ns).
    slips: u64,
    slip_ns: u64,
}

#[allow(clippy::too_many_arguments)]
fn pace_and_send(
    tx: &HostSock,
    sizes: &Sizes,
    offer: &Offer,
    dir: usize,
    rate_pps: f64,
    seconds: f64,
    seq_base: u64,
    base: Instant,
) -> Result<Sent> {
    let period_ns = if rate_pps.is_finite() {
        1e9 / rate_pps
    } else {
        0.0
    };
    let mut send_ns = Vec::with_capacity(if rate_pps.is_finite() {
        (rate_pps * seconds) as usize + 1
    } else {
        1 << 20
    });
    let mut windows = vec![0u64; (seconds / PACING_WINDOW.as_secs_f64()).ceil() as usize + 1];
    let mut refused = 0;
    let mut buf = Vec::with_capacity(gen::MAX_SIZE);
    let limit_ns = (seconds * 1e9) as u64;
    let mut schedule = Schedule::new(period_ns);
    let mut last_ns = 0;
    for i in 0u64.. {
        let Some(due_ns) = schedule.due(i, limit_ns) else {
            break;
        };
        let size = sizes.cycle[(i % sizes.cycle.len() as u64) as usize];
        let (flow, dst) = offer.frame(i);
        gen::build_frame_to(&mut buf, dir, seq_base + i, flow, dst, size - FCS_LEN)?;
        loop {
            let now = base.elapsed().as_nanos() as u64;
            if now >= due_ns {
                break;
            }
            let ahead = Duration::from_nanos(due_ns - now);
            if ahead > SPIN_BELOW {
                std::thread::sleep(ahead - SPIN_BELOW / 2);
            } else {
                std::thread::yield_now();
            }
        }
        let t = base.elapsed().as_nanos() as u64;
        if !rate_pps.is_finite() && t >= limit_ns {
            break;
        }
        schedule.sent(due_ns, t);
        match tx.send(&buf) {
            Ok(_) => send_ns.push(t),
            Err(e)
                if e.kind() == ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) =>
            {
                refused += 1;
                send_ns.push(u64::MAX);
            }
            Err(e) => return Err(e).with_context(|| format!("sending to {}", tx.describe())),
        }
        let w = (t / PACING_WINDOW.as_nanos() as u64) as usize;
        if w >= windows.len() && rate_pps.is_finite() {
            windows.resize(w + 1, 0);
        }
        if let Some(n) = windows.get_mut(w) {
            *n += 1;
        }
        last_ns = t;
    }
    Ok(Sent {
        send_ns,
        refused,
        windows,
        seconds: (last_ns as f64 / 1e9).max(1e-9),
        slips: schedule.slips,
        slip_ns: schedule.slip_ns,
    })
}

/// The paced sender's schedule: frame `i` due `i × period` after the start plus what the
/// schedule slipped so far ([`CATCH_UP_FRAMES`]).
struct Schedule {
    /// Time between frames, ns (0: unpaced).
    period_ns: f64,
    /// Times it slipped, and by how much in all (ns).
    slips: u64,
    slip_ns: u64,
}

impl Schedule {
    fn new(period_ns: f64) -> Schedule {
        Schedule {
            period_ns,
            slips: 0,
            slip_ns: 0,
        }
    }

    /// When frame `i` is due (ns after the start), or `None` once the schedule's own time
    /// (without slips) reaches `limit_ns`: every frame of the schedule is offered.
    fn due(&self, i: u64, limit_ns: u64) -> Option<u64> {
        let scheduled_ns = (i as f64 * self.period_ns) as u64;
        (scheduled_ns < limit_ns).then_some(scheduled_ns + self.slip_ns)
    }

    /// A frame due at `due_ns` went at `sent_ns`: more than [`CATCH_UP_FRAMES`] periods late
    /// (the host held the sender back), the rest of the schedule moves so that this frame was
    /// exactly that late, and the frames behind it catch up in one burst of at most
    /// [`CATCH_UP_FRAMES`].
    fn sent(&mut self, due_ns: u64, sent_ns: u64) {
        let catch_up_ns = (CATCH_UP_FRAMES as f64 * self.period_ns) as u64;
        if self.period_ns > 0.0 && sent_ns > due_ns + catch_up_ns {
            self.slips += 1;
            self.slip_ns += sent_ns - due_ns - catch_up_ns;
        }
    }
}

/// The pacing error of per-window counts `windows` at `rate_pps` over `seconds`: the 99th
/// percentile of `|count − expected| / expected` over the full windows (0 for an unpaced run).
pub fn pacing_p99(windows: &[u64], rate_pps: f64, seconds: f64) -> f64 {
    if !rate_pps.is_finite() {
        return 0.0;
    }
    let expected = rate_pps * PACING_WINDOW.as_secs_f64();
    let full = (seconds / PACING_WINDOW.as_secs_f64()).floor() as usize;
    let mut dev: Vec<f64> = windows
        .iter()
        .take(full)
        .map(|&c| (c as f64 - expected).abs() / expected)
        .collect();
    if dev.is_empty() {
        return 0.0;
    }
    dev.sort_by(f64::total_cmp);
    dev[((dev.len() as f64 * 0.99).ceil() as usize).clamp(1, dev.len()) - 1]
}

/// Runs one open-loop trial: frames of `sizes` into `tx` (guest port 0) at `rate_pps`
/// (`f64::INFINITY`: unpaced) for `seconds`, received on `rx` (guest port 1), which also
/// answers the guest's ARP requests for the host behind port 1 (router mode). Sequence numbers
/// start at `seq_base` (give each trial a fresh range: frames of an earlier trial that arrive
/// late are counted as [`Trial::bad`], not received). The sender is pinned by [`pin_sender`]
/// where the host allows.
///
/// # Errors
/// A send error other than `EAGAIN`/`ENOBUFS`, a receive error other than a timeout, or a
/// frame size the generator cannot build.
pub fn trial(
    tx: &HostSock,
    rx: &HostSock,
    sizes: &Sizes,
    rate_pps: f64,
    seconds: f64,
    seq_base: u64,
) -> Result<Trial> {
    trial_with(
        tx,
        rx,
        sizes,
        &Offer::default(),
        rate_pps,
        seconds,
        seq_base,
    )
}

/// [`trial`] with frames that cycle over `offer`'s flows and destinations.
///
/// # Errors
/// As [`trial`]; `offer` has no destination.
pub fn trial_with(
    tx: &HostSock,
    rx: &HostSock,
    sizes: &Sizes,
    offer: &Offer,
    rate_pps: f64,
    seconds: f64,
    seq_base: u64,
) -> Result<Trial> {
    prepare_senders(&[tx], offer, rate_pps, seconds)?;
    let mut legs = legs(&[(tx, rx, offer)], sizes, rate_pps, seconds, seq_base)?;
    let (mut t, _) = legs.remove(0);
    t.attribute(BTreeMap::new());
    Ok(t)
}

/// Checks a trial's parameters and makes its senders non-blocking (a refused send is counted,
/// never waited for) with an 8 MiB send buffer.
///
/// # Errors
/// No destination in `offer`, a duration or rate that is not positive, or a socket option
/// refused.
fn prepare_senders(tx: &[&HostSock], offer: &Offer, rate_pps: f64, seconds: f64) -> Result<()> {
    ensure!(!offer.dsts.is_empty(), "an offer with no destination");
    ensure!(seconds > 0.0, "trial of {seconds} s");
    ensure!(rate_pps > 0.0, "trial at {rate_pps} frames/s");
    for t in tx {
        t.set_nonblocking(true).context("non-blocking sends")?;
        widen_send_buffer(t, 8 << 20);
    }
    Ok(())
}

/// A sender of its own into guest port `port` of the dgram directory `dir`: an unbound unix
/// datagram socket sending to `guest-<port>.sock`, so that its non-blocking flag leaves alone
/// the generator's bound socket that receives from that port ([`trial_bidir`]).
///
/// # Errors
/// The socket cannot be created.
pub fn sender(dir: &std::path::Path, port: usize) -> Result<HostSock> {
    Ok(HostSock::Unix {
        sock: UnixDatagram::unbound().context("creating a sender socket")?,
        peer: gen::guest_sock(dir, port),
    })
}

/// A bidirectional trial: `rate_pps` frames/s into each port at once for `seconds`, two paced
/// senders (`tx[0]` into port 0, frames of direction 0 to `offer`'s destinations; `tx[1]` into
/// port 1, direction 1, to 10.0.0.2 on `offer`'s flows), received on `rx[1]` (port 1) and
/// `rx[0]` (port 0). The returned trial is both directions together (offered, received, loss,
/// latency over both; `offered_pps` and `forwarded_pps` per direction, the totals ÷ 2, as
/// `rate_pps`), with each direction in [`Trial::directions`] (0 then 1). Sequence
/// numbers of direction 1 start at `seq_base + 2^40`.
///
/// # Errors
/// As [`trial_with`].
#[allow(clippy::too_many_arguments)]
pub fn trial_bidir(
    tx: [&HostSock; 2],
    rx: [&HostSock; 2],
    sizes: &Sizes,
    offer: &Offer,
    rate_pps: f64,
    seconds: f64,
    seq_base: u64,
) -> Result<Trial> {
    prepare_senders(&tx, offer, rate_pps, seconds)?;
    let back = Offer {
        flows: offer.flows,
        dsts: vec![gen::peer_ip(0)],
    };
    let legs = legs(
        &[(tx[0], rx[1], offer), (tx[1], rx[0], &back)],
        sizes,
        rate_pps,
        seconds,
        seq_base,
    )?;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .context("creating the latency histogram")?;
    let mut t = Trial {
        rate_pps,
        ..Default::default()
    };
    let mut windows = Vec::new();
    for (d, (leg, lh)) in legs.into_iter().enumerate() {
        h.add(&lh).context("merging the directions' latencies")?;
        t.seconds = t.seconds.max(leg.seconds);
        t.offered += leg.offered;
        t.refused += leg.refused;
        t.received += leg.received;
        t.bad += leg.bad;
        t.slips += leg.slips;
        t.slip_ms = t.slip_ms.max(leg.slip_ms);
        windows.push(leg.pacing_p99);
        let mut leg = leg;
        leg.direction = Some(d);
        leg.attribute(BTreeMap::new());
        t.directions.push(leg);
    }
    // Per direction, as `rate_pps`: the search's rates are per direction.
    t.offered_pps = t.offered as f64 / 2.0 / t.seconds;
    t.forwarded_pps = t.received as f64 / 2.0 / t.seconds;
    t.loss = if t.offered == 0 {
        0.0
    } else {
        (t.offered - t.received.min(t.offered)) as f64 / t.offered as f64
    };
    t.pacing_p99 = windows.into_iter().fold(0.0, f64::max);
    t.latency = Latency::from_histogram(&h);
    t.attribute(BTreeMap::new());
    Ok(t)
}

/// Direction 1's sequence numbers start this far above direction 0's in a bidirectional trial.
const DIR1_SEQ: u64 = 1 << 40;

/// Runs one paced sender and one receiver per leg `(tx, rx, offer)` at once; leg `d` sends
/// direction `d` into `tx` and receives on `rx` (which answers the guest's ARP requests for
/// the host behind its port). Returns each leg's trial (loss not attributed) and latency
/// histogram. `tx` must already be non-blocking.
fn legs(
    legs: &[(&HostSock, &HostSock, &Offer)],
    sizes: &Sizes,
    rate_pps: f64,
    seconds: f64,
    seq_base: u64,
) -> Result<Vec<(Trial, Histogram<u64>)>> {
    for (_, rx, _) in legs {
        rx.set_nonblocking(false)?;
        rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    }
    let stop = AtomicBool::new(false);
    let base = Instant::now();
    let runs = std::thread::scope(|s| -> Result<Vec<_>> {
        let receivers: Vec<_> = legs
            .iter()
            .enumerate()
            .map(|(dir, &(_, rx, _))| {
                let stop = &stop;
                let seq0 = seq_base + dir as u64 * DIR1_SEQ;
                s.spawn(move || receive(rx, 1 - dir, dir, seq0, base, stop))
            })
            .collect();
        let senders: Vec<_> = legs
            .iter()
            .enumerate()
            .map(|(dir, &(tx, _, offer))| {
                let seq0 = seq_base + dir as u64 * DIR1_SEQ;
                s.spawn(move || {
                    let _ = pin_sender();
                    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches only
                    // this thread's timer slack.
                    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
                    pace_and_send(tx, sizes, offer, dir, rate_pps, seconds, seq0, base)
                })
            })
            .collect();
        let sent: Vec<_> = senders
            .into_iter()
            .map(|h| h.join().expect("sender panicked"))
            .collect();
        std::thread::sleep(DRAIN);
        stop.store(true, Ordering::Release);
        let got: Vec<_> = receivers
            .into_iter()
            .map(|h| h.join().expect("receiver panicked"))
            .collect();
        sent.into_iter()
            .zip(got)
            .map(|(s, g)| Ok((s?, g?)))
            .collect()
    })?;
    runs.into_iter()
        .map(|(sent, (arrivals, bad))| tally(rate_pps, &sent, arrivals, bad))
        .collect()
}

/// Receives direction `dir`'s frames on `rx` (guest port `port`) until `stop` is set after a
/// receive timeout, answering the guest's ARP requests for the host behind `port`. Returns
/// (sequence − `seq_base`, receive time in ns since `base`) per valid frame, and the count of
/// frames that were not this trial's.
fn receive(
    rx: &HostSock,
    port: usize,
    dir: usize,
    seq_base: u64,
    base: Instant,
    stop: &AtomicBool,
) -> Result<(Vec<(u64, u64)>, u64)> {
    let mut buf = vec![0u8; gen::RECV_BUF_LEN];
    let mut got = Vec::new();
    let mut bad = 0u64;
    loop {
        match rx.recv(&mut buf) {
            Ok(n) => {
                let t = base.elapsed().as_nanos() as u64;
                let f = &buf[..n];
                if let Some(r) = gen::arp_reply(f, port) {
                    rx.send(&r).context("answering the guest's ARP request")?;
                    continue;
                }
                match gen::validate_frame(f) {
                    Ok(g) if g.dir as usize == dir && g.seq >= seq_base => {
                        got.push((g.seq - seq_base, t))
                    }
                    _ => bad += 1,
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Acquire) {
                    return Ok((got, bad));
                }
            }
            Err(e) => return Err(e).with_context(|| format!("receiving from port {port}")),
        }
    }
}

/// One leg's trial (loss not attributed) and latency histogram from what it sent and received.
fn tally(
    rate_pps: f64,
    sent: &Sent,
    arrivals: Vec<(u64, u64)>,
    bad: u64,
) -> Result<(Trial, Histogram<u64>)> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .context("creating the latency histogram")?;
    let mut seen = vec![false; sent.send_ns.len()];
    let mut bad = bad;
    for (i, t) in arrivals {
        let i = i as usize;
        match sent.send_ns.get(i) {
            Some(&s) if s != u64::MAX && !seen[i] && t >= s => {
                seen[i] = true;
                h.record((t - s).max(1)).context("recording a latency")?;
            }
            _ => bad += 1,
        }
    }
    let offered = sent.send_ns.len() as u64;
    let received = h.len();
    let t = Trial {
        rate_pps,
        seconds: sent.seconds,
        offered,
        offered_pps: offered as f64 / sent.seconds,
        refused: sent.refused,
        received,
        forwarded_pps: received as f64 / sent.seconds,
        loss: if offered == 0 {
            0.0
        } else {
            (offered - received) as f64 / offered as f64
        },
        bad,
        pacing_p99: pacing_p99(&sent.windows, rate_pps, sent.seconds),
        slips: sent.slips,
        slip_ms: sent.slip_ns as f64 / 1e6,
        latency: Latency::from_histogram(&h),
        ..Default::default()
    };
    Ok((t, h))
}

/// The generator's ceiling on this host.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// Frames per second that came back through the stand-in (the ceiling).
    pub pps: f64,
    /// Frames per second the unpaced sender offered.
    pub offered_pps: f64,
    /// The host's online CPUs.
    pub host_cores: usize,
    /// The CPU the sender was pinned to, or why it was not.
    pub pinned: String,
    /// Frame sizes it was measured with.
    pub sizes: String,
}

/// Runs `f` with the generator's two host sockets (port 0 to send, port 1 to receive) and a
/// host thread in the guest's place: a unix-datagram socket on `guest-0.sock` that sends every
/// frame on to `host-1.sock` (blocking), all in a fresh directory under `/tmp`.
///
/// # Errors
/// The sockets cannot be bound, the stand-in fails, or `f` does.
pub fn with_stand_in<R>(f: impl FnOnce(&HostSock, &HostSock) -> Result<R>) -> Result<R> {
    let tmp = tempfile::Builder::new()
        .prefix("gannet-standin-")
        .tempdir_in("/tmp")
        .context("creating the stand-in's socket directory")?;
    let g = gen::Generator::bind(&gen::GenConfig {
        dir: tmp.path().to_path_buf(),
        ..Default::default()
    })?;
    let standin = UnixDatagram::bind(gen::guest_sock(tmp.path(), 0))
        .context("binding the stand-in's guest-0.sock")?;
    standin.set_read_timeout(Some(Duration::from_millis(20)))?;
    let to = gen::host_sock(tmp.path(), 1);
    let stop = AtomicBool::new(false);
    let (tx, rx) = (g.socket(0)?, g.socket(1)?);
    std::thread::scope(|s| -> Result<R> {
        let fwd = s.spawn(|| -> Result<()> {
            let mut buf = vec![0u8; gen::RECV_BUF_LEN];
            loop {
                match standin.recv(&mut buf) {
                    Ok(n) => {
                        standin
                            .send_to(&buf[..n], &to)
                            .context("stand-in sending on")?;
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if stop.load(Ordering::Acquire) {
                            return Ok(());
                        }
                    }
                    Err(e) => return Err(e).context("stand-in receiving"),
                }
            }
        });
        let r = f(&tx, &rx);
        stop.store(true, Ordering::Release);
        fwd.join().expect("stand-in panicked")?;
        r
    })
}

/// Measures the generator's ceiling for `sizes`: the unpaced sender for `seconds` through
/// [`with_stand_in`]; the ceiling is what came back per second.
///
/// # Errors
/// As [`with_stand_in`] and [`trial`]; no frame came back.
pub fn ceiling(sizes: &Sizes, seconds: f64) -> Result<Ceiling> {
    let r = with_stand_in(|tx, rx| trial(tx, rx, sizes, f64::INFINITY, seconds, 0))?;
    ensure!(
        r.received > 0,
        "the generator's ceiling run got no frame back through the stand-in"
    );
    let pinned = std::thread::spawn(pin_sender)
        .join()
        .expect("pin probe panicked")
        .map_or_else(|e| format!("not pinned ({e})"), |c| format!("cpu {c}"));
    Ok(Ceiling {
        pps: r.forwarded_pps,
        offered_pps: r.offered_pps,
        host_cores: host_cores(),
        pinned,
        sizes: sizes.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_frames_cycle_over_flows_and_destinations() {
        let o = Offer {
            flows: 3,
            dsts: vec![[192, 0, 2, 1], [198, 51, 100, 1]],
        };
        let got: Vec<_> = (0..6).map(|i| o.frame(i)).collect();
        assert_eq!(
            got,
            [
                (0, [192, 0, 2, 1]),
                (1, [198, 51, 100, 1]),
                (2, [192, 0, 2, 1]),
                (0, [198, 51, 100, 1]),
                (1, [192, 0, 2, 1]),
                (2, [198, 51, 100, 1]),
            ]
        );
        assert_eq!(Offer::default().frame(5), (0, [10, 0, 1, 2]));
        let mut buf = Vec::new();
        gen::build_frame_to(&mut buf, 0, 9, 2, [198, 51, 100, 1], 60).unwrap();
        let v = gen::validate_frame(&buf).unwrap();
        assert_eq!(v.seq, 9);
        assert_eq!(&buf[30..34], &[198, 51, 100, 1], "IPv4 destination");
        assert_eq!(
            &buf[34..36],
            &10_002u16.to_be_bytes(),
            "UDP source port of flow 2"
        );
    }

    #[test]
    fn imix_is_seven_four_one() {
        let m = Sizes::imix();
        assert_eq!(m.cycle.len(), 12);
        assert_eq!(m.cycle.iter().filter(|&&s| s == 64).count(), 7);
        assert_eq!(m.cycle.iter().filter(|&&s| s == 594).count(), 4);
        assert_eq!(m.cycle.iter().filter(|&&s| s == 1518).count(), 1);
        // (7·64 + 4·594 + 1518) / 12 = 362.83 B.
        assert!((m.mean() - 4342.0 / 12.0).abs() < 1e-9);
        assert_eq!(
            (m.label(), Sizes::one(64).label()),
            ("imix".into(), "64 B".into())
        );
    }

    #[test]
    fn wire_rate_counts_preamble_and_gap() {
        // 64 B at 14 880 952 fps is 10 Gbit/s line rate: (64 + 20) · 8 bits per frame.
        let g = Sizes::one(64).gbps(14_880_952.0);
        assert!((g - 10.0).abs() < 1e-5, "{g}");
    }

    /// A sender held back 20 ms at 20,000 fps sends at most 64 frames (3.2 ms worth) at once,
    /// then keeps the rate: the schedule slips by 16.8 ms, no frame is dropped from it.
    #[test]
    fn a_late_sender_catches_up_at_most_one_millisecond() {
        let period = 1e9 / 20_000.0; // 50 µs
        let mut s = Schedule::new(period);
        let limit = 1_000_000_000;
        // Frames 0..100 on time.
        for i in 0..100 {
            let due = s.due(i, limit).unwrap();
            s.sent(due, due + 10_000);
        }
        assert_eq!((s.slips, s.slip_ns), (0, 0));
        // Frame 100 (due at 5 ms) leaves at 25 ms: 20 ms late.
        let due = s.due(100, limit).unwrap();
        assert_eq!(due, 5_000_000);
        s.sent(due, 25_000_000);
        assert_eq!((s.slips, s.slip_ns), (1, 16_800_000));
        // The frames due by 25 ms now: frames 101..=164, the burst.
        let burst = (101..)
            .take_while(|&i| s.due(i, limit).unwrap() <= 25_000_000)
            .count();
        assert_eq!(burst, 64);
        // Frame 165 is due 50 µs after the burst: the rate is kept.
        assert_eq!(s.due(165, limit).unwrap(), 25_050_000);
        // Every frame of the 1 s schedule is still offered: 20,000 of them.
        assert_eq!(
            (0..).take_while(|&i| s.due(i, limit).is_some()).count(),
            20_000
        );
        // Unpaced: never slips.
        let mut u = Schedule::new(0.0);
        u.sent(0, 1_000_000_000);
        assert_eq!(u.slips, 0);
    }

    #[test]
    fn pacing_error_is_the_99th_percentile_deviation() {
        // 1000 fps: 10 per window. 99 exact windows and one with 15: p99 of 100 is the 99th.
        let mut w = vec![10u64; 100];
        assert_eq!(pacing_p99(&w, 1000.0, 1.0), 0.0);
        w[3] = 15;
        assert_eq!(pacing_p99(&w, 1000.0, 1.0), 0.0);
        w[4] = 5;
        assert!((pacing_p99(&w, 1000.0, 1.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn latency_percentiles_from_the_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap(); // 1..=1000 µs
        }
        let l = Latency::from_histogram(&h).unwrap();
        assert_eq!(l.count, 1000);
        assert!((l.min_us - 1.0).abs() < 0.01);
        assert!((l.p50_us - 500.0).abs() < 1.0, "{}", l.p50_us);
        assert!((l.p99_us - 990.0).abs() < 1.0, "{}", l.p99_us);
        assert!((l.max_us - 1000.0).abs() < 1.0, "{}", l.max_us);
        assert!(l.cdf.last().unwrap().1 > 0.999);
    }

    /// The ceiling run gets frames back; a paced trial through the stand-in offers the rate
    /// asked for, every frame offered either comes back or was refused at the host (the
    /// stand-in's socket keeps Linux's 10-frame queue, so a busy host may refuse a few), and
    /// every received frame has one latency sample.
    #[test]
    fn paced_trial_through_the_stand_in() {
        let c = ceiling(&Sizes::one(64), 0.3).unwrap();
        assert!(c.pps > 1000.0, "ceiling {} fps", c.pps);
        assert!(c.host_cores >= 1);
        let t = with_stand_in(|tx, rx| trial(tx, rx, &Sizes::one(128), 2000.0, 0.5, 7)).unwrap();
        assert_eq!(t.offered, 1000);
        assert_eq!(t.received + t.refused, t.offered, "{t:?}");
        assert_eq!(t.unattributed, 0);
        assert!(t.received >= 950, "{t:?}");
        assert_eq!(t.loss, t.refused as f64 / 1000.0);
        assert_eq!(t.bad, 0);
        let l = t.latency.unwrap();
        assert_eq!(l.count, t.received);
        assert!(l.min_us > 0.0 && l.min_us <= l.p50_us && l.p50_us <= l.p99_us);
        assert!(l.p99_us <= l.p999_us && l.p999_us <= l.max_us);
        // The rate asked for, over the time the schedule did not slip (a host that holds the
        // sender back makes the trial longer, not burstier).
        let paced = t.offered as f64 / (t.seconds - t.slip_ms / 1e3);
        assert!(
            (paced - 2000.0).abs() < 100.0,
            "{paced} ({} s, slipped {} ms)",
            t.seconds,
            t.slip_ms
        );
    }
}
