//! Giving a FIB's memory back a bounded step at a time ([`retire_step`]; at most
//! `limits::UNMAP_PAGES` pages unmapped and `limits::FREE_FRAMES` frames freed per step): its
//! vmap ranges unmapped into one flush batch, one batched shootdown (dispatched, then polled
//! between steps), then its frames freed and its ranges released. A replaced FIB goes after its
//! RCU grace period, shot down on every routing core; a live build that failed ([`Gone::Failed`],
//! never published: seen by this CPU alone) goes the same way with a local flush and no grace
//! period. At boot and at `quit` a FIB never published and a `PUT /routes` body go in one go
//! ([`give_back`], local flushes), where no forwarding waits for the boot CPU.

use super::build::Budget;
use super::{FibAreas, FibRecord, FIB, SLOTS};
use crate::arch::time::uptime_us;
use crate::dataplane::nf::Retiring;
use crate::mem::vmap::{self, VmArea};
use crate::tlb;
use mm::tlb::{CpuMask, Dispatched, FlushBatch};
use mm::{Pfn, Zone};
use netstack::fib_build::{limits, StepBudget};
use netstack::router::Fib;

/// Frames one retirement batch holds: 16,384 (128 KiB of `.bss`), above the 14,650 frames of
/// the 100,000-route FIB (docs/benchmarks-journal.md "Sparse FIB memory"), so that one retires with one
/// shootdown; a larger FIB takes several batches (the extra ones flushed at once).
const RETIRE_FRAMES: usize = 16 * 1024;
/// Frames a [`give_back`] batch holds: local flushes only, so a small batch (8 KiB) costs a
/// few more CR3 reloads on a large failed build and nothing else.
const DISCARD_FRAMES: usize = 1024;
/// Frames handed back to the zone between two clock reads.
const FREE_CHUNK: usize = 32;

/// The batch retirements unmap into: the boot CPU's only.
static RETIRE_BATCH: spin::Mutex<FlushBatch<RETIRE_FRAMES>> = spin::Mutex::new(FlushBatch::new());
/// The batch [`give_back`] unmaps into (separate: a give-back may come while a retirement's
/// batch is in flight).
static DISCARD_BATCH: spin::Mutex<FlushBatch<DISCARD_FRAMES>> = spin::Mutex::new(FlushBatch::new());

/// Whose memory a [`Retire`] gives back.
// One value at most, inside the boot CPU's reload state (a static): no heap to box the areas
// into, and it moves only when a retirement starts or ends.
#[allow(clippy::large_enum_variant)]
pub(super) enum Gone {
    /// The FIB in this slot, replaced by a newer one.
    Replaced(usize),
    /// What a live build took before it failed (its FIB never published).
    Failed(FibAreas),
}

/// A replaced FIB being retired, or a failed build's memory being given back.
pub(super) struct Retire {
    pub(super) gone: Gone,
    /// The replaced FIB, until every routing core has passed a quiescent state since
    /// (`Shared::retired`; `None` for [`Gone::Failed`]: no grace period).
    grace: Option<Retiring<Fib<'static>>>,
    /// When the new FIB was published (µs since boot), and how long until every core had
    /// switched (µs, once known).
    pub(super) since_us: u64,
    pub(super) swap_us: u64,
    phase: RetirePhase,
    /// Shootdown batches so far, steps, and the steps' time (µs).
    pub(super) batches: u64,
    pub(super) steps: u64,
    pub(super) work_us: u64,
    /// Frames handed to the flush batch to be freed so far.
    pub(super) frames: u64,
}

/// Where a [`Retire`] stands.
enum RetirePhase {
    /// Waiting for every routing core's quiescent state (`Shared::retired`).
    Grace,
    /// Unmapping range `area` (0 tbl24, 1 tbl8, 2 rules) from page `page` on.
    Unmap { area: usize, page: usize },
    /// The shootdown is out: waiting for every target's acknowledgement.
    Flush(Dispatched),
    /// Flushed: frames going back to the zone.
    Free(Dispatched),
    /// Between phases (never seen outside [`run`]).
    Moving,
}

