//! A core's side of the management plane ([`MgmtSide`]): a leaf below `percore` (which holds
//! it) and `mgmt` (which works on it).

use netstack::stats::MgmtPath;

/// A core's side of the management plane.
pub(crate) struct MgmtSide<M> {
    /// The management plane, on the core that runs it (core 0).
    pub(crate) plane: Option<M>,
    /// On another core with a management address: its local port (frames for it are handed
    /// to core 0).
    pub(crate) remote: Option<usize>,
    /// Outside the router: the management address to steer off (local port, address);
    /// `None` on a core that has none, or in router mode (the router finds its own).
    pub(crate) steer: Option<(usize, core::net::Ipv4Addr)>,
    /// Its counters on this core.
    pub(crate) path: MgmtPath,
    /// Router mode, while a poll iteration lends the router's state to its network function:
    /// the plane's poll waits for it to come back (`/metrics` and STATS read the router's
    /// counters), and `due` records that one is waiting.
    pub(crate) wait: bool,
    /// A poll of the plane waited (see `wait`).
    pub(crate) due: bool,
}

impl<M> MgmtSide<M> {
    /// No management plane.
    pub(crate) const fn none() -> MgmtSide<M> {
        MgmtSide {
            plane: None,
            remote: None,
            steer: None,
            path: MgmtPath {
                handoff: 0,
                handoff_dropped: 0,
                linear: 0,
                linear_failed: 0,
            },
            wait: false,
            due: false,
        }
    }
}
