//! `mode=firewall`: one connection table (`netstack::conntrack::firewall::Firewall`) per CPU
//! that may forward, over storage carved from the zone at boot and kept for the kernel's life
//! (outside the boot free-page count `quit` checks), as `setup::nat` does for the NAT; a
//! forwarding core takes its own when it starts (`appliance::StockFirewall`).

use crate::dataplane::nf::builtin::install_firewall;
use crate::dataplane::MAX_CORES;
use crate::mem::alloc_forever_slice;
use mm::Zone;
use netstack::conntrack::firewall::Firewall;
use netstack::conntrack::table::{Entry, Table};
use netstack::Config;

/// Why the firewall's tables could not be built: no room for a core's (its bytes).
#[derive(Debug)]
pub struct FirewallSetupError(pub usize);

impl core::fmt::Display for FirewallSetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "memory error: no room for a core's connection table ({} KiB): lower fw_sessions= or give the guest more memory (QEMU -m)",
            self.0.div_ceil(1024)
        )
    }
}

/// Build a firewall for each of `cpus` CPUs from `cfg.fw` (`seed` keys the tables' hashes);
/// returns the bytes each one's table takes (64 an entry, 4 a bucket).
///
/// # Errors
/// [`FirewallSetupError`]: no memory.
pub fn build(
    cfg: &Config,
    zone: &Zone,
    cpus: usize,
    seed: u64,
) -> Result<usize, FirewallSetupError> {
    let n = cfg.fw.sessions as usize;
    let buckets = n.next_power_of_two();
    let bytes = n * core::mem::size_of::<Entry<()>>() + buckets * 4;
    for k in 0..cpus.min(MAX_CORES) {
        let entries =
            alloc_forever_slice(zone, n, Entry::default()).ok_or(FirewallSetupError(bytes))?;
        let b = alloc_forever_slice(zone, buckets, 0).ok_or(FirewallSetupError(bytes))?;
        let seed = netstack::rng::Rng::new(seed ^ k as u64).next_u64();
        // A power-of-two bucket count and 1..2^31 entries (`fw_sessions=` is at most 2^20):
        // `Table::new` accepts them.
        if let Ok(t) = Table::new(entries, b, seed, cfg.fw.timeouts) {
            install_firewall(k, Firewall::new(t));
        }
    }
    Ok(bytes)
}
