//! `hakaru nic`: interval rates checked against loopback traffic the test makes itself, the
//! text layout, Ctrl-C, and usage errors.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::common::{hakaru, kill, run, stderr};

const LIMIT: Duration = Duration::from_secs(30);

/// Datagrams the traffic test sends over loopback, in lockstep batches of `BATCH`.
const DATAGRAMS: u64 = 2000;
const BATCH: u64 = 50;

/// The sar columns, in order, after the time column.
const HEADING: [&str; 9] = [
    "IFACE", "rxpck/s", "txpck/s", "rxkB/s", "txkB/s", "rxdrop/s", "txdrop/s", "rxerr/s", "txerr/s",
];

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// Packets `lo` has received so far, read from /proc/net/dev by the test itself.
fn lo_rx_packets() -> u64 {
    let text = std::fs::read_to_string("/proc/net/dev").expect("read /proc/net/dev");
    text.lines()
        .find_map(|line| {
            let (name, rest) = line.split_once(':')?;
            if name.trim() != "lo" {
                return None;
            }
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .expect("lo in /proc/net/dev")
}

/// A running `hakaru` whose stdout lines arrive as they are printed; killed by PID if the
/// test ends before it does.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    err: Option<JoinHandle<String>>,
    deadline: Instant,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = hakaru()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hakaru");
        let out = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            lines,
            err: Some(err),
            deadline: Instant::now() + LIMIT,
        }
    }

    /// The next stdout line; panics if none comes in time.
    fn next_line(&self) -> String {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no output line from hakaru within {LIMIT:?}: {e}"))
    }

    /// Waits for the exit: the status, the stdout lines not read yet, and stderr.
    fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        let mut rest = Vec::new();
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => rest.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("hakaru did not end within {LIMIT:?}")
                }
            }
        }
        let status = self.child.wait().expect("wait");
        let err = self.err.take().map(|h| h.join().unwrap_or_default());
        (status, rest, err.unwrap_or_default())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill(self.child.id(), 9);
            let _ = self.child.wait();
        }
    }
}

/// Sends `DATAGRAMS` small UDP datagrams between two sockets of this test on 127.0.0.1, each
/// batch received before the next is sent, so every one is known to have crossed `lo`.
fn push_datagrams() -> u64 {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind receiver");
    rx.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind sender");
    tx.connect(rx.local_addr().expect("addr")).expect("connect");
    let mut buf = [0u8; 64];
    let mut received = 0;
    for _ in 0..DATAGRAMS / BATCH {
        for i in 0..BATCH {
            tx.send(&i.to_be_bytes()).expect("send");
        }
        for _ in 0..BATCH {
            rx.recv(&mut buf)
                .expect("a datagram went missing on loopback");
            received += 1;
        }
    }
    received
}

/// Parses JSON Lines, checking the envelope.
fn records(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v["type"].is_string() && v["data"].is_object(), "{l}");
            v
        })
        .collect()
}

/// One run of `hakaru nic lo -i 0.2 -c 3 --json` with the test's traffic in its middle
/// intervals. `false` when the machine was too slow for the traffic to end before hakaru's
/// last counter read, so the run proves nothing either way.
fn rates_cover_the_traffic_once() -> bool {
    let before = lo_rx_packets();
    let nic = Running::start(&["nic", "lo", "-i", "0.2", "-c", "3", "--json-stream"]);
    // The first record is printed after hakaru's second counter read: all the traffic
    // falls after its first one.
    let mut lines = vec![nic.next_line()];
    let sent = push_datagrams();
    let done = unix_now();
    let (status, rest, err) = nic.finish();
    let after = lo_rx_packets();
    assert!(status.success(), "hakaru nic failed: {err}");
    lines.extend(rest);
    let recs = records(&lines);
    assert_eq!(recs.len(), 4, "3 intervals and an end: {lines:?}");
    assert_eq!(recs[3]["type"], "end");
    let intervals: Vec<&Value> = recs[..3].iter().map(|r| &r["data"]).collect();

    // hakaru stamps each interval just before reading the counters that close it.
    if done >= f(&intervals[2]["time_unix"]) {
        return false;
    }

    let mut packets = 0u64;
    let mut from_rates = 0.0;
    let mut seconds = 0.0;
    for (i, (rec, iv)) in recs.iter().zip(&intervals).enumerate() {
        assert_eq!(rec["type"], "interval");
        assert_eq!(u(&iv["index"]), i as u64);
        let ifaces = iv["interfaces"].as_array().expect("interfaces");
        assert_eq!(ifaces.len(), 1, "{iv}");
        let lo = &ifaces[0];
        assert_eq!(lo["interface"], "lo");
        // Rates are over the measured time between reads, not the nominal 0.2 s.
        let secs = f(&lo["seconds"]);
        assert!(
            (f(&iv["end"]) - f(&iv["start"]) - secs).abs() < 1e-9,
            "{iv}"
        );
        assert!((0.19..5.0).contains(&secs), "interval {i} lasted {secs} s");
        assert_eq!(f(&lo["rx_errors_ps"]), u(&lo["rx_errors"]) as f64 / secs);
        assert!(f(&lo["tx_errors_ps"]) >= 0.0);
        packets += u(&lo["rx_packets"]);
        from_rates += f(&lo["rx_pps"]) * secs;
        seconds += secs;
    }
    // Intervals follow each other with no gap.
    assert_eq!(f(&intervals[1]["start"]), f(&intervals[0]["end"]));
    assert_eq!(f(&intervals[2]["start"]), f(&intervals[1]["end"]));

    // Lower bound, strict: every datagram the test sent crossed lo inside the window.
    assert!(
        from_rates + 1e-6 * sent as f64 >= sent as f64,
        "sum of rx_pps x seconds is {from_rates}, but the test sent {sent} datagrams over lo"
    );
    assert!(packets >= sent, "{packets} packets counted, {sent} sent");
    assert!((from_rates - packets as f64).abs() <= 1e-6 * packets as f64 + 1e-9);
    // Upper bound, loose: hakaru's window lies inside the test's own, which may also hold
    // other processes' loopback traffic.
    let outer = after - before;
    assert!(
        packets <= outer,
        "hakaru counted {packets} packets on lo, more than /proc/net/dev grew by ({outer})"
    );

    // The end record: the same packets over the same time.
    let end = &recs[3]["data"];
    assert_eq!(u(&end["intervals"]), 3);
    assert_eq!(end["interrupted"], false);
    assert!((f(&end["seconds"]) - seconds).abs() < 1e-6);
    let avg = &end["interfaces"][0];
    assert_eq!(avg["interface"], "lo");
    assert_eq!(u(&avg["rx_packets"]), packets);
    assert!((f(&avg["rx_pps"]) * f(&avg["seconds"]) - packets as f64).abs() < 1e-3);
    true
}

