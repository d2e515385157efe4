//! Integration tests live in `tests/tests/`; this library is intentionally empty.
