//! `hakaru sink`: receive a plain TCP stream or UDP datagrams from any sender (ttcp -t, nc,
//! an iperf2 client) and report what arrived, ttcp-style.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

use anyhow::Context;
use hakaru_engine::raw;
use hakaru_model::{Bytes, Dur, RawProtocol, RawRole, RawSpec, MAX_UDP_PAYLOAD};

use super::common::{stop_flag, Formats};
use super::raw::RawOutput;

/// Default port: ttcp's and iperf2's.
pub const DEFAULT_RAW_PORT: u16 = 5001;

/// Options of `hakaru sink`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Receive UDP datagrams instead of a TCP stream.
    #[arg(short, long)]
    udp: bool,
    /// Port to listen on.
    #[arg(short, long, default_value_t = DEFAULT_RAW_PORT)]
    port: u16,
    /// Local address to listen on (default 0.0.0.0; give :: for IPv6).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Bytes per read call (TCP, default 128K; UDP always reads whole datagrams).
    #[arg(short, long, value_name = "SIZE")]
    length: Option<Bytes>,
    /// UDP: the transfer ends after this long without a datagram.
    #[arg(long, value_name = "TIME", default_value = "2")]
    idle: Dur,
    /// Write the received data to stdout (reports then go to stderr), like ttcp -r -s.
    #[arg(long)]
    stdout: bool,
    /// Speak iperf2: read its test header (and ack it for -X), take a -P client's streams as
    /// one transfer, answer each UDP FIN with a server report so `iperf -c -u` prints it and
    /// exits normally.
    #[arg(long)]
    iperf2: bool,
    /// UDP: count datagrams of 4 bytes or fewer as data instead of ttcp's start/end markers.
    #[arg(long)]
    no_markers: bool,
    /// Serve transfers one after another instead of exiting after the first.
    #[arg(long)]
    keep: bool,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    interval: Dur,
    /// --json: one JSON document (docs/json.md): the transfer's result, or with --keep a JSON
    /// array of every transfer's result, printed when the sink stops; --json-stream: JSON
    /// Lines events (start, interval, end) as each transfer goes.
    #[command(flatten)]
    formats: Formats,
}

impl TryFrom<&Args> for RawSpec {
    type Error = anyhow::Error;
    fn try_from(a: &Args) -> anyhow::Result<RawSpec> {
        let spec = RawSpec {
            role: RawRole::Sink,
            protocol: if a.udp {
                RawProtocol::Udp
            } else {
                RawProtocol::Tcp
            },
            length: match (a.length, a.udp) {
                (Some(l), _) => l,
                (None, false) => Bytes(128 << 10),
                (None, true) => Bytes(MAX_UDP_PAYLOAD),
            },
            count: None,
            duration: None,
            rate: None,
            interval: a.interval,
            idle: a.idle,
            stdio: a.stdout,
            iperf2: a.iperf2,
            markers: !a.no_markers,
        };
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
        Ok(spec)
    }
}

/// Runs `hakaru sink`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let spec = RawSpec::try_from(&a)?;
    let format = a.formats.format();
    let mut out = RawOutput::new(format, a.stdout);
    if a.keep {
        out = out.several();
    }
    let addr = SocketAddr::new(a.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), a.port);
    let mut failed = None;
    let mut results = Vec::new();
    // The transfers so far are printed even when the sink stops on an error.
    let served = serve(&a, &spec, &out, addr, &mut failed, &mut results);
    out.finish_all(&results);
    served?;
    match failed {
        Some(e) => anyhow::bail!("{e}"),
        None => Ok(()),
    }
}

/// Serves transfers (one, or until stopped with --keep), collecting their results.
fn serve(
    a: &Args,
    spec: &RawSpec,
    out: &RawOutput,
    addr: SocketAddr,
    failed: &mut Option<String>,
    results: &mut Vec<hakaru_model::RunResult>,
) -> anyhow::Result<()> {
    let stop = stop_flag()?;
    let iface = a.bind.and_then(hakaru_engine::sys::interface_for_addr);
    if a.udp {
        let sock =
            UdpSocket::bind(addr).with_context(|| format!("-p/--port: binding UDP {addr}"))?;
        let local = sock
            .local_addr()
            .map_or(addr.to_string(), |l| l.to_string());
        // On stderr in every format, so scripts (and tests) can learn a port 0 choice.
        eprintln!("hakaru sink: listening on udp {local}");
        loop {
            out.start(spec, &local);
            let o = raw::udp_sink(&sock, spec, iface.clone(), out.on_sample(spec), &stop)?;
            let interrupted = o.interrupted;
            let r = out.finish(spec, &local, o);
            *failed = r
                .detail
                .raw()
                .as_ref()
                .and_then(|r| r.error.clone())
                .or(failed.take());
            results.push(r);
            if interrupted || !a.keep {
                break;
            }
        }
    } else {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("-p/--port: listening on TCP {addr}"))?;
        let local = listener
            .local_addr()
            .map_or(addr.to_string(), |l| l.to_string());
        eprintln!("hakaru sink: listening on tcp {local}");
        loop {
            out.start(spec, &local);
            let Some((stream, peer)) = raw::accept_one(&listener, &stop)? else {
                break;
            };
            let iface = iface
                .clone()
                .or_else(|| hakaru_engine::sys::interface_for_addr(peer.ip()));
            let o = raw::tcp_sink(stream, &listener, spec, iface, out.on_sample(spec), &stop)?;
            let interrupted = o.interrupted;
            let r = out.finish(spec, &local, o);
            *failed = r
                .detail
                .raw()
                .as_ref()
                .and_then(|r| r.error.clone())
                .or(failed.take());
            results.push(r);
            if interrupted || !a.keep {
                break;
            }
        }
    }
    Ok(())
}
