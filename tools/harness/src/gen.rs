//! The traffic generator: synthetic UDP/IPv4 frames or pcap replay over QEMU's unix-datagram
//! network backend.
//!
//! Past ~800 lines because frame building, the windowed send/receive loop and pcap replay share
//! the generator's per-direction state (its tests are in `gen/tests.rs`).
//!
//! QEMU's `-netdev dgram` backend exchanges one Ethernet frame (without FCS) per unix datagram.
//! For guest port `i` QEMU binds `DIR/guest-i.sock` and sends to `DIR/host-i.sock`; the generator
//! binds the `host-i.sock` side. The host side must be bound **before** QEMU sends, otherwise the
//! frames are lost, so [`Generator::bind`] is separate from [`Generator::run`].
//!
//! Direction 0 is port 0 → port 1 (sent to `guest-0.sock`, received on `host-1.sock`); direction 1
//! (only with `bidir`) is port 1 → port 0.
//!
//! With [`GenConfig::netns`] set (the tap backend, [`crate::tap`]) the generator uses AF_PACKET
//! raw sockets bound to the tap devices `gtap{base_port}`, `gtap{base_port + 1}` inside that
//! network namespace instead; everything else is the same. Use several [`GenConfig::flows`]
//! there: the tun driver spreads frames over the guest's queues by flow hash.
//!
//! The unix datagram socket blocks when the peer's queue is full (`net.unix.max_dgram_qlen`,
//! 10 by default): that is back-pressure, not loss. Sending is windowed: at most `window` frames
//! are outstanding per direction; when the window is full and nothing arrives for
//! [`GenConfig::loss_timeout`] (200 ms), the oldest outstanding frame is written off as lost.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::tap::{tap_name, PacketSocket};
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv4HeaderSlice, UdpHeader};
use netstack::wire::{
    ARP_HTYPE_ETHERNET, ARP_LEN, ARP_REPLY, ARP_REQUEST, ARP_SHA, ARP_SPA, ARP_THA, ARP_TPA,
    ETHERTYPE, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_DST, ETH_HDR_LEN, ETH_SRC, ETH_ZLEN,
    IPV4_MIN_HDR, IPV4_TTL, UDP_CHECKSUM, UDP_HDR_LEN,
};
use serde::Serialize;

/// Magic at the start of every synthetic payload ("GNTF").
pub const MAGIC: u32 = 0x474E_5446;
/// Bytes of Ethernet + IPv4 + UDP headers in a synthetic frame.
pub const HEADERS_LEN: usize = ETH_HDR_LEN + IPV4_MIN_HDR + UDP_HDR_LEN;
/// Bytes of the payload header: magic (u32), direction (u32), sequence (u64), all big endian.
pub const PAYLOAD_HEADER_LEN: usize = 16;
/// Length of the Ethernet frame check sequence, counted in `--size` but not carried by the socket.
pub const FCS_LEN: usize = 4;
/// Smallest `--size` (on-the-wire bytes including FCS) a synthetic frame can have.
pub const MIN_SIZE: usize = HEADERS_LEN + PAYLOAD_HEADER_LEN + FCS_LEN;
/// Largest `--size` accepted for synthetic frames (jumbo frame + FCS).
pub const MAX_SIZE: usize = 9018;
/// Receive buffer of every host socket: any frame up to 64 KiB (a jumbo [`MAX_SIZE`] frame,
/// or an oversized test frame) arrives whole, never truncated to the buffer.
pub const RECV_BUF_LEN: usize = 65536;
const _: () = assert!(RECV_BUF_LEN >= MAX_SIZE);
/// UDP destination port of synthetic frames (discard).
pub const UDP_DST_PORT: u16 = 9;
/// UDP source port of flow 0; flow `f` uses `UDP_SRC_PORT_BASE + f`.
pub const UDP_SRC_PORT_BASE: u16 = 10_000;
/// Longest path that fits in `sockaddr_un.sun_path` (108 bytes including the NUL).
pub const SUN_PATH_MAX: usize = 107;

/// MAC address of the guest's port `i` (`02:00:00:00:00:0{i+1}`).
pub fn guest_mac(port: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, port as u8 + 1]
}

/// MAC address of the host (peer) behind guest port `i`: `02:00:00:00:0a:02` behind port 0,
/// `02:00:00:00:0b:02` behind port 1 (the guest's default peer MACs).
pub fn peer_mac(port: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x0a + port as u8, 0x02]
}

/// IPv4 address of the host behind guest port `i` (10.0.0.2 behind port 0, 10.0.1.2 behind 1).
pub fn peer_ip(port: usize) -> [u8; 4] {
    [10, 0, port as u8, 2]
}

/// The fixed fields of an ARP packet for Ethernet/IPv4 (RFC 826), up to the sender's
/// hardware address: hardware type Ethernet, protocol IPv4, lengths 6 and 4, opcode `op`.
fn arp_fixed(op: u16) -> [u8; ARP_SHA.start] {
    let [h0, h1] = ARP_HTYPE_ETHERNET.to_be_bytes();
    let [p0, p1] = ETHERTYPE_IPV4.to_be_bytes();
    let [o0, o1] = op.to_be_bytes();
    [h0, h1, p0, p1, 6, 4, o0, o1]
}

/// If `frame` is an ARP request (RFC 826, Ethernet/IPv4) for the host address behind guest
/// port `port` ([`peer_ip`]), the reply the host would send: from [`peer_mac`]`(port)` to the
/// asker, padded to the 60-byte Ethernet minimum. Lets the generator stand in for the
/// next-hop hosts when the guest routes (`mode=router`).
pub fn arp_reply(frame: &[u8], port: usize) -> Option<Vec<u8>> {
    if frame.len() < ETH_HDR_LEN + ARP_LEN || frame[ETHERTYPE] != ETHERTYPE_ARP.to_be_bytes() {
        return None;
    }
    let arp = &frame[ETH_HDR_LEN..ETH_HDR_LEN + ARP_LEN];
    if arp[..ARP_SHA.start] != arp_fixed(ARP_REQUEST) || arp[ARP_TPA] != peer_ip(port) {
        return None;
    }
    let mac = peer_mac(port);
    let mut r = vec![0u8; ETH_ZLEN];
    r[ETH_DST].copy_from_slice(&arp[ARP_SHA]); // to the asker's hardware address
    r[ETH_SRC].copy_from_slice(&mac);
    r[ETHERTYPE].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut r[ETH_HDR_LEN..ETH_HDR_LEN + ARP_LEN];
    a[..ARP_SHA.start].copy_from_slice(&arp_fixed(ARP_REPLY));
    a[ARP_SHA].copy_from_slice(&mac);
    a[ARP_SPA].copy_from_slice(&peer_ip(port));
    a[ARP_THA].copy_from_slice(&arp[ARP_SHA]);
    a[ARP_TPA].copy_from_slice(&arp[ARP_SPA]);
    Some(r)
}

/// Path of the socket QEMU binds for guest port `port`.
pub fn guest_sock(dir: &Path, port: usize) -> PathBuf {
    dir.join(format!("guest-{port}.sock"))
}

/// Path of the socket the host side (generator) binds for guest port `port`.
pub fn host_sock(dir: &Path, port: usize) -> PathBuf {
    dir.join(format!("host-{port}.sock"))
}

