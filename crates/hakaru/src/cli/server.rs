//! `hakaru server`: one process, one control port, many clients and tests at once. The same
//! port serves stock iperf3 clients (3.12 and later), each test isolated; with
//! `--sockperf-port` it also answers stock sockperf clients, like `sockperf sr` (on one port or
//! a range of them).

use std::net::IpAddr;

use anyhow::Context;
use hakaru_model::Dur;
use hakaru_server::{
    Acl, Budgets, Family, Limits, Server, ServerConfig, DEFAULT_PORT, MAX_PORT_RANGE,
};

/// Checks one --allow/--deny value (so a bad one is a usage error, exit 2).
fn parse_net(s: &str) -> Result<String, String> {
    Acl::parse(&[s.to_string()], &[])
        .map(|_| s.to_string())
        .map_err(|e| e.replace("--allow ", ""))
}

/// Options of `hakaru server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Control port (TCP, and UDP on the same number); data connections arrive on it too. 0
    /// picks a number free for both.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    ipv6: bool,
    /// Most tests running at once; more are refused with a reason.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_tests: u32,
    /// Most tests running at once from one source address.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_tests_per_client: u32,
    /// Most connections still handshaking (not yet a data connection or an admitted test),
    /// in total.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_pending: u32,
    /// Most connections still handshaking from one source address: idle or slow peers from
    /// one address cannot lock everyone else out.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_pending_per_client: u32,
    /// Longest test the server runs, warm-up included (600, 1h; 0 for no limit). Longer
    /// time-based tests are refused up front; byte and block counts are stopped there.
    #[arg(long, value_name = "TIME", default_value = "1h")]
    max_duration: Dur,
    /// Most payload rate the server sends in one test (tcp, udp and pps with -R or --bidir,
    /// and iperf3 clients' -R), all flows together (1G, 500M); a test asking for more, or for
    /// an unlimited rate, is refused with the figures. Default: no limit.
    #[arg(long, value_name = "RATE")]
    max_rate: Option<hakaru_model::BitRate>,
    /// Most buffer memory one test may take on the server (its -l, -w and flows: about
    /// (CPUs + 1) x -l for TCP); larger tests are refused with the figure. 0 for no limit.
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    max_test_memory: hakaru_model::Bytes,
    /// Most buffer memory all running tests may take together; a test that would go over is
    /// refused as busy. 0 for no limit.
    #[arg(long, value_name = "SIZE", default_value = "1G")]
    max_memory: hakaru_model::Bytes,
    /// Let latency clients ask the server to busy-poll (`--spin`, `--busy-poll`): each
    /// spinning flow holds a CPU, so it is off unless allowed, and never more spinning
    /// flows than CPUs.
    #[arg(long)]
    allow_busy_poll: bool,
    /// IPv4 clients in one network of this prefix length count as one client for the
    /// per-client limits (32: each address).
    #[arg(long, value_name = "BITS", default_value_t = 32, value_parser = clap::value_parser!(u8).range(0..=32))]
    client_prefix_v4: u8,
    /// IPv6 clients in one network of this prefix length count as one client for the
    /// per-client limits (64: a host usually holds a whole /64; 128: each address).
    #[arg(long, value_name = "BITS", default_value_t = 64, value_parser = clap::value_parser!(u8).range(0..=128))]
    client_prefix_v6: u8,
    /// Most flows per direction in one test (connectors, for `connect`).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_flows: u32,
    /// Only talk to these sources (CIDR or address; repeatable). Checked before any byte is
    /// read, on the control/data port, the UDP port and the sockperf port.
    #[arg(long, value_name = "CIDR", value_parser = parse_net)]
    allow: Vec<String>,
    /// Never talk to these sources (CIDR or address; repeatable; wins over --allow).
    #[arg(long, value_name = "CIDR", value_parser = parse_net)]
    deny: Vec<String>,
    /// Require every hakaru client to prove it holds this pre-shared key (the file's text,
    /// trimmed; at least 16 bytes); `-` reads it from the first line of standard input (the
    /// rest stays for --exit-on-stdin-eof), so it is on no command line and in no
    /// environment; HAKARU_PSK holds the key itself when this is not given. Mutual
    /// HMAC-SHA256 challenge-response: the key never crosses the wire. Traffic is not
    /// encrypted.
    #[arg(long, value_name = "FILE")]
    psk_file: Option<std::path::PathBuf>,
    /// Answer stock iperf3 clients on the control port: `allow` or `deny`. They cannot
    /// authenticate, so with a key the default is deny; `--iperf3 allow` lets anyone who can
    /// reach the port run iperf3 tests (docs/security.md).
    #[arg(long, value_name = "POLICY", value_parser = ["allow", "deny"])]
    iperf3: Option<String>,
    /// What iperf3 clients that pass --get-server-output receive: iperf3's text (default) or
    /// its -J document (as from `iperf3 -s -J`).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    iperf3_server_output: String,
    /// Also answer stock sockperf clients (`sockperf pp`, `ul`, `tp`, UDP and `--tcp`) on this
    /// port, like `sockperf sr` (sockperf's default is 11111; 0 picks a free port), or on
    /// every port of a range FIRST-LAST (at most 1024 ports), so scripts that start one
    /// `sockperf sr --port $port` per client run against this one process. Each client's
    /// messages, bytes and replies are logged when it ends. The UDP sockets' receive buffers
    /// are 8 MiB each, 128 MiB for the whole range beyond 16 ports.
    #[arg(long, value_name = "PORT|FIRST-LAST", value_parser = parse_port_range)]
    sockperf_port: Option<(u16, u16)>,
    /// Receiver threads serving the sockperf ports, each polling its share of them
    /// (default: one per 8 ports, at most 64; never more than the ports).
    #[arg(long, value_name = "N", requires = "sockperf_port", value_parser = clap::value_parser!(u32).range(1..=64))]
    sockperf_threads: Option<u32>,
    /// Most sockperf UDP replies per second to one source address, all the sockperf ports
    /// together. The sockperf port, like `sockperf sr`, answers any source (one reply per message, never larger), so a forged
    /// source address gets replies; this caps what it can get. Default: no limit.
    #[arg(long, value_name = "N", requires = "sockperf_port", value_parser = clap::value_parser!(u32).range(1..))]
    sockperf_reply_rate: Option<u32>,
    /// Also answer stock netperf clients like netserver on this port (netserver's is 12865;
    /// 0 picks a free one), or on every port of a range FIRST-LAST, so scripts that start one
    /// netserver per port (`netserver -p $port`) run against this one process. TCP_STREAM,
    /// TCP_MAERTS, UDP_STREAM, TCP_RR, TCP_CRR, UDP_RR and omni tests; off unless given.
    #[arg(long, value_name = "PORT|FIRST-LAST", value_parser = parse_port_range)]
    netperf_port: Option<(u16, u16)>,
    /// The passphrase netperf clients must send with `-Z` (plaintext on the wire, as netperf
    /// sends it; not the key). Required with a key (--psk-file), where netperf clients
    /// could otherwise test without one. It shows in the process list to every local user:
    /// prefer --netperf-passphrase-file.
    #[arg(long, value_name = "WORD", requires = "netperf_port")]
    netperf_passphrase: Option<String>,
    /// Read the netperf passphrase (see --netperf-passphrase) from FILE (its text, surrounding
    /// whitespace trimmed, one line); `-` reads it from a line of standard input (the second
    /// when --psk-file - takes the first), so it is on no command line.
    #[arg(
        long,
        value_name = "FILE",
        requires = "netperf_port",
        conflicts_with = "netperf_passphrase"
    )]
    netperf_passphrase_file: Option<std::path::PathBuf>,
    /// Wrong netperf passphrases one client (--client-prefix-v4/-v6) may send within a
    /// minute; each waits 1 s before its connection closes, and past N the client's
    /// connections are closed at once until the minute is over.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    netperf_passphrase_failures: u32,
    /// netperf tests (and control connections) one client may have at once on the netperf
    /// ports, so one address cannot take every one of --max-tests (16 covers flent's rrul, 11
    /// netperf processes). Scripts that start more on one sender (the guides' 64) need it
    /// raised; each is one connection or socket, and all share --max-memory.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_netperf_per_client: u32,
    /// The ports a netperf test's data socket may take, FIRST-LAST: a port netperf asks
    /// for (-P ,PORT) outside them is refused, and without one the server picks one in
    /// them. The default leaves out the privileged ports.
    #[arg(long, value_name = "FIRST-LAST", default_value = "1024-65535", value_parser = parse_data_ports)]
    netperf_data_ports: (u16, u16),
    /// How long a netperf test's data path may move nothing (no byte either way) before
    /// the server fails the test and frees its slot and memory (0: never). hakaru's own
    /// clients set theirs with their --stall-timeout.
    #[arg(long, value_name = "TIME", default_value = "10s")]
    stall_timeout: Dur,
    /// Also serve HTTP on this port (0 picks a free one): `GET /bytes/SIZE` sends SIZE bytes of
    /// generated data (Range supported), PUT and POST bodies are counted and discarded; for
    /// `hakaru http`, wget and curl where no web server is set up. Plain HTTP, no key.
    #[arg(long, value_name = "PORT")]
    http_port: Option<u16>,
    /// Also serve the responsiveness test (`hakaru rpm`, Apple's networkQuality,
    /// goresponsiveness) on this port (0 picks a free one): HTTPS with HTTP/2 (HTTP/1.1 when
    /// the client offers only that), `/.well-known/nq`, `/small`, `/large` and `/upload`. TLS
    /// with --tls-cert and --tls-key, or a self-signed certificate made at start (its SHA-256
    /// fingerprint is logged). No key (docs/rpm.md, docs/security.md).
    #[arg(long, value_name = "PORT")]
    rpm_port: Option<u16>,
    /// PEM certificate chain for --rpm-port.
    #[arg(long, value_name = "FILE", requires_all = ["rpm_port", "tls_key"])]
    tls_cert: Option<String>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires_all = ["rpm_port", "tls_cert"])]
    tls_key: Option<String>,
    /// TCP congestion control of --rpm-port's sockets (cubic, bbr, reno, ...), the sender of
    /// the rpm downloads; unset, the system's default. Linux only.
    #[arg(long, value_name = "ALGO", requires = "rpm_port")]
    rpm_congestion: Option<String>,
    /// Most --rpm-port connections at once, all clients together; beyond, a connection is
    /// closed at once (logged, counted in the metrics).
    #[arg(long, value_name = "N", default_value_t = 1024, requires = "rpm_port", value_parser = clap::value_parser!(u32).range(1..=65536))]
    rpm_max_connections: u32,
    /// Most --rpm-port connections at once from one client (an address, or a network under
    /// --client-prefix-v4/-v6): a responsiveness test's load connections and its probes in
    /// flight. At the limit, the client's longest idle HTTP/2 connection is closed (GOAWAY)
    /// to make room; with none idle, or 16 closing already, the new one is closed at once.
    #[arg(long, value_name = "N", default_value_t = 192, requires = "rpm_port", value_parser = clap::value_parser!(u32).range(1..=65536))]
    rpm_max_per_client: u32,
    /// Most buffer memory --rpm-port's connections may take together, each counted at 2.5 MiB
    /// from accept to close (its HTTP/2 receive window, read, TLS and framing buffers);
    /// beyond, a connection is closed at once. 0 for no limit.
    #[arg(long, value_name = "SIZE", default_value = "1G", requires = "rpm_port")]
    rpm_max_memory: hakaru_model::Bytes,
    /// How long an HTTP/1.1 request head may take on --rpm-port from its first byte
    /// (absolute, however slowly it trickles; then 408 and close), and the HTTP/2 preface
    /// from the end of the TLS handshake.
    #[arg(
        long,
        value_name = "TIME",
        default_value = "10s",
        requires = "rpm_port"
    )]
    rpm_head_timeout: Dur,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics: tests started and finished by
    /// kind and outcome, payload bytes by kind and direction, clients refused by reason,
    /// connections by protocol, the interfaces' counters, the process's CPU, memory and
    /// descriptors. No client addresses in labels. Plain HTTP, no key: bind it where only your
    /// monitoring reaches (127.0.0.1:9464).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Also act as an `ntttcp -r` receiver for stock ntttcp-for-linux senders (`ntttcp -s`):
    /// PORT is the first data port (ntttcp's default is 5001) and its sync port is PORT - 1.
    /// Each connection's bytes and the test's total are logged when it ends. Off by default:
    /// ntttcp senders cannot authenticate.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(2..))]
    ntttcp_port: Option<u16>,
    /// Data ports from --ntttcp-port (ntttcp's -P; a sender's `-m N,*,HOST` uses the first N).
    #[arg(long, value_name = "N", default_value_t = 16, requires = "ntttcp_port", value_parser = clap::value_parser!(u16).range(1..=512))]
    ntttcp_ports: u16,
    /// Several ntttcp senders per test, started together when the one with -L arrives
    /// (ntttcp's `-r -M`). Without it each sender address runs its own test.
    #[arg(long, requires = "ntttcp_port")]
    ntttcp_multi: bool,
    /// Data connections one ntttcp sender may open for its test (ntttcp's default sender opens
    /// 64: -P 16 ports, -n 4 threads each). A synced sender counts as a test
    /// (--max-tests-per-client, --max-tests) and may have this many connections handshaking
    /// beyond --max-pending-per-client until its test starts; more are closed. At most
    /// --max-flows.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "ntttcp_port", value_parser = clap::value_parser!(u32).range(1..))]
    ntttcp_max_conns: u32,
    /// Also serve stock OB-UDPST clients (`udpst -u` / `udpst -d`, RFC 9946 UDP Speed Test
    /// Protocol version 20) on this UDP port (RFC 9946's is 24601; 0 picks a free one), one or
    /// several connections per test (-C). Without --udpst-key / --udpst-key-file clients are
    /// not authenticated (one asking for -a gets "auth not configured"); with them every client
    /// must sign its requests. Each test counts against --max-tests-per-client and
    /// --max-tests, lasts at most --max-duration (the client's -t is coerced down) and is sent
    /// at most --max-rate / --udpst-max-rate. Off by default.
    #[arg(long, value_name = "PORT")]
    udpst_port: Option<u16>,
    /// Most Mbit/s a udpst test may reach: the sending-rate search stops at the table row
    /// below it, in both directions, and a client whose -B asks for more is refused with
    /// "capacity exceeded".
    #[arg(long, value_name = "MBPS", requires = "udpst_port", value_parser = clap::value_parser!(u32).range(1..=100000))]
    udpst_max_rate: Option<u32>,
    /// Require RFC 9946 authentication of udpst clients with this shared key (the client's
    /// `-a KEY`; at most 64 characters), whatever key ID the client names. Read from the
    /// HAKARU_UDPST_KEY environment variable when set there, so it stays out of `ps`.
    #[arg(long, value_name = "KEY", env = "HAKARU_UDPST_KEY", hide_env_values = true, requires = "udpst_port", value_parser = udpst_key)]
    udpst_key: Option<String>,
    /// Require RFC 9946 authentication with the keys of this file, in the reference's format
    /// (`KEYID,KEY` a line, KEYID 0-255, `#` comments; the client's `-K`/`-y`): the client's key
    /// ID picks the key. With --udpst-key too, that key is tried when the ID's fails.
    #[arg(long, value_name = "FILE", requires = "udpst_port")]
    udpst_key_file: Option<std::path::PathBuf>,
    /// Print `listening on ADDR` on stdout once serving, and stop when standard input closes:
    /// for launchers (`hakaru plan` over ssh, `ip netns exec`, `kubectl exec -i`), so the
    /// server ends with the connection that started it.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    #[command(flatten)]
    mesh: super::mesh::ServerFlags,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(a: Args) -> anyhow::Result<()> {
    let family = Family::from_flags(a.ipv4, a.ipv6);
    if let Some(ip) = a.bind {
        if (a.ipv4 && ip.is_ipv6()) || (a.ipv6 && ip.is_ipv4()) {
            anyhow::bail!(
                "--bind {ip} conflicts with {}",
                if a.ipv4 { "-4/--ipv4" } else { "-6/--ipv6" }
            );
        }
    }
    let psk = super::common::load_psk(a.psk_file.as_deref())?;
    warn_unkeyed(&a, psk.is_some())?;
    if a.netperf_passphrase.is_some() {
        tracing::warn!("--netperf-passphrase: the passphrase shows in the process list to every local user; --netperf-passphrase-file keeps it out");
    }
    let netperf_passphrase = netperf_passphrase(&a)?;
    let server = Server::bind(ServerConfig {
        bind: a.bind,
        port: a.port,
        family,
        limits: Limits {
            tests: a.max_tests as usize,
            tests_per_client: a.max_tests_per_client as usize,
            pending: a.max_pending as usize,
            pending_per_client: a.max_pending_per_client as usize,
            prefix_v4: a.client_prefix_v4,
            prefix_v6: a.client_prefix_v6,
        },
        acl: Acl::parse(&a.allow, &a.deny).map_err(anyhow::Error::msg)?,
        max_duration: Some(a.max_duration.0).filter(|d| !d.is_zero()),
        budgets: Budgets {
            test_memory: Some(a.max_test_memory.0).filter(|&b| b > 0),
            total_memory: Some(a.max_memory.0).filter(|&b| b > 0),
            busy_poll: a.allow_busy_poll,
        },
        max_rate: a.max_rate.map(|r| r.0),
        max_flows: a.max_flows,
        iperf3: match a.iperf3.as_deref() {
            Some(p) => p == "allow",
            None => psk.is_none(),
        },
        psk: psk.clone(),
        iperf3_json_output: a.iperf3_server_output == "json",
        sockperf_ports: a.sockperf_port,
        sockperf_threads: a.sockperf_threads.map(|n| n as usize),
        sockperf_reply_rate: a.sockperf_reply_rate,
        http_port: a.http_port,
        metrics: a.metrics,
        ntttcp_port: a.ntttcp_port,
        ntttcp_ports: a.ntttcp_ports,
        ntttcp_multi: a.ntttcp_multi,
        ntttcp_max_conns: a.ntttcp_max_conns,
        udpst_port: a.udpst_port,
        udpst_max_mbps: a.udpst_max_rate,
        udpst_keys: udpst_keys(a.udpst_key.clone(), a.udpst_key_file.as_deref())?,
        mesh: a.mesh.config(psk.clone(), a.port)?,
        netperf: hakaru_server::NetperfConfig {
            ports: a.netperf_port,
            passphrase: netperf_passphrase,
            per_client: a.max_netperf_per_client as usize,
            stall_timeout: a.stall_timeout.0,
            data_ports: a.netperf_data_ports,
            passphrase_failures: a.netperf_passphrase_failures,
        },
        rpm: rpm_config(&a)?,
    })
    .with_context(|| format!("starting the server on port {}", a.port))?;
    super::common::register_stop(&server.shutdown_flag())?;
    if a.exit_on_stdin_eof {
        let flag = server.shutdown_flag();
        std::thread::Builder::new()
            .name("hakaru-stdin".into())
            .spawn(move || {
                // Anything read is ignored; only the end of input matters.
                let mut sink = [0u8; 256];
                let mut stdin = std::io::stdin().lock();
                while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
                flag.store(true, std::sync::atomic::Ordering::Release);
            })
            .context("starting the standard input watcher")?;
        let addr = server
            .local_addr()
            .context("reading the listening address")?;
        super::super::output::out(&format!("listening on {addr}\n"));
    }
    server.run().context("serving")?;
    Ok(())
}

