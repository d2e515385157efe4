//! IPv6 header checks for the router, on raw bytes (network order), as the IPv4 ones are
//! ([`super::ipv4`]): the fixed header in the order of Linux's `ip6_rcv_core`
//! (net/ipv6/ip6_input.c), the Hop-by-Hop options in the order of its `ip6_parse_tlv`
//! (net/ipv6/exthdrs.c; RFC 8200 §4.2–4.3), address classes (RFC 4291 §2) and the forwarding
//! decision in the order of `ip6_forward` (net/ipv6/ip6_output.c). Nothing here panics on any
//! input; every refusal is a named [`Drop6`] or an ICMPv6 error ([`Icmp6Error`],
//! built by [`super::icmp6`]).
//!
//! Choices, each with its reason (the differential test against Linux lists them):
//! - Jumbograms (RFC 2675) are not supported: a payload length of 0 with a Hop-by-Hop header
//!   is [`Drop6::BadPayloadLen`] (no link of Gannet's carries 64 KiB).
//! - A link-local source leaving for another port is answered Destination Unreachable code 2,
//!   "beyond scope of source address" (RFC 4443 §3.1, RFC 4007 §9); Linux drops it silently.

use crate::wire::{
    IPPROTO_HOPOPTS, IPV6_DST, IPV6_HDR_LEN, IPV6_HOP_LIMIT, IPV6_NEXT_HEADER, IPV6_PAYLOAD_LEN,
    IPV6_SRC, IPV6_VER_TC_FLOW,
};

/// Most non-padding options one Hop-by-Hop header may carry (Linux's
/// `net.ipv6.max_hbh_opts_number` default, `IP6_DEFAULT_MAX_HBH_OPTS_CNT`).
pub const MAX_HBH_OPTIONS: usize = 8;
/// Most bytes of padding in a row (RFC 8200 §4.2: padding aligns to 8 bytes, so 7 is the most a
/// sender needs; RFC 4942 §2.1.9.5; Linux refuses more the same way).
pub const MAX_PADDING: usize = 7;
/// Option type Pad1 (RFC 8200 §4.2).
pub const OPT_PAD1: u8 = 0;
/// Option type PadN (RFC 8200 §4.2).
pub const OPT_PADN: u8 = 1;
/// Option type Router Alert (RFC 2711).
pub const OPT_ROUTER_ALERT: u8 = 5;
/// Option type Jumbo Payload (RFC 2675).
pub const OPT_JUMBO: u8 = 0xc2;

/// Why an IPv6 datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop6 {
    /// Fewer than 40 bytes.
    Truncated,
    /// Version not 6.
    BadVersion,
    /// Payload length + 40 beyond the frame, or 0 with a Hop-by-Hop header (a jumbogram).
    BadPayloadLen,
    /// `::1` as source or destination on a link (RFC 4291 §2.5.3).
    Loopback,
    /// A multicast source (RFC 4291 §2.7).
    MulticastSrc,
    /// `::` as source of a datagram to forward (RFC 4291 §2.5.2).
    UnspecifiedSrc,
    /// `::` as destination.
    UnspecifiedDst,
    /// A multicast destination of scope 0 (reserved) or 1 (interface-local: never on a link),
    /// RFC 4291 §2.7 and its erratum 3480.
    BadMulticastScope,
    /// A multicast destination this router does not listen to (no multicast routing).
    Multicast,
    /// A link-local destination that is not one of ours (RFC 4291 §2.5.6: never forwarded).
    LinkLocalDst,
    /// A malformed Hop-by-Hop header: past the datagram, an option past the header, more than
    /// [`MAX_PADDING`] bytes of padding in a row or non-zero PadN bytes (RFC 4942 §2.1.9.5),
    /// more than [`MAX_HBH_OPTIONS`] options.
    BadHopByHop,
    /// An unrecognised option whose action bits say discard (RFC 8200 §4.2: `01`, or `11` to
    /// a multicast destination).
    OptionDiscard,
    /// Needs bytes of the datagram past the head the caller passed.
    BeyondHead,
    /// Shorter than an Ethernet header.
    Runt,
    /// Destination MAC neither the port's nor a multicast group the router listens to.
    NotForUs,
    /// No route (answered with Destination Unreachable 0 unless rate-limited).
    NoRoute,
    /// Hop limit ≤ 1 (answered with Time Exceeded 0 unless rate-limited).
    HopLimit,
    /// Longer than the egress port's MTU (answered with Packet Too Big unless rate-limited).
    TooBig,
    /// A link-local source leaving its link (answered with Destination Unreachable 2).
    BeyondScope,
    /// A Hop-by-Hop option answered with a Parameter Problem.
    ParamProblem,
    /// A Neighbor Discovery message RFC 4861 §7.1 refuses ([`super::ndp::NdError`]).
    BadNd,
    /// A Neighbor Solicitation for an address that is not ours on that port.
    NdNotForUs,
    /// Next hop unresolved and no neighbour entry free.
    NeighTableFull,
    /// Next hop unresolved and its queue full.
    NeighQueueFull,
    /// Queued for a next hop that never answered Neighbor Discovery.
    NeighTimeout,
    /// An ICMPv6 message to us shorter than its 8-byte header or with a wrong checksum.
    BadIcmp,
    /// Still queued for a next hop when the router shut down ([`super::v6::Router6::flush`]).
    NeighFlushed,
}

