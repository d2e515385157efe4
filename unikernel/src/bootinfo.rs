//! The boot data the kernel keeps from its loader, and the multiboot2 boot-information parser
//! ([`multiboot2::parse`]: pure, over the bytes, host-tested). The kernel binary reads the
//! loader's memory (`arch::pvh` for PVH's `hvm_start_info`, `arch::multiboot2` for GRUB's
//! tags) into the one [`BootInfo`], so everything after the boot data is shared.

/// e820 type of usable RAM.
pub const E820_RAM: u32 = 1;
/// Most memory-map entries kept (QEMU q35 with SeaBIOS gives 9 or so; GRUB under OVMF gave 19
/// with 256 MiB); a longer map is an error (the PVH path's `TooManyMemoryRanges`,
/// [`multiboot2::Mb2Error::TooManyMemoryRanges`]), never silently cut.
pub const MAX_MEMMAP: usize = 128;
/// Most boot modules kept.
pub const MAX_MODULES: usize = 4;
/// Longest command line kept, in bytes; longer ones are an error (never silently cut).
pub const MAX_CMDLINE: usize = 4096;

/// One e820 entry.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemRegion {
    /// Start physical address (bytes).
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// e820 type (1 = RAM, 2 = reserved, 3 = ACPI, 4 = NVS, 5 = unusable).
    pub kind: u32,
}

/// What we keep from the loader's boot data (`hvm_start_info`, or multiboot2's tags).
pub struct BootInfo {
    /// The memory map.
    pub memmap: heapless::Vec<MemRegion, MAX_MEMMAP>,
    /// The kernel command line (`-append`).
    pub cmdline: heapless::String<MAX_CMDLINE>,
    /// Boot modules (QEMU `-initrd`): physical address and size in bytes of each.
    pub modules: heapless::Vec<(u64, u64), MAX_MODULES>,
    /// ACPI RSDP physical address (0 = not given). Used by SMP bring-up (MADT).
    pub rsdp: u64,
}

/// GNU Multiboot2 specification 1.0: the boot information (§3.6) GRUB hands over.
///
/// Tags read: 1 (command line), 3 (modules), 6 (memory map), 14/15 (ACPI old/new RSDP: the
/// RSDP itself is copied into the tag, §3.6.15/§3.6.16). Everything else is skipped.
pub mod multiboot2 {
    use super::{BootInfo, MemRegion, MAX_CMDLINE, MAX_MEMMAP, MAX_MODULES};

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
    pub const RSDP_MAX: usize = 36;

    /// Why the multiboot2 boot information could not be used.
    #[derive(Debug, PartialEq, Eq)]
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

    /// An RSDP copied out of an ACPI tag.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Rsdp {
        /// The structure's bytes (the first `len`; zero after).
        pub bytes: [u8; RSDP_MAX],
        /// 20 (ACPI 1.0, tag 14) or 36 (ACPI 2.0+, tag 15).
        pub len: usize,
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from(u32_at(b, off)) | (u64::from(u32_at(b, off + 4)) << 32)
    }

    /// Parse the boot information bytes `mbi` (`total_size` bytes, from its start; §3.6.1
    /// fixed part, then tags 8-byte aligned up to the end tag) into the shared [`BootInfo`] and
    /// the RSDP found in an ACPI tag (the ACPI 2.0+ one, tag 15, when both are given). The
    /// returned [`BootInfo::rsdp`] is 0: the caller copies the RSDP somewhere that stays and sets
    /// it.
    ///
    /// # Errors
    /// [`Mb2Error`]: a tag past the end or shorter than its header, no end tag, no memory-map
    /// tag, a memory map longer than [`MAX_MEMMAP`] or with entries under 24 bytes, a bad command
    /// line, an ACPI tag too short for its RSDP.
    pub fn parse(mbi: &[u8]) -> Result<(BootInfo, Option<Rsdp>), Mb2Error> {
        let mut info = BootInfo {
            memmap: heapless::Vec::new(),
            cmdline: heapless::String::new(),
            modules: heapless::Vec::new(),
            rsdp: 0,
        };
        let mut have_mmap = false;
        let mut rsdp: Option<Rsdp> = None;
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
                TAG_ACPI_OLD | TAG_ACPI_NEW
                    if kind == TAG_ACPI_NEW || rsdp.is_none_or(|r| r.len < RSDP_MAX) =>
                {
                    rsdp = Some(copy_rsdp(body, kind == TAG_ACPI_NEW)?);
                }
                _ => {}
            }
            // Tags are 8-byte aligned (§3.6.2).
            off += (size as usize).next_multiple_of(8);
        }
        if !have_mmap {
            return Err(Mb2Error::NoMemoryMap);
        }
        Ok((info, rsdp))
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

    /// The RSDP in an ACPI tag's body (`new`: tag 15, ACPI 2.0+, 36 bytes; else tag 14, 20 bytes).
    fn copy_rsdp(body: &[u8], new: bool) -> Result<Rsdp, Mb2Error> {
        let len = if new { RSDP_MAX } else { 20 };
        if body.len() < len {
            return Err(Mb2Error::ShortRsdp(body.len()));
        }
        let mut bytes = [0; RSDP_MAX];
        bytes[..len].copy_from_slice(&body[..len]);
        Ok(Rsdp { bytes, len })
    }
}

