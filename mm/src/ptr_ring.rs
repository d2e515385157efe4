//! [`MpscRing`]: a bounded, lock-free, multi-producer single-consumer ring of small `Copy`
//! values (Dmitry Vyukov's bounded queue). It knows nothing about pages or pools: it carries a
//! page number for the page_pool's remote recycle ring
//! ([`RecycleRing`](crate::page_pool::RecycleRing), built on it), a neighbour update for the
//! router's cross-core sync (`netstack::router::NeighRing`), or a hand-off record (page, length,
//! port) from one core to another — any `T: Copy` (see [Records](#records)).
//!
//! Any number of producers (any CPU, any context that may spin briefly) push; one consumer
//! (the core that owns the ring) pops. A second consumer is a logic error only — it can take
//! values in a different order than expected, never tear one or race a producer — because the
//! consumer also claims what it takes with a compare-and-swap (see below); with one consumer
//! that compare-and-swap never fails.
//!
//! # Protocol
//!
//! A fixed array of `N` slots (a power of two, at least 2), each a sequence number plus room
//! for one `T`. Positions grow without bound (wrapping `usize`); position `p` lives in slot
//! `p % N`.
//!
//! * Slot state: `seq == p` means "free for position `p`"; `seq == p + 1` means "holds the
//!   value pushed at position `p`". The consumer, after reading the value at `p`, sets
//!   `seq = p + N` (free for the next lap).
//! * Producers claim positions at `tail` with one compare-and-swap, after checking (`Acquire`)
//!   that the slots are free for them — one position for [`MpscRing::push`], up to `k` for
//!   [`MpscRing::push_bulk`] — then write each value and publish it with a `Release` store of
//!   `seq = p + 1`. A slot that still holds the value from the previous lap means the ring is
//!   full: that is reported to the caller, which keeps the value ([`MpscRing::push`] returns
//!   it in `Err`).
//! * The consumer checks (`Acquire`) that the slots at `head` are published for this lap,
//!   claims them with one compare-and-swap of `head`, reads each value and frees its slot
//!   with a `Release` store of `seq = p + N`. A position claimed but not yet published stops
//!   a drain; its value comes out on a later call (and the values behind it with it).
//!
//! # Safety of the slot protocol
//!
//! The payload sits in an `UnsafeCell<MaybeUninit<T>>` per slot; everything unsafe in this
//! module rests on one argument:
//!
//! 1. **One writer or one reader at a time per slot, never both.** A producer writes slot `s`
//!    for position `p` only after its compare-and-swap moved `tail` from `≤ p` past `p`, which
//!    succeeds for exactly one producer per position; and only after it saw `seq == p`, which
//!    the consumer stores (with `Release`) after it finished reading the slot's previous value
//!    (position `p - N`). The producer's `Acquire` load of that `seq` makes the read happen
//!    before the write. Likewise the consumer reads the slot for `p` only after its
//!    compare-and-swap moved `head` past `p` (exactly one consumer per position) and after it
//!    saw `seq == p + 1`, stored with `Release` by the producer after its write: the write
//!    happens before the read.
//! 2. **Reads see initialised values.** `seq == p + 1` is stored only after the value for `p`
//!    was written, and the consumer reads only then.
//! 3. **Nothing is dropped or leaked unsafely.** `T: Copy`, so a value has no destructor: reading
//!    it copies it, and values still in the ring when it is dropped need no clean-up.
//!
//! The compare-and-swaps themselves can be `Relaxed` on the producer side (the `seq` pairs
//! carry all the synchronisation); the consumer's is `Release` so that [`MpscRing::len`],
//! reading `head` (`Acquire`) then `tail`, never sees `tail` behind `head`.
//!
//! # Records
//!
//! Any small `T: Copy` works; the slot is `T` plus a `usize`. A cross-core hand-off of frames
//! is a ring of records rather than of bare page numbers, so that the length and port travel
//! with the page instead of being written into it:
//!
//! ```
//! use mm::ptr_ring::MpscRing;
//! use mm::Pfn;
//!
//! /// A frame handed to another core: its page, length and the output port there.
//! #[derive(Copy, Clone, Debug, PartialEq, Eq)]
//! struct Handoff {
//!     pfn: Pfn,
//!     len: u16,
//!     port: u8,
//! }
//!
//! /// Frames for core 1 (a real kernel has one per core: `[const { MpscRing::new() }; CPUS]`).
//! static TO_CORE1: MpscRing<Handoff, 256> = MpscRing::new();
//!
//! // Any core: hand a frame over; on `Err` the caller still owns the page (recycle it).
//! let h = Handoff { pfn: Pfn(42), len: 60, port: 1 };
//! assert_eq!(TO_CORE1.push(h), Ok(()));
//!
//! // Core 1, in its poll loop: take up to 32 at once, oldest first.
//! let mut got = [Handoff { pfn: Pfn(0), len: 0, port: 0 }; 32];
//! let n = TO_CORE1.pop_batch(&mut got);
//! assert_eq!(&got[..n], &[h]);
//! assert!(TO_CORE1.is_empty());
//! ```
//!
//! # Model checking (loom)
//!
//! The atomics and the slot cells come from the private shim `mm::sync`: `core`'s normally,
//! loom's when the crate's tests are built with `--cfg loom` (then [`MpscRing::new`] is not
//! `const`). loom's `UnsafeCell` checks point 1 above on every slot access. The models here
//! race producers (single and bulk pushes, full rings, slots reused across laps) against the
//! consumer, and two consumers against each other; `page_pool::recycle` has the page-level
//! model on top:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/tmp/target-loom \
//!     cargo test -p mm --release --lib -- ptr_ring:: page_pool::recycle::
//! ```
//!
//! Only these ring tests (and `drain::`'s, run with their own command) are meant to run under
//! `--cfg loom`: the other tests would use loom atomics outside a model, which panics.

