//! The page guard's hooks with a model direct map: freed pages leave it, wait in the batch,
//! reach the list only after a flush; allocations map them again.

use super::*;
use crate::tlb::{CpuMask, Shootdown, TlbArch};
use crate::zone::tests::zone;
use crate::{PerCpuPages, Zone};
use std::collections::HashSet;
use std::sync::Mutex;
use std::vec::Vec;

/// A direct map of frames (present = in the set), a log of flushes, and the real shootdown
/// protocol on one CPU (a local-only mask: flush here, then free).
struct ModelGuard {
    unmapped: Mutex<HashSet<u64>>,
    flushes: Mutex<Vec<usize>>,
    batch: usize,
    sd: Shootdown<1>,
}

/// One CPU that flushes nothing (the model's direct map has no TLB).
struct Local;

impl TlbArch for Local {
    fn flush_page(&self, _: u64) {}
    fn flush_all(&self) {}
    fn send_ipi(&self, cpu: usize) {
        panic!("a local-only batch sent an IPI to {cpu}");
    }
    fn is_halted(&self, _: usize) -> bool {
        false
    }
    fn cycles(&self) -> u64 {
        0
    }
}

impl PageGuard for ModelGuard {
    fn map(&self, pfn: Pfn) {
        self.unmapped.lock().unwrap().remove(&pfn.0);
    }
    fn unmap(&self, pfn: Pfn) -> u64 {
        assert!(
            self.unmapped.lock().unwrap().insert(pfn.0),
            "PFN {:#x} unmapped twice",
            pfn.0
        );
        pfn.addr()
    }
    fn batch_pages(&self) -> usize {
        self.batch
    }
    fn mask(&self) -> CpuMask {
        CpuMask::only(0)
    }
    fn flush(&self, batch: &mut GuardBatch, free: &mut dyn FnMut(Pfn)) {
        assert_eq!(batch.mask(), CpuMask::only(0));
        self.flushes.lock().unwrap().push(batch.frames().len());
        self.sd.flush(0, batch, &Local, free, |_, _| {});
    }
}

fn guarded(batch: usize) -> (&'static Zone, &'static ModelGuard) {
    let z = zone(1, 4096);
    let g: &'static ModelGuard = std::boxed::Box::leak(std::boxed::Box::new(ModelGuard {
        unmapped: Mutex::new(HashSet::new()),
        flushes: Mutex::new(Vec::new()),
        batch,
        sd: Shootdown::new(33),
    }));
    z.set_guard(g);
    (z, g)
}

#[test]
fn freed_pages_leave_the_direct_map_and_reach_the_list_only_after_the_flush() {
    let (z, g) = guarded(8);
    let mut pcp = PerCpuPages::with_params(512, 31);
    let pages: Vec<Pfn> = (0..20).map(|_| pcp.alloc_page(z).unwrap()).collect();
    let on_list = pcp.count();
    for &p in &pages[..7] {
        pcp.free_page(z, p);
    }
    assert_eq!(
        g.unmapped.lock().unwrap().len(),
        7,
        "freed pages are unmapped"
    );
    assert_eq!(pcp.guard_pending(), 7);
    assert_eq!(pcp.count(), on_list, "not on the list before their flush");
    assert!(g.flushes.lock().unwrap().is_empty());
    pcp.free_page(z, pages[7]);
    assert_eq!(
        *g.flushes.lock().unwrap(),
        [8],
        "one flush for the batch of 8"
    );
    assert_eq!(pcp.guard_pending(), 0);
    assert_eq!(pcp.count(), on_list + 8);
    // Allocation maps again: the hottest pages are the ones just freed.
    let again = pcp.alloc_page(z).unwrap();
    assert!(pages[..8].contains(&again));
    assert!(!g.unmapped.lock().unwrap().contains(&again.0));
    assert_eq!(g.unmapped.lock().unwrap().len(), 7);
    // Drain flushes what waits, then everything goes to the zone.
    for &p in &pages[8..12] {
        pcp.free_page(z, p);
    }
    assert_eq!(pcp.guard_pending(), 4);
    pcp.drain_local_pages(z);
    assert_eq!(pcp.guard_pending(), 0);
    assert_eq!(pcp.count(), 0);
    assert_eq!(*g.flushes.lock().unwrap(), [8, 4]);
}

#[test]
fn zone_allocations_map_their_pages() {
    let (z, g) = guarded(1);
    let mut pcp = PerCpuPages::with_params(512, 31);
    let p = pcp.alloc_page(z).unwrap();
    pcp.free_page(z, p);
    assert_eq!(
        *g.flushes.lock().unwrap(),
        [1],
        "batch of 1: one flush per page"
    );
    pcp.drain_local_pages(z);
    assert!(
        g.unmapped.lock().unwrap().contains(&p.0),
        "free in the buddy lists, unmapped"
    );
    // Whatever block the zone hands out next is mapped as a whole.
    let mut blocks = Vec::new();
    while let Some(b) = z.alloc_pages(0) {
        blocks.push(b);
    }
    assert!(blocks.contains(&p));
    assert!(
        g.unmapped.lock().unwrap().is_empty(),
        "every allocated page mapped again"
    );
}
