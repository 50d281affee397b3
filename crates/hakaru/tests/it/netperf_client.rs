//! `hakaru ... --netperf` against a stock netserver 2.7.1 (built by .ci/run into
//! /opt/hakaru-peers/netperf) on loopback: every test kind, each asserting that hakaru's own
//! counts and netserver's reported ones agree, and the errors a user can meet.

use std::time::Duration;

use crate::common::{compat_pass, count, json, run, stderr};
use crate::netperf::{netperf_bin, Netserver};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs hakaru against the netserver with `--netperf -J`; the JSON result.
fn hakaru_json(ns: &Netserver, args: &[&str]) -> serde_json::Value {
    let port = ns.port.to_string();
    let mut all = args.to_vec();
    all.extend(["127.0.0.1", "--netperf", "-p", &port, "-J"]);
    let o = run(&all, LIMIT);
    assert!(o.status.success(), "hakaru {all:?} failed:\n{}", stderr(&o));
    let v = json(&o);
    assert_eq!(
        v.pointer("/server_end/env/software")
            .and_then(|s| s.as_str()),
        Some("netserver"),
        "{v}"
    );
    v
}

/// Every flow: what netserver counted equals what this end counted (TCP delivers all of it
/// before netperf's end: the FIN, or netserver's close for TCP_MAERTS). `slack`: a sending
/// netserver does not count the send its timer cut short, so this end may have read up to
/// one send more.
fn tcp_flows_agree(v: &serde_json::Value, flows: usize, slack: u64) -> u64 {
    let f = v["flows"].as_array().expect("flows");
    assert_eq!(f.len(), flows, "{v}");
    let mut total = 0;
    for (i, _) in f.iter().enumerate() {
        let rcv = count(v, &format!("/flows/{i}/receiver/bytes"));
        let late = count(v, &format!("/flows/{i}/receiver/late_bytes"));
        let snd = count(v, &format!("/flows/{i}/sender/bytes"));
        assert!(snd > 0, "flow {i} moved nothing: {v}");
        assert!(
            rcv + late >= snd && rcv + late - snd <= slack,
            "flow {i}: received {} bytes, sent {snd} (slack {slack}): {v}",
            rcv + late
        );
        total += snd;
    }
    total
}

#[test]
fn tcp_stream_maerts_and_parallel_counts_agree() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    // TCP_STREAM: netserver's bytes received are hakaru's bytes sent.
    tcp_flows_agree(&hakaru_json(&ns, &["tcp", "-t", "2"]), 1, 0);
    compat_pass(
        "netperf",
        "client",
        "tcp --netperf (TCP_STREAM)",
        "client -> server",
    );
    // TCP_MAERTS: netserver's bytes sent are hakaru's bytes received.
    let v = hakaru_json(&ns, &["tcp", "-t", "2", "-R", "-l", "128K"]);
    tcp_flows_agree(&v, 1, 128 << 10);
    assert_eq!(v["flows"][0]["dir"], "down", "{v}");
    compat_pass(
        "netperf",
        "client",
        "tcp -R --netperf (TCP_MAERTS)",
        "server -> client",
    );
    // -P 2: two netperf tests side by side.
    tcp_flows_agree(&hakaru_json(&ns, &["tcp", "-t", "2", "-P", "2"]), 2, 0);
    compat_pass(
        "netperf",
        "client",
        "tcp -P 2 --netperf (2 x TCP_STREAM)",
        "client -> server",
    );
    // A count: netperf's -l -BYTES, each test its share.
    let total = tcp_flows_agree(&hakaru_json(&ns, &["tcp", "-n", "8M", "-P", "2"]), 2, 0);
    assert_eq!(total, 8 << 20);
    compat_pass(
        "netperf",
        "client",
        "tcp -n 8M -P 2 --netperf (counted)",
        "client -> server",
    );
}

