//! `hakaru rpm` on loopback: against its embedded endpoint (HTTP/2 each way, HTTP/1.1 both
//! ways) and against `hakaru server --rpm-port` with its self-signed certificate (refused
//! without --insecure, accepted with it); bad flags. The truth on a shaped path, the
//! comparison with nginx and a CA-signed certificate given by --tls-cert/--tls-key (verified
//! with --cacert) are in `netns_rpm`.

use std::time::Duration;

use serde_json::Value;

use super::common::{free_port, json, run, stderr, ServerProc};

/// Short runs: four intervals of 250 ms make the moving average's window full once; the
/// method is the same as with the draft's 1 s and 4.
const SHORT: [&str; 6] = ["-i", "250ms", "--moving-average", "2", "-t", "2"];

fn rpm(args: &[&str]) -> (Option<i32>, Value, String) {
    let mut a = vec!["rpm"];
    a.extend_from_slice(args);
    a.extend_from_slice(&SHORT);
    a.push("-J");
    let o = run(&a, Duration::from_secs(60));
    (o.status.code(), json(&o), stderr(&o))
}

/// What every successful run must carry.
fn check(doc: &Value, protocol: &str, down: bool, up: bool) {
    let x = &doc["rpm"];
    assert_eq!(doc["test"], "rpm");
    assert_eq!(x["protocol"], protocol, "{x}");
    let rpm = x["rpm"].as_f64().expect("rpm");
    let ms = x["responsiveness_ms"].as_f64().expect("ms");
    assert!(
        rpm > 0.0 && ((rpm * ms) - 60_000.0).abs() < 1.0,
        "{rpm} x {ms}"
    );
    assert!(x["probes"]["foreign"].as_u64().unwrap() > 0, "{x}");
    assert!(x["probes"]["tcp_ms"].as_f64().unwrap() > 0.0, "{x}");
    assert!(x["probes"]["tls_ms"].as_f64().unwrap() > 0.0, "{x}");
    assert!(x["probes"]["self_ms"].as_f64().unwrap() > 0.0, "{x}");
    if protocol == "h2" && cfg!(target_os = "linux") {
        // Every self probe is filed: behind a loss, or in order. Loopback loses little (a
        // full socket backlog drops a segment now and then: seen, 2 of 34 probes behind one),
        // so most are in order; with none behind a loss the two trimmed means are one figure.
        let p = &x["probes"];
        let behind = p["self_behind_loss"].as_u64().expect("self_behind_loss");
        let in_order = p["self_in_order_ms"].as_f64().expect("self_in_order_ms");
        assert!(
            2 * behind < p["selfp"].as_u64().unwrap() && in_order > 0.0,
            "{x}"
        );
        if behind == 0 {
            assert_eq!(p["self_in_order_ms"], p["self_ms"], "{x}");
        }
    }
    assert_eq!(x["download"].as_f64().is_some_and(|b| b > 1e6), down, "{x}");
    assert_eq!(x["upload"].as_f64().is_some_and(|b| b > 1e6), up, "{x}");
    // At most 2 s of 250 ms intervals; fewer when both stages became stable (the goodput's
    // window of 2 needs 3 intervals, then the responsiveness's 2 more).
    let n = x["intervals"].as_array().unwrap().len() as u64;
    assert!((4..=8).contains(&n), "{n} intervals: {x}");
    if n < 8 {
        assert_eq!(x["rpm_confidence"], "high", "{x}");
    }
    // One connection per direction at first, one more each interval.
    let per_dir = u64::from(down) + u64::from(up);
    assert_eq!(x["connections"].as_u64(), Some(n * per_dir), "{x}");
}

#[test]
fn the_embedded_endpoint_serves_every_direction_over_h2_and_http1() {
    // The default loads both directions at once, as networkQuality does: a download and an
    // upload goodput, and a connection of each direction per interval.
    let (code, doc, err) = rpm(&[]);
    assert_eq!(code, Some(0), "{err}");
    check(&doc, "h2", true, true);
    assert_eq!(doc["embedded_server"], true);
    assert_eq!(doc["spec"]["direction"], "both", "{}", doc["spec"]);
    let (code, doc, err) = rpm(&["-d", "down"]);
    assert_eq!(code, Some(0), "{err}");
    check(&doc, "h2", true, false);
    let (code, doc, err) = rpm(&["-d", "up"]);
    assert_eq!(code, Some(0), "{err}");
    check(&doc, "h2", false, true);
    let (code, doc, err) = rpm(&["-d", "both", "--http1"]);
    assert_eq!(code, Some(0), "{err}");
    check(&doc, "http/1.1", true, true);
}

#[test]
fn bad_flags_are_usage_errors_naming_the_flag() {
    for (args, want) in [
        (vec!["rpm", "--max-connections", "0"], "--max-connections"),
        (vec!["rpm", "--moving-average", "1"], "--moving-average"),
        (vec!["rpm", "ftp://x/"], "https://"),
        (vec!["rpm", "https://h:0/"], "port"),
    ] {
        let o = run(&args, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn the_server_port_is_verified_or_refused_and_serves_the_test() {
    // A free port chosen here: the server logs its rpm port before the line
    // `ServerProc` waits for.
    let port = free_port();
    let _s = ServerProc::start(&["--rpm-port", &port.to_string()]);
    let url = format!("https://127.0.0.1:{port}");
    // A self-signed certificate: refused unless --insecure.
    let o = run(
        &["rpm", &url, "-t", "1", "-i", "250ms"],
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("certificate"), "{}", stderr(&o));
    let (code, doc, err) = rpm(&[&url, "--insecure", "-d", "both"]);
    assert_eq!(code, Some(0), "{err}");
    check(&doc, "h2", true, true);
    assert_eq!(doc["embedded_server"], false);
    assert_eq!(doc["rpm"]["peer"], format!("127.0.0.1:{port}"));
}

#[test]
fn a_saved_result_draws_in_the_report() {
    let dir = std::env::temp_dir().join(format!("hakaru-rpm-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let (json, html) = (json.display().to_string(), html.display().to_string());
    let mut a = vec!["rpm", "-o", &json];
    a.extend_from_slice(&SHORT);
    let o = run(&a, Duration::from_secs(60));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["report", &json, "-o", &html], Duration::from_secs(60));
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).expect("the report");
    for id in [
        "rpm-rate-goodput",
        "rpm-connections",
        "rpm-rpm",
        "rpm-times",
    ] {
        assert!(page.contains(id), "no chart {id}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
