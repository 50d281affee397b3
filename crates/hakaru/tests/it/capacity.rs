//! `hakaru capacity` (the RFC 9946 / OB-UDPST client) against a stock `udpst` server and
//! against `hakaru server --udpst-port`, on loopback at a fixed sending-rate row (`-I 100`:
//! 100 Mbit/s at L3, the truth), both directions; the stock client against the same kind of
//! server is the reference figure. Then the errors: a server that refuses (wrong protocol
//! version, not enough capacity) and one that never answers.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use super::common::{built_peer, compat_pass, json, num, run, stderr, wait_child, ServerProc};
use super::udpst::{alone, best_one, best_pair, client, free_udp, max_l3, stock_server};

const LIMIT: Duration = Duration::from_secs(30);

/// `hakaru capacity` against `port`: its JSON document, or its stderr when it failed.
fn capacity(port: u16, args: &[&str]) -> Result<serde_json::Value, String> {
    let target = format!("127.0.0.1:{port}");
    let mut a = vec!["capacity", target.as_str(), "-J"];
    a.extend_from_slice(args);
    let o = run(&a, LIMIT);
    if o.status.success() {
        Ok(json(&o))
    } else {
        Err(stderr(&o))
    }
}

/// hakaru's maximum and the stock client's, each against a fresh stock server.
fn against_stock(udpst: &std::path::Path, dir: &str) -> (f64, f64) {
    let port = free_udp();
    let srv = stock_server(udpst, port);
    let doc = capacity(port, &[dir, "-t", "5", "-I", "100"]);
    let _ = wait_child(srv, Duration::from_secs(10));
    let doc = doc.unwrap_or_else(|e| panic!("hakaru capacity {dir} against stock udpst: {e}"));
    assert_eq!(
        doc["udpst"]["sub_intervals"].as_array().map(Vec::len),
        Some(5)
    );
    let ours = num(&doc, "/udpst/max_ip_capacity_mbps");
    let sport = free_udp();
    let stock = stock_server(udpst, sport);
    let (ok, out) = client(udpst, dir, sport, &["-I", "100"]);
    let _ = wait_child(stock, Duration::from_secs(10));
    assert!(ok, "stock udpst {dir} failed:\n{out}");
    (
        ours,
        max_l3(&out).unwrap_or_else(|| panic!("no maximum in:\n{out}")),
    )
}

/// Whether `hakaru capacity`'s reading agrees with the stock client's at a 100 Mbit/s row:
/// within 3 % of it, or within 3 % of the row itself (the truth on loopback). The stock client
/// paces by timers and reads under the row on a loaded machine; hakaru at the row is right
/// then, not wrong (seen in CI: hakaru 99.6-100.0 in five tries, the stock client 94.4-96.9).
fn agree(ours: f64, theirs: f64) -> bool {
    (ours - theirs).abs() / theirs < 0.03 || (ours - 100.0).abs() / 100.0 < 0.03
}

#[test]
fn capacity_matches_the_stock_client_against_a_stock_server() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let _alone = alone();
    for dir in ["-u", "-d"] {
        // Each side's best of up to five tries (`best_pair`: seen, the stock client against
        // the stock server at 73, 79 and 89 of the row's 100 Mbit/s, hakaru at 96 to 100
        // beside it, and the other way round); a real difference shows in the best readings.
        let (ours, theirs) = best_pair(
            || {
                let (ours, theirs) = against_stock(&udpst, dir);
                eprintln!("capacity {dir}: hakaru {ours} Mbit/s, stock {theirs} Mbit/s");
                (ours, theirs)
            },
            agree,
        );
        assert!(
            agree(ours, theirs),
            "{dir}: hakaru {ours} vs stock client {theirs} Mbit/s (the best of each), row 100"
        );
        assert!(
            ours <= 105.0 && ours > 50.0,
            "{dir}: {ours} Mbit/s, row 100 is 100"
        );
        let direction = if dir == "-u" {
            "hakaru to udpst (upstream)"
        } else {
            "udpst to hakaru (downstream)"
        };
        compat_pass("udpst", "client", &format!("{dir} -I 100 -t 5"), direction);
    }
}

