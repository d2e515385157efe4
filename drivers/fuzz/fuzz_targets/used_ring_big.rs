#![no_main]
//! `used_ring_big`: the hostile device of [`drivers_fuzz::used_ring`] against RX buffers of
//! three pages (`VirtioNet::set_rx_buffer_pages`, a 9,000-byte MTU's): one used element per
//! frame, re-posted in its indirect table.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| drivers_fuzz::used_ring::run(data, drivers_fuzz::used_ring::BIG));
