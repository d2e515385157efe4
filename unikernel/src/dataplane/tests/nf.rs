//! The network-function API on the host rig: each verdict ([`Verdict`]) and each [`Ctx`]
//! operation on real cores and drivers, every test ending with every page back.

use super::{l2_frame, udp, PAGES, ROUTER_MGMT};
use crate::dataplane::nf::{
    CounterDef, CounterValues, Ctx, Held, NetworkFunction, NfCounters, Packet, Verdict,
};
use crate::dataplane::testing::{port_mac, Rig};
use crate::dataplane::Platform;
use netstack::simframes::arp_request;
use netstack::{DropReason, MacAddr};
use std::net::Ipv4Addr;
use std::vec::Vec;

/// A UDP frame to destination port `dport` (the rig's 60-byte frame with its port changed).
fn udp_to(dport: u16) -> Vec<u8> {
    let mut f = l2_frame();
    // Ethernet 14 + IPv4 20: the UDP header; destination port at 2..4 (RFC 768). The UDP
    // checksum is not checked by the views.
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f
}

/// The example of the API's documentation, as a user writes it: drop UDP to one port, keep
/// ARP for the end of the burst and answer it by sending it back where it came from, give
/// UDP to port 161 to the management plane, forward the rest.
#[derive(Default)]
struct Filter {
    /// UDP destination ports seen.
    udp_ports: Vec<u16>,
    /// Kept frames sent back, and their bytes.
    hairpins: u64,
}

impl NetworkFunction for Filter {
    const NAME: &'static str = "filter";
    const MIN_FRAME: usize = 34;
    const COUNTERS: &'static [CounterDef] = &[
        CounterDef::one("udp_seen", "UDP datagrams seen (frames)."),
        CounterDef::one(
            "hairpins",
            "Kept frames sent back where they came from (frames).",
        ),
    ];

    fn counters(&self, out: &mut CounterValues) {
        out.set(0, self.udp_ports.len() as u64);
        out.set(1, self.hairpins);
    }

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.eth().ethertype() == smoltcp::wire::EthernetProtocol::Arp {
            return Verdict::Keep;
        }
        let Some(udp) = pkt.udp() else {
            return Verdict::Forward;
        };
        self.udp_ports.push(udp.dst_port());
        match udp.dst_port() {
            9 => Verdict::Drop,
            161 => Verdict::ToMgmt,
            _ => Verdict::ForwardFirst(pkt.len().min(42)),
        }
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(h) = ctx.next_kept() {
            self.hairpins += 1;
            let port = h.port();
            ctx.send(h, port);
        }
    }
}

