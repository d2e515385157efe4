//! Time from the TSC, its rate from CPUID (leaf 0x15, or the hypervisor's 0x40000010) or
//! measured once against PIT channel 2 (Intel 8254: 1,193,182 Hz input), or against channel 0
//! where port 0x61 (channel 2's gate and OUT) is absent, as on QEMU's `-machine microvm`.
//!
//! Under QEMU TCG the TSC follows the host clock; under `-icount shift=0` one TSC tick is one
//! guest instruction, which is what the benchmarks report as "cycles" there.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use x86_64::instructions::port::Port;

/// PIT input clock in Hz (8254 datasheet).
const PIT_HZ: u64 = 1_193_182;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static TSC_BOOT: AtomicU64 = AtomicU64::new(0);
/// Where [`TSC_HZ`] came from (a [`TscSource`] as u8).
static TSC_SOURCE: AtomicU8 = AtomicU8::new(TscSource::Pit as u8);

/// Read the time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Where the TSC rate came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TscSource {
    /// CPUID leaf 0x15 (TSC/crystal ratio; crystal Hz from 0x15 ECX or derived from 0x16).
    Cpuid15 = 0,
    /// The hypervisor timing leaf 0x40000010 (EAX: TSC kHz; KVM with `vmware-cpuid-freq`,
    /// VMware).
    Hypervisor = 1,
    /// Measured against PIT channel 2 ([`calibrate_finish`]).
    Pit = 2,
    /// Measured against PIT channel 0 ([`calibrate_finish`]): port 0x61 reads 0xFF (nothing
    /// there: QEMU microvm has a PIT but no port 0x61, so channel 2's gate cannot be raised nor
    /// its OUT read; the channel 2 window then ended at once and the rate fell back to
    /// [`NO_PIT_TSC_HZ`]). Channel 0's gate is tied high.
    Pit0 = 3,
}

impl TscSource {
    /// For the boot log.
    pub fn as_str(self) -> &'static str {
        match self {
            TscSource::Cpuid15 => "CPUID leaf 0x15",
            TscSource::Hypervisor => "hypervisor leaf 0x40000010",
            TscSource::Pit => "calibrated against PIT channel 2",
            TscSource::Pit0 => "calibrated against PIT channel 0, no port 0x61",
        }
    }
}

/// Where the TSC rate came from.
pub fn tsc_source() -> TscSource {
    match TSC_SOURCE.load(Ordering::Relaxed) {
        0 => TscSource::Cpuid15,
        1 => TscSource::Hypervisor,
        3 => TscSource::Pit0,
        _ => TscSource::Pit,
    }
}

/// `cpuid(leaf, 0)` as (eax, ebx, ecx, edx).
fn cpuid(leaf: u32) -> (u32, u32, u32, u32) {
    // CPUID has no side effects and exists on every x86_64 CPU; a leaf above the maximum
    // returns some other leaf's data, which the callers rule out first.
    let r = core::arch::x86_64::__cpuid_count(leaf, 0);
    (r.eax, r.ebx, r.ecx, r.edx)
}

/// The crystal clock in Hz from CPUID leaf 0x15 (ECX), or derived from leaf 0x16's base MHz
/// (as Linux does for parts that leave 0x15 ECX zero); `None` without leaf 0x15 data.
/// Also the LAPIC timer's input on those parts ([`super::apic::calibrate_timer`]).
pub fn cpuid_crystal_hz() -> Option<(u64, u32, u32)> {
    let max = cpuid(0).0;
    if max < 0x15 {
        return None;
    }
    let (den, num, crystal, _) = cpuid(0x15);
    if den == 0 || num == 0 {
        return None;
    }
    let crystal = if crystal != 0 {
        u64::from(crystal)
    } else if max >= 0x16 && cpuid(0x16).0 != 0 {
        u64::from(cpuid(0x16).0) * 1_000_000 * u64::from(den) / u64::from(num)
    } else {
        return None;
    };
    Some((crystal, den, num))
}

/// The hypervisor timing leaf 0x40000010 (EAX: TSC kHz, EBX: APIC bus kHz), if the CPU says
/// it runs under a hypervisor (CPUID.1:ECX bit 31) and the hypervisor lists that leaf.
pub fn hypervisor_timing_khz() -> Option<(u64, u64)> {
    if cpuid(1).2 & (1 << 31) == 0 || cpuid(0x4000_0000).0 < 0x4000_0010 {
        return None;
    }
    let (tsc_khz, apic_khz, _, _) = cpuid(0x4000_0010);
    (tsc_khz != 0).then_some((u64::from(tsc_khz), u64::from(apic_khz)))
}

