//! The Linux peer guest of `cargo xtask bench --peer linux` (issue 6): Debian's
//! `linux-image-6.1.0-*-amd64` kernel and `busybox-static` in a small initramfs, booted by the
//! same QEMU command line as Gannet (same two virtio-net ports, MACs, dgram backend).
//!
//! Everything comes from Debian packages (no kernel compile): `apt-get download` into
//! `<target>/peer-linux/debs` (kept, so a second run does not download), `dpkg-deb -x`, then an
//! uncompressed newc initramfs holding busybox, [`INIT`] and the modules the kernel does not have
//! built in (virtio_pci, virtio_net, bridge and their dependencies, resolved from each module's
//! `.modinfo` `depends=`).
//!
//! The guest's `/init` configures `peer_mode=l2` (bridge, STP off, forward delay 0) or
//! `peer_mode=l3` (10.0.0.1/24, 10.0.1.1/24, `ip_forward=1`, static ARP for the generator's
//! sides; with `peer_sysctl=diff` also the sysctls of the differential test, see
//! [`differential_config`]), prints [`READY_MARKER`] and then answers console commands without
//! prompt or echo: `st TAG` prints `PEERSTAT TAG cpu …` (the first line of `/proc/stat`), `tl
//! TAG` prints `PEERTL TAG now idle iowait` (ns, from `/proc/timer_list`; see [`timer_ns`]),
//! `quit` powers off.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::qemu::{self, Accel, Echo, Guest, GuestConfig};

/// The guest's `/init` script.
pub const INIT: &str = include_str!("../assets/peer-linux-init.sh");
/// The line the guest prints once both ports forward.
pub const READY_MARKER: &str = "peer: ready";
/// Prefix of the `/proc/stat` answer.
pub const STAT_PREFIX: &str = "PEERSTAT ";
/// Prefix of the `/proc/timer_list` answer.
pub const TL_PREFIX: &str = "PEERTL ";
/// Modules the peer needs (with their dependencies) unless built in.
pub const MODULES: [&str; 3] = ["virtio_pci", "virtio_net", "bridge"];
/// Debian's meta package naming the current kernel.
pub const KERNEL_META: &str = "linux-image-amd64";
/// Busybox, statically linked.
pub const BUSYBOX: &str = "busybox-static";
/// Time allowed for the Linux guest to boot (TCG with `-icount` is slow).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// `USER_HZ`: the unit of `/proc/stat` times.
pub const USER_HZ: f64 = 100.0;

/// Forwarding mode of the Linux peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMode {
    /// Bridge the two ports (`brctl`).
    L2,
    /// IPv4 forwarding between 10.0.0.0/24 and 10.0.1.0/24.
    L3,
}

impl PeerMode {
    /// "l2" or "l3".
    pub fn name(self) -> &'static str {
        match self {
            PeerMode::L2 => "l2",
            PeerMode::L3 => "l3",
        }
    }
}

/// A prepared Linux guest: kernel and initramfs.
#[derive(Debug, Clone)]
pub struct LinuxPeer {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Kernel release, e.g. `6.1.0-57-amd64`.
    pub release: String,
}

/// The cache directory: `<target>/peer-linux`.
pub fn cache_dir() -> PathBuf {
    qemu::target_dir(&qemu::workspace_root()).join("peer-linux")
}

/// Runs `cmd` to completion; its stdout, or an error naming the command, its exit status and
/// stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest `PREFIX*.deb` in `dir` (by name), if any.
pub fn find_deb(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".deb"))
        })
        .collect();
    v.sort();
    v.pop()
}

/// The real kernel package behind `linux-image-amd64` (`apt-cache depends`).
fn kernel_package() -> Result<String> {
    let out = run(Command::new("apt-cache").args(["depends", KERNEL_META]))
        .context("apt-cache depends linux-image-amd64 (is this a Debian system with apt?)")?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
        .map(str::to_string)
        .context("apt-cache depends linux-image-amd64 names no linux-image-*-amd64 package")
}

