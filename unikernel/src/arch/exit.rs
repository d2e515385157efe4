//! Leaving QEMU through `isa-debug-exit` (`-device isa-debug-exit,iobase=0xf4,iosize=0x04`):
//! a write of `code` makes QEMU exit with status `(code << 1) | 1`.

use x86_64::instructions::port::Port;

/// isa-debug-exit I/O base.
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// How the guest ends.
#[derive(Copy, Clone, Debug)]
#[repr(u32)]
pub enum ExitCode {
    /// Clean shutdown: QEMU exits with status 1.
    Success = 0,
    /// Failure (bad configuration, fault, panic): QEMU exits with status 3.
    Failure = 1,
}

/// Exit QEMU. If the debug-exit device is absent (e.g. on real hardware) halt forever.
pub fn exit(code: ExitCode) -> ! {
    // SAFETY: port 0xf4 is the isa-debug-exit device QEMU is started with; on a machine without
    // it the write goes nowhere.
    unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(code as u32) };
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}
