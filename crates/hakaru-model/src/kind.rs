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
    /// About how much buffer memory the test costs a server with `cpus` CPUs: the engine's
    /// own buffers and the socket buffers it asks the kernel for. An estimate to budget by,
    /// not an accounting: the kernel's own queues under an unasked-for window come on top.
    fn server_memory(&self, cpus: usize) -> u64 {
        let _ = cpus;
        0
    }
    /// What the server would send, per flow: `None` when it sends nothing,
    /// `Some((None, flows))` for as fast as it can, `Some((Some(bits), flows))` for a paced
    /// rate.
    fn server_send_rate(&self) -> Option<(Option<f64>, u32)> {
        None
    }
}

/// What the kernel keeps per socket buffer byte asked for (it doubles SO_SNDBUF/SO_RCVBUF).
pub(crate) const KERNEL_DOUBLES: u64 = 2;
/// Largest datagrams a UDP worker moves in one system call (the engine's batches).
pub(crate) const UDP_BATCH: u64 = 64;

/// The server's worker threads for `paths` data paths on `cpus` CPUs.
pub(crate) fn workers(paths: usize, cpus: usize) -> u64 {
    (paths.max(1) as u64).min(cpus.max(1) as u64)
}

/// True when the server sends in a test going `direction`.
pub(crate) fn server_sends(direction: Direction) -> bool {
    matches!(direction, Direction::Reverse | Direction::Bidir)
}
