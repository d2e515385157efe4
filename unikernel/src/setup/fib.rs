//! Router mode: the one FIB, built on the boot CPU (connected, local and broadcast routes,
//! `route=`, the routes file), then read by every core's router.
//!
//! The FIB is sparse (docs/DESIGN.md, "Remapped buffers and batched TLB shootdown"): its
//! DIR-24-8 tbl24 is a 64 MiB range of the vmap area whose 4 KiB chunks (1,024 entries, one /14)
//! map a page of their own only where the entries inside differ; every uniform chunk maps the
//! one shared read-only page holding its value. The rule table and tbl8 are `vmalloc`'d. All of
//! it is taken before the boot free-page count and never freed.

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

use crate::arch::time::uptime_us;
use crate::mem::paging::{self, PAGE};
use crate::mem::vmap::{self, VmArea};
use core::fmt::Write;
use core::sync::atomic::AtomicU32;
use log::info;
use mm::{Pfn, Zone};
use netstack::config::PORTS;
use netstack::router::{
    Fib, PortConfig, Router, RouterConfig, RuleSlot, Tbl24Chunk, TBL24_CHUNKS, TBL24_CHUNK_LEN,
    TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::{Config, MacAddr};
use unikernel::dataplane::CoreRouter;

/// The router that builds the FIB on the boot CPU.
type FibBuilder = Router<'static, mm::Pfn>;

/// Most DIR-24-8 second-level groups (256 entries, 1 KiB each): prefixes longer than /24
/// under at most 1024 distinct /24s (1 MiB). Fewer are `vmalloc`'d when fewer can be needed.
const TBL8_GROUPS_MAX: usize = 1024;
/// Fewest rule slots (a power of two).
const MIN_RULES: usize = 64;
/// Distinct uniform-chunk values that get a shared page; a chunk whose value finds no room
/// here gets a page of its own (correct, just not shared). Seen: a handful (no route, the
/// default route, a few short prefixes).
const SHARED_VALUES: usize = 64;

/// The FIB, built once before any other core starts; read-only afterwards.
static SHARED_FIB: spin::Once<Fib<'static>> = spin::Once::new();

/// A configuration error found while building the FIB (the boot stops with it).
pub struct FibError(pub heapless::String<256>);

fn err(args: core::fmt::Arguments<'_>) -> FibError {
    let mut s = heapless::String::new();
    let _ = s.write_fmt(args);
    FibError(s)
}

/// The router's ports: port `i` has MAC `macs[i]` and address `ip{i}=`.
fn router_ports(cfg: &Config, macs: [MacAddr; PORTS]) -> Result<[PortConfig; PORTS], FibError> {
    if let Some(i) = (0..PORTS).find(|&i| cfg.ip[i].is_none()) {
        return Err(err(format_args!(
            "config error: ip{i}= is required in router mode"
        )));
    }
    Ok(core::array::from_fn(|i| PortConfig {
        mac: macs[i],
        addr: cfg.ip[i].expect("checked above"),
    }))
}

/// What the FIB's memory is, for the boot log (pages of 4 KiB).
#[derive(Default, Clone, Copy)]
struct FibMemory {
    /// tbl24 chunks with a page of their own (mixed, or uniform without a shared slot).
    chunk_pages: usize,
    /// Shared read-only pages (one per distinct uniform value).
    shared_pages: usize,
    /// Uniform chunks (mapping a shared page).
    shared_chunks: usize,
    /// Pages of tbl8 and of the rule table.
    tbl8_pages: usize,
    rule_pages: usize,
}

impl FibMemory {
    fn total_bytes(&self) -> u64 {
        (self.chunk_pages + self.shared_pages + self.tbl8_pages + self.rule_pages) as u64 * PAGE
    }
}

/// `n` elements of `T` from a fresh `vmalloc` (zeroed, writable, never freed).
fn vmalloc_slice<T>(
    zone: &Zone,
    n: usize,
    what: &str,
) -> Result<(&'static mut [T], usize), FibError> {
    let bytes = (n * core::mem::size_of::<T>()) as u64;
    let area = vmap::vmalloc(zone, bytes)
        .map_err(|e| err(format_args!("router: FIB {what} ({bytes} bytes): {e}")))?;
    // SAFETY: `area` is a fresh vmap range of ≥ `bytes` zeroed, writable bytes, 4 KiB aligned,
    // mapped for us alone and never unmapped: exclusively ours for 'static. Callers use only
    // types for which all-zero bytes are valid (u32) or overwrite every element first.
    let s = unsafe { core::slice::from_raw_parts_mut(area.base as *mut T, n) };
    Ok((s, area.pages))
}

/// One page from the zone, for a tbl24 chunk.
fn zone_page(zone: &Zone, mem: &FibMemory) -> Result<Pfn, FibError> {
    zone.alloc_pages(0).ok_or_else(|| {
        err(format_args!(
            "router: out of memory for the FIB's tbl24 after {} own and {} shared pages \
             (give the guest more memory or fewer routes)",
            mem.chunk_pages, mem.shared_pages
        ))
    })
}

/// A zone page as its 1,024 tbl24 entries.
fn page_entries(pfn: Pfn) -> &'static mut [u32] {
    // SAFETY: `pfn` is a page fresh from the zone (identity-mapped, 4 KiB, ours alone until it
    // is mapped read-only into tbl24, after which it is never written through this slice: each
    // caller drops the slice before mapping it).
    unsafe { core::slice::from_raw_parts_mut(pfn.addr() as *mut u32, TBL24_CHUNK_LEN) }
}

