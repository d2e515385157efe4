//! ACPI fixed-hardware power management on the boot CPU: the fixed power button (polled), S5
//! soft-off through PM1a/PM1b control, and the FADT reset register.
//!
//! * [`init`] reads the FADT (ACPI 6.5 §5.2.9) and the `\_S5` sleep type from the DSDT (or an
//!   SSDT) with the heap-free reader `crate::acpi_pm`, puts the fixed hardware in ACPI
//!   mode when firmware left it in legacy mode (`SMI_CMD` ← `ACPI_ENABLE`, then `SCI_EN`;
//!   §4.8.2.5), clears a stale `PWRBTN_STS` and sets `PWRBTN_EN` (§4.8.2.2.1.1). It runs
//!   early in boot, so a press during the rest of boot stays latched in `PWRBTN_STS`.
//! * [`button_pressed`] is polled by the boot CPU's housekeeping tick (every 10 ms): the SCI
//!   itself stays masked (docs/DESIGN.md, "Power: the ACPI power button").
//! * [`soft_off`] enters S5 (§16.1.7 "Transitioning from the Working to the Sleeping State";
//!   §7.4.2 `\_S5`), [`reset`] writes the reset register (§4.8.3.6, §5.2.9 `RESET_REG`).
//!
//! Only system-I/O PM1 blocks are taken (every x86 firmware and QEMU's PIIX4 and ICH9 PM);
//! a hardware-reduced FADT (no PM1 blocks) or memory-mapped PM1 is a named error and the
//! console `quit` stays the one way to stop.

use crate::acpi_pm::{self, SleepType, PM1_CNT_SCI_EN, PM1_EN_PWRBTN, PM1_STS_PWRBTN, PM1_STS_WAK};
use acpi::address::{AddressSpace, GenericAddress};
use acpi::fadt::Fadt;
use acpi::{AcpiHandler, AcpiTables, PhysicalMapping};
use core::fmt;
use core::ptr::NonNull;
use x86_64::instructions::port::Port;

/// How long [`init`] waits for `SCI_EN` after writing `ACPI_ENABLE` to `SMI_CMD`: 1 s (ACPICA
/// waits up to 3 s; QEMU sets it at once).
const ACPI_ENABLE_MS: u64 = 1000;
/// How long [`soft_off`] and [`reset`] wait for the machine to go before saying it did not:
/// 1 s.
const TAKE_EFFECT_MS: u64 = 1000;

/// acpi's handler for an identity-mapped kernel: physical = virtual, nothing to unmap (the
/// ACPI tables lie below 4 GiB, inside the identity map).
#[derive(Clone)]
pub struct IdentityAcpi;

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

/// Why ACPI power management is not available (each leaves the console `quit` as the way to
/// stop; `quit` then halts instead of powering off).
#[derive(Debug)]
pub enum PowerError {
    /// The RSDP or the FADT could not be read (ACPI 6.5 §5.2.5, §5.2.9).
    NoFadt(acpi::AcpiError),
    /// The FADT says hardware-reduced ACPI (§4.1): no PM1 blocks, no fixed power button.
    HardwareReduced,
    /// A PM1 block is not in system I/O space (named: which block).
    NotPortIo(&'static str),
    /// The DSDT could not be read, or neither it nor an SSDT describes `\_S5`.
    S5(acpi_pm::S5Error),
    /// Soft-off or reset was written and the machine is still running.
    DidNotTakeEffect(&'static str),
    /// The FADT has no usable reset register (`RESET_REG_SUP` clear, or an address space other
    /// than system I/O, memory below 4 GiB, or PCI configuration space of bus 0).
    NoReset(&'static str),
    /// [`init`] did not run or failed: nothing to use.
    NotReady,
}

impl fmt::Display for PowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerError::NoFadt(e) => write!(f, "no usable FADT: {e:?}"),
            PowerError::HardwareReduced => {
                f.write_str("hardware-reduced ACPI (no PM1 blocks, no fixed power button)")
            }
            PowerError::NotPortIo(b) => write!(f, "{b} is not in system I/O space"),
            PowerError::S5(e) => write!(f, "{e}"),
            PowerError::DidNotTakeEffect(what) => {
                write!(f, "{what} was written, and the machine is still running")
            }
            PowerError::NoReset(why) => write!(f, "no FADT reset register: {why}"),
            PowerError::NotReady => f.write_str("ACPI power management is not set up"),
        }
    }
}

