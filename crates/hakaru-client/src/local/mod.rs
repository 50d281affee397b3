//! The kinds that run in one hakaru against a stock peer (an HTTP server, a stock TCP or UDP
//! tool, a responsiveness endpoint), beside the kinds run against a hakaru server: each
//! drives its engine and hands back the whole [`hakaru_model::RunResult`], so the binary only
//! parses flags and prints, as for the other kinds.

pub mod http;
pub mod raw;
pub mod rpm;
