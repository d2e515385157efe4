//! The page guard on this machine (`guard=on`; `mm::guard`): the identity map's 4 KiB PTEs of
//! every free page are clear — the buddy lists' pages from boot on, freed packet buffers
//! batched into one all-CPU TLB shootdown per [`mm::guard::GUARD_BATCH`] pages (`tlb=batch`) or
//! one per page (`tlb=immediate`), pages freed straight to the zone one shootdown per
//! [`mm::guard::ZONE_GUARD_FRAMES`] (or per block of order >= 1) — and set again when the page
//! is allocated; a fault on such a page is reported as a use-after-free.
//!
//! Uses `tlb`, `mem`, `arch`, `percpu`.

use crate::mem::paging;
use crate::percpu::online;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use mm::guard::{GuardBatch, PageGuard, ZoneGuardBatch, GUARD_BATCH};
use mm::tlb::CpuMask;
use mm::{Pfn, Zone};

/// The kernel's [`PageGuard`].
pub struct KernelGuard {
    batch_pages: AtomicUsize,
}

static GUARD: KernelGuard = KernelGuard {
    batch_pages: AtomicUsize::new(GUARD_BATCH),
};
static ON: AtomicBool = AtomicBool::new(false);

impl PageGuard for KernelGuard {
    fn map(&self, pfn: Pfn) {
        // Split at install time for every page of the zone: cannot fail for a zone page.
        let _ = paging::set_identity_present(pfn.addr(), true);
    }
    fn unmap(&self, pfn: Pfn) -> u64 {
        let _ = paging::set_identity_present(pfn.addr(), false);
        pfn.addr()
    }
    fn batch_pages(&self) -> usize {
        self.batch_pages.load(Ordering::Relaxed)
    }
    fn mask(&self) -> CpuMask {
        CpuMask::first(online())
    }
    fn flush(&self, batch: &mut GuardBatch, free: &mut dyn FnMut(Pfn)) {
        crate::tlb::flush(batch, free, |_, _| {});
    }
    fn flush_zone(
        &self,
        batch: &mut ZoneGuardBatch,
        free: &mut dyn FnMut(Pfn),
        release: &mut dyn FnMut(u64, usize),
    ) {
        crate::tlb::flush(batch, free, release);
    }
    fn may_flush(&self) -> bool {
        !crate::percpu::in_interrupt()
    }
}

/// Why the guard could not be installed.
#[derive(Debug)]
pub struct GuardError(pub paging::PagingError);

/// What [`install`] did, for the boot log.
pub struct Installed {
    /// Page-table pages taken from the zone for the 2 MiB splits (kept for good).
    pub tables: u64,
    /// Free pages of the buddy lists unmapped at install.
    pub unmapped: u64,
    /// TSC cycles the install took (splits, unmaps, flushes).
    pub cycles: u64,
    /// TSC cycles of those spent unmapping the buddy lists' pages (and the flush).
    pub unmap_cycles: u64,
}

/// Boot CPU, before any pcp list exists and before other CPUs run: split every 2 MiB identity
/// page that holds a page of the zone's RAM into 4 KiB PTEs (the tables come from the zone,
/// before the guard is on, and are never freed; a 2 MiB range of the span with no RAM page, a
/// hole, stays whole), install the guard in the zone — which unmaps every page now in the
/// buddy lists — and flush this CPU's TLB (only it has run). `batch_pages`: pages per
/// shootdown (1 for `tlb=immediate`).
///
/// # Errors
/// [`GuardError`] when the zone runs out of pages for the tables.
pub fn install(zone: &'static Zone, batch_pages: usize) -> Result<Installed, GuardError> {
    let t0 = crate::arch::time::rdtsc();
    // The walk below reads every slot of the span: no mem_map initialisation is deferred.
    zone.deferred_init_all();
    let (start, end) = (zone.start_pfn().addr(), zone.end_pfn().addr());
    let mut tables = 0;
    let mut a = start & !(paging::HUGE - 1);
    while a < end {
        let from = Pfn::from_addr(a.max(start));
        let to = Pfn::from_addr((a + paging::HUGE).min(end));
        if (from.0..to.0).any(|p| !zone.page(Pfn(p)).is_reserved()) {
            paging::split_identity_2m(a, || {
                tables += 1;
                crate::mem::alloc_table(zone)
            })
            .map_err(GuardError)?;
        }
        a += paging::HUGE;
    }
    GUARD
        .batch_pages
        .store(batch_pages.clamp(1, GUARD_BATCH), Ordering::Relaxed);
    let t1 = crate::arch::time::rdtsc();
    let unmapped = zone.set_guard(&GUARD);
    // The splits kept every translation and the unmaps cleared PTEs this CPU may cache: one
    // full flush drops both (no other CPU has run yet).
    x86_64::instructions::tlb::flush_all();
    ON.store(true, Ordering::Release);
    Ok(Installed {
        tables,
        unmapped,
        cycles: crate::arch::time::rdtsc() - t0,
        unmap_cycles: crate::arch::time::rdtsc() - t1,
    })
}

/// For the page fault report: with the guard on, a fault on an unmapped identity page is a
/// use-after-free.
pub fn explain(cr2: u64) -> Option<&'static str> {
    (ON.load(Ordering::Acquire) && paging::identity_present(cr2) == Some(false))
        .then_some("use-after-free: CR2 is a page on a free list (guard=on unmapped it)")
}
