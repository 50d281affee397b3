//! The native client machine against the native server machine, in memory and on virtual
//! time: every message goes through the real framing (`Message::encode`, `Decoder`), and the
//! tests play both drivers (data paths arrive, sides start and finish, admission answers).

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_model::{
    ConnectSpec, End, LatencySpec, LatencyTransport, SideReport, TcpSpec, TestSpec, UdpSpec,
};
use hakaru_proto::auth::Psk;
use hakaru_proto::native::{silence_limit, KEEPALIVE_EVERY};
use hakaru_proto::{Decoder, Message, ServerInfo};

use crate::client::{self, SessionError};
use crate::server;

const KEY: &str = "a key long enough for the pair test";
const NONCE_C: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const NONCE_S: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn report(end: End) -> Box<SideReport> {
    Box::new(SideReport::flows_only(end, vec![]))
}

/// How the test's server behaves.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    /// Admits and runs the test.
    Runs,
    /// Refuses it at admission.
    Refuses,
    /// Goes silent (no message, no close) once the test runs.
    Hangs,
}

struct Pair {
    now: Instant,
    c: client::Session,
    s: Option<server::Session>,
    server_key: Option<&'static str>,
    behaviour: Server,
    /// When each side's data plane finishes (the test's time).
    side_ends: Option<Instant>,
    side_time: Duration,
    client_end: Option<Result<Box<client::Ended>, SessionError>>,
    server_end: Option<server::Ending>,
    /// Messages the server sent, by name.
    server_said: Vec<&'static str>,
    /// A latency test: the server's echo runs until the server machine stops it.
    echo: bool,
    /// The server machine asked its side to stop sending (the echo to stop).
    echo_stopped: bool,
    /// A connection-rate test: the server's listener runs until the client's report.
    connect: bool,
    /// The server machine stopped its connect listener.
    listener_stopped: bool,
}

/// One message through the wire format, as the other end's decoder reads it.
fn wire(m: &Message) -> Message {
    let mut d = Decoder::after_magic();
    d.feed(&m.encode());
    d.next_message().expect("decodes").expect("a whole frame")
}

impl Pair {
    fn new(spec: TestSpec, client_key: Option<&str>, server_key: Option<&'static str>) -> Pair {
        let now = Instant::now();
        let cfg = client::Config {
            peer: "192.0.2.1:5201".into(),
            spec: spec.clone(),
            held_start: false,
            software: "hakaru test".into(),
            host: None,
            nonce: NONCE_C.into(),
            psk: client_key.map(|k| Psk::from_text(k, "test").expect("key")),
            cubic_on_loopback: None,
            keepalive_every: KEEPALIVE_EVERY,
            silence: silence_limit(spec.common().stall_timeout.0),
        };
        Pair {
            now,
            c: client::Session::new(cfg, now, 1_000_000.0),
            s: None,
            server_key,
            behaviour: Server::Runs,
            side_ends: None,
            side_time: Duration::from_secs(3),
            client_end: None,
            server_end: None,
            server_said: vec![],
            echo: matches!(spec, TestSpec::Latency(_)),
            echo_stopped: false,
            connect: matches!(spec, TestSpec::Connect(_)),
            listener_stopped: false,
        }
    }

