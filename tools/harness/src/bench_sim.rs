//! `cargo xtask bench sim`: the deterministic datapath benchmark (issue 11, item 0).
//!
//! Boots the image once per (mode, K) with `-smp 1`, `-icount shift=0,sleep=off` and no NIC:
//! the kernel command line `sim=K` makes the guest build ports 0 and 1 on simulated virtio-net
//! devices (in-memory split rings that QEMU never sees, `drivers::sim`), deliver K frames per
//! poll iteration outside a measured bracket and time one poll iteration inside it (see
//! `unikernel/src/forwarder/simbench.rs`). The guest prints one `SIMBENCH key=value …` line and
//! shuts down through `quit` (so a page leak fails the run). Under icount one guest TSC tick is
//! one guest instruction, and nothing outside the guest feeds the measured part, so the figure is
//! identical run to run.
//!
//! A run fails unless the guest shut down cleanly and every delivered frame left port 1 as
//! expected (`delivered == packets == out`, `other == 0`).
//!
//! With a routes file ([`SimBenchConfig::routes`], `--routes FILE`: e.g. the 100,000 routes of
//! `tools/scripts/mkroutes.py 100000 1`) the router runs get it as their boot module (QEMU
//! `-initrd`, as `boot --routes`), so the FIB holds those routes too; the frames still go to
//! the destination inside the command line's first route (192.168.0.1 by 192.168.0.0/16 via
//! 10.0.1.2), which the file must not override ([`check_routes_file`]: no route of the file as
//! long or longer contains it, other than the same route). The l2/io runs ignore it.
//!
//! The acl runs (`--modes acl --rules N[,M…]`) boot once per rule count with a bundle of N
//! ClassBench-like rules ([`acl_bundle`]: `netstack::acl::classbench::generate` with its
//! benchmark seed) as their boot module; the guest delivers frames cycling through 1,024
//! 5-tuples aimed at those rules, denied ones are dropped by design, so the figure is
//! instructions per *delivered* frame and the check `packets + dropped == delivered`. The
//! acl-router runs (the ACL in front of the router) do the same with [`acl_router_bundle`],
//! each tuple's destination inside the router's route (the guest's `AclCycle`), every allowed
//! frame routed.
//!
//! Past ~800 lines because its tests (inline, ~135 lines, parsing captured `SIMBENCH` lines)
//! sit beside the runner, its parser and its JSON records, which share one line format.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::Serialize;

use crate::qemu::{Accel, Echo, Guest, GuestConfig};

/// Prefix of the guest's result line.
pub const LINE_PREFIX: &str = "SIMBENCH ";
/// The router-mode command line of the benchmark: the frames go to 192.168.0.1, routed via
/// 10.0.1.2 on port 1 (the guest resolves it before measuring).
pub const ROUTER_APPEND: &str =
    "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 route=192.168.0.0/16,10.0.1.2";
/// The IPv6 router's command line of the benchmark (`sim_ip=6`): [`ROUTER_APPEND`] with IPv6
/// addresses on both ports and 2001:db8:100::/48 via 2001:db8:0:1::2 on port 1 (the guest
/// resolves it by Neighbor Discovery before measuring); the frames go to 2001:db8:100::1.
pub const ROUTER6_APPEND: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 route=192.168.0.0/16,10.0.1.2 ip6_0=2001:db8::1/64 ip6_1=2001:db8:0:1::1/64 route=2001:db8:100::/48,2001:db8:0:1::2 sim_ip=6";
/// `router6`'s frame size when the run's is the default [`DEFAULT_SIZE`]: 78 bytes on the wire,
/// the smallest IPv6 frame RFC 5180 §5 benchmarks (an IPv6/UDP frame needs 66).
pub const ROUTER6_MIN_SIZE: u16 = 78;
/// The NAT's command line of the benchmark: one pool address, the default range and table.
pub const NAT_APPEND: &str = "mode=nat nat_pool=192.0.2.1";
/// K values run by default (frames the device delivers per busy poll iteration).
pub const DEFAULT_K: [u16; 3] = [1, 4, 32];
/// How long one guest run may take (boot, benchmark, quit) under TCG on a loaded host.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// A forwarding mode the benchmark runs.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SimMode {
    /// testpmd `mac`: rewrite the MACs, out of the other port.
    L2,
    /// testpmd `io`: out of the other port untouched.
    Io,
    /// The IPv4 router (FIB lookup, TTL, resolved next hop).
    Router,
    /// The stateless IPv4 ACL firewall over ClassBench-like rules (`--rules N`).
    Acl,
    /// The ACL in front of the router (`mode=router` with the same `--rules N` bundle, `default
    /// allow`: the static chain `nf::Chain<Acl, RouterNf>`), on the acl runs' 1,024 tuples moved
    /// into the router's route.
    #[serde(rename = "acl-router")]
    AclRouter,
    /// The router forwarding IPv6 ([`ROUTER6_APPEND`]: hop limit, Poptrie lookup, resolved
    /// next hop), 78-byte frames by default ([`ROUTER6_MIN_SIZE`]).
    Router6,
    /// The NAT44 gateway (`mode=nat`, [`NAT_APPEND`]) on one flow: every frame after the
    /// first meets its session.
    Nat,
    /// The connection-tracking firewall (`mode=firewall`) on one flow from the inside: every
    /// frame after the first meets its connection.
    Firewall,
}

