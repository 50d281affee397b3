//! One control session: handshake, one test, results exchange.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hakaru_engine::control::{ControlConn, ControlError};
use hakaru_engine::sockopt::apply_tcp_options;
use hakaru_engine::sys;
use hakaru_engine::tcp::{FlowSocket, SideConfig, SideRun};
use hakaru_model::{Amount, End, FlowDir, Role, TcpSpec};
use hakaru_proto::{Decoder, Message, TestKind, PROTOCOL_VERSION};
use socket2::SockRef;

use crate::dispatch::CountGuard;
use crate::Ctx;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const DATA_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);
const PEER_SILENCE: Duration = Duration::from_secs(15);
const RESULTS_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a test ended early.
#[derive(Debug)]
enum Abort {
    /// Tell the client this, then close.
    Tell(String),
    /// The client is gone or broke the protocol; just log.
    Quiet(String),
}

/// Runs a control session to its end. Never panics on peer input; logs how it ended.
pub(crate) fn control(
    ctx: &Ctx,
    stream: TcpStream,
    dec: Decoder,
    peer: SocketAddr,
    protocol: u32,
    software: String,
) {
    let local_ip = stream.local_addr().map(|a| a.ip()).ok();
    let mut conn = ControlConn::with_decoder(stream, dec);
    let welcome = hakaru_proto::native::opening(&Message::Welcome {
        protocol: PROTOCOL_VERSION,
        software: format!("hakaru {}", env!("CARGO_PKG_VERSION")),
    });
    if protocol != PROTOCOL_VERSION {
        let why = format!(
            "protocol version mismatch: the client ({software}) speaks {protocol}, this server speaks {PROTOCOL_VERSION}"
        );
        tracing::warn!("rejected {peer}: {why}");
        let _ = conn.send_raw(&hakaru_proto::MAGIC);
        let _ = conn.send(&Message::Error { message: why });
        return;
    }
    if conn.send_raw(&welcome).is_err() {
        return;
    }
    let spec = match conn.recv(REQUEST_TIMEOUT) {
        Ok(Message::TestRequest { test }) => match *test {
            TestKind::Tcp(spec) => spec,
        },
        Ok(other) => {
            let why = format!("expected a test request, got {}", other.name());
            tracing::warn!("session with {peer}: {why}");
            let _ = conn.send(&Message::Error { message: why });
            return;
        }
        Err(e) => {
            tracing::warn!("session with {peer}: {e}");
            if matches!(e, ControlError::Proto(_)) {
                let _ = conn.send(&Message::Error {
                    message: e.to_string(),
                });
            }
            return;
        }
    };
    if let Err(reason) = admit(ctx, &spec) {
        tracing::warn!("refused test from {peer}: {reason}");
        let _ = conn.send(&Message::Refused { reason });
        return;
    }
    // Count the test from here on; the guard frees the slot however we leave.
    ctx.active_tests.fetch_add(1, Ordering::AcqRel);
    let _active = CountGuard(&ctx.active_tests);
    let id = ctx.next_test.fetch_add(1, Ordering::Relaxed);
    let token = new_token();
    let (tx, rx) = mpsc::channel();
    ctx.registry.insert(token.clone(), tx);
    let started = Instant::now();
    tracing::info!(
        "test {id} from {peer} ({software}): tcp, {} flow(s) {:?}, {}",
        spec.flows,
        spec.direction,
        describe_amount(&spec)
    );
    let outcome = run_test(ctx, &mut conn, &spec, id, &token, &rx, local_ip);
    ctx.registry.remove(&token);
    match outcome {
        Ok(summary) => tracing::info!(
            "test {id} from {peer} finished after {:.1} s: {summary}",
            started.elapsed().as_secs_f64()
        ),
        Err(Abort::Tell(why)) => {
            tracing::warn!("test {id} from {peer} aborted: {why}");
            let _ = conn.send(&Message::Error { message: why });
        }
        Err(Abort::Quiet(why)) => tracing::warn!("test {id} from {peer} aborted: {why}"),
    }
}