/// Fails if any socket path of `nics` ports under `dir` would not fit in `sun_path`
/// (at most [`SUN_PATH_MAX`] bytes), or contains a comma (QEMU option syntax).
pub fn check_socket_paths(dir: &Path, nics: usize) -> Result<()> {
    for port in 0..nics {
        for p in [guest_sock(dir, port), host_sock(dir, port)] {
            let len = p.as_os_str().len();
            ensure!(
                len <= SUN_PATH_MAX,
                "socket path {} is {len} bytes; a unix socket path may have at most {SUN_PATH_MAX} \
                 bytes (sun_path): use a shorter --dgram directory",
                p.display()
            );
            ensure!(
                !p.as_os_str().to_string_lossy().contains(','),
                "socket path {} contains a comma, which QEMU's option syntax cannot carry",
                p.display()
            );
        }
    }
    Ok(())
}

fn remove_stale(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing stale socket {}", path.display())),
    }
}

fn bind_host(dir: &Path, port: usize) -> Result<UnixDatagram> {
    let path = host_sock(dir, port);
    remove_stale(&path)?;
    UnixDatagram::bind(&path).with_context(|| format!("binding {}", path.display()))
}

/// The host side of one guest port: a unix datagram socket (dgram backend) that sends to the
/// guest's socket, or an AF_PACKET socket on the port's tap device (tap backend).
#[derive(Debug)]
pub enum HostSock {
    /// `host-i.sock`, sending to `peer` (`guest-i.sock`).
    Unix {
        /// The bound socket.
        sock: UnixDatagram,
        /// QEMU's socket for this port.
        peer: PathBuf,
    },
    /// A UDP socket carrying one frame per datagram, sending to `peer`: QEMU's `-netdev
    /// socket,udp=…`, libvirt's `<interface type='udp'>` (crate::libvirt).
    Udp {
        /// The bound socket.
        sock: UdpSocket,
        /// The guest port's UDP address.
        peer: SocketAddr,
    },
    /// Raw socket on tap device `ifname`.
    Packet {
        /// The bound socket.
        sock: PacketSocket,
        /// The tap device.
        ifname: String,
    },
}

/// The generator refuses to send a 0-byte frame: QEMU's `-netdev dgram` port takes a 0-byte
/// datagram for the end of its stream and stops receiving for good (issue 15 item 7), and no
/// Ethernet frame is empty (IEEE 802.3 §3.2: 14 header bytes at least).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmptyFrame;

impl std::fmt::Display for EmptyFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "EmptyFrame: refusing to send a 0-byte frame (it would wedge a QEMU dgram port)",
        )
    }
}

impl std::error::Error for EmptyFrame {}

/// A pcap record of 0 bytes (`incl_len` 0): refused by [`read_pcap`], as [`EmptyFrame`] would
/// refuse sending it. `record` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmptyPcapRecord {
    /// The capture file.
    pub path: PathBuf,
    /// Which record, from 1.
    pub record: usize,
}

impl std::fmt::Display for EmptyPcapRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "EmptyPcapRecord: {} record {} has 0 bytes (a 0-byte frame would wedge a QEMU dgram port)",
            self.path.display(),
            self.record
        )
    }
}

impl std::error::Error for EmptyPcapRecord {}

/// A frame too large for the MTU of the tap device it would be sent from (tap backend): the
/// kernel refuses an AF_PACKET send of more than MTU + 14 bytes (`EMSGSIZE`), and a tap's MTU
/// is 1500 unless raised (`--mtu`, [`crate::tap::TapNet::create_with_mtu`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameExceedsMtu {
    /// The tap device.
    pub ifname: String,
    /// The frame's size on the wire, FCS included (`--size`).
    pub size: usize,
    /// The device's MTU.
    pub mtu: u32,
}

impl std::fmt::Display for FrameExceedsMtu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FrameExceedsMtu: --size {} is {} bytes of IP packet, over tap {}'s MTU {} (largest \
             --size there: {}); boot with --mtu {} or more",
            self.size,
            ip_len_of_size(self.size),
            self.ifname,
            self.mtu,
            self.mtu as usize + ETH_HDR_LEN + FCS_LEN,
            ip_len_of_size(self.size),
        )
    }
}

impl std::error::Error for FrameExceedsMtu {}

/// A synthetic frame's `--size` (bytes on the wire, FCS included) must lie in
/// [`MIN_SIZE`]`..=`[`MAX_SIZE`].
///
/// # Errors
/// A size out of that range, named with the range.
fn check_size_range(size: usize) -> Result<()> {
    ensure!(
        (MIN_SIZE..=MAX_SIZE).contains(&size),
        "--size {size} out of range {MIN_SIZE}..={MAX_SIZE} (bytes on the wire, FCS included)"
    );
    Ok(())
}

/// The IP packet length (what an MTU limits) of a frame of `size` bytes on the wire, FCS
/// included: `size - 18` (9018 → 9000, 1518 → 1500).
pub fn ip_len_of_size(size: usize) -> usize {
    size.saturating_sub(ETH_HDR_LEN + FCS_LEN)
}

impl HostSock {
    /// The MTU of the interface a tap-backend socket sends from (`None` for a unix socket,
    /// which carries any frame up to [`MAX_SIZE`]).
    ///
    /// # Errors
    /// The MTU cannot be read ([`PacketSocket::mtu`]).
    pub fn mtu(&self) -> Result<Option<u32>> {
        match self {
            HostSock::Unix { .. } | HostSock::Udp { .. } => Ok(None),
            HostSock::Packet { sock, .. } => sock.mtu().map(Some),
        }
    }

    /// Fails with [`FrameExceedsMtu`] if a frame of `size` bytes on the wire (FCS included)
    /// cannot be sent from this socket's interface.
    ///
    /// # Errors
    /// [`FrameExceedsMtu`], or the MTU cannot be read.
    pub fn check_size(&self, size: usize) -> Result<()> {
        if let (Some(mtu), HostSock::Packet { ifname, .. }) = (self.mtu()?, self) {
            if ip_len_of_size(size) > mtu as usize {
                return Err(FrameExceedsMtu {
                    ifname: ifname.clone(),
                    size,
                    mtu,
                }
                .into());
            }
        }
        Ok(())
    }

