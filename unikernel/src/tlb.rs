//! TLB shootdown on this machine: the one [`mm::tlb::Shootdown`], its arch operations
//! (`invlpg`, CR3 reload, the TLB IPI, halted CPUs, the TSC) and the hooks every CPU calls.
//!
//! * Targets: a poll loop calls [`service`] once per iteration (one load when nothing is
//!   pending); a halting CPU calls [`halt_allowed`] after marking itself halted; the IPI
//!   handler on [`TLB_VECTOR`] services whatever is pending.
//! * Initiators gather unmapped pages in a `FlushBatch` and call [`flush`] (thread context
//!   only: it waits for every target's acknowledgement, servicing its own requests meanwhile).
//!
//! Uses `arch`, `smp`, `percpu`; nothing above.

use crate::arch::time::{rdtsc, us_to_tsc};
use crate::arch::trap::{register_ipi, IPI_VECTOR_BASE};
use crate::percpu::{current_cpu, CPUS, MAX_CPUS};
use crate::smp::{send_ipi, IpiTarget};
use core::sync::atomic::Ordering;
use mm::tlb::{Dispatched, FlushBatch, Shootdown, TlbArch, TlbStats, DEFAULT_FLUSH_CEILING};
use mm::Pfn;

/// The TLB shootdown IPI's vector (second slot of the IPI registry).
pub const TLB_VECTOR: u8 = IPI_VECTOR_BASE + 1;
/// How long an initiator waits for a busy target to see its poll word before it sends an IPI:
/// 50 µs, above the IPI round trip's p99 under TCG (16–58 µs, docs/DESIGN.md), so a target
/// that polls at all answers through its word, and bounded, so one that stopped polling (an
/// interrupts-off stretch, a long console command) costs one interrupt, not a hang.
const IPI_DEADLINE_US: u64 = 50;

/// The system's shootdown state.
pub static SHOOTDOWN: Shootdown<MAX_CPUS> = Shootdown::new(DEFAULT_FLUSH_CEILING);

/// The arch operations of this CPU (x86_64, xAPIC IPIs).
pub struct KernelTlb;

impl TlbArch for KernelTlb {
    fn flush_page(&self, vaddr: u64) {
        x86_64::instructions::tlb::flush(x86_64::VirtAddr::new_truncate(vaddr));
    }
    fn flush_all(&self) {
        x86_64::instructions::tlb::flush_all();
    }
    fn send_ipi(&self, cpu: usize) {
        send_ipi(IpiTarget::One(cpu), TLB_VECTOR);
    }
    fn is_halted(&self, cpu: usize) -> bool {
        CPUS[cpu].halted.load(Ordering::SeqCst)
    }
    fn cycles(&self) -> u64 {
        rdtsc()
    }
}

/// The TLB IPI's handler: service whatever is pending for this CPU.
fn tlb_ipi(cpu: usize) {
    SHOOTDOWN.service(cpu, &KernelTlb);
}

/// Boot CPU, before other CPUs start: register the IPI handler, set the per-page ceiling
/// (`tlb_ceiling=`, pages) and the IPI deadline.
pub fn init(ceiling: usize) {
    if let Err(e) = register_ipi(TLB_VECTOR, tlb_ipi) {
        crate::fail(format_args!("tlb: IPI vector {TLB_VECTOR:#x}: {e:?}"));
    }
    SHOOTDOWN.set_ceiling(ceiling);
    SHOOTDOWN.set_ipi_deadline_cycles(us_to_tsc(IPI_DEADLINE_US));
}

/// This CPU's poll-loop hook: take and flush pending requests (one load when none). Returns
/// how many were serviced.
#[inline]
pub fn service() -> usize {
    SHOOTDOWN.service(current_cpu() as usize, &KernelTlb)
}

/// Mark this CPU halted (or not) for initiators. Call with `true` right before `hlt` (then ask
/// [`halt_allowed`]) and with `false` after waking.
pub fn set_halted(on: bool) {
    CPUS[current_cpu() as usize]
        .halted
        .store(on, Ordering::SeqCst);
}

/// After [`set_halted`]`(true)`: `false` if a flush request slipped in (it is serviced here and
/// the CPU must not halt: its flag is cleared again).
pub fn halt_allowed() -> bool {
    let me = current_cpu() as usize;
    if SHOOTDOWN.pending_before_halt(me) {
        set_halted(false);
        SHOOTDOWN.service(me, &KernelTlb);
        return false;
    }
    true
}

/// Flush `batch` on every CPU in its mask and then hand its frames to `free` and its virtual
/// ranges to `release(vaddr, pages)` (flush before free). Thread context only; waits.
pub fn flush<const P: usize>(
    batch: &mut FlushBatch<P>,
    free: impl FnMut(Pfn),
    release: impl FnMut(u64, usize),
) {
    SHOOTDOWN.flush(current_cpu() as usize, batch, &KernelTlb, free, release);
}

/// The steps of [`flush`] one at a time, for an initiator that keeps working while it waits
/// (the boot CPU retiring a FIB between poll iterations): post `batch` (IPIs to halted
/// targets, the local flush). Thread context only. See [`Shootdown::dispatch`].
pub fn dispatch<const P: usize>(batch: &mut FlushBatch<P>) -> Dispatched {
    SHOOTDOWN.dispatch(current_cpu() as usize, batch, &KernelTlb)
}

/// One check of a [`dispatch`]ed batch (services this CPU's own requests first): `true` once
/// every target acknowledged. See [`Shootdown::poll`].
pub fn poll(d: &mut Dispatched) -> bool {
    SHOOTDOWN.poll(current_cpu() as usize, d, &KernelTlb)
}

/// Hand at most `max` frames of a done batch to `free`; returns how many are left. See
/// [`Shootdown::complete_some`].
pub fn complete_some<const P: usize>(
    d: &Dispatched,
    batch: &mut FlushBatch<P>,
    max: usize,
    free: impl FnMut(Pfn),
) -> usize {
    SHOOTDOWN.complete_some(current_cpu() as usize, d, batch, max, free)
}

/// Finish a done batch: its remaining frames to `free`, its ranges to `release`. See
/// [`Shootdown::complete`].
pub fn complete<const P: usize>(
    d: Dispatched,
    batch: &mut FlushBatch<P>,
    free: impl FnMut(Pfn),
    release: impl FnMut(u64, usize),
) {
    SHOOTDOWN.complete(current_cpu() as usize, d, batch, free, release);
}

/// CPU `cpu`'s counters.
pub fn stats(cpu: usize) -> TlbStats {
    SHOOTDOWN.stats(cpu)
}
