//! One kernel command line from two sources: the loader's (`-append`, `<cmdline>`) and one
//! laid over it (QEMU's fw_cfg file `opt/gannet/cmdline`, libvirt's `<sysinfo type='fwcfg'>`),
//! so a per-instance value replaces the image's default without a second parser: the result
//! goes through [`super::Config::parse`] like any command line.
//!
//! The rule: every key the overlay names replaces all of the base's tokens of that key (a
//! repeatable key such as `route=` is replaced as a set, not appended to); the base's other
//! tokens stay, in order, followed by the overlay's. A token that is not `key=value` is kept
//! as it is, for `Config::parse` to refuse by name.

/// Which source a token of a merged command line came from.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Source {
    /// The base (the loader's command line).
    Base,
    /// The overlay (fw_cfg).
    Overlay,
}

/// Why two command lines could not be merged.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct TooLong {
    /// The merged line's length in bytes.
    pub len: usize,
    /// The room there was.
    pub max: usize,
}

impl core::fmt::Display for TooLong {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "the merged command line is {} bytes, at most {}",
            self.len, self.max
        )
    }
}

/// The key of token `t` (`t` itself when it is not `key=value`).
fn key_of(t: &str) -> &str {
    t.split_once('=').map_or(t, |(k, _)| k)
}

/// `base` with `overlay` laid over it (the module rule), into `out`.
///
/// # Errors
/// [`TooLong`] when the result does not fit `out` (nothing is cut silently).
pub fn merge<const N: usize>(
    base: &str,
    overlay: &str,
    out: &mut heapless::String<N>,
) -> Result<(), TooLong> {
    out.clear();
    let mut len = 0;
    let kept = base.split_ascii_whitespace().filter(|t| {
        !overlay
            .split_ascii_whitespace()
            .any(|o| key_of(o) == key_of(t))
    });
    for t in kept.chain(overlay.split_ascii_whitespace()) {
        let sep = usize::from(len > 0);
        len += sep + t.len();
        if len > N {
            continue;
        }
        if sep == 1 {
            let _ = out.push(' ');
        }
        let _ = out.push_str(t);
    }
    if len > N {
        return Err(TooLong { len, max: N });
    }
    Ok(())
}

/// Where the key `key` of a line merged from `base` and `overlay` came from (`None`: in
/// neither).
pub fn source_of(key: &str, base: &str, overlay: &str) -> Option<Source> {
    let has = |line: &str| line.split_ascii_whitespace().any(|t| key_of(t) == key);
    if has(overlay) {
        Some(Source::Overlay)
    } else if has(base) {
        Some(Source::Base)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(base: &str, overlay: &str) -> heapless::String<64> {
        let mut out = heapless::String::new();
        merge(base, overlay, &mut out).unwrap();
        out
    }

    #[test]
    fn the_overlay_replaces_its_keys_and_keeps_the_rest() {
        assert_eq!(
            merged("mode=l2 burst=8 debug_exit=on", "mode=io"),
            "burst=8 debug_exit=on mode=io"
        );
        assert_eq!(merged("mode=l2", ""), "mode=l2");
        assert_eq!(merged("", "mode=io  burst=4"), "mode=io burst=4");
        // A repeatable key is replaced as a set.
        assert_eq!(
            merged(
                "route=1.0.0.0/8,10.0.0.2 route=2.0.0.0/8,10.0.0.2 log=info",
                "route=3.0.0.0/8,10.0.0.2"
            ),
            "log=info route=3.0.0.0/8,10.0.0.2"
        );
        // Not `key=value`: kept for `Config::parse` to name.
        assert_eq!(merged("mode=l2", "oops"), "mode=l2 oops");
        assert_eq!(
            source_of("mode", "mode=l2", "mode=io"),
            Some(Source::Overlay)
        );
        assert_eq!(source_of("burst", "burst=8", "mode=io"), Some(Source::Base));
        assert_eq!(source_of("log", "burst=8", "mode=io"), None);
    }

    #[test]
    fn a_result_too_long_is_an_error_not_a_cut() {
        let mut out: heapless::String<16> = heapless::String::new();
        assert_eq!(
            merge("mode=router burst=8", "log=debug", &mut out),
            Err(TooLong { len: 29, max: 16 })
        );
    }
}