/// Start setting the TSC rate: CPUID leaf 0x15 when it gives one, else the hypervisor leaf
/// 0x40000010 (both at once), else a PIT window is started here and ended by
/// [`calibrate_finish`] (about 2 ms later, or at once if the work in between took that long:
/// the boot runs memory set-up inside the window). `origin` (a TSC value, the PVH entry's) is
/// where [`uptime_us`] and [`uptime_ns`] count from. Until the rate is set, [`tsc_hz`] is 0,
/// [`uptime_us`] reads 0 and a [`Deadline`] is already expired: nothing may wait in between.
pub fn calibrate_start(origin: u64) {
    TSC_BOOT.store(origin, Ordering::Relaxed);
    if let Some((crystal, den, num)) = cpuid_crystal_hz() {
        set_rate(
            crystal * u64::from(num) / u64::from(den),
            TscSource::Cpuid15,
        );
    } else if let Some((khz, _)) = hypervisor_timing_khz() {
        set_rate(khz * 1000, TscSource::Hypervisor);
    } else {
        let ch = if port61_absent() {
            PitChannel::Ch0
        } else {
            PitChannel::Ch2
        };
        let (saved, s0) = pit_start(ch);
        *PIT_WINDOW.lock() = Some((ch, saved, s0));
    }
}

/// Whether port 0x61 (NMI status and control: channel 2's gate, bit 0, and OUT, bit 5) is
/// missing: it reads 0xFF (an unassigned I/O port under QEMU; bits 6–7, NMI sources, are never
/// both set at boot on a PC).
fn port61_absent() -> bool {
    // SAFETY: reading port 0x61 has no side effect (NMI status and control, read part).
    unsafe { Port::<u8>::new(0x61).read() == 0xff }
}

/// Which PIT channel a window counts on.
#[derive(Copy, Clone, PartialEq, Eq)]
enum PitChannel {
    /// Channel 2 (port 0x42), gated and read back through port 0x61.
    Ch2,
    /// Channel 0 (port 0x40), gate tied high; OUT read through the 8254 read-back command's
    /// status byte (bit 7). IRQ 0 is masked at the PIC and interrupts are off during the
    /// window.
    Ch0,
}

/// End the PIT window [`calibrate_start`] began, if any, and set the rate (waits out the rest
/// of the window). Idempotent.
pub fn calibrate_finish() {
    let Some((ch, saved, s0)) = PIT_WINDOW.lock().take() else {
        return;
    };
    // The window overran the counter (the work in between took more than 54.9 ms): a fresh one.
    let hz = pit_finish(ch, saved, s0).unwrap_or_else(|| {
        let (saved, s0) = pit_start(ch);
        pit_finish(ch, saved, s0).unwrap_or(NO_PIT_TSC_HZ)
    });
    let src = match ch {
        PitChannel::Ch2 => TscSource::Pit,
        PitChannel::Ch0 => TscSource::Pit0,
    };
    set_rate(hz.max(1), src);
}

/// A PIT window begun by [`calibrate_start`]: its channel, port 0x61 as it was, the first
/// sample.
static PIT_WINDOW: spin::Mutex<Option<(PitChannel, u8, PitSample)>> = spin::Mutex::new(None);

fn set_rate(hz: u64, src: TscSource) {
    TSC_HZ.store(hz, Ordering::Relaxed);
    TSC_SOURCE.store(src as u8, Ordering::Relaxed);
    NS_PER_TSC_Q32.store(
        ((1_000_000_000u128 << 32) / u128::from(hz)) as u64,
        Ordering::Relaxed,
    );
}

