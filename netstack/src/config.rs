//! Boot configuration from the kernel command line (`-append "key=value …"`).
//!
//! The keys and their parsers are in [`keys`], grouped by owner: the kernel's own keys and
//! each network function's. [`Config::parse`] looks each key up by name. Every key is
//! documented in the README. An unknown key, a repeated key, a bad value or a key of another
//! network function than `mode=` selects is a [`ConfigError`] that names the key; the kernel
//! prints it and exits with failure rather than running with a silent default.
//!
//! Past ~800 lines because `Config` (every key's field and its documentation), its defaults,
//! `parse` with the cross-key checks and `ConfigError` describe one thing, the command line; the
//! key tables (`keys`), the bundle, the fw_cfg merge and the tests are files of their own.

pub mod bundle;
pub mod firewall;
pub mod keys;
pub mod l2;
pub mod merge;
pub mod nat;
pub mod nf_files;
pub mod nf_keys;
pub mod owners;
pub mod router;

use crate::router::{parse_route, Ipv4Net, ParseError, RouteError};
use crate::MacAddr;
use core::net::Ipv4Addr;

/// Forwarding mode, named after DPDK testpmd's forwarding modes. Serialised (in `STATS`) as
/// [`Mode::as_str`].
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// testpmd `io`: every frame goes out of the other port untouched.
    Io,
    /// testpmd `mac`: out of the other port with source MAC = that port's MAC and destination
    /// MAC = that port's configured peer MAC. The default.
    #[default]
    L2,
    /// IPv4 router (RFC 1812): FIB lookup, ARP neighbours, TTL, ICMP errors; needs `ip0` and
    /// `ip1`.
    Router,
    /// Stateless IPv4 ACL firewall (`netstack::acl`, the boot bundle's `rules` file): a frame
    /// its rules allow goes out of the other port untouched, one they deny is dropped.
    Acl,
    /// NAT44 gateway (`netstack::nat`): port 0 inside, port 1 outside, the address pool of
    /// `nat_pool=`.
    Nat,
    /// Connection-tracking firewall (`netstack::conntrack::firewall`): port 0 inside, port 1
    /// outside; new connections only from the inside, frames forwarded untouched.
    Firewall,
}

impl Mode {
    /// The name used on the command line and in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Io => "io",
            Mode::L2 => "l2",
            Mode::Router => "router",
            Mode::Acl => "acl",
            Mode::Nat => "nat",
            Mode::Firewall => "firewall",
        }
    }
}

/// Log level (`log=`), mapped onto the `log` crate's levels.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The boot log (default).
    Info,
    /// Everything, including per-device feature dumps.
    Debug,
}

impl LogLevel {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// What happens to a page after its frame was transmitted (`pool=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum PoolMode {
    /// Back into the owning page_pool's alloc cache (the normal fast path).
    Recycle,
    /// Released to the page allocator, so the pool is always empty and every RX refill goes to
    /// the allocator: the "pool always empty" workload of the bulk-allocator work (like
    /// XDP_REDIRECT into a veth in Linux, docs/SEED-NOTES.md).
    Release,
}

impl PoolMode {
    /// The name used on the command line and in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Recycle => "recycle",
            PoolMode::Release => "release",
        }
    }
}

/// How an empty page_pool refills its alloc cache (`refill=`). Serialised (in `STATS`) as
/// [`RefillMode::as_str`].
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefillMode {
    /// One `alloc_pages_bulk` call per refill (default).
    #[default]
    Bulk,
    /// One single-page allocation per page (the baseline the bulk API is measured against).
    Single,
}

/// What a core does when its queues are empty (`idle=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum IdleMode {
    /// Poll briefly, then halt until a device interrupt (RX MSI-X) or the 100 Hz timer: idle
    /// vCPUs leave the host CPU to QEMU's I/O thread and the traffic source (default).
    Halt,
    /// Busy-poll forever (lowest latency, burns a host CPU).
    Poll,
}

impl IdleMode {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleMode::Halt => "halt",
            IdleMode::Poll => "poll",
        }
    }
}

/// The simulated NIC of the deterministic benchmark (`sim_nic=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum SimNic {
    /// Simulated virtio-net (`drivers::sim`): 12 header bytes before the frame, a used ring.
    Virtio,
    /// A simulated DD-bit NIC (`drivers::sim::dd`): 0 header bytes, Descriptor Done bits.
    Dd,
    /// The simulated DD-bit NIC brought up as an Intel 82574L (`drivers::e1000e::bring_up`:
    /// reset, MAC, link, filter); the same rings and fused path as `Dd`.
    E1000e,
    /// The simulated DD-bit NIC brought up as an Intel 82576 (`drivers::igb::bring_up`):
    /// advanced descriptors (`SRRCTL.DESCTYPE`), the same rings and fused path.
    Igb,
}

impl SimNic {
    /// The `sim_nic=` value (`virtio`, `dd`, `e1000e`, `igb`).
    pub fn as_str(self) -> &'static str {
        match self {
            SimNic::Virtio => "virtio",
            SimNic::Dd => "dd",
            SimNic::E1000e => "e1000e",
            SimNic::Igb => "igb",
        }
    }
}

/// How unmapped pages are flushed from other CPUs' TLBs (`tlb=`; docs/DESIGN.md, "Remapped
/// buffers and batched TLB shootdown").
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum TlbMode {
    /// Gather unmapped pages per initiating core and send one flush request per batch to the
    /// cores that may cache them (Linux 4.3, "TLB flush multiple pages with a single IPI")
    /// (default).
    Batch,
    /// One flush request per unmapped page: the pre-2015 baseline the batch is measured
    /// against.
    Immediate,
}

