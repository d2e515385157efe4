//! `cargo xtask lint`: the checks CI runs before the tests.
//!
//! Steps, in order; every step runs even when an earlier one failed, and each prints its name
//! (`== lint: NAME`) and, on failure, what failed:
//!
//! 1. `setup`: the rustup components `rustfmt` and `clippy` and the `x86_64-unknown-none`
//!    target, installed when missing (like [`setup::ensure_target`]);
//! 2. `fmt`: `cargo fmt --all --check` (every workspace crate, `unikernel` included), and the
//!    same over the appliance template (`template/`, a crate outside the workspace that users
//!    copy; its clippy is not run here: that would check the kernel's crates a second time with
//!    the template's flags);
//! 3. `clippy (host)`: `cargo clippy --all-targets --features unikernel/host-rig` over the
//!    default members (libraries, their tests, benches, the dataplane's host rig and its
//!    datapath benchmark, and the tools);
//! 4. `clippy (x86_64-unknown-none)`: `cargo clippy` on `unikernel` and the libraries it is
//!    built from (`mm`, `drivers`, `netstack`) for the bare-metal target, so their
//!    `cfg(target_os = "none")` code is checked too, with the fault image's feature
//!    (`unikernel/fault-inject`) so that `mm::fault`'s injecting variant is checked as well;
//! 5. `docs`: rustdoc of the public crates ([`DOC_CRATES`], their libraries, with
//!    `unikernel/host-rig` so that the host rig is documented too) with `RUSTDOCFLAGS=-D
//!    warnings`: a broken intra-doc link or a public item without docs (`missing_docs`, on in
//!    `mm`, `netstack` and `unikernel`) fails;
//! 6. `module cycles`: no crate's modules import each other in a circle ([`modgraph`]), except
//!    the cycles listed in [`KNOWN_CYCLES`], each of which must still exist;
//! 7. `nocall`: the stock kernel image (built here, as `cargo xtask build`) has no indirect call
//!    and no indirect jmp other than a jump table into the same function in its per-frame loop
//!    functions ([`harness::nocall`], issue 33).
//!
//! Both clippy steps pass [`CLIPPY_FLAGS`] (`-D warnings -D clippy::undocumented_unsafe_blocks`)
//! and `--keep-going`, so one crate's failure does not hide another's.

pub mod modgraph;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use harness::setup;
use modgraph::{canonical, cycle_text, Cycle, ModuleGraph};

/// Passed to clippy after `--` in both clippy steps.
pub const CLIPPY_FLAGS: &[&str] = &["-D", "warnings", "-D", "clippy::undocumented_unsafe_blocks"];

/// Import cycles that exist today and are being removed (issue 11): `CRATE: a -> b -> a`, as the
/// `module cycles` step prints them (any rotation). Lint fails on a cycle not listed here and on
/// a listed one that no longer exists, so delete each line when its cycle goes; the list's goal
/// is to be empty.
pub const KNOWN_CYCLES: &[&str] = &[];

/// The crates whose rustdoc the `docs` step builds: the ones an NF's author uses.
pub const DOC_CRATES: &[&str] = &["mm", "drivers", "netstack", "unikernel"];

/// The rustup components lint runs.
pub const COMPONENTS: &[&str] = &["rustfmt", "clippy"];

/// The steps, for `cargo xtask lint --only STEP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// rustup components and target.
    Setup,
    /// `cargo fmt --all --check`.
    Fmt,
    /// clippy over the default members, all targets.
    ClippyHost,
    /// clippy on unikernel, mm, drivers, netstack for x86_64-unknown-none.
    ClippyMetal,
    /// rustdoc of the public crates, warnings denied.
    Docs,
    /// The module import-cycle check.
    Cycles,
    /// No indirect call in the stock image's per-frame loops (`harness::nocall`).
    Nocall,
}

