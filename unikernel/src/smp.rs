//! SMP bring-up (Intel SDM Vol. 3 §9.4 "Multiple-Processor (MP) Initialization"): CPUs from
//! the ACPI MADT, INIT-SIPI-SIPI through a real-mode trampoline copied below 1 MiB, per-CPU
//! areas reached through GS base, and IPIs to wake halted CPUs.
//!
//! Application processors (APs) come up one at a time (they share the trampoline's parameter
//! block), load their own GDT/TSS and the shared IDT, enable their LAPIC, check in, then wait
//! halted for IPIs: they honour `drain_all_pages` requests from their own loop, and run the
//! entry an upper layer registered ([`register_ap_entry`]) once the boot CPU asks them to
//! ([`start_ap_work`]); the kernel registers the dataplane's per-core loop there.
//!
//! Depends on [`crate::percpu`], [`crate::arch`] and `mm` only.

use crate::arch::apic;
use crate::arch::power::IdentityAcpi;
use crate::arch::time::Deadline;
use crate::arch::trap::{self, register_ipi, IPI_VECTOR_BASE, WAKE_VECTOR};
use crate::percpu::{current_cpu, set_percpu, CPUS, MAX_CPUS, ONLINE};
use acpi::madt::{Madt, MadtEntry};
use acpi::AcpiTables;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use log::info;
use mm::drain::DrainAll;
use mm::Zone;

/// Physical address the AP trampoline is copied to: page 8, free RAM under SeaBIOS and qboot
/// (docs/DESIGN.md "SMP", docs/CRATES.md §8), below 1 MiB as the SIPI vector requires (vector = address
/// >> 12).
const TRAMPOLINE: u64 = 0x8000;
/// AP stacks: order 8 = 1 MiB each (as the boot stack), from the buddy allocator, the lowest
/// page an unmapped guard page. A forwarding core keeps its dataplane `Core` (~95 KiB) on its
/// stack, and `run::build_core`'s frame holds several copies of it while building (311 KiB
/// measured: its stack probe). The former 256 KiB overflowed into the pages below the stack —
/// found by `guard=on` (a "use-after-free" of those free pages), then by the guard page.
const AP_STACK_ORDER: usize = 8;
/// How long an AP has to check in after its SIPIs: 200 ms (SDM asks for 10 ms + 200 µs).
const CHECKIN_MS: u64 = 200;
/// Vector of the `ipi` console command's ping (registered at boot).
pub const PING_VECTOR: u8 = IPI_VECTOR_BASE;

/// `drain_all_pages` across CPUs (mm::drain): each CPU honours requests from its own loop.
pub static DRAIN: DrainAll<MAX_CPUS> = DrainAll::new();

/// What an AP runs once the boot CPU asks it to work ([`register_ap_entry`]).
pub type ApEntry = fn(cpu: usize) -> !;

/// The registered AP entry (an upper layer's), as a `fn` address (0 = none).
static AP_ENTRY: AtomicU64 = AtomicU64::new(0);
/// Per CPU: the boot CPU asked it to run the AP entry.
static START: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Register what APs run when started with [`start_ap_work`] (once, before any is started).
/// SMP never calls the layers above it by name: they register here (Asterinas ostd's
/// `register_ap_entry`).
pub fn register_ap_entry(entry: ApEntry) {
    AP_ENTRY.store(entry as *const () as u64, Ordering::Release);
}

/// Ask CPU `cpu` (an AP) to leave its idle loop and run the registered entry; wakes it.
pub fn start_ap_work(cpu: usize) {
    if let Some(s) = START.get(cpu) {
        s.store(true, Ordering::Release);
    }
    send_ipi(IpiTarget::One(cpu), WAKE_VECTOR);
}

/// The registered entry, if CPU `cpu` was asked to run it.
fn ap_work(cpu: usize) -> Option<ApEntry> {
    if !START.get(cpu)?.load(Ordering::Acquire) {
        return None;
    }
    match AP_ENTRY.load(Ordering::Acquire) {
        0 => None,
        // SAFETY: only `register_ap_entry` stores here, and it stores an `ApEntry`.
        f => Some(unsafe { core::mem::transmute::<usize, ApEntry>(f as usize) }),
    }
}

