//! PCI configuration access ([`PciCam`]): PCIe's Enhanced Configuration Access Mechanism
//! (ECAM, PCI Express Base Specification 4.0 §7.2.2: one 4 KiB page per function, bus << 20 |
//! device << 15 | function << 12) where the ACPI MCFG table gives one for segment 0 and all 256
//! buses (q35), else the legacy I/O ports (PCI Local Bus Specification 3.0, §3.2.2.3.2
//! "Configuration Mechanism #1": write an address to 0xCF8, then read or write 0xCFC; `pc`);
//! and [`scan`], the bounded walk of every bus behind PCI-to-PCI bridges and PCIe root ports.
//!
//! `virtio-drivers`' [`ConfigurationAccess`] takes an 8-bit register offset, so either way the
//! first 256 bytes of each function are what its users reach.

use core::sync::atomic::{AtomicU64, Ordering};
use virtio_drivers::transport::pci::bus::{
    Command, ConfigurationAccess, DeviceFunction, DeviceFunctionInfo, HeaderType, PciRoot,
};
use virtio_drivers::transport::pci::{PciTransport, VirtioPciError};
use virtio_drivers::transport::DeviceType;
use virtio_drivers::Hal;
use x86_64::instructions::port::Port;

/// CONFIG_ADDRESS register.
const CONFIG_ADDRESS: u16 = 0xCF8;
/// CONFIG_DATA register.
const CONFIG_DATA: u16 = 0xCFC;

/// The two-port sequence is not atomic: every access holds this lock.
static PORT_LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// The ECAM region's physical address (identity-mapped), or 0: port I/O ([`use_ecam`]).
static ECAM: AtomicU64 = AtomicU64::new(0);

/// From now on every [`PciCam`] access goes through ECAM at `base` (segment 0, buses 0..=255).
///
/// # Safety
/// `base` is the physical address of segment 0's ECAM region for buses 0..=255 (256 MiB, from
/// the MCFG table), identity-mapped for the kernel's life and used by nothing else.
pub unsafe fn use_ecam(base: u64) {
    ECAM.store(base, Ordering::Release);
}

/// The ECAM region's address, when [`use_ecam`] chose one.
pub fn ecam_base() -> Option<u64> {
    Some(ECAM.load(Ordering::Acquire)).filter(|&b| b != 0)
}

/// A function's configuration register `off` (4-byte aligned) in ECAM at `base` (PCIe Base
/// 4.0 §7.2.2, Table 7-1).
fn ecam_addr(base: u64, df: DeviceFunction, off: u8) -> u64 {
    base + (u64::from(df.bus) << 20)
        + (u64::from(df.device) << 15)
        + (u64::from(df.function) << 12)
        + u64::from(off & 0xFC)
}

/// The kernel's PCI configuration access: ECAM once [`use_ecam`] chose it, else Configuration
/// Mechanism #1 over I/O ports. Reaches the first 256 bytes of each function's configuration
/// space (all `virtio-drivers` needs).
#[derive(Debug, Default)]
pub struct PciCam;

fn address(df: DeviceFunction, off: u8) -> u32 {
    0x8000_0000
        | (u32::from(df.bus) << 16)
        | (u32::from(df.device) << 11)
        | (u32::from(df.function) << 8)
        | u32::from(off & 0xFC)
}

// Not inlined: configuration space is read at set-up only, from a dozen call sites, and each
// inlined copy (lock, two port accesses, unlock) is more first-executed code for TCG to translate
// at boot (docs/benchmarks-journal.md, "Boot time, fifth pass").
impl ConfigurationAccess for PciCam {
    #[inline(never)]
    fn read_word(&self, df: DeviceFunction, off: u8) -> u32 {
        if let Some(base) = ecam_base() {
            // SAFETY: `use_ecam`'s contract: the region is mapped and ours; the address is a
            // 4-byte-aligned register inside it (bus, device and function are in range by type).
            return unsafe { core::ptr::read_volatile(ecam_addr(base, df, off) as *const u32) };
        }
        let _g = PORT_LOCK.lock();
        // SAFETY: 0xCF8/0xCFC are the PCI configuration ports on every PC-compatible chipset;
        // the lock makes the address/data pair atomic with respect to other CPUs.
        unsafe {
            Port::<u32>::new(CONFIG_ADDRESS).write(address(df, off));
            Port::<u32>::new(CONFIG_DATA).read()
        }
    }

