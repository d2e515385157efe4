#![no_main]
//! Arbitrary bytes as what a management client sends (`netstack::http`, the request state
//! machine the kernel's `control::mgmt` feeds): the head parsed as its bytes arrive in pieces
//! (at most `HEAD_MAX` kept, as the kernel does), then a `PUT` body fed to `PutBody` in
//! pieces. Checks: no panic; the answer does not depend on how the bytes are cut (an accepted
//! head is the same head, a refused one is refused either way; a body's outcome, its text
//! included, is the same byte by byte, in random pieces and whole); every refusal's reply is a
//! well-formed HTTP/1.0 response (httparse reads it back: its status, a `Content-Length` of its
//! body, `Allow` on a 405, `Retry-After` on a busy 503, `WWW-Authenticate` on a 401).
//!
//! Input layout: byte 0 picks what the plane serves (bits 0–1: nothing (`mode=l2`), the
//! router's `/routes` with a token, `/routes` without one, the ACL's `/rules` with a token;
//! bit 2: another upload is in progress; bit 3: routes checked against two ports), byte 1
//! seeds the piece sizes (1..=64 bytes, a xorshift), the rest is the client's bytes.

use libfuzzer_sys::fuzz_target;
use netstack::config::MgmtToken;
use netstack::router::{parse_ipv4_cidr, RouteCheck};
use netstack::http::{parse_head, Head, PutBody, PutFiles, Refusal, Status, HEAD_MAX, PUT_MAX};

/// The token the seeds carry (`Authorization: Bearer fuzz-token-0123456789`).
const TOKEN: &str = "fuzz-token-0123456789";

/// Piece sizes: 1..=64, from `seed` (never 0: xorshift32 of a nonzero state).
struct Cuts(u32);

impl Cuts {
    fn new(seed: u8) -> Cuts {
        Cuts(u32::from(seed) | 0x100)
    }
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        (self.0 % 64) as usize + 1
    }
}

/// The head as the kernel reads it: `data` arriving `cut()` bytes at a time, at most
/// `HEAD_MAX` kept, parsed after each piece until it is not `Partial`.
fn head_in_pieces(
    data: &[u8],
    put: &PutFiles,
    busy: bool,
    mut cut: impl FnMut() -> usize,
) -> (Head, usize) {
    let mut kept = 0;
    loop {
        kept = (kept + cut()).min(data.len()).min(HEAD_MAX);
        let h = parse_head(&data[..kept], put, || busy);
        if h != Head::Partial || kept == data.len().min(HEAD_MAX) {
            return (h, kept);
        }
    }
}

/// A refusal's reply read back as an HTTP response.
fn check_reply(r: &Refusal) {
    let reply = r.reply();
    let mut fields = [httparse::EMPTY_HEADER; 8];
    let mut resp = httparse::Response::new(&mut fields);
    let n = match resp.parse(reply.as_bytes()) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("reply {reply:?} does not parse: {other:?}"),
    };
    assert_eq!(resp.code, Some(r.status.code()));
    assert!(r.status.code() >= 400, "a refusal is 4xx or 5xx: {reply:?}");
    let field = |name: &str| {
        resp.headers
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
            .map(|f| std::str::from_utf8(f.value).unwrap())
    };
    let len: usize = field("content-length").unwrap().parse().unwrap();
    assert_eq!(len, reply.len() - n, "Content-Length of {reply:?}");
    assert_eq!(field("allow").is_some(), r.status == Status::MethodNotAllowed);
    assert_eq!(
        field("www-authenticate").is_some(),
        r.status == Status::Unauthorized
    );
    if r.retry_after.is_some() {
        assert_eq!(r.status, Status::ServiceUnavailable);
        assert!(field("retry-after").is_some());
    }
}

/// A body of `len` bytes (`avail` of them here) fed in pieces from `cut`, the first piece
/// `first` bytes (what came with the head); the first answer.
fn body_in_pieces(
    check: &PutBody,
    buf: &[u8],
    first: usize,
    mut cut: impl FnMut() -> usize,
) -> Option<Result<(), Refusal>> {
    let mut b = check.clone();
    let mut n = first.min(buf.len());
    loop {
        if let Some(done) = b.received(buf, n) {
            return Some(done);
        }
        if b.got() == buf.len() {
            return None;
        }
        n = cut().min(buf.len() - b.got());
    }
}

fuzz_target!(|data: &[u8]| {
    let [sel, seed, data @ ..] = data else {
        return;
    };
    let token = || MgmtToken::new(TOKEN);
    let put = match sel & 3 {
        // The router with the ACL in front serves both files.
        _ if sel & 16 != 0 => PutFiles::RoutesAndRules(token()),
        0 => PutFiles::None("l2"),
        1 => PutFiles::Routes(token()),
        2 => PutFiles::Routes(None),
        _ => PutFiles::Rules(token()),
    };
    let busy = sel & 4 != 0;
    let routes = (sel & 8 != 0).then(|| {
        RouteCheck::new([
            parse_ipv4_cidr("10.0.0.1/24").unwrap(),
            parse_ipv4_cidr("10.0.1.1/24").unwrap(),
        ])
    });

    let whole = parse_head(&data[..data.len().min(HEAD_MAX)], &put, || busy);
    let mut one = || 1;
    let (bytewise, _) = head_in_pieces(data, &put, busy, &mut one);
    let mut cuts = Cuts::new(*seed);
    let (pieces, kept) = head_in_pieces(data, &put, busy, || cuts.next());
    for h in [&bytewise, &pieces] {
        match (h, &whole) {
            // Refused either way; which refusal may differ (a request line that is both
            // bad and too long is 400 or 414 by where the cut falls), and a refusal before
            // the method arrived does not count as a `PUT`.
            (Head::Refused(_), Head::Refused(_)) => {}
            (a, b) => assert_eq!(a, b, "the head's answer depends on the cut"),
        }
    }
    match pieces {
        Head::Partial => assert!(data.len() < HEAD_MAX),
        Head::Refused(r) => {
            check_reply(&r);
            let seen = &data[..kept];
            let start = seen.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
            assert_eq!(r.put, seen[start..].starts_with(b"PUT "));
        }
        Head::Metrics { head_len } | Head::File { head_len, .. } => assert!(head_len <= kept),
        Head::Put(head) => {
            assert!(head.head_len <= kept && head.body_len <= PUT_MAX && !busy);
            if let Some(m) = &head.if_match {
                // A stale generation is a well-formed 412; the one named matches.
                if let Some(r) = m.refusal(head.kind, u64::MAX) {
                    assert_eq!(r.status.code(), 412);
                    check_reply(&r);
                }
            }
            let body = &data[head.head_len..];
            let buf = &body[..body.len().min(head.body_len)];
            let check = PutBody::new(head.kind, head.body_len).with_routes(routes);
            let with_head = kept - head.head_len;
            let whole = body_in_pieces(&check, buf, buf.len(), || unreachable!());
            let bytewise = body_in_pieces(&check, buf, with_head, || 1);
            let mut cuts = Cuts::new(seed.wrapping_add(1));
            let pieces = body_in_pieces(&check, buf, with_head, || cuts.next());
            assert_eq!(bytewise, whole, "the body's answer depends on the cut");
            assert_eq!(pieces, whole, "the body's answer depends on the cut");
            match whole {
                None => assert!(buf.len() < head.body_len),
                Some(Ok(())) => assert_eq!(buf.len(), head.body_len),
                Some(Err(r)) => {
                    assert_eq!(r.status, Status::BadRequest);
                    check_reply(&r);
                }
            }
        }
    }
});
