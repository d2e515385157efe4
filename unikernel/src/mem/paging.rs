//! The kernel's page tables, built and owned by code after boot (the PVH stub's tables only get
//! us to `kernel_main`).
//!
//! Layout of the one address space (Intel SDM Vol. 3A §4.5, 4-level paging):
//!
//! | virtual range | maps | pages |
//! |---|---|---|
//! | `0 .. identity_top()` | physical memory 1:1: all RAM (above 4 GiB too), the 32-bit PCI hole, and MMIO above RAM mapped on demand ([`ensure_identity`]) | 2 MiB; a 2 MiB page can be split into 4 KiB PTEs ([`split_identity_2m`]) |
//! | MMIO above [`IDENTITY_MAX_GIB`] (below 2^47) | 64-bit BARs firmware put high (OVMF: 0xe0_0000_0000 and up on q35), 1:1, uncached, on demand ([`ensure_identity`]) from a small static pool of tables ([`HIGH_MMIO_PDPTS`], [`HIGH_MMIO_GIBS`]) | 2 MiB |
//! | [`VMAP_BASE`] `..+` [`VMAP_BYTES`] | the vmap area ([`super::vmap`]): pages remapped contiguously, per-core windows | 4 KiB |
//!
//! The vmap area lies far from the identity map on purpose: QEMU TCG turns an `invlpg` of an
//! address inside a 2 MiB-mapped range into a flush of the whole TLB, so per-page flushes stay
//! per page only there (docs/DESIGN.md, "Remapped buffers and batched TLB shootdown").
//!
//! Every table the hardware walks is a `static` (`.bss`, identity-mapped, below 4 GiB because
//! the AP trampoline loads CR3 in 32-bit mode) except the 4 KiB tables of split identity pages,
//! which come from the zone. Entries are atomics: the MMU reads them while we write, and a
//! 64-bit aligned store is single-copy atomic (SDM Vol. 3A §8.1.1). Nothing here flushes a TLB
//! for a mapping it removes or changes: callers gather those into a flush batch (`mm::tlb`).

use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::structures::paging::PageTableFlags as F;

/// Bytes in a 4 KiB page.
pub const PAGE: u64 = 4096;
/// Bytes in a 2 MiB page (one page-directory entry).
pub const HUGE: u64 = 2 << 20;
/// Bytes in 1 GiB (one page-directory-pointer entry, one page directory).
pub const GIB: u64 = 1 << 30;
/// The most physical address space the identity map can cover, in GiB: one static page
/// directory (4 KiB) per GiB, 256 KiB of `.bss` for 64 GiB. RAM above is ignored (logged).
pub const IDENTITY_MAX_GIB: usize = 64;
/// Start of the vmap area: the first address of the upper canonical half (PML4 entry 256), far
/// above any physical address, so it never overlaps the identity map.
pub const VMAP_BASE: u64 = 0xffff_8000_0000_0000;
/// Size of the vmap area in bytes: 256 MiB (65,536 pages). Its 128 page tables (512 KiB) are
/// static, so mapping and unmapping there never allocate. Sized for the router's DIR-24-8 top
/// table (64 MiB) twice over (the live FIB and the one being built) plus per-core windows.
pub const VMAP_BYTES: u64 = 256 << 20;
/// Page tables of the vmap area.
const VMAP_PTS: usize = (VMAP_BYTES / HUGE) as usize;
const ENTRIES: usize = 512;
/// Address bits of an entry (bits 12..52).
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// One page table (any level): 512 entries the MMU walks, 4 KiB aligned.
#[repr(C, align(4096))]
pub struct Table([AtomicU64; ENTRIES]);

impl Table {
    const fn new() -> Table {
        Table([const { AtomicU64::new(0) }; ENTRIES])
    }
    fn phys(&self) -> u64 {
        // Statics and zone pages are identity-mapped: the address is the physical address.
        core::ptr::from_ref(self) as u64
    }
    fn set(&self, i: usize, v: u64) {
        self.0[i].store(v, Ordering::Release);
    }
    fn get(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Acquire)
    }
}

