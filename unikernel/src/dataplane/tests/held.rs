//! Frames held across poll iterations: the [`Stash`] gives each frame back once, by its
//! handle, and the router holds a frame waiting for ARP there (no page number in its queue):
//! released by the answer, sent and counted; or given back at `quit` with every page.

use super::{arp_reply, rig, udp, PAGES};
use crate::dataplane::nf::{Held, Stash};
use netstack::MacAddr;
use rig::{port_mac, Rig};
use std::net::Ipv4Addr;
use std::vec::Vec;

/// The next hop on port 1.
const NEXT_HOP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
/// Its MAC.
const NEXT_HOP_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 2]);
/// The router's two ports.
const ROUTER: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none";

#[test]
fn a_stash_gives_each_frame_back_once_by_its_handle() {
    let mut rig = Rig::new("mode=l2 mgmt=none", 1, PAGES);
    let c = &mut rig.cores[0];
    let mut stash = Stash::<3>::new();
    assert!(stash.is_empty());
    let mut handles = Vec::new();
    for mark in 1..=3u16 {
        let page = c.core.pages_mut().alloc(0).expect("a page");
        let h = Held {
            page,
            rest: heapless::Vec::new(),
            len: 60,
            offset: 0,
            port: 0,
            mark,
        };
        let next = stash.next_handle().expect("room");
        let got = stash.insert(h).map_err(|_| "full").unwrap();
        assert_eq!(got, next, "the handle next_handle promised");
        handles.push(got);
    }
    assert_eq!(stash.len(), 3);
    assert_eq!(stash.next_handle(), None, "full");
    let extra = Held {
        page: c.core.pages_mut().alloc(0).expect("a page"),
        rest: heapless::Vec::new(),
        len: 60,
        offset: 0,
        port: 0,
        mark: 9,
    };
    let extra = stash.insert(extra).expect_err("a full stash refuses");
    assert_eq!(extra.mark(), 9, "and gives the frame back");
    c.core.pages_mut().recycle(extra.page);
    // The second frame, by its handle; then its handle holds nothing and is the next given.
    let second = stash.take(handles[1]).expect("held");
    assert_eq!(second.mark(), 2);
    assert!(stash.take(handles[1]).is_none(), "taken once");
    assert!(stash.take(999).is_none(), "a handle never given");
    assert_eq!(stash.next_handle(), Some(handles[1]));
    c.core.pages_mut().recycle(second.page);
    let mut marks = Vec::new();
    stash.take_each(|h| {
        marks.push(h.mark());
        c.core.pages_mut().recycle(h.page);
    });
    marks.sort();
    assert_eq!(marks, [1, 3]);
    assert!(stash.is_empty());
    rig.quit_and_check();
}

/// A router rig and one datagram to [`NEXT_HOP`] (unresolved) polled in: the router queued it
/// and asked for the next hop (its ARP request out of port 1, taken off the ring).
fn one_waiting() -> Rig {
    let mut rig = Rig::new(ROUTER, 1, PAGES);
    let c = &mut rig.cores[0];
    let frame = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), NEXT_HOP, 64);
    assert_eq!(c.dev[0].deliver_rx(&frame, 1), 1);
    c.core.poll_once();
    let mut arp = 0;
    c.dev[1].complete_tx(|f| arp += usize::from(f[12..14] == [0x08, 0x06]));
    assert_eq!(arp, 1, "the router asked for the next hop");
    let rs = c.core.route().unwrap();
    assert_eq!(rs.held.len(), 1, "the frame is held");
    assert_eq!(rs.router.counters().queued, 1);
    assert_eq!(c.core.nf_counters().kept, 1);
    rig
}

#[test]
fn a_frame_held_for_arp_is_sent_when_the_answer_comes() {
    let mut rig = one_waiting();
    let c = &mut rig.cores[0];
    let reply = arp_reply(NEXT_HOP_MAC, NEXT_HOP);
    assert_eq!(c.dev[1].deliver_rx(&reply, 1), 1);
    c.core.poll_once();
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out.len(), 1, "the held frame went out");
    assert_eq!(&out[0][..6], &NEXT_HOP_MAC.0, "to the next hop's MAC");
    assert_eq!(out[0][14 + 8], 63, "TTL decremented");
    assert!(c.core.route().unwrap().held.is_empty());
    let nf = *c.core.nf_counters();
    assert_eq!(nf.kept, 2, "the datagram and the ARP reply: {nf:?}");
    assert_eq!(
        nf.sent_held, 2,
        "the ARP request built and the datagram: {nf:?}"
    );
    assert_eq!(nf.consumed, 1, "the reply the router learned from: {nf:?}");
    assert_eq!(nf.dropped, 0, "{nf:?}");
    assert_eq!(c.core.route().unwrap().router.counters().forwarded, 1);
    rig.quit_and_check();
}

#[test]
fn a_frame_still_held_at_quit_gives_its_page_back() {
    let mut rig = one_waiting();
    rig.quit_and_check();
}
