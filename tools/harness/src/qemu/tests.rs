use super::*;
use std::os::unix::fs::PermissionsExt;

fn cfg(dir: &Path) -> GuestConfig {
    GuestConfig {
        image: PathBuf::from("/img/gannet"),
        dgram_dir: dir.to_path_buf(),
        append: "mode=l2 verbose=1".into(),
        ..Default::default()
    }
}

#[test]
fn command_line_is_exact() {
    let a = command_args(&cfg(Path::new("/tmp/d"))).unwrap();
    let expect: Vec<String> = [
        "-machine",
        "q35",
        "-accel",
        "tcg",
        "-m",
        "256M",
        "-smp",
        "1",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-monitor",
        "none",
        "-nodefaults",
        "-kernel",
        "/img/gannet",
        "-append",
        "mode=l2 verbose=1 debug_exit=on",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-netdev",
        "dgram,id=p0,local.type=unix,local.path=/tmp/d/guest-0.sock,remote.type=unix,remote.path=/tmp/d/host-0.sock",
        "-device",
        "virtio-net-pci,romfile=,netdev=p0,mac=02:00:00:00:00:01",
        "-netdev",
        "dgram,id=p1,local.type=unix,local.path=/tmp/d/guest-1.sock,remote.type=unix,remote.path=/tmp/d/host-1.sock",
        "-device",
        "virtio-net-pci,romfile=,netdev=p1,mac=02:00:00:00:00:02",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(a, expect);
    assert!(!a.iter().any(|x| x == "-icount"));
    assert!(
        !a.iter().any(|x| x == "-cpu"),
        "no -cpu unless asked (QEMU's qemu64)"
    );
}

#[test]
fn command_line_options() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.icount = true;
    c.accel = Accel::Kvm;
    c.cpus = 2;
    c.nics = 3;
    let a = command_args(&c).unwrap();
    let pos = a.iter().position(|x| x == "-icount").unwrap();
    assert_eq!(a[pos + 1], "shift=0,sleep=off");
    let accel = a.iter().position(|x| x == "-accel").unwrap();
    assert_eq!(a[accel + 1], "kvm");
    let smp = a.iter().position(|x| x == "-smp").unwrap();
    assert_eq!(a[smp + 1], "2");
    assert!(a.contains(&"virtio-net-pci,romfile=,netdev=p2,mac=02:00:00:00:00:03".to_string()));
    assert_eq!(a.iter().filter(|x| *x == "-netdev").count(), 3);
    c.cpu = Some("max".into());
    let a = command_args(&c).unwrap();
    let cpu = a.iter().position(|x| x == "-cpu").unwrap();
    assert_eq!(a[cpu + 1], "max");
    c.cpu = Some("-smp".into());
    assert!(command_args(&c).is_err());
}

#[test]
fn command_line_tap_backend() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.backend = Backend::Tap;
    c.queues = 2;
    c.cpus = 2;
    let a = command_args(&c).unwrap();
    let net: Vec<&String> = a.iter().skip_while(|x| *x != "-netdev").collect();
    assert_eq!(
        net,
        [
            "-netdev",
            "tap,id=p0,ifname=gtap0,script=no,downscript=no,queues=2",
            "-device",
            "virtio-net-pci,romfile=,netdev=p0,mq=on,vectors=6,mac=02:00:00:00:00:01",
            "-netdev",
            "tap,id=p1,ifname=gtap1,script=no,downscript=no,queues=2",
            "-device",
            "virtio-net-pci,romfile=,netdev=p1,mq=on,vectors=6,mac=02:00:00:00:00:02",
        ]
    );
    assert!(!a.iter().any(|x| x.contains("dgram")), "{a:?}");
    // One queue: a plain tap, no mq.
    c.queues = 1;
    let a = command_args(&c).unwrap();
    assert!(a.contains(&"virtio-net-pci,romfile=,netdev=p0,mac=02:00:00:00:00:01".to_string()));
    c.queues = 5;
    let err = command_args(&c).unwrap_err().to_string();
    assert!(err.contains("--queues 5"), "{err}");
}

#[test]
fn tap_backend_needs_a_namespace() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.backend = Backend::Tap;
    c.qemu = PathBuf::from("/bin/true");
    c.image = PathBuf::from("/bin/true");
    let err = Guest::boot(&c).err().expect("no namespace").to_string();
    assert!(err.contains("network namespace"), "{err}");
}

