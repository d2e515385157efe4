//! Device set-up on the boot CPU: find the virtio-net ports on PCI (or take the virtio-mmio
//! ones the command line names), choose the queue pairs,
//! initialise every device and route each RX queue's MSI-X entry to the core that will own it.
//! The result is a typed device set: a [`Topology`] and, per core, its two [`DeviceHandle`]s, taken by
//! that core with [`take_devices`].
//!
//! Why everything on the boot CPU: PCI set-up (memory decode, MSI-X enable) makes QEMU rebuild
//! its memory map, and QEMU 7.2 under multi-threaded TCG crashes (SIGSEGV in
//! `memory_region_dispatch_read`) when one vCPU does that while another reads device or port
//! I/O, as the boot CPU does once its own pair forwards (seen in about 1 boot in 6 with 2 CPUs
//! and 4 ports on a loaded host). Doing all of it before any core forwards avoids it.

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod acl;
pub mod e1000e;
pub mod fib;
pub mod fib6;
pub mod firewall;
pub mod igb;
pub mod mixed;
pub mod nat;
pub mod nf_files;

use crate::arch::apic;
use crate::arch::time::Deadline;
use crate::mem::KernelHal;
use crate::percpu::{CPUS, MAX_CPUS};
use core::sync::atomic::Ordering;
use drivers::pci::{
    find_nics, msix_route, virtio_notify_cfg, PciCam, MAX_NICS, VIRTIO_MSI_NO_VECTOR,
};
use drivers::transport::{pci_port, PortTransport};
use drivers::virtio_net::{FeatureNames, VirtioNet, MAX_QUEUE_PAIRS, QUEUE_SIZE};
use log::{debug, info, warn};
use netstack::config::PORTS;
use netstack::{Config, IdleMode, MacAddr, Mode, Queues, MAX_QUEUES};
use virtio_drivers::transport::pci::bus::{DeviceFunction, PciRoot};

/// A port's driver in the kernel: virtio-net over QEMU's PCI transport, or (`sim=K`, the
/// deterministic benchmark) over the simulated device.
pub type Nic = VirtioNet<KernelHal, PortTransport<'static>>;

/// How long the boot CPU waits for `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` to be acknowledged: 1 s.
const CTRL_TIMEOUT_MS: u64 = 1000;

/// Why set-up failed (a boot error: the caller prints it and exits).
#[derive(Debug)]
pub enum SetupError {
    /// Fewer than two virtio-net ports.
    TooFewPorts(usize),
    /// Too few ports (how many were found) and a PCI-to-PCI bridge (its function, the secondary
    /// bus number it holds) whose secondary bus the firmware did not number: the devices
    /// behind it cannot be reached ([`drivers::pci::scan`]).
    UnnumberedBridge(usize, DeviceFunction, u8),
    /// Port `i` failed (its PCI function, if on PCI; what failed).
    Port(usize, Option<DeviceFunction>, heapless::String<160>),
    /// `queues=N` cannot be had.
    Queues(heapless::String<200>),
    /// Both virtio-net and e1000e ports (how many of each), other than one of each (the one
    /// mixed pair [`mixed`] runs).
    MixedNics(usize, usize),
    /// igb ports beside ports of another driver (igb, virtio-net, e1000e): not paired.
    IgbMixed(usize, usize, usize),
}

impl core::fmt::Display for SetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetupError::TooFewPorts(n) => write!(
                f,
                "need {PORTS} virtio-net ports, found {n} (add -device virtio-net-pci,… per port)"
            ),
            SetupError::UnnumberedBridge(n, df, secondary) => write!(
                f,
                "need {PORTS} virtio-net ports, found {n}; PCI bridge {df} has no usable \
                 secondary bus number ({secondary}: firmware did not assign one), so the \
                 devices behind it were not scanned"
            ),
            SetupError::Port(i, Some(df), why) => write!(f, "port {i} ({df}): {why}"),
            SetupError::Port(i, None, why) => write!(f, "port {i}: {why}"),
            SetupError::Queues(why) => write!(f, "config error: {why}"),
            SetupError::IgbMixed(i, v, e) => write!(
                f,
                "mixed NICs: {i} igb, {v} virtio-net and {e} e1000e ports; igb ports run only with igb ports"
            ),
            SetupError::MixedNics(v, e) => write!(
                f,
                "mixed NICs: {v} virtio-net and {e} e1000e ports; a boot runs ports of one driver, or one virtio-net and one e1000e port as its one pair"
            ),
        }
    }
}

