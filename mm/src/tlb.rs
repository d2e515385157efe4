//! Batched TLB shootdown: the cross-CPU protocol that makes "unmap, then free" safe when other
//! CPUs may still hold the old translation in their TLBs (docs/DESIGN.md "Remapped buffers and
//! batched TLB shootdown"; docs/SEED-NOTES.md "TLB shootdown batching (2015)").
//!
//! Past ~800 lines because the batch, the shared request slots and the in-flight token are one
//! protocol, whose memory orderings (publish a request, acknowledge it, retire the batch) are
//! checked against each other in one place; its tests are in `tlb/tests.rs`.
//!
//! The crate supplies the protocol only; the kernel supplies the arch operations through
//! [`TlbArch`] (`invlpg`, CR3 reload, the TLB IPI, "is that core in `hlt`", the TSC). Nothing
//! here allocates, blocks or touches page tables, which is what makes it testable on the host
//! (unit tests below, the proptest model in `mm/tests/tlb_model.rs`, the loom models).
//!
//! # Pieces
//!
//! * [`FlushBatch`] — one per initiating core (owned, `&mut`): the virtual pages just unmapped
//!   and the union of the [`CpuMask`]s that may cache them ([`FlushBatch::add_page`]), the page
//!   frames that may be freed only after the flush ([`FlushBatch::add_free`], capacity `P`), and
//!   the virtual ranges to give back to the caller's VA allocator ([`FlushBatch::add_va_range`],
//!   capacity [`BATCH_RANGES`]).
//! * [`Shootdown`] — the shared state, one `static` for the system (`const fn new`): per CPU a
//!   published request slot (this CPU as initiator: the pages, "full flush" or not, a generation
//!   number), a pending word (this CPU as target: bit *i* = initiator *i* has a request for it),
//!   and the acknowledged generations of its targets. Plus per-CPU counters ([`TlbStats`]).
//! * [`Dispatched`] — the token of one batch in flight, driven by [`Shootdown::poll`].
//!
//! # Protocol (step API)
//!
//! 1. **Gather.** The initiator clears PTEs, then adds each page to its batch. When the batch
//!    is full ([`FlushBatch::is_full`]) or the caller is done, it dispatches.
//! 2. **Dispatch** ([`Shootdown::dispatch`]). Targets are the mask minus the initiator. If there
//!    are none (a mask of only the initiator: Linux's `kmap_local` case), the initiator flushes
//!    locally and the batch is complete at once: no IPI, no shared write, no wait. Otherwise it
//!    takes its slot (one outstanding dispatch per initiator; a second one panics), writes the
//!    pages (or "full flush" when there are more than the ceiling) into its slot, publishes the
//!    next generation with `Release` (Linux's `tlb_gen`), sets its bit in each target's
//!    pending word, sends an IPI at once only to targets that are halted
//!    ([`TlbArch::is_halted`]) — a busy poll-mode core sees its pending word on its next loop
//!    iteration — and then flushes locally if it is in the mask (Linux's concurrent flush:
//!    remote requests first, local flush while they travel; `native_flush_tlb_multi`).
//! 3. **Wait** ([`Shootdown::poll`], called in a loop by the initiator, thread context only).
//!    Each call first services the initiator's own pending requests — so two initiators that
//!    target each other both finish — then checks the acknowledgements. Once
//!    [`Shootdown::ipi_deadline_cycles`] have passed since dispatch, it sends one IPI to each
//!    target that has neither acknowledged nor already got one. It returns `true` when every
//!    target acknowledged the generation.
//! 4. **Complete** ([`Shootdown::complete`]). Flush before free: only now does the batch hand
//!    its frames and virtual ranges back to the caller (closures), and it is empty again.
//!    (Stricter than Linux's `vfree`, which delays only the reuse of addresses.)
//!
//! The target side is [`Shootdown::service`], called from the target's poll loop once per
//! iteration (one `Relaxed` load of its own pending word when nothing is pending) and from the
//! TLB IPI handler. It takes all pending bits at once (an atomic swap to 0), and for each
//! initiator reads its slot, flushes the pages (`invlpg` each, or one full flush), then stores
//! the generation as its acknowledgement with `Release`.
//!
//! [`Shootdown::flush`] runs steps 2–4 in one call (the initiator's wait loop), for callers
//! with nothing else to do while they wait.
//!
//! # Why no request is lost or torn
//!
//! * **A pending bit is taken exactly once.** Bits are set with `fetch_or` and taken with
//!   `swap(0)`: each set bit is taken by exactly one `service` call (an IPI handler nested in
//!   the poll loop's `service` either runs before the swap and takes the bits, or after and
//!   finds none). A request posted after the swap sets the bit again and is taken by the next
//!   call; the bit is cleared *before* the slot is read, never after, so no request can be
//!   cleared unread.
//! * **The slot is stable while a target reads it.** An initiator writes its slot only while it
//!   holds its slot's `busy` flag, which it takes in `dispatch` (`Acquire`) and drops in `poll`
//!   (`Release`) only after it saw, with `Acquire`, every target's acknowledgement of the
//!   current generation; a target stores that acknowledgement (`Release`) after it finished
//!   reading the slot. A target reads the slot only after taking the initiator's bit, which was
//!   set (`Release`, after the slot write and the generation store) for that very generation;
//!   its `Acquire` swap makes the slot contents visible. So the write of generation *g + 1*
//!   happens after every read of generation *g*, and every read of *g* after its write. The
//!   loom models check this with loom's `UnsafeCell`.
//! * **The flush happens before the free.** The target's acknowledgement is stored after its
//!   flush in program order with `Release`; the initiator reads it with `Acquire` in `poll`.
//!   (On x86 `invlpg` and a CR3 write are serialising besides.) The PTE clears the initiator did
//!   before `dispatch` are published to the target by the same `Release`/`Acquire` pair on the
//!   pending word, so a target that walks the page table after its flush sees them cleared.
//! * **A halted target is never missed.** A target that is about to `hlt` must call
//!   [`Shootdown::pending_before_halt`] after it made itself visible as halted (a `SeqCst`
//!   store of the flag [`TlbArch::is_halted`] reads) and skip the `hlt` (service instead) if it
//!   returns `true`; `dispatch` issues a `SeqCst` fence between setting pending bits and asking
//!   `is_halted`. With both fences at least one side sees the other: either the target sees the
//!   bit, or the initiator sees "halted" and sends the IPI.
//!
//! # Rules for the kernel
//!
//! * `me` is always the calling CPU's index (`< N`), the same one its `TlbArch` flushes. A wrong
//!   `me` is a logic error (missed flushes), never a data race: the slot's `busy` flag and the
//!   swap keep the shared state consistent.
//! * A mask names only online CPUs that call `service` (an offline CPU would never acknowledge
//!   and the initiator would wait forever: flush before free has no timeout).
//! * `dispatch`/`poll`/`complete` run in thread context (the poll loop), never in an interrupt
//!   handler: the wait could be for the very CPU that is interrupted. `service` may run in both.
//!
//! # Ceiling
//!
//! Up to [`Shootdown::ceiling`] pages (default [`DEFAULT_FLUSH_CEILING`] = 33, Linux x86's
//! `tlb_single_page_flush_ceiling` in `arch/x86/mm/tlb.c`) are flushed one `invlpg` each; more
//! get one full flush (CR3 reload), as in Linux's `flush_tlb_mm_range`. The ceiling can be
//! lowered or raised up to [`FLUSH_CEILING_MAX`] (the slot's capacity). Measured under QEMU TCG
//! (DESIGN.md): `invlpg` ≈ 0.4 µs, CR3 reload 2.6–4.6 µs, IPI round trip p50 3–10 µs.
//!
//! # Sources
//!
//! Linux `arch/x86/mm/tlb.c`: `flush_tlb_mm_range` (ceiling, full vs per-page),
//! `native_flush_tlb_multi` (IPIs to the mask, local flush concurrently), the per-mm `tlb_gen`
//! and per-CPU flushed generation (here: per initiator generation and per (initiator, target)
//! acknowledged generation). Mel Gorman's 2015 series "TLB flush multiple pages with a single
//! IPI" (batched unmap flushes in reclaim: one IPI per batch instead of per page, interrupts
//! from about 900K/s to 60K/s; SEED-NOTES.md).
//!
//! # Model checking (loom)
//!
//! The protocol's atomics and the slot's payload cell come from the private shim `mm::sync`
//! (loom's in `--cfg loom` tests; then [`Shootdown::new`] is not `const`). The counters, the
//! ceiling, the deadline and `skip_remote_flush` are plain `core` atomics in every build: they
//! order nothing, and keeping them out of loom keeps its state space small.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/tmp/target-loom \
//!     cargo test -p mm --release --lib tlb::
//! ```
//!
//! Four models, exhaustive (no preemption bound; under a second once built): an initiator and
//! a polling target; one initiator's slot reused for two generations while the target services;
//! two initiators targeting each other, each only polling; a target that goes through the idle
//! protocol (halted flag, `pending_before_halt`, wait for an IPI) with the deadline IPI off.
//! Each CPU's model TLB is a loom `UnsafeCell` written only by its own thread's flushes and
//! read by the initiator after `poll`. Checked by hand that the models fail (loom reports a
//! causality violation or a livelock) with any of: the acknowledgement stored or loaded
//! `Relaxed`, the pending word taken `Relaxed`, the pending bits cleared after reading the slot
//! (`load` then `fetch_and`) instead of the `swap`, or the `SeqCst` fence in `dispatch`
//! removed. (The slot's `busy` flag only catches misuse — two dispatches by one CPU — which
//! the unit tests check; the models never misuse it.)
//!
//! Only this module's tests (and the other modules' loom tests, with their commands) are meant
//! to run under `--cfg loom`.

