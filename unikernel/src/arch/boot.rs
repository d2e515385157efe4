//! PVH entry (Xen `XEN_ELFNOTE_PHYS32_ENTRY`, docs/misc/pvh.pandoc) and the switch to long mode.
//!
//! QEMU's PVH loader enters `pvh_start32` in 32-bit protected mode, paging off, with `ebx` =
//! physical address of `struct hvm_start_info`. We zero .bss (but the stacks), identity-map 0–4 GiB with 2 MiB
//! pages (RAM, the PCI hole, LAPIC/IOAPIC and 32-bit BARs), enable PAE + long mode + NX, load a
//! 64-bit GDT, and call `kernel_main(start_info_paddr, entry_tsc)` on a 1 MiB boot stack
//! (`entry_tsc`: the TSC read first thing at the PVH entry, the origin of the boot phases).
//!
//! The same image also carries a multiboot2 header (GNU Multiboot2 1.0 §3.1: magic
//! `0xE85250D6`, architecture 0 = i386, an entry-address tag naming `mb2_start32`), placed by
//! `linker.ld` at the start of `.text`, i.e. within the first 32 KiB of the ELF file and 8-byte
//! aligned, as §3.1.1 requires. GRUB (`multiboot2 /boot/gannet …`, BIOS or UEFI; it calls
//! ExitBootServices first) loads the PT_LOAD segments at their physical addresses and enters
//! `mb2_start32` in 32-bit protected mode, paging off, `eax` = `0x36d76289`, `ebx` = the boot
//! information's physical address (§3.3). That entry stores `eax` in `boot_mb2_magic` ([`mb2_magic`]) and
//! joins the PVH path after its memory check (GRUB already refused to load an image RAM cannot
//! hold); `kernel_main` then reads the boot information with `arch::multiboot2` instead of
//! `arch::pvh`. Under PVH `boot_mb2_magic` stays 0. (QEMU's own `-kernel` loader tries
//! multiboot1 first, whose header magic differs; a multiboot2 header leaves PVH alone.)

unsafe extern "C" {
    /// `eax` at the multiboot2 entry; 0 when entered through PVH (the `.data` initial value).
    static boot_mb2_magic: u32;
}

/// The multiboot2 loader's magic (`eax` at `mb2_start32`, §3.3), or 0 when the kernel was
/// entered through PVH: which boot data `ebx` pointed at.
pub fn mb2_magic() -> u32 {
    // SAFETY: a 4-byte static in .data, written only by the 32-bit entry before any Rust runs.
    unsafe { core::ptr::read_volatile(&raw const boot_mb2_magic) }
}

/// Boot stack size in bytes. 1 MiB: `virtio-drivers`' queue structs are large (docs/CRATES.md §1.5).
pub const BOOT_STACK_SIZE: usize = 1 << 20;

core::arch::global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .balign 4
    .long 4                 /* namesz: "Xen\0" */
    .long 8                 /* descsz: 8-byte entry, read as size_t by QEMU 7.2 */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start32
    .balign 4

    /* Multiboot2 header (§3.1): magic, architecture, header_length, checksum (the four sum
     * to 0 mod 2^32), then tags 8-byte aligned: entry address (type 3), end (type 0). */
    .section .multiboot2, "a"
    .balign 8
mb2_header:
    .long {mb2_magic}
    .long 0
    .long mb2_header_end - mb2_header
    .long 0x100000000 - ({mb2_magic} + (mb2_header_end - mb2_header))
    .balign 8
    .short 3                        /* entry address tag */
    .short 0                        /* flags: required */
    .long 12
    .long mb2_start32
    .balign 8
    .short 0                        /* end tag */
    .short 0
    .long 8
mb2_header_end:

    .section .data.boot, "aw"
    .balign 4
.global boot_mb2_magic
boot_mb2_magic:
    .long 0

    .section .bss.boot, "aw", @nobits
    .balign 4096
boot_pml4:  .skip 4096
boot_pdpt:  .skip 4096
boot_pd:    .skip 4096 * 4
boot_stack_bottom:
    .skip {stack_size}
.global boot_stack_top
boot_stack_top:

    .section .rodata.boot, "a"
    .balign 8
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff    /* 0x10: data */
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt
boot_mem_msg1:
    .asciz "ERROR gannet: memory error: RAM does not cover the kernel image (1 MiB up to __kernel_end, .bss included): give the guest at least "
boot_mem_msg2:
    .asciz " MiB for the image alone (QEMU -m; forwarding needs more, see the README)\r\n"

    .section .text.boot32, "ax"
    .code32
/* Multiboot2 entry (§3.3): eax = magic, ebx = boot information. The image is where GRUB put
 * its PT_LOAD segments, all in RAM, so the PVH memory check below is not needed. */
.global mb2_start32
mb2_start32:
    cli
    cld
    mov %ebx, %esi                  /* boot information paddr, kept until kernel_main */
    mov %eax, %edi
    rdtsc
    mov %eax, %ebp
    mov %edx, %ebx
    mov %edi, boot_mb2_magic        /* nonzero: kernel_main reads multiboot2 tags */
    jmp boot_mem_ok

.global pvh_start32
pvh_start32:
    cli
    cld
    mov %ebx, %esi                  /* hvm_start_info paddr, kept until kernel_main */
    /* The guest clock's origin (arch::phases): the TSC at the PVH entry, in ebx:ebp until
     * kernel_main (nothing below touches either on the way there). */
    rdtsc
    mov %eax, %ebp
    mov %edx, %ebx

    /* RAM must hold the whole image, .bss (boot stack and page tables) included, before
     * anything is written there: with too little (QEMU -m 4M and below today) the stack and
     * .bss lie past the end of RAM and the boot used to hang or fault silently. The memory map
     * (hvm_start_info version >= 1: memmap_paddr at 40, memmap_entries at 48; entries of 24
     * bytes: addr, size, type, 1 = RAM) must have one RAM entry covering
     * [__kernel_start, __kernel_end); else print a named error on COM1 and exit through
     * isa-debug-exit (QEMU status 3). No stack, no memory written. */
    cmpl $1, 4(%esi)
    jb boot_mem_ok                  /* no memory map: nothing to check against */
    mov 40(%esi), %edi
    mov 48(%esi), %ecx
