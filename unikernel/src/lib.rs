//! Gannet's kernel crate, as a library: everything an image needs, and the parts that do not
//! touch the machine built for the host too so they can be unit-tested there.
//!
//! * [`dataplane`]: the per-core forwarding logic (RX, rewrite or route, TX, completion,
//!   refill, hand-offs, quit phases), generic over a NIC and a platform; [`dataplane::nf`] is
//!   the network-function API.
//! * [`appliance`]: what every forwarding core of an image runs ([`appliance::Appliance`]):
//!   the stock modes, or one network function of the user's.
//! * [`bootinfo`]: the boot data kept from the loader and the multiboot2 tag parser (a
//!   leaf: names nothing else).
//! * [`acpi_pm`]: the `\_S5` soft-off sleep type read from the DSDT's AML, and the PM1
//!   register bits of the power button and soft-off (a leaf).
//! * [`http`]: `netstack::http` re-exported (the management plane's HTTP/1.x requests, sans
//!   I/O, host-tested and fuzzed there); the sockets and timers are the kernel's
//!   `control::mgmt`.
//! * `kernel` (`x86_64-unknown-none` only): the machine: boot, traps, APIC, SMP, memory map,
//!   PCI set-up, the console, and the [`dataplane::Platform`] that ties them to the
//!   dataplane; [`main!`] makes an image of it.
//!
//! # An image
//!
//! An image is a `no_std`, `no_main` binary of one line over this crate, linked with the
//! linker script this crate's build script provides (`-Tgannet.ld`) and built with the
//! workspace's target flags (`.cargo/config.toml`); the stock image is `src/main.rs`:
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//! unikernel::main!(unikernel::appliance::Stock);
//! ```
//!
//! A user's image names their network function instead: `unikernel::main!(MyNf)` runs
//! `MyNf::default()` on every core ([`appliance::One`]); `template/` is a crate to copy.
#![no_std]
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(clippy::too_many_lines)]

#[cfg(any(test, feature = "host-rig"))]
extern crate std;

pub mod acpi_pm;
pub mod appliance;
pub mod bootinfo;
pub mod dataplane;
pub use netstack::http;

// The machine part (bare metal only): private modules behind `kernel::start` and `main!`.
#[cfg(target_os = "none")]
mod arch;
#[cfg(target_os = "none")]
mod control;
#[cfg(target_os = "none")]
mod guard;
#[cfg(target_os = "none")]
#[doc(hidden)]
pub mod kernel;
#[cfg(target_os = "none")]
mod mem;
#[cfg(all(target_os = "none", feature = "nf-indirect-control"))]
pub mod nf_control;
#[cfg(target_os = "none")]
mod percpu;
#[cfg(target_os = "none")]
mod platform;
#[cfg(target_os = "none")]
mod run;
#[cfg(target_os = "none")]
mod setup;
#[cfg(target_os = "none")]
mod simbench;
#[cfg(target_os = "none")]
mod smp;
#[cfg(target_os = "none")]
mod tlb;
#[cfg(target_os = "none")]
mod tlbtest;

#[cfg(target_os = "none")]
pub(crate) use arch::exit::fail;

/// The entry of an image running the appliance `$a` (an [`appliance::Appliance`]: the stock
/// modes, `unikernel::appliance::Stock`) or the network function `$a` (a type implementing
/// [`dataplane::nf::NetworkFunction`] and `Default`, run as [`appliance::One`]): defines the
/// `kernel_main` the boot trampoline calls, with `kernel::start` monomorphised over `$a` in
/// the image's crate. Use it once, at the root of a `no_std`, `no_main` binary built for
/// `x86_64-unknown-none` and linked with `-Tgannet.ld` (this crate's build script puts the
/// script on the link path).
#[macro_export]
macro_rules! main {
    ($a:ty) => {
        /// Entry from the boot trampoline (`arch::boot`), on the boot stack, interrupts off.
        #[unsafe(no_mangle)]
        extern "C" fn kernel_main(start_info: u32, entry_tsc: u64) -> ! {
            $crate::kernel::start::<<$a as $crate::appliance::IntoAppliance>::Appliance>(
                start_info, entry_tsc,
            )
        }
    };
}
