//! `hakaru http`: downloads or uploads over HTTP/1.1 or HTTPS, one connection or many.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

use hakaru_engine::http::{HttpOutcome, HttpRunError};
use hakaru_model::{
    EndResult, FlowDir, FlowTick, HttpMethod, HttpSpec, IntervalRecord, KindDetail, RunResult,
    TestSpec,
};

/// Runs the transfers `spec` asks for; `on_interval` sees each interval as it closes.
/// `embedded` says the server is this process's own loopback endpoint.
pub fn run(
    spec: &HttpSpec,
    embedded: bool,
    stop: &AtomicBool,
    on_interval: &mut dyn FnMut(&IntervalRecord),
) -> Result<RunResult, HttpRunError> {
    let iface = iface_of(spec);
    let (tx, rx) = mpsc::channel();
    let on_sample = Box::new(move |s| {
        let _ = tx.send(s);
    });
    let dir = spec.method.dir();
    let (outcome, intervals) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| hakaru_engine::http::run(spec, iface, on_sample, stop));
        let mut intervals = Vec::new();
        for sample in rx {
            let dirs: BTreeMap<u32, FlowDir> = sample
                .flows
                .iter()
                .map(|f: &FlowTick| (f.id, dir))
                .collect();
            let rec = hakaru_model::merge_interval(Some(&sample), None, &dirs);
            on_interval(&rec);
            intervals.push(rec);
        }
        let outcome = worker
            .join()
            .unwrap_or_else(|_| Err(HttpRunError::Setup("the transfer thread panicked".into())));
        (outcome, intervals)
    });
    Ok(assemble(spec, embedded, outcome?, intervals))
}

/// The interface towards the first URL's host, for the NIC counters.
fn iface_of(spec: &HttpSpec) -> Option<String> {
    use std::net::ToSocketAddrs;
    let u = hakaru_engine::http::Url::parse(spec.urls.first()?).ok()?;
    let addr = (u.host.as_str(), u.port).to_socket_addrs().ok()?.next()?;
    let sock = std::net::UdpSocket::bind(if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .ok()?;
    sock.connect(addr).ok()?;
    hakaru_engine::sys::interface_for_addr(sock.local_addr().ok()?.ip())
}

fn assemble(
    spec: &HttpSpec,
    embedded: bool,
    o: HttpOutcome,
    intervals: Vec<IntervalRecord>,
) -> RunResult {
    let client: EndResult = hakaru_model::end_result(&o.report);
    let peer = o
        .result
        .connections
        .iter()
        .find_map(|c| c.peer.clone())
        .unwrap_or_default();
    let mut notes = vec![
        "goodput counts body bytes only (no headers, TLS records or TCP/IP headers); the client counts what it received (GET) or sent (PUT/POST)".to_string(),
    ];
    if spec.method != HttpMethod::Get {
        notes.push(
            "an upload request completes when the server answered 2xx after the whole body".into(),
        );
    }
    RunResult {
        embedded_server: embedded,
        remote_address: peer,
        intervals,
        client,
        interrupted: o.interrupted,
        notes,
        detail: KindDetail::Http(Box::new(o.result)),
        server_on_this_host: embedded,
        ..RunResult::begin(
            TestSpec::Http(spec.clone()),
            o.started_unix,
            spec.urls.first().cloned().unwrap_or_default(),
        )
    }
}
