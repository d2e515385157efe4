//! The stock NAT44 gateway (`mode=nat`): [`netstack::nat::Nat`] (NAPT with
//! endpoint-independent mapping, RFC 4787/5382/5508/7857; sans-IO, host-tested) run as a
//! network function, one per forwarding core over storage carved from the zone at boot
//! (`setup::nat`).
//!
//! Shape: a gateway between two links, port 0 the inside, port 1 the outside. A frame from
//! the inside is translated outbound and leaves port 1 to `peer1` (the outside next hop); a
//! frame from the outside is translated inbound and leaves port 0 to `peer0` (the inside next
//! hop: a router or the one host), as `l2` writes its MACs. The NAT answers ARP requests on the
//! outside for its pool addresses (RFC 826), so the outside link delivers their traffic to it.
//! A hairpin (inside to a pool address) is translated twice and goes back out of port 0. The
//! management plane (`ip0=`/`ip1=`, `mgmt=`) is steered in front of the NAT as for any NF.
//!
//! Per frame (`process`, in the fused loop): one `Nat::translate` on the frame's bytes, then
//! the MACs. ARP requests for the pool and hairpins are kept and finished after the burst
//! (`end_of_burst`: they leave by the port they came in on). Every drop is counted by reason
//! (`drops`, indexed as `netstack::nat::NatDrop::NAMES`), every other frame the NAT does not
//! translate in `not_translated`.
//!
//! Several cores per port pair (`queues=N`): the N cores share the flows as VPP's nat44-ei
//! does, each owning the inside addresses its hash names and a block of the outside ports
//! (`netstack::nat`, docs/DESIGN.md). A frame of a flow another core owns
//! (`Verdict::HandOff`) is kept and handed to that core after the burst (`Ctx::hand_off`,
//! the per-core hand-off rings), whose `handed` translates and sends it on its own queues.
//! With one queue pair per port, each port pair's core is a NAT of its own.

use super::{CounterDef, CounterValues, Ctx, NetworkFunction, Packet, Verdict};
use crate::dataplane::percore::Platform;
use crate::dataplane::slots::CoreSlots;
use crate::dataplane::MAX_CORES;
use core::sync::atomic::{AtomicBool, Ordering};
use netstack::conntrack::show::{Filter, Line};
use netstack::nat::{Ingress, Nat, NatDrop, Timeouts, Verdict as NatVerdict};
use netstack::router::arp;
use netstack::wire::{ETHERTYPE, ETHERTYPE_ARP, ETH_HDR_LEN};
use netstack::{MacAddr, MacRewrite, Mode};

/// The mark of a kept ARP request for a pool address (answered on its port).
const MARK_ARP: u16 = 1;
/// The mark of a kept hairpinned frame (translated twice, sent back inside).
const MARK_HAIRPIN: u16 = 2;
/// The mark of a kept frame another core owns: `MARK_HANDOFF | from << 8 | core`
/// ([`from_code`]); handed to that core after the burst with `from` as its mark.
const MARK_HANDOFF: u16 = 0x8000;

/// `from` as a hand-off's mark (0 inside, 1 outside, 2 hairpin).
fn from_code(from: Ingress) -> u16 {
    match from {
        Ingress::Inside => 0,
        Ingress::Outside => 1,
        Ingress::Hairpin => 2,
    }
}

/// A hand-off's mark as the `from` its owner translates it with (`None`: not one).
fn code_from(mark: u16) -> Option<Ingress> {
    match mark {
        0 => Some(Ingress::Inside),
        1 => Some(Ingress::Outside),
        2 => Some(Ingress::Hairpin),
        _ => None,
    }
}

/// What [`NatNf`] decided for a frame: the three [`Verdict`]s it gives.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
enum Step {
    Forward,
    Keep,
    Drop,
}

/// The stock NAT44 network function of one core (see the `nat_impl` module's documentation:
/// ports, ARP, hairpins, counters).
pub struct NatNf {
    nat: Nat<'static>,
    /// The MAC rewrite of a frame leaving port `p`: source the port's MAC, destination
    /// `peer` `p` ([`MacRewrite::words`]).
    words: [(u64, u32); 2],
    /// The outside port's MAC (the ARP replies' sender).
    outside_mac: MacAddr,
    /// ARP requests for a pool address answered.
    arp_replies: u64,
    /// Frames not translated and dropped: not IPv4 (and not an ARP request for the pool on
    /// the outside), a hand-off to another core.
    not_translated: u64,
}

impl core::fmt::Debug for NatNf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NatNf")
            .field("counters", self.nat.counters())
            .field("arp_replies", &self.arp_replies)
            .field("not_translated", &self.not_translated)
            .finish()
    }
}

