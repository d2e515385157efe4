//! The control plane: the serial console and its commands, STATS and `/metrics` formatted from
//! snapshots only, and the management plane (smoltcp) on a router port.
//!
//! Depends on the dataplane's public interface (snapshots, [`crate::dataplane::Core`]'s
//! accessors), [`crate::arch`], [`crate::smp`] and [`crate::percpu`]; nothing below calls it.

pub mod commands;
pub mod console;
pub mod faults;
pub mod mgmt;
pub mod stats;
