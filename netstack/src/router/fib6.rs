//! IPv6 forwarding information base: longest-prefix match with a Poptrie.
//!
//! The structure is Asai and Ohara's Poptrie ("Poptrie: A Compressed Trie with Population
//! Count for Fast and Scalable Software IP Routing Table Lookup", ACM SIGCOMM 2015, §3):
//!
//! - **Direct pointing** (§3.4): the top [`DIRECT_BITS`] (16) bits of the destination index
//!   `direct`, 2^16 entries (256 KiB). An entry is a leaf (a next-hop index, or
//!   [`NO_ROUTE`]) or, with [`DIRECT_NODE`] set, the index of the node for that /16.
//! - **Nodes** of 64 children (6 bits of the address a level, §3.1). A node holds two
//!   bitmaps: `vector` (bit *i* set: child *i* is a node) and `leafvec` (bit *i* set: child *i*
//!   is a leaf whose value differs from the leaf before it: leaf compression, §3.3), and two
//!   bases: the children that are nodes sit at `nodes[base1..]`, the node's distinct leaves at
//!   `leaves[base0..]`. A child's place is the population count of the bitmap below it (§3.2),
//!   so a node costs 24 bytes whatever its fan-out and runs of equal leaves cost one slot.
//!
//! A lookup is one direct load, then per level a bit test, a popcount and one load: 16 + 6 × 19
//! covers 128 bits (the last level reads 4 address bits and two zero bits).
//!
//! Gannet's memory model: storage comes from the caller (the kernel carves it from its zone),
//! sized first by [`Poptrie::size`]; [`Poptrie::build`] fills it from a route list and the
//! result is read-only (route changes build a new one, as the IPv4 sparse FIB does). Both
//! run [`Build6`], a build in bounded steps for the kernel's stepped FIB job: a unit of work
//! is one node, one short route or 1,024 direct entries, and a node reads a bounded number of
//! routes (its own six lengths' and one binary search per child, never its subtree's). The
//! build keeps its own stack (19 frames of ~300 bytes) and allocates nothing.
//! Next hops are `u32` indices below [`NO_ROUTE`], into the caller's next-hop table, as the IPv4
//! FIB's [`super::fib::Fib::lookup_index`] returns them.

/// Address bits resolved by the direct-pointing table (Poptrie §3.4's *s*; 16 in the paper's
/// evaluation for IPv6).
pub const DIRECT_BITS: u32 = 16;
/// Entries in the direct-pointing table (2^16).
pub const DIRECT_LEN: usize = 1 << DIRECT_BITS;
/// Address bits resolved per node (64 children: one `u64` bitmap).
const STRIDE: u32 = 6;
/// A leaf value meaning "no route" (the largest `u32` below [`DIRECT_NODE`]).
pub const NO_ROUTE: u32 = DIRECT_NODE - 1;
/// Set in a direct-pointing entry that is a node index, not a leaf.
pub const DIRECT_NODE: u32 = 1 << 31;

/// One IPv6 route: `prefix/len` to next-hop index `nh`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route6 {
    /// The prefix, host bits zero (a big-endian address read as `u128`).
    pub prefix: u128,
    /// Prefix length, 0..=128.
    pub len: u8,
    /// Next-hop index, below [`NO_ROUTE`].
    pub nh: u32,
}

/// One internal node (24 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Node6 {
    /// Bit *i* set: child *i* is a node, at `base1 + popcount(vector below i)`.
    pub vector: u64,
    /// Bit *i* set: child *i* is a leaf that starts a new run of equal leaves.
    pub leafvec: u64,
    /// Index of this node's first leaf in the leaf array.
    pub base0: u32,
    /// Index of this node's first child node in the node array.
    pub base1: u32,
}

/// How much storage a route set needs ([`Poptrie::size`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size6 {
    /// Nodes ([`Node6`], 24 bytes each).
    pub nodes: usize,
    /// Leaves (`u32`, 4 bytes each).
    pub leaves: usize,
}

impl Size6 {
    /// Bytes of the whole FIB: direct table, nodes and leaves.
    pub fn bytes(&self) -> usize {
        DIRECT_LEN * 4 + self.nodes * core::mem::size_of::<Node6>() + self.leaves * 4
    }
}

