//! `hakaru report`: saved results as one self-contained HTML file with SVG charts.

use std::path::PathBuf;

use anyhow::Context;
use hakaru_report::html::{self, Input};

use super::common::{write_whole, UsageError};

/// Options of `hakaru report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Result files written by `--json` or `-o FILE` (tcp, udp, pps, latency, connect, quick,
    /// http, plan run, mesh report), or saved runs (`12`, `latest`, `latest~1`); several are also overlaid
    /// on shared axes.
    #[arg(value_name = "RESULT", required = true)]
    inputs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE", default_value = "report.html")]
    output: PathBuf,
    /// Also write each chart as its own SVG file into this directory (for slides and docs).
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    #[command(flatten)]
    db: super::history::Db,
}

/// Reads result files, or saved runs for arguments that name no file but an archive run
/// (`12`, `latest`, `latest~1`); a file that cannot be read or is not a hakaru result is a
/// usage error (exit 2) naming the file and the problem.
pub fn read_inputs(paths: &[PathBuf], db: &Option<PathBuf>) -> anyhow::Result<Vec<Input>> {
    let mut inputs = Vec::with_capacity(paths.len());
    for p in paths {
        let arg = p.to_string_lossy();
        let (label, text) = match super::history::archived_input(&arg, db) {
            Some(found) if !p.exists() => found?,
            _ => {
                let label = p.display().to_string();
                let text = std::fs::read_to_string(p)
                    .map_err(|e| UsageError(format!("{label}: cannot read it: {e}")))?;
                (label, text)
            }
        };
        inputs.push(Input::parse(&label, &text).map_err(UsageError)?);
    }
    Ok(inputs)
}

/// Writes the report (and the SVG files).
pub fn run(a: Args) -> anyhow::Result<()> {
    let inputs = read_inputs(&a.inputs, &a.db.db)?;
    let page = html::report(&inputs).map_err(|e| anyhow::anyhow!("drawing the charts: {e}"))?;
    if let Some(dir) = &a.svg {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--svg {}: cannot create it", dir.display()))?;
        let svgs = html::svgs(&inputs).map_err(|e| anyhow::anyhow!("drawing the charts: {e}"))?;
        for (name, svg) in &svgs {
            let path = dir.join(format!("{name}.svg"));
            write_whole(&path, svg.as_bytes())
                .with_context(|| format!("--svg: writing {}", path.display()))?;
        }
        eprintln!(
            "hakaru: wrote {} SVG charts into {}",
            svgs.len(),
            dir.display()
        );
    }
    write_whole(&a.output, page.as_bytes())
        .with_context(|| format!("-o/--output {}", a.output.display()))?;
    eprintln!(
        "hakaru: wrote {} ({} KiB, {} result(s))",
        a.output.display(),
        page.len() / 1024,
        inputs.len()
    );
    Ok(())
}
