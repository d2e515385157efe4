//! `mode=firewall`'s settings: the connection-tracking firewall's table size and timeouts
//! ([`FirewallSettings`], read by the kernel's firewall network function); the values are
//! parsed as the NAT's (`super::nat::parse_sessions`, `super::nat::parse_timeouts`).

use crate::conntrack::Timeouts;

/// Default connections tracked per forwarding core (`fw_sessions=`): 16,384 take 1.1 MiB
/// (64 bytes an entry plus a 4-byte bucket).
pub const DEFAULT_FW_SESSIONS: u32 = 16_384;

/// The firewall's settings from the command line (`mode=firewall`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct FirewallSettings {
    /// `fw_sessions=N` (1..=`super::nat::MAX_SESSIONS`, default [`DEFAULT_FW_SESSIONS`]):
    /// connection table entries per forwarding core, allocated at boot.
    pub sessions: u32,
    /// `fw_timeouts=EST,TRANS,UDP,ICMP` (seconds, each 1..=86400; default
    /// [`Timeouts::default`]).
    pub timeouts: Timeouts,
}

impl Default for FirewallSettings {
    fn default() -> FirewallSettings {
        FirewallSettings {
            sessions: DEFAULT_FW_SESSIONS,
            timeouts: Timeouts::default(),
        }
    }
}