#[test]
fn each_verdict_is_carried_out_and_counted_and_every_page_comes_back() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let mut nf = Filter::default();
    let mut arp = std::vec![0u8; 60];
    arp_request(
        &mut arp,
        MacAddr([2, 0, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
    );
    let c = &mut rig.cores[0];
    assert_eq!(c.dev[0].deliver_rx(&udp_to(7), 3), 3); // forwarded, cut to 42 bytes
    assert_eq!(c.dev[0].deliver_rx(&udp_to(9), 2), 2); // dropped
    assert_eq!(c.dev[0].deliver_rx(&udp_to(161), 1), 1); // no management plane: dropped
    assert_eq!(c.dev[0].deliver_rx(&arp, 2), 2); // kept, sent back out of port 0
    assert_eq!(c.dev[0].deliver_rx(&udp_to(7)[..20], 1), 1); // shorter than MIN_FRAME: runt
    assert!(c.core.poll_nf(&mut nf) > 0);
    let (mut out1, mut out0) = (Vec::new(), Vec::new());
    c.dev[1].complete_tx(|f| out1.push(f.to_vec()));
    c.dev[0].complete_tx(|f| out0.push(f.to_vec()));
    assert_eq!(out1, std::vec![udp_to(7)[..42].to_vec(); 3]);
    assert_eq!(
        out0,
        std::vec![arp.clone(); 2],
        "kept ARP frames hairpinned"
    );
    assert_eq!(nf.udp_ports, [7, 7, 7, 9, 9, 161]);
    assert_eq!(nf.hairpins, 2);
    assert_eq!(
        *c.core.nf_counters(),
        NfCounters {
            dropped: 2,
            kept: 2,
            mgmt_unavailable: 1,
            sent_held: 2,
            ..NfCounters::default()
        }
    );
    let pc = c.core.counters();
    assert_eq!(pc[0].rx, 9);
    assert_eq!(pc[0].drops_for(DropReason::Runt), 1);
    assert_eq!((pc[1].tx, pc[1].tx_bytes), (3, 3 * 42));
    assert_eq!((pc[0].tx, pc[0].tx_bytes), (2, 2 * 60));
    // Its own counters reach the core's snapshot at the tick (never per frame).
    assert_eq!(
        c.core.snap(false, 0).nf_own.to_stats().one("udp_seen"),
        None
    );
    c.core.tick_nf(&mut nf);
    let own = c.core.snap(false, 0).nf_own.to_stats();
    assert_eq!(
        (own.one("udp_seen"), own.one("hairpins")),
        (Some(6), Some(2))
    );
    rig.quit_and_check();
}

#[test]
fn to_mgmt_gives_a_copy_to_the_management_plane_of_the_port() {
    let mut rig = Rig::new(ROUTER_MGMT, 1, PAGES);
    let mut nf = Filter::default();
    let frame = udp(
        port_mac(0),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        64,
    );
    let mut snmp = frame.clone();
    snmp[36..38].copy_from_slice(&161u16.to_be_bytes());
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&snmp, 2);
    c.core.poll_nf(&mut nf);
    let m = c.core.mgmt_plane().unwrap();
    assert_eq!(m.frames, std::vec![snmp.clone(); 2]);
    assert_eq!(c.core.nf_counters().to_mgmt, 2);
    assert_eq!(c.core.counters()[1].tx, 0);
    rig.quit_and_check();
}

/// Holds every frame across bursts, sends the held ones at the tick, and drops what it still
/// holds at release.
#[derive(Default)]
struct Holder {
    held: Vec<Held>,
    /// Frames built at the tick.
    built: u64,
}

impl NetworkFunction for Holder {
    const NAME: &'static str = "holder";
    const EVERY_BURST: bool = true;

    fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
        Verdict::Keep
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(h) = ctx.next_kept() {
            self.held.push(h);
        }
    }

    /// Sends up to two held frames out of the other port, and one frame built in a fresh
    /// page on port 1.
    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        for _ in 0..2 {
            if let Some(h) = self.held.pop() {
                let out = 1 - h.port();
                ctx.send(h, out);
            }
        }
        if let Some(mut h) = ctx.alloc(1) {
            h.set_len(60).copy_from_slice(&l2_frame());
            self.built += 1;
            ctx.send(h, 1);
        }
        // A port the core does not have: dropped, counted.
        if let Some(h) = self.held.pop() {
            ctx.send(h, 7);
        }
    }

    fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        for h in self.held.drain(..) {
            ctx.drop(h);
        }
    }
}

#[test]
fn held_frames_live_across_bursts_and_go_back_at_tick_and_release() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let mut nf = Holder::default();
    let frame = l2_frame();
    let c = &mut rig.cores[0];
    for _ in 0..3 {
        c.dev[0].deliver_rx(&frame, 4);
        c.core.poll_nf(&mut nf);
    }
    assert_eq!(nf.held.len(), 12, "held across three bursts");
    assert_eq!(c.core.nf_counters().kept, 12);
    let mut out = Vec::new();
    c.core.tick_nf(&mut nf);
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out, std::vec![frame.clone(); 3], "two held, one built");
    assert_eq!((nf.held.len(), nf.built), (9, 1));
    let counts = *c.core.nf_counters();
    assert_eq!((counts.sent_held, counts.bad_port), (3, 1));
    c.core.release_nf(&mut nf);
    assert!(nf.held.is_empty());
    assert_eq!(c.core.nf_counters().dropped, 9);
    rig.quit_and_check();
}

