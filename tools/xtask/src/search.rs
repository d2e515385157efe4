//! `cargo xtask bench --search`: the flags to [`harness::bench_search::run_gannet`], its
//! report to the JSON envelope (`bench: "search"`); `bench --cross-check trafgen`: the flags to
//! [`harness::cross_check::run`] (`bench: "cross-check"`).

use crate::{guest_config, image_for, BenchArgs, Peer};
use anyhow::{bail, Result};
use harness::bench_search;
use harness::cross_check::{self, CrossCheckConfig};
use harness::peer_linux::{self, PeerMode};
use harness::qemu::Echo;
use harness::search::SearchConfig;
use harness::setup;
use lab::{peer_dpdk, search_dpdk};
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
    // testpmd's pair for this mode, refused early (before any download or boot).
    let dpdk_mode = if a.peer.contains(&Peer::Dpdk) {
        Some(search_dpdk::pair(&g.append)?)
    } else {
        None
    };
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
    let mut gcfg = guest_config(g, image, Path::new("/tmp"), Echo::Off)?;
    if dpdk_mode.is_some() && gcfg.cpu.is_none() {
        // As `bench --peer dpdk`: every guest on the CPU model testpmd needs.
        eprintln!(
            "xtask: --peer dpdk: Gannet and testpmd run with -cpu {} (Debian's testpmd needs SSE4.2; give --cpu to choose another)",
            search_dpdk::CPU
        );
        gcfg.cpu = Some(search_dpdk::CPU.into());
    }
    crate::announce_accel(gcfg.accel, gcfg.icount, gcfg.cpu.as_deref());
    // Prepare the peers first: a missing download fails before any boot.
    let linux = if a.peer.contains(&Peer::Linux) {
        Some(peer_linux::prepare()?)
    } else {
        None
    };
    let dpdk = match dpdk_mode {
        Some(m) => {
            let p = peer_dpdk::prepare()?;
            eprintln!(
                "xtask: DPDK peer: dpdk-testpmd {} on Linux {}, engine {}",
                p.dpdk_version,
                p.release,
                m.name()
            );
            Some((p, m))
        }
        None => None,
    };
    let qlen = (a.dgram_qlen > 0).then_some(a.dgram_qlen);
    let mut report = bench_search::run_gannet(&gcfg, &rows, &cfg, a.ceiling_seconds, qlen)?;
    if let Some(peer) = linux {
        // The pair `bench --peer` uses: Gannet l2/io against the bridge, router against
        // Linux's IPv4 forwarding.
        let mode = if g.append.split_whitespace().any(|w| w == "mode=router") {
            PeerMode::L3
        } else {
            PeerMode::L2
        };
        let dut = bench_search::LinuxDut {
            peer,
            mode,
            like: gcfg.clone(),
        };
        report.peers.push(bench_search::run(
            &dut,
            &rows,
            &cfg,
            a.ceiling_seconds,
            qlen,
        )?);
    }
    if let Some((peer, mode)) = dpdk {
        let dut = search_dpdk::DpdkDut::new(peer, mode, gcfg.clone());
        report.peers.push(bench_search::run(
            &dut,
            &rows,
            &cfg,
            a.ceiling_seconds,
            qlen,
        )?);
    }
    for p in &report.peers {
        eprint!("{}", bench_search::compare(&report, p));
    }
    let ran = crate::ran(g);
    let file = a
        .json
        .as_deref()
        .filter(|p| !harness::envelope::to_stdout(Some(p)));
    crate::emit(Some(Path::new("-")), "search", ran, &report)?;
    crate::emit(file, "search", ran, &report)
}

pub(crate) fn cmd_bench_cross_check(a: BenchArgs) -> Result<()> {
    let g = &a.traffic.guest;
    if g.icount {
        bail!("--cross-check measures rates in wall-clock time: drop --icount");
    }
    if a.traffic.nics != 2 || a.traffic.cpus != 1 || g.mtu.is_some() {
        bail!("--cross-check offers one port pair (port 0 -> port 1) at the taps' MTU 1500: drop --nics/--cpus/--mtu");
    }
    let sizes = match a.sizes.as_deref() {
        Some(s) => bench_search::rows(Some(s), false, 1500)?
            .iter()
            .map(|r| r.cycle[0])
            .collect(),
        None => vec![64, 1518],
    };
    let cfg = CrossCheckConfig {
        sizes,
        factors: a.factors.clone(),
        seconds: a.stream_seconds,
        pairs: a.pairs,
        ndr: (!a.ndr.is_empty()).then(|| a.ndr.clone()),
        search: SearchConfig {
            resolution_pps: a.resolution,
            pdr_loss: a.pdr_loss / 100.0,
            trial_seconds: a.trial_seconds,
            final_seconds: a.final_seconds,
            repeats: a.repeats,
            warmup_seconds: 1.0,
            max_rate: Some(a.max_rate.unwrap_or(40_000.0)),
        },
        tolerance_pp: 2.0,
    };
    setup::ensure()?;
    let image = image_for(g)?;
    let gcfg = guest_config(g, image, Path::new("/tmp"), Echo::Off)?;
    crate::announce_accel(gcfg.accel, gcfg.icount, gcfg.cpu.as_deref());
    let report = cross_check::run(&gcfg, &cfg)?;
    eprintln!(
        "cross-check: trafgen ({}) and our generator, tap backend, {}: {}",
        report.trafgen_version,
        report.accel,
        if report.agree {
            "every point agrees within 2 pp"
        } else {
            "a point DISAGREES (above)"
        }
    );
    let ran = crate::ran(g);
    crate::emit(a.json.as_deref(), "cross-check", ran, &report)?;
    if !report.agree {
        bail!("trafgen's loss and ours differ by more than 2 percentage points at a point above");
    }
    Ok(())
}
