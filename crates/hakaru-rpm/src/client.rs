//! The client driver of `hakaru rpm`: fetches the configuration, opens load-generating
//! connections as [`crate::ramp::Ramp`] asks, sends foreign and self probes at the rate it
//! allows, and hands it each interval's bytes and probe times. Sockets and clocks live here;
//! every decision is the machine's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hakaru_model::{BitRate, RpmDirection, RpmResult, RpmSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::{self, NqConfig, Target};
use crate::conn::{self, Dialer};
use crate::ramp::{Params, Ramp, Samples, Step};

/// Longest a probe may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most probes in flight at once.
const MAX_IN_FLIGHT: usize = 256;
/// Bytes handed to HTTP/2 or the socket per upload write.
const CHUNK: usize = 256 << 10;
/// Body length announced by an HTTP/1.1 upload (never reached).
const H1_UPLOAD: u64 = 1 << 40;
/// Distinct error texts kept.
const MAX_ERRORS: usize = 16;

/// What the connections and probes share with the interval loop.
#[derive(Default)]
struct Shared {
    down: AtomicU64,
    up: AtomicU64,
    /// The HTTP/2 load connections: an id, the request handle and the socket (whose marks of
    /// loss tell a self probe that waited behind one).
    senders: Mutex<Vec<(u64, h2::client::SendRequest<Bytes>, hakaru_sys::RawFd)>>,
    fds: Mutex<Vec<(u64, hakaru_sys::RawFd)>>,
    errors: Mutex<Vec<String>>,
    tls: Mutex<Option<String>>,
    failed: AtomicU64,
    next_id: AtomicU64,
}

impl Shared {
    fn error(&self, e: String) {
        let mut v = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < MAX_ERRORS && !v.contains(&e) {
            v.push(e);
        }
    }
}

/// One probe's times, ms.
enum Probe {
    Foreign {
        tcp: f64,
        tls: Option<f64>,
        http: f64,
    },
    /// A self probe: ms, and whether its connection received segments out of order or
    /// retransmitted while it waited (`None` where the OS does not say, or over HTTP/1.1).
    Own(f64, Option<bool>),
}

/// Runs the test; `stop` (Ctrl-C) ends it early with the figures so far.
pub fn run(spec: &RpmSpec, stop: &AtomicBool) -> Result<RpmResult, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
        )
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let r = rt.block_on(run_async(spec, stop));
    rt.shutdown_timeout(Duration::from_millis(500));
    r
}

/// The address of `host:port`.
async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))
}

/// A dialer for `t`'s host (at `endpoint`'s address when the configuration names one).
async fn dialer(spec: &RpmSpec, t: &Target, endpoint: Option<&str>) -> Result<Dialer, String> {
    let addr = resolve(endpoint.unwrap_or(&t.host), t.port).await?;
    let tls = if t.tls {
        let cfg = hakaru_engine::http::client_tls_config(spec.insecure, spec.cacert.as_deref())?;
        let name = rustls_pki_types::ServerName::try_from(t.host.clone())
            .map_err(|e| format!("{}: not a TLS server name: {e}", t.host))?;
        Some((Dialer::connector(&cfg, spec.http1), name))
    } else {
        None
    };
    Ok(Dialer {
        addr,
        host: t.host.clone(),
        authority: t.authority(),
        tls,
        http1: spec.http1,
        timeout: spec.connect_timeout.0,
        congestion: spec.congestion.clone(),
    })
}

/// Fetches and checks the configuration.
async fn fetch_config(spec: &RpmSpec) -> Result<NqConfig, String> {
    let t = Target::parse(&spec.url)?;
    let d = dialer(spec, &t, None).await?;
    let mut opened = d.open().await?;
    let body = tokio::time::timeout(PROBE_TIMEOUT, async {
        if d.http1 {
            conn::h1_get(&d, &mut opened.io, &t.path).await
        } else {
            let mut send = conn::h2_client(opened.io).await?;
            conn::h2_get(&mut send, conn::request(&d, http::Method::GET, &t.path)).await
        }
    })
    .await
    .map_err(|_| format!("{}: no configuration in {PROBE_TIMEOUT:?}", spec.url))?
    .map_err(|e| format!("{}: {e}", spec.url))?;
    config::parse(&body).map_err(|e| format!("{}: {e}", spec.url))
}

/// The machine's parameters from the spec.
fn params(spec: &RpmSpec) -> Params {
    Params {
        mad: spec.moving_average as usize,
        tolerance: spec.tolerance,
        max_connections: spec.max_connections,
        interval: spec.interval.secs_f64(),
        max_duration: spec.max_duration.secs_f64(),
        max_probes: spec.probes_per_second,
    }
}

