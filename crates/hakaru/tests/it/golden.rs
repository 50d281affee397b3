//! Golden shapes: one run of every kind in every output format, reduced to its shape (the
//! JSON paths and their types, the JSON Lines events, the CSV header and row kinds, the text's
//! line kinds) and compared with `tests/golden/KIND.FORMAT`. The figures change from run to
//! run; the shape a user's parser sees must not, unless the change is meant: then
//! `HAKARU_GOLDEN=update cargo test -p hakaru --test it golden` rewrites the files, and the
//! diff is reviewed with the change (docs/json.md says what changed).
//!
//! This is the guard of the redesign (issue 30): output moves from a grid of matches to one
//! exporter per format, and every file here must come out the same.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::common::{run, stderr};

/// Each kind, as a short run against the in-process server (or endpoint) on loopback.
const KINDS: &[(&str, &[&str])] = &[
    (
        "tcp",
        &["tcp", "-t", "1", "-i", "0.5", "-P", "2", "--bidir"],
    ),
    (
        "udp",
        &[
            "udp", "-t", "1", "-i", "0.5", "-b", "20M", "-P", "2", "--bidir",
        ],
    ),
    (
        "tcp-probe",
        &[
            "tcp",
            "-t",
            "1",
            "-i",
            "0.5",
            "--latency-probe",
            "--latency-probe-baseline",
            "0.5s",
        ],
    ),
    ("pps", &["pps", "-t", "1", "-i", "0.5"]),
    ("latency", &["latency", "-t", "1", "-i", "0.5"]),
    ("latency-udp", &["latency", "--udp", "-t", "1", "-i", "0.5"]),
    ("connect", &["connect", "-t", "1", "-i", "0.5"]),
    // No intervals: an 8 MB download on a loaded machine can outlast the first one.
    ("http", &["http", "-n", "8M", "-P", "2", "-i", "0"]),
    (
        "rpm",
        &[
            "rpm",
            "-t",
            "1",
            "-i",
            "250ms",
            "--moving-average",
            "2",
            "--max-connections",
            "2",
        ],
    ),
    // The embedded server's udpst port, a fixed 50 Mbit/s row for the shortest test (5 s).
    ("capacity", &["capacity", "-t", "5", "-I", "50"]),
];

