//! Issue 34 items 1–2: a user's appliance from the template, built outside the workspace
//! into its own image and booted. The template (`template/`) is copied as `cargo xtask new`
//! does it into a temporary directory, built warm (the workspace's target directory, the same
//! target flags, profile and lock file: only the appliance crate itself compiles), its host
//! tests run (`cargo test-host`: the NF on Gannet's host rig), booted, and
//! fed real frames: its NF drops UDP to the port its own key `blocked_port=` names and forwards
//! the rest, and its own counters show under its name in `STATS` and the `/metrics` text; a bad
//! value of its key, and a stock NF's key, stop the boot naming the key; then priced by `bench
//! sim` on the frame its `bench_frames` builds. Its file in the appliance bundle is read and
//! checked the same way (`files_from_the_bundle`).

use std::time::{Duration, Instant};

use common::Clients;
use etherparse::PacketBuilder;
use gannet_tests::*;
use harness::appliance;

mod common;

#[test]
fn the_template_builds_outside_the_workspace_boots_and_runs_its_nf() {
    let root = qemu::workspace_root();
    let tmp = TestDir::new();
    let dir = appliance::new(&root, &tmp.path().join("my-appliance")).expect("xtask new");
    assert!(!dir.starts_with(&root), "{} is outside", dir.display());
    let t0 = Instant::now();
    let image = appliance::build(&dir, &qemu::target_dir(&root)).expect("building the appliance");
    eprintln!(
        "appliance: built warm in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // Its host tests (`cargo test-host` in the copy): the NF's logic and the NF on Gannet's host
    // rig, built for the host in the same target directory.
    let t0 = Instant::now();
    let passed = appliance::test_host(&dir, &qemu::target_dir(&root)).expect("cargo test-host");
    assert_eq!(passed, 2, "the template's two host tests");
    eprintln!(
        "appliance: host tests built and run in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // The NF's own key (issue 33 item 4): 6000 blocked instead of the default 5000.
    let mut rig = Rig::start_image(&image, "blocked_port=6000", gen_count(1, 64, false));
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("forwarding ") && l.contains("mode port_filter")),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    let frame = |dport: u16| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv4([10, 0, 0, 2], [10, 0, 1, 2], 64)
            .udp(4000, dport)
            .write(&mut f, b"appliance")
            .unwrap();
        f
    };
    for i in 0..20u16 {
        p0.send(&frame(if i % 2 == 0 { 5000 } else { 6000 }))
            .unwrap();
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    while got.len() < 10 && Instant::now() < deadline {
        if let Some(f) = p1.recv_timeout(Duration::from_millis(200)) {
            got.push(f);
        }
    }
    // Nothing more comes: the ten frames to port 6000 were dropped.
    while let Some(f) = p1.recv_timeout(Duration::from_millis(300)) {
        got.push(f);
    }
    assert_eq!(got.len(), 10, "{}", rig.tail());
    assert!(
        got.iter().all(|f| f[12..] == frame(5000)[12..]),
        "{}",
        rig.tail()
    );
    // Its own counters, under its name, in STATS and /metrics (the console's `metrics`).
    let s = rig.stats();
    assert_eq!(s.nf_name, "port_filter", "{s}");
    assert_eq!(s.nf_counters.one("blocked"), Some(10), "{s}");
    assert_eq!(s.nf_counters.one("forwarded"), Some(10), "{s}");
    let text = rig.metrics();
    for want in [
        "# TYPE gannet_nf_port_filter_blocked_total counter",
        "gannet_nf_port_filter_blocked_total 10",
        "gannet_nf_port_filter_forwarded_total 10",
        "gannet_nf_frames_total{nf=\"port_filter\",verdict=\"dropped\"} 10",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    let s = rig.quit();
    assert_eq!(s.nf_counters.one("blocked"), Some(10), "{s}");
    assert_eq!(s.nf.dropped, 10, "{s}");
    assert_eq!(s.ports[1].tx, 10, "{s}");
    assert_no_leak(&s);

    // Its keys are checked at boot like the kernel's: named errors, no forwarding.
    for (append, want) in [
        (
            "blocked_port=http",
            "bad value `http` for key `blocked_port`: expected a port number in 0..=65535",
        ),
        (
            "blocked_port=1 blocked_port=2",
            "key `blocked_port` given more than once",
        ),
        (
            "peer0=02:00:00:00:00:aa",
            "key `peer0` belongs to the stock image's mode=l2 or mode=nat; this image runs `port_filter`",
        ),
        ("blocked=1", "(port_filter's keys: blocked_port)"),
    ] {
        config_error(boot_failing_image(&image, append), append, want);
    }

    files_from_the_bundle(&image, tmp.path());

    // `bench sim --image`: the NF priced on its own frame (its `bench_frames`), every frame
    // forwarded as it said.
    let cfg = bench_sim::SimBenchConfig::new(image.clone());
    let (r, log) = bench_sim::run_one_with_log(&cfg, bench_sim::SimMode::Io, 4)
        .unwrap_or_else(|e| panic!("bench sim --image: {e:#}"));
    assert!(
        log.iter()
            .any(|l| l.contains("sim: the frames are the appliance's own (port_filter)")),
        "{log:?}"
    );
    assert_eq!(
        (r.packets, r.out, r.other),
        (r.delivered, r.delivered, 0),
        "{r:?}"
    );
    eprintln!(
        "appliance: {} guest instructions/packet at {} frames/busy iteration",
        r.instructions_per_packet, r.frames_per_busy_iter
    );
}

/// Issue 33 item 4: the NF's own file in the appliance bundle (`blocked_ports`), read by every
/// core after its keys; a bad line, a stock NF's file, an undeclared file and a module that is
/// not a bundle stop the boot by name.
fn files_from_the_bundle(image: &std::path::Path, tmp: &std::path::Path) {
    let bundle = |name: &str, text: &str| {
        let path = tmp.join(name);
        std::fs::write(&path, text).unwrap();
        vec!["-initrd".to_string(), path.display().to_string()]
    };
    let good = bundle(
        "good.bundle",
        "#!gannet-bundle 1\n--- blocked_ports\n# two more\n7000\n7001\n",
    );
    // With a management address and token: the file is the NF's to `PUT` too.
    let append = format!("blocked_port=6000 ip0=10.0.0.1/24 mgmt_token={TOKEN}");
    let mut rig = Rig::start_image_with(image, &append, gen_count(1, 64, false), good);
    for want in [
        "port_filter: file `blocked_ports` read (3 lines, checked",
        "mgmt: PUT /blocked_ports on (bearer token of 28 bytes)",
    ] {
        assert!(
            rig.guest.lines().iter().any(|l| l.contains(want)),
            "no `{want}`\n{}",
            rig.tail()
        );
    }
    // Only port 5000's four frames: 6000 by the key, 7000 and 7001 by the file.
    let forwarded = udp_ports_forwarded(&rig, &[5000, 6000, 7000, 7001]);
    assert_eq!(forwarded, [5000; 2], "{}", rig.tail());
    put_nf_file(&mut rig);
    let s = rig.quit();
    // 6 before the PUT, 4 after it: the restarted NF's count went on.
    assert_eq!(s.nf_counters.one("blocked"), Some(10), "{s}");
    assert_no_leak(&s);

    for (name, text, want) in [
        (
            "bad_line",
            "#!gannet-bundle 1\n--- blocked_ports\n7000\nhttp\n",
            "boot module: file `blocked_ports` line 2: expected a port number in 0..=65535 (boot module line 4)",
        ),
        (
            "stock",
            "#!gannet-bundle 1\n--- routes\n10.0.0.0/8,10.0.1.2\n",
            "file `routes` belongs to the stock image's mode=router; this image runs `port_filter`",
        ),
        (
            "undeclared",
            "#!gannet-bundle 1\n--- blocked\n7000\n",
            "file `blocked` is not one `port_filter` declares (port_filter's files: blocked_ports)",
        ),
        (
            "plain",
            "10.0.0.0/8,10.0.1.2\n",
            "not a bundle (no `#!gannet-bundle 1` line): `port_filter` reads its files from one",
        ),
    ] {
        let failed = boot_failing_image_with(image, "", bundle(name, text));
        config_error(failed, name, want);
    }
}

/// Issue 33 item 6: `PUT /blocked_ports` on the management address. `GET` reads the bundle's
/// text (generation 1); a text the NF's parser refuses is 400 naming its line and changes
/// nothing; a good one is generation 2, which every core takes up by restarting its NF
/// (`8000` blocked now, `7000` and `7001` no longer), and `GET` reads it back.
fn put_nf_file(rig: &mut Rig) {
    let mut c = Clients::new(rig.port(0));
    let get = |c: &mut Clients, rig: &Rig| {
        c.request(
            rig,
            "GET /blocked_ports HTTP/1.1",
            b"",
            Duration::from_secs(10),
        )
    };
    let resp = get(&mut c, rig);
    assert!(resp.starts_with("HTTP/1.0 200 OK\r\n"), "{resp}");
    assert!(
        resp.contains("\r\nETag: \"gen-1\"\r\nX-Lines: 3\r\n"),
        "{resp}"
    );
    assert!(resp.ends_with("\r\n\r\n# two more\n7000\n7001\n"), "{resp}");
    let put = |c: &mut Clients, rig: &Rig, body: &str| {
        let head = format!(
            "PUT /blocked_ports HTTP/1.1\r\nHost: 10.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}",
            body.len()
        );
        c.request(rig, &head, body.as_bytes(), Duration::from_secs(30))
    };
    // `?check` runs the NF's parser and publishes nothing.
    let check = |c: &mut Clients, rig: &Rig, body: &str| {
        let head = format!(
            "PUT /blocked_ports?check HTTP/1.1\r\nHost: 10.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}",
            body.len()
        );
        c.request(rig, &head, body.as_bytes(), Duration::from_secs(30))
    };
    let resp = check(&mut c, rig, "99999\n");
    assert!(
        resp.contains("400 Bad Request") && resp.contains("PUT /blocked_ports?check: file `blocked_ports` line 1: expected a port number in 0..=65535; nothing published"),
        "{resp}"
    );
    let resp = check(&mut c, rig, "8000\n");
    assert!(
        resp.contains("1 lines read by the network function's parser, none refused"),
        "{resp}"
    );
    // Another NF's file, by the method asked.
    let resp = c.request(rig, "GET /routes HTTP/1.1", b"", Duration::from_secs(10));
    assert!(
        resp.contains("GET /routes: `port_filter` has no routes file (the router's)"),
        "{resp}"
    );
    let resp = put(&mut c, rig, "8000\nhttp\n");
    assert!(resp.starts_with("HTTP/1.0 400 Bad Request\r\n"), "{resp}");
    assert!(
        resp.contains("PUT /blocked_ports: file `blocked_ports` line 2: expected a port number in 0..=65535; the published files stay"),
        "{resp}"
    );
    let resp = put(&mut c, rig, "8000\n");
    assert!(resp.starts_with("HTTP/1.0 200 OK\r\n"), "{resp}");
    assert!(resp.contains("generation 2\nlines 1\n"), "{resp}");
    rig.guest
        .wait_for_line(
            |l| l.contains("port_filter: cpu 0: files of generation 2 taken up (the NF restarted)"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    let resp = get(&mut c, rig);
    assert!(
        resp.contains("\r\nETag: \"gen-2\"\r\nX-Lines: 1\r\n"),
        "{resp}"
    );
    assert!(resp.ends_with("\r\n\r\n8000\n"), "{resp}");
    let text = c.get_metrics(rig, Duration::from_secs(10));
    for want in [
        "gannet_mgmt_put_nf_files_total{result=\"ok\"} 1",
        "gannet_mgmt_put_nf_files_total{result=\"bad_request\"} 2",
        "gannet_mgmt_put_nf_files_total{result=\"checked\"} 1",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    drop(c);
    // 6000 by the key still, 8000 by the new file; 7000 and 7001 pass now.
    let forwarded = udp_ports_forwarded(rig, &[5000, 6000, 7000, 8000, 7001]);
    assert_eq!(
        forwarded,
        [5000, 7000, 7001, 5000, 7000, 7001],
        "{}",
        rig.tail()
    );
}

/// Send a UDP frame from 10.0.0.2 to 10.0.1.2 on port 0 to each of `ports`, twice over, and
/// return the destination ports of the frames that left port 1, in order.
fn udp_ports_forwarded(rig: &Rig, ports: &[u16]) -> Vec<u16> {
    let (p0, p1) = (rig.port(0), rig.port(1));
    for i in 0..2 * ports.len() {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv4([10, 0, 0, 2], [10, 0, 1, 2], 64)
            .udp(4000, ports[i % ports.len()])
            .write(&mut f, b"bundle")
            .unwrap();
        p0.send(&f).unwrap();
    }
    let mut got = Vec::new();
    while let Some(f) = p1.recv_timeout(Duration::from_millis(500)) {
        got.push(u16::from_be_bytes([f[36], f[37]]));
    }
    got
}

/// A bearer token for `mgmt_token=`.
const TOKEN: &str = "gannet-test-token-0123456789";

/// A boot (`what`) that failed: the guest's failure exit and a `config error` line with
/// `want`.
fn config_error((exit, lines): (GuestExit, Vec<String>), what: &str, want: &str) {
    let log = lines.join("\n");
    assert_eq!(exit, GuestExit::GuestFailure, "{what}: {log}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(qemu::CONFIG_ERROR_MARKER) && l.contains(want)),
        "{what}: no `{want}`:\n{log}"
    );
}
