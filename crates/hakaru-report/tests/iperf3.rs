//! The iperf3 renderers over real hakaru results (`--json` output of loopback runs in
//! tests/fixtures/hakaru): the iperf3 -J mapping, key by key where it is arithmetic, and the
//! iperf3-style text table read back and reconciled with the result.

use hakaru_model::{FlowDir, RunResult};
use hakaru_report::{iperf3_json, iperf3_text};
use serde_json::Value;

fn result(name: &str) -> RunResult {
    let p = format!(
        "{}/tests/fixtures/hakaru/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&p).expect(&p)).expect(&p)
}

fn total(r: &RunResult, dir: FlowDir) -> &hakaru_model::DirectionTotal {
    r.totals
        .iter()
        .find(|t| t.dir == dir)
        .expect("direction total")
}

#[test]
fn tcp_omit_resets_the_clock_and_maps_tcp_info() {
    let r = result("tcp_p2_omit1");
    let d = iperf3_json::document(&r);
    let iv = d["intervals"].as_array().unwrap();
    assert_eq!(iv.len(), r.intervals.len());
    assert_eq!(iv[0]["sum"]["omitted"], true);
    assert_eq!(iv[1]["sum"]["omitted"], false);
    // iperf3 restarts its clock when the warm-up ends.
    assert_eq!(iv[1]["sum"]["start"], 0);
    assert_eq!(iv[1]["sum"]["end"], r.intervals[1].end - r.intervals[0].end);
    for (rec, doc) in r.intervals.iter().zip(iv) {
        let sent: u64 = rec.flows.iter().map(|f| f.sender_bytes.unwrap()).sum();
        assert_eq!(doc["sum"]["bytes"], sent);
        for (f, s) in rec.flows.iter().zip(doc["streams"].as_array().unwrap()) {
            let info = r.flows[f.id as usize].tcp_info.as_ref().unwrap();
            let tick = f.tcp.unwrap();
            assert_eq!(s["socket"], f.id);
            assert_eq!(
                s["snd_cwnd"],
                u64::from(tick.snd_cwnd) * u64::from(info.snd_mss)
            );
            assert_eq!(s["rtt"], tick.rtt_us);
            assert_eq!(s["pmtu"], info.pmtu.unwrap());
            assert_eq!(s["retransmits"], tick.retransmits.unwrap());
            assert_eq!(s["sender"], true);
        }
    }
    // Summary retransmits leave the warm-up out, as iperf3's do.
    let omitted: u64 = r.intervals[0]
        .flows
        .iter()
        .map(|f| f.tcp.unwrap().retransmits.unwrap())
        .sum();
    let life: u64 = r
        .flows
        .iter()
        .map(|f| f.tcp_info.as_ref().unwrap().retransmits.unwrap())
        .sum();
    assert_eq!(d["end"]["sum_sent"]["retransmits"], life - omitted);
    let up = total(&r, FlowDir::Up);
    assert_eq!(d["end"]["sum_sent"]["bytes"], up.sender.bytes);
    assert_eq!(d["end"]["sum_received"]["bytes"], up.receiver.bytes);
    assert_eq!(d["end"]["sum_received"]["sender"], true);
    assert_eq!(d["start"]["test_start"]["omit"], 1);
    assert_eq!(d["start"]["test_start"]["num_streams"], 2);
    assert_eq!(
        d["start"]["tcp_mss_default"],
        r.flows[0].tcp_info.as_ref().unwrap().snd_mss
    );
    let cpu = r.client.cpu.as_ref().unwrap();
    let host_total = d["end"]["cpu_utilization_percent"]["host_total"]
        .as_f64()
        .unwrap();
    assert!((host_total - cpu.busy_s * 100.0 / cpu.seconds).abs() < 1e-9);
    assert!(d.get("hakaru").is_some());
}

#[test]
fn tcp_bidir_splits_directions_like_iperf3() {
    let r = result("tcp_bidir");
    let d = iperf3_json::document(&r);
    assert_eq!(d["start"]["test_start"]["bidir"], 1);
    assert_eq!(d["start"]["test_start"]["reverse"], 0);
    let e = &d["end"];
    assert_eq!(e["sum_sent"]["bytes"], total(&r, FlowDir::Up).sender.bytes);
    assert_eq!(
        e["sum_received_bidir_reverse"]["bytes"],
        total(&r, FlowDir::Down).receiver.bytes
    );
    assert_eq!(e["sum_sent_bidir_reverse"]["sender"], false);
    let streams = e["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2);
    assert_eq!(streams[0]["sender"]["sender"], true);
    assert_eq!(streams[1]["receiver"]["sender"], false);
    for iv in d["intervals"].as_array().unwrap() {
        let s = iv["streams"].as_array().unwrap();
        // The client's receiving stream carries no TCP_INFO keys, as in iperf3.
        assert!(s[0].get("snd_cwnd").is_some() && s[1].get("snd_cwnd").is_none());
        assert_eq!(iv["sum_bidir_reverse"]["bytes"], s[1]["bytes"]);
    }
}

#[test]
fn udp_reverse_reports_the_receiving_client() {
    let r = result("udp_reverse");
    let d = iperf3_json::document(&r);
    let down = total(&r, FlowDir::Down);
    let u = down.udp.unwrap();
    assert_eq!(d["start"]["test_start"]["protocol"], "UDP");
    assert_eq!(d["start"]["test_start"]["reverse"], 1);
    assert_eq!(d["start"]["target_bitrate"], 50_000_000);
    for (rec, iv) in r.intervals.iter().zip(d["intervals"].as_array().unwrap()) {
        let t = rec.flows[0].udp.unwrap();
        let s = &iv["streams"][0];
        assert_eq!(s["sender"], false);
        assert_eq!(s["bytes"], rec.flows[0].receiver_bytes.unwrap());
        assert_eq!(s["lost_packets"], t.lost);
        assert_eq!(s["packets"], t.datagrams + t.lost);
    }
    let e = &d["end"];
    assert_eq!(e["sum"]["packets"], u.sent_datagrams);
    assert_eq!(e["sum"]["lost_packets"], u.lost);
    assert_eq!(e["sum"]["bytes"], down.receiver.bytes);
    assert_eq!(e["sum"]["sender"], false);
    assert_eq!(e["sum_sent"]["sender"], true);
    assert_eq!(e["sum_sent"]["jitter_ms"], 0);
    assert_eq!(e["sum_received"]["sender"], false);
    assert_eq!(e["streams"][0]["udp"]["out_of_order"], u.out_of_order);
    assert!(e.get("sender_tcp_congestion").is_none());
}

#[test]
fn render_prints_iperf3_key_order_and_parses_back() {
    let r = result("tcp_p2_omit1");
    let s = iperf3_json::render(&r);
    let (a, b, c) = (
        s.find("\"intervals\"").unwrap(),
        s.find("\"end\":").unwrap(),
        s.find("\"hakaru\"").unwrap(),
    );
    assert!(s.starts_with("{\n\t\"start\":\t{\n\t\t\"connected\""));
    assert!(a < b && b < c);
    let back: Value = serde_json::from_str(&s).unwrap();
    assert!(same(&back, &iperf3_json::document(&r)));
}

/// Equal values, numbers within serde_json's parsing error (it parses floats to within one ulp).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn other_tests_get_an_iperf3_error_document() {
    let mut r = result("tcp_bidir");
    r.test = "latency".into();
    let d = iperf3_json::document(&r);
    assert!(d["error"].as_str().unwrap().contains("latency"));
    assert_eq!(d["intervals"], Value::Array(vec![]));
}

// ---------------------------------------------------------------------------------------------
// iperf3 text.

/// Reads `14.3 GBytes` back into bytes.
fn bytes_of(amount: &str, unit: &str) -> f64 {
    let v: f64 = amount.parse().unwrap();
    let k = match unit {
        "Bytes" => 1.0,
        "KBytes" => 1024.0,
        "MBytes" => 1024.0 * 1024.0,
        "GBytes" => 1024.0 * 1024.0 * 1024.0,
        "TBytes" => 1024f64.powi(4),
        u => panic!("unit {u}"),
    };
    v * k
}

/// A table line's transfer in bytes and its trailing words.
fn parse_line(line: &str) -> (String, f64, Vec<String>) {
    let tag = line[..line.find(' ').unwrap()].to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    let sec = words.iter().position(|w| *w == "sec").unwrap();
    let b = bytes_of(words[sec + 1], words[sec + 2]);
    (
        tag,
        b,
        words[sec + 5..].iter().map(|w| w.to_string()).collect(),
    )
}

fn close(got: f64, want: u64) -> bool {
    // Three significant digits are printed.
    (got - want as f64).abs() <= want as f64 * 0.006 + 1.0
}

#[test]
fn text_tcp_table_and_summary_reconcile() {
    let r = result("tcp_p2_omit1");
    let s = iperf3_text::render(&r);
    assert!(s.starts_with("Connecting to host 127.0.0.1, port "));
    assert!(s.ends_with("\niperf Done.\n"));
    assert!(s.contains("[ ID] Interval           Transfer     Bitrate         Retr  Cwnd\n"));
    assert!(s.contains("[ ID] Interval           Transfer     Bitrate         Retr\n"));
    assert_eq!(
        s.matches("(omitted)").count(),
        3,
        "two flows and the sum:\n{s}"
    );
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" sec "))
        .collect();
    // 3 intervals x (2 flows + SUM) + (2 flows + SUM) x (sender + receiver).
    assert_eq!(lines.len(), 9 + 6, "{s}");
    let (tag, b, tail) = parse_line(lines[3]);
    assert_eq!(tag, "[");
    assert!(
        close(b, r.intervals[1].flows[0].sender_bytes.unwrap()),
        "{}",
        lines[3]
    );
    assert!(
        lines[3].contains("  0.00-1.00   sec"),
        "clock restarts after -O: {}",
        lines[3]
    );
    let up = total(&r, FlowDir::Up);
    let (_, b, tail_s) = parse_line(lines[13]);
    assert!(
        lines[13].starts_with("[SUM]") && close(b, up.sender.bytes),
        "{}",
        lines[13]
    );
    let life: u64 = r
        .flows
        .iter()
        .map(|f| f.tcp_info.as_ref().unwrap().retransmits.unwrap())
        .sum();
    let omitted: u64 = r.intervals[0]
        .flows
        .iter()
        .map(|f| f.tcp.unwrap().retransmits.unwrap())
        .sum();
    assert_eq!(
        tail_s,
        vec![(life - omitted).to_string(), "sender".to_string()]
    );
    let (_, b, tail_r) = parse_line(lines[14]);
    assert!(
        close(b, up.receiver.bytes) && tail_r == vec!["receiver"],
        "{}",
        lines[14]
    );
    let _ = tail;
}

