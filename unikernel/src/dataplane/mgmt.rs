//! The management plane's frames on a core, whatever the network function: copies in (on core
//! 0, where it runs, or handed over from the other cores through the fabric), frames of
//! several pages made linear, its output sent, its counters (`netstack::stats::MgmtPath`). The router hands
//! it its frames itself; any other NF gets the kernel's steering in front
//! ([`super::nf::MgmtSteer`]).
//!
//! Everything here is off the per-frame path and kept out of line (`#[inline(never)]`): inlined
//! into the router's poll iteration, moving the management plane out of its `Option` and back
//! cost the router ~2 guest instructions per packet in `bench sim`.

use super::handoff::Handoff;
use super::page::{frame_room, PageBuf};
use super::percore::{Core, LinearError, MgmtPlane, Platform};
use drivers::nic::{Nic, MAX_FRAME_PAGES};
use mm::Pfn;
use netstack::config::PORTS;
use netstack::DropReason;

impl<P: Platform> Core<P> {
    /// The management plane, when it runs on this core (core 0 with a management address).
    pub fn mgmt_plane(&self) -> Option<&P::Mgmt> {
        self.mgmt.plane.as_ref()
    }

    /// The management plane, mutable (host tests).
    #[cfg(any(test, feature = "host-rig"))]
    pub fn mgmt_plane_mut(&mut self) -> Option<&mut P::Mgmt> {
        self.mgmt.plane.as_mut()
    }

    /// The management plane's frames on this core as `STATS` counts them (`None` when this
    /// core's ports carry no management address).
    pub fn mgmt_path(&self) -> Option<netstack::stats::MgmtPath> {
        (self.mgmt.plane.is_some() || self.mgmt.remote.is_some()).then_some(self.mgmt.path)
    }

    /// The management plane, when it runs on this core.
    pub(crate) fn mgmt(&self) -> Option<&P::Mgmt> {
        self.mgmt.plane.as_ref()
    }

    /// Core 0: give the management plane the frames other cores handed over (as much as its
    /// queue has room for), recycle their pages and run it. Returns frames taken.
    #[inline(never)]
    pub(crate) fn drain_mgmt_ring(&mut self) -> usize {
        let room = self.mgmt().map_or(0, |m| m.rx_room());
        let fabric = self.fabric;
        let n = fabric.mgmt.pop_each(room, |mut h| {
            if !h.rest.is_empty() {
                // A frame of several pages, handed over with all of them.
                let len = usize::from(h.len);
                let pages: heapless::Vec<PageBuf, 4> = h.into_pages().collect();
                self.mgmt_linear(&pages, len);
                for page in pages {
                    self.pages.recycle(page);
                }
                return;
            }
            let len = usize::from(h.len).min(frame_room::<P::Nic>());
            self.mgmt_rx(h.page.frame_mut::<P::Nic>(len));
            self.pages.recycle(h.page);
        });
        if n > 0 {
            self.mgmt_poll();
        }
        n
    }

    /// A copy of `frame` (received on local port `p`) for the management plane: straight in
    /// when it runs on this core and port, handed to core 0 when it runs there, else nothing.
    /// Returns whether port `p` has a management plane (on this core or on core 0).
    #[inline(never)]
    pub(crate) fn copy_to_mgmt(&mut self, p: usize, frame: &[u8]) -> bool {
        if self.mgmt().is_some_and(|m| m.port() == p) {
            self.mgmt_rx(frame);
        } else if self.mgmt.remote == Some(p) {
            self.mgmt_handoff(p, frame);
        } else {
            return false;
        }
        true
    }

    /// Give `frame` to the management plane on this core: queued as a copy when it fits the
    /// queue, else processed at once (a frame longer than 1,514 bytes, jumbo MTU) and its
    /// output sent.
    fn mgmt_rx(&mut self, frame: &[u8]) {
        let Some(m) = self.mgmt.plane.as_mut() else {
            return;
        };
        if frame.len() <= m.queue_max() {
            m.push_rx(frame);
            return;
        }
        self.mgmt_now(|m, now_ms| m.rx_now(now_ms, frame));
    }

    /// Run `f` on the management plane now, then send what it produced.
    #[inline(never)]
    fn mgmt_now(&mut self, f: impl FnOnce(&mut P::Mgmt, i64) -> bool) -> bool {
        let Some(mut m) = self.mgmt.plane.take() else {
            return false;
        };
        let took = f(&mut m, (P::uptime_ns() / 1_000_000) as i64);
        self.mgmt_drain(&mut m);
        self.mgmt.plane = Some(m);
        took
    }

