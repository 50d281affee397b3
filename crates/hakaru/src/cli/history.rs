//! The results archive on the command line: `--save`, `--db`, `--label` and `--push-gateway`
//! on every run, and `hakaru history` to list, show, export, remove, import and trend saved
//! runs. Archive references (`12`, `latest`, `latest~1`) also work in `compare` and `report`.

use std::path::PathBuf;

use anyhow::Context;
use hakaru_archive::{Archive, Filter, Run};
use hakaru_model::RunResult;
use hakaru_report::export::{DocKind, Document, Format, LiveItem};
use hakaru_report::history::HistoryRun;
use hakaru_report::html::{Content, Input};
use hakaru_report::summary;
use hakaru_report::trend::{self, TrendPoint, TrendSeries};

use super::common::{write_whole, Formats, UsageError, ViewFlags};
use super::keep::{db_path, new_run, parse_label};
use crate::output::{self, out};

/// Options of `hakaru history`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    list: ListArgs,
}

/// `--db`: the archive that lists and run references read.
#[derive(Debug, clap::Args)]
pub struct Db {
    /// The archive file [default: $XDG_DATA_HOME/hakaru/results.db].
    #[arg(long, value_name = "PATH", env = "HAKARU_DB")]
    pub db: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only runs of this kind (tcp, udp, pps, latency, connect, http, quick, plan, mesh,
    /// pps-find-max...).
    #[arg(long)]
    kind: Option<String>,
    /// Only runs against this peer (HOST matches HOST:PORT too).
    #[arg(long, value_name = "HOST")]
    peer: Option<String>,
    /// Only runs with this label (repeatable; all must match).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Only runs started since then: an age (30m, 12h, 7d, 2w) or a UTC date (2026-11-01).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// At most this many runs, the most recent [default: 20 for the list, all for --trend];
    /// 0 means all.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// The headline over time, oldest first, one table per kind, direction, flows and peer.
    #[arg(long)]
    trend: bool,
    /// With --trend: also write an HTML page charting it to FILE.
    #[arg(long, value_name = "FILE", requires = "trend")]
    report: Option<PathBuf>,
    /// Output format of the list.
    #[arg(long, value_parser = super::format::parser(DocKind::History), default_value = "text")]
    format: Format,
    /// Print whole command lines (the table otherwise fits 100 columns).
    #[arg(long)]
    wide: bool,
    #[command(flatten)]
    db: Db,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Print a saved run as the run printed it (or in another --format).
    Show(ShowArgs),
    /// Write a saved run's JSON result to a file (for `report`, `compare` or another machine).
    Export(ExportArgs),
    /// Delete saved runs by reference, or every run started before a time.
    Rm(RmArgs),
    /// Save result files written earlier with --json or -o into the archive.
    Import(ImportArgs),
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The run: its id, `latest`, or `latest~N` (N runs before the latest).
    #[arg(value_name = "ID")]
    reference: String,
    #[command(flatten)]
    formats: Formats,
    #[command(flatten)]
    view: ViewFlags,
    #[command(flatten)]
    db: Db,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// The run: its id, `latest`, or `latest~N`.
    #[arg(value_name = "ID")]
    reference: String,
    /// The file to write.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    db: Db,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// Runs to delete: ids, `latest`, `latest~N`.
    #[arg(
        value_name = "ID",
        required_unless_present = "before",
        conflicts_with = "before"
    )]
    references: Vec<String>,
    /// Delete every run started before then: an age (30d) or a UTC date (2026-01-01).
    #[arg(long, value_name = "WHEN")]
    before: Option<String>,
    #[command(flatten)]
    db: Db,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// Result files (`--json` or `-o FILE` of any run).
    #[arg(value_name = "RESULT.json", required = true)]
    files: Vec<PathBuf>,
    /// A label saved with each imported run (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    #[command(flatten)]
    db: Db,
}

/// Runs `hakaru history ...`.
pub fn run(a: Args) -> anyhow::Result<()> {
    match a.command {
        None => list(a.list),
        Some(Sub::Show(s)) => show(s),
        Some(Sub::Export(e)) => export(e),
        Some(Sub::Rm(r)) => rm(r),
        Some(Sub::Import(i)) => import(i),
    }
}

fn when_arg(flag: &str, s: &str) -> anyhow::Result<f64> {
    hakaru_archive::parse_when(s, hakaru_archive::now())
        .map_err(|e| UsageError(format!("{flag} {e}")).into())
}