use core::sync::atomic::{
    AtomicBool as PlainBool, AtomicU64 as PlainU64, AtomicUsize as PlainUsize,
};

use crate::sync::{fence, AtomicBool, AtomicU64, CachePadded, Ordering::*, UnsafeCell};
use crate::{Pfn, PAGE_SIZE};

/// Most CPUs a [`CpuMask`] (and so a [`Shootdown`]) can name: one bit each in a `u64`.
pub const MAX_CPUS: usize = 64;

/// Capacity of a request slot in pages, and the highest ceiling [`Shootdown::set_ceiling`]
/// accepts. A batch of more pages is always a full flush.
pub const FLUSH_CEILING_MAX: usize = 64;

/// Default ceiling (pages): batches of up to 33 pages are flushed page by page, larger ones with
/// one full flush. Linux x86's `tlb_single_page_flush_ceiling` (arch/x86/mm/tlb.c).
pub const DEFAULT_FLUSH_CEILING: usize = 33;

/// Default IPI deadline in cycles ([`TlbArch::cycles`]): how long an initiator lets a busy
/// poll-mode target find its request by polling before it sends the IPI. 100,000 cycles is
/// about 33 µs at 3 GHz, several poll-loop iterations of a loaded core and well above the IPI
/// round trip measured under TCG (p50 3–10 µs). A starting value, to be tuned from the counters.
pub const DEFAULT_IPI_DEADLINE_CYCLES: u64 = 100_000;

