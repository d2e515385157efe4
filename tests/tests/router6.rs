//! Router mode with IPv6 (`ip6_0=`, `ip6_1=`, issue 37): the kernel hands frames of EtherType
//! 0x86DD to the core's `Router6`, which answers a Neighbor Solicitation for a port address,
//! answers an echo request to it, and forwards a UDP datagram to a host behind the other port
//! after resolving it by Neighbor Solicitation (answered here with an advertisement), hop limit
//! decremented; every IPv6 frame lands in one `router6` counter, in STATS and `/metrics`.

use std::time::{Duration, Instant};

use gannet_tests::*;
use netstack::router::icmp6::checksum6;
use netstack::router::ndp::{self, NA_OVERRIDE, NA_ROUTER, NA_SOLICITED};
use netstack::wire::{
    ETHERTYPE_IPV6, ETH_DST, ETH_HDR_LEN, ETH_SRC, IPPROTO_ICMPV6, IPPROTO_UDP, IPV6_HDR_LEN,
};
use netstack::MacAddr;

const ROUTER6: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 \
                       ip6_0=2001:db8::1/64 ip6_1=2001:db8:1::1/64";

fn a(s: &str) -> u128 {
    s.parse::<std::net::Ipv6Addr>().unwrap().to_bits()
}

/// An Ethernet frame to `dst` from `src` carrying `ip` (an IPv6 datagram).
fn eth(dst: [u8; 6], src: [u8; 6], ip: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HDR_LEN + ip.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// An IPv6 datagram from `src` to `dst` with hop limit `hops` carrying `next` `payload`.
fn ipv6(src: u128, dst: u128, hops: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0x60, 0x01, 0x23, 0x45];
    d.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    d.extend_from_slice(&[next, hops]);
    d.extend_from_slice(&src.to_be_bytes());
    d.extend_from_slice(&dst.to_be_bytes());
    d.extend_from_slice(payload);
    d
}

/// An ND message (NS, or NA with `flags`) as a frame from `mac`.
fn nd(
    eth_dst: [u8; 6],
    mac: [u8; 6],
    src: u128,
    dst: u128,
    target: u128,
    flags: Option<u8>,
) -> Vec<u8> {
    let mut ip = [0u8; 128];
    let n = ndp::build(&mut ip, src, dst, target, MacAddr(mac), flags).expect("ND message");
    eth(eth_dst, mac, &ip[..n])
}

fn field(f: &[u8], at: usize) -> u128 {
    u128::from_be_bytes(
        f[ETH_HDR_LEN + at..ETH_HDR_LEN + at + 16]
            .try_into()
            .unwrap(),
    )
}

/// The first frame on `port` within the test's timeout.
fn recv(port: &RawPort, what: &str, rig: &Rig) -> Vec<u8> {
    port.recv_timeout(FRAME_TIMEOUT)
        .unwrap_or_else(|| panic!("no {what}\n{}", rig.tail()))
}

