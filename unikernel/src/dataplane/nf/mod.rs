//! The network-function API: what a user writes to put their own function (a filter, a
//! monitor, a rewriter) on Gannet's cores, and what the stock `io` and `l2` modes are written
//! on ([`builtin`]).
//!
//! A network function ([`NetworkFunction`]) is a value per forwarding core (its own state,
//! never shared: Click's most reported multicore bug was a shared NAT table) that the core's
//! poll iteration runs through [`Core::poll_nf`](super::Core::poll_nf):
//!
//! 1. **Per frame**, inside the receiving driver's fused RX→TX loop,
//!    [`NetworkFunction::process`] sees the frame as a [`Packet`] (typed, zero-copy header
//!    views over the frame's bytes) and returns a [`Verdict`]: forward it out of the pair's
//!    other port (rewritten in place, zero copy), drop it, keep it for later, or give it to the
//!    management plane. `process` is monomorphised and inlined into the loop, as Linux runs an
//!    XDP program per frame and DPDK's graph nodes own their verdict: no indirect call per
//!    frame (the NF is a type parameter, never a `dyn`).
//! 2. **Per burst**, once the fused loops of both ports are done (the devices are no longer
//!    the burst's), [`NetworkFunction::end_of_burst`] gets what it kept as owned [`Held`]
//!    packets through a [`Ctx`], and may send them on either port, drop them, or hold them in
//!    its own state (the slow path: the router's deferred list has this shape).
//! 3. **Per tick** (every 10 ms, busy or idle: the kernel's housekeeping),
//!    [`NetworkFunction::tick`] runs its timers with the same [`Ctx`].
//!
//! Read-mostly state every core's NF reads (a table, a rule set) and the control plane replaces
//! live is a [`Shared`] value: published, switched to by each core at its quiescent point
//! through a [`Reader`], and handed back to the writer once every core moved on (RCU, as the
//! router's FIB reload does).
//!
//! Frames shorter than [`NetworkFunction::MIN_FRAME`] (at least an Ethernet header) never reach
//! `process`: they are dropped and counted (`runt`) by the loop, whose length test folds the
//! bound in. So the bounds are checked once per frame, and [`Packet::eth`] needs no check.
//!
//! **Counters of its own.** An NF declares what it counts in [`NetworkFunction::COUNTERS`]
//! (names, help with the unit, plain or per index: [`CounterDef`]) and keeps them in its own
//! state, `+= 1` in `process` (nothing else per frame). The kernel reads them through
//! [`NetworkFunction::counters`] every 10 ms and before `quit` into the core's snapshot; `STATS`
//! sums them over the cores under the NF's name (`"nf_name":"port_filter",
//! "nf_counters":{"blocked":10}`) and `/metrics` names each `gannet_nf_<nf>_<counter>_total`.
//! The names are checked at compile time (`netstack::stats::check_counters`).
//!
//! Every page stays owned: a forwarded frame is the TX ring's, a dropped one goes back to its
//! page_pool, a kept one is a [`Held`] (the [`PageBuf`](super::PageBuf) token inside, which
//! debug builds refuse to drop). No page number and no `unsafe` appear in this API.
//!
//! A frame of several pages (a jumbo MTU) is shown to `process` with its first page's bytes
//! ([`Packet::head`], every header in them) and its whole length; forwarded, kept
//! ([`Held::segments`]) or given to the management plane, it keeps its pages (at most
//! [`MAX_TAKEN_MULTI`] such frames kept per poll iteration). The NF runs on a port pair
//! (local ports 0 and 1).

mod acl_impl;
mod acl_table;
mod builtin_impl;
mod chain;
mod fw_impl;
mod handles;
mod nat_impl;
mod ops;
mod packet;
mod shared;
mod stash;
mod steer;

