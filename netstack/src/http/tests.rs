//! Host tests of the management plane's HTTP requests: every refusal by name, the limits, a
//! slow client, pipelined and garbage input.
//!
//! Past ~800 lines because the request state machine is one contract fed by one caller: heads,
//! bodies cut at every step and the route checks share its stream helpers here.

use super::*;
use std::string::{String, ToString};
use std::vec::Vec;
use std::{format, vec};

const TOKEN: &str = "gannet-test-token-0123456789";

fn router() -> PutFiles {
    PutFiles::Routes(MgmtToken::new(TOKEN))
}

fn parse(buf: &[u8]) -> Head {
    parse_head(buf, &router(), || false)
}

/// The refusal's status (panics on anything else).
fn refused(h: Head) -> Refusal {
    match h {
        Head::Refused(r) => r,
        other => panic!("not refused: {other:?}"),
    }
}

fn put_head(fields: &str) -> Vec<u8> {
    format!("PUT /routes HTTP/1.1\r\nHost: 10.0.0.1\r\n{fields}\r\n").into_bytes()
}

fn auth() -> String {
    format!("Authorization: Bearer {TOKEN}\r\n")
}

/// A Prometheus 3 scrape's head (about 400 bytes).
fn prometheus_head() -> Vec<u8> {
    b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9100\r\nUser-Agent: Prometheus/3.1.0\r\n\
Accept: application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;\
escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2\r\n\
Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
        .to_vec()
}

#[test]
fn get_metrics_is_served_and_what_follows_is_not_parsed() {
    let one = b"GET /metrics HTTP/1.0\r\n\r\n";
    assert_eq!(
        parse(one),
        Head::Metrics {
            head_len: one.len()
        }
    );
    // Pipelined: a second request (or garbage) after the first head is left alone.
    let mut two = one.to_vec();
    two.extend_from_slice(b"GET /metrics HTTP/1.1\r\n\r\n\x16\x03\x01garbage");
    assert_eq!(
        parse(&two),
        Head::Metrics {
            head_len: one.len()
        }
    );
    // Empty lines before the request line are skipped (RFC 9112 §2.2).
    let lead = b"\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n";
    assert_eq!(
        parse(lead),
        Head::Metrics {
            head_len: lead.len()
        }
    );
    let p = prometheus_head();
    assert!(p.len() > 350 && p.len() < HEAD_MAX, "{}", p.len());
    assert_eq!(parse(&p), Head::Metrics { head_len: p.len() });
}

#[test]
fn a_slow_client_is_partial_until_its_blank_line() {
    let p = prometheus_head();
    for k in 0..p.len() {
        assert_eq!(parse(&p[..k]), Head::Partial, "after {k} bytes");
    }
    assert_eq!(parse(&p), Head::Metrics { head_len: p.len() });
    let mut put = put_head(&format!("{}Content-Length: 5\r\n", auth()));
    let head_len = put.len();
    put.extend_from_slice(b"10.0.");
    for k in 0..head_len {
        assert_eq!(parse(&put[..k]), Head::Partial, "after {k} bytes");
    }
    let want = Head::Put(PutHead {
        kind: PutKind::Routes,
        head_len,
        body_len: 5,
        expect_continue: false,
        check_only: false,
        if_match: None,
    });
    assert_eq!(parse(&put[..head_len]), want);
    assert_eq!(parse(&put), want, "the body's start follows the head");
}

#[test]
fn a_long_request_line_is_414_before_it_ends() {
    let mut line = b"GET /".to_vec();
    line.resize(REQUEST_LINE_MAX + 1, b'a');
    // Not waiting for the rest (nor for the head limit).
    let r = refused(parse(&line));
    assert_eq!(r.status, Status::UriTooLong);
    assert!(r.reply().starts_with("HTTP/1.0 414 URI Too Long\r\n"));
    line.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    assert_eq!(refused(parse(&line)).status, Status::UriTooLong);
    // At the limit: parsed (and not found).
    let mut line = b"GET /".to_vec();
    line.resize(REQUEST_LINE_MAX - " HTTP/1.1".len(), b'a');
    line.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    assert_eq!(refused(parse(&line)).status, Status::NotFound);
    // At the limit, cut between its CR and LF: the CR may end the line, so not refused yet.
    let cr = line.len() - 4;
    assert_eq!(line[cr], b'\r');
    assert_eq!(parse(&line[..=cr]), Head::Partial);
    // A PUT's is counted as a PUT.
    let mut line = b"PUT /".to_vec();
    line.resize(REQUEST_LINE_MAX + 1, b'a');
    assert!(refused(parse(&line)).put);
}

