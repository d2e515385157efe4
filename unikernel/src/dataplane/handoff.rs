//! Cross-core hand-off of frames: a typed record ([`Handoff`]) through a bounded lock-free
//! multi-producer single-consumer ring ([`HandoffRing`]), encoded and decoded here only.
//!
//! Uses: `xcore=on` (frames received on one core leave through another core's TX queue) and,
//! in router mode on several cores, frames for the management plane handed to core 0.

use super::page::{PageBuf, RawPage};
use mm::page_pool::RecycleRing;
use mm::Pfn;

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

/// Where the record's length, port and owning pool travel: the page's virtio-net header area,
/// which TX rewrites anyway (`len` little-endian u16 at 0, `port` at 2, `pool` little-endian
/// u32 at 4).
const LEN_OFF: usize = 0;
const PORT_OFF: usize = 2;
const POOL_OFF: usize = 4;
const _: () = assert!(POOL_OFF + 4 <= drivers::virtio_net::NET_HDR_LEN);

impl Handoff {
    fn encode(self) -> Pfn {
        let Handoff { page, len, port } = self;
        let raw = page.into_raw();
        // SAFETY: we own the page (the token was just given up, not yet pushed); the header
        // area [0, NET_HDR_LEN) is part of the page.
        unsafe {
            let h = raw.pfn.addr() as usize as *mut u8;
            h.add(LEN_OFF).cast::<[u8; 2]>().write(len.to_le_bytes());
            h.add(PORT_OFF).write(port);
            h.add(POOL_OFF)
                .cast::<[u8; 4]>()
                .write(raw.pool.to_le_bytes());
        }
        raw.pfn
    }

    /// # Safety
    /// `pfn` was popped from a [`HandoffRing`]: `encode` wrote it and its sender gave it up.
    unsafe fn decode(pfn: Pfn) -> Handoff {
        // SAFETY: per the contract the page is ours and its header area holds the record.
        let (len, port, pool) = unsafe {
            let h = pfn.addr() as usize as *const u8;
            (
                u16::from_le_bytes(h.add(LEN_OFF).cast::<[u8; 2]>().read()),
                h.add(PORT_OFF).read(),
                u32::from_le_bytes(h.add(POOL_OFF).cast::<[u8; 4]>().read()),
            )
        };
        Handoff {
            // SAFETY: per the contract; `pool` is the owner `encode` recorded.
            page: unsafe { PageBuf::from_raw(RawPage { pfn, pool }) },
            len,
            port,
        }
    }
}

/// A bounded MPSC ring of [`Handoff`]s: any core pushes, the owning core pops.
pub struct HandoffRing {
    ring: RecycleRing,
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
            ring: RecycleRing::new(),
        }
    }

    /// Hand `h` over; a full ring gives it back.
    pub fn push(&self, h: Handoff) -> Result<(), Handoff> {
        let pfn = h.encode();
        self.ring.push(pfn).map_err(|pfn| {
            // SAFETY: a refused push leaves the page with us, as `encode` wrote it.
            unsafe { Handoff::decode(pfn) }
        })
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Take up to `max` records (owning core only), in order, each given to `f`. Returns how
    /// many.
    pub fn pop_each(&self, max: usize, mut f: impl FnMut(Handoff)) -> usize {
        let mut got = [Pfn(0); 64];
        let want = max.min(got.len());
        let n = self.ring.pop_batch(&mut got[..want]);
        for &pfn in &got[..n] {
            // SAFETY: popped from this ring: pushed by `push` (encoded, given up by its sender).
            f(unsafe { Handoff::decode(pfn) });
        }
        n
    }
}
