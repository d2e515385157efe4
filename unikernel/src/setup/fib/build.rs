//! Building a sparse FIB a bounded step at a time: the boot CPU keeps forwarding while a
//! reload builds (docs/DESIGN.md, "Live route reload"). A [`Job`] walks the phases
//! [`Phase::Settle`] (the previous replacement retires first), `Size` (count the routes file's
//! routes), `Tables` (map and zero the rule table and tbl8, clear the rule slots), `File` (add
//! the file's routes, each prefix once), `Deltas` (`route=` under them, then the console's
//! changes), `Seal` (sort the rules, [`Fib::seal_step`]) and `Tbl24` (fill and map the 16,384
//! tbl24 chunks); each call of [`build_step`] runs until its [`Budget`] is spent: at most
//! [`limits`] units of each phase, and [`STEP_US`] of time. The phases' host-buildable parts
//! (sizing, clearing, adding, sealing) are `netstack::fib_build`'s, unit-tested there with a
//! 7-route and a 100,000-route build; mapping memory is this file's. The boot FIB is the same
//! job run with no budget.

use super::PutUpload;
use super::{
    blamed, err, route_err, router_ports, Blame, FibAreas, FibBuilder, FibError, FibMemory, Reload,
    RouteDelta,
};
use crate::arch::time::uptime_us;
use crate::mem::paging::{self, PAGE};
use crate::mem::vmap::{self, VmArea};
use core::sync::atomic::AtomicU32;
use mm::{Pfn, Zone};
use netstack::config::{parse_routes_file, RoutesFile, PORTS};
use netstack::fib_build::{self, fib_sizes, limits, FileError, StepBudget};
use netstack::router::{
    Existing, Fib, RouterConfig, RuleSlot, Tbl24Chunk, TBL24_CHUNKS, TBL24_CHUNK_LEN, TBL24_LEN,
    TBL8_GROUP_LEN,
};
use netstack::{Config, MacAddr};

/// Longest one step runs before the boot CPU goes back to forwarding (µs). 200 µs: at the
/// ~70,000 frames/s the boot CPU forwards under TCG, at most ~15 frames wait in a 256-slot
/// RX ring per step, so a sender with 2,048 frames in flight loses none to a reload.
pub(super) const STEP_US: u64 = 200;
/// Least time a busy boot CPU forwards between two steps (µs): while traffic flows a build
/// takes at most half of the core (all of it when the core is idle).
pub(super) const STEP_GAP_US: u64 = 200;
/// Units (lines, slots, pages, frames) between two clock reads inside a step.
const CHECK_EVERY: usize = 16;

/// A step's budget: at most [`limits`] units of each phase ([`StepBudget::phase`]), and its
/// time (the clock read every [`CHECK_EVERY`] units).
pub(super) struct Budget {
    start_us: u64,
    end_us: u64,
    /// The current phase's limit and the units it did in this step.
    limit: usize,
    used: usize,
    /// Units since the last clock read.
    unread: usize,
}

impl Budget {
    /// A step of `us` microseconds from now.
    pub(super) fn new(us: u64) -> Budget {
        let now = uptime_us();
        Budget {
            start_us: now,
            end_us: now.saturating_add(us),
            limit: 0,
            used: 0,
            unread: 0,
        }
    }

    /// No limit, of time or units: the boot FIB, and `quit` finishing a retirement.
    pub(super) fn unlimited() -> Budget {
        Budget {
            end_us: u64::MAX,
            ..Budget::new(0)
        }
    }

    /// Whether the step's time is up (reads the clock).
    pub(super) fn over(&self) -> bool {
        self.end_us != u64::MAX && uptime_us() >= self.end_us
    }

    /// µs since the step began.
    pub(super) fn elapsed_us(&self) -> u64 {
        uptime_us() - self.start_us
    }
}

impl StepBudget for Budget {
    fn phase(&mut self, limit: usize) {
        self.limit = if self.end_us == u64::MAX {
            usize::MAX
        } else {
            limit
        };
        self.used = 0;
    }