/// The formats, as `--format` spells them.
const FORMATS: &[&str] = &[
    "text",
    "json",
    "json-stream",
    "csv",
    "csv-summary",
    "iperf3-json",
];

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// A JSON value's type, for its shape.
fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Adds every path under `v` to `out` with the types seen there; array elements share the
/// path `PATH/*` (a `notes` array's are left out). Object keys that are data (per-interface,
/// per-label maps) would make a shape depend on the machine, so maps whose keys are not
/// identifiers are collapsed too.
fn walk(v: &Value, path: &str, out: &mut BTreeMap<String, BTreeSet<&'static str>>) {
    out.entry(path.to_string()).or_default().insert(type_of(v));
    match v {
        // Notes are sentences that come and go with what a run met (a loaded machine adds
        // some): the array stays, its strings are not shape.
        Value::Array(_) if path.ends_with("/notes") => {}
        Value::Array(a) => a.iter().for_each(|x| walk(x, &format!("{path}/*"), out)),
        Value::Object(o) => {
            for (k, x) in o {
                let is_name = k
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                let key = if is_name { k.as_str() } else { "~" };
                walk(x, &format!("{path}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// A JSON document's shape: one line per path with its types (null is left out where the
/// path also holds a value, since an absent figure is null in one run and a number in
/// another).
fn json_shape(docs: &[Value]) -> String {
    let mut paths = BTreeMap::new();
    for d in docs {
        walk(d, "", &mut paths);
    }
    let mut s = String::new();
    for (p, mut types) in paths {
        if types.len() > 1 {
            types.remove("null");
        }
        let t: Vec<&str> = types.into_iter().collect();
        s += &format!("{} {}\n", if p.is_empty() { "/" } else { &p }, t.join("|"));
    }
    s
}

/// JSON Lines: the shape of each event type (the `type` of the `{"type", "data"}` envelope).
fn stream_shape(out: &str) -> String {
    let mut by_event: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let event = v["type"].as_str().unwrap_or("?").to_string();
        by_event.entry(event).or_default().push(v);
    }
    by_event
        .iter()
        .map(|(e, docs)| format!("== event {e}\n{}", json_shape(docs)))
        .collect()
}

/// CSV: the header, then each kind of row (its first two columns), once.
fn csv_shape(out: &str) -> String {
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default().to_string();
    let kinds: BTreeSet<String> = lines
        .map(|l| l.split(',').take(2).collect::<Vec<_>>().join(","))
        .collect();
    let mut s = header + "\n";
    for k in kinds {
        s += &format!("row {k}\n");
    }
    s
}

/// Text: each kind of line once (its first two words), figures and units blanked: digits
/// become `9`, a unit's prefix goes, and runs of blanks are one.
fn text_shape(out: &str) -> String {
    let mut kinds = BTreeSet::new();
    for line in out.lines() {
        let mut l = String::new();
        let mut last_digit = false;
        for c in line.chars() {
            let digit = c.is_ascii_digit() || (last_digit && c == '.');
            if digit && !last_digit {
                l.push('9');
            } else if !digit {
                l.push(c);
            }
            last_digit = digit;
        }
        let mut words: Vec<String> = Vec::new();
        for w in l.split_whitespace() {
            let w = ["K", "M", "G", "T", "k", "m", "u", "µ", "n"]
                .iter()
                .find_map(|p| {
                    let rest = w.strip_prefix(p)?;
                    ["bit/s", "B", "iB", "bytes", "pps", "s"]
                        .contains(&rest)
                        .then(|| rest.to_string())
                })
                .unwrap_or_else(|| w.to_string());
            // Numbers and their units move between columns as figures grow: keep the words.
            if w.chars().any(|c| c.is_alphabetic()) && !w.starts_with('9') {
                words.push(w);
            }
        }
        // A line's kind is its first two words; notes come and go with the figures (a flow
        // still delivering after the end, a congestion control the kernel lacks), and so do
        // the efficiency lines: a short run may count no CPU time at an end (the JSON shape
        // lets the same figure be null).
        let efficiency = words.get(1).is_some_and(|w| w == "efficiency");
        if !words.is_empty() && words[0] != "note:" && !efficiency {
            kinds.insert(words[..words.len().min(2)].join(" "));
        }
    }
    kinds.into_iter().map(|k| k + "\n").collect()
}

/// The shape of one run's output in `format`, or its refusal (a format a kind does not
/// have is refused by name, and that refusal is part of the contract too).
fn shape(kind: &[&str], format: &str) -> String {
    let mut args = kind.to_vec();
    args.extend(["--format", format]);
    if format == "text" {
        // Unfolded: where a long line folds depends on the width of its figures.
        args.push("--wide");
    }
    let o = run(&args, Duration::from_secs(90));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        let err = stderr(&o);
        let first = err.lines().find(|l| l.contains("error")).unwrap_or("");
        return format!("refused (exit {:?}): {first}\n", o.status.code());
    }
    match format {
        "json" | "iperf3-json" => {
            let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
            json_shape(&[v])
        }
        "json-stream" => stream_shape(&out),
        "csv" | "csv-summary" => csv_shape(&out),
        _ => text_shape(&out),
    }
}

/// Two shapes agree when they have the same lines, except that a JSON path whose only value
/// was null in one run (a figure a short run could not compute, e.g. bytes per CPU-second
/// with no CPU time counted) matches any type in the other.
fn same_shape(want: &str, got: &str) -> bool {
    // A paced sender's "held back" warning says the machine was too busy to keep the pace:
    // it comes and goes with the load, not with the output's shape.
    let kept = |l: &&str| !l.ends_with(" held");
    let mut w = want.lines().filter(kept);
    let mut g = got.lines().filter(kept);
    loop {
        match (w.next(), g.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                let (pa, ta) = a.rsplit_once(' ').unwrap_or((a, ""));
                let (pb, tb) = b.rsplit_once(' ').unwrap_or((b, ""));
                if pa != pb || !(ta == "null" || tb == "null") {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

#[test]
fn every_kind_in_every_format_keeps_its_shape() {
    let update = std::env::var("HAKARU_GOLDEN").as_deref() == Ok("update");
    let dir = golden_dir();
    let mut differ = Vec::new();
    for (name, args) in KINDS {
        for format in FORMATS {
            let mut got = shape(args, format);
            let path = dir.join(format!("{name}.{format}"));
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &got).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (HAKARU_GOLDEN=update writes it)", path.display())
            });
            // What a run met can add to its output beside other tests (an error a loaded
            // machine made, an interval a slow start missed): up to three runs, and a shape
            // that changed is one that differs in every run.
            for _ in 1..3 {
                if same_shape(&want, &got) {
                    break;
                }
                eprintln!("{name} --format {format}: shape differs, run again:\n{got}");
                got = shape(args, format);
            }
            if !same_shape(&want, &got) {
                let only_want: Vec<&str> = want
                    .lines()
                    .filter(|l| !got.lines().any(|g| g == *l))
                    .collect();
                let only_got: Vec<&str> = got
                    .lines()
                    .filter(|l| !want.lines().any(|w| w == *l))
                    .collect();
                differ.push(format!(
                    "{name} --format {format}:\n  gone: {only_want:?}\n  new:  {only_got:?}"
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "output shapes changed (HAKARU_GOLDEN=update rewrites tests/golden after review):\n{}",
        differ.join("\n")
    );
}

#[test]
fn shapes_reduce_figures_but_keep_structure() {
    assert!(same_shape("/a number\n/b string\n", "/a null\n/b string\n"));
    assert!(!same_shape("/a number\n", "/a string\n"));
    assert!(!same_shape("/a number\n", "/a number\n/b null\n"));
    let a = json_shape(&[
        serde_json::json!({"x": 1, "y": [{"z": null}, {"z": 2.5}], "m": {"eth0": 1}}),
    ]);
    assert_eq!(
        a,
        "/ object\n/m object\n/m/eth0 number\n/x number\n/y array\n/y/* object\n/y/*/z number\n"
    );
    assert_eq!(
        text_shape(
            "[  1]  0.00-1.00 s  1.25 Gbit/s  (up)\n[ 12]  10.00-11.00 s  987 Mbit/s  (up)\n"
        ),
        "s bit/s\n"
    );
    assert_eq!(
        csv_shape("test,row,a\ntcp,flow,1\ntcp,flow,2\ntcp,sum,3\n"),
        "test,row,a\nrow tcp,flow\nrow tcp,sum\n"
    );
}

/// The wire half of the contract: the control messages real clients sent (fuzz/corpus/
/// native_control/capture-*, recorded by fuzz/capture_seeds.py from hakaru clients of every
/// kind) are still understood: the server welcomes each hello and accepts each test request
/// as it did, so clients of the current release keep working against a new server.
#[test]
fn recorded_client_requests_are_still_accepted() {
    use hakaru_proto::{Decoder, Message};
    use std::io::Write;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/native_control");
    let s = super::common::ServerProc::start(&["--allow-busy-poll"]);
    let mut kinds = BTreeSet::new();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("capture-"))
        })
        .collect();
    names.sort();
    let mut names_done = 0;
    for path in names {
        // The recorded bytes as they were sent, up to the end of the test request's frame:
        // the magic, then frames of a big-endian length and a JSON message.
        // The target's first byte picks where it splits the input; the stream follows.
        let file = std::fs::read(&path).unwrap();
        let bytes = &file[1..];
        let mut at = hakaru_proto::MAGIC.len();
        let mut test = None;
        while test.is_none() && at + 4 <= bytes.len() {
            let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let Some(body) = bytes.get(at + 4..at + 4 + len) else {
                break;
            };
            at += 4 + len;
            if let Ok(Message::TestRequest { test: t, .. }) = serde_json::from_slice(body) {
                test = Some(t);
            }
        }
        let Some(test) = test else {
            continue;
        };
        let kind = test.name();
        // Each from an address of its own: the previous tests may still be ending.
        let src = format!("127.0.3.{}", names_done + 1);
        names_done += 1;
        let mut c = super::hostile::connect_from(&src, s.port);
        c.write_all(&bytes[..at]).unwrap();
        let mut answers = Decoder::new();
        let welcome = super::common::read_msg(&mut c, &mut answers, Duration::from_secs(5));
        assert!(
            matches!(welcome, Some(Message::Welcome { .. })),
            "{}: {welcome:?}",
            path.display()
        );
        let answer = super::common::read_msg(&mut c, &mut answers, Duration::from_secs(5));
        assert!(
            matches!(answer, Some(Message::Accepted { .. })),
            "{} ({kind}): {answer:?}",
            path.display()
        );
        kinds.insert(kind.to_string());
    }
    // The recordings cover the bulk and latency kinds (fuzz/capture_seeds.py records no
    // connection-rate test).
    for k in ["tcp", "udp", "latency"] {
        assert!(
            kinds.contains(k),
            "no recorded {k} request in {}",
            dir.display()
        );
    }
}