/// Why SMP bring-up failed.
#[derive(Debug)]
pub enum SmpError {
    /// No ACPI tables (no RSDP from PVH and none found in the BIOS areas).
    NoAcpi(acpi::AcpiError),
    /// The MADT is missing or unreadable.
    NoMadt(acpi::AcpiError),
    /// The MADT lists no usable CPU, or not the boot CPU.
    BadMadt(&'static str),
    /// An MADT entry whose length byte is below 2 or runs past the table's end (bytes).
    BadMadtEntry {
        /// Offset of the entry from the start of the MADT.
        offset: usize,
        /// Its length byte.
        length: usize,
        /// The MADT's length from its header.
        table: usize,
    },
    /// No memory for an AP stack.
    NoMemory,
    /// CPU `cpu` (APIC ID `apic_id`) did not check in within [`CHECKIN_MS`].
    NoAnswer {
        /// CPU number.
        cpu: usize,
        /// Its APIC ID.
        apic_id: u32,
    },
}

impl core::fmt::Display for SmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SmpError::NoAcpi(e) => write!(
                f,
                "no ACPI tables (RSDP): {e:?}; CPUs are found through the ACPI MADT, so the \
                 firmware must provide ACPI (QEMU: do not pass acpi=off) or the RSDP must be \
                 given with acpi_rsdp=0xADDR"
            ),
            SmpError::NoMadt(e) => write!(
                f,
                "no usable MADT: {e:?} (the root table lists no APIC table whose signature and \
                 checksum are valid)"
            ),
            SmpError::BadMadt(why) => write!(f, "broken MADT: {why}"),
            SmpError::BadMadtEntry {
                offset,
                length,
                table,
            } => write!(
                f,
                "broken MADT: entry at offset {offset} has length {length} (a {table}-byte table)"
            ),
            SmpError::NoMemory => write!(f, "no memory for an AP stack"),
            SmpError::NoAnswer { cpu, apic_id } => write!(
                f,
                "cpu {cpu} (APIC ID {apic_id}) did not answer INIT-SIPI-SIPI within {CHECKIN_MS} ms"
            ),
        }
    }
}

/// Offset of the first interrupt controller structure in the MADT: the 36-byte SDT header, the
/// local interrupt controller address (4) and flags (4) (ACPI 6.5 §5.2.12, Table 5.43).
const MADT_ENTRIES_OFFSET: usize = 44;

/// Check that the MADT's entries tile the table: each has a length of at least 2 (its type and
/// length bytes) that stays inside the table. `madt` is the whole table, header included.
fn check_madt_entries(madt: &[u8]) -> Result<(), SmpError> {
    if madt.len() < MADT_ENTRIES_OFFSET {
        return Err(SmpError::BadMadtEntry {
            offset: madt.len(),
            length: 0,
            table: madt.len(),
        });
    }
    let mut off = MADT_ENTRIES_OFFSET;
    while off < madt.len() {
        let length = madt.get(off + 1).map_or(0, |&l| usize::from(l));
        if length < 2 || off + length > madt.len() {
            return Err(SmpError::BadMadtEntry {
                offset: off,
                length,
                table: madt.len(),
            });
        }
        off += length;
    }
    Ok(())
}

/// APIC IDs of the enabled CPUs in the MADT (flags bit 0 enabled or bit 1 online-capable),
/// boot CPU included.
fn madt_apic_ids(rsdp: u64) -> Result<heapless::Vec<u32, MAX_CPUS>, SmpError> {
    // SAFETY: `rsdp` comes from hvm_start_info (or is 0, then the BIOS areas are scanned);
    // identity-mapped memory.
    let tables = unsafe {
        if rsdp != 0 {
            AcpiTables::from_rsdp(IdentityAcpi, rsdp as usize)
        } else {
            AcpiTables::search_for_rsdp_bios(IdentityAcpi)
        }
    }
    .map_err(SmpError::NoAcpi)?;
    let madt = tables.find_table::<Madt>().map_err(SmpError::NoMadt)?;
    // The acpi crate's entry iterator trusts each entry's length byte: a 0 loops forever and
    // one running past the table reads beyond it. Walk the list ourselves first.
    let len = madt.get().header.length as usize;
    // SAFETY: find_table validated the header (signature, checksum over `length` bytes), so
    // `length` bytes from the table's start are mapped (identity) and belong to it.
    let bytes =
        unsafe { core::slice::from_raw_parts(madt.virtual_start().as_ptr().cast::<u8>(), len) };
    check_madt_entries(bytes)?;
    let mut ids = heapless::Vec::new();
    for e in madt.get().entries() {
        let (id, flags) = match e {
            MadtEntry::LocalApic(l) => (u32::from(l.apic_id), l.flags),
            MadtEntry::LocalX2Apic(l) => (l.x2apic_id, l.flags),
            _ => continue,
        };
        if flags & 0b11 != 0 && ids.push(id).is_err() {
            log::warn!("MADT lists more than {MAX_CPUS} CPUs; using the first {MAX_CPUS}");
            break;
        }
    }
    if ids.is_empty() {
        return Err(SmpError::BadMadt("no enabled local APIC entry"));
    }
    Ok(ids)
}

/// The boot CPU: per-CPU area, online, drain participant. Call first thing after the IDT.
pub fn init_bsp() {
    set_percpu(0);
}

fn ping(cpu: usize) {
    CPUS[cpu].pings.fetch_add(1, Ordering::Relaxed);
}