impl TlbMode {
    /// The name used on the command line and in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            TlbMode::Batch => "batch",
            TlbMode::Immediate => "immediate",
        }
    }
}

/// Default `tlb_ceiling=`: pages per flush above which a full flush replaces per-page
/// `invlpg` (Linux x86 `tlb_single_page_flush_ceiling`, arch/x86/mm/tlb.c).
pub const DEFAULT_TLB_CEILING: u16 = 33;
/// Largest `tlb_ceiling=`: the pages one flush request can list.
pub const MAX_TLB_CEILING: u16 = 64;
/// Most torture batches (`tlbtest=`).
pub const MAX_TLBTEST_BATCHES: u32 = 100_000_000;

impl RefillMode {
    /// The name used on the command line and in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            RefillMode::Bulk => "bulk",
            RefillMode::Single => "single",
        }
    }
}

/// Where the management plane (smoltcp: ARP, ICMP echo, metrics on TCP 9100) lives (`mgmt=`),
/// whatever the network function.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum MgmtPort {
    /// On the first port with an address (`ip0=`, else `ip1=`), off without one (default).
    Auto,
    /// On port `0` or `1`'s address (`ip0`/`ip1`, which must be given).
    Port(u8),
    /// Off.
    Off,
}

/// Shortest `mgmt_token=` (bytes).
pub const MGMT_TOKEN_MIN: usize = 16;
/// Longest `mgmt_token=` (bytes).
pub const MGMT_TOKEN_MAX: usize = 64;

/// The management plane's bearer token (`mgmt_token=`): printable ASCII (no space),
/// [`MGMT_TOKEN_MIN`]..=[`MGMT_TOKEN_MAX`] bytes. Its `Debug` and `Display` show only its
/// length, so printing a [`Config`] never logs it.
#[derive(Clone, Eq, PartialEq)]
pub struct MgmtToken(heapless::String<MGMT_TOKEN_MAX>);

impl MgmtToken {
    /// The token if `s` is one (printable ASCII without space, 16..=64 bytes).
    pub fn new(s: &str) -> Option<MgmtToken> {
        let ok = (MGMT_TOKEN_MIN..=MGMT_TOKEN_MAX).contains(&s.len())
            && s.bytes().all(|b| b.is_ascii_graphic());
        ok.then(|| heapless::String::try_from(s).ok().map(MgmtToken))
            .flatten()
    }

    /// Whether `given` is the token, in time independent of where they differ (only the
    /// length leaks).
    pub fn matches(&self, given: &[u8]) -> bool {
        let t = self.0.as_bytes();
        if t.len() != given.len() {
            return false;
        }
        t.iter().zip(given).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never: a token has at least [`MGMT_TOKEN_MIN`] bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl core::fmt::Debug for MgmtToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "MgmtToken(<{} bytes>)", self.0.len())
    }
}

impl core::fmt::Display for MgmtToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

/// A kernel command line for the log: every `mgmt_token=` value replaced by its length.
pub struct RedactedCmdline<'a>(pub &'a str);

impl core::fmt::Display for RedactedCmdline<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut first = true;
        for tok in self.0.split_ascii_whitespace() {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            match tok.strip_prefix("mgmt_token=") {
                Some(v) => write!(f, "mgmt_token=<{} bytes>", v.len())?,
                None => f.write_str(tok)?,
            }
        }
        Ok(())
    }
}

/// Number of ports the forwarder drives.
pub const PORTS: usize = 2;

/// Default peer MAC behind port 0 (the generator's side): `02:00:00:00:0a:02`.
pub const DEFAULT_PEER0: MacAddr = MacAddr([0x02, 0, 0, 0, 0x0a, 0x02]);
/// Default peer MAC behind port 1: `02:00:00:00:0b:02`.
pub const DEFAULT_PEER1: MacAddr = MacAddr([0x02, 0, 0, 0, 0x0b, 0x02]);
/// Default RX burst (frames taken per port per poll iteration), as testpmd's default 32. A
/// frame the device spread over several RX buffers (`VIRTIO_NET_F_MRG_RXBUF`, VIRTIO 1.2
/// §5.1.6.4) counts once, as DPDK's `rte_eth_rx_burst` counts packets.
pub const DEFAULT_BURST: usize = 32;
/// Largest accepted burst: the virtqueue size (256 descriptors).
pub const MAX_BURST: usize = 256;

/// Most queue pairs per port (`queues=`), one forwarding core each: 16, the Intel 82576's
/// queue pairs (datasheet §7.1.2.10; igb ports). virtio-net ports take at most
/// `drivers::virtio_net::MAX_QUEUE_PAIRS` (4), checked at set-up.
pub const MAX_QUEUES: usize = 16;

/// How many queue pairs per port to use (`queues=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Queues {
    /// virtio-net: min(CPUs, the ports' `max_virtqueue_pairs`, 4) when both ports offer
    /// multi-queue (VIRTIO_NET_F_MQ) outside router mode, else 1 (default). igb: min(CPUs, 16)
    /// (RSS) outside the NAT and firewall modes, else 1.
    Auto,
    /// Exactly this many (1..=[`MAX_QUEUES`]); more than 1 needs multi-queue ports and at least
    /// as many CPUs, or the kernel stops with a config error. 1 is the single-queue path.
    Count(u8),
}

