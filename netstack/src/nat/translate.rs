//! [`Nat`]: one core's translator. The paths of a TCP segment, UDP datagram or ICMP query
//! (outbound: session, else mapping then session; inbound: session, else a static forward or
//! endpoint-independent filter opens one, else dropped), the hairpin, the hand-off to the
//! owning core, and the per-frame bounded expiry sweep. ICMP errors are [`super::icmp`]'s.

use super::csum::{fix16, fix32, fix_udp, get16, get32, put16, put32};
use super::ports::{owner_of_inside, paired_address, PortAlloc, PortPlan, MAX_POOL};
use super::{
    has_ports, Filtering, Forward, ForwardFault, Ingress, Mapping, NatConfig, NatCounters, NatDrop,
    NatError, NatStorage, Session, Verdict, MAX_FORWARDS,
};
use crate::conntrack::parse::{parse_len, Flow, ParseError, L4};
use crate::conntrack::table::{Class, Entry, Table};
use crate::conntrack::track::{advance, open, FROM_OUTSIDE, STATIC};
use crate::conntrack::{Side, Timeouts, Tuple};
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, IPV4_CHECKSUM, IPV4_DST, IPV4_SRC};

/// Expired sessions freed per frame (the bounded incremental sweep; [`Nat::tick`] frees more).
pub const SWEEP_PER_FRAME: usize = 2;

/// One core's NAT: its sessions, mappings and ports, over [`NatStorage`].
pub struct Nat<'a> {
    pub(super) pool: [u32; MAX_POOL],
    pub(super) pool_len: usize,
    plan: PortPlan,
    core: u16,
    filtering: Filtering,
    forwards: [Forward; MAX_FORWARDS],
    n_forwards: usize,
    key: u64,
    pub(super) sessions: Table<'a, Session>,
    pub(super) maps: Table<'a, Mapping>,
    pub(super) ports: PortAlloc<'a>,
    pub(super) counters: NatCounters,
}

/// The mapping table's inside key of an endpoint.
fn map_inside(addr: u32, port: u16, proto: u8) -> Tuple {
    Tuple {
        src: addr,
        sport: port,
        proto,
        ..Tuple::default()
    }
}

/// The mapping table's outside key of an endpoint.
fn map_outside(addr: u32, port: u16, proto: u8) -> Tuple {
    Tuple {
        dst: addr,
        dport: port,
        proto,
        ..Tuple::default()
    }
}

/// One session fewer on mapping `m`; a dynamic mapping left with none is freed with its port.
pub(super) fn unref(
    maps: &mut Table<'_, Mapping>,
    ports: &mut PortAlloc<'_>,
    pool: &[u32],
    m: u32,
) {
    let e = maps.get_mut(m);
    e.value = e.value.saturating_sub(1);
    if e.value == 0 && e.flags & STATIC == 0 {
        let o = e.tuple(Side::Outside);
        maps.remove(m, &mut |_| {});
        if let Some(a) = pool.iter().position(|&p| p == o.dst) {
            ports.free(a, o.proto, o.dport);
        }
    }
}

