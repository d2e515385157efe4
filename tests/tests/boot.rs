//! Boot log and clean shutdown.

use gannet_tests::*;

/// The first line containing every one of `needles`; panics with the log otherwise.
fn line_with<'a>(lines: &'a [String], needles: &[&str]) -> &'a str {
    lines
        .iter()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .unwrap_or_else(|| {
            panic!(
                "no boot log line containing all of {needles:?}; log:\n{}",
                lines.join("\n")
            )
        })
}

/// Checks that the `config:` line holds exactly `want` for those keys (other keys may follow).
fn assert_config_line(lines: &[String], want: &[(&str, &str)]) {
    let l = line_with(lines, &["config:"]);
    let rest = &l[l.find("config:").unwrap() + "config:".len()..];
    let kv: Vec<(&str, &str)> = rest
        .split_whitespace()
        .map(|t| {
            t.split_once('=')
                .unwrap_or_else(|| panic!("`{t}` is not key=value in: {l}"))
        })
        .collect();
    for (k, v) in want {
        let got = kv.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
        assert_eq!(got, Some(*v), "effective `{k}` wrong in config line: {l}");
    }
    // The documented keys come first, in this order.
    let order: Vec<&str> = kv.iter().map(|(k, _)| *k).take(5).collect();
    assert_eq!(
        order,
        ["mode", "peer0", "peer1", "burst", "log"],
        "config line: {l}"
    );
}

fn assert_port_lines(lines: &[String]) {
    for p in 0..2 {
        let l = line_with(lines, &[&format!("port {p}:"), "virtio-net MAC"]);
        assert!(
            l.contains(&mac_str(guest_mac(p))),
            "port {p} line does not show MAC {}: {l}",
            mac_str(guest_mac(p))
        );
        assert!(
            l.contains("negotiated"),
            "port {p} line lacks the negotiated features: {l}"
        );
        // Modern virtio (12-byte header) and mergeable RX buffers are what the datapath relies
        // on (frames larger than one page span several buffers and are counted as too_big).
        for feat in ["VERSION_1", "MRG_RXBUF", "MAC"] {
            assert!(l.contains(feat), "port {p} did not negotiate {feat}: {l}");
        }
    }
}

#[test]
fn boot_log_and_clean_quit() {
    let mut rig = Rig::start_raw("");
    let lines = rig.guest.lines();
    line_with(&lines, &["booting"]);
    assert_port_lines(&lines);
    assert_config_line(
        &lines,
        &[
            ("mode", "l2"),
            ("peer0", "02:00:00:00:0a:02"),
            ("peer1", "02:00:00:00:0b:02"),
            ("burst", "32"),
            ("log", "info"),
        ],
    );
    // Order: booting, config, ports, ready.
    let idx = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
    assert!(idx("booting") < idx("config:"));
    assert!(idx("config:") < idx("port 0:"));
    assert!(idx("port 0:") < idx("port 1:"));
    assert!(idx("port 1:") < idx(qemu::READY_MARKER));

    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::L2, "final STATS: {}", s);
    assert_eq!(s.forwarded, 0, "nothing was sent: {}", s);
    for p in 0..2 {
        assert_eq!(s.ports[p].mac.0, guest_mac(p), "{}", s);
        assert_eq!(s.ports[p].port as usize, p);
        assert_eq!(s.ports[p].rx, 0, "{}", s);
        assert_eq!(s.ports[p].tx, 0, "{}", s);
    }
    assert!(s.tsc_hz > 0, "{}", s);
    assert_no_leak(&s);
}

#[test]
fn boot_log_shows_effective_configuration() {
    let append = "mode=io peer0=02:11:22:33:44:55 peer1=0a:bb:cc:dd:ee:ff burst=8 log=info";
    let mut rig = Rig::start_raw(append);
    let lines = rig.guest.lines();
    let cl = line_with(&lines, &["command line:"]);
    assert!(cl.contains(append), "command line not echoed: {cl}");
    assert_config_line(
        &lines,
        &[
            ("mode", "io"),
            ("peer0", "02:11:22:33:44:55"),
            ("peer1", "0a:bb:cc:dd:ee:ff"),
            ("burst", "8"),
            ("log", "info"),
        ],
    );
    assert_port_lines(&lines);
    let s = rig.stats();
    assert_eq!(s.mode, netstack::Mode::Io, "{}", s);
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Io, "{}", s);
    assert_no_leak(&s);
}

