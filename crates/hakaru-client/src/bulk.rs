//! The client side of a bulk TCP or UDP test past `accepted`: the data flows, the held
//! start's gate, this end's side, and the control connection read by a thread of its own,
//! all as inputs to the session machine, whose outputs this module carries out.

use hakaru_session::Machine as _;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::control::{ControlConn, ControlError, Received, Transport};
use hakaru_engine::drive::{drive, Carrier, Wait};
use hakaru_engine::tcp::{SideConfig, SideRun};
use hakaru_engine::udp::{UdpConfig, UdpRun};
use hakaru_engine::{Observer, Running};
use hakaru_model::{End, IntervalSample, ServerPorts, TestSpec};
use hakaru_proto::Message;
use hakaru_session::client::{Ended, Input, Output, Session};

use crate::drive::{client_error, fault, send, unexpected_output, Control};
use crate::{open_tcp_flows, udp, ClientError, ClientOptions};

/// What the side and the control reader tell the driver's loop.
enum Event {
    Remote(Message),
    RemoteFailed(ControlError),
    Local(IntervalSample),
    LocalDone,
    /// UDP: this end's senders are done, with their datagram counts.
    LocalSendDone(Vec<(u32, u64)>),
}

/// What a bulk test needs from the handshake.
pub(crate) struct Setup<'a> {
    pub ctl: &'a mut Control,
    pub opts: &'a ClientOptions,
    pub spec: &'a TestSpec,
    pub server_addr: SocketAddr,
    pub token: &'a str,
    pub iface: Option<String>,
    pub same_host: bool,
}

/// How the test ended, with the notes of the set-up and the wall clock at the start.
pub(crate) struct BulkOut {
    pub ended: Box<Ended>,
    /// What the latency probes measured (`--latency-probe`).
    pub probe: Option<hakaru_model::ProbeResult>,
    pub notes: Vec<String>,
    pub started_unix: f64,
}

/// Opens the flows, starts this end when the server says so and runs the test to its end.
pub(crate) fn run(
    mut s: Setup<'_>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
) -> Result<BulkOut, ClientError> {
    // The loop keeps a sender, so the channel never reports itself closed.
    let (tx, rx) = mpsc::channel::<Event>();
    let (mut notes, run, mut probe) = start(&mut s, &tx)?;
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let reader_stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(s.ctl, &tx, &reader_stop, s.server_addr)?;
    let mut run = Some(run);
    let mut probed = None;
    let probes = (&mut probe, &mut probed);
    let outcome = event_loop(s.ctl, &mut run, &rx, observer, stop, probes);
    reader_stop.store(true, Ordering::Release);
    let _ = reader.join();
    drop(run);
    let ended = outcome?;
    // Stops the pinger if the test ended before this end's report (it is stopped already
    // when the report was collected).
    drop(probe);
    let probe = probed;
    notes.splice(0..0, s.ctl.m.notes().iter().cloned());
    Ok(BulkOut {
        ended,
        probe,
        notes,
        started_unix,
    })
}

