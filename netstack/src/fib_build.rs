//! Bounded steps of a sparse FIB build: the kernel's live reload (unikernel/src/setup/fib/)
//! runs one step between the boot CPU's poll iterations, so each phase of a step does at most
//! a fixed number of units of work ([`limits`]), whatever the table's size, and stops earlier
//! when its time is up ([`StepBudget`]). This module holds the parts of the phases that touch
//! no memory of the kernel's: counting a routes file's routes to size the tables
//! ([`count_routes`], [`fib_sizes`]), preparing the rule table ([`clear_rules`]), adding the
//! file's routes ([`add_routes`]) and sealing ([`seal`]). Mapping tables and tbl24 chunks and
//! retiring a FIB stay in the kernel, counted against the same [`limits`].

use crate::config::{RoutesFile, PORTS};
use crate::router::{Existing, Fib, FibError, Ipv4Net, ParseError, Router, RouterError, RuleSlot};
use core::net::Ipv4Addr;

/// Most units one step does in each phase (a phase that ends within a step lets the next
/// phase start with its own count). Sized so that a phase's units take at most ~150 µs of
/// guest clock under QEMU TCG with `-icount shift=0` (one instruction per ns; measured: a
/// routes-file line ~2 µs to add, ~0.6 µs to count), below the step's 200 µs time budget.
pub mod limits {
    /// Routes-file lines counted (sizing the tables: a split and a few digits each).
    pub const SIZE_LINES: usize = 256;
    /// Pages of the rule table and tbl8 mapped and zeroed (4 KiB each).
    pub const TABLE_PAGES: usize = 16;
    /// Rule slots set to [`super::RuleSlot::EMPTY`] (12 bytes each).
    pub const RULE_SLOTS: usize = 4096;
    /// Routes-file lines parsed and added to the rule table.
    pub const FILE_ROUTES: usize = 64;
    /// [`super::Fib::seal_step`] units (a slot moved, a heap sift-down, a sorted rule read).
    pub const SEAL_UNITS: usize = 128;
    /// tbl24 chunks filled ([`super::Fib::fill_chunk`], 1,024 entries) and mapped.
    pub const TBL24_CHUNKS: usize = 8;
    /// A retired FIB's pages unmapped (one PTE each).
    pub const UNMAP_PAGES: usize = 512;
    /// A retired FIB's frames given back to the zone.
    pub const FREE_FRAMES: usize = 512;
}

/// Most DIR-24-8 second-level groups (256 entries, 1 KiB each) a build sizes: prefixes
/// longer than /24 under at most 1024 distinct /24s (1 MiB).
pub const TBL8_GROUPS_MAX: usize = 1024;
/// Fewest rule slots a build sizes (a power of two).
pub const MIN_RULES: usize = 64;

/// What a step may still do: units of the current phase, and time.
pub trait StepBudget {
    /// Start a phase within this step: at most `limit` units of it from now on.
    fn phase(&mut self, limit: usize);
    /// Units the current phase may still do in this step (at least 1 until it stops).
    fn left(&self) -> usize;
    /// Count `n` units done; `true` when the step must end now (no units left in this phase,
    /// or its time is up).
    fn spend(&mut self, n: usize) -> bool;
}

/// A [`StepBudget`] of units alone (host tests; the kernel's adds a clock), recording the
/// most units any phase did in one step.
#[derive(Clone, Debug, Default)]
pub struct Units {
    limit: usize,
    used: usize,
    /// Most units one phase did within one step so far, and that phase's limit.
    pub most: (usize, usize),
}

impl Units {
    /// A new step (keeps [`Units::most`]).
    pub fn next_step(&mut self) {
        self.used = 0;
    }
}

impl StepBudget for Units {
    fn phase(&mut self, limit: usize) {
        self.limit = limit;
        self.used = 0;
    }

