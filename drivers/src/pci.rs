//! PCI configuration access through the legacy I/O ports (PCI Local Bus Specification 3.0,
//! §3.2.2.3.2 "Configuration Mechanism #1"): write an address to 0xCF8, then read or write 0xCFC.
//!
//! `virtio-drivers` 0.13 ships only memory-mapped configuration access; this is the
//! [`ConfigurationAccess`] implementation for port I/O, which works on `q35` and `pc` alike.

use virtio_drivers::transport::pci::bus::{
    Command, ConfigurationAccess, DeviceFunction, DeviceFunctionInfo, PciRoot,
};
use virtio_drivers::transport::DeviceType;
use x86_64::instructions::port::Port;

/// CONFIG_ADDRESS register.
const CONFIG_ADDRESS: u16 = 0xCF8;
/// CONFIG_DATA register.
const CONFIG_DATA: u16 = 0xCFC;

/// The two-port sequence is not atomic: every access holds this lock.
static PORT_LOCK: spin::Mutex<()> = spin::Mutex::new(());

/// Configuration Mechanism #1 over I/O ports. Reaches the first 256 bytes of each function's
/// configuration space (all `virtio-drivers` needs).
#[derive(Debug, Default)]
pub struct PortIoCam;

fn address(df: DeviceFunction, off: u8) -> u32 {
    0x8000_0000
        | (u32::from(df.bus) << 16)
        | (u32::from(df.device) << 11)
        | (u32::from(df.function) << 8)
        | u32::from(off & 0xFC)
}

impl ConfigurationAccess for PortIoCam {
    fn read_word(&self, df: DeviceFunction, off: u8) -> u32 {
        let _g = PORT_LOCK.lock();
        // SAFETY: 0xCF8/0xCFC are the PCI configuration ports on every PC-compatible chipset;
        // the lock makes the address/data pair atomic with respect to other CPUs.
        unsafe {
            Port::<u32>::new(CONFIG_ADDRESS).write(address(df, off));
            Port::<u32>::new(CONFIG_DATA).read()
        }
    }

    fn write_word(&mut self, df: DeviceFunction, off: u8, value: u32) {
        let _g = PORT_LOCK.lock();
        // SAFETY: as in `read_word`.
        unsafe {
            Port::<u32>::new(CONFIG_ADDRESS).write(address(df, off));
            Port::<u32>::new(CONFIG_DATA).write(value);
        }
    }

    unsafe fn unsafe_clone(&self) -> Self {
        PortIoCam
    }
}

/// Maximum number of virtio-net functions [`find_virtio_net`] reports.
pub const MAX_NICS: usize = 8;

/// Enumerate bus 0 and return the virtio-net functions in slot order (the order QEMU's
/// `-device` arguments created them), up to [`MAX_NICS`], plus how many more were ignored.
/// Each returned function gets memory space and bus mastering enabled and INTx disabled (the
/// driver polls).
pub fn find_virtio_net(
    root: &mut PciRoot<PortIoCam>,
) -> (heapless::Vec<(DeviceFunction, DeviceFunctionInfo), MAX_NICS>, usize) {
    let mut out = heapless::Vec::new();
    let mut ignored = 0;
    let found: heapless::Vec<(DeviceFunction, DeviceFunctionInfo), 32> = root
        .enumerate_bus(0)
        .filter(|(_, info)| {
            virtio_drivers::transport::pci::virtio_device_type(info) == Some(DeviceType::Network)
        })
        .take(32)
        .collect();
    for (df, info) in found {
        let (_, cmd) = root.get_status_command(df);
        root.set_command(
            df,
            cmd | Command::MEMORY_SPACE | Command::BUS_MASTER | Command::INTERRUPT_DISABLE,
        );
        if out.push((df, info)).is_err() {
            ignored += 1;
        }
    }
    (out, ignored)
}
