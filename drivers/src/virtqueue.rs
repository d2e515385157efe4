//! A split virtqueue (VIRTIO 1.2 §2.7) driven directly, for a poll-mode fast path.
//!
//! Why not `virtio_drivers::queue::VirtQueue`: it publishes the available index with a full
//! fence per buffer, copies every descriptor through a shadow table, and its EVENT_IDX kick test
//! (`avail_idx >= avail_event + 1`) is not wrap-safe: once the 16-bit available index wraps
//! (after 65,536 buffers) it stops asking for kicks the device is waiting for, and the queue
//! stalls. This queue stages any number of single-descriptor buffers, makes them visible with
//! one release store of `avail->idx` ([`SplitQueue::publish`]), and decides kicks with the
//! standard `vring_need_event` test (§2.7.10, Linux `include/uapi/linux/virtio_ring.h`).
//!
//! RX buffers are one descriptor each (whole pages) or, for big RX buffers, one indirect table of
//! several pages; a TX frame is one descriptor (the virtio-net header in the same page as the
//! frame) or, for a frame of several pages, a chain ([`SplitQueue::push_chain_ids`], §2.7.5) or
//! an indirect table ([`Indirect`], §2.7.5.3). The head descriptor's index is the token that
//! comes back in the used ring.
//!
//! Past ~800 lines (tests in `virtqueue/tests.rs`): the free-descriptor stack, in-order mode and
//! the burst cursor ([`Cursor`]) are one state machine over one set of ring indices, and the raw
//! ring views ([`Rings`], [`Indirect`]) are the only code that touches the shared memory; split
//! apart, each would need the others' private invariants.
//!
//! Memory for the rings comes from the HAL's `dma_alloc` (zeroed, physically contiguous) and is
//! returned on drop. Drop the transport (which resets the device) before the queue, so the
//! device never touches freed rings: [`crate::virtio_net::VirtioNet`] declares its fields in
//! that order.

use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};
use virtio_drivers::transport::Transport;
use virtio_drivers::{BufferDirection, Hal, PhysAddr, PAGE_SIZE};

/// §2.7.5: `VIRTQ_DESC_F_NEXT`, the buffer continues in the descriptor named by `next`.
pub(crate) const VIRTQ_DESC_F_NEXT: u16 = 1;
/// §2.7.5: `VIRTQ_DESC_F_WRITE`, the device writes into this buffer.
pub(crate) const VIRTQ_DESC_F_WRITE: u16 = 2;
/// §2.7.5.3: `VIRTQ_DESC_F_INDIRECT`, the buffer is a table of descriptors (needs
/// `VIRTIO_F_INDIRECT_DESC`, §6).
pub(crate) const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// Descriptors per indirect table ([`Indirect`]): the driver's largest frame, in pages
/// (`virtio_net::MAX_FRAME_BUFFERS`).
pub const INDIRECT_MAX: usize = 4;
/// §2.7.6: `VIRTQ_AVAIL_F_NO_INTERRUPT`, used when EVENT_IDX is not negotiated.
const VIRTQ_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// §2.7.8: `VIRTQ_USED_F_NO_NOTIFY`, the device does not want kicks (without EVENT_IDX).
const VIRTQ_USED_F_NO_NOTIFY: u16 = 1;

/// §2.7.5 `struct virtq_desc` (also read by the simulated device, [`crate::sim`]).
#[repr(C)]
pub(crate) struct Desc {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) flags: u16,
    pub(crate) next: u16,
}

/// §2.7.8 `struct virtq_used_elem`.
#[repr(C)]
struct UsedElem {
    id: u32,
    len: u32,
}

/// Why a queue could not be set up.
#[derive(Debug, Clone, Copy, Eq, PartialEq)]
pub enum QueueError {
    /// The device already has this queue configured.
    AlreadyUsed,
    /// The device's maximum size for this queue is below `N`.
    TooSmall {
        /// The device's maximum.
        max: u32,
    },
    /// `dma_alloc` returned no memory.
    NoMemory,
}

/// The wrap-safe event test of §2.7.10 (`vring_need_event`): kick when `event` lies in
/// `[old, new)` modulo 2^16.
#[inline]
pub fn vring_need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// A queue's indices held by a burst ([`SplitQueue::cursor`]): copied into locals so they
/// stay in registers across the burst's stores to ring memory (which the compiler cannot
/// prove do not alias the queue's own fields), then put back once
/// ([`SplitQueue::set_cursor`]).
#[derive(Copy, Clone, Debug)]
pub struct Cursor {
    last_used: u16,
    avail_idx: u16,
    nfree: usize,
}

/// A queue's ring addresses held by a burst ([`SplitQueue::rings`]), like [`Cursor`] for its
/// indices: raw pointers in locals, so the burst's stores to ring memory do not make the
/// compiler reload them from the queue on every frame. Valid while the queue lives; its
/// methods are [`SplitQueue`]'s burst methods of the same names.
#[derive(Copy, Clone, Debug)]
pub struct Rings<const N: usize> {
    desc: NonNull<Desc>,
    used: NonNull<u8>,
}

impl<const N: usize> Rings<N> {
    /// The avail ring: it follows the `N` descriptors in the same allocation
    /// ([`SplitQueue::new`]), so a burst holds one address for both (the offset folds into
    /// each store's addressing mode: one register and one stack reload fewer per frame).
    #[inline(always)]
    fn avail(&self) -> NonNull<u16> {
        // SAFETY: `SplitQueue::new` places the avail ring right after the descriptor table
        // (16 bytes per descriptor) in one allocation, which lives as long as the queue.
        unsafe { self.desc.cast::<u8>().add(16 * N).cast() }
    }

    /// [`SplitQueue::pop_nth`].
    #[inline(always)]
    pub fn pop_nth(&self, c: &Cursor, i: usize) -> (u32, u32) {
        self.pop_at(usize::from(c.last_used) + i)
    }

    /// The used element at position `u` of the used ring (any count, masked into the ring):
    /// [`Rings::pop_nth`] for `u = last_used + i` with the position carried by the caller's
    /// loop, so the cursor's index is not reloaded per element.
    #[inline(always)]
    pub fn pop_at(&self, u: usize) -> (u32, u32) {
        let slot = u & (N - 1);
        // SAFETY: slot < N; inside the used ring, which lives as long as the queue.
        let e = unsafe {
            self.used
                .add(4 + 8 * slot)
                .cast::<UsedElem>()
                .read_volatile()
        };
        (e.id, e.len)
    }

