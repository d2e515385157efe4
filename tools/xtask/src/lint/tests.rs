use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::modgraph::{self, cycle_text, ModuleGraph};
use super::*;

/// The graph of an in-memory crate: `(path below src/, text)`, root `lib.rs`.
fn graph(files: &[(&str, &str)]) -> ModuleGraph {
    let files: HashMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (Path::new("src").join(p), t.to_string()))
        .collect();
    modgraph::build(Path::new("src/lib.rs"), &mut |p: &Path| {
        files.get(p).cloned()
    })
    .unwrap()
}

fn cycles(files: &[(&str, &str)]) -> Vec<String> {
    graph(files)
        .cycles()
        .unwrap()
        .iter()
        .map(|c| cycle_text(c))
        .collect()
}

/// The edges as `a -> b`, sorted.
fn edges(g: &ModuleGraph) -> Vec<String> {
    let mut e: Vec<String> = g
        .edges
        .keys()
        .map(|&(a, b)| format!("{} -> {}", g.names[a], g.names[b]))
        .collect();
    e.sort();
    e
}

#[test]
fn layered_crate_has_no_cycle() {
    let g = graph(&[
        ("lib.rs", "mod a; mod b; pub struct Pfn; pub use a::A;"),
        ("a.rs", "use crate::b::B; pub struct A(B, crate::Pfn);"),
        ("b.rs", "pub struct B;"),
    ]);
    // `crate::Pfn` is the root's, which contains `a`: no edge.
    assert_eq!(edges(&g), ["a -> b"]);
    assert_eq!(g.cycles().unwrap(), Vec::<Vec<String>>::new());
    assert!(g.tangles().is_empty());
}

#[test]
fn two_modules_naming_each_other_through_use_and_inline_paths() {
    let c = cycles(&[
        ("lib.rs", "mod smp; mod forwarder;"),
        ("smp.rs", "fn ap() { crate::forwarder::run_core(); }"),
        (
            "forwarder.rs",
            "use crate::smp; pub fn run_core() { smp::cpu(); }",
        ),
    ]);
    assert_eq!(c, ["forwarder -> smp -> forwarder"]);
}

#[test]
fn super_and_self_paths_and_nested_files() {
    // router/mod.rs names its child through `self::` (not an edge: the child is part of it),
    // the child names the parent's item through `super::` and a sibling's.
    let g = graph(&[
        ("lib.rs", "pub mod router; pub mod config;"),
        (
            "router/mod.rs",
            "pub mod neigh; pub mod fib; pub struct Counters; fn f() { self::neigh::Table::new(); }",
        ),
        (
            "router/neigh.rs",
            "pub struct Table; impl Table { fn c(_: super::Counters, _: super::fib::Fib) {} }",
        ),
        ("router/fib.rs", "pub struct Fib; fn f() { crate::config::x(); }"),
        ("config.rs", "pub fn x() {}"),
    ]);
    // fib -> config is router -> config at the level where the two are siblings.
    assert_eq!(
        edges(&g),
        ["router -> config", "router::neigh -> router::fib"]
    );
    assert_eq!(
        g.site("router", "config").unwrap().via.as_deref(),
        Some("router::fib -> config")
    );
    assert!(g.cycles().unwrap().is_empty());
    // foo.rs keeps its children in foo/; `super::super::`.
    let g = graph(&[
        ("lib.rs", "mod a; mod c;"),
        ("a.rs", "mod b; use self::b::X;"),
        ("a/b.rs", "pub struct X; fn f() { super::super::c::g(); }"),
        ("c.rs", "pub fn g() {}"),
    ]);
    assert_eq!(edges(&g), ["a -> c"]);
}

#[test]
fn a_parent_using_its_children_is_containment_not_a_cycle() {
    // netstack's router (mod.rs calls ipv4, ipv4 names super::RouterDrop) and unikernel's
    // main.rs (calls trap::init, forwarder names crate::fail).
    let g = graph(&[
        (
            "lib.rs",
            "mod trap; mod router; pub fn fail() {} fn main() { trap::init(); }",
        ),
        ("trap.rs", "pub fn init() { crate::fail(); }"),
        (
            "router/mod.rs",
            "pub mod ipv4; pub enum RouterDrop {} fn p() { ipv4::be16(); }",
        ),
        ("router/ipv4.rs", "use super::RouterDrop; pub fn be16() {}"),
    ]);
    assert!(edges(&g).is_empty(), "{:?}", edges(&g));
    assert!(g.cycles().unwrap().is_empty());
}

