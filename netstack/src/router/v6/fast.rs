//! The IPv6 fast path ([`Router6::forward_fast`]): a unicast datagram without a Hop-by-Hop
//! header, from a global source to a global destination that is not the router's, through a
//! next hop on the other port whose neighbour entry is Reachable with nothing queued (cached
//! by the slow path: [`Adj6`]), within the egress MTU: hop limit decremented (IPv6 has no
//! header checksum, RFC 8200 §3), MACs rewritten, counted `rx` and `forwarded`. Everything
//! else is refused unchanged, for [`Router6::process`], whose checks (in Linux's order) it
//! agrees with on every frame it takes (tested in `v6/tests.rs`).
//!
//! The cache holds a few next hops by address (a direct-mapped table of [`ADJ6_SLOTS`]), not
//! one entry per FIB next hop: an IPv6 table of 100,000 routes through one gateway has 100,000
//! next-hop entries and one neighbour. It is filled when the slow path forwards through a
//! Reachable entry ([`super::NeighTable::resolve_cacheable`]) and emptied, all at once, when
//! the neighbour table says an entry that was Reachable changed (as the IPv4 router's
//! adjacencies are). The FIB is the boot's and never replaced, so no generation is kept.

use super::{NextHop6, Router6};
use crate::router::ipv6::{classify, AddrClass6};
use crate::wire::{
    ETHERTYPE_IPV6, ETH_HDR_LEN, IPPROTO_HOPOPTS, IPV6_HDR_LEN, IPV6_HOP_LIMIT, IPV6_NEXT_HEADER,
    IPV6_PAYLOAD_LEN,
};
use crate::MacAddr;

/// Next hops the fast path caches (a power of two).
pub const ADJ6_SLOTS: usize = 16;

/// The bytes the fast path reads: the Ethernet header and the IPv6 fixed header.
const FAST6_HDR: usize = ETH_HDR_LEN + IPV6_HDR_LEN;

/// One cached next hop: the neighbour's address and port, the frame's new MACs (destination,
/// then the port's), and the neighbour entry (for its use time).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Adj6 {
    neighbour: u128,
    macs: [u8; 12],
    port: u8,
    valid: bool,
    neigh: u16,
}

/// An empty slot.
pub const NO_ADJ6: Adj6 = Adj6 {
    neighbour: 0,
    macs: [0; 12],
    port: 0,
    valid: false,
    neigh: 0,
};

/// The slot of neighbour `a`: its low bits (interface identifiers vary there most), folded
/// with the next word so `::1`, `::2` of different prefixes spread too.
#[inline(always)]
fn slot(a: u128) -> usize {
    ((a ^ (a >> 64)) as usize) & (ADJ6_SLOTS - 1)
}

impl<H: Copy, const N: usize, const Q: usize> Router6<'_, H, N, Q> {
    /// The fast path for a frame of `frame_len` bytes received on `in_port`, of which `head`
    /// is the first buffer: `Some((port, len))` when it forwarded it (rewritten in `head`:
    /// send `len` bytes, the datagram without link padding, out of `port`, never `in_port`);
    /// `None`, with nothing changed, for every frame it does not take (give it to
    /// [`Router6::process`]).
    #[inline]
    pub fn forward_fast(
        &mut self,
        in_port: usize,
        head: &mut [u8],
        frame_len: usize,
        now_ns: u64,
    ) -> Option<(u8, usize)> {
        let port_mac = self.ports.get(..self.nports)?.get(in_port)?.mac;
        let f = head.first_chunk_mut::<FAST6_HDR>()?;
        let ip = ETH_HDR_LEN;
        if f[..6] != port_mac.0
            || f[12..14] != ETHERTYPE_IPV6.to_be_bytes()
            || f[ip] >> 4 != 6
            || f[ip + IPV6_NEXT_HEADER] == IPPROTO_HOPOPTS
            || f[ip + IPV6_HOP_LIMIT] <= 1
        {
            return None;
        }
        let payload = u16::from_be_bytes([f[ip + IPV6_PAYLOAD_LEN.start], f[ip + 5]]);
        let len = IPV6_HDR_LEN + usize::from(payload);
        let src = u128::from_be_bytes(*f[ip + 8..].first_chunk::<16>()?);
        let dst = u128::from_be_bytes(*f[ip + 24..].first_chunk::<16>()?);
        // A global unicast destination is local only as a port's global or Subnet-Router
        // anycast address: the other addresses `Router6::is_local` knows are link-local or
        // multicast. An anycast one needs no test here: it finds no adjacency below (no
        // neighbour ever has it: our addresses are never learned, and the slow path delivers
        // it locally rather than resolving it), so the slow path takes it.
        if ETH_HDR_LEN + len > frame_len
            || classify(src) != AddrClass6::Unicast
            || classify(dst) != AddrClass6::Unicast
            || self.ports[..self.nports].iter().any(|q| q.addr.addr == dst)
        {
            return None;
        }
        let nhi = self.fib.lookup_index(dst)?;
        let (out, neighbour) = match *self.nexthops.get(nhi as usize)? {
            NextHop6::Connected { port } => (port, dst),
            NextHop6::Via { port, gateway } => (port, gateway),
        };
        let a = self.adj6[slot(neighbour)];
        if !a.valid
            || a.neighbour != neighbour
            || a.port != out
            || usize::from(out) == in_port
            || len > usize::from(self.ports.get(usize::from(out))?.mtu)
        {
            return None;
        }
        f[ip + IPV6_HOP_LIMIT] -= 1;
        f[..12].copy_from_slice(&a.macs);
        self.neigh.touch(usize::from(a.neigh), now_ns);
        self.counters.rx += 1;
        self.counters.forwarded += 1;
        Some((out, ETH_HDR_LEN + len))
    }

    /// Cache the slow path's answer for `neighbour` on `port`: MAC `mac`, neighbour entry
    /// `neigh` (Reachable, nothing queued).
    pub(super) fn cache_adj6(&mut self, neighbour: u128, port: u8, mac: MacAddr, neigh: usize) {
        let (Some(p), Ok(neigh)) = (self.ports.get(usize::from(port)), u16::try_from(neigh)) else {
            return;
        };
        let mut macs = [0u8; 12];
        macs[..6].copy_from_slice(&mac.0);
        macs[6..].copy_from_slice(&p.mac.0);
        self.adj6[slot(neighbour)] = Adj6 {
            neighbour,
            macs,
            port,
            valid: true,
            neigh,
        };
    }

    /// After any call into the neighbour table: if an entry that was Reachable changed, the
    /// cached next hops may name a stale MAC (or one whose frames must queue): drop them all.
    pub(super) fn sync_adj6(&mut self) {
        if self.neigh.take_reachable_changed() {
            self.adj6 = [NO_ADJ6; ADJ6_SLOTS];
        }
    }
}
