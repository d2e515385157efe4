//! The one envelope every benchmark's and check's `--json` is written in: what ran, where and
//! when, around the command's own record.
//!
//! ```json
//! { "schema": 1, "bench": "sim", "command": "cargo xtask bench sim --json -",
//!   "commit": "2253c61…", "dirty": false, "accel": "tcg", "icount": true,
//!   "host_cpu": "AMD EPYC 7B13", "date": "2026-12-05T13:58:12Z", "result": { … } }
//! ```
//!
//! - `schema`: [`SCHEMA`], raised when a field of the envelope changes meaning;
//! - `bench`: the command's name (`sim`, `boot`, `tlb`, `peer`, `soak`, `faults`, …); the shape
//!   of `result` is that command's (its record type in `harness` or `lab`);
//! - `command`: the command line as typed (`cargo xtask` and the arguments);
//! - `commit`: `git rev-parse HEAD` of the workspace when the command started ([`capture`];
//!   `unknown` outside a checkout), `dirty` when tracked files differed from it;
//! - `accel`: `tcg`, `kvm`, or `host` for host-only benchmarks (no guest); `icount`: whether
//!   guest instructions were counted (`-icount shift=0,sleep=off`);
//! - `host_cpu`: `/proc/cpuinfo`'s first `model name` (cycle figures depend on it);
//! - `date`: when the record was written, RFC 3339 UTC to the second.
//!
//! A path of `-` writes to stdout; a command that takes `--json -` calls [`claim_stdout`] first,
//! so everything else it prints (tables, notes) goes to stderr and stdout carries the JSON alone.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::qemu::{self, Accel};

/// The envelope's version: raised when one of its fields changes meaning.
pub const SCHEMA: u32 = 1;

/// Where a record was measured: a guest under one accelerator, or the host itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// A guest under QEMU with this accelerator; `icount`: `-icount shift=0,sleep=off`.
    Guest {
        /// The accelerator.
        accel: Accel,
        /// Whether guest instructions were counted.
        icount: bool,
    },
    /// Host code only (the `mm` benches): no guest, no accelerator.
    Host,
}

/// One benchmark's or check's JSON: the envelope's fields around `result` (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// [`SCHEMA`] when written.
    pub schema: u32,
    /// The command's name: `sim`, `boot`, `tlb`, `peer`, `soak`, …
    pub bench: String,
    /// The command line as typed.
    pub command: String,
    /// The workspace's commit (`unknown` outside a git checkout).
    pub commit: String,
    /// Tracked files differed from `commit`.
    pub dirty: bool,
    /// `tcg`, `kvm` or `host`.
    pub accel: String,
    /// Guest instructions counted (`-icount`).
    pub icount: bool,
    /// The host CPU's model name (`/proc/cpuinfo`).
    pub host_cpu: String,
    /// RFC 3339 UTC, to the second.
    pub date: String,
    /// The command's own record.
    pub result: T,
}

impl<T> Envelope<T> {
    /// Wrap `result` of `bench`, filling in the command line, commit, host and date now.
    pub fn new(bench: &str, ran: Ran, result: T) -> Self {
        let (accel, icount) = match ran {
            Ran::Guest { accel, icount } => (accel.name().to_string(), icount),
            Ran::Host => ("host".to_string(), false),
        };
        let (commit, dirty) = captured();
        Envelope {
            schema: SCHEMA,
            bench: bench.to_string(),
            command: command_line(),
            commit,
            dirty,
            accel,
            icount,
            host_cpu: host_cpu(),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            result,
        }
    }
}

/// Whether `--json PATH` sends the JSON to stdout (`-`).
pub fn to_stdout(path: Option<&Path>) -> bool {
    path.is_some_and(|p| p == Path::new("-"))
}

/// The process's real stdout once [`claim_stdout`] moved everything else to stderr.
static JSON_OUT: OnceLock<OwnedFd> = OnceLock::new();

