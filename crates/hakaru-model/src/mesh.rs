//! The fleet mesh's report (`hakaru mesh report --json`, docs/mesh.md): every pair's figures
//! as the agents saw them, and the suspects. Built by `hakaru_mesh::report`; read back by
//! `hakaru report` (a heatmap, the worst pairs over time) and kept in the archive.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One direction between two hosts, as the source's agent saw it over its window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// The probing host.
    pub src: String,
    /// The probed host.
    pub dst: String,
    /// Median RTT, µs.
    pub rtt_p50_us: Option<f64>,
    /// 99th percentile RTT, µs.
    pub rtt_p99_us: Option<f64>,
    /// Lost over probed in the window.
    pub loss: Option<f64>,
    /// Probes that ended in the window (replied or lost).
    pub probes: u64,
    /// Probes sent since the source's agent started.
    pub sent: u64,
    /// Over a threshold.
    pub bad: bool,
    /// Median TCP connect time, µs (agents with --mesh-connect-interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_p50_us: Option<f64>,
    /// 99th percentile TCP connect time, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_p99_us: Option<f64>,
    /// TCP connects not established over those tried in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_loss: Option<f64>,
    /// The last throughput slice's received rate, bit/s (agents with --mesh-slice-every);
    /// none when the last slice failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_bps: Option<f64>,
}

/// A host each agent was asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Its name in the list.
    pub host: String,
    /// Whether its agent answered.
    pub answered: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// Its labels in the list.
    pub labels: BTreeMap<String, String>,
}

/// A host (or a label group of hosts) the mesh points at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// The host's name, or the group as `key=value` (`rack=r3`).
    pub host: String,
    /// For a group, its hosts; empty for a host.
    pub members: Vec<String>,
    /// Why, with the evidence.
    pub reason: String,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshReport {
    /// Always `mesh`.
    pub test: String,
    /// The result format's version ([`crate::SCHEMA_VERSION`]; 0 in reports of versions
    /// that did not write it).
    #[serde(default)]
    pub schema_version: u32,
    /// When the agents were asked, Unix seconds (0 in reports of versions that did not
    /// write it).
    #[serde(default)]
    pub at_unix: f64,
    /// Loss above which a pair is bad.
    pub loss_threshold: f64,
    /// RTT p99 above which a pair is bad, µs.
    pub rtt_p99_threshold_us: Option<f64>,
    /// Every listed host.
    pub hosts: Vec<Host>,
    /// Every pair some agent reported.
    pub pairs: Vec<Pair>,
    /// The hosts to look at first, worst first.
    pub suspects: Vec<Suspect>,
}

impl MeshReport {
    /// The worst loss of any pair (None before any probe ended).
    pub fn worst_loss(&self) -> Option<f64> {
        self.pairs
            .iter()
            .filter_map(|p| p.loss)
            .fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))))
    }
}