/// Makes sure both `.deb`s are in `debs`, downloading them with `apt-get download` if not
/// (as root, after one `apt-get update` if the first try fails).
fn ensure_debs(debs: &Path) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(debs).with_context(|| format!("creating {}", debs.display()))?;
    let have = (
        find_deb(debs, "linux-image-6"),
        find_deb(debs, "busybox-static_"),
    );
    if let (Some(k), Some(b)) = have {
        return Ok((k, b));
    }
    let help = format!(
        "the Linux peer needs Debian's {KERNEL_META} kernel and {BUSYBOX}, fetched with \
         `apt-get download` (network access to a Debian mirror, and `apt-get update` once). \
         Alternatively put linux-image-6.*-amd64_*.deb and busybox-static_*.deb in {}",
        debs.display()
    );
    let download = || -> Result<(PathBuf, PathBuf)> {
        let kpkg = kernel_package()?;
        apt_download_once(debs, &[kpkg.as_str(), BUSYBOX])?;
        match (
            find_deb(debs, "linux-image-6"),
            find_deb(debs, "busybox-static_"),
        ) {
            (Some(k), Some(b)) => Ok((k, b)),
            _ => bail!(
                "apt-get download succeeded but the .debs are not in {}",
                debs.display()
            ),
        }
    };
    with_apt_update(download).with_context(|| help.clone())
}

/// The kernel and busybox `.deb`s of the Linux peer, in `<target>/peer-linux/debs` (downloaded
/// once; the DPDK peer boots the same kernel and busybox).
pub fn kernel_debs() -> Result<(PathBuf, PathBuf)> {
    ensure_debs(&cache_dir().join("debs"))
}

/// Runs `f` (an `apt-get download` step); if it fails and we are root, runs `apt-get update`
/// once and runs `f` again. A fresh Debian machine (or container) has no package lists, and old
/// lists name packages the mirror no longer has.
pub fn with_apt_update<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    match f() {
        Ok(v) => Ok(v),
        Err(e) if is_root() => {
            eprintln!("xtask: peer: {e:#}\nxtask: peer: running `apt-get update` and retrying");
            let ok = Command::new("apt-get")
                .args(["update", "-qq"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            ensure!(ok, "apt-get update failed (after: {e:#})");
            f()
        }
        Err(e) => Err(e),
    }
}

/// `apt-get download PKG…` into `dir` (one try). Errors name the command and its stderr.
pub fn apt_download_once(dir: &Path, pkgs: &[&str]) -> Result<()> {
    eprintln!(
        "xtask: peer: apt-get download {} into {}",
        pkgs.join(" "),
        dir.display()
    );
    let out = Command::new("apt-get")
        .current_dir(dir)
        .arg("download")
        .args(pkgs)
        .output()
        .context("running apt-get")?;
    ensure!(
        out.status.success(),
        "apt-get download {} failed ({}):\n{}",
        pkgs.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Reads a module, decompressing `.ko.xz` / `.ko.zst` / `.ko.gz` with Debian's tools.
fn read_module(p: &Path) -> Result<Vec<u8>> {
    let name = p.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else if name.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => std::fs::read(p).with_context(|| format!("reading {}", p.display())),
        Some(t) => {
            let out = Command::new(t)
                .arg("-dc")
                .arg(p)
                .output()
                .with_context(|| format!("running {t} -dc (install it to unpack {name})"))?;
            ensure!(out.status.success(), "{t} -dc {name} failed");
            Ok(out.stdout)
        }
    }
}

/// The `depends=` list of a module's `.modinfo`.
pub fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    let mut i = 0;
    while let Some(pos) = ko[i..].windows(key.len()).position(|w| w == key) {
        let at = i + pos;
        // Must start a NUL-separated modinfo string.
        if at == 0 || ko[at - 1] == 0 {
            let rest = &ko[at + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            return String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        i = at + 1;
    }
    Vec::new()
}

fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// Index of the kernel's loadable modules: normalised name -> path.
fn module_index(moddir: &Path) -> Result<std::collections::HashMap<String, PathBuf>> {
    let mut idx = std::collections::HashMap::new();
    let mut stack = vec![moddir.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let fname = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if let Some(pos) = fname.find(".ko") {
                idx.insert(norm(&fname[..pos]), p.clone());
            }
        }
    }
    Ok(idx)
}

/// Modules built into the kernel (`modules.builtin`), normalised names.
fn builtin(moddir: &Path) -> Result<std::collections::HashSet<String>> {
    let text = std::fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default();
    Ok(text
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter_map(|f| f.split(".ko").next())
        .map(norm)
        .collect())
}

/// The modules to load, dependencies first, with their (decompressed) contents.
pub fn resolve_modules(moddir: &Path, want: &[&str]) -> Result<Vec<(String, Vec<u8>)>> {
    let idx = module_index(moddir)?;
    let built = builtin(moddir)?;
    let mut order: Vec<(String, Vec<u8>)> = Vec::new();
    fn visit(
        name: &str,
        idx: &std::collections::HashMap<String, PathBuf>,
        built: &std::collections::HashSet<String>,
        order: &mut Vec<(String, Vec<u8>)>,
        depth: usize,
    ) -> Result<()> {
        let name = norm(name);
        ensure!(depth < 32, "module dependency loop at {name}");
        if built.contains(&name) || order.iter().any(|(n, _)| *n == name) {
            return Ok(());
        }
        let path = idx
            .get(&name)
            .with_context(|| format!("module {name} is neither built in nor in the package"))?;
        let data = read_module(path)?;
        for d in module_depends(&data) {
            visit(&d, idx, built, order, depth + 1)?;
        }
        order.push((name, data));
        Ok(())
    }
    for w in want {
        visit(w, &idx, &built, &mut order, 0)?;
    }
    Ok(order)
}

// ---------------------------------------------------------------------------------------------
// newc cpio

/// A minimal newc ("070701") cpio writer.
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpio {
    pub fn new() -> Cpio {
        Cpio {
            buf: Vec::new(),
            ino: 1,
        }
    }

    fn pad4(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let fields = [
            self.ino,
            mode,
            0,
            0,
            if mode & 0o170000 == 0o040000 { 2 } else { 1 },
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            let _ = write!(self.buf, "{f:08x}");
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad4();
        self.buf.extend_from_slice(data);
        self.pad4();
    }

    /// A directory (mode 0755).
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, (0, 0), &[]);
    }

    /// A regular file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, (0, 0), data);
    }

    /// A character device node.
    pub fn chardev(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020600, (major, minor), &[]);
    }

    /// Appends the trailer and returns the archive.
    /// Kernel modules as `lib/modules/NAME.ko` plus `modules.order` listing them in order
    /// (what the guests' `init` loads with `insmod`).
    pub fn modules(&mut self, modules: &[(String, Vec<u8>)]) {
        let mut order = String::new();
        for (name, data) in modules {
            self.file(&format!("lib/modules/{name}.ko"), 0o644, data);
            order.push_str(name);
            order.push('\n');
        }
        self.file("modules.order", 0o644, order.as_bytes());
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.buf
    }
}

