//! virtio over PCI, modern layout (VIRTIO 1.2 §4.1), at the BARs the firmware assigned:
//! [`VirtioPciTransport`] finds the virtio structures through the function's vendor-specific
//! capabilities (§4.1.4) and reads the BAR registers they name, without sizing the BARs and
//! with the function's decoding left as it is.
//!
//! Why not `virtio-drivers`' `PciTransport::new`: it sizes each BAR a capability names (write
//! all-ones, read back, restore: PCI 3.0 §6.2.5.1) and turns decoding off and on around each
//! one. Under QEMU every decoding change remaps the function's BARs, and each remap rebuilds
//! the guest's memory map and flushes TCG's TLBs: ~0.3 ms per command-register write under TCG
//! (measured on q35, 2026-12-02), three such writes per device on the old path. The size is
//! only needed to check that a structure lies inside its BAR; the capability's `offset` and
//! `length` (§4.1.4) describe the structure, and the device is the one that sized the BAR, so
//! this transport trusts them.
//!
//! A BAR without an address (firmware did not assign it) is a [`VirtioPciConfigError::BarUnassigned`];
//! [`crate::transport::pci_port`] then falls back to `virtio-drivers`' sizing path.

use crate::pci::{bar_address, capabilities, PciCam, VirtioNotifyCfg};
use core::ptr::NonNull;
use virtio_drivers::transport::pci::bus::{ConfigurationAccess, DeviceFunction};
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::{Hal, PhysAddr};

/// PCI vendor ID of virtio devices (§4.1.2).
const VIRTIO_VENDOR_ID: u16 = 0x1AF4;
/// PCI device ID of modern virtio devices: 0x1040 + the virtio device ID (§4.1.2).
const MODERN_DEVICE_ID_BASE: u16 = 0x1040;
/// Transitional device IDs 0x1000–0x103F (§4.1.2.3): 0x1000 is a network card.
const TRANSITIONAL_NET: u16 = 0x1000;

/// PCI capability ID of vendor-specific capabilities, which virtio uses (§4.1.4).
const PCI_CAP_ID_VNDR: u8 = 0x09;
/// `cfg_type` values (§4.1.4): common configuration, notifications, ISR status, device
/// configuration.
const CAP_COMMON: u8 = 1;
const CAP_NOTIFY: u8 = 2;
const CAP_ISR: u8 = 3;
const CAP_DEVICE: u8 = 4;
/// `cap_len` of `struct virtio_pci_cap` (§4.1.4) and of `struct virtio_pci_notify_cap`, which
/// adds `notify_off_multiplier` (§4.1.4.4).
const CAP_LEN: u8 = 16;
const NOTIFY_CAP_LEN: u8 = 20;

/// `struct virtio_pci_common_cfg` field offsets (§4.1.4.3).
mod common {
    pub const DEVICE_FEATURE_SELECT: usize = 0x00;
    pub const DEVICE_FEATURE: usize = 0x04;
    pub const DRIVER_FEATURE_SELECT: usize = 0x08;
    pub const DRIVER_FEATURE: usize = 0x0C;
    pub const DEVICE_STATUS: usize = 0x14;
    pub const CONFIG_GENERATION: usize = 0x15;
    pub const QUEUE_SELECT: usize = 0x16;
    pub const QUEUE_SIZE: usize = 0x18;
    pub const QUEUE_ENABLE: usize = 0x1C;
    pub const QUEUE_NOTIFY_OFF: usize = 0x1E;
    pub const QUEUE_DESC: usize = 0x20;
    pub const QUEUE_DRIVER: usize = 0x28;
    pub const QUEUE_DEVICE: usize = 0x30;
    /// The structure's length up to `queue_device` (VIRTIO 1.0's layout; 1.2 adds
    /// `queue_notify_data` and `queue_reset`, which this transport does not use).
    pub const LEN: u32 = 0x38;
}

/// How many times [`Drop`] reads `device_status` back after writing 0 (§4.1.4.3.2: the
/// driver waits for it to read 0). QEMU resets synchronously, so the first read returns 0;
/// the bound keeps a broken device from hanging the boot.
const RESET_POLLS: u32 = 1_000_000;

