//! Keeping a finished run, on every run's command line: `--save` and `--db` (the results
//! archive), `--label`, `--push-gateway`.

use std::path::{Path, PathBuf};

use hakaru_archive::{Archive, NewRun};
use hakaru_model::RunResult;
use hakaru_report::summary::Summary;

use super::files::write_whole;

/// Keeping a finished run: in the archive, and on a Prometheus Pushgateway.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Keep {
    /// Save the result in the results archive (list with `hakaru history`); also HAKARU_SAVE=1.
    #[arg(
        long,
        env = "HAKARU_SAVE",
        group = "keep",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub save: bool,
    /// The archive file [default: $XDG_DATA_HOME/hakaru/results.db].
    #[arg(long, value_name = "PATH", env = "HAKARU_DB")]
    pub db: Option<PathBuf>,
    /// A label saved (and pushed) with the run, repeatable: --label kernel=6.1 --label nic=ena.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label, requires = "keep")]
    pub labels: Vec<(String, String)>,
    /// Push the run's headline metrics to the Prometheus Pushgateway at URL (http://HOST:9091).
    #[arg(long, value_name = "URL", env = "HAKARU_PUSH_GATEWAY", group = "keep")]
    pub push_gateway: Option<String>,
}

/// `key=value` with a Prometheus-style key (letters, digits, `_`; not starting with a digit).
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE"))?;
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && !k.starts_with("__")
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(format!(
            "label name '{k}' must be letters, digits and _ (not starting with a digit or __)"
        ));
    }
    if ["kind", "peer", "direction", "unit", "quantile", "job"].contains(&k) {
        return Err(format!("label name '{k}' is one hakaru sets itself"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// The archive file: `--db`/HAKARU_DB, else the XDG default.
pub fn db_path(db: &Option<PathBuf>) -> PathBuf {
    db.clone().unwrap_or_else(hakaru_archive::default_path)
}

/// This process's command line, quoted so it can be pasted back into a shell.
fn command_line() -> String {
    // The program as people type it, not the path it was started by.
    std::iter::once("hakaru".to_string())
        .chain(std::env::args().skip(1))
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+[]".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A finished run, ready to keep.
pub struct Finished<'a> {
    /// Its summary (kind, peer, headline...).
    pub summary: Summary,
    /// The test result, when the run is one test (for the pushed per-direction metrics).
    pub run: Option<&'a RunResult>,
    /// The JSON document (as `-o FILE` writes it).
    pub json: String,
    /// Where `-o` already wrote it, if it did.
    pub written_to: Option<&'a Path>,
}

/// The archive row of a result: its summary's columns, where it came from, and the document.
/// A result without a start time of its own (`quick`, a search) is timed by its saving.
pub fn new_run(
    s: &Summary,
    command: String,
    labels: Vec<(String, String)>,
    version: String,
    result: String,
) -> NewRun {
    NewRun {
        started_at: s.started_at.unwrap_or_else(hakaru_archive::now),
        command,
        kind: s.kind.clone(),
        peer: s.peer.clone(),
        direction: s.direction.clone(),
        flows: s.flows,
        headline: s.headline,
        unit: s.unit.clone(),
        labels,
        version,
        result,
    }
}

/// Writes a result that could not be saved beside the archive (or in the temporary directory).
fn fallback(db: &Path, json: &str) -> std::io::Result<PathBuf> {
    let name = format!(
        "unsaved-{}-{}.json",
        hakaru_archive::now() as u64,
        std::process::id()
    );
    let beside = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(&name));
    if let Some(p) = beside {
        if write_whole(&p, json.as_bytes()).is_ok() {
            return Ok(p);
        }
    }
    let p = std::env::temp_dir().join(name);
    write_whole(&p, json.as_bytes()).map(|_| p)
}
impl Keep {
    /// Saves and pushes as asked. The result has been printed already: a failure here is
    /// reported with where the result can still be found, and the run exits 1.
    pub fn keep(&self, f: Finished<'_>) -> anyhow::Result<()> {
        let mut errors = Vec::new();
        if self.save {
            if let Err(e) = self.save(&f) {
                let kept = match f.written_to {
                    Some(p) => format!("the result is in {}", p.display()),
                    None => match fallback(&db_path(&self.db), &f.json) {
                        Ok(p) => format!("the result was written to {} instead", p.display()),
                        Err(e2) => format!("and writing it aside failed too ({e2})"),
                    },
                };
                errors.push(format!("--save: {e}; {kept}"));
            }
        }
        if let Some(url) = &self.push_gateway {
            let fams = hakaru_report::prometheus::run_families(&f.summary, f.run, &self.labels);
            let body = hakaru_report::prometheus::render(&fams);
            let mut grouping = vec![("kind".to_string(), f.summary.kind.clone())];
            grouping.extend(self.labels.iter().cloned());
            if let Err(e) = hakaru_client::push::push(url, "hakaru", &grouping, &body) {
                errors.push(e);
            }
        }
        match errors.len() {
            0 => Ok(()),
            _ => Err(anyhow::anyhow!(errors.join("; "))),
        }
    }

    fn save(&self, f: &Finished<'_>) -> Result<i64, hakaru_archive::Error> {
        let path = db_path(&self.db);
        let t = std::time::Instant::now();
        let mut a = Archive::open(&path)?;
        let id = a.save(&new_run(
            &f.summary,
            command_line(),
            self.labels.clone(),
            env!("CARGO_PKG_VERSION").to_string(),
            f.json.clone(),
        ))?;
        tracing::debug!(
            "saved run {id} in {:.2} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        eprintln!("hakaru: saved as run {id} in {}", path.display());
        Ok(id)
    }
}