/// Capacity of a [`FlushBatch`]'s list of virtual ranges to release.
pub const BATCH_RANGES: usize = 16;

/// A set of CPUs: bit *i* is CPU *i* (`0..MAX_CPUS`).
///
/// Methods taking a CPU index panic if it is `>= MAX_CPUS`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct CpuMask(pub u64);

impl CpuMask {
    /// No CPU.
    pub const EMPTY: CpuMask = CpuMask(0);

    /// CPUs `0..n` (`n <= MAX_CPUS`).
    ///
    /// # Panics
    ///
    /// If `n > MAX_CPUS`.
    pub const fn first(n: usize) -> CpuMask {
        assert!(n <= MAX_CPUS, "CpuMask: more than 64 CPUs");
        if n == MAX_CPUS {
            CpuMask(u64::MAX)
        } else {
            CpuMask((1u64 << n) - 1)
        }
    }

    /// Only `cpu`.
    pub const fn only(cpu: usize) -> CpuMask {
        assert!(cpu < MAX_CPUS, "CpuMask: CPU index >= 64");
        CpuMask(1 << cpu)
    }

    /// Add `cpu`.
    pub fn set(&mut self, cpu: usize) {
        self.0 |= Self::only(cpu).0;
    }

    /// Remove `cpu` (no-op if absent).
    pub fn remove(&mut self, cpu: usize) {
        self.0 &= !Self::only(cpu).0;
    }

    /// `true` if `cpu` is in the set.
    pub const fn contains(self, cpu: usize) -> bool {
        self.0 & Self::only(cpu).0 != 0
    }

    /// `true` if the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Number of CPUs in the set.
    pub const fn count(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Both sets together.
    pub const fn union(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 | other.0)
    }

    /// CPUs in both sets.
    pub const fn intersection(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 & other.0)
    }

    /// The CPUs in the set, lowest first.
    pub fn iter(self) -> CpuMaskIter {
        CpuMaskIter(self.0)
    }
}

/// Iterator over a [`CpuMask`], lowest CPU first ([`CpuMask::iter`]).
#[derive(Clone, Debug)]
pub struct CpuMaskIter(u64);

impl Iterator for CpuMaskIter {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let cpu = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(cpu)
    }
}

/// The arch operations the protocol needs, supplied by the kernel (and by the test models).
/// Every method acts on, or asks about, the CPU it is called on unless it names one.
pub trait TlbArch {
    /// Invalidate this CPU's TLB entry for the page containing `vaddr` (bytes): `invlpg`.
    fn flush_page(&self, vaddr: u64);
    /// Invalidate this CPU's whole (non-global) TLB: a CR3 reload.
    fn flush_all(&self);
    /// Send the TLB shootdown IPI to `cpu`; its handler calls [`Shootdown::service`].
    fn send_ipi(&self, cpu: usize);
    /// `true` if `cpu` is in (or committed to) `hlt`, so it will not poll until woken: it gets
    /// its IPI at dispatch. The flag read here must be stored with `SeqCst` by the halting CPU
    /// before it calls [`Shootdown::pending_before_halt`] (module docs).
    fn is_halted(&self, cpu: usize) -> bool;
    /// A monotonic cycle counter (the TSC): wait times and the IPI deadline, in cycles.
    fn cycles(&self) -> u64;
}

/// Counters of one CPU, a snapshot from [`Shootdown::stats`]. All are totals since boot except
/// `pending_pages`, a gauge.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct TlbStats {
    /// Virtual pages in the batches this CPU dispatched.
    pub pages_unmapped: u64,
    /// Batches this CPU dispatched (local-only ones included).
    pub batches: u64,
    /// TLB IPIs this CPU sent (to halted targets at dispatch, and past the deadline).
    pub ipis_sent: u64,
    /// Requests this CPU posted in other CPUs' pending words (one per target per batch).
    pub poll_requests: u64,
    /// Requests from other CPUs this CPU serviced.
    pub flushes_received: u64,
    /// Pages this CPU invalidated one by one (`invlpg`), its own batches and serviced ones.
    pub invlpg_pages: u64,
    /// Full flushes (CR3 reloads) this CPU did, its own batches and serviced ones.
    pub full_flushes: u64,
    /// Cycles this CPU's dispatched batches waited from dispatch until the last acknowledgement
    /// (measured by `poll`; local-only batches wait 0).
    pub wait_cycles: u64,
    /// Page frames in this CPU's dispatched batches that are not completed yet (gauge). Frames
    /// still gathering in a [`FlushBatch`] are in [`FlushBatch::frames`].
    pub pending_pages: u64,
}

/// The counters' storage: plain `core` atomics (not loom's, see the module docs), bumped with
/// `Relaxed` `fetch_add` because a CPU's IPI handler may interrupt its own poll loop mid-update.
#[derive(Default)]
struct StatCells {
    pages_unmapped: PlainU64,
    batches: PlainU64,
    ipis_sent: PlainU64,
    poll_requests: PlainU64,
    flushes_received: PlainU64,
    invlpg_pages: PlainU64,
    full_flushes: PlainU64,
    wait_cycles: PlainU64,
    pending_pages: PlainU64,
}

