//! `--format iperf3-json`: a TCP or UDP result in the shape of `iperf3 -J` (3.12 as captured
//! from the Debian binary), so parsers and dashboards written for iperf3 read hakaru's results.
//! The client is iperf3's "host"/local end. Key by key mapping: docs/iperf3-json.md.

use hakaru_model::{
    rfc3339_utc, Amount, CpuUsage, Direction, FlowDir, FlowResult, IntervalRecord, RunResult,
    TestSpec, UdpCounts, UdpRate, UdpTick,
};
use serde_json::{json, Map, Value};

use crate::iperf3_view::{bps, client_sends, local_bytes, percent, View};

/// The iperf3 -J document of a TCP or UDP result (an [`error_document`] for any other test).
pub fn document(r: &RunResult) -> Value {
    let Some(v) = View::new(r) else {
        return error_document(&format!(
            "a '{}' test has no iperf3 form (tcp, udp and pps do)",
            r.test
        ));
    };
    let mut doc = json!({
        "start": start(&v),
        "intervals": r.intervals.iter().map(|rec| interval(&v, rec)).collect::<Vec<_>>(),
        "end": end(&v),
        "hakaru": extras(r),
    });
    cjson_numbers(&mut doc);
    doc
}

/// What iperf3 -J prints when a test fails: empty sections and the message under `error`.
pub fn error_document(message: &str) -> Value {
    json!({"start": {}, "intervals": [], "end": {}, "error": message})
}

/// The document pretty-printed with tabs, as iperf3 prints it, with a trailing newline.
pub fn render(r: &RunResult) -> String {
    pretty(&document(r))
}

/// [`error_document`] pretty-printed.
pub fn error_render(message: &str) -> String {
    pretty(&error_document(message))
}

/// iperf3's key order, for the keys it prints (objects in any section follow it; keys not
/// listed, hakaru's extras, come last).
const KEY_ORDER: &[&str] = &[
    "socket",
    "local_host",
    "local_port",
    "remote_host",
    "remote_port",
    "start",
    "intervals",
    "end",
    "connected",
    "version",
    "system_info",
    "timestamp",
    "time",
    "timesecs",
    "connecting_to",
    "host",
    "port",
    "cookie",
    "tcp_mss",
    "tcp_mss_default",
    "protocol",
    "num_streams",
    "blksize",
    "omit",
    "duration",
    "seconds",
    "bytes",
    "bits_per_second",
    "blocks",
    "reverse",
    "tos",
    "target_bitrate",
    "fq_rate",
    "sock_bufsize",
    "sndbuf_actual",
    "rcvbuf_actual",
    "test_start",
    "bidir",
    "fqrate",
    "interval",
    "retransmits",
    "snd_cwnd",
    "snd_wnd",
    "rtt",
    "rttvar",
    "pmtu",
    "jitter_ms",
    "lost_packets",
    "packets",
    "lost_percent",
    "out_of_order",
    "max_snd_cwnd",
    "max_snd_wnd",
    "max_rtt",
    "min_rtt",
    "mean_rtt",
    "omitted",
    "sender",
    "receiver",
    "udp",
    "streams",
    "sum",
    "sum_sent",
    "sum_received",
    "sum_bidir_reverse",
    "sum_sent_bidir_reverse",
    "sum_received_bidir_reverse",
    "cpu_utilization_percent",
    "host_total",
    "host_user",
    "host_system",
    "remote_total",
    "remote_user",
    "remote_system",
    "sender_tcp_congestion",
    "receiver_tcp_congestion",
    "error",
];

fn key_rank(key: &str, value: &Value) -> usize {
    // `sender` is a flag at the end of a stream, but the first object of an end stream.
    if key == "sender" && value.is_object() {
        return 0;
    }
    KEY_ORDER
        .iter()
        .position(|k| *k == key)
        .map_or(usize::MAX, |p| p + 1)
}

fn pretty(doc: &Value) -> String {
    let mut s = String::new();
    write_value(&mut s, doc, 0);
    s.push('\n');
    s
}

