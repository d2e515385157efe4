//! GDT with a TSS (IST stack for #DF), and an IDT whose exception handlers print the vector,
//! RIP, CR2 and error code and exit QEMU with failure.
//!
//! Entry stubs are naked functions (stable since Rust 1.88): each pushes a dummy error code
//! when the CPU does not push one, then the vector, and jumps to a common stub that saves the
//! caller-saved registers and calls [`trap_dispatch`] with a pointer to the [`TrapFrame`].
//! Stack alignment: the CPU aligns RSP to 16 and pushes 5 words; error code + vector + 9
//! registers make 16 words, so RSP is 16-byte aligned at the `call` (SysV ABI).

use core::arch::naked_asm;
use spin::Once;
use x86_64::instructions::tables::lidt;
use x86_64::instructions::tables::load_tss;
use x86_64::registers::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::structures::DescriptorTablePointer;
use x86_64::VirtAddr;

/// IST slot (0-based) used by #DF, NMI and #MC so they run on a known-good stack.
const IST_FAULT: u16 = 0;
/// Size of that stack: 16 KiB, enough to format and print a fault report.
const IST_STACK_SIZE: usize = 16 * 1024;
use super::apic;
use crate::percpu::{current_cpu, set_in_irq, MAX_CPUS};
use core::sync::atomic::{AtomicU64, Ordering};

#[repr(C, align(16))]
struct Stack([u8; IST_STACK_SIZE]);
/// One fault stack per CPU (the CPU alone writes to it, on a fault). In `.bss.nozero`
/// (`linker.ld`): a stack is never read before it is written, so the entry does not zero these
/// 256 KiB (about a fifth of what it zeroes otherwise, ~0.3 ms of TCG at boot).
#[unsafe(link_section = ".bss.nozero.ist")]
static mut IST_STACKS: [Stack; MAX_CPUS] = [const { Stack([0; IST_STACK_SIZE]) }; MAX_CPUS];

/// Per-CPU TSS (a TSS descriptor is marked busy when loaded, so CPUs cannot share one).
static TSS: [Once<TaskStateSegment>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];
/// Per-CPU GDT with its code, data and TSS selectors.
static GDT: [Once<(GlobalDescriptorTable, [SegmentSelector; 3])>; MAX_CPUS] =
    [const { Once::new() }; MAX_CPUS];
/// The IDT all CPUs share (built on first use).
static IDT: Once<Idt> = Once::new();

/// Saved state at a trap, in push order reversed (lowest address first).
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rax: u64,
    /// Interrupt vector.
    pub vector: u64,
    /// Error code pushed by the CPU (0 for vectors without one).
    pub error_code: u64,
    /// Faulting instruction.
    pub rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

const EXCEPTION_NAMES: [&str; 32] = [
    "#DE divide error",
    "#DB debug",
    "NMI",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack fault",
    "#GP general protection",
    "#PF page fault",
    "reserved",
    "#MF x87 FP",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD FP",
    "#VE virtualization",
    "#CP control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security",
    "reserved",
];

/// IPI vector that wakes a halted CPU (its handler does nothing: the poll loop does the work).
pub const WAKE_VECTOR: u8 = 0x31;
/// First vector of the IPI handler registry ([`register_ipi`]); [`IPI_VECTORS`] vectors.
pub const IPI_VECTOR_BASE: u8 = 0x50;
/// Vectors the registry manages: `IPI_VECTOR_BASE ..IPI_VECTOR_BASE + IPI_VECTORS`.
pub const IPI_VECTORS: usize = 4;

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
///
/// # Errors
/// [`IpiError`] for a vector outside the registry or one already taken.
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

/// Run the registered handler of `vector`, if any.
fn dispatch_ipi(vector: u8) {
    let slot = usize::from(vector.wrapping_sub(IPI_VECTOR_BASE));
    if let Some(f) = IPI_HANDLERS.get(slot).map(|s| s.load(Ordering::Acquire)) {
        if f != 0 {
            // SAFETY: only `register_ipi` stores into the table, and it stores `IpiHandler`s.
            let h: IpiHandler = unsafe { core::mem::transmute::<usize, IpiHandler>(f as usize) };
            h(current_cpu() as usize);
        }
    }
}

/// Explains a page fault's CR2 for the report (e.g. the page guard's use-after-free), as a
/// `fn(u64) -> Option<&'static str>` address (0 = none).
static FAULT_EXPLAINER: AtomicU64 = AtomicU64::new(0);

/// Register what explains a page fault address in the fatal report (an upper layer's: arch
/// never names it).
pub fn set_fault_explainer(f: fn(u64) -> Option<&'static str>) {
    FAULT_EXPLAINER.store(f as *const () as u64, Ordering::Release);
}

