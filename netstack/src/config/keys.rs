//! Every command-line key, grouped by its owner ([`KEY_SETS`]): the kernel's own keys (memory,
//! CPUs, TLB, the page guard, logging, the simulated benchmark, the ports' buffers) and each
//! network function's keys (`l2`'s peers, the router's addresses, routes and management
//! plane). Each key carries its own parser; [`super::Config::parse`] looks a key up by name
//! (never by position) and refuses a key whose owner is a network function other than the one
//! `mode=` selects ([`super::ConfigError::Misplaced`]).

use super::nat;
use super::{
    Config, IdleMode, LogLevel, MgmtPort, MgmtToken, MmioDevice, Mode, PoolMode, Queues,
    RefillMode, SimNic, TlbMode, DEFAULT_SIM_SIZE, MAX_BURST, MAX_CMDLINE_MTU, MAX_FAULT_EVERY,
    MAX_QUEUES, MAX_RSDP_ADDR, MAX_SIM_FRAMES, MAX_SIM_ITERS, MAX_SIM_SIZE, MAX_TLBTEST_BATCHES,
    MAX_TLB_CEILING, MIN_CMDLINE_MTU,
};
use crate::router::parse6::parse_route6;
use crate::router::setup6::parse_port_addr;
use crate::router::{parse_ipv4_cidr, parse_route};
use crate::MacAddr;

/// Why a key's parser refused its value.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum KeyError {
    /// The value is not one the key takes; what it takes.
    Expected(&'static str),
    /// As `Expected`, for a secret: the value is never echoed.
    Secret(&'static str),
    /// A repeatable key given more often than its list holds.
    TooMany,
}

/// One key: its name, whether it may repeat, and its parser (which stores the value in the
/// [`Config`]).
#[derive(Copy, Clone)]
pub struct Key {
    /// The key as written before `=`.
    pub name: &'static str,
    /// May appear more than once (each adds an entry: `route`, `virtio_mmio.device`).
    pub repeat: bool,
    /// Store `value` in the configuration, or say why not.
    pub parse: fn(&mut Config, &str) -> Result<(), KeyError>,
}

/// Who owns a set of keys.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Owner {
    /// The kernel: valid whatever the mode.
    Kernel,
    /// The network functions of these modes: valid only when `mode=` selects one of them.
    Nf(&'static [Mode]),
}

/// Writes `modes` as `mode=a or mode=b` (the owners a misplaced key or file names).
pub fn write_modes(f: &mut core::fmt::Formatter<'_>, modes: &[Mode]) -> core::fmt::Result {
    for (i, m) in modes.iter().enumerate() {
        let or = if i > 0 { " or " } else { "" };
        write!(f, "{or}mode={}", m.as_str())?;
    }
    Ok(())
}

impl Owner {
    /// Whether a key of this owner is valid with `mode`.
    pub fn allows(self, mode: Mode) -> bool {
        match self {
            Owner::Kernel => true,
            Owner::Nf(modes) => modes.contains(&mode),
        }
    }
}

/// Keys of one owner.
#[derive(Copy, Clone)]
pub struct KeySet {
    /// Their owner.
    pub owner: Owner,
    /// The keys.
    pub keys: &'static [Key],
}

/// `on` or `off`.
fn on_off(v: &str) -> Result<bool, KeyError> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(KeyError::Expected("on or off")),
    }
}

/// An integer of type `T` in `range`, else `expected`.
fn int_in<T: core::str::FromStr + PartialOrd>(
    v: &str,
    range: core::ops::RangeInclusive<T>,
    expected: &'static str,
) -> Result<T, KeyError> {
    v.parse::<T>()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or(KeyError::Expected(expected))
}

/// A key without repeats.
const fn key(name: &'static str, parse: fn(&mut Config, &str) -> Result<(), KeyError>) -> Key {
    Key {
        name,
        repeat: false,
        parse,
    }
}

