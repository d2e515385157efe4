//! The stateful firewall: new connections only from the inside; established and related
//! traffic from anywhere. *Related* is an ICMP error whose quoted datagram belongs to a
//! tracked flow (RFC 5508 §4's "ICMP error packets related to a session"; Linux's
//! `IP_CT_RELATED`) and a RST of a tracked TCP connection (it matches the entry and moves it
//! to CLOSE). Everything else from the outside is dropped and counted by reason.
//!
//! Meant as the second stage behind the stateless ACL ([`crate::acl`]): the ACL refuses
//! what no state may let through, this keeps what the inside opened. One [`Firewall`] per core
//! over its own table; both directions of a flow must reach the same core (docs/DESIGN.md,
//! *Stateful network functions*).

use super::parse::{parse_len, ParseError, L4};
use super::table::{Entry, Table};
use super::track::{advance, open};
use super::Side;

/// Why the firewall dropped a frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum FwDrop {
    /// The frame did not parse ([`ParseError`], never `NotIpv4`).
    Malformed(ParseError),
    /// A packet from the outside that matches no flow and is not related to one.
    NewFromOutside,
    /// An ICMP error quoting a datagram of no tracked flow.
    UnrelatedIcmpError,
    /// A TCP segment invalid in its connection's state (Linux's `sIV`), or one that cannot
    /// open a connection (a SYN/ACK, RST or FIN with no entry).
    TcpInvalid,
    /// An ICMP echo reply from the inside matching no query.
    UnmatchedReply,
    /// A new flow from the inside, with the table full of entries that may not be evicted.
    TableFull,
}

/// What to do with a frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum FwVerdict {
    /// Let it through.
    Accept,
    /// Not IPv4: not the firewall's to judge (the caller's policy applies).
    NotIpv4,
    /// Drop it.
    Drop(FwDrop),
}

/// Counts of what the firewall decided.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct FwCounters {
    /// Accepted, matching a flow (established or its reply).
    pub established: u64,
    /// Accepted, opening a flow from the inside.
    pub new: u64,
    /// Accepted ICMP errors of tracked flows.
    pub related: u64,
    /// Dropped: malformed or unsupported.
    pub malformed: u64,
    /// Dropped: [`FwDrop::NewFromOutside`].
    pub new_from_outside: u64,
    /// Dropped: [`FwDrop::UnrelatedIcmpError`].
    pub unrelated_icmp_error: u64,
    /// Dropped: [`FwDrop::TcpInvalid`].
    pub tcp_invalid: u64,
    /// Dropped: [`FwDrop::UnmatchedReply`].
    pub unmatched_reply: u64,
    /// Dropped: [`FwDrop::TableFull`].
    pub table_full: u64,
}

/// Expired entries freed per frame (the bounded incremental sweep; [`Firewall::tick`] does
/// more).
const SWEEP_PER_FRAME: usize = 2;

/// A stateful firewall over one connection table.
pub struct Firewall<'a> {
    table: Table<'a, ()>,
    counters: FwCounters,
}

fn nothing(_: &Entry<()>) {}

impl<'a> Firewall<'a> {
    /// A firewall over `table` (empty or not).
    pub fn new(table: Table<'a, ()>) -> Firewall<'a> {
        Firewall {
            table,
            counters: FwCounters::default(),
        }
    }

    /// The connection table.
    pub fn table(&self) -> &Table<'a, ()> {
        &self.table
    }

