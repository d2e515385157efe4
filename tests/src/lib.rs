//! Shared helpers of Gannet's integration tests (`tests/tests/*.rs`): boot the real kernel image
//! in QEMU (TCG) with a traffic generator bound in a fresh directory, STATS accessors and frame
//! comparison rules.
//!
//! Every helper panics with the guest's last serial lines when something goes wrong, so a failing
//! test says what the guest printed.
//!
//! Map: this file (boot, generator, STATS, frame rules) over `harness`; [`acpi`] crafts ACPI
//! tables; [`differential`] runs frames through Gannet and a Linux router side by side;
//! [`prom`] checks Prometheus text. The tests in `tests/tests/*.rs` use these and never each
//! other.
//!
//! Past ~800 lines because the `Rig` (boot, generator, console commands, STATS checks) is one
//! value every test drives, and its methods stay with it.

pub mod differential;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod acpi;
pub mod hosts;
pub mod prom;
pub use prom::promtool_check;

pub use harness::bench_sim;
pub use harness::bench_tlb;
pub use harness::faults;
pub use harness::gen::{self, GenConfig, GenReport, Generator, RawPort};
pub use harness::qemu::{self, Backend, Boot, Guest, GuestConfig, GuestExit, Stats};
pub use harness::soak;
pub use harness::tap::{self, TapNet};
pub use netstack::stats::PortDrops;

/// Time allowed for the guest to print `gannet: ready` (TCG on a loaded 2-core machine).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for a `stats` answer.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(20);
/// Time allowed for `quit` (drain, final STATS, exit).
pub const QUIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for a guest that must fail at boot to exit.
pub const FAIL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for a single forwarded frame.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// MAC of guest port `p` (set by the QEMU command line).
pub fn guest_mac(p: usize) -> [u8; 6] {
    gen::guest_mac(p)
}

/// Default peer MAC behind port `p` (`02:00:00:00:0a:02`, `02:00:00:00:0b:02`).
pub fn peer_mac(p: usize) -> [u8; 6] {
    gen::peer_mac(p)
}

/// `aa:bb:…` form of a MAC, as the guest prints it.
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The kernel image: `$GANNET_IMAGE` as given, else the workspace's build output, built once if
/// absent or older than its sources ([`qemu::image_stale`]).
pub fn image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let img = qemu::default_image();
            let given = std::env::var_os("GANNET_IMAGE").is_some_and(|p| !p.is_empty());
            if given || (img.is_file() && !qemu::image_stale(&qemu::workspace_root(), &img)) {
                return img;
            }
            eprintln!(
                "kernel image {} missing or older than its sources: building it (cargo build --release -p unikernel)",
                img.display()
            );
            let built = qemu::build_image().unwrap_or_else(|e| panic!("building the image: {e:#}"));
            assert!(built.is_file(), "{} missing after build", built.display());
            built
        })
        .clone()
}

/// The fault image (`cargo xtask build --fault-inject`): `$GANNET_FAULT_IMAGE` (or the
/// workspace's build output); built once if absent or older than its sources.
pub fn fault_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let img = qemu::default_fault_image();
            let given = std::env::var_os("GANNET_FAULT_IMAGE").is_some_and(|p| !p.is_empty());
            if given || (img.is_file() && !qemu::image_stale(&qemu::workspace_root(), &img)) {
                return img;
            }
            eprintln!(
                "fault image {} missing or older than its sources: building it (cargo xtask build --fault-inject)",
                img.display()
            );
            let built = qemu::build_fault_image()
                .unwrap_or_else(|e| panic!("building the fault image: {e:#}"));
            assert!(built.is_file(), "{} missing after build", built.display());
            built
        })
        .clone()
}