impl<'a> Nat<'a> {
    /// A NAT for `cfg.core` over `st`, its static forwards installed. Errors name what is
    /// wrong ([`NatError`]).
    pub fn new(cfg: &NatConfig<'_>, st: NatStorage<'a>) -> Result<Nat<'a>, NatError> {
        if cfg.pool.is_empty() || cfg.pool.len() > MAX_POOL {
            return Err(NatError::PoolSize(cfg.pool.len()));
        }
        if cfg.cores == 0 || cfg.core >= cfg.cores {
            return Err(NatError::Core(cfg.core, cfg.cores));
        }
        if cfg.port_lo == 0
            || cfg.port_lo > cfg.port_hi
            || u32::from(cfg.port_hi - cfg.port_lo) + 1 < u32::from(cfg.cores)
        {
            return Err(NatError::PortRange(cfg.port_lo, cfg.port_hi));
        }
        if cfg.forwards.len() > MAX_FORWARDS {
            return Err(NatError::TooManyForwards(cfg.forwards.len()));
        }
        let plan = PortPlan {
            lo: cfg.port_lo,
            hi: cfg.port_hi,
            cores: cfg.cores,
        };
        for (i, f) in cfg.forwards.iter().enumerate() {
            let clash = cfg.forwards[..i].iter().any(|g| {
                g.proto == f.proto
                    && ((g.outside_addr, g.outside_port) == (f.outside_addr, f.outside_port)
                        || (g.inside_addr, g.inside_port) == (f.inside_addr, f.inside_port))
            });
            let fault = if !matches!(f.proto, IPPROTO_TCP | IPPROTO_UDP) {
                Some(ForwardFault::Protocol)
            } else if !cfg.pool.contains(&f.outside_addr) {
                Some(ForwardFault::NotInPool)
            } else if f.outside_port == 0 || f.inside_port == 0 {
                Some(ForwardFault::ZeroPort)
            } else if plan.owner_of(f.outside_port).is_some() {
                Some(ForwardFault::InDynamicRange)
            } else if clash {
                Some(ForwardFault::Clash)
            } else {
                None
            };
            if let Some(why) = fault {
                return Err(NatError::BadForward(i, why));
            }
        }
        // One more than sessions and forwards: a new mapping is made before its session's slot
        // is found (which may free another mapping by evicting its last session).
        let need_maps = st.sessions.len() + cfg.forwards.len() + 1;
        if st.maps.len() < need_maps {
            return Err(NatError::MapStorage(need_maps));
        }
        let (first, n) = plan.block(cfg.core);
        let words = PortAlloc::words_for(cfg.pool.len(), n);
        let ports = PortAlloc::new(st.ports, cfg.pool.len(), first, n)
            .ok_or(NatError::PortStorage(words))?;
        let sessions = Table::new(st.sessions, st.session_buckets, cfg.seed, cfg.timeouts)
            .map_err(NatError::Table)?;
        let maps = Table::new(
            st.maps,
            st.map_buckets,
            cfg.seed ^ 0x6d61_7073,
            Timeouts::default(),
        )
        .map_err(NatError::Table)?;
        let mut pool = [0; MAX_POOL];
        pool[..cfg.pool.len()].copy_from_slice(cfg.pool);
        let mut forwards = [Forward {
            proto: 0,
            outside_addr: 0,
            outside_port: 0,
            inside_addr: 0,
            inside_port: 0,
        }; MAX_FORWARDS];
        forwards[..cfg.forwards.len()].copy_from_slice(cfg.forwards);
        let mut nat = Nat {
            pool,
            pool_len: cfg.pool.len(),
            plan,
            core: cfg.core,
            filtering: cfg.filtering,
            forwards,
            n_forwards: cfg.forwards.len(),
            key: cfg.key,
            sessions,
            maps,
            ports,
            counters: NatCounters::default(),
        };
        for f in cfg.forwards {
            nat.maps
                .insert(
                    map_inside(f.inside_addr, f.inside_port, f.proto),
                    map_outside(f.outside_addr, f.outside_port, f.proto),
                    Class::Pinned,
                    0,
                    STATIC,
                    0,
                    0,
                    &mut |_| {},
                )
                .map_err(|_| NatError::MapStorage(need_maps))?;
        }
        Ok(nat)
    }

    /// Sessions in use on this core (of `nat_sessions=`).
    pub fn sessions_in_use(&self) -> usize {
        self.sessions.len()
    }

    /// Endpoint-independent mappings in use on this core.
    pub fn mappings_in_use(&self) -> usize {
        self.maps.len()
    }

    /// What this core has done.
    pub fn counters(&self) -> &NatCounters {
        &self.counters
    }

    /// The session table (occupancy, expiry and eviction counts, listing).
    pub fn sessions(&self) -> &Table<'a, Session> {
        &self.sessions
    }

    /// The mapping table.
    pub fn mappings(&self) -> &Table<'a, Mapping> {
        &self.maps
    }

    /// Outside ports of `proto` in use on this core for pool address number `addr`.
    pub fn ports_in_use(&self, addr: usize, proto: u8) -> u32 {
        self.ports.used(addr, proto)
    }

    /// Replace the timeouts (they apply at once, to every session).
    pub fn set_timeouts(&mut self, t: Timeouts) {
        self.sessions.timeouts = t;
    }

    /// The core that owns the inside address `addr`.
    pub fn owner_of_inside(&self, addr: u32) -> u16 {
        owner_of_inside(addr, self.plan.cores, self.key)
    }

    /// The core that owns outside port `port` of `proto`: its block's core in the dynamic
    /// range, a static forward's inside address's owner, `None` for any other port.
    pub fn owner_of(&self, proto: u8, port: u16) -> Option<u16> {
        self.plan.owner_of(port).or_else(|| {
            self.forwards[..self.n_forwards]
                .iter()
                .find(|f| f.proto == proto && f.outside_port == port)
                .map(|f| self.owner_of_inside(f.inside_addr))
        })
    }

    /// Whether `addr` (host order) is one of the pool's outside addresses.
    pub fn in_pool(&self, addr: u32) -> bool {
        self.pool[..self.pool_len].contains(&addr)
    }

    /// Free up to `budget` expired sessions (with their mappings and ports when it was their
    /// last); returns how many. Call it from a periodic tick.
    pub fn tick(&mut self, now: u64, budget: usize) -> usize {
        let (maps, ports, pool) = (&mut self.maps, &mut self.ports, &self.pool[..self.pool_len]);
        self.sessions
            .expire(now, budget, &mut |e: &Entry<Session>| {
                unref(maps, ports, pool, e.value)
            })
    }

    /// Translate the Ethernet frame `frame` arriving from `from` at `now` (ns) in place; see
    /// [`Verdict`]. Every drop is counted by reason.
    pub fn translate(&mut self, frame: &mut [u8], from: Ingress, now: u64) -> Verdict {
        let len = frame.len();
        self.translate_len(frame, len, from, now)
    }

    /// [`Nat::translate`] for a frame of `frame_len` bytes whose first page is `head` (a jumbo
    /// frame): its headers are read and rewritten in `head` (every checksum is updated
    /// incrementally, RFC 1624, so the payload past it is never read).
    pub fn translate_len(
        &mut self,
        head: &mut [u8],
        frame_len: usize,
        from: Ingress,
        now: u64,
    ) -> Verdict {
        if self.sessions.sweep_due(now) {
            self.tick(now, SWEEP_PER_FRAME);
        }
        let v = self.run(head, frame_len, from, now);
        match v {
            Verdict::Drop(d) => self.counters.drops[d.index()] += 1,
            Verdict::HandOff { .. } => self.counters.handed_off += 1,
            _ => {}
        }
        v
    }

    fn run(&mut self, frame: &mut [u8], frame_len: usize, from: Ingress, now: u64) -> Verdict {
        let flow = match parse_len(frame, frame_len) {
            Ok(f) => f,
            Err(ParseError::NotIpv4) => return Verdict::NotIpv4,
            Err(e) => return Verdict::Drop(NatDrop::Malformed(e)),
        };
        let t = flow.tuple;
        match from {
            Ingress::Inside => {
                if self.in_pool(t.src) {
                    return Verdict::Drop(NatDrop::OwnAddressSource);
                }
                // The inside host owns the flow: for an ICMP error the quoted datagram's
                // destination (the error may come from a router inside, not the host).
                let host = match flow.l4kind {
                    L4::IcmpError(q) => q.tuple.dst,
                    _ => t.src,
                };
                let owner = self.owner_of_inside(host);
                if owner != self.core {
                    return Verdict::HandOff {
                        core: owner,
                        from: Ingress::Inside,
                    };
                }
                if let L4::IcmpError(q) = flow.l4kind {
                    return match self.icmp_error_out(frame, &flow, &q, now) {
                        Ok(()) => Verdict::Forward,
                        Err(d) => Verdict::Drop(d),
                    };
                }
                let to_pool = self.in_pool(t.dst);
                if to_pool && t.proto == IPPROTO_ICMP {
                    // An echo to the NAT's own address is the host's (the router in front
                    // answers it), not a flow to hairpin.
                    return Verdict::Drop(NatDrop::NoMapping);
                }
                if let Err(d) = self.outbound(frame, &flow, now) {
                    return Verdict::Drop(d);
                }
                if !to_pool {
                    return Verdict::Forward;
                }
                // A hairpin (TCP or UDP): now as if it came from the outside.
                let mut back = flow;
                back.tuple.src = get32(frame, flow.ip + IPV4_SRC.start);
                back.tuple.sport = get16(frame, flow.l4);
                match self.owner_of(t.proto, back.tuple.dport) {
                    Some(core) if core != self.core => {
                        return Verdict::HandOff {
                            core,
                            from: Ingress::Hairpin,
                        }
                    }
                    _ => {}
                }
                match self.inbound(frame, &back, now) {
                    Ok(()) => {
                        self.counters.hairpinned += 1;
                        Verdict::Hairpin
                    }
                    Err(d) => Verdict::Drop(d),
                }
            }
            Ingress::Outside | Ingress::Hairpin => {
                if from == Ingress::Outside && self.in_pool(t.src) {
                    return Verdict::Drop(NatDrop::OwnAddressSource);
                }
                if !self.in_pool(t.dst) {
                    return Verdict::Drop(NatDrop::NotPoolAddress);
                }
                let (proto, port) = match flow.l4kind {
                    L4::IcmpError(q) => (q.tuple.proto, q.tuple.sport),
                    _ => (t.proto, t.dport),
                };
                match self.owner_of(proto, port) {
                    Some(core) if core != self.core => {
                        return Verdict::HandOff { core, from };
                    }
                    _ => {}
                }
                let r = match flow.l4kind {
                    L4::IcmpError(q) => self.icmp_error_in(frame, &flow, &q, now),
                    _ => self.inbound(frame, &flow, now),
                };
                match r {
                    Ok(()) => Verdict::Forward,
                    Err(d) => Verdict::Drop(d),
                }
            }
        }
    }

    /// The inside-to-outside path: the session of the tuple, or a new one (over the inside
    /// endpoint's mapping, made if need be); the source rewritten to the mapping.
    fn outbound(&mut self, frame: &mut [u8], flow: &Flow, now: u64) -> Result<(), NatDrop> {
        let t = flow.tuple;
        let (maps, ports, pool) = (&mut self.maps, &mut self.ports, &self.pool[..self.pool_len]);
        let mut rel = |e: &Entry<Session>| unref(maps, ports, pool, e.value);
        let idx = match self.sessions.lookup(&t, Side::Inside, now, &mut rel) {
            Some(i) => {
                advance(&mut self.sessions, i, Side::Inside, &flow.l4kind, now)
                    .map_err(|_| NatDrop::Invalid)?;
                i
            }
            None => self.open_outbound(flow, now)?,
        };
        let o = self.sessions.get(idx).tuple(Side::Outside);
        rewrite(frame, flow, IPV4_SRC.start, 0, o.dst, o.dport);
        self.counters.outbound += 1;
        Ok(())
    }

    fn open_outbound(&mut self, flow: &Flow, now: u64) -> Result<u32, NatDrop> {
        let (class, state) = open(&flow.l4kind).map_err(|_| NatDrop::Invalid)?;
        let t = flow.tuple;
        let m = self.mapping_for(t.src, t.sport, t.proto, now)?;
        let mo = self.maps.get(m).tuple(Side::Outside);
        let outside = Tuple {
            src: t.dst,
            dst: mo.dst,
            sport: if t.proto == IPPROTO_ICMP {
                mo.dport
            } else {
                t.dport
            },
            dport: mo.dport,
            proto: t.proto,
        };
        self.open_session(t, outside, class, state, 0, m, now)
    }

    /// Insert a session on mapping `m` (whose count the caller has raised); on failure the
    /// count is lowered again.
    #[allow(clippy::too_many_arguments)]
    fn open_session(
        &mut self,
        inside: Tuple,
        outside: Tuple,
        class: Class,
        state: u8,
        flags: u8,
        m: u32,
        now: u64,
    ) -> Result<u32, NatDrop> {
        let (maps, ports, pool) = (&mut self.maps, &mut self.ports, &self.pool[..self.pool_len]);
        let mut rel = |e: &Entry<Session>| unref(maps, ports, pool, e.value);
        match self
            .sessions
            .insert(inside, outside, class, state, flags, m, now, &mut rel)
        {
            Ok(i) => {
                self.counters.sessions_opened += 1;
                Ok(i)
            }
            Err(_) => {
                unref(
                    &mut self.maps,
                    &mut self.ports,
                    &self.pool[..self.pool_len],
                    m,
                );
                Err(NatDrop::TableFull)
            }
        }
    }

    /// The mapping of an inside endpoint, made if need be (paired address, a port of this
    /// core's block), its session count raised by one.
    fn mapping_for(&mut self, addr: u32, port: u16, proto: u8, now: u64) -> Result<u32, NatDrop> {
        let key = map_inside(addr, port, proto);
        if let Some(m) = self.maps.lookup(&key, Side::Inside, now, &mut |_| {}) {
            self.maps.get_mut(m).value += 1;
            return Ok(m);
        }
        let a = paired_address(addr, self.pool_len, self.key);
        let p = self.ports.alloc(a, proto).ok_or(NatDrop::PortsExhausted)?;
        let out = map_outside(self.pool[a], p, proto);
        match self
            .maps
            .insert(key, out, Class::Pinned, 0, 0, 1, now, &mut |_| {})
        {
            Ok(m) => {
                self.counters.mappings_opened += 1;
                Ok(m)
            }
            Err(_) => {
                self.ports.free(a, proto, p);
                Err(NatDrop::TableFull)
            }
        }
    }

    /// The outside-to-inside path: the session of the tuple, or one opened by a static
    /// forward or endpoint-independent filtering; the destination rewritten to the inside
    /// endpoint.
    pub(super) fn inbound(
        &mut self,
        frame: &mut [u8],
        flow: &Flow,
        now: u64,
    ) -> Result<(), NatDrop> {
        let t = flow.tuple;
        let (maps, ports, pool) = (&mut self.maps, &mut self.ports, &self.pool[..self.pool_len]);
        let mut rel = |e: &Entry<Session>| unref(maps, ports, pool, e.value);
        let idx = match self.sessions.lookup(&t, Side::Outside, now, &mut rel) {
            Some(i) => {
                advance(&mut self.sessions, i, Side::Outside, &flow.l4kind, now)
                    .map_err(|_| NatDrop::Invalid)?;
                i
            }
            None => self.open_inbound(flow, now)?,
        };
        let i = self.sessions.get(idx).tuple(Side::Inside);
        rewrite(frame, flow, IPV4_DST.start, 2, i.src, i.sport);
        self.counters.inbound += 1;
        Ok(())
    }

    fn open_inbound(&mut self, flow: &Flow, now: u64) -> Result<u32, NatDrop> {
        let t = flow.tuple;
        let m = self
            .maps
            .lookup(
                &map_outside(t.dst, t.dport, t.proto),
                Side::Outside,
                now,
                &mut |_| {},
            )
            .ok_or(NatDrop::NoMapping)?;
        let me = self.maps.get(m);
        if me.flags & STATIC == 0 && self.filtering == Filtering::AddressAndPortDependent {
            return Err(NatDrop::Filtered);
        }
        let (class, state) = open(&flow.l4kind).map_err(|_| NatDrop::Invalid)?;
        let mi = me.tuple(Side::Inside);
        let inside = Tuple {
            src: mi.src,
            dst: t.src,
            sport: mi.sport,
            dport: if t.proto == IPPROTO_ICMP {
                mi.sport
            } else {
                t.sport
            },
            proto: t.proto,
        };
        self.maps.get_mut(m).value += 1;
        self.open_session(inside, t, class, state, FROM_OUTSIDE, m, now)
    }
}

