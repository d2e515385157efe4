//! Host tests of the NAT with real frames (built by etherparse, an independent
//! implementation, which also recomputes every checksum the NAT updated incrementally):
//! mapping, filtering and hairpinning against RFC 4787's definitions, ICMP error translation
//! against RFC 5508, TCP states and timeouts against RFC 5382, static forwards, port
//! exhaustion, hostile frames, two cores, and a flood of 100,000 spoofed SYNs.
//!
//! Past ~800 lines because each test spells out its frames and expected fields (rustfmt puts
//! a frame's check on several lines); they share the frame builders and the checksum oracle
//! at the top, which a split would have to export.

use super::*;
use crate::conntrack::parse::ParseError;
use crate::conntrack::table::{Class, Entry};
use crate::router::ipv4::checksum;
use etherparse::{
    icmpv4, Icmpv4Header, Icmpv4Type, Ipv4Header, PacketBuilder, TcpHeader, UdpHeader,
};
use std::vec;
use std::vec::Vec;

const S: u64 = 1_000_000_000;
const PUB: [u8; 4] = [198, 51, 100, 1];
const PUB2: [u8; 4] = [198, 51, 100, 2];
const SERVER: [u8; 4] = [203, 0, 113, 10];
const SERVER2: [u8; 4] = [203, 0, 113, 20];
const HOST_A: [u8; 4] = [10, 0, 0, 2];
const HOST_B: [u8; 4] = [10, 0, 0, 3];

fn a32(a: [u8; 4]) -> u32 {
    u32::from_be_bytes(a)
}

fn leak<T: Clone>(v: T, n: usize) -> &'static mut [T] {
    vec![v; n].leak()
}

struct Setup {
    pool: Vec<u32>,
    port_lo: u16,
    port_hi: u16,
    cores: u16,
    filtering: Filtering,
    forwards: Vec<Forward>,
    sessions: usize,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            pool: vec![a32(PUB)],
            port_lo: 1024,
            port_hi: 65535,
            cores: 1,
            filtering: Filtering::AddressAndPortDependent,
            forwards: Vec::new(),
            sessions: 1024,
        }
    }
}

impl Setup {
    fn build(&self, core: u16) -> Nat<'static> {
        let cfg = NatConfig {
            pool: &self.pool,
            port_lo: self.port_lo,
            port_hi: self.port_hi,
            cores: self.cores,
            core,
            filtering: self.filtering,
            forwards: &self.forwards,
            timeouts: Timeouts::default(),
            key: 0x1234,
            seed: 0x5678,
        };
        let plan = ports::PortPlan {
            lo: self.port_lo,
            hi: self.port_hi,
            cores: self.cores,
        };
        let n = self.sessions;
        let m = n + self.forwards.len() + 1;
        let st = NatStorage {
            sessions: leak(Entry::default(), n),
            session_buckets: leak(0, n.next_power_of_two()),
            maps: leak(Entry::default(), m),
            map_buckets: leak(0, m.next_power_of_two()),
            ports: leak(
                0,
                ports::PortAlloc::words_for(self.pool.len(), plan.block(core).1),
            ),
        };
        Nat::new(&cfg, st).unwrap()
    }
}

fn eth() -> etherparse::PacketBuilderStep<etherparse::Ethernet2Header> {
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
}

fn udp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut v = Vec::new();
    eth()
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut v, b"hello, nat")
        .unwrap();
    v
}

/// TCP flags: "S" SYN, "SA" SYN/ACK, "A" ACK, "F" FIN/ACK, "R" RST.
fn tcp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16, flags: &str) -> Vec<u8> {
    let b = eth().ipv4(src, dst, 64).tcp(sp, dp, 1000, 8192);
    let b = match flags {
        "S" => b.syn(),
        "SA" => b.syn().ack(1001),
        "A" => b.ack(1001),
        "F" => b.fin().ack(1001),
        "R" => b.rst(),
        _ => panic!("{flags}"),
    };
    let mut v = Vec::new();
    b.write(&mut v, b"data").unwrap();
    v
}

fn echo(src: [u8; 4], dst: [u8; 4], id: u16, request: bool) -> Vec<u8> {
    let b = eth().ipv4(src, dst, 64);
    let b = if request {
        b.icmpv4_echo_request(id, 7)
    } else {
        b.icmpv4_echo_reply(id, 7)
    };
    let mut v = Vec::new();
    b.write(&mut v, b"ping").unwrap();
    v
}

/// A Port Unreachable from `src` to `dst` quoting the IPv4 datagram of `frame`, cut to
/// `quote` bytes (RFC 792 asks for the header and 8 bytes; RFC 1812 §4.3.2.3 for more).
fn unreachable(src: [u8; 4], dst: [u8; 4], frame: &[u8], quote: usize) -> Vec<u8> {
    let q = &frame[14..(14 + quote).min(frame.len())];
    let mut v = Vec::new();
    eth()
        .ipv4(src, dst, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut v, q)
        .unwrap();
    v
}

/// (src, sport, dst, dport) of a TCP or UDP frame.
fn endpoints(f: &[u8]) -> ([u8; 4], u16, [u8; 4], u16) {
    let ip = &f[14..];
    let l4 = &ip[usize::from(ip[0] & 0xf) * 4..];
    (
        ip[12..16].try_into().unwrap(),
        u16::from_be_bytes([l4[0], l4[1]]),
        ip[16..20].try_into().unwrap(),
        u16::from_be_bytes([l4[2], l4[3]]),
    )
}

