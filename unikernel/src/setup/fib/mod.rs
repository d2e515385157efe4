//! Router mode: the one FIB, built on the boot CPU (connected, local and broadcast routes,
//! `route=`, the routes file), then read by every core's router.
//!
//! The FIB is sparse (docs/DESIGN.md, "Remapped buffers and batched TLB shootdown"): its
//! DIR-24-8 tbl24 is a 64 MiB range of the vmap area whose 4 KiB chunks (1,024 entries, one /14)
//! map a page of their own only where the entries inside differ; every uniform chunk maps the
//! one shared read-only page holding its value. The rule table and tbl8 are `vmalloc`'d. The
//! boot FIB is taken before the boot free-page count.
//!
//! Live reload (RCU style): `routes commit` (or `PUT /routes`) starts a build on the boot CPU
//! that runs a bounded step at a time between its poll iterations ([`poll_build`],
//! [`build`]), so the boot CPU keeps forwarding; the new FIB is published through the one
//! RCU machinery every network function's shared state uses (`FIB`, a
//! [`Shared`]`<Fib>`: pointer, then generation), and each routing core switches its router at
//! its quiescent point ([`quiescent`], from housekeeping) and records the generation it saw.
//! Once every routing core saw it ([`Shared::retired`]), the old FIB is retired, also in bounded steps ([`retire`]): all its
//! vmap ranges unmapped into one flush batch, one shootdown to the routing cores, then its
//! frames freed and its ranges released. A build that fails gives back what it took in the
//! same bounded steps (a local flush). FIB records live in a fixed pool of slots (no heap).
//!
//! Past ~800 lines because the boot build, the console's changes, the live reload's stepped
//! build, publish and retirement, and the `PUT /routes` path all act on the one published FIB
//! and its slot pool (the build steps, retirement and `PUT` bodies have files of their own).

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

mod build;
mod retire;
mod upload;

use crate::arch::time::uptime_us;
use crate::dataplane::nf::{Retiring, Shared};
use crate::dataplane::{Core, CoreRouter, Platform};
use crate::mem::paging::PAGE;
use crate::mem::vmap::VmArea;
use crate::percpu::{current_cpu, MAX_CPUS};
use crate::tlb;
use build::{build_step, Budget, Job, Phase, Source, STEP_GAP_US, STEP_US};
use core::cell::UnsafeCell;
use core::fmt::Write;
use core::net::Ipv4Addr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use log::info;
use mm::{Pfn, Zone};
use netstack::config::PORTS;
use netstack::router::{Fib, PortConfig, RouteCheck, Router, RouterConfig, TBL24_CHUNKS};
use netstack::stats::FibStats;
use netstack::{Config, MacAddr};
use retire::{give_back, retire_step, Gone, Retire};
pub use upload::{
    put_busy, release_uploads_now, release_uploads_step, submit_put, take_put_result, PutUpload,
};
use upload::{PutJob, PUT_JOB, UPLOAD_PAGES};

/// The router that builds the FIB on the boot CPU.
type FibBuilder = Router<'static, mm::Pfn>;

/// Distinct uniform-chunk values that get a shared page; a chunk whose value finds no room
/// here gets a page of its own (correct, just not shared). Seen: a handful (no route, the
/// default route, a few short prefixes).
const SHARED_VALUES: usize = 64;

/// An error found while building the FIB (the boot stops with it; a reload names it): its
/// text, and whose fault it is.
pub struct FibError(pub heapless::String<256>, pub Blame);

/// Whose fault a [`FibError`] is.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Blame {
    /// A route's: refused by `netstack::router::check_route`, a duplicate, a deletion of a
    /// route that is not there (`PUT /routes` answers 400).
    Route,
    /// The router's own limits (memory, rule slots, tbl8 groups, next hops) or its state
    /// (`PUT /routes` answers 500).
    Router,
}

/// Whether a [`note`] goes out as a boot-log `INFO` line or a plain console line.
#[derive(Copy, Clone)]
enum Note {
    Info,
    Print,
}