/// The FADT reset register (§5.2.9 `RESET_REG`, `RESET_VALUE`).
#[derive(Copy, Clone, Debug)]
enum ResetReg {
    /// A port (system I/O space).
    Io(u16),
    /// A byte of memory below 4 GiB (identity-mapped).
    Mem(u64),
    /// PCI configuration space of segment 0, bus 0 (§5.2.3.2: device, function, offset).
    PciConfig { dev: u8, func: u8, offset: u8 },
}

/// What [`init`] found: the PM1 ports, the S5 sleep type and the reset register.
#[derive(Debug)]
struct Pm {
    /// PM1a and PM1b status registers (PM1x_EVT_BLK + 0).
    sts: [Option<u16>; 2],
    /// PM1a and PM1b enable registers (PM1x_EVT_BLK + PM1_EVT_LEN / 2).
    en: [Option<u16>; 2],
    /// PM1a and PM1b control registers.
    cnt: [Option<u16>; 2],
    /// `\_S5`, or why it is missing (then [`soft_off`] says so).
    s5: Result<SleepType, acpi_pm::S5Error>,
    /// The reset register and value, or why there is none.
    reset: Result<(ResetReg, u8), &'static str>,
}

/// Set once by [`init`] on the boot CPU.
static PM: spin::Once<Pm> = spin::Once::new();