/// Every checksum of the frame equals etherparse's full recomputation (IPv4 header, TCP,
/// UDP, ICMP; for an ICMP error also the quoted IPv4 header, and the quoted UDP datagram's
/// checksum when the whole datagram is quoted).
fn assert_checksums(f: &[u8]) {
    let (ip, rest) = Ipv4Header::from_slice(&f[14..]).unwrap();
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header");
    let payload = &rest[..usize::from(ip.total_len) - ip.header_len()];
    match ip.protocol {
        etherparse::IpNumber::TCP => {
            let (h, data) = TcpHeader::from_slice(payload).unwrap();
            assert_eq!(h.checksum, h.calc_checksum_ipv4(&ip, data).unwrap(), "TCP");
        }
        etherparse::IpNumber::UDP => {
            let (h, data) = UdpHeader::from_slice(payload).unwrap();
            assert_ne!(h.checksum, 0);
            assert_eq!(h.checksum, h.calc_checksum_ipv4(&ip, data).unwrap(), "UDP");
        }
        etherparse::IpNumber::ICMP => {
            let (h, data) = Icmpv4Header::from_slice(payload).unwrap();
            let mut r = h.clone();
            r.update_checksum(data);
            assert_eq!(h.checksum, r.checksum, "ICMP");
            if matches!(h.icmp_type, Icmpv4Type::DestinationUnreachable(_)) {
                let hl = usize::from(data[0] & 0xf) * 4;
                assert_eq!(checksum(&data[..hl]), 0, "quoted IPv4 header");
                let (qip, qrest) = Ipv4Header::from_slice(data).unwrap();
                if qip.protocol == etherparse::IpNumber::UDP
                    && usize::from(qip.total_len) == data.len()
                {
                    let (qh, qdata) = UdpHeader::from_slice(qrest).unwrap();
                    assert_eq!(
                        qh.checksum,
                        qh.calc_checksum_ipv4(&qip, qdata).unwrap(),
                        "quoted UDP"
                    );
                }
            }
        }
        p => panic!("{p:?}"),
    }
}

fn out(nat: &mut Nat<'_>, f: &mut [u8], now: u64) -> Verdict {
    nat.translate(f, Ingress::Inside, now)
}

fn inn(nat: &mut Nat<'_>, f: &mut [u8], now: u64) -> Verdict {
    nat.translate(f, Ingress::Outside, now)
}

fn drops(nat: &Nat<'_>, d: NatDrop) -> u64 {
    nat.counters().drops[d.index()]
}

/// RFC 4787 §4.1 (REQ-1): "the NAT reuses the port mapping for subsequent packets sent from
/// the same internal IP address and port (X:x) to any external IP address and port" — the
/// same X1':x1' for X:x → Y1:y1 and X:x → Y2:y2, and the replies go back to X:x.
#[test]
fn mapping_is_endpoint_independent() {
    let mut nat = Setup::default().build(0);
    let mut f1 = udp(HOST_A, 5000, SERVER, 53);
    let mut f2 = udp(HOST_A, 5000, SERVER2, 5353);
    assert_eq!(out(&mut nat, &mut f1, 0), Verdict::Forward);
    assert_eq!(out(&mut nat, &mut f2, 0), Verdict::Forward);
    let (s1, p1, d1, dp1) = endpoints(&f1);
    let (s2, p2, d2, dp2) = endpoints(&f2);
    assert_eq!((s1, d1, dp1), (PUB, SERVER, 53));
    assert_eq!((s2, p2, d2, dp2), (PUB, p1, SERVER2, 5353));
    assert!((1024..=65535).contains(&p1));
    assert_checksums(&f1);
    assert_checksums(&f2);
    // Another inside port: another mapping.
    let mut f3 = udp(HOST_A, 5001, SERVER, 53);
    assert_eq!(out(&mut nat, &mut f3, 0), Verdict::Forward);
    assert_ne!(endpoints(&f3).1, p1);
    // Replies from both destinations reach X:x.
    for (src, sp) in [(SERVER, 53), (SERVER2, 5353)] {
        let mut r = udp(src, sp, PUB, p1);
        assert_eq!(inn(&mut nat, &mut r, S), Verdict::Forward);
        assert_eq!(endpoints(&r), (src, sp, HOST_A, 5000));
        assert_checksums(&r);
    }
    assert_eq!(
        (
            nat.mappings().len(),
            nat.sessions().len(),
            nat.counters().mappings_opened
        ),
        (2, 3, 2)
    );
}

/// RFC 4787 §5 (REQ-8): address-and-port-dependent filtering lets in only what comes from
/// an (address, port) X:x has sent to; endpoint-independent filtering, anything to the
/// mapping.
#[test]
fn filtering_address_and_port_dependent_by_default_endpoint_independent_as_option() {
    for (filtering, open) in [
        (Filtering::AddressAndPortDependent, false),
        (Filtering::EndpointIndependent, true),
    ] {
        let mut nat = Setup {
            filtering,
            ..Setup::default()
        }
        .build(0);
        let mut f = udp(HOST_A, 5000, SERVER, 53);
        assert_eq!(out(&mut nat, &mut f, 0), Verdict::Forward);
        let p = endpoints(&f).1;
        // Same address, other port; other address.
        for (src, sp) in [(SERVER, 54), (SERVER2, 53)] {
            let mut r = udp(src, sp, PUB, p);
            let v = inn(&mut nat, &mut r, S);
            if open {
                assert_eq!(v, Verdict::Forward);
                assert_eq!(endpoints(&r), (src, sp, HOST_A, 5000));
            } else {
                assert_eq!(v, Verdict::Drop(NatDrop::Filtered));
            }
        }
        // A port with no mapping is never open.
        let mut r = udp(SERVER, 53, PUB, p.wrapping_add(1));
        assert_eq!(inn(&mut nat, &mut r, S), Verdict::Drop(NatDrop::NoMapping));
        assert_eq!(drops(&nat, NatDrop::Filtered), if open { 0 } else { 2 });
        assert_eq!(drops(&nat, NatDrop::NoMapping), 1);
    }
}

