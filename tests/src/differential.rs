//! Differential test against Linux (issue 7): the same crafted frames go through Gannet's router
//! mode and through a Linux guest configured the same way (`harness::peer_linux`, `peer_mode=l3`),
//! and what comes out must match field for field, except where RFC 1812 leaves the router a
//! choice ([`CHOICES`]).
//!
//! Past ~800 lines because most of it is the table of crafted frames and the field-by-field
//! expectations against Linux: data that reads best in one place.
//!
//! - [`frame_set`] builds the frames (with `etherparse`), each a [`Case`] with a name and what
//!   RFC 1812 expects of it.
//! - [`Target`] boots one router (Gannet: [`Target::gannet`]; Linux: [`Target::linux`]) with its
//!   two ports bound on the host, and [`Target::run_case`] sends one frame into its port
//!   (0, or 1 for the `p1-` cases) and collects what leaves port 0 and port 1, answering ARP as the hosts 10.0.0.2 and 10.0.1.2
//!   would ([`gen::arp_reply`]); ARP is left out of the comparison.
//! - [`dissect`] turns an output frame into named [`Field`]s, marking the fields where RFC 1812
//!   allows either router's value with the id of the [`Choice`]; [`compare_case`] compares the
//!   two routers' outputs and [`Report`] lists every mismatching frame and field.
//!
//! Per-frame window: after each case the harness sends a *fence*, an ICMP echo request from
//! 10.0.0.2 to the router's port-0 address, and collects until the fence's echo reply has come
//! back on port 0 and port 1 has been quiet for [`SETTLE`]. Both routers handle a port's frames
//! in order, so everything the case caused is out before the fence reply (and a late frame on
//! port 1 has [`SETTLE`] to arrive). No fixed sleeps; a router that stops answering fails the
//! case after [`CASE_TIMEOUT`].
//!
//! Egress MTU: port 1's MTU is [`EGRESS_MTU`] (576) on both routers, port 0's is 1500, so the
//! `frag-`/`mtu-`/`refrag-` cases (and `udp-1472`) exercise fragmentation (RFC 791 §3.2, RFC
//! 1812 §5.2.6) and Fragmentation Needed (RFC 1191 §4); each case's fragments are compared in
//! order, frame by frame, like any output sequence. Later fragments of a datagram with options
//! carry different option bytes by choice (C14-frag-options).
//!
//! Rate limits: every case triggers at most one ICMP error and the cases are sent one at a time
//! (the fence in between), so Gannet's limiter (1000/s, burst 50, `router.icmp_rate_limited` in
//! STATS, checked by the test) never fires; Linux's per-destination limits are switched off
//! ([`LINUX_SYSCTLS`]).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use etherparse::{
    EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header, Icmpv4Type, IpDscp, IpEcn,
    IpFragOffset, IpNumber, Ipv4Header, Ipv4Options, UdpHeader,
};

use crate::{gen, qemu, Guest, GuestConfig, RawPort, TestDir};
use harness::peer_linux;
use netstack::wire::{
    ETHERTYPE, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_DST, ETH_HDR_LEN, ETH_SRC, ETH_ZLEN,
    ICMP_CHECKSUM, ICMP_CODE, ICMP_ECHO_IDENT, ICMP_ECHO_SEQ, ICMP_HDR_LEN, ICMP_REST, ICMP_TYPE,
    IPPROTO_ICMP, IPV4_CHECKSUM, IPV4_DST, IPV4_FLAGS_FRAG, IPV4_IDENT, IPV4_MAX_OPTIONS,
    IPV4_MIN_HDR, IPV4_PROTOCOL, IPV4_SRC, IPV4_TOS, IPV4_TOTAL_LEN, IPV4_TTL, IPV4_VER_IHL,
};

/// Gannet's kernel command line: the addresses the Linux peer's `peer_mode=l3` uses, and port
/// 1's MTU ([`EGRESS_MTU`]).
pub const GANNET_APPEND: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mtu1=576";
/// Port 1's MTU on both routers (Gannet `mtu1=576`, Linux `ip link set mtu 576`, via
/// `peer_mtu1=`); port 0 keeps 1500. Datagrams from port 0 to 10.0.1.2 larger than this are
/// fragmented (DF clear) or answered with Fragmentation Needed (DF set). No case sends a frame
/// into port 1 larger than this, and every ICMP error fits (576 bytes at most, choice C4).
pub const EGRESS_MTU: u16 = 576;
/// The router's address on port 0 (the fence's destination) and on port 1.
pub const ROUTER_IP: [[u8; 4]; 2] = [[10, 0, 0, 1], [10, 0, 1, 1]];
/// The host behind port 0 (source of the crafted frames) and behind port 1.
pub const HOST_IP: [[u8; 4]; 2] = [[10, 0, 0, 2], [10, 0, 1, 2]];
/// ICMP echo identifier of the fence.
pub const FENCE_ID: u16 = 0xfe0f;
/// After the fence reply, how long port 1 must stay quiet before a case is complete.
pub const SETTLE: Duration = Duration::from_millis(120);
/// Longest a case may take (fence reply included) before the router is declared stuck.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first fence may take (the guest has just printed its ready line).
pub const WARMUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The Linux sysctls the peer sets for this test (`peer_sysctl=diff` in
/// `tools/assets/peer-linux-init.sh`), with the reason for each. Everything else keeps the
/// kernel's default; the ones that matter for the frame set are listed with their default.
pub const LINUX_SYSCTLS: &[(&str, &str, &str)] = &[
    (
        "net.ipv4.ip_forward",
        "1",
        "route between the ports (set by peer_mode=l3)",
    ),
    (
        "net.ipv4.icmp_ratelimit",
        "0",
        "no per-destination token bucket for ICMP errors (default 1000 ms): every case may cause \
         one error to 10.0.0.2 and must get it. RFC 1812 §4.3.2.8 allows limiting; the test is \
         about what is sent, not how often",
    ),
    (
        "net.ipv4.route.error_cost",
        "0",
        "Destination Unreachable for a route lookup failure has its own per-source limit \
         (error_cost 1 s, error_burst 5 s) in ip_error(); 0 lets every no-route case answer",
    ),
    (
        "net.ipv4.icmp_errors_use_inbound_ifaddr",
        "1",
        "ICMP errors come from the address of the interface the datagram came in on, as Gannet \
         does (RFC 1812 §4.3.2.4: an address of the interface the error is sent on; with the \
         default 0 Linux uses the route's preferred source, the same address in this topology)",
    ),
    (
        "net.ipv4.conf.{all,default,eth*}.rp_filter",
        "0",
        "no reverse-path filter: RFC 1812 §5.3.8 says source address validation, if \
         implemented, MUST be off by default (0 is the kernel default; set explicitly because \
         distributions turn it on)",
    ),
    (
        "net.ipv4.icmp_msgs_per_sec / icmp_msgs_burst",
        "1000 / 50 (default)",
        "the global ICMP error bucket; the frame set causes fewer than 20 errors, one at a time",
    ),
    (
        "net.ipv4.conf.*.accept_local",
        "0 (default)",
        "no frame in the set has one of the router's addresses as its source",
    ),
    (
        "net.ipv4.conf.*.bc_forwarding",
        "0 (default)",
        "directed broadcasts are not forwarded, as RFC 1812 §5.3.5.2 asks by default (choice \
         C6-directed-broadcast)",
    ),
    (
        "net.ipv4.conf.{all,default,eth*}.accept_source_route",
        "1",
        "follow source routes: RFC 1812 §5.3.13.4 says a router MUST support them and an \
         option to discard them MUST NOT be on by default (Linux's default 0 drops them)",
    ),
    (
        "net.ipv4.conf.*.route_localnet",
        "0 (default)",
        "127/8 is martian (RFC 1812 §5.3.7)",
    ),
    (
        "net.ipv6.*",
        "ipv6.disable=1 (kernel command line)",
        "no IPv6 frames (router solicitations, DAD) on the ports",
    ),
];

// ---------------------------------------------------------------------------------------------
// Choices

/// A place where RFC 1812 (or a document it defers to) lets a router choose, and what each
/// router chose. Fields marked with a choice's [`Choice::id`] are shown but not compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Short id, referenced by [`Field::choice`].
    pub id: &'static str,
    /// Where the RFC leaves the choice.
    pub rfc: &'static str,
    /// What may differ.
    pub what: &'static str,
    /// Gannet's behaviour.
    pub gannet: &'static str,
    /// Linux's (6.1, with [`LINUX_SYSCTLS`]).
    pub linux: &'static str,
    /// Whether the field is excluded from the comparison (`false`: both routers made the same
    /// choice and the field is compared exactly; the row documents it).
    pub masked: bool,
    /// `true` for a place where the RFC is *not* silent and Linux deviates from it (Gannet
    /// follows the RFC): a listed exception rather than a choice.
    pub linux_deviates: bool,
}

