//! The kernel's [`Platform`]: how the dataplane reaches this machine (TSC, IPIs, the
//! virtio-net PCI driver, smoltcp, the `/metrics` text), and the one [`Fabric`] the forwarding
//! cores share.

use crate::arch::time::{rdtsc, uptime_ns};
use crate::arch::trap::WAKE_VECTOR;
use crate::control::commands::{system_snap, BootFacts};
use crate::control::mgmt::{Mgmt, MgmtCounters};
use crate::control::stats::write_prometheus;
use crate::dataplane::snap::PairSnap;
use crate::dataplane::{Core, Fabric, LinearError, PageBuf, Platform};
use crate::mem::kmap::{LocalView, WINDOW_PAGES};
use crate::setup::Nic;
use crate::smp::{send_ipi, IpiTarget};
use core::marker::PhantomData;
use mm::PAGE_SIZE;

/// Everything the forwarding cores share.
pub static FABRIC: Fabric = Fabric::new();

/// Boot facts the control plane prints (set once by the boot CPU before forwarding starts).
pub static FACTS: spin::Once<BootFacts> = spin::Once::new();

/// The kernel as the dataplane's platform, its ports of NIC type `N`.
pub struct KernelPlatformOf<N>(PhantomData<N>);

/// The kernel as the dataplane's platform: virtio-net ports (PCI, MMIO or simulated).
pub type KernelPlatform = KernelPlatformOf<Nic>;

/// A forwarding core in the kernel.
pub type KernelCore = Core<KernelPlatform>;

impl<N: drivers::nic::Nic> Platform for KernelPlatformOf<N> {
    type Nic = N;
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

    /// A per-core view (`mem::kmap::LocalView`): the pages mapped read-only, in order, in
    /// this CPU's own window; the view is dropped (a local `invlpg` per page, no IPI) before
    /// this returns. The first failure to map is logged.
    fn with_linear(
        pages: &[PageBuf],
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LinearError> {
        let n = pages.len();
        let end = <Self::Nic as drivers::nic::Nic>::FRAME_OFFSET + len;
        // Every page but the last full, the last holding at least one byte.
        if n == 0 || n > WINDOW_PAGES || end > n * PAGE_SIZE || end <= (n - 1) * PAGE_SIZE {
            return Err(LinearError::Layout);
        }
        let mut pfns = [mm::Pfn(0); WINDOW_PAGES];
        for (slot, page) in pfns.iter_mut().zip(pages) {
            *slot = page.pfn();
        }
        let view = LocalView::map(&pfns[..n]).map_err(|e| {
            static LOGGED: core::sync::atomic::AtomicBool =
                core::sync::atomic::AtomicBool::new(false);
            if !LOGGED.swap(true, core::sync::atomic::Ordering::Relaxed) {
                log::warn!("mgmt: no per-core view for a {len}-byte frame ({n} pages): {e:?}");
            }
            LinearError::Map
        })?;
        f(&view.bytes()[<Self::Nic as drivers::nic::Nic>::FRAME_OFFSET..end]);
        Ok(())
    }

    fn write_metrics(pairs: &[PairSnap], mgmt: &MgmtCounters, w: &mut dyn core::fmt::Write) {
        let Some(facts) = FACTS.get() else {
            return;
        };
        let mode = FABRIC_MODE.get().copied().unwrap_or(netstack::Mode::L2);
        let sys = system_snap(mode, FABRIC.queues(), facts);
        let _ = write_prometheus(pairs, &sys, Some(mgmt), w);
    }
}

/// The forwarding mode, for `/metrics` (set with [`FACTS`]).
pub static FABRIC_MODE: spin::Once<netstack::Mode> = spin::Once::new();
