//! What every forwarding core of an image runs: an [`Appliance`]. The kernel's poll loop calls
//! [`Appliance::poll`] once per poll iteration, [`Appliance::tick`] every 10 ms (busy or idle,
//! after the core's own housekeeping) and [`Appliance::release`] once before `quit`'s phases.
//!
//! - [`Stock`]: the stock image's modes (`mode=io|l2|router`), [`StockAcl`] its `mode=acl`,
//!   [`StockNat`] its `mode=nat` and [`StockFirewall`] its `mode=firewall`.
//! - [`One<F>`]: one network function of the user's ([`NetworkFunction`] + `Default`), a value
//!   per core, run through `Core::poll_nf`; the kernel's management-plane steering goes in
//!   front of it when a core's ports carry a management address.
//!
//! An image names one in [`crate::main!`]; each is monomorphised into the poll loop (no
//! indirect call per iteration or per frame).

use crate::dataplane::nf::builtin::{
    take_firewall, take_nat, take_nat_show, take_nat_timeouts, AclCore, FirewallNf, NatNf, ACL,
    SHOW_MAX,
};
use crate::dataplane::nf::{Chain, FileError, KeyError, NetworkFunction, Quiet};
use crate::dataplane::{Core, Platform};
use core::marker::PhantomData;
use netstack::config::bundle::{self, Bundle, BundleError, NfFiles};
use netstack::config::nf_files::{self, BadFile, NfFileNames, NfFileSet};
use netstack::config::nf_keys::{apply, NfArgs, NfKeySet, NfKeys};

/// The tokens of the image's own network function's keys ([`NetworkFunction::keys`]), set
/// once by the boot's [`Appliance::parse_config`] for every core's [`Appliance::new_core`].
static NF_ARGS: spin::Once<NfArgs> = spin::Once::new();

pub(crate) mod nf_texts;

/// What a forwarding core runs, with its per-core state.
pub trait Appliance: 'static {
    /// Per-core state (a network function's), made once per core by [`Appliance::new_core`].
    type PerCore;
    /// Its name (a network function's [`NetworkFunction::NAME`]).
    const NAME: &'static str;
    /// Whether it is the stock image's [`Stock`], for which the kernel runs [`StockAcl`] when
    /// `mode=acl`.
    const STOCK: bool = false;
    /// What the boot log's forwarding line, `STATS` `nf_name` and the `/metrics` `nf` label
    /// call it under the configuration `cfg`: its [`Appliance::NAME`] (the stock image: the
    /// mode `mode=` chose).
    fn label(cfg: &netstack::Config) -> &'static str {
        let _ = cfg;
        Self::NAME
    }
    /// The kernel command line parsed for this image (`cmdline`: the loader's line with
    /// fw_cfg's keys laid over it): [`netstack::Config::parse`] (the stock image), or with a
    /// network function's own keys ([`NetworkFunction::keys`]).
    ///
    /// # Errors
    /// The [`netstack::ConfigError`] naming the key.
    fn parse_config(cmdline: &str) -> Result<netstack::Config, netstack::ConfigError<'_>> {
        netstack::Config::parse(cmdline)
    }
    /// After an unknown key's error: the keys of the image's own network function, as
    /// ` (NAME's keys: a b)`; nothing when it has none (the default).
    fn write_nf_keys(f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let _ = f;
        Ok(())
    }
    /// The boot module (`text`, kept for the kernel's life) read for this image under `mode`:
    /// the stock image's files ([`bundle::parse`]), or the files of the image's own network
    /// function ([`NetworkFunction::files`], [`bundle::parse_with`]).
    ///
    /// # Errors
    /// The [`BundleError`] naming the line and the file.
    fn read_bundle(
        text: &'static str,
        mode: netstack::config::Mode,
    ) -> Result<Bundle<'static>, BundleError<'static>> {
        bundle::parse(text, mode)
    }
    /// After a file's [`BundleError::NotDeclared`]: the files of the image's own network
    /// function, as ` (NAME's files: a b)`; nothing for the stock image (the default).
    fn write_nf_files(f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let _ = f;
        Ok(())
    }
    /// The bundle's files of the image's own network function, parsed on a throwaway instance
    /// and kept for every core's [`Appliance::new_core`]. The stock image reads its own
    /// (routes, rules) elsewhere: nothing here (the default).
    ///
    /// # Errors
    /// [`BadFile`]: the file and line its parser refused.
    fn accept_files(bundle: &Bundle<'static>) -> Result<(), BadFile> {
        let _ = bundle;
        Ok(())
    }
    /// The state for `core` (its pair number and configuration are there), once the core's
    /// ports are up.
    fn new_core<P: Platform>(core: &Core<P>) -> Self::PerCore;
    /// One poll iteration: receive, decide, send. Returns the work done (frames and pages
    /// moved); 0 means idle (the loop may halt).
    fn poll<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) -> usize;
    /// Every 10 ms, busy or idle, after the core's own housekeeping: timers.
    fn tick<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) {
        let _ = (state, core);
    }
    /// Once, when `quit` starts and before its phases: hand back every frame held.
    fn release<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) {
        let _ = (state, core);
    }
    /// The deterministic benchmark's frames, if the appliance brings its own (see
    /// [`NetworkFunction::bench_frames`]); `false` (the default): the `mode=`'s.
    fn bench_frames(
        macs: [netstack::MacAddr; 2],
        peer: [netstack::MacAddr; 2],
        input: &mut [u8],
        want: &mut [u8],
    ) -> bool {
        let _ = (macs, peer, input, want);
        false
    }
}

