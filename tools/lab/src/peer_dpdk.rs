//! The DPDK peer guest of `cargo xtask bench --peer dpdk` (issue 12, item 3): Debian's
//! `dpdk-testpmd` in the same QEMU as Gannet (same two virtio-net ports, MACs and dgram backend),
//! on Debian's 6.1 kernel and busybox (the Linux peer's, [`peer_linux::kernel_debs`]).
//!
//! Past ~800 lines because building the testpmd guest and reading its console share the package
//! list and the console format, with tests on recorded consoles.
//!
//! Everything comes from Debian packages: `apt-get download` into `<target>/peer-dpdk/debs`
//! (kept), `dpkg-deb -x` into one directory per package, then an uncompressed newc initramfs
//! holding busybox, [`INIT`], the `uio` and `uio_pci_generic` modules, `dpdk-testpmd`, the two
//! poll-mode driver files the EAL loads with `-d /pmd` ([`PMDS`]) and every shared library
//! they need. Which packages that takes is found, not listed: starting from [`SEED_PACKAGES`],
//! the `DT_NEEDED` closure of testpmd and the PMDs is resolved against the unpacked packages
//! ([`elf_needed`]); for each soname still missing, the `Depends` of the packages whose files
//! need it are fetched, and so on until nothing is missing (Debian's shlibs dependencies make
//! the owner of a soname a `Depends` of every package linking it).
//!
//! The guest (see [`INIT`]) binds both ports to `uio_pci_generic`, mounts hugetlbfs
//! (`hugepages=` [`HUGEPAGES`] 2 MiB pages on the kernel command line; the EAL cannot run
//! `--no-huge` with uio: IOVA mode VA) and runs testpmd interactively on the console:
//! `--forward-mode=io|mac --burst=32 --record-core-cycles --record-burst-stats
//! --total-num-mbufs=8192`, both lcores on CPU 0 (`--lcores 0@0,1@0`; the guest is `-smp 1`,
//! which `-icount` needs). The harness drives it with `start`, `show fwd stats all`, `stop` and
//! `quit`, delimiting each answer with a `#` comment line that testpmd only echoes
//! ([`snapshot`]). QEMU needs `-cpu max` (or another model with SSE4.2: Debian's DPDK is built
//! for it; QEMU's default `qemu64` lacks it).
//!
//! What is measured ([`FwdStats`], deltas between two `show fwd stats all`): testpmd's own
//! busy cycles (TSC cycles of forwarding calls whose RX burst returned frames; guest
//! instructions under `-icount shift=0,sleep=off`) ÷ the packets it received, and frames per
//! busy poll iteration = frames received ÷ RX bursts that returned at least one frame. The
//! latter count is the TX port's `TX-bursts` total: testpmd's `io` and `mac` engines call
//! `rte_eth_tx_burst` exactly once per non-empty RX burst (no `--tx-retry`), and its RX burst
//! statistics give only integer percentages of the empty ones.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use harness::peer_linux::{self, Cpio};
use harness::qemu::{self, Accel, Echo, Guest, GuestConfig};

/// The guest's `/init` script.
pub const INIT: &str = include_str!("../assets/peer-dpdk-init.sh");
/// Packages fetched first: testpmd (`dpdk-dev`), the PMD packages (not `Depends` of
/// `dpdk-dev`: virtio-net's, the e1000 family's for `--nic e1000e`, the mempool's), and
/// `libgcc-s1` (glibc `dlopen`s `libgcc_s.so.1` for thread cancellation and
/// unwinding; it is in no `DT_NEEDED` list, so the closure would not find it).
pub const SEED_PACKAGES: [&str; 5] = [
    "dpdk-dev",
    "librte-net-virtio23",
    "librte-net-e1000-23",
    "librte-mempool-ring23",
    "libgcc-s1",
];
/// Packages never fetched while resolving (`Depends` that hold no library testpmd loads).
const SKIP_PACKAGES: [&str; 2] = ["python3", "libdpdk-dev"];
/// testpmd inside `dpdk-dev`.
pub const TESTPMD: &str = "usr/bin/dpdk-testpmd";
/// The PMD files the guest's EAL loads from `/pmd` (`-d`). The EAL loads only files named
/// `*.so` or `*.so.<ABI>.0`; any other PMD of the packages stays out (with all of them it would
/// probe nothing else, but load slower).
pub const PMDS: [&str; 3] = [
    "librte_net_virtio.so.23.0",
    "librte_net_e1000.so.23.0",
    "librte_mempool_ring.so.23.0",
];
/// Libraries loaded with `dlopen` by name (not in any `DT_NEEDED`).
pub const DLOPENED: [&str; 1] = ["libgcc_s.so.1"];
/// Kernel modules the guest loads (with their dependencies).
pub const MODULES: [&str; 1] = ["uio_pci_generic"];
/// 2 MiB hugepages reserved on the kernel command line (512 MiB).
pub const HUGEPAGES: u32 = 256;
/// Guest RAM: the hugepages plus the kernel and a ~30 MB initramfs.
pub const MEMORY: &str = "1G";
/// Time allowed from QEMU start to testpmd's prompt (TCG with `-icount`: ~23 s measured).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(300);
/// The line the guest's `/init` prints just before it starts testpmd.
pub const STARTING_MARKER: &str = "peer: starting testpmd";
/// Printed by `/init` when a step before testpmd fails.
pub const ERROR_MARKER: &str = "peer: error";
/// Printed by `/init` when testpmd has exited (`… with status N`).
pub const EXITED_MARKER: &str = "peer: testpmd exited";
/// testpmd's prompt.
pub const PROMPT: &str = "testpmd> ";
/// Directories of the unpacked packages searched for sonames, in order.
const LIB_DIRS: [&str; 4] = [
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0",
    "lib64",
];
/// Resolution rounds before giving up (each fetches the `Depends` of the packages with missing
/// sonames; 4 suffice for bookworm's DPDK 22.11).
const MAX_ROUNDS: usize = 8;

