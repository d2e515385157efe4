//! One page_pool's entry (`pools[]` and the `pools` console line): its id, refill mode and
//! gauges, then its event counters, which are `mm`'s [`PagePoolStats`] (their one definition;
//! `mm` cannot depend on this crate, so the schema takes `mm`'s struct and writes its fields
//! inline under their own names, [`PagePoolStats::NAMES`]).

use crate::config::RefillMode;
use core::fmt;
use mm::page_pool::PagePoolStats;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One page_pool. Page counts, except `refill_cycles` (cycles).
///
/// JSON: `{"id":0,"refill_mode":"bulk","in_flight":256,"cached":12,"alloc_fast":1000,…,
/// "released":0,"refill_cycles":4000}`: the four fields below, then every
/// [`PagePoolStats`] field in its declaration order (`refill_cycles` may be absent: lines from
/// before it read it as 0).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Pool id: the port it feeds (`2·core + j`), unique across cores.
    pub id: u32,
    /// How the pool refills its alloc cache (`"bulk"`, `"single"`).
    pub refill_mode: RefillMode,
    /// Gauge: pages handed out by the pool and not returned.
    pub in_flight: u64,
    /// Gauge: pages in the pool's alloc cache.
    pub cached: u64,
    /// The pool's event counters (`mm::page_pool::PagePoolStats`, documented there).
    pub counters: PagePoolStats,
}

/// The keys of [`PoolStats`]' own fields, before the counters.
const OWN: [&str; 4] = ["id", "refill_mode", "in_flight", "cached"];
/// The one counter a line may lack (added after the others).
const OPTIONAL: &str = "refill_cycles";

impl Serialize for PoolStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let names = PagePoolStats::NAMES;
        let mut st = s.serialize_struct("PoolStats", OWN.len() + names.len())?;
        st.serialize_field(OWN[0], &self.id)?;
        st.serialize_field(OWN[1], &self.refill_mode)?;
        st.serialize_field(OWN[2], &self.in_flight)?;
        st.serialize_field(OWN[3], &self.cached)?;
        for (name, v) in names.iter().zip(self.counters.values()) {
            st.serialize_field(name, &v)?;
        }
        st.end()
    }
}

impl<'de> Deserialize<'de> for PoolStats {
    /// Every key required but `refill_cycles`; unknown keys ignored (as serde's derive does).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PoolStats;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a page_pool entry")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<PoolStats, A::Error> {
                let names = PagePoolStats::NAMES;
                let (mut id, mut mode, mut in_flight, mut cached) = (None, None, None, None);
                let mut vals = [None; PagePoolStats::NAMES.len()];
                while let Some(k) = a.next_key::<heapless::String<32>>()? {
                    match k.as_str() {
                        "id" => id = Some(a.next_value()?),
                        "refill_mode" => mode = Some(a.next_value()?),
                        "in_flight" => in_flight = Some(a.next_value()?),
                        "cached" => cached = Some(a.next_value()?),
                        other => match names.iter().position(|n| *n == other) {
                            Some(i) => vals[i] = Some(a.next_value::<u64>()?),
                            None => {
                                a.next_value::<IgnoredAny>()?;
                            }
                        },
                    }
                }
                let mut counters = [0; PagePoolStats::NAMES.len()];
                for ((c, v), name) in counters.iter_mut().zip(vals).zip(names) {
                    *c = match v {
                        Some(v) => v,
                        None if name == OPTIONAL => 0,
                        None => return Err(de::Error::missing_field(name)),
                    };
                }
                Ok(PoolStats {
                    id: id.ok_or_else(|| de::Error::missing_field(OWN[0]))?,
                    refill_mode: mode.ok_or_else(|| de::Error::missing_field(OWN[1]))?,
                    in_flight: in_flight.ok_or_else(|| de::Error::missing_field(OWN[2]))?,
                    cached: cached.ok_or_else(|| de::Error::missing_field(OWN[3]))?,
                    counters: PagePoolStats::from_values(counters),
                })
            }
        }
        d.deserialize_map(V)
    }
}