/// A [`SetupError::Port`] for port `i` (on PCI function `df`, if any).
pub fn port_error(
    i: usize,
    df: Option<DeviceFunction>,
    args: core::fmt::Arguments<'_>,
) -> SetupError {
    let mut s = heapless::String::new();
    let _ = core::fmt::write(&mut s, args);
    SetupError::Port(i, df, s)
}

fn port_err(i: usize, df: DeviceFunction, args: core::fmt::Arguments<'_>) -> SetupError {
    port_error(i, Some(df), args)
}

/// A device handle (a whole single-queue device, or one queue pair of a multi-queue device) on
/// its way from the boot CPU to the core that owns it.
pub struct DeviceHandle {
    /// The driver.
    pub nic: Nic,
    /// Its RX queue's MSI-X entry is routed to the owning core (else that core polls).
    pub routed: bool,
}

// SAFETY: a handle owns its rings and pages outright (no state shared with other handles but
// the device itself, whose registers it touches only through its own doorbells); the raw
// doorbell pointers are MMIO addresses valid on every core. It is moved once, from the boot
// CPU to its owner, through `DEVICES`' lock, before the owner uses it.
unsafe impl Send for DeviceHandle {}

/// What set-up found and built.
#[derive(Copy, Clone, Debug)]
pub struct Topology {
    /// Forwarding cores (cores `0..pairs`), one port pair or queue pair each.
    pub pairs: usize,
    /// Queue pairs per port: 1, or (multi-queue) `pairs`.
    pub queues: usize,
    /// Port pairs in use (1 with multi-queue: the cores share ports 0 and 1).
    pub port_pairs: usize,
}

/// The handles, `[core][port]`, each taken by its core.
static DEVICES: spin::Mutex<[[Option<DeviceHandle>; PORTS]; MAX_CPUS]> =
    spin::Mutex::new([const { [const { None }; PORTS] }; MAX_CPUS]);

/// Leave core `k`'s two port handles for it (set-up on the boot CPU).
pub fn stash_devices(k: usize, handles: [DeviceHandle; PORTS]) {
    let mut d = DEVICES.lock();
    for (slot, h) in d[k].iter_mut().zip(handles) {
        *slot = Some(h);
    }
}

/// Core `k`'s two port handles (once; `None` if set-up made none for it).
pub fn take_devices(k: usize) -> Option<[DeviceHandle; PORTS]> {
    let mut d = DEVICES.lock();
    let slot = d.get_mut(k)?;
    if slot.iter().any(Option::is_none) {
        return None;
    }
    Some(core::array::from_fn(|j| slot[j].take().expect("checked")))
}