use core::mem::MaybeUninit;

use crate::sync::{AtomicUsize, CachePadded, Ordering::*, UnsafeCell};

/// One slot: the sequence number says whose turn it is (module docs), `val` is the payload.
struct Slot<T> {
    seq: AtomicUsize,
    val: UnsafeCell<MaybeUninit<T>>,
}

impl<T: Copy> Slot<T> {
    #[cfg(not(all(test, loom)))]
    const fn new(seq: usize) -> Slot<T> {
        Slot {
            seq: AtomicUsize::new(seq),
            val: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
    #[cfg(all(test, loom))]
    fn new(seq: usize) -> Slot<T> {
        Slot {
            seq: AtomicUsize::new(seq),
            val: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// A bounded, lock-free ring of `N` values of `T` (`N` a power of two, `>= 2`): any number of
/// producers, one consumer. See the module docs for the protocol, and
/// [Records](crate::ptr_ring#records) for carrying more than a page number.
///
/// Shared by reference between cores, typically as a `static` (`new` is `const`). The producer
/// and consumer sides are both `&self`; "one consumer" is a rule of use (the owning core), not
/// a requirement of soundness.
pub struct MpscRing<T: Copy, const N: usize> {
    /// Next position producers claim.
    tail: CachePadded<AtomicUsize>,
    /// Next position the consumer takes.
    head: CachePadded<AtomicUsize>,
    slots: [Slot<T>; N],
}

// SAFETY: the ring moves `T`s between threads (hence `T: Send`), and every access to a slot's
// `UnsafeCell` follows the slot protocol (module docs, "Safety of the slot protocol"): a slot is
// written by one producer or read by one consumer at a time, ordered by the `seq` Release/Acquire
// pairs. Everything else in the ring is atomic.
unsafe impl<T: Copy + Send, const N: usize> Sync for MpscRing<T, N> {}

impl<T: Copy, const N: usize> Default for MpscRing<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> MpscRing<T, N> {
    /// Slots in the ring: at most this many values fit.
    pub const CAPACITY: usize = N;
    const MASK: usize = N - 1;

    /// An empty ring. `const`, so rings can be statics.
    ///
    /// # Panics
    ///
    /// At compile time, if `N` is not a power of two of at least 2 (with one slot, "holds the
    /// value for `p`" and "free for `p + 1`" would be the same sequence number).
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Self {
        const {
            assert!(
                N >= 2 && N.is_power_of_two(),
                "MpscRing size: a power of two, >= 2"
            )
        };
        let mut slots = [const { Slot::new(0) }; N];
        let mut i = 0;
        while i < N {
            slots[i].seq = AtomicUsize::new(i);
            i += 1;
        }
        MpscRing {
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
            slots,
        }
    }

    /// An empty ring (loom build: not `const`).
    #[cfg(all(test, loom))]
    pub fn new() -> Self {
        const {
            assert!(
                N >= 2 && N.is_power_of_two(),
                "MpscRing size: a power of two, >= 2"
            )
        };
        MpscRing {
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
            slots: core::array::from_fn(Slot::new),
        }
    }

    #[inline(always)]
    fn slot(&self, pos: usize) -> &Slot<T> {
        &self.slots[pos & Self::MASK]
    }

    /// Values in the ring now, at most `N` (a snapshot: producers and the consumer may be
    /// moving). Counts positions claimed but not yet published or not yet freed.
    #[inline]
    pub fn len(&self) -> usize {
        // Head first: then `tail >= head` for the values read (module docs).
        let head = self.head.0.load(Acquire);
        let tail = self.tail.0.load(Acquire);
        tail.wrapping_sub(head).min(N)
    }

    /// `true` if the ring holds nothing (a snapshot, see [`MpscRing::len`]).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Push one value (any core). `Err(v)` if the ring is full: the caller keeps `v`.
    #[inline]
    pub fn push(&self, v: T) -> Result<(), T> {
        match self.claim_push(1) {
            (_, 0) => Err(v),
            (pos, _) => {
                self.write(pos, v);
                Ok(())
            }
        }
    }

    /// Push as many of `vs` as fit, claiming them with one compare-and-swap; returns how many
    /// were pushed (a prefix of `vs`, in order). The caller keeps the rest.
    pub fn push_bulk(&self, vs: &[T]) -> usize {
        if vs.is_empty() {
            return 0;
        }
        let (pos, k) = self.claim_push(vs.len());
        for (i, &v) in vs[..k].iter().enumerate() {
            self.write(pos.wrapping_add(i), v);
        }
        k
    }

    /// Take the oldest value (the consumer). `None` when empty, or when the next position is
    /// claimed but not yet published (its value comes on a later call).
    #[inline]
    pub fn pop(&self) -> Option<T> {
        match self.claim_pop(1) {
            (_, 0) => None,
            (pos, _) => Some(self.read(pos)),
        }
    }

    /// Consumer side: move up to `out.len()` values, oldest first, into `out[..n]` with one
    /// claim; returns `n` (0 when empty; stops before a position not yet published).
    #[inline]
    pub fn pop_batch(&self, out: &mut [T]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let (pos, k) = self.claim_pop(out.len());
        for (i, o) in out[..k].iter_mut().enumerate() {
            *o = self.read(pos.wrapping_add(i));
        }
        k
    }

    /// Claim up to `max` (`>= 1`) consecutive free positions at `tail`: `(first, how many)`,
    /// 0 of them if the ring is full.
    #[inline]
    fn claim_push(&self, max: usize) -> (usize, usize) {
        let mut pos = self.tail.0.load(Relaxed);
        loop {
            let seq = self.slot(pos).seq.load(Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff < 0 {
                // The slot still holds the value from the previous lap: full.
                return (pos, 0);
            }
            if diff > 0 {
                // Another producer took `pos`; catch up.
                pos = self.tail.0.load(Relaxed);
                continue;
            }
            let mut k = 1;
            while k < max {
                let p = pos.wrapping_add(k);
                if self.slot(p).seq.load(Acquire) != p {
                    break;
                }
                k += 1;
            }
            match self
                .tail
                .0
                .compare_exchange_weak(pos, pos.wrapping_add(k), Relaxed, Relaxed)
            {
                Ok(_) => return (pos, k),
                Err(now) => pos = now,
            }
        }
    }

    /// Claim up to `max` (`>= 1`) consecutive published positions at `head`: `(first, how
    /// many)`, 0 of them if none is published.
    #[inline]
    fn claim_pop(&self, max: usize) -> (usize, usize) {
        let mut pos = self.head.0.load(Relaxed);
        loop {
            let seq = self.slot(pos).seq.load(Acquire);
            let diff = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if diff < 0 {
                // Empty, or claimed by a producer that has not published yet.
                return (pos, 0);
            }
            if diff > 0 {
                // Another consumer took `pos` (a logic error of the caller, not unsound).
                pos = self.head.0.load(Relaxed);
                continue;
            }
            let mut k = 1;
            while k < max {
                let p = pos.wrapping_add(k);
                if self.slot(p).seq.load(Acquire) != p.wrapping_add(1) {
                    break;
                }
                k += 1;
            }
            match self
                .head
                .0
                .compare_exchange_weak(pos, pos.wrapping_add(k), Release, Relaxed)
            {
                Ok(_) => return (pos, k),
                Err(now) => pos = now,
            }
        }
    }

    /// Write the value for claimed position `pos` and publish it.
    #[inline(always)]
    fn write(&self, pos: usize, v: T) {
        let slot = self.slot(pos);
        debug_assert_eq!(slot.seq.load(Relaxed), pos, "write into a busy slot");
        slot.val.with_mut(|p| {
            // SAFETY: slot protocol (module docs), point 1: this producer's claim of `pos`
            // succeeded after it saw `seq == pos`, so no other thread reads or writes this
            // slot until the `Release` store below publishes it.
            unsafe { p.write(MaybeUninit::new(v)) }
        });
        slot.seq.store(pos.wrapping_add(1), Release);
    }

    /// Read the value at claimed, published position `pos` and free its slot for the next lap.
    #[inline(always)]
    fn read(&self, pos: usize) -> T {
        let slot = self.slot(pos);
        let v = slot.val.with(|p| {
            // SAFETY: slot protocol (module docs), points 1 and 2: this consumer's claim of
            // `pos` succeeded after it saw `seq == pos + 1` (`Acquire`), so the producer's write
            // of an initialised value happens before this read and no producer writes the slot
            // until the `Release` store below frees it. `T: Copy`: reading copies.
            unsafe { (*p).assume_init() }
        });
        slot.seq.store(pos.wrapping_add(N), Release);
        v
    }

    /// The values in the ring, oldest first (tests only; the ring must be quiet: no producer
    /// or consumer running). Drains and pushes back, so it needs no access of its own.
    #[cfg(test)]
    pub(crate) fn peek(&self) -> std::vec::Vec<T> {
        let mut v = std::vec::Vec::new();
        while let Some(x) = self.pop() {
            v.push(x);
        }
        assert_eq!(self.push_bulk(&v), v.len(), "peek on a busy ring");
        v
    }
}

#[cfg(test)]
mod tests;