/// The replay capture `shared/data/pcap/tcpreplay-test.pcap`, beside the workspace root (or in
/// `/work/shared`). Panics with a clear message when it is nowhere.
pub fn capture_path() -> PathBuf {
    let root = qemu::workspace_root();
    let candidates = [
        root.join("../shared/data/pcap/tcpreplay-test.pcap"),
        PathBuf::from("/work/shared/data/pcap/tcpreplay-test.pcap"),
    ];
    for c in &candidates {
        if c.is_file() {
            return c.clone();
        }
    }
    panic!(
        "replay capture tcpreplay-test.pcap not found; looked at {}",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// A fresh, short directory for the unix sockets (sun_path is 108 bytes), removed on drop.
pub struct TestDir(PathBuf);

impl TestDir {
    pub fn new() -> TestDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let base = std::env::temp_dir();
        loop {
            let n = N.fetch_add(1, Ordering::SeqCst);
            let p = base.join(format!("gnt-{}-{n}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return TestDir(p),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("creating {}: {e}", p.display()),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Default for TestDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A generator configuration with robust timeouts for a loaded CI machine: exactly `count`
/// frames of `size` bytes (FCS included) per direction.
pub fn gen_count(count: u64, size: usize, bidir: bool) -> GenConfig {
    GenConfig {
        size,
        count: Some(count),
        bidir,
        window: 64,
        loss_timeout: Duration::from_secs(2),
        straggler_wait: Duration::from_secs(5),
        ..GenConfig::default()
    }
}

/// A booted guest with a [`Generator`] bound on its host sockets.
///
/// Fields drop in order: QEMU is killed first, then the sockets are closed, then the directory
/// is removed. Keep a `Rig` on the thread that booted it.
pub struct Rig {
    pub guest: Guest,
    pub gen: Generator,
    /// Tap backend: the network namespace with the tap devices (deleted after QEMU is gone).
    _net: Option<TapNet>,
    _dir: TestDir,
}

/// Panics with a clear message unless the tap backend can run here (root and /dev/net/tun):
/// tests of the tap backend fail rather than skip silently.
pub fn require_tap() {
    if let Some(why) = tap::unavailable() {
        panic!("this test needs the tap backend: {why}");
    }
}

impl Rig {
    /// Binds a generator configured by `gen` (its `dir` is replaced) in a fresh directory, boots
    /// the image with kernel command line `append` and waits for `gannet: ready`.
    pub fn start(append: &str, gen: GenConfig) -> Rig {
        Rig::start_with(append, gen, Vec::new())
    }

    /// [`Rig::start`] with extra QEMU arguments (e.g. `-initrd ROUTES` for a routes file).
    pub fn start_with(append: &str, gen: GenConfig, extra_args: Vec<String>) -> Rig {
        Rig::start_full(append, gen, extra_args, 1)
    }

    /// [`Rig::start`] with `cpus` vCPUs (`-smp`).
    pub fn start_cpus(append: &str, gen: GenConfig, cpus: u32) -> Rig {
        Rig::start_full(append, gen, Vec::new(), cpus)
    }

    fn start_full(append: &str, gen: GenConfig, extra_args: Vec<String>, cpus: u32) -> Rig {
        Rig::start_pairs(append, gen, extra_args, cpus, 1).0
    }

    /// [`Rig::start`] with QEMU writing one pcap per port into `capture` (`--capture`).
    pub fn start_capture(append: &str, gen: GenConfig, capture: &Path) -> Rig {
        Rig::start_configured(append, gen, |c| c.capture = Some(capture.to_path_buf()))
    }

    /// [`Rig::start`] with `memory` of guest RAM (QEMU `-m`, e.g. `"6G"`) and `cpus` vCPUs.
    pub fn start_memory(append: &str, gen: GenConfig, memory: &str, cpus: u32) -> Rig {
        Rig::start_memory_with(append, gen, memory, cpus, Vec::new())
    }

    /// One port pair on the dgram backend, the guest configuration adjusted by `adjust`.
    fn start_configured(
        append: &str,
        gen: GenConfig,
        adjust: impl FnOnce(&mut GuestConfig),
    ) -> Rig {
        let dir = TestDir::new();
        let gcfg = GenConfig {
            dir: dir.path().to_path_buf(),
            ..gen
        };
        let generator =
            Generator::bind(&gcfg).unwrap_or_else(|e| panic!("binding the generator: {e:#}"));
        let mut cfg = GuestConfig {
            image: image(),
            dgram_dir: dir.path().to_path_buf(),
            append: append.to_string(),
            ..GuestConfig::default()
        };
        adjust(&mut cfg);
        Rig::boot(&cfg, generator, None, dir)
    }

    /// [`Rig::start`] with the ports placed on q35's PCI hierarchy as `bus` says (behind
    /// `pcie-root-port`s or a `pci-bridge`; `GuestConfig::nic_bus`).
    pub fn start_nic_bus(append: &str, gen: GenConfig, bus: qemu::NicBus) -> Rig {
        Rig::start_configured(append, gen, |c| c.nic_bus = bus)
    }

    /// [`Rig::start`] with both ports on QEMU's Intel 82574L model (`-device e1000e`), placed
    /// as `bus`, with `extra_args` for QEMU (e.g. a QMP socket).
    pub fn start_e1000e(
        append: &str,
        gen: GenConfig,
        bus: qemu::NicBus,
        extra_args: Vec<String>,
    ) -> Rig {
        Rig::start_intel(qemu::NicModel::E1000e, append, gen, bus, extra_args)
    }

    /// [`Rig::start_e1000e`] on QEMU's Intel model `model` (`e1000e`, or `igb`: the 82576).
    pub fn start_intel(
        model: qemu::NicModel,
        append: &str,
        gen: GenConfig,
        bus: qemu::NicBus,
        extra_args: Vec<String>,
    ) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.nic = model;
            c.nic_bus = bus;
            c.extra_args = extra_args;
        })
    }

    /// [`Rig::start_intel`] on the root bus with `cpus` vCPUs (`-smp`): igb multi-queue.
    pub fn start_intel_cpus(model: qemu::NicModel, append: &str, gen: GenConfig, cpus: u32) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.nic = model;
            c.cpus = cpus;
        })
    }

    /// [`Rig::start`] on one virtio-net port (port 0) and one e1000e port (port 1):
    /// `--nic mixed`, the kernel's one mixed pair.
    pub fn start_mixed(append: &str, gen: GenConfig) -> Rig {
        Rig::start_configured(append, gen, |c| c.nic = qemu::NicModel::Mixed)
    }

    /// [`Rig::start`] loaded by `boot` (e.g. [`Boot::IsoUefi`]: a GRUB ISO built for this
    /// command line, under OVMF) with `cpus` vCPUs.
    pub fn start_boot(append: &str, gen: GenConfig, boot: Boot, cpus: u32) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.boot = boot;
            c.cpus = cpus;
        })
    }

    /// [`Rig::start`] under `-icount shift=0,sleep=off` (the guest TSC counts instructions).
    pub fn start_icount(append: &str, gen: GenConfig) -> Rig {
        Rig::start_configured(append, gen, |c| c.icount = true)
    }

    /// [`Rig::start_icount`] with extra QEMU arguments (e.g. `-initrd ROUTES`).
    pub fn start_icount_with(append: &str, gen: GenConfig, extra_args: Vec<String>) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.icount = true;
            c.extra_args = extra_args;
        })
    }

    /// [`Rig::start`] on the dgram backend with QEMU's `host_mtu=mtu` on both NICs (`--mtu`).
    pub fn start_mtu(append: &str, gen: GenConfig, mtu: u16) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.mtu = Some(harness::mtu::Mtus::new(vec![mtu]).expect("MTU in range"))
        })
    }

    /// [`Rig::start_mtu`] with device properties on both NICs (`GuestConfig::nic_props`, e.g.
    /// `,mrg_rxbuf=off`).
    pub fn start_mtu_props(append: &str, gen: GenConfig, mtu: u16, props: &str) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.mtu = Some(harness::mtu::Mtus::new(vec![mtu]).expect("MTU in range"));
            c.nic_props = props.to_string();
        })
    }

    /// [`Rig::start_memory`] with extra QEMU arguments (e.g. `-initrd ROUTES`).
    pub fn start_memory_with(
        append: &str,
        gen: GenConfig,
        memory: &str,
        cpus: u32,
        extra_args: Vec<String>,
    ) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.memory = memory.to_string();
            c.cpus = cpus;
            c.extra_args = extra_args;
        })
    }

    /// Boots with `cpus` vCPUs and `pairs` port pairs (`2 × pairs` NICs); returns the rig (its
    /// generator drives pair 0) and one more generator per further pair (bound before boot).
    pub fn start_pairs(
        append: &str,
        gen: GenConfig,
        extra_args: Vec<String>,
        cpus: u32,
        pairs: usize,
    ) -> (Rig, Vec<Generator>) {
        let dir = TestDir::new();
        let more: Vec<Generator> = (1..pairs)
            .map(|k| {
                let cfg = GenConfig {
                    dir: dir.path().to_path_buf(),
                    base_port: 2 * k,
                    ..gen.clone()
                };
                Generator::bind(&cfg).unwrap_or_else(|e| panic!("binding generator {k}: {e:#}"))
            })
            .collect();
        let gcfg = GenConfig {
            dir: dir.path().to_path_buf(),
            ..gen
        };
        let generator =
            Generator::bind(&gcfg).unwrap_or_else(|e| panic!("binding the generator: {e:#}"));
        let cfg = GuestConfig {
            image: image(),
            dgram_dir: dir.path().to_path_buf(),
            append: append.to_string(),
            extra_args,
            cpus,
            nics: 2 * pairs,
            ..GuestConfig::default()
        };
        (Rig::boot(&cfg, generator, None, dir), more)
    }

    /// Boots `cfg`, waits for `gannet: ready` (panicking with the log if it does not come) and
    /// keeps the generator, tap namespace and socket directory alive with the guest.
    fn boot(cfg: &GuestConfig, gen: Generator, net: Option<TapNet>, dir: TestDir) -> Rig {
        let guest = Guest::boot(cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
        if let Err(e) = guest.wait_ready(READY_TIMEOUT) {
            panic!(
                "guest (append {:?}, {:?} backend) did not become ready: {e:#}",
                cfg.append, cfg.backend
            );
        }
        Rig {
            guest,
            gen,
            _net: net,
            _dir: dir,
        }
    }

    /// Boots with `cpus` vCPUs on the tap backend: ports 0 and 1 are multi-queue tap devices
    /// with `queues` queue pairs each, in a fresh network namespace; the generator (bound before
    /// boot) uses AF_PACKET sockets on them. Panics (see [`require_tap`]) without root or
    /// /dev/net/tun.
    pub fn start_tap(append: &str, gen: GenConfig, cpus: u32, queues: usize) -> Rig {
        Rig::start_tap_mtu(append, gen, cpus, queues, None)
    }

    /// [`Rig::start_tap`] with more QEMU arguments (e.g. `-initrd ROUTES`).
    pub fn start_tap_with(
        append: &str,
        gen: GenConfig,
        cpus: u32,
        queues: usize,
        extra_args: Vec<String>,
    ) -> Rig {
        Rig::start_tap_full(append, gen, cpus, queues, None, extra_args)
    }

    /// [`Rig::start_tap`] with `mtu` (`--mtu`): QEMU's `host_mtu` on both NICs and the tap
    /// devices' MTU raised to it.
    pub fn start_tap_mtu(
        append: &str,
        gen: GenConfig,
        cpus: u32,
        queues: usize,
        mtu: Option<u16>,
    ) -> Rig {
        Rig::start_tap_full(append, gen, cpus, queues, mtu, Vec::new())
    }

    fn start_tap_full(
        append: &str,
        gen: GenConfig,
        cpus: u32,
        queues: usize,
        mtu: Option<u16>,
        extra_args: Vec<String>,
    ) -> Rig {
        require_tap();
        let dir = TestDir::new();
        let mtus = mtu.map(|m| harness::mtu::Mtus::new(vec![m]).expect("MTU in range"));
        let net = TapNet::create_with_mtu(2, queues, mtus.as_ref())
            .unwrap_or_else(|e| panic!("tap backend: {e:#}"));
        let gcfg = GenConfig {
            dir: dir.path().to_path_buf(),
            netns: Some(net.path()),
            ..gen
        };
        let generator =
            Generator::bind(&gcfg).unwrap_or_else(|e| panic!("binding the generator: {e:#}"));
        let cfg = GuestConfig {
            image: image(),
            dgram_dir: dir.path().to_path_buf(),
            append: append.to_string(),
            cpus,
            nics: 2,
            backend: Backend::Tap,
            queues,
            netns: Some(net.path()),
            mtu: mtus,
            extra_args,
            ..GuestConfig::default()
        };
        Rig::boot(&cfg, generator, Some(net), dir)
    }

    /// [`Rig::start`] booting `image` (e.g. a user's appliance) instead of the stock one.
    pub fn start_image(image: &Path, append: &str, gen: GenConfig) -> Rig {
        Rig::start_image_with(image, append, gen, Vec::new())
    }

    /// [`Rig::start_image`] with extra QEMU arguments (e.g. `-initrd BUNDLE`).
    pub fn start_image_with(
        image: &Path,
        append: &str,
        gen: GenConfig,
        extra_args: Vec<String>,
    ) -> Rig {
        Rig::start_configured(append, gen, |c| {
            c.image = image.to_path_buf();
            c.extra_args = extra_args;
        })
    }

    /// Starts with the default generator configuration (for tests that use raw ports only).
    pub fn start_raw(append: &str) -> Rig {
        Rig::start(append, gen_count(1, 64, false))
    }

    /// Runs the generator and returns its report (panics on error).
    pub fn run(&self) -> GenReport {
        self.gen
            .run()
            .unwrap_or_else(|e| panic!("generator: {e:#}\n{}", self.guest.tail_report()))
    }

    /// Host side of guest port `p`.
    pub fn port(&self, p: usize) -> RawPort {
        self.gen
            .raw_port(p)
            .unwrap_or_else(|e| panic!("raw port {p}: {e:#}"))
    }

    /// `stats` on the console (the line checked against the tools' schema:
    /// [`Rig::assert_schema`]).
    pub fn stats(&self) -> Stats {
        let s = self
            .guest
            .stats(STATS_TIMEOUT)
            .unwrap_or_else(|e| panic!("stats: {e:#}"));
        self.assert_schema();
        s
    }

    /// `quit`: asserts a clean exit and returns the final STATS (checked against the tools'
    /// schema: [`Rig::assert_schema`]).
    pub fn quit(&mut self) -> Stats {
        let (stats, exit) = self
            .guest
            .quit(QUIT_TIMEOUT)
            .unwrap_or_else(|e| panic!("quit: {e:#}"));
        assert_eq!(
            exit,
            GuestExit::Clean,
            "quit did not shut down cleanly ({exit})\n{}",
            self.guest.tail_report()
        );
        let s = stats
            .unwrap_or_else(|| panic!("no STATS line after quit\n{}", self.guest.tail_report()));
        self.assert_schema();
        s
    }

    /// `metrics` on the console: the `/metrics` body (without the management plane's
    /// counters), checked by `promtool check metrics` when promtool is on PATH.
    pub fn metrics(&self) -> String {
        let from = self.guest.line_count();
        self.guest.send_line("metrics").unwrap();
        self.guest
            .wait_for_line_from(from, |l| l.trim() == "# EOF", STATS_TIMEOUT)
            .unwrap_or_else(|e| panic!("metrics: {e:#}\n{}", self.tail()));
        let lines = self.guest.lines();
        let mut text = String::new();
        // The body starts at its first `# HELP` (the echo and log lines come before it).
        let body = lines[from.min(lines.len())..]
            .iter()
            .skip_while(|l| !l.starts_with("# HELP "))
            .take_while(|l| l.trim() != "# EOF");
        for l in body {
            text.push_str(l.trim_end());
            text.push('\n');
        }
        promtool_check(&text);
        text
    }

    /// The guest's last `STATS` line reads back exactly through the tools' schema
    /// ([`Stats::exact_mismatch`]): the guest and the tools agree on every key.
    pub fn assert_schema(&self) {
        let lines = self.guest.lines();
        let line = lines
            .iter()
            .rev()
            .find(|l| l.trim_start().starts_with("STATS "));
        if let Some(why) = line.and_then(|l| Stats::exact_mismatch(l)) {
            panic!("the guest's STATS and the tools' schema disagree: {why}\n{line:?}");
        }
    }

    /// Description of the guest's last output, for assertion messages.
    pub fn tail(&self) -> String {
        self.guest.tail_report()
    }
}

