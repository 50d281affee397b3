//! sockperf's message format (3.5 and later), sans-IO: the 14-byte header, what a server
//! answers, and the framing of a TCP stream.
//!
//! | bytes  | field |
//! |--------|-------|
//! | 0..8   | sequence number, u64 BE (the client starts at 1) |
//! | 8..10  | flags, u16 BE: 0x1 sent by a client, 0x2 reply wanted, 0x4 warm-up |
//! | 10..14 | length, u32 BE: the whole message including this header |
//! | 14..   | payload, echoed verbatim |
//!
//! A UDP datagram carries one message; a TCP stream is a sequence of messages framed by their
//! length field. A server answers a client message that wants a reply with the same bytes and
//! the client flag cleared (checked against the stock sockperf 3.7 on loopback).

use std::ops::Range;

/// Bytes of the header.
pub const HEADER_LEN: usize = 14;
/// Flag: the message was sent by a client (a server ignores messages without it).
pub const FLAG_CLIENT: u16 = 0x1;
/// Flag: the client wants this message answered.
pub const FLAG_PONG_REQUEST: u16 = 0x2;
/// Flag: a warm-up message, never counted or answered.
pub const FLAG_WARMUP: u16 = 0x4;
/// sockperf's default port (UDP and TCP).
pub const DEFAULT_PORT: u16 = 11111;
/// Largest message over UDP (the largest IPv4 UDP payload).
pub const MAX_UDP_MESSAGE: usize = 65_507;
/// Largest message over TCP hakaru accepts (sockperf's own TCP limit is just below 1 MiB).
pub const MAX_TCP_MESSAGE: usize = 1 << 20;

/// Why bytes are not a sockperf message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SockperfError {
    /// Fewer bytes than a header.
    #[error("{got} bytes is shorter than the 14-byte sockperf header")]
    Short {
        /// Bytes present.
        got: usize,
    },
    /// The length field is below the header size or above the limit.
    #[error("sockperf length field {length} is outside 14..={max}")]
    BadLength {
        /// The length field.
        length: u32,
        /// The largest length accepted.
        max: usize,
    },
    /// A datagram's size differs from its length field.
    #[error("a {got}-byte datagram says it is {length} bytes long")]
    SizeMismatch {
        /// The length field.
        length: u32,
        /// Bytes in the datagram.
        got: usize,
    },
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Sequence number.
    pub seq: u64,
    /// Flag bits (`FLAG_*`).
    pub flags: u16,
    /// Whole message length, header included.
    pub length: u32,
}

impl Header {
    /// A client request of `length` bytes that wants a reply (what `sockperf pp` sends).
    pub fn request(seq: u64, length: u32) -> Header {
        Header {
            seq,
            flags: FLAG_CLIENT | FLAG_PONG_REQUEST,
            length,
        }
    }

    /// Writes the header into the first 14 bytes of `buf`; a shorter `buf` is left alone.
    pub fn write(&self, buf: &mut [u8]) {
        if let Some(head) = buf.first_chunk_mut::<HEADER_LEN>() {
            *head = self.to_bytes();
        }
    }

    /// The 14 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let [s0, s1, s2, s3, s4, s5, s6, s7] = self.seq.to_be_bytes();
        let [f0, f1] = self.flags.to_be_bytes();
        let [l0, l1, l2, l3] = self.length.to_be_bytes();
        [s0, s1, s2, s3, s4, s5, s6, s7, f0, f1, l0, l1, l2, l3]
    }

    /// Sent by a client.
    pub fn is_client(&self) -> bool {
        self.flags & FLAG_CLIENT != 0
    }

    /// A reply is wanted.
    pub fn wants_reply(&self) -> bool {
        self.flags & FLAG_PONG_REQUEST != 0
    }

    /// A warm-up message.
    pub fn is_warmup(&self) -> bool {
        self.flags & FLAG_WARMUP != 0
    }
}

