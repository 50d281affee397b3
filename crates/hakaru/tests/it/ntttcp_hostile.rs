//! Hostile peers against `hakaru server --ntttcp-port`: a synced sender that floods the data
//! ports, a connection flood against a server short of descriptors, failed syncs by the
//! hundred, and what an idle receiver costs. Each test prints the server's figures and checks
//! that a legitimate client is still served.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use super::common::{bin, have, threads_of, wait_child, ServerProc};
use super::hostile::{back_to_baseline, connect_from, fds_of, legit};
use super::ntttcp::{
    assert_same_bytes, free_range, ntttcp, ntttcp_total, sender, server, server_test, LIMIT,
};

/// Sync words (docs/protocol-notes.md, "ntttcp"): 4-byte big-endian integers.
fn word(c: &mut TcpStream, w: i32) -> i32 {
    c.write_all(&w.to_be_bytes()).expect("sync word");
    let mut b = [0u8; 4];
    c.read_exact(&mut b).expect("the receiver's answer");
    i32::from_be_bytes(b)
}

/// A sender from `src` that syncs ('X', then a 30 s cycle) and then opens nothing: its group
/// waits for data connections.
fn synced(src: &str, first: u16) -> TcpStream {
    let mut c = connect_from(src, first - 1);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(word(&mut c, 0x58), 11, "'X' answered 'not started'");
    assert_eq!(word(&mut c, 30), 30, "the cycle is agreed");
    c
}

/// Log lines the server writes within `wait`.
fn lines_for(s: &ServerProc, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut out = Vec::new();
    while let Ok(l) = s
        .log
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        out.push(l);
    }
    out
}

/// The server's fds once they have stopped changing for 300 ms (at most 5 s).
fn settled_fds(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = fds_of(pid);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let now = fds_of(pid);
        if now == last {
            break;
        }
        last = now;
    }
    last
}

#[test]
fn a_synced_sender_cannot_park_a_thousand_data_connections() {
    let first = free_range(4);
    let s = server(first, &[]);
    let pid = s.child.id();
    let base = (threads_of(pid), fds_of(pid));
    let sync = synced("127.0.0.1", first);
    // The flood: 1000 data connections from the synced address, over the four data ports.
    let flood: Vec<TcpStream> = (0..1000u16)
        .map(|i| connect_from("127.0.0.1", first + i % 4))
        .collect();
    let during = settled_fds(pid);
    // A synced sender may have --ntttcp-max-conns (64) data connections waiting, on top of
    // its client's --max-pending-per-client (8); the rest are closed at once.
    let bound = base.1 + 1 + 64 + 8;
    eprintln!(
        "ntttcp data flood: server fds before {}, during {during} (1000 data connections held by the client; bound {bound})",
        base.1
    );
    assert!(
        during <= bound,
        "the server holds {during} fds for one synced sender's 1000 data connections (before: {}, bound {bound})",
        base.1
    );
    assert!(
        s.wait_log("--ntttcp-max-conns", Duration::from_secs(5))
            .is_some(),
        "the refusal names the limit"
    );
    // Another address, and the flooding one itself, still run tests meanwhile.
    legit(&s, Some("127.0.0.2"), &[]);
    legit(&s, Some("127.0.0.1"), &[]);
    drop(flood);
    drop(sync);
    back_to_baseline(&s, base);
    eprintln!("ntttcp data flood: server fds after {}", fds_of(pid));
    // A stock sender is served as before.
    let Some(bin) = ntttcp() else { return };
    let out = wait_child(sender(bin, first, 4, &[]), LIMIT);
    assert!(out.status.success(), "ntttcp -s after the flood");
    let (_, total) = server_test(&s);
    assert_same_bytes(ntttcp_total(&out), total, 4);
}

