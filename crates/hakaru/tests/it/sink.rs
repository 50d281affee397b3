//! Raw endpoints: `hakaru sink` fed by plain Rust senders, `hakaru source`, nc and iperf2
//! clients; `hakaru source` into a plain Rust listener; stdin to stdout byte-exact.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hakaru_proto::iperf2::{ServerReport, TestHeader, UdpHeader};

use crate::common::{
    compat_pass, count, hakaru, json, kill, listening_port, log_lines, peer, run, run_cmd,
    stderr as err_of, wait_child,
};

const LIMIT: Duration = Duration::from_secs(30);

/// A `hakaru sink` child on a free loopback port, killed by PID if still running on drop.
struct Sink {
    child: Option<Child>,
    port: u16,
    rest: mpsc::Receiver<String>,
}

impl Sink {
    fn start(extra: &[&str]) -> Sink {
        Self::start_to(extra, Stdio::piped())
    }

    /// Starts with stdout going to `out` (a file for --stdout runs).
    fn start_to(extra: &[&str], out: Stdio) -> Sink {
        let mut child = hakaru()
            .args(["sink", "-B", "127.0.0.1", "-p", "0"])
            .args(extra)
            .stdout(out)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sink");
        let rx = log_lines(child.stderr.take().expect("stderr"));
        let port = listening_port(&rx);
        assert!(port != 0, "sink did not report its port");
        Sink {
            child: Some(child),
            port,
            rest: rx,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits (bounded) for the sink to exit and returns its output; stderr is what was logged
    /// after the listening line.
    fn wait(mut self) -> Output {
        let mut o = wait_child(self.child.take().expect("child"), LIMIT);
        // The child has exited, but the thread forwarding its stderr may still hold the last
        // lines: read until that thread sees end of file (bounded), not just what has arrived.
        let deadline = std::time::Instant::now() + LIMIT;
        let mut lines = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.rest.recv_timeout(left) {
                Ok(l) => lines.push(l),
                Err(_) => break,
            }
        }
        o.stderr = lines.join("\n").into_bytes();
        o
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), 9);
            let _ = c.wait();
        }
    }
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        err_of(o)
    );
}

/// Pseudo-random bytes (not a repeating pattern, so a reordering or loss would show).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn tcp_sink_counts_a_plain_sender_exactly() {
    let sink = Sink::start(&["--json"]);
    let data = noise(3_000_017);
    let mut s = TcpStream::connect(sink.addr()).unwrap();
    // Odd write sizes: the sink must count bytes, not writes.
    for chunk in data.chunks(7_777) {
        s.write_all(chunk).unwrap();
    }
    drop(s);
    let o = sink.wait();
    ok(&o, "sink");
    let v = json(&o);
    assert_eq!(v["test"], "sink");
    assert_eq!(count(&v, "/raw/bytes"), data.len() as u64);
    let calls = count(&v, "/raw/io_calls");
    assert!(calls > 0);
    let per_call = v["raw"]["bytes_per_call"].as_f64().unwrap();
    assert!((per_call * calls as f64 - data.len() as f64).abs() < 1.0);
    assert_eq!(v["raw"]["protocol"], "tcp");
    assert!(v["raw"]["error"].is_null());
}

