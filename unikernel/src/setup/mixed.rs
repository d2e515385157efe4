//! A port pair of two drivers: one virtio-net port and one Intel 82574L (e1000e) port, in PCI
//! scan order (the lower bus:device.function is port 0). The core that owns them runs over
//! [`MixedPort`]s (`drivers::nic::EitherNic`): each port's calls match on its driver, and a
//! burst from one to the other runs the neutral staged burst (`drivers::nic::forward_staged`).
//!
//! The e1000e keeps its frames 12 bytes into their pages, where virtio-net's header room ends
//! (`drivers::ddnic::DdNic`'s `OFFSET`: one frame offset per core). One pair only (one of each;
//! any other mix is [`super::SetupError::MixedNics`]), single queue, busy polling (neither
//! port's RX interrupt is routed). Frames of several buffers are not carried across the
//! drivers (the staged burst hands them back, counted `too_big`): on a jumbo MTU both ports
//! still take frames up to one page.

use super::e1000e::port as e1000e_port;
use super::{port_error, SetupError, Topology};
use crate::mem::KernelHal;
use drivers::ddnic::DdNic;
use drivers::e1000e::MmioRegs;
use drivers::nic::{EitherNic, Nic as _};
use drivers::pci::{virtio_notify_cfg, PciCam};
use drivers::transport::pci_port;
use drivers::virtio_net::{FeatureNames, VirtioNet, QUEUE_SIZE};
use log::info;
use netstack::config::PORTS;
use netstack::{Config, MacAddr, Queues};
use virtio_drivers::transport::pci::bus::{DeviceFunction, DeviceFunctionInfo, PciRoot};

/// Where both drivers of a mixed pair keep the frame in its first page: virtio-net's
/// `virtio_net_hdr` bytes before it.
const OFFSET: usize = <super::Nic as drivers::nic::Nic>::FRAME_OFFSET;

/// A port of a mixed pair: virtio-net, or an 82574L with its frames at [`OFFSET`].
pub type MixedPort = EitherNic<super::Nic, DdNic<KernelHal, MmioRegs, OFFSET>>;

/// The pair's two ports on their way from the boot CPU to core 0.
struct Pair([MixedPort; PORTS]);

// SAFETY: the ports own their rings and pages outright, and their doorbells and registers are
// MMIO addresses valid on every core; the pair moves once, from the boot CPU (set-up) to core
// 0, through `PAIR`'s lock, before core 0 uses it (as `super::DeviceHandle`).
unsafe impl Send for Pair {}

/// The pair, taken by core 0.
static PAIR: spin::Mutex<Option<Pair>> = spin::Mutex::new(None);

/// Whether set-up built a mixed pair (core 0 then runs a [`MixedPort`] core).
static FOUND: spin::Once<bool> = spin::Once::new();

/// Whether this boot's ports are a mixed pair.
pub fn ports_are_mixed() -> bool {
    FOUND.get().copied().unwrap_or(false)
}

/// Core `k`'s two ports (core 0 only, once).
pub fn take_ports(k: usize) -> Option<[MixedPort; PORTS]> {
    if k != 0 {
        return None;
    }
    PAIR.lock().take().map(|p| p.0)
}

/// Bring up the one virtio-net function `virtio` and the one e1000e function `e1000e` found
/// (`(function, its ID)` lists, PCI scan order) as one port pair for core 0.
///
/// # Errors
/// [`SetupError::MixedNics`] unless one of each was found; `queues=N` > 1; a port's bring-up.
pub fn setup(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    virtio: &[(DeviceFunction, DeviceFunctionInfo)],
    e1000e: &[(DeviceFunction, DeviceFunctionInfo)],
) -> Result<Topology, SetupError> {
    let ([(vdf, _)], [(edf, _)]) = (virtio, e1000e) else {
        return Err(SetupError::MixedNics(virtio.len(), e1000e.len()));
    };
    if let Queues::Count(n) = cfg.queues {
        if n > 1 {
            let mut s = heapless::String::new();
            let _ = core::fmt::write(
                &mut s,
                format_args!("queues={n}: a virtio-net + e1000e pair runs one queue pair per port"),
            );
            return Err(SetupError::Queues(s));
        }
    }
    let key = |df: &DeviceFunction| (df.bus, df.device, df.function);
    let v = usize::from(key(edf) < key(vdf));
    let e = 1 - v;
    let vnic = virtio_port(root, v, *vdf)?;
    let enic = e1000e_port::<OFFSET>(cfg, root, e, e, *edf)?;
    info!(
        "port {v}: {vdf} virtio-net MAC {} queues 2x{QUEUE_SIZE} negotiated {} (cpu 0, polled); port {e}: {edf} e1000e (82574L) MAC {} link up, legacy rings 2x{}, frames at {OFFSET} (cpu 0, polled)",
        MacAddr(vnic.mac()),
        FeatureNames(vnic.features()),
        MacAddr(enic.mac()),
        drivers::nic::RING_SIZE,
    );
    info!("mixed pair: the staged burst between the drivers; frames of one buffer only");
    let (vp, ep) = (EitherNic::A(vnic), EitherNic::B(enic));
    *PAIR.lock() = Some(Pair(if v == 0 { [vp, ep] } else { [ep, vp] }));
    FOUND.call_once(|| true);
    Ok(Topology {
        pairs: 1,
        queues: 1,
        port_pairs: 1,
    })
}

/// Port `i`, a virtio-net function `df`: single queue, doorbells from its notify capability,
/// no interrupt routed (the core polls).
fn virtio_port(
    root: &mut PciRoot<PciCam>,
    i: usize,
    df: DeviceFunction,
) -> Result<super::Nic, SetupError> {
    // SAFETY: a virtio-net function found by the scan that only this port drives; its BARs are
    // MMIO the HAL maps.
    let transport = unsafe { pci_port::<KernelHal>(root, df) }
        .map_err(|e| port_error(i, Some(df), format_args!("virtio PCI transport: {e}")))?;
    let notify = transport.notify_cfg();
    let mut nic = VirtioNet::new(transport)
        .map_err(|e| port_error(i, Some(df), format_args!("virtio-net init: {e}")))?;
    if let Some(n) = notify.or_else(|| virtio_notify_cfg(df)) {
        // SAFETY: set-up time, on the boot CPU before core 0 gets the port; the BARs lie below
        // 4 GiB (identity-mapped, checked by the HAL when the transport mapped them) and belong
        // to this device.
        unsafe { nic.set_doorbells(n.doorbell(0), n.doorbell(1)) };
    }
    Ok(nic)
}
