//! Latency probes inside bulk tests (`--latency-probe`) on loopback: every direction and
//! transport carries the probes' intervals and figures; bad flags and a server that predates
//! probes end in errors that name the option, never a hang.

use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

use hakaru_proto::{native::opening, Decoder, Message};
use serde_json::Value;

use super::common::{json, read_msg, run, stderr};

const LIMIT: Duration = Duration::from_secs(60);

/// Checks a result's probes: a baseline and a load with replies, and every interval with its
/// own probes (the omitted ones included).
fn check_probes(doc: &Value, what: &str) {
    let p = &doc["probe"];
    assert!(p.is_object(), "{what}: no probe figures: {doc}");
    // A TCP probe whose first request came with its hello once lost it and stalled here.
    assert!(p["error"].is_null(), "{what}: the probes failed: {p}");
    let idle = p["idle"]["replies"].as_u64().unwrap_or(0);
    let loaded = p["loaded"]["replies"].as_u64().unwrap_or(0);
    // 20 a second: 1 s of baseline and 2 s of load, less a few for a loaded machine.
    assert!(idle >= 10, "{what}: idle replies {idle}: {p}");
    assert!(loaded >= 20, "{what}: loaded replies {loaded}: {p}");
    assert!(
        p["idle"]["rtt"]["p50_us"].as_f64().unwrap_or(0.0) > 0.0,
        "{what}"
    );
    let inc = p["increase"]["p50_us"].as_f64().unwrap_or(f64::NAN);
    let want = p["loaded"]["rtt"]["p50_us"].as_f64().unwrap_or(0.0)
        - p["idle"]["rtt"]["p50_us"].as_f64().unwrap_or(0.0);
    assert!(
        (inc - want).abs() < 1e-6,
        "{what}: increase {inc} != {want}"
    );
    let intervals = doc["intervals"].as_array().cloned().unwrap_or_default();
    assert!(!intervals.is_empty(), "{what}");
    let with: u64 = intervals
        .iter()
        .filter_map(|i| i["probe"]["replies"].as_u64())
        .sum();
    assert!(
        intervals.iter().all(|i| i["probe"].is_object()),
        "{what}: an interval without probes"
    );
    assert!(with >= loaded, "{what}: intervals {with} < loaded {loaded}");
}

#[test]
fn probes_run_in_every_direction_and_transport() {
    let base = [
        "-t",
        "2",
        "-i",
        "0.5",
        "--latency-probe-baseline",
        "1s",
        "--json",
    ];
    let cases: &[&[&str]] = &[
        &["tcp", "--latency-probe"],
        &["tcp", "-R", "-P", "2", "--latency-probe", "30"],
        &[
            "tcp",
            "--bidir",
            "--latency-probe",
            "--latency-probe-proto",
            "tcp",
        ],
        &["udp", "-b", "50M", "--latency-probe"],
        &[
            "udp",
            "-b",
            "50M",
            "--bidir",
            "--latency-probe-proto",
            "tcp",
            "--latency-probe",
        ],
    ];
    for case in cases {
        let mut args = case.to_vec();
        args.extend(base);
        let o = run(&args, LIMIT);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let doc = json(&o);
        check_probes(&doc, &args.join(" "));
        let proto = if case.contains(&"tcp") && case.contains(&"--latency-probe-proto") {
            "tcp"
        } else {
            "udp"
        };
        assert_eq!(doc["probe"]["transport"], proto, "{args:?}");
        assert_eq!(doc["spec"]["latency_probe"]["transport"], proto, "{args:?}");
    }
}

#[test]
fn without_the_flag_there_are_no_probe_fields() {
    let o = run(&["tcp", "-t", "1", "-i", "0.5", "--json"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = json(&o);
    assert!(doc.get("probe").is_none(), "{doc}");
    assert!(doc["spec"].get("latency_probe").is_none());
    assert!(doc["intervals"][0].get("probe").is_none());
}

#[test]
fn text_shows_an_rtt_line_per_interval_and_the_increase() {
    let o = run(
        &[
            "tcp",
            "-t",
            "2",
            "--latency-probe",
            "--latency-probe-baseline",
            "1s",
        ],
        LIMIT,
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.lines().filter(|l| l.starts_with("[RTT]")).count() >= 2,
        "{out}"
    );
    assert!(out.contains("increase under load"), "{out}");
    // The headline still ends the output.
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("received"), "{last}");
}

#[test]
fn bad_probe_flags_are_refused_by_name() {
    for (args, needle) in [
        (
            vec!["tcp", "--latency-probe", "5"],
            "--latency-probe must be between 10 and 100",
        ),
        (
            vec!["tcp", "--latency-probe", "--latency-probe-baseline", "30s"],
            "--latency-probe-baseline must be between 0.5 and 10 s",
        ),
        (
            vec!["tcp", "--latency-probe", "--iperf3"],
            "--latency-probe needs a hakaru server",
        ),
        (
            vec!["udp", "--latency-probe", "--find-max"],
            "--latency-probe cannot be used with --find-max",
        ),
    ] {
        let o = run(&args, LIMIT);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} ran");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_server_that_predates_probes_is_named_not_waited_for() {
    // A server of before the probes: it accepts the request (ignoring the field it does not
    // know) and names no probe flow.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let fake = std::thread::spawn(move || {
        let (mut ctl, _) = l.accept().expect("accept");
        let mut dec = Decoder::new();
        let wait = Duration::from_secs(10);
        assert!(matches!(
            read_msg(&mut ctl, &mut dec, wait),
            Some(Message::Hello { .. })
        ));
        ctl.write_all(&opening(&Message::Welcome {
            protocol: 1,
            software: "hakaru 0.0.1".into(),
            unix_time: None,
            host: None,
            auth: None,
            os: None,
        }))
        .expect("welcome");
        assert!(matches!(
            read_msg(&mut ctl, &mut dec, wait),
            Some(Message::TestRequest { .. })
        ));
        let accepted = Message::Accepted {
            test_id: 1,
            token: "00".repeat(16),
            probe_flow: None,
        };
        ctl.write_all(&accepted.encode()).expect("accepted");
        // The client tells why before it closes.
        read_msg(&mut ctl, &mut dec, wait)
    });
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--latency-probe",
        ],
        Duration::from_secs(30),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("does not run latency probes (--latency-probe)"),
        "{err}"
    );
    let told = fake.join().expect("fake server");
    assert!(
        matches!(&told, Some(Message::Error { message }) if message.contains("--latency-probe")),
        "{told:?}"
    );
}
