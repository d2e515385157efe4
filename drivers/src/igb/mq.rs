//! A queue pair per core on the 82576 with receive-side scaling (issue 41, item 3).
//!
//! The port is set up once, on the boot CPU ([`finish_queues`]): reset, MAC, link, `RCTL` and
//! `TCTL` as for one queue, then RSS: the 40-byte key in `RSSRK`, the 128-entry redirection
//! table in `RETA`, `RXCSUM.PCSD` and `MRQC` (RSS on, the hash fields below). Each queue pair
//! `n` is then a [`DdNic`] of its own over a [`QueueRegs`]: its own rings and page_pool (the
//! core's), no lock, nothing shared but the BAR, through which its owner writes only queue
//! `n`'s ring registers (`RDT`, `TDT`) once set-up is done.
//!
//! Register offsets (82576 datasheet §8.10 and §8.12; Linux's `e1000_regs.h` `E1000_RDBAL(n)`
//! and friends; QEMU's `hw/net/igb_regs.h`): queue `n`'s receive block is at
//! `0x0C000 + 0x40·n` (`RDBAL` +0x00, `RDBAH` +0x04, `RDLEN` +0x08, `SRRCTL` +0x0C, `RDH`
//! +0x10, `RDT` +0x18, `RXDCTL` +0x28), its transmit block at `0x0E000 + 0x40·n` (`TDBAL`,
//! `TDBAH`, `TDLEN`, `TDH` +0x10, `TDT` +0x18, `TXDCTL` +0x28). Queue 0 keeps the
//! 8254x-compatible aliases at 0x02800/0x03800 the single-queue driver has always used (Linux
//! uses the aliases for queues 0–3); queues 1–15 use the blocks above, which QEMU's model
//! implements for all 16 queues.
//!
//! How QEMU's model (hw/net/igb_core.c, `igb_receive_assign`) picks the RX queue without VMDq
//! (`MRQC` bit 0 clear): when `MRQC[1:0]` = 10b (RSS), `RXCSUM.PCSD` is set and the descriptors
//! are advanced, it hashes the frame (Toeplitz over the fields `MRQC` selects, keyed by
//! `RSSRK`) and delivers it to the queue `RETA[hash & 0x7F] & 0x0F`; a queue whose
//! `RXDCTL.ENABLE` is clear, or with no free descriptor, drops it. Without RSS every frame goes
//! to queue 0.

use super::{attach_queue, link_and_flow_control, Igb, IgbConfig, IgbError, Starting};
use crate::ddnic::{DdRegs, RDBAL, RXDCTL, TDBAL, TXDCTL};
use crate::e1000e::{MmioRegs, RXCSUM};
use crate::nic::DriverStats;
use virtio_drivers::Hal;

/// The 82576's queue pairs: 16 (datasheet §7.1.2.10; QEMU's `IGB_NUM_QUEUES`; the `RETA`
/// entries' low 4 bits). Linux's igb uses at most 8 for RSS on this chip
/// (`IGB_MAX_RX_QUEUES`); QEMU's model delivers to all 16.
pub const MAX_RSS_QUEUES: usize = 16;

/// Redirection Table (§8.10, 0x05C00): 32 registers, each four one-byte entries (entry
/// `4r + i` in bits `8i+7:8i` of register `r`); an entry holds a queue number (bits 3:0).
pub const RETA: usize = 0x5C00;
/// RSS Random Key (§8.10, 0x05C80): 10 registers, key byte `4r + i` in bits `8i+7:8i` of
/// register `r` (QEMU reads the registers as the key's bytes in order).
pub const RSSRK: usize = 0x5C80;
/// `RXCSUM.PCSD` (bit 13): the descriptor's checksum field carries the RSS hash; QEMU's model
/// hashes only with it set (`igb_rss_enabled`). No checksum offload is enabled.
pub const RXCSUM_PCSD: u32 = 1 << 13;
/// `MRQC.MRQE` (bits 2:0) = 010b: RSS, no VMDq (Linux's `E1000_MRQC_ENABLE_RSS_MQ`, QEMU's
/// `E1000_MRQC_ENABLE_RSS_MQ`).
pub const MRQC_ENABLE_RSS: u32 = 0b010;
/// `MRQC`'s hash field selections (§8.10; Linux's `E1000_MRQC_RSS_FIELD_*`): IPv4 with TCP
/// ports (bit 16), IPv4 addresses (17), IPv6 addresses (20), IPv6 with TCP ports (21), IPv4
/// with UDP ports (22), IPv6 with UDP ports (23). UDP ports are hashed (Linux leaves them off
/// by default: a fragmented datagram's later fragments carry no ports and may land on another
/// queue than its first; Gannet's NFs drop or pass fragments per frame, and without the ports
/// the flows between two hosts would all share a queue). QEMU's model reads TCP over IPv6
/// from bit 18 (`TcpIPv6Ex`), not 21: there such frames hash over their addresses only.
pub const MRQC_RSS_FIELDS: u32 = 1 << 16 | 1 << 17 | 1 << 20 | 1 << 21 | 1 << 22 | 1 << 23;

