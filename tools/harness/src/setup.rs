//! Install missing prerequisites: the `x86_64-unknown-none` Rust target, QEMU (at least
//! [`QEMU_MIN_MAJOR`], from `bookworm-backports` on Debian bookworm), (for
//! `cargo xtask lint`) the rustup components `clippy` and `rustfmt`, and (for the GRUB ISO,
//! `cargo xtask iso`) GRUB, xorriso, mtools and OVMF.
//!
//! Which QEMU runs: [`QEMU_ENV`] (`GANNET_QEMU`, xtask's `--qemu PATH`) names the binary, else
//! [`QEMU`] from `$PATH`; [`QEMU_DATA_ENV`] (`GANNET_QEMU_DATA`, `--qemu-data DIR:…`) adds
//! firmware/ROM directories (QEMU `-L`) for a binary unpacked outside `/usr`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The bare-metal target the kernel is built for.
pub const TARGET: &str = "x86_64-unknown-none";
/// The QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";
/// The Debian package providing it.
pub const QEMU_PACKAGE: &str = "qemu-system-x86";
/// Environment variable naming the QEMU binary every guest boots with (a path, or a name looked
/// up on `$PATH`); unset: [`QEMU`]. xtask's global `--qemu PATH` sets it, so the integration
/// tests that `cargo xtask test` runs use the same binary.
pub const QEMU_ENV: &str = "GANNET_QEMU";
/// Environment variable with extra QEMU firmware/ROM directories, `:`-separated, each passed as
/// `-L DIR` (searched before the binary's built-in path): for a QEMU unpacked with `dpkg -x`,
/// e.g. `ROOT/usr/share/qemu:ROOT/usr/share/seabios`. xtask's `--qemu-data` sets it.
pub const QEMU_DATA_ENV: &str = "GANNET_QEMU_DATA";
/// The oldest QEMU major version the set-up accepts for the system QEMU: an older one (Debian
/// bookworm's 7.2) is replaced from `bookworm-backports` (10.0). What needs 8: the `igb` device
/// (QEMU 8.0, the discrete-NIC driver's test device), and CI tests 10.0 only. Gannet itself
/// still boots and passes its tests on 7.2 (README, "QEMU versions").
pub const QEMU_MIN_MAJOR: u32 = 8;
/// The Debian suite the set-up installs QEMU from on bookworm.
pub const BACKPORTS_SUITE: &str = "bookworm-backports";
/// The apt source file the set-up writes for [`BACKPORTS_SUITE`] when no source names it.
pub const BACKPORTS_SOURCE: &str = "/etc/apt/sources.list.d/bookworm-backports.sources";

/// The QEMU binary guests boot with: [`QEMU_ENV`] if set and not empty, else [`QEMU`].
pub fn qemu_binary() -> PathBuf {
    match std::env::var_os(QEMU_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(QEMU),
    }
}

/// The firmware directories from [`QEMU_DATA_ENV`] (empty when unset), in order.
pub fn qemu_data_dirs() -> Vec<PathBuf> {
    std::env::var_os(QEMU_DATA_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// A QEMU version, as `qemu-system-x86_64 --version` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QemuVersion {
    pub major: u32,
    pub minor: u32,
    pub micro: u32,
}

impl std::fmt::Display for QemuVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// Parses the first line of `qemu-system-x86_64 --version`, `QEMU emulator version 10.0.2
/// (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)`; `None` when it has no `version X.Y[.Z]`.
pub fn parse_qemu_version(out: &str) -> Option<QemuVersion> {
    let rest = out.lines().next()?.split("version ").nth(1)?;
    let v = rest.split_whitespace().next()?;
    let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
    let major = it.next()??;
    let minor = it.next()??;
    let micro = it.next().flatten().unwrap_or(0);
    Some(QemuVersion {
        major,
        minor,
        micro,
    })
}

/// Runs `bin --version` and parses it ([`parse_qemu_version`]). Errors: `bin` does not run, or
/// prints no version.
pub fn qemu_version(bin: &std::path::Path) -> Result<QemuVersion> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_qemu_version(&text).with_context(|| {
        format!(
            "{} --version printed no version ({:?}, status {})",
            bin.display(),
            text.lines().next().unwrap_or(""),
            out.status
        )
    })
}

