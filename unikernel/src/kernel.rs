//! The machine part of Gannet as a library: [`start`] boots the machine and runs an
//! [`Appliance`] on every forwarding core; [`crate::main!`] makes it an image's entry.
//!
//! Boot path: `arch::boot` (PVH or multiboot2 entry, long mode) → the image's `kernel_main`
//! (from [`crate::main!`]) → [`start`]: serial log, TSC calibration, GDT/IDT, boot data
//! (`arch::pvh` or `arch::multiboot2`), configuration from the command line, memory (`mem`),
//! SMP, then `run::run`: devices (`setup`), the dataplane's per-core loop.
//!
//! # Map (arrows point down only)
//!
//! | module | what | may use |
//! |---|---|---|
//! | `kernel` | [`start`], the boot sequence, the panic handler | everything below |
//! | `run` | boot CPU and AP forwarding entry, the poll loop with idle and console | everything below |
//! | `simbench` | `sim=K`: the deterministic datapath benchmark on simulated ports | control, setup, platform, mem, arch |
//! | `tlbtest` | `tlbtest=N`: the TLB shootdown torture test | tlb, mem, smp, arch |
//! | `platform` | the dataplane's `Platform` for this machine; the one `Fabric` | control, setup, smp, arch |
//! | `control` | console commands, STATS and `/metrics` from snapshots, smoltcp management plane | smp, arch, percpu |
//! | `setup` | PCI discovery, device bring-up, MSI-X routing; the FIB | mem, arch, percpu |
//! | `guard` | `guard=on`: the page guard (`mm::guard`) over the identity map and the shootdown | tlb, mem, arch, percpu |
//! | `tlb` | the one `mm::tlb::Shootdown`: arch operations, TLB IPI, poll and halt hooks | smp, arch, percpu |
//! | `smp` | MADT, INIT-SIPI-SIPI, IPIs, `register_ap_entry`, drain requests | arch, percpu |
//! | `mem` | page tables, e820 → zone, the vmap area, the virtio HAL | arch (boot data) |
//! | `arch` | boot, traps, APIC, TSC time and the boot phases, serial, exit | percpu |
//! | `nf_control` | feature `nf-indirect-control` only: the no-indirect-call check's negative control, a type-erased NF | dataplane |
//! | `percpu` | CPU ids, per-CPU area, per-CPU `in_irq`, the CPU table | nothing |
//!
//! The forwarding logic itself is the library's `dataplane` (host-tested); what runs on each
//! core is an [`Appliance`] (`crate::appliance`).

use crate::appliance::Appliance;
use crate::arch::exit::{self, exit, fail, ExitCode};
use crate::arch::phases::{self, Phase};
use crate::arch::{apic, boot as entry, multiboot2, pvh, serial, time, trap};
use crate::println;
use crate::{arch, control, guard, mem, percpu, run, smp, tlb, tlbtest};
use core::marker::PhantomData;
use log::{info, LevelFilter};
use netstack::config::bundle::BundleError;
use netstack::{Config, LogLevel};