#[test]
fn udp_sink_counts_datagrams_and_ends_when_idle() {
    let sink = Sink::start(&["-u", "--idle", "300ms", "--json"]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(sink.addr()).unwrap();
    let d = noise(1000);
    for i in 0..300 {
        s.send(&d).unwrap();
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let o = sink.wait();
    ok(&o, "sink");
    let v = json(&o);
    assert_eq!(count(&v, "/raw/datagrams"), 300);
    assert_eq!(count(&v, "/raw/bytes"), 300_000);
    assert_eq!(count(&v, "/raw/io_calls"), 300);
    assert_eq!(count(&v, "/raw/ignored"), 0);
}

#[test]
fn source_to_sink_tcp() {
    let sink = Sink::start(&["--json"]);
    let src = run(
        &[
            "source",
            &sink.addr(),
            "-B",
            "127.0.0.1",
            "-k",
            "100",
            "-l",
            "64K",
            "--json",
        ],
        LIMIT,
    );
    ok(&src, "source");
    let o = sink.wait();
    ok(&o, "sink");
    let (a, b) = (json(&src), json(&o));
    assert_eq!(count(&a, "/raw/bytes"), 100 * 65_536);
    assert!(count(&a, "/raw/io_calls") >= 100);
    assert_eq!(count(&b, "/raw/bytes"), 100 * 65_536);
    assert_eq!(a["test"], "source");
}

#[test]
fn source_to_sink_udp_with_ttcp_markers() {
    // A long idle: only the source's end marker can end this run promptly.
    let sink = Sink::start(&["-u", "--idle", "20s", "--json"]);
    let src = run(
        &[
            "source",
            &sink.addr(),
            "-u",
            "-k",
            "500",
            "-l",
            "1200",
            "-b",
            "50M",
            "--json",
        ],
        LIMIT,
    );
    ok(&src, "source");
    let start = std::time::Instant::now();
    let o = sink.wait();
    ok(&o, "sink");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the end marker did not end the sink"
    );
    let (a, b) = (json(&src), json(&o));
    assert_eq!(count(&a, "/raw/datagrams"), 500);
    assert_eq!(count(&b, "/raw/datagrams"), 500);
    assert_eq!(count(&b, "/raw/bytes"), 600_000);
    // One start and four end markers, none of them counted as data.
    assert!(count(&b, "/raw/ignored") >= 1);
    let schema = crate::schema::schema();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    for doc in [&a, &b] {
        let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", doc["test"]);
    }
}

#[test]
fn stdin_to_stdout_round_trips_a_file() {
    let dir = std::env::temp_dir().join(format!("hakaru-sink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    let data = noise(2_500_003);
    std::fs::write(&input, &data).unwrap();
    let out_file = std::fs::File::create(&output).unwrap();
    let sink = Sink::start_to(&["--stdout"], Stdio::from(out_file));
    let src = run_cmd(
        hakaru()
            .args(["source", &sink.addr(), "--stdin", "-l", "10000"])
            .stdin(std::fs::File::open(&input).unwrap()),
        LIMIT,
    );
    ok(&src, "source");
    let o = sink.wait();
    ok(&o, "sink");
    let got = std::fs::read(&output).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "received bytes differ from the file");
    let report = err_of(&o);
    assert!(
        report.contains(&format!("sink: {} bytes in", data.len())),
        "{report}"
    );
    assert!(report.contains(&format!("{} bytes written to stdout", data.len())));
}

#[test]
fn stdout_reader_that_leaves_ends_the_transfer_without_failing() {
    // `hakaru sink --stdout | head -c 100`: the reader goes away; the sink reports what
    // arrived, marked interrupted, and exits 0 (as for any closed stdout).
    let mut sink = Sink::start_to(&["--stdout", "--json"], Stdio::piped());
    let mut pipe = sink
        .child
        .as_mut()
        .and_then(|c| c.stdout.take())
        .expect("stdout");
    let src = std::thread::spawn({
        let addr = sink.addr();
        move || {
            run_cmd(
                hakaru().args(["source", &addr, "-k", "400", "-l", "64K"]),
                LIMIT,
            )
        }
    });
    let mut first = [0u8; 100];
    pipe.read_exact(&mut first).unwrap();
    drop(pipe);
    let o = sink.wait();
    let _ = src.join();
    assert!(
        o.status.success(),
        "sink failed on a closed stdout: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report = err_of(&o);
    assert!(
        report
            .replace(char::is_whitespace, "")
            .contains("\"interrupted\":true"),
        "{report}"
    );
}

#[test]
fn source_to_a_plain_rust_listener() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let reader = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(LIMIT)).unwrap();
        let mut n = 0u64;
        let mut b = vec![0u8; 65536];
        loop {
            match c.read(&mut b) {
                Ok(0) | Err(_) => return n,
                Ok(k) => n += k as u64,
            }
        }
    });
    let src = run(
        &["source", &addr, "-k", "50", "-l", "10000", "--json"],
        LIMIT,
    );
    ok(&src, "source");
    let got = reader.join().unwrap();
    assert_eq!(got, 500_000);
    assert_eq!(count(&json(&src), "/raw/bytes"), 500_000);
}

