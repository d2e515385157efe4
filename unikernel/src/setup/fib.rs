//! Router mode: the one FIB, built on the boot CPU (connected, local and broadcast routes,
//! `route=`, the routes file), then read by every core's router.
//!
//! The FIB is sparse (docs/DESIGN.md, "Remapped buffers and batched TLB shootdown"): its
//! DIR-24-8 tbl24 is a 64 MiB range of the vmap area whose 4 KiB chunks (1,024 entries, one /14)
//! map a page of their own only where the entries inside differ; every uniform chunk maps the
//! one shared read-only page holding its value. The rule table and tbl8 are `vmalloc`'d. The
//! boot FIB is taken before the boot free-page count.
//!
//! Live reload (RCU style): `routes commit` builds a new FIB on the boot CPU, publishes it
//! (`PUBLISHED` pointer, then `GENERATION`), and each routing core switches its router at its
//! quiescent point ([`quiescent`], from housekeeping) and records the generation it saw. Once
//! every routing core saw it, the old FIB is retired ([`poll_retire`]): all its vmap ranges
//! unmapped into flush batches, one shootdown per batch to the routing cores, then its frames
//! freed and its ranges released. FIB records live in a fixed pool of slots (no heap).

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

use crate::arch::time::uptime_us;
use crate::mem::paging::{self, PAGE};
use crate::mem::vmap::{self, VmArea};
use crate::percpu::{current_cpu, MAX_CPUS};
use crate::tlb;
use core::cell::UnsafeCell;
use core::fmt::Write;
use core::net::Ipv4Addr;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use log::info;
use mm::tlb::{CpuMask, FlushBatch};
use mm::{Pfn, Zone};
use netstack::config::PORTS;
use netstack::router::{
    Fib, Ipv4Net, PortConfig, Router, RouterConfig, RuleSlot, Tbl24Chunk, TBL24_CHUNKS,
    TBL24_CHUNK_LEN, TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::stats::FibStats;
use netstack::{Config, MacAddr};
use unikernel::dataplane::{Core, CoreRouter, Platform};

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

/// What a FIB build took from the zone and the vmap area: a failed build gives it back at
/// once (a local flush: no other CPU ever saw it), a replaced FIB after its RCU grace period
/// (one batched shootdown to the routing cores).
#[derive(Default)]
struct FibAreas {
    /// The rule table and tbl8 (`vmalloc`'d: every page its own frame).
    rules: Option<VmArea>,
    tbl8: Option<VmArea>,
    /// The 64 MiB tbl24 range (own chunk pages and shared pages mapped into it).
    tbl24: Option<VmArea>,
    /// The shared uniform-value pages, each mapped by many tbl24 chunks (freed once each, not
    /// once per PTE).
    shared: heapless::Vec<(u32, Pfn), SHARED_VALUES>,
    /// The tbl24 build's scratch page (not mapped).
    scratch: Option<Pfn>,
}

/// One built FIB and what it holds.
struct FibRecord {
    fib: Fib<'static>,
    areas: FibAreas,
    mem: FibMemory,
    /// Its generation (1 = built at boot).
    generation: u64,
}

/// A route change from the console, applied after the boot configuration by every later
/// build (until `routes reload`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RouteDelta {
    /// `route add PREFIX/LEN,GATEWAY`.
    Add(Ipv4Net, Ipv4Addr),
    /// `route del PREFIX/LEN`.
    Del(Ipv4Net),
}

/// Most console route changes kept (committed and pending together).
pub const MAX_DELTAS: usize = 64;
/// FIB records: the published one, one retiring, one being built.
const FIB_SLOTS: usize = 3;
/// Frames one retirement batch holds: 16,384 (128 KiB of `.bss`), above the 14,650 frames of
/// the 100,000-route FIB (BENCHMARKS.md "Sparse FIB memory"), so that one retires with one
/// shootdown; a larger FIB takes several batches.
const RETIRE_FRAMES: usize = 16 * 1024;
/// How long a commit (or `quit`) waits for every routing core to pass a quiescent state (its
/// housekeeping, every 10 ms) before it gives up: 500 ms.
const GRACE_MS: u64 = 500;

/// A slot for one [`FibRecord`].
struct Slot(UnsafeCell<Option<FibRecord>>);

// SAFETY: a slot is written only by the boot CPU (boot, `routes commit`, retirement), and
// only while no other CPU holds a reference into it: a record is filled before its FIB is
// published and taken out only after every routing core acknowledged (its `SEEN` generation)
// that it switched to a newer FIB. In between, every CPU only reads it (`&Fib`).
unsafe impl Sync for Slot {}

static SLOTS: [Slot; FIB_SLOTS] = [const { Slot(UnsafeCell::new(None)) }; FIB_SLOTS];

