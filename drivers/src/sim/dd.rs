//! A simulated DD-bit NIC ([`crate::ddnic`]'s device): a register file ([`SimDdShared`], the
//! driver's [`DdRegs`] through [`SimDdRegs`]) and a player ([`SimDdDevice`]) that serves the
//! driver's descriptor rings as an Intel 8254x does with legacy descriptors (8254x SDM §3.2.3,
//! §3.3.3): RX writes a frame at the start of the buffer of the descriptor at `RDH`, its length
//! and `DD | EOP`, and moves `RDH` on up to `RDT`; TX reads the descriptors from `TDH` up to
//! `TDT` (a frame up to the one with `EOP`), writes `DD` back into each and moves `TDH` on.
//!
//! The second simulated NIC of issue 32: 0 header bytes before the frame (virtio-net has 12)
//! and completion by status write-back instead of a used ring, so the host tests show the
//! dataplane runs on a NIC that is not virtio-net.
//!
//! It is also the simulated 82576 (igb, [`crate::igb`]): with `SRRCTL.DESCTYPE` = 001b it
//! writes RX descriptors back in the advanced layout (82576 datasheet §7.1.5.2: extended
//! status `DD | EOP` in bits 31:0 of the second quadword, the length in 47:32), and it keeps
//! `RXDCTL`/`TXDCTL` (queue 0) so the igb bring-up finds its queue enabled. TX needs nothing
//! more: both layouts keep the length in bits 15:0 of the second quadword, the command in
//! 31:24 and `DD` in bit 32.
//!
//! Multi-queue (issue 41, item 6): the register blocks of all 16 queue pairs (82576 datasheet
//! §8.10, §8.12; [`crate::igb::QueueRegs`]'s offsets): queue `n`'s RX block at `0x0C000 +
//! 0x40·n` (`RDBAL`, `RDBAH`, `RDLEN`, `SRRCTL`, `RDH`, `RDT`, `RXDCTL`), its TX block at
//! `0x0E000 + 0x40·n` (`TDBAL`, `TDBAH`, `TDLEN`, `TDH`, `TDT`, `TXDCTL`), queue 0's blocks
//! aliases of the registers at 0x02800/0x03800; and RSS as QEMU's model does it
//! (hw/net/igb_core.c, `igb_receive_assign` without VMDq; [`rss`]): when `MRQC[1:0]` = 10b,
//! `RXCSUM.PCSD` is set and queue 0's `SRRCTL` selects advanced descriptors, each frame is
//! hashed (Toeplitz over the fields `MRQC` selects, keyed by `RSSRK`) and goes to queue
//! `RETA[hash & 0x7F] & 0x0F`; a queue whose `RXDCTL.ENABLE` (or `RCTL.EN`) is clear, or
//! without the descriptors the frame needs, drops it ([`SimDdDevice::dropped`] counts it). Its
//! EOP descriptor's write-back carries the RSS type and packet type in the first quadword's low
//! dword and the hash in its high dword ([`rss::RssInfo::first_quadword`]; datasheet §7.1.5.2,
//! Linux's `union e1000_adv_rx_desc` in e1000_82575.h, QEMU's `igb_write_adv_rx_descr`).
//! Without RSS every frame goes to queue 0 as before, its first quadword 0 (QEMU writes the
//! packet type there too; the driver reads neither), and copies it has no descriptors for are
//! counted as dropped there too. VMDq and the 82576's per-queue interrupts are not simulated.
//! [`SimDdDevice::complete_tx_on`] serves queue `n`'s TX ring.
//!
//! The benchmark's measured part is the driver's: its tail writes ([`SimDdRegs`]) cost the
//! guest instructions they did before the queues existed (`bench sim`'s igb and e1000e figures
//! unchanged): a register of the single-queue NIC is stored at once, any other in a cold
//! function the store tail-calls, and [`SimDdShared`] keeps the single-queue fields first, at
//! their old offsets (`repr(C)`).

