//! `hakaru sink` and `hakaru source`: one end of a raw transfer with a stock tool at the other
//! (nc, iperf2, ttcp). The engine moves the data; this names the ends and builds the result.

use std::collections::BTreeMap;

use hakaru_engine::raw::RawOutcome;
use hakaru_model::{
    EndResult, FlowDir, IntervalRecord, IntervalSample, KindDetail, RawRole, RawSpec, RunResult,
    SideReport, TestSpec,
};

/// One engine sample as an interval record. Every stream of a raw transfer carries data one
/// way, from the sender; a sink is the receiving ("server") end, a source the sending
/// ("client") end, and the sample goes in that end's columns.
pub fn interval(spec: &RawSpec, sample: &IntervalSample) -> IntervalRecord {
    let dirs: BTreeMap<u32, FlowDir> = sample.flows.iter().map(|f| (f.id, FlowDir::Up)).collect();
    match spec.role {
        RawRole::Sink => hakaru_model::merge_interval(None, Some(sample), &dirs),
        RawRole::Source => hakaru_model::merge_interval(Some(sample), None, &dirs),
    }
}

/// This end's figures; a peer that reports nothing gets an empty end.
fn end_result(r: Option<&SideReport>) -> EndResult {
    let Some(r) = r else {
        return EndResult::unreported();
    };
    hakaru_model::end_result(r)
}

/// One end's outcome as a [`RunResult`]: this end (at `local`) is the `server_end` of a sink
/// and the `client` of a source; the other end (a stock tool) reports nothing.
pub fn result(
    spec: &RawSpec,
    local: &str,
    o: RawOutcome,
    intervals: Vec<IntervalRecord>,
) -> RunResult {
    let peer = o.result.peer.clone().unwrap_or_default();
    let ours = end_result(o.report.as_ref());
    let theirs = end_result(None);
    let (client, server_end, server) = match spec.role {
        RawRole::Sink => (theirs, ours, local.to_string()),
        RawRole::Source => (ours, theirs, peer.clone()),
    };
    let mut notes = Vec::new();
    if spec.iperf2 && spec.protocol == hakaru_model::RawProtocol::Tcp {
        notes.push(
            "bytes include the iperf2 client's test header, as the client's own count does".into(),
        );
    }
    RunResult {
        local_address: local.to_string(),
        remote_address: peer,
        intervals,
        client,
        server_end,
        interrupted: o.interrupted,
        notes,
        detail: KindDetail::Raw(Box::new(o.result)),
        ..RunResult::begin(TestSpec::Raw(spec.clone()), o.started_unix, server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{Bytes, Dur, FlowTick, RawProtocol};

    fn spec(role: RawRole) -> RawSpec {
        RawSpec {
            role,
            protocol: RawProtocol::Tcp,
            length: Bytes(8192),
            count: None,
            duration: None,
            rate: None,
            interval: Dur::from_secs(1),
            idle: Dur::from_secs(2),
            stdio: false,
            iperf2: false,
            markers: false,
        }
    }

    /// A sink counts what it received, a source what it sent: each lands in its own column,
    /// and the other column stays empty (the stock peer reports nothing).
    #[test]
    fn a_sinks_bytes_are_received_and_a_sources_sent() {
        let sample = IntervalSample {
            index: 0,
            start: 0.0,
            end: 1.0,
            omitted: false,
            flows: vec![FlowTick {
                id: 0,
                bytes: 1000,
                calls: 3,
                tcp: None,
                udp: None,
            }],
            nic: None,
            probe: None,
        };
        let sink = interval(&spec(RawRole::Sink), &sample);
        assert_eq!(sink.flows[0].receiver_bytes, Some(1000));
        assert_eq!(sink.flows[0].sender_bytes, None);
        assert_eq!(sink.flows[0].dir, FlowDir::Up);
        let source = interval(&spec(RawRole::Source), &sample);
        assert_eq!(source.flows[0].sender_bytes, Some(1000));
        assert_eq!(source.flows[0].receiver_bytes, None);
    }
}
