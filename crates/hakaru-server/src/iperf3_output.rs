//! What an iperf3 client that asked for the server's output (`--get-server-output`) gets: the
//! run seen from the server (the server as the local end), in iperf3's text or `-J` shape.

use hakaru_model::RunResult;
use serde_json::Value;

/// The server's output as iperf3's text (interval table and summary).
pub(crate) fn text(r: &RunResult) -> String {
    hakaru_report::iperf3_text::report(r)
}

/// The server's output as iperf3's `-J` document.
pub(crate) fn json(r: &RunResult) -> Value {
    hakaru_report::iperf3_json::document(r)
}
