//! Every chart of every report kind has a drawn series (issue 34): each kind is run on
//! loopback, its HTML report rendered by headless Chromium (in the light colour scheme, and
//! for two kinds also in the dark one), and the screenshot read back: inside every chart's plotting area, coloured pixels
//! (a series; grid, axes and text are grey) must span a good part of the width, so an empty
//! chart cannot ship again. Chromium and python3 (which reads the PNG) are peers: missing,
//! the test skips, or fails under HAKARU_TEST_PEERS=required (as .ci/run sets it).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::common::{have, peer, run, run_cmd, stderr};

const LIMIT: Duration = Duration::from_secs(120);
/// The charts' size in pixels (hakaru_report::charts::SIZE).
const W: u32 = 960;
const H: u32 = 360;

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

/// One drawn chart of a page: its id, its SVG and its plotting area (left, right, top, bottom).
struct Chart {
    id: String,
    svg: String,
    area: [u32; 4],
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(&tag[at..at + tag[at..].find('"')?])
}

/// The charts of a report page with a plotting area (charts said in words have none).
fn charts(html: &str) -> Vec<Chart> {
    let mut out = Vec::new();
    for (at, _) in html.match_indices("<figure id=\"") {
        let tag = &html[at..at + html[at..].find('>').expect("tag end")];
        let end = at + html[at..].find("</figure>").expect("figure end");
        let body = &html[at..end];
        let id = attr(tag, "id").expect("id").to_string();
        if attr(tag, "data-zero") == Some("true") {
            assert!(body.contains("0 in every interval"), "{id}: {body}");
            continue;
        }
        let px: Vec<u32> = attr(tag, "data-pixels")
            .expect("data-pixels")
            .split(' ')
            .map(|v| v.parse().expect("pixel"))
            .collect();
        let svg = &body[body.find("<svg").expect("svg")..];
        out.push(Chart {
            id,
            svg: svg.to_string(),
            area: [px[0], px[1], px[2], px[3]],
        });
    }
    out
}

/// Reads an 8-bit RGB(A) PNG and prints, per plotting area, the share of its pixel columns
/// with a coloured pixel and the mean brightness of the area.
const PNG_READER: &str = r#"
import json, struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    chunk = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
    elif kind == b"IDAT":
        idat += chunk
    pos += 12 + n
assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
rows, prev, i = [], bytearray(stride), 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
out = []
for area in sys.argv[2:]:
    l, r, t, b = map(int, area.split(","))
    cols, total, n = 0, 0, 0
    for x in range(l + 2, r - 1):
        hit = False
        for y in range(t + 2, b - 1):
            p = rows[y][x * bpp:x * bpp + 3]
            total += sum(p); n += 3
            if max(p) - min(p) > 60:
                hit = True
        cols += hit
    out.append({"columns": cols / max(1, r - l - 3), "brightness": total / max(1, n)})
print(json.dumps(out))
"#;

fn browser() -> Option<&'static str> {
    // Debian's is `chromium` (what .ci/run installs); Ubuntu's `chromium-browser` will do.
    if !have("chromium") && have("chromium-browser") {
        Some("chromium-browser")
    } else if peer("chromium", "chromium") {
        Some("chromium")
    } else {
        None
    }
}