/// The kernel's keys: whatever the network function.
const KERNEL_KEYS: &[Key] = &[
    key("mode", |c, v| {
        c.mode = match v {
            "io" => Mode::Io,
            "l2" => Mode::L2,
            "router" => Mode::Router,
            "acl" => Mode::Acl,
            "nat" => Mode::Nat,
            "firewall" => Mode::Firewall,
            _ => return Err(KeyError::Expected("io, l2, router, acl, nat or firewall")),
        };
        Ok(())
    }),
    key("burst", |c, v| {
        c.burst = int_in(v, 1..=MAX_BURST, "an integer in 1..=256")?;
        Ok(())
    }),
    key("log", |c, v| {
        c.log = match v {
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            _ => return Err(KeyError::Expected("error, warn, info or debug")),
        };
        Ok(())
    }),
    key("pool", |c, v| {
        c.pool = match v {
            "recycle" => PoolMode::Recycle,
            "release" => PoolMode::Release,
            _ => return Err(KeyError::Expected("recycle or release")),
        };
        Ok(())
    }),
    key("refill", |c, v| {
        c.refill = match v {
            "bulk" => RefillMode::Bulk,
            "single" => RefillMode::Single,
            _ => return Err(KeyError::Expected("bulk or single")),
        };
        Ok(())
    }),
    key("idle", |c, v| {
        c.idle = match v {
            "halt" => IdleMode::Halt,
            "poll" => IdleMode::Poll,
            _ => return Err(KeyError::Expected("halt or poll")),
        };
        Ok(())
    }),
    key("queues", |c, v| {
        c.queues = match v {
            "auto" => Queues::Auto,
            v => Queues::Count(int_in(
                v,
                1..=MAX_QUEUES as u8,
                "auto or an integer in 1..=16",
            )?),
        };
        Ok(())
    }),
    key("acpi_rsdp", |c, v| {
        let a = v
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .filter(|&a| a != 0 && a % 16 == 0 && a < MAX_RSDP_ADDR)
            .ok_or(KeyError::Expected(
                "a 16-byte aligned physical address below 4 GiB, like 0x9f000",
            ))?;
        c.acpi_rsdp = Some(a);
        Ok(())
    }),
    key("sim", |c, v| {
        c.sim = Some(int_in(
            v,
            1..=MAX_SIM_FRAMES,
            "frames per poll iteration, 1..=256",
        )?);
        Ok(())
    }),
    key("sim_iters", |c, v| {
        c.sim_iters = int_in(v, 1..=MAX_SIM_ITERS, "an integer in 1..=1000000")?;
        Ok(())
    }),
    key("sim_size", |c, v| {
        c.sim_size = int_in(
            v,
            DEFAULT_SIM_SIZE..=MAX_SIM_SIZE,
            "an integer in 64..=9018 (bytes on the wire)",
        )?;
        Ok(())
    }),
    key("sim_nic", |c, v| {
        c.sim_nic = match v {
            "virtio" => SimNic::Virtio,
            "dd" => SimNic::Dd,
            "e1000e" => SimNic::E1000e,
            "igb" => SimNic::Igb,
            _ => return Err(KeyError::Expected("virtio, dd, e1000e or igb")),
        };
        Ok(())
    }),
    key("tlb", |c, v| {
        c.tlb = match v {
            "batch" => TlbMode::Batch,
            "immediate" => TlbMode::Immediate,
            _ => return Err(KeyError::Expected("batch or immediate")),
        };
        Ok(())
    }),
    key("tlb_ceiling", |c, v| {
        c.tlb_ceiling = int_in(v, 1..=MAX_TLB_CEILING, "pages, an integer in 1..=64")?;
        Ok(())
    }),
    key("tlbtest", |c, v| {
        c.tlbtest = Some(int_in(
            v,
            1..=MAX_TLBTEST_BATCHES,
            "batches, an integer in 1..=100000000",
        )?);
        Ok(())
    }),
    key("tlbtest_skip", |c, v| {
        c.tlbtest_skip = on_off(v)?;
        Ok(())
    }),
    key("guard", |c, v| {
        c.guard = on_off(v)?;
        Ok(())
    }),
    key("backpressure", |c, v| {
        c.backpressure = on_off(v)?;
        Ok(())
    }),
    key("mtu0", |c, v| {
        c.mtu[0] = Some(mtu(v)?);
        Ok(())
    }),
    key("mtu1", |c, v| {
        c.mtu[1] = Some(mtu(v)?);
        Ok(())
    }),
    key("fault", |c, v| {
        const EXPECTED: &str = "NAME:N[,NAME:N...] with NAME one of rx_bad_id, rx_bad_len, tx_bad_id, tx_ring_full, bulk_short, bulk_zero, dma_map, recycle_full and N in 1..=1000000000";
        for item in v.split(',') {
            let (name, n) = item.split_once(':').ok_or(KeyError::Expected(EXPECTED))?;
            let f = mm::fault::Fault::from_name(name).ok_or(KeyError::Expected(EXPECTED))?;
            c.faults[f as usize] = int_in(n, 1..=MAX_FAULT_EVERY, EXPECTED)?;
        }
        Ok(())
    }),
    key("phases", |c, v| {
        c.phases = on_off(v)?;
        Ok(())
    }),
    Key {
        name: "virtio_mmio.device",
        repeat: true,
        parse: |c, v| {
            let d = MmioDevice::parse(v).ok_or(KeyError::Expected(
                "SIZE@ADDR:IRQ like 512@0xfeb00e00:12 (SIZE 0x100..=1M, ADDR 4-byte aligned, ADDR+SIZE <= 4 GiB)",
            ))?;
            c.virtio_mmio.push(d).map_err(|_| KeyError::TooMany)
        },
    },
    key("burstin", |c, v| {
        c.burstin = on_off(v)?;
        Ok(())
    }),
    key("debug_exit", |c, v| {
        c.debug_exit = on_off(v)?;
        Ok(())
    }),
];

