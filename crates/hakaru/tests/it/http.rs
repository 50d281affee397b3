//! `hakaru http` against a real nginx (Debian's, started here on a loopback port with a
//! generated config: a plain server, a TLS server with a test CA's certificate), against
//! hakaru's own endpoint (with wget and curl as its clients too), and on a tbf-shaped veth
//! beside wget. Without nginx or openssl the nginx tests print why and pass without running,
//! except under HAKARU_TEST_PEERS=required (`.ci/run`), where they fail (`common::peer`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::common::{free_port, json, make_certs, peer, run, run_cmd, stderr, ServerProc};
use super::netns_link::{Link, Shaping};

/// Size of the file nginx serves.
const SIZE: u64 = 24 << 20;

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("hakaru-http-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("www")).expect("scratch dir");
        Scratch(d)
    }
    fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// nginx on two loopback ports (plain and TLS), stopped by its PID when dropped. It runs as
/// one process (`master_process off`): killing a master by PID would leave its workers behind.
struct Nginx {
    child: Child,
    port: u16,
    tls_port: u16,
    dir: Scratch,
}

impl Nginx {
    /// Starts nginx, or (nginx or openssl missing) prints why it cannot and returns `None`;
    /// under HAKARU_TEST_PEERS=required a missing one fails the test instead.
    fn start(tag: &str) -> Option<Nginx> {
        if !peer("nginx", "nginx-light") || !peer("openssl", "openssl") {
            return None;
        }
        let dir = Scratch::new(tag);
        let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(dir.0.join("www/big.bin"), data).expect("write big.bin");
        make_certs(&dir.0, "127.0.0.1");
        let (port, tls_port) = (free_port(), free_port());
        let d = dir.0.display();
        let conf = format!(
            "daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  keepalive_requests 100000;
  server {{
    listen 127.0.0.1:{port};
    root {d}/www;
    location = /moved {{ return 302 /big.bin; }}
  }}
  server {{
    listen 127.0.0.1:{tls_port} ssl;
    ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
    root {d}/www;
  }}
}}
"
        );
        std::fs::write(dir.0.join("nginx.conf"), conf).expect("nginx.conf");
        let child = Command::new(if Path::new("/usr/sbin/nginx").exists() {
            "/usr/sbin/nginx"
        } else {
            "nginx"
        })
        .args(["-c", &dir.path("nginx.conf"), "-p", &dir.path("")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nginx");
        let n = Nginx {
            child,
            port,
            tls_port,
            dir,
        };
        for p in [port, tls_port] {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", p)).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "nginx did not listen on {p}: {}",
                    std::fs::read_to_string(n.dir.0.join("error.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(n)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn tls_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.tls_port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        super::common::kill(self.child.id(), 9);
        let _ = self.child.wait();
    }
}

/// Runs `hakaru http ARGS -J` and returns its exit code and JSON.
fn http(args: &[&str]) -> (Option<i32>, Value, String) {
    let mut a = vec!["http"];
    a.extend_from_slice(args);
    a.push("-J");
    let o = run(&a, Duration::from_secs(120));
    (o.status.code(), json(&o), stderr(&o))
}

fn h(doc: &Value, key: &str) -> u64 {
    doc["http"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("http.{key} in {}", doc["http"]))
}

#[test]
fn nginx_downloads_count_every_body_byte_on_each_connection() {
    let Some(n) = Nginx::start("plain") else {
        return;
    };
    let (code, doc, err) = http(&[&n.url("/big.bin"), "-P", "4", "-i", "0.2"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc["test"], "http");
    assert_eq!(h(&doc, "bytes"), 4 * SIZE);
    assert_eq!((h(&doc, "requests"), h(&doc, "completed")), (4, 4));
    assert_eq!(doc["http"]["status"]["200"], 4);
    for c in doc["http"]["connections"].as_array().unwrap() {
        assert_eq!(c["bytes"], SIZE, "{c}");
        assert!(c["ttfb_ms"]["median_ms"].as_f64().unwrap() > 0.0);
        assert!(c["connect_ms"]["count"] == 1);
    }
    // The intervals add up to the total.
    let summed: u64 = doc["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["sums"].as_array().unwrap().clone())
        .map(|s| s["receiver_bytes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(summed, 4 * SIZE);
    // A redirect is followed: one request, two statuses.
    let (code, doc, err) = http(&[&n.url("/moved")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), SIZE);
    assert_eq!(doc["http"]["status"]["302"], 1);
    assert_eq!(doc["http"]["status"]["200"], 1);
}

#[test]
fn nginx_over_tls_verifies_with_the_given_ca() {
    let Some(n) = Nginx::start("tls") else {
        return;
    };
    let ca = n.dir.path("ca.pem");
    let (code, doc, err) = http(&[&n.tls_url("/big.bin"), "--cacert", &ca, "-P", "2"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), 2 * SIZE);
    let c = &doc["http"]["connections"][0];
    assert!(c["tls"].as_str().unwrap().contains("TLS"), "{c}");
    assert!(doc["http"]["tls_ms"]["count"].as_u64().unwrap() == 2);
    // Without the CA the certificate is refused, naming it; --insecure skips the check.
    let (code, _, err) = http(&[&n.tls_url("/big.bin")]);
    assert_eq!(code, Some(1));
    assert!(err.contains("certificate"), "{err}");
    let (code, doc, err) = http(&[&n.tls_url("/big.bin"), "--insecure"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), SIZE);
    // A file that is not a certificate is named.
    let o = run(
        &[
            "http",
            &n.tls_url("/big.bin"),
            "--cacert",
            &n.dir.path("nginx.conf"),
        ],
        Duration::from_secs(30),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--cacert"), "{err}");
}

#[test]
fn nginx_keep_alive_repeats_requests_and_ranges_split_the_file() {
    let Some(n) = Nginx::start("keepalive") else {
        return;
    };
    let (code, doc, err) = http(&[&n.url("/big.bin"), "-t", "2", "-P", "2"]);
    assert_eq!(code, Some(0), "{err}");
    let (req, done) = (h(&doc, "requests"), h(&doc, "completed"));
    assert!(done >= 2 && req >= done, "{req} requests, {done} completed");
    let bytes = h(&doc, "bytes");
    // The headline counts what arrived inside the -t window: a request that straddles its
    // end (one per connection at most) counts only its part inside.
    assert!(
        bytes >= (done - 2) * SIZE && bytes <= req * SIZE,
        "{bytes} B for {done} completed of {req}"
    );
    for c in doc["http"]["connections"].as_array().unwrap() {
        assert_eq!(c["connects"], 1, "keep-alive reuses the connection: {c}");
    }
    // The same over TLS: the body's receive low-water mark (raised while much is left, lowered
    // before the end, allowing for what TLS holds) never holds a read for bytes that will not
    // come, so requests follow each other as fast as over plain HTTP.
    let ca = n.dir.path("ca.pem");
    let (code, doc, err) = http(&[&n.tls_url("/big.bin"), "--cacert", &ca, "-t", "2"]);
    assert_eq!(code, Some(0), "{err}");
    let done = h(&doc, "completed");
    assert!(done >= 20, "{done} TLS requests of {SIZE} B in 2 s");
    // --range: four parts that make the file exactly.
    let (code, doc, err) = http(&[&n.url("/big.bin"), "--range", "-P", "4"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), SIZE);
    assert_eq!(doc["http"]["status"]["206"], 4);
}

#[test]
fn a_404_and_a_body_cut_short_are_errors_with_the_figures_kept() {
    if let Some(n) = Nginx::start("errors") {
        let (code, doc, err) = http(&[&n.url("/not-there")]);
        assert_eq!(code, Some(1));
        assert!(err.contains("404 Not Found"), "{err}");
        assert_eq!(doc["http"]["status"]["404"], 1);
        assert_eq!(h(&doc, "failed"), 1);
    }
    // A server that promises 100000 bytes, sends 1000 and closes.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut head = [0u8; 1024];
            let _ = s.read(&mut head);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
            let _ = s.write_all(&[b'x'; 1000]);
        }
    });
    let (code, doc, err) = http(&[&format!("http://127.0.0.1:{port}/f")]);
    let _ = server.join();
    assert_eq!(code, Some(1));
    assert!(
        err.contains("closed after 1000 of 100000 body bytes"),
        "{err}"
    );
    assert_eq!(h(&doc, "bytes"), 1000);
    // Bad command lines are usage errors.
    for bad in [
        vec!["http", "ftp://x/"],
        vec!["http", "-X", "PUT"],
        vec!["http", "-H", "no colon"],
        vec!["http", "http://a/", "http://b/", "--range", "-P", "2"],
    ] {
        let o = run(&bad, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
}

#[test]
fn the_endpoint_serves_hakaru_wget_and_curl_and_survives_bad_requests() {
    // The embedded default: no URL, an in-process endpoint on loopback.
    let dir = Scratch::new("embedded");
    let out = dir.path("r.json");
    let (code, doc, err) = http(&["-n", "10M", "-P", "2", "-i", "0.01", "-o", &out]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), 20 << 20);
    assert!(doc["embedded_server"].as_bool().unwrap());
    // The pictures: one goodput chart (per connection and summed), no empty panes.
    let html = dir.path("r.html");
    let o = run(&["report", &out, "-o", &html], Duration::from_secs(30));
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("id=\"r1-rate-down\""), "no goodput chart");
    assert!(
        !page.contains("id=\"r1-retr-down\""),
        "a retransmit pane for HTTP"
    );
    let (code, doc, err) = http(&["-X", "PUT", "--upload", "3M", "-P", "2"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!((h(&doc, "bytes"), h(&doc, "completed")), (6 << 20, 2));
    assert_eq!(doc["http"]["dir"], "up");

    let port = free_port();
    let srv = ServerProc::start(&["--http-port", &port.to_string()]);
    assert!(srv
        .wait_log(
            &format!("http listening on 127.0.0.1:{port}"),
            Duration::from_secs(10)
        )
        .is_some());
    let base = format!("http://127.0.0.1:{port}");
    // Garbage and a head that never ends get 400 or a close; the endpoint keeps serving.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    if peer("curl", "curl") {
        let o = run_cmd(
            Command::new("curl").args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{size_download}",
                &format!("{base}/bytes/1M"),
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "200 1048576");
        // A range is that part of the whole.
        let whole = run_cmd(
            Command::new("curl").args(["-s", &format!("{base}/bytes/200K")]),
            Duration::from_secs(30),
        )
        .stdout;
        let part = run_cmd(
            Command::new("curl").args(["-s", "-r", "70000-70099", &format!("{base}/bytes/200K")]),
            Duration::from_secs(30),
        )
        .stdout;
        assert_eq!(part, whole[70000..70100]);
        let o = run_cmd(
            Command::new("curl").args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}/nope"),
            ]),
            Duration::from_secs(30),
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "404");
    }
    if peer("wget", "wget") {
        let o = run_cmd(
            Command::new("wget").args(["-O", "/dev/null", &format!("{base}/bytes/2M")]),
            Duration::from_secs(30),
        );
        assert!(o.status.success(), "wget: {}", stderr(&o));
        assert!(stderr(&o).contains("[2097152/2097152]"), "{}", stderr(&o));
    }
    let (code, doc, err) = http(&[&format!("{base}/upload"), "-X", "POST", "--upload", "1M"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), 1 << 20);
    assert!(srv
        .wait_log("1.00 MiB received", Duration::from_secs(10))
        .is_some());
}

/// wget's rate in bits per second from its closing line ("(11.4 MB/s)", 1024-based units).
fn wget_bps(err: &str) -> Option<f64> {
    let line = err.lines().find(|l| l.contains("saved ["))?;
    let inner = line.split('(').nth(1)?.split(')').next()?;
    let (num, unit) = inner.trim().split_once(' ')?;
    let mult = match unit {
        "KB/s" => 1024.0,
        "MB/s" => 1024.0 * 1024.0,
        "GB/s" => 1024.0 * 1024.0 * 1024.0,
        "B/s" => 1.0,
        _ => return None,
    };
    Some(num.parse::<f64>().ok()? * mult * 8.0)
}

#[test]
fn on_a_shaped_veth_hakaru_and_wget_agree() {
    let Some(link) = Link::setup(
        &[("wget", "wget")],
        Shaping {
            client: None,
            server: Some("100mbit"),
        },
    ) else {
        return;
    };
    let srv = link.start_server_with(&["--http-port", "8080"]);
    assert!(srv
        .wait_log("http listening", Duration::from_secs(10))
        .is_some());
    let url = format!("http://{}:8080/bytes/24M", link.server_ip);
    let steal = super::netns_link::StealWatch::start();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let doc = link.client_json(&["http", &url, "-J"], Duration::from_secs(60));
        let ours = doc["http"]["bits_per_second"].as_f64().unwrap();
        assert_eq!(doc["http"]["bytes"], 24u64 << 20);
        let o = link.in_client(&["wget", "-O", "/dev/null", &url], Duration::from_secs(60));
        assert!(o.status.success(), "wget: {}", stderr(&o));
        let theirs = wget_bps(&stderr(&o)).expect("wget's rate");
        eprintln!(
            "shaped 100 Mbit/s: hakaru {:.2} Mbit/s, wget {:.2} Mbit/s",
            ours / 1e6,
            theirs / 1e6
        );
        pairs.push((ours, theirs));
    }
    // Both rates need the CPUs that push the packets: not checked when the host took them.
    if steal.spoiled("on_a_shaped_veth_hakaru_and_wget_agree") {
        return;
    }
    let (ours, theirs) = pairs[pairs.len() - 1];
    assert!(
        (ours / theirs - 1.0).abs() < 0.05,
        "hakaru {ours} vs wget {theirs}"
    );
    // And both are near the shaped rate less headers (1448 of 1514 bytes per frame).
    assert!(
        (ours / (100e6 * 1448.0 / 1514.0) - 1.0).abs() < 0.05,
        "{ours}"
    );
}

#[test]
fn a_silent_server_fails_at_the_stall_timeout_and_the_endpoint_bounds_its_connections() {
    // A server that accepts and never answers.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let holder = std::thread::spawn(move || {
        let held = l.accept();
        std::thread::sleep(Duration::from_secs(3));
        drop(held);
    });
    let o = run(
        &[
            "http",
            &format!("http://127.0.0.1:{port}/x"),
            "--stall-timeout",
            "1",
        ],
        Duration::from_secs(30),
    );
    let _ = holder.join();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--stall-timeout"), "{}", stderr(&o));

    // The endpoint: 64 connections from one address at once, the 65th is told why (503), and
    // once they go, a download works again.
    let hport = free_port();
    let srv = ServerProc::start(&["--http-port", &hport.to_string()]);
    assert!(srv
        .wait_log("http listening", Duration::from_secs(10))
        .is_some());
    let idle: Vec<std::net::TcpStream> = (0..64)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", hport)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = std::net::TcpStream::connect(("127.0.0.1", hport)).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    let _ = extra.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("64 connections from one address"),
        "{answer}"
    );
    drop(idle);
    std::thread::sleep(Duration::from_millis(500));
    let (code, doc, err) = http(&[&format!("http://127.0.0.1:{hport}/bytes/1M")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h(&doc, "bytes"), 1 << 20);
}