/// The published FIB (RCU pointer): set by the boot CPU with `Release` before
/// [`GENERATION`], read by each routing core at its quiescent point.
static PUBLISHED: AtomicPtr<Fib<'static>> = AtomicPtr::new(core::ptr::null_mut());
/// Generation of the published FIB (0: none, not router mode).
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// Per CPU: the FIB generation its router uses (its last RCU quiescent state).
static SEEN: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// The boot CPU's reload state.
struct Reload {
    /// Slot of the published FIB.
    published: usize,
    /// A replaced FIB waiting for its grace period: (slot, the generation every routing core
    /// must have seen, publish time in µs since boot).
    retiring: Option<(usize, u64, u64)>,
    /// Console route changes: `deltas[..committed]` are in the published FIB.
    deltas: heapless::Vec<RouteDelta, MAX_DELTAS>,
    committed: usize,
    /// The routes file's text, kept for rebuilds: the routes boot module (reserved for the
    /// kernel's life), or the body of the last successful `PUT /routes` (`upload`).
    routes_file: Option<&'static str>,
    /// The `PUT /routes` body `routes_file` points into, if it does (freed when replaced).
    upload: Option<RoutesUpload>,
}

static RELOAD: spin::Mutex<Reload> = spin::Mutex::new(Reload {
    published: 0,
    retiring: None,
    deltas: heapless::Vec::new(),
    committed: 0,
    routes_file: None,
    upload: None,
});

/// Counters for STATS (`fib`).
static RELOADS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static ROUTES: AtomicU64 = AtomicU64::new(0);
static PAGES: AtomicU64 = AtomicU64::new(0);
static PAGES_BOOT: AtomicU64 = AtomicU64::new(0);
static PAGES_RETIRING: AtomicU64 = AtomicU64::new(0);
static LAST_BUILD_MS: AtomicU64 = AtomicU64::new(0);
static LAST_SWAP_US: AtomicU64 = AtomicU64::new(0);
static RETIRED: AtomicU64 = AtomicU64::new(0);
static RETIRE_BATCHES: AtomicU64 = AtomicU64::new(0);

/// The batch retirements (and failed builds) unmap into: the boot CPU's only.
static RETIRE_BATCH: spin::Mutex<FlushBatch<RETIRE_FRAMES>> = spin::Mutex::new(FlushBatch::new());

/// The `fib` section of STATS (`None` outside router mode).
pub fn fib_stats() -> Option<FibStats> {
    let generation = GENERATION.load(Ordering::Acquire);
    (generation > 0).then(|| FibStats {
        generation,
        reloads: RELOADS.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        routes: ROUTES.load(Ordering::Relaxed),
        pages: PAGES.load(Ordering::Relaxed),
        pages_boot: PAGES_BOOT.load(Ordering::Relaxed),
        pages_retiring: PAGES_RETIRING.load(Ordering::Relaxed),
        last_build_ms: LAST_BUILD_MS.load(Ordering::Relaxed),
        last_swap_us: LAST_SWAP_US.load(Ordering::Relaxed),
        retired: RETIRED.load(Ordering::Relaxed),
        retire_batches: RETIRE_BATCHES.load(Ordering::Relaxed),
        routes_text_pages: UPLOAD_PAGES.load(Ordering::Relaxed),
    })
}

/// Pages the FIBs hold now (published + retiring) and held at boot (taken before the boot
/// free-page count): `quit` checks `free now + FIB now == free at boot + FIB at boot`.
/// `PUT /routes` bodies (being received, or kept as the routes file) count as FIB pages.
pub fn fib_pages() -> (u64, u64) {
    (
        PAGES.load(Ordering::Relaxed)
            + PAGES_RETIRING.load(Ordering::Relaxed)
            + UPLOAD_PAGES.load(Ordering::Relaxed),
        PAGES_BOOT.load(Ordering::Relaxed),
    )
}

impl FibMemory {
    fn pages(&self) -> u64 {
        (self.chunk_pages + self.shared_pages + self.tbl8_pages + self.rule_pages) as u64
    }
}

/// `n` elements of `T` from a fresh `vmalloc` recorded in `slot` (zeroed, writable; given
/// back when the FIB is discarded or retired).
fn vmalloc_slice<T>(
    zone: &Zone,
    n: usize,
    what: &str,
    slot: &mut Option<VmArea>,
) -> Result<(&'static mut [T], usize), FibError> {
    let bytes = (n * core::mem::size_of::<T>()) as u64;
    let area = vmap::vmalloc(zone, bytes)
        .map_err(|e| err(format_args!("router: FIB {what} ({bytes} bytes): {e}")))?;
    *slot = Some(area);
    // SAFETY: `area` is a fresh vmap range of ≥ `bytes` zeroed, writable bytes, 4 KiB aligned,
    // mapped for us alone. It is unmapped only when its FIB is discarded (never published) or
    // retired (after every core that could read it switched to a newer FIB and the slice's
    // FIB record was dropped): no reference outlives the mapping. Callers use only types for
    // which all-zero bytes are valid (u32) or overwrite every element first.
    let s = unsafe { core::slice::from_raw_parts_mut(area.base as *mut T, n) };
    Ok((s, area.pages))
}