/// testpmd's forwarding engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpdkMode {
    /// `--forward-mode=io`: frames leave the other port untouched (Gannet `io`).
    Io,
    /// `--forward-mode=mac`: source MAC = the TX port's, destination = its `--eth-peer` (the
    /// same peers as Gannet `l2`: 02:00:00:00:0a:02 behind port 0, 02:00:00:00:0b:02 behind 1).
    Mac,
}

impl DpdkMode {
    /// "io" or "mac" (testpmd's name, and `dpdk_mode=` of [`INIT`]).
    pub fn name(self) -> &'static str {
        match self {
            DpdkMode::Io => "io",
            DpdkMode::Mac => "mac",
        }
    }
}

/// A prepared DPDK guest: kernel, initramfs, and what they hold.
#[derive(Debug, Clone)]
pub struct DpdkPeer {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Kernel release, e.g. `6.1.0-57-amd64`.
    pub release: String,
    /// The `dpdk-dev` package version, e.g. `22.11.11-0+deb12u1`.
    pub dpdk_version: String,
}

/// The cache directory: `<target>/peer-dpdk`.
pub fn cache_dir() -> PathBuf {
    qemu::target_dir(&qemu::workspace_root()).join("peer-dpdk")
}

/// Where the serial log of the last run of `mode` is written (`<cache>/console-<mode>.log`).
pub fn console_log(mode: DpdkMode) -> PathBuf {
    cache_dir().join(format!("console-{}.log", mode.name()))
}

// ---------------------------------------------------------------------------------------------
// ELF

fn rd<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N]> {
    at.checked_add(N)
        .and_then(|end| b.get(at..end))
        .and_then(|s| s.try_into().ok())
        .with_context(|| format!("ELF truncated: {N} bytes at offset {at} of {}", b.len()))
}

