//! Gannet appliances as libvirt domains (issue 35 item 4): the daemons installed and started
//! ([`ensure`]), a chain of appliances defined from the domain template `docs/libvirt-domain.xml`
//! ([`Chain`]), `ready` awaited on each serial console, traffic from the harness generator
//! through the chain ([`Chain::gen_config`]), and every domain stopped with `virsh shutdown` (the
//! ACPI power button), its state and reason reported ([`Chain::shutdown`]).
//!
//! Links: every port is a libvirt `<interface type='udp'>` (QEMU `-netdev socket,udp=`) on
//! 127.0.0.1; appliance k's port 1 and appliance k+1's port 0 send to each other, and the
//! generator ([`crate::gen`], [`GenConfig::udp`]) sits on the first appliance's port 0 and the
//! last one's port 1. libvirt has no interface type for QEMU's unix `dgram` netdev, and a tap
//! would need a bridge per link; UDP needs neither.
//!
//! Consoles: the template's `<serial type='file'>` writes COM1 to a file, which never blocks
//! the guest (a `unix` socket must be read by a connected client or the guest stalls on its
//! console writes); [`Chain::wait_ready`] polls the file, bounded. The cost: no console input,
//! so counters come from the final STATS line Gannet prints while it drains on the power
//! button. Each appliance's configuration is a fw_cfg file (`<sysinfo type='fwcfg'>`, entry
//! `opt/gannet/cmdline`), the kernel's per-instance keys (issue 35 item 3).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::gen::{guest_mac, peer_mac, GenConfig, GenReport, Generator, UdpPort};
use crate::qemu::Stats;
use crate::setup;

/// The domain template, `docs/libvirt-domain.xml` (placeholders `{name}`, …; [`domain_xml`]).
pub const TEMPLATE: &str = include_str!("../../../docs/libvirt-domain.xml");
/// The libvirt connection every `virsh` runs against.
pub const URI: &str = "qemu:///system";
/// The Debian packages of the daemons and `virsh`, from [`setup::BACKPORTS_SUITE`] on bookworm
/// (libvirt 11.3, beside QEMU 10.0).
pub const PACKAGES: [&str; 3] = [
    "libvirt-daemon-driver-qemu",
    "libvirt-daemon",
    "libvirt-clients",
];
/// The QEMU driver's configuration; [`ensure`] makes QEMU run as root there.
pub const QEMU_CONF: &str = "/etc/libvirt/qemu.conf";
/// How long one `virsh` may take before it is killed (a wedged daemon never hangs a run).
pub const VIRSH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemons get to answer after being started.
pub const DAEMON_TIMEOUT: Duration = Duration::from_secs(20);
/// How long every domain of a chain gets to print `gannet: ready` (TCG, booting together).
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a domain gets from `virsh shutdown` to `shut off`.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames per direction [`Chain::traffic`] sends one at a time first.
pub const WARM_UP: u64 = 8;
/// The console line that says an appliance forwards.
pub const READY: &str = "gannet: ready";

/// A named failure of the libvirt automation; each says what to run or where to look.
#[derive(Debug)]
pub enum LibvirtError {
    /// Not root: installing, starting the daemons and `qemu:///system` need it.
    NotRoot {
        /// The command to run instead.
        command: String,
    },
    /// The daemons did not answer `virsh uri` in time after being started.
    DaemonDown {
        /// `virsh`'s last error.
        detail: String,
    },
    /// A `virsh` command ran longer than [`VIRSH_TIMEOUT`] and was killed.
    VirshTimeout {
        /// The arguments.
        args: String,
    },
    /// A domain's console never said [`READY`] in time.
    NotReady {
        /// The domain.
        domain: String,
        /// How long was waited.
        waited: Duration,
        /// Its state then, and the console's last lines.
        state: String,
        /// The console file.
        console: PathBuf,
        /// Its last lines.
        tail: String,
    },
    /// A domain stopped before it was ready (a boot failure powers off through S5).
    StoppedBeforeReady {
        /// The domain.
        domain: String,
        /// `virsh domstate --reason`.
        state: String,
        /// The console's last lines.
        tail: String,
    },
    /// A domain was still not shut off [`SHUTDOWN_TIMEOUT`] after `virsh shutdown` (then
    /// destroyed).
    ShutdownTimeout {
        /// The domain.
        domain: String,
        /// Its state when given up.
        state: String,
    },
}

