//! Fuzz harnesses of the `drivers` crate, shared by the targets in `fuzz_targets/`.

pub mod used_ring;
