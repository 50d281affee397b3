//! Bad input and faults: each ends with a one-line error naming the problem, a non-zero
//! exit, and a server that keeps serving.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hakaru_proto::{native::opening, Decoder, Message, MAGIC};

use super::common::{hakaru, json, kill, read_msg, run, stderr, threads_of, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

fn fails_with(args: &[&str], code: i32, needles: &[&str]) -> String {
    let o = run(args, LIMIT);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "hakaru {args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "hakaru {args:?}: expected {n:?} in: {err}");
    }
    err
}

fn server_still_serves(s: &ServerProc) {
    let o = run(
        &["tcp", "127.0.0.1", "-p", &s.port_s(), "-n", "1M", "--json"],
        LIMIT,
    );
    assert!(o.status.success(), "server stopped serving: {}", stderr(&o));
    assert_eq!(json(&o)["totals"][0]["receiver"]["bytes"], 1 << 20);
}

#[test]
fn conflicting_flags_name_both() {
    fails_with(&["tcp", "-R", "--bidir"], 2, &["--reverse", "--bidir"]);
    fails_with(&["tcp", "-t", "5", "-n", "1M"], 2, &["--time", "--bytes"]);
    fails_with(
        &["tcp", "--tos", "4", "--dscp", "1"],
        2,
        &["--tos", "--dscp"],
    );
    fails_with(&["tcp", "-4", "-6"], 2, &["--ipv4", "--ipv6"]);
    fails_with(
        &["tcp", "--json", "--json-stream"],
        2,
        &["--json", "--json-stream"],
    );
}

#[test]
fn bad_values_name_the_flag() {
    fails_with(&["tcp", "-P", "0"], 2, &["-P/--parallel"]);
    fails_with(&["tcp", "-P", "2000"], 2, &["-P/--parallel"]);
    fails_with(&["tcp", "-l", "12Q"], 2, &["--length", "unknown unit"]);
    fails_with(&["tcp", "-t", "soon"], 2, &["--time"]);
    fails_with(&["tcp", "-A", "4000"], 2, &["-A/--affinity"]);
    fails_with(
        &["tcp", "-C", "nosuchcc", "-t", "1"],
        1,
        &["-C/--congestion", "nosuchcc"],
    );
}

#[test]
fn unknown_host_and_refused_connection() {
    fails_with(
        &["tcp", "no-such-host.invalid", "-t", "1"],
        1,
        &["cannot resolve host 'no-such-host.invalid'"],
    );
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    fails_with(
        &["tcp", "127.0.0.1", "-p", &port.to_string(), "-t", "1"],
        1,
        &["connection refused"],
    );
}

#[test]
fn wrong_protocol_on_the_port() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    fails_with(
        &["tcp", "127.0.0.1", "-p", &port.to_string(), "-t", "1"],
        1,
        &["is not a hakaru server"],
    );
    t.join().unwrap();
}

