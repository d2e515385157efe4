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

/// Longest line prefix [`prefix`] writes: `[` + up to 20 digits of seconds + `.` + 6 digits +
/// `] ` + the level padded to 5 + ` `, in bytes.
const PREFIX_MAX: usize = 36;

/// Write the log line prefix `[SSSSS.UUUUUU] LEVEL ` for uptime `us` (µs) into `out`, the
/// same bytes as `format_args!("[{:>5}.{:06}] {:<5} ", us / 1_000_000, us % 1_000_000,
/// level)`, by hand: the boot log is the first use of `core::fmt`'s padding paths and TCG
/// translates each of them once. Returns the length in bytes.
fn prefix(out: &mut [u8; PREFIX_MAX], us: u64, level: log::Level) -> usize {
    let mut digits = [0u8; 20];
    let mut secs = us / 1_000_000;
    let mut nd = 0;
    loop {
        digits[nd] = b'0' + (secs % 10) as u8;
        nd += 1;
        secs /= 10;
        if secs == 0 {
            break;
        }
    }
    let mut n = 0;
    out[n] = b'[';
    n += 1;
    for _ in nd..5 {
        out[n] = b' ';
        n += 1;
    }
    for i in (0..nd).rev() {
        out[n] = digits[i];
        n += 1;
    }
    out[n] = b'.';
    n += 1;
    let mut frac = us % 1_000_000;
    for i in (0..6).rev() {
        out[n + i] = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    n += 6;
    out[n] = b']';
    out[n + 1] = b' ';
    n += 2;
    let name = level.as_str().as_bytes();
    for i in 0..5 {
        out[n + i] = name.get(i).copied().unwrap_or(b' ');
    }
    out[n + 5] = b' ';
    n + 6
}

impl log::Log for SerialLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let us = super::time::uptime_us();
        let mut line = [0u8; PREFIX_MAX];
        let n = prefix(&mut line, us, r.level());
        let mut com = COM.lock();
        // The prefix is ASCII (digits, brackets, the level's name).
        for &b in &line[..n] {
            com.write_byte(b);
        }
        // INFO is the boot log a user reads, and each of its messages names its subsystem
        // (`smp: …`, `port 0: …`, as Linux's boot log does), so the module path is left out:
        // ~190 bytes of a default boot log before ready (1,226 bytes since the fifth pass),
        // and QEMU's 16550 costs a host write per byte (docs/benchmarks-journal.md, "Boot time, third
        // pass"). WARN and above keep it, to find the code that warned.
        if r.level() != log::Level::Info {
            let _ = com.write_str(r.target());
            let _ = com.write_str(": ");
        }
        // A message without arguments (most) is one `&str`: no `core::fmt::write` pass.
        let _ = match r.args().as_str() {
            Some(msg) => com.write_str(msg),
            None => com.write_fmt(*r.args()),
        };
        let _ = com.write_str("\n");
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
