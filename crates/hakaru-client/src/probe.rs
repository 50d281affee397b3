//! The client's half of a bulk test's latency probes (`--latency-probe`): the probe flow (UDP
//! with a hello, or a TCP data connection, with the test's token and the flow id after the
//! bulk flows), the open-loop pinger on it, the idle baseline before the load, each interval's
//! round trips put into this end's interval sample as the side's ticker makes it (so they
//! cover the same seconds as the throughput), and the figures at the end.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hakaru_engine::hist::LatencyHistogram;
use hakaru_engine::ping::{Framing, PingConfig, PingFlow, PingSocket, Pinger};
use hakaru_model::{
    IntervalSample, LatencyInterval, LatencyProbe, LatencyTransport, ProbeIncrease, ProbeResult,
    TestSpec, UdpSpec, PROBE_LENGTH,
};
use hakaru_proto::{native::opening, Message};

use crate::{udp, ClientError, ClientOptions};

/// The probes of one test.
pub(crate) struct Probe {
    spec: LatencyProbe,
    flow: Option<PingFlow>,
    live: Arc<Live>,
    affinity: Vec<usize>,
    baseline_from: Option<Instant>,
    idle: Option<(LatencyInterval, f64)>,
}

/// What the side's ticker thread and the driver share.
#[derive(Default)]
struct Live {
    pinger: Mutex<Option<Pinger>>,
    loaded: Mutex<Loaded>,
}

/// The round trips of the load so far (the omitted warm-up left out).
#[derive(Default)]
struct Loaded {
    hist: Option<LatencyHistogram>,
    interval: LatencyInterval,
    /// An interval sample has carried probes (else the end takes them all).
    sampled: bool,
}

impl Loaded {
    fn add(&mut self, i: &LatencyInterval, h: &LatencyHistogram) {
        self.hist.get_or_insert_with(LatencyHistogram::new).merge(h);
        self.interval.requests += i.requests;
        self.interval.replies += i.replies;
        self.interval.lost += i.lost;
    }
}

/// Puts the probes' round trips since the last sample into each of this end's samples.
#[derive(Clone)]
pub(crate) struct Tap(Arc<Live>);

impl Tap {
    /// Called by the side's ticker with each sample, before it leaves for the machine.
    pub(crate) fn fill(&self, s: &mut IntervalSample) {
        let Ok(p) = self.0.pinger.lock() else { return };
        let Some(p) = p.as_ref() else { return };
        let (i, h) = p.take_interval_hist();
        if !s.omitted {
            if let Ok(mut l) = self.0.loaded.lock() {
                l.add(&i, &h);
                l.sampled = true;
            }
        }
        s.probe = Some(Box::new(i));
    }
}

impl Probe {
    /// Opens the probe flow of a test that asked for probes.
    pub(crate) fn open(
        opts: &ClientOptions,
        spec: &TestSpec,
        server: SocketAddr,
        token: &str,
    ) -> Result<Option<Probe>, ClientError> {
        let Some(p) = spec.latency_probe() else {
            return Ok(None);
        };
        let id = spec.probe_flow();
        let socket = match p.transport {
            LatencyTransport::Udp => {
                let u = UdpSpec {
                    length: hakaru_model::Bytes(PROBE_LENGTH),
                    server_ports: spec.udp().map_or_else(Default::default, |u| u.server_ports),
                    tos: spec.udp().and_then(|u| u.tos),
                    ..UdpSpec::default()
                };
                let (mut socks, _) = udp::open_ids(opts, &u, server, token, &[id])?;
                PingSocket::Udp(socks.pop().ok_or_else(|| ClientError::Data {
                    flow: id,
                    reason: "internal error: no probe socket".into(),
                })?)
            }
            LatencyTransport::Tcp => PingSocket::Tcp(open_tcp(opts, server, token, id)?),
        };
        Ok(Some(Probe {
            spec: p.clone(),
            flow: Some(PingFlow { id, socket }),
            live: Arc::new(Live::default()),
            affinity: opts.affinity.clone(),
            baseline_from: None,
            idle: None,
        }))
    }

