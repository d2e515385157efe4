//! The page allocator seen from the console: `drain` (drain_all_pages) empties the per-CPU
//! lists while forwarding goes on, `buddyinfo` reports free blocks, nothing leaks; RAM above
//! 4 GiB is mapped and managed.

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

/// The number after `key` in `line` (e.g. `"1048576 of them"` → 1048576 for key `" of them"`
/// taken from the left).
fn number_before(line: &str, key: &str) -> u64 {
    let head = &line[..line
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {line}"))];
    head.rsplit(' ')
        .next()
        .and_then(|w| w.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no number before {key:?} in {line}"))
}

#[test]
fn six_gib_guest_manages_ram_above_4_gib() {
    let mut rig = Rig::start_memory("mode=l2 log=debug", gen_count(2000, 64, false), "6G", 1);
    let lines = rig.guest.lines();
    let mm = lines
        .iter()
        .find(|l| l.contains("mm: kernel"))
        .unwrap_or_else(|| panic!("no mm line:\n{}", rig.tail()));
    let managed = number_before(mm, " pages (");
    let high = number_before(mm, " of them above 4 GiB");
    // q35 puts 2 GiB below the PCI hole and the other 4 GiB at 4 GiB and up.
    assert!(managed > 1_500_000, "~6 GiB of 4 KiB pages managed: {mm}");
    assert_eq!(high, 1 << 20, "all 4 GiB above the hole managed: {mm}");
    let paging = lines
        .iter()
        .find(|l| l.contains("paging: identity map 0-"))
        .unwrap_or_else(|| panic!("no paging line:\n{}", rig.tail()));
    assert!(paging.contains("0-8 GiB"), "{paging}");
    // Deferred mem_map initialisation: the boot wrote the slots of the first 16 MiB of free RAM; cpu 0 writes
    // and lists the rest after ready, every deferred free page once (the quit check below
    // then finds every page of the boot count).
    let deferred = lines
        .iter()
        .find(|l| l.contains(" free pages deferred"))
        .map(|l| number_before(l, " free pages deferred"))
        .unwrap_or_else(|| {
            panic!(
                "no deferred line:
{}",
                rig.tail()
            )
        });
    // 4096 free pages, and the rest of their 4 MiB block, are listed at boot.
    assert!(
        deferred <= managed - 4096 && deferred > managed - 4096 - 1024,
        "{deferred} of {managed}"
    );
    let (_, done) = rig
        .guest
        .wait_for_line_from(
            0,
            |l| l.contains("deferred mem_map initialisation done"),
            READY_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("deferred init never finished: {e:#}\n{}", rig.tail()));
    assert_eq!(
        number_before(&done, " free pages listed after ready"),
        deferred,
        "{done}"
    );
    let r = rig.run();
    assert_eq!(r.received, 2000, "{r:?}");
    let s = rig.quit();
    assert!(s.free_pages_boot > 1_500_000, "{s}");
    assert_no_leak(&s);
}
