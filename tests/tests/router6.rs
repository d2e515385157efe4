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

    // 4. UDP to a host behind port 1 that never answers: three solicitations a second apart
    // (RFC 4861 §7.2.2), then a Destination Unreachable, code 3 (RFC 4443 §3.1), from port
    // 0's address back to the sender, quoting the datagram as forwarded (hop limit 63).
    let h9 = a("2001:db8:1::9");
    let lost = eth(
        guest_mac(0),
        peer_mac(0),
        &ipv6(h0, h9, 64, IPPROTO_UDP, &udp),
    );
    p0.send(&lost).unwrap();
    for k in 0..3 {
        let ns = recv(&p1, "Neighbor Solicitation for the silent host", &rig);
        assert_eq!(ns[icmp], 135, "NS {k}: {ns:02x?}");
        assert_eq!(
            u128::from_be_bytes(ns[icmp + 8..icmp + 24].try_into().unwrap()),
            h9
        );
    }
    let du = p0
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no Destination Unreachable\n{}", rig.tail()));
    assert_eq!(
        (&du[ETH_DST], &du[ETH_SRC]),
        (&peer_mac(0)[..], &guest_mac(0)[..])
    );
    assert_eq!((du[icmp], du[icmp + 1]), (1, 3), "DU code 3: {du:02x?}");
    assert_eq!((field(&du, 8), field(&du, 24)), (r0, h0));
    assert_eq!(checksum6(r0, h0, &du[icmp..]), 0, "DU checksum");
    let mut quoted = lost[ip..].to_vec();
    quoted[7] = 63;
    assert_eq!(&du[icmp + 8..], &quoted[..], "the datagram as forwarded");

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
        (5, 1, 1, 1, 1)
    );
    assert_eq!(
        (r6.queued, r6.queued_now, r6.ns_sent, r6.drops.total()),
        (2, 0, 4, 1)
    );
    assert_eq!((r6.drops.neigh_timeout, r6.icmp_sent), (1, 1));
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
/// Jumbo IPv6 datagrams (MTU 9000: a frame of several pages, which `Router6::process` takes
/// whole only and counts `beyond_head`) are forwarded by the IPv6 fast path once the next hop
/// is resolved and cached: hop limit decremented, MACs rewritten, nothing else changed.
#[test]
fn jumbo_datagrams_take_the_fast_path_to_a_resolved_next_hop() {
    let mut rig = Rig::start_mtu(ROUTER6, gen_count(1, 64, false), 9000);
    let (p0, p1) = (rig.port(0), rig.port(1));
    let (h0, r1, h1) = (a("2001:db8::2"), a("2001:db8:1::1"), a("2001:db8:1::2"));
    let udp = |len: usize| {
        let mut u = vec![0x30, 0x39, 0x00, 0x35];
        u.extend_from_slice(&((8 + len) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend((0..len).map(|i| (i % 251) as u8));
        eth(
            guest_mac(0),
            peer_mac(0),
            &ipv6(h0, h1, 64, IPPROTO_UDP, &u),
        )
    };
    // The first datagram makes the router solicit h1; h1 answers; the datagram follows.
    p0.send(&udp(16)).unwrap();
    recv(&p1, "Neighbor Solicitation", &rig);
    let na = nd(
        guest_mac(1),
        peer_mac(1),
        h1,
        r1,
        h1,
        Some(NA_SOLICITED | NA_OVERRIDE),
    );
    p1.send(&na).unwrap();
    recv(&p1, "the first datagram", &rig);
    // The next one goes through the slow path with h1 Reachable: that caches it.
    p0.send(&udp(16)).unwrap();
    recv(&p1, "the second datagram", &rig);
    let sent = udp(8900);
    assert!(sent.len() > 4096, "a frame of several pages");
    p0.send(&sent).unwrap();
    let got = recv(&p1, "the jumbo datagram", &rig);
    let mut expect = sent.clone();
    expect[..6].copy_from_slice(&peer_mac(1));
    expect[6..12].copy_from_slice(&guest_mac(1));
    expect[ETH_HDR_LEN + 7] = 63;
    assert_eq!(got, expect, "only MACs and hop limit change");
    let s = rig.quit();
    let r6 = s.router6.as_ref().expect("router6 counters");
    assert_eq!(r6.forwarded, 3, "{s}");
    assert_eq!(r6.drops.beyond_head, 0, "{s}");
    assert_no_leak(&s);
}

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

/// Routes files of `v4` IPv4 routes (`harness::fib`, via 10.0.1.2) and about `v6` IPv6 routes
/// (`harness::fib::routes6_text`, the global table's mix, via 2001:db8:1::2; for 4, four
/// fixed ones), in one file.
fn mixed_routes(dir: &TestDir, v4: usize, v6: usize) -> std::path::PathBuf {
    let mut text = String::new();
    if v4 > 0 {
        text += &harness::fib::Fib::generate(v4, 1).unwrap().file_text();
    }
    if v6 == 4 {
        // The small table: four routes of the usual lengths (with the two connected: 6).
        text += "2400:cb00::/32,2001:db8:1::2\n2a00:1450::/29,2001:db8:1::2\n\
                 2600:1f00:4000::/40,2001:db8:1::2\n2001:db8:100::/48,2001:db8:1::2\n";
    } else if v6 > 0 {
        text += &harness::fib::routes6_text(v6, 7, "2001:db8:1::2".parse().unwrap()).unwrap();
    }
    let file = dir.path().join(format!("routes-{v4}-{v6}.txt"));
    std::fs::write(&file, text).unwrap();
    file
}

/// The boot log's IPv6 FIB line (`router: IPv6 FIB: N routes …`) of `rig`.
fn fib6_line(rig: &Rig) -> String {
    rig.guest
        .lines()
        .into_iter()
        .find(|l| l.contains("IPv6 FIB:"))
        .unwrap_or_else(|| panic!("no IPv6 FIB line\n{}", rig.tail()))
}

/// Router mode with 1,000 IPv4 and ~1,000 IPv6 routes boots in 32 MiB (issue 37 item 3), both
/// FIBs built, and quits with every page back.
#[test]
fn a_thousand_routes_of_each_family_boot_in_32m() {
    let dir = TestDir::new();
    let file = mixed_routes(&dir, 1000, 1000);
    let extra = vec!["-initrd".to_string(), file.display().to_string()];
    let mut rig = Rig::start_memory_with(ROUTER6, gen_count(1, 64, false), "32M", 1, extra);
    let line = fib6_line(&rig);
    let n: usize = line
        .split("IPv6 FIB: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // Two connected prefixes and the file's IPv6 lines (a thousand drawn, duplicates and
    // those inside 2001:db8::/32 left out).
    let file_v6 = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter(|l| l.contains(':'))
        .count();
    assert!(file_v6 > 950, "{file_v6}");
    assert_eq!(n, 2 + file_v6, "{line}");
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("1000 routes from the routes file")),
        "{}",
        rig.tail()
    );
    let s = rig.quit();
    let f = s.fib.unwrap_or_else(|| panic!("no fib section: {s}"));
    assert!(f.routes >= 1000, "{s}");
    assert_no_leak(&s);
}

/// The IPv6 FIB's memory and build time in the guest for 6 (the ports' prefixes and four
/// routes), 1,000 and 100,000 IPv6 routes, and what 100,000 of each family needs: prints the
/// boot lines for BENCHMARKS.md ("IPv6 FIB in the guest"). A measurement run by hand:
/// `cargo test -p tests --test router6 ipv6_fib_sizes -- --ignored --nocapture`.
#[test]
#[ignore = "measurement (boots 100,000-route tables): run by hand"]
fn ipv6_fib_sizes_in_the_guest() {
    let dir = TestDir::new();
    for (v4, v6, mem) in [
        (0, 4, "32M"),
        (0, 1000, "32M"),
        (0, 100_000, "128M"),
        (100_000, 100_000, "128M"),
    ] {
        let file = mixed_routes(&dir, v4, v6);
        let extra = vec!["-initrd".to_string(), file.display().to_string()];
        let mut rig = Rig::start_memory_with(ROUTER6, gen_count(1, 64, false), mem, 1, extra);
        let v4_line = rig
            .guest
            .lines()
            .into_iter()
            .find(|l| l.contains("FIB memory"))
            .unwrap_or_default();
        println!("{v4} IPv4 + {v6} IPv6 routes, -m {mem}:");
        println!("  {}", fib6_line(&rig));
        println!("  {v4_line}");
        let s = rig.quit();
        println!("  free pages at boot {} of {mem}", s.free_pages_boot);
        assert_no_leak(&s);
    }
}

/// Issue 37 item 6: an IPv6 router's Intel ports join their Neighbor Discovery groups. On
/// QEMU's 82574L and 82576, whose filters pass a multicast frame only when its group is in the
/// multicast table (`MTA`), a solicitation for the port's global address and one for its
/// link-local address (its group made from the MAC), each sent to the address's
/// solicited-node group, are both answered.
#[test]
fn intel_ports_hear_the_solicited_node_groups_of_the_routers_addresses() {
    for model in [
        harness::qemu::NicModel::E1000e,
        harness::qemu::NicModel::Igb,
    ] {
        let mut rig = Rig::start_intel(
            model,
            ROUTER6,
            gen_count(1, 64, false),
            harness::qemu::NicBus::Root,
            Vec::new(),
        );
        let p0 = rig.port(0);
        let (r0, h0) = (a("2001:db8::1"), a("2001:db8::2"));
        let ll = netstack::router::v6::link_local(MacAddr(guest_mac(0)));
        for target in [r0, ll] {
            let group = ndp::solicited_node(target);
            let ns = nd(
                ndp::multicast_mac(group).0,
                peer_mac(0),
                h0,
                group,
                target,
                None,
            );
            p0.send(&ns).unwrap();
            let na = recv(
                &p0,
                &format!("{} advertisement of {target:x}", model.name()),
                &rig,
            );
            let icmp = ETH_HDR_LEN + IPV6_HDR_LEN;
            assert_eq!(na[icmp], 136, "{}: NA: {na:02x?}", model.name());
            assert_eq!(
                u128::from_be_bytes(na[icmp + 8..icmp + 24].try_into().unwrap()),
                target
            );
        }
        let s = rig.quit();
        let r6 = s.router6.unwrap_or_else(|| panic!("no router6: {s}"));
        assert_eq!(r6.nd_answered, 2, "{}: {s}", model.name());
        assert_no_leak(&s);
    }
}

/// RFC 4861 §6.2 with `ra6=on`: the router advertises each link from its link-local address
/// (the port's /64, on-link and autonomous, and its MTU), at boot and again within 3 s of a
/// Router Solicitation; every frame counted, the advertisements under
/// `gannet_router6_advertisements_sent_total`.
#[test]
fn router_advertisements_on_the_wire() {
    let mut rig = Rig::start_raw(&format!("{ROUTER6} ra6=on"));
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("router6: Router Advertisements on both ports from cpu 0")),
        "{}",
        rig.tail()
    );
    let icmp = ETH_HDR_LEN + IPV6_HDR_LEN;
    let ll0 = netstack::router::v6::link_local(MacAddr(guest_mac(0)));
    let check = |ra: &[u8], what: &str| {
        assert_eq!(
            &ra[ETH_DST],
            &[0x33, 0x33, 0, 0, 0, 1][..],
            "{what}: {ra:02x?}"
        );
        assert_eq!(ra[icmp], 134, "{what}: {ra:02x?}");
        assert_eq!((field(ra, 8), field(ra, 24)), (ll0, a("ff02::1")), "{what}");
        // Prefix Information, the last option: /64, L and A, 2001:db8::.
        let pio = icmp + 16 + 8 + 8;
        assert_eq!(&ra[pio..pio + 4], &[3, 4, 64, 0xc0], "{what}");
        assert_eq!(field(ra, pio + 16 - ETH_HDR_LEN), a("2001:db8::"), "{what}");
    };
    let p0 = rig.port(0);
    let first = recv(&p0, "Router Advertisement at boot", &rig);
    check(&first, "at boot");
    let t = Instant::now();
    let mut rs = ipv6(
        a("fe80::2"),
        a("ff02::2"),
        255,
        IPPROTO_ICMPV6,
        &[133, 0, 0, 0, 0, 0, 0, 0],
    );
    let sum = checksum6(a("fe80::2"), a("ff02::2"), &rs[IPV6_HDR_LEN..]);
    rs[IPV6_HDR_LEN + 2..IPV6_HDR_LEN + 4].copy_from_slice(&sum.to_be_bytes());
    p0.send(&eth([0x33, 0x33, 0, 0, 0, 2], peer_mac(0), &rs))
        .unwrap();
    let again = recv(&p0, "Router Advertisement after a solicitation", &rig);
    check(&again, "solicited");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let s = rig.quit();
    let r6 = s.router6.unwrap_or_else(|| panic!("no router6: {s}"));
    assert!(
        r6.ra_sent >= 3,
        "both ports at boot, and one solicited: {s}"
    );
    assert_eq!(r6.outcomes() + r6.queued_now, r6.rx, "{s}");
    assert_no_leak(&s);
}
