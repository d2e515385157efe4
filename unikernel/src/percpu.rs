//! The leaf of the kernel: CPU numbers, the per-CPU area GS points at, and the table of CPUs.
//! Imports nothing from the rest of the kernel.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use x86_64::registers::model_specific::GsBase;
use x86_64::VirtAddr;

/// Most CPUs supported (per-CPU GDT/TSS/IST stacks are static arrays of this size).
pub const MAX_CPUS: usize = 16;

/// What every CPU publishes about itself (read by the `cpus` console command).
pub struct CpuState {
    /// Checked in and running.
    pub online: AtomicBool,
    /// Its local APIC ID.
    pub apic_id: AtomicU32,
    /// Halts taken while idle.
    pub halts: AtomicU64,
    /// Drain requests honoured.
    pub drains: AtomicU64,
    /// Ping IPIs received.
    pub pings: AtomicU64,
    /// In (or committed to) `hlt`: stored with `SeqCst` before halting and cleared after, so
    /// a TLB shootdown initiator sends this CPU an IPI at once instead of waiting for its poll
    /// loop (`mm::tlb`, "A halted target is never missed").
    pub halted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const CPU_INIT: CpuState = CpuState {
    online: AtomicBool::new(false),
    apic_id: AtomicU32::new(u32::MAX),
    halts: AtomicU64::new(0),
    drains: AtomicU64::new(0),
    pings: AtomicU64::new(0),
    halted: AtomicBool::new(false),
};

/// Per-CPU state, indexed by CPU number (0 = the boot CPU).
pub static CPUS: [CpuState; MAX_CPUS] = [CPU_INIT; MAX_CPUS];
/// CPUs online.
pub static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// CPUs online now (at least 1).
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire).max(1)
}

/// The per-CPU area GS points at. `cpu` is at offset 0 so [`current_cpu`] is one load.
#[repr(C)]
pub struct PerCpu {
    cpu: AtomicU32,
    /// An interrupt handler is running on this CPU (the pcp rule's debug check, `mm::pcp`).
    in_irq: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const PERCPU_INIT: PerCpu = PerCpu {
    cpu: AtomicU32::new(0),
    in_irq: AtomicBool::new(false),
};
static PERCPU: [PerCpu; MAX_CPUS] = [PERCPU_INIT; MAX_CPUS];

/// Point this CPU's GS base at its per-CPU area (first thing on every CPU).
///
/// # Panics
/// If `cpu >= MAX_CPUS`.
pub fn set_percpu(cpu: usize) {
    PERCPU[cpu].cpu.store(cpu as u32, Ordering::Relaxed);
    GsBase::write(VirtAddr::from_ptr(&PERCPU[cpu]));
}

/// The CPU we run on (from the per-CPU area; 0 before [`set_percpu`]).
#[inline]
pub fn current_cpu() -> u32 {
    let cpu: u32;
    // SAFETY: GS base points at this CPU's `PerCpu` (`set_percpu` runs on every CPU before
    // anything calls this: kernel_main right after the IDT, `ap_main` first thing); offset 0
    // is its `cpu` field.
    unsafe {
        core::arch::asm!("mov {0:e}, gs:[0]", out(reg) cpu, options(nostack, readonly, preserves_flags))
    };
    cpu
}

/// This CPU's per-CPU area.
fn this() -> &'static PerCpu {
    &PERCPU[current_cpu() as usize]
}

/// An interrupt handler starts (`true`) or ends (`false`) on this CPU.
pub fn set_in_irq(on: bool) {
    this().in_irq.store(on, Ordering::Relaxed);
}

/// `mm::pcp` context hook: is this CPU in an interrupt handler?
pub fn in_interrupt() -> bool {
    this().in_irq.load(Ordering::Relaxed)
}