static PML4: Table = Table::new();
static IDENT_PDPT: Table = Table::new();
/// The identity map's page directories, one per GiB. In `.bss.nozero` (`linker.ld`: the entry
/// does not zero these 256 KiB): [`fill_identity_gib`] writes all 512 entries of a directory
/// before `IDENT_PDPT` links it, and nothing reads a directory the PDPT does not link (neither
/// this module nor the CPU's page walk), so no stale byte is ever read.
#[unsafe(link_section = ".bss.nozero.ident_pd")]
static IDENT_PD: [Table; IDENTITY_MAX_GIB] = [const { Table::new() }; IDENTITY_MAX_GIB];
/// Page-directory-pointer tables for MMIO in PML4 slots other than 0 (each: 512 GiB).
pub const HIGH_MMIO_PDPTS: usize = 4;
/// Distinct GiBs of MMIO above [`IDENTITY_MAX_GIB`] that can be mapped (one page directory each).
pub const HIGH_MMIO_GIBS: usize = 16;
/// In `.bss.nozero` (as [`IDENT_PD`]): `map_high_gib` zeroes a PDPT before the PML4 links it.
#[unsafe(link_section = ".bss.nozero.high_pdpt")]
static HIGH_PDPT: [Table; HIGH_MMIO_PDPTS] = [const { Table::new() }; HIGH_MMIO_PDPTS];
/// In `.bss.nozero` (as [`IDENT_PD`]): `map_high_gib` writes all 512 entries of a directory
/// before a PDPT links it.
#[unsafe(link_section = ".bss.nozero.high_pd")]
static HIGH_PD: [Table; HIGH_MMIO_GIBS] = [const { Table::new() }; HIGH_MMIO_GIBS];
/// Tables of [`HIGH_PDPT`] and [`HIGH_PD`] in use (only under [`IDENT_LOCK`]).
static HIGH_USED: spin::Mutex<(usize, usize)> = spin::Mutex::new((0, 0));
/// End of the lower canonical half: an identity-mapped address must lie below it.
const CANONICAL_LOW_END: u64 = 1 << 47;
static VMAP_PDPT: Table = Table::new();
static VMAP_PD: Table = Table::new();
/// The vmap area's page tables. In `.bss.nozero` (the entry does not zero these 512 KiB: 65,536
/// `rep stosq` steps, ~0.3 ms of a TCG boot): [`vmap_pt`] zeroes a table and links it into
/// [`VMAP_PD`] the first time anything maps, reads or clears a page of its 2 MiB, so neither
/// this module nor the CPU's page walk reads a stale byte (an unlinked directory entry is not
/// present: the MMU faults there as on a zero PTE).
#[unsafe(link_section = ".bss.nozero.vmap_pt")]
static VMAP_PT: [Table; VMAP_PTS] = [const { Table::new() }; VMAP_PTS];
/// Per vmap page table: zeroed and linked ([`vmap_pt`]).
static VMAP_PT_READY: [spin::Once<()>; VMAP_PTS] = [const { spin::Once::new() }; VMAP_PTS];
/// End of the identity map in bytes (a multiple of 1 GiB).
static IDENTITY_TOP: AtomicU64 = AtomicU64::new(0);
/// Serialises writers of the identity map (splits, MMIO ranges); vmap PTEs are owned by
/// whoever holds their virtual range and need no lock.
static IDENT_LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// Why a mapping could not be made.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub enum PagingError {
    /// The address lies outside the area the call manages (identity map or vmap area).
    OutOfRange(u64),
    /// A vmap page that should be empty is mapped already (a virtual range handed out twice).
    AlreadyMapped(u64),
    /// A vmap page that should be mapped is empty.
    NotMapped(u64),
    /// Splitting a 2 MiB page needs a 4 KiB table and the zone has no free page.
    NoMemory,
    /// MMIO at this address above [`IDENTITY_MAX_GIB`] needs a table and the static pool
    /// ([`HIGH_MMIO_PDPTS`], [`HIGH_MMIO_GIBS`]) is used up.
    NoHighMmioTables(u64),
}

