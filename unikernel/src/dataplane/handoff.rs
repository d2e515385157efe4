//! Cross-core hand-off of frames: a typed record ([`Handoff`]) through a bounded lock-free
//! multi-producer single-consumer ring ([`HandoffRing`], `mm`'s generic `MpscRing`), converted
//! to and from its raw form here only.
//!
//! Uses: `xcore=on` (frames received on one core leave through another core's TX queue) and,
//! in router mode on several cores, frames for the management plane handed to core 0 (a frame
//! of several pages, e.g. a jumbo ping, with all its pages: one record owns them as a unit).

use super::page::{PageBuf, RawPage};
use drivers::nic::MAX_FRAME_PAGES;
use mm::ptr_ring::MpscRing;
use mm::Pfn;

/// Slots of each hand-off ring (a power of two): a whole burst of every port of a core fits.
pub const HANDOFF_SLOTS: usize = 256;

/// Most pages after the first a hand-off carries: a frame is at most
/// [`MAX_FRAME_PAGES`] pages.
pub const HANDOFF_REST: usize = MAX_FRAME_PAGES - 1;

/// The pages after the first of a handed-off frame, in frame order.
pub type RestPages = heapless::Vec<PageBuf, HANDOFF_REST>;

/// One frame handed to another core: its pages, the frame length in bytes and the local
/// output port (0 or 1 of the receiving core's pair). Owns every page; the receiver hands each
/// on or recycles it ([`Handoff::into_pages`]).
#[must_use = "a hand-off owns its pages"]
#[derive(Debug)]
pub struct Handoff {
    /// The page holding the frame (its first bytes, after the NIC's header area, `Nic::FRAME_OFFSET`).
    pub page: PageBuf,
    /// A frame of several pages: the others, in order, each holding frame bytes from offset 0
    /// (every page but the last full), all owned by `page`'s pool. Empty for a one-page frame.
    pub rest: RestPages,
    /// Frame length in bytes (at most a page's [`super::page::frame_room`] when `rest` is empty).
    pub len: u16,
    /// Output port on the receiving core (0 or 1), or the port a management frame came in on,
    /// or for a network function's hand-off (`nf::Ctx::hand_off`) the port it came in on.
    pub port: u8,
    /// A network function's hand-off: its mark (`nf::Held::mark` on the receiving core); 0
    /// for the kernel's own hand-offs.
    pub mark: u16,
}

/// What the ring stores: the pages in their raw form (the first with its owning pool, which
/// owns the others too) and the rest of the record as is.
#[derive(Copy, Clone, Debug)]
struct Record {
    raw: RawPage,
    rest: [Pfn; HANDOFF_REST],
    nrest: u8,
    len: u16,
    port: u8,
    mark: u16,
}

impl Handoff {
    /// A one-page frame of `len` bytes in `page` for `port`.
    pub fn one(page: PageBuf, len: u16, port: u8) -> Handoff {
        Handoff {
            page,
            rest: RestPages::new(),
            len,
            port,
            mark: 0,
        }
    }

    /// Every page of the frame, in order (to recycle them or hand them on).
    pub fn into_pages(self) -> impl Iterator<Item = PageBuf> {
        core::iter::once(self.page).chain(self.rest)
    }

    fn encode(self) -> Record {
        let Handoff {
            page,
            rest,
            len,
            port,
            mark,
        } = self;
        let mut r = Record {
            raw: page.into_raw(),
            rest: [Pfn(0); HANDOFF_REST],
            nrest: rest.len() as u8,
            len,
            port,
            mark,
        };
        for (slot, p) in r.rest.iter_mut().zip(rest) {
            debug_assert_eq!(p.pool(), r.raw.pool, "a frame's pages share one pool");
            *slot = p.into_raw().pfn;
        }
        r
    }

    /// # Safety
    /// `r` was made by `encode` and its pages given up by its sender: it comes out of a
    /// [`HandoffRing`] (popped, or refused by a push).
    unsafe fn decode(r: Record) -> Handoff {
        let mut rest = RestPages::new();
        for &pfn in &r.rest[..usize::from(r.nrest).min(HANDOFF_REST)] {
            let raw = RawPage {
                pfn,
                pool: r.raw.pool,
            };
            // SAFETY: per the contract: the sender gave the page up with the record; `encode`
            // stored only pages of the first page's pool. At most HANDOFF_REST: fits.
            let _ = rest.push(unsafe { PageBuf::from_raw(raw) });
        }
        Handoff {
            // SAFETY: per the contract: the sender gave the page up with the record.
            page: unsafe { PageBuf::from_raw(r.raw) },
            rest,
            len: r.len,
            port: r.port,
            mark: r.mark,
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
                pfn: Pfn(0),
                pool: mm::NO_POOL,
            },
            rest: [Pfn(0); HANDOFF_REST],
            nrest: 0,
            len: 0,
            port: 0,
            mark: 0,
        }; BATCH];
        let n = self.ring.pop_batch(&mut got[..max.min(BATCH)]);
        for &r in &got[..n] {
            // SAFETY: popped from this ring: pushed by `push`, its page given up by the sender.
            f(unsafe { Handoff::decode(r) });
        }
        n
    }
}