/// Rewrite the address at `ip + addr_off` to `addr` and the port at `l4 + port_off` (ICMP:
/// the identifier) to `port`, with the IPv4 and transport checksums updated (RFC 1624).
pub(super) fn rewrite(
    frame: &mut [u8],
    flow: &Flow,
    addr_off: usize,
    port_off: usize,
    addr: u32,
    port: u16,
) {
    let (ip, l4) = (flow.ip, flow.l4);
    let old = get32(frame, ip + addr_off);
    put32(frame, ip + addr_off, addr);
    fix32(frame, ip + IPV4_CHECKSUM.start, old, addr);
    debug_assert!(has_ports(flow.tuple.proto));
    match flow.tuple.proto {
        IPPROTO_TCP => {
            let p = get16(frame, l4 + port_off);
            put16(frame, l4 + port_off, port);
            fix32(frame, l4 + 16, old, addr);
            fix16(frame, l4 + 16, p, port);
        }
        IPPROTO_UDP => {
            let p = get16(frame, l4 + port_off);
            put16(frame, l4 + port_off, port);
            fix_udp(frame, l4 + 6, old, addr, p, port);
        }
        _ => {
            let id = get16(frame, l4 + 4);
            put16(frame, l4 + 4, port);
            fix16(frame, l4 + 2, id, port);
        }
    }
}
