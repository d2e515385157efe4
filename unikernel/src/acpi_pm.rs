//! ACPI fixed-hardware power management that does not touch the machine: the `\_S5` soft-off
//! sleep type read from a DSDT's AML without an AML interpreter, and the PM1 register bits
//! the kernel's power button and soft-off use (the port I/O is `arch::power` in the binary).
//!
//! Why a reader and not an interpreter: `\_S5` is, on every firmware this kernel meets (QEMU's
//! generated DSDT, SeaBIOS, OVMF, bhyve), a named package of integer constants at the root
//! scope (ACPI 6.5 §7.4.2 "\_Sx (System States)": `Name (\_S5, Package () { SLP_TYPa,
//! SLP_TYPb, … })`); an AML interpreter (the `aml` crate, ACPICA) needs a heap, which the
//! kernel does not have. So the reader looks for the AML encoding of exactly that
//! declaration, `NameOp NameString PackageOp PkgLength NumElements DataRefObject…` (ACPI 6.5
//! §20.2.5.1 DefName, §20.2.5.4 DefPackage, §20.2.4 PkgLength, §20.2.3 ComputationalData;
//! chapter 19 in ACPI 4.0), as small kernels do (OSDev's "Shutdown" recipe; Linux gets the
//! same values through ACPICA's `acpi_get_sleep_type_data`), and refuses anything else with a
//! named error ([`S5Error`]): a `\_S5` that is a method, or built at run time, is not read.
//! No QEMU value is assumed anywhere.
//!
//! A leaf: names nothing else in the crate; host-tested against a DSDT QEMU 10.0 generated
//! (`tests/fixtures/qemu-q35-dsdt.aml`, dumped once from a running guest) and mutations of it.

/// `SLP_TYPx` field of PM1x_CNT: bits 10–12 (ACPI 6.5 §4.8.3.2.1, Table 4.13 "PM1 Control
/// Registers Fixed Hardware Feature Control Bits").
pub const PM1_CNT_SLP_TYP_SHIFT: u16 = 10;
/// Mask of the `SLP_TYPx` field of PM1x_CNT (3 bits, Table 4.13).
pub const PM1_CNT_SLP_TYP_MASK: u16 = 0b111 << PM1_CNT_SLP_TYP_SHIFT;
/// `SLP_EN` of PM1x_CNT, bit 13: writing 1 enters the sleep state in `SLP_TYPx` (Table 4.13).
pub const PM1_CNT_SLP_EN: u16 = 1 << 13;
/// `SCI_EN` of PM1x_CNT, bit 0: set when the fixed hardware is in ACPI mode (OSPM owns the
/// events), clear in legacy mode (ACPI 6.5 §4.8.3.2.1 Table 4.13; §4.8.2.5 legacy/ACPI select).
pub const PM1_CNT_SCI_EN: u16 = 1 << 0;
/// `PWRBTN_STS` of PM1x_STS, bit 8: set when the fixed power button is pressed; sticky, cleared
/// by writing 1 (ACPI 6.5 §4.8.2.2.1.1 "Fixed Power Button", Table 4.16 "PM1 Status Registers
/// Fixed Hardware Feature Status Bits").
pub const PM1_STS_PWRBTN: u16 = 1 << 8;
/// `WAK_STS` of PM1x_STS, bit 15: cleared (write 1) before entering a sleep state, as ACPICA's
/// `acpi_hw_legacy_sleep` does (Table 4.16).
pub const PM1_STS_WAK: u16 = 1 << 15;
/// `PWRBTN_EN` of PM1x_EN, bit 8 (Table 4.17 "PM1 Enable Registers Fixed Hardware Feature
/// Enable Bits"). QEMU's PM1 block latches a press in `PWRBTN_STS` only while this is set
/// (`acpi_pm1_evt_power_down`), where the spec sets the status unconditionally.
pub const PM1_EN_PWRBTN: u16 = 1 << 8;

/// The `\_S5` package's first two values: what to write into `SLP_TYPx` of PM1a_CNT and
/// PM1b_CNT to enter soft-off (ACPI 6.5 §7.4.2; §16.1.7 "Transitioning from the Working to the
/// Sleeping State").
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct SleepType {
    /// `SLP_TYPa`: for PM1a_CNT (3 bits).
    pub a: u8,
    /// `SLP_TYPb`: for PM1b_CNT, when the FADT names one (3 bits).
    pub b: u8,
}

