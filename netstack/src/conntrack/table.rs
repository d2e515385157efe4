//! The connection table: fixed-capacity, over caller-provided storage, no allocation.
//!
//! Each entry holds two [`Tuple`]s, one per [`Side`] (the packet as seen on the inside and as
//! seen on the outside: for a firewall the second is the first reversed, for a NAT it names
//! the translated endpoint), and both are hashed into one bucket array, so a packet from
//! either side finds the same entry with one lookup (Linux's `tuplehash[IP_CT_DIR_MAX]`).
//! Buckets are chained through the entries (`u32` links, no pointers); a chain node is
//! `entry × 2 + side`.
//!
//! # Expiry without a global scan
//!
//! Every entry is on exactly one doubly-linked list of its [`Class`], in order of last use: a
//! use moves it to the tail. All entries of a class share one timeout, so each list is ordered
//! by expiry too and its head is the next to expire. [`Table::expire`] frees expired heads, at
//! most `budget` per call (callers run it with a small budget per packet and from a periodic
//! tick), and a lookup that finds an expired entry frees it on the spot (lazy expiry), so an
//! expired entry is never used whatever the sweep's progress. This is VPP nat44-ed's per-class
//! LRU lists (`src/plugins/nat/nat44-ed`: a session LRU per thread and per protocol class,
//! `tcp_trans`, `tcp_estab`, `udp`, `icmp`; `nat44_ed_del_session` on the head when it has
//! timed out) with Linux's lazy expiry on lookup (`nf_conntrack_core.c`: `nf_ct_gc_expired` in
//! `____nf_conntrack_find`, and the incremental `gc_worker` instead of a full scan). Timeouts
//! changed at run time take effect at once: an entry stores its last use, not a deadline.
//!
//! # Full table (the flood policy)
//!
//! A new entry takes a free slot; when there is none, the expired heads are freed (a few);
//! when still none, the least recently used **embryonic** entry is evicted: the oldest head
//! of [`Class::TcpEmbryonic`], [`Class::UdpUnreplied`], [`Class::IcmpUnreplied`] and
//! [`Class::TcpClosed`] (Linux's `early_drop` evicts only entries not `ASSURED`, i.e. not yet
//! answered). Entries that have seen both directions (an established TCP connection, a UDP or
//! ICMP flow with a reply, a closing TCP connection still in FIN_WAIT/CLOSE_WAIT/LAST_ACK) and
//! [`Class::Pinned`] ones are never evicted to make room: the new entry is refused
//! ([`Full`]) and the caller counts the drop. A flood of spoofed SYNs therefore churns only
//! the embryonic entries and never touches established flows.
//!
//! # Memory
//!
//! `capacity × size_of::<Entry<V>>()` (64 bytes for a `u32` value: two 16-byte tuples, two
//! chain links, two list links, the last use, class, state, flags) plus `buckets × 4` bytes.
//! One million entries with as many buckets take 68 MB.
//!
//! # Hash
//!
//! SplitMix64's finaliser over the tuple, keyed with the caller's seed (a random one per boot
//! makes the bucket of a tuple unpredictable to a sender). It is not a PRF (Linux keys
//! SipHash): a sender who learns the seed can lengthen one chain; the chains' length does
//! not change what is evicted, only the time a lookup takes.

use super::{Side, Tuple};

/// No entry (end of a chain or list).
pub const NIL: u32 = u32::MAX;

/// The list an entry is on, which fixes its timeout and whether it may be evicted.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
#[repr(u8)]
pub enum Class {
    /// TCP not yet established both ways (SYN_SENT, SYN_RECV, SYN_SENT2, or picked up
    /// mid-stream and not answered): transitory timeout, evictable.
    TcpEmbryonic = 0,
    /// TCP ESTABLISHED with both directions seen: established timeout, never evicted.
    TcpEstablished = 1,
    /// TCP closing with both directions seen (FIN_WAIT, CLOSE_WAIT, LAST_ACK): transitory
    /// timeout, never evicted.
    TcpClosing = 2,
    /// TCP TIME_WAIT or CLOSE: transitory timeout, evictable.
    TcpClosed = 3,
    /// UDP seen one way only: UDP timeout, evictable.
    UdpUnreplied = 4,
    /// UDP seen both ways: UDP timeout, never evicted.
    Udp = 5,
    /// ICMP query not answered: ICMP timeout, evictable.
    IcmpUnreplied = 6,
    /// ICMP query answered: ICMP timeout, never evicted.
    Icmp = 7,
    /// Never expires, never evicted (a NAT's static forwards and live mappings); freed only
    /// by [`Table::remove`].
    Pinned = 8,
}

