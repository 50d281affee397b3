//! A path that dies mid-test: both ends notice within --stall-timeout (plus a keepalive
//! period) and say so, instead of waiting out a fixed timeout or the test's length.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{bin, wait_child};
use super::netns_link::{Link, Shaping};

/// Runs `args` in the client namespace, cuts the link 2 s in by taking the server's veth end
/// down, and returns the client's exit code, stderr and how long it ran after the cut.
fn cut_mid_test(link: &Link, args: &[&str]) -> (Option<i32>, String, Duration) {
    let child = Command::new("ip")
        .env_remove("RUST_LOG")
        .args(["netns", "exec", &link.client_ns, bin()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client");
    std::thread::sleep(Duration::from_secs(2));
    link.must_in_server(&["ip", "link", "set", &link.server_dev, "down"]);
    let cut = Instant::now();
    let o = wait_child(child, Duration::from_secs(60));
    let after = cut.elapsed();
    // Bring it back for the next case, and wait until the path carries a test again: the
    // neighbour entry that failed while the link was down answers "no route to host" for a
    // while unless it is flushed.
    link.must_in_server(&["ip", "link", "set", &link.server_dev, "up"]);
    for ns in [&link.client_ns, &link.server_ns] {
        let _ = Command::new("ip")
            .args(["-n", ns, "neigh", "flush", "all"])
            .output();
    }
    let port = args[args.iter().position(|a| *a == "-p").map_or(0, |i| i + 1)];
    let healthy = (0..20).any(|_| {
        let o = link.in_client(
            &[bin(), "tcp", &link.server_ip, "-p", port, "-n", "64K"],
            Duration::from_secs(20),
        );
        o.status.success() || {
            std::thread::sleep(Duration::from_millis(500));
            false
        }
    });
    assert!(healthy, "the link did not come back after the cut");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        after,
    )
}

#[test]
fn a_dead_path_is_noticed_within_the_stall_timeout() {
    let Some(link) = Link::setup(&[], Shaping::NONE) else {
        return;
    };
    let mut server = link.start_server();
    for kind in ["tcp", "udp", "pps"] {
        let (code, err, after) = cut_mid_test(
            &link,
            &[
                kind,
                &link.server_ip,
                "-p",
                &server.port_s(),
                "-t",
                "40",
                "--stall-timeout",
                "5",
            ],
        );
        assert_eq!(code, Some(1), "{kind}: {err}");
        // The message names the limit the user set, not a built-in timeout. For TCP two
        // detectors share that limit and either may fire first: the control connection's
        // silence, or the sending flow whose peer stopped reading (its buffer full).
        assert!(
            err.contains("sent nothing for 5 s (--stall-timeout): the path or the server is down")
                || (kind == "tcp"
                    && err.contains("the peer stopped reading for 5.0 s (--stall-timeout)")),
            "{kind}: {err}"
        );
        // Well before the 40 s the test asked for (a bound, not a timing figure).
        assert!(
            after < Duration::from_secs(25),
            "{kind}: noticed only after {after:?}"
        );
        eprintln!("{kind}: noticed {after:?} after the cut: {}", err.trim());
    }
    for (kind, flag) in [
        (vec!["latency", "--timeout", "5"], "--timeout"),
        (vec!["latency", "--udp", "--timeout", "5"], "--timeout"),
        (
            vec!["connect", "--connect-timeout", "5"],
            "--connect-timeout",
        ),
    ] {
        let port = server.port_s();
        let mut args = kind.clone();
        args.extend([link.server_ip.as_str(), "-p", &port, "-t", "40"]);
        let (code, err, after) = cut_mid_test(&link, &args);
        assert_eq!(code, Some(1), "{kind:?}: {err}");
        assert!(
            err.contains(&format!(
                "sent nothing for 5 s ({flag}): the path or the server is down"
            )) || (kind[0] == "latency" && !kind.contains(&"--udp") && err.contains("no reply")),
            "{kind:?}: {err}"
        );
        // --timeout 5 plus a keepalive period and the check's own tick: a TCP latency client
        // used to wait out a 20 s report timeout after its flow had already failed (22 s).
        assert!(
            after < Duration::from_secs(12),
            "{kind:?}: noticed only after {after:?}"
        );
        eprintln!("{kind:?}: noticed {after:?} after the cut: {}", err.trim());
    }
    // The server logs those tests as aborted, and still serves.
    assert!(server
        .wait_log("aborted", Duration::from_secs(20))
        .is_some());
    assert!(server.alive());
}