    /// [`Rings::repost_nth`] at avail position `a` (`avail_idx + r`, carried by the caller).
    #[inline(always)]
    pub fn repost_at(&self, a: usize, id: u16, addr: u64) {
        let id = id & (N as u16 - 1);
        let slot = a & (N - 1);
        // SAFETY: as `repost_nth`: the descriptor is the driver's (popped from the used ring,
        // not released), `id` and `slot` are masked into the table and the ring.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(addr);
            self.avail().add(2 + slot).write(id);
        }
    }

    /// Make descriptor `id` available again at avail position `a` (`avail_idx + r`, carried by
    /// the caller) as it stands: an RX slot whose descriptor points at its indirect table
    /// for good (only the table's entries change), re-posted with one store.
    #[inline(always)]
    pub fn avail_at(&self, a: usize, id: u16) {
        let slot = a & (N - 1);
        // SAFETY: the slot is masked into the avail ring, which lives as long as the queue.
        unsafe { self.avail().add(2 + slot).write(id & (N as u16 - 1)) };
    }

    /// [`Rings::post_nth`] at avail position `a` (`avail_idx + t`, carried by the caller).
    #[inline(always)]
    pub fn post_at(&self, a: usize, id: u16, addr: u64, len: u32) {
        let id = id & (N as u16 - 1);
        let slot = a & (N - 1);
        // SAFETY: as `post_nth`: `id < N` (masked), a free descriptor the device does not
        // read; the avail slot is masked into the ring; plain stores.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(addr);
            (&raw mut (*d).len).cast::<u64>().write(u64::from(len));
            self.avail().add(2 + slot).write(id);
        }
    }

    /// [`SplitQueue::pop_nth_id`].
    #[inline(always)]
    pub fn pop_nth_id(&self, c: &Cursor, i: usize) -> u32 {
        let slot = (usize::from(c.last_used) + i) & (N - 1);
        // SAFETY: slot < N; inside the used ring, which lives as long as the queue.
        unsafe { self.used.add(4 + 8 * slot).cast::<u32>().read_volatile() }
    }

    /// [`SplitQueue::repost_nth`].
    #[inline(always)]
    pub fn repost_nth(&self, c: &Cursor, r: usize, id: u16, addr: u64) {
        let id = id & (N as u16 - 1);
        let slot = (usize::from(c.avail_idx) + r) & (N - 1);
        // SAFETY: the descriptor is the driver's (popped from the used ring, not released),
        // `id` and `slot` are masked into the table and the ring.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(addr);
            self.avail().add(2 + slot).write(id);
        }
    }

    /// Write descriptor `id` of a chain the burst is posting (§2.7.5): `addr`, and `len`
    /// with `flags`/`next` as one 8-byte store, as [`SplitQueue::write_desc`] but through the
    /// burst's ring pointers (no reload of the table's address per descriptor).
    #[inline(always)]
    pub fn write_desc(&self, id: u16, addr: u64, len: u32, next: Option<u16>) {
        let (flags, next) = next.map_or((0, 0), |n| (VIRTQ_DESC_F_NEXT, n));
        // SAFETY: `id < N` (masked); the caller owns the descriptor (off the free stack, not
        // available to the device).
        unsafe { self.write_desc_raw(id & (N as u16 - 1), addr, len, flags, next) };
    }

    /// [`SplitQueue::write_desc_raw`]'s stores: `addr`, then `len`, `flags` and `next` as one
    /// 8-byte store (their little-endian layout, §2.7.5; offset 8 of a 16-byte-aligned
    /// descriptor, so aligned). Plain stores, seen by the device after the publish.
    ///
    /// # Safety
    /// `id < N`, and the descriptor is the driver's (the device does not read it now).
    #[inline(always)]
    unsafe fn write_desc_raw(&self, id: u16, addr: u64, len: u32, flags: u16, next: u16) {
        // SAFETY: per the contract; the table lives as long as the queue.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(addr);
            (&raw mut (*d).len)
                .cast::<u64>()
                .write(u64::from(len) | u64::from(flags) << 32 | u64::from(next) << 48);
        }
    }

    /// End a chain at descriptor `id` (written by [`Rings::write_desc`] with a link): its
    /// `len` rewritten with no `VIRTQ_DESC_F_NEXT` (§2.7.5), one 8-byte store.
    #[inline(always)]
    pub fn end_chain(&self, id: u16, len: u32) {
        let id = id & (N as u16 - 1);
        // SAFETY: `id < N` (masked); the caller owns the descriptor (not yet available).
        unsafe {
            (&raw mut (*self.desc.add(usize::from(id)).as_ptr()).len)
                .cast::<u64>()
                .write(u64::from(len));
        }
    }

    /// [`SplitQueue::avail_nth`] through the burst's ring pointers.
    #[inline(always)]
    pub fn avail_nth(&self, c: &Cursor, a: usize, id: u16) {
        let slot = (usize::from(c.avail_idx) + a) & (N - 1);
        // SAFETY: the slot is masked into the avail ring, which lives as long as the queue.
        unsafe { self.avail().add(2 + slot).write(id) };
    }

    /// The descriptor that descriptor `id` continues in, as the driver wrote it
    /// (`VIRTQ_DESC_F_NEXT` set, §2.7.5), or `None` at a chain's end. One 8-byte load of
    /// `len`/`flags`/`next`: the device never writes the table.
    #[inline(always)]
    pub fn desc_next(&self, id: u16) -> Option<u16> {
        let id = id & (N as u16 - 1);
        // SAFETY: `id < N` (masked); the table lives as long as the queue and only the driver
        // writes it.
        let w = unsafe {
            (&raw const (*self.desc.add(usize::from(id)).as_ptr()).len)
                .cast::<u64>()
                .read()
        };
        (w >> 32 & u64::from(VIRTQ_DESC_F_NEXT) != 0).then_some((w >> 48) as u16)
    }

    /// Post ring descriptor `id` as an indirect table of `n` descriptors at physical address
    /// `table` (§2.7.5.3: `VIRTQ_DESC_F_INDIRECT`, `len` 16 bytes per descriptor) at avail
    /// position `a` (carried by the caller), as [`Rings::post_at`] posts a buffer.
    #[inline(always)]
    pub fn post_indirect_at(&self, a: usize, id: u16, table: u64, n: usize) {
        let id = id & (N as u16 - 1);
        let slot = a & (N - 1);
        // SAFETY: as `post_at`: `id < N` (masked), a free descriptor the device does not
        // read; the avail slot is masked into the ring; plain stores.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(table);
            (&raw mut (*d).len)
                .cast::<u64>()
                .write((16 * n) as u64 | u64::from(VIRTQ_DESC_F_INDIRECT) << 32);
            self.avail().add(2 + slot).write(id);
        }
    }

    /// How many descriptors the indirect table behind ring descriptor `id` has, as the driver
    /// posted it ([`Rings::post_indirect_at`]), or `None` if `id` is not an indirect
    /// descriptor. One 8-byte load: the device never writes the table.
    #[inline(always)]
    pub fn desc_indirect(&self, id: u16) -> Option<usize> {
        let id = id & (N as u16 - 1);
        // SAFETY: `id < N` (masked); the table lives as long as the queue and only the driver
        // writes it.
        let w = unsafe {
            (&raw const (*self.desc.add(usize::from(id)).as_ptr()).len)
                .cast::<u64>()
                .read()
        };
        (w >> 32 & u64::from(VIRTQ_DESC_F_INDIRECT) != 0).then_some((w as u32 / 16) as usize)
    }

    /// [`SplitQueue::push_nth`]'s stores for descriptor `id` (from [`SplitQueue::nth_free`])
    /// as the burst's `t`-th available entry.
    #[inline(always)]
    pub fn post_nth(&self, c: &Cursor, t: usize, id: u16, addr: u64, len: u32) {
        let id = id & (N as u16 - 1);
        let slot = (usize::from(c.avail_idx) + t) & (N - 1);
        // SAFETY: `id < N` (masked), off the free stack (the caller's `t < nfree`), so the
        // device does not read it; the avail slot is masked into the ring; plain stores.
        unsafe {
            let d = self.desc.add(usize::from(id)).as_ptr();
            (&raw mut (*d).addr).write(addr);
            (&raw mut (*d).len).cast::<u64>().write(u64::from(len));
            self.avail().add(2 + slot).write(id);
        }
    }
}