/// Builds the initramfs image (uncompressed newc).
pub fn initramfs(busybox: &[u8], modules: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut c = Cpio::new();
    for d in ["bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"] {
        c.dir(d);
    }
    c.chardev("dev/console", 5, 1);
    c.chardev("dev/null", 1, 3);
    c.file("bin/busybox", 0o755, busybox);
    c.file("init", 0o755, INIT.as_bytes());
    c.modules(modules);
    c.finish()
}

/// A Debian kernel and busybox unpacked from their `.deb`s ([`unpack_kernel`]).
pub struct Unpacked {
    /// Kernel release, e.g. `6.1.0-57-amd64`.
    pub release: String,
    /// `boot/vmlinuz-<release>` under the unpack directory.
    pub vmlinuz: PathBuf,
    /// `lib/modules/<release>` under the unpack directory.
    pub moddir: PathBuf,
    /// The static `bin/busybox`.
    pub busybox: Vec<u8>,
}

/// Unpacks the kernel and busybox `.deb`s into `root` (emptied first) with `dpkg-deb -x`.
pub fn unpack_kernel(kdeb: &Path, bdeb: &Path, root: &Path) -> Result<Unpacked> {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    for deb in [kdeb, bdeb] {
        eprintln!("xtask: peer: unpacking {}", deb.display());
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))
            .context("dpkg-deb -x (Debian's dpkg is needed to unpack the packages)")?;
    }
    let moddirs: Vec<PathBuf> = std::fs::read_dir(root.join("lib/modules"))
        .context("the kernel package has no lib/modules")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    ensure!(
        moddirs.len() == 1,
        "expected one kernel release in the package, found {moddirs:?}"
    );
    let moddir = moddirs[0].clone();
    let release = moddir
        .file_name()
        .context("kernel module directory has no name")?
        .to_string_lossy()
        .into_owned();
    let vmlinuz = root.join(format!("boot/vmlinuz-{release}"));
    ensure!(vmlinuz.is_file(), "{} missing", vmlinuz.display());
    let busybox =
        std::fs::read(root.join("bin/busybox")).context("busybox-static's bin/busybox")?;
    Ok(Unpacked {
        release,
        vmlinuz,
        moddir,
        busybox,
    })
}

