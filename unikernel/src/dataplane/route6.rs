//! Router mode, IPv6: frames of EtherType 0x86DD that [`RouterNf`] kept and the IPv6 fast
//! path did not take go to the core's `Router6` (`RouteState::router6`, with
//! `ip6_0=`/`ip6_1=`), and its actions are carried out through the [`Ctx`] as IPv4's are:
//! forwarded frames sent out of the egress port, echo replies sent back in place, Neighbor
//! Advertisements and ICMPv6 errors built in the spare page, frames waiting for Neighbor
//! Discovery held in `RouteState::held6` under the handle `Router6`'s queue keeps until
//! `Router6::poll` hands it back (with a Destination Unreachable, code 3, to the sender when
//! Neighbor Discovery failed).
//!
//! What a core's `Router6` learned from a solicited advertisement goes to the other cores'
//! (`Ctx::share_neigh6`, applied in `Core::router_sync`), as IPv4's ARP replies do: the
//! advertisement may land on another core than the one that solicited.
//!
//! With the management plane on a port over IPv6 too (`RouteState::mgmt6`), what `Router6`
//! gives the host on that port (`to_host`: TCP to the port's address) goes to smoltcp, and a
//! copy of each Neighbor Advertisement received there (smoltcp learns its peers only from the
//! answers to its own solicitations; `Router6` answers the solicitations for the address, as
//! the router answers ARP). Elsewhere `to_host` frames end here (consumed).
//!
//! Not (yet) here: frames of several pages on this path (counted `beyond_head`; the fast path
//! forwards them once the next hop is cached).

use super::nf::{Ctx, Held};
use super::percore::Platform;
use super::route::RouterNf;
use super::route_slow::{ensure_spare, hold, next_handle, send_spare, spare_room};
use netstack::config::PORTS;
use netstack::router::ipv6::Drop6;
use netstack::router::ndp;
use netstack::router::set_macs;
use netstack::router::v6::{Action6, Event6};

impl RouterNf<'_> {
    /// An IPv6 frame of several pages past the fast path: `Router6` takes frames whole, so it
    /// is counted `beyond_head` (the caller drops it).
    #[cold]
    pub(crate) fn refuse6(&mut self) {
        if let Some(r6) = self.rs.router6.as_mut() {
            r6.refuse(Drop6::BeyondHead);
        }
    }

    /// Route one IPv6 frame of one page through the core's `Router6`, then its pending work
    /// if it has some (the solicitation for a frame just queued).
    #[cold]
    #[inline(never)]
    pub(crate) fn route6<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, mut h: Held) {
        let (p, now) = (h.port(), ctx.now_ns());
        let rs = &mut *self.rs;
        let mgmt6 = rs.mgmt6 == Some(p);
        if mgmt6 && ndp::is_advertisement(h.bytes()) {
            ctx.copy_to_mgmt(&h);
        }
        ensure_spare(rs, ctx);
        let Some(r6) = rs.router6.as_mut() else {
            return ctx.drop(h);
        };
        let handle = next_handle(&rs.held6);
        let action = r6.process(p, h.bytes_mut(), handle, now, spare_room(&mut rs.spare));
        match action {
            Action6::Forward { port, len } => {
                h.set_len(len);
                if !ctx.send_whole(h, usize::from(port) % PORTS) {
                    r6.tx_dropped();
                }
            }
            Action6::Reply { port, len } => {
                h.set_len(len);
                ctx.send(h, usize::from(port));
            }
            // An ICMPv6 error about the frame (a drop `Router6` counted), or the advertisement
            // answering a solicitation (the solicitation consumed).
            Action6::Send { port, len, cause } => {
                send_spare(&mut rs.spare, ctx, port, len);
                match cause {
                    Some(_) => ctx.drop(h),
                    None => ctx.consume(h),
                }
            }
            Action6::Queued => hold(&mut rs.held6, ctx, h),
            // Counted `to_host`: for the management plane when it has the address.
            Action6::ToHost if mgmt6 => ctx.to_mgmt(h),
            Action6::ToHost => ctx.consume(h),
            // What a solicited advertisement taught goes to the other cores' routers (it may
            // answer another core's solicitation).
            Action6::Consumed => {
                if let Some(u) = r6.take_learned() {
                    let (sent, dropped) = ctx.share_neigh6(u);
                    rs.sync.neigh_sent += sent;
                    rs.sync.neigh_dropped += dropped;
                }
                ctx.consume(h);
            }
            Action6::Drop(_) => ctx.drop(h),
        }
        if rs.router6.as_ref().is_some_and(|r| r.needs_poll()) {
            self.events6(ctx);
        }
    }

    /// A held frame whose Neighbor Discovery failed (`h`, `len` bytes): the Destination
    /// Unreachable (code 3) `Router6` builds about it in the spare page, sent by the port the
    /// frame came in on.
    fn address_unreachable6<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, h: &Held, len: usize) {
        let rs = &mut *self.rs;
        ensure_spare(rs, ctx);
        let (Some(r6), Some(_)) = (rs.router6.as_mut(), rs.spare.as_ref()) else {
            return;
        };
        let frame = &h.head()[..len.min(h.head().len())];
        let now = ctx.now_ns();
        if let Some((port, n)) =
            r6.address_unreachable(h.port(), frame, now, spare_room(&mut rs.spare))
        {
            send_spare(&mut rs.spare, ctx, port, n);
        }
    }

    /// Run `Router6`'s pending work: solicitations to send, held frames whose neighbour
    /// answered (or that timed out). From the slow path and the core's 10 ms housekeeping.
    pub(crate) fn events6<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        let now = ctx.now_ns();
        loop {
            let rs = &mut *self.rs;
            ensure_spare(rs, ctx);
            let Some(r6) = rs.router6.as_mut() else {
                return;
            };
            match r6.poll(now, spare_room(&mut rs.spare)) {
                None => return,
                Some(Event6::Solicit { port, len } | Event6::Advertise { port, len }) => {
                    send_spare(&mut rs.spare, ctx, port, len);
                }
                Some(Event6::Transmit {
                    handle,
                    port,
                    len,
                    dst,
                    src,
                }) => {
                    // Nothing under the handle: the frame was dropped when it was queued.
                    let Some(mut h) = rs.held6.take(handle) else {
                        r6.tx_dropped();
                        continue;
                    };
                    set_macs(h.head_mut(), dst, src);
                    h.set_len(len);
                    if !ctx.send_whole(h, usize::from(port) % PORTS) {
                        r6.tx_dropped();
                    }
                }
                Some(Event6::Dropped {
                    handle,
                    unreachable,
                    ..
                }) => {
                    let Some(h) = rs.held6.take(handle) else {
                        continue;
                    };
                    if let Some(len) = unreachable {
                        self.address_unreachable6(ctx, &h, len);
                    }
                    ctx.drop(h);
                }
            }
        }
    }
}
