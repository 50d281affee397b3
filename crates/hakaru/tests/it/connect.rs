//! `hakaru connect` (connections per second, netperf TCP_CRR style) end to end: FIN and RST
//! closes on loopback, against the embedded server and a server process, counts that
//! reconcile, clear errors, a server that outlives a killed client, and (in network
//! namespaces, as root) a port range that runs out.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{bin, count, hakaru, json, kill, num, run, stderr, threads_of, ServerProc};
use super::netns_link::{Link, Shaping};

const LIMIT: Duration = Duration::from_secs(60);

fn ok_json(args: &[&str]) -> Value {
    let o = run(args, LIMIT);
    assert!(o.status.success(), "hakaru {args:?} failed: {}", stderr(&o));
    json(&o)
}

fn fails_with(args: &[&str], code: i32, needles: &[&str]) -> String {
    let o = run(args, LIMIT);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "hakaru {args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "hakaru {args:?}: expected {n:?} in: {err}");
    }
    err
}

/// Percentiles in order and one sample per connection.
fn assert_distribution(l: &Value, connections: u64, what: &str) {
    assert_eq!(count(l, "/count"), connections, "{what}: one sample each");
    let get = |k: &str| num(l, &format!("/{k}"));
    let order = [
        "min_us", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us",
    ];
    for w in order.windows(2) {
        assert!(get(w[0]) <= get(w[1]), "{what}: {} > {}: {l}", w[0], w[1]);
    }
    assert!(get("min_us") > 0.0, "{what}: {l}");
    assert!(get("min_us") <= get("mean_us") && get("mean_us") <= get("max_us"));
}

/// Everything a clean connect run must show.
fn assert_clean_run(r: &Value, close: &str, connectors: u64) {
    assert_eq!(r["test"], "connect");
    assert_eq!(r["spec"]["kind"], "connect");
    assert_eq!(count(r, "/spec/connectors"), connectors);
    assert_eq!(r["flows"].as_array().map(Vec::len), Some(0));
    assert_eq!(r["totals"].as_array().map(Vec::len), Some(0));
    let c = &r["connect"];
    let n = count(c, "/connections");
    assert!(n > 100, "only {n} connections in a second: {c}");
    assert_eq!(count(c, "/failed"), 0, "{c}");
    assert_eq!(c["close"], close);
    // FIN: the server closes first, as netserver does in TCP_CRR; RST: the client.
    let first = if close == "fin" { "server" } else { "client" };
    assert_eq!(c["first_close"], first, "{c}");
    assert_eq!(c["errors"].as_array().map(Vec::len), Some(0), "{c}");
    let secs = num(c, "/seconds");
    assert!((0.9..5.0).contains(&secs), "seconds {secs}");
    let cps = num(c, "/connections_per_second");
    assert!((cps - n as f64 / secs).abs() < 1e-6 * cps.max(1.0), "{c}");
    assert_distribution(&c["connect_time"], n, "connect_time");
    assert_distribution(&c["transaction_time"], n, "transaction_time");
    // A transaction includes its connect.
    assert!(num(c, "/transaction_time/min_us") >= num(c, "/connect_time/min_us"));
    assert!(c["histogram"].as_array().is_some_and(Vec::is_empty));
    // The server served at least every connection the client completed, and dropped none of
    // them (a connection can only be dropped if the client gave up on it).
    let served = count(c, "/server/served");
    assert!(served >= n, "server served {served} < {n}");
    assert_eq!(count(c, "/server/foreign"), 0);
    assert_eq!(count(c, "/server/dropped"), 0, "{c}");
    // Intervals are counted at the client and add up to at most the total (a last interval
    // under 5 % of -i is not reported).
    let intervals = r["intervals"].as_array().expect("intervals");
    assert!(!intervals.is_empty());
    let sum: u64 = intervals
        .iter()
        .map(|i| count(i, "/connect/connections"))
        .sum();
    assert!(sum <= n && sum * 10 >= n * 9, "intervals {sum} against {n}");
    assert!(intervals.iter().all(|i| i["flows"] == Value::Array(vec![])));
    // CPU at both ends.
    assert!(r["client"]["cpu"].is_object() && r["server_end"]["cpu"].is_object());
}

