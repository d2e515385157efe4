//! What a command-line key is ([`Key`]: a name and a parser into its owner's settings), who
//! owns one ([`Owner`]), how an owner declares its keys ([`Owned`], [`KeySet`]: the kernel's
//! here, each stock network function's beside its settings, all listed in
//! [`super::owners::KEY_SETS`]), and the kernel's own keys: memory, CPUs, TLB, the page guard,
//! logging, the simulated benchmark, the ports' buffers ([`KERNEL_SET`]), the management plane's
//! addresses ([`MGMT_SET`]) and the `PUT` token of the network functions with files
//! ([`PUT_SET`]).

use super::{
    Config, ConfigError, IdleMode, LogLevel, MgmtPort, MgmtToken, MmioDevice, Mode, PoolMode,
    Queues, RefillMode, SimNic, TlbMode, DEFAULT_SIM_SIZE, MAX_BURST, MAX_CMDLINE_MTU,
    MAX_FAULT_EVERY, MAX_QUEUES, MAX_RSDP_ADDR, MAX_SIM_FRAMES, MAX_SIM_ITERS, MAX_SIM_SIZE,
    MAX_TLBTEST_BATCHES, MAX_TLB_CEILING, MIN_CMDLINE_MTU,
};
use crate::router::parse_ipv4_cidr;

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

/// One key: its name (as written before `=`), whether it may repeat, and its parser, which
/// stores the value in its owner's settings `S` (the kernel's [`Config`], a network
/// function's settings such as [`super::nat::NatSettings`], or an image's own NF) or says what
/// the key takes ([`KeyError::Expected`]). The one key type of every owner.
///
/// ```
/// use netstack::config::keys::{Key, KeyError};
///
/// struct Filter { port: u16 }
/// const KEYS: &[Key<Filter>] = &[Key::new("blocked_port", |f, v| {
///     f.port = v.parse().map_err(|_| KeyError::Expected("a port number in 0..=65535"))?;
///     Ok(())
/// })];
/// # let mut f = Filter { port: 0 };
/// # (KEYS[0].parse)(&mut f, "5000").unwrap();
/// # assert_eq!(f.port, 5000);
/// ```
pub struct Key<S: ?Sized> {
    /// The key as written before `=`: lowercase `[a-z0-9_.]`.
    pub name: &'static str,
    /// May appear more than once (the parser then sees each value in order: `route`,
    /// `virtio_mmio.device`).
    pub repeat: bool,
    /// Store `value` in the owner's settings, or say why not.
    pub parse: fn(&mut S, &str) -> Result<(), KeyError>,
}

impl<S: ?Sized> Clone for Key<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for Key<S> {}

impl<S: ?Sized> Key<S> {
    /// A key given at most once.
    pub const fn new(name: &'static str, parse: fn(&mut S, &str) -> Result<(), KeyError>) -> Self {
        Key {
            name,
            repeat: false,
            parse,
        }
    }

    /// A key that may be given several times.
    pub const fn repeated(
        name: &'static str,
        parse: fn(&mut S, &str) -> Result<(), KeyError>,
    ) -> Self {
        Key {
            name,
            repeat: true,
            parse,
        }
    }
}

/// Who owns a set of keys.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Owner {
    /// The kernel: valid whatever the mode.
    Kernel,
    /// The network functions of these modes: valid only when `mode=` selects one of them.
    Nf(&'static [Mode]),
    /// The management plane's `PUT` token: valid when `mode=` selects one of these stock
    /// modes (whose files or settings `PUT` replaces), and in an image of one's own (the
    /// files its network function declares).
    Put(&'static [Mode]),
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
            Owner::Nf(modes) | Owner::Put(modes) => modes.contains(&mode),
        }
    }
}

/// The checks an owner makes across its keys once the whole line is parsed (a key another
/// needs, a value the mode cannot run with): `Ok` or the [`ConfigError`] naming the key.
pub type Check = fn(&Config) -> Result<(), ConfigError<'static>>;

/// One owner's keys over its own settings `S`, a part of the [`Config`] (`settings` finds it):
/// what an owner declares, beside its settings type ([`super::nat::KEY_SET`] …).
pub struct Owned<S: 'static> {
    /// The keys.
    pub keys: &'static [Key<S>],
    /// The owner's part of the configuration.
    pub settings: fn(&mut Config) -> &mut S,
    /// Its checks across keys, run after the line when the mode is the owner's.
    pub check: Check,
}

