//! `struct hvm_start_info` (Xen `xen/include/public/arch-x86/hvm/start_info.h`, version 1):
//! the boot data QEMU's PVH loader hands over in `ebx`. Everything we need is copied out at once,
//! because it lives in low memory that later code may reuse.
//!
//! [`BootInfo`] (`crate::bootinfo`) is also what the multiboot2 path (`arch::multiboot2`, GRUB) produces: the
//! kernel after the boot data does not know which loader ran.

/// `hvm_start_info.magic`: "xEn3" with the high bit of 'E' set.
pub const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
pub use crate::bootinfo::{BootInfo, MemRegion, E820_RAM, MAX_CMDLINE, MAX_MEMMAP, MAX_MODULES};

/// Why the boot data could not be read.
#[derive(Debug)]
#[allow(dead_code)] // fields are shown through Debug in the boot error
pub enum BootInfoError {
    /// `magic` was not [`XEN_HVM_START_MAGIC`]: not booted through PVH.
    BadMagic(u32),
    /// `version` 0 has no memory map (we need version 1).
    NoMemmap,
    /// The command line is longer than [`MAX_CMDLINE`] bytes or not UTF-8.
    Cmdline,
    /// More memory-map entries than [`MAX_MEMMAP`] (`entries` given).
    TooManyMemoryRanges {
        /// Entries in the loader's map.
        entries: u32,
    },
}

#[repr(C)]
struct StartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

#[repr(C)]
struct MemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// Copy the boot data out of `hvm_start_info` at physical address `paddr`.
///
/// # Safety
/// `paddr` must be the value the PVH loader passed in `ebx`, and low memory must still hold
/// what the loader put there (call this first thing at boot). Identity mapping is assumed.
pub unsafe fn read(paddr: u64) -> Result<BootInfo, BootInfoError> {
    // SAFETY: per the contract the loader placed a `hvm_start_info` at `paddr`.
    let si = unsafe { &*(paddr as *const StartInfo) };
    if si.magic != XEN_HVM_START_MAGIC {
        return Err(BootInfoError::BadMagic(si.magic));
    }
    if si.version < 1 || si.memmap_paddr == 0 || si.memmap_entries == 0 {
        return Err(BootInfoError::NoMemmap);
    }
    if si.memmap_entries as usize > MAX_MEMMAP {
        return Err(BootInfoError::TooManyMemoryRanges {
            entries: si.memmap_entries,
        });
    }
    let mut memmap = heapless::Vec::new();
    for i in 0..si.memmap_entries as usize {
        // SAFETY: the loader wrote `memmap_entries` entries at `memmap_paddr`.
        let e = unsafe { &*((si.memmap_paddr as *const MemmapEntry).add(i)) };
        let _ = memmap.push(MemRegion {
            addr: e.addr,
            size: e.size,
            kind: e.kind,
        });
    }
    let mut cmdline = heapless::String::new();
    if si.cmdline_paddr != 0 {
        // SAFETY: the loader wrote a NUL-terminated string at `cmdline_paddr`; we stop at NUL
        // or after MAX_CMDLINE bytes.
        let bytes = unsafe {
            let p = si.cmdline_paddr as *const u8;
            let mut n = 0;
            while n <= MAX_CMDLINE && *p.add(n) != 0 {
                n += 1;
            }
            core::slice::from_raw_parts(p, n)
        };
        let s = core::str::from_utf8(bytes).map_err(|_| BootInfoError::Cmdline)?;
        cmdline.push_str(s).map_err(|_| BootInfoError::Cmdline)?;
    }
    let mut modules = heapless::Vec::new();
    if si.modlist_paddr != 0 {
        for i in 0..(si.nr_modules as usize).min(MAX_MODULES) {
            // SAFETY: the loader wrote `nr_modules` `hvm_modlist_entry`s (paddr, size,
            // cmdline_paddr, reserved: 4 × u64) at `modlist_paddr`.
            let e = unsafe { &*((si.modlist_paddr as *const [u64; 4]).add(i)) };
            let _ = modules.push((e[0], e[1]));
        }
    }
    Ok(BootInfo {
        memmap,
        cmdline,
        modules,
        rsdp: si.rsdp_paddr,
    })
}