impl SimMode {
    /// The guest's `mode=` value.
    pub fn as_str(self) -> &'static str {
        match self {
            SimMode::L2 => "l2",
            SimMode::Io => "io",
            SimMode::Router => "router",
            SimMode::Router6 => "router6",
            SimMode::Acl => "acl",
            SimMode::AclRouter => "acl-router",
            SimMode::Nat => "nat",
            SimMode::Firewall => "firewall",
        }
    }

    /// Whether its runs boot with a rule set (`--rules N`): `acl` and `acl-router`.
    pub fn takes_rules(self) -> bool {
        matches!(self, SimMode::Acl | SimMode::AclRouter)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SimBenchConfig {
    /// The kernel image.
    pub image: PathBuf,
    /// Modes, in order.
    pub modes: Vec<SimMode>,
    /// K values, in order (1..=256).
    pub ks: Vec<u16>,
    /// Measured iterations (`sim_iters=`); `None`: the guest's default.
    pub iters: Option<u32>,
    /// More kernel command line for every run (e.g. `burst=64`).
    pub append: String,
    /// Accelerator (icount needs TCG).
    pub accel: Accel,
    /// QEMU `-cpu` (`None`: QEMU's default, `qemu64`).
    pub cpu: Option<String>,
    /// Guest RAM (`-m`); router mode sets 64 MiB aside for the FIB.
    pub memory: String,
    /// Where the guest's serial output goes.
    pub echo: Echo,
    /// Router mode: a static routes file handed to the guest as its boot module (`-initrd`).
    pub routes: Option<PathBuf>,
    /// Frame size in bytes on the wire, FCS included (`sim_size=`; 64..=9018); frames above
    /// 4,088 bytes arrive in several RX buffers (mergeable).
    pub size: u16,
    /// ACL mode: the rule counts, one run of each K per count (each a bundle of that many
    /// [`acl_bundle`] rules as the boot module).
    pub acl_rules: Vec<usize>,
}

/// The benchmark's frame size by default: 64 bytes on the wire (the guest's default).
pub const DEFAULT_SIZE: u16 = 64;

impl SimBenchConfig {
    /// Modes l2 and router, K = 1, 4, 32, the guest's default iterations, TCG, 256M.
    pub fn new(image: PathBuf) -> Self {
        SimBenchConfig {
            image,
            modes: vec![SimMode::L2, SimMode::Router],
            ks: DEFAULT_K.to_vec(),
            iters: None,
            append: String::new(),
            accel: Accel::Tcg,
            cpu: None,
            memory: "256M".into(),
            echo: Echo::Off,
            routes: None,
            size: DEFAULT_SIZE,
            acl_rules: Vec::new(),
        }
    }
}

/// The rule counts of the acl runs by default (`--rules`): the rows.
pub const DEFAULT_ACL_RULES: [usize; 3] = [10, 1_000, 10_000];

/// The boot bundle of the acl runs: `n` ClassBench-like rules
/// (`netstack::acl::classbench::generate`, seed `BENCH_SEED`) as its `rules` file.
pub fn acl_bundle(n: usize) -> String {
    let mut s = String::from("#!gannet-bundle 1\n--- rules\n");
    netstack::acl::classbench::generate(n, netstack::acl::classbench::BENCH_SEED, &mut s)
        .expect("a String takes any text");
    s
}

/// Where the acl runs' bundle of `n` rules is written (the same text for the same `n`).
pub fn acl_bundle_path(n: usize) -> PathBuf {
    std::env::temp_dir().join(format!("gannet-simbench-acl-{n}-rules.bundle"))
}

/// The boot bundle of the acl-router runs: [`acl_bundle`]`(n)` whose default action is
/// `allow`, so the tuples the guest moved into the router's route (192.168.0.0/16) that match
/// no rule any more pass the ACL and are routed, as a router's traffic mostly would.
pub fn acl_router_bundle(n: usize) -> String {
    acl_bundle(n).replacen("\ndefault deny\n", "\ndefault allow\n", 1)
}

/// Where the acl-router runs' bundle of `n` rules is written.
pub fn acl_router_bundle_path(n: usize) -> PathBuf {
    std::env::temp_dir().join(format!("gannet-simbench-acl-router-{n}-rules.bundle"))
}

/// Write [`acl_bundle`]`(n)` to [`acl_bundle_path`]`(n)` (whole: through a file renamed into
/// place, so a concurrent run never reads half of it).
///
/// # Errors
/// The file could not be written.
pub fn write_acl_bundle(n: usize) -> Result<PathBuf> {
    write_bundle(acl_bundle_path(n), &acl_bundle(n))
}

/// `text` written to `path` through a file renamed into place.
fn write_bundle(path: PathBuf, text: &str) -> Result<PathBuf> {
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))?;
    Ok(path)
}