/// RFC 4787 REQ-2 (paired pooling): every flow of an inside address leaves from the same
/// outside address, whatever its protocol and port; inside addresses spread over the pool.
#[test]
fn pooling_is_paired() {
    let mut nat = Setup {
        pool: vec![a32(PUB), a32(PUB2)],
        ..Setup::default()
    }
    .build(0);
    let mut seen = [0u32; 2];
    for host in 2..66u8 {
        let h = [10, 0, 0, host];
        let mut addrs = Vec::new();
        for (k, dst) in [SERVER, SERVER2].into_iter().enumerate() {
            let mut f = udp(h, 4000 + k as u16, dst, 53);
            assert_eq!(out(&mut nat, &mut f, 0), Verdict::Forward);
            addrs.push(endpoints(&f).0);
            let mut t = tcp(h, 4000, dst, 80, "S");
            assert_eq!(out(&mut nat, &mut t, 0), Verdict::Forward);
            addrs.push(endpoints(&t).0);
        }
        assert!(addrs.iter().all(|&a| a == addrs[0]), "{h:?}: {addrs:?}");
        seen[usize::from(addrs[0] == PUB2)] += 1;
    }
    assert!(seen[0] > 16 && seen[1] > 16, "{seen:?}");
}

/// RFC 4787 §6 (REQ-9): X1 sending to X2's mapping X2':x2' reaches X2, from X1's mapping
/// X1':x1' (not from its inside address). With the default filtering X2 must have sent to
/// X1':x1' first: the UDP hole punch of RFC 5128 §3.3 between two hosts behind one NAT.
#[test]
fn hairpinning_with_hole_punching() {
    let mut nat = Setup::default().build(0);
    // Both learn their mappings from a server.
    let mut fa = udp(HOST_A, 7000, SERVER, 3478);
    let mut fb = udp(HOST_B, 7000, SERVER, 3478);
    assert_eq!(out(&mut nat, &mut fa, 0), Verdict::Forward);
    assert_eq!(out(&mut nat, &mut fb, 0), Verdict::Forward);
    let (pa, pb) = (endpoints(&fa).1, endpoints(&fb).1);
    // A punches first: B's mapping filters it (B has not sent to A's mapping).
    let mut a1 = udp(HOST_A, 7000, PUB, pb);
    assert_eq!(out(&mut nat, &mut a1, S), Verdict::Drop(NatDrop::Filtered));
    // B punches back: it arrives at A, from B's mapping.
    let mut b1 = udp(HOST_B, 7000, PUB, pa);
    assert_eq!(out(&mut nat, &mut b1, 2 * S), Verdict::Hairpin);
    assert_eq!(endpoints(&b1), (PUB, pb, HOST_A, 7000));
    assert_checksums(&b1);
    // Now A gets through too.
    let mut a2 = udp(HOST_A, 7000, PUB, pb);
    assert_eq!(out(&mut nat, &mut a2, 3 * S), Verdict::Hairpin);
    assert_eq!(endpoints(&a2), (PUB, pa, HOST_B, 7000));
    assert_checksums(&a2);
    assert_eq!(nat.counters().hairpinned, 2);
    // To a pool port with no mapping: dropped in the inbound half (the fuzz target's first
    // stop: the frame was translated outbound before the drop).
    let mut x = udp(HOST_A, 7000, PUB, 1100);
    assert_eq!(
        out(&mut nat, &mut x, 3 * S),
        Verdict::Drop(NatDrop::NoMapping)
    );
    assert_eq!(endpoints(&x), (PUB, pa, PUB, 1100));
    // With endpoint-independent filtering the first packet already gets through, and a TCP
    // connection hairpins too.
    let mut nat = Setup {
        filtering: Filtering::EndpointIndependent,
        ..Setup::default()
    }
    .build(0);
    let mut fb = tcp(HOST_B, 8080, SERVER, 80, "S");
    assert_eq!(out(&mut nat, &mut fb, 0), Verdict::Forward);
    let pb = endpoints(&fb).1;
    let mut a1 = tcp(HOST_A, 40000, PUB, pb, "S");
    assert_eq!(out(&mut nat, &mut a1, S), Verdict::Hairpin);
    let (src, sp, dst, dp) = endpoints(&a1);
    assert_eq!((src, dst, dp), (PUB, HOST_B, 8080));
    assert_checksums(&a1);
    let mut b2 = tcp(HOST_B, 8080, PUB, sp, "SA");
    assert_eq!(out(&mut nat, &mut b2, S), Verdict::Hairpin);
    assert_eq!(endpoints(&b2), (PUB, pb, HOST_A, 40000));
}

