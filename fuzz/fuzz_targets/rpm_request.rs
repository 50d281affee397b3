//! The rpm port's request path as the server reads it from a peer: the HTTP/1.1 request head
//! (whole, and cut short wherever the input says, as reads deliver it), the route its method
//! and path take (the same function routes HTTP/2 requests), and the configuration document
//! answered for its `Host`, which must always be one hakaru's own client accepts.
#![no_main]

use hakaru_rpm::limits::MAX_HEAD;
use hakaru_rpm::route::{nq_document, parse_head, route, Parsed, Route};
use libfuzzer_sys::fuzz_target;

fn check_route(method: &str, path: &str) {
    let r = route(method, path);
    if r == Route::Upload {
        assert!(matches!(method, "POST" | "PUT"), "{method:?} {path:?}");
    }
    assert_eq!(r.reads_body(), r == Route::Upload);
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let local = "192.0.2.1:4443".parse().ok();
    match parse_head(input, MAX_HEAD) {
        Parsed::Complete(head, n) => {
            assert!(n <= input.len() && n <= MAX_HEAD, "{n}");
            check_route(&head.method, &head.path);
            let doc = nq_document(head.host.as_deref(), local);
            let c = hakaru_rpm::config::parse(doc.as_bytes()).expect("the server's own document");
            assert_eq!(c.small.path, "/small");
            // A head cut short is not yet a head, never an error.
            let k = (cut as usize * n / 255).min(n.saturating_sub(1));
            assert_eq!(
                parse_head(&input[..k], MAX_HEAD),
                Parsed::Partial,
                "{:?} cut at {k} of {n}",
                String::from_utf8_lossy(&input[..n])
            );
        }
        Parsed::Partial => assert!(input.len() <= MAX_HEAD),
        Parsed::TooLong | Parsed::Bad(_) => {}
    }
    // Any method and path (as an HTTP/2 request's pseudo-headers carry them).
    let text = String::from_utf8_lossy(input);
    let (method, path) = text.split_at(text.find(' ').unwrap_or(0));
    check_route(method, path.trim_start());
    let _ = nq_document(Some(&text), None);
});
