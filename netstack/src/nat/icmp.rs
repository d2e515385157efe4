//! ICMP error translation (RFC 5508 §4.2, REQ-3 and REQ-4; RFC 792 for the quote): an error
//! about a session's datagram has its outer address and the quoted datagram translated the
//! way that datagram was, so the host behind the NAT (or the peer outside) can match it to
//! its socket.
//!
//! * From the outside: the quote is a datagram the NAT sent out (source: the mapping). The
//!   session is found by the quote reversed (its outside tuple); the outer destination and
//!   the quote's source address and port (or identifier) become the inside endpoint's.
//! * From the inside: the quote is a datagram the NAT delivered in (destination: the inside
//!   endpoint); the outer source and the quote's destination become the mapping's. An inside
//!   router's error (outer source not the inside host) is translated the same way, as Linux
//!   masquerade does.
//!
//! Checksums, each by RFC 1624 from the words that changed: the outer IPv4 header's; the
//! quoted IPv4 header's; the quoted TCP or UDP checksum when it is in the quote (TCP needs 18
//! quoted bytes, a UDP checksum of 0 stays 0) or the quoted ICMP query's; and the ICMP
//! checksum over all of them. The session's state and idle time are left as they were.

use super::csum::{fix16, fix32, get16, get32, put16, put32};
use super::translate::{unref, Nat};
use super::NatDrop;
use crate::conntrack::parse::{Flow, Quote};
use crate::conntrack::table::Entry;
use crate::conntrack::Side;
use crate::wire::{IPPROTO_TCP, IPPROTO_UDP, IPV4_CHECKSUM, IPV4_DST, IPV4_SRC};

impl Nat<'_> {
    /// An ICMP error from the inside about a datagram delivered inside.
    pub(super) fn icmp_error_out(
        &mut self,
        frame: &mut [u8],
        flow: &Flow,
        q: &Quote,
        now: u64,
    ) -> Result<(), NatDrop> {
        if self.in_pool(flow.tuple.dst) {
            return Err(NatDrop::IcmpErrorHairpin);
        }
        let idx = self.session_of(q, Side::Inside, now)?;
        let o = self.sessions.get(idx).tuple(Side::Outside);
        translate_error(frame, flow, q, IPV4_SRC.start, false, o.dst, o.dport);
        self.counters.icmp_errors += 1;
        self.counters.outbound += 1;
        Ok(())
    }

    /// An ICMP error from the outside about a datagram the NAT sent out.
    pub(super) fn icmp_error_in(
        &mut self,
        frame: &mut [u8],
        flow: &Flow,
        q: &Quote,
        now: u64,
    ) -> Result<(), NatDrop> {
        let idx = self.session_of(q, Side::Outside, now)?;
        let i = self.sessions.get(idx).tuple(Side::Inside);
        translate_error(frame, flow, q, IPV4_DST.start, true, i.src, i.sport);
        self.counters.icmp_errors += 1;
        self.counters.inbound += 1;
        Ok(())
    }

    /// The session whose datagram `q` quotes, the error having come from `side` (the quote
    /// went the other way, so its reverse is the tuple the session keeps for `side`).
    fn session_of(&mut self, q: &Quote, side: Side, now: u64) -> Result<u32, NatDrop> {
        let (maps, ports, pool) = (&mut self.maps, &mut self.ports, &self.pool[..self.pool_len]);
        let mut rel = |e: &Entry<u32>| unref(maps, ports, pool, e.value);
        self.sessions
            .lookup(&q.tuple.reversed(), side, now, &mut rel)
            .ok_or(NatDrop::IcmpErrorNoSession)
    }
}

/// Rewrite the outer address at `ip + outer_off` and the quote's source (`quoted_src`) or
/// destination address and port (or identifier) to `addr`/`port`, every checksum updated.
fn translate_error(
    frame: &mut [u8],
    flow: &Flow,
    q: &Quote,
    outer_off: usize,
    quoted_src: bool,
    addr: u32,
    port: u16,
) {
    let icmp_sum = flow.l4 + 2;
    // Outer header (the ICMP checksum does not cover it).
    let old = get32(frame, flow.ip + outer_off);
    put32(frame, flow.ip + outer_off, addr);
    fix32(frame, flow.ip + IPV4_CHECKSUM.start, old, addr);
    // The quoted IPv4 header: address and its checksum, both under the ICMP checksum.
    let qa = q.ip
        + if quoted_src {
            IPV4_SRC.start
        } else {
            IPV4_DST.start
        };
    let qold = get32(frame, qa);
    let qsum = q.ip + IPV4_CHECKSUM.start;
    let qsum_old = get16(frame, qsum);
    put32(frame, qa, addr);
    fix32(frame, qsum, qold, addr);
    fix32(frame, icmp_sum, qold, addr);
    fix16(frame, icmp_sum, qsum_old, get16(frame, qsum));
    // The quoted transport header.
    let (port_at, sum_at) = match q.tuple.proto {
        IPPROTO_TCP => (
            q.l4 + if quoted_src { 0 } else { 2 },
            (q.l4_len >= 18).then_some(q.l4 + 16),
        ),
        IPPROTO_UDP => (
            q.l4 + if quoted_src { 0 } else { 2 },
            (get16(frame, q.l4 + 6) != 0).then_some(q.l4 + 6),
        ),
        // An ICMP query: the identifier, and the query's own checksum (no pseudo-header).
        _ => (q.l4 + 4, Some(q.l4 + 2)),
    };
    let pold = get16(frame, port_at);
    put16(frame, port_at, port);
    fix16(frame, icmp_sum, pold, port);
    if let Some(s) = sum_at {
        let sold = get16(frame, s);
        if q.tuple.proto == IPPROTO_TCP || q.tuple.proto == IPPROTO_UDP {
            fix32(frame, s, qold, addr);
        }
        fix16(frame, s, pold, port);
        if q.tuple.proto == IPPROTO_UDP && get16(frame, s) == 0 {
            put16(frame, s, 0xffff);
        }
        fix16(frame, icmp_sum, sold, get16(frame, s));
    }
}
