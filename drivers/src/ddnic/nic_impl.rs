//! [`Nic`] for [`DdNic`]: the driver-neutral contract over the DD-bit rings (the fused burst is
//! `forward.rs`'s, the rings and the staged path the parent's).

use super::*;

impl<H: Hal + 'static, R: DdRegs + 'static, const OFFSET: usize, F: DescFormat> Nic
    for DdNic<H, R, OFFSET, F>
{
    const FRAME_OFFSET: usize = OFFSET;
    const MAX_FRAME_LEN: usize = Self::RX_BUF_LEN;

    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn mtu(&self) -> Option<u16> {
        None
    }
    #[inline]
    fn rx_free_slots(&self) -> usize {
        RING_SIZE - 1 - self.rx_posted
    }
    fn rx_buffer_pages(&self) -> usize {
        1
    }
    fn set_rx_frame_limit(&mut self, len: usize) {
        self.rx_limit = len.max(crate::nic::RX_FRAME_LIMIT_FLOOR);
        self.rx_fits = self.rx_limit.min(Self::RX_BUF_LEN);
    }
    fn rx_frame_limit(&self) -> usize {
        self.rx_limit
    }
    fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError> {
        match pages {
            1 => Ok(()),
            0 => Err(RxBufferPagesError::BadCount(0)),
            _ => Err(RxBufferPagesError::Unsupported),
        }
    }
    #[inline(always)]
    fn rx_ready(&self) -> bool {
        self.rx_posted > 0 && self.rx_status(self.rx_clean) & STA_DD != 0
    }
    fn rx_completed(&self) -> usize {
        (0..self.rx_posted)
            .take_while(|&k| self.rx_status(self.rx_clean + k) & STA_DD != 0)
            .count()
    }
    #[inline]
    fn rx_pending(&self) -> usize {
        // One DD bit read: the burst reads each descriptor's DD bit anyway, so the count is
        // an upper bound ("the driver may count past its ring, the burst clamps"), not a walk.
        if self.rx_ready() {
            RING_SIZE
        } else {
            0
        }
    }
    fn rx_posted(&self) -> usize {
        self.rx_posted
    }
    fn tx_posted(&self) -> usize {
        self.tx_posted
    }
    fn tx_free_slots(&self) -> usize {
        self.tx_room()
    }
    unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        let n = pages.len().min(self.rx_free_slots());
        // Pages posted by this call (re-posts of earlier bursts may be waiting for `RDT` too:
        // they are not this call's).
        let mut posted = 0;
        for &p in &pages[..n] {
            if p == Pfn(0) {
                break;
            }
            self.rx_post_one(p);
            posted += 1;
        }
        self.rx_write_tail();
        posted
    }
    fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        // SAFETY: no page is handed to the NIC.
        unsafe { self.rx_burst_refill(out, || None) }
    }
    unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        mut alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(b) = self.rx_pop() else {
                break;
            };
            out[n] = b;
            n += 1;
            // (A page of a collected frame left no slot: its slot was re-posted when it was
            // collected.)
            if self.rx_posted < RING_SIZE - 1 {
                if let Some(p) = alloc().filter(|&p| p != Pfn(0)) {
                    self.rx_post_one(p);
                }
            }
            if self.rx_unpublished >= RX_PUBLISH_BATCH {
                self.rx_write_tail();
            }
        }
        n
    }
    fn rx_publish(&mut self) {
        self.rx_write_tail();
    }
    unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        let mut n = 0;
        for b in bufs {
            // SAFETY: the caller's contract, the frame at the frame offset.
            if !unsafe { self.tx_post(b.pfn, OFFSET, b.len, b.owner) } {
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.tx_publish();
        }
        n
    }
    #[inline]
    unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool {
        if len == 0 || offset + len > PAGE_SIZE || pfn == Pfn(0) || self.tx_room() == 0 {
            return false;
        }
        let cmd = TXCMD_EOP | TXCMD_IFCS | TXCMD_RS;
        self.tx_desc(
            pfn.addr() + offset as u64,
            len,
            cmd,
            len,
            TxDone { pfn, owner },
        );
        true
    }
    #[inline]
    fn tx_publish(&mut self) {
        fence(Ordering::Release);
        self.regs.write(TDT, self.tx_tail as u32);
        self.stats.kicks_tx += 1;
    }
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(d) = self.tx_pop() else {
                break;
            };
            out[n] = d;
            n += 1;
        }
        n
    }
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool {
        let bad = |i: usize, &(p, l): &(Pfn, usize)| {
            p == Pfn(0) || l == 0 || l > PAGE_SIZE - if i == 0 { Self::FRAME_OFFSET } else { 0 }
        };
        if parts.is_empty()
            || parts.len() > self.tx_room()
            || parts.iter().enumerate().any(|(i, p)| bad(i, p))
        {
            return false;
        }
        let total: usize = parts.iter().map(|&(_, l)| l).sum();
        for (i, &(p, l)) in parts.iter().enumerate() {
            // Every page of the frame comes back with its owner tag; `EOP` (and `RS`) on
            // the last descriptor only, `DD` is written back on each (§3.3.3.1: with
            // descriptor write-back per descriptor, as the simulated NIC does).
            let last = i + 1 == parts.len();
            let cmd = TXCMD_IFCS | TXCMD_RS | if last { TXCMD_EOP } else { 0 };
            let at = if i == 0 { OFFSET as u64 } else { 0 };
            self.tx_desc(p.addr() + at, l, cmd, total, TxDone { pfn: p, owner });
        }
        self.tx_publish();
        true
    }
    #[inline(always)]
    unsafe fn forward_burst_pending<T: Nic, O: ForwardOps>(
        &mut self,
        tx: &mut T,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        if let Some(tx) = crate::nic::same_type::<Self, T>(tx) {
            // SAFETY: the caller keeps the trait's contract, which `forward_own` shares.
            return unsafe { self.forward_own(tx, pending, max, owner, ops) };
        }
        // SAFETY: the caller keeps the trait's contract, which `forward_staged` shares.
        unsafe { forward_staged(self, tx, pending, max, owner, ops) }
    }
    fn tx_reclaim(&mut self, mut f: impl FnMut(Pfn, TxOwner)) -> usize {
        let mut n = 0;
        while let Some(d) = self.tx_pop() {
            f(d.pfn, d.owner);
            n += 1;
        }
        n
    }
    fn tx_reclaim_into(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        mut other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        let (mut into, mut done) = (0, 0);
        // In batches: the NIC completes in ring order (TDH only moves forward, §3.3.3), so DD
        // on the last descriptor of a run means the whole run is done: one status read per
        // run instead of one per descriptor. The position and count are locals, written back
        // once (through `&mut self` they were reloaded and stored per page: `other` writes
        // memory the compiler cannot tell apart from the driver's).
        let (mut c, mut posted) = (self.tx_clean, self.tx_posted);
        loop {
            let k = posted.min(room.len() - into).min(TX_CLEAN_BATCH);
            if k < TX_CLEAN_BATCH || self.tx_status(c + k - 1) & STA_DD == 0 {
                break;
            }
            fence(Ordering::Acquire);
            for j in c..c + k {
                let d = self.tx_pages[j & (RING_SIZE - 1)];
                if d.owner == owner {
                    room[into] = d.pfn;
                    into += 1;
                } else {
                    other(d.pfn, d.owner);
                }
            }
            c += k;
            posted -= k;
            done += k;
        }
        self.tx_clean = c & (RING_SIZE - 1);
        self.tx_posted = posted;
        while into < room.len() {
            let Some(d) = self.tx_pop() else {
                break;
            };
            done += 1;
            if d.owner == owner {
                room[into] = d.pfn;
                into += 1;
            } else {
                other(d.pfn, d.owner);
            }
        }
        (into, done)
    }
    fn kick(&mut self) -> u32 {
        // The tail writes (`rx_publish`, `tx_publish`) are the notifications.
        0
    }
    fn park_interrupts(&mut self) {}
    fn rx_arm_interrupt(&mut self) -> bool {
        self.rx_ready()
    }
    fn reset_device(&mut self) -> bool {
        self.regs.reset_device()
    }
    unsafe fn take_pages(&mut self, f: &mut dyn FnMut(Pfn)) {
        for k in 0..self.rx_posted {
            let i = (self.rx_clean + k) & (RING_SIZE - 1);
            f(self.rx_pages[i]);
            self.rx_pages[i] = Pfn(0);
        }
        for k in 0..self.tx_posted {
            let i = (self.tx_clean + k) & (RING_SIZE - 1);
            f(self.tx_pages[i].pfn);
            self.tx_pages[i].pfn = Pfn(0);
        }
        let chain = core::mem::take(&mut self.rx_chain);
        for &p in &chain.pages[..chain.n] {
            f(p);
        }
        self.rx_skip = false;
        self.rx_posted = 0;
        self.tx_posted = 0;
        self.rx_clean = self.rx_tail;
        self.tx_clean = self.tx_tail;
        self.rx_unpublished = 0;
    }
    fn stats(&self) -> DriverStats {
        let mut s = self.stats;
        self.regs.hw_stats(&mut s);
        s
    }
    fn link_up(&self) -> Option<bool> {
        self.regs.link_up()
    }
}
