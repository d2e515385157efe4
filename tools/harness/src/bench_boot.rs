//! `cargo xtask bench boot`: boot time, QEMU spawn → `gannet: ready`, `--runs` boots per
//! machine type (median, min, max).
//!
//! Host clock (this process's monotonic clock): spawn → the first guest line (the kernel's
//! `Gannet … booting (…)` line: under the ISO rows OVMF and GRUB print before it), spawn → the
//! ready marker. Guest clock (TSC at the guest's calibrated rate, µs since the PVH or
//! multiboot2 entry): the
//! `boot: phases us: …` line the guest prints just before the ready marker (its own part,
//! phase by phase; `unikernel/src/arch/phases.rs`). "QEMU + firmware" is what the host saw
//! minus the guest's own part: QEMU's start-up, the firmware (SeaBIOS and its PVH option ROM on
//! q35; SeaBIOS or OVMF and GRUB for the ISO rows) and the serial path to this process.
//!
//! Machine types are a list ([`Machine`]): q35 with `-kernel` (PVH), and the GRUB ISO
//! ([`crate::iso`]) on q35 under SeaBIOS and under OVMF. The ISO is built once per machine
//! type before its runs, so its build is not in the figures.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::Serialize;

use crate::qemu::{self, Accel, Boot, Guest, GuestConfig};

/// Prefix of the guest's boot-phase line.
pub const PHASES_PREFIX: &str = "boot: phases us:";

/// A QEMU machine type the boot benchmark can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// `-machine q35` with SeaBIOS and `-kernel` (PVH): what every other command boots.
    Q35,
    /// q35, SeaBIOS, `-cdrom gannet.iso`: GRUB i386-pc, `multiboot2` ([`Boot::IsoBios`]).
    IsoBios,
    /// q35, OVMF (`-bios`), `-cdrom gannet.iso`: GRUB x86_64-efi, `multiboot2`
    /// ([`Boot::IsoUefi`]).
    IsoUefi,
    /// `-machine microvm,acpi=off` with `-kernel` (PVH), virtio-mmio ports ([`Boot::Microvm`]).
    Microvm,
}

impl Machine {
    /// Its name in tables (`--machines` takes the same).
    pub fn name(self) -> &'static str {
        match self {
            Machine::Q35 => "q35",
            Machine::IsoBios => "iso-bios (q35, SeaBIOS, GRUB)",
            Machine::IsoUefi => "iso-uefi (q35, OVMF, GRUB)",
            Machine::Microvm => "microvm (acpi=off, virtio-mmio)",
        }
    }

    /// How QEMU loads the kernel on this machine type.
    pub fn boot(self) -> Boot {
        match self {
            Machine::Q35 => Boot::Pvh,
            Machine::IsoBios => Boot::IsoBios,
            Machine::IsoUefi => Boot::IsoUefi,
            Machine::Microvm => Boot::Microvm,
        }
    }

    /// The guest configuration for this machine type from the common one (q35 is
    /// [`crate::qemu::command_args`]' default), `iso`: the ISO for the ISO rows.
    fn configure(self, mut cfg: GuestConfig, iso: Option<&Path>) -> GuestConfig {
        cfg.boot = self.boot();
        cfg.iso = iso.map(Path::to_path_buf);
        cfg
    }
}

/// The guest's boot phases: `(name, µs)` in boot order, and `total` (PVH entry → ready, µs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestPhases {
    /// Each phase's length in µs of guest clock.
    pub phases: Vec<(String, u64)>,
    /// PVH entry → the ready line, µs of guest clock.
    pub total_us: u64,
}