impl StatCells {
    const fn new() -> StatCells {
        StatCells {
            pages_unmapped: PlainU64::new(0),
            batches: PlainU64::new(0),
            ipis_sent: PlainU64::new(0),
            poll_requests: PlainU64::new(0),
            flushes_received: PlainU64::new(0),
            invlpg_pages: PlainU64::new(0),
            full_flushes: PlainU64::new(0),
            wait_cycles: PlainU64::new(0),
            pending_pages: PlainU64::new(0),
        }
    }
}

#[inline]
fn bump(c: &PlainU64, n: u64) {
    c.fetch_add(n, core::sync::atomic::Ordering::Relaxed);
}

/// What a request asks its targets to flush.
struct Payload {
    /// More pages than the ceiling: one full flush, `pages` unused.
    full: bool,
    /// Valid entries of `pages` when not `full` (`<= FLUSH_CEILING_MAX`).
    npages: usize,
    /// Virtual addresses (bytes) of the pages to `invlpg`.
    pages: [u64; FLUSH_CEILING_MAX],
}

/// One CPU's request as initiator.
struct Request<const N: usize> {
    /// Held from dispatch until every target acknowledged (module docs): only its holder writes
    /// `payload` and `gen`.
    busy: AtomicBool,
    /// Generation of the latest request (0: none yet). Stored with `Release` after `payload`.
    gen: AtomicU64,
    payload: UnsafeCell<Payload>,
    /// `acks[j]`: the latest generation target `j` finished flushing (written by `j`).
    acks: CachePadded<[AtomicU64; N]>,
}

/// Everything about one CPU, its target side and its initiator side on separate lines.
struct PerCpu<const N: usize> {
    /// Bit `i`: initiator `i` has a request for this CPU not yet taken.
    pending: CachePadded<AtomicU64>,
    req: CachePadded<Request<N>>,
    stats: CachePadded<StatCells>,
}

impl<const N: usize> PerCpu<N> {
    #[cfg(not(all(test, loom)))]
    const fn new() -> Self {
        PerCpu {
            pending: CachePadded(AtomicU64::new(0)),
            req: CachePadded(Request {
                busy: AtomicBool::new(false),
                gen: AtomicU64::new(0),
                payload: UnsafeCell::new(Payload {
                    full: false,
                    npages: 0,
                    pages: [0; FLUSH_CEILING_MAX],
                }),
                acks: CachePadded([const { AtomicU64::new(0) }; N]),
            }),
            stats: CachePadded(StatCells::new()),
        }
    }

    #[cfg(all(test, loom))]
    fn new() -> Self {
        PerCpu {
            pending: CachePadded(AtomicU64::new(0)),
            req: CachePadded(Request {
                busy: AtomicBool::new(false),
                gen: AtomicU64::new(0),
                payload: UnsafeCell::new(Payload {
                    full: false,
                    npages: 0,
                    pages: [0; FLUSH_CEILING_MAX],
                }),
                acks: CachePadded(core::array::from_fn(|_| AtomicU64::new(0))),
            }),
            stats: CachePadded(StatCells::new()),
        }
    }
}

/// The shared shootdown state for `N` CPUs (`1..=MAX_CPUS`): one per system, a `static` in the
/// kernel (`static TLB: Shootdown<MAX_CPUS> = Shootdown::new(DEFAULT_FLUSH_CEILING);`). See the
/// module docs for the protocol and the rules.
///
/// Size: `N * (768 + 64 * ceil(8N / 64)) + 64` bytes (6,720 for `N = 8`, 81,984 for `N = 64`).
pub struct Shootdown<const N: usize> {
    cpus: [PerCpu<N>; N],
    ceiling: PlainUsize,
    ipi_deadline: PlainU64,
    /// **Test only** (the kernel's torture test, the models' negative controls): when `true`,
    /// [`Shootdown::service`] acknowledges requests without flushing, so stale TLB entries
    /// survive the shootdown and a use-after-free must become observable. Never set it
    /// otherwise. `Relaxed` is enough: it orders nothing.
    pub skip_remote_flush: PlainBool,
}

// SAFETY: everything in a `Shootdown` is atomic except each slot's `payload` cell. A payload is
// written only by the holder of its slot's `busy` flag and read only by targets between taking
// a pending bit for the current generation and acknowledging it; the `busy` flag is dropped only
// after every acknowledgement was seen (module docs, "Why no request is lost or torn"), so a
// write never overlaps a read and every read follows its write.
unsafe impl<const N: usize> Sync for Shootdown<N> {}

/// One batch in flight, from [`Shootdown::dispatch`] to [`Shootdown::complete`]. Not `Clone`:
/// dropping it without completing leaves the initiator's slot taken (its next remote dispatch
/// panics) and the batch in flight — never a premature free.
#[must_use = "poll it until it returns true, then complete the batch"]
#[derive(Debug)]
pub struct Dispatched {
    /// The initiator.
    cpu: usize,
    /// The request's generation (0 for a local-only batch).
    gen: u64,
    /// Targets that have not acknowledged yet.
    waiting: CpuMask,
    /// Targets that have not been sent an IPI yet.
    not_sent: CpuMask,
    /// `cycles()` at dispatch.
    start: u64,
    deadline_passed: bool,
    done: bool,
}

