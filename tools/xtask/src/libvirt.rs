//! `cargo xtask libvirt …`: Gannet appliances in series as libvirt domains
//! ([`harness::libvirt`]): `setup` (install and start the daemons), `run` (define, wait for
//! ready, traffic end to end, `virsh shutdown`, report), `up` (define and start, leave them
//! running), `down` (`virsh shutdown`, report, undefine), `status`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use harness::gen::GenConfig;
use harness::libvirt::{self, Chain, Mode, Stopped};
use harness::qemu;

/// The `libvirt` subcommands.
#[derive(Subcommand)]
pub enum LibvirtCmd {
    /// As root: install libvirt 11.3 (bookworm-backports) when missing, QEMU as root in
    /// /etc/libvirt/qemu.conf, start virtlogd and libvirtd when not running.
    Setup,
    /// Setup, define and start the chain, wait for `gannet: ready` on every console, send
    /// generator traffic through it both ways, stop every domain with `virsh shutdown`, print
    /// each one's state and reason and counters; undefine them.
    Run(ChainArgs),
    /// Setup, define and start the chain, wait for ready; the domains stay (stop with `down`).
    Up(ChainArgs),
    /// `virsh shutdown` every domain named PREFIX-*, print state, reason and final STATS,
    /// undefine them.
    Down(PrefixArgs),
    /// Every domain named PREFIX-* with its state and reason.
    Status(PrefixArgs),
}

/// A mode on the command line.
#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// `mode=l2`.
    L2,
    /// `mode=router`.
    Router,
}

/// Which chain.
#[derive(Args)]
pub struct ChainArgs {
    /// The appliances in series, port 1 of each to port 0 of the next.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ModeArg::L2, ModeArg::Router, ModeArg::L2])]
    chain: Vec<ModeArg>,
    #[command(flatten)]
    prefix: PrefixArgs,
    /// First UDP port on 127.0.0.1 (2 per link; n+1 links).
    #[arg(long, default_value_t = 47100)]
    base_port: u16,
    /// Frames per direction (`run`).
    #[arg(long, default_value_t = 2000)]
    frames: u64,
    /// Boot this image (default: build).
    #[arg(long)]
    image: Option<PathBuf>,
}

/// Which domains.
#[derive(Args)]
pub struct PrefixArgs {
    /// Domain name prefix.
    #[arg(long, default_value = "gannet")]
    prefix: String,
    /// Where the consoles (PREFIX-K-MODE.log) and domain XML files go.
    #[arg(long, default_value = "/var/log/gannet")]
    dir: PathBuf,
}

/// Runs one subcommand.
pub fn run(cmd: LibvirtCmd) -> Result<()> {
    match cmd {
        LibvirtCmd::Setup => {
            libvirt::ensure()?;
            println!(
                "libvirt: {} answers on {}",
                libvirt::virsh(&["version", "--daemon"])?.replace('\n', "; "),
                libvirt::URI
            );
            Ok(())
        }
        LibvirtCmd::Run(a) => {
            let chain = start(&a)?;
            let [warm, report] = chain
                .traffic(GenConfig::default(), a.frames)
                .with_context(|| chain.tails())?;
            println!(
                "warm-up: {} frames per direction one at a time, {} of {} back",
                libvirt::WARM_UP,
                warm.received,
                warm.sent
            );
            for r in &report.directions {
                println!(
                    "traffic into port {} of the chain: sent {} received {} timed out {} bad {}",
                    r.dir, r.sent, r.received, r.timed_out, r.bad
                );
            }
            let stopped = chain.shutdown().with_context(|| chain.tails())?;
            print_stopped(&stopped);
            Ok(())
        }
        LibvirtCmd::Up(a) => {
            let chain = start(&a)?;
            for ap in &chain.appliances {
                println!(
                    "{}: {} (console {})",
                    ap.name,
                    libvirt::domstate(&ap.name)?,
                    ap.console.display()
                );
            }
            chain.keep();
            Ok(())
        }
        LibvirtCmd::Down(p) => {
            libvirt::ensure()?;
            let names: Vec<String> = libvirt::list(&format!("{}-", p.prefix))?
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            anyhow::ensure!(!names.is_empty(), "no domain named {}-*", p.prefix);
            let chain = Chain::from_defined(&names, &p.dir);
            let stopped = chain.shutdown().with_context(|| chain.tails())?;
            print_stopped(&stopped);
            Ok(())
        }
        LibvirtCmd::Status(p) => {
            for (n, s) in libvirt::list(&format!("{}-", p.prefix))? {
                println!("{n}: {s}");
            }
            Ok(())
        }
    }
}

/// Setup, plan, define, start, wait for ready; prints the time to ready.
fn start(a: &ChainArgs) -> Result<Chain> {
    libvirt::ensure()?;
    let image = match &a.image {
        Some(p) => p.clone(),
        None => qemu::build_image()?,
    };
    let modes: Vec<Mode> = a
        .chain
        .iter()
        .map(|m| match m {
            ModeArg::L2 => Mode::L2,
            ModeArg::Router => Mode::Router,
        })
        .collect();
    let mut chain = Chain::plan(&a.prefix.prefix, &modes, &a.prefix.dir, a.base_port)?;
    let t = Instant::now();
    chain.start(&image)?;
    chain.wait_ready(libvirt::READY_TIMEOUT)?;
    for ap in &chain.appliances {
        println!("{}: {} ({})", ap.name, libvirt::READY, ap.cmdline);
    }
    println!(
        "{} domains ready in {:.1} s",
        chain.appliances.len(),
        t.elapsed().as_secs_f64()
    );
    Ok(chain)
}

/// One line per stopped domain.
fn print_stopped(stopped: &[Stopped]) {
    for s in stopped {
        let counters = s.stats.as_ref().map_or_else(
            || "no STATS on the console".to_string(),
            |st| {
                format!(
                    "forwarded {} rx {}/{} tx {}/{}",
                    st.forwarded,
                    st.ports.first().map_or(0, |p| p.rx),
                    st.ports.get(1).map_or(0, |p| p.rx),
                    st.ports.first().map_or(0, |p| p.tx),
                    st.ports.get(1).map_or(0, |p| p.tx)
                )
            },
        );
        println!(
            "{}: {}{}; {counters}",
            s.name,
            s.state,
            if s.clean { ", shutdown clean" } else { "" }
        );
    }
}
