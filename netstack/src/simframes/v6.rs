//! The benchmark's IPv6 frames (`sim_ip=6`, router mode with `ip6_0=`, `ip6_1=` and an IPv6
//! `route=`): IPv6/UDP from a host on port 0's prefix to a host under the first IPv6 route,
//! through its gateway on port 1, which the router resolves by Neighbor Discovery before the
//! measured iterations (the first frame waits for it; [`next_hop_na`] answers the solicitation).

use crate::config::Config;
use crate::router::icmp6::upper_checksum6;
use crate::router::ndp::{self, NA_OVERRIDE, NA_SOLICITED};
use crate::wire::{
    ETHERTYPE, ETHERTYPE_IPV6, ETH_DST, ETH_HDR_LEN, ETH_SRC, IPPROTO_UDP, IPV6_DST, IPV6_HDR_LEN,
    IPV6_HOP_LIMIT, IPV6_NEXT_HEADER, IPV6_PAYLOAD_LEN, IPV6_SRC, IPV6_VER_TC_FLOW, UDP_CHECKSUM,
    UDP_DST, UDP_HDR_LEN, UDP_LEN, UDP_SRC,
};
use crate::MacAddr;

/// Ethernet + IPv6 + UDP header bytes: the shortest [`udp6_frame`].
pub const UDP6_HEADERS: usize = ETH_HDR_LEN + IPV6_HDR_LEN + UDP_HDR_LEN;
const _: () = assert!(UDP6_HEADERS + 4 == crate::config::MIN_SIM6_SIZE as usize);

/// Who talks to whom in the IPv6 benchmark.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Router6Addrs {
    /// Source: host `::2` of port 0's prefix (`::3` when that is the port's address).
    pub src: u128,
    /// Destination: host `::1` under the first IPv6 route's prefix.
    pub dst: u128,
    /// The next hop the router resolves on port 1: the route's gateway.
    pub gateway: u128,
    /// Port 1's global address (the gateway's Neighbor Advertisement goes to it).
    pub port1: u128,
}

/// The IPv6 benchmark's addresses for `cfg`, `None` without `ip6_0=`, `ip6_1=` or an IPv6
/// `route=`.
pub fn router6_addrs(cfg: &Config) -> Option<Router6Addrs> {
    let r = &cfg.router;
    let (p0, p1, route) = (r.ip6[0]?, r.ip6[1]?, r.routes6.first()?);
    let net0 = p0.addr & p0.mask();
    let src = if net0 | 2 == p0.addr {
        net0 | 3
    } else {
        net0 | 2
    };
    Some(Router6Addrs {
        src,
        dst: route.prefix.addr | 1,
        gateway: route.gateway,
        port1: p1.addr,
    })
}

