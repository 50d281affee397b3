//! What an agent says about its peers: the JSON of `GET /mesh` (read by `hakaru mesh
//! report`) and the `hakaru_mesh_` metric families of `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use hakaru_model::metrics::{MetricFamily, MetricKind};
use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::prober::PeerFigures;
use crate::stats::BUCKETS_S;

/// One peer as an agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    /// The peer's name in the list.
    pub dst: String,
    /// The address probed (`IP:PORT`): the report joins views on it.
    #[serde(default)]
    pub addr: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Probes sent since the agent started.
    pub sent: u64,
    /// Probes lost since the agent started.
    pub lost: u64,
    /// Replies after their probe was counted lost.
    pub late: u64,
    /// Replies in the window.
    pub window_replied: u64,
    /// Losses in the window.
    pub window_lost: u64,
    /// Lost over probed in the window (null before any probe ended).
    pub loss: Option<f64>,
    /// Median RTT in the window, µs.
    pub rtt_p50_us: Option<f64>,
    /// 99th percentile RTT in the window, µs.
    pub rtt_p99_us: Option<f64>,
    /// TCP connect times to its mesh port (`--mesh-connect-interval`; absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<ConnectView>,
    /// Throughput slices to its test port (`--mesh-slice-every`; absent without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceView>,
}

/// One peer's throughput slices as an agent sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SliceView {
    /// Slices run since the agent started.
    pub runs: u64,
    /// Of those, failed.
    pub failed: u64,
    /// The last successful slice's received rate, bit/s (null before one).
    pub bps: Option<f64>,
    /// Seconds since the last slice ended (null before one).
    pub age_s: Option<f64>,
    /// Why the last slice failed, if it did.
    pub error: Option<String>,
}

/// One peer's TCP connects as an agent sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectView {
    /// Connects started since the agent started.
    pub sent: u64,
    /// Connects not established within --mesh-timeout (refused, unreachable, silent).
    pub lost: u64,
    /// Lost over tried in the window (null before any connect ended).
    pub loss: Option<f64>,
    /// Median connect time in the window, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile connect time in the window, µs.
    pub p99_us: Option<f64>,
}

impl ConnectView {
    fn of(f: &PeerFigures) -> ConnectView {
        ConnectView {
            sent: f.totals.sent,
            lost: f.totals.lost,
            loss: f.window.loss(),
            p50_us: f.window.p50_us,
            p99_us: f.window.p99_us,
        }
    }
}

/// An agent's whole view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentView {
    /// The agent's instance id (hex), new at every start.
    pub agent: String,
    /// Seconds between two probes of one peer now (the interval, stretched by the cap).
    pub cycle_s: f64,
    /// Seconds the window covers.
    pub window_s: f64,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// Why the last reading of the peer list failed, if it did (the previous list is used).
    pub peers_error: Option<String>,
    /// Its peers, in list order.
    pub peers: Vec<PeerView>,
}

fn peer_view(f: &PeerFigures) -> PeerView {
    PeerView {
        dst: f.peer.name.clone(),
        addr: f.peer.addr.to_string(),
        labels: f.peer.labels.iter().cloned().collect(),
        sent: f.totals.sent,
        lost: f.totals.lost,
        late: f.totals.late,
        window_replied: f.window.replied,
        window_lost: f.window.lost,
        loss: f.window.loss(),
        rtt_p50_us: f.window.p50_us,
        rtt_p99_us: f.window.p99_us,
        connect: None,
        slice: None,
    }
}

