//! [`Packet`] (a frame borrowed for [`NetworkFunction::process`](super::NetworkFunction::process),
//! with typed zero-copy header views) and [`Held`] (a frame the NF owns after
//! [`Verdict::Keep`](super::Verdict::Keep)).
//!
//! The views are `smoltcp::wire`'s (wire parsing apart from behaviour, one protocol per type):
//! an accessor reads the field from the frame's bytes where it lies, nothing is copied.

use crate::dataplane::page::PageBuf;
use drivers::nic::MAX_FRAME_PAGES;
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
    /// [`Held`] it becomes carries it ([`Held::mark`]), so `end_of_burst` knows what `process`
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

/// A frame the NF owns: kept by [`Verdict::Keep`](super::Verdict::Keep) (or made by
/// [`Ctx::alloc`](super::Ctx::alloc)), until it is handed on through a
/// [`Ctx`](super::Ctx) ([`send`](super::Ctx::send), [`drop`](super::Ctx::drop),
/// [`to_mgmt`](super::Ctx::to_mgmt)). Not `Clone`; dropping one instead of handing it on
/// leaks its pages (debug builds panic, naming the page).
///
/// A frame received in several pages (jumbo MTU, up to `MAX_FRAME_PAGES` = 4) stays in them:
/// its headers in the first ([`Held::head`]), every page but the last full, the whole frame as
/// [`Held::segments`]; sent, it leaves as the same pages (one descriptor chain).
#[must_use = "a held frame must be sent or dropped through the Ctx; dropping it leaks its page"]
pub struct Held {
    pub(crate) page: PageBuf,
    /// The later pages of a frame of several pages, in order (empty: one page).
    pub(crate) rest: heapless::Vec<PageBuf, { MAX_FRAME_PAGES - 1 }>,
    /// Frame bytes.
    pub(crate) len: u16,
    /// Where the frame starts in the page (the NIC's header room).
    pub(crate) offset: u16,
    /// The local port it came in on (or was allocated for).
    pub(crate) port: u8,
    /// What `process` attached to it ([`Packet::set_mark`]; 0 for a frame from
    /// [`Ctx::alloc`](super::Ctx::alloc)).
    pub(crate) mark: u16,
}

impl Held {
    /// The frame's length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the frame has no bytes (a fresh page from [`Ctx::alloc`](super::Ctx::alloc)).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local port it came in on (or was allocated for).
    pub fn port(&self) -> usize {
        usize::from(self.port)
    }

    /// The mark [`Packet::set_mark`] attached to it when it was kept (0 unless set).
    pub fn mark(&self) -> u16 {
        self.mark
    }

    /// Pages the frame lies in (1, or up to `MAX_FRAME_PAGES` for a jumbo frame).
    pub fn pages(&self) -> usize {
        1 + self.rest.len()
    }

    /// The frame's bytes in its first page: the whole frame when it is one page
    /// ([`Held::pages`] 1), else its first bytes (headers included; [`Held::segments`] has
    /// the rest).
    pub fn head(&self) -> &[u8] {
        let start = usize::from(self.offset);
        &self.page.page()[start..start + self.head_len()]
    }

    /// Write the destination and source MAC addresses, as [`Packet::write_macs`] does (a
    /// frame shorter than an Ethernet header is left as it is).
    pub fn write_macs(&mut self, words: (u64, u32)) {
        put_macs(self.head_mut(), words);
    }

    /// [`Held::head`], writable: rewrite headers in place.
    pub fn head_mut(&mut self) -> &mut [u8] {
        let (start, len) = (usize::from(self.offset), self.head_len());
        &mut self.page.page_mut_at(start)[..len]
    }

    /// The frame's bytes, in order, one slice per page (their lengths sum to [`Held::len`]).
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut left = self.len() - self.head_len();
        core::iter::once(self.head()).chain(self.rest.iter().map(move |p| {
            let n = left.min(mm::PAGE_SIZE);
            left -= n;
            &p.page()[..n]
        }))
    }

    /// The frame's bytes: [`Held::head`], which is all of them for a frame of one page.
    pub fn bytes(&self) -> &[u8] {
        self.head()
    }

    /// [`Held::bytes`], writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.head_mut()
    }

    /// Bytes of the frame in its first page.
    fn head_len(&self) -> usize {
        self.len().min(self.room())
    }

    /// Most bytes the frame can hold (its page less the NIC's header room).
    pub fn room(&self) -> usize {
        mm::PAGE_SIZE - usize::from(self.offset)
    }

    /// Set the frame's length to `len` bytes (capped at [`Held::room`]) and return them,
    /// writable: to build a frame in a page from [`Ctx::alloc`](super::Ctx::alloc). A frame
    /// of several pages keeps its length (it returns [`Held::head_mut`]).
    pub fn set_len(&mut self, len: usize) -> &mut [u8] {
        if self.rest.is_empty() {
            self.len = len.min(self.room()) as u16;
        }
        self.head_mut()
    }
}

/// The destination and source MACs of `frame` from `words` ([`netstack::MacRewrite::words`]):
/// one 8-byte and one 4-byte store through the Ethernet header as a fixed-size chunk, whose
/// length test in the fused loop is the one made against the NF's minimum before `process` (so
/// it folds away), and the two stores need none.
#[inline(always)]
fn put_macs(frame: &mut [u8], words: (u64, u32)) {
    if let Some(h) = frame.first_chunk_mut::<ETH_HDR_LEN>() {
        let (a, b) = h.split_at_mut(8);
        a.copy_from_slice(&words.0.to_le_bytes());
        b[..4].copy_from_slice(&words.1.to_le_bytes());
    }
}
