//! [`Chain`]: two network functions composed at compile time, the first a filter in front of
//! the second (an ACL in front of the router), as DPDK's graph library chains nodes — but
//! monomorphised: `Chain<A, B>::process` is `A::process` and `B::process` inlined one after
//! the other into the driver's fused loop, with no indirect call and no per-frame test of
//! which function comes next.

use super::{
    CounterDef, CounterValues, Ctx, FileError, KeyError, NetworkFunction, Packet, Verdict,
};
use crate::dataplane::percore::Platform;

/// `first`, then `second` for every frame `first` forwards.
///
/// Per frame: `first.process`; [`Verdict::Forward`] hands the frame, as `first` rewrote it,
/// to `second.process`, whose verdict is the frame's; any other verdict of `first` is final
/// (a [`Verdict::ForwardFirst`] is sent as cut, without `second`). `first` must be a filter
/// that never keeps frames (`A::TAKES == false`, checked at compile time): the kept frames,
/// [`NetworkFunction::end_of_burst`] and [`NetworkFunction::release_all`] are `second`'s.
/// [`NetworkFunction::tick`] runs both (`first`'s first: a rule set switched before the
/// second's timers).
///
/// Name and counters: those of the one of the two that declares counters (at most one may,
/// checked at compile time; with none, `second`'s name), so an ACL in front of the router
/// keeps `gannet_nf_acl_…` in `/metrics`. `MIN_FRAME` is the larger of the two; `CLOCK` and
/// `EVERY_BURST` are either's. Its keys and files are its parts' ([`NetworkFunction::find_key`],
/// [`NetworkFunction::find_file`]): `first`'s then `second`'s, one both declare given to both.
///
/// Cost: the two `process` bodies plus one compare of `first`'s verdict per frame (`bench
/// sim` `acl-router`, README).
#[derive(Debug, Default)]
pub struct Chain<A, B> {
    /// The filter in front.
    pub first: A,
    /// The function behind it.
    pub second: B,
}

/// `F` with its counters left out (no [`NetworkFunction::COUNTERS`]), everything else its
/// own: a filter that keeps its counts where it keeps them (the ACL's per-rule hits in its
/// shared table, which the console's `acl` prints) in front of an NF that declares counters,
/// which a [`Chain`] allows to only one of the two (the firewall behind the ACL).
#[derive(Debug, Default)]
pub struct Quiet<F>(pub F);

impl<F: NetworkFunction> NetworkFunction for Quiet<F> {
    const NAME: &'static str = F::NAME;
    const MIN_FRAME: usize = F::MIN_FRAME;
    const EVERY_BURST: bool = F::EVERY_BURST;
    const TAKES: bool = F::TAKES;
    const CLOCK: bool = F::CLOCK;
    const HANDS_OFF: bool = F::HANDS_OFF;

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        self.0.process(pkt)
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.0.end_of_burst(ctx);
    }

    fn handed<P: Platform>(&mut self, h: super::Held, ctx: &mut Ctx<'_, P>) {
        self.0.handed(h, ctx);
    }

    fn tx_refused(&mut self) {
        self.0.tx_refused();
    }

    fn keep_lost(&mut self, mark: u16) {
        self.0.keep_lost(mark);
    }

    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.0.tick(ctx);
    }

    fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.0.release_all(ctx);
    }

    fn find_key(name: &str) -> Option<(&'static str, bool)>
    where
        Self: Sized + 'static,
    {
        F::find_key(name)
    }

    fn set_key(&mut self, name: &str, value: &str) -> Result<(), KeyError>
    where
        Self: Sized + 'static,
    {
        self.0.set_key(name, value)
    }

    fn key_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        F::key_names(each);
    }

    fn find_file(name: &str) -> Option<&'static str>
    where
        Self: Sized + 'static,
    {
        F::find_file(name)
    }

    fn read_file(&mut self, name: &str, text: &str) -> Result<(), FileError>
    where
        Self: Sized + 'static,
    {
        self.0.read_file(name, text)
    }

    fn file_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        F::file_names(each);
    }
}

impl<A, B> Chain<A, B> {
    /// `first` in front of `second`.
    pub const fn new(first: A, second: B) -> Chain<A, B> {
        Chain { first, second }
    }
}