/// The Intel ports `nics` holds, set up (`None`: none, the virtio-net set-up follows): igb
/// ports alone, e1000e ports alone or one e1000e beside one virtio-net port (`found`); other
/// igb-family functions are named in the log, not bound.
///
/// # Errors
/// (In the `Some`.) [`SetupError::IgbMixed`], [`SetupError::UnnumberedBridge`], or the
/// driver set-up's.
fn setup_intel(
    cfg: &Config,
    cpus: usize,
    root: &mut PciRoot<PciCam>,
    nics: &drivers::pci::FoundNics,
) -> Option<Result<Topology, SetupError>> {
    let found = &nics.virtio;
    for &(df, id) in &nics.unbound {
        let name = drivers::igb::unbound_family_name(id).unwrap_or("igb family");
        warn!("pci: {df} Intel {name} (8086:{id:04x}): not bound (the igb driver binds the 82576, 8086:10c9)");
    }
    if !nics.igb.is_empty() {
        info!("pci: igb (8086:10c9) at {}", DfList(&nics.igb));
        if !found.is_empty() || !nics.e1000e.is_empty() {
            return Some(Err(SetupError::IgbMixed(
                nics.igb.len(),
                found.len(),
                nics.e1000e.len(),
            )));
        }
        if let (Some((df, secondary)), true) =
            (nics.report.first_bad_bridge, nics.igb.len() < PORTS)
        {
            return Some(Err(SetupError::UnnumberedBridge(
                nics.igb.len(),
                df,
                secondary,
            )));
        }
        return Some(igb::setup(cfg, cpus, root, &nics.igb));
    }
    if !nics.e1000e.is_empty() {
        info!("pci: e1000e (8086:10d3) at {}", DfList(&nics.e1000e));
        if !found.is_empty() {
            return Some(mixed::setup(cfg, root, found, &nics.e1000e));
        }
        if let (Some((df, secondary)), true) =
            (nics.report.first_bad_bridge, nics.e1000e.len() < PORTS)
        {
            return Some(Err(SetupError::UnnumberedBridge(
                nics.e1000e.len(),
                df,
                secondary,
            )));
        }
        return Some(e1000e::setup(cfg, cpus, root, &nics.e1000e));
    }
    None
}

/// Find the ports and set up every device for `cpus` online CPUs.
///
/// # Errors
/// [`SetupError`] naming the port and what failed, or the impossible `queues=`.
pub fn setup_devices(cfg: &Config, cpus: usize) -> Result<Topology, SetupError> {
    if !cfg.virtio_mmio.is_empty() {
        return setup_mmio(cfg, cpus);
    }
    let mut root = PciRoot::new(PciCam);
    let nics = find_nics(&mut root);
    let (buses, bridges) = (nics.report.buses, nics.report.bridges);
    if nics.virtio.is_empty() {
        info!("pci: {buses} buses scanned, {bridges} bridges; no virtio-net");
    } else {
        info!(
            "pci: {buses} buses scanned, {bridges} bridges; virtio-net at {}",
            DfList(&nics.virtio)
        );
    }
    if let Some(topo) = setup_intel(cfg, cpus, &mut root, &nics) {
        return topo;
    }
    let (found, ignored, scan) = (nics.virtio, nics.ignored, nics.report);
    if let Some((df, secondary)) = scan.first_bad_bridge {
        warn!(
            "pci: {} bridges with no usable secondary bus number (first {df}: {secondary}); \
             not scanned behind",
            scan.bad_bridges
        );
        if found.len() < PORTS {
            return Err(SetupError::UnnumberedBridge(found.len(), df, secondary));
        }
    }
    if found.len() < PORTS {
        return Err(SetupError::TooFewPorts(found.len()));
    }
    let dfs: heapless::Vec<DeviceFunction, MAX_NICS> = found.iter().map(|(df, _)| *df).collect();
    // Multi-queue: one queue pair of each of ports 0 and 1 per core (in router mode too: one
    // router per core over one FIB).
    let queues = choose_queues(cfg, &mut root, &dfs, cpus)?;
    // Else one port pair per core (router mode: one pair; its two ports are the router's).
    let (pairs, nics_used) = if queues > 1 {
        (queues, PORTS)
    } else if cfg.mode == Mode::Router {
        (1, PORTS)
    } else {
        let p = (found.len() / PORTS).min(cpus).max(1);
        (p, p * PORTS)
    };
    if found.len() > nics_used || ignored > 0 {
        warn!(
            "{} virtio-net functions found; using the first {} ({} pairs on {} CPUs)",
            found.len() + ignored,
            nics_used,
            pairs,
            cpus
        );
    }
    if queues > 1 {
        setup_mq(cfg, &mut root, &dfs, queues)?;
    } else {
        setup_single_queue(cfg, &mut root, &dfs, pairs)?;
    }
    Ok(Topology {
        pairs,
        queues,
        port_pairs: if queues > 1 { 1 } else { pairs },
    })
}

