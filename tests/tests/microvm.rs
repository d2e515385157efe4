//! `-machine microvm,acpi=off` (`--boot microvm`): no PCI, no ACPI, virtio-mmio ports named on
//! the kernel command line by QEMU (`virtio_mmio.device=512@ADDR:IRQ`, Linux's syntax). The
//! kernel takes the ports from there, runs on one CPU (no MADT), polls (no MSI-X), calibrates
//! the TSC against PIT channel 0 (microvm has no port 0x61) and forwards frames with no loss.

use gannet_tests::*;

/// Frames per direction: enough to cycle every RX buffer of both ports many times.
const FRAMES: u64 = 3_000;

/// The host's TSC rate in Hz from /proc/cpuinfo (`cpu MHz`), if its TSC is invariant
/// (`constant_tsc`): under TCG the guest's TSC runs at the host's rate.
fn host_tsc_hz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    if !info.contains(" constant_tsc") {
        return None;
    }
    let mhz = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse::<f64>()
        .ok()?;
    Some(mhz * 1e6)
}

/// Boots microvm in `mode`, offers [`FRAMES`] frames each way and checks them all back, the
/// boot log (ports from `virtio_mmio.device=`, one CPU, polling, TSC rate), a clean quit and
/// no page leak.
fn microvm_boots_and_forwards(mode: &str) {
    let append = format!("mode={mode}");
    let mut rig = Rig::start_boot(&append, gen_count(FRAMES, 64, true), Boot::Microvm, 1);
    eprintln!("microvm {mode}: accelerator {}", rig.guest.accel());
    let lines = rig.guest.lines();
    let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
    for needle in [
        "booting (PVH)",
        "virtio_mmio.device=512@0x",
        "port 0: virtio-mmio 512@0x",
        "port 1: virtio-mmio 512@0x",
        "smp: no ACPI tables",
        // Issue 35: no power button, no S5; the boot log says what stops it.
        "power: no ACPI (no power button, no soft-off): only the console `quit` stops Gannet",
        "1 CPUs online",
        "idle (cpu 0): busy polling",
        "calibrated against PIT channel 0, no port 0x61",
    ] {
        assert!(
            has(needle),
            "microvm {mode}: no `{needle}` in the boot log\n{}",
            rig.tail()
        );
    }
    let tsc_line = lines
        .iter()
        .find(|l| l.contains("TSC: "))
        .expect("TSC line");
    let hz: f64 = tsc_line
        .split("TSC: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unparsable {tsc_line}"));
    match host_tsc_hz() {
        Some(host) => {
            let err = (hz - host).abs() / host;
            eprintln!(
                "microvm {mode}: guest TSC {hz} Hz, host {host} Hz, error {:.4}%",
                err * 100.0
            );
            assert!(
                err < 0.01,
                "guest TSC {hz} Hz vs host {host} Hz: {:.3}% off",
                err * 100.0
            );
        }
        None => assert!(hz > 1e8, "implausible TSC rate {hz} Hz"),
    }
    forwards_every_frame_and_quits_clean(&mut rig, &format!("microvm {mode}"), mode, FRAMES);
}

#[test]
fn microvm_boots_and_forwards_l2() {
    microvm_boots_and_forwards("l2");
}

#[test]
fn microvm_boots_and_forwards_io() {
    microvm_boots_and_forwards("io");
}

/// A `virtio_mmio.device=` naming an empty microvm transport (DeviceID 0 at 0xfeb00000, below
/// QEMU's two ports) or plain RAM (no magic) is a named port error and a failure exit, never a
/// panic or hang; so is a malformed value (a config error).
#[test]
fn microvm_bad_mmio_devices_are_named_errors() {
    for (extra, needle) in [
        (
            "virtio_mmio.device=512@0xfeb00000:5",
            "port 0: virtio-mmio 512@0xfeb00000: not a virtio-mmio device: Invalid or unknown device ID",
        ),
        (
            "virtio_mmio.device=512@0x200000:5",
            "port 0: virtio-mmio 512@0x200000: not a virtio-mmio device: Invalid magic value",
        ),
        (
            "virtio_mmio.device=512@0xfeb00e01:5",
            "config error: bad value `512@0xfeb00e01:5` for key `virtio_mmio.device`",
        ),
    ] {
        let (exit, lines) = boot_failing_on(Boot::Microvm, &format!("mode=l2 {extra}"), 2, vec![]);
        assert_eq!(exit, GuestExit::GuestFailure, "{extra}: {lines:#?}");
        assert!(
            lines.iter().any(|l| l.contains(needle)) && !lines.iter().any(|l| l.contains("PANIC")),
            "{extra}: no `{needle}`: {lines:#?}"
        );
    }
}
