//! Cross-core hand-off of frames: a typed record ([`Handoff`]) through a bounded lock-free
//! multi-producer single-consumer ring ([`HandoffRing`], `mm`'s generic `MpscRing`), converted
//! to and from its raw form here only.
//!
//! Uses: `xcore=on` (frames received on one core leave through another core's TX queue) and,
//! in router mode on several cores, frames for the management plane handed to core 0.

use super::page::{PageBuf, RawPage};
use mm::ptr_ring::MpscRing;

/// Slots of each hand-off ring (a power of two): a whole burst of every port of a core fits.
pub const HANDOFF_SLOTS: usize = 256;

/// One frame handed to another core: the page, the frame length in bytes and the local output
/// port (0 or 1 of the receiving core's pair).
#[must_use = "a hand-off owns its page"]
#[derive(Debug)]
pub struct Handoff {
    /// The page holding the frame after its virtio-net header area.
    pub page: PageBuf,
    /// Frame length in bytes (at most [`super::page::FRAME_ROOM`]).
    pub len: u16,
    /// Output port on the receiving core (0 or 1), or the port a management frame came in on.
    pub port: u8,
}

/// What the ring stores: the page in its raw form (frame number and owning pool) and the rest
/// of the record as is.
#[derive(Copy, Clone, Debug)]
struct Record {
    raw: RawPage,
    len: u16,
    port: u8,
}

impl Handoff {
    fn encode(self) -> Record {
        let Handoff { page, len, port } = self;
        Record {
            raw: page.into_raw(),
            len,
            port,
        }
    }

    /// # Safety
    /// `r` was made by `encode` and its page given up by its sender: it comes out of a
    /// [`HandoffRing`] (popped, or refused by a push).
    unsafe fn decode(r: Record) -> Handoff {
        Handoff {
            // SAFETY: per the contract: the sender gave the page up with the record.
            page: unsafe { PageBuf::from_raw(r.raw) },
            len: r.len,
            port: r.port,
        }
    }
}

/// A bounded MPSC ring of [`Handoff`]s: any core pushes, the owning core pops.
pub struct HandoffRing {
    ring: MpscRing<Record, HANDOFF_SLOTS>,
}

impl Default for HandoffRing {
    fn default() -> Self {
        Self::new()
    }
}

impl HandoffRing {
    /// An empty ring (`const`, for statics).
    pub const fn new() -> HandoffRing {
        HandoffRing {
            ring: MpscRing::new(),
        }
    }

    /// Hand `h` over; a full ring gives it back.
    pub fn push(&self, h: Handoff) -> Result<(), Handoff> {
        self.ring.push(h.encode()).map_err(|r| {
            // SAFETY: a refused push leaves the record, and its page, with us.
            unsafe { Handoff::decode(r) }
        })
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Take up to `max` records (owning core only), in order, each given to `f`. Returns how
    /// many.
    pub fn pop_each(&self, max: usize, mut f: impl FnMut(Handoff)) -> usize {
        const BATCH: usize = 64;
        let mut got = [Record {
            raw: RawPage {
                pfn: mm::Pfn(0),
                pool: mm::NO_POOL,
            },
            len: 0,
            port: 0,
        }; BATCH];
        let n = self.ring.pop_batch(&mut got[..max.min(BATCH)]);
        for &r in &got[..n] {
            // SAFETY: popped from this ring: pushed by `push`, its page given up by the sender.
            f(unsafe { Handoff::decode(r) });
        }
        n
    }
}