fn u16_at(b: &[u8], at: usize) -> Result<u16> {
    rd::<2>(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32> {
    rd::<4>(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64> {
    rd::<8>(b, at).map(u64::from_le_bytes)
}

fn usize_of(v: u64) -> Result<usize> {
    usize::try_from(v).context("ELF offset does not fit usize")
}

/// The `DT_NEEDED` sonames of an x86-64 ELF file (ELF64, little endian), in order: the
/// `PT_DYNAMIC` segment's entries, their names read from `DT_STRTAB` (a virtual address,
/// mapped to a file offset through the `PT_LOAD` segment holding it). An ELF without
/// `PT_DYNAMIC` (static) needs nothing; anything malformed is an error, never a panic.
pub fn elf_needed(elf: &[u8]) -> Result<Vec<String>> {
    const PT_LOAD: u32 = 1;
    const PT_DYNAMIC: u32 = 2;
    const DT_NULL: u64 = 0;
    const DT_NEEDED: u64 = 1;
    const DT_STRTAB: u64 = 5;
    ensure!(elf.get(..4) == Some(b"\x7fELF"), "not an ELF file");
    ensure!(
        elf.get(4) == Some(&2) && elf.get(5) == Some(&1),
        "not a 64-bit little-endian ELF file"
    );
    let phoff = usize_of(u64_at(elf, 0x20)?)?;
    let phentsize = usize::from(u16_at(elf, 0x36)?);
    let phnum = usize::from(u16_at(elf, 0x38)?);
    ensure!(phentsize >= 56, "ELF program header size {phentsize} < 56");
    // (p_offset, p_vaddr, p_filesz) of the PT_LOAD segments; the PT_DYNAMIC segment's file range.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let ph = i
            .checked_mul(phentsize)
            .and_then(|o| phoff.checked_add(o))
            .filter(|ph| ph.checked_add(56).is_some_and(|end| end <= elf.len()))
            .with_context(|| format!("ELF program header {i} is outside the file"))?;
        let p_type = u32_at(elf, ph)?;
        let off = u64_at(elf, ph + 8)?;
        let vaddr = u64_at(elf, ph + 16)?;
        let filesz = u64_at(elf, ph + 32)?;
        match p_type {
            PT_LOAD => loads.push((off, vaddr, filesz)),
            PT_DYNAMIC => dynamic = Some((usize_of(off)?, usize_of(filesz)?)),
            _ => {}
        }
    }
    let Some((dyn_off, dyn_size)) = dynamic else {
        return Ok(Vec::new());
    };
    let mut needed = Vec::new();
    let mut strtab = None;
    for k in 0..dyn_size / 16 {
        let e = k
            .checked_mul(16)
            .and_then(|o| dyn_off.checked_add(o))
            .context("ELF dynamic entry offset overflows")?;
        let tag = u64_at(elf, e)?;
        let val = u64_at(
            elf,
            e.checked_add(8)
                .context("ELF dynamic entry offset overflows")?,
        )?;
        match tag {
            DT_NULL => break,
            DT_NEEDED => needed.push(val),
            DT_STRTAB => strtab = Some(val),
            _ => {}
        }
    }
    if needed.is_empty() {
        return Ok(Vec::new());
    }
    let strtab = strtab.context("ELF has DT_NEEDED entries but no DT_STRTAB")?;
    let (off, vaddr, _) = loads
        .iter()
        .find(|(_, v, sz)| strtab >= *v && strtab - v < *sz)
        .context("ELF DT_STRTAB is in no PT_LOAD segment")?;
    let str_off = usize_of(
        (strtab - vaddr)
            .checked_add(*off)
            .context("ELF DT_STRTAB offset overflows")?,
    )?;
    needed
        .into_iter()
        .map(|n| {
            let at = str_off
                .checked_add(usize_of(n)?)
                .context("ELF string offset overflow")?;
            let rest = elf.get(at..).context("ELF string offset past the end")?;
            let end = rest
                .iter()
                .position(|&b| b == 0)
                .context("ELF string not terminated")?;
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Packages and the library closure

/// The package names of `apt-cache depends PKG` output: `Depends:` and `PreDepends:` lines
/// (alternatives `|Depends:` included), virtual packages (`<name>`) skipped.
pub fn parse_apt_depends(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches('|');
            l.strip_prefix("Depends:")
                .or_else(|| l.strip_prefix("PreDepends:"))
        })
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with('<'))
        .map(|p| p.split(':').next().unwrap_or(p).to_string())
        .collect()
}

/// Follows symlinks inside one unpacked package tree `root` (absolute targets are taken
/// relative to `root`); the final regular file, if any.
fn resolve_in(root: &Path, mut p: PathBuf) -> Option<PathBuf> {
    for _ in 0..16 {
        let md = std::fs::symlink_metadata(&p).ok()?;
        if md.file_type().is_symlink() {
            let t = std::fs::read_link(&p).ok()?;
            p = if t.is_absolute() {
                root.join(t.strip_prefix("/").ok()?)
            } else {
                p.parent()?.join(t)
            };
        } else {
            return md.is_file().then_some(p);
        }
    }
    None
}

/// soname → (package, file) over every unpacked package (first package in name order wins).
fn soname_index(unpacked: &Path, pkgs: &BTreeSet<String>) -> BTreeMap<String, (String, PathBuf)> {
    let mut idx = BTreeMap::new();
    for pkg in pkgs {
        let root = unpacked.join(pkg);
        for d in LIB_DIRS {
            let Ok(rd) = std::fs::read_dir(root.join(d)) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".so"))
                .collect();
            names.sort();
            for n in names {
                if idx.contains_key(&n) {
                    continue;
                }
                if let Some(f) = resolve_in(&root, root.join(d).join(&n)) {
                    idx.insert(n, (pkg.clone(), f));
                }
            }
        }
    }
    idx
}

/// What goes into the initramfs: testpmd, the PMDs and the libraries, each with the package it
/// came from.
#[derive(Debug, Clone, Default)]
pub struct Closure {
    pub testpmd: PathBuf,
    /// (file name, path) of [`PMDS`].
    pub pmds: Vec<(String, PathBuf)>,
    /// soname → (package, path): every library testpmd or a PMD needs, and [`DLOPENED`].
    pub libs: BTreeMap<String, (String, PathBuf)>,
}

/// One pass over the unpacked packages: the closure, or the sonames still missing with the
/// packages whose files need them.
fn closure_once(
    unpacked: &Path,
    pkgs: &BTreeSet<String>,
) -> Result<std::result::Result<Closure, BTreeMap<String, BTreeSet<String>>>> {
    let idx = soname_index(unpacked, pkgs);
    let testpmd = resolve_in(
        &unpacked.join("dpdk-dev"),
        unpacked.join("dpdk-dev").join(TESTPMD),
    )
    .with_context(|| format!("dpdk-dev has no {TESTPMD}"))?;
    let mut c = Closure {
        testpmd: testpmd.clone(),
        ..Default::default()
    };
    let mut queue: VecDeque<(String, PathBuf)> = VecDeque::new();
    queue.push_back(("dpdk-dev".into(), testpmd));
    for p in PMDS {
        let (pkg, f) = idx
            .get(p)
            .with_context(|| format!("no package provides the PMD {p} (packages: {pkgs:?})"))?;
        c.pmds.push((p.to_string(), f.clone()));
        queue.push_back((pkg.clone(), f.clone()));
    }
    let mut missing: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut want = |soname: &str, by: &str, queue: &mut VecDeque<(String, PathBuf)>| {
        if c.libs.contains_key(soname) {
            return;
        }
        match idx.get(soname) {
            Some((pkg, f)) => {
                c.libs.insert(soname.to_string(), (pkg.clone(), f.clone()));
                queue.push_back((pkg.clone(), f.clone()));
            }
            None => {
                missing
                    .entry(soname.to_string())
                    .or_default()
                    .insert(by.to_string());
            }
        }
    };
    for d in DLOPENED {
        want(d, "libc6", &mut queue);
    }
    while let Some((pkg, f)) = queue.pop_front() {
        let data = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
        let needed = elf_needed(&data).with_context(|| format!("reading {}", f.display()))?;
        for n in needed {
            want(&n, &pkg, &mut queue);
        }
    }
    Ok(if missing.is_empty() {
        Ok(c)
    } else {
        Err(missing)
    })
}

/// `apt-cache depends PKG` → package names ([`parse_apt_depends`]).
fn apt_depends(pkg: &str) -> Result<Vec<String>> {
    let out = peer_linux::run(Command::new("apt-cache").args(["depends", pkg]))
        .with_context(|| format!("apt-cache depends {pkg}"))?;
    Ok(parse_apt_depends(&out))
}

/// Fetches (into `debs`) and unpacks (into `unpacked/<pkg>`) packages until the library
/// closure of testpmd and the PMDs is complete; returns it and every package used, with its
/// `.deb`.
fn resolve(debs: &Path, unpacked: &Path) -> Result<(Closure, BTreeMap<String, PathBuf>)> {
    std::fs::create_dir_all(debs).with_context(|| format!("creating {}", debs.display()))?;
    let _ = std::fs::remove_dir_all(unpacked);
    let mut wanted: BTreeSet<String> = SEED_PACKAGES.iter().map(|s| s.to_string()).collect();
    let mut have: BTreeMap<String, PathBuf> = BTreeMap::new();
    for round in 0..MAX_ROUNDS {
        let absent: Vec<&str> = wanted
            .iter()
            .filter(|p| peer_linux::find_deb(debs, &format!("{p}_")).is_none())
            .map(String::as_str)
            .collect();
        if !absent.is_empty() {
            peer_linux::with_apt_update(|| peer_linux::apt_download_once(debs, &absent)).context(
                "the DPDK peer needs Debian's dpdk-dev and the libraries testpmd links, \
                     fetched with `apt-get download` (network access to a Debian mirror, and \
                     `apt-get update` once)",
            )?;
        }
        for p in &wanted {
            if have.contains_key(p) {
                continue;
            }
            let deb = peer_linux::find_deb(debs, &format!("{p}_")).with_context(|| {
                format!(
                    "apt-get download {p} succeeded but no {p}_*.deb in {}",
                    debs.display()
                )
            })?;
            let dir = unpacked.join(p);
            std::fs::create_dir_all(&dir)?;
            peer_linux::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))
                .context("dpkg-deb -x (Debian's dpkg is needed to unpack the packages)")?;
            have.insert(p.clone(), deb);
        }
        let missing = match closure_once(unpacked, &wanted)? {
            Ok(c) => {
                eprintln!(
                    "xtask: peer-dpdk: {} libraries from {} packages ({} resolution round(s))",
                    c.libs.len(),
                    c.libs
                        .values()
                        .map(|(p, _)| p.as_str())
                        .collect::<BTreeSet<_>>()
                        .len(),
                    round + 1
                );
                return Ok((c, have));
            }
            Err(m) => m,
        };
        let owners: BTreeSet<&String> = missing.values().flatten().collect();
        let mut new = BTreeSet::new();
        for o in owners {
            for d in apt_depends(o)? {
                if !wanted.contains(&d)
                    && !SKIP_PACKAGES.contains(&d.as_str())
                    && !d.ends_with("-dev")
                {
                    new.insert(d);
                }
            }
        }
        eprintln!(
            "xtask: peer-dpdk: round {}: missing {:?}; fetching {:?}",
            round + 1,
            missing.keys().collect::<Vec<_>>(),
            new
        );
        if new.is_empty() {
            bail!("no package provides these libraries (soname: packages needing it): {missing:?}");
        }
        wanted.extend(new);
    }
    bail!("the library closure of testpmd is still incomplete after {MAX_ROUNDS} rounds")
}

