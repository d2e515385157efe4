//! `cargo xtask fuzz`: the cargo-fuzz targets (issue 15), each run for a fixed time from its
//! checked-in seed corpus. Installs the nightly toolchain and cargo-fuzz when missing.
//!
//! Each fuzz crate is its own workspace (`netstack/fuzz`, `drivers/fuzz`; nightly only, not
//! members of the stable main workspace). Seeds live in `<crate>/seeds/<target>/` (in the
//! repo). With a fixed seed (the default, [`CI_SEED`]) libFuzzer writes what it finds new to
//! a corpus emptied at the start of each run (`<target dir>/fuzz/corpus-seed<N>/<target>/`),
//! so the run is the same every time; with `--seed 0` (random) to `<crate>/corpus/<target>/`
//! (ignored by git), which grows from run to run. A crashing input goes to
//! `<crate>/artifacts/<target>/`. The builds go to `<target dir>/fuzz`
//! (`$CARGO_TARGET_DIR/fuzz`, else `<root>/target/fuzz`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// One fuzz target: its crate (relative to the root), its name, libFuzzer's `-max_len`.
pub struct Target {
    /// The fuzz crate's folder.
    pub krate: &'static str,
    /// The `[[bin]]` name.
    pub name: &'static str,
    /// Longest input libFuzzer makes.
    pub max_len: usize,
}

/// Every target, in the order they run.
pub const TARGETS: [Target; 9] = [
    Target {
        krate: "netstack/fuzz",
        name: "process_frame",
        max_len: 2048,
    },
    Target {
        krate: "netstack/fuzz",
        name: "cmdline",
        max_len: 1024,
    },
    Target {
        krate: "netstack/fuzz",
        name: "routes_file",
        max_len: 1024,
    },
    Target {
        krate: "netstack/fuzz",
        name: "mgmt_request",
        max_len: 4096,
    },
    Target {
        krate: "netstack/fuzz",
        name: "fib_build",
        max_len: 4096,
    },
    Target {
        krate: "netstack/fuzz",
        name: "nat_translate",
        max_len: 1600,
    },
    Target {
        krate: "drivers/fuzz",
        name: "used_ring",
        max_len: 4096,
    },
    Target {
        krate: "drivers/fuzz",
        name: "used_ring_big",
        max_len: 4096,
    },
    Target {
        krate: "drivers/fuzz",
        name: "dd_ring",
        max_len: 4096,
    },
];

/// The `-seed` `cargo xtask fuzz` passes unless told otherwise (CI runs with it). With a fixed
/// seed and the same (fresh, empty) corpus directory libFuzzer tries the same inputs in the
/// same order, so a CI failure replays by hand and a run as long as CI's that passed here
/// passes there: CI is a gate, not a lottery. New inputs are found by long runs with
/// `--seed 0` (random), whose crashes become seeds.
pub const CI_SEED: u64 = 1;

/// The toolchain cargo-fuzz needs (`-Z sanitizer`).
const NIGHTLY: &str = "nightly";

fn cargo_nightly() -> Command {
    // The rustup proxy (not `$CARGO`, the stable cargo binary running xtask): `+nightly`.
    let mut c = Command::new("cargo");
    c.arg(format!("+{NIGHTLY}"));
    for v in ["RUSTC", "RUSTDOC", "RUSTC_WRAPPER", "RUSTFLAGS", "CARGO"] {
        c.env_remove(v);
    }
    c
}