/// An ARP request (RFC 826) from the host behind port 0 (10.0.0.2, [`peer_mac`]`(0)`) for
/// `target`, broadcast, padded to 60 bytes.
pub fn arp_request(target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&peer_mac(0));
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&peer_mac(0));
    f.extend_from_slice(&[10, 0, 0, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f.resize(60, 0);
    f
}

/// The generator's run of `rig` (`frames` each way, both directions) and its `quit`: every
/// frame came back, none bad or duplicated, each port received and sent `frames` with no
/// drop, the final STATS is in `mode`, and no page leaked. `label` names the case in failures.
pub fn forwards_every_frame_and_quits_clean(rig: &mut Rig, label: &str, mode: &str, frames: u64) {
    let r = rig.run();
    let summary = format!(
        "{label}: sent {} received {} bad {} dup {} reordered {} loss {} warnings {:?}",
        r.sent, r.received, r.bad, r.duplicates, r.reordered, r.loss, r.warnings
    );
    eprintln!("{summary}");
    assert_eq!(r.sent, 2 * frames, "{summary}");
    assert_eq!(r.received, 2 * frames, "{summary}\n{}", rig.tail());
    assert_eq!((r.bad, r.duplicates), (0, 0), "{summary}");
    let s = rig.quit();
    assert_eq!(s.mode.as_str(), mode, "{s}");
    for p in 0..2 {
        assert_eq!(s.ports[p].rx, frames, "{label} port {p}: {s}");
        assert_eq!(s.ports[p].tx, frames, "{label} port {p}: {s}");
        assert_eq!(
            s.ports[p].drops,
            PortDrops::default(),
            "{label} port {p}: {s}"
        );
    }
    assert_no_leak(&s);
}

/// Boots a guest that is expected to fail before forwarding; returns how QEMU ended and all
/// serial lines. `nics` virtio-net ports, kernel command line `append`.
pub fn boot_failing(append: &str, nics: usize) -> (GuestExit, Vec<String>) {
    boot_failing_with(append, nics, 1, |_| Vec::new())
}

/// [`boot_failing`] with `-smp cpus` and extra QEMU arguments, made by `extra` from the test's
/// fresh directory (where it may write files the arguments name).
pub fn boot_failing_with(
    append: &str,
    nics: usize,
    cpus: u32,
    extra: impl FnOnce(&Path) -> Vec<String>,
) -> (GuestExit, Vec<String>) {
    let dir = TestDir::new();
    let cfg = GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        append: append.to_string(),
        nics,
        cpus,
        extra_args: extra(dir.path()),
        ..GuestConfig::default()
    };
    boot_failing_cfg(cfg, dir)
}