/// The NAT's counters: `STATS` `nf_counters`, `/metrics` `gannet_nf_nat_<name>_total`.
const COUNTERS: &[CounterDef] = &[
    CounterDef::one("outbound", "Frames translated from the inside out (frames)."),
    CounterDef::one(
        "inbound",
        "Frames translated from the outside in, hairpins included (frames).",
    ),
    CounterDef::one(
        "hairpinned",
        "Frames from the inside to a pool address sent back inside (frames).",
    ),
    CounterDef::one(
        "icmp_errors",
        "ICMP errors translated with their quoted datagram, RFC 5508 (frames).",
    ),
    CounterDef::one("sessions_opened", "Sessions opened (sessions)."),
    CounterDef::per_index(
        "drops",
        "reason",
        NatDrop::COUNT,
        "Frames the NAT dropped, by reason index: 0 malformed, 1 own_address_source, 2 not_pool_address, 3 no_mapping, 4 filtered, 5 ports_exhausted, 6 table_full, 7 invalid, 8 icmp_error_no_session, 9 icmp_error_hairpin (frames).",
    ),
    CounterDef::one(
        "arp_replies",
        "ARP requests for a pool address answered on the outside (frames).",
    ),
    CounterDef::one(
        "not_translated",
        "Frames dropped untranslated: not IPv4 (nor ARP for the pool), or another core's (frames).",
    ),
    CounterDef::gauge(
        "sessions",
        "Sessions in use, summed over the cores (sessions; each core holds nat_sessions).",
    ),
    CounterDef::gauge(
        "mappings",
        "Endpoint-independent mappings in use, summed over the cores (mappings).",
    ),
];

impl NatNf {
    /// The NAT `nat` on a core whose ports have the MACs `macs` and the next hops `peer`
    /// (`peer0=`, `peer1=`).
    pub fn new(nat: Nat<'static>, macs: [MacAddr; 2], peer: [MacAddr; 2]) -> NatNf {
        let words = core::array::from_fn(|p| {
            MacRewrite::new(Mode::L2, macs[p], peer[p])
                .words()
                .unwrap_or_default()
        });
        NatNf {
            nat,
            words,
            outside_mac: macs[1],
            arp_replies: 0,
            not_translated: 0,
        }
    }

    /// The translator (its sessions, mappings and counters).
    pub fn nat(&self) -> &Nat<'static> {
        &self.nat
    }

    /// Replace the idle timeouts of every session (at once).
    pub fn set_timeouts(&mut self, t: Timeouts) {
        self.nat.set_timeouts(t);
    }

    /// This core's session table as the console shows it (`nat [FILTER]`), one line to `emit`
    /// at a time: `nat cpu K sessions N of CAP, mappings M, expired E, evicted V, refused F`,
    /// then up to `max` sessions matching `filter` (`netstack::conntrack::show::Line`, after
    /// `conntrack -L`), each `nat cpu K …`, and `nat cpu K … and N more` past `max`; `now_ns`
    /// the clock the NAT runs on.
    pub fn show_sessions(
        &self,
        cpu: usize,
        filter: &Filter,
        now_ns: u64,
        max: usize,
        emit: &mut dyn FnMut(core::fmt::Arguments<'_>),
    ) {
        let t = self.nat.sessions();
        let c = t.counters();
        emit(format_args!(
            "nat cpu {cpu} sessions {} of {}, mappings {}, expired {}, evicted {}, refused {}",
            t.len(),
            t.capacity(),
            self.nat.mappings().len(),
            c.expired,
            c.evicted,
            c.full
        ));
        let mut matching = t.iter().filter(|(_, e)| filter.matches(e));
        for (_, entry) in matching.by_ref().take(max) {
            let timeouts = &t.timeouts;
            emit(format_args!(
                "nat cpu {cpu} {}",
                Line {
                    entry,
                    now_ns,
                    timeouts
                }
            ));
        }
        let more = matching.count();
        if more > 0 {
            emit(format_args!("nat cpu {cpu} … and {more} more"));
        }
    }

    /// The frame translated, and what becomes of it (see [`NetworkFunction::process`]).
    #[inline(never)]
    fn decide(&mut self, pkt: &mut Packet<'_>) -> Step {
        let from = if pkt.in_port() == 0 {
            Ingress::Inside
        } else {
            Ingress::Outside
        };
        // A frame of several pages (jumbo) is translated by its headers in the first page.
        let (now, len) = (pkt.now_ns(), pkt.len());
        match self.nat.translate_len(pkt.head_mut(), len, from, now) {
            NatVerdict::Forward => {
                pkt.write_macs(self.words[pkt.out_port()]);
                Step::Forward
            }
            NatVerdict::Drop(_) => Step::Drop,
            NatVerdict::Hairpin => {
                pkt.set_mark(MARK_HAIRPIN);
                Step::Keep
            }
            NatVerdict::NotIpv4 => self.not_ipv4(pkt),
            NatVerdict::HandOff { core, from } => {
                // Untouched (a hairpin translated outbound): the owner translates it.
                pkt.set_mark(MARK_HANDOFF | from_code(from) << 8 | (core & 0xff));
                Step::Keep
            }
        }
    }

    /// A frame the NAT did not translate: an ARP request for a pool address on the outside
    /// is kept (answered after the burst), anything else dropped and counted.
    #[cold]
    fn not_ipv4(&mut self, pkt: &mut Packet<'_>) -> Step {
        let head = pkt.head();
        let is_arp = head[ETHERTYPE] == ETHERTYPE_ARP.to_be_bytes();
        if pkt.in_port() == 1 && is_arp {
            if let Some(a) = arp::parse(&head[ETH_HDR_LEN..]) {
                if a.op == arp::ARP_REQUEST && self.nat.in_pool(a.tpa) {
                    pkt.set_mark(MARK_ARP);
                    return Step::Keep;
                }
            }
        }
        self.not_translated += 1;
        Step::Drop
    }

    /// The ARP reply to the kept request `h` for a pool address, written over it.
    fn answer_arp(&mut self, h: &mut super::Held) -> bool {
        let Some(a) = arp::parse(&h.head()[ETH_HDR_LEN..]) else {
            return false;
        };
        let reply = arp::Arp {
            op: arp::ARP_REPLY,
            sha: self.outside_mac,
            spa: a.tpa,
            tha: a.sha,
            tpa: a.spa,
        };
        let len = arp::write(h.head_mut(), a.sha, self.outside_mac, &reply);
        h.set_len(len);
        self.arp_replies += 1;
        true
    }
}

