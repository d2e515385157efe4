//! A simulated virtio-net device on in-memory split virtqueues (VIRTIO 1.2 §2.7, §5.1), for
//! tests and for the guest's deterministic datapath benchmark.
//!
//! The three pieces stay in one file (past ~800 lines) because they share `SimShared`'s raw ring
//! memory and its invariants; splitting them would widen what may touch it.
//!
//! Three pieces, which share one [`SimShared`]:
//!
//! - [`SimTransport`] implements `virtio_drivers`' [`Transport`] well enough for
//!   [`crate::virtio_net::VirtioNet::new`] to bring the device up: it offers
//!   [`SIM_FEATURES`] (what the driver asks for: `VIRTIO_F_VERSION_1`, `VIRTIO_NET_F_MAC`,
//!   `VIRTIO_NET_F_MRG_RXBUF`, `VIRTIO_F_EVENT_IDX`), a `virtio_net_config` holding the MAC
//!   (§5.1.4), two queues of [`SIM_QUEUE_SIZE`] descriptors, and keeps the device status
//!   (§2.1). It records each queue's rings (descriptor table, driver area, device area, size;
//!   §2.7, §4.1.4.3) in the [`SimShared`] and counts the driver's notifications (kicks, §2.7.13.4)
//!   there, so the device player finds the rings after the transport has moved into the driver.
//! - [`SimDevice`] plays the device side on those rings: [`SimDevice::deliver_rx`] fills
//!   available receive buffers with a `virtio_net_hdr` and a frame and returns them as used
//!   (§5.1.6.3, §2.7.8), [`SimDevice::complete_tx`] takes every available transmit chain, shows
//!   the frame to a closure and returns the chain as used (§5.1.6.2).
//! - [`DeviceQueue`] is the device's view of one split virtqueue (available ring in, used ring
//!   out), also used directly by the virtqueue tests.
//!
//! Nothing here involves QEMU: the rings are plain memory the driver allocated through its HAL.
//! The device reads and writes them, and the buffers the driver posts, **through their physical
//! addresses used as pointers**: true on the host with a HAL on the global allocator
//! (`HostHal`, tests and the `host-hal` feature) and in the Gannet guest's identity map. That
//! is the contract of [`SimDevice::new`] and [`DeviceQueue::new`], which are `unsafe` for it.
//!
//! The device is single-threaded by design: it runs on the core that runs the driver, between
//! the driver's poll iterations (the benchmark does exactly that), so the ordering below is the
//! protocol's, not a defence against a concurrent driver. Still, it follows §2.7.13 and §2.7.8:
//! `avail->idx` is read with Acquire before the entries it covers, used entries are written
//! before `used->idx`, which is stored with Release.
//!
//! Notification suppression (§2.7.10): by default the device parks `avail_event` just behind the
//! last available index it consumed after every pass (or sets `VIRTQ_USED_F_NO_NOTIFY`, §2.7.8,
//! without EVENT_IDX), as a busy-polling device would: the driver never needs to kick. With
//! [`SimDevice::set_want_kicks`] it asks for a kick on the next buffer instead, as a device that
//! goes idle after draining its queue does.

use crate::virtio_net::{NetFeatures, DRIVER_FEATURES, NET_HDR_LEN, QUEUE_SIZE};
use crate::virtqueue::{Desc, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE};
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
use virtio_drivers::PhysAddr;

/// Virtqueues the simulated device has: receiveq1 (0) and transmitq1 (1) (§5.1.2; no control
/// queue, no multi-queue).
pub const SIM_QUEUES: usize = 2;
/// The receive queue's index (§5.1.2).
pub const SIM_RX_QUEUE: u16 = 0;
/// The transmit queue's index (§5.1.2).
pub const SIM_TX_QUEUE: u16 = 1;
/// Largest queue size the device accepts (§4.1.4.3 `queue_size`): the driver's
/// [`QUEUE_SIZE`], as QEMU's default.
pub const SIM_QUEUE_SIZE: u32 = QUEUE_SIZE as u32;
/// Feature bits the device offers: exactly what the driver asks for ([`DRIVER_FEATURES`]).
pub const SIM_FEATURES: u64 = DRIVER_FEATURES.bits();