/// The stock image: `mode=` chooses `io`, `l2` or the router, each as `Core::poll_once` runs
/// it (the router's timers run in the core's own housekeeping), or the ACL firewall, which the
/// kernel runs as [`StockAcl`] (chosen once at boot: no per-iteration test of the mode).
#[derive(Debug)]
pub struct Stock;

impl Appliance for Stock {
    type PerCore = ();
    const NAME: &'static str = "stock";
    const STOCK: bool = true;

    fn label(cfg: &netstack::Config) -> &'static str {
        cfg.mode.as_str()
    }

    fn new_core<P: Platform>(_core: &Core<P>) {}

    #[inline(always)]
    fn poll<P: Platform>(_state: &mut (), core: &mut Core<P>) -> usize {
        core.poll_once()
    }
}

/// The stock image's `mode=acl`: `nf::builtin::Acl` over the published rule set
/// (`nf::builtin::ACL`), through `Core::poll_nf`; each core switches to a replaced set in its
/// tick (`AclCore::refresh`). Without a rule set it forwards nothing (the kernel refuses
/// `mode=acl` without one before any core starts).
#[derive(Debug)]
pub struct StockAcl;

impl Appliance for StockAcl {
    type PerCore = Option<AclCore>;
    const NAME: &'static str = "acl";

    fn new_core<P: Platform>(core: &Core<P>) -> Option<AclCore> {
        ACL.get().map(|s| AclCore::new(s, core.pair()))
    }

    #[inline(always)]
    fn poll<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) -> usize {
        match acl {
            Some(acl) => core.poll_nf(&mut acl.nf),
            None => 0,
        }
    }

    /// The rules' hits into the core's snapshot (`Acl` has no timers), then this core's
    /// quiescent point: a replaced rule set is taken up here, between poll iterations.
    fn tick<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) {
        if let Some(acl) = acl {
            core.read_nf_counters(&acl.nf);
            if acl.refresh() {
                core.read_nf_counters(&acl.nf);
            }
        }
    }

    /// The rules' hits a last time, for the final `STATS` (`Acl` holds no frame).
    fn release<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) {
        if let Some(acl) = acl {
            core.read_nf_counters(&acl.nf);
        }
    }
}

/// The stock image's `mode=router` with a rules file: the ACL in front of the router, composed
/// at compile time (`nf::Chain<&mut Acl, RouterNf>` through `Core::poll_route_after`), over the
/// published rule set as in [`StockAcl`] (each core takes a replaced set up in its tick). The
/// ACL's per-rule hits are its counters, under this appliance's name (`STATS` `nf_name`
/// `acl_router`, `/metrics` `gannet_nf_acl_router_rule_hits_total`); the router's are `STATS`
/// `router`.
#[derive(Debug)]
pub struct StockAclRouter;

impl Appliance for StockAclRouter {
    type PerCore = Option<AclCore>;
    const NAME: &'static str = "acl_router";

    fn new_core<P: Platform>(core: &Core<P>) -> Option<AclCore> {
        ACL.get().map(|s| AclCore::new(s, core.pair()))
    }

