//! The management plane's HTTP/1.x requests, sans I/O: what a request head asks for, whether
//! a `PUT` of a network function's file (the router's `/routes`, the ACL's `/rules`:
//! [`PutKind`]) may start, and the body's progress, as pure functions and state over byte
//! slices. The sockets, timers and the one response buffer stay in the kernel's management
//! plane (`control::mgmt`), which feeds bytes in and sends what this module answers; so every
//! refusal is host-tested here, without a guest.
//!
//! The head is parsed with [`httparse`] (no heap, no `std`) each time bytes arrive, from the
//! start: at most [`HEAD_MAX`] bytes, so the repeated work is bounded and a slow client (a byte
//! at a time) is just [`Head::Partial`] until its blank line. Every refusal is a named status
//! ([`Status`]) with a one-line text, never a silent close, and never a wait for more than
//! [`HEAD_MAX`] bytes:
//!
//! | what | status |
//! | --- | --- |
//! | request line longer than [`REQUEST_LINE_MAX`] | 414 URI Too Long |
//! | head longer than [`HEAD_MAX`], or more than [`HEADERS_MAX`] fields | 431 Request Header Fields Too Large |
//! | bad syntax (httparse's error named) | 400 Bad Request |
//! | a version other than HTTP/1.0 or HTTP/1.1 | 505 HTTP Version Not Supported |
//! | a path other than `/metrics` and the network function's files (the router's `/routes`, the ACL's `/rules`, the NAT's `/nat_timeouts`, an image's own NF's `/NAME`) | 404 Not Found |
//! | a method the path does not take | 405 Method Not Allowed, with `Allow` |
//! | a bad or repeated `Content-Length` (any method) | 400 Bad Request |
//!
//! `GET` of the network function's file (no token: it reads what `/metrics` already tells in
//! part) is [`Head::File`], answered with what is installed after [`file_head`]: `ETag:
//! "gen-N"`, the published generation ([`etag`]), and a count of entries. `GET /routes`
//! (router mode): the FIB's entries, one per line in the console's `routes` forms
//! (`netstack::router::show`: a static route as its routes-file line, connected, local and
//! broadcast entries in forms of their own), `X-Routes`. `GET /rules` (ACL mode): the rule
//! set's rules in the rules file's syntax, in order (`netstack::acl::Rule`'s `Display`: each
//! line parses back to its rule), `X-Rules`.
//!
//! Line ends may be CRLF or a bare LF (RFC 9112 §2.2 lets a recipient accept LF alone;
//! httparse does).
//!
//! `PUT /routes` and `PUT /rules` then, in this order (each counted by the kernel under its
//! outcome): 404 for a network function without that file, 403 without `mgmt_token=`, 401
//! without the bearer token, 411 without `Content-Length` (or with `Transfer-Encoding`), 400
//! for a bad or repeated `Content-Length` (RFC 9112 §6.3 item 5: a recipient may accept
//! repeats of one value; refusing them leaves no two readings of where the body ends), 413
//! above [`PUT_MAX`], 503 with `Retry-After: RETRY_AFTER_S` while another upload is in
//! progress (decided at the head, before any byte of the body is read: one upload at a
//! time); then the kernel answers 412 when `If-Match` ([`IfMatch`]) does not name the
//! published generation (the FIB's for `PUT /routes`, the rule set's for `PUT /rules`), before
//! the body is read and again before the new one is published. A query other than
//! `?check` is 400; `?check` validates only ([`PutHead::check_only`], [`check_reply`]). Its body is checked line by line as it arrives ([`PutBody`]: the routes file's
//! syntax, or the rules file's; each byte scanned once); a line longer than [`LINE_MAX`] is
//! refused (400, named) as soon as it passes the cap, any other bad line (400, the first one
//! named) once the body is complete.
//!
//! An image's own network function's files (`PUT /NAME`, [`PutKind::NfFile`], served by
//! [`PutFiles::Nf`]) take the same head rules; their body is checked for UTF-8 and the line cap
//! only (the NF's parser reads the whole text in the kernel, which answers its refusal 400),
//! and their `GET` answers the text in force with `X-Lines`.
//!
//! Whatever follows a complete head (a pipelined request, garbage) is not parsed: a `GET` is
//! answered and the connection closed (`Connection: close`), a `PUT`'s body is the bytes after
//! its head.