impl Drop6 {
    /// Every reason, in counter order.
    pub const ALL: [Drop6; 27] = [
        Drop6::Truncated,
        Drop6::BadVersion,
        Drop6::BadPayloadLen,
        Drop6::Loopback,
        Drop6::MulticastSrc,
        Drop6::UnspecifiedSrc,
        Drop6::UnspecifiedDst,
        Drop6::BadMulticastScope,
        Drop6::Multicast,
        Drop6::LinkLocalDst,
        Drop6::BadHopByHop,
        Drop6::OptionDiscard,
        Drop6::BeyondHead,
        Drop6::Runt,
        Drop6::NotForUs,
        Drop6::NoRoute,
        Drop6::HopLimit,
        Drop6::TooBig,
        Drop6::BeyondScope,
        Drop6::ParamProblem,
        Drop6::BadNd,
        Drop6::NdNotForUs,
        Drop6::NeighTableFull,
        Drop6::NeighQueueFull,
        Drop6::NeighTimeout,
        Drop6::BadIcmp,
        Drop6::NeighFlushed,
    ];
    /// Number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// The reason's name in `STATS` and `/metrics` (`router6.drops`).
    pub fn as_str(self) -> &'static str {
        match self {
            Drop6::Truncated => "ip_truncated",
            Drop6::BadVersion => "bad_version",
            Drop6::BadPayloadLen => "bad_payload_len",
            Drop6::Loopback => "loopback",
            Drop6::MulticastSrc => "multicast_src",
            Drop6::UnspecifiedSrc => "unspecified_src",
            Drop6::UnspecifiedDst => "unspecified_dst",
            Drop6::BadMulticastScope => "bad_multicast_scope",
            Drop6::Multicast => "multicast",
            Drop6::LinkLocalDst => "link_local_dst",
            Drop6::BadHopByHop => "bad_hop_by_hop",
            Drop6::OptionDiscard => "option_discard",
            Drop6::BeyondHead => "beyond_head",
            Drop6::Runt => "runt",
            Drop6::NotForUs => "not_for_us",
            Drop6::NoRoute => "no_route",
            Drop6::HopLimit => "hop_limit",
            Drop6::TooBig => "too_big",
            Drop6::BeyondScope => "beyond_scope",
            Drop6::ParamProblem => "param_problem",
            Drop6::BadNd => "bad_nd",
            Drop6::NdNotForUs => "nd_not_for_us",
            Drop6::NeighTableFull => "neigh_table_full",
            Drop6::NeighQueueFull => "neigh_queue_full",
            Drop6::NeighTimeout => "neigh_timeout",
            Drop6::BadIcmp => "bad_icmp",
            Drop6::NeighFlushed => "neigh_flushed",
        }
    }
}

