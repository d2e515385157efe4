#![no_main]
//! `dd_ring`: the hostile DD-bit NIC (the simulated e1000e, legacy descriptors, or the simulated
//! 82576, advanced ones: bit 0 of the first byte) of [`drivers_fuzz::dd_ring`].

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| drivers_fuzz::dd_ring::run(data));
