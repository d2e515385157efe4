//! `cargo xtask`: build, boot, gen, run, bench, soak, test, lint, fuzz, setup.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod fuzz;
mod lint;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use harness::bench_sim::SimMode;
use harness::qemu::{self, Accel, Backend, Boot, Echo, Guest, GuestConfig, GuestExit, Mtus};
use harness::tap::TapNet;
use harness::{gen, setup};
use lab::report;

#[derive(Parser)]
#[command(name = "xtask", about = "Gannet developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install missing prerequisites (Rust target x86_64-unknown-none, QEMU).
    Setup,
    /// Build the kernel image (target/x86_64-unknown-none/release/gannet).
    Build(BuildArgs),
    /// Build the kernel and a GRUB rescue ISO that boots it with multiboot2 under BIOS
    /// (SeaBIOS) and UEFI (OVMF): target/x86_64-unknown-none/release/gannet.iso by default.
    Iso(IsoArgs),
    /// Build and boot the image in QEMU with unix-datagram NICs; console on stdin/stdout.
    Boot(BootArgs),
    /// Traffic generator over QEMU's unix-datagram backend (no root needed).
    Gen(GenArgs),
    /// Build, boot, offer traffic port 0 -> port 1, print a results table, quit.
    Run(RunArgs),
    /// Like `run`, machine readable (JSON on stdout, guest console on stderr).
    Bench(BenchArgs),
    /// Every forwarding mode at full rate for --minutes in all, STATS every --stats-every
    /// seconds: no stall, counters monotonic, free pages stable, quit clean.
    Soak(SoakArgs),
    /// The fault image (built here) forwarding --frames per mode while faults are injected
    /// (fault=, and every page_pool starved for --dry-ms): every fault fired and counted, no
    /// frame corrupted, forwarding resumed, no page lost.
    Faults(FaultsArgs),
    /// Setup, build, then run the workspace tests against the built image.
    Test,
    /// rustfmt check, clippy (host and x86_64-unknown-none, -D warnings,
    /// undocumented unsafe blocks denied) and the module import-cycle check.
    Lint(LintArgs),
    /// Run each cargo-fuzz target (netstack/fuzz, drivers/fuzz) for a fixed time from its
    /// seed corpus; installs nightly and cargo-fuzz when missing.
    Fuzz(FuzzArgs),
}

#[derive(Args)]
struct IsoArgs {
    /// Kernel command line, baked into the ISO's grub.cfg (`multiboot2 /boot/gannet …`).
    #[arg(long, default_value = "")]
    cmdline: String,
    /// Routes file, put on the ISO as the first boot module (`module2`).
    #[arg(long)]
    routes: Option<PathBuf>,
    /// Put this image on the ISO instead of building (default: build, or $GANNET_IMAGE if set).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Output path (default: target/x86_64-unknown-none/release/gannet.iso).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Only this target (process_frame, cmdline, routes_file, used_ring, used_ring_big).
    #[arg(long)]
    only: Option<String>,
    /// libFuzzer's `-seed`: the same seed on an empty corpus tries the same inputs in the same
    /// order, so a run (CI's) can be replayed; 0 picks a fresh random seed each run (for a
    /// long exploring run by hand).
    #[arg(long, default_value_t = fuzz::CI_SEED)]
    seed: u64,
}

#[derive(Args, Clone)]
struct GuestArgs {
    /// Kernel command line.
    #[arg(long, default_value = "")]
    append: String,
    /// Accelerator (this workplace's nested KVM does not run guests: use tcg).
    #[arg(long, value_enum, default_value_t = Accel::Tcg)]
    accel: Accel,
    /// QEMU CPU model (`-cpu MODEL`, e.g. `max`); default: none passed, QEMU's `qemu64`.
    /// `bench --peer dpdk` defaults to `max` (testpmd needs SSE4.2) for every row.
    #[arg(long, value_name = "MODEL")]
    cpu: Option<String>,
    /// Deterministic instruction counting (-icount shift=0,sleep=off).
    #[arg(long)]
    icount: bool,
    /// How QEMU loads the kernel: `pvh` (`-kernel`, default), `iso-bios` (a GRUB ISO built for
    /// this run with the `--append` line, `-cdrom`, SeaBIOS) or `iso-uefi` (the same under
    /// OVMF). Boot, run, soak and the default bench take it.
    #[arg(long, value_enum, default_value_t = Boot::Pvh)]
    boot: Boot,
    /// Boot this image instead of building (default: build, or $GANNET_IMAGE if set).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Static routes file for router mode (one `PREFIX/LEN,GATEWAY` per line, `#` comments),
    /// handed to the guest as a boot module (QEMU `-initrd`).
    #[arg(long)]
    routes: Option<PathBuf>,
    /// Network backend: `dgram` (unix datagram sockets, one queue per port) or `tap`
    /// (multi-queue tap devices in a fresh network namespace, removed on exit; needs root and
    /// /dev/net/tun).
    #[arg(long, value_enum, default_value_t = Backend::Dgram)]
    backend: Backend,
    /// With `--backend tap`: virtio-net queue pairs per port (1..=4); the guest uses
    /// min(this, --cpus) of them (`queues=auto`), one per core.
    #[arg(long, default_value_t = 1)]
    queues: usize,
    /// Guest RAM (QEMU `-m`, e.g. 256M, 1G). Router mode sets 64 MiB aside for the FIB, so
    /// give it at least 256M.
    #[arg(long, default_value = "256M", value_parser = parse_memory)]
    memory: String,
    /// Write one pcap per port into this directory (`portN.pcap`: what the guest received and
    /// sent on port N, from QEMU's `filter-dump`), readable by tshark/Wireshark.
    #[arg(long)]
    capture: Option<PathBuf>,
    /// MTU of the guest's ports (68..=9000): QEMU `host_mtu=N` on every virtio-net-pci (the
    /// device offers VIRTIO_NET_F_MTU); with `--backend tap` also every tap device's MTU (and
    /// with `--hosts` the hosts' interfaces, unless `--host-mtu`). `9000,1500`: ports 2k and
    /// 2k+1 of every pair; one value per port also works. Default: no host_mtu (MTU not
    /// offered), taps at 1500.
    #[arg(long, value_name = "N[,M…]")]
    mtu: Option<Mtus>,
}

/// `--memory`: a number with an optional K/M/G suffix, as QEMU's `-m` takes it.
fn parse_memory(s: &str) -> std::result::Result<String, String> {
    let digits = s.trim_end_matches(['K', 'M', 'G', 'k', 'm', 'g']);
    let suffixes = s.len() - digits.len();
    match digits.parse::<u64>() {
        Ok(n) if n > 0 && suffixes <= 1 => Ok(s.to_string()),
        _ => Err(format!(
            "`{s}` is not a memory size like 256M or 1G (QEMU -m syntax)"
        )),
    }
}

#[derive(Args)]
struct BootArgs {
    /// Directory for the guest-i.sock / host-i.sock sockets (required with the dgram backend).
    #[arg(long)]
    dgram: Option<PathBuf>,
    #[command(flatten)]
    guest: GuestArgs,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    cpus: u32,
    /// Number of virtio-net ports.
    #[arg(long, default_value_t = 2)]
    nics: usize,
    /// With `--backend tap`: put a Linux host behind every port once the guest is up (each
    /// tap in a network namespace of its own, addressed from `ip0=`/`ip1=` in router mode,
    /// 10.10.0.N/24 otherwise); prints how to enter them; removed on exit.
    #[arg(long)]
    hosts: bool,
    /// With `--hosts`: the MTU of the hosts' interfaces (68..=9000; one value, or one per
    /// port as `--mtu`), independently of the guest's ports (`--mtu`). Default: `--mtu`'s,
    /// else 1500.
    #[arg(long, value_name = "N[,M…]", requires = "hosts")]
    host_mtu: Option<Mtus>,
}

