//! `hakaru server --mesh` and `hakaru mesh report` over loopback: agents on 127.0.0.x (one
//! address each, one mesh port number), the real binary throughout. What a stranger and a
//! listed peer can make an agent send, hold and log is checked here (docs/mesh.md, "Threat
//! review"); loss with known truth is in netns_mesh.rs.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{free_port, hakaru, json, run, stderr, ServerProc};

/// Agents on `ips`, each `hakaru server --mesh FILE --mesh-port PORT` with `extra`.
pub(super) struct Agents {
    pub procs: Vec<ServerProc>,
    pub port: u16,
    pub peers: PathBuf,
    pub dir: PathBuf,
}

impl Drop for Agents {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "hakaru-mesh-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

impl Agents {
    /// Writes the peers file (`lines`) and starts an agent on each of `ips`.
    pub fn start(tag: &str, lines: &str, ips: &[&str], extra: &[&str]) -> Agents {
        let dir = tmpdir(tag);
        let peers = dir.join("peers.txt");
        std::fs::write(&peers, lines).unwrap();
        let port = free_port();
        let mut a = Agents {
            procs: Vec::new(),
            port,
            peers,
            dir,
        };
        for ip in ips {
            a.add(ip, extra);
        }
        a
    }

    /// Starts one more agent on `ip`.
    pub fn add(&mut self, ip: &str, extra: &[&str]) {
        self.add_on(ip, "0", extra);
    }

    /// Starts one more agent on `ip` whose server's test port is `test_port`.
    pub fn add_on(&mut self, ip: &str, test_port: &str, extra: &[&str]) {
        let port = self.port.to_string();
        let peers = self.peers.display().to_string();
        let mut args = vec!["--mesh", &peers, "--mesh-port", &port];
        args.extend_from_slice(extra);
        let s = ServerProc::start_on(hakaru(), ip, test_port, &args);
        assert!(
            s.wait_log("mesh agent on", Duration::from_secs(10))
                .is_some(),
            "the agent on {ip} did not start"
        );
        self.procs.push(s);
    }

    /// `hakaru mesh report --json` over the same peers file.
    pub fn report(&self, extra: &[&str]) -> Value {
        let o = self.report_raw(&["--json"], extra);
        assert!(o.status.success(), "{}", stderr(&o));
        json(&o)
    }

    pub fn report_raw(&self, fmt: &[&str], extra: &[&str]) -> Output {
        let port = self.port.to_string();
        let peers = self.peers.display().to_string();
        let mut args = vec!["mesh", "report", "--peers", &peers, "--port", &port];
        args.extend_from_slice(fmt);
        args.extend_from_slice(extra);
        run(&args, Duration::from_secs(60))
    }

    /// GET `path` from the agent on `ip`'s mesh port.
    pub fn get(&self, ip: &str, path: &str) -> String {
        http_get_at(ip, self.port, path)
    }
}

/// Writes `path` whole by renaming a new file over it, as docs/mesh.md asks of a peers file
/// that agents read while it changes.
fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The value of the sample whose line starts with `series` (name and labels as rendered).
pub(super) fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn pair<'a>(r: &'a Value, src: &str, dst: &str) -> &'a Value {
    r["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["src"] == src && p["dst"] == dst)
        .unwrap_or_else(|| panic!("no pair {src} -> {dst} in {r}"))
}

/// A probe by hand, as docs/mesh.md lays it out (not through hakaru's own codec).
fn probe(len: usize, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[..4].copy_from_slice(b"HKMS");
    b[4] = 1;
    b[5] = 1;
    b[8..16].copy_from_slice(&0x1234u64.to_be_bytes());
    b[16..24].copy_from_slice(&seq.to_be_bytes());
    b[40..42].copy_from_slice(&(len as u16).to_be_bytes());
    b
}

/// Replies that come back to `s` within `wait`, as their lengths.
fn replies(s: &UdpSocket, wait: Duration) -> Vec<usize> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return got;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.recv(&mut buf) {
            Ok(n) => {
                assert_eq!(&buf[..4], b"HKMS");
                // The agent's own probes (to a socket on a listed peer's port) are not answers.
                if buf[5] != 1 {
                    assert_eq!(buf[5], 2, "an answer is a reply");
                    got.push(n);
                }
            }
            Err(_) => return got,
        }
    }
}