/// RFC 5382 REQ-5 and RFC 4787 REQ-5 timeouts, at their default (minimum) values: a session
/// idle for exactly its timeout still passes; one nanosecond later it is gone with its
/// mapping and port.
#[test]
fn timeouts_follow_rfc5382_and_rfc4787() {
    let mut nat = Setup::default().build(0);
    // TCP: handshake → established (2 h 4 min).
    let mut syn = tcp(HOST_A, 40000, SERVER, 443, "S");
    assert_eq!(out(&mut nat, &mut syn, 0), Verdict::Forward);
    let p = endpoints(&syn).1;
    assert_eq!(nat.sessions().count(Class::TcpEmbryonic), 1);
    let mut synack = tcp(SERVER, 443, PUB, p, "SA");
    assert_eq!(inn(&mut nat, &mut synack, S), Verdict::Forward);
    let mut ack = tcp(HOST_A, 40000, SERVER, 443, "A");
    assert_eq!(out(&mut nat, &mut ack, 2 * S), Verdict::Forward);
    assert_eq!(nat.sessions().count(Class::TcpEstablished), 1);
    let t_est = 2 * S + 7440 * S;
    let mut data = tcp(SERVER, 443, PUB, p, "A");
    assert_eq!(inn(&mut nat, &mut data, t_est), Verdict::Forward);
    let mut data = tcp(SERVER, 443, PUB, p, "A");
    assert_eq!(
        inn(&mut nat, &mut data, 2 * t_est - 2 * S + 1),
        Verdict::Drop(NatDrop::NoMapping)
    );
    assert_eq!(nat.ports_in_use(0, crate::wire::IPPROTO_TCP), 0);
    // TCP transitory: a SYN never answered lasts 4 min.
    let mut syn = tcp(HOST_A, 40001, SERVER, 443, "S");
    let t0 = 100_000 * S;
    assert_eq!(out(&mut nat, &mut syn, t0), Verdict::Forward);
    let p = endpoints(&syn).1;
    let mut synack = tcp(SERVER, 443, PUB, p, "SA");
    assert_eq!(inn(&mut nat, &mut synack, t0 + 240 * S), Verdict::Forward);
    let mut rst = tcp(HOST_A, 40001, SERVER, 443, "R");
    assert_eq!(out(&mut nat, &mut rst, t0 + 300 * S), Verdict::Forward);
    // After a RST (CLOSE) the session stays 4 min (RFC 7857 §2.2), then goes.
    assert_eq!(nat.sessions().count(Class::TcpClosed), 1);
    assert_eq!(nat.tick(t0 + 540 * S, 100), 0);
    assert_eq!(nat.tick(t0 + 540 * S + 1, 100), 1);
    // UDP: 300 s.
    let t1 = 200_000 * S;
    let mut f = udp(HOST_A, 5000, SERVER, 53);
    assert_eq!(out(&mut nat, &mut f, t1), Verdict::Forward);
    let p = endpoints(&f).1;
    let mut r = udp(SERVER, 53, PUB, p);
    assert_eq!(inn(&mut nat, &mut r, t1 + 300 * S), Verdict::Forward);
    let mut r = udp(SERVER, 53, PUB, p);
    assert_eq!(
        inn(&mut nat, &mut r, t1 + 600 * S + 1),
        Verdict::Drop(NatDrop::NoMapping)
    );
    // Timeouts changed at run time apply at once.
    let mut f = udp(HOST_A, 5000, SERVER, 53);
    assert_eq!(out(&mut nat, &mut f, t1 + 700 * S), Verdict::Forward);
    nat.set_timeouts(Timeouts {
        udp: 10,
        ..Timeouts::default()
    });
    assert!(!Timeouts {
        udp: 10,
        ..Timeouts::default()
    }
    .meets_rfcs());
    assert!(Timeouts::default().meets_rfcs());
    assert_eq!(nat.tick(t1 + 711 * S, 100), 1);
    assert_eq!((nat.sessions().len(), nat.mappings().len()), (0, 0));
    assert_eq!(nat.sessions().counters().expired, 4);
}

/// ICMP echo: the identifier is mapped like a port (RFC 5508 REQ-2) and the reply finds it.
#[test]
fn icmp_query_identifier_is_mapped() {
    let mut nat = Setup::default().build(0);
    let mut q = echo(HOST_A, SERVER, 0x1234, true);
    assert_eq!(out(&mut nat, &mut q, 0), Verdict::Forward);
    let id = u16::from_be_bytes([q[38], q[39]]);
    assert_eq!(&q[26..30], &PUB);
    assert!((1024..=65535).contains(&id));
    assert_checksums(&q);
    let mut r = echo(SERVER, PUB, id, false);
    assert_eq!(inn(&mut nat, &mut r, S), Verdict::Forward);
    assert_eq!(
        (&r[30..34], u16::from_be_bytes([r[38], r[39]])),
        (&HOST_A[..], 0x1234)
    );
    assert_checksums(&r);
    // An unsolicited request to the pool, or a reply from inside, opens nothing.
    let mut u = echo(SERVER, PUB, 999, true);
    assert_eq!(inn(&mut nat, &mut u, S), Verdict::Drop(NatDrop::NoMapping));
    let mut u = echo(HOST_B, SERVER, 5, false);
    assert_eq!(out(&mut nat, &mut u, S), Verdict::Drop(NatDrop::Invalid));
}