impl NetworkFunction for NatNf {
    const NAME: &'static str = "nat";
    const CLOCK: bool = true;
    const HANDS_OFF: bool = true;
    const COUNTERS: &'static [CounterDef] = COUNTERS;

    /// One direct call to `NatNf::decide`, out of line, and three verdicts: inlined, the
    /// translation's `match`es, and a `match` over all five verdicts, become jump tables in
    /// the driver's fused loop that the no-indirect-call check (`cargo xtask lint`'s
    /// `nocall`) cannot bound.
    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        match self.decide(pkt) {
            Step::Forward => Verdict::Forward,
            Step::Keep => Verdict::Keep,
            Step::Drop => Verdict::Drop,
        }
    }

    /// ARP replies for the pool out of the outside port, hairpins back out of the inside one.
    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        while let Some(mut h) = ctx.next_kept() {
            match h.mark() {
                MARK_ARP if self.answer_arp(&mut h) => ctx.send(h, 1),
                MARK_HAIRPIN => {
                    h.write_macs(self.words[0]);
                    ctx.send(h, 0);
                }
                m if m & MARK_HANDOFF != 0 => {
                    let core = usize::from(m & 0xff);
                    ctx.hand_off(h, core, (m >> 8) & 0x7f);
                }
                _ => {
                    self.not_translated += 1;
                    ctx.drop(h);
                }
            }
        }
    }

    /// A frame of a flow this core owns, from the core it arrived on: translated as the mark
    /// says it came (inside, outside, or a hairpin translated outbound there) and sent on.
    fn handed<P: Platform>(&mut self, mut h: super::Held, ctx: &mut Ctx<'_, P>) {
        let Some(from) = code_from(h.mark()) else {
            self.not_translated += 1;
            return ctx.drop(h);
        };
        let (now, len) = (ctx.now_ns(), h.len());
        match self.nat.translate_len(h.head_mut(), len, from, now) {
            NatVerdict::Forward => {
                let out = if from == Ingress::Inside { 1 } else { 0 };
                h.write_macs(self.words[out]);
                ctx.send(h, out);
            }
            NatVerdict::Hairpin => {
                h.write_macs(self.words[0]);
                ctx.send(h, 0);
            }
            NatVerdict::Drop(_) => ctx.drop(h),
            NatVerdict::NotIpv4 | NatVerdict::HandOff { .. } => {
                // Its owner names another core: the cores disagree on ownership (never with
                // one configuration on every core); not passed on again.
                self.not_translated += 1;
                ctx.drop(h);
            }
        }
    }

    /// Expired sessions freed beyond the per-frame sweep (a budget per tick).
    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.nat.tick(ctx.now_ns(), TICK_SWEEP);
    }

    fn counters(&self, out: &mut CounterValues) {
        let c = self.nat.counters();
        out.set(0, c.outbound);
        out.set(1, c.inbound);
        out.set(2, c.hairpinned);
        out.set(3, c.icmp_errors);
        out.set(4, c.sessions_opened);
        out.set_per_index(5, c.drops);
        out.set(6, self.arp_replies);
        out.set(7, self.not_translated);
        out.set(8, self.nat.sessions_in_use() as u64);
        out.set(9, self.nat.mappings_in_use() as u64);
    }
}