impl fmt::Display for LibvirtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibvirtError::NotRoot { command } => write!(
                f,
                "LibvirtError::NotRoot: libvirt's system daemons need root; run: {command}"
            ),
            LibvirtError::DaemonDown { detail } => write!(
                f,
                "LibvirtError::DaemonDown: libvirtd did not answer on {URI} within {DAEMON_TIMEOUT:?} \
                 ({detail}); start it with `virtlogd -d && libvirtd -d` (as root) or run \
                 `cargo xtask libvirt setup`"
            ),
            LibvirtError::VirshTimeout { args } => write!(
                f,
                "LibvirtError::VirshTimeout: `virsh -c {URI} {args}` took over {VIRSH_TIMEOUT:?} \
                 and was killed; is libvirtd wedged? (`cargo xtask libvirt status`)"
            ),
            LibvirtError::NotReady {
                domain,
                waited,
                state,
                console,
                tail,
            } => write!(
                f,
                "LibvirtError::NotReady: domain {domain} did not print `{READY}` within \
                 {waited:?} (state {state}; console {}):\n{tail}",
                console.display()
            ),
            LibvirtError::StoppedBeforeReady {
                domain,
                state,
                tail,
            } => write!(
                f,
                "LibvirtError::StoppedBeforeReady: domain {domain} is {state} before `{READY}`:\n{tail}"
            ),
            LibvirtError::ShutdownTimeout { domain, state } => write!(
                f,
                "LibvirtError::ShutdownTimeout: domain {domain} still {state} {SHUTDOWN_TIMEOUT:?} \
                 after `virsh shutdown`; destroyed"
            ),
        }
    }
}

impl std::error::Error for LibvirtError {}

/// Runs `virsh -c URI args…`, killed after [`VIRSH_TIMEOUT`]; its stdout, trimmed. Errors:
/// `virsh` missing, a non-zero status (with its stderr), [`LibvirtError::VirshTimeout`].
pub fn virsh(args: &[&str]) -> Result<String> {
    let joined = args.join(" ");
    let mut child = Command::new("virsh")
        .args(["-c", URI])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!("running virsh {joined}; is libvirt installed? (`cargo xtask libvirt setup`)")
        })?;
    let deadline = Instant::now() + VIRSH_TIMEOUT;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LibvirtError::VirshTimeout { args: joined }.into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "virsh -c {URI} {joined}: {} ({})",
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether a process named `name` (its `/proc/PID/comm`) runs.
fn running(name: &str) -> bool {
    std::fs::read_dir("/proc").is_ok_and(|rd| {
        rd.flatten()
            .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name))
    })
}

/// The apt command that installs [`PACKAGES`] (from backports on bookworm).
fn install_command(bookworm: bool) -> String {
    let suite = if bookworm {
        format!("-t {} ", setup::BACKPORTS_SUITE)
    } else {
        String::new()
    };
    format!(
        "apt-get update && apt-get install -y --no-install-recommends {suite}{}",
        PACKAGES.join(" ")
    )
}

