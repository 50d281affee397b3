//! `hakaru rpm` on a namespace path whose bottleneck is a tbf of known rate and queue
//! (`limit` in bytes) on the switch port toward the client (the download direction), a box in
//! the middle as a router is (`Bridge::queue_to`), with a loss-based congestion control on the
//! server so the downloads fill the queue:
//!
//! - the truth: with a 250 KB queue at 20 Mbit/s the queue adds limit / rate = 100 ms when
//!   full. With cubic (`hakaru server --rpm-congestion cubic`) the foreign probes' TCP
//!   handshake, TLS handshake and GET, each one pass through the queue, must read within 10 %
//!   of the delay the queue really held over the run's last window (its backlog, sampled with
//!   `tc -s` while the test runs, plus the idle RTT), and that backlog must keep the queue at
//!   least 85 % full, so the probes read the full queue's 100 ms within 15 % below and 10 %
//!   above (cubic backs off by 30 %, so the queue is not always full); the self probes wait
//!   behind the queue too. With a 25 KB queue (10 ms) the one-packet probes read low and the
//!   self probes fall, under 150 ms (with buffers fixed in bytes they read 300 to 420);
//! - Cloudflare's mach (built by `.ci/run`) across the 250 KB queue: its download stage
//!   reads the bottleneck (goodput; self probes behind what the queue held over the stage, read
//!   from its backlog as for `hakaru rpm`, and not much more than the full queue; RPM), its
//!   upload stage, not shaped, an RPM;
//! - against nginx (Debian's nginx-light, HTTP/2 over TLS, the draft's four URLs) on the same
//!   path the foreign probes, each over the delay the queue held under its own server's load,
//!   agree with `hakaru server --rpm-port`'s within 10 % and hakaru's
//!   RPM is no less than nginx's, less 10 % (its buffers follow the rate); both send with the
//!   namespace's default congestion control, set to reno (a namespace may not default to
//!   cubic: `tcp_allowed_congestion_control`), and hakaru's server there uses a CA-signed
//!   certificate given by --tls-cert/--tls-key, verified with --cacert.
//!
//! nginx sends no TLS 1.3 session tickets (`ssl_conf_command NumTickets 0`), as hakaru's
//! server: a ticket in a full queue holds back the first answer of a new connection; and it
//! writes TLS records of 4 KiB (`ssl_buffer_size 4k`, the usual setting for latency).
//! The server's namespace sets `net.ipv4.tcp_notsent_lowat` to hakaru's own 16 KiB, the
//! draft's advice for endpoints, so nginx's socket buffers weigh on its self probes no more
//! than hakaru's. Short runs (500 ms intervals, a window of 3, 16 s at most): the draft's
//! method with smaller parameters. Needs root, tc, nginx and openssl; skips (or fails under
//! HAKARU_TEST_PEERS=required) without them.
#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{
    bin, built_peer, json, kill, make_certs, peer, run_cmd, stderr, wait_child, ServerProc,
};
use super::netns_bridge::{in_ns_must, Bridge};

/// Bottleneck rate, bit/s, as tc spells it and as a number.
const RATE: (&str, f64) = ("20mbit", 20e6);
/// Allowed relative error of a probe time against the queue's delay plus the idle RTT.
const TOLERANCE: f64 = 0.10;
/// Most the in-order self probes may read over the full queue plus the idle RTT. The truth
/// band of the foreign probes is `1 + TOLERANCE`; the self probes read above it by their
/// connection's acknowledgement clock (an answer leaves when an acknowledgement frees room in
/// a window that is all in flight: a segment or two at an eighth of 20 Mbit/s, 5 to 10 ms,
/// more on the slower shares), which no endpoint buffer holds (docs/rpm.md). Seen: 102.9 to
/// 117.2 ms over a 100 ms queue in eleven runs, 2 of 11 over 110; with 16 KiB fixed above
/// each socket, 300 to 420 ms.
const SELF_ABOVE: f64 = 1.25;
/// Allowed relative difference of `hakaru rpm`'s download RPM from mach's on the same path.
/// Seen: ratios 0.87 to 1.05 (means of a run 0.92 and 0.99) while the server held 16 KiB
/// frames ahead of the probes on new connections and did not pace; since it does, 1.08 to
/// 1.17 (means 1.10, 1.13): both clients' self probes got faster, hakaru's trimmed mean more,
/// mach's median too (92 to 98 ms) but its RPM takes the trimmed mean of one interval's few
/// self probes on a random connection, which keeps the probes that waited behind a loss
/// (docs/rpm.md). Since the server waits for room in the socket: 1.06 to 1.23 (means 1.07,
/// 1.11, 1.17).
const MACH_AGREE: f64 = 0.20;
/// Least share of its limit the queue holds on average under the cubic load (seen: 89 to 95 %).
const FULL: f64 = 0.85;
/// The server host (0) and the client host (1) on the switch.
const SERVER: usize = 0;
const CLIENT: usize = 1;
/// The rpm port inside the server namespace (its own: nothing else listens there).
const RPM_PORT: &str = "24443";
/// Every run is bounded.
const LIMIT: Duration = Duration::from_secs(60);

