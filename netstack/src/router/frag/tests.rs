//! Fragmenter tests: fragments checked with smoltcp's wire types (an independent IPv4 header
//! and checksum implementation), and reassembled in a property test.

use super::*;
use crate::router::tests::cases;
use crate::wire::{IPV4_IDENT, IPV4_PROTOCOL, IPV4_TTL};
use proptest::prelude::*;
use smoltcp::wire::Ipv4Packet;
use std::vec;
use std::vec::Vec;

/// A frame: Ethernet header, an IPv4 header with `opts` (a multiple of 4 bytes), flags
/// (`df`, `mf`) and fragment offset `off` (8-byte units), `payload_len` payload bytes
/// counting up; checksum filled by smoltcp.
fn frame(opts: &[u8], df: bool, mf: bool, off: u16, payload_len: usize) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let hl = IPV4_MIN_HDR + opts.len();
    let mut f = vec![0u8; ETH_HDR_LEN + hl + payload_len];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0x0b, 2, 2, 0, 0, 0, 1, 1]);
    f[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut f[ETH_HDR_LEN..];
    ip[IPV4_VER_IHL] = 0x40 | (hl / 4) as u8;
    ip[IPV4_TOTAL_LEN].copy_from_slice(&((hl + payload_len) as u16).to_be_bytes());
    ip[IPV4_IDENT].copy_from_slice(&0xbeefu16.to_be_bytes());
    let flags = (u16::from(df) << 14) | (u16::from(mf) << 13) | off;
    ip[IPV4_FLAGS_FRAG].copy_from_slice(&flags.to_be_bytes());
    ip[IPV4_TTL] = 63;
    ip[IPV4_PROTOCOL] = 17;
    ip[12..20].copy_from_slice(&[10, 0, 0, 2, 192, 168, 7, 9]);
    ip[IPV4_MIN_HDR..hl].copy_from_slice(opts);
    for (i, b) in ip[hl..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    Ipv4Packet::new_checked(&mut f[ETH_HDR_LEN..])
        .unwrap()
        .fill_checksum();
    f
}

/// All fragments of `segs` at `mtu`, each checked to be a valid IPv4 frame (smoltcp).
fn fragments(segs: &[&[u8]], mtu: u16) -> Result<Vec<Vec<u8>>, FragError> {
    let mut f = Fragmenter::new(segs, mtu)?;
    let count = f.count();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while let Some(want) = f.next_len() {
        let n = f.next_into(&mut buf)?.unwrap();
        assert_eq!(n, want);
        let p = Ipv4Packet::new_checked(&buf[ETH_HDR_LEN..n]).unwrap();
        assert!(p.verify_checksum(), "fragment {} checksum", out.len());
        assert_eq!(usize::from(p.total_len()), n - ETH_HDR_LEN);
        assert!(usize::from(p.total_len()) <= usize::from(mtu).max(n - ETH_HDR_LEN));
        out.push(buf[..n].to_vec());
        assert_eq!(f.remaining(), count - out.len());
    }
    assert_eq!(f.next_into(&mut buf), Ok(None));
    assert_eq!(out.len(), count);
    Ok(out)
}

/// (total length, MF, offset in bytes, DF) of a fragment frame.
fn shape(f: &[u8]) -> (u16, bool, u16, bool) {
    let p = Ipv4Packet::new_checked(&f[ETH_HDR_LEN..]).unwrap();
    (
        p.total_len(),
        p.more_frags(),
        p.frag_offset(),
        p.dont_frag(),
    )
}

#[test]
fn jumbo_frame_at_1500_is_seven_fragments() {
    let f = frame(&[], false, false, 0, 9000 - 20);
    assert_eq!(f.len(), 9014);
    let frags = fragments(&[&f], 1500).unwrap();
    assert_eq!(frags.len(), 7);
    let want: Vec<_> = (0..7u16)
        .map(|i| match i {
            6 => (20 + 100, false, 6 * 1480, false),
            _ => (1500, true, i * 1480, false),
        })
        .collect();
    assert_eq!(frags.iter().map(|f| shape(f)).collect::<Vec<_>>(), want);
    assert_eq!(
        frags.iter().map(|f| f.len()).collect::<Vec<_>>(),
        [1514, 1514, 1514, 1514, 1514, 1514, 134]
    );
    // Offsets in 8-byte units on the wire: 185 per fragment.
    let units: Vec<u16> = frags
        .iter()
        .map(|f| ipv4::be16(f, ETH_HDR_LEN + IPV4_FLAGS_FRAG.start) & IPV4_FRAG_OFFSET)
        .collect();
    assert_eq!(units, [0, 185, 370, 555, 740, 925, 1110]);
    for (i, g) in frags.iter().enumerate() {
        assert_eq!(g[..14], f[..14], "Ethernet header copied");
        // Everything but total length, flags/offset and checksum as in the original.
        for b in [0, 1, 4, 5, 8, 9, 12, 13, 14, 15, 16, 17, 18, 19] {
            assert_eq!(g[ETH_HDR_LEN + b], f[ETH_HDR_LEN + b], "header byte {b}");
        }
        let data = &g[ETH_HDR_LEN + 20..];
        let at = ETH_HDR_LEN + 20 + i * 1480;
        assert_eq!(data, &f[at..at + data.len()], "payload of fragment {i}");
    }
    // Hand-computed checksum of the first fragment: the original's header with total
    // length 1500 (0x05dc) instead of 9000 (0x2328) and MF set (0x2000 instead of 0).
    let c0 = ipv4::be16(&f, ETH_HDR_LEN + 10);
    let mut sum = u32::from(!c0) + u32::from(!0x2328u16) + 0x05dc + 0x2000;
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    assert_eq!(ipv4::be16(&frags[0], ETH_HDR_LEN + 10), !(sum as u16));
}

#[test]
fn only_options_with_the_copy_flag_are_in_later_fragments() {
    // NOP, a loose source route (type 131: copied) with one address, Record Route (7: not
    // copied) with one free slot, End of Option List: 16 bytes, header 36.
    let lsrr = [131, 7, 4, 10, 0, 1, 2];
    let rr = [7, 7, 8, 10, 0, 1, 1];
    let mut opts = vec![1];
    opts.extend_from_slice(&lsrr);
    opts.extend_from_slice(&rr);
    opts.push(0);
    let f = frame(&opts, false, false, 0, 200);
    let frags = fragments(&[&f], 100).unwrap();
    // First: header 36, (100 − 36) & !7 = 64 bytes; later: header 28 (LSRR + EOL), 72 bytes.
    assert_eq!(
        frags.iter().map(|f| shape(f)).collect::<Vec<_>>(),
        [
            (100, true, 0, false),
            (100, true, 64, false),
            (28 + 64, false, 136, false)
        ]
    );
    // The first fragment has every option; only total length, flags and checksum differ.
    for b in (0..36).filter(|b| !matches!(b, 2 | 3 | 6 | 7 | 10 | 11)) {
        assert_eq!(
            frags[0][ETH_HDR_LEN + b],
            f[ETH_HDR_LEN + b],
            "header byte {b}"
        );
    }
    for g in &frags[1..] {
        assert_eq!(g[ETH_HDR_LEN], 0x47, "IHL 7");
        assert_eq!(&g[ETH_HDR_LEN + 20..ETH_HDR_LEN + 27], &lsrr);
        assert_eq!(g[ETH_HDR_LEN + 27], 0, "padded with End of Option List");
    }
    assert_eq!(
        &frags[1][ETH_HDR_LEN + 28..],
        &f[ETH_HDR_LEN + 36 + 64..][..72]
    );
    assert_eq!(&frags[2][ETH_HDR_LEN + 28..], &f[ETH_HDR_LEN + 36 + 136..]);
    // No copied option: later fragments have a plain 20-byte header.
    let mut opts = vec![1];
    opts.extend_from_slice(&rr);
    let f = frame(&opts, false, false, 0, 200);
    let frags = fragments(&[&f], 100).unwrap();
    assert_eq!(frags[0][ETH_HDR_LEN], 0x47);
    assert!(frags[1..].iter().all(|g| g[ETH_HDR_LEN] == 0x45));
    // (100 − 28) & !7 = 72, then (100 − 20) & !7 = 80, then 48.
    assert_eq!(
        frags.iter().map(|f| shape(f)).collect::<Vec<_>>(),
        [
            (100, true, 0, false),
            (100, true, 72, false),
            (68, false, 152, false)
        ]
    );
}

#[test]
fn a_fragment_is_fragmented_at_its_own_offset() {
    for mf in [true, false] {
        let f = frame(&[], false, mf, 100, 3000);
        let frags = fragments(&[&f], 1500).unwrap();
        assert_eq!(
            frags.iter().map(|f| shape(f)).collect::<Vec<_>>(),
            [
                (1500, true, 800, false),
                (1500, true, 800 + 1480, false),
                (20 + 40, mf, 800 + 2960, false),
            ],
            "MF of the last one as the original's"
        );
    }
}

#[test]
fn an_mtu_not_a_multiple_of_8_plus_the_header() {
    let f = frame(&[], false, false, 0, 2000);
    let frags = fragments(&[&f], 1003).unwrap();
    // (1003 − 20) & !7 = 976: 976, 976, 48.
    assert_eq!(
        frags.iter().map(|f| shape(f)).collect::<Vec<_>>(),
        [
            (996, true, 0, false),
            (996, true, 976, false),
            (68, false, 1952, false)
        ]
    );
    // The smallest MTU: 68 with a 20-byte header carries 48 bytes per fragment.
    let frags = fragments(&[&f], 68).unwrap();
    assert_eq!(frags.len(), 2000usize.div_ceil(48));
}

#[test]
fn a_datagram_that_fits_is_one_unchanged_fragment() {
    for df in [false, true] {
        let f = frame(&[], df, false, 0, 1480);
        let frags = fragments(&[&f], 1500).unwrap();
        assert_eq!(frags, [f]);
    }
    // Ethernet padding after the datagram is not copied.
    let mut f = frame(&[], false, false, 0, 10);
    let orig = f.clone();
    f.resize(60, 0xee);
    assert_eq!(fragments(&[&f], 1500).unwrap(), [orig]);
}

#[test]
fn errors_are_named() {
    let f = frame(&[], true, false, 0, 2000);
    assert_eq!(
        Fragmenter::new(&[&f], 1500).unwrap_err(),
        FragError::DontFragment
    );
    let f = frame(&[], false, false, 0, 2000);
    assert_eq!(
        Fragmenter::new(&[&f], 27).unwrap_err(),
        FragError::MtuTooSmall
    );
    assert!(Fragmenter::new(&[&f], 28).is_ok());
    let opts = [1u8; 40];
    let g = frame(&opts, false, false, 0, 100);
    assert_eq!(
        Fragmenter::new(&[&g], 67).unwrap_err(),
        FragError::MtuTooSmall
    );
    assert_eq!(fragments(&[&g], 68).unwrap().len(), 3, "8 + 48 + 44 bytes");
    // Checksum, version, EtherType, total length.
    for (at, v) in [(ETH_HDR_LEN + 10, 0), (ETH_HDR_LEN, 0x65), (12, 0x86)] {
        let mut b = f.clone();
        b[at] ^= v | 1;
        assert_eq!(
            Fragmenter::new(&[&b], 1500).unwrap_err(),
            FragError::BadHeader
        );
    }
    // A malformed option (length 0).
    let b = frame(&[7, 0, 4, 0], false, false, 0, 100);
    assert_eq!(
        Fragmenter::new(&[&b], 68).unwrap_err(),
        FragError::BadHeader
    );
    // Offset + payload past 65535 bytes.
    let b = frame(&[], false, true, 8000, 2000);
    assert_eq!(
        Fragmenter::new(&[&b], 1500).unwrap_err(),
        FragError::BadHeader
    );
    assert_eq!(
        Fragmenter::new(&[&f[..f.len() - 1]], 1500).unwrap_err(),
        FragError::Truncated
    );
    assert_eq!(
        Fragmenter::new(&[], 1500).unwrap_err(),
        FragError::Truncated
    );
    assert_eq!(
        Fragmenter::new(&[&f[..20], &f[20..]], 1500).unwrap_err(),
        FragError::HeadTooShort
    );
    let segs: [&[u8]; 1] = [&f];
    let mut fr = Fragmenter::new(&segs, 1500).unwrap();
    let mut small = [0u8; 1513];
    assert_eq!(
        fr.next_into(&mut small),
        Err(FragError::BufferTooSmall { need: 1514 })
    );
    assert_eq!(fr.remaining(), 2, "nothing consumed");
    let mut buf = [0u8; 1514];
    assert_eq!(fr.next_into(&mut buf), Ok(Some(1514)));
}

/// Split `f` into segments at the given points (sorted, deduplicated, inside the frame, the
/// first after the headers).
fn split<'a>(f: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut v = Vec::new();
    let mut at = 0;
    for &c in cuts {
        v.push(&f[at..c]);
        at = c;
    }
    v.push(&f[at..]);
    v
}

