//! Gannet device drivers.
//!
//! - [`uart`]: the 16550 UART on COM1, used for the boot log and the serial console.
//! - [`pci`]: PCI configuration access through I/O ports 0xCF8/0xCFC (works on both `q35` and
//!   `pc`, needs no ECAM mapping) and the search for virtio-net functions.
//! - [`virtio_net`]: a poll-mode virtio-net driver on `virtio-drivers`' public
//!   [`Transport`](virtio_drivers::transport::Transport) and our own split virtqueue
//!   ([`virtqueue`]), whose RX descriptors are page_pool pages and whose TX is zero copy.
//!   With `VIRTIO_NET_F_MQ` ([`virtio_net::VirtioNet::new_mq`]) a device is split into one
//!   handle per queue pair, each owned by one core.
//!
//! `unsafe` here is confined to port I/O and to turning page frame numbers into the byte slices
//! the virtqueue shares with the device; each block names its invariant.
#![no_std]

pub mod nic;
pub mod pci;
pub mod uart;
pub mod virtio_net;
pub mod virtqueue;