/// The probe times that arrived since the last interval.
fn drain(prx: &mut mpsc::UnboundedReceiver<Probe>) -> Samples {
    let mut s = Samples::default();
    while let Ok(p) = prx.try_recv() {
        match p {
            Probe::Foreign { tcp, tls, http } => {
                s.tcp.push(tcp);
                s.tls.extend(tls);
                s.http.push(http);
            }
            Probe::Own(ms, behind_loss) => {
                s.selfp.push(ms);
                match behind_loss {
                    Some(false) => s.self_in_order.push(ms),
                    Some(true) => s.self_behind_loss += 1,
                    None => {}
                }
            }
        }
    }
    s
}

async fn run_async(spec: &RpmSpec, stop: &AtomicBool) -> Result<RpmResult, String> {
    let cfg = fetch_config(spec).await?;
    let d = Arc::new(dialer(spec, &cfg.large, cfg.test_endpoint.as_deref()).await?);
    let sh = Arc::new(Shared::default());
    let mut ramp = Ramp::new(params(spec));
    let dirs: Vec<RpmDirection> = match spec.direction {
        RpmDirection::Both => vec![RpmDirection::Down, RpmDirection::Up],
        d => vec![d],
    };
    let mut tasks = JoinSet::new();
    let paths = Arc::new((cfg.large.path.clone(), cfg.upload.path.clone()));
    for _ in 0..ramp.connections() {
        for dir in &dirs {
            tasks.spawn(load(
                Arc::clone(&d),
                Arc::clone(&sh),
                *dir,
                Arc::clone(&paths),
            ));
        }
    }
    let rate = Arc::new(AtomicU64::new(ramp.probe_rate().to_bits()));
    let (ptx, mut prx) = mpsc::unbounded_channel();
    tasks.spawn(prober(
        Arc::clone(&d),
        Arc::clone(&sh),
        cfg.small.path.clone(),
        Arc::clone(&rate),
        ptx,
    ));
    let start = Instant::now();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + spec.interval.0,
        spec.interval.0,
    );
    let (mut down, mut up) = (0u64, 0u64);
    loop {
        tick.tick().await;
        let (d_now, u_now) = (
            sh.down.load(Ordering::Relaxed),
            sh.up.load(Ordering::Relaxed),
        );
        let bytes = (d_now - down) + (u_now - up);
        (down, up) = (d_now, u_now);
        let step = ramp.on_interval(bytes, drain(&mut prx));
        rate.store(ramp.probe_rate().to_bits(), Ordering::Relaxed);
        match step {
            Step::Continue { add } if !stop.load(Ordering::Relaxed) => {
                for _ in 0..add {
                    for dir in &dirs {
                        tasks.spawn(load(
                            Arc::clone(&d),
                            Arc::clone(&sh),
                            *dir,
                            Arc::clone(&paths),
                        ));
                    }
                }
            }
            _ => break,
        }
    }
    tasks.abort_all();
    result(
        spec,
        &ramp,
        &sh,
        &d,
        dirs.len() as u32,
        start.elapsed().as_secs_f64(),
    )
}

/// The result from the machine's conclusion and the shared counters.
fn result(
    spec: &RpmSpec,
    ramp: &Ramp,
    sh: &Shared,
    d: &Dialer,
    dirs: u32,
    seconds: f64,
) -> Result<RpmResult, String> {
    let o = ramp.result();
    let w = o.window.clone().ok_or_else(|| {
        let errs = sh.errors.lock().map(|e| e.join("; ")).unwrap_or_default();
        format!("no probe completed in the run ({errs})")
    })?;
    let share = |n: u64| BitRate(o.goodput * n as f64 / (d_total(sh).max(1)) as f64);
    let total_down = sh.down.load(Ordering::Relaxed);
    let total_up = sh.up.load(Ordering::Relaxed);
    let errors = sh.errors.lock().map(|e| e.clone()).unwrap_or_default();
    let tls = sh.tls.lock().ok().and_then(|t| t.clone());
    Ok(RpmResult {
        rpm: w.rpm,
        responsiveness_ms: 60_000.0 / w.rpm,
        foreign_rpm: w.foreign_rpm.unwrap_or(0.0),
        self_rpm: w.self_rpm.unwrap_or(0.0),
        probes: w.probes,
        download: (spec.direction != RpmDirection::Up).then(|| share(total_down)),
        upload: (spec.direction != RpmDirection::Down).then(|| share(total_up)),
        connections: o.connections * dirs,
        goodput_confidence: o.goodput_confidence,
        rpm_confidence: o.rpm_confidence,
        protocol: if spec.http1 { "http/1.1" } else { "h2" }.into(),
        tls,
        peer: d.addr.to_string(),
        seconds,
        bytes: hakaru_model::Bytes(total_down + total_up),
        failed_probes: sh.failed.load(Ordering::Relaxed),
        intervals: o.intervals,
        errors,
    })
}

