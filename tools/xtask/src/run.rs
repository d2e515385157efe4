//! The commands that boot one guest and drive it: `iso`, `boot`, `gen`, `run` (the main job:
//! build, boot, offer traffic, print the results table).

use crate::{
    announce_accel, guest_config, image_for, tap_net, BootArgs, GenArgs, IsoArgs, RunArgs,
    TrafficArgs,
};
use anyhow::{bail, Context, Result};
use harness::qemu::{Accel, Backend, Echo, Guest, GuestExit};
use harness::{envelope, gen, qemu, setup};
use lab::report;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest frame the guest forwards (bytes, no FCS): four 4 KiB RX pages (the driver's
/// `MAX_FRAME_BUFFERS`) minus the 12-byte virtio-net header; larger frames are dropped as
/// `too_big`.
const MAX_GUEST_FRAME: usize = 4 * 4096 - 12;

/// UDP flows the generator offers on the tap backend (the tun driver spreads flows, not
/// frames, over the queues).
const TAP_FLOWS: u16 = 16;

/// `iso`: build the image (unless `--image`) and the GRUB ISO.
pub(crate) fn cmd_iso(a: IsoArgs) -> Result<()> {
    let image = match &a.image {
        Some(p) => p.clone(),
        None => {
            setup::ensure_target()?;
            qemu::build_image()?
        }
    };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| qemu::iso_path(&qemu::workspace_root()));
    if a.cmdline.len() > qemu::MAX_CMDLINE {
        return Err(qemu::CmdlineTooLong {
            len: a.cmdline.len(),
        }
        .into());
    }
    harness::iso::build(&image, &a.cmdline, a.routes.as_deref(), &out)?;
    eprintln!(
        "xtask: ISO {} (kernel {}, command line {:?}); boot it with `qemu-system-x86_64 -machine q35 -serial stdio -cdrom {}` (SeaBIOS) or add `-bios {}` (UEFI)",
        out.display(),
        image.display(),
        a.cmdline,
        out.display(),
        setup::OVMF_FD
    );
    Ok(())
}

pub(crate) fn cmd_boot(a: BootArgs) -> Result<()> {
    let dir = match (&a.dgram, a.guest.backend) {
        (Some(d), _) => std::path::absolute(d)?,
        (None, Backend::Dgram) => bail!("--dgram DIR is required with the dgram backend"),
        (None, Backend::Tap) => std::env::temp_dir(),
    };
    // Fail on a too-long socket path before anything else happens.
    if a.guest.backend == Backend::Dgram {
        gen::check_socket_paths(&dir, a.nics)?;
    }
    setup::ensure()?;
    let image = image_for(&a.guest)?;
    let mut cfg = guest_config(&a.guest, image, &dir, Echo::Stdout)?;
    cfg.cpus = a.cpus;
    cfg.nics = a.nics;
    if a.hosts && a.guest.backend != Backend::Tap {
        bail!("--hosts needs --backend tap (the hosts sit on the tap devices)");
    }
    let host_plan = if a.hosts {
        let host_mtu = a.host_mtu.as_ref().or(a.guest.mtu.as_ref());
        Some(harness::hosts::plan_with_mtu(
            &a.guest.append,
            a.nics,
            host_mtu,
        )?)
    } else {
        None
    };
    let net = tap_net(&mut cfg, a.nics)?;
    let mut hosts: Option<harness::hosts::Hosts> = None;
    qemu::check_config(&cfg)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let int = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, int.clone())?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, term.clone())?;
    }

    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    let console = guest.console();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if console.send_line(&line).is_err() {
                break;
            }
        }
    });

    let start = Instant::now();
    let mut quit_sent: Option<Instant> = None;
    let mut ready = false;
    let exit = loop {
        if term.load(Ordering::SeqCst) {
            guest.kill();
            bail!("terminated by signal; QEMU killed\n{}", guest.tail_report());
        }
        if int.swap(false, Ordering::SeqCst) {
            if quit_sent.is_some() {
                guest.kill();
                bail!("interrupted twice; QEMU killed\n{}", guest.tail_report());
            }
            eprintln!("xtask: SIGINT: sending `quit` to the guest (again to kill QEMU)");
            let _ = guest.send_line("quit");
            quit_sent = Some(Instant::now());
        }
        if let Some(e) = guest.try_wait()? {
            break e;
        }
        if !ready {
            let found = guest
                .poll_line_from(
                    0,
                    |l| l.contains(qemu::READY_MARKER),
                    Duration::from_millis(100),
                )
                .unwrap_or(None);
            if found.is_some() {
                ready = true;
                if let (Some(plan), Some(net)) = (&host_plan, &net) {
                    let h = harness::hosts::Hosts::create(net, plan)?;
                    eprint!("{}", h.describe());
                    hosts = Some(h);
                }
                println!("READY");
            } else if start.elapsed() >= qemu::READY_TIMEOUT && quit_sent.is_none() {
                guest.kill();
                bail!(
                    "no `{}` line within {:?}\n{}",
                    qemu::READY_MARKER,
                    qemu::READY_TIMEOUT,
                    guest.tail_report()
                );
            }
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
        if quit_sent.is_some_and(|t| t.elapsed() >= Duration::from_secs(30)) {
            guest.kill();
            bail!(
                "guest did not exit within 30 s of `quit`; QEMU killed\n{}",
                guest.tail_report()
            );
        }
    };
    // The host namespaces go before the QEMU namespace.
    drop(hosts);
    drop(net);
    finish(&guest, exit)
}

