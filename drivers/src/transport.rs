//! [`PortTransport`]: the transport behind one port, a real virtio PCI or MMIO device or the
//! simulated device of [`crate::sim`], so one driver type (`VirtioNet<H, PortTransport>`)
//! drives all of them; [`pci_port`] builds a PCI port's.
//!
//! Every [`Transport`] method is delegated to the variant. The hot path does not go through
//! here on the PCI variant (kicks use cached doorbells, `VirtioNet::set_doorbells`); on the
//! simulated variant a kick is [`SimTransport::notify`]'s counter.

use crate::pci::{enable_memory_decoding, virtio_pci_transport, PciCam, VirtioNotifyCfg};
use crate::sim::SimTransport;
use crate::virtio_pci::{VirtioPciConfigError, VirtioPciTransport};
use virtio_drivers::transport::mmio::MmioTransport;
use virtio_drivers::transport::pci::bus::{DeviceFunction, PciRoot};
use virtio_drivers::transport::pci::{PciTransport, VirtioPciError};
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::{Hal, PhysAddr};

/// A port's transport: virtio over PCI (§4.1) or MMIO (§4.2), or the simulated device
/// (in-memory rings only).
pub enum PortTransport<'a> {
    /// A virtio PCI device at the BARs firmware assigned ([`crate::virtio_pci`]).
    VirtioPci(VirtioPciTransport),
    /// A virtio PCI device through `virtio-drivers`' transport, which sizes its BARs: the
    /// fallback of [`pci_port`] when a BAR has no address.
    Pci(PciTransport),
    /// A virtio-mmio device (§4.2; [`crate::mmio::virtio_mmio_net`]). Kicks go through
    /// [`Transport::notify`]: one 32-bit write of the queue index to QueueNotify (0x050).
    Mmio(MmioTransport<'a>),
    /// The simulated device ([`crate::sim`]), e.g. for the guest's deterministic benchmark.
    Sim(SimTransport<'a>),
}

impl PortTransport<'_> {
    /// The doorbell and common-configuration addresses of a [`PortTransport::VirtioPci`]
    /// device, known from its capability walk; `None` for the others (a PCI caller then walks
    /// the capabilities: [`crate::pci::virtio_notify_cfg`]).
    pub fn notify_cfg(&self) -> Option<VirtioNotifyCfg> {
        match self {
            PortTransport::VirtioPci(t) => Some(t.notify_cfg()),
            _ => None,
        }
    }
}

impl From<VirtioPciTransport> for PortTransport<'_> {
    fn from(t: VirtioPciTransport) -> Self {
        PortTransport::VirtioPci(t)
    }
}

impl From<PciTransport> for PortTransport<'_> {
    fn from(t: PciTransport) -> Self {
        PortTransport::Pci(t)
    }
}

impl<'a> From<MmioTransport<'a>> for PortTransport<'a> {
    fn from(t: MmioTransport<'a>) -> Self {
        PortTransport::Mmio(t)
    }
}

impl<'a> From<SimTransport<'a>> for PortTransport<'a> {
    fn from(t: SimTransport<'a>) -> Self {
        PortTransport::Sim(t)
    }
}

/// Why a PCI function could not become a port's transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PciPortError {
    /// The capability walk refused the function ([`VirtioPciTransport::new`]).
    Config(VirtioPciConfigError),
    /// A BAR had no address and `virtio-drivers`' sizing path failed too.
    Sized(VirtioPciConfigError, VirtioPciError),
}

impl core::fmt::Display for PciPortError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PciPortError::Config(e) => write!(f, "{e}"),
            PciPortError::Sized(e, sized) => write!(f, "{e}; sizing the BARs: {sized}"),
        }
    }
}

/// The transport of virtio PCI function `df` (found by [`crate::pci::find_virtio_net`]): a
/// [`VirtioPciTransport`] at the BARs firmware assigned, memory decoding turned on if it was
/// off; if a BAR the capabilities name has no address, `virtio-drivers`' `PciTransport`
/// ([`virtio_pci_transport`], which sizes the BARs) instead.
///
/// # Errors
/// [`PciPortError`]: not a modern virtio device, or a malformed or unassigned structure.
///
/// # Safety
/// `df` must be a virtio function nothing else drives, for the rest of the run; its BARs'
/// addresses must be MMIO that `H::mmio_phys_to_virt` may map.
pub unsafe fn pci_port<H: Hal>(
    root: &mut PciRoot<PciCam>,
    df: DeviceFunction,
) -> Result<PortTransport<'static>, PciPortError> {
    // SAFETY: per this function's contract; decoding is turned on just below, before any
    // register of the structures is touched.
    match unsafe { VirtioPciTransport::new::<H>(df) } {
        Ok(t) => {
            enable_memory_decoding(root, df);
            Ok(t.into())
        }
        Err(e @ VirtioPciConfigError::BarUnassigned(_)) => virtio_pci_transport::<H>(root, df)
            .map(Into::into)
            .map_err(|sized| PciPortError::Sized(e, sized)),
        Err(e) => Err(PciPortError::Config(e)),
    }
}

/// `match self { VirtioPci(t) => t.$call, Pci(t) => t.$call, Mmio(t) => t.$call, Sim(t) => t.$call }`.
macro_rules! delegate {
    ($self:ident, $t:ident => $call:expr) => {
        match $self {
            PortTransport::VirtioPci($t) => $call,
            PortTransport::Pci($t) => $call,
            PortTransport::Mmio($t) => $call,
            PortTransport::Sim($t) => $call,
        }
    };
}

impl Transport for PortTransport<'_> {
    fn device_type(&self) -> DeviceType {
        delegate!(self, t => t.device_type())
    }

    fn read_device_features(&mut self) -> u64 {
        delegate!(self, t => t.read_device_features())
    }

    fn write_driver_features(&mut self, driver_features: u64) {
        delegate!(self, t => t.write_driver_features(driver_features))
    }

    fn max_queue_size(&mut self, queue: u16) -> u32 {
        delegate!(self, t => t.max_queue_size(queue))
    }

    fn notify(&mut self, queue: u16) {
        delegate!(self, t => t.notify(queue))
    }

    fn get_status(&self) -> DeviceStatus {
        delegate!(self, t => t.get_status())
    }

    fn set_status(&mut self, status: DeviceStatus) {
        delegate!(self, t => t.set_status(status))
    }

    fn set_guest_page_size(&mut self, guest_page_size: u32) {
        delegate!(self, t => t.set_guest_page_size(guest_page_size))
    }

    fn requires_legacy_layout(&self) -> bool {
        delegate!(self, t => t.requires_legacy_layout())
    }

    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        delegate!(self, t => t.queue_set(queue, size, descriptors, driver_area, device_area))
    }

    fn queue_unset(&mut self, queue: u16) {
        delegate!(self, t => t.queue_unset(queue))
    }

    fn queue_used(&mut self, queue: u16) -> bool {
        delegate!(self, t => t.queue_used(queue))
    }

    fn ack_interrupt(&mut self) -> InterruptStatus {
        delegate!(self, t => t.ack_interrupt())
    }

    fn read_config_generation(&self) -> u32 {
        delegate!(self, t => t.read_config_generation())
    }

    fn read_config_space<T: zerocopy::FromBytes + zerocopy::IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<T> {
        delegate!(self, t => t.read_config_space(offset))
    }

    fn write_config_space<T: zerocopy::IntoBytes + zerocopy::Immutable>(
        &mut self,
        offset: usize,
        value: T,
    ) -> virtio_drivers::Result<()> {
        delegate!(self, t => t.write_config_space(offset, value))
    }
}
