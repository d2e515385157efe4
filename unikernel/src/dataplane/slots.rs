//! [`CoreSlots`]: a value per forwarding core, built by the boot CPU before any core starts
//! and taken once by its core (the NAT's translators, the firewall's tables): the hand-over
//! from `setup` to the core's own state, after which nothing is shared.

use super::MAX_CORES;

/// One slot per core (`MAX_CORES`), each holding a `T` until its core takes it.
pub struct CoreSlots<T>([spin::Mutex<Option<T>>; MAX_CORES]);

impl<T> CoreSlots<T> {
    /// Every slot empty (`const`, for statics).
    pub const fn new() -> CoreSlots<T> {
        CoreSlots([const { spin::Mutex::new(None) }; MAX_CORES])
    }

    /// Keep `v` for core `k` (below `MAX_CORES`, else ignored), replacing what it held.
    pub fn put(&self, k: usize, v: T) {
        if let Some(slot) = self.0.get(k) {
            *slot.lock() = Some(v);
        }
    }

    /// Core `k`'s value, once (`None` after, or when none was put).
    pub fn take(&self, k: usize) -> Option<T> {
        self.0.get(k)?.lock().take()
    }
}

impl<T> Default for CoreSlots<T> {
    fn default() -> CoreSlots<T> {
        CoreSlots::new()
    }
}
