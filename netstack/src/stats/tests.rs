//! The schema's tests, past ~800 lines because they cover the one contract (`netstack::stats`)
//! as a whole: every section's JSON round trip, the metric names and the counter definitions
//! the guest and the tools share, in one place so that a renamed field fails here.

use super::*;
use crate::config::RefillMode;
use std::string::{String, ToString};
use std::vec::Vec as StdVec;

/// A value with every array at capacity and every counter at `u64::MAX`: the longest JSON.
fn largest() -> Stats {
    let m = u64::MAX;
    let port = PortStats {
        port: u32::MAX,
        queue: u32::MAX,
        cpu: u32::MAX,
        mac: MacAddr([0xff; 6]),
        rx: m,
        rx_bytes: m,
        tx: m,
        tx_bytes: m,
        kicks_rx: m,
        kicks_tx: m,
        no_buffer: m,
        bad_token: m,
        drops: PortDrops {
            tx_ring_full: m,
            too_big: m,
            bad_desc: m,
            runt: m,
            over_mtu: m,
            link_down: m,
        },
        // The largest line has the most ports, which only virtio-net reaches (multi-queue
        // and one pair per CPU); e1000e ports (with `nic`) are at most `MAX_NICS` = 8.
        nic: None,
    };
    let pool = largest_pool();
    let cpu = CpuStats {
        cpu: u32::MAX,
        forwarded: m,
        busy_cycles: m,
        kicks: m,
        halts: m,
        busy_iters: m,
        tlb: TlbCpuStats {
            pages_unmapped: m,
            batches: m,
            ipis_sent: m,
            poll_requests: m,
            flushes_received: m,
            invlpg_pages: m,
            full_flushes: m,
            wait_cycles: m,
            pending_pages: m,
        },
    };
    let c = RouterCounters {
        rx: m,
        forwarded: m,
        arp_replies: m,
        echo_replies: m,
        arp_consumed: m,
        to_host: m,
        drops: [m; RouterDrop::COUNT],
        queued: m,
        icmp_sent: m,
        icmp_rate_limited: m,
        icmp_suppressed: m,
        no_buffer: m,
        arp_requests: m,
        fragmented: m,
        tx_dropped: m,
    };
    let sync = NeighSync {
        sent: m,
        applied: m,
        dropped: m,
    };
    Stats {
        mode: Mode::Router,
        tsc_hz: m,
        busy_cycles: m,
        forwarded: m,
        kicks: m,
        halts: m,
        cpus_online: u32::MAX,
        pairs: u32::MAX,
        queues: u32::MAX,
        pcp_count: m,
        refill_cycles: m,
        refill_pages: m,
        free_pages_boot: m,
        free_pages_now: m,
        ports: core::iter::repeat_n(port, MAX_PORT_ENTRIES).collect(),
        pools: core::iter::repeat_n(pool, MAX_PORT_ENTRIES).collect(),
        busy_iters: m,
        phase_cycles: PhaseCycles::from([m; 4]),
        per_cpu: core::iter::repeat_n(cpu, MAX_CPUS).collect(),
        router: Some(RouterStats::new(&c, m, sync)),
        router6: Some(Router6Stats::new(
            &crate::router::v6::Counters6 {
                rx: m,
                forwarded: m,
                tx_dropped: m,
                echo_replies: m,
                nd_answered: m,
                nd_consumed: m,
                to_host: m,
                drops: [m; crate::router::ipv6::Drop6::COUNT],
                queued: m,
                icmp_sent: m,
                icmp_rate_limited: m,
                icmp_suppressed: m,
                no_buffer: m,
                ns_sent: m,
                ra_sent: m,
            },
            m,
        )),
        fib: Some(FibStats {
            generation: m,
            reloads: m,
            failed: m,
            routes: m,
            pages: m,
            pages_boot: m,
            pages_retiring: m,
            last_build_ms: m,
            last_swap_us: m,
            retired: m,
            retire_batches: m,
            routes_text_pages: m,
            build_steps: m,
            max_step_us: m,
        }),
        acl: Some(AclStats {
            generation: m,
            rules: m,
            tuples: m,
            reloads: m,
            failed: m,
            pages: m,
            pages_boot: m,
            pages_retiring: m,
            retired: m,
            last_swap_us: m,
        }),
        faults: Some(FaultStats {
            rx_bad_id: m,
            rx_bad_len: m,
            tx_bad_id: m,
            tx_ring_full: m,
            bulk_short: m,
            bulk_zero: m,
            dma_map: m,
            recycle_full: m,
            pool_dry_windows: m,
            pool_dry_ms: m,
        }),
        nf: NfCounters {
            dropped: m,
            kept: m,
            to_mgmt: m,
            mgmt_unavailable: m,
            keep_overflow: m,
            bad_port: m,
            sent_held: m,
            handed_off: m,
            handoff_dropped: m,
            consumed: m,
        },
        nf_name: name(NF_NAME_MAX),
        nf_counters: largest_nf_counters(),
        mgmt: Some(MgmtPath {
            handoff: m,
            handoff_dropped: m,
            linear: m,
            linear_failed: m,
        }),
    }
}

