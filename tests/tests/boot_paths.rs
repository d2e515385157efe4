//! Boot paths beyond `-kernel`: the GRUB rescue ISO (`cargo xtask iso`, multiboot2) under
//! SeaBIOS and under OVMF (UEFI) boots to ready, takes its command line and memory map from
//! the multiboot2 tags (and, for SMP, the RSDP from the ACPI tag) and forwards frames with no
//! loss.
//!
//! The GRUB tools and OVMF are installed through `harness::setup` when missing; if that is
//! impossible (not root, no apt) the test says so loudly and returns.

use gannet_tests::*;

/// Frames per test: enough to cycle every RX buffer of both ports many times.
const FRAMES: u64 = 3_000;

/// Installs what `boot` needs; `false` (with a loud message) if it cannot be installed here.
fn tools_ready(boot: Boot) -> bool {
    let r = harness::setup::ensure_iso_tools().and_then(|()| {
        if boot == Boot::IsoUefi {
            harness::setup::ensure_ovmf()
        } else {
            Ok(())
        }
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "\n!!!!!!!! SKIPPED: boot path {boot} needs GRUB/xorriso/mtools/OVMF and they could not be installed: {e:#} !!!!!!!!\n"
            );
            false
        }
    }
}

/// Boots `boot` with `append` on `cpus` vCPUs, offers [`FRAMES`] frames each way and checks
/// them all back, the boot log's loader and command line, a clean quit and no page leak.
fn boots_and_forwards(boot: Boot, append: &str, mode: &str, cpus: u32) {
    if !tools_ready(boot) {
        return;
    }
    let mut rig = Rig::start_boot(append, gen_count(FRAMES, 64, true), boot, cpus);
    eprintln!(
        "boot path {boot}: accelerator {} ({} vCPUs)",
        rig.guest.accel(),
        cpus
    );
    let lines = rig.guest.lines();
    let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
    assert!(
        has("booting (multiboot2)"),
        "{boot}: the kernel was not entered through multiboot2\n{}",
        rig.tail()
    );
    assert!(
        // The harness appends `debug_exit=on` (GuestConfig::debug_exit).
        has(&format!("command line: \"{append} debug_exit=on\"")),
        "{boot}: the command line from grub.cfg did not arrive as given ({append:?})\n{}",
        rig.tail()
    );
    assert!(
        has(&format!("smp: {cpus} CPUs online")),
        "{boot}: not every CPU came up (MADT from the multiboot2 ACPI tag)\n{}",
        rig.tail()
    );
    forwards_every_frame_and_quits_clean(&mut rig, &format!("{boot}"), mode, FRAMES);
}

#[test]
fn iso_under_seabios_boots_and_forwards_l2() {
    boots_and_forwards(Boot::IsoBios, "mode=l2", "l2", 1);
}

/// OVMF puts the virtio-net 64-bit BARs above 64 GiB (0xe000000000 on q35): the kernel maps
/// them from its high-MMIO tables. Two vCPUs: the AP trampoline and the MADT under UEFI.
#[test]
fn iso_under_ovmf_boots_and_forwards_io() {
    boots_and_forwards(Boot::IsoUefi, "mode=io", "io", 2);
}

/// GNU Multiboot2 1.0 §3.1.1: the header lies within the first 32 KiB of the image file,
/// 8-byte aligned, magic 0xE85250D6, architecture 0 (i386), and its four fields sum to 0 mod
/// 2^32. (GRUB would refuse the image otherwise; this says why without booting.)
#[test]
fn multiboot2_header_is_in_the_first_32k() {
    let img = image();
    let bytes = std::fs::read(&img).unwrap_or_else(|e| panic!("{}: {e}", img.display()));
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let found = (0..32 * 1024 - 16)
        .step_by(8)
        .filter(|&o| o + 16 <= bytes.len())
        .find(|&o| {
            u32_at(o) == 0xe852_50d6
                && u32_at(o + 4) == 0
                && u32_at(o)
                    .wrapping_add(u32_at(o + 4))
                    .wrapping_add(u32_at(o + 8))
                    .wrapping_add(u32_at(o + 12))
                    == 0
        });
    let off = found.unwrap_or_else(|| {
        panic!(
            "no valid multiboot2 header in the first 32 KiB of {}",
            img.display()
        )
    });
    let len = u32_at(off + 8) as usize;
    assert!(len >= 24, "header_length {len} at {off:#x}");
    // The entry-address tag (type 3) must be there: the ELF entry is the PVH one.
    let tags = &bytes[off + 16..off + len];
    let has_entry_tag = tags
        .chunks(8)
        .any(|t| u16::from_le_bytes([t[0], t[1]]) == 3);
    assert!(
        has_entry_tag,
        "no entry-address tag in the header at {off:#x}"
    );
}

/// A routes file (`--routes`, QEMU `-initrd` with `-kernel`) goes onto the ISO as GRUB's
/// `module2` and reaches the router as the first boot module (multiboot2 tag 3).
#[test]
fn routes_file_arrives_as_a_multiboot2_module() {
    if !tools_ready(Boot::IsoBios) {
        return;
    }
    let dir = TestDir::new();
    let file = dir.path().join("routes.txt");
    std::fs::write(
        &file,
        "# routes file\n172.16.0.0/12,10.0.0.2\n192.168.0.0/16,10.0.1.2 # via port 1\n",
    )
    .unwrap();
    let cfg = GuestConfig {
        image: image(),
        boot: Boot::IsoBios,
        dgram_dir: dir.path().to_path_buf(),
        append: "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24".into(),
        extra_args: vec!["-initrd".to_string(), file.display().to_string()],
        ..GuestConfig::default()
    };
    let mut guest = Guest::boot(&cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
    guest
        .wait_ready(READY_TIMEOUT)
        .unwrap_or_else(|e| panic!("not ready: {e:#}\n{}", guest.tail_report()));
    assert!(
        guest
            .lines()
            .iter()
            .any(|l| l.contains("2 routes from the routes file")),
        "{}",
        guest.tail_report()
    );
    let (_, exit) = guest
        .quit(QUIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("quit: {e:#}"));
    assert_eq!(exit, GuestExit::Clean, "{}", guest.tail_report());
}
