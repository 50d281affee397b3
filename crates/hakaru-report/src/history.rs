//! `hakaru history`: the saved runs as a table, a JSON array or CSV, and the trend series as
//! JSON or CSV (its table is `trend::text`). CSV cells go through [`crate::csv::field`], which
//! quotes and neutralises them like every CSV hakaru writes.

use crate::csv::field;
use crate::summary::headline_text;
use crate::trend::{self, TrendSeries};

/// One saved run as the list shows it (the archive's row, without the result document).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistoryRun {
    pub id: i64,
    /// Start, Unix seconds.
    pub started_at: f64,
    /// When it was saved, Unix seconds.
    pub saved_at: f64,
    pub command: String,
    pub kind: String,
    pub peer: String,
    pub direction: String,
    pub flows: Option<u32>,
    pub headline: Option<f64>,
    pub unit: String,
    pub labels: Vec<(String, String)>,
    pub version: String,
}

fn labels_text(r: &HistoryRun) -> String {
    r.labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The list as a table, newest first; the command is cut to fit 100 columns unless `wide`.
pub fn table(runs: &[HistoryRun], wide: bool) -> String {
    let rows: Vec<[String; 8]> = runs
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                trend::when(r.started_at),
                r.kind.clone(),
                r.direction.clone(),
                r.flows.map(|f| f.to_string()).unwrap_or_default(),
                headline_text(r.headline, &r.unit),
                labels_text(r),
                r.command.clone(),
            ]
        })
        .collect();
    let heads = [
        "ID",
        "STARTED (UTC)",
        "KIND",
        "DIR",
        "FLOWS",
        "HEADLINE",
        "LABELS",
        "COMMAND",
    ];
    let mut w: Vec<usize> = heads.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(7) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: [&str; 8]| -> String {
        let mut s = format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {:>w5$}  {:<w6$}  ",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5],
            w6 = w[6],
        );
        let room = crate::View::WIDTH.saturating_sub(s.chars().count());
        let cmd = cells[7];
        if wide || cmd.chars().count() <= room {
            s.push_str(cmd);
        } else if room > 1 {
            s.extend(cmd.chars().take(room - 1));
            s.push('…');
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(heads);
    for r in &rows {
        out += &line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7]]);
    }
    out
}

/// One run as an element of the JSON list.
pub fn run_json(r: &HistoryRun) -> serde_json::Value {
    serde_json::json!({
        "id": r.id,
        "started_at": hakaru_model::rfc3339_utc(r.started_at),
        "started_at_unix": r.started_at,
        "saved_at_unix": r.saved_at,
        "kind": r.kind,
        "peer": r.peer,
        "direction": r.direction,
        "flows": r.flows,
        "headline": r.headline,
        "unit": r.unit,
        "labels": r.labels.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "command": r.command,
        "version": r.version,
    })
}

/// The list as CSV: a header and one row per run.
pub fn runs_csv(runs: &[HistoryRun]) -> String {
    let mut s = String::from(
        "id,started_at,kind,peer,direction,flows,headline,unit,labels,command,version\n",
    );
    for r in runs {
        let cells = [
            r.id.to_string(),
            hakaru_model::rfc3339_utc(r.started_at),
            r.kind.clone(),
            r.peer.clone(),
            r.direction.clone(),
            r.flows.map(|f| f.to_string()).unwrap_or_default(),
            r.headline.map(|v| format!("{v}")).unwrap_or_default(),
            r.unit.clone(),
            labels_text(r),
            r.command.clone(),
            r.version.clone(),
        ];
        s += &cells.iter().map(|c| field(c)).collect::<Vec<_>>().join(",");
        s.push('\n');
    }
    s
}

/// The trend as JSON: one object per series with its points.
pub fn trend_json(series: &[TrendSeries]) -> serde_json::Value {
    serde_json::Value::Array(
        series
            .iter()
            .map(|s| {
                serde_json::json!({
                    "series": s.name,
                    "unit": s.unit,
                    "points": s.points.iter().map(|p| serde_json::json!({
                        "id": p.id,
                        "started_at": hakaru_model::rfc3339_utc(p.at),
                        "value": p.value,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The trend as CSV: one row per point.
pub fn trend_csv(series: &[TrendSeries]) -> String {
    let mut s = String::from("series,id,started_at,value,unit\n");
    for t in series {
        for p in &t.points {
            s += &format!(
                "{},{},{},{},{}\n",
                field(&t.name),
                p.id,
                hakaru_model::rfc3339_utc(p.at),
                p.value,
                field(&t.unit)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: i64, command: &str) -> HistoryRun {
        HistoryRun {
            id,
            started_at: 1_700_000_000.0,
            kind: "tcp".into(),
            peer: "h:5201".into(),
            direction: "up".into(),
            flows: Some(2),
            headline: Some(9.5e9),
            unit: "bit/s".into(),
            labels: vec![("nic".into(), "a,b".into())],
            command: command.into(),
            ..HistoryRun::default()
        }
    }

    #[test]
    fn csv_cells_are_quoted_and_neutralised() {
        let s = runs_csv(&[run(3, "=cmd|x")]);
        let row = s.lines().nth(1).unwrap();
        assert!(
            row.starts_with("3,2023-11-14T22:13:20.000Z,tcp,h:5201,up,2,9500000000,bit/s,"),
            "{row}"
        );
        assert!(row.contains("\"nic=a,b\""), "{row}");
        assert!(row.contains("'=cmd|x"), "{row}");
    }

    #[test]
    fn the_table_cuts_long_commands_unless_wide() {
        let long = format!("hakaru tcp {}", "x".repeat(200));
        let t = table(&[run(1, &long)], false);
        assert!(
            t.lines().all(|l| l.chars().count() <= crate::View::WIDTH),
            "{t}"
        );
        assert!(t.contains('…'));
        assert!(table(&[run(1, &long)], true).contains(&long));
    }
}