/// Most `route=` keys on one command line.
pub const MAX_CMDLINE_ROUTES: usize = 64;

/// Most frames the simulated device delivers per poll iteration (`sim=`): one RX ring.
pub const MAX_SIM_FRAMES: u16 = 256;
/// Measured poll iterations of the deterministic benchmark by default (`sim_iters=`): a
/// multiple of 32, so the periodic TX reap and RX refill (every 32 descriptors) fall into the
/// measurement a whole number of times for every K that divides 32.
pub const DEFAULT_SIM_ITERS: u32 = 1024;
/// Most measured iterations (`sim_iters=`).
pub const MAX_SIM_ITERS: u32 = 1_000_000;
/// Frame size of the deterministic benchmark by default (`sim_size=`): 64 bytes on the wire,
/// FCS included (the minimum Ethernet frame).
pub const DEFAULT_SIM_SIZE: u16 = 64;
/// Largest `sim_size=`: a 9,000-byte MTU's frame on the wire (9,000 + 14 + 4 bytes), as the
/// generator's `--size`.
pub const MAX_SIM_SIZE: u16 = 9018;

/// The effective configuration.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Config {
    /// `mode=io|l2` (default `l2`).
    pub mode: Mode,
    /// `peer0=MAC`, `peer1=MAC`: the next hop's MAC behind each port.
    pub peer: [MacAddr; PORTS],
    /// `burst=N`: RX burst per port per poll iteration in frames, 1..=256 (default 32): a
    /// frame of several RX buffers (VIRTIO 1.2 §5.1.6.4) counts once, bounded by the used
    /// elements in the ring and the TX ring's free descriptors (the first burst that meets
    /// such a frame, and `xcore=on`, count buffers).
    pub burst: usize,
    /// `log=error|warn|info|debug` (default `info`).
    pub log: LogLevel,
    /// `pool=recycle|release` (default `recycle`).
    pub pool: PoolMode,
    /// `refill=bulk|single` (default `bulk`).
    pub refill: RefillMode,
    /// `idle=halt|poll` (default `halt`).
    pub idle: IdleMode,
    /// `ip0=A.B.C.D/LEN`, `ip1=…`: the ports' addresses: the management plane's (any mode)
    /// and the router's interface addresses (router mode, which needs both).
    pub ip: [Option<Ipv4Net>; PORTS],
    /// `mode=router`'s keys: its static routes (`route=`) and its ports' IPv6 addresses.
    pub router: router::RouterSettings,
    /// `mgmt=ip0|ip1|none`: the management address (any mode; default: the first port with
    /// an address, [`Config::mgmt_port`]).
    pub mgmt: MgmtPort,
    /// `xcore=on|off` (default `off`): with several port pairs, frames received on pair `k`
    /// leave through pair `k + 1` (mod pairs), i.e. another core's TX queue: pages cross cores
    /// and return to their pool through its recycle ring.
    pub xcore: bool,
    /// `acpi_rsdp=0xADDR`: physical address of the ACPI RSDP, overriding the one the loader
    /// passes in `hvm_start_info` (Linux's `acpi_rsdp=` parameter: for firmware that hides it,
    /// kexec-style hand-over, or a crafted table set in tests). 16-byte aligned (ACPI 6.5
    /// §5.2.5.1) and below 4 GiB (the identity map). Default: the loader's, else a BIOS-area scan.
    pub acpi_rsdp: Option<u64>,
    /// `queues=auto|N` (default `auto`): queue pairs per port (virtio-net, igb); with N > 1 core `i`
    /// owns queue pair `i` of port 0 and of port 1 and forwards between them (in
    /// `mode=router`, with its own router over the one shared FIB; `auto` means 1 there).
    pub queues: Queues,
    /// `sim=K` (1..=[`MAX_SIM_FRAMES`]): the deterministic datapath benchmark. Ports 0 and 1
    /// are simulated virtio-net devices on in-memory rings (no PCI); per poll iteration the
    /// device delivers K frames on port 0, outside the measured bracket, then one poll
    /// iteration runs inside it. `None` (default): forward between real devices.
    pub sim: Option<u16>,
    /// `sim_iters=N` (1..=[`MAX_SIM_ITERS`], default [`DEFAULT_SIM_ITERS`]): measured poll
    /// iterations of the benchmark (after its warm-up); needs `sim`.
    pub sim_iters: u32,
    /// `sim_size=N` (64..=[`MAX_SIM_SIZE`], default [`DEFAULT_SIM_SIZE`]): the benchmark's
    /// frame size in bytes on the wire, FCS included (as the generator's `--size`); frames
    /// above 4,088 bytes arrive in several RX buffers (mergeable, VIRTIO 1.2 §5.1.6.4).
    pub sim_size: u16,
    /// `sim_nic=virtio|dd|e1000e|igb` (default `virtio`): the simulated NIC of the benchmark's
    /// ports: virtio-net (12 header bytes, a used ring) or a DD-bit NIC (`drivers::ddnic`:
    /// Intel legacy descriptors, 0 header bytes, Descriptor Done written back), `e1000e` the
    /// same NIC brought up as an 82574L, `igb` as an 82576 (advanced descriptors); needs
    /// `sim`.
    pub sim_nic: SimNic,
    /// `sim_ip=4|6` (default 4): the benchmark's frames, IPv4/UDP or IPv6/UDP; 6 needs
    /// `mode=router` with `ip6_0=`, `ip6_1=` and an IPv6 `route=` (the frames go through its
    /// gateway, [`crate::simframes::router6_addrs`]); needs `sim`.
    pub sim_ipv6: bool,
    /// `tlb=batch|immediate` (default `batch`): how unmapped pages are flushed on other CPUs.
    pub tlb: TlbMode,
    /// `tlb_ceiling=N` (1..=[`MAX_TLB_CEILING`], default [`DEFAULT_TLB_CEILING`]): a flush of
    /// more pages than this reloads CR3 instead of one `invlpg` per page.
    pub tlb_ceiling: u16,
    /// `tlbtest=N` (1..=[`MAX_TLBTEST_BATCHES`]): instead of forwarding, run the TLB shootdown
    /// torture test for N batches (core 0 remaps generation-tagged pages that every other core
    /// reads; stale reads are counted), then quit. Needs at least 2 CPUs.
    pub tlbtest: Option<u32>,
    /// `tlbtest_skip=on|off` (default `off`; test only): the negative control of `tlbtest`:
    /// cores acknowledge flush requests without flushing, so stale reads must be caught.
    pub tlbtest_skip: bool,
    /// `guard=on|off` (default `off`): the page guard. Pages freed through a pcp list (every
    /// released packet buffer) are unmapped from the identity map until allocated again, in
    /// batches with one TLB shootdown each (`tlb=`), so a use-after-free faults with a named
    /// message. Costs a split of RAM's 2 MiB identity pages into 4 KiB PTEs (2 KiB of page
    /// tables per MiB of RAM).
    pub guard: bool,
    /// `mgmt_token=TOKEN` (router, acl, firewall and nat modes, and an image of one's own;
    /// printable ASCII, 16..=64 bytes): the bearer token a `PUT` on the management plane must
    /// carry (`Authorization: Bearer TOKEN`): `/routes` (router), `/rules` (acl),
    /// `/nat_timeouts` (nat), an image's own NF's `/NAME`. `None` (default): `PUT` is refused
    /// (403). Never logged: `Debug` shows its length only.
    pub mgmt_token: Option<MgmtToken>,
    /// `backpressure=on|off` (default `off`): when the egress TX ring has no room, leave the
    /// frames in their RX ring (taken on a later poll iteration, once TX completions freed
    /// descriptors) instead of taking and dropping them (`tx_ring_full`). With `on` a full TX
    /// ring slows its sender down (the device's RX ring fills) instead of losing frames the
    /// guest already received. Applies to the fused `io`/`l2`/router burst (`xcore=off`).
    pub backpressure: bool,
    /// `mtu0=N`, `mtu1=N` (68..=[`MAX_CMDLINE_MTU`] bytes): the port's IP MTU, the largest
    /// IPv4 total length that may leave it (RFC 791's minimum is 68; RFC 894 Ethernet's 1500;
    /// 9000 the common jumbo frame). In router mode a larger datagram is fragmented, or
    /// answered with "fragmentation needed" when it has DF (RFC 1191 §4). `None` (default):
    /// the device's reported MTU, else 1500.
    pub mtu: [Option<u16>; PORTS],
    /// `fault=NAME:N[,NAME:N…]` (the fault image only; test only): inject faults of kind
    /// `NAME` ([`mm::fault::Fault::name`]: `rx_bad_id`, `rx_bad_len`, `tx_bad_id`,
    /// `tx_ring_full`, `bulk_short`, `bulk_zero`, `dma_map`, `recycle_full`) once every `N`
    /// opportunities on average (1..=1000000000), from READY on. Indexed by
    /// [`mm::fault::Fault`] as `usize`; 0 = off (default). A release image refuses a nonzero
    /// entry at boot with a named error.
    pub faults: [u64; mm::fault::FAULTS],
    /// `phases=on|off` (default `off`): split every busy poll iteration's cycles by phase
    /// (`STATS` `phase_cycles`: RX + forward, TX reap, RX refill, kick). Costs three more TSC
    /// reads and four counter updates per busy iteration (about 20 guest instructions), so the
    /// datapath leaves it off unless asked; `busy_cycles` and `busy_iters` are always counted.
    pub phases: bool,
    /// `burstin=on|off` (default `off`; bench only: `cargo xtask bench --burst-in`): the poll
    /// loop leaves the RX rings alone until a port's used ring holds 224 entries (or 10 ms
    /// passed since the last drain), then runs ordinary poll iterations until no RX ring
    /// holds one; only those count as busy iterations (`busy_cycles`, `busy_iters`). The
    /// core busy-polls the used indices meanwhile (no halt). Not with `sim`, which runs its
    /// own loop. See `unikernel::dataplane::burstin`.
    pub burstin: bool,
    /// `debug_exit=on|off` (default `off`): leave through QEMU's `isa-debug-exit` (port 0xf4;
    /// QEMU status 1 clean, 3 failure), as the tests and xtask ask; otherwise a stop ends in
    /// ACPI S5 soft-off (ACPI 6.5 §7.4.2, §16.1.7). The kernel reads it from the raw command
    /// line before parsing too, so a configuration error leaves the same way.
    pub debug_exit: bool,
    /// `virtio_mmio.device=SIZE@ADDR:IRQ` (repeatable, up to [`MAX_MMIO_DEVICES`]): a
    /// virtio-mmio device (VIRTIO 1.2 §4.2), in Linux's syntax
    /// (Documentation/admin-guide/kernel-parameters.txt), which is what QEMU's `-machine
    /// microvm,acpi=off` appends for every `virtio-net-device` it has. Given any, the kernel
    /// drives these devices instead of scanning PCI, in the order given.
    pub virtio_mmio: heapless::Vec<MmioDevice, MAX_MMIO_DEVICES>,
    /// `mode=nat`'s settings (`nat_pool=`, `nat_ports=`, `nat_sessions=`, `nat_filtering=`,
    /// `nat_timeouts=`, `nat_forward=`): [`nat::NatSettings`].
    pub nat: nat::NatSettings,
    /// `mode=firewall`'s settings (`fw_sessions=`, `fw_timeouts=`):
    /// [`firewall::FirewallSettings`].
    pub fw: firewall::FirewallSettings,
}

