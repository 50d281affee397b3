//! `hakaru source`: send a plain TCP stream or UDP datagrams to any receiver (ttcp -r,
//! nc -l, hakaru sink) and report what was sent, ttcp-style.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use anyhow::Context;
use hakaru_engine::raw;
use hakaru_model::{BitRate, Bytes, Dur, RawProtocol, RawRole, RawSpec};

use super::common::{split_host_port, stop_flag, Formats, UsageError};
use super::raw::RawOutput;

/// Buffers sent when neither -k, -n, -t nor --stdin is given (ttcp's default).
pub const DEFAULT_COUNT: u64 = 2048;

/// Options of `hakaru source`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Receiver: HOST:PORT or [v6]:PORT, or HOST with -p PORT.
    #[arg(value_name = "HOST:PORT")]
    target: String,
    /// Receiver port, when HOST has none.
    #[arg(short, long)]
    port: Option<u16>,
    /// Send UDP datagrams instead of a TCP stream.
    #[arg(short, long)]
    udp: bool,
    /// Local address to send from (TCP and UDP).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Bytes per write (TCP, default 128K) or per datagram (UDP, default 1470).
    #[arg(short, long, value_name = "SIZE")]
    length: Option<Bytes>,
    /// Buffers (writes or datagrams) to send, like ttcp's -n; default 2048 unless -n, -t or
    /// --stdin is given.
    #[arg(
        short = 'k',
        long = "blocks",
        value_name = "N",
        conflicts_with_all = ["bytes", "old_count"]
    )]
    count: Option<u64>,
    /// The old spelling of --blocks (deprecated).
    #[arg(
        long = "count",
        value_name = "N",
        hide = true,
        conflicts_with = "bytes"
    )]
    old_count: Option<u64>,
    /// Bytes to send (128K, 1G), rounded up to whole -l buffers; -n is bytes in every hakaru
    /// command (ttcp's buffer count is -k here).
    #[arg(short = 'n', long, value_name = "SIZE")]
    bytes: Option<SizeArg>,
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
    #[command(flatten)]
    formats: Formats,
}

/// A SIZE as typed: the bytes, and whether it was a bare number (no unit), as a ttcp user
/// would type a buffer count.
#[derive(Debug, Clone, Copy)]
struct SizeArg {
    bytes: Bytes,
    bare: bool,
}

impl std::str::FromStr for SizeArg {
    type Err = hakaru_model::UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SizeArg {
            bytes: s.parse()?,
            bare: !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()),
        })
    }
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
        let by_bytes = a.bytes.map(|b| b.bytes.0.div_ceil(length.0.max(1)));
        let count = match (a.count.or(a.old_count).or(by_bytes), a.time, a.stdin) {
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

fn resolve(a: &Args) -> anyhow::Result<SocketAddr> {
    let (target, bind) = (&a.target, a.bind);
    let usage = |m: String| anyhow::Error::from(UsageError(m));
    let (host, port) = split_host_port(target).map_err(usage)?;
    let port = match (port, a.port) {
        (Some(x), Some(y)) if x != y => {
            return Err(usage(format!(
                "{target} gives port {x} but -p/--port gives {y}: give the port once"
            )))
        }
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => {
            return Err(usage(format!(
                "HOST:PORT '{target}': no port (a receiver has no default port: give HOST:PORT or -p PORT)"
            )))
        }
    };
    let addrs: Vec<SocketAddr> = (host.as_str(), port)
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
    let format = a.formats.format();
    if a.old_count.is_some() {
        eprintln!(
            "hakaru: note: --count is deprecated; it is -k/--blocks now (-n is bytes in every hakaru command)"
        );
    }
    if let Some(n) = a.bytes.filter(|n| n.bare) {
        eprintln!(
            "hakaru: note: -n is a byte count in every hakaru command ({} B here); ttcp's buffer count is -k",
            n.bytes.0
        );
    }
    let peer = resolve(&a)?;
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
    match r.detail.raw().and_then(|r| r.error.clone()) {
        Some(e) => anyhow::bail!("{e}"),
        None => Ok(()),
    }
}
