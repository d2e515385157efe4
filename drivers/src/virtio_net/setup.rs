//! Bringing a virtio-net device up and talking to it outside the rings: feature negotiation
//! (§5.1.3, §6), the device's MAC and MTU (§5.1.4), queue pairs (§5.1.6.5.5), doorbells
//! (§4.1.4.4) and kicks, interrupt suppression, reset.

use super::{
    ctrl_queue_index, rx_queue_index, tx_queue_index, DriverStats, Hal, QueueError, RxChain,
    SplitQueue, Transport, TxSlot, VirtioNet, CONFIG_MAX_VQ_PAIRS, CONFIG_MTU, CTRL_QUEUE_SIZE,
    MAX_FRAME_LEN, MAX_MULTI_FRAME_LEN, MAX_QUEUE_PAIRS, NO_PAGE, QUEUE_SIZE, RX, RX_QUEUE, TX,
    TX_QUEUE, VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, VIRTIO_NET_OK, VQ_PAIRS_MAX,
};

bitflags::bitflags! {
    /// Feature bits this driver knows (§5.1.3 device-specific, §6 reserved).
    #[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
    pub struct NetFeatures: u64 {
        /// §5.1.3 VIRTIO_NET_F_MTU: device reports a maximum MTU.
        const MTU = 1 << 3;
        /// §5.1.3 VIRTIO_NET_F_MAC: device has a MAC address in config space.
        const MAC = 1 << 5;
        /// §5.1.3 VIRTIO_NET_F_MRG_RXBUF: a received frame may span several buffers; with it the
        /// driver sees (and counts) frames too big for one page instead of the device dropping
        /// them silently.
        const MRG_RXBUF = 1 << 15;
        /// §5.1.3 VIRTIO_NET_F_STATUS: link status in config space.
        const STATUS = 1 << 16;
        /// §5.1.3 VIRTIO_NET_F_CTRL_VQ: control virtqueue.
        const CTRL_VQ = 1 << 17;
        /// §5.1.3 VIRTIO_NET_F_MQ: multiple queue pairs.
        const MQ = 1 << 22;
        /// §6 VIRTIO_F_INDIRECT_DESC.
        const RING_INDIRECT_DESC = 1 << 28;
        /// §6 VIRTIO_F_EVENT_IDX: notification suppression by index (§2.7.7, §2.7.10).
        const RING_EVENT_IDX = 1 << 29;
        /// §6 VIRTIO_F_VERSION_1: modern device.
        const VERSION_1 = 1 << 32;
        /// §6 VIRTIO_F_ACCESS_PLATFORM: the device reaches memory through a platform IOMMU
        /// (QEMU `iommu_platform=on`); buffer addresses must be IOMMU (bus) addresses, not
        /// physical ones. Not supported: such a device is refused.
        const ACCESS_PLATFORM = 1 << 33;
    }
}

/// `NetFeatures` as the boot log prints them: the names of the set bits this driver knows,
/// joined by `|` (`MAC|MRG_RXBUF|RING_EVENT_IDX|VERSION_1`), without the `Debug` wrapper and
/// spaces (each byte of boot log is a host write under QEMU's 16550: docs/benchmarks-journal.md, "Boot time,
/// fifth pass"). Bits without a name here are not printed; `{:#x}` of `bits()` shows them.
#[derive(Copy, Clone, Debug)]
pub struct FeatureNames(pub NetFeatures);

impl core::fmt::Display for FeatureNames {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, (name, _)) in self.0.iter_names().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// What the driver asks for. `VIRTIO_F_INDIRECT_DESC` (§2.7.5.3) for frames of several
/// pages on TX: each takes one ring descriptor and one avail slot, its pages in a
/// preallocated table of that descriptor ([`crate::virtqueue::Indirect`]), so the TX ring
/// stays in in-order mode. Not checksum or GSO offloads (frames are forwarded as received,
/// fully checksummed).
pub const DRIVER_FEATURES: NetFeatures = NetFeatures::MAC
    .union(NetFeatures::MTU)
    .union(NetFeatures::MRG_RXBUF)
    .union(NetFeatures::RING_INDIRECT_DESC)
    .union(NetFeatures::RING_EVENT_IDX)
    .union(NetFeatures::VERSION_1);

