//! The router's IPv6 half (sans-IO, like [`super::Router`]): frames of EtherType 0x86DD from
//! the ports, in Linux's order — link layer, `ip6_rcv_core` ([`ipv6::validate`]), Hop-by-Hop
//! ([`ipv6::hop_by_hop`]), local delivery (Neighbor Discovery, echo, the host), then
//! `ip6_forward` ([`ipv6::dst_check`], the [`Poptrie`] lookup, [`ipv6::forward_check`]) and
//! next-hop resolution through the shared neighbour machine ([`NeighTable`] keyed by `u128`,
//! with IPv4's hostile-neighbour policy). Every frame ends in exactly one outcome of
//! [`Counters6`] (or waits in a neighbour queue).
//!
//! Each port has a global address with its prefix (`Port6::addr`) and a link-local address
//! made from its MAC (modified EUI-64, RFC 4291 Appendix A). The FIB holds the connected
//! prefixes ([`Router6::connected`]) and the static routes; its next-hop indices point into a
//! [`NextHop6`] table.
//!
//! Past ~800 lines because it is one sans-IO object whose entry points (`process`, `poll`,
//! `flush`) share the neighbour table, the next-hop cache (`v6::fast`) and the counters; the
//! fast path, the wire checks and Neighbor Discovery are in their own modules.

use super::fib6::{Poptrie, Route6};
use super::icmp::TokenBucket;
use super::icmp6::{build_error, checksum6, may_answer, ICMP6_HOP_LIMIT};
use super::ipv6::{
    self, classify, decrement_hop_limit, AddrClass6, Drop6, Egress6, Forward6, Icmp6Error, Ipv6Hdr,
};
use super::ndp::{self, NdMessage, NA_OVERRIDE, NA_ROUTER, NA_SOLICITED};
use super::neigh::{Confirm, NeighConfig, NeighEvent, NeighTable, Resolve};
use super::parse6::Ipv6Net;
use super::set_macs;
use super::sync::NeighUpdate6;
use crate::wire::{
    ETHERTYPE, ETHERTYPE_IPV6, ETH_DST, ETH_HDR_LEN, ETH_SRC, IPPROTO_ICMPV6, IPV6_DST,
    IPV6_HDR_LEN, IPV6_HOP_LIMIT, IPV6_MIN_MTU, IPV6_SRC,
};
use crate::MacAddr;
use fast::{Adj6, ADJ6_SLOTS, NO_ADJ6};

mod fast;
mod learn;
pub mod ra;

/// Ports an IPv6 router has at most.
pub const MAX_PORTS6: usize = 4;
/// ICMPv6 Echo Request and Reply (RFC 4443 §4).
const ECHO_REQUEST: u8 = 128;
const ECHO_REPLY: u8 = 129;
/// All-nodes and all-routers link-scope groups (RFC 4291 §2.7.1).
use super::ndp::ALL_NODES;
const ALL_ROUTERS: u128 = 0xff02 << 112 | 2;

/// One port's IPv6 configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port6 {
    /// The port's MAC.
    pub mac: MacAddr,
    /// Its global address and the connected prefix (`2001:db8:0:1::1/64`).
    pub addr: Ipv6Net,
    /// Its IPv6 MTU in bytes, at least 1,280 (RFC 8200 §5).
    pub mtu: u16,
}

/// Where a route leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextHop6 {
    /// A connected prefix: the destination itself is the neighbour.
    Connected {
        /// The port.
        port: u8,
    },
    /// Through a gateway on `port` (global, or link-local).
    Via {
        /// The port.
        port: u8,
        /// The gateway's address.
        gateway: u128,
    },
}

/// Why a router could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Router6Error {
    /// No ports, or more than [`MAX_PORTS6`].
    BadPortCount,
    /// A port MTU below 1,280 (RFC 8200 §5), naming the port.
    MtuBelowMinimum(usize),
    /// A port address that is not global unicast, or a /128 (no connected prefix).
    BadAddress(usize),
}

