//! Pieces shared by subcommands: logging, usage errors, CPU lists, signals.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hakaru_client::{run_test, ClientOptions, Family};
use hakaru_model::{Amount, Bytes, Direction, Dur, TestSpec};
use hakaru_server::{Server, ServerConfig, ServerHandle, DEFAULT_PORT};

use crate::output::{self, Format};

pub use super::files::write_whole;

/// Where a client test runs and how it reports: flags shared by every client subcommand.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// Server to measure against: HOST, HOST:PORT, [v6] or [v6]:PORT. Omit it to run against
    /// an in-process server on loopback.
    pub host: Option<String>,
    /// Server port (TCP for control and data, UDP for UDP flows) [default: 5201].
    #[arg(short, long)]
    pub port: Option<u16>,
    /// Local address for control and data sockets.
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Pre-shared key for a server started with one (the file's text, trimmed; at least 16
    /// bytes). `-` reads the key from the first line of standard input (the rest stays for
    /// --sync-start), so it is on no command line and in no environment. HAKARU_PSK holds
    /// the key itself when this is not given.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<std::path::PathBuf>,
    /// IPv4 only.
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Pin this end's flow workers to these CPUs, round robin (0,2,4-7).
    #[arg(short = 'A', long, value_name = "CPUS")]
    pub affinity: Option<CpuList>,
    /// How long connecting to the server may take (`connect`: also each test connection's
    /// connect, request and response; a slower one counts as failed).
    #[arg(long, value_name = "TIME", default_value = "5")]
    pub connect_timeout: Dur,
    #[command(flatten)]
    pub formats: Formats,
    #[command(flatten)]
    pub view: ViewFlags,
    #[command(flatten)]
    pub files: OutputFiles,
    /// Set from [`Iperf3Peer`] by the subcommands that have it.
    #[arg(skip)]
    pub iperf3: bool,
    /// Set by `hakaru tcp --ntttcp`.
    #[arg(skip)]
    pub ntttcp: bool,
    /// Set from [`NetperfPeer`] by the subcommands that have it.
    #[arg(skip)]
    pub netperf: bool,
    /// `--netperf-passphrase`, likewise.
    #[arg(skip)]
    pub netperf_passphrase: Option<String>,
    /// Synchronised start: set the test up (connections, flows), print a `ready` event
    /// (--json-stream) or a line on stderr, and start only when a line `go` arrives on standard
    /// input; `stop` or the end of input stops the test. `hakaru plan` drives clients this way.
    #[arg(long)]
    pub sync_start: bool,
}

/// `--format`, `--json` (`-J`) and `--json-stream`: the same three flags on every subcommand
/// that produces a result. Which formats a subcommand accepts is set in `cli::command`.
#[derive(Debug, Clone, clap::Args)]
pub struct Formats {
    /// Output format: text, json (one document at the end, docs/json.md) or json-stream
    /// (JSON Lines as the run goes).
    #[arg(long, value_name = "FORMAT", value_parser = super::format::any_run(), conflicts_with_all = ["json", "json_stream"])]
    pub format: Option<Format>,
    /// Same as --format json: one JSON document at the end.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    pub json: bool,
    /// Same as --format json-stream: JSON Lines events as the run goes.
    #[arg(long)]
    pub json_stream: bool,
}

impl Formats {
    /// The output format the flags ask for (text when none).
    pub fn format(&self) -> Format {
        if let Some(f) = self.format {
            f
        } else if self.json {
            Format::json()
        } else if self.json_stream {
            Format::json_stream()
        } else {
            Format::text()
        }
    }
}

/// Files a finished run is also written to, whatever is printed.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputFiles {
    /// Also write the result as one JSON document to FILE (for `hakaru report` and
    /// `hakaru compare` later), whatever the format printed.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Also write an HTML report with charts of the result to FILE (as `hakaru report`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
    /// The archive and the Pushgateway.
    #[command(flatten)]
    pub keep: super::keep::Keep,
}

impl OutputFiles {
    /// Writes the files asked for (each whole or not at all), then saves and pushes the run.
    pub fn write(&self, r: &hakaru_model::RunResult) -> anyhow::Result<()> {
        let json = hakaru_report::json::render(r);
        self.write_content(
            || json.clone(),
            || hakaru_report::html::Content::Run(Box::new(r.clone())),
        )?;
        self.keep_run(hakaru_report::summary::of_run(r), Some(r), json)
    }

