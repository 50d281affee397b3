//! The fleet mesh (docs/mesh.md): `hakaru server --mesh PEERS` makes every server an agent
//! that probes its peers continuously while it keeps serving tests; `hakaru mesh report` asks
//! every agent for its view and names the hosts whose pairs are bad.
//!
//! - [`wire`]: the probe datagram, sans-IO.
//! - [`peers`]: the peer list (a file with labels, or a DNS name).
//! - [`prober`]: which peer to probe when under the rate cap, losses, figures: a sans-IO
//!   machine; [`stats`] its counters, buckets and window.
//! - [`agent`]: the driver (the socket, the clock, the refresher) and the responder;
//!   [`connect`] the optional TCP connect probes, a second prober with a driver of its own;
//!   [`slice`] the optional throughput slices, a schedule and a driver around a test the
//!   binary gives.
//! - [`view`]: what an agent says at `GET /mesh` and its `hakaru_mesh_` metric families;
//!   [`groups`] the series of a long list, per group of peers.
//! - [`report`]: the matrix of every agent's view, the suspects, the text; [`fetch`] asks
//!   the agents.

pub mod agent;
pub mod connect;
pub mod fetch;
pub mod groups;
pub mod peers;
pub mod prober;
pub mod report;
pub mod slice;
pub mod stats;
pub mod view;
pub mod wire;

use std::time::Duration;

pub use agent::Agent;
pub use peers::{Peer, PeerSource};
pub use prober::ProbeConfig;

/// The mesh port when none is given: UDP for probes, TCP for the view and metrics.
pub const DEFAULT_PORT: u16 = 5209;

/// An agent's settings (the server's `--mesh-*` flags).
#[derive(Debug, Clone)]
pub struct MeshConfig {
    /// Where the peers come from.
    pub source: PeerSource,
    /// The mesh port (peers written without one are at this port).
    pub port: u16,
    /// How the prober probes.
    pub probe: ProbeConfig,
    /// How often the list is read again.
    pub refresh: Duration,
    /// Most peers in the list.
    pub max_peers: usize,
    /// Up to this many peers, metrics carry a series per peer; past it, one per group.
    pub metrics_peers: usize,
    /// The label whose value names a peer's group in metrics past `metrics_peers`.
    pub group_by: String,
    /// Most replies a second this agent sends.
    pub max_reply_pps: u32,
    /// The fleet's key: probes and replies are tagged and only tagged ones are answered.
    pub key: Option<hakaru_proto::auth::Psk>,
    /// TCP connect probes too (`--mesh-connect-interval`).
    pub connect: Option<connect::ConnectConfig>,
    /// Throughput slices too (`--mesh-slice-every`).
    pub slice: Option<slice::SliceConfig>,
}

impl MeshConfig {
    /// The defaults for `source` (the flags' defaults).
    pub fn new(source: PeerSource) -> MeshConfig {
        MeshConfig {
            source,
            port: DEFAULT_PORT,
            probe: ProbeConfig {
                interval: Duration::from_secs(1),
                timeout: Duration::from_secs(2),
                max_pps: 100,
                window: Duration::from_secs(60),
                size: 64,
                keyed: false,
            },
            refresh: Duration::from_secs(30),
            max_peers: 10_000,
            metrics_peers: 100,
            group_by: "zone".into(),
            max_reply_pps: 1000,
            key: None,
            connect: None,
            slice: None,
        }
    }
}
