//! [`MgmtSteer`]: the kernel's management-plane steering in front of any network function, so
//! the management address (console over TCP, `/metrics`, `PUT` of the NF's files) answers
//! whatever the NF: frames for it go to the management plane ([`Verdict::ToMgmt`]), every
//! other frame to the NF. The kernel puts it in front only on a core whose port pair carries
//! a management address, choosing per poll iteration, so an NF without one pays nothing.

use super::ops::Capped;
use super::{Ctx, NetworkFunction, Packet, Verdict};
use crate::dataplane::percore::{Core, Platform};
use core::net::Ipv4Addr;
use netstack::wire::{ARP_TPA, ETHERTYPE, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_HDR_LEN, IPV4_DST};

/// `N` with the management address `addr` of local port `port` steered off: on that port, an
/// ARP frame whose target protocol address is `addr` (RFC 826: requests for it, replies to
/// it) and an IPv4 packet to `addr` are [`Verdict::ToMgmt`]; everything else is `N`'s. Its
/// [`NetworkFunction::NAME`] and constants are `N`'s (it may take frames: `TAKES` is true).
/// Frames of several pages (jumbo MTU) for the address are dropped (`too_big`), as any
/// `ToMgmt` of such a frame.
#[derive(Copy, Clone, Debug)]
pub struct MgmtSteer<N> {
    inner: N,
    port: usize,
    addr: [u8; 4],
}

impl<N> MgmtSteer<N> {
    /// `inner` behind the management address `addr` on local port `port` (0 or 1).
    pub fn new(inner: N, port: usize, addr: Ipv4Addr) -> MgmtSteer<N> {
        MgmtSteer {
            inner,
            port,
            addr: addr.octets(),
        }
    }

    /// The network function behind the steering.
    pub fn inner(&mut self) -> &mut N {
        &mut self.inner
    }
}

/// Whether the Ethernet frame `frame` is for the IPv4 address `addr`: ARP with target protocol
/// address `addr` (RFC 826), or IPv4 with destination `addr` (RFC 791 §3.1). A frame too short
/// to hold the field is not.
#[inline(always)]
pub fn for_address(frame: &[u8], addr: [u8; 4]) -> bool {
    let field = match frame.get(ETHERTYPE) {
        Some(t) if t == ETHERTYPE_ARP.to_be_bytes() => ARP_TPA,
        Some(t) if t == ETHERTYPE_IPV4.to_be_bytes() => IPV4_DST,
        _ => return false,
    };
    frame.get(ETH_HDR_LEN + field.start..ETH_HDR_LEN + field.end) == Some(&addr[..])
}

impl<N: NetworkFunction> NetworkFunction for MgmtSteer<N> {
    const NAME: &'static str = N::NAME;
    const MIN_FRAME: usize = N::MIN_FRAME;
    const EVERY_BURST: bool = N::EVERY_BURST;
    const TAKES: bool = true;
    const CLOCK: bool = N::CLOCK;
    const HANDS_OFF: bool = N::HANDS_OFF;
    const COUNTERS: &'static [super::CounterDef] = N::COUNTERS;

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.in_port() == self.port && for_address(pkt.head(), self.addr) {
            return Verdict::ToMgmt;
        }
        self.inner.process(pkt)
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.inner.end_of_burst(ctx);
    }

    fn handed<P: Platform>(&mut self, h: super::Held, ctx: &mut Ctx<'_, P>) {
        self.inner.handed(h, ctx);
    }

    fn tx_refused(&mut self) {
        self.inner.tx_refused();
    }

    fn keep_lost(&mut self, mark: u16) {
        self.inner.keep_lost(mark);
    }

    fn counters(&self, out: &mut super::CounterValues) {
        self.inner.counters(out);
    }

    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.inner.tick(ctx);
    }

    fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.inner.release_all(ctx);
    }
}

impl<P: Platform> Core<P> {
    /// [`Core::poll_nf`] on a core whose pair carries the management address `addr` (local
    /// port `port`): the kernel's steering ([`MgmtSteer`]) in front of `nf`, and on core 0 the
    /// frames other cores handed over first.
    #[inline(never)]
    pub(crate) fn poll_nf_steered<F: NetworkFunction>(
        &mut self,
        nf: &mut F,
        port: usize,
        addr: Ipv4Addr,
    ) -> usize {
        let synced = self.mgmt_sync();
        synced + self.poll_nf_body(&mut MgmtSteer::new(nf, port, addr))
    }

    /// [`Core::poll_nf`] on a pair whose ports' MTUs differ: the NF behind [`Capped`] (and the
    /// management steering, if any). Out of line: pairs of equal MTUs keep their code.
    #[cold]
    #[inline(never)]
    pub(crate) fn poll_nf_capped<F: NetworkFunction>(&mut self, nf: &mut F) -> usize {
        let (caps, down) = (self.tx_cap, self.link_down);
        match self.mgmt.steer {
            None => self.poll_nf_body(Capped::new(nf, caps, down)),
            Some((port, addr)) => {
                let synced = self.mgmt_sync();
                let mut steered = MgmtSteer::new(nf, port, addr);
                synced + self.poll_nf_body(Capped::new(&mut steered, caps, down))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::for_address;

    fn frame(ethertype: u16, at: usize, addr: [u8; 4], len: usize) -> std::vec::Vec<u8> {
        let mut f = std::vec![0u8; len];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        if at + 4 <= len {
            f[at..at + 4].copy_from_slice(&addr);
        }
        f
    }

    #[test]
    fn arp_target_and_ipv4_destination_are_for_the_address() {
        let me = [10, 0, 0, 1];
        // ARP: target protocol address at 14 + 24; IPv4: destination at 14 + 16.
        assert!(for_address(&frame(0x0806, 38, me, 42), me));
        assert!(for_address(&frame(0x0800, 30, me, 60), me));
        assert!(!for_address(&frame(0x0806, 38, [10, 0, 0, 2], 42), me));
        assert!(
            !for_address(&frame(0x0800, 26, me, 60), me),
            "source, not destination"
        );
        assert!(!for_address(&frame(0x86dd, 38, me, 60), me), "IPv6");
        // Too short to hold the field: not for us, no panic.
        assert!(!for_address(&frame(0x0806, 38, me, 40), me));
        assert!(!for_address(&frame(0x0800, 30, me, 33), me));
        assert!(!for_address(&[0u8; 13], me));
    }
}