/// One guest run's result (the `SIMBENCH` line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimRecord {
    /// Forwarding mode.
    pub mode: String,
    /// Frames the simulated device delivers on port 0 per busy poll iteration.
    pub k: u64,
    /// Frame size in bytes on the wire, FCS included.
    pub size: u64,
    /// Warm-up iterations (not measured).
    pub warmup: u64,
    /// Measured iterations.
    pub iters: u64,
    /// Frames delivered on port 0 during the measured iterations.
    pub delivered: u64,
    /// Frames the forwarder transmitted on port 1 inside the measured brackets.
    pub packets: u64,
    /// Of those, frames the device took off port 1 equal to the expected output frame.
    pub out: u64,
    /// Other frames the device took off either TX ring during the measurement (expected 0).
    pub other: u64,
    /// Guest TSC cycles inside the brackets (guest instructions under icount).
    pub cycles: u64,
    /// `cycles / packets` (two decimals, as the guest prints it); acl mode: `cycles /
    /// delivered` (denied frames are dropped by design).
    pub instructions_per_packet: f64,
    /// Notifications the driver wrote during the measurement.
    pub kicks: u64,
    /// Poll iterations that did work during the measurement (the profile's `busy_iters`).
    pub busy_iters: u64,
    /// `packets / busy_iters`: frames per busy poll iteration of the measured part (K when every
    /// iteration forwarded its K frames), printed beside every instructions-per-packet figure;
    /// acl mode: `delivered / busy_iters` (forwarded or denied).
    pub frames_per_busy_iter: f64,
    /// `tcg` or `kvm`.
    pub accel: String,
    /// Whether `-icount shift=0,sleep=off` was on (always, for this benchmark).
    pub icount: bool,
    /// Routes the guest installed from the routes file (its boot log), if it had one.
    pub file_routes: Option<u64>,
    /// ACL mode: frames the firewall dropped (denied) in the measured iterations.
    pub dropped: u64,
    /// ACL mode: the rules the guest built (the `SIMBENCH` line's `rules=`).
    pub acl_rules: Option<u64>,
    /// ACL mode: the classifier's tuples (its boot log: `acl: N rules in T tuples …`).
    pub acl_tuples: Option<u64>,
    /// ACL mode: distinct 5-tuples the delivered frames cycle through (`flows=`).
    pub flows: Option<u64>,
    /// The simulated NIC (`sim_nic=`: `virtio`, `dd`, `e1000e`, `igb`; the line's `nic=`,
    /// `virtio` on lines from before it).
    pub nic: String,
    /// DD-bit NICs (`dd`, `e1000e`, `igb`): `RDT` writes (RX doorbells) in the measured
    /// iterations.
    pub rdt_writes: Option<u64>,
    /// DD-bit NICs: `TDT` writes (TX doorbells) in the measured iterations.
    pub tdt_writes: Option<u64>,
    /// DD-bit NICs: device register reads in the measured iterations (a run fails unless 0).
    pub reg_reads: Option<u64>,
}

impl SimRecord {
    /// Forwarded frames per `RDT` write (`packets / rdt_writes`), for a NIC that counts them.
    pub fn frames_per_rdt(&self) -> Option<f64> {
        self.rdt_writes.map(|w| frames_per_iter(self.packets, w))
    }

    /// Forwarded frames per `TDT` write (`packets / tdt_writes`), for a NIC that counts them.
    pub fn frames_per_tdt(&self) -> Option<f64> {
        self.tdt_writes.map(|w| frames_per_iter(self.packets, w))
    }
}

/// A benchmark result line (`PREFIX key=value key=value …`), found anywhere in a log line.
/// Shared by the guest's `SIMBENCH` line and the host twin's `DATAPATH` line.
pub struct KvLine<'a> {
    name: &'a str,
    line: &'a str,
    kv: Vec<(&'a str, &'a str)>,
}

