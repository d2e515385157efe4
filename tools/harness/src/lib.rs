//! Gannet's test harness: what boots the image, feeds it frames and checks what comes back,
//! and everything an integration test (`tests` crate) runs.
//!
//! - [`qemu::Guest`] boots the image under QEMU and talks to its serial console; [`qmp::Qmp`]
//!   to QEMU itself (the ACPI power button, `SHUTDOWN` events);
//! - [`gen::run`] / [`gen::Generator`] offer traffic through QEMU's unix-datagram backend;
//!   [`gen::RawPort`] sends and receives single raw frames;
//! - [`tap::TapNet`] is the tap backend's network namespace with multi-queue tap devices;
//!   [`hosts::Hosts`] puts Linux hosts (namespaces) behind the ports;
//! - [`libvirt`] runs appliances in series as libvirt domains (`cargo xtask libvirt`);
//! - [`peer_linux`] is the Linux peer guest of the differential test;
//! - [`bench_sim`] is the deterministic datapath benchmark (`sim=K`, simulated devices) the
//!   perf guard runs; [`bench_tlb`] the TLB shootdown run; [`bench_boot`] the boot-phase line;
//! - [`soak::run`] is `cargo xtask soak`, [`faults::run`] `cargo xtask faults`.
//! - [`rate`] (the open-loop, paced generator), [`search`] (NDR/PDR) and [`bench_search`] are
//!   `bench --search`; [`cross_check`] runs netsniff-ng's `trafgen` beside [`rate`] on tap.
//! - [`envelope`]: the one JSON envelope of every `--json`.
//! - [`progress`]: a bar on a terminal, a status line every few seconds elsewhere.
//! - [`appliance`]: a user's appliance crate from the template (`cargo xtask new`), built.
//! - [`elf`]: symbols of the kernel image (a guest sized from `__kernel_end`).
//! - [`nocall`]: no indirect call in the image's per-frame loop functions (`cargo xtask nocall`).
//!
//! # Map
//!
//! [`setup`] (rustup target/components, Debian packages) and [`qemu`] (command lines, the
//! guest's serial console, STATS parsed into `netstack::stats::Stats`) are the base; [`gen`],
//! [`tap`], [`hosts`], [`iso`], [`libvirt`] and [`peer_linux`] build on them ([`qmp`] is a leaf); [`bench_sim`], [`bench_tlb`],
//! [`bench_boot`], [`soak`] and [`faults`] on those. [`mtu`] (the `--mtu` values) and
//! [`append`] (a mode's kernel command line) are leaves every one of them may use.
//!
//! The benchmark lab (`lab`: the DPDK peer, peer benchmarks, plots, reports) and the
//! development loop (`xtask`) build on this crate; nothing here imports them.

pub mod append;
pub mod appliance;
pub mod bench_boot;
pub mod bench_search;
pub mod bench_sim;
pub mod bench_tlb;
pub mod cross_check;
pub mod elf;
pub mod envelope;
pub mod faults;
pub mod fib;
pub mod gen;
pub mod hosts;
pub mod iso;
pub mod libvirt;
pub mod mtu;
pub mod nocall;
pub mod peer_linux;
pub mod progress;
pub mod qemu;
pub mod qmp;
pub mod rate;
pub mod search;
pub mod setup;
pub mod soak;
pub mod tap;