/// Labels as `MetricFamily::with` takes them.
fn str_pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// What a prober's series say (the UDP probes, the TCP connects): tried, lost (counters) and
/// the time histogram, each `(name, help)`.
fn prober_families(
    series: &[(Vec<(String, String)>, crate::stats::Totals)],
    names: [(&str, &str); 3],
) -> [MetricFamily; 3] {
    let [(n_sent, h_sent), (n_lost, h_lost), (n_time, h_time)] = names;
    let mut sent = MetricFamily::new(n_sent, h_sent, MetricKind::Counter);
    let mut lost = MetricFamily::new(n_lost, h_lost, MetricKind::Counter);
    let mut time = MetricFamily::new(n_time, h_time, MetricKind::Histogram);
    for (labels, t) in series {
        let l = str_pairs(labels);
        sent = sent.with(&l, t.sent as f64);
        lost = lost.with(&l, t.lost as f64);
        time = time.with_histogram(labels, &BUCKETS_S, &t.buckets, t.rtt_sum_s, t.replied);
    }
    [sent, lost, time]
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Agent {
    /// The view now.
    pub fn view(&self) -> AgentView {
        let a = &self.inner;
        let now = a.now();
        let connects: BTreeMap<std::net::SocketAddr, ConnectView> = match &a.connect {
            Some(c) => lock(&c.prober)
                .figures(now)
                .iter()
                .map(|f| (f.peer.addr, ConnectView::of(f)))
                .collect(),
            None => BTreeMap::new(),
        };
        let p = lock(&a.prober);
        let figures = p.figures(now);
        let mut peers: Vec<PeerView> = figures.iter().map(peer_view).collect();
        if a.connect.is_some() {
            for (v, f) in peers.iter_mut().zip(&figures) {
                // A peer the connect prober has not taken up yet shows none tried.
                v.connect = Some(connects.get(&f.peer.addr).cloned().unwrap_or(ConnectView {
                    sent: 0,
                    lost: 0,
                    loss: None,
                    p50_us: None,
                    p99_us: None,
                }));
            }
        }
        if let Some(s) = &a.slices {
            let results = lock(&s.results);
            for (v, f) in peers.iter_mut().zip(&figures) {
                let r = results.get(&f.peer.addr).cloned().unwrap_or_default();
                v.slice = Some(SliceView {
                    runs: r.runs,
                    failed: r.failed,
                    bps: r.bps,
                    age_s: (r.runs > 0).then(|| now.saturating_sub(r.at) as f64 / 1e9),
                    error: r.error,
                });
            }
        }
        AgentView {
            agent: format!("{:016x}", p.id()),
            cycle_s: p.cycle(p.peer_count()).as_secs_f64(),
            window_s: a.cfg.probe.window.as_secs_f64(),
            uptime_s: a.epoch.elapsed().as_secs_f64(),
            peers_error: lock(&a.peers_error).clone(),
            peers,
        }
    }

    /// The view as `GET /mesh` serves it (compact JSON: 10,000 peers make about 1.5 MB).
    pub fn view_json(&self) -> String {
        serde_json::to_string(&self.view()).unwrap_or_default() + "\n"
    }

    /// The `hakaru_mesh_` families: per peer up to `metrics_peers` peers, per group past it.
    pub fn families(&self) -> Vec<MetricFamily> {
        let a = &self.inner;
        let figures = {
            let p = lock(&a.prober);
            p.figures(a.now())
        };
        let series = lock(&a.groups).series(&figures, a.cfg.metrics_peers, &a.cfg.group_by);
        let [sent, lost, rtt] = prober_families(
            &series,
            [
                (
                    "hakaru_mesh_probes_sent_total",
                    "Mesh probes sent, by peer (or peer group).",
                ),
                (
                    "hakaru_mesh_probes_lost_total",
                    "Mesh probes with no reply within --mesh-timeout, by peer (or peer group).",
                ),
                (
                    "hakaru_mesh_rtt_seconds",
                    "Round-trip time of mesh probes, by peer (or peer group).",
                ),
            ],
        );
        let mut late = MetricFamily::new(
            "hakaru_mesh_replies_late_total",
            "Mesh replies that came after their probe was counted lost.",
            MetricKind::Counter,
        );
        for (labels, t) in &series {
            late = late.with(&str_pairs(labels), t.late as f64);
        }
        let mut connect = self.connect_families();
        connect.extend(self.slice_families(&figures));
        let r = &a.responder;
        let mut refused = MetricFamily::new(
            "hakaru_mesh_probes_refused_total",
            "Mesh datagrams dropped, by reason (acl: --allow/--deny; stranger: a probe from no listed peer; tag: no or a wrong tag for the key; rate: over --mesh-max-reply-rate; malformed).",
            MetricKind::Counter,
        );
        for (reason, c) in [
            ("acl", &r.acl),
            ("stranger", &r.stranger),
            ("tag", &r.tag),
            ("rate", &r.rate),
            ("malformed", &r.malformed),
        ] {
            refused = refused.with(&[("reason", reason)], c.load(Ordering::Relaxed) as f64);
        }
        let mut out = vec![
            MetricFamily::new(
                "hakaru_mesh_peers",
                "Peers this agent probes now.",
                MetricKind::Gauge,
            )
            .with(&[], figures.len() as f64),
            MetricFamily::new(
                "hakaru_mesh_peer_list_errors_total",
                "Readings of the peer list (the file, or the DNS name) that failed; the last list read is probed meanwhile.",
                MetricKind::Counter,
            )
            .with(&[], a.list_errors.load(Ordering::Relaxed) as f64),
            sent,
            lost,
            late,
            rtt,
            MetricFamily::new(
                "hakaru_mesh_probes_answered_total",
                "Mesh probes this agent answered.",
                MetricKind::Counter,
            )
            .with(&[], r.answered.load(Ordering::Relaxed) as f64),
            refused,
        ];
        out.extend(connect);
        out
    }

    /// The connect probes' families (`--mesh-connect-interval`), none without them.
    fn connect_families(&self) -> Vec<MetricFamily> {
        let a = &self.inner;
        let Some(c) = &a.connect else {
            return Vec::new();
        };
        let figures = lock(&c.prober).figures(a.now());
        let series = lock(&c.groups).series(&figures, a.cfg.metrics_peers, &a.cfg.group_by);
        prober_families(
            &series,
            [
                (
                    "hakaru_mesh_connects_total",
                    "TCP connects to mesh peers started (--mesh-connect-interval), by peer (or peer group).",
                ),
                (
                    "hakaru_mesh_connects_lost_total",
                    "TCP connects to mesh peers not established within --mesh-timeout (refused, unreachable, silent).",
                ),
                (
                    "hakaru_mesh_connect_seconds",
                    "Time to establish a TCP connection to a mesh peer's port, by peer (or peer group).",
                ),
            ],
        )
        .into()
    }

    /// The slices' families (`--mesh-slice-every`), none without them: per peer up to
    /// `metrics_peers` peers, past it only the agent's totals (a rate has no group sum).
    fn slice_families(&self, figures: &[PeerFigures]) -> Vec<MetricFamily> {
        let a = &self.inner;
        let Some(s) = &a.slices else {
            return Vec::new();
        };
        let results = lock(&s.results);
        let mut runs = MetricFamily::new(
            "hakaru_mesh_slices_total",
            "Throughput slices run to mesh peers (--mesh-slice-every), by peer (or in all past --mesh-metrics-peers).",
            MetricKind::Counter,
        );
        let mut failed = MetricFamily::new(
            "hakaru_mesh_slices_failed_total",
            "Throughput slices to mesh peers that failed.",
            MetricKind::Counter,
        );
        let mut bps = MetricFamily::new(
            "hakaru_mesh_slice_bits_per_second",
            "The last throughput slice's received rate, by peer.",
            MetricKind::Gauge,
        );
        if figures.len() <= a.cfg.metrics_peers {
            for f in figures {
                let r = results.get(&f.peer.addr).cloned().unwrap_or_default();
                let labels = crate::groups::Groups::peer_labels(&f.peer);
                let l = str_pairs(&labels);
                runs = runs.with(&l, r.runs as f64);
                failed = failed.with(&l, r.failed as f64);
                if let Some(b) = r.bps {
                    bps = bps.with(&l, b);
                }
            }
            vec![runs, failed, bps]
        } else {
            let n = s.runs.load(Ordering::Relaxed);
            let f = s.failed.load(Ordering::Relaxed);
            vec![runs.with(&[], n as f64), failed.with(&[], f as f64)]
        }
    }
}