    #[inline(never)]
    fn write_word(&mut self, df: DeviceFunction, off: u8, value: u32) {
        if let Some(base) = ecam_base() {
            // SAFETY: as in `read_word`.
            unsafe { core::ptr::write_volatile(ecam_addr(base, df, off) as *mut u32, value) };
            return;
        }
        let _g = PORT_LOCK.lock();
        // SAFETY: as in `read_word`.
        unsafe {
            Port::<u32>::new(CONFIG_ADDRESS).write(address(df, off));
            Port::<u32>::new(CONFIG_DATA).write(value);
        }
    }

    unsafe fn unsafe_clone(&self) -> Self {
        PciCam
    }
}

/// Maximum number of virtio-net functions [`find_virtio_net`] reports.
pub const MAX_NICS: usize = 8;

/// Configuration-space offset of the bus-number register of a type 1 (PCI-to-PCI bridge)
/// header: primary (byte 0), secondary (byte 1), subordinate (byte 2) bus numbers (PCI-to-PCI
/// Bridge Architecture Specification 1.2, §3.2.5.3). PCIe root ports and switch ports use the
/// same header (PCI Express Base Specification 4.0, §7.5.1.3).
const BRIDGE_BUS_NUMBERS: u8 = 0x18;

/// What [`scan`] saw besides the functions it reported.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScanReport {
    /// Buses scanned (bus 0 and every secondary bus reached through a bridge).
    pub buses: usize,
    /// PCI-to-PCI bridges (and PCIe root or switch ports) found.
    pub bridges: usize,
    /// The first bridge whose secondary bus is not assigned (0), not above its own bus, or a bus
    /// already scanned: the firmware numbered no bus behind it, so nothing behind it is found
    /// (devices there are invisible, not an error by themselves). With `bad_bridges`.
    pub first_bad_bridge: Option<(DeviceFunction, u8)>,
    /// How many such bridges.
    pub bad_bridges: usize,
}

/// Every function reachable from bus 0 through PCI-to-PCI bridges and PCIe root ports, depth
/// first in bus, device, function order, each passed to `f` with its identity (any class: the
/// caller filters). Bus numbers are the ones firmware assigned (SeaBIOS and OVMF number every
/// bridge's secondary and subordinate bus; QEMU's PVH boot on q35 runs SeaBIOS first): a
/// bridge is followed to its secondary bus only when that is above the bridge's own bus and
/// not scanned yet, so each of the 256 buses is scanned at most once, and a loop or an
/// unassigned bridge ([`ScanReport::first_bad_bridge`]) cannot make the scan recurse forever.
/// Bridges get bus mastering and memory decoding on (a bridge forwards its devices' DMA and
/// MSI-X writes upstream only with Bus Master Enable: Bridge spec §3.2.5.2), when firmware left
/// them off. Port I/O reaches each function's first 256 configuration bytes, all that this and
/// the virtio and MSI-X capabilities need.
pub fn scan<C: ConfigurationAccess>(
    cam: &mut C,
    mut f: impl FnMut(DeviceFunction, &DeviceFunctionInfo),
) -> ScanReport {
    let mut report = ScanReport::default();
    let mut seen = [false; 256];
    // Buses still to scan; at most 256 ever pushed (each bus once).
    let mut stack: heapless::Vec<u8, 256> = heapless::Vec::new();
    seen[0] = true;
    let _ = stack.push(0);
    while let Some(bus) = stack.pop() {
        report.buses += 1;
        // Secondary buses of this bus's bridges, scanned after it in device order.
        let mut below: heapless::Vec<u8, 256> = heapless::Vec::new();
        for device in 0..32u8 {
            for function in 0..8u8 {
                let df = DeviceFunction {
                    bus,
                    device,
                    function,
                };
                let id = cam.read_word(df, 0);
                if id & 0xFFFF == 0xFFFF {
                    if function == 0 {
                        break;
                    }
                    continue;
                }
                let class = cam.read_word(df, 0x08);
                let bist = cam.read_word(df, 0x0C);
                let header = (bist >> 16) as u8;
                let info = DeviceFunctionInfo {
                    vendor_id: id as u16,
                    device_id: (id >> 16) as u16,
                    class: (class >> 24) as u8,
                    subclass: (class >> 16) as u8,
                    prog_if: (class >> 8) as u8,
                    revision: class as u8,
                    header_type: HeaderType::from(header & 0x7F),
                };
                if info.header_type == HeaderType::PciPciBridge {
                    report.bridges += 1;
                    let secondary = (cam.read_word(df, BRIDGE_BUS_NUMBERS) >> 8) as u8;
                    if secondary <= bus || seen[usize::from(secondary)] {
                        report.bad_bridges += 1;
                        report.first_bad_bridge.get_or_insert((df, secondary));
                    } else {
                        seen[usize::from(secondary)] = true;
                        let _ = below.push(secondary);
                        let cmd = cam.read_word(df, 0x04);
                        let want = cmd & 0xFFFF
                            | u32::from((Command::BUS_MASTER | Command::MEMORY_SPACE).bits());
                        if want != cmd & 0xFFFF {
                            cam.write_word(df, 0x04, want);
                        }
                    }
                }
                f(df, &info);
                // Function 0 without the multi-function bit: functions 1-7 do not exist.
                if function == 0 && header & 0x80 == 0 {
                    break;
                }
            }
        }
        // Reverse so the first bridge's bus is popped first (depth first, device order).
        for b in below.iter().rev() {
            let _ = stack.push(*b);
        }
    }
    report
}