use crate::acl::rules::{parse_line, RuleError, RuleLine};
use crate::acl::MAX_RULES;
use crate::config::{parse_routes_file, MgmtToken};
use crate::router::RouteCheck;
use core::fmt::Write;

/// Longest request line (method, target, version; bytes, without CRLF). RFC 9112 §3
/// recommends support for request lines of at least 8000 octets for general-purpose servers;
/// this one serves two short paths, so anything longer is 414 (RFC 9110 §15.5.15).
pub const REQUEST_LINE_MAX: usize = 256;
/// Largest request head (request line, header fields and the blank line that ends them, RFC
/// 9112 §2.1), in bytes: a Prometheus scrape's head is about 400 bytes (its `Accept` field is
/// long), curl's under 100. A longer head is 431 (RFC 6585 §5).
pub const HEAD_MAX: usize = 1024;
/// Most header fields in a request head; more is 431 (RFC 6585 §5).
pub const HEADERS_MAX: usize = 32;
/// Largest `PUT /routes` body (bytes): 8 MiB, about 300,000 routes (a full BGP table is ~1
/// million routes, but the router's FIB holds at most `netstack::router`'s rule limit). A
/// larger `Content-Length` is 413 (RFC 9110 §15.5.14).
pub const PUT_MAX: usize = 8 << 20;
/// Longest line of a `PUT` body (bytes, its newline not counted): the routes file's longest
/// route is 34 bytes and a rules file's rule about 100, so this leaves room for comments; a
/// longer line is refused as soon as its bytes pass the cap (a body is never scanned twice,
/// and a line is never held for a later look). The boot routes file has the same cap
/// (`crate::config::ROUTES_LINE_MAX`).
pub const LINE_MAX: usize = crate::config::ROUTES_LINE_MAX;
/// `Retry-After` (seconds, RFC 9110 §10.2.3) of a 503 for a `PUT` while another upload is in
/// progress: a 3 MiB body takes ~18 s under TCG, a short one well under a second.
pub const RETRY_AFTER_S: u32 = 5;
/// Longest bad-line message kept (bytes).
pub const BAD_LINE_MAX: usize = 200;
/// Longest refusal text (bytes).
pub const TEXT_MAX: usize = 320;
/// Longest reply built here (status line, header fields and text; bytes).
pub const REPLY_MAX: usize = 640;
/// The interim response to `Expect: 100-continue` (RFC 9110 §10.1.1, §15.2.1), sent before a
/// `PUT` body that did not come with the head.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
/// The head of a `/metrics` response (the Prometheus text exposition format 0.0.4); the body
/// follows, and the end of the connection ends it (RFC 9112 §6.3, item 8).
pub const METRICS_HEAD: &str =
    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n";

