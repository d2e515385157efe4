//! The deterministic datapath benchmark (`sim=K`; issue 11, item 0).
//!
//! Past ~800 lines because the benchmark's one loop drives every simulated NIC (virtio-net,
//! e1000e, igb), every mode's frames and checks (the router's neighbour set-up, the ACL's
//! tuple cycle) and its one report line; the frames themselves are `netstack::simframes`'.
//!
//! Ports 0 and 1 are simulated virtio-net devices ([`drivers::sim`]): the same driver
//! ([`VirtioNet`]) and split-ring layout as a real device, but on in-memory rings QEMU never
//! sees, played by this very core. Every iteration:
//!
//! 1. outside the measured bracket, the device delivers K frames on port 0's RX ring and takes
//!    (and checks) every frame the forwarder queued on port 1's (and port 0's) TX ring;
//! 2. inside the bracket, with interrupts off, one `Core::poll_once` runs (the poll
//!    loop's own iteration: RX, forward or route, TX, completions, refill, kicks), timed with
//!    `rdtsc` before and after.
//!
//! After [`WARMUP_ITERS`] warm-up iterations (pools, rings and caches in their steady state)
//! come `sim_iters` measured ones, then one line
//!
//! ```text
//! SIMBENCH mode=l2 k=4 warmup=256 iters=1024 delivered=4096 packets=4096 out=4096 cycles=… instructions_per_packet=… kicks=… busy_iters=… nic=virtio
//! ```
//!
//! (`delivered`: frames the device put on port 0 during the measured iterations; `packets`:
//! frames the forwarder transmitted on port 1 in the brackets; `out`: those the device then
//! took off port 1's TX ring and found to be exactly the expected output frame;
//! `instructions_per_packet`: TSC cycles in the brackets ÷ `packets`, which under QEMU's
//! `-icount shift=0,sleep=off` is guest instructions: one TSC tick per instruction). Then the
//! normal `quit` path runs, so the page accounting check decides the exit status.
//!
//! With `sim_nic=dd` the ports are simulated DD-bit NICs instead ([`drivers::sim::dd`], driven
//! by [`drivers::ddnic`]: 0 header bytes before the frame, Descriptor Done bits instead of a
//! used ring), and core 0 is a core of that NIC type (over [`DdPort`]s): the same benchmark, the
//! proof that the dataplane runs on a NIC that is not virtio-net (issue 32). Those NICs count
//! their drivers' register accesses, so the line then ends in `rdt=N tdt=N reg_reads=N`: the
//! `RDT` and `TDT` writes and the register reads of the measured iterations. `sim_nic=e1000e`
//! and `sim_nic=igb` bring those NICs up as an 82574L (legacy descriptors) and an 82576
//! (advanced descriptors, [`drivers::igb`]), each driven as that NIC (a core over [`IgbPort`]s
//! for igb).
//!
//! With `mode=acl` the device delivers K *different* frames per iteration instead of K copies
//! of one: frames cycling through [`BENCH_TUPLES`] (1,024) 5-tuples aimed at the boot's rules
//! ([`netstack::acl::classbench::tuples`], seed [`BENCH_SEED`], spread evenly over the rules),
//! each built outside the bracket as an IPv4/UDP frame with the tuple's addresses and ports
//! (the protocol is forced to UDP: a tuple aimed at a TCP or ICMP rule meets the rules as a
//! UDP one; [`netstack::simframes::acl_frame`]) and delivered one by one. Denied frames are
//! dropped by design, so the line also carries `dropped=` (the NF's `nf.dropped`) and `flows=`
//! (distinct 5-tuples in the cycle), the figure is instructions per *delivered* frame, and the
//! check is `packets + dropped == delivered`, every forwarded frame being the next allowed one
//! of the cycle, untouched. The ACL in front of the router (`mode=router` with a rules file:
//! `bench sim --modes acl-router`) runs the same cycle, each tuple's destination moved into
//! the benchmark's route and a source the router would not forward from into 100.0.0.0/8
//! (`AclCycle::new`), so every allowed frame is routed: checked as routed (the next hop's MAC,
//! TTL 63), the line's `mode=router`.
//!
//! Frames: 60 bytes (64 on the wire) IPv4/UDP from `peer0` to port 0's MAC. In router mode the
//! addresses come from [`netstack::simframes::router_addrs`] (the first `route=`, else a host
//! on port 1's network), and before the warm-up the device delivers an ARP request from the
//! next hop on port 1, so the router has resolved it and measured frames are forwarded, not
//! queued. The router's neighbour timers (every 10 ms of TSC time) are run outside the bracket
//! (`Core::router_timers_ran` before each iteration): the figure must not depend on
//! where in the 10 ms period the measurement happens to fall, i.e. on how long boot took.
//!
//! Past ~800 lines because the device side (`Bench`), the ACL's tuple cycle (`AclCycle`) and
//! the next hops' resolution all serve the one measured loop and its one `SIMBENCH` line.

