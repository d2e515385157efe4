//! [`Pages`]: a core's page owner — its pcp list, its pair's two page_pools and the way back
//! to every other pool. Every page the core lets go of goes through [`Pages::recycle`].

use super::fabric::Fabric;
use super::page::{PageBuf, RawPage};
use drivers::nic::TxOwner;
use drivers::pci::MAX_NICS;
use log::error;
use mm::page_pool::{IdentityDma, PagePool};
use mm::{PerCpuPages, Pfn, Zone, NO_POOL};
use netstack::config::PORTS;

/// A core's pages: pcp list, its two pools (global ids `2 * pair` and `2 * pair + 1`).
pub struct Pages {
    /// The zone every page comes from.
    pub zone: &'static Zone,
    /// This core's pcp list.
    pub pcp: PerCpuPages,
    /// The pair's page_pools: index `p` = local port `p`.
    pub pools: [PagePool; PORTS],
    /// DMA mapping (identity: the kernel maps all RAM at its physical address).
    pub dma: IdentityDma,
    /// Global id of pool 0 (`2 * pair`).
    first_pool: u32,
    fabric: &'static Fabric,
}

impl Pages {
    /// The pages of pair `pair`: `pools` must have ids `2 * pair` and `2 * pair + 1`.
    pub fn new(
        zone: &'static Zone,
        pcp: PerCpuPages,
        pools: [PagePool; PORTS],
        pair: usize,
        fabric: &'static Fabric,
    ) -> Pages {
        Pages {
            zone,
            pcp,
            pools,
            dma: IdentityDma,
            first_pool: (PORTS * pair) as u32,
            fabric,
        }
    }

    /// A page from local port `p`'s pool (`None`: the allocator is empty).
    #[inline]
    pub fn alloc(&mut self, p: usize) -> Option<PageBuf> {
        let pfn = self.pools[p].alloc(&mut self.pcp, self.zone, &mut self.dma)?;
        // SAFETY: the pool just handed the page out: nobody else holds it, and it is its owner.
        Some(unsafe { PageBuf::from_raw(self.raw(p, pfn)) })
    }

