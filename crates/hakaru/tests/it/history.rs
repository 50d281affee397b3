//! The results archive: real runs saved with `--save`, listed, shown as they printed,
//! compared and reported by id; an archive left by schema version 1 (a shipped fixture) is
//! upgraded; a corrupt or locked archive loses nothing; concurrent saves all land; and
//! `--push-gateway` reaches Debian's Prometheus Pushgateway, started here on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{free_port, hakaru, http_get, kill, peer, run_cmd, stderr};

const LIMIT: Duration = Duration::from_secs(60);

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("hakaru-history-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }
    fn db(&self) -> PathBuf {
        self.0.join("archive/results.db")
    }
    /// `hakaru ARGS --db <this archive>` (run with a time limit).
    fn run(&self, args: &[&str]) -> Output {
        run_cmd(hakaru().args(args).arg("--db").arg(self.db()), LIMIT)
    }
    fn ok(&self, args: &[&str]) -> Output {
        let o = self.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        o
    }
    fn list(&self, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["history", "--format", "json", "--limit", "0"];
        args.extend_from_slice(extra);
        let o = self.ok(&args);
        serde_json::from_slice::<Value>(&o.stdout)
            .expect("history --format json is JSON")
            .as_array()
            .expect("an array")
            .clone()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The headline a result document's totals give: received bit/s summed over directions.
fn received_bps(doc: &Value) -> f64 {
    doc["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .map(|t| {
            t["receiver"]["bits_per_second"]
                .as_f64()
                .expect("bits_per_second")
        })
        .sum()
}

#[test]
fn saved_runs_are_listed_shown_compared_and_removed() {
    let s = Scratch::new("flow");
    // Run 1: text output, kept to compare with `history show`.
    let first = s.ok(&[
        "tcp", "-t", "1", "-i", "0.25", "--save", "--label", "nic=lo",
    ]);
    assert!(
        stderr(&first).contains("saved as run 1 in"),
        "{}",
        stderr(&first)
    );
    // Run 2 by the environment variable, as JSON.
    let second = run_cmd(
        hakaru()
            .args([
                "tcp", "-t", "1", "-i", "0.25", "--json", "--label", "nic=lo2",
            ])
            .env("HAKARU_SAVE", "1")
            .env("HAKARU_DB", s.db()),
        LIMIT,
    );
    assert!(second.status.success(), "{}", stderr(&second));
    let second_doc: Value = serde_json::from_slice(&second.stdout).expect("JSON");
    // HAKARU_SAVE=0 saves nothing.
    let not = run_cmd(
        hakaru()
            .args(["tcp", "-t", "0.3", "-q"])
            .env("HAKARU_SAVE", "0")
            .env("HAKARU_DB", s.db()),
        LIMIT,
    );
    assert!(not.status.success(), "{}", stderr(&not));
    assert!(!stderr(&not).contains("saved as run"));
    s.ok(&["pps", "-t", "0.5", "-P", "2", "--save", "-q"]);

    let rows = s.list(&[]);
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Newest first.
    assert_eq!(rows[0]["kind"], "pps");
    assert_eq!(rows[0]["flows"], 2);
    assert_eq!(rows[0]["unit"], "pkt/s");
    assert_eq!(rows[2]["kind"], "tcp");
    assert_eq!(rows[2]["peer"], "embedded");
    assert_eq!(rows[2]["direction"], "up");
    assert_eq!(rows[2]["labels"]["nic"], "lo");
    assert!(rows[2]["command"]
        .as_str()
        .unwrap()
        .starts_with("hakaru tcp -t 1 -i 0.25 --save --label nic=lo"));
    // The indexed headline is the document's own figure.
    let h = rows[1]["headline"].as_f64().unwrap();
    assert!((h - received_bps(&second_doc)).abs() <= h * 1e-12, "{h}");

    // Filters.
    assert_eq!(s.list(&["--kind", "tcp"]).len(), 2);
    assert_eq!(s.list(&["--label", "nic=lo2"])[0]["id"], 2);
    assert_eq!(s.list(&["--peer", "embedded"]).len(), 3);
    assert_eq!(s.list(&["--since", "1h"]).len(), 3);
    assert!(s
        .list(&["--since", "2000-01-01", "--kind", "latency"])
        .is_empty());

    // The table and CSV.
    let table = stdout(&s.ok(&["history"]));
    assert!(table.starts_with("ID  STARTED (UTC)"), "{table}");
    assert!(table.lines().all(|l| l.chars().count() <= 100), "{table}");
    let csv = stdout(&s.ok(&["history", "--format", "csv"]));
    assert_eq!(csv.lines().count(), 4, "{csv}");

    // `show` prints the run as it printed.
    let shown = s.ok(&["history", "show", "1"]);
    assert_eq!(stdout(&shown), stdout(&first));
    let shown_json: Value =
        serde_json::from_slice(&s.ok(&["history", "show", "2", "--json"]).stdout).unwrap();
    assert_eq!(shown_json, second_doc);

    // Compare by id and by latest~N; a tcp against a pps result is refused by name.
    let c = s.run(&["compare", "1", "latest~1", "--threshold", "1000%"]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    assert!(stdout(&c).contains("run 1 (tcp"), "{}", stdout(&c));
    let mismatch = s.run(&["compare", "1", "latest"]);
    assert_eq!(mismatch.status.code(), Some(2), "{}", stderr(&mismatch));

    // Export, report, trend.
    let file = s.0.join("two.json");
    s.ok(&[
        "history",
        "export",
        "latest~1",
        "-o",
        file.to_str().unwrap(),
    ]);
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(exported, second_doc);
    let page = s.0.join("r.html");
    s.ok(&["report", "1", "2", "-o", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("run 1 (tcp") && html.contains("<svg"));
    let trend_page = s.0.join("trend.html");
    let trend = stdout(&s.ok(&[
        "history",
        "--trend",
        "--kind",
        "tcp",
        "--report",
        trend_page.to_str().unwrap(),
    ]));
    assert!(
        trend.contains("tcp up 1 flow to embedded (2 runs"),
        "{trend}"
    );
    assert!(std::fs::read_to_string(&trend_page)
        .unwrap()
        .contains("<svg"));

    // References that name nothing are usage errors.
    for bad in [
        &["history", "show", "99"][..],
        &["history", "show", "latest~9"],
        &["compare", "1", "77"],
    ] {
        let o = s.run(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("no run"), "{}", stderr(&o));
    }

    // Removal by id, then by age.
    s.ok(&["history", "rm", "2"]);
    assert_eq!(s.list(&[]).len(), 2);
    let gone = s.ok(&["history", "rm", "--before", "0s"]);
    assert!(
        stderr(&gone).contains("removed 2 runs"),
        "{}",
        stderr(&gone)
    );
    assert!(s.list(&[]).is_empty());
}

#[test]
fn an_archive_of_schema_version_1_is_upgraded_and_kept() {
    let s = Scratch::new("upgrade");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archive-v1.sqlite");
    std::fs::create_dir_all(s.db().parent().unwrap()).unwrap();
    std::fs::copy(&fixture, s.db()).expect("copy the fixture");
    let rows = s.list(&[]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let tcp = rows
        .iter()
        .find(|r| r["kind"] == "tcp")
        .expect("the tcp run");
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.with_file_name("v1-tcp.json")).unwrap(),
    )
    .unwrap();
    // Version 2's columns were filled from the stored document.
    assert_eq!(
        tcp["started_at_unix"].as_f64(),
        doc["started_at_unix"].as_f64()
    );
    assert_eq!(tcp["direction"], "up");
    assert_eq!(tcp["flows"], 2);
    assert_eq!(tcp["headline"].as_f64(), Some(9.41e9));
    let id = tcp["id"].as_i64().unwrap().to_string();
    let shown: Value =
        serde_json::from_slice(&s.ok(&["history", "show", &id, "--json"]).stdout).unwrap();
    assert_eq!(shown, doc);
    // The upgraded archive takes new runs with labels (a version-2 table).
    s.ok(&[
        "connect",
        "-t",
        "0.3",
        "-q",
        "--save",
        "--label",
        "after=upgrade",
    ]);
    let labelled = s.list(&["--label", "after=upgrade"]);
    assert_eq!(labelled.len(), 1);
    assert_eq!(labelled[0]["kind"], "connect");
    assert_eq!(labelled[0]["id"], 3);
}

#[test]
fn a_corrupt_archive_loses_no_result() {
    let s = Scratch::new("corrupt");
    std::fs::create_dir_all(s.db().parent().unwrap()).unwrap();
    std::fs::write(s.db(), vec![b'x'; 4096]).unwrap();
    let o = s.run(&["tcp", "-t", "0.5", "--json", "--save"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // The result was printed whole, and written aside, named in the error.
    let printed: Value = serde_json::from_slice(&o.stdout).expect("the result was printed");
    let err = stderr(&o);
    assert!(err.contains("is not a hakaru archive"), "{err}");
    let aside = err
        .split("written to ")
        .nth(1)
        .and_then(|r| r.split(" instead").next())
        .unwrap_or_else(|| panic!("no fallback file named: {err}"));
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(aside).unwrap()).unwrap();
    assert_eq!(kept, printed);
    // With -o the error points at that file instead.
    let out = s.0.join("o.json");
    let o = s.run(&[
        "connect",
        "-t",
        "0.3",
        "-q",
        "--save",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("the result is in {}", out.display())),
        "{}",
        stderr(&o)
    );
    // Lists say the same, and exit 1.
    let l = s.run(&["history"]);
    assert_eq!(l.status.code(), Some(1));
    assert!(
        stderr(&l).contains("not a SQLite database"),
        "{}",
        stderr(&l)
    );
}

#[test]
fn a_locked_archive_is_named_after_the_busy_wait() {
    let s = Scratch::new("locked");
    s.ok(&["connect", "-t", "0.2", "-q", "--save"]);
    // Another writer holds the database for longer than hakaru's busy timeout (20 s).
    let holder = rusqlite::Connection::open(s.db()).expect("open");
    holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let t = Instant::now();
    let o = s.run(&["connect", "-t", "0.2", "--json", "--save"]);
    let waited = t.elapsed();
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("locked by another process"),
        "{}",
        stderr(&o)
    );
    assert!(
        waited >= Duration::from_secs(19),
        "gave up after {waited:?}"
    );
    let printed: Value = serde_json::from_slice(&o.stdout).expect("the result was printed");
    assert!(printed["connect"]["connections"].as_u64().unwrap() > 0);
    // Once the lock is gone, saving works again.
    s.ok(&["connect", "-t", "0.2", "-q", "--save"]);
    assert_eq!(s.list(&[]).len(), 2);
}

/// Eight runs that save into a new archive at once: each opens it while the others switch it
/// to WAL and create its tables, where SQLite answers "busy" without waiting (it failed one run
/// in four under load before the open retried).
#[test]
fn runs_saving_at_once_all_land() {
    let s = Scratch::new("concurrent");
    let children: Vec<_> = (0..8)
        .map(|i| {
            hakaru()
                .args(["connect", "-t", "0.5", "-q", "--save", "--label"])
                .arg(format!("n={i}"))
                .arg("--db")
                .arg(s.db())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for c in children {
        let o = super::common::wait_child(c, LIMIT);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let rows = s.list(&[]);
    assert_eq!(rows.len(), 8, "{rows:?}");
    let mut ns: Vec<String> = rows
        .iter()
        .map(|r| r["labels"]["n"].as_str().unwrap().to_string())
        .collect();
    ns.sort();
    assert_eq!(ns, ["0", "1", "2", "3", "4", "5", "6", "7"]);
}

#[test]
fn labels_need_a_place_to_go_and_a_valid_name() {
    let s = Scratch::new("labels");
    let o = s.run(&["tcp", "-t", "0.2", "--label", "a=b"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--save") || stderr(&o).contains("--push-gateway"),
        "{}",
        stderr(&o)
    );
    let o = s.run(&["tcp", "-t", "0.2", "--save", "--label", "1x=b"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("label name '1x'"), "{}", stderr(&o));
    assert!(!s.db().exists(), "nothing ran, nothing was saved");
    // Nothing saved yet: an empty list, said on stderr; showing a run is a usage error.
    let o = s.run(&["history"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("no runs saved yet"), "{}", stderr(&o));
    assert_eq!(s.list(&[]).len(), 0);
    let o = s.run(&["history", "show", "latest"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!s.db().exists(), "lookups create no archive");
}

#[test]
fn a_plan_with_save_true_is_saved_with_its_labels() {
    let s = Scratch::new("plan");
    let port = free_port();
    let plan = s.0.join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            "save = true\n[labels]\nsite = \"lab\"\n{}\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\ntime = \"1s\"\n",
            super::plan::local_hosts(port, super::common::bin(), super::common::bin())
        ),
    )
    .unwrap();
    let o = s.run(&["plan", "run", plan.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = s.list(&["--kind", "plan"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["labels"]["site"], "lab");
    assert!(rows[0]["headline"].as_f64().unwrap() > 0.0);
    let shown = stdout(&s.ok(&["history", "show", "latest"]));
    assert!(shown.contains("step 1"), "{shown}");
}

/// Debian's Pushgateway on a loopback port, stopped by PID when dropped.
struct Gateway {
    pid: u32,
    port: u16,
}

impl Gateway {
    fn start() -> Option<Gateway> {
        if !peer("prometheus-pushgateway", "prometheus-pushgateway") {
            return None;
        }
        let port = free_port();
        let child = Command::new("prometheus-pushgateway")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the pushgateway");
        let g = Gateway {
            pid: child.id(),
            port,
        };
        std::mem::forget(child);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if http_get(port, "/-/ready").is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
                return Some(g);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the pushgateway did not get ready on port {port}");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        kill(self.pid, 9);
    }
}

/// The value of the first sample of `name` whose labels include all of `want`.
fn gateway_sample(body: &str, name: &str, want: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| want.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn push_gateway_gets_the_runs_headline() {
    let Some(g) = Gateway::start() else { return };
    let url = format!("http://127.0.0.1:{}", g.port);
    let o = run_cmd(
        hakaru().args([
            "tcp",
            "-t",
            "1",
            "--json",
            "--push-gateway",
            &url,
            "--label",
            "site=lab/1",
        ]),
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let metrics = http_get(g.port, "/metrics").expect("gateway metrics");
    let want = ["job=\"hakaru\"", "kind=\"tcp\"", "site=\"lab/1\""];
    let h = gateway_sample(&metrics, "hakaru_run_headline", &want)
        .unwrap_or_else(|| panic!("no headline pushed:\n{metrics}"));
    let expect = received_bps(&doc);
    assert!((h - expect).abs() <= expect * 1e-6, "{h} vs {expect}");
    let up = gateway_sample(&metrics, "hakaru_run_received_bits_per_second", &want).unwrap();
    assert!((up - expect).abs() <= expect * 1e-6);
    let started = gateway_sample(&metrics, "hakaru_run_start_timestamp_seconds", &want).unwrap();
    assert!((started - doc["started_at_unix"].as_f64().unwrap()).abs() < 1e-3);

    // A latency run pushes its quantiles into its own group (kind=latency).
    let o = run_cmd(
        hakaru().args(["latency", "-t", "0.5", "--json", "--push-gateway", &url]),
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let metrics = http_get(g.port, "/metrics").unwrap();
    let p99 = gateway_sample(
        &metrics,
        "hakaru_run_rtt_seconds",
        &["kind=\"latency\"", "quantile=\"0.99\""],
    )
    .unwrap();
    let want_p99 = doc["latency"]["rtt"]["p99_us"].as_f64().unwrap() / 1e6;
    assert!(
        (p99 - want_p99).abs() <= want_p99 * 1e-6,
        "{p99} vs {want_p99}"
    );
    // The tcp group is still there: pushes replace their own group only.
    assert!(gateway_sample(&metrics, "hakaru_run_headline", &want).is_some());
}

#[test]
fn an_unreachable_push_gateway_is_an_error_after_the_result() {
    // A port nothing listens on (bound, then closed).
    let port = free_port();
    let o = run_cmd(
        hakaru()
            .args(["connect", "-t", "0.2", "--json", "--push-gateway"])
            .arg(format!("http://127.0.0.1:{port}")),
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
    let printed: Value = serde_json::from_slice(&o.stdout).expect("the result was printed");
    assert!(printed["connect"]["connections"].as_u64().unwrap() > 0);
    let o = run_cmd(
        hakaru().args([
            "connect",
            "-t",
            "0.2",
            "-q",
            "--push-gateway",
            "https://127.0.0.1:1",
        ]),
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("https is not supported"),
        "{}",
        stderr(&o)
    );
}
