//! hakaru-rpm: the responsiveness test of draft-ietf-ippm-responsiveness ("Responsiveness
//! under Working Conditions"), client and server, over HTTP/2 and TLS (h2, tokio-rustls).
//!
//! The pure parts are sans-IO and unit-tested: the `/.well-known/nq` configuration
//! ([`config`]), the arithmetic ([`stats`]) and the algorithm as a machine on virtual time
//! ([`ramp`]). The drivers ([`client`], [`server`]) own the sockets, the clocks and the tokio
//! runtime, which stays inside this crate. The method in words: docs/rpm.md.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

pub mod client;
pub mod config;
pub mod conn;
mod http1;
pub mod limits;
pub mod ramp;
pub mod route;
pub mod server;
pub mod shallow;
pub mod stats;

pub use client::run;
pub use server::{start, Event, Events, Limits, RpmServer, ServerOptions};
