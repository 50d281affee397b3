//! The client machine on virtual time against a scripted server.

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_model::{
    End, FlowDir, FlowSide, FlowTick, IntervalSample, Role, SideReport, TcpSpec, TestSpec, UdpSpec,
};
use hakaru_proto::auth::Psk;
use hakaru_proto::{Message, ProtoError, ServerInfo};

use super::*;

const ADDR: &str = "192.0.2.7:5201";
const NONCE: &str = "c1c1";
const SERVER_NONCE: &str = "5e5e";
const UNIX0: f64 = 1_000_000.0;

fn secs(n: f64) -> Duration {
    Duration::from_secs_f64(n)
}

fn tcp() -> TestSpec {
    TestSpec::Tcp(TcpSpec::default())
}

fn udp() -> TestSpec {
    TestSpec::Udp(UdpSpec::default())
}

fn psk() -> Psk {
    Psk::from_text("a key of twenty bytes!", "test").expect("key")
}

fn config(spec: TestSpec) -> Config {
    Config {
        peer: ADDR.into(),
        spec,
        held_start: false,
        software: "hakaru test".into(),
        host: Some("boot-1".into()),
        nonce: NONCE.into(),
        psk: None,
        cubic_on_loopback: None,
        keepalive_every: secs(2.0),
        silence: secs(5.0),
    }
}

/// A machine and its virtual clock.
struct Run {
    m: Session,
    t0: Instant,
}

impl Run {
    fn new(cfg: Config) -> Run {
        let t0 = Instant::now();
        Run {
            m: Session::new(cfg, t0, UNIX0),
            t0,
        }
    }

    fn at(&self, s: f64) -> Instant {
        self.t0 + secs(s)
    }

    fn outputs(&mut self) -> Vec<Output> {
        std::iter::from_fn(|| self.m.poll_output()).collect()
    }

    /// Feeds `input` at `s` seconds and returns what the machine does.
    fn feed(&mut self, s: f64, input: Input) -> Vec<Output> {
        self.m.handle(input, self.at(s));
        self.outputs()
    }

    fn msg(&mut self, s: f64, m: Message) -> Vec<Output> {
        self.feed(s, Input::Message(m))
    }

    fn tick(&mut self, s: f64) -> Vec<Output> {
        self.m.handle_timeout(self.at(s));
        self.outputs()
    }

    /// Through the handshake to `accepted` (no key).
    fn accepted(cfg: Config) -> Run {
        let mut r = Run::new(cfg);
        r.outputs();
        r.msg(0.1, welcome(None, Some(UNIX0 + 50.0), Some("boot-2")));
        let out = r.msg(0.2, accepted());
        assert_eq!(out, [Output::Accepted { token: "ab".into() }]);
        r
    }

    /// Through the handshake to a running test (no key, no held start).
    fn running(cfg: Config) -> Run {
        let mut r = Run::accepted(cfg);
        r.feed(0.3, Input::FlowsOpen);
        assert_eq!(r.msg(0.4, Message::Start), [Output::StartLocal]);
        r
    }
}

fn welcome(auth: Option<&str>, unix_time: Option<f64>, host: Option<&str>) -> Message {
    Message::Welcome {
        protocol: 1,
        software: "hakaru server".into(),
        unix_time,
        host: host.map(Into::into),
        auth: auth.map(Into::into),
        os: Some("linux".into()),
    }
}

fn accepted() -> Message {
    Message::Accepted {
        test_id: 1,
        token: "ab".into(),
        probe_flow: None,
    }
}

fn sample(index: u32) -> IntervalSample {
    IntervalSample {
        index,
        start: f64::from(index),
        end: f64::from(index + 1),
        omitted: false,
        flows: vec![FlowTick {
            id: 0,
            bytes: 1000,
            calls: 1,
            tcp: None,
            udp: None,
        }],
        nic: None,
        probe: None,
    }
}

fn report(end: End, error: Option<&str>) -> SideReport {
    let flow = FlowSide {
        id: 0,
        dir: FlowDir::Up,
        role: if end == End::Client {
            Role::Sender
        } else {
            Role::Receiver
        },
        bytes: 1000,
        omitted_bytes: 0,
        late_bytes: 0,
        late_seconds: 0.0,
        calls: 1,
        seconds: 1.0,
        tcp_info: None,
        udp: None,
        error: error.map(Into::into),
        mptcp: None,
    };
    SideReport::flows_only(end, vec![flow])
}

/// A record of this end's alone (latency and connection-rate tests).
fn record(index: u32) -> hakaru_model::IntervalRecord {
    hakaru_model::IntervalRecord {
        index,
        start: f64::from(index),
        end: f64::from(index + 1),
        omitted: false,
        flows: Vec::new(),
        sums: Vec::new(),
        latency: None,
        connect: None,
        client_nic: None,
        server_nic: None,
        probe: None,
    }
}

fn finished() -> Message {
    Message::Finished {
        report: Box::new(report(End::Server, None)),
    }
}

/// The error the session ended with, checking that it ended and that nothing follows.
fn ended_with(r: &mut Run, out: &[Output]) -> SessionError {
    assert!(r.m.is_done(), "{out:?}");
    assert_eq!(r.m.timeout(), None);
    match out.last() {
        Some(Output::End(Err(e))) => e.clone(),
        other => panic!("no error end: {other:?} in {out:?}"),
    }
}

/// After `start`, a failure stops this end and tells the server why.
fn gave_up(out: &[Output], e: &SessionError) {
    assert_eq!(out.first(), Some(&Output::AbortLocal), "{out:?}");
    let told = Output::Send(Message::Error {
        message: format!("client gave up: {e}"),
    });
    assert_eq!(out.get(1), Some(&told), "{out:?}");
}

fn ends(out: &[Output]) -> Option<&Result<Box<Ended>, SessionError>> {
    out.iter().find_map(|o| match o {
        Output::End(e) => Some(e),
        _ => None,
    })
}

mod connect;
mod fault;
mod happy;
mod latency;
mod probes;