    fn keep_run(
        &self,
        summary: hakaru_report::summary::Summary,
        run: Option<&hakaru_model::RunResult>,
        json: String,
    ) -> anyhow::Result<()> {
        self.keep.keep(super::keep::Finished {
            summary,
            run,
            json,
            written_to: self.output.as_deref(),
        })
    }

    /// The same for a `--find-max` result (JSON only: a report draws test results).
    pub fn write_find_max(&self, r: &hakaru_model::capacity::FindMaxResult) -> anyhow::Result<()> {
        if self.report.is_some() {
            return Err(UsageError(
                "--report draws test results; write the search with -o FILE instead".into(),
            )
            .into());
        }
        let text = serde_json::to_string_pretty(r).unwrap_or_default() + "\n";
        if let Some(path) = &self.output {
            write_whole(path, text.as_bytes())
                .with_context(|| format!("-o/--output {}", path.display()))?;
        }
        self.keep_run(hakaru_report::summary::of_find_max(r), None, text)
    }

    /// The same for a `quick` result.
    pub fn write_quick(&self, q: &hakaru_model::QuickResult) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(q).unwrap_or_default() + "\n";
        let content = hakaru_report::html::Content::Quick(Box::new(q.clone()));
        let summary = hakaru_report::summary::of_content(&content);
        self.write_content(|| json.clone(), || content)?;
        self.keep_run(summary, None, json)
    }

    /// The same for a `mesh report` snapshot.
    pub fn write_mesh(&self, m: &hakaru_model::mesh::MeshReport) -> anyhow::Result<()> {
        let json = serde_json::to_string_pretty(m).unwrap_or_default() + "\n";
        let content = hakaru_report::html::Content::Mesh(Box::new(m.clone()));
        let summary = hakaru_report::summary::of_content(&content);
        self.write_content(|| json.clone(), || content)?;
        self.keep_run(summary, None, json)
    }

    fn write_content(
        &self,
        json: impl FnOnce() -> String,
        content: impl FnOnce() -> hakaru_report::html::Content,
    ) -> anyhow::Result<()> {
        if let Some(path) = &self.output {
            write_whole(path, json().as_bytes())
                .with_context(|| format!("-o/--output {}", path.display()))?;
        }
        if let Some(path) = &self.report {
            let input = hakaru_report::html::Input {
                label: path.display().to_string(),
                content: content(),
            };
            let html = hakaru_report::html::report(&[input])
                .map_err(|e| anyhow::anyhow!("--report {}: {e}", path.display()))?;
            write_whole(path, html.as_bytes())
                .with_context(|| format!("--report {}", path.display()))?;
        }
        Ok(())
    }
}

/// How much of a text report to print (JSON always has everything).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ViewFlags {
    /// Text: print only the per-direction sums and the headline (no live intervals, no
    /// per-flow rows, no end details).
    #[arg(short = 'q', long, visible_alias = "summary-only")]
    pub quiet: bool,
    /// Text: show per-flow rows even with more than 8 flows per direction.
    #[arg(long)]
    pub per_flow: bool,
    /// Text: do not fold long lines to 100 columns; show every column.
    #[arg(long)]
    pub wide: bool,
}

impl ViewFlags {
    /// The report crate's view for these flags.
    pub fn view(&self) -> hakaru_report::View {
        hakaru_report::View {
            summary_only: self.quiet,
            per_flow: self.per_flow,
            wide: self.wide,
        }
    }
}

/// `--iperf3`: only on the subcommands an iperf3 server can run (tcp, udp, pps).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Iperf3Peer {
    /// The server is a stock iperf3 server (`iperf3 -s`): speak its protocol. Receiver
    /// figures come from iperf3's results exchange; live intervals show this end only.
    #[arg(long)]
    pub iperf3: bool,
}

/// Subcommands that can hold their start for a coordinator.
const SYNC_COMMANDS: [&str; 5] = ["tcp", "udp", "pps", "latency", "connect"];