#[derive(Args)]
struct GenArgs {
    /// Directory of the guest-i.sock / host-i.sock sockets (dgram backend).
    #[arg(long, required_unless_present = "netns", conflicts_with = "netns")]
    dgram: Option<PathBuf>,
    /// Tap backend: the network namespace `boot --backend tap` printed (`gnt-PID-N`); the
    /// generator uses AF_PACKET sockets on its tap devices gtap0/gtap1 (root). Use --flows 16 or
    /// so: the tun driver steers flows, not frames, onto the queues.
    #[arg(long)]
    netns: Option<String>,
    /// Frame size on the wire, FCS included (the socket carries size-4 bytes).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Sending duration.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Send exactly N frames per direction instead of running for --seconds.
    #[arg(long)]
    count: Option<u64>,
    /// Number of UDP flows.
    #[arg(long, default_value_t = 1)]
    flows: u16,
    /// Maximum outstanding frames per direction.
    #[arg(long, default_value_t = 64)]
    window: u64,
    /// Replay this capture into port 0 instead of synthetic frames.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Also send into port 1 and receive from port 0.
    #[arg(long)]
    bidir: bool,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args, Clone)]
struct TrafficArgs {
    #[command(flatten)]
    guest: GuestArgs,
    /// Number of vCPUs; with `--nics 2P` the guest forwards one port pair per core.
    #[arg(long, default_value_t = 1)]
    cpus: u32,
    /// Number of virtio-net ports (even): `2P` ports give P pairs, each with its generator.
    #[arg(long, default_value_t = 2)]
    nics: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Frame size on the wire, FCS included.
    #[arg(long, default_value_t = 64)]
    size: usize,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    traffic: TrafficArgs,
    /// With `--backend tap` (as root): Linux hosts behind the ports (as `boot --hosts`) send
    /// the traffic instead of the generator: `iperf3 -u -b 0` from the port-0 host to the
    /// port-1 host for `--seconds`, datagrams of `--size` on the wire; prints where every
    /// datagram went.
    #[arg(long)]
    hosts: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// What to benchmark: omitted, the guest (build, boot, traffic, JSON); `mm`, the page
    /// allocator micro-benchmark on the host (table, JSON, docs/mm-bench.png); `pool`, the
    /// page_pool benchmark; `sim`, the deterministic datapath benchmark on simulated devices;
    /// `datapath`, its host twin under callgrind.
    #[arg(value_enum)]
    target: Option<BenchTarget>,
    #[command(flatten)]
    traffic: TrafficArgs,
    /// Also write the JSON record to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also measure peer guests side by side, comma-separated: `linux` (Debian kernel +
    /// busybox: bridge, IPv4 forwarding), `dpdk` (Debian's dpdk-testpmd, io and mac).
    #[arg(long, value_enum, value_delimiter = ',')]
    peer: Vec<Peer>,
    /// Frame sizes for a sweep (with --peer): e.g. 64,128,256,512,1024,1518,9018 (each
    /// 64..=9018; over 1518 give --mtu too); JSON {"sweep": […]}.
    #[arg(long)]
    sizes: Option<String>,
    /// Generator window with --peer (maximum outstanding frames; default 64) or --burst-in
    /// (per direction; default 256, at least 224).
    #[arg(long)]
    window: Option<u64>,
    /// Gannet io/l2/router on QEMU's device with the guest's bench-only burst-in gate
    /// (`burstin=on`: RX left alone until a port's used ring holds 224 entries or 10 ms
    /// passed, then drained in bursts of 32; only drain iterations are busy), generator both
    /// ways; instructions per packet (`--icount`) and frames per busy iteration per mode.
    #[arg(long, conflicts_with_all = ["peer", "sizes"])]
    burst_in: bool,
    /// With --burst-in: the generator sends into port 0 only (port 1's RX stays empty, as in
    /// `bench sim`, whose device delivers on port 0 only).
    #[arg(long, requires = "burst_in")]
    one_way: bool,
    /// `bench sim`: forwarding modes to run, comma-separated (l2, io, router).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SimMode::L2, SimMode::Router])]
    modes: Vec<SimMode>,
    /// `bench sim`: frames the simulated device delivers per poll iteration, comma-separated
    /// (each 1..=256).
    #[arg(long = "k", default_value = "1,4,32")]
    sim_k: String,
    /// `bench sim`: measured poll iterations per run (`sim_iters=`; default the guest's 1024).
    #[arg(long)]
    iters: Option<u32>,
    /// `bench sim`: run every (mode, K) twice and fail unless both runs give the same figures.
    #[arg(long)]
    twice: bool,
    /// `bench tlb`: torture batches per `tlb=batch` run (`tlbtest=`).
    #[arg(long, default_value_t = 20_000)]
    batches: u64,
    /// `bench tlb`: batches per `tlb=immediate` run (one shootdown per page is slow under TCG).
    #[arg(long, default_value_t = 320)]
    immediate_batches: u64,
    /// `bench tlb`: vCPU counts to run, comma-separated (each at least 2).
    #[arg(long, default_value = "2,4")]
    tlb_cpus: String,
    /// `bench tlb`: runs of the negative control (`tlbtest_skip=on`) per vCPU count.
    #[arg(long, default_value_t = 10)]
    control_runs: u32,
    /// `bench datapath`: also run `bench sim` for the same modes and K now and set its figures
    /// beside the host's (default: the guest figures recorded in BENCHMARKS.md).
    #[arg(long)]
    with_guest: bool,
    /// `bench boot`: boots per machine type (median, min and max of them).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// `bench boot`: machine types, comma-separated: `q35` (`-kernel`, PVH), `iso-bios` (GRUB
    /// ISO under SeaBIOS), `iso-uefi` (GRUB ISO under OVMF).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [harness::bench_boot::Machine::Q35])]
    machines: Vec<harness::bench_boot::Machine>,
}

