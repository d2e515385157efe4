//! What the console's commands do (on the boot CPU, from its poll loop's idle branch).

use super::console::{Command, HELP};
use super::stats::{self as fmt_stats, SystemSnap};
use crate::arch::exit::{exit, ExitCode};
use crate::arch::serial::print;
use crate::arch::time::{tsc_hz, Deadline};
use crate::dataplane::{Core, Platform};
use crate::percpu::{current_cpu, CPUS, MAX_CPUS, ONLINE};
use crate::println;
use crate::setup::fib::{self, RouteDelta};
use crate::smp::{send_ipi, wake_others, IpiTarget, DRAIN, PING_VECTOR};
use core::sync::atomic::Ordering;
use log::{error, info};
use mm::{Pfn, Zone};

/// How long `drain_all_pages` waits for every CPU: 1 s.
const DRAIN_TIMEOUT_MS: u64 = 1000;
/// How long `ipi` waits for the CPUs to answer: 100 ms.
const IPI_ANSWER_MS: u64 = 100;
/// How long `quit` waits for the other cores to finish each phase: 2 s.
const CORE_STOP_NS: u64 = 2_000_000_000;

/// Facts fixed at boot that the commands print.
#[derive(Copy, Clone)]
pub struct BootFacts {
    /// Free pages right after the allocator came up (`quit` must come back to this).
    pub free_pages_boot: u64,
    /// The zone.
    pub zone: &'static Zone,
}

/// The machine-wide part of STATS and `/metrics` now.
pub fn system_snap(mode: netstack::Mode, queues: usize, facts: &BootFacts) -> SystemSnap {
    SystemSnap {
        mode,
        nf_name: fmt_stats::NF_NAME.get().copied().unwrap_or(mode.as_str()),
        tsc_hz: tsc_hz(),
        cpus_online: ONLINE.load(Ordering::Acquire),
        queues,
        free_pages_boot: facts.free_pages_boot,
        zone_free_pages: facts.zone.free_pages(),
        buddyinfo: facts.zone.buddyinfo(),
        fib: fib::fib_stats(),
        acl: crate::setup::acl::acl_stats(),
    }
}

/// Run console command `cmd` on the boot CPU's core; `release` runs once before a command
/// that ends the run (`quit`, the power button, `reboot`) starts the quit phases: the
/// appliance hands back the frames it holds.
pub fn run<P: Platform>(
    cmd: Command,
    core: &mut Core<P>,
    facts: &BootFacts,
    release: &mut dyn FnMut(&mut Core<P>),
) {
    match cmd {
        Command::Stats => print_stats(core, facts),
        Command::Help => println!("{HELP}"),
        Command::Buddyinfo => print_buddyinfo(facts.zone),
        Command::Pools => print_pools(core),
        Command::Metrics => print_metrics(core, facts),
        Command::Routes => print_routes(core),
        Command::Acl => print_acl(),
        Command::AclReload => crate::setup::acl::reload(),
        Command::Neigh => {
            print_neigh(core);
            // Each other routing core prints its own table from its loop.
            let fabric = core.fabric();
            for (k, dump) in fabric
                .neigh_dump
                .iter()
                .enumerate()
                .take(fabric.cores())
                .skip(1)
            {
                dump.store(true, Ordering::Release);
                P::wake(k);
            }
        }
        Command::Drain => drain_all(core),
        Command::Cpus => print_cpus(core),
        Command::Ipi => ipi_ping(),
        Command::Uaf => use_after_free(core),
        Command::UafBuddy => use_after_free_buddy(core),
        Command::UafBlock => use_after_free_block(core),
        Command::RouteAdd(net, gw) => route_change(core, RouteDelta::Add(net, gw)),
        Command::RouteDel(net) => route_change(core, RouteDelta::Del(net)),
        Command::RoutesCheck => match core.route() {
            Some(_) => fib::check_pending(&fib::route_check(core.cfg())),
            None => println!("routes: not in router mode"),
        },
        Command::RoutesCommit | Command::RoutesReload => match core.route() {
            Some(_) => fib::commit(cmd == Command::RoutesReload),
            None => println!("routes: not in router mode"),
        },
        Command::Fault(c) => super::faults::run(c),
        Command::Nat(f) if core.cfg().mode == netstack::Mode::Nat => {
            // Each NAT core lists its own table from its next tick (its state is its own).
            crate::dataplane::nf::builtin::request_nat_show(f, core.fabric().cores());
            for k in 1..core.fabric().cores() {
                P::wake(k);
            }
        }
        Command::NatTimeouts(t) if core.cfg().mode == netstack::Mode::Nat => {
            let generation =
                crate::dataplane::nf::builtin::request_nat_timeouts(t, core.fabric().cores());
            println!("nat: timeouts generation {generation}: every NAT core takes them from its next tick");
            for k in 1..core.fabric().cores() {
                P::wake(k);
            }
        }
        Command::Nat(_) | Command::NatTimeouts(_) => println!("nat: not in mode=nat"),
        Command::Quit => {
            release(core);
            quit(core, facts, End::Exit)
        }
        Command::PowerButton => {
            info!("power button pressed: stopping as `quit` does");
            release(core);
            quit(core, facts, End::Exit)
        }
        Command::Reboot => match crate::arch::power::can_reset() {
            Ok(()) => {
                release(core);
                quit(core, facts, End::Reset)
            }
            Err(e) => println!("reboot: refused: {e}"),
        },
    }
}

