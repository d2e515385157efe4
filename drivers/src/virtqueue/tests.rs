//! Unit tests of the split virtqueue: ring arithmetic, in-order mode, wrap of the 16-bit indices.

use super::*;
extern crate std;
use crate::sim::{DeviceQueue, HostHal, SimShared, SimTransport};
use std::vec::Vec;

/// One descriptor as the device sees it: (address, length, flags).
type Part = (u64, u32, u16);

/// The device side of queue 0 of `shared` (the simulated device's [`DeviceQueue`]).
fn device(shared: &SimShared) -> DeviceQueue<'_> {
    // SAFETY: HostHal rings are identity-mapped and outlive the device in every test (the
    // queue is dropped last); the test only posts fake buffer addresses the device never
    // dereferences (it only reads descriptors and writes the used ring).
    unsafe { DeviceQueue::new(shared, 0) }.expect("queue 0 set up")
}

/// The next available buffer: its head and descriptors (address, length, flags).
fn take(dev: &mut DeviceQueue<'_>) -> Option<(u16, Vec<Part>)> {
    let head = dev.take()?;
    let mut parts = Vec::new();
    dev.for_each_desc(head, |d| parts.push((d.addr, d.len, d.flags)));
    Some((head, parts))
}

/// Return `head` as used with `len` bytes written, and publish the used index.
fn give_back(dev: &mut DeviceQueue<'_>, head: u16, len: u32) {
    dev.give_back(head, len);
    dev.publish(false);
}

#[test]
fn chains_reach_the_device_and_come_back_whole() {
    let shared = SimShared::new([0; 6]);
    let mut t = SimTransport::new(&shared);
    let mut q = SplitQueue::<HostHal, 8>::new(&mut t, 0, true).unwrap();
    let mut dev = device(&shared);
    assert_eq!(q.free_descs(), 8);
    // A device-readable header then a device-writable payload (§2.7.4.2 order).
    let head = q
        .push_chain(&[(0x1000, 12, false), (0x2000, 1500, true)])
        .unwrap();
    let single = q.push(0x3000, 60, false).unwrap();
    assert_eq!(q.free_descs(), 5);
    assert!(
        take(&mut dev).is_none(),
        "nothing is visible before publish"
    );
    q.publish();
    let (h, parts) = take(&mut dev).unwrap();
    assert_eq!(h, head);
    assert_eq!(
        parts,
        [
            (0x1000, 12, VIRTQ_DESC_F_NEXT),
            (0x2000, 1500, VIRTQ_DESC_F_WRITE)
        ]
    );
    let (s, parts) = take(&mut dev).unwrap();
    assert_eq!((s, parts), (single, std::vec![(0x3000, 60, 0)]));
    assert!(take(&mut dev).is_none());
    give_back(&mut dev, head, 1512);
    give_back(&mut dev, single, 0);
    assert_eq!(q.pop_used(), Some((u32::from(head), 1512)));
    q.release_chain(head);
    assert_eq!(
        q.free_descs(),
        7,
        "both descriptors of the chain are free again"
    );
    assert_eq!(q.pop_used(), Some((u32::from(single), 0)));
    q.release_chain(single);
    assert_eq!(q.free_descs(), 8);
    assert_eq!(q.pop_used(), None);
}

#[test]
fn a_chain_longer_than_the_free_descriptors_is_refused() {
    let shared = SimShared::new([0; 6]);
    let mut t = SimTransport::new(&shared);
    let mut q = SplitQueue::<HostHal, 4>::new(&mut t, 0, true).unwrap();
    for i in 0..3 {
        q.push(0x1000 * (i + 1), 64, true).unwrap();
    }
    assert_eq!(
        q.push_chain(&[(0x9000, 12, false), (0xa000, 64, true)]),
        None
    );
    assert_eq!(q.free_descs(), 1, "a refused chain takes nothing");
    assert_eq!(q.push_chain(&[]), None);
    assert!(q.push_chain(&[(0x9000, 12, false)]).is_some());
    assert_eq!(q.push(0xb000, 64, true), None, "ring full");
}

#[test]
fn used_ring_wraps_past_its_size_and_past_u16() {
    let shared = SimShared::new([0; 6]);
    let mut t = SimTransport::new(&shared);
    let mut q = SplitQueue::<HostHal, 4>::new(&mut t, 0, true).unwrap();
    let mut dev = device(&shared);
    // 70,000 buffers: the 16-bit indices wrap (the case virtio-drivers 0.13 stalled on).
    for i in 0..70_000u32 {
        let id = q.push(u64::from(i) * 64, 64, true).unwrap();
        q.publish();
        let (h, _) = take(&mut dev).unwrap();
        assert_eq!(h, id);
        give_back(&mut dev, h, i % 1500);
        assert_eq!(q.pop_used(), Some((u32::from(id), i % 1500)));
        q.release(id);
    }
    assert_eq!(q.free_descs(), 4);
}

#[test]
fn need_event_basic() {
    // Device asked to be kicked when index 5 is made available; we moved 3 -> 8.
    assert!(vring_need_event(5, 8, 3));
    // Event already passed before this batch.
    assert!(!vring_need_event(2, 8, 3));
    // Event not reached yet.
    assert!(!vring_need_event(8, 8, 3));
    assert!(vring_need_event(7, 8, 3));
}

#[test]
fn need_event_wraps() {
    // The case that stalls a naive `new >= event + 1` test: index wrapped past 65535.
    assert!(vring_need_event(65534, 2, 65530));
    assert!(vring_need_event(0, 1, 65535));
    assert!(!vring_need_event(10, 2, 65530));
    // The naive test `new >= event + 1` says 2 >= 65535: false, a missed kick.
    let (event, new) = (65534u16, 2u16);
    assert!(new < event.wrapping_add(1));
}
