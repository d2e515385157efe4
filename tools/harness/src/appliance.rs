//! A user's appliance from Gannet's template (`template/`): copied to a directory of its own
//! (`cargo xtask new DIR`), its path dependencies pointed at this checkout, the workspace's
//! lock file beside it (the same dependency versions), then built into an image, and its tests
//! run on the host.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The files of the template, relative to `template/` (what [`new`] copies).
pub const TEMPLATE_FILES: &[&str] = &[
    "Cargo.toml",
    "build.rs",
    ".cargo/config.toml",
    "src/main.rs",
];

/// The image a built appliance crate at `dir` leaves in `target_dir`: its binary `appliance`.
pub fn image_path(target_dir: &Path) -> PathBuf {
    target_dir.join("x86_64-unknown-none/release/appliance")
}

/// Copy Gannet's template from the checkout at `root` to `dest` (which must not exist or be
/// empty): its files ([`TEMPLATE_FILES`]), the path dependencies rewritten to `root`'s crates,
/// and `root`'s `Cargo.lock`. Returns `dest`.
///
/// # Errors
/// `dest` is a non-empty directory, inside `root`'s workspace (cargo would take it for a
/// member), or a file cannot be read or written.
pub fn new(root: &Path, dest: &Path) -> Result<PathBuf> {
    if dest.exists()
        && dest
            .read_dir()
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        bail!("{}: exists and is not an empty directory", dest.display());
    }
    let root = root
        .canonicalize()
        .with_context(|| format!("resolving {}", root.display()))?;
    let existed = dest.exists();
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let abs = dest.canonicalize()?;
    if abs.starts_with(&root) && !abs.starts_with(root.join("target")) {
        // Refused: the (empty) directory made for it goes again.
        if !existed {
            let _ = std::fs::remove_dir(&abs);
        }
        bail!(
            "{}: inside Gannet's checkout {}: put the appliance outside it",
            abs.display(),
            root.display()
        );
    }
    for f in TEMPLATE_FILES {
        let from = root.join("template").join(f);
        let mut text = std::fs::read_to_string(&from)
            .with_context(|| format!("reading {}", from.display()))?;
        if *f == "Cargo.toml" {
            let crates = root.to_string_lossy();
            text = text.replace("path = \"../", &format!("path = \"{crates}/"));
        }
        let to = abs.join(f);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&to, text).with_context(|| format!("writing {}", to.display()))?;
    }
    std::fs::copy(root.join("Cargo.lock"), abs.join("Cargo.lock"))
        .context("copying the workspace's Cargo.lock")?;
    Ok(abs)
}

/// `cargo build --release` of the appliance crate at `dir` into `target_dir` (the workspace's
/// to reuse what it built: the same flags, profile and lock file make the same artefacts).
/// Returns the image.
///
/// # Errors
/// cargo cannot be run or the build fails (its output is on stderr).
pub fn build(dir: &Path, target_dir: &Path) -> Result<PathBuf> {
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir)
        // A parent cargo's RUSTFLAGS would override the template's target flags.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .with_context(|| format!("running cargo build in {}", dir.display()))?;
    if !status.success() {
        bail!(
            "cargo build --release in {} failed ({status})",
            dir.display()
        );
    }
    let image = image_path(target_dir);
    if !image.is_file() {
        bail!("{}: no image after the build", image.display());
    }
    Ok(image)
}

/// The host the template's tests run on (its `cargo test-host` alias): the image's target,
/// `x86_64-unknown-none`, cannot run them.
pub const HOST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// `cargo test --target` [`HOST_TARGET`] of the appliance crate at `dir` (what its `cargo
/// test-host` alias runs: the NF's unit tests and its tests on Gannet's host rig) into
/// `target_dir`. Returns the tests that passed, from libtest's `test result:` lines.
///
/// # Errors
/// cargo cannot be run, the build or a test fails (cargo's and the tests' output is in the
/// error), or no `test result:` line was printed.
pub fn test_host(dir: &Path, target_dir: &Path) -> Result<usize> {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["test", "--target", HOST_TARGET])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .with_context(|| format!("running cargo test in {}", dir.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "cargo test --target {HOST_TARGET} in {} failed ({}):\n{stdout}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    passed(&stdout).with_context(|| format!("no `test result:` line in:\n{stdout}"))
}

/// The tests passed in libtest output: the sum of `N passed` over its `test result: ok.`
/// lines; `None` without one.
pub fn passed(libtest: &str) -> Option<usize> {
    let counts: Vec<usize> = libtest
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split_once(" passed")?.0.parse().ok())
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination inside the checkout is refused, and the directory made for it removed.
    #[test]
    fn an_appliance_inside_the_checkout_is_refused_and_leaves_nothing() {
        let root = std::env::temp_dir().join(format!("gannet-new-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let dest = root.join("inside-app");
        let e = new(&root, &dest).unwrap_err().to_string();
        assert!(e.contains("put the appliance outside it"), "{e}");
        assert!(!dest.exists(), "{} left behind", dest.display());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn passed_sums_the_test_result_lines() {
        let out = "running 2 tests\ntest a ... ok\ntest b ... ok\n\n\
                   test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
                   finished in 0.05s\n\ntest result: ok. 0 passed; 0 failed; 0 ignored\n";
        assert_eq!(passed(out), Some(2));
        assert_eq!(passed("error: could not compile"), None);
    }
}