    fn left(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    fn spend(&mut self, n: usize) -> bool {
        self.used += n;
        if self.used > self.most.0 {
            self.most = (self.used, self.limit);
        }
        self.used >= self.limit
    }
}

/// For sizing only: the prefix length a routes-file line names (the digits after its `/`; 0
/// if there are none), or `None` for a blank or comment-only line or an IPv6 route. Several times cheaper than
/// parsing the line; a malformed line counts as a route (adding it names the error).
pub fn sizing_len(line: &str) -> Option<u8> {
    let l = line.split('#').next().unwrap_or("").trim();
    // Blank, or an IPv6 route (not the IPv4 FIB's).
    if l.is_empty() || l.contains(':') {
        return None;
    }
    let digits = l.split_once('/').map_or("", |(_, rest)| rest);
    Some(
        digits
            .bytes()
            .take_while(u8::is_ascii_digit)
            .fold(0u8, |n, d| n.saturating_mul(10).saturating_add(d - b'0')),
    )
}

/// Rule slots and tbl8 groups for `routes` routes of which `long` are longer than /24
/// (counted in the routes file, `route=` and the console's additions). Rule slots: a power of
/// two with at least 8/7 of them (the rule table's fill limit) for those and each port's three
/// routes. Groups: at most one per route longer than /24 (each port's local and broadcast /32
/// included), at most [`TBL8_GROUPS_MAX`] (sealing reports if they do not suffice).
pub fn fib_sizes(routes: usize, long: usize) -> (usize, usize) {
    let n = routes + 3 * PORTS;
    (
        (n * 8 / 7 + 1).next_power_of_two().max(MIN_RULES),
        (long + 2 * PORTS).clamp(1, TBL8_GROUPS_MAX),
    )
}

/// Sizing phase: count the routes in `lines` into `counted` (routes, of which longer than
/// /24), at most [`limits::SIZE_LINES`] lines per step. `true` once all are counted.
pub fn count_routes(
    lines: &mut core::str::Lines<'_>,
    counted: &mut (usize, usize),
    b: &mut impl StepBudget,
) -> bool {
    b.phase(limits::SIZE_LINES);
    for line in lines.by_ref() {
        if let Some(len) = sizing_len(line) {
            counted.0 += 1;
            counted.1 += usize::from(len > 24);
        }
        if b.spend(1) {
            return false;
        }
    }
    true
}

/// Table phase: set `rules[*next..]` to [`RuleSlot::EMPTY`], at most [`limits::RULE_SLOTS`]
/// per step. `true` once all are ([`Fib::new_sparse_prepared`] may take them).
pub fn clear_rules(rules: &mut [RuleSlot], next: &mut usize, b: &mut impl StepBudget) -> bool {
    b.phase(limits::RULE_SLOTS);
    while *next < rules.len() {
        let n = (rules.len() - *next).min(b.left()).min(256);
        rules[*next..*next + n].fill(RuleSlot::EMPTY);
        *next += n;
        if b.spend(n) {
            return *next == rules.len();
        }
    }
    true
}

/// Why a routes-file line was not added ([`add_routes`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum FileError<'t> {
    /// Line `line` (from 1) does not parse: its text (cut at 40 bytes if too long) and why.
    Parse(usize, &'t str, ParseError),
    /// Line `line`'s route, refused by the router (a duplicate prefix, a gateway on no port's
    /// network, the FIB full).
    Route(usize, Ipv4Net, Ipv4Addr, RouterError),
}

/// File phase: parse and add the routes of `lines` to `router` (each prefix once,
/// [`Existing::Refuse`]), counting them in `added`, at most [`limits::FILE_ROUTES`] lines per
/// step. `Ok(true)` once all are.
///
/// # Errors
/// The first bad line ([`FileError`]); the build then stops.
pub fn add_routes<'t, H: Copy, const N: usize, const Q: usize>(
    router: &mut Router<'_, H, N, Q>,
    lines: &mut RoutesFile<'t>,
    added: &mut usize,
    b: &mut impl StepBudget,
) -> Result<bool, FileError<'t>> {
    b.phase(limits::FILE_ROUTES);
    for r in lines.by_ref() {
        let (line, (net, gw)) = r.map_err(|(line, text, why)| FileError::Parse(line, text, why))?;
        router
            .add_static(net, gw, Existing::Refuse)
            .map_err(|e| FileError::Route(line, net, gw, e))?;
        *added += 1;
        if b.spend(1) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Seal phase: sort the rules ([`Fib::seal_step`]), at most [`limits::SEAL_UNITS`] units per
/// step, clock checks every 32. `Ok(true)` once sealed.
///
/// # Errors
/// As [`Fib::seal_step`] (the tbl8 groups do not suffice).
pub fn seal(fib: &mut Fib<'_>, b: &mut impl StepBudget) -> Result<bool, FibError> {
    b.phase(limits::SEAL_UNITS);
    loop {
        let n = b.left().clamp(1, 32);
        if fib.seal_step(n)? {
            return Ok(true);
        }
        if b.spend(n) {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests;