#[test]
fn connect_with_fin_on_loopback() {
    let r = ok_json(&["connect", "-t", "1", "--json"]);
    assert_clean_run(&r, "fin", 1);
    assert_eq!(r["embedded_server"], true);
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("the server first") && notes.contains("TIME_WAIT stays at the server"),
        "{notes}"
    );
}

#[test]
fn connect_with_rst_and_four_connectors_against_a_server() {
    let s = ServerProc::start(&[]);
    let r = ok_json(&[
        "connect",
        "127.0.0.1",
        "-p",
        &s.port_s(),
        "-t",
        "1",
        "--rst",
        "-P",
        "4",
        "--json",
    ]);
    assert_clean_run(&r, "rst", 4);
    assert_eq!(r["embedded_server"], false);
    assert!(!r["notes"].to_string().contains("TIME_WAIT"));
    let line = s.wait_log("connections served", Duration::from_secs(10));
    assert!(
        line.as_deref().is_some_and(|l| l.contains("close rst")),
        "{line:?}"
    );
}

#[test]
fn connect_sizes_histogram_and_text_output() {
    let r = ok_json(&[
        "connect",
        "-t",
        "1",
        "--rst",
        "--request",
        "3000",
        "--response",
        "64K",
        "--histogram",
        "--json",
    ]);
    let c = &r["connect"];
    assert_eq!(count(&r, "/spec/request"), 3000);
    assert_eq!(count(&r, "/spec/response"), 65536);
    assert_eq!(count(c, "/failed"), 0);
    let n = count(c, "/connections");
    let buckets = c["histogram"].as_array().expect("histogram");
    assert!(!buckets.is_empty());
    assert_eq!(buckets.iter().map(|b| count(b, "/count")).sum::<u64>(), n);

    let o = run(&["connect", "-t", "1", "-i", "0.5", "--rst"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("hakaru connect to "), "{out}");
    assert!(
        out.lines().next().is_some_and(|l| l.contains("RST")),
        "{out}"
    );
    assert!(
        out.lines().filter(|l| l.starts_with("[CPS]")).count() >= 3,
        "{out}"
    );
    assert!(
        out.contains("connect time") && out.contains("p99.99"),
        "{out}"
    );
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("connect: ") && last.contains("connections/s, close rst"),
        "{out}"
    );
}

#[test]
fn connect_refused_port_is_a_one_line_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = fails_with(
        &["connect", "127.0.0.1", "-p", &port.to_string(), "-t", "1"],
        1,
        &["hakaru: error:", "connection refused"],
    );
    assert_eq!(err.lines().count(), 1, "one-line error expected: {err}");
}

#[test]
fn connect_bad_flags_name_the_flag() {
    fails_with(&["connect", "-P", "0"], 2, &["-P/--parallel"]);
    fails_with(&["connect", "-P", "1025"], 2, &["-P/--parallel"]);
    fails_with(&["connect", "--request", "0"], 2, &["--request"]);
    fails_with(&["connect", "--response", "65537"], 2, &["--response"]);
    fails_with(&["connect", "-t", "0"], 2, &["-t/--time"]);
    fails_with(&["connect", "-i", "1ms"], 2, &["-i/--interval"]);
    fails_with(&["connect", "--request", "12Q"], 2, &["--request"]);
    fails_with(&["connect", "-A", "4000"], 2, &["-A/--affinity"]);
    fails_with(
        &["connect", "--server-affinity", "4000", "-t", "1"],
        1,
        &["--server-affinity"],
    );
    fails_with(&["connect", "-R"], 2, &["-R"]);
}