/// What [`init`] reports for the boot log.
pub struct PowerInfo {
    /// PM1a_EVT_BLK's port.
    pub pm1a_evt: u16,
    /// `\_S5`, or the named error.
    pub s5: Result<SleepType, acpi_pm::S5Error>,
    /// `SCI_EN` had to be set through `SMI_CMD` (firmware left legacy mode on).
    pub acpi_enabled_by_us: bool,
    /// The reset register, as text, or why there is none.
    pub reset: Result<(&'static str, u64, u8), &'static str>,
    /// The DSDT's physical address and length, header included (for `log=debug`).
    pub dsdt: Option<(u64, u32)>,
}

/// A GAS's port, if it is in system I/O space and fits 16 bits; else [`PowerError::NotPortIo`]
/// naming `what`.
fn port(g: &GenericAddress, what: &'static str) -> Result<u16, PowerError> {
    match g.address_space {
        AddressSpace::SystemIo => u16::try_from(g.address).map_err(|_| PowerError::NotPortIo(what)),
        _ => Err(PowerError::NotPortIo(what)),
    }
}

/// Read the FADT and `\_S5` from the tables at `rsdp` (0: scan the BIOS areas), take ACPI
/// mode if needed, and arm the fixed power button (§4.8.2.2.1.1). Boot CPU, once, before the
/// APs start.
///
/// # Errors
/// [`PowerError`] naming what is missing; a missing or unreadable `\_S5` is not an error here
/// (the button still stops Gannet; soft-off then names it).
pub fn init(rsdp: u64) -> Result<PowerInfo, PowerError> {
    // SAFETY: `rsdp` comes from the loader or `acpi_rsdp=` (or is 0: the BIOS areas are
    // scanned); identity-mapped memory, as in `smp::start_aps`.
    let tables = unsafe {
        if rsdp != 0 {
            AcpiTables::from_rsdp(IdentityAcpi, rsdp as usize)
        } else {
            AcpiTables::search_for_rsdp_bios(IdentityAcpi)
        }
    }
    .map_err(PowerError::NoFadt)?;
    let fadt = tables.find_table::<Fadt>().map_err(PowerError::NoFadt)?;
    // A copy: `flags` is a field of the packed FADT.
    let flags = fadt.flags;
    if flags.system_is_hw_reduced_acpi() {
        return Err(PowerError::HardwareReduced);
    }
    let evt_a = fadt.pm1a_event_block().map_err(PowerError::NoFadt)?;
    let evt_b = fadt.pm1b_event_block().map_err(PowerError::NoFadt)?;
    let cnt_a = fadt.pm1a_control_block().map_err(PowerError::NoFadt)?;
    let cnt_b = fadt.pm1b_control_block().map_err(PowerError::NoFadt)?;
    // PM1x_EVT_BLK is the status register then the enable register, each half the block
    // (§4.8.3.1). A generic address without a width (seen in some X_ fields) gets the 4-byte
    // block of every x86 chipset, 2-byte registers.
    let half = match evt_a.bit_width / 16 {
        0 => 2,
        h => u16::from(h),
    };
    let sts_a = port(&evt_a, "PM1a_EVT_BLK")?;
    let sts_b = evt_b.map(|g| port(&g, "PM1b_EVT_BLK")).transpose()?;
    let pm = Pm {
        sts: [Some(sts_a), sts_b],
        en: [Some(sts_a + half), sts_b.map(|p| p + half)],
        cnt: [
            Some(port(&cnt_a, "PM1a_CNT_BLK")?),
            cnt_b.map(|g| port(&g, "PM1b_CNT_BLK")).transpose()?,
        ],
        s5: find_s5(&tables),
        reset: reset_register(&fadt),
    };
    let dsdt = tables.dsdt().ok().map(|t| {
        (
            (t.address - acpi_pm::SDT_HEADER_LEN) as u64,
            t.length + acpi_pm::SDT_HEADER_LEN as u32,
        )
    });
    let acpi_enabled_by_us = acpi_mode(&pm, &fadt);
    arm_button(&pm);
    let info = PowerInfo {
        pm1a_evt: sts_a,
        s5: pm.s5,
        acpi_enabled_by_us,
        dsdt,
        reset: pm.reset.map(|(r, v)| match r {
            ResetReg::Io(p) => ("port", u64::from(p), v),
            ResetReg::Mem(a) => ("memory", a, v),
            ResetReg::PciConfig { dev, func, offset } => (
                "PCI 00",
                u64::from(dev) << 16 | u64::from(func) << 8 | u64::from(offset),
                v,
            ),
        }),
    };
    PM.call_once(|| pm);
    Ok(info)
}

/// `\_S5` from the DSDT, else from the first SSDT that has it (§7.4.2 puts it at the root of
/// the namespace, which any definition block may extend).
fn find_s5(tables: &AcpiTables<IdentityAcpi>) -> Result<SleepType, acpi_pm::S5Error> {
    let dsdt = tables
        .dsdt()
        .map_err(|_| acpi_pm::S5Error::BadTable("the FADT names no readable DSDT"))?;
    // SAFETY: `dsdt()` validated the table's header (signature, checksum over its length), so
    // its AML stream of `length` bytes after the header is mapped (identity) and belongs to it.
    let aml =
        unsafe { core::slice::from_raw_parts(dsdt.address as *const u8, dsdt.length as usize) };
    let first = acpi_pm::find_s5(aml);
    if first != Err(acpi_pm::S5Error::NoS5) {
        return first;
    }
    for ssdt in tables.ssdts() {
        // SAFETY: as for the DSDT: the iterator validated each SSDT's header.
        let aml =
            unsafe { core::slice::from_raw_parts(ssdt.address as *const u8, ssdt.length as usize) };
        if let Ok(t) = acpi_pm::find_s5(aml) {
            return Ok(t);
        }
    }
    first
}

/// The FADT's reset register and value (§5.2.9: valid when `RESET_REG_SUP`, flags bit 10).
fn reset_register(fadt: &Fadt) -> Result<(ResetReg, u8), &'static str> {
    let flags = fadt.flags;
    if !flags.supports_system_reset_via_fadt() {
        return Err("RESET_REG_SUP (FADT flags bit 10) is clear");
    }
    let g = fadt
        .reset_register()
        .map_err(|_| "RESET_REG is not a valid generic address")?;
    let reg = match g.address_space {
        AddressSpace::SystemIo => {
            ResetReg::Io(u16::try_from(g.address).map_err(|_| "port above 0xffff")?)
        }
        AddressSpace::SystemMemory if g.address < 1 << 32 => ResetReg::Mem(g.address),
        // §5.2.3.2: bits 47:32 device, 31:16 function, 15:0 offset, on bus 0 of segment 0.
        AddressSpace::PciConfigSpace => ResetReg::PciConfig {
            dev: (g.address >> 32) as u8 & 0x1f,
            func: (g.address >> 16) as u8 & 0x7,
            offset: g.address as u8,
        },
        _ => return Err("RESET_REG is in an address space the kernel does not write"),
    };
    Ok((reg, fadt.reset_value))
}

