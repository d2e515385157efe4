//! Fault injection for the fault-injection image (cargo feature `fault-inject`).
//!
//! The hot paths of the allocator, the page_pool and the virtio-net driver ask [`hit`] at the
//! places where a real machine can fail them: a DMA mapping that fails, `alloc_pages_bulk`
//! returning fewer pages or none, a TX ring with no room, a device writing a used element with
//! an out-of-range descriptor id or length, a page_pool cache that cannot keep a recycled
//! page; [`pool_dry`] starves every page_pool for a while. Each kind fires once every
//! [`set_every`] opportunities on average (a period drawn uniformly from `1..=2n-1`, xorshift64,
//! so faults do not line up with bursts) and counts itself in [`injected`]; the code that
//! handles it counts it again in its own counter, and the fault run (`cargo xtask faults`)
//! checks that the two agree, that no page leaked and that forwarding resumed.
//!
//! Without the feature, [`hit`] and [`pool_dry`] are `const fn`s returning `false`: every
//! `if fault::hit(..)` folds away and the release image's hot path has no extra branch.
//! This module is a leaf (atomics only); any crate may call it.

/// A kind of injected fault (the `fault=` kernel command-line key names them by [`Fault::name`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Fault {
    /// An RX used element whose id is out of range (the device wrote garbage): the driver skips
    /// it and counts `bad_token`. The buffer the device really completed is then never returned
    /// by the device: its slot stays posted until `quit` reclaims its page.
    RxBadId,
    /// An RX used element whose length is larger than the buffer posted (a page): the driver
    /// drops the buffer as `bad_desc` and re-posts the slot.
    RxBadLen,
    /// A TX used element whose id is out of range: skipped and counted `bad_token`; the page of
    /// the slot the device really completed stays in the ring's table until `quit`.
    TxBadId,
    /// The TX ring has no room for this burst (as if the device were slow): the burst's frames
    /// are dropped as `tx_ring_full`.
    TxRingFull,
    /// `alloc_pages_bulk` returns half of the pages asked for (rounded down, at least 1).
    BulkShort,
    /// `alloc_pages_bulk` returns no page.
    BulkZero,
    /// Mapping a page for DMA fails: the page_pool frees it and counts `refill_failed`.
    DmaMap,
    /// A page recycled to its page_pool finds the alloc cache "full": it is unmapped and freed
    /// to the allocator (`released`), so later refills go through the slow path (and meet the
    /// allocator faults above) even in steady state.
    RecycleFull,
}

/// Number of [`Fault`] kinds.
pub const FAULTS: usize = 8;

impl Fault {
    /// Every kind, in `repr` order.
    pub const ALL: [Fault; FAULTS] = [
        Fault::RxBadId,
        Fault::RxBadLen,
        Fault::TxBadId,
        Fault::TxRingFull,
        Fault::BulkShort,
        Fault::BulkZero,
        Fault::DmaMap,
        Fault::RecycleFull,
    ];

    /// The kind's name on the command line (`fault=NAME:N,…`), in `STATS` and in the console.
    pub const fn name(self) -> &'static str {
        match self {
            Fault::RxBadId => "rx_bad_id",
            Fault::RxBadLen => "rx_bad_len",
            Fault::TxBadId => "tx_bad_id",
            Fault::TxRingFull => "tx_ring_full",
            Fault::BulkShort => "bulk_short",
            Fault::BulkZero => "bulk_zero",
            Fault::DmaMap => "dma_map",
            Fault::RecycleFull => "recycle_full",
        }
    }

    /// The kind named `s` ([`Fault::name`]), if any.
    pub fn from_name(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// `true` when this build injects faults (the `fault-inject` feature).
pub const ENABLED: bool = cfg!(feature = "fault-inject");

/// [`set_every`] in an image built without the `fault-inject` feature.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FaultsDisabled;

impl core::fmt::Display for FaultsDisabled {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(
            "this image was built without fault injection (build the fault image: cargo xtask build --fault-inject)",
        )
    }
}

#[cfg(feature = "fault-inject")]
mod imp {
    use super::{Fault, FAULTS};
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: AtomicU64 = AtomicU64::new(0);
    /// Mean period per kind (opportunities per fault); 0 = off.
    static EVERY: [AtomicU64; FAULTS] = [ZERO; FAULTS];
    /// Opportunities left before the next fault of each kind.
    static LEFT: [AtomicU64; FAULTS] = [ZERO; FAULTS];
    static INJECTED: [AtomicU64; FAULTS] = [ZERO; FAULTS];
    /// xorshift64 state (shared; races only perturb the sequence).
    static SEED: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    static DRY: AtomicBool = AtomicBool::new(false);