impl Dispatched {
    /// `true` once every target acknowledged (at once for a local-only batch).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Targets that have not acknowledged yet.
    pub fn waiting(&self) -> CpuMask {
        self.waiting
    }

    /// The request's generation (0 for a batch that needed no remote flush).
    pub fn generation(&self) -> u64 {
        self.gen
    }
}

impl<const N: usize> Shootdown<N> {
    const CHECK_N: () = assert!(N >= 1 && N <= MAX_CPUS, "Shootdown: 1..=64 CPUs");

    /// Nothing pending, no requests yet; batches of up to `ceiling` pages are flushed page by
    /// page ([`DEFAULT_FLUSH_CEILING`] is Linux's 33). IPI deadline
    /// [`DEFAULT_IPI_DEADLINE_CYCLES`].
    ///
    /// # Panics
    ///
    /// If `ceiling > FLUSH_CEILING_MAX` (at compile time for a `static`); at compile time if `N`
    /// is not `1..=MAX_CPUS`.
    #[cfg(not(all(test, loom)))]
    pub const fn new(ceiling: usize) -> Self {
        let () = Self::CHECK_N;
        assert!(
            ceiling <= FLUSH_CEILING_MAX,
            "tlb ceiling > FLUSH_CEILING_MAX"
        );
        Shootdown {
            cpus: [const { PerCpu::new() }; N],
            ceiling: PlainUsize::new(ceiling),
            ipi_deadline: PlainU64::new(DEFAULT_IPI_DEADLINE_CYCLES),
            skip_remote_flush: PlainBool::new(false),
        }
    }

    /// Nothing pending (loom build: not `const`).
    #[cfg(all(test, loom))]
    pub fn new(ceiling: usize) -> Self {
        let () = Self::CHECK_N;
        assert!(
            ceiling <= FLUSH_CEILING_MAX,
            "tlb ceiling > FLUSH_CEILING_MAX"
        );
        Shootdown {
            cpus: core::array::from_fn(|_| PerCpu::new()),
            ceiling: PlainUsize::new(ceiling),
            ipi_deadline: PlainU64::new(DEFAULT_IPI_DEADLINE_CYCLES),
            skip_remote_flush: PlainBool::new(false),
        }
    }