/// [`boot_failing`] with `memory` of guest RAM (QEMU `-m`, e.g. `"5M"`), two NICs.
pub fn boot_failing_memory(append: &str, memory: &str) -> (GuestExit, Vec<String>) {
    let dir = TestDir::new();
    let cfg = GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        append: append.to_string(),
        memory: memory.to_string(),
        ..GuestConfig::default()
    };
    boot_failing_cfg(cfg, dir)
}

/// [`boot_failing`] of the image at `image` (an appliance of one's own), two NICs.
pub fn boot_failing_image(image: &Path, append: &str) -> (GuestExit, Vec<String>) {
    boot_failing_image_with(image, append, Vec::new())
}

/// [`boot_failing_image`] with extra QEMU arguments (e.g. `-initrd BUNDLE`).
pub fn boot_failing_image_with(
    image: &Path,
    append: &str,
    extra_args: Vec<String>,
) -> (GuestExit, Vec<String>) {
    let dir = TestDir::new();
    let cfg = GuestConfig {
        image: image.to_path_buf(),
        dgram_dir: dir.path().to_path_buf(),
        append: append.to_string(),
        extra_args,
        ..GuestConfig::default()
    };
    boot_failing_cfg(cfg, dir)
}

/// [`boot_failing`] loaded by `boot` (e.g. [`Boot::Microvm`]) with `extra_args`.
pub fn boot_failing_on(
    boot: Boot,
    append: &str,
    nics: usize,
    extra_args: Vec<String>,
) -> (GuestExit, Vec<String>) {
    let dir = TestDir::new();
    let cfg = GuestConfig {
        image: image(),
        boot,
        dgram_dir: dir.path().to_path_buf(),
        append: append.to_string(),
        nics,
        extra_args,
        ..GuestConfig::default()
    };
    boot_failing_cfg(cfg, dir)
}

