//! Hostile neighbours against router mode (issue 15): spoofed ARP and address scans must not
//! take the neighbour table from real next hops; martian and non-unicast sources get no ICMP
//! and are not forwarded. Each case boots the real image and counts what comes out.

use std::time::{Duration, Instant};

use etherparse::Ipv4Header;
use gannet_tests::*;
use netstack::wire::{ETH_DST, ETH_HDR_LEN};

const ROUTER: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";

/// An ARP frame (RFC 826, Ethernet/IPv4): opcode `op` from `sha`/`spa` to `tha`/`tpa`, in an
/// Ethernet frame to `eth_dst`, padded to 60 bytes.
fn arp(
    eth_dst: [u8; 6],
    op: u16,
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
) -> Vec<u8> {
    let mut f = eth_dst.to_vec();
    f.extend_from_slice(&sha);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&tha);
    f.extend_from_slice(&tpa);
    f.resize(60, 0);
    f
}

/// If `f` is an ARP request for `ip`, its target address; `None` otherwise.
fn arp_request_for(f: &[u8]) -> Option<[u8; 4]> {
    let a = f.get(ETH_HDR_LEN..ETH_HDR_LEN + 28)?;
    (f[12..14] == [0x08, 0x06] && a[6..8] == [0, 1]).then(|| [a[24], a[25], a[26], a[27]])
}

/// A generator frame from 10.0.0.2 (behind port 0) to `dst` with TTL 64.
fn frame_to(dst: [u8; 4], seq: u64) -> Vec<u8> {
    let mut f = gen::build_frame(0, seq, 0, 60).expect("frame");
    let (mut ip, _) = Ipv4Header::from_slice(&f[ETH_HDR_LEN..]).expect("IPv4");
    ip.destination = dst;
    ip.header_checksum = ip.calc_header_checksum();
    let mut hdr = Vec::new();
    ip.write(&mut hdr).expect("IPv4 header");
    f[ETH_HDR_LEN..ETH_HDR_LEN + hdr.len()].copy_from_slice(&hdr);
    f
}

/// The host 10.0.1.3 behind port 1 (a next hop the generator does not play).
const NEW_HOP: [u8; 4] = [10, 0, 1, 3];
const NEW_HOP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x0b, 0x03];

/// Reads what port 1 sent for up to `wait`: answers ARP for 10.0.1.2 (the generator's host)
/// and [`NEW_HOP`]; returns (frames to 10.0.1.2, frames to [`NEW_HOP`], ARP requests for
/// 10.0.1.2).
fn serve_port1(p1: &RawPort, wait: Duration) -> (usize, usize, usize) {
    let (mut to_b, mut to_new, mut asked_b) = (0, 0, 0);
    let deadline = Instant::now() + wait;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Some(f) = p1.recv_timeout(left) else {
            break;
        };
        if let Some(reply) = gen::arp_reply(&f, 1) {
            asked_b += 1;
            p1.send(&reply).unwrap();
        } else if arp_request_for(&f) == Some(NEW_HOP) {
            let mut tha = [0u8; 6];
            tha.copy_from_slice(&f[6..12]);
            p1.send(&arp(tha, 2, NEW_HOP_MAC, NEW_HOP, tha, [10, 0, 1, 1]))
                .unwrap();
        } else if f.len() >= ETH_HDR_LEN + 20 && f[12..14] == [0x08, 0x00] {
            match (&f[ETH_DST], &f[ETH_HDR_LEN + 16..ETH_HDR_LEN + 20]) {
                (d, [10, 0, 1, 2]) if d == peer_mac(1) => to_b += 1,
                (d, ip) if d == NEW_HOP_MAC && ip == NEW_HOP => to_new += 1,
                _ => {}
            }
        }
    }
    (to_b, to_new, asked_b)
}