fn explain_fault(cr2: u64) -> Option<&'static str> {
    match FAULT_EXPLAINER.load(Ordering::Acquire) {
        0 => None,
        f => {
            // SAFETY: only `set_fault_explainer` stores here, and it stores such a `fn`.
            let f: fn(u64) -> Option<&'static str> = unsafe { core::mem::transmute(f as usize) };
            f(cr2)
        }
    }
}

extern "C" fn trap_dispatch(frame: &mut TrapFrame) {
    if frame.vector >= 32 {
        // Interrupts only wake a halted core (timer, device MSI-X); the poll loop does the work.
        set_in_irq(true);
        dispatch_ipi(frame.vector as u8);
        if frame.vector != u64::from(apic::SPURIOUS_VECTOR) {
            apic::eoi();
        }
        set_in_irq(false);
        return;
    }
    let cr2 = x86_64::registers::control::Cr2::read_raw();
    let name = EXCEPTION_NAMES
        .get(frame.vector as usize)
        .copied()
        .unwrap_or("interrupt");
    // The console lock may be held by the interrupted code: force it so the report gets out.
    // SAFETY: we never return to the interrupted code (we exit below), so breaking its lock
    // cannot corrupt state it will observe again.
    unsafe { super::serial::COM.force_unlock() };
    crate::println!(
        "FATAL: exception vector {} ({}) at RIP {:#018x}, CR2 {:#018x}, error code {:#x}, RSP {:#x}, RFLAGS {:#x}",
        frame.vector, name, frame.rip, cr2, frame.error_code, frame.rsp, frame.rflags
    );
    if frame.vector == 14 {
        if let Some(why) = explain_fault(cr2) {
            crate::println!("FATAL: page fault at CR2 {cr2:#018x}: {why}");
        }
    }
    super::exit::exit(super::exit::ExitCode::Failure);
}

#[unsafe(naked)]
extern "C" fn trap_common() {
    naked_asm!(
        "push rax", "push rcx", "push rdx", "push rsi", "push rdi",
        "push r8", "push r9", "push r10", "push r11",
        "mov rdi, rsp",
        "cld",
        "call {dispatch}",
        "pop r11", "pop r10", "pop r9", "pop r8",
        "pop rdi", "pop rsi", "pop rdx", "pop rcx", "pop rax",
        "add rsp, 16",
        "iretq",
        dispatch = sym trap_dispatch,
    );
}

macro_rules! stub {
    ($name:ident, $vec:expr, noerr) => {
        #[unsafe(naked)]
        extern "C" fn $name() {
            naked_asm!("push 0", "push {v}", "jmp {c}", v = const $vec, c = sym trap_common);
        }
    };
    ($name:ident, $vec:expr, err) => {
        #[unsafe(naked)]
        extern "C" fn $name() {
            naked_asm!("push {v}", "jmp {c}", v = const $vec, c = sym trap_common);
        }
    };
}

stub!(v0, 0, noerr);
stub!(v1, 1, noerr);
stub!(v2, 2, noerr);
stub!(v3, 3, noerr);
stub!(v4, 4, noerr);
stub!(v5, 5, noerr);
stub!(v6, 6, noerr);
stub!(v7, 7, noerr);
stub!(v8, 8, err);
stub!(v10, 10, err);
stub!(v11, 11, err);
stub!(v12, 12, err);
stub!(v13, 13, err);
stub!(v14, 14, err);
stub!(v16, 16, noerr);
stub!(v17, 17, err);
stub!(v18, 18, noerr);
stub!(v19, 19, noerr);
stub!(v20, 20, noerr);
stub!(v21, 21, err);
stub!(v29, 29, err);
stub!(v30, 30, err);
stub!(spurious, 255, noerr);
stub!(irq_timer, 0x30, noerr);
stub!(irq_wake, 0x31, noerr);
stub!(ipi0, 0x50, noerr);
stub!(ipi1, 0x51, noerr);
stub!(ipi2, 0x52, noerr);
stub!(ipi3, 0x53, noerr);
stub!(irq_dev0, 0x40, noerr);
stub!(irq_dev1, 0x41, noerr);
stub!(irq_dev2, 0x42, noerr);
stub!(irq_dev3, 0x43, noerr);

fn addr(f: extern "C" fn()) -> VirtAddr {
    VirtAddr::new(f as *const () as u64)
}

/// The boot CPU's GDT, TSS and IDT.
pub fn init() {
    init_cpu(0);
}

