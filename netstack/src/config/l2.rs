//! The stock forwarders' keys: the next hop's MAC behind each port (`peer0=`, `peer1=`: `l2`'s
//! and `nat`'s, which write it as each frame's destination) and `xcore=` (`io`'s and `l2`'s:
//! frames to the next core's pair).

use super::keys::{no_check, on_off, Key, KeyError, KeySet, Owned, Owner};
use super::{Mode, PORTS};
use crate::MacAddr;

/// `peer0=MAC`, `peer1=MAC`.
const PEER_KEYS: &[Key<[MacAddr; PORTS]>] = &[
    Key::new("peer0", |p, v| {
        p[0] = peer(v)?;
        Ok(())
    }),
    Key::new("peer1", |p, v| {
        p[1] = peer(v)?;
        Ok(())
    }),
];

/// `peerN=`: a MAC address.
fn peer(v: &str) -> Result<MacAddr, KeyError> {
    MacAddr::parse(v).ok_or(KeyError::Expected("a MAC like 02:00:00:00:0a:02"))
}

/// `l2`'s and `nat`'s keys: the peers' MACs ([`super::Config::peer`]).
pub const PEER_SET: KeySet = KeySet::new(
    Owner::Nf(&[Mode::L2, Mode::Nat]),
    &Owned {
        keys: PEER_KEYS,
        settings: |c| &mut c.peer,
        check: no_check,
    },
);

/// `io`'s and `l2`'s key: `xcore=on|off` ([`super::Config::xcore`]).
pub const XCORE_SET: KeySet = KeySet::new(
    Owner::Nf(&[Mode::Io, Mode::L2]),
    &Owned {
        keys: &[Key::new("xcore", |x, v| {
            *x = on_off(v)?;
            Ok(())
        })],
        settings: |c| &mut c.xcore,
        check: no_check,
    },
);
