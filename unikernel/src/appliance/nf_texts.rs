//! The texts of an image's own network function's files in force ([`NfTexts`]: the
//! appliance bundle's, each replaced by its last `PUT /NAME`), shared by every core as a
//! [`Shared`] value: each core makes its NF from them at its start and again, restarting it,
//! when a newer generation is published (`One::tick`). The `PUT` that publishes one is the
//! kernel's management plane's (`setup::nf_files`).

// The writer's half (`publish`, `retired`, the hook's check) is called by the kernel's
// management plane only, which the host rig does not build.
#![cfg_attr(not(target_os = "none"), allow(dead_code))]

use crate::dataplane::nf::{Retiring, Shared};
use crate::dataplane::MAX_CORES;
use netstack::config::nf_files::{BadFile, MAX_NF_FILES};

/// The texts of the network function's files in force: name and text of each file the bundle
/// carried or a `PUT` replaced, at most [`MAX_NF_FILES`].
#[derive(Clone, Debug, Default)]
pub struct NfTexts {
    files: heapless::Vec<(&'static str, &'static str), MAX_NF_FILES>,
}

impl NfTexts {
    /// No files.
    pub const fn new() -> NfTexts {
        NfTexts {
            files: heapless::Vec::new(),
        }
    }

    /// Name and text of each file, in the order they came (the NF applies them in its own).
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &'static str)> + Clone + '_ {
        self.files.iter().copied()
    }

    /// File `name`'s text, if it has one.
    pub fn text(&self, name: &str) -> Option<&'static str> {
        self.files.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
    }

    /// These texts with `name`'s replaced by `text` (or added). `None` when [`MAX_NF_FILES`]
    /// are there already (not reached: a name is one the NF declares, at most that many).
    pub fn with(&self, name: &'static str, text: &'static str) -> Option<NfTexts> {
        let mut next = self.clone();
        match next.files.iter_mut().find(|(n, _)| *n == name) {
            Some(f) => f.1 = text,
            None => next.files.push((name, text)).ok()?,
        }
        Some(next)
    }
}

/// The image's own network function, as the management plane and this module reach it
/// without its type: its name, its files' names, and the check of a set of texts on a
/// throwaway instance. Registered once at boot (`appliance::One`); the stock image registers
/// none.
pub struct NfFilesHook {
    /// The NF's name.
    pub nf: &'static str,
    /// Its files' names, as it declares them.
    pub names: heapless::Vec<&'static str, MAX_NF_FILES>,
    /// Parse `texts` into a fresh instance (default, keys, then the files in the NF's order).
    ///
    /// # Errors
    /// [`BadFile`]: the file and line its parser refused.
    pub check: fn(&NfTexts) -> Result<(), BadFile>,
}

static HOOK: spin::Once<NfFilesHook> = spin::Once::new();

/// The two values [`TEXTS`] switches between: the one in force, and the one the next `PUT`
/// writes once the previous retired (so no core reads the one written). The lock is for
/// writing a free slot in safe code; no two CPUs ever want it at once.
static SLOTS: [spin::Mutex<NfTexts>; 2] = [
    spin::Mutex::new(NfTexts::new()),
    spin::Mutex::new(NfTexts::new()),
];

/// The texts in force, generation 1 at boot (the bundle's).
static TEXTS: Shared<spin::Mutex<NfTexts>, MAX_CORES> = Shared::new(&SLOTS[0]);

/// Boot: the image's own NF is `hook`.
pub fn register(hook: NfFilesHook) {
    HOOK.call_once(|| hook);
}

/// The image's own NF, if the image has one.
pub fn hook() -> Option<&'static NfFilesHook> {
    HOOK.get()
}

/// Boot, before any core starts: the bundle's texts of the NF's files (checked).
pub fn boot(texts: NfTexts) {
    *TEXTS.current().lock() = texts;
}

/// Core `core` at its quiescent point (its tick, or its start): the texts in force and their
/// generation if it has not taken this generation up yet (0 before its first read). The texts
/// stay valid until the core records a newer generation ([`taken`]).
pub fn newer(core: usize) -> Option<(u64, NfTexts)> {
    let (generation, slot) = TEXTS.peek();
    (generation != TEXTS.recorded(core)).then(|| (generation, slot.lock().clone()))
}

/// The texts in force and their generation, for a core making its NF at its start (which
/// then records the generation: [`taken`]).
pub fn in_force() -> (u64, NfTexts) {
    let (generation, slot) = TEXTS.peek();
    (generation, slot.lock().clone())
}

/// Core `core` made its NF from the texts of `generation` and holds no older ones.
pub fn taken(core: usize, generation: u64) {
    TEXTS.record(core, generation);
}

/// The generation of the texts in force (1: the bundle's).
pub fn generation() -> u64 {
    TEXTS.generation()
}

/// Boot CPU (the writer, one at a time): publish `next` in place of the texts in force, into
/// the slot not in force (free: the set it held retired before, [`retired`]). Returns the old
/// value, to give to [`retired`].
pub fn publish(next: NfTexts) -> Retiring<spin::Mutex<NfTexts>> {
    let free = if core::ptr::eq(TEXTS.current(), &SLOTS[0]) {
        &SLOTS[1]
    } else {
        &SLOTS[0]
    };
    *free.lock() = next;
    TEXTS.publish(free)
}

/// Boot CPU (`quit`, once every core took the texts in force up and none will be
/// published): both values emptied, before the bodies their texts point into go back.
pub fn clear() {
    for slot in &SLOTS {
        *slot.lock() = NfTexts::new();
    }
}

/// The texts in force, read by the writer's CPU (which frees nothing while it reads).
pub fn current() -> NfTexts {
    TEXTS.current().lock().clone()
}

/// Whether the old value `r` can no longer be read by any of the first `cores` cores: then
/// the body its text came from may go back. `Err` gives `r` back, with the late cores.
///
/// # Errors
/// `(r, late)` while a core is late (a bit per core).
pub fn retired(
    r: Retiring<spin::Mutex<NfTexts>>,
    cores: usize,
) -> Result<(), (Retiring<spin::Mutex<NfTexts>>, u64)> {
    let late = TEXTS.late(&r, cores);
    TEXTS.retired(r, cores).map(|_| ()).map_err(|r| (r, late))
}
