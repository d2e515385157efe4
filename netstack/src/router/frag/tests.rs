//! Fragmenter tests.