/// Queue `n`'s receive register block (`RDBAL(n)`, datasheet §8.10), for `n` ≥ 1.
const RX_QUEUE_BASE: usize = 0xC000;
/// Queue `n`'s transmit register block (`TDBAL(n)`, datasheet §8.12), for `n` ≥ 1.
const TX_QUEUE_BASE: usize = 0xE000;
/// Bytes between two queues' register blocks.
const QUEUE_STRIDE: usize = 0x40;

/// What RSS [`finish_queues`] programs: the queue pairs, the key and the table.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Rss {
    /// Queue pairs to bring up (1..=[`MAX_RSS_QUEUES`]); 1 leaves RSS off (`MRQC` 0).
    pub queues: usize,
    /// The Toeplitz key (`RSSRK`).
    pub key: [u8; 40],
    /// The redirection table (`RETA`): each entry a queue below `queues`.
    pub reta: [u8; 128],
}

/// A register block that can hand out more handles on itself, one per queue pair's owner
/// ([`MmioRegs::share`]).
pub trait ShareRegs: DdRegs + Sized {
    /// Another handle on the same registers.
    fn share(&self) -> Self;
}

impl ShareRegs for MmioRegs {
    fn share(&self) -> Self {
        MmioRegs::share(self)
    }
}

/// Queue pair `n`'s view of an 82576's register block: the single-queue driver's ring
/// register offsets (queue 0's aliases: `RDBAL` 0x02800 … `RXDCTL` 0x02828, `TDBAL` 0x03800 …
/// `TXDCTL` 0x03828) moved to queue `n`'s blocks; every other register as it is. Its
/// [`DdRegs::reset_device`] resets the port for queue 0 and disables queue `n` (`RXDCTL`,
/// `TXDCTL` cleared) for the others; [`DdRegs::hw_stats`] reads the port's counters for queue
/// 0 only (they clear on read: one reader), the link for every queue.
pub struct QueueRegs<R: DdRegs> {
    regs: R,
    queue: u8,
    rx: usize,
    tx: usize,
}

impl<R: DdRegs> QueueRegs<R> {
    /// Queue pair `queue` (below [`MAX_RSS_QUEUES`]; larger values are taken modulo 16) of the
    /// port behind `regs`.
    pub fn new(regs: R, queue: u8) -> Self {
        let n = usize::from(queue) % MAX_RSS_QUEUES;
        let (rx, tx) = if n == 0 {
            (RDBAL, TDBAL)
        } else {
            (
                RX_QUEUE_BASE + QUEUE_STRIDE * n,
                TX_QUEUE_BASE + QUEUE_STRIDE * n,
            )
        };
        QueueRegs {
            regs,
            queue: n as u8,
            rx,
            tx,
        }
    }

    /// The queue pair this view addresses.
    pub fn queue(&self) -> u8 {
        self.queue
    }

    /// Where register `reg` (a queue-0 ring register, or any other) is for this queue. A
    /// constant `reg` folds the range tests away: one add.
    #[inline(always)]
    fn at(&self, reg: usize) -> usize {
        if (RDBAL..RDBAL + QUEUE_STRIDE).contains(&reg) {
            self.rx + (reg - RDBAL)
        } else if (TDBAL..TDBAL + QUEUE_STRIDE).contains(&reg) {
            self.tx + (reg - TDBAL)
        } else {
            reg
        }
    }
}

