//! `hakaru server --metrics ADDR:PORT`: what the server has done, in the Prometheus text
//! exposition format at `GET /metrics`.
//!
//! The counters are kept here, updated when a test starts and ends (never per packet), so a
//! scrape costs a lock and a few map walks. Labels are bounded: the test kind, the protocol
//! (hakaru, iperf3, sockperf, http), the outcome, the direction, the refusal reason and the
//! interface name; never a client address.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hakaru_model::metrics::{MetricFamily, MetricKind};
use hakaru_proto::http as wire;

use crate::Ctx;

/// Counters by label values.
#[derive(Default)]
struct Counts {
    /// (protocol, kind) -> tests started.
    started: BTreeMap<(String, String), u64>,
    /// (protocol, kind, outcome) -> tests finished.
    finished: BTreeMap<(String, String, String), u64>,
    /// (protocol, kind, direction) -> payload bytes this server received or sent.
    bytes: BTreeMap<(String, String, String), u64>,
    /// reason -> clients refused.
    refused: BTreeMap<String, u64>,
    /// protocol -> connections accepted.
    connections: BTreeMap<String, u64>,
}

/// The server's counters for `/metrics`.
#[derive(Default)]
pub(crate) struct Metrics {
    counts: Mutex<Counts>,
}

fn bump<K: Ord>(m: &mut BTreeMap<K, u64>, k: K, n: u64) {
    *m.entry(k).or_insert(0) += n;
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Counts)) {
        if let Ok(mut c) = self.counts.lock() {
            f(&mut c);
        }
    }

    /// A test of `kind` over `protocol` was admitted.
    pub fn test_started(&self, protocol: &str, kind: &str) {
        self.with(|c| bump(&mut c.started, (protocol.into(), kind.into()), 1));
    }

    /// A test ended: `ok`, or aborted.
    pub fn test_finished(&self, protocol: &str, kind: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "aborted" };
        self.with(|c| {
            bump(
                &mut c.finished,
                (protocol.into(), kind.into(), outcome.into()),
                1,
            )
        });
    }

    /// Payload bytes this server moved in a test: `received` or `sent`.
    pub fn bytes(&self, protocol: &str, kind: &str, direction: &str, n: u64) {
        if n > 0 {
            self.with(|c| {
                bump(
                    &mut c.bytes,
                    (protocol.into(), kind.into(), direction.into()),
                    n,
                )
            });
        }
    }

    /// A client was turned away: `limits`, `auth`, `acl` or `invalid`.
    pub fn refused(&self, reason: &str) {
        self.with(|c| bump(&mut c.refused, reason.into(), 1));
    }

    /// A connection of `protocol` was accepted.
    pub fn connection(&self, protocol: &str) {
        self.with(|c| bump(&mut c.connections, protocol.into(), 1));
    }

    /// Every family, with the server's gauges and the process's and interfaces' figures.
    pub fn families(&self, ctx: &Ctx) -> Vec<MetricFamily> {
        let mut out = self.test_families(ctx);
        out.extend(Self::process_families());
        out.extend(Self::nic_families());
        if let Some(m) = &ctx.mesh {
            out.extend(m.families());
        }
        out
    }

    /// The tests', connections' and refusals' counters.
    fn test_families(&self, ctx: &Ctx) -> Vec<MetricFamily> {
        use MetricKind::{Counter, Gauge};
        let mut started = MetricFamily::new(
            "hakaru_tests_started_total",
            "Tests admitted, by protocol and kind.",
            Counter,
        );
        let mut finished = MetricFamily::new(
            "hakaru_tests_finished_total",
            "Tests ended, by protocol, kind and outcome (ok or aborted).",
            Counter,
        );
        let mut bytes = MetricFamily::new(
            "hakaru_payload_bytes_total",
            "Payload bytes this server received or sent in tests, by protocol, kind and direction.",
            Counter,
        );
        let mut refused = MetricFamily::new(
            "hakaru_clients_refused_total",
            "Clients turned away, by reason (limits, auth, acl).",
            Counter,
        );
        let mut conns = MetricFamily::new(
            "hakaru_connections_total",
            "Connections accepted, by protocol.",
            Counter,
        );
        if let Ok(c) = self.counts.lock() {
            for ((p, k), n) in &c.started {
                started = started.with(&[("protocol", p), ("kind", k)], *n as f64);
            }
            for ((p, k, o), n) in &c.finished {
                finished =
                    finished.with(&[("protocol", p), ("kind", k), ("outcome", o)], *n as f64);
            }
            for ((p, k, d), n) in &c.bytes {
                bytes = bytes.with(&[("protocol", p), ("kind", k), ("direction", d)], *n as f64);
            }
            for (r, n) in &c.refused {
                refused = refused.with(&[("reason", r)], *n as f64);
            }
            for (p, n) in &c.connections {
                conns = conns.with(&[("protocol", p)], *n as f64);
            }
        }
        let denied = ctx.denied.load(Ordering::Relaxed);
        if denied > 0 {
            refused = refused.with(&[("reason", "acl")], denied as f64);
        }
        vec![
            started,
            finished,
            bytes,
            refused,
            conns,
            MetricFamily::new("hakaru_tests_running", "Tests running now.", Gauge).with(
                &[],
                (ctx.admission.tests_running() + ctx.netperf_admission.tests_running()) as f64,
            ),
            MetricFamily::new(
                "hakaru_stray_datagrams_total",
                "Datagrams on the UDP port that belonged to no test.",
                Counter,
            )
            .with(&[], ctx.strays.load(Ordering::Relaxed) as f64),
        ]
    }

    /// The server process's CPU, memory and descriptors, where the OS counts them.
    fn process_families() -> Vec<MetricFamily> {
        use MetricKind::{Counter, Gauge};
        let mut out = Vec::new();
        if let Some(p) = hakaru_engine::sys::process_usage() {
            out.push(
                MetricFamily::new(
                    "process_cpu_seconds_total",
                    "CPU seconds of the server process, user and system.",
                    Counter,
                )
                .with(&[], p.cpu_seconds),
            );
            out.push(
                MetricFamily::new(
                    "process_resident_memory_bytes",
                    "Resident memory of the server process.",
                    Gauge,
                )
                .with(&[], p.rss_bytes as f64),
            );
            // Left out, not zero, where the OS does not count them.
            if let Some(fds) = p.open_fds {
                out.push(
                    MetricFamily::new(
                        "process_open_fds",
                        "Open file descriptors of the server process.",
                        Gauge,
                    )
                    .with(&[], fds as f64),
                );
            }
        }
        out
    }

    /// Every interface's packet and byte counters.
    fn nic_families() -> Vec<MetricFamily> {
        let mut out = Vec::new();
        let nics = hakaru_engine::sys::nic_snapshot_all();
        type Pick = fn(&hakaru_engine::sys::NicSnapshot) -> u64;
        let nic_families: [(&str, &str, Pick); 4] = [
            (
                "hakaru_nic_receive_packets_total",
                "Packets the interface received (/proc/net/dev).",
                |n| n.rx_packets,
            ),
            (
                "hakaru_nic_transmit_packets_total",
                "Packets the interface sent.",
                |n| n.tx_packets,
            ),
            (
                "hakaru_nic_receive_bytes_total",
                "Bytes the interface received.",
                |n| n.rx_bytes,
            ),
            (
                "hakaru_nic_transmit_bytes_total",
                "Bytes the interface sent.",
                |n| n.tx_bytes,
            ),
        ];
        for (name, help, pick) in nic_families {
            let mut f = MetricFamily::new(name, help, MetricKind::Counter);
            for n in &nics {
                f = f.with(&[("interface", &n.interface)], pick(n) as f64);
            }
            out.push(f);
        }
        out
    }
}