/// The build's scratch page (a fresh zone page, recorded in `areas` until it is used).
fn scratch(zone: &Zone, mem: &FibMemory, areas: &mut FibAreas) -> Result<Pfn, FibError> {
    if let Some(p) = areas.scratch {
        return Ok(p);
    }
    let p = zone.alloc_pages(0).ok_or_else(|| {
        err(format_args!(
            "router: out of memory for the FIB's tbl24 after {} own and {} shared pages \
             (give the guest more memory or fewer routes)",
            mem.chunk_pages, mem.shared_pages
        ))
    })?;
    areas.scratch = Some(p);
    Ok(p)
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
/// 8/7 of them (the rule table's fill limit) for the routes file's lines, `route=`, the
/// console's additions and each port's three routes. Groups: at most one per route longer
/// than /24 (each port's local and broadcast /32 included), at most [`TBL8_GROUPS_MAX`] (seal
/// reports if they do not suffice).
fn fib_sizes(cfg: &Config, routes_file: Option<&str>, deltas: &[RouteDelta]) -> (usize, usize) {
    let adds = || {
        deltas.iter().filter_map(|d| match d {
            RouteDelta::Add(net, _) => Some(net),
            RouteDelta::Del(_) => None,
        })
    };
    let n = cfg.routes.len()
        + routes_file.map_or(0, |t| t.lines().count())
        + 3 * PORTS
        + adds().count();
    let long = cfg.routes.iter().filter(|r| r.0.len > 24).count()
        + routes_file.map_or(0, |t| {
            netstack::parse_routes_file(t)
                .filter(|r| r.as_ref().is_ok_and(|(_, (net, _))| net.len > 24))
                .count()
        })
        + adds().filter(|n| n.len > 24).count()
        + 2 * PORTS;
    (
        (n * 8 / 7 + 1).next_power_of_two().max(MIN_RULES),
        long.clamp(1, TBL8_GROUPS_MAX),
    )
}

/// The sparse build's rule phase: vmalloc the rule table and tbl8 (sized by
/// [`fib_sizes`]), install the ports' routes, `route=`, the routes file and the console's
/// changes, and seal.
fn build_rules(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&str>,
    deltas: &[RouteDelta],
    mem: &mut FibMemory,
    areas: &mut FibAreas,
) -> Result<Fib<'static>, FibError> {
    let (nrules, groups) = fib_sizes(cfg, routes_file, deltas);
    let (tbl8, p) = vmalloc_slice::<u32>(zone, groups * TBL8_GROUP_LEN, "tbl8", &mut areas.tbl8)?;
    mem.tbl8_pages = p;
    let (rules, p) = vmalloc_slice::<RuleSlot>(zone, nrules, "rule table", &mut areas.rules)?;
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
    for d in deltas {
        match *d {
            RouteDelta::Add(net, gw) => router
                .add_route(net, gw)
                .map_err(|e| err(format_args!("route add {net},{gw}: {e}")))?,
            RouteDelta::Del(net) => router
                .delete_route(net)
                .map_err(|e| err(format_args!("route del {net}: {e}")))?,
        }
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
/// the chunk. Returns the flat view of the range. Everything taken is recorded in `areas`.
fn map_tbl24(
    fib: &mut Fib<'static>,
    zone: &Zone,
    mem: &mut FibMemory,
    areas: &mut FibAreas,
) -> Result<&'static [AtomicU32], FibError> {
    let area = vmap::alloc_va(TBL24_LEN * 4 / PAGE as usize)
        .map_err(|e| err(format_args!("router: FIB tbl24: {e}")))?;
    areas.tbl24 = Some(area);
    for c in 0..TBL24_CHUNKS {
        let s = scratch(zone, mem, areas)?;
        let kind = fib
            .fill_chunk(c, page_entries(s))
            .map_err(|e| err(format_args!("router: FIB tbl24 chunk {c}: {e}")))?;
        let pfn = match kind {
            Tbl24Chunk::Uniform(v) => {
                mem.shared_chunks += 1;
                if let Some(&(_, p)) = areas.shared.iter().find(|s| s.0 == v) {
                    p
                } else {
                    page_entries(s).fill(v);
                    areas.scratch = None;
                    if areas.shared.push((v, s)).is_ok() {
                        mem.shared_pages += 1;
                    } else {
                        mem.shared_chunks -= 1;
                        mem.chunk_pages += 1;
                    }
                    s
                }
            }
            Tbl24Chunk::Mixed => {
                mem.chunk_pages += 1;
                areas.scratch = None;
                s
            }
        };
        if let Err(e) = map_chunk(area, c, pfn) {
            // Not mapped, so no unmap reports it: free it here unless the shared list has it.
            if !areas.shared.iter().any(|&(_, p)| p == pfn) {
                zone.free_pages_order(pfn, 0);
            }
            return Err(e);
        }
    }
    if let Some(s) = areas.scratch.take() {
        zone.free_pages_order(s, 0);
    }
    // SAFETY: every page of `area` (TBL24_LEN u32s, 4 KiB aligned) was just mapped read-only to
    // a frame holding its chunk; the mappings are removed only when this FIB is retired, after
    // every core that could read it switched to a newer FIB and the FIB (holding this slice)
    // was dropped. It is only read, with atomic loads (valid on read-only memory for a
    // lock-free 4-byte atomic), never written.
    Ok(unsafe { core::slice::from_raw_parts(area.base as *const AtomicU32, TBL24_LEN) })
}

/// Build a sparse FIB from the configuration, the routes file and the console's changes. On
/// any error everything the build took is given back before returning.
fn build(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&str>,
    deltas: &[RouteDelta],
) -> Result<(FibRecord, u64, u64), FibError> {
    let t0 = uptime_us();
    let mut mem = FibMemory::default();
    let mut areas = FibAreas::default();
    let built = (|| {
        let mut fib = build_rules(cfg, zone, routes_file, deltas, &mut mem, &mut areas)?;
        let t1 = uptime_us();
        let tbl24 = map_tbl24(&mut fib, zone, &mut mem, &mut areas)?;
        fib.attach_tbl24(tbl24)
            .map_err(|e| err(format_args!("router: FIB: {e}")))?;
        Ok((fib, t1))
    })();
    match built {
        Ok((fib, t1)) => {
            let t2 = uptime_us();
            let rec = FibRecord {
                fib,
                areas,
                mem,
                generation: 0,
            };
            Ok((rec, (t1 - t0) / 1000, (t2 - t1) / 1000))
        }
        Err(e) => {
            // Never published: only this CPU may cache its translations.
            give_back(zone, areas, CpuMask::only(current_cpu() as usize));
            Err(e)
        }
    }
}

/// Unmap everything in `areas`, flush the CPUs in `mask` in batches of [`RETIRE_FRAMES`]
/// frames (one shootdown each: `tlb::flush`), then free the frames (own pages once, each
/// shared page once) and release the virtual ranges. Returns the batches it took.
fn give_back(zone: &Zone, areas: FibAreas, mask: CpuMask) -> u64 {
    let mut guard = RETIRE_BATCH.lock();
    let mut r = Retirer {
        zone,
        batch: &mut guard,
        mask,
        batches: 0,
    };
    if let Some(s) = areas.scratch {
        zone.free_pages_order(s, 0); // never mapped
    }
    let shared: heapless::Vec<Pfn, SHARED_VALUES> = areas.shared.iter().map(|s| s.1).collect();
    for area in [areas.tbl24, areas.tbl8, areas.rules].into_iter().flatten() {
        r.area(area, &shared);
    }
    for &p in &shared {
        r.free(p);
    }
    r.flush();
    r.batches
}

/// A sequence of flush batches being filled (see [`give_back`]).
struct Retirer<'a> {
    zone: &'a Zone,
    batch: &'a mut FlushBatch<RETIRE_FRAMES>,
    mask: CpuMask,
    batches: u64,
}

