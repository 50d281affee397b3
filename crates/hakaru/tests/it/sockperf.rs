//! Interop with the stock sockperf (3.7 here): its clients against `hakaru server
//! --sockperf-port`, and `hakaru latency --sockperf` against its `sockperf sr`. Each case checks
//! that both sides agree on what was sent: on loopback with one message outstanding (or a
//! modest rate) nothing is lost, so message counts must be equal, not close.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{compat_pass, json, kill, peer, run, run_cmd, stderr, ServerProc};

const LIMIT: Duration = Duration::from_secs(30);

/// True when the test cannot run: sockperf is missing (a failure under HAKARU_TEST_PEERS=required).
fn skip() -> bool {
    !peer("sockperf", "sockperf")
}

/// A hakaru server with a sockperf port; returns it and that port.
fn server() -> (ServerProc, u16) {
    let s = ServerProc::start(&["--sockperf-port", "0"]);
    let line = s
        .wait_log("sockperf listening on", Duration::from_secs(10))
        .expect("no 'sockperf listening on' line");
    let port = line
        .split("sockperf listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("port in the sockperf log line");
    (s, port)
}

/// What hakaru's server logged for one sockperf client when it ended.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    messages: u64,
    bytes: u64,
    replies: u64,
    ignored: u64,
    malformed: u64,
}

impl Counts {
    /// The figures of a "... done: messages=M bytes=B ..." summary line.
    fn of(line: &str) -> Counts {
        let field = |k: &str| -> u64 {
            line.split(&format!(" {k}="))
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in {line}"))
        };
        Counts {
            messages: field("messages"),
            bytes: field("bytes"),
            replies: field("replies"),
            ignored: field("ignored"),
            malformed: field("malformed"),
        }
    }
}

/// Waits for the next "sockperf PROTO client ... done:" line: its protocol and figures.
fn next_done(s: &ServerProc, deadline: Instant) -> (String, Counts) {
    let left = deadline.saturating_duration_since(Instant::now());
    let line = s
        .wait_log(" done: messages=", left)
        .expect("no client summary from the server");
    let proto = line
        .split("sockperf ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("?")
        .to_string();
    let c = Counts::of(&line);
    (proto, c)
}

/// The figures of the next client of `proto` to end (summaries of the other protocol are
/// skipped, so callers wait for one protocol at a time).
fn client_done(s: &ServerProc, proto: &str) -> Counts {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (p, c) = next_done(s, deadline);
        if p == proto {
            return c;
        }
    }
}

/// Runs a stock sockperf client; asserts it exits 0 and returns its output (both streams).
fn sockperf(args: &[&str]) -> String {
    let o = run_cmd(Command::new("sockperf").args(args), LIMIT);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "sockperf {args:?} failed:\n{text}");
    assert!(
        !text.contains("ERROR"),
        "sockperf {args:?} reported an error:\n{text}"
    );
    text
}

/// The number after `key` in the first line that contains `line_has`.
fn figure(text: &str, line_has: &str, key: &str) -> u64 {
    text.lines()
        .find(|l| l.contains(line_has))
        .and_then(|l| l.split(key).nth(1))
        .and_then(|r| {
            r.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
        })
        .unwrap_or_else(|| panic!("no '{key}' on a '{line_has}' line in:\n{text}"))
}

/// sockperf's sent and received totals ("[Total Run]") and its dropped count.
fn pp_totals(text: &str) -> (u64, u64, u64) {
    (
        figure(text, "[Total Run]", "SentMessages="),
        figure(text, "[Total Run]", "ReceivedMessages="),
        figure(text, "dropped messages", "dropped messages ="),
    )
}