/// Most session lines one core prints for `nat` on the console (a serial line under TCG is
/// slow; a filter narrows the listing).
pub const SHOW_MAX: usize = 64;

/// The filter of the console's last `nat` listing, for the cores still to print theirs.
static SHOW: spin::Mutex<Filter> = spin::Mutex::new(Filter {
    proto: None,
    addr: None,
    port: None,
    class: None,
});
/// Per core: a `nat` listing asked and not yet printed.
static SHOW_PENDING: [AtomicBool; MAX_CORES] = [const { AtomicBool::new(false) }; MAX_CORES];

/// The console's `nat [FILTER]`: each of the first `cores` cores lists its sessions matching
/// `filter` from its next tick (within 10 ms; [`NatNf::show_sessions`]).
pub fn request_nat_show(filter: Filter, cores: usize) {
    *SHOW.lock() = filter;
    for p in SHOW_PENDING.iter().take(cores) {
        p.store(true, Ordering::Release);
    }
}

/// The NAT's timeouts now (the boot's, or the last `nat timeouts` or `PUT /nat_timeouts`) and
/// their generation (1 the boot's, +1 per change); `None` outside NAT mode.
static NEW_TIMEOUTS: spin::Mutex<Option<(Timeouts, u64)>> = spin::Mutex::new(None);
/// Per core: new timeouts asked and not yet taken.
static TIMEOUTS_PENDING: [AtomicBool; MAX_CORES] = [const { AtomicBool::new(false) }; MAX_CORES];

/// The boot's timeouts (`nat_timeouts=` or the defaults): generation 1, nothing to take.
pub fn boot_nat_timeouts(t: Timeouts) {
    *NEW_TIMEOUTS.lock() = Some((t, 1));
}

/// The console's `nat timeouts EST,TRANS,UDP,ICMP` and `PUT /nat_timeouts`: each of the first
/// `cores` cores applies `t` to its sessions from its next tick
/// (`netstack::nat::Nat::set_timeouts`: at once, to every session). Returns the new
/// generation.
pub fn request_nat_timeouts(t: Timeouts, cores: usize) -> u64 {
    let mut now = NEW_TIMEOUTS.lock();
    let generation = now.map_or(1, |(_, g)| g + 1);
    *now = Some((t, generation));
    for p in TIMEOUTS_PENDING.iter().take(cores) {
        p.store(true, Ordering::Release);
    }
    generation
}

/// The NAT's timeouts now and their generation ([`request_nat_timeouts`]); `None` outside
/// NAT mode.
pub fn nat_timeouts() -> Option<(Timeouts, u64)> {
    *NEW_TIMEOUTS.lock()
}

/// The timeouts core `k` was asked to take and has not yet.
pub fn take_nat_timeouts(k: usize) -> Option<Timeouts> {
    let asked = TIMEOUTS_PENDING.get(k)?.swap(false, Ordering::AcqRel);
    if asked {
        NEW_TIMEOUTS.lock().map(|(t, _)| t)
    } else {
        None
    }
}

/// The filter of a listing core `k` was asked for and has not printed yet.
pub fn take_nat_show(k: usize) -> Option<Filter> {
    let asked = SHOW_PENDING.get(k)?.swap(false, Ordering::AcqRel);
    asked.then(|| *SHOW.lock())
}

/// Each CPU's translator from the boot (`setup::nat`) until its core takes it.
static NATS: CoreSlots<Nat<'static>> = CoreSlots::new();

/// Keep `nat` for core `k` until [`take_nat`] (the boot, before any core starts; `k` below
/// `MAX_CORES`, else ignored).
pub fn install_nat(k: usize, nat: Nat<'static>) {
    NATS.put(k, nat);
}

/// Core `k`'s translator, once (`None` after, or when none was installed).
pub fn take_nat(k: usize) -> Option<Nat<'static>> {
    NATS.take(k)
}

/// Expired sessions freed per tick (every 10 ms) at most: 25,600 a second beside the
/// per-frame sweep (`netstack::nat::translate::SWEEP_PER_FRAME`).
pub const TICK_SWEEP: usize = 256;