/// The test's parameters: short, the method unchanged; the download only, the direction the
/// tbf shapes (the default loads both, and the self probes would take the upload's
/// connections in turn too).
const PARAMS: [&str; 12] = [
    "-d",
    "down",
    "-i",
    "500ms",
    "--moving-average",
    "3",
    "-t",
    "16",
    "--max-connections",
    "8",
    "--probes",
    "20",
];
/// The probes the figures come from: the last moving-average window.
const WINDOW: Duration = Duration::from_millis(1500);

/// A server host and a client host on a switch whose port toward the client is a tbf of RATE
/// with a FIFO of `limit` bytes; `hakaru server --rpm-port` runs on the server host with
/// `congestion` as the namespace's default and the rpm port's.
struct RpmPath {
    bridge: Bridge,
    server: ServerProc,
}

impl RpmPath {
    fn new(limit: u32, congestion: &str) -> Option<RpmPath> {
        let bridge = Self::bridge(limit, congestion)?;
        Some(Self::serve(bridge, congestion, &[]))
    }

    /// The nginx comparison's path: a 250 KB queue, reno on the server host, and a CA-signed
    /// certificate for the server's address made in `dir` (cert.pem, key.pem, ca.pem).
    fn with_certs(dir: &std::path::Path) -> Option<RpmPath> {
        let bridge = Self::bridge(250_000, "reno")?;
        make_certs(dir, &bridge.members[SERVER].ip);
        let cert = dir.join("cert.pem").display().to_string();
        let key = dir.join("key.pem").display().to_string();
        Some(Self::serve(
            bridge,
            "reno",
            &["--tls-cert", &cert, "--tls-key", &key],
        ))
    }

    fn bridge(limit: u32, congestion: &str) -> Option<Bridge> {
        let bridge = Bridge::setup(2, &[("tc", "iproute2")])?;
        bridge.queue_to(CLIENT, RATE.0, limit);
        let ns = &bridge.members[SERVER].ns;
        in_ns_must(ns, &["sysctl", "-qw", "net.ipv4.tcp_notsent_lowat=16384"]);
        if congestion != "cubic" {
            let cc = format!("net.ipv4.tcp_congestion_control={congestion}");
            in_ns_must(ns, &["sysctl", "-qw", &cc]);
        }
        Some(bridge)
    }