/// Opens the data flows, passes the gate if there is one, and starts this end's side on the
/// server's `start`. Returns the set-up's notes and the running side.
fn start(
    s: &mut Setup<'_>,
    tx: &mpsc::Sender<Event>,
) -> Result<(Vec<String>, Running, Option<crate::probe::Probe>), ClientError> {
    let mut notes = Vec::new();
    let mut cfg = SideConfig::for_spec(
        End::Client,
        s.spec,
        s.opts.affinity.clone(),
        s.iface.clone(),
    );
    enum Flows {
        Tcp(Vec<hakaru_engine::tcp::FlowSocket>),
        Udp(Vec<hakaru_engine::udp::UdpFlowSocket>, UdpConfig),
    }
    let flows = match s.spec {
        TestSpec::Tcp(tcp) => Flows::Tcp(open_tcp_flows(s.opts, tcp, s.server_addr, s.token)?),
        TestSpec::Udp(u) => {
            let (flows, moved) = udp::open_flows(s.opts, u, s.server_addr, s.token)?;
            if moved {
                notes.push(format!(
                    "each flow has a UDP port of its own on the server ({})",
                    if u.server_ports == ServerPorts::PerFlow {
                        "--port-per-flow"
                    } else {
                        "the server runs on Windows, which needs it"
                    }
                ));
            }
            cfg.shares_host = s.same_host;
            Flows::Udp(flows, UdpConfig::from_spec(u, hakaru_model::FlowDir::Up))
        }
        _ => {
            return Err(ClientError::Flow(
                "internal error: not a bulk TCP or UDP test".into(),
            ))
        }
    };
    let mut probe = crate::probe::Probe::open(s.opts, s.spec, s.server_addr, s.token)?;
    // Counters first (the side's configuration above): nothing the server sends after
    // `start` escapes them.
    s.ctl.start_probed(s.opts.gate.as_ref(), probe.as_mut())?;
    // A scheduled start: the server's side waits for the same instant.
    cfg.start_at = s.ctl.m.start_at();
    probe.iter().for_each(crate::probe::Probe::load_starts);
    let (t1, t2, t3) = (tx.clone(), tx.clone(), tx.clone());
    let tap = probe.as_ref().map(crate::probe::Probe::tap);
    let on_interval = Box::new(move |mut s: IntervalSample| {
        if let Some(t) = &tap {
            t.fill(&mut s);
        }
        let _ = t1.send(Event::Local(s));
    });
    let on_done = Box::new(move || {
        let _ = t2.send(Event::LocalDone);
    });
    let run = match flows {
        Flows::Tcp(f) => Running::Tcp(SideRun::start(cfg, f, on_interval, on_done)?),
        Flows::Udp(f, ucfg) => Running::Udp(UdpRun::start(
            cfg,
            ucfg,
            f,
            on_interval,
            on_done,
            Box::new(move |sent| {
                let _ = t3.send(Event::LocalSendDone(sent));
            }),
        )?),
    };
    Ok((notes, run, probe))
}

/// A reader thread turns control messages into events so one loop sees everything.
fn spawn_reader(
    ctl: &mut Control,
    tx: &mpsc::Sender<Event>,
    stop: &Arc<AtomicBool>,
    server_addr: SocketAddr,
) -> Result<JoinHandle<()>, ClientError> {
    let ctl_err = |e: std::io::Error| ClientError::Control {
        addr: server_addr.to_string(),
        source: e.into(),
    };
    let stream = ctl.conn.stream().try_clone().map_err(ctl_err)?;
    let stop_r = Arc::clone(stop);
    let tx = tx.clone();
    let dec = ctl.conn.take_decoder();
    std::thread::Builder::new()
        .name("hakaru-control".into())
        .spawn(move || {
            let mut c = ControlConn::with_decoder(stream, dec);
            while !stop_r.load(Ordering::Acquire) {
                match c.poll(Duration::from_millis(200)) {
                    Ok(Some(m)) => {
                        let fin = matches!(m, Message::Finished { .. } | Message::Error { .. });
                        if tx.send(Event::Remote(m)).is_err() || fin {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = tx.send(Event::RemoteFailed(e));
                        return;
                    }
                }
            }
        })
        .map_err(ctl_err)
}

/// Feeds the machine what happens and carries out what it says, to the session's end.
fn event_loop(
    ctl: &mut Control,
    run: &mut Option<Running>,
    rx: &mpsc::Receiver<Event>,
    observer: &mut dyn Observer,
    stop: &AtomicBool,
    (probe, probed): (
        &mut Option<crate::probe::Probe>,
        &mut Option<hakaru_model::ProbeResult>,
    ),
) -> Result<Box<Ended>, ClientError> {
    let mut c = Bulk {
        events: Events {
            rx,
            conn: &mut ctl.conn,
        },
        run,
        observer,
        stop,
        probe,
        probed,
    };
    drive(&mut ctl.m, &mut c)
}

/// A bulk test's events as its driver reads them: one channel for the control reader's
/// messages and this end's samples and ends; sends go out on the control connection.
struct Events<'a> {
    rx: &'a mpsc::Receiver<Event>,
    conn: &'a mut ControlConn,
}