#[test]
fn out_of_descriptors_the_accept_loops_back_off_and_log_once_a_second() {
    if !have("prlimit") {
        println!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    let first = free_range(4);
    let p = first.to_string();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=64:64", bin()]).env_remove("RUST_LOG");
    let s = ServerProc::start_with(
        cmd,
        "127.0.0.1",
        &["--ntttcp-port", &p, "--ntttcp-ports", "4"],
    );
    s.wait_log("ntttcp receiver: sync on", Duration::from_secs(10))
        .expect("the ntttcp receiver");
    let pid = s.child.id();
    let base = (threads_of(pid), fds_of(pid));
    // Idle connections from 20 addresses, 8 each held (their handshake slots): more than the
    // server's 64 descriptors. The rest wait in the listen queue, and so do the connections
    // to the ntttcp data ports opened once the server is out of descriptors.
    let mut flood: Vec<TcpStream> = Vec::new();
    for a in 2..22 {
        for _ in 0..10 {
            flood.push(connect_from(&format!("127.0.0.{a}"), s.port));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..40u16 {
        flood.push(connect_from("127.0.0.1", first + i % 4));
    }
    let watch = Duration::from_secs(4);
    let lines = lines_for(&s, watch);
    let during = fds_of(pid);
    let errors: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("accept failed"))
        .collect();
    let per_port = |port: &str| errors.iter().filter(|l| l.contains(port)).count();
    let (control, data) = (per_port("control port"), per_port("ntttcp data port"));
    eprintln!(
        "fd limit 64, {} connections: server fds before {} during {during}; 'accept failed' lines in {} s: {} (control port {control}, ntttcp data port {data})",
        flood.len(),
        base.1,
        watch.as_secs(),
        errors.len()
    );
    for l in &errors {
        eprintln!("  {l}");
    }
    assert!(
        control >= 1 && data >= 1,
        "the flood ran the server out of descriptors on both ports"
    );
    // At most a line a second per port (the old loops wrote 20 a second, and the ntttcp
    // one thousands).
    let most = watch.as_secs() as usize + 1;
    assert!(
        control <= most && data <= most,
        "{control} and {data} accept error lines in {} s",
        watch.as_secs()
    );
    assert!(
        errors.iter().any(|l| l.contains("not logged")),
        "the lines count the errors left out"
    );
    drop(flood);
    back_to_baseline(&s, base);
    legit(&s, Some("127.0.0.2"), &[]);
    eprintln!("after the flood: server fds {}", fds_of(pid));
}

#[test]
fn failed_ntttcp_syncs_write_few_log_lines() {
    let first = free_range(4);
    let s = server(first, &[]);
    // A sync that fails: garbage where the 'X' belongs (the server closes the connection
    // once it has read it).
    let fail = |i: usize| {
        let mut c = connect_from(&format!("127.0.0.{}", 1 + i % 3), first - 1);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(b"GET / HTTP/1.0\r\n\r\n");
        let _ = c.read(&mut [0u8; 16]);
    };
    let started = Instant::now();
    // 300 of them from 3 addresses in turn, then one more a second later (its line says how
    // many were left out).
    (0..300).for_each(fail);
    std::thread::sleep(Duration::from_millis(1100));
    fail(300);
    let took = started.elapsed();
    let lines = lines_for(&s, Duration::from_millis(500));
    let about: Vec<&String> = lines.iter().filter(|l| l.contains("ntttcp")).collect();
    eprintln!(
        "301 failed ntttcp syncs in {:.2} s: {} log lines",
        took.as_secs_f64(),
        about.len()
    );
    for l in &about {
        eprintln!("  {l}");
    }
    // One line a second per kind (old: one each, 301).
    let most = 2 * (took.as_secs() as usize + 2);
    assert!(
        about.len() <= most,
        "{} lines for 301 failed syncs in {took:?}",
        about.len()
    );
    assert!(about.iter().any(|l| l.contains("not logged")));
    let Some(bin) = ntttcp() else { return };
    let out = wait_child(sender(bin, first, 1, &[]), LIMIT);
    assert!(out.status.success(), "ntttcp -s after the failed syncs");
    let (_, total) = server_test(&s);
    assert_same_bytes(ntttcp_total(&out), total, 1);
}

/// utime + stime of `pid`, in clock ticks (/proc/PID/stat fields 14 and 15).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = stat.rsplit_once(')').expect("comm").1;
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f[11] + f[12]
}

#[test]
fn an_idle_ntttcp_receiver_costs_next_to_no_cpu() {
    let first = free_range(16);
    let p = first.to_string();
    // The default 16 data ports.
    let s = ServerProc::start(&["--ntttcp-port", &p]);
    s.wait_log("ntttcp receiver: sync on", Duration::from_secs(10))
        .expect("the ntttcp receiver");
    let pid = s.child.id();
    std::thread::sleep(Duration::from_secs(1));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_ticks(pid) - before;
    // Measured on 2 cores (debug build): 11 ticks in 3 s when the loop polled its 17
    // listeners every 2 ms, 0 or 1 now.
    eprintln!("idle ntttcp receiver (17 listeners): {used} clock ticks of CPU in 3 s");
    assert!(
        used <= 5,
        "an idle receiver used {used} ticks of CPU in 3 s"
    );
}
