#![no_main]
//! Arbitrary bytes as frames into the router (IPv6 frames into its IPv6 half, `Router6`, with
//! Router Advertisements on, and its fast path, which must agree with it on every frame it
//! takes): no panic, exactly one outcome per frame.

use libfuzzer_sys::fuzz_target;
use netstack::router::{
    parse_ipv4_cidr, parse_route, Action, Fib, PortConfig, Router, RouterConfig, RuleSlot,
    TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::router::fib6::{Node6, Poptrie, Route6, DIRECT_LEN};
use netstack::router::icmp::TokenBucket;
use netstack::router::parse6::parse_ipv6_cidr;
use netstack::router::v6::{Action6, NextHop6, Port6, Router6};
use netstack::router::NeighConfig;
use netstack::MacAddr;
use std::sync::{Mutex, OnceLock};

type R = Router<'static, u32, 8, 4>;
type R6 = Router6<'static, u32, 8, 4>;

struct State {
    router: R,
    router6: R6,
    now_ns: u64,
    next_handle: u32,
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        let fib = Fib::new(
            core::iter::repeat_with(core::sync::atomic::AtomicU32::default)
                .take(TBL24_LEN)
                .collect::<Vec<_>>()
                .leak(),
            vec![0u32; 16 * TBL8_GROUP_LEN].leak(),
            vec![RuleSlot::EMPTY; 64].leak(),
        )
        .unwrap();
        let ports = [
            PortConfig {
                mac: MacAddr([2, 0, 0, 0, 0, 1]),
                addr: parse_ipv4_cidr("10.0.0.1/24").unwrap(),
            },
            PortConfig {
                mac: MacAddr([2, 0, 0, 0, 1, 1]),
                addr: parse_ipv4_cidr("10.0.1.1/24").unwrap(),
            },
        ];
        let mut router = R::new(fib, &ports, RouterConfig::default()).unwrap();
        let (p, g) = parse_route("192.168.0.0/16,10.0.1.2").unwrap();
        router.add_route(p, g).unwrap();
        Mutex::new(State {
            router,
            router6: router6(),
            now_ns: 0,
            next_handle: 0,
        })
    })
}

/// Ports 2001:db8::1/64 (MTU 1500) and 2001:db8:0:1::1/64 (MTU 1280), and
/// 2001:db8:100::/48 through 2001:db8:0:1::2.
fn router6() -> R6 {
    let ports = [
        Port6 {
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            addr: parse_ipv6_cidr("2001:db8::1/64").unwrap(),
            mtu: 1500,
        },
        Port6 {
            mac: MacAddr([2, 0, 0, 0, 1, 1]),
            addr: parse_ipv6_cidr("2001:db8:0:1::1/64").unwrap(),
            mtu: 1280,
        },
    ];
    let (mut routes, mut nexthops): (Vec<Route6>, Vec<NextHop6>) =
        R6::connected(&ports).unzip();
    routes.push(Route6 {
        prefix: 0x2001_0db8_0100 << 80,
        len: 48,
        nh: nexthops.len() as u32,
    });
    nexthops.push(NextHop6::Via {
        port: 1,
        gateway: (0x2001_0db8_0000_0001 << 64) | 2,
    });
    let size = Poptrie::size(&mut routes).unwrap();
    let trie = Poptrie::build(
        &mut routes,
        vec![0; DIRECT_LEN].leak(),
        vec![Node6::default(); size.nodes].leak(),
        vec![0; size.leaves].leak(),
    )
    .unwrap();
    R6::new(
        &ports,
        Box::leak(Box::new(trie)),
        nexthops.leak(),
        NeighConfig::default(),
        TokenBucket::new(1000, 50),
    )
    .unwrap()
    // Router Advertisements on: solicitations bring them forward, `poll` builds them.
    .with_ra(true)
}