/// A TX queue's indirect descriptor tables (VIRTIO 1.2 §2.7.5.3, `VIRTIO_F_INDIRECT_DESC`):
/// one table of `M` descriptors (16 bytes each) per ring descriptor, in one DMA allocation
/// that lives as long as the queue ([`SplitQueue::enable_indirect`]). A frame of several
/// pages posted on ring descriptor `id` describes its pages in table `id` and takes one
/// descriptor and one avail slot, like a one-page frame ([`Rings::post_indirect_at`]), so the
/// ring stays in in-order mode. The device only reads the tables (§2.7.5.3.1: it must not
/// write an indirect descriptor), so the driver reads its own page addresses back from them
/// on completion.
#[derive(Copy, Clone, Debug)]
pub struct Indirect<const N: usize, const M: usize> {
    /// Physical address of table 0.
    phys: u64,
    /// Table 0, `N * M` descriptors.
    virt: NonNull<Desc>,
}

impl<const N: usize, const M: usize> Indirect<N, M> {
    /// Bytes of the `N` tables.
    const BYTES: usize = 16 * M * N;

    /// Descriptor `j < M` of table `id` (masked into the tables).
    #[inline(always)]
    fn at(&self, id: u16, j: usize) -> *mut Desc {
        // SAFETY: `(id mod N) * M + (j mod M) < N * M`: inside the allocation.
        unsafe { self.virt.add(usize::from(id) % N * M + j % M).as_ptr() }
    }

    /// Physical address of table `id` (`id` masked into the ring).
    #[inline(always)]
    pub fn phys(&self, id: u16) -> u64 {
        self.phys + (16 * M * (usize::from(id) % N)) as u64
    }

    /// Write descriptor `j` of table `id`: a device-readable buffer at `addr`, `len` bytes,
    /// continuing in descriptor `j + 1` of the same table unless `last` (§2.7.5.3.2: `next`
    /// indexes the table). Two plain stores, seen by the device after the ring's publish.
    /// The caller owns ring descriptor `id` (not available to the device).
    #[inline(always)]
    pub fn write(&self, id: u16, j: usize, addr: u64, len: u32, last: bool) {
        self.write_flags(id, j, addr, len, last, 0);
    }

    /// Write descriptor `j` of table `id` as a **device-writable** buffer (`VIRTQ_DESC_F_WRITE`)
    /// at `addr`, `len` bytes, continuing in descriptor `j + 1` unless `last`: an entry of an
    /// RX buffer made of several pages (§2.7.5.3.2; Linux `add_recvbuf_big` posts such
    /// chains). Two plain stores; the caller owns ring descriptor `id`.
    #[inline(always)]
    pub fn write_writable(&self, id: u16, j: usize, addr: u64, len: u32, last: bool) {
        self.write_flags(id, j, addr, len, last, VIRTQ_DESC_F_WRITE);
    }

    /// [`Indirect::write`] with `flags` besides the link (`VIRTQ_DESC_F_NEXT` unless `last`).
    #[inline(always)]
    fn write_flags(&self, id: u16, j: usize, addr: u64, len: u32, last: bool, flags: u16) {
        let (flags, next) = if last {
            (u64::from(flags), 0u64)
        } else {
            (
                u64::from(flags | VIRTQ_DESC_F_NEXT),
                (j as u64 + 1) % M as u64,
            )
        };
        let d = self.at(id, j);
        // SAFETY: inside the tables (`at`); ring descriptor `id` is the driver's, so the
        // device does not read its table now.
        unsafe {
            (&raw mut (*d).addr).write(addr);
            (&raw mut (*d).len)
                .cast::<u64>()
                .write(u64::from(len) | flags << 32 | next << 48);
        }
    }

    /// Replace the buffer address of descriptor `j` of table `id` (its length, flags and link
    /// stay as written): one plain store, how an RX slot of several pages is re-posted with
    /// a fresh page where the device consumed one. The caller owns ring descriptor `id` (the
    /// device returned it and it is not yet available again).
    #[inline(always)]
    pub fn set_addr(&self, id: u16, j: usize, addr: u64) {
        // SAFETY: inside the tables (`at`); ring descriptor `id` is the driver's.
        unsafe { (&raw mut (*self.at(id, j)).addr).write(addr) };
    }

    /// The buffer address descriptor `j` of table `id` holds, as the driver wrote it.
    #[inline(always)]
    pub fn addr(&self, id: u16, j: usize) -> u64 {
        // SAFETY: inside the tables (`at`); only the driver writes them.
        unsafe { (&raw const (*self.at(id, j)).addr).read() }
    }
}

/// A split virtqueue of `N` descriptors (power of two, at most 32768).
pub struct SplitQueue<H: Hal, const N: usize> {
    desc: NonNull<Desc>,
    /// `struct virtq_avail`: flags @0, idx @2, ring[N] @4, used_event @4+2N.
    avail: NonNull<u16>,
    /// `struct virtq_used`: flags @0, idx @2, ring[N] @4 (8 bytes each), avail_event @4+8N.
    used: NonNull<u8>,
    dma: [(PhysAddr, NonNull<u8>, usize); 2],
    free: [u16; N],
    nfree: usize,
    /// Driver's available index (staged; `avail->idx` lags until `publish`).
    avail_idx: u16,
    /// `avail->idx` at the last kick decision.
    kicked_idx: u16,
    /// `avail->idx` as last published (what the device can see; kicks are decided on it).
    published_idx: u16,
    last_used: u16,
    event_idx: bool,
    /// In-order mode ([`SplitQueue::enable_in_order`]): every descriptor in flight has the
    /// id of the avail slot it was posted in, and the free descriptors are the ids
    /// `avail_idx .. avail_idx + nfree` (mod N), so `free` is not kept. Left (the free stack
    /// rebuilt) on the first completion out of order or the first chain.
    in_order: bool,
    /// Whether the queue may be in in-order mode at all (set once, for TX queues).
    in_order_ok: bool,
    /// Indirect tables ([`SplitQueue::enable_indirect`]), with their allocation (physical,
    /// virtual, pages).
    indirect: Option<(Indirect<N, INDIRECT_MAX>, PhysAddr, NonNull<u8>, usize)>,
    _hal: core::marker::PhantomData<H>,
}

