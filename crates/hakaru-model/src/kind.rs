//! What every test kind answers, one implementation per kind in the kind's own module
//! (`config` for tcp, `udp` for udp and pps, `latency`, `connect`, `raw` for sink and
//! source, `http`). [`crate::TestSpec`] hands out its kind with [`crate::TestSpec::kind`], so
//! code that needs one of these facts never matches on the kind.
//!
//! The same idea has one method name here whatever the kind calls its option: a connection-
//! rate test's connectors are its `flows`, latency's warm-up is its `omit`, its `--timeout`
//! its `stall_timeout`.

use crate::{Amount, Bytes, Direction, Dur, FlowDir, SpecError};

/// One test kind's answers.
pub trait Kind {
    /// Short name for output: `tcp`, `udp`, `pps`, `latency`, `connect`, `sink`, `source`,
    /// `http`.
    fn name(&self) -> &'static str;
    /// Checks every limit; used by the client on flags and by a server on requests.
    fn validate(&self) -> Result<(), SpecError>;
    /// The data paths the test opens, with their directions (none for a connection-rate test,
    /// whose connections come and go, or for a local run).
    fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        Vec::new()
    }
    /// Flows per direction (connectors, connections).
    fn flows(&self) -> u32;
    /// Which way the data goes.
    fn direction(&self) -> Direction {
        Direction::Forward
    }
    /// Time or amount.
    fn amount(&self) -> Amount;
    /// Interval between reports.
    fn interval(&self) -> Dur;
    /// Warm-up not counted.
    fn omit(&self) -> Dur {
        Dur::default()
    }
    /// How long a flow (a connection, a round trip) may make no progress.
    fn stall_timeout(&self) -> Dur;
    /// Write, datagram or message length (the request, for a connection-rate test).
    fn length(&self) -> Bytes;
    /// CPUs the server pins to.
    fn server_affinity(&self) -> &[usize] {
        &[]
    }
    /// A hakaru server can run it (tcp, udp, pps, latency, connect); a local kind runs in one
    /// hakaru (sink, source, http) and a server refuses it.
    fn remote(&self) -> bool {
        true
    }
}
