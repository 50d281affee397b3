//! The client machine from the hello to `start`: welcome, key proofs, the test request, the
//! data flows, the held start's gate.

use std::time::{Duration, Instant};

use hakaru_model::{ClockOffset, LatencyTransport, TestSpec};
use hakaru_proto::{Message, ServerInfo};

use super::{
    running, Fault, Input, Output, ServerFacts, Session, SessionError, State, AUTH_TIMEOUT,
    HANDSHAKE_TIMEOUT,
};

/// Waiting for `auth_ok`: what the proof needs and what the welcome said.
#[derive(Debug)]
pub(super) struct AuthWait {
    pub(super) deadline: Instant,
    server_nonce: String,
    /// What the welcome said, for a server that says nothing more in its `auth_ok`.
    welcome: ServerInfo,
    /// The wall clock when the hello went out and when the welcome came.
    hello_unix: f64,
    welcome_unix: f64,
}

impl Session {
    pub(super) fn on_welcome(&mut self, input: Input, now: Instant) {
        let not_hakaru = |m: &Session, detail: String| SessionError::NotHakaru {
            addr: m.cfg.peer.clone(),
            detail,
        };
        let (info, auth) = match input {
            Input::Message(Message::Welcome {
                software,
                unix_time,
                host,
                auth,
                os,
                ..
            }) => (
                ServerInfo {
                    software,
                    unix_time,
                    host,
                    os,
                },
                auth,
            ),
            Input::Message(Message::Error { message }) => {
                return self.end(SessionError::Server(message))
            }
            Input::Message(other) => {
                let e = not_hakaru(self, format!("it answered the hello with {}", other.name()));
                return self.end(e);
            }
            Input::Failed(Fault::Proto(e)) => return self.end(not_hakaru(self, e.to_string())),
            Input::Failed(Fault::Timeout(_)) => {
                let e = not_hakaru(
                    self,
                    format!(
                        "it sent no greeting within {} s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                );
                return self.end(e);
            }
            Input::Failed(Fault::Closed) => {
                let e = not_hakaru(self, "it closed the connection without a greeting".into());
                return self.end(e);
            }
            Input::Failed(f) => return self.end(self.control(f)),
            other => return self.out_of_turn(&other),
        };
        let hello_unix = self.epoch.1;
        let back = self.unix_at(now);
        let addr = &self.cfg.peer;
        match (&self.cfg.psk, auth) {
            (None, None) => self.request(&info, hello_unix, back, now),
            (None, Some(_)) => self.end(SessionError::Auth(format!(
                "{addr} requires a pre-shared key: give it with --psk-file FILE or HAKARU_PSK"
            ))),
            (Some(_), None) => self.end(SessionError::Auth(format!(
                "{addr} does not ask for a key, so it cannot prove it holds yours; not running against it (drop --psk-file/HAKARU_PSK for a server without one)"
            ))),
            (Some(k), Some(sn)) => {
                let proof = k.client_proof(&sn, &self.cfg.nonce);
                self.send(Message::Auth { proof });
                self.state = State::Auth(Box::new(AuthWait {
                    deadline: now + AUTH_TIMEOUT,
                    server_nonce: sn,
                    welcome: info,
                    hello_unix,
                    welcome_unix: back,
                }));
            }
        }
    }

    pub(super) fn on_auth(&mut self, input: Input, now: Instant) {
        let State::Auth(a) = std::mem::replace(&mut self.state, State::Flows) else {
            return;
        };
        let addr = self.cfg.peer.clone();
        let verified = |proof: &str| {
            self.cfg
                .psk
                .as_ref()
                .is_some_and(|k| k.verify_server(&self.cfg.nonce, &a.server_nonce, proof))
        };
        let e = match input {
            Input::Message(Message::AuthOk { proof, server }) if verified(&proof) => {
                // A server with a key tells who it is only after the proofs (older ones said
                // it in the welcome): its time then stands against the proof's round trip.
                return match server {
                    Some(info) => {
                        let asked = a.welcome_unix;
                        self.request(&info, asked, self.unix_at(now), now)
                    }
                    None => self.request(&a.welcome, a.hello_unix, a.welcome_unix, now),
                };
            }
            Input::Message(Message::AuthOk { .. }) => SessionError::Auth(format!(
                "{addr} accepted our proof but could not prove it holds the same key"
            )),
            Input::Message(Message::Error { .. }) => SessionError::Auth(format!(
                "{addr} does not accept this key (--psk-file or HAKARU_PSK differs from the server's)"
            )),
            Input::Message(other) => SessionError::Auth(format!(
                "{addr} answered the key proof with {}",
                other.name()
            )),
            Input::Failed(f) => self.control(f),
            other => {
                self.state = State::Auth(a);
                return self.out_of_turn(&other);
            }
        };
        self.state = State::Auth(a);
        self.end(e);
    }

    /// The handshake is done: what the server said, with the wall clock when this end asked
    /// and when the answer came. Sends the test request.
    fn request(&mut self, info: &ServerInfo, asked: f64, back: f64, now: Instant) {
        let facts = ServerFacts {
            clock: info.unix_time.map(|t| ClockOffset {
                offset_s: t - (asked + back) / 2.0,
                round_trip_s: back - asked,
            }),
            same_host: info.host.is_some() && info.host == self.cfg.host,
            os: info.os.clone(),
        };
        if let (TestSpec::Tcp(tcp), Some(note)) = (&mut self.spec, &self.cfg.cubic_on_loopback) {
            let linux = facts.os.as_deref().is_none_or(|os| os == "linux");
            if tcp.congestion.is_none() && linux {
                tcp.congestion = Some("cubic".into());
                self.notes.push(note.clone());
            }
        }
        self.server = Some(facts.clone());
        self.out.push_back(Output::Server(facts));
        self.send(Message::TestRequest {
            test: Box::new(self.spec.clone()),
            held_start: self.cfg.held_start,
        });
        self.state = State::Accepting {
            deadline: now + HANDSHAKE_TIMEOUT,
        };
    }

    pub(super) fn on_answer(&mut self, input: Input) {
        match input {
            Input::Message(Message::Accepted {
                token, probe_flow, ..
            }) => {
                let asked = self.spec.latency_probe().map(|_| self.spec.probe_flow());
                if asked.is_some() && probe_flow != asked {
                    return self.no_probes();
                }
                self.state = State::Flows;
                self.out.push_back(Output::Accepted { token });
            }
            Input::Message(Message::Refused { reason }) => self.end(SessionError::Refused(reason)),
            Input::Message(Message::Error { message }) => self.end(SessionError::Server(message)),
            Input::Message(other) => self.end(SessionError::Server(format!(
                "unexpected {} message instead of an answer to the test request",
                other.name()
            ))),
            Input::Failed(f) => self.end(self.control(f)),
            other => self.out_of_turn(&other),
        }
    }

    /// Opening the flows, or at the gate: the driver's answers, or a message from the server,
    /// which can only be an error (the server says nothing before `start`).
    pub(super) fn on_setup(&mut self, input: Input, now: Instant) {
        match (input, &self.state) {
            (Input::FlowsOpen, State::Flows) if self.spec.latency_probe().is_some() => {
                self.baseline(now)
            }
            (Input::FlowsOpen, State::Flows) if self.cfg.held_start => {
                self.state = State::Gate;
                self.out.push_back(Output::WaitGate);
            }
            (Input::FlowsOpen, State::Flows) => {
                // UDP flows always end their set-up with `flows_ready`.
                if udp_flows(&self.spec) {
                    self.send(Message::FlowsReady);
                }
                self.await_start(now);
                if let Some(m) = self.early_start.take() {
                    self.on_start(Input::Message(m), now);
                }
            }
            (Input::GateOpen { at_unix }, State::Gate) => {
                let at_unix = at_unix.filter(|t| t.is_finite() && *t > 0.0);
                if let (Some(at_unix), true) = (at_unix, super::can_schedule(&self.spec)) {
                    self.start_at = Some(at_unix);
                    self.send(Message::StartAt { at_unix });
                }
                self.send(Message::FlowsReady);
                self.await_start(now);
            }
            (Input::GateFailed(why), State::Gate) => self.end(SessionError::CalledOff(why)),
            // All TCP connections arrived at the server before the driver said they were open:
            // a driver that reads meanwhile may see `start` first.
            (Input::Message(m @ (Message::Start | Message::ConnectPort { .. })), State::Flows)
                if !self.cfg.held_start && !udp_flows(&self.spec) =>
            {
                self.early_start = Some(m);
            }
            (Input::Message(Message::Start), _) => self.end(SessionError::Server(
                "unexpected start message before this end's flows were ready".into(),
            )),
            (input, _) => self.on_start(input, now),
        }
    }

    /// The probes run alone for their idle baseline before the load; with a held start,
    /// before the gate, so that in a plan every baseline is over before any load starts.
    fn baseline(&mut self, now: Instant) {
        let b = self
            .spec
            .latency_probe()
            .map_or(Duration::ZERO, |p| p.baseline.0);
        self.out.push_back(Output::StartProbes);
        self.state = State::Baseline { until: now + b };
    }

    /// The baseline is over: the server may start the load (once the gate opens, with a held
    /// start).
    pub(super) fn baseline_done(&mut self, now: Instant) {
        self.out.push_back(Output::BaselineDone);
        if self.cfg.held_start {
            self.state = State::Gate;
            self.out.push_back(Output::WaitGate);
        } else {
            self.send(Message::FlowsReady);
            self.await_start(now);
        }
    }

    /// The server accepted a test with probes without saying it runs them: it predates them.
    /// It hears why, and the session ends before any flow opens.
    fn no_probes(&mut self) {
        let why = "the server does not run latency probes (--latency-probe): it is a hakaru \
                   older than this client; update the server, or run without --latency-probe";
        self.send(Message::Error {
            message: format!("client gave up: {why}"),
        });
        self.state = State::Ended;
        self.out
            .push_back(Output::End(Err(SessionError::Refused(why.into()))));
    }

    fn await_start(&mut self, now: Instant) {
        self.state = State::Starting {
            deadline: now + HANDSHAKE_TIMEOUT,
        };
    }

    pub(super) fn on_start(&mut self, input: Input, now: Instant) {
        let starting = matches!(self.state, State::Starting { .. });
        let expected = if connect(&self.spec) {
            "the connect port"
        } else {
            "start"
        };
        match input {
            Input::Message(Message::Start) if starting && !connect(&self.spec) => {
                self.out.push_back(Output::StartLocal);
                self.started(now);
            }
            Input::Message(Message::ConnectPort {
                port,
                server_closes,
            }) if starting && connect(&self.spec) => {
                self.out.push_back(Output::StartConnecting {
                    port,
                    server_closes,
                });
                self.started(now);
            }
            Input::Message(Message::Error { message }) => self.end(SessionError::Server(message)),
            Input::Message(other) => self.end(SessionError::Server(format!(
                "unexpected {} message instead of {expected}",
                other.name()
            ))),
            Input::Failed(f) => self.end(self.control(f)),
            other => self.out_of_turn(&other),
        }
    }

    /// The test starts, and runs in the machine to its end.
    fn started(&mut self, now: Instant) {
        self.state = if connect(&self.spec) {
            State::Connecting(Box::new(super::connect::Run::new(now)))
        } else {
            State::Running(Box::new(running::Test::new(&self.spec, now)))
        };
        if self.stop_early {
            self.stop();
        }
    }

    /// An input from the driver that has no place in this state: a driver bug, ended as a
    /// flow error that names both (never a panic).
    pub(super) fn out_of_turn(&mut self, input: &Input) {
        let what = match input {
            Input::Message(m) => m.name(),
            Input::Failed(_) => "failure",
            Input::SendFailed { .. } => "send failure",
            Input::FlowsOpen => "flows open",
            Input::GateOpen { .. } => "gate open",
            Input::GateFailed(_) => "gate failure",
            Input::LocalSample(_) => "local sample",
            Input::LocalInterval(_) => "local interval",
            Input::LocalSendDone(_) => "local send done",
            Input::LocalDone { .. } => "local done",
            Input::LocalReport(_) => "local report",
            Input::Stop => "stop",
        };
        let e = SessionError::Flow(format!(
            "internal error: {what} while {} (client session)",
            self.state.name()
        ));
        self.end(e);
    }
}

/// The test's flows are UDP: their set-up always ends with `flows_ready`.
fn udp_flows(spec: &TestSpec) -> bool {
    match spec {
        TestSpec::Udp(_) => true,
        TestSpec::Latency(l) => l.transport == LatencyTransport::Udp,
        _ => false,
    }
}

/// A connection-rate test: no data flows, and `connect_port` instead of `start`.
fn connect(spec: &TestSpec) -> bool {
    matches!(spec, TestSpec::Connect(_))
}
