//! The dataplane: what one forwarding core does, written once for the metal and the host.
//!
//! # Map (arrows point down only)
//!
//! * [`percore`]: [`Core`] (one core's state and its [`Core::poll_once`]), and the traits it is
//!   generic over: [`Platform`] (cycle counter, clock, wake-up IPI, metrics text, and the
//!   associated NIC and management-plane types) and [`MgmtPlane`].
//! * `l2` (`io`/`l2` forwarding, `xcore`), `route` (router mode, neighbour sync), `mgmt`
//!   (the management plane's frames, whatever the NF; its state in the leaf `mgmt_side`), `tx` (flush, completion), `teardown` (quit): `impl Core`
//!   blocks by concern; `stage` holds the TX staging arrays.
//! * [`nf`]: the network-function API ([`nf::NetworkFunction`]: per-frame `process` inlined
//!   into the fused loop, end-of-burst and tick hooks, [`nf::Packet`] header views) and the
//!   stock `io`/`l2` NFs on it ([`nf::builtin`]); [`Core::poll_nf`] runs one. `nf_side`: the
//!   core's verdict counts and kept frames (a leaf below `percore` and `nf`).
//! * [`pages`]: a core's page owner (pcp list, its two pools, the way back to other pools).
//! * [`page`]: [`PageBuf`], the one-owner page token; the only place a page becomes bytes.
//! * [`handoff`]: the typed cross-core frame record and its ring.
//! * [`fabric`]: [`Fabric`], everything the cores share (rings, published snapshots, quit).
//! * [`quit`]: the quit phases ([`QuitPhase`]) and their handshake; `teardown`: each phase's
//!   work on a core, the following cores' loop and the boot CPU's lead.
//! * [`snap`]: counters copied for other cores; the control plane formats only these.
//! * [`burstin`]: the bench-only burst-in gate (`burstin=on`): when the poll loop runs a poll
//!   iteration; reads the RX used indices through [`Core`].
//!
//! # Rules
//!
//! * A [`Core`] is touched only by its own CPU (`&mut self`); other cores reach it only through
//!   the [`Fabric`]'s lock-free rings and its published [`snap::PairSnap`].
//! * Every page is held by exactly one party; [`PageBuf`] is how the core holds one. A page
//!   leaves the core only to an RX ring (refill) or a TX ring, a hand-off ring, the router's
//!   neighbour queue, or back to a pool ([`pages::Pages::recycle`], [`pages::Pages::release`]).
//! * Nothing here names the machine: no port I/O, no TSC, no APIC. Those come through
//!   [`Platform`], implemented by the kernel binary.

pub mod burstin;
pub mod fabric;
mod frame_limits;
pub mod handoff;
mod held;
mod l2;
mod mgmt;
mod mgmt_side;
pub mod mtu;
pub mod nf;
mod nf_side;
pub mod page;
pub mod pages;
pub mod percore;
pub mod quit;
mod route;
mod route6;
mod route_slow;
pub mod slots;
pub mod snap;
mod stage;
mod teardown;
mod tx;

pub use burstin::{BurstIn, BURSTIN_USED, BURSTIN_WAIT_MS};
pub use fabric::Fabric;
pub use page::PageBuf;
pub use percore::{
    port_mtu, Core, CoreError, CoreParams, CoreRouter, CoreRouter6, LinearError, MgmtPlane,
    Platform, RouteState,
};
pub use quit::{QuitError, QuitPhase, QuitReport};
pub use route::ROUTER_TIMER_NS;

/// Most forwarding cores (the kernel's `MAX_CPUS` is the same number).
pub const MAX_CORES: usize = 16;
/// Most ports (the PCI scan's `MAX_NICS`).
pub const MAX_PORTS: usize = drivers::pci::MAX_NICS;

#[cfg(any(test, feature = "host-rig"))]
pub mod testing;
#[cfg(test)]
mod tests;