impl core::fmt::Display for PagingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PagingError::OutOfRange(a) => write!(f, "address {a:#x} outside the mapped area"),
            PagingError::AlreadyMapped(a) => write!(f, "vmap page {a:#x} is already mapped"),
            PagingError::NotMapped(a) => write!(f, "vmap page {a:#x} is not mapped"),
            PagingError::NoMemory => f.write_str("no free page for a page table"),
            PagingError::NoHighMmioTables(a) => write!(
                f,
                "MMIO at {a:#x}: the {HIGH_MMIO_PDPTS} PDPTs / {HIGH_MMIO_GIBS} page directories for MMIO above {IDENTITY_MAX_GIB} GiB are used up"
            ),
        }
    }
}

const TABLE_FLAGS: u64 = F::PRESENT.bits() | F::WRITABLE.bits();
const HUGE_FLAGS: u64 = F::PRESENT.bits() | F::WRITABLE.bits() | F::HUGE_PAGE.bits();
/// MMIO: uncached (PCD | PWT select PAT entry 3, UC, at its power-on value; SDM §11.12.3).
const MMIO_FLAGS: u64 = HUGE_FLAGS | F::NO_CACHE.bits() | F::WRITE_THROUGH.bits();

/// What [`init`] built, for the boot log.
pub struct PagingInfo {
    /// End of the identity map in bytes (multiple of 1 GiB; at least 4 GiB).
    pub identity_top: u64,
}

/// Build the kernel's page tables and switch CR3 to them (boot CPU, once, before any other CPU
/// starts: the APs copy the BSP's CR3). `ram_top` is the end of the highest RAM range in bytes.
/// Identity-maps `0 .. max(4 GiB, ram_top)` rounded up to 1 GiB (capped at
/// [`IDENTITY_MAX_GIB`]) with 2 MiB pages and links the vmap area's directory (its page tables on
/// first use, `vmap_pt`).
pub fn init(ram_top: u64) -> PagingInfo {
    let max = IDENTITY_MAX_GIB as u64 * GIB;
    let top = ram_top.max(4 * GIB).next_multiple_of(GIB).min(max);
    for g in 0..(top / GIB) as usize {
        fill_identity_gib(g, HUGE_FLAGS);
    }
    IDENTITY_TOP.store(top, Ordering::Release);
    PML4.set(0, IDENT_PDPT.phys() | TABLE_FLAGS);
    VMAP_PDPT.set(0, VMAP_PD.phys() | TABLE_FLAGS);
    PML4.set(pml4_index(VMAP_BASE), VMAP_PDPT.phys() | TABLE_FLAGS);
    assert!(
        PML4.phys() < 4 * GIB,
        "the AP trampoline loads CR3 in 32-bit mode"
    );
    // SAFETY: PML4 maps everything the boot tables mapped (0–4 GiB, same frames, same
    // attributes for RAM) plus more, so every address in use stays valid across the switch;
    // the tables are statics that live forever. Writing CR3 flushes the non-global TLB.
    unsafe {
        core::arch::asm!("mov cr3, {}", in(reg) PML4.phys(), options(nostack, preserves_flags));
    }
    PagingInfo { identity_top: top }
}

/// Point GiB `g`'s page directory at 512 2 MiB frames with `flags`, and link it.
fn fill_identity_gib(g: usize, flags: u64) {
    let pd = &IDENT_PD[g];
    for i in 0..ENTRIES {
        pd.set(i, (g as u64 * GIB + i as u64 * HUGE) | flags);
    }
    IDENT_PDPT.set(g, pd.phys() | TABLE_FLAGS);
}

