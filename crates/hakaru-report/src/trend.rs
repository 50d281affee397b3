//! Headlines over time (`hakaru history --trend`): a table with bars per series, and an HTML
//! page with one chart per unit.

use std::fmt::Write;

#[cfg(feature = "charts")]
use crate::charts::{self, Chart, Series, Stroke};
#[cfg(feature = "charts")]
use crate::html::esc;
use crate::summary::headline_text;

/// One saved run's headline.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendPoint {
    /// Archive id.
    pub id: i64,
    /// Start time, Unix seconds.
    pub at: f64,
    /// Headline value in the series' unit.
    pub value: f64,
}

/// Runs that measured the same thing (kind, direction, flows, peer), oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendSeries {
    /// What was measured: `tcp up 4 flows to 10.0.0.2:5201`.
    pub name: String,
    /// Unit of the values (`bit/s`, `pkt/s`, `us`, `conn/s`).
    pub unit: String,
    /// The points, oldest first.
    pub points: Vec<TrendPoint>,
}

/// `2026-11-24 07:30:12` (UTC).
pub fn when(unix: f64) -> String {
    let s = hakaru_model::rfc3339_utc(unix);
    s[..19].replace('T', " ")
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

const BAR: usize = 30;

/// The table: each run's headline, its change from the run before, and a bar.
pub fn text(series: &[TrendSeries]) -> String {
    let mut out = String::new();
    for s in series {
        let Some(first) = s.points.first() else {
            continue;
        };
        let last = s.points.last().unwrap_or(first);
        let values: Vec<f64> = s.points.iter().map(|p| p.value).collect();
        let max = values.iter().copied().fold(0.0_f64, f64::max);
        let _ = writeln!(
            out,
            "{} ({} run{}, {} .. {} UTC)",
            s.name,
            s.points.len(),
            if s.points.len() == 1 { "" } else { "s" },
            when(first.at),
            when(last.at)
        );
        let _ = writeln!(
            out,
            "{:>6}  {:<19}  {:>14}  {:>8}",
            "ID", "STARTED (UTC)", "HEADLINE", "CHANGE"
        );
        let mut prev: Option<f64> = None;
        for p in &s.points {
            let change = match prev {
                Some(b) if b != 0.0 => format!("{:+.1} %", (p.value - b) / b.abs() * 100.0),
                _ => String::new(),
            };
            let len = if max > 0.0 {
                ((p.value / max) * BAR as f64)
                    .round()
                    .clamp(0.0, BAR as f64) as usize
            } else {
                0
            };
            let _ = writeln!(
                out,
                "{:>6}  {:<19}  {:>14}  {:>8}  {}",
                p.id,
                when(p.at),
                headline_text(Some(p.value), &s.unit),
                change,
                "#".repeat(len)
            );
            prev = Some(p.value);
        }
        let span = if first.value != 0.0 && s.points.len() > 1 {
            format!(
                "first to last {:+.1} %; ",
                (last.value - first.value) / first.value.abs() * 100.0
            )
        } else {
            String::new()
        };
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "{span}min {}, median {}, max {}\n",
            headline_text(Some(lo), &s.unit),
            headline_text(Some(median(&values)), &s.unit),
            headline_text(Some(max), &s.unit)
        );
    }
    out
}