    /// Passes everything each machine says to the other until both are quiet.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(o) = self.c.poll_output() {
                moved = true;
                self.client_output(o);
            }
            while let Some(o) = self.s.as_mut().and_then(server::Session::poll_output) {
                moved = true;
                self.server_output(o);
            }
            if !moved {
                return;
            }
        }
    }

    fn forward(&mut self, m: Message) {
        if self.behaviour == Server::Hangs && self.side_ends.is_some() {
            return;
        }
        let now = self.now;
        if let Some(s) = self.s.as_mut() {
            s.handle(server::Input::Message(wire(&m)), now);
        }
    }

    fn client_output(&mut self, o: client::Output) {
        let now = self.now;
        match o {
            client::Output::Open(Message::Hello {
                protocol,
                software,
                nonce,
                ..
            }) => {
                let cfg = server::Config {
                    psk: self
                        .server_key
                        .map(|k| Psk::from_text(k, "test").expect("key")),
                    nonce: self.server_key.map(|_| NONCE_S.to_string()),
                    info: ServerInfo {
                        software: "hakaru server".into(),
                        unix_time: Some(1_000_000.5),
                        host: None,
                        os: Some("linux".into()),
                    },
                    max_duration: None,
                    udp_port: 5201,
                };
                let hello = server::Hello {
                    protocol,
                    software,
                    nonce,
                };
                self.s = Some(server::Session::new(cfg, hello, now));
            }
            client::Output::Open(other) => panic!("opened with {other:?}"),
            client::Output::Send(m) => self.forward(m),
            client::Output::Accepted { .. } => {
                let paths = self.c.spec().data_paths() as u32;
                if let Some(s) = self.s.as_mut() {
                    for flow in 0..paths {
                        s.handle(server::Input::PathArrived { flow }, now);
                    }
                }
                self.c.handle(client::Input::FlowsOpen, now);
            }
            client::Output::WaitGate => self
                .c
                .handle(client::Input::GateOpen { at_unix: None }, now),
            client::Output::StartLocal | client::Output::StartConnecting { .. } => {
                self.side_ends = Some(now + self.side_time)
            }
            client::Output::CollectLocal => self
                .c
                .handle(client::Input::LocalReport(report(End::Client)), now),
            client::Output::End(how) => self.client_end = Some(how),
            _ => {}
        }
    }

    fn server_output(&mut self, o: server::Output) {
        let now = self.now;
        let Some(s) = self.s.as_mut() else { return };
        match o {
            server::Output::SendRaw(bytes) => {
                self.server_said.push("opening");
                let mut d = Decoder::after_magic();
                d.feed(bytes.get(4..).unwrap_or_default());
                if let Ok(Some(m)) = d.next_message() {
                    self.c.handle(client::Input::Message(m), now);
                }
            }
            server::Output::Send(m) => {
                if self.behaviour == Server::Hangs && self.side_ends.is_some() {
                    return;
                }
                self.server_said.push(m.name());
                self.c.handle(client::Input::Message(wire(&m)), now);
            }
            server::Output::Admit { .. } => match self.behaviour {
                Server::Refuses => s.handle(
                    server::Input::Refused("the server allows 1 flow".into()),
                    now,
                ),
                _ => s.handle(
                    server::Input::Admitted {
                        test_id: 1,
                        token: "00".repeat(16),
                    },
                    now,
                ),
            },
            server::Output::OpenConnectListener => {
                s.handle(server::Input::ConnectListening { port: 4711 }, now)
            }
            server::Output::StopSide => {
                self.listener_stopped = true;
                s.handle(server::Input::SideDone(report(End::Server)), now);
            }
            server::Output::StopSending if self.echo => {
                self.echo_stopped = true;
                s.handle(server::Input::SideDone(report(End::Server)), now);
            }
            server::Output::StartProbe { .. } => self.server_said.push("(probe echo)"),
            server::Output::End(how) => self.server_end = Some(how),
            _ => {}
        }
    }

    /// Runs until both ends are over, or `limit` of virtual time has passed.
    fn run(&mut self, limit: Duration) {
        let start = self.now;
        self.pump();
        while self.now - start < limit && (self.client_end.is_none() || self.server_end.is_none()) {
            let next = [
                self.c.timeout(),
                self.s.as_ref().and_then(server::Session::timeout),
                self.side_ends,
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            self.now = next.max(self.now);
            if self.side_ends.is_some_and(|t| t <= self.now) {
                self.side_ends = Some(Instant::now() + Duration::from_secs(86_400 * 365));
                let now = self.now;
                self.c.handle(client::Input::LocalDone { error: None }, now);
                if self.behaviour != Server::Hangs && !self.echo && !self.connect {
                    if let Some(s) = self.s.as_mut() {
                        s.handle(server::Input::SideDone(report(End::Server)), now);
                    }
                }
            }
            let now = self.now;
            self.c.handle_timeout(now);
            if let Some(s) = self.s.as_mut() {
                s.handle_timeout(now);
            }
            self.pump();
        }
    }
}

fn tcp() -> TestSpec {
    TestSpec::Tcp(TcpSpec {
        flows: 2,
        ..TcpSpec::default()
    })
}

#[test]
fn a_tcp_test_runs_between_the_machines() {
    let mut p = Pair::new(tcp(), None, None);
    p.run(Duration::from_secs(60));
    let Some(Ok(ended)) = &p.client_end else {
        panic!("client: {:?}", p.client_end)
    };
    assert_eq!(ended.remote.end, End::Server);
    assert!(!ended.interrupted);
    assert_eq!(p.server_end, Some(server::Ending::Finished));
    // The server's keepalives went out while the test ran.
    assert!(p.server_said.iter().filter(|m| **m == "keepalive").count() >= 1);
    let offset = p.c.server().and_then(|f| f.clock).expect("clock offset");
    assert!((offset.offset_s - 0.5).abs() < 1e-6, "{offset:?}");
}

