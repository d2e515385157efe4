//! The stock ACL firewall on the host rig: rules decide, hits are counted per rule and core,
//! frames that are not IPv4 pass, a rule set is replaced live without losing a frame both
//! sets allow, every page comes back.

use super::{udp, PAGES};
use crate::dataplane::nf::builtin::{Acl, AclBuildError, AclCore, AclTable, STATS_RULES};
use crate::dataplane::nf::{NetworkFunction, Shared};
use crate::dataplane::testing::{port_mac, Rig};
use crate::dataplane::MAX_CORES;
use core::sync::atomic::AtomicU64;
use netstack::acl::{Entry, Group, Storage, Tuple};
use netstack::simframes::arp_request;
use netstack::MacAddr;
use std::net::Ipv4Addr;
use std::string::ToString;
use std::vec::Vec;

const RULES: &str = "deny src 10.0.0.3/32\nallow proto udp dst 10.0.1.0/24\ndefault deny\n";

/// The rule set of `text` with hit counters for `cores` cores, leaked (as the kernel keeps its).
fn table(text: &str, cores: usize) -> &'static AclTable {
    let s = netstack::acl::Acl::sizes(text).unwrap();
    let storage = Storage {
        rules: Vec::leak(std::vec![Entry::EMPTY; s.rules]),
        tuples: Vec::leak(std::vec![Tuple::EMPTY; s.tuples]),
        groups: Vec::leak(std::vec![Group::EMPTY; s.groups]),
        prune: Vec::leak(std::vec![0u64; s.prune]),
    };
    let text: &'static str = std::string::String::leak(text.into());
    let acl = netstack::acl::Acl::build(text, storage).unwrap();
    let hits: &'static [AtomicU64] = Vec::leak(
        (0..cores * (acl.len() + 1))
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    std::boxed::Box::leak(std::boxed::Box::new(
        AclTable::new(acl, hits, cores).unwrap(),
    ))
}

#[test]
fn rules_decide_and_hits_are_counted_per_rule() {
    let t = table(RULES, 1);
    let mut rig = Rig::new("mode=acl", 1, PAGES);
    let mut nf = Acl::new(t, 0);
    let to =
        |src: [u8; 4], dst: [u8; 4]| udp(port_mac(0), Ipv4Addr::from(src), Ipv4Addr::from(dst), 64);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&to([10, 0, 0, 3], [10, 0, 1, 2]), 2); // rule 0: deny
    c.dev[0].deliver_rx(&to([10, 0, 0, 2], [10, 0, 1, 2]), 3); // rule 1: allow
    c.dev[0].deliver_rx(&to([10, 0, 0, 2], [10, 0, 2, 2]), 1); // default: deny
    let mut arp = std::vec![0u8; 60];
    let n = arp_request(
        &mut arp,
        MacAddr([2, 0, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
    );
    c.dev[0].deliver_rx(&arp[..n.max(60)], 1); // not IPv4: passes
    c.core.poll_nf(&mut nf);
    let mut out = 0;
    c.dev[1].complete_tx(|_| out += 1);
    assert_eq!(out, 4);
    assert_eq!(c.core.nf_counters().dropped, 3);
    assert_eq!((t.hits(Some(0)), t.hits(Some(1)), t.hits(None)), (2, 3, 1));
    rig.quit_and_check();
}

/// The hits as the NF's own counters (what `STATS` `nf_counters` and `/metrics` show): read
/// into the core's snapshot off the per-frame path, rule by rule for the first
/// [`STATS_RULES`], the later ones summed, the default's apart.
#[test]
fn hits_reach_the_snapshot_as_the_nfs_counters() {
    // Rule i denies source 10.0.0.i; frames from 10.0.0.1 (rule 1), 10.0.0.35 and 10.0.0.39
    // (past the first 32), and from 192.0.2.1 (the default).
    let mut text = std::string::String::new();
    for i in 0..40 {
        text.push_str(&std::format!("deny src 10.0.0.{i}/32\n"));
    }
    text.push_str("default allow\n");
    let t = table(&text, 1);
    let mut rig = Rig::new("mode=acl", 1, PAGES);
    let mut nf = Acl::new(t, 0);
    let from = |src: [u8; 4]| {
        udp(
            port_mac(0),
            Ipv4Addr::from(src),
            Ipv4Addr::new(10, 0, 1, 2),
            64,
        )
    };
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&from([10, 0, 0, 1]), 2);
    c.dev[0].deliver_rx(&from([10, 0, 0, 35]), 3);
    c.dev[0].deliver_rx(&from([10, 0, 0, 39]), 1);
    c.dev[0].deliver_rx(&from([192, 0, 2, 1]), 4);
    c.core.poll_nf(&mut nf);
    c.dev[1].complete_tx(|_| {});
    // Not read yet: the snapshot has the declaration's zeros.
    let before = c.core.snap(false, 0).nf_own.to_stats();
    assert_eq!(before.one("default_hits"), None);
    c.core.read_nf_counters(&nf);
    let s = c.core.snap(false, 0).nf_own.to_stats();
    let mut want = std::vec![0u64; STATS_RULES];
    want[1] = 2;
    assert_eq!(s.per_index("rule_hits"), Some(&want[..]));
    assert_eq!(s.one("later_rule_hits"), Some(4));
    assert_eq!(s.one("default_hits"), Some(4));
    assert_eq!(c.core.nf_counters().dropped, 6);
    // The help texts say the bound the code uses.
    let bound = std::format!("first {STATS_RULES}");
    assert!(Acl::COUNTERS
        .iter()
        .take(2)
        .all(|d| d.help.contains(&bound)));
    rig.quit_and_check();
}

