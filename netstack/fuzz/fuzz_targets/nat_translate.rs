#![no_main]
//! Arbitrary frames through two cores' NAT44 (`netstack::nat::Nat::translate`; with bit 4 of
//! the first byte, `translate_len` over the frame's first bytes only, as a frame of several
//! pages is given), frames handed between them as the verdicts ask: no panic; a frame not
//! translated is untouched;
//! a translated one keeps every checksum that was valid; the verdicts match the counters;
//! no mapping or port outlives its sessions.

use libfuzzer_sys::fuzz_target;
use netstack::conntrack::table::Entry;
use netstack::nat::ports::{PortAlloc, PortPlan};
use netstack::nat::{
    Filtering, Forward, Ingress, Nat, NatConfig, NatDrop, NatStorage, Timeouts, Verdict,
};
use std::sync::{Mutex, OnceLock};

const POOL: [u32; 2] = [0xc633_6401, 0xc633_6402]; // 198.51.100.1, .2
const FORWARDS: [Forward; 1] = [Forward {
    proto: 6,
    outside_addr: 0xc633_6401,
    outside_port: 443,
    inside_addr: 0x0a00_0005,
    inside_port: 8443,
}];
const SESSIONS: usize = 64;

struct State {
    nats: [Nat<'static>; 2],
    now: u64,
    /// Verdicts seen per core: drops by reason, hand-offs.
    drops: [[u64; NatDrop::COUNT]; 2],
    handoffs: [u64; 2],
}

fn nat(core: u16) -> Nat<'static> {
    let cfg = NatConfig {
        pool: &POOL,
        port_lo: 1024,
        // A small range, so that exhaustion is reachable: 40 ports per core.
        port_hi: 1103,
        cores: 2,
        core,
        filtering: if core == 0 {
            Filtering::AddressAndPortDependent
        } else {
            Filtering::EndpointIndependent
        },
        forwards: &FORWARDS,
        timeouts: Timeouts {
            tcp_established: 60,
            tcp_transitory: 10,
            udp: 20,
            icmp: 5,
        },
        key: 7,
        seed: 11,
    };
    let plan = PortPlan { lo: 1024, hi: 1103, cores: 2 };
    let maps = SESSIONS + FORWARDS.len() + 1;
    let st = NatStorage {
        sessions: vec![Entry::default(); SESSIONS].leak(),
        session_buckets: vec![0; SESSIONS].leak(),
        maps: vec![Entry::default(); maps].leak(),
        map_buckets: vec![0; maps.next_power_of_two()].leak(),
        ports: vec![0; PortAlloc::words_for(POOL.len(), plan.block(core).1)].leak(),
    };
    Nat::new(&cfg, st).unwrap()
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(State {
            nats: [nat(0), nat(1)],
            now: 0,
            drops: [[0; NatDrop::COUNT]; 2],
            handoffs: [0; 2],
        })
    })
}

fn ones_sum(d: &[u8]) -> u32 {
    let mut s: u32 = 0;
    for c in d.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// (IPv4 header checksum valid, transport checksum valid) of an IPv4 frame whose headers
/// are whole; `None` for anything else. A UDP checksum of 0 (none) counts as valid.
fn sums(f: &[u8]) -> Option<(bool, bool)> {
    if f.len() < 34 || f[12..14] != [8, 0] || f[14] >> 4 != 4 {
        return None;
    }
    let hl = usize::from(f[14] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
    if hl < 20 || total < hl || 14 + total > f.len() {
        return None;
    }
    let ip = &f[14..14 + hl];
    let l4 = &f[14 + hl..14 + total];
    let ip_ok = fold(ones_sum(ip)) == 0xffff;
    let pseudo = ones_sum(&ip[12..20]) + u32::from(ip[9]) + l4.len() as u32;
    let l4_ok = match ip[9] {
        6 if l4.len() >= 20 => fold(pseudo + ones_sum(l4)) == 0xffff,
        17 if l4.len() >= 8 => {
            l4[6..8] == [0, 0] || fold(pseudo + ones_sum(l4)) == 0xffff
        }
        1 if l4.len() >= 8 => fold(ones_sum(l4)) == 0xffff,
        _ => return None,
    };
    Some((ip_ok, l4_ok))
}

fn one(st: &mut State, core: usize, frame: &mut [u8], from: Ingress, hops: u32, head: usize) {
    let before = frame.to_vec();
    let sums_before = sums(frame);
    let len = frame.len();
    let v = st.nats[core].translate_len(&mut frame[..head.min(len)], len, from, st.now);
    assert_eq!(frame.len(), before.len());
    // A hairpin dropped in its inbound half was translated outbound first.
    let hairpin = from == Ingress::Inside
        && before.len() >= 34
        && POOL.contains(&u32::from_be_bytes([before[30], before[31], before[32], before[33]]));
    let translated = match v {
        Verdict::Forward | Verdict::Hairpin => true,
        Verdict::HandOff { from, .. } => from == Ingress::Hairpin,
        Verdict::Drop(_) => hairpin && frame != &before[..],
        Verdict::NotIpv4 => false,
    };
    if translated {
        if let (Some((ip0, l40)), Some((ip1, l41))) = (sums_before, sums(frame)) {
            assert!(!ip0 || ip1, "IPv4 checksum broken: {v:?}");
            assert!(!l40 || l41, "transport checksum broken: {v:?}");
        }
    } else {
        assert_eq!(frame, &before[..], "{v:?} changed the frame");
    }
    match v {
        Verdict::Drop(d) => st.drops[core][d.index()] += 1,
        Verdict::HandOff { core: to, from } => {
            st.handoffs[core] += 1;
            assert!(usize::from(to) != core && to < 2);
            // The owner takes it; a frame goes at most one more hop (a hairpin onward).
            assert!(hops < 2, "handed off again: {v:?}");
            one(st, usize::from(to), frame, from, hops + 1, head);
        }
        _ => {}
    }
    let n = &st.nats[core];
    assert_eq!(n.counters().drops, st.drops[core]);
    assert_eq!(n.counters().handed_off, st.handoffs[core]);
    let sessions = n.sessions().len();
    let maps = n.mappings().len();
    assert!(sessions <= SESSIONS);
    // Every dynamic mapping has a session and a port; the forward has neither.
    assert!(maps <= sessions + FORWARDS.len(), "{maps} mappings, {sessions} sessions");
    let ports: u32 = (0..POOL.len())
        .flat_map(|a| [6, 17, 1].map(|p| n.ports_in_use(a, p)))
        .sum();
    assert_eq!(ports as usize, maps - FORWARDS.len());
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let mut st = state().lock().unwrap_or_else(|e| e.into_inner());
    let st = &mut *st;
    let from = match data[0] & 3 {
        0 | 3 => Ingress::Inside,
        1 => Ingress::Outside,
        _ => Ingress::Hairpin,
    };
    let core = usize::from(data[0] >> 2 & 1);
    // Time steps of up to 65.5 s (ms), so that every timeout is crossed now and then.
    st.now += u64::from(u16::from_le_bytes([data[1], data[2]])) * 1_000_000;
    if data[0] & 8 != 0 {
        let now = st.now;
        for n in &mut st.nats {
            n.tick(now, 1000);
        }
    }
    let mut frame = data[3..].to_vec();
    // The first page: the whole frame, or (bit 4) all but its last bytes (up to 255).
    let head = match data[0] & 16 {
        0 => frame.len(),
        _ => frame.len().saturating_sub(usize::from(data[1])),
    };
    one(st, core, &mut frame, from, 0, head);
});