/// `mtuN=`: an IP MTU in bytes, [`MIN_CMDLINE_MTU`]..=[`MAX_CMDLINE_MTU`].
fn mtu(v: &str) -> Result<u16, KeyError> {
    int_in(
        v,
        MIN_CMDLINE_MTU..=MAX_CMDLINE_MTU,
        "an IP MTU in bytes, 68..=9000",
    )
}

/// `l2`'s and `nat`'s keys: the next hop's MAC behind each port (the destination they
/// write).
const L2_KEYS: &[Key] = &[
    key("peer0", |c, v| {
        c.peer[0] = peer(v)?;
        Ok(())
    }),
    key("peer1", |c, v| {
        c.peer[1] = peer(v)?;
        Ok(())
    }),
];

/// `peerN=`: a MAC address.
fn peer(v: &str) -> Result<MacAddr, KeyError> {
    MacAddr::parse(v).ok_or(KeyError::Expected("a MAC like 02:00:00:00:0a:02"))
}

/// Keys of `io` and `l2` (the stock forwarders): frames to the next core's pair.
const IO_L2_KEYS: &[Key] = &[key("xcore", |c, v| {
    c.xcore = on_off(v)?;
    Ok(())
})];

/// The management plane's keys, the kernel's whatever the network function: each port's
/// address (the router's interface addresses too) and which one the management plane
/// (console over TCP, `/metrics`, `PUT` of the NF's files) answers on.
const MGMT_KEYS: &[Key] = &[
    key("ip0", |c, v| {
        c.ip[0] = Some(cidr(v)?);
        Ok(())
    }),
    key("ip1", |c, v| {
        c.ip[1] = Some(cidr(v)?);
        Ok(())
    }),
    key("mgmt", |c, v| {
        c.mgmt = match v {
            "ip0" => MgmtPort::Port(0),
            "ip1" => MgmtPort::Port(1),
            "none" => MgmtPort::Off,
            _ => return Err(KeyError::Expected("ip0, ip1 or none")),
        };
        Ok(())
    }),
];