    fn serve(bridge: Bridge, congestion: &str, server_flags: &[&str]) -> RpmPath {
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &bridge.members[SERVER].ns, bin()]);
        let mut flags = vec!["--rpm-port", RPM_PORT, "--rpm-congestion", congestion];
        flags.extend_from_slice(server_flags);
        let server = ServerProc::start_with(cmd, &bridge.members[SERVER].ip, &flags);
        RpmPath { bridge, server }
    }

    fn server_ip(&self) -> &str {
        &self.bridge.members[SERVER].ip
    }

    /// Runs hakaru on the client host and returns its JSON.
    fn client_json(&self, args: &[&str]) -> Value {
        let mut cmd = Command::new("ip");
        cmd.env_remove("RUST_LOG")
            .args(["netns", "exec", &self.bridge.members[CLIENT].ns, bin()])
            .args(args);
        let o = run_cmd(&mut cmd, LIMIT);
        assert!(o.status.success(), "hakaru {args:?}: {}", stderr(&o));
        json(&o)
    }

    /// The idle round trip, ms: the median of `hakaru latency` over TCP (the server's data
    /// path, before the load).
    fn idle_rtt_ms(&self) -> f64 {
        let port = self.server.port_s();
        let doc = self.client_json(&[
            "latency",
            self.server_ip(),
            "-p",
            &port,
            "-t",
            "1",
            "-i",
            "0",
            "--json",
        ]);
        doc["latency"]["rtt"]["p50_us"].as_f64().expect("p50") / 1000.0
    }

    /// The idle TLS handshake, ms: the median of four handshakes with the responsiveness
    /// endpoint (`hakaru http` of its `/small`, one request per connection) before the load.
    /// It is a round trip and both ends' cryptography: what a TLS probe adds to the queue's
    /// delay, as the idle round trip is for the TCP and HTTP probes.
    fn idle_tls_ms(&self) -> f64 {
        let url = format!("https://{}:{RPM_PORT}/small", self.server_ip());
        let doc = self.client_json(&["http", &url, "--insecure", "-P", "4", "-n", "1", "--json"]);
        doc["http"]["tls_ms"]["median_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("no tls_ms: {}", doc["http"]))
    }

    /// `hakaru rpm URL PARAMS --json` on the client host, the delay the bottleneck's queue
    /// held on average over the run's last WINDOW, ms, and the server's connections on the
    /// rpm port PACED_AT into the run.
    fn rpm(&self, url: &str, extra: &[&str]) -> (Value, f64, Paced) {
        let mut args = vec!["rpm", url];
        args.extend_from_slice(&PARAMS);
        args.extend_from_slice(extra);
        args.push("--json");
        let (doc, samples, paced) = self.loaded(|| self.client_json(&args));
        let to = Instant::now();
        (doc, held_ms(&samples, to - WINDOW, to), paced)
    }

    /// Runs `run` while the bottleneck's backlog is sampled every 50 ms; what `run` returned,
    /// the samples, and the server's connections on the rpm port PACED_AT into the run.
    fn loaded<T>(&self, run: impl FnOnce() -> T) -> (T, Vec<(Instant, u64)>, Paced) {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let (bridge, done) = (&self.bridge, &done);
            let sampler = s.spawn(move || {
                let (mut samples, mut paced) = (Vec::new(), Paced::default());
                let t0 = Instant::now();
                while !done.load(Ordering::Relaxed) && samples.len() < 2000 {
                    samples.push((Instant::now(), bridge.backlog_to(CLIENT)));
                    if paced.seen == 0 && t0.elapsed() >= PACED_AT {
                        paced = Paced::read(&bridge.members[SERVER].ns);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                (samples, paced)
            });
            let out = run();
            done.store(true, Ordering::Relaxed);
            let (samples, paced) = sampler.join().expect("sampler");
            (out, samples, paced)
        })
    }
}

/// The delay the bottleneck's queue held on average between `from` and `to`, ms: the mean of
/// its backlog samples there over the rate.
fn held_ms(samples: &[(Instant, u64)], from: Instant, to: Instant) -> f64 {
    let within: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= from && *t <= to)
        .map(|(_, b)| *b)
        .collect();
    assert!(
        within.len() >= 5,
        "{} backlog samples in {:?}",
        within.len(),
        to - from
    );
    let mean = within.iter().sum::<u64>() as f64 / within.len() as f64;
    mean * 8.0 / RATE.1 * 1000.0
}

/// When the server's connections are read during a run (which takes 4 to 6 s here): the load
/// connections opened first have run for more than a second.
const PACED_AT: Duration = Duration::from_secs(2);

/// The server's established connections on the rpm port, how many of them the kernel
/// paces (`ss -ti` shows `pacing_rate RATE/MAX` for a socket with SO_MAX_PACING_RATE set,
/// `pacing_rate RATE` for the others), and the server's descriptors of them (`ss -p` lists
/// each: a slow connection has a second one, for the wait for room under its unsent mark,
/// hakaru_sys::SendRoom).
#[derive(Debug, Default)]
struct Paced {
    seen: usize,
    paced: usize,
    fds: usize,
}