#[test]
fn nc_into_sink() {
    if !peer("nc", "netcat-openbsd") {
        return;
    }
    let sink = Sink::start(&["--json"]);
    let dir = std::env::temp_dir().join(format!("hakaru-nc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    std::fs::write(&input, noise(1_000_000)).unwrap();
    let nc = run_cmd(
        Command::new("nc")
            .args(["-N", "127.0.0.1", &sink.port.to_string()])
            .stdin(std::fs::File::open(&input).unwrap()),
        LIMIT,
    );
    let _ = std::fs::remove_dir_all(&dir);
    ok(&nc, "nc");
    let o = sink.wait();
    ok(&o, "sink");
    assert_eq!(count(&json(&o), "/raw/bytes"), 1_000_000);
    compat_pass("nc", "sink", "TCP file", "nc -> hakaru");
}

/// "N Bytes" from an iperf2 client's `-f b` summary line.
fn iperf_bytes(out: &str) -> u64 {
    out.lines()
        .filter(|l| l.contains(" sec "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "Bytes")?;
            w.get(i.checked_sub(1)?)?.parse().ok()
        })
        .next_back()
        .unwrap_or_else(|| panic!("no byte count in iperf output:\n{out}"))
}

#[test]
fn iperf2_tcp_client_against_sink() {
    if !peer("iperf", "iperf") {
        return;
    }
    // Default, -X (waits for our ack), --compat (no header), a byte count with 8K writes.
    for (mode, extra, header) in [
        ("TCP -t 1", &["-t", "1"][..], true),
        ("TCP -X", &["-t", "0.5", "-X"][..], true),
        ("TCP -C", &["-t", "0.5", "-C"][..], false),
        ("TCP -n 10M -l 8K", &["-n", "10M", "-l", "8K"][..], true),
    ] {
        let sink = Sink::start(&["--iperf2", "--json"]);
        let port = sink.port.to_string();
        let c = run_cmd(
            Command::new("iperf")
                .args(["-c", "127.0.0.1", "-p", &port, "-f", "b"])
                .args(extra),
            LIMIT,
        );
        ok(&c, mode);
        let o = sink.wait();
        ok(&o, "sink");
        let v = json(&o);
        let theirs = iperf_bytes(&String::from_utf8_lossy(&c.stdout));
        let ours = count(&v, "/raw/bytes");
        let diff = (ours as f64 - theirs as f64).abs() / theirs as f64;
        assert!(diff <= 0.01, "{mode}: iperf sent {theirs}, sink got {ours}");
        let version = &v["raw"]["iperf2"]["client_version"];
        if header {
            assert_eq!(version, "2.1.8", "{mode}");
        } else {
            assert!(version.is_null(), "{mode}: {version}");
        }
        compat_pass("iperf", "sink", mode, "iperf -> hakaru");
    }
}

#[test]
fn iperf2_reverse_is_refused_by_name() {
    if !peer("iperf", "iperf") {
        return;
    }
    let sink = Sink::start(&["--iperf2"]);
    let port = sink.port.to_string();
    let _ = run_cmd(
        Command::new("iperf").args(["-c", "127.0.0.1", "-p", &port, "-t", "1", "-R"]),
        LIMIT,
    );
    let o = sink.wait();
    assert!(!o.status.success());
    assert!(
        err_of(&o).contains("asked the server to send (-R"),
        "{}",
        err_of(&o)
    );
}

#[test]
fn iperf2_udp_client_gets_a_server_report() {
    if !peer("iperf", "iperf") {
        return;
    }
    for (mode, extra) in [
        ("UDP -b 10M -t 1", &["-b", "10M", "-t", "1"][..]),
        (
            "UDP -l 200 -b 2M",
            &["-l", "200", "-b", "2M", "-t", "0.5"][..],
        ),
    ] {
        udp_case(mode, extra);
    }
}

fn udp_case(mode: &str, extra: &[&str]) {
    let sink = Sink::start(&["-u", "--iperf2", "--json"]);
    let port = sink.port.to_string();
    let c = run_cmd(
        Command::new("iperf")
            .args(["-c", "127.0.0.1", "-u", "-p", &port])
            .args(extra),
        LIMIT,
    );
    ok(&c, mode);
    let o = sink.wait();
    ok(&o, "sink");
    let out = String::from_utf8_lossy(&c.stdout).to_string();
    assert!(out.contains("Server Report"), "{out}");
    assert!(!out.contains("did not receive ack"), "{out}");
    // The report line ends with "lost/total (pct%)"; total is what we told the client.
    let total: u64 = out
        .lines()
        .skip_while(|l| !l.contains("Server Report"))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| {
            let (lost, total) = w.split_once('/')?;
            lost.parse::<u64>().ok()?;
            total.parse().ok()
        })
        .unwrap_or_else(|| panic!("no Lost/Total in:\n{out}"));
    let v = json(&o);
    assert_eq!(count(&v, "/raw/iperf2/datagrams"), total);
    let lost = count(&v, "/raw/iperf2/lost");
    // Every datagram that arrived, the FIN included, is counted once.
    assert_eq!(count(&v, "/raw/datagrams") + lost, total);
    assert_eq!(v["raw"]["iperf2"]["fin_answered"], true);
    compat_pass("iperf", "sink", mode, "iperf -> hakaru");
}

