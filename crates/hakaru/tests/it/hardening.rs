//! Issue 29, "a server safe to expose, round two": one test per hole, each against the real
//! binary, each checking that a legitimate client still completes.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use hakaru_model::{Amount, Dur, TcpSpec, TestSpec};
use hakaru_proto::native::opening;
use hakaru_proto::{Decoder, Message, PROTOCOL_VERSION};

use super::common::{json, peer, read_msg, run, run_cmd, stderr, threads_of, ServerProc};
use super::hostile::{back_to_baseline, connect_from, fails, fds_of, legit};

const LIMIT: Duration = Duration::from_secs(60);

/// `-l 100 -b 1M` raised the paced sender's write to a full segment over a 100-byte pattern:
/// the server's flow thread panicked on `-R` and the client waited for a stall.
#[test]
fn a_paced_sender_with_short_writes_works_both_ways() {
    let s = ServerProc::start(&[]);
    let port = s.port_s();
    for dir in [None, Some("-R"), Some("--bidir")] {
        let mut args = vec![
            "tcp",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "1",
            "-b",
            "1M",
            "-l",
            "100",
            "--json",
        ];
        args.extend(dir);
        let o = run(&args, LIMIT);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json(&o);
        let totals = v["totals"].as_array().expect("totals");
        assert_eq!(totals.len(), if dir == Some("--bidir") { 2 } else { 1 });
        for t in totals {
            let bytes = t["receiver"]["bytes"].as_u64().unwrap_or(0);
            // 1 Mbit/s for about a second: 125 kB, give or take the schedule's edges.
            assert!(
                (60_000..=250_000).contains(&bytes),
                "{args:?}: {bytes} bytes"
            );
        }
    }
    assert!(
        s.wait_log("panicked", Duration::from_millis(300)).is_none(),
        "the server logged a panic"
    );
}

#[test]
fn a_stock_iperf3_client_gets_short_paced_writes_from_the_server() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let s = ServerProc::start(&[]);
    let port = s.port_s();
    let o = run_cmd(
        std::process::Command::new("iperf3").args([
            "-c",
            "127.0.0.1",
            "-p",
            &port,
            "-R",
            "-b",
            "1M",
            "-l",
            "100",
            "-t",
            "2",
            "-J",
        ]),
        LIMIT,
    );
    assert!(o.status.success(), "iperf3 -R -b 1M -l 100: {}", stderr(&o));
    let v = json(&o);
    let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(
        (150_000..=400_000).contains(&bytes),
        "{bytes} bytes in 2 s at 1 Mbit/s"
    );
}

/// A control session opened by hand: hello, welcome, test request, accepted.
pub(crate) struct RawTest {
    pub(crate) ctl: TcpStream,
    pub(crate) dec: Decoder,
    pub(crate) token: String,
}

impl RawTest {
    pub(crate) fn start(port: u16, spec: TestSpec) -> RawTest {
        RawTest::start_held(port, spec, false)
    }

    /// [`RawTest::start`], asking for a held start when `held`. A "busy" answer is tried
    /// again for up to 10 s: after a test, the server answers "busy" until it has seen that
    /// test's control connection close, which on a loaded machine can take a moment.
    pub(crate) fn start_held(port: u16, spec: TestSpec, held: bool) -> RawTest {
        let started = std::time::Instant::now();
        loop {
            let mut ctl = connect_from("127.0.0.1", port);
            let mut dec = Decoder::new();
            ctl.write_all(&opening(&Message::Hello {
                protocol: PROTOCOL_VERSION,
                software: "hardening test".into(),
                host: None,
                nonce: None,
            }))
            .unwrap();
            assert!(matches!(
                read_msg(&mut ctl, &mut dec, Duration::from_secs(5)),
                Some(Message::Welcome { .. })
            ));
            ctl.write_all(
                &Message::TestRequest {
                    test: Box::new(spec.clone()),
                    held_start: held,
                }
                .encode(),
            )
            .unwrap();
            match read_msg(&mut ctl, &mut dec, Duration::from_secs(5)) {
                Some(Message::Accepted { token, .. }) => return RawTest { ctl, dec, token },
                Some(Message::Refused { reason })
                    if reason.contains("busy") && started.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => panic!("expected accepted, got {other:?}"),
            }
        }
    }

