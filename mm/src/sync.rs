//! The concurrency shim for the lock-free rings ([`crate::ptr_ring`] and the page_pool recycle
//! ring) and the TLB shootdown protocol ([`crate::tlb`]): `core`'s atomics and a `core` `UnsafeCell` normally, loom's when the crate's tests are
//! built with `--cfg loom`, so the loom models check the very code the kernel runs (including
//! every access to a ring slot's payload: loom's `UnsafeCell` reports a write that races a
//! read).
//!
//! The `UnsafeCell` here has loom's interface (`with`, `with_mut` taking a closure) in both
//! builds; in the normal build the closures are inlined away.

#[cfg(all(test, loom))]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

#[cfg(not(all(test, loom)))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

pub(crate) use core::sync::atomic::Ordering;

/// `core::cell::UnsafeCell` with loom's closure interface.
#[cfg(not(all(test, loom)))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(all(test, loom)))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }

    /// Call `f` with a pointer for reading the value.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Call `f` with a pointer for writing the value.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Puts a value on its own cache line(s), so that producers writing one field (a ring's
/// `tail`) do not steal the line a consumer reads on every drain (its `head`).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct CachePadded<T>(pub(crate) T);
