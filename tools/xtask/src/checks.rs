//! The checks of a whole image: `cargo xtask faults` (`harness::faults`), `cargo xtask soak`
//! (`harness::soak`) and `cargo xtask nocall` (`harness::nocall`).

use crate::{announce_accel, guest_config, image_for, FaultsArgs, NocallArgs, SoakArgs};
use anyhow::{bail, Context, Result};
use harness::qemu::{Backend, Echo};
use harness::{qemu, setup};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// `nocall`: the per-frame loop functions of the image (built here unless `--image`; the
/// negative control with `--control`) checked for indirect calls and jumps; the report on
/// stdout, failure when it finds one.
pub(crate) fn cmd_nocall(a: NocallArgs) -> Result<ExitCode> {
    let image = match (a.image, a.control) {
        (Some(p), _) => p,
        (None, false) => qemu::build_image()?,
        (None, true) => qemu::build_nf_control_image()?,
    };
    eprintln!("xtask: nocall: {}", image.display());
    let report = harness::nocall::check_image(&image, harness::nocall::LOOP_FUNCTIONS)?;
    print!("{}", report.text());
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `soak`: every mode in turn, STATS checked every --stats-every s; a summary line per mode,
/// a Markdown table, `--json`; fails naming every failed check.
pub(crate) fn cmd_faults(a: FaultsArgs) -> Result<()> {
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
    let doc = faults::FaultJson {
        frames: a.frames,
        dry_ms: a.dry_ms,
        fault: cfg.fault_key(),
        modes: &results,
    };
    crate::emit(a.json.as_deref(), "faults", crate::ran(&a.guest), &doc)?;
    let failed: Vec<String> = results
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.mode)))
        .collect();
    if !failed.is_empty() {
        bail!("fault run failed:\n  {}", failed.join("\n  "));
    }
    Ok(())
}

pub(crate) fn cmd_soak(a: SoakArgs) -> Result<()> {
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
    let doc = soak::SoakJson {
        minutes: a.minutes,
        stats_every_s: a.stats_every,
        window: a.window,
        size: a.size,
        image,
        modes: &results,
    };
    crate::emit(a.json.as_deref(), "soak", crate::ran(&a.guest), &doc)?;
    let failed: Vec<String> = results
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.mode)))
        .collect();
    if !failed.is_empty() {
        bail!("soak failed:\n  {}", failed.join("\n  "));
    }
    Ok(())
}
