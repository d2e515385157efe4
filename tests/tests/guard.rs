//! The page guard (`guard=on`): with `pool=release` every forwarded page is freed through a pcp
//! list, unmapped from the identity map and flushed from every CPU's TLB in batches (the 2015
//! reclaim workload); a use-after-free of a freed page faults with a named message.

use gannet_tests::*;

/// Frames per run (each pair).
const FRAMES: u64 = 6000;

#[test]
fn guard_on_pool_release_on_2_cores_batches_one_request_per_1000_pages() {
    let (mut rig, more) = Rig::start_pairs(
        "mode=l2 pool=release guard=on",
        gen_count(FRAMES, 64, false),
        Vec::new(),
        2,
        2,
    );
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("guard: on: freed packet buffers leave the identity map")),
        "{}",
        rig.tail()
    );
    let other = std::thread::spawn({
        let g = more.into_iter().next().expect("pair 1's generator");
        move || g.run().expect("pair 1 traffic")
    });
    let r0 = rig.run();
    let r1 = other.join().unwrap();
    assert_eq!(
        (r0.received, r1.received),
        (FRAMES, FRAMES),
        "{r0:?} {r1:?}"
    );
    let s = rig.quit();
    assert_no_leak(&s);
    for c in &s.per_cpu {
        let t = &c.tlb;
        // Every released page was unmapped, in batches of 1,024 with one flush request to the
        // one other CPU each (posted in its poll word; also signalled by an IPI when it was
        // halted or did not answer within the deadline, never more than once per request):
        // at most 2 requests per 1,000 pages.
        assert!(t.pages_unmapped >= FRAMES, "cpu {}: {t:?}", c.cpu);
        assert!(t.batches >= t.pages_unmapped / 1024, "cpu {}: {t:?}", c.cpu);
        assert!(
            t.batches <= t.pages_unmapped / 1024 + 2,
            "cpu {}: {t:?}",
            c.cpu
        );
        assert!(
            t.poll_requests * 1000 <= 2 * t.pages_unmapped,
            "cpu {}: {t:?}",
            c.cpu
        );
        assert!(t.ipis_sent <= t.poll_requests, "cpu {}: {t:?}", c.cpu);
        assert!(
            t.flushes_received > 0,
            "cpu {} serviced the other's flushes: {t:?}",
            c.cpu
        );
        assert!(
            t.full_flushes > 0,
            "batches above the ceiling flush all: {t:?}"
        );
        assert_eq!(t.pending_pages, 0, "{t:?}");
    }
}

/// Boot `guard=on`, forward a little, send the console command `cmd` (a test-only write to a
/// free page): the guest must stop with the page fault named a use-after-free, after printing
/// `announce`. Returns the serial log.
fn uaf_faults(cmd: &str, announce: &str) -> Vec<String> {
    let mut rig = Rig::start("mode=l2 guard=on", gen_count(500, 64, false));
    let r = rig.run();
    assert_eq!(r.received, 500, "forwarding works with the guard: {r:?}");
    rig.guest.send_line(cmd).unwrap();
    let exit = rig
        .guest
        .wait_exit(std::time::Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the use-after-free did not stop the guest: {e:#}"));
    assert!(!exit.is_clean(), "{exit}");
    let lines = rig.guest.lines();
    assert!(
        lines.iter().any(|l| l.contains(announce)),
        "{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("FATAL: page fault at CR2")
            && l.contains("use-after-free: CR2 is a page on a free list (guard=on unmapped it)")),
        "{}",
        lines.join("\n")
    );
    assert!(
        !lines.iter().any(|l| l.contains("did not fault")),
        "{}",
        lines.join("\n")
    );
    lines
}

#[test]
fn use_after_free_of_a_guarded_page_faults_with_a_named_message() {
    uaf_faults("uaf", "uaf: writing to freed page");
}

/// A page that sat in the buddy lists since boot, never on a pcp list: unmapped at install.
#[test]
fn a_buddy_page_free_since_boot_is_unmapped() {
    let lines = uaf_faults("uaf buddy", "uaf: writing to buddy page");
    // Every free page of the buddy lists was unmapped at boot (~60,000 of a 256 MiB guest).
    let boot = lines
        .iter()
        .find(|l| l.contains("guard: on:"))
        .expect("the guard's boot line");
    let unmapped: u64 = boot
        .split(" free pages unmapped at boot")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no unmapped count in {boot:?}"));
    assert!(unmapped > 50_000, "{boot}");
    // The page written is the last of a free order-10 block (4 MiB) that was never split.
    let w = lines
        .iter()
        .find(|l| l.contains("uaf: writing to buddy page"))
        .unwrap();
    assert!(w.contains("order-10 block"), "{w}");
}

/// A block of order 3 freed straight to the zone (`free_pages_order`, not a pcp): unmapped and
/// shot down before it reaches the free lists.
#[test]
fn a_block_freed_straight_to_the_zone_is_unmapped() {
    uaf_faults("uaf block", "uaf: writing to page");
}

#[test]
fn uaf_is_refused_without_the_guard() {
    let mut rig = Rig::start("mode=l2", gen_count(100, 64, false));
    let from = rig.guest.line_count();
    rig.guest.send_line("uaf").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("uaf: refused: needs guard=on"),
            STATS_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    let s = rig.quit();
    assert_no_leak(&s);
}