/// Why a route set cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fib6Error {
    /// A prefix length over 128.
    BadLength(Route6),
    /// A prefix with bits set past its length (`2001:db8::1/32`).
    HostBits(Route6),
    /// A next-hop index at or above [`NO_ROUTE`].
    BadNextHop(Route6),
    /// The same prefix and length twice.
    Duplicate(Route6),
    /// The direct table is not [`DIRECT_LEN`] entries.
    DirectLen(usize),
    /// More nodes needed than given (`needed`, `have`).
    Nodes(usize, usize),
    /// More leaves needed than given (`needed`, `have`).
    Leaves(usize, usize),
}

impl core::fmt::Display for Fib6Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let r = |f: &mut core::fmt::Formatter<'_>, what: &str, r: &Route6| {
            let a = core::net::Ipv6Addr::from_bits(r.prefix);
            write!(f, "{a}/{}: {what}", r.len)
        };
        match self {
            Fib6Error::BadLength(x) => r(f, "prefix length over 128", x),
            Fib6Error::HostBits(x) => r(f, "bits set past the prefix length", x),
            Fib6Error::BadNextHop(x) => r(f, "next-hop index out of range", x),
            Fib6Error::Duplicate(x) => r(f, "prefix given twice", x),
            Fib6Error::DirectLen(n) => write!(f, "direct table of {n} entries, not {DIRECT_LEN}"),
            Fib6Error::Nodes(n, h) => write!(f, "{n} nodes needed, {h} given"),
            Fib6Error::Leaves(n, h) => write!(f, "{n} leaves needed, {h} given"),
        }
    }
}

/// A built, read-only IPv6 FIB over caller storage.
pub struct Poptrie<'a> {
    direct: &'a [u32],
    nodes: &'a [Node6],
    leaves: &'a [u32],
    size: Size6,
}

/// The 6 address bits at `depth` (bits past 128 read as zero).
#[inline(always)]
fn chunk(addr: u128, depth: u32) -> u32 {
    ((addr << depth) >> (128 - STRIDE)) as u32
}

/// Bits of a `u64` below bit `i` (0..=63) and `i` itself.
#[inline(always)]
fn through(i: u32) -> u64 {
    (2u64 << i).wrapping_sub(1)
}

impl<'a> Poptrie<'a> {
    /// Sorts `routes` by (prefix, length), checks them and returns the storage they need.
    ///
    /// # Errors
    /// A route with a length over 128, host bits set, a next hop at or above [`NO_ROUTE`], or a
    /// duplicate (prefix, length).
    pub fn size(routes: &mut [Route6]) -> Result<Size6, Fib6Error> {
        let mut b = Build6::new(routes)?;
        while !b.step(&mut Out6::Count, usize::MAX) {}
        Ok(b.used())
    }

