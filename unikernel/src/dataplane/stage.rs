//! [`TxStage`]: frames staged for TX during a burst, per local port (flushed by `tx`).

use super::page::{PageBuf, RawPage};
use drivers::nic::{TxBuf, TxOwner};
use mm::Pfn;
use netstack::config::{MAX_BURST, PORTS};

/// Frames staged for TX, per local port. The stage owns the staged pages (as raw frame
/// numbers, in the driver's [`TxBuf`] form so a flush hands them over without a copy).
pub struct TxStage {
    pub(crate) bufs: [[TxBuf; MAX_BURST]; PORTS],
    pub(crate) n: [usize; PORTS],
    /// Frame bytes staged per port (counted as `tx_bytes` for what the ring takes).
    pub(crate) bytes: [u64; PORTS],
}

impl Default for TxStage {
    fn default() -> Self {
        TxStage {
            bufs: [[TxBuf {
                pfn: Pfn(0),
                len: 0,
                owner: TxOwner::new(0),
            }; MAX_BURST]; PORTS],
            n: [0; PORTS],
            bytes: [0; PORTS],
        }
    }
}

impl TxStage {
    /// Take every staged page back (quit), each given to `f`.
    pub fn take_all(&mut self, mut f: impl FnMut(PageBuf)) {
        for q in 0..PORTS {
            self.bytes[q] = 0;
            for b in &self.bufs[q][..core::mem::take(&mut self.n[q])] {
                // SAFETY: staged pages are the stage's (given with `into_raw` in `stage_tx`)
                // and never reached a ring.
                f(unsafe { PageBuf::from_raw(RawPage::sent(b.pfn, b.owner)) });
            }
        }
    }
}