    /// Sends one frame (no FCS) into the guest port. A 0-byte frame is refused
    /// (`InvalidInput` carrying [`EmptyFrame`]).
    pub fn send(&self, frame: &[u8]) -> std::io::Result<usize> {
        if frame.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                EmptyFrame,
            ));
        }
        match self {
            HostSock::Unix { sock, peer } => sock.send_to(frame, peer),
            HostSock::Udp { sock, peer } => sock.send_to(frame, peer),
            HostSock::Packet { sock, .. } => sock.send(frame),
        }
    }

    /// Receives one frame the guest sent out of the port.
    pub fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            HostSock::Unix { sock, .. } => sock.recv(buf),
            HostSock::Udp { sock, .. } => sock.recv(buf),
            HostSock::Packet { sock, .. } => sock.recv(buf),
        }
    }

    /// Another handle on the same socket.
    pub fn try_clone(&self) -> std::io::Result<HostSock> {
        Ok(match self {
            HostSock::Unix { sock, peer } => HostSock::Unix {
                sock: sock.try_clone()?,
                peer: peer.clone(),
            },
            HostSock::Udp { sock, peer } => HostSock::Udp {
                sock: sock.try_clone()?,
                peer: *peer,
            },
            HostSock::Packet { sock, ifname } => HostSock::Packet {
                sock: sock.try_clone()?,
                ifname: ifname.clone(),
            },
        })
    }

    /// `O_NONBLOCK` on or off.
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            HostSock::Unix { sock, .. } => sock.set_nonblocking(on),
            HostSock::Udp { sock, .. } => sock.set_nonblocking(on),
            HostSock::Packet { sock, .. } => sock.set_nonblocking(on),
        }
    }

    /// Receive timeout (`None`: block).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            HostSock::Unix { sock, .. } => sock.set_read_timeout(t),
            HostSock::Udp { sock, .. } => sock.set_read_timeout(t),
            HostSock::Packet { sock, .. } => sock.set_read_timeout(t),
        }
    }

    /// Send timeout (`None`: block).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            HostSock::Unix { sock, .. } => sock.set_write_timeout(t),
            HostSock::Udp { sock, .. } => sock.set_write_timeout(t),
            HostSock::Packet { sock, .. } => sock.set_write_timeout(t),
        }
    }

    /// Where frames go, for messages.
    pub fn describe(&self) -> String {
        match self {
            HostSock::Unix { peer, .. } => peer.display().to_string(),
            HostSock::Udp { peer, .. } => format!("udp {peer}"),
            HostSock::Packet { ifname, .. } => format!("tap {ifname}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Byte `i` of the payload pattern (after the payload header) of the frame with sequence `seq`.
#[inline]
pub fn pattern_byte(seq: u64, i: usize) -> u8 {
    let k = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8;
    k.wrapping_add((i as u8).wrapping_mul(7))
}

/// Builds the synthetic frame (without FCS) of `datagram_len` bytes for direction `dir`
/// (0: port 0 → port 1, 1: port 1 → port 0), sequence `seq` and flow `flow`, into `buf`.
///
/// Layout: Ethernet (dst = guest port MAC, src = peer MAC), IPv4 (valid header checksum, TTL 64),
/// UDP (src port `10000 + flow`, dst port 9, valid checksum), payload = magic, direction,
/// sequence, then [`pattern_byte`]s.
pub fn build_frame_into(
    buf: &mut Vec<u8>,
    dir: usize,
    seq: u64,
    flow: u16,
    datagram_len: usize,
) -> Result<()> {
    ensure!(dir < 2, "direction must be 0 or 1");
    build_frame_to(buf, dir, seq, flow, peer_ip(1 - dir), datagram_len)
}

/// [`build_frame_into`] with IPv4 destination `dst` instead of the host behind the other port
/// (a router's frames spread over its FIB: `bench --search --routes N`).
///
/// # Errors
/// As [`build_frame_into`].
pub fn build_frame_to(
    buf: &mut Vec<u8>,
    dir: usize,
    seq: u64,
    flow: u16,
    dst: [u8; 4],
    datagram_len: usize,
) -> Result<()> {
    ensure!(
        datagram_len >= HEADERS_LEN + PAYLOAD_HEADER_LEN,
        "frame too short: {datagram_len} bytes without FCS (minimum {})",
        HEADERS_LEN + PAYLOAD_HEADER_LEN
    );
    ensure!(dir < 2, "direction must be 0 or 1");
    let in_port = dir;
    let payload_len = datagram_len - HEADERS_LEN;
    buf.clear();
    buf.reserve(datagram_len);
    Ethernet2Header {
        source: peer_mac(in_port),
        destination: guest_mac(in_port),
        ether_type: EtherType::IPV4,
    }
    .write(buf)?;
    let mut ip = Ipv4Header::new(
        (UdpHeader::LEN + payload_len) as u16,
        64,
        IpNumber::UDP,
        peer_ip(in_port),
        dst,
    )?;
    ip.identification = seq as u16;
    ip.header_checksum = ip.calc_header_checksum();
    ip.write(buf)?;
    let udp_at = buf.len();
    UdpHeader {
        source_port: UDP_SRC_PORT_BASE.wrapping_add(flow),
        destination_port: UDP_DST_PORT,
        length: (UdpHeader::LEN + payload_len) as u16,
        checksum: 0,
    }
    .write(buf)?;
    let payload_at = buf.len();
    buf.extend_from_slice(&MAGIC.to_be_bytes());
    buf.extend_from_slice(&(dir as u32).to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes());
    buf.extend((0..payload_len - PAYLOAD_HEADER_LEN).map(|i| pattern_byte(seq, i)));
    let udp = UdpHeader::from_slice(&buf[udp_at..payload_at])?.0;
    let csum = udp.calc_checksum_ipv4(&ip, &buf[payload_at..])?;
    buf[udp_at..][UDP_CHECKSUM].copy_from_slice(&csum.to_be_bytes());
    Ok(())
}

/// Builds one synthetic frame; see [`build_frame_into`].
pub fn build_frame(dir: usize, seq: u64, flow: u16, datagram_len: usize) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    build_frame_into(&mut buf, dir, seq, flow, datagram_len)?;
    Ok(buf)
}

/// What [`validate_frame`] found wrong with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadFrame {
    /// Shorter than the headers plus the payload header.
    TooShort,
    /// Not IPv4 / UDP.
    NotIpv4Udp,
    /// IPv4 header does not parse or its checksum is wrong.
    Ipv4Checksum,
    /// UDP length field inconsistent with the frame.
    UdpLength,
    /// UDP checksum (when non-zero) is wrong.
    UdpChecksum,
    /// Payload magic missing.
    Magic,
    /// Payload pattern does not match the sequence number.
    Pattern,
}

/// A synthetic frame that passed validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoodFrame {
    /// Direction id carried in the payload.
    pub dir: u32,
    /// Sequence number carried in the payload.
    pub seq: u64,
}

/// Validates a received synthetic frame (without FCS; trailing padding is allowed): IPv4 header
/// checksum, UDP length and checksum (if non-zero), magic and the payload pattern. The Ethernet
/// addresses and the TTL are not checked (the guest may rewrite them).
pub fn validate_frame(frame: &[u8]) -> std::result::Result<GoodFrame, BadFrame> {
    if frame.len() < HEADERS_LEN + PAYLOAD_HEADER_LEN {
        return Err(BadFrame::TooShort);
    }
    if frame[ETHERTYPE] != ETHERTYPE_IPV4.to_be_bytes() {
        return Err(BadFrame::NotIpv4Udp);
    }
    let ip =
        Ipv4HeaderSlice::from_slice(&frame[ETH_HDR_LEN..]).map_err(|_| BadFrame::Ipv4Checksum)?;
    let header = ip.to_header();
    if header.calc_header_checksum() != ip.header_checksum() {
        return Err(BadFrame::Ipv4Checksum);
    }
    if ip.protocol() != IpNumber::UDP {
        return Err(BadFrame::NotIpv4Udp);
    }
    let udp_at = ETH_HDR_LEN + ip.slice().len();
    let ip_end = ETH_HDR_LEN + usize::from(ip.total_len());
    if ip_end > frame.len() || udp_at + UdpHeader::LEN > ip_end {
        return Err(BadFrame::UdpLength);
    }
    let udp = UdpHeader::from_slice(&frame[udp_at..])
        .map_err(|_| BadFrame::UdpLength)?
        .0;
    let payload_at = udp_at + UdpHeader::LEN;
    let udp_end = udp_at + usize::from(udp.length);
    if usize::from(udp.length) < UdpHeader::LEN + PAYLOAD_HEADER_LEN || udp_end > ip_end {
        return Err(BadFrame::UdpLength);
    }
    let payload = &frame[payload_at..udp_end];
    if udp.checksum != 0 {
        match udp.calc_checksum_ipv4(&header, payload) {
            Ok(c) if c == udp.checksum => {}
            _ => return Err(BadFrame::UdpChecksum),
        }
    }
    if payload[0..4] != MAGIC.to_be_bytes() {
        return Err(BadFrame::Magic);
    }
    let dir = u32::from_be_bytes(payload[4..8].try_into().unwrap());
    let seq = u64::from_be_bytes(payload[8..16].try_into().unwrap());
    let pattern_ok = payload[PAYLOAD_HEADER_LEN..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern_byte(seq, i));
    if !pattern_ok {
        return Err(BadFrame::Pattern);
    }
    Ok(GoodFrame { dir, seq })
}

