//! Frames and addresses for the deterministic datapath benchmark (`sim=K`): the simulated
//! device on port 0 delivers [`udp4_frame`]s, and in router mode first an ARP request
//! ([`arp_request`]) from the next hop on port 1, so the router has resolved it before the
//! measured iterations and every measured frame is forwarded, not queued.

use crate::config::{Config, Mode};
use crate::router::arp::{self, Arp};
use crate::router::ipv4::checksum;
use crate::router::Ipv4Net;
use crate::wire::{
    ARP_REQUEST, ETHERTYPE, ETHERTYPE_IPV4, ETH_DST, ETH_HDR_LEN, ETH_SRC, IPPROTO_UDP,
    IPV4_CHECKSUM, IPV4_DST, IPV4_FLAGS_FRAG, IPV4_IDENT, IPV4_MIN_HDR, IPV4_PROTOCOL, IPV4_SRC,
    IPV4_TOS, IPV4_TOTAL_LEN, IPV4_TTL, IPV4_VER_IHL, UDP_CHECKSUM, UDP_DST, UDP_HDR_LEN, UDP_LEN,
    UDP_SRC,
};
use crate::MacAddr;
use core::net::Ipv4Addr;

mod v6;
pub use v6::{
    bench_frames6_into, next_hop_na, router6_addrs, udp6_frame, Router6Addrs, UDP6_HEADERS,
};

/// Destination when the first route is the default route (`0.0.0.0/0,GW`): RFC 2544's
/// benchmarking network 198.18.0.0/15 (not a martian, not connected).
pub const DEFAULT_ROUTE_DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// UDP ports of the benchmark's frames (the generator's defaults).
pub const UDP_SRC_PORT: u16 = 10_000;
/// See [`UDP_SRC_PORT`].
pub const UDP_DST_PORT: u16 = 20_000;
/// Ethernet + IPv4 + UDP header bytes: the shortest [`udp4_frame`].
pub const UDP4_HEADERS: usize = ETH_HDR_LEN + IPV4_MIN_HDR + UDP_HDR_LEN;
/// Offset of the IPv4 TTL in an Ethernet frame.
pub const TTL_OFFSET: usize = ETH_HDR_LEN + IPV4_TTL;

/// Who talks to whom in router mode.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RouterAddrs {
    /// Source of the frames: a host on port 0's network (behind port 0).
    pub src: Ipv4Addr,
    /// Destination: inside the first `route=` prefix (or [`DEFAULT_ROUTE_DST`] for a default
    /// route), else a host on port 1's network.
    pub dst: Ipv4Addr,
    /// The next hop the router resolves on port 1: the first route's gateway, else `dst`.
    pub next_hop: Ipv4Addr,
}

/// The first host address of `net` other than `not` (`None` if there is none, e.g. a /32).
pub fn host_in(net: Ipv4Net, not: Ipv4Addr) -> Option<Ipv4Addr> {
    let base = net.network().addr.to_bits();
    let last = net.broadcast().to_bits();
    (base.saturating_add(1)..last)
        .take(2)
        .map(Ipv4Addr::from_bits)
        .find(|&a| a != not)
}

/// The benchmark's addresses for `cfg` (router mode: `ip0`, `ip1` and the first `route=`), or
/// `None` outside router mode or when a network has no host address to spare.
pub fn router_addrs(cfg: &Config) -> Option<RouterAddrs> {
    let (ip0, ip1) = (cfg.ip[0]?, cfg.ip[1]?);
    let src = host_in(ip0, ip0.addr)?;
    let (dst, next_hop) = match cfg.router.routes.first() {
        Some(&(prefix, gw)) if prefix.len == 0 => (DEFAULT_ROUTE_DST, gw),
        Some(&(prefix, gw)) if prefix.len == 32 => (prefix.addr, gw),
        Some(&(prefix, gw)) => (host_in(prefix, gw)?, gw),
        None => {
            let d = host_in(ip1, ip1.addr)?;
            (d, d)
        }
    };
    Some(RouterAddrs { src, dst, next_hop })
}

