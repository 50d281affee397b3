//! The results documents iperf3's two sides trade at the end of a test (`Results`), and how
//! hakaru's own end report becomes one and a peer's becomes a report.

use super::*;

/// One stream's line in a results document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamResult {
    /// Stream id (1, 3, 4, ...).
    pub id: i64,
    /// Bytes this side sent on the stream, or received if it only received (after omit).
    pub bytes: u64,
    /// TCP retransmits; -1 when not a sender or unknown.
    pub retransmits: i64,
    /// UDP jitter, seconds (receiver).
    pub jitter: f64,
    /// UDP datagrams lost (receiver).
    pub errors: i64,
    /// UDP datagrams: sent (sender) or highest sequence number (receiver).
    pub packets: i64,
    /// Lost during the omitted warm-up (3.14+).
    pub omitted_errors: Option<i64>,
    /// Datagrams during the omitted warm-up (3.14+).
    pub omitted_packets: Option<i64>,
    /// Seconds from the start (always 0).
    pub start_time: f64,
    /// Seconds the stream ran.
    pub end_time: f64,
}

/// One side's results document (`EXCHANGE_RESULTS`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    /// CPU use of the process, percent.
    pub cpu_util_total: f64,
    /// User part, percent.
    pub cpu_util_user: f64,
    /// System part, percent.
    pub cpu_util_system: f64,
    /// 1: TCP sender with retransmit counts; 0: sender without; -1: receiver only.
    pub sender_has_retransmits: i64,
    /// Congestion control used.
    pub congestion_used: Option<String>,
    /// Per-stream lines.
    pub streams: Vec<StreamResult>,
    /// The server's human output, when the client asked for it.
    pub server_output_text: Option<String>,
    /// The server's JSON document, when the client asked for it and the server writes JSON.
    pub server_output_json: Option<Value>,
}

impl Results {
    /// Reads a results document from its bytes into typed fields, tolerating 3.12's unsigned
    /// negatives. Only what hakaru uses is kept: unknown keys, and the server output a stock
    /// server adds when asked for it, are skipped without being built. A syntax error, a
    /// document that is not an object, missing or non-numeric figures, and streams that are
    /// not objects are errors.
    pub fn parse(json: &[u8]) -> Result<Results, Iperf3Error> {
        const W: &str = "results";
        let doc: wire::Object<wire::Results> =
            serde_json::from_slice(json).map_err(|e| bad(W, e.to_string()))?;
        let o = doc.0.ok_or_else(|| bad(W, "not a JSON object"))?;
        let streams = o
            .streams
            .0
            .ok_or_else(|| bad(W, "\"streams\" missing or not an array"))?
            .map_err(|why| bad(W, why))?;
        let need = |n: Option<f64>, k: &str| {
            n.ok_or_else(|| bad(W, format!("\"{k}\" missing or not a number")))
        };
        Ok(Results {
            cpu_util_total: need(o.cpu_util_total.f64(), "cpu_util_total")?,
            cpu_util_user: need(o.cpu_util_user.f64(), "cpu_util_user")?,
            cpu_util_system: need(o.cpu_util_system.f64(), "cpu_util_system")?,
            sender_has_retransmits: o
                .sender_has_retransmits
                .int()
                .ok_or_else(|| bad(W, "\"sender_has_retransmits\" missing or not a number"))?,
            congestion_used: o.congestion_used.0,
            streams,
            server_output_text: None,
            server_output_json: None,
        })
    }

    /// The document as iperf3 3.14+ writes it (signed integers, both omitted counters).
    pub fn to_json(&self) -> Value {
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "id": s.id,
                    "bytes": s.bytes,
                    "retransmits": s.retransmits,
                    "jitter": s.jitter,
                    "errors": s.errors,
                    "omitted_errors": s.omitted_errors.unwrap_or(0),
                    "packets": s.packets,
                    "omitted_packets": s.omitted_packets.unwrap_or(0),
                    "start_time": s.start_time,
                    "end_time": s.end_time,
                })
            })
            .collect();
        let mut o = Map::new();
        o.insert("cpu_util_total".into(), json!(self.cpu_util_total));
        o.insert("cpu_util_user".into(), json!(self.cpu_util_user));
        o.insert("cpu_util_system".into(), json!(self.cpu_util_system));
        o.insert(
            "sender_has_retransmits".into(),
            json!(self.sender_has_retransmits),
        );
        if let Some(c) = &self.congestion_used {
            o.insert("congestion_used".into(), json!(c));
        }
        o.insert("streams".into(), Value::Array(streams));
        if let Some(t) = &self.server_output_text {
            o.insert("server_output_text".into(), json!(t));
        }
        if let Some(j) = &self.server_output_json {
            o.insert("server_output_json".into(), j.clone());
        }
        Value::Object(o)
    }
}

