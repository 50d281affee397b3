//! `--format iperf3-json`: hakaru's output is read by the same parser that reads real
//! `iperf3 -J` output (fixtures captured from iperf3 3.12, see docs/iperf3-json.md), has every
//! key iperf3 prints with the same JSON type, and its numbers reconcile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::common::{json, run};

// ---------------------------------------------------------------------------------------------
// The "dashboard parser": what typical consumers of iperf3 -J read.

/// One interval's `sum`.
#[derive(Debug)]
struct IntervalSum {
    start: f64,
    end: f64,
    bytes: u64,
    bits_per_second: f64,
}

/// `end.sum_sent` / `end.sum_received`.
#[derive(Debug)]
struct Summary {
    bytes: u64,
    bits_per_second: f64,
    seconds: f64,
    retransmits: Option<u64>,
}

/// `end.sum` of a UDP test.
#[derive(Debug)]
struct UdpSummary {
    jitter_ms: f64,
    lost_packets: u64,
    packets: u64,
    lost_percent: f64,
}

/// What a dashboard keeps of one iperf3 -J document.
#[derive(Debug)]
struct Dashboard {
    protocol: String,
    num_streams: u64,
    duration: f64,
    reverse: u64,
    /// Printed by iperf3 3.13 and later only.
    bidir: Option<u64>,
    intervals: Vec<IntervalSum>,
    sum_sent: Summary,
    sum_received: Summary,
    udp: Option<UdpSummary>,
    /// Per end stream: sender bytes and receiver bytes (TCP) or the udp bytes (twice).
    streams: Vec<(u64, u64)>,
    cpu_host_total: f64,
    cpu_remote_total: f64,
    sender_tcp_congestion: Option<String>,
}

fn at<'a>(v: &'a Value, path: &str) -> Result<&'a Value, String> {
    let mut cur = v;
    for part in path.split('.') {
        cur = cur.get(part).ok_or_else(|| format!("missing {path}"))?;
    }
    Ok(cur)
}

fn f(v: &Value, path: &str) -> Result<f64, String> {
    at(v, path)?
        .as_f64()
        .ok_or_else(|| format!("{path} is not a number"))
}

fn u(v: &Value, path: &str) -> Result<u64, String> {
    at(v, path)?
        .as_u64()
        .ok_or_else(|| format!("{path} is not an unsigned integer"))
}

fn summary(v: &Value, path: &str, tcp: bool) -> Result<Summary, String> {
    Ok(Summary {
        bytes: u(v, &format!("{path}.bytes"))?,
        bits_per_second: f(v, &format!("{path}.bits_per_second"))?,
        seconds: f(v, &format!("{path}.seconds"))?,
        retransmits: if tcp {
            Some(u(v, &format!("{path}.retransmits"))?)
        } else {
            None
        },
    })
}

