//! The kernel's [`Platform`]: how the dataplane reaches this machine (TSC, IPIs, the
//! virtio-net PCI driver, smoltcp, the `/metrics` text), and the one [`Fabric`] the forwarding
//! cores share.

use crate::arch::time::{rdtsc, uptime_ns};
use crate::arch::trap::WAKE_VECTOR;
use crate::control::commands::{system_snap, BootFacts};
use crate::control::mgmt::{Mgmt, MgmtCounters};
use crate::control::stats::write_prometheus;
use crate::setup::Nic;
use crate::smp::{send_ipi, IpiTarget};
use unikernel::dataplane::snap::PairSnap;
use unikernel::dataplane::{Core, Fabric, Platform};

/// Everything the forwarding cores share.
pub static FABRIC: Fabric = Fabric::new();

/// Boot facts the control plane prints (set once by the boot CPU before forwarding starts).
pub static FACTS: spin::Once<BootFacts> = spin::Once::new();

/// The kernel as the dataplane's platform.
pub struct KernelPlatform;

/// A forwarding core in the kernel.
pub type KernelCore = Core<KernelPlatform>;

impl Platform for KernelPlatform {
    type Nic = Nic;
    type Mgmt = Mgmt;

    #[inline(always)]
    fn cycles() -> u64 {
        rdtsc()
    }

    #[inline]
    fn uptime_ns() -> u64 {
        uptime_ns()
    }

    fn relax() {
        crate::tlb::service();
        core::hint::spin_loop();
    }

    /// An IPI on the wake vector (rare: ARP learning, management frames, console requests).
    fn wake(k: usize) {
        send_ipi(IpiTarget::One(k), WAKE_VECTOR);
    }

    fn write_metrics(pairs: &[PairSnap], mgmt: &MgmtCounters, w: &mut dyn core::fmt::Write) {
        let Some(facts) = FACTS.get() else {
            return;
        };
        let mode = FABRIC_MODE.get().copied().unwrap_or(netstack::Mode::L2);
        let sys = system_snap(mode, FABRIC.queues(), facts);
        let _ = write_prometheus(pairs, &sys, Some(*mgmt), w);
    }
}

/// The forwarding mode, for `/metrics` (set with [`FACTS`]).
pub static FABRIC_MODE: spin::Once<netstack::Mode> = spin::Once::new();
