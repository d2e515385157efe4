//! SMP bring-up (Intel SDM Vol. 3 §9.4 "Multiple-Processor (MP) Initialization"): CPUs from
//! the ACPI MADT, INIT-SIPI-SIPI through a real-mode trampoline copied below 1 MiB, per-CPU
//! areas reached through GS base, and IPIs to wake halted CPUs.
//!
//! Application processors (APs) come up one at a time (they share the trampoline's parameter
//! block), load their own GDT/TSS and the shared IDT, enable their LAPIC, check in, then wait
//! halted for IPIs: they honour `drain_all_pages` requests from their own loop. They do not
//! forward yet (per-core queues are the next step of issue 5).

use crate::time::{rdtsc, tsc_hz};
use acpi::madt::{Madt, MadtEntry};
use acpi::{AcpiHandler, AcpiTables, PhysicalMapping};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use log::info;
use mm::drain::DrainAll;
use mm::Zone;
use x86_64::registers::model_specific::GsBase;
use x86_64::VirtAddr;

/// Most CPUs supported (per-CPU GDT/TSS/IST stacks are static arrays of this size).
pub const MAX_CPUS: usize = 16;
/// Physical address the AP trampoline is copied to: page 8, free RAM under SeaBIOS and qboot
/// (CRATES.md §8), below 1 MiB as the SIPI vector requires (vector = address >> 12).
const TRAMPOLINE: u64 = 0x8000;
/// AP stacks: order 6 = 256 KiB each, from the buddy allocator (a forwarding core keeps its
/// `Forwarder`, ~100 KiB with its scratch arrays and pcp list, on its stack).
const AP_STACK_ORDER: usize = 6;
/// How long an AP has to check in after its SIPIs: 200 ms (SDM asks for 10 ms + 200 µs).
const CHECKIN_MS: u64 = 200;
/// IPI vector that wakes a halted CPU.
pub const WAKE_VECTOR: u8 = 0x31;

/// `drain_all_pages` across CPUs (mm::drain): each CPU honours requests from its own loop.
pub static DRAIN: DrainAll<MAX_CPUS> = DrainAll::new();

