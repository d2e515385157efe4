//! The TLB shootdown torture test (`tlbtest=N`, `unikernel/src/tlbtest.rs`) on TCG, which keeps
//! each vCPU's TLB until that vCPU flushes: readers on every other CPU read generation-tagged
//! pages through shared vmap mappings while CPU 0 remaps them, frees the old frames and reuses
//! them. No stale read with the shootdown; stale reads caught without it (the negative
//! control); batches below the ceiling flush page by page, the full-slot batches flush all.
//! `cargo xtask bench tlb` runs the long versions.

use gannet_tests::bench_tlb::{run_one, TlbRecord, TlbRun};
use gannet_tests::*;
use std::time::Duration;

/// Batches per CI run: 20 × (30 small batches of 8 pages + 2 of all 512).
const BATCHES: u64 = 32 * 20;

fn torture(cpus: u32, tlb: &'static str, skip: bool, extra: &str) -> (TlbRecord, Vec<String>) {
    torture_n(cpus, tlb, skip, extra, BATCHES)
}

fn torture_n(
    cpus: u32,
    tlb: &'static str,
    skip: bool,
    extra: &str,
    batches: u64,
) -> (TlbRecord, Vec<String>) {
    let run = TlbRun {
        image: image(),
        cpus,
        batches,
        tlb,
        skip,
        extra: extra.to_string(),
        timeout: Duration::from_secs(120),
    };
    let (r, exit, lines) = run_one(&run).unwrap_or_else(|e| panic!("tlbtest: {e:#}"));
    let free = lines
        .iter()
        .find_map(|l| {
            l.split_once("TLBTEST free pages at end ")
                .map(|(_, t)| t.to_string())
        })
        .unwrap_or_else(|| panic!("no free-pages line:\n{}", lines.join("\n")));
    let nums: Vec<u64> = free
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        nums.len() == 2 && nums[0] == nums[1],
        "every frame back in the zone: {free}"
    );
    assert!(
        lines.iter().any(|l| l.contains("tlbtest: self-test ok")),
        "the paging self-test (vmalloc, vmap, 2 MiB split) ran:\n{}",
        lines.join("\n")
    );
    if !skip {
        assert!(exit.is_clean(), "{exit}\n{}", lines.join("\n"));
    }
    (r, lines)
}

fn assert_shootdown_holds(r: &TlbRecord, cpus: u64) {
    assert_eq!(r.cpus, cpus);
    // 30 of every 32 batches have 8 pages, 2 have all 512.
    assert_eq!(r.pages, r.batches / 32 * (30 * 8 + 2 * 512), "{r:?}");
    assert!(r.samples > 10_000, "readers read: {r:?}");
    assert_eq!(
        r.stale, 0,
        "no read may reach a frame after its shootdown: {r:?}"
    );
}

#[test]
fn batched_shootdown_on_2_vcpus_leaves_no_stale_translation() {
    let (r, _) = torture(2, "batch", false, "");
    assert_shootdown_holds(&r, 2);
    // One request per target per batch (the poll word), none per page.
    assert_eq!(r.requests, BATCHES, "{r:?}");
    // Small batches (8 <= ceiling 33) flush page by page on both CPUs; big ones reload CR3.
    assert_eq!(r.invlpg, BATCHES / 32 * 30 * 8 * 2, "{r:?}");
    assert_eq!(r.full_flushes, BATCHES / 32 * 2 * 2, "{r:?}");
}

#[test]
fn batched_shootdown_on_4_vcpus_leaves_no_stale_translation() {
    let (r, _) = torture(4, "batch", false, "");
    assert_shootdown_holds(&r, 4);
    assert_eq!(
        r.requests,
        BATCHES * 3,
        "one request per target per batch: {r:?}"
    );
}

#[test]
fn immediate_mode_sends_one_request_per_page() {
    // 1,264 pages: one shootdown each is slow under TCG.
    let (r, _) = torture_n(2, "immediate", false, "", 32);
    assert_shootdown_holds(&r, 2);
    assert_eq!(r.requests, r.pages, "{r:?}");
    assert!(
        (r.requests_per_1000_pages_per_target - 1000.0).abs() < 0.01,
        "{r:?}"
    );
}

#[test]
fn a_ceiling_of_4_turns_8_page_batches_into_full_flushes() {
    let (r, _) = torture(2, "batch", false, "tlb_ceiling=4");
    assert_shootdown_holds(&r, 2);
    assert_eq!(r.invlpg, 0, "{r:?}");
    assert_eq!(r.full_flushes, BATCHES * 2, "{r:?}");
}

#[test]
fn negative_control_skipping_remote_flushes_is_caught() {
    let (r, lines) = torture(2, "batch", true, "");
    assert!(
        r.stale > 0,
        "with remote flushes skipped the readers must see stale frames: {r:?}\n{}",
        lines.join("\n")
    );
}
