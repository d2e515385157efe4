//! `cargo xtask`: build, boot, run, bench, test, gen, setup.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use tools::{gen, report};

#[derive(Parser)]
#[command(name = "xtask", about = "Gannet developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Traffic generator over QEMU's unix-datagram backend (no root needed).
    Gen(GenArgs),
}

#[derive(Args)]
struct GenArgs {
    /// Directory of the guest-i.sock / host-i.sock sockets.
    #[arg(long)]
    dgram: PathBuf,
    /// Frame size on the wire, FCS included (the socket carries size-4 bytes).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Sending duration.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Send exactly N frames per direction instead of running for --seconds.
    #[arg(long)]
    count: Option<u64>,
    /// Number of UDP flows.
    #[arg(long, default_value_t = 1)]
    flows: u16,
    /// Maximum outstanding frames per direction.
    #[arg(long, default_value_t = 64)]
    window: u64,
    /// Replay this capture into port 0 instead of synthetic frames.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Also send into port 1 and receive from port 0.
    #[arg(long)]
    bidir: bool,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn cmd_gen(a: GenArgs) -> Result<()> {
    let cfg = gen::GenConfig {
        dir: a.dgram,
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
    if let Some(p) = a.json {
        report::write_json(&p, &r)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Gen(a) => cmd_gen(a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