    fn left(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    fn spend(&mut self, n: usize) -> bool {
        self.used = self.used.saturating_add(n);
        self.unread += n;
        if self.used >= self.limit {
            return true;
        }
        if self.unread >= CHECK_EVERY {
            self.unread = 0;
            return self.over();
        }
        false
    }
}

/// What a build builds from.
pub(super) enum Source {
    /// The boot configuration and the routes boot module (generation 1).
    Boot,
    /// `routes commit`, or with `reload` `routes reload` (without the console's changes).
    Console { reload: bool },
    /// `PUT /routes`: this body replaces the routes file; committed console changes stay.
    Upload(PutUpload),
}

/// Where a [`Job`] stands.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub(super) enum Phase {
    /// Waiting (at most `GRACE_MS`) for the previous replacement to retire.
    Settle,
    /// Counting the routes file's routes, and those longer than /24, to size the tables.
    Size,
    /// Mapping zeroed pages for tbl8, then the rule table ([`Job::tables`] so far), then
    /// clearing the rule slots from this one on.
    Tables(usize),
    /// Adding the routes file's routes (each prefix once).
    File,
    /// Adding `route=` where the routes file has no route for its prefix, then applying the
    /// console's changes.
    Deltas,
    /// Sorting the rules.
    Seal,
    /// Filling and mapping tbl24 from this chunk on.
    Tbl24(usize),
}

/// A FIB being built by the boot CPU. Everything it took from the zone and the vmap area is
/// in `areas` (given back if it fails or is abandoned; only this CPU ever saw it).
pub(super) struct Job {
    /// For messages: `boot FIB`, `routes commit`, `routes reload`, `PUT /routes`.
    pub(super) what: &'static str,
    pub(super) source: Source,
    pub(super) phase: Phase,
    /// The routes file's text (the boot module, the last upload, or this upload).
    text: Option<&'static str>,
    /// The console changes this build applies: `Reload::deltas[..deltas]`.
    pub(super) deltas: usize,
    /// The routes file's lines still to count (sizing), then still to parse and add.
    count: core::str::Lines<'static>,
    lines: RoutesFile<'static>,
    /// Routes counted in the routes file, and of those longer than /24.
    counted: (usize, usize),
    /// Routes added from the routes file.
    from_file: usize,
    /// The tables' sizes (rule slots, tbl8 groups), and their pages mapped so far (tbl8,
    /// rules).
    sizes: (usize, usize),
    tables: (usize, usize),
    router: Option<FibBuilder>,
    fib: Option<Fib<'static>>,
    pub(super) mem: FibMemory,
    pub(super) areas: FibAreas,
    /// When it was asked for (µs since boot).
    pub(super) asked_us: u64,
    /// Steps run, their time in all (µs) and in the rule phases (before `Tbl24`).
    pub(super) steps: u64,
    pub(super) work_us: u64,
    pub(super) rules_us: u64,
}

impl Job {
    /// A job waiting to start ([`Phase::Settle`]).
    pub(super) fn new(what: &'static str, source: Source) -> Job {
        Job {
            what,
            source,
            phase: Phase::Settle,
            text: None,
            deltas: 0,
            count: "".lines(),
            lines: parse_routes_file(""),
            counted: (0, 0),
            from_file: 0,
            sizes: (0, 0),
            tables: (0, 0),
            router: None,
            fib: None,
            mem: FibMemory::default(),
            areas: FibAreas::default(),
            asked_us: uptime_us(),
            steps: 0,
            work_us: 0,
            rules_us: 0,
        }
    }

    /// Leave [`Phase::Settle`] (the previous replacement has retired): fix what the build
    /// reads, the routes file and the console's changes (a reload drops the latter).
    pub(super) fn begin(&mut self, r: &mut Reload) {
        if let Source::Console { reload: true } = self.source {
            r.deltas.clear();
            r.committed = 0;
        }
        self.deltas = match self.source {
            Source::Upload(_) => r.committed,
            Source::Boot | Source::Console { .. } => r.deltas.len(),
        };
        self.text = match &self.source {
            Source::Upload(u) => Some(u.text()),
            Source::Boot | Source::Console { .. } => r.routes_file,
        };
        self.count = self.text.unwrap_or("").lines();
        self.lines = parse_routes_file(self.text.unwrap_or(""));
        self.phase = Phase::Size;
    }

