//! The results exchange's server side: the client's results read against the plan, this end's
//! document made, with the server output the client asked for.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use hakaru_model::{Direction, End, FlowDir, IntervalSample, RunResult, SideReport, TestSpec};
use hakaru_proto::iperf3::{self as wire, errno, report_from_results, results_from_report};
use serde_json::Value;

use super::plan::{Fail, Plan};

/// How the server's output (`--get-server-output`) is written. The driver gives the writer:
/// the formats live in hakaru-report, which the machines do not depend on.
#[derive(Debug, Clone, Copy)]
pub enum ServerOutput {
    /// iperf3's text (interval table and summary).
    Text(fn(&RunResult) -> String),
    /// iperf3's `-J` document.
    Json(fn(&RunResult) -> Value),
}

/// What the driver collected of the test once its data plane was done.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    /// This end's report.
    pub report: SideReport,
    /// This end's interval samples.
    pub samples: Vec<IntervalSample>,
    /// The client's address on the control connection.
    pub peer: SocketAddr,
    /// The server's address on it.
    pub local: String,
    /// The wall clock when the report was collected, seconds since the Unix epoch.
    pub now_unix: f64,
}

/// What the server makes of a client's results: the client's side as a report (every stream
/// of the plan must be there), and this end's results document with the output the client
/// asked for (`output`; none when it is `None`).
pub fn answer_results(
    plan: &Plan,
    got: &Collected,
    theirs: &wire::Results,
    output: Option<ServerOutput>,
) -> Result<wire::Results, Fail> {
    let report = &got.report;
    let client_sends = |dir: FlowDir| dir == FlowDir::Up;
    let client = report_from_results(
        End::Client,
        theirs,
        &plan.flows,
        client_sends,
        plan.udp,
        &format!(
            "iperf3 {}",
            plan.params.client_version.as_deref().unwrap_or("")
        ),
    )
    .map_err(|e| (errno::IESTREAMID, e.to_string()))?;
    let mut mine = results_from_report(report, !plan.udp);
    match output {
        Some(how) if plan.params.get_server_output => {
            let result = server_run(plan, got, &client);
            match how {
                ServerOutput::Json(write) => mine.server_output_json = Some(write(&result)),
                ServerOutput::Text(write) => {
                    let mut text = write(&result);
                    for n in how_notes(report) {
                        text += &format!("hakaru: {n}\n");
                    }
                    mine.server_output_text = Some(text);
                }
            }
        }
        _ => {}
    }
    Ok(mine)
}

/// The run as a [`RunResult`] seen from the server, for the server output the client asked for.
fn server_run(plan: &Plan, got: &Collected, client: &SideReport) -> RunResult {
    let (report, peer) = (&got.report, got.peer);
    let dirs: BTreeMap<u32, FlowDir> = plan.flows.iter().copied().collect();
    // The server's own samples, seen from the server: it is the local end here.
    let intervals = got
        .samples
        .iter()
        .map(|s| {
            let flipped: BTreeMap<u32, FlowDir> =
                dirs.iter().map(|(&id, &d)| (id, flip(d))).collect();
            hakaru_model::merge_interval(Some(s), None, &flipped)
        })
        .collect();
    let mut spec = plan.spec.clone();
    flip_spec(&mut spec);
    let mut mine = report.clone();
    let mut theirs = client.clone();
    for f in mine.flows.iter_mut().chain(theirs.flows.iter_mut()) {
        f.dir = flip(f.dir);
    }
    let started_unix = got.now_unix - report.flows.first().map_or(0.0, |f| f.seconds);
    hakaru_model::assemble(hakaru_model::AssembleInputs {
        ipv6: peer.ip().to_canonical().is_ipv6(),
        spec,
        server: peer.to_string(),
        embedded: false,
        local_address: got.local.clone(),
        remote_address: peer.to_string(),
        started_unix,
        intervals,
        local: mine,
        remote: theirs,
        interrupted: false,
        notes: std::iter::once(format!("iperf3 test from {peer}"))
            .chain(how_notes(report))
            .collect(),
    })
}

/// What the server's log and output say of how it received and over what: MSG_TRUNC for a
/// client's --skip-rx-copy, MPTCP for its -m (as the kernel saw each stream).
pub fn how_notes(report: &SideReport) -> Vec<String> {
    let mut notes = Vec::new();
    if report.recv_mode == "discard" {
        notes.push(
            "the server received with MSG_TRUNC, without copying the data (the client's --skip-rx-copy)"
                .to_string(),
        );
    }
    let mptcp: Vec<_> = report.flows.iter().filter_map(|f| f.mptcp).collect();
    if !mptcp.is_empty() {
        let active = mptcp.iter().filter(|m| m.active).count();
        let subflows: u32 = mptcp.iter().map(|m| m.subflows).sum();
        notes.push(format!(
            "MPTCP (the client's -m): {active} of {} stream(s) ran MPTCP, {subflows} subflow(s) in all at the end{}",
            mptcp.len(),
            if active < mptcp.len() {
                "; the others fell back to plain TCP"
            } else {
                ""
            }
        ));
    }
    notes
}

/// [`how_notes`] for the log line that ends a test: empty when there are none.
pub fn how_words(report: &SideReport) -> String {
    how_notes(report).iter().map(|n| format!("; {n}")).collect()
}

/// Directions seen from the other end.
fn flip(d: FlowDir) -> FlowDir {
    match d {
        FlowDir::Up => FlowDir::Down,
        FlowDir::Down => FlowDir::Up,
    }
}

fn flip_spec(spec: &mut TestSpec) {
    let flip_dir = |d: Direction| match d {
        Direction::Forward => Direction::Reverse,
        Direction::Reverse => Direction::Forward,
        Direction::Bidir => Direction::Bidir,
    };
    match spec {
        TestSpec::Tcp(t) => t.direction = flip_dir(t.direction),
        TestSpec::Udp(u) => u.direction = flip_dir(u.direction),
        _ => {}
    }
}