    /// A period drawn uniformly from `1..=2*every-1` (mean `every`).
    fn period(every: u64) -> u64 {
        // xorshift64 (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14), 2003: 13, 7, 17).
        let mut x = SEED.load(Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        SEED.store(x, Relaxed);
        1 + x % (2 * every - 1).max(1)
    }

    #[inline]
    pub fn hit(f: Fault) -> bool {
        let i = f as usize;
        let every = EVERY[i].load(Relaxed);
        if every == 0 {
            return false;
        }
        if LEFT[i].fetch_sub(1, Relaxed) > 1 {
            return false;
        }
        // This opportunity is the one (or another core raced us to 0: it took the fault).
        LEFT[i].store(period(every), Relaxed);
        INJECTED[i].fetch_add(1, Relaxed);
        true
    }

    pub fn set_every(f: Fault, every: u64) {
        EVERY[f as usize].store(every, Relaxed);
        LEFT[f as usize].store(if every == 0 { 0 } else { period(every) }, Relaxed);
    }

    pub fn injected(f: Fault) -> u64 {
        INJECTED[f as usize].load(Relaxed)
    }

    #[inline]
    pub fn pool_dry() -> bool {
        DRY.load(Relaxed)
    }

    pub fn set_pool_dry(on: bool) {
        DRY.store(on, Relaxed);
    }
}

/// `true` if a fault of kind `f` is to be injected at this opportunity (and counts it in
/// [`injected`]). Always `false` without the `fault-inject` feature.
#[cfg(feature = "fault-inject")]
#[inline]
pub fn hit(f: Fault) -> bool {
    imp::hit(f)
}

/// `true` if a fault of kind `f` is to be injected at this opportunity (and counts it in
/// [`injected`]). Always `false` without the `fault-inject` feature.
#[cfg(not(feature = "fault-inject"))]
#[inline(always)]
pub const fn hit(_f: Fault) -> bool {
    false
}

/// `true` while every page_pool is starved ([`set_pool_dry`]): allocations fail as if the
/// allocator were empty. Always `false` without the `fault-inject` feature.
#[cfg(feature = "fault-inject")]
#[inline]
pub fn pool_dry() -> bool {
    imp::pool_dry()
}

/// `true` while every page_pool is starved ([`set_pool_dry`]): allocations fail as if the
/// allocator were empty. Always `false` without the `fault-inject` feature.
#[cfg(not(feature = "fault-inject"))]
#[inline(always)]
pub const fn pool_dry() -> bool {
    false
}

/// Inject faults of kind `f` once every `every` opportunities on average (0: never).
///
/// # Errors
/// [`FaultsDisabled`] without the `fault-inject` feature.
pub fn set_every(f: Fault, every: u64) -> Result<(), FaultsDisabled> {
    #[cfg(feature = "fault-inject")]
    {
        imp::set_every(f, every);
        Ok(())
    }
    #[cfg(not(feature = "fault-inject"))]
    {
        let _ = (f, every);
        Err(FaultsDisabled)
    }
}

/// Faults of kind `f` injected since boot.
pub fn injected(f: Fault) -> u64 {
    #[cfg(feature = "fault-inject")]
    {
        imp::injected(f)
    }
    #[cfg(not(feature = "fault-inject"))]
    {
        let _ = f;
        0
    }
}

/// Starve every page_pool (`true`) or end the starvation (`false`); see [`pool_dry`].
///
/// # Errors
/// [`FaultsDisabled`] without the `fault-inject` feature.
pub fn set_pool_dry(on: bool) -> Result<(), FaultsDisabled> {
    #[cfg(feature = "fault-inject")]
    {
        imp::set_pool_dry(on);
        Ok(())
    }
    #[cfg(not(feature = "fault-inject"))]
    {
        let _ = on;
        Err(FaultsDisabled)
    }
}

/// Turn every kind off and end any starvation (the fault run's clean phase).
pub fn all_off() {
    for f in Fault::ALL {
        let _ = set_every(f, 0);
    }
    let _ = set_pool_dry(false);
}

#[cfg(all(test, feature = "fault-inject"))]
mod tests {
    use super::*;

    #[test]
    fn a_kind_fires_at_its_mean_rate_and_counts_itself() {
        set_every(Fault::RecycleFull, 100).unwrap();
        let before = injected(Fault::RecycleFull);
        let fired = (0..100_000).filter(|_| hit(Fault::RecycleFull)).count() as u64;
        assert_eq!(injected(Fault::RecycleFull) - before, fired);
        assert!(
            (800..=1200).contains(&fired),
            "fired {fired} of 100000 at 1/100"
        );
        set_every(Fault::RecycleFull, 0).unwrap();
        assert!(!(0..1000).any(|_| hit(Fault::RecycleFull)));
        assert_eq!(Fault::from_name("recycle_full"), Some(Fault::RecycleFull));
        assert_eq!(Fault::from_name("nope"), None);
    }
}

#[cfg(all(test, not(feature = "fault-inject")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_nothing_fires_and_setting_is_refused() {
        assert_eq!(set_every(Fault::DmaMap, 1), Err(FaultsDisabled));
        assert!(!hit(Fault::DmaMap));
        assert!(!pool_dry());
        assert_eq!(injected(Fault::DmaMap), 0);
    }
}
