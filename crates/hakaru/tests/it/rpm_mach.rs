//! Cloudflare's `mach` (networkquality-rs, built from ../shared/peers by `.ci/run` into
//! /opt/hakaru-peers/mach) against `hakaru server --rpm-port` on loopback: it reads the
//! server's `/.well-known/nq`, runs its download and upload stages and reports RPM. mach
//! opens a new connection for every latency probe and leaves it open, so within a few seconds
//! it holds more connections than `--rpm-max-per-client`; the server then closes the client's
//! longest idle HTTP/2 connection to make room (crates/hakaru-rpm/src/limits.rs) rather than
//! refusing the new one, which mach counts as a failed load connection. Without mach the
//! test fails under `.ci/run` (HAKARU_TEST_PEERS=required), and is skipped elsewhere.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::common::{
    built_peer, compat_pass, free_port, hakaru, http_get, listening_port, log_lines, run_cmd,
    stderr, ServerProc,
};

/// The metric `series` (name and labels) from the server's /metrics; 0 when absent.
fn metric(metrics_port: u16, series: &str) -> f64 {
    let text = http_get(metrics_port, "/metrics").expect("metrics");
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A per-client limit mach passes within its first seconds on any machine (it probes many
/// times a second); 16 load connections and the probes in flight fit well under it.
const PER_CLIENT: &str = "64";

#[test]
fn mach_reads_the_config_and_completes_against_the_rpm_port() {
    let Some(mach) = built_peer("mach", "mach") else {
        return;
    };
    let (rpm_port, metrics_port) = (free_port(), free_port());
    // Without -v (ServerProc::start's): HTTP/2's debug lines would be a million a run.
    let mut child = hakaru()
        .args(["server", "-B", "127.0.0.1", "-p", "0", "--rpm-port"])
        .arg(rpm_port.to_string())
        .args(["--rpm-max-per-client", PER_CLIENT, "--metrics"])
        .arg(format!("127.0.0.1:{metrics_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let log = log_lines(child.stderr.take().expect("stderr"));
    let port = listening_port(&log);
    // Killed by PID when dropped.
    let s = ServerProc { child, port, log };
    assert!(port != 0, "server did not report its port");
    let config = format!("https://127.0.0.1:{rpm_port}/.well-known/nq");
    // --disable-aim-scores: mach would otherwise ask Cloudflare's AIM service for scores.
    // Two stages of 6 s (download, then upload) and the unloaded latency before them.
    let o = run_cmd(
        Command::new(&mach).args([
            "rpm",
            "--config",
            &config,
            "--insecure",
            "--disable-aim-scores",
            "--test-duration",
            "6000",
        ]),
        Duration::from_secs(120),
    );
    let err = stderr(&o);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "mach: {out}\n{err}");
    let doc: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("mach's stdout is not JSON ({e}): {out}\n{err}"));
    // Its figures: the unloaded latency, and each direction's goodput, loaded latency and RPM.
    assert!(
        doc["unloaded_latency_ms"].as_f64().is_some_and(|v| v > 0.0),
        "{doc}"
    );
    for dir in ["download", "upload"] {
        let d = &doc[dir];
        assert!(
            d["throughput"].as_f64().is_some_and(|v| v > 1e6),
            "{dir}: {doc}"
        );
        assert!(
            d["loaded_latency_ms"].as_f64().is_some_and(|v| v > 0.0),
            "{dir}: {doc}"
        );
        assert!(d["rpm"].as_f64().is_some_and(|v| v > 0.0), "{dir}: {doc}");
        // Load connections that ended early with an error (present only when not 0).
        assert_eq!(
            d["failed_connections"].as_u64().unwrap_or(0),
            0,
            "{dir}: {doc}"
        );
    }
    // The server saw it: connections accepted on the rpm port, none refused. mach opens more
    // than the per-client limit over the run; each over it closed an idle one (logged).
    let accepted = metric(metrics_port, "hakaru_connections_total{protocol=\"rpm\"}");
    let refused = metric(
        metrics_port,
        "hakaru_clients_refused_total{reason=\"rpm_limits\"}",
    );
    let limit: f64 = PER_CLIENT.parse().unwrap();
    assert!(
        accepted > limit,
        "{accepted} connections accepted on the rpm port: mach opens more than --rpm-max-per-client {PER_CLIENT}"
    );
    assert_eq!(
        refused, 0.0,
        "connections refused at --rpm-max-per-client; mach's stderr:\n{err}"
    );
    assert!(
        !err.contains("TLS handshake failed"),
        "a connection of mach's was closed before its handshake:\n{err}"
    );
    assert!(
        s.wait_log(
            "idle connection(s) so far to make room",
            Duration::from_secs(10)
        )
        .is_some(),
        "the server never closed an idle connection to make room"
    );
    compat_pass(
        "mach",
        "server",
        "rpm --config .../.well-known/nq (RPM both ways; idle connections closed to make room at --rpm-max-per-client)",
        "both ways",
    );
}
