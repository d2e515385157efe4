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
//!
//! The HTTP itself (request heads, their limits, every refusal's status, `PUT /routes`'s
//! rules and its body's line checks) is [`crate::http`]'s, sans I/O and host-tested; this file
//! feeds it the bytes each socket received and sends what it answers. A head is parsed as its
//! bytes arrive (up to [`http::HEAD_MAX`]; a longer one is 431, a long request line 414, bad
//! syntax 400, another path 404, another method 405), so a refusal is an HTTP status, never a
//! wait for bytes that cannot fit.
//!
//! `PUT /routes` (HTTP/1.0 or 1.1) replaces the routes file's routes, in the routes file's
//! format (`PREFIX/LEN,GATEWAY` per line, `#` comments). Refused with 403 unless
//! `mgmt_token=` is set, 401 without `Authorization: Bearer TOKEN`, 411 without
//! `Content-Length`, 413 above [`http::PUT_MAX`]. The body streams into a virtual range of
//! its `Content-Length` ([`PutUpload`]: zeroed order-0 pages mapped as the body arrives, at
//! most `fib::UPLOAD_STEP_PAGES` per poll; given back as many per poll once the upload ends
//! or, once published, when the next upload replaces it); each line is checked as it arrives
//! ([`http::PutBody`]; bounded work per poll: what one socket buffer holds), so a bad one
//! is answered 400 naming its line number. A complete, clean body is handed to the boot CPU's
//! housekeeping ([`fib::submit_put`]): the rebuild (the same build, publish and retire path as
//! `routes commit`) runs there, at the quiescent point, never inside smoltcp's poll; the
//! connection waits (no timeout applies meanwhile) and is answered 200 with the new
//! generation, routes and build time, or 500/503 with the error (the old FIB stays).
//!
//! One upload at a time, decided at the head: while a connection holds a body or waits for
//! its rebuild, another `PUT` is 503 with `Retry-After` before a byte of its body is read, so
//! uploads hold at most one socket and one buffer. While a body streams, the request timeout
//! counts from the last byte received, not from the SYN, so a large upload that makes
//! progress is never cut; one that receives fewer than [`BODY_MIN_BYTES`] in a
//! [`BODY_RATE_WINDOW_MS`] window is answered 408. A line over [`http::LINE_MAX`] is 400 as
//! soon as it passes the cap. After any answer the client's remaining bytes are read and
//! dropped, up to [`DRAIN_MAX`] (then reset), so it can read the answer. Every way an upload
//! ends is counted by result (`netstack::stats::PUT_ROUTES_RESULTS`: a client reset or FIN
//! mid-body is `aborted`, a 408 or a stall `timeout`, a client gone during its rebuild the
//! rebuild's result).
//!
//! `GET /routes` (router mode) answers the published FIB ([`fib::with_published`], core 0)
//! in the console's `routes` forms, `GET /rules` (ACL mode) the published rule set in the
//! rules file's syntax, each after [`http::file_head`] (`ETag: "gen-N"`), cut at
//! [`BODY_MAX`] at a line boundary. A `PUT` whose `If-Match` no longer names the published
//! generation of its file is 412 before its body is read and again once it is complete; a
//! `?check` body is answered once checked (200 or 400) and dropped, nothing built. Every
//! `PUT`, counted, prints one console audit line (client address, result, generation).
//!
//! An image's own network function's files (`PUT /NAME`, `GET /NAME`) go the same way: the
//! body's check and publication are `setup::nf_files`' (a housekeeping job, as `PUT /rules`).
//!
//! Past ~800 lines because smoltcp's device glue (the frame queues and tokens), the connection
//! state machine, `/metrics` and the `PUT /routes` and `PUT /rules` uploads (one at a time,
//! their rate window, the drain after an answer) share the connections and the one response
//! buffer; the HTTP parsing and rules moved out to [`crate::http`] (issue 34 item 5:
//! 1,117 lines before).

use crate::http::{self, Head, PutBody, PutKind, Refusal, Status};
use crate::setup::acl::{self, AclPublished, AclReloadError};
use crate::setup::fib::{self, Published, PutUpload, RebuildFailure};
use crate::setup::nat;
use crate::setup::nf_files::{self, NfPublished, NfPutError};
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
/// Largest frame queued (Ethernet header + 1500); longer ones (jumbo MTU) are processed at
/// once from the caller's buffer ([`Mgmt::rx_now`]) and sent from [`BIG_TX_QUEUE`] slots.
pub const FRAME_MAX: usize = 1514;
/// Largest frame at all: the largest MTU (`mtuN=` ≤ 9000) + the Ethernet header.
pub const JUMBO_FRAME_MAX: usize = 9000 + 14;
/// Frames longer than [`FRAME_MAX`] smoltcp may queue for transmission at once.
pub const BIG_TX_QUEUE: usize = 2;
/// Storage for the jumbo TX slots and their scratch, in bytes (a second allocation, 32 KiB).
pub const JUMBO_STORAGE_BYTES: usize = (BIG_TX_QUEUE + 1) * JUMBO_FRAME_MAX;
/// Frames fed to smoltcp per poll (at most one RX queue's worth).
pub const INGRESS_PER_POLL: usize = 8;
/// TCP receive buffer of each socket (bytes): an HTTP request line and headers, or the window
/// a `PUT /routes` body streams through (read out every poll: ~11 full segments per 10 ms).
const TCP_RX: usize = 16 * 1024;
/// TCP send buffer of each socket (bytes).
const TCP_TX: usize = 16384;
/// Largest metrics response body (bytes); a longer one is cut at a line boundary and counted.
/// One buffer shared by every socket: one response is being sent at a time, the others wait.
pub const BODY_MAX: usize = 64 * 1024;
/// TCP sockets listening on [`METRICS_PORT`]: this many clients are served at once; one more
/// gets RST from smoltcp until a socket is free again.
pub const SOCKETS: usize = 4;
/// What `PUT` may replace (the type is [`http`]'s, which checks a `PUT` against it).
pub use crate::http::PutFiles;

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
/// Bytes read and dropped past a request that was answered or refused (a refused body's
/// rest, a pipelined request) before the connection is reset (counted `drain_limit`): enough
/// for a client to see our answer and stop sending (curl stops at an error response), not
/// enough to hold a socket with an endless body. Once our response is queued, dropped bytes
/// are no longer progress, so the idle timeout bounds the drain's time too.
pub const DRAIN_MAX: usize = 64 * 1024;
/// The window (ms) over which a `PUT` body's rate is checked: a body that received fewer than
/// [`BODY_MIN_BYTES`] in a window (from its head, then window after window) is answered 408
/// and closed (counted `timeout`).
pub const BODY_RATE_WINDOW_MS: i64 = 5_000;
/// The least a `PUT` body must receive per [`BODY_RATE_WINDOW_MS`] (bytes): 4 KiB per 5 s,
/// ~0.8 KB/s. An honest client under TCG streams ~170 KB/s (README), 200× more; a client
/// trickling a byte every 3 s (which the request timeout alone lets through) is cut within
/// 5 s.
pub const BODY_MIN_BYTES: usize = 4096;