// ---------------------------------------------------------------------------------------------
// Sequence accounting

/// Per-direction accounting of received sequence numbers: unique receptions, duplicates and
/// reordering (a sequence lower than the highest seen so far).
#[derive(Debug, Default, Clone)]
pub struct SeqTracker {
    seen: Vec<u64>,
    highest: Option<u64>,
    /// Unique sequence numbers received.
    pub received: u64,
    /// Receptions of a sequence number already received.
    pub duplicates: u64,
    /// Unique receptions whose sequence was lower than the highest seen before.
    pub reordered: u64,
    /// The highest sequence seen per flow (UDP source port; [`SeqTracker::record_in_flow`]).
    flow_highest: HashMap<u16, u64>,
    /// Receptions whose sequence was lower than the highest seen before in the same flow
    /// (frames of several flows may pass each other on several cores; one flow's may not).
    pub reordered_in_flow: u64,
}

impl SeqTracker {
    /// Records the reception of `seq`.
    pub fn record(&mut self, seq: u64) {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.duplicates += 1;
            return;
        }
        self.seen[word] |= 1 << bit;
        self.received += 1;
        match self.highest {
            Some(h) if seq < h => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
    }

    /// Records `seq` (already [`SeqTracker::record`]ed) as received in flow `flow`.
    pub fn record_in_flow(&mut self, flow: u16, seq: u64) {
        match self.flow_highest.get_mut(&flow) {
            Some(h) if seq < *h => self.reordered_in_flow += 1,
            Some(h) => *h = seq,
            None => {
                self.flow_highest.insert(flow, seq);
            }
        }
    }
}

/// The UDP source port of a valid synthetic frame (its flow: `UDP_SRC_PORT_BASE + flow`), if
/// the frame is long enough to hold it.
fn udp_source_port(frame: &[u8]) -> Option<u16> {
    let ihl = usize::from(*frame.get(ETH_HDR_LEN)? & 0x0F) * 4;
    let at = ETH_HDR_LEN + ihl;
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

// ---------------------------------------------------------------------------------------------
// Configuration and report

/// Generator configuration (the `cargo xtask gen` options).
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Directory holding the `guest-i.sock` / `host-i.sock` sockets.
    pub dir: PathBuf,
    /// Frame size on the wire including the 4-byte FCS (the socket carries `size - 4` bytes).
    pub size: usize,
    /// Sending duration in seconds (ignored when `count` is set).
    pub seconds: f64,
    /// Send exactly this many frames per direction instead of running for `seconds`.
    pub count: Option<u64>,
    /// Number of UDP flows (source ports `10000..10000+flows`).
    pub flows: u16,
    /// Maximum outstanding (sent − received) frames per direction.
    pub window: u64,
    /// Replay this capture's frames into port 0 instead of synthetic frames.
    pub pcap: Option<PathBuf>,
    /// Also send into port 1 and receive from port 0.
    pub bidir: bool,
    /// With a full window, write off the oldest frame after this long without any arrival.
    pub loss_timeout: Duration,
    /// Count as outstanding only the frames sent after the newest one that came back (in
    /// sequence order): a frame a later one overtook is lost (or reordered) and holds no
    /// credit. For lossy runs (the fault run), where every lost frame would otherwise hold
    /// its window slot until `loss_timeout` wrote it off, one at a time. Synthetic frames
    /// only (pcap replay has no sequence numbers); `loss_timeout` still applies when
    /// nothing comes back at all. Default `false`.
    pub skip_lost: bool,
    /// After sending ends, wait up to this long for stragglers.
    pub straggler_wait: Duration,
    /// Keep at most this many received-frame records (pcap mode) in [`GenReport::records`].
    pub max_records: usize,
    /// First guest port this generator drives: it uses ports `base_port` and `base_port + 1`
    /// (one port pair; several generators with base 0, 2, 4, … drive several pairs at once).
    pub base_port: usize,
    /// Tap backend: the network namespace handle (`/var/run/netns/NAME`) whose tap devices
    /// `gtapI` carry the ports; `None` (default) for the unix-datagram backend in `dir`.
    pub netns: Option<PathBuf>,
    /// Count a received synthetic frame as bad unless its IPv4 TTL is this (`Some(63)` for
    /// one routed hop: the generator sends with TTL 64); `None` (default): TTL not checked.
    pub expect_ttl: Option<u8>,
    /// UDP backend (libvirt's `<interface type='udp'>`, [`crate::libvirt`]): for each of the
    /// two ports, the host's address to bind and the guest port's address to send to; takes
    /// precedence over `dir` and `netns`. `None` (default): not used.
    pub udp: Option<[UdpPort; 2]>,
}

/// One port of the UDP backend ([`GenConfig::udp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPort {
    /// The host's address: bound, and where the guest sends.
    pub host: SocketAddr,
    /// The guest port's address (its `<local>` in libvirt): where the host sends.
    pub guest: SocketAddr,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            dir: PathBuf::new(),
            size: 64,
            seconds: 10.0,
            count: None,
            flows: 1,
            window: 64,
            pcap: None,
            bidir: false,
            loss_timeout: Duration::from_millis(200),
            skip_lost: false,
            straggler_wait: Duration::from_secs(1),
            max_records: 100_000,
            base_port: 0,
            netns: None,
            expect_ttl: None,
            udp: None,
        }
    }
}

/// One frame received in pcap-replay mode, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRecord {
    /// Guest port the frame came out of.
    pub port: usize,
    /// The received bytes (without FCS).
    pub frame: Vec<u8>,
    /// Index (in the capture) of the sent frame it matched, if any.
    pub matched: Option<usize>,
}

/// Results of one direction.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DirReport {
    /// 0: port `base` → port `base + 1`; 1: the other way.
    pub dir: usize,
    /// The generator's first guest port ([`GenConfig::base_port`]).
    pub base: usize,
    pub sent: u64,
    pub received: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Frames that came after a later frame of their own flow (synthetic frames: the UDP
    /// source port; [`SeqTracker::reordered_in_flow`]).
    #[serde(skip)]
    pub reordered_in_flow: u64,
    pub bad: u64,
    /// Frames written off by the window timeout.
    pub timed_out: u64,
    /// The longest time this direction went without a frame coming back, ms: the largest
    /// interval between two consecutive frames received (valid or not), or between the last
    /// one and the end of this direction's sending (so a guest that stops forwarding for good
    /// shows as one long gap); the whole sending time if none came back. Counted from the first received frame
    /// (router mode resolves its next hop before that).
    pub longest_gap_ms: f64,
}