    /// The ceiling in pages: a batch of more pages is one full flush.
    pub fn ceiling(&self) -> usize {
        self.ceiling.load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Set the ceiling (pages; boot configuration, e.g. a `tlb_ceiling=` key). Applies to
    /// batches dispatched afterwards; 0 makes every non-empty batch a full flush.
    ///
    /// # Panics
    ///
    /// If `pages > FLUSH_CEILING_MAX`.
    pub fn set_ceiling(&self, pages: usize) {
        assert!(
            pages <= FLUSH_CEILING_MAX,
            "tlb ceiling > FLUSH_CEILING_MAX"
        );
        self.ceiling
            .store(pages, core::sync::atomic::Ordering::Relaxed);
    }

    /// Cycles after dispatch at which `poll` sends an IPI to targets that have not answered.
    pub fn ipi_deadline_cycles(&self) -> u64 {
        self.ipi_deadline
            .load(core::sync::atomic::Ordering::Relaxed)
    }

    /// Set the IPI deadline (cycles). 0 sends the IPIs on the first `poll`; `u64::MAX` never
    /// (only for cores that are known to poll).
    pub fn set_ipi_deadline_cycles(&self, cycles: u64) {
        self.ipi_deadline
            .store(cycles, core::sync::atomic::Ordering::Relaxed);
    }

    /// A snapshot of `cpu`'s counters (any CPU may read them; each counter is read on its own).
    ///
    /// # Panics
    ///
    /// If `cpu >= N`.
    pub fn stats(&self, cpu: usize) -> TlbStats {
        let s = &self.cpus[cpu].stats.0;
        let r = |c: &PlainU64| c.load(core::sync::atomic::Ordering::Relaxed);
        TlbStats {
            pages_unmapped: r(&s.pages_unmapped),
            batches: r(&s.batches),
            ipis_sent: r(&s.ipis_sent),
            poll_requests: r(&s.poll_requests),
            flushes_received: r(&s.flushes_received),
            invlpg_pages: r(&s.invlpg_pages),
            full_flushes: r(&s.full_flushes),
            wait_cycles: r(&s.wait_cycles),
            pending_pages: r(&s.pending_pages),
        }
    }

    /// `true` if some initiator has a request for `cpu` that `cpu` has not taken yet (a
    /// `Relaxed` snapshot).
    ///
    /// # Panics
    ///
    /// If `cpu >= N`.
    #[inline]
    pub fn has_pending(&self, cpu: usize) -> bool {
        self.cpus[cpu].pending.0.load(Relaxed) != 0
    }

    /// The check a CPU makes right before `hlt`, after it stored its "halted" flag (the one
    /// [`TlbArch::is_halted`] reads) with `SeqCst`: a `SeqCst` fence, then [`has_pending`]. If
    /// it returns `true`, the CPU must not halt: it clears its flag and calls [`service`]. Pairs
    /// with the fence in [`dispatch`] (module docs, "A halted target is never missed").
    ///
    /// [`has_pending`]: Shootdown::has_pending
    /// [`service`]: Shootdown::service
    /// [`dispatch`]: Shootdown::dispatch
    ///
    /// # Panics
    ///
    /// If `me >= N`.
    #[inline]
    pub fn pending_before_halt(&self, me: usize) -> bool {
        fence(SeqCst);
        self.has_pending(me)
    }

    /// Flush on this CPU: `pages` one by one, or everything.
    fn flush_here<A: TlbArch + ?Sized>(&self, me: usize, full: bool, pages: &[u64], arch: &A) {
        let s = &self.cpus[me].stats.0;
        if full {
            arch.flush_all();
            bump(&s.full_flushes, 1);
        } else {
            for &va in pages {
                arch.flush_page(va);
            }
            bump(&s.invlpg_pages, pages.len() as u64);
        }
    }

    /// Step 2: publish `batch` as CPU `me`'s request, post it to the targets (the batch's mask
    /// minus `me`), IPI the halted ones, and flush locally if `me` is in the mask. Returns the
    /// token to [`poll`](Shootdown::poll); for a batch with no remote target it is done already
    /// (no shared state touched, no IPI).
    ///
    /// The batch is in flight until [`complete`](Shootdown::complete): no pages or frames may
    /// be added to it meanwhile. Thread context only.
    ///
    /// # Panics
    ///
    /// If `me >= N`, if the mask names a CPU `>= N`, if `batch` is already in flight, or if `me`
    /// has another batch with remote targets in flight (one outstanding dispatch per initiator).
    pub fn dispatch<const P: usize, A: TlbArch + ?Sized>(
        &self,
        me: usize,
        batch: &mut FlushBatch<P>,
        arch: &A,
    ) -> Dispatched {
        assert!(me < N, "tlb: CPU index >= N");
        assert!(!batch.in_flight, "tlb: batch dispatched twice");
        let mask = batch.mask;
        assert!(
            mask.intersection(CpuMask::first(N)) == mask,
            "tlb: mask names a CPU >= N"
        );
        let full = batch.npages > self.ceiling();
        let stored = batch.npages.min(FLUSH_CEILING_MAX);
        let s = &self.cpus[me].stats.0;
        bump(&s.batches, 1);
        bump(&s.pages_unmapped, batch.npages as u64);
        bump(&s.pending_pages, batch.nframes as u64);
        batch.in_flight = true;

        let mut targets = mask;
        targets.remove(me);
        let mut d = Dispatched {
            cpu: me,
            gen: 0,
            waiting: targets,
            not_sent: targets,
            start: 0,
            deadline_passed: false,
            done: targets.is_empty(),
        };
        if !targets.is_empty() {
            d.start = arch.cycles();
            let req = &self.cpus[me].req.0;
            if req
                .busy
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_err()
            {
                panic!("tlb: CPU {me} dispatched while its previous batch is in flight");
            }
            // Only the `busy` holder writes `gen`.
            let gen = req.gen.load(Relaxed) + 1;
            req.payload.with_mut(|p| {
                // SAFETY: we hold `busy`, taken with `Acquire` after the previous holder saw
                // every acknowledgement of the previous generation (`Acquire`), each stored
                // after its target's last read of this payload; no target reads it again
                // before it takes a pending bit we set below. So no access overlaps this one.
                let p = unsafe { &mut *p };
                p.full = full;
                p.npages = if full { 0 } else { stored };
                if !full {
                    p.pages[..stored].copy_from_slice(&batch.pages[..stored]);
                }
            });
            req.gen.store(gen, Release);
            for t in targets.iter() {
                self.cpus[t].pending.0.fetch_or(1 << me, Release);
            }
            bump(&s.poll_requests, targets.count() as u64);
            // Pairs with the halting CPU's fence in `pending_before_halt`.
            fence(SeqCst);
            for t in targets.iter() {
                if arch.is_halted(t) {
                    arch.send_ipi(t);
                    d.not_sent.remove(t);
                    bump(&s.ipis_sent, 1);
                }
            }
            d.gen = gen;
        }
        if mask.contains(me) {
            self.flush_here(
                me,
                full,
                &batch.pages[..if full { 0 } else { stored }],
                arch,
            );
        }
        d
    }

    /// Step 3: one check of a dispatched batch by its initiator `me` (call it in a loop, doing
    /// other thread-context work in between if there is any). Services `me`'s own pending
    /// requests first, so initiators that wait for each other all finish; past the deadline
    /// sends one IPI to each target that has neither answered nor had one. Returns `true` when
    /// every target acknowledged (then, and only then, [`complete`](Shootdown::complete)).
    ///
    /// # Panics
    ///
    /// If `d` was dispatched by another CPU than `me`, or `me >= N`.
    pub fn poll<A: TlbArch + ?Sized>(&self, me: usize, d: &mut Dispatched, arch: &A) -> bool {
        assert_eq!(d.cpu, me, "tlb: polled by another CPU than the initiator");
        if d.done {
            return true;
        }
        self.service(me, arch);
        let req = &self.cpus[me].req.0;
        for t in d.waiting.iter() {
            if req.acks.0[t].load(Acquire) >= d.gen {
                d.waiting.remove(t);
            }
        }
        let now = arch.cycles();
        let s = &self.cpus[me].stats.0;
        if d.waiting.is_empty() {
            d.done = true;
            bump(&s.wait_cycles, now.saturating_sub(d.start));
            // Every target has finished reading the payload (the `Acquire` loads above).
            req.busy.store(false, Release);
            return true;
        }
        if !d.deadline_passed && now.wrapping_sub(d.start) >= self.ipi_deadline_cycles() {
            d.deadline_passed = true;
            for t in d.waiting.intersection(d.not_sent).iter() {
                arch.send_ipi(t);
                bump(&s.ipis_sent, 1);
            }
            d.not_sent = CpuMask::EMPTY;
        }
        false
    }

    /// Step 4: hand back a batch whose dispatch `d` is done: each frame to `free` (in the order
    /// added), each virtual range to `release(vaddr, npages)`; the batch is empty and can gather
    /// again. Flush before free: this is the only way frames leave a batch.
    ///
    /// # Panics
    ///
    /// If `d` is not done ([`poll`](Shootdown::poll) has not returned `true`), was dispatched by
    /// another CPU than `me`, or `batch` is not in flight.
    pub fn complete<const P: usize>(
        &self,
        me: usize,
        d: Dispatched,
        batch: &mut FlushBatch<P>,
        mut free: impl FnMut(Pfn),
        mut release: impl FnMut(u64, usize),
    ) {
        Self::check_done(me, &d, batch);
        for &f in &batch.frames[..batch.nframes] {
            free(f);
        }
        for &(va, n) in &batch.ranges[..batch.nranges] {
            release(va, n);
        }
        self.cpus[me]
            .stats
            .0
            .pending_pages
            .fetch_sub(batch.nframes as u64, core::sync::atomic::Ordering::Relaxed);
        batch.clear();
    }

    /// The checks of step 4 (see [`complete`](Shootdown::complete)'s panics).
    fn check_done<const P: usize>(me: usize, d: &Dispatched, batch: &FlushBatch<P>) {
        assert!(d.done, "tlb: complete before every target acknowledged");
        assert_eq!(
            d.cpu, me,
            "tlb: completed by another CPU than the initiator"
        );
        assert!(
            batch.in_flight,
            "tlb: completing a batch that was not dispatched"
        );
    }

    /// Step 4 in bounded pieces, for an initiator that must not stop for long (the boot CPU
    /// retiring a 14,000-frame FIB between poll iterations): hand at most `max` of the frames
    /// of a batch whose dispatch `d` is done to `free`, the last added first. Returns how many
    /// the batch still holds; once that is 0, [`complete`](Shootdown::complete) releases the
    /// virtual ranges and empties the batch. Flush before free holds as for `complete`.
    ///
    /// # Panics
    ///
    /// As [`complete`](Shootdown::complete).
    pub fn complete_some<const P: usize>(
        &self,
        me: usize,
        d: &Dispatched,
        batch: &mut FlushBatch<P>,
        max: usize,
        mut free: impl FnMut(Pfn),
    ) -> usize {
        Self::check_done(me, d, batch);
        let n = max.min(batch.nframes);
        for _ in 0..n {
            batch.nframes -= 1;
            free(batch.frames[batch.nframes]);
        }
        self.cpus[me]
            .stats
            .0
            .pending_pages
            .fetch_sub(n as u64, core::sync::atomic::Ordering::Relaxed);
        batch.nframes
    }

    /// Steps 2–4 in one call: dispatch, poll until done (spinning), complete. For an initiator
    /// with nothing else to do while it waits. Thread context only.
    ///
    /// # Panics
    ///
    /// As [`dispatch`](Shootdown::dispatch).
    pub fn flush<const P: usize, A: TlbArch + ?Sized>(
        &self,
        me: usize,
        batch: &mut FlushBatch<P>,
        arch: &A,
        free: impl FnMut(Pfn),
        release: impl FnMut(u64, usize),
    ) {
        let mut d = self.dispatch(me, batch, arch);
        while !self.poll(me, &mut d, arch) {
            #[cfg(all(test, loom))]
            loom::thread::yield_now();
            #[cfg(not(all(test, loom)))]
            core::hint::spin_loop();
        }
        self.complete(me, d, batch, free, release);
    }

    /// The target side, on CPU `me`: from its poll loop once per iteration, and from the TLB
    /// IPI handler. When nothing is pending this is one `Relaxed` load of `me`'s own pending
    /// word. Otherwise it takes every pending request, flushes what each asks (pages or full),
    /// and acknowledges each. Returns the number of requests serviced.
    ///
    /// # Panics
    ///
    /// If `me >= N`.
    #[inline]
    pub fn service<A: TlbArch + ?Sized>(&self, me: usize, arch: &A) -> usize {
        if self.cpus[me].pending.0.load(Relaxed) == 0 {
            return 0;
        }
        self.service_slow(me, arch)
    }

    #[inline(never)]
    fn service_slow<A: TlbArch + ?Sized>(&self, me: usize, arch: &A) -> usize {
        // Take the bits before reading any slot (module docs): a request posted after this swap
        // sets its bit again and is taken by the next call.
        let bits = CpuMask(self.cpus[me].pending.0.swap(0, Acquire));
        let skip = self
            .skip_remote_flush
            .load(core::sync::atomic::Ordering::Relaxed);
        for i in bits.iter() {
            let req = &self.cpus[i].req.0;
            let gen = req.gen.load(Acquire);
            if !skip {
                req.payload.with(|p| {
                    // SAFETY: we took initiator `i`'s bit, set for generation `gen` after its
                    // payload was written (the `Acquire` swap saw its `Release`); `i` keeps
                    // `busy` and writes nothing until it sees our acknowledgement below.
                    let p = unsafe { &*p };
                    self.flush_here(me, p.full, &p.pages[..p.npages], arch);
                });
            }
            req.acks.0[me].store(gen, Release);
        }
        bump(&self.cpus[me].stats.0.flushes_received, bits.count() as u64);
        bits.count()
    }
}

/// Why an item did not fit in a [`FlushBatch`]: dispatch and complete it, then add again.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct BatchFull;

/// One initiating core's batch: unmapped pages and the CPUs that may cache them, frames to free
/// and virtual ranges to release after the flush. Owned by its core (`&mut`), typically in the
/// per-CPU area; `const fn new`, `8 * P + 808` bytes (2,856 for `P = 256`).
///
/// `P` is the frame capacity (e.g. 256: a page's worth of entries cut interrupts the most in the
/// 2015 measurements). Pages are not limited: past [`FLUSH_CEILING_MAX`] only their count is kept
/// (the batch becomes a full flush).
#[derive(Debug)]
pub struct FlushBatch<const P: usize> {
    pages: [u64; FLUSH_CEILING_MAX],
    /// Pages added (may exceed `FLUSH_CEILING_MAX`; only the first that many are stored).
    npages: usize,
    mask: CpuMask,
    frames: [Pfn; P],
    nframes: usize,
    ranges: [(u64, usize); BATCH_RANGES],
    nranges: usize,
    in_flight: bool,
}

impl<const P: usize> Default for FlushBatch<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const P: usize> FlushBatch<P> {
    /// An empty batch.
    pub const fn new() -> Self {
        FlushBatch {
            pages: [0; FLUSH_CEILING_MAX],
            npages: 0,
            mask: CpuMask::EMPTY,
            frames: [Pfn(0); P],
            nframes: 0,
            ranges: [(0, 0); BATCH_RANGES],
            nranges: 0,
            in_flight: false,
        }
    }

