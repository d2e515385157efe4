//! Posting frames on the TX ring: one page per descriptor, or a frame of several pages as a
//! descriptor chain (§2.7.5) or one indirect descriptor (§2.7.5.3); in-order mode entry and
//! exit (the free-descriptor stack of [`crate::virtqueue`]).

use super::{
    page_bytes, Hal, Pfn, SplitQueue, Transport, TxBuf, TxOwner, TxSlot, TxTag, VirtioNet,
    MAX_FRAME_BUFFERS, NET_HDR_LEN, NO_PAGE, PAGE_SIZE, QUEUE_SIZE, TX_IN_ORDER_HOLD,
};

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Queue frames for transmission, zero copy, and publish them: each page's first
    /// [`NET_HDR_LEN`] bytes are zeroed (no checksum offload, no GSO: §5.1.6.2) and the page is
    /// posted as one device-readable descriptor. Returns how many of `bufs` (a prefix) were
    /// queued; the rest did not fit in the ring (or had a bad length) and stay the caller's
    /// (count them as `tx_ring_full`).
    ///
    /// # Safety
    /// Each page must be owned by the caller, hold a frame of `len` bytes at offset
    /// [`NET_HDR_LEN`], and not be touched until it comes back from [`VirtioNet::tx_complete`]
    /// or [`VirtioNet::take_pages`].
    pub unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        let mut n = 0;
        for b in bufs {
            // SAFETY: caller contract, the frame at `NET_HDR_LEN` as `tx_post` wants it.
            if !unsafe { self.tx_post(b.pfn, NET_HDR_LEN, b.len, b.owner) } {
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.tx_publish();
        }
        n
    }

    /// Queue one frame of `len` bytes that starts `offset` bytes into page `pfn` (at least
    /// [`NET_HDR_LEN`]: a frame received on a NIC that keeps more header bytes than virtio-net,
    /// or as many) without publishing it ([`VirtioNet::tx_publish`]): the 12 bytes before the
    /// frame become its zeroed `virtio_net_hdr` (§5.1.6.2) and the descriptor starts there.
    /// `false` (the page stays the caller's) when the ring is full or the frame does not fit:
    /// `len` 0, past the page, or `offset` below the header's 12 bytes.
    ///
    /// # Safety
    /// The page is owned by the caller, holds the frame there, and is the device's until it
    /// comes back from a TX completion or [`VirtioNet::take_pages`].
    #[inline]
    pub unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool {
        if len == 0 || offset < NET_HDR_LEN || offset + len > PAGE_SIZE || pfn == NO_PAGE {
            return false;
        }
        // The fault image: the ring has no room for this frame.
        if mm::fault::hit(mm::fault::Fault::TxRingFull) {
            return false;
        }
        let hdr = offset - NET_HDR_LEN;
        // SAFETY: caller contract: the page is ours until the device completes it.
        unsafe { page_bytes(pfn)[hdr..offset].fill(0) };
        let Some(token) = self
            .tx
            .push(pfn.addr() + hdr as u64, (NET_HDR_LEN + len) as u32, false)
        else {
            return false;
        };
        self.tx_pages[usize::from(token)] = TxSlot {
            pfn,
            tag: TxTag::one(owner),
        };
        self.tx_posted += 1;
        true
    }

    /// Make every frame queued by [`VirtioNet::tx_post`] visible to the device (one release
    /// store of `avail->idx`, §2.7.13.3). No kick: see [`VirtioNet::kick`].
    #[inline]
    pub fn tx_publish(&mut self) {
        self.tx.publish();
    }

    /// After a TX reclaim: let the TX ring enter in-order mode again once no chain is in
    /// flight and [`TX_IN_ORDER_HOLD`] reclaims have passed since the last chain.
    #[inline(always)]
    pub(in crate::virtio_net) fn tx_try_in_order(&mut self) {
        if self.tx_chains == 0 {
            if self.tx_in_order_hold > 0 {
                self.tx_in_order_hold -= 1;
            } else {
                self.tx.try_in_order();
            }
        }
    }

    /// Before posting a chain: leave in-order mode (a chain takes several descriptors for one
    /// avail slot) and hold it off for [`TX_IN_ORDER_HOLD`] reclaims.
    #[inline]
    pub(crate) fn tx_leave_in_order(&mut self) {
        self.tx_in_order_hold = TX_IN_ORDER_HOLD;
        self.tx.leave_in_order();
    }

    /// Send one frame of several pages on this handle's TX queue outside a fused burst (e.g.
    /// a multi-page frame the router's neighbour queue released): `parts` are the pages in
    /// frame order with the frame bytes in each (the first page's after its
    /// [`NET_HDR_LEN`]-byte header area, zeroed here; the others from offset 0), at most
    /// [`MAX_FRAME_BUFFERS`]; every page tagged `owner` (handed back with it on completion).
    /// Published at once; no kick. Returns `false` (nothing taken: the pages stay the
    /// caller's) when the ring has too few free descriptors or `parts` is empty or too long.
    ///
    /// # Safety
    /// Every page is an order-0 RAM page the caller owns, holding its bytes as said, and is
    /// the device's until a TX completion or [`VirtioNet::take_pages`] returns it.
    #[inline]
    pub unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool {
        if parts.is_empty() || parts.len() > MAX_FRAME_BUFFERS {
            return false;
        }
        let mut descs = [(0u64, 0u32, false); MAX_FRAME_BUFFERS];
        for (i, &(pfn, len)) in parts.iter().enumerate() {
            let hdr = if i == 0 { NET_HDR_LEN } else { 0 };
            if pfn == NO_PAGE || len == 0 || hdr + len > PAGE_SIZE {
                return false;
            }
            descs[i] = (pfn.addr(), (hdr + len) as u32, false);
        }
        let n = parts.len();
        if n > 1 && self.tx.indirect().is_some() {
            if self.tx.free_descs() == 0 {
                return false;
            }
            // SAFETY: the caller's contract, passed on; one free descriptor (checked).
            unsafe { self.tx_indirect(&descs[..n], parts[0].0, owner) };
            return true;
        }
        self.tx_leave_in_order();
        let page = parts[0].0.addr() as usize as *mut u8;
        // SAFETY: the caller's page (contract); §5.1.6.2: a header of zeros asks for no
        // offload.
        unsafe { core::ptr::write_bytes(page, 0, NET_HDR_LEN) };
        let mut ids = [0u16; MAX_FRAME_BUFFERS];
        if self.tx.push_chain_ids(&descs[..n], &mut ids).is_none() {
            return false;
        }
        for i in 0..n {
            let id = usize::from(ids[i]) & (QUEUE_SIZE - 1);
            let tag = if i == 0 && n > 1 {
                TxTag::chain(owner)
            } else {
                TxTag::one(owner)
            };
            self.tx_pages[id] = TxSlot {
                pfn: parts[i].0,
                tag,
            };
        }
        self.tx.publish();
        self.tx_posted += n;
        if n > 1 {
            self.tx_chains += 1;
        }
        true
    }

    /// [`VirtioNet::tx_chain`] on a ring with indirect tables (§2.7.5.3): the frame's `descs`
    /// (2..=[`MAX_FRAME_BUFFERS`] device-readable buffers, the first, page `first`, starting
    /// with the virtio-net header, zeroed here) in the table of the next free descriptor,
    /// posted as one indirect descriptor in the next avail slot (the ring keeps in-order
    /// mode), tagged [`TxTag::chain`], published.
    ///
    /// # Safety
    /// As [`VirtioNet::tx_chain`], and the ring has a free descriptor.
    pub(in crate::virtio_net) unsafe fn tx_indirect(
        &mut self,
        descs: &[(u64, u32, bool)],
        first: Pfn,
        owner: TxOwner,
    ) {
        let Some(ind) = self.tx.indirect() else {
            return;
        };
        // SAFETY: the caller's page (contract); §5.1.6.2: a header of zeros asks for no
        // offload.
        unsafe { core::ptr::write_bytes(first.addr() as usize as *mut u8, 0, NET_HDR_LEN) };
        let mut c = self.tx.cursor();
        let a = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&c).0);
        let id = self.tx.nth_free_at(&c, 0, a, self.tx.is_in_order());
        let n = descs.len().min(MAX_FRAME_BUFFERS);
        for (j, &(addr, len, _)) in descs[..n].iter().enumerate() {
            ind.write(id, j, addr, len, j + 1 == n);
        }
        self.tx.rings().post_indirect_at(a, id, ind.phys(id), n);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut c, 1, 1);
        self.tx.set_cursor(c);
        self.tx_pages[usize::from(id) & (QUEUE_SIZE - 1)] = TxSlot {
            pfn: first,
            tag: TxTag::chain(owner),
        };
        self.tx.publish();
        self.tx_posted += n;
        self.tx_chains += 1;
    }
}