/// An archive error: a missing archive or bad reference is the user's to fix (exit 2).
fn archive_err(e: hakaru_archive::Error) -> anyhow::Error {
    match e {
        hakaru_archive::Error::BadRef(_)
        | hakaru_archive::Error::NoSuchRun(..)
        | hakaru_archive::Error::Missing(_) => UsageError(e.to_string()).into(),
        other => anyhow::Error::new(other),
    }
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    let since = a
        .since
        .as_deref()
        .map(|s| when_arg("--since", s))
        .transpose()?;
    let view = hakaru_report::View {
        wide: a.wide,
        ..hakaru_report::View::default()
    };
    let path = db_path(&a.db.db);
    let archive = match Archive::open_existing(&path) {
        Ok(a) => a,
        // Nothing saved yet is an empty list, not a failure.
        Err(e @ hakaru_archive::Error::Missing(_)) => {
            eprintln!("hakaru: {e}");
            return output::print(a.format, view, &Document::History(&[]));
        }
        Err(e) => return Err(archive_err(e)),
    };
    let limit = match a.limit {
        Some(0) => None,
        Some(n) => Some(n),
        None if a.trend => None,
        None => Some(20),
    };
    let filter = Filter {
        kind: a.kind.clone(),
        peer: a.peer.clone(),
        labels: a.labels.clone(),
        since,
        before: None,
        limit,
    };
    let runs = archive.list(&filter).map_err(archive_err)?;
    if a.trend {
        let series = trend_series(&runs);
        if series.is_empty() {
            eprintln!(
                "hakaru: no saved runs with a headline match in {}",
                path.display()
            );
        }
        output::print(a.format, view, &Document::Trend(&series))?;
        if let Some(file) = &a.report {
            let page = trend::page("hakaru trend", &series)
                .map_err(|e| anyhow::anyhow!("drawing the trend: {e}"))?;
            write_whole(file, page.as_bytes())
                .with_context(|| format!("--report {}", file.display()))?;
            eprintln!("hakaru: wrote {}", file.display());
        }
        return Ok(());
    }
    let runs: Vec<HistoryRun> = runs.into_iter().map(history_run).collect();
    let s = a.format.write(&Document::History(&runs), &view)?;
    if s.is_empty() {
        eprintln!("hakaru: no saved runs match in {}", path.display());
    }
    out(&s);
    Ok(())
}

/// A listed run as the exporters take it.
fn history_run(r: Run) -> HistoryRun {
    HistoryRun {
        id: r.id,
        started_at: r.started_at,
        saved_at: r.saved_at,
        command: r.command,
        kind: r.kind,
        peer: r.peer,
        direction: r.direction,
        flows: r.flows,
        headline: r.headline,
        unit: r.unit,
        labels: r.labels,
        version: r.version,
    }
}

/// Groups runs with a headline by what they measured; each series oldest first.
fn trend_series(runs: &[Run]) -> Vec<TrendSeries> {
    let mut series: Vec<TrendSeries> = Vec::new();
    for r in runs.iter().rev() {
        let Some(v) = r.headline else { continue };
        let mut name = r.kind.clone();
        if !r.direction.is_empty() {
            name += &format!(" {}", r.direction);
        }
        if let Some(f) = r.flows {
            name += &format!(" {f} flow{}", if f == 1 { "" } else { "s" });
        }
        name += &format!(" to {}", r.peer);
        let point = TrendPoint {
            id: r.id,
            at: r.started_at,
            value: v,
        };
        match series
            .iter_mut()
            .find(|s| s.name == name && s.unit == r.unit)
        {
            Some(s) => s.points.push(point),
            None => series.push(TrendSeries {
                name,
                unit: r.unit.clone(),
                points: vec![point],
            }),
        }
    }
    for s in &mut series {
        s.points
            .sort_by(|a, b| a.at.total_cmp(&b.at).then(a.id.cmp(&b.id)));
    }
    series
}

/// A stored document as the report reader sees it.
fn stored_content(id: i64, doc: &str) -> anyhow::Result<Parsed> {
    let v: serde_json::Value = serde_json::from_str(doc)
        .with_context(|| format!("run {id}: the stored result is not JSON"))?;
    if v.get("test").and_then(|t| t.as_str()) == Some("find_max") {
        let r: hakaru_model::capacity::FindMaxResult = serde_json::from_value(v)
            .with_context(|| format!("run {id}: the stored search does not parse"))?;
        return Ok(Parsed::FindMax(Box::new(r)));
    }
    Input::parse(&format!("run {id}"), doc)
        .map(|i| Parsed::Content(Box::new(i.content)))
        .map_err(|e| anyhow::anyhow!(e))
}

enum Parsed {
    Content(Box<Content>),
    FindMax(Box<hakaru_model::capacity::FindMaxResult>),
}

fn show(a: ShowArgs) -> anyhow::Result<()> {
    let archive = Archive::open_existing(&db_path(&a.db.db)).map_err(archive_err)?;
    let id = archive.resolve(&a.reference).map_err(archive_err)?;
    let (_, doc_json) = archive.get(id).map_err(archive_err)?;
    let format = a.formats.format();
    let view = a.view.view();
    let saved = |doc: &Document<'_>| {
        output::print(
            format,
            view,
            &Document::Saved {
                doc,
                json: &doc_json,
            },
        )
    };
    match stored_content(id, &doc_json)? {
        Parsed::Content(c) => match *c {
            Content::Run(r) => replay(&r, format, view)?,
            Content::Quick(q) => saved(&Document::Quick {
                result: &q,
                ran_for: None,
            })?,
            Content::Plan(p) => saved(&Document::Plan(&p))?,
            // A mesh snapshot: its text report, or the JSON as it was saved.
            Content::Mesh(m) if format.name() == "text" => {
                print!("{}", hakaru_mesh::report::text(&m));
            }
            Content::Mesh(_) => print!("{}", doc_text(&doc_json)),
        },
        Parsed::FindMax(r) => saved(&Document::FindMax(&r))?,
    }
    Ok(())
}

