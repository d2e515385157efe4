//! The boot log and serial console on COM1, through `log`.

use core::fmt::Write;
use drivers::uart::{Uart16550, COM1};
use spin::Mutex;

/// COM1, shared by the logger and the console.
pub static COM: Mutex<Uart16550> = Mutex::new(Uart16550::new(COM1));

/// Print to COM1 (no newline translation beyond `\n` → `\r\n`).
pub fn print(args: core::fmt::Arguments<'_>) {
    let _ = COM.lock().write_fmt(args);
}

/// `println!` to COM1.
#[macro_export]
macro_rules! println {
    () => { $crate::arch::serial::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::arch::serial::print(format_args!("{}\n", format_args!($($arg)*))) };
}

struct SerialLogger;

impl log::Log for SerialLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let us = super::time::uptime_us();
        let mut com = COM.lock();
        let _ = writeln!(
            com,
            "[{:>5}.{:06}] {:<5} {}: {}",
            us / 1_000_000,
            us % 1_000_000,
            r.level(),
            r.target(),
            r.args()
        );
    }

    fn flush(&self) {}
}

static LOGGER: SerialLogger = SerialLogger;

/// Initialise COM1 and install the logger at `level`.
pub fn init(level: log::LevelFilter) {
    COM.lock().init();
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
