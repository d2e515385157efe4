//! Router mode: every routed frame ends in one outcome, and `forwarded` means handed to a TX
//! ring. A fragment train goes out whole or not at all: a TX ring without a slot for every
//! fragment, a pool without a page for every fragment, a datagram of more than 64 fragments
//! each drop the train before its first fragment, counted once on the egress port and once
//! as the router's `tx_dropped`; a single frame a full ring refuses is `tx_dropped` too.

use super::{arp_reply, rig, udp, PAGES};
use crate::dataplane::PageBuf;
use netstack::router::RouterCounters;
use netstack::simframes::{arp_request, udp4_frame};
use netstack::{DropReason, MacAddr, PortCounters};
use rig::{port_mac, Rig, SimCore};
use std::net::Ipv4Addr;
use std::vec::Vec;

/// The next hop on port 1.
const NEXT_HOP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
/// Its MAC.
const NEXT_HOP_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 2]);

/// A `len`-byte IPv4/UDP frame (DF clear) from 10.0.0.2 on port 0 to [`NEXT_HOP`].
fn datagram(len: usize) -> Vec<u8> {
    let mut f = std::vec![0u8; len];
    udp4_frame(
        &mut f,
        len,
        port_mac(0),
        MacAddr([2, 0, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 0, 0, 2),
        NEXT_HOP,
        64,
    );
    f
}

/// A router rig with `cmdline` whose next hop on port 1 is known (its ARP request taught
/// the router), port 1's TX ring empty.
fn resolved(cmdline: &str) -> Rig {
    let mut rig = Rig::new(cmdline, 1, PAGES);
    let c = &mut rig.cores[0];
    let mut req = [0u8; 64];
    let n = arp_request(&mut req, NEXT_HOP_MAC, NEXT_HOP, Ipv4Addr::new(10, 0, 1, 1));
    c.dev[1].deliver_rx(&req[..n], 1);
    c.core.poll_once();
    c.dev[1].complete_tx(|_| {});
    // Its answer to the router's own request makes the entry Reachable (a request only
    // teaches a Stale one), which the fast path needs.
    let reply = arp_reply(NEXT_HOP_MAC, NEXT_HOP);
    c.dev[1].deliver_rx(&reply, 1);
    c.core.poll_once();
    // One frame through, then the fast path takes the next ones.
    let small = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), NEXT_HOP, 64);
    c.dev[0].deliver_rx(&small, 1);
    c.core.poll_once();
    let kept = c.core.nf_counters().kept;
    c.dev[0].deliver_rx(&small, 1);
    c.core.poll_once();
    assert_eq!(c.core.nf_counters().kept, kept, "the fast path took it");
    c.dev[1].complete_tx(|_| {});
    c.core.poll_once();
    rig
}

/// The router's counters.
fn router(c: &SimCore) -> RouterCounters {
    *c.core.route().unwrap().router.counters()
}

/// Port 1's free TX descriptors.
fn tx_free(c: &SimCore) -> usize {
    c.core.nics().unwrap()[1].tx_free_slots()
}

/// Fill port 1's TX ring (the device completes nothing) with 60-byte routed frames until
/// `leave` descriptors are free.
fn fill_tx(c: &mut SimCore, leave: usize) {
    let small = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), NEXT_HOP, 64);
    while tx_free(c) > leave {
        let n = (tx_free(c) - leave).min(32);
        assert_eq!(c.dev[0].deliver_rx(&small, n), n);
        c.core.poll_once();
    }
    assert_eq!(tx_free(c), leave);
}

/// The lengths of the IPv4 frames port 1 sent (its ARP requests left out), the device
/// completing every frame on the ring.
fn ipv4_out(c: &mut SimCore) -> Vec<usize> {
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| {
        if f[12..14] == [0x08, 0x00] {
            out.push(f.len());
        }
    });
    out
}

/// Every frame the router was given has one outcome (nothing is queued in these cases).
fn one_outcome_each(c: &SimCore) {
    let r = router(c);
    assert_eq!(r.outcomes(), r.rx, "{r:?}");
}

/// Delivers one 1,514-byte datagram to port 0 and polls once; asserts the router dropped its
/// train whole (not forwarded, not fragmented, one `tx_dropped`) and returns the port counters.
fn train_dropped_whole(c: &mut SimCore) -> [PortCounters; 2] {
    let before = router(c);
    assert_eq!(c.dev[0].deliver_rx(&datagram(1514), 1), 1);
    c.core.poll_once();
    let r = router(c);
    assert_eq!(
        (r.forwarded, r.fragmented, r.tx_dropped),
        (before.forwarded, before.fragmented, before.tx_dropped + 1),
        "dropped whole, counted once"
    );
    *c.core.counters()
}

