//! The files of an image's own network function (`NetworkFunction::files`) at run time: the
//! texts in force (`appliance::nf_texts`: the appliance bundle's, each replaced by its last
//! `PUT /NAME`, shared by every core as an `nf::Shared` value), and the `PUT` that replaces one.
//!
//! A `PUT /NAME` body (each line UTF-8 and within `http::LINE_MAX`, checked as it arrived) is
//! a job for the boot CPU's housekeeping ([`poll`], every 10 ms, between its poll
//! iterations), as the ACL's `PUT /rules` is:
//!
//! 1. The new set of texts (the one in force with `NAME`'s replaced) is checked on a throwaway
//!    instance of the NF, as the boot checks the bundle: `F::default()`, its command-line keys,
//!    then every file in the order the NF declares them ([`NfFilesHook::check`]). A file its
//!    parser refuses is 400 naming the file and line; the texts in force stay.
//! 2. It is published (generation + 1). Each forwarding core sees the new generation in its
//!    tick and **restarts its NF**: the old instance hands back every frame it holds
//!    (`release_all`), a fresh one is made as at boot (default, keys, files) and takes its
//!    place (`Core::restart_nf`; its counters carry on from the old one's, gauges excepted).
//!    This is the one meaning a file's parser, written for a `Default` instance, can have: a
//!    `PUT` is a boot of the NF with the new file, not an edit of its state.
//! 3. Once every forwarding core recorded the new generation, the body its text replaced (a
//!    previous `PUT`'s) goes back ([`PutUpload`]'s pages, a bounded step per poll). One set
//!    retires at a time: a job waits for the previous retirement, and is refused as busy
//!    (503) when it waited more than [`RETIRE_WAIT_MS`].
//!
//! The NF's files share one generation (`ETag: "gen-N"` of `GET /NAME`, what `If-Match`
//! names). A `PUT` body kept as a file's text counts with the other `PUT` bodies' pages
//! (`fib::fib_pages`) while the NF runs; `quit` gives it back ([`settle`]), so the page count
//! at `quit` is the boot's.

use crate::appliance::nf_texts::{self, NfTexts};
use crate::arch::time::uptime_us;
use crate::dataplane::nf::Retiring;
use crate::setup::fib::PutUpload;
use core::fmt::Write;
use netstack::config::nf_files::{BadFile, MAX_NF_FILES};

/// How long a replacement waits for the previous set of texts to retire before it is refused
/// (ms): a core takes a new set up within one tick (10 ms).
pub const RETIRE_WAIT_MS: u64 = 1000;

/// The generation of the NF's files in force (1: the bundle's, and always in the stock image,
/// which serves no NF file).
pub fn generation() -> u64 {
    nf_texts::generation()
}

/// The `PUT` path's file among the NF's own: `PutKind::NfFile(name)` for `/name` (its query
/// not looked at); `None` for another path or in the stock image.
pub fn kind_at(path: &str) -> Option<netstack::http::PutKind> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let name = path.strip_prefix('/')?;
    let name = *nf_texts::hook()?.names.iter().find(|&&n| n == name)?;
    Some(netstack::http::PutKind::NfFile(name))
}

/// `PUT /name?check` (the management plane, the boot CPU): the texts in force with `name`'s
/// replaced by `text` (a body's, used only while its upload lives: this call), read on a
/// throwaway instance as the `PUT`'s job would ([`poll`]); nothing is published.
///
/// # Errors
/// [`BadFile`]: the file and line the NF's parser refused.
pub fn check(name: &'static str, text: &'static str) -> Result<(), BadFile> {
    let Some(hook) = nf_texts::hook() else {
        return Ok(());
    };
    match nf_texts::current().with(name, text) {
        Some(next) => (hook.check)(&next),
        None => Ok(()),
    }
}

/// Why a `PUT /NAME` was not published (the texts in force stay).
#[derive(Clone, Debug)]
pub enum NfPutError {
    /// The NF's parser refused a file of the new set (400).
    Bad(BadFile),
    /// The previous set was still retiring after [`RETIRE_WAIT_MS`], the late cores as a
    /// mask (503).
    Busy(u64),
}

/// A published `PUT /NAME`.
#[derive(Copy, Clone, Debug)]
pub struct NfPublished {
    /// The files' new generation.
    pub generation: u64,
    /// Lines of the new text.
    pub lines: usize,
}

