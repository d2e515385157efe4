use super::*;
use crate::zone::tests::zone;

#[test]
fn bad_refill_is_an_error() {
    assert_eq!(
        PagePool::new(PagePoolParams { id: 1, refill: 0 }).err(),
        Some(PoolError::BadRefill(0))
    );
    assert!(PagePool::new(PagePoolParams::new(1)).is_ok());
    let _ = zone;
}