impl<'a> KvLine<'a> {
    /// The pairs after `prefix` (e.g. `"SIMBENCH "`) in `line`, or `None` if it has none.
    pub fn parse(line: &'a str, prefix: &'a str) -> Option<KvLine<'a>> {
        let rest = &line[line.find(prefix)? + prefix.len()..];
        Some(KvLine {
            name: prefix.trim_end(),
            line,
            kv: rest
                .split_ascii_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .collect(),
        })
    }

    /// The value of `k`.
    ///
    /// # Errors
    /// The line has no `k`.
    pub fn get(&self, k: &str) -> Result<&'a str> {
        self.kv
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
            .ok_or_else(|| anyhow!("{} line without `{k}`: {}", self.name, self.line))
    }

    /// The value of `k`, parsed.
    ///
    /// # Errors
    /// The line has no `k`, or it does not parse as `T`.
    pub fn num<T: std::str::FromStr>(&self, k: &str) -> Result<T>
    where
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        self.get(k)?
            .parse()
            .with_context(|| format!("{} `{k}` in {}", self.name, self.line))
    }
}

/// The `key=value` pairs of a `SIMBENCH` line, or `None` if `line` is not one.
pub fn parse_line(line: &str) -> Option<KvLine<'_>> {
    KvLine::parse(line, LINE_PREFIX)
}

/// The record of a `SIMBENCH` line.
pub fn parse_record(line: &str, accel: Accel) -> Result<SimRecord> {
    let kv = parse_line(line).ok_or_else(|| anyhow!("not a SIMBENCH line: {line}"))?;
    let (packets, busy_iters) = (kv.num("packets")?, kv.num("busy_iters")?);
    let delivered = kv.num("delivered")?;
    // The firewall drops denied frames by design: its busy iterations took every delivered one.
    let handled = if kv.get("mode")? == "acl" {
        delivered
    } else {
        packets
    };
    Ok(SimRecord {
        mode: kv.get("mode")?.to_string(),
        k: kv.num("k")?,
        // Lines from before `sim_size=` carried no size: 64 bytes.
        size: kv.num("size").unwrap_or(u64::from(DEFAULT_SIZE)),
        warmup: kv.num("warmup")?,
        iters: kv.num("iters")?,
        delivered,
        packets,
        out: kv.num("out")?,
        other: kv.num("other")?,
        cycles: kv.num("cycles")?,
        instructions_per_packet: kv.num("instructions_per_packet")?,
        kicks: kv.num("kicks")?,
        busy_iters,
        frames_per_busy_iter: frames_per_iter(handled, busy_iters),
        accel: accel.name().to_string(),
        icount: true,
        file_routes: None,
        dropped: kv.num("dropped").unwrap_or(0),
        acl_rules: kv.num("rules").ok(),
        acl_tuples: None,
        flows: kv.num("flows").ok(),
        nic: kv.get("nic").unwrap_or("virtio").to_string(),
        rdt_writes: kv.num("rdt").ok(),
        tdt_writes: kv.num("tdt").ok(),
        reg_reads: kv.num("reg_reads").ok(),
    })
}

/// `frames / iters` (0 when no iteration did work).
pub fn frames_per_iter(frames: u64, iters: u64) -> f64 {
    if iters == 0 {
        0.0
    } else {
        frames as f64 / iters as f64
    }
}

/// The kernel command line for one run.
pub fn append_for(mode: SimMode, k: u16, iters: Option<u32>, extra: &str) -> String {
    let mut a = match mode {
        SimMode::Router | SimMode::AclRouter => ROUTER_APPEND.to_string(),
        SimMode::Router6 => ROUTER6_APPEND.to_string(),
        SimMode::Nat => NAT_APPEND.to_string(),
        m => format!("mode={}", m.as_str()),
    };
    let _ = write!(a, " sim={k}");
    if let Some(n) = iters {
        let _ = write!(a, " sim_iters={n}");
    }
    if !extra.trim().is_empty() {
        a.push(' ');
        a.push_str(extra.trim());
    }
    a
}

/// The QEMU configuration of one run: one vCPU, no NIC, icount; router mode: the routes file
/// as the boot module; acl mode: the bundle of the first of `cfg.acl_rules`
/// ([`guest_config_acl`] for another).
pub fn guest_config(cfg: &SimBenchConfig, mode: SimMode, k: u16) -> GuestConfig {
    guest_config_acl(cfg, mode, k, cfg.acl_rules.first().copied())
}

/// [`guest_config`], the acl runs booting with the bundle of `rules` rules
/// ([`acl_bundle_path`]).
pub fn guest_config_acl(
    cfg: &SimBenchConfig,
    mode: SimMode,
    k: u16,
    rules: Option<usize>,
) -> GuestConfig {
    let initrd = |p: &Path| vec!["-initrd".to_string(), p.display().to_string()];
    let extra_args = match (&cfg.routes, mode, rules) {
        (Some(r), SimMode::Router, _) => initrd(r),
        (_, SimMode::Acl, Some(n)) => initrd(&acl_bundle_path(n)),
        (_, SimMode::AclRouter, Some(n)) => initrd(&acl_router_bundle_path(n)),
        _ => Vec::new(),
    };
    let mut append = append_for(mode, k, cfg.iters, &cfg.append);
    let size = run_size(cfg, mode);
    if size != DEFAULT_SIZE {
        let _ = write!(append, " sim_size={size}");
    }
    // Frames beyond Ethernet's 1,518 bytes: the ports get a 9,000-byte MTU (the simulated
    // devices offer none), as a jumbo set-up has (`xtask run --mtu 9000` sets QEMU's
    // `host_mtu`): the router forwards them whole instead of fragmenting, and every mode's RX
    // buffers are big enough for a whole frame (`VirtioNet::set_rx_buffer_pages`).
    if size > 1518 {
        append.push_str(" mtu0=9000 mtu1=9000");
    }
    GuestConfig {
        image: cfg.image.clone(),
        append,
        accel: cfg.accel,
        cpu: cfg.cpu.clone(),
        icount: true,
        cpus: 1,
        nics: 0,
        memory: cfg.memory.clone(),
        echo: cfg.echo,
        extra_args,
        ..GuestConfig::default()
    }
}

