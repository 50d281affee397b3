//! TCP_STREAM, TCP_MAERTS and UDP_STREAM: the engine's flows on netserver's data ports.

use hakaru_engine::control::Transport as _;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hakaru_engine::sockopt::apply_tcp_options;
use hakaru_engine::tcp::{FlowSocket, SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpFlowSocket, UdpRun};
use hakaru_engine::{sys, Observer, Running};
use hakaru_model::{
    End, FlowDir, FlowSide, IntervalRecord, IntervalSample, Role, RunResult, TestSpec, UdpFlowSide,
};
use hakaru_proto::netperf::OmniResults;

use super::{empty_datagrams, Tests};
use crate::{connect_one, ClientError, ClientOptions};

/// How often the loop looks at the engine and the control connections.
const POLL: Duration = Duration::from_millis(20);

/// Runs a bulk test on the tests' data ports and assembles the result.
pub(super) fn run(
    opts: &ClientOptions,
    tests: &mut Tests,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<RunResult, ClientError> {
    let spec = &opts.spec;
    let iface = tests
        .list
        .first()
        .and_then(|t| t.io.conn.stream().local_addr().ok())
        .and_then(|a| sys::interface_for_addr(a.ip()));
    let cfg = SideConfig::for_spec(End::Client, spec, opts.affinity.clone(), iface);
    let (tx, rx) = mpsc::channel::<IntervalSample>();
    let on_interval = Box::new(move |s| {
        let _ = tx.send(s);
    });
    let plan = spec.flow_plan();
    let (run, held) = start(opts, tests, cfg, on_interval)?;
    observer.on_start(spec, &tests.addr, opts.embedded);
    let started_unix = super::now_unix();
    let dirs: BTreeMap<u32, FlowDir> = plan.iter().copied().collect();
    let mut intervals = Vec::new();
    let interrupted = watch(&run, tests, (&rx, &dirs), observer, &mut intervals, stop);
    let local = match interrupted {
        Ok(i) => (run.wait(), i),
        Err(e) => {
            run.abort();
            let _ = run.wait();
            return Err(e);
        }
    };
    crate::drive::show_local(&rx, &dirs, observer, &mut intervals);
    let (local, interrupted) = local;
    empty_datagrams(&held);
    let theirs = tests.results()?;
    drop(held);
    if let Some(e) = local.flows.iter().find_map(|f| f.error.clone()) {
        return Err(ClientError::Flow(e));
    }
    let udp = matches!(spec, TestSpec::Udp(_));
    let flows = plan
        .iter()
        .zip(&theirs)
        .map(|(&(id, dir), r)| their_flow(id, dir, r, udp))
        .collect();
    let remote = tests.report(flows);
    let result = super::assemble(
        opts,
        tests,
        started_unix,
        (intervals, local, remote, interrupted),
        Vec::new(),
    );
    observer.on_end(&result);
    Ok(result)
}

/// Opens a flow to each test's data port and starts the engine on them; with duplicates of
/// the UDP flows' sockets, for netperf's empty datagrams at the end.
fn start(
    opts: &ClientOptions,
    tests: &Tests,
    cfg: SideConfig,
    on_interval: Box<dyn FnMut(IntervalSample) + Send>,
) -> Result<(Running, Vec<UdpSocket>), ClientError> {
    let spec = &opts.spec;
    let plan = spec.flow_plan();
    let addrs = tests.data_addrs();
    let mut held = Vec::new();
    let run = match spec {
        TestSpec::Tcp(t) => {
            let mut flows = Vec::with_capacity(plan.len());
            for (i, (&(id, dir), &to)) in (0u32..).zip(plan.iter().zip(&addrs)) {
                let stream = connect_one(to, opts.bind, opts.connect_timeout, |sock| {
                    apply_tcp_options(sock, t, to.is_ipv6(), true).map_err(ClientError::from)
                })
                .map_err(|e| ClientError::Data {
                    flow: id,
                    reason: format!("netserver's data port {}: {e}", to.port()),
                })?;
                flows.push(FlowSocket {
                    id,
                    dir,
                    role: role(dir),
                    stream,
                    quota: (dir == FlowDir::Up).then(|| t.bytes_for_flow(i)).flatten(),
                });
            }
            // The senders' FIN ends TCP_STREAM; TCP_MAERTS's receivers read to netserver's.
            Running::Tcp(SideRun::start(cfg, flows, on_interval, Box::new(|| {}))?)
        }
        TestSpec::Udp(u) => {
            let mut flows = Vec::with_capacity(plan.len());
            for (&(id, dir), &to) in plan.iter().zip(&addrs) {
                let socket = crate::udp::open_socket(opts, u, to, id)?;
                if let Ok(dup) = socket.try_clone() {
                    held.push(dup);
                }
                flows.push(UdpFlowSocket {
                    id,
                    dir,
                    role: role(dir),
                    socket,
                    quota: None,
                });
            }
            let ucfg = UdpConfig::from_spec(u, FlowDir::Up);
            Running::Udp(UdpRun::start(
                cfg,
                ucfg,
                flows,
                on_interval,
                Box::new(|| {}),
                Box::new(|_| {}),
            )?)
        }
        _ => return Err(ClientError::Flow("internal error: not a bulk test".into())),
    };
    Ok((run, held))
}

/// This end's role on a flow.
fn role(dir: FlowDir) -> Role {
    match dir {
        FlowDir::Up => Role::Sender,
        FlowDir::Down => Role::Receiver,
    }
}

/// Until the engine is done: live intervals, the user's stop, netserver's failures.
fn watch(
    run: &Running,
    tests: &mut Tests,
    (rx, dirs): (&mpsc::Receiver<IntervalSample>, &BTreeMap<u32, FlowDir>),
    observer: &mut dyn Observer,
    intervals: &mut Vec<IntervalRecord>,
    stop: &AtomicBool,
) -> Result<bool, ClientError> {
    let mut interrupted = false;
    // Bounded by the engine's own end (its time, amount or stall timeout) or the user's stop.
    while !run.is_done() {
        crate::drive::show_local(rx, dirs, observer, intervals);
        if !interrupted && stop.load(Ordering::Acquire) {
            interrupted = true;
            // netserver cannot be told to stop sending: a TCP_MAERTS ends here, at once (its
            // data connections close under it and it reports a failure).
            if dirs.values().all(|&d| d == FlowDir::Down) {
                run.abort();
            } else {
                run.stop_sending();
            }
        }
        tests.check()?;
        std::thread::sleep(POLL);
    }
    Ok(interrupted)
}

/// netserver's side of one flow, from its results.
fn their_flow(id: u32, dir: FlowDir, r: &OmniResults, udp: bool) -> FlowSide {
    let (role, bytes, calls) = match dir {
        FlowDir::Up => (Role::Receiver, r.bytes_received, r.recv_calls),
        FlowDir::Down => (Role::Sender, r.bytes_sent, r.send_calls),
    };
    let calls = u64::from(calls);
    FlowSide {
        id,
        dir,
        role,
        bytes,
        omitted_bytes: 0,
        late_bytes: 0,
        late_seconds: 0.0,
        calls,
        seconds: f64::from(r.elapsed_time).max(0.0),
        tcp_info: None,
        // netserver counts the datagrams it read; the sequence numbers it never looks at.
        udp: udp.then_some(UdpFlowSide {
            datagrams: calls,
            omitted_datagrams: 0,
            next_seq: calls,
            lost: 0,
            out_of_order: 0,
            duplicates: 0,
            jitter_ms: None,
            ignored: 0,
            socket_drops: None,
        }),
        error: None,
        mptcp: None,
    }
}
