//! Loopback end-to-end runs: counts reconcile between ends, flows and sums.

use std::time::Duration;

use serde_json::Value;

use super::common::{json, run, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn ok_json(args: &[&str]) -> Value {
    let o = run(args, LIMIT);
    assert!(
        o.status.success(),
        "hakaru {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    json(&o)
}

/// Every flow's receiver got exactly what its sender wrote (TCP, read to EOF, no warm-up:
/// inside the measured window plus what arrived after it), and the per-direction totals are
/// the sums of the flows.
fn assert_reconciles(r: &Value) {
    let flows = r["flows"].as_array().unwrap();
    for f in flows {
        assert_eq!(
            u(&f["receiver"]["bytes"]) + u(&f["receiver"]["late_bytes"]),
            u(&f["sender"]["bytes"]),
            "flow {} receiver and sender disagree",
            f["id"]
        );
        assert!(
            u(&f["receiver"]["bytes"]) > 0,
            "flow {} moved nothing",
            f["id"]
        );
    }
    for t in r["totals"].as_array().unwrap() {
        let dir = t["dir"].as_str().unwrap();
        let sum: u64 = flows
            .iter()
            .filter(|f| f["dir"] == dir)
            .map(|f| u(&f["receiver"]["bytes"]))
            .sum();
        assert_eq!(
            sum,
            u(&t["receiver"]["bytes"]),
            "{dir} flows do not add up to SUM"
        );
        let n = flows.iter().filter(|f| f["dir"] == dir).count() as u64;
        assert_eq!(n, u(&t["flows"]));
    }
}

#[test]
fn one_flow_forward_embedded() {
    let r = ok_json(&["tcp", "-t", "2", "--json"]);
    assert_eq!(r["schema_version"], 1);
    assert_eq!(r["embedded_server"], true);
    // The in-process server reports this kernel's boot id.
    assert_eq!(r["server_on_this_host"], true);
    assert_eq!(r["totals"].as_array().unwrap().len(), 1);
    assert_eq!(r["totals"][0]["dir"], "up");
    assert_reconciles(&r);
    // The client sends, so TCP_INFO comes from its socket; CPU and NIC are reported.
    assert!(r["flows"][0]["tcp_info"]["snd_mss"].as_u64().unwrap() > 0);
    assert!(r["client"]["cpu"]["busy_s"].as_f64().unwrap() > 0.0);
    assert_eq!(r["client"]["nic"]["interface"], "lo");
    assert!(u(&r["server_end"]["nic"]["rx_packets"]) > 0);
    assert!(r["client"]["bytes_per_cpu_second"].as_f64().unwrap() > 0.0);
    assert_eq!(r["client"]["send_mode"], "copy");
    assert_eq!(r["server_end"]["recv_mode"], "copy");
    // Time-based: the receiver counted about two seconds.
    let secs = r["totals"][0]["receiver"]["seconds"].as_f64().unwrap();
    assert!((1.9..3.0).contains(&secs), "seconds {secs}");
    let iv = r["intervals"].as_array().unwrap();
    assert!(iv.len() >= 2, "expected interval records, got {}", iv.len());
    assert!(iv[0]["flows"][0]["receiver_bytes"].as_u64().unwrap() > 0);
    assert!(iv[0]["flows"][0]["sender_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn eight_flows_against_a_server_process() {
    let s = ServerProc::start(&[]);
    let r = ok_json(&[
        "tcp",
        "127.0.0.1",
        "-p",
        &s.port_s(),
        "-t",
        "2",
        "-P",
        "8",
        "--json",
    ]);
    assert_eq!(r["embedded_server"], false);
    // A server process on loopback runs on the same kernel, and the text says so.
    assert_eq!(r["server_on_this_host"], true);
    assert_eq!(r["flows"].as_array().unwrap().len(), 8);
    assert_reconciles(&r);
    // Interval SUM lines are the sum of the flows too.
    let rec = &r["intervals"][0];
    let sum: u64 = rec["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| u(&f["receiver_bytes"]))
        .sum();
    assert_eq!(sum, u(&rec["sums"][0]["receiver_bytes"]));
}

#[test]
fn reverse_has_server_sending() {
    let r = ok_json(&["tcp", "-t", "1", "-R", "-P", "2", "--json"]);
    assert_eq!(r["totals"][0]["dir"], "down");
    assert_reconciles(&r);
    // The server's sending sockets report TCP_INFO.
    assert!(r["flows"][0]["tcp_info"]["snd_cwnd"].as_u64().unwrap() > 0);
}

#[test]
fn bidir_runs_both_directions() {
    let r = ok_json(&["tcp", "-t", "1", "--bidir", "-P", "2", "--json"]);
    let dirs: Vec<&str> = r["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["dir"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, vec!["up", "down"]);
    assert_eq!(r["flows"].as_array().unwrap().len(), 4);
    assert_reconciles(&r);
}

#[test]
fn fixed_byte_counts_are_exact() {
    let r = ok_json(&["tcp", "-n", "10000001", "-P", "3", "--json"]);
    assert_eq!(u(&r["totals"][0]["receiver"]["bytes"]), 10_000_001);
    assert_eq!(u(&r["totals"][0]["sender"]["bytes"]), 10_000_001);
    assert_reconciles(&r);
    let r = ok_json(&["tcp", "-k", "7", "-l", "100K", "-P", "2", "-R", "--json"]);
    assert_eq!(u(&r["totals"][0]["receiver"]["bytes"]), 7 * 102_400);
    let per: Vec<u64> = r["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| u(&f["receiver"]["bytes"]))
        .collect();
    assert_eq!(per, vec![4 * 102_400, 3 * 102_400]);
    let r = ok_json(&["tcp", "-n", "3M", "--bidir", "--json"]);
    for t in r["totals"].as_array().unwrap() {
        assert_eq!(u(&t["receiver"]["bytes"]), 3 << 20);
    }
}

#[test]
fn discard_and_sendfile_are_labelled_and_count_right() {
    let r = ok_json(&["tcp", "-n", "50M", "--discard", "-Z", "--json"]);
    assert_eq!(u(&r["totals"][0]["receiver"]["bytes"]), 50 << 20);
    assert_eq!(r["client"]["send_mode"], "sendfile");
    assert_eq!(r["server_end"]["recv_mode"], "discard");
    let o = run(&["tcp", "-n", "5M", "--discard", "-Z"], LIMIT);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("DISCARDS") && text.contains("SENDFILE"),
        "{text}"
    );
}

#[test]
fn omitted_warmup_is_flagged_and_not_counted() {
    let r = ok_json(&["tcp", "-t", "1", "-O", "1", "--json"]);
    let iv = r["intervals"].as_array().unwrap();
    assert_eq!(iv[0]["omitted"], true);
    assert!(iv.iter().any(|i| i["omitted"] == false));
    let f = &r["flows"][0];
    let counted = u(&f["receiver"]["bytes"]);
    let all: u64 = iv
        .iter()
        .filter_map(|i| i["flows"][0]["receiver_bytes"].as_u64())
        .sum();
    assert!(
        counted < all,
        "omitted bytes must not be counted: {counted} vs {all}"
    );
    // What the warm-up moved is reported apart, and the two add up to everything read.
    let omitted = u(&f["receiver"]["omitted_bytes"]);
    assert!(omitted > 0, "omitted_bytes missing after -O 1");
    // The warm-up boundary and the first tick share one snapshot at the receiver.
    assert_eq!(omitted, u(&iv[0]["flows"][0]["receiver_bytes"]));
    assert!(
        omitted + counted >= all,
        "omitted + counted < all intervals"
    );
    assert_eq!(u(&r["totals"][0]["receiver"]["omitted_bytes"]), omitted);
}

#[test]
fn json_stream_is_enveloped_events() {
    let o = run(&["tcp", "-t", "2", "--json-stream"], LIMIT);
    assert!(o.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.first().unwrap()["type"], "start");
    assert_eq!(lines.last().unwrap()["type"], "end");
    assert!(lines.iter().filter(|l| l["type"] == "interval").count() >= 2);
    assert_eq!(lines.last().unwrap()["data"]["schema_version"], 1);
}

#[test]
fn text_output_shows_receiver_sender_and_sum() {
    let o = run(&["tcp", "-t", "1", "-P", "2"], LIMIT);
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "Receiver",
        "Sender",
        "[SUM]",
        "TCP_INFO",
        "CPU",
        "NIC lo",
        "efficiency",
        "env ",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in:\n{t}");
    }
}

#[test]
fn one_server_serves_concurrent_clients() {
    let s = ServerProc::start(&[]);
    let port = s.port_s();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let port = port.clone();
            std::thread::spawn(move || {
                run(
                    &[
                        "tcp",
                        "127.0.0.1",
                        "-p",
                        &port,
                        "-t",
                        "2",
                        "-P",
                        "2",
                        "--json",
                    ],
                    LIMIT,
                )
            })
        })
        .collect();
    for h in handles {
        let o = h.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_reconciles(&json(&o));
    }
}

/// Results carry each end's measured window on its wall clock, and the server's clock offset
/// from the handshake, so results of tests run at once can be aligned.
#[test]
fn results_carry_wall_clock_windows_and_the_clock_offset() {
    let server = ServerProc::start(&[]);
    let port = server.port_s();
    for args in [
        &["tcp", "-t", "1", "-O", "0.5"][..],
        &["udp", "-t", "1", "-b", "10M"][..],
        &["latency", "-t", "1"][..],
        &["connect", "-t", "1"][..],
    ] {
        let mut argv = vec![args[0], "127.0.0.1", "-p", &port, "--json"];
        argv.extend_from_slice(&args[1..]);
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let r = ok_json(&argv);
        for end in ["client", "server_end"] {
            let start = r[end]["window_start_unix"]
                .as_f64()
                .unwrap_or_else(|| panic!("{args:?} {end}: no window start"));
            let stop = r[end]["window_end_unix"].as_f64().unwrap();
            assert!(
                start >= before - 1.0 && stop > start,
                "{args:?} {end}: {start}..{stop}"
            );
            // About the test's one second (a latency test adds its warm-up; a UDP receiver
            // lingers up to 2 s for stragglers).
            assert!(
                (0.5..=3.6).contains(&(stop - start)),
                "{args:?} {end}: {} s",
                stop - start
            );
        }
        let off = &r["server_clock_offset"];
        let rt = off["round_trip_s"].as_f64().unwrap();
        // One machine, one clock: the offset is within the handshake's uncertainty.
        assert!(
            off["offset_s"].as_f64().unwrap().abs() <= rt / 2.0 + 1e-3,
            "{args:?}: {off}"
        );
    }
}
