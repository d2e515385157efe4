//! The serial console: line-based commands read from COM1 while forwarding goes on.

use crate::arch::serial::COM;

/// Longest command line accepted, in bytes.
const MAX_LINE: usize = 64;

/// A console command.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Command {
    /// Print one `STATS {json}` line.
    Stats,
    /// Drain, print final stats, exit cleanly (isa-debug-exit with `debug_exit=on`, else ACPI
    /// S5 soft-off).
    Quit,
    /// `reboot`: as [`Command::Quit`], then reset through the FADT reset register (ACPI 6.5
    /// §4.8.3.6, §5.2.9).
    Reboot,
    /// The ACPI fixed power button was pressed (never typed: `control::commands::power_button`
    /// polls PM1 status): as [`Command::Quit`].
    PowerButton,
    /// List the commands.
    Help,
    /// Per-order free blocks and unusable-free-space index (like /proc/buddyinfo).
    Buddyinfo,
    /// Per-pool counters.
    Pools,
    /// The `/metrics` body (Prometheus text) without the management plane's counters, then
    /// `# EOF`: the metrics with no management address.
    Metrics,
    /// The FIB (router mode).
    Routes,
    /// The neighbour table (router mode).
    Neigh,
    /// The ACL's rules and their hits summed over the cores (`mode=acl`).
    Acl,
    /// `acl reload`: build the boot's rules file again and replace the published set live
    /// (`mode=acl`; the way back after a `PUT /rules`).
    AclReload,
    /// `drain_all_pages`: every CPU returns its pcp lists to the buddy allocator.
    Drain,
    /// Per-CPU state.
    Cpus,
    /// Ping every other CPU, then each one alone, through the IPI registry.
    Ipi,
    /// Test only, with `guard=on`: free a page, then write to it (must fault, named).
    Uaf,
    /// Test only, with `guard=on`: write into a free block of the buddy lists that no pcp list
    /// ever held (must fault, named).
    UafBuddy,
    /// Test only, with `guard=on`: allocate an order-3 block from the zone, free it straight
    /// to the zone, then write to it (must fault, named).
    UafBlock,
    /// `route add PREFIX/LEN,GATEWAY`: a pending route change (router mode).
    RouteAdd(netstack::router::Ipv4Net, core::net::Ipv4Addr),
    /// `route del PREFIX/LEN`: a pending route removal (router mode).
    RouteDel(netstack::router::Ipv4Net),
    /// `routes commit`: build a FIB with the pending changes, publish it, retire the old one.
    RoutesCommit,
    /// `routes reload`: as `routes commit` from `route=` and the routes file alone (console
    /// changes dropped; the routes file is the last `PUT /routes` body if there was one).
    RoutesReload,
    /// `routes check`: the arrival checks run again on the pending changes, nothing built
    /// (`setup::fib::check_pending`).
    RoutesCheck,
    /// `fault`, `fault dry MS`, `fault off`: the fault image's controls.
    Fault(super::faults::FaultCmd),
    /// `nat [FILTER]`: every NAT core's session table, the sessions matching the filter
    /// (`netstack::conntrack::show::Filter`: `tcp`, `udp`, `icmp`, `proto N`, `addr A.B.C.D`,
    /// `port N`, `class NAME`) listed (`mode=nat`).
    Nat(netstack::conntrack::show::Filter),
    /// `nat timeouts EST,TRANS,UDP,ICMP` (seconds, as `nat_timeouts=`): every NAT core's
    /// timeouts replaced from its next tick (`mode=nat`).
    NatTimeouts(netstack::conntrack::Timeouts),
}

/// Line assembly state.
pub struct Console {
    line: heapless::Vec<u8, MAX_LINE>,
    overflow: bool,
}

impl Console {
    /// An empty console.
    pub const fn new() -> Self {
        Self {
            line: heapless::Vec::new(),
            overflow: false,
        }
    }

    /// Read the bytes waiting on COM1 (bounded per call) and return a command when a line is
    /// complete. Unknown commands are answered on the console and ignored.
    pub fn poll(&mut self) -> Option<Command> {
        for _ in 0..64 {
            let b = COM.lock().try_read_byte()?;
            match b {
                b'\r' | b'\n' => {
                    let cmd = self.finish();
                    if cmd.is_some() {
                        return cmd;
                    }
                }
                _ => {
                    if self.line.push(b).is_err() {
                        self.overflow = true;
                    }
                }
            }
        }
        None
    }