/// Keep stdout for the JSON: a copy of it is kept for [`write`] and file descriptor 1 becomes
/// stderr, so every `print!` of the command (tables, notes) lands on stderr. Called once, before
/// the command prints anything, when its `--json` is `-`.
///
/// # Errors
/// The descriptors cannot be duplicated.
pub fn claim_stdout() -> Result<()> {
    use std::io::Write as _;
    std::io::stdout().flush().ok();
    let json = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating stdout for the JSON")?;
    rustix::stdio::dup2_stdout(std::io::stderr().as_fd()).context("pointing stdout at stderr")?;
    // A second call keeps the first copy (still the real stdout).
    let _ = JSON_OUT.set(json);
    Ok(())
}

/// Write `env` as pretty JSON to `path` (`-`: stdout).
///
/// # Errors
/// The file cannot be written (named in the error), or `T` does not serialise.
pub fn write<T: Serialize>(path: &Path, env: &Envelope<T>) -> Result<()> {
    let text = serde_json::to_string_pretty(env)? + "\n";
    if to_stdout(Some(path)) {
        use std::io::Write as _;
        // The real stdout [`claim_stdout`] kept, else the process's own.
        let mut out: Box<dyn std::io::Write> = match JSON_OUT.get() {
            Some(fd) => Box::new(File::from(fd.try_clone().context("duplicating stdout")?)),
            None => Box::new(std::io::stdout().lock()),
        };
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("writing the JSON to stdout")
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("xtask: wrote {}", path.display());
        Ok(())
    }
}

/// Read an envelope written by [`write`].
///
/// # Errors
/// The file cannot be read, is not JSON of this shape, or has another [`SCHEMA`].
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Envelope<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let env: Envelope<T> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    anyhow::ensure!(
        env.schema == SCHEMA,
        "{}: envelope schema {} (this build reads {SCHEMA})",
        path.display(),
        env.schema
    );
    Ok(env)
}

/// `cargo xtask …` as typed (the binary's own name replaced by what the user ran).
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// The commit and dirty flag [`capture`] took, or now if it was not called.
static CAPTURED: OnceLock<(String, bool)> = OnceLock::new();

/// Take the workspace's commit and dirty flag now, for every envelope this process writes:
/// a command calls it when it starts, so a checkout that moves while it runs (a long benchmark
/// in a shared worktree) does not name the later commit.
pub fn capture() {
    CAPTURED.get_or_init(commit);
}

fn captured() -> (String, bool) {
    CAPTURED.get_or_init(commit).clone()
}

/// `git rev-parse HEAD` and whether tracked files differ from it.
fn commit() -> (String, bool) {
    let root = qemu::workspace_root();
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            (head, dirty)
        }
        None => ("unknown".to_string(), false),
    }
}

/// The first `model name` of `/proc/cpuinfo`, or `unknown`.
fn host_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_where_it_ran() {
        let e = Envelope::new(
            "sim",
            Ran::Guest {
                accel: Accel::Tcg,
                icount: true,
            },
            vec![1.5f64, 2.0],
        );
        assert_eq!(
            (e.schema, e.accel.as_str(), e.icount),
            (SCHEMA, "tcg", true)
        );
        assert!(e.command.starts_with("cargo xtask"));
        assert_eq!(e.date.len(), "2026-12-05T13:58:12Z".len(), "{}", e.date);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write(&p, &e).unwrap();
        let back: Envelope<Vec<f64>> = read(&p).unwrap();
        assert_eq!(back, e);
        let host = Envelope::new("mm", Ran::Host, ());
        assert_eq!((host.accel.as_str(), host.icount), ("host", false));
    }

    #[test]
    fn another_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        let mut e = Envelope::new("sim", Ran::Host, 1u32);
        e.schema = SCHEMA + 1;
        write(&p, &e).unwrap();
        let err = read::<u32>(&p).unwrap_err();
        assert!(format!("{err:#}").contains("schema"), "{err:#}");
    }

    #[test]
    fn dash_is_stdout() {
        assert!(to_stdout(Some(Path::new("-"))));
        assert!(!to_stdout(Some(Path::new("out.json"))));
        assert!(!to_stdout(None));
    }
}