/// Why a PCI function cannot be driven by [`VirtioPciTransport`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VirtioPciConfigError {
    /// Vendor ID is not virtio's 0x1AF4 (§4.1.2).
    NotVirtio(u16),
    /// A virtio device ID this transport does not know (§4.1.2: 0x1000–0x103F, 0x1040–0x107F).
    BadDeviceId(u16),
    /// No usable capability of this `cfg_type` (1 common, 2 notify, 3 ISR; §4.1.4): not a
    /// modern (VIRTIO 1.x) device, or one that puts the structure in an I/O BAR.
    MissingStructure(u8),
    /// A structure is shorter than its layout (`cfg_type`, `length` in bytes).
    TooShort(u8, u32),
    /// `notify_off_multiplier` is neither 0 nor even (§4.1.4.4).
    NotifyMultiplier(u32),
    /// The memory BAR a structure lives in has no address: firmware did not assign it.
    BarUnassigned(u8),
}

impl core::fmt::Display for VirtioPciConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotVirtio(v) => write!(f, "vendor {v:#06x} is not virtio (0x1af4)"),
            Self::BadDeviceId(d) => write!(f, "unknown virtio PCI device ID {d:#06x}"),
            Self::MissingStructure(t) => write!(
                f,
                "no virtio PCI capability of cfg_type {t} in a memory BAR (VIRTIO 1.2 §4.1.4; a modern device is needed)"
            ),
            Self::TooShort(t, len) => {
                write!(f, "virtio PCI structure cfg_type {t} is {len} bytes, too short")
            }
            Self::NotifyMultiplier(m) => write!(
                f,
                "notify_off_multiplier {m} is neither 0 nor even (VIRTIO 1.2 §4.1.4.4)"
            ),
            Self::BarUnassigned(b) => write!(f, "BAR {b} has no address (not assigned by firmware)"),
        }
    }
}

/// Where one virtio structure is: `virtio_pci_cap.bar`, `.offset`, `.length` (§4.1.4), the
/// BAR's address resolved.
#[derive(Copy, Clone, Debug)]
struct Structure {
    /// Physical address (BAR address + `offset`).
    addr: u64,
    /// `length` in bytes.
    len: u32,
}

/// The structures one function's capabilities name (the first usable one of each type,
/// §4.1.4: "the driver SHOULD use the first instance of each virtio structure type they can
/// support"), and `notify_off_multiplier`.
#[derive(Default)]
struct Found {
    common: Option<Structure>,
    notify: Option<(Structure, u32)>,
    isr: Option<Structure>,
    device: Option<Structure>,
}

/// Walk `df`'s capability list for the virtio structures. Capabilities with a reserved `bar`
/// (> 5) or in an I/O BAR are skipped (§4.1.4: the driver MUST ignore reserved `bar` values).
fn find_structures(df: DeviceFunction) -> Result<Found, VirtioPciConfigError> {
    let cam = PciCam;
    let mut found = Found::default();
    for (at, id, w0) in capabilities(df) {
        // First dword: cap_vndr, cap_next, cap_len, cfg_type (§4.1.4).
        let (cap_len, cfg_type) = ((w0 >> 16) as u8, (w0 >> 24) as u8);
        if id != PCI_CAP_ID_VNDR
            || cap_len < CAP_LEN
            || !(CAP_COMMON..=CAP_DEVICE).contains(&cfg_type)
        {
            continue;
        }
        let slot = match cfg_type {
            CAP_COMMON => found.common.is_none(),
            CAP_NOTIFY => found.notify.is_none() && cap_len >= NOTIFY_CAP_LEN,
            CAP_ISR => found.isr.is_none(),
            _ => found.device.is_none(),
        };
        if !slot {
            continue;
        }
        // Second dword: bar, id, padding; then offset and length (le32 each).
        let bar = cam.read_word(df, at + 4) as u8;
        let Some(base) = bar_address(&cam, df, bar) else {
            continue; // reserved bar value or an I/O BAR
        };
        if base == 0 {
            return Err(VirtioPciConfigError::BarUnassigned(bar));
        }
        let s = Structure {
            addr: base + u64::from(cam.read_word(df, at + 8)),
            len: cam.read_word(df, at + 12),
        };
        match cfg_type {
            CAP_COMMON => found.common = Some(s),
            CAP_NOTIFY => found.notify = Some((s, cam.read_word(df, at + 16))),
            CAP_ISR => found.isr = Some(s),
            _ => found.device = Some(s),
        }
    }
    Ok(found)
}