    /// The connection table, mutable (timeouts).
    pub fn table_mut(&mut self) -> &mut Table<'a, ()> {
        &mut self.table
    }

    /// Connections tracked now (of `fw_sessions=`).
    pub fn connections(&self) -> usize {
        self.table.len()
    }

    /// The decisions so far.
    pub fn counters(&self) -> FwCounters {
        self.counters
    }

    /// Free up to `budget` expired entries (call it from a periodic tick).
    pub fn tick(&mut self, now: u64, budget: usize) -> usize {
        self.table.expire(now, budget, &mut nothing)
    }

    /// Judge the Ethernet frame `frame` arriving from `from` at `now` (ns), and track it.
    pub fn filter(&mut self, frame: &[u8], from: Side, now: u64) -> FwVerdict {
        self.filter_len(frame, frame.len(), from, now)
    }

    /// [`Firewall::filter`] for a frame of `frame_len` bytes whose first page is `head` (a
    /// jumbo frame): its headers are read in `head` ([`super::parse::parse_len`]).
    pub fn filter_len(&mut self, head: &[u8], frame_len: usize, from: Side, now: u64) -> FwVerdict {
        if self.table.sweep_due(now) {
            self.table.expire(now, SWEEP_PER_FRAME, &mut nothing);
        }
        let v = self.judge(head, frame_len, from, now);
        let c = &mut self.counters;
        match v {
            Ok(Judged::Established) => c.established += 1,
            Ok(Judged::New) => c.new += 1,
            Ok(Judged::Related) => c.related += 1,
            Err(FwDrop::Malformed(ParseError::NotIpv4)) => return FwVerdict::NotIpv4,
            Err(FwDrop::Malformed(_)) => c.malformed += 1,
            Err(FwDrop::NewFromOutside) => c.new_from_outside += 1,
            Err(FwDrop::UnrelatedIcmpError) => c.unrelated_icmp_error += 1,
            Err(FwDrop::TcpInvalid) => c.tcp_invalid += 1,
            Err(FwDrop::UnmatchedReply) => c.unmatched_reply += 1,
            Err(FwDrop::TableFull) => c.table_full += 1,
        }
        match v {
            Ok(_) => FwVerdict::Accept,
            Err(d) => FwVerdict::Drop(d),
        }
    }

    fn judge(
        &mut self,
        frame: &[u8],
        frame_len: usize,
        from: Side,
        now: u64,
    ) -> Result<Judged, FwDrop> {
        let flow = parse_len(frame, frame_len).map_err(FwDrop::Malformed)?;
        if let L4::IcmpError(q) = flow.l4kind {
            // The quoted datagram went the other way: it was sent from the side the error
            // is going to, so it matches that side's tuple.
            return match self.table.lookup(&q.tuple, from.other(), now, &mut nothing) {
                Some(_) => Ok(Judged::Related),
                None => Err(FwDrop::UnrelatedIcmpError),
            };
        }
        if let Some(idx) = self.table.lookup(&flow.tuple, from, now, &mut nothing) {
            advance(&mut self.table, idx, from, &flow.l4kind, now)
                .map_err(|_| FwDrop::TcpInvalid)?;
            return Ok(Judged::Established);
        }
        if from == Side::Outside {
            return Err(FwDrop::NewFromOutside);
        }
        let (class, state) = open(&flow.l4kind).map_err(|_| match flow.l4kind {
            L4::Tcp { .. } => FwDrop::TcpInvalid,
            _ => FwDrop::UnmatchedReply,
        })?;
        let t = flow.tuple;
        self.table
            .insert(t, t.reversed(), class, state, 0, (), now, &mut nothing)
            .map_err(|_| FwDrop::TableFull)?;
        Ok(Judged::New)
    }
}

enum Judged {
    Established,
    New,
    Related,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::table::{Class, Entry, Timeouts};
    use etherparse::{icmpv4, Icmpv4Type, PacketBuilder};
    use std::vec;
    use std::vec::Vec;

    const S: u64 = 1_000_000_000;
    const IN: [u8; 4] = [10, 0, 0, 2];
    const OUT: [u8; 4] = [203, 0, 113, 10];

