//! Truth for the latency probes (`--latency-probe`): a path whose bottleneck is a tbf with a
//! known rate and queue (`limit` bytes). A loss-based congestion control (`-C cubic`, four
//! flows, so one flow's back-off barely drains it) keeps the queue full, which adds limit /
//! rate to every probe that waits in it: 250 KB at 20 Mbit/s is 100 ms. The probes under load
//! must read that within 10 % (plus the idle round trip); with a small queue they must read
//! low; and the idle baseline must read what `hakaru latency` reads on the same path.
//! Needs root and tc; skips with a printed reason otherwise.

use std::time::Duration;

use serde_json::Value;

use super::common::ServerProc;
use super::netns_link::{Link, Shaping};

/// The bottleneck's rate, bits per second, and as tc spells it.
const RATE_BPS: f64 = 20e6;
const RATE: &str = "20mbit";
/// Every run is bounded: a few seconds of test inside this.
const LIMIT: Duration = Duration::from_secs(40);

/// A link whose forward bottleneck (the client's egress) is a tbf with a queue of `limit`
/// bytes, and a server on it.
fn shaped(limit: &str) -> Option<(Link, ServerProc)> {
    let link = Link::setup(&[("tc", "iproute2")], Shaping::NONE)?;
    // Single packets on the wire, as a real NIC sends them: the queue counts wire bytes.
    link.segment_client_gso();
    let o = link.in_client(
        &[
            "tc",
            "qdisc",
            "replace",
            "dev",
            &link.client_dev,
            "root",
            "tbf",
            "rate",
            RATE,
            "burst",
            "16kb",
            "limit",
            limit,
        ],
        Duration::from_secs(10),
    );
    assert!(
        o.status.success(),
        "tc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let server = link.start_server();
    Some((link, server))
}

/// A bulk TCP upload with cubic and the probes: (idle p50, loaded p50), microseconds.
fn probed_upload(link: &Link, server: &ServerProc) -> (f64, f64, Value) {
    let doc = link.client_json(
        &[
            "tcp",
            &link.server_ip,
            "-p",
            &server.port_s(),
            "-C",
            "cubic",
            "-P",
            "4",
            "-O",
            "2",
            "-t",
            "4",
            "--latency-probe",
            "--latency-probe-baseline",
            "2s",
            "--json",
        ],
        LIMIT,
    );
    let p = &doc["probe"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    (
        f(&p["idle"]["rtt"]["p50_us"]),
        f(&p["loaded"]["rtt"]["p50_us"]),
        doc.clone(),
    )
}

#[test]
fn probes_under_load_read_the_queue_delay_of_a_full_tbf() {
    let Some((link, server)) = shaped("250000") else {
        return;
    };
    let (idle, loaded, doc) = probed_upload(&link, &server);
    let queue_us = 250_000.0 * 8.0 / RATE_BPS * 1e6;
    let want = idle + queue_us;
    assert!(
        (loaded - want).abs() <= 0.10 * queue_us,
        "probe p50 under load {loaded:.0} us, want {want:.0} us (idle {idle:.0} + queue \
         {queue_us:.0}) within 10 %: {}",
        doc["probe"]
    );
    // The throughput is the bottleneck's: the probes did not take its place.
    let bps = doc["totals"][0]["receiver"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(bps > 0.85 * RATE_BPS, "{bps} bit/s through a {RATE} link");
}

#[test]
fn probes_under_load_read_low_behind_a_small_queue() {
    // 25 KB at 20 Mbit/s: at most 10 ms of queue.
    let Some((link, server)) = shaped("25000") else {
        return;
    };
    let (idle, loaded, doc) = probed_upload(&link, &server);
    assert!(
        loaded <= idle + 10_000.0 * 1.10 + 2_000.0,
        "probe p50 under load {loaded:.0} us behind a 10 ms queue (idle {idle:.0} us): {}",
        doc["probe"]
    );
    assert!(loaded > idle, "the queue added nothing: {}", doc["probe"]);
}

#[test]
fn the_idle_baseline_reads_what_hakaru_latency_reads() {
    let Some((link, server)) = shaped("250000") else {
        return;
    };
    let port = server.port_s();
    // The probes' own schedule and size: UDP, open loop at 20 a second, 64 bytes.
    let lat = link.client_json(
        &[
            "latency",
            &link.server_ip,
            "-p",
            &port,
            "--udp",
            "--rate",
            "20",
            "-l",
            "64",
            "-t",
            "2",
            "--warmup",
            "0",
            "--json",
        ],
        LIMIT,
    );
    let (idle, _, doc) = probed_upload(&link, &server);
    let want = lat["latency"]["rtt"]["p50_us"].as_f64().unwrap_or(f64::NAN);
    // Tens of microseconds on a veth: scheduling noise is most of it, so a relative and an
    // absolute bound; a probe that waited in the queue (milliseconds) fails both.
    assert!(
        (idle - want).abs() <= (0.5 * want).max(150.0),
        "idle baseline p50 {idle:.0} us, hakaru latency p50 {want:.0} us: {}",
        doc["probe"]["idle"]
    );
}