/// Enumerate every bus reachable from bus 0 ([`scan`]: behind PCI-to-PCI bridges and PCIe
/// root ports too) and return the virtio-net functions in bus, slot order (on one bus, the
/// order QEMU's `-device` arguments created them), up to [`MAX_NICS`], plus how many more were
/// ignored and the scan's [`ScanReport`].
/// Each returned function gets bus mastering enabled and INTx disabled (the driver polls or
/// uses MSI-X) in one command-register write, skipped when both are set already; its decoding
/// is left as the firmware set it (SeaBIOS and OVMF turn memory and I/O decoding on for the
/// BARs they assign), so its BARs are not remapped: under QEMU each remap rebuilds the guest's
/// memory map and flushes TCG's TLBs (~0.3 ms per command write that changes decoding, measured
/// under TCG on q35). [`crate::transport::pci_port`] turns memory decoding on if it is off.
pub fn find_virtio_net(
    root: &mut PciRoot<PciCam>,
) -> (
    heapless::Vec<(DeviceFunction, DeviceFunctionInfo), MAX_NICS>,
    usize,
    ScanReport,
) {
    let f = find_nics(root);
    (f.virtio, f.ignored, f.report)
}

/// The NIC functions one [`scan`] found, by driver, each list in bus, slot order.
pub struct FoundNics {
    /// virtio-net functions (up to [`MAX_NICS`]).
    pub virtio: heapless::Vec<(DeviceFunction, DeviceFunctionInfo), MAX_NICS>,
    /// Intel 82574L functions (8086:10D3, [`crate::e1000e`]; up to [`MAX_NICS`]).
    pub e1000e: heapless::Vec<(DeviceFunction, DeviceFunctionInfo), MAX_NICS>,
    /// Intel 82576 functions (8086:10C9, [`crate::igb`]; up to [`MAX_NICS`]).
    pub igb: heapless::Vec<(DeviceFunction, DeviceFunctionInfo), MAX_NICS>,
    /// Other igb-family functions, found and not bound (their device IDs,
    /// [`crate::igb::IGB_FAMILY_UNBOUND`]; up to [`MAX_NICS`]): the boot log names them.
    pub unbound: heapless::Vec<(DeviceFunction, u16), MAX_NICS>,
    /// Functions of either kind past [`MAX_NICS`].
    pub ignored: usize,
    /// What the scan saw besides.
    pub report: ScanReport,
}

