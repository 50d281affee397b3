//! flent (Debian's) against `hakaru server --netperf-port 12865` and against a stock netserver
//! 2.7.1 in the same run: `tcp_upload`, `tcp_download` and `rrul_be` must complete against
//! hakaru, with the throughput netperf reports within 5 % of the same flent test against
//! netserver.
//!
//! flent runs the netperf it finds on PATH: the stock build in /opt/hakaru-peers/netperf/bin
//! (demo mode, which flent needs) is put first on flent's PATH. Its pings go through fping (ICMP)
//! and, for rrul_be, netperf UDP_RR in demo mode (flent's fallback when irtt is not installed).
//!
//! Each server has a namespace of its own, both reached from one client namespace by a veth pair
//! each, so both listen on 12865. Every veth end's egress is shaped by tbf to 100 Mbit/s: the
//! link, not the shared CPUs, sets the throughput, so the two servers can be compared within
//! 5 % on a busy machine (docs/BENCHMARKS.md compares them unshaped on loopback). The runs
//! interleave (hakaru, netserver, hakaru, ...) and the medians are compared.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use super::common::{built_peer, compat_pass, kill, stderr, ServerProc};
use super::netns_link::{ip, must, netns_setup, SERIAL};

/// netserver's port, which both servers use in their own namespaces.
const PORT: &str = "12865";
/// tbf rate on every veth end's egress, as `tc` spells it.
const RATE: &str = "100mbit";
/// flent's test length (`-l`) and the delay before and after the bulk flows (`-d`), seconds.
const LENGTH: &str = "5";
const DELAY: &str = "1";
/// Rounds of each test against each server.
const ROUNDS: usize = 3;
/// Allowed relative difference of hakaru's median throughput from netserver's.
const TOLERANCE: f64 = 0.05;
/// Hard limit on one flent run (its own expected run time is LENGTH + 2 DELAY plus start-up).
const FLENT_LIMIT: Duration = Duration::from_secs(90);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One client namespace and two server namespaces, each server joined to the client by a veth
/// pair of its own, every end shaped. Dropping it deletes the namespaces (and with them the
/// veths and qdiscs).
struct Fork {
    client_ns: String,
    /// (namespace, address) of each server side: 0 for hakaru, 1 for netserver.
    servers: [(String, String); 2],
    created: Vec<String>,
    _serial: MutexGuard<'static, ()>,
}

impl Fork {
    fn setup(tools: &[(&str, &str)]) -> Option<Fork> {
        netns_setup(tools, Fork::create)
    }

    fn create() -> Result<Fork, String> {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let x = (pid + n) % 256;
        let mut f = Fork {
            client_ns: format!("hk-fc-{pid}-{n}"),
            servers: [
                (format!("hk-fh-{pid}-{n}"), format!("198.18.{x}.2")),
                (format!("hk-fn-{pid}-{n}"), format!("198.18.{x}.6")),
            ],
            created: Vec::new(),
            _serial: serial,
        };
        let all = [
            f.client_ns.clone(),
            f.servers[0].0.clone(),
            f.servers[1].0.clone(),
        ];
        for ns in all {
            let o = ip(&["netns", "add", &ns]);
            if !o.status.success() {
                return Err(format!("`ip netns add {ns}` failed: {}", stderr(&o).trim()));
            }
            must(&["-n", &ns, "link", "set", "lo", "up"]);
            f.created.push(ns);
        }
        for (i, (sns, sip)) in f.servers.iter().enumerate() {
            // At most 15 bytes: "fc" + a pid (at most 7 digits) + "-" + one digit.
            let (cdev, sdev) = (format!("fc{pid}-{i}"), format!("fs{pid}-{i}"));
            let cip = format!("198.18.{x}.{}", 4 * i + 1);
            must(&[
                "link",
                "add",
                &cdev,
                "netns",
                &f.client_ns,
                "type",
                "veth",
                "peer",
                "name",
                &sdev,
                "netns",
                sns,
            ]);
            for (ns, dev, addr) in [(&f.client_ns, &cdev, &cip), (sns, &sdev, sip)] {
                must(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]);
                must(&["-n", ns, "link", "set", dev, "up"]);
                must(&[
                    "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                    RATE, "burst", "64kb", "latency", "50ms",
                ]);
            }
        }
        Ok(f)
    }
}

