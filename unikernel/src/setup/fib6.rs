//! Router mode with `ip6_0=`/`ip6_1=`: the IPv6 FIB (a `netstack::router::fib6::Poptrie`),
//! built once on the boot CPU before the boot free-page count from the ports' connected
//! prefixes, the IPv6 `route=` keys and the routes file's IPv6 lines
//! (`netstack::router::setup6::collect6`), then read by every core's `Router6`.
//!
//! Boot only: the live reload (`routes commit`, `PUT /routes`) rebuilds the IPv4 FIB alone;
//! `PUT /routes` refuses IPv6 lines, and the IPv6 FIB stays as booted (docs/DESIGN.md, "IPv6").

use super::fib::FibError;
use crate::dataplane::CoreRouter6;
use core::fmt::Write;
use log::info;
use mm::Zone;
use netstack::config::PORTS;
use netstack::router::fib6::{Node6, Poptrie, Route6, DIRECT_LEN};
use netstack::router::setup6::{collect6, count6, routes6_of_file};
use netstack::router::v6::{NextHop6, Port6};
use netstack::router::RouterConfig;
use netstack::{Config, MacAddr};

/// The boot IPv6 FIB and its next-hop table.
struct Fib6 {
    trie: Poptrie<'static>,
    nexthops: &'static [NextHop6],
}

static FIB6: spin::Once<Fib6> = spin::Once::new();

fn fail6(args: core::fmt::Arguments<'_>) -> FibError {
    let mut s = heapless::String::new();
    let _ = s.write_fmt(args);
    FibError(s, super::fib::Blame::Route)
}

/// `n` values of `T`, each `v`, kept for the kernel's life ([`crate::mem::alloc_forever_slice`]),
/// or the error naming `what` found no block.
fn carve<T: Copy>(zone: &Zone, n: usize, v: T, what: &str) -> Result<&'static mut [T], FibError> {
    crate::mem::alloc_forever_slice(zone, n, v).ok_or_else(|| {
        let bytes = n.max(1) * core::mem::size_of::<T>();
        fail6(format_args!(
            "router: no memory for the IPv6 FIB's {what} ({bytes} bytes)"
        ))
    })
}

/// Boot CPU, once, before the boot free-page count: build the IPv6 FIB when the ports have
/// IPv6 addresses (nothing otherwise). Memory: the direct table (256 KiB), the Poptrie's
/// nodes and leaves, the route list and the next-hop table, kept for good.
///
/// # Errors
/// A [`FibError`] naming the bad route (by `route=` or routes-file line) or the memory that
/// ran out.
pub fn build_fib6(
    cfg: &Config,
    zone: &Zone,
    routes_file: Option<&'static str>,
) -> Result<(), FibError> {
    let [Some(a), Some(b)] = cfg.router.ip6 else {
        // IPv6 routes without IPv6 ports would be dropped unseen: refused by line.
        if let Some((line, text, _)) = routes_file.and_then(|t| routes6_of_file(t).next()) {
            return Err(fail6(format_args!(
                "config error: routes file line {line}: `{text}`: an IPv6 route needs ip6_0= and ip6_1="
            )));
        }
        return Ok(());
    };
    let t0 = crate::arch::time::uptime_us();
    let room = count6(PORTS, cfg.router.routes6.len(), routes_file);
    let routes = carve(
        zone,
        room,
        Route6 {
            prefix: 0,
            len: 0,
            nh: 0,
        },
        "route list",
    )?;
    let nexthops = carve(zone, room, NextHop6::Connected { port: 0 }, "next hops")?;
    let n = collect6(&[a, b], &cfg.router.routes6, routes_file, routes, nexthops)
        .map_err(|e| fail6(format_args!("router: IPv6 routes: {e}")))?;
    let routes = &mut routes[..n];
    let size = Poptrie::size(routes).map_err(|e| fail6(format_args!("router: IPv6 FIB: {e}")))?;
    let direct = carve(zone, DIRECT_LEN, 0u32, "direct table")?;
    let nodes = carve(zone, size.nodes, Node6::default(), "nodes")?;
    let leaves = carve(zone, size.leaves, 0u32, "leaves")?;
    let trie = Poptrie::build(routes, direct, nodes, leaves)
        .map_err(|e| fail6(format_args!("router: IPv6 FIB: {e}")))?;
    let lists = room * (core::mem::size_of::<Route6>() + core::mem::size_of::<NextHop6>());
    info!(
        "router: IPv6 FIB: {n} routes ({} connected), {} nodes, {} leaves, {} KiB (Poptrie) + {} KiB (route list, next hops), built in {} ms; at boot only",
        PORTS,
        size.nodes,
        size.leaves,
        size.bytes() / 1024,
        lists / 1024,
        (crate::arch::time::uptime_us() - t0) / 1000
    );
    FIB6.call_once(|| Fib6 {
        trie,
        nexthops: &nexthops[..n],
    });
    Ok(())
}

/// Core `k`'s IPv6 router over the boot IPv6 FIB, its ports' MACs `macs` and IP MTUs `mtu`
/// (core 0's sends the Router Advertisements with `ra6=on`); `None` without
/// `ip6_0=`/`ip6_1=`.
///
/// # Errors
/// A port MTU below 1,280 (the device's, when `mtuN=` is not given), naming the port.
pub fn core_router6(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    mtu: [u16; PORTS],
    k: usize,
    cores: usize,
) -> Result<Option<CoreRouter6>, FibError> {
    let (Some(fib), [Some(a), Some(b)]) = (FIB6.get(), cfg.router.ip6) else {
        return Ok(None);
    };
    let ports = [
        Port6 {
            mac: macs[0],
            addr: a,
            mtu: mtu[0],
        },
        Port6 {
            mac: macs[1],
            addr: b,
            mtu: mtu[1],
        },
    ];
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    let bucket = netstack::router::icmp::TokenBucket::new(rc.icmp_rate_per_sec, rc.icmp_burst);
    if cfg.router.ra6 && k == 0 {
        info!(
            "router6: Router Advertisements on both ports from cpu 0 (ra6=on): the first 3 16 s apart, then every 198-600 s, and 3 s after the last at a solicitation"
        );
    }
    CoreRouter6::new(&ports, &fib.trie, fib.nexthops, rc.neigh, bucket)
        // One core advertises each link (`ra6=on`), not one per queue pair.
        .map(|r| Some(r.with_ra(cfg.router.ra6 && k == 0)))
        .map_err(|e| {
            fail6(format_args!(
                "config error: ip6_0/ip6_1: IPv6 router: {e:?} (port MTUs {mtu:?}: IPv6 needs 1280)"
            ))
        })
}