#[test]
fn command_line_rejects_long_socket_dir() {
    let long = PathBuf::from(format!("/{}", "d".repeat(100)));
    let err = command_args(&cfg(&long)).unwrap_err().to_string();
    assert!(err.contains("sun_path"), "{err}");
}

/// A STATS line as the guest prints it: one l2 pair, `busy_cycles`, `forwarded`, `kicks` set.
fn stats_line(busy_cycles: u64, forwarded: u64, kicks: u64) -> String {
    let port = |i: u8| netstack::stats::PortStats {
        port: u32::from(i),
        mac: netstack::MacAddr([2, 0, 0, 0, 0, 1 + i]),
        rx: forwarded,
        ..Default::default()
    };
    let s = netstack::stats::Stats {
        tsc_hz: 2_000_000_000,
        busy_cycles,
        forwarded,
        kicks,
        ports: [port(0), port(1)].into_iter().collect(),
        ..Default::default()
    };
    let mut buf = vec![0u8; netstack::stats::JSON_MAX];
    format!(
        "STATS {}",
        netstack::stats::to_json(&s, &mut buf).expect("fits")
    )
}

#[test]
fn stats_parsing() {
    let line = stats_line(123_456, 1000, 40);
    let s = Stats::from_line(&line).unwrap().unwrap();
    assert_eq!(s.mode, netstack::Mode::L2);
    assert_eq!(s.forwarded, 1000);
    assert_eq!(s.cycles_per_packet(), Some(123.456));
    assert_eq!(s.kicks_per_packet(), Some(0.04));
    assert_eq!(s.ports.len(), 2);
    assert_eq!(s.ports[1].mac.to_string(), "02:00:00:00:00:02");
    assert_eq!(s.ports[0].drops.too_big, 0);
    // Display is the JSON the guest printed.
    assert_eq!(format!("STATS {s}"), line);
    // Leading whitespace and unknown keys (a newer guest) are fine.
    let newer = line.replacen('{', "{\"future_key\":[1,2],", 1);
    assert_eq!(Stats::from_line(&format!("  {newer}")).unwrap().unwrap(), s);
    let idle = Stats::from_line(&stats_line(0, 0, 0)).unwrap().unwrap();
    assert!(idle.cycles_per_packet().is_none());
    // A STATS line that does not match the schema is an error, other lines are not STATS.
    for bad in [
        "STATS not json",
        "STATS [1]",
        "STATS {\"forwarded\":0}",
        &line.replace("\"kicks\":", "\"kick\":"),
    ] {
        let e = Stats::from_line(bad).unwrap().unwrap_err();
        assert!(format!("{e:#}").contains("does not match"), "{e:#}");
    }
    assert!(Stats::from_line("gannet: STATS {}").is_none());
}

/// The strict check: the line as the guest's serialiser writes it reads back exactly; a key the
/// tools' schema does not know, or a value it changes, is named.
#[test]
fn stats_lines_must_read_back_exactly() {
    let line = stats_line(123_456, 1000, 40);
    assert_eq!(Stats::exact_mismatch(&line), None);
    assert_eq!(Stats::exact_mismatch("not STATS"), None);
    let newer = line.replacen('{', "{\"future_key\":[1,2],", 1);
    assert_eq!(
        Stats::exact_mismatch(&newer).as_deref(),
        Some(".future_key: written by the guest, not read")
    );
    let nested = line.replacen("\"runt\":0", "\"runt\":0,\"lost\":1", 1);
    assert_eq!(
        Stats::exact_mismatch(&nested).as_deref(),
        Some(".ports[0].drops.lost: written by the guest, not read")
    );
    let e = Stats::exact_mismatch(&line.replace("\"kicks\":", "\"kick\":")).unwrap();
    assert!(e.starts_with("not a Stats"), "{e}");
}

#[test]
fn exit_status_mapping() {
    use std::os::unix::process::ExitStatusExt;
    let st = |c: i32| ExitStatus::from_raw(c << 8);
    assert_eq!(GuestExit::from_status(st(1)), GuestExit::Clean);
    assert_eq!(GuestExit::from_status(st(3)), GuestExit::GuestFailure);
    assert!(!GuestExit::from_status(st(0)).is_clean());
    assert_eq!(GuestExit::from_status(st(0)), GuestExit::PoweredOff);
    assert!(!GuestExit::from_status(ExitStatus::from_raw(9)).is_clean());
}

