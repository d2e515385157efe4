//! Intel 82574L ports (`-device e1000e`): bring-up of every e1000e function the PCI scan found
//! (behind bridges too), on the boot CPU, into a per-core device set of their own type
//! ([`E1000ePort`]); the cores that own them run a core monomorphised for it
//! (`run::run_e1000e`).
//!
//! A machine with both virtio-net and e1000e ports runs one pair of one port each
//! ([`super::mixed`]); any other mix stops the boot with [`super::SetupError::MixedNics`].
//! Single queue, busy polling: MSI-X is not wired (the cores never halt on these ports).

use super::{port_error, SetupError, Topology};
use crate::arch::time::uptime_us;
use crate::mem::KernelHal;
use crate::percpu::MAX_CPUS;
use core::ptr::NonNull;
use drivers::ddnic::DdNic;
use drivers::e1000e::{
    bring_up_at, E1000e, E1000eConfig, MmioRegs, RxFilter, BAR0_BYTES, MAX_MULTICAST,
};
use drivers::nic::Nic;
use drivers::pci::{e1000e_bar0, PciCam};
use log::{info, warn};
use netstack::config::PORTS;
use netstack::router::ndp;
use netstack::{Config, IdleMode, MacAddr, Mode, Queues};
use virtio_drivers::transport::pci::bus::{DeviceFunction, DeviceFunctionInfo, PciRoot};
use virtio_drivers::Hal;

/// A port on an 82574L: the DD-bit driver over the NIC's BAR 0.
pub type E1000ePort = E1000e<KernelHal, MmioRegs>;

/// The handles of one Intel NIC kind, `[core][port]`, each taken by its core, and whether set-up
/// found that kind (the cores then run cores monomorphised for it). Shared by the e1000e and
/// igb set-ups.
pub(super) struct PortStash<T> {
    devices: spin::Mutex<[[Option<T>; PORTS]; MAX_CPUS]>,
    found: spin::Once<bool>,
}

impl<T> PortStash<T> {
    /// Nothing found, nothing stashed.
    pub(super) const fn new() -> Self {
        PortStash {
            devices: spin::Mutex::new([const { [const { None }; PORTS] }; MAX_CPUS]),
            found: spin::Once::new(),
        }
    }

    /// Whether this boot's ports are of this kind.
    pub(super) fn found(&self) -> bool {
        self.found.get().copied().unwrap_or(false)
    }

    /// Core `k`'s two ports (once).
    pub(super) fn take(&self, k: usize) -> Option<[T; PORTS]> {
        let mut d = self.devices.lock();
        let slot = d.get_mut(k)?;
        if slot.iter().any(Option::is_none) {
            return None;
        }
        Some(core::array::from_fn(|j| slot[j].take().expect("checked")))
    }

    /// The slots, to fill at set-up.
    pub(super) fn lock(&self) -> spin::MutexGuard<'_, [[Option<T>; PORTS]; MAX_CPUS]> {
        self.devices.lock()
    }

    /// Set-up found this kind's ports.
    pub(super) fn mark_found(&self) {
        self.found.call_once(|| true);
    }
}

/// The e1000e handles.
static PORTS_E1000E: PortStash<E1000ePort> = PortStash::new();

/// Whether this boot's ports are e1000e ports.
pub fn ports_are_e1000e() -> bool {
    PORTS_E1000E.found()
}

/// Core `k`'s two e1000e ports (once).
pub fn take_ports(k: usize) -> Option<[E1000ePort; PORTS]> {
    PORTS_E1000E.take(k)
}

/// Bring up the e1000e functions `found` (PCI scan order) for `cpus` CPUs: ports `2k`,
/// `2k + 1` for core `k` (router mode: one pair).
///
/// # Errors
/// [`SetupError`]: too few ports, `queues=N` > 1, or a port's bring-up (the driver's named
/// error: reset, EEPROM, link, rings).
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
        "e1000e",
        "RSS over the 82574L's two queues is not driven",
    )?;
    let mut stash = PORTS_E1000E.lock();
    for k in 0..pairs {
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let (df, _) = found[i];
            let nic = port::<0>(cfg, root, i, j, df)?;
            info!(
                "port {i}: {df} e1000e (82574L) MAC {} link up at {} Mb/s, legacy rings 2x{}, RDT every {} buffers (cpu {k}, polled)",
                MacAddr(nic.mac()),
                drivers::nic::Nic::stats(&nic).link_speed_mbps.unwrap_or(0),
                drivers::nic::RING_SIZE,
                drivers::ddnic::RX_PUBLISH_BATCH,
            );
            stash[k][j] = Some(nic);
        }
    }
    PORTS_E1000E.mark_found();
    Ok(Topology {
        pairs,
        queues: 1,
        port_pairs: pairs,
    })
}

