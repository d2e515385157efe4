//! `--capture DIR`: QEMU's `filter-dump` writes one pcap per port (what the guest received and
//! sent there); read back with the `pcap-file` crate, the files match the generator's counts and
//! frames (l2 mode: port 0 holds what was offered, port 1 the same frames with rewritten MACs).

use gannet_tests::*;
use pcap_file::pcap::PcapReader;

fn frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = PcapReader::new(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.to_vec());
    }
    out
}

#[test]
fn capture_writes_one_pcap_per_port_matching_the_generator() {
    let dir = TestDir::new();
    let cap = dir.path().join("cap");
    let mut rig = Rig::start_capture("mode=l2", gen_count(1000, 64, false), &cap);
    let r = rig.run();
    assert_eq!(r.received, 1000, "{r:?}");
    let s = rig.quit();
    assert_no_leak(&s);
    let in0 = frames(&qemu::capture_file(&cap, 0));
    let out1 = frames(&qemu::capture_file(&cap, 1));
    assert_eq!(in0.len() as u64, r.sent, "port 0 holds every offered frame");
    assert_eq!(
        out1.len() as u64,
        r.received,
        "port 1 holds every forwarded frame"
    );
    assert_eq!((s.ports[0].rx, s.ports[1].tx), (1000, 1000), "{s}");
    for (i, (a, b)) in in0.iter().zip(&out1).enumerate() {
        let expected = l2_rewrite(a, 1, peer_mac(1));
        assert!(
            same_modulo_padding(b, &expected),
            "frame {i}: {}",
            diff(b, &expected)
        );
    }
}
