//! The page guard on this machine (`guard=on`; `mm::guard`): the identity map's 4 KiB PTEs of
//! freed packet buffers are cleared, batched into one all-CPU TLB shootdown per
//! [`mm::guard::GUARD_BATCH`] pages (`tlb=batch`) or one per page (`tlb=immediate`), and set
//! again when the page is allocated; a fault on such a page is reported as a use-after-free.
//!
//! Uses `tlb`, `mem`, `arch`, `percpu`.

use crate::mem::paging;
use crate::percpu::online;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use mm::guard::{GuardBatch, PageGuard, GUARD_BATCH};
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
}

/// Why the guard could not be installed.
#[derive(Debug)]
pub struct GuardError(pub paging::PagingError);

/// Boot CPU, before any pcp list exists: split every 2 MiB identity page of the zone's span
/// into 4 KiB PTEs (the tables come from the zone and are never freed), install the guard in
/// the zone. `batch_pages`: pages per shootdown (1 for
/// `tlb=immediate`). Returns the page-table pages taken.
///
/// # Errors
/// [`GuardError`] when the zone runs out of pages for the tables.
pub fn install(zone: &'static Zone, batch_pages: usize) -> Result<u64, GuardError> {
    let (start, end) = (zone.start_pfn().addr(), zone.end_pfn().addr());
    let mut tables = 0;
    let mut a = start & !(paging::HUGE - 1);
    while a < end {
        paging::split_identity_2m(a, || {
            tables += 1;
            crate::mem::alloc_table(zone)
        })
        .map_err(GuardError)?;
        a += paging::HUGE;
    }
    // The split kept every translation; a full flush drops the stale 2 MiB entries anyway.
    x86_64::instructions::tlb::flush_all();
    GUARD
        .batch_pages
        .store(batch_pages.clamp(1, GUARD_BATCH), Ordering::Relaxed);
    zone.set_guard(&GUARD);
    ON.store(true, Ordering::Release);
    Ok(tables)
}

/// For the page fault report: with the guard on, a fault on an unmapped identity page is a
/// use-after-free.
pub fn explain(cr2: u64) -> Option<&'static str> {
    (ON.load(Ordering::Acquire) && paging::identity_present(cr2) == Some(false))
        .then_some("use-after-free: CR2 is a page on a free list (guard=on unmapped it)")
}
