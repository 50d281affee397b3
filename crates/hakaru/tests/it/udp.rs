//! UDP over loopback: `hakaru udp` and `hakaru pps` end to end, exact counts, labelled fast
//! paths, and a server that ignores (and counts) datagrams that are not part of a test.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use serde_json::Value;

use std::process::{Command, Stdio};

use super::common::{hakaru, json, run, stderr, wait_child, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn ok_json(args: &[&str]) -> Value {
    let o = run(args, LIMIT);
    assert!(o.status.success(), "hakaru {args:?} failed: {}", stderr(&o));
    json(&o)
}

fn fails_with(args: &[&str], code: i32, needles: &[&str]) {
    let o = run(args, LIMIT);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "hakaru {args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "hakaru {args:?}: expected {n:?} in: {err}");
    }
}

/// Each direction's UDP total is the sum of its flows, and nothing was lost or ignored.
fn assert_udp_reconciles(r: &Value, lossless: bool) {
    let flows = r["flows"].as_array().unwrap();
    for t in r["totals"].as_array().unwrap() {
        let dir = t["dir"].as_str().unwrap();
        let of: Vec<&Value> = flows.iter().filter(|f| f["dir"] == dir).collect();
        for key in ["sent_datagrams", "received_datagrams", "lost"] {
            let sum: u64 = of.iter().map(|f| u(&f["udp"][key])).sum();
            assert_eq!(sum, u(&t["udp"][key]), "{dir} {key} flows != SUM");
        }
        let tu = &t["udp"];
        assert!(u(&tu["received_datagrams"]) > 0, "{dir}: nothing received");
        assert_eq!(u(&tu["ignored"]), 0, "{dir}: ignored datagrams");
        if lossless {
            assert_eq!(u(&tu["lost"]), 0, "{dir}: loss on loopback");
            assert_eq!(
                u(&tu["received_datagrams"]),
                u(&tu["sent_datagrams"]),
                "{dir}: received != sent"
            );
        } else {
            assert_eq!(
                u(&tu["received_datagrams"]) + u(&tu["lost"]) - u(&tu["duplicates"]),
                u(&tu["sent_datagrams"]),
                "{dir}: received + lost != sent"
            );
        }
        // Bytes and datagrams agree: every datagram carries exactly --length bytes.
        let len = u(&r["spec"]["length"]);
        assert_eq!(
            u(&t["receiver"]["bytes"]),
            u(&tu["received_datagrams"]) * len
        );
    }
}

#[test]
fn udp_paced_rate_is_met_without_loss() {
    let r = ok_json(&["udp", "-t", "2", "-b", "20M", "--json"]);
    assert_eq!(r["test"], "udp");
    assert_eq!(r["spec"]["kind"], "udp");
    assert_eq!(u(&r["spec"]["length"]), 1472);
    assert_udp_reconciles(&r, true);
    let t = &r["totals"][0];
    let bps = f(&t["receiver"]["bits_per_second"]);
    // Paced on an absolute schedule: the achieved rate is the target, not "about" it.
    assert!(
        (bps / 20e6 - 1.0).abs() < 0.02,
        "received {bps} bit/s for -b 20M"
    );
    assert!(
        t["udp"]["jitter_ms"].as_f64().is_some(),
        "no jitter reported"
    );
    // Wire rate includes UDP, IP and Ethernet overhead: 1538 bytes per 1472-byte payload.
    let wire = f(&t["udp"]["received_wire_bps"]);
    let pps = f(&t["udp"]["received_pps"]);
    assert!((wire - pps * 1538.0 * 8.0).abs() < 1.0);
    let iv = r["intervals"].as_array().unwrap();
    assert!(iv.len() >= 2);
    let tick = &iv[0]["flows"][0]["udp"];
    assert!(u(&tick["datagrams"]) > 1000, "interval datagrams: {tick}");
    assert!(u(&iv[0]["flows"][0]["sender_datagrams"]) > 1000);
    assert!(iv[0]["sums"][0]["udp"].is_object());
}