/// Which driver a found function is for.
#[derive(Copy, Clone)]
enum Driver {
    Virtio,
    E1000e,
    Igb,
}

/// [`find_virtio_net`] for every NIC Gannet drives: virtio-net, the Intel 82574L and the
/// Intel 82576, in one scan (other igb-family functions are listed, not bound). Each returned
/// function gets bus mastering on and INTx off as there.
pub fn find_nics(root: &mut PciRoot<PciCam>) -> FoundNics {
    let mut out = FoundNics {
        virtio: heapless::Vec::new(),
        e1000e: heapless::Vec::new(),
        igb: heapless::Vec::new(),
        unbound: heapless::Vec::new(),
        ignored: 0,
        report: ScanReport::default(),
    };
    let mut found: heapless::Vec<(DeviceFunction, DeviceFunctionInfo, Driver), 32> =
        heapless::Vec::new();
    let unbound = &mut out.unbound;
    out.report = scan(&mut PciCam, |df, info| {
        let intel = info.vendor_id == crate::e1000e::VENDOR_INTEL;
        let driver = match info.device_id {
            crate::e1000e::DEVICE_82574L if intel => Driver::E1000e,
            crate::igb::DEVICE_82576 if intel => Driver::Igb,
            d if intel && crate::igb::unbound_family_name(d).is_some() => {
                let _ = unbound.push((df, d));
                return;
            }
            _ if virtio_drivers::transport::pci::virtio_device_type(info)
                == Some(DeviceType::Network) =>
            {
                Driver::Virtio
            }
            _ => return,
        };
        let _ = found.push((df, info.clone(), driver));
    });
    for (df, info, driver) in found {
        let (_, cmd) = root.get_status_command(df);
        let want = cmd | Command::BUS_MASTER | Command::INTERRUPT_DISABLE;
        if want != cmd {
            root.set_command(df, want);
        }
        let list = match driver {
            Driver::E1000e => &mut out.e1000e,
            Driver::Igb => &mut out.igb,
            Driver::Virtio => &mut out.virtio,
        };
        if list.push((df, info)).is_err() {
            out.ignored += 1;
        }
    }
    out
}

/// The physical address of an 82574L's or 82576's register BAR (BAR 0, memory; `None` for an
/// I/O BAR or 0 when firmware assigned none), with memory decoding turned on if it was off.
pub fn e1000e_bar0(root: &mut PciRoot<PciCam>, df: DeviceFunction) -> Option<u64> {
    let a = bar_address(&PciCam, df, 0).filter(|&a| a != 0)?;
    enable_memory_decoding(root, df);
    Some(a)
}

/// Turn memory decoding on for `df` if it is off (one command-register write; nothing when
/// the firmware left it on). For [`crate::transport::pci_port`], once the BARs are known to
/// hold addresses.
pub fn enable_memory_decoding(root: &mut PciRoot<PciCam>, df: DeviceFunction) {
    let (_, cmd) = root.get_status_command(df);
    if !cmd.contains(Command::MEMORY_SPACE) {
        root.set_command(df, cmd | Command::MEMORY_SPACE);
    }
}

/// `virtio-drivers`' `PciTransport::new` for `df` with the function's memory decoding off while
/// it sizes the BARs, and on once it is done (I/O decoding off). The fallback of
/// [`crate::transport::pci_port`] for a function whose BARs firmware did not assign (the
/// capability walk of [`crate::virtio_pci`] found a BAR reading 0). `PciRoot::bar_info` turns
/// memory and I/O decoding off and back on around every BAR it sizes (once per virtio
/// capability: 4–5 per device) unless both are off already; under QEMU each of those toggles remaps the BAR, which rebuilds the guest's memory
/// map and flushes TCG's TLBs (about 0.5 ms each, 5 ms per device seen under TCG). With
/// decoding off the sizing writes change no mapping: two remaps per device instead of ~10.
pub fn virtio_pci_transport<H: Hal>(
    root: &mut PciRoot<PciCam>,
    df: DeviceFunction,
) -> Result<PciTransport, VirtioPciError> {
    let decode = Command::MEMORY_SPACE | Command::IO_SPACE;
    let (_, cmd) = root.get_status_command(df);
    if cmd.intersects(decode) {
        root.set_command(df, cmd - decode);
    }
    let t = PciTransport::new::<H, _>(root, df);
    // I/O decoding stays off: only the memory BARs (modern virtio) are used.
    root.set_command(df, (cmd - Command::IO_SPACE) | Command::MEMORY_SPACE);
    t
}