// Boot-time errors carry their context as text (no heap to box it in); they are returned once,
// printed and fatal, so their size does not matter.
#![allow(clippy::result_large_err)]

use crate::appliance::Appliance;
use crate::arch::time::{rdtsc, uptime_ns};
use crate::control::commands;
use crate::dataplane::Core;
use crate::mem::KernelHal;
use crate::platform::KernelPlatformOf;
use crate::platform::{KernelCore, FACTS};
use crate::setup::{stash_devices, DeviceHandle, SetupError};
use crate::{fail, println};
use core::fmt::Write as _;
use drivers::ddnic::DdNic;
use drivers::e1000e::{bring_up, E1000eConfig, RxFilter, MAX_MULTICAST};
use drivers::igb::Igb;
use drivers::nic::Nic;
use drivers::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use drivers::sim::{SimDevice, SimShared, SimTransport};
use drivers::transport::PortTransport;
use drivers::virtio_net::{VirtioNet, MAX_FRAME_LEN, QUEUE_SIZE};
use log::{error, info};
use netstack::acl::classbench::{tuples, BENCH_SEED, BENCH_TUPLES};
use netstack::acl::{Action, FiveTuple};
use netstack::config::MAX_SIM_SIZE;
use netstack::config::PORTS;
use netstack::simframes::{
    acl_frame, bench_frames_into, next_hop_arp, next_hop_arp_reply, next_hop_na, router6_addrs,
    router_addrs, tuple_frame, BENCH_FRAME_LEN,
};
use netstack::wire::{ETHERTYPE, ETHERTYPE_ARP, ETH_HDR_LEN, IPV4_DST};
use netstack::{MacAddr, Mode};

/// The simulated ports' MACs: what xtask gives the real ports (`02:00:00:00:00:01`, `…:02`).
const SIM_MACS: [[u8; 6]; PORTS] = [[0x02, 0, 0, 0, 0, 0x01], [0x02, 0, 0, 0, 0, 0x02]];
/// The two simulated devices (state shared by each port's transport and its device player).
static SIM_PORTS: [SimShared; PORTS] = [SimShared::new(SIM_MACS[0]), SimShared::new(SIM_MACS[1])];
/// The two simulated DD-bit NICs of `sim_nic=dd` (register files the ports' drivers and the
/// players share).
static SIM_DD_PORTS: [SimDdShared; PORTS] =
    [SimDdShared::new(SIM_MACS[0]), SimDdShared::new(SIM_MACS[1])];
/// A port of `sim_nic=dd`: the DD-bit driver on a simulated NIC.
pub type DdPort = DdNic<KernelHal, SimDdRegs<'static>>;
/// A port of `sim_nic=igb`: the igb driver (advanced descriptors) on a simulated NIC.
pub type IgbPort = Igb<KernelHal, SimDdRegs<'static>>;
/// Poll iterations before the measured ones.
pub const WARMUP_ITERS: u32 = 256;
/// Frame length without FCS: the 64-byte minimum Ethernet frame on the wire (ARP frames).
const FRAME_LEN: usize = BENCH_FRAME_LEN;
/// Bytes of the FCS, which `sim_size=` (on the wire) counts and the frames do not.
const FCS_LEN: usize = 4;
/// Room for the largest benchmark frame (`sim_size=` 9018: 9,014 bytes without FCS).
const MAX_LEN: usize = MAX_SIM_SIZE as usize - FCS_LEN;

/// `sim=K`, on the boot CPU instead of PCI discovery: bring up ports 0 and 1 on simulated
/// devices and leave their handles for core 0 (no doorbells, no MSI-X: kicks are counted by
/// the transport).
///
/// # Errors
/// [`SetupError::Port`] if the driver refuses the simulated device.
pub fn setup_ports() -> Result<(), SetupError> {
    let mut handles = heapless::Vec::<DeviceHandle, PORTS>::new();
    for (j, shared) in SIM_PORTS.iter().enumerate() {
        let nic = VirtioNet::new(PortTransport::Sim(SimTransport::new(shared))).map_err(|e| {
            crate::setup::port_error(j, None, format_args!("simulated virtio-net init: {e}"))
        })?;
        info!(
            "port {j}: simulated virtio-net (in-memory rings, no PCI) MAC {} queues 2x{} negotiated {:?}",
            MacAddr(nic.mac()),
            QUEUE_SIZE,
            nic.features()
        );
        let _ = handles.push(DeviceHandle { nic, routed: false });
    }
    let Ok(h) = handles.into_array::<PORTS>() else {
        unreachable!("two ports pushed")
    };
    stash_devices(0, h);
    Ok(())
}