impl Retirer<'_> {
    /// One shootdown for what the batch holds, then its frames and ranges go back.
    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let zone = self.zone;
        tlb::flush(
            self.batch,
            |pfn| zone.free_pages_order(pfn, 0),
            |base, pages| vmap::release_va(VmArea { base, pages }),
        );
        self.batches += 1;
    }

    /// Free `pfn` after a flush (the current batch's, or the next one's when it is full).
    fn free(&mut self, pfn: Pfn) {
        if self.batch.add_free(pfn).is_err() {
            self.flush();
            let _ = self.batch.add_free(pfn); // an empty batch has room
        }
    }

    /// Unmap `area`: each page into the batch, each frame not in `shared` to be freed, the
    /// range released after the batch holding its last page.
    fn area(&mut self, area: VmArea, shared: &[Pfn]) {
        let mask = self.mask;
        vmap::vunmap(area, |v, pfn| {
            self.batch.add_page(v, mask);
            if !shared.contains(&pfn) {
                self.free(pfn);
            }
        });
        if self.batch.add_va_range(area.base, area.pages).is_err() {
            self.flush();
            let _ = self.batch.add_va_range(area.base, area.pages);
        }
    }
}

/// Log what a FIB is made of.
fn log_fib(what: &str, rec: &FibRecord, rules_ms: u64, tbl24_ms: u64) {
    let (fib, mem) = (&rec.fib, &rec.mem);
    info!(
        "router: {what} generation {}: {} routes in the FIB (connected, local, broadcast, static); {} of {} tbl8 groups used",
        rec.generation,
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
        rules_ms + tbl24_ms,
        rules_ms,
        tbl24_ms,
    );
}

