//! Fuzz harnesses of the `drivers` crate, shared by the targets in `fuzz_targets/`.

pub mod dd_ring;
pub mod used_ring;