/// Makes libvirt usable: as root, installs [`PACKAGES`] when `virsh` or `libvirtd` is missing
/// (bookworm: from [`setup::BACKPORTS_SUITE`], adding that apt source as QEMU's set-up does),
/// sets `user`/`group = "root"` in [`QEMU_CONF`], starts `virtlogd -d` and `libvirtd -d` when
/// not running and waits (bounded) until `virsh uri` answers; also [`setup::ensure_qemu`].
/// Prints what it changes. Errors: [`LibvirtError::NotRoot`] naming the command,
/// [`LibvirtError::DaemonDown`], apt failures.
pub fn ensure() -> Result<()> {
    if !setup::is_root() {
        return Err(LibvirtError::NotRoot {
            command: "sudo cargo xtask libvirt setup".into(),
        }
        .into());
    }
    setup::ensure_qemu()?;
    let missing = |t: &str| setup::which(t).is_none() && !Path::new("/usr/sbin").join(t).is_file();
    if missing("virsh") || missing("libvirtd") || missing("virtlogd") {
        let bookworm = setup::os_codename().as_deref() == Some("bookworm");
        if bookworm && !setup::backports_configured() {
            // The QEMU set-up writes the source; run it for that alone.
            setup::install_qemu("adding bookworm-backports for libvirt")?;
        }
        let cmd = install_command(bookworm);
        eprintln!("libvirt: not installed; running `{cmd}`");
        let ok = Command::new("sh")
            .args(["-c", &cmd])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get")?
            .success();
        if !ok {
            bail!("installing libvirt failed; run `{cmd}` yourself");
        }
    }
    if configure_qemu_conf()? && running("libvirtd") {
        eprintln!(
            "libvirt: libvirtd already runs and reads {QEMU_CONF} only at start: its domains \
             run as before until it is restarted"
        );
    }
    for (daemon, exe) in [("virtlogd", "virtlogd"), ("libvirtd", "libvirtd")] {
        if !running(daemon) {
            eprintln!("libvirt: starting `{exe} -d`");
            let ok = Command::new(exe)
                .arg("-d")
                .status()
                .or_else(|_| {
                    Command::new(Path::new("/usr/sbin").join(exe))
                        .arg("-d")
                        .status()
                })
                .with_context(|| format!("running {exe} -d"))?
                .success();
            if !ok {
                bail!("`{exe} -d` failed; see /var/log/libvirt/");
            }
        }
    }
    let deadline = Instant::now() + DAEMON_TIMEOUT;
    loop {
        match virsh(&["uri"]) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(LibvirtError::DaemonDown {
                    detail: format!("{e:#}"),
                }
                .into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// `user = "root"` and `group = "root"` in [`QEMU_CONF`] (appended when no uncommented line sets
/// them; a running libvirtd reads it only at start). Whether it changed the file.
fn configure_qemu_conf() -> Result<bool> {
    let text = std::fs::read_to_string(QEMU_CONF).unwrap_or_default();
    let mut add = String::new();
    for key in ["user", "group"] {
        let set = text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with(key) && l[key.len()..].trim_start().starts_with('=')
        });
        if !set {
            add += &format!("{key} = \"root\"\n");
        }
    }
    if !add.is_empty() {
        eprintln!("libvirt: appending to {QEMU_CONF}:\n{add}");
        std::fs::create_dir_all("/etc/libvirt").context("creating /etc/libvirt")?;
        std::fs::write(QEMU_CONF, format!("{text}\n{add}"))
            .with_context(|| format!("writing {QEMU_CONF}"))?;
    }
    Ok(!add.is_empty())
}

/// `s` with XML's special characters escaped, for an attribute or element text.
fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// `aa:bb:…` of a MAC.
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One appliance of a [`Chain`]: a domain with two UDP ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appliance {
    /// The domain's name.
    pub name: String,
    /// Its configuration keys (fw_cfg `opt/gannet/cmdline`, laid over the kernel command line).
    pub cmdline: String,
    /// The ports' MACs.
    pub macs: [[u8; 6]; 2],
    /// Per port, the UDP port QEMU binds on 127.0.0.1.
    pub local: [u16; 2],
    /// Per port, where it sends.
    pub remote: [u16; 2],
    /// The console file.
    pub console: PathBuf,
}

/// The template filled in for `a` booting `kernel`. Errors: a placeholder left (a template
/// that names one this code does not know).
pub fn domain_xml(a: &Appliance, kernel: &Path) -> Result<String> {
    let mut x = TEMPLATE.to_string();
    // The template's leading comment names the placeholders: drop it first.
    if let Some(end) = x.find("-->") {
        x = x[end + 3..].trim_start().to_string();
    }
    let subs = [
        ("{name}", xml_escape(&a.name)),
        ("{kernel}", xml_escape(&kernel.display().to_string())),
        ("{cmdline}", xml_escape(&a.cmdline)),
        ("{mac0}", mac_str(a.macs[0])),
        ("{mac1}", mac_str(a.macs[1])),
        ("{local0}", a.local[0].to_string()),
        ("{local1}", a.local[1].to_string()),
        ("{remote0}", a.remote[0].to_string()),
        ("{remote1}", a.remote[1].to_string()),
        ("{console}", xml_escape(&a.console.display().to_string())),
    ];
    for (k, v) in subs {
        x = x.replace(k, &v);
    }
    if let Some(at) = x.find('{') {
        bail!(
            "docs/libvirt-domain.xml: unknown placeholder at `{}`",
            &x[at..x.len().min(at + 20)]
        );
    }
    Ok(x)
}

/// A mode of one appliance of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `mode=l2`: MACs rewritten towards the neighbours.
    L2,
    /// `mode=router` with 10.0.0.1/24 and 10.0.1.1/24 (at most one per chain).
    Router,
}