/// A final status the management plane answers with (RFC 9110 §15, RFC 6585 §5).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// 200 OK (RFC 9110 §15.3.1): the routes were replaced.
    Ok,
    /// 400 Bad Request (RFC 9110 §15.5.1): bad syntax, a bad `Content-Length`, a bad body
    /// line (its syntax, or a route `check_route` refuses), a route the rebuild refuses (a
    /// duplicate prefix).
    BadRequest,
    /// 401 Unauthorized (RFC 9110 §15.5.2): no or the wrong bearer token; the reply carries
    /// `WWW-Authenticate: Bearer` (RFC 6750 §3).
    Unauthorized,
    /// 403 Forbidden (RFC 9110 §15.5.4): `PUT` without `mgmt_token=` configured.
    Forbidden,
    /// 404 Not Found (RFC 9110 §15.5.5): a path not served.
    NotFound,
    /// 405 Method Not Allowed (RFC 9110 §15.5.6): a method the path does not take; the reply
    /// carries `Allow` (RFC 9110 §10.2.1).
    MethodNotAllowed,
    /// 408 Request Timeout (RFC 9110 §15.5.9): a `PUT` body arriving below the minimum rate
    /// (the kernel's management plane decides; the connection is closed after it).
    RequestTimeout,
    /// 411 Length Required (RFC 9110 §15.5.12): a `PUT` without `Content-Length`.
    LengthRequired,
    /// 412 Precondition Failed (RFC 9110 §15.5.13): a `PUT` whose `If-Match` names no longer
    /// the published generation of its file ([`etag`]): another change came first.
    PreconditionFailed,
    /// 413 Content Too Large (RFC 9110 §15.5.14): a body above [`PUT_MAX`].
    ContentTooLarge,
    /// 414 URI Too Long (RFC 9110 §15.5.15): a request line above [`REQUEST_LINE_MAX`].
    UriTooLong,
    /// 431 Request Header Fields Too Large (RFC 6585 §5): a head above [`HEAD_MAX`] or with
    /// more than [`HEADERS_MAX`] fields.
    HeaderFieldsTooLarge,
    /// 500 Internal Server Error (RFC 9110 §15.6.1): the rebuild ran into the router's own
    /// limits (memory, rule slots, tbl8 groups, next hops), named in the text.
    InternalServerError,
    /// 503 Service Unavailable (RFC 9110 §15.6.4): another upload is in progress (with
    /// `Retry-After`), or no memory for the body.
    ServiceUnavailable,
    /// 505 HTTP Version Not Supported (RFC 9110 §15.6.6): not HTTP/1.0 or HTTP/1.1.
    VersionNotSupported,
}

impl Status {
    /// The status code.
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::Unauthorized => 401,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::LengthRequired => 411,
            Status::PreconditionFailed => 412,
            Status::ContentTooLarge => 413,
            Status::UriTooLong => 414,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    /// The reason phrase (RFC 9110's).
    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::Unauthorized => "Unauthorized",
            Status::Forbidden => "Forbidden",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::RequestTimeout => "Request Timeout",
            Status::LengthRequired => "Length Required",
            Status::PreconditionFailed => "Precondition Failed",
            Status::ContentTooLarge => "Content Too Large",
            Status::UriTooLong => "URI Too Long",
            Status::HeaderFieldsTooLarge => "Request Header Fields Too Large",
            Status::InternalServerError => "Internal Server Error",
            Status::ServiceUnavailable => "Service Unavailable",
            Status::VersionNotSupported => "HTTP Version Not Supported",
        }
    }
}

/// A refused request: its status, whether it was a `PUT` (the kernel counts those by
/// outcome), the `Allow` field of a 405, the `Retry-After` field of a busy 503, and a one-line
/// text for the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The status.
    pub status: Status,
    /// The request's method was `PUT`.
    pub put: bool,
    /// The methods the path takes (a 405's `Allow` field).
    pub allow: Option<&'static str>,
    /// Seconds the client should wait before trying again (a 503's `Retry-After` field).
    pub retry_after: Option<u32>,
    /// Why, for the client (cut at [`TEXT_MAX`] bytes).
    pub text: heapless::String<TEXT_MAX>,
}

impl Refusal {
    /// A refusal with `status` and `text`.
    pub fn new(status: Status, put: bool, text: core::fmt::Arguments<'_>) -> Refusal {
        let mut s = heapless::String::new();
        let _ = s.write_fmt(text);
        Refusal {
            status,
            put,
            allow: None,
            retry_after: None,
            text: s,
        }
    }

    /// The whole reply: status line, header fields, text.
    pub fn reply(&self) -> heapless::String<REPLY_MAX> {
        reply_with(
            self.status,
            self.allow,
            self.retry_after,
            format_args!("{}", self.text),
        )
    }
}

/// A complete reply (HTTP/1.0, `Connection: close`, RFC 9112 §9.6): `status`, `Allow: allow`
/// if given, `WWW-Authenticate: Bearer` with a 401, and `text` (plus a newline) as a
/// `text/plain` body of its `Content-Length`.
pub fn reply(
    status: Status,
    allow: Option<&str>,
    text: core::fmt::Arguments<'_>,
) -> heapless::String<REPLY_MAX> {
    reply_with(status, allow, None, text)
}