/// What a port served outside this crate (the rpm port) counts in `/metrics`: its
/// connections under `hakaru_connections_total{protocol}` and its refusals under
/// `hakaru_clients_refused_total{reason}`, beside the server's own.
#[derive(Clone)]
pub(crate) struct MetricsSink(pub(crate) Arc<Ctx>);

impl MetricsSink {
    /// A connection of `protocol` was accepted.
    pub fn connection(&self, protocol: &str) {
        self.0.metrics.connection(protocol);
    }

    /// A client was turned away for `reason` (`acl`: counted with the access list's other
    /// denials).
    pub fn refused(&self, reason: &str) {
        if reason == "acl" {
            self.0.denied.fetch_add(1, Ordering::Relaxed);
        } else {
            self.0.metrics.refused(reason);
        }
    }
}

/// Scrapes answered at once, and from one address: a scraper that stalls holds one of these
/// for at most [`SCRAPE_DEADLINE`], and the others are answered meanwhile.
const SCRAPES: usize = 8;
const SCRAPES_PER_CLIENT: usize = 2;
/// The whole exchange (request head in, answer out) of one scrape.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(5);

/// Serves `/metrics` on `addr` until the server stops: an accept thread and a thread per
/// scrape, at most [`SCRAPES`] at once ([`SCRAPES_PER_CLIENT`] from one address); past that
/// a scraper is told 503 at once.
pub(crate) fn spawn(ctx: Arc<Ctx>, listener: TcpListener) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let slots =
        crate::limits::Admission::for_connections("metrics scrapes", SCRAPES_PER_CLIENT, SCRAPES);
    std::thread::Builder::new()
        .name("hakaru-metrics".into())
        .spawn(move || {
            let mut errors = crate::accept::AcceptErrors::new("metrics");
            while !ctx.shutdown.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((mut s, peer)) => {
                        errors.accepted();
                        if !ctx.cfg.acl.permits(peer.ip()) {
                            continue;
                        }
                        let slot = match slots.pending(peer.ip()) {
                            Ok(slot) => slot,
                            Err(why) => {
                                let _ = s.set_nonblocking(true);
                                let _ = s.write_all(&busy(&why));
                                continue;
                            }
                        };
                        let _ = s.set_nonblocking(false);
                        let c = Arc::clone(&ctx);
                        let spawned = std::thread::Builder::new()
                            .name("hakaru-scrape".into())
                            .stack_size(256 << 10)
                            .spawn(move || {
                                let _slot = slot;
                                answer(&c, s, peer);
                            });
                        if let Err(e) = spawned {
                            tracing::warn!("metrics: no thread for a scrape from {peer}: {e}");
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        crate::wait_readable(&listener)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => errors.failed(&e),
                }
            }
        })
}

