//! Entry points for the fuzz targets in `fuzz/`; not an API.

use std::net::SocketAddr;
use std::time::Duration;

use hakaru_model::{End, FlowDir, FlowSide, Role, SideReport, UdpFlowSide};
use hakaru_proto::http::{self as http_wire, BodyKind, RangeAnswer};
use hakaru_proto::iperf3::{Inbox, Params, Protocol, State, MAX_RESULTS_JSON};
use serde_json::Value;

fn limits() -> crate::ServerConfig {
    crate::ServerConfig {
        max_duration: Some(Duration::from_secs(3600)),
        max_rate: Some(1e9),
        ..crate::ServerConfig::default()
    }
}

/// The ntttcp receiver's groups of senders and their data connections, driven by a
/// script of events and checked against a model (panics when they disagree).
pub fn ntttcp_groups(data: &[u8]) {
    crate::ntttcp::fuzz_groups(data);
}

/// Checks an iperf3 parameter document as the server does, up to the test it would run;
/// true when the server would run it.
pub fn iperf3_params(v: &Value) -> bool {
    match Params::from_json(v) {
        Ok(p) => crate::iperf3::check(&p, &limits()).is_ok(),
        Err(_) => false,
    }
}

/// What an iperf3 session reads once its test runs, as `reads` deliver the bytes: state
/// bytes until TEST_END (anything else ends the session), the client's results (framed,
/// at most [`MAX_RESULTS_JSON`]), what the server makes of them (the client's side as a
/// report, this end's results with the server output the client asked for), then
/// IPERF_DONE. `setup` picks the test: its first byte's bits are UDP, `-R`, `--bidir`,
/// `--get-server-output`, JSON server output and 64-bit UDP counters; the second is
/// `-P` (1 to 128). Returns the server's results document when it got that far.
pub fn iperf3_session(setup: [u8; 2], reads: &[&[u8]]) -> Option<Value> {
    let bit = |n: u8| setup[0] & (1 << n) != 0;
    let udp = bit(0);
    let params = Params {
        protocol: Some(if udp { Protocol::Udp } else { Protocol::Tcp }),
        time: 1.0,
        parallel: 1 + u32::from(setup[1] % 128),
        reverse: bit(1),
        bidirectional: bit(2),
        get_server_output: bit(3),
        udp_counters_64bit: bit(5),
        bandwidth: Some(1_000_000),
        client_version: Some("3.12".into()),
        ..Params::default()
    };
    let plan = crate::iperf3::check(&params, &limits()).ok()?;
    // This end's report of the test: what the engine would have counted.
    let flows = plan
        .flows
        .iter()
        .map(|&(id, dir)| {
            let role = if dir == FlowDir::Down {
                Role::Sender
            } else {
                Role::Receiver
            };
            FlowSide {
                id,
                dir,
                role,
                bytes: 1_000_000,
                omitted_bytes: 0,
                late_bytes: 0,
                late_seconds: 0.0,
                calls: 10,
                seconds: 1.0,
                tcp_info: None,
                udp: udp.then(|| UdpFlowSide {
                    datagrams: 1000,
                    omitted_datagrams: 0,
                    next_seq: 1000,
                    lost: 0,
                    out_of_order: 0,
                    duplicates: 0,
                    jitter_ms: (role == Role::Receiver).then_some(0.1),
                    ignored: 0,
                    socket_drops: None,
                }),
                error: None,
                mptcp: None,
            }
        })
        .collect();
    let report = SideReport::flows_only(End::Server, flows);
    let peer: SocketAddr = "192.0.2.1:40000".parse().ok()?;
    let mut inbox = Inbox::new();
    let mut ended = false;
    let mut answer = None;
    for read in reads {
        inbox.feed(read);
        while !ended {
            match inbox.take_state() {
                None => break,
                Some(State::TestEnd) => ended = true,
                Some(_) => return None,
            }
        }
        if ended && answer.is_none() {
            match inbox.take_results(MAX_RESULTS_JSON) {
                Ok(None) => continue,
                Err(_) => return None,
                Ok(Some(theirs)) => {
                    let mine = crate::iperf3::answer_results(
                        &plan,
                        &report,
                        &theirs,
                        &[],
                        peer,
                        "192.0.2.2:5201".into(),
                        bit(4),
                    )
                    .ok()?;
                    answer = Some(mine.to_json());
                }
            }
        }
        if answer.is_some() {
            let _ = inbox.take_state();
        }
    }
    answer
}

/// A request head as the HTTP endpoint reads and answers it: `GET /bytes/SIZE` with its
/// range, or a body's framing. Panics if the answer's head does not say what was meant
/// (its length and range read back as sent).
pub fn http_request(buf: &[u8]) {
    let Ok(Some(req)) = http_wire::parse_request(buf) else {
        return;
    };
    assert!(req.head_len <= buf.len());
    let path = req.path.split('?').next().unwrap_or("");
    let Some(Ok(size)) = crate::http::bytes_size(path) else {
        return;
    };
    let (status, range) = match http_wire::answer_range(req.range.as_deref(), size) {
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
    let head = http_wire::response_head(status, "X", len, &headers, req.keep_alive);
    let back = http_wire::parse_response(&head, false)
        .expect("the endpoint's own head parses")
        .expect("the endpoint's own head is whole");
    assert_eq!(back.status, status);
    assert_eq!(back.head_len, head.len());
    assert_eq!(back.body, BodyKind::Length(len));
    if let Some(r) = range {
        assert_eq!(back.content_range, Some((r, Some(size))));
    }
}