impl Drop for Fork {
    fn drop(&mut self) {
        for ns in &self.created {
            // No run_cmd here: a panic inside drop while unwinding would abort the test binary.
            match Command::new("ip").args(["netns", "del", ns]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("flent: could not delete {ns}: {}", stderr(&o).trim()),
                Err(e) => eprintln!("flent: could not run `ip netns del {ns}`: {e}"),
            }
        }
    }
}

/// A stock netserver in the foreground inside a namespace; killed by PID when dropped
/// (`ip netns exec` execs it, so the child's PID is netserver's).
struct Netserver(Child);

impl Netserver {
    fn start(bin: &Path, ns: &str, addr: &str) -> Netserver {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin.with_file_name("netserver"))
            .args(["-D", "-L", addr, "-p", PORT])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start netserver");
        // Up when `ss` lists its port in the namespace (bounded: 50 tries).
        for _ in 0..50 {
            let o = Command::new("ip")
                .args(["netns", "exec", ns, "ss", "-Hltn", "sport", "=", ":12865"])
                .output();
            if o.is_ok_and(|o| !o.stdout.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Netserver(child)
    }
}

impl Drop for Netserver {
    fn drop(&mut self) {
        kill(self.0.id(), 9);
        let _ = self.0.wait();
    }
}

/// Runs flent `test` from the client namespace against `host` and returns the metadata flent
/// writes (`-f metadata`); fails the test if flent fails or outlasts [`FLENT_LIMIT`]. flent runs
/// in a process group of its own, which is killed by its id when over the limit, so the netperf
/// and fping it started go with it.
fn flent(fork: &Fork, netperf: &Path, dir: &Path, test: &str, host: &str, tag: &str) -> Value {
    let meta = dir.join(format!("{tag}.json"));
    let path = format!(
        "{}:{}",
        netperf.parent().expect("netperf's directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new("ip")
        .args(["netns", "exec", &fork.client_ns, "flent", test])
        .args(["-l", LENGTH, "-d", DELAY, "-H", host, "-f", "metadata"])
        .arg("-o")
        .arg(&meta)
        .arg("-D")
        .arg(dir)
        .env("PATH", path)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn flent");
    let out = wait_group(child, FLENT_LIMIT);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "flent {test} ({tag}) failed:\n{text}");
    let doc: Value = std::fs::read_to_string(&meta)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| panic!("flent {test} ({tag}) wrote no metadata:\n{text}"));
    // One result set: a list of one, or the object itself.
    match doc {
        Value::Array(mut v) if v.len() == 1 => v.remove(0),
        other => other,
    }
}

/// Waits for a child that leads its own process group; over `limit`, kills the group by its
/// id and fails the test.
fn wait_group(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait for flent"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{pid}")])
                .status();
            panic!("flent did not finish within {limit:?}");
        }
    }
}