/// Most `virtio_mmio.device=` keys: QEMU 7.2's microvm has 24 virtio-mmio transports, the
/// kernel drives at most 8 ports.
pub const MAX_MMIO_DEVICES: usize = 8;

/// Smallest `SIZE` of `virtio_mmio.device=`: 0x100 bytes, the register block before the
/// device configuration space (VIRTIO 1.2 §4.2.2: `Config` at offset 0x100).
pub const MIN_MMIO_SIZE: u64 = 0x100;
/// Largest `SIZE` of `virtio_mmio.device=`: 1 MiB (QEMU's transports are 512 bytes each).
pub const MAX_MMIO_SIZE: u64 = 1 << 20;
/// `virtio_mmio.device=`'s `ADDR + SIZE` must lie at or below this (bytes): 4 GiB, inside the
/// identity map with uncached 32-bit MMIO (QEMU microvm places them at 0xfeb00000 and up).
pub const MAX_MMIO_END: u64 = 1 << 32;

/// One `virtio_mmio.device=SIZE@ADDR:IRQ[:ID]` (Linux's `vm_cmdline_set`): a virtio-mmio
/// register block of `size` bytes at physical `addr`, interrupting on IOAPIC pin `irq`.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct MmioDevice {
    /// Size of the register block in bytes (`512` from QEMU; `K`/`M` suffixes and `0x` hex
    /// accepted as Linux's `memparse` does).
    pub size: u64,
    /// Physical address of the register block (4-byte aligned, VIRTIO 1.2 §4.2.2: 32-bit
    /// registers).
    pub addr: u64,
    /// The device's interrupt line (GSI; unused: the kernel polls virtio-mmio devices).
    pub irq: u32,
}

