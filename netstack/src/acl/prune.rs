//! Tuple pruning: which tuples a packet's addresses can match at all, so that a lookup probes
//! only those.
//!
//! The pruned tuple-space search of V. Srinivasan, S. Suri, G. Varghese, "Packet classification
//! using tuple space search", ACM SIGCOMM 1999, §4 ("Tuple Pruning"): a longest-prefix match
//! (LPM) on each address dimension on its own finds the deepest of the rules' prefixes holding
//! the packet's address; that prefix carries the tuples of every rule whose prefix on this
//! dimension holds the address (its own rules' and its ancestors'); a rule can match only in a
//! tuple both dimensions name, so the lookup probes the intersection of the two lists.
//!
//! Here a list is a bitset over the tuples' indices (`⌈T / 64⌉` words for `T` tuples). Tuples are
//! numbered in order of their lowest rule index, so the intersection, walked from its lowest
//! bit, comes in that order and the first-match early exit of the unpruned search still holds.
//!
//! The LPM of one dimension is the rules' distinct prefixes flattened into disjoint intervals
//! of addresses, each naming the deepest prefix over it (at most `2P + 1` intervals for `P`
//! prefixes: a prefix opens one and, where it ends inside its parent, the parent resumes),
//! binary-searched in a sorted array. A direct index on the address's top `b` bits narrows the
//! search to the intervals that overlap that block (the first level of the DIR-24-8 idea of
//! P. Gupta, S. Lin, N. McKeown, "Routing lookups in hardware at memory access speeds",
//! INFOCOM 1998, with a binary search instead of a second table), so a lookup costs a few
//! comparisons whatever the rule count.
//!
//! All of it lives in one `u64` slice per dimension of the caller's storage, sized from the rule
//! and tuple counts alone (no distinct-prefix count is known before building): see [`Layout`].

/// Largest `b` of the direct index (`2^16` buckets, 512 KiB).
const MAX_INDEX_BITS: u32 = 16;

/// Where one dimension's tables lie in its `u64` words, for `rules` rules in `tuples` tuples.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub(super) struct Layout {
    /// Interval slots: `2 × rules + 1` (one interval more than two per prefix, at most one
    /// prefix per rule). During the build the rules' sort keys use the top `rules` of them.
    intervals: usize,
    /// `b`: the direct index has `2^b` buckets, `b = ⌊log2(intervals)⌋` (at most 16), so about
    /// one to two intervals per bucket on evenly spread addresses.
    index_bits: u32,
    /// Words per tuple bitset: `⌈tuples / 64⌉`.
    pub(super) words: usize,
    /// Bitset rows: one per distinct prefix (at most `rules`) and row 0, the empty set.
    rows: usize,
}

impl Layout {
    /// The layout for `rules` rules in `tuples` tuples.
    pub(super) const fn new(rules: usize, tuples: usize) -> Layout {
        let intervals = 2 * rules + 1;
        let log = usize::BITS - 1 - intervals.leading_zeros();
        Layout {
            intervals,
            index_bits: if log < MAX_INDEX_BITS {
                log
            } else {
                MAX_INDEX_BITS
            },
            words: tuples.div_ceil(64),
            rows: rules + 1,
        }
    }

    /// `u64` words of one dimension's tables.
    pub(super) const fn side_words(&self) -> usize {
        self.intervals + (1 << self.index_bits) + self.rows * self.words
    }
}

/// Append the interval `start..` of bitset row `row` to `iv[..*out]`; one starting where the
/// last one starts replaces it (a deeper prefix, or a parent resuming where a child and the
/// next prefix meet), one starting past the last address is dropped.
fn emit(iv: &mut [u64], out: &mut usize, start: u64, row: u32) {
    if start >> 32 != 0 {
        return;
    }
    let v = start << 32 | u64::from(row);
    if *out > 0 && iv[*out - 1] >> 32 == start {
        iv[*out - 1] = v;
    } else {
        iv[*out] = v;
        *out += 1;
    }
}

/// One dimension's LPM, built: read-only views of its part of the storage.
#[derive(Copy, Clone, Debug)]
pub(super) struct Side<'a> {
    /// Sorted, disjoint intervals covering every address: `start << 32 | row`, the row of the
    /// deepest prefix over `start..` (0: none).
    intervals: &'a [u64],
    /// Per top-`b`-bits block of addresses: `first | count << 32`, the intervals overlapping it
    /// (`intervals[first..first + count]`, the first holding the block's first address).
    index: &'a [u64],
    /// The bitset rows, `words` `u64`s each.
    rows: &'a [u64],
    /// `32 - b`: an address's bucket is `address >> shift` (taken on a `u64`: `b` may be 0).
    shift: u32,
}