/// The kernel from the boot trampoline's call on (the image's `kernel_main`, which
/// [`crate::main!`] defines), on the boot stack, interrupts off: boot, then forward with the
/// appliance `A` on every core until `quit`. Never returns.
///
/// `start_info` is the physical address of `hvm_start_info` (PVH) or of the multiboot2 boot
/// information (GRUB; `entry::mb2_magic` nonzero); `entry_tsc` the TSC read first thing at the
/// entry (the boot phases' origin, `arch::phases`).
pub fn start<A: Appliance>(start_info: u32, entry_tsc: u64) -> ! {
    phases::set_origin(entry_tsc);
    serial::init(LevelFilter::Info);
    // The PIT window (when CPUID does not give the rate) runs while memory is set up; nothing
    // before `calibrate_finish` logs or waits (`fail` finishes it first).
    time::calibrate_start(entry_tsc);
    phases::mark(Phase::Calibrate);
    trap::init();
    smp::init_bsp();

    let mb2 = entry::mb2_magic();
    let loader = if mb2 == 0 { "PVH" } else { "multiboot2" };
    let boot = if mb2 == 0 {
        // SAFETY: `start_info` is what the PVH loader passed in ebx and nothing has touched low
        // memory yet.
        match unsafe { pvh::read(u64::from(start_info)) } {
            Ok(b) => b,
            Err(e) => fail(format_args!("boot info error: {e:?}")),
        }
    } else {
        // SAFETY: `start_info` is what the multiboot2 loader passed in ebx, `mb2` its eax;
        // nothing has touched memory outside the image yet; one CPU runs.
        match unsafe { multiboot2::read(mb2, start_info) } {
            Ok(b) => b,
            Err(e) => fail(format_args!("boot info error (multiboot2): {e:?}")),
        }
    };
    let (cfg, overlay) = read_config::<A>(&boot);
    if let Err(e) = control::faults::check(&cfg) {
        fail(format_args!("config error: key `fault`: {e}"));
    }
    phases::mark(Phase::BootData);

    let modules: heapless::Vec<(u64, u64), { pvh::MAX_MODULES }> =
        boot.modules.iter().map(|&(a, n)| (a, a + n)).collect();
    let mem = mem::init(&boot.memmap, &modules);
    time::calibrate_finish();
    phases::mark(Phase::TscWait);
    // The LAPIC timer's rate is measured across the boot log below (at least 250 µs): the
    // window costs no wait of its own.
    let bsp_apic = apic::init();
    let lapic_window = apic::calibrate_timer_start();
    info!("Gannet {} booting ({loader})", env!("CARGO_PKG_VERSION"));
    log::set_max_level(match cfg.log {
        LogLevel::Error => LevelFilter::Error,
        LogLevel::Warn => LevelFilter::Warn,
        LogLevel::Info => LevelFilter::Info,
        LogLevel::Debug => LevelFilter::Debug,
    });
    log_config(&cfg, &boot);
    if !overlay.is_empty() {
        info!(
            "config: from fw_cfg {}: \"{}\" (over the command line)",
            crate::arch::fw_cfg::CMDLINE,
            netstack::config::RedactedCmdline(&overlay)
        );
    }
    let (zone, mi) = match mem {
        Ok(z) => z,
        Err(e) => fail(format_args!("memory error: {e:?}")),
    };
    log_memory(&mi);
    phases::mark(Phase::Log);
    tlb::init(usize::from(cfg.tlb_ceiling));
    trap::set_fault_explainer(explain_fault);
    if cfg.guard {
        install_guard(&cfg, zone);
    }
    start_cpus(&cfg, &boot, zone, bsp_apic, lapic_window);
    phases::mark(Phase::Aps);
    if cfg.tlbtest.is_some() {
        tlbtest::run(&cfg, zone);
    }
    let (routes_file, rules_file) = boot_files::<A>(&boot, &cfg, zone);
    run::run::<A>(&cfg, zone, routes_file, rules_file)
}

/// The configuration: fw_cfg's keys ([`crate::arch::fw_cfg::CMDLINE`]) laid over the loader's
/// command line, parsed once; `debug_exit` set from it first (so a configuration error leaves
/// through isa-debug-exit too). Returns it and the fw_cfg keys (empty without them). An error
/// stops the boot naming the key, and fw_cfg when the key came from there.
fn read_config<A: Appliance>(
    boot: &pvh::BootInfo,
) -> (Config, heapless::String<{ pvh::MAX_CMDLINE }>) {
    // This instance's keys from fw_cfg (`opt/gannet/cmdline`), laid over the loader's line.
    let overlay = fw_cfg_cmdline();
    let mut merged: heapless::String<{ pvh::MAX_CMDLINE }> = heapless::String::new();
    if let Err(e) = netstack::config::merge::merge(&boot.cmdline, &overlay, &mut merged) {
        fail(format_args!(
            "config error: fw_cfg {}: {e}",
            crate::arch::fw_cfg::CMDLINE
        ));
    }
    // `debug_exit=on` (opt-in: the tests, xtask) before parsing, so a configuration error
    // leaves through isa-debug-exit too; otherwise every end is ACPI S5 soft-off (arch::exit).
    exit::set_debug_exit(
        merged
            .split_ascii_whitespace()
            .any(|w| w == "debug_exit=on"),
    );
    let cfg = match A::parse_config(&merged) {
        Ok(c) => c,
        Err(e) => {
            let from = e
                .key()
                .and_then(|k| netstack::config::merge::source_of(k, &boot.cmdline, &overlay));
            // An unknown key: the image's own network function's keys too.
            let nf_keys = matches!(e, netstack::ConfigError::UnknownKey(_))
                .then_some(NfKeysOf::<A>(PhantomData));
            let nf_keys = OptDisplay(nf_keys.as_ref());
            match from {
                Some(netstack::config::merge::Source::Overlay) => fail(format_args!(
                    "config error: {e}{nf_keys} (from fw_cfg {})",
                    crate::arch::fw_cfg::CMDLINE
                )),
                _ => fail(format_args!("config error: {e}{nf_keys}")),
            }
        }
    };
    (cfg, overlay)
}