/// `sim=K sim_nic=dd`: ports 0 and 1 on simulated DD-bit NICs (0 header bytes, Descriptor Done
/// written back), for core 0 to be built over; `sim_nic=e1000e`: the same NICs brought up
/// through the 82574L bring-up ([`drivers::e1000e::bring_up`]).
///
/// # Errors
/// [`SetupError::Port`] if a driver found no memory for its rings.
pub fn dd_ports(cfg: &netstack::Config) -> Result<[DdPort; PORTS], SetupError> {
    let mut ports = heapless::Vec::<DdPort, PORTS>::new();
    for (j, shared) in SIM_DD_PORTS.iter().enumerate() {
        let nic = if cfg.sim_nic == netstack::config::SimNic::E1000e {
            // The 82574L bring-up (reset, MAC, link, filter) on the simulated registers.
            let ecfg = E1000eConfig {
                filter: if cfg.mode == Mode::Router {
                    RxFilter::Router
                } else {
                    RxFilter::Promiscuous
                },
                max_frame: usize::from(cfg.sim_size),
                multicast: [None; MAX_MULTICAST],
                link_local_group: false,
            };
            bring_up::<KernelHal, _>(SimDdRegs(shared), &ecfg, crate::arch::time::uptime_us)
                .map_err(|e| crate::setup::port_error(j, None, format_args!("simulated {e}")))?
        } else {
            DdPort::new(SimDdRegs(shared)).map_err(|e| {
                crate::setup::port_error(j, None, format_args!("simulated DD-bit NIC init: {e:?}"))
            })?
        };
        info!(
            "port {j}: simulated DD-bit NIC (legacy descriptors, 0 header bytes, no PCI) MAC {} rings 2x{}",
            MacAddr(nic.mac()),
            QUEUE_SIZE
        );
        let _ = ports.push(nic);
    }
    let Ok(p) = ports.into_array::<PORTS>() else {
        unreachable!("two ports pushed")
    };
    Ok(p)
}

/// `sim=K sim_nic=igb`: ports 0 and 1 on the simulated DD-bit NICs brought up as 82576s
/// ([`drivers::igb::bring_up`]: advanced descriptors, one 4 KiB buffer each), for core 0.
///
/// # Errors
/// [`SetupError::Port`] naming the bring-up's error.
pub fn igb_ports(cfg: &netstack::Config) -> Result<[IgbPort; PORTS], SetupError> {
    let mut ports = heapless::Vec::<IgbPort, PORTS>::new();
    for (j, shared) in SIM_DD_PORTS.iter().enumerate() {
        let icfg = drivers::igb::IgbConfig {
            filter: if cfg.mode == Mode::Router {
                RxFilter::Router
            } else {
                RxFilter::Promiscuous
            },
            max_frame: usize::from(cfg.sim_size),
            multicast: [None; MAX_MULTICAST],
            link_local_group: false,
        };
        let nic = drivers::igb::bring_up::<KernelHal, _>(
            SimDdRegs(shared),
            &icfg,
            crate::arch::time::uptime_us,
        )
        .map_err(|e| crate::setup::port_error(j, None, format_args!("simulated {e}")))?;
        info!(
            "port {j}: simulated DD-bit NIC as an 82576 (advanced descriptors, 0 header bytes, no PCI) MAC {} rings 2x{}",
            MacAddr(nic.mac()),
            QUEUE_SIZE
        );
        let _ = ports.push(nic);
    }
    let Ok(p) = ports.into_array::<PORTS>() else {
        unreachable!("two ports pushed")
    };
    Ok(p)
}

/// A simulated device's player as the benchmark drives it.
trait Player {
    /// Deliver `frame` `k` times on the RX ring (several buffers each when it is larger than
    /// one); returns how many.
    fn deliver(&mut self, frame: &[u8], k: usize) -> usize;
    /// Take every frame posted on the TX ring, each shown to `f`.
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize;
}

impl Player for SimDevice<'_> {
    fn deliver(&mut self, frame: &[u8], k: usize) -> usize {
        // A frame larger than one RX buffer arrives in several (VIRTIO 1.2 §5.1.6.4).
        if frame.len() <= MAX_FRAME_LEN {
            self.deliver_rx(frame, k)
        } else {
            self.deliver_rx_mrg(frame, k)
        }
    }
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        SimDevice::complete_tx(self, f)
    }
}

impl Player for SimDdDevice<'_> {
    fn deliver(&mut self, frame: &[u8], k: usize) -> usize {
        self.deliver_rx(frame, k)
    }
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        SimDdDevice::complete_tx(self, f)
    }
}

/// What the device checks on a TX ring and counts.
struct Out {
    /// The frame the forwarder must send (its first `len` bytes).
    want: [u8; MAX_LEN],
    len: usize,
    /// Frames equal to `want`.
    ok: u64,
    /// Anything else (ARP replies, wrong frames).
    other: u64,
}