impl GuestPhases {
    /// The length of phase `name` in µs, if the line had it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.phases.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

/// Parse the guest's `boot: phases us: name=µs … total=µs` line (anywhere in `line`). `None`
/// if it is not that line; an error if it is but does not parse.
pub fn parse_phases(line: &str) -> Option<Result<GuestPhases>> {
    let at = line.find(PHASES_PREFIX)?;
    let rest = &line[at + PHASES_PREFIX.len()..];
    Some((|| {
        let mut phases = Vec::new();
        let mut total = None;
        for kv in rest.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("`{kv}` is not name=µs in: {line}"))?;
            let v: u64 = v
                .parse()
                .with_context(|| format!("`{kv}`: not a count of µs in: {line}"))?;
            if k == "total" {
                total = Some(v);
            } else {
                phases.push((k.to_string(), v));
            }
        }
        let total_us = total.ok_or_else(|| anyhow!("no total= in: {line}"))?;
        ensure!(!phases.is_empty(), "no phases in: {line}");
        let sum: u64 = phases.iter().map(|&(_, v)| v).sum();
        // Each phase is rounded down to whole µs: the sum may fall short by one per phase.
        ensure!(
            sum <= total_us,
            "phases sum to {sum} µs, more than total={total_us}: {line}"
        );
        Ok(GuestPhases { phases, total_us })
    })())
}

/// Whether serial line `l` is the kernel's first, `Gannet 0.1.0 booting (PVH)` (the text of
/// `unikernel/src/main.rs`), or any line naming `gannet` (an error before it, older images'
/// `gannet: ` module prefix). GRUB and OVMF print neither before the kernel runs.
pub fn is_first_guest_line(l: &str) -> bool {
    (l.contains("Gannet ") && l.contains(" booting (")) || l.contains("gannet")
}

/// One boot.
#[derive(Debug, Clone)]
pub struct BootRun {
    /// Host clock, QEMU spawn → the first guest line ([`is_first_guest_line`]).
    pub first_line: Duration,
    /// Host clock, QEMU spawn → the ready marker.
    pub ready: Duration,
    /// The guest's own account.
    pub guest: GuestPhases,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BootBenchConfig {
    /// The kernel image.
    pub image: PathBuf,
    /// Kernel command line (`--append`).
    pub append: String,
    pub accel: Accel,
    /// `-icount shift=0,sleep=off`: the guest's TSC counts its instructions (1 GHz), so each
    /// phase reads in thousands of guest instructions and the host clock includes none of
    /// TCG's translation or device time in the guest's figures.
    pub icount: bool,
    /// `-smp`.
    pub cpus: u32,
    /// virtio-net ports (dgram backend, nothing bound on the host side).
    pub nics: usize,
    /// `-m`.
    pub memory: String,
    /// Boots per machine type.
    pub runs: usize,
    /// Machine types, in order.
    pub machines: Vec<Machine>,
}

/// Boot once on `machine` and measure; `iso`: the GRUB image for the ISO machine types (built
/// by [`run`]; `None` there builds one inside the measured time).
pub fn run_one(cfg: &BootBenchConfig, machine: Machine, iso: Option<&Path>) -> Result<BootRun> {
    let dir = tempfile::Builder::new()
        .prefix("gbt")
        .tempdir_in("/tmp")
        .context("socket directory")?;
    let gc = machine.configure(
        GuestConfig {
            image: cfg.image.clone(),
            dgram_dir: dir.path().to_path_buf(),
            append: cfg.append.clone(),
            accel: cfg.accel,
            icount: cfg.icount,
            cpus: cfg.cpus,
            nics: cfg.nics,
            memory: cfg.memory.clone(),
            ..GuestConfig::default()
        },
        iso,
    );
    let t0 = Instant::now();
    let mut guest = Guest::boot(&gc)?;
    guest.wait_for_line(is_first_guest_line, qemu::READY_TIMEOUT)?;
    let first_line = t0.elapsed();
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    let ready = t0.elapsed();
    let lines = guest.lines();
    let phases = lines.iter().find_map(|l| parse_phases(l)).ok_or_else(|| {
        anyhow!(
            "the guest printed no `{PHASES_PREFIX}` line before ready\n{}",
            guest.tail_report()
        )
    })??;
    guest.kill();
    Ok(BootRun {
        first_line,
        ready,
        guest: phases,
    })
}

/// Median, min, max of `v` (not empty). The median of an even count is the lower middle one,
/// so every figure is one a run produced.
pub fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[(s.len() - 1) / 2], s[0], s[s.len() - 1])
}

