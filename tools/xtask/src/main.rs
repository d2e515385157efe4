//! `cargo xtask`: build, boot, gen, run, bench, soak, faults, test, lint, fuzz, setup, libvirt.
//!
//! This file is the command line (clap) and the dispatch, plus what every command shares
//! (the guest flags to a [`GuestConfig`], the accelerator line) and the two one-screen commands
//! (`build`, `test`). The commands' bodies: [`run`] (iso, boot, gen, run), [`bench`] (every
//! `bench` target; [`search`], `bench --search`), [`checks`] (faults, soak), [`libvirt`], [`lint`], [`fuzz`]; what they run lives in the
//! `harness` and `lab` crates.
//!
//! Past ~800 lines because it is the one table of commands: each command's clap arguments and
//! its dispatch sit together; the work of each lives in the modules above and in `harness`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod bench;
mod checks;
mod fuzz;
mod libvirt;
mod lint;
mod run;
mod search;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use harness::bench_sim::SimMode;
use harness::qemu::{self, Accel, Backend, Boot, Echo, GuestConfig, Mtus, NicModel};
use harness::tap::TapNet;
use harness::{envelope, gen, setup};

#[derive(Parser)]
#[command(name = "xtask", about = "Gannet developer tasks")]
struct Cli {
    /// The QEMU binary every guest boots with (sets GANNET_QEMU for this command and the
    /// tests it runs; default: $GANNET_QEMU, else qemu-system-x86_64 from $PATH). To compare
    /// QEMU versions, e.g. an older one unpacked with `dpkg -x` into DIR: `--qemu
    /// DIR/usr/bin/qemu-system-x86_64 --qemu-data DIR/usr/share/qemu:DIR/usr/share/seabios`.
    #[arg(long, global = true, value_name = "PATH")]
    qemu: Option<PathBuf>,
    /// QEMU firmware/ROM directories, `:`-separated, each passed as `-L DIR` (sets
    /// GANNET_QEMU_DATA): for a QEMU binary unpacked outside /usr.
    #[arg(long, global = true, value_name = "DIR[:DIR…]")]
    qemu_data: Option<std::ffi::OsString>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install missing prerequisites (Rust target x86_64-unknown-none, QEMU >= 8: on Debian
    /// bookworm from bookworm-backports, replacing an older one); prints the QEMU in use.
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
    Bench(Box<BenchArgs>),
    /// Every forwarding mode at full rate for --minutes in all, STATS every --stats-every
    /// seconds: no stall, counters monotonic, free pages stable, quit clean.
    Soak(SoakArgs),
    /// The fault image (built here) forwarding --frames per mode while faults are injected
    /// (fault=, and every page_pool starved for --dry-ms): every fault fired and counted, no
    /// frame corrupted, forwarding resumed, no page lost.
    Faults(FaultsArgs),
    /// Regenerate BENCHMARKS.md's summary table and the plots (docs/plots/) from the JSON
    /// results kept in results/ (each written by one benchmark command's --json).
    Report(ReportArgs),
    /// Setup, build, then run the workspace tests against the built image; FILTER… and the
    /// arguments after `--` go to every test binary (libtest's filters and options).
    Test(TestArgs),
    /// rustfmt check, clippy (host and x86_64-unknown-none, -D warnings,
    /// undocumented unsafe blocks denied), the module import-cycle check and `nocall`.
    Lint(LintArgs),
    /// No indirect call per packet: build the image (unless --image) and disassemble its
    /// per-frame loop functions (harness::nocall::LOOP_FUNCTIONS); fails on an indirect call
    /// or an indirect jmp that is not a jump table into the same function.
    Nocall(NocallArgs),
    /// A crate of your own appliance from Gannet's template (`template/`): one network
    /// function in `src/main.rs`, path dependencies on this checkout, its lock file; build it
    /// with `cargo build --release` there, test it on the host with `cargo test-host` there,
    /// boot it with `cargo xtask run --image DIR/target/x86_64-unknown-none/release/appliance`
    /// (docs/writing-an-nf.md).
    New(NewArgs),
    /// Gannet appliances in series as libvirt domains (root): setup, run, up, down, status.
    #[command(subcommand)]
    Libvirt(libvirt::LibvirtCmd),
    /// Run each cargo-fuzz target (netstack/fuzz, drivers/fuzz) for a fixed time from its
    /// seed corpus; installs nightly and cargo-fuzz when missing.
    Fuzz(FuzzArgs),
}

#[derive(Args)]
struct TestArgs {
    /// Run only the tests whose name contains one of these (libtest's filter, in every test
    /// binary), e.g. `cargo xtask test route_add` or `cargo xtask test router::show`.
    filter: Vec<String>,
    /// libtest arguments after `--`, e.g. `-- --exact router::show::tests::neighbours` or
    /// `-- --nocapture` (`--test-threads=N` replaces the default 2).
    #[arg(last = true)]
    libtest: Vec<String>,
}

/// The arguments after `cargo test … --`: `--test-threads=2` unless `libtest` sets the thread
/// count itself (libtest refuses it twice), then `libtest`, then the filters.
fn libtest_args(a: &TestArgs) -> Vec<String> {
    let sets_threads = a.libtest.iter().any(|x| x.starts_with("--test-threads"));
    (!sets_threads)
        .then(|| "--test-threads=2".to_string())
        .into_iter()
        .chain(a.libtest.iter().cloned())
        .chain(a.filter.iter().cloned())
        .collect()
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
    /// Only this target (process_frame, cmdline, routes_file, mgmt_request, fib_build, used_ring, used_ring_big, dd_ring).
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
    /// The boot module (QEMU `-initrd`): a static routes file for router mode (one
    /// `PREFIX/LEN,GATEWAY` per line, `#` comments) or an appliance bundle (`#!gannet-bundle
    /// 1`: the router's routes, the ACL's rules, an image's own NF's files; `--bundle` is the
    /// same flag). With `bench --search`, a number N (not a file) boots a generated FIB of N
    /// routes via 10.0.1.2 and spreads the offered frames over it.
    #[arg(long, alias = "bundle")]
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
    /// The ports' NIC model: `virtio` (virtio-net-pci, default), `e1000e` (QEMU's Intel
    /// 82574L, `-device e1000e,romfile=`; single queue, no `--mtu`: give `mtu0=`/`mtu1=` in
    /// `--append`), `mixed` (virtio-net on port 0, e1000e on port 1: one pair) or `igb`
    /// (QEMU's Intel 82576, `-device igb,romfile=`, QEMU ≥ 8.0; a queue pair per core with RSS,
    /// on any backend: `--cpus N` gives N, `queues=auto`; no `--mtu`: give `mtu0=`/`mtu1=` in
    /// `--append`).
    #[arg(long, value_enum, default_value_t = NicModel::Virtio)]
    nic: NicModel,
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
    /// Write the JSON record, in the envelope (README, "JSON results"), to this file; `-`:
    /// stdout (everything else then goes to stderr).
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
#[command(group(clap::ArgGroup::new("searching").args(["search", "cross_check"]).multiple(true)))]
struct BenchArgs {
    /// What to benchmark: omitted, the guest (build, boot, traffic, JSON); `mm`, the page
    /// allocator micro-benchmark on the host (table, JSON, docs/mm-bench.png); `pool`, the
    /// page_pool benchmark; `sim`, the deterministic datapath benchmark on simulated devices;
    /// `datapath`, its host twin under callgrind.
    #[arg(value_enum)]
    target: Option<BenchTarget>,
    #[command(flatten)]
    traffic: TrafficArgs,
    /// Write the JSON record, in the envelope (README, "JSON results"), to this file; `-`:
    /// stdout (everything else then goes to stderr).
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
    /// NDR (zero loss) and PDR per frame size by binary search over open-loop, paced trials
    /// (RFC 2544 §26.1, ETSI GS NFV-TST 009), with latency at 10/50/90 % of NDR; rows from
    /// `--sizes` (default RFC 2544's seven, plus MTU+18 with --mtu over 1500) and `--imix`.
    /// Dgram backend; refuses --icount. With `--peer linux` the same search runs against the
    /// Linux peer (bridge, or IPv4 forwarding when --append has mode=router) in the same run;
    /// with `--peer dpdk` against testpmd (io for mode=io, mac for l2; every guest -cpu max).
    /// README, "Throughput and latency search".
    #[arg(long, conflicts_with = "burst_in")]
    search: bool,
    /// Cross-check our generator against a standard one on the tap backend (root):
    /// `trafgen` (netsniff-ng, installed from Debian as root). Per `--sizes` (default 64,1518):
    /// NDR searched on tap (the --search flags; `--max-rate` default 40,000), then trafgen and
    /// our paced generator into port 0 at NDR and 1.2 x NDR, counted out of port 1 and in
    /// STATS; their loss must agree within 2 percentage points. README, "Throughput and
    /// latency search".
    #[arg(long, value_enum, conflicts_with_all = ["search", "burst_in", "peer"])]
    cross_check: Option<CrossCheckWith>,
    /// With --cross-check: length of each stream, s.
    #[arg(long, default_value_t = 2.0, requires = "cross_check")]
    stream_seconds: f64,
    /// With --cross-check: streams of each generator per point; their median losses are
    /// compared.
    #[arg(long, default_value_t = 3, requires = "cross_check")]
    pairs: usize,
    /// With --cross-check: the multiples of NDR to offer, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 1.2], requires = "cross_check")]
    factors: Vec<f64>,
    /// With --cross-check: NDR per size, frames/s, comma-separated in --sizes' order, instead of
    /// searching it on tap.
    #[arg(long, value_delimiter = ',', requires = "cross_check")]
    ndr: Vec<f64>,
    /// With --search: also search the IMIX (64/594/1518 B at 7:4:1) as one row.
    #[arg(long, requires = "search")]
    imix: bool,
    /// With --search: the binary search stops when its interval is this narrow, frames/s.
    #[arg(long, default_value_t = 1000.0, requires = "searching")]
    resolution: f64,
    /// With --search: PDR's loss bound, percent of offered frames.
    #[arg(long, default_value_t = 0.5, requires = "searching")]
    pdr_loss: f64,
    /// With --search: duration of each search trial, s.
    #[arg(long, default_value_t = 1.0, requires = "searching")]
    trial_seconds: f64,
    /// With --search: duration of each confirming, step-above and latency trial, s.
    #[arg(long, default_value_t = 5.0, requires = "searching")]
    final_seconds: f64,
    /// With --search: confirming trials at NDR and at PDR.
    #[arg(long, default_value_t = 3, requires = "searching")]
    repeats: usize,
    /// With --search: highest rate to offer, frames/s (the generator's ceiling bounds it).
    #[arg(long, requires = "searching")]
    max_rate: Option<f64>,
    /// With --search: `net.unix.max_dgram_qlen` for QEMU's sockets, frames (a virtio ring's
    /// 256 by default; 0: the host's own, Linux's 10): raised while QEMU starts, then put back.
    #[arg(long, default_value_t = 256, requires = "search")]
    dgram_qlen: u64,
    /// With --search: UDP flows the offered frames cycle over (source ports 10000..10000+N,
    /// frame i on flow i % N; destination address and port unchanged).
    #[arg(long, default_value_t = 1, requires = "search")]
    flows: u16,
    /// With --search: offer both directions, the same rate into each port at once (two paced
    /// senders); rates are per direction, each trial's loss and latency per direction in its
    /// `directions`.
    #[arg(long, requires = "search")]
    bidir: bool,
    /// With --search: duration of the generator's ceiling run per row, s.
    #[arg(long, default_value_t = 2.0, requires = "search")]
    ceiling_seconds: f64,
    /// `bench sim`: forwarding modes to run, comma-separated (l2, io, router, acl).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SimMode::L2, SimMode::Router])]
    modes: Vec<SimMode>,
    /// `bench sim --modes acl`: rule counts, comma-separated (each 1..=10000): one acl row per
    /// count and K, booting with a bundle of that many ClassBench-like rules
    /// (`netstack::acl::classbench::generate`, its benchmark seed).
    #[arg(long, default_value = "10,1000,10000")]
    rules: String,
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
    /// beside the host's (default: the guest figures recorded in docs/benchmarks-journal.md).
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
    /// Write the JSON record, in the envelope (README, "JSON results"), to this file; `-`:
    /// stdout (everything else then goes to stderr).
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
    /// Write the JSON record, in the envelope (README, "JSON results"), to this file; `-`:
    /// stdout (everything else then goes to stderr).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct ReportArgs {
    /// Write nothing: fail if BENCHMARKS.md's summary is not what results/ makes (as the
    /// `lab` unit test does in CI).
    #[arg(long)]
    check: bool,
}

#[derive(Args)]
struct NewArgs {
    /// Where to put the crate (a new or empty directory outside this checkout).
    dir: PathBuf,
}

#[derive(Args)]
struct NocallArgs {
    /// Check this ELF image instead of building the stock one.
    #[arg(long, conflicts_with = "control")]
    image: Option<PathBuf>,
    /// Build and check the negative control (feature `unikernel/nf-indirect-control`), which
    /// must fail.
    #[arg(long)]
    control: bool,
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

/// Standard generators `cargo xtask bench --cross-check` compares ours with.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CrossCheckWith {
    /// netsniff-ng's trafgen (Debian's `netsniff-ng`), fixed-rate streams on a tap device.
    Trafgen,
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
            bail!("--routes/--bundle {}: no such file", r.display());
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
        nic: g.nic,
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
    eprintln!(
        "xtask: accelerator: {what}{ic}{cpu}; {}",
        setup::qemu_description()
    );
}

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

/// `report`: BENCHMARKS.md's summary and the plots from results/ (`lab::summary`).
/// `cargo xtask new DIR`: the template copied to `DIR` (`harness::appliance::new`).
fn cmd_new(a: NewArgs) -> Result<ExitCode> {
    let dir = harness::appliance::new(&qemu::workspace_root(), &a.dir)?;
    println!(
        "xtask: appliance crate in {d}: edit src/main.rs (docs/writing-an-nf.md); build with `cd {d} && cargo build --release`; test on the host with `cargo test-host` there; boot with `cargo xtask run --image {d}/target/x86_64-unknown-none/release/appliance`",
        d = dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn cmd_report(a: ReportArgs) -> Result<ExitCode> {
    use lab::summary;
    let root = qemu::workspace_root();
    let report = summary::generate(&root)?;
    if !report.unguarded.is_empty() {
        eprintln!(
            "xtask: deterministic rows tests/perf-baseline.json does not guard: {}",
            report.unguarded.join(", ")
        );
    }
    if a.check {
        if report.changed {
            eprintln!("xtask: BENCHMARKS.md's summary is not what results/ makes: run `cargo xtask report`");
            return Ok(ExitCode::FAILURE);
        }
        eprintln!("xtask: BENCHMARKS.md's summary is up to date");
        return Ok(ExitCode::SUCCESS);
    }
    summary::write(&root, &report)?;
    let results = summary::Results::load(&root.join(summary::RESULTS_DIR))?;
    for p in lab::summary_plot::plots(&results, &root.join(summary::PLOTS_DIR))? {
        eprintln!("xtask: wrote {}", p.display());
    }
    eprintln!(
        "xtask: BENCHMARKS.md summary {}",
        if report.changed {
            "rewritten"
        } else {
            "unchanged"
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn cmd_test(a: TestArgs) -> Result<ExitCode> {
    setup::ensure()?;
    setup::ensure_promtool()?;
    // The hosts tests need ping, curl and iperf3: installed here once, not by two tests at once.
    setup::ensure_host_tools()?;
    // tests/tests/libvirt.rs: libvirt installed and its daemons started here, before the tests
    // (as root; otherwise the test fails naming `sudo cargo xtask libvirt setup`).
    if setup::is_root() {
        harness::libvirt::ensure()?;
    }
    let image = qemu::build_image()?;
    // The fault test (tests/tests/faults.rs) boots the fault image.
    let fault_image = qemu::build_fault_image()?;
    // The no-indirect-call test's negative control (tests/tests/nocall.rs), never booted.
    let nf_control_image = qemu::build_nf_control_image()?;
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
            "xtask",
            "-p",
            "harness",
            "-p",
            "lab",
            "-p",
            "plot",
            "-p",
            "tests",
            // The host rig's own tests (`unikernel/tests/nf_rig.rs`: an NF tested as a user
            // tests theirs).
            "--features",
            "unikernel/host-rig",
            "--",
        ])
        .args(libtest_args(&a))
        .env("GANNET_IMAGE", &image)
        .env("GANNET_FAULT_IMAGE", &fault_image)
        .env("GANNET_NF_CONTROL_IMAGE", &nf_control_image)
        .status()
        .context("running cargo test")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// `--json PATH`: `result` of `bench`, in the one envelope ([`envelope`]: command line, commit,
/// accelerator, host CPU, date), to `PATH` (`-`: stdout); nothing without `--json`.
fn emit<T: serde::Serialize>(
    json: Option<&Path>,
    bench: &str,
    ran: envelope::Ran,
    result: T,
) -> Result<()> {
    match json {
        Some(p) => envelope::write(p, &envelope::Envelope::new(bench, ran, result)),
        None => Ok(()),
    }
}

/// Where a command that boots guests from these flags ran, for its `--json` envelope.
fn ran(g: &GuestArgs) -> envelope::Ran {
    envelope::Ran::Guest {
        accel: g.accel,
        icount: g.icount,
    }
}

impl Cmd {
    /// The command's `--json` destination, if it has one.
    fn json(&self) -> Option<&Path> {
        match self {
            Cmd::Gen(a) => a.json.as_deref(),
            Cmd::Bench(a) => a.json.as_deref(),
            Cmd::Soak(a) => a.json.as_deref(),
            Cmd::Faults(a) => a.json.as_deref(),
            _ => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread starts: the harness (GuestConfig::default, setup::ensure_qemu) and the
    // integration tests `test` runs read these.
    if let Some(q) = &cli.qemu {
        std::env::set_var(setup::QEMU_ENV, q);
    }
    if let Some(d) = &cli.qemu_data {
        std::env::set_var(setup::QEMU_DATA_ENV, d);
    }
    if cli.cmd.json().is_some() || matches!(cli.cmd, Cmd::Bench(_)) {
        // The commit the JSON names is the one the command started on.
        envelope::capture();
    }
    if envelope::to_stdout(cli.cmd.json()) {
        if let Err(e) = envelope::claim_stdout() {
            eprintln!("xtask: error: --json -: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let res = match cli.cmd {
        Cmd::Setup => setup::ensure().map(|()| {
            eprintln!("xtask: setup done; {}", setup::qemu_description());
            ExitCode::SUCCESS
        }),
        Cmd::Build(a) => cmd_build(a).map(|()| ExitCode::SUCCESS),
        Cmd::Faults(a) => checks::cmd_faults(a).map(|()| ExitCode::SUCCESS),
        Cmd::Iso(a) => run::cmd_iso(a).map(|()| ExitCode::SUCCESS),
        Cmd::Boot(a) => run::cmd_boot(a).map(|()| ExitCode::SUCCESS),
        Cmd::Gen(a) => run::cmd_gen(a).map(|()| ExitCode::SUCCESS),
        Cmd::Run(a) => run::cmd_run(a).map(|()| ExitCode::SUCCESS),
        Cmd::Bench(a) => bench::cmd_bench(*a).map(|()| ExitCode::SUCCESS),
        Cmd::Soak(a) => checks::cmd_soak(a).map(|()| ExitCode::SUCCESS),
        Cmd::Nocall(a) => checks::cmd_nocall(a),
        Cmd::New(a) => cmd_new(a),
        Cmd::Report(a) => cmd_report(a),
        Cmd::Test(a) => cmd_test(a),
        Cmd::Libvirt(c) => libvirt::run(c).map(|()| ExitCode::SUCCESS),
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
    fn test_filters_pass_through() {
        let parse = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().cmd {
            Cmd::Test(a) => libtest_args(&a),
            _ => unreachable!("not test"),
        };
        assert_eq!(parse(&["xtask", "test"]), ["--test-threads=2"]);
        assert_eq!(
            parse(&["xtask", "test", "route_add", "router::show"]),
            ["--test-threads=2", "route_add", "router::show"]
        );
        assert_eq!(
            parse(&[
                "xtask",
                "test",
                "--",
                "--exact",
                "router::show::tests::neighbours"
            ]),
            [
                "--test-threads=2",
                "--exact",
                "router::show::tests::neighbours"
            ]
        );
        assert_eq!(
            parse(&[
                "xtask",
                "test",
                "neigh",
                "--",
                "--test-threads=1",
                "--nocapture"
            ]),
            ["--test-threads=1", "--nocapture", "neigh"]
        );
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("256M"), Ok("256M".to_string()));
        assert_eq!(parse_memory("1G"), Ok("1G".to_string()));
        assert_eq!(parse_memory("1024"), Ok("1024".to_string()));
        for bad in ["", "M", "0M", "12MB", "1.5G", "-1G"] {
            assert!(parse_memory(bad).is_err(), "{bad} accepted");
        }
    }
}
