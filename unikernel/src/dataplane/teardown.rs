//! The per-core side of `quit` ([`QuitPhase`]): each phase's work, the following cores' loop
//! and the boot CPU's lead.

use super::nf::Held;
use super::page::PageBuf;
use super::percore::{Core, Platform};
use super::quit::{QuitError, QuitPhase, QuitReport, TX_DRAIN_NS};
use drivers::nic::Nic;
use netstack::config::{MAX_BURST, PORTS};

impl<P: Platform> Core<P> {
    /// Run one phase on this core. Returns pages lost (phase [`QuitPhase::Destroy`] only).
    pub fn quit_phase(&mut self, phase: QuitPhase) -> u64 {
        if self.torn_down() {
            // Every phase ran already: the devices and pools are gone.
            return 0;
        }
        match phase {
            QuitPhase::Stop => {
                let deadline = P::uptime_ns() + TX_DRAIN_NS;
                while self.nics.iter().any(|n| n.tx_posted() > 0) && P::uptime_ns() < deadline {
                    self.tx_reap(true);
                }
                0
            }
            QuitPhase::Reset => {
                for nic in self.nics.iter_mut() {
                    nic.reset_device();
                }
                0
            }
            QuitPhase::TakeBack => {
                self.take_back();
                0
            }
            QuitPhase::HandOff => {
                let fabric = self.fabric;
                let ring = &fabric.handoff[self.pair];
                let pages = &mut self.pages;
                let mut give_back = |h: super::handoff::Handoff| {
                    for page in h.into_pages() {
                        pages.recycle(page);
                    }
                };
                while ring.pop_each(64, &mut give_back) > 0 {}
                // Core 0: frames handed over for the management plane (all their pages) and
                // not yet taken.
                if self.pair == 0 {
                    while fabric.mgmt.pop_each(64, &mut give_back) > 0 {}
                }
                0
            }
            QuitPhase::Destroy => self.destroy(),
        }
    }

    /// Phase 3 (every device was reset in phase 2): every page of this core's rings, staging,
    /// router queue and spare goes back to its pool.
    fn take_back(&mut self) {
        let pages = &mut self.pages;
        let mut give_back = |pfn| {
            // SAFETY: taken off a reset device's ring (below): ours.
            let page = unsafe { pages.adopt(pfn) };
            pages.recycle(page);
        };
        for nic in self.nics.iter_mut() {
            // SAFETY: phase 2 reset every device (its owner did, on this or the boot CPU) and
            // every core finished phase 2 before any started phase 3.
            unsafe { nic.take_pages(&mut give_back) };
        }
        let mut staged = heapless::Vec::<PageBuf, { 2 * MAX_BURST }>::new();
        self.tx.take_all(|p| {
            if let Err(p) = staged.push(p) {
                // Cannot happen (the stage holds at most 2 * MAX_BURST); never leak.
                core::mem::forget(p);
            }
        });
        for p in staged {
            self.pages.recycle(p);
        }
        if let Some(rs) = self.route.take() {
            // The neighbour queues' handles first (the routers forget them), then every frame
            // the stashes hold and the spare page.
            while rs.router.flush().is_some() {}
            while rs.router6.as_mut().and_then(|r6| r6.flush()).is_some() {}
            let mut back = |h: Held| {
                let Held { page, rest, .. } = h;
                self.pages.recycle(page);
                for pg in rest {
                    self.pages.recycle(pg);
                }
            };
            rs.held.take_each(&mut back);
            rs.held6.take_each(&mut back);
            if let Some(sp) = rs.spare.take() {
                back(sp);
            }
            self.route = Some(rs);
        }
    }

    /// Phase 5: destroy the pools (their rings drained first), drop the devices, drain the pcp
    /// list. Returns pages still in flight (lost: a bug).
    fn destroy(&mut self) -> u64 {
        let mut leaked = 0;
        let pg = &mut self.pages;
        for (i, pool) in pg.pools.iter_mut().enumerate() {
            if let Err(e) = pool.destroy(&mut pg.pcp, pg.zone, &mut pg.dma) {
                log::error!(
                    "page_pool {}: destroy: {e:?}; {} pages lost",
                    PORTS * self.pair + i,
                    pool.in_flight()
                );
                leaked += pool.in_flight();
            }
        }
        self.drop_nics();
        let pg = &mut self.pages;
        pg.pcp.drain_local_pages(pg.zone);
        leaked
    }

    /// A core other than the boot CPU, once [`super::quit::QuitSync::requested`]: go through every phase in
    /// step with the boot CPU, then publish the final counters (before reporting the last
    /// phase done: the boot CPU prints them as soon as it sees that). The caller halts.
    pub fn follow_quit(&mut self) {
        for phase in QuitPhase::ALL {
            while self.fabric.quit.current().is_none_or(|c| c < phase) {
                P::relax();
            }
            self.follow_phase(phase);
        }
    }

    /// A core other than the boot CPU: run `phase` and report it done (after the last phase,
    /// with the final counters published first).
    pub fn follow_phase(&mut self, phase: QuitPhase) {
        self.quit_leaked += self.quit_phase(phase);
        if phase == QuitPhase::LAST {
            self.publish(true, self.quit_leaked);
        }
        self.fabric.quit.finish(self.pair, phase);
    }

    /// The boot CPU's `quit`: drive every phase on every core (each waits at most `timeout_ns`
    /// for the others; `wake_others` wakes halted cores), then sum what leaked. The caller
    /// compares [`QuitReport::free_pages_now`] with the boot count.
    ///
    /// # Errors
    /// [`QuitError`] when a core does not follow in time or ends without final counters.
    pub fn lead_quit(
        &mut self,
        timeout_ns: u64,
        mut wake_others: impl FnMut(),
        mut step: impl FnMut(usize, QuitPhase),
    ) -> Result<QuitReport, QuitError> {
        let fabric = self.fabric;
        let q = &fabric.quit;
        let mut leaked = 0;
        for phase in QuitPhase::ALL {
            q.begin(phase);
            wake_others();
            leaked += self.quit_phase(phase);
            q.finish(self.pair, phase);
            let deadline = P::uptime_ns() + timeout_ns;
            for k in 1..fabric.cores() {
                while !q.finished(k, phase) {
                    if P::uptime_ns() > deadline {
                        return Err(QuitError::Timeout { core: k, phase });
                    }
                    step(k, phase);
                    P::relax();
                }
            }
        }
        for (k, s) in fabric.others() {
            match s {
                Some(s) if s.done => leaked += s.leaked,
                _ => return Err(QuitError::NoFinalCounters { core: k }),
            }
        }
        Ok(QuitReport {
            leaked,
            free_pages_now: self.pages.free_pages(),
        })
    }
}