/// One IPv6 frame through `Router6`, with its invariants.
fn ipv6(st: &mut State, port: usize, frame: &mut [u8]) {
    let flen = frame.len();
    let mut out = [0u8; 1600];
    let r = &mut st.router6;
    let balanced = |r: &R6| r.counters().outcomes() + r.queued_frames() as u64 == r.counters().rx;
    // The fast path first, on a copy: it takes a frame only as the slow path forwards it,
    // byte for byte, and leaves any other untouched (it counts what it takes itself).
    let mut fast = frame.to_vec();
    let taken = r.forward_fast(port, &mut fast, flen, st.now_ns);
    match taken {
        Some((p, len)) => assert!(usize::from(p) != port && len <= flen),
        None => assert_eq!(&fast[..], &frame[..], "refused but changed"),
    }
    assert!(balanced(r));
    let before = (r.counters().outcomes(), r.queued_frames());
    let a = r.process(port, frame, st.next_handle, st.now_ns, &mut out);
    if let Some((p, len)) = taken {
        assert_eq!(a, Action6::Forward { port: p, len }, "the fast path's");
        assert_eq!(&fast[..len], &frame[..len], "the fast path's bytes");
    }
    let after = (r.counters().outcomes(), r.queued_frames());
    assert_eq!(
        (after.0 - before.0) as usize + after.1 - before.1,
        1,
        "{a:?}"
    );
    assert!(balanced(r));
    match a {
        Action6::Forward { port, len } => {
            assert!(port < 2 && (54..=flen).contains(&len));
            assert_eq!(usize::from(u16::from_be_bytes([frame[18], frame[19]])) + 54, len);
        }
        Action6::Reply { port: p, len } => assert!(usize::from(p) == port && len <= flen),
        Action6::Send { port: p, len, .. } => {
            assert!(usize::from(p) == port && (14 + 48..=14 + 1280).contains(&len));
        }
        Action6::Queued | Action6::ToHost | Action6::Consumed | Action6::Drop(_) => {}
    }
    let mut n = 0;
    while r.poll(st.now_ns, &mut out).is_some() {
        n += 1;
        assert!(n < 10_000, "poll does not converge");
    }
    assert!(balanced(r));
}

fn balanced(r: &R) -> bool {
    r.counters().outcomes() + r.queued_frames() as u64 == r.counters().rx
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let mut st = state().lock().unwrap_or_else(|e| e.into_inner());
    let st = &mut *st;
    let port = usize::from(data[0] % 3);
    st.now_ns += u64::from(u16::from_le_bytes([data[1], data[2]])) * 1000;
    let mut frame = data[3..].to_vec();
    let flen = frame.len();
    let mut out = [0u8; 128];
    st.next_handle = st.next_handle.wrapping_add(1);
    if frame.get(12..14) == Some(&[0x86, 0xdd]) {
        ipv6(st, port, &mut frame);
        return;
    }

    let r = &mut st.router;
    let before = (r.counters().outcomes(), r.queued_frames());
    let a = r.process(port, &mut frame, st.next_handle, st.now_ns, &mut out);
    let after = (r.counters().outcomes(), r.queued_frames());
    assert_eq!(
        (after.0 - before.0) as usize + after.1 - before.1,
        1,
        "{a:?}"
    );
    assert!(balanced(r));
    assert_eq!(frame.len(), flen);
    match a {
        Action::Forward { port, len } => {
            assert!(port < 2 && (34..=flen).contains(&len));
            let ip = &frame[14..len];
            assert_eq!(ones_sum(&ip[..usize::from(ip[0] & 0xf) * 4]), 0xffff);
        }
        Action::Reply { port: p, len } => assert!(usize::from(p) == port && len <= flen),
        Action::Icmp { port: p, len, .. } => {
            assert!(usize::from(p) == port && len <= out.len());
            assert_eq!(ones_sum(&out[14..34]), 0xffff);
            assert_eq!(ones_sum(&out[34..len]), 0xffff);
        }
        Action::Fragment { port, mtu } => {
            assert!(port < 2 && mtu == r.mtu(usize::from(port)));
        }
        Action::Queued | Action::ToHost | Action::Consumed | Action::Drop(_) => {}
    }
    let mut buf = [0u8; 128];
    let mut n = 0;
    while r.poll(st.now_ns, &mut buf).is_some() {
        n += 1;
        assert!(n < 10_000, "poll does not converge");
    }
    assert!(balanced(r));
});

fn ones_sum(d: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in d.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}