/// Reads a document the way a dashboard does; the error names the missing field's path.
fn parse_dashboard(doc: &Value) -> Result<Dashboard, String> {
    let protocol = at(doc, "start.test_start.protocol")?
        .as_str()
        .ok_or("start.test_start.protocol is not a string")?
        .to_string();
    let tcp = protocol == "TCP";
    let intervals = at(doc, "intervals")?
        .as_array()
        .ok_or("intervals is not an array")?
        .iter()
        .enumerate()
        .map(|(i, iv)| {
            let p = |k: &str| format!("sum.{k}");
            Ok(IntervalSum {
                start: f(iv, &p("start")).map_err(|e| format!("intervals[{i}].{e}"))?,
                end: f(iv, &p("end")).map_err(|e| format!("intervals[{i}].{e}"))?,
                bytes: u(iv, &p("bytes")).map_err(|e| format!("intervals[{i}].{e}"))?,
                bits_per_second: f(iv, &p("bits_per_second"))
                    .map_err(|e| format!("intervals[{i}].{e}"))?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let udp = if tcp {
        None
    } else {
        Some(UdpSummary {
            jitter_ms: f(doc, "end.sum.jitter_ms")?,
            lost_packets: u(doc, "end.sum.lost_packets")?,
            packets: u(doc, "end.sum.packets")?,
            lost_percent: f(doc, "end.sum.lost_percent")?,
        })
    };
    let streams = at(doc, "end.streams")?
        .as_array()
        .ok_or("end.streams is not an array")?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let e = |e: String| format!("end.streams[{i}].{e}");
            if tcp {
                Ok((
                    u(s, "sender.bytes").map_err(e)?,
                    u(s, "receiver.bytes").map_err(e)?,
                ))
            } else {
                let b = u(s, "udp.bytes").map_err(e)?;
                Ok((b, b))
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Dashboard {
        num_streams: u(doc, "start.test_start.num_streams")?,
        duration: f(doc, "start.test_start.duration")?,
        reverse: u(doc, "start.test_start.reverse")?,
        bidir: at(doc, "start.test_start.bidir")
            .ok()
            .and_then(Value::as_u64),
        intervals,
        sum_sent: summary(doc, "end.sum_sent", tcp)?,
        sum_received: summary(doc, "end.sum_received", false)?,
        udp,
        streams,
        cpu_host_total: f(doc, "end.cpu_utilization_percent.host_total")?,
        cpu_remote_total: f(doc, "end.cpu_utilization_percent.remote_total")?,
        sender_tcp_congestion: if tcp {
            Some(
                at(doc, "end.sender_tcp_congestion")?
                    .as_str()
                    .ok_or("end.sender_tcp_congestion is not a string")?
                    .to_string(),
            )
        } else {
            None
        },
        protocol,
    })
}

// ---------------------------------------------------------------------------------------------
// Structure: key paths and JSON types.

/// iperf3 keys with no meaning in hakaru, left out of its document (docs/iperf3-json.md).
const IPERF3_ONLY: &[&str] = &["start.sndbuf_actual", "start.rcvbuf_actual"];

/// Keys iperf3 prints with `%f` (a double; cJSON prints whole values without a fraction).
/// Every other number key is an integer in iperf3 and must be one in hakaru's document.
const FLOAT_KEYS: &[&str] = &[
    "start",
    "end",
    "seconds",
    "bits_per_second",
    "jitter_ms",
    "lost_percent",
    "host_total",
    "host_user",
    "host_system",
    "remote_total",
    "remote_user",
    "remote_system",
    // Whole seconds in iperf3; hakaru allows fractions (-t 1.5, -O 0.5, -i 0.5).
    "duration",
    "omit",
    "interval",
    "target_bitrate",
];

fn kind(path: &str, v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Number(n) => {
            let leaf = path.rsplit('.').next().unwrap_or(path);
            if FLOAT_KEYS.contains(&leaf) {
                "number"
            } else if n.is_u64() || n.is_i64() {
                "integer"
            } else {
                "non-integer number"
            }
        }
    }
}

fn paths(v: &Value, prefix: &str, out: &mut BTreeMap<String, &'static str>) {
    match v {
        Value::Object(o) => {
            for (k, val) in o {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone(), kind(&p, val));
                paths(val, &p, out);
            }
        }
        Value::Array(a) => {
            for val in a {
                let p = format!("{prefix}[]");
                out.insert(p.clone(), kind(&p, val));
                paths(val, &p, out);
            }
        }
        _ => {}
    }
}

/// Every key path of the real document is in hakaru's with the same JSON type.
fn assert_same_structure(name: &str, real: &Value, ours: &Value) {
    let (mut want, mut got) = (BTreeMap::new(), BTreeMap::new());
    paths(real, "", &mut want);
    paths(ours, "", &mut got);
    let mut problems = Vec::new();
    for (p, k) in &want {
        if *k == "non-integer number" {
            problems.push(format!(
                "{p}: iperf3 printed a fraction in a key not in FLOAT_KEYS"
            ));
        }
        if IPERF3_ONLY.contains(&p.as_str()) {
            continue;
        }
        match got.get(p) {
            None => problems.push(format!("{p}: missing")),
            Some(g) if g != k => problems.push(format!("{p}: iperf3 {k}, hakaru {g}")),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{name}:\n{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Consistency of hakaru's document.

fn each_object<'a>(v: &'a Value, out: &mut Vec<&'a serde_json::Map<String, Value>>) {
    match v {
        Value::Object(o) => {
            out.push(o);
            o.values().for_each(|x| each_object(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| each_object(x, out)),
        _ => {}
    }
}

fn assert_consistent(doc: &Value, d: &Dashboard) {
    let mut objs = Vec::new();
    each_object(doc, &mut objs);
    let mut rated = 0;
    for o in &objs {
        let get = |k: &str| o.get(k).and_then(Value::as_f64);
        if let (Some(b), Some(s), Some(r)) = (get("bytes"), get("seconds"), get("bits_per_second"))
        {
            if s > 0.0 {
                let want = b * 8.0 / s;
                assert!(
                    (r - want).abs() <= want * 1e-9 + 1e-9,
                    "bits_per_second {r} != bytes*8/seconds {want} in {o:?}"
                );
                rated += 1;
            }
        }
        if let (Some(l), Some(p)) = (get("lost_packets"), get("packets")) {
            assert!(l <= p, "lost_packets {l} > packets {p} in {o:?}");
        }
    }
    assert!(rated > 4, "too few rated objects checked: {rated}");
    // The client reports what it did: intervals add up to its side's total.
    let counted: Vec<&Value> = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["sum"]["omitted"] == Value::Bool(false))
        .collect();
    let reconcile = |sum_key: &str, total: &str| {
        let sum: u64 = counted
            .iter()
            .map(|i| i[sum_key]["bytes"].as_u64().unwrap())
            .sum();
        let total = doc["end"][total]["bytes"].as_u64().unwrap();
        let diff = (sum as f64 - total as f64).abs();
        // 2 %: under the whole suite's load a --bidir run's reverse direction once counted
        // 1.03 % more in its total than in its intervals (2,060,586,510 against 2,039,418,382
        // bytes: about 16 ms of its 10 Gbit/s received after the last interval closed); an
        // interval lost or counted twice is a half of this 2 s run.
        assert!(
            diff <= total as f64 * 0.02,
            "intervals' {sum_key} bytes {sum} vs end.{total} {total} (more than 2 % apart)"
        );
        assert!(total > 0, "end.{total} moved nothing");
    };
    reconcile(
        "sum",
        if d.reverse == 1 {
            "sum_received"
        } else {
            "sum_sent"
        },
    );
    if d.bidir == Some(1) {
        reconcile("sum_bidir_reverse", "sum_received_bidir_reverse");
    }
    let stream_total: u64 = d.streams.iter().map(|s| s.1).sum();
    assert_eq!(
        stream_total,
        if d.udp.is_some() && d.reverse == 0 {
            d.sum_sent.bytes
        } else {
            d.sum_received.bytes
        } + if d.bidir == Some(1) {
            doc["end"]["sum_received_bidir_reverse"]["bytes"]
                .as_u64()
                .unwrap()
        } else {
            0
        },
        "end.streams do not add up to the sums"
    );
    if let Some(u) = &d.udp {
        assert!(u.packets > 0 && u.lost_packets <= u.packets);
        assert!(u.lost_percent >= 0.0 && u.lost_percent <= 100.0);
        assert!(u.jitter_ms >= 0.0);
    }
    assert!(d.cpu_host_total >= 0.0 && d.cpu_remote_total >= 0.0);
    assert!(d.sum_sent.seconds > 0.0 && d.sum_received.seconds > 0.0);
    assert!(d.sum_sent.bits_per_second > 0.0 && d.sum_received.bits_per_second > 0.0);
    for iv in &d.intervals {
        assert!(iv.end > iv.start && iv.bits_per_second >= 0.0 && iv.bytes > 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures and runs.

fn fixture(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../hakaru-report/tests/fixtures/iperf3")
        .join(format!("{name}.json"));
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const FIXTURES: &[&str] = &[
    "tcp_p1",
    "tcp_p2",
    "tcp_reverse",
    "tcp_bidir",
    "tcp_omit1",
    "udp_b50m",
    "udp_p2",
];

#[test]
fn dashboard_parser_reads_every_real_iperf3_fixture() {
    for name in FIXTURES {
        let doc = fixture(name);
        let d = parse_dashboard(&doc).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(d.duration, 2.0, "{name}");
        assert!(!d.intervals.is_empty(), "{name}");
        assert_eq!(
            d.streams.len() as u64,
            d.num_streams * (1 + u64::from(*name == "tcp_bidir"))
        );
        // The fixtures are consistent under the same rules hakaru's output must follow, apart
        // from iperf3's own rounding of rates to its reported seconds.
        assert_eq!(d.protocol == "UDP", d.udp.is_some(), "{name}");
        assert_eq!(
            d.protocol == "TCP",
            d.sender_tcp_congestion.is_some(),
            "{name}"
        );
        assert!(
            d.sum_sent.retransmits.is_some() == (d.protocol == "TCP"),
            "{name}"
        );
    }
}

#[test]
fn dashboard_parser_names_a_missing_field() {
    let mut doc = fixture("tcp_p1");
    doc["end"]["sum_sent"]
        .as_object_mut()
        .unwrap()
        .remove("retransmits");
    assert_eq!(
        parse_dashboard(&doc).unwrap_err(),
        "missing end.sum_sent.retransmits"
    );
    doc["intervals"][1]["sum"]
        .as_object_mut()
        .unwrap()
        .remove("bytes");
    assert_eq!(
        parse_dashboard(&doc).unwrap_err(),
        "intervals[1].missing sum.bytes"
    );
}

/// Runs `hakaru <args> --format iperf3-json -t 2` on the embedded loopback server and checks
/// it against the fixture of the same kind of run.
fn check_kind(fixture_name: &str, args: &[&str]) {
    let mut all = args.to_vec();
    all.extend(["--format", "iperf3-json", "-t", "2"]);
    let o = run(&all, Duration::from_secs(60));
    assert!(
        o.status.success(),
        "hakaru {all:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ours = json(&o);
    let real = fixture(fixture_name);
    let d = parse_dashboard(&ours).unwrap_or_else(|e| panic!("hakaru {all:?}: {e}"));
    let r = parse_dashboard(&real).unwrap();
    assert_eq!(
        (&d.protocol, d.num_streams, d.duration, d.reverse),
        (&r.protocol, r.num_streams, r.duration, r.reverse),
        "test_start differs from iperf3's for the same flags"
    );
    assert_eq!(d.streams.len(), r.streams.len(), "end.streams count");
    assert_eq!(
        d.intervals.len(),
        r.intervals.len(),
        "interval count (both -t 2 -i 1)"
    );
    assert_same_structure(fixture_name, &real, &ours);
    assert_consistent(&ours, &d);
    // `json` parsed stdout as exactly one document: nothing was printed live.
    assert!(ours["hakaru"].is_object(), "hakaru's extras key");
}

#[test]
fn tcp_one_flow_matches_iperf3() {
    check_kind("tcp_p1", &["tcp"]);
}

#[test]
fn tcp_two_flows_match_iperf3() {
    check_kind("tcp_p2", &["tcp", "-P", "2"]);
}

#[test]
fn tcp_reverse_matches_iperf3() {
    check_kind("tcp_reverse", &["tcp", "-R"]);
}

#[test]
fn tcp_bidir_matches_iperf3() {
    check_kind("tcp_bidir", &["tcp", "--bidir"]);
}

#[test]
fn tcp_omit_matches_iperf3() {
    check_kind("tcp_omit1", &["tcp", "-O", "1"]);
}

#[test]
fn udp_matches_iperf3() {
    check_kind("udp_b50m", &["udp", "-b", "50M"]);
}

#[test]
fn udp_two_flows_match_iperf3() {
    check_kind("udp_p2", &["udp", "-b", "50M", "-P", "2"]);
}

#[test]
fn iperf3_json_is_refused_where_there_is_no_iperf3_form() {
    for cmd in ["latency", "connect", "quick"] {
        let o = run(&[cmd, "--format", "iperf3-json"], Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let e = String::from_utf8_lossy(&o.stderr);
        // Their --format does not offer it: clap names the value and what there is.
        assert!(
            e.contains("'iperf3-json'") && e.contains("possible values: text, json, json-stream"),
            "{cmd}: {e}"
        );
        assert!(o.stdout.is_empty(), "{cmd} printed output");
    }
    let o = run(
        &["tcp", "--format", "iperf3-json", "--json"],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn iperf3_json_error_document_when_the_server_is_unreachable() {
    // A port nothing listens on: bind one, read it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &port,
            "--format",
            "iperf3-json",
            "-t",
            "1",
        ],
        Duration::from_secs(30),
    );
    assert!(!o.status.success());
    let doc = json(&o);
    assert!(
        doc["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{doc}"
    );
    assert_eq!(doc["intervals"], Value::Array(Vec::new()));
}

#[test]
fn format_flag_names_every_output() {
    let o = run(
        &["tcp", "-t", "1", "--format", "json"],
        Duration::from_secs(30),
    );
    assert!(o.status.success());
    assert_eq!(json(&o)["tool"], "hakaru");
    let o = run(
        &["udp", "-t", "1", "-i", "0.5", "--format", "json-stream"],
        Duration::from_secs(30),
    );
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let types: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("start"));
    assert_eq!(types.last().map(String::as_str), Some("end"));
    assert!(
        types.iter().filter(|t| *t == "interval").count() >= 2,
        "{types:?}"
    );
    let o = run(
        &["pps", "-t", "1", "--format", "iperf3-json"],
        Duration::from_secs(30),
    );
    assert!(o.status.success());
    let d = parse_dashboard(&json(&o)).unwrap();
    assert_eq!(d.protocol, "UDP");
    assert!(d.udp.unwrap().packets > 0);
}
