//! The stock NAT44 (`mode=nat`) on the host rig, through the real NF path (`Core::poll_nf`,
//! the fused loop, the kept frames' end of burst): inside frames leave the outside port
//! translated to the pool, replies come back in, unsolicited ones are dropped by reason, ARP
//! for the pool is answered on the outside, a hairpin goes back inside, every page comes back.
//! The translation's own rules are `netstack::nat`'s tests; these check the wiring.

use super::PAGES;
use crate::dataplane::nf::builtin::NatNf;
use crate::dataplane::nf::NetworkFunction;
use crate::dataplane::testing::{port_mac, Rig};
use etherparse::{Ipv4Header, PacketBuilder, UdpHeader};
use netstack::conntrack::table::Entry;
use netstack::nat::ports::{PortAlloc, PortPlan};
use netstack::nat::{Filtering, Nat, NatConfig, NatDrop, NatStorage, Timeouts};
use netstack::simframes::arp_request;
use netstack::MacAddr;
use std::net::Ipv4Addr;
use std::vec::Vec;

const POOL: [u8; 4] = [192, 0, 2, 1];
const SERVER: [u8; 4] = [198, 51, 100, 7];
const HOST_A: [u8; 4] = [10, 0, 0, 2];
const HOST_B: [u8; 4] = [10, 0, 0, 3];
const PEER0: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa0]);
const PEER1: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb0]);
const CMDLINE: &str =
    "mode=nat nat_pool=192.0.2.1 peer0=02:00:00:00:00:a0 peer1=02:00:00:00:00:b0 mgmt=none";

/// A translator over leaked storage, as `setup::nat` builds one from the zone.
fn nat(filtering: Filtering) -> NatNf {
    nat_of(filtering, 1, 0)
}

/// Core `core` of a NAT of `cores` cores.
fn nat_of(filtering: Filtering, cores: u16, core: u16) -> NatNf {
    let pool = [u32::from_be_bytes(POOL)];
    let cfg = NatConfig {
        pool: &pool,
        port_lo: 1024,
        port_hi: 65535,
        cores,
        core,
        filtering,
        forwards: &[],
        timeouts: Timeouts::default(),
        key: 1,
        seed: 2,
    };
    let plan = PortPlan {
        lo: 1024,
        hi: 65535,
        cores,
    };
    let st = NatStorage {
        sessions: Vec::leak(std::vec![Entry::default(); 64]),
        session_buckets: Vec::leak(std::vec![0; 64]),
        maps: Vec::leak(std::vec![Entry::default(); 65]),
        map_buckets: Vec::leak(std::vec![0; 128]),
        ports: Vec::leak(std::vec![0; PortAlloc::words_for(1, plan.block(core).1)]),
    };
    let n = Nat::new(&cfg, st).unwrap();
    NatNf::new(n, [port_mac(0), port_mac(1)], [PEER0, PEER1])
}

/// A UDP datagram from `src`:`sp` to `dst`:`dp`, to `dst_mac`, with a real UDP checksum.
fn udp(dst_mac: MacAddr, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst_mac.0)
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut v, b"through the nat")
        .unwrap();
    v
}

/// (source, source port, destination, destination port) of a UDP frame, after checking its
/// IPv4 and UDP checksums against etherparse's recomputation.
fn endpoints(f: &[u8]) -> ([u8; 4], u16, [u8; 4], u16) {
    let (ip, rest) = Ipv4Header::from_slice(&f[14..]).unwrap();
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header");
    let (udp, data) = UdpHeader::from_slice(rest).unwrap();
    let data = &data[..usize::from(udp.length) - 8];
    assert_eq!(udp.checksum, udp.calc_checksum_ipv4(&ip, data).unwrap());
    (
        ip.source,
        udp.source_port,
        ip.destination,
        udp.destination_port,
    )
}

/// Frames sent on `port` of the rig's core 0.
fn sent(rig: &mut Rig, port: usize) -> Vec<Vec<u8>> {
    sent_on(rig, 0, port)
}