/// The fixed ACPI power button, as a console command: [`Command::PowerButton`] when
/// `PWRBTN_STS` was set since the last look (`arch::power::button_pressed`). The boot CPU's
/// housekeeping tick asks, after the console.
pub fn power_button() -> Option<Command> {
    crate::arch::power::button_pressed().then_some(Command::PowerButton)
}

/// How [`quit`] ends once every page is back.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum End {
    /// `arch::exit::exit`: isa-debug-exit with `debug_exit=on`, else ACPI S5 soft-off.
    Exit,
    /// The FADT reset register (`reboot`).
    Reset,
}

/// `route add` / `route del`: check a change against the ports and the pending changes, and
/// queue it for `routes commit` (router mode); a refused one is named and dropped alone.
fn route_change<P: Platform>(core: &Core<P>, d: RouteDelta) {
    if core.route().is_none() {
        return println!("routes: not in router mode");
    }
    fib::queue_delta(d, &fib::route_check(core.cfg()));
}

/// `stats`: one STATS line.
pub fn print_stats<P: Platform>(core: &Core<P>, facts: &BootFacts) {
    let sys = system_snap(core.cfg().mode, core.fabric().queues(), facts);
    fmt_stats::print_stats(&core.all_pairs(), &sys);
}

/// `metrics`: the `/metrics` body on the console (the management plane's counters are its
/// own: only `GET /metrics` has them), then `# EOF` (a comment to Prometheus 0.0.4, the end
/// for a reader of the console).
pub fn print_metrics<P: Platform>(core: &Core<P>, facts: &BootFacts) {
    /// The console as a `fmt::Write`.
    struct Console;
    impl core::fmt::Write for Console {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            print(format_args!("{s}"));
            Ok(())
        }
    }
    let sys = system_snap(core.cfg().mode, core.fabric().queues(), facts);
    let _ = fmt_stats::write_prometheus(&core.all_pairs(), &sys, None, &mut Console);
    println!("# EOF");
}

/// `pools`: one line per page_pool of every forwarding core (others' as last published).
pub fn print_pools<P: Platform>(core: &Core<P>) {
    fmt_stats::print_pools(&core.all_pairs());
}

/// `routes`: the FIB's rules, one `route ROUTE` line each (`netstack::router::Route`'s
/// form: a static route as its routes-file line, `PREFIX/LEN,GATEWAY`).
pub fn print_routes<P: Platform>(core: &Core<P>) {
    let Some(r) = core.route() else {
        return println!("routes: not in router mode");
    };
    for e in r.router.fib().routes() {
        println!("route {}", netstack::router::Route::from(e));
    }
}

