//! Interop with the stock OB-UDPST 9.0.0 (`udpst`, built by `.ci/run` from `../shared/peers`):
//! `udpst -u` and `udpst -d` against `hakaru server --udpst-port`, and the same client against a
//! stock `udpst` server, at a fixed sending-rate row (`-I 100`: 100 Mbit/s at L3, the truth),
//! on loopback. Then bad input: garbage, a wrong protocol version and a client asking for more
//! than the server allows, after which a real test still runs.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::common::{built_peer, compat_pass, run_cmd, wait_child, ServerProc};

const LIMIT: Duration = Duration::from_secs(30);

/// Taken by the loopback tests that compare rates (up to 1.1 Gbit/s of udpst load): the lock
/// every namespace link holds (`netns_link::SERIAL`), so that no two of these tests and no
/// namespace test share the 2 CPUs; a failed one does not block.
pub(super) fn alone() -> std::sync::MutexGuard<'static, ()> {
    super::netns_link::SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Rate pairs (hakaru, stock) from up to five tries, keeping each side's highest reading;
/// stops once `good` holds for the pair of highest readings. On a shared 2-core VM a paced
/// sender that misses its timer reads under its row, and on some days the whole VM does: the
/// stock pair, alone on an idle machine, read 78-93 of a 100 Mbit/s row and 176-180 of two
/// (2026-12-03), and 172 of 200 and 1002 of 1080 Mbit/s in CI. Contention only ever lowers a
/// reading, so each side's best of five is its reading of the path. (Three were not enough:
/// a CI run beside other tests read 65 and 76 of a 100 Mbit/s row as the best of three.)
pub(super) fn best_pair(
    mut run: impl FnMut() -> (f64, f64),
    good: impl Fn(f64, f64) -> bool,
) -> (f64, f64) {
    let mut best = (f64::MIN, f64::MIN);
    for _ in 0..5 {
        let (ours, theirs) = run();
        best = (best.0.max(ours), best.1.max(theirs));
        if good(best.0, best.1) {
            break;
        }
    }
    best
}

/// One reading's best of up to five tries, as [`best_pair`] keeps each side's.
pub(super) fn best_one(mut run: impl FnMut() -> f64, good: impl Fn(f64) -> bool) -> f64 {
    best_pair(
        || {
            let x = run();
            (x, x)
        },
        |x, _| good(x),
    )
    .0
}

/// Whether a pair of readings at a row of `truth` Mbit/s needs no further try: what
/// [`check_rates`] asks holds (hakaru's server at least 0.95x the stock server, never over the
/// row, over the highest floor a caller sets, 0.6 of the row). A slow day on which neither
/// server reaches the row then costs one try, not five.
pub(super) fn settled(ours: f64, theirs: f64, truth: f64) -> bool {
    ours >= 0.95 * theirs && ours <= 1.05 * truth && ours > 0.6 * truth
}

/// The checks a stock client's reading against hakaru's server must pass, against the same
/// client's reading of a stock server in the same run (each the best of its tries): never over
/// the row (+5 %), at least 0.95x what the stock server gave, and over `floor` (what a broken
/// server could not reach, e.g. more than one row for two connections). The row itself is not
/// a lower bound: the stock pair misses it on a slow day (see `best_pair`).
pub(super) fn check_rates(what: &str, ours: f64, theirs: f64, truth: f64, floor: f64) {
    assert!(
        ours <= truth * 1.05,
        "{what}: hakaru's server {ours:.2} Mbit/s, over the row's {truth}"
    );
    assert!(
        ours >= 0.95 * theirs,
        "{what}: hakaru's server {ours:.2} Mbit/s, under 0.95x the stock server's {theirs:.2}"
    );
    assert!(
        ours > floor,
        "{what}: hakaru's server {ours:.2} Mbit/s, not over {floor} (row {truth})"
    );
}

pub(super) fn free_udp() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// "…Maximum Mbps(L3/IP): 99.71, …" from the client's summary.
pub(super) fn max_l3(out: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.contains("Maximum Mbps(L3/IP):"))?;
    let v = line.split("Maximum Mbps(L3/IP):").nth(1)?;
    v.trim().split(',').next()?.trim().parse().ok()
}

