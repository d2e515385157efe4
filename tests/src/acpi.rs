//! Crafted ACPI tables for the MADT error-path tests: an RSDP (revision 2), an XSDT with one
//! entry and an MADT with Processor Local APIC entries, laid out at a fixed guest-physical
//! address so QEMU's generic loader (`-device loader,file=…,addr=…,force-raw=on`) can place them
//! and the kernel can be pointed at them with `acpi_rsdp=`.
//!
//! Layouts from ACPI 6.5: RSDP §5.2.5.3 (Table 5.3), system description table header §5.2.6
//! (Table 5.4), XSDT §5.2.8, MADT §5.2.12 (Table 5.43), Processor Local APIC structure
//! §5.2.12.2 (Table 5.47). Checksums: all bytes of the covered range sum to 0 mod 256.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Guest-physical address the crafted tables are loaded at: conventional memory below the EBDA
/// that SeaBIOS leaves alone after POST and the kernel never allocates (its zone starts at 1 MiB).
/// `crafted_tables_bring_up_both_cpus` proves the tables survive there.
pub const TABLES_ADDR: u64 = 0x9f000;

/// Offset of the XSDT from the RSDP (bytes).
const XSDT_OFF: usize = 0x40;
/// Offset of the MADT from the RSDP (bytes).
const MADT_OFF: usize = 0x80;
/// Local APIC address the MADT announces (the architectural default).
const LAPIC_ADDR: u32 = 0xfee0_0000;
/// MADT flags: PCAT_COMPAT (dual 8259s present).
const MADT_PCAT_COMPAT: u32 = 1;
/// Processor Local APIC flags: Enabled.
const LAPIC_ENABLED: u32 = 1;

/// What goes wrong with the crafted MADT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadtFault {
    /// None: a valid table.
    None,
    /// The MADT's checksum is off by a bit pattern.
    BadChecksum,
    /// An extra entry (a reserved type) whose length byte is 0.
    ZeroLengthEntry,
    /// An extra entry whose length runs past the table's end.
    OverlongEntry,
}

/// Makes `bytes[..]` sum to 0 by writing `bytes[at]`.
fn fix_checksum(bytes: &mut [u8], at: usize) {
    bytes[at] = 0;
    let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[at] = sum.wrapping_neg();
}

/// A system description table: the 36-byte header (§5.2.6) and `body`, checksum set.
fn sdt(signature: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(36 + body.len()).expect("table under 4 GiB");
    let mut t = Vec::with_capacity(36 + body.len());
    t.extend_from_slice(signature);
    t.extend_from_slice(&len.to_le_bytes());
    t.push(revision);
    t.push(0); // checksum, below
    t.extend_from_slice(b"GANNET"); // OEMID
    t.extend_from_slice(b"TESTTBL "); // OEM table ID
    t.extend_from_slice(&1u32.to_le_bytes()); // OEM revision
    t.extend_from_slice(b"GNNT"); // creator ID
    t.extend_from_slice(&1u32.to_le_bytes()); // creator revision
    t.extend_from_slice(body);
    fix_checksum(&mut t, 9);
    t
}

/// RSDP + XSDT + MADT as one blob to load at `base` (guest-physical). The MADT lists one
/// enabled Processor Local APIC entry per `apic_ids` element (processor UID = index) and then
/// the entry `fault` asks for.
pub fn tables(base: u64, apic_ids: &[u8], fault: MadtFault) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&LAPIC_ADDR.to_le_bytes());
    body.extend_from_slice(&MADT_PCAT_COMPAT.to_le_bytes());
    for (uid, &id) in apic_ids.iter().enumerate() {
        body.extend_from_slice(&[0, 8, uid as u8, id]); // type 0, length 8
        body.extend_from_slice(&LAPIC_ENABLED.to_le_bytes());
    }
    match fault {
        MadtFault::ZeroLengthEntry => body.extend_from_slice(&[0x7f, 0, 0, 0]),
        MadtFault::OverlongEntry => body.extend_from_slice(&[0x7f, 40, 0, 0]),
        MadtFault::None | MadtFault::BadChecksum => {}
    }
    let mut madt = sdt(b"APIC", 3, &body);
    if fault == MadtFault::BadChecksum {
        madt[9] ^= 0x55;
    }
    let xsdt = sdt(b"XSDT", 1, &(base + MADT_OFF as u64).to_le_bytes());
    let mut rsdp = Vec::with_capacity(36);
    rsdp.extend_from_slice(b"RSD PTR ");
    rsdp.push(0); // checksum over the first 20 bytes
    rsdp.extend_from_slice(b"GANNET");
    rsdp.push(2); // revision: ACPI 2.0+, use the XSDT
    rsdp.extend_from_slice(&0u32.to_le_bytes()); // no RSDT
    rsdp.extend_from_slice(&36u32.to_le_bytes()); // length
    rsdp.extend_from_slice(&(base + XSDT_OFF as u64).to_le_bytes());
    rsdp.extend_from_slice(&[0, 0, 0, 0]); // extended checksum, reserved
    fix_checksum(&mut rsdp[..20], 8);
    fix_checksum(&mut rsdp[..36], 32);
    let mut out = vec![0u8; MADT_OFF + madt.len()];
    out[..36].copy_from_slice(&rsdp);
    out[XSDT_OFF..XSDT_OFF + xsdt.len()].copy_from_slice(&xsdt);
    out[MADT_OFF..].copy_from_slice(&madt);
    out
}

/// Writes `blob` to `dir/acpi-tables.bin` and returns the QEMU arguments that load it at
/// [`TABLES_ADDR`].
pub fn loader_args(dir: &Path, blob: &[u8]) -> Vec<String> {
    let path: PathBuf = dir.join("acpi-tables.bin");
    let mut f =
        std::fs::File::create(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    f.write_all(blob)
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    vec![
        "-device".into(),
        format!(
            "loader,file={},addr={TABLES_ADDR:#x},force-raw=on",
            path.display()
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
    }

    #[test]
    fn layout_and_checksums() {
        let t = tables(TABLES_ADDR, &[0, 1], MadtFault::None);
        assert_eq!(&t[..8], b"RSD PTR ");
        assert_eq!(sum(&t[..20]), 0);
        assert_eq!(sum(&t[..36]), 0);
        let xsdt_at = u64::from_le_bytes(t[24..32].try_into().unwrap());
        assert_eq!(xsdt_at, TABLES_ADDR + XSDT_OFF as u64);
        assert_eq!(&t[XSDT_OFF..XSDT_OFF + 4], b"XSDT");
        assert_eq!(sum(&t[XSDT_OFF..XSDT_OFF + 44]), 0);
        let madt = &t[MADT_OFF..];
        assert_eq!(&madt[..4], b"APIC");
        assert_eq!(
            u32::from_le_bytes(madt[4..8].try_into().unwrap()) as usize,
            madt.len()
        );
        assert_eq!(madt.len(), 44 + 2 * 8);
        assert_eq!(sum(madt), 0);
        assert_eq!(&madt[44..48], &[0, 8, 0, 0]);
        assert_eq!(&madt[52..56], &[0, 8, 1, 1]);
        let bad = tables(TABLES_ADDR, &[0], MadtFault::BadChecksum);
        assert_ne!(sum(&bad[MADT_OFF..]), 0);
        let zero = tables(TABLES_ADDR, &[0], MadtFault::ZeroLengthEntry);
        assert_eq!(zero[MADT_OFF + 44 + 8 + 1], 0);
        assert_eq!(sum(&zero[MADT_OFF..]), 0);
    }
}