impl Paced {
    fn read(ns: &str) -> Paced {
        let filter = format!("sport = :{RPM_PORT}");
        let o = in_ns_must(ns, &["ss", "-tinp", "state", "established", &filter]);
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        Paced {
            seen: text.matches(&format!(":{RPM_PORT} ")).count(),
            paced: text.matches("bps/").count(),
            fds: text.matches(",fd=").count(),
        }
    }
}

fn probe(doc: &Value, key: &str) -> f64 {
    doc["rpm"]["probes"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key}: {}", doc["rpm"]))
}

#[test]
fn a_full_tbf_queue_reads_as_its_delay_and_a_small_one_reads_low() {
    for (limit, full_ms) in [(250_000u32, 100.0), (25_000, 10.0)] {
        let Some(path) = RpmPath::new(limit, "cubic") else {
            return;
        };
        let idle = path.idle_rtt_ms();
        let idle_tls = path.idle_tls_ms();
        let url = format!("https://{}:{RPM_PORT}", path.server_ip());
        let (doc, queue_ms, paced) = path.rpm(&url, &["--insecure"]);
        let (tcp, tls, http, own) = (
            probe(&doc, "tcp_ms"),
            probe(&doc, "tls_ms"),
            probe(&doc, "http_ms"),
            probe(&doc, "self_ms"),
        );
        eprintln!(
            "netns rpm: queue {limit} B = {full_ms} ms full, held {queue_ms:.1} ms, idle {idle:.2} ms (TLS {idle_tls:.2} ms): tcp {tcp:.1}, tls {tls:.1}, http {http:.1}, self {own:.1} ms (in order {} ms, {} of {} behind a loss), {:.0} RPM, {}, server connections {paced:?}",
            doc["rpm"]["probes"]["self_in_order_ms"],
            doc["rpm"]["probes"]["self_behind_loss"],
            doc["rpm"]["probes"]["selfp"],
            doc["rpm"]["rpm"], doc["rpm"]["download"]
        );
        let bps = doc["rpm"]["download"].as_f64().expect("download");
        assert!(
            bps > 0.8 * RATE.1 && bps < RATE.1,
            "goodput {bps} on a {} path",
            RATE.0
        );
        if full_ms >= 100.0 {
            // The load kept the queue nearly full: what the probes must read is there.
            assert!(
                queue_ms >= FULL * full_ms,
                "the queue held {queue_ms:.1} ms on average, under {FULL} x {full_ms} ms"
            );
            // Each foreign probe is one pass through the queue: it reads what the queue held,
            // plus what it takes on an idle path. For TLS that is the handshake's cryptography
            // too, which grows with the CPUs' load (12 ms above the queue once, with two busy
            // loops beside the tests; 112.5 ms against a full queue of 102.2 in CI): up to
            // 15 ms more is allowed for it.
            for (what, ms, base, cpu) in [
                ("tcp", tcp, idle, 0.0),
                ("tls", tls, idle_tls, 15.0),
                ("http", http, idle, 0.0),
            ] {
                // The lower bound takes the plain TCP idle time: the TLS handshake's share of
                // `base` is CPU time, which the load beside the test changes between the idle
                // reading and the probes (idle TLS 21.1 ms once, its probes then 97.7 ms
                // against an average queue of 88.6).
                let held = queue_ms + idle;
                let full = full_ms + base + cpu;
                // Between what the queue held on average and the full queue, within the
                // tolerance: a probe meets the queue at some fill between the two (seen: TLS at
                // 101.8 ms with the average 92.3 and the full queue 100.8; HTTP at 84.3 with
                // the average 86.1). How full the queue stayed is checked above.
                assert!(
                    ms >= (1.0 - TOLERANCE) * held && ms <= (1.0 + TOLERANCE) * full,
                    "{what} {ms:.1} ms: not between the queue's average {held:.1} ms and the full \
                     queue {full:.1} ms (idle time {idle:.2} and {base:.2} ms included) within {TOLERANCE}"
                );
            }
            // The self probes wait behind the queue and their own connection's data.
            let full = full_ms + idle;
            assert!(own >= full, "self {own:.1} ms < {full:.1}");
            // Eight cubic flows on a full drop-tail queue lose often: some self probes wait
            // behind a loss on their connection (seen: 9 and 10 of 27 to 29), and the rest are
            // told apart (`self_in_order_ms`). A split that saw no loss here, or counted more
            // probes behind one than there were, would be misreading TCP_INFO.
            let (n, behind) = (
                doc["rpm"]["probes"]["selfp"].as_u64().expect("selfp"),
                doc["rpm"]["probes"]["self_behind_loss"]
                    .as_u64()
                    .expect("self_behind_loss"),
            );
            // The server paces its load connections here (their rates are shares of 20
            // Mbit/s, hakaru_rpm::shallow): unpaced, a probe's answer waited for the next burst
            // of its connection's acknowledgements, up to a round trip (seen: in-order self
            // probes 121 to 151 ms; paced 108 to 117 in this test; 99 to 114 since TLS is
            // handed a write only when the socket has room).
            assert!(
                paced.paced >= 1 && paced.paced <= paced.seen,
                "{paced:?}: no paced connection on the rpm port {} into the run",
                PACED_AT.as_secs()
            );
            // The slow connections wait for room in their sockets through a second descriptor
            // each (docs/security.md: at most two per connection; seen: 13 for 7, 10 for 5).
            assert!(
                paced.fds > paced.seen && paced.fds <= 2 * paced.seen,
                "{paced:?}: the server's descriptors of its rpm connections"
            );
            let in_order = probe(&doc, "self_in_order_ms");
            assert!(
                behind > 0 && behind < n,
                "{behind} of {n} self probes behind a loss, the others {in_order:.1} ms"
            );
            // The self probes that no loss held read the path's queue and what waits ahead of
            // their answer on their own connection: at least the queue's average, at most
            // SELF_ABOVE of the full queue.
            let (held, full) = (queue_ms + idle, full_ms + idle);
            assert!(
                in_order >= (1.0 - TOLERANCE) * held && in_order <= SELF_ABOVE * full,
                "self probes in order {in_order:.1} ms: not between {} x the queue's average \
                 {held:.1} ms and {SELF_ABOVE} x the full queue {full:.1} ms",
                1.0 - TOLERANCE
            );
        } else {
            // A short queue: the probes of one packet each way (the TCP handshake, the GET)
            // far under the long queue's 100 ms. The TLS handshake's flight of several
            // packets is often cut by this queue's drops and waits for a retransmission
            // (seen: 9 to 280 ms), so it is not checked here.
            for (what, ms) in [("tcp", tcp), ("http", http)] {
                assert!(ms < 40.0, "{what} {ms:.1} ms with a {full_ms} ms queue");
            }
            // The self probes wait behind the queue, their connection's loss recovery (eight
            // cubic flows in 17 packets of queue lose often) and a few milliseconds of its
            // data above the socket: the server and the client size what they buffer by each
            // connection's rate (hakaru_rpm::shallow). With fixed 16 KiB buffers they read 300
            // to 420 ms here (seen since: 30 to 91 ms). The bound is on the probes no loss
            // held: a probe whose connection waited for a retransmission timeout (200 ms at
            // least) moves the trimmed mean of 27 by tens of milliseconds (seen: all self
            // probes 390.8 ms once, the in-order ones 21.7; in-order 20.9 to 38.8 in twelve
            // runs; 65.0 once in CI, 17 of 28 probes behind a loss). The bound, 100 ms, stays
            // far under what fixed buffers read and under one retransmission timeout. None in
            // order (every self probe behind a loss) leaves nothing to bound.
            let in_order = doc["rpm"]["probes"]["self_in_order_ms"].as_f64();
            assert!(
                own > tcp && in_order.is_none_or(|ms| ms > tcp && ms < 100.0),
                "self {own:.1} ms, in order {in_order:?}, with a {full_ms} ms queue (tcp {tcp:.1} ms)"
            );
        }
    }
}