impl Out {
    fn take(&mut self, dev: &mut impl Player) {
        dev.complete_tx(|f| {
            if f == &self.want[..self.len] {
                self.ok += 1;
            } else {
                self.other += 1;
            }
        });
    }
}

/// The benchmark frame delivered on port 0 and the frame expected on port 1, written into the
/// first `len` bytes of `input` and `want`: the appliance's own when it brings them
/// ([`Appliance::bench_frames`]), else the mode's.
fn frames<A: Appliance, N: Nic>(
    core: &Core<KernelPlatformOf<N>>,
    len: usize,
    input: &mut [u8],
    want: &mut [u8],
) {
    let macs = [MacAddr(SIM_MACS[0]), MacAddr(SIM_MACS[1])];
    if A::bench_frames(macs, core.cfg().peer, &mut input[..len], &mut want[..len]) {
        info!("sim: the frames are the appliance's own ({})", A::NAME);
        return;
    }
    bench_frames_into(core.cfg(), macs, &mut input[..len], &mut want[..len]).unwrap_or_else(|| {
        fail(format_args!(
            "sim: no host addresses to spare in ip0/ip1 or the first route"
        ))
    })
}

/// Router mode: the next hop (peer1's MAC) asks for port 1's address; the router learns it
/// (RFC 826) and answers. Not measured.
fn resolve_next_hop<N: Nic>(core: &mut Core<KernelPlatformOf<N>>, dev: &mut [impl Player; PORTS]) {
    let mut arp = [0u8; FRAME_LEN];
    let Some(n) = next_hop_arp(core.cfg(), &mut arp) else {
        return;
    };
    if dev[1].deliver(&arp[..n], 1) != 1 {
        fail(format_args!(
            "sim: port 1 has no RX buffer for the ARP request"
        ));
    }
    core.poll_once();
    let mut replies = 0;
    let arp = ETHERTYPE_ARP.to_be_bytes();
    dev[1].complete_tx(|f| replies += usize::from(f.get(ETHERTYPE) == Some(&arp[..])));
    // Learned from a request the entry is Stale: the next hop's reply confirms it (Reachable).
    let mut reply = [0u8; FRAME_LEN];
    if let Some(n) = next_hop_arp_reply(core.cfg(), MacAddr(SIM_MACS[1]), &mut reply) {
        if dev[1].deliver(&reply[..n], 1) != 1 {
            fail(format_args!(
                "sim: port 1 has no RX buffer for the ARP reply"
            ));
        }
        core.poll_once();
    }
    if let Some(a) = router_addrs(core.cfg()) {
        info!(
            "sim: next hop {} resolved on port 1 ({replies} ARP reply sent)",
            a.next_hop
        );
    }
}

/// `sim_ip=6`: one benchmark frame (`input`) makes the router solicit its gateway on port 1;
/// the gateway's solicited advertisement makes the entry Reachable and releases the frame.
/// Not measured.
fn resolve_next_hop6<N: Nic>(
    core: &mut Core<KernelPlatformOf<N>>,
    dev: &mut [impl Player; PORTS],
    input: &[u8],
) {
    if dev[0].deliver(input, 1) != 1 {
        fail(format_args!(
            "sim: port 0 has no RX buffer for the first frame"
        ));
    }
    core.poll_once();
    let mut solicits = 0;
    dev[1].complete_tx(|_| solicits += 1);
    // Ethernet 14 + IPv6 40 + NA 24 + its link-layer option 8.
    let mut na = [0u8; 86];
    let Some(n) = next_hop_na(core.cfg(), MacAddr(SIM_MACS[1]), &mut na) else {
        fail(format_args!(
            "sim: sim_ip=6 without IPv6 addresses and a route"
        ))
    };
    if dev[1].deliver(&na[..n], 1) != 1 {
        fail(format_args!(
            "sim: port 1 has no RX buffer for the Neighbor Advertisement"
        ));
    }
    core.poll_once();
    let mut released = 0;
    dev[1].complete_tx(|_| released += 1);
    if let Some(a) = router6_addrs(core.cfg()) {
        info!(
            "sim: next hop {} resolved on port 1 ({solicits} solicitation, {released} frame released)",
            core::net::Ipv6Addr::from_bits(a.gateway)
        );
    }
}

/// `mode=acl` and the ACL in front of the router: the 5-tuples the delivered frames cycle
/// through, and where the device is in the cycle on each side.
struct AclCycle {
    tuples: [FiveTuple; BENCH_TUPLES],
    /// Whether the rules allow tuple `i` (as a UDP frame): only those come out of port 1.
    allowed: [bool; BENCH_TUPLES],
    /// Distinct tuples in the cycle.
    flows: usize,
    /// The next tuple to deliver.
    next_in: usize,
    /// The next tuple whose frame may come out of port 1 (allowed or not).
    next_out: usize,
    /// Port 0's MAC and its peer's: the frames' destination and source.
    mac0: MacAddr,
    peer0: MacAddr,
    /// In front of the router: the next hop's MAC and port 1's, the forwarded frames'
    /// destination and source (TTL 63); `None` in `mode=acl` (forwarded untouched).
    routed: Option<(MacAddr, MacAddr)>,
}