/// The frame size of `mode`'s runs: the configuration's, except `router6` at the default
/// 64 bytes, which runs [`ROUTER6_MIN_SIZE`].
pub fn run_size(cfg: &SimBenchConfig, mode: SimMode) -> u16 {
    match mode {
        SimMode::Router6 if cfg.size == DEFAULT_SIZE => ROUTER6_MIN_SIZE,
        _ => cfg.size,
    }
}

/// A routes file for the router runs: every line must parse (as the guest parses it), and no
/// route of it may take the benchmark's frames from the command line's first route (`append`:
/// the extra command line, as for [`append_for`]): none as long or longer contains their
/// destination, unless it is that very route. Returns the routes in the file.
///
/// # Errors
/// A bad line, or a route that would win for the destination, named with its line number.
pub fn check_routes_file(text: &str, append: &str) -> Result<usize> {
    let cmdline = append_for(SimMode::Router, 1, None, append);
    let cfg = netstack::Config::parse(&cmdline)
        .map_err(|e| anyhow!("router command line `{cmdline}`: {e:?}"))?;
    let addrs = netstack::simframes::router_addrs(&cfg)
        .ok_or_else(|| anyhow!("router command line `{cmdline}`: no benchmark addresses"))?;
    let first = cfg.router.routes.first().copied();
    let mut n = 0;
    for r in netstack::parse_routes_file(text) {
        let (line, (net, gw)) =
            r.map_err(|(line, l, why)| anyhow!("routes file line {line}: `{l}`: {why:?}"))?;
        n += 1;
        let Some((fnet, fgw)) = first else { continue };
        if net.contains(addrs.dst) && net.len >= fnet.len && (net, gw) != (fnet, fgw) {
            bail!(
                "routes file line {line}: {net},{gw} would route the benchmark's frames (to {}) instead of route={fnet},{fgw}: drop it from the file",
                addrs.dst
            );
        }
    }
    Ok(n)
}

/// `acl: N rules in T tuples …` in the guest's boot log: T.
fn acl_tuples_in(lines: &[String]) -> Option<u64> {
    lines.iter().find_map(|l| {
        let rest = &l[l.find("acl: ")? + "acl: ".len()..];
        let (_, rest) = rest.split_once(" rules in ")?;
        rest.split_once(" tuples")?.0.parse().ok()
    })
}

/// `router: N routes from the routes file` in the guest's boot log.
fn file_routes_in(lines: &[String]) -> Option<u64> {
    lines.iter().find_map(|l| {
        let rest = &l[l.find("router: ")? + "router: ".len()..];
        rest.strip_suffix(" routes from the routes file")?
            .parse()
            .ok()
    })
}

/// Boot one run and return its record. Fails (with the guest's last lines) unless the guest
/// printed a `SIMBENCH` line, every frame was forwarded as expected, and it shut down cleanly.
/// Acl mode runs with the first of `cfg.acl_rules` ([`run_one_acl`] for another).
pub fn run_one(cfg: &SimBenchConfig, mode: SimMode, k: u16) -> Result<SimRecord> {
    run_one_with_log(cfg, mode, k).map(|(r, _)| r)
}

/// [`run_one`] in acl mode with `rules` rules. Fails unless the guest built them, every
/// delivered frame was forwarded (as expected: untouched, in order) or dropped, and it cycled
/// through at least 1,024 distinct 5-tuples.
pub fn run_one_acl(cfg: &SimBenchConfig, rules: usize, k: u16) -> Result<SimRecord> {
    run_with_log(cfg, SimMode::Acl, k, Some(rules)).map(|(r, _)| r)
}

/// [`run_one`], also returning the guest's serial log.
pub fn run_one_with_log(
    cfg: &SimBenchConfig,
    mode: SimMode,
    k: u16,
) -> Result<(SimRecord, Vec<String>)> {
    run_with_log(cfg, mode, k, cfg.acl_rules.first().copied())
}