/// Mark the boot CPU online with its APIC ID (after the LAPIC is up), and register the ping
/// IPI handler.
pub fn bsp_online(apic_id: u32) {
    let _ = register_ipi(PING_VECTOR, ping);
    CPUS[0].apic_id.store(apic_id, Ordering::Relaxed);
    CPUS[0].online.store(true, Ordering::Release);
    ONLINE.store(1, Ordering::Release);
    DRAIN.cpu_online(0);
}

core::arch::global_asm!(
    r#"
    .section .rodata.ap_tramp, "a"
    .balign 16
    .global ap_tramp_start
ap_tramp_start:
    .code16
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl (ap_gdt_ptr - ap_tramp_start + {base})
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(ap_pm32 - ap_tramp_start + {base})
    .code32
ap_pm32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov (ap_cr3 - ap_tramp_start + {base}), %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010000, %eax
    mov %eax, %cr0
    ljmp $0x18, $(ap_lm64 - ap_tramp_start + {base})
    .code64
ap_lm64:
    mov $0x20, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    mov (ap_stack - ap_tramp_start + {base}), %rsp
    mov (ap_cpu - ap_tramp_start + {base}), %rdi
    mov (ap_entry - ap_tramp_start + {base}), %rax
    call *%rax
1:
    cli
    hlt
    jmp 1b
    .balign 8
ap_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
ap_gdt_end:
ap_gdt_ptr:
    .word ap_gdt_end - ap_gdt - 1
    .long ap_gdt - ap_tramp_start + {base}
    .balign 8
    .global ap_cr3
ap_cr3: .quad 0
    .global ap_stack
ap_stack: .quad 0
    .global ap_entry
ap_entry: .quad 0
    .global ap_cpu
ap_cpu: .quad 0
    .global ap_tramp_end
ap_tramp_end:
    .code64
"#,
    base = const TRAMPOLINE,
    options(att_syntax)
);

unsafe extern "C" {
    static ap_tramp_start: u8;
    static ap_tramp_end: u8;
    static ap_cr3: u8;
    static ap_stack: u8;
    static ap_entry: u8;
    static ap_cpu: u8;
}

/// Offset of a trampoline symbol from its start.
fn tramp_off(sym: *const u8) -> u64 {
    sym as u64 - (&raw const ap_tramp_start) as u64
}

/// Entry of an AP, on its own stack, interrupts off, boot page tables.
extern "C" fn ap_main(cpu: u64) -> ! {
    let cpu = cpu as usize;
    trap::init_cpu(cpu);
    set_percpu(cpu);
    let apic_id = apic::init();
    CPUS[cpu].apic_id.store(apic_id, Ordering::Relaxed);
    DRAIN.cpu_online(cpu);
    CPUS[cpu].online.store(true, Ordering::Release);
    ONLINE.fetch_add(1, Ordering::AcqRel);
    loop {
        if let Some(entry) = ap_work(cpu) {
            entry(cpu);
        }
        // Idle APs own no pcp list: acknowledging is all a drain needs from them.
        if DRAIN.poll(cpu, || {}) {
            CPUS[cpu].drains.fetch_add(1, Ordering::Relaxed);
        }
        CPUS[cpu].halts.fetch_add(1, Ordering::Relaxed);
        // Halted for TLB shootdown initiators: they IPI this CPU at once (the IPI handler
        // flushes); a request posted just before the flag became visible costs one
        // deadline-delayed IPI, never a lost flush.
        CPUS[cpu].halted.store(true, Ordering::SeqCst);
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
        CPUS[cpu].halted.store(false, Ordering::SeqCst);
    }
}

/// INIT → SIPI wait on hardware: 10 ms (SDM Vol. 3 §9.4.4.1, for the oldest parts).
const INIT_DELAY_US: u64 = 10_000;
/// INIT → SIPI wait under a hypervisor: 10 µs. The hypervisor takes the INIT before it returns
/// from the ICR write (QEMU and KVM reset the vCPU synchronously; Linux waits 0 on every
/// CPU since family 6); the SIPI retry below covers a slow one. Saves 10 ms per AP.
const INIT_DELAY_VM_US: u64 = 10;

/// CPUID.1:ECX bit 31: running under a hypervisor.
fn under_hypervisor() -> bool {
    core::arch::x86_64::__cpuid(1).ecx & (1 << 31) != 0
}

fn delay_us(us: u64) {
    Deadline::after_us(us).wait();
}

