//! What `hakaru compare` reads from each kind's results: the [`KindMetrics`] trait, answered by
//! every kind (no default, no wildcard: a new kind that does not say what to compare does not
//! compile; `kinds::of` picks the kind), and the metrics the bulk, latency, connect and http
//! kinds share. A newer kind answers it in its own `NAME_text.rs` (rpm, capacity).

use hakaru_model::{FlowDir, RunResult};

use serde::Serialize;

/// Which way is better for a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Larger is better (rates).
    Higher,
    /// Smaller is better (latency, loss, retransmits).
    Lower,
}

/// How a metric's change is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// Relative to the base value, against `--threshold`.
    Relative,
    /// In the metric's own unit (percentage points of loss), against `--loss-threshold`.
    Absolute,
}

/// A metric before judging: values and interval samples.
pub(crate) struct Raw {
    pub(crate) metric: String,
    pub(crate) unit: &'static str,
    pub(crate) better: Better,
    pub(crate) scale: Scale,
    pub(crate) base: f64,
    pub(crate) new: f64,
    pub(crate) samples: Option<(Vec<f64>, Vec<f64>)>,
}

/// Unit of the retransmit rows.
pub(crate) const RETRANSMITS_UNIT: &str = "retransmits/GB";

/// What a kind compares.
pub(crate) trait KindMetrics {
    /// Pushes the kind's metrics of both results.
    fn metrics(&self, m: &mut Metrics<'_>);
}

macro_rules! metrics_by {
    ($spec:ty, $f:ident) => {
        impl KindMetrics for $spec {
            fn metrics(&self, m: &mut Metrics<'_>) {
                $f(m)
            }
        }
    };
}

// A raw sink or source counts bytes per direction like a bulk test.
metrics_by!(hakaru_model::TcpSpec, bulk_metrics);
metrics_by!(hakaru_model::UdpSpec, bulk_metrics);
metrics_by!(hakaru_model::raw::RawSpec, bulk_metrics);
metrics_by!(hakaru_model::latency::LatencySpec, latency_metrics);
metrics_by!(hakaru_model::ConnectSpec, connect_metrics);
metrics_by!(hakaru_model::http::HttpSpec, http_metrics);

pub(crate) fn interval_series(
    r: &RunResult,
    f: &dyn Fn(&hakaru_model::IntervalRecord) -> Option<f64>,
) -> Vec<f64> {
    r.intervals
        .iter()
        .filter(|rec| {
            !rec.omitted && rec.end - rec.start > 0.5 * r.spec.common().interval.secs_f64()
        })
        .filter_map(f)
        .collect()
}

/// The metrics of a baseline `b` and a new result `n`, as they are added.
pub(crate) struct Metrics<'a> {
    pub(crate) b: &'a RunResult,
    pub(crate) n: &'a RunResult,
    pub(crate) v: Vec<Raw>,
}

impl Metrics<'_> {
    /// Adds a metric if both results have it.
    pub(crate) fn push(
        &mut self,
        metric: String,
        unit: &'static str,
        (better, scale): (Better, Scale),
        vals: Option<(f64, f64)>,
        samples: Option<(Vec<f64>, Vec<f64>)>,
    ) {
        if let Some((base, new)) = vals {
            self.v.push(Raw {
                metric,
                unit,
                better,
                scale,
                base,
                new,
                samples,
            });
        }
    }
}