impl<R: DdRegs> DdRegs for QueueRegs<R> {
    #[inline(always)]
    fn read(&self, reg: usize) -> u32 {
        self.regs.read(self.at(reg))
    }
    #[inline(always)]
    fn write(&self, reg: usize, val: u32) {
        self.regs.write(self.at(reg), val);
    }
    fn hw_stats(&self, s: &mut DriverStats) {
        if self.queue == 0 {
            self.regs.hw_stats(s);
        } else {
            s.link_up = self.regs.link_up();
        }
    }
    fn link_up(&self) -> Option<bool> {
        self.regs.link_up()
    }
    fn reset_device(&self) -> bool {
        if self.queue == 0 {
            return self.regs.reset_device();
        }
        self.write(RXDCTL, 0);
        self.write(TXDCTL, 0);
        false
    }
}

/// One queue pair of an 82576 port: the DD-bit driver with advanced descriptors on queue
/// `n`'s registers.
pub type IgbQueue<H, R> = Igb<H, QueueRegs<R>>;

/// The second half of the bring-up ([`super::finish`]'s) for `rss.queues` queue pairs: the
/// link (bounded wait), flow control off, then with more than one queue RSS (`RSSRK` from
/// `rss.key`, `RETA` from `rss.reta`, `RXCSUM.PCSD`, `MRQC` RSS with [`MRQC_RSS_FIELDS`]),
/// then each queue's rings, enabled and read back. Queue pair `n` is element `n`.
///
/// # Errors
/// [`IgbError::Queues`] (none, or more than [`MAX_RSS_QUEUES`]), [`IgbError::RetaEntry`] (an
/// entry naming a queue not brought up), checked before any register is written; the link,
/// ring memory or a queue that does not enable ([`IgbError::QueueTimeout`] naming it). On any
/// error the NIC is left reset.
pub fn finish_queues<H: Hal, R: ShareRegs>(
    mut s: Starting<R>,
    cfg: &IgbConfig,
    rss: &Rss,
    now_us: &impl Fn() -> u64,
) -> Result<heapless::Vec<IgbQueue<H, R>, MAX_RSS_QUEUES>, IgbError> {
    check(rss)?;
    let regs = link_and_flow_control(&mut s, now_us)?;
    if rss.queues > 1 {
        program_rss(&regs, rss);
    }
    let mut out = heapless::Vec::new();
    for n in 0..rss.queues {
        let q = QueueRegs::new(regs.share(), n as u8);
        match attach_queue::<H, _>(q, cfg, n as u8, now_us) {
            Ok(nic) => {
                if out.push(nic).is_err() {
                    unreachable!("at most MAX_RSS_QUEUES queues, checked above")
                }
            }
            Err(e) => {
                // The port reset before the queues' rings are freed (`out` drops after).
                regs.reset_device();
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// [`finish_queues`]'s checks of `rss`.
fn check(rss: &Rss) -> Result<(), IgbError> {
    if rss.queues == 0 || rss.queues > MAX_RSS_QUEUES {
        return Err(IgbError::Queues { asked: rss.queues });
    }
    if rss.queues > 1 {
        if let Some((index, &queue)) = rss
            .reta
            .iter()
            .enumerate()
            .find(|&(_, &q)| usize::from(q) >= rss.queues)
        {
            return Err(IgbError::RetaEntry {
                index: index as u8,
                queue,
                queues: rss.queues as u8,
            });
        }
    }
    Ok(())
}

/// Write `rss`'s key and table, then turn RSS on (`RXCSUM.PCSD`, `MRQC`): the port-wide
/// registers, once, before any queue has rings.
pub fn program_rss<R: DdRegs>(regs: &R, rss: &Rss) {
    for (r, k) in rss.key.chunks_exact(4).enumerate() {
        regs.write(RSSRK + 4 * r, u32::from_le_bytes([k[0], k[1], k[2], k[3]]));
    }
    for (r, e) in rss.reta.chunks_exact(4).enumerate() {
        regs.write(RETA + 4 * r, u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
    }
    regs.write(RXCSUM, RXCSUM_PCSD);
    regs.write(super::MRQC, MRQC_ENABLE_RSS | MRQC_RSS_FIELDS);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rss_tests;