/// [`reply`], with `Retry-After: retry_after` (seconds, RFC 9110 §10.2.3) if given.
pub fn reply_with(
    status: Status,
    allow: Option<&str>,
    retry_after: Option<u32>,
    text: core::fmt::Arguments<'_>,
) -> heapless::String<REPLY_MAX> {
    let mut body: heapless::String<{ REPLY_MAX - 160 }> = heapless::String::new();
    let _ = body.write_fmt(text);
    let _ = body.push('\n');
    let mut r = heapless::String::new();
    let _ = write!(
        r,
        "HTTP/1.0 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
        status.code(),
        status.reason(),
        body.len()
    );
    if status == Status::Unauthorized {
        let _ = r.push_str("WWW-Authenticate: Bearer\r\n");
    }
    if let Some(methods) = allow {
        let _ = write!(r, "Allow: {methods}\r\n");
    }
    if let Some(s) = retry_after {
        let _ = write!(r, "Retry-After: {s}\r\n");
    }
    let _ = r.push_str("\r\n");
    let _ = r.push_str(&body);
    r
}

/// A `PUT` head that passed every check: its body follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutHead {
    /// The file it replaces.
    pub kind: PutKind,
    /// Bytes of the head (where the body starts in the buffer).
    pub head_len: usize,
    /// The body's length (`Content-Length`, at most [`PUT_MAX`]).
    pub body_len: usize,
    /// The client sent `Expect: 100-continue` (answer [`CONTINUE`] before the body).
    pub expect_continue: bool,
    /// Validate only (`PUT /routes?check`, `PUT /rules?check`): the body's lines are checked
    /// as they arrive and answered 200 or 400, nothing is built or published.
    pub check_only: bool,
    /// The `If-Match` field, if any (compared with the published generation of the file, the
    /// FIB's or the rule set's, before the body is read: [`IfMatch::refusal`]).
    pub if_match: Option<IfMatch>,
}

/// Most entity tags of an `If-Match` list kept; later ones are not compared.
pub const IF_MATCH_MAX: usize = 4;

/// Generation `generation` of a published file (the FIB, the ACL's rule set) as an entity tag
/// (RFC 9110 §8.8.3, strong): `"gen-N"`, the `ETag` of `GET /routes` and `GET /rules` and what
/// `If-Match` names on their `PUT`.
pub fn etag(generation: u64) -> heapless::String<32> {
    let mut t = heapless::String::new();
    let _ = write!(t, "\"gen-{generation}\"");
    t
}

/// An `If-Match` field (RFC 9110 §13.1.1): `*` (any current generation), or a list of entity tags,
/// of which those of the form `"gen-N"` (at most [`IF_MATCH_MAX`]) can match; weak tags
/// (`W/"…"`) never match (If-Match compares strongly), nor does anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfMatch {
    /// `*`.
    Any,
    /// The generations named (maybe none: then nothing matches).
    Generations(heapless::Vec<u64, IF_MATCH_MAX>),
}

impl IfMatch {
    /// The field's value read.
    pub fn parse(value: &[u8]) -> IfMatch {
        let value = value.trim_ascii();
        if value == b"*" {
            return IfMatch::Any;
        }
        let mut gens = heapless::Vec::new();
        for tag in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            let Some(n) = tag
                .strip_prefix(b"\"gen-")
                .and_then(|t| t.strip_suffix(b"\""))
            else {
                continue;
            };
            if n.is_empty() || n.len() > 19 || !n.iter().all(u8::is_ascii_digit) {
                continue;
            }
            let n = n.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            let _ = gens.push(n);
        }
        IfMatch::Generations(gens)
    }

    /// Whether it matches the published generation `current`.
    pub fn matches(&self, current: u64) -> bool {
        match self {
            IfMatch::Any => true,
            IfMatch::Generations(g) => g.contains(&current),
        }
    }

    /// The 412 of a `PUT` of `kind` whose `If-Match` does not match the published
    /// generation `current`, or `None` when it does.
    pub fn refusal(&self, kind: PutKind, current: u64) -> Option<Refusal> {
        (!self.matches(current)).then(|| {
            Refusal::new(
                Status::PreconditionFailed,
                true,
                format_args!(
                    "PUT {}: If-Match does not name the published {}, now {}; GET {} and try again",
                    kind.path(),
                    kind.published(),
                    etag(current),
                    kind.path()
                ),
            )
        })
    }
}

