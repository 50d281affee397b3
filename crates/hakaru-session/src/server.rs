//! The native server session (hakaru's own protocol), as a machine.