    /// Builds the FIB of `routes` into `direct` ([`DIRECT_LEN`] entries), `nodes` and `leaves`
    /// (at least what [`Poptrie::size`] says). `routes` is sorted in place.
    ///
    /// # Errors
    /// What [`Poptrie::size`] refuses; [`Fib6Error::DirectLen`], [`Fib6Error::Nodes`] or
    /// [`Fib6Error::Leaves`] when the storage is short (checked before anything is written).
    pub fn build(
        routes: &mut [Route6],
        direct: &'a mut [u32],
        nodes: &'a mut [Node6],
        leaves: &'a mut [u32],
    ) -> Result<Poptrie<'a>, Fib6Error> {
        if direct.len() != DIRECT_LEN {
            return Err(Fib6Error::DirectLen(direct.len()));
        }
        let need = Self::size(routes)?;
        if need.nodes > nodes.len() {
            return Err(Fib6Error::Nodes(need.nodes, nodes.len()));
        }
        if need.leaves > leaves.len() {
            return Err(Fib6Error::Leaves(need.leaves, leaves.len()));
        }
        let mut b = Build6::new(routes)?;
        let mut out = Out6::Write {
            direct: &mut *direct,
            nodes: &mut *nodes,
            leaves: &mut *leaves,
        };
        while !b.step(&mut out, usize::MAX) {}
        debug_assert_eq!(b.used(), need);
        Ok(Poptrie {
            direct,
            nodes,
            leaves,
            size: need,
        })
    }

    /// The next-hop index of the longest prefix matching `dst` (an address read big-endian),
    /// `None` when no route matches.
    #[inline]
    pub fn lookup_index(&self, dst: u128) -> Option<u32> {
        let e = self.direct[(dst >> (128 - DIRECT_BITS)) as usize];
        let v = if e & DIRECT_NODE == 0 {
            e
        } else {
            let mut n = self.nodes[(e & !DIRECT_NODE) as usize];
            let mut depth = DIRECT_BITS;
            loop {
                let i = chunk(dst, depth);
                if n.vector >> i & 1 != 0 {
                    let below = (n.vector & ((1u64 << i) - 1)).count_ones();
                    n = self.nodes[n.base1 as usize + below as usize];
                    depth += STRIDE;
                } else {
                    let k = (n.leafvec & through(i)).count_ones();
                    break self.leaves[n.base0 as usize + k as usize - 1];
                }
            }
        };
        (v != NO_ROUTE).then_some(v)
    }

    /// [`Poptrie::lookup_index`] of an [`core::net::Ipv6Addr`].
    pub fn lookup(&self, dst: core::net::Ipv6Addr) -> Option<u32> {
        self.lookup_index(dst.to_bits())
    }

    /// The storage this FIB uses.
    pub fn size_used(&self) -> Size6 {
        self.size
    }
}

/// Sorts by (prefix, length) and checks every route.
fn prepare(routes: &mut [Route6]) -> Result<(), Fib6Error> {
    for r in routes.iter() {
        if r.len > 128 {
            return Err(Fib6Error::BadLength(*r));
        }
        if r.prefix & !mask(r.len) != 0 {
            return Err(Fib6Error::HostBits(*r));
        }
        if r.nh >= NO_ROUTE {
            return Err(Fib6Error::BadNextHop(*r));
        }
    }
    routes.sort_unstable_by_key(|r| (r.prefix, r.len));
    if let Some(w) = routes
        .windows(2)
        .find(|w| (w[0].prefix, w[0].len) == (w[1].prefix, w[1].len))
    {
        return Err(Fib6Error::Duplicate(w[1]));
    }
    Ok(())
}

/// The network mask of a /`len`.
fn mask(len: u8) -> u128 {
    match len {
        0 => 0,
        l => u128::MAX << (128 - u32::from(l.min(128))),
    }
}

/// Node levels below the direct table: depths 16, 22, …, 124.
const LEVELS: usize = ((128 - DIRECT_BITS) as usize).div_ceil(STRIDE as usize);
/// Direct-table entries written in one unit of work.
pub const DIRECT_PER_UNIT: usize = 1024;

/// Where a build writes: nowhere (counting, [`Poptrie::size`]) or into the FIB's storage.
pub enum Out6<'o> {
    /// Count nodes and leaves only.
    Count,
    /// Write the direct table ([`DIRECT_LEN`] entries), nodes and leaves (at least what
    /// counting said).
    Write {
        /// The direct-pointing table.
        direct: &'o mut [u32],
        /// Node storage.
        nodes: &'o mut [Node6],
        /// Leaf storage.
        leaves: &'o mut [u32],
    },
}

/// A node being built: its children are visited one a unit.
#[derive(Clone, Copy)]
struct Frame {
    depth: u32,
    /// Its children's leaves (inherited by the child node of a slot in `vector`).
    vals: [u32; 64],
    vector: u64,
    /// Routes not yet given to a child (sorted; every child's lie in order).
    lo: usize,
    hi: usize,
    /// Next slot to look at for a child, and that child's node index.
    next: u32,
    child: u32,
}

const EMPTY_FRAME: Frame = Frame {
    depth: 0,
    vals: [NO_ROUTE; 64],
    vector: 0,
    lo: 0,
    hi: 0,
    next: 64,
    child: 0,
};

