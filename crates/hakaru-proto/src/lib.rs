//! hakaru-proto: wire formats, without I/O.
//!
//! Everything here takes bytes and returns messages (or the reverse), so it is tested
//! without sockets. [`native`] is hakaru's own control protocol; [`preamble`] tells the
//! protocols that share the control port apart from their first bytes; [`datagram`] is the
//! header of UDP test datagrams and the hello that opens a UDP flow; [`iperf3`] is iperf3's
//! control protocol and UDP framing; [`sockperf`] is the stock sockperf's message header and
//! TCP framing; [`iperf2`] is what a raw sink needs of iperf2 clients; [`auth`] is the
//! pre-shared key challenge-response of the native protocol; [`http`] is the HTTP/1.1 that
//! `hakaru http` and the server's HTTP endpoint speak; [`ntttcp`] is ntttcp-for-linux's sender/receiver
//! sync protocol; [`netperf`] is netperf's 656-byte control messages.
//!
//! Every decoder here reads bytes a peer chose, so no indexing or slicing that could panic is
//! allowed outside tests: reads go through `get`, `first_chunk`, `split_first_chunk` and the
//! like, which turn a short input into an error or `None`.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

pub mod auth;
pub mod datagram;
pub mod http;
pub mod iperf2;
pub mod iperf3;
pub mod native;
pub mod netperf;
pub mod ntttcp;
pub mod preamble;
pub mod sockperf;
pub mod udpst;

pub use native::{
    Decoder, Message, ProtoError, ServerInfo, TestKind, MAGIC, MAX_FRAME, PROTOCOL_VERSION,
};