// SAFETY: the queue's memory is owned by the queue; moving it to another CPU is fine (one owner
// at a time, enforced by `&mut self` on every method).
unsafe impl<H: Hal, const N: usize> Send for SplitQueue<H, N> {}

impl<H: Hal, const N: usize> SplitQueue<H, N> {
    const SIZE_OK: () = assert!(N.is_power_of_two() && N <= 32768);

    /// Allocate the rings and tell the device about them (§4.1.5.1.3 via `Transport::queue_set`).
    pub fn new<T: Transport>(
        transport: &mut T,
        idx: u16,
        event_idx: bool,
    ) -> Result<Self, QueueError> {
        #[allow(clippy::let_unit_value)]
        let _ = Self::SIZE_OK;
        if transport.queue_used(idx) {
            return Err(QueueError::AlreadyUsed);
        }
        let max = transport.max_queue_size(idx);
        if max < N as u32 {
            return Err(QueueError::TooSmall { max });
        }
        let driver_bytes = 16 * N + 6 + 2 * N;
        let device_bytes = 6 + 8 * N;
        let pages = |b: usize| b.div_ceil(PAGE_SIZE);
        let (dp, dv) = H::dma_alloc(pages(driver_bytes), BufferDirection::DriverToDevice);
        if dp == 0 {
            return Err(QueueError::NoMemory);
        }
        let (up, uv) = H::dma_alloc(pages(device_bytes), BufferDirection::DeviceToDriver);
        if up == 0 {
            // SAFETY: returning the allocation we just made, unused.
            unsafe { H::dma_dealloc(dp, dv, pages(driver_bytes)) };
            return Err(QueueError::NoMemory);
        }
        transport.queue_set(idx, N as u32, dp, dp + 16 * N as u64, up);
        let mut free = [0u16; N];
        for (i, f) in free.iter_mut().enumerate() {
            *f = (N - 1 - i) as u16;
        }
        let mut q = Self {
            desc: dv.cast(),
            // SAFETY: the avail ring follows the N descriptors inside the same allocation.
            avail: unsafe { dv.add(16 * N) }.cast(),
            used: uv,
            dma: [(dp, dv, pages(driver_bytes)), (up, uv, pages(device_bytes))],
            free,
            nfree: N,
            avail_idx: 0,
            kicked_idx: 0,
            published_idx: 0,
            last_used: 0,
            event_idx,
            in_order: false,
            in_order_ok: false,
            indirect: None,
            _hal: core::marker::PhantomData,
        };
        q.suppress_interrupts();
        Ok(q)
    }

    /// Free descriptors (buffers that can still be pushed).
    #[inline]
    pub fn free_descs(&self) -> usize {
        self.nfree
    }

    /// Take the descriptor the next pushed buffer goes in, or `None` when the ring is full: in
    /// in-order mode the one of the next avail slot (§2.7.9), else the top of the free stack.
    #[inline(always)]
    fn take_free(&mut self) -> Option<u16> {
        if self.nfree == 0 {
            return None;
        }
        self.nfree -= 1;
        Some(if self.in_order {
            self.avail_idx & (N as u16 - 1)
        } else {
            self.free[self.nfree]
        })
    }

    /// Stage one buffer at physical address `addr`, `len` bytes, device-writable if
    /// `device_writes`. Returns its token (descriptor index), or `None` when the ring is full.
    /// The device does not see it until [`SplitQueue::publish`].
    #[inline]
    pub fn push(&mut self, addr: u64, len: u32, device_writes: bool) -> Option<u16> {
        let id = self.take_free()?;
        // SAFETY: ids in the free stack are always < N, and so is a masked one; a free
        // descriptor (in in-order mode the one of the next avail slot) is the driver's (the
        // device does not read it).
        unsafe { self.stage(id, addr, len, device_writes) };
        Some(id)
    }

    /// Stage one buffer described by the indirect table of the descriptor it takes
    /// ([`SplitQueue::indirect`], §2.7.5.3): `fill(id)` writes that table's entries first
    /// ([`Indirect::write_writable`] for an RX buffer of several pages), then the ring
    /// descriptor is written as `VIRTQ_DESC_F_INDIRECT` over `n` entries and made the next
    /// available entry. Returns the token, or `None` when the ring is full or the queue has
    /// no tables (nothing is staged then). The device does not see it until
    /// [`SplitQueue::publish`].
    pub fn push_indirect(&mut self, n: usize, fill: impl FnOnce(u16)) -> Option<u16> {
        let ind = self.indirect()?;
        if n == 0 || n > INDIRECT_MAX {
            return None;
        }
        let id = self.take_free()?;
        fill(id);
        self.rings()
            .post_indirect_at(usize::from(self.avail_idx), id, ind.phys(id), n);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        Some(id)
    }

    /// Re-post descriptor `id`, just popped from the used ring and not released, with a new
    /// buffer (physical address `addr`, `len` bytes, device-writable if `device_writes`): the
    /// descriptor is rewritten in place and its index made available again, without going
    /// through the free list (ixy.rs's `rx_batch` refills each slot as it takes it). The device
    /// does not see it until [`SplitQueue::publish`].
    ///
    /// # Panics
    /// In debug builds, if `id >= N`.
    #[inline]
    pub fn repost(&mut self, id: u16, addr: u64, len: u32, device_writes: bool) {
        debug_assert!(usize::from(id) < N);
        let id = id & (N as u16 - 1);
        // SAFETY: `id < N` (masked); the device returned the descriptor (it came out of the
        // used ring) and the caller did not release it, so it is the driver's.
        unsafe { self.stage(id, addr, len, device_writes) };
    }