/// `mach rpm` (its download stage, then its upload stage, 10 s each) on the client host
/// against the path's server: its JSON, and the delay the queue held on average over its
/// download stage, ms (from its log line "running download test" to "running upload test",
/// read from its stderr as it runs).
fn mach_json(path: &RpmPath, mach: &std::path::Path) -> (Value, f64) {
    let config = format!("https://{}:{RPM_PORT}/.well-known/nq", path.server_ip());
    let mut cmd = Command::new("ip");
    cmd.env_remove("RUST_LOG")
        .args(["netns", "exec", &path.bridge.members[CLIENT].ns])
        .arg(mach)
        .args([
            "rpm",
            "--config",
            &config,
            "--insecure",
            "--disable-aim-scores",
        ])
        .args(["--test-duration", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let ((o, log), samples, _) = path.loaded(|| {
        let mut child = cmd.spawn().expect("spawn mach");
        let err = child.stderr.take().expect("mach's stderr");
        let reader = std::thread::spawn(move || {
            let lines = std::io::BufRead::lines(std::io::BufReader::new(err));
            lines
                .map_while(Result::ok)
                .map(|l| (Instant::now(), l))
                .collect::<Vec<_>>()
        });
        let o = wait_child(child, Duration::from_secs(120));
        (o, reader.join().expect("mach's stderr reader"))
    });
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let text: Vec<&str> = log.iter().map(|(_, l)| l.as_str()).collect();
    assert!(o.status.success(), "mach: {out}\n{}", text.join("\n"));
    let at = |what: &str| {
        log.iter()
            .find(|(_, l)| l.contains(what))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("mach logged no \"{what}\": {}", text.join("\n")))
    };
    let held = held_ms(
        &samples,
        at("running download test"),
        at("running upload test"),
    );
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!(
            "mach's stdout is not JSON ({e}): {out}\n{}",
            text.join("\n")
        )
    });
    (doc, held)
}