/// Builds the initramfs image (uncompressed newc): busybox, [`INIT`], the modules, testpmd in
/// `/bin`, the PMDs in `/pmd`, the libraries in `/lib` (by soname) and the dynamic loader also
/// at `/lib64/ld-linux-x86-64.so.2` (testpmd's `PT_INTERP`).
fn initramfs(busybox: &[u8], modules: &[(String, Vec<u8>)], c: &Closure) -> Result<Vec<u8>> {
    let mut cp = Cpio::new();
    for d in [
        "bin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "var",
        "var/run",
        "lib",
        "lib64",
        "lib/modules",
        "pmd",
    ] {
        cp.dir(d);
    }
    cp.chardev("dev/console", 5, 1);
    cp.chardev("dev/null", 1, 3);
    cp.file("bin/busybox", 0o755, busybox);
    cp.file("init", 0o755, INIT.as_bytes());
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    cp.file("bin/dpdk-testpmd", 0o755, &read(&c.testpmd)?);
    for (name, p) in &c.pmds {
        cp.file(&format!("pmd/{name}"), 0o755, &read(p)?);
    }
    for (soname, (_, p)) in &c.libs {
        let data = read(p)?;
        if soname == "ld-linux-x86-64.so.2" {
            cp.file("lib64/ld-linux-x86-64.so.2", 0o755, &data);
        }
        cp.file(&format!("lib/{soname}"), 0o755, &data);
    }
    ensure!(
        c.libs.contains_key("ld-linux-x86-64.so.2"),
        "the closure has no dynamic loader (ld-linux-x86-64.so.2)"
    );
    cp.modules(modules);
    Ok(cp.finish())
}

/// A stamp is `release\nversion\n` + `head` (three lines) + one `.deb` file name a line.
/// Returns (release, version) if `head` matches and every listed `.deb` is still in `debs`.
fn stamp_matches(stamp: &str, head: &str, debs: &Path) -> Option<(String, String)> {
    let mut lines = stamp.lines();
    let release = lines.next()?.to_string();
    let version = lines.next()?.to_string();
    let h: Vec<&str> = lines.by_ref().take(3).collect();
    let debs_listed: Vec<&str> = lines.collect();
    (h == head.lines().collect::<Vec<_>>()
        && !debs_listed.is_empty()
        && debs_listed.iter().all(|f| debs.join(f).is_file()))
    .then_some((release, version))
}

/// Downloads (once), unpacks and builds the DPDK peer under [`cache_dir`]; a second call with
/// the same `.deb`s and [`INIT`] reuses the built initramfs without running apt.
pub fn prepare() -> Result<DpdkPeer> {
    let cache = cache_dir();
    let (kdeb, bdeb) = peer_linux::kernel_debs()?;
    let debs = cache.join("debs");
    let kernel = cache.join("vmlinuz");
    let initrd = cache.join("initramfs.cpio");
    let stamp_path = cache.join("stamp");
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // The stamp lists every .deb the initramfs was built from: reuse it while they are all
    // still there and nothing else changed.
    let head = format!(
        "{}\n{}\n{}\n",
        name(&kdeb),
        name(&bdeb),
        peer_linux::crate_hash(INIT.as_bytes())
    );
    if let Some((release, dpdk_version)) = std::fs::read_to_string(&stamp_path)
        .ok()
        .and_then(|st| stamp_matches(&st, &head, &debs))
    {
        if kernel.is_file() && initrd.is_file() {
            return Ok(DpdkPeer {
                kernel,
                initramfs: initrd,
                release,
                dpdk_version,
            });
        }
    }
    let kroot = cache.join("kernel-root");
    let k = peer_linux::unpack_kernel(&kdeb, &bdeb, &kroot)?;
    let modules = peer_linux::resolve_modules(&k.moddir, &MODULES)?;
    let unpacked = cache.join("unpacked");
    let (closure, used) = resolve(&debs, &unpacked)?;
    let dpdk_deb = used.get("dpdk-dev").context("dpdk-dev was not fetched")?;
    let dpdk_version = name(dpdk_deb)
        .split('_')
        .nth(1)
        .unwrap_or("unknown")
        .replace("%3a", ":");
    let image = initramfs(&k.busybox, &modules, &closure)?;
    eprintln!(
        "xtask: peer-dpdk: kernel {}, modules {}, DPDK {dpdk_version}, initramfs {:.1} MB",
        k.release,
        modules
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        image.len() as f64 / 1e6
    );
    std::fs::copy(&k.vmlinuz, &kernel)
        .with_context(|| format!("copying the kernel to {}", kernel.display()))?;
    std::fs::write(&initrd, image).with_context(|| format!("writing {}", initrd.display()))?;
    let mut stamp = format!("{}\n{dpdk_version}\n{head}", k.release);
    for deb in used.values() {
        stamp.push_str(&name(deb));
        stamp.push('\n');
    }
    std::fs::write(&stamp_path, stamp)?;
    let _ = std::fs::remove_dir_all(&kroot);
    let _ = std::fs::remove_dir_all(&unpacked);
    Ok(DpdkPeer {
        kernel,
        initramfs: initrd,
        release: k.release,
        dpdk_version,
    })
}

