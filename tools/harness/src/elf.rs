//! Symbols of the kernel image (an ELF file): what a test needs to size a guest from the image
//! it boots instead of from a figure that goes stale when the image grows.

use std::path::Path;

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSymbol};

/// The address of the symbol `name` in the ELF image at `path` (e.g. `__kernel_end`, the end of
/// the image's `.bss` from the linker script).
///
/// # Errors
/// The file cannot be read or parsed, or it has no symbol `name`.
pub fn symbol_address(path: &Path, name: &str) -> Result<u64> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("parsing {} as an object file", path.display()))?;
    match file.symbols().find(|s| s.name() == Ok(name)) {
        Some(s) => Ok(s.address()),
        None => bail!("{}: no symbol {name}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let e = symbol_address(Path::new("/nonexistent/gannet"), "__kernel_end").unwrap_err();
        assert!(format!("{e:#}").contains("/nonexistent/gannet"), "{e:#}");
    }
}
