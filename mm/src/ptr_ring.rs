//! [`MpscRing`]: a bounded, lock-free, multi-producer single-consumer ring of small `Copy`
//! values (Dmitry Vyukov's bounded queue). It knows nothing about pages or pools: it carries a
//! page number for the page_pool's remote recycle ring
//! ([`RecycleRing`](crate::page_pool::RecycleRing), built on it), a neighbour update for the
//! router's cross-core sync (`netstack::router::NeighRing`), or a hand-off record (page, length,
//! port) from one core to another — any `T: Copy` (see [Records](#records)).
//!
//! Any number of producers (any CPU, any context) push; one consumer (the core that owns the
//! ring) pops. A second consumer is a logic error only, never a data race: a consumer holds a
//! try-lock flag while it drains, so another one meanwhile finds the ring "empty" (with one
//! consumer the flag is always free: one uncontended compare-and-swap per pop or batch).
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
//! * Producers (any CPU, any number): [`MpscRing::push`] claims position `tail` with one
//!   compare-and-swap when its slot is free (`seq == tail`, loaded with `Acquire`), writes the
//!   value, then publishes it with a `Release` store of `seq = p + 1`. A slot that still holds
//!   the value from the previous lap means the ring is full: that is reported to the caller,
//!   which keeps the value (`Err(v)`). [`MpscRing::push_bulk`] claims `k` positions with one
//!   compare-and-swap, `k` bounded by the room `N - (tail - head)` (`head` loaded with
//!   `Acquire` first), then writes and publishes each.
//! * The consumer takes the try-lock flag (`Acquire` compare-and-swap; if it is taken, it
//!   returns nothing), takes values in position order while `seq == head + 1` (`Acquire`),
//!   freeing each slot with a `Release` store of `seq = p + N` after reading it, publishes the
//!   new `head` once per batch (`Release`) and drops the flag (`Release`). A position claimed
//!   but not yet published stops a drain; its value comes out on a later call (and the values
//!   behind it with it).
//!
//! # Safety of the slot protocol
//!
//! The payload sits in an `UnsafeCell<MaybeUninit<T>>` per slot; everything unsafe in this
//! module rests on one argument:
//!
//! 1. **One producer per position.** A producer writes the slot for position `p` only after its
//!    compare-and-swap moved `tail` from `≤ p` past `p`; `tail` only grows, so that succeeds
//!    for exactly one producer per position.
//! 2. **One consumer at a time.** The consumer reads slots only while it holds the flag; the
//!    flag's `Acquire` compare-and-swap and `Release` clear order one consumer's reads and its
//!    `head` store before the next consumer's.
//! 3. **A write never overlaps a read of the same slot.** The slot for `p` last held position
//!    `p - N`. A producer writes it only after it saw that read finished: either `seq == p`
//!    (single push), which the consumer stores with `Release` after reading `p - N`, or
//!    `head > p - N` (bulk push, room check), which the consumer stores with `Release` after
//!    that same `seq` store. The producer's `Acquire` load makes the read happen before the
//!    write. The consumer reads the slot for `p` only after it saw `seq == p + 1`, which the
//!    producer stores with `Release` after its write: the write happens before the read.
//! 4. **Reads see initialised values.** `seq == p + 1` is stored only after the value for `p`
//!    was written, and the consumer reads only then.
//! 5. **Nothing is dropped or leaked unsafely.** `T: Copy`, so a value has no destructor: reading
//!    it copies it, and values still in the ring when it is dropped need no clean-up.
//!
//! The compare-and-swaps of `tail` can be `Relaxed` (the `seq` and `head` pairs carry the
//! synchronisation). [`MpscRing::len`] reads `head` (`Acquire`) before `tail`, so it never sees
//! `tail` behind `head`.
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
//! `const`). loom's `UnsafeCell` checks point 3 above on every slot access. The models here
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

use crate::sync::{AtomicBool, AtomicUsize, CachePadded, Ordering::*, UnsafeCell};

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
    /// The consumer's side, on its own line.
    cons: CachePadded<Consumer>,
    slots: [Slot<T>; N],
}

struct Consumer {
    /// Next position the consumer takes (written only by the consumer holding `busy`).
    head: AtomicUsize,
    /// Held by the consumer while it drains (module docs, safety point 2).
    busy: AtomicBool,
}