    /// The built FIB (after [`build_step`] returned `Ok(true)`).
    pub(super) fn take_fib(&mut self) -> Fib<'static> {
        self.fib.take().expect("a built job holds its FIB")
    }

    /// Drop the router and the FIB under construction (their slices point into `areas`,
    /// which the caller gives back next).
    pub(super) fn discard(&mut self) {
        self.router = None;
        self.fib = None;
    }
}

/// Run `job` until its FIB is built (`Ok(true)`) or `b` is spent (`Ok(false)`: call again).
/// `deltas` is `Reload::deltas` (read, not changed).
///
/// # Errors
/// A [`FibError`] naming the bad route (its routes-file line, `route=` or console change) or
/// the memory that ran out. The job must then be discarded and its `areas` given back.
pub(super) fn build_step(
    job: &mut Job,
    cfg: &Config,
    zone: &Zone,
    deltas: &[RouteDelta],
    b: &mut Budget,
) -> Result<bool, FibError> {
    loop {
        let done = match job.phase {
            Phase::Settle => return Ok(false),
            Phase::Size => {
                if !fib_build::count_routes(&mut job.count, &mut job.counted, b) {
                    return Ok(false);
                }
                size_tables(job, cfg, &deltas[..job.deltas])?;
                true
            }
            Phase::Tables(next) => tables(job, cfg, zone, next, b)?,
            Phase::File => add_file_routes(job, b)?,
            Phase::Deltas => {
                // `route=` (at most MAX_CMDLINE_ROUTES), under the routes file: a prefix the
                // file has keeps the file's route. Then the console's changes over both (at
                // most MAX_DELTAS). One go.
                let mut router = job.router.take().expect("the rule phase has a router");
                for (net, gw) in cfg.router.routes.iter() {
                    router.add_static(*net, *gw, Existing::Keep).map_err(|e| {
                        route_err(&e, format_args!("config error: route={net},{gw}: {e}"))
                    })?;
                }
                for d in &deltas[..job.deltas] {
                    match *d {
                        RouteDelta::Add(net, gw) => router.add_route(net, gw).map_err(|e| {
                            route_err(&e, format_args!("route add {net},{gw}: {e}"))
                        })?,
                        RouteDelta::Del(net) => router
                            .delete_route(net)
                            .map_err(|e| route_err(&e, format_args!("route del {net}: {e}")))?,
                    }
                }
                job.fib = Some(router.into_fib());
                job.phase = Phase::Seal;
                true
            }
            Phase::Seal => seal(job, b)?,
            Phase::Tbl24(first) => return fill_tbl24(job, zone, first, b),
        };
        if !done || b.over() {
            return Ok(false);
        }
    }
}

/// [`Phase::File`]: add the routes file's routes until `b` is spent (`Ok(false)`) or all are
/// (`Ok(true)`, on to [`Phase::Deltas`]).
fn add_file_routes(job: &mut Job, b: &mut Budget) -> Result<bool, FibError> {
    let router = job.router.as_mut().expect("the rule phase has a router");
    let done = fib_build::add_routes(router, &mut job.lines, &mut job.from_file, b).map_err(
        |e| match e {
            FileError::Parse(line, text, why) => blamed(
                Blame::Route,
                format_args!(
            "config error: routes file line {line}: `{text}`: {why} (expected PREFIX/LEN,GATEWAY)"
        ),
            ),
            FileError::Route(line, net, gw, e) => route_err(
                &e,
                format_args!("config error: routes file line {line}: {net},{gw}: {e}"),
            ),
        },
    )?;
    if !done {
        return Ok(false);
    }
    if job.text.is_some() {
        super::note(
            super::Note::Info,
            format_args!("router: {} routes from the routes file", job.from_file),
        );
    }
    job.phase = Phase::Deltas;
    Ok(true)
}