#[test]
fn modules_depending_on_each_other_through_children_are_a_cycle() {
    let files = [
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "mod inner; pub struct A;"),
        ("a/inner.rs", "use crate::b::deep::B;"),
        ("b.rs", "mod deep; fn f(_: crate::a::A) {}"),
        ("b/deep.rs", "pub struct B;"),
    ];
    assert_eq!(cycles(&files), ["a -> b -> a"]);
    let g = graph(&files);
    assert_eq!(
        g.site("a", "b").unwrap().to_string(),
        format!(
            "{} `crate::b::deep::B` (a::inner -> b::deep)",
            Path::new("src/a/inner.rs:1").display()
        )
    );
    assert_eq!(g.site("b", "a").unwrap().via, None);
}

#[test]
fn three_module_cycle_is_one_cycle_rotated_to_its_smallest_name() {
    let c = cycles(&[
        ("lib.rs", "mod trap; mod smp; mod stats;"),
        ("trap.rs", "use crate::smp::X;"),
        ("smp.rs", "use crate::stats::Y;"),
        ("stats.rs", "fn f() -> crate::trap::Z { todo!() }"),
    ]);
    assert_eq!(c, ["smp -> stats -> trap -> smp"]);
}

#[test]
fn overlapping_cycles_are_listed_separately() {
    let c = cycles(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::X; use crate::c::Y;"),
        ("b.rs", "use crate::a::Z;"),
        ("c.rs", "use crate::a::Z;"),
    ]);
    assert_eq!(c, ["a -> b -> a", "a -> c -> a"]);
}

#[test]
fn re_exports_resolve_to_the_defining_module() {
    // `crate::Zone` is root's re-export of `zone::Zone`: pcp depends on zone, not the root,
    // and the root's re-exports are not dependencies of the root.
    let g = graph(&[
        (
            "lib.rs",
            "mod pcp; mod zone; pub use zone::Zone; pub use pcp::*;",
        ),
        (
            "zone.rs",
            "pub struct Zone; fn f() { crate::pcp::drain(); }",
        ),
        ("pcp.rs", "pub fn drain() {} fn g(_: &crate::Zone) {}"),
    ]);
    assert_eq!(edges(&g), ["pcp -> zone", "zone -> pcp"]);
    // Through a glob re-export too.
    let g = graph(&[
        ("lib.rs", "mod a; mod b; pub use b::*;"),
        ("a.rs", "fn f() { crate::B::new(); }"),
        ("b.rs", "pub struct B;"),
    ]);
    assert_eq!(edges(&g), ["a -> b"]);
}

#[test]
fn a_re_export_counts_when_the_module_uses_the_name_itself() {
    // mm today: page_pool re-exports ptr_ring's ring and keeps one; ptr_ring names
    // page_pool's DMA mapper trait.
    let files = [
        ("lib.rs", "pub mod page_pool; pub mod ptr_ring;"),
        (
            "page_pool.rs",
            "pub use crate::ptr_ring::{RecycleRing, PP_RING_SIZE}; pub trait DmaMapper {} \
             pub struct PagePool { ring: RecycleRing }",
        ),
        (
            "ptr_ring.rs",
            "use crate::page_pool::DmaMapper; pub struct RecycleRing; pub const PP_RING_SIZE: usize = 1;",
        ),
    ];
    assert_eq!(cycles(&files), ["page_pool -> ptr_ring -> page_pool"]);
    // Only re-exported: no edge, no cycle.
    let files = [
        files[0],
        (
            "page_pool.rs",
            "pub use crate::ptr_ring::{RecycleRing, PP_RING_SIZE}; pub trait DmaMapper {}",
        ),
        files[2],
    ];
    assert!(cycles(&files).is_empty());
}

#[test]
fn test_modules_and_test_items_are_left_out() {
    let c = cycles(&[
        (
            "lib.rs",
            "mod a; mod b; #[cfg(test)] mod tests; #[cfg(all(test, loom))] mod loom_tests;",
        ),
        (
            "a.rs",
            "pub fn x() {} #[cfg(test)] mod tests { use crate::b::y; } \
             #[cfg(test)] use crate::b::Z; #[test] fn t() { crate::b::y(); }",
        ),
        (
            "b.rs",
            "pub fn y() { crate::a::x(); } #[cfg(not(test))] fn live() {}",
        ),
        ("tests.rs", "use crate::a::*; use crate::b::*;"),
    ]);
    assert!(c.is_empty(), "{c:?}");
    // `cfg(not(test))` and `cfg(any(test, …))` code is live.
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "#[cfg(not(test))] fn f() { crate::b::y(); }"),
        ("b.rs", "#[cfg(any(test, loom))] fn g() { crate::a::x(); }"),
    ]);
    assert_eq!(c, ["a -> b -> a"]);
}