/// Load CPU `cpu`'s GDT (code, data, its TSS), reload segment registers, and load the shared
/// IDT (built on first use).
///
/// # Panics
/// If `cpu >= MAX_CPUS`.
pub fn init_cpu(cpu: usize) {
    let tss = TSS[cpu].call_once(|| {
        let mut tss = TaskStateSegment::new();
        // SAFETY: only the address of this CPU's slot is taken; the stack is used by the CPU.
        let top = VirtAddr::from_ptr(unsafe { &raw const IST_STACKS[cpu] }) + IST_STACK_SIZE as u64;
        tss.interrupt_stack_table[IST_FAULT as usize] = top;
        tss
    });
    let (gdt, sel) = GDT[cpu].call_once(|| {
        let mut gdt = GlobalDescriptorTable::new();
        let code = gdt.append(Descriptor::kernel_code_segment());
        let data = gdt.append(Descriptor::kernel_data_segment());
        let t = gdt.append(Descriptor::tss_segment(tss));
        (gdt, [code, data, t])
    });
    gdt.load();
    // SAFETY: the selectors index the GDT just loaded, whose descriptors are flat 64-bit code
    // and data and this CPU's TSS.
    unsafe {
        CS::set_reg(sel[0]);
        DS::set_reg(sel[1]);
        ES::set_reg(sel[1]);
        SS::set_reg(sel[1]);
        load_tss(sel[2]);
    }

    let idt = IDT.call_once(|| {
        let cs = CS::get_reg().0;
        let mut idt = Idt([Gate::MISSING; 256]);
        for &(vector, stub, ist) in &GATES {
            idt.0[usize::from(vector)] = Gate::interrupt(addr(stub), cs, ist);
        }
        idt
    });
    let ptr = DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: VirtAddr::from_ptr(idt),
    };
    // SAFETY: `ptr` covers the whole 256-gate IDT, which lives in a static (never moved or
    // freed); every present gate points at a naked stub above that ends in `iretq` or never
    // returns, with this GDT's code selector, and its IST index refers to the slot set in the
    // TSS.
    unsafe { lidt(&ptr) };
}

/// One IDT gate: a 64-bit interrupt gate descriptor, 16 bytes (Intel SDM Vol. 3A §6.14.1,
/// Figure 6-8), built by hand so the boot runs one short loop instead of ~30 inlined
/// `set_handler_addr` calls (TCG translates every boot path once: ~800 guest instructions
/// less).
#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    /// IST index (bits 0–2, 0: none), type 0xE (64-bit interrupt gate), DPL 0, present.
    options: u16,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

impl Gate {
    /// Not present: the vector raises #NP (#GP for the IDT) if it ever fires.
    const MISSING: Gate = Gate {
        offset_low: 0,
        selector: 0,
        options: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    };

    /// A present interrupt gate (interrupts off on entry) to `handler` in code segment
    /// `selector`, on IST slot `ist` (1-based as in the descriptor; 0: the current stack).
    fn interrupt(handler: VirtAddr, selector: u16, ist: u16) -> Gate {
        let a = handler.as_u64();
        Gate {
            offset_low: a as u16,
            selector,
            options: 0x8E00 | (ist & 0x7),
            offset_mid: (a >> 16) as u16,
            offset_high: (a >> 32) as u32,
            reserved: 0,
        }
    }
}

/// The IDT: 256 gates, 16-byte aligned (the SDM's recommendation for the base).
#[repr(C, align(16))]
struct Idt([Gate; 256]);

/// IST field of the gates that run on the fault stack (the descriptor's index is 1-based).
const IST_GATE: u16 = IST_FAULT + 1;

/// Every present gate: vector, entry stub, IST field. Vectors 9, 15, 22–28 and 31 (reserved
/// or legacy) stay missing, as do the free vectors.
static GATES: [(u8, extern "C" fn(), u16); 33] = [
    (0, v0, 0),
    (1, v1, 0),
    (2, v2, IST_GATE),
    (3, v3, 0),
    (4, v4, 0),
    (5, v5, 0),
    (6, v6, 0),
    (7, v7, 0),
    (8, v8, IST_GATE),
    (10, v10, 0),
    (11, v11, 0),
    (12, v12, 0),
    (13, v13, 0),
    (14, v14, 0),
    (16, v16, 0),
    (17, v17, 0),
    (18, v18, IST_GATE),
    (19, v19, 0),
    (20, v20, 0),
    (21, v21, 0),
    (29, v29, 0),
    (30, v30, 0),
    (255, spurious, 0),
    (apic::TIMER_VECTOR, irq_timer, 0),
    (WAKE_VECTOR, irq_wake, 0),
    (IPI_VECTOR_BASE, ipi0, 0),
    (IPI_VECTOR_BASE + 1, ipi1, 0),
    (IPI_VECTOR_BASE + 2, ipi2, 0),
    (IPI_VECTOR_BASE + 3, ipi3, 0),
    (apic::DEVICE_VECTOR_BASE, irq_dev0, 0),
    (apic::DEVICE_VECTOR_BASE + 1, irq_dev1, 0),
    (apic::DEVICE_VECTOR_BASE + 2, irq_dev2, 0),
    (apic::DEVICE_VECTOR_BASE + 3, irq_dev3, 0),
];
