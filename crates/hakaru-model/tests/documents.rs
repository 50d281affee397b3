//! Every kind's result document, as `--format json` wrote it before the result's per-kind part
//! became one enum (`tests/documents/*.json`, one short run of each kind on loopback), reads
//! back and writes out byte for byte: the key order, the nulls of `latency`, `connect` and
//! `raw`, and the keys left out when absent are the documents' contract (docs/json.md), and
//! the archive keeps documents written by every earlier version.

use hakaru_model::RunResult;

const DOCS: &[&str] = &[
    "tcp",
    "udp",
    "tcp-probe",
    "pps",
    "latency",
    "connect",
    "http",
    "rpm",
    "capacity",
    "sink",
    "source",
];

fn doc(name: &str) -> String {
    let path = format!("{}/tests/documents/{name}.json", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_kinds_document_reads_back_and_writes_out_byte_for_byte() {
    for name in DOCS {
        let text = doc(name);
        let r: RunResult =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}.json: {e}"));
        let again = serde_json::to_string_pretty(&r).unwrap();
        assert_eq!(again.lines().count(), text.lines().count(), "{name}.json");
        for (i, (a, b)) in again.lines().zip(text.lines()).enumerate() {
            assert!(
                same_line(a, b),
                "{name}.json line {}: wrote {a}, read {b}",
                i + 1
            );
        }
    }
}

/// The same line, or the same key with the same number to within its last digit or two:
/// serde_json reads a float to the nearest few ULPs, so a float written, read and written again
/// may end in another digit (the documents were always so).
fn same_line(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let split = |l: &str| {
        let (k, v) = l.rsplit_once(": ")?;
        let v = v.trim_end_matches(',');
        Some((k.to_string(), v.parse::<f64>().ok()?, l.ends_with(',')))
    };
    match (split(a), split(b)) {
        (Some((ka, va, ca)), Some((kb, vb, cb))) => {
            ka == kb && ca == cb && (va - vb).abs() <= 1e-12 * va.abs().max(vb.abs())
        }
        _ => false,
    }
}
