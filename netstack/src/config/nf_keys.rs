//! A network function's own command-line keys: what an image of one's own
//! (`unikernel::main!(MyNf)`) accepts beyond the kernel's keys.
//!
//! The NF declares a table of [`NfKey`]s (`NetworkFunction::keys` in the unikernel's NF API;
//! the kernel reaches them through [`NfKeySet`], so a composition answers for its parts),
//! each with its own parser that stores the value in the NF's per-core state. At boot the kernel
//! parses the whole line once with [`Config::parse_with`], which checks the NF's keys by name
//! after its own (an unknown key, a repeat, a bad value is a [`ConfigError`] naming the key,
//! before any core starts) and returns the NF's tokens ([`NfArgs`]); each forwarding core then
//! makes its NF and applies those tokens to it with [`apply`], which cannot fail once the boot's
//! parse passed. (They are kept beside the [`Config`], not in it: the configuration is part of
//! every core's state, whose layout the per-frame loops' code depends on.)
//!
//! In an image of one's own, the stock network functions' keys (`peer0`, `route`, …) configure
//! nothing and are refused by name ([`ConfigError::StockKey`]); `mode=` stays (it picks the
//! deterministic benchmark's default frames).

use super::keys::{self, Key};
use super::owners;
use super::{key_error, Config, ConfigError};

/// Longest [`NfArgs`] (bytes).
pub const NF_ARGS_MAX: usize = 1024;

/// The tokens (`key=value`, space-separated, in order) of the keys the image's own network
/// function declares, for each forwarding core to [`apply`] to its NF.
pub type NfArgs = heapless::String<NF_ARGS_MAX>;

/// One key a network function declares: the kernel's own [`Key`] type (its name as written
/// before `=`, lowercase `[a-z0-9_.]` and not one of the kernel's or the stock NFs' keys;
/// whether it may repeat; its parser, which stores the value in the NF's state `C`, the NF
/// itself, or says what the key takes, [`keys::KeyError::Expected`]).
///
/// ```
/// use netstack::config::keys::KeyError;
/// use netstack::config::nf_keys::NfKey;
///
/// struct Filter { port: u16 }
/// const KEYS: &[NfKey<Filter>] = &[NfKey::new("blocked_port", |f, v| {
///     f.port = v.parse().map_err(|_| KeyError::Expected("a port number in 0..=65535"))?;
///     Ok(())
/// })];
/// # let mut f = Filter { port: 0 };
/// # (KEYS[0].parse)(&mut f, "5000").unwrap();
/// # assert_eq!(f.port, 5000);
/// ```
pub type NfKey<C> = Key<C>;

/// A network function's keys as the kernel looks them up: by name, parsed into its state. One
/// NF's table over its state is a [`KeyTable`]; a composition of NFs (the unikernel's
/// `nf::Chain`) answers for the keys of both its parts.
pub trait NfKeySet {
    /// The key named `name`, if it is one of these: its name as declared and whether it may
    /// repeat.
    fn find(&self, name: &str) -> Option<(&'static str, bool)>;
    /// Parse `value` for key `name` (one [`NfKeySet::find`] knows; another changes nothing)
    /// into the state.
    ///
    /// # Errors
    /// The key's parser's [`keys::KeyError`].
    fn parse(&mut self, name: &str, value: &str) -> Result<(), keys::KeyError>;
    /// Call `each` with every key's name, in order.
    fn names(&self, each: &mut dyn FnMut(&'static str));
}

/// One network function's key table over its state.
pub struct KeyTable<'n, C: ?Sized> {
    /// Its keys.
    pub keys: &'n [NfKey<C>],
    /// The state the values are parsed into.
    pub state: &'n mut C,
}

impl<C: ?Sized> NfKeySet for KeyTable<'_, C> {
    fn find(&self, name: &str) -> Option<(&'static str, bool)> {
        self.keys
            .iter()
            .find(|k| k.name == name)
            .map(|k| (k.name, k.repeat))
    }

    fn parse(&mut self, name: &str, value: &str) -> Result<(), keys::KeyError> {
        match self.keys.iter().find(|k| k.name == name) {
            Some(k) => (k.parse)(self.state, value),
            None => Ok(()),
        }
    }

    fn names(&self, each: &mut dyn FnMut(&'static str)) {
        for k in self.keys {
            each(k.name);
        }
    }
}

/// The image's network function for [`Config::parse_with`]: its name (for errors) and its
/// keys over a state to check their values against (the boot's parse checks them on a
/// throwaway instance; every core applies them to its own with [`apply`]).
pub struct NfKeys<'n> {
    /// The NF's name (`NetworkFunction::NAME`).
    pub nf: &'static str,
    /// Its keys, over the state the values are parsed into.
    pub keys: &'n mut dyn NfKeySet,
}

/// Apply the NF keys of `args` (whitespace-separated `key=value` tokens; others are skipped)
/// through `keys` (into their state), in order: what a forwarding core does with the
/// [`NfArgs`] once [`Config::parse_with`] accepted them.
///
/// # Errors
/// [`ConfigError::BadValue`] (or `Repeated`) naming the first key its parser refuses.
pub fn apply<'a>(args: &'a str, keys: &mut dyn NfKeySet) -> Result<(), ConfigError<'a>> {
    for (i, tok) in args.split_ascii_whitespace().enumerate() {
        let Some((key, value)) = tok.split_once('=') else {
            continue;
        };
        let Some((_, repeat)) = keys.find(key) else {
            continue;
        };
        if !repeat && given_before(args, i, key) {
            return Err(ConfigError::Repeated(key));
        }
        keys.parse(key, value)
            .map_err(|e| key_error(key, value, e))?;
    }
    Ok(())
}