/// A fake QEMU: a shell script speaking the guest's console protocol.
fn fake_qemu(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("fake-qemu");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn fake_cfg(tmp: &Path, body: &str) -> GuestConfig {
    let q = fake_qemu(tmp, body);
    GuestConfig {
        qemu: q.clone(),
        image: q,
        dgram_dir: tmp.to_path_buf(),
        ..Default::default()
    }
}

/// A fake guest console: ready marker, `stats`, `quit` (final STATS, clean exit), `fail`.
fn protocol() -> String {
    PROTOCOL
        .replace("STATS_500", &stats_line(500, 10, 5))
        .replace("STATS_1000", &stats_line(1000, 10, 5))
}

const PROTOCOL: &str = r#"
printf 'SeaBIOS\r\n'
echo "gannet: ready"
while read l; do
  case "$l" in
    stats) echo 'STATS_500';;
    quit) echo 'STATS_1000'; exit 1;;
    fail) echo "panic"; exit 3;;
    *) echo "unknown: $l";;
  esac
done
"#;

#[test]
fn guest_console_protocol_with_fake_qemu() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Guest::boot(&fake_cfg(tmp.path(), &protocol())).unwrap();
    g.wait_ready(Duration::from_secs(10)).unwrap();
    assert_eq!(g.last_lines(2), ["SeaBIOS", "gannet: ready"]);
    let s = g.stats(Duration::from_secs(10)).unwrap();
    assert_eq!(s.busy_cycles, 500);
    g.send_line("help").unwrap();
    g.wait_for_line(|l| l == "unknown: help", Duration::from_secs(10))
        .unwrap();
    let (stats, exit) = g.quit(Duration::from_secs(10)).unwrap();
    assert_eq!(exit, GuestExit::Clean);
    assert_eq!(stats.unwrap().cycles_per_packet(), Some(100.0));
}

#[test]
fn guest_failure_and_early_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut g = Guest::boot(&fake_cfg(tmp.path(), &protocol())).unwrap();
    g.wait_ready(Duration::from_secs(10)).unwrap();
    g.send_line("fail").unwrap();
    assert_eq!(
        g.wait_exit(Duration::from_secs(10)).unwrap(),
        GuestExit::GuestFailure
    );
    assert_eq!(g.last_lines(1), ["panic"]);

    let mut g = Guest::boot(&fake_cfg(
        tmp.path(),
        "echo 'config error: bad mode'; echo boom >&2; exit 3",
    ))
    .unwrap();
    let err = format!("{:#}", g.wait_ready(Duration::from_secs(10)).unwrap_err());
    assert!(err.contains("config error: bad mode"), "{err}");
    assert_eq!(
        g.wait_exit(Duration::from_secs(10)).unwrap(),
        GuestExit::GuestFailure
    );
    assert!(g.tail_report().contains("boom"));
}

#[test]
fn ready_timeout_and_kill_on_drop() {
    let tmp = tempfile::tempdir().unwrap();
    // The fake QEMU starts a child in its process group; dropping the Guest kills both.
    let pidfile = tmp.path().join("child.pid");
    let body = format!(
        "echo booting; sleep 300 & echo $! > {}; wait",
        pidfile.display()
    );
    let g = Guest::boot(&fake_cfg(tmp.path(), &body)).unwrap();
    let err = format!(
        "{:#}",
        g.wait_ready(Duration::from_millis(300)).unwrap_err()
    );
    assert!(err.contains("booting"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pidfile.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let child: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    drop(g);
    let deadline = Instant::now() + Duration::from_secs(5);
    // SAFETY: signal 0 only checks for existence. The sleep is reparented and reaped by init.
    while unsafe { libc::kill(child, 0) } == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above, signal 0 sends nothing; kill only reports whether `child` exists.
    let alive = unsafe { libc::kill(child, 0) } == 0;
    assert!(!alive, "grandchild survived");
}

#[test]
fn stale_guest_sockets_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let stale = gen::guest_sock(tmp.path(), 1);
    std::fs::write(&stale, b"").unwrap();
    let mut g = Guest::boot(&fake_cfg(tmp.path(), "exit 1")).unwrap();
    assert!(!stale.exists());
    assert!(g.wait_exit(Duration::from_secs(10)).unwrap().is_clean());
}

#[test]
fn qemu_error_with_status_1_is_not_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let body = "echo 'qemu-system-x86_64: warning: host does not support X' >&2; \
                echo 'qemu-system-x86_64: Error loading uncompressed kernel without PVH ELF Note' >&2; exit 1";
    let mut g = Guest::boot(&fake_cfg(tmp.path(), body)).unwrap();
    let e = g.wait_exit(Duration::from_secs(10)).unwrap();
    assert!(!e.is_clean(), "{e}");
    assert!(g.qemu_error().unwrap().contains("PVH"));
}

