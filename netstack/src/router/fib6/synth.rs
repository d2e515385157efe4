//! Synthetic IPv6 route sets of a realistic shape, for tests and benchmarks.
//!
//! The prefix-length mix follows the shape of the global IPv6 BGP table as Geoff Huston's
//! yearly "BGP in 20xx" reports (potaroo.net) show it: /48 the majority, then /32, /44, /40,
//! /36 and a few shorter; a few /64s stand for the more-specifics an operator adds inside its
//! own network. Prefixes cluster as real allocations do: each lies under one of 1,024
//! /20 registry blocks inside 2000::/3 (the global unicast space, RFC 4291 §2.4), and most
//! /48s and /64s sit under a /32 already in the set.

use super::Route6;
use crate::rng::Rng;

/// Prefix lengths and their weights (per thousand routes).
const MIX: [(u8, u32); 8] = [
    (48, 540),
    (32, 130),
    (44, 100),
    (40, 70),
    (36, 50),
    (29, 30),
    (64, 60),
    (56, 20),
];

/// Registry blocks the prefixes cluster under.
const BLOCKS: u32 = 1024;

/// Fills `out` with routes of the mix above, next hops in `0..nexthops` (> 0), from `seed`,
/// then sorts them by (prefix, length) and removes duplicates; returns how many are left at the
/// front of `out` (a few fewer than `out.len()` for large sets). The same seed and length give
/// the same routes everywhere.
pub fn synthetic(seed: u64, nexthops: u32, out: &mut [Route6]) -> usize {
    let mut rng = Rng::new(seed);
    let total: u32 = MIX.iter().map(|&(_, w)| w).sum();
    let mut last32: u128 = 0x2001_0db8 << 96;
    for r in out.iter_mut() {
        let mut pick = rng.below(total);
        let len = MIX
            .iter()
            .find(|&&(_, w)| {
                let hit = pick < w;
                pick = pick.saturating_sub(w);
                hit
            })
            .map_or(48, |&(l, _)| l);
        let random = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
        let prefix = if len > 32 && rng.below(4) != 0 {
            // Three in four longer prefixes sit under the last /32 drawn.
            last32 | (random & !(u128::MAX << 96))
        } else {
            // 2000::/3, then one of BLOCKS fixed /20 blocks (17 bits spread from the block's
            // number), the rest random.
            let block = rng.below(BLOCKS).wrapping_mul(0x9e37_79b1) & 0x1_ffff;
            let p =
                (0b001u128 << 125) | (u128::from(block) << 108) | (random & !(u128::MAX << 108));
            if len == 32 {
                last32 = p & (u128::MAX << 96);
            }
            p
        };
        *r = Route6 {
            prefix: prefix & (u128::MAX << (128 - u32::from(len))),
            len,
            nh: rng.below(nexthops),
        };
    }
    out.sort_unstable_by_key(|r| (r.prefix, r.len));
    let mut kept = 0;
    for i in 0..out.len() {
        if kept == 0 || (out[kept - 1].prefix, out[kept - 1].len) != (out[i].prefix, out[i].len) {
            out[kept] = out[i];
            kept += 1;
        }
    }
    kept
}