    fn not_in_flight(&self) {
        assert!(!self.in_flight, "tlb: adding to a batch in flight");
    }

    /// The page at `vaddr` (bytes, any address inside the page) was unmapped (its PTE already
    /// cleared) and may be cached by the CPUs in `mask`. Never fails.
    ///
    /// # Panics
    ///
    /// If the batch is in flight.
    pub fn add_page(&mut self, vaddr: u64, mask: CpuMask) {
        self.not_in_flight();
        if self.npages < FLUSH_CEILING_MAX {
            self.pages[self.npages] = vaddr;
        }
        self.npages += 1;
        self.mask = self.mask.union(mask);
    }

    /// `npages` consecutive pages from `vaddr` (bytes) were unmapped; as [`add_page`] for each.
    ///
    /// [`add_page`]: FlushBatch::add_page
    ///
    /// # Panics
    ///
    /// If the batch is in flight.
    pub fn add_pages(&mut self, vaddr: u64, npages: usize, mask: CpuMask) {
        self.not_in_flight();
        let room = FLUSH_CEILING_MAX.saturating_sub(self.npages).min(npages);
        for i in 0..room {
            self.pages[self.npages + i] = vaddr + (i * PAGE_SIZE) as u64;
        }
        self.npages += npages;
        if npages > 0 {
            self.mask = self.mask.union(mask);
        }
    }

