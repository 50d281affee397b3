//! `--json-stream`: JSON Lines events as the test runs, each `{"type": ..., "data": ...}`.

use hakaru_model::{IntervalRecord, RunResult, TestSpec};
use serde::Serialize;

#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    data: T,
}

#[derive(Serialize)]
struct StartData<'a> {
    schema_version: u32,
    server: &'a str,
    embedded_server: bool,
    spec: &'a TestSpec,
}

#[derive(Serialize)]
struct ErrorData<'a> {
    message: &'a str,
}

/// One event of any kind in the JSON Lines envelope (`--find-max` trials, for example).
pub fn event<T: Serialize>(kind: &str, data: &T) -> String {
    line(kind, data)
}

/// One `{"type": kind, "data": data}` line, newline included.
pub(crate) fn line<T: Serialize>(kind: &str, data: T) -> String {
    let mut s = serde_json::to_string(&Envelope { kind, data })
        .unwrap_or_else(|e| format!("{{\"type\":\"error\",\"data\":{{\"message\":\"{e}\"}}}}"));
    s.push('\n');
    s
}

/// The `start` event.
pub fn start(spec: &TestSpec, server: &str, embedded: bool) -> String {
    line(
        "start",
        StartData {
            schema_version: hakaru_model::SCHEMA_VERSION,
            server,
            embedded_server: embedded,
            spec,
        },
    )
}

/// An `interval` event.
pub fn interval(rec: &IntervalRecord) -> String {
    line("interval", rec)
}

/// The `end` event, carrying the whole result.
pub fn end(result: &RunResult) -> String {
    line("end", result)
}

/// An `error` event.
pub fn error(message: &str) -> String {
    line("error", ErrorData { message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_enveloped_lines() {
        let e = error("boom \"quoted\"");
        assert!(e.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(e.trim_end()).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["data"]["message"], "boom \"quoted\"");
        let s = start(
            &TestSpec::Tcp(hakaru_model::TcpSpec::default()),
            "h:1",
            true,
        );
        let v: serde_json::Value = serde_json::from_str(s.trim_end()).unwrap();
        assert_eq!(v["type"], "start");
        assert_eq!(v["data"]["spec"]["flows"], 1);
        assert_eq!(v["data"]["schema_version"], hakaru_model::SCHEMA_VERSION);
    }
}

#[derive(Serialize)]
struct ReadyData {
    at_unix: f64,
    /// This client takes `go AT` (a release instant): a coordinator writes a bare `go` to
    /// one that does not say so (an older build of the same version).
    go_at: bool,
}

/// The `ready` event of a synchronised start: the test is set up and waits for `go`.
pub fn ready(at_unix: f64) -> String {
    line(
        "ready",
        ReadyData {
            at_unix,
            go_at: true,
        },
    )
}

#[derive(Serialize)]
struct ReleasedData {
    at_unix: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    go_ahead_ms: Option<f64>,
}

/// The `released` event of a synchronised start: `go` arrived (or its instant came); the test
/// starts now. `go_ahead_ms`: for `go AT`, how long before the instant the line arrived
/// (negative: after it).
pub fn released(at_unix: f64, go_ahead_ms: Option<f64>) -> String {
    line(
        "released",
        ReleasedData {
            at_unix,
            go_ahead_ms,
        },
    )
}