/// A kept frame sent by the NF ([`Ctx::send`]) keeps to the egress MTU too: between ports of
/// 9000 and 1500, the held 2,000-byte frames [`Holder`] sends out of the 1500 port at its tick
/// are dropped and counted `over_mtu` there; the 60-byte frame it builds leaves.
#[test]
fn a_held_frame_over_the_egress_mtu_is_dropped_on_that_port() {
    let mut rig = Rig::new("mode=l2 mtu0=9000 mtu1=1500", 1, PAGES);
    let mut nf = Holder::default();
    let mut frame = l2_frame();
    frame.resize(2000, 0xab);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&frame, 2);
    c.core.poll_nf(&mut nf);
    assert_eq!(nf.held.len(), 2);
    c.core.tick_nf(&mut nf);
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.len()));
    assert_eq!(out, std::vec![60], "only the frame built at the tick");
    let k = c.core.counters();
    assert_eq!((k[1].drops_for(DropReason::OverMtu), k[1].tx), (2, 1));
    assert_eq!(k[0].drops_for(DropReason::OverMtu), 0);
    rig.quit_and_check();
}

#[test]
fn past_max_taken_kept_frames_are_dropped_and_counted() {
    let mut rig = Rig::new("mode=l2 burst=128", 1, PAGES);
    let mut nf = Holder::default();
    let c = &mut rig.cores[0];
    assert_eq!(c.dev[0].deliver_rx(&l2_frame(), 100), 100);
    c.core.poll_nf(&mut nf);
    let max = crate::dataplane::nf::MAX_TAKEN as u64;
    assert_eq!(nf.held.len() as u64, max);
    let counts = *c.core.nf_counters();
    assert_eq!((counts.kept, counts.keep_overflow), (max, 100 - max));
    c.core.release_nf(&mut nf);
    rig.quit_and_check();
}

#[test]
fn a_frame_of_several_pages_is_forwarded_whole_or_kept_with_all_its_pages() {
    let mut rig = Rig::new("mode=l2 mtu0=9000 mtu1=9000", 1, PAGES);
    // 9,014 bytes: three RX pages with mergeable buffers.
    let mut jumbo = l2_frame();
    jumbo.resize(9014, 0xab);
    for (i, b) in jumbo.iter_mut().enumerate().skip(60) {
        *b = (i % 251) as u8;
    }
    let c = &mut rig.cores[0];
    // Forwarded (the stock `io` NF: no rewrite), as the same pages.
    c.dev[0].deliver_rx_mrg(&jumbo, 1);
    c.core.poll_nf(&mut crate::dataplane::nf::builtin::Io);
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out, std::vec![jumbo.clone()]);
    // Kept: held with its three pages, its bytes in order.
    let mut nf = Holder::default();
    c.dev[0].deliver_rx_mrg(&jumbo, 2);
    c.core.poll_nf(&mut nf);
    assert_eq!(nf.held.len(), 2);
    let h = &nf.held[0];
    assert_eq!((h.len(), h.pages(), h.port()), (9014, 3, 0));
    assert_eq!(h.head(), &jumbo[..h.head().len()]);
    assert_eq!(h.segments().flatten().copied().collect::<Vec<u8>>(), jumbo);
    assert_eq!(c.core.nf_counters().kept, 2);
    // Sent by the tick out of the other port: the same bytes, one chain of the same pages.
    c.core.tick_nf(&mut nf);
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out.len(), 3, "the two held frames and the tick's own");
    assert_eq!(&out[..2], &[jumbo.clone(), jumbo.clone()]);
    assert_eq!(c.core.counters()[1].tx_bytes, 3 * 9014 + 60);
    assert_eq!(c.core.counters()[0].drops_total(), 0);
    // Kept and then dropped: every page back (the rig's quit checks).
    c.dev[0].deliver_rx_mrg(&jumbo, 1);
    c.core.poll_nf(&mut nf);
    c.core.release_nf(&mut nf);
    rig.quit_and_check();
}

