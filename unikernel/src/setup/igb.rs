//! Intel 82576 ports (`-device igb`): bring-up of every igb function the PCI scan found
//! (behind bridges too), on the boot CPU, into a per-core device set of their own type
//! ([`IgbPort`]); the cores that own them run a core monomorphised for it (`run::run_polled`).
//! The checks, the BAR mapping and the per-port settings are the e1000e set-up's
//! ([`super::e1000e`]); the bring-up is the driver's ([`drivers::igb::start`] on every port,
//! then [`drivers::igb::finish`] on each).
//!
//! One queue pair per port (queue 0), busy polling: RSS and a queue pair per core (issue 41,
//! item 3) are not driven yet, MSI-X is not wired. igb ports do not pair with another driver's
//! (a mix is refused at boot, [`super::SetupError::MixedNics`]).

use super::e1000e::{map_regs, plan, port_config, PortStash};
use super::{port_error, SetupError, Topology};
use crate::arch::time::uptime_us;
use crate::mem::KernelHal;
use crate::percpu::MAX_CPUS;
use drivers::igb::{finish, start, Igb, MmioRegs, Starting};
use drivers::nic::Nic;
use drivers::pci::PciCam;
use log::info;
use netstack::config::PORTS;
use netstack::{Config, MacAddr};
use virtio_drivers::transport::pci::bus::{DeviceFunction, DeviceFunctionInfo, PciRoot};

/// A port on an 82576: the DD-bit driver with advanced descriptors over the NIC's BAR 0.
pub type IgbPort = Igb<KernelHal, MmioRegs>;

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

/// Bring up the igb functions `found` (PCI scan order) for `cpus` CPUs: ports `2k`, `2k + 1`
/// for core `k` (router mode: one pair).
///
/// # Errors
/// [`SetupError`]: too few ports, `queues=N` > 1, or a port's bring-up (the driver's named
/// error: reset, EEPROM, link, queue enable, rings).
pub fn setup(
    cfg: &Config,
    cpus: usize,
    root: &mut PciRoot<PciCam>,
    found: &[(DeviceFunction, DeviceFunctionInfo)],
) -> Result<Topology, SetupError> {
    let pairs = plan(
        cfg,
        cpus,
        found.len(),
        "igb",
        "RSS and a queue pair per core over the 82576's 16 are not driven yet",
    )?;
    // Every port's autonegotiation restarted first, then each link waited for: the ports'
    // 500 ms (QEMU) run together, not one after another.
    let mut starting: heapless::Vec<Starting<MmioRegs>, { PORTS * MAX_CPUS }> =
        heapless::Vec::new();
    for (i, &(df, _)) in found.iter().enumerate().take(pairs * PORTS) {
        let regs = map_regs(root, i, df, "igb")?;
        let s = start(regs, &port_config(cfg, i % PORTS), &uptime_us)
            .map_err(|e| port_error(i, Some(df), format_args!("{e}")))?;
        let _ = starting.push(s);
    }
    let mut stash = PORTS_IGB.lock();
    let mut starting = starting.into_iter();
    for k in 0..pairs {
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let (df, _) = found[i];
            let s = starting.next().expect("one started per port");
            let nic = finish::<KernelHal, _>(s, &port_config(cfg, j), &uptime_us)
                .map_err(|e| port_error(i, Some(df), format_args!("{e}")))?;
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