    /// Local port `p`'s pool with the pcp list, zone and DMA mapper its fast paths need,
    /// borrowed together (so a burst holds it without indexing the pool array per page).
    #[inline(always)]
    pub fn port(&mut self, p: usize) -> PortPages<'_> {
        let id = self.pool_id(p);
        PortPages {
            pool: &mut self.pools[p],
            pcp: &mut self.pcp,
            zone: self.zone,
            dma: &mut self.dma,
            id,
        }
    }

    /// The global id of local port `p`'s pool.
    #[inline]
    pub fn pool_id(&self, p: usize) -> u32 {
        self.first_pool + p as u32
    }

    /// The TX owner tag of local port `p`'s pool ([`RawPage::tx_owner`] of its pages).
    #[inline(always)]
    pub fn tx_owner(&self, p: usize) -> TxOwner {
        TxOwner::from_word(self.pool_id(p))
    }

    /// The raw form of a page of local port `p`'s pool.
    #[inline]
    pub fn raw(&self, p: usize, pfn: Pfn) -> RawPage {
        RawPage {
            pfn,
            pool: self.first_pool + p as u32,
        }
    }

    /// Take back a page whose owner is not known from where it was (a reset device's rings at
    /// quit): the owner is read from the page's metadata. Off the hot path.
    ///
    /// # Safety
    /// As [`PageBuf::from_raw`], for `pfn`.
    pub unsafe fn adopt(&self, pfn: Pfn) -> PageBuf {
        let pool = self.zone.page(pfn).pool().unwrap_or(NO_POOL);
        // SAFETY: per this function's contract; the owner is the page's recorded pool.
        unsafe { PageBuf::from_raw(RawPage { pfn, pool }) }
    }

    /// This core's index of page_pool `id`, if it is one of its two.
    #[inline]
    fn local_pool(&self, id: u32) -> Option<usize> {
        let i = id.wrapping_sub(self.first_pool) as usize;
        (i < PORTS).then_some(i)
    }

    /// Give a page back to the pool that owns it: this core's pool straight into its alloc
    /// cache; another core's pool through that pool's recycle ring (unmapped and freed here if
    /// the ring is full).
    #[inline]
    pub fn recycle(&mut self, page: PageBuf) {
        match self.local_pool(page.pool()) {
            Some(i) => self.pools[i].recycle_direct(
                page.into_raw().pfn,
                &mut self.pcp,
                self.zone,
                &mut self.dma,
            ),
            None => self.recycle_foreign(page),
        }
    }

    /// [`Pages::recycle`] for a page expected to belong to local pool `expect` (a constant
    /// at the call site, e.g. TX completions of the port opposite that pool's): one compare,
    /// then straight into that pool's alloc cache; any other page takes the general path.
    #[inline(always)]
    pub fn recycle_expect(&mut self, page: PageBuf, expect: usize) {
        if page.pool() == self.first_pool + expect as u32 {
            self.pools[expect].recycle_direct(
                page.into_raw().pfn,
                &mut self.pcp,
                self.zone,
                &mut self.dma,
            );
        } else {
            self.recycle(page);
        }
    }

    /// Another core's page (or a bug): checked against the page's metadata, then back through
    /// its pool's recycle ring.
    #[cold]
    fn recycle_foreign(&mut self, page: PageBuf) {
        let owner = self.zone.page(page.pfn()).pool();
        if owner != Some(page.pool()) {
            error!(
                "page {:#x}: token says pool {}, page says {owner:?}",
                page.pfn().addr(),
                page.pool()
            );
        }
        match owner.map(|id| id as usize).filter(|&id| id < MAX_NICS) {
            Some(id) => {
                let _ = self.fabric.pool_rings[id].recycle_remote(
                    page.into_raw().pfn,
                    self.zone,
                    Some(&mut self.pcp),
                    &mut self.dma,
                );
            }
            None => {
                // Not a pool page: a bug somewhere; free it rather than leak it.
                error!(
                    "page {:#x} has no owning pool (owner {owner:?}); freeing it",
                    page.pfn().addr()
                );
                self.pcp.free_page(self.zone, page.into_raw().pfn);
            }
        }
    }

    /// With `pool=release`: the page leaves its pool for good (unmapped, ownership cleared,
    /// freed) if it is this core's; another core's goes back to its pool.
    #[inline]
    pub fn release(&mut self, page: PageBuf) {
        match self.local_pool(page.pool()) {
            Some(i) => self.pools[i].release_page(
                page.into_raw().pfn,
                &mut self.pcp,
                self.zone,
                &mut self.dma,
            ),
            None => self.recycle_foreign(page),
        }
    }

    /// Free pages in the zone (its buddy lists and, with the page guard, its batch waiting
    /// for a shootdown) plus this core's pcp list and guard batch.
    pub fn free_pages(&self) -> u64 {
        self.zone.free_pages()
            + self.zone.guard_pending()
            + (self.pcp.count() + self.pcp.guard_pending()) as u64
    }
}

/// One local pool's fast paths ([`Pages::port`]): pages out for RX, pages back from TX or
/// drops, with the pool known in advance (no owner lookup).
pub struct PortPages<'a> {
    pool: &'a mut PagePool,
    pcp: &'a mut PerCpuPages,
    zone: &'static Zone,
    dma: &'a mut IdentityDma,
    id: u32,
}

impl PortPages<'_> {
    /// The pool's global id.
    #[inline(always)]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// A page from the pool, given up as a raw frame number (to an RX ring); `None` when the
    /// allocator is empty.
    #[inline(always)]
    pub fn alloc_raw(&mut self) -> Option<Pfn> {
        self.pool.alloc(self.pcp, self.zone, self.dma)
    }

    /// [`PortPages::alloc_raw`] from the alloc cache only (`None` when it is empty).
    #[inline(always)]
    pub fn alloc_cached_raw(&mut self) -> Option<Pfn> {
        self.pool.alloc_cached()
    }

    /// Give a page of this pool back (into its alloc cache; see [`PagePool::recycle_direct`]).
    #[inline(always)]
    pub fn recycle(&mut self, page: PageBuf) {
        debug_assert_eq!(page.pool(), self.id);
        self.pool
            .recycle_direct(page.into_raw().pfn, self.pcp, self.zone, self.dma);
    }
}
