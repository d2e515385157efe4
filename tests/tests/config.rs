//! Configuration errors and missing NICs fail the boot with a message naming the problem.

use gannet_tests::*;

/// Boots with `append`, expects a guest failure and a `config error:` line naming `key`.
fn expect_config_error(append: &str, key: &str) {
    let (exit, lines) = boot_failing(append, 2);
    let log = lines.join("\n");
    assert_eq!(
        exit,
        GuestExit::GuestFailure,
        "append {append:?}: {exit}; log:\n{log}"
    );
    let err = lines
        .iter()
        .find(|l| l.contains(qemu::CONFIG_ERROR_MARKER))
        .unwrap_or_else(|| panic!("append {append:?}: no `config error:` line; log:\n{log}"));
    assert!(
        err.contains(&format!("`{key}`")),
        "append {append:?}: the error does not name the key `{key}`: {err}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(qemu::READY_MARKER)),
        "append {append:?}: guest became ready despite the error; log:\n{log}"
    );
}

#[test]
fn bad_mode_fails_boot() {
    expect_config_error("mode=bridge", "mode");
}

#[test]
fn burst_zero_fails_boot() {
    expect_config_error("burst=0", "burst");
}

#[test]
fn burst_above_ring_fails_boot() {
    expect_config_error("burst=257", "burst");
}

#[test]
fn bad_peer_mac_fails_boot() {
    expect_config_error("peer0=xyz", "peer0");
}

#[test]
fn short_peer_mac_fails_boot() {
    expect_config_error("mode=l2 peer1=02:00:00:00:0b", "peer1");
}

#[test]
fn bad_log_level_fails_boot() {
    expect_config_error("log=verbose", "log");
}

#[test]
fn unknown_key_fails_boot() {
    expect_config_error("bogus=1", "bogus");
}

#[test]
fn repeated_key_fails_boot() {
    expect_config_error("mode=io mode=l2", "mode");
}

#[test]
fn burst_bounds_are_accepted() {
    for b in [1, 256] {
        let mut rig = Rig::start_raw(&format!("burst={b}"));
        let lines = rig.guest.lines();
        assert!(
            lines.iter().any(|l| l.contains("config:")
                && l.split_whitespace().any(|t| t == format!("burst={b}"))),
            "burst={b} not in the effective configuration:\n{}",
            lines.join("\n")
        );
        // Forwarding works with the extreme bursts.
        let (p0, p1) = (rig.port(0), rig.port(1));
        let f = plain_frame(guest_mac(0), peer_mac(0), 100, b as u8);
        p0.send(&f).unwrap();
        let got = p1
            .recv_timeout(FRAME_TIMEOUT)
            .unwrap_or_else(|| panic!("burst={b}: frame not forwarded\n{}", rig.tail()));
        assert_eq!(
            got,
            l2_rewrite(&f, 1, peer_mac(1)),
            "burst={b}: {}",
            diff(&got, &f)
        );
        rig.quit();
    }
}

fn expect_nic_count_error(nics: usize) {
    let (exit, lines) = boot_failing("", nics);
    let log = lines.join("\n");
    assert_eq!(
        exit,
        GuestExit::GuestFailure,
        "{nics} NICs: {exit}; log:\n{log}"
    );
    let want = format!("need 2 virtio-net ports, found {nics}");
    assert!(
        lines.iter().any(|l| l.contains(&want)),
        "{nics} NICs: no line containing {want:?}; log:\n{log}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(qemu::READY_MARKER)),
        "{nics} NICs: guest became ready; log:\n{log}"
    );
}

#[test]
fn one_nic_fails_boot() {
    expect_nic_count_error(1);
}

#[test]
fn no_nic_fails_boot() {
    expect_nic_count_error(0);
}

#[test]
fn three_nics_use_the_first_two() {
    // More ports than needed is not an error: the guest warns and forwards between the first two.
    let dir = TestDir::new();
    let gen = Generator::bind(&GenConfig {
        dir: dir.path().to_path_buf(),
        ..gen_count(1, 64, false)
    })
    .unwrap();
    let _p2 = RawPort::bind(dir.path(), 2).unwrap();
    let mut guest = Guest::boot(&GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        nics: 3,
        ..GuestConfig::default()
    })
    .unwrap();
    guest
        .wait_ready(READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("3 NICs: not ready: {e:#}"));
    let (p0, p1) = (gen.raw_port(0).unwrap(), gen.raw_port(1).unwrap());
    let f = plain_frame(guest_mac(0), peer_mac(0), 200, 3);
    p0.send(&f).unwrap();
    let got = p1
        .recv_timeout(FRAME_TIMEOUT)
        .unwrap_or_else(|| panic!("3 NICs: frame not forwarded\n{}", guest.tail_report()));
    assert_eq!(got, l2_rewrite(&f, 1, peer_mac(1)), "{}", diff(&got, &f));
    let (s, exit) = guest.quit(QUIT_TIMEOUT).unwrap();
    assert_eq!(exit, GuestExit::Clean, "{}", guest.tail_report());
    assert_no_leak(&s.expect("final STATS"));
}

#[test]
fn bad_pool_mode_fails_boot() {
    expect_config_error("pool=discard", "pool");
}

#[test]
fn bad_refill_mode_fails_boot() {
    expect_config_error("refill=some", "refill");
}

