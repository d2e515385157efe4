//! The stock `io` and `l2` network functions: every frame leaves by the pair's other port,
//! untouched (`io`, testpmd's `io` forwarding) or with its MAC addresses rewritten (`l2`,
//! testpmd's `mac` forwarding: destination := the output port's peer, source := the output
//! port's MAC, per [`netstack::forward_frame`]).

use super::ops::{Capped, Stateless};
use super::{MgmtSteer, NetworkFunction, Packet, Verdict};
use crate::dataplane::percore::{Core, Platform};
use core::net::Ipv4Addr;
use drivers::nic::Nic;
use netstack::MacRewrite;

/// `io`: forward every frame of at least an Ethernet header out of the other port as it is.
#[derive(Copy, Clone, Debug, Default)]
pub struct Io;

impl NetworkFunction for Io {
    const NAME: &'static str = "io";
    const TAKES: bool = false;

    #[inline(always)]
    fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
        Verdict::Forward
    }
}

/// `l2` toward one output port: every frame leaves with destination := that port's peer and
/// source := that port's MAC (one 8-byte and one 4-byte store, [`MacRewrite::words`]). The
/// stock `l2` mode runs one per output port, each on the bursts that leave by its port.
#[derive(Copy, Clone, Debug)]
pub struct L2 {
    /// [`MacRewrite::words`] of the output port.
    words: (u64, u32),
}

impl L2 {
    /// The `l2` rewrite `rewrite` (the output port's MAC and its peer's); `None` if it is
    /// `io`'s (writes nothing).
    pub fn toward(rewrite: &MacRewrite) -> Option<L2> {
        Some(L2 {
            words: rewrite.words()?,
        })
    }
}

impl NetworkFunction for L2 {
    const NAME: &'static str = "l2";
    const TAKES: bool = false;

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        pkt.write_macs(self.words);
        Verdict::Forward
    }
}

impl<P: Platform> Core<P> {
    /// [`Core::poll_once`] in l2/io mode: per port, the stock NF for the frames leaving by
    /// the other port ([`L2`] with that port's rewrite, or [`Io`]), chosen once per burst so
    /// each one's loop writes the addresses or not with no per-frame test (`xcore=on` on
    /// several cores: frames handed to the next core instead; ports of different MTUs: behind
    /// [`Capped`]). The two modes' iterations are separate functions so that neither's register
    /// allocation pays for the other's code.
    #[inline(never)]
    pub(crate) fn poll_l2(&mut self) -> usize {
        // One load and test when neither `xcore=on` nor different MTUs (`l2_divert` false).
        if self.l2_divert && self.l2_diverted() {
            return self.poll_l2_diverted();
        }
        if let Some((port, addr)) = self.mgmt.steer {
            return self.poll_l2_steered::<false>(port, addr);
        }
        let t0 = P::cycles();
        // Two calls with constant ports, not a loop (see `Core::poll_nf_body`).
        let work = self.stock_burst::<0, false>() + self.stock_burst::<1, false>();
        // `Io` and `L2` take no frame (`TAKES` false): no end-of-burst hook.
        self.poll_tail(t0, work)
    }

    /// Whether this iteration leaves [`Core::poll_l2`]'s own path: `xcore=on` on several
    /// cores, or ports of different MTUs ([`Core::tx_cap`]).
    #[inline(always)]
    fn l2_diverted(&self) -> bool {
        (self.cfg.xcore && self.fabric.cores() > 1) || self.tx_capped
    }

    /// [`Core::poll_l2`] with `xcore=on` on several cores, or with [`Capped`] bursts.
    #[cold]
    #[inline(never)]
    fn poll_l2_diverted(&mut self) -> usize {
        if self.cfg.xcore && self.fabric.cores() > 1 {
            return self.poll_xcore();
        }
        if let Some((port, addr)) = self.mgmt.steer {
            return self.poll_l2_steered::<true>(port, addr);
        }
        let t0 = P::cycles();
        let work = self.stock_burst::<0, true>() + self.stock_burst::<1, true>();
        self.poll_tail(t0, work)
    }

    /// One burst from local port `RX` through the stock NF toward the other port (behind
    /// [`Capped`] with `CAP`).
    #[inline(always)]
    fn stock_burst<const RX: usize, const CAP: bool>(&mut self) -> usize {
        // An empty port costs one load here, before the NF is chosen.
        let pending = self.nics[RX].rx_pending();
        if pending == 0 {
            return 0;
        }
        match L2::toward(&self.rewrite[1 - RX]) {
            Some(l2) => self.stateless_burst::<_, RX, CAP>(l2, pending),
            None => self.stateless_burst::<_, RX, CAP>(Io, pending),
        }
    }

    /// The fused burst from local port `RX` through the `Copy` NF `nf` ([`Stateless`]), behind
    /// [`Capped`] with `CAP`.
    #[inline(always)]
    fn stateless_burst<F: NetworkFunction + Copy, const RX: usize, const CAP: bool>(
        &mut self,
        nf: F,
        pending: usize,
    ) -> usize {
        if CAP {
            let mut nf = Capped::new(Stateless(nf), self.tx_cap, self.link_down);
            self.nf_burst_pending::<_, RX>(&mut nf, pending)
        } else {
            self.nf_burst_pending::<_, RX>(&mut Stateless(nf), pending)
        }
    }

    /// [`Core::poll_l2`] on a core whose pair carries the management address `addr` (local
    /// port `port`): each burst's stock NF behind the kernel's steering ([`MgmtSteer`]), the
    /// frames it steered delivered after the bursts; on core 0 the frames other cores handed
    /// over first. A separate function: the iteration without a management address keeps
    /// its code.
    #[inline(never)]
    fn poll_l2_steered<const CAP: bool>(&mut self, port: usize, addr: Ipv4Addr) -> usize {
        let synced = self.mgmt_sync();
        let t0 = P::cycles();
        let work =
            self.steered_burst::<0, CAP>(port, addr) + self.steered_burst::<1, CAP>(port, addr);
        if !self.nf_side.taken.is_empty() {
            // What was taken is the steering's (`Io` and `L2` take nothing).
            self.nf_after_burst(&mut MgmtSteer::new(Io, port, addr));
        }
        synced + self.poll_tail(t0, work)
    }

    /// [`Core::stock_burst`] behind the management steering.
    #[inline(always)]
    fn steered_burst<const RX: usize, const CAP: bool>(
        &mut self,
        port: usize,
        addr: Ipv4Addr,
    ) -> usize {
        let pending = self.nics[RX].rx_pending();
        if pending == 0 {
            return 0;
        }
        match L2::toward(&self.rewrite[1 - RX]) {
            Some(l2) => self.stateless_burst::<_, RX, CAP>(MgmtSteer::new(l2, port, addr), pending),
            None => self.stateless_burst::<_, RX, CAP>(MgmtSteer::new(Io, port, addr), pending),
        }
    }
}