/// RFC 5508 REQ-3 (§4.2): an ICMP error about a session's datagram is translated — outer
/// destination, the quoted source address and port, the quoted IPv4 and UDP checksums and
/// the ICMP checksum — both ways; one about no session, or quoting an error, is dropped.
#[test]
fn icmp_errors_are_translated_with_their_quote() {
    let mut nat = Setup::default().build(0);
    let mut f = udp(HOST_A, 5000, SERVER, 53);
    let original = f.clone();
    assert_eq!(out(&mut nat, &mut f, 0), Verdict::Forward);
    let p = endpoints(&f).1;
    // A router on the way answers the translated datagram (quoted whole).
    let router = [192, 0, 2, 254];
    let mut e = unreachable(router, PUB, &f, 1500);
    assert_eq!(inn(&mut nat, &mut e, S), Verdict::Forward);
    assert_eq!(&e[26..34], &[router, HOST_A].concat()[..]);
    // The quote is now the datagram as the host sent it, byte for byte.
    let quote = &e[14 + 20 + 8..];
    assert_eq!(quote, &original[14..]);
    assert_checksums(&e);
    // Only the header and 8 bytes quoted (RFC 792): same translation.
    let mut e = unreachable(router, PUB, &f, 28);
    assert_eq!(inn(&mut nat, &mut e, S), Verdict::Forward);
    assert_eq!(&e[42..42 + 28], &original[14..14 + 28]);
    assert_checksums(&e);
    // TCP quoted with 8 bytes (no checksum in the quote) and with 20 (checksum fixed).
    let mut syn = tcp(HOST_A, 40000, SERVER, 80, "S");
    let syn0 = syn.clone();
    assert_eq!(out(&mut nat, &mut syn, 0), Verdict::Forward);
    for quote in [28, 40] {
        let mut e = unreachable(router, PUB, &syn, quote);
        assert_eq!(inn(&mut nat, &mut e, S), Verdict::Forward);
        assert_eq!(&e[42..42 + quote], &syn0[14..14 + quote]);
        assert_checksums(&e);
    }
    // From the inside: A answers a datagram it was delivered with Port Unreachable.
    let mut r = udp(SERVER, 53, PUB, p);
    assert_eq!(inn(&mut nat, &mut r, S), Verdict::Forward);
    let mut e = unreachable(HOST_A, SERVER, &r, 1500);
    assert_eq!(out(&mut nat, &mut e, S), Verdict::Forward);
    assert_eq!(&e[26..34], &[PUB, SERVER].concat()[..]);
    assert_eq!(endpoints(&e[20 + 8..]), (SERVER, 53, PUB, p));
    assert_checksums(&e);
    // An error quoting what no session sent.
    let stray = udp(PUB, 999, SERVER, 53);
    let mut e = unreachable(router, PUB, &stray, 1500);
    assert_eq!(
        inn(&mut nat, &mut e, S),
        Verdict::Drop(NatDrop::IcmpErrorNoSession)
    );
    // An error quoting an error.
    let inner = unreachable(SERVER, PUB, &f, 1500);
    let mut e = unreachable(router, PUB, &inner, 1500);
    assert_eq!(
        inn(&mut nat, &mut e, S),
        Verdict::Drop(NatDrop::Malformed(ParseError::IcmpErrorInError))
    );
    assert_eq!(nat.counters().icmp_errors, 5);
}

/// A RST of a known flow passes both ways and closes the session (CLOSE), which then lives
/// the transitory timeout; a SYN/ACK or bare ACK from the outside opens nothing.
#[test]
fn rst_of_known_flow_passes_and_closes() {
    let mut nat = Setup::default().build(0);
    let mut syn = tcp(HOST_A, 40000, SERVER, 80, "S");
    assert_eq!(out(&mut nat, &mut syn, 0), Verdict::Forward);
    let p = endpoints(&syn).1;
    let mut rst = tcp(SERVER, 80, PUB, p, "R");
    assert_eq!(inn(&mut nat, &mut rst, S), Verdict::Forward);
    assert_eq!(endpoints(&rst), (SERVER, 80, HOST_A, 40000));
    assert_eq!(nat.sessions().count(Class::TcpClosed), 1);
    // An ACK after the RST is still the session's (CLOSE → CLOSE).
    let mut ack = tcp(SERVER, 80, PUB, p, "A");
    assert_eq!(inn(&mut nat, &mut ack, S), Verdict::Forward);
    // Unknown flows: a SYN/ACK from the inside cannot open a session.
    let mut sa = tcp(HOST_B, 40000, SERVER, 80, "SA");
    assert_eq!(out(&mut nat, &mut sa, S), Verdict::Drop(NatDrop::Invalid));
}

/// A static forward (DNAT) opens inbound connections to its inside endpoint, whose own
/// outbound flows leave from the forward's outside endpoint (EIM), on any filtering.
#[test]
fn static_forward_opens_inbound_and_maps_outbound() {
    let fwd = Forward {
        proto: crate::wire::IPPROTO_TCP,
        outside_addr: a32(PUB),
        outside_port: 443,
        inside_addr: a32(HOST_B),
        inside_port: 8443,
    };
    let mut nat = Setup {
        forwards: vec![fwd],
        ..Setup::default()
    }
    .build(0);
    let mut syn = tcp(SERVER, 50000, PUB, 443, "S");
    assert_eq!(inn(&mut nat, &mut syn, 0), Verdict::Forward);
    assert_eq!(endpoints(&syn), (SERVER, 50000, HOST_B, 8443));
    assert_checksums(&syn);
    let mut sa = tcp(HOST_B, 8443, SERVER, 50000, "SA");
    assert_eq!(out(&mut nat, &mut sa, S), Verdict::Forward);
    assert_eq!(endpoints(&sa), (PUB, 443, SERVER, 50000));
    let mut ack = tcp(SERVER, 50000, PUB, 443, "A");
    assert_eq!(inn(&mut nat, &mut ack, S), Verdict::Forward);
    assert_eq!(nat.sessions().count(Class::TcpEstablished), 1);
    let mut other = tcp(HOST_B, 8443, SERVER2, 25, "S");
    assert_eq!(out(&mut nat, &mut other, S), Verdict::Forward);
    assert_eq!(endpoints(&other).0..=endpoints(&other).0, PUB..=PUB);
    assert_eq!(endpoints(&other).1, 443);
    // The forward outlives its sessions.
    assert_eq!(nat.tick(100_000 * S, 100), 2);
    assert_eq!(nat.mappings().len(), 1);
    // Forwards in the dynamic range, outside the pool, or doubled are refused.
    for (bad, why) in [
        (
            Forward {
                outside_port: 2000,
                ..fwd
            },
            ForwardFault::InDynamicRange,
        ),
        (
            Forward {
                outside_addr: a32(SERVER),
                ..fwd
            },
            ForwardFault::NotInPool,
        ),
        (Forward { proto: 1, ..fwd }, ForwardFault::Protocol),
    ] {
        let s = Setup {
            forwards: vec![bad],
            ..Setup::default()
        };
        let cfg = NatConfig {
            pool: &s.pool,
            port_lo: 1024,
            port_hi: 65535,
            cores: 1,
            core: 0,
            filtering: Filtering::AddressAndPortDependent,
            forwards: &s.forwards,
            timeouts: Timeouts::default(),
            key: 0,
            seed: 0,
        };
        let st = NatStorage {
            sessions: leak(Entry::default(), 4),
            session_buckets: leak(0, 4),
            maps: leak(Entry::default(), 8),
            map_buckets: leak(0, 8),
            ports: leak(0, 3000),
        };
        assert_eq!(Nat::new(&cfg, st).err(), Some(NatError::BadForward(0, why)));
    }
}

