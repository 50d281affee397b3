//! The one place that picks a kind's report. Each kind answers [`KindText`] (its text, its
//! one-line row, its CSV totals) and [`KindMetrics`] (what `hakaru compare` reads) in its
//! `NAME_text.rs`, and with the `charts` feature [`KindCharts`] in its `NAME_charts.rs`; [`of`]
//! gives all of them as one object, so a kind that does not answer one does not compile, and no
//! caller picks a kind with a wildcard arm. The kind's [`RunKind`] (what the output formats
//! ask of it) and the subcommands that print it are here too.

use hakaru_model::{TestSpec, UdpMode};

use crate::compare_metrics::KindMetrics;
#[cfg(feature = "charts")]
use crate::kind_charts::KindCharts;
use crate::kind_text::KindText;

/// Everything a kind's results read as: text, CSV totals, compare metrics, charts.
#[cfg(feature = "charts")]
pub(crate) trait KindReport: KindText + KindMetrics + KindCharts {}
#[cfg(feature = "charts")]
impl<T: KindText + KindMetrics + KindCharts> KindReport for T {}

/// Everything a kind's results read as: text, CSV totals, compare metrics.
#[cfg(not(feature = "charts"))]
pub(crate) trait KindReport: KindText + KindMetrics {}
#[cfg(not(feature = "charts"))]
impl<T: KindText + KindMetrics> KindReport for T {}

/// The report of `spec`'s kind.
pub(crate) fn of(spec: &TestSpec) -> &dyn KindReport {
    match spec {
        TestSpec::Tcp(t) => t,
        TestSpec::Udp(u) => u,
        TestSpec::Latency(l) => l,
        TestSpec::Connect(c) => c,
        TestSpec::Raw(r) => r,
        TestSpec::Http(h) => h,
        TestSpec::Rpm(r) => r,
        TestSpec::Udpst(u) => u,
    }
}

/// Which test a run result is of, as far as its formats care: its name and the shapes it has.
/// Each kind's is a constant here (`RunKind::TCP`, `RunKind::RPM`, ...), with [`RunKind::of`]
/// and the subcommands that print each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunKind {
    name: &'static str,
    iperf3: bool,
    csv: bool,
}

impl RunKind {
    /// A kind named `name` with CSV rows and no iperf3 form.
    pub(crate) const fn new(name: &'static str) -> RunKind {
        RunKind {
            name,
            iperf3: false,
            csv: true,
        }
    }

    /// iperf3 has this test (and so `iperf3 -J` a shape for it).
    pub(crate) const fn with_iperf3_form(self) -> RunKind {
        RunKind {
            iperf3: true,
            ..self
        }
    }

    /// No CSV rows of the shared shape (a raw transfer, a capacity run).
    pub(crate) const fn without_csv(self) -> RunKind {
        RunKind { csv: false, ..self }
    }

    /// The test's name (`sink or source` for both ends of a plain stream).
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Whether iperf3 has this test (and so `iperf3 -J` a shape for it).
    pub fn has_iperf3_form(self) -> bool {
        self.iperf3
    }

    /// Whether the CSV formats write this test's rows.
    pub fn has_csv_rows(self) -> bool {
        self.csv
    }
}

impl RunKind {
    pub const TCP: RunKind = RunKind::new("tcp").with_iperf3_form();
    pub const UDP: RunKind = RunKind::new("udp").with_iperf3_form();
    pub const PPS: RunKind = RunKind::new("pps").with_iperf3_form();
    pub const LATENCY: RunKind = RunKind::new("latency");
    pub const CONNECT: RunKind = RunKind::new("connect");
    pub const HTTP: RunKind = RunKind::new("http");
    /// `hakaru rpm`: the responsiveness test.
    pub const RPM: RunKind = RunKind::new("rpm");
    /// `hakaru capacity`: RFC 9946's maximum IP-layer capacity.
    pub const CAPACITY: RunKind = RunKind::new("capacity").without_csv();
    /// `sink` and `source`: a plain stream to or from any peer.
    pub const RAW: RunKind = RunKind::new("sink or source").without_csv();

    /// The kind of a test spec (udp's packet-rate mode is `pps`).
    pub fn of(spec: &TestSpec) -> RunKind {
        match spec {
            TestSpec::Tcp(_) => RunKind::TCP,
            TestSpec::Udp(u) if u.mode == UdpMode::Pps => RunKind::PPS,
            TestSpec::Udp(_) => RunKind::UDP,
            TestSpec::Latency(_) => RunKind::LATENCY,
            TestSpec::Connect(_) => RunKind::CONNECT,
            TestSpec::Http(_) => RunKind::HTTP,
            TestSpec::Rpm(_) => RunKind::RPM,
            TestSpec::Udpst(_) => RunKind::CAPACITY,
            TestSpec::Raw(_) => RunKind::RAW,
        }
    }
}

/// The test subcommands and the result each prints.
const COMMANDS: [(&str, RunKind); 10] = [
    ("tcp", RunKind::TCP),
    ("udp", RunKind::UDP),
    ("pps", RunKind::PPS),
    ("latency", RunKind::LATENCY),
    ("connect", RunKind::CONNECT),
    ("http", RunKind::HTTP),
    ("rpm", RunKind::RPM),
    ("capacity", RunKind::CAPACITY),
    ("sink", RunKind::RAW),
    ("source", RunKind::RAW),
];

/// The test subcommands, in the order `hakaru --help` lists them.
pub fn test_commands() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|(c, _)| *c)
}

/// The result `hakaru COMMAND` prints, for a test subcommand.
pub fn run_document(command: &str) -> Option<RunKind> {
    COMMANDS
        .iter()
        .find(|(c, _)| *c == command)
        .map(|(_, k)| *k)
}
