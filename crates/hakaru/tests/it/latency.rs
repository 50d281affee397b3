//! `hakaru latency` over loopback: round trips counted and timed, every sample logged,
//! open loop on schedule, spin and UDP, idle against loaded.

use std::time::Duration;

use serde_json::Value;

use super::common::{json, run, stderr, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

fn ok_json(args: &[&str]) -> Value {
    let o = run(args, LIMIT);
    assert!(o.status.success(), "hakaru {args:?} failed: {}", stderr(&o));
    json(&o)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Percentiles are ordered and the count is the replies.
fn assert_stats(s: &Value, replies: u64) {
    assert_eq!(u(&s["count"]), replies, "{s}");
    let keys = [
        "min_us", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us",
    ];
    let v: Vec<f64> = keys.iter().map(|k| f(&s[k])).collect();
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "unordered: {s}");
    assert!(v[0] > 0.0, "zero round trip: {s}");
    assert!(f(&s["mean_us"]) >= v[0] && f(&s["mean_us"]) <= v[6]);
}

#[test]
fn tcp_round_trips_are_counted_and_timed() {
    let r = ok_json(&["latency", "-t", "1", "--json"]);
    assert_eq!(r["test"], "latency");
    let l = &r["latency"];
    assert_eq!(l["transport"], "tcp");
    assert_eq!(l["mode"], "closed_loop");
    assert_eq!(l["wait"], "blocking");
    let replies = u(&l["replies"]);
    assert!(replies > 100, "only {replies} round trips");
    assert_eq!(
        u(&l["requests"]),
        replies,
        "closed loop: one reply per request"
    );
    assert_eq!(u(&l["lost"]), 0);
    assert!(u(&l["warmup_discarded"]) > 0, "warm-up not discarded");
    assert_stats(&l["rtt"], replies);
    assert!((f(&l["one_way_estimate"]["p50_us"]) * 2.0 - f(&l["rtt"]["p50_us"])).abs() < 1e-6);
    let iv = r["intervals"].as_array().unwrap();
    assert!(!iv.is_empty());
    let per_iv: u64 = iv.iter().map(|i| u(&i["latency"]["replies"])).sum();
    assert_eq!(per_iv, replies, "intervals do not add up to the total");
    assert!(r["flows"].as_array().unwrap().is_empty());
}

#[test]
fn udp_parallel_flows_and_full_log() {
    let dir = std::env::temp_dir().join(format!("hk-lat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("samples.csv");
    let r = ok_json(&[
        "latency",
        "--udp",
        "-P",
        "3",
        "-t",
        "1",
        "--full-log",
        log.to_str().unwrap(),
        "--json",
    ]);
    let l = &r["latency"];
    assert_eq!(l["transport"], "udp");
    let flows = l["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3);
    let replies = u(&l["replies"]);
    assert_eq!(flows.iter().map(|f| u(&f["replies"])).sum::<u64>(), replies);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("flow,seq,send_us,recv_us,rtt_us"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(
        rows.len() as u64,
        replies,
        "--full-log rows != reported samples"
    );
    // Each row's round trip is its receive minus send time, and flows 0..3 all appear.
    for row in rows.iter().take(50) {
        let c: Vec<f64> = row.split(',').map(|x| x.parse().unwrap()).collect();
        assert!((c[3] - c[2] - c[4]).abs() < 0.01, "{row}");
    }
    for id in 0..3 {
        assert!(rows.iter().any(|r| r.starts_with(&format!("{id},"))));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn open_loop_keeps_its_schedule() {
    let r = ok_json(&["latency", "--rate", "2000", "-t", "1", "--json"]);
    let l = &r["latency"];
    assert_eq!(l["mode"], "open_loop");
    // Requests leave on a fixed schedule: exactly rate x time after the warm-up.
    assert_eq!(u(&l["requests"]), 2000);
    assert_eq!(u(&l["replies"]) + u(&l["lost"]), 2000);
    assert_stats(&l["rtt"], u(&l["replies"]));
}

#[test]
fn spin_and_histogram() {
    let r = ok_json(&[
        "latency",
        "--udp",
        "--spin",
        "-t",
        "1",
        "--histogram",
        "--json",
    ]);
    let l = &r["latency"];
    assert_eq!(l["wait"], "spin");
    let buckets = l["histogram"].as_array().unwrap();
    assert!(!buckets.is_empty());
    let n: u64 = buckets.iter().map(|b| u(&b["count"])).sum();
    assert_eq!(n, u(&l["replies"]));
    let o = run(&["latency", "-t", "1", "--histogram"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Round-trip distribution"), "{text}");
    assert!(text.contains("one-way estimate (RTT/2)"), "{text}");
}

#[test]
fn under_load_reports_idle_and_loaded() {
    let r = ok_json(&["latency", "-t", "1", "--under-load", "--json"]);
    let ul = &r["latency"]["under_load"];
    assert!(f(&ul["load_up_bps"]) > 1e6, "{ul}");
    assert!(f(&ul["load_down_bps"]) > 1e6, "{ul}");
    assert!(u(&ul["idle_rtt"]["count"]) > 0);
    assert_eq!(ul["loaded_rtt"], r["latency"]["rtt"]);
}

#[test]
fn bad_latency_values_name_the_flag() {
    for (args, needle) in [
        (&["latency", "-l", "13"][..], "-l/--length"),
        (&["latency", "-P", "0"][..], "-P/--parallel"),
        (&["latency", "--rate", "0"][..], "--rate"),
        (&["latency", "--timeout", "0"][..], "--timeout"),
        (&["latency", "--rate", "0.0000001"][..], "--rate"),
    ] {
        // Out-of-range values are usage errors, like flags that do not parse.
        let o = run(args, LIMIT);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn quick_runs_every_test_on_one_screen() {
    let r = ok_json(&["quick", "-t", "0.5", "-P", "2", "--json"]);
    assert_eq!(r["test"], "quick");
    assert_eq!(r["embedded_server"], true);
    let lines = r["lines"].as_array().unwrap();
    let results = r["results"].as_array().unwrap();
    assert_eq!(lines.len(), 7);
    assert_eq!(results.len(), 7);
    for (l, res) in lines.iter().zip(results) {
        assert!(l["error"].is_null(), "{l}");
        assert!(f(&l["value"]) > 0.0, "{l}");
        assert!(res["schema_version"] == 1, "{res}");
    }
    let kinds: Vec<&str> = results
        .iter()
        .map(|x| x["test"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["tcp", "tcp", "tcp", "tcp", "pps", "latency", "latency"]
    );
    assert_eq!(results[3]["totals"][0]["dir"], "down");
    assert_eq!(u(&results[2]["totals"][0]["flows"]), 2);
    assert_eq!(results[6]["latency"]["transport"], "udp");
    let o = run(&["quick", "-t", "0.3"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    // Seven test lines, each naming its command in brackets, then the server line.
    let tests: Vec<&str> = text.lines().filter(|l| l.contains(" [")).collect();
    assert_eq!(tests.len(), 7, "{text}");
    assert!(text.lines().all(|l| l.len() <= 100), "{text}");
    assert!(text.contains("RTT p50") && text.contains("Mpps") && text.contains("bit/s"));
}

/// The server's echo ends when the client's flows close, so its report can reach the client
/// before the client counts its own flows done; that must not fail the test (it did in most
/// short TCP runs).
#[test]
fn hundreds_of_short_tests_back_to_back_all_succeed() {
    let server = ServerProc::start(&[]);
    let port = server.port_s();
    let mut failures = Vec::new();
    let mut silent = Vec::new();
    for i in 0..200 {
        let udp = i % 10 == 9;
        let mut args = vec![
            "latency",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "20ms",
            "--warmup",
            "0",
            "--json",
        ];
        if udp {
            args.push("--udp");
        }
        let o = run(&args, Duration::from_secs(30));
        if !o.status.success() {
            failures.push(format!("run {i}: {}", stderr(&o).trim()));
            continue;
        }
        let doc = json(&o);
        if doc["latency"]["replies"].as_u64() == Some(0) {
            silent.push(i);
        }
        assert!(doc["server_end"]["env"]["software"].as_str().is_some());
    }
    // A 20 ms test on a loaded two-CPU machine can end before its pinger thread ran at all;
    // most must have measured something.
    assert!(
        silent.len() <= 10,
        "{} of 200 runs had no replies: {silent:?}",
        silent.len()
    );
    assert!(
        failures.is_empty(),
        "{} of 200 failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}
