//! QEMU: build the image, assemble the command line, boot and supervise the guest, console I/O.
//!
//! Past ~800 lines because the command line, the console reader and the guest's supervision all
//! work on one `GuestConfig`/`Guest` (its tests are in `qemu/tests.rs`).
//!
//! The guest's console is QEMU's `-serial stdio`: [`Guest`] writes commands to QEMU's stdin and
//! collects its stdout line by line (`\r` stripped). QEMU runs in its own process group (so a
//! terminal Ctrl-C reaches only xtask) and is killed, with its whole group, when the [`Guest`] is
//! dropped; it also gets `PR_SET_PDEATHSIG(SIGKILL)` so it dies if the process that started it
//! dies without unwinding. Note that Linux delivers that signal when the *thread* that spawned
//! QEMU exits: keep the [`Guest`] on the thread that booted it (one test function, say).

use std::collections::VecDeque;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::gen;
pub use crate::mtu::{MtuError, Mtus, MAX_MTU, MIN_MTU};

/// The guest's ready marker (a line containing it).
pub const READY_MARKER: &str = "gannet: ready";
/// Prefix of the guest's statistics line.
pub const STATS_PREFIX: &str = "STATS ";
/// Marker of a configuration error (the guest then exits with failure).
pub const CONFIG_ERROR_MARKER: &str = "config error:";
/// Default time to wait for the ready marker.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Number of serial lines shown when something fails.
pub const TAIL_LINES: usize = 20;
/// Lines kept in memory; older ones are dropped (indices keep counting).
const MAX_KEPT_LINES: usize = 100_000;

/// The workspace root (two levels above this crate, `tools/harness`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).unwrap_or(here).to_path_buf()
}

/// The cargo target directory used for the kernel build: `$CARGO_TARGET_DIR` (relative to the
/// workspace root) if set, else `<root>/target`.
pub fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => root.join(d),
        _ => root.join("target"),
    }
}

/// Where `cargo xtask build` puts the kernel image.
pub fn image_path(root: &Path) -> PathBuf {
    target_dir(root).join("x86_64-unknown-none/release/gannet")
}

/// Where `cargo xtask iso` puts the GRUB ISO by default: beside the kernel image,
/// `target/x86_64-unknown-none/release/gannet.iso` ([`crate::iso`]).
pub fn iso_path(root: &Path) -> PathBuf {
    image_path(root).with_extension("iso")
}

/// The image to boot: `$GANNET_IMAGE` if set, else [`image_path`] of the workspace.
pub fn default_image() -> PathBuf {
    match std::env::var_os("GANNET_IMAGE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => image_path(&workspace_root()),
    }
}

/// Whether `image` is older than a source it is built from (a `.rs`, `.ld` or `Cargo.toml` under
/// `unikernel/`, `drivers/`, `mm/` or `netstack/` of the workspace at `root`, or `Cargo.lock`):
/// a test that boots it would measure the old kernel. Missing files count as stale; errors
/// reading a source are ignored (the build that follows reports them).
pub fn image_stale(root: &Path, image: &Path) -> bool {
    let Ok(built) = std::fs::metadata(image).and_then(|m| m.modified()) else {
        return true;
    };
    fn newer(dir: &Path, than: std::time::SystemTime) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let path = e.path();
            let name = e.file_name();
            if path.is_dir() {
                // Build outputs and fuzz targets' own targets are not sources.
                return name != "target" && newer(&path, than);
            }
            let source =
                path.extension().is_some_and(|x| x == "rs" || x == "ld") || name == "Cargo.toml";
            source
                && e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t > than)
        })
    }
    let lock_newer = std::fs::metadata(root.join("Cargo.lock"))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t > built);
    lock_newer
        || ["unikernel", "drivers", "mm", "netstack"]
            .iter()
            .any(|d| newer(&root.join(d), built))
}

/// Where `cargo xtask build --fault-inject` puts the fault image (cargo feature
/// `fault-inject`): its own target directory, `<target>/fault-inject`, so that the release
/// image and its build cache stay as they are.
pub fn fault_image_path(root: &Path) -> PathBuf {
    target_dir(root).join("fault-inject/x86_64-unknown-none/release/gannet")
}

/// The fault image to boot: `$GANNET_FAULT_IMAGE` if set, else [`fault_image_path`].
pub fn default_fault_image() -> PathBuf {
    match std::env::var_os("GANNET_FAULT_IMAGE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => fault_image_path(&workspace_root()),
    }
}

/// Where [`build_nf_control_image`] puts the negative control of the no-indirect-call check
/// (`harness::nocall`): `<target>/nf-control/x86_64-unknown-none/release/gannet`.
pub fn nf_control_image_path(root: &Path) -> PathBuf {
    target_dir(root).join("nf-control/x86_64-unknown-none/release/gannet")
}

/// The negative control to check: `$GANNET_NF_CONTROL_IMAGE` if set, else
/// [`nf_control_image_path`].
pub fn default_nf_control_image() -> PathBuf {
    match std::env::var_os("GANNET_NF_CONTROL_IMAGE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => nf_control_image_path(&workspace_root()),
    }
}

/// Runs `cargo build --release -p unikernel --target x86_64-unknown-none` in the workspace root
/// (output streamed) and returns the image path.
pub fn build_image() -> Result<PathBuf> {
    build(Variant::Stock)
}

/// [`build_image`] with `--features fault-inject` into its own target directory: the fault
/// image ([`fault_image_path`]).
pub fn build_fault_image() -> Result<PathBuf> {
    build(Variant::Fault)
}

/// [`build_image`] with `--features nf-indirect-control`: the negative control of
/// `harness::nocall` ([`nf_control_image_path`]; never booted). Its intermediate files share the
/// stock image's build directory (cargo's `build.build-dir`, cargo 1.91 or later), so only the
/// `unikernel` crate is compiled again (seconds, not a whole kernel build); the image itself goes
/// to its own target directory, so the stock image stays as it is.
pub fn build_nf_control_image() -> Result<PathBuf> {
    build(Variant::NfControl)
}

/// Which image [`build`] makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Stock,
    Fault,
    NfControl,
}