#[test]
fn iperf2_udp_sink_ignores_garbage_and_answers_the_fin() {
    let sink = Sink::start(&["-u", "--iperf2", "--json"]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(sink.addr()).unwrap();
    // Garbage before the test: too short, impossible microseconds, a stray FIN.
    s.send(b"xx").unwrap();
    s.send(b"GARBAGE GARBAGE GARBAGE!").unwrap();
    let mut d = vec![0u8; 200];
    UdpHeader {
        seq: -7,
        tv_sec: 1,
        tv_usec: 0,
    }
    .encode(&mut d);
    s.send(&d).unwrap();
    // A 2.1.8-style test header in every datagram (SEQNO64B|EXTEND|LEN_BIT, 76 bytes).
    d[16..20].copy_from_slice(&0x4801_0098u32.to_be_bytes());
    d[20..24].copy_from_slice(&1u32.to_be_bytes());
    assert!(TestHeader::parse(&d[16..]).is_some());
    for id in 1..=50i64 {
        UdpHeader {
            seq: id,
            tv_sec: 100,
            tv_usec: id as u32 * 1000,
        }
        .encode(&mut d);
        s.send(&d).unwrap();
        if id == 25 {
            s.send(b"garbage mid-test").unwrap();
        }
    }
    UdpHeader {
        seq: -51,
        tv_sec: 100,
        tv_usec: 51_000,
    }
    .encode(&mut d);
    s.send(&d).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 256];
    let n = s.recv(&mut b).expect("server report");
    let rep = ServerReport::decode(&b[..n]).expect("128-byte report");
    assert_eq!(rep.datagrams, 51);
    assert_eq!(rep.lost, 0);
    assert_eq!(rep.bytes, 51 * 200);
    let o = sink.wait();
    ok(&o, "sink");
    let v = json(&o);
    assert_eq!(count(&v, "/raw/datagrams"), 51);
    assert_eq!(count(&v, "/raw/ignored"), 4);
}