impl MmioDevice {
    /// Parse `SIZE@ADDR:IRQ[:ID]` (the optional platform device `ID` is accepted and ignored,
    /// as Linux uses it only to name the device). `None` if malformed or out of range: `SIZE` in
    /// [`MIN_MMIO_SIZE`]`..=`[`MAX_MMIO_SIZE`], `ADDR` nonzero and 4-byte aligned, `ADDR +
    /// SIZE` ≤ [`MAX_MMIO_END`].
    pub fn parse(value: &str) -> Option<MmioDevice> {
        let (size, rest) = value.split_once('@')?;
        let (addr, rest) = rest.split_once(':')?;
        let (irq, id) = match rest.split_once(':') {
            Some((irq, id)) => (irq, Some(id)),
            None => (rest, None),
        };
        let size = memparse(size)?;
        let addr = memparse(addr)?;
        let irq = irq.parse::<u32>().ok()?;
        if let Some(id) = id {
            id.parse::<u32>().ok()?;
        }
        let ok = (MIN_MMIO_SIZE..=MAX_MMIO_SIZE).contains(&size)
            && addr != 0
            && addr % 4 == 0
            && addr.checked_add(size)? <= MAX_MMIO_END;
        ok.then_some(MmioDevice { size, addr, irq })
    }
}

/// A number as Linux's `memparse` reads one: decimal or `0x` hex, then an optional `K`, `M` or
/// `G` (binary multiples, either case).
fn memparse(s: &str) -> Option<u64> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => digits.parse::<u64>().ok()?,
    };
    n.checked_mul(1 << shift)
}

/// Largest `N` of `fault=NAME:N`.
pub const MAX_FAULT_EVERY: u64 = 1_000_000_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::L2,
            peer: [DEFAULT_PEER0, DEFAULT_PEER1],
            burst: DEFAULT_BURST,
            log: LogLevel::Info,
            pool: PoolMode::Recycle,
            refill: RefillMode::Bulk,
            idle: IdleMode::Halt,
            ip: [None; PORTS],
            mtu: [None; PORTS],
            router: router::RouterSettings::default(),
            mgmt: MgmtPort::Auto,
            xcore: false,
            acpi_rsdp: None,
            queues: Queues::Auto,
            sim: None,
            sim_iters: DEFAULT_SIM_ITERS,
            sim_size: DEFAULT_SIM_SIZE,
            sim_nic: SimNic::Virtio,
            sim_ipv6: false,
            tlb: TlbMode::Batch,
            tlb_ceiling: DEFAULT_TLB_CEILING,
            tlbtest: None,
            tlbtest_skip: false,
            guard: false,
            mgmt_token: None,
            backpressure: false,
            faults: [0; mm::fault::FAULTS],
            phases: false,
            burstin: false,
            debug_exit: false,
            virtio_mmio: heapless::Vec::new(),
            nat: nat::NatSettings::default(),
            fw: firewall::FirewallSettings::default(),
        }
    }
}