fn write_value(s: &mut String, v: &Value, depth: usize) {
    let indent = |s: &mut String, d: usize| s.extend(std::iter::repeat_n('\t', d));
    match v {
        Value::Object(o) if !o.is_empty() => {
            let mut keys: Vec<(&String, &Value)> = o.iter().collect();
            keys.sort_by(|a, b| (key_rank(a.0, a.1), a.0).cmp(&(key_rank(b.0, b.1), b.0)));
            s.push_str("{\n");
            for (n, (k, val)) in keys.iter().enumerate() {
                indent(s, depth + 1);
                s.push_str(&Value::String((*k).clone()).to_string());
                s.push_str(":\t");
                write_value(s, val, depth + 1);
                s.push_str(if n + 1 < keys.len() { ",\n" } else { "\n" });
            }
            indent(s, depth);
            s.push('}');
        }
        Value::Array(a) if !a.is_empty() => {
            s.push('[');
            for (n, val) in a.iter().enumerate() {
                write_value(s, val, depth + 1);
                if n + 1 < a.len() {
                    s.push_str(", ");
                }
            }
            s.push(']');
        }
        other => s.push_str(&other.to_string()),
    }
}

/// cJSON (which iperf3 uses) prints every whole number without a fraction; do the same so a
/// field is an integer or a float in exactly the cases it is in iperf3's output.
fn cjson_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    *v = json!(f as i64);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(cjson_numbers),
        Value::Object(o) => o.values_mut().for_each(cjson_numbers),
        _ => {}
    }
}

fn split_host_port(addr: &str) -> (String, u64) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']').to_string(),
            p.parse().unwrap_or(0),
        ),
        None => (addr.to_string(), 0),
    }
}

/// RFC 1123 GMT time, as iperf3's `start.timestamp.time`.
fn rfc1123(unix: f64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let iso = rfc3339_utc(unix);
    let field = |a: usize, b: usize| iso.get(a..b).unwrap_or("0").to_string();
    let month: usize = field(5, 7).parse().unwrap_or(1);
    let day = (unix.floor() as i64).div_euclid(86_400);
    format!(
        "{}, {} {} {} {} GMT",
        DAYS[day.rem_euclid(7) as usize],
        field(8, 10),
        MONTHS[month.clamp(1, 12) - 1],
        field(0, 4),
        field(11, 19)
    )
}

/// Per-flow payload rate a UDP test aimed for, bits per second (0: unlimited, as iperf3).
fn target_bitrate(spec: &TestSpec) -> f64 {
    match spec {
        TestSpec::Udp(u) => match u.rate {
            UdpRate::Unlimited => 0.0,
            UdpRate::Bits(b) => b.0,
            UdpRate::Packets(p) => p * u.length.0 as f64 * 8.0,
        },
        _ => 0.0,
    }
}

fn start(v: &View) -> Value {
    let r = v.r;
    let spec = &r.spec;
    let (host, port) = split_host_port(&r.server);
    let (local_host, _) = split_host_port(&r.local_address);
    let connected: Vec<Value> = v
        .flows()
        .iter()
        .map(|f| {
            // hakaru keeps no per-flow local port; data goes to the server's one port.
            json!({"socket": f.id, "local_host": local_host, "local_port": 0,
                   "remote_host": host, "remote_port": port})
        })
        .collect();
    let env = &r.client.env;
    let mut s = Map::new();
    s.insert("connected".into(), connected.into());
    s.insert(
        "version".into(),
        format!("hakaru {}", r.tool_version).into(),
    );
    s.insert(
        "system_info".into(),
        format!("{} {} {}", env.os, env.hostname, env.kernel).into(),
    );
    s.insert(
        "timestamp".into(),
        json!({"time": rfc1123(r.started_at_unix), "timesecs": r.started_at_unix.floor() as i64}),
    );
    s.insert("connecting_to".into(), json!({"host": host, "port": port}));
    s.insert("cookie".into(), "".into());
    if let TestSpec::Tcp(t) = spec {
        match t.mss {
            Some(m) => s.insert("tcp_mss".into(), m.into()),
            None => v
                .flows()
                .first()
                .and_then(|f| v.mss(f.id))
                .and_then(|m| s.insert("tcp_mss_default".into(), m.into())),
        };
    }
    let window = match spec {
        TestSpec::Tcp(t) => t.window,
        TestSpec::Udp(u) => u.window,
        _ => None,
    };
    s.insert("target_bitrate".into(), target_bitrate(spec).into());
    s.insert("fq_rate".into(), 0.into());
    s.insert("sock_bufsize".into(), window.map_or(0, |w| w.0).into());
    s.insert("test_start".into(), test_start(v));
    Value::Object(s)
}

