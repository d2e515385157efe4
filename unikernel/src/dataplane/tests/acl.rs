//! The stock ACL firewall on the host rig: rules decide, hits are counted per rule and core,
//! frames that are not IPv4 pass, every page comes back.

use super::{udp, PAGES};
use crate::dataplane::nf::builtin::{Acl, AclTable, STATS_RULES};
use crate::dataplane::nf::NetworkFunction;
use crate::dataplane::testing::{port_mac, Rig};
use core::sync::atomic::AtomicU64;
use netstack::acl::{Entry, Group, Storage, Tuple};
use netstack::simframes::arp_request;
use netstack::MacAddr;
use std::net::Ipv4Addr;
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