/// PCI capability ID of vendor-specific capabilities, which virtio uses (§4.1.4).
const PCI_CAP_ID_VNDR: u8 = 0x09;
/// `virtio_pci_cap.cfg_type` of the common configuration structure (§4.1.4.3).
const VIRTIO_PCI_CAP_COMMON_CFG: u8 = 1;
/// `virtio_pci_cap.cfg_type` of the notification structure (§4.1.4.4).
const VIRTIO_PCI_CAP_NOTIFY_CFG: u8 = 2;
/// Offset of `queue_select` (le16) in `virtio_pci_common_cfg` (§4.1.4.3).
const COMMON_QUEUE_SELECT: u64 = 22;
/// Offset of `queue_notify_off` (le16) in `virtio_pci_common_cfg` (§4.1.4.3).
const COMMON_QUEUE_NOTIFY_OFF: u64 = 30;
/// Offset of `msix_config` (le16) in `virtio_pci_common_cfg` (§4.1.4.3).
const COMMON_MSIX_CONFIG: u64 = 0x10;
/// Offset of `queue_msix_vector` (le16) in `virtio_pci_common_cfg` (§4.1.4.3).
const COMMON_QUEUE_MSIX_VECTOR: u64 = 0x1A;
/// `VIRTIO_MSI_NO_VECTOR` (§4.1.5.1.2).
pub const VIRTIO_MSI_NO_VECTOR: u16 = 0xFFFF;

/// Where a virtio PCI function's notification doorbells are (§4.1.4.4): queue `q`'s doorbell
/// is `notify_base + queue_notify_off(q) * notify_off_multiplier`.
#[derive(Copy, Clone, Debug)]
pub struct VirtioNotifyCfg {
    /// Physical address of the notification structure (BAR + offset).
    pub notify_base: u64,
    /// `notify_off_multiplier` in bytes.
    pub multiplier: u32,
    /// Physical address of `virtio_pci_common_cfg` (BAR + offset).
    pub common_base: u64,
}

/// The memory address BAR `bar` of `df` holds (both halves of a 64-bit BAR), read without
/// sizing it; `None` for an I/O BAR or a reserved index (> 5). 0 means unassigned.
pub(crate) fn bar_address(cam: &PciCam, df: DeviceFunction, bar: u8) -> Option<u64> {
    if bar > 5 {
        return None;
    }
    let off = 0x10 + 4 * bar;
    let lo = cam.read_word(df, off);
    if lo & 1 != 0 {
        return None; // I/O BAR: virtio 1.x structures live in memory BARs
    }
    let addr = u64::from(lo & !0xF);
    // Bits 2:1 = 0b10: 64-bit BAR, upper half in the next register (PCI 3.0 §6.2.5.1).
    if (lo >> 1) & 0b11 == 0b10 && bar < 5 {
        Some(addr | (u64::from(cam.read_word(df, off + 4)) << 32))
    } else {
        Some(addr)
    }
}

/// Walk function `df`'s capability list (PCI 3.0 §6.7): yields `(offset, id, first dword)`.
/// Bounded to 48 entries so a looping list cannot hang boot.
pub(crate) fn capabilities(df: DeviceFunction) -> impl Iterator<Item = (u8, u8, u32)> {
    let cam = PciCam;
    // Status register bit 4: capabilities list present; pointer at 0x34.
    let mut ptr = if (cam.read_word(df, 0x04) >> 16) & 0x10 != 0 {
        (cam.read_word(df, 0x34) & 0xFC) as u8
    } else {
        0
    };
    (0..48).map_while(move |_| {
        if ptr == 0 {
            return None;
        }
        let at = ptr;
        let w0 = PciCam.read_word(df, at);
        ptr = (w0 >> 8) as u8 & 0xFC;
        Some((at, w0 as u8, w0))
    })
}

