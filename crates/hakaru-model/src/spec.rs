//! The test a client asks for: one variant per kind, with what every kind answers (its name,
//! flows, amount, interval, ...). Each kind's own options live in its module.

use serde::{Deserialize, Serialize};

use crate::config::{SpecError, TcpSpec};
use crate::connect::ConnectSpec;
use crate::kind::Kind;
use crate::udp::UdpSpec;
use crate::FlowDir;

/// Any test a client can ask a server for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TestSpec {
    /// TCP bulk transfer (`hakaru tcp`).
    Tcp(TcpSpec),
    /// UDP at a rate or packet rate (`hakaru udp`, `hakaru pps`).
    Udp(UdpSpec),
    /// Request/response round trips (`hakaru latency`).
    Latency(crate::latency::LatencySpec),
    /// Connections per second (`hakaru connect`).
    Connect(ConnectSpec),
    /// A raw sink or source (`hakaru sink`, `hakaru source`); never sent to a server.
    Raw(crate::raw::RawSpec),
    /// HTTP downloads or uploads (`hakaru http`); never sent to a hakaru server.
    Http(crate::http::HttpSpec),
    /// The responsiveness test (`hakaru rpm`); never sent to a hakaru server.
    Rpm(crate::rpm::RpmSpec),
    /// Maximum IP-layer capacity (`hakaru capacity`, RFC 9946); never sent to a hakaru server.
    Udpst(crate::udpst::UdpstSpec),
}

impl TestSpec {
    /// The test's kind: what every kind answers (its name, flows, amount, ...), without a
    /// match on the kind.
    pub fn kind(&self) -> &dyn Kind {
        match self {
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

    /// Short name of the test for output (see [`Kind::name`]).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Checks every limit.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.kind().validate()
    }

    /// The flows the test opens (none for a connection-rate test: its connections come and go).
    pub fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        self.kind().flow_plan()
    }

    /// The facts every kind has: flows, direction, amount, interval, warm-up, stall timeout,
    /// length, server CPUs (see [`Kind::common`]).
    pub fn common(&self) -> crate::kind::Common<'_> {
        self.kind().common()
    }

    /// A hakaru server can run it (see [`Kind::remote`]).
    pub fn remote(&self) -> bool {
        self.kind().remote()
    }

    /// The UDP spec, if this is a UDP test.
    pub fn udp(&self) -> Option<&UdpSpec> {
        match self {
            TestSpec::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// The latency probes of a bulk TCP or UDP test (`--latency-probe`).
    pub fn latency_probe(&self) -> Option<&crate::probe::LatencyProbe> {
        match self {
            TestSpec::Tcp(t) => t.latency_probe.as_ref(),
            TestSpec::Udp(u) => u.latency_probe.as_ref(),
            _ => None,
        }
    }

    /// The flow id of the latency probes' flow: the one after the bulk flows.
    pub fn probe_flow(&self) -> u32 {
        self.flow_plan().len() as u32
    }

    /// The data paths the test opens: its flows and the probe flow, if any.
    pub fn data_paths(&self) -> usize {
        self.flow_plan().len() + usize::from(self.latency_probe().is_some())
    }

    /// The connection-rate spec, if this is a connection-rate test.
    pub fn connect(&self) -> Option<&ConnectSpec> {
        match self {
            TestSpec::Connect(c) => Some(c),
            _ => None,
        }
    }
}
