//! 16550 UART (COM1 at I/O port 0x3F8), polled.
//!
//! Register offsets follow the National Semiconductor PC16550D datasheet: THR/RBR at +0, IER at
//! +1, FCR at +2, LCR at +3, MCR at +4, LSR at +5.

use x86_64::instructions::port::Port;

/// I/O base of COM1 on PC-compatible machines.
pub const COM1: u16 = 0x3F8;

/// LSR bit 0: a received byte is waiting in RBR.
const LSR_DATA_READY: u8 = 0x01;
/// LSR bit 5: the transmit holding register is empty.
const LSR_THR_EMPTY: u8 = 0x20;

/// Bytes the 16550's transmit FIFO holds (datasheet: 16): once LSR says THR empty (in FIFO mode,
/// the whole FIFO), this many bytes may be written without looking again. Halves the port I/O
/// per byte of log, each a VM exit under KVM and a trip through QEMU's I/O path under TCG.
const TX_FIFO_BYTES: u8 = 16;

/// A polled 16550 UART at an I/O base.
pub struct Uart16550 {
    base: u16,
    /// Bytes that may still be written before LSR must be read again.
    tx_room: u8,
}

impl Uart16550 {
    /// A UART at I/O port `base`. Nothing is touched until [`Uart16550::init`].
    pub const fn new(base: u16) -> Self {
        Self { base, tx_room: 0 }
    }

    fn port(&self, off: u16) -> Port<u8> {
        Port::new(self.base + off)
    }

    /// Program 115200 baud 8N1, FIFOs on, interrupts off (the console is polled).
    pub fn init(&mut self) {
        // SAFETY: port I/O to the UART's own registers; the UART has no DMA and this is the only
        // code that programs it (the caller holds the console lock).
        unsafe {
            self.port(1).write(0x00); // IER: no interrupts
            self.port(3).write(0x80); // LCR: DLAB on
            self.port(0).write(0x01); // DLL: divisor 1 = 115200 baud
            self.port(1).write(0x00); // DLM
            self.port(3).write(0x03); // LCR: 8 data bits, no parity, 1 stop bit, DLAB off
            self.port(2).write(0xC7); // FCR: enable and clear FIFOs, 14-byte threshold
            self.port(4).write(0x03); // MCR: DTR | RTS
        }
        self.tx_room = 0;
    }

    /// Write one byte, waiting (bounded) for the transmit FIFO to empty when the bytes written
    /// since it last did could have filled it.
    pub fn write_byte(&mut self, b: u8) {
        // SAFETY: reads LSR and writes THR of this UART; see `init`.
        unsafe {
            if self.tx_room == 0 {
                // A real 16550 drains a byte in ~87 µs at 115200 baud; QEMU's is always ready.
                // Bounded so a missing UART cannot hang the kernel.
                for _ in 0..100_000 {
                    if self.port(5).read() & LSR_THR_EMPTY != 0 {
                        break;
                    }
                    core::hint::spin_loop();
                }
                self.tx_room = TX_FIFO_BYTES;
            }
            self.port(0).write(b);
            self.tx_room -= 1;
        }
    }

    /// Read one byte if one is waiting.
    pub fn try_read_byte(&mut self) -> Option<u8> {
        // SAFETY: reads LSR and RBR of this UART; see `init`.
        unsafe {
            if self.port(5).read() & LSR_DATA_READY != 0 {
                Some(self.port(0).read())
            } else {
                None
            }
        }
    }
}

impl core::fmt::Write for Uart16550 {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(b);
        }
        Ok(())
    }
}