/// Median, min and max of one figure over a machine type's boots (ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// The lower middle run's figure ([`summary`]).
    pub median: f64,
    /// The fastest run's.
    pub min: f64,
    /// The slowest run's.
    pub max: f64,
}

impl Spread {
    /// The spread of `v` (not empty).
    pub fn of(v: &[f64]) -> Self {
        let (median, min, max) = summary(v);
        Spread { median, min, max }
    }
}

/// One machine type's boots in `bench boot --json`: host clock spawn → first line and → ready,
/// the guest's own PVH entry → ready and each of its phases, all in ms.
#[derive(Debug, Clone, Serialize)]
pub struct BootMachineJson {
    /// `--machines`' name (`q35`, `iso-bios`, `iso-uefi`, `microvm`).
    pub machine: String,
    /// Boots.
    pub runs: usize,
    /// Host clock, QEMU spawn → first guest line.
    pub first_line_ms: Spread,
    /// Host clock, QEMU spawn → ready.
    pub ready_ms: Spread,
    /// Guest clock, PVH entry → ready.
    pub guest_total_ms: Spread,
    /// Guest clock per phase, in boot order.
    pub guest_phases_ms: Vec<(String, Spread)>,
}

/// `bench boot --json`'s record (inside the envelope: accelerator, icount, host).
#[derive(Debug, Clone, Serialize)]
pub struct BootBenchJson {
    /// `--append`.
    pub append: String,
    /// `-smp`.
    pub cpus: u32,
    /// virtio-net ports.
    pub nics: usize,
    /// `-m`.
    pub memory: String,
    /// One entry per machine type, in `--machines` order.
    pub machines: Vec<BootMachineJson>,
}

impl BootBenchJson {
    /// The record of [`run`]'s output `out` under `cfg`.
    pub fn new(cfg: &BootBenchConfig, out: &[(Machine, Vec<BootRun>)]) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let machines = out
            .iter()
            .filter(|(_, runs)| !runs.is_empty())
            .map(|(m, runs)| {
                let phases = runs[0]
                    .guest
                    .phases
                    .iter()
                    .map(|(name, _)| {
                        let v: Vec<f64> = runs
                            .iter()
                            .map(|r| r.guest.get(name).unwrap_or(0) as f64 / 1e3)
                            .collect();
                        (name.clone(), Spread::of(&v))
                    })
                    .collect();
                BootMachineJson {
                    machine: clap::ValueEnum::to_possible_value(m)
                        .map_or_else(|| m.name().to_string(), |v| v.get_name().to_string()),
                    runs: runs.len(),
                    first_line_ms: Spread::of(
                        &runs.iter().map(|r| ms(r.first_line)).collect::<Vec<_>>(),
                    ),
                    ready_ms: Spread::of(&runs.iter().map(|r| ms(r.ready)).collect::<Vec<_>>()),
                    guest_total_ms: Spread::of(
                        &runs
                            .iter()
                            .map(|r| r.guest.total_us as f64 / 1e3)
                            .collect::<Vec<_>>(),
                    ),
                    guest_phases_ms: phases,
                }
            })
            .collect();
        BootBenchJson {
            append: cfg.append.clone(),
            cpus: cfg.cpus,
            nics: cfg.nics,
            memory: cfg.memory.clone(),
            machines,
        }
    }
}