const THREE: &str = "# three agents\n127.0.0.2 zone=a\n127.0.0.3 zone=a\n127.0.0.4 zone=b\n";
const IPS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// Fast probing and a short window, so a test sees clean windows within seconds (the
/// probes sent while the other agents were still starting fall out of it).
const FAST: [&str; 6] = [
    "--mesh-interval",
    "100ms",
    "--mesh-window",
    "2s",
    "--mesh-timeout",
    "500ms",
];

#[test]
fn agents_probe_each_other_and_the_report_has_every_pair() {
    let a = Agents::start("three", THREE, &IPS, &FAST);
    std::thread::sleep(Duration::from_secs(4));
    let r = a.report(&[]);
    assert_eq!(r["test"], "mesh");
    assert_eq!(r["pairs"].as_array().unwrap().len(), 6, "{r}");
    for s in IPS {
        for d in IPS.iter().filter(|d| **d != s) {
            let p = pair(&r, s, d);
            // About 20 probes in the 2 s window at 10 a second.
            assert!(p["probes"].as_u64().unwrap() >= 10, "{p}");
            // Nothing drops on loopback; a CPU stall past the 500 ms timeout on a busy
            // machine could cost a probe, never a fifth of them.
            assert!(p["loss"].as_f64().unwrap() < 0.2, "{p}");
            let p50 = p["rtt_p50_us"].as_f64().unwrap();
            assert!(p50 > 0.0 && p50 < 100_000.0, "{p}");
            assert!(p["rtt_p99_us"].as_f64().unwrap() >= p50, "{p}");
        }
    }
    assert_eq!(r["suspects"].as_array().unwrap().len(), 0, "{r}");
    // The text has the matrix and says nobody is suspect.
    let o = a.report_raw(&[], &[]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("3 hosts, 3 agents answered, 6 pairs"), "{t}");
    assert!(t.contains("suspects: none"), "{t}");
    // Metrics on the mesh port: a series per peer with its labels, counting what was sent.
    let m = a.get("127.0.0.2", "/metrics");
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    let sent = sample(
        &m,
        "hakaru_mesh_probes_sent_total{peer=\"127.0.0.3\",zone=\"a\"}",
    )
    .unwrap_or_else(|| panic!("no per-peer series in {m}"));
    assert!(sent >= 30.0, "{sent}");
    let count = sample(
        &m,
        "hakaru_mesh_rtt_seconds_count{peer=\"127.0.0.4\",zone=\"b\"}",
    )
    .unwrap();
    assert!(count >= 30.0, "{count}");
    assert_eq!(
        sample(&m, "hakaru_mesh_peers"),
        Some(2.0),
        "it does not probe itself"
    );
    // The view itself.
    let v = a.get("127.0.0.3", "/mesh");
    let body: Value = serde_json::from_str(&v[v.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(body["peers"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(body["peers"][0]["dst"], "127.0.0.2");
    assert_eq!(body["peers"][0]["labels"]["zone"], "a");
}

/// The body of `GET /mesh` from the agent on `ip`.
fn mesh_view(a: &Agents, ip: &str) -> Value {
    let v = a.get(ip, "/mesh");
    serde_json::from_str(&v[v.find("\r\n\r\n").unwrap() + 4..]).unwrap()
}

fn peer_of<'a>(view: &'a Value, dst: &str) -> &'a Value {
    view["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["dst"] == dst)
        .unwrap_or_else(|| panic!("no peer {dst} in {view}"))
}

#[test]
fn throughput_slices_run_under_their_rate_cap_and_failures_are_named() {
    // Two agents (each a hakaru server on the same test port) and a listed host with no
    // server: its slices fail, by name.
    let lines = "127.0.0.2\n127.0.0.3\n127.0.0.9\n";
    let port = free_port().to_string();
    let mut extra = FAST.to_vec();
    extra.extend([
        "--mesh-slice-every",
        "1s",
        "--mesh-slice-time",
        "200ms",
        "--mesh-slice-rate",
        "20M",
        "--mesh-slice-port",
        &port,
    ]);
    let mut a = Agents::start("slice", lines, &[], &extra);
    for ip in &IPS[..2] {
        a.add_on(ip, &port, &extra);
    }
    // Until each peer has had a slice (bounded: 40 x 250 ms).
    let mut view = Value::Null;
    for _ in 0..40 {
        view = mesh_view(&a, "127.0.0.2");
        let runs = |dst: &str| peer_of(&view, dst)["slice"]["runs"].as_u64().unwrap_or(0);
        if runs("127.0.0.3") >= 1 && runs("127.0.0.9") >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let live = &peer_of(&view, "127.0.0.3")["slice"];
    assert_eq!(live["failed"], 0, "{view}");
    let bps = live["bps"].as_f64().expect("a slice's rate");
    // Paced at 20 Mbit/s: never more (a tenth for the pacer's rounding), and something.
    assert!(bps > 0.0 && bps <= 22e6, "{live}");
    let dead = &peer_of(&view, "127.0.0.9")["slice"];
    assert_eq!(dead["runs"], dead["failed"], "{view}");
    assert!(
        dead["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{dead}"
    );
    assert_eq!(dead["bps"], Value::Null, "{dead}");
    let m = a.get("127.0.0.2", "/metrics");
    assert!(
        sample(&m, "hakaru_mesh_slice_bits_per_second{peer=\"127.0.0.3\"}")
            .is_some_and(|v| v > 0.0 && v <= 22e6),
        "{m}"
    );
    assert!(
        sample(&m, "hakaru_mesh_slices_failed_total{peer=\"127.0.0.9\"}").is_some_and(|v| v >= 1.0),
        "{m}"
    );
    let r = a.report(&[]);
    let p = pair(&r, "127.0.0.2", "127.0.0.3");
    assert!(p["slice_bps"].as_f64().is_some_and(|v| v > 0.0), "{p}");
}

#[test]
fn tcp_connect_times_are_measured_and_a_closed_port_counts_lost() {
    // Two agents and a listed host where nothing listens (loopback answers its SYN with a
    // reset: refused, counted lost).
    let lines = "127.0.0.2 zone=a\n127.0.0.3 zone=a\n127.0.0.9 zone=dead\n";
    let mut extra = FAST.to_vec();
    extra.extend(["--mesh-connect-interval", "200ms"]);
    let a = Agents::start("connect", lines, &IPS[..2], &extra);
    // Until the live peer has had a few connects (bounded: 40 x 250 ms).
    let mut view = Value::Null;
    for _ in 0..40 {
        view = mesh_view(&a, "127.0.0.2");
        if peer_of(&view, "127.0.0.3")["connect"]["sent"]
            .as_u64()
            .is_some_and(|n| n >= 5)
            && peer_of(&view, "127.0.0.9")["connect"]["lost"]
                .as_u64()
                .is_some_and(|n| n >= 2)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let live = &peer_of(&view, "127.0.0.3")["connect"];
    assert!(live["sent"].as_u64().unwrap() >= 5, "{view}");
    // A connect still under way may be pending; of the ended ones at most one was lost: on a
    // loaded 2-CPU machine one loopback connect can miss the 500 ms timeout (CI saw one of six
    // while a 1 Gbit/s udpst test ran beside it); a prober that lost live peers loses them all.
    assert!(live["lost"].as_u64().is_some_and(|n| n <= 1), "{view}");
    let p50 = live["p50_us"].as_f64().expect("a connect time");
    assert!(
        p50 > 0.0 && live["p99_us"].as_f64().unwrap() >= p50,
        "{live}"
    );
    let dead = &peer_of(&view, "127.0.0.9")["connect"];
    assert!(dead["lost"].as_u64().unwrap() >= 2, "{view}");
    assert_eq!(dead["p50_us"], Value::Null, "{dead}");
    assert_eq!(dead["loss"].as_f64(), Some(1.0), "{dead}");
    // The agent does not connect to itself: its own address is off the list, as for UDP.
    assert_eq!(view["peers"].as_array().unwrap().len(), 2, "{view}");
    // Metrics: tried, lost, and the time histogram per peer.
    let m = a.get("127.0.0.2", "/metrics");
    let tried = sample(
        &m,
        "hakaru_mesh_connects_total{peer=\"127.0.0.3\",zone=\"a\"}",
    )
    .unwrap_or_else(|| panic!("no connect series in {m}"));
    assert!(tried >= 5.0, "{tried}");
    // Nor does the connect prober: no series for the agent's own address.
    assert!(
        !m.contains("hakaru_mesh_connects_total{peer=\"127.0.0.2\""),
        "{m}"
    );
    assert!(
        sample(
            &m,
            "hakaru_mesh_connects_lost_total{peer=\"127.0.0.9\",zone=\"dead\"}"
        )
        .is_some_and(|n| n >= 2.0),
        "{m}"
    );
    assert!(
        sample(
            &m,
            "hakaru_mesh_connect_seconds_count{peer=\"127.0.0.3\",zone=\"a\"}"
        )
        .is_some_and(|n| n >= 4.0),
        "{m}"
    );
    // The report carries the connect times of each pair.
    let r = a.report(&[]);
    let p = pair(&r, "127.0.0.2", "127.0.0.3");
    assert!(p["connect_p50_us"].as_f64().is_some_and(|v| v > 0.0), "{p}");
    // An agent without the flag says nothing of connects.
    let plain = Agents::start("noconnect", lines, &IPS[..1], &FAST);
    let v = mesh_view(&plain, "127.0.0.2");
    assert!(peer_of(&v, "127.0.0.3").get("connect").is_none(), "{v}");
    let m = plain.get("127.0.0.2", "/metrics");
    assert!(!m.contains("hakaru_mesh_connect"), "{m}");
}

#[test]
fn an_agent_that_stops_is_named_with_the_evidence() {
    let mut a = Agents::start("stop", THREE, &IPS, &FAST);
    std::thread::sleep(Duration::from_secs(2));
    // Snapshots go to an archive of the test's own, before and after.
    let db = a.dir.join("results.db");
    let db = db.to_str().unwrap();
    let before = a.report(&["--save", "--db", db]);
    assert_eq!(before["suspects"].as_array().unwrap().len(), 0, "{before}");
    // Agent 3 dies: the others' probes to it go unanswered and its view is missing.
    let gone = a.procs.remove(2);
    drop(gone);
    std::thread::sleep(Duration::from_secs(3));
    let r = a.report(&["--save", "--db", db]);
    let h = &r["hosts"][2];
    assert_eq!(h["answered"], false, "{r}");
    assert!(h["error"].as_str().unwrap().contains("refused"), "{h}");
    assert_eq!(
        pair(&r, "127.0.0.2", "127.0.0.4")["loss"].as_f64(),
        Some(1.0)
    );
    assert!(pair(&r, "127.0.0.2", "127.0.0.3")["loss"].as_f64().unwrap() < 0.2);
    let s = r["suspects"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{r}");
    assert_eq!(s[0]["host"], "127.0.0.4");
    let why = s[0]["reason"].as_str().unwrap();
    assert!(why.starts_with("its agent did not answer"), "{why}");
    assert!(
        why.contains("2 of 2 pairs with it are bad (mean loss to it 100.0 %"),
        "{why}"
    );
    // The archive has both snapshots, the worst pair's loss as their headline.
    let o = run(
        &["history", "--db", db, "--kind", "mesh", "--format", "json"],
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let runs = json(&o);
    let headlines: Vec<f64> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["headline"].as_f64().unwrap())
        .collect();
    assert_eq!(headlines.len(), 2, "{runs}");
    assert!(headlines.contains(&100.0), "{runs}");
    // The list shows it as a loss in %.
    let o = run(&["history", "--db", db], Duration::from_secs(20));
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(list.contains("100.000 %"), "{list}");
    // Two snapshots are not compared pair by pair; the message says what to run instead.
    let o = run(
        &["compare", "latest", "latest~1", "--db", db],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("mesh snapshots are not compared"),
        "{}",
        stderr(&o)
    );
    let o = run(
        &["history", "show", "latest", "--db", db],
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("127.0.0.4: its agent did not answer"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // The report: a heatmap per snapshot and the worst pairs over time.
    let html = a.dir.join("mesh.html");
    let o = run(
        &[
            "report",
            "latest",
            "latest~1",
            "--db",
            db,
            "-o",
            html.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<table class=\"heat\">").count(), 2);
    assert!(
        page.contains("title=\"127.0.0.2 -&gt; 127.0.0.4: RTT p50 -, p99 -, loss 100.00 %"),
        "no lost pair's cell in the heatmap"
    );
    // Which pairs the chart draws, and in what order, is tested in hakaru-report.
    assert!(
        page.contains("id=\"mesh-worst-loss\""),
        "no worst-pairs chart"
    );
}

#[test]
fn strangers_get_no_answer_and_an_answer_is_never_larger_than_its_probe() {
    let a = Agents::start(
        "stranger",
        "127.0.0.2\n127.0.0.3\n",
        &["127.0.0.2"],
        &["--mesh-max-reply-rate", "20", "--deny", "127.0.0.8"],
    );
    let to = ("127.0.0.2", a.port);
    // A stranger (127.0.0.9 is not listed): nothing comes back, whatever it sends.
    let s = UdpSocket::bind("127.0.0.9:0").unwrap();
    for seq in 0..5 {
        s.send_to(&probe(64, seq), to).unwrap();
    }
    assert!(replies(&s, Duration::from_millis(800)).is_empty());
    // An address the access list denies: dropped before it is read.
    let d = UdpSocket::bind("127.0.0.8:0").unwrap();
    d.send_to(&probe(64, 1), to).unwrap();
    d.send_to(b"junk", to).unwrap();
    assert!(replies(&d, Duration::from_millis(500)).is_empty());
    // A listed address: answered, with exactly the bytes it sent, small or large.
    let l = UdpSocket::bind("127.0.0.3:0").unwrap();
    for len in [48, 64, 1472] {
        l.send_to(&probe(len, 1), to).unwrap();
        assert_eq!(replies(&l, Duration::from_millis(800)), vec![len]);
    }
    // Garbage, a lying length field and a short datagram: no answer.
    l.send_to(b"GET / HTTP/1.1\r\n\r\n", to).unwrap();
    let mut lying = probe(64, 2);
    lying[40..42].copy_from_slice(&1472u16.to_be_bytes());
    l.send_to(&lying, to).unwrap();
    l.send_to(&probe(64, 3)[..47], to).unwrap();
    assert!(replies(&l, Duration::from_millis(800)).is_empty());
    // A flood from a listed address is answered at --mesh-max-reply-rate (20 a second, a
    // second's worth at once), no faster.
    for seq in 0..200 {
        l.send_to(&probe(64, seq), to).unwrap();
    }
    let n = replies(&l, Duration::from_millis(1500)).len();
    assert!((15..=52).contains(&n), "{n} replies to a flood of 200");
    let m = a.get("127.0.0.2", "/metrics");
    assert_eq!(
        sample(&m, "hakaru_mesh_probes_refused_total{reason=\"stranger\"}"),
        Some(5.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "hakaru_mesh_probes_refused_total{reason=\"malformed\"}"),
        Some(3.0),
        "{m}"
    );
    assert!(
        sample(&m, "hakaru_mesh_probes_refused_total{reason=\"rate\"}").unwrap() >= 140.0,
        "{m}"
    );
    // And the agent still serves everyone else.
    assert!(a.get("127.0.0.2", "/mesh").starts_with("HTTP/1.1 200"));
}

#[test]
fn with_a_key_only_tagged_probes_are_answered() {
    let dir = tmpdir("key");
    let key = dir.join("key");
    std::fs::write(&key, "a-mesh-key-of-at-least-16-bytes\n").unwrap();
    let k = key.display().to_string();
    let mut extra = vec!["--psk-file", &k];
    extra.extend_from_slice(&FAST);
    let a = Agents::start(
        "keyed",
        "127.0.0.2\n127.0.0.3\n",
        &["127.0.0.2", "127.0.0.3"],
        &extra,
    );
    std::thread::sleep(Duration::from_secs(3));
    let r = a.report(&[]);
    let p = pair(&r, "127.0.0.2", "127.0.0.3");
    // Tagged probes are answered: a key mismatch would lose them all. Not exactly 0: a probe
    // can miss its 500 ms timeout beside another test's flood on a 2-core machine.
    assert!(p["loss"].as_f64().unwrap() < 0.2, "{r}");
    assert!(p["probes"].as_u64().unwrap() >= 10, "{p}");
    // An untagged probe from a listed address: not answered, counted.
    let l = UdpSocket::bind("127.0.0.3:0").unwrap();
    l.send_to(&probe(80, 1), ("127.0.0.2", a.port)).unwrap();
    assert!(replies(&l, Duration::from_millis(800)).is_empty());
    let m = a.get("127.0.0.2", "/metrics");
    assert_eq!(
        sample(&m, "hakaru_mesh_probes_refused_total{reason=\"tag\"}"),
        Some(1.0),
        "{m}"
    );
    // A probe too small for the tag is refused at start.
    let o = run(
        &[
            "server",
            "--psk-file",
            &k,
            "--mesh",
            &a.peers.display().to_string(),
            "--mesh-size",
            "64",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "--mesh-size 64: with a key a probe carries a 32-byte tag; at least 80 bytes"
        ),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn members_that_come_and_go_are_followed() {
    let mut extra = vec!["--mesh-refresh", "1s"];
    extra.extend_from_slice(&FAST);
    let mut a = Agents::start(
        "churn",
        "127.0.0.2\n127.0.0.3\n",
        &["127.0.0.2", "127.0.0.3"],
        &extra,
    );
    let peers_of = |a: &Agents| -> Vec<String> {
        let v = a.get("127.0.0.2", "/mesh");
        let body: Value = serde_json::from_str(&v[v.find("\r\n\r\n").unwrap() + 4..]).unwrap();
        body["peers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["dst"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(peers_of(&a), ["127.0.0.3"]);
    // A third joins: it is in the file, and agent 2 probes it after its next reading.
    a.add("127.0.0.4", &extra);
    replace_file(&a.peers, "127.0.0.2\n127.0.0.3\n127.0.0.4\n");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(peers_of(&a), ["127.0.0.3", "127.0.0.4"]);
    // The second leaves the file: dropped.
    replace_file(&a.peers, "127.0.0.2\n127.0.0.4\n");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(peers_of(&a), ["127.0.0.4"]);
    // A broken file keeps the last list, and the view says why.
    replace_file(&a.peers, "127.0.0.2\n127.0.0.4 zone\n");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(peers_of(&a), ["127.0.0.4"]);
    let v = a.get("127.0.0.2", "/mesh");
    assert!(v.contains("line 2: `zone` is not a key=value label"), "{v}");
}

#[test]
fn a_long_list_is_sampled_under_the_rate_cap() {
    // 200 listed peers, all silent but one: at most 20 probes a second in all, each peer
    // once per 10 s cycle.
    let mut lines = String::from("127.0.0.2\n127.0.0.3\n");
    for i in 1..=198 {
        lines.push_str(&format!("127.0.1.{i}\n"));
    }
    let a = Agents::start(
        "cap",
        &lines,
        &["127.0.0.2"],
        &["--mesh-max-rate", "20", "--mesh-metrics-peers", "10"],
    );
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let v = a.get("127.0.0.2", "/mesh");
    let body: Value = serde_json::from_str(&v[v.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    // 199 peers (the agent drops itself from the list) at 20 a second.
    assert_eq!(body["cycle_s"].as_f64(), Some(9.95), "{}", &v[..200]);
    let sent: u64 = body["peers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sent"].as_u64().unwrap())
        .sum();
    let secs = t0.elapsed().as_secs_f64() + 1.0;
    assert!(
        sent as f64 <= 20.0 * secs + 2.0,
        "{sent} probes in {secs:.1} s"
    );
    assert!(sent >= 30, "{sent} probes in 3 s");
    // Past --mesh-metrics-peers the series are per group (no zone label: one group).
    let m = a.get("127.0.0.2", "/metrics");
    assert!(
        m.contains("hakaru_mesh_probes_sent_total{group=\"\"}"),
        "{m}"
    );
    assert!(
        !m.contains("peer=\"127.0.1.5\""),
        "per-peer series past the limit"
    );
}

#[test]
fn bad_peer_lists_and_flags_are_refused_by_name() {
    let dir = tmpdir("bad");
    let cases: [(&str, &[&str], &str); 12] = [
        (
            "",
            &["--mesh", "/nonexistent/peers"],
            "--mesh: peers file /nonexistent/peers: No such file",
        ),
        (
            "10.0.0.1\n10.0.0.1:7\n10.0.0.1:7\n",
            &[],
            "line 3: 10.0.0.1:7 is listed twice (also as 10.0.0.1:7)",
        ),
        (
            "10.0.0.1\n10.0.0.2\n10.0.0.3\n",
            &["--mesh-max-peers", "2"],
            "more than 2 peers (--mesh-max-peers); line 3 is one too many",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-window", "100ms"],
            "--mesh-window 100ms is shorter than --mesh-interval 1s",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-size", "47"],
            "47 is not in 48..=1472",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-connect-interval", "0s"],
            "--mesh-connect-interval must be more than 0",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-connect-interval", "2m"],
            "--mesh-window 60s is shorter than --mesh-connect-interval 120s",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-connect-max-rate", "5"],
            "--mesh-connect-interval <TIME>",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-slice-every", "1h", "--mesh-slice-time", "11s"],
            "a slice is at most 10 s",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-slice-every", "500ms"],
            "--mesh-slice-every 500ms is shorter than a slice (--mesh-slice-time 1s)",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-slice-rate", "5M"],
            "--mesh-slice-every <TIME>",
        ),
        (
            "10.0.0.1\n",
            &["--mesh-slice-every", "1h"],
            "-p 0 is no port its peers listen on: give --mesh-slice-port",
        ),
    ];
    for (i, (text, flags, want)) in cases.iter().enumerate() {
        let f = dir.join(format!("p{i}"));
        std::fs::write(&f, text).unwrap();
        let fs = f.display().to_string();
        let mport = free_port().to_string();
        let mut args = vec![
            "server",
            "-B",
            "127.0.0.1",
            "-p",
            "0",
            "--mesh-port",
            &mport,
        ];
        if !flags.contains(&"--mesh") {
            args.extend(["--mesh", &fs]);
        }
        args.extend_from_slice(flags);
        let o = run(&args, Duration::from_secs(20));
        assert!(!o.status.success(), "{args:?} started");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    // A mesh flag without --mesh is a usage error.
    let o = run(
        &["server", "--mesh-interval", "1s"],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // The report with no agent up names each host and its error.
    let f = dir.join("nobody");
    std::fs::write(&f, "127.0.0.2\n127.0.0.3\n").unwrap();
    let port = free_port().to_string();
    let o = run(
        &[
            "mesh",
            "report",
            "--peers",
            &f.display().to_string(),
            "--port",
            &port,
            "--json",
        ],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(r["suspects"].as_array().unwrap().len(), 2, "{r}");
    assert!(
        r["hosts"][0]["error"].as_str().unwrap().contains("refused"),
        "{r}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_agent_on_the_dual_stack_wildcard_talks_to_ipv4_peers() {
    // The agent binds [::] (IPv6 and IPv4): IPv4 peers reach it as IPv4-mapped addresses,
    // which must still read as the listed peers, and its probes to IPv4 peers must leave.
    let dir = tmpdir("dual");
    let other = free_port();
    let peers = dir.join("peers.txt");
    std::fs::write(&peers, format!("127.0.0.1\n127.0.0.3:{other}\n")).unwrap();
    let port = free_port();
    let ps = port.to_string();
    let f = peers.display().to_string();
    let s = ServerProc::start_with(
        hakaru(),
        "::",
        &["--mesh", &f, "--mesh-port", &ps, "--mesh-interval", "100ms"],
    );
    assert!(s
        .wait_log("mesh agent on", Duration::from_secs(10))
        .is_some());
    // Play the peer at 127.0.0.3: answer the agent's probes by hand for 1.5 s.
    let t = UdpSocket::bind(("127.0.0.3", other)).unwrap();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut answered = 0;
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        t.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok((n, from)) = t.recv_from(&mut buf) {
            assert_eq!(&buf[..4], b"HKMS");
            assert_eq!(buf[5], 1, "a probe");
            assert_eq!(from, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            buf[5] = 2;
            buf[32..40].copy_from_slice(&7u64.to_be_bytes());
            t.send_to(&buf[..n], from).unwrap();
            answered += 1;
        }
    }
    assert!(answered >= 8, "{answered} probes reached the IPv4 peer");
    // Its own probes are answered too (the peer is listed).
    t.send_to(&probe(64, 1), ("127.0.0.1", port)).unwrap();
    assert_eq!(replies(&t, Duration::from_millis(800)), vec![64]);
    let v = http_get_at("127.0.0.1", port, "/mesh");
    let body: Value = serde_json::from_str(&v[v.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    let list = body["peers"].as_array().unwrap();
    // 127.0.0.1 is the agent itself, found through the mapped address of its own reply.
    assert_eq!(list.len(), 1, "{body}");
    assert_eq!(list[0]["dst"], format!("127.0.0.3:{other}"));
    assert!(list[0]["window_replied"].as_u64().unwrap() >= 8, "{body}");
    assert_eq!(list[0]["lost"].as_u64(), Some(0), "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn http_get_at(ip: &str, port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((ip, port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
