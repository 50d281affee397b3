//! The command line: one module per subcommand, each owning its `Args` and `run`.

mod capacity;
mod common;
mod compare;
mod connect;
mod docs;
mod files;
mod format;
pub mod habits;
mod history;
mod http;
mod keep;
mod latency;
mod mesh;
mod netperf;
mod nic;
mod plan;
mod probe;
mod quick;
mod raw;
mod report;
mod rpm;
mod schema;
mod server;
mod sink;
mod source;
mod stdin;
mod sync;
mod tcp;
mod udp;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use common::is_usage_error;

/// What every `--help` ends with.
const EXIT_CODES: &str = "Exit codes: 0 success, 1 the test failed or the peer reported an error, \
2 invalid command line (a flag, a value out of range, a name that does not exist).\n\
iperf3 habits: `hakaru -s` runs `hakaru server`, `hakaru -c HOST [-u]` runs `hakaru tcp` (or \
`udp`) with iperf3's flags, and -J means --json everywhere.";

/// hakaru (量る, "to measure"): bandwidth, packet rate and latency between machines, in one
/// binary, with one server process and one output format.
#[derive(Debug, Parser)]
#[command(
    name = "hakaru",
    version,
    about,
    long_about = None,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve tests for any number of clients on one port (replaces netserver, iperf3 -s).
    // Boxed: its many flags make it by far the largest variant.
    Server(Box<server::Args>),
    /// TCP bulk-transfer throughput, one flow or many, either direction (replaces netperf
    /// TCP_STREAM, iperf3, iperf2 --parallel, ntttcp). Without HOST, runs against an
    /// in-process server on loopback.
    Tcp(Box<tcp::Args>),
    /// UDP at a target rate with loss, reordering and jitter (replaces iperf3 -u, netperf
    /// UDP_STREAM). Without HOST, runs against an in-process server on loopback.
    Udp(Box<udp::UdpArgs>),
    /// Maximum packet rate with small datagrams from one flow or many (replaces sockperf tp,
    /// netperf UDP_STREAM -m 1, iperf3 -u -l 16). Without HOST, runs on loopback.
    Pps(Box<udp::PpsArgs>),
    /// Request/response round trips, TCP or UDP, with percentiles to p99.99 (replaces sockperf
    /// pp, netperf TCP_RR and UDP_RR). Without HOST, runs against an in-process server on
    /// loopback.
    Latency(Box<latency::Args>),
    /// How good is this path: short TCP bandwidth runs (1 and -P flows, each direction), packet
    /// rate, and TCP and UDP latency on one screen. Without HOST, runs on loopback.
    Quick(Box<quick::Args>),
    /// Connections per second: connect, one small request and response, close (replaces
    /// netperf TCP_CRR). Without HOST, runs against an in-process server on loopback.
    Connect(Box<connect::Args>),
    /// Receive a plain TCP stream or UDP datagrams from any sender and report it ttcp-style
    /// (replaces ttcp -r, nc -l > /dev/null, iperf -s).
    Sink(Box<sink::Args>),
    /// Send a plain TCP stream or UDP datagrams to any receiver and report it ttcp-style
    /// (replaces ttcp -t, nc HOST PORT < /dev/zero).
    Source(Box<source::Args>),
    /// HTTP/HTTPS download or upload throughput over one connection or many, with intervals,
    /// time to first byte and status codes (replaces wget -O /dev/null, curl -o /dev/null).
    /// Without URL, runs against an in-process endpoint on loopback.
    Http(Box<http::Args>),
    /// Responsiveness under working conditions (draft-ietf-ippm-responsiveness): round trips
    /// per minute while load-generating HTTP/2 connections fill the path (replaces Apple's
    /// networkQuality, goresponsiveness). Without URL, runs against an in-process endpoint on
    /// loopback.
    Rpm(Box<rpm::Args>),
    /// Maximum IP-layer capacity of RFC 9946 against an OB-UDPST server (udpst, or `hakaru
    /// server --udpst-port`): the server searches the sending rate, the receiver's best
    /// sub-interval is the capacity (replaces the udpst client).
    Capacity(Box<capacity::Args>),
    /// The fleet mesh of `hakaru server --mesh` agents: `report` asks every agent for its view
    /// and names the hosts whose pairs lose packets or add latency (docs/mesh.md).
    Mesh(mesh::Args),
    /// Per-interface packet and byte rates every interval (replaces sar -n DEV 1).
    Nic(nic::Args),
    /// Many machines, one test: run a plan of senders and receivers over ssh, netns or any
    /// exec launcher with a synchronised start and one merged result (docs/plan.md).
    Plan(plan::Args),
    /// Draw saved results (`--json`, `-o FILE`) as one self-contained HTML file with SVG
    /// charts; several results are overlaid (replaces iperf3 plotters, flent's plots).
    Report(report::Args),
    /// Compare two saved results metric by metric with a verdict each; exits 1 when any is
    /// worse than the threshold (a CI gate).
    Compare(compare::Args),
    /// Saved runs (`--save`): list, trend, show, export, remove and import them; the archive
    /// is one SQLite file (docs/history.md).
    History(history::Args),
    /// Print the JSON Schema of `--json` output (or of plan files and plan results).
    Schema(schema::Args),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(docs::CompletionArgs),
    /// Print hakaru's man page, or write one page per subcommand into a directory.
    Man(docs::ManArgs),
}

/// The command-line definition with what derive cannot say: `--format` offers the formats
/// whose exporter can write the subcommand's document (`format::document_of`: iperf3-json
/// for tcp, udp and pps; CSV for the tests with intervals), and every subcommand's help ends
/// with the exit codes.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(&name, |sub| {
            let mut sub = sub.after_help(EXIT_CODES);
            let has_format = sub.get_arguments().any(|a| a.get_id() == "format");
            let narrower = format::document_of(&name)
                .filter(|d| format::narrows(*d))
                .map(format::names);
            if let (true, Some(parser)) = (has_format, narrower) {
                sub = sub.mut_arg("format", |a| a.value_parser(parser));
            }
            sub
        });
    }
    cmd
}

/// Parses a command line (program name first) with [`command`].
pub fn parse(args: &[String]) -> Result<Cli, clap::Error> {
    let m = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&m)
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let default_level = match cli.command {
        Command::Server(_) => 1,
        _ => 0,
    };
    common::init_logging(cli.verbose + default_level);
    hakaru_engine::sys::raise_fd_limit();
    match cli.command {
        Command::Server(a) => server::run(*a),
        Command::Plan(a) => plan::run(a),
        Command::Tcp(a) => tcp::run(*a),
        Command::Udp(a) => udp::run_udp(*a),
        Command::Pps(a) => udp::run_pps(*a),
        Command::Connect(a) => connect::run(*a),
        Command::Sink(a) => sink::run(*a),
        Command::Source(a) => source::run(*a),
        Command::Nic(a) => nic::run(a),
        Command::Http(a) => http::run(*a),
        Command::Rpm(a) => rpm::run(*a),
        Command::Capacity(a) => capacity::run(*a),
        Command::Mesh(a) => mesh::run(a),
        Command::Latency(a) => latency::run(*a),
        Command::Quick(a) => quick::run(*a),
        Command::Schema(a) => schema::run(a),
        Command::Report(a) => report::run(a),
        Command::Compare(a) => compare::run(a),
        Command::History(a) => history::run(a),
        Command::Completions(a) => docs::completions(a),
        Command::Man(a) => docs::man(a),
    }
}