/// Generator results. Serialises (JSON) to exactly the keys `sent`, `received`, `loss`,
/// `duplicates`, `reordered`, `bad`, `offered_pps`, `received_pps`, `seconds`,
/// `longest_gap_ms`; the remaining fields are for library users only.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenReport {
    /// Frames sent, all directions.
    pub sent: u64,
    /// Distinct valid frames received, all directions.
    pub received: u64,
    /// Fraction (0–1) of sent frames not received.
    pub loss: f64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Frames reordered within their own flow, all directions ([`DirReport::reordered_in_flow`]).
    #[serde(skip)]
    pub reordered_in_flow: u64,
    /// Received frames that failed validation (or matched no sent frame, in pcap mode).
    pub bad: u64,
    pub offered_pps: f64,
    pub received_pps: f64,
    /// Measured duration of the sending phase.
    pub seconds: f64,
    /// The longest gap between received frames of any direction, ms
    /// ([`DirReport::longest_gap_ms`]).
    pub longest_gap_ms: f64,
    /// Per-direction breakdown.
    #[serde(skip)]
    pub directions: Vec<DirReport>,
    /// pcap mode: received frames in arrival order (at most `max_records`).
    #[serde(skip)]
    pub records: Vec<FrameRecord>,
    /// Frames that arrived on a port no active direction sends to (ignored).
    #[serde(skip)]
    pub stray: u64,
    /// Non-fatal problems (e.g. sending stalled by back-pressure).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl GenReport {
    /// Whether anything came back: `Err` when frames were sent and no valid one was received
    /// (100% loss), the run's verdict for `cargo xtask gen` (which then exits non-zero, after
    /// its table and JSON). A run that sent nothing passes (nothing to judge).
    ///
    /// # Errors
    /// [`NothingCameBack`], with the frames sent, those that came back invalid and the run's
    /// warnings.
    pub fn check_came_back(&self) -> Result<(), NothingCameBack> {
        if self.sent == 0 || self.received > 0 {
            return Ok(());
        }
        Err(NothingCameBack {
            sent: self.sent,
            bad: self.bad,
            warnings: self.warnings.clone(),
        })
    }
}

/// Frames were sent and no valid one came back ([`GenReport::check_came_back`]): no guest
/// behind the sockets, one not forwarding between these ports yet (not `READY`, router mode
/// without a route to 10.0.1.2), or one dropping everything (its `stats` names the drops).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NothingCameBack {
    /// Frames sent, all directions.
    pub sent: u64,
    /// Frames that came back but failed validation.
    pub bad: u64,
    /// The run's warnings ([`GenReport::warnings`]), which often say why.
    pub warnings: Vec<String>,
}

