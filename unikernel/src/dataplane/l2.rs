//! `io` and `l2` forwarding: frames received on one port leave through the other, rewritten
//! per [`netstack::forward_frame`]; with `xcore=on`, through the next core's pair.

use super::handoff::Handoff;
use super::page::FRAME_ROOM;
use super::percore::{Core, Platform};
use netstack::config::PORTS;
use netstack::{forward_frame, Verdict};

impl<P: Platform> Core<P> {
    /// Receive a burst on local port `p` and send what survives out of the other port.
    /// Returns RX buffers completed.
    pub(crate) fn rx_forward(&mut self, p: usize) -> usize {
        if self.cfg.xcore && self.fabric.cores() > 1 {
            return self.rx_forward_xcore(p);
        }
        let q = 1 - p;
        let n = self.rx_burst(p);
        if n == 0 {
            return 0;
        }
        let (mode, out_mac, peer) = (self.cfg.mode, self.macs[q], self.cfg.peer[q]);
        for i in 0..n {
            let b = self.rx_scratch[i];
            let Some(mut page) = self.rx_accept(p, b) else {
                continue;
            };
            let len = b.len;
            match forward_frame(mode, page.frame_mut(len), out_mac, peer) {
                Verdict::Forward => self.stage_tx(q, page, len),
                Verdict::Drop(why) => {
                    self.counters[p].drop(why);
                    self.pages.recycle(page);
                }
            }
        }
        self.flush_tx(q);
        n
    }

    /// `xcore=on`: frames received on local port `p` leave through port `1 - p` of the next
    /// pair, which another core owns: rewrite them for that port and hand them to that core.
    fn rx_forward_xcore(&mut self, p: usize) -> usize {
        let n = self.rx_burst(p);
        if n == 0 {
            return 0;
        }
        let dst_core = (self.pair + 1) % self.fabric.cores();
        let dst_port = 1 - p;
        let out_mac = self.fabric.port_mac(PORTS * dst_core + dst_port);
        let peer = self.cfg.peer[dst_port];
        let mut handed = false;
        for i in 0..n {
            let b = self.rx_scratch[i];
            let Some(mut page) = self.rx_accept(p, b) else {
                continue;
            };
            let len = b.len;
            match forward_frame(self.cfg.mode, page.frame_mut(len), out_mac, peer) {
                Verdict::Forward => {
                    let h = Handoff {
                        page,
                        len: len as u16,
                        port: dst_port as u8,
                    };
                    match self.fabric.handoff[dst_core].push(h) {
                        Ok(()) => handed = true,
                        Err(h) => {
                            self.counters[p].drop(netstack::DropReason::TxRingFull);
                            self.pages.recycle(h.page);
                        }
                    }
                }
                Verdict::Drop(why) => {
                    self.counters[p].drop(why);
                    self.pages.recycle(page);
                }
            }
        }
        if handed {
            self.wake_if_sleeping(dst_core);
        }
        n
    }

    /// Transmit what other cores handed to this core (`xcore=on`). Returns frames taken.
    pub(crate) fn drain_handoff(&mut self) -> usize {
        let fabric = self.fabric;
        let ring = &fabric.handoff[self.pair];
        if ring.is_empty() {
            return 0;
        }
        let n = ring.pop_each(64, |h| {
            let port = usize::from(h.port).min(PORTS - 1);
            self.stage_tx(port, h.page, usize::from(h.len).min(FRAME_ROOM));
        });
        self.flush_all();
        n
    }
}