/// Option sets: none, NOP + RR (not copied), LSRR (copied) + NOP, security-like copied
/// option (type 130) + timestamp (not copied), 40 bytes of NOPs.
fn option_set(k: usize) -> Vec<u8> {
    match k {
        0 => vec![],
        1 => vec![1, 7, 7, 4, 0, 0, 0, 0],
        2 => vec![131, 7, 4, 10, 0, 1, 2, 1],
        3 => vec![130, 4, 0xab, 0xcd, 68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        _ => vec![1; 40],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Reassembling the fragments (RFC 815's view: data placed at its offset) gives back the
    /// original payload, without holes or overlaps; every fragment fits the MTU, has a valid
    /// checksum, the original's ID/TTL/protocol/addresses, MF on all but the last, and the
    /// last the original's MF.
    #[test]
    fn fragments_reassemble_to_the_original(
        payload_len in 0usize..9000,
        k in 0usize..5,
        mtu in 68u16..=9000,
        off in 0u16..100,
        mf: bool,
        cuts in proptest::collection::vec(0usize..10_000, 0..6),
    ) {
        let opts = option_set(k);
        let hl = IPV4_MIN_HDR + opts.len();
        let f = frame(&opts, false, mf, off, payload_len);
        let mut cuts: Vec<usize> = cuts
            .into_iter()
            .map(|c| ETH_HDR_LEN + hl + c % (f.len() - ETH_HDR_LEN - hl + 1))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let segs = split(&f, &cuts);
        let frags = fragments(&segs, mtu).unwrap();
        let mut got = vec![None::<u8>; payload_len];
        for (i, g) in frags.iter().enumerate() {
            let p = Ipv4Packet::new_checked(&g[ETH_HDR_LEN..]).unwrap();
            prop_assert!(p.total_len() <= mtu || frags.len() == 1);
            prop_assert_eq!(&g[..ETH_HDR_LEN], &f[..ETH_HDR_LEN]);
            for b in [1, 4, 5, 8, 9, 12, 13, 14, 15, 16, 17, 18, 19] {
                prop_assert_eq!(g[ETH_HDR_LEN + b], f[ETH_HDR_LEN + b]);
            }
            let last = i + 1 == frags.len();
            prop_assert_eq!(p.more_frags(), if last { mf } else { true });
            prop_assert!(!p.dont_frag());
            if !last {
                prop_assert_eq!(p.payload().len() % 8, 0);
            }
            let start = usize::from(p.frag_offset()) - usize::from(off) * 8;
            for (j, &b) in p.payload().iter().enumerate() {
                prop_assert_eq!(got[start + j], None, "overlap at {}", start + j);
                got[start + j] = Some(b);
            }
            if i == 0 {
                prop_assert_eq!(usize::from(p.header_len()), hl);
                prop_assert_eq!(&g[ETH_HDR_LEN + 20..ETH_HDR_LEN + hl], &opts[..]);
            } else {
                // Only the options with the copy flag, EOL-padded.
                let mut want = [0u8; 40];
                let n = copied_options(&opts, &mut want).unwrap();
                prop_assert_eq!(&g[ETH_HDR_LEN + 20..ETH_HDR_LEN + usize::from(p.header_len())], &want[..n]);
            }
        }
        let want: Vec<Option<u8>> = f[ETH_HDR_LEN + hl..].iter().map(|&b| Some(b)).collect();
        prop_assert_eq!(got, want);
    }
}
