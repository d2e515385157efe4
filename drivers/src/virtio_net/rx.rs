//! The staged RX path: posting RX buffers (one page, or an indirect table of several:
//! §2.7.5.3), popping used elements (§2.7.14) into [`RxBuf`]s with refill in place, and the
//! per-buffer classification (`num_buffers`, §5.1.6.4) the fused loops share.

use super::{
    page_bytes, rx_used_faulty, rx_used_faulty_in, BigSlot, Hal, NetFeatures, Pfn, RxBuf, RxStatus,
    Transport, VirtioNet, MAX_FRAME_BUFFERS, NET_HDR_LEN, NO_PAGE, NUM_BUFFERS_OFFSET, PAGE_SIZE,
    QUEUE_SIZE, RX_PUBLISH_BATCH,
};

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Post `pages` as device-writable RX buffers (one page each) and publish them. Returns how
    /// many were posted; the rest (ring full) stay the caller's. No kick: see
    /// [`VirtioNet::kick`].
    ///
    /// # Safety
    /// Each page must be an order-0 RAM page the caller owns and will not touch until it comes
    /// back from [`VirtioNet::rx_burst`] or [`VirtioNet::reclaim`].
    pub unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        if self.rx_buf_pages > 1 {
            // SAFETY: the caller's contract, passed on.
            return unsafe { self.rx_refill_big(pages) };
        }
        let mut n = 0;
        for &pfn in pages {
            if pfn == NO_PAGE {
                break;
            }
            let Some(token) = self.rx.push(pfn.addr(), PAGE_SIZE as u32, true) else {
                break;
            };
            debug_assert!(self.rx_pages[usize::from(token)] == NO_PAGE);
            self.rx_pages[usize::from(token)] = pfn;
            n += 1;
        }
        if n > 0 || self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_posted += n;
            self.rx_unpublished = 0;
        }
        n
    }

    /// [`VirtioNet::rx_refill`] with big RX buffers: `pages` taken in groups of
    /// [`VirtioNet::rx_buffer_pages`], each group one descriptor and its indirect table. Returns
    /// the pages posted (whole groups; a short group at the end stays the caller's).
    ///
    /// # Safety
    /// As [`VirtioNet::rx_refill`].
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) unsafe fn rx_refill_big(&mut self, pages: &[Pfn]) -> usize {
        let k = self.rx_buf_pages;
        let Some(ind) = self.rx.indirect() else {
            return 0;
        };
        let mut n = 0;
        for group in pages.chunks_exact(k) {
            if group.contains(&NO_PAGE) {
                break;
            }
            let Some(token) = self.rx.push_indirect(k, |id| {
                for (j, p) in group.iter().enumerate() {
                    ind.write_writable(id, j, p.addr(), PAGE_SIZE as u32, j + 1 == k);
                }
            }) else {
                break;
            };
            debug_assert!(self.rx_pages[usize::from(token)] == NO_PAGE);
            self.rx_pages[usize::from(token)] = group[0];
            n += k;
        }
        if n > 0 || self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_posted += n;
            self.rx_unpublished = 0;
        }
        n
    }

    /// Pop up to `out.len()` completed RX buffers (§2.7.14 used ring). Returns how many were
    /// written to `out`; every returned page is the caller's again, whatever its status.
    pub fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        // SAFETY: no page is handed to the device: every emptied slot goes to the free list.
        unsafe { self.rx_burst_refill(out, || None) }
    }

    /// [`VirtioNet::rx_burst`] that refills each slot as it empties it: every completed
    /// descriptor is re-posted at once with a page from `alloc` (ixy.rs `rx_batch`), published
    /// in batches of 32 ([`VirtioNet::rx_publish`] flushes the rest). A slot
    /// `alloc` cannot fill (`None`) goes back to the free list for a later
    /// [`VirtioNet::rx_refill`]. A used entry whose id was not posted is counted (`bad_token`)
    /// and skipped.
    ///
    /// # Safety
    /// Every page `alloc` returns must be an order-0 RAM page the caller owns and gives to the
    /// device until it comes back from an RX burst or [`VirtioNet::take_pages`].
    #[inline]
    pub unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        mut alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize {
        if self.rx_buf_pages > 1 {
            // SAFETY: the caller's contract, passed on.
            return unsafe { self.rx_burst_refill_big(out, &mut alloc) };
        }
        let mut n = 0;
        let mut reposted = 0;
        while n < out.len() {
            let Some((id, used)) = self.rx.pop_used().map(rx_used_faulty) else {
                break;
            };
            let Some(pfn) = self.take_rx_page(id) else {
                continue;
            };
            match alloc().filter(|&p| p != NO_PAGE) {
                Some(new) => {
                    self.rx
                        .repost(id as u16, new.addr(), PAGE_SIZE as u32, true);
                    self.rx_pages[id as usize] = new;
                    reposted += 1;
                }
                None => {
                    self.rx.release(id as u16);
                    self.rx_posted -= 1;
                }
            }
            out[n] = self.classify_rx(pfn, used as usize);
            n += 1;
        }
        if reposted > 0 {
            self.rx_unpublished += reposted;
            // Publish in batches, as a separate refill pass would (the device keeps at least
            // QUEUE_SIZE - RX_PUBLISH_BATCH buffers); `rx_publish` flushes the rest.
            if self.rx_unpublished >= RX_PUBLISH_BATCH {
                self.rx_publish();
            }
        }
        n
    }

    /// [`VirtioNet::rx_burst_refill`] with big RX buffers: per used element, its frame's
    /// pages (those its used length reaches) as buffers of `out` (the first classified as a
    /// one-page buffer would be: `Ok` when the frame fits the first page; else it is
    /// [`RxStatus::TooBig`] and the others [`RxStatus::Continuation`]: this path does not
    /// collect frames of several pages). The slot is re-posted with fresh pages from `alloc`
    /// where the frame was; if `alloc` runs out, the slot is released and its other pages
    /// (and the fresh ones taken) are returned as [`RxStatus::Unused`]. An element is taken
    /// while `out` has room for a slot's pages (`k`, [`VirtioNet::rx_buffer_pages`]); it is
    /// refilled only while `out` has room for the worst case of a release after a partial
    /// refill (2 × `k` − 1), else released at once (its `k` pages out, none taken from
    /// `alloc`). An `out` shorter than `k` takes nothing.
    ///
    /// # Safety
    /// As [`VirtioNet::rx_burst_refill`].
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) unsafe fn rx_burst_refill_big(
        &mut self,
        out: &mut [RxBuf],
        alloc: &mut impl FnMut() -> Option<Pfn>,
    ) -> usize {
        let k = self.rx_buf_pages;
        let mut n = 0;
        while out.len() - n >= k {
            // Room for the worst case of a partial refill: else the slot is released whole.
            let may_refill = out.len() - n >= 2 * k - 1;
            let Some((id, used)) = self
                .rx
                .pop_used()
                .map(|e| rx_used_faulty_in(e, k * PAGE_SIZE))
            else {
                break;
            };
            let Some(pfn0) = self.take_rx_page(id) else {
                continue;
            };
            let slot = self.big_slot_refill(id as u16, pfn0, used as usize, || {
                if may_refill {
                    alloc()
                } else {
                    None
                }
            });
            // The frame's pages first: the first as one page is classified, the rest as its
            // continuations; then what the slot gave back.
            let first = self.classify_rx(pfn0, slot.first_len);
            out[n] = if slot.touched > 1 && first.status == RxStatus::Ok {
                RxBuf {
                    status: RxStatus::TooBig,
                    ..first
                }
            } else {
                first
            };
            n += 1;
            for &p in &slot.pages[1..slot.touched] {
                out[n] = RxBuf {
                    pfn: p,
                    len: 0,
                    status: RxStatus::Continuation,
                };
                n += 1;
            }
            for &p in slot.unused() {
                out[n] = RxBuf {
                    pfn: p,
                    len: 0,
                    status: RxStatus::Unused,
                };
                n += 1;
            }
        }
        n
    }

    /// A big RX buffer's slot `id` just popped with `used` bytes (its first page `pfn0`, taken
    /// out of `rx_pages`): the pages the frame reached (`touched`: as far as the used length
    /// goes; every page for a length past the buffer, whose contents cannot be trusted) are
    /// the frame's; the slot is re-posted with pages from `fresh` in their table entries (one
    /// store each, the descriptor unchanged), or, when `fresh` runs dry first, released (back
    /// to the free list for a later `rx_refill`), its other pages and the fresh ones taken
    /// returned as [`BigSlot::unused`]. Shared by [`VirtioNet::rx_burst_refill`] and the fused
    /// burst's slow path.
    pub(crate) fn big_slot_refill(
        &mut self,
        id: u16,
        pfn0: Pfn,
        used: usize,
        mut fresh: impl FnMut() -> Option<Pfn>,
    ) -> BigSlot {
        let k = self.rx_buf_pages.min(MAX_FRAME_BUFFERS);
        let within = used <= k * PAGE_SIZE;
        let mut slot = BigSlot {
            touched: if within {
                used.div_ceil(PAGE_SIZE).max(1)
            } else {
                k
            },
            first_len: if within { used.min(PAGE_SIZE) } else { used },
            pages: [NO_PAGE; MAX_FRAME_BUFFERS],
            spare: [NO_PAGE; 2 * MAX_FRAME_BUFFERS],
            nspare: 0,
        };
        slot.pages[0] = pfn0;
        let Some(ind) = self.rx.indirect() else {
            // Not reached (big buffers have tables): the slot is gone, its first page out.
            self.rx.release(id);
            return slot;
        };
        for j in 1..k {
            slot.pages[j] = Pfn::from_addr(ind.addr(id, j));
        }
        let mut got = 0;
        while got < slot.touched {
            match fresh().filter(|&p| p != NO_PAGE) {
                Some(p) => {
                    slot.spare[got] = p;
                    got += 1;
                }
                None => break,
            }
        }
        if got == slot.touched {
            for (j, p) in slot.spare[..got].iter().enumerate() {
                ind.set_addr(id, j, p.addr());
            }
            self.rx_pages[usize::from(id)] = slot.spare[0];
            self.rx.repost_indirect(id);
            self.rx_unpublished += 1;
            if self.rx_unpublished >= RX_PUBLISH_BATCH {
                self.rx_publish();
            }
        } else {
            // No page for the whole slot: it goes back to the free list, and every page it
            // still held, with the fresh ones, to the caller.
            self.rx.release(id);
            self.rx_posted -= k;
            for &p in &slot.pages[slot.touched..k] {
                slot.spare[got] = p;
                got += 1;
            }
            slot.nspare = got;
        }
        slot
    }

    /// The page behind RX token `id` (a used entry's id), taken out of the table; `None` (and
    /// counted `bad_token`) when the device returned an id the driver has not posted.
    #[inline(always)]
    pub(in crate::virtio_net) fn take_rx_page(&mut self, id: u32) -> Option<Pfn> {
        let Some(slot) = self.rx_pages.get_mut(id as usize) else {
            self.bad_token();
            return None;
        };
        let pfn = core::mem::replace(slot, NO_PAGE);
        if pfn == NO_PAGE {
            self.bad_token();
            return None;
        }
        Some(pfn)
    }

    /// Make every re-posted RX buffer visible to the device now (before the core sleeps).
    #[inline]
    pub fn rx_publish(&mut self) {
        if self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_unpublished = 0;
        }
    }

    /// The buffer's `num_buffers` (§5.1.6), or 1 when `VIRTIO_NET_F_MRG_RXBUF` was not
    /// negotiated: §5.1.6.4.1 has the device write 1 then, but QEMU's virtio-net before 7.2.18
    /// and 10.0 (upstream c17ad4b11bd2) leaves bytes 10..12 as they were (a page that last held frame bytes in the middle of a big RX
    /// buffer then reads as the head of a frame of many buffers). Linux's `virtio_net` reads
    /// the field only with mergeable buffers too.
    ///
    /// # Safety
    /// The page is the driver's (the device is done with it).
    #[inline]
    pub(in crate::virtio_net) unsafe fn num_buffers(&self, pfn: Pfn) -> u16 {
        if !self.features.contains(NetFeatures::MRG_RXBUF) {
            return 1;
        }
        // SAFETY: per the contract; offset 10..12 is inside the page.
        let hdr = unsafe { page_bytes(pfn) };
        u16::from_le_bytes([hdr[NUM_BUFFERS_OFFSET], hdr[NUM_BUFFERS_OFFSET + 1]])
    }

    /// The longest frame this RX queue delivers (bytes, header excluded): longer ones are
    /// handed back `TooBig` ([`crate::nic::Nic::set_rx_frame_limit`]).
    pub fn set_rx_frame_limit(&mut self, len: usize) {
        self.rx_limit = len.max(crate::nic::RX_FRAME_LIMIT_FLOOR);
        self.rx_fits = self.rx_limit.min(super::MAX_FRAME_LEN);
    }

    /// The limit [`VirtioNet::set_rx_frame_limit`] set, else [`crate::virtio_net::MAX_MULTI_FRAME_LEN`].
    pub fn rx_frame_limit(&self) -> usize {
        self.rx_limit
    }

    pub(in crate::virtio_net) fn classify_rx(&mut self, pfn: Pfn, used: usize) -> RxBuf {
        if self.rx_chain.n < self.rx_chain.want {
            // A frame half collected by the fused burst loses this buffer (a continuation it
            // needed, or the next frame's head): it can never be whole. Its pages go back
            // the next time the fused burst looks (`rx_chain_give_back`), never forwarded.
            self.rx_chain.want = 0;
        }
        if self.rx_skip > 0 {
            self.rx_skip -= 1;
            return RxBuf {
                pfn,
                len: 0,
                status: RxStatus::Continuation,
            };
        }
        if !(NET_HDR_LEN..=PAGE_SIZE).contains(&used) {
            return RxBuf {
                pfn,
                len: 0,
                status: RxStatus::Malformed,
            };
        }
        // SAFETY: the device is done with the page (popped above) and we own it.
        let num_buffers = unsafe { self.num_buffers(pfn) };
        let len = used - NET_HDR_LEN;
        match num_buffers {
            // §5.1.6.4.1: without MRG_RXBUF the device sets num_buffers to 1 (0 is tolerated;
            // so is any value then: `num_buffers`).
            // Over the port's frame limit (`rx_limit`, the MTU): too big, as one past the page.
            0 | 1 if len > self.rx_limit => RxBuf {
                pfn,
                len: 0,
                status: RxStatus::TooBig,
            },
            0 | 1 => RxBuf {
                pfn,
                len,
                status: RxStatus::Ok,
            },
            k if usize::from(k) <= QUEUE_SIZE => {
                self.rx_skip = k - 1;
                RxBuf {
                    pfn,
                    len,
                    status: RxStatus::TooBig,
                }
            }
            _ => RxBuf {
                pfn,
                len,
                status: RxStatus::Malformed,
            },
        }
    }
}
