#![no_main]
//! Arbitrary text as the kernel command line: `Config::parse` never panics, errors are values
//! that format, and what it accepts keeps the README's rules.

use libfuzzer_sys::fuzz_target;
use netstack::config::{Config, ConfigError, Mode};
use std::fmt::Write;

fuzz_target!(|data: &[u8]| {
    // The guest hands the parser the command line as text (the PVH loader's bytes, checked as
    // UTF-8 first); lossy so that every input reaches the parser.
    let text = String::from_utf8_lossy(data);
    let r = Config::parse(&text);
    // Deterministic.
    assert_eq!(r, Config::parse(&text));
    match r {
        Ok(cfg) => {
            assert!((1..=256).contains(&cfg.burst));
            // `route` is router mode only, and router mode needs both addresses; `ip0`/`ip1`
            // are the management plane's in any mode, and its port has one.
            if cfg.mode == Mode::Router {
                assert!(cfg.ip.iter().all(Option::is_some), "{text:?}");
            } else {
                assert!(cfg.router.routes.is_empty(), "{text:?}");
            }
            if let Some(p) = cfg.mgmt_port() {
                assert!(cfg.ip[p].is_some(), "{text:?}");
            }
        }
        Err(e) => {
            let mut s = String::new();
            write!(s, "{e}").unwrap();
            assert!(!s.is_empty());
            // The management token is never shown.
            if let ConfigError::BadValue {
                key: "mgmt_token",
                value,
                ..
            } = e
            {
                assert_eq!(value, "<redacted>");
            }
        }
    }
});
