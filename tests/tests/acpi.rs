//! Boot errors from absent or broken ACPI tables (issue 5): the kernel finds CPUs through the
//! MADT, so each case must end in a named boot error and a guest-failure exit, never a hang.
//!
//! The broken tables are crafted (`gannet_tests::acpi`), loaded into guest memory by QEMU's
//! generic loader and handed to the kernel with `acpi_rsdp=` (Linux's parameter of that name).
//! The first test boots valid crafted tables and forwards, which proves the tables reach the
//! kernel intact, so the failures below come from the faults, not from the delivery.

use gannet_tests::acpi::{self, MadtFault, TABLES_ADDR};
use gannet_tests::*;

/// Boots `-smp 2` with the crafted tables and `acpi_rsdp=`; returns how it ended and the log.
fn boot_tables(apic_ids: &[u8], fault: MadtFault) -> (GuestExit, Vec<String>) {
    let blob = acpi::tables(TABLES_ADDR, apic_ids, fault);
    boot_failing_with(&format!("acpi_rsdp={TABLES_ADDR:#x}"), 2, 2, |dir| {
        acpi::loader_args(dir, &blob)
    })
}

/// The `ERROR` line of a failed boot; panics with the log when there is none.
fn error_line(exit: GuestExit, lines: &[String]) -> String {
    assert_eq!(exit, GuestExit::GuestFailure, "log:\n{}", lines.join("\n"));
    lines
        .iter()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_else(|| panic!("no ERROR line; log:\n{}", lines.join("\n")))
        .clone()
}

#[test]
fn crafted_tables_bring_up_both_cpus() {
    let dir = TestDir::new();
    let blob = acpi::tables(TABLES_ADDR, &[0, 1], MadtFault::None);
    let extra = acpi::loader_args(dir.path(), &blob);
    let (mut rig, _) = Rig::start_pairs(
        &format!("mode=l2 log=debug acpi_rsdp={TABLES_ADDR:#x}"),
        gen_count(200, 64, false),
        extra,
        2,
        1,
    );
    let lines = rig.guest.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("RSDP at {TABLES_ADDR:#x} (acpi_rsdp="))),
        "acpi_rsdp= not taken:\n{}",
        rig.tail()
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("MADT lists 2 CPUs (APIC IDs [0, 1])")),
        "crafted MADT not read:\n{}",
        rig.tail()
    );
    assert!(
        lines.iter().any(|l| l.contains("smp: 2 CPUs online")),
        "{}",
        rig.tail()
    );
    let report = rig.run();
    let s = rig.quit();
    assert_eq!(s.ports[1].tx, 200, "{report:?}");
    assert_no_leak(&s);
}

#[test]
fn absent_acpi_is_a_named_error() {
    // QEMU's i440FX machine without ACPI has no PIIX4 PM device, so SeaBIOS builds no tables
    // either (q35 with acpi=off still gets SeaBIOS's own); the later -machine overrides q35.
    let (exit, lines) =
        boot_failing_with("", 2, 2, |_| vec!["-machine".into(), "pc,acpi=off".into()]);
    let e = error_line(exit, &lines);
    assert!(e.contains("smp: no ACPI tables (RSDP)"), "{e}");
    assert!(
        e.contains("acpi_rsdp="),
        "error does not say what to do: {e}"
    );
}

#[test]
fn madt_with_bad_checksum_is_a_named_error() {
    let (exit, lines) = boot_tables(&[0, 1], MadtFault::BadChecksum);
    let e = error_line(exit, &lines);
    assert!(e.contains("smp: no usable MADT"), "{e}");
}

#[test]
fn zero_length_madt_entry_is_a_named_error_not_a_hang() {
    let (exit, lines) = boot_tables(&[0, 1], MadtFault::ZeroLengthEntry);
    let e = error_line(exit, &lines);
    assert!(
        e.contains("broken MADT: entry at offset 60 has length 0 (a 64-byte table)"),
        "{e}"
    );
    let (exit, lines) = boot_tables(&[0, 1], MadtFault::OverlongEntry);
    let e = error_line(exit, &lines);
    assert!(
        e.contains("broken MADT: entry at offset 60 has length 40 (a 64-byte table)"),
        "{e}"
    );
}

#[test]
fn madt_without_the_boot_cpu_is_a_named_error() {
    let (exit, lines) = boot_tables(&[1, 2], MadtFault::None);
    let e = error_line(exit, &lines);
    assert!(
        e.contains("broken MADT: the boot CPU's APIC ID is not in the MADT"),
        "{e}"
    );
}

#[test]
fn cpu_that_does_not_answer_is_named() {
    // APIC ID 5 does not exist under -smp 2: INIT-SIPI-SIPI goes nowhere.
    let (exit, lines) = boot_tables(&[0, 1, 5], MadtFault::None);
    let e = error_line(exit, &lines);
    assert!(
        e.contains("smp: cpu 2 (APIC ID 5) did not answer INIT-SIPI-SIPI within 200 ms"),
        "{e}"
    );
    assert!(
        lines.iter().any(|l| l.contains("cpu 1 (APIC ID 1) online")),
        "the real AP should have come up first:\n{}",
        lines.join("\n")
    );
}