/// The pairs `found` single-queue Intel ports of driver `chip` make on `cpus` CPUs (router
/// mode: one), after the checks every such set-up makes (`why_one_queue`: why `queues=N` > 1
/// is refused).
///
/// # Errors
/// [`SetupError::TooFewPorts`], [`SetupError::Queues`].
pub(super) fn plan(
    cfg: &Config,
    cpus: usize,
    found: usize,
    chip: &str,
    why_one_queue: &str,
) -> Result<usize, SetupError> {
    if found < PORTS {
        return Err(SetupError::TooFewPorts(found));
    }
    if let Queues::Count(n) = cfg.queues {
        if n > 1 {
            let mut s = heapless::String::new();
            let _ = core::fmt::write(
                &mut s,
                format_args!("queues={n}: {chip} ports are single-queue here ({why_one_queue})"),
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
            "{found} {chip} functions found; using the first {} ({pairs} pairs on {cpus} CPUs)",
            pairs * PORTS
        );
    }
    if cfg.idle == IdleMode::Halt {
        info!("{chip}: RX interrupts (MSI-X) are not wired; the cores busy-poll these ports");
    }
    Ok(pairs)
}

/// The register block of port `i`'s Intel function `df` (driver `chip`): its BAR 0 mapped.
///
/// # Errors
/// [`SetupError::Port`] when BAR 0 is not an assigned memory BAR.
pub(super) fn map_regs(
    root: &mut PciRoot<PciCam>,
    i: usize,
    df: DeviceFunction,
    chip: &str,
) -> Result<MmioRegs, SetupError> {
    let bar = e1000e_bar0(root, df).ok_or_else(|| {
        port_error(
            i,
            Some(df),
            format_args!("{chip}: BAR 0 is not an assigned memory BAR"),
        )
    })?;
    // SAFETY: BAR 0 of an 82574L or 82576 nothing else drives, mapped uncached by the HAL for
    // its 128 KiB (the boot CPU, at set-up).
    let base: NonNull<u8> = unsafe { KernelHal::mmio_phys_to_virt(bar as _, BAR0_BYTES) };
    // SAFETY: as above; the mapping stays for the kernel's life.
    Ok(unsafe { MmioRegs::new(base) })
}

/// The bring-up settings of local port `j`: the mode's filter, the port's MTU as a frame, and
/// in router mode with the port's IPv6 address (`ip6_N=`) the multicast groups its Neighbor
/// Discovery needs: all-nodes, and the solicited-node groups of the global address, of the
/// Subnet-Router anycast address and of the link-local one (made from the MAC, which the
/// bring-up finds) (RFC 4861 §7.2.1; RFC 2464 §7 maps a group to its MAC).
pub(super) fn port_config(cfg: &Config, j: usize) -> E1000eConfig {
    let mtu = usize::from(cfg.mtu[j].unwrap_or(netstack::router::DEFAULT_MTU));
    let mut multicast = [None; MAX_MULTICAST];
    let ip6 = cfg.router.ip6[j].filter(|_| cfg.mode == Mode::Router);
    if let Some(a) = ip6 {
        // The Subnet-Router anycast address's group too, but on a /127 link (RFC 6164 §5).
        let anycast = (a.len < 127).then(|| ndp::solicited_node(a.addr & a.mask()));
        let groups = [ndp::ALL_NODES, ndp::solicited_node(a.addr)];
        for (slot, group) in multicast.iter_mut().zip(groups.into_iter().chain(anycast)) {
            *slot = Some(ndp::multicast_mac(group).0);
        }
    }
    E1000eConfig {
        filter: if cfg.mode == Mode::Router {
            RxFilter::Router
        } else {
            RxFilter::Promiscuous
        },
        max_frame: mtu + 14,
        multicast,
        link_local_group: ip6.is_some(),
    }
}

/// Port `i` (local port `j` of its pair) on function `df`, its frames `OFFSET` bytes into
/// their pages (0; 12 beside a virtio-net port, [`super::mixed`]).
pub(super) fn port<const OFFSET: usize>(
    cfg: &Config,
    root: &mut PciRoot<PciCam>,
    i: usize,
    j: usize,
    df: DeviceFunction,
) -> Result<DdNic<KernelHal, MmioRegs, OFFSET>, SetupError> {
    let regs = map_regs(root, i, df, "e1000e")?;
    let dcfg = port_config(cfg, j);
    bring_up_at::<KernelHal, _, OFFSET>(regs, &dcfg, uptime_us)
        .map_err(|e| port_error(i, Some(df), format_args!("{e}")))
}