/// A modern virtio PCI transport (§4.1.4) over the structures' MMIO, implementing
/// `virtio-drivers`' [`Transport`]. Dropping it resets the device (status 0, §4.1.4.3.2), as
/// `virtio-drivers`' `PciTransport` does.
#[derive(Debug)]
pub struct VirtioPciTransport {
    device_type: DeviceType,
    /// `virtio_pci_common_cfg`, mapped.
    common: NonNull<u8>,
    /// The notification structure, mapped, and its length in bytes.
    notify: NonNull<u8>,
    notify_len: u32,
    /// `notify_off_multiplier` in bytes.
    multiplier: u32,
    /// The ISR status byte, mapped.
    isr: NonNull<u8>,
    /// The device-specific configuration, mapped, and its length (none: the device has none).
    device: Option<(NonNull<u8>, u32)>,
    /// The physical addresses of the common configuration and notification structures, for
    /// doorbells and MSI-X vectors ([`VirtioPciTransport::notify_cfg`]).
    notify_cfg: VirtioNotifyCfg,
}

// SAFETY: the pointers are MMIO registers of one device, valid on every CPU (identity map);
// `&mut self` methods serialise the register sequences (`queue_select` then a queue field).
unsafe impl Send for VirtioPciTransport {}

impl VirtioPciTransport {
    /// The transport of virtio function `df`, its structures mapped through
    /// `H::mmio_phys_to_virt`. Only configuration reads: no BAR is sized and the command
    /// register is not written (the caller enables memory decoding and bus mastering:
    /// [`crate::pci::find_virtio_net`]).
    ///
    /// # Errors
    /// [`VirtioPciConfigError`]: not a modern virtio device, a missing or malformed structure,
    /// or a BAR firmware left unassigned.
    ///
    /// # Safety
    /// `df` must be a virtio function nothing else drives, with its BARs decoded at the
    /// addresses their registers hold, for the rest of the run.
    pub unsafe fn new<H: Hal>(df: DeviceFunction) -> Result<Self, VirtioPciConfigError> {
        let id = PciCam.read_word(df, 0);
        let (vendor, device) = (id as u16, (id >> 16) as u16);
        if vendor != VIRTIO_VENDOR_ID {
            return Err(VirtioPciConfigError::NotVirtio(vendor));
        }
        let device_type = device_type(device).ok_or(VirtioPciConfigError::BadDeviceId(device))?;
        let found = find_structures(df)?;
        let common = found
            .common
            .ok_or(VirtioPciConfigError::MissingStructure(CAP_COMMON))?;
        let (notify, multiplier) = found
            .notify
            .ok_or(VirtioPciConfigError::MissingStructure(CAP_NOTIFY))?;
        let isr = found
            .isr
            .ok_or(VirtioPciConfigError::MissingStructure(CAP_ISR))?;
        if common.len < common::LEN {
            return Err(VirtioPciConfigError::TooShort(CAP_COMMON, common.len));
        }
        if isr.len < 1 {
            return Err(VirtioPciConfigError::TooShort(CAP_ISR, isr.len));
        }
        if notify.len < 2 {
            return Err(VirtioPciConfigError::TooShort(CAP_NOTIFY, notify.len));
        }
        if multiplier % 2 != 0 {
            return Err(VirtioPciConfigError::NotifyMultiplier(multiplier));
        }
        // SAFETY: each range is a virtio structure inside a BAR of `df`, decoded at that
        // address (this function's contract), described by the device's own capability.
        let map =
            |s: Structure| unsafe { H::mmio_phys_to_virt(s.addr as PhysAddr, s.len as usize) };
        Ok(Self {
            device_type,
            common: map(common),
            notify: map(notify),
            notify_len: notify.len,
            multiplier,
            notify_cfg: VirtioNotifyCfg {
                notify_base: notify.addr,
                multiplier,
                common_base: common.addr,
            },
            isr: map(isr),
            device: found.device.filter(|d| d.len > 0).map(|d| (map(d), d.len)),
        })
    }