    #[inline(always)]
    fn poll<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) -> usize {
        match acl {
            Some(acl) => core.poll_route_after(&mut acl.nf),
            None => core.poll_once(),
        }
    }

    /// As [`StockAcl::tick`]: the hits, and a replaced rule set taken up.
    fn tick<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) {
        StockAcl::tick(acl, core);
    }

    /// The rules' hits a last time (the router's frames go back in `quit`'s phases).
    fn release<P: Platform>(acl: &mut Option<AclCore>, core: &mut Core<P>) {
        StockAcl::release(acl, core);
    }
}

/// The stock image's `mode=nat`: `nf::builtin::NatNf` (NAT44, port 0 inside, port 1 outside)
/// through `Core::poll_nf`, over the translator the boot built for this core
/// (`setup::nat`). Without one it forwards nothing (the boot stops before any core starts
/// when the NAT cannot be built).
#[derive(Debug)]
pub struct StockNat;

impl Appliance for StockNat {
    type PerCore = Option<NatNf>;
    const NAME: &'static str = "nat";

    fn new_core<P: Platform>(core: &Core<P>) -> Option<NatNf> {
        let nat = take_nat(core.pair())?;
        Some(NatNf::new(nat, core.macs, core.cfg().peer))
    }

    #[inline(always)]
    fn poll<P: Platform>(nat: &mut Option<NatNf>, core: &mut Core<P>) -> usize {
        match nat {
            Some(nf) => core.poll_nf(nf),
            None => 0,
        }
    }

    /// New timeouts when the console set them (`nat timeouts …`), the expiry sweep's tick and
    /// the counters into the core's snapshot; the session listing when the console asked
    /// (`nat [FILTER]`).
    fn tick<P: Platform>(nat: &mut Option<NatNf>, core: &mut Core<P>) {
        if let Some(nf) = nat {
            if let Some(t) = take_nat_timeouts(core.pair()) {
                nf.set_timeouts(t);
                log::info!(
                    "nat cpu {} timeouts now {},{},{},{} s",
                    core.pair(),
                    t.tcp_established,
                    t.tcp_transitory,
                    t.udp,
                    t.icmp
                );
            }
            core.tick_nf(nf);
            if let Some(f) = take_nat_show(core.pair()) {
                let emit = &mut |line: core::fmt::Arguments<'_>| log::info!("{line}");
                nf.show_sessions(core.pair(), &f, P::uptime_ns(), SHOW_MAX, emit);
            }
        }
    }

    /// The counters a last time and the frames kept (none between bursts).
    fn release<P: Platform>(nat: &mut Option<NatNf>, core: &mut Core<P>) {
        if let Some(nf) = nat {
            core.release_nf(nf);
        }
    }
}

/// The stock image's `mode=firewall`: `nf::builtin::FirewallNf` (port 0 inside, port 1
/// outside, frames untouched) through `Core::poll_nf`, over the connection table the boot
/// built for this core (`setup::firewall`); with a rules file, the ACL in front as its
/// stateless first stage (`nf::Chain<nf::Quiet<&mut Acl>, &mut FirewallNf>`: the rule hits
/// stay the ACL's, the console's `acl`; a replaced rule set is taken up in the tick as in
/// [`StockAcl`]). Without a table it forwards nothing.
#[derive(Debug)]
pub struct StockFirewall;

impl Appliance for StockFirewall {
    type PerCore = Option<(FirewallNf, Option<AclCore>)>;
    const NAME: &'static str = "firewall";

    fn new_core<P: Platform>(core: &Core<P>) -> Self::PerCore {
        let fw = FirewallNf::new(take_firewall(core.pair())?);
        Some((fw, ACL.get().map(|s| AclCore::new(s, core.pair()))))
    }

    #[inline(always)]
    fn poll<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) -> usize {
        match state {
            Some((fw, Some(acl))) => core.poll_nf(&mut Chain::new(Quiet(&mut acl.nf), fw)),
            Some((fw, None)) => core.poll_nf(fw),
            None => 0,
        }
    }

    /// The expiry sweep's tick and the counters into the core's snapshot; a replaced rule
    /// set taken up.
    fn tick<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) {
        if let Some((fw, acl)) = state {
            core.tick_nf(fw);
            if let Some(acl) = acl {
                acl.refresh();
            }
        }
    }

    /// The counters a last time (the firewall holds no frame).
    fn release<P: Platform>(state: &mut Self::PerCore, core: &mut Core<P>) {
        if let Some((fw, _)) = state {
            core.release_nf(fw);
        }
    }
}