/// Downloads (once), unpacks and builds the Linux peer under [`cache_dir`].
pub fn prepare() -> Result<LinuxPeer> {
    let cache = cache_dir();
    let (kdeb, bdeb) = ensure_debs(&cache.join("debs"))?;
    let stem = |p: &Path| p.file_stem().unwrap().to_string_lossy().into_owned();
    let stamp = format!(
        "{}\n{}\n{}",
        stem(&kdeb),
        stem(&bdeb),
        crate_hash(INIT.as_bytes())
    );
    let kernel = cache.join("vmlinuz");
    let initrd = cache.join("initramfs.cpio");
    let stamp_path = cache.join("stamp");
    let release_path = cache.join("release");
    if kernel.is_file()
        && initrd.is_file()
        && std::fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str())
    {
        let release = std::fs::read_to_string(&release_path)?.trim().to_string();
        return Ok(LinuxPeer {
            kernel,
            initramfs: initrd,
            release,
        });
    }
    let root = cache.join("root");
    let Unpacked {
        release,
        vmlinuz,
        moddir,
        busybox,
    } = unpack_kernel(&kdeb, &bdeb, &root)?;
    let modules = resolve_modules(&moddir, &MODULES)?;
    eprintln!(
        "xtask: peer: kernel {release}, modules {}",
        modules
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    std::fs::copy(&vmlinuz, &kernel)?;
    std::fs::write(&initrd, initramfs(&busybox, &modules))?;
    std::fs::write(&release_path, &release)?;
    std::fs::write(&stamp_path, &stamp)?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(LinuxPeer {
        kernel,
        initramfs: initrd,
        release,
    })
}

/// FNV-1a, to notice a changed `/init` in the cache stamp.
pub fn crate_hash(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The QEMU configuration of the Linux peer: Gannet's command line with `-kernel vmlinuz
/// -initrd initramfs` and a Linux `-append`.
pub fn guest_config(
    peer: &LinuxPeer,
    dgram_dir: &Path,
    mode: PeerMode,
    accel: Accel,
    icount: bool,
    echo: Echo,
) -> GuestConfig {
    GuestConfig {
        image: peer.kernel.clone(),
        dgram_dir: dgram_dir.to_path_buf(),
        append: format!(
            "console=ttyS0 quiet loglevel=3 ipv6.disable=1 panic=-1 peer_mode={}",
            mode.name()
        ),
        accel,
        icount,
        extra_args: vec![
            "-initrd".into(),
            peer.initramfs.to_string_lossy().into_owned(),
        ],
        echo,
        ..Default::default()
    }
}

/// The Linux peer as the differential test boots it (`tests/src/differential.rs`): the
/// [`PeerMode::L3`] router with `peer_sysctl=diff` (ICMP error rate limits off, ICMP errors from
/// the inbound interface's address, `rp_filter` off, source routes accepted; the test lists
/// each sysctl and why) and port 1's MTU set to `mtu1` (`peer_mtu1=`, the ready line reports
/// both ports' MTUs as `mtu=P0,P1`), TCG without `-icount`, console not echoed.
pub fn differential_config(peer: &LinuxPeer, dgram_dir: &Path, mtu1: u16) -> GuestConfig {
    let mut cfg = guest_config(peer, dgram_dir, PeerMode::L3, Accel::Tcg, false, Echo::Off);
    cfg.append
        .push_str(&format!(" peer_sysctl=diff peer_mtu1={mtu1}"));
    cfg
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Busy and total time from a `cpu …` line of `/proc/stat`, in `USER_HZ` ticks:
/// busy = user + nice + system + irq + softirq, total = busy + idle + iowait (+ steal).
pub fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let rest = line.split_whitespace().skip_while(|w| *w != "cpu").skip(1);
    let v: Vec<u64> = rest.map_while(|w| w.parse().ok()).collect();
    if v.len() < 7 {
        return None;
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6];
    let steal = v.get(7).copied().unwrap_or(0);
    Some((busy, busy + v[3] + v[4] + steal))
}

/// Asks the guest for `/proc/stat`'s busy and total ticks.
pub fn cpu_ticks(guest: &Guest, tag: &str) -> Result<(u64, u64)> {
    let from = guest.line_count();
    guest.send_line(&format!("st {tag}"))?;
    let want = format!("{STAT_PREFIX}{tag} cpu ");
    let (_, line) = guest
        .wait_for_line_from(from, |l| l.contains(&want), Duration::from_secs(60))
        .context("waiting for the Linux peer's /proc/stat line")?;
    parse_cpu_line(&line).with_context(|| format!("cannot parse {line:?}"))
}

/// Parses `PEERTL TAG now idle iowait` into (now, idle, iowait) nanoseconds.
pub fn parse_timer_line(line: &str) -> Option<(u64, u64, u64)> {
    let rest = &line[line.find(TL_PREFIX)? + TL_PREFIX.len()..];
    let v: Vec<u64> = rest
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() == 3).then(|| (v[0], v[1], v[2]))
}