/// Frames to 10.0.1.0/24 both sets allow; 10.0.3.0/24 only the old one, 10.0.4.0/24 only
/// the new one.
const OLD: &str = "allow dst 10.0.1.0/24\nallow dst 10.0.3.0/24\ndefault deny\n";
const NEW: &str = "allow dst 10.0.1.0/24\nallow dst 10.0.4.0/24\ndefault deny\n";

/// Deliver `n` frames to each of 10.0.1.2, 10.0.3.2 and 10.0.4.2 on port 0, poll once, and
/// count what left port 1 by the destination's third byte: [both, old only, new only].
fn burst(c: &mut crate::dataplane::testing::SimCore, nf: &mut Acl, n: usize) -> [usize; 3] {
    for third in [1, 3, 4] {
        let f = udp(
            port_mac(0),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, third, 2),
            64,
        );
        c.dev[0].deliver_rx(&f, n);
    }
    c.core.poll_nf(nf);
    let mut out = [0; 3];
    c.dev[1].complete_tx(|f| match f[14 + 18] {
        1 => out[0] += 1,
        3 => out[1] += 1,
        4 => out[2] += 1,
        _ => panic!("a frame to no destination sent: {f:02x?}"),
    });
    out
}

/// A live swap (`Shared::publish`, then the core's `AclCore::refresh` in its tick): every
/// frame both sets allow is forwarded before, across and after the swap; frames only one set
/// allows follow the set the core used when it classified them; the old set retires only once
/// the core moved on, and is freed from its header, every zone page back.
#[test]
fn a_live_swap_forwards_every_frame_both_sets_allow() {
    let mut rig = Rig::new("mode=acl", 1, PAGES);
    let zone = rig.zone;
    let old = AclTable::build(zone, OLD, 1).unwrap();
    assert!(
        old.pages() >= 3,
        "header, classifier and counters in blocks of the zone"
    );
    let shared: &'static Shared<AclTable, MAX_CORES> =
        std::boxed::Box::leak(std::boxed::Box::new(Shared::new(old)));
    let mut core = AclCore::new(shared, 0);
    let c = &mut rig.cores[0];
    assert_eq!(burst(c, &mut core.nf, 8), [8, 8, 0]);
    // The replacement is published while frames wait in the ring: the core has not passed
    // its quiescent point, so they are judged by the old set, and the old set may not retire.
    let new = AclTable::build(zone, NEW, 1).unwrap();
    let retiring = shared.publish(new);
    for _ in 0..8 {
        let f = udp(
            port_mac(0),
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 1, 2),
            64,
        );
        c.dev[0].deliver_rx(&f, 1);
    }
    assert_eq!(burst(c, &mut core.nf, 8), [16, 8, 0]);
    let retiring = shared
        .retired(retiring, 1)
        .expect_err("the core still reads it");
    // Its tick: the new set from here on; the old one retires and goes back to the zone.
    assert!(core.refresh());
    assert!(!core.refresh(), "nothing newer");
    assert!(std::ptr::eq(core.table(), new));
    assert_eq!(burst(c, &mut core.nf, 8), [8, 0, 8]);
    let gone = shared.retired(retiring, 1).expect("every core moved on");
    assert!(std::ptr::eq(gone, old));
    let free = zone.free_pages();
    let pages = old.pages() as u64;
    // SAFETY: retired: no core reads it any more.
    unsafe { gone.free() };
    assert_eq!(zone.free_pages(), free + pages);
    // The new set counted its own hits from 0: rule 0 for the 8 frames both allow, rule 1
    // for the 8 only it allows, the default for the 8 to 10.0.3.2.
    assert_eq!(
        (new.hits(Some(0)), new.hits(Some(1)), new.hits(None)),
        (8, 8, 8)
    );
    // Dropped: 10.0.4.2 twice under the old set, 10.0.3.2 once under the new.
    assert_eq!(c.core.nf_counters().dropped, 8 + 8 + 8);
    // SAFETY: the rig's core is the only reader and is done.
    unsafe { shared.current().free() };
    rig.quit_and_check();
}

