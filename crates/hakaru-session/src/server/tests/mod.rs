//! The server machine on virtual time: every kind's happy path and the fault paths, with no
//! socket and no sleep (a test's clock is an `Instant` it moves by hand).

use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_model::{End, SideReport, TcpSpec, TestSpec, UdpSpec};
use hakaru_proto::auth::Psk;
use hakaru_proto::{Message, ServerInfo, PROTOCOL_VERSION};

use super::*;

mod faults;
mod happy;
mod probes;
mod sweep;

pub(super) const KEY: &str = "a key that is long enough for the test";
pub(super) const CLIENT_NONCE: &str =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
pub(super) const SERVER_NONCE: &str =
    "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

pub(super) fn info() -> ServerInfo {
    ServerInfo {
        software: "hakaru 9.9.9".into(),
        unix_time: Some(1000.0),
        host: Some("boot-id".into()),
        os: Some("linux".into()),
    }
}

pub(super) fn config(psk: bool) -> Config {
    Config {
        psk: psk.then(|| Psk::from_text(KEY, "test").expect("key")),
        nonce: psk.then(|| SERVER_NONCE.to_string()),
        info: info(),
        max_duration: None,
        udp_port: 5201,
    }
}

pub(super) fn hello() -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        software: "hakaru test".into(),
        nonce: Some(CLIENT_NONCE.into()),
    }
}

pub(super) fn report() -> Box<SideReport> {
    Box::new(SideReport::flows_only(End::Server, vec![]))
}

pub(super) fn tcp(flows: u32) -> TestSpec {
    TestSpec::Tcp(TcpSpec {
        flows,
        ..TcpSpec::default()
    })
}

pub(super) fn udp(flows: u32) -> TestSpec {
    TestSpec::Udp(UdpSpec {
        flows,
        ..UdpSpec::default()
    })
}

/// A session on a virtual clock, with what it said so far.
pub(super) struct T {
    pub(super) s: Session,
    pub(super) now: Instant,
    pub(super) out: Vec<Output>,
}

impl T {
    pub(super) fn new(cfg: Config) -> T {
        let now = Instant::now();
        let mut t = T {
            s: Session::new(cfg, hello(), now),
            now,
            out: vec![],
        };
        t.drain();
        t
    }

    pub(super) fn drain(&mut self) -> &[Output] {
        let start = self.out.len();
        while let Some(o) = self.s.poll_output() {
            self.out.push(o);
        }
        self.out.get(start..).unwrap_or_default()
    }

    pub(super) fn input(&mut self, i: Input) -> Vec<Output> {
        self.s.handle(i, self.now);
        self.drain().iter().map(clone_out).collect()
    }

    pub(super) fn msg(&mut self, m: Message) -> Vec<Output> {
        self.input(Input::Message(m))
    }

    /// Moves the clock by `d`, honouring every deadline on the way, as a driver does.
    pub(super) fn advance(&mut self, d: Duration) -> Vec<Output> {
        let end = self.now + d;
        let mut said = vec![];
        while let Some(t) = self.s.timeout().filter(|&t| t <= end) {
            self.now = t.max(self.now);
            self.s.handle_timeout(self.now);
            said.extend(self.drain().iter().map(clone_out));
        }
        self.now = end;
        said
    }

    pub(super) fn request(&mut self, spec: TestSpec, held: bool) -> Vec<Output> {
        self.msg(Message::TestRequest {
            test: Box::new(spec),
            held_start: held,
        })
    }

    pub(super) fn admit(&mut self) -> Vec<Output> {
        self.input(Input::Admitted {
            test_id: 7,
            token: "tok".into(),
        })
    }

    /// Runs the session up to a started test of `spec` (every path arrived).
    pub(super) fn running(spec: TestSpec) -> T {
        let paths = spec.flow_plan().len() as u32;
        let udp = RemoteSpec::try_from(spec.clone()).is_ok_and(|r| shape(&r) == Shape::Udp);
        let mut t = T::new(config(false));
        t.request(spec, false);
        t.admit();
        for f in 0..paths {
            t.input(Input::PathArrived { flow: f });
        }
        if udp {
            t.msg(Message::FlowsReady);
        }
        assert!(t.out.contains(&Output::StartSide), "{:?}", t.out);
        t
    }

    pub(super) fn ended(&self) -> Option<&Ending> {
        self.out.iter().find_map(|o| match o {
            Output::End(e) => Some(e),
            _ => None,
        })
    }

    pub(super) fn told(&self) -> Option<&str> {
        self.out.iter().find_map(|o| match o {
            Output::Send(Message::Error { message }) => Some(message.as_str()),
            _ => None,
        })
    }
}

/// Outputs compare by value; tests keep copies.
pub(super) fn clone_out(o: &Output) -> Output {
    match o {
        Output::SendRaw(b) => Output::SendRaw(b.clone()),
        Output::Send(m) => Output::Send(m.clone()),
        Output::Admit { spec, held } => Output::Admit {
            spec: spec.clone(),
            held: *held,
        },
        Output::PathsComplete => Output::PathsComplete,
        Output::TakeBaseline => Output::TakeBaseline,
        Output::StartSide => Output::StartSide,
        Output::StartProbe { flow } => Output::StartProbe { flow: *flow },
        Output::OpenConnectListener => Output::OpenConnectListener,
        Output::StopSending => Output::StopSending,
        Output::PeerDone(s) => Output::PeerDone(s.clone()),
        Output::StopSide => Output::StopSide,
        Output::AbortSide => Output::AbortSide,
        Output::End(e) => Output::End(e.clone()),
    }
}

pub(super) fn welcome_of(out: &[Output]) -> Message {
    let Some(Output::SendRaw(bytes)) = out.first() else {
        panic!("no opening: {out:?}")
    };
    let mut dec = hakaru_proto::Decoder::after_magic();
    dec.feed(bytes.get(4..).expect("magic"));
    dec.next_message().expect("frame").expect("message")
}