/// The choices table. Rows with `masked: false` are choices both routers happen to make the
/// same way: their fields are still compared exactly.
pub const CHOICES: &[Choice] = &[
    Choice {
        id: "C1-icmp-ip-id",
        rfc: "RFC 791 §3.1 / RFC 6864: the Identification of a datagram the router originates \
              is the sender's business",
        what: "IPv4 Identification of ICMP errors and echo replies the router sends",
        gannet: "one per-router counter for errors and echo replies, starting at 1",
        linux: "ip_select_ident(): a hashed per-destination counter",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C2-icmp-tos",
        rfc: "RFC 1812 §4.3.2.5: precedence of ICMP errors SHOULD be 6 or 7 (compared); the TOS \
              bits are RFC 1349 §5.1's (default TOS 0000 for errors)",
        what: "TOS bits (not precedence) of ICMP errors",
        gannet: "0xc0: precedence 6, TOS 0000 (RFC 1349)",
        linux: "precedence 6 | the offending datagram's TOS bits (icmp_send: RT_TOS(tos) | \
                IPTOS_PREC_INTERNETCONTROL)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C3-icmp-source",
        rfc: "RFC 1812 §4.3.2.4: the source MUST be an address of the interface the error is \
              sent on (which one is the router's choice)",
        what: "source address of ICMP errors",
        gannet: "the address of the port the datagram came in on (10.0.0.1)",
        linux: "the same with icmp_errors_use_inbound_ifaddr=1",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C4-icmp-quote",
        rfc: "RFC 1812 §4.3.2.3: SHOULD quote as much of the datagram as fits in 576 bytes \
              (RFC 792's minimum: header + 8 bytes)",
        what: "how much of the offending datagram an ICMP error quotes",
        gannet: "min(total length, 548) bytes: the error is at most 576 bytes",
        linux: "the same (icmp_send: room = 576 - 20 - 8)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C5-ts-value",
        rfc: "RFC 791 (Internet Timestamp), RFC 1812 §5.3.13.6: milliseconds since midnight UT, \
              or any time with the high-order bit set",
        what: "the timestamp values a router writes into a Timestamp option",
        gannet: "milliseconds since boot, high-order bit set (no UT clock)",
        linux: "milliseconds since midnight UT (inet_current_timestamp)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C6-directed-broadcast",
        rfc: "RFC 1812 §5.3.5.2: MAY forward directed broadcasts, MUST have an option to \
              disable it, which SHOULD default to forwarding (updated by RFC 2644: MUST default \
              to not forwarding)",
        what: "datagrams to 10.0.1.255 / 10.0.0.255 arriving as unicast frames",
        gannet: "dropped (router.drops.broadcast)",
        linux: "delivered locally, not forwarded (bc_forwarding=0)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C7-link-broadcast",
        rfc: "RFC 1812 §5.3.4: a unicast datagram in a link-layer broadcast SHOULD be silently \
              discarded",
        what: "IPv4 unicast in an Ethernet broadcast frame",
        gannet: "dropped (router.drops.link_broadcast)",
        linux: "dropped (ip_forward: pkt_type != PACKET_HOST)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C8-martians",
        rfc: "RFC 1812 §5.3.7: SHOULD NOT forward from 0/8, 127/8, multicast, broadcast sources \
              or to 0/8, 127/8 (switches allowed)",
        what: "martian sources and destinations",
        gannet: "dropped silently (martian_src / martian_dst)",
        linux: "dropped silently (martian source / destination in ip_route_input_slow)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C9-icmp-df",
        rfc: "RFC 1812 and RFC 791 are silent on DF in datagrams a router originates",
        what: "Don't Fragment flag of ICMP errors and echo replies",
        gannet: "clear",
        linux: "clear (ICMP sockets use IP_PMTUDISC_DONT)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C10-ts-address",
        rfc: "RFC 791 (Timestamp, flag 1): 'the internet address of the registering entity', \
              no interface named (Record Route, by contrast, records the outgoing one)",
        what: "the address a router records before its timestamp",
        gannet: "the address of the port the datagram came in on (10.0.0.1)",
        linux: "the same (ip_options_compile: spec_dst of the input route)",
        masked: false,
        linux_deviates: false,
    },
    Choice {
        id: "C11-icmp-error-options",
        rfc: "RFC 1812 §4.3.2 and RFC 792 do not say whether an ICMP error carries IP options \
              (only Echo Reply is asked to return Record Route/Timestamp, §4.3.3.6)",
        what: "IP options (and so IHL and total length) of an ICMP error about a datagram with \
               options",
        gannet: "none",
        linux: "the offending datagram's Record Route/Timestamp, updated with the router's \
                address (__ip_options_echo)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C12-icmp-quoted-options",
        rfc: "RFC 1812 §4.3.2.3: the quote is 'the original datagram'; whether options the \
              router already processed are quoted before or after is not specified",
        what: "the option bytes inside the quoted header of an ICMP error",
        gannet: "as received (the error is decided before options are processed)",
        linux: "after input processing (Record Route already holds the input address)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C13-strict-route-transit",
        rfc: "RFC 791 / RFC 1812 §5.3.13.4: a strict source route must go hop by hop; which \
              error a router it does not name sends is not specified (RFC 1122 §3.3.5 lists \
              Source Route Failed for a route that cannot be followed)",
        what: "a strict source route reaching a router it does not name",
        gannet: "Destination Unreachable, source route failed (3/5)",
        linux: "Parameter Problem pointing at the destination address (12/0, pointer 16; \
                ip_options_rcv_srr)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C14-frag-options",
        rfc: "RFC 791 §3.2 (fragmentation procedure) and §3.1 (copy flag): later fragments \
              carry only the options whose copy flag is set; how the header is laid out after \
              leaving the others out is not specified",
        what: "the IP options, and so IHL and total length, of the fragments after the first \
               of a datagram with options (the first fragment and every payload byte and \
               offset are compared)",
        gannet: "the copied options only, padded with End of Option List to a multiple of 4 \
                 (frag-opts-copy: 24 header bytes instead of 32; frag-opts-eol: 32 instead of \
                 40, Security and two EOL); a later fragment may so carry 8 more \
                 payload bytes than the first (the frame set's option cases have one later \
                 fragment, so the offsets agree)",
        linux: "the not-copied options overwritten with NOP, the header length kept \
                (ip_options_fragment)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "C15-arp-other-port-address",
        rfc: "RFC 826: a request is answered if its target protocol address is 'mine'; which \
              of a router's addresses are its own on which port is not said (RFC 1122 §3.3.4.2: \
              the strong and weak end-system models are both allowed)",
        what: "an ARP request on port 0 for the router's port-1 address 10.0.1.1",
        gannet: "not answered: each port answers for its own address only (strong model)",
        linux: "answered with port 0's MAC (arp_ignore=0: any local address, weak model)",
        masked: true,
        linux_deviates: false,
    },
    Choice {
        id: "X1-linux-zeronet-source",
        rfc: "RFC 1812 §5.3.7 and §4.2.2.11: a router SHOULD NOT forward a datagram with a \
              source address on network 0 ({0, <host>} is 'this host on this network', only \
              valid as a source during initialisation on the local net)",
        what: "source 0.0.0.5 (0/8 other than 0.0.0.0) to 10.0.1.2",
        gannet: "dropped (router.drops.martian_src)",
        linux: "forwarded: since Linux 5.3 (the 'unicast extensions' change) only 0.0.0.0 is a \
                martian source; the rest of 0/8 is routed. Linux deviates from RFC 1812 here",
        masked: true,
        linux_deviates: true,
    },
    Choice {
        id: "X2-linux-misroutes-after-source-route",
        rfc: "RFC 1812 §5.3.13.4 (source routes MUST be supported): a datagram to one of the \
              router's addresses is for the router",
        what: "the datagram to the router that follows a source-routed datagram to it",
        gannet: "delivered (here: the fence is answered)",
        linux: "observed on 6.1.0-57 with accept_source_route=1: forwarded out of the other \
                port with TTL - 1, ARP for 10.0.0.1 there fails, Host Unreachable about it \
                seconds later. Linux deviates; the harness sets fence frames aside \
                (Output::about_fence) and notes them",
        masked: true,
        linux_deviates: true,
    },
    Choice {
        id: "X3-linux-subnet-broadcast-source",
        rfc: "RFC 1812 §4.3.2.7: a router MUST NOT send an ICMP error about a datagram whose \
              source is not a unicast address (a directed broadcast is not); §5.3.7: SHOULD \
              NOT forward a datagram from a broadcast source; §4.3.3.6: echo replies only to \
              unicast sources",
        what: "datagrams from the incoming network's broadcast address 10.0.0.255 (TTL 64, TTL \
               1, an echo request to the router) and from its network address 10.0.0.0 (TTL 64)",
        gannet: "dropped without ICMP (router.drops.martian_src)",
        linux: "observed on 6.1.0-57 (rp_filter=0): from 10.0.0.255 forwarded, Time Exceeded \
                sent to 10.0.0.255, the echo request answered to 10.0.0.255; from 10.0.0.0 \
                forwarded (but no Time Exceeded, no echo reply). Linux deviates",
        masked: true,
        linux_deviates: true,
    },
];

/// The choice with this id (panics on an unknown id: a bug in this file).
pub fn choice(id: &str) -> &'static Choice {
    CHOICES
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no choice {id} in CHOICES"))
}

/// The choices table as Markdown (printed by the test, copied into the docs).
pub fn choices_markdown() -> String {
    let mut s = String::from(
        "| id | RFC | what | Gannet | Linux | compared |\n|---|---|---|---|---|---|\n",
    );
    for c in CHOICES {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            c.id,
            c.rfc,
            c.what,
            c.gannet,
            c.linux,
            match (c.masked, c.linux_deviates) {
                (_, true) => "no: Linux deviates, Gannet's output checked",
                (true, false) => "no",
                (false, false) => "yes",
            }
        ));
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The frame set

/// One crafted frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Short unique name (used in reports).
    pub name: &'static str,
    /// What RFC 1812 expects, for the reader of a report.
    pub expect: &'static str,
    /// The Ethernet frame (no FCS) sent into port [`Case::in_port`].
    pub frame: Vec<u8>,
    /// The port the frame is sent into (0, or 1 for the cases from the host behind port 1).
    pub in_port: usize,
    /// For a case whose outputs may differ as a whole ([`Choice::linux_deviates`]): the
    /// choice id and how many frames each router must emit (Gannet, Linux). The outputs are
    /// then checked against those counts instead of against each other.
    pub exception: Option<(&'static str, usize, usize)>,
}

/// An IPv4 datagram to build: the fields the frame set varies.
#[derive(Debug, Clone)]
pub struct Dgram {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ttl: u8,
    /// The whole TOS byte (DSCP << 2 | ECN).
    pub tos: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    /// Fragment offset in 8-byte units.
    pub frag: u16,
    /// Options (a multiple of 4 bytes, at most 40).
    pub options: Vec<u8>,
    pub body: Body,
}

/// The payload of a [`Dgram`].
#[derive(Debug, Clone)]
pub enum Body {
    /// UDP from port 10000 to port 9 (discard) with `n` pattern bytes and a valid checksum.
    Udp(usize),
    /// ICMP echo request with `id`, `seq` and `n` pattern bytes.
    Echo { id: u16, seq: u16, n: usize },
    /// An ICMP message of `type`/`code` with 4 zero bytes and `data` (e.g. an error).
    Icmp { ty: u8, code: u8, data: Vec<u8> },
    /// Raw protocol `proto` bytes (fragments carry these).
    Raw { proto: u8, data: Vec<u8> },
}

impl Dgram {
    /// A UDP datagram from 10.0.0.2 to `dst` with TTL 64 and `n` payload bytes.
    pub fn udp(dst: [u8; 4], n: usize) -> Dgram {
        Dgram {
            src: HOST_IP[0],
            dst,
            ttl: 64,
            tos: 0,
            id: 0x1000,
            df: false,
            mf: false,
            frag: 0,
            options: Vec::new(),
            body: Body::Udp(n),
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Builds the Ethernet frame of `d` from the host behind port 0 to `eth_dst`, with a correct
/// IPv4 header checksum (and UDP/ICMP checksum). Errors if a field is out of range (options not
/// a multiple of 4 or over 40 bytes, datagram over 65535 bytes).
pub fn build(eth_dst: [u8; 6], d: &Dgram) -> Result<Vec<u8>> {
    build_from(0, eth_dst, d)
}

/// [`build`] from the host behind port `port` (its MAC as the Ethernet source).
pub fn build_from(port: usize, eth_dst: [u8; 6], d: &Dgram) -> Result<Vec<u8>> {
    let (proto, mut payload) = match &d.body {
        Body::Udp(n) => (IpNumber::UDP, pattern(*n, 0x55)),
        Body::Echo { id, seq, n } => {
            let data = pattern(*n, 0x21);
            let h = Icmpv4Header::with_checksum(
                Icmpv4Type::EchoRequest(IcmpEchoHeader { id: *id, seq: *seq }),
                &data,
            );
            let mut v = Vec::new();
            h.write(&mut v)?;
            v.extend_from_slice(&data);
            (IpNumber::ICMP, v)
        }
        Body::Icmp { ty, code, data } => {
            let mut v = vec![*ty, *code, 0, 0, 0, 0, 0, 0];
            v.extend_from_slice(data);
            let c = checksum(&v);
            v[ICMP_CHECKSUM].copy_from_slice(&c.to_be_bytes());
            (IpNumber::ICMP, v)
        }
        Body::Raw { proto, data } => (IpNumber(*proto), data.clone()),
    };
    let mut ip = Ipv4Header::new(0, d.ttl, proto, d.src, d.dst)?;
    ip.dscp = IpDscp::try_new(d.tos >> 2)?;
    ip.ecn = IpEcn::try_new(d.tos & 3)?;
    ip.identification = d.id;
    ip.dont_fragment = d.df;
    ip.more_fragments = d.mf;
    ip.fragment_offset = IpFragOffset::try_new(d.frag)?;
    ip.options = Ipv4Options::try_from(&d.options[..])
        .map_err(|e| anyhow::anyhow!("options of {} bytes: {e}", d.options.len()))?;
    let udp_len = UdpHeader::LEN + payload.len();
    if let Body::Udp(_) = d.body {
        ip.set_payload_len(udp_len)?;
        let udp = UdpHeader {
            source_port: 10_000,
            destination_port: gen::UDP_DST_PORT,
            length: u16::try_from(udp_len)?,
            checksum: 0,
        };
        let csum = udp.calc_checksum_ipv4(&ip, &payload)?;
        let udp = UdpHeader {
            checksum: csum,
            ..udp
        };
        let mut v = Vec::new();
        udp.write(&mut v)?;
        v.extend_from_slice(&payload);
        payload = v;
    } else {
        ip.set_payload_len(payload.len())?;
    }
    ip.header_checksum = ip.calc_header_checksum();
    let mut f = Vec::with_capacity(ETH_HDR_LEN + ip.header_len() + payload.len());
    Ethernet2Header {
        destination: eth_dst,
        source: gen::peer_mac(port),
        ether_type: EtherType::IPV4,
    }
    .write(&mut f)?;
    ip.write(&mut f)?;
    f.extend_from_slice(&payload);
    Ok(f)
}

/// RFC 1071 checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A big-endian u16 field (`b` is its two bytes, e.g. `&ip[IPV4_TOTAL_LEN]`).
fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Rewrites the IPv4 header checksum of frame `f` (after a deliberate header change).
fn fix_ip_checksum(f: &mut [u8]) {
    let ip = &mut f[ETH_HDR_LEN..];
    let hl = usize::from(ip[IPV4_VER_IHL] & 0x0f) * 4;
    ip[IPV4_CHECKSUM].fill(0);
    let c = checksum(&ip[..hl]);
    ip[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
}

/// The ICMP echo request used as the fence after case `seq`.
pub fn fence(seq: u16) -> Vec<u8> {
    let d = Dgram {
        body: Body::Echo {
            id: FENCE_ID,
            seq,
            n: 8,
        },
        ..Dgram::udp(ROUTER_IP[0], 0)
    };
    build(gen::guest_mac(0), &d).expect("the fence frame builds")
}

/// How often an unanswered fence is sent again (a stack that must resolve 10.0.0.2 with ARP
/// before replying may drop the reply; smoltcp did, before the router answered echo itself).
pub const FENCE_RESEND: Duration = Duration::from_millis(1000);

/// An ARP request from 10.0.0.2 for the router's port-0 address, sent before the first fence
/// and with every resent one: lets a stack that learns neighbours from ARP aimed at it (smoltcp)
/// reach 10.0.0.2. Both routers answer it; the answer is ARP and left out.
pub fn arp_hello() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&gen::peer_mac(0));
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    // Ethernet/IPv4 (hardware type 1, protocol 0x0800, lengths 6 and 4), op request.
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&gen::peer_mac(0));
    f.extend_from_slice(&HOST_IP[0]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ROUTER_IP[0]);
    f.resize(ETH_ZLEN, 0);
    f
}

/// The fields of an Ethernet/IPv4 ARP frame (RFC 826).
struct ArpView<'a> {
    op: u16,
    sha: &'a [u8],
    spa: &'a [u8],
    tha: &'a [u8],
    tpa: &'a [u8],
}