/// Number of [`Class`]es.
pub const CLASSES: usize = 9;

const ALL: [Class; CLASSES] = [
    Class::TcpEmbryonic,
    Class::TcpEstablished,
    Class::TcpClosing,
    Class::TcpClosed,
    Class::UdpUnreplied,
    Class::Udp,
    Class::IcmpUnreplied,
    Class::Icmp,
    Class::Pinned,
];

const EVICTABLE: [Class; 4] = [
    Class::TcpEmbryonic,
    Class::UdpUnreplied,
    Class::IcmpUnreplied,
    Class::TcpClosed,
];

/// Marks a free entry's class byte.
const FREE: u8 = 0xff;

/// Idle timeouts, in seconds. The defaults are the RFCs' minimums (RFC 5382 REQ-5: TCP
/// established ≥ 2 h 4 min, transitory ≥ 4 min; RFC 4787 REQ-5: UDP ≥ 2 min, 5 min
/// recommended; RFC 5508 REQ-1: ICMP query ≥ 60 s). Shorter values are accepted (tests,
/// differential runs against Linux with short sysctls); [`Timeouts::meets_rfcs`] tells.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct Timeouts {
    /// TCP ESTABLISHED (RFC 5382 REQ-5: ≥ 7,440 s). Default 7,440.
    pub tcp_established: u32,
    /// TCP in any other state, RST-closed included (RFC 5382 REQ-5: ≥ 240 s; RFC 7857 §2.2:
    /// a RST'd session is kept this long). Default 240.
    pub tcp_transitory: u32,
    /// UDP (RFC 4787 REQ-5: ≥ 120 s, 300 s recommended). Default 300.
    pub udp: u32,
    /// ICMP query (RFC 5508 REQ-1: ≥ 60 s). Default 60.
    pub icmp: u32,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            tcp_established: 2 * 3600 + 4 * 60,
            tcp_transitory: 4 * 60,
            udp: 300,
            icmp: 60,
        }
    }
}

impl Timeouts {
    /// True when every timeout is at least the RFCs' minimum.
    pub fn meets_rfcs(&self) -> bool {
        self.tcp_established >= 7440
            && self.tcp_transitory >= 240
            && self.udp >= 120
            && self.icmp >= 60
    }

    /// The timeout of `class` in nanoseconds (`u64::MAX` for [`Class::Pinned`]).
    pub fn of(&self, class: Class) -> u64 {
        let s = match class {
            Class::TcpEstablished => self.tcp_established,
            Class::TcpEmbryonic | Class::TcpClosing | Class::TcpClosed => self.tcp_transitory,
            Class::UdpUnreplied | Class::Udp => self.udp,
            Class::IcmpUnreplied | Class::Icmp => self.icmp,
            Class::Pinned => return u64::MAX,
        };
        u64::from(s) * 1_000_000_000
    }
}

/// One connection (or mapping) slot. `V` is the owner's value (a NAT session's mapping index).
#[derive(Copy, Clone, Debug)]
pub struct Entry<V> {
    tuple: [Tuple; 2],
    hnext: [u32; 2],
    prev: u32,
    next: u32,
    seen: u64,
    class: u8,
    /// The owner's state byte (a [`super::TcpState`] for TCP).
    pub state: u8,
    /// The owner's flag bits.
    pub flags: u8,
    /// The owner's value.
    pub value: V,
}

impl<V: Default> Default for Entry<V> {
    fn default() -> Entry<V> {
        Entry {
            tuple: [Tuple::default(); 2],
            hnext: [NIL; 2],
            prev: NIL,
            next: NIL,
            seen: 0,
            class: FREE,
            state: 0,
            flags: 0,
            value: V::default(),
        }
    }
}

