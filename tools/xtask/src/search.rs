//! `cargo xtask bench --search`: the flags to [`harness::bench_search::run_gannet`], its
//! report to the JSON envelope (`bench: "search"`).

use crate::{guest_config, image_for, BenchArgs, Peer};
use anyhow::{bail, Result};
use harness::bench_search;
use harness::peer_linux::{self, PeerMode};
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
    if a.peer.contains(&Peer::Dpdk) {
        bail!("--search --peer dpdk: not yet (testpmd's start and stop are not wired to the search); --peer linux is");
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
    // Prepare the peer first: a missing download fails before any boot.
    let linux = if a.peer.contains(&Peer::Linux) {
        Some(peer_linux::prepare()?)
    } else {
        None
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
    let ran = crate::ran(g);
    let file = a
        .json
        .as_deref()
        .filter(|p| !harness::envelope::to_stdout(Some(p)));
    crate::emit(Some(Path::new("-")), "search", ran, &report)?;
    crate::emit(file, "search", ran, &report)
}
