//! Truth for the latency probes (`--latency-probe`): a path whose bottleneck is a tbf with a
//! known rate and queue (`limit` bytes). A loss-based congestion control (`-C cubic`, sixteen
//! flows, so their back-offs barely drain it) keeps the queue full, which adds limit /
//! rate to every probe that waits in it: 250 KB at 20 Mbit/s is 100 ms. The probes under load
//! must read that within 10 % (plus the idle round trip); with a small queue they must read
//! low; and the idle baseline must read what `hakaru latency` reads on the same path.
//! Needs root and tc; skips with a printed reason otherwise.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::common::{bin, json, run_cmd, stderr, ServerProc};
use super::netns_bridge::Bridge;

/// The bottleneck's rate, bits per second, and as tc spells it.
const RATE_BPS: f64 = 20e6;
const RATE: &str = "20mbit";
/// Every run is bounded: a few seconds of test inside this.
const LIMIT: Duration = Duration::from_secs(40);

/// A server host and a client host on a switch whose port toward the server is the bottleneck:
/// a tbf with a queue of `limit` bytes. It is a box in the middle, as a router is: a tbf on the
/// sender's own interface would hold far less, since TCP keeps each socket's bytes in its
/// host's qdisc small (TCP small queues).
struct Path {
    bridge: Bridge,
    server: ServerProc,
}

impl Path {
    fn new(limit: u32) -> Option<Path> {
        let bridge = Bridge::setup(2, &[("tc", "iproute2")])?;
        bridge.queue_to(0, RATE, limit);
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &bridge.members[0].ns, bin()]);
        let server = ServerProc::start_with(cmd, &bridge.members[0].ip, &[]);
        Some(Path { bridge, server })
    }

    /// Runs hakaru on the client host and returns its JSON.
    fn client(&self, args: &[&str]) -> Value {
        let (ip, port) = (&self.bridge.members[0].ip, self.server.port_s());
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &self.bridge.members[1].ns, bin()])
            .arg(args[0])
            .args([ip.as_str(), "-p", &port])
            .args(&args[1..]);
        let o = run_cmd(&mut cmd, LIMIT);
        assert!(o.status.success(), "hakaru {args:?}: {}", stderr(&o));
        json(&o)
    }

    /// A bulk TCP upload with cubic and the probes: (idle p50, loaded p50) in microseconds,
    /// and the result.
    fn probed_upload(&self) -> (f64, f64, Value) {
        let doc = self.client(&[
            "tcp",
            "-C",
            "cubic",
            "-P",
            "16",
            "-O",
            "2",
            "-t",
            "4",
            "--latency-probe",
            "--latency-probe-baseline",
            "2s",
            "--json",
        ]);
        let p = &doc["probe"];
        let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        (
            f(&p["idle"]["rtt"]["p50_us"]),
            f(&p["loaded"]["rtt"]["p50_us"]),
            doc.clone(),
        )
    }
}

#[test]
fn probes_under_load_read_the_queue_delay_of_a_full_tbf() {
    let Some(path) = Path::new(250_000) else {
        return;
    };
    let (idle, loaded, doc) = path.probed_upload();
    let queue_us = 250_000.0 * 8.0 / RATE_BPS * 1e6;
    let want = idle + queue_us;
    eprintln!("probes: idle p50 {idle:.0} us, under load p50 {loaded:.0} us, want {want:.0} us");
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
    let Some(path) = Path::new(25_000) else {
        return;
    };
    let (idle, loaded, doc) = path.probed_upload();
    assert!(
        loaded <= idle + 10_000.0 * 1.10 + 2_000.0,
        "probe p50 under load {loaded:.0} us behind a 10 ms queue (idle {idle:.0} us): {}",
        doc["probe"]
    );
    assert!(loaded > idle, "the queue added nothing: {}", doc["probe"]);
}

#[test]
fn the_idle_baseline_reads_what_hakaru_latency_reads() {
    let Some(path) = Path::new(250_000) else {
        return;
    };
    // The probes' own schedule and size: UDP, open loop at 20 a second, 64 bytes.
    let lat = path.client(&[
        "latency", "--udp", "--rate", "20", "-l", "64", "-t", "2", "--warmup", "0", "--json",
    ]);
    let (idle, _, doc) = path.probed_upload();
    let want: f64 = lat["latency"]["rtt"]["p50_us"].as_f64().unwrap_or(f64::NAN);
    // Tens of microseconds on a veth: scheduling noise is most of it, so a relative and an
    // absolute bound; a probe that waited in the queue (milliseconds) fails both.
    assert!(
        (idle - want).abs() <= (0.5 * want).max(150.0),
        "idle baseline p50 {idle:.0} us, hakaru latency p50 {want:.0} us: {}",
        doc["probe"]["idle"]
    );
}
