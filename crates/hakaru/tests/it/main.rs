//! hakaru's integration tests: one binary, one module per area.

mod cli;
mod common;
mod connect;
mod doc_links;
mod e2e;
mod faults;
// Network namespaces and a process group per flent run: Linux only.
#[cfg(target_os = "linux")]
mod flent;
mod golden;
mod hardening;
mod history;
mod hostile;
mod http;
mod iperf3;
mod iperf3_json;
mod iperf3_mptcp;
mod latency;
mod metrics;
mod netns;
mod netns_bridge;
mod netns_find_max;
mod netns_latency;
mod netns_link;
mod netns_pacing;
mod netns_partition;
mod netns_plan;
mod netns_probe;
mod netns_rpm;
mod netns_udp;
mod netperf;
mod netperf_client;
mod nic;
mod ntttcp;
mod plan;
mod probe;
mod report;
mod report_render;
mod rpm;
mod rpm_hostile;
mod schema;
mod sink;
mod sockperf;
mod udp;