fn d_total(sh: &Shared) -> u64 {
    sh.down.load(Ordering::Relaxed) + sh.up.load(Ordering::Relaxed)
}

/// One load-generating connection: downloads of the large URL or uploads, repeated when
/// the server ends one, until the task is aborted. An error is recorded and ends it.
async fn load(d: Arc<Dialer>, sh: Arc<Shared>, dir: RpmDirection, paths: Arc<(String, String)>) {
    let r = async {
        let opened = d.open().await?;
        if let Some(t) = &opened.tls {
            let _ = sh
                .tls
                .lock()
                .map(|mut g| g.get_or_insert_with(|| t.clone()).clone());
        }
        if d.http1 {
            h1_load(&d, &sh, dir, &paths, opened).await
        } else {
            let (chunk, fd) = (opened.chunk.clone(), opened.fd);
            let send = conn::h2_client(opened.io).await?;
            let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut v) = sh.senders.lock() {
                v.push((id, send.clone(), fd));
            }
            let r = h2_load(&d, &sh, dir, &paths, send, &chunk).await;
            // Out of the list as soon as the load ends. The connection's task may have closed
            // the socket a moment before: a probe in that moment reads the marks of whatever
            // reused the descriptor (or none), which can misfile that one probe's diagnostic
            // and nothing else (the descriptor is only read with getsockopt).
            if let Ok(mut v) = sh.senders.lock() {
                v.retain(|(i, _, _)| *i != id);
            }
            r
        }
    }
    .await;
    if let Err(e) = r {
        sh.error(format!("load connection: {e}"));
    }
}

