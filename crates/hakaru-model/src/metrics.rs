//! Metric families for the Prometheus text exposition of `hakaru server --metrics`: plain
//! data the server fills from the counters it keeps, rendered by `hakaru_report::prometheus`.

/// Whether a metric only grows or may go either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows while the server runs (`_total` names).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets: each sample's `suffix` is `_bucket` (with an `le` label),
    /// `_sum` or `_count`.
    Histogram,
}

/// One labelled value.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    /// Label names and values, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
    /// Appended to the family's name (a histogram's `_bucket`, `_sum`, `_count`); empty for
    /// counters and gauges.
    pub suffix: &'static str,
}

/// All samples of one metric name.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// Metric name (`hakaru_tests_finished_total`).
    pub name: String,
    /// One line of help.
    pub help: String,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The samples.
    pub samples: Vec<MetricSample>,
}

impl MetricFamily {
    /// An empty family.
    pub fn new(name: &str, help: &str, kind: MetricKind) -> MetricFamily {
        MetricFamily {
            name: name.into(),
            help: help.into(),
            kind,
            samples: Vec::new(),
        }
    }

    /// Adds a sample with `labels` (name, value pairs).
    pub fn with(mut self, labels: &[(&str, &str)], value: f64) -> MetricFamily {
        self.samples.push(MetricSample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
            suffix: "",
        });
        self
    }

    /// Adds one histogram's samples: `buckets` are (upper bound, count in that bucket, not
    /// cumulative) with the last bound +Inf implied by `count`; `labels` go on each.
    pub fn with_histogram(
        mut self,
        labels: &[(String, String)],
        bounds: &[f64],
        per_bucket: &[u64],
        sum: f64,
        count: u64,
    ) -> MetricFamily {
        let mut cum = 0u64;
        let les = bounds
            .iter()
            .map(|b| format!("{b}"))
            .chain(std::iter::once("+Inf".to_string()));
        for (i, le) in les.enumerate() {
            cum += per_bucket.get(i).copied().unwrap_or(0);
            let mut l = labels.to_vec();
            l.push(("le".into(), le));
            let v = if i == bounds.len() { count } else { cum };
            self.samples.push(MetricSample {
                labels: l,
                value: v as f64,
                suffix: "_bucket",
            });
        }
        for (suffix, value) in [("_sum", sum), ("_count", count as f64)] {
            self.samples.push(MetricSample {
                labels: labels.to_vec(),
                value,
                suffix,
            });
        }
        self
    }
}
