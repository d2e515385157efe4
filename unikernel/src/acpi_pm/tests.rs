//! `\_S5` reader tests: hand-encoded AML, and a DSDT QEMU generated.

use super::*;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

/// `Name (\_S5, Package (4) { a, b, Zero, Zero })` as QEMU's `aml_name_decl` encodes it with
/// byte constants: NameOp, `_S5_`, PackageOp, PkgLength, NumElements, elements.
fn s5_decl(root: bool, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut elems = vec![4u8];
    elems.extend_from_slice(a);
    elems.extend_from_slice(b);
    elems.extend_from_slice(&[0x00, 0x00]);
    let mut v = vec![op::NAME];
    if root {
        v.push(b'\\');
    }
    v.extend_from_slice(b"_S5_");
    v.push(op::PACKAGE);
    v.push(u8::try_from(elems.len() + 1).unwrap());
    v.extend_from_slice(&elems);
    v
}

#[test]
fn reads_byte_word_zero_and_one_constants() {
    let aml = s5_decl(false, &[0x0a, 0x05], &[0x0b, 0x07, 0x00]);
    assert_eq!(find_s5(&aml), Ok(SleepType { a: 5, b: 7 }));
    let aml = s5_decl(true, &[0x00], &[0x01]);
    assert_eq!(find_s5(&aml), Ok(SleepType { a: 0, b: 1 }));
    let aml = s5_decl(false, &[0x0c, 6, 0, 0, 0], &[0x0e, 2, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(find_s5(&aml), Ok(SleepType { a: 6, b: 2 }));
}

#[test]
fn skips_references_and_other_scopes() {
    // A method body that reads `_S5_` (a NameString, not a declaration), and `\_SB_._S5_` (a
    // DualNamePath), before the real one.
    let mut aml = vec![0x70, b'_', b'S', b'5', b'_', 0x60];
    aml.extend_from_slice(&[
        op::NAME,
        0x2e,
        b'_',
        b'S',
        b'B',
        b'_',
        b'_',
        b'S',
        b'5',
        b'_',
        0x0a,
        1,
    ]);
    aml.extend_from_slice(&s5_decl(false, &[0x0a, 3], &[0x0a, 4]));
    assert_eq!(find_s5(&aml), Ok(SleepType { a: 3, b: 4 }));
}

#[test]
fn named_errors() {
    assert_eq!(find_s5(b""), Err(S5Error::NoS5));
    assert_eq!(
        find_s5(b"\x08_S4_\x12\x06\x04\x0a\x04\x0a\x04\x00\x00"),
        Err(S5Error::NoS5)
    );
    // A method `_S5_` (MethodOp 0x14) is not read.
    assert_eq!(find_s5(b"\x14\x06_S5_\x00"), Err(S5Error::NoS5));
    let bad = |aml: &[u8]| match find_s5(aml) {
        Err(S5Error::BadPackage { offset, why }) => (offset, why),
        other => panic!("{other:?}"),
    };
    // PkgLength past the end of the stream.
    let (off, why) = bad(b"\x08_S5_\x12\x30\x04\x0a\x05");
    assert_eq!(off, 5);
    assert!(why.contains("runs past"), "{why}");
    // One element only.
    assert!(bad(b"\x08_S5_\x12\x04\x01\x0a\x05")
        .1
        .contains("fewer than two"));
    // A string element.
    assert!(bad(b"\x08_S5_\x12\x06\x02\x0d\x41\x00\x00")
        .1
        .contains("not an integer"));
    // 8 does not fit 3 bits.
    assert!(bad(b"\x08_S5_\x12\x06\x02\x0a\x08\x0a\x00")
        .1
        .contains("3-bit"));
    // Truncated PkgLength (lead byte says one more byte follows; none does).
    assert!(bad(b"\x08_S5_\x12\x40").1.contains("PkgLength"));
    let msg = S5Error::NoS5.to_string();
    assert!(msg.contains("no \\_S5 package"), "{msg}");
}

#[test]
fn pkg_length_encodings() {
    assert_eq!(pkg_length(&[0x3f]), Some((63, 1)));
    // Lead 0x41: one byte follows, low nibble 1; 0x02 -> 0x21.
    assert_eq!(pkg_length(&[0x41, 0x02]), Some((0x21, 2)));
    assert_eq!(pkg_length(&[0x8f, 0xff, 0x01]), Some((0x1fff, 3)));
    assert_eq!(pkg_length(&[0x50, 0x00]), None, "bits 5-4 must be 0");
}

#[test]
fn pm1_control_values() {
    // SCI_EN and the reserved bit 9 kept, an old SLP_TYP and SLP_EN replaced.
    let cnt = PM1_CNT_SCI_EN | 1 << 9 | 0b111 << 10 | PM1_CNT_SLP_EN;
    assert_eq!(SleepType::cnt_typ(cnt, 0), 0x0201);
    assert_eq!(SleepType::cnt_sleep(0x0001, 5), 0x0001 | 5 << 10 | 1 << 13);
}

#[test]
fn table_checks() {
    let mut t = vec![0u8; SDT_HEADER_LEN];
    t[..4].copy_from_slice(b"DSDT");
    t.extend_from_slice(&s5_decl(false, &[0x0a, 5], &[0x0a, 5]));
    let len = u32::try_from(t.len()).unwrap();
    t[4..8].copy_from_slice(&len.to_le_bytes());
    t[9] = 0u8.wrapping_sub(t.iter().fold(0u8, |s, &b| s.wrapping_add(b)));
    assert_eq!(find_s5(aml_body(&t).unwrap()), Ok(SleepType { a: 5, b: 5 }));
    let mut bad = t.clone();
    bad[40] ^= 1;
    assert_eq!(
        aml_body(&bad),
        Err(S5Error::BadTable("checksum does not sum to zero"))
    );
    assert!(aml_body(&t[..t.len() - 1]).is_err());
    assert!(aml_body(&t[..10]).is_err());
}

/// The DSDT QEMU 10.0.2 built for q35 (fixtures/README.md).
const QEMU_Q35_DSDT: &[u8] = include_bytes!("../../fixtures/qemu-10.0-q35-dsdt.aml");

/// Fix the checksum of a mutated table (byte 9, ACPI 6.5 §5.2.6).
fn fix_checksum(t: &mut [u8]) {
    t[9] = 0;
    t[9] = 0u8.wrapping_sub(t.iter().fold(0u8, |s, &b| s.wrapping_add(b)));
}

#[test]
fn qemu_q35_dsdt_gives_s5_zero() {
    let aml = aml_body(QEMU_Q35_DSDT).unwrap();
    assert_eq!(aml.len(), 8378 - SDT_HEADER_LEN);
    // QEMU's `Name (_S5, Package (4) { 0, 0, 0, 0 })`: soft-off is SLP_TYP 0 on q35.
    assert_eq!(find_s5(aml), Ok(SleepType { a: 0, b: 0 }));
}

#[test]
fn qemu_q35_dsdt_without_s5_is_a_named_error() {
    let at = find(QEMU_Q35_DSDT, b"_S5_").unwrap();
    // Renamed to `_S6_` (no such object), checksum fixed: the table is valid, \_S5 is gone.
    let mut t = QEMU_Q35_DSDT.to_vec();
    t[at + 2] = b'6';
    fix_checksum(&mut t);
    let e = find_s5(aml_body(&t).unwrap()).unwrap_err();
    assert_eq!(e, S5Error::NoS5);
    assert!(
        e.to_string().starts_with("DSDT has no \\_S5 package"),
        "{e}"
    );
    // The first element made a StringPrefix: a package this reader refuses, by offset.
    let mut t = QEMU_Q35_DSDT.to_vec();
    t[at + 7] = 0x0d;
    fix_checksum(&mut t);
    assert_eq!(
        find_s5(aml_body(&t).unwrap()),
        Err(S5Error::BadPackage {
            offset: at + 4 - SDT_HEADER_LEN,
            why: "an element is not an integer constant (ACPI 6.5 §20.2.3)"
        })
    );
    // Unfixed checksum: the table itself is refused.
    let mut t = QEMU_Q35_DSDT.to_vec();
    t[at + 2] = b'6';
    assert_eq!(
        aml_body(&t),
        Err(S5Error::BadTable("checksum does not sum to zero"))
    );
}
