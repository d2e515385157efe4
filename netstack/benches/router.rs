//! Router host benchmark (criterion): one [`Router::process`] call on a valid 64-byte IPv4/UDP
//! frame that is forwarded, with a FIB of the connected routes and 192.168.0.0/16 via 10.0.1.2
//! only and with 100,000 random prefixes added (seeded, /8–/32, mostly /16–/24 like a BGP
//! table, none in 192/8 or 10/8). Two frames: to 192.168.0.1, through the gateway (the fast
//! path: header checks, DIR-24-8 lookup, the per-core next-hop cache, TTL decrement with the
//! RFC 1624 update, MAC rewrite), and to 10.0.1.2, a host on the connected network (the same,
//! with a neighbour lookup per frame instead of the cached rewrite). The router reads the FIB
//! through `&Fib`, as each core's router does in the kernel.
//!
//! Run: `cargo bench -p netstack --bench router` (time per call). For an exact instruction count
//! per call, the figure docs/benchmarks-journal.md quotes, set `ROUTER_CALLS=N`: the binary then skips
//! criterion and makes N calls through the out-of-line [`process_once`], which callgrind
//! attributes exactly, for one case: `ROUTER_DST=gateway` (default) or `connected`,
//! `ROUTER_ROUTES=100000` (default) or any other count:
//!
//! ```sh
//! cargo bench -p netstack --bench router --no-run
//! ROUTER_CALLS=1000000 valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     $(ls -t target/release/deps/router-* | grep -v '\.d$' | head -1) --bench
//! callgrind_annotate --inclusive=yes cg.out | grep process_once   # ÷ 1,000,000 per call
//! ```
//!
//! `process_once` also copies the 60-byte template into the frame (a `memcpy` call, counted
//! separately by callgrind: subtract its inclusive count for `Router::process` alone).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use netstack::router::{
    parse_ipv4_cidr, Action, Fib, Ipv4Net, PortConfig, Router, RouterConfig, RuleSlot, TBL24_LEN,
    TBL8_GROUP_LEN,
};
use netstack::wire::{
    ARP_HLEN, ARP_HTYPE, ARP_HTYPE_ETHERNET, ARP_LEN, ARP_OPER, ARP_PLEN, ARP_PTYPE, ARP_REPLY,
    ARP_SHA, ARP_SPA, ARP_THA, ARP_TPA, ETHERTYPE, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_DST,
    ETH_HDR_LEN, ETH_SRC, IPPROTO_UDP, IPV4_CHECKSUM, IPV4_DST, IPV4_MIN_HDR, IPV4_PROTOCOL,
    IPV4_SRC, IPV4_TOTAL_LEN, IPV4_TTL, IPV4_VER_IHL,
};
use netstack::MacAddr;

/// tbl8 groups and rule slots for the 100k-route table.
const TBL8_GROUPS: usize = 8192;
const RULES: usize = 1 << 18;

const P0_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const P1_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const GEN_A: [u8; 6] = [2, 0, 0, 0, 0x0a, 2];
const GEN_B: [u8; 6] = [2, 0, 0, 0, 0x0b, 2];

