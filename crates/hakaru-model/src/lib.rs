//! hakaru-model: plain data shared by every layer of hakaru.
//!
//! Units are types ([`Bytes`], [`BitRate`], [`Dur`]) that parse from and print to the forms
//! users type (`128K`, `10G`, `250us`). Test specifications are validated here so that a
//! spec received from the network is checked by the same code as one built from flags.
//! [`RunResult`] is the one result type every renderer reads; it is versioned by
//! [`SCHEMA_VERSION`].

pub mod assemble;
pub mod capacity;
pub mod config;
pub mod connect;
pub mod detail;
pub mod http;
pub mod kind;
pub mod latency;
pub mod latency_base;
pub mod mesh;
pub mod metrics;
pub mod nic;
pub mod plan;
pub mod probe;
pub mod raw;
pub mod remote;
pub mod result;
pub mod rpm;
pub mod spec;
pub mod udp;
pub mod udpst;
pub mod units;

pub use assemble::{assemble, end_result, merge_interval, Inputs as AssembleInputs};
pub use config::*;
pub use connect::*;
pub use detail::KindDetail;
pub use http::*;
pub use kind::{Common, Kind};
pub use latency::*;
pub use nic::*;
pub use probe::*;
pub use raw::*;
pub use remote::{NotRemote, RemoteSpec};
pub use result::*;
pub use rpm::*;
pub use spec::*;
pub use udp::*;
pub use udpst::*;
pub use units::*;