/// `VIRTIO_NET_S_LINK_UP` in `virtio_net_config.status` (§5.1.4).
const VIRTIO_NET_S_LINK_UP: u16 = 1;
/// The fields of `struct virtio_net_config` the device exposes (§5.1.4; little-endian).
mod net_config {
    use core::ops::Range;
    /// `mac[6]`.
    pub const MAC: Range<usize> = 0..6;
    /// `status` (le16).
    pub const STATUS: Range<usize> = 6..8;
    /// `max_virtqueue_pairs` (le16).
    pub const MAX_VIRTQUEUE_PAIRS: Range<usize> = 8..10;
    /// `mtu` (le16).
    pub const MTU: Range<usize> = 10..12;
}
/// Bytes of `struct virtio_net_config` the device exposes (§5.1.4): up to `mtu`.
const CONFIG_LEN: usize = net_config::MTU.end;
/// MTU in `virtio_net_config` (valid with `VIRTIO_NET_F_MTU`, which is not offered).
const CONFIG_MTU: u16 = 1500;
/// §2.7.8: `VIRTQ_USED_F_NO_NOTIFY`.
const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;
/// Offset of `num_buffers` (le16) in `virtio_net_hdr` (§5.1.6).
const NUM_BUFFERS_OFFSET: usize = 10;
/// Largest frame [`SimDevice::complete_tx`] gathers from a chain of several descriptors (the
/// driver's largest chain, `MAX_FRAME_BUFFERS` pages; a frame in a single descriptor is shown
/// in place, whatever its length).
const TX_GATHER_MAX: usize = crate::virtio_net::MAX_FRAME_BUFFERS * 4096;

/// One virtqueue's registration and the device's private indices.
struct QueueSlot {
    desc: AtomicU64,
    driver: AtomicU64,
    device: AtomicU64,
    /// 0 while the queue is not set up.
    size: AtomicU32,
    kicks: AtomicU64,
    /// Next available-ring index the device will consume (§2.7.6 `idx` it has seen).
    next_avail: AtomicU16,
    /// The device's used index (§2.7.8), published to `used->idx` after each pass.
    used_idx: AtomicU16,
}

impl QueueSlot {
    const fn new() -> Self {
        QueueSlot {
            desc: AtomicU64::new(0),
            driver: AtomicU64::new(0),
            device: AtomicU64::new(0),
            size: AtomicU32::new(0),
            kicks: AtomicU64::new(0),
            next_avail: AtomicU16::new(0),
            used_idx: AtomicU16::new(0),
        }
    }

    /// Forget the rings (queue reset or device reset, §2.4, §4.1.4.3.2); the kick count stays.
    fn clear(&self) {
        self.size.store(0, Ordering::Relaxed);
        self.desc.store(0, Ordering::Relaxed);
        self.driver.store(0, Ordering::Relaxed);
        self.device.store(0, Ordering::Relaxed);
        self.next_avail.store(0, Ordering::Relaxed);
        self.used_idx.store(0, Ordering::Relaxed);
    }
}

/// The state the transport (inside the driver) and the device player share: the device's
/// configuration, status, negotiated features, and each queue's rings and kick count.
///
/// All atomics, so a `static` works (the guest's benchmark keeps one per port) and `&SimShared`
/// can be held by both sides.
pub struct SimShared {
    mac: [u8; 6],
    device_features: u64,
    status: AtomicU32,
    driver_features: AtomicU64,
    queues: [QueueSlot; SIM_QUEUES],
}

/// Where one virtqueue's rings are (§2.7: guest physical addresses) and its size.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct QueueRings {
    /// The descriptor table (§2.7.5).
    pub desc: PhysAddr,
    /// The driver area: the available ring (§2.7.6).
    pub driver: PhysAddr,
    /// The device area: the used ring (§2.7.8).
    pub device: PhysAddr,
    /// Descriptors in the queue (a power of two).
    pub size: u16,
}

impl SimShared {
    /// A reset device with MAC `mac`, offering [`SIM_FEATURES`].
    pub const fn new(mac: [u8; 6]) -> Self {
        Self::with_features(mac, SIM_FEATURES)
    }

    /// A reset device with MAC `mac` offering `features` (to test the driver's negotiation).
    pub const fn with_features(mac: [u8; 6], features: u64) -> Self {
        SimShared {
            mac,
            device_features: features,
            status: AtomicU32::new(0),
            driver_features: AtomicU64::new(0),
            queues: [const { QueueSlot::new() }; SIM_QUEUES],
        }
    }

    /// The device status the driver last wrote (§2.1).
    pub fn status(&self) -> DeviceStatus {
        DeviceStatus::from_bits_retain(self.status.load(Ordering::Acquire))
    }

    /// The feature bits the driver accepted (§2.2).
    pub fn driver_features(&self) -> u64 {
        self.driver_features.load(Ordering::Acquire)
    }

    /// Notifications the driver wrote for `queue` (0 for a queue the device does not have).
    pub fn kicks(&self, queue: u16) -> u64 {
        self.queues
            .get(usize::from(queue))
            .map_or(0, |q| q.kicks.load(Ordering::Relaxed))
    }

    /// The rings of `queue`, if the driver has set it up.
    pub fn rings(&self, queue: u16) -> Option<QueueRings> {
        let q = self.queues.get(usize::from(queue))?;
        let size = q.size.load(Ordering::Acquire);
        (size != 0).then(|| QueueRings {
            desc: q.desc.load(Ordering::Relaxed),
            driver: q.driver.load(Ordering::Relaxed),
            device: q.device.load(Ordering::Relaxed),
            size: size as u16,
        })
    }