/// One network function `F` on every core: `F::default()` per core, run by `Core::poll_nf`
/// (per frame `F::process` inlined into the driver's fused loop), `F::tick` every 10 ms and
/// `F::release_all` before `quit`, its counters read after each (`Core::tick_nf`,
/// `Core::release_nf`).
pub struct One<F>(PhantomData<F>);

/// An NF instance's keys and files as the kernel's readers look them up
/// (`netstack::config::nf_keys::NfKeySet`, `nf_files::NfFileSet`): through the NF's
/// `find_key`/`set_key`/`find_file`/`read_file`, so a chain answers for its parts.
struct Parts<'a, F>(&'a mut F);

impl<F: NetworkFunction + 'static> NfKeySet for Parts<'_, F> {
    fn find(&self, name: &str) -> Option<(&'static str, bool)> {
        F::find_key(name)
    }

    fn parse(&mut self, name: &str, value: &str) -> Result<(), KeyError> {
        self.0.set_key(name, value)
    }

    fn names(&self, each: &mut dyn FnMut(&'static str)) {
        F::key_names(each);
    }
}

impl<F: NetworkFunction + 'static> NfFileNames for Parts<'_, F> {
    fn find(&self, name: &str) -> Option<&'static str> {
        F::find_file(name)
    }

    fn names(&self, each: &mut dyn FnMut(&'static str)) {
        F::file_names(each);
    }
}

impl<F: NetworkFunction + 'static> NfFileSet for Parts<'_, F> {
    fn parse(&mut self, name: &str, text: &str) -> Result<(), FileError> {
        self.0.read_file(name, text)
    }
}

/// The names of `F`'s files, with no instance (the bundle is read before any).
struct FileNamesOf<F>(PhantomData<F>);

impl<F: NetworkFunction + 'static> NfFileNames for FileNamesOf<F> {
    fn find(&self, name: &str) -> Option<&'static str> {
        F::find_file(name)
    }

    fn names(&self, each: &mut dyn FnMut(&'static str)) {
        F::file_names(each);
    }
}

/// Names for a boot message, each written after a space (at most 32 kept, then `…`).
struct NameList {
    names: heapless::Vec<&'static str, 32>,
    more: bool,
}

impl NameList {
    fn new() -> Self {
        NameList {
            names: heapless::Vec::new(),
            more: false,
        }
    }

    fn push(&mut self, name: &'static str) {
        self.more |= self.names.push(name).is_err();
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

impl core::fmt::Display for NameList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for n in &self.names {
            write!(f, " {n}")?;
        }
        if self.more {
            write!(f, " …")?;
        }
        Ok(())
    }
}

