//! How the pinger frames its requests: hakaru's datagram header for a hakaru server, or
//! sockperf's message header for a stock `sockperf sr`, or none for a stock netserver. One
//! pinger serves all three; only the bytes of the header differ.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use hakaru_proto::datagram::{read_header, write_header};
use hakaru_proto::sockperf::{self, Header};

/// The header a ping request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// hakaru's header (flow, sequence number, send time); the echo returns the bytes as is.
    #[default]
    Hakaru,
    /// sockperf's header (sequence number, client and reply-wanted flags, length); the server
    /// answers with the client flag cleared.
    Sockperf,
    /// No header: a stock netserver (netperf TCP_RR, UDP_RR) answers each request with a
    /// response of its own bytes. Replies come in request order, so a whole reply answers the
    /// oldest request still waiting.
    Opaque,
}

impl Framing {
    /// Writes the header of request `seq` into `buf` (the whole request).
    pub fn write_request(self, buf: &mut [u8], flow: u16, seq: u64, stamp_ns: u64) {
        match self {
            Framing::Hakaru => write_header(buf, flow, seq, stamp_ns),
            // sockperf numbers messages from 1.
            Framing::Sockperf => Header::request(seq + 1, buf.len() as u32).write(buf),
            Framing::Opaque => {}
        }
    }

    /// The sequence number of the reply in `buf` (exactly one request's size), or `None` if it
    /// is not a reply: a stray datagram, or a sockperf message that is not a server's answer.
    /// `oldest`: the oldest request still waiting for its reply (what an opaque reply answers).
    pub fn read_reply(self, buf: &[u8], oldest: u64) -> Option<u64> {
        match self {
            Framing::Opaque => Some(oldest),
            Framing::Hakaru => read_header(buf).map(|h| h.seq),
            Framing::Sockperf => sockperf::parse_datagram(buf, buf.len())
                .ok()
                .filter(|h| !h.is_client() && !h.is_warmup() && h.seq > 0)
                .map(|h| h.seq - 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockperf_request_and_reply_round_trip() {
        let mut req = vec![0u8; 64];
        Framing::Sockperf.write_request(&mut req, 3, 41, 999);
        assert_eq!(&req[..14], &Header::request(42, 64).to_bytes());
        // The server's answer: the client flag cleared.
        let mut rep = req.clone();
        sockperf::make_reply(&mut rep);
        assert_eq!(Framing::Sockperf.read_reply(&rep, 0), Some(41));
        // Our own request echoed unchanged is not an answer.
        assert_eq!(Framing::Sockperf.read_reply(&req, 0), None);
        assert_eq!(Framing::Sockperf.read_reply(&rep[..20], 0), None);
    }

    #[test]
    fn hakaru_framing_reads_its_own_header() {
        let mut req = vec![0u8; 32];
        Framing::Hakaru.write_request(&mut req, 3, 41, 999);
        assert_eq!(Framing::Hakaru.read_reply(&req, 0), Some(41));
    }

    #[test]
    fn opaque_replies_answer_the_oldest_request() {
        let mut req = vec![b'x'; 8];
        Framing::Opaque.write_request(&mut req, 3, 41, 999);
        assert_eq!(req, vec![b'x'; 8]);
        assert_eq!(Framing::Opaque.read_reply(b"rrrrrrrr", 41), Some(41));
    }
}
