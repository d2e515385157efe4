//! Static chaining on the host rig: `nf::Chain<A, B>` runs `B` only on what `A` forwards, `A`'s
//! drops are final, `B`'s kept frames reach `B`'s end-of-burst hook, and every page comes back.
//! Run: `cargo test -p unikernel --features host-rig --test chain`.

use std::net::Ipv4Addr;
use unikernel::dataplane::nf::{Chain, Ctx, NetworkFunction, Packet, Verdict};
use unikernel::dataplane::testing::Rig;
use unikernel::dataplane::Platform;

/// The filter: IPv4 on, the rest dropped.
#[derive(Default)]
struct Ipv4Only {
    seen: u64,
}

impl NetworkFunction for Ipv4Only {
    const NAME: &'static str = "ipv4_only";
    const TAKES: bool = false;

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        self.seen += 1;
        if pkt.ipv4().is_some() {
            Verdict::Forward
        } else {
            Verdict::Drop
        }
    }
}

/// Behind it: UDP to port 7 (echo) is kept and sent back out of its port after the burst;
/// everything else is forwarded.
#[derive(Default)]
struct EchoBack {
    seen: u64,
    echoed: u64,
}

impl NetworkFunction for EchoBack {
    const NAME: &'static str = "echo_back";

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        self.seen += 1;
        match pkt.udp() {
            Some(u) if u.dst_port() == 7 => Verdict::Keep,
            _ => Verdict::Forward,
        }
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(h) = ctx.next_kept() {
            self.echoed += 1;
            let port = h.port();
            ctx.send(h, port);
        }
    }
}

/// A 60-byte IPv4/UDP frame to `dport`.
fn udp(dport: u16) -> Vec<u8> {
    let mac = netstack::MacAddr([2, 0, 0, 0, 0, 1]);
    let mut f = vec![0u8; 60];
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
    netstack::simframes::udp4_frame(&mut f, 60, mac, mac, a, b, 64);
    // UDP destination port: Ethernet 14 + IPv4 20 + 2 (the UDP checksum is 0: none, RFC 768).
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f
}

#[test]
fn the_second_sees_only_what_the_first_forwards_and_keeps_for_itself() {
    let mut rig = Rig::new("mode=l2", 1, 4096);
    let mut arp = vec![0u8; 60];
    netstack::simframes::arp_request(
        &mut arp,
        netstack::MacAddr([2, 0, 0, 0, 0, 1]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 2),
    );
    let (to_9, to_7) = (udp(9), udp(7));
    let mut nf = Chain::new(Ipv4Only::default(), EchoBack::default());
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&to_9, 3);
    c.dev[0].deliver_rx(&arp, 2);
    c.dev[0].deliver_rx(&to_7, 4);
    c.core.poll_nf(&mut nf);
    let (mut out1, mut out0) = (Vec::new(), Vec::new());
    c.dev[1].complete_tx(|f| out1.push(f.to_vec()));
    c.dev[0].complete_tx(|f| out0.push(f.to_vec()));

    assert_eq!(out1, vec![to_9; 3], "forwarded by both, out of port 1");
    assert_eq!(
        out0,
        vec![to_7; 4],
        "kept by the second, sent back out of port 0"
    );
    assert_eq!(nf.first.seen, 9, "the filter saw every frame");
    assert_eq!(nf.second.seen, 7, "the second never saw the 2 ARP frames");
    assert_eq!(nf.second.echoed, 4);
    let n = c.core.nf_counters();
    assert_eq!(
        (n.dropped, n.kept),
        (2, 4),
        "the filter's drops, the second's keeps"
    );
    assert_eq!(
        <Chain<Ipv4Only, EchoBack> as NetworkFunction>::NAME,
        "echo_back",
        "no counters on either side: the second's name"
    );
    rig.quit_and_check();
}