/// Cloudflare's mach on the client host against `hakaru server --rpm-port` across the
/// 250 KB queue (100 ms full) toward the client, cubic on the server: its download stage reads
/// the bottleneck (goodput under the tbf's rate, self probes behind what the queue held over
/// the stage and not much more than the full queue, an RPM under what that delay would give),
/// and its upload stage, the other way and not shaped, runs past the shaped rate with an RPM.
/// `hakaru rpm -d down` on the same path, alternating with mach, reads the same download RPM
/// within [`MACH_AGREE`] (the mean of the pairs' ratios: two pairs, or three when two are out
/// of it). mach is built by `.ci/run` (tests/it/rpm_mach.rs has the loopback run).
#[test]
fn mach_reads_the_full_queue_on_the_download_and_agrees_with_hakaru_rpm() {
    let Some(mach) = built_peer("mach", "mach") else {
        return;
    };
    let Some(path) = RpmPath::new(250_000, "cubic") else {
        return;
    };
    let url = format!("https://{}:{RPM_PORT}", path.server_ip());
    let mut ratios: Vec<f64> = Vec::new();
    let mut owns: Vec<f64> = Vec::new();
    let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    while ratios.len() < 2 || (ratios.len() < 3 && (mean(&ratios) - 1.0).abs() > MACH_AGREE) {
        let (doc, mach_held) = mach_json(&path, &mach);
        let (hk, queue_ms, _) = path.rpm(&url, &["--insecure"]);
        eprintln!(
            "netns rpm: mach across a 100 ms queue (held {mach_held:.1} ms over its download): {doc}; hakaru rpm {} RPM (probes {}, queue held {queue_ms:.1} ms)",
            hk["rpm"]["rpm"], hk["rpm"]["probes"]
        );
        let (rpm_down, own) = check_mach(&doc, mach_held);
        ratios.push(hk["rpm"]["rpm"].as_f64().expect("rpm") / rpm_down);
        owns.push(own);
    }
    // mach's loaded latency is the median of its self probes: they wait behind the queue and a
    // few milliseconds of their connection's data, not behind the server's buffers (sized by
    // each connection's rate, hakaru_rpm::shallow; with fixed 16 KiB buffers mach read 235 ms
    // here, since: 93 to 107 ms, 84.6 to 95.7 once the server paced). The mean of the passes.
    let own = mean(&owns);
    assert!(
        own <= 1.25 * 100.0,
        "mach's self probes {owns:?} ms behind a 100 ms queue"
    );
    let ratio = mean(&ratios);
    assert!(
        (ratio - 1.0).abs() <= MACH_AGREE,
        "hakaru rpm / mach download RPM {ratios:?}, mean {ratio:.3}"
    );
}

