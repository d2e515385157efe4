//! The connection table's tests: lookups both ways, lazy and swept expiry, the sweep's wait,
//! eviction of embryonic entries only.

use super::*;
use std::vec;
use std::vec::Vec;

fn tup(src: u32, sport: u16) -> Tuple {
    Tuple {
        src,
        dst: 0xc633_6401,
        sport,
        dport: 80,
        proto: 6,
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn entry_is_64_bytes() {
    assert_eq!(core::mem::size_of::<Entry<u32>>(), 64);
}

#[test]
fn both_sides_find_the_entry_and_expiry_is_lazy_and_swept() {
    let mut e = vec![Entry::<u32>::default(); 8];
    let mut b = vec![0u32; 8];
    let mut t = Table::new(&mut e, &mut b, 7, Timeouts::default()).unwrap();
    let a = tup(0x0a00_0002, 1000);
    let i = t
        .insert(a, a.reversed(), Class::Udp, 0, 0, 42, 0, &mut |_| {})
        .unwrap();
    assert_eq!(t.lookup(&a, Side::Inside, S, &mut |_| {}), Some(i));
    assert_eq!(
        t.lookup(&a.reversed(), Side::Outside, S, &mut |_| {}),
        Some(i)
    );
    // The wrong side does not match.
    assert_eq!(t.lookup(&a, Side::Outside, S, &mut |_| {}), None);
    // 300 s is the UDP timeout: still there at 300 s, gone after.
    assert_eq!(t.lookup(&a, Side::Inside, 300 * S, &mut |_| {}), Some(i));
    let mut freed = Vec::new();
    assert_eq!(
        t.lookup(&a, Side::Inside, 300 * S + 1, &mut |e| freed.push(e.value)),
        None
    );
    assert_eq!((freed, t.len(), t.counters().expired), (vec![42], 0, 1));
    // The sweep frees expired heads only, in order of last use.
    for k in 0..4u16 {
        t.insert(
            tup(1, k),
            tup(2, k),
            Class::Udp,
            0,
            0,
            u32::from(k),
            u64::from(k) * S,
            &mut |_| {},
        )
        .unwrap();
    }
    let mut freed = Vec::new();
    assert_eq!(t.expire(302 * S, 8, &mut |e| freed.push(e.value)), 2);
    assert_eq!(freed, vec![0, 1]);
    // A touch moves an entry to the tail: entry 2 outlives entry 3.
    let i2 = t
        .lookup(&tup(1, 2), Side::Inside, 302 * S, &mut |_| {})
        .unwrap();
    t.touch(i2, 302 * S);
    let mut freed = Vec::new();
    assert_eq!(t.expire(304 * S, 8, &mut |e| freed.push(e.value)), 1);
    assert_eq!((freed, t.len()), (vec![3], 1));
}

/// The sweep waits for the earliest head; an entry of a shorter timeout or new timeouts
/// bring it forward.
#[test]
fn the_sweep_waits_for_the_earliest_head() {
    let (mut e, mut b) = (vec![Entry::<u32>::default(); 8], vec![0u32; 8]);
    let mut t = Table::new(&mut e, &mut b, 7, Timeouts::default()).unwrap();
    let add = |t: &mut Table<'_, u32>, k, class, at| {
        t.insert(tup(1, k), tup(2, k), class, 0, 0, 0, at, &mut |_| {})
    };
    add(&mut t, 1, Class::Udp, 0).unwrap();
    assert_eq!(t.expire(S, 8, &mut |_| {}), 0);
    assert_eq!(t.next_sweep, 300 * S, "the UDP head's deadline");
    add(&mut t, 2, Class::Icmp, S).unwrap();
    assert_eq!(t.next_sweep, 61 * S, "an ICMP entry is due first");
    assert_eq!(t.expire(61 * S + 1, 8, &mut |_| {}), 1);
    assert_eq!(t.next_sweep, 300 * S);
    t.timeouts.udp = 10;
    assert_eq!(
        t.expire(11 * S, 8, &mut |_| {}),
        1,
        "new timeouts void the wait"
    );
}

/// A full table evicts the oldest embryonic entry and never an established one.
#[test]
fn full_table_evicts_embryonic_only() {
    let mut e = vec![Entry::<u32>::default(); 4];
    let mut b = vec![0u32; 4];
    let mut t = Table::new(&mut e, &mut b, 1, Timeouts::default()).unwrap();
    for k in 0..2 {
        t.insert(
            tup(1, k),
            tup(2, k),
            Class::TcpEstablished,
            3,
            0,
            0,
            0,
            &mut |_| {},
        )
        .unwrap();
    }
    t.insert(
        tup(3, 0),
        tup(4, 0),
        Class::TcpEmbryonic,
        1,
        0,
        10,
        1,
        &mut |_| {},
    )
    .unwrap();
    t.insert(
        tup(3, 1),
        tup(4, 1),
        Class::UdpUnreplied,
        0,
        0,
        11,
        2,
        &mut |_| {},
    )
    .unwrap();
    let mut freed = Vec::new();
    t.insert(
        tup(5, 0),
        tup(6, 0),
        Class::TcpEmbryonic,
        1,
        0,
        12,
        3,
        &mut |e| freed.push(e.value),
    )
    .unwrap();
    assert_eq!(freed, vec![10]);
    t.insert(
        tup(5, 1),
        tup(6, 1),
        Class::TcpEstablished,
        3,
        0,
        13,
        4,
        &mut |e| freed.push(e.value),
    )
    .unwrap();
    assert_eq!(freed, vec![10, 11]);
    t.insert(
        tup(5, 2),
        tup(6, 2),
        Class::TcpEmbryonic,
        1,
        0,
        14,
        5,
        &mut |e| freed.push(e.value),
    )
    .unwrap();
    assert_eq!(freed, vec![10, 11, 12]);
    let idx = t.lookup(&tup(5, 2), Side::Inside, 6, &mut |_| {}).unwrap();
    t.set_class(idx, Class::TcpEstablished, 6);
    assert_eq!(
        t.insert(
            tup(7, 0),
            tup(8, 0),
            Class::TcpEmbryonic,
            1,
            0,
            15,
            7,
            &mut |_| {}
        ),
        Err(Full)
    );
    assert_eq!(
        (
            t.counters().evicted,
            t.counters().full,
            t.count(Class::TcpEstablished)
        ),
        (3, 1, 4)
    );
}

#[test]
fn refuses_bad_storage() {
    let mut e = vec![Entry::<u32>::default(); 4];
    let mut b = vec![0u32; 3];
    assert_eq!(
        Table::new(&mut e, &mut b, 0, Timeouts::default()).err(),
        Some(TableError::BucketsNotPowerOfTwo(3))
    );
    let mut e: Vec<Entry<u32>> = Vec::new();
    let mut b = vec![0u32; 4];
    assert_eq!(
        Table::new(&mut e, &mut b, 0, Timeouts::default()).err(),
        Some(TableError::BadCapacity(0))
    );
}
