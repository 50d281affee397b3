//! The test a client asks for: one variant per kind, with what every kind answers (its name,
//! flows, amount, interval, ...). Each kind's own options live in its module.

use serde::{Deserialize, Serialize};

use crate::config::{Amount, Direction, SpecError, TcpSpec};
use crate::connect::ConnectSpec;
use crate::udp::{UdpMode, UdpSpec};
use crate::units::{Bytes, Dur};
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
}

impl TestSpec {
    /// Short name of the test for output: `tcp`, `udp`, `pps` or `connect`.
    pub fn name(&self) -> &'static str {
        match self {
            TestSpec::Tcp(_) => "tcp",
            TestSpec::Udp(u) if u.mode == UdpMode::Pps => "pps",
            TestSpec::Udp(_) => "udp",
            TestSpec::Latency(_) => "latency",
            TestSpec::Connect(_) => "connect",
            TestSpec::Raw(r) => r.role_name(),
            TestSpec::Http(_) => "http",
        }
    }

    /// Checks every limit.
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            TestSpec::Tcp(t) => t.validate(),
            TestSpec::Udp(u) => u.validate(),
            TestSpec::Latency(l) => l.validate(),
            TestSpec::Connect(c) => c.validate(),
            TestSpec::Raw(r) => r.validate(),
            TestSpec::Http(h) => h.validate(),
        }
    }

    /// The flows the test opens (none for a connection-rate test: its connections come and go).
    pub fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        match self {
            TestSpec::Tcp(t) => t.flow_plan(),
            TestSpec::Udp(u) => u.flow_plan(),
            TestSpec::Latency(l) => l.flow_plan(),
            TestSpec::Connect(_) | TestSpec::Raw(_) | TestSpec::Http(_) => Vec::new(),
        }
    }

    /// Flows per direction (connectors for a connection-rate test).
    pub fn flows(&self) -> u32 {
        match self {
            TestSpec::Tcp(t) => t.flows,
            TestSpec::Udp(u) => u.flows,
            TestSpec::Latency(l) => l.flows,
            TestSpec::Connect(c) => c.connectors,
            TestSpec::Raw(_) => 1,
            TestSpec::Http(h) => h.parallel,
        }
    }

    /// Direction.
    pub fn direction(&self) -> Direction {
        match self {
            TestSpec::Tcp(t) => t.direction,
            TestSpec::Udp(u) => u.direction,
            TestSpec::Latency(_) => Direction::Forward,
            TestSpec::Connect(_) | TestSpec::Raw(_) => Direction::Forward,
            TestSpec::Http(h) if h.method == crate::http::HttpMethod::Get => Direction::Reverse,
            TestSpec::Http(_) => Direction::Forward,
        }
    }

    /// Time or amount.
    pub fn amount(&self) -> Amount {
        match self {
            TestSpec::Tcp(t) => t.amount,
            TestSpec::Udp(u) => u.amount,
            TestSpec::Latency(l) => Amount::Time(l.duration),
            TestSpec::Connect(c) => Amount::Time(c.duration),
            TestSpec::Raw(r) => match (r.count, r.duration) {
                (Some(n), _) => Amount::Blocks(n),
                (None, Some(t)) => Amount::Time(t),
                // Until the stream ends (EOF, stdin's end, the sender's FIN).
                (None, None) => Amount::Time(Dur::default()),
            },
            TestSpec::Http(h) => match (h.bytes, h.duration) {
                (Some(b), _) => Amount::Bytes(b),
                (None, Some(t)) => Amount::Time(t),
                // One pass over the URLs.
                (None, None) => Amount::Time(Dur::default()),
            },
        }
    }

    /// Interval between reports.
    pub fn interval(&self) -> Dur {
        match self {
            TestSpec::Tcp(t) => t.interval,
            TestSpec::Udp(u) => u.interval,
            TestSpec::Latency(l) => l.interval,
            TestSpec::Connect(c) => c.interval,
            TestSpec::Raw(r) => r.interval,
            TestSpec::Http(h) => h.interval,
        }
    }

    /// Warm-up not counted.
    pub fn omit(&self) -> Dur {
        match self {
            TestSpec::Tcp(t) => t.omit,
            TestSpec::Udp(u) => u.omit,
            TestSpec::Latency(l) => l.warmup,
            TestSpec::Connect(_) | TestSpec::Raw(_) | TestSpec::Http(_) => Dur::default(),
        }
    }

    /// How long a flow (a connection, for a connection-rate test) may make no progress.
    pub fn stall_timeout(&self) -> Dur {
        match self {
            TestSpec::Tcp(t) => t.stall_timeout,
            TestSpec::Udp(u) => u.stall_timeout,
            TestSpec::Latency(l) => l.timeout,
            TestSpec::Connect(c) => c.connect_timeout,
            TestSpec::Raw(r) => r.idle,
            TestSpec::Http(h) => h.stall_timeout,
        }
    }

    /// Write/datagram length (the request, for a connection-rate test).
    pub fn length(&self) -> Bytes {
        match self {
            TestSpec::Tcp(t) => t.length,
            TestSpec::Udp(u) => u.length,
            TestSpec::Latency(l) => l.length,
            TestSpec::Connect(c) => c.request,
            TestSpec::Raw(r) => r.length,
            TestSpec::Http(h) => h.upload.unwrap_or_default(),
        }
    }

    /// CPUs the server pins to.
    pub fn server_affinity(&self) -> &[usize] {
        match self {
            TestSpec::Tcp(t) => &t.server_affinity,
            TestSpec::Udp(u) => &u.server_affinity,
            TestSpec::Latency(l) => &l.server_affinity,
            TestSpec::Connect(c) => &c.server_affinity,
            TestSpec::Raw(_) | TestSpec::Http(_) => &[],
        }
    }

    /// The UDP spec, if this is a UDP test.
    pub fn udp(&self) -> Option<&UdpSpec> {
        match self {
            TestSpec::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// The connection-rate spec, if this is a connection-rate test.
    pub fn connect(&self) -> Option<&ConnectSpec> {
        match self {
            TestSpec::Connect(c) => Some(c),
            _ => None,
        }
    }
}
