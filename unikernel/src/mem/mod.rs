//! Memory: the kernel's page tables ([`paging`]), the e820 map turned into the buddy zone with
//! `mem_map` carved out of RAM, the vmap area ([`vmap`]), and the virtio HAL whose DMA memory
//! comes from the zone.
//!
//! All RAM from 1 MiB up is used, above 4 GiB too (up to [`paging::IDENTITY_MAX_GIB`]): low
//! memory holds the boot data and the AP trampoline.

pub mod kmap;
pub mod paging;
pub mod vmap;

use crate::arch::phases::{self, Phase};
use crate::arch::pvh::MAX_MEMMAP;
use crate::arch::pvh::{MemRegion, E820_RAM};
use core::ptr::NonNull;
use mm::{Page, Pfn, Zone, PAGE_SIZE};
use spin::Once;
use virtio_drivers::{BufferDirection, Hal, PhysAddr};

/// The one zone (all usable RAM from 1 MiB to the end of the identity map).
pub static ZONE: Once<Zone> = Once::new();

/// Lowest usable physical address: 1 MiB (below it: real-mode data, boot info, BIOS).
const LOW_LIMIT: u64 = 1 << 20;
/// Highest usable physical address + 1: the most the identity map can cover.
const HIGH_LIMIT: u64 = paging::IDENTITY_MAX_GIB as u64 * paging::GIB;

unsafe extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// Why memory could not be set up.
#[derive(Debug)]
#[allow(dead_code)] // fields are shown through Debug in the boot error
#[allow(clippy::enum_variant_names)] // each names what there is none of
pub enum MemError {
    /// The map has no RAM above 1 MiB outside the kernel image.
    NoRam,
    /// No single RAM range can hold `mem_map` (`bytes` needed).
    NoRoomForMemMap {
        /// Bytes of page metadata needed.
        bytes: u64,
    },
}

/// Summary of what [`init`] did, for the boot log.
pub struct MemInfo {
    /// Pages handed to the buddy allocator.
    pub managed_pages: u64,
    /// RAM pages ignored because they lie above what the identity map can cover.
    pub ignored_high_pages: u64,
    /// Managed pages at or above 4 GiB.
    pub high_pages: u64,
    /// End of the identity map in bytes.
    pub identity_top: u64,
    /// Bytes of `mem_map`.
    pub mem_map_bytes: u64,
    /// Free pages whose `mem_map` slots the boot left to deferred initialisation
    /// ([`mm::Zone::defer_fresh_ranges`]); counted in `managed_pages`.
    pub deferred_pages: u64,
    /// Kernel image [start, end) physical addresses.
    pub kernel: (u64, u64),
}

pub fn kernel_range() -> (u64, u64) {
    // Linker-script symbols: only their addresses are taken, never their contents.
    (
        &raw const __kernel_start as u64,
        &raw const __kernel_end as u64,
    )
}

/// At most this many usable pieces: one per memory-map entry plus one per hole (a hole splits
/// one piece in two; there are at most 6: the kernel, 4 boot modules, mem_map).
const MAX_PIECES: usize = MAX_MEMMAP + 8;

/// Free pages whose `mem_map` slots the boot writes (up to the next 4 MiB [`mm::MAX_ORDER`]
/// block boundary past them, with every slot below it); the rest is deferred ([`mm::Zone::defer_fresh_ranges`],
/// Linux's `CONFIG_DEFERRED_STRUCT_PAGE_INIT`) and written by the boot CPU after `ready` or
/// on demand. 16 MiB: a default boot takes ~1,000 pages (rings, RX buffers, pcp batches,
/// stacks), so it seldom waits for a deferred chunk; writing a slot costs ~5.5 guest
/// instructions, 355k for a 256 MiB guest (docs/benchmarks-journal.md, "Boot time, sixth pass").
const MEM_MAP_BOOT_PAGES: u64 = 4096;

/// RAM pieces of the memory map.
type Pieces = heapless::Vec<(u64, u64), MAX_PIECES>;

/// `pieces` with `[hs, he)` taken out (a piece it overlaps is clipped or split in two), in the
/// same order.
fn subtract(pieces: &Pieces, (hs, he): (u64, u64)) -> Pieces {
    let mut next = Pieces::new();
    for &(s, e) in pieces {
        if he <= s || hs >= e {
            let _ = next.push((s, e));
        } else {
            if s < hs {
                let _ = next.push((s, hs));
            }
            if he < e {
                let _ = next.push((he, e));
            }
        }
    }
    next
}