#[test]
fn inside_out_and_back_unsolicited_dropped_every_page_back() {
    let mut rig = Rig::new(CMDLINE, 1, PAGES);
    let mut nf = nat(Filtering::AddressAndPortDependent);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&udp(port_mac(0), HOST_A, 5000, SERVER, 53), 3);
    c.core.poll_nf(&mut nf);
    let out = sent(&mut rig, 1);
    assert_eq!(out.len(), 3);
    for f in &out {
        assert_eq!((&f[0..6], &f[6..12]), (&PEER1.0[..], &port_mac(1).0[..]));
        // The pool address and the block's first port (one core: the whole range).
        assert_eq!(endpoints(f), (POOL, 1024, SERVER, 53));
    }
    // The reply comes in to the mapping; an unsolicited datagram to another port, and one
    // from another server port (address-and-port-dependent filtering), do not.
    let c = &mut rig.cores[0];
    c.dev[1].deliver_rx(&udp(port_mac(1), SERVER, 53, POOL, 1024), 2);
    c.dev[1].deliver_rx(&udp(port_mac(1), SERVER, 53, POOL, 4000), 1);
    c.dev[1].deliver_rx(&udp(port_mac(1), SERVER, 54, POOL, 1024), 1);
    c.core.poll_nf(&mut nf);
    let back = sent(&mut rig, 0);
    assert_eq!(back.len(), 2);
    for f in &back {
        assert_eq!((&f[0..6], &f[6..12]), (&PEER0.0[..], &port_mac(0).0[..]));
        assert_eq!(endpoints(f), (SERVER, 53, HOST_A, 5000));
    }
    let n = *nf.nat().counters();
    assert_eq!((n.outbound, n.inbound, n.sessions_opened), (3, 2, 1));
    assert_eq!(n.drops[NatDrop::NoMapping.index()], 1);
    assert_eq!(n.drops[NatDrop::Filtered.index()], 1);
    let c = &mut rig.cores[0];
    assert_eq!(c.core.nf_counters().dropped, 2);
    // The NF's counters reach the core's snapshot by name (`STATS` `nf_counters`).
    c.core.read_nf_counters(&nf);
    let s = c.core.snap(false, 0).nf_own.to_stats();
    assert_eq!((s.one("outbound"), s.one("inbound")), (Some(3), Some(2)));
    let drops = s.per_index("drops").unwrap();
    assert_eq!((drops[3], drops[4], drops.iter().sum::<u64>()), (1, 1, 2));
    rig.quit_and_check();
}

#[test]
fn arp_for_the_pool_is_answered_on_the_outside_other_frames_counted() {
    let mut rig = Rig::new(CMDLINE, 1, PAGES);
    let mut nf = nat(Filtering::AddressAndPortDependent);
    let asker = MacAddr([2, 0, 0, 0, 0, 0x77]);
    let arp = |tpa: [u8; 4]| {
        let mut f = std::vec![0u8; 60];
        let n = arp_request(&mut f, asker, Ipv4Addr::from(SERVER), Ipv4Addr::from(tpa));
        f.truncate(n.max(60));
        f
    };
    let c = &mut rig.cores[0];
    c.dev[1].deliver_rx(&arp(POOL), 1);
    c.dev[1].deliver_rx(&arp([192, 0, 2, 9]), 1); // not the pool's: dropped
    c.dev[0].deliver_rx(&arp(POOL), 1); // on the inside: not answered
    c.core.poll_nf(&mut nf);
    let replies = sent(&mut rig, 1);
    assert_eq!(replies.len(), 1);
    let r = netstack::router::arp::parse(&replies[0][14..]).unwrap();
    assert_eq!(&replies[0][0..12], &[asker.0, port_mac(1).0].concat()[..]);
    assert_eq!(r.op, netstack::router::arp::ARP_REPLY);
    assert_eq!((r.sha, r.spa), (port_mac(1), u32::from_be_bytes(POOL)));
    assert_eq!((r.tha, r.tpa), (asker, u32::from_be_bytes(SERVER)));
    assert!(sent(&mut rig, 0).is_empty());
    let c = &mut rig.cores[0];
    c.core.read_nf_counters(&nf);
    let s = c.core.snap(false, 0).nf_own.to_stats();
    assert_eq!(s.one("arp_replies"), Some(1));
    assert_eq!(s.one("not_translated"), Some(2));
    assert_eq!(c.core.nf_counters().kept, 1);
    assert_eq!(c.core.nf_counters().dropped, 2);
    rig.quit_and_check();
}

#[test]
fn a_hairpin_goes_back_inside_translated_twice() {
    let mut rig = Rig::new(CMDLINE, 1, PAGES);
    let mut nf = nat(Filtering::EndpointIndependent);
    let c = &mut rig.cores[0];
    // Host A gets a mapping (the pool address, port 1024); host B reaches it through the
    // pool address: out translated to B's mapping, in to A.
    c.dev[0].deliver_rx(&udp(port_mac(0), HOST_A, 5000, SERVER, 53), 1);
    c.core.poll_nf(&mut nf);
    assert_eq!(sent(&mut rig, 1).len(), 1);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&udp(port_mac(0), HOST_B, 6000, POOL, 1024), 1);
    c.core.poll_nf(&mut nf);
    assert!(sent(&mut rig, 1).is_empty());
    let back = sent(&mut rig, 0);
    assert_eq!(back.len(), 1);
    assert_eq!(
        (&back[0][0..6], &back[0][6..12]),
        (&PEER0.0[..], &port_mac(0).0[..])
    );
    assert_eq!(endpoints(&back[0]), (POOL, 1025, HOST_A, 5000));
    assert_eq!(nf.nat().counters().hairpinned, 1);
    assert_eq!(rig.cores[0].core.nf_counters().kept, 1);
    rig.quit_and_check();
}

#[test]
fn the_counters_declaration_names_every_drop_reason_in_order() {
    let drops = NatNf::COUNTERS.iter().find(|d| d.name == "drops").unwrap();
    let mut at = 0;
    for (i, name) in NatDrop::NAMES.iter().enumerate() {
        let item = std::format!("{i} {name}");
        let found = drops.help[at..].find(&item).expect(&item);
        at += found + item.len();
    }
    assert_eq!(drops.slots(), NatDrop::COUNT);
}