/// netserver's datagrams against hakaru's: none more than were sent, and on paced loopback
/// with a big receive buffer all of them.
fn udp_agrees(v: &serde_json::Value, length: u64) {
    let sent = count(v, "/flows/0/udp/sent_datagrams");
    let got = count(v, "/flows/0/udp/received_datagrams");
    assert!(sent > 0, "{v}");
    assert!(got <= sent, "netserver received more than was sent: {v}");
    assert!(
        got * 100 >= sent * 99,
        "netserver received {got} of {sent} datagrams: {v}"
    );
    assert_eq!(count(v, "/flows/0/udp/lost"), sent - got, "{v}");
    assert_eq!(count(v, "/flows/0/receiver/bytes"), got * length, "{v}");
}

#[test]
fn udp_stream_and_pps_counts_agree() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    let v = hakaru_json(
        &ns,
        &["udp", "-t", "2", "-b", "20M", "-l", "1000", "-w", "4M"],
    );
    udp_agrees(&v, 1000);
    compat_pass(
        "netperf",
        "client",
        "udp --netperf (UDP_STREAM)",
        "client -> server",
    );
    let v = hakaru_json(
        &ns,
        &["pps", "-t", "2", "--rate", "20000", "-l", "64", "-w", "4M"],
    );
    udp_agrees(&v, 64);
    compat_pass(
        "netperf",
        "client",
        "pps --netperf (UDP_STREAM -m 64)",
        "client -> server",
    );
}

/// Round trips: netserver's transactions are hakaru's, warm-up included.
fn rr_agrees(v: &serde_json::Value, length: u64) {
    let replies = count(v, "/latency/replies");
    let warmup = count(v, "/latency/warmup_discarded");
    let lost = count(v, "/latency/lost");
    let trans = count(v, "/latency/server/transactions");
    assert!(replies > 0, "{v}");
    let ours = replies + warmup;
    assert!(
        trans.abs_diff(ours) <= lost,
        "netserver counted {trans} transactions, hakaru {ours} ({lost} lost): {v}"
    );
    assert_eq!(
        count(v, "/latency/server/bytes_received"),
        trans * length,
        "{v}"
    );
}

#[test]
fn tcp_rr_and_udp_rr_transactions_agree() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    let v = hakaru_json(&ns, &["latency", "-t", "2", "-l", "32"]);
    assert_eq!(count(&v, "/latency/lost"), 0, "{v}");
    rr_agrees(&v, 32);
    compat_pass(
        "netperf",
        "client",
        "latency --netperf (TCP_RR)",
        "both ways",
    );
    let v = hakaru_json(&ns, &["latency", "-t", "2", "-l", "32", "--udp", "-P", "2"]);
    rr_agrees(&v, 32);
    compat_pass(
        "netperf",
        "client",
        "latency --udp -P 2 --netperf (UDP_RR)",
        "both ways",
    );
}

#[test]
fn tcp_crr_with_fin_reads_to_netservers_close() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    // netserver closes each TCP_CRR connection right after its response: the client reads to
    // that close, and a netserver that did not close would fail every connection.
    let v = hakaru_json(&ns, &["connect", "-t", "2"]);
    let ours = count(&v, "/connect/connections");
    let failed = count(&v, "/connect/failed");
    let served = count(&v, "/connect/server/served");
    assert!(ours > 0, "{v}");
    assert_eq!(failed, 0, "{v}");
    assert_eq!(v["connect"]["first_close"], "server", "{v}");
    assert!(
        served >= ours,
        "netserver served {served}, hakaru completed {ours}: {v}"
    );
    compat_pass(
        "netperf",
        "client",
        "connect --netperf (TCP_CRR)",
        "both ways",
    );
}