fn test_start(v: &View) -> Value {
    let spec = &v.r.spec;
    let c = spec.common();
    let (duration, bytes, blocks) = match c.amount {
        Amount::Time(t) => (t.secs_f64(), 0, 0),
        Amount::Bytes(b) => (0.0, b.0, 0),
        Amount::Blocks(k) => (0.0, 0, k),
    };
    let tos = match spec {
        TestSpec::Tcp(t) => t.tos,
        TestSpec::Udp(u) => u.tos,
        _ => None,
    };
    json!({
        "protocol": if v.udp { "UDP" } else { "TCP" },
        "num_streams": c.flows,
        "blksize": c.length.0,
        "omit": c.omit.secs_f64(),
        "duration": duration,
        "bytes": bytes,
        "blocks": blocks,
        "reverse": u8::from(c.direction == Direction::Reverse),
        "tos": tos.unwrap_or(0),
        "target_bitrate": target_bitrate(spec),
        "bidir": u8::from(v.bidir),
        "fqrate": 0,
        "interval": c.interval.secs_f64(),
    })
}

/// The span keys every iperf3 stream and sum starts with.
fn span(start: f64, end: f64, bytes: u64) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("start".into(), start.into());
    m.insert("end".into(), end.into());
    m.insert("seconds".into(), (end - start).into());
    m.insert("bytes".into(), bytes.into());
    m.insert("bits_per_second".into(), bps(bytes, end - start).into());
    m
}

/// The receiver's UDP keys of an interval: packets are the datagrams the sender sent as far as
/// the receiver can tell (received plus found missing), as iperf3 counts them.
fn udp_receiver_tick(m: &mut Map<String, Value>, t: &UdpTick) {
    let total = t.datagrams + t.lost;
    m.insert("jitter_ms".into(), t.jitter_ms.unwrap_or(0.0).into());
    m.insert("lost_packets".into(), t.lost.into());
    m.insert("packets".into(), total.into());
    m.insert("lost_percent".into(), percent(t.lost, total).into());
}

fn interval(v: &View, rec: &IntervalRecord) -> Value {
    let (start, end) = v.times(rec);
    let flows = v.interval_flows(rec);
    let streams: Vec<Value> = flows
        .iter()
        .map(|f| {
            let sends = client_sends(f.dir);
            let mut m = span(start, end, local_bytes(f));
            m.insert("socket".into(), f.id.into());
            if v.udp {
                if sends {
                    m.insert("packets".into(), f.sender_datagrams.unwrap_or(0).into());
                } else {
                    udp_receiver_tick(&mut m, &f.udp.unwrap_or_default());
                }
            } else if let (true, Some(t)) = (sends, f.tcp) {
                let pmtu = v
                    .flow(f.id)
                    .and_then(|x| x.tcp_info.as_ref())
                    .and_then(|t| t.pmtu);
                // iperf3 leaves the key out where the OS counts no retransmits.
                if let Some(r) = t.retransmits {
                    m.insert("retransmits".into(), r.into());
                }
                m.insert(
                    "snd_cwnd".into(),
                    (u64::from(t.snd_cwnd) * v.mss(f.id).unwrap_or(0)).into(),
                );
                m.insert("snd_wnd".into(), 0.into());
                m.insert("rtt".into(), t.rtt_us.into());
                m.insert("rttvar".into(), 0.into());
                m.insert("pmtu".into(), pmtu.unwrap_or(0).into());
            }
            m.insert("omitted".into(), rec.omitted.into());
            m.insert("sender".into(), sends.into());
            Value::Object(m)
        })
        .collect();
    let sum = |dir: FlowDir| {
        let of: Vec<_> = flows.iter().filter(|f| f.dir == dir).collect();
        let sends = client_sends(dir);
        let mut m = span(start, end, of.iter().map(|f| local_bytes(f)).sum());
        if v.udp {
            if sends {
                let p: u64 = of.iter().filter_map(|f| f.sender_datagrams).sum();
                m.insert("packets".into(), p.into());
            } else {
                udp_receiver_tick(
                    &mut m,
                    &UdpTick::sum(of.iter().filter_map(|f| f.udp.as_ref())),
                );
            }
        } else if sends && of.iter().any(|f| f.tcp.is_some()) {
            let retr: Option<u64> = of.iter().filter_map(|f| f.tcp).map(|t| t.retransmits).sum();
            if let Some(retr) = retr {
                m.insert("retransmits".into(), retr.into());
            }
        }
        m.insert("omitted".into(), rec.omitted.into());
        m.insert("sender".into(), sends.into());
        Value::Object(m)
    };
    let mut out = Map::new();
    out.insert("streams".into(), streams.into());
    out.insert("sum".into(), sum(v.primary));
    if v.bidir {
        out.insert("sum_bidir_reverse".into(), sum(FlowDir::Down));
    }
    Value::Object(out)
}

