//! Router mode: the one FIB, built on the boot CPU over memory set aside at boot (connected,
//! local and broadcast routes, `route=`, the routes file), then read by every core's router.

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

use core::fmt::Write;
use log::info;
use netstack::config::PORTS;
use netstack::router::{
    Fib, PortConfig, Router, RouterConfig, RuleSlot, TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::{Config, MacAddr};
use unikernel::dataplane::CoreRouter;

/// The router that builds the FIB on the boot CPU.
type FibBuilder = Router<'static, mm::Pfn>;

/// DIR-24-8 second-level groups (256 entries each): prefixes longer than /24 under 1024
/// distinct /24s. 1 MiB.
const TBL8_GROUPS: usize = 1024;
/// FIB rule slots (a power of two, at least 8/7 of the routes): room for ~114,000 routes
/// (a full-table-sized routes file), 1.5 MiB.
const FIB_RULES: usize = 1 << 17;
/// Bytes of contiguous RAM the router's FIB needs, set aside at boot (`mode=router`): the
/// 2^24-entry tbl24 (64 MiB) + tbl8 + rule slots.
pub const ROUTER_RESERVE_BYTES: u64 = (TBL24_LEN * 4
    + TBL8_GROUPS * TBL8_GROUP_LEN * 4
    + FIB_RULES * core::mem::size_of::<RuleSlot>()) as u64;

/// The FIB, built once before any other core starts; read-only afterwards.
static SHARED_FIB: spin::Once<Fib<'static>> = spin::Once::new();

/// A configuration error found while building the FIB (the boot stops with it).
pub struct FibError(pub heapless::String<256>);

fn err(args: core::fmt::Arguments<'_>) -> FibError {
    let mut s = heapless::String::new();
    let _ = s.write_fmt(args);
    FibError(s)
}

/// The router's ports: port `i` has MAC `macs[i]` and address `ip{i}=`.
fn router_ports(cfg: &Config, macs: [MacAddr; PORTS]) -> Result<[PortConfig; PORTS], FibError> {
    if let Some(i) = (0..PORTS).find(|&i| cfg.ip[i].is_none()) {
        return Err(err(format_args!(
            "config error: ip{i}= is required in router mode"
        )));
    }
    Ok(core::array::from_fn(|i| PortConfig {
        mac: macs[i],
        addr: cfg.ip[i].expect("checked above"),
    }))
}

/// Boot CPU, once: build the FIB in `reserved` (`(address, bytes)` that `mem::init` set aside)
/// from the configuration and the routes file, and publish it for [`core_router`].
///
/// # Errors
/// A [`FibError`] naming the bad address, route or routes-file line.
pub fn build_fib(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    reserved: Option<(u64, u64)>,
    routes_file: Option<&str>,
) -> Result<(), FibError> {
    let Some((addr, _)) = reserved.filter(|r| r.1 >= ROUTER_RESERVE_BYTES) else {
        return Err(err(format_args!(
            "router: no FIB memory reserved ({ROUTER_RESERVE_BYTES} bytes needed)"
        )));
    };
    let base = addr as *mut u8;
    // SAFETY: [addr, addr + ROUTER_RESERVE_BYTES) was set aside by mem::init for us alone:
    // identity-mapped RAM outside the zone and the image, never freed, and this runs once (the
    // boot CPU, before SHARED_FIB is set). The three tables do not overlap, each is aligned
    // (4 KiB base, u32-sized offsets) and every RuleSlot is written before the slice over them
    // is made; u32 tables may hold any bit pattern (Fib::new clears them).
    let (tbl24, tbl8, rules) = unsafe {
        let tbl24 = core::slice::from_raw_parts_mut(base.cast::<u32>(), TBL24_LEN);
        let t8 = base.add(TBL24_LEN * 4).cast::<u32>();
        let tbl8 = core::slice::from_raw_parts_mut(t8, TBL8_GROUPS * TBL8_GROUP_LEN);
        let r = base
            .add(TBL24_LEN * 4 + TBL8_GROUPS * TBL8_GROUP_LEN * 4)
            .cast::<RuleSlot>();
        for i in 0..FIB_RULES {
            r.add(i).write(RuleSlot::EMPTY);
        }
        (tbl24, tbl8, core::slice::from_raw_parts_mut(r, FIB_RULES))
    };
    let fib = Fib::new(tbl24, tbl8, rules).map_err(|e| err(format_args!("router: FIB: {e}")))?;
    let ports = router_ports(cfg, macs)?;
    let mut router = FibBuilder::new(fib, &ports, RouterConfig::default())
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))?;
    for (net, gw) in cfg.routes.iter() {
        router
            .add_route(*net, *gw)
            .map_err(|e| err(format_args!("config error: route={net},{gw}: {e}")))?;
    }
    if let Some(text) = routes_file {
        let mut n = 0;
        for r in netstack::parse_routes_file(text) {
            match r {
                Ok((line, (net, gw))) => {
                    router.add_route(net, gw).map_err(|e| {
                        err(format_args!("config error: routes file line {line}: {net},{gw}: {e}"))
                    })?;
                    n += 1;
                }
                Err((line, text, why)) => {
                    return Err(err(format_args!(
                        "config error: routes file line {line}: `{text}`: {why} (expected PREFIX/LEN,GATEWAY)"
                    )))
                }
            }
        }
        info!("router: {n} routes from the routes file");
    }
    info!(
        "router: {} routes in the FIB (connected, local, broadcast, static)",
        router.fib().len()
    );
    SHARED_FIB.call_once(|| router.into_fib());
    Ok(())
}

/// Core `k`'s router (of `cores`) over the shared FIB (built by [`build_fib`] before any other
/// core starts); its IP IDs interleave with the other cores' (RFC 6864).
///
/// # Errors
/// A [`FibError`] if the FIB was not built or the ports' addresses are bad.
pub fn core_router(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    k: usize,
    cores: usize,
) -> Result<CoreRouter, FibError> {
    let fib = SHARED_FIB.get().ok_or_else(|| {
        err(format_args!(
            "router: the FIB was not built before this core started"
        ))
    })?;
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    CoreRouter::new(fib, &router_ports(cfg, macs)?, rc)
        .map_err(|e| err(format_args!("config error: ip0/ip1: router: {e}")))
}
