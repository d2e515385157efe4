//! `mode=acl`: the boot's rule set (the bundle's `rules` file) built into memory carved from
//! the zone, with one row of hit counters per CPU, published as `nf::builtin::ACL` before any
//! core starts. Kept for the kernel's life (a live replacement is not built yet).

use crate::dataplane::nf::builtin::{AclTable, ACL};
use core::sync::atomic::AtomicU64;
use mm::Zone;
use netstack::acl::{Acl, Entry, Group, Storage, Tuple};

/// `n` values `init` in a zone block kept for the kernel's life (`mem::alloc_forever`);
/// `None` when the zone has no block that large.
fn carve<T: Copy>(zone: &Zone, n: usize, init: T) -> Option<&'static mut [T]> {
    let block = crate::mem::alloc_forever(zone, n * core::mem::size_of::<T>())?;
    let p = block.as_mut_ptr().cast::<T>();
    for i in 0..n {
        // SAFETY: the block holds at least `n * size_of::<T>()` bytes, is page-aligned (so
        // aligned for `T`) and ours alone: every element is written once before the slice is
        // made.
        unsafe { p.add(i).write(init) };
    }
    // SAFETY: `n` initialised `T`s in the block above, never freed: ours for 'static.
    Some(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// Build the rule set from `text` for `cpus` CPUs and publish it. Returns (rules, tuples,
/// bytes of classifier memory).
///
/// # Errors
/// A bad rules line (named: `rules line N: …`), or no memory for the classifier.
pub fn build(
    zone: &'static Zone,
    text: &'static str,
    cpus: usize,
) -> Result<(usize, usize, usize), heapless::String<160>> {
    use core::fmt::Write;
    let mut why = heapless::String::new();
    let sizes = match Acl::sizes(text) {
        Ok(s) => s,
        Err(e) => {
            let _ = write!(why, "config error: rules file: {e}");
            return Err(why);
        }
    };
    let storage = carve(zone, sizes.rules, Entry::EMPTY)
        .zip(carve(zone, sizes.tuples, Tuple::EMPTY))
        .zip(carve(zone, sizes.groups, Group::EMPTY))
        .zip(carve(zone, sizes.prune, 0u64));
    let Some((((rules, tuples), groups), prune)) = storage else {
        let _ = write!(
            why,
            "memory error: no room for {} rules ({} bytes)",
            sizes.rules,
            sizes.bytes()
        );
        return Err(why);
    };
    let acl = match Acl::build(
        text,
        Storage {
            rules,
            tuples,
            groups,
            prune,
        },
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = write!(why, "config error: rules file: {e}");
            return Err(why);
        }
    };
    let Some(hits) = carve(zone, cpus * (acl.len() + 1), 0u64) else {
        let _ = write!(why, "memory error: no room for the rules' hit counters");
        return Err(why);
    };
    // SAFETY: `u64` and `AtomicU64` have the same size and bit validity (its documentation);
    // the slice is ours alone until it is shared through the table below.
    let hits: &'static [AtomicU64] = unsafe { &*(hits as *mut [u64] as *const [AtomicU64]) };
    let (n, t) = (acl.len(), acl.tuple_count());
    let table = match AclTable::new(acl, hits, cpus) {
        Ok(t) => t,
        Err(need) => {
            let _ = write!(why, "acl: {need} hit counters needed");
            return Err(why);
        }
    };
    ACL.call_once(|| table);
    Ok((n, t, sizes.bytes()))
}