use crate::ddnic::{
    DdRegs, RxDesc, TxDesc, CTRL, CTRL_RST, RAH0, RAL0, RCTL, RCTL_EN, RDBAH, RDBAL, RDH, RDLEN,
    RDT, RXDCTL, RXSTA_EOP, SRRCTL, STA_DD, TCTL, TCTL_EN, TDBAH, TDBAL, TDH, TDLEN, TDT,
    TXCMD_EOP, TXDCTL, XDCTL_ENABLE,
};
use crate::e1000e::{RXCSUM, STATUS, STATUS_LU};
use crate::igb::{ShareRegs, MAX_RSS_QUEUES, MDIC, MDIC_READY, MRQC, RETA, RSSRK, RXCSUM_PCSD};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use mm::PAGE_SIZE;

/// The registers the simulated NIC has (byte offsets); any other reads 0 and ignores writes.
/// `STATUS` (the 82574L's, [`crate::e1000e::STATUS`]) holds `LU`, so the e1000e bring-up
/// ([`crate::e1000e::bring_up`]) finds a link.
const REGS: [usize; 20] = [
    CTRL, RCTL, TCTL, RDBAL, RDBAH, RDLEN, RDH, RDT, TDBAL, TDBAH, TDLEN, TDH, TDT, RAL0, RAH0,
    SRRCTL, STATUS, RXDCTL, TXDCTL, MDIC,
];

/// `SRRCTL.DESCTYPE` (bits 27:25) = 001b: advanced RX descriptors, one buffer.
const SRRCTL_DESCTYPE_ADV: u32 = 0b001 << 25;
/// `SRRCTL.DESCTYPE`'s bits.
const SRRCTL_DESCTYPE_MASK: u32 = 0b111 << 25;
/// `SRRCTL.BSIZEPACKET` (bits 6:0, KiB).
const SRRCTL_BSIZE_MASK: u32 = 0x7F;

const _: () = assert!(REGS[13] == RAL0 && REGS[14] == RAH0 && REGS[16] == STATUS);
// `SRRCTL` is slot 3 of a queue's registers (kept by a reset).
const _: () = assert!(QUEUE_REGS[3] == SRRCTL - RDBAL && RXDCTL - RDBAL == 0x28);

/// Queue `n`'s receive register block (`RDBAL(n)`; datasheet §8.10), queue 0's an alias of
/// [`RDBAL`]'s.
pub const RX_QUEUE_BLOCK: usize = 0xC000;
/// Queue `n`'s transmit register block (`TDBAL(n)`; datasheet §8.12), queue 0's an alias of
/// [`TDBAL`]'s.
pub const TX_QUEUE_BLOCK: usize = 0xE000;
/// Bytes between two queues' register blocks.
pub const QUEUE_STRIDE: usize = 0x40;
/// The registers of a receive block the NIC has (byte offsets in the block: `RDBAL`, `RDBAH`,
/// `RDLEN`, `SRRCTL`, `RDH`, `RDT`, `RXDCTL`), then a transmit block's (`TDBAL`, `TDBAH`,
/// `TDLEN`, `TDH`, `TDT`, `TXDCTL`): a queue's slots in [`SimDdShared`]'s `queues`.
const QUEUE_REGS: [usize; 13] = [
    0x00, 0x04, 0x08, 0x0C, 0x10, 0x18, 0x28, 0x00, 0x04, 0x08, 0x10, 0x18, 0x28,
];
/// `MRQC.MRQE`'s low two bits as QEMU's model reads them (`igb_rss_enabled`): 10b is RSS.
const MRQC_RSS_MASK: u32 = 0b11;
/// `MRQC` with RSS (QEMU's `E1000_MRQC_ENABLE_RSS_MQ`).
const MRQC_RSS: u32 = 0b10;
/// `RETA` registers (four one-byte entries each).
const RETA_REGS: usize = 32;
/// `RSSRK` registers (four key bytes each).
const RSSRK_REGS: usize = 10;

/// Register `reg`'s slot in [`REGS`]: the tails first (a tail write is inside the benchmark's
/// measured bracket, where it stands for one store to a hardware register).
#[inline(always)]
fn index(reg: usize) -> Option<usize> {
    let i = match reg {
        TDT => 12,
        RDT => 7,
        _ => return REGS.iter().position(|&r| r == reg),
    };
    debug_assert_eq!(REGS[i], reg);
    Some(i)
}

