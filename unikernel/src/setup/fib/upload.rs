//! `PUT` bodies (`/routes`, and the ACL's `/rules`) and the hand-off of a `PUT /routes` body
//! from the management plane to the boot CPU's housekeeping, where its rebuild runs through
//! the same stepped build, publish and retire path as `routes commit`. A body's buffer is
//! backed and given back a bounded number of pages per poll ([`UPLOAD_STEP_PAGES`]).

use super::{err, FibError, Published, RebuildFailure};
use crate::mem::paging::PAGE;
use crate::mem::vmap::{self, VmArea};
use core::sync::atomic::{AtomicU64, Ordering};

/// Pages held by `PUT` bodies (`/routes`: being received or kept as the routes file;
/// `/rules`: being received or waiting for the rebuild; either: being given back).
pub(super) static UPLOAD_PAGES: AtomicU64 = AtomicU64::new(0);

/// Pages a `PUT` body's buffer gains ([`PutUpload::grow`]) or gives back
/// ([`release_uploads_step`]) per step, i.e. per management-plane poll: 32 pages (128 KiB
/// zeroed or freed), ahead of the 16 KiB a socket delivers per poll.
pub const UPLOAD_STEP_PAGES: usize = 32;

/// Dropped `PUT` bodies whose pages go back [`UPLOAD_STEP_PAGES`] per step: each range and
/// the next page of it to free. More at once than it holds (never with one upload at a time:
/// one receiving, one kept, one with the ACL) are freed at once.
static RELEASING: spin::Mutex<heapless::Deque<(VmArea, usize), 4>> =
    spin::Mutex::new(heapless::Deque::new());

/// A `PUT` body (`/routes`, or the ACL's `/rules`): a range of the vmap area for its
/// `Content-Length`, backed by zeroed order-0 pages (so an 8 MiB body needs no high-order
/// block) as it fills ([`PutUpload::grow`], a bounded step at a time), given back a bounded
/// step at a time after it is dropped ([`release_uploads_step`]). Only the boot CPU (which
/// runs the management plane and the rebuild) ever touches it, so its pages go back with a
/// local flush only.
pub struct PutUpload {
    area: Option<VmArea>,
    len: usize,
    /// Pages of `area` mapped (from its start).
    mapped: usize,
}

impl PutUpload {
    /// A buffer for a body of `len` bytes: its virtual range only; [`PutUpload::grow`] backs
    /// it.
    ///
    /// # Errors
    /// The vmap area has no free range that long.
    pub fn new(len: usize) -> Result<PutUpload, FibError> {
        if len == 0 {
            return Ok(PutUpload {
                area: None,
                len,
                mapped: 0,
            });
        }
        let area = vmap::alloc_va(len.div_ceil(PAGE as usize))
            .map_err(|e| err(format_args!("no memory for a {len}-byte body: {e}")))?;
        Ok(PutUpload {
            area: Some(area),
            len,
            mapped: 0,
        })
    }

    /// Back the buffer with zeroed pages up to byte `upto` (at most the body's length), at
    /// most [`UPLOAD_STEP_PAGES`] per call. Returns the bytes usable now ([`PutUpload::buf_mut`]).
    ///
    /// # Errors
    /// The zone ran out (the pages mapped so far stay, freed with the upload).
    pub fn grow(&mut self, upto: usize) -> Result<usize, FibError> {
        let Some(area) = self.area else {
            return Ok(0);
        };
        let want = upto.min(self.len).div_ceil(PAGE as usize);
        if want > self.mapped {
            let zone = crate::mem::ZONE.get().expect("the zone is up");
            let n = (want - self.mapped).min(UPLOAD_STEP_PAGES);
            let got = vmap::vmalloc_step(zone, area, self.mapped, n)
                .map_err(|e| err(format_args!("no memory for a {}-byte body: {e}", self.len)))?;
            self.mapped += got;
            UPLOAD_PAGES.fetch_add(got as u64, Ordering::Relaxed);
        }
        Ok(self.ready())
    }

    /// Bytes backed by pages so far.
    fn ready(&self) -> usize {
        (self.mapped * PAGE as usize).min(self.len)
    }

