//! hakaru-engine: the data plane.
//!
//! Flow workers move bytes on sockets they are handed, count into per-flow atomic counters,
//! and a ticker thread snapshots those counters every interval. Nothing here prints or speaks
//! a control protocol: callers get samples through callbacks and a [`hakaru_model::SideReport`]
//! at the end. OS-specific code lives in [`sys`].

pub mod arrival;
pub mod connect;
pub mod connect_server;
pub mod control;
pub mod counters;
pub mod drive;
pub mod framing;
pub mod hist;
pub mod http;
pub mod observer;
pub mod ping;
pub mod raw;
pub mod recvbuf;
pub mod running;
pub mod seq;
pub mod side;
pub mod sockopt;
/// The OS layer, a crate of its own (`hakaru-sys`); re-exported so `engine::sys::X` still names it.
pub use hakaru_sys as sys;
pub mod tcp;
pub mod udp;
pub mod wake;

pub use observer::Observer;
pub use running::Running;
pub use side::CounterBase;