#[test]
fn past_max_taken_multi_kept_jumbo_frames_are_dropped_and_counted() {
    let mut rig = Rig::new("mode=l2 burst=128 mtu0=9000 mtu1=9000", 1, PAGES);
    let mut jumbo = l2_frame();
    jumbo.resize(9014, 0xcd);
    let mut nf = Holder::default();
    let c = &mut rig.cores[0];
    let max = crate::dataplane::nf::MAX_TAKEN_MULTI;
    assert_eq!(c.dev[0].deliver_rx_mrg(&jumbo, max + 2), max + 2);
    c.core.poll_nf(&mut nf);
    assert_eq!(nf.held.len(), max);
    let counts = *c.core.nf_counters();
    assert_eq!((counts.kept, counts.keep_overflow), (max as u64, 2));
    c.core.release_nf(&mut nf);
    rig.quit_and_check();
}

/// Reads the burst's time ([`NetworkFunction::CLOCK`]) into what it saw.
#[derive(Default)]
struct Clocked<const CLOCK: bool> {
    seen: Vec<u64>,
}

impl<const C: bool> NetworkFunction for Clocked<C> {
    const NAME: &'static str = "clocked";
    const CLOCK: bool = C;
    const TAKES: bool = false;

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        self.seen.push(pkt.now_ns());
        Verdict::Forward
    }
}

#[test]
fn a_network_function_that_asks_for_the_clock_sees_the_bursts_time_and_others_see_0() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let c = &mut rig.cores[0];
    let mut with = Clocked::<true>::default();
    let mut without = Clocked::<false>::default();
    for _ in 0..2 {
        c.dev[0].deliver_rx(&l2_frame(), 3);
        c.core.poll_nf(&mut with);
        c.dev[0].deliver_rx(&l2_frame(), 2);
        c.core.poll_nf(&mut without);
    }
    assert_eq!(without.seen, std::vec![0; 4]);
    assert_eq!(with.seen.len(), 6);
    // One reading per burst: equal within a burst, not decreasing, not 0.
    assert!(with.seen[0] > 0 && with.seen[..3].iter().all(|&t| t == with.seen[0]));
    assert!(with.seen[3..]
        .iter()
        .all(|&t| t == with.seen[3] && t >= with.seen[0]));
    c.dev[1].complete_tx(|_| {});
    rig.quit_and_check();
}