/// With a key: the ports whose clients cannot prove it, said once at start; netperf's needs
/// its passphrase.
fn warn_unkeyed(a: &Args, keyed: bool) -> anyhow::Result<()> {
    if keyed {
        if a.iperf3.as_deref() == Some("allow") {
            tracing::warn!("--iperf3 allow: iperf3 clients run tests without the key");
        }
        if a.http_port.is_some() {
            tracing::warn!("--http-port: HTTP clients are served without the key");
        }
        if a.rpm_port.is_some() {
            tracing::warn!("--rpm-port: responsiveness clients are served without the key");
        }
        if a.udpst_port.is_some() && a.udpst_key.is_none() && a.udpst_key_file.is_none() {
            tracing::warn!("--udpst-port: udpst clients are served without authentication (--udpst-key or --udpst-key-file requires it)");
        }
        if a.ntttcp_port.is_some() {
            tracing::warn!("--ntttcp-port: ntttcp senders are served without the key (they cannot authenticate)");
        }
        if a.sockperf_port.is_some() {
            tracing::warn!("--sockperf-port: sockperf clients are answered without the key (they cannot authenticate)");
        }
        if a.netperf_port.is_some()
            && a.netperf_passphrase.is_none()
            && a.netperf_passphrase_file.is_none()
        {
            anyhow::bail!("--netperf-port with a key: netperf clients cannot prove the key; give --netperf-passphrase-file FILE (netperf -Z WORD sends it in plaintext) or leave out --netperf-port");
        }
    }
    Ok(())
}

