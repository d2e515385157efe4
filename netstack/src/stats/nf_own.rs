//! Counters a network function declares itself: the declaration ([`CounterDef`]), the values a
//! core reads from its NF ([`CounterValues`], fixed size, summed over the cores when `STATS` or
//! `/metrics` is made) and their place in the schema ([`NfOwnCounters`], `STATS` key
//! `nf_counters`).
//!
//! The definitions flow one way: an NF (`unikernel::dataplane::nf::NetworkFunction::COUNTERS`)
//! declares a `&'static [CounterDef]`; the kernel copies the NF's values into a
//! [`CounterValues`] every 10 ms (off the per-frame path) and at `quit`; the `STATS` line
//! carries them by name (`{"nf_name":"acl","nf_counters":{"rule_hits":[4,3,0],…}}`), which the
//! host tools parse into the same [`NfOwnCounters`]; `/metrics` names each
//! `gannet_nf_<nf>_<counter>_total` with the declaration's help (see
//! [`super::write_prometheus`]).

use core::fmt;
use heapless::{String, Vec};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most counters one network function declares.
pub const MAX_NF_COUNTERS: usize = 12;
/// Most values an NF's counters hold together: one per plain counter, up to
/// [`PerIndex::max`] per counter with an index. Sizes every core's snapshot (8 bytes each).
pub const MAX_NF_VALUES: usize = 64;
/// Longest network-function name and counter name, bytes.
pub const NF_NAME_MAX: usize = 32;

/// A counter with one value per index (a rule, a bucket): in `STATS` an array (index 0 first),
/// in `/metrics` one series per index labelled `label="INDEX"`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PerIndex {
    /// The Prometheus label naming the index (`[a-z][a-z0-9_]*`, e.g. `rule`).
    pub label: &'static str,
    /// Most indexes shown (the first `max`): the counter's share of [`MAX_NF_VALUES`].
    pub max: usize,
}

/// One counter a network function declares: a count since boot that never decreases, or a
/// gauge ([`CounterDef::gauge`]: a value that goes up and down, such as the entries a table
/// holds), read per core and summed over the cores.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CounterDef {
    /// Its name (`[a-z][a-z0-9_]*`, at most [`NF_NAME_MAX`] bytes, not ending in `_total`):
    /// the `STATS` key under `nf_counters` and the stem of the metric
    /// `gannet_nf_<nf>_<name>_total`. Stable: dashboards use it.
    pub name: &'static str,
    /// One line saying what it counts and in which unit (frames, bytes, …): the metric's
    /// `# HELP` (no newline, no backslash).
    pub help: &'static str,
    /// `None`: one value. `Some`: one value per index.
    pub per: Option<PerIndex>,
    /// A gauge (occupancy, not a count of events): in `/metrics` `gannet_nf_<nf>_<name>` of
    /// type `gauge`, without `_total`; in `STATS` a value under `nf_counters` like the others.
    pub gauge: bool,
}

impl CounterDef {
    /// A counter of one value.
    pub const fn one(name: &'static str, help: &'static str) -> CounterDef {
        CounterDef {
            name,
            help,
            per: None,
            gauge: false,
        }
    }

    /// A gauge of one value (summed over the cores: the entries every core's table holds).
    pub const fn gauge(name: &'static str, help: &'static str) -> CounterDef {
        CounterDef {
            name,
            help,
            per: None,
            gauge: true,
        }
    }

    /// A counter with one value per index `0..max`, labelled `label` in `/metrics`.
    pub const fn per_index(
        name: &'static str,
        label: &'static str,
        max: usize,
        help: &'static str,
    ) -> CounterDef {
        CounterDef {
            name,
            help,
            per: Some(PerIndex { label, max }),
            gauge: false,
        }
    }

    /// Values it takes in a [`CounterValues`].
    pub const fn slots(&self) -> usize {
        match self.per {
            Some(p) => p.max,
            None => 1,
        }
    }
}

/// Why a network function's declaration is refused (at compile time, through
/// [`check_counters`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CounterDefError {
    /// The NF's name or a counter's is not `[a-z][a-z0-9_]*` of at most [`NF_NAME_MAX`] bytes
    /// (a counter's may not end in `_total`, which the metric adds).
    BadName,
    /// A help text is empty or holds a newline or a backslash.
    BadHelp,
    /// A per-index label is not `[a-z][a-z0-9_]*`, or its `max` is 0.
    BadIndex,
    /// Two counters have the same name.
    Duplicate,
    /// More than [`MAX_NF_COUNTERS`] counters or [`MAX_NF_VALUES`] values.
    TooMany,
}

/// `s` is `[a-z][a-z0-9_]*` of at most [`NF_NAME_MAX`] bytes.
const fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > NF_NAME_MAX || !b[0].is_ascii_lowercase() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_') {
            return false;
        }
        i += 1;
    }
    true
}