/// `rustup toolchain install nightly --profile minimal` unless it is there, then
/// `cargo install cargo-fuzz --locked` unless `cargo +nightly fuzz --version` works.
pub fn ensure() -> Result<()> {
    let have_nightly = Command::new("rustup")
        .args(["run", NIGHTLY, "rustc", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !have_nightly {
        eprintln!("fuzz: installing the nightly toolchain (rustup toolchain install {NIGHTLY} --profile minimal)");
        let t = Instant::now();
        let ok = Command::new("rustup")
            .args(["toolchain", "install", NIGHTLY, "--profile", "minimal"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            bail!(
                "installing the nightly toolchain failed (cargo-fuzz needs it); run \
                 `rustup toolchain install {NIGHTLY} --profile minimal` on a machine that can \
                 reach the Rust distribution"
            );
        }
        eprintln!(
            "fuzz: nightly installed in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let have_fuzz = cargo_nightly()
        .args(["fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !have_fuzz {
        eprintln!("fuzz: installing cargo-fuzz (cargo install cargo-fuzz --locked)");
        let t = Instant::now();
        let ok = Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked"])
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            bail!(
                "installing cargo-fuzz failed; run `cargo install cargo-fuzz --locked` on a \
                 machine that can reach crates.io"
            );
        }
        eprintln!(
            "fuzz: cargo-fuzz installed in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Where the fuzz builds go.
fn target_dir(root: &Path) -> PathBuf {
    harness::qemu::target_dir(root).join("fuzz")
}

/// Build every fuzz crate, then run each target (or only `only`) for `seconds` from its seeds,
/// with libFuzzer's `-seed=seed` (0: random; see [`CI_SEED`]).
/// Returns `Ok(false)` if a target failed (a crash: the input is in its `artifacts/`).
pub fn run(root: &Path, seconds: u64, seed: u64, only: Option<&str>) -> Result<bool> {
    ensure()?;
    let targets: Vec<&Target> = TARGETS
        .iter()
        .filter(|t| only.is_none_or(|o| o == t.name))
        .collect();
    if targets.is_empty() {
        let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
        bail!("no fuzz target {only:?}; targets: {}", names.join(", "));
    }
    let tdir = target_dir(root);
    let mut crates: Vec<&str> = targets.iter().map(|t| t.krate).collect();
    crates.dedup();
    for k in &crates {
        let t = Instant::now();
        let ok = cargo_nightly()
            .current_dir(root.join(k))
            .args(["fuzz", "build"])
            .env("CARGO_TARGET_DIR", &tdir)
            .status()
            .with_context(|| format!("running cargo +nightly fuzz build in {k}"))?
            .success();
        if !ok {
            bail!("cargo +nightly fuzz build failed in {k}");
        }
        eprintln!("fuzz: built {k} in {:.0} s", t.elapsed().as_secs_f64());
    }
    let mut failed = Vec::new();
    let progress = harness::progress::Progress::new("fuzz", targets.len() as u64);
    for t in &targets {
        progress.phase(t.name);
        let dir = root.join(t.krate);
        // A fixed seed replays only from a fresh corpus: start from an empty one of its own
        // (the checked-in seeds are read as they are). A random seed grows `corpus/`.
        let corpus = if seed == 0 {
            dir.join("corpus").join(t.name)
        } else {
            let c = tdir.join(format!("corpus-seed{seed}")).join(t.name);
            if c.exists() {
                std::fs::remove_dir_all(&c).with_context(|| format!("emptying {}", c.display()))?;
            }
            c
        };
        let seeds = Path::new("seeds").join(t.name);
        std::fs::create_dir_all(&corpus)?;
        eprintln!(
            "fuzz: {} ({}) for {seconds} s, seed {}",
            t.name,
            t.krate,
            if seed == 0 {
                "random".to_string()
            } else {
                seed.to_string()
            }
        );
        let start = Instant::now();
        let ok = cargo_nightly()
            .current_dir(&dir)
            .args(["fuzz", "run", t.name])
            .arg(&corpus)
            .arg(&seeds)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={}", t.max_len))
            .arg(format!("-seed={seed}"))
            .args(["-timeout=20", "-print_final_stats=1"])
            .env("CARGO_TARGET_DIR", &tdir)
            .status()
            .with_context(|| format!("running cargo +nightly fuzz run {}", t.name))?
            .success();
        eprintln!(
            "fuzz: {} {} after {:.0} s",
            t.name,
            if ok { "passed" } else { "FAILED" },
            start.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(t.name);
        }
    }
    if !failed.is_empty() {
        eprintln!(
            "fuzz: FAILED: {} (the crashing input is in <crate>/artifacts/<target>/; replay it \
             with `cargo +nightly fuzz run <target> <file>` in the crate's folder)",
            failed.join(", ")
        );
    }
    Ok(failed.is_empty())
}