/// UDP summary keys. The sending side's summary carries zeros for what only a receiver can
/// know, as iperf3's `sum_sent` does.
fn udp_summary(m: &mut Map<String, Value>, u: &UdpCounts, receiver_side: bool) {
    let (jitter, lost, pct) = if receiver_side {
        (u.jitter_ms.unwrap_or(0.0), u.lost, u.lost_percent)
    } else {
        (0.0, 0, 0.0)
    };
    m.insert("jitter_ms".into(), jitter.into());
    m.insert("lost_packets".into(), lost.into());
    m.insert("packets".into(), u.sent_datagrams.into());
    m.insert("lost_percent".into(), pct.into());
}

fn end_stream(v: &View, f: &FlowResult) -> Value {
    let sends = client_sends(f.dir);
    if v.udp {
        let local = if sends { f.sender } else { f.receiver };
        let u = f.udp.unwrap_or_default();
        let mut m = span(0.0, local.seconds, local.bytes);
        m.insert("socket".into(), f.id.into());
        udp_summary(&mut m, &u, true);
        m.insert("out_of_order".into(), u.out_of_order.into());
        m.insert("sender".into(), sends.into());
        return json!({ "udp": Value::Object(m) });
    }
    let mut snd = span(0.0, f.sender.seconds, f.sender.bytes);
    snd.insert("socket".into(), f.id.into());
    if let Some(retr) = v.retransmits(f) {
        snd.insert("retransmits".into(), retr.into());
    }
    if let Some(st) = v.rtt_stats(f) {
        snd.insert("max_snd_cwnd".into(), st.max_cwnd.into());
        snd.insert("max_snd_wnd".into(), 0.into());
        snd.insert("max_rtt".into(), st.max_rtt.into());
        snd.insert("min_rtt".into(), st.min_rtt.into());
        snd.insert("mean_rtt".into(), st.mean_rtt.into());
    }
    snd.insert("sender".into(), sends.into());
    let mut rcv = span(0.0, f.receiver.seconds, f.receiver.bytes);
    rcv.insert("socket".into(), f.id.into());
    rcv.insert("sender".into(), sends.into());
    json!({"sender": Value::Object(snd), "receiver": Value::Object(rcv)})
}

/// `sum_sent`, `sum_received` (and UDP `sum`) of one direction, under their names for `dir`.
fn end_sums(v: &View, dir: FlowDir, out: &mut Map<String, Value>) {
    let Some(t) = v.r.totals.iter().find(|t| t.dir == dir) else {
        return;
    };
    let sends = client_sends(dir);
    let suffix = if v.bidir && dir == FlowDir::Down {
        "_bidir_reverse"
    } else {
        ""
    };
    let mut sent = span(0.0, t.sender.seconds, t.sender.bytes);
    let mut recv = span(0.0, t.receiver.seconds, t.receiver.bytes);
    if v.udp {
        let u = t.udp.unwrap_or_default();
        let mut sum = recv.clone();
        udp_summary(&mut sum, &u, true);
        sum.insert("sender".into(), sends.into());
        out.insert(format!("sum{suffix}"), Value::Object(sum));
        udp_summary(&mut sent, &u, false);
        udp_summary(&mut recv, &u, true);
        // iperf3 marks UDP summaries by the side they describe, not by the client's role.
        sent.insert("sender".into(), true.into());
        recv.insert("sender".into(), false.into());
    } else {
        let of: Vec<&FlowResult> = v.r.flows.iter().filter(|f| f.dir == dir).collect();
        if of.iter().any(|f| f.tcp_info.is_some()) {
            let retr: u64 = of.iter().filter_map(|f| v.retransmits(f)).sum();
            sent.insert("retransmits".into(), retr.into());
        }
        sent.insert("sender".into(), sends.into());
        recv.insert("sender".into(), sends.into());
    }
    out.insert(format!("sum_sent{suffix}"), Value::Object(sent));
    out.insert(format!("sum_received{suffix}"), Value::Object(recv));
}

