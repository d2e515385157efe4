//! Neighbour learning across cores for IPv6, as [`super::super::sync`] does it for IPv4: a
//! solicited Neighbor Advertisement lands on whichever core the NIC steers it to, not
//! necessarily the one that solicited; what that core's `Router6` learned goes to the others'.

use super::{NeighUpdate6, Router6};
use crate::router::neigh::Confirm;

impl<H: Copy, const N: usize, const Q: usize> Router6<'_, H, N, Q> {
    /// What the last solicited advertisement unicast to us given to [`Router6::process`] said
    /// (RFC 4861 §7.2.5: the target is at the advertised MAC), taken once, whether or not this
    /// router had an entry for it; `None` after any other frame. With one router per core, hand
    /// it to the other cores' [`Router6::learn`].
    pub fn take_learned(&mut self) -> Option<NeighUpdate6> {
        self.learned.take()
    }

    /// Apply what another core's router heard in a solicited advertisement: the entry for
    /// `u.ip` on `u.port`, if this router has one, becomes Reachable with `u.mac` (frames
    /// queued behind it are released by the next [`Router6::poll`]); none is created, as an
    /// unsolicited advertisement creates none here. Returns whether the table changed.
    pub fn learn(&mut self, u: NeighUpdate6, now_ns: u64) -> bool {
        let changed = usize::from(u.port) < self.nports
            && self
                .neigh
                .confirm(u.ip, u.port, u.mac, Confirm::Reply, now_ns);
        self.sync_adj6();
        changed
    }
}
