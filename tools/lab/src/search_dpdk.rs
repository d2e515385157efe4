//! testpmd as a device under test of `bench --search --peer dpdk` (issue 42 item 4): the DPDK
//! peer guest [`peer_dpdk`] boots for `bench --peer dpdk`, driven through the search's
//! [`Dut`] trait, so the NDR/PDR search and latency runs meet it as they meet Gannet.
//!
//! Pairs as `bench --peer`: Gannet `io` against testpmd `io`, Gannet `l2` against testpmd
//! `mac` ([`pair`]); testpmd has no router. Its drops are read between trials from `show fwd
//! stats all`: each port's `RX-dropped` (the PMD found no descriptor or mbuf) and
//! `TX-dropped` (the engine could not send), so its loss is attributed as Gannet's is.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, Result};

use harness::bench_search::Dut;
use harness::qemu::{Echo, Guest, GuestConfig};

use crate::peer_dpdk::{self, DpdkMode, DpdkPeer};

/// The QEMU CPU model testpmd needs (Debian's DPDK is built for SSE4.2; `qemu64` lacks it).
pub const CPU: &str = "max";

/// testpmd's engine for Gannet's `--append` (`mode=io`: `io`; `l2`, the default: `mac`).
///
/// # Errors
/// `mode=router` or `mode=acl`: testpmd forwards at layer 2 only.
pub fn pair(append: &str) -> Result<DpdkMode> {
    match append
        .split_whitespace()
        .find_map(|w| w.strip_prefix("mode="))
        .unwrap_or("l2")
    {
        "io" => Ok(DpdkMode::Io),
        "l2" => Ok(DpdkMode::Mac),
        m => bail!(
            "--peer dpdk pairs Gannet io with testpmd io and l2 with testpmd mac; testpmd has no \
             counterpart of mode={m} (--peer linux has IPv4 forwarding for mode=router)"
        ),
    }
}

/// testpmd in the DPDK peer guest, forwarding port 0 → port 1 with `mode`.
pub struct DpdkDut {
    /// The prepared kernel and initramfs ([`peer_dpdk::prepare`]).
    pub peer: DpdkPeer,
    pub mode: DpdkMode,
    /// Accelerator and `--mtu` as Gannet's run (`-cpu` is [`CPU`] unless Gannet's names one).
    pub like: GuestConfig,
    /// Numbers the console commands (testpmd's answers are delimited by a tagged comment).
    tags: AtomicUsize,
}

impl DpdkDut {
    /// testpmd with engine `mode`, booted like `like`.
    pub fn new(peer: DpdkPeer, mode: DpdkMode, like: GuestConfig) -> DpdkDut {
        DpdkDut {
            peer,
            mode,
            like,
            tags: AtomicUsize::new(0),
        }
    }
}

impl Dut for DpdkDut {
    fn name(&self) -> String {
        format!("testpmd-{}", self.mode.name())
    }

    fn guest_config(&self, dgram_dir: &Path) -> GuestConfig {
        let mut c = peer_dpdk::guest_config(
            &self.peer,
            dgram_dir,
            self.mode,
            self.like.accel,
            false,
            Some(self.like.cpu.clone().unwrap_or_else(|| CPU.into())),
            Echo::Off,
        );
        c.mtu = self.like.mtu.clone();
        c
    }

    fn wait_ready(&self, guest: &Guest) -> Result<()> {
        let ports = peer_dpdk::wait_ready(guest)?;
        eprintln!("search: testpmd probed {ports:?}");
        peer_dpdk::start(guest)
    }

    fn drops(&self, guest: &Guest) -> Result<Option<BTreeMap<String, u64>>> {
        let tag = format!("search-{}", self.tags.fetch_add(1, Ordering::Relaxed));
        let s = peer_dpdk::snapshot(guest, &tag)?;
        let mut m = BTreeMap::new();
        for (i, p) in s.ports.iter().enumerate() {
            m.insert(format!("port{i}.rx_dropped"), p.rx_dropped);
            m.insert(format!("port{i}.tx_dropped"), p.tx_dropped);
        }
        Ok(Some(m))
    }

    fn stop(&self, guest: &mut Guest) -> Result<()> {
        let log = peer_dpdk::console_log(self.mode);
        if let Err(e) = peer_dpdk::save_console(guest, &log) {
            eprintln!("search: warning: {e:#}");
        }
        if let Err(e) = peer_dpdk::stop_and_quit(guest) {
            eprintln!("search: warning: testpmd did not shut down cleanly; killed: {e:#}");
            guest.kill();
        }
        let _ = guest.wait_exit(Duration::from_secs(5));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gannet_modes_pair_with_testpmd_engines() {
        assert_eq!(pair("").unwrap(), DpdkMode::Mac);
        assert_eq!(pair("mode=io burst=8").unwrap(), DpdkMode::Io);
        assert_eq!(pair("mode=l2").unwrap(), DpdkMode::Mac);
        let e = pair("mode=router ip0=10.0.0.1/24").unwrap_err().to_string();
        assert!(e.contains("mode=router"), "{e}");
    }
}
