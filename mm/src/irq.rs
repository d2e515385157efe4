//! Local interrupt save/disable/restore around the zone lock (the `spin_lock_irqsave` half that
//! makes the zone-locked path safe to call from interrupt handlers: an interrupt cannot arrive on
//! a CPU that already holds the lock in thread context and spin forever).
//!
//! Only the bare-metal x86_64 build touches RFLAGS.IF; host builds (unit tests) run in user mode,
//! where `cli` would fault, so there it is a no-op.

/// Saved interrupt state; restored by [`restore`]. The asm blocks are deliberately not `nomem`:
/// they are compiler barriers, so the lock operations cannot move outside the disabled region.
#[derive(Clone, Copy)]
pub(crate) struct IrqState(#[allow(dead_code)] u64);

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
#[inline(always)]
pub(crate) fn save_disable() -> IrqState {
    let flags: u64;
    // SAFETY: reads RFLAGS and clears IF; the kernel runs in ring 0, where `cli` is allowed.
    unsafe {
        core::arch::asm!("pushfq", "pop {}", "cli", out(reg) flags);
    }
    IrqState(flags)
}

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
#[inline(always)]
pub(crate) fn restore(state: IrqState) {
    const IF: u64 = 1 << 9;
    if state.0 & IF != 0 {
        // SAFETY: re-enables interrupts that were enabled before `save_disable`.
        unsafe { core::arch::asm!("sti", options(nostack)) };
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "none")))]
#[inline(always)]
pub(crate) fn save_disable() -> IrqState {
    IrqState(0)
}

#[cfg(not(all(target_arch = "x86_64", target_os = "none")))]
#[inline(always)]
pub(crate) fn restore(_state: IrqState) {}
