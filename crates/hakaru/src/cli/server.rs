//! `hakaru server`: one process, one control port, many clients and tests at once. The same
//! port serves stock iperf3 clients (3.12 and later), each test isolated; with
//! `--sockperf-port` it also answers stock sockperf clients, like `sockperf sr`.

use std::net::IpAddr;

use anyhow::Context;
use hakaru_server::{Family, Server, ServerConfig, DEFAULT_PORT};

/// Options of `hakaru server`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (default: every address, IPv6 and IPv4).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    bind: Option<IpAddr>,
    /// Control port; data connections arrive on it too.
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
    /// What iperf3 clients that pass --get-server-output receive: iperf3's text (default) or
    /// its -J document (as from `iperf3 -s -J`).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    iperf3_server_output: String,
    /// Also answer stock sockperf clients (`sockperf pp`, `ul`, `tp`, UDP and `--tcp`) on this
    /// port, like `sockperf sr` (sockperf's default is 11111; 0 picks a free port). Each
    /// client's messages, bytes and replies are logged when it ends.
    #[arg(long, value_name = "PORT")]
    sockperf_port: Option<u16>,
    /// Print `listening on ADDR` on stdout once serving, and stop when standard input closes:
    /// for launchers (`hakaru plan` over ssh, `ip netns exec`, `kubectl exec -i`), so the
    /// server ends with the connection that started it.
    #[arg(long)]
    exit_on_stdin_eof: bool,
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
    let server = Server::bind(ServerConfig {
        bind: a.bind,
        port: a.port,
        family,
        max_tests: a.max_tests as usize,
        iperf3_json_output: a.iperf3_server_output == "json",
        sockperf_port: a.sockperf_port,
        ..ServerConfig::default()
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