/// The QEMU configuration of the DPDK peer: Gannet's command line (same ports, MACs, dgram
/// backend) with `-kernel vmlinuz -initrd initramfs`, [`MEMORY`] of RAM, `-cpu cpu` (give
/// `max`: testpmd needs SSE4.2) and a Linux `-append` with [`HUGEPAGES`] and `dpdk_mode=`.
pub fn guest_config(
    peer: &DpdkPeer,
    dgram_dir: &Path,
    mode: DpdkMode,
    accel: Accel,
    icount: bool,
    cpu: Option<String>,
    echo: Echo,
) -> GuestConfig {
    GuestConfig {
        image: peer.kernel.clone(),
        dgram_dir: dgram_dir.to_path_buf(),
        append: format!(
            "console=ttyS0 quiet loglevel=3 ipv6.disable=1 panic=-1 hugepages={HUGEPAGES} dpdk_mode={}",
            mode.name()
        ),
        accel,
        icount,
        cpu,
        memory: MEMORY.into(),
        extra_args: vec![
            "-initrd".into(),
            peer.initramfs.to_string_lossy().into_owned(),
        ],
        echo,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Console protocol and output parsing

/// The comment line that closes the answer to a command sent with tag `tag`.
pub fn end_marker(tag: &str) -> String {
    format!("# end {tag}")
}

/// The lines of testpmd's answer to `cmd` in a console log: those after the last prompt line
/// echoing `cmd` before the prompt line echoing `end` (see [`command`]). `None` if the log does
/// not hold both echoes.
pub fn answer<'a>(lines: &'a [String], cmd: &str, end: &str) -> Option<&'a [String]> {
    let echoes = |l: &String, what: &str| {
        l.find(PROMPT)
            .is_some_and(|i| l[i + PROMPT.len()..].trim_end() == what)
    };
    let hi = lines.iter().rposition(|l| echoes(l, end))?;
    let lo = lines[..hi].iter().rposition(|l| echoes(l, cmd))?;
    Some(&lines[lo + 1..hi])
}

/// A hint for `/init`'s `peer: testpmd exited with status N` line: 132 is SIGILL, which is what
/// Debian's testpmd dies of on a CPU model without SSE4.2 (QEMU's default `qemu64`).
pub fn exit_hint(line: &str) -> &'static str {
    if line.trim_end().ends_with("status 132") {
        " (SIGILL: the QEMU CPU model lacks an instruction Debian's DPDK is built for, such as \
         SSE4.2; boot it with --cpu max)"
    } else {
        ""
    }
}

/// Sends `cmd` and then the comment [`end_marker`]`(tag)`, and returns the lines testpmd printed
/// between the echo of `cmd` and the echo of the comment ([`answer`]): testpmd runs one command
/// to completion before it reads the next line, so the comment's echo closes the answer. Fails
/// on timeout, or at once if testpmd or the guest's `/init` report that they stopped.
pub fn command(guest: &Guest, cmd: &str, tag: &str, timeout: Duration) -> Result<Vec<String>> {
    let from = guest.line_count();
    let end = end_marker(tag);
    guest.send_line(cmd)?;
    guest.send_line(&end)?;
    let (_, line) = guest
        .wait_for_line_from(
            from,
            |l| (l.contains(PROMPT) && l.contains(&end)) || l.contains(EXITED_MARKER),
            timeout,
        )
        .with_context(|| format!("waiting for testpmd to answer `{cmd}`"))?;
    ensure!(
        !line.contains(EXITED_MARKER),
        "testpmd stopped before answering `{cmd}`: {line}{}\n{}",
        exit_hint(&line),
        guest.tail_report()
    );
    let lines = guest.lines();
    let first = guest.line_count().saturating_sub(lines.len());
    let since = &lines[from.saturating_sub(first).min(lines.len())..];
    answer(since, cmd, &end)
        .map(<[String]>::to_vec)
        .with_context(|| format!("testpmd's console does not echo `{cmd}` before `{end}`"))
}

/// The MAC testpmd printed for each port (`Port N: 02:00:00:00:00:01` lines), in port order.
pub fn parse_ports(lines: &[String]) -> Vec<(u16, String)> {
    let mut v: Vec<(u16, String)> = lines
        .iter()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("Port ")?;
            let (n, mac) = rest.split_once(": ")?;
            let n: u16 = n.parse().ok()?;
            let mac = mac.trim();
            let ok = mac.len() == 17
                && mac
                    .split(':')
                    .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
            ok.then(|| (n, mac.to_ascii_lowercase()))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Waits for testpmd's prompt after boot and checks that it probed both ports with the QEMU
/// NICs' MACs (testpmd starts even with no port: "No probed ethernet devices" is only a
/// warning). Returns the `Port N: MAC` lines.
pub fn wait_ready(guest: &Guest) -> Result<Vec<(u16, String)>> {
    let (_, line) = guest
        .wait_for_line_from(
            0,
            |l| l.contains(STARTING_MARKER) || l.contains(ERROR_MARKER),
            BOOT_TIMEOUT,
        )
        .context("waiting for the DPDK peer to boot")?;
    ensure!(
        line.contains(STARTING_MARKER),
        "DPDK peer: {line}\n{}",
        guest.tail_report()
    );
    eprintln!("xtask: {line}");
    command(guest, "# ready", "ready", BOOT_TIMEOUT)
        .context("waiting for testpmd's prompt (EAL initialisation, port set-up)")?;
    probed_ports(&guest.lines()).map_err(|e| anyhow::anyhow!("{e:#}\n{}", guest.tail_report()))
}

/// Checks testpmd's start-up lines for both ports with the QEMU NICs' MACs (`Port 0:
/// 02:00:00:00:00:01`, `Port 1: 02:00:00:00:00:02`). testpmd starts even with no port ("No
/// probed ethernet devices" is only a warning), so anything else is an error that quotes the
/// EAL's and testpmd's messages.
pub fn probed_ports(lines: &[String]) -> Result<Vec<(u16, String)>> {
    let ports = parse_ports(lines);
    let want: Vec<(u16, String)> = (0..2u16)
        .map(|i| {
            let m = harness::gen::guest_mac(usize::from(i));
            let mac: Vec<String> = m.iter().map(|b| format!("{b:02x}")).collect();
            (i, mac.join(":"))
        })
        .collect();
    if ports != want {
        let hints: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| {
                l.starts_with("EAL:")
                    || l.starts_with("testpmd:")
                    || l.contains("No probed")
                    || l.contains("Fail")
                    || l.contains("rror")
            })
            .collect();
        bail!(
            "testpmd did not probe both ports: its `Port N: MAC` lines say {ports:?}, \
             want {want:?} (are both NICs bound to uio_pci_generic, and are their PMD \
             and librte_mempool_ring in /pmd?); EAL/testpmd messages: {hints:#?}"
        );
    }
    Ok(ports)
}