/// End of the identity map in bytes: physical addresses below it are reachable 1:1.
pub fn identity_top() -> u64 {
    IDENTITY_TOP.load(Ordering::Acquire)
}

/// Make `[paddr, paddr + bytes)` reachable 1:1 (an MMIO range above the identity map, e.g. a
/// 64-bit BAR above RAM): maps the GiBs it touches uncached with 2 MiB pages; above
/// [`IDENTITY_MAX_GIB`] (OVMF puts 64-bit BARs at 0xe0_0000_0000 and up) with tables from a
/// static pool. Nothing is unmapped and only empty entries are filled, so no TLB flush is
/// needed (not-present entries are never cached, SDM Vol. 3A §4.10.2.3).
///
/// # Errors
/// [`PagingError::OutOfRange`] if the range ends above 2^47 (the lower canonical half);
/// [`PagingError::NoHighMmioTables`] when the pool for MMIO above [`IDENTITY_MAX_GIB`] is used
/// up.
pub fn ensure_identity(paddr: u64, bytes: u64) -> Result<(), PagingError> {
    let end = paddr.saturating_add(bytes);
    if end <= identity_top() {
        return Ok(());
    }
    if end > CANONICAL_LOW_END {
        return Err(PagingError::OutOfRange(paddr));
    }
    let _g = IDENT_LOCK.lock();
    for g in (paddr / GIB) as usize..end.div_ceil(GIB) as usize {
        if g < IDENTITY_MAX_GIB {
            if IDENT_PDPT.get(g) == 0 {
                fill_identity_gib(g, MMIO_FLAGS);
            }
        } else {
            map_high_gib(g)?;
        }
    }
    Ok(())
}

/// Map GiB `g` (at or above [`IDENTITY_MAX_GIB`]) 1:1 as uncached MMIO with 2 MiB pages, tables
/// from the static pool. Caller holds [`IDENT_LOCK`].
fn map_high_gib(g: usize) -> Result<(), PagingError> {
    let addr = g as u64 * GIB;
    let mut used = HIGH_USED.lock();
    let slot = g / ENTRIES;
    let pdpt_phys = match PML4.get(slot) & ADDR_MASK {
        0 => {
            let Some(t) = HIGH_PDPT.get(used.0) else {
                return Err(PagingError::NoHighMmioTables(addr));
            };
            used.0 += 1;
            for e in &t.0 {
                e.store(0, Ordering::Relaxed);
            }
            PML4.set(slot, t.phys() | TABLE_FLAGS);
            t.phys()
        }
        p => p,
    };
    let pdpt = if pdpt_phys == IDENT_PDPT.phys() {
        &IDENT_PDPT
    } else {
        HIGH_PDPT
            .iter()
            .find(|t| t.phys() == pdpt_phys)
            .expect("a PML4 slot of the identity half points at a pool PDPT")
    };
    if pdpt.get(g % ENTRIES) != 0 {
        return Ok(());
    }
    let Some(pd) = HIGH_PD.get(used.1) else {
        return Err(PagingError::NoHighMmioTables(addr));
    };
    used.1 += 1;
    for i in 0..ENTRIES {
        pd.set(i, (addr + i as u64 * HUGE) | MMIO_FLAGS);
    }
    pdpt.set(g % ENTRIES, pd.phys() | TABLE_FLAGS);
    Ok(())
}