/// Item 1: ARP requests for 10.0.0.1 from 252 made-up senders (twice: learning, then
/// refreshing) are answered but learned only as Stale, never-used entries; a new next hop still
/// resolves and gets every frame, and the real, idle 10.0.1.2 keeps its entry (no new ARP
/// request for it). On main the fakes fill the 64-entry table as Reachable: the new next hop
/// gets 0/50 (`neigh_table_full`).
#[test]
fn spoofed_arp_requests_do_not_take_the_neighbour_table() {
    let mut rig = Rig::start_raw(ROUTER);
    let (p0, p1) = (rig.port(0), rig.port(1));
    // The real next hop 10.0.1.2, resolved by forwarding.
    p0.send(&frame_to([10, 0, 1, 2], 1)).unwrap();
    let (to_b, _, asked) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!((to_b, asked), (1, 1), "10.0.1.2 resolved\n{}", rig.tail());

    // (The management plane sees ARP too and may answer as well: count answered senders.)
    let mut answered = std::collections::HashSet::new();
    for round in 0..2 {
        for k in 3..=254u8 {
            let mac = [0x02, 0xee, 0, 0, round, k];
            p0.send(&arp(
                [0xff; 6],
                1,
                mac,
                [10, 0, 0, k],
                [0; 6],
                [10, 0, 0, 1],
            ))
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(2);
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                let Some(r) = p0.recv_timeout(left) else {
                    break;
                };
                if arp_request_for(&r).is_none() && r[12..14] == [0x08, 0x06] {
                    answered.insert(r[ETH_DST.start..ETH_DST.end].to_vec());
                }
                if r[ETH_DST] == mac {
                    break;
                }
            }
        }
    }
    assert_eq!(
        answered.len(),
        2 * 252,
        "every request for our address answered"
    );
    // A new next hop resolves and gets every one of 50 frames (the first waits for ARP).
    p0.send(&frame_to(NEW_HOP, 100)).unwrap();
    let (_, first, _) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!(first, 1, "the new next hop's first frame\n{}", rig.tail());
    for seq in 1..50 {
        p0.send(&frame_to(NEW_HOP, 100 + seq)).unwrap();
    }
    let (_, to_new, _) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!(to_new, 49, "frames to the new next hop\n{}", rig.tail());
    // The idle real neighbour was not evicted: its frames go at once, with no new request.
    for seq in 0..20 {
        p0.send(&frame_to([10, 0, 1, 2], 200 + seq)).unwrap();
    }
    let (to_b, _, asked) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!((to_b, asked), (20, 0), "10.0.1.2 still resolved");
    let s = rig.quit();
    let r = router(&s);
    assert_eq!(r.drops.neigh_table_full, 0);
    assert_eq!(r.drops.neigh_queue_full, 0);
    assert_eq!(r.arp_replies, 2 * 252);
    assert_eq!(r.forwarded, 1 + 50 + 20);
    assert_no_leak(&s);
}

/// Item 2: a scan of silent addresses in 10.0.1.0/24 at about 400 frames/s from a host that
/// answers no ARP holds at most a quarter of the 64-entry table Incomplete (at most 16 frames
/// wait, `queued_now`); the scan's frames are given back as `neigh_evicted` or
/// `neigh_timeout`; a new neighbour that answers ARP gets its frames during the scan, and the
/// known 10.0.1.2 keeps its entry. On main the table fills with Incomplete entries: the new
/// neighbour gets 0/20 (`neigh_table_full`).
#[test]
fn an_address_scan_leaves_resolved_neighbours_alone() {
    let mut rig = Rig::start_raw(ROUTER);
    let (p0, p1) = (rig.port(0), rig.port(1));
    p0.send(&frame_to([10, 0, 1, 2], 1)).unwrap();
    let (to_b, _, asked) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!((to_b, asked), (1, 1), "10.0.1.2 resolved\n{}", rig.tail());

    let start = Instant::now();
    let (mut scanned, mut to_new, mut asked_b, mut new_sent) = (0u64, 0, 0, 0u64);
    let mut max_queued = 0;
    while start.elapsed() < Duration::from_secs(3) {
        for _ in 0..20 {
            let host = 10 + (scanned % 240) as u8;
            p0.send(&frame_to([10, 0, 1, host], 1000 + scanned))
                .unwrap();
            scanned += 1;
            let (_, n, a) = serve_port1(&p1, Duration::from_micros(2500));
            to_new += n;
            asked_b += a;
        }
        p0.send(&frame_to(NEW_HOP, 10 + new_sent)).unwrap();
        new_sent += 1;
        if new_sent % 10 == 5 {
            max_queued = max_queued.max(router(&rig.stats()).queued_now);
        }
    }
    let (_, n, a) = serve_port1(&p1, Duration::from_secs(1));
    to_new += n;
    asked_b += a;
    assert!(scanned >= 300, "scan too slow: {scanned} frames");
    assert!(
        max_queued <= 16,
        "{max_queued} frames wait for ARP (cap 16 × 1)"
    );
    assert!(
        to_new as u64 + 2 >= new_sent,
        "new neighbour got {to_new} of {new_sent} during the scan\n{}",
        rig.tail()
    );
    assert_eq!(asked_b, 0, "10.0.1.2 was evicted and asked again");
    for seq in 0..20 {
        p0.send(&frame_to([10, 0, 1, 2], 5000 + seq)).unwrap();
    }
    let (to_b, _, asked) = serve_port1(&p1, Duration::from_secs(3));
    assert_eq!((to_b, asked), (20, 0), "10.0.1.2 still resolved");
    let s = rig.quit();
    let r = router(&s);
    let d = &r.drops;
    assert_eq!(d.neigh_table_full, 0);
    assert_eq!(d.neigh_queue_full, 0);
    // Every frame routed towards port 1 was forwarded or given back and counted.
    assert_eq!(
        r.forwarded + d.neigh_evicted + d.neigh_timeout + d.neigh_flushed,
        1 + scanned + new_sent + 20,
        "{s}"
    );
    assert_eq!(r.forwarded, 1 + to_new as u64 + 20);
    assert!(
        d.neigh_evicted > 0,
        "the scan churned the Incomplete entries"
    );
    assert_no_leak(&s);
}

