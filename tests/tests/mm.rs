//! The page allocator seen from the console: `drain` (drain_all_pages) empties the per-CPU
//! lists while forwarding goes on, `buddyinfo` reports free blocks, nothing leaks.

use gannet_tests::*;

#[test]
fn drain_all_pages_empties_the_pcp_lists_and_forwarding_goes_on() {
    let mut rig = Rig::start("mode=l2", gen_count(2000, 64, false));
    let r = rig.run();
    assert_eq!(r.received, 2000, "{r:?}");
    let from = rig.guest.line_count();
    rig.guest.send_line("drain").unwrap();
    let (_, line) = rig
        .guest
        .wait_for_line_from(from, |l| l.starts_with("drain_all_pages:"), STATS_TIMEOUT)
        .unwrap_or_else(|e| panic!("no drain answer: {e:#}\n{}", rig.tail()));
    assert!(line.starts_with("drain_all_pages: ok"), "{line}");
    let s = rig.stats();
    assert_eq!(s.pcp_count, 0, "pcp not empty after drain: {}", s);
    let r = rig.run();
    assert_eq!(r.received, 2000, "forwarding after the drain: {r:?}");
    let from = rig.guest.line_count();
    rig.guest.send_line("buddyinfo").unwrap();
    let (_, info) = rig
        .guest
        .wait_for_line_from(from, |l| l.starts_with("buddyinfo zone 0"), STATS_TIMEOUT)
        .unwrap_or_else(|e| panic!("no buddyinfo: {e:#}"));
    let counts: Vec<u64> = info
        .split(':')
        .nth(1)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 11, "orders 0..=10: {info}");
    assert!(
        counts[10] > 0,
        "a 256 MiB guest keeps order-10 blocks free: {info}"
    );
    let s = rig.quit();
    assert_no_leak(&s);
}
