//! Interop with stock iperf3 (Debian's 3.12): hakaru serving iperf3 clients on its port, and
//! hakaru's `--iperf3` client against `iperf3 -s`. Every case checks that both sides agree on
//! what moved and that the stock tool exits 0.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

const LIMIT: Duration = Duration::from_secs(40);

/// Runs a stock iperf3 client against `port` with `-J` and returns its exit status and JSON.
fn stock_client(port: u16, args: &[&str]) -> (Output, Value) {
    let p = port.to_string();
    let o = run_cmd(
        Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-p", &p, "-J"])
            .args(args),
        LIMIT,
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 -J output is not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(&o)
        )
    });
    (o, v)
}

fn assert_ok(o: &Output, v: &Value) {
    assert!(
        o.status.success() && v.get("error").is_none(),
        "iperf3 failed ({:?}): {}\n{}",
        o.status,
        v.get("error").unwrap_or(&Value::Null),
        stderr(o)
    );
}

/// The bytes hakaru's server logged for the finished iperf3 test: (received, sent).
fn server_counts(srv: &ServerProc) -> (u64, u64) {
    let line = srv
        .wait_log("iperf3 test", Duration::from_secs(15))
        .and_then(|l| {
            if l.contains("finished") {
                Some(l)
            } else {
                srv.wait_log("finished after", Duration::from_secs(15))
            }
        })
        .expect("the server logs the end of the iperf3 test");
    let after = |key: &str| -> u64 {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{key}' count in {line}"))
    };
    (after("received "), after("sent "))
}

/// The largest TCP receive buffer autotuning may give a socket (tcp_rmem's third value).
fn rmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(6 << 20)
}

fn within_1pct(a: u64, b: u64) -> bool {
    let (a, b) = (a as f64, b as f64);
    (a - b).abs() <= 0.01 * a.max(b)
}

fn sum_bytes(v: &Value, key: &str) -> u64 {
    count(v, &format!("/end/{key}/bytes"))
}

/// A TCP case against hakaru's server: the client's receiver figure is the server's count,
/// and the two ends agree within 1 %.
fn tcp_case(args: &[&str], mode: &str, dir: &str) {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start(&[]);
    let (o, v) = stock_client(srv.port, args);
    assert_ok(&o, &v);
    let (rx, tx) = server_counts(&srv);
    let bidir = args.contains(&"--bidir");
    let reverse = args.contains(&"-R");
    let sent = sum_bytes(&v, "sum_sent");
    let received = sum_bytes(&v, "sum_received");
    assert!(sent > 0 && received > 0, "nothing moved: {}", v["end"]);
    if reverse {
        // The server sent; the client received.
        assert_eq!(sent, tx, "client's sender figure is the server's count");
        assert_eq!(rx, 0);
    } else {
        assert_eq!(
            received, rx,
            "client's receiver figure is the server's count"
        );
        if !bidir {
            assert_eq!(tx, 0);
        }
    }
    if bidir {
        let back = sum_bytes(&v, "sum_sent_bidir_reverse");
        assert_eq!(back, tx, "reverse half sent by the server");
        // The stock client stops reading at TEST_END (docs/protocol-notes.md): what its
        // sockets had received but it had not read is the only allowed gap beyond 1 %, bounded
        // by its receive buffers (streams x tcp_rmem max).
        let got = sum_bytes(&v, "sum_received_bidir_reverse");
        let streams = count(&v, "/start/test_start/num_streams");
        let unread_bound = streams * rmem_max();
        assert!(
            got <= back && (within_1pct(back, got) || back - got <= unread_bound),
            "reverse half: server sent {back}, client read {got} (bound {unread_bound})"
        );
    }
    // With -R the stock client receives: the same unread-buffer allowance as above.
    let allowance = if reverse {
        count(&v, "/start/test_start/num_streams") * rmem_max()
    } else {
        0
    };
    assert!(
        within_1pct(sent, received) || (received <= sent && sent - received <= allowance),
        "ends disagree: sent {sent}, received {received}"
    );
    compat_pass("iperf3", "server", mode, dir);
}

#[test]
fn iperf3_tcp_one_stream() {
    tcp_case(&["-t", "2"], "TCP -P 1", "client to server");
}

