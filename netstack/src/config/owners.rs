//! Every command-line key, by owner ([`KEY_SETS`]): the kernel's own and the management
//! plane's ([`super::keys`]), then each stock network function's, declared beside its settings
//! ([`super::l2`], [`super::router`], [`super::nat`], [`super::firewall`], the `PUT` token).
//! [`super::Config::parse`] looks a key up here by name (never by position) and refuses a key
//! whose owner is a network function other than the one `mode=` selects
//! ([`super::ConfigError::Misplaced`]); an image's own network function declares its keys
//! with the same [`super::keys::Key`] ([`super::nf_keys`]).

use super::keys::{self, KeySet, Owner};
use super::{firewall, l2, nat, router};

/// Every key set: the kernel's first.
pub const KEY_SETS: &[KeySet] = &[
    keys::KERNEL_SET,
    keys::MGMT_SET,
    l2::PEER_SET,
    l2::XCORE_SET,
    router::KEY_SET,
    keys::PUT_SET,
    nat::KEY_SET,
    firewall::KEY_SET,
];

/// Keys in all: the length of [`super::Config::parse`]'s "seen" table.
pub const KEY_COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < KEY_SETS.len() {
        n += KEY_SETS[i].count;
        i += 1;
    }
    n
};

/// Where a key is: its set and its index in the set.
#[derive(Copy, Clone)]
pub struct Found {
    /// Its index among all keys (the kernel's first, in [`KEY_SETS`] order).
    pub index: usize,
    /// Its set.
    pub set: &'static KeySet,
    /// Its index in the set.
    pub at: usize,
    /// Whether it may repeat.
    pub repeat: bool,
}

impl Found {
    /// Its owner.
    pub fn owner(&self) -> Owner {
        self.set.owner
    }
}

/// The key named `name`, if any owner declares it.
pub fn lookup(name: &str) -> Option<Found> {
    let mut index = 0;
    for set in KEY_SETS {
        for at in 0..set.count {
            let (n, repeat) = set.table.key(at);
            if n == name {
                return Some(Found {
                    index,
                    set,
                    at,
                    repeat,
                });
            }
            index += 1;
        }
    }
    None
}