impl Mode {
    /// `l2`, `router`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::L2 => "l2",
            Mode::Router => "router",
        }
    }
}

/// The MAC of appliance `k`'s port `p` in a chain of `n`: the generator's [`guest_mac`] on the
/// chain's two ends, `02:00:00:00:(0x10+k):0(p+1)` inside.
fn chain_mac(k: usize, p: usize, n: usize) -> [u8; 6] {
    if (k == 0 && p == 0) || (k + 1 == n && p == 1) {
        guest_mac(p)
    } else {
        [0x02, 0, 0, 0, 0x10 + k as u8, p as u8 + 1]
    }
}

/// The command line of appliance `k` of `modes`: l2 names its neighbours' MACs as its peers
/// (the generator's [`peer_mac`] at the ends), the router gets the generator's subnets.
pub fn chain_cmdline(modes: &[Mode], k: usize) -> String {
    let n = modes.len();
    match modes[k] {
        Mode::Router => "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24".into(),
        Mode::L2 => {
            let peer0 = if k == 0 {
                peer_mac(0)
            } else {
                chain_mac(k - 1, 1, n)
            };
            let peer1 = if k + 1 == n {
                peer_mac(1)
            } else {
                chain_mac(k + 1, 0, n)
            };
            format!("mode=l2 peer0={} peer1={}", mac_str(peer0), mac_str(peer1))
        }
    }
}

/// Appliances in series as libvirt domains, and the generator's ports at the two ends. Link i
/// (0 = generator to the first appliance, n = the last to the generator) uses UDP ports
/// `base + 2i` (left side) and `base + 2i + 1` (right side). Dropping it destroys and
/// undefines every domain it defined (cleanup even when a test fails).
#[derive(Debug)]
pub struct Chain {
    /// The appliances, in order.
    pub appliances: Vec<Appliance>,
    base: u16,
    routers: usize,
    defined: Vec<String>,
}

/// One domain's end: `virsh domstate --reason`, and the final STATS its console printed.
#[derive(Debug)]
pub struct Stopped {
    /// The domain.
    pub name: String,
    /// E.g. `shut off (shutdown)`.
    pub state: String,
    /// The last STATS line on its console (the drain prints one), if any.
    pub stats: Option<Stats>,
    /// Whether the console says `gannet: shutdown clean`.
    pub clean: bool,
}

impl Chain {
    /// A chain named `prefix-K-MODE` (K from 1) with consoles `console_dir/NAME.log` and UDP
    /// ports from `base`. Defines nothing yet. Errors: no appliance, more than one router
    /// (their subnets would need routes), ports past 65535.
    pub fn plan(prefix: &str, modes: &[Mode], console_dir: &Path, base: u16) -> Result<Chain> {
        let n = modes.len();
        anyhow::ensure!(n >= 1, "a chain needs at least one appliance");
        let routers = modes.iter().filter(|&&m| m == Mode::Router).count();
        anyhow::ensure!(
            routers <= 1,
            "at most one router in a chain (the generator's subnets 10.0.0.0/24 and 10.0.1.0/24)"
        );
        anyhow::ensure!(
            u32::from(base) + 2 * (n as u32) < 65535,
            "UDP ports from {base} do not fit {n} appliances"
        );
        let port = |i: usize| base + i as u16;
        let appliances = (0..n)
            .map(|k| {
                let name = format!("{prefix}-{}-{}", k + 1, modes[k].as_str());
                Appliance {
                    console: console_dir.join(format!("{name}.log")),
                    name,
                    cmdline: chain_cmdline(modes, k),
                    macs: [chain_mac(k, 0, n), chain_mac(k, 1, n)],
                    // Port 0: the right side of link k; port 1: the left side of link k+1.
                    local: [port(2 * k + 1), port(2 * (k + 1))],
                    remote: [port(2 * k), port(2 * (k + 1) + 1)],
                }
            })
            .collect();
        Ok(Chain {
            appliances,
            base,
            routers,
            defined: Vec::new(),
        })
    }

