//! netperf's control session (stock netperf 2.6 and 2.7 clients), as a machine.

pub mod server;

#[cfg(test)]
mod server_tests;