fn build(variant: Variant) -> Result<PathBuf> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args: Vec<String> = [
        "build",
        "--release",
        "-p",
        "unikernel",
        "--target",
        "x86_64-unknown-none",
    ]
    .map(String::from)
    .to_vec();
    let target = target_dir(&root);
    match variant {
        Variant::Stock => {}
        Variant::Fault => {
            args.push("--features".into());
            args.push("fault-inject".into());
            args.push("--target-dir".into());
            args.push(target.join("fault-inject").display().to_string());
        }
        Variant::NfControl => {
            args.push("--features".into());
            args.push("nf-indirect-control".into());
            args.push("--target-dir".into());
            args.push(target.join("nf-control").display().to_string());
            args.push("--config".into());
            args.push(format!(
                "build.build-dir={:?}",
                target.display().to_string()
            ));
        }
    }
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args(&args)
        .status()
        .context("running cargo build for the unikernel")?;
    ensure!(
        status.success(),
        "cargo {} failed ({status})",
        args.join(" ")
    );
    let image = match variant {
        Variant::Stock => image_path(&root),
        Variant::Fault => fault_image_path(&root),
        Variant::NfControl => nf_control_image_path(&root),
    };
    ensure!(
        image.exists(),
        "build succeeded but {} does not exist",
        image.display()
    );
    Ok(image)
}

/// QEMU accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Accel {
    /// Software emulation (the only one that works on these machines' nested KVM).
    #[default]
    Tcg,
    /// Hardware virtualisation through /dev/kvm.
    Kvm,
}

impl Accel {
    /// "tcg" or "kvm".
    pub fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The root-bus slot of igb port 0 ([`NicModel::Igb`] on [`NicBus::Root`]; port `i` at
/// `IGB_ROOT_SLOT + 2i`, its SR-IOV functions at 16 and 17 slots above).
pub const IGB_ROOT_SLOT: usize = 0x4;
/// igb ports the root bus takes ([`IGB_ROOT_SLOT`]: the last one's VFs end at slot 31).
pub const IGB_ROOT_PORTS: usize = 5;

/// The NIC model of the guest's ports (`--nic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NicModel {
    /// `virtio-net-pci` (or `virtio-net-device` on microvm).
    #[default]
    Virtio,
    /// QEMU's Intel 82574L model, `e1000e` (PCIe, q35 only; single queue; no `host_mtu`:
    /// the guest's MTU comes from `mtu0=`/`mtu1=` on its command line).
    E1000e,
    /// One of each per pair: `virtio-net-pci` on even ports, `e1000e` on odd ones (the kernel
    /// runs one such pair; no `host_mtu`, as for `e1000e`).
    Mixed,
    /// QEMU's Intel 82576 model, `igb` (PCIe, q35 only; QEMU ≥ 8.0; a queue pair per core
    /// with RSS, `queues=`; no `host_mtu`: `mtu0=`/`mtu1=` on the guest's command line, as
    /// for `e1000e`).
    Igb,
}

impl NicModel {
    /// "virtio", "e1000e", "mixed" or "igb" (as `--nic` takes it).
    pub fn name(self) -> &'static str {
        match self {
            NicModel::Virtio => "virtio",
            NicModel::E1000e => "e1000e",
            NicModel::Mixed => "mixed",
            NicModel::Igb => "igb",
        }
    }
}

/// QEMU network backend of the guest's virtio-net ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backend {
    /// `-netdev dgram` over unix datagram sockets in a directory (default; one queue per port,
    /// no privileges needed).
    #[default]
    Dgram,
    /// `-netdev tap,queues=N` on multi-queue tap devices in a network namespace of their own
    /// ([`crate::tap::TapNet`]); QEMU runs inside the namespace. Needs root and /dev/net/tun.
    Tap,
}

/// How QEMU loads the kernel (`--boot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Boot {
    /// `-kernel IMAGE -append CMDLINE`: QEMU's PVH loader (SeaBIOS, then the ELF note's entry).
    #[default]
    Pvh,
    /// `-cdrom ISO` under SeaBIOS: GRUB i386-pc loads the image with `multiboot2`
    /// ([`crate::iso`]; the command line is in its `grub.cfg`).
    IsoBios,
    /// `-bios OVMF.fd -cdrom ISO`: UEFI (OVMF), GRUB x86_64-efi, `multiboot2`.
    IsoUefi,
    /// `-machine microvm,acpi=off -kernel IMAGE`: the PVH entry (qboot-style microvm
    /// firmware), no PCI, no ACPI; one `virtio-net-device` (virtio-mmio, VIRTIO 1.2 §4.2,
    /// modern: `-global virtio-mmio.force-legacy=false`) per port, which QEMU names on the
    /// kernel command line as `virtio_mmio.device=512@ADDR:IRQ`. The guest runs on one CPU
    /// (no MADT) and polls.
    Microvm,
}

impl Boot {
    /// "pvh", "iso-bios", "iso-uefi" or "microvm" (as `--boot` takes it).
    pub fn name(self) -> &'static str {
        match self {
            Boot::Pvh => "pvh",
            Boot::IsoBios => "iso-bios",
            Boot::IsoUefi => "iso-uefi",
            Boot::Microvm => "microvm",
        }
    }

    /// Booted from a GRUB ISO (either firmware).
    pub fn is_iso(self) -> bool {
        matches!(self, Boot::IsoBios | Boot::IsoUefi)
    }

    /// QEMU's `-machine` value.
    pub fn machine(self) -> &'static str {
        match self {
            Boot::Microvm => "microvm,acpi=off",
            _ => "q35",
        }
    }

    /// The virtio-net device model: `virtio-net-device` (virtio-mmio) on microvm, else
    /// `virtio-net-pci` without its option ROM (`romfile=`): the guest never boots from the
    /// network, and SeaBIOS or OVMF would otherwise load and start iPXE (`efi-virtio.rom`) for
    /// each port before the kernel, under TCG a visible part of the firmware's boot time.
    pub fn net_device(self) -> &'static str {
        match self {
            Boot::Microvm => "virtio-net-device",
            _ => "virtio-net-pci,romfile=",
        }
    }
}

impl fmt::Display for Boot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where [`Guest`] echoes serial lines as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Echo {
    /// Do not echo (lines are still collected).
    #[default]
    Off,
    Stdout,
    Stderr,
}

