//! The negative control of the no-indirect-call check (`harness::nocall`, issue 33 item 2),
//! compiled only with the cargo feature `nf-indirect-control`: an NF that reaches its per-frame
//! work through a type-erased `&mut dyn FnMut`, as a boxed closure would (the kernel has no
//! heap, so a reference stands in for the `Box`). The image is `main!(Control)`: the poll
//! loop runs it through `Core::poll_nf`, so `poll_nf` makes one indirect call per frame, which
//! the check must report. The image is read by the check, never booted.

use crate::appliance::Appliance;
use crate::dataplane::nf::{NetworkFunction, Packet, Verdict};
use crate::dataplane::{Core, Platform};

/// A network function whose `process` calls a `dyn FnMut` it was handed: the shape the NF API
/// forbids (an indirect call per frame).
pub struct Erased<'a> {
    /// The per-frame work, type-erased.
    per_frame: &'a mut dyn FnMut(&mut Packet<'_>) -> Verdict,
}

impl NetworkFunction for Erased<'_> {
    const NAME: &'static str = "erased";

    // Inlined as the API asks of `process`, so the indirect call lands in the loop itself.
    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        (self.per_frame)(pkt)
    }
}

/// The control's appliance: every poll iteration runs [`Erased`] over a closure forwarding
/// every frame (as `io`). `black_box` keeps the compiler from seeing which closure is behind
/// the `dyn` (LLVM could otherwise devirtualise the call, and the control would show nothing).
pub struct Control;

impl Appliance for Control {
    type PerCore = ();
    const NAME: &'static str = "erased";

    fn new_core<P: Platform>(_core: &Core<P>) {}

    fn poll<P: Platform>(_state: &mut (), core: &mut Core<P>) -> usize {
        let mut forward = |_: &mut Packet<'_>| Verdict::Forward;
        // Erased before `black_box`, so the box hides the vtable (not only the closure).
        let erased: &mut dyn FnMut(&mut Packet<'_>) -> Verdict = &mut forward;
        let mut nf = Erased {
            per_frame: core::hint::black_box(erased),
        };
        core.poll_nf(&mut nf)
    }
}

impl crate::appliance::IntoAppliance for Control {
    type Appliance = Control;
}