/// What to do with a frame ([`Router6::process`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action6 {
    /// Transmit `frame[..len]` on `port`, rewritten in place (MACs, hop limit).
    Forward {
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
    },
    /// Transmit `frame[..len]` on `port` (the input port): an echo reply written in place.
    Reply {
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
    },
    /// Transmit `out[..len]` on `port` (the input port) and recycle the frame: a Neighbor
    /// Advertisement answering it (`cause` `None`), or an ICMPv6 error about it (`cause` the
    /// drop it is counted under).
    Send {
        /// Output port.
        port: u8,
        /// Bytes of `out` to send.
        len: usize,
        /// The drop an error answers; `None` for an advertisement.
        cause: Option<Drop6>,
    },
    /// The frame waits for Neighbor Discovery: [`Router6::poll`] gives it back.
    Queued,
    /// For one of our addresses: hand it to the host.
    ToHost,
    /// A Neighbor Discovery message used or ignored: recycle it.
    Consumed,
    /// Recycle the frame; counted under the reason.
    Drop(Drop6),
}

/// Work from [`Router6::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event6<H> {
    /// Transmit `out[..len]` (a Neighbor Solicitation) on `port`.
    Solicit {
        /// Output port.
        port: u8,
        /// Bytes of `out` to send.
        len: usize,
    },
    /// Transmit `out[..len]` (a Router Advertisement, [`ra`]) on `port`.
    Advertise {
        /// Output port.
        port: u8,
        /// Bytes of `out` to send.
        len: usize,
    },
    /// A queued frame's neighbour is resolved: its MACs are `dst`/`src`; transmit `len` bytes
    /// on `port`. Counted as forwarded.
    Transmit {
        /// The frame's handle.
        handle: H,
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
        /// Destination MAC.
        dst: MacAddr,
        /// Source MAC.
        src: MacAddr,
    },
    /// A queued frame is dropped: recycle it.
    Dropped {
        /// The frame's handle.
        handle: H,
        /// Why.
        reason: Drop6,
        /// `Some(len)` when Neighbor Discovery for its next hop failed (RFC 4861 §7.2.2): its
        /// first `len` bytes go to [`Router6::address_unreachable`] (Destination Unreachable,
        /// code 3) before it is recycled. `None` for a frame evicted with its unresolved entry.
        unreachable: Option<usize>,
    },
}

/// Per-router IPv6 counters. Every frame given to [`Router6::process`] (or counted by
/// [`Router6::refuse`]) ends in exactly one of `forwarded`, `tx_dropped`, `echo_replies`,
/// `nd_answered`, `nd_consumed`, `to_host` or a drop reason, or is still queued:
/// [`Counters6::outcomes`] + [`Router6::queued_frames`] == `rx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters6 {
    /// Frames given to [`Router6::process`].
    pub rx: u64,
    /// Frames forwarded (at once or after resolution).
    pub forwarded: u64,
    /// Frames forwarded that the egress port dropped before its TX ring
    /// ([`Router6::tx_dropped`]; the port counts why).
    pub tx_dropped: u64,
    /// Echo requests to our addresses answered.
    pub echo_replies: u64,
    /// Neighbor Solicitations for our addresses answered with an advertisement.
    pub nd_answered: u64,
    /// Neighbor Discovery messages used (advertisements; Router Solicitations with `ra6=on`)
    /// or ignored (RS otherwise, RA, Redirect).
    pub nd_consumed: u64,
    /// Frames for our addresses handed to the host.
    pub to_host: u64,
    /// Frames dropped, indexed like [`Drop6::ALL`].
    pub drops: [u64; Drop6::COUNT],
    // Not frame outcomes:
    /// Frames that entered a neighbour queue.
    pub queued: u64,
    /// ICMPv6 errors built.
    pub icmp_sent: u64,
    /// ICMPv6 errors not sent because of the rate limit.
    pub icmp_rate_limited: u64,
    /// ICMPv6 errors RFC 4443 §2.4 (e) forbids.
    pub icmp_suppressed: u64,
    /// Answers not built because the caller's buffer was too small.
    pub no_buffer: u64,
    /// Neighbor Solicitations sent.
    pub ns_sent: u64,
    /// Router Advertisements sent (`ra6=on`).
    pub ra_sent: u64,
}

impl Counters6 {
    /// Drops counted under `why`.
    pub fn drops_for(&self, why: Drop6) -> u64 {
        self.drops[why as usize]
    }

