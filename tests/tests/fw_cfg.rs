//! Issue 35 item 3: per-instance configuration without the kernel command line. QEMU's fw_cfg
//! files `opt/gannet/cmdline` (keys, laid over the command line: each key it names replaces
//! the command line's) and `opt/gannet/bundle` (the appliance's files, in place of a boot
//! module), as libvirt's `<sysinfo type='fwcfg'>` passes them; each source named in the boot log;
//! a bad value refused naming the key and where it came from.

use gannet_tests::*;

/// QEMU's `-fw_cfg name=NAME,string=VALUE` (a comma in VALUE doubled, as QEMU's option syntax
/// wants).
fn fw_cfg_string(name: &str, value: &str) -> Vec<String> {
    vec![
        "-fw_cfg".to_string(),
        format!("name={name},string={}", value.replace(',', ",,")),
    ]
}

#[test]
fn fw_cfg_keys_replace_the_command_lines_and_are_named_in_the_log() {
    let extra = fw_cfg_string("opt/gannet/cmdline", "mode=io burst=16");
    let mut rig = Rig::start_with("mode=l2 burst=8", gen_count(200, 64, false), extra);
    let lines = rig.guest.lines();
    let has = |s: &str| lines.iter().any(|l| l.contains(s));
    assert!(
        has("config: mode=io ") && has(" burst=16 "),
        "fw_cfg's values are in force:\n{}",
        rig.tail()
    );
    assert!(
        has("config: from fw_cfg opt/gannet/cmdline: \"mode=io burst=16\" (over the command line)"),
        "{}",
        rig.tail()
    );
    let r = rig.run();
    assert!(r.received == r.sent && r.bad == 0, "{r:?}");
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Io, "{s}");
    assert_no_leak(&s);
}

#[test]
fn a_bad_fw_cfg_value_is_refused_naming_its_key_and_source() {
    let (exit, lines) = boot_failing_with("mode=l2", 2, 1, |_| {
        fw_cfg_string("opt/gannet/cmdline", "burst=0")
    });
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines.iter().any(
            |l| l.contains("config error: bad value `0` for key `burst`")
                && l.contains("(from fw_cfg opt/gannet/cmdline)")
        ),
        "{lines:?}"
    );
}

/// The router's routes file from fw_cfg (a bundle), with the router's keys from fw_cfg too: a
/// route only the file has forwards.
#[test]
fn fw_cfg_carries_the_appliance_bundle() {
    let dir = TestDir::new();
    let file = dir.path().join("appliance.bundle");
    std::fs::write(
        &file,
        "#!gannet-bundle 1\n--- routes\n192.168.0.0/16,10.0.1.2\n",
    )
    .unwrap();
    let mut extra = fw_cfg_string(
        "opt/gannet/cmdline",
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24",
    );
    extra.extend([
        "-fw_cfg".to_string(),
        format!("name=opt/gannet/bundle,file={}", file.display()),
    ]);
    let mut rig = Rig::start_with("", gen_count(1, 64, false), extra);
    let lines = rig.guest.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("fw_cfg opt/gannet/bundle: file `routes`"))
            && lines
                .iter()
                .any(|l| l.contains("1 routes from the routes file")),
        "{}",
        rig.tail()
    );
    // 192.168.1.1 is routable only by the file's route: it leaves port 1 toward 10.0.1.2.
    let (p0, p1) = (rig.port(0), rig.port(1));
    let mut f = Vec::new();
    etherparse::PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
        .ipv4([10, 0, 0, 2], [192, 168, 1, 1], 64)
        .udp(4000, 6000)
        .write(&mut f, b"fw_cfg route")
        .unwrap();
    p0.send(&f).unwrap();
    let routed = recv_answering_arp(&p1, 1, FRAME_TIMEOUT)
        .is_some_and(|got| got.len() >= 34 && got[30..34] == [192, 168, 1, 1]);
    assert!(routed, "not routed by fw_cfg's route\n{}", rig.tail());
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Router, "{s}");
    assert_no_leak(&s);
}