impl Target {
    /// Checks flag combinations clap cannot express; `command` is the subcommand's name.
    pub fn check(&self, command: &str) -> anyhow::Result<()> {
        if let Some(doc) = super::format::document_of(command) {
            self.format().check(doc)?;
        }
        if self.sync_start && !SYNC_COMMANDS.contains(&command) {
            return Err(UsageError(format!(
                "--sync-start works with `hakaru tcp`, `udp`, `pps`, `latency` and `connect`, not `hakaru {command}`"
            ))
            .into());
        }
        let max = hakaru_client::NETPERF_MAX_PASSPHRASE;
        if let Some(p) = self.netperf_passphrase.as_ref().filter(|p| p.len() > max) {
            return Err(UsageError(format!(
                "--netperf-passphrase: {} bytes; a netperf passphrase is at most {max}",
                p.len()
            ))
            .into());
        }
        if self.netperf && self.iperf3 {
            return Err(UsageError(
                "--netperf and --iperf3 name different servers: give one".into(),
            )
            .into());
        }
        if self.sync_start && self.iperf3 {
            return Err(UsageError(
                "--sync-start needs a hakaru server: an iperf3 server cannot hold its start (drop --iperf3)".into(),
            )
            .into());
        }
        if self.ipv4 && self.bind.is_some_and(|b| b.is_ipv6()) {
            anyhow::bail!("-B/--bind is an IPv6 address but -4/--ipv4 was given");
        }
        if self.ipv6 && self.bind.is_some_and(|b| b.is_ipv4()) {
            anyhow::bail!("-B/--bind is an IPv4 address but -6/--ipv6 was given");
        }
        self.psk()?;
        if let Some(CpuList(cpus)) = &self.affinity {
            let n = hakaru_engine::sys::online_cpus();
            if let Some(bad) = cpus.iter().find(|&&c| c >= n) {
                return Err(UsageError(format!(
                    "-A/--affinity: CPU {bad} does not exist (this host has {n})"
                ))
                .into());
            }
        }
        Ok(())
    }

    /// The pre-shared key from --psk-file or HAKARU_PSK, if any.
    pub fn psk(&self) -> anyhow::Result<Option<hakaru_client::Psk>> {
        load_psk(self.psk_file.as_deref())
    }

    /// True when the test will run over IPv6 as far as the flags tell.
    pub fn looks_ipv6(&self) -> bool {
        self.ipv6
            || self.bind.is_some_and(|b| b.is_ipv6())
            || self
                .host
                .as_deref()
                .and_then(|h| h.parse::<IpAddr>().ok())
                .is_some_and(|ip| ip.is_ipv6())
    }

    /// The output format the flags ask for.
    pub fn format(&self) -> Format {
        self.formats.format()
    }

    /// Where tests go: HOST, or an in-process server on loopback when there is no HOST (kept
    /// running as long as the returned endpoint lives, so several tests can share it).
    pub fn endpoint(&self, spec: &TestSpec) -> anyhow::Result<Endpoint> {
        // Each flow (or connector) is one socket per end; the embedded server holds the other
        // end in-process.
        let per_flow = if self.host.is_some() { 1 } else { 2 };
        let sockets = match &spec {
            TestSpec::Connect(c) => c.connectors as u64,
            _ => spec.flow_plan().len() as u64,
        };
        let needed = sockets * per_flow + 64;
        if let Some(limit) = hakaru_engine::sys::raise_fd_limit() {
            if limit < needed {
                anyhow::bail!(
                    "-P/--parallel {}: needs about {needed} open files but this process may open {limit}; raise the limit (ulimit -n) or use fewer flows",
                    spec.common().flows
                );
            }
        }
        Ok(match self.host_port()? {
            Some((host, port)) => Endpoint {
                server: None,
                host,
                port,
            },
            None => {
                let ip = if self.ipv6 {
                    IpAddr::V6(Ipv6Addr::LOCALHOST)
                } else {
                    IpAddr::V4(Ipv4Addr::LOCALHOST)
                };
                let server = embedded_server(
                    ip,
                    ServerConfig {
                        // With a key, the embedded server asks for it too.
                        psk: self.psk()?,
                        // The user's own test on loopback: no budgets but the CPU count.
                        budgets: hakaru_server::Budgets::local(),
                        ..ServerConfig::default()
                    },
                )?;
                let port = server.addr().port();
                Endpoint {
                    server: Some(server),
                    host: ip.to_string(),
                    port,
                }
            }
        })
    }