impl<V> Entry<V> {
    /// The tuple of `side`.
    pub fn tuple(&self, side: Side) -> Tuple {
        self.tuple[side as usize]
    }

    /// Its class; `None` when the slot is free.
    pub fn class(&self) -> Option<Class> {
        ALL.get(usize::from(self.class)).copied()
    }

    /// Last use, in the caller's nanoseconds.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

/// A new entry was refused: no free slot and nothing evictable.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Full;

/// Storage the table cannot use.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum TableError {
    /// The bucket count is not a power of two (it is `.0`).
    BucketsNotPowerOfTwo(usize),
    /// No entries, or more than 2³¹ − 1.
    BadCapacity(usize),
}

/// What the table did besides lookups, for the owner's counters.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct TableCounters {
    /// Entries freed because they timed out (sweep or lazy).
    pub expired: u64,
    /// Embryonic entries evicted to make room for a new one.
    pub evicted: u64,
    /// New entries refused ([`Full`]).
    pub full: u64,
}

/// A table over `entries` and `buckets` (caller storage; see the module's *Memory*).
pub struct Table<'a, V> {
    entries: &'a mut [Entry<V>],
    buckets: &'a mut [u32],
    seed: u64,
    head: [u32; CLASSES],
    tail: [u32; CLASSES],
    free: u32,
    len: usize,
    /// Timeouts, read at every expiry check (change them at any time).
    pub timeouts: Timeouts,
    counters: TableCounters,
    /// No list head expires before this time (ns; see [`Table::expire`]), under
    /// `swept_with`'s timeouts.
    next_sweep: u64,
    /// The timeouts `next_sweep` was computed with: other timeouts void it.
    swept_with: Timeouts,
}

impl<'a, V: Copy> Table<'a, V> {
    /// A table with every slot of `entries` free. `buckets.len()` must be a power of two
    /// (one bucket per entry is the usual choice); `seed` keys the hash.
    pub fn new(
        entries: &'a mut [Entry<V>],
        buckets: &'a mut [u32],
        seed: u64,
        timeouts: Timeouts,
    ) -> Result<Table<'a, V>, TableError> {
        if !buckets.len().is_power_of_two() {
            return Err(TableError::BucketsNotPowerOfTwo(buckets.len()));
        }
        if entries.is_empty() || entries.len() >= (1 << 31) {
            return Err(TableError::BadCapacity(entries.len()));
        }
        buckets.fill(NIL);
        let n = entries.len();
        for (i, e) in entries.iter_mut().enumerate() {
            e.class = FREE;
            e.hnext = [NIL; 2];
            e.prev = NIL;
            e.next = if i + 1 < n { (i + 1) as u32 } else { NIL };
        }
        Ok(Table {
            entries,
            buckets,
            seed,
            head: [NIL; CLASSES],
            tail: [NIL; CLASSES],
            free: 0,
            len: 0,
            timeouts,
            counters: TableCounters::default(),
            next_sweep: 0,
            swept_with: timeouts,
        })
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in all.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Expiry, eviction and refusal counts.
    pub fn counters(&self) -> TableCounters {
        self.counters
    }

    /// Entries in use in `class`, counted by walking its list (for tests and the console).
    pub fn count(&self, class: Class) -> usize {
        let mut n = 0;
        let mut i = self.head[class as usize];
        while i != NIL {
            n += 1;
            i = self.entries[i as usize].next;
        }
        n
    }

    /// The entry at `idx` (from [`Table::lookup`] or [`Table::insert`]).
    pub fn get(&self, idx: u32) -> &Entry<V> {
        &self.entries[idx as usize]
    }

    /// The entry at `idx`, mutable (its `state`, `flags` and `value`).
    pub fn get_mut(&mut self, idx: u32) -> &mut Entry<V> {
        &mut self.entries[idx as usize]
    }