/// `acl`: one line per rule (`acl rule N hits H: RULE`, the rule in the rules-file syntax),
/// then the default action's, the hits summed over the cores.
pub fn print_acl() {
    let Some(shared) = crate::dataplane::nf::builtin::ACL.get() else {
        return println!("acl: not in acl mode");
    };
    // The boot CPU frees replaced sets itself (`setup::acl::poll`), never while this runs.
    let t = shared.current();
    println!("acl generation {}", shared.generation());
    for i in 0..t.acl.len() {
        if let Some(r) = t.acl.rule(i) {
            println!("acl rule {i} hits {}: {r}", t.hits(Some(i)));
        }
    }
    println!(
        "acl default hits {}: {:?}",
        t.hits(None),
        t.acl.default_action()
    );
}

/// `neigh`: this core's neighbour table (every routing core has its own), one `neigh cpu K
/// NEIGHBOUR` line each (`netstack::router::NeighInfo`'s form: `IP port P mac M STATE queued N`).
pub fn print_neigh<P: Platform>(core: &Core<P>) {
    let Some(r) = core.route() else {
        return println!("neigh: not in router mode");
    };
    for n in r.router.neighbours() {
        println!("neigh cpu {} {n}", core.pair());
    }
}

/// `buddyinfo`: free blocks per order (like /proc/buddyinfo) and the unusable-free-space
/// index per order in thousandths (like /sys/kernel/debug/extfrag/unusable_index).
pub fn print_buddyinfo(z: &Zone) {
    print(format_args!("buddyinfo zone 0 free blocks per order:"));
    for n in z.buddyinfo() {
        print(format_args!(" {n}"));
    }
    print(format_args!(
        "\nunusable_index zone 0 (per mille) per order:"
    ));
    for o in 0..=mm::MAX_ORDER {
        print(format_args!(" {}", z.unusable_index(o)));
    }
    println!();
}

/// `cpus`: per-CPU state.
pub fn print_cpus<P: Platform>(core: &Core<P>) {
    use core::sync::atomic::Ordering::Relaxed;
    let pairs = core.all_pairs();
    let mq = core.fabric().queues() > 1;
    for (i, c) in CPUS.iter().enumerate() {
        if !c.online.load(Relaxed) {
            continue;
        }
        let (role, fwd, halts) = match pairs.iter().find(|p| p.pair == i) {
            Some(p) => (
                "forwarding",
                p.counters.iter().map(|c| c.tx).sum::<u64>(),
                p.prof.halts,
            ),
            None => ("idle", 0, c.halts.load(Relaxed)),
        };
        // Multi-queue: which queue pair (of both ports) the core forwards.
        let mut qp: heapless::String<24> = heapless::String::new();
        if mq && role == "forwarding" {
            let _ = core::fmt::write(&mut qp, format_args!(" queue_pair {i}"));
        }
        println!(
            "cpu {i}: apic {} online {role} forwarded {fwd}{qp} halts {halts} drains {}",
            c.apic_id.load(Relaxed),
            c.drains.load(Relaxed)
        );
    }
}

/// `uaf` (test only): take a page from this CPU's pcp list, free it and complete its guard
/// flush, then write to it. With `guard=on` the page is unmapped and the write faults with the
/// guard's message; without it the command refuses (the write would corrupt a free page).
fn use_after_free<P: Platform>(core: &mut Core<P>) {
    let pages = core.pages_mut();
    if pages.zone.guard().is_none() {
        println!("uaf: refused: needs guard=on (it would write to a free page)");
        return;
    }
    let Some(pfn) = pages.pcp.alloc_page(pages.zone) else {
        println!("uaf: no free page");
        return;
    };
    pages.pcp.free_page(pages.zone, pfn);
    pages.pcp.flush_guard(pages.zone);
    println!("uaf: writing to freed page {:#x}", pfn.addr());
    // SAFETY: none: this is the use-after-free the page guard must catch. The page is free and
    // unmapped from the identity map, so the write faults before it reaches memory.
    unsafe { (pfn.addr() as *mut u64).write_volatile(0x0bad_f00d) };
    println!("uaf: the write to a freed page did not fault");
}

