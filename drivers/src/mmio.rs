//! virtio over MMIO (VIRTIO 1.2 §4.2): probing one register block named on the command line
//! (`virtio_mmio.device=SIZE@ADDR:IRQ`, as QEMU's `-machine microvm,acpi=off` and
//! Firecracker-class VMMs pass it) and handing it to `virtio-drivers`' [`MmioTransport`],
//! which implements every [`virtio_drivers::transport::Transport`] method over the §4.2.2
//! register layout (MagicValue 0x000, Version 0x004, DeviceID 0x008, …, QueueNotify 0x050,
//! Status 0x070, Config 0x100).
//!
//! Only the modern layout (Version 2, §4.2.2) is driven: our split virtqueue places the three
//! ring parts at independent addresses (QueueDescLow/High 0x080, QueueDriverLow/High 0x090,
//! QueueDeviceLow/High 0x0a0), which the legacy layout (Version 1, §4.2.4: one QueuePFN) cannot
//! express. QEMU's virtio-mmio transports are legacy unless started with
//! `-global virtio-mmio.force-legacy=false`.
//!
//! The register block is touched only through `virtio-drivers`' `safe-mmio` pointers; the one
//! `unsafe` here is the promise that the address really is such a block, mapped uncached.

use virtio_drivers::transport::mmio::{MmioError, MmioTransport, MmioVersion, VirtIOHeader};
use virtio_drivers::transport::{DeviceType, Transport};
use virtio_drivers::Hal;

/// Why a `virtio_mmio.device=` block cannot be a virtio-net port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MmioProbeError {
    /// `virtio-drivers` refused the block: no virtio magic at the address (§4.2.2 MagicValue
    /// 0x74726976 "virt": nothing there), an unknown version, or DeviceID 0 (§4.2.3.1.1: a
    /// transport with no device behind it, as QEMU microvm's unused slots read).
    Transport(MmioError),
    /// A virtio device, but not a network device (§5: DeviceID 1).
    NotNet(DeviceType),
    /// A legacy (Version 1, §4.2.4) transport: not supported (see the module documentation).
    Legacy,
}

impl core::fmt::Display for MmioProbeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MmioProbeError::Transport(e) => write!(f, "not a virtio-mmio device: {e}"),
            MmioProbeError::NotNet(t) => write!(f, "virtio device type {t:?}, not a network device"),
            MmioProbeError::Legacy => write!(
                f,
                "legacy virtio-mmio (Version 1, VIRTIO 1.2 §4.2.4) is not supported; QEMU: -global virtio-mmio.force-legacy=false"
            ),
        }
    }
}

/// The virtio-mmio transport of the virtio-net device at physical `addr`, `size` bytes
/// (`size` ≥ 0x100, the register block before the configuration space, §4.2.2). Maps the block
/// through `H::mmio_phys_to_virt`, then checks MagicValue, Version (2) and DeviceID (1, net).
/// Reading those registers has no side effect on the device (§4.2.2: read-only registers).
///
/// # Errors
/// [`MmioProbeError`]: nothing virtio there, a legacy transport, or another device type.
///
/// # Safety
/// `addr..addr + size` must be a virtio-mmio register block (the platform said so: the
/// command line's `virtio_mmio.device=`) that nothing else drives, for the rest of the run.
pub unsafe fn virtio_mmio_net<H: Hal>(
    addr: u64,
    size: usize,
) -> Result<MmioTransport<'static>, MmioProbeError> {
    // SAFETY: per this function's contract, the range is MMIO the HAL may map.
    let base = unsafe { H::mmio_phys_to_virt(addr, size) };
    // SAFETY: the block is a virtio-mmio register block (this function's contract) of `size`
    // bytes, mapped by the HAL for the rest of the run; 4-byte aligned (checked by the
    // command-line parser), as `VirtIOHeader`'s 32-bit registers need.
    let t = unsafe { MmioTransport::new(base.cast::<VirtIOHeader>(), size) }
        .map_err(MmioProbeError::Transport)?;
    if t.version() != MmioVersion::Modern {
        return Err(MmioProbeError::Legacy);
    }
    match t.device_type() {
        DeviceType::Network => Ok(t),
        other => Err(MmioProbeError::NotNet(other)),
    }
}