/// A 503 answer naming the limit.
fn busy(why: &str) -> Vec<u8> {
    let body = format!("{why}\n");
    let mut out = wire::response_head(
        503,
        "Service Unavailable",
        body.len() as u64,
        &[("Content-Type", "text/plain".to_string())],
        false,
    );
    out.extend_from_slice(body.as_bytes());
    out
}

/// One request, one answer, then close, all within [`SCRAPE_DEADLINE`].
fn answer(ctx: &Ctx, mut s: TcpStream, peer: SocketAddr) {
    let deadline = Instant::now() + SCRAPE_DEADLINE;
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = s.set_write_timeout(Some(SCRAPE_DEADLINE));
    let mut acc = Vec::new();
    let mut buf = [0u8; 4096];
    let req = loop {
        match wire::parse_request(&acc) {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                tracing::debug!("metrics: bad request from {peer}: {e}");
                return;
            }
        }
        // Checked on every pass, not only on a timed-out read: a trickling peer never has one.
        if Instant::now() >= deadline {
            tracing::debug!("metrics: no whole request from {peer} within 5 s");
            return;
        }
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => acc.extend_from_slice(&buf[..n]),
            Err(e) if crate::http::retry(&e) => {}
            Err(_) => return,
        }
    };
    let path = req.path.split('?').next().unwrap_or("");
    let (status, reason, body, ctype) = match (req.method.as_str(), path) {
        ("GET", "/metrics") => (
            200,
            "OK",
            hakaru_report::prometheus::render(&ctx.metrics.families(ctx)),
            hakaru_report::prometheus::CONTENT_TYPE,
        ),
        ("GET", "/mesh") => match &ctx.mesh {
            Some(m) => (200, "OK", m.view_json(), "application/json"),
            None => (
                404,
                "Not Found",
                "this server is no mesh agent (--mesh)\n".to_string(),
                "text/plain",
            ),
        },
        ("GET", _) => (
            404,
            "Not Found",
            "metrics are at /metrics (a mesh agent's view at /mesh)\n".to_string(),
            "text/plain",
        ),
        _ => (
            405,
            "Method Not Allowed",
            "GET /metrics\n".to_string(),
            "text/plain",
        ),
    };
    let mut out = wire::response_head(
        status,
        reason,
        body.len() as u64,
        &[("Content-Type", ctype.to_string())],
        false,
    );
    out.extend_from_slice(body.as_bytes());
    let _ = s.write_all(&out);
}
