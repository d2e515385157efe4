//! `cargo xtask bench --search`: the flags to [`harness::bench_search::run_gannet`], its
//! report to the JSON envelope (`bench: "search"`); `bench --cross-check trafgen`: the flags to
//! [`harness::cross_check::run`] (`bench: "cross-check"`).

use crate::{guest_config, image_for, BenchArgs, GuestArgs, Peer};
use anyhow::{bail, Context, Result};
use harness::bench_search::{self, Dimensions};
use harness::cross_check::{self, CrossCheckConfig};
use harness::fib::Fib;
use harness::peer_linux::{self, PeerMode};
use harness::qemu::{Backend, Echo, NicModel};
use harness::search::SearchConfig;
use harness::setup;
use lab::{peer_dpdk, search_dpdk};
use std::path::Path;

/// Seed of the FIB `--search --routes N` generates (the same N, the same table).
const FIB_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The search's dimensions from the flags (issue 42 item 3), each refused by name where the
/// search cannot run it, and the FIB to generate for `--routes N`. Boots nothing.
fn dimensions(a: &BenchArgs) -> Result<(Dimensions, Option<Fib>)> {
    let g = &a.traffic.guest;
    if a.traffic.nics != 2 {
        bail!(
            "--nics {}: --search offers one port pair (port 0 -> port 1): drop --nics",
            a.traffic.nics
        );
    }
    if a.traffic.cpus != 1 {
        bail!(
            "--cpus {}: with one port pair Gannet forwards on more than one core only with a queue per core, and multi-queue needs --backend tap, which --search does not run on (dgram: one queue per port): drop --cpus",
            a.traffic.cpus
        );
    }
    if g.backend != Backend::Dgram {
        bail!("--backend tap: --search runs on the dgram backend only (non-blocking sends into QEMU's unix datagram socket): drop --backend");
    }
    if g.queues != 1 {
        bail!(
            "--queues {}: multi-queue needs --backend tap, and --search runs on the dgram backend only (one queue per port): drop --queues",
            g.queues
        );
    }
    if a.flows == 0 {
        bail!("--flows 0: at least one flow");
    }
    let router = g.append.split_whitespace().any(|w| w == "mode=router");
    // `--routes N` (not a file): a generated FIB; `--routes FILE`: as every command takes it.
    let count = g
        .routes
        .as_ref()
        .filter(|p| !p.is_file())
        .and_then(|p| p.to_str()?.parse::<usize>().ok());
    if g.routes.is_some() && !router {
        bail!("--routes: the FIB is the router's: add mode=router (and ip0=/ip1=) to --append, or drop --routes");
    }
    if g.routes.is_some() && !a.peer.is_empty() {
        bail!("--routes with --peer: the peers boot without the FIB: drop one of them");
    }
    if g.nic != NicModel::Virtio && !a.peer.is_empty() {
        bail!(
            "--nic {} with --peer: the peers boot virtio-net only: drop one of them",
            g.nic.name()
        );
    }
    if count.is_some() && a.bidir {
        bail!("--routes N with --bidir: every generated route goes via 10.0.1.2 (port 1), so frames into port 1 would go back out of it: drop one of them");
    }
    let fib = count.map(|n| Fib::generate(n, FIB_SEED)).transpose()?;
    let file = match (&fib, &g.routes) {
        (None, Some(p)) => Some(p.display().to_string()),
        _ => None,
    };
    Ok((
        Dimensions::new(a.bidir, g.nic, a.flows, fib.as_ref(), file),
        fib,
    ))
}

pub(crate) fn cmd_bench_search(a: BenchArgs) -> Result<()> {
    let g = &a.traffic.guest;
    if g.icount {
        bail!("--search measures rates in wall-clock time; -icount (--icount) slows the guest's clock to its instruction count and makes every rate meaningless: drop --icount");
    }
    let (dims, fib) = dimensions(&a)?;
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
    // The generated FIB's file lives until the run ends (QEMU reads it at boot).
    let fib_dir = tempfile::Builder::new()
        .prefix("gannet-fib-")
        .tempdir_in("/tmp")
        .context("creating the routes file's directory")?;
    let mut gcfg = match &fib {
        Some(f) => {
            let path = fib_dir.path().join("routes.txt");
            f.write(&path)?;
            eprintln!(
                "xtask: --routes {}: a generated FIB (mkroutes.py's prefix mix, all via 10.0.1.2) in {}; {}",
                f.routes.len(),
                path.display(),
                dims.destinations
            );
            let gg = GuestArgs {
                routes: Some(path),
                ..g.clone()
            };
            guest_config(&gg, image, Path::new("/tmp"), Echo::Off)?
        }
        None => guest_config(g, image, Path::new("/tmp"), Echo::Off)?,
    };
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
    let mut report = bench_search::run_gannet(&gcfg, &rows, &cfg, a.ceiling_seconds, qlen, &dims)?;
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
            &dims,
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
            &dims,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Cmd};
    use clap::Parser;

    fn dims(extra: &[&str]) -> Result<(Dimensions, Option<Fib>)> {
        let mut argv = vec!["xtask", "bench", "--search"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).expect("parses").cmd {
            Cmd::Bench(a) => dimensions(&a),
            _ => unreachable!("not bench"),
        }
    }

    fn err(extra: &[&str]) -> String {
        format!("{:#}", dims(extra).unwrap_err())
    }

    #[test]
    fn defaults_are_one_direction_virtio_one_flow_no_fib() {
        let (d, fib) = dims(&[]).unwrap();
        assert_eq!(d.label, "port 0 -> 1, virtio, 1 flow, 1 core x 1 queue");
        assert!(fib.is_none());
    }

    #[test]
    fn nic_flows_and_a_generated_fib_reach_the_dimensions() {
        let (d, fib) = dims(&[
            "--nic",
            "e1000e",
            "--flows",
            "8",
            "--append",
            "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24",
            "--routes",
            "500",
        ])
        .unwrap();
        assert_eq!(
            d.label,
            "port 0 -> 1, e1000e, 8 flows, 1 core x 1 queue, FIB of 500 routes"
        );
        assert_eq!(fib.unwrap().routes.len(), 500);
        assert_eq!(d.offer.dsts.len(), 500);
        assert_eq!(d.offer.flows, 8);
    }

    #[test]
    fn what_the_search_cannot_run_is_refused_by_name() {
        assert!(err(&["--routes", "500"]).contains("add mode=router"));
        assert_eq!(
            dims(&["--bidir"]).unwrap().0.label,
            "ports 0 <-> 1, virtio, 1 flow, 1 core x 1 queue"
        );
        assert!(err(&["--cpus", "2"]).contains("multi-queue needs --backend tap"));
        assert!(err(&["--queues", "2"]).starts_with("--queues 2: multi-queue needs --backend tap"));
        assert!(err(&["--backend", "tap"]).starts_with("--backend tap: "));
        assert!(err(&["--flows", "0"]).starts_with("--flows 0"));
        assert!(err(&["--nics", "4"]).starts_with("--nics 4"));
        assert!(err(&["--nic", "e1000e", "--peer", "linux"]).contains("peers boot virtio-net only"));
        let r = [
            "--append",
            "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24",
            "--routes",
        ];
        assert!(err(&[r[0], r[1], r[2], "0"]).contains("1..=1000000"));
        assert!(err(&[r[0], r[1], r[2], "10", "--peer", "linux"]).contains("--routes with --peer"));
        assert!(err(&[r[0], r[1], r[2], "10", "--bidir"]).starts_with("--routes N with --bidir"));
    }
}