#[derive(Args)]
struct SoakArgs {
    #[command(flatten)]
    guest: GuestArgs,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    cpus: u32,
    /// Minutes of traffic in all, shared equally by the modes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Forwarding modes, comma-separated, in order (io, l2, router).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SimMode::Io, SimMode::L2, SimMode::Router])]
    modes: Vec<SimMode>,
    /// Seconds between two STATS samples.
    #[arg(long, default_value_t = harness::soak::DEFAULT_STATS_EVERY.as_secs_f64())]
    stats_every: f64,
    /// Generator window: frames outstanding per direction (full rate is as fast as it allows).
    #[arg(long, default_value_t = gen::GenConfig::default().window)]
    window: u64,
    /// Frame size on the wire, FCS included.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Stall threshold: the longest gap between frames coming back that passes, ms.
    #[arg(long, default_value_t = harness::soak::DEFAULT_MAX_GAP_MS)]
    max_gap_ms: f64,
    /// How far a sample's free pages may be from the first sample's, pages.
    #[arg(long, default_value_t = harness::soak::DEFAULT_FREE_PAGES_TOLERANCE)]
    free_pages_tolerance: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct BuildArgs {
    /// Build the fault image instead (cargo feature `fault-inject`, into
    /// target/fault-inject/x86_64-unknown-none/release/gannet): the kernel command line's
    /// `fault=` and the console's `fault` command inject faults. Never for production.
    #[arg(long)]
    fault_inject: bool,
}

#[derive(Args)]
struct FaultsArgs {
    #[command(flatten)]
    guest: GuestArgs,
    /// Frames per mode, both directions together.
    #[arg(long, default_value_t = harness::faults::DEFAULT_FRAMES)]
    frames: u64,
    /// Forwarding modes, comma-separated, in order (io, l2, router).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SimMode::Io, SimMode::L2, SimMode::Router])]
    modes: Vec<SimMode>,
    /// Every page_pool starved for this long once a third of the frames were forwarded, ms
    /// (0: not at all).
    #[arg(long, default_value_t = harness::faults::DEFAULT_DRY_MS)]
    dry_ms: u64,
    /// Fault rates instead of the defaults: `NAME:N,…` as the kernel's `fault=` key (once
    /// every N opportunities).
    #[arg(long)]
    rates: Option<String>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct LintArgs {
    /// Run only this step (repeatable); default: all of them.
    #[arg(long, value_enum)]
    only: Vec<lint::Step>,
}

/// Peer guests for `cargo xtask bench --peer`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Peer {
    /// Debian's linux-image-amd64 kernel with a busybox initramfs (bridge and IPv4 forwarding).
    Linux,
    /// Debian's dpdk-testpmd on that kernel, ports bound to uio_pci_generic (`io`, `mac`).
    Dpdk,
}

/// Host micro-benchmarks selectable with `cargo xtask bench TARGET`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchTarget {
    /// mm page allocator: cycles per page (pcp single/bulk/list vs buddy_system_allocator).
    Mm,
    /// page_pool: host cycles per page (recycle fast/ring, empty-pool refill) + guest bulk vs
    /// single refill (`--seconds` of traffic per guest run, `--image`).
    Pool,
    /// The deterministic datapath benchmark: guest instructions per packet on simulated
    /// virtio-net devices (`sim=K`), `-smp 1 -icount shift=0,sleep=off`, for `--modes` and `--k`.
    Sim,
    /// The host twin of `sim`: the same steps on the dataplane's host rig under callgrind
    /// (host instructions per packet), beside the guest figure (`--with-guest`: a fresh run).
    Datapath,
    /// The TLB shootdown torture test (`tlbtest=`): `tlb=batch` against `tlb=immediate` side
    /// by side on `--tlb-cpus` vCPUs, and `--control-runs` of the negative control.
    Tlb,
    /// Boot time: QEMU spawn → first guest line → ready on the host clock and the guest's own
    /// phases (PVH entry → ready on its TSC), `--runs` boots per `--machines` type.
    Boot,
}

fn image_for(g: &GuestArgs) -> Result<PathBuf> {
    match &g.image {
        Some(p) => Ok(p.clone()),
        None => qemu::build_image(),
    }
}

fn guest_config(g: &GuestArgs, image: PathBuf, dir: &Path, echo: Echo) -> Result<GuestConfig> {
    let mut extra_args = Vec::new();
    if let Some(r) = &g.routes {
        if !r.is_file() {
            bail!("--routes {}: no such file", r.display());
        }
        extra_args.push("-initrd".to_string());
        extra_args.push(r.display().to_string());
    }
    if g.backend == Backend::Dgram && g.queues != 1 {
        bail!(
            "--queues {} needs --backend tap (the dgram backend has one queue per port)",
            g.queues
        );
    }
    Ok(GuestConfig {
        image,
        boot: g.boot,
        dgram_dir: dir.to_path_buf(),
        append: g.append.clone(),
        accel: g.accel,
        cpu: g.cpu.clone(),
        icount: g.icount,
        echo,
        extra_args,
        backend: g.backend,
        queues: g.queues,
        memory: g.memory.clone(),
        capture: g.capture.clone(),
        mtu: g.mtu.clone(),
        ..Default::default()
    })
}

/// With `--backend tap`: the network namespace and its `nics` tap devices (deleted when the
/// returned value is dropped); points `cfg` at it. `None` for the dgram backend.
fn tap_net(cfg: &mut GuestConfig, nics: usize) -> Result<Option<TapNet>> {
    if cfg.backend != Backend::Tap {
        return Ok(None);
    }
    let net = TapNet::create_with_mtu(nics, cfg.queues, cfg.mtu.as_ref())
        .context("setting up the tap backend")?;
    eprintln!(
        "xtask: tap backend: namespace {} with {} multi-queue tap device(s), {} queue pair(s) each{}",
        net.name(),
        nics,
        cfg.queues,
        cfg.mtu
            .as_ref()
            .map_or(String::new(), |m| format!(", MTU {m}"))
    );
    cfg.netns = Some(net.path());
    Ok(Some(net))
}

fn announce_accel(accel: Accel, icount: bool, cpu: Option<&str>) {
    let what = match accel {
        Accel::Tcg => "tcg (software emulation)",
        Accel::Kvm => "kvm (hardware virtualisation)",
    };
    let ic = if icount {
        ", icount shift=0,sleep=off"
    } else {
        ""
    };
    let cpu = cpu.map_or(String::new(), |c| format!(", -cpu {c}"));
    eprintln!("xtask: accelerator: {what}{ic}{cpu}");
}

/// UDP flows the generator offers on the tap backend (the tun driver spreads flows, not
/// frames, over the queues).
const TAP_FLOWS: u16 = 16;

fn cmd_build(a: BuildArgs) -> Result<()> {
    setup::ensure()?;
    let image = if a.fault_inject {
        qemu::build_fault_image()?
    } else {
        qemu::build_image()?
    };
    eprintln!("xtask: image {}", image.display());
    Ok(())
}

/// `iso`: build the image (unless `--image`) and the GRUB ISO.
fn cmd_iso(a: IsoArgs) -> Result<()> {
    let image = match &a.image {
        Some(p) => p.clone(),
        None => {
            setup::ensure_target()?;
            qemu::build_image()?
        }
    };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| qemu::iso_path(&qemu::workspace_root()));
    if a.cmdline.len() > qemu::MAX_CMDLINE {
        return Err(qemu::CmdlineTooLong {
            len: a.cmdline.len(),
        }
        .into());
    }
    harness::iso::build(&image, &a.cmdline, a.routes.as_deref(), &out)?;
    eprintln!(
        "xtask: ISO {} (kernel {}, command line {:?}); boot it with `qemu-system-x86_64 -machine q35 -serial stdio -cdrom {}` (SeaBIOS) or add `-bios {}` (UEFI)",
        out.display(),
        image.display(),
        a.cmdline,
        out.display(),
        setup::OVMF_FD
    );
    Ok(())
}