#[test]
fn pps_exact_counts_over_eight_flows() {
    let r = ok_json(&[
        "pps", "-k", "40000", "-P", "8", "--rate", "10000", "-i", "0", "--json",
    ]);
    assert_eq!(r["test"], "pps");
    assert_udp_reconciles(&r, true);
    let flows = r["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 8);
    for fl in flows {
        assert_eq!(u(&fl["udp"]["sent_datagrams"]), 5000, "flow {}", fl["id"]);
    }
    assert_eq!(u(&r["totals"][0]["udp"]["received_datagrams"]), 40000);
    assert_eq!(u(&r["totals"][0]["receiver"]["bytes"]), 40000 * 14);
}

#[test]
fn pps_reverse_and_udp_bidir() {
    let r = ok_json(&[
        "pps", "-R", "-P", "2", "-k", "20000", "--rate", "10000", "--json",
    ]);
    assert_eq!(r["totals"][0]["dir"], "down");
    assert_udp_reconciles(&r, true);
    // The server sent, the client received.
    assert_ne!(r["server_end"]["udp_paths"]["send"], "none");
    assert_ne!(r["client"]["udp_paths"]["recv"], "none");
    let r = ok_json(&["udp", "--bidir", "-t", "1", "-b", "5M", "--json"]);
    let dirs: Vec<&str> = r["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["dir"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, ["up", "down"]);
    assert_udp_reconciles(&r, true);
}

#[test]
fn one_byte_datagrams_are_counted_not_sequenced() {
    let r = ok_json(&["pps", "-l", "1", "-k", "5000", "--rate", "20000", "--json"]);
    let t = &r["totals"][0]["udp"];
    assert_eq!(t["sequenced"], false);
    assert_eq!(u(&t["received_datagrams"]), 5000);
    assert!(t["jitter_ms"].is_null());
    let o = run(&["pps", "-l", "1", "-k", "100", "--rate", "1000"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("counted, not sequenced"), "{text}");
}

#[test]
fn fast_paths_are_labelled() {
    let r = ok_json(&["pps", "-t", "1", "-i", "0", "--json"]);
    let send = r["client"]["udp_paths"]["send"].as_str().unwrap();
    let fallback = &r["client"]["udp_paths"]["fallback"];
    assert!(
        send == "gso" || fallback.is_string(),
        "send path {send} without a reason"
    );
    assert_eq!(r["server_end"]["udp_paths"]["send"], "none");
    assert_eq!(r["spec"]["gso"], true);
    assert_eq!(r["spec"]["gro"], false);
    let r = ok_json(&["pps", "-t", "1", "-i", "0", "--no-gso", "--json"]);
    assert_eq!(r["client"]["udp_paths"]["send"], "sendmmsg");
    let r = ok_json(&["pps", "-t", "1", "-i", "0", "--gro", "--json"]);
    assert_eq!(r["server_end"]["udp_paths"]["recv"], "gro");
    let o = run(&["pps", "-t", "1", "-i", "0", "--gro"], LIMIT);
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a wire rate"));
}

#[test]
fn stray_datagrams_are_ignored_and_counted() {
    let server = ServerProc::start(&[]);
    let port = server.port_s();
    let target = format!("127.0.0.1:{port}");
    let client = {
        let port = port.clone();
        std::thread::spawn(move || {
            run(
                &[
                    "udp",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-k",
                    "3000",
                    "-b",
                    "10M",
                    "-i",
                    "0",
                    "--json",
                ],
                LIMIT,
            )
        })
    };
    // While the test runs, a stranger sends junk and forged hellos to the server's port.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut forged = *b"HKUH\x01\x01\x00\x00................";
    let started = Instant::now();
    let mut sent = 0u32;
    std::thread::sleep(Duration::from_millis(500));
    while started.elapsed() < Duration::from_millis(2000) && sent < 400 {
        let _ = stranger.send_to(b"\x00\x00\x00\x00\x00\x00\x00\x05junk", &target);
        forged[8] = sent as u8;
        let _ = stranger.send_to(&forged, &target);
        sent += 2;
        std::thread::sleep(Duration::from_millis(5));
    }
    let o = client.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    // The test's own counts are untouched: exactly what was sent arrived, nothing ignored.
    let t = &r["totals"][0]["udp"];
    assert_eq!(u(&t["received_datagrams"]), 3000);
    assert_eq!(u(&t["ignored"]), 0);
    let strays = u(&r["server_end"]["stray_datagrams"]);
    assert!(strays >= 20, "only {strays} strays counted of {sent} sent");
    // Nothing was ever sent back to the stranger.
    stranger.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert!(
        stranger.recv(&mut buf).is_err(),
        "the server answered a stranger"
    );
    assert!(server.wait_log("ignored", Duration::from_secs(1)).is_some());
    // And the server still serves.
    let r = ok_json(&[
        "pps",
        "127.0.0.1",
        "-p",
        &port,
        "-k",
        "1000",
        "--rate",
        "5000",
        "--json",
    ]);
    assert_eq!(u(&r["totals"][0]["udp"]["received_datagrams"]), 1000);
}

#[test]
fn bad_udp_values_name_the_flag() {
    fails_with(&["udp", "-l", "15"], 2, &["-l/--length", "16"]);
    fails_with(&["udp", "-l", "65508"], 2, &["-l/--length", "65507"]);
    fails_with(&["pps", "-l", "0"], 2, &["-l/--length"]);
    fails_with(&["pps", "--rate", "0"], 2, &["--rate"]);
    fails_with(&["pps", "--batch", "65"], 2, &["--batch"]);
    fails_with(
        &["pps", "--rate", "100", "-b", "1M"],
        2,
        &["--rate", "--bitrate"],
    );
    fails_with(&["udp", "-R", "--bidir"], 2, &["--reverse", "--bidir"]);
    fails_with(&["udp", "-b", "fast"], 2, &["--bitrate"]);
}

#[test]
fn three_clients_into_one_server_each_get_their_own_results() {
    let server = ServerProc::start(&[]);
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let port = server.port_s();
            std::thread::spawn(move || {
                run(
                    &[
                        "pps",
                        "127.0.0.1",
                        "-p",
                        &port,
                        "-P",
                        "8",
                        "-k",
                        "24000",
                        "--rate",
                        "1000",
                        "--no-gso",
                        "-i",
                        "0",
                        "--json",
                    ],
                    LIMIT,
                )
            })
        })
        .collect();
    for c in clients {
        let o = c.join().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let r = json(&o);
        let got = u(&r["totals"][0]["udp"]["received_datagrams"]);
        assert_eq!(got, 24000, "each client's own count is exact");
        // The server's interface saw everyone's datagrams while this test ran: on lo every
        // datagram is one packet without GSO, so the aggregate is well above this test's own.
        let nic = u(&r["server_end"]["nic"]["rx_packets"]);
        assert!(
            nic >= 2 * got,
            "server NIC rx_packets {nic} does not show the other clients ({got} own)"
        );
    }
}

/// The seeds' many-flow packet-rate runs: with 256 flows against a server process every flow
/// is reported, with its own counts at both ends, in every interval and in the totals, and
/// the totals are the flows added up.
#[test]
fn pps_with_256_flows_reports_and_counts_every_flow() {
    let server = ServerProc::start(&[]);
    let port = server.port_s();
    for extra in [
        &[][..],
        &["--bidir"][..],
        &["--bidir", "--port-per-flow"][..],
    ] {
        let mut args = vec![
            "pps",
            "127.0.0.1",
            "-p",
            &port,
            "-P",
            "256",
            "-t",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let r = ok_json(&args);
        let dirs = if extra.is_empty() { 1 } else { 2 };
        let flows = r["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 256 * dirs, "{extra:?}: every flow reported");
        let mut ids: Vec<u64> = flows.iter().map(|f| u(&f["id"])).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 256 * dirs, "{extra:?}: flow ids are distinct");
        for f in flows {
            let udp = &f["udp"];
            assert!(
                u(&udp["sent_datagrams"]) > 0,
                "{extra:?}: flow {} sent nothing",
                f["id"]
            );
            assert!(
                u(&udp["received_datagrams"]) > 0,
                "{extra:?}: flow {} received nothing",
                f["id"]
            );
            assert_eq!(
                u(&udp["received_datagrams"]) + u(&udp["lost"]),
                u(&udp["sent_datagrams"]) + u(&udp["duplicates"]),
                "{extra:?}: flow {} does not reconcile: {udp}",
                f["id"]
            );
        }
        for t in r["totals"].as_array().unwrap() {
            let of: Vec<&Value> = flows.iter().filter(|f| f["dir"] == t["dir"]).collect();
            assert_eq!(u(&t["flows"]), 256);
            for key in ["received_datagrams", "sent_datagrams", "lost"] {
                let sum: u64 = of.iter().map(|f| u(&f["udp"][key])).sum();
                assert_eq!(
                    sum,
                    u(&t["udp"][key]),
                    "{extra:?}: {key} of the flows vs the total"
                );
            }
        }
        for rec in r["intervals"].as_array().unwrap() {
            assert_eq!(
                rec["flows"].as_array().unwrap().len(),
                256 * dirs,
                "{extra:?}: interval {} misses flows",
                rec["index"]
            );
        }
    }
}

/// `--bitrate-up/--bitrate-down` (udp, tcp) and `--rate-down` (pps): each direction runs at its
/// own rate, and the rate targets name the rate asked of that direction.
#[test]
fn each_direction_at_its_own_rate() {
    let within = |got: f64, want: f64| (got / want - 1.0).abs() <= 0.05;
    let r = ok_json(&[
        "udp",
        "--bidir",
        "--bitrate-up",
        "20M",
        "--bitrate-down",
        "5M",
        "-t",
        "2",
        "--json",
    ]);
    for (dir, want) in [("up", 20e6), ("down", 5e6)] {
        let t = r["totals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["dir"] == dir)
            .expect("direction");
        let got = f(&t["receiver"]["bits_per_second"]);
        assert!(within(got, want), "udp {dir}: {got} vs {want}");
        assert_eq!(f(&t["rate_target"]["asked"]), want, "{dir}");
    }
    let r = ok_json(&[
        "tcp",
        "--bidir",
        "--bitrate-up",
        "40M",
        "--bitrate-down",
        "10M",
        "-t",
        "2",
        "--json",
    ]);
    for (dir, want) in [("up", 40e6), ("down", 10e6)] {
        let t = r["totals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["dir"] == dir)
            .expect("direction");
        let got = f(&t["receiver"]["bits_per_second"]);
        assert!(within(got, want), "tcp {dir}: {got} vs {want}");
    }
    let r = ok_json(&["pps", "-R", "--rate-down", "5000", "-t", "1", "--json"]);
    let got = f(&r["totals"][0]["udp"]["received_pps"]);
    assert!(within(got, 5000.0), "pps down: {got}");
    // A down rate without a down direction is still checked like any rate.
    fails_with(&["udp", "--bitrate-down", "99T"], 2, &["-b/--bitrate"]);
}

/// UDP sockets whose local address is `local` right now (`ss`).
fn sockets_on(local: &str) -> usize {
    let o = Command::new("ss")
        .args(["-Huan"])
        .output()
        .expect("ss runs");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some(local))
        .count()
}

/// `--port-per-flow`: the server's end of every flow leaves the server's UDP port for a port of
/// its own (only the port's own socket stays on it), and every flow still carries data both
/// ways; without it the flows' sockets share the port, as iperf3's do.
#[test]
fn port_per_flow_moves_each_flow_off_the_server_port() {
    let server = ServerProc::start(&[]);
    let port = server.port_s();
    let local = format!("127.0.0.1:{port}");
    for (flag, expect) in [(None, 1 + 8), (Some("--port-per-flow"), 1)] {
        let mut cmd = hakaru();
        cmd.args([
            "udp",
            "127.0.0.1",
            "-p",
            &port,
            "-P",
            "4",
            "--bidir",
            "-t",
            "3",
        ])
        .args(["-b", "5M", "--json"])
        .args(flag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let child = cmd.spawn().expect("client starts");
        // The most sockets seen on the server's port while the test runs.
        let mut most = 0;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(2500) {
            most = most.max(sockets_on(&local));
            std::thread::sleep(Duration::from_millis(100));
        }
        let o = wait_child(child, Duration::from_secs(30));
        assert!(o.status.success(), "{flag:?}: {}", stderr(&o));
        let r = json(&o);
        assert_eq!(most, expect, "{flag:?}: sockets on the server's port");
        let flows = r["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 8, "{flag:?}");
        for f in flows {
            assert!(
                u(&f["udp"]["received_datagrams"]) > 0,
                "{flag:?}: flow {} {} received nothing",
                f["id"],
                f["dir"]
            );
        }
        let asked = if flag.is_some() { "per_flow" } else { "shared" };
        assert_eq!(r["spec"]["server_ports"], asked, "{flag:?}");
        // The result says when the flows moved, and why.
        let said = r["notes"].as_array().unwrap().iter().any(|n| {
            n.as_str()
                .unwrap()
                .contains("a UDP port of its own on the server (--port-per-flow)")
        });
        assert_eq!(said, flag.is_some(), "{flag:?}: notes {}", r["notes"]);
    }
}