#[test]
fn a_head_over_the_limit_is_431() {
    let mut head = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    head.resize(HEAD_MAX - 1, b'x');
    assert_eq!(parse(&head), Head::Partial, "one byte short of the limit");
    head.push(b'x');
    let r = refused(parse(&head));
    assert_eq!(r.status, Status::HeaderFieldsTooLarge);
    assert!(r
        .reply()
        .starts_with("HTTP/1.0 431 Request Header Fields Too Large\r\n"));
    // Too many fields, however short.
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for k in 0..=HEADERS_MAX {
        many.extend_from_slice(format!("X-{k}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert!(many.len() < HEAD_MAX);
    let r = refused(parse(&many));
    assert_eq!(r.status, Status::HeaderFieldsTooLarge);
    assert!(r.text.contains("header fields"), "{}", r.text);
    // Empty lines alone do not wait past the limit either.
    let blank = b"\r\n".repeat(HEAD_MAX / 2);
    assert_eq!(refused(parse(&blank)).status, Status::HeaderFieldsTooLarge);
}

#[test]
fn garbage_and_bad_syntax_are_400_at_once() {
    for bad in [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
        b"GET /metrics HTTP/1.1\rX",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nBad Name: 1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nX-Ctl: a\x01b\r\n\r\n",
        b"get\x00/metrics",
    ] {
        let r = refused(parse(bad));
        assert_eq!(r.status, Status::BadRequest, "{bad:?}");
        assert!(r.text.starts_with("bad request: "), "{}", r.text);
    }
    let r = refused(parse(b"PUT /routes HTTP/1.1\r\nX\x7f: 1\r\n"));
    assert_eq!((r.status, r.put), (Status::BadRequest, true));
}

#[test]
fn other_versions_are_505() {
    for v in ["HTTP/2.0", "HTTP/0.9", "HTTP/1.2"] {
        let head = format!("GET /metrics {v}\r\n\r\n");
        let r = refused(parse(head.as_bytes()));
        assert_eq!(r.status, Status::VersionNotSupported, "{v}");
        assert!(r
            .reply()
            .starts_with("HTTP/1.0 505 HTTP Version Not Supported\r\n"));
    }
    assert_eq!(
        refused(parse(b"GET /metrics FTP/1.1\r\n\r\n")).status,
        Status::BadRequest
    );
}

#[test]
fn a_method_the_path_does_not_take_is_405_with_allow() {
    for (head, allow) in [
        ("POST /metrics HTTP/1.1", "GET"),
        ("HEAD /metrics HTTP/1.1", "GET"),
        ("BREW /metrics HTTP/1.1", "GET"),
        ("PUT /metrics HTTP/1.1", "GET"),
        ("POST /routes HTTP/1.1", "GET, PUT"),
        ("DELETE /routes HTTP/1.1", "GET, PUT"),
        ("put /routes HTTP/1.1", "GET, PUT"),
    ] {
        let r = refused(parse(format!("{head}\r\n\r\n").as_bytes()));
        assert_eq!((r.status, r.allow), (Status::MethodNotAllowed, Some(allow)));
        let reply = r.reply();
        assert!(
            reply.starts_with("HTTP/1.0 405 Method Not Allowed\r\n"),
            "{reply}"
        );
        assert!(
            reply.contains(&format!("\r\nAllow: {allow}\r\n")),
            "{reply}"
        );
    }
}

#[test]
fn other_paths_are_404() {
    for head in [
        "GET / HTTP/1.1",
        "GET /metrics?x=1 HTTP/1.1",
        "GET /metrics/ HTTP/1.1",
        "BREW /pot HTTP/1.1",
        "PUT /route HTTP/1.1",
    ] {
        let r = refused(parse(format!("{head}\r\n\r\n").as_bytes()));
        assert_eq!(r.status, Status::NotFound, "{head}");
        assert!(
            r.text.contains("only GET /metrics and GET or PUT /routes"),
            "{}",
            r.text
        );
    }
    // A network function without files: PUT /routes names it; /metrics is served.
    let l2 = PutFiles::None("l2");
    let mut h = put_head(&format!("{}Content-Length: 1\r\n", auth()));
    h.push(b'x');
    let r = refused(parse_head(&h, &l2, || unreachable!()));
    assert_eq!((r.status, r.put), (Status::NotFound, true));
    assert!(r.text.contains("mode=l2 has no routes file"), "{}", r.text);
    let get = b"GET /metrics HTTP/1.1\r\n\r\n";
    assert_eq!(
        parse_head(get, &l2, || unreachable!()),
        Head::Metrics {
            head_len: get.len()
        }
    );
    let r = refused(parse_head(b"GET /x HTTP/1.1\r\n\r\n", &l2, || false));
    assert!(r.text.contains("mode=l2 has no files"), "{}", r.text);
}

#[test]
fn non_utf8_field_values_are_bytes_not_errors() {
    let get = b"GET /metrics HTTP/1.1\r\nX-Name: caf\xe9 \xff\r\n\r\n";
    assert_eq!(
        parse(get),
        Head::Metrics {
            head_len: get.len()
        }
    );
    // In the token: not the token.
    let mut h =
        b"PUT /routes HTTP/1.1\r\nAuthorization: Bearer gannet-test-token-012345678".to_vec();
    h.extend_from_slice(b"\xe9\r\nContent-Length: 1\r\n\r\n");
    assert_eq!(refused(parse(&h)).status, Status::Unauthorized);
    // In Content-Length: bad.
    let h = put_head(&format!("{}Content-Length: 1\u{e9}\r\n", auth()));
    assert_eq!(refused(parse(&h)).status, Status::BadRequest);
    // In a field name: bad syntax.
    let r = refused(parse(b"GET /metrics HTTP/1.1\r\nX-Caf\xe9: 1\r\n\r\n"));
    assert_eq!(r.status, Status::BadRequest);
}

/// `Content-Length: n` with the right token.
fn cl(n: &str) -> String {
    format!("{}Content-Length: {n}\r\n", auth())
}

/// Each `PUT /routes` refusal: the files served, the head's fields, the status, a word of the
/// text.
fn put_refusals() -> Vec<(PutFiles, String, Status, &'static str)> {
    vec![
        (
            PutFiles::Routes(None),
            cl("1"),
            Status::Forbidden,
            "no mgmt_token=",
        ),
        (
            router(),
            String::new(),
            Status::Unauthorized,
            "bearer token",
        ),
        (
            router(),
            "Authorization: Bearer gannet-test-token-012345678X\r\nContent-Length: 1\r\n".into(),
            Status::Unauthorized,
            "bearer token",
        ),
        (
            router(),
            format!("Authorization: Basic {TOKEN}\r\nContent-Length: 1\r\n"),
            Status::Unauthorized,
            "bearer token",
        ),
        (
            router(),
            auth(),
            Status::LengthRequired,
            "Content-Length required",
        ),
        (
            router(),
            format!("{}Transfer-Encoding: chunked\r\n", cl("1")),
            Status::LengthRequired,
            "Content-Length required",
        ),
        (router(), cl(""), Status::BadRequest, "bad Content-Length"),
        (router(), cl("-1"), Status::BadRequest, "bad Content-Length"),
        (
            router(),
            cl("1, 1"),
            Status::BadRequest,
            "bad Content-Length",
        ),
        (
            router(),
            cl("0x10"),
            Status::BadRequest,
            "bad Content-Length",
        ),
        (
            router(),
            format!("{}Content-Length: 2\r\n", cl("1")),
            Status::BadRequest,
            "bad Content-Length (one field",
        ),
        // The same length twice: refused too (RFC 9112 §6.3 item 5 allows either).
        (
            router(),
            format!("{}content-length: 1\r\n", cl("1")),
            Status::BadRequest,
            "bad Content-Length (one field",
        ),
        (
            router(),
            cl(&(PUT_MAX + 1).to_string()),
            Status::ContentTooLarge,
            "at most 8388608",
        ),
        (
            router(),
            cl("99999999999999999999999999"),
            Status::ContentTooLarge,
            "at most",
        ),
    ]
}

#[test]
fn put_refusals_in_order_each_named() {
    for (files, fields, status, text) in put_refusals() {
        let h = put_head(&fields);
        let r = refused(parse_head(&h, &files, || {
            panic!("busy asked before the checks")
        }));
        assert_eq!((r.status, r.put), (status, true), "{fields:?}: {}", r.text);
        assert!(r.text.contains(text), "{fields:?}: {}", r.text);
    }
    // Busy: asked last, 503 with Retry-After.
    let h = put_head(&cl("1"));
    let r = refused(parse_head(&h, &router(), || true));
    assert_eq!(
        (r.status, r.retry_after),
        (Status::ServiceUnavailable, Some(RETRY_AFTER_S))
    );
    assert!(r.text.contains("another upload"), "{}", r.text);
    let reply = r.reply();
    assert!(
        reply.starts_with("HTTP/1.0 503 Service Unavailable\r\n")
            && reply.contains("\r\nRetry-After: 5\r\n"),
        "{reply}"
    );
}

/// A `GET` has no body, but a bad or repeated `Content-Length` is still 400 (RFC 9112 §6.3
/// item 5), not read past; one valid length is ignored.
#[test]
fn a_get_with_a_bad_or_repeated_length_is_400() {
    for fields in [
        "Content-Length: 1\r\nContent-Length: 2\r\n",
        "Content-Length: 0\r\nContent-Length: 0\r\n",
        "Content-Length: x\r\n",
    ] {
        let h = format!("GET /metrics HTTP/1.1\r\n{fields}\r\n");
        let r = refused(parse(h.as_bytes()));
        assert_eq!((r.status, r.put), (Status::BadRequest, false), "{fields}");
        assert!(r.text.contains("Content-Length"), "{}", r.text);
    }
    let h = b"GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(parse(h), Head::Metrics { head_len: h.len() });
}

/// Heads whose lines end in a bare LF (RFC 9112 §2.2: a recipient may accept them) are read
/// as with CRLF, a `GET` and a `PUT` (whose body then starts at the right byte).
#[test]
fn lf_only_heads_are_accepted() {
    for h in [
        &b"GET /metrics HTTP/1.0\n\n"[..],
        b"\nGET /metrics HTTP/1.1\nHost: 10.0.0.1\n\n",
        b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1\n\r\n",
    ] {
        let got = parse(h);
        assert_eq!(got, Head::Metrics { head_len: h.len() }, "{h:?}");
    }
    let head =
        format!("PUT /routes HTTP/1.1\nAuthorization: Bearer {TOKEN}\nContent-Length: 5\n\n");
    let mut h = head.clone().into_bytes();
    assert_eq!(parse(&h[..h.len() - 1]), Head::Partial);
    h.extend_from_slice(b"10.0.");
    assert_eq!(
        parse(&h),
        Head::Put(PutHead {
            kind: PutKind::Routes,
            head_len: head.len(),
            body_len: 5,
            expect_continue: false,
            check_only: false,
            if_match: None,
        })
    );
}

#[test]
fn a_put_that_passes_is_its_body_length() {
    // The scheme is case-insensitive.
    let h = put_head(&format!(
        "authorization: BEARER {TOKEN}\r\ncontent-length: 7\r\nExpect: 100-Continue\r\n"
    ));
    assert_eq!(
        parse(&h),
        Head::Put(PutHead {
            kind: PutKind::Routes,
            head_len: h.len(),
            body_len: 7,
            expect_continue: true,
            check_only: false,
            if_match: None,
        })
    );
    let h = put_head(&cl(&PUT_MAX.to_string()));
    assert!(matches!(parse(&h), Head::Put(p) if p.body_len == PUT_MAX));
}

#[test]
fn replies_are_complete_http_responses() {
    let r = refused(parse(&put_head("Content-Length: 1\r\n")));
    let text = "PUT /routes: wrong or missing bearer token\n";
    assert_eq!(
        r.reply().as_str(),
        format!(
            "HTTP/1.0 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
Connection: close\r\nWWW-Authenticate: Bearer\r\n\r\n{text}",
            text.len()
        )
    );
    let ok = reply(Status::Ok, None, format_args!("generation 2"));
    assert!(ok.starts_with("HTTP/1.0 200 OK\r\n") && ok.ends_with("\r\n\r\ngeneration 2\n"));
    assert!(METRICS_HEAD.starts_with("HTTP/1.0 200 OK\r\n") && METRICS_HEAD.ends_with("\r\n\r\n"));
}

/// Feeds `body` to a routes file's [`PutBody`] `step` bytes at a time; returns the outcome and
/// after how many bytes it came.
fn stream(body: &[u8], step: usize) -> (Result<(), Refusal>, usize) {
    stream_kind(PutKind::Routes, body, step)
}

/// [`stream`] for the file `kind`.
fn stream_kind(kind: PutKind, body: &[u8], step: usize) -> (Result<(), Refusal>, usize) {
    let mut buf = vec![0u8; body.len()];
    let mut b = PutBody::new(kind, body.len());
    if body.is_empty() {
        return (b.received(&buf, 0).expect("an empty body is complete"), 0);
    }
    for chunk in body.chunks(step) {
        let at = b.got();
        buf[at..at + chunk.len()].copy_from_slice(chunk);
        if let Some(r) = b.received(&buf, chunk.len()) {
            return (r, b.got());
        }
    }
    panic!("never complete");
}

#[test]
fn a_body_is_checked_line_by_line_however_it_arrives() {
    let good = b"# routes\n192.168.0.0/16,10.0.1.2\n\n10.9.0.0/16,10.0.1.2";
    for step in [1, 2, 7, good.len()] {
        assert_eq!(stream(good, step), (Ok(()), good.len()), "step {step}");
    }
    assert_eq!(stream(b"", 1), (Ok(()), 0), "Content-Length: 0");
    let bad = b"192.168.0.0/16,10.0.1.2\n# a comment\n\n10.1.0.0/33,10.0.1.2\n10.2.0.0/16,x\n";
    for step in [1, 3, bad.len()] {
        let (r, got) = stream(bad, step);
        let r = r.expect_err("a bad line");
        assert_eq!(
            (r.status, r.put, got),
            (Status::BadRequest, true, bad.len())
        );
        assert!(
            r.text.contains("routes line 4: `10.1.0.0/33,10.0.1.2`"),
            "step {step}: {}",
            r.text
        );
        assert!(r.text.ends_with("the published FIB stays"), "{}", r.text);
    }
    // The last line without a newline is checked too; a non-UTF-8 line is named.
    let (r, _) = stream(b"10.9.0.0/16,10.0.1.2\n10.1.0.0/8,10.0.1", 4);
    assert!(r.unwrap_err().text.contains("routes line 2: "));
    let (r, _) = stream(b"10.9.0.0/16,10.0.1.2\r\n\xff\xfe\n", 1);
    assert!(r.unwrap_err().text.contains("routes line 2: not UTF-8"));
    // The live reload rebuilds the IPv4 FIB only: an IPv6 line is refused by name, never
    // dropped (issue 37).
    let (r, _) = stream(
        b"10.9.0.0/16,10.0.1.2\n2001:db8:100::/48,2001:db8:1::2\n",
        5,
    );
    let text = r.unwrap_err().text;
    assert!(
        text.contains(
            "routes line 2: `2001:db8:100::/48,2001:db8:1::2`: IPv6 routes are read at boot only"
        ),
        "{text}"
    );
}

/// Issue 40 item 1: with the router's ports, each route is checked as its line arrives
/// (`check_route`): a connected network's broadcast address as gateway is a 400 naming the
/// line and why, however the body arrives.
#[test]
fn a_routes_body_is_checked_against_the_ports() {
    let ports = crate::router::RouteCheck::new(
        ["10.0.0.1/24", "10.0.1.1/24"].map(|s| crate::router::parse_ipv4_cidr(s).unwrap()),
    );
    let body = b"10.9.0.0/16,10.0.1.2\n192.168.0.0/16,10.0.1.255\n224.0.0.0/4,10.0.1.2\n";
    for step in [1, 5, body.len()] {
        let mut buf = vec![0u8; body.len()];
        let mut b = PutBody::new(PutKind::Routes, body.len()).with_routes(Some(ports));
        let mut out = None;
        for chunk in body.chunks(step) {
            let at = b.got();
            buf[at..at + chunk.len()].copy_from_slice(chunk);
            out = b.received(&buf, chunk.len());
        }
        let r = out.expect("complete").expect_err("a refused route");
        assert_eq!(r.status, Status::BadRequest);
        assert_eq!(
            r.text.as_str(),
            "PUT /routes: routes line 2: `192.168.0.0/16,10.0.1.255`: gateway is the broadcast \
address of connected network 10.0.1.0/24; the published FIB stays",
            "step {step}"
        );
    }
    // Without the ports, only the syntax: the same body passes.
    assert_eq!(stream(body, 3), (Ok(()), body.len()));
}

/// A line over [`LINE_MAX`] is the 400 as soon as its bytes pass the cap, whatever the body's
/// length and however it arrives (an 8 MiB body without a newline: named after the cap's
/// worth, not at its end); a line at the cap, and a long body of lines under it, pass. Each
/// byte is scanned once (`scanned`), so per-call work is the bytes that arrived.
#[test]
fn a_line_over_the_cap_is_refused_as_soon_as_it_passes() {
    let at_cap = format!("#{}\n10.9.0.0/16,10.0.1.2\n", "x".repeat(LINE_MAX - 1));
    for step in [1, 100, at_cap.len()] {
        assert_eq!(stream(at_cap.as_bytes(), step), (Ok(()), at_cap.len()));
    }
    // The last line, unterminated, at and over the cap.
    let last = format!("10.9.0.0/16,10.0.1.2\n#{}", "x".repeat(LINE_MAX - 1));
    assert_eq!(stream(last.as_bytes(), 7), (Ok(()), last.len()));
    let (r, _) = stream(format!("{last}x").as_bytes(), 7);
    assert!(r.unwrap_err().text.contains("routes line 2: longer than"));
    // Without a newline: refused once LINE_MAX + 1 bytes of the line are in, 8 MiB announced.
    let mut body = b"10.9.0.0/16,10.0.1.2\n".to_vec();
    let first = body.len();
    body.resize(PUT_MAX, b'#');
    for step in [1, 1460, 16384] {
        let (r, got) = stream(&body, step);
        let r = r.expect_err("a long line");
        assert_eq!(r.status, Status::BadRequest);
        assert_eq!(
            r.text.as_str(),
            format!(
                "PUT /routes: routes line 2: longer than {LINE_MAX} bytes; the published FIB stays"
            )
        );
        assert!(
            got > first + LINE_MAX && got <= first + LINE_MAX + step,
            "step {step}: {got}"
        );
    }
    // A rules body too, its line named.
    let mut rules = b"default deny\n\n".to_vec();
    rules.resize(4 * LINE_MAX, b'a');
    let (r, got) = stream_kind(PutKind::Rules, &rules, 64);
    assert!(got < rules.len());
    assert!(r.unwrap_err().text.contains("rules line 3: longer than"));
    // Many lines under the cap, fed a byte at a time: all checked.
    let mut many = String::new();
    for k in 0..200u32 {
        many.push_str(&format!(
            "# {}\n100.64.{k}.0/24,10.0.1.2\n",
            "c".repeat(300)
        ));
    }
    assert_eq!(stream(many.as_bytes(), 1), (Ok(()), many.len()));
}

#[test]
fn a_body_never_takes_more_than_its_length() {
    let mut b = PutBody::new(PutKind::Rules, 4);
    let buf = *b"1234";
    assert_eq!(b.received(&buf, 2), None);
    // More than announced (the caller reads into `buf[got..]`, which cannot hold it): capped.
    assert!(b.received(&buf, 10).is_some());
    assert_eq!(b.got(), 4);
}

fn acl() -> PutFiles {
    PutFiles::Rules(MgmtToken::new(TOKEN))
}

fn rules_head(fields: &str) -> Vec<u8> {
    format!("PUT /rules HTTP/1.1\r\nHost: 10.0.0.1\r\n{fields}\r\n").into_bytes()
}

/// The ACL's `PUT /rules`: the same rules as `PUT /routes` (token, lengths, busy), each
/// naming its path; each network function's file is 404 on the other's management plane, by
/// name.
#[test]
fn put_rules_is_the_acls_file_with_the_same_rules() {
    let h = rules_head(&cl("12"));
    assert_eq!(
        parse_head(&h, &acl(), || false),
        Head::Put(PutHead {
            kind: PutKind::Rules,
            head_len: h.len(),
            body_len: 12,
            expect_continue: false,
            check_only: false,
            if_match: None,
        })
    );
    for (files, fields, status, text) in put_refusals() {
        let files = match files {
            PutFiles::Routes(t) => PutFiles::Rules(t),
            other => other,
        };
        let r = refused(parse_head(&rules_head(&fields), &files, || false));
        assert_eq!((r.status, r.put), (status, true), "{fields:?}: {}", r.text);
        assert!(r.text.starts_with("PUT /rules: "), "{}", r.text);
        assert!(r.text.contains(text), "{fields:?}: {}", r.text);
    }
    let r = refused(parse_head(&h, &acl(), || true));
    assert_eq!(r.status, Status::ServiceUnavailable);
    // The other file, and a method /rules does not take.
    let r = refused(parse_head(&put_head(&cl("1")), &acl(), || false));
    assert_eq!(r.status, Status::NotFound);
    assert_eq!(
        r.text.as_str(),
        "PUT /routes: mode=acl has no routes file (the router's)"
    );
    let r = refused(parse_head(&h, &router(), || false));
    assert_eq!(r.status, Status::NotFound);
    assert_eq!(
        r.text.as_str(),
        "PUT /rules: mode=router has no rules file (the ACL's)"
    );
    let r = refused(parse_head(b"POST /rules HTTP/1.1\r\n\r\n", &acl(), || {
        false
    }));
    assert_eq!(
        (r.status, r.allow),
        (Status::MethodNotAllowed, Some("GET, PUT"))
    );
    let r = refused(parse_head(b"GET /x HTTP/1.1\r\n\r\n", &acl(), || false));
    assert_eq!(r.text.as_str(), "only GET /metrics and GET or PUT /rules");
}

/// The router with the ACL in front serves both files, each under the same rules as where
/// it is the only one (token, lengths, busy, `?check`), and names both in its 404.
#[test]
fn a_router_with_rules_serves_routes_and_rules() {
    let both = PutFiles::RoutesAndRules(MgmtToken::new(TOKEN));
    assert_eq!(both.mode(), "router");
    for (kind, h) in [
        (PutKind::Routes, put_head(&cl("12"))),
        (PutKind::Rules, rules_head(&cl("12"))),
    ] {
        assert_eq!(
            parse_head(&h, &both, || false),
            Head::Put(PutHead {
                kind,
                head_len: h.len(),
                body_len: 12,
                expect_continue: false,
                check_only: false,
                if_match: None,
            })
        );
        let r = refused(parse_head(&h, &both, || true));
        assert_eq!(r.status, Status::ServiceUnavailable, "{kind:?}");
        let get = format!("GET {} HTTP/1.1\r\n\r\n", kind.path()).into_bytes();
        assert_eq!(
            parse_head(&get, &both, || false),
            Head::File {
                kind,
                head_len: get.len()
            }
        );
    }
    for (files, fields, status, text) in put_refusals() {
        let files = match files {
            PutFiles::Routes(t) => PutFiles::RoutesAndRules(t),
            other => other,
        };
        let r = refused(parse_head(&rules_head(&fields), &files, || false));
        assert_eq!((r.status, r.put), (status, true), "{fields:?}: {}", r.text);
        assert!(r.text.contains(text), "{fields:?}: {}", r.text);
    }
    let r = refused(parse_head(b"GET /x HTTP/1.1\r\n\r\n", &both, || false));
    assert_eq!(r.status, Status::NotFound);
    assert_eq!(
        r.text.as_str(),
        "only GET /metrics and GET or PUT /routes and /rules"
    );
}

/// A rules body is checked line by line in the ACL's syntax, however it arrives: the first bad
/// line is named with its number and text, the checks across lines included (a second
/// `default`, a rule past `MAX_RULES`).
#[test]
fn a_rules_body_names_its_first_bad_line() {
    let good = b"# the firewall\ndefault deny\nallow proto udp dst 10.0.1.0/24 dport 53\n\ndeny src 10.0.0.3/32";
    for step in [1, 5, good.len()] {
        assert_eq!(
            stream_kind(PutKind::Rules, good, step),
            (Ok(()), good.len()),
            "step {step}"
        );
    }
    for (body, want) in [
        (
            &b"allow proto udp\nallow dport 80\n"[..],
            "rules line 2: `allow dport 80`: ",
        ),
        (
            b"allow src 10.0.0.1/8 # host bits\n",
            "rules line 1: `allow src 10.0.0.1/8 # host bits`: ",
        ),
        (
            b"default deny\nallow proto tcp\ndefault allow\n",
            "rules line 3: `default allow`: ",
        ),
        (b"allow\n\xff\n", "rules line 2: not UTF-8"),
        (b"permit proto tcp", "rules line 1: `permit proto tcp`: "),
    ] {
        for step in [1, 4, body.len()] {
            let (r, got) = stream_kind(PutKind::Rules, body, step);
            let r = r.expect_err("a bad line");
            assert_eq!((r.status, got), (Status::BadRequest, body.len()));
            assert!(r.text.starts_with("PUT /rules: "), "{}", r.text);
            assert!(r.text.contains(want), "step {step}: {}", r.text);
            assert!(r.text.ends_with("the published rules stay"), "{}", r.text);
        }
    }
    // The second `default` names the first one's line.
    let (r, _) = stream_kind(PutKind::Rules, b"default deny\n\ndefault deny\n", 2);
    assert!(r.unwrap_err().text.contains("line 1"));
    // One rule past the limit.
    let mut many = String::new();
    for i in 0..=crate::acl::MAX_RULES {
        many.push_str(&format!("deny src 10.{}.{}.0/24\n", i / 256, i % 256));
    }
    let (r, _) = stream_kind(PutKind::Rules, many.as_bytes(), 4096);
    let text = r.unwrap_err().text;
    let last = crate::acl::MAX_RULES + 1;
    assert!(text.contains(&format!("rules line {last}: ")), "{text}");
}

/// Feeds `body` to a routes or rules [`PutBody`] in pieces of the lengths `sizes` gives (in
/// turn, cycled); returns the outcome (the refusal as `PutBody` gives it, unboxed).
#[allow(clippy::result_large_err)]
fn stream_pieces(kind: PutKind, body: &[u8], sizes: &[usize]) -> Result<(), Refusal> {
    let mut buf = vec![0u8; body.len()];
    let mut b = PutBody::new(kind, body.len());
    if body.is_empty() {
        return b.received(&buf, 0).expect("an empty body is complete");
    }
    for &n in sizes.iter().cycle() {
        let at = b.got();
        let n = n.min(body.len() - at);
        buf[at..at + n].copy_from_slice(&body[at..at + n]);
        if let Some(r) = b.received(&buf, n) {
            return r;
        }
    }
    unreachable!("sizes are not all 0")
}

/// The scan resumes where it stopped: however a body is cut into pieces (every fixed step up
/// to 70, and pseudo-random cuts), the outcome is the one of the body in one piece (the same
/// refusal, naming the same line), for good bodies, bad lines, lines at and over the cap (in
/// the middle and last), CRLF line ends and bytes that are not UTF-8.
#[test]
fn the_outcome_does_not_depend_on_how_the_body_is_cut() {
    let cap = "#".repeat(LINE_MAX);
    let over = "#".repeat(LINE_MAX + 1);
    let bodies: Vec<(PutKind, Vec<u8>)> = vec![
        (PutKind::Routes, b"10.9.0.0/16,10.0.1.2\n\n# x\n".to_vec()),
        (
            PutKind::Routes,
            format!("{cap}\n10.9.0.0/16,10.0.1.2\r\n{cap}").into_bytes(),
        ),
        (
            PutKind::Routes,
            format!("10.9.0.0/16,10.0.1.2\n{over}\n10.1.0.0/16,x\n").into_bytes(),
        ),
        (
            PutKind::Routes,
            format!("10.1.0.0/33,10.0.1.2\n{over}").into_bytes(),
        ),
        (
            PutKind::Routes,
            format!("10.9.0.0/16,10.0.1.2\n\n{over}").into_bytes(),
        ),
        (
            PutKind::Routes,
            b"10.9.0.0/16,10.0.1.2\n\xff\xfe\n".to_vec(),
        ),
        (
            PutKind::Rules,
            format!("default deny\n{cap}\nallow proto udp\n").into_bytes(),
        ),
        (
            PutKind::Rules,
            format!("allow proto udp\n{over}\ndefault deny\n").into_bytes(),
        ),
        (PutKind::Rules, b"default deny\ndefault allow\n".to_vec()),
    ];
    let refused: Vec<bool> = bodies
        .iter()
        .map(|(k, b)| stream_pieces(*k, b, &[b.len()]).is_err())
        .collect();
    let want = [false, false, true, true, true, true, false, true, true];
    assert_eq!(refused, want);
    let mut seed = 0x9e37_79b9_u32;
    for (kind, body) in &bodies {
        let whole = stream_pieces(*kind, body, &[body.len()]);
        let check = |sizes: &[usize]| {
            let got = stream_pieces(*kind, body, sizes);
            assert_eq!(
                got,
                whole,
                "{kind:?} {:?} cut {sizes:?}",
                String::from_utf8_lossy(body)
            );
        };
        for step in 1..=70 {
            check(&[step]);
        }
        for _ in 0..50 {
            let sizes: Vec<usize> = (0..16)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    1 + (seed >> 16) as usize % 600
                })
                .collect();
            check(&sizes);
        }
    }
}

/// A line over the cap is refused as soon as it is seen, whether its newline came in the same
/// read or not (found by the `mgmt_request` fuzz target: with its newline, a long first line
/// of an incomplete body was answered only at the body's end).
#[test]
fn a_long_line_is_refused_before_the_body_ends_with_or_without_its_newline() {
    let over = "#".repeat(LINE_MAX + 1);
    for first in [format!("{over}\n"), over.clone()] {
        let len = 64 * 1024;
        let mut buf = vec![b'\n'; len];
        buf[..first.len()].copy_from_slice(first.as_bytes());
        let mut b = PutBody::new(PutKind::Routes, len);
        let r = b.received(&buf, first.len()).expect("answered at once");
        let text = r.expect_err("too long").text;
        assert!(
            text.contains("routes line 1: longer than 512 bytes"),
            "{text}"
        );
        assert_eq!(b.got(), first.len());
    }
}

#[test]
fn get_routes_is_served_in_router_mode_only() {
    let get = b"GET /routes HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(
        parse(get),
        Head::File {
            kind: PutKind::Routes,
            head_len: get.len()
        }
    );
    // LF-only, and a query (ignored).
    let lf = b"GET /routes?x HTTP/1.1\n\n";
    assert_eq!(
        parse(lf),
        Head::File {
            kind: PutKind::Routes,
            head_len: lf.len()
        }
    );
    let acl = PutFiles::Rules(MgmtToken::new(TOKEN));
    let r = refused(parse_head(get, &acl, || false));
    assert_eq!(r.status, Status::NotFound);
    let r = refused(parse(b"DELETE /routes HTTP/1.1\r\n\r\n"));
    assert_eq!(
        (r.status, r.allow),
        (Status::MethodNotAllowed, Some("GET, PUT"))
    );
    let r = refused(parse(b"GET /rules HTTP/1.1\r\n\r\n"));
    assert_eq!(r.status, Status::NotFound);
    let head = file_head(PutKind::Routes, 7, 12);
    assert_eq!(
        head.as_str(),
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nETag: \"gen-7\"\r\nX-Routes: 12\r\nConnection: close\r\n\r\n"
    );
}

