//! A packet's effect on its connection entry, shared by the firewall and the NAT: which
//! direction it goes (the initiator's, "original", or the reply), the TCP transition, and the
//! [`Class`] the entry moves to (its timeout and whether it may be evicted).
//!
//! An entry is *assured* (Linux's `IPS_ASSURED`, never early-dropped) once it has seen a
//! packet each way and, for TCP, reached ESTABLISHED; until then it is embryonic.

use super::parse::L4;
use super::table::{Class, Table};
use super::tcp::{transition, TcpFlags, TcpState, Transition};
use super::Side;

/// Entry flag: the connection was opened from the outside (a NAT's static forward or an
/// endpoint-independent filter let it in); its original direction is inbound.
pub const FROM_OUTSIDE: u8 = 1;
/// Entry flag: a packet has been seen in the reply direction.
pub const REPLIED: u8 = 2;
/// Entry flag (NAT mappings): a static forward, never freed.
pub const STATIC: u8 = 4;

/// The segment is invalid in the connection's state (Linux's `sIV`), or cannot open one.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Invalid;

/// The class and state byte of a new entry opened by a packet with this transport part.
/// Only a TCP SYN (or, as Linux's `nf_conntrack_tcp_loose=1` picks up, an ACK) opens a TCP
/// entry, and only an echo request an ICMP one; an ICMP error never opens one.
pub fn open(l4: &L4) -> Result<(Class, u8), Invalid> {
    match *l4 {
        L4::Tcp { flags } => match transition(TcpState::None, true, TcpFlags::of(flags)) {
            Transition::To(s) => Ok((Class::TcpEmbryonic, s as u8)),
            _ => Err(Invalid),
        },
        L4::Udp => Ok((Class::UdpUnreplied, 0)),
        L4::IcmpQuery { request: true } => Ok((Class::IcmpUnreplied, 0)),
        _ => Err(Invalid),
    }
}

/// The class of an entry of protocol `l4` in TCP state `state` (ignored for others),
/// `replied` or not.
pub fn class_of(l4: &L4, state: u8, replied: bool) -> Class {
    match l4 {
        L4::Tcp { .. } => match TcpState::from_u8(state) {
            Some(TcpState::Established) if replied => Class::TcpEstablished,
            Some(TcpState::FinWait | TcpState::CloseWait | TcpState::LastAck) if replied => {
                Class::TcpClosing
            }
            Some(TcpState::TimeWait | TcpState::Close) => Class::TcpClosed,
            _ => Class::TcpEmbryonic,
        },
        L4::Udp if replied => Class::Udp,
        L4::Udp => Class::UdpUnreplied,
        _ if replied => Class::Icmp,
        _ => Class::IcmpUnreplied,
    }
}

/// Apply a packet that arrived from `from` and matched entry `idx`: direction, TCP transition
/// (an ignored one leaves the state), class, last use. `Err(Invalid)` leaves the entry as it
/// was (not even its last use).
pub fn advance<V: Copy>(
    table: &mut Table<'_, V>,
    idx: u32,
    from: Side,
    l4: &L4,
    now: u64,
) -> Result<(), Invalid> {
    let e = table.get(idx);
    let initiator = if e.flags & FROM_OUTSIDE != 0 {
        Side::Outside
    } else {
        Side::Inside
    };
    let original = from == initiator;
    let mut state = e.state;
    if let L4::Tcp { flags } = *l4 {
        let cur = TcpState::from_u8(state).unwrap_or_default();
        match transition(cur, original, TcpFlags::of(flags)) {
            Transition::To(s) => {
                if s == TcpState::SynSent && matches!(cur, TcpState::TimeWait | TcpState::Close) {
                    // Reopened (RFC 1122 §4.2.2.13): a new connection on the old tuple; Linux
                    // kills the old entry and opens a new one, so nothing is replied yet.
                    table.get_mut(idx).flags &= !REPLIED;
                }
                state = s as u8
            }
            Transition::Ignore => {}
            Transition::Invalid => return Err(Invalid),
        }
    }
    let e = table.get_mut(idx);
    e.state = state;
    if !original {
        e.flags |= REPLIED;
    }
    let class = class_of(l4, state, e.flags & REPLIED != 0);
    table.set_class(idx, class, now);
    Ok(())
}