/// Largest frame [`SimDdDevice::complete_tx`] gathers (bytes): 4 pages.
const TX_GATHER_MAX: usize = 4 * PAGE_SIZE;

/// The simulated NIC's register file, shared by the driver ([`SimDdRegs`]) and the player.
///
/// `repr(C)`, the single-queue NIC's fields first in the order the compiler gave them before
/// the queues came: the tail writes the benchmark measures address the same offsets as then.
#[repr(C)]
pub struct SimDdShared {
    /// Frames the player delivered and completed (for tests).
    delivered: AtomicU64,
    completed: AtomicU64,
    /// Register reads by the driver ([`SimDdRegs`]): the benchmark and tests check that the
    /// forwarding loop makes none.
    reads: AtomicU64,
    /// `RDT` and `TDT` writes by the driver (the doorbells: the benchmark reports them per
    /// frame).
    rdt_writes: AtomicU64,
    tdt_writes: AtomicU64,
    regs: [AtomicU32; REGS.len()],
    /// Frames each queue dropped: no descriptor for them, or the queue disabled.
    dropped: [AtomicU64; MAX_RSS_QUEUES],
    /// Queues 1..16's ring registers ([`QUEUE_REGS`]; queue 0's are in `regs`).
    queues: [[AtomicU32; QUEUE_REGS.len()]; MAX_RSS_QUEUES - 1],
    /// `RETA`, `RSSRK`, `MRQC`, `RXCSUM` (datasheet §8.10).
    reta: [AtomicU32; RETA_REGS],
    rssrk: [AtomicU32; RSSRK_REGS],
    mrqc: AtomicU32,
    rxcsum: AtomicU32,
}

