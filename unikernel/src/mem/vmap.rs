//! The vmap area: frames mapped contiguously at virtual addresses outside the identity map
//! (Linux `mm/vmalloc.c`: `vmap`, `vunmap`, `vmalloc`).
//!
//! Virtual ranges come from a bitmap of the area's pages (first fit from a rotating hint),
//! each followed by one unmapped guard page so an overrun faults instead of running into the
//! next area (Linux's `VM_NO_GUARD` default). A range and the frames it mapped go back only
//! after every CPU that may cache its translations flushed them: [`vunmap`] clears the PTEs and
//! reports each page to the caller, who batches the flush (`mm::tlb`) and then calls
//! [`release_va`] and frees the frames.

use super::paging::{self, PagingError, PAGE, VMAP_BASE, VMAP_BYTES};
use mm::{Pfn, Zone};

/// Pages in the vmap area (guard pages included).
pub const VMAP_PAGES: usize = (VMAP_BYTES / PAGE) as usize;
/// Pages [`vmalloc`] takes from the zone per `rmqueue_bulk` call (one lock round trip each):
/// the pcp `batch` of a large zone (Linux `zone_batchsize`: 63 rounded to a power of two).
const VMALLOC_BULK: usize = 64;

/// A mapped range of the vmap area: `pages` 4 KiB pages from `base`.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub struct VmArea {
    /// First virtual address (4 KiB aligned).
    pub base: u64,
    /// Length in pages (the guard page after it not counted).
    pub pages: usize,
}

impl VmArea {
    /// Virtual address of page `i` of the area.
    pub fn page_addr(&self, i: usize) -> u64 {
        self.base + i as u64 * PAGE
    }
}

/// Why a vmap call failed.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub enum VmapError {
    /// No free virtual range of `pages` (+1 guard) pages in the vmap area.
    NoVirtualSpace {
        /// Pages asked for.
        pages: usize,
    },
    /// The zone had fewer free pages than `vmalloc` needed (`pages`).
    NoMemory {
        /// Pages asked for.
        pages: usize,
    },
    /// A zero-length request.
    Empty,
    /// The page tables refused (a bug: a range handed out twice).
    Paging(PagingError),
}

impl core::fmt::Display for VmapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VmapError::NoVirtualSpace { pages } => write!(
                f,
                "vmap area: no free range of {pages} pages ({} MiB area)",
                VMAP_BYTES >> 20
            ),
            VmapError::NoMemory { pages } => write!(f, "vmalloc: {pages} pages not available"),
            VmapError::Empty => f.write_str("vmap of zero pages"),
            VmapError::Paging(e) => write!(f, "vmap: {e}"),
        }
    }
}

/// The area's page bitmap (bit set = in use, guard pages included) and the next-fit hint.
struct VaSpace {
    used: [u64; VMAP_PAGES / 64],
    hint: usize,
    free: usize,
}

static VA: spin::Mutex<VaSpace> = spin::Mutex::new(VaSpace {
    used: [0; VMAP_PAGES / 64],
    hint: 0,
    free: VMAP_PAGES,
});