/// `Port N` forward statistics from `show fwd stats all`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFwd {
    /// Frames received on the port (`RX-packets`).
    pub rx_packets: u64,
    /// Frames sent on the port (`TX-packets`).
    pub tx_packets: u64,
    /// Frames the port dropped on receive (`RX-dropped`).
    pub rx_dropped: u64,
    /// Frames the forwarding engine could not send on this port (`TX-dropped`).
    pub tx_dropped: u64,
    /// RX bursts on the port, empty ones included (`RX-bursts : N [...]`; 0 if the line is
    /// absent, which testpmd does when there were none).
    pub rx_bursts: u64,
    /// Percentage of the RX bursts that returned no frame, as testpmd rounds it down
    /// (`[P% of 0 pkts …`).
    pub rx_empty_pct: Option<u32>,
    /// TX bursts on the port (`TX-bursts : N`): one per non-empty RX burst of the stream that
    /// sends here, in `io` and `mac` mode.
    pub tx_bursts: u64,
}

/// One `show fwd stats all` answer. All counters count from testpmd's last `start`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FwdStats {
    /// Per port, in port order.
    pub ports: Vec<PortFwd>,
    /// `total cycles=` of the `CPU cycles/packet` line (`busy cycles=` in later DPDK releases):
    /// TSC cycles of forwarding calls whose RX burst returned frames, counted from before
    /// `rte_eth_rx_burst` to after `rte_eth_tx_burst` and the freeing of unsent frames (an
    /// empty RX burst returns before the count; 0 when testpmd printed no such line: nothing
    /// received yet).
    pub busy_cycles: u64,
    /// `total … packets=` of the same line: the packets the cycles are divided by (received,
    /// in `io` and `mac` mode).
    pub cycle_packets: u64,
    /// testpmd's own `CPU cycles/packet=` figure (busy cycles ÷ packets since `start`).
    pub cycles_per_packet: Option<f64>,
    /// The TSC frequency testpmd assumes, MHz (`at N MHz Clock`).
    pub tsc_mhz: Option<u64>,
}

