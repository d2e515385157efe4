//! Multiboot2 boot information (GNU Multiboot2 specification 1.0, §3.6): what GRUB's
//! `multiboot2` command hands over in `ebx` when it enters `mb2_start32` (`arch::boot`),
//! parsed by the library's [`crate::bootinfo::multiboot2::parse`] into the same
//! [`BootInfo`] the PVH path produces, so everything after the boot data is shared.
//!
//! The RSDP (§3.6.15/§3.6.16: copied into the ACPI tag) is copied once more into the kernel
//! image and [`BootInfo::rsdp`] points at that copy: the boot information lives in memory the
//! allocator may hand out later.

use crate::bootinfo::multiboot2::{parse, RSDP_MAX};
pub use crate::bootinfo::multiboot2::{Mb2Error, BOOTLOADER_MAGIC, HEADER_MAGIC, MAX_MBI_BYTES};
use crate::bootinfo::BootInfo;

/// The RSDP copied out of the ACPI tag: [`BootInfo::rsdp`] points here (identity-mapped
/// kernel image: its address is physical). 16-byte aligned as in BIOS memory (ACPI 6.5 §5.2.5.1).
#[repr(C, align(16))]
struct RsdpCopy([u8; RSDP_MAX]);

static mut RSDP_COPY: RsdpCopy = RsdpCopy([0; RSDP_MAX]);

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
    let (mut info, rsdp) = parse(mbi)?;
    if let Some(r) = rsdp {
        let dst = &raw mut RSDP_COPY;
        // SAFETY: boot CPU only, before any other CPU runs and before anything reads the copy
        // (the contract of this function); RSDP_MAX bytes fit in RSDP_COPY.
        unsafe { core::ptr::copy_nonoverlapping(r.bytes.as_ptr(), dst.cast::<u8>(), RSDP_MAX) };
        info.rsdp = dst as u64;
    }
    Ok(info)
}