/// Put `rec` in free slot `slot` and publish it as generation `generation` (RCU publish:
/// the record is complete before the pointer, the pointer before the generation).
fn publish(r: &mut Reload, slot: usize, mut rec: FibRecord, generation: u64) {
    rec.generation = generation;
    ROUTES.store(rec.fib.len() as u64, Ordering::Relaxed);
    PAGES.store(rec.mem.pages(), Ordering::Relaxed);
    // SAFETY: `slot` is free (no FIB of it is published or retiring, so no CPU holds a
    // reference into it) and only the boot CPU writes slots (see `Slot`).
    let fib: *const Fib<'static> = unsafe {
        let cell = &mut *SLOTS[slot].0.get();
        &cell.insert(rec).fib
    };
    PUBLISHED.store(fib.cast_mut(), Ordering::Release);
    GENERATION.store(generation, Ordering::Release);
    r.published = slot;
}

/// Boot CPU, once, before the boot free-page count: build the sparse FIB from the
/// configuration and the routes file, and publish it (generation 1) for [`core_router`].
///
/// # Errors
/// A [`FibError`] naming the bad address, route or routes-file line, or the memory that ran
/// out.
pub fn build_fib(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&'static str>,
) -> Result<(), FibError> {
    let mut r = RELOAD.lock();
    if GENERATION.load(Ordering::Acquire) != 0 {
        return Err(err(format_args!("router: the boot FIB was built twice")));
    }
    let (rec, rules_ms, tbl24_ms) = build(cfg, zone, routes_file, &[])?;
    r.routes_file = routes_file;
    PAGES_BOOT.store(rec.mem.pages(), Ordering::Relaxed);
    LAST_BUILD_MS.store(rules_ms + tbl24_ms, Ordering::Relaxed);
    publish(&mut r, 0, rec, 1);
    // SAFETY: just published in slot 0 by this CPU; only read here.
    let rec = unsafe { (*SLOTS[0].0.get()).as_ref() }.expect("just published");
    log_fib("boot FIB", rec, rules_ms, tbl24_ms);
    Ok(())
}

/// Every routing core, at its RCU quiescent point (housekeeping, between poll iterations:
/// no lookup is in progress): if a newer FIB was published, switch this core's router to it
/// and record the generation seen. One `Acquire` load when nothing changed.
pub fn quiescent<P: Platform>(core: &mut Core<P>) {
    let generation = GENERATION.load(Ordering::Acquire);
    let cpu = current_cpu() as usize;
    if generation == 0 || SEEN[cpu].load(Ordering::Relaxed) == generation {
        return;
    }
    let p = PUBLISHED.load(Ordering::Acquire);
    // SAFETY: `p` points into the slot of the FIB of generation ≥ `generation` (published
    // before the generation, both `Release`, loaded `Acquire` in the opposite order). It stays
    // valid until every routing core's `SEEN` passed a newer generation, and this core stores
    // its `SEEN` only after it switched.
    let fib: &'static Fib<'static> = unsafe { &*p };
    match core.set_fib(fib) {
        Ok(_) => SEEN[cpu].store(generation, Ordering::Release),
        // Cannot happen (every build installs the ports' routes); the old FIB then stays in
        // use and is never retired (the commit waiting for it reports it).
        Err(e) => log::error!("router: cpu {cpu}: FIB generation {generation} refused: {e}"),
    }
}

/// Boot CPU: retire the replaced FIB if every one of the `cores` routing cores passed a
/// quiescent state since it was replaced: unmap it, one batched shootdown (per
/// [`RETIRE_FRAMES`] frames) to the routing cores, free its pages. Returns `true` if nothing
/// is left to retire.
pub fn poll_retire(cores: usize) -> bool {
    let mut r = RELOAD.lock();
    retire_if_quiescent(&mut r, cores)
}

