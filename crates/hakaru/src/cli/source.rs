//! `hakaru source`: send a plain TCP stream or UDP datagrams to any receiver (ttcp -r,
//! nc -l, hakaru sink) and report what was sent, ttcp-style.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::Context;
use hakaru_engine::raw;
use hakaru_model::{BitRate, Bytes, Dur, RawProtocol, RawRole, RawSpec};

use super::common::stop_flag;
use super::raw::RawOutput;
use crate::output::Format;

/// Buffers sent when neither -n, -t nor --stdin is given (ttcp's default).
pub const DEFAULT_COUNT: u64 = 2048;

/// Options of `hakaru source`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Receiver as HOST:PORT (`[v6addr]:port` for IPv6).
    #[arg(value_name = "HOST:PORT")]
    target: String,
    /// Send UDP datagrams instead of a TCP stream.
    #[arg(short, long)]
    udp: bool,
    /// Local address to send from (TCP and UDP).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1470).
    #[arg(short, long, value_name = "SIZE")]
    length: Option<Bytes>,
    /// Buffers (writes or datagrams) to send; default 2048 unless -t or --stdin is given.
    #[arg(short = 'n', long, value_name = "COUNT")]
    count: Option<u64>,
    /// Send for this long instead of a count (10, 500ms).
    #[arg(short, long, value_name = "TIME")]
    time: Option<Dur>,
    /// UDP: pace datagrams to this rate (10M, 1G); default as fast as the socket takes them.
    #[arg(short, long = "bitrate", value_name = "RATE")]
    bitrate: Option<BitRate>,
    /// Send stdin until its end instead of generated data, like ttcp -t -s.
    #[arg(long)]
    stdin: bool,
    /// UDP: send no ttcp start/end markers (4-byte datagrams) around the data.
    #[arg(long)]
    no_markers: bool,
    /// How long connecting may take.
    #[arg(long, value_name = "TIME", default_value = "5")]
    connect_timeout: Dur,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// Print one JSON document for the run (schema: docs/json.md).
    #[arg(long, conflicts_with = "json_stream")]
    json: bool,
    /// Print JSON Lines events (start, interval, end) as the run goes.
    #[arg(long)]
    json_stream: bool,
}

impl TryFrom<&Args> for RawSpec {
    type Error = anyhow::Error;
    fn try_from(a: &Args) -> anyhow::Result<RawSpec> {
        let protocol = if a.udp {
            RawProtocol::Udp
        } else {
            RawProtocol::Tcp
        };
        let length = a.length.unwrap_or(match protocol {
            RawProtocol::Tcp => Bytes(128 << 10),
            RawProtocol::Udp => Bytes(1470),
        });
        let count = match (a.count, a.time, a.stdin) {
            (None, None, false) => Some(DEFAULT_COUNT),
            (c, _, _) => c,
        };
        let spec = RawSpec {
            role: RawRole::Source,
            protocol,
            length,
            count,
            duration: a.time,
            rate: a.bitrate,
            interval: a.interval,
            idle: Dur(Duration::from_secs(2)),
            stdio: a.stdin,
            iperf2: false,
            markers: !a.no_markers,
        };
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
        Ok(spec)
    }
}

fn resolve(target: &str, bind: Option<IpAddr>) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = target
        .to_socket_addrs()
        .with_context(|| {
            format!("HOST:PORT '{target}': cannot resolve (expected e.g. 127.0.0.1:5001)")
        })?
        .collect();
    addrs
        .iter()
        .find(|a| bind.is_none_or(|b| b.is_ipv4() == a.is_ipv4()))
        .copied()
        .ok_or_else(|| anyhow::anyhow!("HOST:PORT '{target}': no address of -B/--bind's family"))
}

/// Runs `hakaru source`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let spec = RawSpec::try_from(&a)?;
    let format = if a.json {
        Format::Json
    } else if a.json_stream {
        Format::JsonStream
    } else {
        Format::Text
    };
    let peer = resolve(&a.target, a.bind)?;
    let out = RawOutput::new(format, false);
    let stop = stop_flag()?;
    out.start(&spec, &peer.to_string());
    let r = if a.udp {
        let local = SocketAddr::new(
            a.bind.unwrap_or(if peer.is_ipv4() {
                IpAddr::from([0, 0, 0, 0])
            } else {
                IpAddr::from([0u16; 8])
            }),
            0,
        );
        let sock = UdpSocket::bind(local).with_context(|| format!("-B/--bind: binding {local}"))?;
        sock.connect(peer)
            .with_context(|| format!("HOST:PORT: connecting UDP to {peer}"))?;
        let local_s = sock.local_addr().map_or(String::new(), |l| l.to_string());
        let iface = sock
            .local_addr()
            .ok()
            .and_then(|l| hakaru_engine::sys::interface_for_addr(l.ip()));
        let o = raw::udp_source(&sock, &spec, iface, out.on_sample(&spec), &stop)?;
        out.finish(&spec, &local_s, o)
    } else {
        let stream = raw::connect_tcp(peer, a.bind, a.connect_timeout.0)?;
        let local_s = stream.local_addr().map_or(String::new(), |l| l.to_string());
        let iface = stream
            .local_addr()
            .ok()
            .and_then(|l| hakaru_engine::sys::interface_for_addr(l.ip()));
        let o = raw::tcp_source(stream, &spec, iface, out.on_sample(&spec), &stop)?;
        out.finish(&spec, &local_s, o)
    };
    match r.raw.and_then(|r| r.error) {
        Some(e) => anyhow::bail!("{e}"),
        None => Ok(()),
    }
}