/// Most [`note`]s waiting (a step writes at most four: the routes count, the FIB's two log
/// lines and the publish line, or a retirement's line, or an error).
const NOTES: usize = 6;

/// Console lines composed inside a build or retirement step, printed after it
/// ([`print_notes`]): serial output costs the host a write per byte under QEMU, a long line
/// milliseconds, so it stays out of the measured step (`fib.max_step_us`).
static PENDING_NOTES: spin::Mutex<heapless::Vec<(Note, heapless::String<512>), NOTES>> =
    spin::Mutex::new(heapless::Vec::new());

/// Keep a console line for [`print_notes`] (printed at once if the queue is full; cut at
/// 512 bytes).
fn note(kind: Note, args: core::fmt::Arguments<'_>) {
    let mut s = heapless::String::new();
    let _ = s.write_fmt(args);
    if let Err((kind, s)) = PENDING_NOTES.lock().push((kind, s)) {
        emit(kind, &s);
    }
}

fn emit(kind: Note, s: &str) {
    match kind {
        Note::Info => info!("{s}"),
        Note::Print => crate::println!("{s}"),
    }
}

/// Print the lines the last step kept ([`note`]), outside the measured step.
fn print_notes() {
    let notes = core::mem::take(&mut *PENDING_NOTES.lock());
    for (kind, s) in &notes {
        emit(*kind, s);
    }
}

fn err(args: core::fmt::Arguments<'_>) -> FibError {
    blamed(Blame::Router, args)
}

/// A [`FibError`] of `blame`.
fn blamed(blame: Blame, args: core::fmt::Arguments<'_>) -> FibError {
    let mut s = heapless::String::new();
    let _ = s.write_fmt(args);
    FibError(s, blame)
}