/// virtio-mmio (`virtio_mmio.device=` on the command line, QEMU microvm): one device per
/// entry, in the order given, single-queue, polled (no MSI-X on MMIO; the IOAPIC line is not
/// used), kicked through the transport's QueueNotify write (VIRTIO 1.2 §4.2.2, 0x050). Ports
/// `2k`, `2k + 1` go to core `k`, as on PCI.
fn setup_mmio(cfg: &Config, cpus: usize) -> Result<Topology, SetupError> {
    let found = cfg.virtio_mmio.len();
    if found < PORTS {
        return Err(SetupError::TooFewPorts(found));
    }
    if let Queues::Count(n) = cfg.queues {
        if n > 1 {
            let mut s = heapless::String::new();
            let _ = core::fmt::write(
                &mut s,
                format_args!("queues={n}: multi-queue is not supported on virtio-mmio ports"),
            );
            return Err(SetupError::Queues(s));
        }
    }
    let pairs = if cfg.mode == Mode::Router {
        1
    } else {
        (found / PORTS).min(cpus).max(1)
    };
    if found > pairs * PORTS {
        warn!(
            "{found} virtio-mmio devices given; using the first {} ({pairs} pairs on {cpus} CPUs)",
            pairs * PORTS
        );
    }
    if cfg.idle == IdleMode::Halt {
        info!("virtio-mmio: no MSI-X; the cores poll their queues (idle=poll semantics)");
    }
    let mut stash = DEVICES.lock();
    for k in 0..pairs {
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let d = cfg.virtio_mmio[i];
            // SAFETY: the command line (the VMM) names this block as a virtio-mmio device;
            // nothing else in the kernel drives it, and the boot CPU is the only CPU running.
            let t = unsafe { drivers::mmio::virtio_mmio_net::<KernelHal>(d.addr, d.size as usize) }
                .map_err(|e| {
                    port_error(
                        i,
                        None,
                        format_args!("virtio-mmio {}@{:#x}: {e}", d.size, d.addr),
                    )
                })?;
            let nic = VirtioNet::new(t.into()).map_err(|e| {
                port_error(
                    i,
                    None,
                    format_args!("virtio-mmio {}@{:#x}: virtio-net init: {e}", d.size, d.addr),
                )
            })?;
            info!(
                "port {i}: virtio-mmio {}@{:#x} irq {} virtio-net MAC {} queues 2x{QUEUE_SIZE} negotiated {} (cpu {k}, polled)",
                d.size,
                d.addr,
                d.irq,
                MacAddr(nic.mac()),
                FeatureNames(nic.features())
            );
            log_offered(i, &nic);
            stash[k][j] = Some(DeviceHandle { nic, routed: false });
        }
    }
    Ok(Topology {
        pairs,
        queues: 1,
        port_pairs: pairs,
    })
}

/// Multi-queue: how many queue pairs per port to use, from `queues=` (see
/// [`netstack::Queues`]), the CPUs online and what ports 0 and 1 offer.
fn choose_queues(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    ports: &[DeviceFunction],
    cpus: usize,
) -> Result<usize, SetupError> {
    let want = match cfg.queues {
        Queues::Count(n) => usize::from(n),
        Queues::Auto
            if matches!(cfg.mode, Mode::Router | Mode::Nat | Mode::Firewall) || cpus == 1 =>
        {
            return Ok(1)
        }
        Queues::Auto => cpus.min(MAX_QUEUES),
    };
    if want == 1 {
        return Ok(1);
    }
    let mut offered = usize::MAX;
    for (i, df) in ports.iter().take(PORTS).enumerate() {
        // A transport only to read features and config; dropping it resets the untouched device.
        // SAFETY: a virtio-net function found on bus 0 that nothing else drives; its BARs are
        // MMIO the HAL maps.
        let mut t = unsafe { pci_port::<KernelHal>(root, *df) }
            .map_err(|e| port_err(i, *df, format_args!("virtio PCI transport: {e}")))?;
        offered = offered.min(usize::from(Nic::probe_queue_pairs(&mut t)));
    }
    let have = offered.min(cpus).min(MAX_QUEUE_PAIRS);
    match cfg.queues {
        Queues::Count(_) if want > have => {
            let mut s = heapless::String::new();
            let _ = core::fmt::write(&mut s, format_args!(
                "queues={want}: the ports offer {offered} queue pair(s) (VIRTIO_NET_F_MQ; QEMU: --backend tap --queues N) and {cpus} CPU(s) are online; the virtio-net driver takes at most {MAX_QUEUE_PAIRS}"
            ));
            Err(SetupError::Queues(s))
        }
        Queues::Count(_) => Ok(want),
        Queues::Auto => Ok(have.min(want).max(1)),
    }
}