/// Reads the header at the start of `buf` and checks its length field against `max`.
pub fn parse(buf: &[u8], max: usize) -> Result<Header, SockperfError> {
    let Some(&[s0, s1, s2, s3, s4, s5, s6, s7, f0, f1, l0, l1, l2, l3]) =
        buf.first_chunk::<HEADER_LEN>()
    else {
        return Err(SockperfError::Short { got: buf.len() });
    };
    let h = Header {
        seq: u64::from_be_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
        flags: u16::from_be_bytes([f0, f1]),
        length: u32::from_be_bytes([l0, l1, l2, l3]),
    };
    if (h.length as usize) < HEADER_LEN || h.length as usize > max {
        return Err(SockperfError::BadLength {
            length: h.length,
            max,
        });
    }
    Ok(h)
}

/// Reads a whole UDP datagram as one message: its length field must equal its size.
pub fn parse_datagram(buf: &[u8], max: usize) -> Result<Header, SockperfError> {
    let h = parse(buf, max)?;
    if h.length as usize != buf.len() {
        return Err(SockperfError::SizeMismatch {
            length: h.length,
            got: buf.len(),
        });
    }
    Ok(h)
}

/// What a server does with a well-formed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Count it and send the (rewritten) message back.
    Reply,
    /// Count it; no reply wanted (throughput mode, or between under-load replies).
    Count,
    /// Not from a client, or warm-up: neither counted nor answered.
    Ignore,
}

/// The server's decision for a message with header `h`.
pub fn verdict(h: &Header) -> Verdict {
    if !h.is_client() || h.is_warmup() {
        Verdict::Ignore
    } else if h.wants_reply() {
        Verdict::Reply
    } else {
        Verdict::Count
    }
}

/// Turns a complete client message into its reply in place: the client flag is cleared,
/// everything else (sequence, other flags, length, payload) stays, which is exactly what a
/// stock sockperf client checks.
pub fn make_reply(msg: &mut [u8]) {
    if let Some([_, _, _, _, _, _, _, _, f0, f1, _, _, _, _]) = msg.first_chunk_mut::<HEADER_LEN>()
    {
        let flags = u16::from_be_bytes([*f0, *f1]) & !FLAG_CLIENT;
        [*f0, *f1] = flags.to_be_bytes();
    }
}

/// The reply a server sends to one complete message, if any; an error for malformed input.
pub fn reply_for(msg: &[u8], max: usize) -> Result<Option<Vec<u8>>, SockperfError> {
    let h = parse_datagram(msg, max)?;
    Ok(match verdict(&h) {
        Verdict::Reply => {
            let mut r = msg.to_vec();
            make_reply(&mut r);
            Some(r)
        }
        Verdict::Count | Verdict::Ignore => None,
    })
}

/// Splits a TCP byte stream into sockperf messages, whatever the read boundaries.
///
/// Read into [`spare`](Self::spare), report with [`filled`](Self::filled), then take messages
/// with [`next_message`](Self::next_message) until it returns `None`. After an error the
/// stream cannot be re-synchronised (there is no marker to find the next header by): close it.
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
}

impl Reassembler {
    /// A reassembler accepting messages up to `max` bytes.
    pub fn new(max: usize) -> Reassembler {
        Reassembler {
            // Grows with bytes that arrive, never with a length a peer declares.
            buf: vec![0u8; 8192.min(max.max(HEADER_LEN))],
            start: 0,
            end: 0,
            max,
        }
    }

    /// Bytes received but not yet taken as messages.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Room to read into: at least 4 KiB. The buffer grows with what arrives, so a peer that
    /// declares a large message and sends little of it costs only what it sent.
    pub fn spare(&mut self) -> &mut [u8] {
        let need_msg = self.pending_length().unwrap_or(0);
        let room = self.buf.len() - self.end;
        if self.start > 0
            && (self.start == self.end || room < 4096 || self.start + need_msg > self.buf.len())
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let want = self.end + 4096;
        if self.buf.len() < want {
            // Doubling keeps a large message's reads amortised.
            let doubled = (self.buf.len() * 2).min(self.max + 4096);
            self.buf.resize(want.max(doubled), 0);
        }
        self.buf.get_mut(self.end..).unwrap_or_default()
    }

