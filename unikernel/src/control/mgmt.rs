//! The management plane on smoltcp: the router's address on one port answers ARP and ICMP echo
//! and serves `GET /metrics` (Prometheus text exposition format 0.0.4) on TCP port 9100.
//!
//! Frames for the management address are copied out of the fast path into a small RX queue
//! (their pages are recycled at once); smoltcp's replies are copied into pool pages by the
//! forwarder. Work is bounded per poll: at most [`INGRESS_PER_POLL`] frames enter smoltcp, and
//! a full queue drops (and counts) instead of growing, so management load cannot starve
//! forwarding. No heap: all storage is carved from the page allocator at boot.
//!
//! [`SOCKETS`] TCP sockets listen on the metrics port, each with its own request buffer and
//! timers; they share one response buffer, held by one connection at a time. A connection is
//! reset (RST) without a complete request [`REQUEST_TIMEOUT_MS`] after its SYN, without
//! progress for [`IDLE_TIMEOUT_MS`], or when it holds the response buffer longer than
//! [`RESPONSE_TIMEOUT_MS`]; a FIN before a complete request gets our FIN back (RFC 9293
//! §3.6: CLOSE-WAIT → LAST-ACK). So a slow or idle client holds one socket for at most those
//! times, and never the fast path (smoltcp's work per poll is bounded as above).

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
/// TCP receive buffer of each socket (bytes): an HTTP request line and headers.
const TCP_RX: usize = 4096;
/// TCP send buffer of each socket (bytes).
const TCP_TX: usize = 16384;
/// Largest metrics response body (bytes); a longer one is cut at a line boundary and counted.
/// One buffer shared by every socket: one response is being sent at a time, the others wait.
pub const BODY_MAX: usize = 64 * 1024;
/// TCP sockets listening on [`METRICS_PORT`]: this many clients are served at once; one more
/// gets RST from smoltcp until a socket is free again.
pub const SOCKETS: usize = 4;
/// Largest request kept (bytes): the request line and headers; a longer one is answered as it
/// stands (only `GET /metrics ` at its start counts).
const REQ_MAX: usize = 512;
/// Request timeout (ms): a connection that has not sent a complete request (up to the blank
/// line that ends the headers, RFC 9112 §2.1) this long after its SYN is reset.
pub const REQUEST_TIMEOUT_MS: i64 = 5_000;
/// Idle timeout (ms): a connection that made no progress (no byte received, none of our bytes
/// acknowledged) this long is reset, in any state but LISTEN (a stalled response reader, a peer
/// that never acknowledges our FIN).
pub const IDLE_TIMEOUT_MS: i64 = 10_000;
/// Response timeout (ms): the connection holding the shared response buffer must have taken
/// the whole response into its send buffer this long after it was written, or it is reset.
pub const RESPONSE_TIMEOUT_MS: i64 = 5_000;

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
    /// Connections reset for taking longer than [`REQUEST_TIMEOUT_MS`] to send a request.
    pub request_timeouts: u64,
    /// Connections reset after [`IDLE_TIMEOUT_MS`] without progress.
    pub idle_timeouts: u64,
    /// Connections reset for not taking their whole response into the send buffer within
    /// [`RESPONSE_TIMEOUT_MS`] (the shared response buffer is then free for the next one).
    pub response_timeouts: u64,
    /// Connections closed (our FIN) because the client's FIN came before a complete request.
    pub fin_before_request: u64,
}

/// One TCP socket of the metrics service and its request state.
struct Conn {
    handle: SocketHandle,
    /// The request received so far (up to [`REQ_MAX`] bytes).
    req: heapless::Vec<u8, REQ_MAX>,
    /// Uptime (ms) when the connection left LISTEN (SYN received); `None` while listening.
    since_ms: Option<i64>,
    /// Uptime (ms) of the last progress: a byte received or one of ours acknowledged.
    progress_ms: i64,
    /// Our bytes not yet acknowledged at the last look (a decrease is progress).
    send_queue: usize,
    /// The request is complete (or full): answer it when the response buffer is free.
    complete: bool,
    /// The response has been queued in full and the socket closed on our side.
    done: bool,
}

impl Conn {
    fn reset(&mut self) {
        self.req.clear();
        self.since_ms = None;
        self.send_queue = 0;
        self.complete = false;
        self.done = false;
    }
}

/// The management interface.
pub struct Mgmt {
    /// The port it lives on.
    pub port: usize,
    iface: Interface,
    dev: MgmtDev,
    sockets: SocketSet<'static>,
    conns: [Conn; SOCKETS],
    /// The one response buffer, and which connection it holds a response for.
    body: &'static mut [u8],
    body_owner: Option<usize>,
    /// Uptime (ms) when `body_owner` took the buffer.
    body_since_ms: i64,
    body_len: usize,
    body_sent: usize,
    counters: MgmtCounters,
}

/// Storage the management plane needs, in bytes (carved from one allocation at boot).
pub const STORAGE_BYTES: usize =
    (RX_QUEUE + TX_QUEUE) * FRAME_MAX + SOCKETS * (TCP_RX + TCP_TX) + BODY_MAX;