/// How to boot the guest.
#[derive(Debug, Clone)]
pub struct GuestConfig {
    /// QEMU binary (default [`crate::setup::qemu_binary`]: `$GANNET_QEMU`, else
    /// `qemu-system-x86_64` from `$PATH`).
    pub qemu: PathBuf,
    /// Firmware/ROM directories, each passed as `-L DIR` before the rest of the command line
    /// (default [`crate::setup::qemu_data_dirs`], from `$GANNET_QEMU_DATA`): for a QEMU
    /// unpacked outside `/usr`.
    pub qemu_data: Vec<PathBuf>,
    /// Kernel image (PVH ELF).
    pub image: PathBuf,
    /// How QEMU loads it (default [`Boot::Pvh`], `-kernel`).
    pub boot: Boot,
    /// ISO boots: the GRUB image to boot (`-cdrom`). `None`: [`Guest::boot`] builds one from
    /// `image`, `append` and an `-initrd FILE` in `extra_args` (as its `module2`) into a
    /// temporary directory it removes on drop ([`crate::iso::build`]).
    pub iso: Option<PathBuf>,
    /// Directory of the unix-datagram sockets (`guest-i.sock`, `host-i.sock`).
    pub dgram_dir: PathBuf,
    /// Kernel command line (`-append`).
    pub append: String,
    pub accel: Accel,
    /// QEMU `-cpu MODEL` (e.g. `max`); `None` passes no `-cpu`, i.e. QEMU's default (`qemu64`
    /// under TCG).
    pub cpu: Option<String>,
    /// Add `-icount shift=0,sleep=off`.
    pub icount: bool,
    /// `-smp`.
    pub cpus: u32,
    /// Number of virtio-net ports.
    pub nics: usize,
    /// `-m`.
    pub memory: String,
    /// Extra arguments appended to the QEMU command line.
    pub extra_args: Vec<String>,
    pub echo: Echo,
    /// Network backend (default dgram).
    pub backend: Backend,
    /// Tap backend: queue pairs per port (`-netdev tap,queues=N`, `mq=on`, `vectors=2N+2`).
    pub queues: usize,
    /// Tap backend: the namespace handle (`/var/run/netns/NAME`, from
    /// [`crate::tap::TapNet::path`]) QEMU runs in; its taps are `gtap0..`.
    pub netns: Option<PathBuf>,
    /// Write one pcap per port, `DIR/portN.pcap`: every frame the guest received and sent on
    /// port N, as QEMU's `filter-dump` object sees it at the netdev (`--capture DIR`).
    pub capture: Option<PathBuf>,
    /// `--mtu`: `host_mtu=N` on every `virtio-net-pci` (the device offers VIRTIO_NET_F_MTU
    /// with that MTU). `None` (default): no `host_mtu`, QEMU's default (no MTU offered). On the
    /// tap backend the taps' MTU is set by whoever creates them ([`crate::tap::TapNet`]).
    pub mtu: Option<Mtus>,
    /// Device properties added to every port's device, each `,name=value` (e.g.
    /// `,mrg_rxbuf=off`: a device without `VIRTIO_NET_F_MRG_RXBUF`). Empty by default.
    pub nic_props: String,
    /// Where the ports' PCI functions sit (default [`NicBus::Root`], bus 0).
    pub nic_bus: NicBus,
    /// Leave through QEMU's `isa-debug-exit` (default `true`): `-device isa-debug-exit` and
    /// `debug_exit=on` at the end of the kernel command line ([`kernel_cmdline`]), so QEMU
    /// exits with 1 (clean) or 3 (failure). `false`: as a libvirt domain, neither, and a stop
    /// ends in ACPI S5 soft-off (QEMU status 0, [`GuestExit::PoweredOff`]).
    pub debug_exit: bool,
    /// `-qmp unix:PATH,server=on,wait=off`: a QMP socket ([`crate::qmp::Qmp`]) to press the
    /// ACPI power button (`system_powerdown`) and read QEMU's `SHUTDOWN` event. Default none.
    pub qmp: Option<PathBuf>,
    /// The ports' NIC model (default [`NicModel::Virtio`]).
    pub nic: NicModel,
}

/// `debug_exit=on`: what [`GuestConfig::debug_exit`] appends to the kernel command line.
pub const DEBUG_EXIT_ARG: &str = "debug_exit=on";

/// The kernel command line the guest gets: [`GuestConfig::append`], with [`DEBUG_EXIT_ARG`]
/// at its end when [`GuestConfig::debug_exit`] (the guest's boot log echoes this line).
pub fn kernel_cmdline(cfg: &GuestConfig) -> String {
    match (cfg.debug_exit, cfg.append.is_empty()) {
        (false, _) => cfg.append.clone(),
        (true, true) => DEBUG_EXIT_ARG.to_string(),
        (true, false) => format!("{} {DEBUG_EXIT_ARG}", cfg.append),
    }
}

/// Where the `virtio-net-pci` ports sit on q35's PCI hierarchy (issue 35: libvirt puts each
/// NIC behind a `pcie-root-port`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NicBus {
    /// On the root bus, `pcie.0` (QEMU's default placement).
    #[default]
    Root,
    /// Port `i` behind its own `pcie-root-port` (`id=rpI`, at `pcie.0` slot `0x10 + i`), as
    /// libvirt places them.
    RootPorts,
    /// Every port behind one conventional `pci-bridge` (`id=br0`, slot `0x1 + i` on it), which
    /// sits behind a `pcie-pci-bridge` (`pcie.0` slot `0x10`): two bridge levels.
    PciBridge,
}

impl NicBus {
    /// The bridge devices to add before the ports (`-device` values).
    fn bridges(self, nics: usize) -> Vec<String> {
        match self {
            NicBus::Root => Vec::new(),
            NicBus::RootPorts => (0..nics)
                .map(|i| {
                    format!(
                        "pcie-root-port,id=rp{i},chassis={},port={},bus=pcie.0,addr={:#x}",
                        i + 1,
                        0x10 + i,
                        0x10 + i
                    )
                })
                .collect(),
            NicBus::PciBridge => vec![
                "pcie-pci-bridge,id=pb0,bus=pcie.0,addr=0x10".into(),
                "pci-bridge,id=br0,chassis_nr=1,bus=pb0,addr=0x1".into(),
            ],
        }
    }

    /// Port `i`'s placement properties (`,bus=…,addr=…`; empty on the root bus).
    fn port(self, i: usize) -> String {
        match self {
            NicBus::Root => String::new(),
            NicBus::RootPorts => format!(",bus=rp{i},addr=0x0"),
            NicBus::PciBridge => format!(",bus=br0,addr={:#x}", 0x1 + i),
        }
    }
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig {
            qemu: crate::setup::qemu_binary(),
            qemu_data: crate::setup::qemu_data_dirs(),
            image: default_image(),
            boot: Boot::Pvh,
            iso: None,
            dgram_dir: PathBuf::new(),
            append: String::new(),
            accel: Accel::Tcg,
            cpu: None,
            icount: false,
            cpus: 1,
            nics: 2,
            memory: "256M".into(),
            extra_args: Vec::new(),
            echo: Echo::Off,
            backend: Backend::Dgram,
            queues: 1,
            netns: None,
            capture: None,
            mtu: None,
            nic_props: String::new(),
            nic_bus: NicBus::Root,
            debug_exit: true,
            qmp: None,
            nic: NicModel::Virtio,
        }
    }
}

