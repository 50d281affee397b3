//! Pictures, comparisons and CSV from real results: `hakaru report` (SVG read back through
//! the axis scale, and a headless Chromium rendering), `hakaru compare` (verdicts and exit
//! codes), `--format csv` (parsed with Python's csv module and reconciled with the JSON).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::common::{have, peer, run, run_cmd, stderr};

const LIMIT: Duration = Duration::from_secs(120);

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("hakaru-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
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

fn ok(args: &[&str]) -> String {
    let o = run(args, LIMIT);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn read_json(p: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("result file")).expect("JSON")
}

/// The `<figure>` with `id` in an HTML page: its data attributes and its SVG.
struct Fig {
    x: (f64, f64),
    y: (f64, f64),
    y_scale: f64,
    px: (f64, f64, f64, f64),
    svg: String,
}

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    let at = tag.find(&key).unwrap_or_else(|| panic!("{name} in {tag}")) + key.len();
    let end = tag[at..].find('"').expect("closing quote") + at;
    &tag[at..end]
}

fn pair(s: &str) -> (f64, f64) {
    let v: Vec<f64> = s.split(' ').map(|x| x.parse().expect("number")).collect();
    (v[0], v[1])
}

fn figure(html: &str, id: &str) -> Fig {
    let start = html
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let tag_end = html[start..].find('>').unwrap() + start;
    let tag = &html[start..tag_end];
    let px: Vec<f64> = attr(tag, "data-pixels")
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    let svg_start = html[start..].find("<svg").unwrap() + start;
    let svg_end = html[svg_start..].find("</svg>").unwrap() + svg_start + 6;
    Fig {
        x: pair(attr(tag, "data-x-range")),
        y: pair(attr(tag, "data-y-range")),
        y_scale: attr(tag, "data-y-scale").parse().unwrap(),
        px: (px[0], px[1], px[2], px[3]),
        svg: html[svg_start..svg_end].to_string(),
    }
}

impl Fig {
    /// Series lines of one kind (thin: flows, thick: sums, by the stroke width and opacity
    /// charts.rs gives them), their points mapped back to values (x, y in the result's units).
    fn lines(&self, kind: &str) -> Vec<Vec<(f64, f64)>> {
        let (width, opacity) = match kind {
            "thin" => ("1", "0.85"),
            "thick" => ("3", "0.95"),
            other => panic!("no series kind {other}"),
        };
        let doc = roxmltree::Document::parse(&self.svg).expect("the SVG is well-formed XML");
        let (l, r, t, b) = self.px;
        doc.descendants()
            .filter(|n| {
                n.has_tag_name("polyline")
                    && n.attribute("stroke-width") == Some(width)
                    && n.attribute("opacity") == Some(opacity)
            })
            .map(|n| {
                n.attribute("points")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').expect("x,y");
                        let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                        let vx = self.x.0 + (x - l) / (r - l) * (self.x.1 - self.x.0);
                        let vy = self.y.0 + (b - y) / (b - t) * (self.y.1 - self.y.0);
                        (vx, vy * self.y_scale)
                    })
                    .collect()
            })
            .collect()
    }

    /// One pixel's worth of value on each axis (the tolerance of a point read back).
    fn pixel(&self) -> (f64, f64) {
        let (l, r, t, b) = self.px;
        (
            (self.x.1 - self.x.0) / (r - l),
            (self.y.1 - self.y.0) / (b - t) * self.y_scale,
        )
    }
}

