//! Issue 32 item 4: a stock iperf3 3.21 client that skips the receive copy (`--skip-rx-copy`)
//! or asks for MPTCP (`-m`) against `hakaru server`, and hakaru's own `tcp --mptcp`.
//!
//! iperf3 3.21 is built by `.ci/run` (`../shared/peers/build.sh iperf3`, into
//! /opt/hakaru-peers/iperf3): Debian's 3.12 has neither option. What the kernel did is checked
//! apart from what hakaru says, with the MPTCP counters of a namespace of the test's own
//! (`MPTcpExt` in /proc/net/netstat, which `nstat` shows).

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::common::{peer, run_cmd, stderr, ServerProc};
use super::netns_link::{must, Link, Shaping};

/// Where `.ci/run` builds iperf3 3.21.
const IPERF3_321: &str = "/opt/hakaru-peers/iperf3/bin/iperf3";
const LIMIT: Duration = Duration::from_secs(40);
const CI_RUN: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run"));

/// True when iperf3 3.21 is there (under HAKARU_TEST_PEERS=required its absence fails).
fn iperf3_321() -> bool {
    assert!(
        CI_RUN.contains("build.sh iperf3"),
        ".ci/run must build iperf3 3.21 (../shared/peers/build.sh iperf3)"
    );
    peer(IPERF3_321, "iperf3")
}

