//! Issue 29, "a server safe to expose, round two": one test per hole, each against the real
//! binary, each checking that a legitimate client still completes.

use std::time::Duration;

use super::common::{json, peer, run, run_cmd, stderr, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

/// `-l 100 -b 1M` raised the paced sender's write to a full segment over a 100-byte pattern:
/// the server's flow thread panicked on `-R` and the client waited for a stall.
#[test]
fn a_paced_sender_with_short_writes_works_both_ways() {
    let s = ServerProc::start(&[]);
    let port = s.port_s();
    for dir in [None, Some("-R"), Some("--bidir")] {
        let mut args = vec![
            "tcp", "127.0.0.1", "-p", &port, "-t", "1", "-b", "1M", "-l", "100", "--json",
        ];
        args.extend(dir);
        let o = run(&args, LIMIT);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v = json(&o);
        let totals = v["totals"].as_array().expect("totals");
        assert_eq!(totals.len(), if dir == Some("--bidir") { 2 } else { 1 });
        for t in totals {
            let bytes = t["receiver"]["bytes"].as_u64().unwrap_or(0);
            // 1 Mbit/s for about a second: 125 kB, give or take the schedule's edges.
            assert!(
                (60_000..=250_000).contains(&bytes),
                "{args:?}: {bytes} bytes"
            );
        }
    }
    assert!(
        s.wait_log("panicked", Duration::from_millis(300)).is_none(),
        "the server logged a panic"
    );
}

#[test]
fn a_stock_iperf3_client_gets_short_paced_writes_from_the_server() {
    if !peer("iperf3", "iperf3") {
        return;
    }
    let s = ServerProc::start(&[]);
    let port = s.port_s();
    let o = run_cmd(
        std::process::Command::new("iperf3").args([
            "-c", "127.0.0.1", "-p", &port, "-R", "-b", "1M", "-l", "100", "-t", "2", "-J",
        ]),
        LIMIT,
    );
    assert!(o.status.success(), "iperf3 -R -b 1M -l 100: {}", stderr(&o));
    let v = json(&o);
    let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!((150_000..=400_000).contains(&bytes), "{bytes} bytes in 2 s at 1 Mbit/s");
}
