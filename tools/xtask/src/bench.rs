//! `cargo xtask bench`: the offered-traffic record (default), and the `sim`, `boot`, `tlb`,
//! `datapath`, `--peer` and `--burst-in` benchmarks, each on its harness or lab module.

use crate::{announce_accel, image_for, BenchArgs, BenchTarget, Peer};
use anyhow::{anyhow, bail, Context, Result};
use harness::qemu::{Accel, Backend, Boot, Echo};
use harness::{envelope, qemu, setup};
use lab::report;
use std::path::Path;

use crate::run::{finish, traffic};

pub(crate) fn cmd_bench(a: BenchArgs) -> Result<()> {
    if a.target.is_some() && a.traffic.guest.mtu.is_some() {
        bail!("--mtu sets the MTU of the guest's NICs: bench mm/pool/sim/datapath/tlb boot none (or their own); drop --mtu");
    }
    if a.target.is_some() && a.traffic.guest.boot != Boot::Pvh {
        bail!("--boot: bench mm/pool/sim/datapath/tlb boot their own guests with -kernel; bench boot takes --machines q35,iso-bios,iso-uefi");
    }
    if let Some(BenchTarget::Mm) = a.target {
        return lab::bench_mm::run(a.json.as_deref()).map(drop);
    }
    if let Some(BenchTarget::Pool) = a.target {
        let g = &a.traffic;
        if g.guest.cpu.is_some() {
            bail!("bench pool boots its guests without -cpu: drop --cpu");
        }
        return lab::bench_pool::run(a.json.as_deref(), g.guest.image.clone(), g.seconds).map(drop);
    }
    if let Some(BenchTarget::Sim) = a.target {
        return cmd_bench_sim(a);
    }
    if let Some(BenchTarget::Datapath) = a.target {
        return cmd_bench_datapath(a);
    }
    if let Some(BenchTarget::Tlb) = a.target {
        return cmd_bench_tlb(a);
    }
    if let Some(BenchTarget::Boot) = a.target {
        return cmd_bench_boot(a);
    }
    if a.cross_check.is_some() {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --cross-check boots with -kernel; drop --boot");
        }
        return crate::search::cmd_bench_cross_check(a);
    }
    if a.search {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --search boots with -kernel; drop --boot");
        }
        return crate::search::cmd_bench_search(a);
    }
    if a.burst_in {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --burst-in boots every row with -kernel; drop --boot");
        }
        return cmd_bench_burst_in(a);
    }
    if !a.peer.is_empty() || a.sizes.is_some() {
        if a.traffic.guest.boot != Boot::Pvh {
            bail!("--boot: bench --peer/--sizes boots every row with -kernel; drop --boot");
        }
        return cmd_bench_peer(a);
    }
    let (b, r, guest, exit) = traffic(&a.traffic, Echo::Stderr)?;
    eprint!("{}", report::gen_table(&r));
    eprint!("{}", report::bench_table(&b));
    // Machine readable: the record on stdout (in the envelope), and in --json's file if given.
    let ran = crate::ran(&a.traffic.guest);
    let file = a.json.as_deref().filter(|p| !envelope::to_stdout(Some(p)));
    crate::emit(Some(Path::new("-")), "bench", ran, &b)?;
    crate::emit(file, "bench", ran, &b)?;
    finish(&guest, exit)
}