    fn event_idx(&self) -> bool {
        self.driver_features() & NetFeatures::RING_EVENT_IDX.bits() != 0
    }

    /// `struct virtio_net_config` (§5.1.4): `mac`, `status` (link up), `max_virtqueue_pairs`
    /// (1), `mtu`; little-endian.
    fn config(&self) -> [u8; CONFIG_LEN] {
        let mut c = [0u8; CONFIG_LEN];
        c[net_config::MAC].copy_from_slice(&self.mac);
        c[net_config::STATUS].copy_from_slice(&VIRTIO_NET_S_LINK_UP.to_le_bytes());
        c[net_config::MAX_VIRTQUEUE_PAIRS].copy_from_slice(&1u16.to_le_bytes());
        c[net_config::MTU].copy_from_slice(&CONFIG_MTU.to_le_bytes());
        c
    }
}

/// The driver's side of the simulated device: a [`Transport`] over a [`SimShared`].
///
/// Writing status 0 resets the device (§2.4): every queue is forgotten and the device stops
/// touching the rings and buffers. So does dropping the transport.
pub struct SimTransport<'a> {
    shared: &'a SimShared,
}

impl<'a> SimTransport<'a> {
    /// A transport for the device `shared` (reset by the driver's initialisation, §3.1.1).
    pub fn new(shared: &'a SimShared) -> Self {
        SimTransport { shared }
    }

    /// The state this transport shares with the device player.
    pub fn shared(&self) -> &'a SimShared {
        self.shared
    }
}

/// Dropping the transport resets the device, as `virtio_drivers`' `PciTransport` does: the
/// driver's rings are freed after its transport (see [`crate::virtqueue`]), and a reset device
/// never touches them again.
impl Drop for SimTransport<'_> {
    fn drop(&mut self) {
        self.set_status(DeviceStatus::empty());
    }
}

impl Transport for SimTransport<'_> {
    fn device_type(&self) -> DeviceType {
        DeviceType::Network
    }

    fn read_device_features(&mut self) -> u64 {
        self.shared.device_features
    }

    fn write_driver_features(&mut self, driver_features: u64) {
        // §2.2.1: the driver accepts a subset of what the device offers.
        self.shared.driver_features.store(
            driver_features & self.shared.device_features,
            Ordering::Release,
        );
    }

    fn max_queue_size(&mut self, queue: u16) -> u32 {
        if usize::from(queue) < SIM_QUEUES {
            SIM_QUEUE_SIZE
        } else {
            0
        }
    }

    fn notify(&mut self, queue: u16) {
        if let Some(q) = self.shared.queues.get(usize::from(queue)) {
            q.kicks.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn get_status(&self) -> DeviceStatus {
        self.shared.status()
    }

    fn set_status(&mut self, status: DeviceStatus) {
        if status.is_empty() {
            // §2.4: reset. The device forgets every queue (and so every buffer).
            for q in &self.shared.queues {
                q.clear();
            }
            self.shared.driver_features.store(0, Ordering::Release);
        }
        self.shared.status.store(status.bits(), Ordering::Release);
    }

    fn set_guest_page_size(&mut self, _guest_page_size: u32) {}

    fn requires_legacy_layout(&self) -> bool {
        false
    }

    fn queue_set(
        &mut self,
        queue: u16,
        size: u32,
        descriptors: PhysAddr,
        driver_area: PhysAddr,
        device_area: PhysAddr,
    ) {
        let Some(q) = self.shared.queues.get(usize::from(queue)) else {
            return;
        };
        q.clear();
        q.desc.store(descriptors, Ordering::Relaxed);
        q.driver.store(driver_area, Ordering::Relaxed);
        q.device.store(device_area, Ordering::Relaxed);
        // Release: the addresses are visible to whoever sees the size (`SimShared::rings`).
        q.size.store(size.min(SIM_QUEUE_SIZE), Ordering::Release);
    }

    fn queue_unset(&mut self, queue: u16) {
        if let Some(q) = self.shared.queues.get(usize::from(queue)) {
            q.clear();
        }
    }

    fn queue_used(&mut self, queue: u16) -> bool {
        self.shared.rings(queue).is_some()
    }

    fn ack_interrupt(&mut self) -> InterruptStatus {
        InterruptStatus::empty()
    }

    fn read_config_generation(&self) -> u32 {
        0
    }

    fn read_config_space<T: zerocopy::FromBytes + zerocopy::IntoBytes>(
        &self,
        offset: usize,
    ) -> virtio_drivers::Result<T> {
        let config = self.shared.config();
        let bytes = offset
            .checked_add(core::mem::size_of::<T>())
            .and_then(|end| config.get(offset..end))
            .ok_or(virtio_drivers::Error::ConfigSpaceTooSmall)?;
        T::read_from_bytes(bytes).map_err(|_| virtio_drivers::Error::ConfigSpaceTooSmall)
    }

    fn write_config_space<T: zerocopy::IntoBytes + zerocopy::Immutable>(
        &mut self,
        _offset: usize,
        _value: T,
    ) -> virtio_drivers::Result<()> {
        // Every field of virtio_net_config is read-only for the driver (§5.1.4).
        Err(virtio_drivers::Error::Unsupported)
    }
}

/// One descriptor as the device reads it (§2.7.5).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct SimDesc {
    /// Buffer address (physical = virtual, see the module docs).
    pub addr: u64,
    /// Buffer length in bytes.
    pub len: u32,
    /// `VIRTQ_DESC_F_*` flags.
    pub flags: u16,
    /// The next descriptor of the chain (meaningful with `VIRTQ_DESC_F_NEXT`).
    pub next: u16,
}