#[test]
fn iperf3_tcp_four_streams_reverse() {
    tcp_case(
        &["-t", "2", "-P", "4", "-R"],
        "TCP -P 4 -R",
        "server to client",
    );
}

#[test]
fn iperf3_tcp_bidir() {
    // Stream ids (1, 3 from the client, 4, 5 from the server) are checked by the stock client
    // itself in the results exchange: an unknown id fails the run.
    tcp_case(
        &["-t", "3", "-P", "2", "--bidir"],
        "TCP -P 2 --bidir",
        "both",
    );
}

#[test]
fn iperf3_tcp_bytes_reverse_and_blocks() {
    tcp_case(
        &["-n", "50M", "-R"],
        "TCP -n 50M -R (-t 0)",
        "server to client",
    );
    tcp_case(
        &["-k", "400", "-l", "64K"],
        "TCP -k 400",
        "client to server",
    );
}

#[test]
fn iperf3_tcp_omit_and_socket_options() {
    tcp_case(&["-t", "2", "-O", "1"], "TCP -O 1", "client to server");
    tcp_case(
        &[
            "-t",
            "1",
            "-w",
            "1M",
            "-M",
            "1400",
            "-N",
            "-C",
            "cubic",
            "-S",
            "0x10",
            "-R",
            "--repeating-payload",
            "-Z",
            "-T",
            "tag",
            "-b",
            "200M",
        ],
        "TCP -R -w -M -N -C -S -Z -b --repeating-payload -T",
        "server to client",
    );
}

#[test]
fn iperf3_tcp_pacing_in_reverse_is_the_servers() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start(&[]);
    let (o, v) = stock_client(srv.port, &["-t", "2", "-R", "-b", "100M"]);
    assert_ok(&o, &v);
    let bps = num(&v, "/end/sum_received/bits_per_second");
    // Unpaced loopback runs at tens of Gbit/s; paced, the rate is 100 Mbit/s within a block.
    assert!(
        bps < 150e6 && bps > 50e6,
        "reverse -b 100M gave {bps} bit/s"
    );
    compat_pass("iperf3", "server", "TCP -R -b 100M", "server to client");
}

/// A UDP case: with a modest rate on loopback nothing is lost, so counts are exact.
fn udp_case(args: &[&str], mode: &str, dir: &str) -> Value {
    let srv = ServerProc::start(&[]);
    let (o, v) = stock_client(srv.port, args);
    assert_ok(&o, &v);
    let (rx, tx) = server_counts(&srv);
    let end = &v["end"];
    let sum = &end["sum"];
    let lost = count(&v, "/end/sum/lost_packets");
    let packets = count(&v, "/end/sum/packets");
    assert!(packets > 0, "no packets: {end}");
    assert_eq!(lost, 0, "loss on loopback at a modest rate: {sum}");
    if args.contains(&"-R") {
        assert_eq!(sum_bytes(&v, "sum_sent"), tx);
    } else {
        assert_eq!(sum_bytes(&v, "sum_received"), rx);
    }
    // Every stream's datagram count is the same at both ends.
    for s in end["streams"].as_array().expect("streams") {
        let u = &s["udp"];
        assert!(u["packets"].as_u64().unwrap_or(0) > 0, "{s}");
        assert_eq!(u["lost_packets"].as_u64(), Some(0), "{s}");
    }
    compat_pass("iperf3", "server", mode, dir);
    v
}

#[test]
fn iperf3_udp_forward() {
    if peer("iperf3", "iperf3") {
        let v = udp_case(
            &["-u", "-b", "20M", "-t", "2"],
            "UDP -b 20M",
            "client to server",
        );
        assert!(num(&v, "/end/sum/jitter_ms") >= 0.0);
    }
}

#[test]
fn iperf3_udp_reverse_64bit() {
    if peer("iperf3", "iperf3") {
        udp_case(
            &["-u", "-b", "20M", "-t", "2", "-R", "--udp-counters-64bit"],
            "UDP -R --udp-counters-64bit",
            "server to client",
        );
    }
}