/// Read a 16-bit PM1 register.
fn read16(p: u16) -> u16 {
    // SAFETY: `p` is a PM1 register port the FADT names; reading it has no side effect.
    unsafe { Port::<u16>::new(p).read() }
}

/// Write a 16-bit PM1 register.
fn write16(p: u16, v: u16) {
    // SAFETY: `p` is a PM1 register port the FADT names; the callers write only the bits the
    // spec gives OSPM (write-1-to-clear status bits, enable bits, SLP_TYP/SLP_EN).
    unsafe { Port::<u16>::new(p).write(v) }
}

/// Take the fixed hardware into ACPI mode if firmware left it in legacy mode: `SCI_EN` clear,
/// `SMI_CMD` and `ACPI_ENABLE` given (§4.8.2.5, §5.2.9); wait (bounded) for `SCI_EN`. Whether
/// it had to. The SCI it enables stays masked at the IOAPIC, which the kernel never programs.
fn acpi_mode(pm: &Pm, fadt: &Fadt) -> bool {
    let Some(cnt) = pm.cnt[0] else { return false };
    if read16(cnt) & PM1_CNT_SCI_EN != 0 || fadt.smi_cmd_port == 0 || fadt.acpi_enable == 0 {
        return false;
    }
    let Ok(smi) = u16::try_from(fadt.smi_cmd_port) else {
        return false;
    };
    // SAFETY: SMI_CMD is the port the FADT names for exactly this write (§5.2.9).
    unsafe { Port::<u8>::new(smi).write(fadt.acpi_enable) };
    let deadline = super::time::Deadline::after_ms(ACPI_ENABLE_MS);
    while read16(cnt) & PM1_CNT_SCI_EN == 0 && !deadline.expired() {
        core::hint::spin_loop();
    }
    if read16(cnt) & PM1_CNT_SCI_EN == 0 {
        log::warn!("power: SCI_EN still clear {ACPI_ENABLE_MS} ms after ACPI_ENABLE");
    }
    true
}

/// Clear a stale `PWRBTN_STS` (write 1) and set `PWRBTN_EN` (keeping the other enables) in
/// PM1a and PM1b.
fn arm_button(pm: &Pm) {
    for (sts, en) in pm.sts.iter().zip(&pm.en) {
        if let (Some(sts), Some(en)) = (sts, en) {
            write16(*sts, PM1_STS_PWRBTN);
            write16(*en, read16(*en) | PM1_EN_PWRBTN);
        }
    }
}

/// Whether the fixed power button was pressed since the last call (or since [`init`]): reads
/// `PWRBTN_STS` of PM1a and PM1b and clears what it found (write 1; §4.8.2.2.1.1). Boot CPU,
/// housekeeping tick. `false` without [`init`].
pub fn button_pressed() -> bool {
    let Some(pm) = PM.get() else { return false };
    let mut pressed = false;
    for sts in pm.sts.iter().flatten() {
        if read16(*sts) & PM1_STS_PWRBTN != 0 {
            write16(*sts, PM1_STS_PWRBTN);
            pressed = true;
        }
    }
    pressed
}