/// RAM ranges (page-aligned, [start, end) in bytes) usable by the allocator, minus `holes`, in
/// memory-map order. Computed once: each copy of this loop is first-executed code that TCG
/// translates at boot (docs/benchmarks-journal.md, "Boot time, fifth pass").
fn usable(map: &[MemRegion], holes: &[(u64, u64)]) -> Pieces {
    let mut pieces = Pieces::new();
    for r in map.iter().filter(|r| r.kind == E820_RAM) {
        let start = r.addr.max(LOW_LIMIT).next_multiple_of(PAGE_SIZE as u64);
        let end = (r.addr.saturating_add(r.size)).min(HIGH_LIMIT) & !(PAGE_SIZE as u64 - 1);
        if start < end {
            let _ = pieces.push((start, end));
        }
    }
    for &h in holes {
        pieces = subtract(&pieces, h);
    }
    pieces
}

/// Build the zone from the memory map. Call once, on the boot CPU.
/// `keep` lists physical ranges [start, end) that must stay untouched (boot modules).
pub fn init(map: &[MemRegion], keep: &[(u64, u64)]) -> Result<(&'static Zone, MemInfo), MemError> {
    let (ks, ke) = kernel_range();
    let ke = ke.next_multiple_of(PAGE_SIZE as u64);
    let mut holes: heapless::Vec<(u64, u64), 8> = heapless::Vec::new();
    let _ = holes.push((ks, ke));
    for &(s, e) in keep.iter().take(4) {
        let _ = holes.push((
            s & !(PAGE_SIZE as u64 - 1),
            e.next_multiple_of(PAGE_SIZE as u64),
        ));
    }
    let ram_top = map
        .iter()
        .filter(|r| r.kind == E820_RAM)
        .map(|r| r.addr.saturating_add(r.size))
        .max()
        .unwrap_or(0);
    // Map all RAM before touching any above 4 GiB (mem_map may land there).
    let pi = paging::init(ram_top);
    phases::mark(Phase::Paging);
    let pieces = usable(map, &holes);
    let lo = pieces.iter().map(|p| p.0).min().unwrap_or(u64::MAX);
    let hi = pieces.iter().map(|p| p.1).max().unwrap_or(0);
    if lo >= hi {
        return Err(MemError::NoRam);
    }
    let ignored_high_pages: u64 = map
        .iter()
        .filter(|r| r.kind == E820_RAM)
        .map(|r| (r.addr.saturating_add(r.size)).saturating_sub(r.addr.max(HIGH_LIMIT)))
        .sum::<u64>()
        / PAGE_SIZE as u64;

    let span_pages = (hi - lo) / PAGE_SIZE as u64;
    let bytes =
        (span_pages * core::mem::size_of::<Page>() as u64).next_multiple_of(PAGE_SIZE as u64);
    let at = pieces
        .iter()
        .find(|&&(s, e)| e - s >= bytes)
        .map(|p| p.0)
        .ok_or(MemError::NoRoomForMemMap { bytes })?;

    // The RAM to hand over, without mem_map, sorted and with overlaps clipped (a firmware map
    // may list a range twice), so each page is handed over once.
    let mut ranges = subtract(&pieces, (at, at + bytes));
    ranges.sort_unstable();
    let mut covered = lo;
    for r in ranges.iter_mut() {
        r.0 = r.0.max(covered);
        covered = covered.max(r.1);
    }

    let lo_pfn = lo / PAGE_SIZE as u64;
    let boundary = mem_map_boundary(lo_pfn, span_pages, &ranges);
    let base = at as *mut Page;
    write_mem_map(base, lo, (boundary - lo_pfn) as usize, &ranges);
    // SAFETY: `span_pages` slots at `base`, RAM no one else uses, never freed or moved: those
    // below `boundary` are initialised `Page`s; the others hold whatever the RAM held (every
    // bit pattern is a valid `Page`: integers in atomics) and the zone writes each before it
    // reads it (`Zone::defer_fresh_ranges`).
    let mem_map: &'static [Page] =
        unsafe { core::slice::from_raw_parts(base, span_pages as usize) };
    phases::mark(Phase::MemMap);
    let zone = ZONE.call_once(|| Zone::new(Pfn::from_addr(lo), mem_map));
    let (high_pages, deferred_pages) = hand_over(zone, &ranges, boundary);
    phases::mark(Phase::Zone);
    Ok((
        zone,
        MemInfo {
            managed_pages: zone.managed_pages(),
            ignored_high_pages,
            high_pages,
            identity_top: pi.identity_top,
            mem_map_bytes: bytes,
            deferred_pages,
            kernel: (ks, ke),
        },
    ))
}