#[test]
fn bad_flags_name_the_flag() {
    let o = run(&["source", "127.0.0.1:9", "-b", "10M"], LIMIT);
    assert!(!o.status.success());
    assert!(err_of(&o).contains("-b/--bitrate"), "{}", err_of(&o));
    let o = run(&["source", "no-port-here", "-n", "1"], LIMIT);
    assert!(!o.status.success());
    assert!(err_of(&o).contains("HOST:PORT"), "{}", err_of(&o));
    let o = run(&["source", "127.0.0.1:9", "-k", "3", "-t", "1"], LIMIT);
    assert!(
        err_of(&o).contains("-k/--blocks (or -n/--bytes) and -t/--time"),
        "{}",
        err_of(&o)
    );
    let o = run(&["sink", "-u", "-l", "70000"], LIMIT);
    assert!(err_of(&o).contains("-l/--length"), "{}", err_of(&o));
    let o = run(&["sink", "--idle", "0"], LIMIT);
    assert!(err_of(&o).contains("--idle"), "{}", err_of(&o));
}

#[test]
fn keep_serves_transfers_one_after_another() {
    let sink = Sink::start(&["--keep", "--json"]);
    for n in [1000usize, 2000] {
        let mut s = TcpStream::connect(sink.addr()).unwrap();
        s.write_all(&noise(n)).unwrap();
        drop(s);
        // The next connection waits in the backlog until this transfer is reported.
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = sink.child.as_ref().unwrap().id();
    kill(pid, 2);
    let o = sink.wait();
    // --json is one document: an array of every transfer's result.
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&o.stdout)
        .into_iter()
        .map(|d| d.expect("json document"))
        .collect();
    assert_eq!(docs.len(), 1, "{}", String::from_utf8_lossy(&o.stdout));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    let all = v.as_array().expect("an array of results");
    assert_eq!(all.len(), 2, "{v}");
    assert_eq!(count(&all[0], "/raw/bytes"), 1000);
    assert_eq!(count(&all[1], "/raw/bytes"), 2000);
}