const fn ends_with(s: &str, tail: &str) -> bool {
    let (s, t) = (s.as_bytes(), tail.as_bytes());
    if s.len() < t.len() {
        return false;
    }
    let mut i = 0;
    while i < t.len() {
        if s[s.len() - t.len() + i] != t[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn str_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && ends_with(a, b)
}

/// Checks network function `nf`'s name and counter declaration `defs` (the kernel asserts it
/// at compile time for every NF it runs, so a bad name never reaches a metric).
///
/// # Errors
/// The first rule broken.
pub const fn check_counters(nf: &str, defs: &[CounterDef]) -> Result<(), CounterDefError> {
    if !is_name(nf) {
        return Err(CounterDefError::BadName);
    }
    if defs.len() > MAX_NF_COUNTERS {
        return Err(CounterDefError::TooMany);
    }
    let (mut i, mut slots) = (0, 0);
    while i < defs.len() {
        let d = &defs[i];
        if !is_name(d.name) || ends_with(d.name, "_total") {
            return Err(CounterDefError::BadName);
        }
        let h = d.help.as_bytes();
        if h.is_empty() {
            return Err(CounterDefError::BadHelp);
        }
        let mut k = 0;
        while k < h.len() {
            if h[k] == b'\n' || h[k] == b'\\' {
                return Err(CounterDefError::BadHelp);
            }
            k += 1;
        }
        if let Some(p) = d.per {
            if !is_name(p.label) || p.max == 0 {
                return Err(CounterDefError::BadIndex);
            }
        }
        let mut j = 0;
        while j < i {
            if str_eq(defs[j].name, d.name) {
                return Err(CounterDefError::Duplicate);
            }
            j += 1;
        }
        slots += d.slots();
        i += 1;
    }
    if slots > MAX_NF_VALUES {
        return Err(CounterDefError::TooMany);
    }
    Ok(())
}

/// The values of an NF's declared counters (`defs`, in their order), on one core or summed:
/// plain counters one value each, per-index counters as many as the NF set (at most their
/// `max`). Fixed size ([`MAX_NF_VALUES`] values), no heap: a core's snapshot holds one.
#[derive(Copy, Clone, Debug)]
pub struct CounterValues {
    defs: &'static [CounterDef],
    vals: [u64; MAX_NF_VALUES],
    /// Per-index counters: the indexes set (the longest over the cores once summed).
    lens: [u16; MAX_NF_COUNTERS],
}

impl Default for CounterValues {
    fn default() -> Self {
        CounterValues::new(&[])
    }
}

impl CounterValues {
    /// All zero, for the counters `defs` (a valid declaration: [`check_counters`]).
    pub const fn new(defs: &'static [CounterDef]) -> CounterValues {
        CounterValues {
            defs,
            vals: [0; MAX_NF_VALUES],
            lens: [0; MAX_NF_COUNTERS],
        }
    }

    /// The declaration.
    pub fn defs(&self) -> &'static [CounterDef] {
        self.defs
    }

    /// Where counter `i`'s values start, and how many it may hold (`None` past the
    /// declaration or past [`MAX_NF_VALUES`]).
    fn span(&self, i: usize) -> Option<(usize, usize)> {
        let d = self.defs.get(i)?;
        let at: usize = self.defs[..i].iter().map(CounterDef::slots).sum();
        (at + d.slots() <= MAX_NF_VALUES).then_some((at, d.slots()))
    }

    /// Plain counter `i` (its index in the declaration) is `v`. A per-index counter or an `i`
    /// past the declaration is left alone (a debug assertion).
    pub fn set(&mut self, i: usize, v: u64) {
        let plain = self.defs.get(i).is_some_and(|d| d.per.is_none());
        debug_assert!(
            plain,
            "counter {i} is not a plain counter of the declaration"
        );
        if let (true, Some((at, _))) = (plain, self.span(i)) {
            self.vals[at] = v;
        }
    }

    /// Per-index counter `i`'s values, index 0 first: the first [`PerIndex::max`] of `vals`
    /// (the rest are not read). A plain counter or an `i` past the declaration is left alone
    /// (a debug assertion).
    pub fn set_per_index(&mut self, i: usize, vals: impl IntoIterator<Item = u64>) {
        let per = self.defs.get(i).is_some_and(|d| d.per.is_some());
        debug_assert!(
            per,
            "counter {i} is not a per-index counter of the declaration"
        );
        let (true, Some((at, max))) = (per, self.span(i)) else {
            return;
        };
        let mut n = 0;
        for (slot, v) in self.vals[at..at + max].iter_mut().zip(vals) {
            *slot = v;
            n += 1;
        }
        self.lens[i] = n as u16;
    }

    /// Adds `o`'s values (another core's, same declaration) to these.
    pub fn add(&mut self, o: &CounterValues) {
        for (a, b) in self.vals.iter_mut().zip(o.vals) {
            *a += b;
        }
        for (a, b) in self.lens.iter_mut().zip(o.lens) {
            *a = (*a).max(b);
        }
    }

    /// These values with every gauge's zeroed: what carries over when an NF's instance is
    /// replaced by a fresh one (a count never goes back; a gauge, an occupancy, is the new
    /// instance's own).
    pub fn counts_only(&self) -> CounterValues {
        let mut c = *self;
        for (i, d) in self.defs.iter().enumerate() {
            if let (true, Some((at, max))) = (d.gauge, self.span(i)) {
                c.vals[at..at + max].fill(0);
            }
        }
        c
    }

    /// Counter `i`'s value(s): `None` past the declaration.
    pub fn get(&self, i: usize) -> Option<NfValue> {
        let (at, max) = self.span(i)?;
        Some(match self.defs[i].per {
            None => NfValue::One(self.vals[at]),
            Some(_) => {
                let n = usize::from(self.lens[i]).min(max);
                NfValue::PerIndex(self.vals[at..at + n].iter().copied().collect())
            }
        })
    }

    /// The schema's form of these values (`STATS` `nf_counters`).
    pub fn to_stats(&self) -> NfOwnCounters {
        let mut out = NfOwnCounters::default();
        for (i, d) in self.defs.iter().enumerate() {
            let (Some(v), Ok(name)) = (self.get(i), String::try_from(d.name)) else {
                continue;
            };
            // Capacity: a valid declaration has at most MAX_NF_COUNTERS counters.
            let _ = out.0.push((name, v));
        }
        out
    }
}

/// A counter's value in `STATS`: a number, or an array for a per-index counter (index 0
/// first).
// Fixed size on purpose (no heap in the guest): a plain counter takes as much room as a
// per-index one; a `Stats` holds at most MAX_NF_COUNTERS of them (4 KiB).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NfValue {
    /// A plain counter.
    One(u64),
    /// A per-index counter, the indexes set.
    PerIndex(Vec<u64, MAX_NF_VALUES>),
}

