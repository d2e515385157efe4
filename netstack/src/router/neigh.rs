//! Neighbour table: IPv4 → MAC over ARP (RFC 826), or IPv6 → MAC over Neighbor Discovery
//! (RFC 4861; the address type [`NeighAddr`]), with a bounded queue of frames per unresolved
//! neighbour.
//!
//! A simplified form of Linux's neighbour state machine (net/core/neighbour.c), with the same
//! default timers. No clock inside: every call takes the time in nanoseconds from the caller.
//!
//! ```text
//!            frame for unknown IP            ARP from IP (reply, or request for us)
//!   (free) ───────────────────────▶ Incomplete ─────────────────────────▶ Reachable
//!                                     │ request at once, then every          │ reachable_ns
//!                                     │ retrans_ns; after max_probes         ▼ after confirmation
//!                                     │ unanswered: queued frames dropped   Stale ── used: forwards with
//!                                     ▼ (NeighTimeout), entry freed           │      the old MAC and asks
//!                                   (free)                                    │      again (≤ 1 / retrans_ns)
//!                                                        stale_ns after the   │ ARP from IP ─▶ Reachable
//!                                                        last confirmation ─▶ (free) (aged out)
//! ```
//!
//! Frames waiting for resolution are stored as caller handles (`H: Copy`, e.g. a page frame
//! number) with their length; a queue holds at most `Q` of them. Nothing is dropped silently:
//! a full queue refuses the handle (the caller keeps it), and on timeout or flush every
//! queued handle is given back through [`NeighEvent::Dropped`] / [`NeighTable::flush`].
//!
//! Lookup is a linear scan over `N` entries: `N` is meant to be small (the directly connected
//! hosts and gateways of an appliance, default 64).
//!
//! # The router's next-hop cache
//!
//! The router does not look a gateway up here for every frame: it caches, per FIB next hop,
//! the MAC of an entry that is Reachable with nothing queued ([`NeighTable::resolve_cacheable`]
//! names such an entry) and forwards through that cache until the table says the cached
//! answer may be wrong ([`NeighTable::take_reachable_changed`]: an entry that was Reachable
//! left that state, changed its MAC, got frames queued or lost its slot). A frame forwarded
//! through the cache still counts as a use of the entry ([`NeighTable::touch`]), so the
//! eviction policy below sees what it would have seen.
//!
//! # Bounded by policy (hostile neighbours)
//!
//! The table is small, so who may take a slot is decided by policy, after Linux
//! (`net/ipv4/arp.c` `arp_process` with `arp_accept=0`; `gc_thresh*` and `unres_qlen` in
//! `net/core/neighbour.c`):
//! - An ARP **reply** unicast to us makes an existing entry Reachable; it never creates one
//!   (`arp_accept=0`). An ARP **request** for our address creates an entry in state **Stale**
//!   (Linux's `neigh_event_ns`), never Reachable, and updates an existing one without
//!   confirming it. Other ARP only updates an existing entry ([`Confirm`]).
//! - An entry forwarding has never used (learned from an unsolicited request) is evicted
//!   first; such an entry may only ever take the slot of another such entry.
//! - An entry forwarding used within [`NeighConfig::in_use_ns`] (default 5 s, the age under
//!   which Linux's `neigh_forced_gc` keeps an entry) is never evicted; nor is one with frames
//!   queued.
//! - At most a quarter of the slots (`max(N / 4, 1)`) are Incomplete, so at most `N / 4 × Q`
//!   frames wait for ARP (Linux: `unres_qlen` per entry). A new unresolved neighbour beyond
//!   that takes the slot of the oldest Incomplete entry, whose queued frames are given back
//!   through [`NeighEvent::Evicted`]: a scan of silent addresses churns the Incomplete quarter
//!   and never touches the resolved entries, and a real neighbour that answers within the
//!   churn gets through.
//!
//! Past ~800 lines because its tests (inline, about 480 lines: the policy cases against hostile
//! neighbours need the private entries) sit beside the ~630-line state machine.

use crate::MacAddr;

/// An address the table keys on, host order: IPv4 (`u32`, resolved by ARP) or IPv6 (`u128`,
/// by Neighbor Discovery, RFC 4861 §7.3: the same states and timers).
pub trait NeighAddr: Copy + Eq + core::fmt::Debug {
    /// The all-zero address (a free entry's).
    const ZERO: Self;
}

impl NeighAddr for u32 {
    const ZERO: u32 = 0;
}

impl NeighAddr for u128 {
    const ZERO: u128 = 0;
}

/// Timers and limits of the neighbour state machine (defaults are Linux's:
/// `retrans_time_ms` 1000, `mcast_solicit` 3, `base_reachable_time_ms` 30000,
/// `gc_stale_time` 60).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct NeighConfig {
    /// Interval between ARP requests for one neighbour.
    pub retrans_ns: u64,
    /// Requests sent for an incomplete entry before it fails.
    pub max_probes: u8,
    /// How long a confirmation keeps an entry reachable.
    pub reachable_ns: u64,
    /// How long after its last confirmation an entry is removed.
    pub stale_ns: u64,
    /// An entry forwarding used within this long is never evicted for another (Linux's
    /// `neigh_forced_gc` spares entries updated in the last 5 s).
    pub in_use_ns: u64,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            retrans_ns: 1_000_000_000,
            max_probes: 3,
            reachable_ns: 30_000_000_000,
            stale_ns: 60_000_000_000,
            in_use_ns: 5_000_000_000,
        }
    }
}