/// The PFN below which the boot writes `mem_map` (deferred initialisation,
/// [`MEM_MAP_BOOT_PAGES`]): on a MAX_ORDER block boundary (no block below it has a buddy above
/// it), or the span's end (nothing deferred) for a small span or when more free `ranges` lie
/// above it than the zone can track ([`mm::MAX_DEFERRED_RANGES`]).
fn mem_map_boundary(lo_pfn: u64, span_pages: u64, ranges: &[(u64, u64)]) -> u64 {
    let span_end = lo_pfn + span_pages;
    // Past the first MEM_MAP_BOOT_PAGES free pages (the kernel and mem_map itself come first).
    let page = PAGE_SIZE as u64;
    let (mut need, mut at) = (MEM_MAP_BOOT_PAGES, lo_pfn);
    for &(s, e) in ranges.iter().filter(|r| r.0 < r.1) {
        let n = (e - s) / page;
        if n >= need {
            at = s / page + need;
            break;
        }
        need -= n;
        at = e / page;
    }
    let boundary = at.next_multiple_of(1 << mm::MAX_ORDER).min(span_end);
    let above = ranges
        .iter()
        .filter(|r| r.0 < r.1 && r.1 > boundary * PAGE_SIZE as u64)
        .count();
    if above > mm::MAX_DEFERRED_RANGES {
        span_end
    } else {
        boundary
    }
}

/// Hand the free RAM `ranges` (bytes, sorted, disjoint) to `zone`: below PFN `boundary` listed
/// now (their slots written), above it deferred. Returns (pages at or above 4 GiB, pages
/// deferred).
fn hand_over(zone: &Zone, ranges: &[(u64, u64)], boundary: u64) -> (u64, u64) {
    let mut high_pages = 0;
    let limit = boundary * PAGE_SIZE as u64;
    let mut deferred: heapless::Vec<(Pfn, Pfn), MAX_PIECES> = heapless::Vec::new();
    for &(s, e) in ranges.iter().filter(|r| r.0 < r.1) {
        if s < limit {
            zone.add_fresh_range(Pfn::from_addr(s), Pfn::from_addr(e.min(limit)));
        }
        if e > limit {
            let _ = deferred.push((Pfn::from_addr(s.max(limit)), Pfn::from_addr(e)));
        }
        high_pages += e.saturating_sub(s.max(1 << 32)) / PAGE_SIZE as u64;
    }
    (
        high_pages,
        zone.defer_fresh_ranges(Pfn(boundary), &deferred),
    )
}

/// One pass over the first `span_pages` slots of mem_map (Linux writes it, then frees the RAM
/// page by page: two): the pages of `ranges` (sorted, disjoint, at or above `lo`) in the state
/// the buddy allocator takes them in ([`Page::new_free`]), every other slot reserved; slots
/// past `span_pages` are left alone (deferred initialisation).
fn write_mem_map(base: *mut Page, lo: u64, span_pages: usize, ranges: &[(u64, u64)]) {
    let slot = |addr: u64| (((addr - lo) / PAGE_SIZE as u64) as usize).min(span_pages);
    let fill = |from: usize, to: usize, page: fn() -> Page| {
        for i in from..to {
            // SAFETY: `base` is RAM no one else uses (outside the kernel image, above 1 MiB,
            // identity-mapped by paging::init) with room for `span_pages` slots, `i` <
            // span_pages; every slot is written once, by the fills below, before `init` makes
            // the slice.
            unsafe { base.add(i).write(page()) };
        }
    };
    let mut next = 0;
    for &(s, e) in ranges.iter().filter(|r| r.0 < r.1) {
        fill(next, slot(s), Page::new);
        fill(slot(s), slot(e), Page::new_free);
        next = slot(e);
    }
    fill(next, span_pages, Page::new);
}

/// A zeroed, identity-mapped zone page for a page table (never freed): what
/// [`paging::split_identity_2m`] asks for. `None` when the zone is empty.
pub fn alloc_table(zone: &Zone) -> Option<u64> {
    zone.alloc_pages(0).map(|t| {
        // SAFETY: a fresh zone page, identity-mapped and ours: it becomes a page table.
        unsafe { core::ptr::write_bytes(t.addr() as *mut u8, 0, PAGE_SIZE) };
        t.addr()
    })
}

/// The `virtio-drivers` HAL for an identity-mapped kernel without an IOMMU: DMA memory comes
/// from the zone (zone-locked path), buffer sharing is the identity.
pub struct KernelHal;

/// The buddy order of the smallest block of at least `pages` pages.
pub fn order_for(pages: usize) -> usize {
    pages.max(1).next_power_of_two().trailing_zeros() as usize
}

/// A zeroed buddy block of at least `bytes` bytes (all of the block: `PAGE_SIZE << order`),
/// identity-mapped and kept for the kernel's life: storage set up once at boot (the management
/// plane's, a fw_cfg bundle, the ACL's classifier). `None` when the zone has no block that
/// large.
pub fn alloc_forever(zone: &Zone, bytes: usize) -> Option<&'static mut [u8]> {
    let order = order_for(bytes.div_ceil(PAGE_SIZE));
    let pfn = zone.alloc_pages(order)?;
    let len = PAGE_SIZE << order;
    // SAFETY: a fresh buddy block of `len` bytes, identity-mapped, never freed: ours for
    // 'static; zeroed before the slice is made.
    unsafe {
        core::ptr::write_bytes(pfn.addr() as *mut u8, 0, len);
        Some(core::slice::from_raw_parts_mut(pfn.addr() as *mut u8, len))
    }
}