/// Read the locations of the common configuration and notification structures of virtio
/// function `df` from its capability list. Reads BAR registers without sizing them, so it is
/// safe while the device is live. `None` if either capability is missing or in an I/O BAR.
pub fn virtio_notify_cfg(df: DeviceFunction) -> Option<VirtioNotifyCfg> {
    let cam = PciCam;
    let (mut notify, mut common) = (None, None);
    for (ptr, id, w0) in capabilities(df) {
        let cfg_type = (w0 >> 24) as u8;
        if id != PCI_CAP_ID_VNDR
            || (cfg_type != VIRTIO_PCI_CAP_NOTIFY_CFG && cfg_type != VIRTIO_PCI_CAP_COMMON_CFG)
        {
            continue;
        }
        let bar = cam.read_word(df, ptr + 4) as u8;
        let offset = u64::from(cam.read_word(df, ptr + 8));
        if let Some(base) = bar_address(&cam, df, bar) {
            if cfg_type == VIRTIO_PCI_CAP_NOTIFY_CFG {
                notify = Some((base + offset, cam.read_word(df, ptr + 16)));
            } else if common.is_none() {
                common = Some(base + offset);
            }
        }
    }
    let (notify_base, multiplier) = notify?;
    Some(VirtioNotifyCfg {
        notify_base,
        multiplier,
        common_base: common?,
    })
}

/// PCI capability ID of MSI-X (PCI 3.0 §6.8.2).
const PCI_CAP_ID_MSIX: u8 = 0x11;
/// MSI-X Message Control: MSI-X Enable (bit 15) and Function Mask (bit 14), in the upper half
/// of the capability's first dword.
const MSIX_ENABLE: u32 = 1 << 31;
const MSIX_FUNCTION_MASK: u32 = 1 << 30;

/// Why MSI-X could not be set up.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum MsixError {
    /// The function has no MSI-X capability.
    NoCapability,
    /// The MSI-X table lives in an I/O BAR or an unreadable BAR.
    BadTableBar,
}

/// Program MSI-X table entry `entry` of function `df` to send `data` to `address` (x86: the
/// LAPIC window `0xFEE0_0000 | apic_id << 12`, data = vector; Intel SDM Vol. 3 §11.11), unmask
/// it and enable MSI-X on the function (PCI 3.0 §6.8.2). Entries not programmed stay masked
/// (their reset state).
///
/// # Safety
/// The MSI-X table must be mapped at its physical address (identity map below 4 GiB) and the
/// device must belong to the caller; call during set-up on one CPU.
pub unsafe fn msix_route(
    df: DeviceFunction,
    entry: u16,
    address: u64,
    data: u32,
) -> Result<(), MsixError> {
    let mut cam = PciCam;
    let (cap, w0) = capabilities(df)
        .find(|(_, id, _)| *id == PCI_CAP_ID_MSIX)
        .map(|(at, _, w0)| (at, w0))
        .ok_or(MsixError::NoCapability)?;
    let table_size = ((w0 >> 16) & 0x7FF) + 1;
    if u32::from(entry) >= table_size {
        return Err(MsixError::BadTableBar);
    }
    let table = cam.read_word(df, cap + 4);
    let base = bar_address(&cam, df, (table & 0x7) as u8).ok_or(MsixError::BadTableBar)?;
    let e = (base + u64::from(table & !0x7) + 16 * u64::from(entry)) as *mut u32;
    // SAFETY: the entry lies inside the device's MSI-X table (entry < table size), mapped per
    // the contract; writes follow the table layout of PCI 3.0 §6.8.2.6-9.
    unsafe {
        e.write_volatile(address as u32);
        e.add(1).write_volatile((address >> 32) as u32);
        e.add(2).write_volatile(data);
        e.add(3).write_volatile(0); // vector control: unmasked
    }
    cam.write_word(df, cap, (w0 | MSIX_ENABLE) & !MSIX_FUNCTION_MASK);
    Ok(())
}

