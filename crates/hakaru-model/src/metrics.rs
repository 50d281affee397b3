//! Metric families for the Prometheus text exposition of `hakaru server --metrics`: plain
//! data the server fills from the counters it keeps, rendered by `hakaru_report::prometheus`.

/// Whether a metric only grows or may go either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows while the server runs (`_total` names).
    Counter,
    /// A value now.
    Gauge,
}

/// One labelled value.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    /// Label names and values, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
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
        });
        self
    }
}