/// The router's keys: its static routes (either family: an IPv6 one holds a `:`) and its
/// ports' IPv6 addresses.
const ROUTER_KEYS: &[Key] = &[
    Key {
        name: "route",
        repeat: true,
        parse: |c, v| {
            if v.contains(':') {
                let r = parse_route6(v).map_err(|e| KeyError::Expected(e.as_str()))?;
                return c.routes6.push(r).map_err(|_| KeyError::TooMany);
            }
            let r = parse_route(v).map_err(|_| {
                KeyError::Expected("PREFIX/LEN,GATEWAY like 192.168.0.0/16,10.0.1.2")
            })?;
            c.routes.push(r).map_err(|_| KeyError::TooMany)
        },
    },
    key("ip6_0", |c, v| {
        c.ip6[0] = Some(parse_port_addr(v).map_err(KeyError::Expected)?);
        Ok(())
    }),
    key("ip6_1", |c, v| {
        c.ip6[1] = Some(parse_port_addr(v).map_err(KeyError::Expected)?);
        Ok(())
    }),
];

/// `mode=nat`'s keys ([`super::nat::NatSettings`]).
const NAT_KEYS: &[Key] = &[
    key("nat_pool", |c, v| {
        c.nat.pool = nat::parse_pool(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    key("nat_ports", |c, v| {
        (c.nat.port_lo, c.nat.port_hi) = nat::parse_ports(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    key("nat_sessions", |c, v| {
        c.nat.sessions = nat::parse_sessions(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    key("nat_filtering", |c, v| {
        c.nat.filtering = nat::parse_filtering(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    key("nat_timeouts", |c, v| {
        c.nat.timeouts = nat::parse_timeouts(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key {
        name: "nat_forward",
        repeat: true,
        parse: |c, v| {
            let f = nat::parse_forward(v).map_err(KeyError::Expected)?;
            c.nat.forwards.push(f).map_err(|_| KeyError::TooMany)
        },
    },
];

/// `mode=firewall`'s keys ([`super::firewall::FirewallSettings`]).
const FW_KEYS: &[Key] = &[
    key("fw_sessions", |c, v| {
        c.fw.sessions = nat::parse_sessions(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    key("fw_timeouts", |c, v| {
        c.fw.timeouts = nat::parse_timeouts(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
];

/// The token for `PUT` of a network function's file (the router's `PUT /routes`, the ACL's
/// `PUT /rules`): the keys of the network functions that have one.
const PUT_KEYS: &[Key] = &[key("mgmt_token", |c, v| {
    c.mgmt_token = Some(MgmtToken::new(v).ok_or(KeyError::Secret(
        "printable ASCII without space, 16..=64 bytes",
    ))?);
    Ok(())
})];

/// `ipN=`: an interface address with its prefix length.
fn cidr(v: &str) -> Result<crate::router::Ipv4Net, KeyError> {
    parse_ipv4_cidr(v).map_err(|_| KeyError::Expected("an interface address like 10.0.0.1/24"))
}

/// Every key, by owner: the kernel's, then each network function's.
pub const KEY_SETS: &[KeySet] = &[
    KeySet {
        owner: Owner::Kernel,
        keys: KERNEL_KEYS,
    },
    KeySet {
        owner: Owner::Kernel,
        keys: MGMT_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::L2, Mode::Nat]),
        keys: L2_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::Io, Mode::L2]),
        keys: IO_L2_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::Router]),
        keys: ROUTER_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::Router, Mode::Acl]),
        keys: PUT_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::Nat]),
        keys: NAT_KEYS,
    },
    KeySet {
        owner: Owner::Nf(&[Mode::Firewall]),
        keys: FW_KEYS,
    },
];

/// Keys in all: the length of [`super::Config::parse`]'s "seen" table.
pub const KEY_COUNT: usize = KERNEL_KEYS.len()
    + MGMT_KEYS.len()
    + L2_KEYS.len()
    + IO_L2_KEYS.len()
    + ROUTER_KEYS.len()
    + PUT_KEYS.len()
    + NAT_KEYS.len()
    + FW_KEYS.len();

/// The key named `name`: its index among all keys (kernel's first, in [`KEY_SETS`] order),
/// the key and its owner.
pub fn lookup(name: &str) -> Option<(usize, &'static Key, Owner)> {
    let mut i = 0;
    for set in KEY_SETS {
        for k in set.keys {
            if k.name == name {
                return Some((i, k, set.owner));
            }
            i += 1;
        }
    }
    None
}
