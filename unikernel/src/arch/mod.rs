//! The machine: x86_64 under QEMU (PVH boot). Nothing here names the dataplane.
//!
//! * [`boot`]: PVH and multiboot2 entries, long mode, the boot page tables; [`pvh`]: the PVH
//!   loader's boot data (and the shared `BootInfo`); [`multiboot2`]: GRUB's, as the same
//!   `BootInfo`.
//! * [`trap`]: GDT/TSS/IDT, exception reports, the interrupt-vector registry (IPI handlers).
//! * [`apic`]: the local APIC (EOI, timer, IPIs, MSI address).
//! * [`time`]: the TSC clock and [`time::Deadline`]; [`phases`]: the boot phases on it.
//! * [`serial`]: COM1 log and console output; [`exit`]: leaving QEMU (isa-debug-exit when
//!   opted in, else S5).
//! * [`power`]: ACPI fixed hardware: the power button, S5 soft-off, the FADT reset register.
//! * [`fw_cfg`]: QEMU's fw_cfg files, the per-instance configuration (`opt/gannet/…`).
//! * [`mcfg`]: the MCFG table: segment 0's PCIe ECAM region.
//!
//! Depends only on [`crate::percpu`] (the leaf).

pub mod apic;
pub mod boot;
pub mod exit;
pub mod fw_cfg;
pub mod mcfg;
pub mod multiboot2;
pub mod phases;
pub mod power;
pub mod pvh;
pub mod serial;
pub mod time;
pub mod trap;