#[test]
fn a_train_that_does_not_fit_the_tx_ring_is_dropped_whole_and_a_refused_frame_is_not_forwarded() {
    // Egress MTU 576: a 1,514-byte frame is 3 fragments.
    let mut rig = resolved("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none mtu1=576");
    let c = &mut rig.cores[0];
    fill_tx(c, 2);
    let tx_before = c.core.counters()[1].tx;
    let k = train_dropped_whole(c);
    assert_eq!(
        k[1].drops_for(DropReason::TxRingFull),
        1,
        "on the egress port"
    );
    assert_eq!(k[0].drops_total(), 0, "nothing on the ingress port");
    assert_eq!(k[1].tx, tx_before, "no fragment sent");
    assert_eq!(tx_free(c), 2);
    one_outcome_each(c);

    // The last two slots taken by the fast path, one frame more: the ring refuses it in the
    // fused burst (`NetworkFunction::tx_refused`), so it is not forwarded either.
    fill_tx(c, 0);
    let before = router(c);
    let small = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), NEXT_HOP, 64);
    c.dev[0].deliver_rx(&small, 1);
    c.core.poll_once();
    let r = router(c);
    assert_eq!(
        (r.rx, r.forwarded, r.tx_dropped),
        (before.rx + 1, before.forwarded, before.tx_dropped + 1)
    );
    assert_eq!(c.core.counters()[1].drops_for(DropReason::TxRingFull), 2);
    one_outcome_each(c);

    // With the ring drained the same datagram leaves as its 3 fragments, one `forwarded`.
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.len()));
    assert_eq!(out.len(), 256);
    assert!(out.iter().all(|&n| n <= 60), "no fragment among them");
    c.core.poll_once();
    let before = router(c);
    c.dev[0].deliver_rx(&datagram(1514), 1);
    c.core.poll_once();
    let frags = ipv4_out(c);
    assert_eq!(frags, [14 + 572, 14 + 572, 14 + 20 + 1480 - 2 * 552]);
    let r = router(c);
    assert_eq!(
        (r.forwarded, r.fragmented, r.tx_dropped),
        (
            before.forwarded + 1,
            before.fragmented + 1,
            before.tx_dropped
        )
    );
    one_outcome_each(c);
    rig.quit_and_check();
}

#[test]
fn a_train_short_of_pages_is_dropped_whole() {
    let mut rig = resolved("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none mtu1=576");
    let c = &mut rig.cores[0];
    // Take every page of pool 1, the egress port's, where fragments are made (and the zone
    // behind it), then give 2 back: the train needs 3.
    let mut held: Vec<PageBuf> = Vec::new();
    while let Some(pg) = c.core.pages_mut().alloc(1) {
        held.push(pg);
    }
    for pg in held.drain(..2) {
        c.core.pages_mut().recycle(pg);
    }
    let tx_before = c.core.counters()[1].tx;
    let nobuf_before = c.core.counters()[1].no_buffer;
    let k = train_dropped_whole(c);
    assert_eq!(k[1].no_buffer, nobuf_before + 1, "on the egress port");
    assert_eq!(ipv4_out(c), [0usize; 0], "no fragment sent");
    assert!(k[1].tx - tx_before <= 1, "at most the ARP re-ask");
    one_outcome_each(c);
    for pg in held {
        c.core.pages_mut().recycle(pg);
    }
    rig.quit_and_check();
}

#[test]
fn a_datagram_of_more_than_64_fragments_is_refused_before_any_is_sent() {
    // Ingress MTU 9000, egress 68: 48 payload bytes a fragment.
    let mut rig =
        resolved("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none mtu0=9000 mtu1=68");
    let c = &mut rig.cores[0];
    // 64 fragments exactly (64 × 48 payload bytes, one page) go out; 65 (one page) and 188 (a
    // 9,014-byte frame of three pages) are refused.
    for (len, frags) in [
        (14 + 20 + 64 * 48, Some(64)),
        (14 + 20 + 64 * 48 + 1, None),
        (9014, None),
    ] {
        let before = router(c);
        let k0 = c.core.counters()[1];
        assert_eq!(c.dev[0].deliver_rx_mrg(&datagram(len), 1), 1);
        c.core.poll_once();
        let r = router(c);
        let k = c.core.counters()[1];
        let out = ipv4_out(c);
        c.core.poll_once();
        match frags {
            Some(n) => {
                assert_eq!(out.len(), n, "{len} bytes");
                assert!(out.iter().all(|&f| f <= 14 + 68));
                assert_eq!(r.forwarded, before.forwarded + 1);
            }
            None => {
                assert_eq!(out.len(), 0, "{len} bytes: no fragment sent");
                assert_eq!(
                    k.drops_for(DropReason::TooBig),
                    k0.drops_for(DropReason::TooBig) + 1,
                    "{len} bytes: too_big once, on the egress port"
                );
                assert_eq!(
                    (r.forwarded, r.fragmented, r.tx_dropped),
                    (before.forwarded, before.fragmented, before.tx_dropped + 1)
                );
            }
        }
        one_outcome_each(c);
    }
    assert_eq!(c.core.counters()[0].drops_total(), 0);
    rig.quit_and_check();
}

#[test]
fn a_hairpin_the_kept_list_has_no_room_for_is_not_forwarded() {
    // A burst of 65 hairpins (in and out of port 1, rewritten by the fast path and kept to
    // be sent after the burst): the iteration keeps 64.
    let mut rig = resolved("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none burst=128");
    let c = &mut rig.cores[0];
    let hairpin = udp(port_mac(1), Ipv4Addr::new(10, 0, 1, 3), NEXT_HOP, 64);
    let before = router(c);
    assert_eq!(c.dev[1].deliver_rx(&hairpin, 65), 65);
    c.core.poll_once();
    let r = router(c);
    assert_eq!(c.core.nf_counters().keep_overflow, 1);
    assert_eq!(
        (r.rx, r.forwarded, r.tx_dropped),
        (before.rx + 65, before.forwarded + 64, before.tx_dropped + 1)
    );
    let mut out = 0;
    c.dev[1].complete_tx(|f| out += usize::from(f[12..14] == [0x08, 0x00]));
    assert_eq!(out, 64);
    one_outcome_each(c);
    rig.quit_and_check();
}
