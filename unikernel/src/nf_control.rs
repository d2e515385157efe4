//! The negative control of the no-indirect-call check (`harness::nocall`, issue 33 item 2),
//! compiled only with the cargo feature `nf-indirect-control`: an NF that reaches its per-frame
//! work through a type-erased `&mut dyn FnMut`, as a boxed closure would (the kernel has no
//! heap, so a reference stands in for the `Box`). The poll loop (`run::poll_loop`) runs it
//! through `Core::poll_nf` instead of `Core::poll_once`, so `poll_nf` makes one indirect call
//! per frame, which the check must report. The image is read by the check, never booted.

use unikernel::dataplane::nf::{NetworkFunction, Packet, Verdict};

/// A network function whose `process` calls a `dyn FnMut` it was handed: the shape the NF API
/// forbids (an indirect call per frame).
pub struct Erased<'a> {
    /// The per-frame work, type-erased.
    per_frame: &'a mut dyn FnMut(&mut Packet<'_>) -> Verdict,
}

impl NetworkFunction for Erased<'_> {
    const NAME: &'static str = "erased";

    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        (self.per_frame)(pkt)
    }
}

/// One poll iteration of `core` with the type-erased NF (forwarding every frame, as `io`).
/// `black_box` keeps the compiler from seeing which closure is behind the `dyn` (LLVM could
/// otherwise devirtualise the call, and the control would show nothing).
pub fn poll<P: unikernel::dataplane::Platform>(core: &mut unikernel::dataplane::Core<P>) -> usize {
    let mut forward = |_: &mut Packet<'_>| Verdict::Forward;
    let mut nf = Erased {
        per_frame: core::hint::black_box(&mut forward),
    };
    core.poll_nf(&mut nf)
}