/// Write an Ethernet + IPv4 + UDP frame of `len` bytes (without FCS; at least
/// [`UDP4_HEADERS`], at most `out.len()`) into `out`: IPv4 without options, `ttl`, header
/// checksum filled in, DF clear, UDP checksum 0 (none, allowed for IPv4: RFC 768), payload
/// bytes counting up from 0. Returns `len`.
///
/// # Panics
/// If `len` is shorter than the headers, longer than `out` or than an IPv4 datagram can be.
#[allow(clippy::too_many_arguments)]
pub fn udp4_frame(
    out: &mut [u8],
    len: usize,
    dst_mac: MacAddr,
    src_mac: MacAddr,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
) -> usize {
    assert!(
        (UDP4_HEADERS..=out.len()).contains(&len) && len - ETH_HDR_LEN <= usize::from(u16::MAX)
    );
    let f = &mut out[..len];
    f[ETH_DST].copy_from_slice(&dst_mac.0);
    f[ETH_SRC].copy_from_slice(&src_mac.0);
    f[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip_len = (len - ETH_HDR_LEN) as u16;
    let ip = &mut f[ETH_HDR_LEN..];
    ip[IPV4_VER_IHL] = 0x45; // version 4, IHL 5
    ip[IPV4_TOS] = 0;
    ip[IPV4_TOTAL_LEN].copy_from_slice(&ip_len.to_be_bytes());
    ip[IPV4_IDENT].fill(0);
    ip[IPV4_FLAGS_FRAG].fill(0);
    ip[IPV4_TTL] = ttl;
    ip[IPV4_PROTOCOL] = IPPROTO_UDP;
    ip[IPV4_CHECKSUM].fill(0);
    ip[IPV4_SRC].copy_from_slice(&src.octets());
    ip[IPV4_DST].copy_from_slice(&dst.octets());
    let c = checksum(&ip[..IPV4_MIN_HDR]);
    ip[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
    let udp = &mut ip[IPV4_MIN_HDR..];
    udp[UDP_SRC].copy_from_slice(&UDP_SRC_PORT.to_be_bytes());
    udp[UDP_DST].copy_from_slice(&UDP_DST_PORT.to_be_bytes());
    udp[UDP_LEN].copy_from_slice(&(ip_len - IPV4_MIN_HDR as u16).to_be_bytes());
    udp[UDP_CHECKSUM].fill(0);
    for (i, b) in udp[UDP_HDR_LEN..].iter_mut().enumerate() {
        *b = i as u8;
    }
    len
}

/// Write a broadcast ARP request (RFC 826) from `sha`/`spa` asking for `tpa` into `out` (at
/// least 42 bytes; padded to [`ETH_ZLEN`](crate::wire::ETH_ZLEN) = 60 when it fits). Returns the length.
pub fn arp_request(out: &mut [u8], sha: MacAddr, spa: Ipv4Addr, tpa: Ipv4Addr) -> usize {
    let a = Arp {
        op: ARP_REQUEST,
        sha,
        spa: spa.to_bits(),
        tha: MacAddr([0; 6]),
        tpa: tpa.to_bits(),
    };
    arp::write(out, MacAddr([0xff; 6]), sha, &a)
}

/// Length of the benchmark's frames without FCS: the 64-byte minimum Ethernet frame on the wire.
pub const BENCH_FRAME_LEN: usize = 60;
/// Source address of the `l2`/`io` benchmark frames (not looked at by the forwarder).
pub const L2_SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// Destination address of the `l2`/`io` benchmark frames.
pub const L2_DST: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);

/// The benchmark's frame delivered on port 0 (from `peer0` to `macs[0]`) and the frame the
/// forwarder must send out of port 1 in `cfg.mode`: `io` unchanged; `l2` from `macs[1]` to
/// `peer1`; `router` to the next hop (which answers with `peer1`'s MAC, [`next_hop_arp`]) with
/// TTL 63 and the checksum updated (RFC 1624 gives what a full recomputation gives); `nat`
/// translated to the pool address paired with the source and the range's first port, to
/// `peer1`. `None` in
/// router mode when ip0/ip1/the first route leave no host address to spare, and with
/// `mode=nat` without a pool.
pub fn bench_frames(
    cfg: &Config,
    macs: [MacAddr; 2],
) -> Option<([u8; BENCH_FRAME_LEN], [u8; BENCH_FRAME_LEN])> {
    let mut input = [0u8; BENCH_FRAME_LEN];
    let mut want = [0u8; BENCH_FRAME_LEN];
    bench_frames_into(cfg, macs, &mut input, &mut want)?;
    Some((input, want))
}

/// [`bench_frames`] of any length: the input frame and the expected output written into
/// `input` and `want`, both `len` bytes long (without FCS; `UDP4_HEADERS..=` 65,535 + 14).
/// `None` as [`bench_frames`].
///
/// # Panics
/// If the two buffers differ in length or are shorter than the headers.
pub fn bench_frames_into(
    cfg: &Config,
    macs: [MacAddr; 2],
    input: &mut [u8],
    want: &mut [u8],
) -> Option<()> {
    assert_eq!(input.len(), want.len());
    if cfg.sim_ipv6 {
        return bench_frames6_into(cfg, macs, input, want);
    }
    let len = input.len();
    let peer = cfg.peer;
    let (src, dst) = match cfg.mode {
        Mode::Router => {
            let a = router_addrs(cfg)?;
            (a.src, a.dst)
        }
        Mode::L2 | Mode::Io | Mode::Acl | Mode::Nat | Mode::Firewall => (L2_SRC, L2_DST),
    };
    udp4_frame(input, len, macs[0], peer[0], src, dst, 64);
    want.copy_from_slice(input);
    match cfg.mode {
        // The ACL allows the benchmark's frame (its rules must) and forwards it untouched; the
        // firewall lets the inside's new flow through untouched.
        Mode::Io | Mode::Acl | Mode::Firewall => {}
        Mode::L2 => {
            want[ETH_DST].copy_from_slice(&peer[1].0);
            want[ETH_SRC].copy_from_slice(&macs[1].0);
        }
        Mode::Router => {
            udp4_frame(want, len, peer[1], macs[1], src, dst, 63);
        }
        // The inside host's one flow: from its paired pool address and the first port of
        // the dynamic range (the core's first mapping), to `peer1`; TTL and the (absent) UDP
        // checksum unchanged.
        Mode::Nat => {
            let n = &cfg.nat;
            let i = crate::nat::ports::paired_address(
                src.to_bits(),
                n.pool.len(),
                crate::config::nat::PAIRING_KEY,
            );
            let pool = Ipv4Addr::from_bits(*n.pool.get(i)?);
            udp4_frame(want, len, peer[1], macs[1], pool, dst, 64);
            let udp = ETH_HDR_LEN + IPV4_MIN_HDR;
            want[udp + UDP_SRC.start..udp + UDP_SRC.end].copy_from_slice(&n.port_lo.to_be_bytes());
        }
    }
    Some(())
}

/// `mode=acl`'s benchmark frame for the 5-tuple `t` (`len` bytes without FCS, from `peer0` to
/// port 0's MAC `mac0`): IPv4/UDP from `t.src` to `t.dst` with `t`'s ports, whatever `t.proto`
/// (the frame is always UDP: a tuple aimed at a TCP or ICMP rule then meets the rules as a UDP
/// one). The ACL forwards it untouched or drops it. Returns `len`.
///
/// # Panics
/// As [`udp4_frame`].
pub fn acl_frame(
    out: &mut [u8],
    len: usize,
    mac0: MacAddr,
    peer0: MacAddr,
    t: &crate::acl::FiveTuple,
) -> usize {
    tuple_frame(out, len, mac0, peer0, t, 64)
}

/// The IPv4/UDP frame of 5-tuple `t` (`len` bytes without FCS, `dst_mac` from `src_mac`, TTL
/// `ttl`): [`acl_frame`]'s with TTL 64; with the router's rewrite (next hop's MAC from port
/// 1's, TTL 63, checksum) what the ACL in front of the router forwards. Returns `len`.
///
/// # Panics
/// As [`udp4_frame`].
pub fn tuple_frame(
    out: &mut [u8],
    len: usize,
    dst_mac: MacAddr,
    src_mac: MacAddr,
    t: &crate::acl::FiveTuple,
    ttl: u8,
) -> usize {
    udp4_frame(out, len, dst_mac, src_mac, t.src, t.dst, ttl);
    let udp = ETH_HDR_LEN + IPV4_MIN_HDR;
    out[udp + UDP_SRC.start..udp + UDP_SRC.end].copy_from_slice(&t.sport.to_be_bytes());
    out[udp + UDP_DST.start..udp + UDP_DST.end].copy_from_slice(&t.dport.to_be_bytes());
    len
}

/// Router mode: the ARP request (RFC 826) in which the next hop (`peer1`'s MAC) asks for port
/// 1's address, written into `out`, so that the router learns it before the measured
/// iterations. Returns its length; `None` outside router mode (or without addresses).
pub fn next_hop_arp(cfg: &Config, out: &mut [u8]) -> Option<usize> {
    let (a, ip1) = (router_addrs(cfg)?, cfg.ip[1]?);
    Some(arp_request(out, cfg.peer[1], a.next_hop, ip1.addr))
}

/// Router mode: the next hop's answer (an ARP reply unicast to port 1's MAC `mac1`) to the
/// request the router sends on first use. The request of [`next_hop_arp`] leaves the entry
/// Stale (learned from a request, as Linux's `arp_process`); this reply makes it Reachable, as
/// a real next hop's would, so the measured iterations send no ARP. `None` outside router mode.
pub fn next_hop_arp_reply(cfg: &Config, mac1: MacAddr, out: &mut [u8]) -> Option<usize> {
    let (a, ip1) = (router_addrs(cfg)?, cfg.ip[1]?);
    let r = Arp {
        op: crate::wire::ARP_REPLY,
        sha: cfg.peer[1],
        spa: a.next_hop.to_bits(),
        tha: mac1,
        tpa: ip1.addr.to_bits(),
    };
    Some(arp::write(out, mac1, cfg.peer[1], &r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::fib::tests::Store;
    use crate::router::ipv4::validate;
    use crate::router::{Action, PortConfig, Router, RouterConfig};

    const P0: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const P1: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
    const PEER0: MacAddr = MacAddr([2, 0, 0, 0, 0x0a, 2]);
    const PEER1: MacAddr = MacAddr([2, 0, 0, 0, 0x0b, 2]);

    fn cfg(extra: &str) -> Config {
        let line = std::format!("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 {extra}");
        Config::parse(std::boxed::Box::leak(line.into_boxed_str())).unwrap()
    }

    #[test]
    fn addresses_follow_the_configuration() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let a = router_addrs(&cfg("")).unwrap();
        assert_eq!(
            (a.src, a.dst, a.next_hop),
            (ip("10.0.0.2"), ip("10.0.1.2"), ip("10.0.1.2"))
        );
        let a = router_addrs(&cfg("route=192.168.0.0/16,10.0.1.2")).unwrap();
        assert_eq!((a.dst, a.next_hop), (ip("192.168.0.1"), ip("10.0.1.2")));
        let a = router_addrs(&cfg("route=0.0.0.0/0,10.0.1.3")).unwrap();
        assert_eq!((a.dst, a.next_hop), (DEFAULT_ROUTE_DST, ip("10.0.1.3")));
        let a = router_addrs(&cfg("route=172.16.5.5/32,10.0.1.2")).unwrap();
        assert_eq!(a.dst, ip("172.16.5.5"));
        assert_eq!(router_addrs(&Config::default()), None);
        // The first host is the router itself: take the next one.
        let net = crate::router::parse_ipv4_cidr("10.0.0.1/24").unwrap();
        assert_eq!(host_in(net, ip("10.0.0.1")), Some(ip("10.0.0.2")));
        assert_eq!(host_in(net, ip("10.0.0.9")), Some(ip("10.0.0.1")));
        let p2p = crate::router::parse_ipv4_cidr("10.0.0.1/32").unwrap();
        assert_eq!(host_in(p2p, ip("10.0.0.1")), None);
    }

    #[test]
    fn acl_frames_carry_the_tuple_as_udp() {
        let t = crate::acl::FiveTuple {
            src: Ipv4Addr::new(192, 0, 2, 7),
            dst: Ipv4Addr::new(198, 51, 100, 9),
            proto: crate::wire::IPPROTO_TCP,
            sport: 1234,
            dport: 443,
        };
        let mut buf = [0u8; 60];
        assert_eq!(acl_frame(&mut buf, 60, P0, PEER0, &t), 60);
        let mut want = [0u8; 60];
        udp4_frame(&mut want, 60, P0, PEER0, t.src, t.dst, 64);
        let udp = ETH_HDR_LEN + IPV4_MIN_HDR;
        assert_eq!(buf[..udp], want[..udp]);
        assert_eq!(buf[udp..udp + 4], [0x04, 0xd2, 0x01, 0xbb]);
        assert_eq!(buf[udp + 4..], want[udp + 4..]);
        assert_eq!(buf[ETH_HDR_LEN + IPV4_PROTOCOL], crate::wire::IPPROTO_UDP);
    }

    #[test]
    fn a_udp_frame_is_valid_ipv4() {
        let mut buf = [0u8; 128];
        let a = router_addrs(&cfg("")).unwrap();
        let n = udp4_frame(&mut buf, 60, P0, PEER0, a.src, a.dst, 64);
        assert_eq!(n, 60);
        assert_eq!(&buf[ETHERTYPE], &[0x08, 0x00]);
        let h = validate(&buf[ETH_HDR_LEN..60]).expect("valid header");
        assert_eq!(h.ttl, 64);
        assert_eq!(buf[TTL_OFFSET], 64);
        let udp = ETH_HDR_LEN + IPV4_MIN_HDR;
        assert_eq!(
            checksum(&buf[ETH_HDR_LEN..udp]),
            0,
            "header checksum verifies"
        );
        assert_eq!(
            buf[udp..][UDP_LEN],
            ((60 - udp) as u16).to_be_bytes(),
            "UDP length"
        );
    }

    /// The frames do what the benchmark needs: the ARP request resolves the next hop, and
    /// every data frame is then forwarded out of port 1 to the next hop's MAC.
    #[test]
    fn the_router_forwards_the_frames_after_the_arp_request() {
        for extra in [
            "",
            "route=192.168.0.0/16,10.0.1.2",
            "route=0.0.0.0/0,10.0.1.7",
        ] {
            let c = cfg(extra);
            let a = router_addrs(&c).unwrap();
            let mut store = Store::new(4, 64);
            let ports = [P0, P1].map(|mac| PortConfig {
                mac,
                addr: if mac == P0 { c.ip[0] } else { c.ip[1] }.unwrap(),
            });
            let mut r =
                Router::<'_, u32, 8, 4>::new(store.fib(), &ports, RouterConfig::default()).unwrap();
            for (net, gw) in c.router.routes.iter() {
                r.add_route(*net, *gw).unwrap();
            }
            let mut icmp = [0u8; 1500];
            let mut arp = [0u8; 64];
            let n = arp_request(&mut arp, PEER1, a.next_hop, c.ip[1].unwrap().addr);
            assert_eq!(n, 60);
            let act = r.process(1, &mut arp[..n], 0, 1, &mut icmp);
            assert!(
                matches!(act, Action::Reply { port: 1, .. }),
                "{extra}: {act:?}"
            );
            let mut f = [0u8; 60];
            udp4_frame(&mut f, 60, P0, PEER0, a.src, a.dst, 64);
            let act = r.process(0, &mut f, 1, 2, &mut icmp);
            assert!(
                matches!(act, Action::Forward { port: 1, len: 60 }),
                "{extra}: {act:?}"
            );
            assert_eq!(&f[ETH_DST], &PEER1.0, "to the next hop's MAC");
            assert_eq!(&f[ETH_SRC], &P1.0);
            assert_eq!(f[TTL_OFFSET], 63);
        }
    }

    #[test]
    fn bench_frames_per_mode() {
        let io = Config::parse("mode=io").unwrap();
        let (i, w) = bench_frames(&io, [P0, P1]).unwrap();
        assert_eq!(i, w, "io leaves the frame alone");
        assert_eq!(next_hop_arp(&io, &mut [0u8; 64]), None);
        let l2 = Config::parse("mode=l2 peer1=02:00:00:00:0b:02").unwrap();
        let (i, w) = bench_frames(&l2, [P0, P1]).unwrap();
        assert_eq!((&w[ETH_DST], &w[ETH_SRC]), (&PEER1.0[..], &P1.0[..]));
        assert_eq!(&i[ETH_HDR_LEN..], &w[ETH_HDR_LEN..]);
        let r = cfg("route=192.168.0.0/16,10.0.1.2");
        let (i, w) = bench_frames(&r, [P0, P1]).unwrap();
        assert_eq!((i[TTL_OFFSET], w[TTL_OFFSET]), (64, 63));
        assert_eq!(&w[ETH_SRC], &P1.0[..]);
        let mut arp = [0u8; 64];
        assert_eq!(
            next_hop_arp(&r, &mut arp),
            Some(60),
            "padded to the minimum frame"
        );
    }
}