/// Shortest PIT window: 1 ms (1,193 PIT ticks). Below it one PIT tick (0.84 µs) alone is
/// 0.07% of the window.
const PIT_MIN_WINDOW: u64 = PIT_HZ / 1000;
/// Longest PIT window: 50 ms, short of the 16-bit counter's 54.9 ms wrap from 0xFFFF.
const PIT_MAX_WINDOW: u64 = PIT_HZ / 20;
/// The window ends once its error bound (both end samples' half brackets plus a PIT tick's
/// quantisation at each end, against the window) is below this many parts per million: 0.1%, a fifth of the 0.5% the
/// timeouts, `Deadline` and the pps figures can take.
const PIT_ERROR_PPM: u64 = 1000;
/// Reads per end sample; the one with the narrowest TSC bracket is kept (a vCPU descheduled
/// inside one read only widens that read's bracket).
const PIT_SAMPLE_READS: usize = 3;
/// Samples before giving up on a PIT that does not count (none there: reads float high).
const PIT_MAX_SAMPLES: u32 = 1_000_000;
/// The TSC rate assumed if the PIT does not count: 1 GHz (only timeouts depend on it then).
const NO_PIT_TSC_HZ: u64 = 1_000_000_000;

/// One read of PIT channel 2's counter between two TSC reads.
#[derive(Copy, Clone)]
struct PitSample {
    /// TSC before the latch command.
    before: u64,
    /// TSC after the second data byte.
    after: u64,
    /// The counter (counts down).
    count: u16,
    /// OUT (port 0x61 bit 5): high once the counter passed zero.
    out: bool,
}

impl PitSample {
    /// The TSC at the bracket's midpoint, in half ticks (exact).
    fn mid2(&self) -> u64 {
        self.before + self.after
    }
}

/// Channel `ch` latched and read: the narrowest bracket of [`PIT_SAMPLE_READS`] reads.
fn pit_sample(ch: PitChannel) -> PitSample {
    let mut best: Option<PitSample> = None;
    for _ in 0..PIT_SAMPLE_READS {
        let (data, latch) = match ch {
            PitChannel::Ch2 => (0x42, 0b1000_0000), // counter latch, channel 2
            PitChannel::Ch0 => (0x40, 0b0000_0000), // counter latch, channel 0
        };
        // SAFETY: ports 0x40/0x42/0x43/0x61 are PIT channel 0's and 2's data, the PIT mode
        // register and the NMI status and control port; only the calibration uses them, on
        // the boot CPU.
        let s = unsafe {
            let mut mode = Port::<u8>::new(0x43);
            let mut chan = Port::<u8>::new(data);
            let mut ctl = Port::<u8>::new(0x61);
            let before = rdtsc();
            mode.write(latch);
            let lo = chan.read();
            let hi = chan.read();
            let after = rdtsc();
            let out = match ch {
                PitChannel::Ch2 => ctl.read() & 0x20 != 0,
                PitChannel::Ch0 => {
                    // 8254 read-back (0b11 in bits 7–6): bit 5 set = do not latch the count,
                    // bit 4 clear = latch the status, bit 1 = channel 0; the status byte's
                    // bit 7 is OUT.
                    mode.write(0b1110_0010);
                    chan.read() & 0x80 != 0
                }
            };
            PitSample {
                before,
                after,
                count: u16::from_le_bytes([lo, hi]),
                out,
            }
        };
        if best.is_none_or(|b| s.after - s.before < b.after - b.before) {
            best = Some(s);
        }
    }
    best.expect("PIT_SAMPLE_READS > 0")
}

/// Start PIT channel `ch` counting down from 0xFFFF (mode 0; channel 2: gate on) and take
/// the window's first sample. Returns port 0x61 as it was (0 for channel 0), and that sample.
fn pit_start(ch: PitChannel) -> (u8, PitSample) {
    if ch == PitChannel::Ch0 {
        // SAFETY: ports 0x43/0x40 are the PIT mode register and channel 0's data; IRQ 0 is
        // masked at the PIC (or unrouted) and interrupts are off, so the terminal count
        // interrupts nothing.
        unsafe {
            Port::<u8>::new(0x43).write(0b0011_0000); // channel 0, lobyte/hibyte, mode 0
            Port::<u8>::new(0x40).write(0xff);
            Port::<u8>::new(0x40).write(0xff);
        }
        return (0, pit_sample(ch));
    }
    // SAFETY: as in `pit_sample`.
    let saved = unsafe {
        let mut ctl = Port::<u8>::new(0x61);
        let mut mode = Port::<u8>::new(0x43);
        let mut ch2 = Port::<u8>::new(0x42);
        let v = ctl.read();
        ctl.write((v & !0x02) | 0x01); // speaker off, gate on
        mode.write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count)
        ch2.write(0xff);
        ch2.write(0xff);
        v
    };
    (saved, pit_sample(ch))
}