/// `bench sim`: boot once per (mode, K) on simulated devices under icount, print the table
/// (and `--json`). With `--twice`, every run is repeated and must give identical figures.
pub(crate) fn cmd_bench_sim(a: BenchArgs) -> Result<()> {
    use harness::bench_sim;
    let g = &a.traffic.guest;
    if g.accel != Accel::Tcg {
        bail!("bench sim counts instructions with -icount, which needs --accel tcg");
    }
    if g.backend != Backend::Dgram || g.queues != 1 {
        bail!("bench sim has no NIC: drop --backend/--queues");
    }
    if let Some(r) = &g.routes {
        let text =
            std::fs::read_to_string(r).with_context(|| format!("--routes {}", r.display()))?;
        let n = bench_sim::check_routes_file(&text, &g.append)
            .with_context(|| format!("--routes {}", r.display()))?;
        eprintln!(
            "xtask: router runs boot with {} ({n} routes) as the routes file",
            r.display()
        );
    }
    let size = u16::try_from(a.traffic.size)
        .ok()
        .filter(|s| (64..=9018).contains(s))
        .ok_or_else(|| anyhow!("bench sim --size {}: not in 64..=9018", a.traffic.size))?;
    setup::ensure()?;
    let cfg = bench_sim::SimBenchConfig {
        image: image_for(g)?,
        modes: a.modes.clone(),
        ks: bench_sim::parse_ks(&a.sim_k)?,
        iters: a.iters,
        append: g.append.clone(),
        accel: g.accel,
        cpu: g.cpu.clone(),
        memory: g.memory.clone(),
        echo: Echo::Off,
        routes: g.routes.clone(),
        size,
        acl_rules: if a.modes.iter().any(|m| m.takes_rules()) {
            bench_sim::parse_rules(&a.rules)?
        } else {
            Vec::new()
        },
    };
    announce_accel(cfg.accel, true, cfg.cpu.as_deref());
    let rows_per_k: usize = cfg
        .modes
        .iter()
        .map(|&m| {
            if m.takes_rules() {
                cfg.acl_rules.len()
            } else {
                1
            }
        })
        .sum();
    let runs = rows_per_k * cfg.ks.len() * if a.twice { 2 } else { 1 };
    let bar = harness::progress::Progress::new("bench sim", runs as u64);
    let progress = |r: &bench_sim::SimRecord| {
        bar.inc(1);
        bar.phase(format!("{} K={} done", r.mode, r.k));
        match r.acl_rules {
            Some(n) => eprintln!(
                "xtask: {} {n} rules size {} K={}: {:.2} instructions/delivered frame at {:.2} frames/busy iteration over {} delivered ({} forwarded, {} denied; {} distinct 5-tuples)",
                r.mode, r.size, r.k, r.instructions_per_packet, r.frames_per_busy_iter, r.delivered, r.packets, r.dropped, r.flows.unwrap_or(0)
            ),
            None => eprintln!(
                "xtask: {} size {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration over {} packets",
                r.mode, r.size, r.k, r.instructions_per_packet, r.frames_per_busy_iter, r.packets
            ),
        }
    };
    let records = bench_sim::run(&cfg, progress)?;
    if a.twice {
        let again = bench_sim::run(&cfg, progress)?;
        for (x, y) in records.iter().zip(&again) {
            if x != y {
                bail!("not deterministic: {x:?} then {y:?}");
            }
        }
        eprintln!("xtask: second pass identical to the first");
    }
    print!("{}", bench_sim::table(&records));
    let routes_file = cfg.routes.as_ref().map(|r| r.display().to_string());
    let doc = bench_sim::SimBenchJson {
        append: &cfg.append,
        routes_file: routes_file.as_deref(),
        acl_rules: &cfg.acl_rules,
        records: &records,
    };
    let ran = envelope::Ran::Guest {
        accel: cfg.accel,
        icount: true,
    };
    crate::emit(a.json.as_deref(), "sim", ran, &doc)
}

