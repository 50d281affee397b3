//! A client that stops reading an echo (a latency test's flow, a bulk test's latency probes)
//! holds no test slot, memory reservation, thread or descriptor on the server: not after it
//! closes its control connection, and not past the stall timeout while it keeps it open.
//! Before, the echo sent on a blocking socket with no deadline and the session joined it
//! before giving the test back: one such client locked every later test out.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hakaru_model::{Amount, Dur, LatencyProbe, LatencySpec, LatencyTransport, TcpSpec, TestSpec};
use hakaru_proto::Message;

use super::common::{read_msg, rss_kib, run, threads_of, ServerProc};
use super::hardening::RawTest;
use super::hostile::{fds_of, legit};

/// A legitimate 1 MB test, tried until the server admits it (it answers "busy" until it has
/// seen the last test's control connection close, which on a loaded machine can take a
/// moment) or `within` has passed; returns how long admission took.
fn admitted_within(s: &ServerProc, within: Duration) -> Duration {
    let started = Instant::now();
    let port = s.port_s();
    loop {
        let o = run(
            &["tcp", "127.0.0.1", "-p", &port, "-n", "1M", "--json"],
            Duration::from_secs(30),
        );
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["totals"][0]["receiver"]["bytes"], 1 << 20);
            return started.elapsed();
        }
        assert!(
            err.contains("busy") && started.elapsed() < within,
            "the next test was not admitted within {within:?}: {err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes requests on `c` until the server's echo and every buffer between are full (a write
/// blocked for a second) or `total` bytes; returns the bytes written.
fn flood(c: &mut TcpStream, total: usize) -> usize {
    c.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let buf = vec![b'r'; 64 << 10];
    let mut sent = 0;
    while sent < total {
        match c.write(&buf) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    sent
}

/// Waits up to `wait` for the server's threads and descriptors to come back to `base`;
/// returns where they are.
fn settle(pid: u32, base: (usize, usize), wait: Duration) -> (usize, usize) {
    let deadline = Instant::now() + wait;
    loop {
        let now = (threads_of(pid), fds_of(pid));
        if (now.0 <= base.0 && now.1 <= base.1) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn latency_spec(timeout: Duration) -> TestSpec {
    TestSpec::Latency(LatencySpec {
        transport: LatencyTransport::Tcp,
        duration: Dur::from_secs(60),
        timeout: Dur(timeout),
        ..LatencySpec::default()
    })
}

/// A latency test whose client fills the echo's path, never reads, and closes its control
/// connection: the test ends and its echo thread and socket go at once, although the client
/// keeps its data connection open. (Before: the thread stayed blocked in its send, one more
/// per such test.)
#[test]
fn a_latency_client_that_stops_reading_and_leaves_holds_no_thread() {
    let s = ServerProc::start(&["--max-tests", "1"]);
    let pid = s.child.id();
    legit(&s, None, &[]);
    let base = (threads_of(pid), fds_of(pid));
    let mut held = Vec::new();
    for round in 0..3 {
        let mut t = RawTest::start(s.port, latency_spec(Duration::from_secs(30)));
        let mut d = t.data("127.0.0.1", s.port, 0);
        match read_msg(&mut t.ctl, &mut t.dec, Duration::from_secs(5)) {
            Some(Message::Start) => {}
            other => panic!("expected start, got {other:?}"),
        }
        let pushed = flood(&mut d, 64 << 20);
        let during = (threads_of(pid), fds_of(pid));
        drop(t);
        let after = settle(pid, base, Duration::from_secs(5));
        eprintln!(
            "round {round}: pushed {} KiB unread; threads/fds at baseline {base:?}, blocked \
             {during:?}, 5 s after the control connection closed {after:?}",
            pushed >> 10
        );
        assert!(
            pushed > 256 << 10,
            "the echo's path took only {pushed} bytes"
        );
        assert!(
            after.0 <= base.0 && after.1 <= base.1,
            "round {round}: threads/fds {after:?} did not come back to {base:?} (the client \
             still holds its data connection)"
        );
        // The client keeps its unread data connection open throughout.
        held.push(d);
    }
    legit(&s, None, &[]);
}

/// A bulk test's TCP latency probes filled and never read, then the control connection closed:
/// the test's slot (and its memory reservation) is given back at once, so the next test from
/// the same address is admitted by a server that runs one test at a time. (Before: the session
/// joined the blocked echo first, and the server answered "busy" for as long as the client
/// kept the probe connection open.)
#[test]
fn a_probe_echo_that_blocks_does_not_hold_the_test() {
    let s = ServerProc::start(&["--max-tests", "1", "--max-memory", "300M"]);
    let pid = s.child.id();
    legit(&s, None, &[]);
    let base = (threads_of(pid), fds_of(pid));
    let rss0 = rss_kib(pid);
    let spec = TestSpec::Tcp(TcpSpec {
        flows: 1,
        length: hakaru_model::Bytes(64 << 20),
        window: Some(hakaru_model::Bytes(64 << 20)),
        amount: Amount::Time(Dur::from_secs(60)),
        latency_probe: Some(LatencyProbe {
            transport: LatencyTransport::Tcp,
            ..LatencyProbe::default()
        }),
        ..TcpSpec::default()
    });
    let t = RawTest::start(s.port, spec.clone());
    let _bulk = t.data("127.0.0.1", s.port, 0);
    let mut probe = t.data("127.0.0.1", s.port, spec.probe_flow());
    std::thread::sleep(Duration::from_millis(300));
    let pushed = flood(&mut probe, 64 << 20);
    let during = (threads_of(pid), fds_of(pid), rss_kib(pid));
    drop(t);
    // Admitted while the probe connection is still open and unread (before the fix: never,
    // for as long as the client kept it open).
    let took = admitted_within(&s, Duration::from_secs(10));
    let after = settle(pid, base, Duration::from_secs(5));
    eprintln!(
        "pushed {} KiB into the probe path; baseline threads/fds {base:?} RSS {rss0} KiB, \
         blocked {during:?} KiB, next test admitted {:.1} s after the close, then {after:?} RSS \
         {} KiB",
        pushed >> 10,
        took.as_secs_f64(),
        rss_kib(pid)
    );
    assert!(
        pushed > 256 << 10,
        "the probe path took only {pushed} bytes"
    );
    assert!(
        after.0 <= base.0 && after.1 <= base.1,
        "threads/fds {after:?} did not come back to {base:?}"
    );
    drop(probe);
}

/// A client that keeps its control connection but stops reading the echo's replies: the
/// server ends the test within the stall timeout, names why, and frees everything.
#[test]
fn an_echo_whose_client_stops_reading_fails_within_the_stall_timeout() {
    let s = ServerProc::start(&["--max-tests", "1"]);
    let pid = s.child.id();
    legit(&s, None, &[]);
    let base = (threads_of(pid), fds_of(pid));
    let mut t = RawTest::start(s.port, latency_spec(Duration::from_secs(2)));
    let mut d = t.data("127.0.0.1", s.port, 0);
    let pushed = flood(&mut d, 64 << 20);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut why = None;
    while why.is_none() && Instant::now() < deadline {
        // The control connection stays alive: only the echo's path is stuck.
        let _ = t.ctl.write_all(&Message::Keepalive.encode());
        if let Some(Message::Error { message }) =
            read_msg(&mut t.ctl, &mut t.dec, Duration::from_secs(1))
        {
            why = Some(message);
        }
    }
    eprintln!("pushed {} KiB; the server said {why:?}", pushed >> 10);
    let why = why.expect("the server never ended the test");
    assert!(why.contains("stopped reading"), "{why}");
    legit(&s, None, &[]);
    let after = settle(pid, base, Duration::from_secs(5));
    assert!(
        after.0 <= base.0 && after.1 <= base.1,
        "threads/fds {after:?} did not come back to {base:?}"
    );
    drop((t, d));
}
