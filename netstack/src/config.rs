//! Boot configuration from the kernel command line (`-append "key=value …"`).
//!
//! Past ~800 lines because it is the whole kernel command line in one parser; splitting it per
//! network function is the public-API issue's work (issue 33).
//!
//! Every key is documented in the README. An unknown key, a repeated key or a bad value is a
//! [`ConfigError`] that names the key; the kernel prints it and exits with failure rather than
//! running with a silent default.

use crate::router::{parse_ipv4_cidr, parse_route, Ipv4Net, ParseError};
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
}

impl Mode {
    /// The name used on the command line and in `STATS`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Io => "io",
            Mode::L2 => "l2",
            Mode::Router => "router",
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

/// Where the management plane (smoltcp: ARP, ICMP echo, metrics on TCP 9100) lives (`mgmt=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum MgmtPort {
    /// On port 0's address in router mode, off otherwise (default).
    Auto,
    /// On port `0` or `1`'s interface address (`ip0`/`ip1`); router mode only.
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

/// Most virtio-net queue pairs per port (`queues=`): one forwarding core each.
pub const MAX_QUEUES: usize = 4;

/// How many virtio-net queue pairs per port to use (`queues=`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Queues {
    /// min(CPUs, the ports' `max_virtqueue_pairs`, [`MAX_QUEUES`]) when both ports offer
    /// multi-queue (VIRTIO_NET_F_MQ) outside router mode, else 1 (default).
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
    /// `ip0=A.B.C.D/LEN`, `ip1=…`: the ports' interface addresses (router mode).
    pub ip: [Option<Ipv4Net>; PORTS],
    /// `route=PREFIX/LEN,GATEWAY` (repeatable, up to [`MAX_CMDLINE_ROUTES`]): static routes;
    /// `0.0.0.0/0,GW` is the default route.
    pub routes: heapless::Vec<(Ipv4Net, Ipv4Addr), MAX_CMDLINE_ROUTES>,
    /// `mgmt=ip0|ip1|none`: the management address (router mode; default `ip0`).
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
    /// `queues=auto|N` (default `auto`): virtio-net queue pairs per port; with N > 1 core `i`
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
    /// `sim_nic=virtio|dd|e1000e` (default `virtio`): the simulated NIC of the benchmark's
    /// ports: virtio-net (12 header bytes, a used ring) or a DD-bit NIC (`drivers::ddnic`:
    /// Intel legacy descriptors, 0 header bytes, Descriptor Done written back), `e1000e` the
    /// same NIC brought up as an 82574L; needs `sim`.
    pub sim_nic: SimNic,
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
    /// `mgmt_token=TOKEN` (router mode; printable ASCII, 16..=64 bytes): the bearer token
    /// `PUT /routes` on the management plane must carry (`Authorization: Bearer TOKEN`).
    /// `None` (default): `PUT /routes` is refused (403). Never logged: `Debug` shows its
    /// length only.
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
    /// `virtio_mmio.device=SIZE@ADDR:IRQ` (repeatable, up to [`MAX_MMIO_DEVICES`]): a
    /// virtio-mmio device (VIRTIO 1.2 §4.2), in Linux's syntax
    /// (Documentation/admin-guide/kernel-parameters.txt), which is what QEMU's `-machine
    /// microvm,acpi=off` appends for every `virtio-net-device` it has. Given any, the kernel
    /// drives these devices instead of scanning PCI, in the order given.
    pub virtio_mmio: heapless::Vec<MmioDevice, MAX_MMIO_DEVICES>,
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
            routes: heapless::Vec::new(),
            mgmt: MgmtPort::Auto,
            xcore: false,
            acpi_rsdp: None,
            queues: Queues::Auto,
            sim: None,
            sim_iters: DEFAULT_SIM_ITERS,
            sim_size: DEFAULT_SIM_SIZE,
            sim_nic: SimNic::Virtio,
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
            virtio_mmio: heapless::Vec::new(),
        }
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
    /// A key the chosen mode needs was not given (e.g. `ip0` with `mode=router`).
    Missing {
        /// The missing key.
        key: &'static str,
        /// Why it is needed.
        because: &'static str,
    },
    /// More `route=` keys than [`MAX_CMDLINE_ROUTES`].
    TooManyRoutes,
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