/// A 60-byte Ethernet frame: IPv4/UDP 10.0.0.2 → `dst`, TTL 64, to port 0's MAC.
fn udp_frame(dst: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[ETH_DST].copy_from_slice(&P0_MAC);
    f[ETH_SRC].copy_from_slice(&GEN_A);
    f[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut f[ETH_HDR_LEN..ETH_HDR_LEN + IPV4_MIN_HDR];
    ip[IPV4_VER_IHL] = 0x45;
    ip[IPV4_TOTAL_LEN].copy_from_slice(&46u16.to_be_bytes());
    ip[IPV4_TTL] = 64;
    ip[IPV4_PROTOCOL] = IPPROTO_UDP;
    ip[IPV4_SRC].copy_from_slice(&[10, 0, 0, 2]);
    ip[IPV4_DST].copy_from_slice(&dst);
    let c = netstack::router::ipv4::checksum(ip);
    ip[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
    f
}

/// An ARP reply from 10.0.1.2 (generator side B) to port 1: resolves the next hop.
fn arp_reply() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[ETH_DST].copy_from_slice(&P1_MAC);
    f[ETH_SRC].copy_from_slice(&GEN_B);
    f[ETHERTYPE].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut f[ETH_HDR_LEN..ETH_HDR_LEN + ARP_LEN];
    a[ARP_HTYPE].copy_from_slice(&ARP_HTYPE_ETHERNET.to_be_bytes());
    a[ARP_PTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    a[ARP_HLEN] = 6;
    a[ARP_PLEN] = 4;
    a[ARP_OPER].copy_from_slice(&ARP_REPLY.to_be_bytes());
    a[ARP_SHA].copy_from_slice(&GEN_B);
    a[ARP_SPA].copy_from_slice(&[10, 0, 1, 2]);
    a[ARP_THA].copy_from_slice(&P1_MAC);
    a[ARP_TPA].copy_from_slice(&[10, 0, 1, 1]);
    f
}

/// xorshift64: a seeded, dependency-free source for the random prefixes.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// The kernel's router: one per core over the shared, read-only FIB.
type CoreRouter<'f, 'a> = Router<'a, u64, 64, 8, &'f Fib<'a>>;

/// One forwarded frame: copy the template in, route it. Out of line so callgrind can count it.
#[inline(never)]
fn process_once(
    r: &mut CoreRouter<'_, '_>,
    frame: &mut [u8],
    tmpl: &[u8],
    now: u64,
    icmp: &mut [u8],
) -> Action {
    frame.copy_from_slice(tmpl);
    r.process(0, black_box(frame), 0, now, icmp)
}

/// Through the gateway 10.0.1.2 (route 192.168.0.0/16): the fast path.
const TO_GATEWAY: [u8; 4] = [192, 168, 0, 1];
/// The gateway itself, a host on port 1's connected network: a neighbour lookup per frame.
const TO_CONNECTED: [u8; 4] = [10, 0, 1, 2];

fn bench_process(c: &mut Criterion, name: &str, routes: usize, dst: [u8; 4]) {
    let mut tbl24: Vec<core::sync::atomic::AtomicU32> = core::iter::repeat_with(Default::default)
        .take(TBL24_LEN)
        .collect();
    let mut tbl8 = vec![0u32; TBL8_GROUPS * TBL8_GROUP_LEN];
    let mut rules = vec![RuleSlot::EMPTY; RULES];
    let fib = Fib::new(&mut tbl24, &mut tbl8, &mut rules).expect("FIB storage");
    let ports = [
        PortConfig {
            mac: MacAddr(P0_MAC),
            addr: parse_ipv4_cidr("10.0.0.1/24").unwrap(),
        },
        PortConfig {
            mac: MacAddr(P1_MAC),
            addr: parse_ipv4_cidr("10.0.1.1/24").unwrap(),
        },
    ];
    // As the kernel does: a router with an owned FIB builds it, then each core's router reads
    // it through `&Fib`.
    let mut b: Router<'_, u64> = Router::new(fib, &ports, RouterConfig::default()).unwrap();
    let gw = "10.0.1.2".parse().unwrap();
    b.add_route(Ipv4Net::new([192, 168, 0, 0].into(), 16).unwrap(), gw)
        .unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut added = 0;
    while added < routes {
        let v = next(&mut seed);
        let len = [8u8, 16, 18, 20, 22, 23, 24, 24, 24, 24, 24, 28, 32][(v >> 40) as usize % 13];
        let addr = std::net::Ipv4Addr::from_bits((v as u32) & (u32::MAX << (32 - len)));
        // Keep the benchmark's own networks out of the random set.
        if [10, 192].contains(&addr.octets()[0]) {
            continue;
        }
        let net = Ipv4Net::new(addr, len).unwrap();
        if b.add_route(net, gw).is_ok() {
            added += 1;
        }
    }
    let fib = b.into_fib();
    let mut r = CoreRouter::new(&fib, &ports, RouterConfig::default()).unwrap();
    let tmpl = udp_frame(dst);
    let mut icmp = vec![0u8; 2048];
    let mut frame = tmpl.clone();
    // First frame queues behind ARP; the reply resolves it; poll sends the queued frame.
    let _ = r.process(0, &mut frame, 0, 0, &mut icmp);
    let _ = r.process(1, &mut arp_reply(), 1, 1, &mut icmp);
    while r.poll(2, &mut icmp).is_some() {}
    // The next one is forwarded (through a gateway: filling the next-hop cache).
    frame.copy_from_slice(&tmpl);
    assert!(matches!(
        r.process(0, &mut frame, 2, 3, &mut icmp),
        Action::Forward { port: 1, len: 60 }
    ));
    let mut now = 10u64;
    if let Some(calls) = std::env::var("ROUTER_CALLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        for _ in 0..calls {
            now += 1;
            let a = process_once(&mut r, &mut frame, &tmpl, now, &mut icmp);
            assert!(matches!(a, Action::Forward { .. }), "{a:?}");
        }
        println!("{name}: {calls} calls of process_once");
        return;
    }
    c.bench_function(name, |b| {
        b.iter(|| {
            now += 1;
            black_box(process_once(&mut r, &mut frame, &tmpl, now, &mut icmp))
        })
    });
}

fn benches(c: &mut Criterion) {
    if std::env::var_os("ROUTER_CALLS").is_some() {
        let dst = match std::env::var("ROUTER_DST").as_deref() {
            Ok("connected") => TO_CONNECTED,
            _ => TO_GATEWAY,
        };
        let routes = std::env::var("ROUTER_ROUTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        bench_process(c, "router/process/forward_64B", routes, dst);
        return;
    }
    for (routes, table) in [(0, "few_routes"), (100_000, "100k_routes")] {
        for (dst, how) in [(TO_GATEWAY, "gateway"), (TO_CONNECTED, "connected")] {
            let name = format!("router/process/forward_64B/{table}/{how}");
            bench_process(c, &name, routes, dst);
        }
    }
}

criterion_group!(router, benches);
criterion_main!(router);
