//! iperf3's results as hakaru's server reads them: the document parsed into typed fields, and
//! the control bytes after the parameters (state bytes until TEST_END, the framed results,
//! the server's answer with its output, IPERF_DONE), split where the input says, through the
//! server's session machine.
#![no_main]

use std::time::Instant;

use hakaru_model::{End, FlowDir, FlowSide, Role, RunResult, SideReport, UdpFlowSide};
use hakaru_proto::iperf3::{encode_json, Results};
use hakaru_session::iperf3::results::{Collected, ServerOutput};
use hakaru_session::iperf3::server::{Config, Input, Output, Session};
use hakaru_session::Machine as _;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

/// What the driver would have counted of the test: every flow moved a megabyte.
fn collected(flows: &[(u32, FlowDir)], udp: bool) -> Collected {
    let side = |(id, dir): (u32, FlowDir)| {
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
    };
    Collected {
        report: SideReport::flows_only(End::Server, flows.iter().copied().map(side).collect()),
        samples: vec![],
        peer: "192.0.2.1:40000".parse().expect("an address"),
        local: "192.0.2.2:5201".into(),
        now_unix: 1.8e9,
    }
}

/// The server output's writers stand in for hakaru-report's (not a dependency here): the
/// run's notes, which the machine wrote.
fn text(r: &RunResult) -> String {
    r.notes.join("\n")
}

fn doc(r: &RunResult) -> Value {
    json!({ "notes": r.notes })
}

/// A session of the test `setup` picks (its first byte's bits: UDP, `-R`, `--bidir`,
/// `--get-server-output`, JSON server output, 64-bit UDP counters; the second: `-P` 1 to 128)
/// brought to its results, then fed `reads`. Returns the server's results document when it
/// got that far.
fn session(setup: [u8; 2], reads: &[&[u8]]) -> Option<Value> {
    let bit = |n: u8| setup[0] & (1 << n) != 0;
    let udp = bit(0);
    // iperf3 says a flag by the key's presence.
    let mut params = json!({
        "time": 1, "parallel": 1 + u32::from(setup[1] % 128), "bandwidth": 1_000_000,
        "client_version": "3.12",
    });
    let flags = [
        (!udp, "tcp"),
        (udp, "udp"),
        (bit(1), "reverse"),
        (bit(2), "bidirectional"),
        (bit(3), "get_server_output"),
        (bit(5), "udp_counters_64bit"),
    ];
    for (_, key) in flags.iter().filter(|f| f.0) {
        params[*key] = json!(true);
    }
    let cfg = Config {
        server_output: Some(if bit(4) {
            ServerOutput::Json(doc)
        } else {
            ServerOutput::Text(text)
        }),
        ..Config::default()
    };
    let now = Instant::now();
    let mut m = Session::new(cfg, &encode_json(&params), now);
    let mut d = Driver {
        flows: vec![],
        udp,
        answer: None,
    };
    d.give(&mut m, Input::Bytes(vec![]), now);
    for read in reads {
        d.give(&mut m, Input::Bytes(read.to_vec()), now);
    }
    d.answer
}

/// The server's driver, played without sockets.
struct Driver {
    flows: Vec<(u32, FlowDir)>,
    udp: bool,
    /// The last JSON document the machine sent: its results.
    answer: Option<Value>,
}

impl Driver {
    /// Gives the machine `input`, then answers every question it asks at once, as the
    /// server's driver does.
    fn give(&mut self, m: &mut Session, input: Input, now: Instant) {
        let mut pending = std::collections::VecDeque::from([input]);
        while let Some(input) = pending.pop_front() {
            m.handle(input, now);
            while let Some(o) = m.poll_output() {
                match o {
                    Output::Admit(plan) => {
                        self.flows = plan.flows.clone();
                        pending.push_back(Input::Admitted);
                        pending.extend(plan.flows.iter().map(|_| Input::StreamArrived));
                    }
                    Output::StartSide => pending.push_back(Input::SideDone { error: None }),
                    Output::CollectReport => {
                        let got = collected(&self.flows, self.udp);
                        pending.push_back(Input::Report(Box::new(got)));
                    }
                    Output::Send(b) => {
                        if let Some(Ok(v)) = b.get(4..).map(serde_json::from_slice::<Value>) {
                            self.answer = Some(v);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The integers of a document, as hakaru writes them back.
fn counts(r: &Results) -> Vec<i64> {
    let mut v = vec![r.sender_has_retransmits, r.streams.len() as i64];
    for s in &r.streams {
        v.extend([
            s.id,
            s.bytes as i64,
            s.retransmits,
            s.errors,
            s.packets,
            s.omitted_errors.unwrap_or(0),
            s.omitted_packets.unwrap_or(0),
        ]);
    }
    v
}

fuzz_target!(|data: &[u8]| {
    // The message's body.
    if let Ok(r) = Results::parse(data) {
        assert!(r.streams.iter().all(|s| s.bytes <= i64::MAX as u64));
        let again = Results::parse(r.to_json().to_string().as_bytes())
            .expect("hakaru reads what it writes");
        assert_eq!(counts(&again), counts(&r));
    }
    // A session: two bytes pick the test, one where the bytes are split.
    if let [a, b, cut, rest @ ..] = data {
        let cut = (*cut as usize).min(rest.len());
        if let Some(v) = session([*a, *b], &[&rest[..cut], &rest[cut..]]) {
            // What the server answers, hakaru's client reads.
            Results::parse(v.to_string().as_bytes()).expect("the server's results read back");
        }
    }
});