/// Issue 15 item 8: a command line over the guest's 4096 bytes is refused before QEMU starts,
/// with a named error giving its length; 4096 bytes are accepted.
#[test]
fn over_long_command_line_is_refused_before_qemu() {
    let dir = std::env::temp_dir();
    let mut c = cfg(&dir);
    // The guest's line is `append` and ` debug_exit=on` (GuestConfig::debug_exit, the default).
    let suffix = DEBUG_EXIT_ARG.len() + 1;
    c.append = "x".repeat(MAX_CMDLINE - suffix);
    assert!(command_args(&c).is_ok());
    for len in [MAX_CMDLINE - suffix + 1, 4120, 4128, 10_000] {
        c.append = "x".repeat(len);
        let err = command_args(&c).unwrap_err();
        assert_eq!(
            err.downcast_ref::<CmdlineTooLong>(),
            Some(&CmdlineTooLong { len: len + suffix }),
            "{err:#}"
        );
        assert!(err.to_string().starts_with("CmdlineTooLong: "), "{err}");
    }
    // Without isa-debug-exit the whole 4096 bytes are the caller's.
    c.debug_exit = false;
    c.append = "x".repeat(MAX_CMDLINE);
    assert!(command_args(&c).is_ok());
    c.append.push('x');
    assert!(command_args(&c).is_err());
}

/// Issue 35: isa-debug-exit is opt-in. Without it (`debug_exit: false`, as a libvirt domain)
/// neither the device nor `debug_exit=on` is passed; a QMP socket is added when asked.
#[test]
fn debug_exit_is_opt_in_and_qmp_socket() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.debug_exit = false;
    c.qmp = Some(PathBuf::from("/tmp/d/qmp.sock"));
    let a = command_args(&c).unwrap();
    let at = |x: &str| a.iter().position(|y| y == x);
    assert_eq!(a[at("-append").unwrap() + 1], "mode=l2 verbose=1");
    assert!(!a.iter().any(|x| x.contains("isa-debug-exit")), "{a:?}");
    assert_eq!(
        a[at("-qmp").unwrap() + 1],
        "unix:/tmp/d/qmp.sock,server=on,wait=off"
    );
    c.append.clear();
    c.debug_exit = true;
    assert_eq!(kernel_cmdline(&c), "debug_exit=on");
}

/// The `virtio-net-pci` device arguments of a command line, in order.
fn nic_devices(a: &[String]) -> Vec<&str> {
    a.windows(2)
        .filter(|w| w[0] == "-device" && w[1].starts_with("virtio-net-pci,"))
        .map(|w| w[1].as_str())
        .collect()
}

#[test]
fn no_mtu_no_host_mtu() {
    let a = command_args(&cfg(Path::new("/tmp/d"))).unwrap();
    assert!(!a.iter().any(|x| x.contains("host_mtu")), "{a:?}");
}

#[test]
fn mtu_sets_host_mtu_on_every_dgram_port() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.mtu = Some(Mtus::parse("9000").unwrap());
    let a = command_args(&c).unwrap();
    assert_eq!(
        nic_devices(&a),
        [
            "virtio-net-pci,romfile=,netdev=p0,host_mtu=9000,mac=02:00:00:00:00:01",
            "virtio-net-pci,romfile=,netdev=p1,host_mtu=9000,mac=02:00:00:00:00:02",
        ]
    );
}

#[test]
fn mtu_per_port_and_per_pair_side() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.mtu = Some(Mtus::parse("9000, 1500").unwrap());
    assert_eq!(
        nic_devices(&command_args(&c).unwrap()),
        [
            "virtio-net-pci,romfile=,netdev=p0,host_mtu=9000,mac=02:00:00:00:00:01",
            "virtio-net-pci,romfile=,netdev=p1,host_mtu=1500,mac=02:00:00:00:00:02",
        ]
    );
    // Four ports, two values: ports 2k and 2k+1 of every pair.
    c.nics = 4;
    let devs: Vec<String> = nic_devices(&command_args(&c).unwrap())
        .iter()
        .map(|d| {
            d.split(',')
                .find(|o| o.starts_with("host_mtu="))
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        devs,
        [
            "host_mtu=9000",
            "host_mtu=1500",
            "host_mtu=9000",
            "host_mtu=1500"
        ]
    );
    // One value per port.
    c.mtu = Some(Mtus::parse("1500,2000,3000,9000").unwrap());
    let a = command_args(&c).unwrap();
    assert!(
        a.contains(&"virtio-net-pci,romfile=,netdev=p3,host_mtu=9000,mac=02:00:00:00:00:04".into())
    );
    assert!(
        a.contains(&"virtio-net-pci,romfile=,netdev=p1,host_mtu=2000,mac=02:00:00:00:00:02".into())
    );
}

