//! TX: frames staged per output port during a burst, sent with one `tx_burst` (one publish)
//! per port, and completions returned to their pools in batches.

use super::page::{frame_room, PageBuf, RawPage};
use super::percore::{Core, Platform};
use drivers::nic::Nic;
use drivers::nic::{TxBuf, MAX_FRAME_PAGES, RING_SIZE};
use mm::Pfn;
use netstack::config::MAX_BURST;
use netstack::config::PORTS;
use netstack::{DropReason, PoolMode};

/// Reap TX completions of a port once this many descriptors are outstanding (DPDK's default
/// `tx_free_thresh`, 32): the ring walk is paid once per batch of completions.
pub const TX_FREE_THRESH: usize = 128;

impl<P: Platform> Core<P> {
    /// Queue `len` frame bytes of `page` for TX on local `port` (sent at the next flush).
    #[inline(always)]
    pub(crate) fn stage_tx(&mut self, port: usize, page: PageBuf, len: usize) {
        if self.tx.n[port] == MAX_BURST {
            self.flush_tx(port);
        }
        let i = self.tx.n[port];
        let raw = page.into_raw();
        self.tx.bufs[port][i] = TxBuf {
            pfn: raw.pfn,
            len,
            owner: raw.tx_owner(),
        };
        self.tx.n[port] = i + 1;
        self.tx.bytes[port] += len as u64;
    }

    /// Send what is staged for local port `q`; what does not fit the ring is dropped, counted
    /// (`tx_ring_full`) and recycled.
    pub(crate) fn flush_tx(&mut self, q: usize) {
        let n = core::mem::take(&mut self.tx.n[q]);
        if n == 0 {
            return;
        }
        if self.link_down[q] {
            return self.drop_staged_link_down(q, n);
        }
        // SAFETY: each staged page is the stage's and holds a frame after the header area; the
        // ones accepted belong to the TX ring until `tx_complete` or `take_pages` returns them.
        let sent = unsafe { self.nics[q].tx_burst(&self.tx.bufs[q][..n]) };
        let staged_bytes = core::mem::take(&mut self.tx.bytes[q]);
        let c = &mut self.counters[q];
        c.tx += sent as u64;
        c.tx_bytes += staged_bytes;
        for i in sent..n {
            let b = self.tx.bufs[q][i];
            self.counters[q].tx_bytes -= b.len as u64;
            self.counters[q].drop(DropReason::TxRingFull);
            // SAFETY: refused by the ring: still the stage's (staged with its owner).
            let page = unsafe { PageBuf::from_raw(RawPage::sent(b.pfn, b.owner)) };
            self.pages.recycle(page);
        }
    }

    /// The `n` frames staged for local port `q`, whose link is down (`Core::poll_links`):
    /// dropped, counted `link_down`, their pages recycled.
    #[cold]
    #[inline(never)]
    fn drop_staged_link_down(&mut self, q: usize, n: usize) {
        self.tx.bytes[q] = 0;
        for i in 0..n {
            let b = self.tx.bufs[q][i];
            self.counters[q].drop(DropReason::LinkDown);
            // SAFETY: staged, never handed to the ring: still the stage's (staged with its
            // owner).
            let page = unsafe { PageBuf::from_raw(RawPage::sent(b.pfn, b.owner)) };
            self.pages.recycle(page);
        }
    }

    /// Why local port `q` cannot take `want` more frames now, if it cannot: its link is down
    /// (`link_down`), or its TX ring has fewer free slots beyond what is staged
    /// (`tx_ring_full`). What a sender asks before it stages frames that must reach the ring.
    pub(crate) fn tx_refusal(&mut self, q: usize, want: usize) -> Option<DropReason> {
        if self.link_down[q] {
            Some(DropReason::LinkDown)
        } else if self.tx_room(q, want) < want {
            Some(DropReason::TxRingFull)
        } else {
            None
        }
    }

    /// Frames local port `q`'s TX ring can still take beyond what is staged for it (reaping
    /// its completions first when that is short of `want`): what a sender checks before it
    /// stages a frame or a fragment train that must reach the ring whole.
    pub(crate) fn tx_room(&mut self, q: usize, want: usize) -> usize {
        let room = |c: &Self| c.nics[q].tx_free_slots().saturating_sub(c.tx.n[q]);
        if room(self) < want {
            self.reclaim_port(q);
        }
        room(self)
    }

    /// Flush every port's staging.
    pub(crate) fn flush_all(&mut self) {
        for q in 0..PORTS {
            self.flush_tx(q);
        }
    }

    /// Return completed TX pages of every port to their pools (only ports with at least
    /// [`TX_FREE_THRESH`] outstanding, unless `force`). Returns pages returned.
    pub(crate) fn tx_reap(&mut self, force: bool) -> usize {
        self.reap_port(0, force) + self.reap_port(1, force)
    }

    /// How many RX buffers a fused burst toward local port `q` may take: the burst size; with
    /// `backpressure=on` no more than `q`'s TX ring has room for, so nothing is taken that
    /// would be dropped as `tx_ring_full`. Either way a TX ring with less room than a burst
    /// is reaped first: completions the device has made since the last [`Core::tx_reap`]
    /// (which waits for [`TX_FREE_THRESH`] outstanding) make room before any frame meets a
    /// ring that only looks full.
    #[inline(always)]
    pub(crate) fn burst_max(&mut self, q: usize) -> usize {
        let burst = self.cfg.burst;
        if self.nics[q].tx_free_slots() >= burst {
            return burst;
        }
        self.reclaim_port(q);
        if !self.cfg.backpressure {
            return burst;
        }
        burst.min(self.nics[q].tx_free_slots())
    }