#[test]
fn iperf3_udp_bidir_and_parallel() {
    if peer("iperf3", "iperf3") {
        udp_case(
            &["-u", "-b", "10M", "-t", "2", "--bidir", "-P", "2"],
            "UDP -P 2 --bidir",
            "both",
        );
        udp_case(
            &[
                "-u", "-b", "10M", "-t", "2", "-P", "3", "-l", "1400", "-O", "1",
            ],
            "UDP -P 3 -l 1400 -O 1",
            "client to server",
        );
    }
}

#[test]
fn iperf3_get_server_output_text_and_json() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start(&[]);
    let (o, v) = stock_client(srv.port, &["-t", "1", "--get-server-output"]);
    assert_ok(&o, &v);
    let text = v["server_output_text"].as_str().unwrap_or("");
    assert!(!text.is_empty(), "no server_output_text: {v}");
    let srv = ServerProc::start(&["--iperf3-server-output", "json"]);
    let (o, v) = stock_client(srv.port, &["-t", "1", "-R", "--get-server-output"]);
    assert_ok(&o, &v);
    assert!(
        v["server_output_json"].is_object(),
        "no server_output_json: {v}"
    );
    compat_pass(
        "iperf3",
        "server",
        "TCP --get-server-output (text, JSON)",
        "both",
    );
}

fn spawn_stock(port: u16, args: &[&str]) -> Child {
    Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn iperf3")
}