#[test]
fn server_keeps_serving_after_a_connect_client_is_killed() {
    let mut s = ServerProc::start(&[]);
    let base = threads_of(s.child.id());
    let mut client = hakaru()
        .args([
            "connect",
            "127.0.0.1",
            "-p",
            &s.port_s(),
            "-t",
            "30",
            "-P",
            "4",
            "--rst",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(s.wait_log("test 1 from", Duration::from_secs(10)).is_some());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        threads_of(s.child.id()) > base,
        "accept workers should be running"
    );
    kill(client.id(), 9);
    let _ = client.wait();
    assert!(
        s.wait_log("aborted", Duration::from_secs(5)).is_some(),
        "server did not log the abort within 5 s"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while threads_of(s.child.id()) > base && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        threads_of(s.child.id()),
        base,
        "test threads were not freed"
    );
    assert!(s.alive());
    let r = ok_json(&[
        "connect",
        "127.0.0.1",
        "-p",
        &s.port_s(),
        "-t",
        "1",
        "--rst",
        "--json",
    ]);
    assert!(count(&r, "/connect/connections") > 0);
    assert_eq!(count(&r, "/connect/failed"), 0);
}

/// TCP sockets in TIME_WAIT in a namespace, by the kernel's own table.
fn time_wait_in(out: &std::process::Output) -> usize {
    assert!(out.status.success(), "{}", stderr(out));
    // `ss -tanH state time-wait`: one line per socket, no heading.
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn fin_leaves_time_wait_at_the_server_and_exhausted_ports_end_the_test_clearly() {
    // A real link (loopback may reuse TIME_WAIT ports) and a client namespace with 200 ports.
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    let range = |r: &str| {
        let set = link.in_client(
            &[
                "sh",
                "-c",
                &format!("echo '{r}' > /proc/sys/net/ipv4/ip_local_port_range"),
            ],
            Duration::from_secs(10),
        );
        assert!(set.status.success(), "{}", stderr(&set));
    };
    range("40000 40199");
    let s = link.start_server();
    let port = s.port_s();
    // RST leaves no TIME_WAIT: far more connections than ports.
    let r = link.client_json(
        &[
            "connect",
            &link.server_ip,
            "-p",
            &port,
            "-t",
            "1",
            "--rst",
            "--json",
        ],
        LIMIT,
    );
    let n = count(&r, "/connect/connections");
    assert!(n > 400, "--rst made only {n} connections over 200 ports");
    assert_eq!(count(&r, "/connect/failed"), 0);
    assert_eq!(r["connect"]["first_close"], "client");
    // FIN: the server closes first, as netserver does in TCP_CRR, so TIME_WAIT is the
    // server's and the client's 200 ports serve far more connections than that.
    let ss = ["ss", "-tanH", "state", "time-wait"];
    let before = time_wait_in(&link.in_server(&ss));
    let r = link.client_json(
        &["connect", &link.server_ip, "-p", &port, "-t", "1", "--json"],
        LIMIT,
    );
    let n = count(&r, "/connect/connections");
    assert!(n > 400, "FIN made only {n} connections over 200 ports");
    assert_eq!(count(&r, "/connect/failed"), 0, "{}", r["connect"]);
    assert_eq!(r["connect"]["first_close"], "server");
    let at_client = time_wait_in(&link.in_client(&ss, Duration::from_secs(10)));
    let at_server = time_wait_in(&link.in_server(&ss)) - before;
    assert!(
        at_client < 10,
        "{at_client} sockets in TIME_WAIT at the client"
    );
    // A new connection from a client port takes over the server's TIME_WAIT socket of that
    // 4-tuple, so the server keeps one per client port used (connect prefers even ports: 100).
    assert!(
        at_server >= 50,
        "{at_server} sockets in TIME_WAIT at the server after {n} connections"
    );
    // One port for two connectors: the test stops at once with an error naming the cause and
    // the cures, not a hang or a spin.
    range("40000 40000");
    let started = Instant::now();
    let o = link.in_client(
        &[
            bin(),
            "connect",
            &link.server_ip,
            "-p",
            &port,
            "-t",
            "20",
            "-P",
            "2",
        ],
        LIMIT,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.lines().count(), 1, "one-line error expected: {err}");
    for needle in [
        "out of local ports after",
        "40000-40000",
        "2 open connections",
        "-P connectors",
        "ip_local_port_range",
    ] {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
}
