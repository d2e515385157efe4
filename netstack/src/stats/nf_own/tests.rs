//! The declaration's checks and the values' arithmetic (the schema's round trips and the
//! Prometheus names are in `stats/tests.rs`).

use super::*;
use std::vec::Vec as StdVec;

const ACL_LIKE: &[CounterDef] = &[
    CounterDef::per_index("rule_hits", "rule", 4, "Frames matched, by rule."),
    CounterDef::one("default_hits", "Frames no rule matched."),
];

#[test]
fn declarations_are_checked() {
    assert_eq!(
        check_counters("port_filter", &[CounterDef::one("blocked", "Frames.")]),
        Ok(())
    );
    assert_eq!(check_counters("acl", ACL_LIKE), Ok(()));
    assert_eq!(check_counters("acl", &[]), Ok(()));
    let one = |name, help| [CounterDef::one(name, help)];
    for (nf, defs, want) in [
        ("Port", &one("a", "h")[..], CounterDefError::BadName),
        ("", &one("a", "h")[..], CounterDefError::BadName),
        ("nf", &one("9a", "h")[..], CounterDefError::BadName),
        ("nf", &one("a-b", "h")[..], CounterDefError::BadName),
        ("nf", &one("hits_total", "h")[..], CounterDefError::BadName),
        ("nf", &one("a", "")[..], CounterDefError::BadHelp),
        ("nf", &one("a", "two\nlines")[..], CounterDefError::BadHelp),
        ("nf", &one("a", "a \\ b")[..], CounterDefError::BadHelp),
        (
            "nf",
            &[CounterDef::per_index("a", "Rule", 2, "h")][..],
            CounterDefError::BadIndex,
        ),
        (
            "nf",
            &[CounterDef::per_index("a", "rule", 0, "h")][..],
            CounterDefError::BadIndex,
        ),
        (
            "nf",
            &[CounterDef::one("a", "h"), CounterDef::one("a", "h")][..],
            CounterDefError::Duplicate,
        ),
        (
            "nf",
            &[CounterDef::per_index("a", "rule", MAX_NF_VALUES + 1, "h")][..],
            CounterDefError::TooMany,
        ),
    ] {
        assert_eq!(check_counters(nf, defs), Err(want), "{nf} {defs:?}");
    }
    let many: StdVec<CounterDef> = (0..=MAX_NF_COUNTERS)
        .map(|i| {
            let names = [
                "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
            ];
            CounterDef::one(names[i], "h")
        })
        .collect();
    let many: &'static [CounterDef] = many.leak();
    assert_eq!(check_counters("nf", many), Err(CounterDefError::TooMany));
}

#[test]
fn values_are_set_by_declaration_and_summed_over_cores() {
    let mut a = CounterValues::new(ACL_LIKE);
    a.set_per_index(0, [4, 3, 0]);
    a.set(1, 2);
    let mut b = CounterValues::new(ACL_LIKE);
    // More values than the counter's `max`: the first 4 only.
    b.set_per_index(0, [1, 1, 1, 1, 1, 1]);
    b.set(1, 5);
    a.add(&b);
    let s = a.to_stats();
    assert_eq!(s.per_index("rule_hits"), Some(&[5, 4, 1, 1][..]));
    assert_eq!(s.one("default_hits"), Some(7));
    assert_eq!(s.get("rule_hits").unwrap().total(), 11);
    assert_eq!(s.one("nope"), None);
    // A core that set fewer indexes: the summed length is the longest.
    let mut c = CounterValues::new(ACL_LIKE);
    c.set_per_index(0, [1]);
    c.add(&CounterValues::new(ACL_LIKE));
    assert_eq!(c.to_stats().per_index("rule_hits"), Some(&[1][..]));
    assert!(CounterValues::default().to_stats().is_empty());
}

#[test]
#[should_panic(expected = "not a plain counter")]
fn setting_a_per_index_counter_as_plain_is_a_bug() {
    CounterValues::new(ACL_LIKE).set(0, 1);
}