/// A stock ping-pong client against our server: every message counted and answered once.
fn pp_case(tcp: bool, size: usize) {
    let (s, port) = server();
    let (p, m) = (port.to_string(), size.to_string());
    let mut args = vec!["pp", "-i", "127.0.0.1", "-p", &p, "-t", "1", "-m", &m];
    if tcp {
        args.push("--tcp");
    }
    let out = sockperf(&args);
    let (sent, received, dropped) = pp_totals(&out);
    let c = client_done(&s, if tcp { "TCP" } else { "UDP" });
    assert!(sent > 0, "{out}");
    assert_eq!(
        c.messages, sent,
        "hakaru counted {c:?}, sockperf sent {sent}"
    );
    assert_eq!(c.replies, sent, "{c:?}");
    assert_eq!(c.bytes, sent * size as u64, "{c:?}");
    assert_eq!((c.malformed, c.ignored), (0, 0), "{c:?}");
    // The reply to the last request may still be in flight when sockperf stops.
    assert!(received <= sent && received + 1 >= sent, "{out}");
    assert_eq!(dropped, 0, "{out}");
    let mode = format!("pp {} -m {size}", if tcp { "TCP" } else { "UDP" });
    compat_pass("sockperf", "server", &mode, "client -> server -> client");
}

#[test]
fn pp_udp_smallest_message() {
    if skip() {
        return;
    }
    pp_case(false, 14);
}

#[test]
fn pp_udp_largest_message() {
    if skip() {
        return;
    }
    pp_case(false, 65_000);
}

#[test]
fn pp_tcp_small_message() {
    if skip() {
        return;
    }
    pp_case(true, 64);
}

#[test]
fn pp_tcp_message_larger_than_a_datagram() {
    if skip() {
        return;
    }
    pp_case(true, 100_000);
}

#[test]
fn ul_udp_answers_every_tenth_message() {
    if skip() {
        return;
    }
    let (s, port) = server();
    let p = port.to_string();
    let out = sockperf(&[
        "ul",
        "-i",
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "1",
        "--mps",
        "5000",
        "--reply-every",
        "10",
    ]);
    let (sent, received, dropped) = pp_totals(&out);
    let c = client_done(&s, "UDP");
    assert_eq!(c.messages, sent, "{c:?} against sockperf's {sent}");
    // sockperf numbers from 1 and wants a reply to each multiple of 10.
    assert_eq!(c.replies, sent / 10, "{c:?}");
    assert_eq!(c.bytes, sent * 14);
    // sockperf stops reading at its timer: the last replies may still be in flight then
    // (a few milliseconds' worth under a loaded machine; 500 replies a second here).
    assert!(received <= c.replies && received + 5 >= c.replies, "{out}");
    assert_eq!(dropped, 0, "{out}");
    compat_pass(
        "sockperf",
        "server",
        "ul UDP --mps 5000 --reply-every 10",
        "client -> server (every 10th answered)",
    );
}

#[test]
fn tp_udp_counts_every_message_sent() {
    if skip() {
        return;
    }
    let (s, port) = server();
    let p = port.to_string();
    // A modest rate: at --mps max one UDP socket on loopback can overflow and drop, which
    // would make the exact comparison below about the kernel, not the protocol.
    let out = sockperf(&[
        "tp",
        "-i",
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "1",
        "--mps",
        "10000",
        "-m",
        "1472",
    ]);
    let sent = figure(&out, "messages sent", "Total of");
    let c = client_done(&s, "UDP");
    assert!(sent > 0);
    assert_eq!(c.messages, sent, "{c:?} against sockperf's {sent} sent");
    assert_eq!(c.bytes, sent * 1472);
    assert_eq!(c.replies, 0, "throughput mode wants no replies: {c:?}");
    compat_pass(
        "sockperf",
        "server",
        "tp UDP --mps 10000 -m 1472",
        "client -> server",
    );
}

#[test]
fn dummy_send_garbage_is_ignored() {
    if skip() {
        return;
    }
    let (s, port) = server();
    let p = port.to_string();
    // --dummy-send writes its header in host byte order: not a valid message on the wire.
    let out = sockperf(&[
        "ul",
        "-i",
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "1",
        "--mps",
        "1000",
        "--reply-every",
        "10",
        "--dummy-send",
        "5000",
    ]);
    let (sent, _, dropped) = pp_totals(&out);
    let c = client_done(&s, "UDP");
    assert_eq!(c.messages, sent, "{c:?}");
    assert_eq!(c.replies, sent / 10, "{c:?}");
    assert!(c.malformed > 0, "no dummy datagrams seen: {c:?}");
    assert_eq!(dropped, 0, "{out}");
    compat_pass(
        "sockperf",
        "server",
        "ul UDP --dummy-send 5000",
        "client -> server (every 10th answered)",
    );
}

