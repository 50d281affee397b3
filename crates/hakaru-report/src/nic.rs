//! `hakaru nic`: per-interface rate lines in the layout of `sar -n DEV 1` (its JSON document is
//! `json::nic`, its JSON Lines records `jsonl::event`).

use std::fmt::Write;

use hakaru_model::{rfc3339_utc, Dur, NicInterval, NicSummary, NicUsage};

/// Column headings after the time and IFACE columns, in the order of [`row`].
const COLUMNS: [&str; 8] = [
    "rxpck/s", "txpck/s", "rxkB/s", "txkB/s", "rxdrop/s", "txdrop/s", "rxerr/s", "txerr/s",
];

/// Width of the IFACE column: sar's 9, or the longest name.
fn iface_width(ifaces: &[NicUsage]) -> usize {
    ifaces
        .iter()
        .map(|u| u.interface.chars().count())
        .max()
        .unwrap_or(0)
        .max(9)
}

/// `HH:MM:SS` of a Unix time, UTC.
fn clock(unix: f64) -> String {
    let ts = rfc3339_utc(unix);
    // "YYYY-MM-DDTHH:MM:SS.mmmZ": the time of day is bytes 11..19 (ASCII, so slicing is safe).
    ts.get(11..19).unwrap_or("??:??:??").to_string()
}

fn heading(s: &mut String, label: &str, width: usize) {
    let _ = write!(s, "{label:<8} {:>width$}", "IFACE");
    for c in COLUMNS {
        let _ = write!(s, " {c:>9}");
    }
    s.push('\n');
}

fn row(s: &mut String, label: &str, width: usize, u: &NicUsage) {
    let _ = write!(s, "{label:<8} {:>width$}", u.interface);
    for v in [
        u.rx_pps,
        u.tx_pps,
        u.rx_kib_per_s,
        u.tx_kib_per_s,
        u.rx_drops_ps,
        u.tx_drops_ps,
        u.rx_errors_ps,
        u.tx_errors_ps,
    ] {
        let _ = write!(s, " {v:>9.2}");
    }
    s.push('\n');
}

/// The line that opens a text run: what is watched, how often, and in which time zone.
pub fn intro(interfaces: &[String], interval: Dur, count: Option<u64>) -> String {
    let watched = if interfaces.is_empty() {
        "every interface".to_string()
    } else {
        interfaces.join(", ")
    };
    let until = match count {
        Some(1) => "once".to_string(),
        Some(n) => format!("{n} times"),
        None => "until Ctrl-C".to_string(),
    };
    format!("hakaru nic: {watched}, every {interval}, {until} (times UTC, kB = 1024 bytes)\n")
}

/// One interval as sar prints it: a blank line, a heading stamped with the interval's start,
/// then one line per interface stamped with its end.
pub fn interval_text(rec: &NicInterval) -> String {
    let width = iface_width(&rec.interfaces);
    let mut s = String::from("\n");
    heading(&mut s, &clock(rec.time_unix - (rec.end - rec.start)), width);
    let end = clock(rec.time_unix);
    for u in &rec.interfaces {
        row(&mut s, &end, width, u);
    }
    s
}

/// The `Average:` block over the whole run.
pub fn average_text(summary: &NicSummary) -> String {
    if summary.intervals == 0 {
        return "\nAverage: no complete interval to average\n".to_string();
    }
    let width = iface_width(&summary.interfaces);
    let mut s = String::from("\n");
    heading(&mut s, "Average:", width);
    for u in &summary.interfaces {
        row(&mut s, "Average:", width, u);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(name: &str, rx_pps: f64) -> NicUsage {
        NicUsage {
            interface: name.into(),
            seconds: 1.0,
            rx_pps,
            tx_kib_per_s: 1.5,
            tx_errors_ps: 0.25,
            ..NicUsage::default()
        }
    }

    fn rec() -> NicInterval {
        NicInterval {
            index: 0,
            start: 0.0,
            end: 1.0,
            // 2026-11-18T11:06:40Z
            time_unix: 1_795_000_000.0,
            time: rfc3339_utc(1_795_000_000.0),
            interfaces: vec![usage("lo", 12.0), usage("enp0s31f6-long", 123456.789)],
        }
    }

    #[test]
    fn interval_block_looks_like_sar() {
        let out = interval_text(&rec());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert_eq!(lines[0], "");
        let head: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            head,
            [
                "11:06:39", "IFACE", "rxpck/s", "txpck/s", "rxkB/s", "txkB/s", "rxdrop/s",
                "txdrop/s", "rxerr/s", "txerr/s"
            ]
        );
        let lo: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            lo,
            ["11:06:40", "lo", "12.00", "0.00", "0.00", "1.50", "0.00", "0.00", "0.00", "0.25"]
        );
        assert!(
            lines[3].contains("enp0s31f6-long 123456.79"),
            "{}",
            lines[3]
        );
        // Columns line up: every line ends at the same width.
        assert!(
            lines[1..].iter().all(|l| l.len() == lines[1].len()),
            "{out}"
        );
    }

    #[test]
    fn average_block_and_empty_run() {
        let summary = NicSummary {
            intervals: 3,
            seconds: 3.0,
            interrupted: false,
            interfaces: vec![usage("lo", 1.0)],
        };
        let out = average_text(&summary);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("Average:") && lines[1].contains("IFACE"));
        assert!(lines[2].starts_with("Average:") && lines[2].contains(" lo "));
        let empty = NicSummary {
            intervals: 0,
            seconds: 0.0,
            interrupted: true,
            interfaces: vec![],
        };
        assert!(average_text(&empty).contains("Average: no complete interval"));
    }

    #[test]
    fn intro_says_what_and_how_often() {
        let i = intro(&[], Dur::from_secs(1), None);
        assert!(i.contains("every interface") && i.contains("until Ctrl-C") && i.contains("UTC"));
        let i = intro(
            &["lo".into(), "eth0".into()],
            "200ms".parse().unwrap(),
            Some(3),
        );
        assert!(i.contains("lo, eth0") && i.contains("200ms") && i.contains("3 times"));
    }

    #[test]
    fn json_records_are_enveloped() {
        let v: serde_json::Value =
            serde_json::from_str(crate::jsonl::event("interval", &rec()).trim_end()).unwrap();
        assert_eq!(v["type"], "interval");
        assert_eq!(v["data"]["interfaces"][0]["interface"], "lo");
        assert_eq!(v["data"]["interfaces"][0]["tx_errors_ps"], 0.25);
        assert_eq!(v["data"]["time"], "2026-11-18T11:06:40.000Z");
        let summary = NicSummary {
            intervals: 1,
            seconds: 1.0,
            interrupted: true,
            interfaces: vec![usage("lo", 1.0)],
        };
        let e = crate::jsonl::event("end", &summary);
        assert!(e.ends_with('\n') && e.lines().count() == 1);
        let v: serde_json::Value = serde_json::from_str(e.trim_end()).unwrap();
        assert_eq!(v["type"], "end");
        assert_eq!(v["data"]["interrupted"], true);
        assert_eq!(v["data"]["interfaces"][0]["rx_pps"], 1.0);
    }
}
