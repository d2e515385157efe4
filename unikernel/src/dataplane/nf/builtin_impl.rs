//! The stock `io` and `l2` network functions: every frame leaves by the pair's other port,
//! untouched (`io`, testpmd's `io` forwarding) or with its MAC addresses rewritten (`l2`,
//! testpmd's `mac` forwarding: destination := the output port's peer, source := the output
//! port's MAC, per [`netstack::forward_frame`]).

use super::{NetworkFunction, Packet, Verdict};
use netstack::config::PORTS;
use netstack::MacRewrite;

/// `io`: forward every frame of at least an Ethernet header out of the other port as it is.
#[derive(Copy, Clone, Debug, Default)]
pub struct Io;

impl NetworkFunction for Io {
    const NAME: &'static str = "io";

    #[inline(always)]
    fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
        Verdict::Forward
    }
}

/// `l2`: forward every frame out of the other port with destination := that port's peer and
/// source := that port's MAC (one 8-byte and one 4-byte store, [`MacRewrite::words`]).
#[derive(Copy, Clone, Debug)]
pub struct L2 {
    /// The rewrite of a frame leaving local port `q`, as [`MacRewrite::words`].
    words: [(u64, u32); PORTS],
}

impl L2 {
    /// The `l2` rewrite for frames leaving each local port (`rewrite[q]`: port `q`'s MAC and
    /// its peer's); `None` if a rewrite is `io`'s (writes nothing).
    pub fn new(rewrite: &[MacRewrite; PORTS]) -> Option<L2> {
        Some(L2 {
            words: [rewrite[0].words()?, rewrite[1].words()?],
        })
    }
}

impl NetworkFunction for L2 {
    const NAME: &'static str = "l2";

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        let out = pkt.out_port();
        pkt.write_macs(self.words[out]);
        Verdict::Forward
    }
}