impl Transport for Events<'_> {
    type Item = Event;

    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        Transport::send(self.conn, bytes)
    }

    fn read(&mut self, wait: Duration) -> Received<Event> {
        match self.rx.recv_timeout(wait) {
            Ok(ev) => Received::Got(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => Received::Nothing,
            Err(mpsc::RecvTimeoutError::Disconnected) => Received::Closed,
        }
    }

    fn stream(&self) -> &std::net::TcpStream {
        self.conn.stream()
    }
}

/// A bulk test's carrier.
struct Bulk<'a> {
    events: Events<'a>,
    run: &'a mut Option<Running>,
    observer: &'a mut dyn Observer,
    stop: &'a AtomicBool,
    probe: &'a mut Option<crate::probe::Probe>,
    probed: &'a mut Option<hakaru_model::ProbeResult>,
}

impl<'a> Carrier<Session> for Bulk<'a> {
    type Conn = Events<'a>;
    type End = Result<Box<Ended>, ClientError>;

    fn conn(&mut self) -> &mut Events<'a> {
        &mut self.events
    }

    fn act(&mut self, m: &mut Session, out: Output) -> ControlFlow<Self::End> {
        let run = &mut *self.run;
        match out {
            Output::Send(msg) => send(self.events.conn, m, &msg),
            Output::StopSending => run.iter().for_each(Running::stop_sending),
            Output::AbortLocal => run.iter().for_each(Running::abort),
            Output::PeerSendDone(sent) => run.iter().for_each(|r| r.peer_done(&sent)),
            Output::Interval(rec) => self.observer.on_interval(&rec),
            Output::CollectLocal => {
                collect(m, run, self.events.rx);
                // The load is over: the probes stop before `finished` ends the echo.
                *self.probed = self.probe.as_mut().map(crate::probe::Probe::finish);
            }
            Output::End(end) => return ControlFlow::Break(end.map_err(client_error)),
            other => return ControlFlow::Break(Err(unexpected_output(other))),
        }
        ControlFlow::Continue(())
    }

    fn input(&mut self, got: Received<Event>) -> Option<Input> {
        let Received::Got(ev) = got else {
            // The loop keeps a sender: the channel is never closed under it.
            return None;
        };
        Some(match ev {
            Event::Remote(m) => Input::Message(m),
            Event::RemoteFailed(e) => Input::Failed(fault(e)),
            Event::Local(s) => Input::LocalSample(s),
            Event::LocalSendDone(sent) => Input::LocalSendDone(sent),
            Event::LocalDone => Input::LocalDone {
                error: self.run.as_ref().and_then(Running::first_error),
            },
        })
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(100)
    }

    /// The user's stop.
    fn event(&mut self, m: &mut Session, left: Duration) -> Wait {
        if self.stop.load(Ordering::Acquire) {
            m.handle(Input::Stop, Instant::now());
        }
        Wait::Read(left)
    }

    fn finished(&mut self, _m: &mut Session) -> Self::End {
        Err(ClientError::Flow(
            "internal error: the bulk test ended without saying how".into(),
        ))
    }
}

/// Both ends are done: waits for this end's side, hands over the samples still on the way
/// (the last interval ends as the side does), then its report.
fn collect(m: &mut Session, run: &mut Option<Running>, rx: &mpsc::Receiver<Event>) {
    let Some(local) = run.take().map(Running::wait) else {
        return;
    };
    while let Ok(ev) = rx.try_recv() {
        if let Event::Local(s) = ev {
            m.handle(Input::LocalSample(s), Instant::now());
        }
    }
    m.handle(Input::LocalReport(Box::new(local)), Instant::now());
}
