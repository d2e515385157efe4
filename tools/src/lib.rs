//! Gannet host-side tools: the `cargo xtask` commands, the traffic generator and QEMU supervision.
//!
//! The integration tests (`tests` crate) use this library directly:
//! - [`qemu::Guest`] boots the image under QEMU and talks to its serial console;
//! - [`gen::run`] / [`gen::Generator`] offer traffic through QEMU's unix-datagram backend;
//! - [`gen::RawPort`] sends and receives single raw frames;
//! - [`tap::TapNet`] is the tap backend's network namespace with multi-queue tap devices;
//! - [`bench_sim`] runs the deterministic datapath benchmark (`sim=K`, simulated devices);
//!   [`bench_datapath`] is its host twin under callgrind.
//!
//! [`soak::run`] is `cargo xtask soak`: every mode at full rate with periodic STATS checks.
//!
//! `cargo xtask lint` is [`lint::run`] (fmt, clippy on host and metal, module import cycles).
//!
//! # Map
//!
//! [`setup`] (rustup target/components, Debian packages) and [`qemu`] (command lines, the
//! guest's serial console, STATS parsed into `netstack::stats::Stats`) are the base; [`gen`],
//! [`tap`] and [`peer_linux`] build on them, [`peer_dpdk`] on [`peer_linux`]; the `bench_*` modules ([`bench_burstin`] on [`bench_peer`]), [`soak`] (on [`bench_peer`]'s `--append` per mode) and [`report`] on those;
//! [`mtu`] (the `--mtu` values) is a leaf every one of them may use; [`lint`] stands alone. The `xtask` binary only parses arguments and calls these.

pub mod bench_boot;
pub mod bench_burstin;
pub mod bench_datapath;
pub mod bench_mm;
pub mod bench_peer;
pub mod bench_pool;
pub mod bench_sim;
pub mod bench_tlb;
pub mod faults;
pub mod fuzz;
pub mod gen;
pub mod hosts;
pub mod iso;
pub mod lint;
pub mod mtu;
pub mod peer_dpdk;
pub mod peer_linux;
pub mod qemu;
pub mod report;
pub mod setup;
pub mod soak;
pub mod tap;