/// [`run_one_with_log`], acl mode with `rules` rules.
fn run_with_log(
    cfg: &SimBenchConfig,
    mode: SimMode,
    k: u16,
    rules: Option<usize>,
) -> Result<(SimRecord, Vec<String>)> {
    if mode.takes_rules() {
        let n = rules
            .ok_or_else(|| anyhow!("mode {} needs a rule count (--rules N)", mode.as_str()))?;
        match mode {
            SimMode::AclRouter => write_bundle(acl_router_bundle_path(n), &acl_router_bundle(n))?,
            _ => write_acl_bundle(n)?,
        };
    }
    let gcfg = guest_config_acl(cfg, mode, k, rules);
    let mut guest = Guest::boot(&gcfg)?;
    let exit = guest.wait_exit(RUN_TIMEOUT)?;
    let lines = guest.lines();
    let Some(line) = lines.iter().find(|l| parse_line(l).is_some()) else {
        bail!(
            "mode {} k={k}: no SIMBENCH line ({exit})\n{}",
            mode.as_str(),
            guest.tail_report()
        );
    };
    let mut r = parse_record(line, cfg.accel)?;
    if mode == SimMode::Router6 {
        // The guest's line says `mode=router`: its IPv6 frames are this run's.
        r.mode = mode.as_str().into();
    }
    r.file_routes = file_routes_in(&lines);
    if cfg.routes.is_some() && mode == SimMode::Router {
        ensure!(
            r.file_routes.is_some(),
            "mode router k={k}: the guest did not report the routes file's routes\n{}",
            guest.tail_report()
        );
    }
    ensure!(
        exit.is_clean(),
        "mode {} k={k}: {exit}\n{}",
        mode.as_str(),
        guest.tail_report()
    );
    if mode.takes_rules() {
        // The guest's SIMBENCH line names its rule count (`mode=router`'s too: the ACL in front).
        r.mode = mode.as_str().into();
        r.acl_tuples = acl_tuples_in(&lines);
        let want = rules.map(|n| n as u64);
        ensure!(
            r.acl_rules == want,
            "mode {} k={k}: the guest built {:?} rules, not {want:?}\n{}",
            mode.as_str(),
            r.acl_rules,
            guest.tail_report()
        );
    }
    if mode.takes_rules() {
        ensure!(
            r.delivered > 0
                && r.packets + r.dropped == r.delivered
                && r.out == r.packets
                && r.other == 0,
            "mode {} k={k}: not every frame was forwarded as expected or dropped: {line}",
            mode.as_str()
        );
        ensure!(
            r.flows.is_some_and(|f| f >= 1024),
            "mode {} k={k}: fewer than 1,024 distinct 5-tuples: {line}",
            mode.as_str()
        );
        return Ok((r, lines));
    }
    ensure!(
        r.packets > 0 && r.delivered == r.packets && r.out == r.packets && r.other == 0,
        "mode {} k={k}: not every frame was forwarded as expected: {line}",
        mode.as_str()
    );
    ensure!(
        r.reg_reads.unwrap_or(0) == 0,
        "mode {} k={k}: the driver read device registers in the measured iterations (want 0: DD bits come from descriptor memory): {line}",
        mode.as_str()
    );
    Ok((r, lines))
}

/// Every (mode, K) of `cfg`, in order; `progress` is called after each run.
pub fn run(cfg: &SimBenchConfig, mut progress: impl FnMut(&SimRecord)) -> Result<Vec<SimRecord>> {
    ensure!(
        !cfg.modes.is_empty() && !cfg.ks.is_empty(),
        "nothing to run"
    );
    let mut out = Vec::new();
    for &mode in &cfg.modes {
        if mode.takes_rules() {
            ensure!(
                !cfg.acl_rules.is_empty(),
                "mode {} needs rule counts (--rules N)",
                mode.as_str()
            );
            for &n in &cfg.acl_rules {
                for &k in &cfg.ks {
                    let r = run_with_log(cfg, mode, k, Some(n))?.0;
                    progress(&r);
                    out.push(r);
                }
            }
            continue;
        }
        for &k in &cfg.ks {
            let r = run_one(cfg, mode, k)?;
            progress(&r);
            out.push(r);
        }
    }
    Ok(out)
}

/// Parse `--k 1,4,32`.
pub fn parse_ks(s: &str) -> Result<Vec<u16>> {
    s.split(',')
        .map(|p| {
            let k: u16 = p
                .trim()
                .parse()
                .with_context(|| format!("--k: `{p}` is not a number"))?;
            ensure!((1..=256).contains(&k), "--k: {k} is not in 1..=256");
            Ok(k)
        })
        .collect()
}

