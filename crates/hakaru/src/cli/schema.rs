//! `hakaru schema`: prints the JSON Schema of `--json` output, of plan files or of plan
//! results.

use std::io::Write;

/// Which document's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// The result of one test (`--json`; docs/schema/run-result.schema.json).
    RunResult,
    /// A plan file, TOML read as JSON (docs/schema/plan.schema.json).
    Plan,
    /// The result of `hakaru plan run` (docs/schema/plan-result.schema.json).
    PlanResult,
    /// The result of `udp --find-max` / `pps --find-max` (docs/schema/find-max.schema.json).
    FindMax,
}

/// Options of `hakaru schema`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which document.
    #[arg(value_enum, default_value = "run-result")]
    which: Which,
}

/// Prints the schema.
pub fn run(a: Args) -> anyhow::Result<()> {
    let text = match a.which {
        Which::RunResult => hakaru_report::schema::run_result_schema_text(),
        Which::Plan => hakaru_plan::plan_file_schema_text(),
        Which::PlanResult => hakaru_report::schema::plan_result_schema_text(),
        Which::FindMax => hakaru_report::schema::find_max_schema_text(),
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}