/// `bench boot`: `--runs` boots per machine type, a table of each (median, min, max).
pub(crate) fn cmd_bench_boot(a: BenchArgs) -> Result<()> {
    use harness::bench_boot::{self as bb, BootBenchConfig};
    let g = &a.traffic.guest;
    if g.cpu.is_some() || g.routes.is_some() || g.backend != Backend::Dgram {
        bail!("bench boot boots the default guest: drop --cpu/--routes/--backend");
    }
    if a.machines.iter().any(|m| m.boot().is_iso()) {
        harness::setup::ensure_iso_tools()?;
    }
    if a.machines.contains(&bb::Machine::IsoUefi) {
        harness::setup::ensure_ovmf()?;
    }
    setup::ensure()?;
    let image = image_for(g)?;
    announce_accel(g.accel, g.icount, None);
    let cfg = BootBenchConfig {
        image,
        append: g.append.clone(),
        accel: g.accel,
        icount: g.icount,
        cpus: a.traffic.cpus,
        nics: a.traffic.nics,
        memory: g.memory.clone(),
        runs: a.runs,
        machines: a.machines.clone(),
    };
    let bar =
        harness::progress::Progress::new("bench boot", (cfg.machines.len() * cfg.runs) as u64);
    let out = bb::run(&cfg, |m, i, r| {
        bar.inc(1);
        bar.phase(m.name());
        eprintln!(
            "xtask: {} boot {}: spawn → first line {:.1} ms, → ready {:.1} ms; guest {:.1} ms",
            m.name(),
            i + 1,
            r.first_line.as_secs_f64() * 1e3,
            r.ready.as_secs_f64() * 1e3,
            r.guest.total_us as f64 / 1e3
        );
    })?;
    for (m, runs) in &out {
        print!("{}", bb::table(*m, cfg.accel, cfg.icount, runs));
    }
    let doc = bb::BootBenchJson::new(&cfg, &out);
    crate::emit(a.json.as_deref(), "boot", crate::ran(g), &doc)
}

/// `bench tlb`: batch against immediate per vCPU count, then the negative control's catch rate.
pub(crate) fn cmd_bench_tlb(a: BenchArgs) -> Result<()> {
    use harness::bench_tlb::{markdown, run_one, TlbRun};
    let g = &a.traffic.guest;
    if g.cpu.is_some() {
        bail!("bench tlb boots its guests without -cpu: drop --cpu");
    }
    setup::ensure()?;
    let image = image_for(g)?;
    announce_accel(g.accel, false, None);
    let cpus: Vec<u32> = a
        .tlb_cpus
        .split(',')
        .map(|c| {
            c.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n >= 2)
                .ok_or_else(|| anyhow::anyhow!("--tlb-cpus: `{c}` is not a count of at least 2"))
        })
        .collect::<Result<_>>()?;
    let timeout = std::time::Duration::from_secs(3600);
    let mut records = Vec::new();
    let mut caught = Vec::new();
    let bar = harness::progress::Progress::new(
        "bench tlb",
        (cpus.len() * (2 + a.control_runs as usize)) as u64,
    );
    for &n in &cpus {
        for (tlb, batches) in [("batch", a.batches), ("immediate", a.immediate_batches)] {
            bar.phase(format!("{n} vCPUs tlb={tlb}"));
            let run = TlbRun {
                image: image.clone(),
                cpus: n,
                batches,
                tlb,
                skip: false,
                extra: g.append.clone(),
                timeout,
            };
            let (r, exit, _) = run_one(&run)?;
            eprintln!("xtask: {n} vCPUs tlb={tlb}: {r:?} ({exit})");
            if !exit.is_clean() || r.stale != 0 {
                bail!("tlbtest failed on {n} vCPUs, tlb={tlb}: {r:?} ({exit})");
            }
            records.push(r);
            bar.inc(1);
        }
        let mut hits = 0;
        bar.phase(format!("{n} vCPUs negative control"));
        for i in 0..a.control_runs {
            let run = TlbRun {
                image: image.clone(),
                cpus: n,
                batches: 640,
                tlb: "batch",
                skip: true,
                extra: g.append.clone(),
                timeout,
            };
            let (r, _, _) = run_one(&run)?;
            eprintln!(
                "xtask: control {i} on {n} vCPUs: stale {} of {} samples",
                r.stale, r.samples
            );
            hits += u32::from(r.stale > 0);
            bar.inc(1);
            if i == 0 {
                records.push(r);
            }
        }
        caught.push((n, hits, a.control_runs));
    }
    print!("{}", markdown(&records));
    for (n, hits, runs) in &caught {
        println!("negative control on {n} vCPUs: stale reads caught in {hits} of {runs} runs");
    }
    let doc = harness::bench_tlb::TlbBenchJson::new(&records, &caught);
    crate::emit(a.json.as_deref(), "tlb", crate::ran(g), &doc)
}