/// State of an entry.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum NeighState {
    /// Unused slot.
    Free,
    /// Asked, no answer yet; frames queue.
    Incomplete,
    /// Confirmed within `reachable_ns`.
    Reachable,
    /// Not confirmed lately; still used, re-asked on use.
    Stale,
}

/// Result of [`NeighTable::resolve`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Resolve {
    /// Send now with this destination MAC.
    Mac(MacAddr),
    /// Queue behind entry `idx` (incomplete, or resolved with frames still waiting, to keep
    /// their order).
    Pending(usize),
    /// No entry and no slot it may take (see the module's policy).
    TableFull,
}

/// What an ARP frame from a neighbour says, for [`NeighTable::confirm`] (Linux's
/// `arp_process` with `arp_accept=0`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Confirm {
    /// An ARP reply unicast to our MAC: an existing entry becomes Reachable (the neighbour
    /// answered); no entry is created.
    Reply,
    /// An ARP request for our address: an existing entry takes the MAC (Incomplete becomes
    /// Stale and its frames leave; a Reachable one with the same MAC stays Reachable, with a new
    /// MAC it becomes Stale); a missing one is created Stale, in the slot of a free or another
    /// never-used entry only.
    Request,
    /// Any other ARP from the sender (gratuitous, broadcast reply, request for another
    /// address): updates an existing entry like [`Confirm::Request`], creates none.
    Overheard,
}

/// Work found by [`NeighTable::poll`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum NeighEvent<H, A = u32> {
    /// Broadcast an ARP request for `ip` on `port`.
    Request {
        /// Output port.
        port: u8,
        /// The address asked for.
        ip: A,
    },
    /// A queued frame whose neighbour is now known: send it on `port` to `mac`.
    Release {
        /// The caller's handle.
        handle: H,
        /// Frame length.
        len: u16,
        /// Output port.
        port: u8,
        /// Destination MAC.
        mac: MacAddr,
    },
    /// A queued frame dropped because its neighbour never answered.
    Dropped {
        /// The caller's handle.
        handle: H,
        /// Frame length, as queued.
        len: u16,
    },
    /// A queued frame dropped because its Incomplete entry was taken by a newer unresolved
    /// neighbour (the Incomplete cap).
    Evicted {
        /// The caller's handle.
        handle: H,
    },
}

/// [`Entry::used_ns`] of an entry forwarding never used.
const NEVER: u64 = u64::MAX;

#[derive(Copy, Clone, Debug)]
struct Entry<H, A, const Q: usize> {
    state: NeighState,
    ip: A,
    port: u8,
    mac: MacAddr,
    /// Last confirmation (Reachable/Stale) or creation (Incomplete).
    confirmed_ns: u64,
    /// Last time forwarding resolved it ([`NEVER`]: learned from ARP, never used).
    used_ns: u64,
    /// Last request sent.
    probe_ns: u64,
    probes: u8,
    probe_due: bool,
    queue: [Option<(H, u16)>; Q],
    head: u8,
    qlen: u8,
}

impl<H: Copy, A: NeighAddr, const Q: usize> Entry<H, A, Q> {
    const FREE: Self = Entry {
        state: NeighState::Free,
        ip: A::ZERO,
        port: 0,
        mac: MacAddr([0; 6]),
        confirmed_ns: 0,
        used_ns: NEVER,
        probe_ns: 0,
        probes: 0,
        probe_due: false,
        queue: [None; Q],
        head: 0,
        qlen: 0,
    };

    fn pop(&mut self) -> Option<(H, u16)> {
        if self.qlen == 0 {
            return None;
        }
        let i = usize::from(self.head);
        let item = self.queue[i].take();
        self.head = ((i + 1) % Q) as u8;
        self.qlen -= 1;
        item
    }
}

/// A neighbour entry as shown by the console (`neigh`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct NeighInfo<A = u32> {
    /// Neighbour address (host order).
    pub ip: A,
    /// Port it lives behind.
    pub port: u8,
    /// Its MAC (zero while incomplete).
    pub mac: MacAddr,
    /// State.
    pub state: NeighState,
    /// Frames waiting.
    pub queued: usize,
}

/// The table: `N` entries, each with a queue of up to `Q` waiting frames.
pub struct NeighTable<H: Copy, const N: usize, const Q: usize, A: NeighAddr = u32> {
    entries: [Entry<H, A, Q>; N],
    cfg: NeighConfig,
    queued: usize,
    /// Frames of evicted Incomplete entries, given back by [`NeighTable::poll`]
    /// ([`NeighEvent::Evicted`]) or [`NeighTable::flush`].
    evicted: [Option<H>; Q],
    nevicted: usize,
    /// Something changed that [`NeighTable::poll`] must act on without waiting for a timer
    /// (a request due, queued frames to release): lets the fast path skip the O(N) scan after
    /// a burst that changed nothing.
    urgent: bool,
    /// An entry that was Reachable changed (state, MAC, queue or slot): answers cached from
    /// [`NeighTable::resolve_cacheable`] may be stale ([`NeighTable::take_reachable_changed`]).
    reachable_changed: bool,
}

impl<H: Copy, const N: usize, const Q: usize, A: NeighAddr> NeighTable<H, N, Q, A> {
    const CHECK: () = assert!(Q > 0 && Q <= 255 && N > 0 && N <= u16::MAX as usize);