/// Port exhaustion is a counted drop; a freed port is handed out again.
#[test]
fn port_exhaustion_is_a_counted_drop() {
    let mut nat = Setup {
        port_lo: 2000,
        port_hi: 2009,
        ..Setup::default()
    }
    .build(0);
    let mut ports = Vec::new();
    for host in 0..10u8 {
        let mut f = udp([10, 0, 1, host], 5000, SERVER, 53);
        assert_eq!(out(&mut nat, &mut f, 0), Verdict::Forward);
        ports.push(endpoints(&f).1);
    }
    ports.sort();
    assert_eq!(ports, (2000..2010).collect::<Vec<_>>());
    let mut f = udp([10, 0, 1, 10], 5000, SERVER, 53);
    assert_eq!(
        out(&mut nat, &mut f, S),
        Verdict::Drop(NatDrop::PortsExhausted)
    );
    let mut f = udp([10, 0, 1, 11], 5000, SERVER, 53);
    assert_eq!(
        out(&mut nat, &mut f, S),
        Verdict::Drop(NatDrop::PortsExhausted)
    );
    assert_eq!(drops(&nat, NatDrop::PortsExhausted), 2);
    // TCP has its own ports.
    let mut t = tcp([10, 0, 1, 10], 5000, SERVER, 80, "S");
    assert_eq!(out(&mut nat, &mut t, S), Verdict::Forward);
    // After the UDP timeout the ports are free again.
    let mut f = udp([10, 0, 1, 10], 5000, SERVER, 53);
    assert_eq!(out(&mut nat, &mut f, 302 * S), Verdict::Forward);
}

/// Hostile frames: each a counted drop by reason, nothing translated.
#[test]
fn hostile_frames_are_counted_drops() {
    let mut nat = Setup::default().build(0);
    let syn = tcp(HOST_A, 40000, SERVER, 80, "S");
    let cases: Vec<(Vec<u8>, Ingress, Verdict)> = vec![
        // TCP header cut to 12 bytes (Total Length too).
        (
            {
                let mut f = syn[..14 + 20 + 12].to_vec();
                f[17] = 32;
                f
            },
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::Truncated)),
        ),
        // Total Length past the frame.
        (
            syn[..50].to_vec(),
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::Truncated)),
        ),
        // A first fragment (MF).
        (
            {
                let mut f = syn.clone();
                f[20] |= 0x20;
                f
            },
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::Fragment)),
        ),
        (
            udp(HOST_A, 0, SERVER, 53),
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::ZeroPort)),
        ),
        (
            udp(HOST_A, 53, SERVER, 0),
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::ZeroPort)),
        ),
        (
            udp(PUB, 5000, SERVER, 53),
            Ingress::Inside,
            Verdict::Drop(NatDrop::OwnAddressSource),
        ),
        (
            udp(PUB, 5000, PUB, 1024),
            Ingress::Outside,
            Verdict::Drop(NatDrop::OwnAddressSource),
        ),
        (
            udp(SERVER, 53, SERVER2, 1024),
            Ingress::Outside,
            Verdict::Drop(NatDrop::NotPoolAddress),
        ),
        (
            {
                let mut f = syn.clone();
                f[23] = 47;
                f
            },
            Ingress::Inside,
            Verdict::Drop(NatDrop::Malformed(ParseError::UnsupportedProto)),
        ),
        (
            {
                let mut f = syn.clone();
                f[12] = 0x86;
                f[13] = 0xdd;
                f
            },
            Ingress::Inside,
            Verdict::NotIpv4,
        ),
    ];
    let n = cases.len();
    for (mut f, from, want) in cases {
        let before = f.clone();
        assert_eq!(nat.translate(&mut f, from, 0), want);
        assert_eq!(f, before);
    }
    assert_eq!(nat.counters().drops.iter().sum::<u64>(), n as u64 - 1);
    assert_eq!(nat.sessions().len(), 0);
}