/// Write an Ethernet + IPv6 + UDP frame of `len` bytes (without FCS; at least
/// [`UDP6_HEADERS`], at most `out.len()`) into `out`: from `src` to `dst` with `hop_limit`,
/// flow label 0, UDP ports [`super::UDP_SRC_PORT`] → [`super::UDP_DST_PORT`] and their
/// checksum (mandatory over IPv6, RFC 8200 §8.1), payload bytes counting up from 0. Returns
/// `len`.
///
/// # Panics
/// If `len` is shorter than the headers, longer than `out` or than a datagram without a Jumbo
/// option can be.
#[allow(clippy::too_many_arguments)]
pub fn udp6_frame(
    out: &mut [u8],
    len: usize,
    dst_mac: MacAddr,
    src_mac: MacAddr,
    src: u128,
    dst: u128,
    hop_limit: u8,
) -> usize {
    assert!((UDP6_HEADERS..=out.len()).contains(&len));
    let payload = u16::try_from(len - ETH_HDR_LEN - IPV6_HDR_LEN).expect("a datagram's length");
    let f = &mut out[..len];
    f[ETH_DST].copy_from_slice(&dst_mac.0);
    f[ETH_SRC].copy_from_slice(&src_mac.0);
    f[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let ip = &mut f[ETH_HDR_LEN..];
    ip[IPV6_VER_TC_FLOW].copy_from_slice(&[0x60, 0, 0, 0]);
    ip[IPV6_PAYLOAD_LEN].copy_from_slice(&payload.to_be_bytes());
    ip[IPV6_NEXT_HEADER] = IPPROTO_UDP;
    ip[IPV6_HOP_LIMIT] = hop_limit;
    ip[IPV6_SRC].copy_from_slice(&src.to_be_bytes());
    ip[IPV6_DST].copy_from_slice(&dst.to_be_bytes());
    let udp = &mut ip[IPV6_HDR_LEN..];
    udp[UDP_SRC].copy_from_slice(&super::UDP_SRC_PORT.to_be_bytes());
    udp[UDP_DST].copy_from_slice(&super::UDP_DST_PORT.to_be_bytes());
    udp[UDP_LEN].copy_from_slice(&payload.to_be_bytes());
    udp[UDP_CHECKSUM].copy_from_slice(&[0, 0]);
    for (i, b) in udp[UDP_HDR_LEN..].iter_mut().enumerate() {
        *b = i as u8;
    }
    // RFC 768: a computed 0 is sent as 0xffff.
    let sum = match upper_checksum6(src, dst, IPPROTO_UDP, udp) {
        0 => 0xffff,
        s => s,
    };
    udp[UDP_CHECKSUM].copy_from_slice(&sum.to_be_bytes());
    len
}

/// The IPv6 benchmark's frames into `input` and `want` (same length): from `peer0` to port 0
/// (`macs[0]`), and out of port 1 from `macs[1]` to the gateway (`peer1`) with the hop limit
/// decremented. `None` without the addresses ([`router6_addrs`]).
pub fn bench_frames6_into(
    cfg: &Config,
    macs: [MacAddr; 2],
    input: &mut [u8],
    want: &mut [u8],
) -> Option<()> {
    let a = router6_addrs(cfg)?;
    let len = input.len();
    udp6_frame(input, len, macs[0], cfg.peer[0], a.src, a.dst, 64);
    udp6_frame(want, len, cfg.peer[1], macs[1], a.src, a.dst, 63);
    Some(())
}

/// The gateway's answer (a solicited Neighbor Advertisement with the Override flag and its
/// link-layer address `peer1`, RFC 4861 §7.2.4) to the solicitation the router sends on port 1
/// (MAC `mac1`) for the first frame: written into `out`, its length returned; `None` without
/// the addresses or room.
pub fn next_hop_na(cfg: &Config, mac1: MacAddr, out: &mut [u8]) -> Option<usize> {
    let a = router6_addrs(cfg)?;
    let n = ndp::build(
        out.get_mut(ETH_HDR_LEN..)?,
        a.gateway,
        a.port1,
        a.gateway,
        cfg.peer[1],
        Some(NA_SOLICITED | NA_OVERRIDE),
    )?;
    out[ETH_DST].copy_from_slice(&mac1.0);
    out[ETH_SRC].copy_from_slice(&cfg.peer[1].0);
    out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    Some(ETH_HDR_LEN + n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetFrame, Icmpv6Packet, Icmpv6Repr, IpAddress, Ipv6Packet, NdiscRepr, UdpPacket,
    };
    use std::string::ToString;

    const MACS: [MacAddr; 2] = [MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2])];

    fn cfg() -> Config {
        Config::parse("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 ip6_0=2001:db8::1/64 ip6_1=2001:db8:0:1::1/64 route=2001:db8:100::/48,2001:db8:0:1::2 sim=4 sim_ip=6 sim_size=78").unwrap()
    }

    /// The frames are valid IPv6/UDP as smoltcp reads them (checksum included), the output
    /// the input with the hop limit decremented and the MACs of the next link.
    #[test]
    fn the_frames_are_valid_ipv6_udp_through_the_gateway() {
        let c = cfg();
        let (mut input, mut want) = ([0u8; 74], [0u8; 74]);
        bench_frames6_into(&c, MACS, &mut input, &mut want).unwrap();
        let e = EthernetFrame::new_checked(&input[..]).unwrap();
        assert_eq!(e.dst_addr().0, MACS[0].0);
        let ip = Ipv6Packet::new_checked(e.payload()).unwrap();
        assert_eq!(ip.src_addr().to_string(), "2001:db8::2");
        assert_eq!(ip.dst_addr().to_string(), "2001:db8:100::1");
        assert_eq!(ip.hop_limit(), 64);
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        let (s, d) = (
            IpAddress::Ipv6(ip.src_addr()),
            IpAddress::Ipv6(ip.dst_addr()),
        );
        assert!(udp.verify_checksum(&s, &d));
        assert_eq!(want[..6], c.peer[1].0);
        assert_eq!(want[6..12], MACS[1].0);
        assert_eq!(want[14 + 7], 63);
        assert_eq!(want[14..14 + 7], input[14..14 + 7]);
        assert_eq!(want[14 + 8..], input[14 + 8..]);
    }

    /// The gateway's advertisement is a valid solicited, overriding NA for itself.
    #[test]
    fn the_gateways_advert_is_a_valid_solicited_na() {
        let c = cfg();
        let mut out = [0u8; 128];
        let n = next_hop_na(&c, MACS[1], &mut out).unwrap();
        let e = EthernetFrame::new_checked(&out[..n]).unwrap();
        assert_eq!(e.dst_addr().0, MACS[1].0);
        let ip = Ipv6Packet::new_checked(e.payload()).unwrap();
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let (s, d) = (ip.src_addr(), ip.dst_addr());
        let repr = Icmpv6Repr::parse(&s, &d, &icmp, &ChecksumCapabilities::default()).unwrap();
        let Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags, target_addr, ..
        }) = repr
        else {
            panic!("{repr:?}");
        };
        assert_eq!(target_addr.to_string(), "2001:db8:0:1::2");
        assert!(flags.contains(smoltcp::wire::NdiscNeighborFlags::SOLICITED));
    }
}
