//! `mode=nat`: one NAT44 translator (`netstack::nat::Nat`) per CPU that may forward, each over
//! its own storage carved from the zone at boot (sessions, mappings, buckets, the port
//! bitmap; `NatStorage::bytes`) and kept for the kernel's life, so the pages are outside the
//! boot free-page count that `quit` checks. A forwarding core takes its translator when it
//! starts (`appliance::StockNat`, `nf::builtin::take_nat`). Nothing is shared between cores (Click's shared
//! NAT table, click#247, is the bug this avoids).
//!
//! The topology (how many port pairs) is not known yet when the tables are built (before the
//! devices, for the page count), so every online CPU gets a translator; a CPU without a port
//! pair never takes its own.

use crate::dataplane::nf::builtin::{boot_nat_timeouts, install_nat, request_nat_timeouts};
use crate::dataplane::MAX_CORES;
use crate::mem::alloc_forever_slice;
use mm::Zone;
use netstack::config::nat::PAIRING_KEY;
use netstack::conntrack::table::Entry;
use netstack::nat::ports::{PortAlloc, PortPlan};
use netstack::nat::{Nat, NatConfig, NatError, NatStorage};
use netstack::{Config, Queues};

/// Why the NAT could not be built (the boot stops naming it).
#[derive(Debug)]
pub enum NatSetupError {
    /// No room for a core's storage (its bytes).
    Memory(usize),
    /// The configuration was refused.
    Config(NatError),
}

impl core::fmt::Display for NatSetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NatSetupError::Memory(b) => write!(
                f,
                "memory error: no room for a core's NAT tables ({} KiB): lower nat_sessions= or give the guest more memory (QEMU -m)",
                b.div_ceil(1024)
            ),
            NatSetupError::Config(e) => write!(f, "config error: nat: {e}"),
        }
    }
}

/// Build a translator for each of `cpus` CPUs from `cfg.nat` (`seed` keys the tables'
/// hashes); returns the bytes each one's storage takes.
///
/// # Errors
/// [`NatSetupError`]: a configuration `Nat::new` refuses (a static forward outside the pool,
/// …) or no memory.
pub fn build(cfg: &Config, zone: &Zone, cpus: usize, seed: u64) -> Result<usize, NatSetupError> {
    let s = &cfg.nat;
    let sessions = s.sessions as usize;
    let maps = sessions + s.forwards.len() + 1;
    let plan = PortPlan {
        lo: s.port_lo,
        hi: s.port_hi,
        cores: 1,
    };
    // With `queues=N` (N > 1) the N cores of the one port pair share the NAT's flows: core
    // `k` is NAT core `k` of N (its block of ports, the inside addresses its hash names), and
    // hands other cores' frames over. Otherwise each pair's core is a NAT of its own.
    let shared = match cfg.queues {
        Queues::Count(n) if n > 1 => u16::from(n),
        _ => 1,
    };
    let plan = PortPlan {
        cores: shared,
        ..plan
    };
    let words = (0..shared)
        .map(|c| PortAlloc::words_for(s.pool.len(), plan.block(c).1))
        .max()
        .unwrap_or(0);
    let bytes = NatStorage::bytes(sessions, s.forwards.len(), words);
    for k in 0..cpus.min(MAX_CORES).min(if shared > 1 {
        usize::from(shared)
    } else {
        usize::MAX
    }) {
        let mem = || NatSetupError::Memory(bytes);
        let st = NatStorage {
            sessions: alloc_forever_slice(zone, sessions, Entry::default()).ok_or_else(mem)?,
            session_buckets: alloc_forever_slice(zone, sessions.next_power_of_two(), 0)
                .ok_or_else(mem)?,
            maps: alloc_forever_slice(zone, maps, Entry::default()).ok_or_else(mem)?,
            map_buckets: alloc_forever_slice(zone, maps.next_power_of_two(), 0).ok_or_else(mem)?,
            ports: alloc_forever_slice(zone, words, 0).ok_or_else(mem)?,
        };
        let nc = NatConfig {
            pool: &s.pool,
            port_lo: s.port_lo,
            port_hi: s.port_hi,
            cores: shared,
            core: if shared > 1 { k as u16 } else { 0 },
            filtering: s.filtering,
            forwards: &s.forwards,
            timeouts: s.timeouts,
            key: PAIRING_KEY,
            seed: netstack::rng::Rng::new(seed ^ k as u64).next_u64(),
        };
        install_nat(k, Nat::new(&nc, st).map_err(NatSetupError::Config)?);
    }
    boot_nat_timeouts(s.timeouts);
    Ok(bytes)
}

/// The result of the last `PUT /nat_timeouts`, until the management plane takes it: the new
/// generation, or why the body was refused.
static PUT_RESULT: spin::Mutex<Option<Result<u64, &'static str>>> = spin::Mutex::new(None);

/// Management plane (boot CPU): a checked `PUT /nat_timeouts` body (one line
/// `EST,TRANS,UDP,ICMP`, `#` comments): every NAT core takes the timeouts from its next tick
/// (`nf::builtin::request_nat_timeouts`, as the console's `nat timeouts`); its pages go back
/// now. The result is ready at once ([`take_put_result`]).
pub fn submit_put(upload: crate::setup::fib::PutUpload) {
    let line = upload
        .text()
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let result = match line.map(netstack::config::nat::parse_timeouts) {
        Some(Ok(t)) => Ok(request_nat_timeouts(t, crate::dataplane::MAX_CORES)),
        Some(Err(expected)) => Err(expected),
        None => Err("one line EST,TRANS,UDP,ICMP (seconds)"),
    };
    *PUT_RESULT.lock() = Some(result);
}

/// The result of the submitted `PUT /nat_timeouts`, once.
pub fn take_put_result() -> Option<Result<u64, &'static str>> {
    PUT_RESULT.lock().take()
}
