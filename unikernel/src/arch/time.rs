//! Time from the TSC, calibrated once against PIT channel 2 (Intel 8254: 1,193,182 Hz input).
//!
//! Under QEMU TCG the TSC follows the host clock; under `-icount shift=0` one TSC tick is one
//! guest instruction, which is what the benchmarks report as "cycles" there.

use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::instructions::port::Port;

/// PIT input clock in Hz (8254 datasheet).
const PIT_HZ: u64 = 1_193_182;
/// Calibration window: 10 ms worth of PIT ticks (11,932), short enough to keep boot fast and
/// long enough for a ±0.1% estimate.
const CAL_PIT_TICKS: u64 = PIT_HZ / 100;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static TSC_BOOT: AtomicU64 = AtomicU64::new(0);

/// Read the time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Calibration windows taken; the smallest result is kept. Under TCG the vCPU thread can be
/// descheduled after the PIT reached its terminal count and before the loop sees it, which only
/// ever lengthens the TSC interval (over-estimates the rate: 2.5–6.5 GHz for a 2.46 GHz TSC was
/// seen with 8 guests on 2 host cores); the minimum is the least disturbed window. Five windows
/// cost 50 ms of boot.
const CAL_ROUNDS: usize = 5;

/// Calibrate the TSC against PIT channel 2 (minimum of [`CAL_ROUNDS`] 10 ms windows).
/// `origin` (a TSC value, the PVH entry's) is where [`uptime_us`] and [`uptime_ns`] count from.
pub fn calibrate(origin: u64) {
    TSC_BOOT.store(origin, Ordering::Relaxed);
    let hz = (0..CAL_ROUNDS)
        .map(|_| calibrate_once())
        .min()
        .unwrap_or(1)
        .max(1);
    TSC_HZ.store(hz, Ordering::Relaxed);
    NS_PER_TSC_Q32.store(
        ((1_000_000_000u128 << 32) / u128::from(hz)) as u64,
        Ordering::Relaxed,
    );
}

/// One 10 ms window of PIT channel 2 in one-shot mode (gate through port 0x61): TSC Hz.
fn calibrate_once() -> u64 {
    // SAFETY: ports 0x42/0x43/0x61 are the PIT channel 2 data, mode register and the NMI status
    // and control port; nothing else in the kernel uses them.
    unsafe {
        let mut ctl = Port::<u8>::new(0x61);
        let mut mode = Port::<u8>::new(0x43);
        let mut ch2 = Port::<u8>::new(0x42);
        let v = ctl.read();
        ctl.write((v & !0x02) | 0x01); // speaker off, gate on
        mode.write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count)
        ch2.write((CAL_PIT_TICKS & 0xff) as u8);
        ch2.write((CAL_PIT_TICKS >> 8) as u8);
        let t0 = rdtsc();
        let mut spins = 0u64;
        // Bit 5 of port 0x61 is channel 2's OUT; it goes high at terminal count. Bounded: a
        // missing PIT must not hang boot.
        while ctl.read() & 0x20 == 0 && spins < 50_000_000 {
            spins += 1;
        }
        let t1 = rdtsc();
        ctl.write(v);
        (t1 - t0) * PIT_HZ / CAL_PIT_TICKS
    }
}

/// TSC frequency in Hz (0 before [`calibrate`]).
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Microseconds since the origin given to [`calibrate`] (the PVH entry).
pub fn uptime_us() -> u64 {
    let hz = TSC_HZ.load(Ordering::Relaxed);
    if hz == 0 {
        return 0;
    }
    let d = rdtsc().wrapping_sub(TSC_BOOT.load(Ordering::Relaxed));
    (d as u128 * 1_000_000 / hz as u128) as u64
}

/// Nanoseconds since the origin given to [`calibrate`] (the PVH entry). One multiply and a shift (`NS_PER_TSC_Q32` is ns per
/// TSC tick in 32.32 fixed point): cheap enough for the per-burst path, unlike a 128-bit
/// division.
#[inline]
pub fn uptime_ns() -> u64 {
    let d = rdtsc().wrapping_sub(TSC_BOOT.load(Ordering::Relaxed));
    ((u128::from(d) * u128::from(NS_PER_TSC_Q32.load(Ordering::Relaxed))) >> 32) as u64
}

/// ns per TSC tick, 32.32 fixed point (0 before [`calibrate`]).
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