impl AclCycle {
    /// The cycle over the boot's rule set (`nf::builtin::ACL`), `None` when none was built.
    /// In front of the router (`routed`), each tuple's destination is moved into the
    /// benchmark's route (192.168.0.0/16, host `i` of the cycle) and a source the router
    /// would not forward from (RFC 1812 §5.3.7, or in port 0's and port 1's networks: its own
    /// and their broadcasts) into 100.0.0.0/8, so that every frame the rules allow is routed
    /// by the fast path to the resolved next hop.
    fn new(peer0: MacAddr, routed: Option<(MacAddr, MacAddr)>) -> Option<AclCycle> {
        let table = crate::dataplane::nf::builtin::ACL.get()?.current();
        let acl = &table.acl;
        let mut c = AclCycle {
            tuples: [FiveTuple {
                src: core::net::Ipv4Addr::UNSPECIFIED,
                dst: core::net::Ipv4Addr::UNSPECIFIED,
                proto: 0,
                sport: 0,
                dport: 0,
            }; BENCH_TUPLES],
            allowed: [false; BENCH_TUPLES],
            flows: 0,
            next_in: 0,
            next_out: 0,
            mac0: MacAddr(SIM_MACS[0]),
            peer0,
            routed,
        };
        for (i, mut t) in tuples(acl, BENCH_TUPLES, BENCH_SEED).enumerate() {
            // The frames are UDP: classify the tuple as the NF will see it.
            t.proto = netstack::wire::IPPROTO_UDP;
            if routed.is_some() {
                t.dst = core::net::Ipv4Addr::new(192, 168, (i >> 8) as u8, i as u8);
                let src = t.src.to_bits();
                // 10.0.0.0/23: ports 0's and 1's networks.
                if netstack::router::ipv4::is_martian_src(src) || src & 0xFFFF_FE00 == 0x0A00_0000 {
                    t.src = core::net::Ipv4Addr::from_bits(src & 0x00FF_FFFF | 100 << 24);
                }
            }
            c.tuples[i] = t;
            c.allowed[i] = acl.classify(&t).action == Action::Allow;
        }
        let key = |t: &FiveTuple| (t.src.to_bits(), t.dst.to_bits(), t.sport, t.dport);
        let mut sorted = c.tuples;
        sorted.sort_unstable_by_key(key);
        c.flows = 1 + sorted
            .windows(2)
            .filter(|w| key(&w[0]) != key(&w[1]))
            .count();
        Some(c)
    }

    /// `mode=acl`'s cycle (its boot failing without a rule set), the router's with the ACL
    /// in front (a rules file), `None` otherwise.
    fn for_mode(cfg: &netstack::Config) -> Option<AclCycle> {
        match cfg.mode {
            Mode::Acl => Some(
                AclCycle::new(cfg.peer[0], None)
                    .unwrap_or_else(|| fail(format_args!("sim: mode=acl without a rule set"))),
            ),
            Mode::Router if !cfg.sim_ipv6 => {
                AclCycle::new(cfg.peer[0], Some((cfg.peer[1], MacAddr(SIM_MACS[1]))))
            }
            _ => None,
        }
    }

    /// Tuple `i`'s frame, `len` bytes, into `out`.
    fn frame(&self, i: usize, len: usize, out: &mut [u8]) {
        acl_frame(out, len, self.mac0, self.peer0, &self.tuples[i]);
    }

    /// Whether `f`, taken off port 1, is the frame of the next allowed tuple delivered (the
    /// denied ones before it skipped) forwarded untouched, or routed, the frame of an allowed
    /// tuple; `scratch` holds the expected frame.
    fn expect(&mut self, f: &[u8], len: usize, scratch: &mut [u8]) -> bool {
        if let Some((hop, mac1)) = self.routed {
            // Routed: in any order across tuples (the router keeps a frame it cannot send
            // at once, e.g. while it confirms its next hop, and sends it after the burst),
            // each tuple's frame found by its destination, 192.168.0.0 + i.
            let dst = ETH_HDR_LEN + IPV4_DST.start;
            let Some(&[a, b, c, d]) = f.get(dst..dst + 4) else {
                return false;
            };
            let i = usize::from(c) << 8 | usize::from(d);
            if [a, b] != [192, 168] || i >= BENCH_TUPLES || !self.allowed[i] {
                return false;
            }
            tuple_frame(scratch, len, hop, mac1, &self.tuples[i], 63);
            return f == &scratch[..len];
        }
        for _ in 0..BENCH_TUPLES {
            let i = self.next_out;
            self.next_out = (i + 1) % BENCH_TUPLES;
            if self.allowed[i] {
                self.frame(i, len, scratch);
                return f == &scratch[..len];
            }
        }
        false
    }
}