    /// An empty table.
    pub fn new(cfg: NeighConfig) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        NeighTable {
            entries: [Entry::FREE; N],
            cfg,
            queued: 0,
            evicted: [None; Q],
            nevicted: 0,
            urgent: false,
            reachable_changed: false,
        }
    }

    /// Whether an entry that was Reachable has changed since the last call (and clear the
    /// mark): its state, its MAC, its queue (frames now wait behind it) or its slot (freed or
    /// taken by another neighbour). An answer of [`NeighTable::resolve_cacheable`] cached
    /// before must then be dropped.
    #[inline]
    pub fn take_reachable_changed(&mut self) -> bool {
        core::mem::take(&mut self.reachable_changed)
    }

    /// Record that forwarding used entry `idx` at `now_ns` through a cached answer of
    /// [`NeighTable::resolve_cacheable`] (what [`NeighTable::resolve`] records itself: an entry
    /// in use is not evicted). `idx` is taken modulo `N`.
    #[inline(always)]
    pub fn touch(&mut self, idx: usize, now_ns: u64) {
        self.entries[idx % N].used_ns = now_ns;
    }

    /// Entry `i` is about to change: note it if it was Reachable.
    #[inline]
    fn changing(&mut self, i: usize) {
        self.reachable_changed |= self.entries[i].state == NeighState::Reachable;
    }

    /// The configuration.
    pub fn config(&self) -> NeighConfig {
        self.cfg
    }

    /// Whether [`NeighTable::poll`] has work that does not wait for a timer. Timers (request
    /// retransmits, queue timeouts, ageing) still need a periodic `poll`.
    #[inline]
    pub fn needs_poll(&self) -> bool {
        self.urgent
    }

    /// Frames held: queued over all entries, and those of evicted entries not yet given back.
    pub fn queued(&self) -> usize {
        self.queued + self.nevicted
    }

    /// The most entries that may be Incomplete at once: a quarter of the table (at least 1).
    pub const MAX_INCOMPLETE: usize = if N / 4 > 0 { N / 4 } else { 1 };

    fn find(&self, ip: A, port: u8) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.state != NeighState::Free && e.ip == ip && e.port == port)
    }

    /// The index and MAC of the entry for `ip` on `port` if it is Reachable with nothing
    /// queued (what [`NeighTable::resolve`] would answer with [`Resolve::Mac`] and no other
    /// effect than the use, which the caller records with [`NeighTable::touch`]); `None`
    /// otherwise, changing nothing. The router's fast path for hosts on a connected network.
    #[inline(never)]
    pub fn reachable(&self, ip: A, port: u8) -> Option<(usize, MacAddr)> {
        let i = self.find(ip, port)?;
        let e = &self.entries[i];
        (e.state == NeighState::Reachable && e.qlen == 0).then_some((i, e.mac))
    }

    /// Where to send a frame for neighbour `ip` on `port`. Creates an incomplete entry (with a
    /// request due) for an unknown neighbour; marks a stale entry for a new request.
    #[inline(always)]
    pub fn resolve(&mut self, ip: A, port: u8, now_ns: u64) -> Resolve {
        self.resolve_cacheable(ip, port, now_ns).0
    }

    /// [`NeighTable::resolve`], and the index of the entry when its answer may be cached (it
    /// is Reachable with nothing queued): valid until [`NeighTable::take_reachable_changed`]
    /// says otherwise; use it with [`NeighTable::touch`].
    #[inline(always)]
    pub fn resolve_cacheable(&mut self, ip: A, port: u8, now_ns: u64) -> (Resolve, Option<usize>) {
        if let Some(i) = self.find(ip, port) {
            let retrans = self.cfg.retrans_ns;
            let e = &mut self.entries[i];
            e.used_ns = now_ns;
            return match e.state {
                NeighState::Incomplete => (Resolve::Pending(i), None),
                _ if e.qlen > 0 => (Resolve::Pending(i), None),
                NeighState::Stale => {
                    if now_ns.saturating_sub(e.probe_ns) >= retrans || e.probes == 0 {
                        e.probe_due = true;
                        self.urgent = true;
                    }
                    (Resolve::Mac(e.mac), None)
                }
                _ => (Resolve::Mac(e.mac), Some(i)),
            };
        }
        (self.resolve_new(ip, port, now_ns), None)
    }

    /// [`NeighTable::resolve`]'s slow path: an incomplete entry for a neighbour not in the
    /// table (kept out of line so the per-packet path stays small).
    #[cold]
    #[inline(never)]
    fn resolve_new(&mut self, ip: A, port: u8, now_ns: u64) -> Resolve {
        let incomplete = self
            .entries
            .iter()
            .filter(|e| e.state == NeighState::Incomplete)
            .count();
        let slot = if incomplete >= Self::MAX_INCOMPLETE {
            self.evict_oldest_incomplete()
        } else {
            self.free_slot(true, now_ns)
        };
        let Some(i) = slot else {
            return Resolve::TableFull;
        };
        self.changing(i);
        self.entries[i] = Entry {
            state: NeighState::Incomplete,
            ip,
            port,
            confirmed_ns: now_ns,
            used_ns: now_ns,
            probe_due: true,
            ..Entry::FREE
        };
        self.urgent = true;
        Resolve::Pending(i)
    }

    /// The Incomplete cap is reached: free the oldest Incomplete entry, moving its queued
    /// frames to `evicted` (given back by `poll`), if they fit there.
    fn evict_oldest_incomplete(&mut self) -> Option<usize> {
        let (i, e) = self
            .entries
            .iter_mut()
            .enumerate()
            .filter(|(_, e)| e.state == NeighState::Incomplete)
            .min_by_key(|(_, e)| e.confirmed_ns)?;
        if self.nevicted + usize::from(e.qlen) > Q {
            return None;
        }
        while let Some((h, _)) = e.pop() {
            self.queued -= 1;
            self.evicted[self.nevicted] = Some(h);
            self.nevicted += 1;
        }
        *e = Entry::FREE;
        Some(i)
    }

    /// A slot for a new entry: a free one, else the entry least worth keeping among those
    /// that may go (resolved, no queued frames, not used by forwarding within `in_use_ns`):
    /// first never-used ones (learned from unsolicited ARP, confirmed longest ago), then, only
    /// for a neighbour forwarding needs (`for_forwarding`), Stale ones, then Reachable ones,
    /// each used longest ago first.
    fn free_slot(&self, for_forwarding: bool, now_ns: u64) -> Option<usize> {
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.state == NeighState::Free)
        {
            return Some(i);
        }
        let in_use = self.cfg.in_use_ns;
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                let resolved = matches!(e.state, NeighState::Reachable | NeighState::Stale);
                let never_used = e.used_ns == NEVER;
                resolved
                    && e.qlen == 0
                    && (never_used
                        || (for_forwarding && now_ns.saturating_sub(e.used_ns) >= in_use))
            })
            .min_by_key(|(_, e)| match (e.used_ns == NEVER, e.state) {
                (true, _) => (0, e.confirmed_ns),
                (false, NeighState::Stale) => (1, e.used_ns),
                (false, _) => (2, e.used_ns),
            })
            .map(|(i, _)| i)
    }

    /// Queue a frame behind entry `idx` (from [`Resolve::Pending`]). A full queue gives the
    /// handle back.
    pub fn enqueue(&mut self, idx: usize, handle: H, len: u16) -> Result<(), H> {
        if usize::from(self.entries[idx].qlen) == Q || self.entries[idx].state == NeighState::Free {
            return Err(handle);
        }
        self.changing(idx);
        let e = &mut self.entries[idx];
        let tail = (usize::from(e.head) + usize::from(e.qlen)) % Q;
        e.queue[tail] = Some((handle, len));
        e.qlen += 1;
        self.queued += 1;
        self.urgent = true;
        Ok(())
    }

    /// The neighbour `ip` on `port` said it has `mac`, in an ARP frame of kind `how`
    /// (RFC 826's merge, with Linux's states: see [`Confirm`]). Returns whether the table
    /// changed.
    pub fn confirm(&mut self, ip: A, port: u8, mac: MacAddr, how: Confirm, now_ns: u64) -> bool {
        let i = match self.find(ip, port) {
            Some(i) => i,
            None if how == Confirm::Request => match self.free_slot(false, now_ns) {
                Some(i) => {
                    self.changing(i);
                    self.entries[i] = Entry {
                        state: NeighState::Stale,
                        ip,
                        port,
                        mac,
                        confirmed_ns: now_ns,
                        ..Entry::FREE
                    };
                    return true;
                }
                None => return false,
            },
            None => return false,
        };
        if self.entries[i].mac != mac {
            self.changing(i);
        }
        let e = &mut self.entries[i];
        match how {
            Confirm::Reply => {
                e.state = NeighState::Reachable;
                e.confirmed_ns = now_ns;
                e.probes = 0;
                e.probe_due = false;
            }
            Confirm::Request | Confirm::Overheard => match e.state {
                NeighState::Incomplete => {
                    e.state = NeighState::Stale;
                    e.confirmed_ns = now_ns;
                    e.probes = 0;
                    e.probe_due = false;
                }
                NeighState::Reachable if e.mac != mac => e.state = NeighState::Stale,
                _ => {}
            },
        }
        e.mac = mac;
        self.urgent |= e.qlen > 0;
        true
    }

    /// Advance timers and return one piece of work, or `None` when there is none now. Call it
    /// until it returns `None` (each call is O(N)).
    pub fn poll(&mut self, now_ns: u64) -> Option<NeighEvent<H, A>> {
        if self.nevicted > 0 {
            self.nevicted -= 1;
            if let Some(handle) = self.evicted[self.nevicted].take() {
                return Some(NeighEvent::Evicted { handle });
            }
        }
        let cfg = self.cfg;
        for e in self.entries.iter_mut() {
            match e.state {
                NeighState::Free => {}
                NeighState::Incomplete => {
                    let since = now_ns.saturating_sub(e.probe_ns);
                    if e.probe_due || since >= cfg.retrans_ns {
                        if e.probes >= cfg.max_probes {
                            if let Some((handle, len)) = e.pop() {
                                self.queued -= 1;
                                return Some(NeighEvent::Dropped { handle, len });
                            }
                            *e = Entry::FREE;
                            continue;
                        }
                        e.probes += 1;
                        e.probe_ns = now_ns;
                        e.probe_due = false;
                        return Some(NeighEvent::Request {
                            port: e.port,
                            ip: e.ip,
                        });
                    }
                }
                NeighState::Reachable | NeighState::Stale => {
                    if let Some((handle, len)) = e.pop() {
                        self.queued -= 1;
                        return Some(NeighEvent::Release {
                            handle,
                            len,
                            port: e.port,
                            mac: e.mac,
                        });
                    }
                    let age = now_ns.saturating_sub(e.confirmed_ns);
                    let reachable = e.state == NeighState::Reachable;
                    if age >= cfg.stale_ns {
                        self.reachable_changed |= reachable;
                        *e = Entry::FREE;
                        continue;
                    }
                    if age >= cfg.reachable_ns {
                        self.reachable_changed |= reachable;
                        e.state = NeighState::Stale;
                    }
                    if e.state == NeighState::Stale && e.probe_due {
                        e.probes = e.probes.saturating_add(1);
                        e.probe_ns = now_ns;
                        e.probe_due = false;
                        return Some(NeighEvent::Request {
                            port: e.port,
                            ip: e.ip,
                        });
                    }
                }
            }
        }
        self.urgent = false;
        None
    }

    /// Take one queued handle from any entry (shutdown: call until `None`).
    pub fn flush(&mut self) -> Option<H> {
        if self.nevicted > 0 {
            self.nevicted -= 1;
            if let Some(h) = self.evicted[self.nevicted].take() {
                return Some(h);
            }
        }
        for e in self.entries.iter_mut() {
            if let Some((h, _)) = e.pop() {
                self.queued -= 1;
                return Some(h);
            }
        }
        None
    }

    /// The live entries (console `neigh`).
    pub fn entries(&self) -> impl Iterator<Item = NeighInfo<A>> + '_ {
        self.entries
            .iter()
            .filter(|e| e.state != NeighState::Free)
            .map(|e| NeighInfo {
                ip: e.ip,
                port: e.port,
                mac: e.mac,
                state: e.state,
                queued: usize::from(e.qlen),
            })
    }

    /// The state of neighbour `ip` on `port` (`Free` if absent).
    pub fn state(&self, ip: A, port: u8) -> NeighState {
        self.find(ip, port)
            .map_or(NeighState::Free, |i| self.entries[i].state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    const S: u64 = 1_000_000_000;
    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 2]);
    const IP: u32 = 0x0a00_0102;

    type T = NeighTable<u32, 4, 3>;

    fn drain(t: &mut T, now: u64) -> Vec<NeighEvent<u32>> {
        let mut v = Vec::new();
        while let Some(e) = t.poll(now) {
            v.push(e);
            assert!(v.len() < 1000, "poll does not converge");
        }
        v
    }

    /// The same machine keyed by IPv6 addresses (Neighbor Discovery): two addresses that
    /// agree in their low 32 bits are two entries (8 slots: two may be Incomplete).
    #[test]
    fn ipv6_neighbours_resolve_and_release_the_same_way() {
        const A6: u128 = 0x2001_0db8_0000_0000_0000_0000_0000_0002;
        const B6: u128 = 0x2001_0db8_0000_0001_0000_0000_0000_0002;
        let mut t: NeighTable<u32, 8, 3, u128> = NeighTable::new(NeighConfig::default());
        let Resolve::Pending(i) = t.resolve(A6, 1, 0) else {
            panic!()
        };
        t.enqueue(i, 7, 60).unwrap();
        assert_eq!(t.poll(0), Some(NeighEvent::Request { port: 1, ip: A6 }));
        assert!(matches!(t.resolve(B6, 1, 0), Resolve::Pending(j) if j != i));
        assert!(t.confirm(A6, 1, MAC, Confirm::Reply, 10));
        assert_eq!(t.state(A6, 1), NeighState::Reachable);
        assert_eq!(t.state(B6, 1), NeighState::Incomplete);
        let mut released = Vec::new();
        while let Some(e) = t.poll(10) {
            released.push(e);
        }
        assert!(released.contains(&NeighEvent::Release {
            handle: 7,
            len: 60,
            port: 1,
            mac: MAC
        }));
        assert_eq!(t.entries().filter(|e| e.ip == A6).count(), 1);
    }

    #[test]
    fn one_request_per_interval_then_timeout_returns_handles() {
        let mut t = T::new(NeighConfig::default());
        let Resolve::Pending(i) = t.resolve(IP, 1, 0) else {
            panic!()
        };
        for h in 0..3 {
            t.enqueue(i, h, 60).unwrap();
            // More frames for the same neighbour: same entry, no second request.
            assert_eq!(t.resolve(IP, 1, 0), Resolve::Pending(i));
        }
        assert_eq!(t.enqueue(i, 99, 60), Err(99), "queue bound");
        assert_eq!(t.queued(), 3);
        assert_eq!(drain(&mut t, 0), [NeighEvent::Request { port: 1, ip: IP }]);
        assert_eq!(drain(&mut t, S / 2), []);
        assert_eq!(drain(&mut t, S - 1), []);
        assert_eq!(drain(&mut t, S), [NeighEvent::Request { port: 1, ip: IP }]);
        assert_eq!(
            drain(&mut t, 2 * S),
            [NeighEvent::Request { port: 1, ip: IP }]
        );
        assert_eq!(t.state(IP, 1), NeighState::Incomplete);
        assert_eq!(
            drain(&mut t, 3 * S),
            [
                NeighEvent::Dropped { handle: 0, len: 60 },
                NeighEvent::Dropped { handle: 1, len: 60 },
                NeighEvent::Dropped { handle: 2, len: 60 }
            ]
        );
        assert_eq!(t.queued(), 0);
        assert_eq!(t.state(IP, 1), NeighState::Free);
    }

    #[test]
    fn resolution_releases_in_order_and_ages() {
        let mut t = T::new(NeighConfig::default());
        let Resolve::Pending(i) = t.resolve(IP, 1, 0) else {
            panic!()
        };
        t.enqueue(i, 7, 60).unwrap();
        t.enqueue(i, 8, 61).unwrap();
        assert_eq!(drain(&mut t, 0).len(), 1);
        // A reply from another port does not resolve it (and creates nothing).
        assert!(!t.confirm(IP, 0, MAC, Confirm::Reply, 10));
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 10));
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        // Until the queue is empty, new frames queue behind (order kept).
        assert_eq!(t.resolve(IP, 1, 11), Resolve::Pending(i));
        t.enqueue(i, 9, 62).unwrap();
        let rel = |handle, len| NeighEvent::Release {
            handle,
            len,
            port: 1,
            mac: MAC,
        };
        assert_eq!(drain(&mut t, 12), [rel(7, 60), rel(8, 61), rel(9, 62)]);
        assert_eq!(t.resolve(IP, 1, 13), Resolve::Mac(MAC));
        // Ageing: stale after 30 s, still used, re-asked once per second of use, gone at 60 s.
        assert_eq!(drain(&mut t, 10 + 30 * S), []);
        assert_eq!(t.state(IP, 1), NeighState::Stale);
        assert_eq!(t.resolve(IP, 1, 31 * S), Resolve::Mac(MAC));
        assert_eq!(t.resolve(IP, 1, 31 * S), Resolve::Mac(MAC));
        assert_eq!(
            drain(&mut t, 31 * S),
            [NeighEvent::Request { port: 1, ip: IP }]
        );
        assert_eq!(t.resolve(IP, 1, 31 * S + 1), Resolve::Mac(MAC));
        assert_eq!(drain(&mut t, 31 * S + 1), []);
        assert_eq!(t.resolve(IP, 1, 32 * S + 1), Resolve::Mac(MAC));
        assert_eq!(drain(&mut t, 32 * S + 1).len(), 1);
        // A confirmation makes it reachable again.
        assert!(t.confirm(IP, 1, MacAddr([2, 0, 0, 0, 1, 3]), Confirm::Reply, 40 * S));
        assert_eq!(
            t.resolve(IP, 1, 40 * S),
            Resolve::Mac(MacAddr([2, 0, 0, 0, 1, 3]))
        );
        assert_eq!(drain(&mut t, 100 * S), []);
        assert_eq!(t.state(IP, 1), NeighState::Free, "aged out");
    }

    /// Entries learned from unsolicited requests are Stale and go first; an unsolicited
    /// request never takes the slot of an entry forwarding used; an entry in use is never
    /// evicted (item 1 of issue 15: spoofed ARP requests from 252 senders).
    #[test]
    fn spoofed_requests_never_evict_a_used_neighbour() {
        let mut t: NeighTable<u32, 8, 2> = NeighTable::new(NeighConfig::default());
        // A real next hop, resolved by forwarding, then idle.
        assert!(matches!(t.resolve(IP, 1, 0), Resolve::Pending(_)));
        drain_n(&mut t, 0);
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 1));
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        // 252 spoofed senders: each is learned Stale, never Reachable, and takes only the slot
        // of another spoofed one.
        for k in 0..252u32 {
            let fake = 0x0a00_0100 + 3 + k;
            t.confirm(
                fake,
                1,
                MacAddr([2, 9, 9, 9, 9, k as u8]),
                Confirm::Request,
                S + u64::from(k),
            );
            assert!(t
                .entries()
                .all(|e| e.ip == IP || e.state == NeighState::Stale));
        }
        assert_eq!(t.entries().count(), 8);
        assert_eq!(
            t.state(IP, 1),
            NeighState::Reachable,
            "the real, idle neighbour stays"
        );
        // Refreshing the fakes changes nothing for it.
        for k in 245..252u32 {
            t.confirm(0x0a00_0103 + k, 1, MAC, Confirm::Request, 2 * S);
        }
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        // A new next hop takes a fake's slot at once.
        let new = 0x0a00_0202;
        assert!(matches!(t.resolve(new, 1, 3 * S), Resolve::Pending(_)));
        assert_eq!(t.state(new, 1), NeighState::Incomplete);
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        // A reply never creates an entry (arp_accept=0).
        assert!(!t.confirm(0x0a00_0203, 1, MAC, Confirm::Reply, 3 * S));
        assert_eq!(t.state(0x0a00_0203, 1), NeighState::Free);
    }

    fn drain_n<const N: usize, const Q: usize>(t: &mut NeighTable<u32, N, Q>, now: u64) -> usize {
        let mut n = 0;
        while t.poll(now).is_some() {
            n += 1;
            assert!(n < 10_000, "poll does not converge");
        }
        n
    }

    /// A neighbour forwarding used within `in_use_ns` is never evicted, not even for another
    /// one forwarding needs; once idle longer, Stale goes before Reachable.
    #[test]
    fn in_use_neighbours_are_never_evicted() {
        let mut t = T::new(NeighConfig::default());
        // Four resolved neighbours (the cap of 1 Incomplete: resolve one at a time).
        for k in 0..4 {
            assert!(matches!(t.resolve(IP + k, 1, 0), Resolve::Pending(_)));
            assert!(t.confirm(IP + k, 1, MAC, Confirm::Reply, 0));
        }
        drain(&mut t, 0);
        // All used 1 s ago: nothing may go.
        for k in 0..4 {
            assert_eq!(t.resolve(IP + k, 1, S), Resolve::Mac(MAC));
        }
        assert_eq!(t.resolve(IP + 2, 1, 2 * S), Resolve::Mac(MAC));
        assert_eq!(t.resolve(IP + 9, 1, 2 * S), Resolve::TableFull);
        // 5 s later, IP + 3 is still used; IP + 1 went Stale (its MAC changed in a request).
        t.confirm(
            IP + 1,
            1,
            MacAddr([2, 0, 0, 0, 1, 9]),
            Confirm::Request,
            5 * S,
        );
        assert_eq!(t.state(IP + 1, 1), NeighState::Stale);
        assert_eq!(t.resolve(IP + 3, 1, 6 * S), Resolve::Mac(MAC));
        assert!(matches!(t.resolve(IP + 9, 1, 6 * S), Resolve::Pending(_)));
        assert_eq!(t.state(IP + 1, 1), NeighState::Free, "the Stale one went");
        assert_eq!(t.state(IP + 3, 1), NeighState::Reachable);
        assert!(t.confirm(IP + 9, 1, MAC, Confirm::Reply, 6 * S));
        assert!(matches!(t.resolve(IP + 10, 1, 6 * S), Resolve::Pending(_)));
        assert_eq!(
            t.state(IP, 1),
            NeighState::Free,
            "then the Reachable one used longest ago"
        );
        assert_eq!(t.state(IP + 3, 1), NeighState::Reachable, "in use: kept");
        // An unsolicited request takes no used entry's slot, however old.
        assert!(!t.confirm(IP + 20, 1, MAC, Confirm::Request, 60 * S));
    }

    /// A scan of silent addresses: at most a quarter of the table is Incomplete; a newer
    /// unresolved neighbour takes the oldest Incomplete slot and its queued frames come back
    /// as `Evicted`; resolved entries are untouched and a neighbour that answers gets through
    /// (item 2 of issue 15).
    #[test]
    fn a_scan_churns_only_the_incomplete_quarter() {
        type T16 = NeighTable<u32, 16, 2>;
        assert_eq!(T16::MAX_INCOMPLETE, 4);
        let mut t = T16::new(NeighConfig::default());
        assert!(matches!(t.resolve(IP, 1, 0), Resolve::Pending(_)));
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 0));
        drain_n(&mut t, 0);
        let mut handles = 0u32;
        let mut evicted = Vec::new();
        let mut now = S;
        for k in 0..400u32 {
            now += 2_500_000; // 400 frames/s
            let silent = 0x0a00_0100 + 10 + (k % 240);
            match t.resolve(silent, 1, now) {
                Resolve::Pending(i) => {
                    t.enqueue(i, handles, 60).unwrap();
                    handles += 1;
                }
                r => panic!("scan frame {k}: {r:?}"),
            }
            let incomplete = t
                .entries()
                .filter(|e| e.state == NeighState::Incomplete)
                .count();
            assert!(incomplete <= 4, "{incomplete} Incomplete entries");
            assert!(t.queued() <= 4 * 2 + 2);
            while let Some(ev) = t.poll(now) {
                match ev {
                    NeighEvent::Evicted { handle } => evicted.push(handle),
                    NeighEvent::Request { .. } => {}
                    e => panic!("{e:?}"),
                }
            }
            assert_eq!(t.state(IP, 1), NeighState::Reachable, "resolved entry kept");
        }
        assert_eq!(
            evicted.len(),
            396,
            "every scan frame but the last 4 given back"
        );
        assert_eq!(t.queued(), 4);
        // A real new neighbour amid the scan: asked at once, answers, its frame leaves.
        let real = 0x0a00_0205;
        let Resolve::Pending(i) = t.resolve(real, 1, now) else {
            panic!()
        };
        t.enqueue(i, 9999, 60).unwrap();
        assert!(t.confirm(real, 1, MAC, Confirm::Reply, now));
        let evs: Vec<_> = core::iter::from_fn(|| t.poll(now)).collect();
        assert!(
            evs.contains(&NeighEvent::Release {
                handle: 9999,
                len: 60,
                port: 1,
                mac: MAC
            }),
            "{evs:?}"
        );
        assert_eq!(t.resolve(real, 1, now), Resolve::Mac(MAC));
        // Nothing is lost: flush gives back every handle still held.
        let mut rest = 0;
        while t.flush().is_some() {
            rest += 1;
        }
        assert_eq!(rest, 3);
        assert_eq!(t.queued(), 0);
    }

    /// Linux's states for ARP from a known neighbour: a request (or overheard ARP) turns an
    /// Incomplete entry Stale and releases its frames, never confirms a Reachable one.
    #[test]
    fn requests_update_without_confirming() {
        let mut t = T::new(NeighConfig::default());
        let Resolve::Pending(i) = t.resolve(IP, 1, 0) else {
            panic!()
        };
        t.enqueue(i, 5, 60).unwrap();
        drain(&mut t, 0);
        assert!(t.confirm(IP, 1, MAC, Confirm::Overheard, 10));
        assert_eq!(t.state(IP, 1), NeighState::Stale);
        assert_eq!(
            drain(&mut t, 10),
            [NeighEvent::Release {
                handle: 5,
                len: 60,
                port: 1,
                mac: MAC
            }]
        );
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 20));
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        t.confirm(IP, 1, MAC, Confirm::Request, 30);
        assert_eq!(
            t.state(IP, 1),
            NeighState::Reachable,
            "same MAC: state kept"
        );
        // Not refreshed by requests: Stale 30 s after the reply.
        drain(&mut t, 20 + 30 * S);
        assert_eq!(t.state(IP, 1), NeighState::Stale);
        assert!(
            !t.confirm(IP + 1, 1, MAC, Confirm::Overheard, 40),
            "overheard creates none"
        );
    }

    #[test]
    fn flush_returns_everything() {
        let mut t: NeighTable<u32, 16, 3> = NeighTable::new(NeighConfig::default());
        for k in 0..3u32 {
            let Resolve::Pending(i) = t.resolve(IP + k, 0, 0) else {
                panic!()
            };
            t.enqueue(i, 10 * k, 60).unwrap();
            t.enqueue(i, 10 * k + 1, 60).unwrap();
        }
        let mut got = Vec::new();
        while let Some(h) = t.flush() {
            got.push(h);
        }
        got.sort();
        assert_eq!(got, [0, 1, 10, 11, 20, 21]);
        assert_eq!(t.queued(), 0);
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const IP: u32 = 0x0a00_0102;
    const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xb, 2]);

    /// What the router's next-hop cache relies on: an index only for a Reachable entry with
    /// nothing queued, and a mark whenever such an entry changes.
    #[test]
    fn cacheable_answers_and_the_change_mark() {
        let mut t: NeighTable<u32, 4, 2> = NeighTable::new(NeighConfig::default());
        let (r, c) = t.resolve_cacheable(IP, 1, 0);
        assert!(
            matches!(r, Resolve::Pending(_)) && c.is_none(),
            "Incomplete"
        );
        let Resolve::Pending(i) = r else { panic!() };
        t.enqueue(i, 7, 60).unwrap();
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 1));
        assert!(
            !t.take_reachable_changed(),
            "becoming Reachable changes no answer"
        );
        assert_eq!(
            t.resolve_cacheable(IP, 1, 2),
            (Resolve::Pending(i), None),
            "queued"
        );
        while t.poll(2).is_some() {}
        assert_eq!(t.resolve_cacheable(IP, 1, 3), (Resolve::Mac(MAC), Some(i)));
        // The same MAC confirmed again: nothing to forget.
        assert!(t.confirm(IP, 1, MAC, Confirm::Reply, 4));
        assert!(t.confirm(IP, 1, MAC, Confirm::Request, 4));
        assert!(!t.take_reachable_changed());
        // A new MAC: Stale, the mark is set (once).
        let other = MacAddr([2, 0, 0, 0, 0xb, 3]);
        assert!(t.confirm(IP, 1, other, Confirm::Overheard, 5));
        assert!(t.take_reachable_changed());
        assert!(!t.take_reachable_changed());
        assert_eq!(
            t.resolve_cacheable(IP, 1, 6),
            (Resolve::Mac(other), None),
            "Stale"
        );
        // Reachable again, then aged to Stale by the timers: marked.
        assert!(t.confirm(IP, 1, other, Confirm::Reply, 7));
        assert_eq!(t.resolve_cacheable(IP, 1, 8).1, Some(i));
        while t.poll(7 + 30 * S).is_some() {}
        assert!(t.take_reachable_changed());
        // A Reachable entry aged out entirely (no poll in between): marked.
        assert!(t.confirm(IP, 1, other, Confirm::Reply, 100 * S));
        while t.poll(170 * S).is_some() {}
        assert!(t.take_reachable_changed());
        assert_eq!(t.state(IP, 1), NeighState::Free);
    }

    /// `touch` is a use, as `resolve` records it: an entry touched within `in_use_ns` keeps its
    /// slot; one not touched since loses it to a neighbour forwarding needs.
    #[test]
    fn touch_counts_as_use_and_a_taken_slot_is_marked() {
        let mut t: NeighTable<u32, 2, 2> = NeighTable::new(NeighConfig::default());
        for k in 0..2 {
            assert!(matches!(t.resolve(IP + k, 1, 0), Resolve::Pending(_)));
            assert!(t.confirm(IP + k, 1, MAC, Confirm::Reply, 0));
        }
        while t.poll(0).is_some() {}
        let (_, Some(i0)) = t.resolve_cacheable(IP, 1, 0) else {
            panic!()
        };
        assert!(!t.take_reachable_changed());
        t.touch(i0, 9 * S);
        // At 10 s IP + 1 (used at 0) goes for a new one; IP (touched at 9 s) stays.
        assert!(matches!(t.resolve(IP + 5, 1, 10 * S), Resolve::Pending(_)));
        assert_eq!(t.state(IP, 1), NeighState::Reachable);
        assert_eq!(t.state(IP + 1, 1), NeighState::Free);
        assert!(
            t.take_reachable_changed(),
            "a Reachable entry's slot was taken"
        );
    }
}

