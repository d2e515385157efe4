//! Multiboot2 boot information (GNU Multiboot2 specification 1.0, §3.6): what GRUB's
//! `multiboot2` command hands over in `ebx` when it enters `mb2_start32` (`arch::boot`),
//! converted into the same [`BootInfo`] the PVH path produces, so everything after the boot
//! data is shared.
//!
//! Tags read: 1 (command line), 3 (modules), 6 (memory map), 14/15 (ACPI old/new RSDP: the
//! RSDP itself is copied into the tag, §3.6.15/§3.6.16, so it is copied once more into the
//! kernel image and [`BootInfo::rsdp`] points at that copy: the boot information lives in
//! memory the allocator may hand out later). Everything else is skipped.

use super::pvh::{BootInfo, MemRegion, MAX_CMDLINE, MAX_MEMMAP, MAX_MODULES};

/// `eax` at the multiboot2 entry (§3.3): the loader is multiboot2-compliant.
pub const BOOTLOADER_MAGIC: u32 = 0x36d7_6289;
/// The header magic (§3.1.1), in the image's first 32 KiB.
pub const HEADER_MAGIC: u32 = 0xe852_50d6;
/// Largest boot information accepted, in bytes (GRUB's are a few KiB; OVMF maps included).
pub const MAX_MBI_BYTES: u32 = 1 << 20;

const TAG_END: u32 = 0;
const TAG_CMDLINE: u32 = 1;
const TAG_MODULE: u32 = 3;
const TAG_MMAP: u32 = 6;
const TAG_ACPI_OLD: u32 = 14;
const TAG_ACPI_NEW: u32 = 15;

/// Bytes of the RSDP kept: the ACPI 2.0+ structure (36 bytes); ACPI 1.0's is the first 20.
const RSDP_MAX: usize = 36;

/// Why the multiboot2 boot information could not be used.
#[derive(Debug)]
#[allow(dead_code)] // fields are shown through Debug in the boot error
pub enum Mb2Error {
    /// `eax` at the multiboot2 entry was not [`BOOTLOADER_MAGIC`] (§3.3): not a multiboot2
    /// loader.
    BadMagic(u32),
    /// The boot information pointer (`ebx`) is 0 or not 8-byte aligned (§3.6.1).
    BadAddress(u32),
    /// `total_size` is below 16 (fixed part + end tag) or above [`MAX_MBI_BYTES`].
    BadTotalSize(u32),
    /// A tag at `offset` runs past `total_size` or is shorter than its header.
    BadTag {
        /// Byte offset of the tag in the boot information.
        offset: u32,
        /// Its type.
        kind: u32,
        /// Its size field in bytes.
        size: u32,
    },
    /// No memory-map tag (type 6): the loader gave no memory map.
    NoMemoryMap,
    /// The memory-map tag's `entry_size` is below 24 bytes (§3.6.8).
    BadMemoryMapEntrySize(u32),
    /// More RAM/reserved ranges than [`MAX_MEMMAP`] (`entries` given).
    TooManyMemoryRanges {
        /// Entries in the loader's map.
        entries: usize,
    },
    /// The command line is longer than [`MAX_CMDLINE`] bytes, not NUL-terminated or not UTF-8.
    Cmdline,
    /// An ACPI tag too short to hold an RSDP (size of its RSDP copy in bytes).
    ShortRsdp(usize),
}

/// The RSDP copied out of the ACPI tag: [`BootInfo::rsdp`] points here (identity-mapped
/// kernel image: its address is physical). 16-byte aligned as in BIOS memory (ACPI 6.5 §5.2.5.1).
#[repr(C, align(16))]
struct RsdpCopy([u8; RSDP_MAX]);

static mut RSDP_COPY: RsdpCopy = RsdpCopy([0; RSDP_MAX]);

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from(u32_at(b, off)) | (u64::from(u32_at(b, off + 4)) << 32)
}

/// Copy the boot data out of the multiboot2 boot information at physical address `paddr`,
/// entered with `magic` in `eax`.
///
/// # Errors
/// [`Mb2Error`]: a wrong magic, a malformed structure, no memory map, limits exceeded.
///
/// # Safety
/// `paddr` must be what the loader passed in `ebx` and the memory it points at must still hold
/// what the loader put there (call this first thing at boot, on the boot CPU, before any other
/// CPU runs). Identity mapping of 0–4 GiB is assumed.
pub unsafe fn read(magic: u32, paddr: u32) -> Result<BootInfo, Mb2Error> {
    if magic != BOOTLOADER_MAGIC {
        return Err(Mb2Error::BadMagic(magic));
    }
    if paddr == 0 || !paddr.is_multiple_of(8) {
        return Err(Mb2Error::BadAddress(paddr));
    }
    // SAFETY: per the contract the loader placed the boot information at `paddr`; its first
    // u32 is `total_size`.
    let total = unsafe { core::ptr::read_volatile(paddr as usize as *const u32) };
    if !(16..=MAX_MBI_BYTES).contains(&total) {
        return Err(Mb2Error::BadTotalSize(total));
    }
    // SAFETY: the loader wrote `total` bytes of boot information at `paddr` (checked bounds
    // above); nothing writes them while we read.
    let mbi = unsafe { core::slice::from_raw_parts(paddr as usize as *const u8, total as usize) };
    parse(mbi)
}

