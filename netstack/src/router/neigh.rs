//! Neighbour table: IPv4 → MAC over ARP (RFC 826), with a bounded queue of frames per
//! unresolved neighbour.
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

use crate::MacAddr;

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
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            retrans_ns: 1_000_000_000,
            max_probes: 3,
            reachable_ns: 30_000_000_000,
            stale_ns: 60_000_000_000,
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
    /// No entry and no free slot.
    TableFull,
}

/// Work found by [`NeighTable::poll`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum NeighEvent<H> {
    /// Broadcast an ARP request for `ip` on `port`.
    Request {
        /// Output port.
        port: u8,
        /// The address asked for.
        ip: u32,
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
    },
}

#[derive(Copy, Clone, Debug)]
struct Entry<H, const Q: usize> {
    state: NeighState,
    ip: u32,
    port: u8,
    mac: MacAddr,
    /// Last confirmation (Reachable/Stale) or creation (Incomplete).
    confirmed_ns: u64,
    /// Last request sent.
    probe_ns: u64,
    probes: u8,
    probe_due: bool,
    queue: [Option<(H, u16)>; Q],
    head: u8,
    qlen: u8,
}

impl<H: Copy, const Q: usize> Entry<H, Q> {
    const FREE: Self = Entry {
        state: NeighState::Free,
        ip: 0,
        port: 0,
        mac: MacAddr([0; 6]),
        confirmed_ns: 0,
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
pub struct NeighInfo {
    /// Neighbour address (host order).
    pub ip: u32,
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
pub struct NeighTable<H: Copy, const N: usize, const Q: usize> {
    entries: [Entry<H, Q>; N],
    cfg: NeighConfig,
    queued: usize,
    /// Something changed that [`NeighTable::poll`] must act on without waiting for a timer
    /// (a request due, queued frames to release): lets the fast path skip the O(N) scan after
    /// a burst that changed nothing.
    urgent: bool,
}

impl<H: Copy, const N: usize, const Q: usize> NeighTable<H, N, Q> {
    const CHECK: () = assert!(Q > 0 && Q <= 255 && N > 0);

    /// An empty table.
    pub fn new(cfg: NeighConfig) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        NeighTable {
            entries: [Entry::FREE; N],
            cfg,
            queued: 0,
            urgent: false,
        }
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

    /// Frames queued over all entries.
    pub fn queued(&self) -> usize {
        self.queued
    }

    fn find(&self, ip: u32, port: u8) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.state != NeighState::Free && e.ip == ip && e.port == port)
    }

    /// Where to send a frame for neighbour `ip` on `port`. Creates an incomplete entry (with a
    /// request due) for an unknown neighbour; marks a stale entry for a new request.
    #[inline(always)]
    pub fn resolve(&mut self, ip: u32, port: u8, now_ns: u64) -> Resolve {
        if let Some(i) = self.find(ip, port) {
            let retrans = self.cfg.retrans_ns;
            let e = &mut self.entries[i];
            return match e.state {
                NeighState::Incomplete => Resolve::Pending(i),
                _ if e.qlen > 0 => Resolve::Pending(i),
                NeighState::Stale => {
                    if now_ns.saturating_sub(e.probe_ns) >= retrans || e.probes == 0 {
                        e.probe_due = true;
                        self.urgent = true;
                    }
                    Resolve::Mac(e.mac)
                }
                _ => Resolve::Mac(e.mac),
            };
        }
        self.resolve_new(ip, port, now_ns)
    }

    /// [`NeighTable::resolve`]'s slow path: an incomplete entry for a neighbour not in the
    /// table (kept out of line so the per-packet path stays small).
    #[cold]
    #[inline(never)]
    fn resolve_new(&mut self, ip: u32, port: u8, now_ns: u64) -> Resolve {
        let Some(i) = self.free_slot() else {
            return Resolve::TableFull;
        };
        self.entries[i] = Entry {
            state: NeighState::Incomplete,
            ip,
            port,
            confirmed_ns: now_ns,
            probe_due: true,
            ..Entry::FREE
        };
        self.urgent = true;
        Resolve::Pending(i)
    }

    /// A free slot, else the stale entry confirmed longest ago (it has no queue).
    fn free_slot(&self) -> Option<usize> {
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.state == NeighState::Free)
        {
            return Some(i);
        }
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.state == NeighState::Stale && e.qlen == 0)
            .min_by_key(|(_, e)| e.confirmed_ns)
            .map(|(i, _)| i)
    }

    /// Queue a frame behind entry `idx` (from [`Resolve::Pending`]). A full queue gives the
    /// handle back.
    pub fn enqueue(&mut self, idx: usize, handle: H, len: u16) -> Result<(), H> {
        let e = &mut self.entries[idx];
        if usize::from(e.qlen) == Q || e.state == NeighState::Free {
            return Err(handle);
        }
        let tail = (usize::from(e.head) + usize::from(e.qlen)) % Q;
        e.queue[tail] = Some((handle, len));
        e.qlen += 1;
        self.queued += 1;
        self.urgent = true;
        Ok(())
    }

    /// The neighbour `ip` on `port` said it has `mac` (an ARP request or reply from it).
    /// Updates an existing entry (RFC 826's merge), or creates one when `create` (the ARP was
    /// addressed to us). Returns whether the table changed.
    pub fn confirm(&mut self, ip: u32, port: u8, mac: MacAddr, create: bool, now_ns: u64) -> bool {
        let i = match self.find(ip, port) {
            Some(i) => i,
            None if create => match self.free_slot() {
                Some(i) => {
                    self.entries[i] = Entry {
                        ip,
                        port,
                        ..Entry::FREE
                    };
                    i
                }
                None => return false,
            },
            None => return false,
        };
        let e = &mut self.entries[i];
        e.state = NeighState::Reachable;
        e.mac = mac;
        e.confirmed_ns = now_ns;
        e.probes = 0;
        e.probe_due = false;
        self.urgent |= e.qlen > 0;
        true
    }

    /// Advance timers and return one piece of work, or `None` when there is none now. Call it
    /// until it returns `None` (each call is O(N)).
    pub fn poll(&mut self, now_ns: u64) -> Option<NeighEvent<H>> {
        let cfg = self.cfg;
        for e in self.entries.iter_mut() {
            match e.state {
                NeighState::Free => {}
                NeighState::Incomplete => {
                    let since = now_ns.saturating_sub(e.probe_ns);
                    if e.probe_due || since >= cfg.retrans_ns {
                        if e.probes >= cfg.max_probes {
                            if let Some((handle, _)) = e.pop() {
                                self.queued -= 1;
                                return Some(NeighEvent::Dropped { handle });
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
                    if age >= cfg.stale_ns {
                        *e = Entry::FREE;
                        continue;
                    }
                    if age >= cfg.reachable_ns {
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
        for e in self.entries.iter_mut() {
            if let Some((h, _)) = e.pop() {
                self.queued -= 1;
                return Some(h);
            }
        }
        None
    }

    /// The live entries (console `neigh`).
    pub fn entries(&self) -> impl Iterator<Item = NeighInfo> + '_ {
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
    pub fn state(&self, ip: u32, port: u8) -> NeighState {
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
                NeighEvent::Dropped { handle: 0 },
                NeighEvent::Dropped { handle: 1 },
                NeighEvent::Dropped { handle: 2 }
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
        assert!(!t.confirm(IP, 0, MAC, false, 10));
        assert!(t.confirm(IP, 1, MAC, false, 10));
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
        assert!(t.confirm(IP, 1, MacAddr([2, 0, 0, 0, 1, 3]), false, 40 * S));
        assert_eq!(
            t.resolve(IP, 1, 40 * S),
            Resolve::Mac(MacAddr([2, 0, 0, 0, 1, 3]))
        );
        assert_eq!(drain(&mut t, 100 * S), []);
        assert_eq!(t.state(IP, 1), NeighState::Free, "aged out");
    }

    #[test]
    fn full_table_evicts_only_stale_without_queue() {
        let mut t = T::new(NeighConfig::default());
        for k in 0..4 {
            assert!(matches!(t.resolve(IP + k, 1, 0), Resolve::Pending(_)));
        }
        assert_eq!(t.resolve(IP + 9, 1, 0), Resolve::TableFull);
        // Learned entries (ARP for us) need a slot too: none free, none stale.
        assert!(!t.confirm(IP + 9, 1, MAC, true, 0));
        assert!(t.confirm(IP, 1, MAC, false, 0));
        assert!(t.confirm(IP + 1, 1, MAC, false, 5));
        drain(&mut t, 0);
        // Make the two confirmed ones stale; the older goes first.
        drain(&mut t, 30 * S + 5);
        assert_eq!(t.state(IP, 1), NeighState::Stale);
        assert!(matches!(
            t.resolve(IP + 9, 1, 30 * S + 5),
            Resolve::Pending(_)
        ));
        assert_eq!(t.state(IP, 1), NeighState::Free);
        assert_eq!(t.state(IP + 1, 1), NeighState::Stale);
    }

    #[test]
    fn flush_returns_everything() {
        let mut t = T::new(NeighConfig::default());
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
        assert!(t.confirm(0x0a00_0102, 1, MacAddr([2, 0, 0, 0, 0xb, 2]), false, 2));
        assert!(t.needs_poll(), "a resolved neighbour with queued frames");
        assert!(matches!(
            t.poll(2),
            Some(NeighEvent::Release { handle: 7, .. })
        ));
        assert!(t.poll(2).is_none());
        assert!(!t.needs_poll());
    }
}
