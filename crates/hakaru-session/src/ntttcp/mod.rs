//! ntttcp-for-linux's sync sessions (stock `ntttcp -s` senders and `ntttcp -r` receivers), as
//! machines.

pub mod client;
pub mod server;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod server_tests;