fn cmd_boot(a: BootArgs) -> Result<()> {
    let dir = match (&a.dgram, a.guest.backend) {
        (Some(d), _) => std::path::absolute(d)?,
        (None, Backend::Dgram) => bail!("--dgram DIR is required with the dgram backend"),
        (None, Backend::Tap) => std::env::temp_dir(),
    };
    // Fail on a too-long socket path before anything else happens.
    if a.guest.backend == Backend::Dgram {
        gen::check_socket_paths(&dir, a.nics)?;
    }
    setup::ensure()?;
    let image = image_for(&a.guest)?;
    let mut cfg = guest_config(&a.guest, image, &dir, Echo::Stdout)?;
    cfg.cpus = a.cpus;
    cfg.nics = a.nics;
    if a.hosts && a.guest.backend != Backend::Tap {
        bail!("--hosts needs --backend tap (the hosts sit on the tap devices)");
    }
    let host_plan = if a.hosts {
        let host_mtu = a.host_mtu.as_ref().or(a.guest.mtu.as_ref());
        Some(harness::hosts::plan_with_mtu(
            &a.guest.append,
            a.nics,
            host_mtu,
        )?)
    } else {
        None
    };
    let net = tap_net(&mut cfg, a.nics)?;
    let mut hosts: Option<harness::hosts::Hosts> = None;
    qemu::check_config(&cfg)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let int = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, int.clone())?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, term.clone())?;
    }

    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    let console = guest.console();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if console.send_line(&line).is_err() {
                break;
            }
        }
    });

    let start = Instant::now();
    let mut quit_sent: Option<Instant> = None;
    let mut ready = false;
    let exit = loop {
        if term.load(Ordering::SeqCst) {
            guest.kill();
            bail!("terminated by signal; QEMU killed\n{}", guest.tail_report());
        }
        if int.swap(false, Ordering::SeqCst) {
            if quit_sent.is_some() {
                guest.kill();
                bail!("interrupted twice; QEMU killed\n{}", guest.tail_report());
            }
            eprintln!("xtask: SIGINT: sending `quit` to the guest (again to kill QEMU)");
            let _ = guest.send_line("quit");
            quit_sent = Some(Instant::now());
        }
        if let Some(e) = guest.try_wait()? {
            break e;
        }
        if !ready {
            let found = guest
                .poll_line_from(
                    0,
                    |l| l.contains(qemu::READY_MARKER),
                    Duration::from_millis(100),
                )
                .unwrap_or(None);
            if found.is_some() {
                ready = true;
                if let (Some(plan), Some(net)) = (&host_plan, &net) {
                    let h = harness::hosts::Hosts::create(net, plan)?;
                    eprint!("{}", h.describe());
                    hosts = Some(h);
                }
                println!("READY");
            } else if start.elapsed() >= qemu::READY_TIMEOUT && quit_sent.is_none() {
                guest.kill();
                bail!(
                    "no `{}` line within {:?}\n{}",
                    qemu::READY_MARKER,
                    qemu::READY_TIMEOUT,
                    guest.tail_report()
                );
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        if quit_sent.is_some_and(|t| t.elapsed() >= Duration::from_secs(30)) {
            guest.kill();
            bail!(
                "guest did not exit within 30 s of `quit`; QEMU killed\n{}",
                guest.tail_report()
            );
        }
    };
    // The host namespaces go before the QEMU namespace.
    drop(hosts);
    drop(net);
    finish(&guest, exit)
}

fn finish(guest: &Guest, exit: GuestExit) -> Result<()> {
    if exit.is_clean() {
        eprintln!("xtask: {exit}");
        Ok(())
    } else {
        bail!("{exit}\n{}", guest.tail_report())
    }
}

fn cmd_gen(a: GenArgs) -> Result<()> {
    let cfg = gen::GenConfig {
        dir: a.dgram.unwrap_or_default(),
        netns: a
            .netns
            .map(|n| std::path::Path::new(harness::tap::NETNS_DIR).join(n)),
        size: a.size,
        seconds: a.seconds,
        count: a.count,
        flows: a.flows,
        window: a.window,
        pcap: a.pcap,
        bidir: a.bidir,
        ..Default::default()
    };
    let r = gen::run(&cfg)?;
    print!("{}", report::gen_table(&r));
    if let Some(p) = a.json {
        report::write_json(&p, &r)?;
    }
    Ok(())
}

/// build → bind generator → boot → ready → traffic → quit. Returns the record and how it ended.
fn traffic(
    a: &TrafficArgs,
    echo: Echo,
) -> Result<(report::BenchResult, gen::GenReport, Guest, GuestExit)> {
    setup::ensure()?;
    let image = image_for(&a.guest)?;
    let tmp = tempfile::Builder::new()
        .prefix("gannet-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    if a.nics < 2 || !a.nics.is_multiple_of(2) {
        bail!(
            "--nics {}: give an even number of ports, at least 2",
            a.nics
        );
    }
    let pairs = a.nics / 2;
    let mut cfg = guest_config(&a.guest, image, tmp.path(), echo)?;
    cfg.cpus = a.cpus;
    cfg.nics = a.nics;
    let net = tap_net(&mut cfg, a.nics)?;
    // The host side binds first: QEMU's frames to an unbound path are lost.
    let generators = (0..pairs)
        .map(|k| {
            gen::Generator::bind(&gen::GenConfig {
                dir: tmp.path().to_path_buf(),
                size: a.size,
                seconds: a.seconds,
                base_port: 2 * k,
                netns: cfg.netns.clone(),
                // The tun driver steers frames onto queues by flow hash: offer 16 flows.
                flows: if net.is_some() { TAP_FLOWS } else { 1 },
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>>>()?;
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    // One generator per port pair: each pair must be one the guest forwards.
    if let Some(n) = guest_port_pairs(&guest.lines()) {
        if n < pairs {
            let _ = guest.quit(Duration::from_secs(30));
            bail!(
                "the guest forwards {n} of the {pairs} port pairs (one pair per CPU, router mode \
                 uses one): give --cpus {pairs} or --nics {}",
                2 * n
            );
        }
    }
    eprintln!(
        "xtask: guest ready ({} vCPU, {} port pair(s)); offering {} B frames port 2k -> port 2k+1 for {} s",
        a.cpus, pairs, a.size, a.seconds
    );
    let reports: Vec<gen::GenReport> = std::thread::scope(|s| {
        let handles: Vec<_> = generators.iter().map(|g| s.spawn(|| g.run())).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("generator thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let r = combine(&reports);
    let (stats, exit) = guest.quit(Duration::from_secs(30))?;
    let queues = stats.as_ref().map_or(1, |s| s.queues) as usize;
    let cores = if queues > 1 { queues } else { pairs };
    if stats.is_none() {
        eprintln!("xtask: warning: no final STATS line from the guest");
    }
    let stats = stats.as_ref();
    let b = report::BenchResult {
        frame_size: a.size,
        seconds: r.seconds,
        offered_pps: r.offered_pps,
        forwarded_pps: r.received_pps,
        loss: r.loss,
        guest_cycles_per_packet: stats.and_then(|s| s.cycles_per_packet()),
        frames_per_busy_iter: stats
            .and_then(|s| (s.busy_iters > 0).then(|| s.forwarded as f64 / s.busy_iters as f64)),
        kicks_per_packet: stats.and_then(|s| s.kicks_per_packet()),
        accel: cfg.accel.name().to_string(),
        mode: stats.map(|s| s.mode.as_str().to_string()),
        icount: cfg.icount,
        per_core: (cores > 1).then(|| {
            (0..cores)
                .map(|cpu| {
                    let c = stats.and_then(|s| s.per_cpu.get(cpu));
                    let fwd = c.map(|c| c.forwarded as f64);
                    let cycles = c.and_then(|c| {
                        (c.forwarded > 0).then(|| c.busy_cycles as f64 / c.forwarded as f64)
                    });
                    report::PerCore {
                        cpu,
                        // One generator per port pair; with multi-queue one generator feeds
                        // every core, and each core's share is its forwarded count.
                        forwarded_pps: match reports.get(cpu) {
                            Some(rep) if queues == 1 => rep.received_pps,
                            _ => fwd.unwrap_or(0.0) / r.seconds.max(1e-9),
                        },
                        guest_cycles_per_packet: cycles,
                        frames_per_busy_iter: c.and_then(|c| {
                            (c.busy_iters > 0).then(|| c.forwarded as f64 / c.busy_iters as f64)
                        }),
                        tlb: c.map(|c| c.tlb),
                    }
                })
                .collect()
        }),
    };
    // Keep the temp dir (and the tap namespace) alive until QEMU is gone.
    drop(generators);
    drop(tmp);
    drop(net);
    Ok((b, r, guest, exit))
}

/// The number of port pairs the guest says it forwards (`forwarding N port pair(s) …`).
fn guest_port_pairs(lines: &[String]) -> Option<usize> {
    lines.iter().find_map(|l| {
        let rest = &l[l.find("forwarding ")? + "forwarding ".len()..];
        rest[..rest.find(" port pair")?].trim().parse().ok()
    })
}

/// The reports of several generators (one per port pair) as one: counts and rates add up,
/// loss is recomputed, the time is the longest.
fn combine(reports: &[gen::GenReport]) -> gen::GenReport {
    let mut r = reports[0].clone();
    for x in &reports[1..] {
        r.sent += x.sent;
        r.received += x.received;
        r.duplicates += x.duplicates;
        r.reordered += x.reordered;
        r.bad += x.bad;
        r.offered_pps += x.offered_pps;
        r.received_pps += x.received_pps;
        r.seconds = r.seconds.max(x.seconds);
        r.longest_gap_ms = r.longest_gap_ms.max(x.longest_gap_ms);
        r.stray += x.stray;
        r.directions.extend(x.directions.iter().cloned());
        r.warnings.extend(x.warnings.iter().cloned());
    }
    r.loss = if r.sent > 0 {
        1.0 - r.received.min(r.sent) as f64 / r.sent as f64
    } else {
        0.0
    };
    r
}

fn cmd_run(a: RunArgs) -> Result<()> {
    if a.hosts {
        return cmd_run_hosts(&a.traffic);
    }
    let a = a.traffic;
    let (b, r, guest, exit) = traffic(&a, Echo::Stdout)?;
    println!("generator:");
    print!("{}", report::gen_table(&r));
    println!("result:");
    print!("{}", report::bench_table(&b));
    if b.loss > 0.0 {
        println!(
            "LOSS: {:.2}% ({} of {} frames not forwarded)",
            b.loss * 100.0,
            r.sent - r.received.min(r.sent),
            r.sent
        );
    }
    finish(&guest, exit)?;
    if r.sent > 0 && r.received == 0 {
        bail!(
            "no frame was forwarded (see the guest's drop counters above: `too_big` counts \
             frames over {} bytes, frames larger than a port's big RX buffers (over its MTU) \
             and, with xcore=on, every frame of several pages; `runt`, `bad_desc` and \
             `tx_ring_full` say the rest)",
            MAX_GUEST_FRAME
        );
    }
    Ok(())
}

/// `run --hosts`: boot on the tap backend with a Linux host behind each port, `iperf3` UDP at
/// full rate from the port-0 host to the port-1 host, then `quit`; prints the datagrams' fate
/// (`harness::hosts::UdpRun`) beside the guest's counters.
fn cmd_run_hosts(a: &TrafficArgs) -> Result<()> {
    if a.guest.backend != Backend::Tap {
        bail!("--hosts needs --backend tap (the hosts sit on the tap devices)");
    }
    // Ethernet 14 + IPv4 20 + UDP 8 + FCS 4.
    let payload = a
        .size
        .checked_sub(46)
        .filter(|&p| p >= 1)
        .with_context(|| format!("--size {} leaves no UDP payload (at least 47)", a.size))?;
    setup::ensure()?;
    setup::ensure_host_tools()?;
    let image = image_for(&a.guest)?;
    let dir = std::env::temp_dir();
    let mut cfg = guest_config(&a.guest, image, &dir, Echo::Stdout)?;
    cfg.cpus = a.cpus;
    cfg.nics = 2;
    let plan = harness::hosts::plan_with_mtu(&a.guest.append, 2, a.guest.mtu.as_ref())?;
    let net = tap_net(&mut cfg, 2)?.context("the tap backend's namespace")?;
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    let hosts = harness::hosts::Hosts::create(&net, &plan)?;
    eprint!("{}", hosts.describe());
    let dst = plan[1].addr.to_string();
    // Resolve the neighbours first, so the run starts routed.
    let _ = hosts.exec(0, &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "3", &dst])?;
    let secs = a.seconds.ceil().max(1.0) as u32;
    let u = hosts.iperf3_udp(0, 1, payload, secs)?;
    // As `boot`: the guest gets 30 s to run its quit phases and print its last STATS.
    let (stats, exit) = guest.quit(Duration::from_secs(30))?;
    drop(hosts);
    drop(net);
    let accel = match cfg.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    println!(
        "iperf3 UDP, {} s, {}-byte frames, host 0 -> host 1 ({accel}):",
        u.seconds, a.size
    );
    println!(
        "  sent {} ({:.0}/s); arrived at host 1 {} ({:.0}/s, server read {})",
        u.sent,
        u.sent as f64 / f64::from(u.seconds),
        u.arrived,
        u.arrived as f64 / f64::from(u.seconds),
        u.read
    );
    println!(
        "  dropped: sender qdisc {}, sender tap (QEMU did not read in time) {}, receiver tap {}, receiver socket full {}",
        u.sender_qdisc, u.sender_tap, u.receiver_tap, u.receiver_socket
    );
    if let Some(s) = &stats {
        let port: u64 = s.ports.iter().map(|p| p.drops.total()).sum();
        let router = s.router.as_ref().map_or(0, |r| r.drops.total());
        println!(
            "  guest: forwarded {}, drops: ports {port}, router {router}; unaccounted {}",
            s.forwarded,
            u.unaccounted(port + router)
        );
    }
    finish(&guest, exit)
}

/// The largest frame the guest forwards (bytes, no FCS): four 4 KiB RX pages (the driver's
/// `MAX_FRAME_BUFFERS`) minus the 12-byte virtio-net header; larger frames are dropped as
/// `too_big`.
const MAX_GUEST_FRAME: usize = 4 * 4096 - 12;

fn cmd_bench(a: BenchArgs) -> Result<()> {
    if a.target.is_some() && a.traffic.guest.mtu.is_some() {
        bail!("--mtu sets the MTU of the guest's NICs: bench mm/pool/sim/datapath/tlb boot none (or their own); drop --mtu");
    }
    if a.target.is_some() && a.traffic.guest.boot != Boot::Pvh {
        bail!("--boot: bench mm/pool/sim/datapath/tlb boot their own guests with -kernel; bench boot takes --machines q35,iso-bios,iso-uefi");
    }
    if let Some(BenchTarget::Mm) = a.target {
        return lab::bench_mm::run(a.json.as_deref()).map(drop);
    }
    if let Some(BenchTarget::Pool) = a.target {
        let g = &a.traffic;
        if g.guest.cpu.is_some() {
            bail!("bench pool boots its guests without -cpu: drop --cpu");
        }
        return lab::bench_pool::run(a.json.as_deref(), g.guest.image.clone(), g.seconds).map(drop);
    }
    if let Some(BenchTarget::Sim) = a.target {
        return cmd_bench_sim(a);
    }
    if let Some(BenchTarget::Datapath) = a.target {
        return cmd_bench_datapath(a);
    }
    if let Some(BenchTarget::Tlb) = a.target {
        return cmd_bench_tlb(a);
    }
    if let Some(BenchTarget::Boot) = a.target {
        return cmd_bench_boot(a);
    }
    if a.burst_in {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --burst-in boots every row with -kernel; drop --boot");
        }
        return cmd_bench_burst_in(a);
    }
    if !a.peer.is_empty() || a.sizes.is_some() {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --peer/--sizes boots every row with -kernel; drop --boot");
        }
        return cmd_bench_peer(a);
    }
    let (b, r, guest, exit) = traffic(&a.traffic, Echo::Stderr)?;
    eprint!("{}", report::gen_table(&r));
    eprint!("{}", report::bench_table(&b));
    println!("{}", serde_json::to_string_pretty(&b)?);
    if let Some(p) = a.json {
        report::write_json(&p, &b)?;
    }
    finish(&guest, exit)
}

/// `bench sim`: boot once per (mode, K) on simulated devices under icount, print the table
/// (and `--json`). With `--twice`, every run is repeated and must give identical figures.
fn cmd_bench_sim(a: BenchArgs) -> Result<()> {
    use harness::bench_sim;
    let g = &a.traffic.guest;
    if g.accel != Accel::Tcg {
        bail!("bench sim counts instructions with -icount, which needs --accel tcg");
    }
    if g.backend != Backend::Dgram || g.queues != 1 {
        bail!("bench sim has no NIC: drop --backend/--queues");
    }
    if let Some(r) = &g.routes {
        let text =
            std::fs::read_to_string(r).with_context(|| format!("--routes {}", r.display()))?;
        let n = bench_sim::check_routes_file(&text, &g.append)
            .with_context(|| format!("--routes {}", r.display()))?;
        eprintln!(
            "xtask: router runs boot with {} ({n} routes) as the routes file",
            r.display()
        );
    }
    let size = u16::try_from(a.traffic.size)
        .ok()
        .filter(|s| (64..=9018).contains(s))
        .ok_or_else(|| anyhow!("bench sim --size {}: not in 64..=9018", a.traffic.size))?;
    setup::ensure()?;
    let cfg = bench_sim::SimBenchConfig {
        image: image_for(g)?,
        modes: a.modes.clone(),
        ks: bench_sim::parse_ks(&a.sim_k)?,
        iters: a.iters,
        append: g.append.clone(),
        accel: g.accel,
        cpu: g.cpu.clone(),
        memory: g.memory.clone(),
        echo: Echo::Off,
        routes: g.routes.clone(),
        size,
    };
    announce_accel(cfg.accel, true, cfg.cpu.as_deref());
    let progress = |r: &bench_sim::SimRecord| {
        eprintln!(
            "xtask: {} size {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration over {} packets",
            r.mode, r.size, r.k, r.instructions_per_packet, r.frames_per_busy_iter, r.packets
        )
    };
    let records = bench_sim::run(&cfg, progress)?;
    if a.twice {
        let again = bench_sim::run(&cfg, progress)?;
        for (x, y) in records.iter().zip(&again) {
            if x != y {
                bail!("not deterministic: {x:?} then {y:?}");
            }
        }
        eprintln!("xtask: second pass identical to the first");
    }
    print!("{}", bench_sim::table(&records));
    if let Some(p) = &a.json {
        let routes_file = cfg.routes.as_ref().map(|r| r.display().to_string());
        let doc = bench_sim::SimBenchJson {
            bench: "sim",
            append: &cfg.append,
            routes_file: routes_file.as_deref(),
            records: &records,
        };
        report::write_json(p, &doc)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    Ok(())
}

/// `bench boot`: `--runs` boots per machine type, a table of each (median, min, max).
fn cmd_bench_boot(a: BenchArgs) -> Result<()> {
    use harness::bench_boot::{self as bb, BootBenchConfig};
    let g = &a.traffic.guest;
    if g.cpu.is_some() || g.routes.is_some() || g.backend != Backend::Dgram {
        bail!("bench boot boots the default guest: drop --cpu/--routes/--backend");
    }
    if a.machines.iter().any(|m| m.boot().is_iso()) {
        harness::setup::ensure_iso_tools()?;
    }
    if a.machines.contains(&bb::Machine::IsoUefi) {
        harness::setup::ensure_ovmf()?;
    }
    setup::ensure()?;
    let image = image_for(g)?;
    announce_accel(g.accel, g.icount, None);
    let cfg = BootBenchConfig {
        image,
        append: g.append.clone(),
        accel: g.accel,
        icount: g.icount,
        cpus: a.traffic.cpus,
        nics: a.traffic.nics,
        memory: g.memory.clone(),
        runs: a.runs,
        machines: a.machines.clone(),
    };
    let out = bb::run(&cfg, |m, i, r| {
        eprintln!(
            "xtask: {} boot {}: spawn → first line {:.1} ms, → ready {:.1} ms; guest {:.1} ms",
            m.name(),
            i + 1,
            r.first_line.as_secs_f64() * 1e3,
            r.ready.as_secs_f64() * 1e3,
            r.guest.total_us as f64 / 1e3
        );
    })?;
    for (m, runs) in &out {
        print!("{}", bb::table(*m, cfg.accel, cfg.icount, runs));
    }
    Ok(())
}

/// `bench tlb`: batch against immediate per vCPU count, then the negative control's catch rate.
fn cmd_bench_tlb(a: BenchArgs) -> Result<()> {
    use harness::bench_tlb::{markdown, run_one, TlbRun};
    let g = &a.traffic.guest;
    if g.cpu.is_some() {
        bail!("bench tlb boots its guests without -cpu: drop --cpu");
    }
    setup::ensure()?;
    let image = image_for(g)?;
    announce_accel(g.accel, false, None);
    let cpus: Vec<u32> = a
        .tlb_cpus
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n >= 2)
                .ok_or_else(|| anyhow::anyhow!("--tlb-cpus: `{c}` is not a count of at least 2"))
        })
        .collect::<Result<_>>()?;
    let timeout = std::time::Duration::from_secs(3600);
    let mut records = Vec::new();
    let mut caught = Vec::new();
    for &n in &cpus {
        for (tlb, batches) in [("batch", a.batches), ("immediate", a.immediate_batches)] {
            let run = TlbRun {
                image: image.clone(),
                cpus: n,
                batches,
                tlb,
                skip: false,
                extra: g.append.clone(),
                timeout,
            };
            let (r, exit, _) = run_one(&run)?;
            eprintln!("xtask: {n} vCPUs tlb={tlb}: {r:?} ({exit})");
            if !exit.is_clean() || r.stale != 0 {
                bail!("tlbtest failed on {n} vCPUs, tlb={tlb}: {r:?} ({exit})");
            }
            records.push(r);
        }
        let mut hits = 0;
        for i in 0..a.control_runs {
            let run = TlbRun {
                image: image.clone(),
                cpus: n,
                batches: 640,
                tlb: "batch",
                skip: true,
                extra: g.append.clone(),
                timeout,
            };
            let (r, _, _) = run_one(&run)?;
            eprintln!(
                "xtask: control {i} on {n} vCPUs: stale {} of {} samples",
                r.stale, r.samples
            );
            hits += u32::from(r.stale > 0);
            if i == 0 {
                records.push(r);
            }
        }
        caught.push((n, hits, a.control_runs));
    }
    print!("{}", markdown(&records));
    for (n, hits, runs) in caught {
        println!("negative control on {n} vCPUs: stale reads caught in {hits} of {runs} runs");
    }
    Ok(())
}

/// `bench datapath`: the host twin under callgrind, per (mode, K), beside the guest figure
/// (a fresh `bench sim` run with `--with-guest`, else BENCHMARKS.md's).
fn cmd_bench_datapath(a: BenchArgs) -> Result<()> {
    use harness::bench_sim;
    use lab::bench_datapath as bd;
    setup::ensure_valgrind()?;
    let ks = bench_sim::parse_ks(&a.sim_k)?;
    let iters = a.iters.unwrap_or(1024);
    let exe = bd::build(&qemu::workspace_root())?;
    let mut hosts = Vec::new();
    for &mode in &a.modes {
        for &k in &ks {
            let r = bd::run_one(&exe, mode, k, iters)?;
            eprintln!(
                "xtask: host {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration over {} packets",
                r.mode, r.k, r.instructions_per_packet, r.frames_per_busy_iter, r.packets
            );
            hosts.push(r);
        }
    }
    let guests = if a.with_guest {
        let g = &a.traffic.guest;
        setup::ensure()?;
        let cfg = bench_sim::SimBenchConfig {
            image: image_for(g)?,
            modes: a.modes.clone(),
            ks: ks.clone(),
            iters: Some(iters),
            append: String::new(),
            accel: Accel::Tcg,
            cpu: g.cpu.clone(),
            memory: g.memory.clone(),
            echo: Echo::Off,
            routes: None,
            size: bench_sim::DEFAULT_SIZE,
        };
        bench_sim::run(&cfg, |r| {
            eprintln!(
                "xtask: guest {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration",
                r.mode, r.k, r.instructions_per_packet, r.frames_per_busy_iter
            )
        })?
    } else {
        Vec::new()
    };
    let rows: Vec<bd::Row> = hosts
        .into_iter()
        .map(|h| {
            if a.with_guest {
                let g = guests
                    .iter()
                    .find(|g| g.mode == h.mode && g.k == h.k)
                    .map(|g| g.instructions_per_packet);
                bd::Row::new(h, g, "bench sim (this run)")
            } else {
                bd::Row::new(h, None, "not run (--with-guest)")
            }
        })
        .collect();
    print!("{}", bd::table(&rows));
    if a.with_guest {
        println!(
            "within 10% of the guest: {}",
            if bd::within(&rows, 0.10) { "yes" } else { "no" }
        );
    }
    if let Some(p) = &a.json {
        let doc = bd::DatapathJson {
            bench: "datapath",
            note: bd::HOST_NOTE,
            rows: &rows,
        };
        report::write_json(p, &doc)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    Ok(())
}

/// `bench --peer linux,dpdk [--sizes …]`: Gannet io/l2/router, the Linux guest and testpmd,
/// one table per size, every row with the same `-cpu` (`max` by default when DPDK runs).
fn cmd_bench_peer(a: BenchArgs) -> Result<()> {
    use harness::peer_linux;
    use lab::{bench_peer, peer_dpdk};
    setup::ensure()?;
    let t = &a.traffic;
    let sizes = match &a.sizes {
        Some(s) => bench_peer::parse_sizes(s)?,
        None => vec![t.size],
    };
    let want_dpdk = a.peer.contains(&Peer::Dpdk);
    let cpu = match (&t.guest.cpu, want_dpdk) {
        (Some(c), _) => Some(c.clone()),
        (None, true) => {
            eprintln!(
                "xtask: --peer dpdk: every row runs with -cpu max (Debian's testpmd needs \
                 SSE4.2, which QEMU's default qemu64 lacks); give --cpu to choose another"
            );
            Some("max".to_string())
        }
        (None, false) => None,
    };
    // Prepare the peers first: a missing download fails before any boot.
    let linux = if a.peer.contains(&Peer::Linux) {
        Some(peer_linux::prepare()?)
    } else {
        None
    };
    let dpdk = if want_dpdk {
        let p = peer_dpdk::prepare()?;
        eprintln!(
            "xtask: DPDK peer: dpdk-testpmd {} on Linux {}",
            p.dpdk_version, p.release
        );
        Some(p)
    } else {
        None
    };
    let cfg = bench_peer::PeerBenchConfig {
        sweep: a.sizes.is_some(),
        sizes,
        seconds: t.seconds,
        window: a.window.unwrap_or(PEER_WINDOW),
        accel: t.guest.accel,
        icount: t.guest.icount,
        cpu,
        append: t.guest.append.clone(),
        image: image_for(&t.guest)?,
        echo: Echo::Off,
        plots: a.sizes.is_some(),
        mtu: t.guest.mtu.clone(),
        bidir: false,
        // Every engine's row starts after the same warm-up (the router's ARP resolved: its
        // first frames would otherwise be lost to the neighbour queue).
        warmup: lab::bench_burstin::WARMUP_FRAMES,
    };
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let peers = bench_peer::Peers {
        linux: linux.as_ref(),
        dpdk: dpdk.as_ref(),
    };
    let out = bench_peer::run(&cfg, peers)?;
    for rec in &out.records {
        print!("{}", bench_peer::table(rec));
    }
    for n in &out.notes {
        println!("note: {n}");
    }
    if let Some(rec) = out.records.iter().find(|r| r.frame_size == 64) {
        print!("{}", bench_peer::targets(rec));
    }
    let v = bench_peer::json(&cfg, &out)?;
    if let Some(p) = &a.json {
        report::write_json(p, &v)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    if cfg.plots && out.records.len() > 1 {
        for p in bench_peer::plots(&qemu::workspace_root(), &out.records)? {
            eprintln!("xtask: wrote {}", p.display());
        }
    } else if cfg.plots {
        eprintln!("xtask: no plots: they draw pps against frame size and need two --sizes or more");
    }
    if out.failed {
        bail!("some rows could not run (see the notes above)");
    }
    Ok(())
}

/// `bench --peer`'s default generator window (maximum outstanding frames).
const PEER_WINDOW: u64 = 64;

/// `bench --burst-in`: Gannet io/l2/router with `burstin=on`, generator both ways (port 0
/// only with `--one-way`) with a window that fills 224 RX entries per port; one table, the l2
/// target, `--json`.
fn cmd_bench_burst_in(a: BenchArgs) -> Result<()> {
    use lab::{bench_burstin, bench_peer};
    if a.target.is_some() {
        bail!("--burst-in is the guest bench (no target): drop the target");
    }
    setup::ensure()?;
    let t = &a.traffic;
    let window = a.window.unwrap_or(bench_burstin::DEFAULT_WINDOW);
    bench_burstin::check_window(window)?;
    let cfg = bench_peer::PeerBenchConfig {
        sweep: false,
        sizes: vec![t.size],
        seconds: t.seconds,
        window,
        accel: t.guest.accel,
        icount: t.guest.icount,
        cpu: t.guest.cpu.clone(),
        append: bench_burstin::append(&t.guest.append)?,
        image: image_for(&t.guest)?,
        echo: Echo::Off,
        plots: false,
        mtu: t.guest.mtu.clone(),
        bidir: !a.one_way,
        warmup: lab::bench_burstin::WARMUP_FRAMES,
    };
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let out = bench_peer::run(&cfg, bench_peer::Peers::default())?;
    let rec = bench_burstin::record(&cfg, &out).context("no record")?;
    print!("{}", bench_burstin::table(&rec.record, cfg.bidir));
    for n in out.notes.iter().filter(|n| !n.contains("not requested")) {
        println!("note: {n}");
    }
    print!("{}", bench_burstin::verdict(&rec.record));
    if let Some(p) = &a.json {
        report::write_json(p, &rec)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    if out.failed {
        bail!("some rows could not run (see the notes above)");
    }
    Ok(())
}

/// `soak`: every mode in turn, STATS checked every --stats-every s; a summary line per mode,
/// a Markdown table, `--json`; fails naming every failed check.
fn cmd_faults(a: FaultsArgs) -> Result<()> {
    use harness::faults;
    if a.guest.backend != Backend::Dgram {
        bail!("faults: only the dgram backend (its frame accounting is exact: QEMU drops nothing)");
    }
    setup::ensure()?;
    let image = match &a.guest.image {
        Some(p) => p.clone(),
        None => qemu::build_fault_image()?,
    };
    // The socket directory is made per mode; this one only carries the guest settings.
    let guest = guest_config(&a.guest, image.clone(), Path::new("/tmp"), Echo::Off)?;
    let mut cfg = faults::FaultConfig::new(guest, a.modes.clone(), a.frames);
    cfg.dry_ms = a.dry_ms;
    if let Some(r) = &a.rates {
        cfg.rates = r
            .split(',')
            .map(|kv| {
                let (k, n) = kv
                    .split_once(':')
                    .with_context(|| format!("--rates: `{kv}` is not NAME:N"))?;
                let n: u64 = n
                    .parse()
                    .with_context(|| format!("--rates: `{kv}`: N is not a number"))?;
                Ok((k.to_string(), n))
            })
            .collect::<Result<_>>()?;
    }
    // The kernel's own parser says whether the rates are ones it takes.
    netstack::Config::parse(&cfg.fault_key()).map_err(|e| anyhow::anyhow!("--rates: {e}"))?;
    announce_accel(cfg.guest.accel, cfg.guest.icount, cfg.guest.cpu.as_deref());
    eprintln!(
        "xtask: faults: {} frames per mode ({}), pools dry for {} ms, {}",
        a.frames,
        a.modes
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(","),
        a.dry_ms,
        cfg.fault_key()
    );
    let results = faults::run(&cfg, |l| eprintln!("xtask: {l}"))?;
    for r in &results {
        println!("{}", faults::summary_line(r));
    }
    print!("{}", faults::markdown(&results));
    if let Some(p) = &a.json {
        let doc = faults::FaultJson {
            bench: "faults",
            frames: a.frames,
            dry_ms: a.dry_ms,
            fault: cfg.fault_key(),
            modes: &results,
        };
        report::write_json(p, &doc)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    let failed: Vec<String> = results
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.mode)))
        .collect();
    if !failed.is_empty() {
        bail!("fault run failed:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

fn cmd_soak(a: SoakArgs) -> Result<()> {
    use harness::soak;
    if !(a.stats_every > 0.0 && a.stats_every.is_finite()) {
        bail!(
            "--stats-every {}: give a positive number of seconds",
            a.stats_every
        );
    }
    if !(a.minutes > 0.0 && a.minutes.is_finite()) {
        bail!("--minutes {}: give a positive number", a.minutes);
    }
    setup::ensure()?;
    let image = image_for(&a.guest)?;
    // The socket directory is made per mode; this one only carries the guest settings.
    let mut guest = guest_config(&a.guest, image.clone(), Path::new("/tmp"), Echo::Off)?;
    guest.cpus = a.cpus;
    let mut cfg = soak::SoakConfig::new(guest, a.modes.clone(), a.minutes);
    cfg.stats_every = Duration::from_secs_f64(a.stats_every);
    cfg.window = a.window;
    cfg.size = a.size;
    cfg.max_gap_ms = a.max_gap_ms;
    cfg.free_pages_tolerance = a.free_pages_tolerance;
    announce_accel(cfg.guest.accel, cfg.guest.icount, cfg.guest.cpu.as_deref());
    eprintln!(
        "xtask: soak: {} min in all, {:.0} s per mode ({}), STATS every {} s, window {}, {} B frames; \
         stall threshold {} ms, free pages ±{}",
        a.minutes,
        cfg.seconds_per_mode,
        a.modes.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(","),
        a.stats_every,
        a.window,
        a.size,
        a.max_gap_ms,
        a.free_pages_tolerance
    );
    let results = soak::run(&cfg, |l| eprintln!("xtask: {l}"))?;
    for r in &results {
        println!("{}", soak::summary_line(r));
    }
    print!("{}", soak::markdown(&results));
    if let Some(p) = &a.json {
        let doc = soak::SoakJson {
            bench: "soak",
            minutes: a.minutes,
            stats_every_s: a.stats_every,
            window: a.window,
            size: a.size,
            image,
            modes: &results,
        };
        report::write_json(p, &doc)?;
        eprintln!("xtask: wrote {}", p.display());
    }
    let failed: Vec<String> = results
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.mode)))
        .collect();
    if !failed.is_empty() {
        bail!("soak failed:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

fn cmd_test() -> Result<ExitCode> {
    setup::ensure()?;
    setup::ensure_promtool()?;
    // The hosts tests need ping, curl and iperf3: installed here once, not by two tests at once.
    setup::ensure_host_tools()?;
    let image = qemu::build_image()?;
    // The fault test (tests/tests/faults.rs) boots the fault image.
    let fault_image = qemu::build_fault_image()?;
    // The integration tests boot every guest with the default accelerator (GuestConfig).
    announce_accel(qemu::GuestConfig::default().accel, false, None);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(qemu::workspace_root())
        .args([
            "test",
            "-p",
            "mm",
            "-p",
            "drivers",
            "-p",
            "netstack",
            "-p",
            "unikernel",
            "-p",
            "tools",
            "-p",
            "tests",
            "--",
            "--test-threads=2",
        ])
        .env("GANNET_IMAGE", &image)
        .env("GANNET_FAULT_IMAGE", &fault_image)
        .status()
        .context("running cargo test")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Setup => setup::ensure().map(|()| ExitCode::SUCCESS),
        Cmd::Build(a) => cmd_build(a).map(|()| ExitCode::SUCCESS),
        Cmd::Faults(a) => cmd_faults(a).map(|()| ExitCode::SUCCESS),
        Cmd::Iso(a) => cmd_iso(a).map(|()| ExitCode::SUCCESS),
        Cmd::Boot(a) => cmd_boot(a).map(|()| ExitCode::SUCCESS),
        Cmd::Gen(a) => cmd_gen(a).map(|()| ExitCode::SUCCESS),
        Cmd::Run(a) => cmd_run(a).map(|()| ExitCode::SUCCESS),
        Cmd::Bench(a) => cmd_bench(a).map(|()| ExitCode::SUCCESS),
        Cmd::Soak(a) => cmd_soak(a).map(|()| ExitCode::SUCCESS),
        Cmd::Test => cmd_test(),
        Cmd::Fuzz(a) => fuzz::run(
            &qemu::workspace_root(),
            a.seconds,
            a.seed,
            a.only.as_deref(),
        )
        .map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
        Cmd::Lint(a) => lint::run(&qemu::workspace_root(), &a.only).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("256M"), Ok("256M".to_string()));
        assert_eq!(parse_memory("1G"), Ok("1G".to_string()));
        assert_eq!(parse_memory("1024"), Ok("1024".to_string()));
        for bad in ["", "M", "0M", "12MB", "1.5G", "-1G"] {
            assert!(parse_memory(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn port_pairs_from_the_guest_log() {
        let lines = [
            "[    0.1] INFO  gannet::forwarder: idle (cpu 0): poll 50 us".to_string(),
            "[    0.2] INFO  gannet::forwarder: forwarding 2 port pair(s) on 2 core(s), 1 queue pair(s) per port, mode l2, burst 32".to_string(),
        ];
        assert_eq!(guest_port_pairs(&lines), Some(2));
        assert_eq!(guest_port_pairs(&lines[..1]), None);
    }
}