/// Runs the steps `only` (every step when empty) from the workspace root `root`; `Ok(true)`
/// when all passed.
pub fn run(root: &Path, only: &[Step]) -> Result<bool> {
    let wanted = |s: Step| only.is_empty() || only.contains(&s);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let cargo = |args: &[&str]| {
        let mut c = Command::new(&cargo);
        c.current_dir(root).args(args);
        c
    };
    let mut failed: Vec<String> = Vec::new();
    let mut step = |which: Step, name: &str, f: &mut dyn FnMut() -> Result<()>| {
        if !wanted(which) {
            return;
        }
        eprintln!("== lint: {name}");
        if let Err(e) = f() {
            eprintln!("lint: FAILED: {name}: {e:#}");
            failed.push(name.to_string());
        }
    };

    step(Step::Setup, "setup", &mut || {
        for c in COMPONENTS {
            setup::ensure_component(c)?;
        }
        setup::ensure_target()
    });
    step(Step::Fmt, "fmt", &mut || {
        let workspace = status(
            cargo(&["fmt", "--all", "--check"]),
            "`cargo fmt --all --check` failed: unformatted code (the diff is above; run \
             `cargo fmt --all`) or a file rustfmt cannot parse (its error is above)",
        );
        let template = status(
            cargo(&["fmt", "--check", "--manifest-path", "template/Cargo.toml"]),
            "`cargo fmt --check --manifest-path template/Cargo.toml` failed: the appliance \
             template is unformatted (the diff is above; run `cargo fmt --manifest-path \
             template/Cargo.toml`)",
        );
        workspace.and(template)
    });
    // `unikernel/host-rig` too: the datapath benchmark (`unikernel/benches/datapath.rs`)
    // requires it, and without it `--all-targets` skips that bench (it once stopped building
    // unnoticed).
    let mut host = vec![
        "clippy",
        "--keep-going",
        "--all-targets",
        "--features",
        "unikernel/host-rig",
        "--",
    ];
    host.extend(CLIPPY_FLAGS);
    step(Step::ClippyHost, "clippy (host)", &mut || {
        status(
            cargo(&host),
            &format!("`cargo {}` reported the problems above", host.join(" ")),
        )
    });
    let mut metal = vec!["clippy", "--keep-going", "--target", setup::TARGET];
    for p in ["unikernel", "mm", "drivers", "netstack"] {
        metal.extend(["-p", p]);
    }
    // The fault image's variant here (`mm::fault`'s injecting half); the host step checks the
    // release variant of the same code.
    metal.extend(["--features", "unikernel/fault-inject"]);
    metal.push("--");
    metal.extend(CLIPPY_FLAGS);
    step(
        Step::ClippyMetal,
        "clippy (x86_64-unknown-none)",
        &mut || {
            status(
                cargo(&metal),
                &format!("`cargo {}` reported the problems above", metal.join(" ")),
            )
        },
    );
    let mut docs = vec![
        "doc",
        "--no-deps",
        "--lib",
        "--features",
        "unikernel/host-rig",
    ];
    for p in DOC_CRATES {
        docs.extend(["-p", p]);
    }
    step(Step::Docs, "docs", &mut || {
        let mut c = cargo(&docs);
        c.env("RUSTDOCFLAGS", "-D warnings");
        status(
            c,
            &format!(
                "`RUSTDOCFLAGS=\"-D warnings\" cargo {}` reported the problems above",
                docs.join(" ")
            ),
        )
    });
    step(Step::Cycles, "module cycles", &mut || {
        let crates = crate_roots(cargo(&["metadata", "--no-deps", "--format-version", "1"]))?;
        let mut found = Vec::new();
        for (label, src) in &crates {
            let src = src.strip_prefix(root).unwrap_or(src);
            let g = modgraph::from_disk(root, src)
                .with_context(|| format!("reading the modules of {label}"))?;
            for m in &g.missing {
                eprintln!("lint: note: {label}: module file not found: {m}");
            }
            found.push((label.clone(), g));
        }
        let report = check_cycles(&found, KNOWN_CYCLES)?;
        eprint!("{}", report.text);
        if !report.ok {
            bail!("{}", report.summary);
        }
        Ok(())
    });

    step(Step::Nocall, "nocall", &mut || {
        let image = harness::qemu::build_image()?;
        let report = harness::nocall::check_image(&image, harness::nocall::LOOP_FUNCTIONS)?;
        eprint!("{}", report.text());
        if !report.ok() {
            bail!(
                "an indirect call or jump in a per-frame loop function of {} (OFFENDING lines \
                 above)",
                image.display()
            );
        }
        Ok(())
    });

    if failed.is_empty() {
        eprintln!("lint: all steps passed");
        Ok(true)
    } else {
        eprintln!("lint: FAILED steps: {}", failed.join(", "));
        Ok(false)
    }
}

fn status(mut c: Command, what: &str) -> Result<()> {
    let st = c.status().with_context(|| format!("running {c:?}"))?;
    if !st.success() {
        bail!("{what}");
    }
    Ok(())
}

