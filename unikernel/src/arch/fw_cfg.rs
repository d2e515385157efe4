//! QEMU's firmware configuration device (fw_cfg, QEMU docs/specs/fw_cfg.rst), read through its
//! traditional I/O interface: the 16-bit selector at port 0x510, the data byte at 0x511. Gannet
//! reads two named files from it, its per-instance configuration without the kernel command
//! line (libvirt: `<sysinfo type='fwcfg'><entry name='opt/gannet/cmdline'>…`):
//!
//! - [`CMDLINE`] (`opt/gannet/cmdline`): kernel command-line keys, laid over the loader's
//!   command line (`netstack::config::merge`);
//! - [`BUNDLE`] (`opt/gannet/bundle`): the appliance's files (a `#!gannet-bundle 1` bundle, or a
//!   routes file), in place of the first boot module.
//!
//! Names under `opt/` are the ones the spec leaves to users; QEMU refuses others without a
//! warning flag. Without the device (bare metal, or a machine without fw_cfg) the signature
//! read gives `0xff` bytes and [`find`] says there is none.

use x86_64::instructions::port::Port;

/// The selector port (16-bit write), fw_cfg.rst "Selector (Control) Register".
const SELECTOR: u16 = 0x510;
/// The data port (8-bit read), fw_cfg.rst "Data Register".
const DATA: u16 = 0x511;
/// Selector of the signature item: the 4 bytes "QEMU".
const SIGNATURE: u16 = 0x0000;
/// Selector of the file directory: a big-endian count, then one [`FILE_ENTRY`] record each.
const FILE_DIR: u16 = 0x0019;
/// Bytes of a file directory record: size (BE u32), select (BE u16), reserved (u16), name (56).
const FILE_ENTRY: usize = 64;
/// Bytes of a file name in a record (NUL-padded).
const NAME_LEN: usize = 56;

/// The kernel command-line keys of this instance.
pub const CMDLINE: &str = "opt/gannet/cmdline";
/// The appliance's files of this instance (a bundle or a routes file).
pub const BUNDLE: &str = "opt/gannet/bundle";

/// A file in fw_cfg: its selector and size in bytes.
#[derive(Copy, Clone, Debug)]
pub struct File {
    /// Its selector key.
    pub select: u16,
    /// Its size in bytes.
    pub size: u32,
}

/// Select item `key`; the data port then reads it from its first byte.
fn select(key: u16) {
    // SAFETY: fw_cfg's selector port; writing a key only chooses what the data port reads
    // (on a machine without the device the write goes nowhere).
    unsafe { Port::<u16>::new(SELECTOR).write(key) };
}

/// The next `buf.len()` bytes of the selected item.
fn read(buf: &mut [u8]) {
    let mut port = Port::<u8>::new(DATA);
    for b in buf {
        // SAFETY: fw_cfg's data port: a read returns the selected item's next byte (past its
        // end, 0; without the device, 0xff) and has no other effect.
        *b = unsafe { port.read() };
    }
}

/// Whether the device is there (the signature item reads "QEMU").
pub fn present() -> bool {
    select(SIGNATURE);
    let mut sig = [0u8; 4];
    read(&mut sig);
    &sig == b"QEMU"
}

/// The file named `name`, if the device is there and has it.
pub fn find(name: &str) -> Option<File> {
    if !present() {
        return None;
    }
    select(FILE_DIR);
    let mut count = [0u8; 4];
    read(&mut count);
    // Bounded whatever the device says: QEMU's default limit is 0x20 + 32 files; 4096 covers
    // any configuration.
    for _ in 0..u32::from_be_bytes(count).min(4096) {
        let mut e = [0u8; FILE_ENTRY];
        read(&mut e);
        let raw = &e[8..8 + NAME_LEN];
        let end = raw.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        if &raw[..end] == name.as_bytes() {
            return Some(File {
                size: u32::from_be_bytes([e[0], e[1], e[2], e[3]]),
                select: u16::from_be_bytes([e[4], e[5]]),
            });
        }
    }
    None
}

/// Read all of `file` into the start of `buf`; returns its bytes, or `None` when `buf` is too
/// small (nothing read then).
pub fn read_file(file: File, buf: &mut [u8]) -> Option<&mut [u8]> {
    let out = buf.get_mut(..file.size as usize)?;
    select(file.select);
    read(out);
    Some(out)
}