impl SleepType {
    /// PM1x_CNT with `SLP_TYPx` = `typ` and `SLP_EN` clear, every other bit of `cnt` kept
    /// (the first of the two writes ACPICA's `acpi_hw_legacy_sleep` makes; Table 4.13).
    pub fn cnt_typ(cnt: u16, typ: u8) -> u16 {
        (cnt & !(PM1_CNT_SLP_TYP_MASK | PM1_CNT_SLP_EN))
            | ((u16::from(typ) << PM1_CNT_SLP_TYP_SHIFT) & PM1_CNT_SLP_TYP_MASK)
    }

    /// [`SleepType::cnt_typ`] with `SLP_EN` set: the write that enters the state.
    pub fn cnt_sleep(cnt: u16, typ: u8) -> u16 {
        Self::cnt_typ(cnt, typ) | PM1_CNT_SLP_EN
    }
}

/// Why the `\_S5` sleep type could not be read.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum S5Error {
    /// The table is not a whole, valid ACPI definition block (ACPI 6.5 §5.2.6 header:
    /// signature, length, checksum).
    BadTable(&'static str),
    /// No `Name (\_S5_, Package …)` at the root scope: soft-off is not described (the
    /// firmware has no S5, or computes it in a method, which this reader does not run).
    NoS5,
    /// A `\_S5_` package whose encoding this reader cannot take: byte offset of the package
    /// in the AML, and what is wrong.
    BadPackage {
        /// Offset of its PackageOp in the AML stream (after the table header).
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
}

impl core::fmt::Display for S5Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            S5Error::BadTable(why) => write!(f, "DSDT is not a valid ACPI table: {why}"),
            S5Error::NoS5 => f.write_str(
                "DSDT has no \\_S5 package (ACPI 6.5 §7.4.2): soft-off is not described, so the \
                 power button and the end of `quit` cannot power off",
            ),
            S5Error::BadPackage { offset, why } => {
                write!(f, "DSDT's \\_S5 package at AML offset {offset}: {why}")
            }
        }
    }
}

/// Length of an ACPI table header (ACPI 6.5 §5.2.6, Table 5.4).
pub const SDT_HEADER_LEN: usize = 36;

/// The AML stream of definition block `table` (a DSDT or SSDT, header included): checks the
/// signature, that the header's length is the slice's, and the checksum (every byte sums to 0
/// mod 256; ACPI 6.5 §5.2.6).
///
/// # Errors
/// [`S5Error::BadTable`] naming the check that failed.
pub fn aml_body(table: &[u8]) -> Result<&[u8], S5Error> {
    let header = table
        .get(..SDT_HEADER_LEN)
        .ok_or(S5Error::BadTable("shorter than its 36-byte header"))?;
    if &header[..4] != b"DSDT" && &header[..4] != b"SSDT" {
        return Err(S5Error::BadTable("signature is neither DSDT nor SSDT"));
    }
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len != table.len() {
        return Err(S5Error::BadTable("header length differs from the table's"));
    }
    if table.iter().fold(0u8, |s, &b| s.wrapping_add(b)) != 0 {
        return Err(S5Error::BadTable("checksum does not sum to zero"));
    }
    Ok(&table[SDT_HEADER_LEN..])
}

/// AML opcodes and prefixes the reader knows (ACPI 6.5 §20.3, Table 20.2 "AML Byte Stream
/// Byte Values").
mod op {
    pub const ZERO: u8 = 0x00;
    pub const ONE: u8 = 0x01;
    pub const NAME: u8 = 0x08;
    pub const BYTE: u8 = 0x0a;
    pub const WORD: u8 = 0x0b;
    pub const DWORD: u8 = 0x0c;
    pub const QWORD: u8 = 0x0e;
    pub const PACKAGE: u8 = 0x12;
    pub const ROOT: u8 = b'\\';
}

