//! Intel 82576 ports (`-device igb`): bring-up of every igb function the PCI scan found
//! (behind bridges too), on the boot CPU, into a per-core device set of their own type
//! ([`IgbPort`]); the cores that own them run a core monomorphised for it (`run::run_polled`).
//! The checks, the BAR mapping and the per-port settings are the e1000e set-up's
//! ([`super::e1000e`]); the bring-up is the driver's ([`drivers::igb::start`] on every port,
//! then [`drivers::igb::finish_queues`] on each).
//!
//! Queue pairs (issue 41, item 3): with `queues=N` (N > 1; `auto`: one per CPU up to the
//! 82576's 16, outside the NAT and firewall modes) core `k` owns queue pair `k` of ports 0 and
//! 1, each a DD-bit driver of its own ([`drivers::igb::QueueRegs`]: its rings, its page_pool,
//! no lock), and the ports spread frames over the queues by RSS: the Toeplitz hash over IPv4
//! and IPv6 addresses and TCP/UDP ports, keyed with [`netstack::rss::KEY`] (symmetric), through
//! a 128-entry redirection table filled round-robin ([`netstack::rss::reta_round_robin`]).
//! N must not exceed the CPUs online (a named config error); CPUs beyond N stay idle, named
//! in the boot log. Otherwise one queue pair per port (queue 0, `MRQC` 0), ports `2k`, `2k + 1`
//! on core `k`. Busy polling: MSI-X is not wired. igb ports do not pair with another
//! driver's (a mix is refused at boot, [`super::SetupError::MixedNics`]).

use super::e1000e::{map_regs, plan, port_config, PortStash};
use super::{port_error, SetupError, Topology};
use crate::arch::time::uptime_us;
use crate::mem::KernelHal;
use crate::percpu::MAX_CPUS;
use drivers::igb::{finish_queues, start, IgbQueue, MmioRegs, Rss, Starting, MAX_RSS_QUEUES};
use drivers::nic::Nic;
use drivers::pci::PciCam;
use log::{info, warn};
use netstack::config::PORTS;
use netstack::{Config, IdleMode, MacAddr, Mode, Queues};
use virtio_drivers::transport::pci::bus::{DeviceFunction, DeviceFunctionInfo, PciRoot};

/// A queue pair of a port on an 82576 (queue 0 of it without multi-queue): the DD-bit driver
/// with advanced descriptors over that queue's registers in the NIC's BAR 0.
pub type IgbPort = IgbQueue<KernelHal, MmioRegs>;

/// The igb handles.
static PORTS_IGB: PortStash<IgbPort> = PortStash::new();

/// Whether this boot's ports are igb ports.
pub fn ports_are_igb() -> bool {
    PORTS_IGB.found()
}

/// Core `k`'s two igb ports (once).
pub fn take_ports(k: usize) -> Option<[IgbPort; PORTS]> {
    PORTS_IGB.take(k)
}

/// Bring up the igb functions `found` (PCI scan order) for `cpus` CPUs: with more than one
/// queue pair ([`queue_pairs`]) queue pair `k` of ports 0 and 1 for core `k`; else ports `2k`,
/// `2k + 1` for core `k` (router mode: one pair).
///
/// # Errors
/// [`SetupError`]: too few ports, `queues=N` beyond the CPUs online, or a port's bring-up
/// (the driver's named error: reset, EEPROM, link, queue enable, rings).
pub fn setup(
    cfg: &Config,
    cpus: usize,
    root: &mut PciRoot<PciCam>,
    found: &[(DeviceFunction, DeviceFunctionInfo)],
) -> Result<Topology, SetupError> {
    let queues = queue_pairs(cfg, cpus)?;
    if queues > 1 {
        return setup_mq(cfg, cpus, root, found, queues);
    }
    let pairs = plan(
        cfg,
        cpus,
        found.len(),
        "igb",
        "multi-queue is set up before this check",
    )?;
    if cpus > pairs {
        info!(
            "igb: {pairs} port pair(s) on {cpus} CPUs: cpus {pairs}..{} stay idle (queues=N gives each core a queue pair)",
            cpus - 1
        );
    }
    let starting = start_ports(cfg, root, &found[..pairs * PORTS])?;
    let mut stash = PORTS_IGB.lock();
    let mut starting = starting.into_iter();
    for k in 0..pairs {
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let (df, _) = found[i];
            let s = starting.next().expect("one started per port");
            let Some(nic) = finish_port(cfg, s, i, df, &single_queue())?
                .into_iter()
                .next()
            else {
                return Err(port_error(
                    i,
                    Some(df),
                    format_args!("igb: no queue brought up"),
                ));
            };
            info!(
                "port {i}: {df} igb (82576) MAC {} link up at {} Mb/s, advanced rings 2x{} (one buffer each, 4 KiB), RDT every {} buffers, flow control off (cpu {k}, polled)",
                MacAddr(nic.mac()),
                drivers::nic::Nic::stats(&nic).link_speed_mbps.unwrap_or(0),
                drivers::nic::RING_SIZE,
                drivers::ddnic::RX_PUBLISH_BATCH,
            );
            stash[k][j] = Some(nic);
        }
    }
    PORTS_IGB.mark_found();
    Ok(Topology {
        pairs,
        queues: 1,
        port_pairs: pairs,
    })
}