/// A Poptrie build in bounded steps ([`Build6::step`]): each unit of work is one node (whose
/// cost is bounded by its 64 slots: the routes it reads are at most those of lengths
/// `depth+1..=depth+6` starting in it, and one binary search per child), one route of /16 or
/// shorter at the direct level, or [`DIRECT_PER_UNIT`] direct-table entries. Counting and
/// writing run the same steps.
pub struct Build6<'r> {
    routes: &'r [Route6],
    used: Size6,
    /// Direct table: entries filled with [`NO_ROUTE`] so far, then painting: the route and
    /// the entry within its range.
    filled: usize,
    paint: usize,
    paint_at: usize,
    /// The walk over the /16 groups: next route, and the short routes covering it.
    cursor: usize,
    covering: [(u128, u8, u32); DIRECT_BITS as usize + 1],
    ncovering: usize,
    stack: [Frame; LEVELS],
    frames: usize,
    /// Most routes one node read one by one ([`Build6::max_node_reads`]).
    max_reads: usize,
}

impl<'r> Build6<'r> {
    /// A build of `routes`, which it sorts by (prefix, length) and checks.
    ///
    /// # Errors
    /// A route with a length over 128, host bits set, a next hop at or above [`NO_ROUTE`], or
    /// a duplicate (prefix, length).
    pub fn new(routes: &'r mut [Route6]) -> Result<Build6<'r>, Fib6Error> {
        prepare(routes)?;
        Ok(Build6 {
            routes,
            used: Size6::default(),
            filled: 0,
            paint: 0,
            paint_at: 0,
            cursor: 0,
            covering: [(0, 0, NO_ROUTE); DIRECT_BITS as usize + 1],
            ncovering: 0,
            stack: [EMPTY_FRAME; LEVELS],
            frames: 0,
            max_reads: 0,
        })
    }

    /// Does at most `budget` (≥ 1) units of work; `true` when the build is complete.
    pub fn step(&mut self, out: &mut Out6<'_>, budget: usize) -> bool {
        let mut left = budget.max(1);
        while left > 0 {
            left -= 1;
            if let Out6::Write { direct, .. } = out {
                if self.filled < DIRECT_LEN {
                    let end = (self.filled + DIRECT_PER_UNIT).min(DIRECT_LEN);
                    direct[self.filled..end].fill(NO_ROUTE);
                    self.filled = end;
                    continue;
                }
                if self.paint_step(direct) {
                    continue;
                }
            }
            if self.frames > 0 {
                self.child_step(out);
                continue;
            }
            if !self.group_step(out) {
                return true;
            }
        }
        false
    }

    /// Paints up to [`DIRECT_PER_UNIT`] entries of the next route of /16 or shorter; `false`
    /// when every one is painted (sorted order puts a covering route before those it covers,
    /// so the longest paints last).
    fn paint_step(&mut self, direct: &mut [u32]) -> bool {
        while let Some(r) = self.routes.get(self.paint) {
            if u32::from(r.len) > DIRECT_BITS {
                self.paint += 1;
                continue;
            }
            let first = (r.prefix >> (128 - DIRECT_BITS)) as usize;
            let n = 1usize << (DIRECT_BITS - u32::from(r.len));
            let from = first + self.paint_at;
            let to = (from + DIRECT_PER_UNIT).min(first + n);
            direct[from..to].fill(r.nh);
            if to == first + n {
                self.paint += 1;
                self.paint_at = 0;
            } else {
                self.paint_at = to - first;
            }
            return true;
        }
        false
    }

    /// At the direct level: takes the next short route onto the covering stack, or opens the
    /// node of the next /16 holding longer routes (its inherited leaf the longest short route
    /// covering it); `false` when no route is left.
    fn group_step(&mut self, out: &mut Out6<'_>) -> bool {
        let Some(&r) = self.routes.get(self.cursor) else {
            return false;
        };
        while self.ncovering > 0 {
            let (p, l, _) = self.covering[self.ncovering - 1];
            if r.prefix & mask(l) == p {
                break;
            }
            self.ncovering -= 1;
        }
        if u32::from(r.len) <= DIRECT_BITS {
            self.covering[self.ncovering] = (r.prefix, r.len, r.nh);
            self.ncovering += 1;
            self.cursor += 1;
            return true;
        }
        let top = r.prefix >> (128 - DIRECT_BITS);
        let end = self.cursor
            + self.routes[self.cursor..]
                .partition_point(|x| x.prefix >> (128 - DIRECT_BITS) == top);
        let inherited = match self.ncovering {
            0 => NO_ROUTE,
            n => self.covering[n - 1].2,
        };
        let at = self.reserve_nodes(1);
        if let Out6::Write { direct, .. } = out {
            direct[top as usize] = DIRECT_NODE | at;
        }
        self.open(out, at, DIRECT_BITS, inherited, self.cursor, end);
        self.cursor = end;
        true
    }

    /// Visits the top frame's next child node (opening it), or closes the frame.
    fn child_step(&mut self, out: &mut Out6<'_>) {
        let f = &mut self.stack[self.frames - 1];
        let rest = if f.next < 64 {
            f.vector & (u64::MAX << f.next)
        } else {
            0
        };
        if rest == 0 {
            self.frames -= 1;
            return;
        }
        let i = rest.trailing_zeros();
        let depth = f.depth;
        let routes = &self.routes[f.lo..f.hi];
        let lo = f.lo + routes.partition_point(|r| chunk(r.prefix, depth) < i);
        let hi = f.lo + routes.partition_point(|r| chunk(r.prefix, depth) <= i);
        let (at, inherited) = (f.child, f.vals[i as usize]);
        f.next = i + 1;
        f.child += 1;
        f.lo = hi;
        self.open(out, at, depth + STRIDE, inherited, lo, hi);
    }

    /// Builds node `at` for the prefix at `depth` whose routes are `routes[lo..hi]` (sorted;
    /// those of length ≤ `depth` are skipped: `inherited` holds them), and pushes its frame
    /// if it has child nodes.
    fn open(
        &mut self,
        out: &mut Out6<'_>,
        at: u32,
        depth: u32,
        inherited: u32,
        lo: usize,
        hi: usize,
    ) {
        let mut vals = [inherited; 64];
        let mut vector = 0u64;
        let mut k = lo;
        let mut reads = 0;
        while k < hi {
            reads += 1;
            let r = self.routes[k];
            let len = u32::from(r.len);
            if len <= depth {
                k += 1;
                continue;
            }
            let first = chunk(r.prefix, depth);
            if len <= depth + STRIDE {
                let n = 1usize << (depth + STRIDE - len);
                vals[first as usize..first as usize + n].fill(r.nh);
                k += 1;
            } else {
                // A longer route: slot `first` is a node; skip the rest of its routes (all
                // its short ones came before it).
                vector |= 1 << first;
                k += self.routes[k..hi].partition_point(|x| chunk(x.prefix, depth) == first);
            }
        }
        self.max_reads = self.max_reads.max(reads);
        let mut leafvec = 0u64;
        let base0 = self.used.leaves as u32;
        let mut last = None;
        for (i, &v) in vals.iter().enumerate() {
            if vector >> i & 1 == 0 && last != Some(v) {
                leafvec |= 1 << i;
                if let Out6::Write { leaves, .. } = out {
                    leaves[self.used.leaves] = v;
                }
                self.used.leaves += 1;
                last = Some(v);
            }
        }
        let base1 = self.reserve_nodes(vector.count_ones() as usize);
        if let Out6::Write { nodes, .. } = out {
            nodes[at as usize] = Node6 {
                vector,
                leafvec,
                base0,
                base1,
            };
        }
        if vector != 0 {
            self.stack[self.frames] = Frame {
                depth,
                vals,
                vector,
                lo,
                hi,
                next: 0,
                child: base1,
            };
            self.frames += 1;
        }
    }

    /// Takes `n` consecutive node slots; returns the first.
    fn reserve_nodes(&mut self, n: usize) -> u32 {
        let at = self.used.nodes as u32;
        self.used.nodes += n;
        at
    }

    /// The most routes one node has read one by one so far (besides one binary search per
    /// child): the bound of a unit's work, at most 2^6 + 2^5 + … + 2 = 126 routes of the
    /// node's six lengths, 64 children and the shorter routes of its prefix (at most 128).
    pub fn max_node_reads(&self) -> usize {
        self.max_reads
    }

    /// What the build has used so far (all of it once [`Build6::step`] said done).
    pub fn used(&self) -> Size6 {
        self.used
    }
}

pub mod synth;

#[cfg(test)]
mod tests;
