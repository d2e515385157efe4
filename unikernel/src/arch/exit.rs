//! Leaving the machine. With `debug_exit=on` on the command line (the tests and xtask: opt-in,
//! docs/DESIGN.md "Power") through QEMU's `isa-debug-exit`
//! (`-device isa-debug-exit,iobase=0xf4,iosize=0x04`): a write of `code` makes QEMU exit with
//! status `(code << 1) | 1`. Without it, as on a libvirt domain or real hardware, through ACPI
//! S5 soft-off ([`super::power::soft_off`]: QEMU exits with status 0, libvirt reports `shut off
//! (shutdown)`), and where neither exists (microvm with `acpi=off`, or before the ACPI tables
//! were read) by halting.

use core::sync::atomic::{AtomicBool, Ordering};
use x86_64::instructions::port::Port;

/// isa-debug-exit I/O base.
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// `debug_exit=on`: leave through isa-debug-exit ([`set_debug_exit`]).
static DEBUG_EXIT: AtomicBool = AtomicBool::new(false);

/// How the guest ends.
#[derive(Copy, Clone, Debug)]
#[repr(u32)]
pub enum ExitCode {
    /// Clean shutdown: with `debug_exit=on` QEMU exits with status 1.
    Success = 0,
    /// Failure (bad configuration, fault, panic): with `debug_exit=on` QEMU exits with status 3.
    Failure = 1,
}

/// Leave through isa-debug-exit from now on (`debug_exit=on`; set from the raw command line
/// before it is parsed, so a configuration error leaves the same way).
pub fn set_debug_exit(on: bool) {
    DEBUG_EXIT.store(on, Ordering::Relaxed);
}

/// End the machine with `code`: isa-debug-exit when opted in, else S5 soft-off, else halt
/// forever (the last console line says why).
pub fn exit(code: ExitCode) -> ! {
    if DEBUG_EXIT.load(Ordering::Relaxed) {
        // SAFETY: `debug_exit=on` says port 0xf4 is QEMU's isa-debug-exit device.
        unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(code as u32) };
    } else {
        let e = super::power::soft_off();
        log::error!("power: cannot power off: {e}; halting (only `virsh destroy` or the VMM ends this guest)");
    }
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// Log a fatal boot error and exit with failure (QEMU's isa-debug-exit status 3 with
/// `debug_exit=on`, else ACPI S5 soft-off).
pub fn fail(args: core::fmt::Arguments<'_>) -> ! {
    // A failure inside the PIT window: end it so the line's timestamp is right.
    super::time::calibrate_finish();
    // Target `gannet`, as the line read when this lived in the binary's root.
    log::error!(target: "gannet", "{args}");
    exit(ExitCode::Failure)
}
