//! The local APIC in xAPIC mode (Intel SDM Vol. 3, chapter 11): enable, EOI, the periodic
//! timer that bounds how long an idle core sleeps, and the MSI address that targets this CPU.

use super::time::{self, rdtsc};
use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::registers::model_specific::Msr;

/// IA32_APIC_BASE MSR (SDM Vol. 3 §11.4.4).
const IA32_APIC_BASE: u32 = 0x1B;
/// Register offsets (SDM Vol. 3 Table 11-1).
const REG_ID: usize = 0x20;
const REG_EOI: usize = 0xB0;
const REG_SVR: usize = 0xF0;
const REG_LVT_TIMER: usize = 0x320;
const REG_TIMER_INIT: usize = 0x380;
const REG_TIMER_CUR: usize = 0x390;
const REG_TIMER_DIV: usize = 0x3E0;
/// SVR bit 8: APIC software enable.
const SVR_ENABLE: u32 = 1 << 8;
/// LVT timer bit 17: periodic mode.
const LVT_PERIODIC: u32 = 1 << 17;
/// LVT bit 16: masked.
const LVT_MASKED: u32 = 1 << 16;
/// Divide configuration 0b1011: divide by 1.
const TIMER_DIV_1: u32 = 0b1011;

/// Spurious-interrupt vector (its handler sends no EOI: SDM §11.9).
pub const SPURIOUS_VECTOR: u8 = 0xFF;
/// LAPIC timer vector.
pub const TIMER_VECTOR: u8 = 0x30;
/// First vector for device (MSI-X) interrupts; port *i* uses `DEVICE_VECTOR_BASE + i`.
pub const DEVICE_VECTOR_BASE: u8 = 0x40;

static BASE: AtomicU64 = AtomicU64::new(0);

fn reg(off: usize) -> *mut u32 {
    (BASE.load(Ordering::Relaxed) as usize + off) as *mut u32
}

fn read(off: usize) -> u32 {
    // SAFETY: `off` is an xAPIC register inside the 4 KiB LAPIC page, identity-mapped (below
    // 4 GiB) once `init` stored the base.
    unsafe { reg(off).read_volatile() }
}

fn write(off: usize, v: u32) {
    // SAFETY: as in `read`.
    unsafe { reg(off).write_volatile(v) }
}

/// Mask every line of the legacy 8259 PICs. The BIOS leaves the master PIC's IRQ 0 (PIT at
/// 18.2 Hz) mapped onto vector 8, which would look like a #DF the moment interrupts are on.
fn mask_legacy_pic() {
    // SAFETY: ports 0x21/0xA1 are the 8259 interrupt mask registers (OCW1); masking all lines
    // only stops legacy interrupts, which nothing here uses.
    unsafe {
        x86_64::instructions::port::Port::<u8>::new(0x21).write(0xFF);
        x86_64::instructions::port::Port::<u8>::new(0xA1).write(0xFF);
    }
}

/// Mask the legacy PICs and software-enable this CPU's LAPIC with the spurious vector.
/// Returns the APIC ID.
pub fn init() -> u32 {
    mask_legacy_pic();
    // SAFETY: reading IA32_APIC_BASE has no side effects.
    let msr = unsafe { Msr::new(IA32_APIC_BASE).read() };
    BASE.store(msr & 0xF_FFFF_F000, Ordering::Relaxed);
    write(REG_SVR, SVR_ENABLE | u32::from(SPURIOUS_VECTOR));
    read(REG_ID) >> 24
}

/// Signal end of interrupt.
#[inline]
pub fn eoi() {
    write(REG_EOI, 0);
}

/// The LAPIC timer's count rate in Hz (divide-by-1), measured once by [`calibrate_timer`].
static TIMER_HZ: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Window of the timer measurement against the TSC: 250 µs. Both ends are read between two
/// TSC reads (the narrowest of [`TIMER_SAMPLE_READS`]), so a descheduled vCPU inside the window
/// does not skew it; a 1 µs bracket is 0.4% of it, against the tens of percent the idle timer
/// and console pacing tolerate.
const TIMER_CALIBRATION_US: u64 = 250;
/// Reads per end of the window; the one with the narrowest TSC bracket is kept.
const TIMER_SAMPLE_READS: usize = 3;

/// The current count between two TSC reads: (TSC at the bracket's midpoint × 2, count), the
/// narrowest bracket of [`TIMER_SAMPLE_READS`] reads.
fn timer_sample() -> (u64, u32) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..TIMER_SAMPLE_READS {
        let before = rdtsc();
        let c = read(REG_TIMER_CUR);
        let after = rdtsc();
        if after - before < best.0 {
            best = (after - before, before + after, c);
        }
    }
    (best.1, best.2)
}

/// A LAPIC timer rate measurement under way ([`calibrate_timer_start`]): the rate itself when
/// the hypervisor leaf gave it, else the first sample of the count and the TSC at which the
/// [`TIMER_CALIBRATION_US`] window ends.
pub enum TimerWindow {
    /// From CPUID leaf 0x40000010's APIC bus rate (Hz).
    Known(u64),
    /// Counting down from `u32::MAX` since the sample (TSC midpoint × 2, count).
    Counting { t0: u64, c0: u32, end: u64 },
}