    /// A frame of several pages (`pages`, `len` bytes laid out as one run) for the
    /// management plane on this core: made linear by the platform (a per-core view) and
    /// processed at once. Counted `linear`, or `linear_failed` when no view could be made.
    /// The pages stay the caller's.
    #[inline(never)]
    pub(crate) fn mgmt_linear(&mut self, pages: &[PageBuf], len: usize) {
        let mut result = Err(LinearError::Map);
        self.mgmt_now(|m, now_ms| {
            result = P::with_linear(pages, len, &mut |bytes| {
                m.rx_now(now_ms, bytes);
            });
            result.is_ok()
        });
        match result {
            Ok(()) => self.mgmt.path.linear += 1,
            Err(_) => self.mgmt.path.linear_failed += 1,
        }
    }

    /// Copy a frame for the management plane into a page of this core's pool and hand it to
    /// core 0; counted, and dropped when no page is free or the ring is full.
    #[inline(never)]
    fn mgmt_handoff(&mut self, port: usize, frame: &[u8]) {
        let Some(mut page) = self.pages.alloc(port) else {
            self.mgmt.path.handoff_dropped += 1;
            return;
        };
        let len = frame.len().min(frame_room::<P::Nic>());
        page.frame_mut::<P::Nic>(len).copy_from_slice(&frame[..len]);
        self.push_mgmt(Handoff::one(page, len as u16, port as u8));
    }

    /// Hand `h` to core 0's management plane: counted, core 0 woken if it sleeps; a full ring
    /// gives every page back, counted as dropped.
    pub(crate) fn push_mgmt(&mut self, h: Handoff) {
        match self.fabric.mgmt.push(h) {
            Ok(()) => {
                self.mgmt.path.handoff += 1;
                self.wake_if_sleeping(0);
            }
            Err(h) => {
                self.mgmt.path.handoff_dropped += 1;
                for page in h.into_pages() {
                    self.pages.recycle(page);
                }
            }
        }
    }

    /// Run the management plane (bounded work) and send what it produced, each frame copied
    /// into a page from the management port's pool.
    #[inline(never)]
    pub(crate) fn mgmt_poll(&mut self) {
        if self.mgmt.wait {
            self.mgmt.due = self.mgmt.plane.is_some();
            return;
        }
        let Some(mut m) = self.mgmt.plane.take() else {
            return;
        };
        let now_ms = (P::uptime_ns() / 1_000_000) as i64;
        m.poll(now_ms, &mut |w, c| {
            let pairs = self.all_pairs();
            P::write_metrics(&pairs, c, w);
        });
        self.mgmt_drain(&mut m);
        self.mgmt.plane = Some(m);
    }

    /// Send every frame the management plane `m` produced, each copied into pages of the
    /// management port's pool: one page staged as usual, a longer frame (jumbo MTU) as one
    /// descriptor chain of fresh pages.
    fn mgmt_drain(&mut self, m: &mut P::Mgmt) {
        let port = m.port().min(PORTS - 1);
        m.drain_tx(&mut |f| {
            if f.len() > frame_room::<P::Nic>() {
                self.send_copy_chain(port, f);
                return;
            }
            let Some(mut page) = self.pages.alloc(port) else {
                self.counters[port].no_buffer += 1;
                return;
            };
            let len = f.len();
            page.frame_mut::<P::Nic>(len).copy_from_slice(f);
            self.stage_tx(port, page, len);
        });
    }

