//! Boot phases on the guest clock: one TSC stamp at the end of each phase, the PVH entry's TSC
//! (read first thing in `arch::boot`) as the origin, reported in one line just before
//! `gannet: ready`:
//!
//! `boot: phases us: calibrate=A boot_data=B paging=C mem_map=D zone=E tsc_wait=F log=G lapic=H
//! aps=I pre_devices=J devices=K cores=L total=T`
//!
//! Each value but `total` is that phase's length in µs of guest clock (TSC at the calibrated
//! rate); `total` is PVH entry → the ready line, in µs. `cargo xtask bench boot` and the boot
//! tests parse it (`harness::bench_boot`).

use super::time::{rdtsc, tsc_hz};
use core::sync::atomic::{AtomicU64, Ordering};

/// A boot phase, named by what ends with it; in boot order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Phase {
    /// `.bss` zeroed, long mode, serial set-up, the TSC rate from CPUID or the PIT window
    /// started.
    Calibrate,
    /// GDT/IDT, the boot data, the command line parsed.
    BootData,
    /// `mem::paging::init`: the identity map above 4 GiB and the vmap area.
    Paging,
    /// `mem_map`: one `mm::Page` per page frame of the zone's span.
    MemMap,
    /// Every usable RAM range handed to the buddy allocator.
    Zone,
    /// What is left of the PIT window once memory is set up (0 when the TSC rate came from
    /// CPUID or the work took the whole window).
    TscWait,
    /// The boot CPU's LAPIC and the start of its timer measurement, then the boot log so far:
    /// `booting`, the command line, the configuration, TSC, memory.
    Log,
    /// TLB/guard set-up and the end of the boot CPU's LAPIC timer calibration (its LAPIC came
    /// up, and the measurement began, before the log).
    Lapic,
    /// The other CPUs (INIT-SIPI-SIPI, one at a time) up to `smp: N CPUs online`.
    Aps,
    /// Management-plane storage, the boot FIB, the per-CPU page lists.
    PreDevices,
    /// PCI discovery and virtio-net bring-up of every port (queues, buffers, MSI-X).
    Devices,
    /// The forwarding cores' set-up until every core has its pair up.
    Cores,
}

/// Phases in boot order and their names in the report line.
const PHASES: [(Phase, &str); 12] = [
    (Phase::Calibrate, "calibrate"),
    (Phase::BootData, "boot_data"),
    (Phase::Paging, "paging"),
    (Phase::MemMap, "mem_map"),
    (Phase::Zone, "zone"),
    (Phase::TscWait, "tsc_wait"),
    (Phase::Log, "log"),
    (Phase::Lapic, "lapic"),
    (Phase::Aps, "aps"),
    (Phase::PreDevices, "pre_devices"),
    (Phase::Devices, "devices"),
    (Phase::Cores, "cores"),
];

/// The TSC at the PVH entry (0 until [`set_origin`]).
static ORIGIN: AtomicU64 = AtomicU64::new(0);
/// The TSC at the end of each phase (0: not reached, or skipped).
static STAMPS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];

/// Record the PVH entry's TSC (from the boot trampoline). Call once, first thing.
pub fn set_origin(entry_tsc: u64) {
    ORIGIN.store(entry_tsc, Ordering::Relaxed);
}

/// The PVH entry's TSC.
pub fn origin() -> u64 {
    ORIGIN.load(Ordering::Relaxed)
}

/// Phase `p` ends now (boot CPU only).
pub fn mark(p: Phase) {
    STAMPS[p as usize].store(rdtsc(), Ordering::Relaxed);
}

/// Microseconds in `ticks` TSC ticks at the calibrated rate (0 before calibration).
fn ticks_us(ticks: u64) -> u64 {
    match tsc_hz() {
        0 => 0,
        hz => (u128::from(ticks) * 1_000_000 / u128::from(hz)) as u64,
    }
}

/// The report line (see the module docs) with the end of the last phase `now` (TSC): each
/// phase from the previous stamp (a skipped phase reads 0 and does not move the start).
pub fn report(now: u64) -> heapless::String<256> {
    use core::fmt::Write;
    let mut s = heapless::String::new();
    let mut prev = origin();
    let _ = s.push_str("boot: phases us:");
    for (i, (_, name)) in PHASES.iter().enumerate() {
        let t = STAMPS[i].load(Ordering::Relaxed);
        let d = if t >= prev && t != 0 {
            let d = t - prev;
            prev = t;
            d
        } else {
            0
        };
        let _ = write!(s, " {name}={}", ticks_us(d));
    }
    let _ = write!(s, " total={}", ticks_us(now.saturating_sub(origin())));
    s
}