#[test]
fn a_udp_test_with_keys_runs_between_the_machines() {
    let spec = TestSpec::Udp(UdpSpec {
        flows: 3,
        ..UdpSpec::default()
    });
    let mut p = Pair::new(spec, Some(KEY), Some(KEY));
    p.run(Duration::from_secs(60));
    assert!(matches!(p.client_end, Some(Ok(_))), "{:?}", p.client_end);
    assert_eq!(p.server_end, Some(server::Ending::Finished));
    assert!(p.server_said.contains(&"auth_ok"));
}

#[test]
fn a_latency_test_runs_between_the_machines_and_the_client_stops_the_echo() {
    for transport in [LatencyTransport::Tcp, LatencyTransport::Udp] {
        let spec = TestSpec::Latency(LatencySpec {
            transport,
            ..LatencySpec::default()
        });
        let mut p = Pair::new(spec, None, None);
        p.run(Duration::from_secs(60));
        assert!(matches!(p.client_end, Some(Ok(_))), "{:?}", p.client_end);
        assert!(
            p.echo_stopped,
            "{transport:?}: the echo was never told to stop"
        );
        assert_eq!(p.server_end, Some(server::Ending::Finished));
    }
}

#[test]
fn a_connection_rate_test_runs_between_the_machines_reports_crossing() {
    let mut p = Pair::new(TestSpec::Connect(ConnectSpec::default()), None, None);
    p.run(Duration::from_secs(60));
    let Some(Ok(ended)) = &p.client_end else {
        panic!("client: {:?}", p.client_end)
    };
    assert_eq!(ended.remote.end, End::Server);
    assert!(p.listener_stopped, "the listener ran on");
    assert_eq!(p.server_end, Some(server::Ending::Finished));
}

#[test]
fn a_wrong_key_fails_at_both_ends() {
    let mut p = Pair::new(tcp(), Some("the client's key, long enough too"), Some(KEY));
    p.run(Duration::from_secs(60));
    assert!(
        matches!(&p.client_end, Some(Err(SessionError::Auth(_)))),
        "{:?}",
        p.client_end
    );
    assert!(matches!(p.server_end, Some(server::Ending::AuthFailed(_))));
}

#[test]
fn a_refusal_reaches_the_client_word_for_word() {
    let mut p = Pair::new(tcp(), None, None);
    p.behaviour = Server::Refuses;
    p.run(Duration::from_secs(60));
    assert_eq!(
        p.client_end.as_ref().and_then(|e| e.as_ref().err()),
        Some(&SessionError::Refused("the server allows 1 flow".into()))
    );
}

#[test]
fn a_server_that_hangs_mid_test_is_called_gone_and_the_server_notices_the_silence() {
    let mut p = Pair::new(tcp(), None, None);
    p.behaviour = Server::Hangs;
    p.side_time = Duration::from_secs(30);
    p.run(Duration::from_secs(600));
    assert!(
        matches!(&p.client_end, Some(Err(SessionError::Gone { .. }))),
        "{:?}",
        p.client_end
    );
    assert!(
        matches!(&p.server_end, Some(server::Ending::Aborted { why, .. }) if why.contains("sent nothing")),
        "{:?}",
        p.server_end
    );
}

#[test]
fn a_test_with_latency_probes_runs_between_the_machines() {
    for spec in [
        TestSpec::Tcp(TcpSpec {
            flows: 2,
            latency_probe: Some(hakaru_model::LatencyProbe::default()),
            ..TcpSpec::default()
        }),
        TestSpec::Udp(UdpSpec {
            latency_probe: Some(hakaru_model::LatencyProbe {
                transport: LatencyTransport::Tcp,
                ..hakaru_model::LatencyProbe::default()
            }),
            ..UdpSpec::default()
        }),
    ] {
        let mut p = Pair::new(spec.clone(), None, None);
        p.run(Duration::from_secs(60));
        assert!(matches!(p.client_end, Some(Ok(_))), "{:?}", p.client_end);
        assert_eq!(p.server_end, Some(server::Ending::Finished));
        // The echo started before the test did.
        let at = |m: &str| p.server_said.iter().position(|x| *x == m);
        assert!(at("(probe echo)").is_some(), "{:?}", p.server_said);
        assert!(at("(probe echo)") < at("start"), "{:?}", p.server_said);
    }
}