/// An ICMPv6 error to send for a datagram (RFC 4443 §3–4), before dropping it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmp6Error {
    /// Destination Unreachable code 0: no route to destination.
    NoRoute,
    /// Destination Unreachable code 2: beyond scope of source address.
    BeyondScope,
    /// Destination Unreachable code 3: address unreachable (neighbour discovery failed).
    AddressUnreachable,
    /// Packet Too Big with the egress link's MTU.
    PacketTooBig {
        /// The MTU of the link the datagram could not leave by, in bytes.
        mtu: u32,
    },
    /// Time Exceeded code 0: hop limit exceeded in transit.
    HopLimit,
    /// Parameter Problem: `code` 0 (erroneous header field) or 2 (unrecognised IPv6 option),
    /// `pointer` the offset in the datagram of the field or option type.
    ParamProblem {
        /// 0 or 2 (RFC 4443 §3.4).
        code: u8,
        /// Byte offset from the start of the IPv6 header.
        pointer: u32,
    },
}

impl Icmp6Error {
    /// ICMPv6 type and code (RFC 4443 §3).
    pub fn type_code(self) -> (u8, u8) {
        match self {
            Icmp6Error::NoRoute => (1, 0),
            Icmp6Error::BeyondScope => (1, 2),
            Icmp6Error::AddressUnreachable => (1, 3),
            Icmp6Error::PacketTooBig { .. } => (2, 0),
            Icmp6Error::HopLimit => (3, 0),
            Icmp6Error::ParamProblem { code, .. } => (4, code),
        }
    }

    /// May be sent about a datagram to a multicast address or in a link-layer multicast or
    /// broadcast frame (RFC 4443 §2.4 e.3–e.5: Packet Too Big, and Parameter Problem code 2
    /// for an option whose action bits are `10`).
    pub fn allowed_for_multicast(self) -> bool {
        matches!(
            self,
            Icmp6Error::PacketTooBig { .. } | Icmp6Error::ParamProblem { code: 2, .. }
        )
    }
}

/// What an address is (RFC 4291 §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddrClass6 {
    /// `::`.
    Unspecified,
    /// `::1`.
    Loopback,
    /// `fe80::/10`.
    LinkLocal,
    /// `ff00::/8`, with its 4-bit scope (RFC 4291 §2.7: 1 interface, 2 link, 5 site, 8
    /// organisation, 14 global).
    Multicast {
        /// The scope field.
        scope: u8,
    },
    /// Anything else: global unicast, unique local (`fc00::/7`), the deprecated site-local
    /// `fec0::/10` (RFC 3879: treated as global), IPv4-mapped.
    Unicast,
}

/// The class of `a` (an address read big-endian).
pub fn classify(a: u128) -> AddrClass6 {
    match a {
        0 => AddrClass6::Unspecified,
        1 => AddrClass6::Loopback,
        _ if a >> 120 == 0xff => AddrClass6::Multicast {
            scope: ((a >> 112) & 0xf) as u8,
        },
        _ if a >> 118 == 0xfe80 >> 6 => AddrClass6::LinkLocal,
        _ => AddrClass6::Unicast,
    }
}

/// The fixed header's fields the router uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Hdr {
    /// Payload length (bytes after the 40-byte header).
    pub payload_len: u16,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
}

impl Ipv6Hdr {
    /// The datagram's length: header and payload, in bytes.
    pub fn len(&self) -> usize {
        IPV6_HDR_LEN + usize::from(self.payload_len)
    }

    /// Whether the datagram is only its 40-byte header.
    pub fn is_empty(&self) -> bool {
        self.payload_len == 0
    }
}

fn addr(ip: &[u8], at: core::ops::Range<usize>) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&ip[at]);
    u128::from_be_bytes(b)
}