/// The head of a `GET` answer for the file `kind`: 200, `text/plain`, `ETag` of the published
/// generation `generation` ([`etag`]), `X-Routes: N` or `X-Rules: N` ([`PutKind::count_field`]:
/// how many entries are installed; the body, cut at the response buffer, may list fewer),
/// `Connection: close` (the end of the connection ends the body, RFC 9112 §6.3 item 8).
pub fn file_head(kind: PutKind, generation: u64, entries: usize) -> heapless::String<160> {
    let mut h = heapless::String::new();
    let _ = write!(
        h,
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nETag: {}\r\n{}: {entries}\r\nConnection: close\r\n\r\n",
        etag(generation),
        kind.count_field()
    );
    h
}

/// The 200 of a validate-only `PUT` (`?check`) whose body passed: `lines` lines checked (an
/// NF's file: read by its parser, which the kernel ran), nothing built or published.
pub fn check_reply(kind: PutKind, lines: usize) -> heapless::String<REPLY_MAX> {
    let path = kind.path();
    let text = match kind {
        PutKind::NfFile(_) => format_args!(
            "PUT {path}?check: {lines} lines read by the network function's parser, none refused; nothing published"
        ),
        _ => format_args!(
            "PUT {path}?check: {lines} lines checked, none refused; nothing built (duplicates are found by the build)"
        ),
    };
    reply(Status::Ok, None, text)
}

/// What a request head asks for, so far.
// Returned once per read of a head (no heap to box the refusal's text in): the size does not
// matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Head {
    /// Incomplete, within the limits: wait for more bytes.
    Partial,
    /// `GET /metrics`, its head `head_len` bytes (what follows is not parsed).
    Metrics {
        /// Bytes of the head.
        head_len: usize,
    },
    /// `GET /routes` (router mode) or `GET /rules` (ACL mode): answer with what is installed
    /// ([`file_head`]), its head `head_len` bytes (what follows is not parsed).
    File {
        /// The file asked for.
        kind: PutKind,
        /// Bytes of the head.
        head_len: usize,
    },
    /// `PUT /routes` or `PUT /rules`, accepted: receive its body.
    Put(PutHead),
    /// Refused: answer it and close.
    Refused(Refusal),
}

