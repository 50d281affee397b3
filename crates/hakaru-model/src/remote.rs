//! What a hakaru server may be asked to run: [`RemoteSpec`] has the kinds a server runs (tcp,
//! udp and pps, latency, connect) and no others, so code that holds one matches those four
//! and nothing else. A request off the wire is a [`TestSpec`]; the server machine turns it
//! into a `RemoteSpec` once, and a local kind (sink, source, http) is refused there.

use std::fmt;

use crate::config::TcpSpec;
use crate::connect::ConnectSpec;
use crate::kind::Kind;
use crate::latency::LatencySpec;
use crate::spec::TestSpec;
use crate::udp::UdpSpec;

/// A test a hakaru server runs.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteSpec {
    /// TCP bulk transfer.
    Tcp(TcpSpec),
    /// UDP at a rate or packet rate.
    Udp(UdpSpec),
    /// Request/response round trips.
    Latency(LatencySpec),
    /// Connections per second.
    Connect(ConnectSpec),
}

/// A local kind asked of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct NotRemote(pub &'static str);

impl fmt::Display for NotRemote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs are local to one hakaru (as sink, source and http runs are); a server \
             does not run them",
            self.0
        )
    }
}

impl std::error::Error for NotRemote {}

impl TryFrom<TestSpec> for RemoteSpec {
    type Error = NotRemote;

    fn try_from(spec: TestSpec) -> Result<RemoteSpec, NotRemote> {
        match spec {
            TestSpec::Tcp(t) => Ok(RemoteSpec::Tcp(t)),
            TestSpec::Udp(u) => Ok(RemoteSpec::Udp(u)),
            TestSpec::Latency(l) => Ok(RemoteSpec::Latency(l)),
            TestSpec::Connect(c) => Ok(RemoteSpec::Connect(c)),
            local @ (TestSpec::Raw(_)
            | TestSpec::Http(_)
            | TestSpec::Rpm(_)
            | TestSpec::Udpst(_)) => Err(NotRemote(local.name())),
        }
    }
}

impl From<RemoteSpec> for TestSpec {
    fn from(r: RemoteSpec) -> TestSpec {
        match r {
            RemoteSpec::Tcp(t) => TestSpec::Tcp(t),
            RemoteSpec::Udp(u) => TestSpec::Udp(u),
            RemoteSpec::Latency(l) => TestSpec::Latency(l),
            RemoteSpec::Connect(c) => TestSpec::Connect(c),
        }
    }
}

impl RemoteSpec {
    /// What every kind answers (name, flows, amount, ...).
    pub fn kind(&self) -> &dyn Kind {
        match self {
            RemoteSpec::Tcp(t) => t,
            RemoteSpec::Udp(u) => u,
            RemoteSpec::Latency(l) => l,
            RemoteSpec::Connect(c) => c,
        }
    }

    /// The test as the code shared with local runs takes it (the engine's side
    /// configuration, admission's budget).
    pub fn to_spec(&self) -> TestSpec {
        self.clone().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_kinds_go_both_ways_and_local_ones_are_named() {
        for spec in [
            TestSpec::Tcp(TcpSpec::default()),
            TestSpec::Udp(UdpSpec::default()),
            TestSpec::Latency(LatencySpec::default()),
            TestSpec::Connect(ConnectSpec::default()),
        ] {
            let r = RemoteSpec::try_from(spec.clone()).expect("remote");
            assert_eq!(r.kind().name(), spec.name());
            assert_eq!(r.to_spec(), spec);
        }
        let e = NotRemote("http");
        assert_eq!(
            e.to_string(),
            "http runs are local to one hakaru (as sink, source and http runs are); a server \
             does not run them"
        );
    }
}
