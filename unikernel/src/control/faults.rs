//! The fault image's controls (`mm::fault`, cargo feature `fault-inject`): `fault=` armed at
//! ready, the console's `fault` command (show, starve every page_pool for a while, all off),
//! the end of a starvation window (boot CPU, every 10 ms), and the `faults` STATS key.
//!
//! The release image accepts none of it: `fault=` stops boot with a named error, the console
//! command says the image has no fault injection, and STATS has no `faults` key.

use crate::arch::time::uptime_ns;
use crate::println;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use log::info;
use mm::fault::{self, Fault, FaultsDisabled};
use netstack::stats::FaultStats;
use netstack::Config;

/// Longest starvation window `fault dry MS` starts, ms: long enough for every RX ring to run
/// empty many times over, short of the generator's and the tests' timeouts.
pub const MAX_DRY_MS: u64 = 10_000;

/// End of the starvation window under way (uptime, ns); 0 when none.
static DRY_UNTIL_NS: AtomicU64 = AtomicU64::new(0);
/// Its start (uptime, ns).
static DRY_START_NS: AtomicU64 = AtomicU64::new(0);
/// Windows started.
static DRY_WINDOWS: AtomicU64 = AtomicU64::new(0);
/// Time starved, summed over the windows that ended, ms.
static DRY_MS: AtomicU64 = AtomicU64::new(0);

/// At boot: a `fault=` key needs the fault image.
///
/// # Errors
/// [`FaultsDisabled`] when `cfg` asks for a fault and this image was built without the
/// `fault-inject` feature.
pub fn check(cfg: &Config) -> Result<(), FaultsDisabled> {
    if cfg.faults.iter().any(|&n| n > 0) && !fault::ENABLED {
        return Err(FaultsDisabled);
    }
    Ok(())
}

/// Just before ready (after the RX rings were filled, so boot never meets a fault): start
/// injecting what `fault=` asked for, and say so.
pub fn arm(cfg: &Config) {
    for f in Fault::ALL {
        let every = cfg.faults[f as usize];
        if every > 0 {
            // `check` ran at boot: this is the fault image.
            let _ = fault::set_every(f, every);
            info!(
                "fault: injecting {} once every {every} opportunities",
                f.name()
            );
        }
    }
}

/// A console `fault` command (argument text after `fault`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultCmd {
    /// `fault`: the faults injected so far, by kind.
    Show,
    /// `fault dry MS`: every page_pool allocation fails for `MS` ms (1..=[`MAX_DRY_MS`]).
    Dry(u64),
    /// `fault off`: stop injecting (every kind, and any starvation window).
    Off,
}

impl FaultCmd {
    /// Parse the text after `fault` (trimmed). `Err` says what is accepted.
    pub fn parse(arg: &str) -> Result<FaultCmd, &'static str> {
        match arg
            .split_ascii_whitespace()
            .collect::<heapless::Vec<_, 3>>()
            .as_slice()
        {
            [] => Ok(FaultCmd::Show),
            ["off"] => Ok(FaultCmd::Off),
            ["dry", ms] => ms
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=MAX_DRY_MS).contains(ms))
                .map(FaultCmd::Dry)
                .ok_or("fault dry MS: MS in 1..=10000"),
            _ => Err("expected `fault`, `fault dry MS` or `fault off`"),
        }
    }
}

/// Run a console `fault` command (boot CPU).
pub fn run(cmd: FaultCmd) {
    if !fault::ENABLED {
        return println!("fault: {FaultsDisabled}");
    }
    match cmd {
        FaultCmd::Show => {
            let s = stats().unwrap_or_default();
            println!(
                "fault: injected rx_bad_id={} rx_bad_len={} tx_bad_id={} tx_ring_full={} bulk_short={} bulk_zero={} dma_map={} recycle_full={}; pool dry windows={} ms={}",
                s.rx_bad_id,
                s.rx_bad_len,
                s.tx_bad_id,
                s.tx_ring_full,
                s.bulk_short,
                s.bulk_zero,
                s.dma_map,
                s.recycle_full,
                s.pool_dry_windows,
                s.pool_dry_ms
            );
        }
        FaultCmd::Dry(ms) => {
            let now = uptime_ns();
            if DRY_UNTIL_NS.load(Relaxed) != 0 {
                return println!("fault: a pool dry window is under way");
            }
            DRY_START_NS.store(now, Relaxed);
            DRY_UNTIL_NS.store(now + ms * 1_000_000, Relaxed);
            DRY_WINDOWS.fetch_add(1, Relaxed);
            let _ = fault::set_pool_dry(true);
            println!("fault: every page_pool dry for {ms} ms");
        }
        FaultCmd::Off => {
            end_dry(uptime_ns());
            fault::all_off();
            println!("fault: off");
        }
    }
}

/// Boot CPU, every 10 ms: end the starvation window when its time is up.
#[inline]
pub fn tick() {
    let until = DRY_UNTIL_NS.load(Relaxed);
    if until != 0 {
        let now = uptime_ns();
        if now >= until {
            end_dry(now);
        }
    }
}

fn end_dry(now: u64) {
    if DRY_UNTIL_NS.swap(0, Relaxed) == 0 {
        return;
    }
    let _ = fault::set_pool_dry(false);
    let ms = (now - DRY_START_NS.load(Relaxed)) / 1_000_000;
    DRY_MS.fetch_add(ms, Relaxed);
    println!("fault: pool dry ended after {ms} ms");
}

/// The `faults` STATS value (`None` in the release image).
pub fn stats() -> Option<FaultStats> {
    if !fault::ENABLED {
        return None;
    }
    let n = fault::injected;
    Some(FaultStats {
        rx_bad_id: n(Fault::RxBadId),
        rx_bad_len: n(Fault::RxBadLen),
        tx_bad_id: n(Fault::TxBadId),
        tx_ring_full: n(Fault::TxRingFull),
        bulk_short: n(Fault::BulkShort),
        bulk_zero: n(Fault::BulkZero),
        dma_map: n(Fault::DmaMap),
        recycle_full: n(Fault::RecycleFull),
        pool_dry_windows: DRY_WINDOWS.load(Relaxed),
        pool_dry_ms: DRY_MS.load(Relaxed),
    })
}