/// Parse the request head at the start of `buf` (all the bytes received so far, at most
/// [`HEAD_MAX`] kept by the caller) for a management plane that serves `put`; `busy` says
/// whether an upload is in progress (asked only for a `PUT` that passed every other check). See the module doc for the statuses.
pub fn parse_head(buf: &[u8], put: &PutFiles, busy: impl FnOnce() -> bool) -> Head {
    let mut fields = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut fields);
    // Empty lines before the request line are skipped (RFC 9112 §2.2), by httparse too.
    let start = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let is_put = buf[start..].starts_with(b"PUT ");
    // The request line's length without its CRLF (or bare LF). Before its `\n` arrives, a
    // last `\r` may be the CR of the CRLF, so it is not counted yet: the answer is the same
    // however the bytes are cut (the `mgmt_request` fuzz target checks it).
    let rest = &buf[start..];
    let line = rest
        .iter()
        .position(|&b| b == b'\n')
        .map_or(rest, |e| &rest[..e]);
    let line_len = line.len() - usize::from(line.last() == Some(&b'\r'));
    let refuse =
        |status, text: core::fmt::Arguments<'_>| Head::Refused(Refusal::new(status, is_put, text));
    let head_len = match req.parse(buf) {
        Err(httparse::Error::TooManyHeaders) => {
            let why = format_args!("more than {HEADERS_MAX} header fields");
            return refuse(Status::HeaderFieldsTooLarge, why);
        }
        Err(httparse::Error::Version) if buf[start..].windows(5).any(|w| w == b"HTTP/") => {
            let why = format_args!("only HTTP/1.0 and HTTP/1.1");
            return refuse(Status::VersionNotSupported, why);
        }
        Err(e) => return refuse(Status::BadRequest, format_args!("bad request: {e}")),
        _ if line_len > REQUEST_LINE_MAX => {
            let why = format_args!("request line longer than {REQUEST_LINE_MAX} bytes");
            return refuse(Status::UriTooLong, why);
        }
        Ok(httparse::Status::Partial) if buf.len() >= HEAD_MAX => {
            let why = format_args!("request head longer than {HEAD_MAX} bytes");
            return refuse(Status::HeaderFieldsTooLarge, why);
        }
        Ok(httparse::Status::Partial) => return Head::Partial,
        Ok(httparse::Status::Complete(n)) => n,
    };
    let (method, path) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
    let not_allowed = |allow: &'static str| {
        let mut r = Refusal::new(
            Status::MethodNotAllowed,
            is_put,
            format_args!("{path} takes {allow} only, not {method}"),
        );
        r.allow = Some(allow);
        Head::Refused(r)
    };
    let kind = put.kind_at(path);
    let served = kind.and_then(|k| put.serves(k));
    match (path, kind, served) {
        // A `GET` has no body to read, but a bad or repeated length is still a framing error
        // (RFC 9112 §6.3 item 5), answered rather than guessed past.
        ("/metrics", ..)
            if method == "GET" && matches!(content_length(req.headers), Some(Err(_))) =>
        {
            refuse(
                Status::BadRequest,
                format_args!("bad Content-Length (one field of digits)"),
            )
        }
        ("/metrics", ..) if method == "GET" => Head::Metrics { head_len },
        ("/metrics", ..) => not_allowed("GET"),
        (_, Some(want), None) => Head::Refused(not_found(method, Some(want), put)),
        (_, Some(kind), _) if method == "GET" => Head::File { kind, head_len },
        (_, Some(kind), Some(token)) if method == "PUT" => {
            put_head(kind, path, req.headers, token, busy, head_len, is_put)
        }
        (_, Some(_), _) => not_allowed("GET, PUT"),
        (_, None, _) => Head::Refused(not_found(method, None, put)),
    }
}

/// A `PUT` of `kind` at `path` (its query: none, or `?check`) whose head of `head_len` bytes
/// has `fields`: accepted ([`Head::Put`]) or refused by [`check_put`]'s rules.
fn put_head(
    kind: PutKind,
    path: &str,
    fields: &[httparse::Header<'_>],
    token: Option<&MgmtToken>,
    busy: impl FnOnce() -> bool,
    head_len: usize,
    is_put: bool,
) -> Head {
    let check_only = match path.split_once('?') {
        None => false,
        Some((_, "check")) => true,
        Some((_, q)) => {
            let q = &q[..q.floor_char_boundary(40)];
            let why = format_args!("PUT {}: unknown query `{q}` (only `?check`)", kind.path());
            return Head::Refused(Refusal::new(Status::BadRequest, is_put, why));
        }
    };
    match check_put(kind, fields, token, busy) {
        Ok((body_len, expect_continue)) => Head::Put(PutHead {
            kind,
            head_len,
            body_len,
            expect_continue,
            check_only,
            if_match: field(fields, "if-match").map(IfMatch::parse),
        }),
        Err(r) => Head::Refused(r),
    }
}

/// The 404 of a `method` request for a path not served by a management plane that serves
/// `put`: the file `want` (a path of another network function), named with its owner, or any
/// other path.
fn not_found(method: &str, want: Option<PutKind>, put: &PutFiles) -> Refusal {
    let is_put = method == "PUT";
    let who = put.who();
    let method = &method[..method.floor_char_boundary(16)];
    match (want, put.any()) {
        (Some(w), _) => Refusal::new(
            Status::NotFound,
            is_put,
            format_args!(
                "{method} {}: {who} has no {} ({})",
                w.path(),
                w.file(),
                w.owner()
            ),
        ),
        (None, false) => Refusal::new(
            Status::NotFound,
            is_put,
            format_args!("only GET /metrics ({who} has no files to PUT)"),
        ),
        (None, true) => Refusal::new(
            Status::NotFound,
            is_put,
            format_args!("only GET /metrics and GET or PUT {}", put.paths()),
        ),
    }
}

/// The value of the first header field `name` (case-insensitive, RFC 9110 §5.1), trimmed.
fn field<'b>(fields: &[httparse::Header<'b>], name: &str) -> Option<&'b [u8]> {
    fields
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .map(|f| f.value.trim_ascii())
}