#[test]
fn iperf3_killed_client_and_busy_limit() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let mut srv = ServerProc::start(&["--max-tests", "1"]);
    // A client that dies mid-test: the server ends that test and serves the next.
    let victim = spawn_stock(srv.port, &["-t", "20", "-P", "2"]);
    let pid = victim.id();
    let first = srv
        .wait_log("iperf3 test", Duration::from_secs(10))
        .expect("the server logs the first test");
    // "iperf3 test 3 from …": the victim's own id, so that its end is not mistaken for the
    // busy client's refusal below.
    let id = first
        .split("iperf3 test ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a test id")
        .to_string();
    // While it runs, a second client is refused as busy (--max-tests 1).
    let o = run_cmd(
        Command::new("iperf3").args(["-c", "127.0.0.1", "-p", &srv.port_s(), "-t", "1"]),
        LIMIT,
    );
    assert!(!o.status.success());
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(text.contains("busy"), "no busy message: {text}");
    kill(pid, 9);
    let _ = victim.wait_with_output();
    let end = format!("iperf3 test {id} from");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let noticed = std::iter::from_fn(|| {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        srv.wait_log(&end, left)
    })
    .any(|l| l.contains("ended") || l.contains("failed"));
    assert!(noticed, "the server noticed the dead client (test {id})");
    assert!(srv.alive());
    // The next client is served; "busy" is tried again for a few seconds, as the slot is
    // given back just after the line above.
    let mut tries = 0;
    let (o, v) = loop {
        let (o, v) = stock_client(srv.port, &["-t", "1"]);
        tries += 1;
        let busy = v
            .get("error")
            .and_then(Value::as_str)
            .is_some_and(|e| e.contains("busy"));
        if !busy || tries == 20 {
            break (o, v);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_ok(&o, &v);
    compat_pass(
        "iperf3",
        "server",
        "killed client, then busy (--max-tests 1)",
        "client to server",
    );
}

#[test]
fn iperf3_clients_on_two_addresses_at_once() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start_with(hakaru(), "0.0.0.0", &[]);
    let p = srv.port_s();
    let a = Command::new("iperf3")
        .args([
            "-c",
            "127.0.0.1",
            "-B",
            "127.0.0.2",
            "-p",
            &p,
            "-t",
            "2",
            "-J",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let b = Command::new("iperf3")
        .args([
            "-c",
            "127.0.0.1",
            "-B",
            "127.0.0.3",
            "-p",
            &p,
            "-t",
            "2",
            "-u",
            "-b",
            "10M",
            "-J",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    for (o, what) in [(wait_child(a, LIMIT), "TCP"), (wait_child(b, LIMIT), "UDP")] {
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_ok(&o, &v);
        assert!(sum_bytes(&v, "sum_received") > 0, "{what}: {}", v["end"]);
    }
    compat_pass(
        "iperf3",
        "server",
        "TCP and UDP clients at once",
        "client to server",
    );
}

/// Reads exactly `n` bytes with a deadline.
fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = vec![0u8; n];
    s.read_exact(&mut b).expect("read");
    b
}

fn framed(v: &Value) -> Vec<u8> {
    let body = v.to_string();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body.as_bytes());
    out
}

#[test]
fn iperf3_wrong_cookie_and_garbage_are_refused_and_the_server_serves_on() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let mut srv = ServerProc::start(&[]);
    let addr = format!("127.0.0.1:{}", srv.port);
    let cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\0";
    let mut ctl = TcpStream::connect(&addr).unwrap();
    ctl.write_all(cookie).unwrap();
    assert_eq!(read_n(&mut ctl, 1), [9], "PARAM_EXCHANGE");
    let params = serde_json::json!({"tcp": true, "omit": 0, "time": 1, "num": 0,
        "blockcount": 0, "parallel": 1, "len": 1024, "client_version": "3.12"});
    ctl.write_all(&framed(&params)).unwrap();
    assert_eq!(read_n(&mut ctl, 1), [10], "CREATE_STREAMS");
    // A data stream with someone else's cookie: ACCESS_DENIED and closed.
    let mut bad = TcpStream::connect(&addr).unwrap();
    bad.write_all(b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\0")
        .unwrap();
    assert_eq!(read_n(&mut bad, 1), [0xff]);
    let mut rest = Vec::new();
    let _ = bad.read_to_end(&mut rest);
    assert!(rest.is_empty());
    // The right cookie: the test starts.
    let mut data = TcpStream::connect(&addr).unwrap();
    data.write_all(cookie).unwrap();
    assert_eq!(read_n(&mut ctl, 2), [1, 2], "TEST_START, TEST_RUNNING");
    data.write_all(&[7u8; 10_000]).unwrap();
    // A client that gives up: CLIENT_TERMINATE.
    ctl.write_all(&[12]).unwrap();
    drop(data);
    drop(ctl);
    assert!(srv
        .wait_log("CLIENT_TERMINATE", Duration::from_secs(10))
        .is_some());
    // Garbage parameters: an error, not a crash.
    let mut g = TcpStream::connect(&addr).unwrap();
    g.write_all(b"qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq\0")
        .unwrap();
    assert_eq!(read_n(&mut g, 1), [9]);
    g.write_all(&[0, 0, 0, 5, b'{', b'x', b'x', b'}', b'!'])
        .unwrap();
    let reply = read_n(&mut g, 9);
    assert_eq!(reply[0], 0xfe, "SERVER_ERROR");
    assert_eq!(
        i32::from_be_bytes([reply[1], reply[2], reply[3], reply[4]]),
        114
    );
    // A stranger's UDP datagram on the port is not answered.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.send_to(b"9876", &addr).unwrap();
    u.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut b = [0u8; 16];
    assert!(
        u.recv(&mut b).is_err(),
        "the server answered a stray datagram"
    );
    assert!(srv.alive());
    let (o, v) = stock_client(srv.port, &["-t", "1"]);
    assert_ok(&o, &v);
    compat_pass(
        "iperf3",
        "server",
        "wrong cookie, garbage parameters",
        "client to server",
    );
}

// ---- hakaru's client (--iperf3) against a stock `iperf3 -s` ----

/// A stock one-off server (`iperf3 -s -1 -J`) on a free port, killed by PID when dropped.
struct StockServer {
    child: Option<Child>,
    port: u16,
}

impl StockServer {
    fn start() -> StockServer {
        let port = free_port();
        let child = Command::new("iperf3")
            .args(["-s", "-1", "-J", "-B", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iperf3 -s");
        // Wait until it listens (without connecting: a one-off server would take a probe
        // connection for its one test).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !listening(port) {
            assert!(
                std::time::Instant::now() < deadline,
                "iperf3 -s did not listen"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        StockServer {
            child: Some(child),
            port,
        }
    }

    /// Waits for the one-off server to exit; its status and -J document.
    fn finish(mut self) -> (bool, Value) {
        let o = wait_child(self.child.take().expect("child"), LIMIT);
        let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        (o.status.success(), v)
    }
}

impl Drop for StockServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), 9);
            let _ = c.wait();
        }
    }
}