    /// Send `frame` (longer than one page's [`frame_room`]) on local port `port` as one
    /// descriptor chain of fresh pages from that port's pool, copied in (after what is staged
    /// for the port: order kept). Longer than a chain carries: `too_big`; no page:
    /// `no_buffer`; ring full: `tx_ring_full` (every page taken goes back).
    fn send_copy_chain(&mut self, port: usize, frame: &[u8]) {
        let n = (P::Nic::FRAME_OFFSET + frame.len()).div_ceil(mm::PAGE_SIZE);
        if n > MAX_FRAME_PAGES {
            self.counters[port].drop(DropReason::TooBig);
            return;
        }
        let mut pages: heapless::Vec<PageBuf, MAX_FRAME_PAGES> = heapless::Vec::new();
        let mut parts: heapless::Vec<(Pfn, usize), MAX_FRAME_PAGES> = heapless::Vec::new();
        let mut rest = frame;
        while !rest.is_empty() {
            let Some(mut page) = self.pages.alloc(port) else {
                self.counters[port].no_buffer += 1;
                for page in pages {
                    self.pages.recycle(page);
                }
                return;
            };
            let take = if pages.is_empty() {
                let take = rest.len().min(frame_room::<P::Nic>());
                page.frame_mut::<P::Nic>(take)
                    .copy_from_slice(&rest[..take]);
                take
            } else {
                let take = rest.len().min(mm::PAGE_SIZE);
                page.continuation_mut(take).copy_from_slice(&rest[..take]);
                take
            };
            rest = &rest[take..];
            let _ = parts.push((page.pfn(), take));
            // At most `n` <= MAX_FRAME_PAGES pages: fits.
            let _ = pages.push(page);
        }
        let owner = self.pages.tx_owner(port);
        self.flush_tx(port);
        // SAFETY: the pages are fresh from pool `owner` (port `port`'s), ours, holding the
        // bytes `parts` says; the ring owns them until their completion hands each back with
        // `owner`.
        if unsafe { self.nics[port].tx_chain(&parts, owner) } {
            for page in pages {
                let _ = page.into_raw();
            }
            let c = &mut self.counters[port];
            c.tx += 1;
            c.tx_bytes += frame.len() as u64;
        } else {
            self.counters[port].drop(DropReason::TxRingFull);
            for page in pages {
                self.pages.recycle(page);
            }
        }
    }

    /// Core 0 outside router mode (the router's `router_sync` does it there): give the
    /// management plane what other cores handed over, send what it produced and kick. Returns
    /// frames taken.
    #[inline(always)]
    pub(crate) fn mgmt_sync(&mut self) -> usize {
        if self.mgmt.plane.is_none() || self.fabric.mgmt.is_empty() {
            return 0;
        }
        let n = self.drain_mgmt_ring();
        if n > 0 {
            self.flush_all();
            self.kick_all();
        }
        n
    }

    /// The management plane's housekeeping outside router mode (every 10 ms, busy or idle):
    /// hand-overs taken, its timers and connections run, its output sent and kicked.
    #[inline(never)]
    pub(crate) fn mgmt_tick(&mut self) {
        self.drain_mgmt_ring();
        self.mgmt_poll();
        self.flush_all();
        self.kick_all();
    }

    /// Whether a frame received on local port `p` reaches the management plane from this
    /// core: it runs here on that port, or on core 0 for that port (handed over).
    pub(crate) fn mgmt_serves(&self, p: usize) -> bool {
        self.mgmt().is_some_and(|m| m.port() == p) || self.mgmt.remote == Some(p)
    }

    /// A multi-page frame of `len` bytes received on local port `p` for the management plane
    /// (`first`, then the stash's `rest`): made linear here when the management plane runs on
    /// this core and port, handed to core 0 with all its pages when it runs there, else
    /// dropped. Every page goes back to its pool or on with the hand-off.
    pub(crate) fn multi_to_mgmt(&mut self, p: usize, first: PageBuf, rest: &[Pfn], len: usize) {
        let mut pages: heapless::Vec<PageBuf, 4> = heapless::Vec::new();
        let _ = pages.push(first);
        for &pfn in rest {
            // SAFETY: a page of this frame, kept in the stash since the burst; nobody else
            // holds it. At most 3 (the stash's bound): fits.
            let _ = pages.push(unsafe { self.pages.adopt(pfn) });
        }
        let whole = pages.len() == (P::Nic::FRAME_OFFSET + len).div_ceil(mm::PAGE_SIZE);
        if !whole {
            // The stash had not kept its other pages.
            self.mgmt.path.linear_failed += 1;
        } else if self.mgmt().is_some_and(|m| m.port() == p) {
            self.mgmt_linear(&pages, len);
        } else if self.mgmt.remote == Some(p) {
            let mut it = pages.into_iter();
            let Some(page) = it.next() else {
                return;
            };
            self.push_mgmt(Handoff {
                page,
                rest: it.collect(),
                len: len as u16,
                port: p as u8,
                mark: 0,
            });
            return;
        }
        for page in pages {
            self.pages.recycle(page);
        }
    }
}