/// One chart per unit, each series a line over days (or hours) since the first run.
#[cfg(feature = "charts")]
pub fn charts(series: &[TrendSeries]) -> Vec<Chart> {
    let t0 = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.at))
        .fold(f64::INFINITY, f64::min);
    let t1 = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.at))
        .fold(f64::NEG_INFINITY, f64::max);
    if !t0.is_finite() {
        return Vec::new();
    }
    let (per, word) = if t1 - t0 > 2.0 * 86_400.0 {
        (86_400.0, "days")
    } else {
        (3600.0, "hours")
    };
    let mut units: Vec<&str> = series.iter().map(|s| s.unit.as_str()).collect();
    units.dedup();
    units.sort_unstable();
    units.dedup();
    let mut out = Vec::new();
    for unit in units {
        let mine: Vec<&TrendSeries> = series.iter().filter(|s| s.unit == unit).collect();
        let max = mine
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.value))
            .fold(0.0_f64, f64::max);
        let (y_desc, y_scale) = match unit {
            "bit/s" | "pkt/s" | "conn/s" => charts::rate_unit(max, unit),
            other => (other.to_string(), 1.0),
        };
        let lines = mine
            .iter()
            .enumerate()
            .map(|(i, s)| Series {
                name: s.name.clone(),
                points: s
                    .points
                    .iter()
                    .map(|p| ((p.at - t0) / per, p.value / y_scale))
                    .collect(),
                stroke: Stroke::Thick,
                color: i,
                legend: true,
            })
            .collect();
        out.push(Chart {
            id: format!("trend-{}", unit.replace('/', "-per-")),
            title: format!("headline over time ({unit})"),
            x_desc: format!("{word} since {} UTC", when(t0)),
            y_desc,
            y_scale,
            log_x: false,
            log_y: false,
            series: lines,
        });
    }
    out
}

/// A self-contained HTML page with the charts and the table.
#[cfg(feature = "charts")]
pub fn page(title: &str, series: &[TrendSeries]) -> Result<String, String> {
    let mut html = String::with_capacity(32 << 10);
    let _ = writeln!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;margin:2em auto;max-width:1000px;color:#222}}\
         pre{{font-size:.75em;background:#f6f6f6;padding:.6em;overflow-x:auto}}</style></head><body>\
         <h1>{}</h1>",
        esc(title),
        esc(title)
    );
    for c in charts(series) {
        let f = charts::render(&c)?;
        let _ = writeln!(html, "<figure id=\"{}\">{}</figure>", esc(&f.id), f.svg);
    }
    let _ = writeln!(html, "<pre>{}</pre></body></html>", esc(&text(series)));
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> TrendSeries {
        TrendSeries {
            name: "tcp up 1 flow to h:5201".into(),
            unit: "bit/s".into(),
            points: vec![
                TrendPoint {
                    id: 3,
                    at: 1_795_000_000.0,
                    value: 10e9,
                },
                TrendPoint {
                    id: 7,
                    at: 1_795_086_400.0,
                    value: 9e9,
                },
                TrendPoint {
                    id: 9,
                    at: 1_795_172_800.0,
                    value: 5e9,
                },
            ],
        }
    }

    #[test]
    fn the_table_shows_changes_and_bars_to_scale() {
        let t = text(&[series()]);
        assert!(t.contains("tcp up 1 flow to h:5201 (3 runs"), "{t}");
        let rows: Vec<&str> = t
            .lines()
            .filter(|l| l.trim_start().starts_with(['3', '7', '9']))
            .collect();
        assert_eq!(rows.len(), 3, "{t}");
        assert!(rows[0].ends_with(&"#".repeat(30)), "{t}");
        assert!(
            rows[1].contains("-10.0 %") && rows[1].ends_with(&"#".repeat(27)),
            "{t}"
        );
        assert!(
            rows[2].contains("-44.4 %") && rows[2].ends_with(&"#".repeat(15)),
            "{t}"
        );
        assert!(t.contains("first to last -50.0 %"), "{t}");
        assert!(t.contains("median 9.00 Gbit/s"), "{t}");
    }

    #[test]
    #[cfg(feature = "charts")]
    fn charts_group_by_unit_in_days_or_hours() {
        let mut lat = series();
        lat.unit = "us".into();
        lat.name = "latency".into();
        let c = charts(&[series(), lat]);
        assert_eq!(c.len(), 2);
        let bits = c.iter().find(|c| c.id == "trend-bit-per-s").unwrap();
        assert_eq!(bits.y_desc, "Gbit/s");
        assert!(bits.x_desc.starts_with("hours since"), "{}", bits.x_desc);
        assert_eq!(bits.series[0].points[1], (24.0, 9.0));
        assert!(page("t", &[series()]).unwrap().contains("<svg"));
    }
}
