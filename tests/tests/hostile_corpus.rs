//! The hostile-frame corpus (issue 15), replayed in io, l2 and router mode on the dgram
//! backend: the guest stays up, every frame lands in exactly one counter (forwarded, a drop by
//! reason, or the router's other outcomes and queue: nothing uncounted, nothing twice), normal
//! generator traffic passes afterwards, and quit is clean with no leaked page.

use std::time::Duration;

use gannet_tests::*;
use netstack::wire::ETH_HDR_LEN;

/// One's-complement checksum of `d` (RFC 1071).
fn csum(d: &[u8]) -> u16 {
    let mut s: u32 = d
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An Ethernet header to port 0's guest MAC from its peer, ethertype `ty`.
fn eth(ty: u16) -> Vec<u8> {
    let mut f = guest_mac(0).to_vec();
    f.extend_from_slice(&peer_mac(0));
    f.extend_from_slice(&ty.to_be_bytes());
    f
}

/// An IPv4 packet from `src` to 10.0.1.2 with `opts` (padded to 4 bytes), TTL `ttl`,
/// flags/fragment word `frag`, `payload` bytes, a valid checksum.
fn ipv4(src: [u8; 4], ttl: u8, frag: u16, opts: &[u8], payload: usize) -> Vec<u8> {
    let mut o = opts.to_vec();
    o.resize(opts.len().div_ceil(4) * 4, 0);
    let ihl = 5 + o.len() / 4;
    let total = (ihl * 4 + payload) as u16;
    let mut h = vec![0x40 | ihl as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[ttl, 17, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[10, 0, 1, 2]);
    h.extend_from_slice(&o);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.resize(h.len() + payload, 0x5a);
    h
}

fn ip_frame(ip: Vec<u8>) -> Vec<u8> {
    let mut f = eth(0x0800);
    f.extend(ip);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// The corpus: malformed and hostile frames, each with what it tests.
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let good = || ipv4([10, 0, 0, 2], 64, 0, &[], 26);
    let mut c: Vec<(&'static str, Vec<u8>)> = Vec::new();
    // Runts (shorter than an Ethernet header) and a bare header.
    for n in [1usize, 6, 13] {
        c.push(("runt", vec![0xff; n]));
    }
    c.push(("ethernet header only", eth(0x0800)));
    // Truncated IPv4 headers.
    for n in [1usize, 10, 19] {
        let mut f = eth(0x0800);
        f.extend_from_slice(&good()[..n]);
        c.push(("truncated IPv4 header", f));
    }
    // Bad IHL, version, total length, checksum.
    for ihl in [0u8, 4, 15] {
        let mut ip = good();
        ip[0] = 0x40 | ihl;
        c.push(("bad IHL", ip_frame(ip)));
    }
    let mut ip = good();
    ip[0] = 0x65;
    c.push(("IP version 6 in an IPv4 ethertype", ip_frame(ip)));
    for total in [0u16, 19, 1500, 0xffff] {
        let mut ip = good();
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[10..12].fill(0);
        let k = csum(&ip[..20]);
        ip[10..12].copy_from_slice(&k.to_be_bytes());
        c.push(("bad total length", ip_frame(ip)));
    }
    let mut ip = good();
    ip[10] ^= 0xff;
    c.push(("bad header checksum", ip_frame(ip)));
    // Options, fragments, TTL 0 and 1.
    c.push((
        "IP options (record route)",
        ip_frame(ipv4([10, 0, 0, 2], 64, 0, &[7, 7, 4, 0, 0, 0, 0], 26)),
    ));
    c.push((
        "IP options (garbage length)",
        ip_frame(ipv4([10, 0, 0, 2], 64, 0, &[0x83, 0xff], 26)),
    ));
    c.push((
        "first fragment",
        ip_frame(ipv4([10, 0, 0, 2], 64, 0x2000, &[], 26)),
    ));
    c.push((
        "later fragment",
        ip_frame(ipv4([10, 0, 0, 2], 64, 0x0010, &[], 26)),
    ));
    c.push((
        "DF fragment offset",
        ip_frame(ipv4([10, 0, 0, 2], 64, 0x4fff, &[], 26)),
    ));
    for ttl in [0u8, 1] {
        c.push(("TTL 0/1", ip_frame(ipv4([10, 0, 0, 2], ttl, 0, &[], 26))));
    }
    // Broadcast and martian sources.
    for src in [
        [255, 255, 255, 255],
        [10, 0, 0, 255],
        [0, 0, 0, 0],
        [127, 0, 0, 1],
        [224, 0, 0, 1],
        [10, 0, 0, 1],
    ] {
        c.push((
            "martian or broadcast source",
            ip_frame(ipv4(src, 64, 0, &[], 26)),
        ));
    }
    // Broadcast and multicast destinations (Ethernet).
    let mut f = ip_frame(good());
    f[..6].fill(0xff);
    c.push(("Ethernet broadcast", f));
    let mut f = ip_frame(good());
    f[..6].copy_from_slice(&[0x01, 0, 0x5e, 0, 0, 1]);
    c.push(("Ethernet multicast", f));
    let mut f = ip_frame(good());
    f[..6].copy_from_slice(&[0x02, 0xde, 0xad, 0, 0, 1]);
    c.push(("another host's MAC", f));
    // ARP garbage.
    let mut a = eth(0x0806);
    a.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
    c.push(("truncated ARP", a.clone()));
    let mut a2 = a.clone();
    a2.extend_from_slice(&[0, 9]);
    a2.resize(60, 0xee);
    c.push(("ARP bad opcode", a2));
    let mut a3 = eth(0x0806);
    a3.extend_from_slice(&[0, 6, 0x86, 0xdd, 16, 16, 0, 1]);
    a3.resize(60, 0);
    c.push(("ARP with other hardware/protocol", a3));
    let mut a4 = arp_request([10, 0, 0, 1]);
    a4[ETH_HDR_LEN + 14..ETH_HDR_LEN + 18].copy_from_slice(&[255, 255, 255, 255]);
    c.push(("ARP from a broadcast sender", a4));
    // Other ethertypes.
    let mut v = eth(0x8100);
    v.extend_from_slice(&[0, 5, 8, 0]);
    v.extend(good());
    c.push(("802.1Q VLAN", v));
    let mut v6 = eth(0x86dd);
    v6.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    v6.resize(ETH_HDR_LEN + 48, 0);
    c.push(("IPv6", v6));
    let mut llc = guest_mac(0).to_vec();
    llc.extend_from_slice(&peer_mac(0));
    llc.extend_from_slice(&[0, 46]);
    llc.resize(60, 0x42);
    c.push(("802.3 length field", llc));
    // Oversize: up to the page (4096 - 12-byte virtio header = 4084 bytes fits), then past it.
    for n in [1514usize, 1515, 4084, 4085, 9000] {
        c.push((
            "oversize",
            ip_frame(ipv4([10, 0, 0, 2], 64, 0, &[], n - ETH_HDR_LEN - 20)),
        ));
    }
    c
}

/// Frames received on `port` that the counters account for, and the accounted total.
fn accounted(s: &Stats, router_mode: bool) -> u64 {
    let port_drops: u64 = s.0.ports.iter().map(|p| p.drops.total()).sum();
    if router_mode {
        let r = router(s);
        r.forwarded
            + r.arp_replies
            + r.echo_replies
            + r.arp_consumed
            + r.to_host
            + r.drops.total()
            + r.queued_now
            + port_drops
    } else {
        s.0.forwarded + port_drops
    }
}

fn replay(append: &str, router_mode: bool) {
    let mut rig = Rig::start(append, gen_count(500, 64, false));
    let (p0, p1) = (rig.port(0), rig.port(1));
    let corpus = corpus();
    // Router mode: resolve 10.0.1.2 first (the generator's host), so forwarded frames leave.
    if router_mode {
        let mut f = ip_frame(ipv4([10, 0, 0, 2], 64, 0, &[], 26));
        f[..6].copy_from_slice(&guest_mac(0));
        p0.send(&f).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            let Some(r) = p1.recv_timeout(left) else {
                break;
            };
            if let Some(reply) = gen::arp_reply(&r, 1) {
                p1.send(&reply).unwrap();
            } else if r[12..14] == [0x08, 0x00] {
                break;
            }
        }
    }
    let before = rig.stats();
    let base = accounted(&before, router_mode);
    // Three rounds, so the guest sees every case again after the others.
    let rounds = 3;
    for _ in 0..rounds {
        for (_, f) in &corpus {
            p0.send(f).unwrap();
        }
    }
    let _ = p0.collect(Duration::from_millis(500));
    for f in p1.collect(Duration::from_millis(500)) {
        if let Some(reply) = gen::arp_reply(&f, 1) {
            p1.send(&reply).unwrap();
        }
    }
    let after = rig.stats();
    let sent = (rounds * corpus.len()) as u64;
    eprintln!(
        "{append}: {sent} hostile frames: accounted {}, forwarded {}",
        accounted(&after, router_mode) - base,
        after.0.forwarded - before.0.forwarded
    );
    assert_eq!(
        accounted(&after, router_mode) - base,
        sent,
        "every hostile frame in exactly one counter\nbefore {before}\nafter {after}"
    );
    // Normal traffic passes afterwards.
    let rep = rig.run();
    assert_eq!(
        rep.received,
        rep.sent,
        "normal traffic after the corpus\n{}",
        rig.tail()
    );
    let s = rig.quit();
    assert_no_leak(&s);
}

#[test]
fn hostile_corpus_io() {
    replay("mode=io", false);
}

#[test]
fn hostile_corpus_l2() {
    replay("mode=l2", false);
}

#[test]
fn hostile_corpus_router() {
    replay("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24", true);
}