/// Two cores share one NAT (`queues=2`): a flow's frames that arrive on the other core, from
/// the inside (its inside address is owned elsewhere) or from the outside (its port is in the
/// other core's block), are handed to the owner, which translates and sends them on its own
/// queues; the pages go home to the receiving core's pool.
#[test]
fn frames_of_another_cores_flow_are_handed_to_it() {
    let mut rig = Rig::new(CMDLINE, 2, PAGES);
    let mut nfs = [
        nat_of(Filtering::AddressAndPortDependent, 2, 0),
        nat_of(Filtering::AddressAndPortDependent, 2, 1),
    ];
    // An inside host core 1 owns.
    let host = (2..=254u8)
        .map(|i| [10, 0, 0, i])
        .find(|&a| nfs[0].nat().owner_of_inside(u32::from_be_bytes(a)) == 1)
        .unwrap();
    let c0 = &mut rig.cores[0];
    c0.dev[0].deliver_rx(&udp(port_mac(0), host, 5000, SERVER, 53), 1);
    c0.core.poll_nf(&mut nfs[0]);
    assert_eq!(c0.core.nf_counters().handed_off, 1);
    rig.cores[1].core.poll_nf(&mut nfs[1]);
    let out = sent_on(&mut rig, 1, 1);
    assert_eq!(out.len(), 1);
    let (src, sport, dst, dport) = endpoints(&out[0]);
    let (first, n) = PortPlan {
        lo: 1024,
        hi: 65535,
        cores: 2,
    }
    .block(1);
    assert_eq!((src, dst, dport), (POOL, SERVER, 53));
    assert!((u32::from(first)..u32::from(first) + n).contains(&u32::from(sport)));
    assert!(sent_on(&mut rig, 0, 1).is_empty());
    // The reply lands on core 0 (the host's hash picked its queue): handed to core 1.
    let c0 = &mut rig.cores[0];
    c0.dev[1].deliver_rx(&udp(port_mac(1), SERVER, 53, POOL, sport), 1);
    c0.core.poll_nf(&mut nfs[0]);
    rig.cores[1].core.poll_nf(&mut nfs[1]);
    let back = sent_on(&mut rig, 1, 0);
    assert_eq!(back.len(), 1);
    assert_eq!(endpoints(&back[0]), (SERVER, 53, host, 5000));
    assert_eq!(&back[0][0..6], &PEER0.0[..]);
    let (n0, n1) = (*nfs[0].nat().counters(), *nfs[1].nat().counters());
    assert_eq!((n0.handed_off, n0.outbound, n0.inbound), (2, 0, 0));
    assert_eq!((n1.handed_off, n1.outbound, n1.inbound), (0, 1, 1));
    assert_eq!(rig.cores[0].core.nf_counters().handed_off, 2);
    // Core 0 received both frames, core 1 sent both: their pages went back to core 0's pools.
    rig.quit_and_check();
}

/// Frames sent on `port` of the rig's core `core`.
fn sent_on(rig: &mut Rig, core: usize, port: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    rig.cores[core].dev[port].complete_tx(|f| out.push(f.to_vec()));
    out
}

/// The console's listing (`nat [FILTER]`): the table's occupancy, then the sessions the
/// filter matches, `conntrack -L`'s fields, at most `max` of them.
#[test]
fn sessions_are_listed_by_filter() {
    use netstack::conntrack::show::Filter;
    let mut rig = Rig::new(CMDLINE, 1, PAGES);
    let mut nf = nat(Filtering::AddressAndPortDependent);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&udp(port_mac(0), HOST_A, 5000, SERVER, 53), 1);
    c.dev[0].deliver_rx(&udp(port_mac(0), HOST_B, 6000, SERVER, 53), 1);
    c.core.poll_nf(&mut nf);
    assert_eq!(sent(&mut rig, 1).len(), 2);
    let show = |f: &str, max| {
        let mut lines = Vec::new();
        let filter = Filter::parse(f).unwrap();
        nf.show_sessions(0, &filter, 0, max, &mut |a| lines.push(std::format!("{a}")));
        lines
    };
    let all = show("", 64);
    assert_eq!(
        all[0],
        "nat cpu 0 sessions 2 of 64, mappings 2, expired 0, evicted 0, refused 0"
    );
    assert_eq!(all.len(), 3, "{all:?}");
    let a = show("udp addr 10.0.0.2", 64);
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(
        a[1].starts_with(
            "nat cpu 0 udp 10.0.0.2:5000 > 198.51.100.7:53, reply 198.51.100.7:53 > 192.0.2.1:"
        ) && a[1].contains(", udp_unreplied, idle 0 s, expires in 300 s"),
        "{a:?}"
    );
    assert_eq!(show("tcp", 64).len(), 1);
    assert_eq!(show("", 1).last().unwrap(), "nat cpu 0 … and 1 more");
    rig.quit_and_check();
}
