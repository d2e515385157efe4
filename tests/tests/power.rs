//! Issue 35 item 2: the ACPI power button stops Gannet as `quit` does (every page back, final
//! STATS), then ACPI S5 soft-off ends QEMU with status 0 and QMP's `SHUTDOWN` event says
//! `guest-shutdown`; a press during boot and two presses give one clean stop; `reboot` ends in
//! the FADT reset register (`guest-reset` under `-no-reboot`); without isa-debug-exit the
//! console `quit` and a boot failure end in S5 too. Each guest runs as a libvirt
//! domain would (no isa-debug-exit, `GuestConfig::debug_exit: false`) unless it says so.
//! The DSDT-without-`\_S5` case is a unit test on bytes (`unikernel::acpi_pm`).

use gannet_tests::*;
use harness::qmp::Qmp;
use std::path::PathBuf;
use std::time::Duration;

/// Frames per direction before the press: the rings, pools and TX queues hold pages, so the
/// drain has something to give back.
const FRAMES: u64 = 2_000;
/// QMP commands and the events after them.
const QMP_TIMEOUT: Duration = Duration::from_secs(30);

/// A guest with a QMP socket and a bound generator.
struct PowerRig {
    guest: Guest,
    gen: Generator,
    qmp: Qmp,
    _dir: TestDir,
}

/// Boots `append` with a QMP socket; isa-debug-exit only with `debug_exit`. Does not wait
/// for `ready`.
fn boot(append: &str, debug_exit: bool) -> PowerRig {
    boot_nics(append, debug_exit, 2)
}

