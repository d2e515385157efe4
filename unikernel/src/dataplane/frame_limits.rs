//! A core's per-port frame limits, set once at core set-up: the longest frame each port's
//! RX queues deliver ([`Nic::set_rx_frame_limit`]) and, outside router mode, the cap a
//! smaller-MTU port puts on what the other port's frames may send through it
//! ([`Core::tx_cap`], counted `over_mtu`).

use super::mtu::{port_mtu, port_mtu_source, rx_frame_limit};
use super::percore::{Core, Platform};
use core::num::NonZeroUsize;
use drivers::nic::Nic;
use netstack::Mode;

impl<P: Platform> Core<P> {
    /// Port `port`'s RX frame limit ([`Nic::set_rx_frame_limit`], [`rx_frame_limit`]) from its
    /// MTU ([`port_mtu`]), and outside the router the other port's [`Core::tx_cap`] when its
    /// MTU is smaller; with `announce`, the boot line naming both and the MTU's source. Returns
    /// the port's MTU.
    pub(super) fn set_rx_frame_limit(&mut self, port: usize, announce: bool) -> u16 {
        let mtu = port_mtu(self.cfg.mtu[port], &*self.nics[port]);
        let limit = rx_frame_limit(mtu, self.cfg.mode);
        self.nics[port].set_rx_frame_limit(limit);
        // Outside the router a frame leaves by the other port as it came, so one the other
        // port's MTU cannot carry is dropped at the burst, counted `over_mtu` on that port:
        // l2, io and every NF never send over the egress MTU. The router fragments or answers
        // Fragmentation Needed at its egress MTU instead.
        let other = 1 - port;
        let egress = port_mtu(self.cfg.mtu[other], &*self.nics[other]);
        let egress_limit = rx_frame_limit(egress, self.cfg.mode);
        let capped = self.cfg.mode != Mode::Router && egress_limit < limit;
        self.tx_cap[other] = NonZeroUsize::new(egress_limit).filter(|_| capped);
        if announce {
            let source = port_mtu_source(self.cfg.mtu[port], &*self.nics[port]);
            if capped {
                log::info!(
                    "port {port}: MTU {mtu} ({source}); frames up to {limit} bytes received, longer ones dropped (too_big); those over {egress_limit} bytes cannot leave by port {other} (MTU {egress}): dropped there (over_mtu)"
                );
            } else {
                log::info!(
                    "port {port}: MTU {mtu} ({source}); frames up to {limit} bytes received, longer ones dropped (too_big)"
                );
            }
        }
        mtu
    }
}