impl core::fmt::Display for ConfigError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::NotKeyValue(t) => write!(f, "`{t}` is not key=value"),
            ConfigError::UnknownKey(k) => {
                write!(f, "unknown key `{k}` (known:")?;
                for key in KEYS {
                    write!(f, " {key}")?;
                }
                write!(f, ")")
            }
            ConfigError::Repeated(k) => write!(f, "key `{k}` given more than once"),
            ConfigError::Missing { key, because } => {
                write!(f, "key `{key}` is required {because}")
            }
            ConfigError::TooManyRoutes => {
                write!(f, "key `route` given more than {MAX_CMDLINE_ROUTES} times")
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

/// `acpi_rsdp=` must lie below this (bytes): the kernel identity-maps the first 4 GiB.
pub const MAX_RSDP_ADDR: u64 = 1 << 32;

/// Every key [`Config::parse`] accepts.
pub const KEYS: [&str; 32] = [
    "mode",
    "peer0",
    "peer1",
    "burst",
    "log",
    "pool",
    "refill",
    "idle",
    "ip0",
    "ip1",
    "route",
    "mgmt",
    "xcore",
    "queues",
    "acpi_rsdp",
    "sim",
    "sim_iters",
    "tlb",
    "tlb_ceiling",
    "tlbtest",
    "tlbtest_skip",
    "guard",
    "mgmt_token",
    "backpressure",
    "mtu0",
    "mtu1",
    "sim_size",
    "fault",
    "phases",
    "virtio_mmio.device",
    "burstin",
    "sim_nic",
];

/// Index of `mtu0` in [`KEYS`] (`mtu1` follows).
const MTU0_KEY: usize = 24;

/// Smallest `mtuN=` (bytes): RFC 791 §3.2, every internet module must be able to forward a
/// datagram of 68 octets without further fragmentation.
pub const MIN_CMDLINE_MTU: u16 = 68;
/// Largest `mtuN=` (bytes): a 9000-byte jumbo IP MTU, a 9014-byte Ethernet frame without FCS.
pub const MAX_CMDLINE_MTU: u16 = 9000;

/// Index of `route` in [`KEYS`]: the one key that may repeat.
const ROUTE_KEY: usize = 10;
/// Index of `sim_iters` in [`KEYS`].
const SIM_ITERS_KEY: usize = 16;
/// Index of `sim_size` in [`KEYS`].
const SIM_SIZE_KEY: usize = 26;
/// Index of `fault` in [`KEYS`].
const FAULT_KEY: usize = 27;
/// Index of `phases` in [`KEYS`].
const PHASES_KEY: usize = 28;
/// Index of `virtio_mmio.device` in [`KEYS`]: repeatable, like `route`.
const VIRTIO_MMIO_KEY: usize = 29;
/// Index of `burstin` in [`KEYS`].
const BURSTIN_KEY: usize = 30;
/// Index of `sim_nic` in [`KEYS`].
const SIM_NIC_KEY: usize = 31;
/// Index of `tlbtest_skip` in [`KEYS`].
const TLBTEST_SKIP_KEY: usize = 20;

/// One line of a routes file: `Ok((line number, (prefix, gateway)))` or `Err((line number, the
/// offending text, why))`.
pub type RouteLine<'a> = Result<(usize, (Ipv4Net, Ipv4Addr)), (usize, &'a str, ParseError)>;