impl SimDdShared {
    /// A NIC with MAC `mac` (in `RAL0`/`RAH0`, `AV` set), rings not yet set up. `const`, so
    /// the kernel's benchmark keeps its NICs in statics.
    pub const fn new(mac: [u8; 6]) -> SimDdShared {
        let mut regs = [const { AtomicU32::new(0) }; REGS.len()];
        regs[13] = AtomicU32::new(u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]));
        regs[14] = AtomicU32::new(u32::from_le_bytes([mac[4], mac[5], 0, 0x80]));
        regs[16] = AtomicU32::new(STATUS_LU);
        SimDdShared {
            regs,
            queues: [const { [const { AtomicU32::new(0) }; QUEUE_REGS.len()] }; MAX_RSS_QUEUES - 1],
            reta: [const { AtomicU32::new(0) }; RETA_REGS],
            rssrk: [const { AtomicU32::new(0) }; RSSRK_REGS],
            mrqc: AtomicU32::new(0),
            rxcsum: AtomicU32::new(0),
            dropped: [const { AtomicU64::new(0) }; MAX_RSS_QUEUES],
            delivered: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            rdt_writes: AtomicU64::new(0),
            tdt_writes: AtomicU64::new(0),
        }
    }

    /// `(RDT writes, TDT writes)` the driver made so far.
    pub fn tail_writes(&self) -> (u64, u64) {
        (
            self.rdt_writes.load(Ordering::Relaxed),
            self.tdt_writes.load(Ordering::Relaxed),
        )
    }

    /// Register reads the driver made so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Take the link up or down (`STATUS.LU`).
    pub fn set_link(&self, up: bool) {
        self.set(STATUS, if up { STATUS_LU } else { 0 });
    }

    /// The register at `reg` (0 for one the NIC does not have).
    pub fn get(&self, reg: usize) -> u32 {
        match index(reg) {
            Some(i) => self.regs[i].load(Ordering::Acquire),
            None => self.cell_mq(reg).map_or(0, |c| c.load(Ordering::Acquire)),
        }
    }

    /// Write register `reg` (ignored for one the NIC does not have). The single-queue
    /// registers ([`REGS`]) are stored here; the others in [`Self::set_mq`], a tail call, so
    /// a tail write costs what it did before the queues.
    fn set(&self, reg: usize, val: u32) {
        match index(reg) {
            Some(i) => self.regs[i].store(val, Ordering::Release),
            None => self.set_mq(reg, val),
        }
    }

    /// [`Self::set`] past [`REGS`].
    #[cold]
    #[inline(never)]
    fn set_mq(&self, reg: usize, val: u32) {
        if let Some(c) = self.cell_mq(reg) {
            c.store(val, Ordering::Release);
        }
    }

    /// The registers past [`REGS`]: the queue blocks (queue 0's as aliases), `RETA`, `RSSRK`,
    /// `MRQC`, `RXCSUM`.
    #[cold]
    #[inline(never)]
    fn cell_mq(&self, reg: usize) -> Option<&AtomicU32> {
        let blocks = QUEUE_STRIDE * MAX_RSS_QUEUES;
        let (tx, rel) = match reg {
            r if (RX_QUEUE_BLOCK..RX_QUEUE_BLOCK + blocks).contains(&r) => {
                (false, r - RX_QUEUE_BLOCK)
            }
            r if (TX_QUEUE_BLOCK..TX_QUEUE_BLOCK + blocks).contains(&r) => {
                (true, r - TX_QUEUE_BLOCK)
            }
            r if (RETA..RETA + 4 * RETA_REGS).contains(&r) && r % 4 == 0 => {
                return Some(&self.reta[(r - RETA) / 4])
            }
            r if (RSSRK..RSSRK + 4 * RSSRK_REGS).contains(&r) && r % 4 == 0 => {
                return Some(&self.rssrk[(r - RSSRK) / 4])
            }
            MRQC => return Some(&self.mrqc),
            RXCSUM => return Some(&self.rxcsum),
            _ => return None,
        };
        let (n, off) = (rel / QUEUE_STRIDE, rel % QUEUE_STRIDE);
        if n == 0 {
            let r = if tx { TDBAL } else { RDBAL } + off;
            return index(r).map(|i| &self.regs[i]);
        }
        let slots = if tx { 7..QUEUE_REGS.len() } else { 0..7 };
        let k = QUEUE_REGS[slots.clone()].iter().position(|&o| o == off)?;
        Some(&self.queues[n - 1][slots.start + k])
    }

    /// Where queue `n`'s ring register `reg` (a queue-0 offset: [`RDBAL`] … [`RXDCTL`],
    /// [`TDBAL`] … [`TXDCTL`]) is: `reg` itself for queue 0.
    fn queue_reg(n: usize, reg: usize) -> usize {
        match n {
            0 => reg,
            _ if reg >= TDBAL => TX_QUEUE_BLOCK + QUEUE_STRIDE * n + (reg - TDBAL),
            _ => RX_QUEUE_BLOCK + QUEUE_STRIDE * n + (reg - RDBAL),
        }
    }

    /// Queue `n`'s ring register `reg`, given by its queue-0 offset ([`RDBAL`] … [`RXDCTL`],
    /// [`TDBAL`] … [`TXDCTL`]); 0 for one the NIC does not have.
    pub fn get_queue(&self, n: usize, reg: usize) -> u32 {
        self.get(Self::queue_reg(n, reg))
    }

    /// The RSS settings when RSS is on (see the module docs): `MRQC`, the key, the table.
    fn rss(&self) -> Option<(u32, [u8; 40], [u8; 128])> {
        let mrqc = self.mrqc.load(Ordering::Acquire);
        let on = mrqc & MRQC_RSS_MASK == MRQC_RSS
            && self.rxcsum.load(Ordering::Acquire) & RXCSUM_PCSD != 0
            && self.get(SRRCTL) & SRRCTL_DESCTYPE_MASK == SRRCTL_DESCTYPE_ADV;
        if !on {
            return None;
        }
        let mut key = [0u8; 40];
        for (k, r) in key.chunks_exact_mut(4).zip(&self.rssrk) {
            k.copy_from_slice(&r.load(Ordering::Acquire).to_le_bytes());
        }
        let mut reta = [0u8; 128];
        for (e, r) in reta.chunks_exact_mut(4).zip(&self.reta) {
            e.copy_from_slice(&r.load(Ordering::Acquire).to_le_bytes());
        }
        Some((mrqc, key, reta))
    }

    /// Whether the driver reset the NIC and enabled neither ring since (or never set it up).
    pub fn is_reset(&self) -> bool {
        self.get(RCTL) & RCTL_EN == 0 && self.get(TCTL) & TCTL_EN == 0
    }
}