impl SimDesc {
    /// Whether the device may write this buffer (`VIRTQ_DESC_F_WRITE`).
    pub fn device_writes(&self) -> bool {
        self.flags & VIRTQ_DESC_F_WRITE != 0
    }
}

/// The device's view of one split virtqueue (§2.7): it takes available chains (§2.7.13 from
/// the device's side) and returns them as used (§2.7.8, §2.7.14).
///
/// Obtain one with [`DeviceQueue::new`]; it borrows the indices kept in the [`SimShared`], so
/// several `DeviceQueue`s over the same queue, made one after the other, continue where the
/// previous one stopped.
pub struct DeviceQueue<'a> {
    slot: &'a QueueSlot,
    rings: QueueRings,
    event_idx: bool,
}

impl<'a> DeviceQueue<'a> {
    /// The device side of `queue` of `shared`, or `None` while the driver has not set it up.
    ///
    /// # Safety
    /// The queue's rings, and every buffer the driver makes available on it, must be readable
    /// and writable at their physical address used as a pointer (host HAL, or the guest's
    /// identity map), and stay allocated while this device uses them (the driver resets the
    /// device before freeing its rings, §2.4). No one else may play the device side of this
    /// queue meanwhile.
    pub unsafe fn new(shared: &'a SimShared, queue: u16) -> Option<Self> {
        Some(DeviceQueue {
            slot: shared.queues.get(usize::from(queue))?,
            rings: shared.rings(queue)?,
            event_idx: shared.event_idx(),
        })
    }

    /// This queue's rings.
    pub fn rings(&self) -> QueueRings {
        self.rings
    }

    fn mask(&self) -> usize {
        usize::from(self.rings.size) - 1
    }

    /// `avail->idx`, read with Acquire (§2.7.13.3: the driver stores it after the entries).
    fn avail_idx(&self) -> u16 {
        // SAFETY: `idx` at offset 2 of the available ring, 2-byte aligned, live per `new`'s
        // contract; the driver writes it only between the device's passes (single-threaded use).
        unsafe { AtomicU16::from_ptr((self.rings.driver + 2) as *mut u16) }.load(Ordering::Acquire)
    }

    /// Chains the driver has made available that the device has not taken yet.
    pub fn pending(&self) -> u16 {
        self.avail_idx()
            .wrapping_sub(self.slot.next_avail.load(Ordering::Relaxed))
    }

    /// The head of the next available chain, without taking it.
    pub fn peek(&self) -> Option<u16> {
        self.peek_nth(0)
    }

    /// The head of the `i`-th available chain not yet taken (`peek_nth(0)` is
    /// [`DeviceQueue::peek`]), without taking it.
    pub fn peek_nth(&self, i: usize) -> Option<u16> {
        if i >= usize::from(self.pending()) {
            return None;
        }
        let next = usize::from(self.slot.next_avail.load(Ordering::Relaxed));
        let slot = next.wrapping_add(i) & self.mask();
        // SAFETY: `ring[slot]` of the available ring (slot < size), published before the index
        // read in `pending` (Acquire); live per `new`'s contract.
        Some(unsafe {
            ((self.rings.driver + 4) as *const u16)
                .add(slot)
                .read_volatile()
        })
    }

    /// Take the next available chain: its head descriptor index (the id to return in the used
    /// ring).
    pub fn take(&mut self) -> Option<u16> {
        let head = self.peek()?;
        self.slot.next_avail.fetch_add(1, Ordering::Relaxed);
        Some(head)
    }