#[test]
fn server_rejects_version_mismatch_malformed_and_oversized_messages() {
    let s = ServerProc::start(&[]);
    let addr = format!("127.0.0.1:{}", s.port);
    // A future protocol version.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(&opening(&Message::Hello {
        protocol: 99,
        software: "hakaru 9".into(),
        host: None,
        nonce: None,
    }))
    .unwrap();
    let mut dec = Decoder::new();
    match read_msg(&mut c, &mut dec, Duration::from_secs(10)) {
        Some(Message::Error { message }) => {
            assert!(message.contains("protocol version mismatch"), "{message}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // Malformed JSON in a frame.
    let mut c = TcpStream::connect(&addr).unwrap();
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&5u32.to_be_bytes());
    bytes.extend_from_slice(b"{bad}");
    c.write_all(&bytes).unwrap();
    let mut dec = Decoder::new();
    match read_msg(&mut c, &mut dec, Duration::from_secs(10)) {
        Some(Message::Error { message }) => assert!(message.contains("malformed"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
    // A frame claiming 100 MiB.
    let mut c = TcpStream::connect(&addr).unwrap();
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&(100u32 << 20).to_be_bytes());
    c.write_all(&bytes).unwrap();
    let mut dec = Decoder::new();
    match read_msg(&mut c, &mut dec, Duration::from_secs(10)) {
        Some(Message::Error { message }) => assert!(message.contains("exceeds"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
    // Plain garbage is closed without a reply.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut buf = [0u8; 16];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0);
    // A valid hello followed by a request the spec validation refuses.
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(&opening(&Message::Hello {
        protocol: 1,
        software: "test".into(),
        host: None,
        nonce: None,
    }))
    .unwrap();
    let mut dec = Decoder::new();
    assert!(matches!(
        read_msg(&mut c, &mut dec, Duration::from_secs(10)),
        Some(Message::Welcome { .. })
    ));
    let bad = br#"{"type":"test_request","test":{"kind":"tcp","flows":0}}"#;
    c.write_all(&(bad.len() as u32).to_be_bytes()).unwrap();
    c.write_all(bad).unwrap();
    match read_msg(&mut c, &mut dec, Duration::from_secs(10)) {
        Some(Message::Error { message }) => assert!(message.contains("malformed"), "{message}"),
        other => panic!("expected an error, got {other:?}"),
    }
    server_still_serves(&s);
}

#[test]
fn client_killed_mid_test_frees_the_test() {
    let mut s = ServerProc::start(&[]);
    let base = threads_of(s.child.id());
    let mut client = hakaru()
        .args(["tcp", "127.0.0.1", "-p", &s.port_s(), "-t", "30", "-P", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(s.wait_log("test 1 from", Duration::from_secs(10)).is_some());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        threads_of(s.child.id()) > base,
        "test threads should be running"
    );
    kill(client.id(), 9);
    let _ = client.wait();
    let line = s.wait_log("aborted", Duration::from_secs(5));
    assert!(line.is_some(), "server did not log the abort within 5 s");
    // Threads and sockets of the test are gone within 5 s.
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
    server_still_serves(&s);
}

#[test]
fn server_killed_mid_test_fails_the_client() {
    let s = ServerProc::start(&[]);
    let client = hakaru()
        .args(["tcp", "127.0.0.1", "-p", &s.port_s(), "-t", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(s.wait_log("test 1 from", Duration::from_secs(10)).is_some());
    std::thread::sleep(Duration::from_millis(1500));
    let killed_at = Instant::now();
    drop(s);
    let pid = client.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(client.wait_with_output());
    });
    let o = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            kill(pid, 9);
            panic!("client did not notice the dead server");
        }
    };
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("hakaru: error:"), "{err}");
    assert!(err.lines().count() == 1, "one-line error expected: {err}");
    assert!(killed_at.elapsed() < Duration::from_secs(20));
}

#[test]
fn peer_that_stops_reading_is_reported() {
    // A fake server that sets the test up, then never reads the data connection.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut ctl, _) = l.accept().unwrap();
        let mut dec = Decoder::new();
        assert!(matches!(
            read_msg(&mut ctl, &mut dec, Duration::from_secs(10)),
            Some(Message::Hello { .. })
        ));
        ctl.write_all(&opening(&Message::Welcome {
            protocol: 1,
            software: "fake".into(),
            unix_time: None,
            host: None,
            auth: None,
            os: None,
        }))
        .unwrap();
        assert!(matches!(
            read_msg(&mut ctl, &mut dec, Duration::from_secs(10)),
            Some(Message::TestRequest { .. })
        ));
        ctl.write_all(
            &Message::Accepted {
                test_id: 1,
                token: "t".into(),
                probe_flow: None,
            }
            .encode(),
        )
        .unwrap();
        let (data, _) = l.accept().unwrap();
        ctl.write_all(&Message::Start.encode()).unwrap();
        // Keep the control connection alive but never read `data`.
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if ctl.write_all(&Message::Keepalive.encode()).is_err() {
                break;
            }
            let _ = read_msg(&mut ctl, &mut dec, Duration::from_secs(1));
        }
        drop(data);
    });
    fails_with(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "30",
            "--stall-timeout",
            "2",
        ],
        1,
        &["the peer stopped reading"],
    );
    fake.join().unwrap();
}

#[test]
fn busy_server_refuses_with_a_reason() {
    let s = ServerProc::start(&["--max-tests", "1"]);
    let mut first = hakaru()
        .args(["tcp", "127.0.0.1", "-p", &s.port_s(), "-t", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(s.wait_log("test 1 from", Duration::from_secs(10)).is_some());
    fails_with(
        &["tcp", "127.0.0.1", "-p", &s.port_s(), "-t", "1"],
        1,
        &["busy", "--max-tests"],
    );
    assert!(first.wait().unwrap().success());
}

#[test]
fn server_stops_cleanly_on_sigterm() {
    let mut s = ServerProc::start(&[]);
    kill(s.child.id(), 15);
    let deadline = Instant::now() + Duration::from_secs(6);
    let status = loop {
        if let Ok(Some(st)) = s.child.try_wait() {
            break st;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn host_port_forms_are_accepted_and_conflicts_named() {
    let s = ServerProc::start(&[]);
    let hp = format!("127.0.0.1:{}", s.port);
    let o = run(&["tcp", &hp, "-n", "1M", "--json"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["totals"][0]["receiver"]["bytes"], 1 << 20);
    // The same port given twice is fine; two different ports are a usage error.
    let o = run(&["tcp", &hp, "-p", &s.port_s(), "-n", "1M"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    fails_with(
        &["tcp", &hp, "-p", "1", "-n", "1M"],
        2,
        &["gives port", "-p/--port"],
    );
    fails_with(&["udp", "127.0.0.1:http"], 2, &["\"http\""]);
    // [v6]:PORT against a server on ::1 (where the machine has IPv6 loopback).
    if super::common::ipv6_loopback() {
        let s6 = ServerProc::start_with(super::common::hakaru(), "::1", &[]);
        let o = run(
            &["pps", &format!("[::1]:{}", s6.port), "-t", "1", "--json"],
            LIMIT,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run(&["tcp", "[::1]", "-p", &s6.port_s(), "-n", "1M"], LIMIT);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}
