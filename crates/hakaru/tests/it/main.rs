//! hakaru's integration tests: one binary, one module per area.

mod common;
mod e2e;
mod faults;
mod netns;
mod nic;
mod schema;
mod udp;
