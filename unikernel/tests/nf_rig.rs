//! Unit-testing your own network function on the host, the way a user of Gannet does it: the
//! host rig (`unikernel::dataplane::testing`, feature `host-rig`) builds real cores over real
//! drivers whose devices are simulated in host memory; you deliver frames into a port, run
//! poll iterations with your NF, and collect what the other port sent. `quit_and_check` fails
//! if a single page did not come back. Run: `cargo test -p unikernel --features host-rig`.

use std::net::Ipv4Addr;
use unikernel::dataplane::nf::{NetworkFunction, Packet, Verdict};
use unikernel::dataplane::testing::Rig;

/// Forwards IPv4 and drops everything else, counting both.
#[derive(Default)]
struct Ipv4Only {
    ipv4: u64,
    other: u64,
}

impl NetworkFunction for Ipv4Only {
    const NAME: &'static str = "ipv4_only";

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        if pkt.ipv4().is_some() {
            self.ipv4 += 1;
            Verdict::Forward
        } else {
            self.other += 1;
            Verdict::Drop
        }
    }
}

#[test]
fn ipv4_only_forwards_ipv4_and_drops_the_rest() {
    // One core, its two ports simulated virtio-net devices, a zone of 4,096 pages.
    let mut rig = Rig::new("mode=l2", 1, 4096);
    let (mac, a, b) = (
        netstack::MacAddr([2, 0, 0, 0, 0, 1]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 2),
    );
    let mut ip = vec![0u8; 60];
    netstack::simframes::udp4_frame(&mut ip, 60, mac, mac, a, b, 64);
    let mut arp = vec![0u8; 60];
    netstack::simframes::arp_request(&mut arp, mac, a, b);

    let mut nf = Ipv4Only::default();
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&ip, 3);
    c.dev[0].deliver_rx(&arp, 2);
    c.core.poll_nf(&mut nf);
    let mut sent = Vec::new();
    c.dev[1].complete_tx(|f| sent.push(f.to_vec()));

    assert_eq!(
        sent,
        vec![ip; 3],
        "the IPv4 frames left port 1 as they came"
    );
    assert_eq!((nf.ipv4, nf.other), (3, 2));
    assert_eq!(
        c.core.nf_counters().dropped,
        2,
        "drops are counted by the core too"
    );
    rig.quit_and_check(); // every page back in the zone
}
