//! RFC 9946 through a shaped link, with the truth from the kernel: the stock OB-UDPST client's
//! search (algorithm B, no fixed row) against `hakaru server --udpst-port` and against a stock
//! `udpst` server on the same link, both directions, and its algorithm C search against
//! hakaru's server. tbf on each end's egress at 100 Mbit/s
//! counts whole frames (the 14-byte Ethernet header included), so a datagram of the table's
//! default 1222-byte payload (1250 bytes at L3) gives 100 × 1250 / 1264 ≈ 98.9 Mbit/s at L3.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::common::{built_peer, compat_pass, wait_child};
use super::netns_link::{Link, Shaping, StealWatch};
use super::udpst::max_l3;

/// The shaped rate (tc's "100mbit" is 10^8 bit/s) and the truth at L3 for 1250-byte packets.
const SHAPED_MBPS: f64 = 100.0;
const TRUTH_L3: f64 = SHAPED_MBPS * 1250.0 / 1264.0;

/// The stock client's search. Algorithm C doubles its way up, and a late feedback on a busy
/// machine can take it past row 1000, where the default table's jumbo datagrams cannot be
/// sent as GSO over the veth's 1500-byte MTU (the client stops with "GSO incompatible with IP
/// fragmentation"): its searches run with `-j`, whose sizes above row 1000 stay 1222 bytes.
fn search(link: &Link, udpst: &str, dir: &str, algo: &str, port: u16) -> f64 {
    let target = format!("{}:{port}", link.server_ip);
    let jumbo = if algo == "C" { "-j" } else { "" };
    let mut args = vec![udpst, dir, "-A", algo, "-t", "10", "-s", &target];
    if !jumbo.is_empty() {
        args.insert(2, jumbo);
    }
    let o = link.in_client(&args, Duration::from_secs(40));
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "udpst {dir} to {target} failed:\n{out}");
    max_l3(&out).unwrap_or_else(|| panic!("no maximum in:\n{out}"))
}

#[test]
fn udpst_search_through_a_shaped_link_reads_the_truth_against_either_server() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let Some(link) = Link::setup(&[], Shaping::both("100mbit")) else {
        return;
    };
    let udpst = udpst.to_str().expect("utf-8 path");
    let steal = StealWatch::start();
    let port = 24601u16;
    let mut srv = link.start_server_with(&["--udpst-port", &port.to_string()]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    let mut rows = Vec::new();
    for dir in ["-u", "-d"] {
        let ours = search(&link, udpst, dir, "B", port);
        let sport = port + 1;
        let stock = Command::new("ip")
            .args(["netns", "exec", &link.server_ns, udpst, "-1", "-p"])
            .arg(sport.to_string())
            .arg(&link.server_ip)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stock udpst server");
        super::udpst::wait_bound(Some(&link.server_ns), sport);
        let theirs = search(&link, udpst, dir, "B", sport);
        let _ = wait_child(stock, Duration::from_secs(10));
        eprintln!(
            "udpst {dir} through 100 Mbit/s: hakaru server {ours:.2}, stock server {theirs:.2}, \
             truth {TRUTH_L3:.2} Mbit/s (L3)"
        );
        rows.push((dir, ours, theirs));
    }
    // Algorithm C (the server's search for upstream, the client's feedback for downstream),
    // held to the truth.
    let mut algo_c = Vec::new();
    for dir in ["-u", "-d"] {
        let ours = search(&link, udpst, dir, "C", port);
        eprintln!("udpst {dir} -A C through 100 Mbit/s: hakaru server {ours:.2} Mbit/s (L3)");
        algo_c.push((dir, ours));
    }
    assert!(srv.alive(), "hakaru server died");
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    if steal.spoiled("udpst through a shaped link") {
        return;
    }
    for (dir, ours, theirs) in rows {
        assert!(
            (ours - theirs).abs() / theirs <= 0.03,
            "{dir}: {ours:.2} Mbit/s against hakaru, {theirs:.2} against a stock server (3 % allowed)"
        );
        assert!(
            (ours - TRUTH_L3).abs() / TRUTH_L3 <= 0.03,
            "{dir}: {ours:.2} Mbit/s, the shaped truth is {TRUTH_L3:.2} (3 % allowed)"
        );
        let direction = if dir == "-u" {
            "client to hakaru (upstream), 100 Mbit/s tbf: search within 3 % of truth"
        } else {
            "hakaru to client (downstream), 100 Mbit/s tbf: search within 3 % of truth"
        };
        compat_pass(
            "udpst",
            "server",
            &format!("{dir} -t 10 (algorithm B)"),
            direction,
        );
    }
    for (dir, ours) in algo_c {
        assert!(
            (ours - TRUTH_L3).abs() / TRUTH_L3 <= 0.03,
            "{dir} -A C: {ours:.2} Mbit/s, the shaped truth is {TRUTH_L3:.2} (3 % allowed)"
        );
        compat_pass(
            "udpst",
            "server",
            &format!("{dir} -A C -t 10 (algorithm C)"),
            "100 Mbit/s tbf: search within 3 % of truth",
        );
    }
}