impl VaSpace {
    fn is_used(&self, i: usize) -> bool {
        self.used[i / 64] & (1 << (i % 64)) != 0
    }
    /// Mark pages `start..start + n` used or free, a bitmap word at a time where it can (a
    /// 64 MiB FIB table is 16,385 pages: a live reload takes and gives back such ranges inside
    /// a bounded step).
    fn mark(&mut self, start: usize, n: usize, used: bool) {
        let (mut i, end) = (start, start + n);
        while i < end {
            if i.is_multiple_of(64) && i + 64 <= end {
                self.used[i / 64] = if used { u64::MAX } else { 0 };
                i += 64;
                continue;
            }
            if used {
                self.used[i / 64] |= 1 << (i % 64);
            } else {
                self.used[i / 64] &= !(1 << (i % 64));
            }
            i += 1;
        }
    }
    /// First fit of `n` free pages, searching from the hint and wrapping once; a bitmap word
    /// at a time where it is all free or all used.
    fn find(&self, n: usize) -> Option<usize> {
        let (mut run, mut start, mut k) = (0, 0, 0);
        while k < VMAP_PAGES + n {
            let i = (self.hint + k) % VMAP_PAGES;
            if i == 0 {
                run = 0; // a range never wraps around the end of the area
            }
            if i.is_multiple_of(64) && i + 64 <= VMAP_PAGES {
                match self.used[i / 64] {
                    0 => {
                        if run == 0 {
                            start = i;
                        }
                        run += 64;
                        if run >= n {
                            return Some(start);
                        }
                        k += 64;
                        continue;
                    }
                    u64::MAX => {
                        run = 0;
                        k += 64;
                        continue;
                    }
                    _ => {}
                }
            }
            if self.is_used(i) {
                run = 0;
            } else {
                if run == 0 {
                    start = i;
                }
                run += 1;
                if run == n {
                    return Some(start);
                }
            }
            k += 1;
        }
        None
    }
}

/// Take a virtual range of `pages` pages (plus its guard page) from the vmap area.
///
/// # Errors
/// [`VmapError::Empty`] for 0 pages, [`VmapError::NoVirtualSpace`] when no range fits.
pub fn alloc_va(pages: usize) -> Result<VmArea, VmapError> {
    if pages == 0 {
        return Err(VmapError::Empty);
    }
    let mut va = VA.lock();
    let n = pages + 1;
    let start = va.find(n).ok_or(VmapError::NoVirtualSpace { pages })?;
    va.mark(start, n, true);
    va.hint = (start + n) % VMAP_PAGES;
    va.free -= n;
    Ok(VmArea {
        base: VMAP_BASE + start as u64 * PAGE,
        pages,
    })
}

/// Give a virtual range back. Only after every CPU flushed its translations (flush before
/// reuse): the next [`alloc_va`] may hand it out and map other frames there.
pub fn release_va(area: VmArea) {
    let start = ((area.base - VMAP_BASE) / PAGE) as usize;
    let mut va = VA.lock();
    va.mark(start, area.pages + 1, false);
    va.free += area.pages + 1;
}

/// Free pages of the vmap area (guard pages count as used), for STATS and tests.
pub fn free_va_pages() -> usize {
    VA.lock().free
}

/// Map `pfns` contiguously in a new vmap range (Linux `vmap`), writable or read-only. The
/// frames stay owned by the caller.
///
/// # Errors
/// [`VmapError`] when no virtual range fits.
pub fn vmap(pfns: &[Pfn], writable: bool) -> Result<VmArea, VmapError> {
    let area = alloc_va(pfns.len())?;
    for (i, pfn) in pfns.iter().enumerate() {
        paging::vmap_page(area.page_addr(i), pfn.addr(), writable).map_err(VmapError::Paging)?;
    }
    Ok(area)
}

/// Clear every PTE of `area` (Linux `vunmap` without its flush), calling `unmapped(vaddr,
/// frame)` for each page that was mapped. The translations may still sit in other CPUs' TLBs:
/// the caller batches `vaddr`s into a shootdown, and only after it completed frees the frames
/// and calls [`release_va`].
pub fn vunmap(area: VmArea, mut unmapped: impl FnMut(u64, Pfn)) {
    for i in 0..area.pages {
        if let Some(pfn) = vunmap_one(area, i) {
            unmapped(area.page_addr(i), pfn);
        }
    }
}

/// Clear page `i`'s PTE of `area` (as [`vunmap`], one page: for callers that unmap a large
/// range a bounded number of pages at a time). Returns the frame it mapped, if any.
pub fn vunmap_one(area: VmArea, i: usize) -> Option<Pfn> {
    match paging::vunmap_page(area.page_addr(i)) {
        Ok(Some(pa)) => Some(Pfn::from_addr(pa)),
        _ => None,
    }
}