    /// The generator's UDP ports: port 0 on link 0's left side, port 1 on link n's right side;
    /// received frames must have crossed the router (TTL 63) if there is one.
    pub fn gen_config(&self, base: GenConfig) -> GenConfig {
        let n = self.appliances.len();
        let addr = |p: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
        GenConfig {
            udp: Some([
                UdpPort {
                    host: addr(self.base),
                    guest: addr(self.base + 1),
                },
                UdpPort {
                    host: addr(self.base + 2 * n as u16 + 1),
                    guest: addr(self.base + 2 * n as u16),
                },
            ]),
            expect_ttl: (self.routers > 0).then_some(64 - self.routers as u8),
            ..base
        }
    }

    /// Traffic through the chain both ways: first `WARM_UP` frames per direction one at a time
    /// (a router resolves its next hops by ARP then; frames arriving at a full window before
    /// that would overflow its hold queue), then `frames` per direction at `base`'s window.
    /// Returns both reports (warm-up, main). Errors: binding the UDP ports, the generator.
    pub fn traffic(&self, base: GenConfig, frames: u64) -> Result<[GenReport; 2]> {
        let mut g = Generator::bind(&self.gen_config(GenConfig {
            count: Some(WARM_UP),
            window: 1,
            bidir: true,
            ..base.clone()
        }))?;
        let warm = g.run().context("warm-up traffic")?;
        drop(g);
        g = Generator::bind(&self.gen_config(GenConfig {
            count: Some(frames),
            bidir: true,
            ..base
        }))?;
        let main = g.run().context("traffic")?;
        Ok([warm, main])
    }

    /// Defines and starts every appliance booting `kernel` (a leftover domain of the same name
    /// is destroyed and undefined first).
    pub fn start(&mut self, kernel: &Path) -> Result<()> {
        let kernel = kernel
            .canonicalize()
            .with_context(|| format!("kernel image {}", kernel.display()))?;
        for a in &self.appliances {
            remove_domain(&a.name);
            if let Some(d) = a.console.parent() {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            }
            let _ = std::fs::remove_file(&a.console);
            let xml_path = a.console.with_extension("xml");
            std::fs::write(&xml_path, domain_xml(a, &kernel)?)
                .with_context(|| format!("writing {}", xml_path.display()))?;
            virsh(&["define", &xml_path.display().to_string()])?;
            self.defined.push(a.name.clone());
            virsh(&["start", &a.name])?;
        }
        Ok(())
    }

