//! ntttcp-for-linux's sync sessions (stock `ntttcp -s` senders and `ntttcp -r` receivers), as
//! machines.

pub mod client;
pub mod front;
/// The model-checked script of [`front`] (its unit test here, and the fuzz target
/// `ntttcp_groups`, which compiles this file into itself).
#[cfg(test)]
mod script;
pub mod server;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod server_tests;