/// Queue pairs per igb port for `queues=` on `cpus` CPUs: `N` as asked (at most the CPUs
/// online); `auto`, one per CPU up to [`MAX_RSS_QUEUES`], but 1 in the NAT and firewall modes
/// (as on virtio-net: they take several queues only when asked).
///
/// # Errors
/// [`SetupError::Queues`]: `queues=N` with fewer than N CPUs online, or N above the 82576's 16.
pub fn queue_pairs(cfg: &Config, cpus: usize) -> Result<usize, SetupError> {
    match cfg.queues {
        Queues::Count(n) if usize::from(n) > cpus.min(MAX_RSS_QUEUES) && n > 1 => {
            let mut s = heapless::String::new();
            let _ = core::fmt::write(
                &mut s,
                format_args!(
                    "queues={n}: igb ports get one queue pair per core, and {cpus} CPU(s) are online (the 82576 has {MAX_RSS_QUEUES} queue pairs)"
                ),
            );
            Err(SetupError::Queues(s))
        }
        Queues::Count(n) => Ok(usize::from(n).max(1)),
        Queues::Auto if matches!(cfg.mode, Mode::Nat | Mode::Firewall) => Ok(1),
        Queues::Auto => Ok(cpus.clamp(1, MAX_RSS_QUEUES)),
    }
}

/// One queue pair, RSS off.
fn single_queue() -> Rss {
    Rss {
        queues: 1,
        key: netstack::rss::KEY,
        reta: [0; netstack::rss::RETA_LEN],
    }
}

/// Reset every port of `found` and restart its autonegotiation (all of them first, then each
/// link is waited for: the ports' 500 ms under QEMU run together, not one after another).
fn start_ports(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    found: &[(DeviceFunction, DeviceFunctionInfo)],
) -> Result<heapless::Vec<Starting<MmioRegs>, { PORTS * MAX_CPUS }>, SetupError> {
    let mut starting = heapless::Vec::new();
    for (i, &(df, _)) in found.iter().enumerate() {
        let regs = map_regs(root, i, df, "igb")?;
        let s = start(regs, &port_config(cfg, i % PORTS), &uptime_us)
            .map_err(|e| port_error(i, Some(df), format_args!("{e}")))?;
        if starting.push(s).is_err() {
            // More functions than slots: the caller takes at most PORTS * MAX_CPUS.
            break;
        }
    }
    Ok(starting)
}

/// Port `i` (function `df`) finished with `rss`'s queue pairs.
fn finish_port(
    cfg: &Config,
    s: Starting<MmioRegs>,
    i: usize,
    df: DeviceFunction,
    rss: &Rss,
) -> Result<heapless::Vec<IgbPort, MAX_RSS_QUEUES>, SetupError> {
    finish_queues::<KernelHal, _>(s, &port_config(cfg, i % PORTS), rss, &uptime_us)
        .map_err(|e| port_error(i, Some(df), format_args!("{e}")))
}

/// `queues` queue pairs on each of ports 0 and 1 with RSS; queue pair `k` of both for core
/// `k`; the other functions unused, the CPUs beyond `queues` idle (both named in the log).
fn setup_mq(
    cfg: &Config,
    cpus: usize,
    root: &mut PciRoot<PciCam>,
    found: &[(DeviceFunction, DeviceFunctionInfo)],
    queues: usize,
) -> Result<Topology, SetupError> {
    if found.len() < PORTS {
        return Err(SetupError::TooFewPorts(found.len()));
    }
    if found.len() > PORTS {
        warn!(
            "{} igb functions found; using the first {PORTS} ({queues} queue pairs each)",
            found.len()
        );
    }
    if cpus > queues {
        info!(
            "igb: {queues} queue pairs per port on {cpus} CPUs: cpus {queues}..{} stay idle (no queue pair; queues={cpus} uses them)",
            cpus - 1
        );
    }
    if cfg.idle == IdleMode::Halt {
        info!("igb: RX interrupts (MSI-X) are not wired; the cores busy-poll these ports");
    }
    let rss = Rss {
        queues,
        key: netstack::rss::KEY,
        reta: netstack::rss::reta_round_robin(queues),
    };
    let starting = start_ports(cfg, root, &found[..PORTS])?;
    let mut stash = PORTS_IGB.lock();
    for (j, s) in starting.into_iter().enumerate() {
        let (df, _) = found[j];
        let qs = finish_port(cfg, s, j, df, &rss)?;
        log_mq_port(j, df, &qs, &rss);
        for (k, q) in qs.into_iter().enumerate() {
            stash[k][j] = Some(q);
        }
    }
    for k in 0..queues {
        info!("igb queue pair {k} of ports 0 and 1: cpu {k} (polled)");
    }
    PORTS_IGB.mark_found();
    Ok(Topology {
        pairs: queues,
        queues,
        port_pairs: 1,
    })
}

/// Port `j`'s multi-queue line: queue count, the key, the table's spread.
fn log_mq_port(j: usize, df: DeviceFunction, qs: &[IgbPort], rss: &Rss) {
    let Some(q0) = qs.first() else { return };
    let (mut least, mut most) = (usize::MAX, 0);
    for q in 0..rss.queues {
        let n = rss.reta.iter().filter(|&&e| usize::from(e) == q).count();
        least = least.min(n);
        most = most.max(n);
    }
    info!(
        "port {j}: {df} igb (82576) MAC {} link up at {} Mb/s, {} queue pairs, RSS: Toeplitz over IPv4/IPv6 addresses and TCP/UDP ports, symmetric key (0x6d5a repeated, 40 bytes), RETA {} entries round-robin over queues 0..{} ({least}..={most} entries each), advanced rings 2x{} per queue, flow control off",
        MacAddr(q0.mac()),
        drivers::nic::Nic::stats(q0).link_speed_mbps.unwrap_or(0),
        rss.queues,
        rss.reta.len(),
        rss.queues,
        drivers::nic::RING_SIZE,
    );
}