/// Parse `--rules 10,1000,10000` (each 1..=10,000, the ACL's limit).
pub fn parse_rules(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|p| {
            let n: usize = p
                .trim()
                .parse()
                .with_context(|| format!("--rules: `{p}` is not a number"))?;
            ensure!(
                (1..=netstack::acl::MAX_RULES).contains(&n),
                "--rules: {n} is not in 1..={}",
                netstack::acl::MAX_RULES
            );
            Ok(n)
        })
        .collect()
}

/// The results table: mode, simulated NIC, frame size, K, instructions/packet, frames per busy
/// iteration (measured), packets, kicks, forwarded frames per `RDT` and per `TDT` write (DD-bit
/// NICs), accelerator, routes from the routes file, and for the acl rows the rules
/// and the classifier's tuples and the frames denied (instructions per *delivered* frame,
/// `packets` forwarded).
pub fn table(records: &[SimRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<7} {:<7} {:>5} {:>28} {:>20} {:>17} {:>8} {:>9} {:>15} {:>12} {:>12} {:>17} {:>8}",
        "mode",
        "nic",
        "size",
        "K (frames / busy poll iter)",
        "instructions/packet",
        "frames/busy iter",
        "packets",
        "kicks",
        "frames/RDT,TDT",
        "accelerator",
        "file routes",
        "acl rules/tuples",
        "denied"
    );
    for r in records {
        let accel = if r.icount {
            format!("{}+icount", r.accel)
        } else {
            r.accel.clone()
        };
        let routes = r.file_routes.map_or("-".to_string(), |n| n.to_string());
        let rules = match (r.acl_rules, r.acl_tuples) {
            (Some(n), Some(t)) => format!("{n}/{t}"),
            (Some(n), None) => n.to_string(),
            _ => "-".to_string(),
        };
        let denied = if r.acl_rules.is_some() {
            r.dropped.to_string()
        } else {
            "-".to_string()
        };
        let tails = match (r.frames_per_rdt(), r.frames_per_tdt()) {
            (Some(a), Some(b)) => format!("{a:.2},{b:.2}"),
            _ => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "{:<7} {:<7} {:>5} {:>28} {:>20.2} {:>17.2} {:>8} {:>9} {:>15} {:>12} {:>12} {:>17} {:>8}",
            r.mode,
            r.nic,
            r.size,
            r.k,
            r.instructions_per_packet,
            r.frames_per_busy_iter,
            r.packets,
            r.kicks,
            tails,
            accel,
            routes,
            rules,
            denied
        );
    }
    s
}