#[test]
fn capacity_against_hakaru_server_both_directions() {
    let _alone = alone();
    let port = free_udp();
    let mut srv =
        ServerProc::start(&["--udpst-port", &port.to_string(), "--udpst-max-rate", "200"]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    for dir in ["-u", "-d"] {
        // The best of up to five tries (`best_one`); the shape is checked on every try.
        let max = best_one(
            || {
                let doc = capacity(port, &[dir, "-t", "5", "-I", "100"])
                    .unwrap_or_else(|e| panic!("capacity {dir} against hakaru: {e}"));
                let x = &doc["udpst"];
                let max = num(&doc, "/udpst/max_ip_capacity_mbps");
                eprintln!("capacity {dir} against hakaru server: {max} Mbit/s");
                assert!(num(&doc, "/udpst/max_l2_mbps") > max);
                assert!(num(&doc, "/udpst/max_l1_mbps") > num(&doc, "/udpst/max_l2_mbps"));
                assert_eq!(x["sub_intervals"].as_array().map(Vec::len), Some(5));
                assert_eq!(x["direction"], if dir == "-u" { "up" } else { "down" });
                assert_eq!(doc["test"], "capacity");
                max
            },
            |max| (max - 100.0).abs() < 5.0,
        );
        assert!(
            max <= 105.0 && max > 50.0,
            "{dir}: {max} Mbit/s, row 100 is 100"
        );
    }
    // The search (algorithm B) under the server's 200 Mbit/s cap.
    let doc = capacity(port, &["-u", "-t", "5"]).unwrap_or_else(|e| panic!("search: {e}"));
    let max = num(&doc, "/udpst/max_ip_capacity_mbps");
    assert!(
        max > 10.0 && max < 205.0,
        "search under a 200 Mbit/s cap gave {max}"
    );
    // More than the server allows: its refusal, in words.
    let err = capacity(port, &["-d", "-t", "5", "-B", "500"]).unwrap_err();
    assert!(
        err.contains("exceeds the server's available capacity"),
        "{err}"
    );
    assert!(srv.alive());
    let _ = srv.child.kill();
    let _ = srv.child.wait();
}

#[test]
fn capacity_fails_clearly_on_a_refusal_or_silence() {
    // A server that refuses the protocol version (it speaks 21).
    let fake = UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let port = fake.local_addr().unwrap().port();
    let answer = std::thread::spawn(move || {
        let mut b = [0u8; 2048];
        let (n, from) = fake.recv_from(&mut b).expect("a setup request");
        assert_eq!(n, 56, "setup request size");
        assert_eq!(u16::from_be_bytes([b[2], b[3]]), 20, "offered version");
        b[2..4].copy_from_slice(&21u16.to_be_bytes());
        b[8] = 2; // setup response
        b[9] = 2; // bad version
        fake.send_to(&b[..n], from).unwrap();
    });
    let err = capacity(port, &["-d", "-t", "5"]).unwrap_err();
    answer.join().unwrap();
    assert!(
        err.contains("protocol version 20 not accepted by the server (it speaks 21)"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // A port that never answers: a bounded wait, then the reason.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let t0 = Instant::now();
    let err = capacity(port, &["-u", "-t", "5"]).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    assert!(
        err.contains("no setup response from the server within 3 s"),
        "{err}"
    );
    drop(silent);
}

/// Without HOST, `hakaru capacity` runs against an embedded server on loopback; its results
/// go to the archive with the maximum as headline, and `compare` judges the capacity figures.
#[test]
fn capacity_on_the_embedded_server_is_saved_and_compared() {
    use super::common::{hakaru, run_cmd};
    let _alone = alone();
    let dir = std::env::temp_dir().join(format!("hakaru-capacity-keep-{}", std::process::id()));
    // A directory left by an earlier process with the same PID would hold its runs too.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("results.db");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    for (row, out) in [("40", &a), ("20", &b)] {
        let o = run_cmd(
            hakaru()
                .args(["capacity", "-t", "5", "-u", "-I", row, "-q", "--save", "-o"])
                .arg(out)
                .env("HAKARU_DB", &db),
            LIMIT,
        );
        assert!(o.status.success(), "capacity -I {row}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("capacity: maximum"), "{text}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    assert_eq!(doc["embedded_server"], true);
    let max = num(&doc, "/udpst/max_ip_capacity_mbps");
    // Never over the row, and over the other run's row of 20 (a paced loopback run reads
    // under its row on a slow day; the accuracy is the namespace tests' job).
    assert!(max <= 42.0 && max > 20.0, "row 40 read {max}");
    // The archive lists both runs, the maximum as the headline.
    let o = run_cmd(
        hakaru()
            .args(["history", "--kind", "capacity", "--format", "json"])
            .env("HAKARU_DB", &db),
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let list = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<serde_json::Value> = match serde_json::from_str(&list) {
        Ok(serde_json::Value::Array(v)) => v,
        _ => list
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
    };
    assert_eq!(rows.len(), 2, "{list}");
    let heads: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.pointer("/headline").and_then(serde_json::Value::as_f64))
        .collect();
    assert!(
        heads.iter().any(|h| (h / 1e6 - 40.0).abs() < 2.0),
        "headlines {heads:?} in {list}"
    );
    // The new run's maximum is half the base's: compare fails on it (the rows differ: --force).
    let o = run(
        &[
            "compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--force",
            "--format",
            "json",
        ],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let c = json(&o);
    let rows = c["rows"].as_array().unwrap();
    let max_row = rows
        .iter()
        .find(|r| r["metric"] == "maximum IP capacity")
        .unwrap_or_else(|| panic!("no capacity row in {c}"));
    assert_eq!(max_row["verdict"], "worse", "{max_row}");
    assert!(
        rows.iter()
            .all(|r| r["metric"] != "client -> server received"),
        "a capacity result is not compared as a bulk test: {c}"
    );
    // Without --force the different rows are named.
    let o = run(
        &["compare", a.to_str().unwrap(), b.to_str().unwrap()],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("row: 40 vs 20"), "{}", stderr(&o));
}