fn describe_amount(spec: &TcpSpec) -> String {
    match spec.amount {
        Amount::Time(t) => format!("{t}"),
        Amount::Bytes(b) => format!("{} bytes", b.0),
        Amount::Blocks(k) => format!("{k} blocks of {} bytes", spec.length.0),
    }
}

/// Checks what the spec's own validation cannot: this host's limits and capabilities.
fn admit(ctx: &Ctx, spec: &TcpSpec) -> Result<(), String> {
    spec.validate().map_err(|e| e.0)?;
    if ctx.shutdown.load(Ordering::Acquire) {
        return Err("the server is shutting down".into());
    }
    let active = ctx.active_tests.load(Ordering::Acquire);
    if active >= ctx.cfg.max_tests {
        return Err(format!(
            "the server is busy: {active} tests running, its limit is {} (--max-tests)",
            ctx.cfg.max_tests
        ));
    }
    if let Some(cc) = &spec.congestion {
        let avail = sys::available_congestion();
        if !avail.is_empty() && !avail.iter().any(|a| a == cc) {
            return Err(format!(
                "-C/--congestion {cc}: not available on the server (available: {})",
                avail.join(" ")
            ));
        }
    }
    let cpus = sys::online_cpus();
    if let Some(&bad) = spec.server_affinity.iter().find(|&&c| c >= cpus) {
        return Err(format!(
            "--server-affinity: CPU {bad} does not exist on the server (it has {cpus})"
        ));
    }
    Ok(())
}