/// Map chunk `c` of `area` to `pfn`, read-only.
fn map_chunk(area: VmArea, c: usize, pfn: Pfn) -> Result<(), FibError> {
    paging::vmap_page(area.page_addr(c), pfn.addr(), false)
        .map_err(|e| err(format_args!("router: FIB tbl24 chunk {c}: {e}")))
}

/// Rule slots and tbl8 groups for the routes given. Rule slots: a power of two with at least
/// 8/7 of them (the rule table's fill limit) for the routes file's lines, `route=` and each
/// port's three routes. Groups: at most one per route longer than /24 (each port's local and
/// broadcast /32 included), at most [`TBL8_GROUPS_MAX`] (seal reports if they do not suffice).
fn fib_sizes(cfg: &Config, routes_file: Option<&str>) -> (usize, usize) {
    let n = cfg.routes.len() + routes_file.map_or(0, |t| t.lines().count()) + 3 * PORTS;
    let long = cfg.routes.iter().filter(|r| r.0.len > 24).count()
        + routes_file.map_or(0, |t| {
            netstack::parse_routes_file(t)
                .filter(|r| r.as_ref().is_ok_and(|(_, (net, _))| net.len > 24))
                .count()
        })
        + 2 * PORTS;
    (
        (n * 8 / 7 + 1).next_power_of_two().max(MIN_RULES),
        long.min(TBL8_GROUPS_MAX),
    )
}

/// The sparse build's rule phase: vmalloc the rule table and tbl8 (sized by
/// [`fib_sizes`]), install the ports' routes, `route=` and the routes file, and seal.
fn build_rules(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&str>,
    mem: &mut FibMemory,
) -> Result<Fib<'static>, FibError> {
    let (nrules, groups) = fib_sizes(cfg, routes_file);
    let (tbl8, p) = vmalloc_slice::<u32>(zone, groups * TBL8_GROUP_LEN, "tbl8")?;
    mem.tbl8_pages = p;
    let (rules, p) = vmalloc_slice::<RuleSlot>(zone, nrules, "rule table")?;
    mem.rule_pages = p;
    rules.fill(RuleSlot::EMPTY);
    let fib = Fib::new_sparse(tbl8, rules).map_err(|e| err(format_args!("router: FIB: {e}")))?;
    // The MACs do not matter to the FIB (core_router gets the real ones).
    let ports = router_ports(cfg, [MacAddr::default(); PORTS])?;
    let mut router = FibBuilder::new(fib, &ports, RouterConfig::default())
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))?;
    for (net, gw) in cfg.routes.iter() {
        router
            .add_route(*net, *gw)
            .map_err(|e| err(format_args!("config error: route={net},{gw}: {e}")))?;
    }
    if let Some(text) = routes_file {
        let mut n = 0;
        for r in netstack::parse_routes_file(text) {
            match r {
                Ok((line, (net, gw))) => {
                    router.add_route(net, gw).map_err(|e| {
                        err(format_args!("config error: routes file line {line}: {net},{gw}: {e}"))
                    })?;
                    n += 1;
                }
                Err((line, text, why)) => {
                    return Err(err(format_args!(
                        "config error: routes file line {line}: `{text}`: {why} (expected PREFIX/LEN,GATEWAY)"
                    )))
                }
            }
        }
        info!("router: {n} routes from the routes file");
    }
    let mut fib = router.into_fib();
    fib.seal().map_err(|e| {
        err(format_args!(
            "router: FIB of {} routes with {} tbl8 groups: {e}",
            fib.len(),
            fib.tbl8_usage().1
        ))
    })?;
    Ok(fib)
}