/// `f`'s ARP fields, if it is an Ethernet/IPv4 ARP frame.
fn arp_fields(f: &[u8]) -> Option<ArpView<'_>> {
    let a = f.get(ETH_HDR_LEN..ETH_HDR_LEN + 28)?;
    (f[ETHERTYPE] == ETHERTYPE_ARP.to_be_bytes() && a[..6] == [0, 1, 0x08, 0x00, 6, 4]).then(|| {
        ArpView {
            op: be16(&a[6..8]),
            sha: &a[8..14],
            spa: &a[14..18],
            tha: &a[18..24],
            tpa: &a[24..28],
        }
    })
}

/// The harness's answer, as one of [`ARP_NEIGHBOURS`], to a router's ARP request on port 1.
fn neighbour_arp_reply(f: &[u8], port: usize) -> Option<Vec<u8>> {
    let a = arp_fields(f)?;
    let &(ip, mac) = ARP_NEIGHBOURS.iter().find(|n| n.0 == a.tpa)?;
    (port == 1 && a.op == 1).then(|| {
        let sha: [u8; 6] = a.sha.try_into().expect("6 bytes");
        let spa: [u8; 4] = a.spa.try_into().expect("4 bytes");
        arp_frame(2, sha, (mac, ip), (sha, spa))
    })
}

/// True if `f` is an ARP reply a router sent because of an ARP case (not one to the harness's
/// own ARP for 10.0.0.2 / 10.0.1.2).
fn is_case_arp_reply(f: &[u8], port: usize) -> bool {
    arp_fields(f).is_some_and(|a| a.op == 2 && a.tpa != HOST_IP[port])
}

/// True if `f` is an echo reply to a fence (any sequence number).
pub fn is_any_fence_reply(f: &[u8]) -> bool {
    fence_reply_seq(f).is_some()
}

/// True if `f` is the echo reply to the fence `seq`.
pub fn is_fence_reply(f: &[u8], seq: u16) -> bool {
    fence_reply_seq(f) == Some(seq)
}

/// Whether `f` is a fence's echo request leaving the router, or an ICMP error quoting one: a
/// frame the fence caused, not the case. (Linux 6.1 with `accept_source_route=1` misroutes the
/// next datagram to its own address after a source-routed datagram to it, so the fence after
/// such a case is forwarded and ARP for it fails: Host Unreachable about the fence, seconds
/// later.)
pub fn is_about_fence(f: &[u8]) -> bool {
    if !is_icmp(f) {
        return false;
    }
    let ip = &f[ETH_HDR_LEN..];
    let hl = usize::from(ip[IPV4_VER_IHL] & 0x0f) * 4;
    let echo_of_fence = |icmp: &[u8]| {
        icmp.len() >= ICMP_ECHO_IDENT.end
            && icmp[ICMP_TYPE] == 8
            && be16(&icmp[ICMP_ECHO_IDENT]) == FENCE_ID
    };
    let Some(icmp) = ip.get(hl..) else {
        return false;
    };
    if echo_of_fence(icmp) {
        return true;
    }
    if icmp.len() < ICMP_HDR_LEN + IPV4_MIN_HDR || !matches!(icmp[ICMP_TYPE], 3 | 4 | 5 | 11 | 12) {
        return false;
    }
    let quote = &icmp[ICMP_HDR_LEN..];
    let qhl = usize::from(quote[IPV4_VER_IHL] & 0x0f) * 4;
    quote[IPV4_PROTOCOL] == IPPROTO_ICMP && quote.get(qhl..).is_some_and(echo_of_fence)
}

/// Whether `f` is an Ethernet frame with an IPv4 header (at least the fixed 20 bytes) carrying
/// ICMP.
fn is_icmp(f: &[u8]) -> bool {
    f.len() >= ETH_HDR_LEN + IPV4_MIN_HDR
        && f[ETHERTYPE] == ETHERTYPE_IPV4.to_be_bytes()
        && f[ETH_HDR_LEN + IPV4_PROTOCOL] == IPPROTO_ICMP
}

/// The sequence number of a fence's echo reply.
fn fence_reply_seq(f: &[u8]) -> Option<u16> {
    if !is_icmp(f) {
        return None;
    }
    let ip = &f[ETH_HDR_LEN..];
    let hl = usize::from(ip[IPV4_VER_IHL] & 0x0f) * 4;
    let icmp = ip.get(hl..hl + ICMP_HDR_LEN)?;
    (icmp[ICMP_TYPE] == 0 && be16(&icmp[ICMP_ECHO_IDENT]) == FENCE_ID)
        .then(|| be16(&icmp[ICMP_ECHO_SEQ]))
}

