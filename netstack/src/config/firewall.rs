//! `mode=firewall`'s settings and keys ([`KEY_SET`]): the connection-tracking firewall's table
//! size and timeouts ([`FirewallSettings`], read by the kernel's firewall network function);
//! the values are parsed as the NAT's ([`super::nat::parse_sessions`],
//! [`super::nat::parse_timeouts`]).

use super::keys::{Key, KeyError, KeySet, Owned, Owner};
use super::nat::{parse_sessions, parse_timeouts};
use super::{Config, ConfigError, Mode, Queues};
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

/// `mode=firewall`'s keys.
const KEYS: &[Key<FirewallSettings>] = &[
    Key::new("fw_sessions", |f, v| {
        f.sessions = parse_sessions(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
    Key::new("fw_timeouts", |f, v| {
        f.timeouts = parse_timeouts(v).map_err(KeyError::Expected)?;
        Ok(())
    }),
];

/// The firewall's keys ([`FirewallSettings`], [`Config::fw`]); it runs one queue pair per port.
pub const KEY_SET: KeySet = KeySet::new(
    Owner::Nf(&[Mode::Firewall]),
    &Owned {
        keys: KEYS,
        settings: |c| &mut c.fw,
        check,
    },
);

/// Both directions of a connection must meet one core's table, and the firewall does not hand
/// frames between cores (the NAT does): one queue pair per port.
fn check(c: &Config) -> Result<(), ConfigError<'static>> {
    if matches!(c.queues, Queues::Count(n) if n > 1) {
        return Err(ConfigError::NotWith {
            key: "queues",
            because: "mode=firewall runs one queue pair per port (auto or 1): both directions of a connection must meet one core's table",
        });
    }
    Ok(())
}
