//! HTTP as hakaru reads it from a peer: the endpoint's request heads (with `/bytes/SIZE` and
//! its range answered), the client's response heads, chunked bodies counted across a split,
//! Range headers, and `Location` resolved against the request's URL.
#![no_main]

use hakaru_proto::http::{
    answer_range, bytes_size, parse_request, parse_response, response_head, BodyKind,
    ChunkedDecoder, RangeAnswer, Url,
};
use libfuzzer_sys::fuzz_target;

/// Bases a `Location` is resolved against: a path with a directory and a query, the root,
/// TLS with a port, an IPv6 address.
const BASES: [&str; 4] = [
    "http://h/dir/file?q=1",
    "http://h",
    "https://example.test:8443/a/b/",
    "http://[::1]:80/x",
];

fn resolve(base: &Url, location: &str) {
    if let Ok(u) = base.join(location) {
        assert!(u.path.starts_with('/'), "{location:?} -> {u:?}");
        let _ = u.to_string();
    }
}

/// A URL that parses prints as a URL that parses to the same thing.
fn round_trip(text: &str) {
    if let Ok(u) = Url::parse(text) {
        assert!(!u.host.is_empty() && u.port > 0 && u.path.starts_with('/'));
        let again = Url::parse(&u.to_string());
        assert_eq!(again.as_ref(), Ok(&u), "{text:?} printed as {u}");
    }
}

fn chunked(data: &[u8]) {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let cut = (cut as usize).min(body.len());
    let whole = ChunkedDecoder::default().feed(body);
    if let Ok(w) = &whole {
        assert!(w.consumed <= body.len() && w.payload <= w.consumed as u64);
    }
    // The same bytes in two reads count the same.
    let mut d = ChunkedDecoder::default();
    let a = match d.feed(&body[..cut]) {
        Ok(a) => a,
        Err(_) => {
            assert!(whole.is_err(), "an error in the first read only");
            return;
        }
    };
    assert!(a.payload <= a.consumed as u64);
    if a.done {
        let w = whole.expect("done in two reads, an error in one");
        assert_eq!(
            (w.consumed, w.payload, w.done),
            (a.consumed, a.payload, true)
        );
        return;
    }
    assert_eq!(a.consumed, cut, "a body not done leaves nothing of a read");
    match (d.feed(&body[cut..]), whole) {
        (Ok(b), Ok(w)) => {
            assert_eq!(a.consumed + b.consumed, w.consumed);
            assert_eq!(a.payload + b.payload, w.payload);
            assert_eq!(b.done, w.done);
        }
        (Err(_), Err(_)) => {}
        (b, w) => panic!("two reads {b:?}, one read {w:?}"),
    }
}

/// A request head as the HTTP endpoint reads and answers it: `GET /bytes/SIZE` with its
/// range, or a body's framing. Panics if the answer's head does not say what was meant
/// (its length and range read back as sent).
fn http_request(buf: &[u8]) {
    let Ok(Some(req)) = parse_request(buf) else {
        return;
    };
    assert!(req.head_len <= buf.len());
    let path = req.path.split('?').next().unwrap_or("");
    let Some(Ok(size)) = bytes_size(path) else {
        return;
    };
    let (status, range) = match answer_range(req.range.as_deref(), size) {
        RangeAnswer::Whole => (200, None),
        RangeAnswer::Part(r) => {
            assert!(r.first <= r.last && r.last < size, "{r:?} of {size}");
            (206, Some(r))
        }
        RangeAnswer::Unsatisfiable => return,
    };
    let len = range.map_or(size, |r| r.len());
    let headers: Vec<(&str, String)> = range
        .map(|r| {
            (
                "Content-Range",
                format!("bytes {}-{}/{size}", r.first, r.last),
            )
        })
        .into_iter()
        .collect();
    let head = response_head(status, "X", len, &headers, req.keep_alive);
    let back = parse_response(&head, false)
        .expect("the endpoint's own head parses")
        .expect("the endpoint's own head is whole");
    assert_eq!(back.status, status);
    assert_eq!(back.head_len, head.len());
    assert_eq!(back.body, BodyKind::Length(len));
    if let Some(r) = range {
        assert_eq!(back.content_range, Some((r, Some(size))));
    }
}

fuzz_target!(|data: &[u8]| {
    // The server's endpoint: a request head, answered as it would be.
    http_request(data);
    // The client: a response head after a GET and after a HEAD; its Location followed.
    for head in [false, true] {
        if let Ok(Some(r)) = parse_response(data, head) {
            assert!(r.head_len <= data.len());
            if let Some((range, _)) = r.content_range {
                assert!(range.first <= range.last);
            }
            if let Some(loc) = &r.location {
                for b in BASES {
                    resolve(&Url::parse(b).unwrap(), loc);
                }
            }
        }
    }
    chunked(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A Range header against sizes around the edges.
    let size = data
        .iter()
        .take(8)
        .fold(0u64, |s, &b| (s << 8) | u64::from(b));
    for size in [0, 1, 100, size, u64::MAX] {
        if let RangeAnswer::Part(r) = answer_range(Some(text), size) {
            assert!(
                r.first <= r.last && r.last < size,
                "{text:?} of {size}: {r:?}"
            );
        }
    }
    // Locations, against fixed bases and against a base the input gives on its first line.
    for b in BASES {
        resolve(&Url::parse(b).unwrap(), text);
    }
    round_trip(text);
    if let Some((base, location)) = text.split_once('\n') {
        round_trip(base);
        if let Ok(b) = Url::parse(base) {
            resolve(&b, location);
        }
    }
});