/// Routes from a routes file (a boot module: `cargo xtask … --routes FILE`): one route per
/// line in the `route=` syntax (`PREFIX/LEN,GATEWAY`); blank lines and `#` comments are
/// skipped. Yields `Ok((line number, route))` or `Err((line number, the line, why))` for a bad
/// line. The iterator is a named type ([`RoutesFile`]) so that a caller can keep it and resume
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
            let l = line.split('#').next().unwrap_or("").trim();
            if !l.is_empty() {
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
    /// The port the management plane lives on, if any.
    pub fn mgmt_port(&self) -> Option<usize> {
        match (self.mode, self.mgmt) {
            (Mode::Router, MgmtPort::Auto) => Some(0),
            (Mode::Router, MgmtPort::Port(p)) => Some(usize::from(p)),
            _ => None,
        }
    }

    /// Parse a kernel command line: whitespace-separated `key=value` tokens.
    pub fn parse(cmdline: &str) -> Result<Config, ConfigError<'_>> {
        let mut cfg = Config::default();
        let mut seen = [false; KEYS.len()];
        for tok in cmdline.split_ascii_whitespace() {
            let (key, value) = tok.split_once('=').ok_or(ConfigError::NotKeyValue(tok))?;
            let idx = KEYS
                .iter()
                .position(|k| *k == key)
                .ok_or(ConfigError::UnknownKey(key))?;
            if core::mem::replace(&mut seen[idx], true)
                && idx != ROUTE_KEY
                && idx != VIRTIO_MMIO_KEY
            {
                return Err(ConfigError::Repeated(key));
            }
            let bad = |expected| ConfigError::BadValue {
                key,
                value,
                expected,
            };
            match idx {
                0 => {
                    cfg.mode = match value {
                        "io" => Mode::Io,
                        "l2" => Mode::L2,
                        "router" => Mode::Router,
                        _ => return Err(bad("io, l2 or router")),
                    }
                }
                1 | 2 => {
                    cfg.peer[idx - 1] =
                        MacAddr::parse(value).ok_or_else(|| bad("a MAC like 02:00:00:00:0a:02"))?
                }
                3 => {
                    cfg.burst = value
                        .parse::<usize>()
                        .ok()
                        .filter(|b| (1..=MAX_BURST).contains(b))
                        .ok_or_else(|| bad("an integer in 1..=256"))?
                }
                5 => {
                    cfg.pool = match value {
                        "recycle" => PoolMode::Recycle,
                        "release" => PoolMode::Release,
                        _ => return Err(bad("recycle or release")),
                    }
                }
                6 => {
                    cfg.refill = match value {
                        "bulk" => RefillMode::Bulk,
                        "single" => RefillMode::Single,
                        _ => return Err(bad("bulk or single")),
                    }
                }
                8 | 9 => {
                    cfg.ip[idx - 8] = Some(
                        parse_ipv4_cidr(value)
                            .map_err(|_| bad("an interface address like 10.0.0.1/24"))?,
                    )
                }
                ROUTE_KEY => {
                    let r = parse_route(value)
                        .map_err(|_| bad("PREFIX/LEN,GATEWAY like 192.168.0.0/16,10.0.1.2"))?;
                    cfg.routes.push(r).map_err(|_| ConfigError::TooManyRoutes)?;
                }
                13 => {
                    cfg.queues = match value {
                        "auto" => Queues::Auto,
                        v => v
                            .parse::<u8>()
                            .ok()
                            .filter(|n| (1..=MAX_QUEUES as u8).contains(n))
                            .map(Queues::Count)
                            .ok_or_else(|| bad("auto or an integer in 1..=4"))?,
                    }
                }
                14 => {
                    cfg.acpi_rsdp = Some(
                        value
                            .strip_prefix("0x")
                            .and_then(|h| u64::from_str_radix(h, 16).ok())
                            .filter(|&a| a != 0 && a % 16 == 0 && a < MAX_RSDP_ADDR)
                            .ok_or_else(|| {
                                bad("a 16-byte aligned physical address below 4 GiB, like 0x9f000")
                            })?,
                    )
                }
                15 => {
                    cfg.sim = Some(
                        value
                            .parse::<u16>()
                            .ok()
                            .filter(|k| (1..=MAX_SIM_FRAMES).contains(k))
                            .ok_or_else(|| bad("frames per poll iteration, 1..=256"))?,
                    )
                }
                17 => {
                    cfg.tlb = match value {
                        "batch" => TlbMode::Batch,
                        "immediate" => TlbMode::Immediate,
                        _ => return Err(bad("batch or immediate")),
                    }
                }
                18 => {
                    cfg.tlb_ceiling = value
                        .parse::<u16>()
                        .ok()
                        .filter(|n| (1..=MAX_TLB_CEILING).contains(n))
                        .ok_or_else(|| bad("pages, an integer in 1..=64"))?
                }
                19 => {
                    cfg.tlbtest = Some(
                        value
                            .parse::<u32>()
                            .ok()
                            .filter(|n| (1..=MAX_TLBTEST_BATCHES).contains(n))
                            .ok_or_else(|| bad("batches, an integer in 1..=100000000"))?,
                    )
                }
                TLBTEST_SKIP_KEY => {
                    cfg.tlbtest_skip = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                22 => {
                    // Never echoed in an error: the value is a secret.
                    cfg.mgmt_token = Some(MgmtToken::new(value).ok_or(ConfigError::BadValue {
                        key,
                        value: "<redacted>",
                        expected: "printable ASCII without space, 16..=64 bytes",
                    })?);
                }
                MTU0_KEY | 25 => {
                    cfg.mtu[idx - MTU0_KEY] = Some(
                        value
                            .parse::<u16>()
                            .ok()
                            .filter(|m| (MIN_CMDLINE_MTU..=MAX_CMDLINE_MTU).contains(m))
                            .ok_or_else(|| bad("an IP MTU in bytes, 68..=9000"))?,
                    )
                }
                23 => {
                    cfg.backpressure = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                FAULT_KEY => {
                    const EXPECTED: &str = "NAME:N[,NAME:N...] with NAME one of rx_bad_id, rx_bad_len, tx_bad_id, tx_ring_full, bulk_short, bulk_zero, dma_map, recycle_full and N in 1..=1000000000";
                    for item in value.split(',') {
                        let (name, n) = item.split_once(':').ok_or_else(|| bad(EXPECTED))?;
                        let f = mm::fault::Fault::from_name(name).ok_or_else(|| bad(EXPECTED))?;
                        cfg.faults[f as usize] = n
                            .parse::<u64>()
                            .ok()
                            .filter(|n| (1..=MAX_FAULT_EVERY).contains(n))
                            .ok_or_else(|| bad(EXPECTED))?;
                    }
                }
                VIRTIO_MMIO_KEY => {
                    let d = MmioDevice::parse(value).ok_or_else(|| {
                        bad("SIZE@ADDR:IRQ like 512@0xfeb00e00:12 (SIZE 0x100..=1M, ADDR 4-byte aligned, ADDR+SIZE <= 4 GiB)")
                    })?;
                    cfg.virtio_mmio
                        .push(d)
                        .map_err(|_| ConfigError::TooManyMmioDevices)?;
                }
                BURSTIN_KEY => {
                    cfg.burstin = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                PHASES_KEY => {
                    cfg.phases = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                SIM_NIC_KEY => {
                    cfg.sim_nic = match value {
                        "virtio" => SimNic::Virtio,
                        "dd" => SimNic::Dd,
                        "e1000e" => SimNic::E1000e,
                        _ => return Err(bad("virtio, dd or e1000e")),
                    }
                }
                SIM_SIZE_KEY => {
                    cfg.sim_size = value
                        .parse::<u16>()
                        .ok()
                        .filter(|n| (DEFAULT_SIM_SIZE..=MAX_SIM_SIZE).contains(n))
                        .ok_or_else(|| bad("an integer in 64..=9018 (bytes on the wire)"))?
                }
                21 => {
                    cfg.guard = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                SIM_ITERS_KEY => {
                    cfg.sim_iters = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=MAX_SIM_ITERS).contains(n))
                        .ok_or_else(|| bad("an integer in 1..=1000000"))?
                }
                12 => {
                    cfg.xcore = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                11 => {
                    cfg.mgmt = match value {
                        "ip0" => MgmtPort::Port(0),
                        "ip1" => MgmtPort::Port(1),
                        "none" => MgmtPort::Off,
                        _ => return Err(bad("ip0, ip1 or none")),
                    }
                }
                7 => {
                    cfg.idle = match value {
                        "halt" => IdleMode::Halt,
                        "poll" => IdleMode::Poll,
                        _ => return Err(bad("halt or poll")),
                    }
                }
                _ => {
                    cfg.log = match value {
                        "error" => LogLevel::Error,
                        "warn" => LogLevel::Warn,
                        "info" => LogLevel::Info,
                        "debug" => LogLevel::Debug,
                        _ => return Err(bad("error, warn, info or debug")),
                    }
                }
            }
        }
        if cfg.xcore && cfg.mode == Mode::Router {
            return Err(ConfigError::Missing {
                key: "mode",
                because: "(=l2 or io) for xcore",
            });
        }
        if cfg.mode != Mode::Router && !cfg.routes.is_empty() {
            return Err(ConfigError::Missing {
                key: "mode",
                because: "(=router) for route",
            });
        }
        for (i, because) in ["(=router) for ip0", "(=router) for ip1"]
            .into_iter()
            .enumerate()
        {
            if cfg.mode != Mode::Router && cfg.ip[i].is_some() {
                return Err(ConfigError::Missing {
                    key: "mode",
                    because,
                });
            }
        }
        if cfg.mode != Mode::Router && cfg.mgmt_token.is_some() {
            return Err(ConfigError::Missing {
                key: "mode",
                because: "(=router) for mgmt_token",
            });
        }
        if cfg.mode != Mode::Router && matches!(cfg.mgmt, MgmtPort::Port(_)) {
            return Err(ConfigError::Missing {
                key: "mode",
                because: "(=router) for mgmt",
            });
        }
        if cfg.sim.is_none() && seen[SIM_ITERS_KEY] {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_iters",
            });
        }
        if cfg.sim.is_none() && seen[SIM_NIC_KEY] {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_nic",
            });
        }
        if cfg.sim.is_none() && seen[SIM_SIZE_KEY] {
            return Err(ConfigError::Missing {
                key: "sim",
                because: "for sim_size",
            });
        }
        if cfg.tlbtest.is_none() && seen[TLBTEST_SKIP_KEY] {
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
        if cfg.mode == Mode::Router {
            for (i, key) in ["ip0", "ip1"].into_iter().enumerate() {
                if cfg.ip[i].is_none() {
                    return Err(ConfigError::Missing {
                        key,
                        because: "with mode=router",
                    });
                }
            }
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::ToString;

    #[test]
    fn mtu_keys() {
        assert_eq!(Config::parse("").unwrap().mtu, [None, None]);
        assert_eq!(
            Config::parse("mtu0=9000 mtu1=1500").unwrap().mtu,
            [Some(9000), Some(1500)]
        );
        assert_eq!(Config::parse("mtu1=68").unwrap().mtu, [None, Some(68)]);
        for (bad, key) in [
            ("mtu0=67", "mtu0"),
            ("mtu1=9001", "mtu1"),
            ("mtu0=0", "mtu0"),
            ("mtu0=1500b", "mtu0"),
            ("mtu1=", "mtu1"),
            ("mtu0=65536", "mtu0"),
        ] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue { key: k, .. }) if k == key
                ),
                "{bad}"
            );
        }
        assert_eq!(
            Config::parse("mtu0=9001").unwrap_err().to_string(),
            "bad value `9001` for key `mtu0`: expected an IP MTU in bytes, 68..=9000"
        );
        assert_eq!(
            Config::parse("mtu0=1500 mtu0=9000"),
            Err(ConfigError::Repeated("mtu0"))
        );
    }

    #[test]
    fn queues_key() {
        assert_eq!(Config::parse("").unwrap().queues, Queues::Auto);
        assert_eq!(Config::parse("queues=auto").unwrap().queues, Queues::Auto);
        assert_eq!(Config::parse("queues=2").unwrap().queues, Queues::Count(2));
        assert_eq!(Config::parse("queues=1").unwrap().queues, Queues::Count(1));
        for bad in ["queues=0", "queues=5", "queues=two", "queues=-1", "queues="] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue { key: "queues", .. })
                ),
                "{bad}"
            );
        }
        // Router mode on several cores: one router per core over one shared FIB.
        assert_eq!(
            Config::parse("mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 queues=2")
                .unwrap()
                .queues,
            Queues::Count(2)
        );
        assert_eq!(
            Config::parse("queues=5").unwrap_err().to_string(),
            "bad value `5` for key `queues`: expected auto or an integer in 1..=4"
        );
    }

    #[test]
    fn sim_keys() {
        let c = Config::parse("").unwrap();
        assert_eq!((c.sim, c.sim_iters), (None, DEFAULT_SIM_ITERS));
        let c = Config::parse("sim=4").unwrap();
        assert_eq!((c.sim, c.sim_iters), (Some(4), 1024));
        let c = Config::parse("sim=256 sim_iters=32 mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24")
            .unwrap();
        assert_eq!((c.sim, c.sim_iters, c.mode), (Some(256), 32, Mode::Router));
        assert_eq!(
            Config::parse("sim=1 sim_iters=1000000").unwrap().sim_iters,
            1_000_000
        );
        for bad in ["sim=0", "sim=257", "sim=four", "sim=", "sim=-1"] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue { key: "sim", .. })
                ),
                "{bad}"
            );
        }
        for bad in [
            "sim=1 sim_iters=0",
            "sim=1 sim_iters=1000001",
            "sim=1 sim_iters=x",
        ] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue {
                        key: "sim_iters",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert_eq!(c.sim_size, DEFAULT_SIM_SIZE);
        assert_eq!(Config::parse("sim=4 sim_size=9018").unwrap().sim_size, 9018);
        assert_eq!(c.sim_nic, SimNic::Virtio);
        assert_eq!(
            Config::parse("sim=4 sim_nic=dd").unwrap().sim_nic,
            SimNic::Dd
        );
        assert_eq!(
            Config::parse("sim=4 sim_nic=e1000e").unwrap().sim_nic,
            SimNic::E1000e
        );
        assert!(Config::parse("sim=4 sim_nic=e1000").is_err());
        assert!(matches!(
            Config::parse("sim_nic=dd").unwrap_err(),
            ConfigError::Missing { key: "sim", .. }
        ));
        for bad in [
            "sim=1 sim_size=63",
            "sim=1 sim_size=9019",
            "sim=1 sim_size=big",
        ] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue {
                        key: "sim_size",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            Config::parse("sim_size=100").unwrap_err(),
            ConfigError::Missing {
                key: "sim",
                because: "for sim_size"
            }
        );
        assert_eq!(
            Config::parse("sim=0").unwrap_err().to_string(),
            "bad value `0` for key `sim`: expected frames per poll iteration, 1..=256"
        );
        assert_eq!(
            Config::parse("sim_iters=10").unwrap_err(),
            ConfigError::Missing {
                key: "sim",
                because: "for sim_iters"
            }
        );
        assert!(matches!(
            Config::parse("sim=4 queues=2"),
            Err(ConfigError::Missing { key: "queues", .. })
        ));
        assert_eq!(Config::parse("sim=4 queues=1").unwrap().sim, Some(4));
        assert_eq!(
            Config::parse("sim=4 sim=8").unwrap_err(),
            ConfigError::Repeated("sim")
        );
    }

    #[test]
    fn empty_is_default() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(Config::default().mode, Mode::L2);
        assert_eq!(Config::default().burst, 32);
    }

    #[test]
    fn all_keys() {
        let c = Config::parse(
            "mode=io  peer0=02:00:00:00:00:aa peer1=02:00:00:00:00:bb burst=64 log=debug",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Io);
        assert_eq!(c.peer[0].0[5], 0xaa);
        assert_eq!(c.peer[1].0[5], 0xbb);
        assert_eq!(c.burst, 64);
        assert_eq!(c.log, LogLevel::Debug);
        let c = Config::parse("pool=release refill=single").unwrap();
        assert_eq!((c.pool, c.refill), (PoolMode::Release, RefillMode::Single));
        assert!(matches!(
            Config::parse("refill=some"),
            Err(ConfigError::BadValue { key: "refill", .. })
        ));
        assert_eq!(Config::parse("idle=poll").unwrap().idle, IdleMode::Poll);
        assert_eq!(Config::parse("").unwrap().idle, IdleMode::Halt);
        assert!(matches!(
            Config::parse("idle=sleep"),
            Err(ConfigError::BadValue { key: "idle", .. })
        ));
    }

    #[test]
    fn acpi_rsdp() {
        assert_eq!(
            Config::parse("acpi_rsdp=0x9f000").unwrap().acpi_rsdp,
            Some(0x9f000)
        );
        assert_eq!(Config::parse("").unwrap().acpi_rsdp, None);
        for bad in ["0", "0x0", "9f000", "0x9f008", "0x100000000", "0xzz"] {
            assert!(
                matches!(
                    Config::parse(&std::format!("acpi_rsdp={bad}")),
                    Err(ConfigError::BadValue {
                        key: "acpi_rsdp",
                        ..
                    })
                ),
                "acpi_rsdp={bad} accepted"
            );
        }
    }

    #[test]
    fn routes_file() {
        let text = "# core routes\n192.168.0.0/16,10.0.1.2\n\n 0.0.0.0/0,10.0.0.2  # default\n";
        let got: std::vec::Vec<_> = parse_routes_file(text).collect();
        assert_eq!(got.len(), 2);
        let (line, (net, gw)) = got[1].unwrap();
        assert_eq!((line, net.len, gw), (4, 0, Ipv4Addr::new(10, 0, 0, 2)));
        let bad: std::vec::Vec<_> =
            parse_routes_file("10.0.0.0/8,10.0.1.2\n10.1.0.0/33,1.2.3.4\n").collect();
        assert_eq!(
            bad[1],
            Err((2, "10.1.0.0/33,1.2.3.4", ParseError::BadPrefixLen))
        );
        let host_bits: std::vec::Vec<_> = parse_routes_file("192.168.1.5/16,10.0.1.2").collect();
        assert_eq!(
            host_bits[0],
            Err((1, "192.168.1.5/16,10.0.1.2", ParseError::HostBitsSet))
        );
    }

    #[test]
    fn router_keys() {
        let c = Config::parse(
            "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 \
             route=192.168.0.0/16,10.0.1.2 route=0.0.0.0/0,10.0.0.2",
        )
        .unwrap();
        assert_eq!(c.mode, Mode::Router);
        assert_eq!(c.ip[0].unwrap().to_string(), "10.0.0.1/24");
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[0].1, Ipv4Addr::new(10, 0, 1, 2));
        assert_eq!(
            Config::parse("mode=router ip0=10.0.0.1/24").unwrap_err(),
            ConfigError::Missing {
                key: "ip1",
                because: "with mode=router"
            }
        );
        assert!(matches!(
            Config::parse("ip0=10.0.0.1"),
            Err(ConfigError::BadValue { key: "ip0", .. })
        ));
        assert_eq!(c.mgmt_port(), Some(0));
        assert_eq!(Config::parse("mode=l2").unwrap().mgmt_port(), None);
        assert!(matches!(
            Config::parse("mgmt=ip1"),
            Err(ConfigError::Missing { key: "mode", .. })
        ));
        assert!(matches!(
            Config::parse("mode=router route=10.0.0.0/8"),
            Err(ConfigError::BadValue { key: "route", .. })
        ));
        assert_eq!(
            Config::parse("route=192.168.0.0/16,10.0.1.2").unwrap_err(),
            ConfigError::Missing {
                key: "mode",
                because: "(=router) for route"
            }
        );
    }

    /// Issue 15 item 8: `ip0=`/`ip1=` outside router mode are rejected like `route=` (they were
    /// silently ignored).
    #[test]
    fn port_addresses_need_router_mode() {
        for (line, key) in [
            ("ip0=10.0.0.1/24", "ip0"),
            ("mode=l2 ip1=10.0.1.1/24", "ip1"),
            ("mode=io ip0=10.0.0.1/24 ip1=10.0.1.1/24", "ip0"),
        ] {
            let e = Config::parse(line).unwrap_err();
            assert_eq!(
                e,
                ConfigError::Missing {
                    key: "mode",
                    because: if key == "ip0" {
                        "(=router) for ip0"
                    } else {
                        "(=router) for ip1"
                    }
                },
                "{line}"
            );
            assert!(e.to_string().contains(key), "{line}: {e}");
        }
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse("mode=bridge").unwrap_err();
        assert_eq!(
            e,
            ConfigError::BadValue {
                key: "mode",
                value: "bridge",
                expected: "io, l2 or router"
            }
        );
        assert!(e.to_string().contains("`mode`"));
        assert_eq!(
            Config::parse("burst=0").unwrap_err().to_string(),
            "bad value `0` for key `burst`: expected an integer in 1..=256"
        );
        assert!(matches!(
            Config::parse("burst=257"),
            Err(ConfigError::BadValue { key: "burst", .. })
        ));
        assert!(matches!(
            Config::parse("peer1=zz"),
            Err(ConfigError::BadValue { key: "peer1", .. })
        ));
        assert_eq!(
            Config::parse("speed=10").unwrap_err(),
            ConfigError::UnknownKey("speed")
        );
        assert_eq!(
            Config::parse("mode=l2 mode=io").unwrap_err(),
            ConfigError::Repeated("mode")
        );
        assert_eq!(
            Config::parse("quiet").unwrap_err(),
            ConfigError::NotKeyValue("quiet")
        );
    }

    #[test]
    fn virtio_mmio_devices() {
        let c = Config::parse(
            "virtio_mmio.device=512@0xfeb00e00:12 mode=io virtio_mmio.device=4K@0xfeb01000:13:2",
        )
        .unwrap();
        assert_eq!(
            c.virtio_mmio.as_slice(),
            &[
                MmioDevice {
                    size: 512,
                    addr: 0xfeb0_0e00,
                    irq: 12
                },
                MmioDevice {
                    size: 4096,
                    addr: 0xfeb0_1000,
                    irq: 13
                },
            ]
        );
        assert!(Config::parse("").unwrap().virtio_mmio.is_empty());
        for bad in [
            "512",
            "512@0xfeb00e00",
            "512@0xfeb00e00:x",
            "0x80@0xfeb00e00:12",
            "2M@0xfeb00e00:12",
            "512@0xfeb00e01:12",
            "512@0:12",
            "512@0xfffffff0:12",
            "512@0xfeb00e00:12:z",
            "512@zz:12",
        ] {
            let line = format!("virtio_mmio.device={bad}");
            assert!(
                matches!(
                    Config::parse(&line),
                    Err(ConfigError::BadValue {
                        key: "virtio_mmio.device",
                        ..
                    })
                ),
                "{bad}"
            );
        }
        let many = "virtio_mmio.device=512@0xfeb00e00:12 ".repeat(MAX_MMIO_DEVICES + 1);
        assert_eq!(
            Config::parse(&many).unwrap_err(),
            ConfigError::TooManyMmioDevices
        );
    }

    #[test]
    fn tlb_keys_parse_and_are_checked() {
        let c = Config::parse("").unwrap();
        assert_eq!(
            (c.tlb, c.tlb_ceiling, c.tlbtest, c.tlbtest_skip),
            (TlbMode::Batch, 33, None, false)
        );
        assert!(Config::parse("backpressure=on").unwrap().backpressure);
        assert!(!Config::parse("").unwrap().backpressure);
        assert!(matches!(
            Config::parse("backpressure=1"),
            Err(ConfigError::BadValue {
                key: "backpressure",
                ..
            })
        ));
        assert!(Config::parse("guard=on").unwrap().guard);
        assert!(!Config::parse("").unwrap().guard);
        assert!(matches!(
            Config::parse("guard=yes"),
            Err(ConfigError::BadValue { key: "guard", .. })
        ));
        let c = Config::parse("tlb=immediate tlb_ceiling=8 tlbtest=1000 tlbtest_skip=on").unwrap();
        assert_eq!(
            (c.tlb, c.tlb_ceiling, c.tlbtest, c.tlbtest_skip),
            (TlbMode::Immediate, 8, Some(1000), true)
        );
        for (bad, key) in [
            ("tlb=lazy", "tlb"),
            ("tlb_ceiling=0", "tlb_ceiling"),
            ("tlb_ceiling=65", "tlb_ceiling"),
            ("tlbtest=0", "tlbtest"),
            ("tlbtest=1 tlbtest_skip=yes", "tlbtest_skip"),
        ] {
            assert!(
                matches!(Config::parse(bad), Err(ConfigError::BadValue { key: k, .. }) if k == key),
                "{bad}: {:?}",
                Config::parse(bad)
            );
        }
        assert!(matches!(
            Config::parse("tlbtest_skip=on"),
            Err(ConfigError::Missing { key: "tlbtest", .. })
        ));
        assert!(matches!(
            Config::parse("tlbtest=10 sim=4"),
            Err(ConfigError::Missing { key: "sim", .. })
        ));
    }

    #[test]
    fn burstin_key() {
        assert!(!Config::parse("").unwrap().burstin);
        assert!(Config::parse("burstin=on mode=io").unwrap().burstin);
        assert!(!Config::parse("burstin=off").unwrap().burstin);
        for bad in ["burstin=1", "burstin=", "burstin=On"] {
            assert!(
                matches!(
                    Config::parse(bad),
                    Err(ConfigError::BadValue {
                        key: "burstin",
                        expected: "on or off",
                        ..
                    })
                ),
                "{bad}: {:?}",
                Config::parse(bad)
            );
        }
        assert_eq!(
            Config::parse("burstin=on burstin=off"),
            Err(ConfigError::Repeated("burstin"))
        );
        assert!(matches!(
            Config::parse("burstin=on sim=32"),
            Err(ConfigError::Missing { key: "sim", .. })
        ));
    }

    #[test]
    fn fault_key_parses_names_and_periods_and_names_bad_ones() {
        use mm::fault::Fault;
        let c = Config::parse("fault=rx_bad_id:50000,dma_map:64").unwrap();
        assert_eq!(c.faults[Fault::RxBadId as usize], 50_000);
        assert_eq!(c.faults[Fault::DmaMap as usize], 64);
        assert_eq!(c.faults.iter().filter(|&&n| n > 0).count(), 2);
        assert_eq!(Config::parse("").unwrap().faults, [0; mm::fault::FAULTS]);
        for bad in [
            "fault=rx_bad_id",
            "fault=nope:5",
            "fault=dma_map:0",
            "fault=dma_map:1000000001",
            "fault=dma_map:x",
            "fault=dma_map:5,",
        ] {
            match Config::parse(bad) {
                Err(ConfigError::BadValue { key: "fault", .. }) => {}
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn mgmt_token() {
        let r = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";
        let c = Config::parse(r).unwrap();
        assert_eq!(c.mgmt_token, None);
        let tok = "s3cret-Token_0123456789";
        let line = format!("{r} mgmt_token={tok}");
        let c = Config::parse(&line).unwrap();
        let t = c.mgmt_token.clone().unwrap();
        assert!(t.matches(tok.as_bytes()));
        assert!(!t.matches(b"s3cret-Token_0123456788"));
        assert!(!t.matches(b"s3cret"));
        // Never printed: neither by Config's Debug nor in the logged command line.
        assert!(!format!("{c:?}").contains(tok));
        let shown = RedactedCmdline(&line).to_string();
        assert!(!shown.contains(tok), "{shown}");
        assert!(shown.ends_with("mgmt_token=<23 bytes>"), "{shown}");
        for bad in [
            "short",
            &"x".repeat(65),
            "with\u{7f}del-0123456789",
            "é-0123456789abcdef",
        ] {
            let line = format!("{r} mgmt_token={bad}");
            let e = Config::parse(&line).unwrap_err();
            assert!(
                matches!(
                    e,
                    ConfigError::BadValue {
                        key: "mgmt_token",
                        value: "<redacted>",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(!e.to_string().contains(bad));
        }
        assert!(Config::parse(&"x".repeat(16)).is_err());
        assert_eq!(
            Config::parse(&format!("mgmt_token={}", "x".repeat(16))).unwrap_err(),
            ConfigError::Missing {
                key: "mode",
                because: "(=router) for mgmt_token"
            }
        );
    }
}