/// Why the device could not be brought up.
#[derive(Debug)]
pub enum NetInitError {
    /// The device does not offer VIRTIO_F_VERSION_1 (legacy-only devices are not supported).
    NotModern,
    /// The device offers VIRTIO_F_ACCESS_PLATFORM (§6.1: it accesses memory through an IOMMU,
    /// QEMU `iommu_platform=on`). This driver hands the device physical addresses and has no
    /// IOMMU mappings, so the device could never reach its buffers (§6.1: a device MAY fail
    /// FEATURES_OK when the feature is not accepted): refused before any set-up.
    AccessPlatform,
    /// The device's queue `queue` is smaller than [`QUEUE_SIZE`] (`max` descriptors).
    QueueTooSmall {
        /// Virtqueue index.
        queue: u16,
        /// Largest size the device accepts.
        max: u32,
    },
    /// Setting up virtqueue `queue` failed.
    Queue {
        /// Virtqueue index.
        queue: u16,
        /// What failed.
        err: QueueError,
    },
    /// Reading the MAC from config space failed.
    Config(virtio_drivers::Error),
    /// Multi-queue was asked for but the device does not offer both `VIRTIO_NET_F_MQ` and
    /// `VIRTIO_NET_F_CTRL_VQ` (QEMU: `-netdev tap,…,queues=N` with N > 1 and
    /// `-device virtio-net-pci,mq=on`).
    NoMultiQueue {
        /// Feature bits the device offered.
        offered: u64,
    },
    /// More queue pairs were asked for than the device (`max_virtqueue_pairs`, §5.1.4) or this
    /// driver ([`MAX_QUEUE_PAIRS`]) supports, or zero.
    BadPairCount {
        /// Pairs asked for.
        asked: u16,
        /// The most that can be had: min(device's `max_virtqueue_pairs`, [`MAX_QUEUE_PAIRS`]).
        max: u16,
    },
    /// The control virtqueue could not take the command (no free descriptors or no DMA page).
    CtrlQueueFull,
    /// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` was not answered before the caller's timeout.
    CtrlTimeout {
        /// Pairs the command asked for.
        pairs: u16,
    },
    /// The device answered `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` with an ack other than
    /// [`VIRTIO_NET_OK`] (`VIRTIO_NET_ERR` = 1).
    CtrlNak {
        /// Pairs the command asked for.
        pairs: u16,
        /// The ack byte the device wrote.
        ack: u8,
    },
}

impl core::fmt::Display for NetInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotModern => write!(f, "device does not offer VIRTIO_F_VERSION_1"),
            Self::AccessPlatform => write!(
                f,
                "device offers VIRTIO_F_ACCESS_PLATFORM (DMA through an IOMMU, QEMU \
                 iommu_platform=on), which this driver does not support"
            ),
            Self::QueueTooSmall { queue, max } => write!(
                f,
                "virtqueue {queue} holds at most {max} descriptors, driver needs {QUEUE_SIZE}"
            ),
            // A boot in too little RAM ends here: say so, and what to do, as the kernel's own
            // memory errors do.
            Self::Queue {
                queue,
                err: QueueError::NoMemory,
            } => write!(
                f,
                "memory error: virtqueue {queue}: no DMA memory for its ring: give the guest at least 1 MiB more memory (QEMU -m)"
            ),
            Self::Queue { queue, err } => write!(f, "virtqueue {queue} setup failed: {err:?}"),
            Self::Config(e) => write!(f, "config space read failed: {e}"),
            Self::NoMultiQueue { offered } => write!(
                f,
                "multi-queue needs VIRTIO_NET_F_MQ and VIRTIO_NET_F_CTRL_VQ; device offers {offered:#x}"
            ),
            Self::BadPairCount { asked, max } => {
                write!(f, "{asked} queue pairs asked for; 1..={max} available")
            }
            Self::CtrlQueueFull => write!(f, "control virtqueue: no room for the command"),
            Self::CtrlTimeout { pairs } => write!(
                f,
                "control virtqueue: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET({pairs}) not acknowledged in time"
            ),
            Self::CtrlNak { pairs, ack } => write!(
                f,
                "control virtqueue: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET({pairs}) refused (ack {ack})"
            ),
        }
    }
}

