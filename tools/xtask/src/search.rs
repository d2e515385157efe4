//! `cargo xtask bench --search`: the flags to [`harness::bench_search::run_gannet`], its
//! report to the JSON envelope (`bench: "search"`).

use crate::{guest_config, image_for, BenchArgs};
use anyhow::{bail, Result};
use harness::bench_search;
use harness::qemu::Echo;
use harness::search::SearchConfig;
use harness::setup;
use std::path::Path;

pub(crate) fn cmd_bench_search(a: BenchArgs) -> Result<()> {
    let g = &a.traffic.guest;
    if g.icount {
        bail!("--search measures rates in wall-clock time; -icount (--icount) slows the guest's clock to its instruction count and makes every rate meaningless: drop --icount");
    }
    if a.traffic.nics != 2 || a.traffic.cpus != 1 {
        bail!("--search offers one port pair (port 0 -> port 1): drop --nics/--cpus");
    }
    if !(0.0..100.0).contains(&a.pdr_loss) {
        bail!("--pdr-loss {}: a percentage in [0, 100)", a.pdr_loss);
    }
    let mtu = g.mtu.as_ref().map_or(1500, |m| m.values()[0]);
    let rows = bench_search::rows(a.sizes.as_deref(), a.imix, mtu)?;
    let cfg = SearchConfig {
        resolution_pps: a.resolution,
        pdr_loss: a.pdr_loss / 100.0,
        trial_seconds: a.trial_seconds,
        final_seconds: a.final_seconds,
        repeats: a.repeats,
        warmup_seconds: 1.0,
        max_rate: a.max_rate,
    };
    setup::ensure()?;
    let image = image_for(g)?;
    let gcfg = guest_config(g, image, Path::new("/tmp"), Echo::Off)?;
    crate::announce_accel(gcfg.accel, gcfg.icount, gcfg.cpu.as_deref());
    let report = bench_search::run_gannet(
        &gcfg,
        &rows,
        &cfg,
        a.ceiling_seconds,
        (a.dgram_qlen > 0).then_some(a.dgram_qlen),
    )?;
    let ran = crate::ran(g);
    let file = a
        .json
        .as_deref()
        .filter(|p| !harness::envelope::to_stdout(Some(p)));
    crate::emit(Some(Path::new("-")), "search", ran, &report)?;
    crate::emit(file, "search", ran, &report)
}
