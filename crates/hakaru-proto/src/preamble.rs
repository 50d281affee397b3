//! Classifying a new connection on the shared control port by its first bytes.

use crate::native::MAGIC;

/// What a connection speaks, judged from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preamble {
    /// hakaru's native protocol (control or data connection).
    Hakaru,
    /// An iperf3 client: a 36-character base32 cookie and a NUL.
    Iperf3Cookie,
    /// Anything else.
    Unknown,
}

/// Bytes needed to tell every known protocol apart.
pub const PREAMBLE_LEN: usize = 4;

/// Classifies the first bytes of a connection; `None` if more bytes are needed.
pub fn classify(first: &[u8]) -> Option<Preamble> {
    let Some(head) = first.first_chunk::<PREAMBLE_LEN>() else {
        // Decide early when the bytes already rule hakaru out.
        if !first.is_empty() && !MAGIC.starts_with(first) && !first.iter().all(|&b| is_base32(b)) {
            return Some(Preamble::Unknown);
        }
        return None;
    };
    if *head == MAGIC {
        Some(Preamble::Hakaru)
    } else if head.iter().all(|&b| is_base32(b)) {
        Some(Preamble::Iperf3Cookie)
    } else {
        Some(Preamble::Unknown)
    }
}

/// iperf3 cookies use the lowercase RFC 4648 base32 alphabet.
fn is_base32(b: u8) -> bool {
    b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_protocols_apart() {
        assert_eq!(classify(b"HKRU\0\0"), Some(Preamble::Hakaru));
        assert_eq!(classify(b"abc7defg"), Some(Preamble::Iperf3Cookie));
        assert_eq!(classify(b"GET / HTTP/1.1"), Some(Preamble::Unknown));
        assert_eq!(classify(b"HK"), None);
        assert_eq!(classify(b"\x16\x03"), Some(Preamble::Unknown));
        assert_eq!(classify(b""), None);
    }
}
