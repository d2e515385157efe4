//! Gannet's benchmark lab: the long-running benchmark commands and what they compare against,
//! on top of the `harness` crate (QEMU, the generator, the Linux peer).
//!
//! - [`bench_peer`]: Gannet's io/l2/router beside the Linux peer and DPDK testpmd
//!   ([`peer_dpdk`]) over the same generator, tables and plots; [`bench_burstin`] its burst-in
//!   variant;
//! - [`bench_mm`], [`bench_pool`]: the page allocator's and page_pool's figures (host benches
//!   and the guest's pool counters); [`bench_datapath`]: `bench sim`'s host twin under
//!   callgrind;
//! - [`report`]: the `cargo xtask bench` JSON record and result tables;
//! - [`search_dpdk`]: testpmd as a device under test of `bench --search --peer dpdk`;
//! - [`summary`]: BENCHMARKS.md's generated summary from `results/` (`cargo xtask report`),
//!   [`summary_plot`] its plots.
//!
//! # Map
//!
//! [`peer_dpdk`] builds on `harness::peer_linux`; [`bench_peer`] and [`search_dpdk`] on [`peer_dpdk`];
//! [`bench_burstin`] on [`bench_peer`]; [`bench_pool`] on [`report`]; [`summary_plot`] on [`summary`]; the rest on the harness
//! only. The `tests` crate never depends on this crate.

pub mod bench_burstin;
pub mod bench_datapath;
pub mod bench_mm;
pub mod bench_peer;
pub mod bench_pool;
pub mod peer_dpdk;
pub mod report;
pub mod search_dpdk;
pub mod summary;
pub mod summary_plot;