fn boot_failing_cfg(cfg: GuestConfig, dir: TestDir) -> (GuestExit, Vec<String>) {
    let (append, nics) = (cfg.append.as_str(), cfg.nics);
    // Host sides bound so QEMU's sends (if any) have somewhere to go.
    let _host: Vec<RawPort> = (0..nics)
        .map(|p| RawPort::bind(dir.path(), p).unwrap_or_else(|e| panic!("bind: {e:#}")))
        .collect();
    let mut guest = Guest::boot(&cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
    let exit = guest
        .wait_exit(FAIL_TIMEOUT)
        .unwrap_or_else(|e| panic!("guest (append {append:?}, {nics} NICs) did not exit: {e:#}"));
    let lines = guest.lines();
    (exit, lines)
}

// ---------------------------------------------------------------------------------------------
// STATS accessors

/// The `router` section (panics outside router mode). Every other counter is a field of
/// [`Stats`] (through `Deref` to [`netstack::stats::Stats`]): `s.forwarded`, `s.ports[p].rx`,
/// `s.ports[p].drops.too_big`, `s.pools[i].in_flight`, …
pub fn router(s: &Stats) -> &netstack::stats::RouterStats {
    s.router
        .as_ref()
        .unwrap_or_else(|| panic!("STATS has no router section: {s}"))
}

/// Asserts the leak check of a final STATS: every pool has nothing in flight and the allocator
/// is back to its boot-time free page count.
pub fn assert_no_leak(s: &Stats) {
    let n = s.pools.len();
    assert!(
        n >= 2 && n == s.ports.len(),
        "expected one page_pool per port: {s}"
    );
    for (i, p) in s.pools.iter().enumerate() {
        assert_eq!(p.in_flight, 0, "pool {i} pages in flight after quit: {s}");
    }
    // Router mode after live reloads: the boot FIB (taken before the boot count) was replaced
    // by FIBs of other sizes, so free + FIB pages now must equal free + FIB pages at boot (a
    // `PUT /routes` body kept as the routes file counts with the FIB).
    let (fib_now, fib_boot) = s.fib.map_or((0, 0), |f| {
        (
            f.pages + f.pages_retiring + f.routes_text_pages,
            f.pages_boot,
        )
    });
    // ACL mode after live replacements: the same for the rule sets (the boot's taken before
    // the boot count).
    let (acl_now, acl_boot) = s
        .acl
        .map_or((0, 0), |a| (a.pages + a.pages_retiring, a.pages_boot));
    assert_eq!(
        s.free_pages_now + fib_now + acl_now,
        s.free_pages_boot + fib_boot + acl_boot,
        "free pages (+ FIB and ACL pages) after quit differ from boot: {s}"
    );
}

// ---------------------------------------------------------------------------------------------
// Frames

/// `frame` as l2 mode emits it on port `out`: dst = `peer_dst`, src = MAC of port `out`, the
/// rest unchanged.
pub fn l2_rewrite(frame: &[u8], out: usize, peer_dst: [u8; 6]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[0..6].copy_from_slice(&peer_dst);
    f[6..12].copy_from_slice(&guest_mac(out));
    f
}

/// True if `got` equals `expected`, or `expected` is shorter than 60 bytes and `got` is
/// `expected` zero-padded to exactly 60 bytes (QEMU pads short frames).
pub fn same_modulo_padding(got: &[u8], expected: &[u8]) -> bool {
    if got == expected {
        return true;
    }
    expected.len() < 60
        && got.len() == 60
        && got[..expected.len()] == *expected
        && got[expected.len()..].iter().all(|&b| b == 0)
}

/// Short description of the first difference between two frames.
pub fn diff(got: &[u8], expected: &[u8]) -> String {
    let first = got.iter().zip(expected).position(|(a, b)| a != b).map_or(
        "none in the common prefix".to_string(),
        |i| {
            format!(
                "byte {i}: got {:#04x}, expected {:#04x}",
                got[i], expected[i]
            )
        },
    );
    format!(
        "got {} bytes, expected {}; first difference {first}; got[..16] = {:02x?}",
        got.len(),
        expected.len(),
        &got[..got.len().min(16)]
    )
}

/// An Ethernet frame of `len` bytes (no FCS) from `src` to `dst`, with ethertype 0x88b5 (local
/// experimental) and a recognisable payload derived from `tag`.
pub fn plain_frame(dst: [u8; 6], src: [u8; 6], len: usize, tag: u8) -> Vec<u8> {
    assert!(len >= 14);
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend((0..len - 14).map(|i| (i as u8).wrapping_mul(31).wrapping_add(tag) ^ (i >> 8) as u8));
    f
}

/// The 100,000-route table of the router tests (`--routes` file): 203.0.113.0/24
/// and 198.51.100.16/28 via port 1, then 99,998 pseudo-random routes outside 0/8, 10/8, 127/8,
/// those two /24s and 224/3.
pub fn write_routes_100k(file: &Path) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // 0.5% /28 (as mkroutes.py), a few /8 and /12, the rest /16–/24.
    let common = [24u32, 24, 24, 24, 24, 23, 22, 21, 20, 16, 16, 19, 18, 17];
    let pick = |r: u64| match r % 200 {
        0 => 28,
        1 => 8,
        2 | 3 => 12,
        k => common[k as usize % common.len()],
    };
    let mut seen = std::collections::HashSet::new();
    let mut text = String::new();
    // Two routes whose frames the test sends (203.0.113.0/24 and 198.51.100.16/28, both via
    // port 1), then 99,998 pseudo-random ones outside 0/8, 10/8, 127/8, 203.0.113/24,
    // 198.51.100/24 and 224/3.
    text.push_str("203.0.113.0/24,10.0.1.2\n198.51.100.16/28,10.0.1.2\n");
    seen.insert((0xcb00_7100u32, 24u32));
    seen.insert((0xc633_6410, 28));
    while seen.len() < 100_000 {
        let r = next();
        let l = pick(r);
        let a = ((r >> 32) as u32) & (u32::MAX << (32 - l));
        let top = a >> 24;
        if [0, 10, 127].contains(&top)
            || top >= 224
            || a >> 8 == 0xcb_0071
            || a >> 8 == 0xc6_3364
            || !seen.insert((a, l))
        {
            continue;
        }
        let gw = if seen.len() % 2 == 0 {
            "10.0.1.2"
        } else {
            "10.0.0.2"
        };
        let [b0, b1, b2, b3] = a.to_be_bytes();
        text.push_str(&format!("{b0}.{b1}.{b2}.{b3}/{l},{gw}\n"));
    }
    std::fs::write(file, text).unwrap();
}

