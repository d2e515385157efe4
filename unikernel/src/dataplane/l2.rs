//! `io` and `l2` forwarding with `xcore=on` on several cores: frames received on one port are
//! rewritten per [`netstack::forward_frame`] and handed to the next core, which sends them out
//! of its pair. (On one core's own pair, `io` and `l2` are the stock network functions of
//! [`super::nf::builtin`].)

use super::handoff::Handoff;
use super::page::frame_room;
use super::percore::{Core, Platform};
use drivers::nic::Nic;
use netstack::config::PORTS;
use netstack::{forward_frame, Verdict};

impl<P: Platform> Core<P> {
    /// [`Core::poll_once`] with `xcore=on` on several cores: each port's burst rewritten for
    /// the next core's pair and handed to that core, then the rest of the iteration.
    #[cold]
    #[inline(never)]
    pub(crate) fn poll_xcore(&mut self) -> usize {
        let t0 = P::cycles();
        let mut work = 0;
        for p in 0..PORTS {
            if self.nics[p].rx_pending() > 0 {
                work += self.rx_forward_xcore(p);
            }
        }
        self.poll_tail(t0, work)
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
            if self.tx_cap[dst_port].is_some_and(|cap| len > cap.get()) {
                let why = self.cap_reason(dst_port);
                self.counters[dst_port].drop(why);
                self.pages.recycle(page);
                continue;
            }
            match forward_frame(self.cfg.mode, page.frame_mut::<P::Nic>(len), out_mac, peer) {
                Verdict::Forward => {
                    let h = Handoff::one(page, len as u16, dst_port as u8);
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
            if !h.rest.is_empty() {
                // `xcore` hands over one-page frames only; never send a frame cut short.
                self.counters[port].drop(netstack::DropReason::TooBig);
                for page in h.into_pages() {
                    self.pages.recycle(page);
                }
                return;
            }
            self.stage_tx(port, h.page, usize::from(h.len).min(frame_room::<P::Nic>()));
        });
        self.flush_all();
        n
    }
}