/// A `PUT` asked for, its result, and what retires.
struct Writer {
    /// The body waiting for housekeeping: the file it replaces, the body, when it came (µs).
    job: Option<(&'static str, PutUpload, u64)>,
    /// Its result, for the management plane.
    done: Option<Result<NfPublished, NfPutError>>,
    /// The `PUT` body in force for each file (its text is the file's), by name.
    bodies: heapless::Vec<(&'static str, PutUpload), MAX_NF_FILES>,
    /// The set replaced last until every core moved on, with the body its text replaced.
    retiring: Option<(Retiring<spin::Mutex<NfTexts>>, Option<PutUpload>)>,
    /// `quit` gave the bodies back ([`settle`]): no `PUT` runs any more.
    quitting: bool,
}

static WRITER: spin::Mutex<Writer> = spin::Mutex::new(Writer {
    job: None,
    done: None,
    bodies: heapless::Vec::new(),
    retiring: None,
    quitting: false,
});

/// Management plane: hand a complete `PUT /name` body to housekeeping. Returns it back if a
/// `PUT` is already waiting or unanswered.
pub fn submit_put(name: &'static str, upload: PutUpload) -> Result<(), PutUpload> {
    let mut w = WRITER.lock();
    if w.job.is_some() || w.done.is_some() || w.quitting {
        return Err(upload);
    }
    w.job = Some((name, upload, uptime_us()));
    Ok(())
}

/// Management plane: whether a `PUT` is waiting or unanswered.
pub fn put_busy() -> bool {
    let w = WRITER.lock();
    w.job.is_some() || w.done.is_some()
}

/// Management plane: the result of the submitted `PUT` once housekeeping ran it.
pub fn take_put_result() -> Option<Result<NfPublished, NfPutError>> {
    WRITER.lock().done.take()
}

/// The boot CPU's housekeeping (every 10 ms; `cores` forwarding cores): give back the body
/// replaced last once every core moved on, then run a `PUT` asked for once nothing retires
/// (refused as busy past [`RETIRE_WAIT_MS`]).
pub fn poll(cores: usize) {
    let Some(hook) = nf_texts::hook() else {
        return;
    };
    let mut w = WRITER.lock();
    let late = retire(&mut w, cores);
    let Some((name, upload, since_us)) = w.job.take() else {
        return;
    };
    if w.retiring.is_some() {
        if uptime_us().saturating_sub(since_us) / 1000 <= RETIRE_WAIT_MS {
            w.job = Some((name, upload, since_us));
            return;
        }
        log::warn!(
            "PUT /{name}: the files replaced last still retiring (cores {late:#x} late); refused"
        );
        w.done = Some(Err(NfPutError::Busy(late)));
        return;
    }
    let text = upload.text();
    let Some(next) = nf_texts::current().with(name, text) else {
        return;
    };
    if let Err(bad) = (hook.check)(&next) {
        log::warn!("PUT /{name}: {bad}; the files stay");
        w.done = Some(Err(NfPutError::Bad(bad)));
        return; // the body goes back
    }
    let old = nf_texts::publish(next);
    let replaced = match w.bodies.iter_mut().find(|(n, _)| *n == name) {
        Some(b) => Some(core::mem::replace(&mut b.1, upload)),
        None => {
            // At most one per declared file, at most MAX_NF_FILES.
            let _ = w.bodies.push((name, upload));
            None
        }
    };
    let generation = nf_texts::generation();
    let lines = text.lines().count();
    log::info!(
        "{}: file `{name}` replaced by PUT ({lines} lines, checked), generation {generation}: every core restarts its NF with it",
        hook.nf
    );
    w.retiring = Some((old, replaced));
    w.done = Some(Ok(NfPublished { generation, lines }));
}

/// Boot CPU (`quit`, before its phases; `cores` forwarding cores): drop a `PUT` not started
/// (answered 503), finish the retirement under way (waiting at most [`RETIRE_WAIT_MS`] for the
/// cores' ticks), then give back every body kept as a file's text, at once: the files end with
/// the NF. From here no core reads the texts (each recorded the generation in force, and no
/// other is published: a later `PUT` is refused as busy), and they are cleared, so `GET /NAME`
/// answers an empty file.
///
/// # Errors
/// The cores (a bit per core) that did not take the files in force up in time; the bodies
/// stay (still counted with the `PUT` bodies' pages).
pub fn settle(cores: usize) -> Result<(), u64> {
    if nf_texts::hook().is_none() {
        return Ok(());
    }
    let deadline = crate::arch::time::Deadline::after_ms(RETIRE_WAIT_MS);
    let mut w = WRITER.lock();
    if w.job.take().is_some() {
        log::info!("PUT: a replacement of the NF's files not started was dropped");
        w.done = Some(Err(NfPutError::Busy(0)));
    }
    loop {
        let late = retire(&mut w, cores);
        if w.retiring.is_none() {
            break;
        }
        if deadline.expired() {
            return Err(late);
        }
        crate::tlb::service();
        core::hint::spin_loop();
    }
    w.quitting = true;
    nf_texts::clear();
    w.bodies.clear();
    crate::setup::fib::release_uploads_now();
    Ok(())
}

/// Give back the body of the set replaced last once none of `cores` cores can read it;
/// returns the cores still late (a bit per core).
fn retire(w: &mut Writer, cores: usize) -> u64 {
    let Some((old, replaced)) = w.retiring.take() else {
        return 0;
    };
    match nf_texts::retired(old, cores) {
        // The replaced body's pages go back a step per poll (`release_uploads_step`).
        Ok(()) => {
            drop(replaced);
            0
        }
        Err((old, late)) => {
            w.retiring = Some((old, replaced));
            late
        }
    }
}

/// The answer to `GET /name`: `http::file_head` (the files' generation as `ETag`, the text's
/// lines as `X-Lines`), then the file's text in force (nothing when neither the bundle nor a
/// `PUT` gave it one), as many whole lines as `w` holds.
pub fn write_file(w: &mut dyn Write, name: &'static str) {
    // The management plane runs on the boot CPU, which also retires old sets (`poll`), never
    // while this runs: the value in force is safe to read here.
    let text = nf_texts::current().text(name).unwrap_or("");
    let kind = netstack::http::PutKind::NfFile(name);
    let head = netstack::http::file_head(kind, nf_texts::generation(), text.lines().count());
    let _ = w.write_str(&head);
    // A line and its newline in one write: `w` takes whole writes or none.
    for line in text.split_inclusive('\n') {
        let _ = w.write_str(line);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        let _ = w.write_str("\n");
    }
}