/// With several cores the old set retires only when the last of them passed its tick.
#[test]
fn the_old_set_retires_after_the_last_core_moved_on() {
    let zone = crate::dataplane::testing::zone(1024);
    let start = zone.free_pages();
    let old = AclTable::build(zone, OLD, 3).unwrap();
    let shared: &'static Shared<AclTable, MAX_CORES> =
        std::boxed::Box::leak(std::boxed::Box::new(Shared::new(old)));
    let mut cores: Vec<AclCore> = (0..3).map(|k| AclCore::new(shared, k)).collect();
    let mut r = shared.publish(AclTable::build(zone, NEW, 3).unwrap());
    for (k, late) in [(0, 0b110), (2, 0b010), (1, 0)] {
        assert!(cores[k].refresh());
        assert_eq!(shared.late(&r, 3), late, "after core {k}");
        r = match shared.retired(r, 3) {
            Ok(t) => {
                assert_eq!(late, 0);
                // SAFETY: retired.
                unsafe { t.free() };
                break;
            }
            Err(r) => r,
        };
    }
    // SAFETY: the readers are done.
    unsafe { shared.current().free() };
    assert_eq!(zone.free_pages(), start, "every block of both sets back");
}

/// A bad line is refused naming it, and a set that finds no memory is refused as such; either
/// way every block taken is back in the zone.
#[test]
fn a_refused_set_names_why_and_keeps_no_page() {
    let zone = crate::dataplane::testing::zone(64);
    let start = zone.free_pages();
    let e = AclTable::build(zone, "allow proto udp\nallow dport 80\n", 1).unwrap_err();
    assert!(
        e.to_string().starts_with("rules file: rules line 2: "),
        "{e}"
    );
    assert_eq!(zone.free_pages(), start);
    // 10,000 rules need ~1.2 MiB of classifier: more than the 256 KiB zone holds.
    let mut big = std::string::String::new();
    netstack::acl::classbench::generate(10_000, 1, &mut big).unwrap();
    let e = AclTable::build(zone, &big, 1).unwrap_err();
    assert!(matches!(e, AclBuildError::Memory { .. }), "{e}");
    assert!(e.to_string().contains("no zone block for "), "{e}");
    assert_eq!(zone.free_pages(), start);
}
