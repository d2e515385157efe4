use super::*;

#[test]
fn batchsize_matches_linux() {
    // 1 GiB zone: min(256, 256) / 4 = 64 -> rounddown_pow2(96) - 1 = 63.
    assert_eq!(zone_batchsize(262_144), 63);
    // 16 MiB zone: 4096 >> 10 = 4 -> 1 -> rounddown_pow2(1) - 1 = 0 -> at least 1.
    assert_eq!(zone_batchsize(4096), 1);
}