/// The crafted frame set, in sending order. Every frame enters port 0 from 10.0.0.2
/// (`02:00:00:00:0a:02`) unless its name says otherwise. Covers: valid UDP and ICMP echo; TTL
/// 0, 1, 2, 255; bad header checksum; total length beyond the frame and below the header; IHL
/// below 5; version 6; IP options (NOP, Record Route, Timestamp in three forms, an unknown
/// option); fragments; martian sources and destinations; limited and directed broadcast;
/// Ethernet broadcast and multicast; a frame for another MAC; no route; TTL expiry of a large
/// datagram (the 576-byte quote) and of a datagram with Record Route; a malformed Record Route
/// (Parameter Problem); fragmentation at port 1's MTU 576 (DF clear with and without options,
/// at and just above the MTU, already fragmented datagrams) and Fragmentation Needed (DF set);
/// ICMP errors about ICMP errors and non-first fragments (none allowed);
/// echo requests to the router itself (both addresses, a precedence, Record Route).
///
/// Errors only if a frame cannot be built (a bug in this function).
pub fn frame_set() -> Result<Vec<Case>> {
    let us = gen::guest_mac(0);
    let to1 = HOST_IP[1];
    let mut v = Vec::new();
    let mut add = |name, expect, frame| {
        v.push(Case {
            name,
            expect,
            frame,
            in_port: 0,
            exception: None,
        })
    };
    let udp = |dst: [u8; 4], n: usize| Dgram::udp(dst, n);

    add(
        "udp",
        "forwarded out of port 1, TTL 63",
        build(us, &udp(to1, 64))?,
    );
    add(
        "icmp-echo",
        "forwarded, TTL 63",
        build(
            us,
            &Dgram {
                body: Body::Echo {
                    id: 7,
                    seq: 1,
                    n: 56,
                },
                ..udp(to1, 0)
            },
        )?,
    );
    add(
        "udp-1472",
        "a full-size (1500-byte) datagram into port 1's MTU 576: three fragments (552, 552 and \
         376 payload bytes, offsets 0, 69, 138, MF on the first two), ID kept, TTL 63 (RFC 791 \
         §3.2)",
        build(us, &udp(to1, 1472))?,
    );
    add(
        "udp-short-padded",
        "a 29-byte datagram in a 60-byte frame: forwarded",
        {
            let mut f = build(us, &udp(to1, 1))?;
            f.resize(60, 0);
            f
        },
    );
    add(
        "tos-ef-ecn",
        "TOS 0xb9 (DSCP 46, ECT(1)) kept (RFC 1812 §5.3.2)",
        build(
            us,
            &Dgram {
                tos: 0xb9,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "df",
        "DF kept",
        build(
            us,
            &Dgram {
                df: true,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "mtu-exact",
        "a 576-byte datagram (exactly port 1's MTU): forwarded unchanged",
        build(us, &udp(to1, 548))?,
    );
    add(
        "mtu-plus-1",
        "a 577-byte datagram: two fragments, 552 payload bytes and 5 (RFC 791 §3.2)",
        build(
            us,
            &Dgram {
                id: 0x3000,
                ..udp(to1, 549)
            },
        )?,
    );
    add(
        "frag-df-clear",
        "a 1028-byte datagram, DF clear: fragments of 552 and 456 payload bytes, offsets 0 and \
         69, MF on the first, ID 0x3001 and TOS kept, TTL 63, checksums valid",
        build(
            us,
            &Dgram {
                id: 0x3001,
                tos: 0x28,
                ..udp(to1, 1000)
            },
        )?,
    );
    add(
        "frag-opts-copy",
        "a 1000-byte datagram with Record Route (copy flag clear) and Stream ID (set), DF \
         clear: the first fragment carries both (10.0.1.1 recorded), the second only Stream ID \
         (RFC 791 §3.1/§3.2; its layout is choice C14-frag-options)",
        build(
            us,
            &Dgram {
                id: 0x3002,
                options: vec![7, 7, 4, 0, 0, 0, 0, 1, 136, 4, 0x12, 0x34],
                ..udp(to1, 960)
            },
        )?,
    );
    add(
        "frag-opts-eol",
        "a 1008-byte datagram with Record Route and Security (copied, 11 bytes), DF clear: the \
         second fragment carries Security padded to 12 bytes with End of Option List (RFC 791 \
         §3.2; choice C14-frag-options)",
        build(
            us,
            &Dgram {
                id: 0x3006,
                options: vec![
                    7, 7, 4, 0, 0, 0, 0, 130, 11, 0xf1, 0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ],
                ..udp(to1, 960)
            },
        )?,
    );
    add(
        "frag-df-set",
        "a 1028-byte datagram with DF set: Destination Unreachable, fragmentation needed (3/4) \
         with next-hop MTU 576 (RFC 1191 §4, RFC 1812 §5.2.7.1), nothing forwarded",
        build(
            us,
            &Dgram {
                id: 0x3003,
                df: true,
                ..udp(to1, 1000)
            },
        )?,
    );
    add(
        "refrag-middle",
        "a middle fragment (MF, offset 100) of 1220 bytes: fragmented again, offsets 100, 169, \
         238, MF on all three (RFC 791 §3.2)",
        build(
            us,
            &Dgram {
                id: 0x3004,
                mf: true,
                frag: 100,
                body: Body::Raw {
                    proto: 17,
                    data: pattern(1200, 4),
                },
                ..udp(to1, 0)
            },
        )?,
    );
    add(
        "refrag-last",
        "a last fragment (MF clear, offset 50) of 720 bytes: fragmented again, offsets 50 and \
         119, MF on the first only",
        build(
            us,
            &Dgram {
                id: 0x3005,
                frag: 50,
                body: Body::Raw {
                    proto: 17,
                    data: pattern(700, 5),
                },
                ..udp(to1, 0)
            },
        )?,
    );
    add(
        "ttl-255",
        "forwarded, TTL 254",
        build(
            us,
            &Dgram {
                ttl: 255,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-2",
        "forwarded, TTL 1",
        build(
            us,
            &Dgram {
                ttl: 2,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-1",
        "Time Exceeded (11/0) back to 10.0.0.2 (RFC 1812 §5.3.1)",
        build(
            us,
            &Dgram {
                ttl: 1,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-0",
        "Time Exceeded (11/0)",
        build(
            us,
            &Dgram {
                ttl: 0,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-1-tos",
        "Time Exceeded; the error's TOS bits are choice C2",
        build(
            us,
            &Dgram {
                ttl: 1,
                tos: 0x10,
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-1-large",
        "Time Exceeded quoting 548 bytes of a 1500-byte datagram (RFC 1812 §4.3.2.3)",
        build(
            us,
            &Dgram {
                ttl: 1,
                ..udp(to1, 1472)
            },
        )?,
    );
    add(
        "no-route",
        "Destination Unreachable, net (3/0) (RFC 1812 §5.2.7.1)",
        build(us, &udp([192, 0, 2, 1], 32))?,
    );
    add(
        "no-route-large",
        "Destination Unreachable quoting 548 bytes",
        build(us, &udp([192, 0, 2, 1], 1000))?,
    );
    add(
        "no-route-icmp-error",
        "no ICMP error about an ICMP error (RFC 1812 §4.3.2.7)",
        build(
            us,
            &Dgram {
                body: Body::Icmp {
                    ty: 3,
                    code: 1,
                    data: pattern(28, 3),
                },
                ..udp([192, 0, 2, 1], 0)
            },
        )?,
    );
    add("bad-checksum", "silently discarded (RFC 1812 §5.2.2)", {
        let mut f = build(us, &udp(to1, 32))?;
        f[ETH_HDR_LEN + IPV4_CHECKSUM.start] ^= 0x5a;
        f
    });
    add(
        "total-len-beyond-frame",
        "silently discarded (RFC 1812 §5.2.2)",
        {
            let mut f = build(us, &udp(to1, 32))?;
            let ip = &mut f[ETH_HDR_LEN..];
            let tl = be16(&ip[IPV4_TOTAL_LEN]) + 40;
            ip[IPV4_TOTAL_LEN].copy_from_slice(&tl.to_be_bytes());
            fix_ip_checksum(&mut f);
            f
        },
    );
    add(
        "total-len-below-header",
        "silently discarded (RFC 1812 §5.2.2)",
        {
            let mut f = build(us, &udp(to1, 32))?;
            f[ETH_HDR_LEN..][IPV4_TOTAL_LEN].copy_from_slice(&16u16.to_be_bytes());
            fix_ip_checksum(&mut f);
            f
        },
    );
    add("ihl-4", "silently discarded (RFC 1812 §5.2.2)", {
        let mut f = build(us, &udp(to1, 32))?;
        let ip = &mut f[ETH_HDR_LEN..];
        ip[IPV4_VER_IHL] = 0x44;
        // Checksum over the 16 bytes IHL claims.
        ip[IPV4_CHECKSUM].fill(0);
        let c = checksum(&ip[..16]);
        ip[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
        f
    });
    add("version-6", "silently discarded (RFC 1812 §5.2.2)", {
        let mut f = build(us, &udp(to1, 32))?;
        f[ETH_HDR_LEN + IPV4_VER_IHL] = 0x65;
        fix_ip_checksum(&mut f);
        f
    });
    add(
        "opt-nop-rr",
        "Record Route: 10.0.1.1 (outgoing interface) recorded, pointer 4 -> 8 (RFC 1812 \
         §5.3.13.5, RFC 791)",
        build(
            us,
            &Dgram {
                options: vec![1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-rr-full",
        "Record Route with no room: forwarded with the option unchanged (RFC 791)",
        build(
            us,
            &Dgram {
                options: vec![7, 7, 8, 10, 9, 9, 9, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-ts-only",
        "Timestamp (flag 0): one timestamp added, pointer 5 -> 9 (RFC 1812 §5.3.13.6)",
        build(
            us,
            &Dgram {
                options: vec![68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-ts-addr",
        "Timestamp (flag 1): 10.0.1.1 and a timestamp added, pointer 5 -> 13",
        build(
            us,
            &Dgram {
                options: vec![68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-ts-prespec",
        "Timestamp (flag 3) naming 10.0.1.1 then 192.0.2.9: the router stamps its own entry \
         only, pointer 5 -> 13",
        build(
            us,
            &Dgram {
                options: vec![
                    68, 20, 5, 3, 10, 0, 1, 1, 0, 0, 0, 0, 192, 0, 2, 9, 0, 0, 0, 0,
                ],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-ts-full",
        "Timestamp with no room: overflow count 0 -> 1, otherwise unchanged (RFC 791)",
        build(
            us,
            &Dgram {
                options: vec![68, 8, 9, 0, 0x12, 0x34, 0x56, 0x78],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-rr-bad-pointer",
        "Record Route with pointer 3: discarded, Parameter Problem pointing at byte 22 (RFC 1812 \
         §4.3.3.5, RFC 791)",
        build(
            us,
            &Dgram {
                options: vec![7, 7, 3, 0, 0, 0, 0, 1],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ttl-1-rr",
        "Time Exceeded about a datagram with Record Route",
        build(
            us,
            &Dgram {
                ttl: 1,
                options: vec![1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "echo-to-router-rr",
        "echo request with Record Route to the router",
        build(
            us,
            &Dgram {
                options: vec![1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0],
                body: Body::Echo {
                    id: 0x1237,
                    seq: 12,
                    n: 32,
                },
                ..udp(ROUTER_IP[0], 0)
            },
        )?,
    );
    for (name, ty, expect) in [
        (
            "lsrr-via-router",
            131u8,
            "loose source route sent to 10.0.0.1 listing 10.0.1.2: forwarded to 10.0.1.2, \
             10.0.1.1 recorded, pointer 4 -> 8 (RFC 1812 §5.3.13.4, RFC 791)",
        ),
        (
            "ssrr-via-router",
            137,
            "strict source route to 10.0.0.1 listing the directly connected 10.0.1.2: the same",
        ),
    ] {
        add(
            name,
            expect,
            build(
                us,
                &Dgram {
                    options: vec![1, ty, 7, 4, 10, 0, 1, 2],
                    ..udp(ROUTER_IP[0], 32)
                },
            )?,
        );
    }
    add(
        "lsrr-transit",
        "loose source route not naming this router: forwarded like any datagram",
        build(
            us,
            &Dgram {
                options: vec![1, 131, 7, 4, 192, 0, 2, 9],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ssrr-transit",
        "strict source route not naming this router: one ICMP error each (choice C13)",
        build(
            us,
            &Dgram {
                options: vec![1, 137, 7, 4, 192, 0, 2, 9],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "opt-unknown",
        "an unknown option passed through unchanged (RFC 1812 §5.3.13.1)",
        build(
            us,
            &Dgram {
                options: vec![0x5e, 4, 0xab, 0xcd],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ts-short-length",
        "Timestamp option whose length (3) is below its minimum: Parameter Problem at the \
         length byte (RFC 1812 §4.3.3.5, RFC 791)",
        build(
            us,
            &Dgram {
                options: vec![68, 3, 5, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "ts-bad-pointer",
        "Timestamp option with pointer 3 (below 5): Parameter Problem at the pointer byte",
        build(
            us,
            &Dgram {
                options: vec![68, 8, 3, 0, 0, 0, 0, 0],
                ..udp(to1, 32)
            },
        )?,
    );
    add(
        "frag-first",
        "first fragment (MF, offset 0) forwarded as is (no reassembly)",
        build(
            us,
            &Dgram {
                mf: true,
                id: 0x2222,
                ..udp(to1, 64)
            },
        )?,
    );
    add(
        "frag-middle",
        "middle fragment (MF, offset 185) forwarded as is",
        build(
            us,
            &Dgram {
                mf: true,
                id: 0x2223,
                frag: 185,
                body: Body::Raw {
                    proto: 17,
                    data: pattern(64, 9),
                },
                ..udp(to1, 0)
            },
        )?,
    );
    add(
        "frag-last-ttl-1",
        "non-first fragment with TTL 1: discarded, no ICMP error (RFC 1812 §4.3.2.7)",
        build(
            us,
            &Dgram {
                ttl: 1,
                id: 0x2224,
                frag: 8,
                body: Body::Raw {
                    proto: 17,
                    data: pattern(40, 1),
                },
                ..udp(to1, 0)
            },
        )?,
    );
    for (name, src) in [
        ("martian-src-127", [127, 0, 0, 1]),
        ("martian-src-224", [224, 0, 0, 5]),
        ("martian-src-255", [255, 255, 255, 255]),
    ] {
        add(
            name,
            "silently discarded (RFC 1812 §5.3.7, choice C8-martians)",
            build(
                us,
                &Dgram {
                    src,
                    ..udp(to1, 32)
                },
            )?,
        );
    }
    // Issue 15 item 4: sources that are the incoming network's broadcast or network address,
    // or the router's own address on that port. RFC 1812 §4.3.2.7: no ICMP error for a
    // datagram whose source is not a unicast address; §5.3.7: not forwarded.
    for (ttl1, ttl64, echo, src) in [
        (
            "src-net-broadcast-ttl1",
            "src-net-broadcast",
            "src-net-broadcast-echo",
            [10, 0, 0, 255],
        ),
        (
            "src-net-zero-ttl1",
            "src-net-zero",
            "src-net-zero-echo",
            [10, 0, 0, 0],
        ),
        (
            "src-own-address-ttl1",
            "src-own-address",
            "src-own-address-echo",
            ROUTER_IP[0],
        ),
    ] {
        add(
            ttl1,
            "TTL 1 from a non-unicast or own source: no Time Exceeded (RFC 1812 §4.3.2.7), discarded",
            build(
                us,
                &Dgram {
                    src,
                    ttl: 1,
                    ..udp(to1, 32)
                },
            )?,
        );
        add(
            ttl64,
            "from a non-unicast or own source: not forwarded (RFC 1812 §5.3.7, choice C8-martians)",
            build(
                us,
                &Dgram {
                    src,
                    ..udp(to1, 32)
                },
            )?,
        );
        add(
            echo,
            "echo request from a non-unicast or own source: no reply (RFC 1812 §4.3.2.7 / §5.3.7)",
            build(
                us,
                &Dgram {
                    src,
                    body: Body::Echo {
                        id: 0x5151,
                        seq: 1,
                        n: 16,
                    },
                    ..udp(ROUTER_IP[0], 0)
                },
            )?,
        );
    }
    add(
        "martian-dst-0",
        "destination 0.0.0.0: discarded (RFC 1812 §5.3.7, choice C8-martians)",
        build(us, &udp([0, 0, 0, 0], 32))?,
    );
    add(
        "martian-dst-127",
        "destination 127.0.0.1: discarded (RFC 1812 §5.3.7, choice C8-martians)",
        build(us, &udp([127, 0, 0, 1], 32))?,
    );
    add(
        "limited-broadcast",
        "255.255.255.255 in an Ethernet broadcast: not forwarded (RFC 1812 §5.3.5.1)",
        build([0xff; 6], &udp([255, 255, 255, 255], 32))?,
    );
    add(
        "directed-broadcast-1",
        "10.0.1.255 as unicast to the router: not forwarded (choice C6-directed-broadcast)",
        build(us, &udp([10, 0, 1, 255], 32))?,
    );
    add(
        "directed-broadcast-0",
        "10.0.0.255 (the incoming network's broadcast): not forwarded (RFC 1812 §5.3.5.2)",
        build(us, &udp([10, 0, 0, 255], 32))?,
    );
    add(
        "eth-broadcast-unicast-ip",
        "unicast IP in an Ethernet broadcast: discarded (RFC 1812 §5.3.4, choice C7-link-broadcast)",
        build([0xff; 6], &udp(to1, 32))?,
    );
    add(
        "multicast",
        "239.1.1.1 in an Ethernet multicast frame: not forwarded (no multicast routing)",
        build(
            [0x01, 0x00, 0x5e, 0x01, 0x01, 0x01],
            &udp([239, 1, 1, 1], 32),
        )?,
    );
    add(
        "other-mac",
        "Ethernet destination another host's MAC: not received",
        build([0x02, 0, 0, 0, 0, 0x77], &udp(to1, 32))?,
    );
    add(
        "echo-to-router",
        "echo reply from 10.0.0.1 (RFC 1812 §4.3.3.6)",
        build(
            us,
            &Dgram {
                body: Body::Echo {
                    id: 0x1234,
                    seq: 9,
                    n: 32,
                },
                ..udp(ROUTER_IP[0], 0)
            },
        )?,
    );
    add(
        "echo-to-router-precedence",
        "echo reply with the request's precedence (RFC 1812 §4.3.2.5: MUST)",
        build(
            us,
            &Dgram {
                tos: 0xa0,
                body: Body::Echo {
                    id: 0x1235,
                    seq: 10,
                    n: 32,
                },
                ..udp(ROUTER_IP[0], 0)
            },
        )?,
    );
    add(
        "echo-to-router-port1-address",
        "echo reply from 10.0.1.1, the router's other address (RFC 1812 §4.3.3.6: a router \
         MUST answer echo requests to it; RFC 1122 §3.2.2.6: from the address pinged)",
        build(
            us,
            &Dgram {
                body: Body::Echo {
                    id: 0x1236,
                    seq: 11,
                    n: 32,
                },
                ..udp(ROUTER_IP[1], 0)
            },
        )?,
    );
    // Cases whose outputs are checked against each router's documented behaviour instead of
    // against each other.
    for c in &mut v {
        if c.name == "ssrr-transit" {
            c.exception = Some(("C13-strict-route-transit", 1, 1));
        }
        if matches!(
            c.name,
            "src-net-broadcast-ttl1"
                | "src-net-broadcast"
                | "src-net-broadcast-echo"
                | "src-net-zero"
        ) {
            c.exception = Some(("X3-linux-subnet-broadcast-source", 0, 1));
        }
    }
    v.push(Case {
        name: "martian-src-0",
        expect: "source 0.0.0.5: discarded (RFC 1812 §5.3.7); Linux forwards it (exception X1)",
        frame: build(
            us,
            &Dgram {
                src: [0, 0, 0, 5],
                ..udp(to1, 32)
            },
        )?,
        in_port: 0,
        exception: Some(("X1-linux-zeronet-source", 0, 1)),
    });
    arp_cases(&mut v)?;
    from_port1(&mut v)?;
    Ok(v)
}

/// A host on port 0's network that only the ARP cases use (its address and MAC), so the
/// routers' replies to it are told apart from those to the harness's own ARP (10.0.0.2).
const ARP_ASKER: ([u8; 4], [u8; 6]) = ([10, 0, 0, 66], [0x02, 0, 0, 0, 0x66, 0x01]);

/// Neighbours on port 1's network that the harness answers ARP for besides 10.0.1.2, with the
/// MAC it answers: each ARP case first tells the routers another MAC for the same address
/// (in a request, an unsolicited reply or a gratuitous request), so the MAC a datagram to it
/// then leaves with shows whether the router learned from that frame (issue 15, Linux's
/// `arp_process` with `arp_accept=0`).
pub const ARP_NEIGHBOURS: [([u8; 4], [u8; 6]); 3] = [
    ([10, 0, 1, 77], [0x02, 0, 0, 0, 0x77, 0xbb]),
    ([10, 0, 1, 78], [0x02, 0, 0, 0, 0x78, 0xbb]),
    ([10, 0, 1, 79], [0x02, 0, 0, 0, 0x79, 0xbb]),
];

/// An Ethernet/IPv4 ARP frame (RFC 826) from `sha`, padded to the minimum frame.
fn arp_frame(
    op: u16,
    eth_dst: [u8; 6],
    (sha, spa): ([u8; 6], [u8; 4]),
    (tha, tpa): ([u8; 6], [u8; 4]),
) -> Vec<u8> {
    let mut f = eth_dst.to_vec();
    f.extend_from_slice(&sha);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&sha);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&tha);
    f.extend_from_slice(&tpa);
    f.resize(ETH_ZLEN, 0);
    f
}

/// Issue 15: ARP compared with Linux's `arp_process` (the routers' ARP replies are compared
/// field by field, [`dissect`]): which requests get a reply, and, through a datagram to the
/// sender right after, which frames create a neighbour entry.
fn arp_cases(v: &mut Vec<Case>) -> Result<()> {
    const REQUEST: u16 = 1;
    const REPLY: u16 = 2;
    let (us0, us1) = (gen::guest_mac(0), gen::guest_mac(1));
    let (ask_ip, ask_mac) = ARP_ASKER;
    let bcast = [0xff; 6];
    let request0 =
        |spa: [u8; 4], tpa: [u8; 4]| arp_frame(REQUEST, bcast, (ask_mac, spa), ([0; 6], tpa));
    let learned_mac = |i: usize| {
        let mut m = ARP_NEIGHBOURS[i].1;
        m[5] = 0xaa;
        m
    };
    let to = |dst: [u8; 4]| build(us0, &Dgram::udp(dst, 32));
    let cases: Vec<(&'static str, &'static str, Vec<u8>, usize)> = vec![
        (
            "arp-req-router",
            "ARP request for 10.0.0.1 from 10.0.0.66: answered (RFC 826)",
            request0(ask_ip, ROUTER_IP[0]),
            0,
        ),
        (
            "arp-req-not-ours",
            "ARP request for 10.0.0.77 (no router address): no reply",
            request0(ask_ip, [10, 0, 0, 77]),
            0,
        ),
        (
            "arp-req-other-port-addr",
            "ARP request on port 0 for 10.0.1.1 (the router's port-1 address)",
            request0(ask_ip, ROUTER_IP[1]),
            0,
        ),
        (
            "arp-probe",
            "ARP probe (sender 0.0.0.0, RFC 5227 §2.1.1) for 10.0.0.1: answered",
            request0([0; 4], ROUTER_IP[0]),
            0,
        ),
        (
            "arp-req-offsubnet-sender",
            "ARP request for 10.0.0.1 from 192.0.2.9 (not on the port's network)",
            request0([192, 0, 2, 9], ROUTER_IP[0]),
            0,
        ),
        (
            "arp-req-broadcast-sender",
            "ARP request for 10.0.0.1 from 10.0.0.255 (the network's broadcast address): \
             answered (as Linux does), no entry made",
            request0([10, 0, 0, 255], ROUTER_IP[0]),
            0,
        ),
        (
            "arp-req-learns",
            "ARP request for 10.0.1.1 from 10.0.1.77: answered, and the sender learned",
            arp_frame(
                REQUEST,
                bcast,
                (learned_mac(0), ARP_NEIGHBOURS[0].0),
                ([0; 6], ROUTER_IP[1]),
            ),
            1,
        ),
        (
            "to-arp-requester",
            "to 10.0.1.77: forwarded to the MAC its ARP request gave (no ARP first)",
            to(ARP_NEIGHBOURS[0].0)?,
            0,
        ),
        (
            "arp-unsolicited-reply",
            "an ARP reply nobody asked for, from 10.0.1.78: no output",
            arp_frame(
                REPLY,
                us1,
                (learned_mac(1), ARP_NEIGHBOURS[1].0),
                (us1, ROUTER_IP[1]),
            ),
            1,
        ),
        (
            "to-unsolicited",
            "to 10.0.1.78: the unsolicited reply created no entry (arp_accept=0): resolved by \
             ARP, forwarded to the MAC the answer gave",
            to(ARP_NEIGHBOURS[1].0)?,
            0,
        ),
        (
            "arp-gratuitous",
            "a gratuitous ARP request from 10.0.1.79 (sender = target): no output",
            arp_frame(
                REQUEST,
                bcast,
                (learned_mac(2), ARP_NEIGHBOURS[2].0),
                ([0; 6], ARP_NEIGHBOURS[2].0),
            ),
            1,
        ),
        (
            "to-gratuitous",
            "to 10.0.1.79: the gratuitous ARP created no entry (arp_accept=0): resolved by ARP",
            to(ARP_NEIGHBOURS[2].0)?,
            0,
        ),
    ];
    for (name, expect, frame, in_port) in cases {
        v.push(Case {
            name,
            expect,
            frame,
            in_port,
            exception: (name == "arp-req-other-port-addr").then_some((
                "C15-arp-other-port-address",
                0,
                1,
            )),
        });
    }
    Ok(())
}

/// Cases sent into port 1 by the host behind it (10.0.1.2): the mirror of a few port-0 cases,
/// so both directions and the port-1 address are compared.
fn from_port1(v: &mut Vec<Case>) -> Result<()> {
    let us = gen::guest_mac(1);
    let from1 = |dst: [u8; 4], n: usize| Dgram {
        src: HOST_IP[1],
        ..Dgram::udp(dst, n)
    };
    let cases: [(&'static str, &'static str, Dgram); 4] = [
        (
            "p1-udp",
            "from port 1: forwarded out of port 0, TTL 63",
            from1(HOST_IP[0], 64),
        ),
        (
            "p1-ttl-1",
            "from port 1 with TTL 1: Time Exceeded out of port 1, from 10.0.1.1",
            Dgram {
                ttl: 1,
                ..from1(HOST_IP[0], 32)
            },
        ),
        (
            "p1-no-route",
            "from port 1 to 192.0.2.1: Net Unreachable out of port 1",
            from1([192, 0, 2, 1], 32),
        ),
        (
            "p1-echo-to-router",
            "echo request to 10.0.1.1 from port 1: answered out of port 1",
            Dgram {
                body: Body::Echo {
                    id: 0x1301,
                    seq: 1,
                    n: 32,
                },
                ..from1(ROUTER_IP[1], 0)
            },
        ),
    ];
    for (name, expect, d) in cases {
        v.push(Case {
            name,
            expect,
            frame: build_from(1, us, &d)?,
            in_port: 1,
            exception: None,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Dissection and comparison

/// One named field of an output frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Dotted name, e.g. `ip.ttl`, `icmp.quote`.
    pub name: String,
    /// Printable value.
    pub value: String,
    /// Set when RFC 1812 lets the router choose this field: the [`Choice::id`].
    pub choice: Option<&'static str>,
}

fn field(v: &mut Vec<Field>, name: &str, value: impl ToString, choice: Option<&'static str>) {
    v.push(Field {
        name: name.to_string(),
        value: value.to_string(),
        choice,
    });
}

fn ip4(b: &[u8]) -> String {
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Whether `ip` is one of the router's own addresses (frames from it are router-originated).
fn is_router_ip(ip: &[u8]) -> bool {
    ROUTER_IP.iter().any(|r| r[..] == ip[..4])
}

/// The IPv4 options as fields: Record Route and Timestamp field by field (Timestamp values are
/// choice C5-ts-value), anything else as raw bytes; with `all`, every field carries that choice.
fn dissect_options(v: &mut Vec<Field>, opts: &[u8], all: Option<&'static str>) {
    let start = v.len();
    dissect_options_inner(v, opts);
    if let Some(id) = all {
        for f in &mut v[start..] {
            f.choice = Some(id);
        }
    }
}

fn dissect_options_inner(v: &mut Vec<Field>, opts: &[u8]) {
    let mut i = 0;
    while i < opts.len() {
        let ty = opts[i];
        if ty == 0 || ty == 1 {
            field(
                v,
                &format!("ip.opt[{i}]"),
                if ty == 0 { "EOL" } else { "NOP" },
                None,
            );
            i += 1;
            if ty == 0 {
                field(v, "ip.opt.after_eol", hex(&opts[i..]), None);
                return;
            }
            continue;
        }
        let len = usize::from(*opts.get(i + 1).unwrap_or(&0));
        if len < 2 || i + len > opts.len() {
            field(v, &format!("ip.opt[{i}].malformed"), hex(&opts[i..]), None);
            return;
        }
        let o = &opts[i..i + len];
        let p = format!("ip.opt[{i}]");
        match ty {
            68 if len >= 4 => {
                let flags = o[3] & 0x0f;
                field(v, &format!("{p}.ts.len"), len, None);
                field(v, &format!("{p}.ts.pointer"), o[2], None);
                field(v, &format!("{p}.ts.overflow"), o[3] >> 4, None);
                field(v, &format!("{p}.ts.flags"), flags, None);
                let step = if flags == 0 { 4 } else { 8 };
                let mut k = 4;
                while k + step <= len {
                    let filled = k < usize::from(o[2]).saturating_sub(1);
                    let mut ts_at = k;
                    if flags != 0 {
                        field(v, &format!("{p}.ts[{k}].addr"), ip4(&o[k..k + 4]), None);
                        ts_at = k + 4;
                    }
                    let ts = &o[ts_at..ts_at + 4];
                    // A filled slot's value is the router's clock (choice C5-ts-value); an empty
                    // slot must stay as sent.
                    field(
                        v,
                        &format!("{p}.ts[{k}].time"),
                        hex(ts),
                        filled.then_some("C5-ts-value"),
                    );
                    k += step;
                }
                if k < len {
                    field(v, &format!("{p}.ts.tail"), hex(&o[k..]), None);
                }
            }
            7 | 131 | 137 if len >= 3 => {
                field(v, &format!("{p}.type"), ty, None);
                field(v, &format!("{p}.len"), len, None);
                field(v, &format!("{p}.pointer"), o[2], None);
                let mut k = 3;
                while k + 4 <= len {
                    field(v, &format!("{p}.addr[{k}]"), ip4(&o[k..k + 4]), None);
                    k += 4;
                }
                if k < len {
                    field(v, &format!("{p}.tail"), hex(&o[k..]), None);
                }
            }
            _ => field(v, &format!("{p}.raw"), hex(o), None),
        }
        i += len;
    }
}

/// Splits an output frame into named fields: Ethernet, IPv4 (checksum as valid/invalid, options
/// field by field), then the payload; for ICMP errors the type, code, the rest of the header,
/// how many bytes are quoted and the quoted bytes; for other ICMP the header fields and data.
/// Fields of router-originated datagrams (source 10.0.0.1 or 10.0.1.1) that RFC 1812 leaves to
/// the router carry the choice id. Never panics: whatever cannot be parsed becomes a `raw`
/// field.
pub fn dissect(f: &[u8]) -> Vec<Field> {
    let mut v = Vec::new();
    if f.len() < ETH_HDR_LEN {
        field(&mut v, "raw", hex(f), None);
        return v;
    }
    field(&mut v, "eth.dst", hex(&f[ETH_DST]), None);
    field(&mut v, "eth.src", hex(&f[ETH_SRC]), None);
    field(&mut v, "eth.type", hex(&f[ETHERTYPE]), None);
    if let Some(a) = arp_fields(f) {
        // The padding after the 28 ARP bytes is not compared.
        field(&mut v, "arp.op", a.op, None);
        field(&mut v, "arp.sha", hex(a.sha), None);
        field(&mut v, "arp.spa", ip4(a.spa), None);
        field(&mut v, "arp.tha", hex(a.tha), None);
        field(&mut v, "arp.tpa", ip4(a.tpa), None);
        return v;
    }
    let ip = &f[ETH_HDR_LEN..];
    if f[ETHERTYPE] != ETHERTYPE_IPV4.to_be_bytes() || ip.len() < IPV4_MIN_HDR {
        field(&mut v, "eth.payload", hex(ip), None);
        return v;
    }
    let hl = usize::from(ip[IPV4_VER_IHL] & 0x0f) * 4;
    let tl = usize::from(be16(&ip[IPV4_TOTAL_LEN]));
    if hl < IPV4_MIN_HDR || tl < hl || tl > ip.len() {
        field(&mut v, "ip.malformed", hex(ip), None);
        return v;
    }
    let origin = is_router_ip(&ip[IPV4_SRC]);
    let chosen = |id| origin.then_some(id);
    let flags = ip[IPV4_FLAGS_FRAG.start];
    let frag = be16(&ip[IPV4_FLAGS_FRAG]) & 0x1fff;
    let body = &ip[hl..tl];
    let is_icmp = ip[IPV4_PROTOCOL] == IPPROTO_ICMP && frag == 0 && body.len() >= ICMP_HDR_LEN;
    let icmp_error = is_icmp && matches!(body[ICMP_TYPE], 3 | 4 | 5 | 11 | 12);
    // Options the router put on its own ICMP error (and the header length and total length
    // they change): choice C11.
    let error_opts = if origin && icmp_error && hl > IPV4_MIN_HDR {
        Some("C11-icmp-error-options")
    } else if !origin && frag > 0 && hl > IPV4_MIN_HDR {
        // A forwarded non-first fragment with options: which options and how they are laid
        // out is choice C14.
        Some("C14-frag-options")
    } else {
        None
    };
    field(&mut v, "ip.version", ip[IPV4_VER_IHL] >> 4, None);
    field(&mut v, "ip.ihl", ip[IPV4_VER_IHL] & 0x0f, error_opts);
    field(&mut v, "ip.precedence", ip[IPV4_TOS] >> 5, None);
    field(
        &mut v,
        "ip.tos_bits",
        format!("{:#04x}", ip[IPV4_TOS] & 0x1f),
        chosen("C2-icmp-tos"),
    );
    field(&mut v, "ip.total_len", tl, error_opts);
    // Padding after the datagram is the link layer's; Ethernet's minimum is 60 bytes.
    field(
        &mut v,
        "eth.len_beyond_ip",
        f.len() - ETH_HDR_LEN - tl,
        None,
    );
    field(
        &mut v,
        "ip.id",
        format!("{:#06x}", be16(&ip[IPV4_IDENT])),
        chosen("C1-icmp-ip-id"),
    );
    field(&mut v, "ip.flag_reserved", flags >> 7, None);
    field(&mut v, "ip.flag_df", (flags >> 6) & 1, chosen("C9-icmp-df"));
    field(&mut v, "ip.flag_mf", (flags >> 5) & 1, None);
    field(&mut v, "ip.frag_offset", frag, None);
    field(&mut v, "ip.ttl", ip[IPV4_TTL], None);
    field(&mut v, "ip.protocol", ip[IPV4_PROTOCOL], None);
    field(
        &mut v,
        "ip.checksum",
        if checksum(&ip[..hl]) == 0 {
            "valid"
        } else {
            "INVALID"
        },
        None,
    );
    field(&mut v, "ip.src", ip4(&ip[IPV4_SRC]), None);
    field(&mut v, "ip.dst", ip4(&ip[IPV4_DST]), None);
    dissect_options(&mut v, &ip[IPV4_MIN_HDR..hl], error_opts);
    if is_icmp {
        let ty = body[ICMP_TYPE];
        field(&mut v, "icmp.type", ty, None);
        field(&mut v, "icmp.code", body[ICMP_CODE], None);
        field(
            &mut v,
            "icmp.checksum",
            if checksum(body) == 0 {
                "valid"
            } else {
                "INVALID"
            },
            None,
        );
        if icmp_error {
            field(&mut v, "icmp.rest", hex(&body[ICMP_REST]), None);
            let quote = &body[ICMP_HDR_LEN..];
            field(&mut v, "icmp.quote_len", quote.len(), None);
            // The quoted header's options may have been processed before the error was
            // decided (choice C12); the rest of the quote is compared byte for byte.
            let qhl = quote
                .first()
                .map_or(0, |b| usize::from(b & 0x0f) * 4)
                .clamp(IPV4_MIN_HDR, IPV4_MIN_HDR + IPV4_MAX_OPTIONS)
                .min(quote.len());
            let fixed = qhl.min(IPV4_MIN_HDR);
            field(&mut v, "icmp.quote.header", hex(&quote[..fixed]), None);
            field(
                &mut v,
                "icmp.quote.options",
                hex(&quote[fixed..qhl]),
                (qhl > IPV4_MIN_HDR).then_some("C12-icmp-quoted-options"),
            );
            field(&mut v, "icmp.quote.data", hex(&quote[qhl..]), None);
        } else {
            field(&mut v, "icmp.id", be16(&body[ICMP_ECHO_IDENT]), None);
            field(&mut v, "icmp.seq", be16(&body[ICMP_ECHO_SEQ]), None);
            field(&mut v, "icmp.data", hex(&body[ICMP_HDR_LEN..]), None);
        }
    } else {
        field(&mut v, "ip.payload", hex(body), None);
    }
    v
}

/// What one router emitted for one case (ARP and the fence reply removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// Frames out of port 0 (ICMP errors, echo replies), in order.
    pub port0: Vec<Vec<u8>>,
    /// Frames out of port 1 (forwarded), in order.
    pub port1: Vec<Vec<u8>>,
    /// Frames caused by a fence rather than by the case (a fence forwarded, an ICMP error
    /// about a fence): not compared, reported ([`is_about_fence`]).
    pub about_fence: Vec<Vec<u8>>,
}

impl Output {
    fn port(&self, p: usize) -> &[Vec<u8>] {
        if p == 0 {
            &self.port0
        } else {
            &self.port1
        }
    }

    /// One line per frame: port, length, protocol summary.
    pub fn summary(&self) -> String {
        let mut s = Vec::new();
        for p in 0..2 {
            for f in self.port(p) {
                let d = dissect(f);
                let get = |n: &str| {
                    d.iter()
                        .find(|x| x.name == n)
                        .map_or("-".to_string(), |x| x.value.clone())
                };
                s.push(format!(
                    "port {p}: {} bytes {} -> {} proto {} ttl {}{}",
                    f.len(),
                    get("ip.src"),
                    get("ip.dst"),
                    get("ip.protocol"),
                    get("ip.ttl"),
                    match get("icmp.type").as_str() {
                        "-" => String::new(),
                        t => format!(" icmp {t}/{}", get("icmp.code")),
                    }
                ));
                // For an ICMP error, what it is about: the quoted addresses and protocol.
                let q = get("icmp.quote.header");
                if q.len() >= 2 * IPV4_MIN_HDR {
                    let b = |i: usize| u8::from_str_radix(&q[2 * i..2 * i + 2], 16).unwrap_or(0);
                    let addr = |r: std::ops::Range<usize>| ip4(&r.map(b).collect::<Vec<_>>());
                    s.last_mut().expect("just pushed").push_str(&format!(
                        " about {} -> {} proto {}",
                        addr(IPV4_SRC),
                        addr(IPV4_DST),
                        b(IPV4_PROTOCOL)
                    ));
                }
            }
        }
        if s.is_empty() {
            "nothing".to_string()
        } else {
            s.join("; ")
        }
    }
}

/// One difference between the routers' outputs for a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The case's name.
    pub case: &'static str,
    /// Where: `port P frame I field NAME`, or `port P frame count`.
    pub at: String,
    pub gannet: String,
    pub linux: String,
    /// Set when the difference is in a field a masked [`Choice`] covers: allowed, reported
    /// for information only.
    pub choice: Option<&'static str>,
}

/// Compares the two outputs of case `case`: the same number of frames on each port, and each
/// pair of frames field by field ([`dissect`]). Returns every difference; those in fields of
/// masked [`CHOICES`] carry the choice id (allowed), the others have `choice: None` (the routers
/// disagree where the RFC does not allow it).
pub fn compare_case(case: &'static str, gannet: &Output, linux: &Output) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for p in 0..2 {
        let (g, l) = (gannet.port(p), linux.port(p));
        if g.len() != l.len() {
            out.push(Mismatch {
                case,
                at: format!("port {p} frame count"),
                gannet: g.len().to_string(),
                linux: l.len().to_string(),
                choice: None,
            });
            continue;
        }
        for (i, (gf, lf)) in g.iter().zip(l).enumerate() {
            let (gd, ld) = (dissect(gf), dissect(lf));
            let names: Vec<&String> = {
                let mut n: Vec<&String> = gd.iter().map(|f| &f.name).collect();
                for f in &ld {
                    if !n.contains(&&f.name) {
                        n.push(&f.name);
                    }
                }
                n
            };
            for name in names {
                let a = gd.iter().find(|f| &f.name == name);
                let b = ld.iter().find(|f| &f.name == name);
                let masked = a
                    .and_then(|f| f.choice)
                    .or_else(|| b.and_then(|f| f.choice))
                    .filter(|id| choice(id).masked);
                let val = |f: Option<&Field>| f.map_or("(absent)".to_string(), |f| f.value.clone());
                if a.map(|f| &f.value) != b.map(|f| &f.value) {
                    out.push(Mismatch {
                        case,
                        at: format!("port {p} frame {i} field {name}"),
                        gannet: val(a),
                        linux: val(b),
                        choice: masked,
                    });
                }
            }
        }
    }
    out
}

/// The comparison of a whole run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Per case: name, Gannet's output, Linux's output.
    pub cases: Vec<(&'static str, Output, Output)>,
    /// Differences the RFC does not allow (the test fails on any).
    pub mismatches: Vec<Mismatch>,
    /// Differences in fields of masked choices (allowed; shown).
    pub allowed: Vec<Mismatch>,
    /// Cases compared under a listed exception ([`Case::exception`]).
    pub exceptions: Vec<&'static str>,
    /// Frames caused by fences (Gannet, Linux), with the case during which they came.
    pub about_fence: Vec<(&'static str, usize, usize)>,
}

impl Report {
    /// Compares every case (the outputs in [`frame_set`] order).
    pub fn new(cases: &[Case], gannet: Vec<Output>, linux: Vec<Output>) -> Report {
        let mut r = Report::default();
        for ((c, g), l) in cases.iter().zip(gannet).zip(linux) {
            if !g.about_fence.is_empty() || !l.about_fence.is_empty() {
                r.about_fence
                    .push((c.name, g.about_fence.len(), l.about_fence.len()));
            }
            match c.exception {
                None => {
                    let (allowed, bad): (Vec<_>, Vec<_>) = compare_case(c.name, &g, &l)
                        .into_iter()
                        .partition(|m| m.choice.is_some());
                    r.mismatches.extend(bad);
                    r.allowed.extend(allowed);
                }
                Some((id, want_g, want_l)) => {
                    r.exceptions.push(c.name);
                    for (who, out, want) in [("gannet", &g, want_g), ("linux", &l, want_l)] {
                        let n = out.port0.len() + out.port1.len();
                        if n != want {
                            r.mismatches.push(Mismatch {
                                case: c.name,
                                at: format!("{who} frame count under exception {id}"),
                                gannet: if who == "gannet" {
                                    n.to_string()
                                } else {
                                    "-".into()
                                },
                                linux: if who == "linux" {
                                    n.to_string()
                                } else {
                                    "-".into()
                                },
                                choice: None,
                            });
                        }
                    }
                }
            }
            r.cases.push((c.name, g, l));
        }
        r
    }

    /// A readable table: one line per case (outputs), then every mismatch.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, g, l) in &self.cases {
            let bad = self.mismatches.iter().any(|m| m.case == *name);
            let exception = self.exceptions.iter().any(|e| e == name);
            s.push_str(&format!(
                "{} {name}\n    gannet: {}\n    linux:  {}\n",
                match (bad, exception) {
                    (true, _) => "MISMATCH",
                    (false, true) => "excepted",
                    (false, false) => "ok      ",
                },
                g.summary(),
                l.summary()
            ));
            if bad {
                // The raw frames of a mismatching case, to reproduce it.
                for (who, out) in [("gannet", g), ("linux", l)] {
                    for p in 0..2 {
                        for f in out.port(p) {
                            s.push_str(&format!("    {who} port {p}: {}\n", hex(f)));
                        }
                    }
                }
            }
        }
        let short = |x: &str| {
            if x.len() > 120 {
                format!("{}…({} chars)", &x[..120], x.len())
            } else {
                x.to_string()
            }
        };
        if !self.allowed.is_empty() {
            s.push_str(&format!(
                "{} differences allowed by a choice:\n",
                self.allowed.len()
            ));
            for m in &self.allowed {
                s.push_str(&format!(
                    "  {}: {}: gannet {} | linux {} [{}]\n",
                    m.case,
                    m.at,
                    short(&m.gannet),
                    short(&m.linux),
                    m.choice.unwrap_or("-")
                ));
            }
        }
        for (case, g, l) in &self.about_fence {
            s.push_str(&format!(
                "note: during {case}: {g} frame(s) from Gannet and {l} from Linux were caused by a \
                 fence (not compared)\n"
            ));
        }
        if !self.mismatches.is_empty() {
            s.push_str(&format!("{} mismatching fields:\n", self.mismatches.len()));
            for m in &self.mismatches {
                s.push_str(&format!(
                    "  {}: {}: gannet {} | linux {}\n",
                    m.case,
                    m.at,
                    short(&m.gannet),
                    short(&m.linux)
                ));
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Harness

/// Which router a [`Target`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Gannet,
    Linux,
}

/// A booted router with the host side of both its ports.
pub struct Target {
    pub engine: Engine,
    pub guest: Guest,
    ports: [RawPort; 2],
    _dir: TestDir,
}

impl Target {
    fn boot(engine: Engine, make: impl FnOnce(&Path) -> GuestConfig) -> Result<Target> {
        let dir = TestDir::new();
        // Bound before QEMU starts: frames QEMU sends to an unbound path are lost.
        let ports = [RawPort::bind(dir.path(), 0)?, RawPort::bind(dir.path(), 1)?];
        let guest = Guest::boot(&make(dir.path()))?;
        Ok(Target {
            engine,
            guest,
            ports,
            _dir: dir,
        })
    }

    /// Boots Gannet (`image`) in router mode ([`GANNET_APPEND`]) and waits for it.
    pub fn gannet(image: &Path) -> Result<Target> {
        let t = Target::boot(Engine::Gannet, |dir| GuestConfig {
            image: image.to_path_buf(),
            dgram_dir: dir.to_path_buf(),
            append: GANNET_APPEND.to_string(),
            ..GuestConfig::default()
        })?;
        t.guest.wait_ready(crate::READY_TIMEOUT)?;
        Ok(t)
    }

    /// Boots the Linux peer ([`peer_linux::differential_config`]) and waits for it.
    pub fn linux(peer: &peer_linux::LinuxPeer) -> Result<Target> {
        let t = Target::boot(Engine::Linux, |dir| {
            peer_linux::differential_config(peer, dir, EGRESS_MTU)
        })?;
        let line = peer_linux::wait_ready(&t.guest)?;
        ensure!(
            line.contains("sysctl=diff"),
            "the Linux peer did not apply the differential sysctls: {line}"
        );
        ensure!(
            line.contains(&format!("mtu=1500,{EGRESS_MTU}")),
            "the Linux peer's port MTUs are not 1500 and {EGRESS_MTU}: {line}"
        );
        Ok(t)
    }

    /// Sends `frame` (none for a bare fence) into its port (`(bytes, port)`), then fence `seq`
    /// into port 0, and returns what came out until the fence reply arrived on port 0 and both
    /// ports were quiet for [`SETTLE`]. An unanswered fence is sent again every [`FENCE_RESEND`]; every fence reply
    /// is left out of the output. ARP requests for 10.0.0.2/10.0.1.2 are answered and, like all
    /// ARP, left out. Errors if the fence reply does not come within `timeout`.
    pub fn run_case(
        &self,
        frame: Option<(&[u8], usize)>,
        seq: u16,
        timeout: Duration,
    ) -> Result<Output> {
        if let Some((f, in_port)) = frame {
            self.ports[in_port].send(f)?;
        }
        self.ports[0].send(&fence(seq))?;
        let start = Instant::now();
        let mut fence_sent = start;
        let mut out = Output::default();
        let mut fenced: Option<Instant> = None;
        let mut last1 = Instant::now();
        loop {
            let now = Instant::now();
            if let Some(t) = fenced {
                if now.duration_since(t) >= SETTLE && now.duration_since(last1) >= SETTLE {
                    return Ok(out);
                }
            } else if now.duration_since(fence_sent) >= FENCE_RESEND
                && now.duration_since(start) < timeout
            {
                self.ports[0].send(&arp_hello())?;
                self.ports[0].send(&fence(seq))?;
                fence_sent = now;
            } else if now.duration_since(start) > timeout {
                bail!(
                    "{:?}: no reply to fence {seq} within {timeout:?} (got so far: {})\n{}",
                    self.engine,
                    out.summary(),
                    self.guest.tail_report()
                );
            }
            for p in 0..2 {
                let Some(f) = self.ports[p].recv_timeout(Duration::from_millis(2)) else {
                    continue;
                };
                if let Some(reply) = gen::arp_reply(&f, p) {
                    self.ports[p].send(&reply)?;
                    continue;
                }
                if f.len() >= ETH_HDR_LEN && f[ETHERTYPE] == ETHERTYPE_ARP.to_be_bytes() {
                    if let Some(reply) = neighbour_arp_reply(&f, p) {
                        self.ports[p].send(&reply)?;
                    } else if is_case_arp_reply(&f, p) {
                        last1 = Instant::now();
                        if p == 1 {
                            out.port1.push(f);
                        } else {
                            out.port0.push(f);
                        }
                    }
                    // ARP requests the routers send (and replies to the harness's own ARP)
                    // are not compared.
                    continue;
                }
                if p == 0 && is_any_fence_reply(&f) {
                    if fenced.is_none() && is_fence_reply(&f, seq) {
                        fenced = Some(Instant::now());
                    }
                    continue;
                }
                if is_about_fence(&f) {
                    out.about_fence.push(f);
                    continue;
                }
                // Quiet means no output on either port for SETTLE: a frame from port 1 routed
                // out of port 0 may come after the fence reply.
                last1 = Instant::now();
                if p == 1 {
                    out.port1.push(f);
                } else {
                    out.port0.push(f);
                }
            }
        }
    }

    /// Runs every case in order (after a warm-up fence) and returns the outputs.
    pub fn run_all(&self, cases: &[Case]) -> Result<Vec<Output>> {
        self.ports[0].send(&arp_hello())?;
        let warm = self
            .run_case(None, 0, WARMUP_TIMEOUT)
            .context("warm-up fence")?;
        ensure!(
            warm == Output::default(),
            "{:?} sent frames on its own before the first case: {}",
            self.engine,
            warm.summary()
        );
        cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.run_case(Some((&c.frame, c.in_port)), i as u16 + 1, CASE_TIMEOUT)
                    .with_context(|| format!("case {}", c.name))
            })
            .collect()
    }

    /// Gannet: `quit`, returning the final STATS (checks a clean exit). Linux: power off.
    pub fn stop(mut self) -> Result<Option<qemu::Stats>> {
        match self.engine {
            Engine::Gannet => {
                let (stats, exit) = self.guest.quit(crate::QUIT_TIMEOUT)?;
                ensure!(
                    exit.is_clean(),
                    "Gannet did not shut down cleanly ({exit})\n{}",
                    self.guest.tail_report()
                );
                Ok(stats)
            }
            Engine::Linux => {
                let _ = self.guest.send_line("quit");
                if self.guest.wait_exit(Duration::from_secs(20)).is_err() {
                    self.guest.kill();
                }
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_set_builds_valid_frames() {
        let cases = frame_set().unwrap();
        let mut names: Vec<_> = cases.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "case names are unique");
        let udp = &cases.iter().find(|c| c.name == "udp").unwrap().frame;
        let ip = ETH_HDR_LEN..ETH_HDR_LEN + IPV4_MIN_HDR;
        assert_eq!(udp.len(), ip.end + netstack::wire::UDP_HDR_LEN + 64);
        assert_eq!(checksum(&udp[ip.clone()]), 0, "valid header checksum");
        assert_eq!(udp[ETH_HDR_LEN + IPV4_TTL], 64, "TTL");
        let bad = &cases
            .iter()
            .find(|c| c.name == "bad-checksum")
            .unwrap()
            .frame;
        assert_ne!(checksum(&bad[ip.clone()]), 0);
        let rr = &cases.iter().find(|c| c.name == "opt-nop-rr").unwrap().frame;
        assert_eq!(rr[ETH_HDR_LEN + IPV4_VER_IHL], 0x48, "IHL 8");
        assert_eq!(checksum(&rr[ip.start..ip.start + 32]), 0);
        assert_eq!(&rr[ip.end..ip.end + 4], &[1, 7, 11, 4]);
        let padded = &cases
            .iter()
            .find(|c| c.name == "udp-short-padded")
            .unwrap()
            .frame;
        let total_len = &padded[ETH_HDR_LEN..][IPV4_TOTAL_LEN];
        assert_eq!((padded.len(), be16(total_len)), (ETH_ZLEN, 29));
    }

    #[test]
    fn fence_is_recognised() {
        let mut f = fence(3);
        // Turn the request into the reply a router would send.
        f[ETH_HDR_LEN + IPV4_MIN_HDR + ICMP_TYPE] = 0;
        assert!(is_fence_reply(&f, 3));
        assert!(!is_fence_reply(&f, 4));
        assert!(!is_fence_reply(&fence(3), 3), "a request is not a reply");
        // A fence that leaves the router, or an error quoting one, is the fence's doing.
        assert!(is_about_fence(&fence(3)));
        assert!(is_about_fence(&icmp_error(
            1,
            0xc0,
            &fence(3)[ETH_HDR_LEN..]
        )));
        assert!(!is_about_fence(&icmp_error(
            1,
            0xc0,
            &frame_set().unwrap()[0].frame[ETH_HDR_LEN..]
        )));
        assert!(!is_about_fence(&f), "the reply is not");
    }

    fn icmp_error(id: u16, tos: u8, quote: &[u8]) -> Vec<u8> {
        let mut ip = Ipv4Header::new(
            (ICMP_HDR_LEN + quote.len()) as u16,
            64,
            IpNumber::ICMP,
            [10, 0, 0, 1],
            [10, 0, 0, 2],
        )
        .unwrap();
        ip.identification = id;
        ip.dscp = IpDscp::try_new(tos >> 2).unwrap();
        ip.header_checksum = ip.calc_header_checksum();
        let mut f = Vec::new();
        Ethernet2Header {
            destination: gen::peer_mac(0),
            source: gen::guest_mac(0),
            ether_type: EtherType::IPV4,
        }
        .write(&mut f)
        .unwrap();
        ip.write(&mut f).unwrap();
        let mut icmp = vec![11, 0, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(quote);
        let c = checksum(&icmp);
        icmp[ICMP_CHECKSUM].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&icmp);
        f
    }

    #[test]
    fn choices_are_masked_and_the_rest_compared() {
        let q = [0x45u8; 28];
        let g = Output {
            port0: vec![icmp_error(1, 0xc0, &q)],
            port1: vec![],
            about_fence: vec![],
        };
        // Different IP ID and TOS bits (choices C1, C2): differences, but allowed ones.
        let l = Output {
            port0: vec![icmp_error(0x9abc, 0xd0, &q)],
            port1: vec![],
            about_fence: vec![],
        };
        let m = compare_case("t", &g, &l);
        let ids: Vec<_> = m.iter().map(|m| (m.at.as_str(), m.choice)).collect();
        assert_eq!(
            ids,
            vec![
                ("port 0 frame 0 field ip.tos_bits", Some("C2-icmp-tos")),
                ("port 0 frame 0 field ip.id", Some("C1-icmp-ip-id")),
            ]
        );
        // A shorter quote is a mismatch of quote_len and quote (and the lengths).
        let l = Output {
            port0: vec![icmp_error(1, 0xc0, &q[..20])],
            port1: vec![],
            about_fence: vec![],
        };
        let m = compare_case("t", &g, &l);
        let at: Vec<_> = m.iter().map(|m| m.at.as_str()).collect();
        assert!(
            at.contains(&"port 0 frame 0 field icmp.quote_len"),
            "{at:?}"
        );
        assert!(at.contains(&"port 0 frame 0 field ip.total_len"), "{at:?}");
        assert_eq!(
            m.iter()
                .find(|m| m.at.ends_with("quote_len"))
                .map(|m| (m.gannet.as_str(), m.linux.as_str())),
            Some(("28", "20"))
        );
        // A missing frame is a count mismatch.
        let m = compare_case("t", &g, &Output::default());
        assert_eq!(
            m,
            vec![Mismatch {
                case: "t",
                at: "port 0 frame count".into(),
                gannet: "1".into(),
                linux: "0".into(),
                choice: None,
            }]
        );
        assert!(Report::new(
            &[Case {
                name: "t",
                expect: "",
                frame: vec![],
                in_port: 0,
                exception: None,
            }],
            vec![g],
            vec![Output::default()]
        )
        .render()
        .contains("t: port 0 frame count: gannet 1 | linux 0"));
    }

    #[test]
    fn forwarded_frames_mask_nothing() {
        // The same TTL-63 datagram with a different IP ID: forwarded frames keep the sender's
        // ID, so this is a mismatch.
        let cases = frame_set().unwrap();
        let f = cases[0].frame.clone();
        let mut g = f.clone();
        g[ETH_HDR_LEN + IPV4_IDENT.start] ^= 1;
        fix_ip_checksum(&mut g);
        let m = compare_case(
            "udp",
            &Output {
                port0: vec![],
                port1: vec![g],
                about_fence: vec![],
            },
            &Output {
                port0: vec![],
                port1: vec![f],
                about_fence: vec![],
            },
        );
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].at, "port 1 frame 0 field ip.id");
        assert_eq!(m[0].choice, None, "not a choice for a forwarded datagram");
    }

    #[test]
    fn an_exception_checks_each_routers_frame_count() {
        let case = |n| Case {
            name: "x",
            expect: "",
            frame: vec![],
            in_port: 0,
            exception: Some(("X1-linux-zeronet-source", 0, n)),
        };
        let fwd = Output {
            port0: vec![],
            port1: vec![frame_set().unwrap()[0].frame.clone()],
            about_fence: vec![],
        };
        let r = Report::new(&[case(1)], vec![Output::default()], vec![fwd.clone()]);
        assert!(r.mismatches.is_empty(), "{}", r.render());
        assert_eq!(r.exceptions, vec!["x"]);
        assert!(r.render().contains("excepted x"));
        // Gannet forwarding it too would break the RFC: reported.
        let r = Report::new(&[case(1)], vec![fwd.clone()], vec![fwd]);
        assert_eq!(r.mismatches.len(), 1);
        assert_eq!(
            r.mismatches[0].at,
            "gannet frame count under exception X1-linux-zeronet-source"
        );
        assert!(choice("X1-linux-zeronet-source").linux_deviates);
    }

    #[test]
    fn later_fragments_options_are_choice_c14() {
        let cases = frame_set().unwrap();
        let f = &cases
            .iter()
            .find(|c| c.name == "frag-opts-copy")
            .unwrap()
            .frame;
        let marked = |f: &[u8]| {
            dissect(f)
                .into_iter()
                .filter(|x| x.choice == Some("C14-frag-options"))
                .map(|x| x.name)
                .collect::<Vec<_>>()
        };
        assert!(marked(f).is_empty(), "a first fragment is compared whole");
        let mut later = f.clone();
        later[ETH_HDR_LEN..][IPV4_FLAGS_FRAG].copy_from_slice(&69u16.to_be_bytes());
        fix_ip_checksum(&mut later);
        let m = marked(&later);
        assert!(m.contains(&"ip.ihl".to_string()) && m.contains(&"ip.total_len".to_string()));
        assert!(!m.contains(&"ip.payload".to_string()), "{m:?}");
        // Without options a later fragment is compared whole (frag-middle).
        let mid = &cases
            .iter()
            .find(|c| c.name == "frag-middle")
            .unwrap()
            .frame;
        assert!(marked(mid).is_empty());
    }

    #[test]
    fn timestamp_values_are_choice_c5_only_when_filled() {
        let mut v = Vec::new();
        dissect_options(&mut v, &[68, 12, 9, 0, 0x80, 0, 0, 1, 0, 0, 0, 0], None);
        let t: Vec<_> = v
            .iter()
            .filter(|f| f.name.ends_with(".time"))
            .map(|f| (f.name.as_str(), f.choice))
            .collect();
        assert_eq!(
            t,
            vec![
                ("ip.opt[0].ts[4].time", Some("C5-ts-value")),
                ("ip.opt[0].ts[8].time", None)
            ]
        );
        for c in CHOICES {
            assert!(!c.rfc.is_empty() && !c.gannet.is_empty() && !c.linux.is_empty());
        }
        assert!(choices_markdown().contains("C4-icmp-quote"));
    }
}
