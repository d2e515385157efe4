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
//! sized first by [`Poptrie::size`]; [`Poptrie::build`] fills it from a route list in one pass
//! and the result is read-only (route changes build a new one, as the IPv4 sparse FIB does).
//! The build recurses once a level (at most 19 frames of ~300 bytes) and allocates nothing.
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
        prepare(routes)?;
        let mut b = Builder {
            nodes: &mut [],
            leaves: &mut [],
            used: Size6::default(),
            write: false,
        };
        b.direct(routes, &mut []);
        Ok(b.used)
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
        let mut b = Builder {
            nodes,
            leaves,
            used: Size6::default(),
            write: true,
        };
        b.direct(routes, direct);
        debug_assert_eq!(b.used, need);
        let Builder { nodes, leaves, .. } = b;
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

/// Fills (or, with `write` false, only counts) nodes and leaves.
struct Builder<'s> {
    nodes: &'s mut [Node6],
    leaves: &'s mut [u32],
    used: Size6,
    write: bool,
}

impl Builder<'_> {
    /// The direct-pointing level: routes of /16 and shorter paint `direct` (sorted order puts a
    /// covering route before the routes it covers, so the longest paints last), then each /16
    /// with longer routes under it gets a node whose inherited leaf is the longest short route
    /// covering it (a stack of the covering routes, so that counting needs no direct table).
    fn direct(&mut self, routes: &[Route6], direct: &mut [u32]) {
        if self.write {
            direct.fill(NO_ROUTE);
            for r in routes.iter().filter(|r| u32::from(r.len) <= DIRECT_BITS) {
                let first = (r.prefix >> (128 - DIRECT_BITS)) as usize;
                let n = 1usize << (DIRECT_BITS - u32::from(r.len));
                direct[first..first + n].fill(r.nh);
            }
        }
        // Routes of /0../16 covering the current position, shortest first (nested, so at most
        // one of each length).
        let mut covering = [(0u128, 0u8, NO_ROUTE); DIRECT_BITS as usize + 1];
        let mut depth = 0;
        let mut i = 0;
        while let Some(&r) = routes.get(i) {
            while depth > 0 && r.prefix & mask(covering[depth - 1].1) != covering[depth - 1].0 {
                depth -= 1;
            }
            if u32::from(r.len) <= DIRECT_BITS {
                covering[depth] = (r.prefix, r.len, r.nh);
                depth += 1;
                i += 1;
                continue;
            }
            let top = (r.prefix >> (128 - DIRECT_BITS)) as usize;
            let end = routes[i..]
                .iter()
                .position(|x| (x.prefix >> (128 - DIRECT_BITS)) as usize != top)
                .map_or(routes.len(), |n| i + n);
            let inherited = if depth > 0 {
                covering[depth - 1].2
            } else {
                NO_ROUTE
            };
            let node = self.reserve_nodes(1);
            if self.write {
                direct[top] = DIRECT_NODE | node;
            }
            self.node(node, DIRECT_BITS, inherited, &routes[i..end]);
            i = end;
        }
    }

    /// Builds node `at` for the prefix at `depth` whose routes strictly longer than `depth`
    /// are `routes` (sorted; shorter or equal ones there are skipped: `inherited` holds them).
    fn node(&mut self, at: u32, depth: u32, inherited: u32, routes: &[Route6]) {
        let mut vals = [inherited; 64];
        let mut vector = 0u64;
        for r in routes.iter().filter(|r| u32::from(r.len) > depth) {
            let first = chunk(r.prefix, depth);
            let len = u32::from(r.len);
            if len > depth + STRIDE {
                vector |= 1 << first;
            } else {
                let n = 1usize << (depth + STRIDE - len);
                vals[first as usize..first as usize + n].fill(r.nh);
            }
        }
        let mut leafvec = 0u64;
        let base0 = self.used.leaves as u32;
        let mut last = None;
        for (i, &v) in vals.iter().enumerate() {
            if vector >> i & 1 == 0 && last != Some(v) {
                leafvec |= 1 << i;
                if self.write {
                    self.leaves[self.used.leaves] = v;
                }
                self.used.leaves += 1;
                last = Some(v);
            }
        }
        let base1 = self.reserve_nodes(vector.count_ones() as usize);
        if self.write {
            self.nodes[at as usize] = Node6 {
                vector,
                leafvec,
                base0,
                base1,
            };
        }
        let mut child = base1;
        let mut rest = routes;
        for i in 0..64u32 {
            if vector >> i & 1 == 0 {
                continue;
            }
            let lo = rest.partition_point(|r| chunk(r.prefix, depth) < i);
            let hi = rest.partition_point(|r| chunk(r.prefix, depth) <= i);
            self.node(child, depth + STRIDE, vals[i as usize], &rest[lo..hi]);
            rest = &rest[hi..];
            child += 1;
        }
    }

    /// Takes `n` consecutive node slots; returns the first.
    fn reserve_nodes(&mut self, n: usize) -> u32 {
        let at = self.used.nodes as u32;
        self.used.nodes += n;
        at
    }
}

pub mod synth;

#[cfg(test)]
mod tests;