fn retire_if_quiescent(r: &mut Reload, cores: usize) -> bool {
    let Some((slot, generation, since_us)) = r.retiring else {
        return true;
    };
    if (0..cores).any(|c| SEEN[c].load(Ordering::Acquire) < generation) {
        return false;
    }
    let swap_us = uptime_us() - since_us;
    // SAFETY: every routing core switched to a FIB of generation ≥ `generation` (its `SEEN`,
    // stored after the switch, `Acquire` here): no CPU holds a reference into this slot any
    // more; only the boot CPU writes slots.
    let rec = unsafe { (*SLOTS[slot].0.get()).take() }.expect("a retiring slot holds a FIB");
    r.retiring = None;
    let pages = rec.mem.pages();
    let old = rec.generation;
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    // The FIB itself (whose slices point into the ranges unmapped next) is not used again.
    let FibRecord { areas, .. } = rec;
    let batches = give_back(zone, areas, CpuMask::first(cores));
    PAGES_RETIRING.store(0, Ordering::Relaxed);
    LAST_SWAP_US.store(swap_us, Ordering::Relaxed);
    RETIRED.fetch_add(1, Ordering::Relaxed);
    RETIRE_BATCHES.fetch_add(batches, Ordering::Relaxed);
    crate::println!(
        "routes: FIB generation {old} retired: {pages} pages freed after {batches} shootdown batch(es); every core switched within {swap_us} us"
    );
    true
}

/// Boot CPU: wait (at most [`GRACE_MS`], answering TLB requests) until the replaced FIB is
/// retired.
///
/// # Errors
/// A [`FibError`] naming the cores that did not pass a quiescent state in time.
pub fn settle(cores: usize) -> Result<(), FibError> {
    let deadline = crate::arch::time::Deadline::after_ms(GRACE_MS);
    let mut r = RELOAD.lock();
    while !retire_if_quiescent(&mut r, cores) {
        if deadline.expired() {
            let (_, generation, _) = r.retiring.expect("not retired");
            let late = (0..cores)
                .filter(|&c| SEEN[c].load(Ordering::Acquire) < generation)
                .fold(0u64, |m, c| m | 1 << c);
            return Err(err(format_args!(
                "router: cores {late:#x} did not switch to FIB generation {generation} within {GRACE_MS} ms"
            )));
        }
        tlb::service();
        core::hint::spin_loop();
    }
    Ok(())
}

/// `route add` / `route del` (boot CPU): queue a change for the next `routes commit`.
pub fn queue_delta(d: RouteDelta) {
    let mut r = RELOAD.lock();
    let pending = r.deltas.len() - r.committed;
    match r.deltas.push(d) {
        Ok(()) => crate::println!(
            "routes: {d:?} pending ({} pending; `routes commit` applies them)",
            pending + 1
        ),
        Err(_) => crate::println!(
            "routes: error: {MAX_DELTAS} route changes kept already; `routes reload` drops them"
        ),
    }
}

/// `routes commit` (or, with `reload`, `routes reload`: `route=` and the routes file alone, the
/// routes file being the last `PUT /routes` body if there was one) on the
/// boot CPU, at its quiescent point: wait for a previous replacement to retire, build the new
/// FIB, publish it, switch this core to it. The other routing cores switch at their next
/// housekeeping; [`poll_retire`] then retires the old FIB. On any error the published FIB
/// stays (pending changes are dropped) and the error is named on the console.
pub fn commit<P: Platform>(core: &mut Core<P>, reload: bool) {
    let what = if reload {
        "routes reload"
    } else {
        "routes commit"
    };
    if let Err((_, e)) = rebuild(core, what, Rebuild::Console { reload }) {
        crate::println!("{what}: error: {}", e.0);
    }
}

/// What a [`rebuild`] builds from.
enum Rebuild {
    /// The console: the routes file and every console change (`reload`: none of them).
    Console { reload: bool },
    /// `PUT /routes`: this text replaces the routes file; the committed console changes stay
    /// (pending ones stay pending).
    Upload(RoutesUpload),
}

/// What a successful rebuild published.
#[derive(Copy, Clone, Debug)]
pub struct Published {
    /// The new FIB's generation.
    pub generation: u64,
    /// Its routes (connected, local, broadcast and static).
    pub routes: usize,
    /// Its pages.
    pub pages: u64,
    /// Build time (ms).
    pub build_ms: u64,
}

/// Why a rebuild failed: the previous FIB did not retire in time (`Busy`: try again) or the
/// new one could not be built (`Build`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RebuildFailure {
    /// A previous replacement is still waiting for a core (503).
    Busy,
    /// The build failed: a bad route or out of memory (500).
    Build,
}

/// A failed build: counted, and named with the generation that stays; a console rebuild
/// (`console`) drops the pending changes.
fn build_failed(
    r: &mut Reload,
    console: bool,
    old_gen: u64,
    e: FibError,
) -> (RebuildFailure, FibError) {
    FAILED.fetch_add(1, Ordering::Relaxed);
    if !console {
        let e = err(format_args!("{}; FIB generation {old_gen} stays", e.0));
        return (RebuildFailure::Build, e);
    }
    let dropped = r.deltas.len() - r.committed;
    let keep = r.committed;
    r.deltas.truncate(keep);
    let e = err(format_args!(
        "{}; FIB generation {old_gen} stays, {dropped} pending change(s) dropped",
        e.0
    ));
    (RebuildFailure::Build, e)
}