/// The body's length from the one `Content-Length` field (RFC 9110 §8.6: `1*DIGIT`),
/// saturating at `u64::MAX` (a huge but valid length is too large, not bad); `None` if absent,
/// `Some(Err(()))` if bad or repeated (RFC 9112 §6.3 item 5 lets a recipient accept repeats of
/// one value; refusing every repeat leaves no two readings of where the body ends).
fn content_length(fields: &[httparse::Header<'_>]) -> Option<Result<u64, ()>> {
    let mut len = None;
    for f in fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case("content-length"))
    {
        let v = f.value.trim_ascii();
        if len.is_some() || v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
            return Some(Err(()));
        }
        let n = v.iter().fold(0u64, |n, d| {
            n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
        });
        len = Some(n);
    }
    len.map(Ok)
}

/// The `PUT` rules after the path (module doc) for the file `kind`: the body's length and
/// whether the client expects `100 Continue`, or the refusal (no heap to box it in; once per
/// head).
#[allow(clippy::result_large_err)]
fn check_put(
    kind: PutKind,
    fields: &[httparse::Header<'_>],
    token: Option<&MgmtToken>,
    busy: impl FnOnce() -> bool,
) -> Result<(usize, bool), Refusal> {
    let no = |status, text: core::fmt::Arguments<'_>| Err(Refusal::new(status, true, text));
    let Some(token) = token else {
        let why = format_args!(
            "PUT {}: no mgmt_token= on the kernel command line",
            kind.path()
        );
        return no(Status::Forbidden, why);
    };
    // RFC 6750 §2.1: `Bearer` (case-insensitive scheme, RFC 9110 §11.1) and the token;
    // compared in time independent of where it differs (`MgmtToken::matches`).
    let bearer = field(fields, "authorization")
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
        .map(|v| v[7..].trim_ascii());
    if !bearer.is_some_and(|b| token.matches(b)) {
        let why = format_args!("PUT {}: wrong or missing bearer token", kind.path());
        return no(Status::Unauthorized, why);
    }
    let len = content_length(fields);
    if len.is_none() || field(fields, "transfer-encoding").is_some() {
        let why = format_args!(
            "PUT {}: Content-Length required (no Transfer-Encoding)",
            kind.path()
        );
        return no(Status::LengthRequired, why);
    }
    let Some(Ok(len)) = len else {
        return no(
            Status::BadRequest,
            format_args!(
                "PUT {}: bad Content-Length (one field of digits)",
                kind.path()
            ),
        );
    };
    if len > PUT_MAX as u64 {
        let why = format_args!("PUT {}: {len} bytes, at most {PUT_MAX}", kind.path());
        return no(Status::ContentTooLarge, why);
    }
    if busy() {
        let why = format_args!("PUT {}: another upload is in progress", kind.path());
        let mut r = Refusal::new(Status::ServiceUnavailable, true, why);
        r.retry_after = Some(RETRY_AFTER_S);
        return Err(r);
    }
    let expect = field(fields, "expect").is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"));
    Ok((len as usize, expect))
}

mod body;
mod files;
pub use body::PutBody;
pub use files::{FilePath, Paths, PutFiles, PutKind, Who};

#[cfg(test)]
mod tests;
