//! `hakaru server --metrics`: the exposition passes `promtool check metrics`, and a real
//! Prometheus server (Debian's, started here on loopback with a generated config) scrapes it
//! and sees the counters grow by what the tests moved. Without prometheus/promtool those parts
//! print why and are left out.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{free_port, http_get, json, kill, peer, run, stderr, ServerProc};

/// GET `path` from `127.0.0.1:port`; the whole answer.
fn get(port: u16, path: &str) -> String {
    http_get(port, path).expect("connect")
}

/// The value of the sample whose line starts with `series` (name and labels as rendered).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_count_what_the_tests_moved_and_prometheus_scrapes_them() {
    let mport = free_port();
    let hport = free_port();
    let srv = ServerProc::start(&[
        "--metrics",
        &format!("127.0.0.1:{mport}"),
        "--http-port",
        &hport.to_string(),
    ]);
    assert!(srv
        .wait_log("metrics at http://", Duration::from_secs(10))
        .is_some());
    let port = srv.port_s();
    let o = run(
        &["tcp", "127.0.0.1", "-p", &port, "-n", "10M", "--json"],
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(
        &[
            "http",
            &format!("http://127.0.0.1:{hport}/bytes/3M"),
            "--json",
        ],
        Duration::from_secs(60),
    );
    let doc: Value = json(&o);
    assert_eq!(doc["http"]["bytes"], 3u64 << 20);
    // The endpoint counts a connection's bytes when it closes, which can be just after the
    // client has read the last byte and exited: wait for the count (5 s at most).
    let http_sent =
        "hakaru_payload_bytes_total{protocol=\"http\",kind=\"http\",direction=\"sent\"}";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut answer = get(mport, "/metrics");
    while !answer.contains(http_sent) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        answer = get(mport, "/metrics");
    }
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("text/plain; version=0.0.4"), "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let received = sample(
        body,
        "hakaru_payload_bytes_total{protocol=\"hakaru\",kind=\"tcp\",direction=\"received\"}",
    )
    .expect("tcp bytes received");
    assert!(received >= (10 << 20) as f64, "{received}");
    assert!(
        sample(
            body,
            "hakaru_payload_bytes_total{protocol=\"http\",kind=\"http\",direction=\"sent\"}"
        )
        .expect("http bytes")
            >= (3 << 20) as f64
    );
    assert!(
        sample(
            body,
            "hakaru_tests_finished_total{protocol=\"hakaru\",kind=\"tcp\",outcome=\"ok\"}"
        )
        .expect("finished")
            >= 1.0
    );
    assert_eq!(sample(body, "hakaru_tests_running"), Some(0.0));
    assert!(sample(body, "process_open_fds").expect("fds") > 0.0);
    assert!(body.contains("hakaru_nic_receive_bytes_total{interface=\"lo\"}"));
    assert!(!body.contains("127.0.0.1"), "no client addresses in labels");
    assert!(get(mport, "/other").starts_with("HTTP/1.1 404"));

    if peer("promtool", "prometheus") {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool");
        p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    if !peer("prometheus", "prometheus") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hakaru-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: hakaru\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n"
        ),
    )
    .unwrap();
    let pport = free_port();
    let prom = Command::new("prometheus")
        .args([
            &format!("--config.file={}", cfg.display()),
            &format!("--storage.tsdb.path={}", dir.join("data").display()),
            &format!("--web.listen-address=127.0.0.1:{pport}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus");
    // Stopped by its PID however the test ends, a failed assertion included.
    let prom = Stopped(prom);
    // Another test moves 5 MiB more while Prometheus watches.
    let o = run(
        &["tcp", "127.0.0.1", "-p", &port, "-n", "5M", "--json"],
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let query = "/api/v1/query?query=hakaru_payload_bytes_total%7Bprotocol%3D%22hakaru%22%2Ckind%3D%22tcp%22%2Cdirection%3D%22received%22%7D";
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0.0;
    while Instant::now() < deadline {
        // Prometheus may still be starting: a refused connection is retried.
        let a = http_get(pport, query).unwrap_or_default();
        if let Some(i) = a.find("\r\n\r\n") {
            if let Ok(v) = serde_json::from_str::<Value>(&a[i + 4..]) {
                seen = v["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0.0);
                if seen >= (15 << 20) as f64 {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        seen >= (15 << 20) as f64,
        "Prometheus saw {seen} bytes received, expected at least 15 MiB"
    );
}

/// A child process killed (by its PID) and reaped when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        kill(self.0.id(), 9);
        let _ = self.0.wait();
    }
}