fn num_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Parses the lines of one `show fwd stats all` answer (testpmd 22.11's layout, see the test
/// data `tools/testdata/testpmd-*.txt`). Fails if a counter line cannot be read or no port
/// section is found.
pub fn parse_fwd_stats(lines: &[String]) -> Result<FwdStats> {
    let mut s = FwdStats::default();
    // Which section the following counter lines belong to: a port index, or the accumulated
    // totals (ignored: the ports' figures add up to them).
    let mut port: Option<usize> = None;
    for line in lines {
        let l = line.trim();
        if let Some(p) = l.find("Forward statistics for port") {
            let n = num_after(&l[p..], "port")
                .with_context(|| format!("testpmd port header without a number: {line:?}"))?;
            let n = usize::try_from(n)?;
            ensure!(n < 64, "testpmd port {n} out of range: {line:?}");
            if s.ports.len() <= n {
                s.ports.resize(n + 1, PortFwd::default());
            }
            port = Some(n);
            continue;
        }
        if l.contains("Accumulated forward statistics") {
            port = None;
            continue;
        }
        if l.contains("CPU cycles/packet=") {
            let field = |k: &str| {
                num_after(l, k).with_context(|| format!("no `{k}` in testpmd's line {line:?}"))
            };
            s.busy_cycles = num_after(l, "total cycles=")
                .or_else(|| num_after(l, "busy cycles="))
                .with_context(|| format!("no `total cycles=` in testpmd's line {line:?}"))?;
            s.cycle_packets = field("packets=")?;
            s.tsc_mhz = num_after(l, " at ");
            s.cycles_per_packet = l
                .split("CPU cycles/packet=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|x| x.parse().ok());
            continue;
        }
        let Some(p) = port else { continue };
        let e = &mut s.ports[p];
        let need =
            |k: &str| num_after(l, k).with_context(|| format!("no number after `{k}` in {line:?}"));
        if l.starts_with("RX-packets:") {
            e.rx_packets = need("RX-packets:")?;
            e.rx_dropped = need("RX-dropped:")?;
        } else if l.starts_with("TX-packets:") {
            e.tx_packets = need("TX-packets:")?;
            e.tx_dropped = need("TX-dropped:")?;
        } else if l.starts_with("RX-bursts") {
            e.rx_bursts = need(":")?;
            e.rx_empty_pct = l.split_once('[').and_then(|(_, r)| {
                let (pct, what) = r.split_once("% of ")?;
                what.starts_with("0 pkts")
                    .then(|| pct.trim().parse().ok())?
            });
        } else if l.starts_with("TX-bursts") {
            e.tx_bursts = need(":")?;
        }
    }
    ensure!(
        !s.ports.is_empty(),
        "no `Forward statistics for port N` section in testpmd's answer: {lines:?}"
    );
    Ok(s)
}

/// Asks testpmd for its forward statistics (`show fwd stats all`).
pub fn snapshot(guest: &Guest, tag: &str) -> Result<FwdStats> {
    let lines = command(guest, "show fwd stats all", tag, Duration::from_secs(60))?;
    parse_fwd_stats(&lines).context("parsing testpmd's `show fwd stats all`")
}

/// What one traffic window cost testpmd: deltas between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FwdDelta {
    /// Frames received on all ports.
    pub rx_packets: u64,
    /// Busy TSC cycles (guest instructions under `-icount shift=0,sleep=off`).
    pub busy_cycles: u64,
    /// The packets testpmd divides its busy cycles by.
    pub cycle_packets: u64,
    /// RX bursts that returned at least one frame (= TX bursts, see [`PortFwd::tx_bursts`]).
    pub busy_bursts: u64,
    /// RX bursts, empty ones included.
    pub rx_bursts: u64,
}

impl FwdDelta {
    /// `b` − `a`, port by port; an error if a counter went backwards (testpmd restarted).
    pub fn between(a: &FwdStats, b: &FwdStats) -> Result<FwdDelta> {
        let sum = |s: &FwdStats, f: fn(&PortFwd) -> u64| s.ports.iter().map(f).sum::<u64>();
        let d = |x: u64, y: u64, what: &str| {
            y.checked_sub(x)
                .with_context(|| format!("testpmd's {what} went backwards ({x} -> {y})"))
        };
        Ok(FwdDelta {
            rx_packets: d(
                sum(a, |p| p.rx_packets),
                sum(b, |p| p.rx_packets),
                "RX-packets",
            )?,
            busy_cycles: d(a.busy_cycles, b.busy_cycles, "busy cycles")?,
            cycle_packets: d(a.cycle_packets, b.cycle_packets, "cycle packets")?,
            busy_bursts: d(
                sum(a, |p| p.tx_bursts),
                sum(b, |p| p.tx_bursts),
                "TX-bursts",
            )?,
            rx_bursts: d(
                sum(a, |p| p.rx_bursts),
                sum(b, |p| p.rx_bursts),
                "RX-bursts",
            )?,
        })
    }

    /// Busy cycles per packet (guest instructions under `-icount`); `None` without packets.
    pub fn cycles_per_packet(&self) -> Option<f64> {
        (self.cycle_packets > 0).then(|| self.busy_cycles as f64 / self.cycle_packets as f64)
    }

    /// Frames per busy poll iteration: frames received ÷ RX bursts that returned frames.
    pub fn frames_per_busy_burst(&self) -> Option<f64> {
        (self.busy_bursts > 0).then(|| self.rx_packets as f64 / self.busy_bursts as f64)
    }

    /// The fraction of RX bursts that returned nothing (0–1).
    pub fn empty_fraction(&self) -> Option<f64> {
        (self.rx_bursts > 0)
            .then(|| self.rx_bursts.saturating_sub(self.busy_bursts) as f64 / self.rx_bursts as f64)
    }
}

/// Starts forwarding (`start`) and checks testpmd says so.
pub fn start(guest: &Guest) -> Result<()> {
    let lines = command(guest, "start", "start", Duration::from_secs(60))?;
    ensure!(
        lines.iter().any(|l| l.contains("packet forwarding")),
        "testpmd did not start forwarding: {lines:?}"
    );
    Ok(())
}

/// `stop`, `quit`, and waits for QEMU to exit (the guest powers off after testpmd).
pub fn stop_and_quit(guest: &mut Guest) -> Result<()> {
    let _ = command(guest, "stop", "stop", Duration::from_secs(60));
    guest.send_line("quit")?;
    guest
        .wait_for_line_from(0, |l| l.contains(EXITED_MARKER), Duration::from_secs(60))
        .context("waiting for testpmd to exit")?;
    guest.wait_exit(Duration::from_secs(30))?;
    Ok(())
}

/// Writes the guest's serial log to `path` (for a look after the run).
pub fn save_console(guest: &Guest, path: &Path) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut text = guest.lines().join("\n");
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_of_this_test_binary() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let n = elf_needed(&me).unwrap();
        assert!(n.iter().any(|s| s == "libc.so.6"), "{n:?}");
    }

    #[test]
    fn needed_rejects_garbage_without_panicking() {
        assert!(elf_needed(b"").is_err());
        assert!(elf_needed(b"\x7fELF").is_err());
        assert!(elf_needed(b"\x7fELF\x01\x01").is_err());
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for cut in [16, 0x40, 0x100, 0x400] {
            let _ = elf_needed(&me[..cut]);
        }
        let mut bad = me[..0x40].to_vec();
        bad[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(elf_needed(&bad).is_err());
        // Program headers that point anywhere: an error or a list, never a panic.
        let mut wild = me.clone();
        for b in wild.iter_mut().skip(0x40).take(0x400) {
            *b = 0xff;
        }
        let _ = elf_needed(&wild);
    }

    #[test]
    fn apt_depends_lines() {
        let text = "libpcap0.8\n  Depends: libc6\n  Depends: libdbus-1-3\n |Depends: libfoo\n  Depends: <virt>\n    bar\n  Breaks: old\n  PreDepends: libzstd1\n  Depends: libx:any\n";
        assert_eq!(
            parse_apt_depends(text),
            ["libc6", "libdbus-1-3", "libfoo", "libzstd1", "libx"]
        );
    }

    /// Console logs of real runs (`cargo xtask bench --peer dpdk --icount --seconds 3 --window 32`,
    /// 2026-12-01, Debian's dpdk-testpmd 22.11.11-0+deb12u1 on 6.1.0-57-amd64, TCG + icount,
    /// `-cpu max`), as the harness saved them (`target/peer-dpdk/console-MODE.log`).
    const IO_LOG: &str = include_str!("../testdata/testpmd-22.11-io-console.txt");
    const MAC_LOG: &str = include_str!("../testdata/testpmd-22.11-mac-console.txt");

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    fn stats(l: &[String], tag: &str) -> FwdStats {
        let a = answer(l, "show fwd stats all", &end_marker(tag)).unwrap();
        parse_fwd_stats(a).unwrap()
    }

    #[test]
    fn real_io_run() {
        let l = lines(IO_LOG);
        assert_eq!(
            parse_ports(&l),
            [
                (0, "02:00:00:00:00:01".to_string()),
                (1, "02:00:00:00:00:02".to_string())
            ]
        );
        assert_eq!(
            answer(&l, "# ready", &end_marker("ready")).unwrap().len(),
            0
        );
        let st = answer(&l, "start", &end_marker("start")).unwrap();
        assert!(
            st[0].starts_with("io packet forwarding - ports=2"),
            "{st:?}"
        );
        let a = stats(&l, "a64");
        assert_eq!(
            a.ports,
            [
                PortFwd {
                    rx_bursts: 18431,
                    rx_empty_pct: Some(100),
                    ..Default::default()
                },
                PortFwd {
                    rx_bursts: 18430,
                    rx_empty_pct: Some(100),
                    ..Default::default()
                }
            ]
        );
        // Nothing received yet: testpmd prints no cycles line.
        assert_eq!(
            (a.busy_cycles, a.cycle_packets, a.cycles_per_packet),
            (0, 0, None)
        );
        let b = stats(&l, "b64");
        assert_eq!(
            b.ports,
            [
                PortFwd {
                    rx_packets: 21483,
                    rx_bursts: 1611934,
                    rx_empty_pct: Some(99),
                    ..Default::default()
                },
                PortFwd {
                    tx_packets: 21483,
                    rx_bursts: 1611934,
                    rx_empty_pct: Some(100),
                    tx_bursts: 3288,
                    ..Default::default()
                }
            ]
        );
        assert_eq!((b.busy_cycles, b.cycle_packets), (11083388, 21483));
        assert_eq!(b.cycles_per_packet, Some(515.91));
        assert_eq!(b.tsc_mhz, Some(1000));
        let d = FwdDelta::between(&a, &b).unwrap();
        assert_eq!(
            d,
            FwdDelta {
                rx_packets: 21483,
                busy_cycles: 11083388,
                cycle_packets: 21483,
                busy_bursts: 3288,
                rx_bursts: 2 * 1611934 - 18431 - 18430,
            }
        );
        assert_eq!(format!("{:.2}", d.cycles_per_packet().unwrap()), "515.91");
        assert_eq!(
            format!("{:.3}", d.frames_per_busy_burst().unwrap()),
            "6.534"
        );
        assert!(d.empty_fraction().unwrap() > 0.998);
        assert!(
            FwdDelta::between(&b, &a).is_err(),
            "counters went backwards"
        );
    }

    #[test]
    fn real_mac_run() {
        let l = lines(MAC_LOG);
        let d = FwdDelta::between(&stats(&l, "a64"), &stats(&l, "b64")).unwrap();
        assert_eq!(
            (d.rx_packets, d.busy_cycles, d.cycle_packets, d.busy_bursts),
            (10686, 8620815, 10686, 1063)
        );
        assert_eq!(format!("{:.2}", d.cycles_per_packet().unwrap()), "806.74");
        assert_eq!(
            format!("{:.2}", d.frames_per_busy_burst().unwrap()),
            "10.05"
        );
    }

    #[test]
    fn bad_output_is_an_error() {
        let l = lines(IO_LOG);
        assert!(answer(&l, "show fwd stats all", &end_marker("zz")).is_none());
        assert!(parse_fwd_stats(&[]).is_err());
        let mut b = answer(&l, "show fwd stats all", &end_marker("b64"))
            .unwrap()
            .to_vec();
        let i = b
            .iter()
            .position(|x| x.contains("RX-packets: 21483"))
            .unwrap();
        b[i] = "  RX-packets: lots".into();
        assert!(parse_fwd_stats(&b).is_err());
        let c: Vec<String> = b
            .iter()
            .map(|x| x.replace("total cycles=11083388", "cycles=?"))
            .collect();
        assert!(parse_fwd_stats(&c).is_err());
        let e = vec![
            "  ---------------------- Forward statistics for port 99999999999999999999".to_string(),
        ];
        assert!(parse_fwd_stats(&e).is_err());
    }

    #[test]
    fn both_ports_or_a_clear_error() {
        let l = lines(IO_LOG);
        assert_eq!(probed_ports(&l).unwrap().len(), 2);
        // What testpmd prints when the EAL loaded no virtio PMD: no `Port N:` lines.
        let none: Vec<String> = l
            .iter()
            .filter(|x| !x.starts_with("Port ") && !x.contains("Probe PCI driver"))
            .cloned()
            .chain(["testpmd: No probed ethernet devices".to_string()])
            .collect();
        let e = format!("{:#}", probed_ports(&none).unwrap_err());
        assert!(
            e.contains("did not probe both") && e.contains("No probed"),
            "{e}"
        );
        let one: Vec<String> = l
            .iter()
            .filter(|x| !x.starts_with("Port 1:"))
            .cloned()
            .collect();
        assert!(probed_ports(&one).is_err());
    }

    #[test]
    fn sigill_is_explained() {
        // The guest's console under `--cpu qemu64` (captured).
        let l = "peer: testpmd exited with status 132";
        assert!(exit_hint(l).contains("--cpu max"));
        assert_eq!(exit_hint("peer: testpmd exited with status 0"), "");
    }

    #[test]
    fn ports_lines() {
        let l: Vec<String> = [
            "Configuring Port 0 (socket 0)",
            "Port 0: 02:00:00:00:00:01",
            "Port 1: 02:00:00:00:00:02",
            "Port 1: link up",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            parse_ports(&l),
            [
                (0, "02:00:00:00:00:01".to_string()),
                (1, "02:00:00:00:00:02".to_string())
            ]
        );
    }
}