    /// Frames that ended in an outcome.
    pub fn outcomes(&self) -> u64 {
        self.forwarded
            + self.tx_dropped
            + self.echo_replies
            + self.nd_answered
            + self.nd_consumed
            + self.to_host
            + self.drops.iter().sum::<u64>()
    }
}

impl core::ops::AddAssign<&Counters6> for Counters6 {
    /// Add another router's counters (one router per core: the router-wide totals).
    fn add_assign(&mut self, o: &Counters6) {
        self.rx += o.rx;
        self.forwarded += o.forwarded;
        self.tx_dropped += o.tx_dropped;
        self.echo_replies += o.echo_replies;
        self.nd_answered += o.nd_answered;
        self.nd_consumed += o.nd_consumed;
        self.to_host += o.to_host;
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
        self.queued += o.queued;
        self.icmp_sent += o.icmp_sent;
        self.icmp_rate_limited += o.icmp_rate_limited;
        self.icmp_suppressed += o.icmp_suppressed;
        self.no_buffer += o.no_buffer;
        self.ns_sent += o.ns_sent;
        self.ra_sent += o.ra_sent;
    }
}

/// The link-local address of a port with `mac` (modified EUI-64, RFC 4291 Appendix A).
pub fn link_local(mac: MacAddr) -> u128 {
    let m = mac.0;
    let iid = u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
    (0xfe80u128 << 112) | u128::from(iid)
}

/// The IPv6 router: `N` neighbour entries of `Q` queued frames each, handles `H`.
pub struct Router6<'a, H: Copy, const N: usize = 64, const Q: usize = 8> {
    ports: [Port6; MAX_PORTS6],
    link_local: [u128; MAX_PORTS6],
    /// Each port's Subnet-Router anycast address ([`Router6::is_anycast`]), or 0 (`::`, never
    /// a destination that gets this far) on a /127 link.
    anycast: [u128; MAX_PORTS6],
    nports: usize,
    fib: &'a Poptrie<'a>,
    nexthops: &'a [NextHop6],
    neigh: NeighTable<H, N, Q, u128>,
    bucket: TokenBucket,
    counters: Counters6,
    /// Next hops the fast path rewrites to ([`Router6::forward_fast`]).
    adj6: [Adj6; ADJ6_SLOTS],
    /// What the last solicited advertisement to us taught (`Router6::take_learned`).
    learned: Option<NeighUpdate6>,
    /// Router Advertisements, when on ([`Router6::with_ra`]).
    ra: Option<ra::RaState>,
}

impl<'a, H: Copy, const N: usize, const Q: usize> Router6<'a, H, N, Q> {
    /// A router over `ports` (port `i` is `ports[i]`) forwarding by `fib`, whose next-hop
    /// indices point into `nexthops` (an index past it is a missing route).
    ///
    /// # Errors
    /// [`Router6Error`] naming the bad port.
    pub fn new(
        ports: &[Port6],
        fib: &'a Poptrie<'a>,
        nexthops: &'a [NextHop6],
        neigh: NeighConfig,
        icmp: TokenBucket,
    ) -> Result<Self, Router6Error> {
        if ports.is_empty() || ports.len() > MAX_PORTS6 {
            return Err(Router6Error::BadPortCount);
        }
        let mut p = [ports[0]; MAX_PORTS6];
        let mut ll = [0; MAX_PORTS6];
        let mut anycast = [0; MAX_PORTS6];
        for (i, port) in ports.iter().enumerate() {
            if usize::from(port.mtu) < IPV6_MIN_MTU {
                return Err(Router6Error::MtuBelowMinimum(i));
            }
            if classify(port.addr.addr) != AddrClass6::Unicast || port.addr.len >= 128 {
                return Err(Router6Error::BadAddress(i));
            }
            p[i] = *port;
            ll[i] = link_local(port.mac);
            // RFC 4291 §2.6.1; none on a /127 link (RFC 6164 §5).
            if port.addr.len < 127 {
                anycast[i] = port.addr.addr & port.addr.mask();
            }
        }
        Ok(Router6 {
            ports: p,
            link_local: ll,
            anycast,
            nports: ports.len(),
            fib,
            nexthops,
            neigh: NeighTable::new(neigh),
            bucket: icmp,
            counters: Counters6::default(),
            adj6: [NO_ADJ6; ADJ6_SLOTS],
            learned: None,
            ra: None,
        })
    }