fn utf8(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| anyhow!("path {} is not UTF-8", p.display()))
}

/// Longest kernel command line the guest keeps, in bytes: the kernel's `MAX_CMDLINE`
/// (`unikernel/src/arch/pvh.rs`; mirrored here because tools does not link the kernel). A
/// longer one used to fail in the guest as `boot info error: Cmdline` or, from 4,128 bytes,
/// overwrite the boot info (`BadMagic`): xtask refuses it before starting QEMU.
pub const MAX_CMDLINE: usize = 4096;

/// A kernel command line longer than [`MAX_CMDLINE`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdlineTooLong {
    /// Its length in bytes.
    pub len: usize,
}

impl fmt::Display for CmdlineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CmdlineTooLong: the kernel command line (--append) is {} bytes; the guest keeps at most {MAX_CMDLINE} (use --routes FILE for many routes)",
            self.len
        )
    }
}

impl std::error::Error for CmdlineTooLong {}

/// The QEMU arguments (without the program name) for `cfg`. Fails if a socket path would not fit
/// in `sun_path`, a path cannot be passed to QEMU, or the command line is longer than
/// [`MAX_CMDLINE`] ([`CmdlineTooLong`]).
pub fn command_args(cfg: &GuestConfig) -> Result<Vec<String>> {
    let cmdline = kernel_cmdline(cfg);
    if cmdline.len() > MAX_CMDLINE {
        return Err(CmdlineTooLong { len: cmdline.len() }.into());
    }
    if cfg.backend == Backend::Dgram {
        gen::check_socket_paths(&cfg.dgram_dir, cfg.nics)?;
    } else {
        ensure!(
            (1..=crate::tap::MAX_QUEUES).contains(&cfg.queues),
            "--queues {}: give 1..={}",
            cfg.queues,
            crate::tap::MAX_QUEUES
        );
    }
    ensure!(cfg.nics <= 9, "at most 9 NICs (MAC 02:00:00:00:00:0N)");
    if let Some(m) = &cfg.mtu {
        m.check_ports(cfg.nics)?;
    }
    ensure!(
        cfg.nic_props.is_empty() || cfg.nic_props.starts_with(','),
        "device properties {:?} must start with a comma (`,name=value`)",
        cfg.nic_props
    );
    // QEMU's igb (10.0) realizes its eight SR-IOV virtual functions with the function, at
    // devfn + 0x80 + 2k: slots s+16 and s+17 of its bus. On the root bus two ports in
    // neighbouring slots would claim the same slot for their VFs (QEMU refuses to start), so
    // igb port `i` sits at slot IGB_ROOT_SLOT + 2i there (VFs at +16, +17; at most
    // IGB_ROOT_PORTS ports: the last VF slot is 31). Behind root ports or a bridge each
    // port's VFs live on its own bus, or beside it.
    ensure!(
        cfg.nic != NicModel::Igb || cfg.nic_bus != NicBus::Root || cfg.nics <= IGB_ROOT_PORTS,
        "--nic igb: {} ports on the root bus; at most {IGB_ROOT_PORTS} (their SR-IOV functions take two slots each 16 above them): use root ports",
        cfg.nics
    );
    let nic_place = |i: usize| match (cfg.nic, cfg.nic_bus) {
        (NicModel::Igb, NicBus::Root) => format!(",addr={:#x}", IGB_ROOT_SLOT + 2 * i),
        (_, bus) => bus.port(i),
    };
    // `host_mtu` and any other device properties of port `i`.
    let host_mtu = |i: usize| {
        let mtu = cfg
            .mtu
            .as_ref()
            .map_or(String::new(), |m| format!(",host_mtu={}", m.port(i)));
        format!("{mtu}{}{}", cfg.nic_props, nic_place(i))
    };
    if cfg.nic != NicModel::Virtio {
        ensure!(
            cfg.boot != Boot::Microvm,
            "--nic {}: microvm has no PCI (use --boot pvh or an ISO boot)",
            cfg.nic.name()
        );
        ensure!(
            cfg.mtu.is_none(),
            "--nic {}: --mtu sets virtio-net's host_mtu, which e1000e and igb do not have; pass mtu0=N mtu1=N in --append",
            cfg.nic.name()
        );
        ensure!(
            cfg.queues == 1,
            "--nic {}: --queues {}: the guest drives one queue pair per e1000e or igb port",
            cfg.nic.name(),
            cfg.queues
        );
    }
    // The device model and its own properties (`host_mtu` is virtio-net's only).
    let net_device = |i: usize| match cfg.nic {
        NicModel::Mixed if i.is_multiple_of(2) => cfg.boot.net_device(),
        NicModel::Virtio => cfg.boot.net_device(),
        NicModel::E1000e | NicModel::Mixed => "e1000e,romfile=",
        NicModel::Igb => "igb,romfile=",
    };
    ensure!(
        cfg.nic_bus == NicBus::Root || cfg.boot != Boot::Microvm,
        "--boot microvm has no PCI bridges ({:?})",
        cfg.nic_bus
    );
    ensure!(cfg.cpus >= 1, "--cpus must be at least 1");
    let image = utf8(&cfg.image)?;
    ensure!(!image.contains(','), "image path {image} contains a comma");
    // ISO boots: the command line and the routes file (-initrd) are on the ISO already.
    let load: Vec<String> = match cfg.boot {
        Boot::Pvh | Boot::Microvm => {
            vec!["-kernel".into(), image.into(), "-append".into(), cmdline]
        }
        Boot::IsoBios | Boot::IsoUefi => {
            let Some(iso) = &cfg.iso else {
                bail!(
                    "--boot {}: no ISO given (GuestConfig::iso; Guest::boot builds one)",
                    cfg.boot
                )
            };
            let iso = utf8(iso)?;
            ensure!(!iso.contains(','), "ISO path {iso} contains a comma");
            let mut v = Vec::new();
            if cfg.boot == Boot::IsoUefi {
                v.extend(["-bios".to_string(), crate::setup::OVMF_FD.to_string()]);
            }
            v.extend(["-cdrom".to_string(), iso.to_string()]);
            v
        }
    };
    ensure!(
        cfg.boot != Boot::Microvm || cfg.queues == 1,
        "--boot microvm: --queues {}: multi-queue is not supported on virtio-mmio ports",
        cfg.queues
    );
    let mut a: Vec<String> = [
        "-machine",
        cfg.boot.machine(),
        "-accel",
        cfg.accel.name(),
        "-m",
        &cfg.memory,
        "-smp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(cfg.cpus.to_string());
    if let Some(model) = &cfg.cpu {
        ensure!(
            !model.is_empty() && !model.starts_with('-'),
            "--cpu {model:?} is not a QEMU CPU model (try `max`, or `qemu-system-x86_64 -cpu help`)"
        );
        a.push("-cpu".into());
        a.push(model.clone());
    }
    a.extend(
        [
            "-display",
            "none",
            "-no-reboot",
            "-serial",
            "stdio",
            "-monitor",
            "none",
            "-nodefaults",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    a.extend(load);
    if cfg.boot == Boot::Microvm {
        // QEMU's virtio-mmio transports are legacy (Version 1) by default; the guest drives
        // the modern layout only (drivers/src/mmio.rs).
        a.extend([
            "-global".to_string(),
            "virtio-mmio.force-legacy=false".to_string(),
        ]);
    }
    if cfg.debug_exit {
        a.extend([
            "-device".to_string(),
            "isa-debug-exit,iobase=0xf4,iosize=0x04".to_string(),
        ]);
    }
    if let Some(sock) = &cfg.qmp {
        a.push("-qmp".into());
        a.push(format!("unix:{},server=on,wait=off", utf8(sock)?));
    }
    if cfg.icount {
        a.extend(["-icount".to_string(), "shift=0,sleep=off".to_string()]);
    }
    for b in cfg.nic_bus.bridges(cfg.nics) {
        a.push("-device".into());
        a.push(b);
    }
    for i in (0..cfg.nics).filter(|_| cfg.backend == Backend::Tap) {
        let n = cfg.queues;
        a.push("-netdev".into());
        a.push(format!(
            "tap,id=p{i},ifname={},script=no,downscript=no,queues={n}",
            crate::tap::tap_name(i)
        ));
        a.push("-device".into());
        // MSI-X vectors: one per queue (2N) + control queue + configuration changes.
        let mq = if n > 1 {
            format!(",mq=on,vectors={}", 2 * n + 2)
        } else {
            String::new()
        };
        a.push(format!(
            "{},netdev=p{i}{mq}{},mac=02:00:00:00:00:0{}",
            net_device(i),
            host_mtu(i),
            i + 1
        ));
    }
    for i in (0..cfg.nics).filter(|_| cfg.backend == Backend::Dgram) {
        let local = gen::guest_sock(&cfg.dgram_dir, i);
        let remote = gen::host_sock(&cfg.dgram_dir, i);
        a.push("-netdev".into());
        a.push(format!(
            "dgram,id=p{i},local.type=unix,local.path={},remote.type=unix,remote.path={}",
            utf8(&local)?,
            utf8(&remote)?
        ));
        a.push("-device".into());
        a.push(format!(
            "{},netdev=p{i}{},mac=02:00:00:00:00:0{}",
            net_device(i),
            host_mtu(i),
            i + 1
        ));
    }
    if let Some(dir) = &cfg.capture {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--capture: creating {}", dir.display()))?;
        for i in 0..cfg.nics {
            let file = capture_file(dir, i);
            a.push("-object".into());
            a.push(format!(
                "filter-dump,id=cap{i},netdev=p{i},file={}",
                utf8(&file)?
            ));
        }
    }
    if cfg.boot.is_iso() {
        let (_, rest) = split_initrd(&cfg.extra_args);
        a.extend(rest);
    } else {
        a.extend(cfg.extra_args.iter().cloned());
    }
    // Firmware directories of a QEMU unpacked outside /usr (`--qemu-data`).
    for dir in &cfg.qemu_data {
        a.push("-L".into());
        a.push(utf8(dir)?.to_string());
    }
    Ok(a)
}

/// Refuse a configuration [`Guest::boot`] would refuse for its QEMU command line (what
/// [`command_args`] checks), before anything is built or started. An ISO boot whose ISO
/// [`Guest::boot`] is still to build is checked with a placeholder path.
///
/// # Errors
/// As [`command_args`].
pub fn check_config(cfg: &GuestConfig) -> Result<()> {
    let mut probe = cfg.clone();
    if probe.boot.is_iso() && probe.iso.is_none() {
        probe.iso = Some(PathBuf::from("/to-be-built/gannet.iso"));
    }
    command_args(&probe).map(drop)
}

/// `extra_args` without its `-initrd FILE` pair, and that FILE (the routes file: ISO boots put
/// it on the ISO as a `module2` instead).
fn split_initrd(extra: &[String]) -> (Option<PathBuf>, Vec<String>) {
    let mut file = None;
    let mut rest = Vec::new();
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        if a == "-initrd" {
            file = it.next().map(PathBuf::from);
        } else {
            rest.push(a.clone());
        }
    }
    (file, rest)
}

/// The pcap file `--capture DIR` writes for port `port`: `DIR/port{port}.pcap`.
pub fn capture_file(dir: &Path, port: usize) -> PathBuf {
    dir.join(format!("port{port}.pcap"))
}

// ---------------------------------------------------------------------------------------------
// STATS

/// A parsed `STATS {json}` line: the guest's [`netstack::stats::Stats`] (the same type it
/// serialised), with typed fields through `Deref` (`s.forwarded`, `s.ports[0].drops.too_big`),
/// shown as its JSON by `Display`. A line whose JSON does not match the schema (a stale image,
/// say) is an error, not a missing key.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats(pub netstack::stats::Stats);

impl Stats {
    /// Parses a line starting with `STATS ` (after optional leading whitespace) followed by the
    /// JSON object. `None` for other lines; an error if the JSON does not match the schema.
    /// Keys the schema does not know (a newer guest) are ignored: [`Stats::exact_mismatch`]
    /// is the strict check.
    pub fn from_line(line: &str) -> Option<Result<Stats>> {
        let rest = line.trim_start().strip_prefix(STATS_PREFIX)?;
        Some(
            serde_json::from_str(rest.trim())
                .map(Stats)
                .with_context(|| {
                    format!("STATS line does not match netstack::stats::Stats: {line}")
                }),
        )
    }

    /// Whether the guest and the tools were built from different schemas: `None` when
    /// `line`'s object, parsed into the tools' [`netstack::stats::Stats`] and written back, is
    /// exactly the guest's (every key read, every value kept); else where they first differ
    /// (`.nf_counters: written by the guest, not read`). The integration tests check every
    /// `STATS` line they read with it.
    pub fn exact_mismatch(line: &str) -> Option<String> {
        let rest = line.trim_start().strip_prefix(STATS_PREFIX)?.trim();
        let guest: serde_json::Value = match serde_json::from_str(rest) {
            Ok(v) => v,
            Err(e) => return Some(format!("not JSON: {e}")),
        };
        let back = match serde_json::from_str::<netstack::stats::Stats>(rest) {
            Ok(s) => serde_json::to_value(&s).expect("a Stats is JSON"),
            Err(e) => return Some(format!("not a Stats: {e}")),
        };
        (back != guest).then(|| json_diff(&guest, &back, ""))
    }
}

/// The first place where `guest` and `back` differ, with its JSON path
/// (`.ports[0].rx: 5 written, 6 read`, `.future: written by the guest, not read`).
fn json_diff(guest: &serde_json::Value, back: &serde_json::Value, at: &str) -> String {
    use serde_json::Value;
    match (guest, back) {
        (Value::Object(g), Value::Object(b)) => {
            for (k, v) in g {
                match b.get(k) {
                    Some(w) if w == v => {}
                    Some(w) => return json_diff(v, w, &format!("{at}.{k}")),
                    None => return format!("{at}.{k}: written by the guest, not read"),
                }
            }
            match b.keys().find(|k| !g.contains_key(*k)) {
                Some(k) => format!("{at}.{k}: not written by the guest"),
                None => format!("{at}: differs"),
            }
        }
        (Value::Array(g), Value::Array(b)) if g.len() == b.len() => g
            .iter()
            .zip(b)
            .enumerate()
            .find(|(_, (v, w))| v != w)
            .map_or_else(
                || format!("{at}: differs"),
                |(i, (v, w))| json_diff(v, w, &format!("{at}[{i}]")),
            ),
        _ => format!("{at}: {guest} written, {back} read"),
    }
}

impl Stats {
    /// The non-zero drop counters: `port.REASON` (summed over the ports) and
    /// `router.REASON` (where lost frames went; `soak`, `faults` and `bench --peer` print it).
    pub fn drops(&self) -> std::collections::BTreeMap<String, u64> {
        let mut m = std::collections::BTreeMap::new();
        for p in &self.ports {
            for (why, n) in p.drops.iter().filter(|&(_, n)| n > 0) {
                *m.entry(format!("port.{}", why.as_str())).or_insert(0) += n;
            }
        }
        if let Some(r) = &self.router {
            for (why, n) in r.drops.iter().filter(|&(_, n)| n > 0) {
                m.insert(format!("router.{}", why.as_str()), n);
            }
        }
        m
    }
}

impl std::ops::Deref for Stats {
    type Target = netstack::stats::Stats;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Display for Stats {
    /// The compact JSON (as the guest printed it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(&self.0).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
}

// ---------------------------------------------------------------------------------------------
// Exit status

/// How QEMU ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestExit {
    /// QEMU status 1: the guest wrote 0 to isa-debug-exit (clean shutdown). [`Guest`] reports
    /// [`GuestExit::Other`] instead when QEMU printed an error on stderr (QEMU's own failures
    /// also exit with 1).
    Clean,
    /// QEMU status 3: the guest wrote 1 to isa-debug-exit (guest failure).
    GuestFailure,
    /// QEMU status 0: the guest powered off through ACPI S5 (or reset itself under
    /// `-no-reboot`; QMP's `SHUTDOWN` event tells which: `guest-shutdown` or `guest-reset`).
    /// What [`GuestConfig::debug_exit`] `false` gives; whether the stop was clean is in the
    /// log (`gannet: shutdown clean`), as for a libvirt domain.
    PoweredOff,
    /// Anything else (QEMU error, killed by a signal, other exit codes).
    Other(ExitStatus),
}

impl GuestExit {
    /// Maps QEMU's exit status.
    pub fn from_status(s: ExitStatus) -> GuestExit {
        match s.code() {
            Some(0) => GuestExit::PoweredOff,
            Some(1) => GuestExit::Clean,
            Some(3) => GuestExit::GuestFailure,
            _ => GuestExit::Other(s),
        }
    }

    /// True only for a clean guest shutdown.
    pub fn is_clean(self) -> bool {
        self == GuestExit::Clean
    }
}

impl fmt::Display for GuestExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestExit::Clean => f.write_str("clean guest shutdown (QEMU status 1)"),
            GuestExit::GuestFailure => f.write_str("guest failure (QEMU status 3)"),
            GuestExit::PoweredOff => f.write_str("ACPI S5 soft-off or reset (QEMU status 0)"),
            GuestExit::Other(s) => match (s.code(), s.signal()) {
                (Some(c), _) => write!(f, "QEMU exited with status {c}"),
                (None, Some(sig)) => write!(f, "QEMU killed by signal {sig}"),
                _ => write!(f, "QEMU ended: {s}"),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Guest

#[derive(Default)]
struct Log {
    lines: VecDeque<String>,
    /// Index of `lines[0]` (lines dropped so far).
    first: usize,
    /// QEMU's stdout is closed.
    eof: bool,
}

impl Log {
    fn end(&self) -> usize {
        self.first + self.lines.len()
    }
    fn tail(&self, n: usize) -> Vec<String> {
        let skip = self.lines.len().saturating_sub(n);
        self.lines.iter().skip(skip).cloned().collect()
    }
}

#[derive(Default)]
struct Shared {
    log: Mutex<Log>,
    cv: Condvar,
    stderr: Mutex<VecDeque<String>>,
    stderr_done: std::sync::atomic::AtomicBool,
}

/// A cloneable handle that writes lines to the guest console (QEMU's stdin).
#[derive(Clone)]
pub struct Console {
    stdin: Arc<Mutex<Option<ChildStdin>>>,
}

impl Console {
    /// Sends `line` followed by `\n`.
    pub fn send_line(&self, line: &str) -> Result<()> {
        let mut g = self.stdin.lock().unwrap();
        let stdin = g
            .as_mut()
            .ok_or_else(|| anyhow!("guest console is closed"))?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .context("writing to the guest console")
    }
}

/// Outcome of waiting for a line.
enum Wait {
    Found(usize, String),
    Timeout,
    Eof,
}

/// A booted QEMU guest: serial console lines, console commands, exit status. QEMU (and its
/// process group) is killed when this is dropped.
pub struct Guest {
    /// ISO boots without [`GuestConfig::iso`]: the directory of the ISO built for this guest.
    _iso_dir: Option<tempfile::TempDir>,
    child: Child,
    console: Console,
    shared: Arc<Shared>,
    exit: Option<GuestExit>,
    accel: Accel,
    args: Vec<String>,
}

impl Guest {
    /// Boots QEMU with `cfg`: checks the socket paths, removes stale `guest-i.sock` files,
    /// spawns QEMU in its own process group and starts collecting its serial output. Does not
    /// wait for the ready marker (see [`Guest::wait_ready`]). The host side of the sockets
    /// (e.g. a [`gen::Generator`]) should be bound before this is called.
    ///
    /// ISO boots ([`Boot::IsoBios`], [`Boot::IsoUefi`]) without [`GuestConfig::iso`] first build
    /// the ISO ([`crate::iso::build`], ~0.5 s, before QEMU is spawned); UEFI boots install OVMF
    /// when missing ([`crate::setup::ensure_ovmf`]).
    pub fn boot(cfg: &GuestConfig) -> Result<Guest> {
        check_config(cfg)?;
        ensure!(
            cfg.image.is_file(),
            "kernel image {} not found (run `cargo xtask build`)",
            cfg.image.display()
        );
        let mut iso_dir = None;
        let mut owned;
        let mut cfg = cfg;
        if cfg.boot == Boot::IsoUefi {
            crate::setup::ensure_ovmf()?;
        }
        if cfg.boot.is_iso() && cfg.iso.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("gannet-guest-iso")
                .tempdir()
                .context("creating a directory for the guest's ISO")?;
            let iso = dir.path().join("gannet.iso");
            let (routes, _) = split_initrd(&cfg.extra_args);
            crate::iso::build(&cfg.image, &kernel_cmdline(cfg), routes.as_deref(), &iso)?;
            owned = cfg.clone();
            owned.iso = Some(iso);
            cfg = &owned;
            iso_dir = Some(dir);
        }
        let args = command_args(cfg)?;
        if cfg.accel == Accel::Kvm {
            ensure!(
                Path::new("/dev/kvm").exists(),
                "--accel kvm needs /dev/kvm; use --accel tcg"
            );
        }
        for i in (0..cfg.nics).filter(|_| cfg.backend == Backend::Dgram) {
            let p = gen::guest_sock(&cfg.dgram_dir, i);
            match std::fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing stale {}", p.display()))
                }
                _ => {}
            }
        }
        let mut cmd = Command::new(&cfg.qemu);
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // Tap backend: QEMU runs in the namespace that holds the taps (like `ip netns exec`).
        let netns = match (cfg.backend, &cfg.netns) {
            (Backend::Tap, Some(ns)) => Some(crate::tap::open_netns(ns)?),
            (Backend::Tap, None) => bail!("the tap backend needs a network namespace (TapNet)"),
            _ => None,
        };
        let netns_fd = netns.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        // SAFETY: prctl and setns are async-signal-safe and touch no memory of the parent; the
        // namespace fd stays open in the parent until after the spawn.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = netns_fd {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        // Retry ETXTBSY: a just-written script (tests' fake QEMU) can be briefly "busy" while
        // another thread of this process forks.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    thread::sleep(Duration::from_millis(20));
                }
                r => break r.with_context(|| format!("starting {}", cfg.qemu.display()))?,
            }
        };
        let shared = Arc::new(Shared::default());
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let stdin = child.stdin.take();
        {
            let shared = shared.clone();
            let echo = cfg.echo;
            thread::Builder::new()
                .name("qemu-serial".into())
                .spawn(move || read_serial(stdout, &shared, echo))?;
        }
        {
            let shared = shared.clone();
            thread::Builder::new()
                .name("qemu-stderr".into())
                .spawn(move || {
                    for line in BufReader::new(stderr).lines() {
                        let Ok(line) = line else { break };
                        let mut q = shared.stderr.lock().unwrap();
                        if q.len() >= 200 {
                            q.pop_front();
                        }
                        q.push_back(line);
                    }
                    shared
                        .stderr_done
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                })?;
        }
        Ok(Guest {
            _iso_dir: iso_dir,
            child,
            console: Console {
                stdin: Arc::new(Mutex::new(stdin)),
            },
            shared,
            exit: None,
            accel: cfg.accel,
            args,
        })
    }

    /// The accelerator QEMU runs with.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// QEMU's arguments (without the program name).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// QEMU's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A handle to write console lines from another thread.
    pub fn console(&self) -> Console {
        self.console.clone()
    }

    /// Sends one console line (a `\n` is appended), e.g. `"stats"`, `"quit"`, `"help"`.
    pub fn send_line(&self, line: &str) -> Result<()> {
        self.console.send_line(line)
    }

    /// Number of serial lines received so far; a cursor for [`Guest::wait_for_line_from`].
    pub fn line_count(&self) -> usize {
        self.shared.log.lock().unwrap().end()
    }

    /// All serial lines still kept (the newest 100 000), oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.shared
            .log
            .lock()
            .unwrap()
            .lines
            .iter()
            .cloned()
            .collect()
    }

    /// The last `n` serial lines.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        self.shared.log.lock().unwrap().tail(n)
    }

    /// The last lines QEMU printed on its stderr (errors from QEMU itself).
    pub fn stderr_lines(&self) -> Vec<String> {
        self.shared.stderr.lock().unwrap().iter().cloned().collect()
    }

    /// A multi-line description of the last [`TAIL_LINES`] serial lines and QEMU's stderr, for
    /// error messages.
    pub fn tail_report(&self) -> String {
        let mut s = format!("last {TAIL_LINES} serial lines:\n");
        for l in self.last_lines(TAIL_LINES) {
            s.push_str("  | ");
            s.push_str(&l);
            s.push('\n');
        }
        let err = self.stderr_lines();
        if !err.is_empty() {
            s.push_str("QEMU stderr:\n");
            for l in err.iter().rev().take(TAIL_LINES).rev() {
                s.push_str("  ! ");
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn wait_inner(&self, from: usize, pred: &dyn Fn(&str) -> bool, timeout: Duration) -> Wait {
        let deadline = Instant::now() + timeout;
        let mut log = self.shared.log.lock().unwrap();
        let mut next = from.max(log.first);
        loop {
            while next < log.end() {
                let line = &log.lines[next - log.first];
                if pred(line) {
                    return Wait::Found(next, line.clone());
                }
                next += 1;
            }
            if log.eof {
                return Wait::Eof;
            }
            let now = Instant::now();
            if now >= deadline {
                return Wait::Timeout;
            }
            log = self.shared.cv.wait_timeout(log, deadline - now).unwrap().0;
            next = next.max(log.first);
        }
    }

    /// Waits for a serial line with index ≥ `from` matching `pred`. `Ok(None)` on timeout; an
    /// error if QEMU's output ended first. Returns the line's index and text.
    pub fn poll_line_from(
        &self,
        from: usize,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<Option<(usize, String)>> {
        match self.wait_inner(from, &pred, timeout) {
            Wait::Found(i, l) => Ok(Some((i, l))),
            Wait::Timeout => Ok(None),
            Wait::Eof => bail!("QEMU's output ended (QEMU exited)\n{}", self.tail_report()),
        }
    }

    /// Waits for a serial line with index ≥ `from` matching `pred`; fails on timeout or if QEMU
    /// exits first (the error includes the last serial lines).
    pub fn wait_for_line_from(
        &self,
        from: usize,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<(usize, String)> {
        match self.wait_inner(from, &pred, timeout) {
            Wait::Found(i, l) => Ok((i, l)),
            Wait::Timeout => bail!(
                "no matching serial line within {timeout:?}\n{}",
                self.tail_report()
            ),
            Wait::Eof => bail!(
                "QEMU exited before a matching serial line appeared\n{}",
                self.tail_report()
            ),
        }
    }

    /// Waits for any serial line (since boot) matching `pred`; see
    /// [`Guest::wait_for_line_from`].
    pub fn wait_for_line(&self, pred: impl Fn(&str) -> bool, timeout: Duration) -> Result<String> {
        self.wait_for_line_from(0, pred, timeout).map(|(_, l)| l)
    }

    /// Waits for the ready marker (`gannet: ready`). Fails with the last serial lines if it does
    /// not come within `timeout` or if QEMU exits, and with the guest's line alone if it reports
    /// `config error:` (the line says it all, and the serial output shown live already holds
    /// the lines before it: the tail would print it a second time).
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let (_, line) = self
            .wait_for_line_from(
                0,
                |l| l.contains(READY_MARKER) || l.contains(CONFIG_ERROR_MARKER),
                timeout,
            )
            .context("waiting for the guest's ready marker")?;
        ensure!(
            line.contains(READY_MARKER),
            "guest reported: {}",
            line.trim()
        );
        Ok(())
    }

    /// Sends `stats` and returns the next `STATS` line (an error if it does not match the
    /// schema).
    pub fn stats(&self, timeout: Duration) -> Result<Stats> {
        let from = self.line_count();
        self.send_line("stats")?;
        let (_, line) = self
            .wait_for_line_from(from, |l| Stats::from_line(l).is_some(), timeout)
            .context("waiting for the STATS line")?;
        Stats::from_line(&line).expect("matched above")
    }

    /// Sends `quit`, waits for QEMU to exit, and returns the final `STATS` line printed after
    /// the command (if any) and the exit status. A final `STATS` line that does not match the
    /// schema is an error.
    pub fn quit(&mut self, timeout: Duration) -> Result<(Option<Stats>, GuestExit)> {
        let from = self.line_count();
        self.send_line("quit")?;
        let exit = self.wait_exit(timeout)?;
        let log = self.shared.log.lock().unwrap();
        let stats = (from.max(log.first)..log.end())
            .rev()
            .find_map(|i| Stats::from_line(&log.lines[i - log.first]))
            .transpose()?;
        Ok((stats, exit))
    }

    /// Non-blocking check whether QEMU has exited.
    pub fn try_wait(&mut self) -> Result<Option<GuestExit>> {
        if let Some(e) = self.exit {
            return Ok(Some(e));
        }
        match self.child.try_wait().context("waiting for QEMU")? {
            Some(s) => {
                self.finish_output();
                let mut e = GuestExit::from_status(s);
                if e == GuestExit::Clean && self.qemu_error().is_some() {
                    // QEMU itself exits with 1 on errors (e.g. an image without a PVH note).
                    e = GuestExit::Other(s);
                }
                self.exit = Some(e);
                Ok(Some(e))
            }
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` for QEMU to exit; on timeout QEMU is killed and an error returned.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<GuestExit> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.try_wait()? {
                return Ok(e);
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "QEMU did not exit within {timeout:?}; killed it\n{}",
                    self.tail_report()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The first error (not warning) QEMU printed on stderr, if any.
    pub fn qemu_error(&self) -> Option<String> {
        self.stderr_lines()
            .into_iter()
            // Most errors are `qemu-system-x86_64: …`; the kernel loader's say `qemu: …`
            // (e.g. `qemu: invalid kernel header`).
            .find(|l| {
                (l.starts_with("qemu-system") || l.starts_with("qemu:")) && !l.contains("warning:")
            })
    }

    /// After exit: give the reader threads a moment to collect the last lines.
    fn finish_output(&self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self
            .shared
            .stderr_done
            .load(std::sync::atomic::Ordering::SeqCst)
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(2));
        }
        let mut log = self.shared.log.lock().unwrap();
        while !log.eof {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            log = self.shared.cv.wait_timeout(log, deadline - now).unwrap().0;
        }
    }

    /// Kills QEMU's process group (SIGKILL) and reaps QEMU. Idempotent.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscall; QEMU is its own process-group leader (process_group(0)) and is
        // not reaped yet, so the group id cannot have been reused.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        if let Ok(s) = self.child.wait() {
            self.exit = Some(GuestExit::from_status(s));
        }
        *self.console.stdin.lock().unwrap() = None;
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_serial(stdout: impl Read, shared: &Shared, echo: Echo) {
    let mut r = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        let line: String = String::from_utf8_lossy(&buf)
            .chars()
            .filter(|&c| c != '\r' && c != '\n')
            .collect();
        match echo {
            Echo::Off => {}
            Echo::Stdout => {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{line}");
                let _ = o.flush();
            }
            Echo::Stderr => eprintln!("{line}"),
        }
        let mut log = shared.log.lock().unwrap();
        if log.lines.len() >= MAX_KEPT_LINES {
            log.lines.pop_front();
            log.first += 1;
        }
        log.lines.push_back(line);
        shared.cv.notify_all();
    }
    shared.log.lock().unwrap().eof = true;
    shared.cv.notify_all();
}

#[cfg(test)]
mod tests;
