//! ACL host benchmark (criterion): one [`Acl::classify`] call, on ClassBench-like rule sets of
//! 10, 1,000 and 10,000 rules (`netstack::acl::classbench::generate`, seed 0xac1000), cycling
//! through 1,024 5-tuples aimed at the rules (`classbench::tuples`: each matches its rule or an
//! earlier one), and for 10,000 rules also through 1,024 random 5-tuples (nearly all match no
//! rule: without tuple pruning every tuple is probed, the slowest case). Plus one [`Acl::build`] of the 10,000 rules
//! (parse twice, fill the tables).
//!
//! Run: `cargo bench -p netstack --bench acl` (add `-- --measurement-time 2 --warm-up-time 1`
//! for a short run).
//!
//! Figures (indicative only: one short run, `-- --measurement-time 2 --warm-up-time 1`, on a
//! shared 2-vCPU x86-64 VM ("Intel Xeon Processor", 4 MiB L2 per core) with three other
//! workers' builds on it, Rust 1.95, release profile; criterion's median), with tuple pruning
//! (`netstack::acl`'s module documentation) and, for comparison, without it (the library as of
//! commit 263766c, load average about 4):
//!
//! | case                                        | tuples | ns per call | without pruning |
//! |---------------------------------------------|-------:|------------:|----------------:|
//! | `acl/classify/10_rules/aimed`               |      6 |        27.0 |            20.9 |
//! | `acl/classify/1000_rules/aimed`             |     39 |        72.2 |           154.3 |
//! | `acl/classify/10000_rules/aimed`            |     42 |        70.0 |           221.7 |
//! | `acl/classify/10000_rules/random` (misses)  |     42 |        10.9 |           204.4 |
//! | `acl/linear_scan/10000_rules/aimed`         |      — |     5,572.2 |         5,080.8 |
//! | `acl/build/10000_rules`                     |     42 |   8,102,100 |       6,084,562 |
//!
//! With the pruning a lookup costs two longest-prefix matches (a bucket and a short binary
//! search each) and a probe of each tuple the two leave: 3.0 of 42 on average for the aimed
//! tuples at 10,000 rules, under one at 10 rules; a random address falls under few of the
//! rules' prefixes, so the random tuples (no rule matches) now probe almost nothing. 10,000
//! rules / 10 rules: 70.0 / 27.0 = 2.6× on this host (10.6× without the pruning); the small
//! set pays the two matches for little saving. In an earlier run (load average about 1) with
//! one key per slot instead of the 8-slot tag groups (linear probing, same load factor) and no
//! pruning the figures were 15.7, 535 and 745 ns for 10, 1,000 and 10,000 rules: the probe's
//! "empty slot or another key" branch was mispredicted about every other tuple.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use netstack::acl::{
    classbench, parse_rules, Acl, Entry, FiveTuple, Group, Rule, RuleLine, Storage, Tuple,
};

/// The rule sets' seed (the one the ACL's tests use).
const SEED: u64 = 0x00ac_1000;
/// Tuples a benchmark cycles through.
const TUPLES: usize = 1024;

/// Heap storage for the ACL of `text`.
struct Store {
    rules: Vec<Entry>,
    tuples: Vec<Tuple>,
    groups: Vec<Group>,
    prune: Vec<u64>,
}

impl Store {
    fn new(text: &str) -> Store {
        let s = Acl::sizes(text).expect("rules");
        Store {
            rules: vec![Entry::EMPTY; s.rules],
            tuples: vec![Tuple::EMPTY; s.tuples],
            groups: vec![Group::EMPTY; s.groups],
            prune: vec![0; s.prune],
        }
    }

    fn build(&mut self, text: &str) -> Acl<'_> {
        let storage = Storage {
            rules: &mut self.rules,
            tuples: &mut self.tuples,
            groups: &mut self.groups,
            prune: &mut self.prune,
        };
        Acl::build(text, storage).expect("rules")
    }
}

fn rules_text(n: usize) -> String {
    let mut text = String::new();
    classbench::generate(n, SEED, &mut text).unwrap();
    text
}

/// `acl.classify` over `tuples`, one call per iteration, in turn.
fn bench_classify(c: &mut Criterion, name: &str, acl: &Acl<'_>, tuples: &[FiveTuple]) {
    let mut i = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % tuples.len();
            black_box(acl.classify(black_box(&tuples[i])))
        })
    });
}

/// The reference the tests compare with: the first rule that matches, scanning them all.
fn linear(rules: &[Rule], t: &FiveTuple) -> Option<usize> {
    rules.iter().position(|r| r.matches(t))
}

fn benches(c: &mut Criterion) {
    for n in [10, 1_000, 10_000] {
        let text = rules_text(n);
        let mut store = Store::new(&text);
        let acl = store.build(&text);
        let aimed: Vec<FiveTuple> = classbench::tuples(&acl, TUPLES, SEED).collect();
        let name = format!(
            "acl/classify/{n}_rules/aimed ({} tuples)",
            acl.tuple_count()
        );
        bench_classify(c, &name, &acl, &aimed);
        if n == 10_000 {
            let mut rng = classbench::Rng::new(SEED);
            let random: Vec<FiveTuple> = aimed
                .iter()
                .map(|t| FiveTuple {
                    src: (rng.next_u64() as u32).into(),
                    dst: (rng.next_u64() as u32).into(),
                    ..*t
                })
                .collect();
            let misses = random.iter().filter(|t| acl.classify(t).rule.is_none());
            println!(
                "random tuples matching no rule: {} of {TUPLES}",
                misses.count()
            );
            let name = format!(
                "acl/classify/{n}_rules/random ({} tuples)",
                acl.tuple_count()
            );
            bench_classify(c, &name, &acl, &random);
            // For scale: the linear first-match scan, on the same aimed tuples.
            let rules: Vec<Rule> = parse_rules(&text)
                .filter_map(|l| match l.expect("rules").1 {
                    RuleLine::Rule(r) => Some(r),
                    RuleLine::Default(_) => None,
                })
                .collect();
            for t in &aimed {
                let first = acl.classify(t).rule.map(|i| i as usize);
                assert_eq!(first, linear(&rules, t));
            }
            let mut i = 0;
            c.bench_function("acl/linear_scan/10000_rules/aimed", |b| {
                b.iter(|| {
                    i = (i + 1) % aimed.len();
                    black_box(linear(&rules, black_box(&aimed[i])))
                })
            });
        }
    }
    let text = rules_text(10_000);
    let mut store = Store::new(&text);
    c.bench_function("acl/build/10000_rules", |b| {
        b.iter(|| black_box(store.build(black_box(&text)).len()))
    });
}

criterion_group!(acl, benches);
criterion_main!(acl);