/// [`Phase::Seal`]: sort the rules until `b` is spent (`Ok(false)`) or they are sealed
/// (`Ok(true)`: tbl24's range taken, on to [`Phase::Tbl24`]).
fn seal(job: &mut Job, b: &mut Budget) -> Result<bool, FibError> {
    let fib = job.fib.as_mut().expect("the seal phase has a FIB");
    match fib_build::seal(fib, b) {
        Ok(true) => {}
        Ok(false) => return Ok(false),
        Err(e) => {
            return Err(err(format_args!(
                "router: FIB of {} routes with {} tbl8 groups: {e}",
                fib.len(),
                fib.tbl8_usage().1
            )))
        }
    }
    let area = vmap::alloc_va(TBL24_LEN * 4 / PAGE as usize)
        .map_err(|e| err(format_args!("router: FIB tbl24: {e}")))?;
    job.areas.tbl24 = Some(area);
    job.rules_us = job.work_us + b.elapsed_us();
    job.phase = Phase::Tbl24(0);
    Ok(true)
}

/// [`Phase::Tbl24`] from chunk `first`: fill and map chunks until `b` is spent (`Ok(false)`)
/// or all are, then attach tbl24 (`Ok(true)`: built).
fn fill_tbl24(job: &mut Job, zone: &Zone, first: usize, b: &mut Budget) -> Result<bool, FibError> {
    let fib = job.fib.as_mut().expect("the tbl24 phase has a FIB");
    let area = job.areas.tbl24.expect("the tbl24 range was taken");
    b.phase(limits::TBL24_CHUNKS);
    for c in first..TBL24_CHUNKS {
        tbl24_chunk(fib, zone, &mut job.mem, &mut job.areas, area, c)?;
        if c + 1 < TBL24_CHUNKS && b.spend(1) {
            job.phase = Phase::Tbl24(c + 1);
            return Ok(false);
        }
    }
    if let Some(s) = job.areas.scratch.take() {
        zone.free_pages_order(s, 0);
    }
    // SAFETY: every page of `area` (TBL24_LEN u32s, 4 KiB aligned) was just mapped read-only
    // to a frame holding its chunk; the mappings are removed only when this FIB is discarded
    // (never published) or retired, after every core that could read it switched to a newer
    // FIB and the FIB (holding this slice) was dropped. It is only read, with atomic loads
    // (valid on read-only memory for a lock-free 4-byte atomic), never written.
    let tbl24 = unsafe { core::slice::from_raw_parts(area.base as *const AtomicU32, TBL24_LEN) };
    fib.attach_tbl24(tbl24)
        .map_err(|e| err(format_args!("router: FIB: {e}")))?;
    Ok(true)
}

/// The sizing phase's end: size the rule table and tbl8 for the routes counted, `route=` and
/// the console's additions, and take their virtual ranges (mapped by [`Phase::Tables`]).
fn size_tables(job: &mut Job, cfg: &Config, deltas: &[RouteDelta]) -> Result<(), FibError> {
    let adds = deltas
        .iter()
        .filter_map(|d| match d {
            RouteDelta::Add(net, _) => Some(net),
            RouteDelta::Del(_) => None,
        })
        .fold((0, 0), |(n, long), net| {
            (n + 1, long + usize::from(net.len > 24))
        });
    job.sizes = fib_sizes(
        job.counted.0 + cfg.router.routes.len() + adds.0,
        job.counted.1 + cfg.router.routes.iter().filter(|r| r.0.len > 24).count() + adds.1,
    );
    let (nrules, groups) = job.sizes;
    job.areas.tbl8 = Some(table_va::<u32>(groups * TBL8_GROUP_LEN, "tbl8")?);
    job.areas.rules = Some(table_va::<RuleSlot>(nrules, "rule table")?);
    job.phase = Phase::Tables(0);
    Ok(())
}