impl NfValue {
    /// Every value summed (a plain counter's value).
    pub fn total(&self) -> u64 {
        match self {
            NfValue::One(v) => *v,
            NfValue::PerIndex(v) => v.iter().sum(),
        }
    }
}

/// `STATS` key `nf_counters`: the network function's declared counters by name, summed over
/// the cores, in declaration order (a JSON object: `{"blocked":10,"rule_hits":[4,3,0]}`).
/// Empty (and the key absent) when the NF declares none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfOwnCounters(pub Vec<(String<NF_NAME_MAX>, NfValue), MAX_NF_COUNTERS>);

impl NfOwnCounters {
    /// No counter.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The counter named `name`.
    pub fn get(&self, name: &str) -> Option<&NfValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Plain counter `name`'s value.
    pub fn one(&self, name: &str) -> Option<u64> {
        match self.get(name)? {
            NfValue::One(v) => Some(*v),
            NfValue::PerIndex(_) => None,
        }
    }

    /// Per-index counter `name`'s values, index 0 first.
    pub fn per_index(&self, name: &str) -> Option<&[u64]> {
        match self.get(name)? {
            NfValue::PerIndex(v) => Some(v),
            NfValue::One(_) => None,
        }
    }
}

impl Serialize for NfValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NfValue::One(v) => s.serialize_u64(*v),
            NfValue::PerIndex(v) => {
                let mut seq = s.serialize_seq(Some(v.len()))?;
                for x in v {
                    seq.serialize_element(x)?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for NfValue {
    /// A number or an array of numbers (a hand-written untagged enum: serde's needs `alloc`).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NfValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a counter: a number or an array of numbers")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NfValue, E> {
                Ok(NfValue::One(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<NfValue, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element::<u64>()? {
                    v.push(x)
                        .map_err(|_| de::Error::invalid_length(MAX_NF_VALUES + 1, &self))?;
                }
                Ok(NfValue::PerIndex(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for NfOwnCounters {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k.as_str(), v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for NfOwnCounters {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NfOwnCounters;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "at most {MAX_NF_COUNTERS} counters by name (at most {NF_NAME_MAX} bytes)"
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<NfOwnCounters, A::Error> {
                let mut out = NfOwnCounters::default();
                while let Some((k, v)) = a.next_entry::<String<NF_NAME_MAX>, NfValue>()? {
                    out.0
                        .push((k, v))
                        .map_err(|_| de::Error::invalid_length(MAX_NF_COUNTERS + 1, &self))?;
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests;