/// Two cores (VPP nat44-ei's hand-off): each inside host belongs to one core, which maps it
/// to a port of its own block; a frame on the wrong core is handed to the owner, which
/// translates it; every reply is handled by the core that owns its port.
#[test]
fn two_cores_hand_frames_to_the_owner() {
    let setup = Setup {
        cores: 2,
        ..Setup::default()
    };
    let mut cores = [setup.build(0), setup.build(1)];
    let mut owners = [0u32; 2];
    for host in 2..42u8 {
        let h = [10, 0, 0, host];
        let mut f = udp(h, 5000, SERVER, 53);
        // It arrives on core 0 (the host's flow hash chose it).
        let owner = match cores[0].translate(&mut f, Ingress::Inside, 0) {
            Verdict::Forward => 0,
            Verdict::HandOff { core, from } => {
                assert_eq!((core, from), (1, Ingress::Inside));
                assert_eq!(cores[1].translate(&mut f, from, 0), Verdict::Forward);
                1
            }
            v => panic!("{v:?}"),
        };
        owners[owner] += 1;
        let p = endpoints(&f).1;
        assert_eq!(cores[0].owner_of(17, p), Some(owner as u16));
        // The reply arrives on the other core first.
        let mut r = udp(SERVER, 53, PUB, p);
        let other = 1 - owner;
        assert_eq!(
            cores[other].translate(&mut r, Ingress::Outside, S),
            Verdict::HandOff {
                core: owner as u16,
                from: Ingress::Outside
            }
        );
        assert_eq!(
            cores[owner].translate(&mut r, Ingress::Outside, S),
            Verdict::Forward
        );
        assert_eq!(endpoints(&r), (SERVER, 53, h, 5000));
    }
    assert!(owners[0] > 5 && owners[1] > 5, "{owners:?}");
    // Core 0 hands over core 1's hosts' requests and replies; core 1 core 0's replies.
    let handed = [2 * owners[1], owners[0]];
    for (k, c) in cores.iter().enumerate() {
        assert_eq!(c.counters().outbound, u64::from(owners[k]));
        assert_eq!(c.counters().inbound, u64::from(owners[k]));
        assert_eq!(c.counters().handed_off, u64::from(handed[k]));
    }
}

/// Two cores: a hairpin between hosts of different cores is translated outbound by the
/// sender's core and handed, so translated, to the core that owns the destination mapping;
/// an ICMP error from a router inside goes to the core of the host it is about.
#[test]
fn two_cores_hairpin_and_inside_router_errors_reach_the_owner() {
    let setup = Setup {
        cores: 2,
        filtering: Filtering::EndpointIndependent,
        ..Setup::default()
    };
    let mut cores = [setup.build(0), setup.build(1)];
    let owner = |h: [u8; 4]| usize::from(cores_owner(&setup, h));
    // Two hosts owned by different cores.
    let a = (2..100u8)
        .map(|k| [10, 0, 0, k])
        .find(|&h| owner(h) == 0)
        .unwrap();
    let b = (2..100u8)
        .map(|k| [10, 0, 0, k])
        .find(|&h| owner(h) == 1)
        .unwrap();
    let mut fb = udp(b, 9000, SERVER, 53);
    assert_eq!(
        cores[1].translate(&mut fb, Ingress::Inside, 0),
        Verdict::Forward
    );
    let pb = endpoints(&fb).1;
    let mut x = udp(a, 9000, PUB, pb);
    let v = cores[0].translate(&mut x, Ingress::Inside, S);
    assert_eq!(
        v,
        Verdict::HandOff {
            core: 1,
            from: Ingress::Hairpin
        }
    );
    let pa = endpoints(&x).1;
    assert_eq!(endpoints(&x), (PUB, pa, PUB, pb));
    assert_eq!(
        cores[1].translate(&mut x, Ingress::Hairpin, S),
        Verdict::Forward
    );
    assert_eq!(endpoints(&x), (PUB, pa, b, 9000));
    assert_checksums(&x);
    // B's reply hairpins back to core 0, which owns A's mapping.
    let mut y = udp(b, 9000, PUB, pa);
    assert_eq!(
        cores[1].translate(&mut y, Ingress::Inside, S),
        Verdict::HandOff {
            core: 0,
            from: Ingress::Hairpin
        }
    );
    assert_eq!(
        cores[0].translate(&mut y, Ingress::Hairpin, S),
        Verdict::Forward
    );
    assert_eq!(endpoints(&y), (PUB, pb, a, 9000));
    // A router inside (owned by whichever core) reports B's inbound datagram undeliverable:
    // the error goes to B's core, which translates it.
    let mut r = udp(SERVER, 53, PUB, pb);
    assert_eq!(
        cores[1].translate(&mut r, Ingress::Outside, S),
        Verdict::Forward
    );
    let router = (2..100u8)
        .map(|k| [10, 0, 9, k])
        .find(|&h| owner(h) == 0)
        .unwrap();
    let mut e = unreachable(router, SERVER, &r, 1500);
    assert_eq!(
        cores[0].translate(&mut e, Ingress::Inside, S),
        Verdict::HandOff {
            core: 1,
            from: Ingress::Inside
        }
    );
    assert_eq!(
        cores[1].translate(&mut e, Ingress::Inside, S),
        Verdict::Forward
    );
    assert_eq!(&e[26..34], &[PUB, SERVER].concat()[..]);
    assert_checksums(&e);
}

fn cores_owner(s: &Setup, h: [u8; 4]) -> u16 {
    ports::owner_of_inside(a32(h), s.cores, 0x1234)
}