/// `GET /rules` is the ACL's: served in ACL mode (no token), 404 in router mode; its head
/// counts rules.
#[test]
fn get_rules_is_served_in_acl_mode_only() {
    let get = b"GET /rules HTTP/1.1\r\nHost: x\r\n\r\n";
    let acl = PutFiles::Rules(None);
    assert_eq!(
        parse_head(get, &acl, || false),
        Head::File {
            kind: PutKind::Rules,
            head_len: get.len()
        }
    );
    let r = refused(parse(get));
    assert_eq!(r.status, Status::NotFound);
    let head = file_head(PutKind::Rules, 3, 5);
    assert_eq!(
        head.as_str(),
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nETag: \"gen-3\"\r\nX-Rules: 5\r\nConnection: close\r\n\r\n"
    );
    // A stale `If-Match` on `PUT /rules` names the rule set and its current tag.
    let r = IfMatch::parse(b"\"gen-2\"")
        .refusal(PutKind::Rules, 3)
        .expect("gen-2 is not gen-3");
    assert_eq!(r.status, Status::PreconditionFailed);
    assert!(
        r.text
            .contains("PUT /rules: If-Match does not name the published rule set, now \"gen-3\""),
        "{}",
        r.text
    );
    assert!(IfMatch::parse(b"\"gen-3\"")
        .refusal(PutKind::Rules, 3)
        .is_none());
}