#[test]
fn text_bidir_has_roles() {
    let r = result("tcp_bidir");
    let s = iperf3_text::report(&r);
    assert!(
        s.starts_with("[ ID][Role] Interval           Transfer     Bitrate         Retr  Cwnd\n")
    );
    assert!(s.contains("[  0][TX-C]   0.00-1.00   sec"));
    assert!(s.contains("[  1][RX-C]   0.00-1.00   sec"));
    assert!(!s.contains("iperf Done."));
    let down = total(&r, FlowDir::Down);
    let rx_recv = s
        .lines()
        .find(|l| l.starts_with("[  1][RX-C]") && l.ends_with("receiver"))
        .unwrap();
    assert!(
        close(parse_line(rx_recv).1, down.receiver.bytes),
        "{rx_recv}"
    );
}

#[test]
fn text_udp_shows_jitter_and_loss() {
    let r = result("udp_reverse");
    let s = iperf3_text::render(&r);
    assert!(s.contains("Reverse mode, remote host 127.0.0.1 is sending\n"));
    assert!(s.contains(
        "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n"
    ));
    let u = total(&r, FlowDir::Down).udp.unwrap();
    let recv = s.lines().find(|l| l.ends_with("receiver")).unwrap();
    let want = format!(" ms  {}/{} (", u.lost, u.sent_datagrams);
    assert!(recv.contains(&want), "{recv} lacks {want}");
    let sender = s.lines().find(|l| l.ends_with("sender")).unwrap();
    assert!(sender.contains(&format!("0.000 ms  0/{} (0%)  sender", u.sent_datagrams)));
    let t = r.intervals[0].flows[0].udp.unwrap();
    assert!(s.contains(&format!("{}/{} (", t.lost, t.datagrams + t.lost)));
}
