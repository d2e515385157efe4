//! `mode=acl`: the boot's rule set (the bundle's `rules` file) built into zone blocks, with one
//! row of hit counters per CPU, published as `nf::builtin::ACL` (a [`Shared`]) before any core
//! starts; then its live replacements.
//!
//! A replacement (console `acl reload`: the boot's rules file again; `PUT /rules`: the body) is
//! a job for the boot CPU's housekeeping ([`poll`], every 10 ms, between its poll iterations):
//! the new set is built there in one piece ([`AclTable::build`]), published (pointer, then
//! generation), and each core switches to it in its own tick (`AclCore::refresh`); once every
//! forwarding core recorded the new generation, [`poll`] frees the old set from its header
//! (`AclTable::free`). One set retires at a time: a job waits for the previous retirement, and
//! is refused as busy (503 for `PUT /rules`) when it has waited more than [`RETIRE_WAIT_MS`].
//! `quit` ([`settle`]) drops a job not started and finishes the retirement, so that `free now +
//! ACL pages now == free at boot + ACL pages at boot` ([`acl_pages`]).

use crate::arch::time::uptime_us;
use crate::dataplane::nf::builtin::{AclTable, ACL};
use crate::dataplane::nf::{Retiring, Shared};
use crate::setup::fib::PutUpload;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};
use log::info;
use mm::Zone;
use netstack::stats::AclStats;

/// How long a replacement waits for the previous set to retire before it is refused (ms). A
/// core takes a new set up within one tick (10 ms); a second late for this long is stuck.
pub const RETIRE_WAIT_MS: u64 = 1000;

/// A reload's error text (no heap: it is answered or printed once).
pub type AclReloadText = heapless::String<200>;

/// Why a replacement was not published (the published set stays).
#[derive(Clone, Debug)]
pub enum AclReloadError {
    /// The previous set was still retiring after [`RETIRE_WAIT_MS`] (`PUT /rules`: 503).
    Busy(AclReloadText),
    /// The set could not be built: a bad line (named) or no memory (`PUT /rules`: 500).
    Build(AclReloadText),
}

impl AclReloadError {
    /// The text, whichever the error.
    pub fn text(&self) -> &str {
        match self {
            AclReloadError::Busy(t) | AclReloadError::Build(t) => t,
        }
    }
}

/// A replacement published.
#[derive(Copy, Clone, Debug)]
pub struct AclPublished {
    /// Its generation.
    pub generation: u64,
    /// Its rules and tuples.
    pub rules: usize,
    /// Its tuples.
    pub tuples: usize,
    /// The pages it holds.
    pub pages: usize,
    /// How long the build took on the boot CPU, µs.
    pub build_us: u64,
}

/// Where a replacement's rules file comes from.
enum Source {
    /// The boot's rules file (console `acl reload`).
    Boot,
    /// A `PUT /rules` body, checked line by line as it arrived.
    Put(PutUpload),
}

/// A replacement asked for and not yet run.
struct Job {
    source: Source,
    /// When it was asked (µs since boot).
    since_us: u64,
}

/// Where `PUT /rules` is: nothing asked, a job for housekeeping, or its result for the
/// management plane.
// One static slot (no heap to box the error in): the size does not matter.
#[allow(clippy::large_enum_variant)]
enum Put {
    Idle,
    Asked,
    Done(Result<AclPublished, AclReloadError>),
}

/// The writer's state (the boot CPU's housekeeping; the management plane submits).
struct Reload {
    /// The set replaced last, until every core moved on, and when it was replaced (µs).
    retiring: Option<(Retiring<AclTable>, u64)>,
    job: Option<Job>,
    put: Put,
}

static RELOAD: spin::Mutex<Reload> = spin::Mutex::new(Reload {
    retiring: None,
    job: None,
    put: Put::Idle,
});
/// The boot's rules file (`acl reload` builds from it again).
static BOOT_TEXT: spin::Once<&'static str> = spin::Once::new();
/// CPUs the hit counters have rows for.
static CPUS: AtomicU64 = AtomicU64::new(0);
/// Counters for STATS (`acl`).
static RELOADS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static PAGES: AtomicU64 = AtomicU64::new(0);
static PAGES_BOOT: AtomicU64 = AtomicU64::new(0);
static PAGES_RETIRING: AtomicU64 = AtomicU64::new(0);
static RETIRED: AtomicU64 = AtomicU64::new(0);
static LAST_SWAP_US: AtomicU64 = AtomicU64::new(0);

