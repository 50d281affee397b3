//! hakaru-plan: many machines, one test.
//!
//! A plan file names hosts and how to reach them (the system ssh, `ip netns exec`, the local
//! machine, or any exec prefix such as `kubectl exec -i POD --`) and steps (which hosts send
//! to which, and the test's options). The coordinator runs the ordinary hakaru subcommands
//! on those hosts through their launchers: `hakaru server` on every receiver, one client per
//! sender and receiver with a held start (`--sync-start`), released together at one instant
//! (a `go AT` line each). It reads their `--json-stream` output and merges the per-host results with
//! `hakaru_model::plan` into one [`hakaru_model::plan::PlanResult`]; it never re-implements a
//! test, so a plan measures exactly what a manual run measures.

mod check;
pub mod file;
pub mod fleet;
pub mod launch;
#[cfg(test)]
mod probe_tests;
mod run;

pub use check::{check, Problem};
pub use file::{expand, parse, PlanFile, Step};
pub use run::{invalid_commands, run, Options, PlanObserver, Validate, DEFAULT_PORT};

/// Reachability of every host a plan uses (`hakaru plan check --probe`): for each host, its
/// version line or why it cannot take part. Runs the hosts' `hakaru --version` in parallel.
pub fn probe(
    plan: &PlanFile,
    self_binary: &std::path::Path,
) -> Vec<(String, Result<String, String>)> {
    let default_ssh = plan.defaults.ssh_options.clone().unwrap_or_default();
    let handles: Vec<_> = plan
        .hosts
        .iter()
        .map(|(name, spec)| {
            let launcher = launch::Launcher::of(spec, &default_ssh);
            let binary = plan.binary_of(
                spec,
                launcher.same_machine(),
                &self_binary.to_string_lossy(),
            );
            let name = name.clone();
            std::thread::spawn(move || {
                let limit = std::time::Duration::from_secs(30);
                let r = match binary {
                    Some(path) => launch::probe_version(&name, &launcher, &path, limit),
                    // Pushed hosts get this binary; only the launcher itself must work.
                    None => launch::probe_version(&name, &launcher, "true", limit).or_else(|e| {
                        if e.contains("not a hakaru version") {
                            Ok("reachable (hakaru will be pushed)".into())
                        } else {
                            Err(e)
                        }
                    }),
                };
                (name, r)
            })
        })
        .collect();
    handles.into_iter().filter_map(|h| h.join().ok()).collect()
}

/// The JSON Schema of the plan file (docs/schema/plan.schema.json): TOML read as JSON.
pub fn plan_file_schema_text() -> String {
    let schema = schemars::schema_for!(PlanFile);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}