/// Enter S5 (soft-off): interrupts off, `WAK_STS` and `PWRBTN_STS` cleared, then `SLP_TYPx`
/// written to PM1a_CNT and PM1b_CNT with `SLP_EN` clear, then with it set (the sequence of
/// ACPICA's `acpi_hw_legacy_sleep`; §16.1.7, Table 4.13). Returns only if the machine is still
/// running [`TAKE_EFFECT_MS`] later, or with the reason it could not try.
pub fn soft_off() -> PowerError {
    let Some(pm) = PM.get() else {
        return PowerError::NotReady;
    };
    let typ = match pm.s5 {
        Ok(t) => t,
        Err(e) => return PowerError::S5(e),
    };
    x86_64::instructions::interrupts::disable();
    for sts in pm.sts.iter().flatten() {
        write16(*sts, PM1_STS_WAK | PM1_STS_PWRBTN);
    }
    let slp = [typ.a, typ.b];
    for (cnt, &t) in pm.cnt.iter().zip(&slp) {
        if let Some(cnt) = *cnt {
            write16(cnt, SleepType::cnt_typ(read16(cnt), t));
        }
    }
    for (cnt, &t) in pm.cnt.iter().zip(&slp) {
        if let Some(cnt) = *cnt {
            write16(cnt, SleepType::cnt_sleep(read16(cnt), t));
        }
    }
    super::time::Deadline::after_ms(TAKE_EFFECT_MS).wait();
    PowerError::DidNotTakeEffect("S5 (PM1 control SLP_TYP | SLP_EN)")
}

/// Whether [`reset`] can try: [`init`] ran and the FADT has a usable reset register.
///
/// # Errors
/// [`PowerError::NotReady`] or [`PowerError::NoReset`] naming why.
pub fn can_reset() -> Result<(), PowerError> {
    match PM.get().map(|pm| pm.reset) {
        None => Err(PowerError::NotReady),
        Some(Err(why)) => Err(PowerError::NoReset(why)),
        Some(Ok(_)) => Ok(()),
    }
}

/// Reset the machine through the FADT reset register (§4.8.3.6: write `RESET_VALUE` to
/// `RESET_REG`). Returns only if the machine is still running [`TAKE_EFFECT_MS`] later, or
/// with the reason it could not try.
pub fn reset() -> PowerError {
    let Some(pm) = PM.get() else {
        return PowerError::NotReady;
    };
    let (reg, value) = match pm.reset {
        Ok(r) => r,
        Err(why) => return PowerError::NoReset(why),
    };
    x86_64::instructions::interrupts::disable();
    match reg {
        // SAFETY: the port the FADT names as the reset register, written with its value.
        ResetReg::Io(p) => unsafe { Port::<u8>::new(p).write(value) },
        // SAFETY: the FADT's reset register, a byte below 4 GiB (identity-mapped MMIO).
        ResetReg::Mem(a) => unsafe { (a as *mut u8).write_volatile(value) },
        ResetReg::PciConfig { dev, func, offset } => {
            let addr =
                1u32 << 31 | u32::from(dev) << 11 | u32::from(func) << 8 | u32::from(offset & 0xfc);
            // SAFETY: configuration mechanism #1 (0xCF8 address, 0xCFC + byte data) on bus 0,
            // at the register the FADT names; one CPU runs this (the end of `reboot`).
            unsafe {
                Port::<u32>::new(0xcf8).write(addr);
                Port::<u8>::new(0xcfc + u16::from(offset & 3)).write(value);
            }
        }
    }
    super::time::Deadline::after_ms(TAKE_EFFECT_MS).wait();
    PowerError::DidNotTakeEffect("the FADT reset register")
}
