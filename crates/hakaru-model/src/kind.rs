//! What every test kind answers, one implementation per kind in the kind's own module
//! (`config` for tcp, `udp` for udp and pps, `latency`, `connect`, `raw` for sink and
//! source, `http`, `rpm`, `udpst`). [`crate::TestSpec`] hands out its kind with
//! [`crate::TestSpec::kind`], so code that needs one of these facts never matches on the kind.
//!
//! The facts every kind has, whatever it calls them, are one block, [`Common`], that each kind
//! fills in once ([`Kind::common`]): a connection-rate test's connectors are its `flows`,
//! latency's warm-up is its `omit`, its `--timeout` its `stall_timeout`.

use crate::{Amount, Bytes, Direction, Dur, FlowDir, SpecError};

/// The facts every kind has, under one name each. A kind that has no such option leaves the
/// default: forward, no warm-up, no server CPUs, one pass ([`Amount::Time`] of zero).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Common<'a> {
    /// Flows per direction (connectors, connections).
    pub flows: u32,
    /// Which way the data goes.
    pub direction: Direction,
    /// Time or amount.
    pub amount: Amount,
    /// Interval between reports.
    pub interval: Dur,
    /// Warm-up not counted.
    pub omit: Dur,
    /// How long a flow (a connection, a round trip) may make no progress.
    pub stall_timeout: Dur,
    /// Write, datagram or message length (the request, for a connection-rate test).
    pub length: Bytes,
    /// CPUs the server pins to.
    pub server_affinity: &'a [usize],
}

impl Default for Common<'_> {
    fn default() -> Self {
        Common {
            flows: 1,
            direction: Direction::Forward,
            amount: Amount::Time(Dur::default()),
            interval: Dur::default(),
            omit: Dur::default(),
            stall_timeout: Dur::default(),
            length: Bytes(0),
            server_affinity: &[],
        }
    }
}

/// One test kind's answers.
pub trait Kind {
    /// Short name for output: `tcp`, `udp`, `pps`, `latency`, `connect`, `sink`, `source`,
    /// `http`, `rpm`, `capacity`.
    fn name(&self) -> &'static str;
    /// Checks every limit; used by the client on flags and by a server on requests.
    fn validate(&self) -> Result<(), SpecError>;
    /// The facts every kind has: flows, direction, amount, interval, warm-up, stall timeout,
    /// length, server CPUs.
    fn common(&self) -> Common<'_>;
    /// The data paths the test opens, with their directions (none for a connection-rate test,
    /// whose connections come and go, or for a local run).
    fn flow_plan(&self) -> Vec<(u32, FlowDir)> {
        Vec::new()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::ConnectSpec;
    use crate::latency::LatencySpec;
    use crate::TestSpec;

    /// Each kind's own names land in the common block's: a kind that mapped one wrong (or
    /// left one at the default) would read another option than the one its flag sets.
    #[test]
    fn each_kind_fills_the_common_block_from_its_own_options() {
        let connect = ConnectSpec {
            connectors: 7,
            duration: Dur::from_secs(9),
            request: Bytes(33),
            interval: Dur::from_secs(2),
            connect_timeout: Dur::from_secs(4),
            server_affinity: vec![1],
            ..ConnectSpec::default()
        };
        let c = connect.common();
        assert_eq!(c.flows, 7);
        assert_eq!(c.amount, Amount::Time(Dur::from_secs(9)));
        assert_eq!(c.length, Bytes(33));
        assert_eq!(c.interval, Dur::from_secs(2));
        assert_eq!(c.stall_timeout, Dur::from_secs(4));
        assert_eq!(c.server_affinity, &[1]);
        assert_eq!(c.omit, Dur::default());
        assert_eq!(c.direction, Direction::Forward);

        let latency = LatencySpec {
            flows: 3,
            duration: Dur::from_secs(5),
            warmup: Dur::from_secs(1),
            timeout: Dur::from_secs(6),
            length: Bytes(64),
            ..LatencySpec::default()
        };
        let spec = TestSpec::Latency(latency);
        let c = spec.common();
        assert_eq!((c.flows, c.length), (3, Bytes(64)));
        assert_eq!(c.amount, Amount::Time(Dur::from_secs(5)));
        assert_eq!(c.omit, Dur::from_secs(1));
        assert_eq!(c.stall_timeout, Dur::from_secs(6));

        let rpm = crate::rpm::RpmSpec {
            url: "https://example.com/.well-known/nq".into(),
            direction: crate::rpm::RpmDirection::Both,
            max_connections: 12,
            interval: Dur::from_secs(1),
            moving_average: 4,
            tolerance: 0.05,
            probes_per_second: 100,
            max_duration: Dur::from_secs(20),
            insecure: false,
            cacert: None,
            http1: false,
            connect_timeout: Dur::from_secs(5),
            congestion: None,
        };
        let c = rpm.common();
        assert_eq!(c.direction, Direction::Bidir);
        assert_eq!(c.flows, 12);
        assert_eq!(c.amount, Amount::Time(Dur::from_secs(20)));
        assert_eq!(c.stall_timeout, Dur::from_secs(5));
        assert!(c.server_affinity.is_empty());
    }
}