/// The driver's view of the register file: reads, and writes with the NIC's side effects
/// (`CTRL.RST` disables both rings and clears their registers).
pub struct SimDdRegs<'a>(pub &'a SimDdShared);

impl DdRegs for SimDdRegs<'_> {
    fn read(&self, reg: usize) -> u32 {
        self.0.reads.fetch_add(1, Ordering::Relaxed);
        self.0.get(reg)
    }
    fn write(&self, reg: usize, val: u32) {
        // One test for every register below `RCTL` (set-up only: `CTRL`, `STATUS`, `MDIC`), so
        // a tail write pays one compare, as before `MDIC` was simulated.
        if reg < RCTL {
            self.write_low(reg, val);
            return;
        }
        match reg {
            RDT => self.0.rdt_writes.fetch_add(1, Ordering::Relaxed),
            TDT => self.0.tdt_writes.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        self.0.set(reg, val);
    }
    fn link_up(&self) -> Option<bool> {
        Some(self.read(STATUS) & STATUS_LU != 0)
    }
}

/// One handle per queue pair's owner ([`crate::igb::finish_queues`]).
impl ShareRegs for SimDdRegs<'_> {
    fn share(&self) -> Self {
        SimDdRegs(self.0)
    }
}

impl SimDdRegs<'_> {
    /// A write below `RCTL`: `CTRL.RST` disables both rings and clears their registers; an
    /// `MDIC` command completes at once (`READY`; PHY reads return 0, writes are dropped).
    #[cold]
    #[inline(never)]
    fn write_low(&self, reg: usize, val: u32) {
        if reg == CTRL && val & CTRL_RST != 0 {
            for r in [
                RCTL, TCTL, RDBAL, RDBAH, RDLEN, RDH, RDT, TDBAL, TDBAH, TDLEN, TDH, TDT, RXDCTL,
                TXDCTL,
            ] {
                self.0.set(r, 0);
            }
            // Every other queue's rings (`SRRCTL` kept, as queue 0's), RSS off.
            for q in &self.0.queues {
                for (k, c) in q.iter().enumerate() {
                    if k != 3 {
                        c.store(0, Ordering::Release);
                    }
                }
            }
            for c in self.0.reta.iter().chain(&self.0.rssrk) {
                c.store(0, Ordering::Release);
            }
            self.0.mrqc.store(0, Ordering::Release);
            self.0.rxcsum.store(0, Ordering::Release);
            return;
        }
        self.0
            .set(reg, if reg == MDIC { val | MDIC_READY } else { val });
    }
}

/// The player: serves the rings the driver set up in the register file.
pub struct SimDdDevice<'a> {
    shared: &'a SimDdShared,
}

impl<'a> SimDdDevice<'a> {
    /// A player for `shared`'s rings.
    ///
    /// # Safety
    /// The ring and buffer addresses the driver writes are host memory at those addresses
    /// (identity-mapped, [`crate::sim::HostHal`] or the kernel's RAM), alive while the player
    /// serves them; nothing else plays this NIC.
    pub unsafe fn new(shared: &'a SimDdShared) -> SimDdDevice<'a> {
        SimDdDevice { shared }
    }

    /// The register file it plays (to take the link down, read counts).
    pub fn shared(&self) -> &'a SimDdShared {
        self.shared
    }

