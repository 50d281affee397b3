//! The JSON Schema of `--json` output, generated from the model's types and doc comments.
//! docs/schema/run-result.schema.json is this schema, checked by a test.

use hakaru_model::RunResult;

/// The JSON Schema (draft 2020-12) of a [`RunResult`] document.
pub fn run_result_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(RunResult);
    serde_json::to_value(&schema).unwrap_or(serde_json::Value::Null)
}

/// A schema as pretty JSON text with a trailing newline.
fn pretty(schema: &impl serde::Serialize) -> String {
    let mut s = serde_json::to_string_pretty(schema).unwrap_or_default();
    s.push('\n');
    s
}

/// The schema as pretty JSON text with a trailing newline.
pub fn run_result_schema_text() -> String {
    pretty(&run_result_schema())
}

/// The JSON Schema of a `hakaru plan run` result (docs/schema/plan-result.schema.json).
pub fn plan_result_schema_text() -> String {
    pretty(&schemars::schema_for!(hakaru_model::plan::PlanResult))
}

/// The JSON Schema of a `--find-max` result (docs/schema/find-max.schema.json).
pub fn find_max_schema_text() -> String {
    pretty(&schemars::schema_for!(
        hakaru_model::capacity::FindMaxResult
    ))
}