/// The JSON document `--json FILE` writes.
#[derive(Debug, Serialize)]
pub struct SimBenchJson<'a> {
    /// Extra kernel command line given with `--append`.
    pub append: &'a str,
    /// The routes file given with `--routes` (router runs), if any.
    pub routes_file: Option<&'a str>,
    /// The acl runs' rule counts (`--rules`): ClassBench-like rule sets of
    /// `netstack::acl::classbench::generate`, seed `BENCH_SEED`.
    pub acl_rules: &'a [usize],
    /// One record per (mode, K).
    pub records: &'a [SimRecord],
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "SIMBENCH mode=l2 k=4 warmup=256 iters=1024 delivered=4096 packets=4096 out=4096 other=0 cycles=1522944 instructions_per_packet=371.81 kicks=0 busy_iters=1024";

    #[test]
    fn parses_the_guest_line() {
        let r = parse_record(&format!("[serial] {LINE}"), Accel::Tcg).unwrap();
        assert_eq!((r.mode.as_str(), r.k, r.iters), ("l2", 4, 1024));
        assert_eq!(
            (r.delivered, r.packets, r.out, r.other),
            (4096, 4096, 4096, 0)
        );
        assert_eq!(r.cycles, 1_522_944);
        assert_eq!(r.instructions_per_packet, 371.81);
        assert_eq!((r.busy_iters, r.frames_per_busy_iter), (1024, 4.0));
        assert!(parse_line("STATS {}").is_none());
        assert!(parse_record("SIMBENCH mode=l2 k=4", Accel::Tcg).is_err());
        assert_eq!(r.nic, "virtio");
        assert_eq!(
            (r.rdt_writes, r.tdt_writes, r.reg_reads),
            (None, None, None)
        );
        assert_eq!(r.frames_per_rdt(), None);
    }

    #[test]
    fn parses_the_tail_writes_of_a_dd_nic() {
        let line = "SIMBENCH mode=l2 k=32 size=64 warmup=256 iters=1024 delivered=32768 packets=32768 out=32768 other=0 cycles=2752512 instructions_per_packet=84.00 kicks=0 busy_iters=1024 nic=e1000e rdt=1024 tdt=1024 reg_reads=0";
        let r = parse_record(line, Accel::Tcg).unwrap();
        assert_eq!(r.nic, "e1000e");
        assert_eq!(
            (r.rdt_writes, r.tdt_writes, r.reg_reads),
            (Some(1024), Some(1024), Some(0))
        );
        assert_eq!(
            (r.frames_per_rdt(), r.frames_per_tdt()),
            (Some(32.0), Some(32.0))
        );
    }

    #[test]
    fn command_lines() {
        assert_eq!(append_for(SimMode::L2, 4, None, ""), "mode=l2 sim=4");
        assert_eq!(
            append_for(SimMode::Router, 32, Some(64), " burst=64 "),
            format!("{ROUTER_APPEND} sim=32 sim_iters=64 burst=64")
        );
        let g = guest_config(&SimBenchConfig::new("/img".into()), SimMode::Io, 1);
        assert_eq!((g.cpus, g.nics, g.icount), (1, 0, true));
        let args = crate::qemu::command_args(&g).unwrap();
        assert!(!args.iter().any(|a| a.contains("virtio-net")), "{args:?}");
        assert!(args
            .windows(2)
            .any(|w| w == ["-icount", "shift=0,sleep=off"]));
    }

    #[test]
    fn routes_files_for_the_router_runs() {
        let mut cfg = SimBenchConfig::new("/img".into());
        cfg.routes = Some("/r.txt".into());
        let args = |m| guest_config(&cfg, m, 32).extra_args;
        assert_eq!(args(SimMode::Router), ["-initrd", "/r.txt"]);
        assert!(args(SimMode::L2).is_empty());
        let ok = "# comment\n1.0.0.0/8,10.0.1.2\n192.168.1.0/24,10.0.0.2\n\n192.168.0.0/16,10.0.1.2\n192.0.0.0/8,10.0.0.2\n";
        assert_eq!(check_routes_file(ok, "").unwrap(), 4);
        let e = check_routes_file("1.0.0.0/8,10.0.1.2\n192.168.0.0/24,10.0.0.2\n", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("192.168.0.1"), "{e}");
        assert!(check_routes_file("192.168.0.0/16,10.0.0.2\n", "").is_err());
        assert!(check_routes_file("nonsense\n", "").is_err());
        let log = ["[    0.4] router: 100000 routes from the routes file".to_string()];
        assert_eq!(file_routes_in(&log), Some(100_000));
        assert_eq!(file_routes_in(&[]), None);
    }

    #[test]
    fn acl_runs() {
        const ACL: &str = "SIMBENCH mode=acl k=4 size=64 warmup=256 iters=1024 delivered=4096 packets=1232 dropped=2864 out=1232 other=0 cycles=2711961 instructions_per_packet=662.10 kicks=0 busy_iters=1024 rules=10 flows=1024";
        let r = parse_record(ACL, Accel::Tcg).unwrap();
        assert_eq!(
            (r.delivered, r.packets, r.dropped, r.acl_rules, r.flows),
            (4096, 1232, 2864, Some(10), Some(1024))
        );
        assert_eq!(r.frames_per_busy_iter, 4.0);
        let r0 = parse_record(LINE, Accel::Tcg).unwrap();
        assert_eq!((r0.dropped, r0.acl_rules, r0.flows), (0, None, None));
        let log =
            ["[    0.3] acl: 10000 rules in 42 tuples (tuple-space search), 593 KiB".to_string()];
        assert_eq!(acl_tuples_in(&log), Some(42));
        let b = acl_bundle(10);
        assert!(b.starts_with("#!gannet-bundle 1\n--- rules\n# ClassBench-like ACL: 10 rules"));
        assert_eq!(
            b.lines()
                .filter(|l| l.starts_with("allow") || l.starts_with("deny"))
                .count(),
            10
        );
        let mut cfg = SimBenchConfig::new("/img".into());
        cfg.acl_rules = vec![1000, 10];
        let g = guest_config(&cfg, SimMode::Acl, 32);
        assert_eq!(g.append, "mode=acl sim=32");
        assert_eq!(
            g.extra_args,
            [
                "-initrd".to_string(),
                acl_bundle_path(1000).display().to_string()
            ]
        );
        assert!(guest_config(&cfg, SimMode::Io, 32).extra_args.is_empty());
        assert_eq!(parse_rules("10,1000,10000").unwrap(), DEFAULT_ACL_RULES);
        assert!(parse_rules("0").is_err() && parse_rules("10001").is_err());
        assert!(table(&[r]).contains("10"));
    }

    #[test]
    fn k_lists() {
        assert_eq!(parse_ks("1,4,32").unwrap(), vec![1, 4, 32]);
        assert!(parse_ks("0").is_err());
        assert!(parse_ks("257").is_err());
        assert!(parse_ks("4,x").is_err());
    }

    #[test]
    fn the_table_names_the_accelerator() {
        let r = parse_record(LINE, Accel::Tcg).unwrap();
        let t = table(&[r]);
        assert!(t.contains("instructions/packet"));
        assert!(t.contains("371.81"));
        assert!(t.contains("frames/busy iter"));
        assert!(t.contains("4.00"));
        assert!(t.contains("tcg+icount"));
    }
}