/// `uaf buddy` (test only): write into the free block of the highest order that has been free
/// the longest ([`Zone::peek_free_block`]) — pages that sat in the buddy lists since boot,
/// never through a pcp list (allocations split blocks from the head of a list; this one is
/// its tail).
/// With `guard=on` the guard unmapped it at install, so the write faults with its message.
fn use_after_free_buddy<P: Platform>(core: &mut Core<P>) {
    let zone = core.pages_mut().zone;
    if zone.guard().is_none() {
        println!("uaf: refused: needs guard=on (it would write to a free page)");
        return;
    }
    let Some((pfn, order)) = zone.peek_free_block() else {
        println!("uaf: no free page");
        return;
    };
    // The last page of the block: not its head, which the buddy metadata names.
    let page = Pfn(pfn.0 + (1 << order) - 1);
    println!(
        "uaf: writing to buddy page {:#x} (free since boot, order-{order} block at {:#x})",
        page.addr(),
        pfn.addr()
    );
    // SAFETY: none: this is the use-after-free the page guard must catch. The page is free in
    // the buddy lists and unmapped from the identity map, so the write faults before it
    // reaches memory.
    unsafe { (page.addr() as *mut u64).write_volatile(0x0bad_f00d) };
    println!("uaf: the write to a free buddy page did not fault");
}

/// `uaf block` (test only): allocate an order-3 block from the zone (mapped by the guard),
/// write to it, free it straight to the zone (`free_pages_order`: unmapped, into the zone's
/// guard batch), flush that batch (the shootdown), then write to it again: with `guard=on` that
/// write faults.
fn use_after_free_block<P: Platform>(core: &mut Core<P>) {
    let zone = core.pages_mut().zone;
    if zone.guard().is_none() {
        println!("uaf: refused: needs guard=on (it would write to a free page)");
        return;
    }
    let Some(pfn) = zone.alloc_pages(3) else {
        println!("uaf: no free page");
        return;
    };
    let page = Pfn(pfn.0 + 5);
    // SAFETY: the block is ours (just allocated, mapped again by the guard).
    unsafe { (page.addr() as *mut u64).write_volatile(1) };
    zone.free_pages_order(pfn, 3);
    let pending = zone.guard_pending();
    // This CPU cached the block's translation (the write above): its shootdown must complete.
    zone.flush_guard_pending();
    println!(
        "uaf: writing to page {:#x} of a freed order-3 block ({pending} pages waited in the zone's guard batch, {} after its flush)",
        page.addr(),
        zone.guard_pending()
    );
    // SAFETY: none: the use-after-free the page guard must catch (the block is free, its
    // pages unmapped and shot down).
    unsafe { (page.addr() as *mut u64).write_volatile(0x0bad_f00d) };
    println!("uaf: the write to a freed block did not fault");
}

/// `drain`: `drain_all_pages` — this CPU drains its own lists, every other online CPU is
/// asked to and acknowledged (bounded wait).
pub fn drain_all<P: Platform>(core: &mut Core<P>) {
    let pages = core.pages_mut();
    let before = pages.pcp.count();
    let deadline = Deadline::after_ms(DRAIN_TIMEOUT_MS);
    let zone = pages.zone;
    let pcp = &mut pages.pcp;
    let mut woken = false;
    match DRAIN.drain_all_pages(
        Some(current_cpu() as usize),
        || pcp.drain_local_pages(zone),
        || {
            // The requests are posted by now: wake halted CPUs to honour them.
            if !core::mem::replace(&mut woken, true) {
                wake_others();
            }
            // Their drains may flush guarded pages: answer their shootdowns while waiting.
            crate::tlb::service();
            deadline.expired()
        },
    ) {
        Ok(()) => println!(
            "drain_all_pages: ok on {} CPUs ({before} pcp pages returned on cpu 0; {} free pages in the buddy lists)",
            ONLINE.load(Ordering::Acquire),
            zone.free_pages()
        ),
        Err(e) => println!("drain_all_pages: {e:?}"),
    }
}