#[test]
fn malformed_input_is_ignored_and_service_goes_on() {
    if skip() {
        return;
    }
    let (mut s, port) = server();
    let addr = format!("127.0.0.1:{port}");
    let raw = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut bad_len = vec![0u8; 30];
    bad_len[9] = 3;
    bad_len[10..14].copy_from_slice(&31u32.to_be_bytes());
    let mut tiny_len = vec![0u8; 14];
    tiny_len[9] = 3;
    tiny_len[13] = 2;
    let garbage: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xff; 5],
        vec![0xab; 13],
        bad_len,
        tiny_len,
        vec![0xff; 1400],
    ];
    for g in &garbage {
        raw.send_to(g, &addr).unwrap();
    }
    let mut b = [0u8; 16];
    // Nothing answered the garbage.
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(raw.recv(&mut b).is_err(), "the server answered garbage");
    let c = client_done(&s, "UDP");
    assert_eq!(c.malformed, garbage.len() as u64, "{c:?}");
    assert_eq!((c.messages, c.replies), (0, 0), "{c:?}");
    // A TCP stream whose first header has an impossible length: that connection is closed.
    let mut t = TcpStream::connect(&addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    t.write_all(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    assert!(
        matches!(t.read(&mut b), Ok(0) | Err(_)),
        "got a reply to garbage"
    );
    let c = client_done(&s, "TCP");
    assert_eq!((c.messages, c.malformed), (0, 1), "{c:?}");
    assert!(s.alive());
    pp_after(&s, port);
    compat_pass(
        "sockperf",
        "server",
        "pp UDP after malformed datagrams",
        "client -> server -> client",
    );
}

fn pp_after(s: &ServerProc, port: u16) {
    let p = port.to_string();
    let out = sockperf(&["pp", "-i", "127.0.0.1", "-p", &p, "-t", "1"]);
    let (sent, _, dropped) = pp_totals(&out);
    let c = client_done(s, "UDP");
    assert_eq!((c.messages, c.replies, c.malformed), (sent, sent, 0));
    assert_eq!(dropped, 0);
}

/// Several stock clients at once, UDP and TCP: the UDP port is shared and stateless, each
/// TCP connection has its own thread; every client's messages are counted and answered.
#[test]
fn several_clients_at_once() {
    if skip() {
        return;
    }
    let (s, port) = server();
    let p = port.to_string();
    let clients: Vec<_> = [false, false, false, true]
        .into_iter()
        .map(|tcp| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut args = vec!["pp", "-i", "127.0.0.1", "-p", &p, "-t", "1", "-m", "200"];
                if tcp {
                    args.push("--tcp");
                }
                (tcp, pp_totals(&sockperf(&args)).0)
            })
        })
        .collect();
    let sent: Vec<(bool, u64)> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let done: Vec<(String, Counts)> = (0..4).map(|_| next_done(&s, deadline)).collect();
    let total = |tcp: bool| -> u64 { sent.iter().filter(|c| c.0 == tcp).map(|c| c.1).sum() };
    let counted = |proto: &str, f: fn(&Counts) -> u64| -> u64 {
        done.iter().filter(|d| d.0 == proto).map(|d| f(&d.1)).sum()
    };
    assert_eq!(done.iter().filter(|d| d.0 == "UDP").count(), 3, "{done:?}");
    assert_eq!(
        counted("UDP", |c| c.messages),
        total(false),
        "{done:?} {sent:?}"
    );
    assert_eq!(counted("UDP", |c| c.replies), total(false), "{done:?}");
    assert_eq!(
        counted("TCP", |c| c.messages),
        total(true),
        "{done:?} {sent:?}"
    );
    assert_eq!(counted("TCP", |c| c.replies), total(true), "{done:?}");
    assert_eq!(counted("UDP", |c| c.bytes), total(false) * 200);
    compat_pass(
        "sockperf",
        "server",
        "pp, 3 UDP and 1 TCP clients at once",
        "client -> server -> client",
    );
}