#[test]
fn ns_echo_and_forwarding_through_neighbour_discovery() {
    let t0 = Instant::now();
    let mut rig = Rig::start_raw(ROUTER6);
    let (p0, p1) = (rig.port(0), rig.port(1));
    let booted = t0.elapsed();
    let (r0, h0) = (a("2001:db8::1"), a("2001:db8::2"));
    let (r1, h1) = (a("2001:db8:1::1"), a("2001:db8:1::2"));
    let ip = ETH_HDR_LEN;
    let icmp = ip + IPV6_HDR_LEN;

    // 1. A Neighbor Solicitation for port 0's address: a solicited advertisement (R, S, O).
    let group = ndp::solicited_node(r0);
    p0.send(&nd(
        ndp::multicast_mac(group).0,
        peer_mac(0),
        h0,
        group,
        r0,
        None,
    ))
    .unwrap();
    let na = recv(&p0, "Neighbor Advertisement", &rig);
    assert_eq!(
        (&na[ETH_DST], &na[ETH_SRC]),
        (&peer_mac(0)[..], &guest_mac(0)[..])
    );
    assert_eq!(na[icmp], 136, "NA: {na:02x?}");
    assert_eq!(na[ip + 7], 255, "ND hop limit");
    assert_eq!((field(&na, 8), field(&na, 24)), (r0, h0));
    assert_eq!(na[icmp + 4], NA_ROUTER | NA_SOLICITED | NA_OVERRIDE);
    assert_eq!(
        u128::from_be_bytes(na[icmp + 8..icmp + 24].try_into().unwrap()),
        r0
    );
    assert_eq!(checksum6(r0, h0, &na[icmp..]), 0, "NA checksum");

    // 2. An echo request to it: the reply, data as sent.
    let mut echo = vec![128, 0, 0, 0, 0x12, 0x34, 0, 1];
    echo.extend_from_slice(b"gannet ipv6 echo");
    let sum = checksum6(h0, r0, &echo);
    echo[2..4].copy_from_slice(&sum.to_be_bytes());
    p0.send(&eth(
        guest_mac(0),
        peer_mac(0),
        &ipv6(h0, r0, 64, IPPROTO_ICMPV6, &echo),
    ))
    .unwrap();
    let reply = recv(&p0, "echo reply", &rig);
    assert_eq!(&reply[ETH_DST], &peer_mac(0));
    assert_eq!((field(&reply, 8), field(&reply, 24)), (r0, h0));
    assert_eq!(reply[icmp], 129, "echo reply: {reply:02x?}");
    assert_eq!(&reply[icmp + 4..icmp + echo.len()], &echo[4..], "echo data");
    assert_eq!(checksum6(r0, h0, &reply[icmp..icmp + echo.len()]), 0);

    // 3. UDP to a host behind port 1: the router solicits it, the host advertises, the
    // datagram follows with its hop limit decremented and nothing else changed.
    let udp = [
        0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef,
    ];
    let sent = eth(
        guest_mac(0),
        peer_mac(0),
        &ipv6(h0, h1, 64, IPPROTO_UDP, &udp),
    );
    p0.send(&sent).unwrap();
    let ns = recv(&p1, "Neighbor Solicitation for the next hop", &rig);
    let group = ndp::solicited_node(h1);
    assert_eq!(
        (&ns[ETH_DST], &ns[ETH_SRC]),
        (&ndp::multicast_mac(group).0[..], &guest_mac(1)[..])
    );
    assert_eq!(ns[icmp], 135, "NS: {ns:02x?}");
    assert_eq!((field(&ns, 8), field(&ns, 24)), (r1, group));
    assert_eq!(
        u128::from_be_bytes(ns[icmp + 8..icmp + 24].try_into().unwrap()),
        h1
    );
    p1.send(&nd(
        guest_mac(1),
        peer_mac(1),
        h1,
        r1,
        h1,
        Some(NA_SOLICITED | NA_OVERRIDE),
    ))
    .unwrap();
    let got = recv(&p1, "forwarded UDP datagram", &rig);
    assert_eq!(
        (&got[ETH_DST], &got[ETH_SRC]),
        (&peer_mac(1)[..], &guest_mac(1)[..])
    );
    assert_eq!(got[ip + 7], 63, "hop limit decremented");
    let mut expect = sent.clone();
    expect[..12].copy_from_slice(&got[..12]);
    expect[ip + 7] = 63;
    assert_eq!(got, expect, "only MACs and hop limit change");

    // Every IPv6 frame in one counter: NS, echo, UDP, NA.
    let m = rig.metrics();
    for line in [
        "gannet_router6_frames_total{outcome=\"rx\"} 4",
        "gannet_router6_frames_total{outcome=\"forwarded\"} 1",
        "gannet_router6_frames_total{outcome=\"echo_replies\"} 1",
        "gannet_router6_frames_total{outcome=\"nd_answered\"} 1",
        "gannet_router6_frames_total{outcome=\"nd_consumed\"} 1",
        "gannet_router6_solicitations_sent_total 1",
        "gannet_router6_drops_total{reason=\"no_route\"} 0",
    ] {
        assert!(
            m.lines().any(|l| l == line),
            "/metrics lacks `{line}`:\n{m}"
        );
    }
    let s = rig.quit();
    let r6 = s.router6.unwrap_or_else(|| panic!("no router6 in STATS"));
    assert_eq!(
        (
            r6.rx,
            r6.forwarded,
            r6.echo_replies,
            r6.nd_answered,
            r6.nd_consumed
        ),
        (4, 1, 1, 1, 1)
    );
    assert_eq!(
        (r6.queued, r6.queued_now, r6.ns_sent, r6.drops.total()),
        (1, 0, 1, 0)
    );
    assert_eq!(
        r6.outcomes(),
        r6.rx,
        "every IPv6 frame in exactly one outcome"
    );
    assert_eq!(
        router(&s).drops.unsupported_ethertype,
        0,
        "IPv6 is no longer unsupported"
    );
    assert_eq!(router(&s).drops.ipv6_off, 0);
    assert_eq!(router(&s).rx, 0, "no IPv4 frame sent");
    assert_no_leak(&s);
    let total = t0.elapsed();
    println!(
        "router6: boot {:.1} s, test {:.1} s, total {:.1} s",
        booted.as_secs_f64(),
        (total - booted).as_secs_f64(),
        total.as_secs_f64()
    );
    assert!(total < Duration::from_secs(60));
}