impl<F: NetworkFunction + Default + 'static> Appliance for One<F> {
    type PerCore = F;
    const NAME: &'static str = F::NAME;

    fn parse_config(cmdline: &str) -> Result<netstack::Config, netstack::ConfigError<'_>> {
        // The values are checked on a throwaway instance; each core applies them to its own.
        let mut probe = F::default();
        let keys = NfKeys {
            nf: F::NAME,
            keys: &mut Parts(&mut probe),
        };
        let (cfg, args) = netstack::Config::parse_with(cmdline, Some(keys))?;
        NF_ARGS.call_once(|| args);
        let mut names = heapless::Vec::new();
        // At most MAX_NF_FILES: the names of the files the NF declares.
        F::file_names(&mut |n| {
            let _ = names.push(n);
        });
        nf_texts::register(nf_texts::NfFilesHook {
            nf: F::NAME,
            names,
            check: |texts| make::<F>(texts).map(drop),
        });
        Ok(cfg)
    }

    fn write_nf_keys(f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut names = NameList::new();
        F::key_names(&mut |k| names.push(k));
        if names.is_empty() {
            return Ok(());
        }
        write!(f, " ({}'s keys:{names})", F::NAME)
    }

    fn read_bundle(
        text: &'static str,
        mode: netstack::config::Mode,
    ) -> Result<Bundle<'static>, BundleError<'static>> {
        let nf = NfFiles {
            nf: F::NAME,
            files: &FileNamesOf::<F>(PhantomData),
        };
        bundle::parse_with(text, mode, Some(nf))
    }

    fn write_nf_files(f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut names = NameList::new();
        F::file_names(&mut |n| names.push(n));
        if names.is_empty() {
            return write!(f, " ({} reads no files)", F::NAME);
        }
        write!(f, " ({}'s files:{names})", F::NAME)
    }

    fn accept_files(bundle: &Bundle<'static>) -> Result<(), BadFile> {
        // Checked after the keys, on a throwaway instance, in the order each core applies them.
        let mut texts = nf_texts::NfTexts::new();
        for (name, text) in bundle.files().filter(|&(n, _)| F::find_file(n).is_some()) {
            // Not reached: the bundle holds at most MAX_NF_FILES, each declared.
            texts = texts.with(name, text).unwrap_or(texts);
        }
        make::<F>(&texts)?;
        F::file_names(&mut |name| {
            if let Some(text) = bundle.file(name) {
                let n = text.lines().count();
                log::info!(
                    "{}: file `{name}` read ({n} lines, checked; every core applies it)",
                    F::NAME,
                );
            }
        });
        nf_texts::boot(texts);
        Ok(())
    }

    /// `F::default()` with the NF's keys of the command line applied, then its files in force
    /// (`nf_texts`: the bundle's, accepted by [`Appliance::accept_files`], or a `PUT`'s
    /// since).
    fn new_core<P: Platform>(core: &Core<P>) -> F {
        let (generation, texts) = nf_texts::in_force();
        let nf = make::<F>(&texts).unwrap_or_else(|e| {
            // Not reached: the boot (or the `PUT`) checked the same files in the same order
            // on an instance of the same type. Said, not hidden, if a parser depends on more.
            log::warn!("{}: core {}: {e}", F::NAME, core.pair());
            F::default()
        });
        nf_texts::taken(core.pair(), generation);
        nf
    }

    #[inline(always)]
    fn poll<P: Platform>(nf: &mut F, core: &mut Core<P>) -> usize {
        core.poll_nf(nf)
    }

    /// The NF's timers and counters; then, when a `PUT` published new files, the NF restarted
    /// with them (`Core::restart_nf`: the old instance's frames handed back, its counts
    /// carried on).
    fn tick<P: Platform>(nf: &mut F, core: &mut Core<P>) {
        core.tick_nf(nf);
        let Some((generation, texts)) = nf_texts::newer(core.pair()) else {
            return;
        };
        match make::<F>(&texts) {
            Ok(fresh) => {
                core.restart_nf(nf, fresh);
                log::info!(
                    "{}: cpu {}: files of generation {generation} taken up (the NF restarted)",
                    F::NAME,
                    core.pair()
                );
            }
            // Not reached (checked by the `PUT`): the old instance keeps running.
            Err(e) => log::warn!(
                "{}: cpu {}: {e}; the NF keeps its files",
                F::NAME,
                core.pair()
            ),
        }
        nf_texts::taken(core.pair(), generation);
    }

    fn release<P: Platform>(nf: &mut F, core: &mut Core<P>) {
        core.release_nf(nf);
    }

    fn bench_frames(
        macs: [netstack::MacAddr; 2],
        peer: [netstack::MacAddr; 2],
        input: &mut [u8],
        want: &mut [u8],
    ) -> bool {
        F::bench_frames(macs, peer, input, want)
    }
}

/// A fresh instance of `F` as every core makes one: `F::default()`, the NF's keys of the
/// command line applied (`NF_ARGS`, accepted at boot by [`Appliance::parse_config`]), then
/// `texts`, its files in force, in the order `F` declares them.
///
/// # Errors
/// [`BadFile`]: the file and line its parser refused.
fn make<F: NetworkFunction + Default + 'static>(texts: &nf_texts::NfTexts) -> Result<F, BadFile> {
    let mut nf = F::default();
    let args = NF_ARGS.get().map_or("", |a| a.as_str());
    if let Err(e) = apply(args, &mut Parts(&mut nf)) {
        // Not reached: the boot refused bad keys before any instance is made (the same tokens,
        // the same type). Said, not hidden, if an NF's parser depends on more than its value.
        log::warn!("{}: {e}", F::NAME);
    }
    nf_files::apply(texts.files(), &mut Parts(&mut nf))?;
    Ok(nf)
}

/// What [`crate::main!`] accepts: an [`Appliance`], or a network function (run as [`One`]).
pub trait IntoAppliance {
    /// The appliance the image runs.
    type Appliance: Appliance;
}

impl IntoAppliance for Stock {
    type Appliance = Stock;
}

impl<F: NetworkFunction + Default + 'static> IntoAppliance for F {
    type Appliance = One<F>;
}
