//! Issue 38 (the kernel side, first part): the stock NAT44 gateway, `mode=nat`, booted in
//! QEMU with real frames on its two ports: inside datagrams leave the outside port from the
//! pool address and the dynamic range, the reply comes back to the inside host, an
//! unsolicited datagram is dropped and counted by reason, ARP for the pool is answered on the
//! outside, the counters reach `STATS` and `/metrics` by name, every page comes back; a bad
//! configuration stops the boot by name; jumbo frames (several pages) are translated both
//! ways with checksums right over their whole payload.

use std::time::Duration;

use etherparse::{Ipv4Header, PacketBuilder, UdpHeader};
use gannet_tests::*;

const POOL: [u8; 4] = [192, 0, 2, 1];
const SERVER: [u8; 4] = [198, 51, 100, 7];
const HOST: [u8; 4] = [10, 0, 0, 2];
const APPEND: &str = "mode=nat nat_pool=192.0.2.1 nat_ports=20000-20999 nat_sessions=1024";
/// The management plane's bearer token (`mgmt_token=`) where a test `PUT`s.
const MGMT_TOKEN: &str = "gannet-test-token-0123456789";

/// A UDP datagram sent on `port` (from its peer to the guest's MAC).
fn udp(port: usize, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(peer_mac(port), guest_mac(port))
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut f, b"through the nat")
        .unwrap();
    f
}

/// [`udp`] with `len` bytes of payload.
fn udp_sized(port: usize, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut f = Vec::new();
    PacketBuilder::ethernet2(peer_mac(port), guest_mac(port))
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut f, &payload)
        .unwrap();
    f
}

/// (source, source port, destination, destination port) of a UDP frame whose IPv4 and UDP
/// checksums etherparse's recomputation confirms.
fn endpoints(f: &[u8]) -> ([u8; 4], u16, [u8; 4], u16) {
    let (ip, rest) = Ipv4Header::from_slice(&f[14..]).unwrap();
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header");
    let (udp, data) = UdpHeader::from_slice(rest).unwrap();
    let data = &data[..usize::from(udp.length) - 8];
    assert_eq!(
        udp.checksum,
        udp.calc_checksum_ipv4(&ip, data).unwrap(),
        "UDP"
    );
    (
        ip.source,
        udp.source_port,
        ip.destination,
        udp.destination_port,
    )
}

