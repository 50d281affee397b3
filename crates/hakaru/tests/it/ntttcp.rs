//! Interop with the stock ntttcp-for-linux (1.4.3, built by `.ci/run` from the sources in
//! `../shared/peers` into /opt/hakaru-peers/ntttcp): `ntttcp -s` senders (1 and 4 threads, two
//! senders with `-M`/`-L`) into `hakaru server --ntttcp-port`, and `hakaru tcp --ntttcp` into
//! `ntttcp -r`. Byte counts are compared between the two ends' printed totals.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{compat_pass, count, json, run_cmd, stderr, wait_child, PeerMode, ServerProc};

pub(super) const LIMIT: Duration = Duration::from_secs(40);
const NTTTCP: &str = "/opt/hakaru-peers/ntttcp/bin/ntttcp";
const CI_RUN: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run"));

/// The stock ntttcp, when built (or on PATH). It is not a Debian package: `.ci/run` builds it
/// with the shared peers' build.sh, and under HAKARU_TEST_PEERS=required a missing one fails
/// the test.
pub(super) fn ntttcp() -> Option<&'static str> {
    assert!(
        CI_RUN.contains("build.sh ntttcp"),
        ".ci/run must build ntttcp (../shared/peers/build.sh ntttcp)"
    );
    if Path::new(NTTTCP).exists() {
        return Some(NTTTCP);
    }
    if super::common::have("ntttcp") {
        return Some("ntttcp");
    }
    if PeerMode::from_env() == PeerMode::Required {
        panic!("{NTTTCP} is missing, and .ci/run builds it (../shared/peers/build.sh ntttcp)");
    }
    super::common::skip(
        super::common::SkipKind::Tool,
        &format!("{NTTTCP} is not built (../shared/peers/build.sh ntttcp)"),
    );
    None
}

