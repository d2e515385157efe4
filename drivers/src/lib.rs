//! Gannet device drivers.
//!
//! # Map (who may use whom)
//!
//! * [`virtqueue`]: our split virtqueue (VIRTIO 1.2 §2.7); uses only `virtio-drivers`' HAL and
//!   transport traits.
//! * [`nic`]: the driver-neutral contract the dataplane is written against (the [`nic::Nic`]
//!   trait, the per-frame verdict callback [`nic::ForwardOps`], the buffer description); it
//!   names no driver.
//! * [`virtio_net`]: the driver, on [`virtqueue`] and [`nic`]; implements [`nic::Nic`] for
//!   every transport.
//! * [`ddnic`]: a driver for a NIC that writes Descriptor Done bits back (Intel 8254x legacy
//!   descriptors, tail registers), on [`nic`] only; today on [`sim::dd`]'s simulated NIC, the
//!   proof that the contract names no virtio.
//! * [`e1000e`]: the Intel 82574L bring-up (reset, MAC, link, filters) on [`ddnic`], its
//!   register block through a BAR ([`e1000e::MmioRegs`]).
//! * [`igb`]: the Intel 82576 bring-up on [`ddnic`] with advanced descriptors, sharing the
//!   82574L's steps and register block ([`e1000e`]).
//! * [`sim`] (a simulated device on the driver's ring memory) and [`transport`] (PCI or
//!   simulated) sit beside the driver; [`virtqueue`]'s host tests use [`sim`]'s device queue.
//! * [`pci`], [`uart`]: port I/O; [`mmio`]: probing a virtio-mmio block; [`virtio_pci`]: the
//!   modern virtio PCI transport, on [`pci`]'s capability walk; only [`transport`] uses
//!   [`pci`] and [`virtio_pci`].
//!
//! The dataplane (`unikernel`'s library) uses [`nic`] only (and [`sim`] in its host rig); the
//! kernel binary uses [`pci`], [`transport`], [`sim`] and [`uart`] to set devices up.
//!
//! - [`uart`]: the 16550 UART on COM1, used for the boot log and the serial console.
//! - [`pci`]: PCI configuration access through I/O ports 0xCF8/0xCFC (works on both `q35` and
//!   `pc`, needs no ECAM mapping) and the search for virtio-net functions.
//! - [`virtio_net`]: a poll-mode virtio-net driver on `virtio-drivers`' public
//!   [`Transport`](virtio_drivers::transport::Transport) and our own split virtqueue
//!   ([`virtqueue`]), whose RX descriptors are page_pool pages and whose TX is zero copy.
//!   With `VIRTIO_NET_F_MQ` ([`virtio_net::VirtioNet::new_mq`]) a device is split into one
//!   handle per queue pair, each owned by one core.
//! - [`sim`]: a simulated DD-bit NIC ([`sim::dd`], for [`ddnic`]) and a simulated virtio-net device on in-memory split rings (a transport that records
//!   the rings, a device player that serves them), for host tests of the driver and the guest's
//!   deterministic datapath benchmark; [`transport::PortTransport`] lets one driver type run on
//!   a PCI device or on it.
//!
//! `unsafe` here is confined to port I/O, to turning page frame numbers into the byte slices
//! the virtqueue shares with the device, and (in [`sim`]) to the simulated device reading and
//! writing ring memory and buffers through their physical addresses; each block names its
//! invariant.
#![no_std]

pub mod ddnic;
pub mod e1000e;
pub mod igb;
pub mod mmio;
pub mod nic;
pub mod pci;
pub mod sim;
pub mod transport;
pub mod uart;
pub mod virtio_net;
pub mod virtio_pci;
pub mod virtqueue;
