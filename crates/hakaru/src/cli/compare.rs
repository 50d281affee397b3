//! `hakaru compare BASE NEW`: headline metrics of two saved results with a verdict per row;
//! exit 1 when any metric is worse than its threshold (a CI gate).

use std::path::PathBuf;

use hakaru_report::compare;
use hakaru_report::export::{DocKind, Document, Format};
use hakaru_report::View;

use super::common::UsageError;
use super::report::read_inputs;

/// Options of `hakaru compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The baseline result: a file (`--json` or `-o FILE` of tcp, udp, pps, latency, connect,
    /// quick, http) or a saved run (`12`, `latest~1`).
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The result to judge against it (a file, or `latest`, or an id).
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Relative change that counts (rates, packet rates, round trips, efficiency): 5%, 0.5%.
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_percent)]
    threshold: f64,
    /// Change of loss that counts, in percentage points (0.1 = 0.1 % of the datagrams).
    #[arg(long, value_name = "POINTS", default_value_t = 0.1)]
    loss_threshold: f64,
    /// Compare even when the two tests were run differently (the differences are listed).
    #[arg(long)]
    force: bool,
    /// Output format.
    #[arg(long, value_parser = super::format::parser(DocKind::Compare), default_value = "text", conflicts_with = "json")]
    format: Format,
    /// Same as --format json.
    #[arg(short = 'J', long)]
    json: bool,
    #[command(flatten)]
    db: super::history::Db,
}

/// Parses `5%`, `5` (both 5 %) or `0.5%` into a fraction.
fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%').trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1000.0).contains(&v) => Ok(v / 100.0),
        _ => Err(format!("'{s}' is not a percentage from 0% to 1000%")),
    }
}

/// Prints the comparison; an error when a metric is worse (exit 1).
pub fn run(a: Args) -> anyhow::Result<()> {
    if !(a.loss_threshold.is_finite() && a.loss_threshold >= 0.0) {
        return Err(UsageError(format!(
            "--loss-threshold {}: must be 0 or more percentage points",
            a.loss_threshold
        ))
        .into());
    }
    let inputs = read_inputs(&[a.base.clone(), a.new.clone()], &a.db.db)?;
    let c = compare::compare(
        &inputs[0],
        &inputs[1],
        a.threshold,
        a.loss_threshold,
        a.force,
    )
    .map_err(UsageError)?;
    let format = if a.json { Format::json() } else { a.format };
    crate::output::print(format, View::default(), &Document::Compare(&c))?;
    if c.worse > 0 {
        anyhow::bail!(
            "{} of {} metrics are worse than the threshold in {}",
            c.worse,
            c.rows.len(),
            inputs[1].label
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages() {
        assert_eq!(super::parse_percent("5%"), Ok(0.05));
        assert_eq!(super::parse_percent("0.5"), Ok(0.005));
        assert!(super::parse_percent("-1%").is_err());
        assert!(super::parse_percent("x").is_err());
    }
}