fn doc_text(doc: &str) -> String {
    if doc.ends_with('\n') {
        doc.to_string()
    } else {
        format!("{doc}\n")
    }
}

/// Prints a test result the way its run printed it: the header, each interval, the sums.
fn replay(r: &RunResult, format: Format, view: hakaru_report::View) -> anyhow::Result<()> {
    let mut print = output::printer(format, view);
    print(&LiveItem::Start {
        spec: &r.spec,
        server: &r.server,
        embedded: r.embedded_server,
    });
    for rec in &r.intervals {
        print(&LiveItem::Interval(rec));
    }
    for row in r.detail.udpst().iter().flat_map(|u| &u.sub_intervals) {
        print(&LiveItem::SubInterval(row));
    }
    output::finish(format, view, r)
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let archive = Archive::open_existing(&db_path(&a.db.db)).map_err(archive_err)?;
    let id = archive.resolve(&a.reference).map_err(archive_err)?;
    let (_, doc) = archive.get(id).map_err(archive_err)?;
    write_whole(&a.output, doc_text(&doc).as_bytes())
        .with_context(|| format!("-o/--output {}", a.output.display()))?;
    eprintln!("hakaru: wrote run {id} to {}", a.output.display());
    Ok(())
}

fn rm(a: RmArgs) -> anyhow::Result<()> {
    let path = db_path(&a.db.db);
    let mut archive = Archive::open_existing(&path).map_err(archive_err)?;
    let n = if let Some(b) = &a.before {
        let t = when_arg("--before", b)?;
        archive.remove_before(t).map_err(archive_err)?
    } else {
        // Resolve every reference first, so `rm latest latest~1` means the two runs it names.
        let ids = a
            .references
            .iter()
            .map(|r| archive.resolve(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(archive_err)?;
        archive.remove(&ids).map_err(archive_err)?
    };
    eprintln!(
        "hakaru: removed {n} run{} from {}",
        if n == 1 { "" } else { "s" },
        path.display()
    );
    Ok(())
}

fn import(a: ImportArgs) -> anyhow::Result<()> {
    let path = db_path(&a.db.db);
    let mut archive = Archive::open(&path)?;
    for file in &a.files {
        let doc = std::fs::read_to_string(file)
            .map_err(|e| UsageError(format!("{}: cannot read it: {e}", file.display())))?;
        let s = match stored_content(0, &doc)
            .map_err(|e| UsageError(format!("{}: {e}", file.display())))?
        {
            Parsed::Content(c) => summary::of_content(&c),
            Parsed::FindMax(r) => summary::of_find_max(&r),
        };
        let version = serde_json::from_str::<serde_json::Value>(&doc)
            .ok()
            .and_then(|v| v.get("tool_version")?.as_str().map(str::to_string))
            .unwrap_or_default();
        let id = archive.save(&new_run(
            &s,
            format!("(imported from {})", file.display()),
            a.labels.clone(),
            version,
            doc,
        ))?;
        eprintln!("hakaru: saved {} as run {id}", file.display());
    }
    Ok(())
}

/// A `compare`/`report` input that is not a file: an archive reference (`12`, `latest`,
/// `latest~1`) read from the archive at `db`. `None` when `arg` looks like no reference.
pub fn archived_input(arg: &str, db: &Option<PathBuf>) -> Option<anyhow::Result<(String, String)>> {
    let looks = arg == "latest"
        || arg.strip_prefix("latest~").is_some()
        || (!arg.is_empty() && arg.chars().all(|c| c.is_ascii_digit()));
    if !looks {
        return None;
    }
    Some((|| {
        let archive = Archive::open_existing(&db_path(db)).map_err(archive_err)?;
        let id = archive.resolve(arg).map_err(archive_err)?;
        let (run, doc) = archive.get(id).map_err(archive_err)?;
        Ok((
            format!("run {id} ({} {})", run.kind, trend::when(run.started_at)),
            doc,
        ))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_take_prometheus_names() {
        assert_eq!(
            parse_label("kernel=6.1-rc"),
            Ok(("kernel".into(), "6.1-rc".into()))
        );
        assert_eq!(parse_label("a_b=x=y"), Ok(("a_b".into(), "x=y".into())));
        assert_eq!(parse_label("empty="), Ok(("empty".into(), String::new())));
        for bad in ["novalue", "=v", "1x=v", "a-b=v", "__x=v", "kind=tcp"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }
}