/// The flood: `n` SYNs from spoofed inside sources (every one a new address) fill a
/// 4,096-session table in which 1,000 established connections live; the SYNs churn the
/// embryonic entries (the oldest evicted each time) and the established flows keep working.
fn flood(n: u32) {
    let mut nat = Setup {
        sessions: 4096,
        ..Setup::default()
    }
    .build(0);
    let mut est = Vec::new();
    for k in 0..1000u32 {
        let h = (a32([10, 1, 0, 0]) + k).to_be_bytes();
        let mut syn = tcp(h, 40000, SERVER, 443, "S");
        assert_eq!(out(&mut nat, &mut syn, 0), Verdict::Forward);
        let p = endpoints(&syn).1;
        let mut sa = tcp(SERVER, 443, PUB, p, "SA");
        assert_eq!(inn(&mut nat, &mut sa, 0), Verdict::Forward);
        let mut ack = tcp(h, 40000, SERVER, 443, "A");
        assert_eq!(out(&mut nat, &mut ack, 0), Verdict::Forward);
        est.push((h, p));
    }
    assert_eq!(nat.sessions().count(Class::TcpEstablished), 1000);
    let mut syn = tcp([0; 4], 1234, SERVER, 80, "S");
    for k in 0..n {
        let src = a32([100, 64, 0, 0]) + k;
        syn[26..30].copy_from_slice(&src.to_be_bytes());
        syn[24..26].fill(0);
        let c = checksum(&syn[14..34]);
        syn[24..26].copy_from_slice(&c.to_be_bytes());
        let mut f = syn.clone();
        assert_eq!(out(&mut nat, &mut f, S), Verdict::Forward);
    }
    let evicted = u64::from(n) - (4096 - 1000);
    assert_eq!(nat.sessions().counters().evicted, evicted);
    assert_eq!(nat.sessions().counters().full, 0);
    assert_eq!((nat.sessions().len(), nat.mappings().len()), (4096, 4096));
    assert_eq!(nat.ports_in_use(0, crate::wire::IPPROTO_TCP), 4096);
    for (h, p) in est {
        let mut d = tcp(SERVER, 443, PUB, p, "A");
        assert_eq!(inn(&mut nat, &mut d, 2 * S), Verdict::Forward);
        assert_eq!(endpoints(&d), (SERVER, 443, h, 40000));
        let mut d = tcp(h, 40000, SERVER, 443, "A");
        assert_eq!(out(&mut nat, &mut d, 2 * S), Verdict::Forward);
        assert_eq!(endpoints(&d).1, p);
    }
    assert_eq!(nat.counters().drops.iter().sum::<u64>(), 0);
}

#[test]
fn flood_of_100k_spoofed_syns_keeps_established_flows() {
    flood(100_000);
}

/// The same at 1,000,000 sources: `cargo test -p netstack --release -- --ignored flood_of_1m`.
#[test]
#[ignore]
fn flood_of_1m_spoofed_syns_keeps_established_flows() {
    flood(1_000_000);
}

proptest::proptest! {
    /// Incremental updates equal etherparse's full recomputation for any addresses, ports and
    /// payload, TCP and UDP, both ways.
    #[test]
    fn checksums_equal_full_recompute(
        host in 0u32..0x00ff_ffff,
        sport in 1u16..,
        dport in 1u16..,
        server in proptest::prelude::any::<u32>(),
        payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        is_tcp in proptest::prelude::any::<bool>(),
    ) {
        let server = if server >> 24 == 198 { server ^ 0x0100_0000 } else { server };
        let h = (0x0a00_0000 | host).to_be_bytes();
        let s = server.to_be_bytes();
        let mut nat = Setup { sessions: 4, ..Setup::default() }.build(0);
        let build = |src: [u8; 4], sp, dst: [u8; 4], dp, syn: bool| {
            let b = eth().ipv4(src, dst, 64);
            let mut v = Vec::new();
            if is_tcp {
                let t = b.tcp(sp, dp, 7, 100);
                if syn { t.syn().write(&mut v, &payload).unwrap() } else { t.ack(8).write(&mut v, &payload).unwrap() }
            } else {
                b.udp(sp, dp).write(&mut v, &payload).unwrap();
            }
            v
        };
        let mut f = build(h, sport, s, dport, true);
        proptest::prop_assert_eq!(out(&mut nat, &mut f, 0), Verdict::Forward);
        assert_checksums(&f);
        let p = endpoints(&f).1;
        let mut r = build(s, dport, PUB, p, false);
        r.truncate(r.len());
        let v = inn(&mut nat, &mut r, 0);
        if is_tcp {
            // A bare ACK answering a SYN is ignored by the state table (passes).
            proptest::prop_assert_eq!(v, Verdict::Forward);
        } else {
            proptest::prop_assert_eq!(v, Verdict::Forward);
        }
        assert_checksums(&r);
        proptest::prop_assert_eq!(endpoints(&r), (s, dport, h, sport));
    }
}

/// A jumbo frame given as its first page (`translate_len`): translated by its headers there,
/// every checksum right over the whole datagram (the payload past the page never read); a
/// Total Length past the frame is malformed; an ICMP error's quote must lie in the page.
#[test]
fn a_frame_of_several_pages_is_translated_by_its_first_page() {
    let mut nat = Setup::default().build(0);
    let payload: Vec<u8> = (0..8972).map(|i| (i % 251) as u8).collect();
    let mut f = Vec::new();
    eth()
        .ipv4(HOST_A, SERVER, 64)
        .udp(5000, 53)
        .write(&mut f, &payload)
        .unwrap();
    assert_eq!(f.len(), 9014);
    let len = f.len();
    let head = &mut f[..4084];
    assert_eq!(
        nat.translate_len(head, len, Ingress::Inside, 0),
        Verdict::Forward
    );
    let (src, sport, dst, dport) = endpoints(&f);
    assert_eq!((src, dst, dport), (PUB, SERVER, 53));
    assert_checksums(&f);
    // Back in, also by its first page.
    let mut r = Vec::new();
    eth()
        .ipv4(SERVER, PUB, 64)
        .udp(53, sport)
        .write(&mut r, &payload)
        .unwrap();
    assert_eq!(
        nat.translate_len(&mut r[..4084], len, Ingress::Outside, S),
        Verdict::Forward
    );
    assert_eq!(endpoints(&r), (SERVER, 53, HOST_A, 5000));
    assert_checksums(&r);
    // A Total Length past the frame: malformed, untouched.
    let mut g = f.clone();
    let before = g.clone();
    assert!(matches!(
        nat.translate_len(&mut g[..4084], len - 1, Ingress::Inside, 0),
        Verdict::Drop(NatDrop::Malformed(_))
    ));
    assert_eq!(g, before);
}