#[test]
fn packet_views_read_the_headers_in_place() {
    let mut f = udp_to(4789);
    let len = f.len();
    let mut pkt = Packet::new(&mut f, len, 1, 0);
    assert_eq!((pkt.in_port(), pkt.out_port(), pkt.len()), (1, 0, 60));
    assert_eq!(pkt.eth().dst_addr().0, port_mac(0).0);
    let ip = pkt.ipv4().expect("IPv4");
    assert_eq!(ip.dst_addr(), Ipv4Addr::new(10, 0, 1, 2));
    assert_eq!(ip.hop_limit(), 64);
    assert_eq!(pkt.udp().expect("UDP").dst_port(), 4789);
    assert!(pkt.tcp().is_none(), "UDP is not TCP");
    pkt.eth_mut()
        .set_src_addr(smoltcp::wire::EthernetAddress([2, 0, 0, 0, 0, 5]));
    assert_eq!(&pkt.head()[6..12], &[2, 0, 0, 0, 0, 5]);
    // A truncated IPv4 header (IHL says 60 bytes): no view, no panic.
    let mut bad = udp_to(7);
    bad[14] = 0x4f;
    let n = bad.len();
    assert!(Packet::new(&mut bad, n, 0, 0).ipv4().is_none());
    // Not IPv4.
    let mut arp = std::vec![0u8; 60];
    arp_request(
        &mut arp,
        MacAddr([2, 0, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
    );
    assert!(Packet::new(&mut arp, 60, 0, 0).udp().is_none());
}

#[test]
fn io_and_l2_on_the_api_match_the_stock_modes() {
    let frame = l2_frame();
    for (cmdline, peer) in [
        ("mode=io", None),
        ("mode=l2 peer1=02:00:00:00:00:aa", Some(())),
    ] {
        let mut rig = Rig::new(cmdline, 1, PAGES);
        let c = &mut rig.cores[0];
        let mut out = Vec::new();
        c.dev[0].deliver_rx(&frame, 5);
        c.core.poll_once();
        c.dev[1].complete_tx(|f| out.push(f.to_vec()));
        assert_eq!(out.len(), 5);
        match peer {
            None => assert!(out.iter().all(|f| *f == frame)),
            Some(()) => {
                assert!(out.iter().all(|f| f[..6] == [2, 0, 0, 0, 0, 0xaa]));
                assert!(out.iter().all(|f| f[6..12] == port_mac(1).0));
            }
        }
        assert_eq!(*c.core.nf_counters(), NfCounters::default());
        rig.quit_and_check();
    }
}

/// Holds every frame; counts what it held (a counter) and holds (a gauge).
#[derive(Default)]
struct Restartable {
    held: Vec<Held>,
    seen: u64,
}

impl NetworkFunction for Restartable {
    const NAME: &'static str = "restartable";
    const EVERY_BURST: bool = true;
    const COUNTERS: &'static [CounterDef] = &[
        CounterDef::one("seen", "Frames held (frames)."),
        CounterDef::gauge("holding", "Frames held now (frames)."),
    ];

    fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
        self.seen += 1;
        Verdict::Keep
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(h) = ctx.next_kept() {
            self.held.push(h);
        }
    }

    fn counters(&self, out: &mut CounterValues) {
        out.set(0, self.seen);
        out.set(1, self.held.len() as u64);
    }

    fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        for h in self.held.drain(..) {
            ctx.drop(h);
        }
    }
}

/// `Core::restart_nf` (a `PUT` of the NF's files): the old instance gives back every frame it
/// holds, the fresh one takes its place, and its counters go on from the old one's (the
/// gauge is the fresh one's own); twice, so that what carries accumulates.
#[test]
fn a_restarted_nf_gives_its_frames_back_and_its_counts_carry_on() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let mut nf = Restartable::default();
    let c = &mut rig.cores[0];
    let value = |c: &crate::dataplane::Core<_>, i| match c.nf_side.own.get(i) {
        Some(netstack::stats::NfValue::One(v)) => v,
        other => panic!("{other:?}"),
    };
    c.dev[0].deliver_rx(&l2_frame(), 5);
    c.core.poll_nf(&mut nf);
    c.core.tick_nf(&mut nf);
    assert_eq!((value(&c.core, 0), value(&c.core, 1)), (5, 5));
    c.core.restart_nf(&mut nf, Restartable::default());
    assert!(nf.held.is_empty() && nf.seen == 0, "the fresh instance");
    assert_eq!(c.core.nf_counters().dropped, 5, "the old one's frames back");
    assert_eq!((value(&c.core, 0), value(&c.core, 1)), (5, 0));
    c.dev[0].deliver_rx(&l2_frame(), 3);
    c.core.poll_nf(&mut nf);
    c.core.tick_nf(&mut nf);
    assert_eq!((value(&c.core, 0), value(&c.core, 1)), (8, 3));
    c.core.restart_nf(&mut nf, Restartable::default());
    c.dev[0].deliver_rx(&l2_frame(), 1);
    c.core.poll_nf(&mut nf);
    c.core.release_nf(&mut nf);
    assert_eq!((value(&c.core, 0), value(&c.core, 1)), (9, 0));
    assert_eq!(c.core.nf_counters().dropped, 9);
    rig.quit_and_check();
}