/// A name of `n` bytes, distinct per `n`.
fn name(n: usize) -> heapless::String<NF_NAME_MAX> {
    let s: String = core::iter::repeat_n('a', n).collect();
    heapless::String::try_from(s.as_str()).unwrap()
}

/// The longest `nf_counters`: plain counters use more bytes per value (their name) than a
/// per-index counter's entries, so every counter but one is plain, with the longest names,
/// and the last takes the values left.
fn largest_nf_counters() -> NfOwnCounters {
    let m = u64::MAX;
    let mut c = NfOwnCounters::default();
    for i in 0..MAX_NF_COUNTERS - 1 {
        let mut n = name(NF_NAME_MAX);
        n.truncate(NF_NAME_MAX - 1);
        n.push(char::from(b'a' + i as u8)).unwrap();
        c.0.push((n, NfValue::One(m))).unwrap();
    }
    let rest = MAX_NF_VALUES - (MAX_NF_COUNTERS - 1);
    let per = core::iter::repeat_n(m, rest).collect();
    c.0.push((name(NF_NAME_MAX), NfValue::PerIndex(per)))
        .unwrap();
    c
}

fn largest_pool() -> PoolStats {
    let m = u64::MAX;
    PoolStats {
        id: u32::MAX,
        refill_mode: RefillMode::Single,
        in_flight: m,
        cached: m,
        counters: mm::page_pool::PagePoolStats::from_values([m; 11]),
    }
}

/// One l2 pair on core 0 with distinct small counters, and a router section when `router`.
fn sample(router: bool) -> Stats {
    let port = |i: u32| PortStats {
        port: i,
        queue: 0,
        cpu: 0,
        mac: MacAddr([2, 0, 0, 0, 0, 1 + i as u8]),
        rx: 100 + u64::from(i),
        rx_bytes: 6400,
        tx: 99,
        tx_bytes: 6336,
        kicks_rx: 3,
        kicks_tx: 4,
        no_buffer: 5,
        bad_token: 0,
        drops: PortDrops {
            tx_ring_full: 1,
            too_big: 2,
            bad_desc: 0,
            runt: 7,
            over_mtu: 3,
            link_down: 0,
        },
        nic: None,
    };
    let pool = |i: u32| PoolStats {
        id: i,
        refill_mode: RefillMode::Bulk,
        in_flight: 256,
        cached: 12,
        counters: mm::page_pool::PagePoolStats {
            alloc_fast: 1000,
            alloc_slow: 8,
            refill_pages: 512,
            recycle_cached: 900,
            recycle_cache_full: 3,
            refill_cycles: 2000,
            ..Default::default()
        },
    };
    let mut c = RouterCounters {
        rx: 200,
        forwarded: 190,
        arp_replies: 2,
        echo_replies: 1,
        arp_consumed: 1,
        to_host: 3,
        queued: 4,
        icmp_sent: 2,
        arp_requests: 1,
        fragmented: 3,
        ..RouterCounters::default()
    };
    c.drops[RouterDrop::NoRoute as usize] = 1;
    c.drops[RouterDrop::TtlExpired as usize] = 2;
    let sync = NeighSync {
        sent: 5,
        applied: 5,
        dropped: 0,
    };
    Stats {
        mode: if router { Mode::Router } else { Mode::L2 },
        tsc_hz: 2_000_000_000,
        busy_cycles: 123_456,
        forwarded: 198,
        kicks: 7,
        halts: 9,
        cpus_online: 1,
        pairs: 1,
        queues: 1,
        pcp_count: 31,
        refill_cycles: 4000,
        refill_pages: 1024,
        free_pages_boot: 60_000,
        free_pages_now: 59_500,
        ports: [port(0), port(1)].into_iter().collect(),
        pools: [pool(0), pool(1)].into_iter().collect(),
        busy_iters: 50,
        phase_cycles: PhaseCycles::from([1, 2, 3, 4]),
        per_cpu: [CpuStats {
            cpu: 0,
            forwarded: 198,
            busy_cycles: 123_456,
            kicks: 7,
            halts: 9,
            busy_iters: 50,
            tlb: TlbCpuStats {
                batches: 3,
                pages_unmapped: 40,
                ..TlbCpuStats::default()
            },
        }]
        .into_iter()
        .collect(),
        router: router.then(|| RouterStats::new(&c, 0, sync)),
        router6: None,
        // The established lines below predate the `fib` key; `largest` covers it.
        fib: None,
        acl: None,
        faults: None,
        nf: NfCounters {
            dropped: 3,
            kept: 2,
            sent_held: 2,
            ..NfCounters::default()
        },
        nf_name: heapless::String::try_from(if router { "router" } else { "l2" }).unwrap(),
        nf_counters: NfOwnCounters::default(),
        mgmt: router.then_some(MgmtPath {
            handoff: 6,
            linear: 2,
            ..MgmtPath::default()
        }),
    }
}