/// `hakaru capacity` (algorithms B and C) through the same shaped link against a stock `udpst`
/// server, beside the stock client with the same algorithm against the same server: both
/// within 3 % of each other and of the truth, both directions.
#[test]
fn capacity_search_through_a_shaped_link_reads_what_the_stock_client_reads() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let Some(link) = Link::setup(&[], Shaping::both("100mbit")) else {
        return;
    };
    let udpst = udpst.to_str().expect("utf-8 path");
    let steal = StealWatch::start();
    let port = 24601u16;
    // A stock server refuses a client whose -j differs from its own: one without, one with.
    let stock_server = |port: u16, opts: &[&str]| {
        Stop(
            Command::new("ip")
                .args(["netns", "exec", &link.server_ns, udpst])
                .args(opts)
                .arg("-p")
                .arg(port.to_string())
                .arg(&link.server_ip)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn stock udpst server"),
        )
    };
    let stock = [stock_server(port, &[]), stock_server(port + 1, &["-j"])];
    super::udpst::wait_bound(Some(&link.server_ns), port);
    super::udpst::wait_bound(Some(&link.server_ns), port + 1);
    let mut rows = Vec::new();
    for (dir, algo) in [("-u", "b"), ("-d", "b"), ("-u", "c"), ("-d", "c")] {
        let port = if algo == "c" { port + 1 } else { port };
        let target = format!("{}:{port}", link.server_ip);
        let mut args = vec!["capacity", &target, dir, "-A", algo, "-t", "10", "-J"];
        if algo == "c" {
            args.push("-j");
        }
        let doc = link.client_json(&args, Duration::from_secs(40));
        let ours = doc
            .pointer("/udpst/max_ip_capacity_mbps")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("no udpst.max_ip_capacity_mbps in {doc}"));
        let upper = algo.to_uppercase();
        let theirs = search(&link, udpst, dir, &upper, port);
        eprintln!(
            "capacity {dir} -A {algo} through 100 Mbit/s: hakaru capacity {ours:.2}, stock client \
             {theirs:.2}, truth {TRUTH_L3:.2} Mbit/s (L3)"
        );
        rows.push((dir, upper, ours, theirs));
    }
    drop(stock);
    if steal.spoiled("capacity through a shaped link") {
        return;
    }
    for (dir, algo, ours, theirs) in rows {
        assert!(
            (ours - theirs).abs() / theirs <= 0.03,
            "{dir} -A {algo}: hakaru capacity {ours:.2} Mbit/s, the stock client {theirs:.2} (3 % allowed)"
        );
        assert!(
            (ours - TRUTH_L3).abs() / TRUTH_L3 <= 0.03,
            "{dir}: {ours:.2} Mbit/s, the shaped truth is {TRUTH_L3:.2} (3 % allowed)"
        );
        let direction = if dir == "-u" {
            "hakaru to udpst (upstream), 100 Mbit/s tbf: within 3 % of the stock client"
        } else {
            "udpst to hakaru (downstream), 100 Mbit/s tbf: within 3 % of the stock client"
        };
        compat_pass(
            "udpst",
            "client",
            &format!("capacity {dir} -A {algo} -t 10 (algorithm {algo})"),
            direction,
        );
    }
}

/// A stock server stopped by its PID however the test ends (`ip netns exec` execs it, so the
/// child's PID is the server's).
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
