//! The ACPI MCFG table (PCI Firmware Specification 3.2 §4.1.2): where segment 0's PCIe ECAM
//! region is, so PCI configuration access can use it instead of the I/O ports.

use super::power::IdentityAcpi;
use acpi::mcfg::Mcfg;
use acpi::AcpiTables;

/// What the MCFG table offers for PCI configuration access.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Ecam {
    /// Segment 0's ECAM region covers buses 0..=255 at this physical address.
    Whole(u64),
    /// Segment 0's region covers only buses `start..=end` (port I/O reaches all).
    Partial {
        /// Its address.
        base: u64,
        /// First bus.
        start: u8,
        /// Last bus.
        end: u8,
    },
    /// No MCFG table (QEMU `pc`), or no entry for segment 0.
    None,
}

/// Segment 0's ECAM from the MCFG table of the ACPI tables at `rsdp` (0: the BIOS areas are
/// searched).
pub fn ecam(rsdp: u64) -> Ecam {
    // SAFETY: `rsdp` comes from the loader or `acpi_rsdp=` (or is 0: the BIOS areas are
    // scanned); the tables are identity-mapped, as in `power::init`.
    let tables = unsafe {
        if rsdp != 0 {
            AcpiTables::from_rsdp(IdentityAcpi, rsdp as usize)
        } else {
            AcpiTables::search_for_rsdp_bios(IdentityAcpi)
        }
    };
    let Ok(tables) = tables else {
        return Ecam::None;
    };
    let Ok(mcfg) = tables.find_table::<Mcfg>() else {
        return Ecam::None;
    };
    // Copies: the entries are packed.
    let entries = mcfg.entries();
    let Some(e) = entries.iter().find(|e| {
        let seg = e.pci_segment_group;
        seg == 0
    }) else {
        return Ecam::None;
    };
    let (base, start, end) = (e.base_address, e.bus_number_start, e.bus_number_end);
    if start == 0 && end == 255 && base != 0 && base % (1 << 20) == 0 {
        Ecam::Whole(base)
    } else {
        Ecam::Partial { base, start, end }
    }
}