pub use super::nf_side::{NfCounters, MAX_TAKEN, MAX_TAKEN_MULTI};
pub use crate::dataplane::held::{Held, Stash, StashHandle};
pub use chain::{Chain, Quiet};
pub use netstack::config::keys::KeyError;
pub use netstack::config::nf_files::{FileError, NfFile};
pub use netstack::config::nf_keys::NfKey;
pub use netstack::stats::{CounterDef, CounterValues, PerIndex};
pub(crate) use ops::Capped;
pub use ops::Ctx;
pub use packet::Packet;
pub use shared::{Reader, Retiring, Shared};
pub use steer::{for_address, MgmtSteer};

/// The stock network functions `io`, `l2`, `acl`, `nat` and `firewall` (`mode=io`,
/// `mode=l2`, `mode=acl`, `mode=nat`, `mode=firewall`), written on this API.
pub mod builtin {
    pub use super::acl_impl::{Acl, AclBuildError, AclCore, AclTable, ACL, STATS_RULES};
    pub use super::builtin_impl::{Io, L2};
    pub use super::fw_impl::{install_firewall, take_firewall, FirewallNf, DROP_NAMES};
    pub use super::nat_impl::{
        boot_nat_timeouts, install_nat, nat_timeouts, request_nat_show, request_nat_timeouts,
        take_nat, take_nat_show, take_nat_timeouts, NatNf, SHOW_MAX, TICK_SWEEP,
    };
}

/// What [`NetworkFunction::process`] decided for one frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Verdict {
    /// Send the frame, as rewritten in place, out of the pair's other port
    /// ([`Packet::out_port`]), zero copy.
    Forward,
    /// [`Verdict::Forward`] of the frame's first `n` bytes only (cut Ethernet padding; `n` is
    /// capped at the frame's length).
    ForwardFirst(usize),
    /// Drop the frame: its page goes back to its pool, counted in [`NfCounters::dropped`].
    /// The NF counts its own reason in its own counters.
    Drop,
    /// Keep the frame: it is handed to [`NetworkFunction::end_of_burst`] as a [`Held`] packet
    /// once the burst is over (counted in [`NfCounters::kept`]).
    Keep,
    /// Give the frame to the management plane of its port (a copy; the page goes back to its
    /// pool), counted in [`NfCounters::to_mgmt`]; with no management plane on the port, in
    /// [`NfCounters::mgmt_unavailable`].
    ToMgmt,
}

/// A network function: per-core state and its per-frame, per-burst and per-tick work. See
/// the [module documentation](self) for when each runs.
///
/// ```
/// use unikernel::dataplane::nf::{NetworkFunction, Packet, Verdict};
///
/// use unikernel::dataplane::nf::{CounterDef, CounterValues};
///
/// /// Drops UDP datagrams to one port, forwards everything else; counts what it drops.
/// struct DropUdpPort {
///     port: u16,
///     dropped: u64,
/// }
///
/// impl NetworkFunction for DropUdpPort {
///     const NAME: &'static str = "drop_udp_port";
///     const COUNTERS: &'static [CounterDef] =
///         &[CounterDef::one("udp_dropped", "UDP datagrams to the port, dropped (frames).")];
///     fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
///         match pkt.udp() {
///             Some(udp) if udp.dst_port() == self.port => {
///                 self.dropped += 1;
///                 Verdict::Drop
///             }
///             _ => Verdict::Forward,
///         }
///     }
///     fn counters(&self, out: &mut CounterValues) {
///         out.set(0, self.dropped);
///     }
/// }
/// ```
pub trait NetworkFunction {
    /// The NF's name (lowercase, `[a-z0-9_]`): what `mode=` selects and the prefix of its
    /// counters.
    const NAME: &'static str;
    /// Frames shorter than this (bytes) are dropped as `runt` before [`Self::process`]; at
    /// least an Ethernet header (14, IEEE 802.3 §3.1.1), which is checked at compile time.
    const MIN_FRAME: usize = netstack::wire::ETH_HDR_LEN;
    /// Run [`Self::end_of_burst`] after every poll iteration that received frames, not only
    /// after those that kept one (an NF with deferred work of its own). Default `false`: an
    /// iteration that kept nothing pays one test for the hook.
    const EVERY_BURST: bool = false;
    /// Whether [`Self::process`] may return [`Verdict::Keep`] or [`Verdict::ToMgmt`]. `false`
    /// (an NF that only forwards and drops, like the stock `io` and `l2`) saves the
    /// iteration's test for kept frames; a `Keep` or `ToMgmt` from it is then counted as a
    /// drop. Default `true`.
    const TAKES: bool = true;
    /// Whether [`Self::process`] reads the time ([`Packet::now_ns`]: a neighbour's last use,
    /// a flow's age). `true` reads the clock once per burst, when it has frames; `false` (the
    /// default) never on the fast path, and `now_ns` is 0.
    const CLOCK: bool = false;
    /// Whether it hands frames to other cores ([`Ctx::hand_off`]: a flow whose state another
    /// core owns). `true` makes each poll iteration test the core's hand-off ring (one load)
    /// and give what arrived to [`Self::handed`]; `false` (the default) compiles both out.
    const HANDS_OFF: bool = false;
    /// The counters it declares (at most 12, 64 values in all; gauges too, `CounterDef::gauge`; names `[a-z][a-z0-9_]*`),
    /// whose values [`Self::counters`] writes: in `STATS` under `nf_counters` and in `/metrics`
    /// as `gannet_nf_<NAME>_<counter>_total`. Stable names: dashboards use them. Default:
    /// none.
    const COUNTERS: &'static [CounterDef] = &[];

