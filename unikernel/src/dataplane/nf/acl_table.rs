//! The ACL firewall's rule set as one value every core reads ([`AclTable`]): the classifier
//! ([`netstack::acl::Acl`]) and one row of hit counters per core, in zone blocks of its own
//! (identity-mapped buddy blocks: freeing one is no TLB shootdown, no other CPU maps it
//! elsewhere). The table's header is itself in one of its blocks, so a replaced set is freed
//! from the header alone ([`AclTable::free`]) once every core moved on
//! ([`super::Shared::retired`]).

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use mm::{Pfn, Zone, PAGE_SIZE};
use netstack::acl::{Acl, AclError, Entry, Group, Storage, Tuple};

/// Zone blocks of one set: its header, the classifier's four slices, the hit counters.
const BLOCKS: usize = 6;

// The header fits its one page.
const _: () = assert!(core::mem::size_of::<AclTable>() <= PAGE_SIZE);

/// One zone block: its first frame and buddy order.
#[derive(Copy, Clone, Debug)]
struct Block {
    pfn: Pfn,
    order: usize,
}

/// A rule set and its hit counters: `hits` holds one row of `acl.len() + 1` counters per core
/// (the last one of a row: frames no rule matched, the default action's).
pub struct AclTable {
    /// The rules.
    pub acl: Acl<'static>,
    /// Per core, per rule (then the default), frames matched.
    hits: &'static [AtomicU64],
    /// The zone its blocks came from (`None`: not the zone's, never freed).
    zone: Option<&'static Zone>,
    /// Its blocks, the header's among them.
    blocks: [Option<Block>; BLOCKS],
}

impl fmt::Debug for AclTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclTable")
            .field("acl", &self.acl)
            .field("hits", &self.hits.len())
            .field("blocks", &self.blocks)
            .finish()
    }
}

/// Why a rule set was not built.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AclBuildError<'t> {
    /// The text is not a rules file: the line named.
    Rules(AclError<'t>),
    /// The zone has no block for one of its parts.
    Memory {
        /// Bytes of the part that found no block.
        bytes: usize,
    },
}

impl fmt::Display for AclBuildError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclBuildError::Rules(e) => write!(f, "rules file: {e}"),
            AclBuildError::Memory { bytes } => {
                write!(f, "no zone block for {bytes} bytes of the rule set")
            }
        }
    }
}

/// Zone blocks taken for one set so far; all given back when dropped unless kept
/// ([`Carver::keep`]).
struct Carver {
    zone: &'static Zone,
    blocks: [Option<Block>; BLOCKS],
    n: usize,
}

impl Carver {
    /// `n` values `init()` in a block of their own; an empty slice (no block) for `n` = 0.
    fn carve<T>(
        &mut self,
        n: usize,
        init: impl Fn() -> T,
    ) -> Result<&'static mut [T], AclBuildError<'static>> {
        if n == 0 {
            return Ok(Default::default());
        }
        let bytes = n * core::mem::size_of::<T>();
        let order = order_for(bytes.div_ceil(PAGE_SIZE));
        let slot = self
            .blocks
            .get_mut(self.n)
            .ok_or(AclBuildError::Memory { bytes })?;
        let pfn = self
            .zone
            .alloc_pages(order)
            .ok_or(AclBuildError::Memory { bytes })?;
        *slot = Some(Block { pfn, order });
        self.n += 1;
        let p = pfn.addr() as *mut T;
        for i in 0..n {
            // SAFETY: a fresh buddy block of `PAGE_SIZE << order` ≥ `n * size_of::<T>()` bytes,
            // identity-mapped (host memory at its address in the host rig), page-aligned (so
            // aligned for `T`) and ours alone: every element is written once before the slice
            // is made.
            unsafe { p.add(i).write(init()) };
        }
        // SAFETY: `n` initialised `T`s in the block above, which stays ours until the set is
        // freed (`AclTable::free`) or this carver is dropped, neither while the slice is used.
        Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
    }

    /// The blocks, now the set's: not given back on drop.
    fn keep(mut self) -> [Option<Block>; BLOCKS] {
        core::mem::replace(&mut self.blocks, [None; BLOCKS])
    }
}

impl Drop for Carver {
    fn drop(&mut self) {
        give_back(self.zone, &self.blocks);
    }
}

/// Every block of `blocks` back to `zone`.
fn give_back(zone: &Zone, blocks: &[Option<Block>]) {
    for b in blocks.iter().flatten() {
        zone.free_pages_order(b.pfn, b.order);
    }
}