impl VirtioNotifyCfg {
    /// The doorbell address of virtqueue `queue`, reading its `queue_notify_off` through the
    /// common configuration structure.
    ///
    /// # Safety
    /// The structures must be mapped at their physical addresses (identity map), and no other
    /// code may be using `queue_select` concurrently (call during device set-up, on one CPU).
    pub unsafe fn doorbell(&self, queue: u16) -> u64 {
        let sel = (self.common_base + COMMON_QUEUE_SELECT) as *mut u16;
        let off = (self.common_base + COMMON_QUEUE_NOTIFY_OFF) as *const u16;
        // SAFETY: MMIO registers of the device's common configuration, per the contract.
        let notify_off = unsafe {
            sel.write_volatile(queue);
            off.read_volatile()
        };
        self.notify_base + u64::from(notify_off) * u64::from(self.multiplier)
    }

    /// Route virtqueue `queue`'s used-buffer notifications to MSI-X table entry `vector`
    /// ([`VIRTIO_MSI_NO_VECTOR`] for none), and configuration changes to none (§4.1.5.1.2).
    /// Returns the value the device read back: the requested vector on success,
    /// `VIRTIO_MSI_NO_VECTOR` if it refused (§4.1.5.1.2.1).
    ///
    /// # Safety
    /// As for [`VirtioNotifyCfg::doorbell`].
    pub unsafe fn set_queue_vector(&self, queue: u16, vector: u16) -> u16 {
        let reg = |off: u64| (self.common_base + off) as *mut u16;
        // SAFETY: MMIO registers of the device's common configuration, per the contract.
        unsafe {
            reg(COMMON_MSIX_CONFIG).write_volatile(VIRTIO_MSI_NO_VECTOR);
            reg(COMMON_QUEUE_SELECT).write_volatile(queue);
            reg(COMMON_QUEUE_MSIX_VECTOR).write_volatile(vector);
            reg(COMMON_QUEUE_MSIX_VECTOR).read_volatile()
        }
    }
}

#[cfg(test)]
mod tests {
    //! [`scan`] on a configuration space in memory: the shapes QEMU's `pcie-root-port` and
    //! `pci-bridge` make (booted for real by `tests/tests/pci_bridges.rs`) and the bad ones no
    //! firmware here makes (a bridge with no bus number, a loop).
    extern crate std;
    use super::*;
    use std::collections::HashMap;
    use std::format;
    use std::string::String;
    use std::vec::Vec;

    /// Functions by (bus, device, function): their first 64 configuration words.
    #[derive(Default)]
    struct FakeCam(HashMap<(u8, u8, u8), [u32; 64]>);

    impl FakeCam {
        /// A type 0 function at bus, device, function: `vendor:device`, class/subclass.
        fn endpoint(
            &mut self,
            (b, d, f): (u8, u8, u8),
            (vendor, device): (u16, u16),
            (class, sub): (u8, u8),
        ) {
            let mut w = [0u32; 64];
            w[0] = u32::from(vendor) | u32::from(device) << 16;
            w[2] = u32::from(class) << 24 | u32::from(sub) << 16 | 1;
            self.0.insert((b, d, f), w);
        }
        /// A type 1 function (PCI-to-PCI bridge, class 06.04) on bus `b` with secondary bus
        /// `sec` (and subordinate `sec`).
        fn bridge(&mut self, b: u8, d: u8, f: u8, sec: u8) {
            let mut w = [0u32; 64];
            w[0] = 0x1b36 | 0x000c << 16;
            w[2] = 0x06 << 24 | 0x04 << 16;
            w[3] = 0x01 << 16;
            w[6] = u32::from(b) | u32::from(sec) << 8 | u32::from(sec) << 16;
            self.0.insert((b, d, f), w);
        }
    }

    impl ConfigurationAccess for FakeCam {
        fn read_word(&self, df: DeviceFunction, off: u8) -> u32 {
            self.0
                .get(&(df.bus, df.device, df.function))
                .map_or(0xFFFF_FFFF, |w| w[usize::from(off / 4)])
        }
        fn write_word(&mut self, df: DeviceFunction, off: u8, value: u32) {
            if let Some(w) = self.0.get_mut(&(df.bus, df.device, df.function)) {
                w[usize::from(off / 4)] = value;
            }
        }
        unsafe fn unsafe_clone(&self) -> Self {
            FakeCam(self.0.clone())
        }
    }

