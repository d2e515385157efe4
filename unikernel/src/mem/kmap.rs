//! Per-core views (Linux `kmap_local`): a frame list mapped contiguously in a window of the
//! vmap area that belongs to one CPU, for a consumer that needs bytes of several pages linear
//! (the first: the management plane's multi-page frames, issue 14). The window is never used
//! by another CPU, so no other TLB can hold its translations: unmapping needs a local
//! `invlpg` per page and no IPI, and the window is reused at once.
//!
//! One view per CPU at a time (the window is [`WINDOW_PAGES`] pages); a second `map` while a
//! view is alive, from the same CPU, is refused. Thread context only.

use super::paging::{self, PAGE};
use super::vmap::{self, VmArea, VmapError};
use crate::percpu::{current_cpu, MAX_CPUS};
use core::sync::atomic::{AtomicBool, Ordering};
use mm::Pfn;

/// Pages in each CPU's window: 16 (64 KiB), a 9,018-byte jumbo frame several times over.
pub const WINDOW_PAGES: usize = 16;

/// Per CPU: its window (taken from the vmap area on first use) and whether a view is alive.
static WINDOWS: [spin::Once<VmArea>; MAX_CPUS] = [const { spin::Once::new() }; MAX_CPUS];
static IN_USE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Why a view could not be made.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub enum KmapError {
    /// More pages than the window holds.
    TooLarge {
        /// Pages asked for.
        pages: usize,
    },
    /// This CPU already has a view alive.
    Busy,
    /// The vmap area had no room for the window.
    Vmap(VmapError),
}

/// A linear, read-only view of some frames, valid on the CPU that made it until dropped.
pub struct LocalView {
    cpu: usize,
    base: u64,
    pages: usize,
}

impl LocalView {
    /// Map `pfns` (at most [`WINDOW_PAGES`]) read-only, contiguously, in this CPU's window.
    ///
    /// # Errors
    /// [`KmapError`]: too many pages, a view already alive on this CPU, or no vmap space.
    pub fn map(pfns: &[Pfn]) -> Result<LocalView, KmapError> {
        if pfns.len() > WINDOW_PAGES {
            return Err(KmapError::TooLarge { pages: pfns.len() });
        }
        let cpu = current_cpu() as usize;
        let window = match WINDOWS[cpu].try_call_once(|| vmap::alloc_va(WINDOW_PAGES)) {
            Ok(w) => *w,
            Err(e) => return Err(KmapError::Vmap(e)),
        };
        if IN_USE[cpu].swap(true, Ordering::Acquire) {
            return Err(KmapError::Busy);
        }
        for (i, pfn) in pfns.iter().enumerate() {
            // The window's pages are empty whenever no view is alive (Drop clears them).
            if let Err(e) = paging::vmap_page(window.page_addr(i), pfn.addr(), false) {
                IN_USE[cpu].store(false, Ordering::Release);
                return Err(KmapError::Vmap(VmapError::Paging(e)));
            }
        }
        Ok(LocalView {
            cpu,
            base: window.base,
            pages: pfns.len(),
        })
    }

    /// The bytes of the view: `pages × 4096`.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [base, base + pages × 4 KiB) is mapped read-only to frames the caller lent
        // us for the view's lifetime, on this CPU's window that nobody else maps.
        unsafe { core::slice::from_raw_parts(self.base as *const u8, self.pages * PAGE as usize) }
    }
}

impl Drop for LocalView {
    fn drop(&mut self) {
        for i in 0..self.pages {
            let v = self.base + i as u64 * PAGE;
            let _ = paging::vunmap_page(v);
            // Only this CPU ever used the window: a local flush is the whole shootdown.
            x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(v));
        }
        IN_USE[self.cpu].store(false, Ordering::Release);
    }
}