    fn finish(&mut self) -> Option<Command> {
        let overflow = core::mem::take(&mut self.overflow);
        let line = core::mem::take(&mut self.line);
        let text = core::str::from_utf8(&line).unwrap_or("").trim();
        if overflow {
            crate::println!("console: line longer than {MAX_LINE} bytes ignored");
            return None;
        }
        match text {
            "" => None,
            "stats" => Some(Command::Stats),
            "quit" => Some(Command::Quit),
            "reboot" => Some(Command::Reboot),
            "help" => Some(Command::Help),
            "buddyinfo" => Some(Command::Buddyinfo),
            "pools" => Some(Command::Pools),
            "metrics" => Some(Command::Metrics),
            "routes" => Some(Command::Routes),
            "neigh" => Some(Command::Neigh),
            "acl" => Some(Command::Acl),
            "acl reload" => Some(Command::AclReload),
            "drain" => Some(Command::Drain),
            "cpus" => Some(Command::Cpus),
            "ipi" => Some(Command::Ipi),
            "uaf" => Some(Command::Uaf),
            "uaf buddy" => Some(Command::UafBuddy),
            "uaf block" => Some(Command::UafBlock),
            "routes commit" => Some(Command::RoutesCommit),
            "routes reload" => Some(Command::RoutesReload),
            "routes check" => Some(Command::RoutesCheck),
            "fault" => Some(Command::Fault(super::faults::FaultCmd::Show)),
            "nat" => Some(Command::Nat(Default::default())),
            "nat timeouts" => {
                crate::println!(
                    "console: nat timeouts: expected EST,TRANS,UDP,ICMP in seconds, like 7440,240,300,60"
                );
                None
            }
            other => with_argument(other),
        }
    }
}

/// A command with an argument (`fault …`, `nat …`, `route add …`, `route del …`), or the
/// unknown command answered on the console.
fn with_argument(other: &str) -> Option<Command> {
    if let Some(arg) = other.strip_prefix("fault ") {
        return match super::faults::FaultCmd::parse(arg.trim()) {
            Ok(c) => Some(Command::Fault(c)),
            Err(why) => {
                crate::println!("console: `{other}`: {why}");
                None
            }
        };
    }
    if let Some(arg) = other.strip_prefix("nat timeouts ") {
        return match netstack::config::nat::parse_timeouts(arg.trim()) {
            Ok(t) => Some(Command::NatTimeouts(t)),
            Err(expected) => {
                crate::println!(
                    "console: nat timeouts `{}`: expected {expected}",
                    arg.trim()
                );
                None
            }
        };
    }
    if let Some(arg) = other.strip_prefix("nat ") {
        return match netstack::conntrack::show::Filter::parse(arg.trim()) {
            Ok(f) => Some(Command::Nat(f)),
            Err(e) => {
                crate::println!("console: nat `{}`: {e}", arg.trim());
                None
            }
        };
    }
    if let Some(arg) = other.strip_prefix("route add ") {
        return match netstack::router::parse_route(arg.trim()) {
            Ok((net, gw)) => Some(Command::RouteAdd(net, gw)),
            Err(e) => {
                crate::println!("console: route add `{arg}`: {e} (expected PREFIX/LEN,GATEWAY)");
                None
            }
        };
    }
    if let Some(arg) = other.strip_prefix("route del ") {
        return match netstack::router::parse_ipv4_cidr(arg.trim()) {
            Ok(net) => Some(Command::RouteDel(net.network())),
            Err(e) => {
                crate::println!("console: route del `{arg}`: {e} (expected PREFIX/LEN)");
                None
            }
        };
    }
    crate::println!("console: unknown command `{other}` (try `help`)");
    None
}

/// The `help` text.
pub const HELP: &str = "commands: stats (one STATS json line), pools (page_pool counters), \
metrics (the /metrics body, Prometheus text, then # EOF), \
buddyinfo (free blocks per order), routes (FIB), route add PREFIX/LEN,GATEWAY and route del PREFIX/LEN (pending changes), \
routes check (the pending changes checked, nothing built), routes commit (build, publish, retire the old FIB), routes reload (route= and the routes file again, console changes dropped), neigh (ARP table), acl (ACL rules and hits, mode=acl), nat [FILTER] (each core's NAT sessions, mode=nat; FILTER: tcp, udp, icmp, proto N, addr A.B.C.D, port N, class NAME), nat timeouts EST,TRANS,UDP,ICMP (seconds, every NAT core), acl reload (the boot's rules file again, replaced live), drain (drain_all_pages), cpus (per-CPU state), ipi (ping CPUs), uaf, uaf buddy, uaf block (test only, guard=on: write to a page freed through the pcp, \
to a buddy page free since boot, to an order-3 block freed to the zone; faults), \
fault, fault dry MS, fault off (the fault image: faults injected, starve every page_pool for MS ms, stop injecting), quit (drain, final STATS, exit: isa-debug-exit with debug_exit=on, else ACPI S5 soft-off), reboot (drain, final STATS, FADT reset register), help";