    /// A data connection from `src` carrying this test's token for `flow`.
    pub(crate) fn data(&self, src: &str, port: u16, flow: u32) -> TcpStream {
        let mut c = connect_from(src, port);
        c.write_all(&opening(&Message::DataHello {
            token: self.token.clone(),
            flow,
        }))
        .unwrap();
        c
    }
}

/// A scheduled start (`start_at`) an hour ahead holds the server's data threads a second at
/// most; one out of place (a test without a held start) is refused by name; the server
/// serves the next client.
#[test]
fn a_start_at_far_ahead_waits_a_second_at_most_and_one_out_of_place_is_refused() {
    use std::io::Read;
    let s = ServerProc::start(&[]);
    let spec = TestSpec::Tcp(TcpSpec {
        flows: 1,
        direction: hakaru_model::Direction::Reverse,
        amount: Amount::Time(Dur(Duration::from_secs(1))),
        ..TcpSpec::default()
    });
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let mut t = RawTest::start_held(s.port, spec.clone(), true);
    let mut flow = t.data("127.0.0.1", s.port, 0);
    let mut ask = Message::StartAt {
        at_unix: unix_now() + 3600.0,
    }
    .encode();
    ask.extend(Message::FlowsReady.encode());
    t.ctl.write_all(&ask).unwrap();
    match read_msg(&mut t.ctl, &mut t.dec, Duration::from_secs(5)) {
        Some(Message::Start) => {}
        other => panic!("expected start, got {other:?}"),
    }
    // The server sends (-R): its first byte comes when its data thread begins.
    let t0 = std::time::Instant::now();
    flow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 1];
    flow.read_exact(&mut b).expect("the server's data");
    let waited = t0.elapsed();
    assert!(
        waited > Duration::from_millis(500) && waited < Duration::from_secs(5),
        "the data began {waited:?} after start: not the 1 s cap of an instant an hour ahead"
    );
    drop(flow);
    // Without a held start, start_at is out of place.
    let mut u = RawTest::start(s.port, spec);
    u.ctl
        .write_all(
            &Message::StartAt {
                at_unix: unix_now(),
            }
            .encode(),
        )
        .unwrap();
    match read_msg(&mut u.ctl, &mut u.dec, Duration::from_secs(5)) {
        Some(Message::Error { message }) => {
            assert!(message.contains("unexpected start_at message"), "{message}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
    legit(&s, None, &[]);
}

/// What the server said on a data connection it refused: its error, or None if it kept it.
fn refusal(c: &mut TcpStream) -> Option<String> {
    match read_msg(c, &mut Decoder::new(), Duration::from_secs(3)) {
        Some(Message::Error { message }) => Some(message),
        _ => None,
    }
}

/// One test's token joined 1,500 extra connections to the test, held until it ended. Now a
/// token admits only its test's flows, only from its client's address, and only until every
/// flow has arrived.
#[test]
fn a_token_admits_only_its_flows_from_its_client_while_they_arrive() {
    let s = ServerProc::start(&[]);
    let pid = s.child.id();
    legit(&s, None, &[]);
    let base = (threads_of(pid), fds_of(pid));
    let spec = TestSpec::Tcp(TcpSpec {
        flows: 2,
        amount: Amount::Time(Dur(Duration::from_secs(4))),
        ..TcpSpec::default()
    });
    let mut t = RawTest::start(s.port, spec);
    // From another address the token is no use, even while the test collects its flows.
    let mut stranger = t.data("127.0.0.9", s.port, 0);
    let why = refusal(&mut stranger).expect("the stranger's data connection was kept");
    assert!(why.contains("not the test's client"), "{why}");
    // The test's own two flows are taken, and the test starts.
    let _f0 = t.data("127.0.0.1", s.port, 0);
    let _f1 = t.data("127.0.0.1", s.port, 1);
    match read_msg(&mut t.ctl, &mut t.dec, Duration::from_secs(5)) {
        Some(Message::Start) => {}
        other => panic!("expected start, got {other:?}"),
    }
    // Every later connection with the token is refused at once and closed, not queued.
    let mut refused = 0;
    for i in 0..300 {
        let mut c = t.data("127.0.0.1", s.port, i % 2);
        if let Some(why) = refusal(&mut c) {
            assert!(why.contains("unknown or retired token"), "{why}");
            refused += 1;
        }
    }
    assert_eq!(refused, 300, "every extra data connection is refused");
    let fds = fds_of(pid);
    assert!(
        fds < base.1 + 40,
        "the server holds {fds} descriptors during a 2-flow test (baseline {})",
        base.1
    );
    drop(t);
    drop(_f0);
    drop(_f1);
    back_to_baseline(&s, base);
    legit(&s, None, &[]);
}

#[test]
fn budgets_the_server_sets_are_named_in_refusals() {
    let s = ServerProc::start(&["--max-test-memory", "64M", "--max-rate", "50M"]);
    let port = s.port_s();
    // -l 48M: a pattern and a read buffer per worker, 96 MiB.
    let e = fails(
        &["tcp", "127.0.0.1", "-p", &port, "-t", "1", "-l", "48M"],
        "--max-test-memory",
    );
    assert!(e.contains("allows 64 MiB a test"), "{e}");
    // TCP sent by the server is capped like UDP: unpaced, or paced over the cap.
    fails(
        &["tcp", "127.0.0.1", "-p", &port, "-t", "1", "-R"],
        "--max-rate",
    );
    let e = fails(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "1",
            "--bidir",
            "-P",
            "2",
            "-b",
            "30M",
        ],
        "--max-rate",
    );
    assert!(e.contains("2 flow(s)"), "{e}");
    // Busy-polling is the server's to allow.
    let e = fails(
        &["latency", "127.0.0.1", "-p", &port, "-t", "1", "--spin"],
        "--allow-busy-poll",
    );
    assert!(e.contains("--spin"), "{e}");
    // Within every budget: runs.
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "1",
            "-R",
            "-b",
            "40M",
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Many flows spinning on a server that allows it: never more than its CPUs.
    let busy = ServerProc::start(&["--allow-busy-poll"]);
    let e = fails(
        &[
            "latency",
            "127.0.0.1",
            "-p",
            &busy.port_s(),
            "-t",
            "1",
            "--spin",
            "-P",
            "256",
        ],
        "spins at most one flow per CPU",
    );
    assert!(e.contains("256 flows"), "{e}");
    let o = run(
        &[
            "latency",
            "127.0.0.1",
            "-p",
            &busy.port_s(),
            "-t",
            "1",
            "--spin",
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // And a test longer than the server's default hour is refused up front.
    fails(
        &["tcp", "127.0.0.1", "-p", &port, "-t", "2h"],
        "--max-duration",
    );
}

/// Eight `tcp -l 64M --bidir` took the server to 320 MB; the total budget turns the ones
/// that do not fit away as busy, and the first ones run.
#[test]
fn memory_in_total_is_budgeted_across_tests() {
    let s = ServerProc::start(&["--max-test-memory", "200M", "--max-memory", "250M"]);
    let port = s.port_s();
    let spawn = || {
        super::common::hakaru()
            .args([
                "tcp",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "3",
                "-l",
                "48M",
                "--bidir",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // 48M x 3 (a pattern, two workers' buffers on 2 CPUs, or more on more): 144+ MiB each.
    let first = spawn();
    assert!(
        s.wait_log("test 1 from", Duration::from_secs(10)).is_some(),
        "the first test did not start"
    );
    let second = spawn();
    let out = super::common::wait_child(second, LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--max-memory") && err.contains("busy"),
        "{err}"
    );
    let out = super::common::wait_child(first, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    // The first test's reservation came back with it.
    let out = super::common::wait_child(spawn(), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_stock_iperf3_client_meets_the_memory_and_rate_budgets() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let s = ServerProc::start(&["--max-test-memory", "16M", "--max-rate", "10M"]);
    let port = s.port_s();
    let iperf3 = |args: &[&str]| {
        let mut a = vec!["-c", "127.0.0.1", "-p", &port, "-t", "1"];
        a.extend(args);
        run_cmd(std::process::Command::new("iperf3").args(&a), LIMIT)
    };
    let o = iperf3(&["-P", "16", "-w", "1M"]);
    assert!(!o.status.success(), "16 streams with 1 MiB windows ran");
    let o = iperf3(&["-R"]);
    assert!(!o.status.success(), "an unpaced -R ran past --max-rate");
    let o = iperf3(&["-R", "-b", "5M"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Holds 64 idle connections to [SERVER]:PORT, one from each of 64 addresses of the /64
/// SRC::/64, for HOLD seconds; prints how many the server refused by name and how many it
/// kept waiting for a hello.
const IDLE_FROM_A_64: &str = r#"
import socket, sys, time
server, port, src, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
conns = []
for i in range(64):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.bind((src + "%x" % (0x100 + i), 0))
    s.settimeout(5)
    s.connect((server, port))
    conns.append(s)
refused = kept = 0
for s in conns:
    s.settimeout(1)
    try:
        data = s.recv(4096)
    except socket.timeout:
        data = None
    if data and b"one /64 network" in data:
        refused += 1
    elif data is None:
        kept += 1
print("refused", refused, "kept", kept, flush=True)
time.sleep(hold)
"#;

/// An IPv6 client holds a /64: counted by address, its 64 addresses had 64 x 8 handshake
/// slots. By /64 they share one client's 8, and a client of another /64 is not held up.
#[test]
fn an_ipv6_64_is_one_client() {
    use super::netns_link::{Link, Shaping};
    if !peer("python3", "python3") {
        return;
    }
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    let (cns, sns) = (link.client_ns.clone(), link.server_ns.clone());
    let ip = |ns: &str, args: &[&str]| {
        let mut a = vec!["-n", ns];
        a.extend(args);
        let o = run_cmd(std::process::Command::new("ip").args(&a), LIMIT);
        assert!(o.status.success(), "ip {a:?}: {}", stderr(&o));
    };
    // The server at 2001:db8:5::1; the client owns 2001:db8:9::/64 and 2001:db8:a::/64 whole
    // (local routes on lo deliver every address in them); the server reaches both
    // through the client's one configured address, so neighbour discovery needs no more.
    ip(
        &sns,
        &[
            "-6",
            "addr",
            "add",
            "2001:db8:5::1/64",
            "dev",
            &link.server_dev,
            "nodad",
        ],
    );
    ip(
        &cns,
        &[
            "-6",
            "addr",
            "add",
            "2001:db8:5::2/64",
            "dev",
            &link.client_dev,
            "nodad",
        ],
    );
    for net in ["2001:db8:9::/64", "2001:db8:a::/64"] {
        ip(&cns, &["-6", "route", "add", "local", net, "dev", "lo"]);
        ip(
            &sns,
            &[
                "-6",
                "route",
                "add",
                net,
                "via",
                "2001:db8:5::2",
                "dev",
                &link.server_dev,
            ],
        );
    }
    // IPv6 binds only configured addresses unless non-local binds are allowed (this
    // namespace's setting alone).
    let o = link.in_client(&["sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut cmd = std::process::Command::new("ip");
    cmd.env_remove("RUST_LOG")
        .args(["netns", "exec", &sns, super::common::bin()]);
    let s = ServerProc::start_with(cmd, "2001:db8:5::1", &[]);
    let port = s.port_s();
    let idle = std::process::Command::new("ip")
        .args(["netns", "exec", &cns, "python3", "-c", IDLE_FROM_A_64])
        .args(["2001:db8:5::1", &port, "2001:db8:9::", "6"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    // Another address of the same /64: its limit is used up, and the refusal says whose.
    let same = link.in_client(
        &[
            super::common::bin(),
            "tcp",
            "2001:db8:5::1",
            "-p",
            &port,
            "-n",
            "1M",
            "-B",
            "2001:db8:9::1",
        ],
        LIMIT,
    );
    let err = stderr(&same);
    assert_eq!(same.status.code(), Some(1), "{err}");
    assert!(
        err.contains("from one /64 network; 2001:db8:9::/64 has 8 (--max-pending-per-client)"),
        "{err}"
    );
    // Another /64 runs its test meanwhile.
    let other = link.client_json(
        &[
            "tcp",
            "2001:db8:5::1",
            "-p",
            &port,
            "-n",
            "1M",
            "-B",
            "2001:db8:a::1",
            "--json",
        ],
        LIMIT,
    );
    assert_eq!(other["totals"][0]["receiver"]["bytes"], 1 << 20);
    let out = super::common::wait_child(idle, LIMIT);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(said.trim(), "refused 56 kept 8", "{}", stderr(&out));
}

/// Opens a connection to 127.0.0.1:`port` and sends `head` one byte every 150 ms (faster than
/// any read timeout) from a thread; returns the thread, which yields what the server answered
/// and when the server ended the connection, measured from the first byte.
fn trickle(port: u16, head: &'static [u8]) -> std::thread::JoinHandle<(String, Duration)> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let t0 = std::time::Instant::now();
        for b in head.iter().cycle() {
            if s.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(40) {
                break;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        let mut out = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = std::io::Read::read_to_end(&mut s, &mut out);
        (String::from_utf8_lossy(&out).into_owned(), t0.elapsed())
    })
}

/// One byte every 150 ms held a slot of the HTTP port for hours and the metrics port's only
/// thread for as long: both now cut the head at an absolute deadline, and metrics answers
/// other scrapers meanwhile.
#[test]
fn slow_heads_are_cut_at_the_deadline() {
    let (hport, mport) = (super::common::free_port(), super::common::free_port());
    let maddr = format!("127.0.0.1:{mport}");
    let s = ServerProc::start(&["--http-port", &hport.to_string(), "--metrics", &maddr]);
    assert!(s
        .wait_log("http listening", Duration::from_secs(10))
        .is_some());
    // A head that never ends: "GET /bytes/1 HTTP/1.1\r\nX: aaaa..." (the header line cycles).
    let http = trickle(hport, b"GET /bytes/1 HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaa");
    let metrics = trickle(mport, b"GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaa");
    // Meanwhile a scrape is answered at once.
    std::thread::sleep(Duration::from_secs(1));
    let t0 = std::time::Instant::now();
    let body = super::common::http_get(mport, "/metrics").unwrap();
    assert!(body.contains("hakaru_tests_running"), "{body}");
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "the scrape waited for the slow one"
    );
    let (_, took) = metrics.join().unwrap();
    assert!(
        took < Duration::from_secs(8),
        "metrics held a slow head for {took:?}"
    );
    let (said, took) = http.join().unwrap();
    assert!(
        took < Duration::from_secs(14),
        "http held a slow head for {took:?}"
    );
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
}

/// A scraper cannot take every metrics thread: past two at once from one address it is told
/// 503 by name.
#[test]
fn metrics_scrapes_are_bounded_per_address() {
    let mport = super::common::free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let _s = ServerProc::start(&["--metrics", &maddr]);
    let mut held = Vec::new();
    for _ in 0..40 {
        match TcpStream::connect(("127.0.0.1", mport)) {
            Ok(c) => {
                held.push(c);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    held.push(TcpStream::connect(("127.0.0.1", mport)).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    // The third is told at once, before it says anything.
    let mut third = TcpStream::connect(("127.0.0.1", mport)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut third, &mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("metrics scrapes"),
        "{answer}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let answer = super::common::http_get(mport, "/metrics").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Before the key proof a stranger learned the server's exact version, OS, clock and boot
/// id; with a key the welcome now says only that this is a hakaru server that wants one, and
/// a client with the key still gets the clock and the same-host check.
#[test]
fn a_keyed_welcome_reveals_nothing_before_the_proof() {
    let dir = std::env::temp_dir().join(format!("hakaru-welcome-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    std::fs::write(&key, "a key long enough to be accepted\n").unwrap();
    let key_s = key.to_str().unwrap();
    let s = ServerProc::start(&["--psk-file", key_s]);
    let mut c = connect_from("127.0.0.5", s.port);
    c.write_all(&opening(&Message::Hello {
        protocol: PROTOCOL_VERSION,
        software: "stranger".into(),
        host: Some("guess".into()),
        nonce: None,
    }))
    .unwrap();
    match read_msg(&mut c, &mut Decoder::new(), Duration::from_secs(5)) {
        Some(Message::Welcome {
            software,
            unix_time,
            host,
            auth,
            os,
            ..
        }) => {
            assert_eq!(software, "hakaru");
            assert_eq!((unix_time, host, os), (None, None, None));
            assert!(auth.is_some(), "a keyed server asks for the proof");
        }
        other => panic!("expected a welcome, got {other:?}"),
    }
    let port = s.port_s();
    let o = run(
        &[
            "udp",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "1",
            "--psk-file",
            key_s,
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert!(v["server_clock_offset"]["offset_s"].is_number(), "{v}");
    assert_eq!(v["server_on_this_host"], true, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}