/// The sleep type of `\_S5` from `aml`, a definition block's AML stream (after the header:
/// [`aml_body`]). Looks for `NameOp ['\'] "_S5_" PackageOp` (the object at the root scope, as
/// ACPI 6.5 §7.4.2 places it; `_S5_` under another scope or as a reference is skipped) and
/// reads the package's first two integer elements.
///
/// # Errors
/// [`S5Error::NoS5`] when no such declaration exists; [`S5Error::BadPackage`] when the
/// package's encoding is not the constant package described above (a PkgLength running past
/// the stream, fewer than two elements, an element that is not an integer constant, or a
/// value that does not fit the 3-bit `SLP_TYPx` field).
pub fn find_s5(aml: &[u8]) -> Result<SleepType, S5Error> {
    let mut from = 0;
    while let Some(at) = find(&aml[from..], b"_S5_").map(|i| i + from) {
        from = at + 1;
        let name_op = match at.checked_sub(1).map(|i| aml[i]) {
            Some(op::NAME) => true,
            Some(op::ROOT) => at >= 2 && aml[at - 2] == op::NAME,
            _ => false,
        };
        let pkg = at + 4;
        if name_op && aml.get(pkg) == Some(&op::PACKAGE) {
            return read_package(aml, pkg);
        }
    }
    Err(S5Error::NoS5)
}

/// The first index of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The package whose PackageOp is at `aml[at]`: its first two elements as a [`SleepType`].
fn read_package(aml: &[u8], at: usize) -> Result<SleepType, S5Error> {
    let bad = |why| S5Error::BadPackage { offset: at, why };
    let (len, len_bytes) = pkg_length(aml.get(at + 1..).unwrap_or(&[])).ok_or(bad(
        "its PkgLength is truncated or uses reserved bits (ACPI 6.5 §20.2.4)",
    ))?;
    // PkgLength counts itself and everything after it up to the package's end.
    let end = at + 1 + len;
    if len < len_bytes + 1 || end > aml.len() {
        return Err(bad("its PkgLength runs past the AML stream"));
    }
    let body = &aml[at + 1 + len_bytes..end];
    let count = body[0];
    if count < 2 {
        return Err(bad(
            "fewer than two elements (SLP_TYPa and SLP_TYPb are required)",
        ));
    }
    let mut rest = &body[1..];
    let mut typ = [0u8; 2];
    for t in &mut typ {
        let (v, used) = integer(rest).ok_or(bad(
            "an element is not an integer constant (ACPI 6.5 §20.2.3)",
        ))?;
        *t = u8::try_from(v)
            .ok()
            .filter(|&v| v <= 0b111)
            .ok_or(bad("a value does not fit the 3-bit SLP_TYPx field"))?;
        rest = &rest[used..];
    }
    Ok(SleepType {
        a: typ[0],
        b: typ[1],
    })
}

/// A PkgLength (ACPI 6.5 §20.2.4) at the start of `b`: its value and how many bytes it takes.
/// The lead byte's bits 7–6 count the bytes that follow (0–3); with none, bits 5–0 are the
/// length; otherwise bits 3–0 are its low nibble (bits 5–4 must be 0) and each following byte
/// the next 8 bits.
fn pkg_length(b: &[u8]) -> Option<(usize, usize)> {
    let lead = *b.first()?;
    let follow = usize::from(lead >> 6);
    if follow == 0 {
        return Some((usize::from(lead & 0x3f), 1));
    }
    if lead & 0x30 != 0 {
        return None;
    }
    let mut len = usize::from(lead & 0x0f);
    for i in 0..follow {
        len |= usize::from(*b.get(1 + i)?) << (4 + 8 * i);
    }
    Some((len, 1 + follow))
}

/// An integer constant at the start of `b` (ZeroOp, OneOp, or a Byte/Word/DWord/QWord prefix
/// and its little-endian bytes: ACPI 6.5 §20.2.3): its value and the bytes it takes. OnesOp
/// and anything else is `None` (no 3-bit field takes all ones of 64 bits).
fn integer(b: &[u8]) -> Option<(u64, usize)> {
    let n = match *b.first()? {
        op::ZERO => return Some((0, 1)),
        op::ONE => return Some((1, 1)),
        op::BYTE => 1,
        op::WORD => 2,
        op::DWORD => 4,
        op::QWORD => 8,
        _ => return None,
    };
    let bytes = b.get(1..1 + n)?;
    let v = bytes
        .iter()
        .rev()
        .fold(0u64, |v, &x| (v << 8) | u64::from(x));
    Some((v, 1 + n))
}

#[cfg(test)]
mod tests;