#[test]
fn paths_inside_macros_and_inline_modules_count() {
    let g = graph(&[
        (
            "lib.rs",
            "mod serial; mod stats; mod net { pub fn f() { log::info!(\"{}\", crate::stats::N); } }",
        ),
        (
            "serial.rs",
            "#[macro_export] macro_rules! kprint { ($($a:tt)*) => { $crate::serial::_print() } }\n\
             pub fn _print() {}",
        ),
        ("stats.rs", "pub const N: u32 = 0; fn f() { crate::kprint!(); }"),
    ]);
    // `crate::kprint!` is serial's macro (`#[macro_export]` puts it at the root).
    assert_eq!(edges(&g), ["net -> stats", "stats -> serial"]);
    assert_eq!(g.site("stats", "serial").unwrap().path, "crate::kprint");
    // Comments, strings and doc links are not paths.
    let g = graph(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "/// See [`crate::b::X`].\nfn f() { let _ = \"crate::b::X\"; } // crate::b::X",
        ),
        ("b.rs", ""),
    ]);
    assert!(edges(&g).is_empty());
}

#[test]
fn bare_paths_to_child_modules_and_imported_modules_count() {
    let g = graph(&[
        (
            "lib.rs",
            "mod exit; mod router; use exit::ExitCode; use crate::router as r; \
             fn f() { r::fib::lookup(); exit::exit(); }",
        ),
        ("exit.rs", "pub struct ExitCode; pub fn exit() {}"),
        ("router.rs", "pub mod fib;"),
        ("router/fib.rs", "pub fn lookup() {}"),
    ]);
    // Resolved (then dropped as the root's own descendants).
    assert!(edges(&g).is_empty());
    let g = graph(&[
        ("lib.rs", "mod exit; mod router; mod user;"),
        (
            "user.rs",
            "use crate::exit; use crate::router as r; fn f() { r::fib::lookup(); exit::exit(); }",
        ),
        ("exit.rs", "pub struct ExitCode; pub fn exit() {}"),
        ("router.rs", "pub mod fib;"),
        ("router/fib.rs", "pub fn lookup() {}"),
    ]);
    assert_eq!(edges(&g), ["user -> exit", "user -> router"]);
    assert_eq!(g.site("user", "router").unwrap().path, "crate::router");
}

#[test]
fn path_attributes_and_missing_files() {
    let g = graph(&[
        (
            "lib.rs",
            "#[path = \"arch/x86.rs\"] mod arch; mod gone; mod b;",
        ),
        ("arch/x86.rs", "use crate::b::B;"),
        ("b.rs", "pub struct B;"),
    ]);
    assert_eq!(edges(&g), ["arch -> b"]);
    assert_eq!(g.missing.len(), 1, "{:?}", g.missing);
    assert!(g.missing[0].contains("mod gone;"), "{:?}", g.missing);
}

#[test]
fn edges_carry_the_first_site() {
    let g = graph(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "\n\nfn f() {\n    crate::b::g();\n    crate::b::g();\n}",
        ),
        ("b.rs", "pub fn g() {}"),
    ]);
    let site = g.site("a", "b").unwrap();
    assert_eq!(
        site.to_string(),
        format!("{} `crate::b::g`", Path::new("src/a.rs:4").display())
    );
}

fn two_cycle_crate() -> ModuleGraph {
    graph(&[
        ("lib.rs", "mod smp; mod forwarder; mod trap;"),
        ("smp.rs", "use crate::forwarder::F; use crate::trap::T;"),
        ("forwarder.rs", "use crate::smp::S;"),
        ("trap.rs", "use crate::smp::S;"),
    ])
}

