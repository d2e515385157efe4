#![no_main]
//! Arbitrary bytes as frames into the router: no panic, exactly one outcome per frame.

use libfuzzer_sys::fuzz_target;
use netstack::router::{
    parse_ipv4_cidr, parse_route, Action, Fib, PortConfig, Router, RouterConfig, RuleSlot,
    TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::MacAddr;
use std::sync::{Mutex, OnceLock};

type R = Router<'static, u32, 8, 4>;

struct State {
    router: R,
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
            now_ns: 0,
            next_handle: 0,
        })
    })
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
