//! A host-side smoltcp stack on guest port 0 (10.0.0.2) with TCP clients of the management
//! plane's port (9100): `GET /metrics`, `PUT` of a file, any request. Shared by the test
//! crates that talk to it (`mod common;`); each uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use gannet_tests::*;
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

/// smoltcp's view of the host side of guest port 0.
pub struct HostPort(pub gen::RawPort);
pub struct HostRx(Vec<u8>);
pub struct HostTx<'a>(&'a gen::RawPort);

impl RxToken for HostRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for HostTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.send(&buf).expect("host send");
        r
    }
}

impl Device for HostPort {
    type RxToken<'a> = HostRx;
    type TxToken<'a> = HostTx<'a>;
    fn receive(&mut self, _: SmolInstant) -> Option<(HostRx, HostTx<'_>)> {
        let f = self.0.recv_timeout(Duration::from_millis(2))?;
        Some((HostRx(f), HostTx(&self.0)))
    }
    fn transmit(&mut self, _: SmolInstant) -> Option<HostTx<'_>> {
        Some(HostTx(&self.0))
    }
    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c
    }
}

/// A host-side smoltcp stack on guest port 0 (10.0.0.2) with TCP clients of the metrics port
/// (10.0.0.1:9100, or the address [`Clients::new_at`] names).
pub struct Clients {
    pub dev: HostPort,
    /// The management plane's address.
    pub server: IpAddress,
    pub iface: Interface,
    pub sockets: SocketSet<'static>,
    pub t0: Instant,
    pub next_port: u16,
    /// A socket that gets one more byte (`#`) every 400 ms while we poll, and when the next
    /// is due: a client trickling its body.
    pub trickle: Option<(smoltcp::iface::SocketHandle, Instant)>,
}

impl Clients {
    pub fn new(port: gen::RawPort) -> Clients {
        let host = IpCidr::new(IpAddress::v4(10, 0, 0, 2), 24);
        Clients::new_at(port, host, IpAddress::v4(10, 0, 0, 1))
    }

    /// Clients at `host` (address and prefix) of the management plane at `server`.
    pub fn new_at(port: gen::RawPort, host: IpCidr, server: IpAddress) -> Clients {
        let mut dev = HostPort(port);
        let t0 = Instant::now();
        let mut iface = Interface::new(
            Config::new(HardwareAddress::Ethernet(EthernetAddress(peer_mac(0)))),
            &mut dev,
            SmolInstant::from_millis(0),
        );
        iface.update_ip_addrs(|a| {
            a.push(host).unwrap();
        });
        Clients {
            dev,
            server,
            iface,
            sockets: SocketSet::new(vec![]),
            t0,
            next_port: 49152,
            trickle: None,
        }
    }

    /// A client with a receive buffer of `rx` bytes, connecting to 10.0.0.1:9100.
    pub fn connect(&mut self, rx: usize) -> smoltcp::iface::SocketHandle {
        self.connect_with(rx, 4096)
    }

    /// [`Clients::connect`] with a send buffer of `tx` bytes.
    pub fn connect_with(&mut self, rx: usize, tx: usize) -> smoltcp::iface::SocketHandle {
        let h = self.sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; rx]),
            tcp::SocketBuffer::new(vec![0; tx]),
        ));
        self.next_port += 1;
        self.sockets
            .get_mut::<tcp::Socket>(h)
            .connect(self.iface.context(), (self.server, 9100), self.next_port)
            .unwrap();
        h
    }

    pub fn poll(&mut self) {
        if let Some((h, due)) = self.trickle {
            if Instant::now() >= due {
                let s = self.sock(h);
                if s.may_send() {
                    let _ = s.send_slice(b"#");
                }
                self.trickle = Some((h, due + Duration::from_millis(400)));
            }
        }
        let now = SmolInstant::from_millis(self.t0.elapsed().as_millis() as i64);
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }

    pub fn sock(&mut self, h: smoltcp::iface::SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    /// Polls until `done` holds (panics with `what` and the guest's log after `limit`).
    pub fn until(
        &mut self,
        rig: &Rig,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&mut Clients) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what} within {limit:?}\n{}",
                rig.tail()
            );
            self.poll();
        }
    }

    /// A complete `GET /metrics` on a fresh connection: the response text.
    pub fn get_metrics(&mut self, rig: &Rig, limit: Duration) -> String {
        let h = self.connect(65536);
        let mut body = Vec::new();
        let mut sent = false;
        self.until(rig, limit, "no complete /metrics response", |c| {
            let s = c.sock(h);
            if s.may_send() && !sent {
                s.send_slice(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
                sent = true;
            }
            while s.can_recv() {
                s.recv(|d| {
                    body.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
            }
            sent && !s.may_recv() && !body.is_empty()
        });
        // Our FIN too (later polls send it), so the guest's socket does not wait in FIN-WAIT-2.
        self.sock(h).close();
        String::from_utf8(body).expect("UTF-8 response")
    }

    /// One HTTP request on a fresh connection: `head` (request line and headers, without the
    /// blank line), then `body` as the send buffer takes it; returns the whole response (the
    /// guest closes after it).
    pub fn request(&mut self, rig: &Rig, head: &str, body: &[u8], limit: Duration) -> String {
        self.request_with(rig, head, body, limit, |_| {})
    }

    /// [`Clients::request`], calling `each` with the host port between polls (to send other
    /// frames while the request is under way).
    pub fn request_with(
        &mut self,
        rig: &Rig,
        head: &str,
        body: &[u8],
        limit: Duration,
        each: impl FnMut(&gen::RawPort),
    ) -> String {
        let mut out = format!("{head}\r\n\r\n").into_bytes();
        out.extend_from_slice(body);
        self.exchange(rig, &out, limit, each)
    }

    /// Send `out` (a whole request, as the send buffer takes it) on a fresh connection and
    /// return the whole response (the guest closes after it), calling `each` between polls.
    pub fn exchange(
        &mut self,
        rig: &Rig,
        out: &[u8],
        limit: Duration,
        mut each: impl FnMut(&gen::RawPort),
    ) -> String {
        let h = self.connect_with(65536, 65536);
        let mut sent = 0;
        let mut resp = Vec::new();
        self.until(rig, limit, "no complete response", |c| {
            each(&c.dev.0);
            let s = c.sock(h);
            if s.may_send() && sent < out.len() {
                sent += s.send_slice(&out[sent..]).unwrap();
            }
            while s.can_recv() {
                s.recv(|d| {
                    resp.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
            }
            s.state() != tcp::State::SynSent && !s.may_recv() && !resp.is_empty()
        });
        self.sock(h).close();
        // Let our FIN out.
        for _ in 0..20 {
            self.poll();
        }
        String::from_utf8(resp).expect("UTF-8 response")
    }

    /// `PUT /routes` with `token` (if any) and a `Content-Length` of `body`.
    pub fn put_routes(&mut self, rig: &Rig, token: Option<&str>, body: &str) -> String {
        let auth = token.map_or(String::new(), |t| format!("\r\nAuthorization: Bearer {t}"));
        let head = format!(
            "PUT /routes HTTP/1.1\r\nHost: 10.0.0.1{auth}\r\nContent-Length: {}",
            body.len()
        );
        self.request(rig, &head, body.as_bytes(), Duration::from_secs(60))
    }
}
