//! Issue 33 item 6: the management plane whatever the network function. Outside the router
//! the kernel steers the management address's frames (ARP for it, IPv4 to it, on its port) to
//! the management plane and forwards everything else through the NF; its output leaves by its
//! port; on several cores the other cores hand its frames to core 0. Every test ends with
//! every page back.

use super::{udp, PAGES};
use crate::dataplane::nf::{NetworkFunction, NfCounters, Packet, Verdict};
use crate::dataplane::testing::{port_mac, Rig};
use netstack::simframes::arp_request;
use netstack::MacAddr;
use std::format;
use std::net::Ipv4Addr;
use std::vec::Vec;

const L2_MGMT: &str = "mode=l2 peer1=02:00:00:00:00:aa ip0=10.0.0.1/24";
const HOST: MacAddr = MacAddr([2, 0, 0, 0, 0, 9]);

fn arp_for(target: Ipv4Addr) -> Vec<u8> {
    let mut f = std::vec![0u8; 60];
    let n = arp_request(&mut f, HOST, Ipv4Addr::new(10, 0, 0, 2), target);
    f.truncate(n.max(60));
    f
}

#[test]
fn l2_steers_the_management_address_to_the_management_plane_and_forwards_the_rest() {
    let mut rig = Rig::new(L2_MGMT, 1, PAGES);
    let me = Ipv4Addr::new(10, 0, 0, 1);
    let to_me = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), me, 64);
    let through = udp(
        port_mac(0),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 2),
        64,
    );
    let arp_me = arp_for(me);
    let arp_other = arp_for(Ipv4Addr::new(10, 0, 0, 3));
    let c = &mut rig.cores[0];
    for f in [&arp_me, &to_me, &through, &arp_other] {
        assert_eq!(c.dev[0].deliver_rx(f, 1), 1);
    }
    // The management address is port 0's: on port 1 a frame to it is forwarded like any.
    assert_eq!(c.dev[1].deliver_rx(&to_me, 1), 1);
    c.core.poll_once();
    let m = c
        .core
        .mgmt_plane()
        .expect("core 0 runs the management plane");
    assert_eq!(m.frames, std::vec![arp_me.clone(), to_me.clone()]);
    let mut out1 = Vec::new();
    c.dev[1].complete_tx(|f| out1.push(f.to_vec()));
    assert_eq!(out1.len(), 2, "the other frames of port 0 left by port 1");
    assert_eq!(&out1[0][12..], &through[12..]);
    assert_eq!(&out1[0][0..6], &[2, 0, 0, 0, 0, 0xaa], "rewritten by l2");
    assert_eq!(&out1[1][12..], &arp_other[12..]);
    let mut out0 = Vec::new();
    c.dev[0].complete_tx(|f| out0.push(f.to_vec()));
    assert_eq!(
        out0.len(),
        1,
        "port 1's frame to the address left by port 0"
    );
    assert_eq!(
        *c.core.nf_counters(),
        NfCounters {
            to_mgmt: 2,
            ..NfCounters::default()
        }
    );
    // What the management plane sends leaves by its port at the next tick.
    c.core
        .mgmt_plane_mut()
        .unwrap()
        .to_send
        .push(arp_me.clone());
    c.core.idle_tick();
    let mut sent = Vec::new();
    c.dev[0].complete_tx(|f| sent.push(f.to_vec()));
    assert_eq!(sent, std::vec![arp_me]);
    assert_eq!(c.core.mgmt_path().unwrap(), Default::default());
    rig.quit_and_check();
}

#[test]
fn without_an_address_l2_forwards_everything_and_has_no_management_plane() {
    let mut rig = Rig::new("mode=l2 peer1=02:00:00:00:00:aa", 1, PAGES);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&arp_for(Ipv4Addr::new(10, 0, 0, 1)), 1);
    c.core.poll_once();
    assert!(c.core.mgmt_plane().is_none() && c.core.mgmt_path().is_none());
    let mut out = 0;
    c.dev[1].complete_tx(|_| out += 1);
    assert_eq!(out, 1);
    rig.quit_and_check();
}

#[test]
fn io_on_two_cores_hands_management_frames_to_core_0() {
    let mut rig = Rig::new("mode=io ip0=10.0.0.1/24 queues=2", 2, PAGES);
    let arp_me = arp_for(Ipv4Addr::new(10, 0, 0, 1));
    rig.cores[1].dev[0].deliver_rx(&arp_me, 3);
    rig.poll();
    rig.poll();
    let m = rig.cores[0].core.mgmt_plane().unwrap();
    assert_eq!(m.frames, std::vec![arp_me.clone(); 3]);
    let path = rig.cores[1].core.mgmt_path().unwrap();
    assert_eq!((path.handoff, path.handoff_dropped), (3, 0));
    assert_eq!(rig.cores[1].core.nf_counters().to_mgmt, 3);
    rig.quit_and_check();
}

/// A user's NF under [`crate::dataplane::Core::poll_nf`] gets the same steering: it never
/// sees the management address's frames.
#[test]
fn a_user_nf_never_sees_the_management_address() {
    #[derive(Default)]
    struct Count(u64);
    impl NetworkFunction for Count {
        const NAME: &'static str = "count";
        const TAKES: bool = false;
        fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
            self.0 += 1;
            Verdict::Drop
        }
    }
    let mut rig = Rig::new("mode=l2 ip1=10.0.1.1/24", 1, PAGES);
    let mut nf = Count::default();
    let c = &mut rig.cores[0];
    let me = Ipv4Addr::new(10, 0, 1, 1);
    c.dev[1].deliver_rx(&udp(port_mac(1), Ipv4Addr::new(10, 0, 1, 2), me, 64), 2);
    c.dev[0].deliver_rx(&udp(port_mac(0), Ipv4Addr::new(10, 0, 1, 2), me, 64), 1);
    c.core.poll_nf(&mut nf);
    assert_eq!(nf.0, 1, "only port 0's frame reached the NF");
    assert_eq!(c.core.mgmt_plane().unwrap().frames.len(), 2);
    assert_eq!(c.core.nf_counters().dropped, 1);
    rig.quit_and_check();
}

#[test]
fn a_jumbo_frame_for_the_management_address_under_l2_reaches_it_linear() {
    let mut rig = Rig::new(&format!("{L2_MGMT} mtu0=9000 mtu1=9000"), 1, PAGES);
    let me = Ipv4Addr::new(10, 0, 0, 1);
    let mut to_me = udp(port_mac(0), Ipv4Addr::new(10, 0, 0, 2), me, 64);
    to_me.resize(9014, 0x5a);
    let c = &mut rig.cores[0];
    assert_eq!(c.dev[0].deliver_rx_mrg(&to_me, 1), 1);
    c.core.poll_once();
    let m = c
        .core
        .mgmt_plane()
        .expect("core 0 runs the management plane");
    assert_eq!(m.frames, std::vec![to_me], "linear, byte for byte");
    let path = c.core.mgmt_path().unwrap();
    assert_eq!((path.linear, path.linear_failed), (1, 0));
    assert_eq!(c.core.nf_counters().to_mgmt, 1);
    assert_eq!(c.core.counters()[0].drops_total(), 0);
    rig.quit_and_check();
}