/// True when a socket listens on TCP `port` (from /proc/net/tcp, state 0A).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
}

/// A free TCP port on 127.0.0.1 (also free for UDP in practice: nothing else binds it).
/// Runs `hakaru KIND 127.0.0.1 --iperf3 --json ARGS` against a stock server; checks that the
/// server exits 0 and that its receiver figures are the ones hakaru reports.
fn client_case(kind: &str, args: &[&str], mode: &str, dir: &str) {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = StockServer::start();
    let p = srv.port.to_string();
    let mut argv = vec![kind, "127.0.0.1", "-p", &p, "--iperf3", "--json"];
    argv.extend_from_slice(args);
    let o = run(&argv, LIMIT);
    assert!(o.status.success(), "hakaru --iperf3 failed: {}", stderr(&o));
    let mine = json(&o);
    let (ok, theirs) = srv.finish();
    assert!(ok, "iperf3 -s exited with an error: {theirs}");
    // The stock server's own view of what it received and sent.
    let theirs_end = &theirs["end"];
    for t in mine["totals"].as_array().expect("totals") {
        let up = t["dir"] == "up";
        let rx = t["receiver"]["bytes"].as_u64().unwrap();
        let tx = t["sender"]["bytes"].as_u64().unwrap();
        // What arrived after the measured window is counted apart from the headline.
        let late = t["receiver"]["late_bytes"].as_u64().unwrap_or(0);
        assert!(rx > 0, "nothing received: {t}");
        assert!(within_1pct(rx + late, tx), "ends disagree: {t}");
        if kind == "udp" {
            let u = &t["udp"];
            assert_eq!(u["lost"].as_u64(), Some(0), "{u}");
            assert_eq!(
                u["received"].as_u64(),
                u["sent"].as_u64(),
                "datagram counts differ: {u}"
            );
        }
        if up && !args.contains(&"--bidir") {
            // The server received this direction: its -J says so too.
            assert_eq!(
                theirs_end["sum_received"]["bytes"].as_u64(),
                Some(rx),
                "server's sum_received: {theirs_end}"
            );
        }
    }
    compat_pass("iperf3", "client", mode, dir);
}

#[test]
fn hakaru_client_tcp_against_stock_server() {
    client_case("tcp", &["-t", "2"], "TCP -P 1", "client to server");
}

#[test]
fn hakaru_client_tcp_reverse_parallel_against_stock_server() {
    client_case(
        "tcp",
        &["-t", "2", "-R", "-P", "3"],
        "TCP -P 3 -R",
        "server to client",
    );
}

#[test]
fn hakaru_client_tcp_bidir_against_stock_server() {
    client_case(
        "tcp",
        &["-t", "2", "--bidir", "-P", "2"],
        "TCP -P 2 --bidir",
        "both",
    );
}

#[test]
fn hakaru_client_tcp_bytes_against_stock_server() {
    client_case("tcp", &["-n", "200M"], "TCP -n 200M", "client to server");
}

#[test]
fn hakaru_client_udp_against_stock_server() {
    client_case(
        "udp",
        &["-t", "2", "-b", "20M"],
        "UDP -b 20M",
        "client to server",
    );
    client_case(
        "udp",
        &["-t", "2", "-b", "20M", "-R", "-P", "2"],
        "UDP -P 2 -R",
        "server to client",
    );
}

#[test]
fn hakaru_client_reports_a_busy_stock_server() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = StockServer::start();
    let busy = spawn_stock(srv.port, &["-t", "4"]);
    let pid = busy.id();
    std::thread::sleep(Duration::from_millis(500));
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &srv.port.to_string(),
            "--iperf3",
            "-t",
            "1",
        ],
        LIMIT,
    );
    kill(pid, 9);
    let _ = busy.wait_with_output();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("busy"),
        "no busy message: {}",
        stderr(&o)
    );
    compat_pass("iperf3", "client", "busy server", "client to server");
}