/// What every CPU publishes about itself (read by the `cpus` console command).
pub struct CpuState {
    /// Checked in and running.
    pub online: AtomicBool,
    /// Its local APIC ID.
    pub apic_id: AtomicU32,
    /// Halts taken while idle.
    pub halts: AtomicU64,
    /// Drain requests honoured.
    pub drains: AtomicU64,
    /// Ping IPIs received ([`PING_VECTOR`]).
    pub pings: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const CPU_INIT: CpuState = CpuState {
    online: AtomicBool::new(false),
    apic_id: AtomicU32::new(u32::MAX),
    halts: AtomicU64::new(0),
    drains: AtomicU64::new(0),
    pings: AtomicU64::new(0),
};

/// Per-CPU state, indexed by CPU number (0 = the boot CPU).
pub static CPUS: [CpuState; MAX_CPUS] = [CPU_INIT; MAX_CPUS];
/// CPUs online.
pub static ONLINE: AtomicUsize = AtomicUsize::new(0);

/// The per-CPU area GS points at. `cpu` is at offset 0 so [`current_cpu`] is one load.
#[repr(C)]
pub struct PerCpu {
    cpu: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const PERCPU_INIT: PerCpu = PerCpu {
    cpu: AtomicU32::new(0),
};
static PERCPU: [PerCpu; MAX_CPUS] = [PERCPU_INIT; MAX_CPUS];

/// Point this CPU's GS base at its per-CPU area.
fn set_percpu(cpu: usize) {
    PERCPU[cpu].cpu.store(cpu as u32, Ordering::Relaxed);
    GsBase::write(VirtAddr::from_ptr(&PERCPU[cpu]));
}

/// The CPU we run on (from the per-CPU area; 0 before [`init_bsp`]).
#[inline]
pub fn current_cpu() -> u32 {
    let cpu: u32;
    // SAFETY: GS base points at this CPU's `PerCpu` (`set_percpu` runs on every CPU before
    // anything calls this: kernel_main calls `init_bsp` right after the IDT, `ap_main` first
    // thing); offset 0 is its `cpu` field.
    unsafe {
        core::arch::asm!("mov {0:e}, gs:[0]", out(reg) cpu, options(nostack, readonly, preserves_flags))
    };
    cpu
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

/// acpi's handler for an identity-mapped kernel: physical = virtual, nothing to unmap.
#[derive(Clone)]
struct IdentityAcpi;

impl AcpiHandler for IdentityAcpi {
    unsafe fn map_physical_region<T>(&self, pa: usize, size: usize) -> PhysicalMapping<Self, T> {
        // SAFETY: ACPI tables lie below 4 GiB, inside the boot identity map; the pointer is the
        // physical address (acpi promises `pa` points at a valid T).
        unsafe {
            PhysicalMapping::new(
                pa,
                NonNull::new(pa as *mut T).expect("ACPI table at 0"),
                size,
                size,
                self.clone(),
            )
        }
    }

    fn unmap_physical_region<T>(_region: &PhysicalMapping<Self, T>) {}
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
    crate::trap::init_cpu(cpu);
    set_percpu(cpu);
    let apic_id = crate::apic::init();
    CPUS[cpu].apic_id.store(apic_id, Ordering::Relaxed);
    DRAIN.cpu_online(cpu);
    CPUS[cpu].online.store(true, Ordering::Release);
    ONLINE.fetch_add(1, Ordering::AcqRel);
    loop {
        if crate::forwarder::start_requested(cpu) {
            crate::forwarder::run_core(cpu);
        }
        // Idle APs own no pcp list: acknowledging is all a drain needs from them.
        if DRAIN.poll(cpu, || {}) {
            CPUS[cpu].drains.fetch_add(1, Ordering::Relaxed);
        }
        CPUS[cpu].halts.fetch_add(1, Ordering::Relaxed);
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
    }
}

fn delay_us(us: u64) {
    let end = rdtsc() + tsc_hz() / 1_000_000 * us;
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// Start every enabled AP the MADT lists, one at a time. Returns the number of CPUs online.
/// Call on the boot CPU after memory, the IDT and its LAPIC are up.
pub fn start_aps(zone: &Zone, rsdp: u64, bsp_apic: u32) -> Result<usize, SmpError> {
    let ids = madt_apic_ids(rsdp)?;
    if !ids.contains(&bsp_apic) {
        return Err(SmpError::BadMadt(
            "the boot CPU's APIC ID is not in the MADT",
        ));
    }
    info!(
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
    for (cpu, &apic_id) in (1..).zip(ids.iter().filter(|&&id| id != bsp_apic)) {
        let Some(stack) = zone.alloc_pages(AP_STACK_ORDER) else {
            return Err(SmpError::NoMemory);
        };
        let top = stack.addr() + (mm::PAGE_SIZE << AP_STACK_ORDER) as u64;
        // SAFETY: parameter slots inside the trampoline copy, written before the SIPI that
        // makes the AP read them (the ICR write orders them).
        unsafe {
            param(&raw const ap_cr3).write_volatile(cr3);
            param(&raw const ap_stack).write_volatile(top);
            param(&raw const ap_entry).write_volatile(ap_main as *const () as u64);
            param(&raw const ap_cpu).write_volatile(cpu as u64);
        }
        // INIT, 10 ms, SIPI, 200 µs, SIPI if not yet in (SDM Vol. 3 §9.4.4.1).
        crate::apic::send_init(apic_id);
        delay_us(10_000);
        let vector = (TRAMPOLINE >> 12) as u8;
        crate::apic::send_sipi(apic_id, vector);
        delay_us(200);
        if !CPUS[cpu].online.load(Ordering::Acquire) {
            crate::apic::send_sipi(apic_id, vector);
        }
        let deadline = rdtsc() + tsc_hz() / 1000 * CHECKIN_MS;
        while !CPUS[cpu].online.load(Ordering::Acquire) {
            if rdtsc() > deadline {
                return Err(SmpError::NoAnswer { cpu, apic_id });
            }
            core::hint::spin_loop();
        }
        info!("smp: cpu {cpu} (APIC ID {apic_id}) online");
    }
    Ok(ONLINE.load(Ordering::Acquire))
}

/// First vector of the IPI handler registry ([`register_ipi`]); [`IPI_VECTORS`] vectors.
pub const IPI_VECTOR_BASE: u8 = 0x50;
/// Vectors the registry manages: `IPI_VECTOR_BASE ..IPI_VECTOR_BASE + IPI_VECTORS`.
pub const IPI_VECTORS: usize = 4;
/// Vector of the `ipi` console command's ping (registered at boot).
pub const PING_VECTOR: u8 = IPI_VECTOR_BASE;

/// A handler run in interrupt context on the CPU that received the IPI (its number given).
/// It must not touch a pcp list or take a lock the interrupted code may hold.
pub type IpiHandler = fn(cpu: usize);

/// Registered handlers, as `fn` addresses (0 = none).
static IPI_HANDLERS: [AtomicU64; IPI_VECTORS] = [const { AtomicU64::new(0) }; IPI_VECTORS];

/// Why an IPI handler could not be registered.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub enum IpiError {
    /// The vector is outside the registry's range.
    BadVector(u8),
    /// A handler is already registered for the vector.
    InUse(u8),
}

/// Register `handler` for IPI `vector` (in `IPI_VECTOR_BASE ..+ IPI_VECTORS`).
pub fn register_ipi(vector: u8, handler: IpiHandler) -> Result<(), IpiError> {
    let slot = usize::from(vector.wrapping_sub(IPI_VECTOR_BASE));
    let s = IPI_HANDLERS.get(slot).ok_or(IpiError::BadVector(vector))?;
    s.compare_exchange(
        0,
        handler as *const () as u64,
        Ordering::AcqRel,
        Ordering::Acquire,
    )
    .map(drop)
    .map_err(|_| IpiError::InUse(vector))
}

/// Run the registered handler of `vector`, if any (called by the trap path).
pub fn dispatch_ipi(vector: u8) {
    let slot = usize::from(vector.wrapping_sub(IPI_VECTOR_BASE));
    if let Some(f) = IPI_HANDLERS.get(slot).map(|s| s.load(Ordering::Acquire)) {
        if f != 0 {
            // SAFETY: only `register_ipi` stores into the table, and it stores `IpiHandler`s.
            let h: IpiHandler = unsafe { core::mem::transmute::<usize, IpiHandler>(f as usize) };
            h(current_cpu() as usize);
        }
    }
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
            crate::apic::send_ipi(c.apic_id.load(Ordering::Relaxed), vector);
            sent += 1;
        }
    }
    sent
}

/// Wake every other online CPU (IPI on [`WAKE_VECTOR`]) so it looks at its pending work.
pub fn wake_others() {
    let me = current_cpu() as usize;
    for (i, c) in CPUS.iter().enumerate() {
        if i != me && c.online.load(Ordering::Acquire) {
            crate::apic::send_ipi(c.apic_id.load(Ordering::Relaxed), WAKE_VECTOR);
        }
    }
}