/// One line naming the QEMU guests boot with and its version, for every command's output, e.g.
/// `QEMU 10.0.2 (qemu-system-x86_64)`; `QEMU ? (PATH: error)` when it does not run.
pub fn qemu_description() -> String {
    let bin = qemu_binary();
    let dirs = qemu_data_dirs();
    let data = if dirs.is_empty() {
        String::new()
    } else {
        format!(
            ", -L {}",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" -L ")
        )
    };
    match qemu_version(&bin) {
        Ok(v) => format!("QEMU {v} ({}{data})", bin.display()),
        Err(e) => format!("QEMU ? ({}: {e:#})", bin.display()),
    }
}

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

/// Whether this process runs as root (euid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The QEMU guests boot with is there and new enough.
///
/// With [`QEMU_ENV`] set, the user chose the binary: it must run (`--version`), and one older
/// than [`QEMU_MIN_MAJOR`] is used as it is, with a note (comparing versions is what the
/// variable is for). Otherwise [`QEMU`] on `$PATH` must be at least [`QEMU_MIN_MAJOR`]: when it
/// is missing or older, as root, [`install_qemu`] installs it (on Debian bookworm from
/// [`BACKPORTS_SUITE`], adding that suite first), printing what it changes; else fail with the
/// commands to run. Checked once per process.
pub fn ensure_qemu() -> Result<()> {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return Ok(());
    }
    if std::env::var_os(QEMU_ENV).is_some_and(|v| !v.is_empty()) {
        let bin = qemu_binary();
        let v = qemu_version(&bin).with_context(|| format!("{QEMU_ENV}={}", bin.display()))?;
        if v.major < QEMU_MIN_MAJOR {
            eprintln!(
                "setup: {QEMU_ENV}={} is QEMU {v}, older than {QEMU_MIN_MAJOR}.0 (no `igb` \
                 device; CI tests 10.0): used as chosen",
                bin.display()
            );
        }
        *done = true;
        return Ok(());
    }
    let current = which(QEMU).map(|p| qemu_version(&p)).transpose();
    match current {
        Ok(Some(v)) if v.major >= QEMU_MIN_MAJOR => {}
        Ok(found) => {
            let what = found.map_or_else(
                || format!("{QEMU} not found"),
                |v| format!("{QEMU} is QEMU {v}, older than {QEMU_MIN_MAJOR}.0 (needed for the `igb` device; CI tests 10.0)"),
            );
            install_qemu(&what)?;
        }
        Err(e) => return Err(e),
    }
    *done = true;
    Ok(())
}

/// `VERSION_CODENAME` from `/etc/os-release` (`bookworm`), if any.
pub(crate) fn os_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// Whether an apt source under `/etc/apt` already names [`BACKPORTS_SUITE`].
pub(crate) fn backports_configured() -> bool {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(rd.flatten().map(|e| e.path()));
    }
    files.iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains(BACKPORTS_SUITE))
        })
    })
}