/// Why an RX queue's interrupt could not be routed (the core then polls).
#[derive(Debug)]
pub enum IrqRouteError {
    /// The MSI-X table could not be programmed.
    #[allow(dead_code)] // printed through Debug
    Msix(drivers::pci::MsixError),
    /// The device refused the queue's MSI-X vector (VIRTIO 1.2 §4.1.5.1.2: it reads back
    /// `VIRTIO_MSI_NO_VECTOR`).
    VectorRefused,
}

/// Route RX queue `rxq`'s MSI-X entry `entry` to the CPU with `apic_id`, vector
/// `DEVICE_VECTOR_BASE + port`, and keep TX queue `txq` silent (completions never interrupt).
///
/// # Safety
/// Set-up time, on the boot CPU only, for a device whose BARs lie in the identity map.
unsafe fn route_rx_irq(
    df: DeviceFunction,
    n: &drivers::pci::VirtioNotifyCfg,
    (rxq, txq): (u16, u16),
    entry: u16,
    apic_id: u32,
    port: usize,
) -> Result<(), IrqRouteError> {
    let vector = u32::from(apic::DEVICE_VECTOR_BASE) + port as u32;
    // SAFETY: per this function's contract.
    unsafe { msix_route(df, entry, apic::msi_address(apic_id), vector) }
        .map_err(IrqRouteError::Msix)?;
    // SAFETY: per this function's contract.
    let ok = unsafe {
        n.set_queue_vector(rxq, entry) == entry
            && n.set_queue_vector(txq, VIRTIO_MSI_NO_VECTOR) == VIRTIO_MSI_NO_VECTOR
    };
    if ok {
        Ok(())
    } else {
        Err(IrqRouteError::VectorRefused)
    }
}

/// Multi-queue: bring up ports 0 and 1 with `queues` queue pairs each (the device's common
/// configuration is one register file, so one CPU programs it): doorbells and each RX queue's
/// MSI-X entry routed to the core that will own the pair (entry `k` for pair `k`).
fn setup_mq(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    ports: &[DeviceFunction],
    queues: usize,
) -> Result<(), SetupError> {
    let mut stash = DEVICES.lock();
    for (j, df) in ports.iter().take(PORTS).enumerate() {
        // SAFETY: as in `choose_queues` (the probe's transport is dropped).
        let transport = unsafe { pci_port::<KernelHal>(root, *df) }
            .map_err(|e| port_err(j, *df, format_args!("virtio PCI transport: {e}")))?;
        let notify = transport.notify_cfg();
        let deadline = Deadline::after_ms(CTRL_TIMEOUT_MS);
        let handles = Nic::new_mq(transport, queues as u16, || deadline.expired())
            .map_err(|e| port_err(j, *df, format_args!("virtio-net multi-queue init: {e}")))?;
        let n = notify.or_else(|| virtio_notify_cfg(*df)).ok_or_else(|| {
            port_err(
                j,
                *df,
                format_args!("multi-queue needs the virtio notify capability (doorbells)"),
            )
        })?;
        for (k, mut nic) in handles.into_iter().enumerate() {
            let qs = nic.queue_indices();
            let apic_id = CPUS[k].apic_id.load(Ordering::Acquire);
            // SAFETY: set-up time, on the boot CPU only (the other cores get their handles
            // afterwards); the BARs lie below 4 GiB (identity-mapped, checked by the HAL when
            // the transport mapped them) and belong to this device.
            let routed = unsafe {
                nic.set_doorbells(n.doorbell(qs.0), n.doorbell(qs.1));
                cfg.idle == IdleMode::Halt
                    && route_rx_irq(*df, &n, qs, k as u16, apic_id, j)
                        .map_err(|e| warn!("port {j} queue pair {k}: MSI-X: {e:?}"))
                        .is_ok()
            };
            if k == 0 {
                info!(
                    "port {j}: {df} multi-queue: {} of {} queue pairs active (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET acked)",
                    nic.active_queue_pairs(),
                    nic.max_queue_pairs()
                );
            }
            stash[k][j] = Some(DeviceHandle { nic, routed });
        }
    }
    Ok(())
}