/// Split the identity map's 2 MiB page holding `paddr` into 512 4 KiB PTEs with the same
/// frames and attributes (a no-op if it is split already), taking the table from `alloc_table`
/// (a zeroed, identity-mapped page's physical address). The translation of every address stays
/// the same, so no flush is needed; afterwards single pages of the range can be unmapped
/// ([`set_identity_present`]).
///
/// # Errors
/// [`PagingError::OutOfRange`] outside the identity map, [`PagingError::NoMemory`] when
/// `alloc_table` returns `None`.
pub fn split_identity_2m(
    paddr: u64,
    alloc_table: impl FnOnce() -> Option<u64>,
) -> Result<(), PagingError> {
    if paddr >= identity_top() {
        return Err(PagingError::OutOfRange(paddr));
    }
    let _g = IDENT_LOCK.lock();
    let pd = &IDENT_PD[(paddr / GIB) as usize];
    let i = ((paddr % GIB) / HUGE) as usize;
    let pde = pd.get(i);
    if pde & F::HUGE_PAGE.bits() == 0 {
        return Ok(());
    }
    let pt_phys = alloc_table().ok_or(PagingError::NoMemory)?;
    // SAFETY: `alloc_table` hands over a fresh, zeroed, identity-mapped 4 KiB page we now own
    // for good (a page table is never freed); `Table` is 512 atomics, valid for any bits.
    let pt = unsafe { &*(pt_phys as *const Table) };
    let base = pde & ADDR_MASK & !(HUGE - 1);
    let flags = pde & !ADDR_MASK & !F::HUGE_PAGE.bits();
    for j in 0..ENTRIES {
        pt.set(j, (base + j as u64 * PAGE) | flags);
    }
    pd.set(i, pt_phys | TABLE_FLAGS);
    Ok(())
}

/// Mark the identity map's 4 KiB page at `paddr` present or not (its 2 MiB page must have been
/// split). Returns whether it was present before. The caller flushes the old translation on
/// every CPU that may cache it (a batched shootdown) before reusing the frame.
///
/// # Errors
/// [`PagingError::OutOfRange`] outside the identity map or in a 2 MiB page not split.
pub fn set_identity_present(paddr: u64, present: bool) -> Result<bool, PagingError> {
    if paddr >= identity_top() {
        return Err(PagingError::OutOfRange(paddr));
    }
    let pd = &IDENT_PD[(paddr / GIB) as usize];
    let pde = pd.get(((paddr % GIB) / HUGE) as usize);
    if pde & F::HUGE_PAGE.bits() != 0 {
        return Err(PagingError::OutOfRange(paddr));
    }
    // SAFETY: a non-huge identity PDE points at a table `split_identity_2m` made and never
    // frees.
    let pt = unsafe { &*((pde & ADDR_MASK) as *const Table) };
    let j = ((paddr % HUGE) / PAGE) as usize;
    let old = pt.get(j);
    let new = if present {
        old | F::PRESENT.bits()
    } else {
        old & !F::PRESENT.bits()
    };
    pt.set(j, new);
    Ok(old & F::PRESENT.bits() != 0)
}

/// Whether the identity map's page holding `paddr` is present now (by the page tables):
/// `None` outside the identity map.
pub fn identity_present(paddr: u64) -> Option<bool> {
    if paddr >= identity_top() {
        return None;
    }
    let pde = IDENT_PD[(paddr / GIB) as usize].get(((paddr % GIB) / HUGE) as usize);
    if pde & F::HUGE_PAGE.bits() != 0 || pde & F::PRESENT.bits() == 0 {
        return Some(pde & F::PRESENT.bits() != 0);
    }
    // SAFETY: a non-huge identity PDE points at a table `split_identity_2m` made and never
    // frees.
    let pt = unsafe { &*((pde & ADDR_MASK) as *const Table) };
    Some(pt.get(((paddr % HUGE) / PAGE) as usize) & F::PRESENT.bits() != 0)
}

fn pml4_index(v: u64) -> usize {
    ((v >> 39) & 0x1ff) as usize
}

/// The vmap area's PTE for `vaddr`.
fn vmap_pte(vaddr: u64) -> Result<(&'static Table, usize), PagingError> {
    let off = vaddr.wrapping_sub(VMAP_BASE);
    if vaddr < VMAP_BASE || off >= VMAP_BYTES || !off.is_multiple_of(PAGE) {
        return Err(PagingError::OutOfRange(vaddr));
    }
    Ok((
        vmap_pt((off / HUGE) as usize),
        ((off % HUGE) / PAGE) as usize,
    ))
}