impl Consumer {
    #[cfg(not(all(test, loom)))]
    const fn new() -> Consumer {
        Consumer {
            head: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
        }
    }
    #[cfg(all(test, loom))]
    fn new() -> Consumer {
        Consumer {
            head: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
        }
    }
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
            cons: CachePadded(Consumer::new()),
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
            cons: CachePadded(Consumer::new()),
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
        let head = self.cons.0.head.load(Acquire);
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
        let mut pos = self.tail.0.load(Relaxed);
        loop {
            let seq = self.slot(pos).seq.load(Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self
                    .tail
                    .0
                    .compare_exchange_weak(pos, pos.wrapping_add(1), Relaxed, Relaxed)
                {
                    Ok(_) => {
                        self.write(pos, v);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // The slot still holds the value from the previous lap: full.
                return Err(v);
            } else {
                // Another producer took `pos`; catch up.
                pos = self.tail.0.load(Relaxed);
            }
        }
    }

    /// Push as many of `vs` as fit, claiming them with one compare-and-swap; returns how many
    /// were pushed (a prefix of `vs`, in order). The caller keeps the rest.
    pub fn push_bulk(&self, vs: &[T]) -> usize {
        if vs.is_empty() {
            return 0;
        }
        loop {
            // Head first: `tail >= head` then holds for the values read. `Acquire` on head makes
            // the consumer's reads of the slots it freed happen before our writes to them.
            let head = self.cons.0.head.load(Acquire);
            let pos = self.tail.0.load(Relaxed);
            let room = N.saturating_sub(pos.wrapping_sub(head));
            let k = room.min(vs.len());
            if k == 0 {
                return 0;
            }
            if self
                .tail
                .0
                .compare_exchange_weak(pos, pos.wrapping_add(k), Relaxed, Relaxed)
                .is_ok()
            {
                for (i, &v) in vs[..k].iter().enumerate() {
                    self.write(pos.wrapping_add(i), v);
                }
                return k;
            }
        }
    }

    /// Take the oldest value (the consumer). `None` when empty, when the next position is
    /// claimed but not yet published (its value comes on a later call), or while another
    /// consumer drains.
    #[inline]
    pub fn pop(&self) -> Option<T> {
        let mut v = None;
        self.drain(1, |_, x| v = Some(x));
        v
    }

    /// Consumer side: move up to `out.len()` values, oldest first, into `out[..n]`; returns `n`
    /// (0 when empty or while another consumer drains; stops before a position not yet
    /// published).
    #[inline]
    pub fn pop_batch(&self, out: &mut [T]) -> usize {
        let max = out.len();
        self.drain(max, |i, x| out[i] = x)
    }

    /// Take up to `max` published values in order, handing each to `f(i, value)`; returns how
    /// many. Holds the consumer flag throughout.
    #[inline(always)]
    fn drain(&self, max: usize, mut f: impl FnMut(usize, T)) -> usize {
        // A compare-and-swap rather than a swap: it leaves a busy flag's line unwritten (and
        // loom models a swap racing the clear wrongly: tokio-rs/loom#254).
        if max == 0
            || self
                .cons
                .0
                .busy
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_err()
        {
            return 0;
        }
        let mut pos = self.cons.0.head.load(Relaxed);
        let mut n = 0;
        while n < max {
            let slot = self.slot(pos);
            if slot.seq.load(Acquire) != pos.wrapping_add(1) {
                break;
            }
            let v = slot.val.with(|p| {
                // SAFETY: slot protocol (module docs), points 2 to 4: we hold the consumer flag
                // and saw `seq == pos + 1` (`Acquire`), so the producer's write of an initialised
                // value happens before this read, and no producer writes the slot until it is
                // freed (the `Release` store of `seq` just below, and of `head` after the loop).
                // `T: Copy`: reading copies.
                unsafe { (*p).assume_init() }
            });
            slot.seq.store(pos.wrapping_add(N), Release);
            f(n, v);
            pos = pos.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            self.cons.0.head.store(pos, Release);
        }
        self.cons.0.busy.store(false, Release);
        n
    }

    /// Write the value for claimed position `pos` and publish it.
    #[inline(always)]
    fn write(&self, pos: usize, v: T) {
        let slot = self.slot(pos);
        debug_assert_eq!(slot.seq.load(Relaxed), pos, "write into a busy slot");
        slot.val.with_mut(|p| {
            // SAFETY: slot protocol (module docs), points 1 and 3: this producer alone claimed
            // `pos`, after seeing the slot's previous value read (`seq == pos`, or `head` past
            // `pos - N`), so no other thread reads or writes this slot until the `Release`
            // store below publishes it.
            unsafe { p.write(MaybeUninit::new(v)) }
        });
        slot.seq.store(pos.wrapping_add(1), Release);
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
