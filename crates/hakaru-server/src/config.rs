//! What `hakaru server` is told: the ports it listens on, the kinds it serves and every
//! limit it enforces (`ServerConfig`, `NetperfConfig`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::{netperf, Acl, Budgets, Family, Limits, UdpstKeys, DEFAULT_PORT};

/// How the server listens and what it allows.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `None` binds the wildcard of the family.
    pub bind: Option<IpAddr>,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// Family restriction.
    pub family: Family,
    /// Connections and tests allowed per source address and in total.
    pub limits: Limits,
    /// Source addresses the server talks to.
    pub acl: Acl,
    /// Longest test the server runs (time-based tests ask for at most this much, warm-up
    /// included; byte- and block-count tests are stopped there). `None`: no limit.
    pub max_duration: Option<Duration>,
    /// Pre-shared key every native client must prove it holds; `None`: no authentication.
    pub psk: Option<hakaru_proto::auth::Psk>,
    /// Answer stock iperf3 clients on the control port (they cannot authenticate).
    pub iperf3: bool,
    /// Most payload bits per second the server sends in one UDP test (-R, --bidir), all
    /// flows together; `None`: no limit.
    pub max_rate: Option<f64>,
    /// Most flows (connectors, for connection-rate tests) per direction in one test.
    pub max_flows: u32,
    /// Server output for iperf3 clients that ask for it (`--get-server-output`) as iperf3's
    /// JSON document instead of its text.
    pub iperf3_json_output: bool,
    /// Also answer stock sockperf clients (UDP and TCP) on every port of `FIRST..=LAST` (at
    /// most [`crate::MAX_PORT_RANGE`]); (0, 0) picks one free port.
    pub sockperf_ports: Option<(u16, u16)>,
    /// Receiver threads serving the sockperf ports; `None`: one per
    /// [`crate::SOCKPERF_PORTS_PER_THREAD`] ports, at most [`crate::SOCKPERF_MAX_THREADS`].
    pub sockperf_threads: Option<usize>,
    /// Most sockperf UDP replies per second to one source address; `None`: one reply per
    /// message that asks, as `sockperf sr` does.
    pub sockperf_reply_rate: Option<u32>,
    /// Also serve HTTP (`GET /bytes/SIZE`, PUT/POST bodies counted) on this port; 0 picks a
    /// free one.
    pub http_port: Option<u16>,
    /// Serve Prometheus metrics at `GET /metrics` on this address (`--metrics`).
    pub metrics: Option<SocketAddr>,
    /// Memory and busy-polling budgets (docs/security.md).
    pub budgets: Budgets,
    /// Also act as an `ntttcp -r` receiver whose first data port is this (`--ntttcp-port`);
    /// its sync port is one lower.
    pub ntttcp_port: Option<u16>,
    /// Data ports from `ntttcp_port` (ntttcp's `-P`).
    pub ntttcp_ports: u16,
    /// Also serve stock OB-UDPST clients (RFC 9946) on this UDP port (0 picks a free one).
    pub udpst_port: Option<u16>,
    /// Most Mbit/s a udpst test may ask for or be sent at (`--udpst-max-rate`); `None`: the
    /// sending-rate table's top, or `max_rate` when that is lower.
    pub udpst_max_mbps: Option<u32>,
    /// udpst authentication (`--udpst-key`, `--udpst-key-file`): with any key, every setup
    /// request must be signed (RFC 9946 mode 1).
    pub udpst_keys: UdpstKeys,
    /// Be a mesh agent too (`--mesh`): probe these peers on the mesh port and serve the
    /// view (`/mesh`) and `/metrics` on its TCP side. `None`: no mesh.
    pub mesh: Option<hakaru_mesh::MeshConfig>,
    /// Several ntttcp senders per test, started by the one with `-L` (ntttcp's `-r -M`).
    pub ntttcp_multi: bool,
    /// Data connections one ntttcp sender may open for its test (`--ntttcp-max-conns`): the
    /// room a synced sender has beyond the per-client handshake limit.
    pub ntttcp_max_conns: u32,
    /// The netserver-compatible ports (`--netperf-port`).
    pub netperf: NetperfConfig,
    /// Also serve the responsiveness test (`--rpm-port`): HTTP/2 and HTTP/1.1 over TLS.
    pub rpm: Option<crate::RpmConfig>,
}

/// What `--netperf-port` and its companions ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetperfConfig {
    /// First and last port to answer netperf on; `None`: off. (0, 0) picks a free port.
    pub ports: Option<(u16, u16)>,
    /// The `-Z` passphrase netperf clients must send first; `None`: none asked.
    pub passphrase: Option<Vec<u8>>,
    /// netperf tests (and control connections) one client may have at once.
    pub per_client: usize,
    /// A test whose data path moves nothing this long fails, freeing its slot and memory
    /// (`--stall-timeout`).
    pub stall_timeout: Duration,
    /// The data ports a test may ask for, first and last (`--netperf-data-ports`).
    pub data_ports: (u16, u16),
    /// Wrong passphrases one client may send a minute before its connections are closed at
    /// once (`--netperf-passphrase-failures`).
    pub passphrase_failures: u32,
}

impl Default for NetperfConfig {
    fn default() -> Self {
        NetperfConfig {
            ports: None,
            passphrase: None,
            per_client: netperf::DEFAULT_PER_CLIENT,
            stall_timeout: netperf::DEFAULT_STALL_TIMEOUT,
            data_ports: hakaru_session::netperf::server::DEFAULT_DATA_PORTS,
            passphrase_failures: netperf::DEFAULT_PASSPHRASE_FAILURES,
        }
    }
}

/// Longest `-Z` passphrase netperf can send, in bytes.
pub const NETPERF_MAX_PASSPHRASE: usize = hakaru_proto::netperf::SPEC_BYTES - 1;
/// netserver's default control port.
pub const NETPERF_DEFAULT_PORT: u16 = hakaru_proto::netperf::DEFAULT_PORT;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: DEFAULT_PORT,
            family: Family::Any,
            limits: Limits::default(),
            acl: Acl::default(),
            max_duration: None,
            psk: None,
            iperf3: true,
            max_rate: None,
            max_flows: 1024,
            iperf3_json_output: false,
            sockperf_ports: None,
            sockperf_threads: None,
            sockperf_reply_rate: None,
            http_port: None,
            metrics: None,
            budgets: Budgets::default(),
            ntttcp_port: None,
            ntttcp_ports: hakaru_proto::ntttcp::DEFAULT_PORTS,
            udpst_port: None,
            udpst_max_mbps: None,
            udpst_keys: UdpstKeys::default(),
            mesh: None,
            ntttcp_multi: false,
            ntttcp_max_conns: 64,
            netperf: NetperfConfig::default(),
            rpm: None,
        }
    }
}