    /// HOST and its port (from HOST:PORT, -p, or the default), or `None` without a HOST.
    pub fn host_port(&self) -> anyhow::Result<Option<(String, u16)>> {
        let Some(h) = &self.host else {
            return Ok(None);
        };
        let (host, port) = split_host_port(h).map_err(UsageError)?;
        match (port, self.port) {
            (Some(a), Some(b)) if a != b => Err(UsageError(format!(
                "{h} gives port {a} but -p/--port gives {b}: give the port once"
            ))
            .into()),
            (a, b) => Ok(Some((host, a.or(b).unwrap_or(DEFAULT_PORT)))),
        }
    }

    /// True when the port was given (-p or HOST:PORT).
    pub fn port_given(&self) -> bool {
        self.port.is_some()
            || matches!(
                self.host.as_deref().map(split_host_port),
                Some(Ok((_, Some(_))))
            )
    }

    /// HOST and -p as given, with no embedded server (for peers that are not hakaru).
    pub fn endpoint_without_server(&self) -> anyhow::Result<Endpoint> {
        Ok(match self.host_port()? {
            Some((host, port)) => Endpoint::remote(host, port),
            None => Endpoint::remote(
                self.loopback().to_string(),
                self.port.unwrap_or(DEFAULT_PORT),
            ),
        })
    }

    /// The loopback address of the family the flags ask for.
    pub fn loopback(&self) -> IpAddr {
        if self.ipv6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        }
    }

    /// Client options for running `spec` at `ep`.
    pub fn options(&self, ep: &Endpoint, spec: TestSpec) -> ClientOptions {
        ClientOptions {
            host: ep.host.clone(),
            port: ep.port,
            family: Family::from_flags(self.ipv4, self.ipv6),
            bind: self.bind,
            spec,
            affinity: self.affinity.clone().map(|c| c.0).unwrap_or_default(),
            embedded: ep.server.is_some(),
            connect_timeout: self.connect_timeout.0.max(Duration::from_millis(100)),
            full_log: None,
            histogram: false,
            iperf3: self.iperf3,
            ntttcp: self.ntttcp,
            netperf: self.netperf,
            netperf_passphrase: self.netperf_passphrase.clone().map(String::into_bytes),
            gate: None,
            // Checked by validate(); a file that vanished since reads as no key, which the
            // server then refuses by name.
            psk: self.psk().unwrap_or_default(),
        }
    }

    /// Runs `spec` against HOST, or against an in-process loopback server when there is no
    /// HOST, and prints the result in the chosen format.
    pub fn run(&self, spec: TestSpec) -> anyhow::Result<()> {
        if self.netperf {
            return self.run_netperf(spec);
        }
        let ep = self.endpoint(&spec)?;
        let opts = self.options(&ep, spec);
        run_and_print(self, &opts, self.sync_start)
    }
}

/// Where a client's tests go; owns the embedded server, if any, and stops it when dropped.
pub struct Endpoint {
    server: Option<hakaru_server::ServerHandle>,
    host: String,
    port: u16,
}

impl Endpoint {
    /// A server elsewhere (or one the caller runs itself).
    pub fn remote(host: String, port: u16) -> Endpoint {
        Endpoint {
            server: None,
            host,
            port,
        }
    }