#[cfg(test)]
mod needs_poll_tests {
    use super::*;

    #[test]
    fn set_by_work_cleared_by_an_empty_poll() {
        let mut t: NeighTable<u32, 4, 2> = NeighTable::new(NeighConfig::default());
        assert!(!t.needs_poll());
        assert!(matches!(t.resolve(0x0a00_0102, 1, 0), Resolve::Pending(_)));
        assert!(t.needs_poll(), "a new neighbour needs a request");
        assert!(matches!(t.poll(0), Some(NeighEvent::Request { .. })));
        assert!(t.poll(0).is_none());
        assert!(!t.needs_poll(), "nothing left until a timer fires");
        let Resolve::Pending(i) = t.resolve(0x0a00_0102, 1, 1) else {
            panic!("still incomplete")
        };
        t.enqueue(i, 7, 60).unwrap();
        let _ = t.poll(1);
        assert!(t.poll(1).is_none());
        assert!(!t.needs_poll());
        assert!(t.confirm(
            0x0a00_0102,
            1,
            MacAddr([2, 0, 0, 0, 0xb, 2]),
            Confirm::Reply,
            2
        ));
        assert!(t.needs_poll(), "a resolved neighbour with queued frames");
        assert!(matches!(
            t.poll(2),
            Some(NeighEvent::Release { handle: 7, .. })
        ));
        assert!(t.poll(2).is_none());
        assert!(!t.needs_poll());
    }
}