/// What `--rpm-port` and its companions ask, their values checked; the server binds the port
/// with its others and admits its clients by its own access list and client prefixes.
fn rpm_config(a: &Args) -> anyhow::Result<Option<hakaru_server::RpmConfig>> {
    let Some(port) = a.rpm_port else {
        return Ok(None);
    };
    if let Some(cc) = &a.rpm_congestion {
        hakaru_model::check_congestion_name(cc).map_err(|e| {
            super::common::UsageError(e.0.replace("-C/--congestion", "--rpm-congestion"))
        })?;
    }
    if a.rpm_head_timeout.0.is_zero() {
        return Err(
            super::common::UsageError("--rpm-head-timeout must be more than 0".into()).into(),
        );
    }
    Ok(Some(hakaru_server::RpmConfig {
        port,
        files: a.tls_cert.clone().zip(a.tls_key.clone()),
        congestion: a.rpm_congestion.clone(),
        limits: hakaru_rpm::Limits {
            connections: a.rpm_max_connections as usize,
            per_client: a.rpm_max_per_client as usize,
            memory: Some(a.rpm_max_memory.0).filter(|&b| b > 0),
            head_timeout: a.rpm_head_timeout.0,
            ..hakaru_rpm::Limits::default()
        },
    }))
}

/// The netperf passphrase from --netperf-passphrase or --netperf-passphrase-file, checked
/// for what netperf can send.
fn netperf_passphrase(a: &Args) -> anyhow::Result<Option<Vec<u8>>> {
    let usage = |m: String| anyhow::Error::from(super::common::UsageError(m));
    let max = hakaru_server::NETPERF_MAX_PASSPHRASE;
    let (word, flag) = match (&a.netperf_passphrase, &a.netperf_passphrase_file) {
        (Some(w), _) => (w.clone(), "--netperf-passphrase".to_string()),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let flag = "--netperf-passphrase-file -".to_string();
            let line = super::stdin::stdin_line(&flag, "the passphrase", max).map_err(usage)?;
            (line.trim().to_string(), flag)
        }
        (None, Some(f)) => {
            let flag = format!("--netperf-passphrase-file {}", f.display());
            let text = std::fs::read_to_string(f)
                .map_err(|e| usage(format!("{flag}: cannot read it: {e}")))?;
            (text.trim().to_string(), flag)
        }
        (None, None) => return Ok(None),
    };
    if word.is_empty() || word.len() > max || word.contains(['\n', '\0']) {
        return Err(usage(format!(
            "{flag}: {} bytes{}; netperf sends one line of 1 to {max} bytes",
            word.len(),
            if word.contains('\n') {
                " on several lines"
            } else {
                ""
            }
        )));
    }
    Ok(Some(word.into_bytes()))
}