// One order-6 block (256 KiB), as with one socket: four sockets cost no more memory.
const _: () = assert!(STORAGE_BYTES <= 64 * 4096);

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
        let (mut sock_mem, body) = rest.split_at_mut(SOCKETS * (TCP_RX + TCP_TX));
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
        let storage: &'static mut [SocketStorage<'static>; SOCKETS] = spin::MutexGuard::leak(
            MGMT_SOCKETS
                .call_once(|| spin::Mutex::new([SocketStorage::EMPTY; SOCKETS]))
                .lock(),
        );
        let mut sockets = SocketSet::new(&mut storage[..]);
        let conns = core::array::from_fn(|_| {
            let (rx, rest) = core::mem::take(&mut sock_mem).split_at_mut(TCP_RX);
            let (tx, rest) = rest.split_at_mut(TCP_TX);
            sock_mem = rest;
            let mut sock = tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
            let _ = sock.listen(METRICS_PORT);
            Conn {
                handle: sockets.add(sock),
                req: heapless::Vec::new(),
                since_ms: None,
                progress_ms: now_ms,
                send_queue: 0,
                complete: false,
                done: false,
            }
        });
        Mgmt {
            port,
            iface,
            dev,
            sockets,
            conns,
            body,
            body_owner: None,
            body_since_ms: now_ms,
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
        self.serve(now_ms, metrics);
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

    /// Serve every socket: timeouts and FINs first, then requests; the first complete request
    /// while the response buffer is free gets it (`metrics` runs at most once per poll).
    fn serve(&mut self, now_ms: i64, metrics: impl FnOnce(&mut dyn Write, MgmtCounters)) {
        let mut metrics = Some(metrics);
        for i in 0..SOCKETS {
            self.serve_one(i, now_ms, &mut metrics);
        }
    }

    fn serve_one(
        &mut self,
        i: usize,
        now_ms: i64,
        metrics: &mut Option<impl FnOnce(&mut dyn Write, MgmtCounters)>,
    ) {
        let conn = &mut self.conns[i];
        let sock = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        let state = sock.state();
        // Free again: re-listen, unless an RST (after `abort`) still has to go out.
        let aborting = state == tcp::State::Closed && sock.remote_endpoint().is_some();
        if !sock.is_open() && !aborting {
            conn.reset();
            if self.body_owner == Some(i) {
                self.body_owner = None;
            }
            let _ = sock.listen(METRICS_PORT);
            return;
        }
        if state == tcp::State::Listen || aborting {
            return;
        }
        if conn.since_ms.is_none() {
            conn.since_ms = Some(now_ms);
            conn.progress_ms = now_ms;
        }
        let since = conn.since_ms.unwrap_or(now_ms);
        // Progress: our bytes acknowledged.
        let queued = sock.send_queue();
        if queued < conn.send_queue {
            conn.progress_ms = now_ms;
        }
        conn.send_queue = queued;
        // Read what the client sent (bytes past REQ_MAX are read and dropped).
        if !conn.complete && sock.can_recv() {
            let mut buf = [0u8; REQ_MAX];
            if let Ok(n) = sock.recv_slice(&mut buf) {
                if n > 0 {
                    conn.progress_ms = now_ms;
                }
                let room = conn.req.capacity() - conn.req.len();
                let _ = conn.req.extend_from_slice(&buf[..n.min(room)]);
            }
            conn.complete = conn.req.windows(4).any(|w| w == b"\r\n\r\n") || conn.req.is_full();
        }
        if !conn.complete && state == tcp::State::CloseWait && !sock.can_recv() {
            // The client's FIN came before a complete request: nothing to answer, our FIN back.
            self.counters.fin_before_request += 1;
            sock.close();
            conn.complete = true;
            conn.done = true;
            return;
        }
        if !conn.complete && now_ms - since >= REQUEST_TIMEOUT_MS {
            self.counters.request_timeouts += 1;
            sock.abort();
            return;
        }
        if now_ms - conn.progress_ms >= IDLE_TIMEOUT_MS {
            self.counters.idle_timeouts += 1;
            sock.abort();
            return;
        }
        if conn.done || !conn.complete {
            return;
        }
        if self.body_owner.is_none() {
            let Some(metrics) = metrics.take() else {
                return;
            };
            self.respond(i, now_ms, metrics);
        }
        if self.body_owner == Some(i) {
            self.send_body(i, now_ms);
        }
    }

    /// Move what connection `i` (holding the response buffer) can take of the response into its
    /// send buffer; close it when all is queued, reset it past [`RESPONSE_TIMEOUT_MS`].
    fn send_body(&mut self, i: usize, now_ms: i64) {
        let conn = &mut self.conns[i];
        let sock = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        if now_ms - self.body_since_ms >= RESPONSE_TIMEOUT_MS {
            // A reader too slow to take the response holds the one buffer no longer.
            self.counters.response_timeouts += 1;
            self.body_owner = None;
            sock.abort();
            return;
        }
        if self.body_sent < self.body_len && sock.may_send() {
            if let Ok(n) = sock.send_slice(&self.body[self.body_sent..self.body_len]) {
                self.body_sent += n;
            }
        }
        if self.body_sent >= self.body_len {
            // Queued in full: the buffer is free for the next response, the socket sends the
            // rest and our FIN.
            sock.close();
            conn.done = true;
            self.body_owner = None;
        }
    }

    /// Write the response to connection `i`'s request into the shared buffer, which `i` then
    /// holds until the response is in its send buffer.
    fn respond(
        &mut self,
        i: usize,
        now_ms: i64,
        metrics: impl FnOnce(&mut dyn Write, MgmtCounters),
    ) {
        let mut w = BodyWriter {
            buf: self.body,
            len: 0,
            truncated: false,
        };
        if self.conns[i].req.starts_with(b"GET /metrics ") {
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
        self.body_owner = Some(i);
        self.body_since_ms = now_ms;
        self.body_len = w.len;
        self.body_sent = 0;
    }
}

static MGMT_SOCKETS: spin::Once<spin::Mutex<[SocketStorage<'static>; SOCKETS]>> = spin::Once::new();

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