/// The buddy order of the smallest block of at least `pages` pages.
fn order_for(pages: usize) -> usize {
    pages.max(1).next_power_of_two().trailing_zeros() as usize
}

impl AclTable {
    /// `acl` with `hits` (at least `cores × (acl.len() + 1)` counters, zero), in memory that
    /// is never freed ([`AclTable::free`] gives nothing back).
    ///
    /// # Errors
    /// `hits` is too short: the counters it needs.
    pub fn new(
        acl: Acl<'static>,
        hits: &'static [AtomicU64],
        cores: usize,
    ) -> Result<AclTable, usize> {
        let need = cores * (acl.len() + 1);
        if hits.len() < need {
            return Err(need);
        }
        Ok(AclTable {
            acl,
            hits,
            zone: None,
            blocks: [None; BLOCKS],
        })
    }

    /// The rule set of rules file `text` with hit counters for `cores` cores, in blocks of
    /// `zone` (the header in one of them): what [`AclTable::free`] gives back. Takes the
    /// classifier's [`netstack::acl::Sizes::bytes`], the counters' `8 × cores × (rules + 1)`
    /// bytes and one page, each part rounded up to its buddy block.
    ///
    /// # Errors
    /// [`AclBuildError::Rules`] naming the first bad line, or [`AclBuildError::Memory`]; every
    /// block taken is back in the zone.
    pub fn build<'t>(
        zone: &'static Zone,
        text: &'t str,
        cores: usize,
    ) -> Result<&'static AclTable, AclBuildError<'t>> {
        let sizes = Acl::sizes(text).map_err(AclBuildError::Rules)?;
        let mut c = Carver {
            zone,
            blocks: [None; BLOCKS],
            n: 0,
        };
        let header = c.carve(1, core::mem::MaybeUninit::<AclTable>::uninit)?;
        let storage = Storage {
            rules: c.carve(sizes.rules, || Entry::EMPTY)?,
            tuples: c.carve(sizes.tuples, || Tuple::EMPTY)?,
            groups: c.carve(sizes.groups, || Group::EMPTY)?,
            prune: c.carve(sizes.prune, || 0u64)?,
        };
        let acl = Acl::build(text, storage).map_err(AclBuildError::Rules)?;
        let hits = c.carve(cores * (acl.len() + 1), || AtomicU64::new(0))?;
        let hits: &'static [AtomicU64] = hits;
        let blocks = c.keep();
        let header = &mut header[0];
        Ok(header.write(AclTable {
            acl,
            hits,
            zone: Some(zone),
            blocks,
        }))
    }

    /// 4 KiB pages its blocks hold (0 for a table not in the zone's memory).
    pub fn pages(&self) -> usize {
        self.blocks.iter().flatten().map(|b| 1 << b.order).sum()
    }

    /// Give every block of the set back to its zone, the header's last.
    ///
    /// # Safety
    /// Nothing reads the table or its rules or counters any more, nor ever will (every core
    /// moved on to a newer set: [`super::Shared::retired`] handed it back); it was built by
    /// [`AclTable::build`] or is not the zone's ([`AclTable::new`]: nothing is freed).
    pub unsafe fn free(&'static self) {
        let (zone, blocks) = (self.zone, self.blocks);
        // The table is not touched past this point: its header block is among `blocks`.
        if let Some(zone) = zone {
            give_back(zone, &blocks);
        }
    }

    /// Cores the hit counters have rows for.
    pub fn cores(&self) -> usize {
        self.hits.len() / self.row_len()
    }

    /// Counters per core: the rules, then the default.
    fn row_len(&self) -> usize {
        self.acl.len() + 1
    }

    /// Core `k`'s row of counters (empty past the table).
    pub(super) fn row(&self, k: usize) -> &'static [AtomicU64] {
        let n = self.row_len();
        self.hits.get(k * n..(k + 1) * n).unwrap_or(&[])
    }

    /// Frames matched by rule `rule` (`None`: by no rule, the default), summed over the cores.
    pub fn hits(&self, rule: Option<usize>) -> u64 {
        let i = rule.unwrap_or(self.acl.len());
        let n = self.row_len();
        self.hits
            .iter()
            .skip(i)
            .step_by(n)
            .map(|h| h.load(Ordering::Relaxed))
            .sum()
    }
}
