//! [`Stash::release_all`]: the frames a [`Stash`] holds dropped through a [`Ctx`] (the type
//! itself is `dataplane::held`'s, below this API).

use super::{Ctx, Stash, StashHandle};
use crate::dataplane::percore::Platform;

impl<const N: usize> Stash<N> {
    /// Drop every frame it holds (counted as [`Ctx::drop`] counts), e.g. in
    /// [`NetworkFunction::release_all`](super::NetworkFunction::release_all) before `quit`.
    pub fn release_all<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        for i in 0..N {
            if let Some(h) = self.take(i as StashHandle) {
                ctx.drop(h);
            }
        }
    }
}
