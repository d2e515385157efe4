//! The management plane on smoltcp: the router's address on one port answers ARP and ICMP echo
//! and serves `GET /metrics` (Prometheus text exposition format 0.0.4) on TCP port 9100.
//!
//! Frames for the management address are copied out of the fast path into a small RX queue
//! (their pages are recycled at once); smoltcp's replies are copied into pool pages by the
//! forwarder. Work is bounded per poll: at most [`INGRESS_PER_POLL`] frames enter smoltcp, and
//! a full queue drops (and counts) instead of growing, so management load cannot starve
//! forwarding. No heap: all storage is carved from the page allocator at boot.

use core::fmt::Write;
use smoltcp::iface::{Config as IfConfig, Interface, SocketHandle, SocketSet, SocketStorage};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

/// TCP port of the metrics service (the Prometheus node exporter's port).
pub const METRICS_PORT: u16 = 9100;
/// Frames queued towards smoltcp; more are dropped and counted (`mgmt_rx_dropped`).
pub const RX_QUEUE: usize = 16;
/// Frames smoltcp may queue for transmission before the forwarder picks them up.
pub const TX_QUEUE: usize = 16;
/// Largest frame handled (Ethernet header + 1500).
pub const FRAME_MAX: usize = 1514;
/// Frames fed to smoltcp per poll.
pub const INGRESS_PER_POLL: usize = 4;
/// TCP receive buffer (bytes): an HTTP request line and headers.
const TCP_RX: usize = 4096;
/// TCP send buffer (bytes).
const TCP_TX: usize = 16384;
/// Largest metrics response body (bytes); a longer one is cut at a line boundary and counted.
pub const BODY_MAX: usize = 64 * 1024;

/// A fixed ring of frames.
struct FrameQueue<const N: usize> {
    buf: &'static mut [[u8; FRAME_MAX]],
    len: [usize; N],
    head: usize,
    count: usize,
}

impl<const N: usize> FrameQueue<N> {
    fn push(&mut self, f: &[u8]) -> bool {
        if self.count == N || f.len() > FRAME_MAX {
            return false;
        }
        let i = (self.head + self.count) % N;
        self.buf[i][..f.len()].copy_from_slice(f);
        self.len[i] = f.len();
        self.count += 1;
        true
    }

    fn front(&self) -> Option<&[u8]> {
        (self.count > 0).then(|| &self.buf[self.head][..self.len[self.head]])
    }

    fn pop(&mut self) {
        if self.count > 0 {
            self.head = (self.head + 1) % N;
            self.count -= 1;
        }
    }
}

/// smoltcp's view of the management port.
struct MgmtDev {
    rx: FrameQueue<RX_QUEUE>,
    tx: FrameQueue<TX_QUEUE>,
    tx_dropped: u64,
    /// The frame being received (moved out of `rx` so the RX and TX tokens borrow disjoint
    /// fields).
    cur: [u8; FRAME_MAX],
}

struct MgmtRx<'a>(&'a [u8]);
struct MgmtTx<'a> {
    q: &'a mut FrameQueue<TX_QUEUE>,
    dropped: &'a mut u64,
}

impl RxToken for MgmtRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl TxToken for MgmtTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = [0u8; FRAME_MAX];
        let len = len.min(FRAME_MAX);
        let r = f(&mut frame[..len]);
        if !self.q.push(&frame[..len]) {
            *self.dropped += 1;
        }
        r
    }
}

impl Device for MgmtDev {
    type RxToken<'a> = MgmtRx<'a>;
    type TxToken<'a> = MgmtTx<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(MgmtRx<'_>, MgmtTx<'_>)> {
        let n = {
            let f = self.rx.front()?;
            self.cur[..f.len()].copy_from_slice(f);
            f.len()
        };
        self.rx.pop();
        let tx = MgmtTx {
            q: &mut self.tx,
            dropped: &mut self.tx_dropped,
        };
        Some((MgmtRx(&self.cur[..n]), tx))
    }

    fn transmit(&mut self, _now: Instant) -> Option<MgmtTx<'_>> {
        (self.tx.count < TX_QUEUE).then_some(MgmtTx {
            q: &mut self.tx,
            dropped: &mut self.tx_dropped,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = FRAME_MAX;
        c.max_burst_size = Some(1);
        c
    }
}