    /// Make descriptor `id`, just popped from the used ring and not released, the next
    /// available entry again as it stands (an indirect descriptor whose table the caller
    /// updated: [`Indirect::set_addr`]). The device does not see it until
    /// [`SplitQueue::publish`].
    #[inline]
    pub fn repost_indirect(&mut self, id: u16) {
        debug_assert!(usize::from(id) < N);
        self.rings()
            .avail_at(usize::from(self.avail_idx), id & (N as u16 - 1));
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    /// Write descriptor `id` (one buffer, no chain) and make its index the next available
    /// entry (staged: the device sees it after [`SplitQueue::publish`]).
    ///
    /// # Safety
    /// `id < N`, and the descriptor is the driver's: free, or returned by the device and not
    /// released.
    #[inline(always)]
    unsafe fn stage(&mut self, id: u16, addr: u64, len: u32, device_writes: bool) {
        let flags = if device_writes { VIRTQ_DESC_F_WRITE } else { 0 };
        // SAFETY: per the contract the descriptor is ours and in the table; the avail slot is
        // masked into the ring; the ring memory is ours until drop. Plain stores, not
        // volatile: the device reads them only after `publish`'s Release fence and
        // `avail->idx` store, which the compiler may not move them past; a volatile write of
        // the whole 16-byte descriptor went through a stack temporary (12 instructions for 2
        // stores).
        unsafe {
            self.write_desc_raw(id, addr, len, flags, 0);
            let slot = usize::from(self.avail_idx) & (N - 1);
            self.avail.add(2 + slot).write(id);
        }
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    /// Write descriptor `id`: `addr`, then `len`, `flags` and `next` as one 8-byte store (their
    /// little-endian layout, §2.7.5; offset 8 of a 16-byte-aligned descriptor, so aligned).
    /// Plain stores (see [`SplitQueue::stage`]).
    ///
    /// # Safety
    /// `id < N`, and the descriptor is the driver's (the device does not read it now).
    #[inline(always)]
    unsafe fn write_desc_raw(&self, id: u16, addr: u64, len: u32, flags: u16, next: u16) {
        // SAFETY: per the contract (the same as `Rings::write_desc_raw`'s).
        unsafe { self.rings().write_desc_raw(id, addr, len, flags, next) };
    }

    /// Stage one buffer made of several descriptors chained with `VIRTQ_DESC_F_NEXT` (§2.7.5,
    /// §2.7.13.1): `parts` are `(physical address, length in bytes, device writes)`, the
    /// device-readable parts first (§2.7.4.2). Returns the head descriptor's index (the token), or
    /// `None` when fewer than `parts.len()` descriptors are free (nothing is staged then). Give
    /// the chain back with [`SplitQueue::release_chain`]. Used for the control virtqueue, off the
    /// fast path.
    pub fn push_chain(&mut self, parts: &[(u64, u32, bool)]) -> Option<u16> {
        self.push_chain_ids(parts, &mut [0u16; 8])
    }

    /// [`SplitQueue::push_chain`] that also writes each part's descriptor index to `ids` (at
    /// least `parts.len()` long, else `None`): a TX frame of several pages keeps its page
    /// behind every descriptor of its chain.
    #[inline]
    pub fn push_chain_ids(&mut self, parts: &[(u64, u32, bool)], ids: &mut [u16]) -> Option<u16> {
        let n = parts.len();
        if n == 0 || n > self.nfree || n > ids.len() {
            return None;
        }
        // A chain takes several descriptors for one avail slot: not in-order any more.
        self.leave_in_order();
        // Take the descriptors first so each one can name the next.
        for id in ids[..n].iter_mut() {
            self.nfree -= 1;
            *id = self.free[self.nfree] & (N as u16 - 1);
        }
        for (i, &(addr, len, device_writes)) in parts.iter().enumerate() {
            let mut flags = if device_writes { VIRTQ_DESC_F_WRITE } else { 0 };
            let next = if i + 1 < n {
                flags |= VIRTQ_DESC_F_NEXT;
                ids[i + 1]
            } else {
                0
            };
            // SAFETY: `ids[i] < N` (masked), taken off the free stack, so the device does not
            // read it.
            unsafe { self.write_desc_raw(ids[i], addr, len, flags, next) };
        }
        let head = ids[0];
        let slot = usize::from(self.avail_idx) & (N - 1);
        // SAFETY: slot < N, inside the avail ring, ours until drop.
        unsafe { self.avail.add(2 + slot).write(head) };
        self.avail_idx = self.avail_idx.wrapping_add(1);
        Some(head)
    }

    /// Return the descriptor chain starting at `head` (a token of [`SplitQueue::push_chain`]
    /// that came back through [`SplitQueue::pop_used`]) to the free list, following the `next`
    /// fields the driver wrote (at most `N` descriptors, so a corrupted table cannot loop).
    pub fn release_chain(&mut self, head: u16) {
        let mut id = head;
        for _ in 0..N {
            if usize::from(id) >= N {
                return;
            }
            // SAFETY: id < N; the device is done with the chain (it came back in the used
            // ring), and the table is ours until drop.
            let d = unsafe { self.desc.add(usize::from(id)).read_volatile() };
            self.release(id);
            if d.flags & VIRTQ_DESC_F_NEXT == 0 {
                return;
            }
            id = d.next;
        }
    }

    /// Whether descriptor `id` continues in another (`VIRTQ_DESC_F_NEXT`, §2.7.5), as the
    /// driver wrote it (`false` for an `id` out of the table).
    #[inline]
    pub fn desc_has_next(&self, id: u16) -> bool {
        usize::from(id) < N && self.rings().desc_next(id).is_some()
    }

    /// Make every staged buffer visible to the device: one release fence and one store of
    /// `avail->idx` (§2.7.13.3: descriptors and ring entries before the index).
    #[inline]
    pub fn publish(&mut self) {
        fence(Ordering::Release);
        // SAFETY: `avail->idx` at offset 2 of the avail ring, ours until drop.
        unsafe { self.avail.add(1).write_volatile(self.avail_idx) };
        self.published_idx = self.avail_idx;
    }

    /// After [`SplitQueue::publish`]: does the device want a notification for the buffers made
    /// visible since the last call? (§2.7.10 with EVENT_IDX, else §2.7.8's NO_NOTIFY flag.)
    #[inline]
    pub fn needs_kick(&mut self) -> bool {
        let old = self.kicked_idx;
        let new = self.published_idx;
        if old == new {
            return false;
        }
        self.kicked_idx = new;
        // The index store must be visible before we read the device's suppression state, or
        // both sides can decide the other will act (Linux `virtqueue_kick_prepare`: virtio_mb).
        fence(Ordering::SeqCst);
        // SAFETY: reads of the used ring header/trailer, ours until drop.
        unsafe {
            if self.event_idx {
                let ev = self.used.add(4 + 8 * N).cast::<u16>().read_volatile();
                vring_need_event(ev, new, old)
            } else {
                self.used.cast::<u16>().read_volatile() & VIRTQ_USED_F_NO_NOTIFY == 0
            }
        }
    }

    /// Pop one used-ring entry: `(id, bytes written by the device)`. The id is the device's
    /// word: the caller checks it is a token it handed out, then gives the descriptor back
    /// with [`SplitQueue::release`]. (A broken device could return an id twice; checking
    /// before release keeps the free list sound.)
    #[inline]
    pub fn pop_used(&mut self) -> Option<(u32, u32)> {
        // SAFETY: `used->idx` at offset 2, written by the device; ours to read until drop.
        let used_idx = unsafe { self.used.add(2).cast::<u16>().read_volatile() };
        if used_idx == self.last_used {
            return None;
        }
        // Entries are valid once the index says so (§2.7.14).
        fence(Ordering::Acquire);
        let slot = usize::from(self.last_used) & (N - 1);
        // SAFETY: slot < N; the element was published by the device before `used->idx`.
        let e = unsafe {
            self.used
                .add(4 + 8 * slot)
                .cast::<UsedElem>()
                .read_volatile()
        };
        self.last_used = self.last_used.wrapping_add(1);
        Some((e.id, e.len))
    }

    /// The queue's indices, copied out for a burst ([`Cursor`]). Give them back with
    /// [`SplitQueue::set_cursor`] before any other method runs.
    #[inline(always)]
    pub fn cursor(&self) -> Cursor {
        Cursor {
            last_used: self.last_used,
            avail_idx: self.avail_idx,
            nfree: self.nfree,
        }
    }

    /// The ring addresses for a burst ([`Rings`]).
    #[inline(always)]
    pub fn rings(&self) -> Rings<N> {
        debug_assert!(
            self.avail.as_ptr() == self.desc.as_ptr().wrapping_add(N).cast(),
            "the avail ring follows the descriptor table"
        );
        Rings {
            desc: self.desc,
            used: self.used,
        }
    }

    /// Put a burst's indices back (see [`SplitQueue::cursor`]).
    #[inline(always)]
    pub fn set_cursor(&mut self, c: Cursor) {
        debug_assert!(c.nfree <= N);
        self.last_used = c.last_used;
        self.avail_idx = c.avail_idx;
        self.nfree = c.nfree.min(N);
    }

    /// Put back the indices of a fused burst's RX run ([`SplitQueue::cursor`]): `popped`
    /// used elements taken ([`SplitQueue::pop_nth`]), `staged` avail entries re-posted
    /// ([`SplitQueue::repost_nth`]), and the cursor's free count (descriptors the run
    /// released, [`SplitQueue::release_in_stack`]). [`SplitQueue::popped`],
    /// [`SplitQueue::staged`] and [`SplitQueue::set_cursor`] in one, without clamps (the
    /// cursor's `nfree` never exceeds `N`: only `release_in_stack` raises it, below `N`).
    #[inline(always)]
    pub fn set_burst_cursor(&mut self, c: &Cursor, popped: usize, staged: usize) {
        debug_assert!(c.nfree <= N);
        self.last_used = c.last_used.wrapping_add(popped as u16);
        self.avail_idx = c.avail_idx.wrapping_add(staged as u16);
        self.nfree = c.nfree;
    }

    /// Put back the indices of a fused burst's TX run ([`SplitQueue::cursor`]): `n` buffers
    /// posted, each on a descriptor of its own ([`SplitQueue::nth_free_in`],
    /// [`Rings::post_nth`]), `n <=` [`SplitQueue::cursor_free`]. The used side is untouched
    /// (a TX run pops nothing).
    #[inline(always)]
    pub fn set_posted(&mut self, c: &Cursor, n: usize) {
        debug_assert!(n <= c.nfree && c.last_used == self.last_used);
        self.avail_idx = c.avail_idx.wrapping_add(n as u16);
        self.nfree = c.nfree - n;
    }

    /// Whether the device has completed an entry not yet popped (one volatile load of
    /// `used->idx`, §2.7.14, no fence: it only decides whether a burst is worth setting up;
    /// the burst reads the entries after [`SplitQueue::used_ready`]'s fence).
    #[inline(always)]
    pub fn has_used(&self) -> bool {
        // SAFETY: `used->idx` at offset 2, written by the device; ours to read until drop.
        let used_idx = unsafe { self.used.add(2).cast::<u16>().read_volatile() };
        used_idx != self.last_used
    }

    /// Used-ring entries completed past the driver's used index, as the raw 16-bit distance
    /// from `last_used` to `used->idx` (one volatile load, §2.7.14; no fence, no clamp): 0
    /// when [`SplitQueue::has_used`] is false. A poll iteration reads it once to decide
    /// whether to set a burst up and hands it on ([`SplitQueue::ready_of`]), so the burst does
    /// not load the index a second time.
    #[inline(always)]
    pub fn used_pending(&self) -> usize {
        // SAFETY: `used->idx` at offset 2, written by the device; ours to read until drop.
        let used_idx = unsafe { self.used.add(2).cast::<u16>().read_volatile() };
        usize::from(used_idx.wrapping_sub(self.last_used))
    }

    /// [`SplitQueue::used_ready`] from a [`SplitQueue::used_pending`] read earlier (nothing
    /// popped since): the Acquire fence that lets the entries be read (§2.7.14), and the
    /// count clamped to `N` (at most N entries can be outstanding, §2.7.8; a device that
    /// claims more gets at most N, each entry's id checked by the caller anyway).
    #[inline(always)]
    pub fn ready_of(pending: usize) -> usize {
        fence(Ordering::Acquire);
        pending.min(N)
    }

    /// Used-ring entries the device has completed and the burst not yet popped (one volatile
    /// load of `used->idx`), then an Acquire fence so the entries may be read (§2.7.14). A
    /// burst reads this once and then takes that many with [`SplitQueue::pop_nth`] (or
    /// [`SplitQueue::pop_ready_id`]).
    #[inline(always)]
    pub fn used_ready(&self, c: &Cursor) -> usize {
        // SAFETY: `used->idx` at offset 2, written by the device; ours to read until drop.
        let used_idx = unsafe { self.used.add(2).cast::<u16>().read_volatile() };
        fence(Ordering::Acquire);
        // At most N entries can be outstanding (§2.7.8); a device that claims more is broken
        // and gets at most N (each entry's id is checked by the caller anyway).
        usize::from(used_idx.wrapping_sub(c.last_used)).min(N)
    }

    /// Pop the next used-ring entry's id without looking at `used->idx`: only after
    /// [`SplitQueue::used_ready`] said it is there (calling it more often returns stale
    /// entries; the caller's id check catches those like any other bad id).
    #[inline(always)]
    pub fn pop_ready_id(&self, c: &mut Cursor) -> u32 {
        let slot = usize::from(c.last_used) & (N - 1);
        c.last_used = c.last_used.wrapping_add(1);
        // SAFETY: slot < N; inside the used ring, ours to read until drop.
        unsafe { self.used.add(4 + 8 * slot).cast::<u32>().read_volatile() }
    }

    /// A cursor's avail index and free descriptors, `(avail_idx, nfree)`.
    #[inline(always)]
    pub fn cursor_parts(c: &Cursor) -> (u16, usize) {
        (c.avail_idx, c.nfree)
    }

    /// A cursor's used index (`last_used`): the position of its first unpopped used element.
    #[inline(always)]
    pub fn cursor_used(c: &Cursor) -> u16 {
        c.last_used
    }

    /// Descriptors free at the cursor (what a burst may stage with [`SplitQueue::push_nth`]).
    #[inline(always)]
    pub fn cursor_free(c: &Cursor) -> usize {
        c.nfree
    }

    /// The `i`-th used element after the cursor, `(id, len)`, for `i <` what
    /// [`SplitQueue::used_ready`] returned; the cursor moves once for the burst
    /// ([`SplitQueue::popped`]), so the loop carries only `i`.
    #[inline(always)]
    pub fn pop_nth(&self, c: &Cursor, i: usize) -> (u32, u32) {
        self.rings().pop_nth(c, i)
    }

    /// After a burst took `n` elements with [`SplitQueue::pop_nth`].
    #[inline(always)]
    pub fn popped(c: &mut Cursor, n: usize) {
        c.last_used = c.last_used.wrapping_add(n as u16);
    }

    /// Re-post descriptor `id` (popped from the used ring, not released) with a new buffer at
    /// `addr`, keeping its length and flags (RX rings, whose buffers are all whole pages: the
    /// device never writes the descriptor table, §2.7.5, so the old `len`/`flags` are still
    /// there), as the burst's `r`-th re-post (the avail slot is the cursor's plus `r`); the
    /// cursor moves once ([`SplitQueue::staged`]). One store to the descriptor, one to the
    /// avail ring; visible after [`SplitQueue::set_cursor`] and [`SplitQueue::publish`].
    #[inline(always)]
    pub fn repost_nth(&self, c: &Cursor, r: usize, id: u16, addr: u64) {
        self.rings().repost_nth(c, r, id, addr);
    }

    /// After a burst staged `n` avail entries with [`SplitQueue::repost_nth`] or
    /// [`SplitQueue::push_nth`] (`taken` of them descriptors off the free stack).
    #[inline(always)]
    pub fn staged(c: &mut Cursor, n: usize, taken: usize) {
        debug_assert!(taken <= c.nfree);
        c.avail_idx = c.avail_idx.wrapping_add(n as u16);
        c.nfree -= taken.min(c.nfree);
    }

    /// Stage the burst's `t`-th new buffer (`addr`, `len` bytes, device-readable) on the
    /// `t`-th free descriptor from the top of the free stack, for `t <`
    /// [`SplitQueue::cursor_free`]; returns its token. The cursor moves once
    /// ([`SplitQueue::staged`] with `taken = n`).
    #[inline(always)]
    pub fn push_nth(&self, c: &Cursor, t: usize, addr: u64, len: u32) -> u16 {
        let id = self.nth_free(c, t);
        self.rings().post_nth(c, t, id, addr, len);
        id
    }

    /// The descriptor the burst's `d`-th take from the free stack gets (for `d <`
    /// [`SplitQueue::cursor_free`]), without taking it: [`SplitQueue::staged`] takes them.
    #[inline(always)]
    pub fn nth_free(&self, c: &Cursor, d: usize) -> u16 {
        self.nth_free_in(c, d, self.in_order)
    }

    /// [`SplitQueue::nth_free`] with the mode read once per burst (`in_order`, from
    /// [`SplitQueue::is_in_order`] at the burst's start: a burst does not change it).
    #[inline(always)]
    pub fn nth_free_in(&self, c: &Cursor, d: usize, in_order: bool) -> u16 {
        debug_assert!(d < c.nfree);
        debug_assert!(in_order == self.in_order);
        if in_order {
            c.avail_idx.wrapping_add(d as u16) & (N as u16 - 1)
        } else {
            self.free[c.nfree.wrapping_sub(1 + d) & (N - 1)] & (N as u16 - 1)
        }
    }

    /// [`SplitQueue::nth_free_in`] for the burst's `d`-th take, posted at avail position
    /// `a` (`avail_idx + d`, carried by the caller): in in-order mode the id is the avail
    /// slot's, with no add.
    #[inline(always)]
    pub fn nth_free_at(&self, c: &Cursor, d: usize, a: usize, in_order: bool) -> u16 {
        debug_assert!(a & (N - 1) == (usize::from(c.avail_idx) + d) & (N - 1));
        if in_order {
            debug_assert!(d < c.nfree && self.in_order);
            (a & (N - 1)) as u16
        } else {
            self.nth_free_in(c, d, false)
        }
    }

    /// [`SplitQueue::nth_free_in`] off in-order mode for any `d` (masked into the free
    /// stack): for `d <` [`SplitQueue::cursor_free`] the descriptor the burst's `d`-th take
    /// gets; past them, some id the caller must not use (a chain's last link, rewritten
    /// before it is published).
    #[inline(always)]
    pub fn nth_free_any(&self, c: &Cursor, d: usize) -> u16 {
        debug_assert!(!self.in_order);
        self.free[c.nfree.wrapping_sub(1 + d) & (N - 1)] & (N as u16 - 1)
    }

    /// Write descriptor `id` (one the driver owns: taken off the free stack by the burst,
    /// [`SplitQueue::nth_free`]) as a device-readable buffer, continuing in `next` when
    /// `Some` (`VIRTQ_DESC_F_NEXT`, §2.7.5). Plain stores, seen by the device after
    /// [`SplitQueue::publish`].
    #[inline(always)]
    pub fn write_desc(&self, id: u16, addr: u64, len: u32, next: Option<u16>) {
        self.rings().write_desc(id, addr, len, next);
    }

    /// Make descriptor `id` (a chain's head, written with [`SplitQueue::write_desc`]) the
    /// burst's `a`-th available entry; the cursor moves once ([`SplitQueue::staged`]).
    #[inline(always)]
    pub fn avail_nth(&self, c: &Cursor, a: usize, id: u16) {
        self.rings().avail_nth(c, a, id);
    }

    /// The `i`-th used element's id after the cursor (see [`SplitQueue::pop_nth`]).
    #[inline(always)]
    pub fn pop_nth_id(&self, c: &Cursor, i: usize) -> u32 {
        self.rings().pop_nth_id(c, i)
    }

    /// Give descriptor `id` back as the burst's `k`-th release: it goes `k` entries above the
    /// cursor's free-stack top; the cursor moves once ([`SplitQueue::released`]). Only for
    /// ids the driver took off the stack (then `nfree + k < N`).
    #[inline(always)]
    pub fn release_nth(&mut self, c: &Cursor, k: usize, id: u16) {
        debug_assert!(c.nfree + k < N);
        debug_assert!(!self.in_order, "release_nth is the free-stack path");
        self.free[(c.nfree + k) & (N - 1)] = id;
    }

    /// After a burst gave `k` descriptors back with [`SplitQueue::release_nth`].
    #[inline(always)]
    pub fn released(c: &mut Cursor, k: usize) {
        c.nfree = (c.nfree + k).min(N);
    }

    /// [`SplitQueue::release_in`] on a queue known not to be in in-order mode (an RX queue,
    /// or a TX queue with chains in flight): no mode test.
    #[inline(always)]
    pub fn release_in_stack(&mut self, c: &mut Cursor, id: u16) {
        debug_assert!(!self.in_order, "release_in_stack is the free-stack path");
        if c.nfree < N {
            self.free[c.nfree] = id;
            c.nfree += 1;
        }
    }

    /// [`SplitQueue::release`] inside a burst.
    #[inline(always)]
    pub fn release_in(&mut self, c: &mut Cursor, id: u16) {
        if self.in_order {
            if c.nfree < N && usize::from(id) == self.oldest_in_flight(c.avail_idx, c.nfree) {
                c.nfree += 1;
                return;
            }
            self.materialize_free(c.avail_idx, c.nfree);
        }
        self.release_in_stack(c, id);
    }

    /// Return descriptor `id` (a token from [`SplitQueue::push`] that came back through
    /// [`SplitQueue::pop_used`]) to the free list.
    ///
    /// # Panics
    /// In debug builds, if `id >= N` or every descriptor is already free (caller bug).
    #[inline]
    pub fn release(&mut self, id: u16) {
        debug_assert!(usize::from(id) < N && self.nfree < N);
        if self.in_order {
            if self.nfree < N
                && usize::from(id) == self.oldest_in_flight(self.avail_idx, self.nfree)
            {
                self.nfree += 1;
                return;
            }
            self.leave_in_order();
        }
        if self.nfree < N {
            self.free[self.nfree] = id;
            self.nfree += 1;
        }
    }

    /// Give this queue indirect descriptor tables ([`Indirect`], §2.7.5.3), once the driver
    /// negotiated `VIRTIO_F_INDIRECT_DESC` (§6): one DMA allocation of `16 *
    /// INDIRECT_MAX * N` bytes (16 KiB for 256 descriptors). Returns whether the queue has
    /// them (no memory: it goes on without, frames of several pages as descriptor chains).
    pub fn enable_indirect(&mut self) -> bool {
        if self.indirect.is_some() {
            return true;
        }
        let pages = Indirect::<N, INDIRECT_MAX>::BYTES.div_ceil(PAGE_SIZE);
        let (p, v) = H::dma_alloc(pages, BufferDirection::DriverToDevice);
        if p == 0 {
            return false;
        }
        let ind = Indirect {
            phys: p,
            virt: v.cast(),
        };
        self.indirect = Some((ind, p, v, pages));
        true
    }

    /// The queue's indirect tables, if [`SplitQueue::enable_indirect`] gave it some.
    #[inline(always)]
    pub fn indirect(&self) -> Option<Indirect<N, INDIRECT_MAX>> {
        self.indirect.map(|(i, ..)| i)
    }

    /// Allow in-order mode on this queue (a TX queue: one descriptor per avail slot, except
    /// chains) and enter it now if every descriptor is free. In-order mode needs no
    /// `VIRTIO_F_IN_ORDER` (§2.7.3, which QEMU 7.2's virtio-net does not offer): each used
    /// element's id is checked against the oldest descriptor in flight, and the first one that
    /// differs rebuilds the free stack ([`SplitQueue::leave_in_order`]), so any completion
    /// order stays correct. What it saves: the free-stack load per post and the free-stack
    /// store per completion (DPDK's `virtqueue_enqueue_xmit_inorder` does the same with the
    /// feature negotiated).
    pub fn enable_in_order(&mut self) {
        self.in_order_ok = true;
        self.try_in_order();
    }

    /// Enter in-order mode if it is allowed and every descriptor is free (then the ids of the
    /// next avail slots are free whatever the avail index). Cheap; callers try after a reclaim.
    #[inline(always)]
    pub fn try_in_order(&mut self) {
        if self.in_order_ok && !self.in_order && self.nfree == N {
            self.in_order = true;
        }
    }

    /// Whether the queue is in in-order mode now (a burst reads it once).
    #[inline(always)]
    pub fn is_in_order(&self) -> bool {
        self.in_order
    }

    /// The id of the oldest descriptor in flight in in-order mode, for a queue at avail index
    /// `avail_idx` with `nfree` free descriptors (the one `N - nfree` posts ago); the next
    /// completion in order has this id.
    #[inline(always)]
    pub fn oldest_in_flight(&self, avail_idx: u16, nfree: usize) -> usize {
        (usize::from(avail_idx) + nfree) & (N - 1)
    }

    /// [`SplitQueue::oldest_in_flight`] at a burst's cursor, plus `k`.
    #[inline(always)]
    pub fn oldest_in_flight_at(&self, c: &Cursor, k: usize) -> usize {
        self.oldest_in_flight(c.avail_idx, c.nfree + k)
    }

    /// Leave in-order mode (rebuild the free stack from the implicit free range); a no-op
    /// outside it. Before any operation that takes descriptors out of avail order (chains).
    #[inline]
    pub fn leave_in_order(&mut self) {
        if self.in_order {
            self.materialize_free(self.avail_idx, self.nfree);
        }
    }

    /// Leave in-order mode inside a burst whose cursor has avail index `avail_idx` and `nfree`
    /// free descriptors (counting any released in order but not yet added to the cursor): the
    /// free stack gets the ids `avail_idx .. avail_idx + nfree` (mod N).
    #[cold]
    #[inline(never)]
    pub fn materialize_free(&mut self, avail_idx: u16, nfree: usize) {
        debug_assert!(nfree <= N);
        for j in 0..nfree.min(N) {
            self.free[j] = avail_idx.wrapping_add(j as u16) & (N as u16 - 1);
        }
        self.in_order = false;
    }

    /// Ask for an interrupt on the next used buffer, before the driver sleeps: with EVENT_IDX
    /// set `used_event` to the driver's used index (§2.7.10), else clear
    /// `VIRTQ_AVAIL_F_NO_INTERRUPT`. Returns `true` if used buffers are already waiting (the
    /// device may have missed the request): then the caller must not sleep.
    #[inline]
    pub fn arm_interrupt(&mut self) -> bool {
        // SAFETY: avail ring flags / used_event and used->idx, ours until drop.
        unsafe {
            if self.event_idx {
                self.avail.add(2 + N).write_volatile(self.last_used);
            } else {
                self.avail.write_volatile(0);
            }
            // The request must be visible before we look at the used index again (Linux
            // `virtqueue_enable_cb`: virtio_mb), or a buffer used in between is missed.
            fence(Ordering::SeqCst);
            self.used.add(2).cast::<u16>().read_volatile() != self.last_used
        }
    }

    /// Tell the device not to interrupt: we poll. With EVENT_IDX, park `used_event` just behind
    /// the used index (§2.7.10: the device interrupts only when its index crosses it); else set
    /// `VIRTQ_AVAIL_F_NO_INTERRUPT` (§2.7.6).
    #[inline]
    pub fn suppress_interrupts(&mut self) {
        // SAFETY: avail ring flags (offset 0) and used_event (after ring[N]), ours until drop.
        unsafe {
            if self.event_idx {
                self.avail
                    .add(2 + N)
                    .write_volatile(self.last_used.wrapping_sub(1));
            } else {
                self.avail.write_volatile(VIRTQ_AVAIL_F_NO_INTERRUPT);
            }
        }
    }
}

impl<H: Hal, const N: usize> Drop for SplitQueue<H, N> {
    fn drop(&mut self) {
        for (p, v, pages) in self.dma {
            // SAFETY: allocations made in `new`; the device was reset before the queue is
            // dropped (see the module docs), so nothing accesses them any more.
            unsafe { H::dma_dealloc(p, v, pages) };
        }
        if let Some((_, p, v, pages)) = self.indirect.take() {
            // SAFETY: the allocation `enable_indirect` made; the device was reset (above).
            unsafe { H::dma_dealloc(p, v, pages) };
        }
    }
}

#[cfg(test)]
mod tests;
