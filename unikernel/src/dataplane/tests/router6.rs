//! The IPv6 router on several cores: a solicited Neighbor Advertisement lands on whichever
//! core the NIC steers it to; what that core's `Router6` learned reaches the core that
//! solicited (`Ctx::share_neigh6`, applied in `Core::router_sync`), which then sends the frame
//! it queued without soliciting again.

use super::{rig, PAGES};
use netstack::simframes::{bench_frames6_into, next_hop_na};
use rig::{port_mac, Rig};
use std::vec::Vec;

/// Two IPv6 ports and 2001:db8:100::/48 via 2001:db8:0:1::2 on port 1.
const ROUTER6: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 ip6_0=2001:db8::1/64 ip6_1=2001:db8:0:1::1/64 route=2001:db8:100::/48,2001:db8:0:1::2 mgmt=none";

#[test]
fn an_advert_on_one_core_releases_the_frame_another_core_queued() {
    let mut rig = Rig::new(ROUTER6, 2, PAGES);
    let cfg = rig.cores[0].core.cfg().clone();
    let (mut input, mut want) = ([0u8; 74], [0u8; 74]);
    bench_frames6_into(&cfg, [port_mac(0), port_mac(1)], &mut input, &mut want).unwrap();
    // Core 0: a datagram through the gateway, queued; its solicitation out of port 1.
    assert_eq!(rig.cores[0].dev[0].deliver_rx(&input, 1), 1);
    rig.cores[0].core.poll_once();
    let mut solicitations = 0;
    rig.cores[0].dev[1].complete_tx(|f| solicitations += usize::from(f[12..14] == [0x86, 0xdd]));
    assert_eq!(solicitations, 1);
    assert_eq!(rig.cores[0].core.route().unwrap().held6.len(), 1);
    // The gateway's answer lands on core 1 (its port 1, global port 3), which has no entry.
    let mut na = [0u8; 128];
    let n = next_hop_na(&cfg, port_mac(3), &mut na).unwrap();
    assert_eq!(rig.cores[1].dev[1].deliver_rx(&na[..n], 1), 1);
    rig.cores[1].core.poll_once();
    let s1 = rig.cores[1].core.route().unwrap().sync;
    assert_eq!((s1.neigh_sent, s1.neigh_dropped), (1, 0));
    // Core 0's next iteration applies it and sends the held frame, rewritten.
    rig.cores[0].core.poll_once();
    let mut out = Vec::new();
    rig.cores[0].dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(
        out,
        [want.to_vec()],
        "the queued frame, to the gateway, hop limit 63"
    );
    let rs0 = rig.cores[0].core.route().unwrap();
    assert_eq!(rs0.sync.neigh_applied, 1);
    assert!(rs0.held6.is_empty());
    let c = rs0.router6.as_ref().unwrap().counters();
    assert_eq!((c.forwarded, c.ns_sent), (1, 1), "no second solicitation");
    rig.quit_and_check();
}