#[test]
fn iperf3_streams_take_roles_in_accept_order_not_cookie_order() {
    // A --bidir -P 1 client opens its sending stream first, then its receiving one. Here the
    // first stream's cookie arrives after the second's: roles must still follow connect order,
    // so the server sends on the second stream and not on the first.
    let srv = ServerProc::start(&[]);
    let addr = format!("127.0.0.1:{}", srv.port);
    let cookie = b"roleorderroleorderroleorderroleorder\0";
    let mut ctl = TcpStream::connect(&addr).unwrap();
    ctl.write_all(cookie).unwrap();
    assert_eq!(read_n(&mut ctl, 1), [9]);
    let params = serde_json::json!({"tcp": true, "omit": 0, "time": 2, "num": 0,
        "blockcount": 0, "parallel": 1, "bidirectional": true, "len": 1024,
        "client_version": "3.12"});
    ctl.write_all(&framed(&params)).unwrap();
    assert_eq!(read_n(&mut ctl, 1), [10]);
    let mut first = TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut second = TcpStream::connect(&addr).unwrap();
    second.write_all(cookie).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    first.write_all(cookie).unwrap();
    assert_eq!(read_n(&mut ctl, 2), [1, 2], "TEST_START, TEST_RUNNING");
    let got = read_n(&mut second, 1024);
    assert_eq!(
        got.len(),
        1024,
        "the server sends on the client's receiving stream"
    );
    first
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut b = [0u8; 16];
    assert!(
        first.read(&mut b).is_err(),
        "the server sent on the client's sending stream"
    );
    ctl.write_all(&[12]).unwrap();
}

#[test]
fn iperf3_flag_only_for_tests_an_iperf3_server_has() {
    for cmd in ["latency", "quick", "connect"] {
        let o = run(&[cmd, "127.0.0.1", "--iperf3"], LIMIT);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(stderr(&o).contains("--iperf3"), "{cmd}: {}", stderr(&o));
    }
}

#[test]
fn iperf3_client_interrupted_with_sigint() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let mut srv = ServerProc::start(&[]);
    // Ctrl-C on a stock client: it sends CLIENT_TERMINATE; the server ends that test only.
    let c = spawn_stock(srv.port, &["-t", "20", "-R"]);
    let pid = c.id();
    assert!(srv
        .wait_log("iperf3 test", Duration::from_secs(10))
        .is_some());
    std::thread::sleep(Duration::from_millis(800));
    kill(pid, 2);
    // Bounded: a client that ignores SIGINT is killed and fails the test.
    wait_child(c, LIMIT);
    assert!(
        srv.wait_log("CLIENT_TERMINATE", Duration::from_secs(10))
            .is_some(),
        "the server did not see the client's CLIENT_TERMINATE"
    );
    assert!(srv.alive());
    let (o, v) = stock_client(srv.port, &["-t", "1"]);
    assert_ok(&o, &v);
    compat_pass(
        "iperf3",
        "server",
        "client interrupted (SIGINT)",
        "server to client",
    );
}

/// A low-rate UDP test (iperf3's default 1 Mbit/s sends a burst of datagrams now and then):
/// hakaru's server reports the receiver's seconds over the whole test, as `iperf3 -s` does,
/// not from the first to the last datagram, which would inflate the rate.
#[test]
fn low_rate_udp_receiver_seconds_match_a_stock_server() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start(&[]);
    let args = ["-u", "-t", "2", "-P", "3"];
    let (o, ours) = stock_client(srv.port, &args);
    assert_ok(&o, &ours);
    let stock = StockServer::start();
    let (o, theirs) = stock_client(stock.port, &args);
    assert_ok(&o, &theirs);
    let (ok, _) = stock.finish();
    assert!(ok);
    let (a, b) = (&ours["end"]["sum_received"], &theirs["end"]["sum_received"]);
    let secs = |v: &Value| v["seconds"].as_f64().unwrap();
    assert!(
        (secs(a) - secs(b)).abs() < 0.05,
        "receiver seconds: hakaru server {} against iperf3 -s {}",
        secs(a),
        secs(b)
    );
    assert_eq!(a["bytes"], b["bytes"], "the same datagrams arrived");
    let rate = |v: &Value| v["bits_per_second"].as_f64().unwrap();
    assert!(
        (rate(a) / rate(b) - 1.0).abs() < 0.03,
        "receiver rate: hakaru server {} against iperf3 -s {}",
        rate(a),
        rate(b)
    );
}