impl std::fmt::Display for NothingCameBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NothingCameBack: {} frames sent, none came back valid (100% loss",
            self.sent
        )?;
        if self.bad > 0 {
            write!(f, "; {} came back bad", self.bad)?;
        }
        f.write_str(
            "): is a guest booted on these sockets, READY and forwarding between these ports? \
             (its console's `stats` counts its drops)",
        )?;
        for w in &self.warnings {
            write!(f, "; {w}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NothingCameBack {}

// ---------------------------------------------------------------------------------------------
// pcap

/// Reads all frames of a pcap file (Ethernet link type expected).
pub fn read_pcap(path: &Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = pcap_file::pcap::PcapReader::new(std::io::BufReader::new(file))
        .with_context(|| format!("reading pcap header of {}", path.display()))?;
    let link = reader.header().datalink;
    ensure!(
        link == pcap_file::DataLink::ETHERNET,
        "{}: link type {link:?}, expected Ethernet",
        path.display()
    );
    let mut frames = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.with_context(|| format!("reading a packet of {}", path.display()))?;
        if pkt.data.is_empty() {
            return Err(EmptyPcapRecord {
                path: path.to_path_buf(),
                record: frames.len() + 1,
            }
            .into());
        }
        frames.push(pkt.data.into_owned());
    }
    ensure!(!frames.is_empty(), "{} holds no frames", path.display());
    Ok(frames)
}

/// Matches received frames against the replayed capture: content after the two Ethernet
/// addresses (byte 12 on; they may differ). Frames shorter than 60 bytes ([`ETH_ZLEN`]) also
/// match when zero-padded to 60.
struct PcapMatcher {
    n: usize,
    by_content: HashMap<Vec<u8>, Vec<usize>>,
    received: Vec<u64>,
    highest: Option<u64>,
}

impl PcapMatcher {
    fn new(frames: &[Vec<u8>]) -> Self {
        let mut by_content: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
        for (i, f) in frames.iter().enumerate() {
            let body = f.get(ETH_SRC.end..).unwrap_or(&[]).to_vec();
            by_content.entry(body).or_default().push(i);
            if f.len() < ETH_ZLEN && f.len() >= ETH_SRC.end {
                let mut padded = f[ETH_SRC.end..].to_vec();
                padded.resize(ETH_ZLEN - ETH_SRC.end, 0);
                let v = by_content.entry(padded).or_default();
                if !v.contains(&i) {
                    v.push(i);
                }
            }
        }
        PcapMatcher {
            n: frames.len(),
            by_content,
            received: vec![0; frames.len()],
            highest: None,
        }
    }

    fn sent_of(&self, i: usize, sent_total: u64) -> u64 {
        let n = self.n as u64;
        sent_total / n + u64::from((i as u64) < sent_total % n)
    }

    /// Returns the matched index, or `Err(true)` for a duplicate, `Err(false)` for no match.
    fn matches(
        &mut self,
        frame: &[u8],
        sent_total: u64,
        acc: &mut SeqTracker,
    ) -> std::result::Result<usize, bool> {
        let Some(cands) = frame
            .get(ETH_SRC.end..)
            .and_then(|b| self.by_content.get(b))
        else {
            return Err(false);
        };
        // The candidate whose next expected transmission was sent earliest (FIFO per content).
        let best = cands
            .iter()
            .copied()
            .filter(|&i| self.received[i] < self.sent_of(i, sent_total))
            .min_by_key(|&i| self.received[i] * self.n as u64 + i as u64);
        let Some(i) = best else {
            acc.duplicates += 1;
            return Err(true);
        };
        let global_seq = self.received[i] * self.n as u64 + i as u64;
        self.received[i] += 1;
        acc.received += 1;
        match self.highest {
            Some(h) if global_seq < h => acc.reordered += 1,
            _ => self.highest = Some(global_seq),
        }
        Ok(i)
    }
}

// ---------------------------------------------------------------------------------------------
// The generator

/// Per-direction state shared between its sender and receiver threads.
#[derive(Default)]
struct DirShared {
    /// Frames sent (in pcap mode: reserved just before sending).
    sent: AtomicU64,
    /// Frames that came back for this direction (valid, duplicate or bad): window credit.
    arrived: AtomicU64,
    /// One more than the highest sequence number that came back valid (0: none yet); the
    /// window's credit with [`GenConfig::skip_lost`].
    highest: AtomicU64,
    /// The sender is parked waiting for credit.
    waiting: AtomicBool,
    /// The first flow sent ([`Generator::set_flows`]).
    first_flow: u16,
    sender: OnceLock<Thread>,
}

#[derive(Default)]
struct RxResult {
    acc: SeqTracker,
    bad: u64,
    /// ARP requests for the hosts behind the port, answered.
    arp_answered: u64,
    stray: u64,
    last_rx: Option<Instant>,
    /// The longest interval between two consecutive received frames.
    max_gap: Duration,
    records: Vec<FrameRecord>,
}

struct TxResult {
    sent: u64,
    timed_out: u64,
    warning: Option<String>,
    /// When this direction's sender finished (directions sending a count end apart).
    end: Instant,
}

/// A bound generator: `host-0.sock` and `host-1.sock` exist from [`Generator::bind`] on, so QEMU
/// can be started afterwards without losing frames. [`Generator::run`] may be called repeatedly.
/// The socket files are removed on drop.
pub struct Generator {
    cfg: GenConfig,
    socks: [HostSock; 2],
    pcap: Option<Vec<Vec<u8>>>,
    /// The first flow sent ([`Generator::set_flows`]; 0 from bind): flow `first_flow + seq %
    /// flows`, UDP source port `UDP_SRC_PORT_BASE` plus that.
    first_flow: u16,
}

impl Generator {
    /// Checks the configuration, removes stale `host-i.sock` files and binds them (tap backend:
    /// opens raw sockets on the tap devices in [`GenConfig::netns`]).
    pub fn bind(cfg: &GenConfig) -> Result<Generator> {
        if cfg.netns.is_none() && cfg.udp.is_none() {
            check_socket_paths(&cfg.dir, cfg.base_port + 2)?;
        }
        ensure!(cfg.window >= 1, "--window must be at least 1");
        ensure!(cfg.flows >= 1, "--flows must be at least 1");
        ensure!(
            cfg.count.is_some() || cfg.seconds > 0.0,
            "--seconds must be positive"
        );
        let pcap = match &cfg.pcap {
            Some(p) => {
                ensure!(!cfg.bidir, "--pcap replays into port 0 only; drop --bidir");
                Some(read_pcap(p)?)
            }
            None => {
                check_size_range(cfg.size)?;
                None
            }
        };
        let b = cfg.base_port;
        let socks = match (&cfg.udp, &cfg.netns) {
            (Some(ports), _) => {
                let udp = |p: &UdpPort| -> Result<HostSock> {
                    Ok(HostSock::Udp {
                        sock: UdpSocket::bind(p.host)
                            .with_context(|| format!("binding UDP {}", p.host))?,
                        peer: p.guest,
                    })
                };
                [udp(&ports[0])?, udp(&ports[1])?]
            }
            (None, None) => {
                let unix = |p: usize| -> Result<HostSock> {
                    Ok(HostSock::Unix {
                        sock: bind_host(&cfg.dir, p)?,
                        peer: guest_sock(&cfg.dir, p),
                    })
                };
                [unix(b)?, unix(b + 1)?]
            }
            (None, Some(ns)) => {
                let names = [tap_name(b), tap_name(b + 1)];
                let mut s = PacketSocket::open_in(ns, &names)?.into_iter();
                let mut next = |i: usize| -> Result<HostSock> {
                    Ok(HostSock::Packet {
                        sock: s.next().context("a socket per tap")?,
                        ifname: names[i].clone(),
                    })
                };
                [next(0)?, next(1)?]
            }
        };
        // Tap backend: a frame over the tap's MTU would fail every send with EMSGSIZE.
        let largest = match &pcap {
            Some(frames) => frames.iter().map(Vec::len).max().unwrap_or(0) + FCS_LEN,
            None => cfg.size,
        };
        let dirs = if cfg.bidir { 2 } else { 1 };
        for s in &socks[..dirs] {
            s.check_size(largest)?;
        }
        Ok(Generator {
            cfg: cfg.clone(),
            socks,
            pcap,
            first_flow: 0,
        })
    }

    /// The configuration this generator was bound with.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// A [`RawPort`] sharing this generator's socket for guest port `port` (0 or 1). Do not use
    /// it while [`Generator::run`] is running.
    pub fn raw_port(&self, port: usize) -> Result<RawPort> {
        ensure!(port < 2, "port must be 0 or 1");
        Ok(RawPort {
            sock: self.socks[port].try_clone()?,
            own: None,
        })
    }

    /// Another handle on this generator's host socket for guest port `port` (0 or 1), for a
    /// sender of its own (the open-loop trials of [`crate::rate`]). Do not use it while
    /// [`Generator::run`] is running.
    pub fn socket(&self, port: usize) -> Result<HostSock> {
        ensure!(port < 2, "port must be 0 or 1");
        self.socks[port]
            .try_clone()
            .with_context(|| format!("cloning the socket of port {port}"))
    }

    /// Send exactly `count` frames per direction on the next [`Generator::run`] (the sockets
    /// stay bound; a second phase of the same guest, say).
    pub fn set_count(&mut self, count: u64) {
        self.cfg.count = Some(count);
    }

    /// Send flows `first..first + flows` (UDP source ports `UDP_SRC_PORT_BASE + first` on) on
    /// the next [`Generator::run`]: one flow alone with `flows` 1, say.
    ///
    /// # Errors
    /// `flows` 0, or the last flow's source port past 65535.
    pub fn set_flows(&mut self, first: u16, flows: u16) -> Result<()> {
        ensure!(flows >= 1, "--flows must be at least 1");
        ensure!(
            UDP_SRC_PORT_BASE
                .checked_add(first)
                .and_then(|p| p.checked_add(flows - 1))
                .is_some(),
            "flows {first}..{} run past UDP port 65535",
            u32::from(first) + u32::from(flows)
        );
        self.first_flow = first;
        self.cfg.flows = flows;
        Ok(())
    }

    /// Send frames of `size` bytes on the wire (FCS included) on the next [`Generator::run`]
    /// (synthetic frames, not a pcap's).
    ///
    /// # Errors
    /// A size out of [`MIN_SIZE`]`..=`[`MAX_SIZE`], or, on taps, over a tap's MTU
    /// ([`FrameExceedsMtu`]), as at bind.
    pub fn set_size(&mut self, size: usize) -> Result<()> {
        check_size_range(size)?;
        for s in &self.socks {
            s.check_size(size)?;
        }
        self.cfg.size = size;
        Ok(())
    }

    /// Sends the configured traffic and returns the results.
    pub fn run(&self) -> Result<GenReport> {
        self.run_until(&AtomicBool::new(false))
    }

    /// [`run`](Self::run), but sending also ends as soon as `end` is set (checked before every
    /// frame), for a test that runs traffic while it does something of unknown length: `seconds`
    /// is then its ceiling. Stragglers are still awaited and the report is the same shape.
    pub fn run_until(&self, end: &AtomicBool) -> Result<GenReport> {
        let cfg = &self.cfg;
        let datagram_len = cfg.size - FCS_LEN;
        let dirs: Vec<usize> = if cfg.bidir { vec![0, 1] } else { vec![0] };
        let shared: [DirShared; 2] = core::array::from_fn(|_| DirShared {
            first_flow: self.first_flow,
            ..DirShared::default()
        });
        let stop = AtomicBool::new(false);
        let sending_done = AtomicBool::new(false);

        // Drain whatever is queued from before this run.
        let mut pre_stray = 0;
        for s in &self.socks {
            s.set_nonblocking(true)?;
            let mut buf = [0u8; RECV_BUF_LEN];
            while s.recv(&mut buf).is_ok() {
                pre_stray += 1;
            }
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(Duration::from_millis(20)))?;
            s.set_write_timeout(Some(Duration::from_millis(5)))?;
        }
        let matcher = self.pcap.as_deref().map(PcapMatcher::new);

        let start = Instant::now();
        let (tx_results, rx_results, send_end) = thread::scope(|scope| -> Result<_> {
            // Receivers: socket `port` carries direction `1 - port`.
            let mut rx_handles = Vec::new();
            let mut matcher = matcher;
            for port in 0..2 {
                let dir = 1 - port;
                let active = dirs.contains(&dir);
                let sock = self.socks[port].try_clone()?;
                let sh = &shared[dir];
                let stop = &stop;
                let m = if dir == 0 { matcher.take() } else { None };
                let max_records = (cfg.max_records, cfg.expect_ttl);
                rx_handles
                    .push(scope.spawn(move || {
                        receiver(sock, port, dir, active, sh, stop, m, max_records)
                    }));
            }
            let mut tx_handles = Vec::new();
            for &dir in &dirs {
                let sock = self.socks[dir].try_clone()?;
                let sh = &shared[dir];
                let pcap = self.pcap.as_deref();
                tx_handles.push(
                    scope.spawn(move || sender(sock, dir, cfg, datagram_len, pcap, sh, start, end)),
                );
            }
            let mut tx = Vec::new();
            for h in tx_handles {
                tx.push(h.join().expect("sender thread panicked"));
            }
            let send_end = Instant::now();
            sending_done.store(true, Ordering::SeqCst);
            // Stragglers: until everything sent is accounted for, at most `straggler_wait`.
            let all_back = || {
                dirs.iter().all(|&d| {
                    shared[d].arrived.load(Ordering::SeqCst)
                        >= shared[d].sent.load(Ordering::SeqCst)
                })
            };
            let straggle_deadline = send_end + cfg.straggler_wait;
            while Instant::now() < straggle_deadline && !all_back() {
                thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::SeqCst);
            let mut rx = Vec::new();
            for h in rx_handles {
                rx.push(h.join().expect("receiver thread panicked"));
            }
            Ok((tx, rx, send_end))
        })?;

        let seconds = send_end.duration_since(start).as_secs_f64();
        let mut report = GenReport {
            seconds,
            stray: pre_stray,
            ..Default::default()
        };
        let mut last_rx = None;
        for (i, &dir) in dirs.iter().enumerate() {
            let tx = tx_results[i]
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))?;
            let rx = &rx_results[1 - dir];
            if let Some(w) = &tx.warning {
                report.warnings.push(w.clone());
            }
            // Up to the end of this direction's own sending: with `count`, one direction can
            // finish seconds before the other, and its frames stop coming back then.
            let gap = match rx.last_rx {
                Some(last) => rx.max_gap.max(tx.end.saturating_duration_since(last)),
                None => tx.end.duration_since(start),
            };
            report.directions.push(DirReport {
                dir,
                base: self.cfg.base_port,
                sent: tx.sent,
                received: rx.acc.received,
                duplicates: rx.acc.duplicates,
                reordered: rx.acc.reordered,
                reordered_in_flow: rx.acc.reordered_in_flow,
                bad: rx.bad,
                timed_out: tx.timed_out,
                longest_gap_ms: gap.as_secs_f64() * 1e3,
            });
        }
        for rx in rx_results {
            report.stray += rx.stray;
            last_rx = last_rx.max(rx.last_rx);
            report.records.extend(rx.records);
        }
        for d in &report.directions {
            report.sent += d.sent;
            report.received += d.received;
            report.duplicates += d.duplicates;
            report.reordered += d.reordered;
            report.reordered_in_flow += d.reordered_in_flow;
            report.bad += d.bad;
            report.longest_gap_ms = report.longest_gap_ms.max(d.longest_gap_ms);
        }
        report.loss = if report.sent == 0 {
            0.0
        } else {
            report.sent.saturating_sub(report.received) as f64 / report.sent as f64
        };
        if seconds > 0.0 {
            report.offered_pps = report.sent as f64 / seconds;
        }
        let rx_span = last_rx
            .map(|t| t.duration_since(start).as_secs_f64())
            .unwrap_or(0.0)
            .max(seconds);
        if rx_span > 0.0 {
            report.received_pps = report.received as f64 / rx_span;
        }
        Ok(report)
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        if self.cfg.netns.is_some() {
            return;
        }
        for port in 0..2 {
            let _ = std::fs::remove_file(host_sock(&self.cfg.dir, self.cfg.base_port + port));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn sender(
    sock: HostSock,
    dir: usize,
    cfg: &GenConfig,
    datagram_len: usize,
    pcap: Option<&[Vec<u8>]>,
    sh: &DirShared,
    start: Instant,
    end: &AtomicBool,
) -> Result<TxResult> {
    let _ = sh.sender.set(thread::current());
    let deadline = start + Duration::from_secs_f64(cfg.seconds.max(0.0));
    let timed_mode = cfg.count.is_none();
    let stall_limit = Duration::from_secs(5);
    let mut buf = Vec::with_capacity(datagram_len);
    let mut seq: u64 = 0;
    let mut written_off: u64 = 0;
    // `skip_lost`: frames below this sequence were written off (see the window below).
    let mut lost_floor: u64 = 0;
    let mut warning = None;
    'outer: loop {
        match cfg.count {
            Some(c) if seq >= c => break,
            None if Instant::now() >= deadline => break,
            _ if end.load(Ordering::Relaxed) => break,
            _ => {}
        }
        // Window.
        let mut last_arrived = sh.arrived.load(Ordering::SeqCst);
        let mut last_progress = Instant::now();
        loop {
            let arrived = sh.arrived.load(Ordering::SeqCst);
            let now = Instant::now();
            if arrived != last_arrived {
                last_arrived = arrived;
                last_progress = now;
            }
            let outstanding = if cfg.skip_lost {
                seq.saturating_sub(sh.highest.load(Ordering::SeqCst).max(lost_floor))
            } else {
                seq.saturating_sub(arrived + written_off)
            };
            if outstanding < cfg.window {
                break;
            }
            if timed_mode && now >= deadline {
                break 'outer;
            }
            if now.duration_since(last_progress) >= cfg.loss_timeout {
                if cfg.skip_lost {
                    // Nothing came back for a while: every frame outstanding is lost.
                    written_off += outstanding;
                    lost_floor = seq;
                } else {
                    written_off += 1;
                }
                last_progress = now;
                continue;
            }
            sh.waiting.store(true, Ordering::SeqCst);
            if sh.arrived.load(Ordering::SeqCst) == arrived {
                thread::park_timeout(Duration::from_millis(1));
            }
            sh.waiting.store(false, Ordering::SeqCst);
        }
        // Frame.
        let frame: &[u8] = match pcap {
            Some(frames) => &frames[(seq % frames.len() as u64) as usize],
            None => {
                let flow = sh.first_flow + (seq % u64::from(cfg.flows)) as u16;
                build_frame_into(&mut buf, dir, seq, flow, datagram_len)?;
                &buf
            }
        };
        // Reserve before sending so the receiver never sees a frame that is not counted yet.
        sh.sent.fetch_add(1, Ordering::SeqCst);
        let blocked_since = Instant::now();
        loop {
            match sock.send(frame) {
                Ok(_) => break,
                // ENOBUFS: an AF_PACKET socket's device queue is full (tap backend).
                Err(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    // Back-pressure: the peer's queue is full.
                    let now = Instant::now();
                    if (timed_mode && now >= deadline)
                        || now.duration_since(blocked_since) >= stall_limit
                    {
                        sh.sent.fetch_sub(1, Ordering::SeqCst);
                        if !timed_mode || now.duration_since(blocked_since) >= stall_limit {
                            warning = Some(format!(
                                "direction {dir}: sending stalled by back-pressure for {:?} after \
                                 {seq} frames; stopped",
                                now.duration_since(blocked_since)
                            ));
                        }
                        break 'outer;
                    }
                }
                // Nobody bound at the peer path (QEMU not running): the frame is offered and lost.
                Err(e)
                    if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) =>
                {
                    if warning.is_none() {
                        warning = Some(format!("direction {dir}: {}: {e}", sock.describe()));
                    }
                    break;
                }
                Err(e) => {
                    sh.sent.fetch_sub(1, Ordering::SeqCst);
                    let hint = if e.raw_os_error() == Some(libc::EMSGSIZE) {
                        format!(
                            " (a {}-byte frame: over the interface's MTU? see --mtu)",
                            frame.len()
                        )
                    } else {
                        String::new()
                    };
                    return Err(e).with_context(|| format!("sending to {}{hint}", sock.describe()));
                }
            }
        }
        seq += 1;
    }
    Ok(TxResult {
        sent: sh.sent.load(Ordering::SeqCst),
        timed_out: written_off,
        warning,
        end: Instant::now(),
    })
}