/// `bench datapath`: the host twin under callgrind, per (mode, K), beside the guest figure
/// (a fresh `bench sim` run with `--with-guest`, else docs/benchmarks-journal.md's).
pub(crate) fn cmd_bench_datapath(a: BenchArgs) -> Result<()> {
    use harness::bench_sim;
    use lab::bench_datapath as bd;
    setup::ensure_valgrind()?;
    let ks = bench_sim::parse_ks(&a.sim_k)?;
    let iters = a.iters.unwrap_or(1024);
    let exe = bd::build(&qemu::workspace_root())?;
    let mut hosts = Vec::new();
    for &mode in &a.modes {
        for &k in &ks {
            let r = bd::run_one(&exe, mode, k, iters)?;
            eprintln!(
                "xtask: host {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration over {} packets",
                r.mode, r.k, r.instructions_per_packet, r.frames_per_busy_iter, r.packets
            );
            hosts.push(r);
        }
    }
    let guests = if a.with_guest {
        let g = &a.traffic.guest;
        setup::ensure()?;
        let cfg = bench_sim::SimBenchConfig {
            image: image_for(g)?,
            modes: a.modes.clone(),
            ks: ks.clone(),
            iters: Some(iters),
            append: String::new(),
            accel: Accel::Tcg,
            cpu: g.cpu.clone(),
            memory: g.memory.clone(),
            echo: Echo::Off,
            routes: None,
            size: bench_sim::DEFAULT_SIZE,
            acl_rules: Vec::new(),
        };
        bench_sim::run(&cfg, |r| {
            eprintln!(
                "xtask: guest {} K={}: {:.2} instructions/packet at {:.2} frames/busy iteration",
                r.mode, r.k, r.instructions_per_packet, r.frames_per_busy_iter
            )
        })?
    } else {
        Vec::new()
    };
    let rows: Vec<bd::Row> = hosts
        .into_iter()
        .map(|h| {
            if a.with_guest {
                let g = guests
                    .iter()
                    .find(|g| g.mode == h.mode && g.k == h.k)
                    .map(|g| g.instructions_per_packet);
                bd::Row::new(h, g, "bench sim (this run)")
            } else {
                bd::Row::new(h, None, "not run (--with-guest)")
            }
        })
        .collect();
    print!("{}", bd::table(&rows));
    if a.with_guest {
        println!(
            "within 10% of the guest: {}",
            if bd::within(&rows, 0.10) { "yes" } else { "no" }
        );
    }
    let doc = bd::DatapathJson {
        note: bd::HOST_NOTE,
        rows: &rows,
    };
    // Host instructions under callgrind; the guest column (if any) came from TCG + icount.
    crate::emit(a.json.as_deref(), "datapath", envelope::Ran::Host, &doc)
}