/// Storage for one `T` kept for the kernel's life ([`alloc_forever`]'s block, which is
/// page-aligned), to be written with `MaybeUninit::write`: per-core state set up once at boot
/// (the router's). `None` when the zone has no block that large.
pub fn alloc_forever_for<T>(zone: &Zone) -> Option<&'static mut core::mem::MaybeUninit<T>> {
    const { assert!(core::mem::align_of::<T>() <= PAGE_SIZE) };
    let block = alloc_forever(zone, core::mem::size_of::<T>())?;
    // SAFETY: the block is at least `size_of::<T>()` bytes, page-aligned (so aligned for `T`),
    // ours for 'static and no longer reachable through `block`, which is consumed here; a
    // `MaybeUninit<T>` may hold any bytes.
    Some(unsafe { &mut *block.as_mut_ptr().cast::<core::mem::MaybeUninit<T>>() })
}

/// `n` values of `T`, each `v`, kept for the kernel's life, page-aligned: tables set up once
/// at boot (the IPv6 FIB's). One buddy block ([`alloc_forever`]) when one that large is free,
/// else order-0 pages mapped contiguously in the vmap area ([`vmap::vmalloc`]: a table past
/// the largest block, 4 MiB, or a fragmented zone). `None` when the zone (or the vmap area)
/// has not enough.
pub fn alloc_forever_slice<T: Copy>(zone: &Zone, n: usize, v: T) -> Option<&'static mut [T]> {
    const { assert!(core::mem::align_of::<T>() <= PAGE_SIZE) };
    let bytes = (n.max(1) * core::mem::size_of::<T>()).max(1);
    let block = match alloc_forever(zone, bytes) {
        Some(b) => b,
        None => {
            let area = vmap::vmalloc(zone, bytes as u64).ok()?;
            // SAFETY: `vmalloc` mapped `area.pages` zeroed, writable pages at `area.base`,
            // ours alone; they are never unmapped or freed (kept for 'static), and the vmap
            // area is mapped the same on every CPU (one address space).
            unsafe { core::slice::from_raw_parts_mut(area.base as *mut u8, area.pages * PAGE_SIZE) }
        }
    };
    let p = block.as_mut_ptr().cast::<T>();
    for i in 0..n {
        // SAFETY: `i < n` and the block holds at least `n` values of `T` (its size above),
        // page-aligned so aligned for `T`; `write` stores without reading what was there.
        unsafe { p.add(i).write(v) };
    }
    // SAFETY: `n` values of `T` just written at `p`, in a block ours for 'static and no longer
    // reachable through `block`, which is consumed here.
    Some(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

// SAFETY: dma_alloc returns zeroed, page-aligned, physically contiguous memory (one buddy block)
// or paddr 0 on failure; share returns the buffer's physical address (identity map, no IOMMU);
// x86 DMA is cache-coherent so unshare has nothing to do.
unsafe impl Hal for KernelHal {
    fn dma_alloc(pages: usize, _dir: BufferDirection) -> (PhysAddr, NonNull<u8>) {
        let zone = ZONE.get().expect("dma_alloc before mem::init");
        match zone.alloc_pages(order_for(pages)) {
            Some(pfn) => {
                let p = pfn.addr() as *mut u8;
                // SAFETY: a fresh block of 2^order >= `pages` pages, identity-mapped, ours.
                unsafe { core::ptr::write_bytes(p, 0, pages * PAGE_SIZE) };
                (
                    pfn.addr(),
                    NonNull::new(p).expect("PFN 0 is never handed out"),
                )
            }
            // virtio-drivers treats paddr 0 as allocation failure.
            None => (0, NonNull::dangling()),
        }
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) -> i32 {
        let zone = ZONE.get().expect("dma_dealloc before mem::init");
        zone.free_pages_order(Pfn::from_addr(paddr), order_for(pages));
        0
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        // 0–4 GiB and all RAM are identity-mapped; a BAR above them gets mapped here.
        if let Err(e) = paging::ensure_identity(paddr, size as u64) {
            panic!("MMIO region {paddr:#x}+{size:#x} cannot be mapped: {e}");
        }
        NonNull::new(paddr as *mut u8).expect("MMIO at physical address 0")
    }

    unsafe fn share(buffer: NonNull<[u8]>, _dir: BufferDirection) -> PhysAddr {
        buffer.as_ptr() as *mut u8 as u64
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _dir: BufferDirection) {}
}