impl Retire {
    /// The FIB in `slot`, replaced (`replaced`, from `Shared::publish`) at `since_us`.
    pub(super) fn new(slot: usize, replaced: Retiring<Fib<'static>>, since_us: u64) -> Retire {
        Retire::start(Gone::Replaced(slot), Some(replaced), since_us)
    }

    /// Retirement of `gone` from its start: after `grace`'s grace period (none without one).
    fn start(gone: Gone, grace: Option<Retiring<Fib<'static>>>, since_us: u64) -> Retire {
        Retire {
            gone,
            grace,
            since_us,
            swap_us: 0,
            phase: RetirePhase::Grace,
            batches: 0,
            steps: 0,
            work_us: 0,
            frames: 0,
        }
    }

    /// What a live build took before it failed (`areas`), given back in steps; its unmapped
    /// scratch page goes back now.
    pub(super) fn failed(zone: &Zone, mut areas: FibAreas) -> Retire {
        if let Some(s) = areas.scratch.take() {
            zone.free_pages_order(s, 0);
        }
        Retire::start(Gone::Failed(areas), None, uptime_us())
    }

    /// The routing cores that have not passed a quiescent state since the replacement.
    pub(super) fn late(&self, cores: usize) -> u64 {
        match (&self.grace, FIB.get()) {
            (Some(r), Some(shared)) => shared.late(r, cores),
            _ => 0,
        }
    }
}

/// One bounded step of retirement `rt` (of `cores` routing cores). Returns `true` when it is
/// done: every frame freed and every range released (the caller then drops the record).
pub(super) fn retire_step(rt: &mut Retire, cores: usize, zone: &Zone, b: &mut Budget) -> bool {
    let t0 = uptime_us();
    let done = run(rt, cores, zone, b);
    rt.work_us += uptime_us() - t0;
    rt.steps += 1;
    done
}

fn run(rt: &mut Retire, cores: usize, zone: &Zone, b: &mut Budget) -> bool {
    let mut batch = RETIRE_BATCH.lock();
    loop {
        match core::mem::replace(&mut rt.phase, RetirePhase::Moving) {
            RetirePhase::Grace => {
                if let (Some(r), Some(shared)) = (rt.grace.take(), FIB.get()) {
                    if let Err(r) = shared.retired(r, cores) {
                        rt.grace = Some(r);
                        rt.phase = RetirePhase::Grace;
                        return false;
                    }
                }
                rt.swap_us = uptime_us() - rt.since_us;
                rt.phase = RetirePhase::Unmap { area: 0, page: 0 };
            }
            RetirePhase::Unmap { area, page } => {
                if let Some(next) = unmap(rt, cores, zone, &mut batch, area, page, b) {
                    rt.phase = RetirePhase::Unmap {
                        area: next.0,
                        page: next.1,
                    };
                    return false;
                }
                rt.phase = RetirePhase::Flush(tlb::dispatch(&mut *batch));
            }
            RetirePhase::Flush(mut d) => {
                // The targets answer within their next poll iteration (or the IPI past the
                // deadline): asked once per step, the boot CPU forwarding in between rather
                // than spinning out its step on an answer that comes at the targets' pace.
                if !tlb::poll(&mut d) {
                    rt.phase = RetirePhase::Flush(d);
                    return false;
                }
                rt.phase = RetirePhase::Free(d);
            }
            RetirePhase::Free(d) => {
                b.phase(limits::FREE_FRAMES);
                loop {
                    let n = b.left().min(FREE_CHUNK);
                    let held = tlb::complete_some(&d, &mut *batch, n, |p| {
                        zone.free_pages_order(p, 0);
                    });
                    if held == 0 {
                        break;
                    }
                    if b.spend(n) {
                        rt.phase = RetirePhase::Free(d);
                        return false;
                    }
                }
                tlb::complete(d, &mut *batch, |_| {}, release);
                rt.batches += 1;
                return true;
            }
            RetirePhase::Moving => unreachable!("a retirement between phases"),
        }
    }
}

