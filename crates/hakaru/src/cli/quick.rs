//! `hakaru quick`: the one command that answers "how good is this path": short runs of TCP
//! bandwidth (one flow and several, each direction), packet rate, and TCP and UDP latency,
//! printed as one screen.

use std::sync::atomic::Ordering;

use hakaru_client::run_test;
use hakaru_engine::Observer;
use hakaru_model::{
    Amount, Direction, Dur, FlowDir, LatencySpec, LatencyTransport, QuickLine, QuickResult,
    RunResult, TcpSpec, TestSpec, UdpMode, UdpRate, UdpSpec, DEFAULT_PPS_LENGTH, SCHEMA_VERSION,
};

use super::common::{stop_flag, Target};
use crate::output::{Progress, WithProgress};
use hakaru_report::export::{Document, LiveItem};

/// Options of `hakaru quick`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Seconds per test (7 tests run one after another).
    #[arg(short, long, value_name = "TIME", default_value = "3")]
    time: Dur,
    /// Flows per direction of the multi-flow bandwidth tests.
    #[arg(short = 'P', long, value_name = "N", default_value_t = 4)]
    parallel: u32,
}

struct Quiet;
impl Observer for Quiet {}

/// One test of the sequence: what, the equivalent command, the spec.
fn plan(t: Dur, p: u32) -> Vec<(String, String, TestSpec)> {
    let secs = t.secs_f64();
    let tcp = |flows, direction| {
        TestSpec::Tcp(TcpSpec {
            flows,
            direction,
            amount: Amount::Time(t),
            interval: Dur::default(),
            ..TcpSpec::default()
        })
    };
    let lat = |transport| {
        TestSpec::Latency(LatencySpec {
            transport,
            duration: t,
            interval: Dur::default(),
            ..LatencySpec::default()
        })
    };
    vec![
        (
            "TCP 1 flow, client -> server".into(),
            format!("hakaru tcp HOST -t {secs}"),
            tcp(1, Direction::Forward),
        ),
        (
            "TCP 1 flow, server -> client".into(),
            format!("hakaru tcp HOST -t {secs} -R"),
            tcp(1, Direction::Reverse),
        ),
        (
            format!("TCP {p} flows, client -> server"),
            format!("hakaru tcp HOST -t {secs} -P {p}"),
            tcp(p, Direction::Forward),
        ),
        (
            format!("TCP {p} flows, server -> client"),
            format!("hakaru tcp HOST -t {secs} -P {p} -R"),
            tcp(p, Direction::Reverse),
        ),
        (
            "pps 14 B UDP, client -> server".into(),
            format!("hakaru pps HOST -t {secs}"),
            TestSpec::Udp(UdpSpec {
                mode: UdpMode::Pps,
                amount: Amount::Time(t),
                interval: Dur::default(),
                length: hakaru_model::Bytes(DEFAULT_PPS_LENGTH),
                rate: UdpRate::Unlimited,
                ..UdpSpec::default()
            }),
        ),
        (
            "TCP latency, 14 B ping-pong".into(),
            format!("hakaru latency HOST -t {secs}"),
            lat(LatencyTransport::Tcp),
        ),
        (
            "UDP latency, 14 B ping-pong".into(),
            format!("hakaru latency HOST -t {secs} -u"),
            lat(LatencyTransport::Udp),
        ),
    ]
}

/// The headline of a result: received rate, received packet rate, or median round trip.
fn headline(r: &RunResult) -> (String, f64, String) {
    if let Some(l) = r.detail.latency() {
        let s = &l.rtt;
        return (
            format!(
                "RTT p50 {}, p99 {}, p99.99 {} us, {:.0}/s",
                us(s.p50_us),
                us(s.p99_us),
                us(s.p9999_us),
                l.transactions_per_second
            ),
            s.p50_us,
            "us".into(),
        );
    }
    let t = r
        .totals
        .iter()
        .find(|t| t.dir == FlowDir::Up)
        .or(r.totals.first());
    match t {
        Some(t) => match &t.udp {
            Some(u) => (
                format!(
                    "{:.3} Mpps received ({:.3} sent, {:.2} % lost)",
                    u.received_pps / 1e6,
                    u.sent_pps / 1e6,
                    u.lost_percent
                ),
                u.received_pps,
                "datagrams/s".into(),
            ),
            None => (
                format!("{} received", t.receiver.bits_per_second),
                t.receiver.bits_per_second.0,
                "bit/s".into(),
            ),
        },
        None => ("-".into(), 0.0, "".into()),
    }
}

/// Microseconds with three significant digits or whole ones.
fn us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Runs the sequence and prints one screen (or one JSON document).
pub fn run(a: Args) -> anyhow::Result<()> {
    a.target.check("quick")?;
    if a.parallel == 0 || a.parallel > hakaru_model::MAX_FLOWS {
        return Err(super::common::UsageError(format!(
            "-P/--parallel must be between 1 and {}, got {}",
            hakaru_model::MAX_FLOWS,
            a.parallel
        ))
        .into());
    }
    let tests = plan(a.time, a.parallel);
    for (_, _, spec) in &tests {
        spec.validate()
            .map_err(|e| super::common::UsageError(e.0))?;
    }
    let ep = a.target.endpoint(&tests[2].2)?;
    let format = a.target.format();
    let stop = stop_flag()?;
    let mut out = QuickResult {
        schema_version: SCHEMA_VERSION,
        test: "quick".into(),
        server: String::new(),
        embedded_server: false,
        lines: Vec::new(),
        results: Vec::new(),
    };
    let view = a.target.view.view();
    let mut live = format.live(view);
    // Nothing prints while a test runs: the status line says which one and how long is left.
    let mut progress = Progress::new(true);
    let count = tests.len();
    for (i, (what, command, spec)) in tests.into_iter().enumerate() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        progress.step(format!("test {}/{count}: {}", i + 1, spec.name()));
        let opts = a.target.options(&ep, spec);
        out.embedded_server = opts.embedded;
        let mut watch = WithProgress {
            inner: &mut Quiet,
            progress: &progress,
        };
        let line = match run_test(&opts, &mut watch, std::sync::Arc::clone(&stop)) {
            Ok(r) => {
                out.server = r.server.clone();
                let (h, value, unit) = headline(&r);
                out.results.push(Some(r));
                QuickLine {
                    what,
                    command,
                    headline: h,
                    value,
                    unit,
                    error: None,
                }
            }
            Err(e) => {
                out.results.push(None);
                QuickLine {
                    what,
                    command,
                    headline: "failed".into(),
                    value: 0.0,
                    unit: String::new(),
                    error: Some(e.to_string()),
                }
            }
        };
        if let Some(s) = live.item(&LiveItem::QuickLine(&line)) {
            progress.suspend(|| crate::output::out(&s));
        }
        out.lines.push(line);
    }
    progress.finish();
    let ran_for = a.time.to_string();
    let doc = Document::Quick {
        result: &out,
        ran_for: Some(&ran_for),
    };
    crate::output::print(format, view, &doc)?;
    a.target.files.write_quick(&out)?;
    if let Some(e) = out.lines.iter().find_map(|l| l.error.clone()) {
        anyhow::bail!("a quick test failed: {e}");
    }
    Ok(())
}
