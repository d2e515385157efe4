#![no_main]
//! `used_ring`: the hostile device of [`drivers_fuzz::used_ring`] against one-page RX buffers
//! (frames of several pages as mergeable chains, collected by the fused burst).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| drivers_fuzz::used_ring::run(data, 1));
