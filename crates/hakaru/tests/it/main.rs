//! hakaru's integration tests: one binary, one module per area.

mod cli;
mod common;
mod connect;
mod e2e;
mod faults;
mod hostile;
mod http;
mod iperf3;
mod iperf3_json;
mod latency;
mod netns;
mod netns_bridge;
mod netns_find_max;
mod netns_latency;
mod netns_link;
mod netns_pacing;
mod netns_partition;
mod netns_plan;
mod netns_udp;
mod nic;
mod plan;
mod report;
mod schema;
mod sink;
mod sockperf;
mod udp;
