//! netperf's control sessions: stock netperf 2.6 and 2.7 clients on `hakaru server`
//! (`server`), and `hakaru ... --netperf` against a stock netserver (`client`, with the test
//! mapping in `request`), as machines.

pub mod client;
pub mod request;
pub mod server;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod server_tests;