/// Parse the boot information bytes `mbi` (`total_size` bytes, from its start).
fn parse(mbi: &[u8]) -> Result<BootInfo, Mb2Error> {
    let mut info = BootInfo {
        memmap: heapless::Vec::new(),
        cmdline: heapless::String::new(),
        modules: heapless::Vec::new(),
        rsdp: 0,
    };
    let mut have_mmap = false;
    let mut rsdp_new = false;
    let mut off = 8usize;
    loop {
        if off + 8 > mbi.len() {
            return Err(Mb2Error::BadTag {
                offset: off as u32,
                kind: 0,
                size: 0,
            });
        }
        let kind = u32_at(mbi, off);
        let size = u32_at(mbi, off + 4);
        if size < 8 || off + size as usize > mbi.len() {
            return Err(Mb2Error::BadTag {
                offset: off as u32,
                kind,
                size,
            });
        }
        let body = &mbi[off + 8..off + size as usize];
        match kind {
            TAG_END => break,
            TAG_CMDLINE => {
                let n = body.iter().position(|&c| c == 0).ok_or(Mb2Error::Cmdline)?;
                if n > MAX_CMDLINE {
                    return Err(Mb2Error::Cmdline);
                }
                let s = core::str::from_utf8(&body[..n]).map_err(|_| Mb2Error::Cmdline)?;
                info.cmdline.clear();
                info.cmdline.push_str(s).map_err(|_| Mb2Error::Cmdline)?;
            }
            TAG_MODULE if body.len() >= 8 => {
                let start = u64::from(u32_at(body, 0));
                let end = u64::from(u32_at(body, 4));
                if info.modules.len() < MAX_MODULES && end >= start {
                    let _ = info.modules.push((start, end - start));
                }
            }
            TAG_MMAP => {
                memory_map(body, &mut info.memmap).map_err(|e| match e {
                    Some(e) => e,
                    None => Mb2Error::BadTag {
                        offset: off as u32,
                        kind,
                        size,
                    },
                })?;
                have_mmap = true;
            }
            // Prefer the ACPI 2.0+ RSDP (XSDT) when both are given.
            TAG_ACPI_OLD | TAG_ACPI_NEW if kind == TAG_ACPI_NEW || !rsdp_new => {
                info.rsdp = copy_rsdp(body, kind == TAG_ACPI_NEW)?;
                rsdp_new = kind == TAG_ACPI_NEW;
            }
            _ => {}
        }
        // Tags are 8-byte aligned (§3.6.2).
        off += (size as usize).next_multiple_of(8);
    }
    if !have_mmap {
        return Err(Mb2Error::NoMemoryMap);
    }
    Ok(info)
}

/// The memory-map tag's body (§3.6.8: `entry_size`, `entry_version`, entries) into `out`.
/// `Err(None)`: the body is too short for its header.
fn memory_map(
    body: &[u8],
    out: &mut heapless::Vec<MemRegion, MAX_MEMMAP>,
) -> Result<(), Option<Mb2Error>> {
    if body.len() < 8 {
        return Err(None);
    }
    let esize = u32_at(body, 0);
    if esize < 24 {
        return Err(Some(Mb2Error::BadMemoryMapEntrySize(esize)));
    }
    let entries = &body[8..];
    let n = entries.len() / esize as usize;
    if n > MAX_MEMMAP {
        return Err(Some(Mb2Error::TooManyMemoryRanges { entries: n }));
    }
    out.clear();
    for e in entries.chunks_exact(esize as usize) {
        // The type values are e820's (§3.6.8: 1 RAM, 3 ACPI, 4 NVS, 5 bad RAM).
        let _ = out.push(MemRegion {
            addr: u64_at(e, 0),
            size: u64_at(e, 8),
            kind: u32_at(e, 16),
        });
    }
    Ok(())
}

/// Copy the RSDP in an ACPI tag's body (`new`: tag 15, ACPI 2.0+, 36 bytes; else tag 14,
/// 20 bytes) into [`RSDP_COPY`] and return the copy's (physical) address.
fn copy_rsdp(body: &[u8], new: bool) -> Result<u64, Mb2Error> {
    let min = if new { RSDP_MAX } else { 20 };
    if body.len() < min {
        return Err(Mb2Error::ShortRsdp(body.len()));
    }
    let dst = &raw mut RSDP_COPY;
    // SAFETY: boot CPU only, before any other CPU runs and before anything reads the copy (the
    // contract of `read`); `min` ≤ RSDP_MAX bytes fit.
    unsafe {
        core::ptr::write_bytes(dst.cast::<u8>(), 0, RSDP_MAX);
        core::ptr::copy_nonoverlapping(body.as_ptr(), dst.cast::<u8>(), min);
    }
    Ok(dst as u64)
}