/// Build the rule set from `text` for `cpus` CPUs and publish it (generation 1). Returns
/// (rules, tuples, bytes of classifier, pages of its blocks: the classifier, the hit counters
/// and the header, each rounded up to a buddy block).
///
/// # Errors
/// A bad rules line (named: `config error: rules file: rules line N: …`), or no memory.
pub fn build(
    zone: &'static Zone,
    text: &'static str,
    cpus: usize,
) -> Result<(usize, usize, usize, usize), heapless::String<160>> {
    let table = AclTable::build(zone, text, cpus).map_err(|e| {
        let mut why = heapless::String::new();
        let _ = match e {
            crate::dataplane::nf::builtin::AclBuildError::Rules(_) => {
                write!(why, "config error: {e}")
            }
            _ => write!(why, "memory error: {e}"),
        };
        why
    })?;
    BOOT_TEXT.call_once(|| text);
    CPUS.store(cpus as u64, Ordering::Relaxed);
    let pages = table.pages() as u64;
    PAGES.store(pages, Ordering::Relaxed);
    PAGES_BOOT.store(pages, Ordering::Relaxed);
    ACL.call_once(|| Shared::new(table));
    let acl = &table.acl;
    Ok((
        acl.len(),
        acl.tuple_count(),
        acl.sizes_used().bytes(),
        table.pages(),
    ))
}

/// The `acl` section of STATS (`None` outside `mode=acl`).
pub fn acl_stats() -> Option<AclStats> {
    let shared = ACL.get()?;
    let t = shared.current();
    Some(AclStats {
        generation: shared.generation(),
        rules: t.acl.len() as u64,
        tuples: t.acl.tuple_count() as u64,
        reloads: RELOADS.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        pages: PAGES.load(Ordering::Relaxed),
        pages_boot: PAGES_BOOT.load(Ordering::Relaxed),
        pages_retiring: PAGES_RETIRING.load(Ordering::Relaxed),
        retired: RETIRED.load(Ordering::Relaxed),
        last_swap_us: LAST_SWAP_US.load(Ordering::Relaxed),
    })
}

/// Pages the rule sets hold now (published + retiring) and held at boot (taken before the
/// boot free-page count): `quit` checks `free now + ACL now == free at boot + ACL at boot`.
pub fn acl_pages() -> (u64, u64) {
    (
        PAGES.load(Ordering::Relaxed) + PAGES_RETIRING.load(Ordering::Relaxed),
        PAGES_BOOT.load(Ordering::Relaxed),
    )
}

/// Console `acl reload` (boot CPU): rebuild the boot's rules file at the next housekeeping.
pub fn reload() {
    if ACL.get().is_none() {
        return crate::println!("acl: not in acl mode");
    }
    let mut r = RELOAD.lock();
    if r.job.is_some() {
        return crate::println!("acl reload: refused: a replacement is already waiting");
    }
    r.job = Some(Job {
        source: Source::Boot,
        since_us: uptime_us(),
    });
}

/// Management plane: hand a complete, checked `PUT /rules` body to housekeeping. Returns it
/// back if a replacement is already waiting or unanswered.
pub fn submit_put(upload: PutUpload) -> Result<(), PutUpload> {
    let mut r = RELOAD.lock();
    if r.job.is_some() || !matches!(r.put, Put::Idle) {
        return Err(upload);
    }
    r.job = Some(Job {
        source: Source::Put(upload),
        since_us: uptime_us(),
    });
    r.put = Put::Asked;
    Ok(())
}

/// Management plane: whether a `PUT /rules` is waiting or unanswered, or a console reload
/// is waiting (a new upload waits its turn).
pub fn put_busy() -> bool {
    let r = RELOAD.lock();
    r.job.is_some() || !matches!(r.put, Put::Idle)
}

/// Management plane: the result of the submitted `PUT /rules` once housekeeping ran it.
pub fn take_put_result() -> Option<Result<AclPublished, AclReloadError>> {
    let mut r = RELOAD.lock();
    match core::mem::replace(&mut r.put, Put::Idle) {
        Put::Done(d) => Some(d),
        other => {
            r.put = other;
            None
        }
    }
}