/// A port free for both TCP and UDP on 127.0.0.1 right now.
fn free_port() -> u16 {
    for _ in 0..50 {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free for both TCP and UDP");
}

/// A stock `sockperf sr`, output to a file; killed by PID when dropped.
struct StockServer {
    child: Child,
    log: std::path::PathBuf,
    port: u16,
}

impl StockServer {
    fn start(tcp: bool) -> StockServer {
        let port = free_port();
        let log =
            std::env::temp_dir().join(format!("hk-sockperf-sr-{}-{port}.log", std::process::id()));
        let f = File::create(&log).unwrap();
        let p = port.to_string();
        let mut args = vec!["sr", "-i", "127.0.0.1", "-p", &p];
        if tcp {
            args.push("--tcp");
        }
        let child = Command::new("sockperf")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn sockperf sr");
        StockServer { child, log, port }
    }

    /// Stops it with SIGINT (so it prints its total) and returns everything it printed.
    fn stop(mut self) -> String {
        kill(self.child.id(), 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for StockServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill(self.child.id(), 9);
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A sockperf ping-pong request for the readiness probes.
fn probe_request(seq: u64) -> [u8; 14] {
    let mut req = [0u8; 14];
    req[..8].copy_from_slice(&seq.to_be_bytes());
    req[9] = 3;
    req[13] = 14;
    req
}

/// True for sockperf's answer to a probe: 14 bytes with the client flag cleared.
fn is_answer(buf: &[u8]) -> bool {
    buf.len() == 14 && buf[8..10] == [0, 2]
}

/// Waits until the stock server answers a probe; returns how many probe messages it counted
/// (`None` if it never answered, e.g. it lost a race for its port).
fn wait_ready(port: u16, tcp: bool) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 64];
    if tcp {
        while Instant::now() < deadline {
            // A real request, so a self-connected socket (which reads back its own request)
            // or some other listener cannot pass for sockperf.
            if let Ok(mut t) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
                if t.write_all(&probe_request(1)).is_ok()
                    && t.read_exact(&mut buf[..14]).is_ok()
                    && is_answer(&buf[..14])
                {
                    return Some(1);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        return None;
    }
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe.connect(("127.0.0.1", port)).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut answered = 0;
    let mut seq = 0u64;
    while answered == 0 && Instant::now() < deadline {
        seq += 1;
        let _ = probe.send(&probe_request(seq));
        if matches!(probe.recv(&mut buf), Ok(14)) && is_answer(&buf[..14]) {
            answered += 1;
        }
    }
    // Probes sent before the socket was bound were never counted; any that were counted are
    // answered (loopback loses nothing), so count the late answers too.
    while matches!(probe.recv(&mut buf), Ok(14)) {
        answered += 1;
    }
    (answered > 0).then_some(answered)
}

/// A stock `sockperf sr` that answers, and the probe messages it has counted so far.
fn ready_server(tcp: bool) -> (StockServer, u64) {
    for _ in 0..5 {
        let sr = StockServer::start(tcp);
        if let Some(probes) = wait_ready(sr.port, tcp) {
            return (sr, probes);
        }
        // Another process took the port between our check and sockperf's bind: try another.
        let port = sr.port;
        eprintln!("sockperf sr on {port} did not answer:\n{}", sr.stop());
    }
    panic!("sockperf sr never answered a probe");
}

/// `hakaru latency --sockperf` against a stock `sockperf sr`.
fn client_case(tcp: bool) {
    let (sr, probes) = ready_server(tcp);
    let p = sr.port.to_string();
    let mut args = vec![
        "latency",
        "127.0.0.1",
        "--sockperf",
        "-p",
        &p,
        "-t",
        "1",
        "-l",
        "64",
        "--json",
    ];
    if !tcp {
        args.push("--udp");
    }
    let o: Output = run(&args, LIMIT);
    let text = sr.stop();
    assert!(o.status.success(), "hakaru failed: {}", stderr(&o));
    let r = json(&o);
    let l = &r["latency"];
    let u = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("no {k} in {l}"));
    assert_eq!(l["transport"], if tcp { "tcp" } else { "udp" });
    assert_eq!(r["spec"]["peer"], "sockperf");
    assert!(u("replies") > 0, "{l}");
    assert_eq!(u("requests"), u("replies"), "closed loop on loopback: {l}");
    assert_eq!(u("lost"), 0);
    assert!(r["server_end"]["cpu"].is_null(), "sockperf reports no CPU");
    let handled = figure(&text, "messages received and handled", "Total");
    // sockperf counted every request hakaru sent, warm-up included, plus the readiness probes.
    assert_eq!(
        handled,
        u("requests") + u("warmup_discarded") + probes,
        "sockperf sr handled {handled}; hakaru: {l}; probes {probes}"
    );
    let mode = if tcp { "sr TCP" } else { "sr UDP" };
    compat_pass("sockperf", "client", mode, "client -> server -> client");
}

#[test]
fn latency_client_against_stock_sr_udp() {
    if skip() {
        return;
    }
    client_case(false);
}

#[test]
fn latency_client_against_stock_sr_tcp() {
    if skip() {
        return;
    }
    client_case(true);
}

/// Without HOST, `--sockperf` runs against the embedded server's sockperf port: no peer binary
/// needed, so this runs everywhere.
#[test]
fn latency_sockperf_against_the_embedded_port() {
    let o = run(
        &[
            "latency",
            "--sockperf",
            "--udp",
            "-t",
            "1",
            "-i",
            "0",
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    let l = &r["latency"];
    assert!(l["replies"].as_u64().unwrap() > 0, "{l}");
    assert_eq!(l["replies"], l["requests"]);
    assert!(r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap_or("").contains("sockperf")));
    let bad = run(
        &["latency", "--sockperf", "--server-affinity", "0", "-t", "1"],
        LIMIT,
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

/// `n` consecutive ports free for both TCP and UDP on 127.0.0.1 right now: the first.
fn free_range(n: u16) -> u16 {
    for _ in 0..100 {
        let base = free_port();
        let Some(last) = base.checked_add(n - 1) else {
            continue;
        };
        let free = (base..=last).all(|p| {
            TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
        });
        if free {
            return base;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// A hakaru server answering sockperf on `n` consecutive ports, with `extra` flags; returns
/// it and the first port once its "sockperf listening on ADDR:FIRST-LAST" line came.
fn range_server(n: u16, extra: &[&str]) -> (ServerProc, u16) {
    // Another process may take a port between the probe and the bind: try again then.
    for _ in 0..5 {
        let base = free_range(n);
        let range = format!("{base}-{}", base + n - 1);
        let mut args = vec!["--sockperf-port", &range];
        args.extend_from_slice(extra);
        let started = std::panic::catch_unwind(|| ServerProc::start(&args));
        let Ok(s) = started else { continue };
        let line = s
            .wait_log("sockperf listening on", Duration::from_secs(10))
            .expect("no 'sockperf listening on' line");
        assert!(
            line.contains(&format!("127.0.0.1:{range} (UDP and TCP")),
            "{line}"
        );
        return (s, base);
    }
    panic!("no server on {n} consecutive ports");
}

/// The figures of the clients of `proto` served on each of `ports` (one client a port), as
/// their summaries come, in any order; other summaries are skipped.
fn done_by_port(
    s: &ServerProc,
    proto: &str,
    ports: &[u16],
    deadline: Instant,
) -> std::collections::HashMap<u16, Counts> {
    let tag = format!("sockperf {proto} client ");
    let mut got = std::collections::HashMap::new();
    while got.len() < ports.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = s
            .wait_log(" done: messages=", left)
            .unwrap_or_else(|| panic!("{proto} summaries missing: have {got:?} of {ports:?}"));
        let port = line
            .split(" (port ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port.filter(|p| line.contains(&tag) && ports.contains(p)) else {
            continue;
        };
        let c = Counts::of(&line);
        assert!(
            got.insert(port, c).is_none(),
            "two summaries on port {port}"
        );
    }
    got
}

/// The figures of the next client of `proto` served on local port `port` to end.
fn done_on(s: &ServerProc, proto: &str, port: u16, deadline: Instant) -> Counts {
    done_by_port(s, proto, &[port], deadline)
        .remove(&port)
        .expect("a summary")
}

/// Every port of a range answers, on receiver threads that each serve several ports: stock
/// ping-pong clients (UDP and TCP) and a throughput client on the first, middle and last
/// ports, each counted by the server on the port it used.
#[test]
fn every_port_of_a_range_answers() {
    if skip() {
        return;
    }
    let n = 16;
    let (s, base) = range_server(n, &["--sockperf-threads", "3"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    for port in [base, base + 1, base + 7, base + n - 1] {
        let p = port.to_string();
        let out = sockperf(&["pp", "-i", "127.0.0.1", "-p", &p, "-t", "1", "-m", "64"]);
        let (sent, received, dropped) = pp_totals(&out);
        let c = done_on(&s, "UDP", port, deadline);
        assert!(sent > 0, "{out}");
        assert_eq!((c.messages, c.replies), (sent, sent), "port {port}: {c:?}");
        assert_eq!(c.bytes, sent * 64, "port {port}: {c:?}");
        assert!(received + 1 >= sent && dropped == 0, "port {port}: {out}");
    }
    for port in [base + 2, base + n - 2] {
        let p = port.to_string();
        let out = sockperf(&["pp", "-i", "127.0.0.1", "-p", &p, "-t", "1", "--tcp"]);
        let (sent, _, dropped) = pp_totals(&out);
        let c = done_on(&s, "TCP", port, deadline);
        assert!(sent > 0, "{out}");
        assert_eq!((c.messages, c.replies), (sent, sent), "port {port}: {c:?}");
        assert_eq!(dropped, 0, "{out}");
    }
    let p = (base + 5).to_string();
    let out = sockperf(&[
        "tp",
        "-i",
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "1",
        "--mps",
        "10000",
        "-m",
        "14",
    ]);
    let sent = figure(&out, "messages sent", "Total of");
    let c = done_on(&s, "UDP", base + 5, deadline);
    assert_eq!(
        (c.messages, c.replies),
        (sent, 0),
        "{c:?} against {sent} sent"
    );
    compat_pass(
        "sockperf",
        "server",
        "pp UDP/TCP and tp on ports of --sockperf-port FIRST-LAST",
        "client -> server -> client",
    );
}

/// The guides' shape: 64 throughput clients, one per port of a 64-port range, all at once
/// (at a modest rate each: the machine under test is shared); each port's messages are
/// counted on that port, none more than its client sent.
#[test]
fn one_throughput_client_per_port_at_once() {
    if skip() {
        return;
    }
    let n = 64;
    let (s, base) = range_server(n, &[]);
    let clients: Vec<_> = (base..base + n)
        .map(|port| {
            std::thread::spawn(move || {
                let p = port.to_string();
                let out = sockperf(&[
                    "tp",
                    "-i",
                    "127.0.0.1",
                    "-p",
                    &p,
                    "-t",
                    "1",
                    "--mps",
                    "2000",
                    "-m",
                    "14",
                ]);
                (port, figure(&out, "messages sent", "Total of"))
            })
        })
        .collect();
    let sent: Vec<(u16, u64)> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    let ports: Vec<u16> = sent.iter().map(|c| c.0).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let counted = done_by_port(&s, "UDP", &ports, deadline);
    for (port, sent) in sent {
        let got = counted[&port].messages;
        assert!(
            sent > 0 && got > 0 && got <= sent,
            "port {port}: {got} of {sent}"
        );
    }
    compat_pass(
        "sockperf",
        "server",
        "64 x tp UDP -m 14 on a 64-port range",
        "client -> server",
    );
}

/// A bad range is refused before anything is bound, naming why.
#[test]
fn bad_sockperf_ranges_are_refused() {
    for (args, says) in [
        (&["--sockperf-port", "5-3"][..], "FIRST <= LAST"),
        (
            &["--sockperf-port", "2000-3024"][..],
            "1025 ports; at most 1024",
        ),
        (&["--sockperf-port", "0-10"][..], "FIRST <= LAST"),
        (&["--sockperf-port", "70000"][..], "not a port"),
        (
            &["--sockperf-port", "7000-7010", "--sockperf-threads", "65"][..],
            "65",
        ),
        (&["--sockperf-threads", "2"][..], "--sockperf-port"),
    ] {
        let mut all = vec!["server", "-B", "127.0.0.1", "-p", "0"];
        all.extend_from_slice(args);
        let o = run(&all, LIMIT);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--sockperf-reply-rate` is one budget per client across the whole range, whichever port
/// and thread its messages arrive on: four clients from one address on four ports, each port
/// on its own thread, get the budget's replies between them, not four times it.
#[test]
fn the_reply_rate_holds_across_the_range() {
    if skip() {
        return;
    }
    let rate = 200u64;
    let (s, base) = range_server(
        4,
        &[
            "--sockperf-threads",
            "4",
            "--sockperf-reply-rate",
            &rate.to_string(),
        ],
    );
    let start = Instant::now();
    let clients: Vec<_> = (base..base + 4)
        .map(|port| {
            std::thread::spawn(move || {
                let p = port.to_string();
                let out = sockperf(&[
                    "ul",
                    "-i",
                    "127.0.0.1",
                    "-p",
                    &p,
                    "-t",
                    "2",
                    "--mps",
                    "1000",
                    "--reply-every",
                    "1",
                ]);
                (port, pp_totals(&out).0)
            })
        })
        .collect();
    let sent: Vec<(u16, u64)> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    // Every token the budget can have given: a full bucket to start, then `rate` a second.
    let bound = rate * (start.elapsed().as_secs() + 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let ports: Vec<u16> = sent.iter().map(|c| c.0).collect();
    let counted = done_by_port(&s, "UDP", &ports, deadline);
    let mut replies = 0;
    for &(port, sent) in &sent {
        let c = &counted[&port];
        assert_eq!(c.messages, sent, "port {port}: {c:?}");
        replies += c.replies;
    }
    let asked: u64 = sent.iter().map(|c| c.1).sum();
    assert!(
        asked > 2 * bound,
        "too few requests to test the budget: {asked}"
    );
    assert!(
        replies >= rate && replies <= bound,
        "{replies} replies to {asked} requests; one budget of {rate}/s allows at most {bound}"
    );
}

/// A lone sockperf port's receiver waits with no receive timeout on Linux, the accept thread
/// waking it with empty datagrams of its own every tick and shutting its receive side at a
/// stop. Against the real binary: a client's summary still comes once it has been quiet
/// (only a wake-up can end that wait), the wake-ups are no client (the stop's total is the
/// two clients' messages alone, and no other client is summarised), and SIGTERM with a client
/// mid-test stops the server (it joins the receiver, whose untimed wait the stop must end:
/// shutting the receive side does so for certain, the accept thread's last wake-up usually).
#[test]
fn the_lone_ports_wake_ups_are_no_client_and_a_stop_ends_its_wait() {
    let (mut s, port) = server();
    let ask = |c: &UdpSocket, n: u64| {
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for seq in 0..n {
            c.send_to(&probe_request(seq), ("127.0.0.1", port)).unwrap();
            let mut buf = [0u8; 64];
            let got = c.recv(&mut buf).expect("an answer");
            assert!(is_answer(&buf[..got]), "{:?}", &buf[..got]);
        }
    };
    let quiet = UdpSocket::bind("127.0.0.1:0").unwrap();
    ask(&quiet, 5);
    let c = client_done(&s, "UDP");
    assert_eq!((c.messages, c.replies, c.malformed), (5, 5, 0), "{c:?}");
    // A second client mid-test (it never goes quiet for long) when the server is stopped,
    // after a second of wake-ups.
    let busy = UdpSocket::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    ask(&busy, 3);
    std::thread::sleep(Duration::from_secs(1));
    ask(&busy, 3);
    kill(s.child.id(), 15);
    let t0 = Instant::now();
    while s.alive() && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!s.alive(), "the server did not stop on SIGTERM");
    // Every line, up to the end of the log (the reader ends with the process's stderr).
    let mut rest = Vec::new();
    while let Ok(l) = s.log.recv_timeout(Duration::from_secs(5)) {
        rest.push(l);
    }
    let total = rest
        .iter()
        .find(|l| l.contains("sockperf UDP total: "))
        .unwrap_or_else(|| panic!("no total in {rest:?}"));
    let t = Counts::of(total);
    assert_eq!((t.messages, t.replies, t.malformed), (11, 11, 0), "{total}");
    let done: Vec<&String> = rest.iter().filter(|l| l.contains(" done: ")).collect();
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(
        done[0].contains(&format!("client 127.0.0.1:{busy_port} ")),
        "{done:?}"
    );
}