/// A first data port P such that P - 1 .. P + n - 1 are all free on loopback right now. The
/// ranges lie below the kernel's ephemeral ports (32768 and up), where servers started with
/// port 0 and outgoing connections land, and each test of this process takes its own stretch.
pub(super) fn free_range(n: u16) -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let seed = (std::process::id() % 512) as u16 * 32;
    for _ in 0..200 {
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = 12_000 + (seed.wrapping_add(k.wrapping_mul(20)) % 20_000);
        let held: Vec<_> = (first - 1..first + n)
            .map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if held.len() == usize::from(n) + 1 {
            return first;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// `hakaru server` with an ntttcp receiver on `first` (and its sync port below it).
pub(super) fn server(first: u16, extra: &[&str]) -> ServerProc {
    let p = first.to_string();
    let mut args = vec!["--ntttcp-port", p.as_str(), "--ntttcp-ports", "4"];
    args.extend_from_slice(extra);
    let s = ServerProc::start(&args);
    s.wait_log("ntttcp receiver: sync on", Duration::from_secs(10))
        .expect("no 'ntttcp receiver' line from the server");
    s
}

pub(super) fn sender(bin: &str, first: u16, threads: u32, extra: &[&str]) -> Child {
    Command::new(bin)
        .args(["-s", "-t", "2", "-p", &first.to_string()])
        .args(["-m", &format!("{threads},*,127.0.0.1")])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ntttcp -s")
}

/// "total bytes", a tab, ":N" from ntttcp's output.
pub(super) fn ntttcp_total(o: &Output) -> u64 {
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .find(|l| l.contains("total bytes"))
        .and_then(|l| l.rsplit(':').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total in ntttcp's output:\n{text}\n{}", stderr(o)))
}

/// The server's lines for the next ntttcp test to end: its connections' bytes and its total.
pub(super) fn server_test(s: &ServerProc) -> (Vec<u64>, u64) {
    let deadline = Instant::now() + LIMIT;
    let mut conns = vec![];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = s
            .log
            .recv_timeout(left)
            .expect("no ntttcp total from the server");
        let field = |l: &str, after: &str| -> u64 {
            l.split(after)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no number after {after:?} in {l}"))
        };
        if line.contains("ntttcp test") && line.contains(": connection ") {
            conns.push(field(&line, "received "));
        }
        if line.contains("total received ") {
            return (conns, field(&line, "total received "));
        }
    }
}

/// ntttcp -s's send buffer (its default `-b`): each of its writes.
const SEND_BUF: u64 = 128 << 10;

/// A stock sender's printed total against what the server counted over `conns` connections.
/// The server counts every byte read until the sender closed. The sender takes its total when
/// its timer ends, and each thread's write in progress then completes after it: those writes
/// reach the server but not the sender's total (seen on loopback: 4 threads, 4 x 128 KiB). So
/// the server's count is the sender's plus at most one whole write per connection, never less.
pub(super) fn assert_same_bytes(sent: u64, received: u64, conns: u64) {
    assert!(sent > 0, "the sender sent nothing");
    let extra = received.checked_sub(sent).unwrap_or_else(|| {
        panic!("hakaru server counted {received} bytes, less than the {sent} the ntttcp sender printed")
    });
    assert!(
        extra.is_multiple_of(SEND_BUF) && extra <= conns * SEND_BUF,
        "hakaru server counted {received} bytes, the ntttcp sender printed {sent}: {extra} more is not whole writes in flight at its end (at most {conns} of {SEND_BUF} bytes)"
    );
}

/// The server's data threads now (Linux's /proc; 0 elsewhere, where the count is not checked).
fn data_threads(pid: u32) -> usize {
    #[cfg(target_os = "linux")]
    return super::iperf3::flow_threads(pid);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        0
    }
}

fn one_sender(threads: u32) {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(4);
    let s = server(first, &[]);
    let mut child = sender(bin, first, threads, &[]);
    // As `ntttcp -r` receives each connection on a thread of its own, so does the server
    // (docs/performance-notes.md, section 11): one data thread per connection (four are
    // under the bound of four per CPU). Sampled while the 2 s test runs (bounded: 100 x 50 ms).
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(data_threads(s.child.id()));
        if child.try_wait().expect("ntttcp -s").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = wait_child(child, LIMIT);
    assert!(out.status.success(), "ntttcp -s failed: {}", stderr(&out));
    if cfg!(target_os = "linux") {
        assert_eq!(
            most, threads as usize,
            "data threads of the server for {threads} connections"
        );
    }
    let (conns, total) = server_test(&s);
    assert_eq!(conns.len(), threads as usize, "one line per connection");
    assert!(
        conns.iter().all(|&b| b > 0),
        "a connection moved nothing: {conns:?}"
    );
    assert_eq!(conns.iter().sum::<u64>(), total);
    assert_same_bytes(ntttcp_total(&out), total, u64::from(threads));
    compat_pass(
        "ntttcp",
        "server",
        &format!("TCP -m {threads},*,IP"),
        "ntttcp -s to hakaru",
    );
}

#[test]
fn stock_sender_one_thread_into_hakaru_server() {
    one_sender(1);
}

#[test]
fn stock_sender_four_threads_into_hakaru_server() {
    one_sender(4);
}

#[test]
fn stock_sender_with_p_ports_and_n_threads_each_into_hakaru_server() {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(4);
    let s = server(first, &[]);
    let child = Command::new(bin)
        .args(["-s", "127.0.0.1", "-t", "2", "-p", &first.to_string()])
        .args(["-P", "2", "-n", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ntttcp -s");
    let out = wait_child(child, LIMIT);
    assert!(out.status.success(), "ntttcp -s failed: {}", stderr(&out));
    let (conns, total) = server_test(&s);
    assert_eq!(conns.len(), 4, "2 ports x 2 threads");
    assert_same_bytes(ntttcp_total(&out), total, 4);
    compat_pass("ntttcp", "server", "TCP -P 2 -n 2", "ntttcp -s to hakaru");
}

#[test]
fn a_second_sender_from_a_busy_address_is_turned_away_and_the_first_runs_on() {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(4);
    let s = server(first, &[]);
    let a = Command::new(bin)
        .args([
            "-s",
            "-t",
            "3",
            "-p",
            &first.to_string(),
            "-m",
            "1,*,127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ntttcp -s");
    s.wait_log("ntttcp test", Duration::from_secs(10))
        .expect("the first sender's test started");
    let b = wait_child(sender(bin, first, 1, &[]), LIMIT);
    let said = String::from_utf8_lossy(&b.stdout);
    assert!(!b.status.success(), "the second sender ran: {said}");
    assert!(said.contains("busy"), "ntttcp -s says why: {said}");
    let a = wait_child(a, LIMIT);
    assert!(a.status.success(), "the first sender: {}", stderr(&a));
    let (_, total) = server_test(&s);
    assert_same_bytes(ntttcp_total(&a), total, 1);
    compat_pass("ntttcp", "server", "busy receiver", "ntttcp -s to hakaru");
}

#[test]
fn two_stock_senders_with_m_and_l_into_hakaru_server() {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(4);
    let s = server(first, &["--ntttcp-multi"]);
    let a = sender(bin, first, 2, &[]);
    // The first sender is told 'W' and waits; the last one (-L) starts both.
    std::thread::sleep(Duration::from_secs(1));
    let b = sender(bin, first, 2, &["-L"]);
    let (oa, ob) = (wait_child(a, LIMIT), wait_child(b, LIMIT));
    assert!(oa.status.success(), "first sender: {}", stderr(&oa));
    assert!(ob.status.success(), "last sender: {}", stderr(&ob));
    let (conns, total) = server_test(&s);
    assert_eq!(conns.len(), 4, "both senders' connections in one test");
    assert_same_bytes(ntttcp_total(&oa) + ntttcp_total(&ob), total, 4);
    compat_pass(
        "ntttcp",
        "server",
        "TCP -M/-L, 2 senders",
        "ntttcp -s to hakaru",
    );
}

/// True once something listens on `port` (from /proc/net/tcp: a probe connection would be
/// a sync connection to the receiver).
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(1).is_some_and(|a| format!("{a} ").ends_with(&hex)) && f.get(3) == Some(&"0A")
        })
}

/// Waits for `child`; past `limit` it is killed and the test fails with what it printed.
fn wait_or_kill(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            super::common::kill(pid, 9);
            let o = rx.recv().expect("killed child").expect("wait");
            panic!(
                "ntttcp did not finish within {limit:?}; it printed:\n{}{}",
                String::from_utf8_lossy(&o.stdout),
                stderr(&o)
            );
        }
    }
}