/// An owner's keys as the parser sees them, whatever settings type they parse into
/// ([`Owned`]): by index, `0..`[`KeySet::count`]. Called once per token at boot, never per
/// frame.
pub trait KeyTable: Sync {
    /// Key `i`.
    fn key(&self, i: usize) -> (&'static str, bool);
    /// Parse `value` as key `i` into `cfg`'s part of this owner.
    ///
    /// # Errors
    /// The key's [`KeyError`].
    fn parse(&self, i: usize, cfg: &mut Config, value: &str) -> Result<(), KeyError>;
    /// The owner's checks across its keys ([`Check`]).
    ///
    /// # Errors
    /// The [`ConfigError`] naming the key at fault.
    fn check(&self, cfg: &Config) -> Result<(), ConfigError<'static>>;
}

impl<S: 'static> KeyTable for Owned<S> {
    fn key(&self, i: usize) -> (&'static str, bool) {
        (self.keys[i].name, self.keys[i].repeat)
    }

    fn parse(&self, i: usize, cfg: &mut Config, value: &str) -> Result<(), KeyError> {
        (self.keys[i].parse)((self.settings)(cfg), value)
    }

    fn check(&self, cfg: &Config) -> Result<(), ConfigError<'static>> {
        (self.check)(cfg)
    }
}

/// No checks across keys.
pub fn no_check(_: &Config) -> Result<(), ConfigError<'static>> {
    Ok(())
}

/// Keys of one owner.
#[derive(Copy, Clone)]
pub struct KeySet {
    /// Their owner.
    pub owner: Owner,
    /// The keys.
    pub table: &'static dyn KeyTable,
    /// How many.
    pub count: usize,
}

impl KeySet {
    /// `owned`'s keys, owned by `owner`.
    pub const fn new<S: 'static>(owner: Owner, owned: &'static Owned<S>) -> KeySet {
        KeySet {
            owner,
            table: owned,
            count: owned.keys.len(),
        }
    }

    /// Their names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        (0..self.count).map(|i| self.table.key(i).0)
    }
}

/// `on` or `off`.
pub fn on_off(v: &str) -> Result<bool, KeyError> {
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

/// A kernel key without repeats.
const fn key(
    name: &'static str,
    parse: fn(&mut Config, &str) -> Result<(), KeyError>,
) -> Key<Config> {
    Key::new(name, parse)
}

/// The kernel's keys: whatever the network function.
const KERNEL_KEYS: &[Key<Config>] = &[
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
    key("sim_ip", |c, v| {
        c.sim_ipv6 = match v {
            "4" => false,
            "6" => true,
            _ => return Err(KeyError::Expected("4 or 6")),
        };
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

/// The management plane's keys, the kernel's whatever the network function: each port's
/// address (the router's interface addresses too) and which one the management plane
/// (console over TCP, `/metrics`, `PUT` of the NF's files) answers on.
const MGMT_KEYS: &[Key<Config>] = &[
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

/// The token for `PUT` of a network function's file or settings (the router's `PUT
/// /routes`, the ACL's `PUT /rules`, the NAT's `PUT /nat_timeouts`, an image's own NF's
/// `PUT /NAME`).
const PUT_KEYS: &[Key<Option<MgmtToken>>] = &[Key::new("mgmt_token", |t, v| {
    *t = Some(MgmtToken::new(v).ok_or(KeyError::Secret(
        "printable ASCII without space, 16..=64 bytes",
    ))?);
    Ok(())
})];

/// `ipN=`: an interface address with its prefix length.
fn cidr(v: &str) -> Result<crate::router::Ipv4Net, KeyError> {
    parse_ipv4_cidr(v).map_err(|_| KeyError::Expected("an interface address like 10.0.0.1/24"))
}

/// `mgmt=ipN` needs `ipN=`.
fn check_mgmt(c: &Config) -> Result<(), ConfigError<'static>> {
    if let MgmtPort::Port(p) = c.mgmt {
        if c.ip[usize::from(p)].is_none() {
            return Err(ConfigError::Missing {
                key: ["ip0", "ip1"][usize::from(p) & 1],
                because: "for its management address (mgmt=)",
            });
        }
    }
    Ok(())
}

/// The kernel's own keys (memory, CPUs, TLB, the page guard, logging, the simulated
/// benchmark, the ports' buffers), checked across keys by [`super::Config::parse`] itself.
pub const KERNEL_SET: KeySet = KeySet::new(
    Owner::Kernel,
    &Owned {
        keys: KERNEL_KEYS,
        settings: |c| c,
        check: no_check,
    },
);

/// The management plane's keys: the kernel's, whatever the network function.
pub const MGMT_SET: KeySet = KeySet::new(
    Owner::Kernel,
    &Owned {
        keys: MGMT_KEYS,
        settings: |c| c,
        check: check_mgmt,
    },
);

/// The `PUT` token: of the network functions whose files or settings the management plane
/// replaces (the router's routes, the ACL's rules, in front of the firewall too, the NAT's
/// timeouts), and of an image of one's own (its NF's files).
pub const PUT_SET: KeySet = KeySet::new(
    Owner::Put(&[Mode::Router, Mode::Acl, Mode::Firewall, Mode::Nat]),
    &Owned {
        keys: PUT_KEYS,
        settings: |c| &mut c.mgmt_token,
        check: no_check,
    },
);