/// Start every enabled AP the MADT lists, one at a time. Returns the number of CPUs online.
/// Call on the boot CPU after memory, the IDT and its LAPIC are up.
///
/// `stack_guard(cpu, bottom)` is called with each AP stack's lowest page before the AP starts
/// (the caller unmaps it, so an overflow faults).
pub fn start_aps(
    zone: &Zone,
    rsdp: u64,
    bsp_apic: u32,
    stack_guard: &dyn Fn(usize, u64),
) -> Result<usize, SmpError> {
    let ids = madt_apic_ids(rsdp)?;
    if !ids.contains(&bsp_apic) {
        return Err(SmpError::BadMadt(
            "the boot CPU's APIC ID is not in the MADT",
        ));
    }
    // `log=debug`: the `smp: N CPUs online` line and one line per AP say what came up.
    log::debug!(
        "smp: MADT lists {} CPUs (APIC IDs {:?})",
        ids.len(),
        ids.as_slice()
    );
    // Copy the trampoline below 1 MiB (identity-mapped RAM the allocator never manages).
    let start = &raw const ap_tramp_start;
    let len = (&raw const ap_tramp_end) as usize - start as usize;
    // SAFETY: [TRAMPOLINE, TRAMPOLINE + len) is free low RAM (the boot data was copied out by
    // pvh::read; the zone starts at 1 MiB); the source is our own rodata.
    unsafe { core::ptr::copy_nonoverlapping(start, TRAMPOLINE as *mut u8, len) };
    let param = |sym: *const u8| (TRAMPOLINE + tramp_off(sym)) as *mut u64;
    let cr3 = x86_64::registers::control::Cr3::read_raw()
        .0
        .start_address()
        .as_u64();
    let init_delay_us = if under_hypervisor() {
        INIT_DELAY_VM_US
    } else {
        INIT_DELAY_US
    };
    for (cpu, &apic_id) in (1..).zip(ids.iter().filter(|&&id| id != bsp_apic)) {
        let Some(stack) = zone.alloc_pages(AP_STACK_ORDER) else {
            return Err(SmpError::NoMemory);
        };
        let top = stack.addr() + (mm::PAGE_SIZE << AP_STACK_ORDER) as u64;
        stack_guard(cpu, stack.addr());
        // SAFETY: parameter slots inside the trampoline copy, written before the SIPI that
        // makes the AP read them (the ICR write orders them).
        unsafe {
            param(&raw const ap_cr3).write_volatile(cr3);
            param(&raw const ap_stack).write_volatile(top);
            param(&raw const ap_entry).write_volatile(ap_main as *const () as u64);
            param(&raw const ap_cpu).write_volatile(cpu as u64);
        }
        // INIT, 10 ms (10 µs under a hypervisor), SIPI, 200 µs, SIPI if not yet in (SDM
        // Vol. 3 §9.4.4.1).
        apic::send_init(apic_id);
        delay_us(init_delay_us);
        let vector = (TRAMPOLINE >> 12) as u8;
        apic::send_sipi(apic_id, vector);
        delay_us(200);
        if !CPUS[cpu].online.load(Ordering::Acquire) {
            apic::send_sipi(apic_id, vector);
        }
        let deadline = Deadline::after_ms(CHECKIN_MS);
        while !CPUS[cpu].online.load(Ordering::Acquire) {
            if deadline.expired() {
                return Err(SmpError::NoAnswer { cpu, apic_id });
            }
            core::hint::spin_loop();
        }
        info!("smp: cpu {cpu} (APIC ID {apic_id}) online");
    }
    Ok(ONLINE.load(Ordering::Acquire))
}

/// Where an IPI goes.
#[derive(Debug, Clone, Copy)]
pub enum IpiTarget {
    /// One CPU (by CPU number).
    One(usize),
    /// A set of CPUs (bit `i` = CPU `i`).
    Set(u64),
    /// Every other online CPU.
    AllOthers,
}

/// Send `vector` to `target` (offline CPUs and, for sets, the sender itself are skipped).
/// Returns how many IPIs were sent.
pub fn send_ipi(target: IpiTarget, vector: u8) -> usize {
    let me = current_cpu() as usize;
    let mut sent = 0;
    for (i, c) in CPUS.iter().enumerate() {
        #[allow(clippy::match_like_matches_macro)]
        let wanted = match target {
            IpiTarget::One(cpu) => i == cpu,
            IpiTarget::Set(mask) => i < 64 && mask & (1 << i) != 0 && i != me,
            IpiTarget::AllOthers => i != me,
        };
        if wanted && c.online.load(Ordering::Acquire) {
            apic::send_ipi(c.apic_id.load(Ordering::Relaxed), vector);
            sent += 1;
        }
    }
    sent
}

/// Wake every other online CPU (IPI on `WAKE_VECTOR`) so it looks at its pending work.
pub fn wake_others() {
    let me = current_cpu() as usize;
    for (i, c) in CPUS.iter().enumerate() {
        if i != me && c.online.load(Ordering::Acquire) {
            apic::send_ipi(c.apic_id.load(Ordering::Relaxed), WAKE_VECTOR);
        }
    }
}