/// The `i`-th vmap page table, zeroed and linked into [`VMAP_PD`] on first use (once, whoever
/// comes first; the others wait for it). Before the link no CPU can have walked through it.
fn vmap_pt(i: usize) -> &'static Table {
    let pt = &VMAP_PT[i];
    VMAP_PT_READY[i].call_once(|| {
        for e in &pt.0 {
            e.store(0, Ordering::Relaxed);
        }
        VMAP_PD.set(i, pt.phys() | TABLE_FLAGS);
    });
    pt
}

/// Map the vmap page `vaddr` to the frame `paddr`, writable or read-only, never executable.
/// The page must be empty (a new mapping needs no flush: no TLB can hold it, because an unmap
/// is flushed before its virtual range is handed out again).
///
/// # Errors
/// [`PagingError::OutOfRange`] outside the vmap area or unaligned; [`PagingError::AlreadyMapped`].
pub fn vmap_page(vaddr: u64, paddr: u64, writable: bool) -> Result<(), PagingError> {
    let (pt, i) = vmap_pte(vaddr)?;
    if pt.get(i) & F::PRESENT.bits() != 0 {
        return Err(PagingError::AlreadyMapped(vaddr));
    }
    let mut flags = F::PRESENT.bits() | F::NO_EXECUTE.bits();
    if writable {
        flags |= F::WRITABLE.bits();
    }
    pt.set(i, (paddr & ADDR_MASK) | flags);
    Ok(())
}

/// Clear the vmap page `vaddr`; returns the frame it mapped, if any. The old translation may
/// still be cached by any CPU that used it: the caller puts `vaddr` in a flush batch.
///
/// # Errors
/// [`PagingError::OutOfRange`] outside the vmap area or unaligned.
pub fn vunmap_page(vaddr: u64) -> Result<Option<u64>, PagingError> {
    let (pt, i) = vmap_pte(vaddr)?;
    let old = pt.0[i].swap(0, Ordering::AcqRel);
    Ok((old & F::PRESENT.bits() != 0).then_some(old & ADDR_MASK))
}

/// Point the mapped vmap page `vaddr` at the frame `paddr` instead (one atomic PTE store);
/// returns the frame it mapped before. Until every CPU that used `vaddr` flushed it, a CPU may
/// still reach the old frame through its TLB: batch `vaddr` and free the old frame only after
/// the flush.
///
/// # Errors
/// [`PagingError::OutOfRange`] outside the vmap area or unaligned; [`PagingError::NotMapped`]
/// if `vaddr` maps nothing (use [`vmap_page`]).
pub fn vmap_replace(vaddr: u64, paddr: u64, writable: bool) -> Result<u64, PagingError> {
    let (pt, i) = vmap_pte(vaddr)?;
    let mut flags = F::PRESENT.bits() | F::NO_EXECUTE.bits();
    if writable {
        flags |= F::WRITABLE.bits();
    }
    let old = pt.0[i].swap((paddr & ADDR_MASK) | flags, Ordering::AcqRel);
    if old & F::PRESENT.bits() == 0 {
        pt.set(i, old);
        return Err(PagingError::NotMapped(vaddr));
    }
    Ok(old & ADDR_MASK)
}

/// The frame the vmap page `vaddr` maps now (by the page tables, not any TLB), if any.
pub fn vmap_translate(vaddr: u64) -> Option<u64> {
    let (pt, i) = vmap_pte(vaddr & !(PAGE - 1)).ok()?;
    let e = pt.get(i);
    (e & F::PRESENT.bits() != 0).then_some((e & ADDR_MASK) | (vaddr & (PAGE - 1)))
}
