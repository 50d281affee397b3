//! `udp --find-max` against links whose capacity is known: tbf-shaped veths (the search must
//! land within 3 % of the shaped rate converted to payload) and a path that drops 1 % at
//! random whatever the rate (no rate can meet a 0.5 % target). Also on loopback: the trial
//! bound and the ramp, without timing anything.

use std::time::Duration;

use serde_json::Value;

use std::process::Command;

use super::common::{bin, json, num, run, run_cmd, stderr, ServerProc};
use super::netns_bridge::Bridge;
use super::netns_link::{Link, Shaping};

/// UDP payload per datagram, and what tbf charges for it: + 8 UDP + 20 IPv4 + 14 Ethernet.
const PAYLOAD: f64 = 1472.0;
const FRAME: f64 = 1514.0;

fn search(link: &Link) -> Value {
    let server = link.start_server();
    let port = server.port_s();
    let args = [
        "udp",
        &link.server_ip,
        "-p",
        &port,
        "--find-max",
        "--loss",
        "0.5",
        "--trial",
        "3",
        "-O",
        "1",
        "--json",
    ];
    link.client_json(&args, Duration::from_secs(400))
}

/// The search narrows: once it bisects, every trial's bracket is no wider than the last.
fn assert_narrows(doc: &Value) {
    let trials = doc["trials"].as_array().expect("trials");
    let mut last = f64::INFINITY;
    for t in trials.iter().filter(|t| t["phase"] == "search") {
        let w = num(t, "/miss_so_far") - num(t, "/best_so_far");
        assert!(w <= last + 1e-6, "the bracket widened: {trials:?}");
        last = w;
    }
    assert!(last.is_finite(), "no bisection happened: {trials:?}");
    assert!(trials.len() <= 44, "{} trials", trials.len());
}

/// The bottleneck must not be on the sender's own interface (a qdisc there holds the sender
/// back instead of dropping): client and server hang off a bridge, and the bridge's port
/// towards the server is shaped, as a slower link further along the path would be.
#[test]
fn find_max_lands_on_the_shaped_rate() {
    for (tc, bps) in [("80mbit", 80e6), ("300mbit", 300e6)] {
        let Some(b) = Bridge::setup(2, &[("tc", "iproute2")]) else {
            return;
        };
        b.shape_to(0, tc);
        let (rx, tx) = (&b.members[0], &b.members[1]);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &rx.ns, bin()]);
        let server = ServerProc::start_with(cmd, &rx.ip, &[]);
        let port = server.port_s();
        let steal = super::netns_link::StealWatch::start();
        let o = run_cmd(
            Command::new("ip")
                .args(["netns", "exec", &tx.ns, bin()])
                .args(["udp", &rx.ip, "-p", &port, "--find-max", "--loss", "0.5"])
                .args(["--trial", "3", "-O", "1", "--json"]),
            Duration::from_secs(400),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let doc = json(&o);
        let expected = bps * PAYLOAD / FRAME;
        let best = num(&doc, "/best");
        eprintln!(
            "find-max on {tc}: best {best:.0} bit/s payload, expected {expected:.0} ({:+.2} %), {} trials, {}",
            (best / expected - 1.0) * 100.0,
            doc["trials"].as_array().map_or(0, Vec::len),
            doc["outcome"]
        );
        if steal.spoiled(&format!("find_max_lands_on_the_shaped_rate at {tc}")) {
            continue;
        }
        assert!(
            (best / expected - 1.0).abs() <= 0.03,
            "{tc}: best {best:.0} bit/s, expected {expected:.0}: {doc}"
        );
        assert!(doc["first_miss_per_flow"].as_f64().unwrap() > best);
        assert_eq!(doc["sender_limited"], false);
        assert_narrows(&doc);
    }
}