/// Single-queue: bring up every port's device, ports `2k`, `2k + 1` for core `k`: transport,
/// feature negotiation, virtqueues, doorbells, and the RX queue's MSI-X entry 0 routed to core
/// `k`.
fn setup_single_queue(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    ports: &[DeviceFunction],
    pairs: usize,
) -> Result<(), SetupError> {
    let mut stash = DEVICES.lock();
    for k in 0..pairs {
        let apic_id = CPUS[k].apic_id.load(Ordering::Acquire);
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let df = ports[i];
            // SAFETY: a virtio-net function found on bus 0 that only this port drives; its
            // BARs are MMIO the HAL maps.
            let transport = unsafe { pci_port::<KernelHal>(root, df) }
                .map_err(|e| port_err(i, df, format_args!("virtio PCI transport: {e}")))?;
            // The transport's own capability walk found the doorbells (a second walk only for
            // the virtio-drivers fallback transport).
            let notify = transport.notify_cfg();
            let mut nic = VirtioNet::new(transport)
                .map_err(|e| port_err(i, df, format_args!("virtio-net init: {e}")))?;
            let routed = match notify.or_else(|| virtio_notify_cfg(df)) {
                // SAFETY: set-up time, on the boot CPU before the owner gets the handle; the
                // BARs lie below 4 GiB (identity-mapped, checked by the HAL when the transport
                // mapped them) and belong to this device.
                Some(n) => unsafe {
                    nic.set_doorbells(n.doorbell(0), n.doorbell(1));
                    let routed = cfg.idle == IdleMode::Halt
                        && route_rx_irq(df, &n, (0, 1), 0, apic_id, j)
                            .map_err(|e| warn!("port {i}: MSI-X: {e:?}"))
                            .is_ok();
                    if cfg.idle == IdleMode::Halt && !routed {
                        warn!(
                            "port {i}: RX interrupt not available; idle=halt falls back to polling"
                        );
                    }
                    routed
                },
                None => {
                    warn!("port {i}: notify capability not found; kicks use the transport");
                    false
                }
            };
            info!(
                "port {i}: {df} virtio-net MAC {} queues 2x{QUEUE_SIZE} negotiated {} (cpu {k})",
                MacAddr(nic.mac()),
                FeatureNames(nic.features())
            );
            log_offered(i, &nic);
            stash[k][j] = Some(DeviceHandle { nic, routed });
        }
    }
    Ok(())
}

/// The functions' bus:device.function, space-separated, for the boot log.
struct DfList<'a>(
    &'a [(
        DeviceFunction,
        virtio_drivers::transport::pci::bus::DeviceFunctionInfo,
    )],
);

impl core::fmt::Display for DfList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, (df, _)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{df}")?;
        }
        Ok(())
    }
}

/// The feature bits port `i`'s device offered, all of them (known or not), at debug level:
/// the info line names only what was negotiated.
fn log_offered(i: usize, nic: &Nic) {
    debug!(
        "port {i}: offered features {:#x}",
        nic.offered_features().bits()
    );
}