fn latency_metrics(m: &mut Metrics<'_>) {
    let (b, n) = (m.b, m.n);
    let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
    type Pick = fn(&hakaru_model::LatencyStats) -> f64;
    let picks: [(&str, Pick); 5] = [
        ("RTT p50", |s| s.p50_us),
        ("RTT p90", |s| s.p90_us),
        ("RTT p99", |s| s.p99_us),
        ("RTT p99.9", |s| s.p999_us),
        ("RTT mean", |s| s.mean_us),
    ];
    for (name, f) in picks {
        let samples = (name == "RTT p50").then(|| {
            let s =
                |r: &RunResult| interval_series(r, &|rec| Some(rec.latency.as_ref()?.rtt.p50_us));
            (s(b), s(n))
        });
        m.push(
            name.into(),
            "us",
            (Better::Lower, Scale::Relative),
            both(&|r| Some(f(&r.detail.latency()?.rtt))),
            samples,
        );
    }
    let s = |r: &RunResult| {
        interval_series(r, &|rec| {
            let l = rec.latency.as_ref()?;
            Some(l.replies as f64 / (rec.end - rec.start).max(1e-9))
        })
    };
    m.push(
        "transactions/s".into(),
        "1/s",
        (Better::Higher, Scale::Relative),
        both(&|r| Some(r.detail.latency()?.transactions_per_second)),
        Some((s(b), s(n))),
    );
}

fn http_metrics(m: &mut Metrics<'_>) {
    let (b, n) = (m.b, m.n);
    let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
    // Downloads are counted where they arrive, uploads where they leave: the client.
    let s = |r: &RunResult| {
        interval_series(r, &|rec| {
            let d = rec.sums.first()?;
            Some(d.receiver_bps.or(d.sender_bps)?.0)
        })
    };
    m.push(
        "goodput".into(),
        "bit/s",
        (Better::Higher, Scale::Relative),
        both(&|r| Some(r.detail.http()?.bits_per_second.0)),
        Some((s(b), s(n))),
    );
    m.push(
        "time to first byte p50".into(),
        "ms",
        (Better::Lower, Scale::Relative),
        both(&|r| Some(r.detail.http()?.ttfb_ms.as_ref()?.median_ms)),
        None,
    );
    m.push(
        "client bytes per CPU-second".into(),
        "B/CPU-s",
        (Better::Higher, Scale::Relative),
        both(&|r| r.client.bytes_per_cpu_second),
        None,
    );
}

fn connect_metrics(m: &mut Metrics<'_>) {
    let (b, n) = (m.b, m.n);
    let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
    let s = |r: &RunResult| {
        interval_series(r, &|rec| Some(rec.connect.as_ref()?.connections_per_second))
    };
    m.push(
        "connections/s".into(),
        "1/s",
        (Better::Higher, Scale::Relative),
        both(&|r| Some(r.detail.connect()?.connections_per_second)),
        Some((s(b), s(n))),
    );
    m.push(
        "connect time p50".into(),
        "us",
        (Better::Lower, Scale::Relative),
        both(&|r| Some(r.detail.connect()?.connect_time.p50_us)),
        None,
    );
    m.push(
        "connect time p99".into(),
        "us",
        (Better::Lower, Scale::Relative),
        both(&|r| Some(r.detail.connect()?.connect_time.p99_us)),
        None,
    );
}

