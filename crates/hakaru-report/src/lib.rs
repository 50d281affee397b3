//! hakaru-report: renderers. Each output format is one module over the model's types;
//! each returns text and never prints.

pub mod connect_text;
pub mod iperf3_json;
pub mod iperf3_text;
mod iperf3_view;
pub mod json;
pub mod jsonl;
pub mod latency_text;
pub mod nic;
pub mod plan_text;
pub mod raw_text;
pub mod schema;
pub mod text;
pub mod udp_text;
