//! Static chaining on the host rig: `nf::Chain<A, B>` runs `B` only on what `A` forwards, `A`'s
//! drops are final, `B`'s kept frames reach `B`'s end-of-burst hook, and every page comes back;
//! an image that is a chain takes both parts' keys and files.
//! Run: `cargo test -p unikernel --features host-rig --test chain`.

use std::net::Ipv4Addr;
use unikernel::appliance::{Appliance, One};
use unikernel::dataplane::nf::{
    Chain, Ctx, FileError, KeyError, NetworkFunction, NfFile, NfKey, Packet, Verdict,
};
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

/// A filter with a key and a file of its own: UDP to `drop_port=` or to a port of the
/// `drop_ports` file is dropped; `trace=on` (a key the NF behind it declares too).
#[derive(Default)]
struct PortDrop {
    port: u16,
    more: Vec<u16>,
    trace: bool,
}

const PORT_DROP_KEYS: &[NfKey<PortDrop>] = &[
    NfKey::new("drop_port", |f, v| {
        f.port = v.parse().map_err(|_| KeyError::Expected("a port"))?;
        Ok(())
    }),
    NfKey::new("trace", |f, v| {
        f.trace = v == "on";
        Ok(())
    }),
];

const PORT_DROP_FILES: &[NfFile<PortDrop>] = &[NfFile::new("drop_ports", |f, text| {
    for (i, line) in text.lines().enumerate() {
        let port = line.trim().parse().map_err(|_| FileError {
            line: i + 1,
            expected: "a port",
        })?;
        f.more.push(port);
    }
    Ok(())
})];

impl NetworkFunction for PortDrop {
    const NAME: &'static str = "port_drop";
    const TAKES: bool = false;

    fn keys() -> &'static [NfKey<Self>] {
        PORT_DROP_KEYS
    }

    fn files() -> &'static [NfFile<Self>] {
        PORT_DROP_FILES
    }

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        match pkt.udp() {
            Some(u) if u.dst_port() == self.port || self.more.contains(&u.dst_port()) => {
                Verdict::Drop
            }
            _ => Verdict::Forward,
        }
    }
}

/// Behind it: counts up to `count_limit=` frames, `trace=on` too.
#[derive(Default)]
struct Limit {
    limit: u32,
    trace: bool,
}

const LIMIT_KEYS: &[NfKey<Limit>] = &[
    NfKey::new("count_limit", |f, v| {
        f.limit = v.parse().map_err(|_| KeyError::Expected("a count"))?;
        Ok(())
    }),
    NfKey::new("trace", |f, v| {
        f.trace = v == "on";
        Ok(())
    }),
];

impl NetworkFunction for Limit {
    const NAME: &'static str = "limit";

    fn keys() -> &'static [NfKey<Self>] {
        LIMIT_KEYS
    }

    fn process(&mut self, _pkt: &mut Packet<'_>) -> Verdict {
        Verdict::Forward
    }
}

/// `A::write_nf_keys` or `write_nf_files` as text.
struct Listed(fn(&mut core::fmt::Formatter<'_>) -> core::fmt::Result);

impl core::fmt::Display for Listed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (self.0)(f)
    }
}

/// Issue 33: an image of one's own that is a chain takes the keys and files of both parts (a
/// key both declare set in both), as the boot does with it: the command line checked, the
/// bundle read and checked, every core's instance made with them.
#[test]
fn a_chain_takes_the_keys_and_files_of_both_parts() {
    type Image = One<Chain<PortDrop, Limit>>;
    assert_eq!(
        Listed(Image::write_nf_keys).to_string(),
        " (limit's keys: drop_port trace count_limit)",
        "the chain's keys, a shared one once"
    );
    assert_eq!(
        Listed(Image::write_nf_files).to_string(),
        " (limit's files: drop_ports)"
    );
    assert_eq!(
        Image::parse_config("mode=l2 drop_port=http")
            .unwrap_err()
            .to_string(),
        "bad value `http` for key `drop_port`: expected a port"
    );
    assert_eq!(
        Image::parse_config("mode=l2 nope=1").unwrap_err(),
        netstack::ConfigError::UnknownKey("nope")
    );
    let cfg = Image::parse_config("mode=l2 drop_port=5000 count_limit=7 trace=on").unwrap();
    assert_eq!(cfg.mode, netstack::Mode::L2);
    let bad =
        Image::read_bundle("#!gannet-bundle 1\n--- drop_ports\nx\n", netstack::Mode::L2).unwrap();
    assert_eq!(
        Image::accept_files(&bad).unwrap_err().to_string(),
        "file `drop_ports` line 1: expected a port"
    );
    assert!(
        Image::read_bundle("#!gannet-bundle 1\n--- count\n1\n", netstack::Mode::L2).is_err(),
        "a file neither part declares"
    );
    let good = Image::read_bundle(
        "#!gannet-bundle 1\n--- drop_ports\n6000\n6001\n",
        netstack::Mode::L2,
    )
    .unwrap();
    Image::accept_files(&good).unwrap();
    let mut rig = Rig::new("mode=l2", 1, 4096);
    let c = &mut rig.cores[0];
    let mut nf = Image::new_core(&c.core);
    assert_eq!(
        (nf.first.port, &nf.first.more[..], nf.first.trace),
        (5000, &[6000, 6001][..], true)
    );
    assert_eq!((nf.second.limit, nf.second.trace), (7, true));
    for port in [5000, 6001, 9] {
        c.dev[0].deliver_rx(&udp(port), 1);
    }
    c.core.poll_nf(&mut nf);
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out, vec![udp(9)], "5000 (key) and 6001 (file) dropped");
    assert_eq!(c.core.nf_counters().dropped, 2);
    rig.quit_and_check();
}