/// This end's results document, from its report. iperf3 reports the CPU use of its own
/// process; hakaru reports the machine's (busy, user and system shares of all CPUs).
pub fn results_from_report(r: &SideReport, tcp: bool) -> Results {
    let sends = r.flows.iter().any(|f| f.role == Role::Sender);
    let streams = r
        .flows
        .iter()
        .map(|f| {
            let mut s = StreamResult {
                id: i64::from(stream_id(f.id as usize)),
                bytes: f.bytes,
                retransmits: -1,
                start_time: 0.0,
                end_time: f.seconds,
                omitted_errors: Some(0),
                omitted_packets: Some(0),
                ..StreamResult::default()
            };
            if f.role == Role::Sender && tcp {
                s.retransmits = f
                    .tcp_info
                    .as_ref()
                    .and_then(|t| t.retransmits)
                    .map_or(-1, |r| r as i64);
            }
            if let Some(u) = &f.udp {
                match f.role {
                    // `packets` covers the whole test and `omitted_packets` the warm-up: the
                    // peer subtracts one from the other (bytes are after the warm-up already).
                    Role::Sender => {
                        s.packets = (u.datagrams + u.omitted_datagrams) as i64;
                        s.omitted_packets = Some(u.omitted_datagrams as i64);
                    }
                    Role::Receiver => {
                        // iperf3's receiver reports the highest sequence number seen.
                        let counted = u
                            .datagrams
                            .saturating_add(u.lost)
                            .saturating_sub(u.duplicates);
                        s.packets = u.next_seq as i64;
                        s.omitted_packets = Some(u.next_seq.saturating_sub(counted) as i64);
                        s.errors = u.lost as i64;
                        s.jitter = u.jitter_ms.unwrap_or(0.0) / 1000.0;
                    }
                }
            }
            s
        })
        .collect();
    let cpu = r.cpu.as_ref();
    Results {
        cpu_util_total: cpu.map_or(0.0, |c| c.busy_pct),
        cpu_util_user: cpu.map_or(0.0, |c| c.user_pct),
        cpu_util_system: cpu.map_or(0.0, |c| c.system_pct),
        sender_has_retransmits: match (sends, tcp) {
            (true, true) => 1,
            (true, false) => 0,
            (false, _) => -1,
        },
        congestion_used: r
            .flows
            .iter()
            .find_map(|f| f.tcp_info.as_ref().and_then(|t| t.congestion.clone())),
        streams,
        server_output_text: None,
        server_output_json: None,
    }
}

/// A peer's results document as a [`SideReport`] of `end`, for the flows of `plan` (hakaru
/// flow id, which is the stream's creation index, and direction); `peer_sends` tells whether the peer sends in a direction. Streams are matched
/// by id; one missing is an error (iperf3's IESTREAMID). The peer's CPU figures are process
/// CPU, not comparable with hakaru's machine CPU, so they are left out of the report.
pub fn report_from_results(
    end: End,
    res: &Results,
    plan: &[(u32, FlowDir)],
    peer_sends: impl Fn(FlowDir) -> bool,
    udp: bool,
    software: &str,
) -> Result<SideReport, Iperf3Error> {
    let mut flows = Vec::with_capacity(plan.len());
    for &(id, dir) in plan {
        let s = res
            .streams
            .iter()
            .find(|s| s.id == i64::from(stream_id(id as usize)))
            .ok_or_else(|| {
                bad(
                    "results",
                    format!("no stream with id {}", stream_id(id as usize)),
                )
            })?;
        let role = if peer_sends(dir) {
            Role::Sender
        } else {
            Role::Receiver
        };
        let udp_side = udp.then(|| {
            let omitted = s.omitted_packets.unwrap_or(0).clamp(0, s.packets.max(0)) as u64;
            let packets = s.packets.max(0) as u64 - omitted;
            match role {
                Role::Sender => UdpFlowSide {
                    datagrams: packets,
                    omitted_datagrams: omitted,
                    next_seq: packets + omitted,
                    lost: 0,
                    out_of_order: 0,
                    duplicates: 0,
                    jitter_ms: None,
                    ignored: 0,
                    socket_drops: None,
                },
                Role::Receiver => {
                    let lost = s.errors.max(0) as u64;
                    UdpFlowSide {
                        datagrams: packets.saturating_sub(lost),
                        omitted_datagrams: omitted,
                        next_seq: packets + omitted,
                        lost,
                        out_of_order: 0,
                        duplicates: 0,
                        jitter_ms: Some(s.jitter * 1000.0),
                        ignored: 0,
                        socket_drops: None,
                    }
                }
            }
        });
        let tcp_info = (!udp && role == Role::Sender && s.retransmits >= 0).then(|| TcpInfo {
            retransmits: Some(s.retransmits as u64),
            congestion: res.congestion_used.clone(),
            ..TcpInfo::default()
        });
        flows.push(FlowSide {
            id,
            dir,
            role,
            bytes: s.bytes,
            omitted_bytes: 0,
            late_bytes: 0,
            late_seconds: 0.0,
            calls: 0,
            seconds: (s.end_time - s.start_time).max(0.0),
            tcp_info,
            udp: udp_side,
            error: None,
            mptcp: None,
        });
    }
    Ok(SideReport {
        env: Environment {
            software: software.to_string(),
            ..Environment::default()
        },
        ..SideReport::flows_only(end, flows)
    })
}