    /// One received frame, at least [`Self::MIN_FRAME`] bytes: rewrite it in place through
    /// `pkt` and decide. Runs inside the driver's loop: keep it short and `#[inline]`; slow
    /// work goes to [`Verdict::Keep`] and [`Self::end_of_burst`].
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict;

    /// After a poll iteration that kept frames (or every busy one, [`Self::EVERY_BURST`]): the
    /// frames kept in it ([`Ctx::next_kept`]), to send, drop or hold; those it leaves are
    /// dropped (counted). Default: drop every kept frame.
    fn end_of_burst<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(h) = ctx.next_kept() {
            ctx.drop(h);
        }
    }

    /// A frame [`Self::process`] forwarded ([`Verdict::Forward`], [`Verdict::ForwardFirst`])
    /// that the egress port did not take: its TX ring was full (`tx_ring_full`), the frame is
    /// over its MTU (`over_mtu`) or its link is down (`link_down`), counted on the egress port,
    /// its pages recycled: for an NF that counts its forwards, to take this one back. Out of
    /// the fast path (the burst's cold give-back). Default: nothing.
    fn tx_refused(&mut self) {}

    /// A frame [`Self::process`] kept ([`Verdict::Keep`], with its mark) that the iteration's
    /// list had no room for (or a frame of several pages not laid out as one run): dropped,
    /// counted in `nf.keep_overflow` (or `bad_desc`), never handed to
    /// [`Self::end_of_burst`]. Out of the fast path. Default: nothing.
    fn keep_lost(&mut self, mark: u16) {
        let _ = mark;
    }

    /// A frame another core's instance handed to this one ([`Ctx::hand_off`], its mark in
    /// [`Held::mark`], its port the one it came in on there), after this core's bursts: send,
    /// drop or hold it. Only with [`Self::HANDS_OFF`]. Default: drop it.
    fn handed<P: super::Platform>(&mut self, h: Held, ctx: &mut Ctx<'_, P>) {
        ctx.drop(h);
    }

    /// Every 10 ms, busy or idle (`now_ns`: [`Ctx::now_ns`]): timers. Default: nothing.
    fn tick<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        let _ = ctx;
    }

    /// The command-line keys this NF owns (an image of one's own, [`crate::main!`]): each
    /// parses its value into the NF. The kernel checks them at boot (an unknown key, a repeat
    /// or a bad value stops the boot naming the key, as the kernel's own keys do) and every
    /// forwarding core applies them, in order, to its `Default` instance before its first
    /// frame. Default: none. A name that is one of the kernel's keys is refused at boot.
    ///
    /// ```
    /// use unikernel::dataplane::nf::{KeyError, NetworkFunction, NfKey, Packet, Verdict};
    ///
    /// #[derive(Default)]
    /// struct DropUdpPort(u16);
    ///
    /// /// `blocked_port=N`: the UDP destination port dropped.
    /// const KEYS: &[NfKey<DropUdpPort>] = &[NfKey::new("blocked_port", |nf, v| {
    ///     nf.0 = v.parse().map_err(|_| KeyError::Expected("a port in 0..=65535"))?;
    ///     Ok(())
    /// })];
    ///
    /// impl NetworkFunction for DropUdpPort {
    ///     const NAME: &'static str = "drop_udp_port";
    ///     fn keys() -> &'static [NfKey<Self>] {
    ///         KEYS
    ///     }
    ///     fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
    ///         match pkt.udp() {
    ///             Some(udp) if udp.dst_port() == self.0 => Verdict::Drop,
    ///             _ => Verdict::Forward,
    ///         }
    ///     }
    /// }
    /// ```
    fn keys() -> &'static [NfKey<Self>]
    where
        Self: Sized + 'static,
    {
        &[]
    }

    /// The files this NF reads from the appliance bundle (an image of one's own: the boot
    /// module `#!gannet-bundle 1` with `--- NAME` files, `netstack::config::bundle`): each
    /// parses the file's text into the NF. The kernel refuses at boot a bundle carrying a file
    /// the NF does not declare, or a stock NF's file, and checks the declared ones on a
    /// throwaway instance (a bad line stops the boot naming the file and the line); every
    /// forwarding core applies them to its instance after its keys, before its first frame. A
    /// declared file the bundle does not carry changes nothing. Default: none.
    ///
    /// ```
    /// use unikernel::dataplane::nf::{FileError, NetworkFunction, NfFile, Packet, Verdict};
    ///
    /// #[derive(Default)]
    /// struct DropUdpPorts {
    ///     ports: [u16; 8],
    ///     n: usize,
    /// }
    ///
    /// /// `--- blocked_ports`: up to 8 UDP destination ports, one per line, dropped.
    /// const FILES: &[NfFile<DropUdpPorts>] = &[NfFile::new("blocked_ports", |nf, text| {
    ///     for (i, line) in text.lines().enumerate() {
    ///         let bad = |expected| FileError { line: i + 1, expected };
    ///         let port = line.trim().parse().map_err(|_| bad("a port in 0..=65535"))?;
    ///         *nf.ports.get_mut(nf.n).ok_or(bad("at most 8 ports"))? = port;
    ///         nf.n += 1;
    ///     }
    ///     Ok(())
    /// })];
    ///
    /// impl NetworkFunction for DropUdpPorts {
    ///     const NAME: &'static str = "drop_udp_ports";
    ///     fn files() -> &'static [NfFile<Self>] {
    ///         FILES
    ///     }
    ///     fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
    ///         match pkt.udp() {
    ///             Some(udp) if self.ports[..self.n].contains(&udp.dst_port()) => Verdict::Drop,
    ///             _ => Verdict::Forward,
    ///         }
    ///     }
    /// }
    /// ```
    fn files() -> &'static [NfFile<Self>]
    where
        Self: Sized + 'static,
    {
        &[]
    }

    /// The key named `name` among [`Self::keys`]: its name as declared and whether it may
    /// repeat. What the kernel looks keys up by, so that a composition ([`Chain`], [`Quiet`])
    /// answers for its parts' keys; an NF leaves the default.
    fn find_key(name: &str) -> Option<(&'static str, bool)>
    where
        Self: Sized + 'static,
    {
        Self::keys()
            .iter()
            .find(|k| k.name == name)
            .map(|k| (k.name, k.repeat))
    }

    /// Parse `value` for key `name` (one [`Self::find_key`] knows; another changes nothing)
    /// into this instance. An NF leaves the default (its key's parser).
    ///
    /// # Errors
    /// The key's parser's [`KeyError`].
    fn set_key(&mut self, name: &str, value: &str) -> Result<(), KeyError>
    where
        Self: Sized + 'static,
    {
        match Self::keys().iter().find(|k| k.name == name) {
            Some(k) => (k.parse)(self, value),
            None => Ok(()),
        }
    }

    /// Call `each` with the name of every key [`Self::find_key`] knows, in order. An NF leaves
    /// the default.
    fn key_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        for k in Self::keys() {
            each(k.name);
        }
    }

    /// The file named `name` among [`Self::files`]: its name as declared. As
    /// [`Self::find_key`], for files; an NF leaves the default.
    fn find_file(name: &str) -> Option<&'static str>
    where
        Self: Sized + 'static,
    {
        Self::files()
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.name)
    }

    /// Read `text` as file `name` (one [`Self::find_file`] knows; another changes nothing)
    /// into this instance. An NF leaves the default (its file's parser).
    ///
    /// # Errors
    /// The file's parser's [`FileError`].
    fn read_file(&mut self, name: &str, text: &str) -> Result<(), FileError>
    where
        Self: Sized + 'static,
    {
        match Self::files().iter().find(|f| f.name == name) {
            Some(f) => (f.parse)(self, text),
            None => Ok(()),
        }
    }

    /// Call `each` with the name of every file [`Self::find_file`] knows, in order. An NF
    /// leaves the default.
    fn file_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        for f in Self::files() {
            each(f.name);
        }
    }

    /// The deterministic benchmark's frame (`cargo xtask bench sim --image`): write the frame
    /// delivered on port 0 into `input` (all of it: `input.len()` bytes, the `sim_size=` frame
    /// without its FCS; port 0's MAC and its peer's are `macs[0]`, `peer[0]`) and what must
    /// leave port 1 for it into `want` (same length), and return `true`; `false` (the default)
    /// keeps the `mode=`'s frames (`netstack::simframes::bench_frames_into`). Runs once, before
    /// the warm-up, outside the measured iterations.
    fn bench_frames(
        macs: [netstack::MacAddr; 2],
        peer: [netstack::MacAddr; 2],
        input: &mut [u8],
        want: &mut [u8],
    ) -> bool {
        let _ = (macs, peer, input, want);
        false
    }

    /// This core's values of [`Self::COUNTERS`]: `out.set(i, v)` for plain counter `i` (its
    /// index in `COUNTERS`), `out.set_per_index(i, values)` for a per-index one. Called by the
    /// kernel every 10 ms and before `quit`, never per frame. Default: nothing (no counters).
    fn counters(&self, out: &mut CounterValues) {
        let _ = out;
    }

    /// Before `quit`: hand back every [`Held`] packet the NF still holds in its own state
    /// (send or drop it through `ctx`), so that every page is back when the pools are
    /// destroyed. Default: nothing (an NF that holds nothing).
    fn release_all<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        let _ = ctx;
    }
}