/// The per-phase table of one machine type's runs: host figures and the guest's phases, in
/// ms (median, min, max).
pub fn table(machine: Machine, accel: Accel, icount: bool, runs: &[BootRun]) -> String {
    let mut rows: Vec<(String, Vec<f64>)> = vec![
        (
            "spawn → first guest line (host)".into(),
            runs.iter()
                .map(|r| r.first_line.as_secs_f64() * 1e3)
                .collect(),
        ),
        (
            "spawn → ready (host)".into(),
            runs.iter().map(|r| r.ready.as_secs_f64() * 1e3).collect(),
        ),
        (
            "QEMU + firmware (spawn → ready − guest)".into(),
            runs.iter()
                .map(|r| r.ready.as_secs_f64() * 1e3 - r.guest.total_us as f64 / 1e3)
                .collect(),
        ),
        (
            "guest: entry → ready".into(),
            runs.iter().map(|r| r.guest.total_us as f64 / 1e3).collect(),
        ),
    ];
    if let Some(first) = runs.first() {
        for (name, _) in &first.guest.phases {
            rows.push((
                format!("  {name}"),
                runs.iter()
                    .map(|r| r.guest.get(name).unwrap_or(0) as f64 / 1e3)
                    .collect(),
            ));
        }
    }
    let mut s = format!(
        "boot time, machine {}, accel {}{}, {} runs (ms{})\n| phase | median | min | max |\n|---|---|---|---|\n",
        machine.name(),
        accel.name(),
        if icount { " -icount shift=0" } else { "" },
        runs.len(),
        if icount {
            "; guest rows: millions of guest instructions"
        } else {
            ""
        }
    );
    for (name, v) in rows {
        let (med, min, max) = summary(&v);
        s.push_str(&format!("| {name} | {med:.2} | {min:.2} | {max:.2} |\n"));
    }
    s
}

/// Run `cfg.runs` boots per machine type; `progress` sees each run. Returns the runs per
/// machine type, in `cfg.machines` order.
pub fn run(
    cfg: &BootBenchConfig,
    mut progress: impl FnMut(Machine, usize, &BootRun),
) -> Result<Vec<(Machine, Vec<BootRun>)>> {
    if cfg.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut out = Vec::new();
    for &m in &cfg.machines {
        let iso_dir = tempfile::Builder::new()
            .prefix("gbt-iso")
            .tempdir()
            .context("ISO directory")?;
        let iso = iso_dir.path().join("gannet.iso");
        if m.boot().is_iso() {
            crate::iso::build(&cfg.image, &cfg.append, None, &iso)
                .with_context(|| format!("building the ISO for {}", m.name()))?;
        }
        let iso = m.boot().is_iso().then_some(iso.as_path());
        let mut runs = Vec::with_capacity(cfg.runs);
        for i in 0..cfg.runs {
            let r =
                run_one(cfg, m, iso).with_context(|| format!("boot {} on {}", i + 1, m.name()))?;
            progress(m, i, &r);
            runs.push(r);
        }
        out.push((m, runs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_guest_line() {
        let l = "boot: phases us: calibrate=52012 boot_data=800 paging=10 mem_map=8000 zone=900 tsc_wait=0 log=700 lapic=5100 aps=0 pre_devices=40 devices=17000 cores=12 total=97000";
        let p = parse_phases(l).unwrap().unwrap();
        assert_eq!(p.total_us, 97_000);
        assert_eq!(p.phases.len(), 12);
        assert_eq!(p.get("calibrate"), Some(52_012));
        assert_eq!(p.get("devices"), Some(17_000));
        assert_eq!(p.get("aps"), Some(0));
        assert_eq!(p.get("nope"), None);
    }

    #[test]
    fn rejects_broken_lines() {
        assert!(parse_phases("gannet: ready").is_none());
        assert!(is_first_guest_line(
            "[    0.005832] INFO  Gannet 0.1.0 booting (PVH)"
        ));
        assert!(is_first_guest_line(
            "[    0.005832] INFO  gannet: Gannet 0.1.0 booting (PVH)"
        ));
        assert!(!is_first_guest_line(
            "BdsDxe: starting Boot0001 \"UEFI QEMU DVD-ROM\""
        ));
        assert!(parse_phases("boot: phases us: calibrate=x total=1")
            .unwrap()
            .is_err());
        assert!(parse_phases("boot: phases us: calibrate=5")
            .unwrap()
            .is_err());
        // Phases longer than the total: not a consistent account.
        assert!(parse_phases("boot: phases us: calibrate=5 total=4")
            .unwrap()
            .is_err());
    }

    #[test]
    fn summary_is_median_min_max() {
        assert_eq!(summary(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(summary(&[4.0, 1.0, 3.0, 2.0]), (2.0, 1.0, 4.0));
        assert_eq!(summary(&[7.0]), (7.0, 7.0, 7.0));
    }
}
