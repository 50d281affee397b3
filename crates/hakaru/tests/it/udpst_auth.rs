//! RFC 9946 authentication against the stock OB-UDPST 9.0.0 client: `udpst -a KEY` and
//! `udpst -K FILE -y ID` run against `hakaru server --udpst-key` / `--udpst-key-file` (mode 1:
//! signed setup, null request and activation, keys derived per test), and every wrong way in
//! is refused with the reference's answer while the port keeps serving.

use std::process::Command;
use std::time::Duration;

use super::common::{built_peer, compat_pass, run_cmd, ServerProc};
use super::udpst::{free_udp, max_l3};

/// Runs the stock client for 5 s at the 100 Mbit/s row: success and its output.
fn client(udpst: &std::path::Path, port: u16, extra: &[&str]) -> (bool, String) {
    let o = run_cmd(
        Command::new(udpst)
            .args(["-d", "-t", "5", "-s", "-I", "100"])
            .args(extra)
            .arg(format!("127.0.0.1:{port}")),
        Duration::from_secs(30),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn udpst_signed_clients_run_and_wrong_keys_are_refused() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("hakaru-udpst-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.csv");
    std::fs::write(&keys, "# test keys\n1,firstkey\n2,secondkey # comment\n").unwrap();
    let port = free_udp();
    let mut srv = ServerProc::start(&[
        "--udpst-port",
        &port.to_string(),
        "--udpst-key",
        "lonekey",
        "--udpst-key-file",
        keys.to_str().unwrap(),
    ]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    // The key for any ID (-a), and a key-file entry picked by ID (-K/-y).
    let file = keys.to_str().unwrap();
    for (how, extra) in [
        ("-a", vec!["-a", "lonekey"]),
        ("-K -y 2", vec!["-K", file, "-y", "2"]),
    ] {
        // The best of up to five tries (`best_one`): never over the row, over half of it.
        let max = super::udpst::best_one(
            || {
                let (ok, out) = client(&udpst, port, &extra);
                assert!(ok, "udpst {how} against a keyed hakaru failed:\n{out}");
                let max = max_l3(&out).unwrap_or_else(|| panic!("no maximum in:\n{out}"));
                eprintln!("udpst {how}: {max} Mbit/s at row 100");
                max
            },
            |max| (max - 100.0).abs() < 5.0,
        );
        assert!(max <= 105.0 && max > 50.0, "{how}: {max} Mbit/s at row 100");
        compat_pass(
            "udpst",
            "server",
            &format!("-d -I 100 -t 5 {how} (authenticated)"),
            "hakaru to client (downstream)",
        );
    }
    // A wrong key, a key ID whose key is another's, and no key at all: refused, named in
    // the server's log, and the client fails.
    for (how, extra, log) in [
        (
            "wrong -a",
            vec!["-a", "notthekey"],
            "digest does not verify",
        ),
        (
            "-y 1 with key 2",
            vec!["-a", "secondkey", "-y", "1"],
            "digest does not verify",
        ),
        ("unsigned", vec![], "this server requires it"),
    ] {
        let (ok, out) = client(&udpst, port, &extra);
        assert!(!ok, "udpst {how} must be refused:\n{out}");
        assert!(max_l3(&out).is_none(), "{how} ran a test:\n{out}");
        assert!(
            srv.wait_log(log, Duration::from_secs(2)).is_some(),
            "{how}: no `{log}` in the server's log"
        );
    }
    // And a signed client still runs after them.
    let (ok, out) = client(&udpst, port, &["-a", "lonekey"]);
    assert!(ok, "udpst -a after refusals failed:\n{out}");
    assert!(srv.alive());
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn udpst_key_flags_are_checked_before_serving() {
    let long = "k".repeat(65);
    let o = run_cmd(
        Command::new(super::common::bin()).args([
            "server",
            "--udpst-port",
            "0",
            "--udpst-key",
            &long,
        ]),
        Duration::from_secs(10),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 to 64 characters"), "{err}");
    let bad = std::env::temp_dir().join(format!("hakaru-udpst-badkeys-{}", std::process::id()));
    std::fs::write(&bad, "300,key\n").unwrap();
    let o = run_cmd(
        Command::new(super::common::bin()).args([
            "server",
            "--udpst-port",
            "0",
            "--udpst-key-file",
            bad.to_str().unwrap(),
        ]),
        Duration::from_secs(10),
    );
    let _ = std::fs::remove_file(&bad);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 1") && err.contains("KEYID"), "{err}");
}

#[test]
fn udpst_multi_connection_runs_every_connection_against_hakaru_as_against_a_stock_server() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let _alone = super::udpst::alone();
    let port = free_udp();
    let mut srv = ServerProc::start(&["--udpst-port", &port.to_string()]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    // Two connections, each at the 100 Mbit/s row: 200 Mbit/s in all; each side's best of up
    // to five tries (`best_pair`).
    let (ours, theirs) = super::udpst::best_pair(
        || {
            let (ok, out) = client(&udpst, port, &["-C", "2"]);
            assert!(ok, "udpst -C 2 against hakaru failed:\n{out}");
            assert!(out.contains("Active Connections: 2"), "{out}");
            let ours = max_l3(&out).unwrap();
            let sport = free_udp();
            let stock = Command::new(&udpst)
                .args(["-1", "-p", &sport.to_string(), "127.0.0.1"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn stock udpst server");
            super::udpst::wait_bound(None, sport);
            let (ok, sout) = client(&udpst, sport, &["-C", "2"]);
            let _ = super::common::wait_child(stock, Duration::from_secs(10));
            assert!(ok, "udpst -C 2 against a stock server failed:\n{sout}");
            let theirs = max_l3(&sout).unwrap();
            eprintln!("udpst -C 2 -I 100: hakaru {ours}, stock {theirs} Mbit/s (truth 200)");
            (ours, theirs)
        },
        |ours, theirs| super::udpst::settled(ours, theirs, 200.0),
    );
    // Over 120: one connection alone carries at most its row of 100.
    super::udpst::check_rates("udpst -C 2 -I 100", ours, theirs, 200.0, 120.0);
    assert!(srv.alive());
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    compat_pass(
        "udpst",
        "server",
        "-d -C 2 -I 100 -t 5",
        "hakaru to client (downstream), two connections",
    );
}