/// Counters of the management plane.
#[derive(Copy, Clone, Debug, Default)]
pub struct MgmtCounters {
    /// Frames handed to smoltcp.
    pub rx: u64,
    /// Frames dropped because the RX queue was full.
    pub rx_dropped: u64,
    /// Frames smoltcp sent.
    pub tx: u64,
    /// Frames smoltcp wanted to send while the TX queue was full.
    pub tx_dropped: u64,
    /// `/metrics` responses served.
    pub http_requests: u64,
}

/// The management interface.
pub struct Mgmt {
    /// The port it lives on.
    pub port: usize,
    iface: Interface,
    dev: MgmtDev,
    sockets: SocketSet<'static>,
    http: SocketHandle,
    req: heapless::Vec<u8, 512>,
    body: &'static mut [u8],
    body_len: usize,
    body_sent: usize,
    counters: MgmtCounters,
}

/// Storage the management plane needs, in bytes (carved from one allocation at boot).
pub const STORAGE_BYTES: usize = (RX_QUEUE + TX_QUEUE) * FRAME_MAX + TCP_RX + TCP_TX + BODY_MAX;

impl Mgmt {
    /// A management interface with MAC `mac` and address `addr/len` on `port`, using
    /// `storage` (at least [`STORAGE_BYTES`], never freed).
    pub fn new(
        port: usize,
        mac: [u8; 6],
        addr: core::net::Ipv4Addr,
        len: u8,
        storage: &'static mut [u8],
        now_ms: i64,
        seed: u64,
    ) -> Mgmt {
        assert!(
            storage.len() >= STORAGE_BYTES,
            "management storage too small"
        );
        let (frames, rest) = storage.split_at_mut((RX_QUEUE + TX_QUEUE) * FRAME_MAX);
        let (tcp_rx, rest) = rest.split_at_mut(TCP_RX);
        let (tcp_tx, body) = rest.split_at_mut(TCP_TX);
        let (rxf, txf) = frames.split_at_mut(RX_QUEUE * FRAME_MAX);
        let as_frames = |b: &'static mut [u8]| -> &'static mut [[u8; FRAME_MAX]] {
            let n = b.len() / FRAME_MAX;
            // SAFETY: `b` is exclusively ours for 'static; [u8; N] has alignment 1, and n
            // arrays of FRAME_MAX bytes fit in it exactly.
            unsafe { core::slice::from_raw_parts_mut(b.as_mut_ptr().cast(), n) }
        };
        let mut dev = MgmtDev {
            rx: FrameQueue {
                buf: as_frames(rxf),
                len: [0; RX_QUEUE],
                head: 0,
                count: 0,
            },
            tx: FrameQueue {
                buf: as_frames(txf),
                len: [0; TX_QUEUE],
                head: 0,
                count: 0,
            },
            tx_dropped: 0,
            cur: [0; FRAME_MAX],
        };
        let mut cfg = IfConfig::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        cfg.random_seed = seed;
        let mut iface = Interface::new(cfg, &mut dev, Instant::from_millis(now_ms));
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::Ipv4(addr), len));
        });
        // Socket slots: leaked once (the guard is never dropped), live as long as the kernel.
        let storage: &'static mut [SocketStorage<'static>; 2] = spin::MutexGuard::leak(
            MGMT_SOCKETS
                .call_once(|| spin::Mutex::new([SocketStorage::EMPTY; 2]))
                .lock(),
        );
        let mut sockets = SocketSet::new(&mut storage[..]);
        let mut tcp = tcp::Socket::new(
            tcp::SocketBuffer::new(tcp_rx),
            tcp::SocketBuffer::new(tcp_tx),
        );
        let _ = tcp.listen(METRICS_PORT);
        let http = sockets.add(tcp);
        Mgmt {
            port,
            iface,
            dev,
            sockets,
            http,
            req: heapless::Vec::new(),
            body,
            body_len: 0,
            body_sent: 0,
            counters: MgmtCounters::default(),
        }
    }

    /// Queue a frame for smoltcp (a copy). Returns `false` (and counts it) if the queue is full.
    pub fn push_rx(&mut self, frame: &[u8]) -> bool {
        let ok = self.dev.rx.push(frame);
        if ok {
            self.counters.rx += 1;
        } else {
            self.counters.rx_dropped += 1;
        }
        ok
    }

    /// Frames waiting for smoltcp.
    pub fn rx_pending(&self) -> usize {
        self.dev.rx.count
    }

    /// Run smoltcp for a bounded amount of work and serve the HTTP socket (`metrics` writes the
    /// response body when a request is complete). Then call [`Mgmt::drain_tx`].
    pub fn poll(&mut self, now_ms: i64, metrics: impl FnOnce(&mut dyn Write, MgmtCounters)) {
        let now = Instant::from_millis(now_ms);
        for _ in 0..INGRESS_PER_POLL {
            if self.dev.rx.count == 0 {
                break;
            }
            let _ = self
                .iface
                .poll_ingress_single(now, &mut self.dev, &mut self.sockets);
        }
        self.serve(metrics);
        let _ = self
            .iface
            .poll_egress(now, &mut self.dev, &mut self.sockets);
        self.iface.poll_maintenance(now);
    }

    /// Hand every frame smoltcp produced to `send` (which copies it into a page for TX).
    pub fn drain_tx(&mut self, mut send: impl FnMut(&[u8])) {
        while let Some(f) = self.dev.tx.front() {
            send(f);
            self.counters.tx += 1;
            self.dev.tx.pop();
        }
    }

    fn serve(&mut self, metrics: impl FnOnce(&mut dyn Write, MgmtCounters)) {
        let sock = self.sockets.get_mut::<tcp::Socket>(self.http);
        if !sock.is_open() {
            self.req.clear();
            self.body_len = 0;
            self.body_sent = 0;
            let _ = sock.listen(METRICS_PORT);
            return;
        }
        if self.body_len == 0 && sock.may_recv() {
            let mut buf = [0u8; 512];
            if let Ok(n) = sock.recv_slice(&mut buf) {
                let room = self.req.capacity() - self.req.len();
                let _ = self.req.extend_from_slice(&buf[..n.min(room)]);
            }
            let complete = self.req.windows(4).any(|w| w == b"\r\n\r\n");
            if complete || self.req.is_full() {
                let ok = self.req.starts_with(b"GET /metrics ");
                let mut w = BodyWriter {
                    buf: self.body,
                    len: 0,
                    truncated: false,
                };
                if ok {
                    let _ = w.write_str(
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n",
                    );
                    // Counted first: the response reports itself.
                    self.counters.http_requests += 1;
                    let c = MgmtCounters {
                        tx_dropped: self.dev.tx_dropped,
                        ..self.counters
                    };
                    metrics(&mut w, c);
                } else {
                    let _ = w.write_str(
                        "HTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\nonly GET /metrics\n",
                    );
                }
                self.body_len = w.len.max(1);
            }
        }
        if self.body_len > 0 && self.body_sent < self.body_len && sock.may_send() {
            if let Ok(n) = sock.send_slice(&self.body[self.body_sent..self.body_len]) {
                self.body_sent += n;
            }
            if self.body_sent >= self.body_len {
                sock.close();
            }
        }
    }
}

static MGMT_SOCKETS: spin::Once<spin::Mutex<[SocketStorage<'static>; 2]>> = spin::Once::new();

/// A `fmt::Write` into a fixed buffer that stops at the last complete line when full.
struct BodyWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    truncated: bool,
}

impl Write for BodyWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.truncated || self.len + s.len() > self.buf.len() {
            self.truncated = true;
            return Ok(());
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

impl unikernel::dataplane::MgmtPlane for Mgmt {
    type Counters = MgmtCounters;

    fn port(&self) -> usize {
        self.port
    }

    fn push_rx(&mut self, frame: &[u8]) -> bool {
        Mgmt::push_rx(self, frame)
    }

    fn rx_pending(&self) -> usize {
        Mgmt::rx_pending(self)
    }

    fn rx_room(&self) -> usize {
        RX_QUEUE.saturating_sub(Mgmt::rx_pending(self))
    }

    fn poll(&mut self, now_ms: i64, metrics: &mut dyn FnMut(&mut dyn Write, &MgmtCounters)) {
        Mgmt::poll(self, now_ms, |w, c| metrics(w, &c))
    }

    fn drain_tx(&mut self, send: &mut dyn FnMut(&[u8])) {
        Mgmt::drain_tx(self, send)
    }
}