#[test]
fn nat_translates_out_and_back_drops_unsolicited_and_answers_arp() {
    let mut rig = Rig::start(APPEND, gen_count(1, 64, false));
    assert!(
        rig.guest.lines().iter().any(|l| l.contains(
            "nat: pool of 1 address(es), ports 20000-20999, AddressAndPortDependent filtering, 0 static forward(s); 1024 sessions per core"
        )),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    for _ in 0..3 {
        p0.send(&udp(0, HOST, 5000, SERVER, 53)).unwrap();
    }
    let out = receive_frames(&p1, 3);
    assert_eq!(out.len(), 3, "{}", rig.tail());
    for f in &out {
        assert_eq!((&f[0..6], &f[6..12]), (&peer_mac(1)[..], &guest_mac(1)[..]));
        assert_eq!(endpoints(f), (POOL, 20000, SERVER, 53));
    }
    // The server's replies come in to the mapping; a datagram to a port with no mapping and
    // one from another server port (address-and-port-dependent filtering) do not.
    for _ in 0..2 {
        p1.send(&udp(1, SERVER, 53, POOL, 20000)).unwrap();
    }
    p1.send(&udp(1, SERVER, 53, POOL, 20001)).unwrap();
    p1.send(&udp(1, SERVER, 54, POOL, 20000)).unwrap();
    let back = receive_frames(&p0, 2);
    assert_eq!(back.len(), 2, "{}", rig.tail());
    for f in &back {
        assert_eq!((&f[0..6], &f[6..12]), (&peer_mac(0)[..], &guest_mac(0)[..]));
        assert_eq!(endpoints(f), (SERVER, 53, HOST, 5000));
    }
    // ARP for the pool address on the outside: answered with the outside port's MAC.
    let mut arp = vec![0u8; 60];
    let n = netstack::simframes::arp_request(
        &mut arp,
        netstack::MacAddr(peer_mac(1)),
        SERVER.into(),
        POOL.into(),
    );
    p1.send(&arp[..n.max(60)]).unwrap();
    let replies = receive_frames(&p1, 1);
    assert_eq!(replies.len(), 1, "{}", rig.tail());
    let a = netstack::router::arp::parse(&replies[0][14..]).expect("an ARP reply");
    assert_eq!(a.op, netstack::router::arp::ARP_REPLY);
    assert_eq!((a.sha.0, a.spa), (guest_mac(1), u32::from_be_bytes(POOL)));
    // The session table on the console: occupancy, then the session, filtered.
    let from = rig.guest.line_count();
    rig.guest.send_line("nat udp port 53").unwrap();
    let want = "nat cpu 0 udp 10.0.0.2:5000 > 198.51.100.7:53, reply 198.51.100.7:53 > 192.0.2.1:20000, udp, idle ";
    rig.guest
        .wait_for_line_from(from, |l| l.contains(want), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    assert!(
        rig.guest.lines()[from..]
            .iter()
            .any(|l| l.contains("nat cpu 0 sessions 1 of 1024, mappings 1, expired 0")),
        "{}",
        rig.tail()
    );
    let from = rig.guest.line_count();
    rig.guest.send_line("nat port http").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("console: nat `port http`: `http`: expected a port"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    let s = rig.stats();
    assert_eq!(s.nf_name, "nat", "{s}");
    let c = &s.nf_counters;
    assert_eq!(
        (c.one("outbound"), c.one("inbound")),
        (Some(3), Some(2)),
        "{s}"
    );
    assert_eq!(c.one("sessions_opened"), Some(1), "{s}");
    // Gauges: the one session and its mapping are still in use.
    assert_eq!(
        (c.one("sessions"), c.one("mappings")),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(c.one("arp_replies"), Some(1), "{s}");
    // Reason 3 no_mapping, 4 filtered (`netstack::nat::NatDrop::NAMES`).
    let drops = c.per_index("drops").expect("drops by reason");
    assert_eq!(
        (drops[3], drops[4], drops.iter().sum::<u64>()),
        (1, 1, 2),
        "{s}"
    );
    let text = rig.metrics();
    for want in [
        "gannet_nf_nat_outbound_total 3",
        "gannet_nf_nat_inbound_total 2",
        "gannet_nf_nat_drops_total{reason=\"3\"} 1",
        "gannet_nf_nat_arp_replies_total 1",
        "# TYPE gannet_nf_nat_sessions gauge",
        "gannet_nf_nat_sessions 1",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Nat, "{s}");
    assert_eq!((s.ports[1].tx, s.ports[0].tx), (4, 2), "{s}");
    assert_eq!(s.nf.dropped, 2, "{s}");
    assert_no_leak(&s);
}

#[test]
fn a_nat_without_a_pool_or_with_a_forward_outside_it_stops_the_boot_by_name() {
    let (exit, lines) = boot_failing("mode=nat", 2);
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("config error") && l.contains("nat_pool")),
        "{lines:?}"
    );
    let (exit, lines) = boot_failing(
        "mode=nat nat_pool=192.0.2.1 nat_forward=tcp:192.0.2.9:80,10.0.0.2:80",
        2,
    );
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains(
            "config error: nat: static forward 1: its outside address is not in the pool"
        )),
        "{lines:?}"
    );
}