/// mach's figures across the 100 ms queue (the test above); its download RPM and loaded
/// latency (the median of its self probes), ms.
fn check_mach(doc: &Value, held: f64) -> (f64, f64) {
    let (down, up) = (&doc["download"], &doc["upload"]);
    let num = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k}: {doc}"));
    for d in [down, up] {
        assert_eq!(d["failed_connections"].as_u64().unwrap_or(0), 0, "{doc}");
    }
    let bps = num(down, "throughput");
    assert!(
        bps > 0.5 * RATE.1 && bps < RATE.1,
        "mach's download goodput {bps} on a {} path",
        RATE.0
    );
    // The download loaded the queue, and mach's self probes (their median) waited behind what
    // it held over the stage, within the tolerance: the queue's own delay is the truth, not
    // its limit (the server paces its load connections, and the queue held 80 ms where an
    // unpaced one filled it: mach's self probes read 80.3 ms once in CI).
    let full_ms = 100.0;
    assert!(
        held >= 0.5 * full_ms,
        "the queue held {held:.1} ms over mach's download, under half of its {full_ms} ms"
    );
    let least = (1.0 - TOLERANCE) * held;
    let own = num(down, "loaded_latency_ms");
    assert!(
        own >= least,
        "mach's self probes {own:.1} ms behind a queue that held {held:.1} ms (least {least:.1})"
    );
    let (rpm_down, rpm_up) = (num(down, "rpm"), num(up, "rpm"));
    assert!(
        rpm_down > 0.0 && rpm_down < 60_000.0 / least,
        "mach's download RPM {rpm_down} across a queue that held {held:.1} ms"
    );
    // The upload is not shaped, but its ACKs (about 9 Mbit/s at 370 Mbit/s of upload) cross
    // the shaped 20 Mbit/s direction and can hold a queue there, so its RPM is not always
    // above the download's (measured: 461 to 575 against 484 to 498). What is sure is that the
    // upload ran past the shaped rate, and that mach read an RPM for it.
    let up_bps = num(up, "throughput");
    assert!(
        up_bps > 4.0 * RATE.1 && rpm_up > 0.0,
        "the upload, not shaped: {up_bps} bit/s, {rpm_up} RPM (download {rpm_down} RPM)"
    );
    (rpm_down, own)
}

