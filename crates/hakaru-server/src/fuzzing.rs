//! What the fuzz targets in `fuzz/` reach inside the server: built only by `cargo fuzz`
//! (`--cfg fuzzing`), never part of the server.

/// The ntttcp receiver's groups of senders and their data connections, driven by a
/// script of events and checked against a model (panics when they disagree).
pub fn ntttcp_groups(data: &[u8]) {
    crate::ntttcp::fuzz_groups(data);
}