#[test]
fn help_answers_and_guest_keeps_running() {
    let mut rig = Rig::start_raw("");
    let from = rig.guest.line_count();
    rig.guest.send_line("help").unwrap();
    let (_, l) = rig
        .guest
        .wait_for_line_from(from, |l| l.contains("commands:"), STATS_TIMEOUT)
        .unwrap_or_else(|e| panic!("help: {e:#}"));
    for cmd in ["stats", "quit", "help"] {
        assert!(l.contains(cmd), "help does not mention `{cmd}`: {l}");
    }
    let s = rig.stats();
    assert_eq!(s.forwarded, 0);
    rig.quit();
}

/// Boots with `-m memory`, expects a guest failure with a line containing every one of `want`
/// and no `gannet: ready`; returns that line.
fn expect_memory_error(append: &str, memory: &str, want: &[&str]) -> String {
    let (exit, lines) = boot_failing_memory(append, memory);
    let log = lines.join("\n");
    assert_eq!(
        exit,
        GuestExit::GuestFailure,
        "-m {memory}: {exit}; log:\n{log}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(qemu::READY_MARKER)),
        "-m {memory}: guest became ready; log:\n{log}"
    );
    lines
        .iter()
        .find(|l| want.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("-m {memory}: no line containing all of {want:?}; log:\n{log}"))
        .clone()
}

/// Issue 15 item 5: RAM smaller than the kernel image (1 MiB + ~4 MiB with .bss) is a named
/// error with the size the image needs, printed before .bss is touched. It was: -m 2M hung with
/// no output, -m 3M and -m 4M exited 3 with no message.
#[test]
fn memory_below_the_image_is_a_named_error() {
    for m in ["2M", "3M", "4M"] {
        let l = expect_memory_error(
            "",
            m,
            &[
                "memory error: RAM does not cover the kernel image",
                "give the guest at least ",
            ],
        );
        let mib: u32 = l
            .split("at least ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no MiB figure in: {l}"));
        assert!(
            mib > 4 && mib < 16,
            "-m {m}: implausible image size {mib} MiB: {l}"
        );
    }
}

/// Issue 15 item 5: a port whose RX ring cannot be half filled stops the boot, naming the port
/// and how much more memory is needed. It was: -m 5M posted 0 buffers on port 1, then READY.
#[test]
fn an_rx_ring_below_half_is_a_named_error() {
    let l = expect_memory_error(
        "",
        "5M",
        &[
            "memory error: port ",
            " of 256 RX buffers posted",
            "at least 128 needed before ready",
        ],
    );
    // Which port runs short depends on how much of 5 MiB the image leaves (port 1 posted none
    // when the image was smaller; port 0 gets ~120 now): a port below half, named.
    let posted: u32 = l
        .split("only ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no posted count in: {l}"));
    assert!(posted < 128, "a port below half named: {l}");
    let more: u32 = l
        .split("give the guest at least ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no MiB figure in: {l}"));
    assert!((1..=4).contains(&more), "implausible figure: {l}");
    // The figure is enough: with that much more memory both rings fill and the guest is ready.
    let mut rig = Rig::start_memory("", gen_count(1, 64, false), &format!("{}M", 5 + more), 1);
    let lines = rig.guest.lines();
    for p in 0..2 {
        let posted = format!("port {p}: 256 RX buffers posted");
        assert!(
            lines.iter().any(|l| l.contains(&posted)),
            "-m {}M: no line `{posted}`; log:\n{}",
            5 + more,
            lines.join("\n")
        );
    }
    let s = rig.quit();
    assert_no_leak(&s);
}