fn json(v: &impl Serialize) -> String {
    let mut buf = std::vec![0u8; JSON_MAX];
    to_json(v, &mut buf).unwrap().to_string()
}

#[test]
fn largest_value_fits_the_buffer() {
    let n = json(&largest()).len();
    std::println!("largest STATS JSON: {n} bytes (buffer {JSON_MAX})");
    assert!(n <= JSON_MAX, "{n} > {JSON_MAX}");
    assert!(JSON_MAX - n < 4096, "JSON_MAX is far too large for {n}");
    let n = json(&largest_pool()).len();
    assert!(n <= POOL_JSON_MAX, "pool {n} > {POOL_JSON_MAX}");
}

#[test]
fn too_small_a_buffer_is_an_error() {
    let mut buf = [0u8; 64];
    assert_eq!(
        to_json(&sample(false), &mut buf),
        Err(serde_json_core::ser::Error::BufferFull)
    );
}

#[test]
fn round_trip_through_serde_json() {
    for v in [sample(false), sample(true), largest()] {
        let text = json(&v);
        let back: Stats = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, v);
    }
}

/// The bytes the hand-written formatter printed before the schema existed (same keys, same
/// order), plus the keys added since at the end of their objects (`pools[].refill_cycles`,
/// `nf_name`): the line keeps its shape for the README, the tests and old logs.
#[test]
fn json_is_the_established_line() {
    let expected = concat!(
        r#"{"mode":"l2","tsc_hz":2000000000,"busy_cycles":123456,"forwarded":198,"kicks":7,"#,
        r#""halts":9,"cpus_online":1,"pairs":1,"queues":1,"pcp_count":31,"refill_cycles":4000,"#,
        r#""refill_pages":1024,"free_pages_boot":60000,"free_pages_now":59500,"ports":["#,
        r#"{"port":0,"queue":0,"cpu":0,"mac":"02:00:00:00:00:01","rx":100,"rx_bytes":6400,"#,
        r#""tx":99,"tx_bytes":6336,"kicks_rx":3,"kicks_tx":4,"no_buffer":5,"bad_token":0,"drops":"#,
        r#"{"tx_ring_full":1,"too_big":2,"bad_desc":0,"runt":7,"over_mtu":3,"link_down":0}},"#,
        r#"{"port":1,"queue":0,"cpu":0,"mac":"02:00:00:00:00:02","rx":101,"rx_bytes":6400,"#,
        r#""tx":99,"tx_bytes":6336,"kicks_rx":3,"kicks_tx":4,"no_buffer":5,"bad_token":0,"drops":"#,
        r#"{"tx_ring_full":1,"too_big":2,"bad_desc":0,"runt":7,"over_mtu":3,"link_down":0}}],"pools":["#,
        r#"{"id":0,"refill_mode":"bulk","in_flight":256,"cached":12,"alloc_fast":1000,"#,
        r#""alloc_slow":8,"alloc_empty":0,"refill_pages":512,"refill_failed":0,"#,
        r#""recycle_cached":900,"recycle_cache_full":3,"recycle_ring":0,"recycle_ring_full":0,"#,
        r#""released":0,"refill_cycles":2000},"#,
        r#"{"id":1,"refill_mode":"bulk","in_flight":256,"cached":12,"alloc_fast":1000,"#,
        r#""alloc_slow":8,"alloc_empty":0,"refill_pages":512,"refill_failed":0,"#,
        r#""recycle_cached":900,"recycle_cache_full":3,"recycle_ring":0,"recycle_ring_full":0,"#,
        r#""released":0,"refill_cycles":2000}],"busy_iters":50,"#,
        r#""phase_cycles":{"rx_forward":1,"tx_reap":2,"refill":3,"kick":4},"#,
        r#""per_cpu":[{"cpu":0,"forwarded":198,"busy_cycles":123456,"kicks":7,"halts":9,"busy_iters":50,"#,
        r#""tlb":{"pages_unmapped":40,"batches":3,"ipis_sent":0,"poll_requests":0,"#,
        r#""flushes_received":0,"invlpg_pages":0,"full_flushes":0,"wait_cycles":0,"#,
        r#""pending_pages":0}}],"nf":{"dropped":3,"kept":2,"to_mgmt":0,"mgmt_unavailable":0,"#,
        r#""keep_overflow":0,"bad_port":0,"sent_held":2,"handed_off":0,"handoff_dropped":0,"consumed":0},"nf_name":"l2"}"#,
    );
    assert_eq!(json(&sample(false)), expected);
    let router = json(&sample(true));
    let tail = concat!(
        r#""per_cpu":[{"cpu":0,"forwarded":198,"busy_cycles":123456,"kicks":7,"halts":9,"busy_iters":50,"#,
        r#""tlb":{"pages_unmapped":40,"batches":3,"ipis_sent":0,"poll_requests":0,"#,
        r#""flushes_received":0,"invlpg_pages":0,"full_flushes":0,"wait_cycles":0,"#,
        r#""pending_pages":0}}],"#,
        r#""router":{"rx":200,"forwarded":190,"tx_dropped":0,"fragmented":3,"arp_replies":2,"echo_replies":1,"#,
        r#""arp_consumed":1,"arp_requests":1,"to_host":3,"queued":4,"queued_now":0,"#,
        r#""icmp_sent":2,"icmp_rate_limited":0,"icmp_suppressed":0,"no_buffer":0,"drops":{"#,
        r#""runt":0,"unknown_port":0,"not_for_us":0,"link_broadcast":0,"#,
        r#""unsupported_ethertype":0,"ipv6_off":0,"bad_arp":0,"arp_not_for_us":0,"ip_truncated":0,"#,
        r#""bad_version":0,"bad_ihl":0,"bad_total_len":0,"bad_checksum":0,"beyond_head":0,"#,
        r#""bad_options":0,"#,
        r#""martian_src":0,"martian_dst":0,"broadcast":0,"multicast":0,"#,
        r#""source_route_failed":0,"no_route":1,"ttl_expired":2,"frag_needed":0,"#,
        r#""neigh_table_full":0,"#,
        r#""neigh_queue_full":0,"neigh_timeout":0,"neigh_flushed":0,"neigh_evicted":0},"#,
        r#""neigh_sync":{"sent":5,"applied":5,"dropped":0}},"#,
        r#""nf":{"dropped":3,"kept":2,"to_mgmt":0,"mgmt_unavailable":0,"#,
        r#""keep_overflow":0,"bad_port":0,"sent_held":2,"handed_off":0,"handoff_dropped":0,"consumed":0},"nf_name":"router","#,
        r#""mgmt":{"handoff":6,"handoff_dropped":0,"linear":2,"linear_failed":0}}"#,
    );
    assert!(router.starts_with(r#"{"mode":"router","#), "{router}");
    assert!(router.ends_with(tail), "{router}");
}

/// Issue 37: `router6` carries every IPv6 drop reason under its name, and `/metrics` each
/// outcome and reason once.
#[test]
fn router6_keys_and_metrics() {
    use crate::router::ipv6::Drop6;
    let mut c = crate::router::v6::Counters6 {
        rx: 40,
        forwarded: 3,
        nd_answered: 1,
        ..Default::default()
    };
    for (i, d) in c.drops.iter_mut().enumerate() {
        *d = i as u64 + 1;
    }
    let r = Router6Stats::new(&c, 2);
    let v: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
    assert_eq!(v["drops"].as_object().unwrap().len(), Drop6::COUNT);
    for d in Drop6::ALL {
        assert_eq!(v["drops"][d.as_str()], c.drops_for(d), "{d:?}");
    }
    assert_eq!(
        (v["rx"].as_u64(), v["queued_now"].as_u64()),
        (Some(40), Some(2))
    );
    assert_eq!(r.outcomes(), c.outcomes());
    let mut s = sample(true);
    s.router6 = Some(r);
    let back: Stats = serde_json::from_str(&json(&s)).unwrap();
    assert_eq!(back.router6, Some(r));
    let mut text = String::new();
    write_prometheus6(&r, &mut text).unwrap();
    assert!(
        text.contains("gannet_router6_frames_total{outcome=\"forwarded\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("gannet_router6_drops_total{reason=\"no_route\"} 16\n"),
        "{text}"
    );
    assert_eq!(
        text.matches("gannet_router6_drops_total{").count(),
        Drop6::COUNT
    );
    assert!(
        !json(&sample(true)).contains("router6"),
        "absent without IPv6"
    );
}

#[test]
fn drop_keys_are_the_reasons_names() {
    let mut c = RouterCounters::default();
    for (i, d) in c.drops.iter_mut().enumerate() {
        *d = i as u64 + 1;
    }
    let drops = RouterDrops::from(&c);
    let v: serde_json::Value = serde_json::from_str(&json(&drops)).unwrap();
    assert_eq!(v.as_object().unwrap().len(), RouterDrop::COUNT);
    for r in RouterDrop::ALL {
        assert_eq!(v[r.as_str()], c.drops_for(r), "{r:?}");
        assert_eq!(drops.get(r), c.drops_for(r), "{r:?}");
    }
    assert_eq!(drops.total(), c.drops_total());
    let mut p = PortCounters::default();
    for (i, d) in p.drops.iter_mut().enumerate() {
        *d = i as u64 + 1;
    }
    let drops = PortDrops::from(&p);
    let v: serde_json::Value = serde_json::from_str(&json(&drops)).unwrap();
    assert_eq!(v.as_object().unwrap().len(), DropReason::ALL.len());
    for r in DropReason::ALL {
        assert_eq!(v[r.as_str()], p.drops_for(r), "{r:?}");
    }
    assert_eq!(drops.total(), p.drops_total());
}

#[test]
fn enum_values_are_their_command_line_names() {
    for m in [Mode::Io, Mode::L2, Mode::Router] {
        assert_eq!(json(&m), std::format!("\"{}\"", m.as_str()));
    }
    for r in [RefillMode::Bulk, RefillMode::Single] {
        assert_eq!(json(&r), std::format!("\"{}\"", r.as_str()));
    }
}

#[test]
fn mac_parse_errors_are_reported() {
    let text = json(&sample(false)).replace("02:00:00:00:00:01", "02:00:zz:00:00:01");
    let e = serde_json::from_str::<Stats>(&text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("MAC address"), "{e}");
}

#[test]
fn missing_or_misspelt_keys_do_not_parse() {
    let text = json(&sample(true));
    for (from, to) in [
        ("\"busy_cycles\":", "\"busy_cyc\":"),
        ("\"no_route\":", "\"no_routes\":"),
    ] {
        let bad = text.replacen(from, to, 1);
        assert!(serde_json::from_str::<Stats>(&bad).is_err(), "{bad}");
    }
    // Without the router section (l2, io): `router` is `None`.
    let l2: Stats = serde_json::from_str(&json(&sample(false))).unwrap();
    assert_eq!(l2.router, None);
}

#[test]
fn per_packet_ratios() {
    let s = sample(false);
    assert_eq!(s.cycles_per_packet(), Some(123_456.0 / 198.0));
    assert_eq!(s.kicks_per_packet(), Some(7.0 / 198.0));
    let idle = Stats::default();
    assert_eq!(idle.cycles_per_packet(), None);
    assert_eq!(idle.kicks_per_packet(), None);
}

fn prometheus(s: &Stats, mgmt: Option<&MgmtStats>) -> String {
    let mut out = String::new();
    write_prometheus(s, &[5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 7], mgmt, &[], &mut out).unwrap();
    out
}

fn mgmt() -> MgmtStats {
    MgmtStats {
        rx: 10,
        rx_dropped: 1,
        tx: 9,
        tx_dropped: 0,
        http_requests: 2,
        request_timeouts: 3,
        idle_timeouts: 4,
        response_timeouts: 5,
        fin_before_request: 6,
        drain_limit: 8,
        put_routes: [1, 2, 3, 0, 0, 0, 0, 4, 9, 10, 0, 1],
        put_rules: [5, 0, 0, 0, 0, 6, 7, 0, 0, 0, 0, 0],
        put_nat_timeouts: [2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        put_nf_files: [3, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0],
    }
}

#[test]
fn prometheus_lines() {
    let text = prometheus(&sample(true), Some(&mgmt()));
    let lines: StdVec<&str> = text.lines().collect();
    for want in [
        "# HELP gannet_port_rx_packets_total Frames received.",
        "# TYPE gannet_port_rx_packets_total counter",
        "gannet_port_rx_packets_total{port=\"0\"} 100",
        "gannet_port_rx_packets_total{port=\"1\"} 101",
        "gannet_port_rx_bytes_total{port=\"1\"} 6400",
        "gannet_port_tx_packets_total{port=\"0\"} 99",
        "gannet_port_tx_bytes_total{port=\"0\"} 6336",
        "gannet_port_rx_no_buffer_total{port=\"1\"} 5",
        "# TYPE gannet_port_drops_total counter",
        "gannet_port_drops_total{port=\"1\",reason=\"tx_ring_full\"} 1",
        "gannet_port_drops_total{port=\"0\",reason=\"runt\"} 7",
        "gannet_cpu_forwarded_packets_total{cpu=\"0\"} 198",
        "gannet_cpu_busy_cycles_total{cpu=\"0\"} 123456",
        "# TYPE gannet_tlb_batches_total counter",
        "gannet_tlb_batches_total{cpu=\"0\"} 3",
        "gannet_tlb_pages_unmapped_total{cpu=\"0\"} 40",
        "# TYPE gannet_pool_in_flight_pages gauge",
        "gannet_pool_in_flight_pages{pool=\"1\"} 256",
        "# TYPE gannet_pool_cached_pages gauge",
        "gannet_pool_cached_pages{pool=\"0\"} 12",
        "# TYPE gannet_pool_alloc_slow_total counter",
        "gannet_pool_alloc_slow_total{pool=\"0\"} 8",
        "# TYPE gannet_free_pages gauge",
        "gannet_free_pages 59500",
        "# TYPE gannet_buddyinfo_free_blocks gauge",
        "gannet_buddyinfo_free_blocks{zone=\"0\",order=\"0\"} 5",
        "gannet_buddyinfo_free_blocks{zone=\"0\",order=\"10\"} 7",
        "gannet_router_forwarded_total 190",
        "gannet_router_tx_dropped_total 0",
        "gannet_router_fragmented_total 3",
        "gannet_router_icmp_sent_total 2",
        "gannet_router_drops_total{reason=\"no_route\"} 1",
        "gannet_router_drops_total{reason=\"ip_truncated\"} 0",
        "gannet_mgmt_frames_total{dir=\"rx\"} 10",
        "gannet_mgmt_frames_total{dir=\"tx\"} 9",
        "gannet_mgmt_frames_total{dir=\"rx_dropped\"} 1",
        "gannet_mgmt_frames_total{dir=\"tx_dropped\"} 0",
        "gannet_mgmt_http_requests_total 2",
        "# TYPE gannet_mgmt_tcp_closed_total counter",
        "gannet_mgmt_tcp_closed_total{reason=\"request_timeout\"} 3",
        "gannet_mgmt_tcp_closed_total{reason=\"idle_timeout\"} 4",
        "gannet_mgmt_tcp_closed_total{reason=\"response_timeout\"} 5",
        "gannet_mgmt_tcp_closed_total{reason=\"fin_before_request\"} 6",
        "gannet_mgmt_tcp_closed_total{reason=\"drain_limit\"} 8",
        "# TYPE gannet_mgmt_put_routes_total counter",
        "gannet_mgmt_put_routes_total{result=\"ok\"} 1",
        "gannet_mgmt_put_routes_total{result=\"unauthorized\"} 3",
        "gannet_mgmt_put_routes_total{result=\"failed\"} 4",
        "gannet_mgmt_put_routes_total{result=\"timeout\"} 9",
        "gannet_mgmt_put_routes_total{result=\"aborted\"} 10",
        "gannet_mgmt_put_routes_total{result=\"checked\"} 1",
        "# TYPE gannet_mgmt_put_rules_total counter",
        "gannet_mgmt_put_rules_total{result=\"ok\"} 5",
        "gannet_mgmt_put_rules_total{result=\"bad_request\"} 6",
        "gannet_mgmt_put_rules_total{result=\"busy\"} 7",
        "# TYPE gannet_mgmt_put_nat_timeouts_total counter",
        "gannet_mgmt_put_nat_timeouts_total{result=\"ok\"} 2",
        "gannet_mgmt_put_nat_timeouts_total{result=\"bad_request\"} 1",
        "# TYPE gannet_mgmt_put_nf_files_total counter",
        "gannet_mgmt_put_nf_files_total{result=\"ok\"} 3",
        "gannet_mgmt_put_nf_files_total{result=\"bad_request\"} 2",
        "# TYPE gannet_nf_frames_total counter",
        "gannet_nf_frames_total{nf=\"router\",verdict=\"dropped\"} 3",
        "gannet_nf_frames_total{nf=\"router\",verdict=\"kept\"} 2",
        "gannet_nf_frames_total{nf=\"router\",verdict=\"keep_overflow\"} 0",
        "gannet_nf_frames_total{nf=\"router\",verdict=\"sent_held\"} 2",
    ] {
        assert!(lines.contains(&want), "missing `{want}` in:\n{text}");
    }
    // Every family has HELP then TYPE, and every sample an integer value.
    let families = lines.iter().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        families,
        lines.iter().filter(|l| l.starts_with("# HELP ")).count()
    );
    assert_eq!(families, 34);
    for l in lines.iter().filter(|l| !l.starts_with('#')) {
        let v = l.rsplit(' ').next().unwrap();
        assert!(v.parse::<u64>().is_ok(), "bad sample line `{l}`");
    }
    // Outside router mode and without a management plane, those families are absent.
    let l2 = prometheus(&sample(false), None);
    assert!(
        !l2.contains("gannet_router_") && !l2.contains("gannet_mgmt_"),
        "{l2}"
    );
    promtool_check(&text);
    promtool_check(&l2);
}

/// Multi-queue: a port's queue pairs (one per core) are one series, summed; every core and
/// pool has its own.
#[test]
fn prometheus_sums_queue_pairs_per_port() {
    let mut s = sample(false);
    let mut more = s.ports.clone();
    for p in more.iter_mut() {
        p.queue = 1;
        p.cpu = 1;
    }
    s.ports.extend(more);
    s.per_cpu
        .push(CpuStats {
            cpu: 1,
            forwarded: 5,
            ..CpuStats::default()
        })
        .unwrap();
    for id in [2, 3] {
        s.pools.push(PoolStats { id, ..s.pools[0] }).unwrap();
    }
    let text = prometheus(&s, None);
    let rx: StdVec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gannet_port_rx_packets_total{"))
        .collect();
    assert_eq!(
        rx,
        [
            "gannet_port_rx_packets_total{port=\"0\"} 200",
            "gannet_port_rx_packets_total{port=\"1\"} 202"
        ]
    );
    assert!(text.contains("gannet_port_drops_total{port=\"0\",reason=\"runt\"} 14\n"));
    assert!(text.contains("gannet_cpu_forwarded_packets_total{cpu=\"1\"} 5\n"));
    assert!(text.contains("gannet_pool_in_flight_pages{pool=\"3\"} 256\n"));
    promtool_check(&text);
}

/// A port with NIC counters (e1000e, igb) gets the `gannet_nic_*` series, its link as gauges;
/// a virtio-net port (no `nic`) none; two queue pairs of one port sum their counters.
#[test]
fn prometheus_nic_series_for_ports_that_have_them() {
    let mut s = sample(false);
    assert!(
        !prometheus(&s, None).contains("gannet_nic_"),
        "virtio-net: none"
    );
    let nic = NicStats {
        mmio_reads: 40,
        link_up: true,
        link_speed_mbps: 1000,
        link_changes: 2,
        rx_errors: 1,
        missed: 3,
        crc_errors: 0,
        rx_no_buffer: 5,
    };
    s.ports[0].nic = Some(nic);
    s.ports[1].nic = Some(NicStats {
        link_up: false,
        link_speed_mbps: 0,
        ..nic
    });
    let mut q1 = s.ports[0];
    q1.queue = 1;
    s.ports.push(q1).unwrap();
    let text = prometheus(&s, None);
    for line in [
        "gannet_nic_link_up{port=\"0\"} 1",
        "gannet_nic_link_up{port=\"1\"} 0",
        "gannet_nic_link_speed_mbps{port=\"0\"} 1000",
        "gannet_nic_link_speed_mbps{port=\"1\"} 0",
        "gannet_nic_link_changes_total{port=\"0\"} 4",
        "gannet_nic_missed_total{port=\"0\"} 6",
        "gannet_nic_rx_no_buffers_total{port=\"1\"} 5",
        "gannet_nic_mmio_reads_total{port=\"0\"} 80",
        "# TYPE gannet_nic_link_up gauge",
        "# TYPE gannet_nic_crc_errors_total counter",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}`:\n{text}");
    }
    promtool_check(&text);
}

/// `promtool check metrics` on `text` when promtool (Debian's prometheus package) is on PATH;
/// otherwise a note (CI installs it).
fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        std::println!("note: promtool not on PATH; skipping `promtool check metrics`");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics rejected:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// A network function's own counters

/// The template's declaration (`template/src/main.rs`) and the ACL's shape.
const FILTER: &[CounterDef] = &[
    CounterDef::one("blocked", "Frames to the blocked port, dropped."),
    CounterDef::one("passed", "Frames forwarded."),
];
/// A stateful NF's shape: a count and a gauge of the entries in use.
const NAT_LIKE: &[CounterDef] = &[
    CounterDef::one("sessions_opened", "Sessions opened."),
    CounterDef::gauge("sessions", "Sessions in use."),
];
const ACL_LIKE: &[CounterDef] = &[
    CounterDef::per_index("rule_hits", "rule", 4, "Frames matched, by rule."),
    CounterDef::one("default_hits", "Frames no rule matched."),
];

/// `sample(false)` running `nf` with `vals` summed from two cores.
fn with_nf(nf: &str, vals: CounterValues) -> Stats {
    Stats {
        nf_name: heapless::String::try_from(nf).unwrap(),
        nf_counters: vals.to_stats(),
        ..sample(false)
    }
}

/// The guest's serialiser (serde-json-core) and the tools' parser (serde_json) agree on every
/// key: what the tools parse, written back, is exactly what the guest wrote (a key the tools'
/// type ignored or a value it changed would differ).
#[test]
fn the_tools_read_every_key_the_guest_writes() {
    let mut filter = CounterValues::new(FILTER);
    filter.set(0, 10);
    filter.set(1, 7);
    let mut acl = CounterValues::new(ACL_LIKE);
    acl.set_per_index(0, [4, 3, 0]);
    acl.set(1, 2);
    for v in [
        sample(false),
        sample(true),
        largest(),
        with_nf("port_filter", filter),
        with_nf("acl", acl),
    ] {
        let guest = json(&v);
        let back: Stats = serde_json::from_str(&guest).unwrap_or_else(|e| panic!("{e}: {guest}"));
        assert_eq!(back, v);
        let guest: serde_json::Value = serde_json::from_str(&guest).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), guest);
    }
    let text = json(&with_nf("port_filter", filter));
    assert!(
        text.ends_with(r#""nf_name":"port_filter","nf_counters":{"blocked":10,"passed":7}}"#),
        "{text}"
    );
    let text = json(&with_nf("acl", acl));
    assert!(
        text.ends_with(r#""nf_counters":{"rule_hits":[4,3,0],"default_hits":2}}"#),
        "{text}"
    );
    // A lone pool entry too (the `pools` console line).
    let pool = json(&largest_pool());
    let back: PoolStats = serde_json::from_str(&pool).unwrap();
    assert_eq!(back, largest_pool());
    let v: serde_json::Value = serde_json::from_str(&pool).unwrap();
    assert_eq!(serde_json::to_value(back).unwrap(), v);
}

#[test]
fn pool_entries_need_every_counter_but_refill_cycles() {
    let text = json(&largest_pool());
    let old = text.replace(&std::format!(",\"refill_cycles\":{}", u64::MAX), "");
    assert_ne!(old, text);
    let back: PoolStats = serde_json::from_str(&old).unwrap();
    assert_eq!(back.counters.refill_cycles, 0);
    for key in ["\"id\":", "\"cached\":", "\"released\":"] {
        let bad = text.replacen(key, "\"other\":", 1);
        assert!(serde_json::from_str::<PoolStats>(&bad).is_err(), "{bad}");
    }
}

#[test]
fn prometheus_names_the_nf_and_its_counters() {
    let mut filter = CounterValues::new(FILTER);
    filter.set(0, 10);
    let mut out = String::new();
    let s = with_nf("port_filter", filter);
    write_prometheus(&s, &[0; 11], None, FILTER, &mut out).unwrap();
    for want in [
        "gannet_nf_frames_total{nf=\"port_filter\",verdict=\"dropped\"} 3",
        "# HELP gannet_nf_port_filter_blocked_total Frames to the blocked port, dropped.",
        "# TYPE gannet_nf_port_filter_blocked_total counter",
        "gannet_nf_port_filter_blocked_total 10",
        "gannet_nf_port_filter_passed_total 0",
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "missing `{want}` in:\n{out}"
        );
    }
    promtool_check(&out);
    let mut acl = CounterValues::new(ACL_LIKE);
    acl.set_per_index(0, [4, 3, 0]);
    acl.set(1, 2);
    let mut out = String::new();
    write_prometheus(&with_nf("acl", acl), &[0; 11], None, ACL_LIKE, &mut out).unwrap();
    for want in [
        "# HELP gannet_nf_acl_rule_hits_total Frames matched, by rule.",
        "gannet_nf_acl_rule_hits_total{rule=\"0\"} 4",
        "gannet_nf_acl_rule_hits_total{rule=\"2\"} 0",
        "gannet_nf_acl_default_hits_total 2",
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "missing `{want}` in:\n{out}"
        );
    }
    promtool_check(&out);
    // A gauge: its own type, no `_total`; in STATS a value like the others.
    let mut nat = CounterValues::new(NAT_LIKE);
    nat.set(0, 5);
    nat.set(1, 3);
    let mut out = String::new();
    write_prometheus(&with_nf("nat", nat), &[0; 11], None, NAT_LIKE, &mut out).unwrap();
    for want in [
        "gannet_nf_nat_sessions_opened_total 5",
        "# HELP gannet_nf_nat_sessions Sessions in use.",
        "# TYPE gannet_nf_nat_sessions gauge",
        "gannet_nf_nat_sessions 3",
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "missing `{want}` in:\n{out}"
        );
    }
    promtool_check(&out);
    assert!(json(&with_nf("nat", nat))
        .ends_with(r#""nf_counters":{"sessions_opened":5,"sessions":3}}"#));
    // Without the declaration (a host tool rendering a parsed line): a generic help, the
    // index labelled `index`; a line from before `nf_name`: the mode.
    let mut out = String::new();
    let mut old = with_nf("acl", acl);
    old.nf_name.clear();
    write_prometheus(&old, &[0; 11], None, &[], &mut out).unwrap();
    assert!(
        out.contains("gannet_nf_l2_rule_hits_total{index=\"1\"} 3\n"),
        "{out}"
    );
    assert!(
        out.contains("gannet_nf_frames_total{nf=\"l2\",verdict=\"kept\"} 2\n"),
        "{out}"
    );
    promtool_check(&out);
}

/// Every metric family the writer emits (router, FIB, management plane and NF counters
/// included) is named in the README's *Metric names* table: the names are documented, and a
/// renamed or new family cannot go unnoticed.
#[test]
fn every_metric_family_is_documented() {
    let readme = include_str!("../../../README.md");
    let table = readme
        .split("**Metric names**")
        .nth(1)
        .expect("the README's *Metric names* table");
    // Every optional section present (`largest` itself would overflow the per-port sums).
    let all = Stats {
        fib: largest().fib,
        faults: largest().faults,
        nf_counters: largest_nf_counters(),
        ..sample(true)
    };
    let text = prometheus(&all, Some(&mgmt()));
    let mut families = 0;
    for family in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = family.split(' ').next().unwrap();
        let documented = if name.starts_with("gannet_nf_") && name != "gannet_nf_frames_total" {
            "gannet_nf_<nf>_<counter>_total"
        } else {
            name
        };
        assert!(
            table.contains(&std::format!("`{documented}`")),
            "`{name}` is not in the README's metric names"
        );
        families += 1;
    }
    assert!(families > 30, "{text}");
}