/// Build, publish and switch (see [`commit`]). On any error the published FIB stays and the
/// error names why, with the generation kept.
fn rebuild<P: Platform>(
    core: &mut Core<P>,
    what: &str,
    source: Rebuild,
) -> Result<Published, (RebuildFailure, FibError)> {
    let cores = core.fabric().cores();
    if let Err(e) = settle(cores) {
        FAILED.fetch_add(1, Ordering::Relaxed);
        return Err((
            RebuildFailure::Busy,
            err(format_args!("{}; the published FIB stays", e.0)),
        ));
    }
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    let mut r = RELOAD.lock();
    let (upload, deltas_used) = match source {
        Rebuild::Console { reload } => {
            if reload {
                r.deltas.clear();
                r.committed = 0;
            }
            (None, r.deltas.len())
        }
        Rebuild::Upload(u) => (Some(u), r.committed),
    };
    let routes_file = match &upload {
        Some(u) => Some(u.text()),
        None => r.routes_file,
    };
    let old_gen = GENERATION.load(Ordering::Acquire);
    let t0 = uptime_us();
    let (rec, rules_ms, tbl24_ms) =
        match build(core.cfg(), zone, routes_file, &r.deltas[..deltas_used]) {
            Ok(b) => b,
            // An upload (dropped here: its pages go back) changed nothing.
            Err(e) => return Err(build_failed(&mut r, upload.is_none(), old_gen, e)),
        };
    let build_ms = (uptime_us() - t0) / 1000;
    let old = r.published;
    let slot = (0..FIB_SLOTS)
        // SAFETY: reading whether a slot is empty; only this CPU writes slots.
        .find(|&s| s != old && unsafe { (*SLOTS[s].0.get()).is_none() })
        .expect("a free slot: one published, none retiring after settle");
    PAGES_RETIRING.store(PAGES.load(Ordering::Relaxed), Ordering::Relaxed);
    let generation = old_gen + 1;
    publish(&mut r, slot, rec, generation);
    r.retiring = Some((old, generation, uptime_us()));
    if let Some(u) = upload {
        // The upload is the routes file from now on; the one it replaces (if it was an
        // upload) is freed here: nothing refers to it any more.
        r.routes_file = Some(u.text());
        r.upload = Some(u);
    } else {
        r.committed = r.deltas.len();
    }
    RELOADS.fetch_add(1, Ordering::Relaxed);
    LAST_BUILD_MS.store(build_ms, Ordering::Relaxed);
    // SAFETY: just published by this CPU; only read here.
    let rec = unsafe { (*SLOTS[slot].0.get()).as_ref() }.expect("just published");
    log_fib(what, rec, rules_ms, tbl24_ms);
    let done = Published {
        generation,
        routes: rec.fib.len(),
        pages: rec.mem.pages(),
        build_ms,
    };
    crate::println!(
        "{what}: FIB generation {generation} published: {} routes, {} pages, built in {build_ms} ms; generation {old_gen} retires when every core switched",
        done.routes,
        done.pages
    );
    drop(r);
    // This core is at its quiescent point (console commands run from housekeeping).
    quiescent(core);
    for k in 1..cores {
        P::wake(k);
    }
    Ok(done)
}

/// Pages held by `PUT /routes` bodies (being received or kept as the routes file).
static UPLOAD_PAGES: AtomicU64 = AtomicU64::new(0);

/// A `PUT /routes` body: a `vmalloc`'d buffer of its `Content-Length` (order-0 pages, so an
/// 8 MiB body needs no high-order block), filled as it streams in. Only the boot CPU (which
/// runs the management plane and the rebuild) ever touches it, so dropping it (its pages go
/// back to the zone) needs a local flush only.
pub struct RoutesUpload {
    area: Option<VmArea>,
    len: usize,
}

impl RoutesUpload {
    /// A zeroed buffer for a body of `len` bytes.
    ///
    /// # Errors
    /// The vmap area or the zone ran out.
    pub fn new(len: usize) -> Result<RoutesUpload, FibError> {
        if len == 0 {
            return Ok(RoutesUpload { area: None, len });
        }
        let zone = crate::mem::ZONE.get().expect("the zone is up");
        let area = vmap::vmalloc(zone, len as u64)
            .map_err(|e| err(format_args!("no memory for a {len}-byte body: {e}")))?;
        UPLOAD_PAGES.fetch_add(area.pages as u64, Ordering::Relaxed);
        Ok(RoutesUpload {
            area: Some(area),
            len,
        })
    }