/// Checks the fixed header of `ip` (the head: at least the first 40 bytes if the datagram has
/// them) of a datagram of `ip_len` bytes (what the frame holds after its Ethernet header), in
/// the order of `ip6_rcv_core`: length, version, loopback source or destination, multicast
/// destination scope, multicast source, payload length. The caller trims the frame to
/// [`Ipv6Hdr::len`] (Ethernet padding).
///
/// # Errors
/// The first check that fails, as a [`Drop6`] (none of them is answered with ICMPv6).
pub fn validate(ip: &[u8], ip_len: usize) -> Result<Ipv6Hdr, Drop6> {
    if ip.len() < IPV6_HDR_LEN || ip_len < IPV6_HDR_LEN {
        return Err(Drop6::Truncated);
    }
    if ip[IPV6_VER_TC_FLOW.start] >> 4 != 6 {
        return Err(Drop6::BadVersion);
    }
    let h = Ipv6Hdr {
        payload_len: u16::from_be_bytes([
            ip[IPV6_PAYLOAD_LEN.start],
            ip[IPV6_PAYLOAD_LEN.start + 1],
        ]),
        next_header: ip[IPV6_NEXT_HEADER],
        hop_limit: ip[IPV6_HOP_LIMIT],
        src: addr(ip, IPV6_SRC),
        dst: addr(ip, IPV6_DST),
    };
    if h.src == 1 || h.dst == 1 {
        return Err(Drop6::Loopback);
    }
    if let AddrClass6::Multicast { scope: 0 | 1 } = classify(h.dst) {
        return Err(Drop6::BadMulticastScope);
    }
    if let AddrClass6::Multicast { .. } = classify(h.src) {
        return Err(Drop6::MulticastSrc);
    }
    if h.len() > ip_len || (h.payload_len == 0 && h.next_header == IPPROTO_HOPOPTS) {
        return Err(Drop6::BadPayloadLen);
    }
    Ok(h)
}

/// What the Hop-by-Hop header asks for ([`hop_by_hop`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HopByHop {
    /// A Router Alert option was present (RFC 2711: the router looks at the datagram, e.g.
    /// MLD, before forwarding it).
    pub router_alert: bool,
    /// Bytes of the Hop-by-Hop header (0 without one).
    pub len: usize,
}

/// Walks the Hop-by-Hop header of a validated datagram (`h` from [`validate`] of the same
/// `ip`, the head), in the order of `ip6_parse_tlv`. Without one, the default (nothing).
///
/// # Errors
/// `Err(Ok(drop))`: dropped silently; `Err(Err(error))`: dropped with a Parameter Problem
/// (code 2 for an unrecognised option whose action bits are `10`, or `11` to a non-multicast
/// destination, pointing at its type; code 0 for a Jumbo Payload option in a datagram whose
/// payload length is not 0, pointing at the option, as Linux's `ipv6_hop_jumbo`).
pub fn hop_by_hop(ip: &[u8], h: &Ipv6Hdr) -> Result<HopByHop, Result<Drop6, Icmp6Error>> {
    if h.next_header != IPPROTO_HOPOPTS {
        return Ok(HopByHop::default());
    }
    let start = IPV6_HDR_LEN;
    if h.len() < start + 8 {
        return Err(Ok(Drop6::BadHopByHop));
    }
    if ip.len() < start + 2 {
        return Err(Ok(Drop6::BeyondHead));
    }
    let len = (usize::from(ip[start + 1]) + 1) * 8;
    if start + len > h.len() {
        return Err(Ok(Drop6::BadHopByHop));
    }
    if start + len > ip.len() {
        return Err(Ok(Drop6::BeyondHead));
    }
    let opts = &ip[start..start + len];
    let mcast = matches!(classify(h.dst), AddrClass6::Multicast { .. });
    let mut out = HopByHop {
        router_alert: false,
        len,
    };
    let (mut off, mut padding, mut count) = (2, 0, 0);
    while off < len {
        let ty = opts[off];
        if ty == OPT_PAD1 {
            padding += 1;
            if padding > MAX_PADDING {
                return Err(Ok(Drop6::BadHopByHop));
            }
            off += 1;
            continue;
        }
        if off + 2 > len {
            return Err(Ok(Drop6::BadHopByHop));
        }
        let olen = usize::from(opts[off + 1]) + 2;
        if off + olen > len {
            return Err(Ok(Drop6::BadHopByHop));
        }
        let pointer = (start + off) as u32;
        if ty == OPT_PADN {
            padding += olen;
            if padding > MAX_PADDING || opts[off + 2..off + olen].iter().any(|&b| b != 0) {
                return Err(Ok(Drop6::BadHopByHop));
            }
            off += olen;
            continue;
        }
        padding = 0;
        count += 1;
        if count > MAX_HBH_OPTIONS {
            return Err(Ok(Drop6::BadHopByHop));
        }
        match ty {
            OPT_ROUTER_ALERT if olen == 4 => out.router_alert = true,
            OPT_JUMBO if olen == 6 => {
                return Err(Err(Icmp6Error::ParamProblem { code: 0, pointer }));
            }
            _ => match ty >> 6 {
                0 => {}
                1 => return Err(Ok(Drop6::OptionDiscard)),
                3 if mcast => return Err(Ok(Drop6::OptionDiscard)),
                _ => return Err(Err(Icmp6Error::ParamProblem { code: 2, pointer })),
            },
        }
        off += olen;
    }
    Ok(out)
}