/// The device's MAC (§5.1.4: `mac` is the first field of `virtio_net_config`, valid when
/// `VIRTIO_NET_F_MAC` was negotiated), or all zeros without it.
pub(in crate::virtio_net) fn read_mac<T: Transport>(
    transport: &T,
    features: NetFeatures,
) -> Result<[u8; 6], NetInitError> {
    if !features.contains(NetFeatures::MAC) {
        return Ok([0; 6]);
    }
    transport
        .read_config_space::<[u8; 6]>(0)
        .map_err(NetInitError::Config)
}

/// The device's MTU (§5.1.4 `mtu`, bytes of IP datagram, no Ethernet header), valid when
/// `VIRTIO_NET_F_MTU` was negotiated (§5.1.3: QEMU `host_mtu=N`), else `None`.
pub(in crate::virtio_net) fn read_mtu<T: Transport>(
    transport: &T,
    features: NetFeatures,
) -> Result<Option<u16>, NetInitError> {
    if !features.contains(NetFeatures::MTU) {
        return Ok(None);
    }
    transport
        .read_config_space::<u16>(CONFIG_MTU)
        .map(|m| Some(u16::from_le(m)))
        .map_err(NetInitError::Config)
}

/// The feature bits a device must offer ([`NetFeatures::VERSION_1`]) and must not
/// ([`NetFeatures::ACCESS_PLATFORM`]) before the driver touches it.
pub(in crate::virtio_net) fn check_offered(offered: NetFeatures) -> Result<(), NetInitError> {
    if !offered.contains(NetFeatures::VERSION_1) {
        return Err(NetInitError::NotModern);
    }
    if offered.contains(NetFeatures::ACCESS_PLATFORM) {
        return Err(NetInitError::AccessPlatform);
    }
    Ok(())
}

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Initialise the device (§3.1.1): reset, negotiate [`DRIVER_FEATURES`], set up virtqueues
    /// 0 (RX) and 1 (TX) of [`QUEUE_SIZE`] descriptors, read the MAC, set DRIVER_OK.
    ///
    /// No buffers are posted yet: call [`VirtioNet::rx_refill`].
    pub fn new(mut transport: T) -> Result<Self, NetInitError> {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        check_offered(offered)?;
        let features = transport.begin_init(DRIVER_FEATURES);
        for q in [RX_QUEUE, TX_QUEUE] {
            let max = transport.max_queue_size(q);
            if max < QUEUE_SIZE as u32 {
                return Err(NetInitError::QueueTooSmall { queue: q, max });
            }
        }
        let event_idx = features.contains(NetFeatures::RING_EVENT_IDX);
        let rx = SplitQueue::new(&mut transport, RX_QUEUE, event_idx).map_err(|err| {
            NetInitError::Queue {
                queue: RX_QUEUE,
                err,
            }
        })?;
        let tx = SplitQueue::new(&mut transport, TX_QUEUE, event_idx).map_err(|err| {
            NetInitError::Queue {
                queue: TX_QUEUE,
                err,
            }
        })?;
        let mac = (
            read_mac(&transport, features)?,
            read_mtu(&transport, features)?,
        );
        transport.finish_init();
        Ok(Self::handle(
            (Some(transport), None),
            (0, 1, 1),
            (rx, tx),
            (mac, features, offered),
        ))
    }

    /// A handle with empty page tables and counters: `owner` is the transport and control queue
    /// (`Some` on the device's owner only), `pairs` is (this pair, active pairs, device maximum).
    pub(in crate::virtio_net) fn handle(
        owner: (Option<T>, Option<SplitQueue<H, CTRL_QUEUE_SIZE>>),
        (pair, active_pairs, max_pairs): (u16, u16, u16),
        (rx, mut tx): (SplitQueue<H, QUEUE_SIZE>, SplitQueue<H, QUEUE_SIZE>),
        ((mac, mtu), features, offered): (([u8; 6], Option<u16>), NetFeatures, NetFeatures),
    ) -> Self {
        // TX posts and reclaims in avail order while the device completes in order (QEMU's
        // does); the RX ring re-posts each id in place and keeps its free stack.
        tx.enable_in_order();
        // Frames of several pages go out as one indirect descriptor each (§2.7.5.3) when the
        // device offers `VIRTIO_F_INDIRECT_DESC` (QEMU's does), else as descriptor chains.
        if features.contains(NetFeatures::RING_INDIRECT_DESC) {
            tx.enable_indirect();
        }
        Self {
            transport: owner.0,
            _ctrl: owner.1,
            pair,
            active_pairs,
            max_pairs,
            rx,
            tx,
            rx_pages: [NO_PAGE; QUEUE_SIZE],
            tx_pages: [TxSlot::FREE; QUEUE_SIZE],
            rx_posted: 0,
            rx_unpublished: 0,
            tx_posted: 0,
            rx_skip: 0,
            rx_chain: RxChain::default(),
            tx_chains: 0,
            tx_in_order_hold: 0,
            rx_chain_mode: false,
            rx_limit: MAX_MULTI_FRAME_LEN,
            rx_fits: MAX_FRAME_LEN,
            rx_buf_pages: 1,
            mac,
            mtu,
            features,
            offered,
            stats: DriverStats::default(),
            doorbells: None,
        }
    }

    /// How many queue pairs the device behind `transport` can run: its `max_virtqueue_pairs`
    /// (§5.1.4) if it offers `VIRTIO_F_VERSION_1`, `VIRTIO_NET_F_MQ` and `VIRTIO_NET_F_CTRL_VQ`,
    /// else 1. Reads only (§3.1.1 step 4 allows reading the device-specific configuration
    /// before the features are accepted); the device is not initialised.
    pub fn probe_queue_pairs(transport: &mut T) -> u16 {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        let mq = NetFeatures::MQ | NetFeatures::CTRL_VQ | NetFeatures::VERSION_1;
        if !offered.contains(mq) {
            return 1;
        }
        transport
            .read_config_space::<u16>(CONFIG_MAX_VQ_PAIRS)
            .map_or(1, |n| n.max(1))
    }

    /// Initialise a multi-queue device (§3.1.1, §5.1.5) with `pairs` queue pairs and return one
    /// handle per pair, pair `i` at index `i` (pair 0 owns the transport):
    ///
    /// 1. negotiate [`DRIVER_FEATURES`] plus `VIRTIO_NET_F_MQ` and `VIRTIO_NET_F_CTRL_VQ`;
    /// 2. set up receiveq_i = 2i and transmitq_i = 2i + 1 for `i < pairs` ([`QUEUE_SIZE`]
    ///    descriptors each) and the control queue at 2 × `max_virtqueue_pairs` (§5.1.2);
    /// 3. set DRIVER_OK, then send `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET(pairs)` (§5.1.6.5.5: the
    ///    device uses only pair 0 until told otherwise) and wait for its ack, calling
    ///    `timed_out` between polls of the used ring.
    ///
    /// Buffers are posted by the caller afterwards ([`VirtioNet::rx_refill`] on each handle).
    /// Handles of pairs > 0 can only notify through doorbells: call
    /// [`VirtioNet::set_doorbells`] on each before use.
    ///
    /// # Errors
    /// [`NetInitError::NotModern`], [`NetInitError::AccessPlatform`], [`NetInitError::NoMultiQueue`] if the device lacks MQ or
    /// CTRL_VQ, [`NetInitError::BadPairCount`] if `pairs` is 0 or above
    /// min(`max_virtqueue_pairs`, [`MAX_QUEUE_PAIRS`]), queue set-up errors, and for the command
    /// [`NetInitError::CtrlQueueFull`], [`NetInitError::CtrlTimeout`] or
    /// [`NetInitError::CtrlNak`]. On a command error the device is reset before returning.
    pub fn new_mq(
        mut transport: T,
        pairs: u16,
        mut timed_out: impl FnMut() -> bool,
    ) -> Result<heapless::Vec<Self, MAX_QUEUE_PAIRS>, NetInitError> {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        check_offered(offered)?;
        let mq = NetFeatures::MQ | NetFeatures::CTRL_VQ;
        if !offered.contains(mq) {
            return Err(NetInitError::NoMultiQueue {
                offered: offered.bits(),
            });
        }
        let max_pairs = Self::probe_queue_pairs(&mut transport);
        let limit = max_pairs.min(MAX_QUEUE_PAIRS as u16).min(VQ_PAIRS_MAX);
        if pairs == 0 || pairs > limit {
            return Err(NetInitError::BadPairCount {
                asked: pairs,
                max: limit,
            });
        }
        let features = transport.begin_init(DRIVER_FEATURES | mq);
        if !features.contains(mq) {
            return Err(NetInitError::NoMultiQueue {
                offered: offered.bits(),
            });
        }
        let event_idx = features.contains(NetFeatures::RING_EVENT_IDX);
        let ctrl_idx = ctrl_queue_index(max_pairs);
        let queue = |t: &mut T, q: u16| {
            SplitQueue::<H, QUEUE_SIZE>::new(t, q, event_idx)
                .map_err(|err| NetInitError::Queue { queue: q, err })
        };
        let mut rings: heapless::Vec<_, MAX_QUEUE_PAIRS> = heapless::Vec::new();
        for i in 0..pairs {
            let rx = queue(&mut transport, rx_queue_index(i))?;
            let tx = queue(&mut transport, tx_queue_index(i))?;
            let _ = rings.push((rx, tx));
        }
        // §5.1.2: the control queue is the last one; its events are never used (polled).
        let mut ctrl = SplitQueue::<H, CTRL_QUEUE_SIZE>::new(&mut transport, ctrl_idx, false)
            .map_err(|err| NetInitError::Queue {
                queue: ctrl_idx,
                err,
            })?;
        let mac = (
            read_mac(&transport, features)?,
            read_mtu(&transport, features)?,
        );
        transport.finish_init();
        if let Err(e) =
            Self::vq_pairs_set(&mut transport, &mut ctrl, ctrl_idx, pairs, &mut timed_out)
        {
            // The device may still hold the command buffer: reset it before anything is freed.
            transport.set_status(virtio_drivers::transport::DeviceStatus::empty());
            return Err(e);
        }
        let mut out = heapless::Vec::new();
        let mut transport = Some(transport);
        let mut ctrl = Some(ctrl);
        for (i, (rx, tx)) in rings.into_iter().enumerate() {
            let _ = out.push(Self::handle(
                (transport.take(), ctrl.take()),
                (i as u16, pairs, max_pairs),
                (rx, tx),
                (mac, features, offered),
            ));
        }
        Ok(out)
    }

    /// Send `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET(pairs)` on the control queue and wait for the ack
    /// (§5.1.6.5: `struct virtio_net_ctrl { u8 class; u8 command; u8 data[]; u8 ack; }`, the
    /// first three device-readable, `ack` device-writable; §5.1.6.5.5: data is
    /// `struct virtio_net_ctrl_mq { le16 virtqueue_pairs; }`).
    pub(in crate::virtio_net) fn vq_pairs_set(
        transport: &mut T,
        ctrl: &mut SplitQueue<H, CTRL_QUEUE_SIZE>,
        ctrl_idx: u16,
        pairs: u16,
        timed_out: &mut impl FnMut() -> bool,
    ) -> Result<(), NetInitError> {
        use virtio_drivers::BufferDirection;
        let (paddr, vaddr) = H::dma_alloc(1, BufferDirection::Both);
        if paddr == 0 {
            return Err(NetInitError::CtrlQueueFull);
        }
        let buf = vaddr.as_ptr();
        let [lo, hi] = pairs.to_le_bytes();
        // Command at offset 0 (4 bytes), ack at offset 64 (its own cache line).
        const ACK_OFFSET: usize = 64;
        const ACK_UNSET: u8 = 0xFF;
        // SAFETY: a fresh, zeroed DMA page of PAGE_SIZE bytes that only this function uses; the
        // device sees it only once it is on the ring below.
        unsafe {
            for (i, b) in [VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, lo, hi]
                .into_iter()
                .enumerate()
            {
                buf.add(i).write_volatile(b);
            }
            buf.add(ACK_OFFSET).write_volatile(ACK_UNSET);
        }
        let result =
            match ctrl.push_chain(&[(paddr, 4, false), (paddr + ACK_OFFSET as u64, 1, true)]) {
                None => Err(NetInitError::CtrlQueueFull),
                Some(head) => {
                    ctrl.publish();
                    // The control queue is rarely used: always notify (§2.7.13.4).
                    transport.notify(ctrl_idx);
                    loop {
                        if let Some((id, _len)) = ctrl.pop_used() {
                            if id == u32::from(head) {
                                ctrl.release_chain(head);
                                // SAFETY: the device is done with the buffer (it is in the used
                                // ring); the page is ours.
                                let ack = unsafe { buf.add(ACK_OFFSET).read_volatile() };
                                break if ack == VIRTIO_NET_OK {
                                    Ok(())
                                } else {
                                    Err(NetInitError::CtrlNak { pairs, ack })
                                };
                            }
                            continue;
                        }
                        if timed_out() {
                            // Leave the page allocated: the device may still write the ack; the
                            // caller resets the device. A page lost on a failed boot.
                            return Err(NetInitError::CtrlTimeout { pairs });
                        }
                        core::hint::spin_loop();
                    }
                }
            };
        // SAFETY: the allocation made above; the device no longer uses it (answered, or the
        // command never reached the ring).
        unsafe { H::dma_dealloc(paddr, vaddr, 1) };
        result
    }

    /// Use cached doorbell addresses for kicks (§4.1.4.4: writing the virtqueue index to the
    /// queue's notification address notifies it).
    ///
    /// # Safety
    /// `rx` and `tx` must be the mapped notification addresses of this handle's virtqueues
    /// ([`VirtioNet::queue_indices`]) of this very device, valid for as long as the device lives.
    pub unsafe fn set_doorbells(&mut self, rx: u64, tx: u64) {
        self.doorbells = Some([rx as *mut u16, tx as *mut u16]);
    }

    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) fn notify(&mut self, which: usize) {
        let (rxq, txq) = self.queue_indices();
        let queue = if which == RX { rxq } else { txq };
        match (self.doorbells, self.transport.as_mut()) {
            // SAFETY: per `set_doorbells`' contract, a live doorbell of this device.
            (Some(db), _) => unsafe { db[which].write_volatile(queue) },
            (None, Some(t)) => t.notify(queue),
            // A pair handle without doorbells cannot notify (documented on `new_mq`).
            (None, None) => {}
        }
    }

    /// Notify the device about buffers published since the last call, at most once per queue,
    /// and only when the device asked for it (§2.7.10 with EVENT_IDX, else the used ring's
    /// NO_NOTIFY flag). Call once per poll iteration. Returns the kicks written.
    #[inline(always)]
    pub fn kick(&mut self) -> u32 {
        let mut kicks = 0;
        if self.rx.needs_kick() {
            self.notify(RX);
            self.stats.kicks_rx += 1;
            kicks += 1;
        }
        if self.tx.needs_kick() {
            self.notify(TX);
            self.stats.kicks_tx += 1;
            kicks += 1;
        }
        kicks
    }

    /// After the core wakes (or decides not to sleep): park `used_event` just behind the used
    /// index again, so the device does not interrupt while we poll. Once parked it stays behind
    /// until the index wraps (65,536 buffers later), so once per wake-up is enough.
    pub fn park_interrupts(&mut self) {
        self.rx.suppress_interrupts();
        self.tx.suppress_interrupts();
    }

    /// Before the core sleeps: ask for an RX interrupt on the next received frame. Returns
    /// `true` if frames are already waiting (do not sleep). The next [`VirtioNet::kick`]
    /// suppresses interrupts again.
    pub fn rx_arm_interrupt(&mut self) -> bool {
        self.rx.arm_interrupt()
    }

    /// Reset the device (§2.4: status 0; it stops using every buffer of every queue) if this
    /// handle owns it. Returns whether it did. After this the device does nothing until a new
    /// driver initialises it.
    pub fn reset_device(&mut self) -> bool {
        match self.transport.as_mut() {
            Some(t) => {
                t.set_status(virtio_drivers::transport::DeviceStatus::empty());
                true
            }
            None => false,
        }
    }
}