#[test]
fn json_rates_account_for_traffic_sent_over_loopback() {
    for attempt in 1..=3 {
        if rates_cover_the_traffic_once() {
            return;
        }
        eprintln!("attempt {attempt}: the traffic outlasted hakaru's run; trying again");
    }
    panic!("three times the test's traffic did not finish within hakaru's 0.6 s run");
}

#[test]
fn text_has_the_sar_columns_and_an_average() {
    let o = run(&["nic", "lo", "-i", "0.2", "-c", "2"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        out.lines().next().is_some_and(|l| l.contains("UTC")),
        "{out}"
    );
    let headings = lines
        .iter()
        .filter(|w| w.len() == 10 && w[1..] == HEADING)
        .count();
    // One heading per interval and one over the averages.
    assert_eq!(headings, 3, "{out}");
    let rows: Vec<&Vec<&str>> = lines
        .iter()
        .filter(|w| w.len() == 10 && w[1] == "lo")
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    for w in &rows[..2] {
        // HH:MM:SS, then eight rates.
        assert!(w[0].len() == 8 && w[0].as_bytes()[2] == b':', "{w:?}");
        assert!(w[2..].iter().all(|r| r.parse::<f64>().is_ok()), "{w:?}");
    }
    assert_eq!(rows[2][0], "Average:", "{out}");
    assert!(out.contains("\nAverage:"), "{out}");
}

#[test]
fn ctrl_c_ends_with_the_averages() {
    let nic = Running::start(&["nic", "lo", "-i", "0.2", "--json-stream"]);
    nic.next_line();
    nic.next_line();
    kill(nic.child.id(), 2);
    let (status, rest, err) = nic.finish();
    assert!(status.success(), "{status:?}: {err}");
    let recs = records(&rest);
    let end = recs.last().expect("an end record");
    assert_eq!(end["type"], "end", "{rest:?}");
    assert_eq!(end["data"]["interrupted"], true);
    assert!(u(&end["data"]["intervals"]) >= 2);
    assert_eq!(end["data"]["interfaces"][0]["interface"], "lo");
}

#[test]
fn unknown_interface_and_bad_flags_are_usage_errors() {
    for args in [
        &["nic", "nosuchif0"][..],
        &["nic", "lo", "nosuchif0", "--json"][..],
    ] {
        let o = run(args, LIMIT);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("'nosuchif0'"), "{err}");
        // The message lists what there is.
        assert!(err.contains("lo"), "{err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    for (args, needle) in [
        (&["nic", "-i", "0.05"][..], "0.1"),
        (&["nic", "-c", "0"][..], "--count"),
    ] {
        let o = run(args, LIMIT);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn json_is_one_document_with_every_interval() {
    for flag in ["--json", "-J", "--format=json"] {
        let o = run(&["nic", "lo", "-i", "0.1", "-c", "2", flag], LIMIT);
        assert!(o.status.success(), "{flag}: {}", stderr(&o));
        let doc: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{flag}: not one JSON document: {e}"));
        assert_eq!(doc["test"], "nic");
        assert_eq!(doc["intervals"].as_array().map(Vec::len), Some(2), "{doc}");
        assert_eq!(doc["intervals"][1]["interfaces"][0]["interface"], "lo");
        assert_eq!(u(&doc["end"]["intervals"]), 2);
    }
    // --format offers no iperf3 shape for nic.
    let o = run(&["nic", "--format", "iperf3-json"], LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
