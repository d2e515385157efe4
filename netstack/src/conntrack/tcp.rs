//! TCP connection states as Linux's connection tracker keeps them: the transition table of
//! `net/netfilter/nf_conntrack_proto_tcp.c` (`tcp_conntracks[2][6][TCP_CONNTRACK_MAX]`, the
//! table of Linux 6.x with the simultaneous-open state `SYN_SENT2`), indexed the same way: the
//! packet's direction (original: the initiator's, or reply), its flag class
//! (`get_conntrack_index`: RST, then SYN with or without ACK, then FIN, then ACK, else none),
//! the current state.
//!
//! Not kept: window tracking (Linux's `tcp_in_window`: sequence and acknowledgement numbers
//! checked against each side's window). A segment is judged by its flags alone, so a spoofed
//! RST with the right 4-tuple closes a flow here where Linux would drop it as out of window;
//! the entry then lingers in `Close` for the transitory timeout (RFC 7857 §2.2), it is not
//! removed at once.

/// A TCP connection's state (Linux `enum tcp_conntrack`, same order).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Hash)]
#[repr(u8)]
pub enum TcpState {
    /// No segment seen (`TCP_CONNTRACK_NONE`).
    #[default]
    None = 0,
    /// A SYN seen from the initiator.
    SynSent = 1,
    /// The SYN/ACK seen.
    SynRecv = 2,
    /// The handshake's ACK seen (or a flow picked up mid-stream).
    Established = 3,
    /// A FIN seen.
    FinWait = 4,
    /// The ACK of the first FIN seen.
    CloseWait = 5,
    /// FINs seen both ways; waiting for the last ACK.
    LastAck = 6,
    /// The last ACK seen.
    TimeWait = 7,
    /// Closed by a RST.
    Close = 8,
    /// A SYN from the responder too: simultaneous open.
    SynSent2 = 9,
}

/// The flag class of a segment (Linux `enum tcp_bit_set`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum TcpFlags {
    /// SYN without ACK.
    Syn = 0,
    /// SYN with ACK.
    SynAck = 1,
    /// FIN (without RST or SYN).
    Fin = 2,
    /// ACK only.
    Ack = 3,
    /// RST (whatever else is set).
    Rst = 4,
    /// None of the above.
    None = 5,
}

impl TcpFlags {
    /// The class of the flags byte (TCP header byte 13: CWR ECE URG ACK PSH RST SYN FIN), in
    /// the order of Linux's `get_conntrack_index`.
    pub fn of(flags: u8) -> TcpFlags {
        const FIN: u8 = 0x01;
        const SYN: u8 = 0x02;
        const RST: u8 = 0x04;
        const ACK: u8 = 0x10;
        if flags & RST != 0 {
            TcpFlags::Rst
        } else if flags & SYN != 0 {
            if flags & ACK != 0 {
                TcpFlags::SynAck
            } else {
                TcpFlags::Syn
            }
        } else if flags & FIN != 0 {
            TcpFlags::Fin
        } else if flags & ACK != 0 {
            TcpFlags::Ack
        } else {
            TcpFlags::None
        }
    }
}

/// What the table says of a segment.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Transition {
    /// The connection moves to (or stays in) this state; the segment passes.
    To(TcpState),
    /// Linux's `sIG`: may be valid or not (a late SYN, a SYN/ACK after the handshake); the
    /// segment passes and the state is left as it is.
    Ignore,
    /// Linux's `sIV`: invalid in this state; the segment is dropped.
    Invalid,
}

use TcpState::{
    Close as CL, CloseWait as CW, Established as ES, FinWait as FW, LastAck as LA, SynRecv as SR,
    SynSent as SS, SynSent2 as S2, TimeWait as TW,
};
use Transition::{Ignore as IG, Invalid as IV, To};

const fn t(s: TcpState) -> Transition {
    To(s)
}