/// Start measuring the LAPIC timer's count rate (QEMU's APIC bus runs at 1 GHz, real chips
/// vary), kept for every CPU: the timer runs off the same bus clock on all of them. From the
/// hypervisor leaf 0x40000010's APIC bus rate when there is one (not from leaf 0x15's crystal:
/// a hypervisor may pass that leaf through while emulating the timer at its own rate), else
/// measured against the TSC over at least [`TIMER_CALIBRATION_US`]: the boot logs in between
/// and [`calibrate_timer_finish`] waits out only what is left. Call once on the boot CPU after
/// its [`init`] and the TSC calibration; nothing else may program the timer until the finish.
pub fn calibrate_timer_start() -> TimerWindow {
    write(REG_TIMER_DIV, TIMER_DIV_1);
    write(REG_LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    let from_cpuid = time::hypervisor_timing_khz()
        .map(|(_, apic_khz)| apic_khz * 1000)
        .filter(|&hz| hz != 0);
    match from_cpuid {
        Some(hz) => TimerWindow::Known(hz),
        None => {
            write(REG_TIMER_INIT, u32::MAX);
            let (t0, c0) = timer_sample();
            let end = rdtsc() + time::us_to_tsc(TIMER_CALIBRATION_US);
            TimerWindow::Counting { t0, c0, end }
        }
    }
}

/// End the measurement [`calibrate_timer_start`] began (waiting out the rest of its window, if
/// any) and keep the rate for every CPU. Returns the rate in Hz (at least 1 kHz).
pub fn calibrate_timer_finish(w: TimerWindow) -> u64 {
    let hz = match w {
        TimerWindow::Known(hz) => hz,
        TimerWindow::Counting { t0, c0, end } => {
            while rdtsc() < end {
                core::hint::spin_loop();
            }
            let (t1, c1) = timer_sample();
            // Half TSC ticks over the window (both midpoints are doubled).
            let half_ticks = (t1 - t0).max(1);
            (u128::from(c0.wrapping_sub(c1)) * 2 * u128::from(time::tsc_hz())
                / u128::from(half_ticks)) as u64
        }
    };
    write(REG_TIMER_INIT, 0);
    let hz = hz.max(1000);
    TIMER_HZ.store(hz, core::sync::atomic::Ordering::Release);
    hz
}

/// [`calibrate_timer_start`] and [`calibrate_timer_finish`] at once (a window of exactly
/// [`TIMER_CALIBRATION_US`]). Returns the rate in Hz (at least 1 kHz).
pub fn calibrate_timer() -> u64 {
    calibrate_timer_finish(calibrate_timer_start())
}

/// Start the periodic timer on [`TIMER_VECTOR`] every `period_us` microseconds at the rate
/// [`calibrate_timer`] measured (calibrating now if it never ran). Returns that rate in Hz.
pub fn start_periodic_timer(period_us: u64) -> u64 {
    let hz = match TIMER_HZ.load(core::sync::atomic::Ordering::Acquire) {
        0 => calibrate_timer(),
        hz => hz,
    };
    let count = (hz * period_us / 1_000_000).clamp(1, u64::from(u32::MAX)) as u32;
    write(REG_TIMER_DIV, TIMER_DIV_1);
    write(REG_LVT_TIMER, LVT_PERIODIC | u32::from(TIMER_VECTOR));
    write(REG_TIMER_INIT, count);
    hz
}

/// Interrupt Command Register, low and high halves (SDM Vol. 3 §11.6.1).
const REG_ICR_LOW: usize = 0x300;
const REG_ICR_HIGH: usize = 0x310;
/// ICR delivery status (bit 12): set while the IPI is being sent.
const ICR_PENDING: u32 = 1 << 12;
/// ICR level assert (bit 14).
const ICR_ASSERT: u32 = 1 << 14;
/// ICR delivery modes (bits 10:8): INIT and Start-up.
const ICR_INIT: u32 = 0b101 << 8;
const ICR_STARTUP: u32 = 0b110 << 8;

/// Send an IPI: destination APIC ID in ICR high bits 31:24, then the low word, which sends.
/// Waits (bounded) for the delivery-status bit to clear.
fn send_icr(apic_id: u32, low: u32) {
    write(REG_ICR_HIGH, (apic_id & 0xFF) << 24);
    write(REG_ICR_LOW, low);
    for _ in 0..1_000_000 {
        if read(REG_ICR_LOW) & ICR_PENDING == 0 {
            break;
        }
        core::hint::spin_loop();
    }
}

/// INIT IPI (asserted) to `apic_id` (SDM Vol. 3 §9.4.4.1).
pub fn send_init(apic_id: u32) {
    send_icr(apic_id, ICR_INIT | ICR_ASSERT);
}

/// Start-up IPI: the AP starts in real mode at `vector << 12`.
pub fn send_sipi(apic_id: u32, vector: u8) {
    send_icr(apic_id, ICR_STARTUP | ICR_ASSERT | u32::from(vector));
}

/// A fixed-delivery IPI with `vector` to `apic_id`.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send_icr(apic_id, ICR_ASSERT | u32::from(vector));
}

/// MSI address that delivers to this CPU (SDM Vol. 3 §11.11.1: 0xFEE in bits 31:20,
/// destination APIC ID in bits 19:12, physical destination mode).
pub fn msi_address(apic_id: u32) -> u64 {
    0xFEE0_0000 | (u64::from(apic_id & 0xFF) << 12)
}