/// Live route reload under traffic: starts the rig's generator, and after 500 ms sends
/// `routes reload` `reloads` times, each time waiting (at most `timeout`) for the FIB it
/// replaced to be retired, then ends the traffic (the generator's `seconds` is only its
/// ceiling). Prints each reload's `published` and `retired` lines and returns the generator's
/// report and how many reloads were retired while traffic still flowed (all of them unless the
/// ceiling came first).
///
/// # Panics
/// If a retirement does not come within `timeout` or the generator fails.
pub fn reload_while_forwarding(rig: &mut Rig, reloads: u64, timeout: Duration) -> (GenReport, u64) {
    let mut lines = Vec::new();
    let mut during = 0;
    let end = std::sync::atomic::AtomicBool::new(false);
    let r = std::thread::scope(|sc| {
        let h = sc.spawn(|| rig.gen.run_until(&end));
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..reloads {
            let from = rig.guest.line_count();
            rig.guest.send_line("routes reload").unwrap();
            let retired = format!("FIB generation {} retired", i + 1);
            let (_, l) = rig
                .guest
                .wait_for_line_from(from, |l| l.contains(&retired), timeout)
                .unwrap_or_else(|e| panic!("reload {i}: `{retired}`: {e:#}\n{}", rig.tail()));
            let published = rig
                .guest
                .lines()
                .into_iter()
                .skip(from)
                .find(|l| l.contains(&format!("FIB generation {} published", i + 2)))
                .unwrap_or_default();
            lines.push((published, l));
            if !h.is_finished() {
                during += 1;
            }
        }
        end.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap()
    })
    .unwrap_or_else(|e| panic!("generator: {e:#}"));
    for (p, l) in &lines {
        eprintln!("{p}\n{l}");
    }
    eprintln!("reloads during traffic: {during}; {r:?}");
    (r, during)
}

/// `want` frames from `port` (waiting up to [`FRAME_TIMEOUT`] for them), then whatever else
/// arrives within 300 ms of quiet: what a test that counts frames should see, extra ones
/// included.
pub fn receive_frames(port: &RawPort, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    while got.len() < want && Instant::now() < deadline {
        if let Some(f) = port.recv_timeout(Duration::from_millis(200)) {
            got.push(f);
        }
    }
    while let Some(f) = port.recv_timeout(Duration::from_millis(300)) {
        got.push(f);
    }
    got
}

/// Receive on host port `p` (its generator side), answering ARP requests for the host behind
/// it; returns the first frame that is not ARP, or `None` when none comes within `timeout`.
pub fn recv_answering_arp(port: &RawPort, p: usize, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = std::time::Instant::now() + timeout;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        let f = port.recv_timeout(left)?;
        match gen::arp_reply(&f, p) {
            Some(reply) => port.send(&reply).expect("sending the ARP reply"),
            None => return Some(f),
        }
    }
    None
}