    /// Queue `q`'s ring (`bal` the queue-0 offset of its base register: [`RDBAL`] or
    /// [`TDBAL`]): its base address and descriptor count, when the unit (`ctl`'s `en`) and the
    /// ring are enabled. Queue 0 needs no `RXDCTL`/`TXDCTL.ENABLE` unless `queue_enable` (the
    /// 82574L has no such register); the others always do.
    #[inline(always)]
    fn ring(
        &self,
        q: usize,
        bal: usize,
        ctl: usize,
        en: u32,
        queue_enable: bool,
    ) -> Option<(u64, usize)> {
        let s = self.shared;
        // `RDLEN`/`TDLEN` at +0x08, `RDBAH`/`TDBAH` at +0x04, `RXDCTL`/`TXDCTL` at +0x28.
        let len = s.get_queue(q, bal + 0x08);
        if s.get(ctl) & en == 0 || len == 0 {
            return None;
        }
        if (q != 0 || queue_enable) && s.get_queue(q, bal + 0x28) & XDCTL_ENABLE == 0 {
            return None;
        }
        let base = u64::from(s.get_queue(q, bal)) | u64::from(s.get_queue(q, bal + 0x04)) << 32;
        Some((base, len as usize / 16))
    }

    /// RX descriptors the driver gave the NIC on queue 0 (from `RDH` up to `RDT`).
    pub fn rx_available(&self) -> usize {
        self.rx_available_on(0)
    }

    /// RX descriptors the driver gave the NIC on queue `q` (from its `RDH` up to its `RDT`;
    /// 0 when the queue is disabled).
    pub fn rx_available_on(&self, q: usize) -> usize {
        let Some((_, n)) = self.ring(q, RDBAL, RCTL, RCTL_EN, false) else {
            return 0;
        };
        let s = self.shared;
        let (h, t) = (s.get_queue(q, RDH) as usize, s.get_queue(q, RDT) as usize);
        (t + n - h) % n
    }