/// `bench --peer linux,dpdk [--sizes …]`: Gannet io/l2/router, the Linux guest and testpmd,
/// one table per size, every row with the same `-cpu` (`max` by default when DPDK runs).
pub(crate) fn cmd_bench_peer(a: BenchArgs) -> Result<()> {
    use harness::peer_linux;
    use lab::{bench_peer, peer_dpdk};
    setup::ensure()?;
    let t = &a.traffic;
    let sizes = match &a.sizes {
        Some(s) => bench_peer::parse_sizes(s)?,
        None => vec![t.size],
    };
    let want_dpdk = a.peer.contains(&Peer::Dpdk);
    let cpu = match (&t.guest.cpu, want_dpdk) {
        (Some(c), _) => Some(c.clone()),
        (None, true) => {
            eprintln!(
                "xtask: --peer dpdk: every row runs with -cpu max (Debian's testpmd needs \
                 SSE4.2, which QEMU's default qemu64 lacks); give --cpu to choose another"
            );
            Some("max".to_string())
        }
        (None, false) => None,
    };
    // Prepare the peers first: a missing download fails before any boot.
    let linux = if a.peer.contains(&Peer::Linux) {
        Some(peer_linux::prepare()?)
    } else {
        None
    };
    let dpdk = if want_dpdk {
        let p = peer_dpdk::prepare()?;
        eprintln!(
            "xtask: DPDK peer: dpdk-testpmd {} on Linux {}",
            p.dpdk_version, p.release
        );
        Some(p)
    } else {
        None
    };
    let cfg = bench_peer::PeerBenchConfig {
        sweep: a.sizes.is_some(),
        sizes,
        seconds: t.seconds,
        window: a.window.unwrap_or(PEER_WINDOW),
        accel: t.guest.accel,
        icount: t.guest.icount,
        cpu,
        append: t.guest.append.clone(),
        image: image_for(&t.guest)?,
        echo: Echo::Off,
        plots: a.sizes.is_some(),
        mtu: t.guest.mtu.clone(),
        bidir: false,
        // Every engine's row starts after the same warm-up (the router's ARP resolved: its
        // first frames would otherwise be lost to the neighbour queue).
        warmup: lab::bench_burstin::WARMUP_FRAMES,
        nic: t.guest.nic,
    };
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let peers = bench_peer::Peers {
        linux: linux.as_ref(),
        dpdk: dpdk.as_ref(),
    };
    let out = bench_peer::run(&cfg, peers)?;
    for rec in &out.records {
        print!("{}", bench_peer::table(rec));
    }
    for n in &out.notes {
        println!("note: {n}");
    }
    if let Some(rec) = out.records.iter().find(|r| r.frame_size == 64) {
        print!("{}", bench_peer::targets(rec));
    }
    let v = bench_peer::json(&cfg, &out)?;
    let ran = envelope::Ran::Guest {
        accel: cfg.accel,
        icount: cfg.icount,
    };
    crate::emit(a.json.as_deref(), "peer", ran, &v)?;
    if cfg.plots && out.records.len() > 1 {
        for p in bench_peer::plots(&qemu::workspace_root(), &out.records)? {
            eprintln!("xtask: wrote {}", p.display());
        }
    } else if cfg.plots {
        eprintln!("xtask: no plots: they draw pps against frame size and need two --sizes or more");
    }
    if out.failed {
        bail!("some rows could not run (see the notes above)");
    }
    Ok(())
}

/// `bench --peer`'s default generator window (maximum outstanding frames).
const PEER_WINDOW: u64 = 64;

/// `bench --burst-in`: Gannet io/l2/router with `burstin=on`, generator both ways (port 0
/// only with `--one-way`) with a window that fills 224 RX entries per port; one table, the l2
/// target, `--json`.
pub(crate) fn cmd_bench_burst_in(a: BenchArgs) -> Result<()> {
    use lab::{bench_burstin, bench_peer};
    if a.target.is_some() {
        bail!("--burst-in is the guest bench (no target): drop the target");
    }
    setup::ensure()?;
    let t = &a.traffic;
    let window = a.window.unwrap_or(bench_burstin::DEFAULT_WINDOW);
    bench_burstin::check_window(window)?;
    let cfg = bench_peer::PeerBenchConfig {
        sweep: false,
        sizes: vec![t.size],
        seconds: t.seconds,
        window,
        accel: t.guest.accel,
        icount: t.guest.icount,
        cpu: t.guest.cpu.clone(),
        append: bench_burstin::append(&t.guest.append)?,
        image: image_for(&t.guest)?,
        echo: Echo::Off,
        plots: false,
        mtu: t.guest.mtu.clone(),
        bidir: !a.one_way,
        warmup: lab::bench_burstin::WARMUP_FRAMES,
        nic: t.guest.nic,
    };
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let out = bench_peer::run(&cfg, bench_peer::Peers::default())?;
    let rec = bench_burstin::record(&cfg, &out).context("no record")?;
    print!("{}", bench_burstin::table(&rec.record, cfg.bidir));
    for n in out.notes.iter().filter(|n| !n.contains("not requested")) {
        println!("note: {n}");
    }
    print!("{}", bench_burstin::verdict(&rec.record));
    let ran = envelope::Ran::Guest {
        accel: cfg.accel,
        icount: cfg.icount,
    };
    crate::emit(a.json.as_deref(), "burst-in", ran, &rec)?;
    if out.failed {
        bail!("some rows could not run (see the notes above)");
    }
    Ok(())
}