    /// Frame `pfn` may be freed once the batch's flush completed. `Err(BatchFull)` if the batch
    /// holds `P` frames already (the frame is not added).
    ///
    /// # Panics
    ///
    /// If the batch is in flight.
    pub fn add_free(&mut self, pfn: Pfn) -> Result<(), BatchFull> {
        self.not_in_flight();
        if self.nframes == P {
            return Err(BatchFull);
        }
        self.frames[self.nframes] = pfn;
        self.nframes += 1;
        Ok(())
    }

    /// The virtual range of `npages` pages from `vaddr` (bytes) may be given back to the
    /// caller's VA allocator once the flush completed. `Err(BatchFull)` if the batch holds
    /// [`BATCH_RANGES`] ranges already.
    ///
    /// # Panics
    ///
    /// If the batch is in flight.
    pub fn add_va_range(&mut self, vaddr: u64, npages: usize) -> Result<(), BatchFull> {
        self.not_in_flight();
        if self.nranges == BATCH_RANGES {
            return Err(BatchFull);
        }
        self.ranges[self.nranges] = (vaddr, npages);
        self.nranges += 1;
        Ok(())
    }

    /// `true` if no more frames or no more ranges fit: time to dispatch.
    pub fn is_full(&self) -> bool {
        self.nframes == P || self.nranges == BATCH_RANGES
    }

    /// `true` if the batch holds no page, frame or range.
    pub fn is_empty(&self) -> bool {
        self.npages == 0 && self.nframes == 0 && self.nranges == 0
    }

    /// `true` between dispatch and complete.
    pub fn is_in_flight(&self) -> bool {
        self.in_flight
    }

    /// Pages added (the count, which may exceed [`FLUSH_CEILING_MAX`]).
    pub fn pages(&self) -> usize {
        self.npages
    }

    /// The union of the masks of the pages added.
    pub fn mask(&self) -> CpuMask {
        self.mask
    }

    /// Frames waiting for the flush, in the order added.
    pub fn frames(&self) -> &[Pfn] {
        &self.frames[..self.nframes]
    }

    /// Virtual ranges `(vaddr, npages)` waiting for the flush, in the order added.
    pub fn va_ranges(&self) -> &[(u64, usize)] {
        &self.ranges[..self.nranges]
    }

    fn clear(&mut self) {
        self.npages = 0;
        self.mask = CpuMask::EMPTY;
        self.nframes = 0;
        self.nranges = 0;
        self.in_flight = false;
    }
}

#[cfg(test)]
mod tests;