    /// [`Core::tx_reap`] for local port `q`, once at least [`TX_FREE_THRESH`] pages are out
    /// (or `force`).
    #[inline(always)]
    fn reap_port(&mut self, q: usize, force: bool) -> usize {
        if !force && self.nics[q].tx_posted() < TX_FREE_THRESH {
            return 0;
        }
        self.reclaim_port(q)
    }

    /// Return local port `q`'s TX completions: its frames mostly came off the other port's
    /// RX ring, so their pages are expected in that port's pool. Out of line: its loop gets
    /// the registers to itself (inlined into the poll iteration it spilled half of them).
    #[inline(never)]
    fn reclaim_port(&mut self, q: usize) -> usize {
        // (The fault image sometimes finds the pool's cache "full": this reclaim's pages are
        // released, so later refills take the allocator's slow path.)
        let release =
            self.cfg.pool == PoolMode::Release || mm::fault::hit(mm::fault::Fault::RecycleFull);
        let expect = 1 - q;
        if !release && self.pages.pools[expect].cache_room() > 0 {
            // The fast path: completions of the other port's pool straight into its alloc
            // cache; any other page (another core's, the router's ICMP pages) afterwards.
            let owner = self.pages.tx_owner(expect);
            // At most RING_SIZE completions per call, each a frame of at most
            // MAX_FRAME_PAGES pages (a hairpinned jumbo frame of this port's own pool): always
            // room (16 KiB of stack; with RING_SIZE alone a ring of such frames lost pages).
            let mut other: heapless::Vec<RawPage, { RING_SIZE * MAX_FRAME_PAGES }> =
                heapless::Vec::new();
            let nic = &mut self.nics[q];
            let pool = &mut self.pages.pools[expect];
            let (cached, total) = nic.tx_reclaim_into(owner, pool.recycle_room(), |pfn, owner| {
                let pushed = other.push(RawPage::sent(pfn, owner));
                debug_assert!(pushed.is_ok(), "room for every page of RING_SIZE frames");
            });
            pool.recycled(cached);
            for &raw in &other {
                // SAFETY: the TX ring completed the page and `pool` is the owner it was sent
                // with.
                self.pages.recycle(unsafe { PageBuf::from_raw(raw) });
            }
            return total;
        }
        let pages = &mut self.pages;
        self.nics[q].tx_reclaim(|pfn, owner| {
            // SAFETY: the TX ring completed the page: it is ours again, and `pool` is the
            // owner it was sent with (`stage_tx`, or the fused burst's pool id).
            let page = unsafe { PageBuf::from_raw(RawPage::sent(pfn, owner)) };
            if release {
                pages.release(page);
            } else {
                pages.recycle_expect(page, 1 - q);
            }
        })
    }

    /// Send a multi-page frame of `len` bytes (`first`, then `rest`, each page full but the
    /// last) on local port `port` as one descriptor chain, after what is staged for it (order
    /// kept). If its other pages were not kept (`rest` short of `len`) or the ring is full,
    /// it is dropped, counted (`too_big`, `tx_ring_full`). Returns whether the ring took it.
    pub(crate) fn send_multi(
        &mut self,
        port: usize,
        first: PageBuf,
        rest: &[Pfn],
        len: usize,
    ) -> bool {
        let port = port % PORTS;
        let mut parts: heapless::Vec<(Pfn, usize), 4> = heapless::Vec::new();
        let raw = first.into_raw();
        let head = len.min(frame_room::<P::Nic>());
        let _ = parts.push((raw.pfn, head));
        let mut left = len - head;
        for &pfn in rest {
            let take = left.min(mm::PAGE_SIZE);
            if take > 0 {
                let _ = parts.push((pfn, take));
            }
            left -= take;
        }
        // SAFETY: `raw` was a `PageBuf` of pool `raw.pool`, given up just above.
        let first = unsafe { PageBuf::from_raw(raw) };
        if left > 0 || parts.len() != 1 + rest.len() {
            self.counters[port].drop(DropReason::TooBig);
            self.recycle_raw(rest);
            self.pages.recycle(first);
            return false;
        }
        self.flush_tx(port);
        // SAFETY: the frame's pages are this core's (taken from the neighbour queue and the
        // stash), filled as `parts` says; the ring owns them until their completion, which
        // hands each back with `raw.pool` (every page of a frame comes off one RX ring, so one
        // pool).
        if unsafe { self.nics[port].tx_chain(&parts, raw.tx_owner()) } {
            let _ = first.into_raw();
            let c = &mut self.counters[port];
            c.tx += 1;
            c.tx_bytes += len as u64;
            true
        } else {
            self.counters[port].drop(DropReason::TxRingFull);
            self.recycle_raw(rest);
            self.pages.recycle(first);
            false
        }
    }

    /// Recycle pages of port 0's or 1's RX rings known only by frame number (a multi-page
    /// frame's other pages).
    pub(crate) fn recycle_raw(&mut self, pages: &[Pfn]) {
        for &pfn in pages {
            // SAFETY: a page of a frame received on this core, nobody else holds it.
            let page = unsafe { self.pages.adopt(pfn) };
            self.pages.recycle(page);
        }
    }
}
