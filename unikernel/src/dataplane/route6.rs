//! Router mode, IPv6: frames of EtherType 0x86DD that [`super::route::RouterNf`] kept (its
//! fast path is IPv4's and refuses them) go to the core's `Router6` (`RouteState::router6`,
//! with `ip6_0=`/`ip6_1=`) from the slow path, and its actions are carried out as IPv4's
//! are: forwarded frames staged for the egress port, echo replies sent back in place, Neighbor
//! Advertisements and ICMPv6 errors built in the spare page, frames waiting for Neighbor
//! Discovery held by frame number until `Router6::poll` hands them back (with a Destination
//! Unreachable, code 3, to the sender when Neighbor Discovery failed).
//!
//! Not (yet) here: a fast path (every IPv6 frame takes this one), frames of several pages
//! (counted `beyond_head`), neighbour sync between cores (each core's `Router6` resolves
//! its own next hops), the management plane over IPv6 (`to_host` frames end there).

use super::page::{frame_room, PageBuf};
use super::percore::{Core, Platform, RouteState};
use netstack::config::PORTS;
use netstack::router::ipv6::Drop6;
use netstack::router::set_macs;
use netstack::router::v6::{Action6, Event6};
use netstack::wire::{ETHERTYPE, ETHERTYPE_IPV6};

/// Whether `frame` (at least its Ethernet header) is IPv6.
pub(crate) fn is_ipv6(frame: &[u8]) -> bool {
    frame.get(ETHERTYPE) == Some(&ETHERTYPE_IPV6.to_be_bytes()[..])
}

impl<P: Platform> Core<P> {
    /// Whether `rs` has an IPv6 router and `page` (a kept frame) is IPv6: then it is
    /// [`Core::route6`]'s.
    pub(crate) fn takes_ipv6(rs: &RouteState, page: &mut PageBuf) -> bool {
        rs.router6.is_some() && is_ipv6(page.frame_mut::<P::Nic>(frame_room::<P::Nic>()))
    }

    /// An IPv6 frame of several pages: `Router6` takes frames whole, so it is counted
    /// `beyond_head` and its pages recycled.
    #[cold]
    pub(crate) fn refuse6(&mut self, rs: &mut RouteState) {
        if let Some(r6) = rs.router6.as_mut() {
            r6.refuse(Drop6::BeyondHead);
        }
    }

    /// Route one IPv6 frame (one page, `len` bytes, received on local port `p`) through the
    /// core's `Router6`, then its pending work if it has some (the solicitation for a frame
    /// just queued).
    #[cold]
    #[inline(never)]
    pub(crate) fn route6(
        &mut self,
        rs: &mut RouteState,
        p: usize,
        mut page: PageBuf,
        len: usize,
        now: u64,
    ) {
        self.ensure_spare6(rs);
        let Some(r6) = rs.router6.as_mut() else {
            return self.pages.recycle(page);
        };
        let out = match rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<P::Nic>(),
            None => &mut [][..],
        };
        let handle = page.pfn();
        let action = r6.process(p, page.frame_mut::<P::Nic>(len), handle, now, out);
        match action {
            Action6::Forward { port, len } => self.send_routed6(rs, usize::from(port), page, len),
            Action6::Reply { port, len } => self.stage_tx(usize::from(port), page, len),
            Action6::Send { port, len, .. } => {
                let sp = rs
                    .spare
                    .take()
                    .expect("ND answer or ICMPv6 error built in the spare page");
                self.stage_tx(usize::from(port), sp, len);
                self.pages.recycle(page);
            }
            // The neighbour queue holds the page (by frame number) until `poll` hands it back.
            Action6::Queued => {
                let _ = page.into_raw();
            }
            // Counted `to_host`: the management plane has no IPv6.
            Action6::ToHost | Action6::Consumed | Action6::Drop(_) => self.pages.recycle(page),
        }
        if rs.router6.as_ref().is_some_and(|r| r.needs_poll()) {
            self.router6_events(rs, now);
        }
    }

    /// Keep a spare page (pool 0) for an advertisement, solicitation or ICMPv6 error.
    fn ensure_spare6(&mut self, rs: &mut RouteState) {
        if rs.spare.is_none() {
            rs.spare = self.pages.alloc(0);
        }
    }

    /// A frame `Router6` forwarded, staged for local `port` if its TX ring has a slot left;
    /// else dropped now, counted `tx_ring_full` on the port (`link_down` when its link is
    /// down) and `tx_dropped` by `Router6`.
    fn send_routed6(&mut self, rs: &mut RouteState, port: usize, page: PageBuf, len: usize) {
        let port = port % PORTS;
        if let Some(why) = self.tx_refusal(port, 1) {
            self.counters[port].drop(why);
            self.pages.recycle(page);
            if let Some(r6) = rs.router6.as_mut() {
                r6.tx_dropped();
            }
            return;
        }
        self.stage_tx(port, page, len);
    }

    /// A queued frame whose Neighbor Discovery failed (`page`, `len` bytes): the Destination
    /// Unreachable (code 3) `Router6` builds about it in the spare page, sent by the port the
    /// frame came in on (its page's pool is that RX ring's).
    fn address_unreachable6(
        &mut self,
        rs: &mut RouteState,
        page: &mut PageBuf,
        len: usize,
        now: u64,
    ) {
        let pool = page.pool() as usize;
        if pool / PORTS != self.pair {
            return;
        }
        self.ensure_spare6(rs);
        let (Some(r6), Some(sp)) = (rs.router6.as_mut(), rs.spare.as_mut()) else {
            return;
        };
        let frame = page.frame_mut::<P::Nic>(len.min(frame_room::<P::Nic>()));
        if let Some((port, n)) =
            r6.address_unreachable(pool % PORTS, frame, now, sp.room_mut::<P::Nic>())
        {
            let sp = rs.spare.take().expect("the error is in the spare page");
            self.stage_tx(usize::from(port), sp, n);
        }
    }

    /// Run `Router6`'s pending work: solicitations to send, queued frames whose neighbour
    /// answered (or that timed out). From the slow path and the core's 10 ms housekeeping.
    pub(crate) fn router6_events(&mut self, rs: &mut RouteState, now: u64) {
        loop {
            self.ensure_spare6(rs);
            let Some(r6) = rs.router6.as_mut() else {
                return;
            };
            let out = match rs.spare.as_mut() {
                Some(sp) => sp.room_mut::<P::Nic>(),
                None => &mut [][..],
            };
            match r6.poll(now, out) {
                None => return,
                Some(Event6::Solicit { port, len }) => {
                    let sp = rs
                        .spare
                        .take()
                        .expect("solicitation built in the spare page");
                    self.stage_tx(usize::from(port), sp, len);
                }
                Some(Event6::Transmit {
                    handle,
                    port,
                    len,
                    dst,
                    src,
                }) => {
                    // SAFETY: the router's queue held the page (given up at Action6::Queued)
                    // and hands it back now.
                    let mut page = unsafe { self.pages.adopt(handle) };
                    set_macs(page.frame_mut::<P::Nic>(len), dst, src);
                    self.send_routed6(rs, usize::from(port), page, len);
                }
                Some(Event6::Dropped {
                    handle,
                    unreachable,
                    ..
                }) => {
                    // SAFETY: as above: handed back by the router's queue.
                    let mut page = unsafe { self.pages.adopt(handle) };
                    if let Some(len) = unreachable {
                        self.address_unreachable6(rs, &mut page, len, now);
                    }
                    self.pages.recycle(page);
                }
            }
        }
    }
}