    /// `n` bytes were read into the slice [`spare`](Self::spare) returned.
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Appends bytes (the copying form of `spare` and `filled`).
    pub fn extend(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = self.spare();
            let (now, later) = data.split_at(room.len().min(data.len()));
            if let Some(dst) = room.get_mut(..now.len()) {
                dst.copy_from_slice(now);
            }
            self.filled(now.len());
            data = later;
        }
    }

    /// The length of the message at the front, once its header has arrived and is valid.
    fn pending_length(&self) -> Option<usize> {
        parse(self.pending_bytes(), self.max)
            .ok()
            .map(|h| h.length as usize)
    }

    fn next_range(&mut self) -> Result<Option<Range<usize>>, SockperfError> {
        if self.pending() < HEADER_LEN {
            return Ok(None);
        }
        let h = parse(self.pending_bytes(), self.max)?;
        let len = h.length as usize;
        if self.pending() < len {
            return Ok(None);
        }
        let r = self.start..self.start + len;
        self.start += len;
        Ok(Some(r))
    }

    /// The next complete message, mutable so it can be turned into its reply in place; valid
    /// until the next call. `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<&mut [u8]>, SockperfError> {
        Ok(self.next_range()?.and_then(|r| self.buf.get_mut(r)))
    }

    /// The bytes received but not yet taken (`start <= end <= buf.len()` always holds).
    fn pending_bytes(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, flags: u16, len: usize) -> Vec<u8> {
        let mut m: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        Header {
            seq,
            flags,
            length: len as u32,
        }
        .write(&mut m);
        m
    }

    #[test]
    fn a_declared_length_allocates_nothing_until_bytes_arrive() {
        let mut r = Reassembler::new(MAX_TCP_MESSAGE);
        // A header declaring a 1 MiB message, then nothing more.
        let mut h = Header::request(1, MAX_TCP_MESSAGE as u32)
            .to_bytes()
            .to_vec();
        h.truncate(HEADER_LEN);
        r.extend(&h);
        assert!(matches!(r.next_message(), Ok(None)));
        let room = r.spare().len();
        assert!(
            r.buf.len() <= 16 << 10,
            "buffer {} after a bare header",
            r.buf.len()
        );
        assert!(room >= 4096);
    }

    #[test]
    fn a_buffer_too_short_for_a_header_is_left_alone() {
        let mut b = [0xaau8; HEADER_LEN - 1];
        Header::request(1, 32).write(&mut b);
        assert_eq!(b, [0xaa; HEADER_LEN - 1]);
        make_reply(&mut b);
        assert_eq!(b, [0xaa; HEADER_LEN - 1]);
    }

    #[test]
    fn header_bytes_match_a_captured_request() {
        // sockperf 3.7 pp -m 32, first request: seq 1, flags 0x0003, length 0x20.
        let h = Header::request(1, 32);
        assert_eq!(h.to_bytes(), [0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 0, 0, 0, 0x20]);
        assert_eq!(parse(&h.to_bytes(), 65_507), Ok(h));
    }

    #[test]
    fn ping_pong_reply_clears_only_the_client_flag() {
        let req = msg(5, FLAG_CLIENT | FLAG_PONG_REQUEST, 64);
        let rep = reply_for(&req, MAX_UDP_MESSAGE).unwrap().unwrap();
        assert_eq!(rep.len(), 64);
        assert_eq!(&rep[8..10], &[0, 2]);
        assert_eq!(&rep[..8], &req[..8]);
        assert_eq!(&rep[10..], &req[10..]);
    }

    #[test]
    fn throughput_warmup_and_server_messages_get_no_reply() {
        for flags in [
            FLAG_CLIENT,
            FLAG_PONG_REQUEST,
            FLAG_CLIENT | FLAG_WARMUP | 2,
            0,
        ] {
            assert_eq!(reply_for(&msg(1, flags, 14), MAX_UDP_MESSAGE), Ok(None));
        }
        let h = |flags| Header {
            seq: 1,
            flags,
            length: 14,
        };
        assert_eq!(verdict(&h(FLAG_CLIENT)), Verdict::Count);
        assert_eq!(verdict(&h(FLAG_CLIENT | FLAG_WARMUP)), Verdict::Ignore);
        assert_eq!(verdict(&h(FLAG_PONG_REQUEST)), Verdict::Ignore);
        assert_eq!(verdict(&h(3)), Verdict::Reply);
    }

    #[test]
    fn malformed_datagrams_are_errors() {
        assert_eq!(
            reply_for(&[1, 2, 3], MAX_UDP_MESSAGE),
            Err(SockperfError::Short { got: 3 })
        );
        assert_eq!(reply_for(&[], 100), Err(SockperfError::Short { got: 0 }));
        let mut m = msg(1, 3, 20);
        m[10..14].copy_from_slice(&10u32.to_be_bytes());
        assert!(matches!(
            reply_for(&m, MAX_UDP_MESSAGE),
            Err(SockperfError::BadLength { length: 10, .. })
        ));
        m[10..14].copy_from_slice(&30u32.to_be_bytes());
        assert_eq!(
            reply_for(&m, MAX_UDP_MESSAGE),
            Err(SockperfError::SizeMismatch {
                length: 30,
                got: 20
            })
        );
        // --dummy-send writes its header in host (little-endian) order: a huge length.
        let mut d = vec![0u8; 14];
        d[..8].copy_from_slice(&7u64.to_le_bytes());
        d[8..10].copy_from_slice(&0x0401u16.to_le_bytes());
        d[10..14].copy_from_slice(&14u32.to_le_bytes());
        assert!(matches!(
            reply_for(&d, MAX_UDP_MESSAGE),
            Err(SockperfError::BadLength { .. })
        ));
        m[10..14].copy_from_slice(&200u32.to_be_bytes());
        assert!(matches!(
            parse(&m, 100),
            Err(SockperfError::BadLength {
                length: 200,
                max: 100
            })
        ));
    }

    #[test]
    fn reassembler_handles_every_split_point() {
        let mut stream = Vec::new();
        let sizes = [14usize, 64, 1000, 14, 70_000];
        for (i, &n) in sizes.iter().enumerate() {
            stream.extend(msg(i as u64 + 1, 3, n));
        }
        for chunk in [1usize, 2, 13, 14, 15, 999, 4096, 100_000] {
            let mut r = Reassembler::new(MAX_TCP_MESSAGE);
            let mut got = Vec::new();
            for part in stream.chunks(chunk) {
                r.extend(part);
                while let Some(m) = r.next_message().unwrap() {
                    make_reply(m);
                    got.push(m.to_vec());
                }
            }
            assert_eq!(got.len(), sizes.len(), "chunk {chunk}");
            for (i, m) in got.iter().enumerate() {
                let h = parse(m, MAX_TCP_MESSAGE).unwrap();
                assert_eq!(h.seq, i as u64 + 1);
                assert_eq!(h.length as usize, sizes[i]);
                assert_eq!(h.flags, FLAG_PONG_REQUEST);
                assert_eq!(m.len(), sizes[i]);
            }
            assert_eq!(r.pending(), 0);
        }
    }

    #[test]
    fn reassembler_reads_in_place() {
        let mut r = Reassembler::new(MAX_TCP_MESSAGE);
        let m = msg(9, 1, 5000);
        let mut off = 0;
        while off < m.len() {
            let room = r.spare();
            let n = room.len().min(777).min(m.len() - off);
            room[..n].copy_from_slice(&m[off..off + n]);
            r.filled(n);
            off += n;
        }
        assert_eq!(r.next_message().unwrap().map(|s| s.to_vec()), Some(m));
        assert_eq!(r.next_message().unwrap(), None);
    }

    #[test]
    fn reassembler_rejects_oversized_and_undersized_lengths() {
        let mut r = Reassembler::new(1000);
        r.extend(&msg(1, 3, 2000)[..20]);
        assert!(matches!(
            r.next_message(),
            Err(SockperfError::BadLength { length: 2000, .. })
        ));
        let mut r = Reassembler::new(1000);
        let mut m = msg(1, 3, 14);
        m[10..14].copy_from_slice(&3u32.to_be_bytes());
        r.extend(&m);
        assert!(r.next_message().is_err());
        // A partial header is not an error yet.
        let mut r = Reassembler::new(1000);
        r.extend(&[0, 0, 0]);
        assert_eq!(r.next_message(), Ok(None));
    }
}