/// A virtual range for `n` elements of `T` (a FIB table), mapped by [`Phase::Tables`].
fn table_va<T>(n: usize, what: &str) -> Result<VmArea, FibError> {
    let bytes = n * core::mem::size_of::<T>();
    vmap::alloc_va(bytes.div_ceil(PAGE as usize))
        .map_err(|e| err(format_args!("router: FIB {what} ({bytes} bytes): {e}")))
}

/// [`Phase::Tables`]: map zeroed pages into tbl8's range, then the rule table's (at most
/// [`limits::TABLE_PAGES`] a step), clear the rule slots from `next` on (at most
/// [`limits::RULE_SLOTS`] a step), then start the rule phase: the FIB on those tables and a
/// router holding each port's routes. `Ok(true)` once on to [`Phase::File`].
fn tables(
    job: &mut Job,
    cfg: &Config,
    zone: &Zone,
    mut next: usize,
    b: &mut Budget,
) -> Result<bool, FibError> {
    let tbl8 = job.areas.tbl8.expect("sized");
    let rules = job.areas.rules.expect("sized");
    b.phase(limits::TABLE_PAGES);
    for (area, mapped, what) in [
        (tbl8, &mut job.tables.0, "tbl8"),
        (rules, &mut job.tables.1, "rule table"),
    ] {
        while *mapped < area.pages {
            let n = b.left().min(area.pages - *mapped);
            let got = vmap::vmalloc_step(zone, area, *mapped, n).map_err(|e| {
                err(format_args!(
                    "router: FIB {what} ({} pages): {e}",
                    area.pages
                ))
            })?;
            *mapped += got;
            if b.spend(got) {
                return Ok(false);
            }
        }
    }
    job.mem.tbl8_pages = tbl8.pages;
    job.mem.rule_pages = rules.pages;
    let (nrules, groups) = job.sizes;
    // SAFETY: `rules` is a vmap range of ≥ `nrules` 12-byte slots, 4 KiB aligned, every page
    // mapped writable (above) for this build alone; it is unmapped only when its FIB is
    // discarded (never published) or retired, after the FIB holding this slice was dropped.
    // All-zero bytes are a valid `RuleSlot` (integers).
    let slots = unsafe { core::slice::from_raw_parts_mut(rules.base as *mut RuleSlot, nrules) };
    let cleared = fib_build::clear_rules(slots, &mut next, b);
    job.phase = Phase::Tables(next);
    if !cleared {
        return Ok(false);
    }
    // SAFETY: as `slots`: tbl8's range, mapped (zeroed pages) for this build alone.
    let tbl8 =
        unsafe { core::slice::from_raw_parts_mut(tbl8.base as *mut u32, groups * TBL8_GROUP_LEN) };
    // One write per tbl8 group (at most netstack's TBL8_GROUPS_MAX).
    let fib =
        Fib::new_sparse_prepared(tbl8, slots).map_err(|e| err(format_args!("router: FIB: {e}")))?;
    // The MACs do not matter to the FIB (core_router gets the real ones).
    let ports = router_ports(cfg, [MacAddr::default(); PORTS])?;
    let router = FibBuilder::new(fib, &ports, RouterConfig::default())
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))?;
    job.router = Some(router);
    job.phase = Phase::File;
    Ok(true)
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

/// tbl24 chunk `c` of `area`: mapped, read-only, to the shared page of its value if
/// [`Fib::fill_chunk`] found it uniform, else to a zone page holding the chunk. Everything
/// taken is recorded in `areas`.
fn tbl24_chunk(
    fib: &mut Fib<'static>,
    zone: &Zone,
    mem: &mut FibMemory,
    areas: &mut FibAreas,
    area: VmArea,
    c: usize,
) -> Result<(), FibError> {
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
    if let Err(e) = paging::vmap_page(area.page_addr(c), pfn.addr(), false) {
        // Not mapped, so no unmap reports it: free it here unless the shared list has it.
        if !areas.shared.iter().any(|&(_, p)| p == pfn) {
            zone.free_pages_order(pfn, 0);
        }
        return Err(err(format_args!("router: FIB tbl24 chunk {c}: {e}")));
    }
    Ok(())
}