#[test]
fn mtu_on_the_tap_backend_follows_mq() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.backend = Backend::Tap;
    c.queues = 2;
    c.mtu = Some(Mtus::parse("9000,68").unwrap());
    assert_eq!(
        nic_devices(&command_args(&c).unwrap()),
        [
            "virtio-net-pci,romfile=,netdev=p0,mq=on,vectors=6,host_mtu=9000,mac=02:00:00:00:00:01",
            "virtio-net-pci,romfile=,netdev=p1,mq=on,vectors=6,host_mtu=68,mac=02:00:00:00:00:02",
        ]
    );
}

#[test]
fn mtu_values_are_checked_with_named_errors() {
    assert_eq!(Mtus::parse("68").unwrap().values(), [68]);
    assert_eq!(Mtus::parse("9000").unwrap().values(), [9000]);
    assert_eq!(Mtus::parse("67"), Err(MtuError::OutOfRange(67)));
    assert_eq!(Mtus::parse("9001"), Err(MtuError::OutOfRange(9001)));
    assert_eq!(Mtus::parse("70000"), Err(MtuError::OutOfRange(70000)));
    assert_eq!(Mtus::parse("1500,0"), Err(MtuError::OutOfRange(0)));
    assert_eq!(
        Mtus::parse("1500,jumbo"),
        Err(MtuError::NotANumber("jumbo".into()))
    );
    assert_eq!(Mtus::parse("-1"), Err(MtuError::NotANumber("-1".into())));
    assert_eq!(Mtus::parse(""), Err(MtuError::Empty));
    assert_eq!(Mtus::new(vec![]), Err(MtuError::Empty));
    assert_eq!(Mtus::new(vec![9001]), Err(MtuError::OutOfRange(9001)));
    assert_eq!(
        MtuError::OutOfRange(9001).to_string(),
        "MtuError: --mtu 9001 out of range 68..=9000 (bytes of IP packet per frame)"
    );
    let m: Mtus = "9000,1500".parse().unwrap();
    assert_eq!(m.to_string(), "9000,1500");
    assert_eq!(
        (m.port(0), m.port(1), m.port(2), m.port(3)),
        (9000, 1500, 9000, 1500)
    );
}

#[test]
fn mtu_count_that_fits_no_port_layout_is_refused_before_qemu() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.mtu = Some(Mtus::parse("9000,1500,1500").unwrap());
    let err = command_args(&c).unwrap_err();
    assert_eq!(
        err.downcast_ref::<MtuError>(),
        Some(&MtuError::PortCount {
            values: 3,
            ports: 2
        })
    );
    // Two values for an odd number of ports: which side is port 2 on?
    c.nics = 3;
    c.mtu = Some(Mtus::parse("9000,1500").unwrap());
    assert!(command_args(&c).is_err());
    c.mtu = Some(Mtus::parse("9000,1500,1280").unwrap());
    let a = command_args(&c).unwrap();
    assert!(
        a.contains(&"virtio-net-pci,romfile=,netdev=p2,host_mtu=1280,mac=02:00:00:00:00:03".into())
    );
    // Boot refuses it without starting QEMU (which does not exist here).
    c.mtu = Some(Mtus::parse("9000,1500").unwrap());
    c.qemu = PathBuf::from("/nonexistent/qemu");
    let err = Guest::boot(&c).err().expect("refused");
    assert!(err.downcast_ref::<MtuError>().is_some(), "{err:#}");
}