/// The [`ConfigError`] of key `key`'s parser refusing `value` with `e`.
pub(crate) fn key_error<'a>(key: &'a str, value: &'a str, e: keys::KeyError) -> ConfigError<'a> {
    match e {
        keys::KeyError::Expected(expected) => ConfigError::BadValue {
            key,
            value,
            expected,
        },
        // Never echoed: the value is a secret.
        keys::KeyError::Secret(expected) => ConfigError::BadValue {
            key,
            value: "<redacted>",
            expected,
        },
        keys::KeyError::TooMany if key == "route" => ConfigError::TooManyRoutes,
        keys::KeyError::TooMany => ConfigError::TooManyMmioDevices,
    }
}

/// A configuration error; names the offending key (or token).
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum ConfigError<'a> {
    /// A token without `=`.
    NotKeyValue(&'a str),
    /// A key this build does not know.
    UnknownKey(&'a str),
    /// The same key given twice.
    Repeated(&'a str),
    /// A network function's key while `mode=` selects another one (e.g. `route` with
    /// `mode=l2`): refused, not ignored.
    Misplaced {
        /// The key.
        key: &'a str,
        /// The modes whose network function owns it.
        modes: &'static [Mode],
        /// The mode in force.
        mode: Mode,
    },
    /// A stock network function's key (`peer0`, `route`, …) in an image of one's own, whose
    /// network function it does not configure: refused, not ignored.
    StockKey {
        /// The key.
        key: &'a str,
        /// The stock image's modes whose network function owns it.
        modes: &'static [Mode],
        /// The image's network function.
        nf: &'static str,
    },
    /// A key the image's network function declares that is also one of the kernel's (the
    /// NF's table is wrong; the kernel's key would win).
    NfKeyShadowed {
        /// The key.
        key: &'static str,
        /// The network function that declares it.
        nf: &'static str,
    },
    /// The network function's own tokens together pass `max` bytes
    /// ([`nf_keys::NF_ARGS_MAX`]); `key` is the first that did not fit.
    TooLong {
        /// The key.
        key: &'a str,
        /// The limit, in bytes.
        max: usize,
    },
    /// A key the chosen mode needs was not given (e.g. `ip0` with `mode=router`).
    Missing {
        /// The missing key.
        key: &'static str,
        /// Why it is needed.
        because: &'static str,
    },
    /// A key given a value the chosen mode cannot run with (e.g. `queues=2` with
    /// `mode=firewall`).
    NotWith {
        /// The key.
        key: &'static str,
        /// What the mode needs of it, and why.
        because: &'static str,
    },
    /// More `route=` keys than [`MAX_CMDLINE_ROUTES`].
    TooManyRoutes,
    /// A `route=` the router refuses over `ip0=`/`ip1=` ([`crate::router::check_route`]), or
    /// a prefix given by two `route=` keys ([`RouteError::Duplicate`], naming the first).
    BadRoute {
        /// The route (the later one of a duplicate).
        prefix: Ipv4Net,
        /// Its gateway.
        gateway: Ipv4Addr,
        /// Why.
        why: RouteError,
    },
    /// The ports' IPv6 addresses refused together (naming the key at fault,
    /// [`crate::router::setup6::Ports6Error::key`]).
    Ports6(crate::router::setup6::Ports6Error),
    /// An IPv6 `route=` that does not fit `ip6_0=`/`ip6_1=`
    /// ([`crate::router::setup6::check_route6`]).
    BadRoute6 {
        /// The route.
        route: crate::router::parse6::Route6Spec,
        /// Why.
        why: crate::router::setup6::Route6Error,
    },
    /// More `virtio_mmio.device=` keys than [`MAX_MMIO_DEVICES`].
    TooManyMmioDevices,
    /// A known key with a value it cannot take; `expected` says what it takes.
    BadValue {
        /// The key.
        key: &'a str,
        /// The value given.
        value: &'a str,
        /// What would have been accepted.
        expected: &'static str,
    },
}

impl ConfigError<'_> {
    /// The key (or token) the error names, if it names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::NotKeyValue(k) | ConfigError::UnknownKey(k) | ConfigError::Repeated(k) => {
                Some(k)
            }
            ConfigError::Misplaced { key, .. }
            | ConfigError::BadValue { key, .. }
            | ConfigError::StockKey { key, .. }
            | ConfigError::TooLong { key, .. } => Some(key),
            ConfigError::NfKeyShadowed { key, .. } => Some(key),
            ConfigError::Missing { key, .. } | ConfigError::NotWith { key, .. } => Some(key),
            ConfigError::TooManyRoutes
            | ConfigError::BadRoute { .. }
            | ConfigError::BadRoute6 { .. } => Some("route"),
            ConfigError::Ports6(e) => Some(e.key()),
            ConfigError::TooManyMmioDevices => Some("virtio_mmio.device"),
        }
    }
}