/// Unmap the retiring FIB's ranges from (`area`, `page`) into `batch` until `b` is spent
/// (returns where to resume) or all are (`None`: the shared pages are in the batch too).
fn unmap(
    rt: &mut Retire,
    cores: usize,
    zone: &Zone,
    batch: &mut FlushBatch<RETIRE_FRAMES>,
    mut area: usize,
    mut page: usize,
    b: &mut Budget,
) -> Option<(usize, usize)> {
    let Retire {
        gone,
        batches,
        frames,
        ..
    } = rt;
    let (areas, mask) = match gone {
        Gone::Replaced(slot) => {
            // SAFETY: every routing core switched to a newer FIB (the grace period is over)
            // and only this CPU (the boot CPU) writes slots: nothing else refers to this
            // record any more.
            let rec: &FibRecord =
                unsafe { (*SLOTS[*slot].0.get()).as_ref() }.expect("a retiring slot holds a FIB");
            (&rec.areas, CpuMask::first(cores))
        }
        // Never published: no other CPU ever mapped a translation of it.
        Gone::Failed(areas) => (
            &*areas,
            CpuMask::only(crate::percpu::current_cpu() as usize),
        ),
    };
    let ranges = [areas.tbl24, areas.tbl8, areas.rules];
    let mut r = Retirer {
        zone,
        batch,
        batches,
    };
    b.phase(limits::UNMAP_PAGES);
    while area < ranges.len() {
        if let Some(a) = ranges[area] {
            while page < a.pages {
                if let Some(pfn) = vmap::vunmap_one(a, page) {
                    r.batch.add_page(a.page_addr(page), mask);
                    if !areas.shared.iter().any(|s| s.1 == pfn) {
                        r.free(pfn);
                        *frames += 1;
                    }
                }
                page += 1;
                if b.spend(1) {
                    return Some((area, page));
                }
            }
            r.range(a);
        }
        area += 1;
        page = 0;
    }
    for &(_, p) in &areas.shared {
        r.free(p);
        *frames += 1;
    }
    None
}

/// Release a virtual range after its flush.
fn release(base: u64, pages: usize) {
    vmap::release_va(VmArea { base, pages });
}

/// Unmap everything in `areas` (seen by this CPU alone: a FIB never published, or a
/// `PUT /routes` body), flush locally in batches of [`DISCARD_FRAMES`] frames, then free the
/// frames (own pages once, each shared page once) and release the virtual ranges.
pub(super) fn give_back(zone: &Zone, areas: FibAreas) {
    let mut guard = DISCARD_BATCH.lock();
    let mut batches = 0;
    let mut r = Retirer {
        zone,
        batch: &mut guard,
        batches: &mut batches,
    };
    if let Some(s) = areas.scratch {
        zone.free_pages_order(s, 0); // never mapped
    }
    let me = CpuMask::only(crate::percpu::current_cpu() as usize);
    for area in [areas.tbl24, areas.tbl8, areas.rules].into_iter().flatten() {
        vmap::vunmap(area, |v, pfn| {
            r.batch.add_page(v, me);
            if !areas.shared.iter().any(|s| s.1 == pfn) {
                r.free(pfn);
            }
        });
        r.range(area);
    }
    for &(_, p) in &areas.shared {
        r.free(p);
    }
    r.flush();
}

/// A flush batch being filled; a full one is flushed at once (waiting) and refilled.
struct Retirer<'a, const P: usize> {
    zone: &'a Zone,
    batch: &'a mut FlushBatch<P>,
    batches: &'a mut u64,
}

impl<const P: usize> Retirer<'_, P> {
    /// One shootdown for what the batch holds, then its frames and ranges go back.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let zone = self.zone;
        tlb::flush(self.batch, |pfn| zone.free_pages_order(pfn, 0), release);
        *self.batches += 1;
    }

    /// Free `pfn` after a flush (the current batch's, or the next one's when it is full).
    fn free(&mut self, pfn: Pfn) {
        if self.batch.add_free(pfn).is_err() {
            self.flush();
            let _ = self.batch.add_free(pfn); // an empty batch has room
        }
    }

    /// Release `area` after the flush of the batch holding its last page.
    fn range(&mut self, area: VmArea) {
        if self.batch.add_va_range(area.base, area.pages).is_err() {
            self.flush();
            let _ = self.batch.add_va_range(area.base, area.pages);
        }
    }
}
