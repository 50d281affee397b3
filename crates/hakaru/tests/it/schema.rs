//! The documented JSON schema: in sync with the code, every field described, real output valid.

use std::time::Duration;

use serde_json::Value;

use super::common::{json, run};

fn repo_file(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

/// The schema `hakaru schema` prints.
pub(crate) fn schema() -> Value {
    let o = run(&["schema"], Duration::from_secs(20));
    assert!(o.status.success());
    json(&o)
}

#[test]
fn committed_schema_matches_the_code() {
    let committed = std::fs::read_to_string(repo_file("docs/schema/run-result.schema.json"))
        .expect("docs/schema/run-result.schema.json exists");
    let committed: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(
        committed,
        schema(),
        "docs/schema/run-result.schema.json is stale: regenerate with `hakaru schema`"
    );
}

fn walk(v: &Value, path: &str, missing: &mut Vec<String>) {
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            let described = p
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.is_empty())
                || p.get("$ref").is_some();
            if !described {
                missing.push(format!("{path}.{k}"));
            }
            walk(p, &format!("{path}.{k}"), missing);
        }
    }
    if let Some(defs) = v.get("$defs").and_then(Value::as_object) {
        for (k, d) in defs {
            walk(d, k, missing);
        }
    }
}

#[test]
fn every_field_is_described() {
    let mut missing = Vec::new();
    walk(&schema(), "RunResult", &mut missing);
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:?}"
    );
}

#[test]
fn real_output_validates_against_the_schema() {
    let s = schema();
    let validator = jsonschema::validator_for(&s).expect("schema compiles");
    for args in [
        &["tcp", "-t", "1", "--json"][..],
        &["tcp", "-t", "1", "--bidir", "-P", "2", "-O", "1", "--json"][..],
        &["tcp", "-n", "1M", "-R", "--json"][..],
        &["udp", "-t", "1", "-b", "10M", "--bidir", "--json"][..],
        &["pps", "-k", "20000", "--rate", "20000", "-l", "1", "--json"][..],
        &["latency", "-t", "1", "--udp", "--histogram", "--json"][..],
        &[
            "connect",
            "-t",
            "1",
            "--rst",
            "-P",
            "2",
            "--histogram",
            "--json",
        ][..],
    ] {
        let o = run(args, Duration::from_secs(60));
        assert!(o.status.success());
        let doc = json(&o);
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{args:?}: {errors:?}");
    }
    // Every result inside `hakaru quick --json` is a RunResult too.
    let o = run(&["quick", "-t", "0.3", "--json"], Duration::from_secs(120));
    assert!(o.status.success());
    for doc in json(&o)["results"].as_array().unwrap() {
        let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "quick {}: {errors:?}", doc["test"]);
    }
    // And a document that breaks the schema is caught, so the check can fail.
    let o = run(&["tcp", "-n", "1M", "--json"], Duration::from_secs(60));
    let mut doc = json(&o);
    doc["totals"][0]["receiver"]["bytes"] = Value::String("many".into());
    assert!(!validator.is_valid(&doc));
}

/// `hakaru schema WHICH`.
fn schema_of(which: &str) -> Value {
    let o = run(&["schema", which], Duration::from_secs(20));
    assert!(o.status.success());
    json(&o)
}

#[test]
fn plan_schemas_are_committed_described_and_match_real_documents() {
    for (which, file, root) in [
        ("plan", "docs/schema/plan.schema.json", "PlanFile"),
        (
            "plan-result",
            "docs/schema/plan-result.schema.json",
            "PlanResult",
        ),
        (
            "find-max",
            "docs/schema/find-max.schema.json",
            "FindMaxResult",
        ),
    ] {
        let committed = std::fs::read_to_string(repo_file(file))
            .unwrap_or_else(|e| panic!("{file} exists: {e}"));
        let committed: Value = serde_json::from_str(&committed).unwrap();
        let current = schema_of(which);
        assert_eq!(
            committed, current,
            "{file} is stale: regenerate with `hakaru schema {which}`"
        );
        let mut missing = Vec::new();
        walk(&current, root, &mut missing);
        assert!(
            missing.is_empty(),
            "{which}: fields without a description: {missing:?}"
        );
    }
    // Every shipped example plan is valid against the plan schema (TOML read as JSON) and
    // passes `hakaru plan check`.
    let plan_schema = schema_of("plan");
    let validator = jsonschema::validator_for(&plan_schema).expect("schema compiles");
    let dir = repo_file("examples/plans");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/plans exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Value = toml::from_str(&text).unwrap();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        let o = run(
            &["plan", "check", path.to_str().unwrap()],
            Duration::from_secs(20),
        );
        assert!(
            o.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(n >= 3, "the three seed plans are shipped, found {n}");
}
