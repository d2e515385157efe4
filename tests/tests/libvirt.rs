//! Issue 35 item 4: three appliances in series (l2 → router → l2) as libvirt domains under a
//! real `libvirtd`, defined from `docs/libvirt-domain.xml` (no `<qemu:commandline>`), each
//! configured through its domain's `<cmdline>` (fw_cfg configuration, item 3, is not built),
//! linked by `<interface type='udp'>`; the generator's frames cross all three both ways; every
//! domain is stopped by `virsh shutdown` (the ACPI power button) and ends `shut off
//! (shutdown)`; each one's counters come from the final STATS on its console (a file).
//!
//! Bad input: a domain whose guest never says `ready` (a bad key) gives
//! `LibvirtError::NotReady` after a bounded wait, naming the domain, with the console's tail.
//!
//! Needs root: it installs libvirt (bookworm-backports) and starts the daemons when missing
//! (`harness::libvirt::ensure`, as `cargo xtask libvirt setup`). One test in this binary, so
//! nothing else boots a domain meanwhile; the domains are destroyed and undefined on drop of
//! the `Chain`, a failed assertion included.

use gannet_tests::*;
use std::time::Duration;

use harness::libvirt::{self, Chain, LibvirtError, Mode, WARM_UP};

/// Frames per direction after the warm-up: a few rings' worth, small for CI time.
const FRAMES: u64 = 2_000;
/// How long the bad-input case waits for a `ready` that never comes.
const NOT_READY_WAIT: Duration = Duration::from_secs(3);
/// UDP ports 47200..47208 on 127.0.0.1 (the xtask's default is 47100).
const BASE_PORT: u16 = 47_200;

#[test]
fn three_appliances_in_series_under_libvirt() {
    libvirt::ensure().unwrap_or_else(|e| panic!("{e:#}"));
    let dir = TestDir::new();
    let mut chain = Chain::plan(
        "gannet-test",
        &[Mode::L2, Mode::Router, Mode::L2],
        dir.path(),
        BASE_PORT,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    chain
        .start(&image())
        .unwrap_or_else(|e| panic!("{e:#}\n{}", chain.tails()));
    chain
        .wait_ready(libvirt::READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", chain.tails()));
    for a in &chain.appliances {
        let log = std::fs::read_to_string(&a.console).unwrap_or_default();
        assert!(
            log.contains("pci: 5 buses scanned, 4 bridges; virtio-net at 01:00.0 02:00.0"),
            "{}: NICs not behind libvirt's root ports\n{}",
            a.name,
            chain.tails()
        );
    }

    let [warm, main] = chain
        .traffic(gen_count(FRAMES, 64, true), FRAMES)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", chain.tails()));
    for (what, r, n) in [("warm-up", &warm, WARM_UP), ("traffic", &main, FRAMES)] {
        assert_eq!(r.sent, 2 * n, "{what}: {r:?}");
        assert_eq!(
            r.received,
            2 * n,
            "{what}: every frame back\n{}",
            chain.tails()
        );
        assert_eq!(r.bad, 0, "{what}: bad frames (TTL 63 expected)");
    }

    let stopped = chain
        .shutdown()
        .unwrap_or_else(|e| panic!("{e:#}\n{}", chain.tails()));
    let per_dir = WARM_UP + FRAMES;
    for s in &stopped {
        assert_eq!(
            s.state,
            "shut off (shutdown)",
            "{}\n{}",
            s.name,
            chain.tails()
        );
        assert!(
            s.clean,
            "{}: no `shutdown clean`\n{}",
            s.name,
            chain.tails()
        );
        let st = s
            .stats
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no STATS\n{}", s.name, chain.tails()));
        assert_no_leak(st);
        if s.name.ends_with("router") {
            // Both directions routed; each port also took the generator's one ARP reply.
            assert_eq!(router(st).forwarded, 2 * per_dir, "{}: {st}", s.name);
            assert_eq!(router(st).arp_requests, 2, "{}: {st}", s.name);
            assert_eq!(st.ports[0].rx, per_dir + 1, "{}: {st}", s.name);
            assert_eq!(st.ports[1].rx, per_dir + 1, "{}: {st}", s.name);
        } else {
            // The frames both ways and the router's ARP request and the generator's reply.
            assert_eq!(st.forwarded, 2 * per_dir + 2, "{}: {st}", s.name);
            assert_eq!(st.ports[0].rx + st.ports[1].rx, 2 * per_dir + 2);
        }
    }
    let names: Vec<&str> = stopped.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "gannet-test-1-l2",
            "gannet-test-2-router",
            "gannet-test-3-l2"
        ]
    );
    drop(chain);

    // Bad input: a guest that never says ready (a configuration error halts it before ACPI,
    // so it stays `running`): a bounded wait, a named error carrying the console's reason.
    let mut bad = Chain::plan("gannet-test-bad", &[Mode::L2], dir.path(), BASE_PORT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    bad.appliances[0].cmdline = "mode=l2 no_such_key=1".into();
    bad.start(&image()).unwrap_or_else(|e| panic!("{e:#}"));
    let t = std::time::Instant::now();
    let err = bad
        .wait_ready(NOT_READY_WAIT)
        .expect_err("a guest with a bad key is never ready");
    assert!(
        t.elapsed() < NOT_READY_WAIT + Duration::from_secs(5),
        "{err:#}"
    );
    match err.downcast_ref::<LibvirtError>() {
        Some(LibvirtError::NotReady { domain, tail, .. }) => {
            assert_eq!(domain, "gannet-test-bad-1-l2");
            assert!(tail.contains("no_such_key"), "{tail}");
        }
        other => panic!("expected LibvirtError::NotReady, got {other:?}: {err:#}"),
    }
}