#[test]
fn allowlist_passes_listed_cycles_in_any_rotation() {
    let g = vec![("unikernel".to_string(), two_cycle_crate())];
    let r = check_cycles(
        &g,
        &[
            "unikernel: smp -> forwarder -> smp",
            "unikernel: smp -> trap", // the closing module may be left out
        ],
    )
    .unwrap();
    assert!(r.ok, "{}", r.text);
    assert!(
        r.text.contains("none besides the 2 in KNOWN_CYCLES"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("known (KNOWN_CYCLES) import cycle unikernel: forwarder -> smp -> forwarder"),
        "{}",
        r.text
    );
}

#[test]
fn allowlist_fails_on_a_new_cycle_naming_its_modules_and_sites() {
    let g = vec![("unikernel".to_string(), two_cycle_crate())];
    let r = check_cycles(&g, &["unikernel: forwarder -> smp -> forwarder"]).unwrap();
    assert!(!r.ok);
    assert!(
        r.text
            .contains("NEW import cycle unikernel: smp -> trap -> smp"),
        "{}",
        r.text
    );
    assert!(r.text.contains("trap -> smp: "), "{}", r.text);
    assert!(
        r.text.contains("src/smp.rs:1 `crate::trap::T`"),
        "{}",
        r.text
    );
    assert!(r.summary.contains("1 import cycle(s) not in KNOWN_CYCLES"));
}

#[test]
fn allowlist_fails_on_an_entry_whose_cycle_is_gone() {
    let g = vec![("unikernel".to_string(), two_cycle_crate())];
    let r = check_cycles(
        &g,
        &[
            "unikernel: forwarder -> smp -> forwarder",
            "unikernel: smp -> trap -> smp",
            "mm: page_pool -> ptr_ring -> page_pool",
            "unikernel: smp -> stats -> smp",
        ],
    )
    .unwrap();
    assert!(!r.ok);
    assert!(
        r.text.contains(
            "KNOWN_CYCLES lists `mm: page_pool -> ptr_ring -> page_pool`, which no longer exists"
        ),
        "{}",
        r.text
    );
    assert!(r.summary.contains("2 KNOWN_CYCLES entr"), "{}", r.summary);
}

#[test]
fn allowlist_entries_must_be_well_formed() {
    assert!(parse_known("unikernel smp -> trap").is_err());
    assert!(parse_known("unikernel: smp").is_err());
    assert!(parse_known("unikernel: smp -> -> trap").is_err());
    assert_eq!(
        parse_known("tools (bin xtask): b -> a -> b").unwrap(),
        (
            "tools (bin xtask)".to_string(),
            vec!["a".to_string(), "b".to_string()]
        )
    );
}

#[test]
fn known_cycles_parse() {
    for k in KNOWN_CYCLES {
        parse_known(k).unwrap();
    }
}

#[test]
fn a_large_tangle_is_reported_as_components() {
    // Nine modules that all name each other: far more than MAX_CYCLES elementary cycles.
    let names: Vec<String> = (0..9).map(|i| format!("m{i}")).collect();
    let lib: String = names.iter().map(|n| format!("mod {n};")).collect();
    let body: String = names
        .iter()
        .map(|n| format!("use crate::{n}::X;"))
        .collect();
    let mut files: Vec<(String, String)> = vec![("lib.rs".into(), lib)];
    for n in &names {
        files.push((format!("{n}.rs"), format!("pub struct X; {body}")));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let g = graph(&files);
    assert!(g.cycles().is_none());
    assert_eq!(g.tangles(), vec![names]);
    let r = check_cycles(&[("big".to_string(), g)], &[]).unwrap();
    assert!(!r.ok);
    assert!(r
        .text
        .contains("more than 500 import cycles among the modules m0, m1"));
}

#[test]
fn a_file_that_does_not_parse_is_named_with_its_line() {
    let files: HashMap<PathBuf, String> = [
        ("src/lib.rs", "mod a;"),
        ("src/a.rs", "fn f() {}\n//! late inner doc\nfn g() {}"),
    ]
    .iter()
    .map(|(p, t)| (PathBuf::from(p), t.to_string()))
    .collect();
    let e = modgraph::build(Path::new("src/lib.rs"), &mut |p: &Path| {
        files.get(p).cloned()
    })
    .unwrap_err()
    .to_string();
    let want = format!("cannot parse {}:2:", Path::new("src/a.rs").display());
    assert!(e.contains(&want), "{e}");
}

#[test]
fn many_paths_without_a_cycle_are_cheap() {
    // A layered DAG of 60 modules in 20 layers of 3, each naming every module of the layer
    // below: 3^19 paths, no cycle. Only cycles within a strongly connected component are
    // searched, so this is instant.
    let name = |l: usize, i: usize| format!("l{l:02}_{i}");
    let mut files: Vec<(String, String)> = Vec::new();
    let mut lib = String::new();
    for l in 0..20 {
        for i in 0..3 {
            lib.push_str(&format!("mod {};", name(l, i)));
            let body: String = if l == 19 {
                "pub struct X;".into()
            } else {
                (0..3)
                    .map(|j| format!("use crate::{}::X;", name(l + 1, j)))
                    .collect()
            };
            files.push((
                format!("{}.rs", name(l, i)),
                format!("pub struct X; {body}"),
            ));
        }
    }
    files.push(("lib.rs".into(), lib));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let g = graph(&files);
    assert_eq!(g.edges.len(), 19 * 9);
    assert!(g.cycles().unwrap().is_empty());
}
