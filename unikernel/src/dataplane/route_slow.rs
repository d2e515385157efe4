//! The router's IPv4 slow path, on the public NF API only: a frame [`RouterNf`] kept (ARP,
//! ICMP, options, the first frame to a next hop, a datagram to fragment, a jumbo frame) is a
//! [`Held`] routed by `Router::process_slow` and carried out through the [`Ctx`]: sent,
//! answered in place, answered with an ICMP error built in a spare page, fragmented into fresh
//! pages, given to the management plane, dropped or consumed (each counted by the router, and
//! by the NF counters as `sent_held`, `dropped`, `to_mgmt` or `consumed`), or held in the
//! core's [`Stash`] while ARP resolves its next hop, under the handle the router's neighbour
//! queue keeps. Then the router's events: ARP requests, held frames released (or dropped).

use super::held::{Held, Stash, StashHandle};
use super::nf::Ctx;
use super::percore::{Platform, RouteState, ROUTER_HELD};
use super::route::RouterNf;
use drivers::nic::MAX_FRAME_PAGES;
use netstack::config::PORTS;
use netstack::router::frag::Fragmenter;
use netstack::router::{set_macs, Action, Event};
use netstack::wire::{
    ARP_OPER, ARP_REQUEST, ARP_TPA, ETHERTYPE, ETHERTYPE_ARP, ETHERTYPE_IPV6, ETH_HDR_LEN,
};
use netstack::DropReason;

/// Most fragments [`RouterNf::fragment`] makes of one datagram: 64 (a 9,014-byte frame at the
/// 576-byte minimum MTU a host must accept, RFC 791, needs 17; at the absolute minimum of 68
/// bytes it would need 187: such a datagram is refused before any fragment is made, `too_big`
/// on the egress port).
const MAX_STAGED_FRAGMENTS: usize = 64;

/// The handle given to the router for a frame when its [`Stash`] is full: never a slot, so a
/// frame queued under it is dropped at once and its release finds nothing (`tx_dropped`).
pub(crate) const STASH_FULL: StashHandle = StashHandle::MAX;

/// The handle `stash` will give the next frame it holds ([`STASH_FULL`] when it is full).
pub(crate) fn next_handle(stash: &Stash<ROUTER_HELD>) -> StashHandle {
    stash.next_handle().unwrap_or(STASH_FULL)
}

/// Hold `h`, which the router just queued: in `stash` (under the handle [`next_handle`] gave),
/// or dropped when it is full (the router's release of [`STASH_FULL`] then finds nothing).
pub(crate) fn hold<P: Platform>(stash: &mut Stash<ROUTER_HELD>, ctx: &mut Ctx<'_, P>, h: Held) {
    if let Err(h) = stash.insert(h) {
        ctx.drop(h);
    }
}

/// Keep a spare page (from pool 0) for an ICMP error, an ARP request or an IPv6 answer.
pub(crate) fn ensure_spare<P: Platform>(rs: &mut RouteState, ctx: &mut Ctx<'_, P>) {
    if rs.spare.is_none() {
        rs.spare = ctx.alloc(0);
    }
}

/// The spare page's room to build a frame in (empty without one: the router counts
/// `no_buffer`).
pub(crate) fn spare_room(spare: &mut Option<Held>) -> &mut [u8] {
    match spare {
        Some(sp) => {
            let room = sp.room();
            sp.set_len(room)
        }
        None => &mut [][..],
    }
}

/// Send the first `len` bytes of the spare page (what the router just built in it) out of
/// local port `port`.
pub(crate) fn send_spare<P: Platform>(
    spare: &mut Option<Held>,
    ctx: &mut Ctx<'_, P>,
    port: u8,
    len: usize,
) {
    if let Some(mut sp) = spare.take() {
        sp.set_len(len);
        ctx.send(sp, usize::from(port));
    }
}