    /// Host the tests go to.
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// Runs one test and prints its result (or its error) in the target's format and view;
/// `sync_start` holds the start until `go` arrives on standard input (`--sync-start`).
pub fn run_and_print(
    target: &Target,
    opts: &ClientOptions,
    sync_start: bool,
) -> anyhow::Result<()> {
    let format = target.format();
    let view = target.view.view();
    let stop = stop_flag()?;
    let mut opts = opts.clone();
    if sync_start {
        opts.gate = Some(super::sync::gate(format, Arc::clone(&stop)));
    }
    let mut observer = output::observer(format, view);
    let mut progress = output::Progress::new(output::is_quiet(format, view, &opts.spec));
    progress.step(opts.spec.name().to_string());
    let mut wrapped = output::WithProgress {
        inner: observer.as_mut(),
        progress: &progress,
    };
    let r = run_test(&opts, &mut wrapped, stop);
    progress.finish();
    match r {
        Ok(r) => {
            output::finish(format, view, &r)?;
            target.files.write(&r)
        }
        Err(e) => {
            observer.on_error(&e.to_string());
            Err(e.into())
        }
    }
}

/// The shape of a bulk test, shared by `tcp`, `udp` and `pps`: how long, how many flows, which
/// way, and the options both ends set.
#[derive(Debug, clap::Args)]
pub struct Shape {
    /// Test length after the warm-up (10, 30s, 500ms) [default: 10].
    #[arg(short, long, value_name = "TIME", conflicts_with_all = ["bytes", "blocks"])]
    pub time: Option<Dur>,
    /// Send exactly this many bytes per direction, split over the flows (128K, 1G), instead of a
    /// time (UDP rounds up to whole datagrams).
    #[arg(short = 'n', long, value_name = "SIZE", conflicts_with = "blocks")]
    pub bytes: Option<Bytes>,
    /// Send exactly this many blocks per direction instead of a time: writes of --length bytes
    /// for TCP, datagrams for UDP.
    #[arg(short = 'k', long, value_name = "N")]
    pub blocks: Option<u64>,
    /// Parallel flows per direction (1 to 1024), each its own connection or source port.
    #[arg(short = 'P', long, default_value_t = 1, value_name = "N")]
    pub parallel: u32,
    /// Reverse: the server sends, the client receives (the "receive direction").
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once: --parallel flows each way.
    #[arg(long)]
    pub bidir: bool,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends. TCP: disables autotuning.
    /// UDP: without it each receiving flow asks for 16 MiB split over the flows, between
    /// 128 KiB and 4 MiB (capped by net.core.rmem_max).
    #[arg(short, long, value_name = "SIZE")]
    pub window: Option<Bytes>,
    /// IP TOS byte (0-255, also 0x..), both ends.
    #[arg(long, value_parser = parse_u8, conflicts_with = "dscp")]
    pub tos: Option<u8>,
    /// DSCP code point (0-63), both ends; sets TOS to DSCP << 2.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: Option<u8>,
    /// Warm-up not counted in the totals (shown as omitted), added before --time.
    #[arg(short = 'O', long, value_name = "TIME", default_value = "0")]
    pub omit: Dur,
    /// Seconds between interval reports; 0 turns them off.
    #[arg(short, long, value_name = "TIME", default_value = "1")]
    pub interval: Dur,
    /// Pin the server's flow workers to these CPUs, round robin.
    #[arg(long, value_name = "CPUS")]
    pub server_affinity: Option<CpuList>,
    /// A flow that makes no progress for this long fails (a peer that stopped reading, a
    /// sender that cannot send). A TCP flow that waits while others of its direction move is
    /// starved by them (retransmission back-off on a congested path), not failed.
    #[arg(long, value_name = "TIME", default_value = "10")]
    pub stall_timeout: Dur,
}

impl Shape {
    /// Time or amount; 10 s when none is given.
    pub fn amount(&self) -> Amount {
        match (self.time, self.bytes, self.blocks) {
            (_, Some(b), _) => Amount::Bytes(b),
            (_, _, Some(k)) => Amount::Blocks(k),
            (Some(t), _, _) => Amount::Time(t),
            _ => Amount::Time(Dur::from_secs(10)),
        }
    }

    /// Which way data moves.
    pub fn direction(&self) -> Direction {
        if self.reverse {
            Direction::Reverse
        } else if self.bidir {
            Direction::Bidir
        } else {
            Direction::Forward
        }
    }

    /// The TOS byte from --tos or --dscp.
    pub fn tos(&self) -> Option<u8> {
        self.tos.or(self.dscp.map(|d| d << 2))
    }

    /// CPUs for the server's workers.
    pub fn server_affinity(&self) -> Vec<usize> {
        self.server_affinity
            .clone()
            .map(|c| c.0)
            .unwrap_or_default()
    }
}

/// Parses a byte value given in decimal or 0x hex (for --tos).
pub fn parse_u8(s: &str) -> Result<u8, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u8::from_str_radix(h, 16)
    } else {
        s.parse()
    };
    v.map_err(|_| format!("'{s}' is not a number from 0 to 255"))
}

/// Logs to stderr; level 0 warn, 1 info, 2 debug, 3+ trace. `RUST_LOG` overrides.
pub fn init_logging(level: u8) {
    let lvl = match level {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(lvl));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour_on_stderr())
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// A command-line mistake that only shows after parsing (an interface that does not exist);
/// the process exits 2, like clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Whether `e` is, or was caused by, a [`UsageError`] or a format asked for a document it
/// cannot write.
pub fn is_usage_error(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.is::<UsageError>() || c.is::<hakaru_report::export::Unsupported>())
}