/// nginx in the server namespace, serving the draft's four URLs over HTTP/2 and TLS; killed
/// by PID (one process: `master_process off`) and its directory removed when dropped.
struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    fn start(path: &RpmPath, dir: PathBuf, port: u16) -> Nginx {
        let d = dir.display();
        let www = dir.join("www");
        std::fs::create_dir_all(www.join(".well-known")).expect("www");
        std::fs::write(www.join("small"), b"x").expect("small");
        // 8 GiB as the draft asks, sparse: no disk is written.
        std::fs::File::create(www.join("large"))
            .and_then(|f| f.set_len(8 << 30))
            .expect("large");
        let base = format!("https://{}:{port}", path.server_ip());
        std::fs::write(
            www.join(".well-known/nq"),
            format!(
                r#"{{"version": 1, "urls": {{"large_download_url": "{base}/large", "small_download_url": "{base}/small", "upload_url": "{base}/upload"}}}}"#
            ),
        )
        .expect("nq");
        let conf = format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 512; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  keepalive_requests 100000;
  server {{
    listen {ip}:{port} ssl http2;
    ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
    ssl_conf_command NumTickets 0;
    ssl_buffer_size 4k;
    root {d}/www;
    location = /.well-known/nq {{ default_type application/json; }}
    location / {{ default_type application/octet-stream; }}
    location = /upload {{ client_max_body_size 0; return 200; }}
  }}
}}
",
            ip = path.server_ip()
        );
        std::fs::write(dir.join("nginx.conf"), conf).expect("nginx.conf");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &path.bridge.members[SERVER].ns,
                "nginx",
                "-c",
            ])
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        Nginx { child, dir }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        kill(self.child.id(), 9);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn nginx_and_hakaru_server_read_the_same_path_and_hakaru_is_no_less_responsive() {
    if !peer("nginx", "nginx-light") || !peer("openssl", "openssl") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hakaru-rpm-nginx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    // The address the certificate names: the bridge's, made before the servers start.
    let Some(path) = RpmPath::with_certs(&dir) else {
        return;
    };
    let ca = dir.join("ca.pem").display().to_string();
    let hk_url = format!("https://{}:{RPM_PORT}", path.server_ip());
    let ng_port = 24_444;
    let nginx = Nginx::start(&path, dir.clone(), ng_port);
    let ng_url = format!("https://{}:{ng_port}/.well-known/nq", path.server_ip());
    // nginx may take a moment to listen.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = run_cmd(
            Command::new("ip").args([
                "netns",
                "exec",
                &path.bridge.members[CLIENT].ns,
                "sh",
                "-c",
                &format!("exec 3<>/dev/tcp/{}/{ng_port}", path.server_ip()),
            ]),
            Duration::from_secs(5),
        );
        if o.status.success() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Alternating runs, the ratio of each pair compared: the mean of two pairs, or, when
    // those two are out of tolerance, of four. The suite's other tests share the two CPUs
    // with this one (only namespace tests wait for each other), and a busy CPU delays either
    // server's wake-ups and so its probes; two more pairs average that out, while a real
    // difference of more than 10 % still fails.
    // Each pair gives two ratios: of the foreign probes' GET, each read against the delay the
    // queue held under its own server's load plus the idle RTT (the path, which must agree:
    // hakaru's server paces its load, so its queue may hold less than nginx's, seen 79.8 to
    // 84.3 ms against 82.5 to 88.1, and the raw GETs once read 0.85 to 0.93 of nginx's in CI),
    // and of the RPM (hakaru's server keeps less of each connection's data above its socket than
    // nginx with its 4 KiB records and 16 KiB unsent mark, so its self probes read faster:
    // its RPM must not be under nginx's).
    let idle = path.idle_rtt_ms();
    let mut ratios: Vec<f64> = Vec::new();
    let mut paths: Vec<f64> = Vec::new();
    let mut selfs: Vec<f64> = Vec::new();
    let mean = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    let off = |r: &[f64]| (mean(r) - 1.0).abs() > TOLERANCE;
    while ratios.len() < 2 || (ratios.len() < 4 && (off(&paths) || mean(&ratios) < 1.0 - TOLERANCE))
    {
        let (hk, hk_q, _) = path.rpm(&hk_url, &["--cacert", &ca]);
        let (ng, ng_q, _) = path.rpm(&ng_url, &["--cacert", &ca]);
        let (h, n) = (
            hk["rpm"]["rpm"].as_f64().expect("rpm"),
            ng["rpm"]["rpm"].as_f64().expect("rpm"),
        );
        eprintln!(
            "netns rpm: hakaru server {h:.0} RPM (probes {}, {}, {} over {}, queue held {hk_q:.1} ms), nginx {n:.0} RPM (probes {}, {}, {} over {}, queue held {ng_q:.1} ms)",
            hk["rpm"]["probes"],
            hk["rpm"]["tls"],
            hk["rpm"]["download"],
            hk["rpm"]["connections"],
            ng["rpm"]["probes"],
            ng["rpm"]["tls"],
            ng["rpm"]["download"],
            ng["rpm"]["connections"]
        );
        assert_eq!(ng["rpm"]["protocol"], "h2");
        ratios.push(h / n);
        paths.push(
            (probe(&hk, "http_ms") / (hk_q + idle)) / (probe(&ng, "http_ms") / (ng_q + idle)),
        );
        selfs.push(probe(&hk, "self_ms") / probe(&ng, "self_ms"));
    }
    drop(nginx);
    eprintln!("netns rpm: hakaru server / nginx: path {paths:.3?}, RPM {ratios:.3?}, self probes {selfs:.3?}");
    let path_ratio = mean(&paths);
    assert!(
        (path_ratio - 1.0).abs() <= TOLERANCE,
        "hakaru server / nginx foreign GET, each over its queue's delay plus the idle RTT \
         ({idle:.2} ms), {paths:?}, mean {path_ratio:.3}"
    );
    let ratio = mean(&ratios);
    assert!(
        ratio >= 1.0 - TOLERANCE,
        "hakaru server / nginx RPM {ratios:?}, mean {ratio:.3}"
    );
    // With its buffers fixed in bytes hakaru's server read the self probes nginx reads (300
    // to 420 ms both); sized by each connection's rate, about half (seen: 0.39 to 0.78).
    let own = mean(&selfs);
    assert!(
        own <= 1.0 - TOLERANCE,
        "hakaru server / nginx self probes {selfs:?}, mean {own:.3}"
    );
}