pub(crate) fn finish(guest: &Guest, exit: GuestExit) -> Result<()> {
    if exit.is_clean() {
        eprintln!("xtask: {exit}");
        Ok(())
    } else {
        bail!("{exit}\n{}", guest.tail_report())
    }
}

/// `gen`: the generator against a guest booted elsewhere; the table, the JSON, then fails with
/// `NothingCameBack` when frames were sent and none came back.
pub(crate) fn cmd_gen(a: GenArgs) -> Result<()> {
    let cfg = gen::GenConfig {
        dir: a.dgram.unwrap_or_default(),
        netns: a
            .netns
            .map(|n| std::path::Path::new(harness::tap::NETNS_DIR).join(n)),
        size: a.size,
        seconds: a.seconds,
        count: a.count,
        flows: a.flows,
        window: a.window,
        pcap: a.pcap,
        bidir: a.bidir,
        ..Default::default()
    };
    let r = gen::run(&cfg)?;
    print!("{}", report::gen_table(&r));
    // The generator alone: whatever guest it talks to was started elsewhere.
    crate::emit(a.json.as_deref(), "gen", envelope::Ran::Host, &r)?;
    // Frames sent and none back fails the command (after the table and the JSON).
    r.check_came_back()?;
    Ok(())
}

/// build → bind generator → boot → ready → traffic → quit. Returns the record and how it ended.
pub(crate) fn traffic(
    a: &TrafficArgs,
    echo: Echo,
) -> Result<(report::BenchResult, gen::GenReport, Guest, GuestExit)> {
    setup::ensure()?;
    let image = image_for(&a.guest)?;
    let tmp = tempfile::Builder::new()
        .prefix("gannet-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    if a.nics < 2 || !a.nics.is_multiple_of(2) {
        bail!(
            "--nics {}: give an even number of ports, at least 2",
            a.nics
        );
    }
    let pairs = a.nics / 2;
    let mut cfg = guest_config(&a.guest, image, tmp.path(), echo)?;
    cfg.cpus = a.cpus;
    cfg.nics = a.nics;
    let net = tap_net(&mut cfg, a.nics)?;
    // The host side binds first: QEMU's frames to an unbound path are lost.
    let generators = (0..pairs)
        .map(|k| {
            gen::Generator::bind(&gen::GenConfig {
                dir: tmp.path().to_path_buf(),
                size: a.size,
                seconds: a.seconds,
                base_port: 2 * k,
                netns: cfg.netns.clone(),
                // The tun driver steers frames onto queues by flow hash: offer 16 flows.
                flows: if net.is_some() { TAP_FLOWS } else { 1 },
                ..Default::default()
            })
        })
        .collect::<Result<Vec<_>>>()?;
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    // One generator per port pair: each pair must be one the guest forwards.
    if let Some(n) = guest_port_pairs(&guest.lines()) {
        if n < pairs {
            let _ = guest.quit(Duration::from_secs(30));
            bail!(
                "the guest forwards {n} of the {pairs} port pairs (one pair per CPU, router mode \
                 uses one): give --cpus {pairs} or --nics {}",
                2 * n
            );
        }
    }
    eprintln!(
        "xtask: guest ready ({} vCPU, {} port pair(s)); offering {} B frames port 2k -> port 2k+1 for {} s",
        a.cpus, pairs, a.size, a.seconds
    );
    let reports: Vec<gen::GenReport> = std::thread::scope(|s| {
        let handles: Vec<_> = generators.iter().map(|g| s.spawn(|| g.run())).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("generator thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let r = combine(&reports);
    let (stats, exit) = guest.quit(Duration::from_secs(30))?;
    let queues = stats.as_ref().map_or(1, |s| s.queues) as usize;
    let cores = if queues > 1 { queues } else { pairs };
    if stats.is_none() {
        eprintln!("xtask: warning: no final STATS line from the guest");
    }
    let stats = stats.as_ref();
    let b = report::BenchResult {
        frame_size: a.size,
        seconds: r.seconds,
        offered_pps: r.offered_pps,
        forwarded_pps: r.received_pps,
        loss: r.loss,
        guest_cycles_per_packet: stats.and_then(|s| s.cycles_per_packet()),
        frames_per_busy_iter: stats
            .and_then(|s| (s.busy_iters > 0).then(|| s.forwarded as f64 / s.busy_iters as f64)),
        kicks_per_packet: stats.and_then(|s| s.kicks_per_packet()),
        accel: cfg.accel.name().to_string(),
        mode: stats.map(|s| s.mode.as_str().to_string()),
        icount: cfg.icount,
        per_core: (cores > 1).then(|| {
            (0..cores)
                .map(|cpu| {
                    let c = stats.and_then(|s| s.per_cpu.get(cpu));
                    let fwd = c.map(|c| c.forwarded as f64);
                    let cycles = c.and_then(|c| {
                        (c.forwarded > 0).then(|| c.busy_cycles as f64 / c.forwarded as f64)
                    });
                    report::PerCore {
                        cpu,
                        // One generator per port pair; with multi-queue one generator feeds
                        // every core, and each core's share is its forwarded count.
                        forwarded_pps: match reports.get(cpu) {
                            Some(rep) if queues == 1 => rep.received_pps,
                            _ => fwd.unwrap_or(0.0) / r.seconds.max(1e-9),
                        },
                        guest_cycles_per_packet: cycles,
                        frames_per_busy_iter: c.and_then(|c| {
                            (c.busy_iters > 0).then(|| c.forwarded as f64 / c.busy_iters as f64)
                        }),
                        tlb: c.map(|c| c.tlb),
                    }
                })
                .collect()
        }),
    };
    // Keep the temp dir (and the tap namespace) alive until QEMU is gone.
    drop(generators);
    drop(tmp);
    drop(net);
    Ok((b, r, guest, exit))
}

/// The number of port pairs the guest says it forwards (`forwarding N port pair(s) …`).
fn guest_port_pairs(lines: &[String]) -> Option<usize> {
    lines.iter().find_map(|l| {
        let rest = &l[l.find("forwarding ")? + "forwarding ".len()..];
        rest[..rest.find(" port pair")?].trim().parse().ok()
    })
}

/// The reports of several generators (one per port pair) as one: counts and rates add up,
/// loss is recomputed, the time is the longest.
fn combine(reports: &[gen::GenReport]) -> gen::GenReport {
    let mut r = reports[0].clone();
    for x in &reports[1..] {
        r.sent += x.sent;
        r.received += x.received;
        r.duplicates += x.duplicates;
        r.reordered += x.reordered;
        r.bad += x.bad;
        r.offered_pps += x.offered_pps;
        r.received_pps += x.received_pps;
        r.seconds = r.seconds.max(x.seconds);
        r.longest_gap_ms = r.longest_gap_ms.max(x.longest_gap_ms);
        r.stray += x.stray;
        r.directions.extend(x.directions.iter().cloned());
        r.warnings.extend(x.warnings.iter().cloned());
    }
    r.loss = if r.sent > 0 {
        1.0 - r.received.min(r.sent) as f64 / r.sent as f64
    } else {
        0.0
    };
    r
}

pub(crate) fn cmd_run(a: RunArgs) -> Result<()> {
    if a.hosts {
        return cmd_run_hosts(&a.traffic);
    }
    let a = a.traffic;
    let (b, r, guest, exit) = traffic(&a, Echo::Stdout)?;
    println!("generator:");
    print!("{}", report::gen_table(&r));
    println!("result:");
    print!("{}", report::bench_table(&b));
    if b.loss > 0.0 {
        println!(
            "LOSS: {:.2}% ({} of {} frames not forwarded)",
            b.loss * 100.0,
            r.sent - r.received.min(r.sent),
            r.sent
        );
    }
    finish(&guest, exit)?;
    if r.sent > 0 && r.received == 0 {
        bail!(
            "no frame was forwarded (see the guest's drop counters above: the network \
             function's own drops are `nf.dropped` and its `nf_counters`; `too_big` counts \
             frames over {} bytes, frames larger than a port's big RX buffers (over its MTU) \
             and, with xcore=on, every frame of several pages; `runt`, `bad_desc` and \
             `tx_ring_full` say the rest)",
            MAX_GUEST_FRAME
        );
    }
    Ok(())
}

/// `run --hosts`: boot on the tap backend with a Linux host behind each port, `iperf3` UDP at
/// full rate from the port-0 host to the port-1 host, then `quit`; prints the datagrams' fate
/// (`harness::hosts::UdpRun`) beside the guest's counters.
pub(crate) fn cmd_run_hosts(a: &TrafficArgs) -> Result<()> {
    if a.guest.backend != Backend::Tap {
        bail!("--hosts needs --backend tap (the hosts sit on the tap devices)");
    }
    // Ethernet 14 + IPv4 20 + UDP 8 + FCS 4.
    let payload = a
        .size
        .checked_sub(46)
        .filter(|&p| p >= 1)
        .with_context(|| format!("--size {} leaves no UDP payload (at least 47)", a.size))?;
    setup::ensure()?;
    setup::ensure_host_tools()?;
    let image = image_for(&a.guest)?;
    let dir = std::env::temp_dir();
    let mut cfg = guest_config(&a.guest, image, &dir, Echo::Stdout)?;
    cfg.cpus = a.cpus;
    cfg.nics = 2;
    let plan = harness::hosts::plan_with_mtu(&a.guest.append, 2, a.guest.mtu.as_ref())?;
    let net = tap_net(&mut cfg, 2)?.context("the tap backend's namespace")?;
    announce_accel(cfg.accel, cfg.icount, cfg.cpu.as_deref());
    let mut guest = Guest::boot(&cfg)?;
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    let hosts = harness::hosts::Hosts::create(&net, &plan)?;
    eprint!("{}", hosts.describe());
    let dst = plan[1].addr.to_string();
    // Resolve the neighbours first, so the run starts routed.
    let _ = hosts.exec(0, &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "3", &dst])?;
    let secs = a.seconds.ceil().max(1.0) as u32;
    let u = hosts.iperf3_udp(0, 1, payload, secs)?;
    // As `boot`: the guest gets 30 s to run its quit phases and print its last STATS.
    let (stats, exit) = guest.quit(Duration::from_secs(30))?;
    drop(hosts);
    drop(net);
    let accel = match cfg.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    println!(
        "iperf3 UDP, {} s, {}-byte frames, host 0 -> host 1 ({accel}):",
        u.seconds, a.size
    );
    println!(
        "  sent {} ({:.0}/s); arrived at host 1 {} ({:.0}/s, server read {})",
        u.sent,
        u.sent as f64 / f64::from(u.seconds),
        u.arrived,
        u.arrived as f64 / f64::from(u.seconds),
        u.read
    );
    println!(
        "  dropped: sender qdisc {}, sender tap (QEMU did not read in time) {}, receiver tap {}, receiver socket full {}",
        u.sender_qdisc, u.sender_tap, u.receiver_tap, u.receiver_socket
    );
    if let Some(s) = &stats {
        let port: u64 = s.ports.iter().map(|p| p.drops.total()).sum();
        let router = s.router.as_ref().map_or(0, |r| r.drops.total());
        println!(
            "  guest: forwarded {}, drops: ports {port}, router {router}; unaccounted {}",
            s.forwarded,
            u.unaccounted(port + router)
        );
    }
    finish(&guest, exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs_from_the_guest_log() {
        let lines = [
            "[    0.1] INFO  gannet::forwarder: idle (cpu 0): poll 50 us".to_string(),
            "[    0.2] INFO  gannet::forwarder: forwarding 2 port pair(s) on 2 core(s), 1 queue pair(s) per port, mode l2, burst 32".to_string(),
        ];
        assert_eq!(guest_port_pairs(&lines), Some(2));
        assert_eq!(guest_port_pairs(&lines[..1]), None);
    }
}