#[test]
fn if_match_and_check_are_read_from_a_put_head() {
    let put = |target: &str, fields: &str| {
        let h = format!(
            "PUT {target} HTTP/1.1\r\n{}{fields}Content-Length: 5\r\n\r\n",
            auth()
        );
        parse(h.as_bytes())
    };
    let Head::Put(h) = put(
        "/routes?check",
        "If-Match: \"gen-3\", W/\"gen-4\", \"x\"\r\n",
    ) else {
        panic!("accepted")
    };
    assert!(h.check_only);
    let m = h.if_match.expect("If-Match read");
    assert_eq!(
        m,
        IfMatch::Generations(heapless::Vec::from_slice(&[3]).unwrap())
    );
    assert!(m.matches(3) && !m.matches(4));
    assert_eq!(m.refusal(PutKind::Routes, 3), None);
    let r = m.refusal(PutKind::Routes, 4).expect("stale");
    assert_eq!(r.status.code(), 412);
    assert!(r.text.contains("now \"gen-4\""), "{}", r.text);
    assert!(r
        .reply()
        .starts_with("HTTP/1.0 412 Precondition Failed\r\n"));
    let Head::Put(h) = put("/routes", "if-match: *\r\n") else {
        panic!("accepted")
    };
    assert_eq!((h.check_only, h.if_match), (false, Some(IfMatch::Any)));
    assert!(IfMatch::Any.matches(99));
    let Head::Put(h) = put("/routes", "") else {
        panic!("accepted")
    };
    assert_eq!(h.if_match, None);
    // Garbage names no generation: nothing matches.
    assert!(!IfMatch::parse(b"gen-3").matches(3));
    assert!(!IfMatch::parse(b"\"gen-99999999999999999999\"").matches(0));
    let r = refused(put("/routes?commit", ""));
    assert_eq!(r.status, Status::BadRequest);
    assert!(r.text.contains("unknown query `commit`"), "{}", r.text);
    let c = check_reply(PutKind::Routes, 3);
    assert!(c.starts_with("HTTP/1.0 200 OK\r\n"));
    assert!(c.contains("PUT /routes?check: 3 lines checked"), "{c}");
}