/// The TSC rate measured against PIT channel 2 from `s0` ([`pit_start`]): the counter is
/// latched and read at both ends of the window, each read bracketed by TSC reads, so neither
/// the start of counting nor a vCPU descheduled inside the window (under TCG on a loaded host)
/// skews it; only each end read's own bracket does, and the window runs (1–50 ms) until that
/// bound is under [`PIT_ERROR_PPM`]. `None` if the counter passed zero (the window is more
/// than 54.9 ms old); [`NO_PIT_TSC_HZ`] if it never counted. Restores port 0x61 to `saved`
/// (channel 2 only).
fn pit_finish(ch: PitChannel, saved: u8, s0: PitSample) -> Option<u64> {
    let mut hz = Some(NO_PIT_TSC_HZ);
    for _ in 0..PIT_MAX_SAMPLES {
        let s = pit_sample(ch);
        if s.out || s0.out {
            hz = None;
            break;
        }
        let ticks = u64::from(s0.count.wrapping_sub(s.count));
        if ticks < PIT_MIN_WINDOW {
            continue;
        }
        // Error bound in half TSC ticks: half of each end's bracket, plus one PIT tick per end.
        let tsc2 = s.mid2() - s0.mid2(); // half ticks
        let bound2 = (s.after - s.before) + (s0.after - s0.before) + 2 * tsc2 / ticks;
        if bound2 * 1_000_000 <= tsc2 * PIT_ERROR_PPM || ticks >= PIT_MAX_WINDOW {
            hz = Some((u128::from(tsc2) * u128::from(PIT_HZ) / (2 * u128::from(ticks))) as u64);
            break;
        }
    }
    if ch == PitChannel::Ch2 {
        // SAFETY: as in `pit_sample`; restores port 0x61.
        unsafe { Port::<u8>::new(0x61).write(saved) };
    }
    hz
}

/// TSC frequency in Hz (0 before the rate is set: [`calibrate_start`], [`calibrate_finish`]).
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Microseconds since the origin given to [`calibrate_start`] (the PVH entry).
pub fn uptime_us() -> u64 {
    let hz = TSC_HZ.load(Ordering::Relaxed);
    if hz == 0 {
        return 0;
    }
    let d = rdtsc().wrapping_sub(TSC_BOOT.load(Ordering::Relaxed));
    (d as u128 * 1_000_000 / hz as u128) as u64
}

/// Nanoseconds since the origin given to [`calibrate_start`] (the PVH entry). One multiply and a shift (`NS_PER_TSC_Q32` is ns per
/// TSC tick in 32.32 fixed point): cheap enough for the per-burst path, unlike a 128-bit
/// division.
#[inline]
pub fn uptime_ns() -> u64 {
    let d = rdtsc().wrapping_sub(TSC_BOOT.load(Ordering::Relaxed));
    ((u128::from(d) * u128::from(NS_PER_TSC_Q32.load(Ordering::Relaxed))) >> 32) as u64
}

/// ns per TSC tick, 32.32 fixed point (0 before the rate is set).
static NS_PER_TSC_Q32: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds in `ticks` TSC ticks.
#[inline]
pub fn tsc_to_ns(ticks: u64) -> u64 {
    ((u128::from(ticks) * u128::from(NS_PER_TSC_Q32.load(Ordering::Relaxed))) >> 32) as u64
}

/// TSC ticks in `ms` milliseconds.
#[inline]
pub fn ms_to_tsc(ms: u64) -> u64 {
    tsc_hz() / 1000 * ms
}

/// TSC ticks in `us` microseconds.
#[inline]
pub fn us_to_tsc(us: u64) -> u64 {
    tsc_hz() / 1_000_000 * us
}

/// A point in TSC time that bounds a wait ("no hang without a timeout").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Deadline(u64);

impl Deadline {
    /// `ms` milliseconds from now.
    pub fn after_ms(ms: u64) -> Deadline {
        Deadline(rdtsc() + ms_to_tsc(ms))
    }

    /// `us` microseconds from now.
    pub fn after_us(us: u64) -> Deadline {
        Deadline(rdtsc() + us_to_tsc(us))
    }

    /// Whether the deadline has passed.
    #[inline]
    pub fn expired(&self) -> bool {
        rdtsc() > self.0
    }

    /// Spin until the deadline has passed.
    pub fn wait(&self) {
        while !self.expired() {
            core::hint::spin_loop();
        }
    }
}