    /// Descriptor `id` of the table, or `None` if `id` is out of range (a driver bug).
    pub fn desc(&self, id: u16) -> Option<SimDesc> {
        if id >= self.rings.size {
            return None;
        }
        // SAFETY: id < size, inside the descriptor table, live per `new`'s contract; the driver
        // does not change a descriptor while it is available (§2.7.13.1).
        let d = unsafe {
            (self.rings.desc as *const Desc)
                .add(usize::from(id))
                .read_volatile()
        };
        Some(SimDesc {
            addr: d.addr,
            len: d.len,
            flags: d.flags,
            next: d.next,
        })
    }

    /// Call `f` on each descriptor of the chain starting at `head`, following
    /// `VIRTQ_DESC_F_NEXT` (at most `size` descriptors, so a corrupt table cannot loop).
    /// Returns the number of descriptors visited.
    pub fn for_each_desc(&self, head: u16, mut f: impl FnMut(SimDesc)) -> usize {
        let mut id = head;
        for n in 0..usize::from(self.rings.size) {
            let Some(d) = self.desc(id) else {
                return n;
            };
            if d.flags & VIRTQ_DESC_F_INDIRECT != 0 {
                // §2.7.5.3.2: the buffer is a table of `len / 16` descriptors, walked from
                // its first through `next` (an index into the table); it ends the chain.
                return n + for_each_indirect(d, &mut f);
            }
            f(d);
            if d.flags & VIRTQ_DESC_F_NEXT == 0 {
                return n + 1;
            }
            id = d.next;
        }
        usize::from(self.rings.size)
    }

    /// Bytes the device may write into the chain at `head` (its device-writable descriptors).
    pub fn writable_len(&self, head: u16) -> usize {
        let mut n = 0;
        self.for_each_desc(head, |d| {
            if d.device_writes() {
                n += d.len as usize;
            }
        });
        n
    }

    /// Write `parts`, one after the other, into the device-writable descriptors of the chain
    /// at `head`; stops when the chain is full. Returns the bytes written.
    pub fn write_chain(&mut self, head: u16, parts: &[&[u8]]) -> usize {
        let mut src = parts.iter().flat_map(|p| p.iter().copied());
        let mut written = 0;
        self.for_each_desc(head, |d| {
            if !d.device_writes() {
                return;
            }
            let mut off = 0;
            while off < d.len as usize {
                let Some(b) = src.next() else { return };
                // SAFETY: byte `off` < len of a device-writable buffer the driver made
                // available; writable at its physical address per `new`'s contract.
                unsafe { ((d.addr as usize + off) as *mut u8).write_volatile(b) };
                off += 1;
                written += 1;
            }
        });
        written
    }

    /// Return the chain at `head` as used with `len` bytes written by the device (§2.7.8:
    /// 0 for a chain the device only read). Not visible to the driver until
    /// [`DeviceQueue::publish`].
    pub fn give_back(&mut self, head: u16, len: u32) {
        let used = self.slot.used_idx.load(Ordering::Relaxed);
        let slot = usize::from(used) & self.mask();
        // SAFETY: `ring[slot]` of the used ring (offset 4, 8 bytes per `struct virtq_used_elem`,
        // slot < size); live per `new`'s contract; the driver reads it only after `used->idx`
        // covers it.
        unsafe {
            let e = ((self.rings.device + 4) as *mut u32).add(2 * slot);
            e.write_volatile(u32::from(head));
            e.add(1).write_volatile(len);
        }
        self.slot
            .used_idx
            .store(used.wrapping_add(1), Ordering::Relaxed);
    }

    /// Test support for playing a **hostile device** (the `drivers/fuzz` used-ring target):
    /// write the used element at ring position `at` (masked into the ring) as `(id, len)`,
    /// whatever the driver posted: an id it never gave, one already returned, a length past the
    /// buffer. Nothing else moves: the driver sees it once `used->idx` covers `at`
    /// ([`DeviceQueue::set_used_idx`], or a later [`DeviceQueue::give_back`] +
    /// [`DeviceQueue::publish`]). A well-behaved device uses [`DeviceQueue::give_back`].
    pub fn write_used_raw(&mut self, at: u16, id: u32, len: u32) {
        let slot = usize::from(at) & self.mask();
        // SAFETY: `ring[slot]` of the used ring (slot < size), live per `new`'s contract; the
        // driver reads it only in its own calls (single-threaded use).
        unsafe {
            let e = ((self.rings.device + 4) as *mut u32).add(2 * slot);
            e.write_volatile(id);
            e.add(1).write_volatile(len);
        }
    }

    /// The device's used index (the next [`DeviceQueue::give_back`] writes there).
    pub fn used_idx(&self) -> u16 {
        self.slot.used_idx.load(Ordering::Relaxed)
    }

