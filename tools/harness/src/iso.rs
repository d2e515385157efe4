//! The GRUB rescue image (`cargo xtask iso`): the kernel ELF as `/boot/gannet` on an ISO 9660
//! image made by `grub-mkrescue`, bootable from a CD under BIOS (SeaBIOS, El Torito with GRUB
//! i386-pc) and UEFI (OVMF, GRUB x86_64-efi on the image's EFI system partition). GRUB loads the
//! kernel with `multiboot2` (the header beside the PVH note, `unikernel/src/arch/boot.rs`) and
//! the routes file, if any, with `module2`; the kernel command line is baked into `grub.cfg`,
//! since QEMU's `-append` only goes with `-kernel`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

use crate::setup;

/// Quote one command-line word for `grub.cfg` (GRUB script: sh-like words; single quotes keep
/// everything literal). GRUB joins the words after the kernel path with single spaces into the
/// multiboot2 command line (tag 1), so the kernel sees the words as given, whitespace-separated.
///
/// # Errors
/// A word containing a single quote (it could not be quoted this way; no kernel key needs one).
fn grub_word(w: &str) -> Result<String> {
    ensure!(
        !w.contains('\''),
        "kernel command line word {w:?}: a single quote cannot be passed through grub.cfg"
    );
    Ok(format!("'{w}'"))
}

/// The `grub.cfg` that boots `/boot/gannet` with `cmdline` at once (`timeout=0`), GRUB's own
/// console on the serial port (COM1, 115200: the kernel's console, so QEMU `-serial stdio`
/// shows both), the routes file as a `module2` when `routes` is set.
///
/// # Errors
/// See [`grub_word`].
pub fn grub_cfg(cmdline: &str, routes: bool) -> Result<String> {
    let mut words = Vec::new();
    for w in cmdline.split_whitespace() {
        words.push(grub_word(w)?);
    }
    let args = if words.is_empty() {
        String::new()
    } else {
        format!(" {}", words.join(" "))
    };
    let module = if routes {
        "module2 /boot/routes routes\n"
    } else {
        ""
    };
    Ok(format!(
        "set timeout=0\n\
         serial --unit=0 --speed=115200\n\
         terminal_input serial\n\
         terminal_output serial\n\
         multiboot2 /boot/gannet{args}\n\
         {module}boot\n"
    ))
}

/// Build the ISO at `out` from the kernel ELF `image`, with kernel command line `cmdline` and
/// (router mode) the routes file `routes` as the first boot module. Installs the GRUB tools
/// when missing ([`setup::ensure_iso_tools`]); runs `grub-mkrescue -o OUT DIR` on a staging
/// directory (about 0.5 s; the image is ~25 MB, mostly GRUB's modules for both platforms).
///
/// # Errors
/// Missing tools that cannot be installed, a command line `grub.cfg` cannot carry, I/O, or
/// `grub-mkrescue` failing (its output is in the error).
pub fn build(image: &Path, cmdline: &str, routes: Option<&Path>, out: &Path) -> Result<()> {
    setup::ensure_iso_tools()?;
    ensure!(
        image.is_file(),
        "kernel image {} not found (run `cargo xtask build`)",
        image.display()
    );
    let cfg = grub_cfg(cmdline, routes.is_some())?;
    let stage = tempfile::Builder::new()
        .prefix("gannet-iso")
        .tempdir()
        .context("creating the ISO staging directory")?;
    let grub = stage.path().join("boot/grub");
    std::fs::create_dir_all(&grub).with_context(|| format!("creating {}", grub.display()))?;
    std::fs::copy(image, stage.path().join("boot/gannet"))
        .with_context(|| format!("copying {}", image.display()))?;
    if let Some(r) = routes {
        std::fs::copy(r, stage.path().join("boot/routes"))
            .with_context(|| format!("copying the routes file {}", r.display()))?;
    }
    std::fs::write(grub.join("grub.cfg"), cfg).context("writing grub.cfg")?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let o = Command::new("grub-mkrescue")
        .arg("-o")
        .arg(out)
        .arg(stage.path())
        .output()
        .context("running grub-mkrescue")?;
    if !o.status.success() {
        bail!(
            "grub-mkrescue -o {} failed ({}): {}",
            out.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfg_quotes_words_and_adds_the_module() {
        let c = grub_cfg("mode=l2  peer0=02:00:00:00:00:02", true).unwrap();
        assert!(c.contains("multiboot2 /boot/gannet 'mode=l2' 'peer0=02:00:00:00:00:02'\n"));
        assert!(c.contains("module2 /boot/routes routes\nboot\n"));
        assert!(c.starts_with("set timeout=0\n"));
        let c = grub_cfg("", false).unwrap();
        assert!(c.contains("multiboot2 /boot/gannet\nboot\n"));
        assert!(grub_cfg("a='b'", false).is_err());
    }
}
