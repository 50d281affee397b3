//! The inputs of a report or a comparison: result documents read back and checked (the
//! types are re-exported as `html::Content` and `html::Input`, where they were first).

use hakaru_model::mesh::MeshReport;
use hakaru_model::plan::PlanResult;
use hakaru_model::{QuickResult, RunResult, SCHEMA_VERSION};

/// What a results file holds.
#[derive(Debug, Clone)]
pub enum Content {
    /// One test (`hakaru tcp|udp|pps|latency|connect --json`).
    Run(Box<RunResult>),
    /// `hakaru quick --json`.
    Quick(Box<QuickResult>),
    /// `hakaru plan run --json`.
    Plan(Box<PlanResult>),
    /// `hakaru mesh report --json`: one snapshot of a fleet's mesh.
    Mesh(Box<MeshReport>),
}

/// One input of a report: a label (the file name) and its result.
#[derive(Debug, Clone)]
pub struct Input {
    /// Shown in headings and legends.
    pub label: String,
    /// The result.
    pub content: Content,
}

impl Input {
    /// An input from a result in memory.
    pub fn run(label: String, r: RunResult) -> Input {
        Input {
            label,
            content: Content::Run(Box::new(r)),
        }
    }

    /// Reads a result document (`--json` of a test, `quick` or `plan run`); the error names
    /// what is wrong with it.
    pub fn parse(label: &str, text: &str) -> Result<Input, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            if e.is_eof() {
                format!("{label}: the JSON ends early (a truncated file?): {e}")
            } else {
                format!("{label}: not JSON: {e}")
            }
        })?;
        let Some(obj) = v.as_object() else {
            return Err(format!("{label}: not a hakaru result (not a JSON object)"));
        };
        let Some(test) = obj.get("test").and_then(|t| t.as_str()).map(str::to_string) else {
            return Err(format!(
                "{label}: not a hakaru result (no \"test\" field; write one with --json or -o FILE)"
            ));
        };
        match obj.get("schema_version").and_then(|s| s.as_u64()) {
            Some(s) if s == u64::from(SCHEMA_VERSION) => {}
            Some(s) => {
                return Err(format!(
                    "{label}: schema_version {s} is not one this hakaru reads ({SCHEMA_VERSION})"
                ))
            }
            None => return Err(format!("{label}: not a hakaru result (no schema_version)")),
        }
        let bad =
            |e: serde_json::Error| format!("{label}: a {test} result that does not parse: {e}");
        let test = test.as_str();
        let content = match test {
            "quick" => Content::Quick(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "plan" => Content::Plan(Box::new(serde_json::from_value(v).map_err(bad)?)),
            "mesh" => Content::Mesh(Box::new(serde_json::from_value(v).map_err(bad)?)),
            _ => {
                let r: RunResult = serde_json::from_value(v).map_err(bad)?;
                if r.has_no_figures() {
                    return Err(format!(
                        "{label}: an empty result (no intervals, totals or figures)"
                    ));
                }
                Content::Run(Box::new(r))
            }
        };
        Ok(Input {
            label: label.to_string(),
            content,
        })
    }
}