    /// Waits until every console printed [`READY`], polling the files, at most `timeout` in
    /// all. Errors: [`LibvirtError::StoppedBeforeReady`], [`LibvirtError::NotReady`].
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        for a in &self.appliances {
            loop {
                let text = std::fs::read_to_string(&a.console).unwrap_or_default();
                if text.lines().any(|l| l.contains(READY)) {
                    break;
                }
                let state = domstate(&a.name).unwrap_or_else(|e| format!("? ({e:#})"));
                if !state.starts_with("running") {
                    return Err(LibvirtError::StoppedBeforeReady {
                        domain: a.name.clone(),
                        state,
                        tail: tail(&text),
                    }
                    .into());
                }
                if start.elapsed() >= timeout {
                    return Err(LibvirtError::NotReady {
                        domain: a.name.clone(),
                        waited: start.elapsed(),
                        state,
                        console: a.console.clone(),
                        tail: tail(&text),
                    }
                    .into());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// `virsh shutdown --mode acpi` to every appliance not shut off yet, then waits (bounded) until each is shut
    /// off, and reads its state, reason and final STATS. A domain still up after
    /// [`SHUTDOWN_TIMEOUT`] is destroyed: [`LibvirtError::ShutdownTimeout`].
    pub fn shutdown(&self) -> Result<Vec<Stopped>> {
        for a in &self.appliances {
            // One already shut off (a guest that powered off on its own) is reported as it is.
            if !domstate(&a.name)?.starts_with("shut off") {
                virsh(&["shutdown", &a.name, "--mode", "acpi"])?;
            }
        }
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        let mut out = Vec::new();
        for a in &self.appliances {
            let state = loop {
                let s = domstate(&a.name)?;
                if s.starts_with("shut off") {
                    break s;
                }
                if Instant::now() >= deadline {
                    let _ = virsh(&["destroy", &a.name]);
                    return Err(LibvirtError::ShutdownTimeout {
                        domain: a.name.clone(),
                        state: s,
                    }
                    .into());
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let text = std::fs::read_to_string(&a.console).unwrap_or_default();
            let stats = text
                .lines()
                .rev()
                .find_map(Stats::from_line)
                .transpose()
                .with_context(|| format!("{}'s console {}", a.name, a.console.display()))?;
            out.push(Stopped {
                name: a.name.clone(),
                state,
                stats,
                clean: text.contains("gannet: shutdown clean"),
            });
        }
        Ok(out)
    }

    /// The console's last lines of every appliance, for a failure message.
    pub fn tails(&self) -> String {
        self.appliances
            .iter()
            .map(|a| {
                let t = std::fs::read_to_string(&a.console).unwrap_or_default();
                format!("--- {} ({})\n{}", a.name, a.console.display(), tail(&t))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The domains `names`, already defined (by `cargo xtask libvirt up`), consoles in
    /// `console_dir/NAME.log`; undefined when dropped. Only [`Chain::shutdown`],
    /// [`Chain::tails`] and the drop use it (ports and command lines are left empty).
    pub fn from_defined(names: &[String], console_dir: &Path) -> Chain {
        Chain {
            appliances: names
                .iter()
                .map(|n| Appliance {
                    name: n.clone(),
                    cmdline: String::new(),
                    macs: [[0; 6]; 2],
                    local: [0; 2],
                    remote: [0; 2],
                    console: console_dir.join(format!("{n}.log")),
                })
                .collect(),
            base: 0,
            routers: 0,
            defined: names.to_vec(),
        }
    }

    /// Leaves the domains defined when dropped (`cargo xtask libvirt up`).
    pub fn keep(mut self) {
        self.defined.clear();
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        for name in &self.defined {
            remove_domain(name);
        }
    }
}

/// `virsh domstate NAME --reason`, e.g. `shut off (shutdown)`.
pub fn domstate(name: &str) -> Result<String> {
    virsh(&["domstate", name, "--reason"])
}

/// Destroys (if running) and undefines `name`, ignoring "no such domain".
pub fn remove_domain(name: &str) {
    let _ = virsh(&["destroy", name]);
    let _ = virsh(&["undefine", name]);
}

/// Every defined domain whose name starts with `prefix`, with its state and reason.
pub fn list(prefix: &str) -> Result<Vec<(String, String)>> {
    let names = virsh(&["list", "--all", "--name"])?;
    names
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(prefix))
        .map(|n| Ok((n.to_string(), domstate(n)?)))
        .collect()
}

/// The last 20 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_fills_and_chain_links_meet() {
        let c = Chain::plan(
            "t",
            &[Mode::L2, Mode::Router, Mode::L2],
            Path::new("/tmp/c"),
            40000,
        )
        .unwrap();
        let a = &c.appliances;
        assert_eq!(a[1].name, "t-2-router");
        // Each link's two sides send to each other.
        assert_eq!((a[0].local[1], a[0].remote[1]), (40002, 40003));
        assert_eq!((a[1].local[0], a[1].remote[0]), (40003, 40002));
        assert_eq!((a[1].local[1], a[2].local[0]), (40004, 40005));
        let g = c.gen_config(GenConfig::default());
        let u = g.udp.unwrap();
        assert_eq!((u[0].host.port(), u[0].guest.port()), (40000, 40001));
        assert_eq!((u[1].host.port(), u[1].guest.port()), (40007, 40006));
        assert_eq!(g.expect_ttl, Some(63));
        assert_eq!(
            a[0].cmdline,
            "mode=l2 peer0=02:00:00:00:0a:02 peer1=02:00:00:00:11:01"
        );
        assert_eq!(
            a[2].cmdline,
            "mode=l2 peer0=02:00:00:00:11:02 peer1=02:00:00:00:0b:02"
        );
        let x = domain_xml(&a[1], Path::new("/k/gannet")).unwrap();
        assert!(x.contains(
            "<entry name='opt/gannet/cmdline'>mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24</entry>"
        ));
        assert!(x.contains("<local address='127.0.0.1' port='40003'/>"));
        assert!(x.contains("<source path='/tmp/c/t-2-router.log'/>"));
        assert!(!x.contains("qemu:commandline") && !x.contains('{'));
        assert!(Chain::plan("t", &[Mode::Router, Mode::Router], Path::new("/"), 1).is_err());
    }
}