/// The sparse build's tbl24 phase: a 64 MiB vmap range whose chunk `c` maps, read-only, the
/// shared page of its value if [`Fib::fill_chunk`] found it uniform, else a zone page holding
/// the chunk. Returns the flat view of the range.
fn map_tbl24(
    fib: &mut Fib<'static>,
    zone: &Zone,
    mem: &mut FibMemory,
) -> Result<&'static [AtomicU32], FibError> {
    let area = vmap::alloc_va(TBL24_LEN * 4 / PAGE as usize)
        .map_err(|e| err(format_args!("router: FIB tbl24: {e}")))?;
    let mut shared: heapless::Vec<(u32, Pfn), SHARED_VALUES> = heapless::Vec::new();
    let mut scratch = zone_page(zone, mem)?;
    for c in 0..TBL24_CHUNKS {
        let kind = fib
            .fill_chunk(c, page_entries(scratch))
            .map_err(|e| err(format_args!("router: FIB tbl24 chunk {c}: {e}")))?;
        let pfn = match kind {
            Tbl24Chunk::Uniform(v) => {
                mem.shared_chunks += 1;
                if let Some(&(_, p)) = shared.iter().find(|s| s.0 == v) {
                    p
                } else {
                    page_entries(scratch).fill(v);
                    let p = scratch;
                    if shared.push((v, p)).is_ok() {
                        mem.shared_pages += 1;
                    } else {
                        mem.shared_chunks -= 1;
                        mem.chunk_pages += 1;
                    }
                    scratch = zone_page(zone, mem)?;
                    p
                }
            }
            Tbl24Chunk::Mixed => {
                mem.chunk_pages += 1;
                let p = scratch;
                scratch = zone_page(zone, mem)?;
                p
            }
        };
        map_chunk(area, c, pfn)?;
    }
    zone.free_pages_order(scratch, 0);
    // SAFETY: every page of `area` (TBL24_LEN u32s, 4 KiB aligned) was just mapped read-only to
    // a frame holding its chunk; the mappings are never changed or removed, so the range is
    // valid for reads for 'static. It is only read, with atomic loads (valid on read-only memory
    // for a lock-free 4-byte atomic), never written.
    Ok(unsafe { core::slice::from_raw_parts(area.base as *const AtomicU32, TBL24_LEN) })
}

/// Boot CPU, once, before the boot free-page count: build the sparse FIB from the
/// configuration and the routes file, and publish it for [`core_router`].
///
/// # Errors
/// A [`FibError`] naming the bad address, route or routes-file line, or the memory that ran
/// out.
pub fn build_fib(cfg: &Config, zone: &Zone, routes_file: Option<&str>) -> Result<(), FibError> {
    let t0 = uptime_us();
    let mut mem = FibMemory::default();
    let mut fib = build_rules(cfg, zone, routes_file, &mut mem)?;
    let t1 = uptime_us();
    let tbl24 = map_tbl24(&mut fib, zone, &mut mem)?;
    fib.attach_tbl24(tbl24)
        .map_err(|e| err(format_args!("router: FIB: {e}")))?;
    let t2 = uptime_us();
    info!(
        "router: {} routes in the FIB (connected, local, broadcast, static); {} of {} tbl8 groups used",
        fib.len(),
        fib.tbl8_usage().0,
        fib.tbl8_usage().1,
    );
    info!(
        "router: FIB tbl24 {} chunks: {} real chunk pages, {} uniform chunks on {} shared pages; \
         FIB memory {} KiB (tbl24 {} KiB, tbl8 {} KiB, rules {} KiB); built in {} ms (rules {} ms, tbl24 {} ms)",
        TBL24_CHUNKS,
        mem.chunk_pages,
        mem.shared_chunks,
        mem.shared_pages,
        mem.total_bytes() / 1024,
        (mem.chunk_pages + mem.shared_pages) * 4,
        mem.tbl8_pages * 4,
        mem.rule_pages * 4,
        (t2 - t0) / 1000,
        (t1 - t0) / 1000,
        (t2 - t1) / 1000,
    );
    SHARED_FIB.call_once(|| fib);
    Ok(())
}

/// Core `k`'s router (of `cores`) over the shared FIB (built by [`build_fib`] before any other
/// core starts); its IP IDs interleave with the other cores' (RFC 6864).
///
/// # Errors
/// A [`FibError`] if the FIB was not built or the ports' addresses are bad.
pub fn core_router(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    k: usize,
    cores: usize,
) -> Result<CoreRouter, FibError> {
    let fib = SHARED_FIB.get().ok_or_else(|| {
        err(format_args!(
            "router: the FIB was not built before this core started"
        ))
    })?;
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    CoreRouter::new(fib, &router_ports(cfg, macs)?, rc)
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))
}