/// The keys of `A`'s own network function, after an unknown key's error
/// ([`Appliance::write_nf_keys`]).
struct NfKeysOf<A>(PhantomData<A>);

impl<A: Appliance> core::fmt::Display for NfKeysOf<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        A::write_nf_keys(f)
    }
}

/// A value written if there is one, nothing otherwise.
struct OptDisplay<'a, T>(Option<&'a T>);

impl<T: core::fmt::Display> core::fmt::Display for OptDisplay<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(t) => t.fmt(f),
            None => Ok(()),
        }
    }
}

/// The routes and rules files from the appliance's files: fw_cfg's [`crate::arch::fw_cfg::BUNDLE`] when
/// the instance has one (it replaces a boot module, said in the log), else the first boot
/// module (QEMU `-initrd`). Either is an appliance bundle (`#!gannet-bundle 1`, its files by
/// name, `netstack::config::bundle`) or, without that line, the routes file itself. Text that
/// is not UTF-8, a bad bundle, or a fw_cfg file larger than [`FW_CFG_BUNDLE_MAX`] stops the
/// boot with a `config error` naming the problem.
fn boot_files<A: Appliance>(
    boot: &pvh::BootInfo,
    cfg: &Config,
    zone: &'static mm::Zone,
) -> (Option<&'static str>, Option<&'static str>) {
    let (text, source) = match fw_cfg_bundle(zone) {
        Some(bytes) => {
            if !boot.modules.is_empty() {
                info!(
                    "boot module: not used: fw_cfg {} replaces it",
                    crate::arch::fw_cfg::BUNDLE
                );
            }
            (bytes, "fw_cfg opt/gannet/bundle")
        }
        None => {
            let Some(&(addr, size)) = boot.modules.first() else {
                return (None, None);
            };
            // SAFETY: the loader placed the module at [addr, addr + size); mem::init kept that
            // range out of the allocator, so it is intact and never written.
            let bytes = unsafe { core::slice::from_raw_parts(addr as *const u8, size as usize) };
            (bytes, "boot module")
        }
    };
    let text = match core::str::from_utf8(text) {
        Ok(t) => t,
        Err(e) => fail(format_args!(
            "config error: {source} is not UTF-8 text: {e}"
        )),
    };
    let b = match A::read_bundle(text, cfg.mode) {
        Ok(b) => b,
        Err(e) => {
            // A file the image's own NF does not declare: the files it does.
            let nf_files =
                matches!(e, BundleError::NotDeclared(..)).then_some(NfFilesOf::<A>(PhantomData));
            let nf_files = OptDisplay(nf_files.as_ref());
            // The bundle's errors name the boot module (and its lines); fw_cfg's file is read
            // as one.
            if source == "boot module" {
                fail(format_args!("config error: {e}{nf_files}"))
            }
            fail(format_args!(
                "config error: {source}, read as the boot module: {e}{nf_files}"
            ))
        }
    };
    if text.starts_with(netstack::config::bundle::BUNDLE_MAGIC) {
        log::info!("{source}: bundle of {} bytes", text.len());
        for name in b.names() {
            let n = b.file(name).map_or(0, str::len);
            log::info!("{source}: file `{name}`, {n} bytes");
        }
    } else {
        log::info!("{source}: routes file of {} bytes", text.len());
    }
    if let Err(e) = A::accept_files(&b) {
        // The file's line, and where that is in the module.
        match b.first_line(e.name) {
            Some(first) if e.error.line > 0 => fail(format_args!(
                "config error: {source}: {e} ({source} line {})",
                first + e.error.line - 1
            )),
            _ => fail(format_args!("config error: {source}: {e}")),
        }
    }
    (b.file("routes"), b.file("rules"))
}