/// `--netperf-data-ports FIRST-LAST` (or one port).
fn parse_data_ports(s: &str) -> Result<(u16, u16), String> {
    let port = |w: &str| {
        w.trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("{w:?} is not a port (1 to 65535)"))
    };
    let (first, last) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(s)?, port(s)?),
    };
    if last < first {
        return Err(format!("{s}: give FIRST-LAST with FIRST <= LAST"));
    }
    Ok((first, last))
}

/// `PORT` or `FIRST-LAST` (at most [`MAX_PORT_RANGE`] ports), for `--netperf-port` and
/// `--sockperf-port`; a single 0 picks a free port.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let port = |w: &str| {
        w.trim()
            .parse::<u16>()
            .map_err(|_| format!("{w:?} is not a port (0 to 65535)"))
    };
    let (first, last) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(s)?, port(s)?),
    };
    if last < first || (first == 0 && last != 0) {
        return Err(format!("{s}: give FIRST-LAST with 1 <= FIRST <= LAST"));
    }
    if last - first >= MAX_PORT_RANGE {
        return Err(format!(
            "{s}: {} ports; at most {MAX_PORT_RANGE} in one range",
            u32::from(last - first) + 1
        ));
    }
    Ok((first, last))
}

/// `--udpst-key`: 1 to 64 characters, as the reference's `-a`.
fn udpst_key(s: &str) -> Result<String, String> {
    hakaru_server::UdpstKeys::new(Some(s.to_string()), None).map(|_| s.to_string())
}