    const VIRTIO_NET: (u16, u16) = (0x1af4, 0x1041);

    fn scan_all(cam: &mut FakeCam) -> (Vec<String>, ScanReport) {
        let mut seen = Vec::new();
        let r = scan(cam, |df, info| {
            seen.push(format!(
                "{df} {:04x}:{:04x}",
                info.vendor_id, info.device_id
            ))
        });
        (seen, r)
    }

    #[test]
    fn finds_functions_behind_root_ports_and_a_pci_bridge() {
        let mut cam = FakeCam::default();
        cam.endpoint((0, 0, 0), (0x8086, 0x29c0), (0x06, 0x00)); // q35 host bridge
        cam.bridge(0, 1, 0, 1); // pcie-root-port
        cam.bridge(0, 2, 0, 2); // pcie-root-port
        cam.bridge(0, 3, 0, 3); // pci-bridge
        cam.endpoint((1, 0, 0), (VIRTIO_NET.0, VIRTIO_NET.1), (0x02, 0x00));
        cam.endpoint((2, 0, 0), (VIRTIO_NET.0, VIRTIO_NET.1), (0x02, 0x00));
        cam.endpoint((3, 5, 0), (0x8086, 0x10d3), (0x02, 0x00)); // e1000e behind the bridge
        let (seen, r) = scan_all(&mut cam);
        assert_eq!(
            seen,
            [
                "00:00.0 8086:29c0",
                "00:01.0 1b36:000c",
                "00:02.0 1b36:000c",
                "00:03.0 1b36:000c",
                "01:00.0 1af4:1041",
                "02:00.0 1af4:1041",
                "03:05.0 8086:10d3",
            ]
        );
        assert_eq!(
            r,
            ScanReport {
                buses: 4,
                bridges: 3,
                first_bad_bridge: None,
                bad_bridges: 0
            }
        );
        // Every bridge now forwards its devices' DMA and MSI-X writes (bus master) and their
        // BAR accesses (memory decoding).
        for d in 1..=3 {
            assert_eq!(cam.0[&(0, d, 0)][1] & 0x6, 0x6, "bridge 00:0{d}.0 command");
        }
    }

    #[test]
    fn unnumbered_bridge_and_loops_are_reported_not_followed() {
        let mut cam = FakeCam::default();
        cam.bridge(0, 1, 0, 0); // no secondary bus assigned
        cam.bridge(0, 2, 0, 1);
        cam.bridge(1, 0, 0, 1); // points at its own bus
        cam.bridge(1, 1, 0, 0); // points back at bus 0
        cam.endpoint((1, 2, 0), (VIRTIO_NET.0, VIRTIO_NET.1), (0x02, 0x00));
        let (seen, r) = scan_all(&mut cam);
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[4], "01:02.0 1af4:1041");
        assert_eq!(r.buses, 2);
        assert_eq!(r.bridges, 4);
        assert_eq!(r.bad_bridges, 3);
        let (df, sec) = r.first_bad_bridge.unwrap();
        assert_eq!((df.bus, df.device, df.function, sec), (0, 1, 0, 0));
    }

    #[test]
    fn multifunction_bit_gates_functions_1_to_7() {
        let mut cam = FakeCam::default();
        cam.endpoint((0, 4, 0), (0x1234, 0x0001), (0x02, 0x00));
        cam.endpoint((0, 4, 1), (0x1234, 0x0002), (0x02, 0x00)); // invisible: 0 is single-function
        cam.bridge(0, 5, 0, 1);
        cam.0.get_mut(&(0, 5, 0)).unwrap()[3] |= 0x80 << 16; // multi-function
        cam.bridge(0, 5, 1, 2);
        let (seen, r) = scan_all(&mut cam);
        assert_eq!(
            seen,
            [
                "00:04.0 1234:0001",
                "00:05.0 1b36:000c",
                "00:05.1 1b36:000c"
            ]
        );
        assert_eq!(r.buses, 3);
    }
}
