//! The ports behind PCI bridges (issue 35): each `virtio-net-pci` behind its own
//! `pcie-root-port` (as libvirt places NICs), and both behind a conventional `pci-bridge` that
//! itself sits behind a `pcie-pci-bridge` (two bridge levels). SeaBIOS, which QEMU's PVH boot
//! runs first on q35, numbers the buses; the kernel's scan (`drivers::pci::scan`) follows the
//! bridges, the boot log names each port's bus:device.function, MSI-X is routed without a
//! warning, and every frame is forwarded. The bridge with no bus number (bad input no
//! firmware here produces) is covered by `drivers::pci`'s unit tests.

use gannet_tests::*;
use harness::qemu::NicBus;

/// Frames per direction: a few rings' worth, so RX buffers are recycled; small, for CI time.
const FRAMES: u64 = 1_000;

/// Boots l2 with the ports placed as `bus`, checks the boot log names `scan` (the scan's
/// summary) and `ports` (each port's B:D.F in order), no MSI-X warning, then forwards.
fn boots_and_forwards_behind(bus: NicBus, scan: &str, ports: [&str; 2]) {
    let mut rig = Rig::start_nic_bus("mode=l2", gen_count(FRAMES, 64, true), bus);
    let label = format!("{bus:?}");
    eprintln!("{label}: accelerator {}", rig.guest.accel());
    let lines = rig.guest.lines();
    let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
    assert!(
        has(scan),
        "{label}: no `{scan}` in the boot log\n{}",
        rig.tail()
    );
    // q35 has an MCFG table: configuration access goes through ECAM (issue 35 item 1).
    let ecam =
        "pci: configuration access through ECAM at 0xb0000000 (MCFG, segment 0, buses 0-255)";
    assert!(has(ecam), "{label}: no `{ecam}`\n{}", rig.tail());
    for (i, bdf) in ports.iter().enumerate() {
        let needle = format!("port {i}: {bdf} virtio-net");
        assert!(has(&needle), "{label}: no `{needle}`\n{}", rig.tail());
    }
    assert!(
        !has("MSI-X:") && has("halt until RX MSI-X"),
        "{label}: MSI-X not routed behind the bridge\n{}",
        rig.tail()
    );
    forwards_every_frame_and_quits_clean(&mut rig, &label, "l2", FRAMES);
}

#[test]
fn ports_behind_pcie_root_ports() {
    boots_and_forwards_behind(
        NicBus::RootPorts,
        "pci: 3 buses scanned, 2 bridges; virtio-net at 01:00.0 02:00.0",
        ["01:00.0", "02:00.0"],
    );
}

#[test]
fn ports_behind_a_pci_bridge() {
    boots_and_forwards_behind(
        NicBus::PciBridge,
        "pci: 3 buses scanned, 2 bridges; virtio-net at 02:01.0 02:02.0",
        ["02:01.0", "02:02.0"],
    );
}

/// QEMU's `pc` (i440FX) has no MCFG table: configuration access stays on the I/O ports, said
/// in the boot log, and the ports are found and forward as on q35.
#[test]
fn without_mcfg_configuration_access_is_port_io() {
    let extra = vec!["-machine".to_string(), "pc".to_string()];
    let mut rig = Rig::start_with("mode=l2", gen_count(FRAMES, 64, true), extra);
    let lines = rig.guest.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("pci: configuration access through port I/O (no MCFG)")),
        "{}",
        rig.tail()
    );
    forwards_every_frame_and_quits_clean(&mut rig, "pc", "l2", FRAMES);
}
