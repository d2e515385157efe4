//! [`Shared`]: read-mostly state every core's network function reads (a table, a rule set, a
//! FIB) and the control plane replaces live, RCU style (after Linux's RCU: McKenney and
//! Slingwine, "Read-Copy Update", 1998): publish / quiescent state / grace period. The
//! router's FIB reload runs on it too (`setup/fib`, whose stepped build and batched
//! retirement free the old FIB once [`Shared::retired`] hands it back).
//!
//! * **Publish** ([`Shared::publish`], one writer at a time: the boot CPU's housekeeping or the
//!   management plane): the new value's pointer is stored, then the generation bumped (both
//!   `Release`). The old value is handed back as a [`Retiring`] token.
//! * **Read** ([`Shared::read`], each core at its quiescent point: between poll iterations, in
//!   [`NetworkFunction::tick`](super::NetworkFunction::tick) or `end_of_burst`): the
//!   generation, then the pointer (both `Acquire`, in the opposite order), then the core
//!   records the generation it now uses (`Release`). One `Acquire` load when nothing changed
//!   ([`Reader::refresh`]). A reader whose switch can fail peeks ([`Shared::peek`]) and
//!   records ([`Shared::record`]) only once it switched.
//! * **Retire** ([`Shared::retired`]): once every core has recorded a generation at least the
//!   replacement's, no core can hold the old value (a core records a generation only after it
//!   let go of what it read before), and the writer gets it back to free or reuse.
//!
//! The contract a reader keeps (the one RCU asks, which the type system does not check): a
//! value from [`Shared::read`] is used only until that core's next quiescent point, where it
//! is read again. [`Reader`] keeps one per core and is the way to follow it.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// A value shared read-mostly by up to `CORES` cores, replaced live. `T` is `Sync` (every core
/// reads it at once) and `'static` (it outlives every reader; the writer frees an old one only
/// once [`Shared::retired`] says so).
pub struct Shared<T: Sync + 'static, const CORES: usize> {
    current: AtomicPtr<T>,
    generation: AtomicU64,
    seen: [AtomicU64; CORES],
}

/// An old value replaced by [`Shared::publish`]: give it back to [`Shared::retired`] until it
/// says every core has passed a quiescent state since.
#[must_use = "an old value is still read until retired: keep it and ask Shared::retired"]
#[derive(Debug)]
pub struct Retiring<T: 'static> {
    old: &'static T,
    generation: u64,
}

impl<T: 'static> Retiring<T> {
    /// The generation that replaced it.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl<T: Sync + 'static, const CORES: usize> Shared<T, CORES> {
    /// Shared state whose first value (generation 1) is `first`; no core has read it yet.
    pub const fn new(first: &'static T) -> Self {
        Shared {
            current: AtomicPtr::new(first as *const T as *mut T),
            generation: AtomicU64::new(1),
            seen: [const { AtomicU64::new(0) }; CORES],
        }
    }

    /// The current generation (1 for the first value, +1 per publish).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Core `core` at a quiescent point: the current value, and the record that this core now
    /// uses its generation (so older values may retire). `core` at or above `CORES` reads
    /// without recording (it never holds up a retirement: do not use it for such a core).
    pub fn read(&self, core: usize) -> &'static T {
        let (generation, value) = self.peek();
        self.record(core, generation);
        value
    }

    /// The current generation and value, recording nothing: for a reader that must do
    /// something with the value before it may say it moved on ([`Shared::record`], e.g. a
    /// switch that can fail: the router's FIB). The value is of that generation or a newer one.
    pub fn peek(&self) -> (u64, &'static T) {
        let generation = self.generation.load(Ordering::Acquire);
        let p = self.current.load(Ordering::Acquire);
        // SAFETY: `p` was stored from a `&'static T` (in `new` or `publish`) no later than the
        // generation just loaded (stored `Release` before the generation, loaded `Acquire` after
        // it), so it is a value of that generation or a newer one; such a value is not handed
        // back by `retired` before every reader records a generation at least its own, which a
        // reader does only after its previous value's last use (the reader's contract).
        (generation, unsafe { &*p })
    }

    /// Record that core `core` now uses the value of `generation` (from [`Shared::peek`]) and
    /// holds no older one: older values may retire. Ignored for `core` at or above `CORES`.
    pub fn record(&self, core: usize, generation: u64) {
        if let Some(s) = self.seen.get(core) {
            s.store(generation, Ordering::Release);
        }
    }

    /// The generation core `core` last recorded (0: none yet, or `core` at or above `CORES`).
    pub fn recorded(&self, core: usize) -> u64 {
        self.seen.get(core).map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// The current value, recording no reader: for the CPU that retires old values (it frees
    /// none while it still uses one it read this way), or before any replacement (boot).
    pub fn current(&self) -> &'static T {
        self.read(usize::MAX)
    }

    /// Replace the value with `next` (one writer at a time). Returns the old value, to give to
    /// [`Shared::retired`].
    pub fn publish(&self, next: &'static T) -> Retiring<T> {
        let old = self
            .current
            .swap(next as *const T as *mut T, Ordering::AcqRel);
        let generation = self.generation.fetch_add(1, Ordering::Release) + 1;
        // SAFETY: every pointer stored in `current` came from a `&'static T`.
        let old = unsafe { &*old };
        Retiring { old, generation }
    }

    /// The cores among the first `cores` that have not recorded a generation at least `r`'s
    /// (a bit per core): an old value is read by none of the others.
    pub fn late(&self, r: &Retiring<T>, cores: usize) -> u64 {
        self.seen
            .iter()
            .take(cores.min(CORES).min(64))
            .enumerate()
            .filter(|(_, s)| s.load(Ordering::Acquire) < r.generation)
            .fold(0, |m, (c, _)| m | 1 << c)
    }

    /// The old value of `r` once none of the first `cores` cores can hold it (each recorded a
    /// generation at least `r`'s), to free or reuse; else `r` back, to ask again later.
    ///
    /// # Errors
    /// `Err(r)` while a core is late ([`Shared::late`]).
    pub fn retired(&self, r: Retiring<T>, cores: usize) -> Result<&'static T, Retiring<T>> {
        if self.late(&r, cores) == 0 {
            Ok(r.old)
        } else {
            Err(r)
        }
    }
}