/// A fixed ring of `N` frames in slots of `slot` bytes.
struct FrameQueue<const N: usize> {
    buf: &'static mut [u8],
    slot: usize,
    len: [usize; N],
    head: usize,
    count: usize,
}

impl<const N: usize> FrameQueue<N> {
    /// `N` slots of `slot` bytes each, carved from the front of `buf`; the rest is returned.
    fn carve(buf: &'static mut [u8], slot: usize) -> (Self, &'static mut [u8]) {
        let (mine, rest) = buf.split_at_mut((N * slot).min(buf.len()));
        let q = FrameQueue {
            slot: if mine.len() == N * slot { slot } else { 0 },
            buf: mine,
            len: [0; N],
            head: 0,
            count: 0,
        };
        (q, rest)
    }

    fn has_room(&self) -> bool {
        self.count < N
    }

    fn push(&mut self, f: &[u8]) -> bool {
        if self.count == N || f.len() > self.slot {
            return false;
        }
        let i = (self.head + self.count) % N;
        self.buf[i * self.slot..][..f.len()].copy_from_slice(f);
        self.len[i] = f.len();
        self.count += 1;
        true
    }

    /// The next free slot's first `len` bytes (`len` ≤ the slot), to build a frame in;
    /// [`FrameQueue::commit`] queues it.
    fn next_slot(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.count == N || len > self.slot {
            return None;
        }
        let i = (self.head + self.count) % N;
        Some(&mut self.buf[i * self.slot..][..len])
    }

    /// Queue the frame of `len` bytes built in [`FrameQueue::next_slot`].
    fn commit(&mut self, len: usize) {
        let i = (self.head + self.count) % N;
        self.len[i] = len;
        self.count += 1;
    }

    fn front(&self) -> Option<&[u8]> {
        (self.count > 0).then(|| &self.buf[self.head * self.slot..][..self.len[self.head]])
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
    /// Frames longer than [`FRAME_MAX`] smoltcp produced (jumbo MTU), in slots of the frame
    /// limit; no slots when the limit is [`FRAME_MAX`].
    big: FrameQueue<BIG_TX_QUEUE>,
    /// Where a big frame is built when `big` is full (never with the token gating in
    /// [`Device::receive`]/[`Device::transmit`]; kept so that a token always has room).
    big_scratch: &'static mut [u8],
    tx_dropped: u64,
    /// Largest frame in or out (bytes, Ethernet header included): the port's MTU + 14,
    /// capped by the storage.
    frame_max: usize,
    /// The frame being received (moved out of `rx` so the RX and TX tokens borrow disjoint
    /// fields).
    cur: [u8; FRAME_MAX],
    /// A frame lent by [`Mgmt::rx_now`] for one `poll_ingress_single`: its address and
    /// length. Valid only while set.
    direct: Option<(*const u8, usize)>,
}

impl MgmtDev {
    /// Whether a TX token may be handed out: room for a big frame too (smoltcp asks for the
    /// length only when it uses the token).
    fn tx_room(&self) -> bool {
        self.big.slot == 0 || self.big.has_room()
    }
}

struct MgmtRx<'a>(&'a [u8]);
struct MgmtTx<'a> {
    q: &'a mut FrameQueue<TX_QUEUE>,
    big: &'a mut FrameQueue<BIG_TX_QUEUE>,
    scratch: &'a mut [u8],
    dropped: &'a mut u64,
}

impl RxToken for MgmtRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl TxToken for MgmtTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        if len > FRAME_MAX && len <= self.scratch.len() {
            // A jumbo frame: built in place in its slot (or, `big` full, in the scratch and
            // dropped, counted).
            return match self.big.next_slot(len) {
                Some(slot) => {
                    let r = f(slot);
                    self.big.commit(len);
                    r
                }
                None => {
                    *self.dropped += 1;
                    f(&mut self.scratch[..len])
                }
            };
        }
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
        if !self.tx_room() {
            // The reply might be big and there is no slot: later (after `drain_tx`).
            return None;
        }
        let rx = if let Some((ptr, len)) = self.direct.take() {
            // SAFETY: `Mgmt::rx_now` set `direct` from a live `&[u8]` of `len` bytes and
            // clears it when its one `poll_ingress_single` returns; this token (and the slice)
            // does not outlive that call, which is where smoltcp consumes it.
            MgmtRx(unsafe { core::slice::from_raw_parts(ptr, len) })
        } else {
            let n = {
                let f = self.rx.front()?;
                self.cur[..f.len()].copy_from_slice(f);
                f.len()
            };
            self.rx.pop();
            MgmtRx(&self.cur[..n])
        };
        let tx = MgmtTx {
            q: &mut self.tx,
            big: &mut self.big,
            scratch: &mut *self.big_scratch,
            dropped: &mut self.tx_dropped,
        };
        Some((rx, tx))
    }

    fn transmit(&mut self, _now: Instant) -> Option<MgmtTx<'_>> {
        (self.tx.has_room() && self.tx_room()).then_some(MgmtTx {
            q: &mut self.tx,
            big: &mut self.big,
            scratch: &mut *self.big_scratch,
            dropped: &mut self.tx_dropped,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        // Ethernet header included (smoltcp's IP MTU is this less 14): the port's MTU.
        c.max_transmission_unit = self.frame_max;
        c.max_burst_size = Some(1);
        c
    }
}

