//! iperf3's control sessions (stock iperf3 3.x clients and servers), as machines.

pub mod client;
pub mod plan;
pub mod results;
pub mod server;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod server_tests;