/// Boots with port 0 as usual and port 1 a virtio-net device with the extra QEMU device
/// options `opts`; returns how it ended and the log.
fn boot_port1_with(opts: &str) -> (GuestExit, Vec<String>) {
    boot_failing_with("", 1, 1, |dir| {
        let (local, remote) = (gen::guest_sock(dir, 1), gen::host_sock(dir, 1));
        vec![
            "-netdev".into(),
            format!(
                "dgram,id=p1,local.type=unix,local.path={},remote.type=unix,remote.path={}",
                local.display(),
                remote.display()
            ),
            "-device".into(),
            format!("virtio-net-pci,netdev=p1,mac=02:00:00:00:00:02,{opts}"),
        ]
    })
}

/// Issue 15 item 6: a device that offers VIRTIO_F_ACCESS_PLATFORM (QEMU `iommu_platform=on`,
/// which QEMU accepts only on a modern-only device, `disable-legacy=on`) is refused at boot,
/// naming the port and the feature, instead of READY with a port that never moves a frame.
#[test]
fn a_device_behind_an_iommu_fails_boot() {
    let (exit, lines) = boot_port1_with("disable-legacy=on,iommu_platform=on");
    let log = lines.join("\n");
    assert_eq!(exit, GuestExit::GuestFailure, "{exit}; log:\n{log}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("port 1") && l.contains("VIRTIO_F_ACCESS_PLATFORM")),
        "no error naming port 1 and VIRTIO_F_ACCESS_PLATFORM; log:\n{log}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(qemu::READY_MARKER)),
        "guest became ready with a device behind an IOMMU; log:\n{log}"
    );
}

/// Boots with `append`, expects a guest failure with a line containing every one of `want`
/// and no READY; returns that line.
fn expect_error_line(append: &str, want: &[&str]) -> String {
    let (exit, lines) = boot_failing(append, 2);
    let log = lines.join("\n");
    assert_eq!(
        exit,
        GuestExit::GuestFailure,
        "append {append:?}: {exit}; log:\n{log}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(qemu::READY_MARKER)),
        "append {append:?}: guest became ready; log:\n{log}"
    );
    lines
        .iter()
        .find(|l| want.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("append {append:?}: no line with all of {want:?}; log:\n{log}"))
        .clone()
}

/// Issue 15 item 8: a /32 port address and a route over a connected network each get their own
/// error (both said `the shared FIB lacks a port's connected route`); issue 40: a `route=` with
/// a broadcast gateway is refused by name at boot.
#[test]
fn host_prefix_port_and_route_over_connected_network_are_named() {
    let l = expect_error_line(
        "mode=router ip0=10.0.0.1/32 ip1=10.0.1.1/24",
        &[
            "config error: ip0/ip1",
            "a /32 port address leaves no connected network",
        ],
    );
    assert!(!l.contains("lacks"), "{l}");
    let l = expect_error_line(
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 route=10.0.0.0/24,10.0.1.2",
        &[
            "config error: route=10.0.0.0/24,10.0.1.2",
            "is a connected network",
        ],
    );
    assert!(!l.contains("lacks"), "{l}");
    // Issue 40 item 1: checked when the command line is parsed, whatever the key order: a
    // connected network's broadcast address is no gateway.
    expect_error_line(
        "mode=router route=192.168.0.0/16,10.0.1.255 ip0=10.0.0.1/24 ip1=10.0.1.1/24",
        &["config error: route=192.168.0.0/16,10.0.1.255: gateway is the broadcast address of connected network 10.0.1.0/24"],
    );
}

/// Issue 33 item 6: `ip0=`/`ip1=` are the management plane's in every mode (issue 15 item 8
/// had refused them outside router mode, where they were ignored); `mgmt=` naming a port
/// without an address, and the router's `PUT` token outside router mode, are named errors.
#[test]
fn a_management_port_without_an_address_fails_boot() {
    let l = expect_error_line(
        "mode=io ip1=10.0.1.1/24 mgmt=ip0",
        &["config error", "ip0", "for its management address (mgmt=)"],
    );
    assert!(l.contains("`ip0`") || l.contains("ip0="), "{l}");
    expect_error_line(
        "mode=l2 ip0=10.0.0.1/24 mgmt_token=gannet-test-token-0123456789",
        &[
            "config error",
            "key `mgmt_token` belongs to mode=router or mode=acl or mode=firewall or mode=nat, not mode=l2",
        ],
    );
}

/// Issue 15 item 8: router mode in too little memory names the minimum (it said
/// `NoRoomForReserve { bytes: 69730304 }`), and that minimum boots.
#[test]
fn router_mode_in_too_little_memory_is_a_named_error() {
    // The sparse FIB needs no reserve (router mode runs in 32M, tests/tests/router.rs); below
    // what the RX rings need the boot stops naming how much more to give.
    const ROUTER: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
    // The image plus 0.5–1.5 MiB (sized from `__kernel_end`, so the case holds as the image
    // grows): too little for the rings and the management plane.
    const MIB: u64 = 1 << 20;
    let end =
        harness::elf::symbol_address(&image(), "__kernel_end").unwrap_or_else(|e| panic!("{e:#}"));
    let memory = format!("{}M", (end + MIB / 2).div_ceil(MIB));
    let (exit, lines) = boot_failing_memory(ROUTER, &memory);
    let log = lines.join("\n");
    assert_eq!(exit, GuestExit::GuestFailure, "{exit}; log:\n{log}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("memory error:") && l.contains("give the guest at least")),
        "no named memory error; log:\n{log}"
    );
}

#[test]
fn bad_burstin_fails_boot() {
    expect_config_error("burstin=yes", "burstin");
}