    /// Test support for a hostile device: set the device's used index to `idx` and store it to
    /// `used->idx` at once (Release), so the driver sees `idx - last seen` new entries (a jump
    /// past what was made available, up to 65,535, or backwards; the entries are whatever the
    /// ring holds). Notification suppression is not touched.
    pub fn set_used_idx(&mut self, idx: u16) {
        self.slot.used_idx.store(idx, Ordering::Relaxed);
        // SAFETY: `used->idx` at offset 2 of the used ring, 2-byte aligned, live per `new`'s
        // contract; only the device writes it.
        unsafe { AtomicU16::from_ptr((self.rings.device + 2) as *mut u16) }
            .store(idx, Ordering::Release);
    }

    /// Make every chain given back so far visible: store `used->idx` with Release (§2.7.8: the
    /// entries before the index), then set the notification suppression for the next pass
    /// (module docs): with `want_kicks`, ask for a kick on the next available buffer, else
    /// park `avail_event` behind what was consumed.
    pub fn publish(&mut self, want_kicks: bool) {
        let used = self.slot.used_idx.load(Ordering::Relaxed);
        // SAFETY: `used->idx` at offset 2 of the used ring, 2-byte aligned, live per `new`'s
        // contract; only the device writes it.
        unsafe { AtomicU16::from_ptr((self.rings.device + 2) as *mut u16) }
            .store(used, Ordering::Release);
        let seen = self.slot.next_avail.load(Ordering::Relaxed);
        // SAFETY: `flags` at offset 0 and `avail_event` after `ring[size]` of the used ring
        // (§2.7.8), inside the device area; only the device writes them.
        unsafe {
            if self.event_idx {
                let event = if want_kicks {
                    seen
                } else {
                    seen.wrapping_sub(1)
                };
                ((self.rings.device + 4 + 8 * u64::from(self.rings.size)) as *mut u16)
                    .write_volatile(event);
            } else {
                let flags = if want_kicks {
                    0
                } else {
                    VIRTQ_USED_F_NO_NOTIFY
                };
                (self.rings.device as *mut u16).write_volatile(flags);
            }
        }
    }
}

/// The device player of one simulated virtio-net device: serves its receive queue
/// ([`SimDevice::deliver_rx`]) and transmit queue ([`SimDevice::complete_tx`]) on the rings
/// recorded in a [`SimShared`]. Does nothing until the driver set `DRIVER_OK` (§3.1.1), nor
/// after a reset.
pub struct SimDevice<'a> {
    shared: &'a SimShared,
    want_kicks: bool,
    delivered: u64,
    completed: u64,
}

impl<'a> SimDevice<'a> {
    /// The device side of `shared`.
    ///
    /// # Safety
    /// As for [`DeviceQueue::new`], for both queues: the rings and every buffer the driver posts
    /// are accessible at their physical address used as a pointer and stay allocated while the
    /// device is not reset; nothing else plays this device.
    pub unsafe fn new(shared: &'a SimShared) -> Self {
        SimDevice {
            shared,
            want_kicks: false,
            delivered: 0,
            completed: 0,
        }
    }

    /// Ask the driver for a kick whenever it makes buffers available after a pass that found
    /// none left (`true`), or never (`false`, the default: a busy-polling device). See the
    /// module docs.
    pub fn set_want_kicks(&mut self, on: bool) {
        self.want_kicks = on;
    }