/// `ipi`: ping all other CPUs, then each alone and a set of all of them, through the IPI
/// registry; print how many answered (each handler counts its pings), waiting at most 100 ms.
pub fn ipi_ping() {
    let online: u64 = CPUS
        .iter()
        .enumerate()
        .filter(|(_, c)| c.online.load(Ordering::Acquire))
        .fold(0, |m, (i, _)| m | 1 << i);
    let me = current_cpu() as usize;
    let total = |i: usize| CPUS[i].pings.load(Ordering::Acquire);
    for (name, targets) in [
        ("all others", IpiTarget::AllOthers),
        ("set", IpiTarget::Set(online)),
    ]
    .into_iter()
    .chain(
        (0..64)
            .filter(|i| online & (1 << i) != 0 && *i != me)
            .map(|i| ("one", IpiTarget::One(i))),
    ) {
        let before: [u64; MAX_CPUS] = core::array::from_fn(total);
        let sent = send_ipi(targets, PING_VECTOR);
        let deadline = Deadline::after_ms(IPI_ANSWER_MS);
        let answered = || (0..MAX_CPUS).filter(|&i| total(i) > before[i]).count();
        while answered() < sent && !deadline.expired() {
            core::hint::spin_loop();
        }
        println!(
            "ipi {name} {targets:?}: {} of {sent} CPUs answered",
            answered()
        );
    }
}

/// `quit`: run the quit phases on every core in step (bounded waits), check that every page
/// came back, print the final STATS and exit (failure on a leak or a core that did not follow);
/// a clean stop ends as `end` says.
pub fn quit<P: Platform>(core: &mut Core<P>, facts: &BootFacts, end: End) -> ! {
    info!("quit: draining");
    // A FIB replaced by a reload is retired first (its grace period is at most one
    // housekeeping round of every core), so every FIB page is accounted for below.
    if let Err(e) = fib::settle(core.fabric().cores()) {
        error!("quit: {}", e.0);
        exit(ExitCode::Failure)
    }
    // The same for a replaced ACL rule set.
    if let Err(e) = crate::setup::acl::settle(core.fabric().cores()) {
        error!("quit: {e}");
        exit(ExitCode::Failure)
    }
    // An image's own NF's files replaced by `PUT`: their bodies go back (the files end with
    // the NF), so that no page is held past here.
    if let Err(late) = crate::setup::nf_files::settle(core.fabric().cores()) {
        error!(
            "quit: cores {late:#x} did not take the NF's files up within {} ms",
            crate::setup::nf_files::RETIRE_WAIT_MS
        );
        exit(ExitCode::Failure)
    }
    let report = match core.lead_quit(CORE_STOP_NS, wake_others, |_, _| {}) {
        Ok(r) => r,
        Err(e) => {
            error!("quit: {e}");
            exit(ExitCode::Failure)
        }
    };
    print_stats(core, facts);
    // This core's own ports (queue pairs); the STATS line above has every core's.
    for (i, c) in core.counters().iter().enumerate() {
        info!(
            "port {i} (cpu {}'s queue pair): rx {} tx {} drops {}",
            core.pair(),
            c.rx,
            c.tx,
            c.drops_total()
        );
    }
    print_pools(core);
    print_buddyinfo(facts.zone);
    let now = report.free_pages_now;
    // The boot FIB was taken before the boot count; reloads replaced it with FIBs of other
    // sizes: free now + FIB now must equal free at boot + FIB at boot (FIB now includes a
    // `PUT /routes` body kept as the routes file).
    // The same for the ACL's rule sets (the boot's taken before the boot count).
    let (fib_now, fib_boot) = fib::fib_pages();
    let (acl_now, acl_boot) = crate::setup::acl::acl_pages();
    let (held_now, held_boot) = (fib_now + acl_now, fib_boot + acl_boot);
    if report.leaked > 0 || now + held_now != facts.free_pages_boot + held_boot {
        error!(
            "page leak: {now} free pages now + {fib_now} FIB + {acl_now} ACL pages, {} at boot + {fib_boot} FIB + {acl_boot} ACL pages, {} in flight",
            facts.free_pages_boot, report.leaked
        );
        exit(ExitCode::Failure);
    }
    if held_now != held_boot {
        info!("gannet: shutdown clean ({now} free pages + {fib_now} FIB + {acl_now} ACL pages = {} at boot + {fib_boot} FIB + {acl_boot} ACL pages at boot)", facts.free_pages_boot);
    } else {
        info!("gannet: shutdown clean ({now} free pages, as at boot)");
    }
    if end == End::Reset {
        info!("gannet: resetting through the FADT reset register");
        let e = crate::arch::power::reset();
        error!("reboot: {e}");
    }
    exit(ExitCode::Success)
}