/// A routes file mixing IPv4 and IPv6 lines (an IPv6 route through a link-local gateway named
/// with its port), kept by `routes reload` (which rebuilds the IPv4 FIB); bad IPv6
/// configuration refused at boot, naming the key.
#[test]
fn mixed_routes_file_reload_and_config_errors() {
    let t0 = Instant::now();
    let dir = TestDir::new();
    let file = dir.path().join("routes.txt");
    std::fs::write(
        &file,
        "192.168.0.0/16,10.0.1.2\n2001:db8:100::/48,fe80::5%1 # via a link-local gateway\n",
    )
    .unwrap();
    let extra = vec!["-initrd".to_string(), file.display().to_string()];
    let mut rig = Rig::start_with(ROUTER6, gen_count(1, 64, false), extra);
    let lines = rig.guest.lines();
    for want in ["1 routes from the routes file", "IPv6 FIB: 3 routes"] {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "no `{want}`\n{}",
            rig.tail()
        );
    }
    let (p0, p1) = (rig.port(0), rig.port(1));
    let (h0, gw) = (a("2001:db8::2"), a("fe80::5"));
    let udp = [0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00];
    let to = |dst: &str| {
        eth(
            guest_mac(0),
            peer_mac(0),
            &ipv6(h0, a(dst), 9, IPPROTO_UDP, &udp),
        )
    };
    p0.send(&to("2001:db8:100:1::9")).unwrap();
    let ns = recv(
        &p1,
        "Neighbor Solicitation for the link-local gateway",
        &rig,
    );
    let icmp = ETH_HDR_LEN + IPV6_HDR_LEN;
    assert_eq!(ns[icmp], 135, "NS: {ns:02x?}");
    assert_eq!(
        u128::from_be_bytes(ns[icmp + 8..icmp + 24].try_into().unwrap()),
        gw
    );
    let ll1 = field(&ns, 8);
    assert_eq!(
        ll1 >> 64,
        0xfe80 << 48,
        "solicited from port 1's link-local address"
    );
    p1.send(&nd(
        guest_mac(1),
        peer_mac(1),
        gw,
        ll1,
        gw,
        Some(NA_SOLICITED | NA_OVERRIDE),
    ))
    .unwrap();
    let got = recv(&p1, "datagram through the gateway", &rig);
    assert_eq!((&got[ETH_DST], got[ETH_HDR_LEN + 7]), (&peer_mac(1)[..], 8));
    // A reload rebuilds the IPv4 FIB from the same file; the IPv6 FIB and neighbours stay.
    let from = rig.guest.line_count();
    rig.guest.send_line("routes reload").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("FIB generation 2 published"),
            FRAME_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("reload: {e:#}\n{}", rig.tail()));
    p0.send(&to("2001:db8:100:2::9")).unwrap();
    let got = recv(&p1, "datagram after the reload", &rig);
    assert_eq!(field(&got, 24), a("2001:db8:100:2::9"));
    let s = rig.quit();
    let r6 = s.router6.expect("router6 in STATS");
    assert_eq!(
        (r6.rx, r6.forwarded, r6.nd_consumed, r6.ns_sent),
        (3, 2, 1, 1)
    );
    assert_eq!(r6.outcomes(), r6.rx);
    assert_no_leak(&s);
    let booted = t0.elapsed();

    let base = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
    for (append, key) in [
        (format!("{ROUTER6} mtu1=1000"), "mtu1"),
        (
            format!("{base} ip6_0=2001:db8::1/128 ip6_1=2001:db8:1::1/64"),
            "ip6_0",
        ),
        (
            format!("{base} ip6_0=2001:db8::1/64 ip6_1=2001:db8::1/64"),
            "ip6_1",
        ),
        (format!("{ROUTER6} route=::/0,fe80::1"), "route"),
    ] {
        let (exit, lines) = boot_failing(&append, 2);
        assert_eq!(exit, GuestExit::GuestFailure, "{append}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("config error:") && l.contains(&format!("`{key}`"))),
            "{append}: no config error naming `{key}`: {lines:?}"
        );
    }
    // An IPv6 routes-file line without IPv6 ports is refused, not dropped unseen.
    let (exit, lines) = boot_failing_with(base, 2, 1, |dir| {
        let f = dir.join("routes.txt");
        std::fs::write(
            &f,
            "10.9.0.0/16,10.0.1.2\n2001:db8:100::/48,2001:db8:1::2\n",
        )
        .unwrap();
        vec!["-initrd".to_string(), f.display().to_string()]
    });
    assert_eq!(exit, GuestExit::GuestFailure);
    assert!(
        lines.iter().any(|l| l.contains(
            "config error: routes file line 2: `2001:db8:100::/48,2001:db8:1::2`: an IPv6 route needs ip6_0= and ip6_1="
        )),
        "{lines:?}"
    );
    println!(
        "router6 mixed file: {:.1} s, config errors {:.1} s",
        booted.as_secs_f64(),
        (t0.elapsed() - booted).as_secs_f64()
    );
}

/// Without `ip6_0=`/`ip6_1=` the router counts IPv6 frames `ipv6_off` (multicast ones too),
/// no longer `unsupported_ethertype`.
#[test]
fn ipv6_off_without_addresses() {
    let mut rig = Rig::start_raw("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24");
    let p0 = rig.port(0);
    let (r0, h0) = (a("2001:db8::1"), a("2001:db8::2"));
    let group = ndp::solicited_node(r0);
    p0.send(&nd(
        ndp::multicast_mac(group).0,
        peer_mac(0),
        h0,
        group,
        r0,
        None,
    ))
    .unwrap();
    p0.send(&eth(
        guest_mac(0),
        peer_mac(0),
        &ipv6(h0, r0, 64, IPPROTO_UDP, &[0; 8]),
    ))
    .unwrap();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    while router(&rig.stats()).rx < 2 {
        assert!(
            Instant::now() < deadline,
            "frames not counted\n{}",
            rig.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = rig.quit();
    assert!(s.router6.is_none(), "no router6 without IPv6 addresses");
    let d = router(&s).drops;
    assert_eq!((d.ipv6_off, d.unsupported_ethertype), (2, 0));
    assert_no_leak(&s);
}