/// The NAT's `PUT /nat_timeouts`: served in NAT mode only; its body is one line of four
/// timeouts in seconds (comments and blank lines around it), each bad line named.
#[test]
fn nat_timeouts_are_one_line_of_four_seconds() {
    let nat = PutFiles::NatTimeouts(MgmtToken::new(TOKEN));
    assert_eq!(nat.mode(), "nat");
    let h = format!(
        "PUT /nat_timeouts HTTP/1.1\r\nHost: 10.0.0.1\r\n{}\r\n",
        cl("14")
    )
    .into_bytes();
    assert!(matches!(
        parse_head(&h, &nat, || false),
        Head::Put(PutHead {
            kind: PutKind::NatTimeouts,
            body_len: 14,
            ..
        })
    ));
    let r = refused(parse_head(&h, &router(), || false));
    assert_eq!(
        r.text.as_str(),
        "PUT /nat_timeouts: mode=router has no timeouts (the NAT's)"
    );
    let good = b"# UDP 1 s\n7440,240,1,60\n\n";
    for step in [1, 3, good.len()] {
        assert_eq!(
            stream_kind(PutKind::NatTimeouts, good, step),
            (Ok(()), good.len()),
            "step {step}"
        );
    }
    for (bad, named) in [
        (
            &b"7440,240,1\n"[..],
            "timeouts line 1: `7440,240,1`: expected ",
        ),
        (
            b"7440,240,1,60\n1,2,3,4\n",
            "timeouts line 2: `1,2,3,4`: one line",
        ),
    ] {
        let (r, _) = stream_kind(PutKind::NatTimeouts, bad, bad.len());
        let r = r.unwrap_err();
        assert_eq!(r.status, Status::BadRequest);
        assert!(r.text.starts_with("PUT /nat_timeouts: "), "{}", r.text);
        assert!(r.text.contains(named), "{}", r.text);
        assert!(r.text.ends_with("; the timeouts stay"), "{}", r.text);
    }
}

