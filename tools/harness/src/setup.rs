//! Install missing prerequisites: the `x86_64-unknown-none` Rust target, QEMU, (for
//! `cargo xtask lint`) the rustup components `clippy` and `rustfmt`, and (for the GRUB ISO,
//! `cargo xtask iso`) GRUB, xorriso, mtools and OVMF.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The bare-metal target the kernel is built for.
pub const TARGET: &str = "x86_64-unknown-none";
/// The QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";
/// The Debian package providing it.
pub const QEMU_PACKAGE: &str = "qemu-system-x86";

/// Ensures both prerequisites; see [`ensure_target`] and [`ensure_qemu`].
pub fn ensure() -> Result<()> {
    ensure_target()?;
    ensure_qemu()?;
    Ok(())
}

/// `rustup target list --installed` contains [`TARGET`], else `rustup target add` it.
pub fn ensure_target() -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    let installed = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.trim() == TARGET),
        _ => bail!(
            "could not run `rustup target list --installed`; install rustup, then run \
             `rustup target add {TARGET}`"
        ),
    };
    if installed {
        return Ok(());
    }
    eprintln!("setup: Rust target {TARGET} missing; running `rustup target add {TARGET}`");
    let ok = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        bail!("installing the Rust target failed; run `rustup target add {TARGET}` yourself");
    }
    Ok(())
}

/// The rustup component `name` (`clippy`, `rustfmt`) is installed, else `rustup component add`
/// it.
pub fn ensure_component(name: &str) -> Result<()> {
    let out = Command::new("rustup")
        .args(["component", "list", "--installed"])
        .output();
    let installed = match out {
        // Lines are `clippy-x86_64-unknown-linux-gnu`, `rustfmt-…`.
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.trim() == name || l.trim().starts_with(&format!("{name}-"))),
        _ => bail!(
            "could not run `rustup component list --installed`; install rustup, then run \
             `rustup component add {name}`"
        ),
    };
    if installed {
        return Ok(());
    }
    eprintln!("setup: rustup component {name} missing; running `rustup component add {name}`");
    let ok = Command::new("rustup")
        .args(["component", "add", name])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        bail!("installing the rustup component {name} failed; run `rustup component add {name}` yourself");
    }
    Ok(())
}

/// Finds `name` on `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// [`QEMU`] is on `$PATH`, else (as root) `apt-get install` [`QEMU_PACKAGE`], else fail with the
/// command to run.
pub fn ensure_qemu() -> Result<()> {
    ensure_debian_tool(QEMU, QEMU_PACKAGE)
}

/// `promtool` (Debian's `prometheus` package), which the management-plane test uses to check
/// the `/metrics` output. Installed like QEMU when missing.
pub fn ensure_promtool() -> Result<()> {
    ensure_debian_tool("promtool", "prometheus")
}

/// `ping` (Debian's `iputils-ping`), `curl` and `iperf3`, which the hosts-behind-the-ports test runs in
/// its namespaces. Installed like QEMU when missing.
pub fn ensure_host_tools() -> Result<()> {
    ensure_debian_tool("ping", "iputils-ping")?;
    ensure_debian_tool("curl", "curl")?;
    ensure_debian_tool("iperf3", "iperf3")
}

/// `valgrind` (callgrind counts the host twin of the deterministic benchmark, `bench
/// datapath`). Installed like QEMU when missing.
pub fn ensure_valgrind() -> Result<()> {
    ensure_debian_tool("valgrind", "valgrind")
}

/// GRUB's i386-pc (SeaBIOS) modules, from Debian's `grub-pc-bin`.
pub const GRUB_PC_DIR: &str = "/usr/lib/grub/i386-pc";
/// GRUB's x86_64-efi (OVMF) modules, from Debian's `grub-efi-amd64-bin`.
pub const GRUB_EFI_DIR: &str = "/usr/lib/grub/x86_64-efi";
/// The UEFI firmware image (code and variables in one, for QEMU `-bios`), from Debian's `ovmf`.
pub const OVMF_FD: &str = "/usr/share/ovmf/OVMF.fd";

/// What `grub-mkrescue` needs for an image that boots under BIOS and UEFI (`cargo xtask iso`):
/// `grub-mkrescue` itself (`grub-common`), the i386-pc and x86_64-efi module trees
/// (`grub-pc-bin`, `grub-efi-amd64-bin`), `xorriso` and `mformat` (`mtools`, for the EFI
/// system partition image). Each is installed like QEMU when missing.
pub fn ensure_iso_tools() -> Result<()> {
    ensure_debian(
        "grub-mkrescue",
        || which("grub-mkrescue").is_some(),
        "grub-common",
    )?;
    ensure_debian(
        GRUB_PC_DIR,
        || {
            std::path::Path::new(GRUB_PC_DIR)
                .join("cdboot.img")
                .is_file()
        },
        "grub-pc-bin",
    )?;
    ensure_debian(
        GRUB_EFI_DIR,
        || {
            std::path::Path::new(GRUB_EFI_DIR)
                .join("multiboot2.mod")
                .is_file()
        },
        "grub-efi-amd64-bin",
    )?;
    ensure_debian_tool("xorriso", "xorriso")?;
    ensure_debian_tool("mformat", "mtools")
}

/// [`OVMF_FD`] (Debian's `ovmf`), the firmware of the ISO/UEFI boot. Installed like QEMU when
/// missing.
pub fn ensure_ovmf() -> Result<()> {
    ensure_debian(OVMF_FD, || std::path::Path::new(OVMF_FD).is_file(), "ovmf")
}

/// Make sure `tool` is on `$PATH`, installing Debian package `package` with apt-get when
/// running as root; otherwise fail naming the command to run.
fn ensure_debian_tool(tool: &str, package: &str) -> Result<()> {
    ensure_debian(tool, || which(tool).is_some(), package)
}

/// Make sure `present()` holds (`tool`: what it looks for, in messages), installing Debian
/// package `package` with apt-get when running as root; otherwise fail naming the command.
fn ensure_debian(tool: &str, present: impl Fn() -> bool, package: &str) -> Result<()> {
    if present() {
        return Ok(());
    }
    // One apt-get at a time: tests run on parallel threads, and a second apt-get fails on
    // dpkg's lock (seen: "installing iputils-ping failed" from two hosts tests at once).
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _apt = APT.lock().unwrap_or_else(|e| e.into_inner());
    if present() {
        return Ok(());
    }
    let cmd = format!("apt-get update && apt-get install -y --no-install-recommends {package}");
    if !is_root() {
        bail!("{tool} not found; install it with: sudo sh -c '{cmd}'");
    }
    eprintln!("setup: {tool} missing; running `{cmd}`");
    let ok = Command::new("sh")
        .args(["-c", &cmd])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get")?
        .success();
    if !ok || !present() {
        bail!("installing {package} failed; run `{cmd}` yourself");
    }
    Ok(())
}
