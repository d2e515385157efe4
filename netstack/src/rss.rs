//! Receive-side scaling (RSS): the Toeplitz hash a NIC computes over a frame's addresses and
//! ports, the 40-byte secret key it is keyed with and the 128-entry redirection table that
//! turns a hash into an RX queue (Microsoft, *Receive Side Scaling* and *Verifying the RSS Hash
//! Calculation*; Intel 82576 datasheet §7.1.2.10). One definition for the kernel, which
//! programs an igb port's `RSSRK` and `RETA` with [`KEY`] and [`reta_round_robin`], and for
//! the host tests, which compute each flow's queue with [`hash_ipv4_l4`] and [`queue_of`] and
//! check the device put it there.
//!
//! The hash input is the fields in network byte order: source address, destination address,
//! then (with ports) source port, destination port (IPv4 12 bytes, IPv6 36). Checked against
//! Microsoft's published verification vectors (the tests below).

/// Bytes of an RSS secret key: 40 (Microsoft's RSS; the 82576's ten `RSSRK` registers).
pub const KEY_LEN: usize = 40;

/// Entries of the redirection table: 128 (the 82576's `RETA`, 32 registers of four one-byte
/// entries; the hash's low 7 bits index it).
pub const RETA_LEN: usize = 128;

/// The key Gannet programs: the 16-bit pattern `0x6d5a` repeated (Woo and Park, *Scalable TCP
/// Session Monitoring with Symmetric Receive-side Scaling*, KAIST 2012). Why this key: with a
/// key whose 16-bit halves repeat, swapping source and destination (addresses and ports
/// together) leaves the Toeplitz hash unchanged, so both directions of a connection seen on one
/// port hash alike (its first two bytes are Microsoft's key's). Its cost: the hash
/// depends on the fields only through 16-bit sums of their halves (Woo and Park measure the
/// spread as good as the random key's on real traces; [`MICROSOFT_KEY`] is kept for the
/// verification vectors).
pub const KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Microsoft's verification key (*Verifying the RSS Hash Calculation*; also the 82576
/// datasheet's and Linux's older default), which the published test vectors use.
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The Toeplitz hash of `input` under `key`: for every input bit set (most significant bit of
/// the first byte first), the 32 key bits starting at that bit's position are XORed into the
/// result. `input` longer than `KEY_LEN - 4` bytes (36) sees zero key bits past the key's end.
pub fn toeplitz(key: &[u8; KEY_LEN], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &byte) in input.iter().enumerate() {
        let next = key.get(i + 4).copied().unwrap_or(0);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = window << 1 | u32::from(next >> (7 - bit) & 1);
        }
    }
    hash
}

/// The hash of an IPv4 frame over its addresses and TCP/UDP ports (the 82576's `MRQC` field
/// selections `TcpIPv4` and `UDPIPv4`).
pub fn hash_ipv4_l4(
    key: &[u8; KEY_LEN],
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
) -> u32 {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&src);
    b[4..8].copy_from_slice(&dst);
    b[8..10].copy_from_slice(&sport.to_be_bytes());
    b[10..].copy_from_slice(&dport.to_be_bytes());
    toeplitz(key, &b)
}

/// The hash of an IPv4 frame over its addresses only (`MRQC` field `IPv4`: other protocols).
pub fn hash_ipv4(key: &[u8; KEY_LEN], src: [u8; 4], dst: [u8; 4]) -> u32 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&src);
    b[4..].copy_from_slice(&dst);
    toeplitz(key, &b)
}

/// The hash of an IPv6 frame over its addresses and TCP/UDP ports (`TcpIPv6`, `UDPIPv6`).
pub fn hash_ipv6_l4(
    key: &[u8; KEY_LEN],
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
) -> u32 {
    let mut b = [0u8; 36];
    b[..16].copy_from_slice(&src);
    b[16..32].copy_from_slice(&dst);
    b[32..34].copy_from_slice(&sport.to_be_bytes());
    b[34..].copy_from_slice(&dport.to_be_bytes());
    toeplitz(key, &b)
}

/// The hash of an IPv6 frame over its addresses only (`IPv6`).
pub fn hash_ipv6(key: &[u8; KEY_LEN], src: [u8; 16], dst: [u8; 16]) -> u32 {
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&src);
    b[16..].copy_from_slice(&dst);
    toeplitz(key, &b)
}

/// A redirection table spreading its entries round-robin over `queues` queues (entry `i` holds
/// queue `i % queues`; `queues` 0 is taken as 1): with 128 entries every queue gets
/// `128 / queues` entries, one more for the first `128 % queues`.
pub fn reta_round_robin(queues: usize) -> [u8; RETA_LEN] {
    let n = queues.max(1);
    core::array::from_fn(|i| (i % n) as u8)
}