/// Counters of the management plane: `netstack::stats::MgmtStats`, their one definition (the
/// fields and their meaning are documented there; `/metrics` renders that struct).
pub type MgmtCounters = netstack::stats::MgmtStats;

/// Indexes into [`MgmtCounters::put_routes`] (the order of
/// [`netstack::stats::PUT_ROUTES_RESULTS`]).
#[derive(Copy, Clone)]
enum PutResult {
    Ok = 0,
    Forbidden = 1,
    Unauthorized = 2,
    LengthRequired = 3,
    TooLarge = 4,
    BadRequest = 5,
    Busy = 6,
    Failed = 7,
    Timeout = 8,
    Aborted = 9,
    PreconditionFailed = 10,
    Checked = 11,
}

impl PutResult {
    /// The outcome a refused `PUT` is counted under.
    fn of(s: Status) -> PutResult {
        match s {
            Status::Ok => PutResult::Ok,
            Status::Forbidden => PutResult::Forbidden,
            Status::Unauthorized => PutResult::Unauthorized,
            Status::LengthRequired => PutResult::LengthRequired,
            Status::ContentTooLarge => PutResult::TooLarge,
            Status::ServiceUnavailable => PutResult::Busy,
            Status::InternalServerError => PutResult::Failed,
            Status::RequestTimeout => PutResult::Timeout,
            Status::PreconditionFailed => PutResult::PreconditionFailed,
            _ => PutResult::BadRequest,
        }
    }
}

/// A `PUT` body being received: its buffer, how far it arrived and was checked, and its rate
/// window.
struct Body {
    upload: PutUpload,
    check: PutBody,
    /// Uptime (ms) when the current rate window began (the head's acceptance, then every
    /// [`BODY_RATE_WINDOW_MS`]).
    window_ms: i64,
    /// Bytes of the body received when the window began.
    window_got: usize,
    /// Validate only (`?check`): answered once checked, nothing built.
    check_only: bool,
    /// The head's `If-Match`, compared again with the published generation when the body is
    /// complete (a console commit may have come meanwhile).
    if_match: Option<http::IfMatch>,
}

/// Where a connection is with `PUT /routes` or `PUT /rules`.
// One per socket in `Mgmt` (no heap to box the body's state in): the size does not matter.
#[allow(clippy::large_enum_variant)]
enum Put {
    /// No PUT (a GET, or not yet known).
    None,
    /// Receiving the body.
    Body(Body),
    /// The body of this file is with housekeeping; waiting for the rebuild's result.
    Waiting(PutKind),
}

/// One TCP socket of the metrics service and its request state.
struct Conn {
    handle: SocketHandle,
    /// The request head received so far (up to [`http::HEAD_MAX`] bytes; with a `PUT`, maybe
    /// the body's start).
    req: heapless::Vec<u8, { http::HEAD_MAX }>,
    /// Uptime (ms) when the connection left LISTEN (SYN received); `None` while listening.
    since_ms: Option<i64>,
    /// Uptime (ms) of the last progress: a byte received or one of ours acknowledged.
    progress_ms: i64,
    /// Our bytes not yet acknowledged at the last look (a decrease is progress).
    send_queue: usize,
    /// The request is complete: answer it when the response buffer is free, with `reply`, or
    /// with `/metrics` when there is none (`GET /metrics`).
    complete: bool,
    /// The response has been queued in full and the socket closed on our side.
    done: bool,
    /// `PUT /routes` state (the body buffer is freed when it leaves `Body`).
    put: Put,
    /// A prepared response (a refusal, `PUT /routes`'s result): written into the shared
    /// buffer when it is free.
    reply: Option<heapless::String<{ http::REPLY_MAX }>>,
    /// Bytes read and dropped past the request (at most [`DRAIN_MAX`]).
    drained: usize,
    /// The request is `GET /routes` or `GET /rules` (answered with the published FIB's routes
    /// or rule set's rules).
    get: Option<PutKind>,
    /// The client's address and port (for the audit line of a `PUT`), once out of LISTEN.
    client: Option<smoltcp::wire::IpEndpoint>,
}

impl Conn {
    /// Whether it holds the one upload: a `PUT` body accepted at its head and not ended, or
    /// its rebuild not yet answered.
    fn uploading(&self) -> bool {
        matches!(self.put, Put::Body(_) | Put::Waiting(_))
    }

    /// The upload ends without an answer (the client left, or a timeout): counted under
    /// `result`, its buffer freed. A rebuild already handed over is counted when its result
    /// is taken ([`Mgmt::serve`]).
    fn end_upload(&mut self, counters: &mut MgmtCounters, result: PutResult) {
        if let Put::Body(b) = &self.put {
            count(counters, b.check.kind(), result, self.client);
            self.put = Put::None;
        }
    }