/// "[  N] ... Bytes" per-stream figures of an iperf2 client's `-f b` summary (not [SUM]).
fn iperf_stream_bytes(out: &str) -> Vec<u64> {
    let mut v: Vec<u64> = out
        .lines()
        .filter(|l| l.starts_with("[ ") && l.contains(" sec ") && l.contains(" Bytes "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "Bytes")?;
            w.get(i.checked_sub(1)?)?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn iperf2_parallel_tcp_streams_are_one_transfer() {
    if !peer("iperf", "iperf") {
        return;
    }
    let sink = Sink::start(&["--iperf2", "--json"]);
    let port = sink.port.to_string();
    let c = run_cmd(
        Command::new("iperf").args([
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-f",
            "b",
            "-t",
            "1",
            "-P",
            "3",
        ]),
        LIMIT,
    );
    ok(&c, "iperf -P 3");
    let o = sink.wait();
    ok(&o, "sink");
    let v = json(&o);
    let out = String::from_utf8_lossy(&c.stdout).to_string();
    let theirs = iperf_stream_bytes(&out);
    assert_eq!(theirs.len(), 3, "{out}");
    let streams = v["raw"]["streams"].as_array().expect("streams");
    let mut ours: Vec<u64> = streams.iter().map(|s| count(s, "/bytes")).collect();
    ours.sort_unstable();
    assert_eq!(ours.len(), 3);
    for (t, o) in theirs.iter().zip(&ours) {
        let diff = (*o as f64 - *t as f64).abs() / *t as f64;
        assert!(
            diff <= 0.01,
            "iperf streams {theirs:?}, sink streams {ours:?}"
        );
    }
    assert_eq!(count(&v, "/raw/bytes"), ours.iter().sum::<u64>());
    let header_total = iperf_bytes(&out);
    let diff = (count(&v, "/raw/bytes") as f64 - header_total as f64).abs() / header_total as f64;
    assert!(
        diff <= 0.01,
        "iperf [SUM] {header_total}, sink {}",
        count(&v, "/raw/bytes")
    );
    for s in streams {
        assert_eq!(s["iperf2"]["client_version"], "2.1.8");
    }
    compat_pass("iperf", "sink", "TCP -P 3", "iperf -> hakaru");
}

#[test]
fn iperf2_parallel_udp_senders_each_get_a_server_report() {
    if !peer("iperf", "iperf") {
        return;
    }
    let sink = Sink::start(&["-u", "--iperf2", "--json"]);
    let port = sink.port.to_string();
    let c = run_cmd(
        Command::new("iperf").args([
            "-c",
            "127.0.0.1",
            "-u",
            "-p",
            &port,
            "-b",
            "5M",
            "-t",
            "1",
            "-P",
            "2",
        ]),
        LIMIT,
    );
    ok(&c, "iperf -u -P 2");
    let o = sink.wait();
    ok(&o, "sink");
    let out = String::from_utf8_lossy(&c.stdout).to_string();
    assert_eq!(out.matches("Server Report").count(), 2, "{out}");
    assert!(!out.contains("did not receive ack"), "{out}");
    // Each report line ends with "lost/total (pct%)": the totals we told each sender.
    let totals: u64 = out
        .lines()
        .filter(|l| l.contains('%') && l.contains(" ms "))
        .filter_map(|l| {
            l.split_whitespace().find_map(|w| {
                let (lost, total) = w.split_once('/')?;
                lost.parse::<u64>().ok()?;
                total.parse::<u64>().ok()
            })
        })
        .sum();
    let v = json(&o);
    let streams = v["raw"]["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 2);
    assert_eq!(count(&v, "/raw/iperf2/datagrams"), totals, "{out}");
    assert_eq!(
        count(&v, "/raw/datagrams") + count(&v, "/raw/iperf2/lost"),
        totals
    );
    for s in streams {
        assert_eq!(s["iperf2"]["fin_answered"], true);
        assert!(count(s, "/datagrams") > 0);
    }
    compat_pass("iperf", "sink", "UDP -P 2", "iperf -> hakaru");
}

/// A 24-byte iperf2 test header (LEN_BIT, length 24) announcing `threads` streams.
fn iperf2_header(threads: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0x0001_0030u32.to_be_bytes());
    assert!(TestHeader::parse(&h).is_some_and(|p| p.len == 24 && !p.wants_server_send()));
    h[4..8].copy_from_slice(&threads.to_be_bytes());
    h
}

#[test]
fn parallel_streams_come_from_the_clients_host_only() {
    let sink = Sink::start(&["--iperf2", "--json"]);
    let mut a = TcpStream::connect(sink.addr()).unwrap();
    a.write_all(&iperf2_header(2)).unwrap();
    a.write_all(&noise(1000)).unwrap();
    // Another host (127.0.0.2 on lo) while the sink gathers the client's streams: closed.
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other
        .bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    other
        .connect(&sink.addr().parse::<std::net::SocketAddr>().unwrap().into())
        .unwrap();
    let mut other: TcpStream = other.into();
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 16];
    // Closed: end of stream or a reset. A read that times out means it was kept.
    let closed = match other.read(&mut b) {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    };
    assert!(closed, "the stranger's connection was kept");
    let mut b2 = TcpStream::connect(sink.addr()).unwrap();
    b2.write_all(&iperf2_header(2)).unwrap();
    b2.write_all(&noise(3000)).unwrap();
    drop(a);
    drop(b2);
    let o = sink.wait();
    ok(&o, "sink");
    let v = json(&o);
    let streams = v["raw"]["streams"].as_array().expect("streams");
    let mut bytes: Vec<u64> = streams.iter().map(|s| count(s, "/bytes")).collect();
    bytes.sort_unstable();
    assert_eq!(bytes, vec![1024, 3024]);
    assert_eq!(count(&v, "/raw/bytes"), 4048);
}