#[test]
fn report_charts_carry_the_results_values() {
    let d = Scratch::new("report");
    let base = d.path("tcp.json");
    ok(&["tcp", "-P", "3", "-t", "2", "-i", "0.5", "-q", "-o", &base]);
    let html_path = d.path("r.html");
    let svg_dir = d.path("svg");
    ok(&["report", &base, "-o", &html_path, "--svg", &svg_dir]);
    let html = std::fs::read_to_string(&html_path).expect("report written");
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Self-contained: nothing is fetched, no scripts.
    for bad in ["<script", "src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }
    let r = read_json(&base);
    let fig = figure(&html, "r1-rate-up");
    // Axis labels with units.
    assert!(fig.svg.contains("time (s)"), "x axis label");
    assert!(
        ["(Gbit/s)", "(Mbit/s)", "(kbit/s)"]
            .iter()
            .any(|u| fig.svg.contains(u)),
        "y axis label with a unit"
    );
    // One thin series per flow, one thick sum.
    assert_eq!(fig.lines("thin").len(), 3, "one series per flow");
    let sums = fig.lines("thick");
    assert_eq!(sums.len(), 1, "one receiver sum");
    // Every interval's summed receiver rate is drawn flat over its interval.
    let intervals = r["intervals"].as_array().expect("intervals");
    let (px_x, px_y) = fig.pixel();
    let expected: Vec<(f64, f64, f64)> = intervals
        .iter()
        .filter_map(|i| {
            Some((
                i["start"].as_f64()?,
                i["end"].as_f64()?,
                i["sums"][0]["receiver_bps"].as_f64()?,
            ))
        })
        .collect();
    assert!(expected.len() >= 4, "{expected:?}");
    let pts = &sums[0];
    assert_eq!(pts.len(), expected.len() * 2, "two points per interval");
    // The SVG holds whole pixels, and the plotting area's last pixel may or may not be part
    // of its range: a point read back can be off by two pixels (a run read 1.4959 s for 1.5 s
    // with 1.5 allowed). A point drawn at the wrong place is off by an interval, 100+ pixels.
    let tol = 2.5;
    for (k, (s, e, bps)) in expected.iter().enumerate() {
        for (p, x) in [(pts[2 * k], s), (pts[2 * k + 1], e)] {
            assert!((p.0 - x).abs() <= tol * px_x, "x {} vs {x}", p.0);
            assert!(
                (p.1 - bps).abs() <= tol * px_y,
                "interval {k}: drawn {} vs {bps} (one pixel is {px_y})",
                p.1
            );
        }
    }
    // A flow's series reads back as that flow's rates.
    let flow0: Vec<f64> = intervals
        .iter()
        .filter_map(|i| {
            i["flows"].as_array()?.iter().find(|f| f["id"] == 0)?["receiver_bps"].as_f64()
        })
        .collect();
    let thin = fig.lines("thin");
    assert!(
        thin.iter().any(|l| l.len() == flow0.len() * 2
            && l.iter()
                .step_by(2)
                .zip(&flow0)
                .all(|(p, v)| (p.1 - v).abs() <= tol * px_y)),
        "no thin series matches flow 0"
    );
    // --svg wrote the same charts as standalone, well-formed files.
    let files: Vec<_> = std::fs::read_dir(&svg_dir)
        .expect("svg dir")
        .flatten()
        .collect();
    assert!(files.len() >= 2);
    for f in files {
        let text = std::fs::read_to_string(f.path()).unwrap();
        roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{:?}: {e}", f.path()));
    }
}

#[test]
fn reports_of_every_kind_and_overlays() {
    let d = Scratch::new("report-kinds");
    let files = [
        ("udp.json", vec!["udp", "-t", "1", "-b", "20M", "-i", "0.5"]),
        ("pps.json", vec!["pps", "-t", "1", "-P", "2", "-i", "0.5"]),
        (
            "lat.json",
            vec!["latency", "-t", "1", "--histogram", "-i", "0.5"],
        ),
        ("conn.json", vec!["connect", "-t", "1", "-i", "0.5"]),
        ("lat2.json", vec!["latency", "-t", "1", "-u", "-i", "0.5"]),
    ];
    for (name, args) in &files {
        let p = d.path(name);
        let mut a = args.clone();
        a.extend(["-q", "-o", &p]);
        ok(&a);
    }
    let out = d.path("all.html");
    ok(&[
        "report",
        &d.path("udp.json"),
        &d.path("pps.json"),
        &d.path("lat.json"),
        &d.path("conn.json"),
        "-o",
        &out,
    ]);
    let html = std::fs::read_to_string(&out).unwrap();
    for id in [
        "r1-rate-up",
        "r1-loss-up",
        "r1-jitter-up",
        "r2-rate-up",
        "r3-rtt",
        "r3-cdf",
        "r3-hist",
        "r4-cps",
        "r4-connect-cdf",
    ] {
        let f = figure(&html, id);
        roxmltree::Document::parse(&f.svg).unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    // pps charts packets, not bits.
    assert!(figure(&html, "r2-rate-up").svg.contains("pkt/s)"));
    // Two latency results: overlaid on one CDF with a legend entry each.
    let out2 = d.path("overlay.html");
    ok(&[
        "report",
        &d.path("lat.json"),
        &d.path("lat2.json"),
        "-o",
        &out2,
    ]);
    let html = std::fs::read_to_string(&out2).unwrap();
    let f = figure(&html, "overlay-cdf");
    assert_eq!(f.lines("thick").len(), 2, "one thick CDF per input");
    assert!(
        f.svg.contains("lat.json") && f.svg.contains("lat2.json"),
        "legend"
    );
}

#[test]
fn bad_report_inputs_are_named_and_leave_no_file() {
    let d = Scratch::new("report-bad");
    let good = d.path("good.json");
    ok(&["tcp", "-t", "0.5", "-q", "-o", &good]);
    let text = std::fs::read_to_string(&good).unwrap();
    let cases = [
        (
            "truncated.json",
            text[..text.len() / 2].to_string(),
            "truncated",
        ),
        (
            "foreign.json",
            "{\"hello\": 1}".to_string(),
            "not a hakaru result",
        ),
        (
            "future.json",
            text.replacen("\"schema_version\": 1", "\"schema_version\": 7", 1),
            "schema_version 7",
        ),
        (
            "empty.json",
            {
                let mut v: Value = serde_json::from_str(&text).unwrap();
                v["intervals"] = Value::Array(vec![]);
                v["totals"] = Value::Array(vec![]);
                v.to_string()
            },
            "empty result",
        ),
    ];
    for (name, body, needle) in cases {
        let p = d.path(name);
        std::fs::write(&p, body).unwrap();
        let out = d.path("out.html");
        let o = run(&["report", &good, &p, "-o", &out], LIMIT);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle) && stderr(&o).contains(name),
            "{}",
            stderr(&o)
        );
        assert!(
            !Path::new(&out).exists(),
            "{name}: a partial report was left"
        );
        let o = run(&["compare", &good, &p], LIMIT);
        assert_eq!(o.status.code(), Some(2), "compare {name}: {}", stderr(&o));
    }
    let o = run(&["report", &d.path("missing.json")], LIMIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read"));
}

#[test]
fn compare_fails_a_throttled_run() {
    let d = Scratch::new("compare");
    let (fast, slow) = (d.path("fast.json"), d.path("slow.json"));
    ok(&[
        "udp", "-t", "1", "-i", "0.25", "-b", "200M", "-q", "-o", &fast,
    ]);
    ok(&[
        "udp", "-t", "1", "-i", "0.25", "-b", "20M", "-q", "-o", &slow,
    ]);
    // Run differently: refused, naming the difference.
    let o = run(&["compare", &fast, &slow], LIMIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("rate") && stderr(&o).contains("--force"),
        "{}",
        stderr(&o)
    );
    // With --force: the received rate fell by ~90 %, so the gate fails.
    let o = run(&["compare", &fast, &slow, "--force", "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let c: Value = serde_json::from_slice(&o.stdout).expect("compare --json");
    let row = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "client -> server received")
        .expect("received row")
        .clone();
    assert_eq!(row["verdict"], "worse");
    assert!(row["change_percent"].as_f64().unwrap() < -80.0, "{row}");
    assert_eq!(row["beyond_noise"], true);
    assert!(!c["differences"].as_array().unwrap().is_empty());
    // The other way round the rate is better, and the exit code follows the verdicts: a run
    // at ten times the rate may lose or jitter more on a busy machine, and its bytes per
    // CPU-second may fall (the UDP receiver spins while datagrams come less than 200 µs apart,
    // which they do at 200M and not at 20M); only those may be worse.
    let o = run(&["compare", &slow, &fast, "--force", "--json"], LIMIT);
    let c: Value = serde_json::from_slice(&o.stdout).expect("compare --json");
    let rows = c["rows"].as_array().unwrap();
    let verdict = |m: &str| {
        rows.iter()
            .find(|r| r["metric"] == m)
            .map(|r| r["verdict"].clone())
    };
    assert_eq!(
        verdict("client -> server received"),
        Some(Value::from("better"))
    );
    let worse: Vec<String> = rows
        .iter()
        .filter(|r| r["verdict"] == "worse")
        .map(|r| r["metric"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        worse.iter().all(|m| m.ends_with(" loss")
            || m.ends_with(" jitter")
            || m.ends_with(" per CPU-second")),
        "{worse:?}"
    );
    let code = if worse.is_empty() { 0 } else { 1 };
    assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
    let o = run(
        &["compare", &slow, &fast, "--force", "--format", "markdown"],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| metric | base | new |") && md.contains("better"),
        "{md}"
    );
    // A result against itself is within every threshold.
    let o = run(&["compare", &fast, &fast], LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Different kinds are refused.
    let lat = d.path("lat.json");
    ok(&["latency", "-t", "0.5", "-q", "-o", &lat]);
    let o = run(&["compare", &fast, &lat], LIMIT);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("one kind"));
}

#[test]
fn csv_reconciles_with_the_json_result() {
    if !peer("python3", "python3") {
        return;
    }
    let d = Scratch::new("csv");
    for (kind, args) in [
        ("tcp", vec!["tcp", "-P", "3", "-t", "1.5", "-i", "0.5"]),
        (
            "udp",
            vec!["udp", "-P", "2", "-t", "1.5", "-i", "0.5", "-b", "30M"],
        ),
    ] {
        let json_path = d.path(&format!("{kind}.json"));
        let mut a = args.clone();
        a.extend(["--format", "csv", "-o", &json_path]);
        let csv_text = ok(&a);
        let csv_path = d.path(&format!("{kind}.csv"));
        std::fs::write(&csv_path, &csv_text).unwrap();
        let script = r#"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
res = json.load(open(sys.argv[2]))
assert rows, "no rows"
cols = list(rows[0].keys())
assert cols[:8] == ["test","row","interval","start","end","omitted","flow","dir"], cols
intervals = sorted({int(r["interval"]) for r in rows if r["row"] in ("flow", "sum")})
assert len(intervals) == len(res["intervals"]), (len(intervals), len(res["intervals"]))
for i in intervals:
    flows = [r for r in rows if r["row"] == "flow" and int(r["interval"]) == i]
    sums = [r for r in rows if r["row"] == "sum" and int(r["interval"]) == i]
    assert len(flows) == len(res["intervals"][i]["flows"]), i
    for s in sums:
        mine = [f for f in flows if f["dir"] == s["dir"]]
        for col in ("receiver_bytes", "sender_bytes", "datagrams", "lost"):
            if s[col] != "":
                assert int(s[col]) == sum(int(f[col]) for f in mine), (i, col)
totals = [r for r in rows if r["row"] == "total"]
assert len(totals) == len(res["totals"]), totals
for t, j in zip(totals, res["totals"]):
    assert int(t["receiver_bytes"]) == j["receiver"]["bytes"], (t, j)
    assert abs(float(t["receiver_bps"]) - j["receiver"]["bits_per_second"]) < 1, t
    if j.get("udp"):
        assert int(t["lost"]) == j["udp"]["lost"]
        assert int(t["datagrams"]) == j["udp"]["received_datagrams"]
for r in rows:
    for k, v in r.items():
        if k not in ("test", "row", "dir", "omitted") and v != "":
            float(v)  # numbers without units
print("OK", len(rows))
"#;
        let o = run_cmd(
            Command::new("python3").args(["-c", script, &csv_path, &json_path]),
            LIMIT,
        );
        assert!(
            o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("OK"),
            "{kind}: {}\n{csv_text}",
            stderr(&o)
        );
    }
    // csv-summary: the header and one total row.
    let out = ok(&["latency", "-t", "0.5", "--format", "csv-summary"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[1].starts_with("latency,total,"), "{out}");
}

/// The PNG's width and height from its IHDR chunk.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.len() < 24 || &bytes[1..4] != b"PNG" {
        return None;
    }
    let w = u32::from_be_bytes(bytes[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(bytes[20..24].try_into().ok()?);
    Some((w, h))
}

#[test]
fn chromium_renders_the_report_offline() {
    // Debian's is `chromium` (what .ci/run installs); Ubuntu's `chromium-browser` will do.
    let browser = if !have("chromium") && have("chromium-browser") {
        "chromium-browser"
    } else if peer("chromium", "chromium") {
        "chromium"
    } else {
        return;
    };
    let d = Scratch::new("chromium");
    let res = d.path("tcp.json");
    ok(&["tcp", "-P", "2", "-t", "1", "-i", "0.5", "-q", "-o", &res]);
    let lat = d.path("lat.json");
    ok(&["latency", "-t", "1", "-q", "-o", &lat]);
    let html = d.path("r.html");
    ok(&["report", &res, &lat, "-o", &html]);
    let shot = d.path("shot.png");
    let profile = d.path("profile");
    let o = run_cmd(
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-extensions",
                "--enable-logging=stderr",
                "--v=0",
                &format!("--user-data-dir={profile}"),
                &format!("--screenshot={shot}"),
                "--window-size=1000,1400",
                &format!("file://{html}"),
            ])
            .env("HOME", &d.0),
        LIMIT,
    );
    let log = stderr(&o);
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {log}"));
    assert_eq!(png_size(&png), Some((1000, 1400)), "{log}");
    // A blank page compresses to a few KiB; charts and text do not.
    assert!(
        png.len() > 30_000,
        "screenshot of {} bytes looks blank",
        png.len()
    );
    // No console errors from the page.
    for l in log.lines() {
        assert!(
            !(l.contains("Uncaught") || (l.contains("CONSOLE") && l.contains("rror"))),
            "console error: {l}"
        );
    }
}

#[test]
fn plan_results_are_drawn_per_receiver_and_take_per_direction_rates() {
    let d = Scratch::new("report-plan");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plan = format!(
        "[hosts.rx]\naddress = \"127.0.0.1\"\nlocal = true\nport = {port}\n\n[hosts.a]\nlocal = true\n\n[hosts.b]\nlocal = true\n\n[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 2\ninterval = 0.5\nbidir = true\nbitrate_up = \"20M\"\nbitrate_down = \"5M\"\n"
    );
    let file = d.0.join("plan.toml");
    std::fs::write(&file, plan).unwrap();
    let out = d.0.join("plan.json");
    let (o, doc) = super::plan::plan_run(
        &mut super::common::hakaru(),
        &file,
        &out,
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Each sender's run: 20 Mbit/s up, 5 Mbit/s down.
    let runs = doc["steps"][0]["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for r in runs {
        for t in r["result"]["totals"].as_array().expect("totals") {
            let want = if t["dir"] == "up" { 20e6 } else { 5e6 };
            let got = t["receiver"]["bits_per_second"].as_f64().unwrap();
            assert!((got / want - 1.0).abs() < 0.05, "{}: {got}", t["dir"]);
        }
    }
    let html_path = d.path("plan.html");
    ok(&["report", out.to_str().unwrap(), "-o", &html_path]);
    let html = std::fs::read_to_string(&html_path).unwrap();
    let index = doc["steps"][0]["index"].as_u64().unwrap();
    let fig = figure(&html, &format!("r1-step{index}-rx-up"));
    // The total received into rx is drawn thick: two senders at 20 Mbit/s.
    let totals = fig.lines("thick");
    assert_eq!(totals.len(), 1, "one total line");
    let (_, px_y) = fig.pixel();
    let full: Vec<f64> = totals[0]
        .iter()
        .map(|p| p.1)
        .filter(|v| *v > 30e6)
        .collect();
    assert!(!full.is_empty(), "{:?}", totals[0]);
    for v in full {
        assert!((v - 40e6).abs() < 0.05 * 40e6 + px_y, "total {v}");
    }
    // The senders stacked: one thin line each.
    assert_eq!(fig.lines("thin").len(), 2);
    assert!(html.contains(&format!("r1-step{index}-rx-down")));
}