/// A network function borrowed for a while (the kernel's [`MgmtSteer`] in front of the NF a
/// caller owns): everything is the NF's.
impl<F: NetworkFunction> NetworkFunction for &mut F {
    const NAME: &'static str = F::NAME;
    const MIN_FRAME: usize = F::MIN_FRAME;
    const EVERY_BURST: bool = F::EVERY_BURST;
    const TAKES: bool = F::TAKES;
    const CLOCK: bool = F::CLOCK;
    const HANDS_OFF: bool = F::HANDS_OFF;
    const COUNTERS: &'static [CounterDef] = F::COUNTERS;

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        (**self).process(pkt)
    }

    fn handed<P: super::Platform>(&mut self, h: Held, ctx: &mut Ctx<'_, P>) {
        (**self).handed(h, ctx);
    }

    fn tx_refused(&mut self) {
        (**self).tx_refused();
    }

    fn keep_lost(&mut self, mark: u16) {
        (**self).keep_lost(mark);
    }

    fn counters(&self, out: &mut CounterValues) {
        (**self).counters(out);
    }

    fn end_of_burst<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        (**self).end_of_burst(ctx);
    }

    fn tick<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        (**self).tick(ctx);
    }

    fn release_all<P: super::Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        (**self).release_all(ctx);
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