boot_mem_next:
    test %ecx, %ecx
    jz boot_mem_short
    cmpl $1, 16(%edi)               /* type RAM */
    jne boot_mem_skip
    cmpl $0, 4(%edi)                /* starts above 4 GiB */
    jne boot_mem_skip
    mov (%edi), %eax
    cmp $__kernel_start, %eax
    ja boot_mem_skip                /* starts above the image */
    cmpl $0, 12(%edi)
    jne boot_mem_ok                 /* 4 GiB or more */
    add 8(%edi), %eax
    jc boot_mem_ok                  /* ends at or above 4 GiB */
    cmp $__kernel_end, %eax
    jae boot_mem_ok
boot_mem_skip:
    add $24, %edi
    dec %ecx
    jmp boot_mem_next
boot_mem_short:
    mov $0x3f8, %dx
    mov $boot_mem_msg1, %edi
boot_mem_puts1:
    movb (%edi), %al
    test %al, %al
    jz boot_mem_mib
    out %al, %dx
    inc %edi
    jmp boot_mem_puts1
boot_mem_mib:
    /* n = ceil(__kernel_end / 1 MiB) in decimal (n < 1000), leading zeros skipped. */
    mov $__kernel_end + 0xfffff, %eax
    shr $20, %eax
    mov $100, %ebx                  /* place value */
    xor %ebp, %ebp                  /* nonzero once a digit was printed */
boot_mem_digit:
    xor %edx, %edx
    div %ebx                        /* eax = digit, edx = rest */
    mov %edx, %edi
    mov $0x3f8, %dx
    or %eax, %ebp
    jnz boot_mem_put
    cmp $1, %ebx
    jne boot_mem_place              /* a leading zero */
boot_mem_put:
    add $0x30, %al
    out %al, %dx
boot_mem_place:
    mov %ebx, %eax
    xor %edx, %edx
    mov $10, %ecx
    div %ecx
    mov %eax, %ebx
    mov %edi, %eax
    test %ebx, %ebx
    jnz boot_mem_digit
    mov $boot_mem_msg2, %edi
    mov $0x3f8, %dx
boot_mem_puts2:
    movb (%edi), %al
    test %al, %al
    jz boot_mem_exit
    out %al, %dx
    inc %edi
    jmp boot_mem_puts2
boot_mem_exit:
    mov $0xf4, %dx
    mov $1, %eax                    /* ExitCode::Failure: QEMU exits with status 3 */
    out %eax, %dx
3:
    cli
    hlt
    jmp 3b
boot_mem_ok:

    /* Zero the boot PML4 and PDPT (the four page directories are written whole below). The
     * rest of .bss is zeroed in long mode, 8 bytes per `rep stosq` step (under TCG each step
     * of a `rep` string instruction costs about the same whatever its width): the stacks
     * (.bss.boot's boot stack, .bss.nozero) are skipped, being never read before written. */
    xor %eax, %eax
    mov $boot_pml4, %edi
    mov $(boot_pd - boot_pml4), %ecx
    shr $2, %ecx
    rep stosl

    mov $boot_stack_top, %esp

    /* PML4[0] -> PDPT; PDPT[0..4] -> 4 page directories. */
    mov $boot_pdpt, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $0x3, %eax
    mov %eax, boot_pdpt
    add $4096, %eax
    mov %eax, boot_pdpt + 8
    add $4096, %eax
    mov %eax, boot_pdpt + 16
    add $4096, %eax
    mov %eax, boot_pdpt + 24

    /* 2048 PDEs: (i << 21) | PRESENT | WRITABLE | PAGE_SIZE (2 MiB). */
    mov $boot_pd, %edi
    mov $0x83, %eax
    xor %ecx, %ecx
1:
    mov %eax, (%edi, %ecx, 8)
    movl $0, 4(%edi, %ecx, 8)
    add $0x200000, %eax
    inc %ecx
    cmp $2048, %ecx
    jne 1b

    /* CR4.PAE */
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    /* EFER.LME | EFER.NXE */
    mov $0xC0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    /* CR0.PG | CR0.WP */
    mov %cr0, %eax
    or $0x80010000, %eax
    mov %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_start

    .code64
long_mode_start:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    movabs $boot_stack_top, %rsp
    /* Zero .bss from __bss_zero_start to __bss_end (both 8-byte aligned, linker.ld); rsi (the
     * boot information's address) and rbx:rbp (the entry TSC) are kept. */
    xor %eax, %eax
    movabs $__bss_zero_start, %rdi
    movabs $__bss_end, %rcx
    sub %rdi, %rcx
    shr $3, %rcx
    cld
    rep stosq
    mov %esi, %edi
    /* Second argument: the entry TSC, ebx:ebp (upper halves undefined after the mode switch). */
    mov %ebx, %ebx
    shl $32, %rbx
    mov %ebp, %ebp
    or %rbp, %rbx
    mov %rbx, %rsi
    call kernel_main
2:
    cli
    hlt
    jmp 2b
    .code64
"#,
    stack_size = const BOOT_STACK_SIZE,
    mb2_magic = const super::multiboot2::HEADER_MAGIC,
    options(att_syntax)
);