#[cfg(test)]
mod tests {
    use super::multiboot2::{parse, Mb2Error, RSDP_MAX};
    use super::*;
    use std::vec::Vec;

    /// A boot information structure: the fixed part, `tags` (type, body) each padded to 8,
    /// then the end tag unless `end` is false.
    fn mbi(tags: &[(u32, Vec<u8>)], end: bool) -> Vec<u8> {
        let mut b = std::vec![0u8; 8];
        for (kind, body) in tags {
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(&(8 + body.len() as u32).to_le_bytes());
            b.extend_from_slice(body);
            while !b.len().is_multiple_of(8) {
                b.push(0);
            }
        }
        if end {
            b.extend_from_slice(&[0, 0, 0, 0, 8, 0, 0, 0]);
        }
        let n = b.len() as u32;
        b[..4].copy_from_slice(&n.to_le_bytes());
        b
    }

    fn mmap(entries: &[(u64, u64, u32)]) -> (u32, Vec<u8>) {
        let mut body = Vec::new();
        body.extend_from_slice(&24u32.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        for &(a, s, k) in entries {
            body.extend_from_slice(&a.to_le_bytes());
            body.extend_from_slice(&s.to_le_bytes());
            body.extend_from_slice(&k.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
        }
        (6, body)
    }

    fn cmdline(s: &str) -> (u32, Vec<u8>) {
        let mut body = s.as_bytes().to_vec();
        body.push(0);
        (1, body)
    }

    #[test]
    fn reads_cmdline_memory_map_modules_and_the_new_rsdp() {
        let mut old = std::vec![b'o'; 20];
        old[..8].copy_from_slice(b"RSD PTR ");
        let new: Vec<u8> = (0..RSDP_MAX as u8).collect();
        let mut module = Vec::new();
        module.extend_from_slice(&0x20_0000u32.to_le_bytes());
        module.extend_from_slice(&0x20_1000u32.to_le_bytes());
        module.extend_from_slice(b"routes\0");
        let b = mbi(
            &[
                cmdline("mode=l2 burst=8"),
                (14, old),
                mmap(&[
                    (0, 0x9fc00, 1),
                    (0x10_0000, 0xff0_0000, 1),
                    (0xfec0_0000, 0x1000, 2),
                ]),
                (3, module),
                (15, new.clone()),
                (21, std::vec![1, 2, 3, 4]), // load base address: skipped
            ],
            true,
        );
        let (info, rsdp) = parse(&b).unwrap();
        assert_eq!(info.cmdline.as_str(), "mode=l2 burst=8");
        assert_eq!(info.memmap.len(), 3);
        assert_eq!(
            info.memmap[1],
            MemRegion {
                addr: 0x10_0000,
                size: 0xff0_0000,
                kind: E820_RAM
            }
        );
        assert_eq!(info.memmap[2].kind, 2);
        assert_eq!(info.modules.as_slice(), &[(0x20_0000, 0x1000)]);
        let r = rsdp.unwrap();
        assert_eq!(
            (r.len, &r.bytes[..]),
            (RSDP_MAX, &new[..]),
            "tag 15 wins over 14"
        );
        assert_eq!(info.rsdp, 0, "the caller places the RSDP");
    }

    #[test]
    fn the_old_rsdp_alone_is_kept() {
        let mut old = std::vec![7u8; 20];
        old[..8].copy_from_slice(b"RSD PTR ");
        let b = mbi(
            &[mmap(&[(0x10_0000, 0x100_0000, 1)]), (14, old.clone())],
            true,
        );
        let (info, rsdp) = parse(&b).unwrap();
        let r = rsdp.unwrap();
        assert_eq!((r.len, &r.bytes[..20]), (20, &old[..]));
        assert!(info.cmdline.is_empty());
    }

    #[test]
    fn a_missing_memory_map_is_a_named_error() {
        let b = mbi(&[cmdline("mode=io")], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::NoMemoryMap));
    }

    #[test]
    fn too_many_ranges_is_a_named_error_not_a_cut() {
        let many: Vec<(u64, u64, u32)> = (0..MAX_MEMMAP as u64 + 1)
            .map(|i| (i << 20, 1 << 20, 1))
            .collect();
        let b = mbi(&[mmap(&many)], true);
        assert_eq!(
            parse(&b).err(),
            Some(Mb2Error::TooManyMemoryRanges {
                entries: MAX_MEMMAP + 1
            })
        );
        let b = mbi(&[mmap(&many[..MAX_MEMMAP])], true);
        assert_eq!(parse(&b).unwrap().0.memmap.len(), MAX_MEMMAP);
    }

    #[test]
    fn malformed_structures_are_named_errors() {
        // No end tag: the walk runs off the end.
        let b = mbi(&[mmap(&[(0x10_0000, 0x100_0000, 1)])], false);
        assert!(matches!(parse(&b), Err(Mb2Error::BadTag { .. })));
        // A tag claiming more bytes than there are.
        let mut b = mbi(&[mmap(&[(0x10_0000, 0x100_0000, 1)])], true);
        b[12..16].copy_from_slice(&4096u32.to_le_bytes());
        assert!(matches!(
            parse(&b),
            Err(Mb2Error::BadTag {
                offset: 8,
                kind: 6,
                size: 4096
            })
        ));
        // A tag shorter than its own header.
        let mut b = mbi(&[cmdline("x")], true);
        b[12..16].copy_from_slice(&4u32.to_le_bytes());
        assert!(matches!(parse(&b), Err(Mb2Error::BadTag { size: 4, .. })));
        // Memory-map entries under 24 bytes.
        let (_, mut body) = mmap(&[(0, 1, 1)]);
        body[..4].copy_from_slice(&16u32.to_le_bytes());
        let b = mbi(&[(6, body)], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::BadMemoryMapEntrySize(16)));
        // A command line without its NUL, and one that is not UTF-8.
        let b = mbi(&[(1, b"abc".to_vec()), mmap(&[(0, 1, 1)])], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::Cmdline));
        let b = mbi(&[(1, std::vec![0xff, 0xfe, 0]), mmap(&[(0, 1, 1)])], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::Cmdline));
        // An ACPI 2.0 tag too short for its RSDP.
        let b = mbi(&[mmap(&[(0, 1, 1)]), (15, std::vec![0; 20])], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::ShortRsdp(20)));
    }

    #[test]
    fn a_command_line_over_the_limit_is_refused() {
        let long = "a".repeat(MAX_CMDLINE + 1);
        let b = mbi(&[cmdline(&long), mmap(&[(0, 1, 1)])], true);
        assert_eq!(parse(&b).err(), Some(Mb2Error::Cmdline));
        let ok = "a".repeat(MAX_CMDLINE);
        let b = mbi(&[cmdline(&ok), mmap(&[(0, 1, 1)])], true);
        assert_eq!(parse(&b).unwrap().0.cmdline.len(), MAX_CMDLINE);
    }
}