/// `(label, root file)` of every lib and bin target of the workspace's packages, from
/// `cargo metadata --no-deps`. The label is the package name, with ` (bin NAME)` / ` (lib)`
/// added when the package has more than one such target.
fn crate_roots(mut metadata: Command) -> Result<Vec<(String, PathBuf)>> {
    let out = metadata.output().context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let mut roots = Vec::new();
    for pkg in v["packages"].as_array().into_iter().flatten() {
        let name = pkg["name"].as_str().unwrap_or("?");
        let targets: Vec<_> = pkg["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let kinds: Vec<&str> = t["kind"]
                    .as_array()?
                    .iter()
                    .filter_map(|k| k.as_str())
                    .collect();
                let kind = if kinds.contains(&"bin") {
                    "bin"
                } else if kinds
                    .iter()
                    .any(|k| ["lib", "rlib", "proc-macro"].contains(k))
                {
                    "lib"
                } else {
                    return None;
                };
                Some((kind, t["name"].as_str()?, t["src_path"].as_str()?))
            })
            .collect();
        for &(kind, tname, src) in &targets {
            let label = match (targets.len(), kind) {
                (1, _) => name.to_string(),
                (_, "bin") => format!("{name} (bin {tname})"),
                _ => format!("{name} (lib)"),
            };
            roots.push((label, PathBuf::from(src)));
        }
    }
    roots.sort();
    Ok(roots)
}

/// The outcome of [`check_cycles`].
#[derive(Debug)]
pub struct CycleReport {
    /// No cycle outside the allowlist and no stale allowlist entry.
    pub ok: bool,
    /// One line per cycle found (with the site of each of its edges) and per stale entry.
    pub text: String,
    /// One line for the failure message.
    pub summary: String,
}

/// Compares the cycles of `graphs` (label, graph) with the allowlist `known`
/// (`CRATE: a -> b -> a`).
pub fn check_cycles(graphs: &[(String, ModuleGraph)], known: &[&str]) -> Result<CycleReport> {
    let mut allowed: BTreeSet<(String, Cycle)> = BTreeSet::new();
    for k in known {
        allowed.insert(parse_known(k)?);
    }
    let mut text = String::new();
    let mut new = 0;
    let mut listed_now = 0;
    let mut seen: BTreeSet<(String, Cycle)> = BTreeSet::new();
    for (label, g) in graphs {
        let Some(cycles) = g.cycles() else {
            for t in g.tangles() {
                text.push_str(&format!(
                    "lint: {label}: more than {} import cycles among the modules {}\n",
                    modgraph::MAX_CYCLES,
                    t.join(", ")
                ));
            }
            new += 1;
            continue;
        };
        for c in cycles {
            let key = (label.clone(), c);
            let listed = allowed.contains(&key);
            text.push_str(&format!(
                "lint: {} import cycle {label}: {}\n",
                if listed {
                    "known (KNOWN_CYCLES)"
                } else {
                    "NEW"
                },
                cycle_text(&key.1)
            ));
            let c = &key.1;
            for (i, from) in c.iter().enumerate() {
                let to = &c[(i + 1) % c.len()];
                if let Some(site) = g.site(from, to) {
                    text.push_str(&format!("    {from} -> {to}: {site}\n"));
                }
            }
            if listed {
                listed_now += 1;
            } else {
                new += 1;
            }
            seen.insert(key);
        }
    }
    let stale: Vec<_> = allowed.difference(&seen).collect();
    for (label, c) in &stale {
        text.push_str(&format!(
            "lint: KNOWN_CYCLES lists `{label}: {}`, which no longer exists: delete the entry \
             (tools/xtask/src/lint.rs)\n",
            cycle_text(c)
        ));
    }
    let mut parts = Vec::new();
    if new > 0 {
        parts.push(format!(
            "{new} import cycle(s) not in KNOWN_CYCLES (break them: a lower module must not \
             name an upper one)"
        ));
    }
    if !stale.is_empty() {
        parts.push(format!(
            "{} KNOWN_CYCLES entr(y/ies) no longer found",
            stale.len()
        ));
    }
    if parts.is_empty() {
        text.push_str(&format!(
            "lint: module cycles: none besides the {listed_now} in KNOWN_CYCLES\n"
        ));
    }
    Ok(CycleReport {
        ok: parts.is_empty(),
        text,
        summary: parts.join("; "),
    })
}

/// `CRATE: a -> b -> a` (the closing module may be left out) as a canonical cycle.
pub fn parse_known(s: &str) -> Result<(String, Cycle)> {
    let Some((label, chain)) = s.rsplit_once(": ") else {
        bail!("KNOWN_CYCLES entry `{s}`: expected `CRATE: a -> b -> a`");
    };
    let mut mods: Vec<String> = chain.split("->").map(|m| m.trim().to_string()).collect();
    if mods.len() > 1 && mods.first() == mods.last() {
        mods.pop();
    }
    if mods.len() < 2 || mods.iter().any(String::is_empty) {
        bail!("KNOWN_CYCLES entry `{s}`: expected at least two modules, `CRATE: a -> b -> a`");
    }
    Ok((label.trim().to_string(), canonical(mods)))
}

#[cfg(test)]
mod tests;