#[test]
fn tcp_crr_connections_agree() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    let v = hakaru_json(&ns, &["connect", "-t", "2", "--rst"]);
    let ours = count(&v, "/connect/connections");
    let failed = count(&v, "/connect/failed");
    let served = count(&v, "/connect/server/served");
    assert!(ours > 0, "{v}");
    assert!(
        served >= ours && served <= ours + failed,
        "netserver served {served}, hakaru completed {ours} ({failed} failed): {v}"
    );
    compat_pass(
        "netperf",
        "client",
        "connect --rst --netperf (TCP_CRR)",
        "both ways",
    );
}

#[test]
fn errors_name_the_cause() {
    let Some(bin) = netperf_bin() else { return };
    // Nothing listening.
    let closed = crate::common::free_port().to_string();
    let o = run(
        &["tcp", "127.0.0.1", "--netperf", "-p", &closed, "-t", "1"],
        LIMIT,
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("is netserver running there"),
        "{}",
        stderr(&o)
    );
    // An option netperf cannot express, refused before any connection.
    let o = run(
        &["tcp", "127.0.0.1", "--netperf", "-p", &closed, "--bidir"],
        LIMIT,
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--bidir"), "{}", stderr(&o));
    // netserver refusing: one started with -Z closes on a client without the passphrase.
    let ns = Netserver::start_with(&bin, &["-Z", "secretword"]);
    let port = ns.port.to_string();
    let o = run(
        &["tcp", "127.0.0.1", "--netperf", "-p", &port, "-t", "1"],
        LIMIT,
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("netserver") && err.contains("before answering the test request"),
        "{err}"
    );
    // With its passphrase, the same netserver runs the test.
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "--netperf",
            "-p",
            &port,
            "-t",
            "1",
            "--netperf-passphrase",
            "secretword",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    compat_pass(
        "netperf",
        "client",
        "tcp --netperf --netperf-passphrase (netserver -Z)",
        "client -> server",
    );
}

#[test]
fn a_plan_sends_to_a_host_that_only_runs_netserver() {
    let Some(bin) = netperf_bin() else { return };
    let ns = Netserver::start(&bin);
    let s = crate::plan::Scratch::new("netserver");
    let hosts = format!(
        "[hosts.ns]\naddress = \"127.0.0.1\"\nnetserver = true\nport = {}\n\n[hosts.a]\nlocal = true\nhakaru = \"{}\"\n",
        ns.port,
        crate::common::bin()
    );
    let file = s.write(
        "plan.toml",
        &format!("{hosts}\n[[step]]\nkind = \"tcp\"\nreceivers = [\"ns\"]\nsenders = [\"a\"]\nparallel = 2\ntime = 1\n"),
    );
    let (o, doc) = crate::plan::plan_run(
        &mut crate::common::hakaru(),
        &file,
        &s.0.join("out.json"),
        LIMIT,
    );
    assert!(o.status.success(), "plan failed: {}", stderr(&o));
    assert_eq!(doc["errors"].as_array().map(Vec::len), Some(0), "{doc}");
    let client = &doc["steps"][0]["runs"][0];
    assert!(client["error"].is_null(), "{client}");
    let cmd = client["command"].to_string();
    assert!(
        cmd.contains("--netperf") && !cmd.contains("--psk-file"),
        "{cmd}"
    );
    let res = &client["result"];
    assert_eq!(res["server_end"]["env"]["software"], "netserver", "{res}");
    tcp_flows_agree(res, 2, 0);

    // What netperf cannot run against it is refused by `plan check`, as is a netserver
    // that would have to send.
    let bad = s.write(
        "bad.toml",
        &format!("{hosts}\n[[step]]\nkind = \"tcp\"\nreceivers = [\"ns\"]\nsenders = [\"a\"]\nbidir = true\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"a\"]\nsenders = [\"ns\"]\n"),
    );
    let o = run(&["plan", "check", bad.to_str().unwrap()], LIMIT);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("bidir cannot be run against one"), "{err}");
    assert!(err.contains("can only be a receiver"), "{err}");
    compat_pass(
        "netperf",
        "client",
        "hakaru plan, a netserver-only receiver (tcp -P 2)",
        "client -> server",
    );
}