/// `tcp_conntracks`, original direction, rows by [`TcpFlags`], columns by [`TcpState`]
/// (sNO, sSS, sSR, sES, sFW, sCW, sLA, sTW, sCL, sS2).
const ORIGINAL: [[Transition; 10]; 6] = [
    /* syn    */ [t(SS), t(SS), IG, IG, IG, IG, IG, t(SS), t(SS), t(S2)],
    /* synack */ [IV, IV, IG, IG, IG, IG, IG, IG, IG, t(SR)],
    /* fin    */ [IV, IV, t(FW), t(FW), t(LA), t(LA), t(LA), t(TW), t(CL), IV],
    /* ack    */
    [
        t(ES),
        IV,
        t(ES),
        t(ES),
        t(CW),
        t(CW),
        t(TW),
        t(TW),
        t(CL),
        IV,
    ],
    /* rst    */
    [
        IV,
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
    ],
    /* none   */ [IV; 10],
];

/// `tcp_conntracks`, reply direction (same layout as [`ORIGINAL`]).
const REPLY: [[Transition; 10]; 6] = [
    /* syn    */ [IV, t(S2), IV, IV, IV, IV, IV, IV, IV, t(S2)],
    /* synack */ [IV, t(SR), IG, IG, IG, IG, IG, IG, IG, t(SR)],
    /* fin    */ [IV, IV, t(FW), t(FW), t(LA), t(LA), t(LA), t(TW), t(CL), IV],
    /* ack    */ [IV, IG, t(SR), t(ES), t(CW), t(CW), t(TW), t(TW), t(CL), IG],
    /* rst    */
    [
        IV,
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
        t(CL),
    ],
    /* none   */ [IV; 10],
];

/// The transition of a segment with flag class `flags` in state `state`, sent by the
/// connection's initiator (`original`) or by the responder.
pub fn transition(state: TcpState, original: bool, flags: TcpFlags) -> Transition {
    let table = if original { &ORIGINAL } else { &REPLY };
    table[flags as usize][state as usize]
}

impl TcpState {
    /// The state of a `u8` written by `as u8`; `None` for anything else.
    pub fn from_u8(v: u8) -> Option<TcpState> {
        Some(match v {
            0 => TcpState::None,
            1 => SS,
            2 => SR,
            3 => ES,
            4 => FW,
            5 => CW,
            6 => LA,
            7 => TW,
            8 => CL,
            9 => S2,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handshake, a close from the initiator, and a RST, step by step as Linux walks them.
    #[test]
    fn handshake_close_and_reset_follow_linux() {
        let syn = TcpFlags::of(0x02);
        let synack = TcpFlags::of(0x12);
        let ack = TcpFlags::of(0x10);
        let fin = TcpFlags::of(0x11);
        assert_eq!(
            (syn, synack, ack, fin),
            (
                TcpFlags::Syn,
                TcpFlags::SynAck,
                TcpFlags::Ack,
                TcpFlags::Fin
            )
        );
        assert_eq!(transition(TcpState::None, true, syn), To(SS));
        assert_eq!(transition(SS, false, synack), To(SR));
        assert_eq!(transition(SR, true, ack), To(ES));
        assert_eq!(transition(ES, true, fin), To(FW));
        assert_eq!(transition(FW, false, ack), To(CW));
        assert_eq!(transition(CW, false, fin), To(LA));
        assert_eq!(transition(LA, true, ack), To(TW));
        assert_eq!(transition(ES, false, TcpFlags::of(0x14)), To(CL));
        // Invalid and ignored cells.
        assert_eq!(transition(TcpState::None, false, syn), IV);
        assert_eq!(transition(SS, true, ack), IV);
        assert_eq!(transition(ES, true, syn), IG);
        assert_eq!(transition(TcpState::None, true, TcpFlags::of(0)), IV);
        // Loose pick-up of a flow already open (nf_conntrack_tcp_loose=1).
        assert_eq!(transition(TcpState::None, true, ack), To(ES));
        // Simultaneous open.
        assert_eq!(transition(SS, false, syn), To(S2));
        assert_eq!(transition(S2, true, synack), To(SR));
        for v in 0..=9 {
            assert_eq!(TcpState::from_u8(v).map(|s| s as u8), Some(v));
        }
        assert_eq!(TcpState::from_u8(10), None);
    }
}