    fn fw(n: usize) -> Firewall<'static> {
        let e = vec![Entry::<()>::default(); n].leak();
        let b = vec![0u32; n.next_power_of_two()].leak();
        Firewall::new(Table::new(e, b, 3, Timeouts::default()).unwrap())
    }

    fn tcp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16, flags: &str) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(src, dst, 64)
            .tcp(sp, dp, 1, 512);
        let b = match flags {
            "S" => b.syn(),
            "SA" => b.syn().ack(2),
            "A" => b.ack(2),
            "R" => b.rst(),
            _ => panic!("{flags}"),
        };
        let mut v = Vec::new();
        b.write(&mut v, &[]).unwrap();
        v
    }

    fn udp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(src, dst, 64)
            .udp(sp, dp)
            .write(&mut v, b"q")
            .unwrap();
        v
    }

    fn unreachable(src: [u8; 4], dst: [u8; 4], quoted: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(src, dst, 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                icmpv4::DestUnreachableHeader::Host,
            ))
            .write(&mut v, &quoted[14..])
            .unwrap();
        v
    }

    #[test]
    fn new_only_from_inside_established_and_related_from_anywhere() {
        let mut f = fw(64);
        let d = FwVerdict::Drop;
        // Unsolicited from the outside.
        assert_eq!(
            f.filter(&tcp(OUT, 80, IN, 40000, "S"), Side::Outside, 0),
            d(FwDrop::NewFromOutside)
        );
        assert_eq!(
            f.filter(&udp(OUT, 53, IN, 5000), Side::Outside, 0),
            d(FwDrop::NewFromOutside)
        );
        // A connection from the inside, and its replies.
        let syn = tcp(IN, 40000, OUT, 80, "S");
        assert_eq!(f.filter(&syn, Side::Inside, 0), FwVerdict::Accept);
        assert_eq!(
            f.filter(&tcp(OUT, 80, IN, 40000, "SA"), Side::Outside, S),
            FwVerdict::Accept
        );
        assert_eq!(
            f.filter(&tcp(IN, 40000, OUT, 80, "A"), Side::Inside, S),
            FwVerdict::Accept
        );
        assert_eq!(f.table().count(Class::TcpEstablished), 1);
        // Related: an ICMP error about it from a router outside; one about nothing is not.
        assert_eq!(
            f.filter(&unreachable([192, 0, 2, 1], IN, &syn), Side::Outside, S),
            FwVerdict::Accept
        );
        let stray = tcp(IN, 40001, OUT, 80, "S");
        assert_eq!(
            f.filter(&unreachable([192, 0, 2, 1], IN, &stray), Side::Outside, S),
            d(FwDrop::UnrelatedIcmpError)
        );
        // A RST of the known flow from the outside passes and closes it.
        assert_eq!(
            f.filter(&tcp(OUT, 80, IN, 40000, "R"), Side::Outside, S),
            FwVerdict::Accept
        );
        assert_eq!(f.table().count(Class::TcpClosed), 1);
        // A RST or SYN/ACK of no flow from the inside opens nothing.
        assert_eq!(
            f.filter(&tcp(IN, 40002, OUT, 80, "R"), Side::Inside, S),
            d(FwDrop::TcpInvalid)
        );
        // UDP: the reply passes; after 300 s idle it no longer does.
        assert_eq!(
            f.filter(&udp(IN, 5000, OUT, 53), Side::Inside, S),
            FwVerdict::Accept
        );
        assert_eq!(
            f.filter(&udp(OUT, 53, IN, 5000), Side::Outside, 301 * S),
            FwVerdict::Accept
        );
        assert_eq!(
            f.filter(&udp(OUT, 53, IN, 5000), Side::Outside, 602 * S),
            d(FwDrop::NewFromOutside)
        );
        // ARP is not the firewall's.
        let mut arp = udp(IN, 1, OUT, 1);
        arp[12..14].copy_from_slice(&[8, 6]);
        assert_eq!(f.filter(&arp, Side::Outside, S), FwVerdict::NotIpv4);
        let c = f.counters();
        assert_eq!(
            (
                c.new,
                c.established,
                c.related,
                c.new_from_outside,
                c.unrelated_icmp_error,
                c.tcp_invalid
            ),
            (2, 4, 1, 3, 1, 1)
        );
    }

    /// 100,000 SYNs from spoofed inside sources into a 2,048-entry table with 500
    /// established connections: the SYNs evict each other, the connections keep passing.
    #[test]
    fn syn_flood_from_spoofed_sources_keeps_established_flows() {
        let mut f = fw(2048);
        for k in 0..500u16 {
            assert_eq!(
                f.filter(&tcp(IN, 1000 + k, OUT, 443, "S"), Side::Inside, 0),
                FwVerdict::Accept
            );
            assert_eq!(
                f.filter(&tcp(OUT, 443, IN, 1000 + k, "SA"), Side::Outside, 0),
                FwVerdict::Accept
            );
            assert_eq!(
                f.filter(&tcp(IN, 1000 + k, OUT, 443, "A"), Side::Inside, 0),
                FwVerdict::Accept
            );
        }
        let mut syn = tcp(IN, 9, OUT, 80, "S");
        for k in 0..100_000u32 {
            syn[26..30].copy_from_slice(&(0x6440_0000 + k).to_be_bytes());
            assert_eq!(f.filter(&syn, Side::Inside, S), FwVerdict::Accept);
        }
        assert_eq!(f.table().counters().evicted, 100_000 - (2048 - 500));
        for k in 0..500u16 {
            assert_eq!(
                f.filter(&tcp(OUT, 443, IN, 1000 + k, "A"), Side::Outside, 2 * S),
                FwVerdict::Accept
            );
        }
        assert_eq!(f.counters().table_full, 0);
    }
}