/// Renders the charts of a report stacked on one page (each at its own size, one below the
/// other, with the report's styles) and returns each area's column share and brightness.
fn render(d: &Scratch, name: &str, html: &str, list: &[Chart], dark: bool) -> Vec<(f64, f64)> {
    let style = &html[html.find("<style>").expect("style")..html.find("</style>").unwrap() + 8];
    let mut page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">{style}<style>body{{margin:0;padding:0;max-width:none}}\
         figure{{margin:0;width:{W}px;height:{H}px}}figure svg{{display:block;max-width:none}}</style></head><body>"
    );
    for c in list {
        page.push_str(&format!("<figure id=\"{}\">{}</figure>", c.id, c.svg));
    }
    page.push_str("</body></html>");
    let file = d.path(&format!("{name}-{dark}.html"));
    std::fs::write(&file, page).unwrap();
    let shot = d.path(&format!("{name}-{dark}.png"));
    let mut cmd = Command::new(browser().expect("checked"));
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        &format!("--user-data-dir={}", d.path("profile")),
        &format!("--screenshot={shot}"),
        &format!("--window-size={W},{}", H * list.len() as u32),
    ])
    .env("HOME", &d.0);
    if dark {
        cmd.arg("--force-dark-mode");
    }
    let o = run_cmd(cmd.arg(format!("file://{file}")), LIMIT);
    assert!(
        std::path::Path::new(&shot).exists(),
        "{name}: no screenshot: {}",
        stderr(&o)
    );
    let mut py = Command::new("python3");
    py.args(["-c", PNG_READER, &shot]);
    for (k, c) in list.iter().enumerate() {
        let [l, r, t, b] = c.area;
        let off = k as u32 * H;
        py.arg(format!("{l},{r},{},{}", t + off, b + off));
    }
    let o = run_cmd(&mut py, LIMIT);
    assert!(o.status.success(), "reading {shot}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON from the reader");
    v.as_array()
        .expect("one entry per chart")
        .iter()
        .map(|e| {
            (
                e["columns"].as_f64().unwrap(),
                e["brightness"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Runs a test with `--report`, or returns the error.
fn report_of(d: &Scratch, name: &str, args: &[&str]) -> String {
    let html = d.path(&format!("{name}.html"));
    let mut a = args.to_vec();
    a.extend(["-q", "--report", &html]);
    let o = run(&a, LIMIT);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    std::fs::read_to_string(&html).expect("report written")
}

/// A plan of two local senders into one local receiver, UDP both ways, and its report: the
/// sender x receiver matrix and the receiver's bar with its NIC check are there.
fn plan_report(d: &Scratch) -> String {
    let port = super::common::free_port();
    let plan = format!(
        "[hosts.rx]\naddress = \"127.0.0.1\"\nlocal = true\nport = {port}\n\n[hosts.a]\nlocal = true\n\n\
         [hosts.b]\nlocal = true\n\n[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\n\
         time = 1\ninterval = 0.25\nbidir = true\nbitrate_up = \"40M\"\nbitrate_down = \"10M\"\n"
    );
    let file = d.0.join("plan.toml");
    std::fs::write(&file, plan).unwrap();
    let out = d.0.join("plan.json");
    let (o, _) = super::plan::plan_run(&mut super::common::hakaru(), &file, &out, LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = d.path("plan.html");
    let o = run(&["report", out.to_str().unwrap(), "-o", &html], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<table class=\"matrix\">"),
        "no sender x receiver matrix"
    );
    assert!(
        page.contains("title=\"a -> rx: "),
        "no tooltip on the matrix cell a -> rx"
    );
    assert!(
        page.contains("class=\"bar\"") && page.contains("NIC check"),
        "no receiver bar"
    );
    page
}

/// Two UDP runs at different rates in one report: overlaid, and the before/after bars.
fn compare_report(d: &Scratch) -> String {
    let (a, b) = (d.path("before.json"), d.path("after.json"));
    for (rate, out) in [("60M", &a), ("30M", &b)] {
        let o = run(
            &["udp", "-b", rate, "-t", "1", "-i", "0.25", "-q", "-o", out],
            LIMIT,
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let html = d.path("compare.html");
    let o = run(&["report", &a, &b, "-o", &html], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<div class=\"cmp\">"), "no before/after bars");
    assert!(page.contains("WORSE"), "half the rate is not worse?");
    page
}

#[test]
fn every_chart_of_every_report_kind_has_a_drawn_series_in_chromium() {
    if browser().is_none() || !peer("python3", "python3") {
        return;
    }
    let d = Scratch::new("report-render");
    let kinds: [(&str, &[&str]); 7] = [
        (
            "tcp",
            &["tcp", "-P", "2", "--bidir", "-t", "1", "-i", "0.25"],
        ),
        ("udp", &["udp", "-b", "50M", "-t", "1", "-i", "0.25"]),
        ("pps", &["pps", "-P", "2", "-t", "1", "-i", "0.25"]),
        (
            "latency",
            &["latency", "-t", "1", "-i", "0.25", "--histogram"],
        ),
        ("connect", &["connect", "-t", "1", "-i", "0.25"]),
        ("http", &["http", "-n", "20M", "-P", "2", "-i", "0.02"]),
        ("quick", &["quick", "-t", "0.5"]),
    ];
    let mut seen = 0;
    let mut pages: Vec<(&str, String)> = kinds
        .iter()
        .map(|(name, args)| (*name, report_of(&d, name, args)))
        .collect();
    pages.push(("plan", plan_report(&d)));
    pages.push(("compare", compare_report(&d)));
    for (name, html) in pages {
        let list = charts(&html);
        assert!(!list.is_empty(), "{name}: no chart drawn");
        for c in &list {
            assert!(
                c.svg.contains("<circle") && c.svg.contains("<title>"),
                "{name} {}: no tooltips",
                c.id
            );
        }
        // The dark scheme is the same CSS for every kind: two kinds are enough (reading a
        // screenshot back in Python is the slow part of this test).
        let schemes: &[bool] = if matches!(name, "tcp" | "latency") {
            &[false, true]
        } else {
            &[false]
        };
        for &dark in schemes {
            let got = render(&d, name, &html, &list, dark);
            assert_eq!(got.len(), list.len());
            for (c, (columns, brightness)) in list.iter().zip(got) {
                assert!(
                    columns > 0.25,
                    "{name} {} (dark {dark}): a series spans only {:.0} % of the plot's width",
                    c.id,
                    columns * 100.0
                );
                // The plotting area follows the colour scheme (mean channel, 0 to 255).
                if dark {
                    assert!(
                        brightness < 90.0,
                        "{name} {}: dark page, {brightness}",
                        c.id
                    );
                } else {
                    assert!(
                        brightness > 180.0,
                        "{name} {}: light page, {brightness}",
                        c.id
                    );
                }
            }
            seen += list.len();
        }
    }
    assert!(seen >= 20, "{seen} charts checked");
}