/// Installs [`QEMU_PACKAGE`] at [`QEMU_MIN_MAJOR`] or later (`why`: what is wrong now, printed).
/// On Debian bookworm: writes [`BACKPORTS_SOURCE`] (deb.debian.org, `main`, Debian's archive
/// key) when no apt source names [`BACKPORTS_SUITE`], then `apt-get update` and `apt-get
/// install -t bookworm-backports qemu-system-x86` (QEMU 10.0 today, and the newer SeaBIOS and
/// ROMs it depends on); elsewhere plain `apt-get install`. Errors: not root (names the
/// commands), apt-get fails, or the installed QEMU is still too old.
pub fn install_qemu(why: &str) -> Result<()> {
    let bookworm = os_codename().as_deref() == Some("bookworm");
    let source = format!(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {BACKPORTS_SUITE}\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    );
    let install = if bookworm {
        format!(
            "apt-get update && apt-get install -y --no-install-recommends -t {BACKPORTS_SUITE} {QEMU_PACKAGE}"
        )
    } else {
        format!("apt-get update && apt-get install -y --no-install-recommends {QEMU_PACKAGE}")
    };
    let add_source = bookworm && !backports_configured();
    if !is_root() {
        let add = if add_source {
            format!(
                "printf '{}' > {BACKPORTS_SOURCE} && ",
                source.replace('\n', "\\n")
            )
        } else {
            String::new()
        };
        bail!("{why}; install QEMU {QEMU_MIN_MAJOR}+ with: sudo sh -c \"{add}{install}\"");
    }
    eprintln!("setup: {why}");
    if add_source {
        eprintln!("setup: adding the apt source {BACKPORTS_SUITE} as {BACKPORTS_SOURCE}:");
        eprint!("{source}");
        std::fs::write(BACKPORTS_SOURCE, &source)
            .with_context(|| format!("writing {BACKPORTS_SOURCE}"))?;
    }
    eprintln!("setup: running `{install}`");
    let ok = Command::new("sh")
        .args(["-c", &install])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get")?
        .success();
    if !ok {
        bail!("installing {QEMU_PACKAGE} failed; run `{install}` yourself");
    }
    let bin =
        which(QEMU).with_context(|| format!("{QEMU} still not on $PATH after `{install}`"))?;
    let v = qemu_version(&bin)?;
    eprintln!("setup: {QEMU} is now QEMU {v}");
    ensure!(
        v.major >= QEMU_MIN_MAJOR,
        "{QEMU} is QEMU {v} after `{install}`, still older than {QEMU_MIN_MAJOR}.0"
    );
    Ok(())
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

/// Where netsniff-ng's `trafgen` is installed by Debian (`/usr/sbin`, which a non-login
/// shell's `$PATH` may lack).
pub const TRAFGEN_SBIN: &str = "/usr/sbin/trafgen";

/// netsniff-ng's `trafgen`: on `$PATH`, else [`TRAFGEN_SBIN`]; `None` if neither.
pub fn trafgen() -> Option<PathBuf> {
    which("trafgen").or_else(|| {
        let p = PathBuf::from(TRAFGEN_SBIN);
        p.is_file().then_some(p)
    })
}

/// `trafgen` (Debian's `netsniff-ng`), the standard generator `bench --cross-check trafgen`
/// and its CI test compare ours with; installed with apt-get as root. Returns its path.
///
/// # Errors
/// Missing and not root (names the command), or apt-get failing.
pub fn ensure_trafgen() -> Result<PathBuf> {
    ensure_debian("trafgen", || trafgen().is_some(), "netsniff-ng")?;
    trafgen().context("trafgen not found after installing netsniff-ng")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debian_qemu_versions() {
        let v = parse_qemu_version(
            "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n",
        );
        assert_eq!(
            v,
            Some(QemuVersion {
                major: 10,
                minor: 0,
                micro: 2
            })
        );
        let v =
            parse_qemu_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)");
        assert_eq!(v.map(|v| v.to_string()).as_deref(), Some("7.2.22"));
        assert!(v.unwrap().major < QEMU_MIN_MAJOR);
        assert_eq!(
            parse_qemu_version("QEMU emulator version 8.1"),
            Some(QemuVersion {
                major: 8,
                minor: 1,
                micro: 0
            })
        );
        assert_eq!(parse_qemu_version("qemu: command not found"), None);
        assert_eq!(parse_qemu_version(""), None);
    }
}