/// `frame_to` with source `src` and TTL `ttl`.
fn frame_from(src: [u8; 4], dst: [u8; 4], ttl: u8, seq: u64) -> Vec<u8> {
    let mut f = frame_to(dst, seq);
    let (mut ip, _) = Ipv4Header::from_slice(&f[ETH_HDR_LEN..]).expect("IPv4");
    ip.source = src;
    ip.time_to_live = ttl;
    ip.header_checksum = ip.calc_header_checksum();
    let mut hdr = Vec::new();
    ip.write(&mut hdr).expect("IPv4 header");
    f[ETH_HDR_LEN..ETH_HDR_LEN + hdr.len()].copy_from_slice(&hdr);
    f
}

/// Item 4: datagrams from a broadcast, network or own address (and the classic martians) get
/// no ICMP error (RFC 1812 §4.3.2.7) and no echo reply, and are not forwarded (§5.3.7): each
/// is dropped and counted as `martian_src`. A datagram from 10.0.0.2 still gets its Time
/// Exceeded and is still forwarded, so silence is not a dead router. On main, TTL 1 from
/// 10.0.0.255, 10.0.0.0 or 10.0.0.1 got Time Exceeded sent to that address, the echo request
/// from 10.0.0.255 was answered, and with TTL 64 they were forwarded.
#[test]
fn non_unicast_and_own_sources_get_no_icmp_and_are_not_forwarded() {
    let mut rig = Rig::start_raw(ROUTER);
    let (p0, p1) = (rig.port(0), rig.port(1));
    // Resolve 10.0.1.2 first so a forwarded martian would leave at once.
    p0.send(&frame_to([10, 0, 1, 2], 1)).unwrap();
    assert_eq!(serve_port1(&p1, Duration::from_secs(3)).0, 1);
    let sources: [[u8; 4]; 8] = [
        [10, 0, 0, 255],
        [10, 0, 0, 0],
        [10, 0, 0, 1],
        [10, 0, 1, 1],
        [10, 0, 1, 255],
        [0, 0, 0, 0],
        [127, 0, 0, 1],
        [224, 0, 0, 9],
    ];
    for (i, src) in sources.iter().enumerate() {
        p0.send(&frame_from(*src, [10, 0, 1, 2], 1, 10 + i as u64))
            .unwrap();
        p0.send(&frame_from(*src, [10, 0, 1, 2], 64, 20 + i as u64))
            .unwrap();
    }
    // An echo request from the directed broadcast address to the router.
    let mut echo = Vec::new();
    etherparse::PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
        .ipv4([10, 0, 0, 255], [10, 0, 0, 1], 64)
        .icmpv4_echo_request(0x4711, 1)
        .write(&mut echo, b"broadcast ping")
        .unwrap();
    p0.send(&echo).unwrap();
    let back: Vec<_> = p0
        .collect(Duration::from_secs(2))
        .into_iter()
        .filter(|f| f[12..14] == [0x08, 0x00])
        .collect();
    assert!(back.is_empty(), "answered to a martian source: {back:02x?}");
    let (to_b, _, _) = serve_port1(&p1, Duration::from_secs(1));
    assert_eq!(to_b, 0, "a martian source was forwarded");
    // The same from 10.0.0.2: Time Exceeded comes back, TTL 64 goes through.
    p0.send(&frame_from([10, 0, 0, 2], [10, 0, 1, 2], 1, 90))
        .unwrap();
    let te = p0
        .recv_timeout(FRAME_TIMEOUT)
        .expect("Time Exceeded to 10.0.0.2");
    assert_eq!(&te[ETH_HDR_LEN + 16..ETH_HDR_LEN + 20], &[10, 0, 0, 2]);
    p0.send(&frame_from([10, 0, 0, 2], [10, 0, 1, 2], 64, 91))
        .unwrap();
    assert_eq!(serve_port1(&p1, Duration::from_secs(3)).0, 1);
    let s = rig.quit();
    let r = router(&s);
    assert_eq!(r.drops.martian_src, 2 * sources.len() as u64 + 1, "{s}");
    assert_eq!(r.icmp_sent, 1);
    assert_eq!(r.echo_replies, 0);
    assert_eq!(r.forwarded, 2);
    assert_no_leak(&s);
}