    /// Where the doorbells and the common configuration are (physical addresses, §4.1.4.3 and
    /// §4.1.4.4), as found by the capability walk of [`VirtioPciTransport::new`]: what
    /// [`crate::pci::virtio_notify_cfg`] would read with a second walk.
    pub fn notify_cfg(&self) -> VirtioNotifyCfg {
        self.notify_cfg
    }

    /// The common configuration register at `off` (a [`common`] offset).
    fn reg<T>(&self, off: usize) -> *mut T {
        // SAFETY: `off` + size_of::<T>() ≤ common::LEN ≤ the structure's length (checked in
        // `new`), so the pointer stays inside the mapped structure.
        unsafe { self.common.as_ptr().add(off).cast() }
    }

    fn read<T: Copy>(&self, off: usize) -> T {
        // SAFETY: a naturally aligned field of the mapped common configuration (§4.1.4.3),
        // read with its own width (§4.1.3.1).
        unsafe { self.reg::<T>(off).read_volatile() }
    }

    fn write<T: Copy>(&mut self, off: usize, v: T) {
        // SAFETY: as in `read`.
        unsafe { self.reg::<T>(off).write_volatile(v) }
    }

    /// A 64-bit field as two 32-bit writes, low half first (§4.1.3.1: the driver may access
    /// the halves of a 64-bit field independently).
    fn write64(&mut self, off: usize, v: u64) {
        self.write::<u32>(off, v as u32);
        self.write::<u32>(off + 4, (v >> 32) as u32);
    }

    /// The device-specific configuration at `offset` for a `T`: `None` if the device has none
    /// or `T` does not fit; misaligned offsets are `InvalidParam` (§4.1.3.1: fields are
    /// naturally aligned, and the structure is only 4-byte aligned).
    fn device_ptr<T>(&self, offset: usize) -> virtio_drivers::Result<*mut T> {
        let (base, len) = self
            .device
            .ok_or(virtio_drivers::Error::ConfigSpaceMissing)?;
        if core::mem::align_of::<T>() > 4 || !offset.is_multiple_of(core::mem::align_of::<T>()) {
            return Err(virtio_drivers::Error::InvalidParam);
        }
        if offset + core::mem::size_of::<T>() > len as usize {
            return Err(virtio_drivers::Error::ConfigSpaceTooSmall);
        }
        // SAFETY: offset + size_of::<T>() ≤ len, inside the mapped structure.
        Ok(unsafe { base.as_ptr().add(offset).cast() })
    }
}

/// The virtio device type of PCI device ID `id` (§4.1.2: modern 0x1040 + type; transitional
/// 0x1000–0x103F, of which only the network card, 0x1000, matters here).
fn device_type(id: u16) -> Option<DeviceType> {
    match id {
        TRANSITIONAL_NET => Some(DeviceType::Network),
        0x1041..=0x107F => DeviceType::try_from(u32::from(id - MODERN_DEVICE_ID_BASE)).ok(),
        _ => None,
    }
}

impl Transport for VirtioPciTransport {
    fn device_type(&self) -> DeviceType {
        self.device_type
    }

    fn read_device_features(&mut self) -> u64 {
        self.write::<u32>(common::DEVICE_FEATURE_SELECT, 0);
        let lo = self.read::<u32>(common::DEVICE_FEATURE);
        self.write::<u32>(common::DEVICE_FEATURE_SELECT, 1);
        let hi = self.read::<u32>(common::DEVICE_FEATURE);
        u64::from(lo) | (u64::from(hi) << 32)
    }

    fn write_driver_features(&mut self, driver_features: u64) {
        self.write::<u32>(common::DRIVER_FEATURE_SELECT, 0);
        self.write::<u32>(common::DRIVER_FEATURE, driver_features as u32);
        self.write::<u32>(common::DRIVER_FEATURE_SELECT, 1);
        self.write::<u32>(common::DRIVER_FEATURE, (driver_features >> 32) as u32);
    }