/// Data threads of the server's worker pool (`hakaru-flow-N`) alive in process `pid` now.
#[cfg(target_os = "linux")]
pub(super) fn flow_threads(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("hakaru-flow"))
        .count()
}

#[test]
#[cfg(target_os = "linux")]
fn an_iperf3_tcp_test_gets_a_thread_per_stream_up_to_four_per_cpu() {
    // As iperf3 -s runs a thread per stream; the bound (four per online CPU) keeps a client's
    // -P 128 from costing the server 128 threads (docs/security.md, "Data threads of one test").
    let online: usize = run_cmd(
        Command::new("getconf").arg("_NPROCESSORS_ONLN"),
        Duration::from_secs(10),
    )
    .stdout
    .iter()
    .map(|&b| b as char)
    .collect::<String>()
    .trim()
    .parse()
    .expect("getconf _NPROCESSORS_ONLN");
    let srv = ServerProc::start(&[]);
    let port = srv.port.to_string();
    for flows in [2usize, 64] {
        // The last test's threads are gone before the next starts (bounded: 5 s).
        for _ in 0..100 {
            if flow_threads(srv.child.id()) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut client = hakaru()
            .args(["tcp", "127.0.0.1", "-p", &port, "--iperf3", "-t", "2"])
            .args(["-P", &flows.to_string(), "-b", "100M"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the client");
        let mut most = 0;
        // Bounded: the test runs 2 s; 100 samples of 50 ms at most.
        for _ in 0..100 {
            most = most.max(flow_threads(srv.child.id()));
            if client.try_wait().expect("client").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = client.wait();
        assert_eq!(
            most,
            flows.min(4 * online),
            "{flows} streams on {online} CPUs: the server ran {most} data threads"
        );
    }
}

/// A fast stream's reader is woken once per 128 KiB queued, not for every segment
/// (`engine::wake::Wake`): the server's reading thread, with the client on the other CPU
/// so that it waits in its reads, switches out voluntarily at most once per 150 KiB the client
/// sent (each wait ends with 128 KiB queued, and a read that finds that much does not wait),
/// where a reader woken for every one of loopback's 64 KiB segments does about once per 100
/// KiB. The bytes still agree at both ends.
#[cfg(target_os = "linux")]
#[test]
fn iperf3_fast_stream_reader_is_woken_per_batch_not_per_segment() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    if !peer("iperf3", "iperf3") {
        return;
    }
    let srv = ServerProc::start(&[]);
    let pid = srv.child.id();
    // The server's threads on CPU 1 (the flow's thread, created later, inherits it), the
    // client on CPU 0.
    pin_all_threads(pid, 1);
    let (stop, last) = (AtomicBool::new(false), AtomicU64::new(0));
    let (o, v) = std::thread::scope(|sc| {
        sc.spawn(|| {
            // The flow thread's voluntary switches, sampled until the test ends.
            while !stop.load(Ordering::Relaxed) {
                for t in threads_named(pid, "hakaru-flow") {
                    let status = std::fs::read_to_string(t.join("status")).unwrap_or_default();
                    let n = status
                        .lines()
                        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                        .and_then(|n| n.trim().parse::<u64>().ok());
                    if let Some(n) = n {
                        last.fetch_max(n, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let p = srv.port.to_string();
        let o = run_cmd(
            Command::new("taskset").args([
                "-c",
                "0",
                "iperf3",
                "-c",
                "127.0.0.1",
                "-p",
                &p,
                "-t",
                "2",
                "-J",
            ]),
            LIMIT,
        );
        stop.store(true, Ordering::Relaxed);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        (o, v)
    });
    assert_ok(&o, &v);
    let (rx, _) = server_counts(&srv);
    let sent = sum_bytes(&v, "sum_sent");
    assert!(within_1pct(sent, rx), "sent {sent}, the server read {rx}");
    let switches = last.load(Ordering::Relaxed);
    assert!(switches > 0, "the flow's thread was never seen");
    let per = sent / switches;
    assert!(
        per >= 150 * 1024,
        "the reader switched out {switches} times for {sent} bytes ({per} bytes each): woken \
         for every segment, not per 128 KiB"
    );
}