    /// Frames delivered so far by [`SimDevice::deliver_rx`].
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Frames transmitted so far (seen by [`SimDevice::complete_tx`]).
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The state this device shares with its transport.
    pub fn shared(&self) -> &'a SimShared {
        self.shared
    }

    fn queue(&self, q: u16) -> Option<DeviceQueue<'a>> {
        if !self.shared.status().contains(DeviceStatus::DRIVER_OK) {
            return None;
        }
        // SAFETY: `new`'s contract covers every queue of this device.
        unsafe { DeviceQueue::new(self.shared, q) }
    }

    /// Receive buffers the driver has made available and the device has not filled yet.
    pub fn rx_available(&self) -> usize {
        self.queue(SIM_RX_QUEUE)
            .map_or(0, |q| usize::from(q.pending()))
    }

    /// Deliver `frame` (an Ethernet frame without FCS) up to `n` times: each copy takes the next
    /// available receive buffer, gets a 12-byte `virtio_net_hdr` (no offloads, `num_buffers` =
    /// 1, §5.1.6) followed by the frame, and is returned as used with length 12 + frame length
    /// (§5.1.6.3). One `used->idx` store for the whole batch. Stops early when no buffer is
    /// available, or when the next one is too small for header and frame (it is then left
    /// available: no `VIRTIO_NET_F_MRG_RXBUF` spreading here). Returns the frames delivered.
    pub fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        let Some(mut q) = self.queue(SIM_RX_QUEUE) else {
            return 0;
        };
        let mut hdr = [0u8; NET_HDR_LEN];
        hdr[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2].copy_from_slice(&1u16.to_le_bytes());
        let mut done = 0;
        while done < n {
            let Some(head) = q.peek() else { break };
            if q.writable_len(head) < NET_HDR_LEN + frame.len() {
                break;
            }
            q.take();
            let len = q.write_chain(head, &[&hdr, frame]);
            q.give_back(head, len as u32);
            done += 1;
        }
        q.publish(self.want_kicks);
        self.delivered += done as u64;
        done
    }

    /// [`SimDevice::deliver_rx`] as a device with `VIRTIO_NET_F_MRG_RXBUF` does it (§5.1.6.4):
    /// each copy of `frame` fills as many available buffers as header and frame need, each but
    /// the last completely, the header (only in the first buffer) saying how many
    /// (`num_buffers`); every buffer is returned as used with the bytes written into it. One
    /// `used->idx` store for the whole batch, so a frame's buffers appear together. Stops
    /// early when too few buffers are available for the next copy. Returns the frames
    /// delivered.
    pub fn deliver_rx_mrg(&mut self, frame: &[u8], n: usize) -> usize {
        let Some(mut q) = self.queue(SIM_RX_QUEUE) else {
            return 0;
        };
        let mut done = 0;
        'copies: while done < n {
            // How many buffers this copy takes (looked at before any is taken).
            let mut heads = heapless::Vec::<u16, 64>::new();
            let (mut room, mut i) = (0, 0);
            while room < NET_HDR_LEN + frame.len() {
                let Some(head) = q.peek_nth(i) else {
                    break 'copies;
                };
                if heads.push(head).is_err() {
                    break 'copies;
                }
                room += q.writable_len(head);
                i += 1;
            }
            let mut hdr = [0u8; NET_HDR_LEN];
            hdr[NUM_BUFFERS_OFFSET..NUM_BUFFERS_OFFSET + 2]
                .copy_from_slice(&(heads.len() as u16).to_le_bytes());
            let mut rest = frame;
            for (k, &head) in heads.iter().enumerate() {
                q.take();
                let len = if k == 0 {
                    let take = (q.writable_len(head) - NET_HDR_LEN).min(rest.len());
                    let l = q.write_chain(head, &[&hdr, &rest[..take]]);
                    rest = &rest[take..];
                    l
                } else {
                    let take = q.writable_len(head).min(rest.len());
                    let l = q.write_chain(head, &[&rest[..take]]);
                    rest = &rest[take..];
                    l
                };
                q.give_back(head, len as u32);
            }
            done += 1;
        }
        q.publish(self.want_kicks);
        self.delivered += done as u64;
        done
    }

    /// Transmit every available chain of the transmit queue: call `f` with the frame (the
    /// chain's device-readable bytes after the 12-byte `virtio_net_hdr`, §5.1.6.2; empty if the
    /// chain is shorter than the header) and return the chain as used with length 0 (§2.7.8:
    /// the device wrote nothing). A frame in one descriptor is shown in place; one spread over
    /// several descriptors is gathered into a page-sized buffer first (longer ones are cut).
    /// One `used->idx` store for the whole batch. Returns the frames transmitted.
    pub fn complete_tx(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        let Some(mut q) = self.queue(SIM_TX_QUEUE) else {
            return 0;
        };
        let mut done = 0;
        while let Some(head) = q.take() {
            let mut single = None;
            let mut parts = 0;
            q.for_each_desc(head, |d| {
                if !d.device_writes() {
                    single = Some(d);
                    parts += 1;
                }
            });
            match single {
                Some(d) if parts == 1 && d.len as usize >= NET_HDR_LEN => {
                    // SAFETY: a device-readable buffer of `d.len` >= NET_HDR_LEN bytes the
                    // driver made available, readable at its physical address per `new`'s
                    // contract; the driver does not touch it until it is used (given back
                    // below).
                    let frame = unsafe {
                        core::slice::from_raw_parts(
                            (d.addr as usize + NET_HDR_LEN) as *const u8,
                            d.len as usize - NET_HDR_LEN,
                        )
                    };
                    f(frame);
                }
                _ => gather_tx(&q, head, &mut f),
            }
            q.give_back(head, 0);
            done += 1;
        }
        q.publish(self.want_kicks);
        self.completed += done as u64;
        done
    }
}

/// [`DeviceQueue::for_each_desc`] inside the indirect table `d` describes (§2.7.5.3.2):
/// `d.len / 16` descriptors at `d.addr`, from the first, following `VIRTQ_DESC_F_NEXT`
/// (`next` indexes the table; at most that many, so a corrupt table cannot loop; an index
/// past it ends the walk). Returns the descriptors visited.
fn for_each_indirect(d: SimDesc, f: &mut impl FnMut(SimDesc)) -> usize {
    let count = d.len as usize / 16;
    let mut i = 0usize;
    for n in 0..count {
        if i >= count {
            return n;
        }
        // SAFETY: entry `i < count` of a table of `count` descriptors the driver made
        // available at `d.addr`, readable at its physical address per `DeviceQueue::new`'s
        // contract; the driver does not change it while it is available (§2.7.13.1).
        let e = unsafe { ((d.addr as usize) as *const Desc).add(i).read_volatile() };
        let e = SimDesc {
            addr: e.addr,
            len: e.len,
            flags: e.flags,
            next: e.next,
        };
        f(e);
        if e.flags & VIRTQ_DESC_F_NEXT == 0 {
            return n + 1;
        }
        i = usize::from(e.next);
    }
    count
}