    /// The buffer as far as it is backed ([`PutUpload::grow`]).
    pub fn buf_mut(&mut self) -> &mut [u8] {
        match self.area {
            // SAFETY: the first `ready()` bytes of a vmap range mapped writable for this
            // upload alone, unmapped only after `drop`, which takes `self` (so no slice
            // outlives it).
            Some(a) => unsafe { core::slice::from_raw_parts_mut(a.base as *mut u8, self.ready()) },
            None => &mut [],
        }
    }

    /// The body as text. Only called on a complete body whose every line was checked (UTF-8,
    /// the file's syntax) as it streamed in; a body that is not UTF-8 (or not all backed)
    /// reads as empty. The `'static` text must not outlive the upload.
    pub(crate) fn text(&self) -> &'static str {
        let bytes: &[u8] = match self.area {
            // SAFETY: as `buf_mut`; the `'static` text is kept only while the upload is (in
            // `Reload::upload`, `routes_file` dropped with it) or used within one build.
            Some(a) if self.ready() == self.len => unsafe {
                core::slice::from_raw_parts(a.base as *const u8, self.len)
            },
            _ => &[],
        };
        core::str::from_utf8(bytes).unwrap_or("")
    }
}

impl Drop for PutUpload {
    /// Queue the range for [`release_uploads_step`] (its pages stay counted until freed); at
    /// once only if the queue is full.
    fn drop(&mut self) {
        let Some(area) = self.area.take() else {
            return;
        };
        if let Err((area, _)) = RELEASING.lock().push_back((area, 0)) {
            let zone = crate::mem::ZONE.get().expect("the zone is up");
            let (_, freed) = vmap::vfree_step(zone, area, 0, area.pages);
            UPLOAD_PAGES.fetch_sub(freed as u64, Ordering::Relaxed);
        }
    }
}

/// Boot CPU (the management plane's poll): give back up to [`UPLOAD_STEP_PAGES`] pages of
/// dropped `PUT` bodies, and the range of each whose pages are all back.
pub fn release_uploads_step() {
    let mut q = RELEASING.lock();
    let Some((area, next)) = q.front_mut() else {
        return;
    };
    let zone = crate::mem::ZONE.get().expect("the zone is up");
    let (end, freed) = vmap::vfree_step(zone, *area, *next, UPLOAD_STEP_PAGES);
    UPLOAD_PAGES.fetch_sub(freed as u64, Ordering::Relaxed);
    *next = end;
    if end == area.pages {
        q.pop_front();
    }
}

/// Boot CPU (`quit`, once no core reads a `PUT` body): give back every dropped body's pages
/// now, not a step per poll (nothing polls any more).
pub fn release_uploads_now() {
    while !RELEASING.lock().is_empty() {
        release_uploads_step();
    }
}

/// The hand-off between the management plane (in the poll loop, on the boot CPU) and its
/// housekeeping (the quiescent point where a rebuild may run).
// One static slot (no heap to box the error in): the size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum PutJob {
    /// Nothing asked.
    Idle,
    /// A complete, checked body waiting for housekeeping.
    Pending(PutUpload),
    /// Its build is under way.
    Started,
    /// What the rebuild did, for the management plane to answer.
    Done(Result<Published, (RebuildFailure, FibError)>),
}

pub(super) static PUT_JOB: spin::Mutex<PutJob> = spin::Mutex::new(PutJob::Idle);

/// Management plane: hand a complete, checked `PUT /routes` body to housekeeping. Returns it
/// back if a job is already pending or unanswered.
pub fn submit_put(upload: PutUpload) -> Result<(), PutUpload> {
    let mut j = PUT_JOB.lock();
    match *j {
        PutJob::Idle => {
            *j = PutJob::Pending(upload);
            Ok(())
        }
        _ => Err(upload),
    }
}

/// Management plane: whether a job is pending or unanswered (a new upload waits its turn).
pub fn put_busy() -> bool {
    !matches!(*PUT_JOB.lock(), PutJob::Idle)
}

/// Management plane: the result of the submitted job once housekeeping ran it.
pub fn take_put_result() -> Option<Result<Published, (RebuildFailure, FibError)>> {
    let mut j = PUT_JOB.lock();
    match core::mem::replace(&mut *j, PutJob::Idle) {
        PutJob::Done(r) => Some(r),
        other => {
            *j = other;
            None
        }
    }
}