/// iperf3's `-J` document, or a panic naming what it printed.
fn doc(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 -J output is not JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

fn assert_ok(o: &Output, v: &Value) {
    assert!(
        o.status.success() && v.get("error").is_none(),
        "iperf3 failed ({:?}): {}\n{}",
        o.status,
        v.get("error").unwrap_or(&Value::Null),
        stderr(o)
    );
}

/// The server's two log lines of a finished iperf3 test: how it began and how it ended.
fn test_lines(srv: &ServerProc) -> (String, String) {
    let begin = srv
        .wait_log("iperf3 test", Duration::from_secs(15))
        .expect("the server logs the iperf3 test");
    let end = srv
        .wait_log("finished after", Duration::from_secs(15))
        .expect("the server logs the end of the iperf3 test");
    (begin, end)
}

/// The number after `key` in a log line.
fn count_after(line: &str, key: &str) -> u64 {
    line.split(key)
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no '{key}' count in {line}"))
}

fn sent_by_client(v: &Value) -> u64 {
    v.pointer("/end/sum_sent/bytes")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no end.sum_sent.bytes in {v}"))
}

#[test]
fn skip_rx_copy_client_is_received_with_msg_trunc() {
    if !iperf3_321() {
        return;
    }
    for skip in [true, false] {
        let srv = ServerProc::start(&[]);
        let mut cmd = Command::new(IPERF3_321);
        cmd.args(["-c", "127.0.0.1", "-p", &srv.port_s(), "-J", "-t", "1"])
            .arg("--get-server-output");
        if skip {
            cmd.arg("--skip-rx-copy");
        }
        let o = run_cmd(&mut cmd, LIMIT);
        let v = doc(&o);
        assert_ok(&o, &v);
        let (begin, end) = test_lines(&srv);
        let output = v["server_output_text"].as_str().unwrap_or_default();
        let says = |s: &str| s.contains("MSG_TRUNC");
        // The engine reports how it received (recv_mode), and the log and output say it.
        assert_eq!(says(&begin), skip, "{begin}");
        assert_eq!(says(&end), skip, "{end}");
        assert_eq!(says(output), skip, "{output}");
        if skip {
            assert!(begin.contains("--skip-rx-copy"), "{begin}");
            assert!(output.contains("hakaru: the server received with MSG_TRUNC"));
        }
        // Every byte the client sent was counted although none was copied.
        let (got, sent) = (count_after(&end, "received "), sent_by_client(&v));
        assert!(
            got.abs_diff(sent) * 100 <= sent && got > 0,
            "server counted {got} bytes, the client sent {sent}"
        );
    }
}

/// The MPTCP counters (`MPTcpExt` of /proc/net/netstat) of a namespace, by name.
fn mptcp_counters(link: &Link) -> std::collections::BTreeMap<String, u64> {
    let o = link.must_in_server(&["cat", "/proc/net/netstat"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("MPTcpExt:"))
        .collect();
    let [names, values] = rows.as_slice() else {
        panic!("no MPTcpExt counters in /proc/net/netstat (a kernel without MPTCP?):\n{text}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .map(|(n, v)| (n.to_string(), v.parse().unwrap_or(0)))
        .collect()
}

/// How much each counter grew between two readings.
fn grew(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
    name: &str,
) -> u64 {
    let get = |m: &std::collections::BTreeMap<String, u64>| m.get(name).copied().unwrap_or(0);
    get(after).saturating_sub(get(before))
}

fn plain_link() -> Option<Link> {
    Link::setup(
        &[],
        Shaping {
            client: None,
            server: None,
        },
    )
}

#[test]
fn iperf3_mptcp_client_is_accepted_over_mptcp() {
    if !iperf3_321() {
        return;
    }
    let Some(link) = plain_link() else { return };
    let srv = link.start_server();
    assert!(
        srv.wait_log("takes MPTCP connections", Duration::from_secs(5))
            .is_some(),
        "the server's listener is not an MPTCP one here"
    );
    for mptcp in [true, false] {
        let before = mptcp_counters(&link);
        let port = srv.port_s();
        let mut argv = vec![IPERF3_321, "-c", &link.server_ip, "-p", &port, "-J"];
        argv.extend(["-t", "1", "-P", "2"]);
        if mptcp {
            argv.push("-m");
        }
        let o = link.in_client(&argv, LIMIT);
        let v = doc(&o);
        assert_ok(&o, &v);
        let (_, end) = test_lines(&srv);
        let after = mptcp_counters(&link);
        // The kernel's own word: two MP_CAPABLE SYNs reached the server's namespace (the data
        // streams; iperf3's control connection is plain TCP), and none fell back.
        let syns = grew(&before, &after, "MPCapableSYNRX");
        assert_eq!(syns, if mptcp { 2 } else { 0 }, "{after:?}");
        assert_eq!(grew(&before, &after, "MPCapableFallbackACK"), 0);
        assert_eq!(
            end.contains("2 of 2 stream(s) ran MPTCP"),
            mptcp,
            "server log: {end}"
        );
        let (got, sent) = (count_after(&end, "received "), sent_by_client(&v));
        assert!(
            got.abs_diff(sent) * 100 <= sent && got > 0,
            "{got} vs {sent}"
        );
    }
}

#[test]
fn mptcp_is_refused_by_name_where_the_server_has_none() {
    if !iperf3_321() {
        return;
    }
    let Some(link) = plain_link() else { return };
    // Per namespace: MPTCP off on the server's side only.
    link.must_in_server(&["sh", "-c", "echo 0 > /proc/sys/net/mptcp/enabled"]);
    let srv = link.start_server();
    let off = "net.mptcp.enabled = 0";
    let why = srv
        .wait_log("TCP listener is plain TCP", Duration::from_secs(5))
        .expect("the server says its listener is plain TCP");
    assert!(why.contains(off), "{why}");
    let port = srv.port_s();
    // A stock client hears "unable to start stream listener"; the log says why.
    let o = link.in_client(
        &[
            IPERF3_321,
            "-c",
            &link.server_ip,
            "-p",
            &port,
            "-t",
            "1",
            "-m",
        ],
        LIMIT,
    );
    assert!(
        !o.status.success(),
        "iperf3 -m passed against a plain TCP listener"
    );
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("stream listener"), "{said}");
    let line = srv
        .wait_log("-m/--mptcp", Duration::from_secs(10))
        .expect("the server logs the refusal");
    assert!(line.contains("plain TCP") && line.contains(off), "{line}");
    // hakaru's own client is told the reason.
    let o = hakaru_in(&link, &["tcp", &link.server_ip, "-p", &port, "-t", "1"]);
    assert!(o.status.success(), "a plain TCP test fails: {}", stderr(&o));
    let o = hakaru_in(
        &link,
        &["tcp", &link.server_ip, "-p", &port, "-t", "1", "--mptcp"],
    );
    assert!(
        !o.status.success(),
        "--mptcp passed against a plain TCP listener"
    );
    assert!(
        stderr(&o).contains("MPTCP") && stderr(&o).contains(off),
        "{}",
        stderr(&o)
    );
}

/// Runs this hakaru with `args` in the client namespace.
fn hakaru_in(link: &Link, args: &[&str]) -> Output {
    let mut argv = vec![super::common::bin()];
    argv.extend_from_slice(args);
    link.in_client(&argv, LIMIT)
}

/// Adds a second client address, announced as an MPTCP subflow endpoint: every MPTCP
/// connection from the client gets a second subflow from it. Returns that address.
fn subflow_endpoint(link: &Link) -> String {
    let extra = match link.server_ip.rsplit_once('.') {
        Some((net, _)) => format!("{net}.9"),
        None => panic!("server address {}", link.server_ip),
    };
    let (cns, sns) = (link.client_ns.as_str(), link.server_ns.as_str());
    must(&[
        "-n",
        cns,
        "addr",
        "add",
        &format!("{extra}/32"),
        "dev",
        &link.client_dev,
    ]);
    must(&[
        "-n",
        sns,
        "route",
        "add",
        &format!("{extra}/32"),
        "dev",
        &link.server_dev,
    ]);
    for ns in [cns, sns] {
        must(&[
            "-n",
            ns,
            "mptcp",
            "limits",
            "set",
            "subflow",
            "2",
            "add_addr_accepted",
            "2",
        ]);
    }
    must(&[
        "-n",
        cns,
        "mptcp",
        "endpoint",
        "add",
        &extra,
        "dev",
        &link.client_dev,
        "subflow",
    ]);
    extra
}

/// The access list covers every subflow of an MPTCP connection, not only the first one that
/// `accept` saw: a flow whose connection gains a subflow from a denied address is failed and
/// its connection closed, the log naming the address. (Before, `accept` checked the first
/// subflow alone, and a denied address joined any connection opened from an allowed one.)
#[test]
fn a_subflow_from_a_denied_address_closes_its_connection() {
    let Some(link) = plain_link() else { return };
    let extra = subflow_endpoint(&link);
    let srv = link.start_server_with(&["--deny", &format!("{extra}/32")]);
    let port = srv.port_s();
    let o = hakaru_in(
        &link,
        &[
            "tcp",
            &link.server_ip,
            "-p",
            &port,
            "-t",
            "4",
            "--mptcp",
            "-i",
            "0",
        ],
    );
    let line = srv.wait_log("an MPTCP subflow joined from", Duration::from_secs(15));
    eprintln!("client: {:?} {}\nserver: {line:?}", o.status, stderr(&o));
    let line = line.expect("the server names the denied subflow");
    assert!(line.contains(&extra), "{line}");
    assert!(
        !o.status.success(),
        "the client's test went on over a denied subflow"
    );
}

#[test]
fn tcp_mptcp_reports_mptcp_and_its_subflows() {
    let Some(link) = plain_link() else { return };
    // A second client address announced as a subflow endpoint: each connection gets a second
    // subflow from it, so the count is checked above 1 too.
    subflow_endpoint(&link);
    let srv = link.start_server();
    let port = srv.port_s();
    for mptcp in [true, false] {
        let before = mptcp_counters(&link);
        let mut args = vec!["tcp", &link.server_ip, "-p", &port, "-t", "2", "-P", "2"];
        args.extend(["--json", "-i", "0"]);
        if mptcp {
            args.push("--mptcp");
        }
        let v = link.client_json(&args, LIMIT);
        let after = mptcp_counters(&link);
        assert_eq!(v["spec"]["mptcp"].as_bool().unwrap_or(false), mptcp);
        let flows = v["flows"].as_array().expect("flows");
        assert_eq!(flows.len(), 2);
        for f in flows {
            if mptcp {
                assert_eq!(f["mptcp"]["active"], Value::Bool(true), "{f}");
                assert_eq!(f["mptcp"]["subflows"].as_u64(), Some(2), "{f}");
            } else {
                assert!(f.get("mptcp").is_none(), "{f}");
            }
        }
        // The kernel agrees: two MPTCP connections (the control one is TCP), each joined
        // by one more subflow.
        let want = if mptcp { 2 } else { 0 };
        assert_eq!(grew(&before, &after, "MPCapableSYNRX"), want, "{after:?}");
        assert_eq!(grew(&before, &after, "MPJoinSynRx"), want, "{after:?}");
    }
}