#[test]
fn find_max_says_when_no_rate_meets_the_target() {
    let Some(link) = Link::setup(&[("nft", "nftables")], Shaping::NONE) else {
        return;
    };
    link.segment_client_gso();
    link.must_in_server(&["nft", "add", "table", "inet", "hakaru_fm"]);
    link.must_in_server(&[
        "nft",
        "add",
        "chain",
        "inet",
        "hakaru_fm",
        "input",
        "{ type filter hook input priority 0; policy accept; }",
    ]);
    // 1 % of the data datagrams (payload 1472: UDP length 1480), at random, at any rate.
    let rule = "udp length 1480 numgen random mod 1000 < 10 counter drop";
    let mut argv = vec!["nft", "add", "rule", "inet", "hakaru_fm", "input"];
    argv.extend(rule.split_whitespace());
    link.must_in_server(&argv);
    let doc = search(&link);
    assert!(doc["best"].is_null(), "{doc}");
    let outcome = doc["outcome"].as_str().unwrap_or_default();
    assert!(outcome.contains("no rate met the target"), "{outcome}");
    // nft dropped 1 % of every trial's datagrams. A trial at the floor sends only enough to
    // measure the 0.5 % target (2,000 datagrams in 3 s), where chance alone reads 0.5 % or less
    // about one time in a hundred; so each trial lost something and under 2 %, and all of
    // them together (weighted by datagrams sent, the trials being equally long) about 1 %.
    let trials = doc["trials"].as_array().unwrap();
    let (mut lost, mut sent) = (0.0, 0.0);
    for t in trials {
        let loss = num(t, "/loss_percent");
        assert!(loss > 0.0 && loss < 2.0, "{t}");
        lost += loss * num(t, "/sent_pps");
        sent += num(t, "/sent_pps");
    }
    let overall = lost / sent;
    assert!(
        overall > 0.5 && overall < 2.0,
        "{overall} % over {trials:?}"
    );
}

#[test]
fn find_max_on_loopback_stays_within_its_bound() {
    let o = run(
        &["pps", "--find-max", "--trial", "0.3", "-O", "0.1", "--json"],
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(doc["test"], "find_max");
    assert_eq!(doc["kind"], "pps");
    let trials = doc["trials"].as_array().unwrap();
    assert!(!trials.is_empty() && trials.len() <= 44, "{}", trials.len());
    // The ramp doubles from 10000 datagrams/s, or from the lowest rate that can measure the
    // 0.1 % target in 0.3 s if that is higher: 10 000 datagrams / 0.3 s = 33 333/s.
    let ramp: Vec<f64> = trials
        .iter()
        .filter(|t| t["phase"] == "ramp")
        .map(|t| num(t, "/asked_per_flow"))
        .collect();
    assert!((ramp[0] - 10_000.0 / 0.3).abs() < 1.0, "{ramp:?}");
    assert!(
        trials
            .iter()
            .all(|t| num(t, "/asked_per_flow") >= ramp[0] - 1.0),
        "no trial below the floor"
    );
    assert!(ramp.windows(2).all(|w| w[1] == w[0] * 2.0), "{ramp:?}");
    assert!(!doc["outcome"].as_str().unwrap_or_default().is_empty());
    // A best rate, when there is one, met the target in its trial.
    if let Some(t) = doc["best_trial"].as_u64() {
        let best = &trials[t as usize - 1];
        assert_eq!(best["met"], true);
        assert!(num(best, "/loss_percent") <= 0.1);
    }
}

#[test]
fn find_max_results_match_their_schema() {
    let o = run(
        &[
            "udp",
            "--find-max",
            "--trial",
            "0.2",
            "-O",
            "0.1",
            "-b",
            "1M",
            "--json",
        ],
        Duration::from_secs(300),
    );
    // The rate is the search's to choose: -b with --find-max is refused.
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(
        &["udp", "--find-max", "--trial", "0.2", "-O", "0.1", "--json"],
        Duration::from_secs(300),
    );
    assert!(o.status.success());
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../docs/schema/find-max.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
}