/// An image's own network function's files (`PutFiles::Nf`): `GET` and `PUT /NAME` for each
/// declared file; a stock path is 404 naming its owner, another path lists the NF's; a
/// body's lines are checked for UTF-8 and length only (the NF's parser reads the whole text
/// in the kernel).
#[test]
fn an_nf_serves_its_own_files_by_name() {
    let mut files = heapless::Vec::new();
    files
        .extend_from_slice(&["blocked_ports", "hosts"])
        .unwrap();
    let nf = PutFiles::Nf {
        nf: "port_filter",
        files,
        token: MgmtToken::new(TOKEN),
    };
    assert_eq!(nf.mode(), "port_filter");
    assert_eq!(nf.paths().to_string(), "/blocked_ports, /hosts");
    let kind = PutKind::NfFile("blocked_ports");
    assert_eq!(kind.path().to_string(), "/blocked_ports");
    assert_eq!(nf.kind_at("/hosts?check"), Some(PutKind::NfFile("hosts")));
    assert_eq!(nf.kind_at("/routes"), Some(PutKind::Routes));
    assert_eq!(nf.kind_at("/blocked"), None);
    let h = format!(
        "PUT /blocked_ports?check HTTP/1.1\r\nHost: 10.0.0.1\r\n{}\r\n",
        cl("5")
    )
    .into_bytes();
    assert!(matches!(
        parse_head(&h, &nf, || false),
        Head::Put(PutHead {
            kind: PutKind::NfFile("blocked_ports"),
            body_len: 5,
            check_only: true,
            ..
        })
    ));
    let get = b"GET /hosts HTTP/1.1\r\n\r\n";
    assert_eq!(
        parse_head(get, &nf, || false),
        Head::File {
            kind: PutKind::NfFile("hosts"),
            head_len: get.len()
        }
    );
    // Another NF's file, a stock one, a path of none, no token.
    let r = refused(parse_head(&h, &router(), || false));
    assert_eq!(r.text.as_str(), "only GET /metrics and GET or PUT /routes");
    let r = refused(parse_head(&put_head(&cl("1")), &nf, || false));
    assert_eq!(
        r.text.as_str(),
        "PUT /routes: `port_filter` has no routes file (the router's)"
    );
    // A GET of another NF's file says GET.
    let r = refused(parse_head(b"GET /rules HTTP/1.1\r\n\r\n", &nf, || false));
    assert_eq!(
        r.text.as_str(),
        "GET /rules: `port_filter` has no rules file (the ACL's)"
    );
    assert!(!r.put);
    let none = PutFiles::Nf {
        nf: "port_filter",
        files: heapless::Vec::new(),
        token: None,
    };
    let r = refused(parse_head(b"GET /x HTTP/1.1\r\n\r\n", &none, || false));
    assert_eq!(
        r.text.as_str(),
        "only GET /metrics (`port_filter` has no files to PUT)"
    );
    let r = refused(parse_head(b"GET /blocked HTTP/1.1\r\n\r\n", &nf, || false));
    assert_eq!(
        (r.status, r.text.as_str()),
        (
            Status::NotFound,
            "only GET /metrics and GET or PUT /blocked_ports, /hosts"
        )
    );
    let no_token = PutFiles::Nf {
        nf: "port_filter",
        files: heapless::Vec::from_slice(&["blocked_ports"]).unwrap(),
        token: None,
    };
    let r = refused(parse_head(&h, &no_token, || false));
    assert_eq!(
        (r.status, r.text.as_str()),
        (
            Status::Forbidden,
            "PUT /blocked_ports: no mgmt_token= on the kernel command line"
        )
    );
    let stale = IfMatch::parse(b"\"gen-1\"").refusal(kind, 2).unwrap();
    assert!(
        stale.text.starts_with(
            "PUT /blocked_ports: If-Match does not name the published files, now \"gen-2\""
        ),
        "{}",
        stale.text
    );
    // The body: any text, line by line within the cap, in UTF-8.
    let good = b"# two\n7000\n7001\nanything the parser reads\n";
    for step in [1, 5, good.len()] {
        assert_eq!(stream_kind(kind, good, step), (Ok(()), good.len()));
    }
    let (r, _) = stream_kind(kind, b"7000\n70\xff0\n", 3);
    assert_eq!(
        r.unwrap_err().text.as_str(),
        "PUT /blocked_ports: file `blocked_ports` line 2: not UTF-8; the published files stay"
    );
    let long = format!("7000\n{}\n", "9".repeat(LINE_MAX + 1));
    let (r, _) = stream_kind(kind, long.as_bytes(), 64);
    assert!(r.unwrap_err().text.contains(&format!(
        "file `blocked_ports` line 2: longer than {LINE_MAX} bytes"
    )),);
    assert_eq!(
        file_head(kind, 3, 2).as_str(),
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nETag: \"gen-3\"\r\nX-Lines: 2\r\nConnection: close\r\n\r\n"
    );
}

/// The router with the ACL in front serves `/routes` and `/rules`, not the NAT's file.
#[test]
fn routes_and_rules_serve_those_two_only() {
    let both = PutFiles::RoutesAndRules(MgmtToken::new(TOKEN));
    assert!(both.serves(PutKind::Routes).is_some() && both.serves(PutKind::Rules).is_some());
    assert_eq!(both.serves(PutKind::NatTimeouts), None);
    assert_eq!(both.serves(PutKind::NfFile("routes")), None);
}