#[allow(clippy::too_many_arguments)]
fn receiver(
    sock: HostSock,
    port: usize,
    dir: usize,
    active: bool,
    sh: &DirShared,
    stop: &AtomicBool,
    mut matcher: Option<PcapMatcher>,
    (max_records, expect_ttl): (usize, Option<u8>),
) -> RxResult {
    let mut res = RxResult::default();
    let mut buf = vec![0u8; RECV_BUF_LEN];
    while !stop.load(Ordering::SeqCst) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(_) => continue, // timeout (checks `stop`) or transient error
        };
        if let Some(reply) = arp_reply(&buf[..n], port) {
            if sock.send(&reply).is_ok() {
                res.arp_answered += 1;
            }
            continue;
        }
        if !active {
            res.stray += 1;
            continue;
        }
        let frame = &buf[..n];
        let now = Instant::now();
        if let Some(prev) = res.last_rx {
            res.max_gap = res.max_gap.max(now.duration_since(prev));
        }
        res.last_rx = Some(now);
        match matcher.as_mut() {
            Some(m) => {
                let matched = match m.matches(frame, sh.sent.load(Ordering::SeqCst), &mut res.acc) {
                    Ok(i) => Some(i),
                    Err(dup) => {
                        if !dup {
                            res.bad += 1;
                        }
                        None
                    }
                };
                if res.records.len() < max_records {
                    res.records.push(FrameRecord {
                        port,
                        frame: frame.to_vec(),
                        matched,
                    });
                }
            }
            None => match validate_frame(frame) {
                Ok(g)
                    if g.dir as usize == dir
                        && expect_ttl.is_none_or(|t| frame[ETH_HDR_LEN + IPV4_TTL] == t) =>
                {
                    sh.highest.fetch_max(g.seq + 1, Ordering::SeqCst);
                    res.acc.record(g.seq);
                    if let Some(flow) = udp_source_port(frame) {
                        res.acc.record_in_flow(flow, g.seq);
                    }
                }
                _ => res.bad += 1,
            },
        }
        sh.arrived.fetch_add(1, Ordering::SeqCst);
        if sh.waiting.load(Ordering::SeqCst) {
            if let Some(t) = sh.sender.get() {
                t.unpark();
            }
        }
    }
    res
}

