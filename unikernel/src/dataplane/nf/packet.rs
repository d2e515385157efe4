//! [`Packet`]: a frame borrowed for [`NetworkFunction::process`](super::NetworkFunction::process),
//! with typed zero-copy header views (a frame the NF owns after
//! [`Verdict::Keep`](super::Verdict::Keep) is a [`Held`](super::Held)).
//!
//! The views are `smoltcp::wire`'s (wire parsing apart from behaviour, one protocol per type):
//! an accessor reads the field from the frame's bytes where it lies, nothing is copied.

use crate::dataplane::held::put_macs;
use netstack::wire::{ETHERTYPE, ETHERTYPE_IPV4, ETH_HDR_LEN, IPPROTO_TCP, IPPROTO_UDP};
use smoltcp::wire::{EthernetFrame, Ipv4Packet, TcpPacket, UdpPacket};

/// One received frame, as [`NetworkFunction::process`](super::NetworkFunction::process) sees
/// it: its bytes (rewritable in place), its length, the port it came in on and, for an NF that
/// asks ([`CLOCK`](super::NetworkFunction::CLOCK)), the burst's time.
///
/// Its first page's bytes ([`Packet::head`]) hold at least the NF's
/// [`MIN_FRAME`](super::NetworkFunction::MIN_FRAME) bytes, so [`Packet::eth`] is never out of
/// bounds. A frame of one page is all in `head`; a frame of several pages (jumbo MTU) has
/// its headers in `head` and the rest of its bytes in later pages, which the NF does not see.
pub struct Packet<'a> {
    head: &'a mut [u8],
    len: usize,
    in_port: usize,
    now_ns: u64,
    mark: u16,
}

impl<'a> Packet<'a> {
    /// A frame of `len` bytes whose first bytes are `head` (all of them for a one-page frame),
    /// received on local port `in_port` in a burst that started at `now_ns`. The dataplane
    /// makes these; `head` holds at least an Ethernet header.
    #[inline(always)]
    pub(crate) fn new(head: &'a mut [u8], len: usize, in_port: usize, now_ns: u64) -> Packet<'a> {
        debug_assert!(head.len() >= ETH_HDR_LEN && len >= head.len());
        Packet {
            head,
            len,
            in_port,
            now_ns,
            mark: 0,
        }
    }

    /// Attach `mark` to the frame for [`Verdict::Keep`](super::Verdict::Keep): the
    /// [`Held`](super::Held) it becomes carries it ([`Held::mark`](super::Held::mark)), so `end_of_burst` knows what `process`
    /// decided for it (an output port, a rewrite already made) without a list of its own. A
    /// 16-bit value of the NF's choosing, as Linux's `skb->mark` or DPDK's mbuf user data;
    /// 0 unless set. Ignored for any other verdict.
    #[inline(always)]
    pub fn set_mark(&mut self, mark: u16) {
        self.mark = mark;
    }

    /// The mark set by [`Packet::set_mark`] (0 unless set).
    #[inline(always)]
    pub fn mark(&self) -> u16 {
        self.mark
    }

    /// Nanoseconds since boot when the burst started, read once per burst, for an NF whose
    /// [`CLOCK`](super::NetworkFunction::CLOCK) is `true` (timestamps, ageing); 0 for any other
    /// (the clock is then never read on the fast path).
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The whole frame's length (bytes; no FCS, no NIC header).
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame is empty (never: it holds at least an Ethernet header).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local port (0 or 1 of the core's pair) the frame came in on.
    #[inline(always)]
    pub fn in_port(&self) -> usize {
        self.in_port
    }

    /// The local port [`Verdict::Forward`](super::Verdict::Forward) sends it out of: the
    /// pair's other port.
    #[inline(always)]
    pub fn out_port(&self) -> usize {
        1 - self.in_port
    }

    /// The frame's bytes in its first page: the whole frame when it is one page.
    #[inline(always)]
    pub fn head(&self) -> &[u8] {
        self.head
    }

    /// [`Packet::head`], writable: rewrite headers in place.
    #[inline(always)]
    pub fn head_mut(&mut self) -> &mut [u8] {
        self.head
    }

    /// The Ethernet II header (IEEE 802.3 §3.1.1): destination, source, EtherType.
    #[inline(always)]
    pub fn eth(&self) -> EthernetFrame<&[u8]> {
        EthernetFrame::new_unchecked(&*self.head)
    }

    /// [`Packet::eth`], writable (`set_dst_addr`, `set_src_addr`, ...).
    #[inline(always)]
    pub fn eth_mut(&mut self) -> EthernetFrame<&mut [u8]> {
        EthernetFrame::new_unchecked(&mut *self.head)
    }

    /// Write the destination and source MAC addresses (12 bytes, IEEE 802.3 §3.2) as one
    /// 8-byte and one 4-byte store: `words` from [`netstack::MacRewrite::words`].
    #[inline(always)]
    pub fn write_macs(&mut self, words: (u64, u32)) {
        put_macs(self.head, words);
    }

    /// The IPv4 datagram (RFC 791 §3.1) after the Ethernet header, when the EtherType is
    /// IPv4 (RFC 894), the header is valid (version 4, IHL ≥ 5, total length ≥ IHL) and the
    /// whole datagram lies in [`Packet::head`] (so the view's payload accessors stay in
    /// bounds). `None` otherwise: not IPv4, malformed, or a frame of several pages.
    #[inline]
    pub fn ipv4(&self) -> Option<Ipv4Packet<&[u8]>> {
        if self.head[ETHERTYPE] != ETHERTYPE_IPV4.to_be_bytes() {
            return None;
        }
        let ip = Ipv4Packet::new_checked(&self.head[ETH_HDR_LEN..]).ok()?;
        (ip.version() == 4).then_some(ip)
    }

    /// The UDP header and payload (RFC 768) of an IPv4 datagram that is not a later fragment
    /// (offset 0), from [`Packet::ipv4`]; `None` otherwise or when the UDP length is invalid.
    #[inline]
    pub fn udp(&self) -> Option<UdpPacket<&[u8]>> {
        let payload = self.l4(IPPROTO_UDP)?;
        UdpPacket::new_checked(payload).ok()
    }

    /// The TCP segment (RFC 9293 §3.1) of an IPv4 datagram that is not a later fragment, from
    /// [`Packet::ipv4`]; `None` otherwise or when the data offset is invalid.
    #[inline]
    pub fn tcp(&self) -> Option<TcpPacket<&[u8]>> {
        let payload = self.l4(IPPROTO_TCP)?;
        TcpPacket::new_checked(payload).ok()
    }

    /// The IPv4 payload when the protocol is `proto` and the datagram is a first (or only)
    /// fragment.
    #[inline]
    fn l4(&self, proto: u8) -> Option<&[u8]> {
        let ip = self.ipv4()?;
        if u8::from(ip.next_header()) != proto || ip.frag_offset() != 0 {
            return None;
        }
        let start = ETH_HDR_LEN + usize::from(ip.header_len());
        let end = ETH_HDR_LEN + usize::from(ip.total_len());
        self.head.get(start..end)
    }
}
