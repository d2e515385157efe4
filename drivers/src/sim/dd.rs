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
//! 31:24 and `DD` in bit 32. One queue pair (multi-queue rings are not simulated).

use crate::ddnic::{
    DdRegs, RxDesc, TxDesc, CTRL, CTRL_RST, RAH0, RAL0, RCTL, RCTL_EN, RDBAH, RDBAL, RDH, RDLEN,
    RDT, RXDCTL, RXSTA_EOP, SRRCTL, STA_DD, TCTL, TCTL_EN, TDBAH, TDBAL, TDH, TDLEN, TDT,
    TXCMD_EOP, TXDCTL,
};
use crate::e1000e::{STATUS, STATUS_LU};
use crate::igb::{MDIC, MDIC_READY};
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
pub struct SimDdShared {
    regs: [AtomicU32; REGS.len()],
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
        index(reg).map_or(0, |i| self.regs[i].load(Ordering::Acquire))
    }

    fn set(&self, reg: usize, val: u32) {
        if let Some(i) = index(reg) {
            self.regs[i].store(val, Ordering::Release);
        }
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

    /// A ring's base address and descriptor count, when its unit is enabled.
    fn ring(
        &self,
        bal: usize,
        bah: usize,
        len: usize,
        ctl: usize,
        en: u32,
    ) -> Option<(u64, usize)> {
        let s = self.shared;
        if s.get(ctl) & en == 0 || s.get(len) == 0 {
            return None;
        }
        let base = u64::from(s.get(bal)) | u64::from(s.get(bah)) << 32;
        Some((base, s.get(len) as usize / 16))
    }

    /// RX descriptors the driver gave the NIC (from `RDH` up to `RDT`).
    pub fn rx_available(&self) -> usize {
        let Some((_, n)) = self.ring(RDBAL, RDBAH, RDLEN, RCTL, RCTL_EN) else {
            return 0;
        };
        let (h, t) = (self.shared.get(RDH) as usize, self.shared.get(RDT) as usize);
        (t + n - h) % n
    }

    /// Deliver `frame` `n` times, each in the buffers from `RDH` on (one buffer, or several for
    /// a frame longer than a page, `EOP` on the last); returns how many were delivered (fewer
    /// when the driver posted too few buffers).
    pub fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        let Some((base, size)) = self.ring(RDBAL, RDBAH, RDLEN, RCTL, RCTL_EN) else {
            return 0;
        };
        // The buffer size the driver set (`SRRCTL.BSIZEPACKET`, KiB), a page when unset; the
        // descriptor layout (`SRRCTL.DESCTYPE`).
        let srrctl = self.shared.get(SRRCTL);
        let buf = match (srrctl & SRRCTL_BSIZE_MASK) as usize {
            0 => PAGE_SIZE,
            kib => (kib * 1024).min(PAGE_SIZE),
        };
        let advanced = srrctl & SRRCTL_DESCTYPE_MASK == SRRCTL_DESCTYPE_ADV;
        let per = frame.len().div_ceil(buf).max(1);
        let mut done = 0;
        while done < n && self.rx_available() >= per {
            let mut head = self.shared.get(RDH) as usize;
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
                    // Advanced write-back: first quadword (RSS hash, packet type) 0; second:
                    // extended status `DD | EOP` (31:0, no error), length (47:32), VLAN 0.
                    let hi = u64::from(STA_DD | if eop { RXSTA_EOP } else { 0 })
                        | (chunk.len() as u64) << 32;
                    let q = dp.cast::<u64>();
                    // SAFETY: as above; the write-back hands the descriptor to the driver.
                    unsafe {
                        q.write_volatile(0);
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
            self.shared.set(RDH, head as u32);
            done += 1;
        }
        self.shared
            .delivered
            .fetch_add(done as u64, Ordering::Relaxed);
        done
    }

    /// Send every frame posted on the TX ring (`TDH` up to `TDT`): `f` sees each frame's bytes
    /// (the buffers of its descriptors up to `EOP`, gathered); each descriptor gets `DD`.
    /// Returns the frames sent.
    pub fn complete_tx(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let Some((base, size)) = self.ring(TDBAL, TDBAH, TDLEN, TCTL, TCTL_EN) else {
            return 0;
        };
        let mut buf = [0u8; TX_GATHER_MAX];
        let (mut at, mut frames) = (0, 0);
        let mut head = self.shared.get(TDH) as usize;
        let tail = self.shared.get(TDT) as usize;
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
        self.shared.set(TDH, head as u32);
        self.shared
            .completed
            .fetch_add(frames as u64, Ordering::Relaxed);
        frames
    }

    /// Frames delivered so far.
    pub fn delivered(&self) -> u64 {
        self.shared.delivered.load(Ordering::Relaxed)
    }

    /// Frames sent so far.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