pub(super) fn client(
    udpst: &std::path::Path,
    dir: &str,
    port: u16,
    extra: &[&str],
) -> (bool, String) {
    let o = run_cmd(
        Command::new(udpst)
            .args([dir, "-t", "5", "-s"])
            .args(extra)
            .arg(format!("127.0.0.1:{port}")),
        LIMIT,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

pub(super) fn stock_server(udpst: &std::path::Path, port: u16) -> std::process::Child {
    let c = Command::new(udpst)
        .args(["-1", "-p", &port.to_string(), "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stock udpst server");
    wait_bound(None, port);
    c
}

/// Waits (up to 10 s) until a UDP socket is bound to `port` in network namespace `ns` (this
/// one when `None`), as /proc/net/udp and udp6 list them: a stock server started on a loaded
/// machine can take longer than any fixed pause to bind, and a client that starts first
/// times out. Reading the table takes no port, so it cannot race the server's bind.
pub(super) fn wait_bound(ns: Option<&str>, port: u16) {
    let want = format!(":{port:04X}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let table = match ns {
            None => ["/proc/net/udp", "/proc/net/udp6"]
                .iter()
                .filter_map(|f| std::fs::read_to_string(f).ok())
                .collect::<String>(),
            Some(ns) => Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "cat",
                    "/proc/net/udp",
                    "/proc/net/udp6",
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default(),
        };
        // "  sl  local_address rem_address ...": the local address is the second column.
        if table
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|local| local.ends_with(&want))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no UDP socket bound to port {port} within 10 s");
}

#[test]
fn udpst_up_and_down_match_a_stock_server() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let _alone = alone();
    let port = free_udp();
    let mut srv = ServerProc::start(&["--udpst-port", &port.to_string()]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    for dir in ["-u", "-d"] {
        let (ours, theirs) = best_pair(
            || {
                let (ok, out) = client(&udpst, dir, port, &["-I", "100"]);
                assert!(ok, "udpst {dir} against hakaru failed:\n{out}");
                let ours = max_l3(&out).unwrap_or_else(|| panic!("no maximum in:\n{out}"));
                let sport = free_udp();
                let stock = stock_server(&udpst, sport);
                let (ok, sout) = client(&udpst, dir, sport, &["-I", "100"]);
                let _ = wait_child(stock, Duration::from_secs(10));
                assert!(ok, "udpst {dir} against stock udpst failed:\n{sout}");
                let theirs = max_l3(&sout).unwrap();
                eprintln!(
                    "udpst {dir}: hakaru {ours} Mbit/s, stock {theirs} Mbit/s (row 100 = 100)"
                );
                (ours, theirs)
            },
            |ours, theirs| settled(ours, theirs, 100.0),
        );
        // Over 50: a server that loses half its datagrams or paces half of the row fails here
        // whatever the stock pair read; one at a higher row fails the ceiling.
        check_rates(&format!("udpst {dir} -I 100"), ours, theirs, 100.0, 50.0);
        let direction = if dir == "-u" {
            "client to hakaru (upstream)"
        } else {
            "hakaru to client (downstream)"
        };
        compat_pass("udpst", "server", &format!("{dir} -I 100 -t 5"), direction);
    }
    assert!(srv.alive());
    let _ = srv.child.kill();
    let _ = srv.child.wait();
}

#[test]
fn udpst_bad_input_is_refused_and_the_port_keeps_serving() {
    let Some(udpst) = built_peer("udpst", "udpst") else {
        return;
    };
    let port = free_udp();
    let mut srv =
        ServerProc::start(&["--udpst-port", &port.to_string(), "--udpst-max-rate", "200"]);
    assert!(srv
        .wait_log("udpst listening", Duration::from_secs(5))
        .is_some());
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    for junk in [
        &b""[..],
        b"x",
        &[0xAC, 0xE1, 0, 20],
        &[0u8; 56],
        &[0xFFu8; 1400],
    ] {
        s.send_to(junk, ("127.0.0.1", port)).unwrap();
    }
    let mut buf = [0u8; 2048];
    assert!(
        s.recv_from(&mut buf).is_err(),
        "garbage must get no answer (no reflection)"
    );
    // A setup request with protocol version 9: the RFC's bad-version answer, carrying 20.
    let mut req = [0u8; 56];
    req[0..2].copy_from_slice(&0xACE1u16.to_be_bytes());
    req[2..4].copy_from_slice(&9u16.to_be_bytes());
    req[5] = 1;
    req[8] = 1;
    req[14] = 1;
    s.send_to(&req, ("127.0.0.1", port)).unwrap();
    let (n, _) = s.recv_from(&mut buf).expect("an answer to a wrong version");
    assert_eq!(n, 56);
    assert_eq!((buf[8], buf[9]), (2, 2), "setup response, bad version");
    assert_eq!(u16::from_be_bytes([buf[2], buf[3]]), 20);
    assert!(srv
        .wait_log("protocol version 9", Duration::from_secs(2))
        .is_some());
    // More than --udpst-max-rate: refused with capacity exceeded, named in the log.
    let (ok, out) = client(&udpst, "-d", port, &["-B", "500"]);
    assert!(!ok, "a 500 Mbit/s request must be refused:\n{out}");
    assert!(srv
        .wait_log("--udpst-max-rate allows 200", Duration::from_secs(2))
        .is_some());
    // And a real test still runs, searching (algorithm B) under the 200 Mbit/s cap.
    let (ok, out) = client(&udpst, "-u", port, &[]);
    assert!(ok, "udpst -u after bad input failed:\n{out}");
    let max = max_l3(&out).unwrap();
    assert!(
        max > 10.0 && max < 205.0,
        "search under a 200 Mbit/s cap gave {max}"
    );
    assert!(srv.alive());
    let _ = srv.child.kill();
    let _ = srv.child.wait();
}