/// The throughput of one flent run, Mbit/s: the sum of what netperf reported (its THROUGHPUT,
/// flent's MEAN_VALUE) for every TCP flow. Checks on the way that no runner failed, that
/// every flow and every ping series has a value, and that there are `want_flows` flows.
fn throughput(meta: &Value, test: &str, tag: &str, want_flows: usize) -> f64 {
    let failed = meta["FAILED_RUNNERS"].as_u64();
    assert_eq!(
        failed,
        Some(0),
        "flent {test} ({tag}): failed runners: {meta}"
    );
    let series = meta["SERIES_META"]
        .as_object()
        .unwrap_or_else(|| panic!("flent {test} ({tag}): no SERIES_META in {meta}"));
    let mut total = 0.0;
    let mut flows = 0;
    let mut pings = 0;
    for (name, s) in series {
        let value = s["MEAN_VALUE"].as_f64();
        let runner = s["RUNNER"].as_str().unwrap_or_default();
        if name.starts_with("TCP ") && runner == "NetperfDemoRunner" {
            let v = value.unwrap_or_else(|| panic!("flent {test} ({tag}): no value for {name}"));
            assert!(v > 0.0, "flent {test} ({tag}): {name} is {v}");
            total += v;
            flows += 1;
        } else if name.starts_with("Ping ") && runner != "AverageRunner" {
            let v = value.unwrap_or_else(|| panic!("flent {test} ({tag}): no value for {name}"));
            assert!(v > 0.0, "flent {test} ({tag}): {name} is {v}");
            pings += 1;
        }
    }
    assert_eq!(
        flows, want_flows,
        "flent {test} ({tag}): TCP flows in {meta}"
    );
    assert!(pings > 0, "flent {test} ({tag}): no pings in {meta}");
    total
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// (flent test, flows it runs, direction in words).
const TESTS: [(&str, usize, &str); 3] = [
    ("tcp_upload", 1, "client -> server"),
    ("tcp_download", 1, "server -> client"),
    ("rrul_be", 8, "both ways"),
];

#[test]
fn flent_against_hakaru_and_netserver() {
    let Some(netperf) = built_peer("netperf", "netperf") else {
        return;
    };
    let tools = [("tc", "iproute2"), ("flent", "flent"), ("fping", "fping")];
    let Some(fork) = Fork::setup(&tools) else {
        return;
    };
    let dir: PathBuf = std::env::temp_dir().join(format!("hakaru-flent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("flent's data directory");

    let (hns, hip) = &fork.servers[0];
    let (sns, sip) = &fork.servers[1];
    let mut cmd = Command::new("ip");
    cmd.env_remove("RUST_LOG")
        .args(["netns", "exec", hns, super::common::bin()]);
    let hakaru = ServerProc::start_with(cmd, hip, &["--netperf-port", PORT]);
    hakaru
        .wait_log("netperf listening on", Duration::from_secs(10))
        .expect("no 'netperf listening on' line");
    let _netserver = Netserver::start(&netperf, sns, sip);

    // figures[test][server]: one throughput per round.
    let mut figures = vec![[Vec::new(), Vec::new()]; TESTS.len()];
    for round in 0..ROUNDS {
        for (t, (test, flows, _)) in TESTS.iter().enumerate() {
            for (k, (who, host)) in [("hakaru", hip), ("netserver", sip)].iter().enumerate() {
                let tag = format!("{test}-{who}-{round}");
                let meta = flent(&fork, &netperf, &dir, test, host, &tag);
                let mbps = throughput(&meta, test, &tag, *flows);
                eprintln!("flent {tag}: {mbps:.2} Mbit/s");
                figures[t][k].push(mbps);
            }
        }
    }

    let (mut failures, mut passed) = (Vec::new(), Vec::new());
    for ((test, _, dir_words), [h, s]) in TESTS.iter().zip(figures.iter_mut()) {
        let (mh, ms) = (median(h), median(s));
        eprintln!(
            "flent {test}: hakaru median {mh:.2} Mbit/s, netserver median {ms:.2} Mbit/s \
             ({:+.2} %)",
            (mh / ms - 1.0) * 100.0
        );
        if (mh / ms - 1.0).abs() <= TOLERANCE {
            passed.push((test, dir_words));
        } else {
            failures.push(format!(
                "{test}: hakaru {h:?}, netserver {s:?} (medians {mh:.2}, {ms:.2} Mbit/s)"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "throughput not within {} % of netserver's:\n{}",
        TOLERANCE * 100.0,
        failures.join("\n")
    );
    for (test, dir_words) in passed {
        compat_pass(
            "flent",
            "server",
            &format!("{test} -l {LENGTH} (throughput = netserver's within 5 %)"),
            dir_words,
        );
    }
}