/// CPU-seconds per wall-clock second x 100, the unit of iperf3's figures (100 = one CPU busy).
fn cpu_figures(c: &CpuUsage) -> (f64, f64, f64) {
    let pct = |s: f64| {
        if c.seconds > 0.0 {
            s * 100.0 / c.seconds
        } else {
            0.0
        }
    };
    let kernel = (c.busy_s - c.user_s).max(0.0);
    (pct(c.busy_s), pct(c.user_s), pct(kernel))
}

fn end(v: &View) -> Value {
    let r = v.r;
    let mut out = Map::new();
    let streams: Vec<Value> = v.flows().iter().map(|f| end_stream(v, f)).collect();
    out.insert("streams".into(), streams.into());
    for dir in v.dirs() {
        end_sums(v, dir, &mut out);
    }
    if let (Some(h), Some(s)) = (&r.client.cpu, &r.server_end.cpu) {
        let (ht, hu, hs) = cpu_figures(h);
        let (rt, ru, rs) = cpu_figures(s);
        out.insert(
            "cpu_utilization_percent".into(),
            json!({"host_total": ht, "host_user": hu, "host_system": hs,
                   "remote_total": rt, "remote_user": ru, "remote_system": rs}),
        );
    }
    if let TestSpec::Tcp(t) = &r.spec {
        let sender_cc = r
            .flows
            .iter()
            .filter(|f| f.dir == v.primary)
            .find_map(|f| f.tcp_info.as_ref().and_then(|i| i.congestion.clone()));
        let receiving_end = if client_sends(v.primary) {
            &r.server_end
        } else {
            &r.client
        };
        let receiver_cc = t
            .congestion
            .clone()
            .or_else(|| receiving_end.env.default_congestion.clone());
        if let Some(cc) = sender_cc {
            out.insert("sender_tcp_congestion".into(), cc.into());
        }
        if let Some(cc) = receiver_cc {
            out.insert("receiver_tcp_congestion".into(), cc.into());
        }
    }
    Value::Object(out)
}

/// hakaru's own facts, kept under one key so none of iperf3's keys change meaning.
fn extras(r: &RunResult) -> Value {
    let headline: Vec<Value> = r
        .totals
        .iter()
        .map(|t| {
            json!({"direction": t.dir.label(), "receiver_bits_per_second": t.receiver.bits_per_second.0,
                   "sender_bits_per_second": t.sender.bits_per_second.0})
        })
        .collect();
    json!({
        "schema_version": r.schema_version,
        "test": r.test,
        "tool_version": r.tool_version,
        "started_at": r.started_at,
        "interrupted": r.interrupted,
        "embedded_server": r.embedded_server,
        "cpu_scope": "machine",
        "totals": headline,
        "notes": r.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1123_matches_iperf3() {
        // Captured from iperf3 3.12: "Sun, 22 Nov 2026 21:42:32 GMT", timesecs 1795383752.
        assert_eq!(rfc1123(1_795_383_752.4), "Sun, 22 Nov 2026 21:42:32 GMT");
        assert_eq!(rfc1123(0.0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn whole_numbers_print_as_integers() {
        let mut v = json!({"a": 2.0, "b": [0.5, 3.0], "c": 7});
        cjson_numbers(&mut v);
        assert_eq!(v.to_string(), r#"{"a":2,"b":[0.5,3],"c":7}"#);
    }

    #[test]
    fn host_port_split() {
        assert_eq!(
            split_host_port("127.0.0.1:5201"),
            ("127.0.0.1".into(), 5201)
        );
        assert_eq!(split_host_port("[::1]:80"), ("::1".into(), 80));
    }
}