impl core::fmt::Display for ConfigError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::NotKeyValue(t) => write!(f, "`{t}` is not key=value"),
            ConfigError::UnknownKey(k) => {
                // The kernel's keys, then each stock network function's under its modes.
                write!(f, "unknown key `{k}` (the kernel's:")?;
                for set in owners::KEY_SETS {
                    if let keys::Owner::Nf(modes) | keys::Owner::Put(modes) = set.owner {
                        write!(f, "; ")?;
                        keys::write_modes(f, modes)?;
                        write!(f, ":")?;
                    }
                    for name in set.names() {
                        write!(f, " {name}")?;
                    }
                }
                write!(f, ")")
            }
            ConfigError::Misplaced { key, modes, mode } => {
                write!(f, "key `{key}` belongs to ")?;
                keys::write_modes(f, modes)?;
                write!(f, ", not mode={}", mode.as_str())
            }
            ConfigError::StockKey { key, modes, nf } => {
                write!(f, "key `{key}` belongs to the stock image's ")?;
                keys::write_modes(f, modes)?;
                write!(f, "; this image runs `{nf}`")
            }
            ConfigError::NfKeyShadowed { key, nf } => write!(
                f,
                "network function `{nf}` declares key `{key}`, which is the kernel's"
            ),
            ConfigError::TooLong { key, max } => write!(
                f,
                "key `{key}`: the network function's keys pass {max} bytes in all"
            ),
            ConfigError::Repeated(k) => write!(f, "key `{k}` given more than once"),
            ConfigError::Missing { key, because } => {
                write!(f, "key `{key}` is required {because}")
            }
            ConfigError::NotWith { key, because } => write!(f, "key `{key}`: {because}"),
            ConfigError::TooManyRoutes => {
                write!(f, "key `route` given more than {MAX_CMDLINE_ROUTES} times")
            }
            ConfigError::BadRoute {
                prefix,
                gateway,
                why,
            } => write!(f, "route={prefix},{gateway}: {why}"),
            ConfigError::Ports6(e) => write!(f, "key `{}`: {e}", e.key()),
            ConfigError::BadRoute6 { route, why } => {
                let gw = core::net::Ipv6Addr::from_bits(route.gateway);
                match route.port {
                    Some(p) => write!(f, "route={},{gw}%{p}: {why}", route.prefix),
                    None => write!(f, "route={},{gw}: {why}", route.prefix),
                }
            }
            ConfigError::TooManyMmioDevices => write!(
                f,
                "key `virtio_mmio.device` given more than {MAX_MMIO_DEVICES} times"
            ),
            ConfigError::BadValue {
                key,
                value,
                expected,
            } => {
                write!(
                    f,
                    "bad value `{value}` for key `{key}`: expected {expected}"
                )
            }
        }
    }
}

/// Smallest `sim_size=` with `sim_ip=6` (bytes on the wire): Ethernet 14, IPv6 40, UDP 8 and
/// the FCS 4.
pub const MIN_SIM6_SIZE: u16 = 66;

/// `acpi_rsdp=` must lie below this (bytes): the kernel identity-maps the first 4 GiB.
pub const MAX_RSDP_ADDR: u64 = 1 << 32;

/// Smallest `mtuN=` (bytes): RFC 791 §3.2, every internet module must be able to forward a
/// datagram of 68 octets without further fragmentation.
pub const MIN_CMDLINE_MTU: u16 = 68;
/// Largest `mtuN=` (bytes): a 9000-byte jumbo IP MTU, a 9014-byte Ethernet frame without FCS.
pub const MAX_CMDLINE_MTU: u16 = 9000;

/// One line of a routes file: `Ok((line number, (prefix, gateway)))` or `Err((line number, the
/// offending text, why))`.
pub type RouteLine<'a> = Result<(usize, (Ipv4Net, Ipv4Addr)), (usize, &'a str, ParseError)>;

/// Longest line of a routes file (the router's limit, defined beside its parser).
pub use crate::router::parse::ROUTES_LINE_MAX;

/// Routes from a routes file (a boot module: `cargo xtask … --routes FILE`): one route per
/// line in the `route=` syntax (`PREFIX/LEN,GATEWAY`), each prefix once (the FIB build
/// refuses a repeat, [`crate::router::Existing::Refuse`]); blank lines and `#` comments are
/// skipped, and so are IPv6 routes (a line holding a `:`: the IPv6 FIB reads them,
/// [`crate::router::setup6::routes6_of_file`]); a line over [`ROUTES_LINE_MAX`] bytes is bad.
/// Yields `Ok((line number, route))` or
/// `Err((line number, the line, why))` for a bad line. The iterator is a named type
/// ([`RoutesFile`]) so that a caller can keep it and resume
/// (the boot CPU builds a reload's FIB a few hundred routes per poll iteration).
pub fn parse_routes_file(text: &str) -> RoutesFile<'_> {
    RoutesFile {
        lines: text.lines().enumerate(),
    }
}

/// The lines of a routes file still to parse (see [`parse_routes_file`]).
#[derive(Clone, Debug)]
pub struct RoutesFile<'a> {
    lines: core::iter::Enumerate<core::str::Lines<'a>>,
}

impl<'a> Iterator for RoutesFile<'a> {
    type Item = RouteLine<'a>;

    fn next(&mut self) -> Option<RouteLine<'a>> {
        for (i, line) in self.lines.by_ref() {
            if line.len() > ROUTES_LINE_MAX {
                let shown = &line[..line.floor_char_boundary(40)];
                return Some(Err((i + 1, shown, ParseError::LineTooLong)));
            }
            let l = line.split('#').next().unwrap_or("").trim();
            // IPv6 lines are the IPv6 FIB's (`crate::router::setup6::routes6_of_file`).
            if !l.is_empty() && !l.contains(':') {
                return Some(
                    parse_route(l)
                        .map(|r| (i + 1, r))
                        .map_err(|e| (i + 1, l, e)),
                );
            }
        }
        None
    }
}