/// Asks the guest for ktime now and its nohz idle and iowait time (ns, `/proc/timer_list`).
/// Busy time = Δnow − Δidle − Δiowait is exact (interrupts and softirqs taken while idle count as
/// busy), while `/proc/stat`'s busy fields are samples at the tick: under `-icount
/// sleep=off` an idle vCPU's clock jumps to the next timer deadline, so the tick nearly always
/// finds the CPU just woken from idle and short busy bursts are never sampled.
pub fn timer_ns(guest: &Guest, tag: &str) -> Result<(u64, u64, u64)> {
    let from = guest.line_count();
    guest.send_line(&format!("tl {tag}"))?;
    let want = format!("{TL_PREFIX}{tag} ");
    let (_, line) = guest
        .wait_for_line_from(from, |l| l.contains(&want), Duration::from_secs(60))
        .context("waiting for the Linux peer's /proc/timer_list line")?;
    parse_timer_line(&line).with_context(|| format!("cannot parse {line:?}"))
}

/// Waits for [`READY_MARKER`]; fails with the serial tail if the guest reports an error first.
pub fn wait_ready(guest: &Guest) -> Result<String> {
    let (_, line) = guest
        .wait_for_line_from(
            0,
            |l| l.contains(READY_MARKER) || l.contains("peer: error"),
            BOOT_TIMEOUT,
        )
        .context("waiting for the Linux peer to boot")?;
    ensure!(
        line.contains(READY_MARKER),
        "Linux peer: {line}\n{}",
        guest.tail_report()
    );
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_line_busy_and_total() {
        let l = "PEERSTAT a cpu  10 1 20 300 4 5 6 0 0 0";
        assert_eq!(parse_cpu_line(l), Some((10 + 1 + 20 + 5 + 6, 42 + 304)));
        assert_eq!(parse_cpu_line("PEERSTAT a cpu 1 2"), None);
    }

    #[test]
    fn timer_line() {
        assert_eq!(
            parse_timer_line("PEERTL b64 9000 5000 10"),
            Some((9000, 5000, 10))
        );
        assert_eq!(parse_timer_line("PEERTL b64 9000 5000 "), None);
        assert_eq!(parse_timer_line("tl b64"), None);
    }

    #[test]
    fn modinfo_depends() {
        let ko = b"\x00license=GPL\x00xdepends=no\x00depends=virtio_ring,virtio,net_failover\x00";
        assert_eq!(
            module_depends(ko),
            ["virtio_ring", "virtio", "net_failover"]
        );
        assert!(module_depends(b"\0depends=\0").is_empty());
        assert!(module_depends(b"nothing").is_empty());
    }

    #[test]
    fn cpio_newc_layout() {
        let mut c = Cpio::new();
        c.file("init", 0o755, b"abc");
        let a = c.finish();
        assert_eq!(&a[..6], b"070701");
        // header 110 + "init\0" = 115 -> 116, data 3 -> 4
        assert_eq!(&a[116..119], b"abc");
        assert_eq!(&a[120..126], b"070701");
        assert!(a.windows(10).any(|w| w == b"TRAILER!!!"));
        assert_eq!(a.len() % 4, 0);
    }
}