/// The udpst keys from `--udpst-key` and `--udpst-key-file`.
fn udpst_keys(
    any: Option<String>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<hakaru_server::UdpstKeys> {
    let text = match file {
        None => None,
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("--udpst-key-file {}: {e}", p.display()))?,
        ),
    };
    hakaru_server::UdpstKeys::new(any, text.as_deref()).map_err(|e| match file {
        Some(p) => anyhow::anyhow!("--udpst-key-file {}: {e}", p.display()),
        None => anyhow::anyhow!("--udpst-key: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_port_range;

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("0"), Ok((0, 0)));
        assert_eq!(parse_port_range("11111"), Ok((11111, 11111)));
        assert_eq!(parse_port_range("6666-6729"), Ok((6666, 6729)));
        assert_eq!(parse_port_range(" 7 - 7 "), Ok((7, 7)));
        assert_eq!(parse_port_range("1000-2023"), Ok((1000, 2023)));
        let e = parse_port_range("1000-2024").unwrap_err();
        assert!(
            e.contains("1025 ports") && e.contains("at most 1024"),
            "{e}"
        );
        let e = parse_port_range("5-3").unwrap_err();
        assert!(e.contains("FIRST <= LAST"), "{e}");
        assert!(parse_port_range("0-5").is_err());
        assert!(parse_port_range("65536")
            .unwrap_err()
            .contains("not a port"));
        assert!(parse_port_range("a-b").is_err());
        assert!(parse_port_range("").is_err());
    }
}