/// The queue a frame of hash `hash` goes to under `reta`: the entry its low 7 bits index
/// (82576 datasheet §7.1.2.10; QEMU's `E1000_RSS_QUEUE`, which keeps the entry's low 4 bits).
pub fn queue_of(reta: &[u8; RETA_LEN], hash: u32) -> usize {
    usize::from(reta[(hash as usize) & (RETA_LEN - 1)] & 0x0F)
}

/// Microsoft's RSS verification suite (*Verifying the RSS Hash Calculation*, with
/// [`MICROSOFT_KEY`]): rows of a flow and its hashes, for tests of any Toeplitz implementation
/// (this module's, the simulated 82576's in `drivers::sim`).
pub mod vectors {
    /// A row of Microsoft's tables: destination (address, port), source (address, port), the hash
    /// with ports, the hash of the addresses only.
    pub type Row<A> = (A, u16, A, u16, u32, u32);

    /// Microsoft's IPv4 table.
    pub const V4: [Row<[u8; 4]>; 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x51cc_c178,
            0x323e_8fc2,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xc626_b0ea,
            0xd718_262a,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0x5c2b_394a,
            0xd2d0_a5de,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0xafc7_327f,
            0x8298_9176,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x10e8_28a2,
            0x5d18_09c5,
        ),
    ];

    /// An IPv6 address from its eight 16-bit groups.
    const fn v6(g: [u16; 8]) -> [u8; 16] {
        let mut b = [0u8; 16];
        let mut i = 0;
        while i < 8 {
            b[2 * i] = (g[i] >> 8) as u8;
            b[2 * i + 1] = g[i] as u8;
            i += 1;
        }
        b
    }

    /// Microsoft's IPv6 table.
    pub const V6: [Row<[u8; 16]>; 3] = [
        (
            v6([0x3ffe, 0x2501, 0x200, 3, 0, 0, 0, 1]),
            1766,
            v6([0x3ffe, 0x2501, 0x200, 0x1fff, 0, 0, 0, 7]),
            2794,
            0x4020_7d3d,
            0x2cc1_8cd5,
        ),
        (
            v6([0xff02, 0, 0, 0, 0, 0, 0, 1]),
            4739,
            v6([0x3ffe, 0x501, 8, 0, 0x260, 0x97ff, 0xfe40, 0xefab]),
            14230,
            0xdde5_1bbf,
            0x0f0c_461c,
        ),
        (
            v6([0xfe80, 0, 0, 0, 0x200, 0xf8ff, 0xfe21, 0x67cf]),
            38024,
            v6([0x3ffe, 0x1900, 0x4545, 3, 0x200, 0xf8ff, 0xfe21, 0x67cf]),
            44251,
            0x02d1_feef,
            0x4b61_e985,
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::vectors::{V4, V6};
    use super::*;

    #[test]
    fn ipv4_matches_microsofts_verification_vectors() {
        for (dst, dport, src, sport, with_ports, addrs) in V4 {
            assert_eq!(
                hash_ipv4_l4(&MICROSOFT_KEY, src, dst, sport, dport),
                with_ports,
                "{src:?}:{sport} -> {dst:?}:{dport}"
            );
            assert_eq!(
                hash_ipv4(&MICROSOFT_KEY, src, dst),
                addrs,
                "{src:?} -> {dst:?}"
            );
        }
    }

    #[test]
    fn ipv6_matches_microsofts_verification_vectors() {
        for (dst, dport, src, sport, with_ports, addrs) in V6 {
            assert_eq!(
                hash_ipv6_l4(&MICROSOFT_KEY, src, dst, sport, dport),
                with_ports
            );
            assert_eq!(hash_ipv6(&MICROSOFT_KEY, src, dst), addrs);
        }
    }

    #[test]
    fn the_symmetric_key_hashes_both_directions_alike_and_microsofts_does_not() {
        for (dst, dport, src, sport, _, _) in V4 {
            assert_eq!(
                hash_ipv4_l4(&KEY, src, dst, sport, dport),
                hash_ipv4_l4(&KEY, dst, src, dport, sport)
            );
            assert_ne!(
                hash_ipv4_l4(&MICROSOFT_KEY, src, dst, sport, dport),
                hash_ipv4_l4(&MICROSOFT_KEY, dst, src, dport, sport)
            );
        }
        assert_eq!(KEY[..2], MICROSOFT_KEY[..2]);
    }

    #[test]
    fn the_table_spreads_round_robin_and_a_hash_picks_the_entry_of_its_low_seven_bits() {
        let reta = reta_round_robin(3);
        let per: [usize; 3] =
            core::array::from_fn(|q| reta.iter().filter(|&&e| usize::from(e) == q).count());
        assert_eq!(per, [43, 43, 42]);
        assert_eq!(reta_round_robin(0), reta_round_robin(1));
        assert!(reta_round_robin(16).iter().all(|&e| e < 16));
        assert_eq!(queue_of(&reta, 0x51cc_c178), 0x78 % 3);
        assert_eq!(queue_of(&reta_round_robin(2), 0xffff_ff81), 1);
        assert_eq!(queue_of(&reta_round_robin(2), 0x0000_0080), 0);
    }
}