fn new_token() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: fall back to the clock; tokens only need to be unguessable-ish
        // on such hosts and unique per test.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b.copy_from_slice(&t.to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn run_test(
    ctx: &Ctx,
    conn: &mut ControlConn,
    spec: &TcpSpec,
    id: u64,
    token: &str,
    rx: &mpsc::Receiver<crate::registry::DataConn>,
    local_ip: Option<std::net::IpAddr>,
) -> Result<String, Abort> {
    conn.send(&Message::Accepted {
        test_id: id,
        token: token.to_string(),
    })
    .map_err(|e| Abort::Quiet(e.to_string()))?;
    let plan = spec.flow_plan();
    let mut socks: Vec<Option<TcpStream>> = (0..plan.len()).map(|_| None).collect();
    let deadline = Instant::now() + DATA_TIMEOUT;
    let mut arrived = 0;
    while arrived < plan.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || ctx.shutdown.load(Ordering::Acquire) {
            return Err(Abort::Tell(format!(
                "only {arrived} of {} data connections arrived within {} s",
                plan.len(),
                DATA_TIMEOUT.as_secs()
            )));
        }
        match rx.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok((flow, stream)) => match socks.get_mut(flow as usize) {
                Some(slot @ None) => {
                    *slot = Some(stream);
                    arrived += 1;
                }
                _ => tracing::warn!(
                    "test {id}: ignored a data connection for unknown or repeated flow {flow}"
                ),
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The client may give up while we wait; notice it.
                match conn.poll(Duration::ZERO) {
                    Err(e) => {
                        return Err(Abort::Quiet(format!(
                            "while waiting for data connections: {e}"
                        )))
                    }
                    Ok(Some(Message::Error { message })) => {
                        return Err(Abort::Quiet(format!("client: {message}")))
                    }
                    Ok(_) => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Abort::Tell("internal error: registry closed".into()))
            }
        }
    }
    let mut flows = Vec::with_capacity(plan.len());
    let mut down_index = 0u32;
    for ((fid, dir), s) in plan.iter().zip(socks) {
        let Some(stream) = s else {
            return Err(Abort::Tell(
                "internal error: missing data connection".into(),
            ));
        };
        let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        apply_tcp_options(&SockRef::from(&stream), spec, ipv6, false)
            .map_err(|e| Abort::Tell(format!("on the server: {e}")))?;
        let (role, quota) = match dir {
            FlowDir::Up => (Role::Receiver, None),
            FlowDir::Down => {
                down_index += 1;
                (Role::Sender, spec.bytes_for_flow(down_index - 1))
            }
        };
        flows.push(FlowSocket {
            id: *fid,
            dir: *dir,
            role,
            stream,
            quota,
        });
    }
    let cfg = SideConfig {
        end: End::Server,
        length: spec.length.0 as usize,
        discard: spec.discard,
        zerocopy: spec.zerocopy,
        affinity: spec.server_affinity.clone(),
        interval: spec.interval.0,
        omit: spec.omit.0,
        duration: match spec.amount {
            Amount::Time(t) => Some(t.0),
            _ => None,
        },
        stall_timeout: spec.stall_timeout.0,
        iface: local_ip.and_then(sys::interface_for_addr),
    };
    let writer = conn
        .stream()
        .try_clone()
        .map_err(|e| Abort::Tell(format!("cloning the control socket: {e}")))?;
    let writer = Arc::new(Mutex::new(ControlConn::new(writer)));
    conn.send(&Message::Start)
        .map_err(|e| Abort::Quiet(e.to_string()))?;
    let w = Arc::clone(&writer);
    let run = SideRun::start(
        cfg,
        flows,
        Box::new(move |sample| {
            if let Ok(mut w) = w.lock() {
                let _ = w.send(&Message::Interval { sample });
            }
        }),
        Box::new(|| {}),
    )
    .map_err(|e| Abort::Tell(format!("on the server: {e}")))?;
    let mut last_heard = Instant::now();
    let mut last_sent = Instant::now();
    while !run.is_done() {
        if ctx.shutdown.load(Ordering::Acquire) {
            run.abort();
            return Err(Abort::Tell("the server is shutting down".into()));
        }
        match conn.poll(Duration::from_millis(100)) {
            Ok(Some(Message::Keepalive)) => last_heard = Instant::now(),
            Ok(Some(Message::Stop)) => {
                last_heard = Instant::now();
                run.stop_sending();
            }
            Ok(Some(Message::Error { message })) => {
                run.abort();
                return Err(Abort::Quiet(format!("the client reported: {message}")));
            }
            Ok(Some(other)) => {
                run.abort();
                return Err(Abort::Tell(format!(
                    "unexpected {} message during the test",
                    other.name()
                )));
            }
            Ok(None) => {}
            Err(ControlError::Closed) => {
                run.abort();
                return Err(Abort::Quiet(
                    "the client closed the control connection mid-test".into(),
                ));
            }
            Err(e) => {
                run.abort();
                return Err(Abort::Tell(e.to_string()));
            }
        }
        if last_heard.elapsed() > PEER_SILENCE {
            run.abort();
            return Err(Abort::Tell(format!(
                "the client was silent for {} s",
                PEER_SILENCE.as_secs()
            )));
        }
        if last_sent.elapsed() > KEEPALIVE_EVERY {
            if let Ok(mut w) = writer.lock() {
                let _ = w.send(&Message::Keepalive);
            }
            last_sent = Instant::now();
        }
    }
    let report = run.wait();
    let moved: u64 = report.flows.iter().map(|f| f.bytes).sum();
    let first_error = report.flows.iter().find_map(|f| f.error.clone());
    let seconds = report.flows.first().map_or(0.0, |f| f.seconds);
    {
        let mut w = writer
            .lock()
            .map_err(|_| Abort::Quiet("control writer poisoned".into()))?;
        w.send(&Message::Finished {
            report: Box::new(report),
        })
        .map_err(|e| Abort::Quiet(format!("sending results: {e}")))?;
    }
    // The client answers with its own report; wait for it briefly, for the log.
    let deadline = Instant::now() + RESULTS_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.poll(left) {
            Ok(Some(Message::Finished { .. })) | Ok(None) | Err(_) => break,
            Ok(Some(_)) if left.is_zero() => break,
            Ok(Some(_)) => {}
        }
    }
    let rate = hakaru_model::BitRate::from_bytes(moved, seconds);
    match first_error {
        Some(e) => Ok(format!(
            "{} moved at this end ({rate}); {e}",
            hakaru_model::Bytes(moved)
        )),
        None => Ok(format!(
            "{} moved at this end ({rate})",
            hakaru_model::Bytes(moved)
        )),
    }
}