/// A CPU list flag value such as `0,2,4-7`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_cpu_list(s).map(CpuList)
    }
}

/// Parses a CPU list such as `0,2,4-7`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("'{part}' is not a CPU number or range like 2-5");
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            if a > b || b >= 4096 {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            let c: usize = part.parse().map_err(|_| bad())?;
            if c >= 4096 {
                return Err(bad());
            }
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(out)
}

/// A flag set by the first SIGINT/SIGTERM; a second one exits at once.
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    register_stop(&flag)?;
    Ok(flag)
}

/// Sets `flag` on the first SIGINT/SIGTERM; a second one exits at once.
pub fn register_stop(flag: &Arc<AtomicBool>) -> anyhow::Result<()> {
    // On Windows the C runtime raises SIGINT for Ctrl-C and SIGTERM is accepted but never sent.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(flag))
            .context("installing the signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(flag))
            .context("installing the signal handler")?;
    }
    Ok(())
}

/// Splits HOST, HOST:PORT, [v6] and [v6]:PORT. A bare IPv6 address (more than one colon, no
/// brackets; a `%zone` allowed) is a host without a port; anything else with more than one
/// colon (`127.0.0.1:5201:x`, `host:1:2`) is refused, naming the forms.
pub fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let bad_port = |p: &str| format!("{s}: port {p:?} is not a number from 1 to 65535");
    let parse_port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad_port(p)),
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("{s}: missing ']' after the IPv6 address"));
        };
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{s}: {host} in brackets is not an IPv6 address"));
        }
        return match after {
            "" => Ok((host.to_string(), None)),
            p => match p.strip_prefix(':') {
                Some(p) => Ok((host.to_string(), Some(parse_port(p)?))),
                None => Err(format!("{s}: expected :PORT after ']'")),
            },
        };
    }
    match s.matches(':').count() {
        0 => Ok((s.to_string(), None)),
        1 => {
            let (host, p) = s.split_once(':').unwrap_or((s, ""));
            if host.is_empty() {
                return Err(format!("{s}: no host before the port"));
            }
            Ok((host.to_string(), Some(parse_port(p)?)))
        }
        _ => {
            let addr = s.split_once('%').map_or(s, |(a, _)| a);
            if addr.parse::<std::net::Ipv6Addr>().is_ok() {
                Ok((s.to_string(), None))
            } else {
                Err(format!(
                    "{s}: not an address of the form HOST, HOST:PORT, [IPv6] or [IPv6]:PORT (more than one ':' is only for an IPv6 address; give it a port as [IPv6]:PORT)"
                ))
            }
        }
    }
}

/// Reads a pre-shared key: from `file` when given (`-`: the first line of standard input),
/// else from HAKARU_PSK; `None` when neither.
pub fn load_psk(file: Option<&std::path::Path>) -> anyhow::Result<Option<hakaru_client::Psk>> {
    // A key that cannot be read or is too short is a usage error (exit 2).
    let usage = |m: String| anyhow::Error::from(UsageError(m));
    if let Some(f) = file {
        if f.as_os_str() == "-" {
            let text = stdin_key().map_err(usage)?;
            let k = hakaru_client::Psk::from_text(&text, "--psk-file - (standard input)")
                .map_err(usage)?;
            return Ok(Some(k));
        }
        let text = std::fs::read_to_string(f)
            .map_err(|e| usage(format!("--psk-file {}: cannot read it: {e}", f.display())))?;
        let k = hakaru_client::Psk::from_text(&text, &format!("--psk-file {}", f.display()))
            .map_err(usage)?;
        return Ok(Some(k));
    }
    match std::env::var("HAKARU_PSK") {
        Ok(v) => Ok(Some(
            hakaru_client::Psk::from_text(&v, "HAKARU_PSK").map_err(usage)?,
        )),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(usage("HAKARU_PSK is not UTF-8 text".into())),
    }
}

/// `--psk-file -`: the first line of standard input, read once per process (the key is asked
/// for more than once) and before anything else reads standard input.
fn stdin_key() -> Result<String, String> {
    static KEY: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    KEY.get_or_init(|| read_key_line(&mut std::io::stdin().lock()))
        .clone()
}