    /// Every entry in use with its index, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Entry<V>)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.class != FREE)
            .map(|(i, e)| (i as u32, e))
    }

    fn bucket(&self, t: &Tuple) -> usize {
        (t.hash(self.seed) as usize) & (self.buckets.len() - 1)
    }

    fn expired(&self, e: &Entry<V>, now: u64) -> bool {
        match e.class() {
            Some(c) => now.saturating_sub(e.seen) > self.timeouts.of(c),
            None => false,
        }
    }

    /// The entry whose tuple on `side` is `t`. An entry found expired is freed (its value
    /// given to `on_free`) and not returned.
    pub fn lookup(
        &mut self,
        t: &Tuple,
        side: Side,
        now: u64,
        on_free: &mut impl FnMut(&Entry<V>),
    ) -> Option<u32> {
        let mut node = self.buckets[self.bucket(t)];
        while node != NIL {
            let (i, s) = ((node >> 1) as usize, (node & 1) as usize);
            let e = &self.entries[i];
            if s == side as usize && e.tuple[s] == *t {
                if self.expired(e, now) {
                    self.counters.expired += 1;
                    self.free_entry(i as u32, on_free);
                    return None;
                }
                return Some(i as u32);
            }
            node = e.hnext[s];
        }
        None
    }

    /// Record a use at `now`: the entry moves to the tail of its list (where a busy flow's
    /// entry already is: then only its time changes).
    pub fn touch(&mut self, idx: u32, now: u64) {
        let c = self.entries[idx as usize].class as usize;
        let e = &mut self.entries[idx as usize];
        e.seen = now.max(e.seen);
        if self.tail[c] != idx {
            self.unlink_list(idx);
            self.push_tail(c, idx);
        }
    }

    /// Move the entry to `class` (and record a use at `now`); in the class it is in, a
    /// [`Table::touch`].
    pub fn set_class(&mut self, idx: u32, class: Class, now: u64) {
        if self.entries[idx as usize].class == class as u8 {
            return self.touch(idx, now);
        }
        self.unlink_list(idx);
        let e = &mut self.entries[idx as usize];
        e.class = class as u8;
        e.seen = now.max(e.seen);
        self.push_tail(class as usize, idx);
        self.due(idx);
    }

    /// A new entry with these tuples (inside, outside) in `class`, used at `now`. When no slot
    /// is free, expired list heads are freed first, then the least recently used embryonic
    /// entry is evicted (given to `on_free`); `Err(Full)` when neither frees a slot. The
    /// caller has checked that neither tuple is in the table on its side.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        inside: Tuple,
        outside: Tuple,
        class: Class,
        state: u8,
        flags: u8,
        value: V,
        now: u64,
        on_free: &mut impl FnMut(&Entry<V>),
    ) -> Result<u32, Full> {
        if self.free == NIL {
            self.expire(now, 4, on_free);
        }
        if self.free == NIL {
            let victim = EVICTABLE
                .iter()
                .map(|&c| self.head[c as usize])
                .filter(|&i| i != NIL)
                .min_by_key(|&i| self.entries[i as usize].seen);
            match victim {
                Some(v) => {
                    self.counters.evicted += 1;
                    self.free_entry(v, on_free);
                }
                None => {
                    self.counters.full += 1;
                    return Err(Full);
                }
            }
        }
        let idx = self.free;
        self.free = self.entries[idx as usize].next;
        {
            let e = &mut self.entries[idx as usize];
            e.tuple = [inside, outside];
            e.seen = now;
            e.class = class as u8;
            e.state = state;
            e.flags = flags;
            e.value = value;
        }
        for side in 0..2 {
            let b = self.bucket(&self.entries[idx as usize].tuple[side]);
            self.entries[idx as usize].hnext[side] = self.buckets[b];
            self.buckets[b] = (idx << 1) | side as u32;
        }
        self.push_tail(class as usize, idx);
        self.due(idx);
        self.len += 1;
        Ok(idx)
    }

    /// Free the entry at `idx` (its value given to `on_free`).
    pub fn remove(&mut self, idx: u32, on_free: &mut impl FnMut(&Entry<V>)) {
        if self.entries[idx as usize].class != FREE {
            self.free_entry(idx, on_free);
        }
    }

    /// Free expired entries from the heads of the lists, at most `budget` in all; returns how
    /// many. Never scans more than `budget + CLASSES` entries.
    ///
    /// A pass that ends before its budget records when the earliest head will expire; until
    /// then (no entry inserted or moved to a class with a nearer expiry, the timeouts
    /// unchanged) a call returns at once. Each list is ordered by last use, so its head
    /// expires first, and a use or a freed head only moves that time later: the per-frame
    /// sweep costs one compare while nothing is due.
    pub fn expire(
        &mut self,
        now: u64,
        budget: usize,
        on_free: &mut impl FnMut(&Entry<V>),
    ) -> usize {
        if now <= self.next_sweep && self.timeouts == self.swept_with {
            return 0;
        }
        let mut n = 0;
        for c in 0..CLASSES - 1 {
            while n < budget {
                let h = self.head[c];
                if h == NIL || !self.expired(&self.entries[h as usize], now) {
                    break;
                }
                self.counters.expired += 1;
                self.free_entry(h, on_free);
                n += 1;
            }
        }
        self.swept_with = self.timeouts;
        self.next_sweep = if n < budget {
            (0..CLASSES - 1)
                .map(|c| self.head[c])
                .filter(|&h| h != NIL)
                .map(|h| self.deadline(&self.entries[h as usize]))
                .min()
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        n
    }

    /// Whether [`Table::expire`] at `now` may find an expired list head (else it returns at
    /// once): for callers that sweep per frame and skip the call.
    #[inline(always)]
    pub fn sweep_due(&self, now: u64) -> bool {
        now > self.next_sweep || self.timeouts != self.swept_with
    }

    /// When `e` expires (ns): after this time [`Table::expired`] says so.
    fn deadline(&self, e: &Entry<V>) -> u64 {
        e.class()
            .map_or(u64::MAX, |c| e.seen.saturating_add(self.timeouts.of(c)))
    }

    /// Entry `idx` now expires at its [`Table::deadline`]: bring the sweep's time forward.
    fn due(&mut self, idx: u32) {
        let d = self.deadline(&self.entries[idx as usize]);
        self.next_sweep = self.next_sweep.min(d);
    }

    fn free_entry(&mut self, idx: u32, on_free: &mut impl FnMut(&Entry<V>)) {
        on_free(&self.entries[idx as usize]);
        for side in 0..2 {
            let b = self.bucket(&self.entries[idx as usize].tuple[side]);
            let me = (idx << 1) | side as u32;
            let after = self.entries[idx as usize].hnext[side];
            if self.buckets[b] == me {
                self.buckets[b] = after;
            } else {
                let mut node = self.buckets[b];
                while node != NIL {
                    let (i, s) = ((node >> 1) as usize, (node & 1) as usize);
                    let next = self.entries[i].hnext[s];
                    if next == me {
                        self.entries[i].hnext[s] = after;
                        break;
                    }
                    node = next;
                }
            }
        }
        self.unlink_list(idx);
        let e = &mut self.entries[idx as usize];
        e.class = FREE;
        e.hnext = [NIL; 2];
        e.prev = NIL;
        e.next = self.free;
        self.free = idx;
        self.len -= 1;
    }

    fn unlink_list(&mut self, idx: u32) {
        let c = self.entries[idx as usize].class as usize;
        let (p, n) = {
            let e = &self.entries[idx as usize];
            (e.prev, e.next)
        };
        if p == NIL {
            self.head[c] = n;
        } else {
            self.entries[p as usize].next = n;
        }
        if n == NIL {
            self.tail[c] = p;
        } else {
            self.entries[n as usize].prev = p;
        }
        let e = &mut self.entries[idx as usize];
        e.prev = NIL;
        e.next = NIL;
    }

    fn push_tail(&mut self, c: usize, idx: u32) {
        let t = self.tail[c];
        {
            let e = &mut self.entries[idx as usize];
            e.prev = t;
            e.next = NIL;
        }
        if t == NIL {
            self.head[c] = idx;
        } else {
            self.entries[t as usize].next = idx;
        }
        self.tail[c] = idx;
    }
}

#[cfg(test)]
mod tests;