impl RouterNf<'_> {
    /// A frame kept by `process` (not a hairpin): IPv6 to the IPv6 router when there is one
    /// (`route6`; it takes frames of one page, a longer one is counted `beyond_head`), else
    /// IPv4's slow path. Out of line: [`RouterNf`]'s `end_of_burst` loop stays the IPv6 fast
    /// path's.
    #[cold]
    #[inline(never)]
    pub(crate) fn route_kept<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, h: Held) {
        if self.rs.router6.is_some() && is_ipv6(h.head()) {
            if h.pages() == 1 {
                return self.route6(ctx, h);
            }
            self.refuse6();
            return ctx.drop(h);
        }
        if h.pages() == 1 {
            self.route_slow(ctx, h);
        } else {
            self.route_slow_multi(ctx, h);
        }
    }

    /// Route one frame of one page the fast path did not take: the management plane's copy
    /// of ARP, the spare page for an ICMP error, the router's full path.
    #[cold]
    #[inline(never)]
    fn route_slow<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, mut h: Held) {
        let (p, now) = (h.port(), ctx.now_ns());
        // smoltcp learns neighbours only from ARP: let it see the ARP frames too, but for the
        // requests for the port's address, which the router answers (smoltcp would answer
        // them a second time; it learns its peers from the replies to its own requests).
        if h.bytes().get(ETHERTYPE) == Some(&ETHERTYPE_ARP.to_be_bytes()[..])
            && !router_answers_arp(self.rs, p, h.bytes())
        {
            ctx.copy_to_mgmt(&h);
        }
        let rs = &mut *self.rs;
        ensure_spare(rs, ctx);
        let handle = next_handle(&rs.held);
        let action =
            rs.router
                .process_slow(p, h.bytes_mut(), handle, now, spare_room(&mut rs.spare));
        self.route_action(ctx, h, action);
    }

    /// A frame of several pages (a jumbo frame) past the fast path: `Router::process_slow_len`
    /// on its headers (all in the first page) with the spare page for an ICMP error. Forwarded
    /// as the same pages (one descriptor chain), fragmented into fresh pages when the egress
    /// MTU is smaller (DF clear), answered with an ICMP error (e.g. Fragmentation Needed, DF
    /// set), given to the management plane, dropped, or held whole while ARP resolves.
    #[cold]
    #[inline(never)]
    fn route_slow_multi<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, mut h: Held) {
        let (p, len, now) = (h.port(), h.len(), ctx.now_ns());
        let rs = &mut *self.rs;
        ensure_spare(rs, ctx);
        let handle = next_handle(&rs.held);
        let icmp = spare_room(&mut rs.spare);
        let action = rs
            .router
            .process_slow_len(p, h.head_mut(), len, handle, now, icmp);
        match action {
            // A reply is one page's business: a multi-page frame is dropped, counted.
            Action::Reply { .. } => {
                ctx.count_port_drop(p, DropReason::TooBig);
                ctx.drop(h);
            }
            action => self.route_action(ctx, h, action),
        }
    }

    /// Carry out the router's `action` for `h`.
    fn route_action<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>, mut h: Held, action: Action) {
        let rs = &mut *self.rs;
        if matches!(action, Action::Consumed | Action::Reply { .. }) {
            // What an ARP frame taught this core goes to the other cores' routers.
            if let Some(u) = rs.router.take_learned() {
                let (sent, dropped) = ctx.share_neigh(u);
                rs.sync.neigh_sent += sent;
                rs.sync.neigh_dropped += dropped;
            }
        }
        match action {
            Action::Forward { port, len } => {
                set_frame_len(&mut h, len);
                if !ctx.send_whole(h, usize::from(port) % PORTS) {
                    rs.router.tx_dropped(false);
                }
            }
            Action::Reply { port, len } => {
                h.set_len(len);
                ctx.send(h, usize::from(port));
            }
            Action::Icmp { port, len, .. } => {
                send_spare(&mut rs.spare, ctx, port, len);
                ctx.drop(h);
            }
            Action::Queued => hold(&mut rs.held, ctx, h),
            Action::ToHost => ctx.to_mgmt(h),
            Action::Consumed => ctx.consume(h),
            Action::Drop(_) => ctx.drop(h),
            // A datagram longer than the egress MTU (DF clear): fragments in fresh pages, sent
            // at once (or none of them); the datagram itself is done with.
            Action::Fragment { port, mtu } => {
                let sent = self.fragment(ctx, &h, port, mtu);
                ctx.consume(h);
                if !sent {
                    self.rs.router.tx_dropped(true);
                }
            }
        }
    }

    /// Fragment the datagram in `h` (its frame, already rewritten) for an egress `mtu` with
    /// `netstack::router::frag::Fragmenter` (RFC 791 §3.2, RFC 1812 §5.2.6) into fresh pages
    /// of the egress port's pool, all sent out of `port`, or none: the train is checked whole
    /// before the first fragment is made. Refused, each counted once on the egress port: a
    /// datagram the fragmenter refuses (malformed, MTU too small) or one of more than
    /// [`MAX_STAGED_FRAGMENTS`] fragments (`too_big`), too few pages for every fragment
    /// (`no_buffer`), a TX ring without a slot for every fragment beyond what is staged
    /// (`tx_ring_full`). Returns whether the train was staged.
    fn fragment<P: Platform>(
        &mut self,
        ctx: &mut Ctx<'_, P>,
        h: &Held,
        port: u8,
        mtu: u16,
    ) -> bool {
        let egress = usize::from(port) % PORTS;
        let segs: heapless::Vec<&[u8], MAX_FRAME_PAGES> = h.segments().collect();
        let mut frags = match Fragmenter::new(&segs, mtu) {
            Ok(f) if f.count() <= MAX_STAGED_FRAGMENTS => f,
            _ => {
                ctx.count_port_drop(egress, DropReason::TooBig);
                return false;
            }
        };
        let Some(mut made) = ctx.alloc_train::<MAX_STAGED_FRAGMENTS>(egress, frags.count()) else {
            return false;
        };
        let mut whole = true;
        for f in made.iter_mut() {
            let room = f.room();
            match frags.next_into(f.set_len(room)) {
                Ok(Some(n)) => {
                    f.set_len(n);
                }
                // The fragmenter's count said otherwise, or a fragment did not fit a page.
                Ok(None) | Err(_) => whole = false,
            }
        }
        if !whole {
            ctx.count_port_drop(egress, DropReason::TooBig);
            for f in made {
                ctx.free(f);
            }
            return false;
        }
        ctx.send_all(made, egress)
    }

    /// Run the router's pending work: ARP requests to send, held frames whose next hop
    /// resolved (sent, or fragmented for a smaller MTU) or that timed out (dropped).
    pub(crate) fn events<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        let now = ctx.now_ns();
        loop {
            let rs = &mut *self.rs;
            ensure_spare(rs, ctx);
            let ev = rs.router.poll(now, spare_room(&mut rs.spare));
            match ev {
                None => return,
                Some(Event::SendArp { port, len }) => send_spare(&mut rs.spare, ctx, port, len),
                Some(Event::Transmit {
                    handle,
                    port,
                    len,
                    dst,
                    src,
                }) => {
                    // Nothing under the handle: the frame was dropped when it was queued.
                    let Some(mut h) = rs.held.take(handle) else {
                        rs.router.tx_dropped(false);
                        continue;
                    };
                    set_macs(h.head_mut(), dst, src);
                    set_frame_len(&mut h, len);
                    if !ctx.send_whole(h, usize::from(port) % PORTS) {
                        rs.router.tx_dropped(false);
                    }
                }
                Some(Event::Fragment {
                    handle,
                    port,
                    dst,
                    src,
                    mtu,
                    ..
                }) => {
                    let Some(mut h) = rs.held.take(handle) else {
                        rs.router.tx_dropped(true);
                        continue;
                    };
                    set_macs(h.head_mut(), dst, src);
                    let sent = self.fragment(ctx, &h, port, mtu);
                    ctx.consume(h);
                    if !sent {
                        self.rs.router.tx_dropped(true);
                    }
                }
                Some(Event::Dropped { handle, .. }) => {
                    // Counted by the router (why: `neigh_timeout`, ...).
                    if let Some(h) = rs.held.take(handle) {
                        ctx.drop(h);
                    }
                }
            }
        }
    }
}

/// Set `h`'s length to `len` bytes, the router's (a frame of one page; a frame of several
/// keeps its pages and may only get shorter).
fn set_frame_len(h: &mut Held, len: usize) {
    if h.pages() == 1 {
        h.set_len(len);
    } else {
        h.len = len.min(h.len()) as u16;
    }
}

/// Whether `frame` (at least its Ethernet header) is IPv6.
fn is_ipv6(frame: &[u8]) -> bool {
    frame.get(ETHERTYPE) == Some(&ETHERTYPE_IPV6.to_be_bytes()[..])
}

/// Whether `frame` (ARP) is a request for port `p`'s address: the router answers it.
fn router_answers_arp(rs: &RouteState, p: usize, frame: &[u8]) -> bool {
    let arp = frame.get(ETH_HDR_LEN..).unwrap_or(&[]);
    let me = rs.router.ports().get(p).map(|c| c.addr.addr.octets());
    arp.get(ARP_OPER) == Some(&ARP_REQUEST.to_be_bytes()[..])
        && me.is_some_and(|me| arp.get(ARP_TPA) == Some(&me[..]))
}
