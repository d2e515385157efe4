//! The stock connection-tracking firewall (`mode=firewall`) on the host rig, through
//! `Core::poll_nf`: the inside opens, the outside answers, the outside cannot open, frames
//! pass untouched, every drop counted by reason, every page back. The tracker's own rules are
//! `netstack::conntrack`'s tests; these check the wiring.

use super::PAGES;
use crate::dataplane::nf::builtin::{FirewallNf, DROP_NAMES};
use crate::dataplane::testing::{port_mac, Rig};
use etherparse::PacketBuilder;
use netstack::conntrack::firewall::Firewall;
use netstack::conntrack::table::{Entry, Table};
use netstack::conntrack::Timeouts;
use netstack::MacAddr;
use std::vec::Vec;

const INSIDE: [u8; 4] = [10, 0, 0, 2];
const SERVER: [u8; 4] = [198, 51, 100, 7];

fn firewall() -> FirewallNf {
    let t = Table::new(
        Vec::leak(std::vec![Entry::default(); 64]),
        Vec::leak(std::vec![0; 64]),
        3,
        Timeouts::default(),
    )
    .unwrap();
    FirewallNf::new(Firewall::new(t))
}

fn udp(dst_mac: MacAddr, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], dst_mac.0)
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut v, b"through the firewall")
        .unwrap();
    v
}

fn syn(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], port_mac(1).0)
        .ipv4(src, dst, 64)
        .tcp(sp, dp, 1, 8192)
        .syn()
        .write(&mut v, b"")
        .unwrap();
    v
}

#[test]
fn the_inside_opens_the_outside_answers_and_cannot_open() {
    let mut rig = Rig::new("mode=firewall mgmt=none", 1, PAGES);
    let mut nf = firewall();
    let out = udp(port_mac(0), INSIDE, 5000, SERVER, 53);
    let reply = udp(port_mac(1), SERVER, 53, INSIDE, 5000);
    let c = &mut rig.cores[0];
    // An answer before the question is a new connection from the outside: dropped.
    c.dev[1].deliver_rx(&reply, 1);
    c.core.poll_nf(&mut nf);
    c.dev[0].deliver_rx(&out, 2);
    c.core.poll_nf(&mut nf);
    c.dev[1].deliver_rx(&reply, 3);
    c.dev[1].deliver_rx(&syn(SERVER, 4000, INSIDE, 22), 1);
    c.core.poll_nf(&mut nf);
    let (mut to_out, mut to_in) = (Vec::new(), Vec::new());
    c.dev[1].complete_tx(|f| to_out.push(f.to_vec()));
    c.dev[0].complete_tx(|f| to_in.push(f.to_vec()));
    assert_eq!((to_out.len(), to_in.len()), (2, 3));
    assert!(to_out.iter().all(|f| f == &out), "untouched");
    assert!(to_in.iter().all(|f| f == &reply), "untouched");
    c.core.read_nf_counters(&nf);
    let s = c.core.snap(false, 0).nf_own.to_stats();
    assert_eq!(
        (s.one("new"), s.one("established")),
        (Some(1), Some(4)),
        "{s:?}"
    );
    let drops = s.per_index("drops").unwrap();
    assert_eq!(drops[1], 2, "the early reply and the SYN: {drops:?}");
    assert_eq!(drops.iter().sum::<u64>(), 2);
    assert_eq!(DROP_NAMES[1], "new_from_outside");
    assert_eq!(c.core.nf_counters().dropped, 2);
    rig.quit_and_check();
}