/// A [`FibError`] for the router's refusal `e` of a route, blamed on the route when
/// [`netstack::router::RouterError::is_route_error`] says so.
fn route_err(e: &netstack::router::RouterError, args: core::fmt::Arguments<'_>) -> FibError {
    let blame = if e.is_route_error() {
        Blame::Route
    } else {
        Blame::Router
    };
    blamed(blame, args)
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

/// The router's ports (`ip0=`, `ip1=`) as the route checks take them: a console change, a
/// `PUT /routes` line.
pub fn route_check(cfg: &Config) -> RouteCheck {
    RouteCheck::new(cfg.ip.iter().flatten().copied())
}

/// [`route_check`] of the configuration the boot FIB was built from (router mode only).
static ROUTE_PORTS: spin::Once<RouteCheck> = spin::Once::new();

/// The router's ports for checking a `PUT /routes` body's lines as they arrive; `None`
/// before the boot FIB (or outside router mode).
pub fn route_ports() -> Option<RouteCheck> {
    ROUTE_PORTS.get().copied()
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
/// build (until `routes reload`); checked when typed (`RouteCheck::check_change`).
pub type RouteDelta = netstack::router::RouteChange;

/// Most console route changes kept (committed and pending together).
pub const MAX_DELTAS: usize = 64;
/// FIB records: the published one, one retiring, one being built.
const FIB_SLOTS: usize = 3;
/// How long a commit (or `quit`) waits for every routing core to pass a quiescent state (its
/// housekeeping, every 10 ms) before it gives up: 500 ms.
const GRACE_MS: u64 = 500;

/// A slot for one [`FibRecord`].
struct Slot(UnsafeCell<Option<FibRecord>>);

// SAFETY: a slot is written only by the boot CPU (boot, `routes commit`, retirement), and
// only while no other CPU holds a reference into it: a record is filled before its FIB is
// published and taken out only after every routing core acknowledged (`Shared::retired`)
// that it switched to a newer FIB. In between, every CPU only reads it (`&Fib`).
unsafe impl Sync for Slot {}

static SLOTS: [Slot; FIB_SLOTS] = [const { Slot(UnsafeCell::new(None)) }; FIB_SLOTS];

/// The published FIB (generation 1 the boot FIB, published once by [`build_fib`]; unset
/// outside router mode), read by each routing core at its quiescent point, which records
/// there the generation it uses (CPU `k` is core `k`).
static FIB: spin::Once<Shared<Fib<'static>, MAX_CPUS>> = spin::Once::new();

/// The published FIB's generation (0: none, not router mode).
fn published_generation() -> u64 {
    FIB.get().map_or(0, |s| s.generation())
}

/// The boot CPU's reload state.
struct Reload {
    /// Slot of the published FIB.
    published: usize,
    /// A replaced FIB being retired (its grace period, then bounded unmap/flush/free steps).
    retiring: Option<Retire>,
    /// Console route changes: `deltas[..committed]` are in the published FIB.
    deltas: heapless::Vec<RouteDelta, MAX_DELTAS>,
    committed: usize,
    /// The routes file's text, kept for rebuilds: the routes boot module (reserved for the
    /// kernel's life), or the body of the last successful `PUT /routes` (`upload`).
    routes_file: Option<&'static str>,
    /// The `PUT /routes` body `routes_file` points into, if it does (freed when replaced).
    upload: Option<PutUpload>,
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
static BUILD_STEPS: AtomicU64 = AtomicU64::new(0);
static MAX_STEP_US: AtomicU64 = AtomicU64::new(0);

/// The build under way (boot CPU only; stepped by [`poll_build`]).
static JOB: spin::Mutex<Option<Job>> = spin::Mutex::new(None);
/// Whether a build or a retirement is under way: the boot CPU steps it between poll
/// iterations and does not halt meanwhile (one `Relaxed` load per iteration otherwise).
static BUSY: AtomicBool = AtomicBool::new(false);
/// When the boot CPU may take its next step while busy forwarding (µs since boot).
static NEXT_STEP_US: AtomicU64 = AtomicU64::new(0);

/// The `fib` section of STATS (`None` outside router mode).
pub fn fib_stats() -> Option<FibStats> {
    let generation = published_generation();
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
        build_steps: BUILD_STEPS.load(Ordering::Relaxed),
        max_step_us: MAX_STEP_US.load(Ordering::Relaxed),
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

/// Log what a FIB is made of.
fn log_fib(what: &str, rec: &FibRecord, job: &Job) {
    let (fib, mem) = (&rec.fib, &rec.mem);
    note(Note::Info, format_args!(
        "router: {what} generation {}: {} routes in the FIB (connected, local, broadcast, static); {} of {} tbl8 groups used",
        rec.generation,
        fib.len(),
        fib.tbl8_usage().0,
        fib.tbl8_usage().1,
    ));
    note(Note::Info, format_args!(
        "router: FIB tbl24 {} chunks: {} real chunk pages, {} uniform chunks on {} shared pages; \
         FIB memory {} KiB (tbl24 {} KiB, tbl8 {} KiB, rules {} KiB); built in {} ms (rules {} ms, tbl24 {} ms) over {} steps",
        TBL24_CHUNKS,
        mem.chunk_pages,
        mem.shared_chunks,
        mem.shared_pages,
        mem.total_bytes() / 1024,
        (mem.chunk_pages + mem.shared_pages) * 4,
        mem.tbl8_pages * 4,
        mem.rule_pages * 4,
        job.work_us / 1000,
        job.rules_us / 1000,
        (job.work_us - job.rules_us) / 1000,
        job.steps,
    ));
}

/// Put `rec` in free slot `slot` and publish it as the next generation (RCU publish: the
/// record is complete before the pointer, the pointer before the generation; the first is
/// generation 1). Returns the FIB it replaced, to retire (`None` for the first).
fn publish(r: &mut Reload, slot: usize, mut rec: FibRecord) -> Option<Retiring<Fib<'static>>> {
    rec.generation = published_generation() + 1;
    ROUTES.store(rec.fib.len() as u64, Ordering::Relaxed);
    PAGES.store(rec.mem.pages(), Ordering::Relaxed);
    // SAFETY: `slot` is free (no FIB of it is published or retiring, so no CPU holds a
    // reference into it) and only the boot CPU writes slots (see `Slot`).
    let fib: &'static Fib<'static> = unsafe {
        let cell = &mut *SLOTS[slot].0.get();
        &cell.insert(rec).fib
    };
    r.published = slot;
    match FIB.get() {
        Some(shared) => Some(shared.publish(fib)),
        None => {
            FIB.call_once(|| Shared::new(fib));
            None
        }
    }
}

/// The record of a built job (its FIB and what it holds), generation not yet set.
fn take_record(job: &mut Job) -> FibRecord {
    FibRecord {
        fib: job.take_fib(),
        areas: core::mem::take(&mut job.areas),
        mem: job.mem,
        generation: 0,
    }
}

/// Boot CPU, once, before the boot free-page count: build the sparse FIB from the
/// configuration and the routes file (the build's steps run back to back), and publish it
/// (generation 1) for [`core_router`].
///
/// # Errors
/// A [`FibError`] naming the bad address, route or routes-file line, or the memory that ran
/// out.
pub fn build_fib(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&'static str>,
) -> Result<(), FibError> {
    if FIB.get().is_some() {
        return Err(err(format_args!("router: the boot FIB was built twice")));
    }
    ROUTE_PORTS.call_once(|| route_check(cfg));
    let mut job = Job::new("boot FIB", Source::Boot);
    let mut r = RELOAD.lock();
    r.routes_file = routes_file;
    job.begin(&mut r);
    let mut b = Budget::unlimited();
    let built = build_step(&mut job, cfg, zone, &r.deltas, &mut b);
    job.steps = 1;
    job.work_us = b.elapsed_us();
    match built {
        Ok(true) => {}
        Ok(false) => unreachable!("an unlimited step finishes"),
        Err(e) => {
            job.discard();
            give_back(zone, core::mem::take(&mut job.areas));
            print_notes();
            return Err(e);
        }
    }
    let rec = take_record(&mut job);
    PAGES_BOOT.store(rec.mem.pages(), Ordering::Relaxed);
    LAST_BUILD_MS.store(job.work_us / 1000, Ordering::Relaxed);
    BUILD_STEPS.store(1, Ordering::Relaxed);
    let first = publish(&mut r, 0, rec);
    debug_assert!(first.is_none(), "the boot FIB is the first");
    // SAFETY: just published in slot 0 by this CPU; only read here.
    let rec = unsafe { (*SLOTS[0].0.get()).as_ref() }.expect("just published");
    log_fib("boot FIB", rec, &job);
    print_notes();
    Ok(())
}

/// Every routing core, at its RCU quiescent point (housekeeping, between poll iterations:
/// no lookup is in progress): if a newer FIB was published, switch this core's router to it
/// and record the generation seen. One `Acquire` load when nothing changed.
pub fn quiescent<P: Platform>(core: &mut Core<P>) {
    let Some(shared) = FIB.get() else {
        return;
    };
    let cpu = current_cpu() as usize;
    if shared.recorded(cpu) == shared.generation() {
        return;
    }
    // Recorded only once the router switched: a FIB it refused stays the one in use.
    let (generation, fib) = shared.peek();
    match core.set_fib(fib) {
        Ok(_) => shared.record(cpu, generation),
        // Cannot happen (every build installs the ports' routes); the old FIB then stays in
        // use and is never retired (the commit waiting for it reports it).
        Err(e) => log::error!("router: cpu {cpu}: FIB generation {generation} refused: {e}"),
    }
}

/// Whether a build or a retirement is under way (the boot CPU's poll loop then calls
/// [`poll_build`] every iteration and does not halt). One `Relaxed` load.
#[inline]
pub fn busy() -> bool {
    BUSY.load(Ordering::Relaxed)
}

/// Boot CPU, from its poll loop while [`busy`]: one bounded step ([`STEP_US`]) of the
/// retirement and the build under way; while the core forwards (`idle` false) at most one
/// step per [`STEP_GAP_US`] of forwarding, so a reload takes at most half of the core.
pub fn poll_build<P: Platform>(core: &mut Core<P>, idle: bool) {
    if !idle && uptime_us() < NEXT_STEP_US.load(Ordering::Relaxed) {
        return;
    }
    let mut b = Budget::new(STEP_US);
    step(core, &mut b);
    MAX_STEP_US.fetch_max(b.elapsed_us(), Ordering::Relaxed);
    // The step's console lines, outside its measured time.
    print_notes();
    NEXT_STEP_US.store(uptime_us() + STEP_GAP_US, Ordering::Relaxed);
}

/// One step: the retirement under way first (a build waits for it), then the build.
fn step<P: Platform>(core: &mut Core<P>, b: &mut Budget) {
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    let cores = core.fabric().cores();
    let retired = step_retire(cores, zone, b);
    let mut j = JOB.lock();
    let Some(job) = j.as_mut() else {
        BUSY.store(!retired, Ordering::Relaxed);
        return;
    };
    let mut r = RELOAD.lock();
    if job.phase == Phase::Settle {
        if !retired {
            if uptime_us() - job.asked_us > GRACE_MS * 1000 {
                let late = r.retiring.as_ref().map_or(0, |rt| rt.late(cores));
                let e = err(format_args!(
                    "router: cores {late:#x} did not switch to the published FIB within {GRACE_MS} ms; the published FIB stays"
                ));
                let job = j.take().expect("checked");
                drop((r, j));
                fail(job, RebuildFailure::Busy, e);
            }
            return;
        }
        job.begin(&mut r);
    }
    let t0 = uptime_us();
    let built = build_step(job, core.cfg(), zone, &r.deltas, b);
    job.steps += 1;
    job.work_us += uptime_us() - t0;
    drop(r);
    match built {
        Ok(false) => {}
        Ok(true) => {
            let job = j.take().expect("checked");
            drop(j);
            finish(core, job);
        }
        Err(e) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            let mut job = j.take().expect("checked");
            drop(j);
            job.discard();
            // What it took goes back in steps too: a build of 100,000 routes holds ~14,600
            // frames. Retirements and builds never overlap (a build starts once the last
            // retirement is done), so the slot is free.
            let areas = core::mem::take(&mut job.areas);
            let mut r = RELOAD.lock();
            match r.retiring {
                None => r.retiring = Some(Retire::failed(zone, areas)),
                Some(_) => give_back(zone, areas),
            }
            drop(r);
            let why = match e.1 {
                Blame::Route => RebuildFailure::Route,
                Blame::Router => RebuildFailure::Build,
            };
            fail(job, why, e);
        }
    }
}

/// One step of the retirement under way, if any; `true` if none is left. A finished
/// retirement frees its slot and is counted.
fn step_retire(cores: usize, zone: &Zone, b: &mut Budget) -> bool {
    let mut r = RELOAD.lock();
    let Some(rt) = r.retiring.as_mut() else {
        return true;
    };
    if !retire_step(rt, cores, zone, b) {
        return false;
    }
    let rt = r.retiring.take().expect("checked");
    let slot = match rt.gone {
        Gone::Replaced(slot) => slot,
        Gone::Failed(_) => {
            note(
                Note::Print,
                format_args!(
                    "routes: the failed build's {} pages given back over {} steps, {} us of work",
                    rt.frames, rt.steps, rt.work_us,
                ),
            );
            return true;
        }
    };
    // SAFETY: the retirement unmapped, flushed and freed everything of this record after
    // every routing core switched away from it; only the boot CPU writes slots.
    let rec = unsafe { (*SLOTS[slot].0.get()).take() }.expect("a retiring slot holds a FIB");
    // The FIB (whose slices pointed into the ranges just released) is dropped unused.
    PAGES_RETIRING.store(0, Ordering::Relaxed);
    LAST_SWAP_US.store(rt.swap_us, Ordering::Relaxed);
    RETIRED.fetch_add(1, Ordering::Relaxed);
    RETIRE_BATCHES.fetch_add(rt.batches, Ordering::Relaxed);
    note(Note::Print, format_args!(
        "routes: FIB generation {} retired: {} pages freed after {} shootdown batch(es), {} us of work; every core switched within {} us",
        rec.generation,
        rec.mem.pages(),
        rt.batches,
        rt.work_us,
        rt.swap_us,
    ));
    true
}

/// A built job: publish its FIB as the next generation, start retiring the one it replaces,
/// switch this core (at its quiescent point: steps run between poll iterations) and wake the
/// others so they switch at their next housekeeping.
fn finish<P: Platform>(core: &mut Core<P>, mut job: Job) {
    let mut r = RELOAD.lock();
    let rec = take_record(&mut job);
    let old = r.published;
    let slot = (0..FIB_SLOTS)
        // SAFETY: reading whether a slot is empty; only this CPU writes slots.
        .find(|&s| s != old && unsafe { (*SLOTS[s].0.get()).is_none() })
        .expect("a free slot: one published, none retiring once settled");
    PAGES_RETIRING.store(PAGES.load(Ordering::Relaxed), Ordering::Relaxed);
    let Some(replaced) = publish(&mut r, slot, rec) else {
        unreachable!("a reload replaces the boot FIB or a later one");
    };
    let generation = replaced.generation();
    let old_gen = generation - 1;
    r.retiring = Some(Retire::new(old, replaced, uptime_us()));
    BUSY.store(true, Ordering::Relaxed);
    let put = match core::mem::replace(&mut job.source, Source::Boot) {
        Source::Upload(u) => {
            // The upload is the routes file from now on; the one it replaces (if it was an
            // upload) is freed here: nothing refers to it any more.
            r.routes_file = Some(u.text());
            r.upload = Some(u);
            true
        }
        Source::Boot | Source::Console { .. } => {
            r.committed = job.deltas;
            false
        }
    };
    RELOADS.fetch_add(1, Ordering::Relaxed);
    LAST_BUILD_MS.store(job.work_us / 1000, Ordering::Relaxed);
    BUILD_STEPS.store(job.steps, Ordering::Relaxed);
    // SAFETY: just published by this CPU; only read here.
    let rec = unsafe { (*SLOTS[slot].0.get()).as_ref() }.expect("just published");
    log_fib(job.what, rec, &job);
    let done = Published {
        generation,
        routes: rec.fib.len(),
        pages: rec.mem.pages(),
        build_ms: job.work_us / 1000,
    };
    note(Note::Print, format_args!(
        "{}: FIB generation {generation} published: {} routes, {} pages, built in {} ms (rules {} ms, tbl24 {} ms) over {} steps (longest {} us so far), {} ms after it was asked; generation {old_gen} retires when every core switched",
        job.what,
        done.routes,
        done.pages,
        done.build_ms,
        job.rules_us / 1000,
        (job.work_us - job.rules_us) / 1000,
        job.steps,
        MAX_STEP_US.load(Ordering::Relaxed),
        (uptime_us() - job.asked_us) / 1000,
    ));
    drop(r);
    quiescent(core);
    for k in 1..core.fabric().cores() {
        P::wake(k);
    }
    if put {
        *PUT_JOB.lock() = PutJob::Done(Ok(done));
    }
}

/// A job that did not publish (its memory already given back): named with the generation
/// that stays; a console build drops the pending changes; a `PUT /routes` gets the error.
fn fail(job: Job, why: RebuildFailure, e: FibError) {
    let old_gen = published_generation();
    if why == RebuildFailure::Busy {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
    let e = match job.source {
        Source::Console { .. } => {
            let mut r = RELOAD.lock();
            let dropped = r.deltas.len() - r.committed;
            let keep = r.committed;
            r.deltas.truncate(keep);
            blamed(
                e.1,
                format_args!(
                    "{}; FIB generation {old_gen} stays, {dropped} pending change(s) dropped",
                    e.0
                ),
            )
        }
        Source::Upload(_) | Source::Boot => {
            blamed(e.1, format_args!("{}; FIB generation {old_gen} stays", e.0))
        }
    };
    note(Note::Print, format_args!("{}: error: {}", job.what, e.0));
    if let Source::Upload(_) = job.source {
        *PUT_JOB.lock() = PutJob::Done(Err((why, e)));
    }
    BUSY.store(RELOAD.lock().retiring.is_some(), Ordering::Relaxed);
}

/// Boot CPU (`quit`): abandon a build under way (its memory back at once) and finish the
/// retirement under way, waiting at most [`GRACE_MS`] (answering TLB requests) for its grace
/// period.
///
/// # Errors
/// A [`FibError`] naming the cores that did not pass a quiescent state in time.
pub fn settle(cores: usize) -> Result<(), FibError> {
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    if let Some(mut job) = JOB.lock().take() {
        job.discard();
        give_back(zone, core::mem::take(&mut job.areas));
        crate::println!("{}: FIB build abandoned", job.what);
        // An abandoned upload's body goes back with `job`.
    }
    let deadline = crate::arch::time::Deadline::after_ms(GRACE_MS);
    while !step_retire(cores, zone, &mut Budget::unlimited()) {
        if deadline.expired() {
            let late = RELOAD
                .lock()
                .retiring
                .as_ref()
                .map_or(0, |rt| rt.late(cores));
            return Err(err(format_args!(
                "router: cores {late:#x} did not switch to the published FIB within {GRACE_MS} ms"
            )));
        }
        tlb::service();
        core::hint::spin_loop();
    }
    print_notes();
    BUSY.store(false, Ordering::Relaxed);
    Ok(())
}

/// `route add` / `route del` (boot CPU): check a change against the ports (`ports`) and the
/// pending changes, then queue it for the next `routes commit`. A refused change is named on
/// the console and the pending ones are kept.
pub fn queue_delta(d: RouteDelta, ports: &RouteCheck) {
    let mut r = RELOAD.lock();
    let pending = r.deltas.len() - r.committed;
    if let Err(e) = ports.check_change(&r.deltas[r.committed..], d) {
        let (verb, net, gw) = match d {
            RouteDelta::Add(net, gw) => ("add", net, Some(gw)),
            RouteDelta::Del(net) => ("del", net, None),
        };
        let gw = OptGateway(gw);
        return crate::println!(
            "routes: error: route {verb} {net}{gw}: {e}; refused, {pending} pending change(s) kept"
        );
    }
    match r.deltas.push(d) {
        Ok(()) => crate::println!(
            "routes: {d} pending ({} pending; `routes commit` applies them)",
            pending + 1
        ),
        Err(_) => crate::println!(
            "routes: error: {MAX_DELTAS} route changes kept already; `routes reload` drops them"
        ),
    }
}

/// `routes check` (boot CPU): run the arrival checks again on every pending change, each
/// against the ports and the changes before it, without committing; prints one line per
/// refused change and a summary. The pending changes are kept either way.
pub fn check_pending(ports: &RouteCheck) {
    let r = RELOAD.lock();
    let pending = &r.deltas[r.committed..];
    let mut refused = 0;
    for (i, &d) in pending.iter().enumerate() {
        if let Err(e) = ports.check_change(&r.deltas[r.committed..r.committed + i], d) {
            refused += 1;
            crate::println!("routes check: error: {d}: {e}");
        }
    }
    crate::println!(
        "routes check: {} pending change(s), {refused} refused; nothing built (`routes commit` builds them)",
        pending.len()
    );
}

/// The published FIB's generation (0: none, not router mode).
pub fn generation() -> u64 {
    published_generation()
}

/// `f` over the published FIB and its generation, on the boot CPU only (`None` elsewhere, or
/// without a FIB): the management plane's `GET /routes`.
pub fn with_published<R>(f: impl FnOnce(u64, &Fib<'static>) -> R) -> Option<R> {
    if current_cpu() != 0 {
        return None;
    }
    // A record is replaced and retired only by the boot CPU (`poll_build`), which is running
    // this call, so the FIB stays valid while `f` reads it, and it is of this generation
    // (only this CPU publishes).
    let (generation, fib) = FIB.get()?.peek();
    Some(f(generation, fib))
}

/// `,GATEWAY` when there is one (a console change as typed).
struct OptGateway(Option<Ipv4Addr>);

impl core::fmt::Display for OptGateway {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(gw) => write!(f, ",{gw}"),
            None => Ok(()),
        }
    }
}

/// Start a build (it waits for a previous replacement to retire first). Gives `source` back
/// if a build is under way already.
fn start(what: &'static str, source: Source) -> Result<(), Source> {
    let mut j = JOB.lock();
    if j.is_some() {
        return Err(source);
    }
    *j = Some(Job::new(what, source));
    BUSY.store(true, Ordering::Relaxed);
    Ok(())
}

/// `routes commit` (or, with `reload`, `routes reload`: `route=` and the routes file alone, the
/// routes file being the last `PUT /routes` body if there was one) on the boot CPU: start a
/// build, which runs in bounded steps between poll iterations ([`poll_build`]) once a
/// previous replacement retired, then publishes the new FIB and switches this core to it;
/// the other routing cores switch at their next housekeeping and the old FIB is retired. On
/// any error the published FIB stays (pending changes are dropped) and the error is named on
/// the console.
pub fn commit(reload: bool) {
    let what = if reload {
        "routes reload"
    } else {
        "routes commit"
    };
    match start(what, Source::Console { reload }) {
        Ok(()) => {
            crate::println!("{what}: building the new FIB (the published one routes meanwhile)")
        }
        Err(_) => crate::println!(
            "{what}: error: a FIB build is under way; try again when it is published"
        ),
    }
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
    /// Build time (ms of the boot CPU's steps).
    pub build_ms: u64,
}

/// Why a rebuild failed: the previous FIB did not retire in time (`Busy`: try again), a route
/// was refused (`Route`), or the router could not build the new FIB (`Build`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RebuildFailure {
    /// A previous replacement is still waiting for a core (503).
    Busy,
    /// A route the build refused ([`Blame::Route`]: a duplicate, a deletion of a route
    /// that is not there): the client's error (400).
    Route,
    /// The build failed on the router's own limits: memory, rule slots, tbl8 groups (500).
    Build,
}

/// Boot CPU housekeeping: start a pending `PUT /routes` once no build is under way. The body
/// replaces the routes file's routes (`route=` routes and committed console changes stay)
/// through the same stepped build, publish and retire path as `routes commit`; the result
/// reaches the management plane ([`take_put_result`]) when the build ends.
pub fn poll_put() {
    if JOB.lock().is_some() {
        return;
    }
    let mut j = PUT_JOB.lock();
    let PutJob::Pending(_) = &*j else {
        return;
    };
    let PutJob::Pending(upload) = core::mem::replace(&mut *j, PutJob::Started) else {
        unreachable!("checked")
    };
    drop(j);
    if let Err(Source::Upload(u)) = start("PUT /routes", Source::Upload(upload)) {
        *PUT_JOB.lock() = PutJob::Pending(u);
    }
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
    let Some(shared) = FIB.get() else {
        return Err(err(format_args!(
            "router: the FIB was not built before this core started"
        )));
    };
    // Read and recorded for this core before the router uses it: not retired under it.
    let fib = shared.read(current_cpu() as usize);
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    CoreRouter::new(fib, &router_ports(cfg, macs)?, rc)
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))
}