    /// The connected route of each port, next hop index `i` for port `i`, with the
    /// [`NextHop6::Connected`] entries a next-hop table starts with.
    pub fn connected(ports: &[Port6]) -> impl Iterator<Item = (Route6, NextHop6)> + '_ {
        ports.iter().enumerate().map(|(i, p)| {
            let n = Ipv6Net {
                addr: p.addr.addr & p.addr.mask(),
                len: p.addr.len,
            };
            (
                Route6 {
                    prefix: n.addr,
                    len: n.len,
                    nh: i as u32,
                },
                NextHop6::Connected { port: i as u8 },
            )
        })
    }

    /// The counters.
    pub fn counters(&self) -> &Counters6 {
        &self.counters
    }

    /// Frames waiting for Neighbor Discovery.
    pub fn queued_frames(&self) -> usize {
        self.neigh.queued()
    }

    /// Whether [`Router6::poll`] has work that does not wait for a timer (a solicitation due,
    /// queued frames whose neighbour answered).
    pub fn needs_poll(&self) -> bool {
        self.neigh.needs_poll()
    }

    /// A frame the caller could not give to [`Router6::process`] (e.g. one spread over
    /// several buffers: `process` takes a frame whole), counted as received and dropped for
    /// `why`.
    pub fn refuse(&mut self, why: Drop6) {
        self.counters.rx += 1;
        self.counters.drops[why as usize] += 1;
    }

    /// A frame this router counted `forwarded` that its egress port dropped before the TX
    /// ring: counted `tx_dropped` instead. The caller counts the reason on the port.
    pub fn tx_dropped(&mut self) {
        let c = &mut self.counters;
        c.forwarded = c.forwarded.saturating_sub(1);
        c.tx_dropped += 1;
    }

    /// Give back one queued frame (counted [`Drop6::NeighFlushed`]); call until `None` at
    /// shutdown.
    pub fn flush(&mut self) -> Option<H> {
        let h = self.neigh.flush();
        self.sync_adj6();
        let h = h?;
        self.counters.drops[Drop6::NeighFlushed as usize] += 1;
        Some(h)
    }

    /// Port `p`'s link-local address.
    pub fn link_local(&self, p: usize) -> u128 {
        self.link_local[p]
    }

    /// Processes one frame (`frame` whole, Ethernet header first) received on `in_port`:
    /// `handle` is kept when it is queued; answers are built in `out` (at least 1,294 bytes
    /// for an error quoting a full datagram; shorter answers are not built and counted
    /// `no_buffer`).
    pub fn process(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        handle: H,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action6 {
        self.counters.rx += 1;
        self.learned = None;
        let a = self.route(in_port, frame, handle, now_ns, out);
        self.sync_adj6();
        let c = &mut self.counters;
        match a {
            Action6::Forward { .. } => c.forwarded += 1,
            Action6::Reply { .. } => c.echo_replies += 1,
            Action6::Send { cause: None, .. } => c.nd_answered += 1,
            Action6::Send { cause: Some(d), .. } | Action6::Drop(d) => c.drops[d as usize] += 1,
            Action6::Queued => c.queued += 1,
            Action6::ToHost => c.to_host += 1,
            Action6::Consumed => c.nd_consumed += 1,
        }
        a
    }

    fn route(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        handle: H,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action6 {
        if frame.len() < ETH_HDR_LEN || in_port >= self.nports {
            return Action6::Drop(Drop6::Runt);
        }
        if frame[ETHERTYPE] != ETHERTYPE_IPV6.to_be_bytes() {
            return Action6::Drop(Drop6::BadVersion);
        }
        let l2_multicast = frame[ETH_DST.start] & 1 != 0;
        if !l2_multicast && frame[ETH_DST] != self.ports[in_port].mac.0 {
            return Action6::Drop(Drop6::NotForUs);
        }
        let ip_len = frame.len() - ETH_HDR_LEN;
        let h = match ipv6::validate(&frame[ETH_HDR_LEN..], ip_len) {
            Ok(h) => h,
            Err(d) => return Action6::Drop(d),
        };
        let hbh = match ipv6::hop_by_hop(&frame[ETH_HDR_LEN..], &h) {
            Ok(x) => x,
            Err(Ok(d)) => return Action6::Drop(d),
            Err(Err(e)) => return self.error(in_port, frame, &h, l2_multicast, e, now_ns, out),
        };
        if self.is_local(in_port, h.dst) {
            return self.local(in_port, frame, &h, hbh.len, now_ns, out);
        }
        if l2_multicast {
            return Action6::Drop(Drop6::NotForUs);
        }
        if let Err(d) = ipv6::dst_check(&h) {
            return Action6::Drop(d);
        }
        let nh = self
            .fib
            .lookup_index(h.dst)
            .and_then(|i| self.nexthops.get(i as usize).copied());
        let egress = nh.map(|n| {
            let port = match n {
                NextHop6::Connected { port } | NextHop6::Via { port, .. } => usize::from(port),
            };
            Egress6 {
                port,
                mtu: self.ports.get(port).map_or(0, |p| usize::from(p.mtu)),
            }
        });
        match ipv6::forward_check(&h, h.len(), in_port, egress) {
            Forward6::Forward => {}
            Forward6::Drop(d) => return Action6::Drop(d),
            Forward6::Error(e) => return self.error(in_port, frame, &h, false, e, now_ns, out),
        }
        let (port, neighbour) = match nh {
            Some(NextHop6::Connected { port }) => (port, h.dst),
            Some(NextHop6::Via { port, gateway }) => (port, gateway),
            None => return Action6::Drop(Drop6::NoRoute),
        };
        if usize::from(port) >= self.nports {
            return Action6::Drop(Drop6::NoRoute);
        }
        let len = ETH_HDR_LEN + h.len();
        decrement_hop_limit(&mut frame[ETH_HDR_LEN..]);
        let (resolved, cacheable) = self.neigh.resolve_cacheable(neighbour, port, now_ns);
        match resolved {
            Resolve::Mac(m) => {
                if let Some(i) = cacheable {
                    self.cache_adj6(neighbour, port, m, i);
                }
                set_macs(frame, m, self.ports[usize::from(port)].mac);
                Action6::Forward { port, len }
            }
            // A queued frame keeps the MACs it came with (the previous hop's, for an Address
            // Unreachable if Neighbor Discovery fails); `Event6::Transmit` names both.
            Resolve::Pending(i) => match self.neigh.enqueue(i, handle, len as u16) {
                Ok(()) => Action6::Queued,
                Err(_) => Action6::Drop(Drop6::NeighQueueFull),
            },
            Resolve::TableFull => Action6::Drop(Drop6::NeighTableFull),
        }
    }

    /// Whether `dst` is one of our addresses on `in_port` (its global or link-local one, or a
    /// port's Subnet-Router anycast address; a link-local address of another port is not ours
    /// on this link), or a group we listen to there (all-nodes, all-routers, our addresses'
    /// solicited-node groups).
    fn is_local(&self, in_port: usize, dst: u128) -> bool {
        let p = &self.ports[in_port];
        let ll = self.link_local[in_port];
        dst == ll
            || self.is_own_global(dst)
            || dst == ALL_NODES
            || dst == ALL_ROUTERS
            || dst == ndp::solicited_node(p.addr.addr)
            || dst == ndp::solicited_node(ll)
            || (self.anycast[in_port] != 0 && dst == ndp::solicited_node(self.anycast[in_port]))
    }

    /// Whether `a` is a port's global address or Subnet-Router anycast address.
    pub(crate) fn is_own_global(&self, a: u128) -> bool {
        let n = self.nports;
        self.ports[..n].iter().any(|q| q.addr.addr == a) || self.anycast[..n].contains(&a)
    }

    /// Whether `a` is a port's Subnet-Router anycast address: its prefix with an all-zero
    /// interface identifier (RFC 4291 §2.6.1, which routers must support), except on a /127
    /// link, where RFC 6164 §5 disables it (that address is the other end's).
    fn is_anycast(&self, a: u128) -> bool {
        a != 0 && self.anycast[..self.nports].contains(&a)
    }

    /// Local delivery: Neighbor Discovery, echo, or the host.
    fn local(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        h: &Ipv6Hdr,
        hbh_len: usize,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action6 {
        let next = if hbh_len == 0 {
            h.next_header
        } else {
            frame[ETH_HDR_LEN + IPV6_HDR_LEN]
        };
        let unicast = !matches!(classify(h.dst), AddrClass6::Multicast { .. });
        if next != IPPROTO_ICMPV6 || hbh_len != 0 {
            return if unicast {
                Action6::ToHost
            } else {
                Action6::Drop(Drop6::Multicast)
            };
        }
        let msg_at = ETH_HDR_LEN + IPV6_HDR_LEN;
        let msg_end = ETH_HDR_LEN + h.len();
        match frame.get(msg_at) {
            Some(&ECHO_REQUEST) if unicast => {
                let m = &frame[msg_at..msg_end];
                if m.len() < 8 || checksum6(h.src, h.dst, m) != 0 {
                    return Action6::Drop(Drop6::BadIcmp);
                }
                self.echo_reply(in_port, frame, h, msg_at..msg_end)
            }
            Some(&t) if (ndp::ND_ROUTER_SOLICIT..=ndp::ND_REDIRECT).contains(&t) => {
                match ndp::parse(h, &frame[msg_at..msg_end]) {
                    Ok(m) => self.neighbour_discovery(in_port, frame, h, m, now_ns, out),
                    Err(_) => Action6::Drop(Drop6::BadNd),
                }
            }
            _ if unicast => Action6::ToHost,
            _ => Action6::Drop(Drop6::Multicast),
        }
    }

    /// Rewrites an echo request into its reply in place (RFC 4443 §4.2: data returned as it
    /// came), from the address it was sent to.
    fn echo_reply(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        h: &Ipv6Hdr,
        msg: core::ops::Range<usize>,
    ) -> Action6 {
        // To an anycast address: from the port's unicast one (RFC 4443 §4.2).
        let src = if self.is_anycast(h.dst) {
            self.ports[in_port].addr.addr
        } else {
            h.dst
        };
        let dst = h.src;
        let ip = &mut frame[ETH_HDR_LEN..];
        ip[IPV6_SRC].copy_from_slice(&src.to_be_bytes());
        ip[IPV6_DST].copy_from_slice(&dst.to_be_bytes());
        ip[IPV6_HOP_LIMIT] = ICMP6_HOP_LIMIT;
        let m = &mut frame[msg.clone()];
        m[0] = ECHO_REPLY;
        m[2..4].fill(0);
        let sum = checksum6(src, dst, m);
        m[2..4].copy_from_slice(&sum.to_be_bytes());
        let mut d = [0u8; 6];
        d.copy_from_slice(&frame[ETH_SRC]);
        frame[ETH_DST].copy_from_slice(&d);
        frame[ETH_SRC].copy_from_slice(&self.ports[in_port].mac.0);
        Action6::Reply {
            port: in_port as u8,
            len: msg.end,
        }
    }

    /// Neighbor Discovery (RFC 4861 §7.2): a solicitation for our address is answered
    /// (duplicate address detection defended to all-nodes), and its sender learned as an ARP
    /// request for us is (Stale); an advertisement updates an entry (Reachable when solicited
    /// and unicast to us), never creates one; RS, RA and Redirect are ignored. A sender
    /// naming one of our MACs or addresses is never learned.
    fn neighbour_discovery(
        &mut self,
        in_port: usize,
        frame: &[u8],
        h: &Ipv6Hdr,
        m: NdMessage,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action6 {
        let own_mac = |mac: MacAddr| self.ports[..self.nports].iter().any(|p| p.mac == mac);
        let own_addr =
            |a: u128| self.link_local[..self.nports].contains(&a) || self.is_own_global(a);
        let port = &self.ports[in_port];
        match m {
            NdMessage::Solicit {
                target,
                source_mac,
                dad,
            } => {
                // Our Subnet-Router anycast address on this link too, answered without the
                // Override flag (RFC 4861 §7.2.4: a unicast owner's answer wins); the random
                // delay §7.2.7 asks of anycast answers is not taken (one router per link).
                let anycast = target != 0 && target == self.anycast[in_port];
                if target != port.addr.addr && target != self.link_local[in_port] && !anycast {
                    return Action6::Drop(Drop6::NdNotForUs);
                }
                let o = if anycast { 0 } else { NA_OVERRIDE };
                if let Some(mac) = source_mac {
                    if !own_mac(mac) && !own_addr(h.src) {
                        self.neigh
                            .confirm(h.src, in_port as u8, mac, Confirm::Request, now_ns);
                    }
                }
                let (dst, flags, dst_mac) = if dad {
                    (ALL_NODES, NA_ROUTER | o, ndp::multicast_mac(ALL_NODES))
                } else {
                    let mut m = [0u8; 6];
                    m.copy_from_slice(&frame[ETH_SRC]);
                    (
                        h.src,
                        NA_ROUTER | NA_SOLICITED | o,
                        source_mac.unwrap_or(MacAddr(m)),
                    )
                };
                let Some(buf) = out.get_mut(ETH_HDR_LEN..) else {
                    self.counters.no_buffer += 1;
                    return Action6::Consumed;
                };
                let Some(n) = ndp::build(buf, target, dst, target, port.mac, Some(flags)) else {
                    self.counters.no_buffer += 1;
                    return Action6::Consumed;
                };
                out[ETH_DST].copy_from_slice(&dst_mac.0);
                out[ETH_SRC].copy_from_slice(&port.mac.0);
                out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
                Action6::Send {
                    port: in_port as u8,
                    len: ETH_HDR_LEN + n,
                    cause: None,
                }
            }
            NdMessage::Advert {
                target,
                target_mac: Some(mac),
                flags,
            } if !own_mac(mac) && !own_addr(target) => {
                let unicast = !matches!(classify(h.dst), AddrClass6::Multicast { .. });
                let how = if flags & NA_SOLICITED != 0 && unicast {
                    Confirm::Reply
                } else {
                    Confirm::Overheard
                };
                self.neigh.confirm(target, in_port as u8, mac, how, now_ns);
                if how == Confirm::Reply {
                    self.learned = Some(NeighUpdate6 {
                        ip: target,
                        port: in_port as u8,
                        mac,
                    });
                }
                Action6::Consumed
            }
            NdMessage::Ignored(ndp::ND_ROUTER_SOLICIT) => {
                self.solicited(in_port, now_ns);
                Action6::Consumed
            }
            NdMessage::Advert { .. } | NdMessage::Ignored(_) => Action6::Consumed,
        }
    }

    /// An ICMPv6 error about the frame, if RFC 4443 §2.4 (e) and the rate limit allow, in
    /// `out`; else the drop alone.
    #[allow(clippy::too_many_arguments)]
    fn error(
        &mut self,
        in_port: usize,
        frame: &[u8],
        h: &Ipv6Hdr,
        l2_multicast: bool,
        e: Icmp6Error,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action6 {
        let cause = match e {
            Icmp6Error::NoRoute => Drop6::NoRoute,
            Icmp6Error::BeyondScope => Drop6::BeyondScope,
            Icmp6Error::AddressUnreachable => Drop6::NeighTimeout,
            Icmp6Error::PacketTooBig { .. } => Drop6::TooBig,
            Icmp6Error::HopLimit => Drop6::HopLimit,
            Icmp6Error::ParamProblem { .. } => Drop6::ParamProblem,
        };
        let ip = &frame[ETH_HDR_LEN..];
        if !may_answer(ip, h, l2_multicast, e) {
            self.counters.icmp_suppressed += 1;
            return Action6::Drop(cause);
        }
        if !self.bucket.take(now_ns) {
            self.counters.icmp_rate_limited += 1;
            return Action6::Drop(cause);
        }
        let port = self.ports[in_port];
        // From the address of the port it came in by: the global one, or the link-local one
        // when the source is link-local (RFC 4443 §2.2: an address of the interface).
        let src = if classify(h.src) == AddrClass6::LinkLocal {
            self.link_local[in_port]
        } else {
            port.addr.addr
        };
        let Some(n) = out
            .get_mut(ETH_HDR_LEN..)
            .and_then(|b| build_error(b, src, ip, h, e))
        else {
            self.counters.no_buffer += 1;
            return Action6::Drop(cause);
        };
        out[ETH_DST].copy_from_slice(&frame[ETH_SRC]);
        out[ETH_SRC].copy_from_slice(&port.mac.0);
        out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        self.counters.icmp_sent += 1;
        Action6::Send {
            port: in_port as u8,
            len: ETH_HDR_LEN + n,
            cause: Some(cause),
        }
    }

    /// Destination Unreachable, code 3 (address unreachable: RFC 4443 §3.1; RFC 4861 §7.2.2,
    /// a router whose Neighbor Discovery for the next hop failed, as Linux's
    /// `ndisc_error_report`) about a queued frame that [`Event6::Dropped`] handed back with
    /// `unreachable: Some(len)`: `frame` is its first `len` bytes as queued (the Ethernet
    /// header it came with, hop limit already decremented), `in_port` the port it came in by.
    /// Built in `out` (at least 1,294 bytes for a full quote) toward the previous hop if RFC
    /// 4443 §2.4 (e) and the ICMP rate limit allow; returns the port and the bytes to send.
    /// `None` when nothing goes out (counted `icmp_suppressed`, `icmp_rate_limited` or
    /// `no_buffer`; the frame itself was counted `neigh_timeout` when it was dropped).
    pub fn address_unreachable(
        &mut self,
        in_port: usize,
        frame: &[u8],
        now_ns: u64,
        out: &mut [u8],
    ) -> Option<(u8, usize)> {
        if frame.len() < ETH_HDR_LEN || in_port >= self.nports {
            return None;
        }
        let ip = &frame[ETH_HDR_LEN..];
        let h = ipv6::validate(ip, ip.len()).ok()?;
        match self.error(
            in_port,
            frame,
            &h,
            false,
            Icmp6Error::AddressUnreachable,
            now_ns,
            out,
        ) {
            Action6::Send { port, len, .. } => Some((port, len)),
            _ => None,
        }
    }

    /// Timers and queues: a Router Advertisement due (`ra6=on`, [`ra`]; built in `out`, at
    /// least 118 bytes), solicitations to send (built in `out`, at least 86 bytes), frames
    /// whose neighbour answered, frames dropped for one that did not. Call until `None`.
    pub fn poll(&mut self, now_ns: u64, out: &mut [u8]) -> Option<Event6<H>> {
        if let Some(e) = self.advertise(now_ns, out) {
            return Some(e);
        }
        loop {
            let event = self.neigh.poll(now_ns);
            self.sync_adj6();
            match event? {
                NeighEvent::Request { port, ip } => {
                    let p = self.ports[usize::from(port)];
                    let group = ndp::solicited_node(ip);
                    let src = if classify(ip) == AddrClass6::LinkLocal {
                        self.link_local[usize::from(port)]
                    } else {
                        p.addr.addr
                    };
                    let Some(n) = out
                        .get_mut(ETH_HDR_LEN..)
                        .and_then(|b| ndp::build(b, src, group, ip, p.mac, None))
                    else {
                        self.counters.no_buffer += 1;
                        continue;
                    };
                    out[ETH_DST].copy_from_slice(&ndp::multicast_mac(group).0);
                    out[ETH_SRC].copy_from_slice(&p.mac.0);
                    out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
                    self.counters.ns_sent += 1;
                    return Some(Event6::Solicit {
                        port,
                        len: ETH_HDR_LEN + n,
                    });
                }
                NeighEvent::Release {
                    handle,
                    len,
                    port,
                    mac,
                } => {
                    self.counters.forwarded += 1;
                    return Some(Event6::Transmit {
                        handle,
                        port,
                        len: usize::from(len),
                        dst: mac,
                        src: self.ports[usize::from(port)].mac,
                    });
                }
                NeighEvent::Dropped { handle, len } => {
                    self.counters.drops[Drop6::NeighTimeout as usize] += 1;
                    return Some(Event6::Dropped {
                        handle,
                        reason: Drop6::NeighTimeout,
                        unreachable: Some(usize::from(len)),
                    });
                }
                NeighEvent::Evicted { handle } => {
                    self.counters.drops[Drop6::NeighTimeout as usize] += 1;
                    return Some(Event6::Dropped {
                        handle,
                        reason: Drop6::NeighTimeout,
                        unreachable: None,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