/// [`SimDevice::complete_tx`] for a frame spread over several descriptors: copy the chain's
/// device-readable bytes into a page-sized buffer (longer frames are cut) and show `f` what
/// follows the header. Out of line, so the common single-descriptor path keeps a small frame.
#[inline(never)]
fn gather_tx(q: &DeviceQueue<'_>, head: u16, f: &mut impl FnMut(&[u8])) {
    let mut buf = [0u8; NET_HDR_LEN + TX_GATHER_MAX];
    let mut n = 0;
    q.for_each_desc(head, |d| {
        if d.device_writes() {
            return;
        }
        let take = (d.len as usize).min(buf.len() - n);
        // SAFETY: a device-readable buffer of at least `take` bytes the driver made available,
        // readable at its physical address per `DeviceQueue::new`'s contract.
        let src = unsafe { core::slice::from_raw_parts(d.addr as usize as *const u8, take) };
        buf[n..n + take].copy_from_slice(src);
        n += take;
    });
    f(buf.get(NET_HDR_LEN..n).unwrap_or(&[]));
}

/// A HAL for the host: DMA memory from the global allocator, physical address = virtual
/// address, so a [`SimDevice`] can play the device on it. For host tests (this crate's, and
/// other crates' with the `host-hal` feature); never on the bare-metal target.
#[cfg(any(test, feature = "host-hal"))]
pub struct HostHal;

/// The DD-bit driver ([`crate::ddnic`]) on a simulated NIC ([`dd`]) with host memory.
#[cfg(any(test, feature = "host-hal"))]
pub type HostSimDd<'a> = crate::ddnic::DdNic<HostHal, dd::SimDdRegs<'a>>;
/// The igb driver (advanced descriptors, [`crate::igb::Igb`]) on the simulated DD-bit NIC in
/// host memory: host tests (the NIC writes advanced descriptors once the bring-up sets
/// `SRRCTL.DESCTYPE`).
#[cfg(any(test, feature = "host-hal"))]
pub type HostSimIgb<'a> = crate::igb::Igb<HostHal, dd::SimDdRegs<'a>>;

/// The virtio-net driver on a simulated device with host memory: what host rigs (the
/// dataplane's, `unikernel::dataplane::testing`) build their ports from, so they need not
/// name the driver's module.
#[cfg(any(test, feature = "host-hal"))]
pub type HostSimNet<'a> = crate::virtio_net::VirtioNet<HostHal, SimTransport<'a>>;

#[cfg(any(test, feature = "host-hal"))]
mod host_hal {
    use super::HostHal;
    use core::ptr::NonNull;
    use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};
    extern crate alloc;
    use alloc::alloc::{alloc_zeroed, dealloc, Layout};

    fn layout(pages: usize) -> Layout {
        Layout::from_size_align(pages.max(1) * PAGE_SIZE, PAGE_SIZE).expect("page layout")
    }

    // SAFETY: allocations are page-aligned, zeroed, live until dma_dealloc, and identity-mapped
    // (the simulated device reads them through the same addresses); `share` returns the
    // buffer's own address.
    unsafe impl Hal for HostHal {
        fn dma_alloc(pages: usize, _dir: BufferDirection) -> (PhysAddr, NonNull<u8>) {
            // SAFETY: non-zero size.
            match NonNull::new(unsafe { alloc_zeroed(layout(pages)) }) {
                Some(p) => (p.as_ptr() as PhysAddr, p),
                None => (0, NonNull::dangling()),
            }
        }

        unsafe fn dma_dealloc(_paddr: PhysAddr, vaddr: NonNull<u8>, pages: usize) -> i32 {
            // SAFETY: allocated by dma_alloc with this layout (the caller's contract).
            unsafe { dealloc(vaddr.as_ptr(), layout(pages)) };
            0
        }

        unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
            NonNull::new(paddr as *mut u8).expect("MMIO at address 0")
        }

        unsafe fn share(buffer: NonNull<[u8]>, _dir: BufferDirection) -> PhysAddr {
            buffer.as_ptr().cast::<u8>() as PhysAddr
        }

        unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _dir: BufferDirection) {}
    }
}

pub mod dd;

#[cfg(test)]
mod tests;