/// Issue 38 item 2: two cores share the NAT (`queues=2`, virtio-net multi-queue on the tap
/// backend, which steers each frame to a queue by the host's flow hash). Every inside host
/// is translated by the core that owns it (its outside port lies in that core's block of
/// `nat_ports`), every reply reaches its host whichever queue it lands on (a core that does
/// not own the flow hands it over: only the owner has the session), and both cores work.
/// Needs root and /dev/net/tun, as the other tap tests.
#[test]
fn two_cores_translate_their_own_flows_and_hand_over_the_rest() {
    const HOSTS: u8 = 16;
    let mut rig = Rig::start_tap(
        "mode=nat nat_pool=192.0.2.1 nat_ports=20000-20999 nat_sessions=1024 queues=2",
        gen_count(1, 64, false),
        2,
        2,
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    let host = |i: u8| [10, 0, 0, 10 + i];
    for i in 0..HOSTS {
        p0.send(&udp(0, host(i), 5000 + u16::from(i), SERVER, 53))
            .unwrap();
    }
    let out = receive_frames(&p1, usize::from(HOSTS));
    assert_eq!(out.len(), usize::from(HOSTS), "{}", rig.tail());
    let mut mapped = Vec::new();
    for f in &out {
        let (src, sport, dst, dport) = endpoints(f);
        assert_eq!((src, dst, dport), (POOL, SERVER, 53));
        mapped.push(sport);
    }
    // Which host each mapping is: by the order of the inside source ports (one frame each).
    // The owner's block: core 0 has 20000-20499, core 1 20500-20999.
    let mut by_host = Vec::new();
    for i in 0..HOSTS {
        let addr = u32::from_be_bytes(host(i));
        let owner =
            netstack::nat::ports::owner_of_inside(addr, 2, netstack::config::nat::PAIRING_KEY);
        by_host.push(owner);
    }
    let owned = |port: u16| usize::from(port >= 20500);
    // Every reply, to every mapping, arrives at its host.
    for &port in &mapped {
        p1.send(&udp(1, SERVER, 53, POOL, port)).unwrap();
    }
    let back = receive_frames(&p0, usize::from(HOSTS));
    assert_eq!(back.len(), usize::from(HOSTS), "{}", rig.tail());
    let mut hosts_seen = Vec::new();
    for f in &back {
        let (src, sport, dst, dport) = endpoints(f);
        assert_eq!((src, sport), (SERVER, 53));
        let i = dst[3] - 10;
        assert_eq!(dport, 5000 + u16::from(i), "{dst:?}");
        hosts_seen.push(i);
    }
    hosts_seen.sort_unstable();
    assert_eq!(hosts_seen, (0..HOSTS).collect::<Vec<_>>());
    let s = rig.quit();
    let c = &s.nf_counters;
    assert_eq!(
        (c.one("outbound"), c.one("inbound")),
        (Some(16), Some(16)),
        "{s}"
    );
    assert_eq!(c.per_index("drops").unwrap().iter().sum::<u64>(), 0, "{s}");
    // Both cores translated (each owns some of the 16 hosts), and frames were handed over:
    // with 16 flows on two queues by the host's hash, some land away from their owner.
    let owners: Vec<usize> = by_host.iter().map(|&o| usize::from(o)).collect();
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    let mut ports_of = [0usize; 2];
    for &p in &mapped {
        ports_of[owned(p)] += 1;
    }
    assert_eq!(
        ports_of,
        [
            owners.iter().filter(|&&o| o == 0).count(),
            owners.iter().filter(|&&o| o == 1).count()
        ],
        "each host's mapping comes from its owner's block"
    );
    assert!(s.nf.handed_off > 0, "{s}");
    assert_eq!(s.nf.handoff_dropped, 0, "{s}");
    assert!(s.per_cpu.iter().all(|c| c.forwarded > 0), "{s}");
    assert_no_leak(&s);
}

/// Issue 38 item 6 (in part): Linux hosts through the NAT (`--backend tap`, a namespace per
/// port). The inside host (10.0.0.2, its gateway the NAT's management address 10.0.0.1 on
/// port 0) runs iperf3 TCP and UDP to the outside host (192.0.2.10, on the pool's network),
/// whose server sees the connection come from the pool address; the outside host learns the
/// pool address's MAC by ARP from the NAT; its unsolicited pings to the pool are dropped and
/// counted; curl changes the timeouts through the management plane. Needs root and
/// /dev/net/tun.
#[test]
fn linux_hosts_talk_through_the_nat_and_the_outside_sees_the_pool_address() {
    use gannet_tests::hosts::{boot_with_planned_hosts, out};
    use harness::hosts::HostPlan;
    require_tap();
    harness::setup::ensure_host_tools().expect("ping, curl and iperf3");
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let (peer0, peer1) = (mac(peer_mac(0)), mac(peer_mac(1)));
    let append = format!(
        "mode=nat nat_pool=192.0.2.1 ip0=10.0.0.1/24 mgmt=ip0 mgmt_token={MGMT_TOKEN} peer0={peer0} peer1={peer1}"
    );
    let plans = [
        HostPlan {
            port: 0,
            addr: [10, 0, 0, 2].into(),
            len: 24,
            gateway: Some([10, 0, 0, 1].into()),
            mac: Some(peer0),
            mtu: None,
            ipv6: None,
            slaac: false,
        },
        HostPlan {
            port: 1,
            addr: [192, 0, 2, 10].into(),
            len: 24,
            gateway: None,
            mac: Some(peer1),
            mtu: None,
            ipv6: None,
            slaac: false,
        },
    ];
    let (net, mut guest, hosts) = boot_with_planned_hosts(&append, &plans);
    let iperf3 = |udp: bool| {
        let server = std::process::Command::new("ip")
            .args(["netns", "exec", hosts.namespace(1).unwrap()])
            .args(["iperf3", "-s", "-1", "-J", "-B", "192.0.2.10"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("iperf3 server");
        std::thread::sleep(Duration::from_millis(500));
        let mut cmd = vec!["timeout", "60", "iperf3", "-c", "192.0.2.10", "-t", "2"];
        cmd.extend_from_slice(&["--connect-timeout", "5000", "-J"]);
        if udp {
            cmd.extend_from_slice(&["-u", "-b", "2M"]);
        }
        let o = hosts.exec(0, &cmd).expect("iperf3 client");
        let s = server.wait_with_output().expect("iperf3 server output");
        assert!(o.status.success(), "iperf3 (udp {udp}): {}", out(&o));
        let client: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let server: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
        (client, server)
    };
    let (client, server) = iperf3(false);
    let bytes = client["end"]["sum_received"]["bytes"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(bytes > 100_000.0, "TCP moved {bytes} bytes: {client}");
    assert_eq!(
        server["start"]["accepted_connection"]["host"], "192.0.2.1",
        "the outside host sees the pool address: {server}"
    );
    let (client, _) = iperf3(true);
    let packets = client["end"]["sum"]["packets"].as_u64().unwrap_or(0);
    assert!(packets > 0, "UDP sent nothing: {client}");
    // Unsolicited: pings from the outside to the pool address get no answer.
    let o = hosts
        .exec(
            1,
            &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "192.0.2.1"],
        )
        .unwrap();
    assert!(!o.status.success(), "{}", out(&o));
    // Issue 38 item 7: the timeouts changed at run time through the management plane, by
    // curl from the inside host (`PUT /nat_timeouts`, the bearer token); read back by `GET`.
    let url = "http://10.0.0.1:9100/nat_timeouts";
    let auth = format!("Authorization: Bearer {MGMT_TOKEN}");
    let curl = |args: &[&str]| {
        let mut cmd = vec!["curl", "-sS", "-m", "10", "-i"];
        cmd.extend_from_slice(args);
        let o = hosts.exec(0, &cmd).expect("curl");
        assert!(o.status.success(), "curl {args:?}: {}", out(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let put = |body: &str| curl(&["-X", "PUT", "-H", &auth, "--data-binary", body, url]);
    let r = put("7440,240,1\n");
    assert!(r.starts_with("HTTP/1.0 400 Bad Request"), "{r}");
    let r = put("# UDP 1 s\n7440,240,1,60\n");
    assert!(r.starts_with("HTTP/1.0 200 OK"), "{r}");
    assert!(r.contains("generation 2"), "{r}");
    guest
        .wait_for_line(
            |l| l.contains("nat cpu 0 timeouts now 7440,240,1,60 s"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("the core took no new timeouts: {e:#}"));
    let r = curl(&[url]);
    assert!(r.starts_with("HTTP/1.0 200 OK"), "{r}");
    assert!(r.contains("ETag: \"gen-2\""), "{r}");
    assert!(r.ends_with("\r\n\r\n7440,240,1,60\n"), "{r}");
    let m = curl(&["http://10.0.0.1:9100/metrics"]);
    for want in [
        "gannet_mgmt_put_nat_timeouts_total{result=\"ok\"} 1",
        "gannet_mgmt_put_nat_timeouts_total{result=\"bad_request\"} 1",
    ] {
        assert!(m.lines().any(|l| l == want), "no `{want}` in:\n{m}");
    }
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    let c = &s.nf_counters;
    assert!(c.one("outbound").unwrap_or(0) > 100, "{s}");
    assert!(c.one("inbound").unwrap_or(0) > 100, "{s}");
    assert!(
        c.one("sessions_opened").unwrap_or(0) >= 3,
        "TCP, UDP and its control: {s}"
    );
    assert!(c.one("arp_replies").unwrap_or(0) >= 1, "{s}");
    // The pings: an echo request from the outside meets no mapping (reason 3, no_mapping).
    let drops = c.per_index("drops").unwrap();
    assert!(drops[3] >= 2, "{s}");
    assert_no_leak(&s);
    drop(hosts);
    drop(net);
}

/// Issue 38 item 7 (in part): the timeouts changed at run time on the console apply to the
/// sessions at once: with UDP's at 1 s, an idle session (and its mapping) is gone 2 s later,
/// and the late reply meets no mapping.
#[test]
fn timeouts_set_on_the_console_expire_idle_sessions() {
    let mut rig = Rig::start(APPEND, gen_count(1, 64, false));
    let from = rig.guest.line_count();
    rig.guest.send_line("nat timeouts 1,2").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("console: nat timeouts `1,2`: expected EST,TRANS,UDP,ICMP"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    rig.guest.send_line("nat timeouts 7440,240,1,60").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("nat cpu 0 timeouts now 7440,240,1,60 s"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    let (p0, p1) = (rig.port(0), rig.port(1));
    p0.send(&udp(0, HOST, 5000, SERVER, 53)).unwrap();
    let out = receive_frames(&p1, 1);
    assert_eq!(out.len(), 1, "{}", rig.tail());
    assert_eq!(endpoints(&out[0]).1, 20000);
    std::thread::sleep(Duration::from_millis(2500));
    p1.send(&udp(1, SERVER, 53, POOL, 20000)).unwrap();
    assert!(
        receive_frames(&p0, 0).is_empty(),
        "the late reply passed: {}",
        rig.tail()
    );
    let s = rig.quit();
    let drops = s.nf_counters.per_index("drops").unwrap();
    assert_eq!(drops[3], 1, "no_mapping: {s}");
    assert_no_leak(&s);
}

/// Jumbo frames (MTU 9000: a 9,014-byte frame arrives in several pages) are translated both
/// ways by their headers in the first page, every checksum updated incrementally: etherparse's
/// recomputation over the whole 8,972-byte payload agrees.
#[test]
fn jumbo_frames_are_translated_both_ways() {
    let mut rig = Rig::start_mtu(APPEND, gen_count(1, 64, false), 9000);
    let (p0, p1) = (rig.port(0), rig.port(1));
    const PAYLOAD: usize = 9000 - 20 - 8;
    p0.send(&udp_sized(0, HOST, 5000, SERVER, 53, PAYLOAD))
        .unwrap();
    let out = receive_frames(&p1, 1);
    assert_eq!(out.len(), 1, "{}", rig.tail());
    assert_eq!(out[0].len(), 14 + 9000);
    let (src, sport, dst, dport) = endpoints(&out[0]);
    assert_eq!((src, dst, dport), (POOL, SERVER, 53));
    p1.send(&udp_sized(1, SERVER, 53, POOL, sport, PAYLOAD))
        .unwrap();
    let back = receive_frames(&p0, 1);
    assert_eq!(back.len(), 1, "{}", rig.tail());
    assert_eq!(endpoints(&back[0]), (SERVER, 53, HOST, 5000));
    let s = rig.quit();
    let c = &s.nf_counters;
    assert_eq!(
        (c.one("outbound"), c.one("inbound")),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(c.one("not_translated"), Some(0), "{s}");
    assert_no_leak(&s);
}