    /// What the side's ticker calls with each sample.
    pub(crate) fn tap(&self) -> Tap {
        Tap(Arc::clone(&self.live))
    }

    /// Starts the pinger: the idle baseline begins.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        let flow = self
            .flow
            .take()
            .ok_or("internal error: the probes started twice")?;
        let l = self.spec.as_latency();
        let pinger = Pinger::start(
            PingConfig {
                spin: false,
                busy_poll: None,
                ..PingConfig::for_spec(&l, self.affinity.clone(), false, Framing::Hakaru)
            },
            vec![flow],
        )
        .map_err(|e| format!("starting the latency probes: {e}"))?;
        self.baseline_from = Some(pinger.started());
        if let Ok(mut slot) = self.live.pinger.lock() {
            *slot = Some(pinger);
        }
        Ok(())
    }

    /// The idle baseline is over: what the probes measured so far is its figure.
    pub(crate) fn end_baseline(&mut self) {
        let Ok(p) = self.live.pinger.lock() else {
            return;
        };
        if let Some(p) = p.as_ref() {
            let secs = self
                .baseline_from
                .map_or(0.0, |t| t.elapsed().as_secs_f64());
            self.idle = Some((p.take_interval(), secs));
        }
    }

    /// The load starts now: the probes since the baseline (a held start's wait at its gate)
    /// belong to neither figure.
    pub(crate) fn load_starts(&self) {
        if let Ok(p) = self.live.pinger.lock() {
            p.iter().for_each(|p| {
                p.take_interval();
            });
        }
    }

    /// Stops the pinger once the load is over (this end's side has given its last sample)
    /// and makes the figures.
    pub(crate) fn finish(&mut self) -> ProbeResult {
        let pinger = self.live.pinger.lock().ok().and_then(|mut p| p.take());
        let mut loaded = self
            .live
            .loaded
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let mut error = None;
        if let Some(p) = pinger {
            let (i, h) = p.take_interval_hist();
            // Without interval samples (-i 0) the load's round trips are all still here.
            if !loaded.sampled {
                loaded.add(&i, &h);
            }
            p.stop();
            error = p.wait().error;
        }
        let (idle, baseline_seconds) = self.idle.unwrap_or_default();
        loaded.interval.rtt = loaded
            .hist
            .as_ref()
            .map(LatencyHistogram::stats)
            .unwrap_or_default();
        ProbeResult {
            transport: self.spec.transport,
            rate: self.spec.rate,
            length: PROBE_LENGTH,
            baseline_seconds,
            increase: ProbeIncrease::between(&idle.rtt, &loaded.interval.rtt),
            idle,
            loaded: loaded.interval,
            error,
        }
    }
}

impl Drop for Probe {
    /// A test that ended early stops its pinger too.
    fn drop(&mut self) {
        if let Ok(p) = self.live.pinger.lock() {
            p.iter().for_each(Pinger::stop);
        }
    }
}

/// Opens the probes' TCP data connection (TCP_NODELAY), announced with the token.
fn open_tcp(
    opts: &ClientOptions,
    server: SocketAddr,
    token: &str,
    id: u32,
) -> Result<std::net::TcpStream, ClientError> {
    let fail = |reason: String| ClientError::Data { flow: id, reason };
    let mut s = crate::connect_stream(server, opts.bind, opts.connect_timeout, false, |_| Ok(()))
        .map_err(|e| fail(e.to_string()))?;
    s.set_nodelay(true).map_err(|e| fail(e.to_string()))?;
    s.write_all(&opening(&Message::DataHello {
        token: token.to_string(),
        flow: id,
    }))
    .map_err(|e| fail(e.to_string()))?;
    Ok(s)
}