/// One core's handle on a [`Shared`] value: the value it uses until its next quiescent point.
#[derive(Debug)]
pub struct Reader<T: 'static> {
    core: usize,
    value: &'static T,
    generation: u64,
}

impl<T: Sync + 'static> Reader<T> {
    /// Core `core`'s reader, with the current value.
    pub fn new<const CORES: usize>(shared: &Shared<T, CORES>, core: usize) -> Reader<T> {
        let generation = shared.generation();
        Reader {
            core,
            value: shared.read(core),
            generation,
        }
    }

    /// The value this core uses now.
    #[inline(always)]
    pub fn get(&self) -> &'static T {
        self.value
    }

    /// At this core's quiescent point: switch to a newer value if one was published (one
    /// `Acquire` load when none was). Returns whether it switched.
    pub fn refresh<const CORES: usize>(&mut self, shared: &Shared<T, CORES>) -> bool {
        if shared.generation() == self.generation {
            return false;
        }
        self.generation = shared.generation();
        self.value = shared.read(self.core);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::vec::Vec;

    #[test]
    fn an_old_value_retires_once_every_core_moved_on() {
        let v1: &'static u32 = Box::leak(Box::new(1));
        let v2: &'static u32 = Box::leak(Box::new(2));
        let s: Shared<u32, 3> = Shared::new(v1);
        let mut r: Vec<Reader<u32>> = (0..3).map(|c| Reader::new(&s, c)).collect();
        assert!(r.iter().all(|r| *r.get() == 1));
        let old = s.publish(v2);
        assert_eq!((old.generation(), s.generation()), (2, 2));
        // Nobody refreshed: all three late.
        assert_eq!(s.late(&old, 3), 0b111);
        let old = s.retired(old, 3).unwrap_err();
        assert!(r[0].refresh(&s) && r[2].refresh(&s));
        assert!(!r[0].refresh(&s), "no newer value: no switch");
        assert_eq!(s.late(&old, 3), 0b010);
        let old = s.retired(old, 3).unwrap_err();
        // Core 1 still reads the old value until its quiescent point.
        assert_eq!((*r[0].get(), *r[1].get(), *r[2].get()), (2, 1, 2));
        assert!(r[1].refresh(&s));
        assert_eq!(*s.retired(old, 3).unwrap(), 1);
        // Fewer cores forwarding than slots: only those count.
        let v3: &'static u32 = Box::leak(Box::new(3));
        let old = s.publish(v3);
        r[0].refresh(&s);
        assert_eq!(s.late(&old, 1), 0);
        assert_eq!(*s.retired(old, 1).unwrap(), 2);
    }

    #[test]
    fn a_reader_that_peeks_holds_the_old_value_until_it_records() {
        let v1: &'static u32 = Box::leak(Box::new(1));
        let v2: &'static u32 = Box::leak(Box::new(2));
        let s: Shared<u32, 2> = Shared::new(v1);
        s.read(0);
        s.read(1);
        assert_eq!((s.recorded(0), s.recorded(1), s.recorded(7)), (1, 1, 0));
        let old = s.publish(v2);
        s.read(0);
        // Core 1 looks at the new value but has not switched to it (its switch failed, say).
        assert_eq!(s.peek(), (2, v2));
        assert_eq!(s.recorded(1), 1, "peeking records nothing");
        let old = s
            .retired(old, 2)
            .expect_err("core 1 may still use the old value");
        assert_eq!(s.late(&old, 2), 0b10);
        s.record(1, 2);
        assert_eq!(*s.retired(old, 2).unwrap(), 1);
    }

    /// Writers publish and retire while readers on other threads read at their quiescent
    /// points: a retired value is poisoned at once, and no reader ever sees a poisoned one.
    #[test]
    fn a_reader_never_sees_a_retired_value() {
        const READERS: usize = 2;
        struct Cell(AtomicU64);
        let first: &'static Cell = Box::leak(Box::new(Cell(AtomicU64::new(1))));
        let s: &'static Shared<Cell, READERS> = Box::leak(Box::new(Shared::new(first)));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..READERS)
            .map(|c| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut r = Reader::new(s, c);
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..16 {
                            assert_ne!(r.get().0.load(Ordering::Relaxed), 0, "retired value read");
                            reads += 1;
                        }
                        r.refresh(s);
                    }
                    reads
                })
            })
            .collect();
        let mut retired = 0;
        for g in 2..200u64 {
            let next: &'static Cell = Box::leak(Box::new(Cell(AtomicU64::new(g))));
            let mut old = s.publish(next);
            loop {
                match s.retired(old, READERS) {
                    Ok(v) => {
                        v.0.store(0, Ordering::Relaxed);
                        retired += 1;
                        break;
                    }
                    Err(o) => {
                        old = o;
                        std::thread::yield_now();
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(retired, 198);
        assert!(reads > 0);
    }
}
