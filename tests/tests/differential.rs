//! Differential test against Linux (issue 7): the crafted frame set of
//! `gannet_tests::differential` through Gannet's router mode and through the Linux peer
//! (`peer_mode=l3`, `peer_sysctl=diff`), compared field for field except where RFC 1812 leaves
//! a choice (`differential::CHOICES`, printed by the test). Port 1 is at MTU 576 on both, so
//! the fragmentation cases are also checked against RFC 791's arithmetic here. Both guests boot
//! at once (TCG, no `-icount`); the Linux peer is downloaded with apt on first use and cached
//! in `<target>/peer-linux`.

use std::time::Instant;

use gannet_tests::differential::{self, Report, Target};
use gannet_tests::*;
use harness::peer_linux;

#[test]
fn gannet_and_linux_route_the_frame_set_alike() {
    let t0 = Instant::now();
    let cases = differential::frame_set().expect("the frame set builds");
    let image = image();
    let peer = peer_linux::prepare().unwrap_or_else(|e| panic!("preparing the Linux peer: {e:#}"));
    let (gannet, linux) = std::thread::scope(|s| {
        let g = s.spawn(|| -> anyhow::Result<_> {
            let t = Target::gannet(&image)?;
            let booted = t0.elapsed();
            let out = t.run_all(&cases)?;
            eprintln!(
                "Gannet: ready after {:.1} s, frame set in {:.1} s",
                booted.as_secs_f64(),
                (t0.elapsed() - booted).as_secs_f64()
            );
            let stats = t.stop()?;
            Ok((out, stats))
        });
        let l = s.spawn(|| -> anyhow::Result<_> {
            let t = Target::linux(&peer)?;
            let booted = t0.elapsed();
            let out = t.run_all(&cases)?;
            eprintln!(
                "Linux: ready after {:.1} s, frame set in {:.1} s",
                booted.as_secs_f64(),
                (t0.elapsed() - booted).as_secs_f64()
            );
            t.stop()?;
            Ok(out)
        });
        (
            g.join().expect("gannet thread"),
            l.join().expect("linux thread"),
        )
    });
    let (gannet, stats) = gannet.unwrap_or_else(|e| panic!("Gannet: {e:#}"));
    let linux = linux.unwrap_or_else(|e| panic!("Linux peer ({}): {e:#}", peer.release));
    let report = Report::new(&cases, gannet, linux);
    eprintln!(
        "differential test: {} frames, Linux {}, {:.1} s\n{}\nchoices (RFC 1812 leaves these to \
         the router):\n{}",
        cases.len(),
        peer.release,
        t0.elapsed().as_secs_f64(),
        report.render(),
        differential::choices_markdown()
    );
    assert!(
        report.mismatches.is_empty(),
        "Gannet and Linux differ on {} field(s) outside the RFC 1812 choices:\n{}",
        report.mismatches.len(),
        report.render()
    );
    // The fragmentation cases, against RFC 791 rather than Linux: (IP total length, offset,
    // MF) of each fragment out of port 1, in order; and the next-hop MTU of the DF case.
    let out = |name: &str| {
        &report
            .cases
            .iter()
            .find(|(n, _, _)| *n == name)
            .expect("case in the report")
            .1
    };
    let shape = |f: &Vec<u8>| {
        let ip = &f[14..];
        let w = u16::from_be_bytes([ip[6], ip[7]]);
        (u16::from_be_bytes([ip[2], ip[3]]), w & 0x1fff, w >> 13 & 1)
    };
    for (name, want) in [
        ("udp-1472", &[(572, 0, 1), (572, 69, 1), (396, 138, 0)][..]),
        ("mtu-exact", &[(576, 0, 0)]),
        ("mtu-plus-1", &[(572, 0, 1), (25, 69, 0)]),
        ("frag-df-clear", &[(572, 0, 1), (476, 69, 0)]),
        (
            "refrag-middle",
            &[(572, 100, 1), (572, 169, 1), (116, 238, 1)],
        ),
        ("refrag-last", &[(572, 50, 1), (168, 119, 0)]),
    ] {
        let got: Vec<_> = out(name).port1.iter().map(shape).collect();
        assert_eq!(
            got, want,
            "{name}: (total length, offset, MF) of the fragments"
        );
    }
    let dfs = out("frag-df-set");
    assert!(dfs.port1.is_empty(), "frag-df-set forwarded");
    assert_eq!(
        dfs.port0
            .iter()
            .map(|f| (f[34], f[35], &f[38..42]))
            .collect::<Vec<_>>(),
        vec![(3, 4, &[0, 0, 0x02, 0x40][..])],
        "frag-df-set: Fragmentation Needed with next-hop MTU 576"
    );
    // Every case caused at most one ICMP error, one at a time: Gannet's limiter never fired.
    let stats = stats.expect("Gannet's final STATS");
    let router = router(&stats);
    assert_eq!(
        router.icmp_rate_limited, 0,
        "Gannet rate-limited an ICMP error: {}",
        stats
    );
    let errors = report
        .cases
        .iter()
        .map(|(_, g, _)| {
            // Errors go back out of the port the datagram came in on: either port.
            g.port0
                .iter()
                .chain(&g.port1)
                .filter(|f| f.len() > 34 && f[23] == 1 && matches!(f[34], 3 | 11 | 12))
                .count() as u64
        })
        .sum::<u64>();
    assert_eq!(router.icmp_sent, errors, "{}", stats);
    assert_no_leak(&stats);
}