    fn max_queue_size(&mut self, queue: u16) -> u32 {
        self.write::<u16>(common::QUEUE_SELECT, queue);
        u32::from(self.read::<u16>(common::QUEUE_SIZE))
    }

    /// Writes the queue index to the queue's doorbell (§4.1.4.4: `cap.offset +
    /// queue_notify_off * notify_off_multiplier`); a doorbell outside the notification
    /// structure (a device breaking §4.1.4.4's requirement) is not written.
    fn notify(&mut self, queue: u16) {
        self.write::<u16>(common::QUEUE_SELECT, queue);
        let off =
            u64::from(self.read::<u16>(common::QUEUE_NOTIFY_OFF)) * u64::from(self.multiplier);
        if off + 2 <= u64::from(self.notify_len) {
            // SAFETY: off + 2 ≤ the notification structure's length (just checked), and `off`
            // is even (the multiplier is: checked in `new`), so the u16 is aligned.
            unsafe {
                self.notify
                    .as_ptr()
                    .add(off as usize)
                    .cast::<u16>()
                    .write_volatile(queue)
            };
        }
    }

    fn get_status(&self) -> DeviceStatus {
        DeviceStatus::from_bits_truncate(u32::from(self.read::<u8>(common::DEVICE_STATUS)))
    }

    fn set_status(&mut self, status: DeviceStatus) {
        self.write::<u8>(common::DEVICE_STATUS, status.bits() as u8);
    }

    fn set_guest_page_size(&mut self, _guest_page_size: u32) {
        // Legacy MMIO only (§4.2.4); PCI has no such register.
    }

    fn requires_legacy_layout(&self) -> bool {
        false
    }

    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        // §4.1.5.1.3: select, size, the three areas, then queue_enable = 1.
        self.write::<u16>(common::QUEUE_SELECT, queue);
        self.write::<u16>(common::QUEUE_SIZE, size as u16);
        self.write64(common::QUEUE_DESC, descriptors);
        self.write64(common::QUEUE_DRIVER, driver_area);
        self.write64(common::QUEUE_DEVICE, device_area);
        self.write::<u16>(common::QUEUE_ENABLE, 1);
    }

    fn queue_unset(&mut self, _queue: u16) {
        // §4.1.4.3.2: the driver MUST NOT write 0 to queue_enable; a queue is only released
        // by a device reset.
    }

    fn queue_used(&mut self, queue: u16) -> bool {
        self.write::<u16>(common::QUEUE_SELECT, queue);
        self.read::<u16>(common::QUEUE_ENABLE) == 1
    }

    fn ack_interrupt(&mut self) -> InterruptStatus {
        // §4.1.4.5: reading the ISR status clears it.
        // SAFETY: the mapped ISR status byte (length ≥ 1, checked in `new`).
        let isr = unsafe { self.isr.as_ptr().read_volatile() };
        InterruptStatus::from_bits_retain(u32::from(isr))
    }

    fn read_config_generation(&self) -> u32 {
        u32::from(self.read::<u8>(common::CONFIG_GENERATION))
    }

    fn read_config_space<T: zerocopy::FromBytes + zerocopy::IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<T> {
        let p = self.device_ptr::<T>(offset)?;
        // SAFETY: inside the mapped device configuration, aligned for `T` (`device_ptr`);
        // reading it has no side effect (§4.1.4.6) and any bytes are a valid `T` (FromBytes).
        Ok(unsafe { p.read_volatile() })
    }

    fn write_config_space<T: zerocopy::IntoBytes + zerocopy::Immutable>(
        &mut self,
        offset: usize,
        value: T,
    ) -> virtio_drivers::Result<()> {
        let p = self.device_ptr::<T>(offset)?;
        // SAFETY: as in `read_config_space`; the device owns the meaning of the write.
        unsafe { p.write_volatile(value) };
        Ok(())
    }
}

impl Drop for VirtioPciTransport {
    fn drop(&mut self) {
        // §4.1.4.3.2: writing 0 to device_status resets the device; wait for it to read 0.
        self.set_status(DeviceStatus::empty());
        for _ in 0..RESET_POLLS {
            if self.get_status().is_empty() {
                break;
            }
            core::hint::spin_loop();
        }
    }
}
