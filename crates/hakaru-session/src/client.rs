//! The native client session (hakaru's own protocol), as a machine.