    /// Deliver `frame` `n` times, each in the buffers from `RDH` on (one buffer, or several for
    /// a frame longer than a page, `EOP` on the last); returns how many were delivered. Without
    /// RSS on queue 0 (fewer when the driver posted too few buffers); with RSS (module docs) on
    /// the queue its hash picks, each copy the queue cannot take dropped and counted
    /// ([`Self::dropped`]).
    pub fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        let Some((mrqc, key, reta)) = self.shared.rss() else {
            return self.deliver_on(0, frame, n, 0, false);
        };
        let info = rss::classify(frame, mrqc, &key);
        let q = usize::from(reta[(info.hash & 0x7F) as usize] & 0x0F);
        self.deliver_on(q, frame, n, info.first_quadword(), true)
    }

    /// The queue RSS would deliver `frame` to, and its RSS type, hash and packet type; `None`
    /// with RSS off (every frame to queue 0).
    pub fn rss_of(&self, frame: &[u8]) -> Option<(usize, rss::RssInfo)> {
        let (mrqc, key, reta) = self.shared.rss()?;
        let info = rss::classify(frame, mrqc, &key);
        Some((usize::from(reta[(info.hash & 0x7F) as usize] & 0x0F), info))
    }

    /// [`Self::deliver_rx`] on queue `q`, the EOP descriptors' first quadword `lo` (advanced
    /// layout only); `rss`: the queue must be enabled (`RXDCTL.ENABLE`) for queue 0 too.
    fn deliver_on(&mut self, q: usize, frame: &[u8], n: usize, lo: u64, rss: bool) -> usize {
        let s = self.shared;
        let Some((base, size)) = self.ring(q, RDBAL, RCTL, RCTL_EN, rss) else {
            s.dropped[q].fetch_add(n as u64, Ordering::Relaxed);
            return 0;
        };
        // The buffer size the driver set (`SRRCTL.BSIZEPACKET`, KiB), a page when unset; the
        // descriptor layout (`SRRCTL.DESCTYPE`).
        let srrctl = s.get_queue(q, SRRCTL);
        let buf = match (srrctl & SRRCTL_BSIZE_MASK) as usize {
            0 => PAGE_SIZE,
            kib => (kib * 1024).min(PAGE_SIZE),
        };
        let advanced = srrctl & SRRCTL_DESCTYPE_MASK == SRRCTL_DESCTYPE_ADV;
        let per = frame.len().div_ceil(buf).max(1);
        let mut done = 0;
        while done < n && self.rx_available_on(q) >= per {
            let mut head = s.get_queue(q, RDH) as usize;
            for (k, chunk) in frame.chunks(buf).enumerate() {
                let dp = (base as usize + 16 * head) as *mut RxDesc;
                // SAFETY: per `new`'s contract the ring is live host memory; `head` is a
                // descriptor the driver gave the NIC (before `RDT`).
                let mut d = unsafe { dp.read_volatile() };
                // SAFETY: the buffer is a page the driver posted, ours until DD is written.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        chunk.as_ptr(),
                        d.addr as usize as *mut u8,
                        chunk.len(),
                    )
                };
                let eop = k + 1 == per;
                if advanced {
                    // Advanced write-back: first quadword (RSS type, packet type, RSS hash) on
                    // the EOP descriptor with RSS, else 0; second: extended status `DD | EOP`
                    // (31:0, no error), length (47:32), VLAN 0.
                    let hi = u64::from(STA_DD | if eop { RXSTA_EOP } else { 0 })
                        | (chunk.len() as u64) << 32;
                    let q = dp.cast::<u64>();
                    // SAFETY: as above; the write-back hands the descriptor to the driver.
                    unsafe {
                        q.write_volatile(if eop { lo } else { 0 });
                        q.add(1).write_volatile(hi);
                    }
                } else {
                    d.length = chunk.len() as u16;
                    d.errors = 0;
                    d.status = STA_DD | if eop { RXSTA_EOP } else { 0 };
                    // SAFETY: as above; the write-back hands the descriptor to the driver.
                    unsafe { dp.write_volatile(d) };
                }
                head = (head + 1) % size;
            }
            s.set(SimDdShared::queue_reg(q, RDH), head as u32);
            done += 1;
        }
        s.delivered.fetch_add(done as u64, Ordering::Relaxed);
        if done < n {
            s.dropped[q].fetch_add((n - done) as u64, Ordering::Relaxed);
        }
        done
    }

    /// Send every frame posted on queue 0's TX ring (`TDH` up to `TDT`): `f` sees each frame's
    /// bytes (the buffers of its descriptors up to `EOP`, gathered); each descriptor gets `DD`.
    /// Returns the frames sent.
    pub fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.complete_tx_on(0, f)
    }

    /// [`Self::complete_tx`] on queue `q`'s TX ring (nothing when it is disabled).
    pub fn complete_tx_on(&mut self, q: usize, mut f: impl FnMut(&[u8])) -> usize {
        let Some((base, size)) = self.ring(q, TDBAL, TCTL, TCTL_EN, false) else {
            return 0;
        };
        let s = self.shared;
        let mut buf = [0u8; TX_GATHER_MAX];
        let (mut at, mut frames) = (0, 0);
        let mut head = s.get_queue(q, TDH) as usize;
        let tail = s.get_queue(q, TDT) as usize;
        while head != tail {
            let dp = (base as usize + 16 * head) as *mut TxDesc;
            // SAFETY: a descriptor the driver gave the NIC (before `TDT`), live host memory.
            let mut d = unsafe { dp.read_volatile() };
            let len = usize::from(d.length).min(TX_GATHER_MAX - at);
            // SAFETY: the buffer holds `length` bytes the driver posted for sending.
            let bytes = unsafe { core::slice::from_raw_parts(d.addr as usize as *const u8, len) };
            buf[at..at + len].copy_from_slice(bytes);
            at += len;
            d.status |= STA_DD;
            // SAFETY: as above; the write-back hands the descriptor back to the driver.
            unsafe { dp.write_volatile(d) };
            head = (head + 1) % size;
            if d.cmd & TXCMD_EOP != 0 {
                f(&buf[..at]);
                at = 0;
                frames += 1;
            }
        }
        s.set(SimDdShared::queue_reg(q, TDH), head as u32);
        s.completed.fetch_add(frames as u64, Ordering::Relaxed);
        frames
    }

    /// Frames delivered so far.
    pub fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::Relaxed)
    }

    /// Frames queue `q` dropped so far: no descriptors for them, or the queue (or the receive
    /// unit) disabled.
    pub fn dropped(&self, q: usize) -> u64 {
        self.shared.dropped[q % MAX_RSS_QUEUES].load(Ordering::Relaxed)
    }

    /// Frames sent so far.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }
}

pub mod rss;

#[cfg(test)]
mod tests;