impl Config {
    /// The local port the management plane lives on, if any: `mgmt=ipN`'s; by default
    /// (`mgmt=` not given) the first port with an address (`ip0=`, else `ip1=`; the router
    /// has both); none with `mgmt=none` or no address. Whatever the mode: outside the router
    /// the kernel steers the address's frames to it.
    pub fn mgmt_port(&self) -> Option<usize> {
        match self.mgmt {
            MgmtPort::Auto => self.ip.iter().position(Option::is_some),
            MgmtPort::Port(p) => Some(usize::from(p)).filter(|&p| self.ip[p].is_some()),
            MgmtPort::Off => None,
        }
    }

    /// Parse a kernel command line: whitespace-separated `key=value` tokens. `mode=` is
    /// read first (it decides which network function's keys the line may use), then every
    /// token in order.
    ///
    /// # Errors
    /// [`ConfigError`], naming the key or token: not `key=value`, unknown, repeated, a bad
    /// value, a network function's key under another mode, too many of a repeatable key, or a
    /// key another needs missing.
    pub fn parse(cmdline: &str) -> Result<Config, ConfigError<'_>> {
        Config::parse_with(cmdline, None).map(|(cfg, _)| cfg)
    }

    /// [`Config::parse`] with `other` asked first about every `key=value` token (its index,
    /// the token, the key, the value and the key's owner among the kernel's tables, if any):
    /// `Ok(true)` when it took the token (a key of the image's own network function), `Ok(false)`
    /// to parse it as the kernel's, or its error.
    fn parse_tokens<'a>(
        cmdline: &'a str,
        stock: bool,
        mut other: impl FnMut(
            usize,
            &'a str,
            &'a str,
            &'a str,
            Option<keys::Owner>,
        ) -> Result<bool, ConfigError<'a>>,
    ) -> Result<Config, ConfigError<'a>> {
        let mut cfg = Config::default();
        let mut seen = [false; owners::KEY_COUNT];
        // The mode first: the first `mode=` token (a second one is refused below).
        if let Some(v) = cmdline
            .split_ascii_whitespace()
            .find_map(|t| t.strip_prefix("mode="))
        {
            let k = owners::lookup("mode").expect("the kernel owns `mode`");
            k.set
                .table
                .parse(k.at, &mut cfg, v)
                .map_err(|e| key_error("mode", v, e))?;
        }
        for (i, tok) in cmdline.split_ascii_whitespace().enumerate() {
            let (key, value) = tok.split_once('=').ok_or(ConfigError::NotKeyValue(tok))?;
            let found = owners::lookup(key);
            if other(i, tok, key, value, found.map(|k| k.owner()))? {
                continue;
            }
            let k = found.ok_or(ConfigError::UnknownKey(key))?;
            if core::mem::replace(&mut seen[k.index], true) && !k.repeat {
                return Err(ConfigError::Repeated(key));
            }
            // The `PUT` token is also an image of one's own's (its NF's files).
            if let keys::Owner::Nf(modes) | keys::Owner::Put(modes) = k.owner() {
                let own_put = !stock && matches!(k.owner(), keys::Owner::Put(_));
                if !modes.contains(&cfg.mode) && !own_put {
                    return Err(ConfigError::Misplaced {
                        key,
                        modes,
                        mode: cfg.mode,
                    });
                }
            }
            k.set
                .table
                .parse(k.at, &mut cfg, value)
                .map_err(|e| key_error(key, value, e))?;
        }
        let given = |name: &str| owners::lookup(name).is_some_and(|k| seen[k.index]);
        if cfg.sim.is_none() && given("sim_iters") {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_iters",
            });
        }
        if cfg.sim.is_none() && given("sim_nic") {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_nic",
            });
        }
        if cfg.sim.is_none() && given("sim_ip") {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_ip",
            });
        }
        if cfg.sim_ipv6
            && (cfg.mode != Mode::Router
                || cfg.router.routes6.is_empty()
                || cfg.router.ip6.iter().any(Option::is_none))
        {
            return Err(ConfigError::NotWith {
                key: "sim_ip",
                because: "sim_ip=6 needs mode=router with ip6_0=, ip6_1= and an IPv6 route=",
            });
        }
        if cfg.sim_ipv6 && cfg.sim_size < MIN_SIM6_SIZE {
            return Err(ConfigError::NotWith {
                key: "sim_size",
                because: "sim_ip=6 frames are at least 66 bytes on the wire (Ethernet, IPv6, UDP and FCS; RFC 5180 §5 benchmarks 78)",
            });
        }
        if cfg.sim.is_none() && given("sim_size") {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_size",
            });
        }
        if cfg.tlbtest.is_none() && given("tlbtest_skip") {
            return Err(ConfigError::Missing {
                key: "tlbtest",
                because: "for tlbtest_skip",
            });
        }
        if cfg.tlbtest.is_some() && cfg.sim.is_some() {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "to be absent with tlbtest (each replaces forwarding)",
            });
        }
        if cfg.burstin && cfg.sim.is_some() {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "to be absent with burstin (the simulated benchmark runs its own loop)",
            });
        }
        if cfg.sim.is_some() && matches!(cfg.queues, Queues::Count(n) if n > 1) {
            return Err(ConfigError::Missing {
                key: "queues",
                because: "(=auto or 1) with sim: the simulated ports have one queue pair",
            });
        }
        // Each owner's checks across its keys: the kernel's, then the chosen network
        // function's (in the stock image only: an image of one's own runs none of them).
        for set in owners::KEY_SETS {
            let runs = stock || set.owner == keys::Owner::Kernel;
            if runs && set.owner.allows(cfg.mode) {
                set.table.check(&cfg)?;
            }
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests;
