//! A core's per-port frame limits, set once at core set-up: the longest frame each port's
//! RX queues deliver ([`Nic::set_rx_frame_limit`]) and, outside router mode, the cap a
//! smaller-MTU port puts on what the other port's frames may send through it
//! ([`Core::tx_cap`], counted `over_mtu`); and the links, polled off the forwarding path: a
//! port whose link is down takes no frame (its cap 1 byte, drops counted `link_down`).

use super::mtu::{port_mtu, port_mtu_source, rx_frame_limit};
use super::percore::{Core, Platform};
use core::num::NonZeroUsize;
use drivers::nic::Nic;
use netstack::{DropReason, Mode};

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
        self.mtu_cap[other] = NonZeroUsize::new(egress_limit).filter(|_| capped);
        self.tx_cap[other] = self.mtu_cap[other];
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

    /// Every [`LINK_POLL_TICKS`] housekeeping ticks (every tick while a link is down): each
    /// port's link as its NIC reports it (`Nic::link_up`, a register read; virtio-net reports none). A port
    /// whose link went down gets a [`Core::tx_cap`] of 1 byte, so the poll iteration (the
    /// router's too) drops every frame bound for it and counts it `link_down` there, and what
    /// is staged for it is dropped at the flush, counted the same (the device would lose them
    /// unseen); back up, its MTU's cap returns. Each change is logged.
    pub(crate) fn poll_links(&mut self) {
        if self.link_poll_in > 0 {
            self.link_poll_in -= 1;
            return;
        }
        // While a link is down, every tick: forwarding resumes within 10 ms of its return.
        self.link_poll_in = if self.link_down.contains(&true) {
            0
        } else {
            LINK_POLL_TICKS
        };
        let mut changed = false;
        for p in 0..self.nics.len() {
            let Some(up) = self.nics[p].link_up() else {
                continue;
            };
            if self.link_down[p] == up {
                self.link_down[p] = !up;
                changed = true;
                let port = self.nics.len() * self.pair + p;
                if up {
                    log::info!("port {port}: link up: forwarding to it again");
                } else {
                    log::warn!(
                        "port {port}: link down: frames bound for it are dropped (link_down)"
                    );
                }
            }
        }
        if changed {
            for p in 0..self.tx_cap.len() {
                self.tx_cap[p] = if self.link_down[p] {
                    NonZeroUsize::new(1)
                } else {
                    self.mtu_cap[p]
                };
            }
            self.tx_capped = self.tx_cap.iter().any(Option::is_some);
            self.l2_divert = self.cfg.xcore || self.tx_capped;
        }
    }

    /// Why a frame over port `port`'s [`Core::tx_cap`] is dropped: its link is down, or it is
    /// longer than the port's MTU allows.
    pub(crate) fn cap_reason(&self, port: usize) -> DropReason {
        if self.link_down[port] {
            DropReason::LinkDown
        } else {
            DropReason::OverMtu
        }
    }
}

/// Housekeeping ticks (10 ms each) between link polls: 500 ms, four times as often as Linux's
/// e1000e watchdog (2 s), at one register read per port.
pub const LINK_POLL_TICKS: u8 = 49;