/// The device side of the benchmark.
struct Bench<D> {
    dev: [D; PORTS],
    /// Frames delivered on port 0 per iteration.
    k: usize,
    input: [u8; MAX_LEN],
    /// Bytes of `input` sent (the frame without FCS).
    len: usize,
    /// Port 1's TX ring: the forwarded frames.
    out: Out,
    /// Port 0's TX ring: nothing is expected there.
    back: Out,
}

impl<D: Player> Bench<D> {
    /// Take what the forwarder transmitted on both ports.
    fn take_tx(&mut self) {
        self.out.take(&mut self.dev[1]);
        self.back.take(&mut self.dev[0]);
    }

    /// One iteration: outside the bracket, deliver K frames on port 0 and take both TX rings;
    /// inside, one poll iteration. Returns (frames delivered, TSC cycles in the bracket).
    #[inline(never)]
    fn step<A: Appliance, N: Nic>(
        &mut self,
        core: &mut Core<KernelPlatformOf<N>>,
        state: &mut A::PerCore,
    ) -> (usize, u64) {
        let frame = &self.input[..self.len];
        let delivered = self.dev[0].deliver(frame, self.k);
        self.take_tx();
        core.router_timers_ran(uptime_ns());
        let t0 = rdtsc();
        A::poll(state, core);
        let t1 = rdtsc();
        (delivered, t1 - t0)
    }

    /// [`Self::step`], or [`Self::step_acl`] over `cycle` (`mode=acl`).
    fn step_any<A: Appliance, N: Nic>(
        &mut self,
        core: &mut Core<KernelPlatformOf<N>>,
        state: &mut A::PerCore,
        cycle: &mut Option<AclCycle>,
    ) -> (usize, u64) {
        match cycle {
            None => self.step::<A, N>(core, state),
            Some(c) => self.step_acl::<A, N>(core, state, c),
        }
    }

    /// [`Self::take_tx`], or [`Self::take_tx_acl`] over `cycle` (`mode=acl`).
    fn take_tx_any(&mut self, cycle: &mut Option<AclCycle>) {
        match cycle {
            None => self.take_tx(),
            Some(c) => self.take_tx_acl(c),
        }
    }

    /// [`Self::take_tx`] for `mode=acl`: port 1's frames checked against `c`.
    fn take_tx_acl(&mut self, c: &mut AclCycle) {
        let (out, len) = (&mut self.out, self.len);
        self.dev[1].complete_tx(|f| {
            if c.expect(f, len, &mut out.want) {
                out.ok += 1;
            } else {
                out.other += 1;
            }
        });
        self.back.take(&mut self.dev[0]);
    }

    /// [`Self::step`] for `mode=acl`: outside the bracket, the next K frames of the cycle, one
    /// by one; inside, one poll iteration.
    #[inline(never)]
    fn step_acl<A: Appliance, N: Nic>(
        &mut self,
        core: &mut Core<KernelPlatformOf<N>>,
        state: &mut A::PerCore,
        c: &mut AclCycle,
    ) -> (usize, u64) {
        let mut delivered = 0;
        for _ in 0..self.k {
            c.frame(c.next_in, self.len, &mut self.input);
            if self.dev[0].deliver(&self.input[..self.len], 1) != 1 {
                break;
            }
            c.next_in = (c.next_in + 1) % BENCH_TUPLES;
            delivered += 1;
        }
        self.take_tx_acl(c);
        core.router_timers_ran(uptime_ns());
        let t0 = rdtsc();
        A::poll(state, core);
        let t1 = rdtsc();
        (delivered, t1 - t0)
    }
}

/// Run the benchmark on core 0 (built over the simulated ports), print the `SIMBENCH` line and
/// shut down through `quit`. Never returns.
pub fn run<A: Appliance>(core: KernelCore) -> ! {
    // SAFETY: the rings come from KernelHal (zone pages) and the RX buffers from the page_pools,
    // all identity-mapped RAM; the devices are reset (quit phase 2) before their rings and
    // buffers are freed (phases 3 and 5); this core is the only device player.
    let dev = SIM_PORTS.each_ref().map(|s| unsafe { SimDevice::new(s) });
    run_on::<A, _>(core, dev, None)
}

/// [`run`] on the simulated DD-bit NICs of `sim_nic=dd`/`e1000e` ([`dd_ports`]: a core over
/// [`DdPort`]s) or `sim_nic=igb` ([`igb_ports`]: over [`IgbPort`]s).
pub fn run_dd<A: Appliance, N: Nic>(core: Core<KernelPlatformOf<N>>) -> ! {
    // SAFETY: as in `run`: KernelHal rings, page_pool buffers, identity-mapped; the NICs are
    // reset (quit phase 2) before their rings and buffers are freed; the only player.
    let dev = SIM_DD_PORTS
        .each_ref()
        .map(|s| unsafe { SimDdDevice::new(s) });
    run_on::<A, _>(core, dev, Some(dd_regs))
}