/// The boot CPU's housekeeping (every 10 ms; `cores` forwarding cores): free the set replaced
/// last once every core moved on, then run a replacement asked for, once no set is retiring
/// (refused as busy past [`RETIRE_WAIT_MS`]).
pub fn poll(cores: usize) {
    let Some(shared) = ACL.get() else {
        return;
    };
    let mut r = RELOAD.lock();
    retire(shared, &mut r, cores);
    let Some(job) = r.job.take() else {
        return;
    };
    let is_put = matches!(job.source, Source::Put(_));
    let what = if is_put { "PUT /rules" } else { "acl reload" };
    let result = if let Some((old, _)) = &r.retiring {
        let waited_ms = uptime_us().saturating_sub(job.since_us) / 1000;
        if waited_ms <= RETIRE_WAIT_MS {
            r.job = Some(job);
            return;
        }
        let mut why = AclReloadText::new();
        let _ = write!(
            why,
            "{what}: the rule set of generation {} is still retiring after {RETIRE_WAIT_MS} ms (cores {:#x} late); generation {} stays",
            old.generation() - 1,
            shared.late(old, cores),
            shared.generation()
        );
        Err(AclReloadError::Busy(why))
    } else {
        publish(shared, &mut r, &job, what)
    };
    // An upload's body goes back here (a local flush: only this CPU mapped it).
    drop(job);
    match &result {
        Ok(p) => info!(
            "acl: {what}: generation {} published: {} rules in {} tuples, {} pages, built in {} us",
            p.generation, p.rules, p.tuples, p.pages, p.build_us
        ),
        Err(e) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            crate::println!("acl: {}", e.text());
        }
    }
    if is_put {
        r.put = Put::Done(result);
    }
}

/// Build the job's set and publish it; the old one starts retiring.
fn publish(
    shared: &'static Shared<AclTable, { crate::dataplane::MAX_CORES }>,
    r: &mut Reload,
    job: &Job,
    what: &str,
) -> Result<AclPublished, AclReloadError> {
    let text = match &job.source {
        Source::Boot => BOOT_TEXT.get().copied().unwrap_or(""),
        Source::Put(u) => u.text(),
    };
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    let t0 = uptime_us();
    let cpus = CPUS.load(Ordering::Relaxed) as usize;
    let table = AclTable::build(zone, text, cpus).map_err(|e| {
        let mut why = AclReloadText::new();
        let _ = write!(why, "{what}: {e}; generation {} stays", shared.generation());
        AclReloadError::Build(why)
    })?;
    let build_us = uptime_us() - t0;
    let pages = table.pages();
    let old = shared.publish(table);
    let old_pages = PAGES.swap(pages as u64, Ordering::Relaxed);
    PAGES_RETIRING.fetch_add(old_pages, Ordering::Relaxed);
    RELOADS.fetch_add(1, Ordering::Relaxed);
    let generation = old.generation();
    r.retiring = Some((old, uptime_us()));
    Ok(AclPublished {
        generation,
        rules: table.acl.len(),
        tuples: table.acl.tuple_count(),
        pages,
        build_us,
    })
}

/// Free the set replaced last if no core of the first `cores` can read it any more.
fn retire(
    shared: &Shared<AclTable, { crate::dataplane::MAX_CORES }>,
    r: &mut Reload,
    cores: usize,
) {
    let Some((old, since)) = r.retiring.take() else {
        return;
    };
    let replaced_by = old.generation();
    match shared.retired(old, cores) {
        Ok(table) => {
            let pages = table.pages() as u64;
            // SAFETY: `retired` handed it back: every forwarding core recorded a newer
            // generation, which it does only after its last use of this set; this CPU's own
            // uses (the console's `acl`, STATS) read the current set, and the boot's text
            // is not in the set's blocks. Built by `AclTable::build` (boot or reload).
            unsafe { table.free() };
            PAGES_RETIRING.fetch_sub(pages, Ordering::Relaxed);
            RETIRED.fetch_add(1, Ordering::Relaxed);
            LAST_SWAP_US.store(uptime_us().saturating_sub(since), Ordering::Relaxed);
            info!(
                "acl: the rule set before generation {replaced_by} retired ({pages} pages freed)"
            );
        }
        Err(old) => r.retiring = Some((old, since)),
    }
}

/// Boot CPU (`quit`): drop a replacement not started and finish the retirement under way,
/// waiting at most [`RETIRE_WAIT_MS`] (answering TLB requests) for the other cores' ticks.
///
/// # Errors
/// The cores that did not take the published set up in time.
pub fn settle(cores: usize) -> Result<(), AclReloadText> {
    let Some(shared) = ACL.get() else {
        return Ok(());
    };
    let deadline = crate::arch::time::Deadline::after_ms(RETIRE_WAIT_MS);
    let mut r = RELOAD.lock();
    if r.job.take().is_some() {
        crate::println!("acl: a replacement not started was dropped");
    }
    loop {
        retire(shared, &mut r, cores);
        let Some((old, _)) = &r.retiring else {
            return Ok(());
        };
        if deadline.expired() {
            let mut why = AclReloadText::new();
            let _ = write!(
                why,
                "acl: cores {:#x} did not switch to the published rule set within {RETIRE_WAIT_MS} ms",
                shared.late(old, cores)
            );
            return Err(why);
        }
        crate::tlb::service();
        core::hint::spin_loop();
    }
}