/// Map up to `max` zeroed, writable order-0 pages from the zone at pages `from..` of `area`
/// (a range from [`alloc_va`] whose pages before `from` are mapped, none after): [`vmalloc`]
/// a bounded step at a time, for a buffer that grows as it fills. Returns the pages mapped
/// (fewer than `max` only at the area's end). Only this CPU may touch the range (a later
/// [`vfree_step`] flushes locally).
///
/// # Errors
/// [`VmapError::NoMemory`] when the zone had fewer free pages (those mapped so far stay).
pub fn vmalloc_step(
    zone: &Zone,
    area: VmArea,
    from: usize,
    max: usize,
) -> Result<usize, VmapError> {
    let want = area.pages.saturating_sub(from).min(max).min(VMALLOC_BULK);
    let mut chunk = [Pfn(0); VMALLOC_BULK];
    let got = zone.rmqueue_bulk(want, &mut chunk[..want]);
    for (k, pfn) in chunk[..got].iter().enumerate() {
        // SAFETY: a page fresh from the zone, identity-mapped and ours alone.
        unsafe { core::ptr::write_bytes(pfn.addr() as *mut u8, 0, PAGE as usize) };
        paging::vmap_page(area.page_addr(from + k), pfn.addr(), true).map_err(VmapError::Paging)?;
    }
    if got < want {
        return Err(VmapError::NoMemory { pages: want });
    }
    Ok(got)
}

/// Unmap and free up to `max` pages of `area` from page `from` on (its mapped pages, the
/// others skipped), with a local flush per page: for a range only this CPU touched
/// ([`vmalloc_step`]'s). Returns the next page to give back and the frames freed; once it is
/// `area.pages` the range itself goes back ([`release_va`]).
pub fn vfree_step(zone: &Zone, area: VmArea, from: usize, max: usize) -> (usize, usize) {
    let end = area.pages.min(from.saturating_add(max));
    let mut freed = 0;
    for i in from..end {
        if let Some(pfn) = vunmap_one(area, i) {
            x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(area.page_addr(i)));
            zone.free_pages_order(pfn, 0);
            freed += 1;
        }
    }
    if end == area.pages {
        release_va(area);
    }
    (end, freed)
}

/// Allocate `bytes` (rounded up to pages) of virtually contiguous, zeroed, writable memory
/// from order-0 pages (Linux `vmalloc`): no high-order block is needed, so it works on a
/// fragmented zone. Pages come from the zone in bulk ([`Zone::rmqueue_bulk`],
/// [`VMALLOC_BULK`] per lock round trip). Free with `vunmap` + a flush + frees.
///
/// # Errors
/// [`VmapError::NoMemory`] (every page taken so far goes back), [`VmapError::NoVirtualSpace`].
pub fn vmalloc(zone: &Zone, bytes: u64) -> Result<VmArea, VmapError> {
    let pages = bytes.div_ceil(PAGE) as usize;
    let area = alloc_va(pages)?;
    let mut done = 0;
    let mut chunk = [Pfn(0); VMALLOC_BULK];
    while done < pages {
        let want = (pages - done).min(VMALLOC_BULK);
        let got = zone.rmqueue_bulk(want, &mut chunk[..want]);
        for (k, pfn) in chunk[..got].iter().enumerate() {
            // SAFETY: a page fresh from the zone, identity-mapped and ours alone.
            unsafe { core::ptr::write_bytes(pfn.addr() as *mut u8, 0, PAGE as usize) };
            paging::vmap_page(area.page_addr(done + k), pfn.addr(), true)
                .map_err(VmapError::Paging)?;
        }
        done += got;
        if got < want {
            // No other CPU was told about this range, so none used it; only this CPU may hold
            // (speculatively walked) translations: a local flush per page suffices.
            vunmap(area, |v, pfn| {
                x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(v));
                zone.free_pages_order(pfn, 0);
            });
            release_va(area);
            return Err(VmapError::NoMemory { pages });
        }
    }
    Ok(area)
}
