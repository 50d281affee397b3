//! `hakaru rpm`: the responsiveness test (draft-ietf-ippm-responsiveness) against an
//! endpoint; the test itself, with its async runtime, is hakaru-rpm's.

use std::sync::atomic::{AtomicBool, Ordering};

use hakaru_model::{KindDetail, RpmSpec, RunResult, TestSpec};

/// Runs the test `spec` asks for. `embedded` says the endpoint is this process's own
/// loopback one (whose self-signed certificate the spec does not verify).
pub fn run(spec: &RpmSpec, embedded: bool, stop: &AtomicBool) -> Result<RunResult, String> {
    let started_unix = hakaru_engine::sys::now_unix();
    let x = hakaru_rpm::run(spec, stop)?;
    let mut notes = vec![
        "goodput counts HTTP bodies only (no headers, TLS records or TCP/IP headers)".to_string(),
    ];
    if embedded {
        notes.push("the embedded endpoint's self-signed certificate is not verified".into());
    }
    Ok(RunResult {
        embedded_server: embedded,
        remote_address: x.peer.clone(),
        interrupted: stop.load(Ordering::Relaxed),
        notes,
        detail: KindDetail::Rpm(Box::new(x)),
        server_on_this_host: embedded,
        ..RunResult::begin(TestSpec::Rpm(spec.clone()), started_unix, spec.url.clone())
    })
}