fn bulk_metrics(m: &mut Metrics<'_>) {
    let (b, n) = (m.b, m.n);
    let both = |f: &dyn Fn(&RunResult) -> Option<f64>| Some((f(b)?, f(n)?));
    for dir in [FlowDir::Up, FlowDir::Down] {
        let tot = |r: &RunResult| r.totals.iter().find(|t| t.dir == dir).cloned();
        let (Some(_), Some(_)) = (tot(b), tot(n)) else {
            continue;
        };
        let d = match dir {
            FlowDir::Up => "client -> server",
            FlowDir::Down => "server -> client",
        };
        let rate_s = |r: &RunResult| {
            interval_series(r, &|rec| {
                Some(rec.sums.iter().find(|s| s.dir == dir)?.receiver_bps?.0)
            })
        };
        m.push(
            format!("{d} received"),
            "bit/s",
            (Better::Higher, Scale::Relative),
            both(&|r| Some(tot(r)?.receiver.bits_per_second.0)),
            Some((rate_s(b), rate_s(n))),
        );
        if tot(b).and_then(|t| t.udp).is_some() {
            let pps_s = |r: &RunResult| {
                interval_series(r, &|rec| {
                    let u = rec.sums.iter().find(|s| s.dir == dir)?.udp?;
                    Some(u.datagrams as f64 / (rec.end - rec.start).max(1e-9))
                })
            };
            m.push(
                format!("{d} packets received"),
                "pkt/s",
                (Better::Higher, Scale::Relative),
                both(&|r| Some(tot(r)?.udp?.received_pps)),
                Some((pps_s(b), pps_s(n))),
            );
            m.push(
                format!("{d} loss"),
                "%",
                (Better::Lower, Scale::Absolute),
                both(&|r| Some(tot(r)?.udp?.lost_percent)),
                None,
            );
            m.push(
                format!("{d} jitter"),
                "ms",
                (Better::Lower, Scale::Relative),
                both(&|r| tot(r)?.udp?.jitter_ms),
                None,
            );
        } else {
            m.push(
                format!("{d} retransmits"),
                RETRANSMITS_UNIT,
                (Better::Lower, Scale::Relative),
                both(&|r| {
                    let t = tot(r)?;
                    let retr = t.retransmits?;
                    (t.sender.bytes > 0).then(|| retr as f64 / (t.sender.bytes as f64 / 1e9))
                }),
                None,
            );
        }
    }
    for (end, pick) in [("client", true), ("server", false)] {
        m.push(
            format!("{end} bytes per CPU-second"),
            "B/CPU-s",
            (Better::Higher, Scale::Relative),
            both(&|r| {
                if pick {
                    r.client.bytes_per_cpu_second
                } else {
                    r.server_end.bytes_per_cpu_second
                }
            }),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::compare::tests::run_pair as pair;
    use crate::compare::{Comparison, Verdict};
    use crate::tests::fixture;
    use hakaru_model::RunResult;

    fn verdict(c: &Comparison, metric: &str) -> Verdict {
        c.rows
            .iter()
            .find(|r| r.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} in {:?}", c.rows))
            .verdict
    }

    #[test]
    fn capacity_compares_its_maximum_mean_and_loss_not_bulk_rows() {
        let base = fixture("capacity_up");
        let mut worse = base.clone();
        let u = worse.detail.udpst_mut().unwrap();
        u.max_ip_capacity_mbps *= 0.8;
        u.mean_ip_mbps *= 0.8;
        for s in &mut u.sub_intervals {
            s.ip_mbps *= 0.8;
        }
        u.delivered_percent = 99.0;
        let c = pair(base.clone(), worse);
        let metrics: Vec<&str> = c.rows.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(metrics, ["maximum IP capacity", "mean IP rate", "loss"]);
        assert_eq!(verdict(&c, "maximum IP capacity"), Verdict::Worse);
        assert_eq!(verdict(&c, "mean IP rate"), Verdict::Worse);
        assert_eq!(verdict(&c, "loss"), Verdict::Worse);
        assert_eq!(c.worse, 3);
        let same = pair(base.clone(), base.clone());
        assert_eq!(same.worse, 0);
        // Two searches: no loss row (a search looks for loss), the maximum still judged.
        let search = |mut r: RunResult| {
            if let hakaru_model::TestSpec::Udpst(s) = &mut r.spec {
                s.row = None;
            }
            r
        };
        let mut lossy = search(base.clone());
        lossy.detail.udpst_mut().unwrap().delivered_percent = 97.0;
        let c = pair(search(base), lossy);
        let metrics: Vec<&str> = c.rows.iter().map(|r| r.metric.as_str()).collect();
        assert_eq!(metrics, ["maximum IP capacity", "mean IP rate"]);
        assert_eq!(c.worse, 0);
    }

    #[test]
    fn rpm_compares_its_responsiveness_not_bulk_rows() {
        let base = fixture("rpm_embedded");
        let mut worse = base.clone();
        let r = worse.detail.rpm_mut().unwrap();
        r.rpm /= 2.0;
        r.responsiveness_ms *= 2.0;
        let c = pair(base, worse);
        assert_eq!(verdict(&c, "RPM"), Verdict::Worse);
        assert_eq!(verdict(&c, "responsiveness"), Verdict::Worse);
        assert_eq!(verdict(&c, "foreign RPM"), Verdict::Within);
        assert!(c.rows.iter().all(|r| !r.metric.contains("received")));
    }
}