    /// The whole buffer (`len` bytes).
    pub fn buf_mut(&mut self) -> &mut [u8] {
        match self.area {
            // SAFETY: a vmap range of ≥ `len` writable bytes mapped for this upload alone,
            // unmapped only by `drop`, which takes `self` (so no slice outlives it).
            Some(a) => unsafe { core::slice::from_raw_parts_mut(a.base as *mut u8, self.len) },
            None => &mut [],
        }
    }

    /// The body as text. Only called on a body whose every line was checked (UTF-8, routes
    /// syntax) as it streamed in; a body that is not UTF-8 reads as empty.
    fn text(&self) -> &'static str {
        let bytes: &[u8] = match self.area {
            // SAFETY: as `buf_mut`; the `'static` text is kept only while the upload is (in
            // `Reload::upload`, `routes_file` dropped with it) or used within one build.
            Some(a) => unsafe { core::slice::from_raw_parts(a.base as *const u8, self.len) },
            None => &[],
        };
        core::str::from_utf8(bytes).unwrap_or("")
    }
}

impl Drop for RoutesUpload {
    fn drop(&mut self) {
        let Some(area) = self.area.take() else {
            return;
        };
        let zone = crate::mem::ZONE.get().expect("the zone is up");
        UPLOAD_PAGES.fetch_sub(area.pages as u64, Ordering::Relaxed);
        // Only this CPU (the boot CPU) ever touched the range: a local flush.
        let areas = FibAreas {
            rules: Some(area),
            ..FibAreas::default()
        };
        give_back(zone, areas, CpuMask::only(current_cpu() as usize));
    }
}

/// The hand-off between the management plane (in the poll loop, on the boot CPU) and its
/// housekeeping (the quiescent point where a rebuild may run).
// One static slot (no heap to box the error in): the size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum PutJob {
    /// Nothing asked.
    Idle,
    /// A complete, checked body waiting for housekeeping.
    Pending(RoutesUpload),
    /// What the rebuild did, for the management plane to answer.
    Done(Result<Published, (RebuildFailure, FibError)>),
}

static PUT_JOB: spin::Mutex<PutJob> = spin::Mutex::new(PutJob::Idle);

/// Management plane: hand a complete, checked `PUT /routes` body to housekeeping. Returns it
/// back if a job is already pending or unanswered.
pub fn submit_put(upload: RoutesUpload) -> Result<(), RoutesUpload> {
    let mut j = PUT_JOB.lock();
    match *j {
        PutJob::Idle => {
            *j = PutJob::Pending(upload);
            Ok(())
        }
        _ => Err(upload),
    }
}

/// Management plane: whether a job is pending or unanswered (a new upload waits its turn).
pub fn put_busy() -> bool {
    !matches!(*PUT_JOB.lock(), PutJob::Idle)
}

/// Management plane: the result of the submitted job once housekeeping ran it.
pub fn take_put_result() -> Option<Result<Published, (RebuildFailure, FibError)>> {
    let mut j = PUT_JOB.lock();
    match core::mem::replace(&mut *j, PutJob::Idle) {
        PutJob::Done(r) => Some(r),
        other => {
            *j = other;
            None
        }
    }
}

/// Boot CPU housekeeping (its quiescent point): run a pending `PUT /routes`: the body replaces
/// the routes file's routes (`route=` routes and committed console changes stay) through the
/// same build, publish and retire path as `routes commit`.
pub fn poll_put<P: Platform>(core: &mut Core<P>) {
    let upload = {
        let mut j = PUT_JOB.lock();
        match core::mem::replace(&mut *j, PutJob::Idle) {
            PutJob::Pending(u) => u,
            other => {
                *j = other;
                return;
            }
        }
    };
    let r = rebuild(core, "PUT /routes", Rebuild::Upload(upload));
    if let Err((_, e)) = &r {
        crate::println!("PUT /routes: error: {}", e.0);
    }
    *PUT_JOB.lock() = PutJob::Done(r);
}

/// Core `k`'s router (of `cores`) over the published FIB (built by [`build_fib`] before any
/// other core starts); its IP IDs interleave with the other cores' (RFC 6864).
///
/// # Errors
/// A [`FibError`] if the FIB was not built or the ports' addresses are bad.
pub fn core_router(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    k: usize,
    cores: usize,
) -> Result<CoreRouter, FibError> {
    let generation = GENERATION.load(Ordering::Acquire);
    let p = PUBLISHED.load(Ordering::Acquire);
    if generation == 0 || p.is_null() {
        return Err(err(format_args!(
            "router: the FIB was not built before this core started"
        )));
    }
    // SAFETY: the published FIB (see `quiescent`); this core's `SEEN` is set to its
    // generation below, before the router is used, so it is not retired under the router.
    let fib: &'static Fib<'static> = unsafe { &*p };
    SEEN[current_cpu() as usize].store(generation, Ordering::Release);
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    CoreRouter::new(fib, &router_ports(cfg, macs)?, rc)
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))
}