/// Whether one of the first `n` tokens of `line` is key `key`.
fn given_before(line: &str, n: usize, key: &str) -> bool {
    line.split_ascii_whitespace()
        .take(n)
        .any(|t| t.split_once('=').map(|(k, _)| k) == Some(key))
}

impl Config {
    /// [`Config::parse`] for an image whose network function has keys of its own (`nf`): a
    /// key the kernel does not know is looked up among the NF's keys, parsed into `nf.state`
    /// and kept in the [`NfArgs`] returned beside the configuration; the stock network
    /// functions' keys are refused. `None` is the stock image ([`Config::parse`]: no
    /// arguments).
    ///
    /// # Errors
    /// As [`Config::parse`], and [`ConfigError::StockKey`] for a stock NF's key in an image
    /// of one's own, [`ConfigError::NfKeyShadowed`] for an NF key the kernel owns, and
    /// [`ConfigError::TooLong`] when the NF's tokens pass [`NF_ARGS_MAX`].
    pub fn parse_with<'a>(
        cmdline: &'a str,
        nf: Option<NfKeys<'_>>,
    ) -> Result<(Config, NfArgs), ConfigError<'a>> {
        if let Some(nf) = &nf {
            let mut shadowed = None;
            nf.keys.names(&mut |k| {
                if shadowed.is_none() && owners::lookup(k).is_some() {
                    shadowed = Some(k);
                }
            });
            if let Some(key) = shadowed {
                return Err(ConfigError::NfKeyShadowed { key, nf: nf.nf });
            }
        }
        let mut nf = nf;
        let mut args = NfArgs::new();
        let stock = nf.is_none();
        let cfg = Config::parse_tokens(cmdline, stock, |i, tok, key, value, owner| {
            let Some(nf) = nf.as_mut() else {
                return match owner {
                    Some(_) => Ok(false),
                    None => Err(ConfigError::UnknownKey(key)),
                };
            };
            match owner {
                Some(keys::Owner::Kernel | keys::Owner::Put(_)) => Ok(false),
                Some(keys::Owner::Nf(modes)) => Err(ConfigError::StockKey {
                    key,
                    modes,
                    nf: nf.nf,
                }),
                None => {
                    let (_, repeat) = nf.keys.find(key).ok_or(ConfigError::UnknownKey(key))?;
                    if !repeat && given_before(cmdline, i, key) {
                        return Err(ConfigError::Repeated(key));
                    }
                    nf.keys
                        .parse(key, value)
                        .map_err(|e| key_error(key, value, e))?;
                    let sep = if args.is_empty() { "" } else { " " };
                    args.push_str(sep)
                        .and_then(|()| args.push_str(tok))
                        .map_err(|_| ConfigError::TooLong {
                            key,
                            max: NF_ARGS_MAX,
                        })?;
                    Ok(true)
                }
            }
        })?;
        Ok((cfg, args))
    }
}