#[test]
fn hakaru_tcp_ntttcp_into_stock_receiver() {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(2);
    let rx = Command::new(bin)
        .args([
            "-r",
            "-t",
            "6",
            "-p",
            &first.to_string(),
            "-m",
            "2,*,127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ntttcp -r");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(listening(first - 1) && listening(first + 1)) {
        assert!(Instant::now() < deadline, "ntttcp -r did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_cmd(
        super::common::hakaru().args([
            "tcp",
            "127.0.0.1",
            "-p",
            &first.to_string(),
            "--ntttcp",
            "-t",
            "2",
            "-P",
            "2",
            "--json",
        ]),
        LIMIT,
    );
    if !out.status.success() {
        super::common::kill(rx.id(), 9);
        let rx = wait_child(rx, LIMIT);
        panic!(
            "hakaru tcp --ntttcp failed: {}\nntttcp -r said: {}",
            stderr(&out),
            String::from_utf8_lossy(&rx.stdout)
        );
    }
    let rx = wait_or_kill(rx, LIMIT);
    let v = json(&out);
    let sent = count(&v, "/totals/0/sender/bytes");
    assert_eq!(
        count(&v, "/totals/0/receiver/bytes"),
        sent,
        "the receiver view is the sender's"
    );
    assert!(
        v.pointer("/notes")
            .and_then(|n| n.as_array())
            .is_some_and(|n| n
                .iter()
                .any(|x| x.as_str().is_some_and(|s| s.contains("ntttcp")))),
        "the result says where its receiver figures come from"
    );
    assert_eq!(
        ntttcp_total(&rx),
        sent,
        "ntttcp -r printed a different total than hakaru sent"
    );
    compat_pass("ntttcp", "client", "TCP -P 2", "hakaru to ntttcp -r");
}

#[test]
fn garbage_on_the_sync_and_data_ports_is_refused_and_the_server_keeps_serving() {
    let Some(bin) = ntttcp() else { return };
    let first = free_range(4);
    let s = server(first, &[]);
    let closed = |port: u16, bytes: &[u8]| {
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(bytes);
        let mut buf = [0u8; 64];
        // The server answers nothing and closes: EOF (or a reset), never a timeout.
        match c.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("port {port} answered {:?}", buf.get(..n)),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "port {port} kept a stranger's connection open"
            ),
        }
    };
    closed(first - 1, b"GET / HTTP/1.0\r\n\r\n");
    assert!(s
        .wait_log("where its first word, 'X', belongs", Duration::from_secs(5))
        .is_some());
    closed(first, b"data without a sync");
    // Half a word, then the stranger goes away.
    TcpStream::connect(("127.0.0.1", first - 1))
        .and_then(|mut c| c.write_all(&[0, 0]))
        .expect("half a word");
    let out = wait_child(sender(bin, first, 1, &[]), LIMIT);
    assert!(
        out.status.success(),
        "ntttcp -s after the garbage: {}",
        stderr(&out)
    );
    let (_, total) = server_test(&s);
    assert_same_bytes(ntttcp_total(&out), total, 1);
}
