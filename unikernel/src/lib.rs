//! Gannet's kernel crate, as a library: the parts of the kernel that do not touch the machine,
//! built for the host too so they can be unit-tested there.
//!
//! * [`dataplane`]: the per-core forwarding logic (RX, rewrite or route, TX, completion,
//!   refill, hand-offs, quit phases), generic over a NIC and a platform.
//! * [`bootinfo`]: the boot data kept from the loader and the multiboot2 tag parser (a
//!   leaf: names nothing else).
//! * [`acpi_pm`]: the `\_S5` soft-off sleep type read from the DSDT's AML, and the PM1
//!   register bits of the power button and soft-off (a leaf).
//!
//! The kernel binary (`src/main.rs`, `x86_64-unknown-none` only) holds the metal: boot, traps,
//! APIC, SMP, memory map, PCI set-up, the console, and the [`dataplane::Platform`] that ties
//! them to the dataplane.
#![no_std]
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(clippy::too_many_lines)]

#[cfg(any(test, feature = "host-rig"))]
extern crate std;

pub mod acpi_pm;
pub mod bootinfo;
pub mod dataplane;