/// Reads one line (the key) from `r` and nothing past it: `r` is standard input's one shared
/// buffer, so the lines after the key stay there for whoever reads standard input next (the
/// server's lifeline, `--sync-start`'s `go` and `stop`).
fn read_key_line(r: &mut impl std::io::BufRead) -> Result<String, String> {
    super::stdin::read_line_of(r, "--psk-file -", "the key", hakaru_client::MAX_PSK_LEN)
}

/// An in-process `hakaru server` on loopback address `ip` (its control port ephemeral) with
/// what `with` opens beside it (an http, sockperf, rpm or udpst port; its budgets and key): the
/// embedded default of every subcommand run without a HOST. It stops when the handle drops.
pub fn embedded_server(ip: IpAddr, with: ServerConfig) -> anyhow::Result<ServerHandle> {
    Server::bind(ServerConfig {
        bind: Some(ip),
        port: 0,
        ..with
    })
    .and_then(Server::spawn)
    .context("starting the embedded loopback server")
}

#[cfg(test)]
mod tests {

    #[test]
    fn host_port_forms() {
        use super::split_host_port as sp;
        assert_eq!(sp("example.com").unwrap(), ("example.com".into(), None));
        assert_eq!(
            sp("10.0.0.1:5202").unwrap(),
            ("10.0.0.1".into(), Some(5202))
        );
        assert_eq!(sp("host:80").unwrap(), ("host".into(), Some(80)));
        assert_eq!(sp("::1").unwrap(), ("::1".into(), None));
        assert_eq!(sp("2001:db8::7").unwrap(), ("2001:db8::7".into(), None));
        assert_eq!(sp("fe80::1%eth0").unwrap(), ("fe80::1%eth0".into(), None));
        assert_eq!(sp("[::1]").unwrap(), ("::1".into(), None));
        assert_eq!(
            sp("[2001:db8::7]:5201").unwrap(),
            ("2001:db8::7".into(), Some(5201))
        );
        for bad in [
            "host:",
            "host:0",
            "host:70000",
            "host:http",
            "[::1",
            "[::1]5201",
            "[nothost]:1",
            ":80",
            "127.0.0.1:5201:x",
            "host:1:2",
            "2001:db8::7:5201:x",
        ] {
            assert!(sp(bad).is_err(), "{bad}");
        }
        assert!(sp("127.0.0.1:5201:x")
            .unwrap_err()
            .contains("HOST:PORT, [IPv6] or [IPv6]:PORT"));
        assert!(sp("host:http").unwrap_err().contains("\"http\""));
    }

    use super::*;

    #[test]
    fn psk_file_dash_takes_the_first_line_and_leaves_the_rest() {
        use std::io::BufRead;
        let key = "0123456789abcdef0123456789abcdef";
        let mut input = std::io::Cursor::new(format!("{key}\ngo\nstop\n").into_bytes());
        let line = read_key_line(&mut input).unwrap();
        assert_eq!(line, format!("{key}\n"));
        let psk = hakaru_client::Psk::from_text(&line, "t").unwrap();
        assert_eq!(
            psk.client_proof("a", "b"),
            hakaru_client::Psk::from_text(key, "t")
                .unwrap()
                .client_proof("a", "b")
        );
        // What follows the key is left for the next reader, line by line.
        let rest: Vec<String> = input.lines().map(Result::unwrap).collect();
        assert_eq!(rest, ["go", "stop"]);
        // Through a small buffer too: the key may arrive in pieces, the rest stays.
        let mut small = std::io::BufReader::with_capacity(
            4,
            std::io::Cursor::new(format!("{key}\ngo\n").into_bytes()),
        );
        assert_eq!(read_key_line(&mut small).unwrap().trim(), key);
        assert_eq!(small.lines().next().unwrap().unwrap(), "go");
        // No line, or no end of line within a key's length, is not a key.
        let e = read_key_line(&mut std::io::Cursor::new(Vec::new())).unwrap_err();
        assert!(e.contains("ended before"), "{e}");
        let long = "k".repeat(hakaru_client::MAX_PSK_LEN + 10);
        let e = read_key_line(&mut std::io::Cursor::new(long.into_bytes())).unwrap_err();
        assert!(e.contains("longer than"), "{e}");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0,2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("99999").is_err());
    }
}