/// [`boot`] with `nics` virtio-net ports.
fn boot_nics(append: &str, debug_exit: bool, nics: usize) -> PowerRig {
    let dir = TestDir::new();
    let gen = Generator::bind(&GenConfig {
        dir: dir.path().to_path_buf(),
        ..gen_count(FRAMES, 64, true)
    })
    .unwrap_or_else(|e| panic!("binding the generator: {e:#}"));
    let sock: PathBuf = dir.path().join("qmp.sock");
    let cfg = GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        append: append.to_string(),
        debug_exit,
        qmp: Some(sock.clone()),
        nics,
        ..GuestConfig::default()
    };
    let guest = Guest::boot(&cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
    let qmp = Qmp::connect(&sock, QMP_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", guest.tail_report()));
    PowerRig {
        guest,
        gen,
        qmp,
        _dir: dir,
    }
}

impl PowerRig {
    fn press(&mut self) {
        self.qmp
            .execute("system_powerdown", QMP_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.guest.tail_report()));
    }

    /// QMP's SHUTDOWN event's reason, then QEMU's exit.
    fn shutdown(&mut self) -> (String, GuestExit) {
        let ev = self
            .qmp
            .wait_event("SHUTDOWN", QMP_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.guest.tail_report()));
        let exit = self
            .guest
            .wait_exit(QUIT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e:#}"));
        (
            ev["data"]["reason"].as_str().unwrap_or("").to_string(),
            exit,
        )
    }

    fn count(&self, needle: &str) -> usize {
        self.guest
            .lines()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The drain happened once and was clean: one press taken, one `quit: draining`, one
    /// final STATS with every page back, `shutdown clean`.
    fn assert_one_clean_stop(&self, what: &str) -> Stats {
        let tail = self.guest.tail_report();
        assert_eq!(self.count("power button pressed"), 1, "{what}: {tail}");
        assert_eq!(self.count("quit: draining"), 1, "{what}: {tail}");
        assert_eq!(self.count("gannet: shutdown clean"), 1, "{what}: {tail}");
        let stats: Vec<Stats> = self
            .guest
            .lines()
            .iter()
            .filter_map(|l| Stats::from_line(l))
            .map(|s| s.unwrap_or_else(|e| panic!("{what}: STATS: {e:#}")))
            .collect();
        assert_eq!(stats.len(), 1, "{what}: one final STATS line: {tail}");
        let s = stats.into_iter().next().unwrap();
        assert_no_leak(&s);
        s
    }
}

/// The power button after traffic, pressed twice in a row: one drain (every page back, final
/// STATS counting the frames), then S5: QEMU status 0, `guest-shutdown`.
#[test]
fn power_button_drains_then_s5_soft_off() {
    let mut rig = boot("mode=l2", false);
    rig.guest
        .wait_ready(READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let lines = rig.guest.lines();
    for needle in [
        "power: ACPI power button armed (PM1a_EVT_BLK port 0x",
        // QEMU's \_S5 (unikernel/fixtures): read from the DSDT, not assumed.
        "power: soft-off is ACPI S5: SLP_TYPa=0 SLP_TYPb=0 from \\_S5",
        "power: reset register port 0xcf9",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "no `{needle}` in the boot log\n{}",
            rig.guest.tail_report()
        );
    }
    let report = rig.gen.run().unwrap_or_else(|e| panic!("generator: {e:#}"));
    assert!(report.received > 0 && report.bad == 0, "{report:?}");
    rig.press();
    rig.press();
    let (reason, exit) = rig.shutdown();
    assert_eq!(reason, "guest-shutdown", "{}", rig.guest.tail_report());
    assert_eq!(exit, GuestExit::PoweredOff, "{}", rig.guest.tail_report());
    let s = rig.assert_one_clean_stop("two presses");
    // The final STATS counts what came back to the generator (and maybe more: a frame the
    // host dropped after the guest sent it).
    let tx: u64 = s.ports.iter().map(|p| p.tx).sum();
    assert!(
        tx >= report.received,
        "final STATS forwarded {tx} < {}: {s}",
        report.received
    );
}

/// A press during boot (after the button is armed, before `ready`) is latched and stops
/// Gannet once it is ready: one clean stop, S5.
#[test]
fn power_button_during_boot_stops_once_ready() {
    let mut rig = boot("mode=l2", false);
    rig.guest
        .wait_for_line(
            |l| l.contains("power: ACPI power button armed"),
            READY_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    // Paused, the guest cannot reach `ready` while the press is made: QEMU latches it in
    // PWRBTN_STS as it would for a running guest.
    rig.qmp.execute("stop", QMP_TIMEOUT).unwrap();
    let before_press = rig.guest.line_count();
    let ready_early = rig.count("gannet: ready");
    rig.press();
    rig.qmp.execute("cont", QMP_TIMEOUT).unwrap();
    assert_eq!(
        ready_early,
        0,
        "the guest was ready before the press (the host was too slow to press during boot)\n{}",
        rig.guest.tail_report()
    );
    let (reason, exit) = rig.shutdown();
    assert_eq!(reason, "guest-shutdown", "{}", rig.guest.tail_report());
    assert_eq!(exit, GuestExit::PoweredOff);
    let lines = rig.guest.lines();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let (ready, pressed) = (at("gannet: ready"), at("power button pressed"));
    assert!(
        ready >= Some(before_press) && pressed > ready,
        "the press is taken after ready: {ready:?} {pressed:?}\n{}",
        rig.guest.tail_report()
    );
    rig.assert_one_clean_stop("press during boot");
}

/// `reboot` drains as `quit` does, then writes the FADT reset register: under `-no-reboot`
/// QEMU stops with `guest-reset` (status 0). With isa-debug-exit present (the tests'
/// default), so the reset is not mistaken for the debug-exit path.
#[test]
fn reboot_uses_the_fadt_reset_register() {
    let mut rig = boot("mode=l2", true);
    rig.guest
        .wait_ready(READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    rig.guest.send_line("reboot").unwrap();
    let (reason, exit) = rig.shutdown();
    assert_eq!(reason, "guest-reset", "{}", rig.guest.tail_report());
    assert_eq!(exit, GuestExit::PoweredOff);
    assert_eq!(rig.count("gannet: shutdown clean"), 1);
    assert_eq!(rig.count("resetting through the FADT reset register"), 1);
}

/// The console `quit` in a domain without isa-debug-exit (the issue's "drains and then halts
/// forever"): the drain, then S5.
#[test]
fn quit_without_debug_exit_ends_in_s5() {
    let mut rig = boot("mode=io", false);
    rig.guest
        .wait_ready(READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e:#}"));
    rig.guest.send_line("quit").unwrap();
    let (reason, exit) = rig.shutdown();
    assert_eq!(reason, "guest-shutdown", "{}", rig.guest.tail_report());
    assert_eq!(exit, GuestExit::PoweredOff);
    assert_eq!(rig.count("gannet: shutdown clean"), 1);
    assert_eq!(rig.count("power button pressed"), 0);
}

/// A boot failure after the ACPI tables were read, without isa-debug-exit: the named error on
/// the console, then S5 (an orchestrator sees the VM stop instead of a silent `running` one).
#[test]
fn failure_without_debug_exit_ends_in_s5() {
    let mut rig = boot_nics("mode=l2", false, 1);
    let (reason, exit) = rig.shutdown();
    assert_eq!(reason, "guest-shutdown", "{}", rig.guest.tail_report());
    assert_eq!(exit, GuestExit::PoweredOff);
    assert_eq!(
        rig.count("need 2 virtio-net ports, found 1"),
        1,
        "{}",
        rig.guest.tail_report()
    );
    assert_eq!(rig.count("gannet: ready"), 0);
}
