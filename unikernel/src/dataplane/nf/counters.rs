//! [`NfCounters`]: a core's counts of its network function's verdicts (a leaf: the core holds
//! them, the NF glue counts into them).

/// A core's counts of its NF's verdicts and of what the [`super::Ctx`] did with held frames (frames;
/// forwarded frames are the ports' `tx`).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct NfCounters {
    /// Frames dropped by [`super::Verdict::Drop`] or [`super::Ctx::drop`].
    pub dropped: u64,
    /// Frames kept by [`super::Verdict::Keep`].
    pub kept: u64,
    /// Frames given to the management plane ([`super::Verdict::ToMgmt`], [`super::Ctx::to_mgmt`]).
    pub to_mgmt: u64,
    /// Frames for the management plane on a port that has none (dropped).
    pub mgmt_unavailable: u64,
    /// Frames kept or for the management plane past [`MAX_TAKEN`](super::MAX_TAKEN) in one iteration (dropped).
    pub keep_overflow: u64,
    /// Frames [`super::Ctx::send`] was asked to send on a port the core does not have (dropped).
    pub bad_port: u64,
    /// Held frames sent through [`super::Ctx::send`].
    pub sent_held: u64,
}