impl<A: NetworkFunction, B: NetworkFunction> NetworkFunction for Chain<A, B> {
    const NAME: &'static str = if B::COUNTERS.is_empty() && !A::COUNTERS.is_empty() {
        A::NAME
    } else {
        B::NAME
    };
    const MIN_FRAME: usize = if A::MIN_FRAME > B::MIN_FRAME {
        A::MIN_FRAME
    } else {
        B::MIN_FRAME
    };
    const EVERY_BURST: bool = A::EVERY_BURST || B::EVERY_BURST;
    const TAKES: bool = {
        assert!(
            !A::TAKES,
            "Chain<A, B>: the first function must not keep frames (TAKES = false)"
        );
        assert!(
            A::COUNTERS.is_empty() || B::COUNTERS.is_empty(),
            "Chain<A, B>: at most one of the two may declare counters"
        );
        B::TAKES
    };
    const CLOCK: bool = A::CLOCK || B::CLOCK;
    const HANDS_OFF: bool = B::HANDS_OFF;
    const COUNTERS: &'static [CounterDef] = if B::COUNTERS.is_empty() {
        A::COUNTERS
    } else {
        B::COUNTERS
    };

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        match self.first.process(pkt) {
            Verdict::Forward => self.second.process(pkt),
            v => v,
        }
    }

    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.second.end_of_burst(ctx);
    }

    /// `second`'s: only `second` keeps frames, so only it hands them to other cores.
    fn handed<P: Platform>(&mut self, h: super::Held, ctx: &mut Ctx<'_, P>) {
        self.second.handed(h, ctx);
    }

    /// `second`'s: a frame reaches a TX ring forwarded by `second` (the filter in front
    /// forwards only by handing the frame on).
    fn tx_refused(&mut self) {
        self.second.tx_refused();
    }

    /// `second`'s: only `second` keeps frames (`first` is a filter).
    fn keep_lost(&mut self, mark: u16) {
        self.second.keep_lost(mark);
    }

    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.first.tick(ctx);
        self.second.tick(ctx);
    }

    fn counters(&self, out: &mut CounterValues) {
        if B::COUNTERS.is_empty() {
            self.first.counters(out);
        } else {
            self.second.counters(out);
        }
    }

    fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.second.release_all(ctx);
    }

    /// `first`'s key, else `second`'s.
    fn find_key(name: &str) -> Option<(&'static str, bool)>
    where
        Self: Sized + 'static,
    {
        A::find_key(name).or_else(|| B::find_key(name))
    }

    /// Into each part that declares the key (a key both declare sets both).
    fn set_key(&mut self, name: &str, value: &str) -> Result<(), KeyError>
    where
        Self: Sized + 'static,
    {
        if A::find_key(name).is_some() {
            self.first.set_key(name, value)?;
        }
        if B::find_key(name).is_some() {
            self.second.set_key(name, value)?;
        }
        Ok(())
    }

    /// `first`'s keys, then those of `second` that `first` does not have.
    fn key_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        A::key_names(each);
        B::key_names(&mut |k| {
            if A::find_key(k).is_none() {
                each(k);
            }
        });
    }

    /// `first`'s file, else `second`'s.
    fn find_file(name: &str) -> Option<&'static str>
    where
        Self: Sized + 'static,
    {
        A::find_file(name).or_else(|| B::find_file(name))
    }

    /// Into each part that declares the file (a file both declare is read by both).
    fn read_file(&mut self, name: &str, text: &str) -> Result<(), FileError>
    where
        Self: Sized + 'static,
    {
        if A::find_file(name).is_some() {
            self.first.read_file(name, text)?;
        }
        if B::find_file(name).is_some() {
            self.second.read_file(name, text)?;
        }
        Ok(())
    }

    /// `first`'s files, then those of `second` that `first` does not have.
    fn file_names(each: &mut dyn FnMut(&'static str))
    where
        Self: Sized + 'static,
    {
        A::file_names(each);
        B::file_names(&mut |f| {
            if A::find_file(f).is_none() {
                each(f);
            }
        });
    }
}
