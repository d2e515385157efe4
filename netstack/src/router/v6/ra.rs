//! Router Advertisements (RFC 4861 §6.2), off by default (`ra6=on`): the router advertises
//! each port's link to all-nodes from the port's link-local address: its prefix (on-link, and
//! for stateless autoconfiguration on a /64), its MTU, and itself as a default router. The
//! first [`MAX_INITIAL_RTR_ADVERTISEMENTS`] go out [`MAX_INITIAL_RTR_ADVERT_INTERVAL_NS`]
//! apart, then one every [`MIN_RTR_ADV_INTERVAL_NS`]..[`MAX_RTR_ADV_INTERVAL_NS`] (a spread
//! drawn from the clock, §6.2.4); a Router Solicitation brings the next one forward, at most one
//! per [`MIN_DELAY_BETWEEN_RAS_NS`] (§6.2.6: answered to all-nodes, as this router does not
//! unicast its answers). Sent through [`Router6::poll`] as [`Event6::Advertise`].

use super::*;

/// RFC 4861 §10 `MAX_INITIAL_RTR_ADVERTISEMENTS`.
pub const MAX_INITIAL_RTR_ADVERTISEMENTS: u8 = 3;
/// RFC 4861 §10 `MAX_INITIAL_RTR_ADVERT_INTERVAL`: 16 s.
pub const MAX_INITIAL_RTR_ADVERT_INTERVAL_NS: u64 = 16_000_000_000;
/// RFC 4861 §6.2.1 `MaxRtrAdvInterval`'s default: 600 s.
pub const MAX_RTR_ADV_INTERVAL_NS: u64 = 600_000_000_000;
/// RFC 4861 §6.2.1 `MinRtrAdvInterval`'s default, 0.33 × the maximum: 198 s.
pub const MIN_RTR_ADV_INTERVAL_NS: u64 = 198_000_000_000;
/// RFC 4861 §10 `MIN_DELAY_BETWEEN_RAS`: 3 s.
pub const MIN_DELAY_BETWEEN_RAS_NS: u64 = 3_000_000_000;
/// RFC 4861 §6.2.1 `AdvDefaultLifetime`'s default, 3 × `MaxRtrAdvInterval`: 1,800 s.
pub const ROUTER_LIFETIME_S: u16 = 1800;

/// When each port's next advertisement is due, the last one went, and the initial ones left.
#[derive(Copy, Clone, Debug)]
pub(super) struct RaState {
    next_ns: [u64; MAX_PORTS6],
    last_ns: [Option<u64>; MAX_PORTS6],
    initial_left: [u8; MAX_PORTS6],
}

impl<H: Copy, const N: usize, const Q: usize> Router6<'_, H, N, Q> {
    /// With Router Advertisements on its ports (`on`), the first at its first [`Router6::poll`].
    pub fn with_ra(mut self, on: bool) -> Self {
        self.ra = on.then_some(RaState {
            next_ns: [0; MAX_PORTS6],
            last_ns: [None; MAX_PORTS6],
            initial_left: [MAX_INITIAL_RTR_ADVERTISEMENTS; MAX_PORTS6],
        });
        self
    }

    /// A Router Solicitation arrived on `port` at `now_ns`: the next advertisement there no
    /// later than [`MIN_DELAY_BETWEEN_RAS_NS`] after the last one (or at once).
    pub(super) fn solicited(&mut self, port: usize, now_ns: u64) {
        if let Some(ra) = self.ra.as_mut() {
            let earliest = ra.last_ns[port].map_or(now_ns, |t| t + MIN_DELAY_BETWEEN_RAS_NS);
            ra.next_ns[port] = ra.next_ns[port].min(earliest.max(now_ns));
        }
    }

    /// The advertisement due on the first port whose time has come, written into `out`
    /// (an Ethernet frame to all-nodes), and the next one scheduled.
    pub(super) fn advertise(&mut self, now_ns: u64, out: &mut [u8]) -> Option<Event6<H>> {
        let ra = self.ra.as_mut()?;
        let p = (0..self.nports).find(|&p| now_ns >= ra.next_ns[p])?;
        let interval = if ra.initial_left[p] > 1 {
            ra.initial_left[p] -= 1;
            MAX_INITIAL_RTR_ADVERT_INTERVAL_NS
        } else {
            ra.initial_left[p] = 0;
            // A spread over [min, max) from the clock's low bits and the port (§6.2.4 asks for
            // a uniformly distributed random value; the router has no other randomness).
            let span = MAX_RTR_ADV_INTERVAL_NS - MIN_RTR_ADV_INTERVAL_NS;
            let mix = (now_ns ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .wrapping_mul(0xff51_afd7_ed55_8ccd);
            MIN_RTR_ADV_INTERVAL_NS + (mix >> 11) % span
        };
        ra.next_ns[p] = now_ns + interval;
        ra.last_ns[p] = Some(now_ns);
        let port = self.ports[p];
        let info = ndp::RaInfo {
            prefix: port.addr.addr & port.addr.mask(),
            len: port.addr.len,
            mtu: port.mtu,
            lifetime_s: ROUTER_LIFETIME_S,
        };
        let Some(n) = out
            .get_mut(ETH_HDR_LEN..)
            .and_then(|b| ndp::build_ra(b, self.link_local[p], port.mac, &info))
        else {
            self.counters.no_buffer += 1;
            return None;
        };
        out[ETH_DST].copy_from_slice(&ndp::multicast_mac(ALL_NODES).0);
        out[ETH_SRC].copy_from_slice(&port.mac.0);
        out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        self.counters.ra_sent += 1;
        Some(Event6::Advertise {
            port: p as u8,
            len: ETH_HDR_LEN + n,
        })
    }
}
