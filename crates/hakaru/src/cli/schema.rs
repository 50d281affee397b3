//! `hakaru schema`: prints the JSON Schema of `--json` output.

use std::io::Write;

/// Options of `hakaru schema` (none yet).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Prints the schema.
pub fn run(_: Args) -> anyhow::Result<()> {
    std::io::stdout().write_all(hakaru_report::schema::run_result_schema_text().as_bytes())?;
    Ok(())
}