/// Register accesses the drivers of the simulated DD-bit NICs made so far.
fn dd_regs() -> RegCounts {
    let mut c = RegCounts::default();
    for p in &SIM_DD_PORTS {
        let (rdt, tdt) = p.tail_writes();
        c.reads += p.reads();
        c.rdt += rdt;
        c.tdt += tdt;
    }
    c
}

/// Register accesses of a NIC that counts them (the simulated DD-bit NICs): reads, `RDT` and
/// `TDT` writes.
#[derive(Copy, Clone, Debug, Default)]
struct RegCounts {
    reads: u64,
    rdt: u64,
    tdt: u64,
}

/// The measured iterations' register accesses, `c0` before them and `c1` after, for
/// `delivered` frames: reads must be 0 (DD bits come from descriptor memory); the tail writes
/// (doorbells) are reported with the frames per write. Returns the `SIMBENCH` line's
/// ` rdt=N tdt=N reg_reads=N` (the harness records them and checks the reads).
fn report_regs(c0: RegCounts, c1: RegCounts, delivered: u64) -> heapless::String<64> {
    let mut field = heapless::String::new();
    let _ = write!(
        field,
        " rdt={} tdt={} reg_reads={}",
        c1.rdt - c0.rdt,
        c1.tdt - c0.tdt,
        c1.reads - c0.reads
    );
    match c1.reads - c0.reads {
        0 => info!("simbench: 0 device register reads in the measured iterations"),
        n => error!("simbench: {n} device register reads in the measured iterations (want 0: DD bits come from descriptor memory)"),
    }
    let (rdt, tdt) = (c1.rdt - c0.rdt, c1.tdt - c0.tdt);
    let per = |w: u64| (delivered * 100).checked_div(w).unwrap_or(0);
    info!(
        "simbench: {rdt} RDT writes ({}.{:02} frames each), {tdt} TDT writes ({}.{:02} frames each) for {delivered} frames in the measured iterations",
        per(rdt) / 100,
        per(rdt) % 100,
        per(tdt) / 100,
        per(tdt) % 100
    );
    field
}

/// The benchmark on core 0 over ports of NIC type `N`, their devices played by `dev`; `regs`
/// (a NIC that counts its drivers' register accesses): no read in the measured iterations, and
/// the tail writes per frame reported.
fn run_on<A: Appliance, N: Nic>(
    mut core: Core<KernelPlatformOf<N>>,
    dev: [impl Player; PORTS],
    regs: Option<fn() -> RegCounts>,
) -> ! {
    let core = &mut core;
    let k = usize::from(core.cfg().sim.expect("simbench::run with sim=K"));
    let iters = core.cfg().sim_iters;
    let len = usize::from(core.cfg().sim_size) - FCS_LEN;
    let (mut input, mut want) = ([0u8; MAX_LEN], [0u8; MAX_LEN]);
    frames::<A, N>(core, len, &mut input, &mut want);
    let nothing = Out {
        want: [0; MAX_LEN],
        len: 0,
        ok: 0,
        other: 0,
    };
    let mut b = Bench {
        dev,
        k,
        input,
        len,
        out: Out {
            want,
            len,
            ..nothing
        },
        back: nothing,
    };
    if core.cfg().sim_ipv6 {
        resolve_next_hop6(core, &mut b.dev, &b.input[..len]);
    } else if core.cfg().mode == Mode::Router {
        resolve_next_hop(core, &mut b.dev);
    }
    let mut cycle = AclCycle::for_mode(core.cfg());
    let mut state = A::new_core(core);
    crate::control::stats::NF_NAME.call_once(|| A::label(core.cfg()));
    // Interrupts stay off for the whole benchmark (no timer is armed: idle halting is off on
    // simulated ports), so nothing but the poll iteration runs inside a bracket.
    x86_64::instructions::interrupts::disable();
    for _ in 0..WARMUP_ITERS {
        b.step_any::<A, N>(core, &mut state, &mut cycle);
    }
    // What the warm-up sent is taken now: from here on `out` counts measured frames only.
    b.take_tx_any(&mut cycle);
    let start = Marks::now(&b, core);
    let (mut delivered, mut cycles) = (0u64, 0u64);
    let regs0 = regs.map(|f| f());
    for _ in 0..iters {
        let (d, c) = b.step_any::<A, N>(core, &mut state, &mut cycle);
        delivered += d as u64;
        cycles += c;
    }
    let mut regs_field = heapless::String::<64>::new();
    if let (Some(f), Some(c0)) = (regs, regs0) {
        regs_field = report_regs(c0, f(), delivered);
    }
    if let Some(c) = &mut cycle {
        report_acl(&mut b, core, c, &start, delivered, cycles);
        let facts = *FACTS.get().expect("set before the benchmark");
        A::release(&mut state, core);
        commands::quit(core, &facts, commands::End::Exit)
    }
    b.take_tx();
    let packets = core.counters()[1].tx - start.tx;
    let good = b.out.ok - start.ok;
    let other = b.out.other + b.back.ok + b.back.other - start.other;
    let per = (cycles * 100).checked_div(packets).unwrap_or(0);
    let now = *core.profile_mut();
    let acl = acl_rules_field();
    println!(
        "SIMBENCH mode={} k={k} size={} warmup={WARMUP_ITERS} iters={iters} delivered={delivered} packets={packets} out={good} other={other} cycles={cycles} instructions_per_packet={}.{:02} kicks={} busy_iters={} nic={}{regs_field}{acl}",
        core.cfg().mode.as_str(),
        core.cfg().sim_size,
        per / 100,
        per % 100,
        now.kicks - start.kicks,
        now.busy_iters - start.busy_iters,
        core.cfg().sim_nic.as_str(),
    );
    if packets == 0 || packets != delivered || good != packets {
        error!(
            "simbench: {delivered} frames delivered on port 0, {packets} transmitted on port 1, {good} as expected: not every frame was forwarded"
        );
    }
    let facts = *FACTS.get().expect("set before the benchmark");
    A::release(&mut state, core);
    commands::quit(core, &facts, commands::End::Exit)
}