#[test]
fn iso_boots_load_from_the_cdrom_with_the_routes_file_on_the_iso() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.extra_args = vec!["-initrd".into(), "/r/routes".into(), "-S".into()];
    c.boot = Boot::IsoBios;
    assert!(
        command_args(&c).is_err(),
        "an ISO boot without an ISO is refused"
    );
    c.iso = Some(PathBuf::from("/i/gannet.iso"));
    let a = command_args(&c).unwrap();
    let has = |w: &[&str]| a.windows(w.len()).any(|x| x == w);
    assert!(
        has(&["-nodefaults", "-cdrom", "/i/gannet.iso", "-device"]),
        "{a:?}"
    );
    for gone in ["-kernel", "-append", "-initrd", "/r/routes", "-bios"] {
        assert!(!a.iter().any(|x| x == gone), "{gone} in {a:?}");
    }
    assert_eq!(
        a.last().map(String::as_str),
        Some("-S"),
        "other extra args stay"
    );
    c.boot = Boot::IsoUefi;
    let a = command_args(&c).unwrap();
    let has = |w: &[&str]| a.windows(w.len()).any(|x| x == w);
    assert!(
        has(&["-bios", crate::setup::OVMF_FD, "-cdrom", "/i/gannet.iso"]),
        "{a:?}"
    );
    assert_eq!(
        split_initrd(&c.extra_args).0,
        Some(PathBuf::from("/r/routes"))
    );
}

#[test]
fn microvm_boots_with_virtio_mmio_devices_and_no_acpi() {
    let mut c = cfg(Path::new("/tmp/d"));
    c.boot = Boot::Microvm;
    let a = command_args(&c).unwrap();
    let has = |w: &[&str]| a.windows(w.len()).any(|x| x == w);
    assert!(has(&["-machine", "microvm,acpi=off"]), "{a:?}");
    assert!(has(&["-kernel", "/img/gannet", "-append"]), "{a:?}");
    assert!(has(&["-global", "virtio-mmio.force-legacy=false"]), "{a:?}");
    assert!(
        has(&["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]),
        "{a:?}"
    );
    let nets: Vec<&String> = a
        .iter()
        .filter(|x| x.starts_with("virtio-net-device,netdev=p"))
        .collect();
    assert_eq!(nets.len(), 2, "{a:?}");
    assert!(nic_devices(&a).is_empty(), "no PCI NIC on microvm: {a:?}");
    c.queues = 2;
    assert!(command_args(&c).is_err(), "multi-queue refused on microvm");
}

#[test]
fn nic_bus_places_ports_behind_bridges() {
    let dir = std::env::temp_dir();
    let mut c = cfg(&dir);
    c.nic_bus = NicBus::RootPorts;
    let a = command_args(&c).unwrap();
    let joined = a.join(" ");
    assert!(
        joined.contains(
            "-device pcie-root-port,id=rp0,chassis=1,port=16,bus=pcie.0,addr=0x10 \
         -device pcie-root-port,id=rp1,chassis=2,port=17,bus=pcie.0,addr=0x11"
        ),
        "{joined}"
    );
    assert!(
        joined.contains("netdev=p0,bus=rp0,addr=0x0,mac=02:00:00:00:00:01"),
        "{joined}"
    );
    assert!(
        joined.contains("netdev=p1,bus=rp1,addr=0x0,mac=02:00:00:00:00:02"),
        "{joined}"
    );
    c.nic_bus = NicBus::PciBridge;
    let joined = command_args(&c).unwrap().join(" ");
    assert!(
        joined.contains(
            "-device pcie-pci-bridge,id=pb0,bus=pcie.0,addr=0x10 \
         -device pci-bridge,id=br0,chassis_nr=1,bus=pb0,addr=0x1"
        ),
        "{joined}"
    );
    assert!(
        joined.contains("netdev=p1,bus=br0,addr=0x2,mac="),
        "{joined}"
    );
    c.boot = Boot::Microvm;
    assert!(command_args(&c).is_err(), "microvm has no PCI bridges");
}

#[test]
fn an_image_older_than_a_kernel_source_is_stale() {
    use std::time::{Duration, SystemTime};
    let root = tempfile::tempdir().unwrap();
    let at = |p: &Path, secs: u64| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let f = std::fs::File::create(p).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
            .unwrap();
    };
    let image = root.path().join("target/gannet");
    let source = root.path().join("drivers/src/nic/mod.rs");
    let fuzz_out = root.path().join("drivers/fuzz/target/x.rs");
    let outside = root.path().join("tests/tests/x.rs");
    assert!(image_stale(root.path(), &image), "a missing image is stale");
    at(&source, 1_000);
    at(&image, 2_000);
    at(&fuzz_out, 3_000);
    at(&outside, 3_000);
    assert!(
        !image_stale(root.path(), &image),
        "sources older; build outputs and other crates do not count"
    );
    at(&source, 3_000);
    assert!(image_stale(root.path(), &image), "a kernel source is newer");
}