/// The files of `A`'s own network function, after a bundle's file it does not declare
/// ([`Appliance::write_nf_files`]).
struct NfFilesOf<A>(PhantomData<A>);

impl<A: Appliance> core::fmt::Display for NfFilesOf<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        A::write_nf_files(f)
    }
}

/// Largest fw_cfg bundle read (bytes): 8 MiB, as `PUT /routes` takes.
const FW_CFG_BUNDLE_MAX: u32 = 8 << 20;

/// fw_cfg's [`crate::arch::fw_cfg::BUNDLE`], read into zone pages kept for the kernel's life;
/// `None` without the device or the file.
fn fw_cfg_bundle(zone: &'static mm::Zone) -> Option<&'static [u8]> {
    use crate::arch::fw_cfg;
    let file = fw_cfg::find(fw_cfg::BUNDLE)?;
    if file.size > FW_CFG_BUNDLE_MAX {
        fail(format_args!(
            "config error: fw_cfg {}: {} bytes, at most {FW_CFG_BUNDLE_MAX}",
            fw_cfg::BUNDLE,
            file.size
        ));
    }
    let Some(buf) = mem::alloc_forever(zone, file.size as usize) else {
        fail(format_args!(
            "memory error: no room for fw_cfg {} ({} bytes)",
            fw_cfg::BUNDLE,
            file.size
        ))
    };
    let got = fw_cfg::read_file(file, buf)?;
    Some(&*got)
}

/// This instance's command-line keys from fw_cfg ([`crate::arch::fw_cfg::CMDLINE`]); empty
/// without the device or the file. A file too long for a command line, or not UTF-8 text,
/// stops the boot by name.
fn fw_cfg_cmdline() -> heapless::String<{ pvh::MAX_CMDLINE }> {
    use crate::arch::fw_cfg;
    let mut out = heapless::String::new();
    let Some(file) = fw_cfg::find(fw_cfg::CMDLINE) else {
        return out;
    };
    let mut buf = [0u8; pvh::MAX_CMDLINE];
    let Some(bytes) = fw_cfg::read_file(file, &mut buf) else {
        fail(format_args!(
            "config error: fw_cfg {}: {} bytes, at most {}",
            fw_cfg::CMDLINE,
            file.size,
            pvh::MAX_CMDLINE
        ))
    };
    match core::str::from_utf8(bytes) {
        // Fits: no longer than the buffer, which is the string's capacity.
        Ok(t) => {
            let _ = out.push_str(t.trim_end_matches('\0'));
        }
        Err(e) => fail(format_args!(
            "config error: fw_cfg {}: not UTF-8 text: {e}",
            fw_cfg::CMDLINE
        )),
    }
    out
}

/// What memory set-up found, in the boot log.
fn log_memory(mi: &mem::MemInfo) {
    info!(
        "mm: kernel {:#x}-{:#x}, mem_map {} KiB, {} pages ({} MiB) managed, {} of them above 4 GiB",
        mi.kernel.0,
        mi.kernel.1,
        mi.mem_map_bytes / 1024,
        mi.managed_pages,
        mi.managed_pages * 4 / 1024,
        mi.high_pages,
    );
    // Detail for whoever debugs the page tables (`log=debug`); the memory line above says what
    // a user needs. Every boot-log byte is a host write under QEMU's 16550 (docs/benchmarks-journal.md,
    // "Boot time, fifth pass").
    log::debug!(
        "mm: {} free pages deferred (mem_map slots written by cpu 0 after ready, or on demand)",
        mi.deferred_pages
    );
    log::debug!(
        "paging: identity map 0-{} GiB (2 MiB pages), vmap area {:#x}+{} MiB (4 KiB pages)",
        mi.identity_top >> 30,
        mem::paging::VMAP_BASE,
        mem::paging::VMAP_BYTES >> 20,
    );
    if mi.ignored_high_pages > 0 {
        log::warn!(
            "mm: {} RAM pages above the identity map's {} GiB limit ignored",
            mi.ignored_high_pages,
            mem::paging::IDENTITY_MAX_GIB
        );
    }
}

/// `guard=on`: the page guard, 1,024 pages per shootdown (`tlb=batch`) or 1 (`immediate`).
fn install_guard(cfg: &Config, zone: &'static mm::Zone) {
    let batch = if cfg.tlb == netstack::TlbMode::Immediate {
        1
    } else {
        mm::guard::GUARD_BATCH
    };
    match guard::install(zone, batch) {
        Ok(g) => info!(
            "guard: on: freed packet buffers leave the identity map, {batch} pages per shootdown ({} page-table pages, {} KiB; {} free pages unmapped at boot in {} us, {} us of it unmapping)",
            g.tables,
            g.tables * 4,
            g.unmapped,
            time::tsc_to_ns(g.cycles) / 1000,
            time::tsc_to_ns(g.unmap_cycles) / 1000
        ),
        Err(e) => fail(format_args!("guard: cannot split the identity map: {}", e.0)),
    }
}

/// The effective configuration and the boot data, in the boot log.
fn log_config(cfg: &Config, boot: &pvh::BootInfo) {
    info!(
        "command line: \"{}\"",
        netstack::config::RedactedCmdline(boot.cmdline.as_str())
    );
    if cfg.mode == netstack::Mode::Router {
        info!(
            "config: ip0={} ip1={}",
            cfg.ip[0].unwrap(),
            cfg.ip[1].unwrap()
        );
        for (net, gw) in cfg.router.routes.iter() {
            info!("config: route {net} via {gw}");
        }
    }
    info!(
        "config: mode={} peer0={} peer1={} burst={} log={} pool={} refill={} idle={}",
        cfg.mode.as_str(),
        cfg.peer[0],
        cfg.peer[1],
        cfg.burst,
        cfg.log.as_str(),
        cfg.pool.as_str(),
        cfg.refill.as_str(),
        cfg.idle.as_str()
    );
    info!(
        "TSC: {} Hz ({})",
        time::tsc_hz(),
        time::tsc_source().as_str()
    );
    for r in boot.memmap.iter() {
        log::debug!(
            "e820: {:#012x}-{:#012x} type {}",
            r.addr,
            r.addr + r.size,
            r.kind
        );
    }
}

/// SMP: the boot CPU's LAPIC timer rate (its LAPIC is up and the measurement `lapic_window`
/// began before the boot log), then every AP the MADT lists (their stacks come
/// from the zone before the forwarder counts free pages at boot). Fails the boot on bad ACPI;
/// without any ACPI (no RSDP) and with `virtio_mmio.device=` ports (microvm, `acpi=off`) the
/// boot CPU runs alone.
fn start_cpus(
    cfg: &Config,
    boot: &pvh::BootInfo,
    zone: &'static mm::Zone,
    bsp_apic: u32,
    lapic_window: apic::TimerWindow,
) {
    let timer_hz = apic::calibrate_timer_finish(lapic_window);
    info!("LAPIC timer: {timer_hz} Hz (every CPU)");
    phases::mark(Phase::Lapic);
    smp::bsp_online(bsp_apic);
    let rsdp = match cfg.acpi_rsdp {
        Some(a) => {
            info!(
                "smp: RSDP at {a:#x} (acpi_rsdp=, not the loader's {:#x})",
                boot.rsdp
            );
            a
        }
        None => boot.rsdp,
    };
    if rsdp == 0 && !cfg.virtio_mmio.is_empty() {
        // QEMU `-machine microvm,acpi=off` (and Firecracker-class VMMs): no ACPI, so no MADT
        // to list the other CPUs; the devices came from the command line instead.
        info!("smp: no ACPI tables (no RSDP; virtio-mmio devices from the command line): the boot CPU only, 1 CPUs online");
        info!(
            "power: no ACPI (no power button, no soft-off): only the console `quit` stops Gannet"
        );
        return;
    }
    init_power(rsdp);
    init_pci_cam(rsdp);
    match smp::start_aps(zone, rsdp, bsp_apic, &|cpu, bottom| {
        stack_guard_page(zone, cpu, bottom)
    }) {
        Ok(n) => info!("smp: {n} CPUs online"),
        Err(e) => fail(format_args!("smp: {e}")),
    }
}

/// PCI configuration access: ECAM when the MCFG table gives segment 0's region for every bus
/// (q35), else the I/O ports (`pc`, or a partial region); said in the boot log.
fn init_pci_cam(rsdp: u64) {
    match arch::mcfg::ecam(rsdp) {
        arch::mcfg::Ecam::Whole(base) => {
            // 256 MiB below 4 GiB is identity-mapped already; above, map it.
            if let Err(e) = mem::paging::ensure_identity(base, 256 << 20) {
                log::warn!("pci: ECAM at {base:#x} cannot be mapped ({e}): port I/O");
                return;
            }
            // SAFETY: segment 0's ECAM region for buses 0..=255 from the MCFG table, mapped
            // just above (identity), for the kernel's life; only `PciCam` touches it.
            unsafe { drivers::pci::use_ecam(base) };
            info!("pci: configuration access through ECAM at {base:#x} (MCFG, segment 0, buses 0-255)");
        }
        arch::mcfg::Ecam::Partial { base, start, end } => info!(
            "pci: configuration access through port I/O (MCFG's ECAM at {base:#x} covers buses {start}-{end} only)"
        ),
        arch::mcfg::Ecam::None => info!("pci: configuration access through port I/O (no MCFG)"),
    }
}

/// ACPI power management (`arch::power`): arm the fixed power button as early as the tables
/// are known (a press from here on is latched and stops Gannet once it is ready), and say in
/// the boot log how Gannet can be stopped. Missing pieces are logged, never fatal: the console
/// `quit` always works.
fn init_power(rsdp: u64) {
    match arch::power::init(rsdp) {
        Ok(p) => {
            if let Some((addr, len)) = p.dsdt {
                log::debug!("power: DSDT at {addr:#x}, {len} bytes");
            }
            info!(
                "power: ACPI power button armed (PM1a_EVT_BLK port {:#x}{}; PWRBTN_STS polled every 10 ms on cpu 0 once ready)",
                p.pm1a_evt,
                if p.acpi_enabled_by_us { ", ACPI mode entered through SMI_CMD" } else { "" }
            );
            match p.s5 {
                Ok(t) => info!(
                    "power: soft-off is ACPI S5: SLP_TYPa={} SLP_TYPb={} from \\_S5",
                    t.a, t.b
                ),
                Err(e) => log::warn!("power: {e}; the power button and `quit` drain, then halt"),
            }
            match p.reset {
                Ok((space, addr, value)) => {
                    info!("power: reset register {space} {addr:#x} value {value:#x} (console `reboot`)")
                }
                Err(why) => info!("power: no reset register ({why}): `reboot` is refused"),
            }
        }
        Err(e) => log::warn!(
            "power: no ACPI power management ({e}): only the console `quit` stops Gannet"
        ),
    }
}

/// Per CPU: the unmapped guard page below its stack (0 = none).
static STACK_GUARDS: [core::sync::atomic::AtomicU64; percpu::MAX_CPUS] =
    [const { core::sync::atomic::AtomicU64::new(0) }; percpu::MAX_CPUS];

/// Unmap the lowest page of CPU `cpu`'s stack (`bottom`, physical = virtual) so an overflow
/// faults (reported as one) instead of writing into the next pages. No CPU has used it, so a
/// local flush suffices.
fn stack_guard_page(zone: &'static mm::Zone, cpu: usize, bottom: u64) {
    let split = mem::paging::split_identity_2m(bottom, || mem::alloc_table(zone));
    match split.and_then(|()| mem::paging::set_identity_present(bottom, false)) {
        Ok(_) => {
            x86_64::instructions::tlb::flush(x86_64::VirtAddr::new(bottom));
            STACK_GUARDS[cpu].store(bottom, core::sync::atomic::Ordering::Release);
        }
        Err(e) => log::warn!("smp: cpu {cpu}: no stack guard page: {e}"),
    }
}

/// What a page fault's CR2 was: a stack guard page, or (with `guard=on`) a freed page.
fn explain_fault(cr2: u64) -> Option<&'static str> {
    let page = cr2 & !(mm::PAGE_SIZE as u64 - 1);
    if STACK_GUARDS
        .iter()
        .any(|g| g.load(core::sync::atomic::Ordering::Acquire) == page && page != 0)
    {
        return Some("stack overflow: CR2 is the guard page below a CPU's stack");
    }
    guard::explain(cr2)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: we never return to the panicking code; a console lock it held is abandoned.
    unsafe { serial::COM.force_unlock() };
    match info.location() {
        Some(l) => println!(
            "PANIC at {}:{}:{}: {}",
            l.file(),
            l.line(),
            l.column(),
            info.message()
        ),
        None => println!("PANIC: {}", info.message()),
    }
    exit(ExitCode::Failure)
}