/// Where the route lookup sends a datagram ([`forward_check`]'s input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Egress6 {
    /// The port it leaves by.
    pub port: usize,
    /// That port's IPv6 MTU in bytes (≥ [`crate::wire::IPV6_MIN_MTU`]).
    pub mtu: usize,
}

/// The forwarding decision ([`forward_check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward6 {
    /// Decrement the hop limit and send it out of the egress port.
    Forward,
    /// Drop it, counted, without an answer.
    Drop(Drop6),
    /// Answer with this ICMPv6 error (if [`super::icmp6::may_answer`] and the rate limit
    /// allow), then drop it.
    Error(Icmp6Error),
}

/// The checks of `ip6_forward` for a validated unicast datagram `h` of `len` bytes that
/// arrived on `in_port` and whose route lookup gave `route`, in Linux's order: source `::`
/// (never forwarded), no route (Destination Unreachable 0), hop limit ≤ 1 (Time Exceeded 0:
/// after the lookup, before the MTU), a link-local source leaving its link (Destination
/// Unreachable 2; a hairpin stays on the link), and the egress MTU (Packet Too Big: IPv6
/// routers never fragment, RFC 8200 §5). Destinations that are not global unicast are the
/// caller's to sort out before the lookup ([`dst_check`]).
pub fn forward_check(h: &Ipv6Hdr, len: usize, in_port: usize, route: Option<Egress6>) -> Forward6 {
    if h.src == 0 {
        return Forward6::Drop(Drop6::UnspecifiedSrc);
    }
    let Some(out) = route else {
        return Forward6::Error(Icmp6Error::NoRoute);
    };
    if h.hop_limit <= 1 {
        return Forward6::Error(Icmp6Error::HopLimit);
    }
    if classify(h.src) == AddrClass6::LinkLocal && out.port != in_port {
        return Forward6::Error(Icmp6Error::BeyondScope);
    }
    if len > out.mtu {
        return Forward6::Error(Icmp6Error::PacketTooBig {
            mtu: u32::try_from(out.mtu).unwrap_or(u32::MAX),
        });
    }
    Forward6::Forward
}

/// Refuses the destinations a router never forwards, before the route lookup: `::`,
/// multicast (no multicast routing; the caller delivers the groups it listens to first) and
/// link-local (the caller delivers its own first).
///
/// # Errors
/// The [`Drop6`] of such a destination.
pub fn dst_check(h: &Ipv6Hdr) -> Result<(), Drop6> {
    match classify(h.dst) {
        AddrClass6::Unspecified => Err(Drop6::UnspecifiedDst),
        AddrClass6::Multicast { .. } => Err(Drop6::Multicast),
        AddrClass6::LinkLocal => Err(Drop6::LinkLocalDst),
        AddrClass6::Loopback => Err(Drop6::Loopback),
        AddrClass6::Unicast => Ok(()),
    }
}

/// Decrements the hop limit of `ip` (a forwarded datagram; IPv6 has no header checksum).
pub fn decrement_hop_limit(ip: &mut [u8]) {
    ip[IPV6_HOP_LIMIT] = ip[IPV6_HOP_LIMIT].saturating_sub(1);
}

#[cfg(test)]
mod tests;