/// `mode=router` with a rules file (the ACL in front of the router): ` rules=N` for the
/// `SIMBENCH` line; empty without a rule set.
fn acl_rules_field() -> heapless::String<16> {
    let mut acl = heapless::String::new();
    if let Some(t) = crate::dataplane::nf::builtin::ACL.get() {
        let _ = write!(acl, " rules={}", t.current().acl.len());
    }
    acl
}

/// Counters at the start of the measured iterations.
struct Marks {
    /// Port 1's frames as expected, and other frames on either TX ring.
    ok: u64,
    other: u64,
    /// Port 1's transmitted frames.
    tx: u64,
    /// The NF's dropped frames.
    dropped: u64,
    /// The profile's kicks and busy iterations.
    kicks: u64,
    busy_iters: u64,
}

impl Marks {
    /// The counters now (after the warm-up's frames were taken).
    fn now<N: Nic>(b: &Bench<impl Player>, core: &mut Core<KernelPlatformOf<N>>) -> Marks {
        let prof = *core.profile_mut();
        Marks {
            ok: b.out.ok,
            other: b.out.other + b.back.ok + b.back.other,
            tx: core.counters()[1].tx,
            dropped: core.nf_counters().dropped,
            kicks: prof.kicks,
            busy_iters: prof.busy_iters,
        }
    }
}

/// `mode=acl`: take what is left on the TX rings and print the `SIMBENCH` line of the measured
/// iterations (`delivered` frames, `cycles` in the brackets): instructions per *delivered*
/// frame, since denied frames are dropped by design; an error line unless every delivered
/// frame was forwarded as expected or dropped.
fn report_acl<N: Nic>(
    b: &mut Bench<impl Player>,
    core: &mut Core<KernelPlatformOf<N>>,
    c: &mut AclCycle,
    start: &Marks,
    delivered: u64,
    cycles: u64,
) {
    b.take_tx_acl(c);
    let packets = core.counters()[1].tx - start.tx;
    let dropped = core.nf_counters().dropped - start.dropped;
    let good = b.out.ok - start.ok;
    let other = b.out.other + b.back.ok + b.back.other - start.other;
    let per = (cycles * 100).checked_div(delivered).unwrap_or(0);
    let rules = crate::dataplane::nf::builtin::ACL
        .get()
        .map_or(0, |t| t.current().acl.len());
    let now = *core.profile_mut();
    println!(
        "SIMBENCH mode={} k={} size={} warmup={WARMUP_ITERS} iters={} delivered={delivered} packets={packets} dropped={dropped} out={good} other={other} cycles={cycles} instructions_per_packet={}.{:02} kicks={} busy_iters={} rules={rules} flows={}",
        core.cfg().mode.as_str(),
        b.k,
        core.cfg().sim_size,
        core.cfg().sim_iters,
        per / 100,
        per % 100,
        now.kicks - start.kicks,
        now.busy_iters - start.busy_iters,
        c.flows,
    );
    if delivered == 0 || packets + dropped != delivered || good != packets {
        error!(
            "simbench: {delivered} frames delivered on port 0, {packets} transmitted on port 1 ({good} as expected), {dropped} dropped: not every frame was forwarded or denied"
        );
    }
}