/// Binds the sockets and runs the generator once; see [`Generator`].
pub fn run(cfg: &GenConfig) -> Result<GenReport> {
    Generator::bind(cfg)?.run()
}

// ---------------------------------------------------------------------------------------------
// Raw port

/// One host-side port for sending and receiving single raw frames (e.g. an oversized or an
/// 802.1Q-tagged frame) without the generator's accounting.
pub struct RawPort {
    sock: HostSock,
    own: Option<PathBuf>,
}

impl RawPort {
    /// Binds `DIR/host-{port}.sock` (removing a stale file) and sends to `DIR/guest-{port}.sock`.
    /// The socket file is removed on drop.
    pub fn bind(dir: &Path, port: usize) -> Result<RawPort> {
        check_socket_paths(dir, port + 1)?;
        let sock = HostSock::Unix {
            sock: bind_host(dir, port)?,
            peer: guest_sock(dir, port),
        };
        Ok(RawPort {
            sock,
            own: Some(host_sock(dir, port)),
        })
    }

    /// Sends one frame (without FCS) into the guest port. Blocks while the peer's queue is full,
    /// for at most 5 s.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        self.sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        self.sock
            .send(frame)
            .with_context(|| format!("sending to {}", self.sock.describe()))?;
        Ok(())
    }

    /// Receives one frame that came out of the guest port, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Vec<u8>> {
        let timeout = timeout.max(Duration::from_micros(1));
        self.sock.set_read_timeout(Some(timeout)).ok()?;
        let mut buf = vec![0u8; RECV_BUF_LEN];
        match self.sock.recv(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Some(buf)
            }
            Err(_) => None,
        }
    }

    /// Receives frames until none arrives for `idle`; returns them in order.
    pub fn collect(&self, idle: Duration) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.recv_timeout(idle)).collect()
    }
}

impl Drop for RawPort {
    fn drop(&mut self) {
        if let Some(p) = &self.own {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod arp_tests {
    use super::*;

    use netstack::wire::ARP_OPER;

    fn request(target: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&guest_mac(1));
        f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        f.extend_from_slice(&arp_fixed(ARP_REQUEST));
        f.extend_from_slice(&guest_mac(1));
        f.extend_from_slice(&[10, 0, 1, 1]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target);
        f.resize(ETH_ZLEN, 0);
        f
    }

    #[test]
    fn answers_for_the_host_behind_the_port() {
        let r = arp_reply(&request([10, 0, 1, 2]), 1).expect("a reply");
        assert_eq!(r.len(), 60);
        assert_eq!(&r[ETH_DST], &guest_mac(1));
        assert_eq!(&r[ETH_SRC], &peer_mac(1));
        let a = &r[ETH_HDR_LEN..];
        assert_eq!(&a[..ARP_SHA.start], &[0, 1, 0x08, 0x00, 6, 4, 0, 2]);
        assert_eq!(&a[ARP_SHA], &peer_mac(1));
        assert_eq!(&a[ARP_SPA], &[10, 0, 1, 2]);
        assert_eq!(&a[ARP_THA], &guest_mac(1));
        assert_eq!(&a[ARP_TPA], &[10, 0, 1, 1]);
    }

    #[test]
    fn ignores_other_targets_and_non_requests() {
        assert!(arp_reply(&request([10, 0, 1, 3]), 1).is_none());
        assert!(arp_reply(&request([10, 0, 1, 2]), 0).is_none());
        let mut reply = request([10, 0, 1, 2]);
        reply[ETH_HDR_LEN + ARP_OPER.end - 1] = 2;
        assert!(arp_reply(&reply, 1).is_none());
        assert!(arp_reply(&[0u8; 30], 1).is_none());
    }
}