async fn h2_load(
    d: &Dialer,
    sh: &Shared,
    dir: RpmDirection,
    paths: &(String, String),
    send: h2::client::SendRequest<Bytes>,
    chunk: &conn::Chunk,
) -> Result<(), String> {
    static ZEROS: [u8; CHUNK] = [0u8; CHUNK];
    loop {
        let mut ready = send
            .clone()
            .ready()
            .await
            .map_err(|e| format!("HTTP/2: {e}"))?;
        if dir == RpmDirection::Up {
            let req = conn::request(d, http::Method::POST, &paths.1);
            let (resp, mut body) = ready
                .send_request(req, false)
                .map_err(|e| format!("HTTP/2 upload: {e}"))?;
            drop(resp);
            loop {
                body.reserve_capacity(chunk.ahead(conn::SEND_BUFFER));
                let cap = match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                    Some(Ok(n)) => n,
                    // The server ended the stream: start another upload.
                    _ => break,
                };
                let n = cap.min(chunk.ahead(conn::SEND_BUFFER));
                if conn::send_frames(&mut body, &ZEROS, n, chunk, false).is_err() {
                    break;
                }
                sh.up.fetch_add(n as u64, Ordering::Relaxed);
            }
        } else {
            let req = conn::request(d, http::Method::GET, &paths.0);
            let (resp, _) = ready
                .send_request(req, true)
                .map_err(|e| format!("HTTP/2 download: {e}"))?;
            let resp = resp.await.map_err(|e| format!("HTTP/2 download: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("the large URL answered {}", resp.status()));
            }
            let mut body = resp.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|e| format!("HTTP/2 download: {e}"))?;
                let _ = body.flow_control().release_capacity(chunk.len());
                sh.down.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

async fn h1_load(
    d: &Dialer,
    sh: &Shared,
    dir: RpmDirection,
    paths: &(String, String),
    opened: conn::Opened,
) -> Result<(), String> {
    let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut v) = sh.fds.lock() {
        v.push((id, opened.fd));
    }
    let mut io = opened.io;
    let r = async {
        let mut buf = vec![0u8; CHUNK];
        if dir == RpmDirection::Up {
            io.write_all(&conn::h1_request(d, "POST", &paths.1, Some(H1_UPLOAD)))
                .await
                .map_err(|e| format!("HTTP/1.1 upload: {e}"))?;
            loop {
                let n = io
                    .write(&buf)
                    .await
                    .map_err(|e| format!("HTTP/1.1 upload: {e}"))?;
                sh.up.fetch_add(n as u64, Ordering::Relaxed);
            }
        } else {
            io.write_all(&conn::h1_request(d, "GET", &paths.0, None))
                .await
                .map_err(|e| format!("HTTP/1.1 download: {e}"))?;
            let mut head = Vec::new();
            let (status, _) = conn::h1_head(&mut io, &mut head).await?;
            if !(200..300).contains(&status) {
                return Err(format!("the large URL answered {status}"));
            }
            sh.down.fetch_add(head.len() as u64, Ordering::Relaxed);
            loop {
                let n = io
                    .read(&mut buf)
                    .await
                    .map_err(|e| format!("HTTP/1.1 download: {e}"))?;
                if n == 0 {
                    return Err("HTTP/1.1 download: the server closed".into());
                }
                sh.down.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    .await;
    // Out of the list before the socket closes, so no probe reads a reused descriptor.
    if let Ok(mut v) = sh.fds.lock() {
        v.retain(|(i, _)| *i != id);
    }
    drop(io);
    r
}

/// Sends a foreign and a self probe every 1/rate seconds, interleaved, each in a task of
/// its own; results go to the interval loop.
async fn prober(
    d: Arc<Dialer>,
    sh: Arc<Shared>,
    small: String,
    rate: Arc<AtomicU64>,
    tx: mpsc::UnboundedSender<Probe>,
) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut pick = 0usize;
    loop {
        let per_s = f64::from_bits(rate.load(Ordering::Relaxed)).max(0.1);
        let half = Duration::from_secs_f64(0.5 / per_s);
        for foreign in [true, false] {
            let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
                sh.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(half).await;
                continue;
            };
            let (d, sh, tx, small) = (Arc::clone(&d), Arc::clone(&sh), tx.clone(), small.clone());
            // Self probes take the load connections in turn: counted by themselves (counted
            // with the foreign ones, they took every second connection only).
            let which = pick;
            if !foreign {
                pick = pick.wrapping_add(1);
            }
            tokio::spawn(async move {
                let r = tokio::time::timeout(PROBE_TIMEOUT, async {
                    if foreign {
                        foreign_probe(&d, &small).await
                    } else {
                        self_probe(&d, &sh, &small, which).await
                    }
                })
                .await;
                match r {
                    Ok(Ok(Some(p))) => {
                        let _ = tx.send(p);
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => {
                        sh.failed.fetch_add(1, Ordering::Relaxed);
                        sh.error(format!("probe: {e}"));
                    }
                    Err(_) => {
                        sh.failed.fetch_add(1, Ordering::Relaxed);
                        sh.error(format!("probe: no answer in {PROBE_TIMEOUT:?}"));
                    }
                }
                drop(permit);
            });
            tokio::time::sleep(half).await;
        }
    }
}

/// A new connection: its TCP and TLS handshakes and a GET of the small URL on it.
async fn foreign_probe(d: &Dialer, small: &str) -> Result<Option<Probe>, String> {
    let mut opened = d.open().await?;
    let t = Instant::now();
    if d.http1 {
        conn::h1_get(d, &mut opened.io, small).await?;
    } else {
        let mut send = conn::h2_client(opened.io).await?;
        conn::h2_get(&mut send, conn::request(d, http::Method::GET, small)).await?;
    }
    Ok(Some(Probe::Foreign {
        tcp: opened.times.tcp_ms,
        tls: opened.times.tls_ms,
        http: t.elapsed().as_secs_f64() * 1000.0,
    }))
}

/// A GET of the small URL on a load-generating connection (HTTP/2), or that connection's
/// TCP round-trip time (HTTP/1.1, which cannot interleave a request with a download).
async fn self_probe(
    d: &Dialer,
    sh: &Shared,
    small: &str,
    which: usize,
) -> Result<Option<Probe>, String> {
    if d.http1 {
        let fd = sh.fds.lock().ok().and_then(|v| {
            let (_, fd) = v.get(which % v.len().max(1))?;
            // Read under the lock: the connection cannot close meanwhile.
            hakaru_sys::tcp_info(*fd).ok().map(|i| i.rtt_us)
        });
        return Ok(fd.map(|us| Probe::Own(f64::from(us) / 1000.0, None)));
    }
    let pick = sh.senders.lock().ok().and_then(|v| {
        let n = v.len();
        (n > 0).then(|| v.get(which % n).cloned()).flatten()
    });
    let Some((id, mut send, fd)) = pick else {
        return Ok(None);
    };
    let before = loss_marks(sh, id, fd);
    let t = Instant::now();
    conn::h2_get(&mut send, conn::request(d, http::Method::GET, small)).await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let behind_loss = before.zip(loss_marks(sh, id, fd)).map(|(a, b)| b > a);
    Ok(Some(Probe::Own(ms, behind_loss)))
}

/// Load connection `id`'s marks of loss (segments received out of order or retransmitted),
/// read while it is still in the list (so `fd` is still its socket); `None` when it is gone or
/// the OS does not say.
fn loss_marks(sh: &Shared, id: u64, fd: hakaru_sys::RawFd) -> Option<u64> {
    let v = sh.senders.lock().ok()?;
    v.iter()
        .any(|(i, _, _)| *i == id)
        .then(|| hakaru_sys::tcp_loss_marks(fd).ok())
        .flatten()
}
