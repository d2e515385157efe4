//! How a fused burst holds its network function ([`NfHandle`]): by reference, by value for a
//! stateless NF ([`Stateless`]), or behind a per-egress-port frame cap ([`Capped`]: ports of
//! different MTUs, a port whose link is down). The burst (`nf::ops`) is generic over it, so
//! each is its own monomorphised loop and the cap test exists only where it is needed.

use super::NetworkFunction;
use core::num::NonZeroUsize;
use netstack::config::PORTS;
use netstack::DropReason;

/// How a burst holds its network function: by reference (`&mut F`: the NF's state lives on
/// across bursts), or by value for a stateless `Copy` NF ([`Stateless`]: the stock `io` and
/// `l2`), whose constants then live in the burst's ops like any local instead of being read
/// again from the NF's memory after each frame's stores.
pub(crate) trait NfHandle {
    /// The network function.
    type Nf: NetworkFunction;
    /// What one burst holds.
    type Burst<'b>: NfHandle<Nf = Self::Nf>
    where
        Self: 'b;
    /// The network function, to run it.
    fn nf(&mut self) -> &mut Self::Nf;
    /// What one burst holds (a reborrow, or a copy).
    fn for_burst(&mut self) -> Self::Burst<'_>;
    /// Whether the burst checks a forwarded frame's length against [`NfHandle::tx_cap`]
    /// ([`Capped`]); `false` compiles the check out.
    const CAPPED: bool = false;
    /// The longest frame (bytes) the burst may send out of local port `egress` (with
    /// [`NfHandle::CAPPED`]).
    #[inline(always)]
    fn tx_cap(&self, _egress: usize) -> usize {
        usize::MAX
    }
    /// Why a frame over [`NfHandle::tx_cap`] is dropped on `egress` (cold).
    fn cap_reason(&self, _egress: usize) -> DropReason {
        DropReason::OverMtu
    }
}

impl<F: NetworkFunction> NfHandle for &mut F {
    type Nf = F;
    type Burst<'b>
        = &'b mut F
    where
        Self: 'b;
    #[inline(always)]
    fn nf(&mut self) -> &mut F {
        self
    }
    #[inline(always)]
    fn for_burst(&mut self) -> &mut F {
        self
    }
}

/// A network function whose `process` changes nothing in it (the stock `io` and `l2`): each
/// burst runs a copy. Anything a copy changes is lost when its burst ends.
#[derive(Copy, Clone)]
pub(crate) struct Stateless<F>(pub(crate) F);

impl<F: NetworkFunction + Copy> NfHandle for Stateless<F> {
    type Nf = F;
    type Burst<'b>
        = Stateless<F>
    where
        Self: 'b;
    #[inline(always)]
    fn nf(&mut self) -> &mut F {
        &mut self.0
    }
    #[inline(always)]
    fn for_burst(&mut self) -> Stateless<F> {
        *self
    }
}

/// An NF on a pair with a cap on what a port takes (`Core::tx_cap`: the ports' MTUs differ,
/// or a port's link is down): a frame it forwards longer than the egress port takes is
/// dropped and counted `over_mtu` (or `link_down`) on that port. The poll iteration chooses it
/// once (`Core::tx_capped`), so only such pairs run the length test: a second instantiation of
/// the fused loops.
pub(crate) struct Capped<H> {
    inner: H,
    /// Per egress port, the longest frame it takes (bytes; `usize::MAX`: no cap).
    caps: [usize; PORTS],
    /// Per egress port, its link is down (its cap 1 byte): drops counted `link_down`.
    down: [bool; PORTS],
}

impl<H> Capped<H> {
    /// `inner` toward ports of frame caps `caps` (`Core::tx_cap`) whose links are down
    /// where `down` says (`Core::link_down`).
    #[inline(always)]
    pub(crate) fn new(
        inner: H,
        caps: [Option<NonZeroUsize>; PORTS],
        down: [bool; PORTS],
    ) -> Capped<H> {
        Capped {
            inner,
            caps: caps.map(|c| c.map_or(usize::MAX, NonZeroUsize::get)),
            down,
        }
    }
}

impl<H: NfHandle> NfHandle for Capped<H> {
    type Nf = H::Nf;
    type Burst<'b>
        = Capped<H::Burst<'b>>
    where
        Self: 'b;
    #[inline(always)]
    fn nf(&mut self) -> &mut H::Nf {
        self.inner.nf()
    }
    #[inline(always)]
    fn for_burst(&mut self) -> Self::Burst<'_> {
        Capped {
            inner: self.inner.for_burst(),
            caps: self.caps,
            down: self.down,
        }
    }
    const CAPPED: bool = true;
    #[inline(always)]
    fn tx_cap(&self, egress: usize) -> usize {
        self.caps[egress]
    }
    fn cap_reason(&self, egress: usize) -> DropReason {
        if self.down[egress] {
            DropReason::LinkDown
        } else {
            DropReason::OverMtu
        }
    }
}