impl<'a> Side<'a> {
    /// Build one dimension's tables in `store` (exactly [`Layout::side_words`] words) from the
    /// rules' `(masked prefix, length, tuple index)` on that dimension, in any order.
    ///
    /// Cost: a sort of the rules' keys and a pass over them, then one over the index's buckets.
    pub(super) fn build(
        store: &'a mut [u64],
        layout: Layout,
        prefixes: impl ExactSizeIterator<Item = (u32, u8, u32)>,
    ) -> Side<'a> {
        let (intervals, rest) = store.split_at_mut(layout.intervals);
        let (index, rows) = rest.split_at_mut(1 << layout.index_bits);
        let w = layout.words;
        // Sort keys, (prefix, length, tuple) in one u64, in the top of the interval slots: the
        // pass below writes intervals from the bottom, at most two per key read, and so stays
        // below the keys still to be read (key c sits at `rules + 1 + c`, at most `2c + 1`
        // intervals are written once it is read).
        let n = prefixes.len();
        let keys_at = layout.intervals - n;
        for (k, (addr, len, tuple)) in intervals[keys_at..].iter_mut().zip(prefixes) {
            *k = u64::from(addr) << 32 | u64::from(len) << 16 | u64::from(tuple);
        }
        intervals[keys_at..].sort_unstable();
        rows[..w].fill(0);
        // Open prefixes holding the current one, outermost first: (end, exclusive; row).
        let mut open = [(0u64, 0u32); 34];
        let mut depth = 0;
        let mut out = 0;
        let mut used_rows = 1;
        emit(intervals, &mut out, 0, 0);
        let mut k = keys_at;
        while k < layout.intervals {
            let key = intervals[k];
            let start = key >> 32;
            let len = (key >> 16) as u8;
            // Close the open prefixes that end before this one starts; their parent resumes.
            while depth > 0 && open[depth - 1].0 <= start {
                depth -= 1;
                let parent = if depth > 0 { open[depth - 1].1 } else { 0 };
                emit(intervals, &mut out, open[depth].0, parent);
            }
            let parent = if depth > 0 { open[depth - 1].1 } else { 0 };
            let row = used_rows as u32;
            used_rows += 1;
            rows.copy_within(
                parent as usize * w..(parent as usize + 1) * w,
                row as usize * w,
            );
            // This prefix's own tuples: every key of the same prefix.
            while k < layout.intervals && intervals[k] >> 16 == key >> 16 {
                let t = (intervals[k] & 0xffff) as usize;
                rows[row as usize * w + t / 64] |= 1 << (t % 64);
                k += 1;
            }
            open[depth] = (start + (1u64 << (32 - u32::from(len))), row);
            depth += 1;
            emit(intervals, &mut out, start, row);
        }
        while depth > 0 {
            depth -= 1;
            let parent = if depth > 0 { open[depth - 1].1 } else { 0 };
            emit(intervals, &mut out, open[depth].0, parent);
        }
        // The index: for each block, the interval holding its first address and those that
        // start inside it.
        let shift = 32 - layout.index_bits;
        let mut first = 0;
        for (j, slot) in index.iter_mut().enumerate() {
            let lo = (j as u64) << shift;
            let hi = lo + (1 << shift);
            while first + 1 < out && intervals[first + 1] >> 32 <= lo {
                first += 1;
            }
            let mut last = first;
            while last + 1 < out && intervals[last + 1] >> 32 < hi {
                last += 1;
            }
            *slot = first as u64 | ((last - first + 1) as u64) << 32;
        }
        Side {
            intervals: &intervals[..out],
            index,
            rows,
            shift,
        }
    }

    /// The offset in the bitset rows of the bitset of `addr`'s deepest prefix: a bucket of the
    /// index, then a binary search of its few intervals.
    #[inline(always)]
    pub(super) fn row(&self, addr: u32, words: usize) -> usize {
        let b = self.index[(u64::from(addr) >> self.shift) as usize];
        let (mut at, mut n) = (b as u32 as usize, (b >> 32) as usize);
        // The last interval starting at or before `addr`: compare `start << 32 | row` with
        // `addr << 32 | u32::MAX`.
        let key = u64::from(addr) << 32 | u64::from(u32::MAX);
        while n > 1 {
            let half = n / 2;
            if self.intervals[at + half] <= key {
                at += half;
            }
            n -= half;
        }
        (self.intervals[at] as u32 as usize) * words
    }

    /// The bitset row at `offset` ([`Side::row`]).
    #[inline(always)]
    pub(super) fn bits(&self, offset: usize, words: usize) -> &'a [u64] {
        &self.rows[offset..offset + words]
    }
}