    fn reset(&mut self) {
        self.drained = 0;
        self.put = Put::None;
        self.reply = None;
        self.get = None;
        self.client = None;
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
    /// What `PUT` may replace: the router's routes file (with `mgmt_token=`'s token), or
    /// nothing (another network function).
    put: PutFiles,
}

/// Storage the management plane needs, in bytes (carved from one allocation at boot).
pub const STORAGE_BYTES: usize =
    (RX_QUEUE + TX_QUEUE) * FRAME_MAX + SOCKETS * (TCP_RX + TCP_TX) + BODY_MAX;

// One order-6 block (256 KiB), as with one socket: four sockets cost no more memory.
const _: () = assert!(STORAGE_BYTES <= 64 * 4096);

impl Mgmt {
    /// A management interface with MAC `mac` and address `addr/len` on `port` whose IP MTU is
    /// `mtu` (smoltcp's frame limit is `mtu` + 14, at most [`JUMBO_FRAME_MAX`], and at most
    /// [`FRAME_MAX`] without `jumbo` storage), using `storage` (at least [`STORAGE_BYTES`])
    /// and `jumbo` ([`JUMBO_STORAGE_BYTES`] for frames above [`FRAME_MAX`], or empty), never
    /// freed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        port: usize,
        mac: [u8; 6],
        (addr, len): (core::net::Ipv4Addr, u8),
        mtu: u16,
        storage: &'static mut [u8],
        jumbo: &'static mut [u8],
        now_ms: i64,
        seed: u64,
    ) -> Mgmt {
        assert!(
            storage.len() >= STORAGE_BYTES,
            "management storage too small"
        );
        let (frames, rest) = storage.split_at_mut((RX_QUEUE + TX_QUEUE) * FRAME_MAX);
        let (mut sock_mem, body) = rest.split_at_mut(SOCKETS * (TCP_RX + TCP_TX));
        let (rx, frames) = FrameQueue::carve(frames, FRAME_MAX);
        let (tx, _) = FrameQueue::carve(frames, FRAME_MAX);
        let frame_max = (usize::from(mtu) + 14).min(JUMBO_FRAME_MAX);
        let jumbo_ok = jumbo.len() >= JUMBO_STORAGE_BYTES;
        let frame_max = if jumbo_ok {
            frame_max
        } else {
            frame_max.min(FRAME_MAX)
        };
        let (big, scratch) = if frame_max > FRAME_MAX {
            let (big, rest) = FrameQueue::carve(jumbo, frame_max);
            (big, &mut rest[..frame_max])
        } else {
            FrameQueue::carve(&mut [], 0)
        };
        let mut dev = MgmtDev {
            rx,
            tx,
            big,
            big_scratch: scratch,
            tx_dropped: 0,
            frame_max,
            cur: [0; FRAME_MAX],
            direct: None,
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
            // Acknowledge (and reopen the window) in the poll that read the data, not one
            // poll (10 ms) later: a streaming body would wait for it every round trip.
            sock.set_ack_delay(None);
            Conn {
                handle: sockets.add(sock),
                req: heapless::Vec::new(),
                since_ms: None,
                progress_ms: now_ms,
                send_queue: 0,
                complete: false,
                done: false,
                get: None,
                client: None,
                put: Put::None,
                reply: None,
                drained: 0,
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
            put: PutFiles::Routes(None),
        }
    }

    /// With the IPv6 address `addr/len` (host order) too: the port's `ip6_N=`, whose Neighbor
    /// Discovery the router does (it answers solicitations for it and copies the
    /// advertisements smoltcp's own solicitations bring back).
    pub fn with_ipv6(mut self, addr: u128, len: u8) -> Mgmt {
        let a = IpAddress::Ipv6(core::net::Ipv6Addr::from_bits(addr));
        self.iface.update_ip_addrs(|ips| {
            let _ = ips.push(IpCidr::new(a, len));
        });
        self
    }

    /// What `PUT` may replace ([`PutFiles`]; the default: `PUT /routes` refused for want of
    /// a token).
    pub fn with_put(mut self, put: PutFiles) -> Mgmt {
        self.put = put;
        self
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

    /// Largest frame in or out (bytes, Ethernet header included): the port's MTU + 14.
    pub fn frame_max(&self) -> usize {
        self.dev.frame_max
    }

    /// Process `frame` (longer than [`FRAME_MAX`], up to [`Mgmt::frame_max`]) now, borrowed:
    /// the frames queued before it first, then it (e.g. a per-core view of a jumbo ping).
    /// Then call [`Mgmt::drain_tx`]. Returns `false` (counted `rx_dropped`) for a frame over
    /// the limit or when no TX slot is free for a reply.
    pub fn rx_now(&mut self, now_ms: i64, frame: &[u8]) -> bool {
        let now = Instant::from_millis(now_ms);
        while self.dev.rx.count > 0 && self.dev.tx_room() {
            let _ = self
                .iface
                .poll_ingress_single(now, &mut self.dev, &mut self.sockets);
        }
        if frame.len() > self.dev.frame_max || !self.dev.tx_room() {
            self.counters.rx_dropped += 1;
            return false;
        }
        self.dev.direct = Some((frame.as_ptr(), frame.len()));
        let _ = self
            .iface
            .poll_ingress_single(now, &mut self.dev, &mut self.sockets);
        // Taken by `receive` (or not, if smoltcp did not ask): never kept past this call.
        self.dev.direct = None;
        self.counters.rx += 1;
        true
    }

    /// Run smoltcp for a bounded amount of work and serve the HTTP socket (`metrics` writes the
    /// response body when a request is complete). Then call [`Mgmt::drain_tx`].
    pub fn poll(&mut self, now_ms: i64, metrics: impl FnOnce(&mut dyn Write, MgmtCounters)) {
        // Dropped bodies' pages go back a bounded step per poll.
        fib::release_uploads_step();
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
        while let Some(f) = self.dev.big.front() {
            send(f);
            self.counters.tx += 1;
            self.dev.big.pop();
        }
    }

    /// Serve every socket: timeouts and FINs first, then requests; the first complete request
    /// while the response buffer is free gets it (`metrics` runs at most once per poll).
    fn serve(&mut self, now_ms: i64, metrics: impl FnOnce(&mut dyn Write, MgmtCounters)) {
        let mut metrics = Some(metrics);
        let waiting = |k| {
            self.conns
                .iter()
                .any(|c| matches!(c.put, Put::Waiting(w) if w == k))
        };
        // The client that asked went away: its rebuild ran, nobody to answer; counted under
        // its result.
        if !waiting(PutKind::Routes) {
            if let Some(r) = fib::take_put_result() {
                count(&mut self.counters, PutKind::Routes, put_reply(r).0, None);
            }
        }
        if !waiting(PutKind::Rules) {
            if let Some(r) = acl::take_put_result() {
                count(&mut self.counters, PutKind::Rules, rules_reply(r).0, None);
            }
        }
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
        // One upload at a time, decided at the head: another connection's body or rebuild.
        let other_upload = (0..SOCKETS).any(|j| j != i && self.conns[j].uploading());
        let conn = &mut self.conns[i];
        let sock = self.sockets.get_mut::<tcp::Socket>(conn.handle);
        let state = sock.state();
        // Free again: re-listen, unless an RST (after `abort`) still has to go out.
        let aborting = state == tcp::State::Closed && sock.remote_endpoint().is_some();
        if !sock.is_open() && !aborting {
            // Closed under a body (the client's RST, or ours after a timeout already counted).
            conn.end_upload(&mut self.counters, PutResult::Aborted);
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
        let busy = || other_upload || fib::put_busy() || acl::put_busy() || nf_files::put_busy();
        if !read(conn, sock, now_ms, &self.put, busy, &mut self.counters) {
            return;
        }
        if let Put::Waiting(kind) = conn.put {
            if let Some((result, reply)) = put_answer(kind) {
                conn.put = Put::None;
                count(&mut self.counters, kind, result, conn.client);
                conn.reply = Some(reply);
            } else {
                // The rebuild is the boot CPU's next housekeeping: no timeout applies.
                conn.progress_ms = now_ms;
                return;
            }
        }
        let receiving = matches!(conn.put, Put::Body(_));
        if !conn.complete && state == tcp::State::CloseWait && !sock.can_recv() {
            // The client's FIN came before a complete request: nothing to answer, our FIN back
            // (a PUT body cut short is dropped).
            self.counters.fin_before_request += 1;
            conn.end_upload(&mut self.counters, PutResult::Aborted);
            sock.close();
            conn.complete = true;
            conn.done = true;
            return;
        }
        // A body that makes progress is not cut: its request timeout counts from its last byte.
        let started = if receiving { conn.progress_ms } else { since };
        if !conn.complete && now_ms - started >= REQUEST_TIMEOUT_MS {
            self.counters.request_timeouts += 1;
            conn.end_upload(&mut self.counters, PutResult::Timeout);
            sock.abort();
            return;
        }
        if now_ms - conn.progress_ms >= IDLE_TIMEOUT_MS {
            self.counters.idle_timeouts += 1;
            conn.end_upload(&mut self.counters, PutResult::Timeout);
            sock.abort();
            return;
        }
        check_rate(conn, now_ms, &mut self.counters);
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
        if let Some(reply) = self.conns[i].reply.take() {
            let _ = w.write_str(&reply);
        } else if let Some(kind) = self.conns[i].get {
            self.counters.http_requests += 1;
            match kind {
                PutKind::Routes => write_routes(&mut w),
                PutKind::Rules => write_rules(&mut w),
                PutKind::NatTimeouts => write_nat_timeouts(&mut w),
                PutKind::NfFile(name) => nf_files::write_file(&mut w, name),
            }
        } else {
            // Complete without a reply: `parse_head` said `GET /metrics`.
            let _ = w.write_str(http::METRICS_HEAD);
            // Counted first: the response reports itself.
            self.counters.http_requests += 1;
            let c = MgmtCounters {
                tx_dropped: self.dev.tx_dropped,
                ..self.counters
            };
            metrics(&mut w, c);
        }
        self.body_owner = Some(i);
        self.body_since_ms = now_ms;
        self.body_len = w.len;
        self.body_sent = 0;
    }
}

/// Read what the client sent: the request head (at most [`http::HEAD_MAX`] bytes, parsed as
/// they arrive: a refusal is answered at once, a `PUT /routes` starts its body unless `busy`
/// says another upload is in progress), a PUT body (into its buffer, each complete line
/// checked), or bytes past the request (read and dropped, so a client whose request was
/// refused can finish sending and read our answer; at most [`DRAIN_MAX`]). Returns `false`
/// when it reset the connection: more than [`DRAIN_MAX`] bytes dropped (counted).
fn read(
    conn: &mut Conn,
    sock: &mut tcp::Socket<'_>,
    now_ms: i64,
    put: &PutFiles,
    busy: impl FnOnce() -> bool,
    counters: &mut MgmtCounters,
) -> bool {
    if conn.client.is_none() {
        conn.client = sock.remote_endpoint();
    }
    if !sock.can_recv() {
        return true;
    }
    if let Put::Body(b) = &mut conn.put {
        // Pages for what the socket may hold, a bounded step per poll.
        if let Err(e) = b.upload.grow(b.check.got() + TCP_RX) {
            let why = format_args!("PUT {}: {}", b.check.kind().path(), e.0);
            let r = Refusal::new(Status::ServiceUnavailable, true, why);
            conn.put = Put::None; // the body's pages go back
            refuse(conn, &r, counters);
            return true;
        }
        let buf = b.upload.buf_mut();
        let n = sock.recv_slice(&mut buf[b.check.got()..]).unwrap_or(0);
        if n > 0 {
            conn.progress_ms = now_ms;
        }
        if let Some(done) = b.check.received(buf, n) {
            finish_body(conn, done, counters);
        }
    } else if !conn.complete {
        // No more than the head's room: what follows a PUT's head stays for its body.
        let mut buf = [0u8; http::HEAD_MAX];
        let room = conn.req.capacity() - conn.req.len();
        if let Ok(n) = sock.recv_slice(&mut buf[..room]) {
            if n > 0 {
                conn.progress_ms = now_ms;
            }
            let _ = conn.req.extend_from_slice(&buf[..n]);
        }
        match http::parse_head(&conn.req, put, busy) {
            Head::Partial => {}
            Head::Metrics { .. } => conn.complete = true,
            Head::File { kind, .. } => {
                conn.complete = true;
                conn.get = Some(kind);
            }
            Head::Put(head) => start_put(conn, sock, head, now_ms, counters),
            Head::Refused(r) => refuse(conn, &r, counters),
        }
    } else {
        let n = sock.recv(|d| (d.len(), d.len())).unwrap_or(0);
        conn.drained += n;
        if !conn.done {
            // Before our answer is queued, the client's bytes keep the connection alive.
            conn.progress_ms = now_ms;
        }
        if conn.drained > DRAIN_MAX {
            counters.drain_limit += 1;
            sock.abort();
            return false;
        }
    }
    true
}

/// A body that received fewer than [`BODY_MIN_BYTES`] in the rate window now ending is
/// answered 408 (its buffer goes back); one that did opens the next window.
fn check_rate(conn: &mut Conn, now_ms: i64, counters: &mut MgmtCounters) {
    let Put::Body(b) = &mut conn.put else {
        return;
    };
    if now_ms - b.window_ms < BODY_RATE_WINDOW_MS {
        return;
    }
    let got = b.check.got();
    if got - b.window_got >= BODY_MIN_BYTES {
        b.window_ms = now_ms;
        b.window_got = got;
        return;
    }
    let path = b.check.kind().path();
    let why = format_args!(
        "PUT {path}: body slower than {BODY_MIN_BYTES} bytes per {BODY_RATE_WINDOW_MS} ms ({} in the last window)",
        got - b.window_got
    );
    let r = Refusal::new(Status::RequestTimeout, true, why);
    conn.put = Put::None;
    refuse(conn, &r, counters);
}

/// Count a `PUT` of `kind` under `result`, and print its audit line on the console: `mgmt:
/// audit: PUT PATH from ADDR:PORT: RESULT, generation N` (the client's address, `gone` when
/// it left before its rebuild was answered; the result as `/metrics` labels it; the generation
/// published after it: the new one for `ok`, else the one that stays).
fn count(
    counters: &mut MgmtCounters,
    kind: PutKind,
    result: PutResult,
    client: Option<smoltcp::wire::IpEndpoint>,
) {
    count_as(counters, kind, kind.path(), result, client);
}

/// [`count`] under `kind`'s counter, the audit line naming `path` (the request's own, for a
/// path no file is at).
fn count_as(
    counters: &mut MgmtCounters,
    kind: PutKind,
    path: impl core::fmt::Display,
    result: PutResult,
    client: Option<smoltcp::wire::IpEndpoint>,
) {
    let generation = match kind {
        PutKind::Routes => {
            counters.put_routes[result as usize] += 1;
            fib::generation()
        }
        PutKind::Rules => {
            counters.put_rules[result as usize] += 1;
            acl_generation()
        }
        PutKind::NatTimeouts => {
            counters.put_nat_timeouts[result as usize] += 1;
            nat_timeouts_generation()
        }
        PutKind::NfFile(_) => {
            counters.put_nf_files[result as usize] += 1;
            nf_files::generation()
        }
    };
    let label = netstack::stats::PUT_ROUTES_RESULTS[result as usize];
    match client {
        Some(c) => {
            crate::println!("mgmt: audit: PUT {path} from {c}: {label}, generation {generation}")
        }
        None => {
            crate::println!("mgmt: audit: PUT {path} from gone: {label}, generation {generation}")
        }
    }
}

/// The path of a `PUT` request head (`req`, from its start; at most 64 bytes of it), and the
/// file whose counter its refusal goes under: the one at the path (`/rules`,
/// `/nat_timeouts`, an NF's own `/NAME`, …); for a path no file is at, the image's own NF's
/// files in an image of one's own, else the routes file (the stock image's first).
fn put_target(req: &[u8]) -> (PutKind, &str) {
    let start = req
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let path = req[start..]
        .strip_prefix(b"PUT ")
        .and_then(|r| r.split(|&b| b == b' ').next())
        .map(|p| &p[..p.len().min(64)])
        .and_then(|p| core::str::from_utf8(p).ok())
        .unwrap_or("?");
    let kind = nf_files::kind_at(path).or_else(|| PutKind::at(path));
    let other = match crate::appliance::nf_texts::hook() {
        Some(_) => PutKind::NfFile(""),
        None => PutKind::Routes,
    };
    (kind.unwrap_or(other), path)
}

/// Answer `r` (counted by outcome if it refuses a `PUT`, under the file its path names, the
/// audit line naming the path).
fn refuse(conn: &mut Conn, r: &Refusal, counters: &mut MgmtCounters) {
    if r.put {
        let (kind, path) = put_target(&conn.req);
        count_as(counters, kind, path, PutResult::of(r.status), conn.client);
    }
    conn.reply = Some(r.reply());
    conn.complete = true;
}

/// A `PUT` head that passed [`http::parse_head`]'s checks: its body's buffer (its virtual
/// range; pages as the body arrives; 503 without the memory for it), then the body's start
/// (what came with the head).
fn start_put(
    conn: &mut Conn,
    sock: &mut tcp::Socket<'_>,
    head: http::PutHead,
    now_ms: i64,
    counters: &mut MgmtCounters,
) {
    if let Some(r) = stale(head.kind, head.if_match.as_ref()) {
        return refuse(conn, &r, counters);
    }
    let rest = &conn.req[head.head_len.min(conn.req.len())..];
    let got = rest.len().min(head.body_len);
    let no_memory = |conn: &mut Conn, e: fib::FibError, counters: &mut MgmtCounters| {
        let why = format_args!("PUT {}: {}", head.kind.path(), e.0);
        refuse(
            conn,
            &Refusal::new(Status::ServiceUnavailable, true, why),
            counters,
        );
    };
    let mut upload = match PutUpload::new(head.body_len) {
        Ok(u) => u,
        Err(e) => return no_memory(conn, e, counters),
    };
    if let Err(e) = upload.grow(got) {
        return no_memory(conn, e, counters);
    }
    upload.buf_mut()[..got].copy_from_slice(&rest[..got]);
    if got < head.body_len && head.expect_continue {
        // Fits: the send buffer is empty before a response.
        let _ = sock.send_slice(http::CONTINUE);
    }
    let mut check = PutBody::new(head.kind, head.body_len).with_routes(fib::route_ports());
    let done = check.received(upload.buf_mut(), got);
    conn.put = Put::Body(Body {
        upload,
        check,
        window_ms: now_ms,
        window_got: 0,
        check_only: head.check_only,
        if_match: head.if_match,
    });
    if let Some(done) = done {
        finish_body(conn, done, counters);
    }
}

/// The 412 of a `PUT` whose `If-Match` (`if_match`) does not name the published generation
/// of its file (the FIB's for `/routes`, the ACL rule set's for `/rules`); `None` when it
/// does, or without one.
fn stale(kind: PutKind, if_match: Option<&http::IfMatch>) -> Option<Refusal> {
    let m = if_match?;
    let current = match kind {
        PutKind::Routes => fib::generation(),
        PutKind::Rules => acl_generation(),
        PutKind::NatTimeouts => nat_timeouts_generation(),
        PutKind::NfFile(_) => nf_files::generation(),
    };
    m.refusal(kind, current)
}

/// The NAT's timeouts' generation (0 outside NAT mode).
fn nat_timeouts_generation() -> u64 {
    crate::dataplane::nf::builtin::nat_timeouts().map_or(0, |(_, g)| g)
}

/// The published ACL rule set's generation (0 outside ACL mode).
fn acl_generation() -> u64 {
    crate::dataplane::nf::builtin::ACL
        .get()
        .map_or(0, |a| a.generation())
}

/// A complete body, or one refused before its end (a line over [`http::LINE_MAX`]): refused
/// (400, the first bad line; what is still to come is drained), or handed to housekeeping.
fn finish_body(conn: &mut Conn, checked: Result<(), Refusal>, counters: &mut MgmtCounters) {
    let put = core::mem::replace(&mut conn.put, Put::None);
    if let Err(r) = checked {
        return refuse(conn, &r, counters); // the body dropped: its pages go back
    }
    let Put::Body(b) = put else {
        return;
    };
    conn.complete = true;
    let kind = b.check.kind();
    if b.check_only {
        // An NF's file: its parser reads the new set on a throwaway instance, as the `PUT`'s
        // job would, and nothing is published.
        if let PutKind::NfFile(name) = kind {
            if let Err(bad) = nf_files::check(name, b.upload.text()) {
                let why = format_args!("PUT /{name}?check: {bad}; nothing published");
                return refuse(conn, &Refusal::new(Status::BadRequest, true, why), counters);
            }
        }
        count(counters, kind, PutResult::Checked, conn.client);
        conn.reply = Some(http::check_reply(kind, b.check.lines()));
        return; // nothing built: the body's pages go back
    }
    if let Some(r) = stale(kind, b.if_match.as_ref()) {
        return refuse(conn, &r, counters);
    }
    let submitted = match kind {
        PutKind::Routes => fib::submit_put(b.upload).is_ok(),
        PutKind::Rules => acl::submit_put(b.upload).is_ok(),
        PutKind::NatTimeouts => {
            nat::submit_put(b.upload);
            true
        }
        PutKind::NfFile(name) => nf_files::submit_put(name, b.upload).is_ok(),
    };
    if submitted {
        conn.put = Put::Waiting(kind);
    } else {
        let why = format_args!("PUT {}: another upload is in progress", kind.path());
        refuse(
            conn,
            &Refusal::new(Status::ServiceUnavailable, true, why),
            counters,
        );
    }
}

/// The reply to a rebuild's result: 200 with the new generation, or the error: 400 for a
/// route the build refused (a duplicate prefix), 500 for the router's own limits, 503 if the
/// rebuild could not start.
fn put_reply(
    r: Result<Published, (RebuildFailure, fib::FibError)>,
) -> (PutResult, heapless::String<{ http::REPLY_MAX }>) {
    match r {
        Ok(p) => (
            PutResult::Ok,
            http::reply(
                Status::Ok,
                None,
                format_args!(
                    "generation {}\nroutes {}\npages {}\nbuild_ms {}",
                    p.generation, p.routes, p.pages, p.build_ms
                ),
            ),
        ),
        Err((why, e)) => {
            let (status, result) = match why {
                RebuildFailure::Busy => (Status::ServiceUnavailable, PutResult::Failed),
                RebuildFailure::Route => (Status::BadRequest, PutResult::BadRequest),
                RebuildFailure::Build => (Status::InternalServerError, PutResult::Failed),
            };
            let text = format_args!("PUT /routes: error: {}", e.0);
            (result, http::reply(status, None, text))
        }
    }
}

/// The reply to a `PUT /rules` replacement: 200 with the new generation, or the error (503:
/// the previous set is still retiring; 500: the set could not be built).
fn rules_reply(
    r: Result<AclPublished, AclReloadError>,
) -> (PutResult, heapless::String<{ http::REPLY_MAX }>) {
    match r {
        Ok(p) => (
            PutResult::Ok,
            http::reply(
                Status::Ok,
                None,
                format_args!(
                    "generation {}\nrules {}\ntuples {}\npages {}\nbuild_us {}",
                    p.generation, p.rules, p.tuples, p.pages, p.build_us
                ),
            ),
        ),
        Err(e) => {
            let (status, result) = match e {
                AclReloadError::Busy(_) => (Status::ServiceUnavailable, PutResult::Busy),
                AclReloadError::Build(_) => (Status::InternalServerError, PutResult::Failed),
            };
            let text = format_args!("error: {}", e.text());
            (result, http::reply(status, None, text))
        }
    }
}

/// The answer to the `PUT` of `kind` submitted, once its job ran: its result and reply.
fn put_answer(kind: PutKind) -> Option<(PutResult, heapless::String<{ http::REPLY_MAX }>)> {
    match kind {
        PutKind::Routes => fib::take_put_result().map(put_reply),
        PutKind::Rules => acl::take_put_result().map(rules_reply),
        PutKind::NatTimeouts => nat::take_put_result().map(nat_timeouts_reply),
        PutKind::NfFile(name) => nf_files::take_put_result().map(|r| nf_file_reply(name, r)),
    }
}

/// The reply to a `PUT /name` of the NF's file `name`: 200 with the files' new generation, or
/// 400 naming the file and line its parser refused, or 503 while the files replaced last
/// still retire (with `Retry-After`).
fn nf_file_reply(
    name: &str,
    r: Result<NfPublished, NfPutError>,
) -> (PutResult, heapless::String<{ http::REPLY_MAX }>) {
    match r {
        Ok(p) => (
            PutResult::Ok,
            http::reply(
                Status::Ok,
                None,
                format_args!(
                    "generation {}\nlines {}\nevery core restarts its NF with it at its next tick",
                    p.generation, p.lines
                ),
            ),
        ),
        Err(NfPutError::Bad(bad)) => (
            PutResult::BadRequest,
            http::reply(
                Status::BadRequest,
                None,
                format_args!("PUT /{name}: {bad}; the published files stay"),
            ),
        ),
        Err(NfPutError::Busy(late)) => (
            PutResult::Busy,
            http::reply_with(
                Status::ServiceUnavailable,
                None,
                Some(http::RETRY_AFTER_S),
                format_args!(
                    "PUT /{name}: the files replaced last are still in use (cores {late:#x}); the published files stay"
                ),
            ),
        ),
    }
}

/// The reply to a `PUT /nat_timeouts`: 200 with the new generation, or 400 saying what the
/// line takes.
fn nat_timeouts_reply(
    r: Result<u64, &'static str>,
) -> (PutResult, heapless::String<{ http::REPLY_MAX }>) {
    match r {
        Ok(generation) => (
            PutResult::Ok,
            http::reply(
                Status::Ok,
                None,
                format_args!(
                    "generation {generation}\nevery NAT core takes them from its next tick"
                ),
            ),
        ),
        Err(expected) => (
            PutResult::BadRequest,
            http::reply(
                Status::BadRequest,
                None,
                format_args!("PUT /nat_timeouts: expected {expected}; the timeouts stay"),
            ),
        ),
    }
}

/// The answer to `GET /nat_timeouts`: [`http::file_head`] (the generation as `ETag`, 4
/// timeouts as `X-Timeouts`), then `EST,TRANS,UDP,ICMP` in seconds, the `PUT` body's form;
/// 503 outside NAT mode.
fn write_nat_timeouts(w: &mut BodyWriter<'_>) {
    let Some((t, generation)) = crate::dataplane::nf::builtin::nat_timeouts() else {
        let why = format_args!("GET /nat_timeouts: no NAT");
        let _ = w.write_str(&http::reply(Status::ServiceUnavailable, None, why));
        return;
    };
    let _ = w.write_str(&http::file_head(PutKind::NatTimeouts, generation, 4));
    let mut line: heapless::String<64> = heapless::String::new();
    let _ = writeln!(
        line,
        "{},{},{},{}",
        t.tcp_established, t.tcp_transitory, t.udp, t.icmp
    );
    let _ = w.write_str(&line);
}

/// The answer to `GET /routes`: [`http::file_head`] (the published FIB's generation as
/// `ETag`, its entry count as `X-Routes`), then each entry on a line of its own in the
/// console's `routes` form (`netstack::router::Route`'s `Display`), as many whole lines as the
/// response buffer ([`BODY_MAX`]) holds; 503 without a published FIB.
fn write_routes(w: &mut BodyWriter<'_>) {
    let answered = fib::with_published(|generation, f| {
        let _ = w.write_str(&http::file_head(PutKind::Routes, generation, f.len()));
        for e in f.routes() {
            let mut line: heapless::String<80> = heapless::String::new();
            let _ = writeln!(line, "{}", netstack::router::Route::from(e));
            let _ = w.write_str(&line);
            if w.truncated {
                break;
            }
        }
    });
    if answered.is_none() {
        let why = format_args!("GET /routes: no FIB published");
        let _ = w.write_str(&http::reply(Status::ServiceUnavailable, None, why));
    }
}

/// The answer to `GET /rules`: [`http::file_head`] (the published rule set's generation as
/// `ETag`, its rule count as `X-Rules`), then each rule on a line of its own in the rules
/// file's syntax, in order (`netstack::acl::Rule`'s `Display`: each line parses back to its
/// rule), then the default action's line (`default allow|deny`), as many whole lines as the
/// response buffer ([`BODY_MAX`]) holds; 503 without a published rule set.
fn write_rules(w: &mut BodyWriter<'_>) {
    let Some(shared) = crate::dataplane::nf::builtin::ACL.get() else {
        let why = format_args!("GET /rules: no rule set published");
        let _ = w.write_str(&http::reply(Status::ServiceUnavailable, None, why));
        return;
    };
    // The management plane runs on the boot CPU, which also frees replaced sets
    // (`setup::acl::poll`), never while this runs: `current` is safe to read here.
    let generation = shared.generation();
    let t = shared.current();
    let _ = w.write_str(&http::file_head(PutKind::Rules, generation, t.acl.len()));
    for i in 0..t.acl.len() {
        let Some(r) = t.acl.rule(i) else { continue };
        let mut line: heapless::String<128> = heapless::String::new();
        let _ = writeln!(line, "{r}");
        let _ = w.write_str(&line);
        if w.truncated {
            return;
        }
    }
    let mut line: heapless::String<32> = heapless::String::new();
    let _ = writeln!(line, "default {}", t.acl.default_action());
    let _ = w.write_str(&line);
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

impl crate::dataplane::MgmtPlane for Mgmt {
    type Counters = MgmtCounters;

    fn port(&self) -> usize {
        self.port
    }

    fn queue_max(&self) -> usize {
        FRAME_MAX
    }

    fn push_rx(&mut self, frame: &[u8]) -> bool {
        Mgmt::push_rx(self, frame)
    }

    fn rx_now(&mut self, now_ms: i64, frame: &[u8]) -> bool {
        Mgmt::rx_now(self, now_ms, frame)
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
