//! What a core keeps for its network function ([`NfSide`]): the counts of its verdicts
//! ([`NfCounters`]) and the frames taken in the current poll iteration. A leaf below both
//! [`super::percore`] (the core holds it) and [`super::nf`] (its glue fills it), so neither
//! names the other's module for it.

use drivers::nic::MAX_FRAME_PAGES;
use mm::Pfn;

/// A core's counts of its NF's verdicts and of what the [`super::nf::Ctx`] did with held
/// frames: `netstack::stats::NfCounters`, the one definition the `STATS` line and `/metrics`
/// carry too.
pub use netstack::stats::NfCounters;

/// Frames [`super::nf::Verdict::Keep`] or [`super::nf::Verdict::ToMgmt`] can take in one
/// poll iteration (both ports): 64. More are dropped, counted in
/// [`NfCounters::keep_overflow`]: kept frames are the slow path, and the list lives on the
/// core.
pub const MAX_TAKEN: usize = 64;

/// A frame the burst took for after it: its page (of local port `port`'s pool), its length,
/// and whether it goes to the management plane rather than to the NF.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Taken {
    pub(crate) pfn: Pfn,
    pub(crate) len: u16,
    pub(crate) port: u8,
    pub(crate) mgmt: bool,
    /// Its later pages' index in [`NfSide::rest`], or [`NO_REST`] (a frame of one page).
    pub(crate) rest: u8,
    /// The NF's mark (`Packet::set_mark`; 16 bits: the entry stays 16 bytes).
    pub(crate) mark: u16,
}

/// The frames taken in one poll iteration.
pub(crate) type TakenList = heapless::Vec<Taken, MAX_TAKEN>;

/// Frames of several pages (jumbo MTU) [`super::nf::Verdict::Keep`] or
/// [`super::nf::Verdict::ToMgmt`] can take in one poll iteration: [`MAX_TAKEN`], as many as
/// frames of one page (two default bursts of 32; their later pages wait in the core's list
/// beside the kept frames, 32 bytes each). More are dropped, counted in
/// [`NfCounters::keep_overflow`]. The router keeps every frame that waits for ARP, jumbo ones
/// too: with 8, bursts of 9,018-byte frames to an unresolved next hop lost 95 of 6,000 there
/// (`tests/tests/jumbo.rs`), where the neighbour queue's own limit should decide.
pub const MAX_TAKEN_MULTI: usize = MAX_TAKEN;

/// [`Taken::rest`] of a frame of one page.
pub(crate) const NO_REST: u8 = u8::MAX;

/// The later pages of a frame of several pages, in order.
pub(crate) type RestPages = heapless::Vec<Pfn, { MAX_FRAME_PAGES - 1 }>;

/// A core's side of its network function: the verdict counts and the frames taken in the
/// current poll iteration (empty between iterations).
#[derive(Debug, Default)]
pub(crate) struct NfSide {
    /// The counts.
    pub(crate) counters: NfCounters,
    /// Frames taken by [`super::nf::Verdict::Keep`] or [`super::nf::Verdict::ToMgmt`] in this
    /// iteration.
    pub(crate) taken: TakenList,
    /// The later pages of the frames of several pages in [`NfSide::taken`].
    pub(crate) rest: heapless::Vec<RestPages, MAX_TAKEN_MULTI>,
    /// The NF's own counters as last read (`Core::read_nf_counters`; every 10 ms and before
    /// `quit`), for the core's snapshot. Never touched per frame.
    pub(crate) own: netstack::stats::CounterValues,
    /// The counts of the instances this core's NF replaced (`Core::restart_nf`; gauges
    /// zeroed), added to every read of the running one's, so that a counter never goes back.
    /// Empty (no declaration) until the first restart.
    pub(crate) carry: netstack::stats::CounterValues,
}
