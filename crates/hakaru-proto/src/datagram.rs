//! UDP datagram formats, sans-IO: the header every test datagram carries and the hello that
//! ties a UDP flow to its test.
//!
//! Test datagrams start with a header of up to 14 bytes, big-endian, as much as the payload
//! length allows:
//!
//! | bytes | field | present when the payload is |
//! |-------|-------|-----------------------------|
//! | 0..2  | flow id (under 1024, so byte 0 is 0 to 3) | at least 8 bytes |
//! | 2..8  | sequence number, 48 bits, from 0 | at least 8 bytes |
//! | 8..14 | send time, 48 bits, nanoseconds since the sender's start (78 hours of range) | at least 14 bytes |
//!
//! Shorter payloads (netperf's `-m 1`) carry no header: they are counted, not sequenced.
//!
//! A UDP flow opens with a hello from the client, `"HKUH"`, version, kind (1 hello, 2 ack),
//! flow id (u16) and the test's 16-byte token; the server answers from the flow's own socket
//! with the same bytes and kind 2. When the flow gets a server port of its own (kind 3, only to
//! a client whose spec allows it), the answer comes from the server's UDP port instead and
//! carries that port in two more bytes; the client connects its socket there. A hello starts
//! with `'H'` (0x48), which no data header can.

/// Bytes of the header that carries flow and sequence number.
pub const SEQ_HEADER: usize = hakaru_model::SEQ_HEADER;
/// Bytes of the full header (flow, sequence number, send time).
pub const FULL_HEADER: usize = 14;
/// Bytes of a hello or ack.
pub const HELLO_LEN: usize = 24;
/// Bytes of a moved ack (an ack and the flow's server port).
pub const MOVED_LEN: usize = HELLO_LEN + 2;
/// First bytes of a hello or ack.
pub const HELLO_MAGIC: [u8; 4] = *b"HKUH";
/// Version of the datagram formats.
pub const DATAGRAM_VERSION: u8 = 1;
/// Largest sequence number or timestamp the 48-bit fields hold.
pub const MAX48: u64 = (1 << 48) - 1;

/// What the header of a datagram of `len` payload bytes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Under 8 bytes: no header; counted only.
    Counted,
    /// 8 to 13 bytes: flow and sequence number.
    Sequenced,
    /// 14 bytes or more: flow, sequence number and send time.
    Timestamped,
}

impl Layout {
    /// The layout of a payload of `len` bytes.
    pub fn for_length(len: usize) -> Layout {
        if len >= FULL_HEADER {
            Layout::Timestamped
        } else if len >= SEQ_HEADER {
            Layout::Sequenced
        } else {
            Layout::Counted
        }
    }
}

/// A decoded test-datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Flow id.
    pub flow: u16,
    /// Sequence number.
    pub seq: u64,
    /// Send time, nanoseconds since the sender's start, when the payload had room.
    pub sent_ns: Option<u64>,
}

fn put48(buf: &mut [u8; 6], v: u64) {
    let [_, _, low @ ..] = (v & MAX48).to_be_bytes();
    *buf = low;
}

fn get48(buf: &[u8; 6]) -> u64 {
    let [a, b, c, d, e, f] = *buf;
    u64::from_be_bytes([0, 0, a, b, c, d, e, f])
}

/// Writes the header that fits `buf` (see [`Layout`]); the rest of `buf` is left alone.
#[inline]
pub fn write_header(buf: &mut [u8], flow: u16, seq: u64, sent_ns: u64) {
    if let Some((head, rest)) = buf.split_first_chunk_mut::<SEQ_HEADER>() {
        let [f0, f1, seq_bytes @ ..] = head;
        [*f0, *f1] = flow.to_be_bytes();
        put48(seq_bytes, seq);
        if let Some(sent) = rest.first_chunk_mut::<{ FULL_HEADER - SEQ_HEADER }>() {
            put48(sent, sent_ns);
        }
    }
}

/// Reads the header of a test datagram; `None` when it is too short to have one or is a hello.
#[inline]
pub fn read_header(buf: &[u8]) -> Option<DataHeader> {
    let (head, rest) = buf.split_first_chunk::<SEQ_HEADER>()?;
    let [f0, f1, seq @ ..] = head;
    if *f0 == HELLO_MAGIC[0] {
        return None;
    }
    Some(DataHeader {
        flow: u16::from_be_bytes([*f0, *f1]),
        seq: get48(seq),
        sent_ns: rest
            .first_chunk::<{ FULL_HEADER - SEQ_HEADER }>()
            .map(get48),
    })
}

/// How test datagrams are framed: hakaru's header, or iperf3's (seconds, microseconds and a
/// 32- or 64-bit sequence number from 1, docs/protocol-notes.md, "Wire formats").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// hakaru's header (see the module documentation).
    #[default]
    Hakaru,
    /// iperf3's header; `seq64` when `--udp-counters-64bit` was negotiated.
    Iperf3 {
        /// 64-bit sequence numbers.
        seq64: bool,
    },
}

/// Bytes of iperf3's header with 32-bit sequence numbers.
pub const IPERF3_HEADER: usize = 12;
/// Bytes of iperf3's header with 64-bit sequence numbers.
pub const IPERF3_HEADER64: usize = 16;

impl Framing {
    /// Writes the header of datagram `seq` (from 0) of `flow`, sent `sent_ns` after the
    /// sender's start.
    #[inline]
    pub fn write(self, buf: &mut [u8], flow: u16, seq: u64, sent_ns: u64) {
        match self {
            Framing::Hakaru => write_header(buf, flow, seq, sent_ns),
            Framing::Iperf3 { seq64 } => {
                let need = if seq64 {
                    IPERF3_HEADER64
                } else {
                    IPERF3_HEADER
                };
                if buf.len() < need {
                    return;
                }
                let sec = (sent_ns / 1_000_000_000) as u32;
                let usec = ((sent_ns % 1_000_000_000) / 1000) as u32;
                let Some((sec_b, rest)) = buf.split_first_chunk_mut::<4>() else {
                    return;
                };
                let Some((usec_b, rest)) = rest.split_first_chunk_mut::<4>() else {
                    return;
                };
                *sec_b = sec.to_be_bytes();
                *usec_b = usec.to_be_bytes();
                // iperf3 numbers datagrams from 1.
                if seq64 {
                    if let Some(s) = rest.first_chunk_mut::<8>() {
                        *s = (seq + 1).to_be_bytes();
                    }
                } else if let Some(s) = rest.first_chunk_mut::<4>() {
                    *s = ((seq + 1) as u32).to_be_bytes();
                }
            }
        }
    }

    /// Reads a datagram's header. iperf3 datagrams carry no flow id: the socket tells the
    /// flow, so `flow` is the receiving flow's. `None` for datagrams without a valid header.
    #[inline]
    pub fn read(self, buf: &[u8], flow: u16) -> Option<DataHeader> {
        match self {
            Framing::Hakaru => read_header(buf),
            Framing::Iperf3 { seq64 } => {
                let need = if seq64 {
                    IPERF3_HEADER64
                } else {
                    IPERF3_HEADER
                };
                if buf.len() < need {
                    return None;
                }
                let (sec, rest) = buf.split_first_chunk::<4>()?;
                let (usec, rest) = rest.split_first_chunk::<4>()?;
                let sec = u64::from(u32::from_be_bytes(*sec));
                let usec = u64::from(u32::from_be_bytes(*usec));
                let seq = if seq64 {
                    u64::from_be_bytes(*rest.first_chunk::<8>()?)
                } else {
                    u64::from(u32::from_be_bytes(*rest.first_chunk::<4>()?))
                };
                // Sequence 0 never comes from a stock sender; usec over a second is garbage.
                if seq == 0 || usec >= 1_000_000 {
                    return None;
                }
                Some(DataHeader {
                    flow,
                    seq: seq - 1,
                    sent_ns: Some(sec * 1_000_000_000 + usec * 1000),
                })
            }
        }
    }
}

/// Hello (client to server) or its acknowledgement (server to client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowHello {
    /// Client: this socket carries `flow` of the test with `token`.
    Hello {
        /// Flow id.
        flow: u16,
        /// The test's token.
        token: [u8; 16],
    },
    /// Server: the flow is connected; sent from the server's socket for that flow.
    Ack {
        /// Flow id.
        flow: u16,
        /// The test's token.
        token: [u8; 16],
    },
    /// Server: the flow is connected on a server port of its own, `port`; sent from the
    /// server's UDP port (where the hello went).
    Moved {
        /// Flow id.
        flow: u16,
        /// The test's token.
        token: [u8; 16],
        /// The server's port for the flow.
        port: u16,
    },
}

impl FlowHello {
    /// Encodes the hello or ack ([`HELLO_LEN`] bytes, [`MOVED_LEN`] for a moved ack).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, flow, token, port) = match *self {
            FlowHello::Hello { flow, token } => (1u8, flow, token, None),
            FlowHello::Ack { flow, token } => (2u8, flow, token, None),
            FlowHello::Moved { flow, token, port } => (3u8, flow, token, Some(port)),
        };
        let mut out = Vec::with_capacity(MOVED_LEN);
        out.extend_from_slice(&HELLO_MAGIC);
        out.push(DATAGRAM_VERSION);
        out.push(kind);
        out.extend_from_slice(&flow.to_be_bytes());
        out.extend_from_slice(&token);
        if let Some(port) = port {
            out.extend_from_slice(&port.to_be_bytes());
        }
        out
    }

    /// Decodes a hello or ack; `None` for anything else (wrong size, magic, version or kind,
    /// or a moved ack naming port 0).
    pub fn decode(buf: &[u8]) -> Option<FlowHello> {
        let (head, rest) = buf.split_first_chunk::<8>()?;
        let [m0, m1, m2, m3, version, kind, f0, f1] = *head;
        if [m0, m1, m2, m3] != HELLO_MAGIC || version != DATAGRAM_VERSION {
            return None;
        }
        let flow = u16::from_be_bytes([f0, f1]);
        let (token, rest) = rest.split_first_chunk::<16>()?;
        let token = *token;
        // A hello and an ack end with the token, a moved ack with the port after it.
        match (kind, rest) {
            (1, []) => Some(FlowHello::Hello { flow, token }),
            (2, []) => Some(FlowHello::Ack { flow, token }),
            (3, &[p0, p1]) => match u16::from_be_bytes([p0, p1]) {
                0 => None,
                port => Some(FlowHello::Moved { flow, token, port }),
            },
            _ => None,
        }
    }
}

/// The 16 bytes of a test token given as 32 hex digits (as `accepted` carries it).
pub fn token_bytes(hex: &str) -> Option<[u8; 16]> {
    let b = hex.as_bytes();
    if b.len() != 32 {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 16];
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let &[hi, lo] = pair else {
            return None;
        };
        *o = nib(hi)? << 4 | nib(lo)?;
    }
    Some(out)
}

/// The hex form of a token's bytes.
pub fn token_hex(bytes: &[u8; 16]) -> String {
    bytes.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_framing_round_trips_and_matches_the_wire() {
        let f = Framing::Iperf3 { seq64: false };
        let mut buf = [0u8; 20];
        f.write(&mut buf, 7, 0, 3_250_000_000);
        // seconds 3, microseconds 250000, sequence 1 (iperf3 counts from 1).
        assert_eq!(&buf[..12], &[0, 0, 0, 3, 0, 3, 0xd0, 0x90, 0, 0, 0, 1]);
        let h = f.read(&buf, 7).unwrap();
        assert_eq!((h.flow, h.seq, h.sent_ns), (7, 0, Some(3_250_000_000)));
        let f64_ = Framing::Iperf3 { seq64: true };
        f64_.write(&mut buf, 1, (1 << 33) - 1, 0);
        assert_eq!(&buf[8..16], &(1u64 << 33).to_be_bytes());
        assert_eq!(f64_.read(&buf, 1).unwrap().seq, (1 << 33) - 1);
        // Too short, sequence 0 and impossible microseconds are not datagrams of a stream.
        assert_eq!(f.read(&buf[..11], 1), None);
        assert_eq!(f.read(&[0u8; 16], 1), None);
        let mut bad = [0u8; 16];
        bad[4..8].copy_from_slice(&2_000_000u32.to_be_bytes());
        bad[11] = 1;
        assert_eq!(f.read(&bad, 1), None);
        assert_eq!(Framing::Hakaru.read(&buf[..4], 1), None);
    }

    #[test]
    fn header_round_trips_at_every_layout() {
        let mut buf = [0xeeu8; 20];
        write_header(&mut buf, 1023, 0x1234_5678_9abc, 0x0fed_cba9_8765);
        assert_eq!(
            read_header(&buf),
            Some(DataHeader {
                flow: 1023,
                seq: 0x1234_5678_9abc,
                sent_ns: Some(0x0fed_cba9_8765)
            })
        );
        // Payload after the header is untouched.
        assert_eq!(buf[14..], [0xee; 6]);
        let mut short = [0u8; 10];
        write_header(&mut short, 7, 99, 5);
        assert_eq!(
            read_header(&short),
            Some(DataHeader {
                flow: 7,
                seq: 99,
                sent_ns: None
            })
        );
        let mut tiny = [0xaau8; 3];
        write_header(&mut tiny, 7, 99, 5);
        assert_eq!(tiny, [0xaa; 3]);
        assert_eq!(read_header(&tiny), None);
        assert_eq!(Layout::for_length(1), Layout::Counted);
        assert_eq!(Layout::for_length(8), Layout::Sequenced);
        assert_eq!(Layout::for_length(14), Layout::Timestamped);
    }

    #[test]
    fn sequence_numbers_wrap_at_48_bits() {
        let mut buf = [0u8; 14];
        write_header(&mut buf, 0, MAX48 + 5, 0);
        assert_eq!(read_header(&buf).unwrap().seq, 4);
    }

    #[test]
    fn hello_round_trips_and_rejects_garbage() {
        let token = token_bytes("00112233445566778899aabbccddeeff").unwrap();
        assert_eq!(token_hex(&token), "00112233445566778899aabbccddeeff");
        for h in [
            FlowHello::Hello { flow: 3, token },
            FlowHello::Ack { flow: 9, token },
            FlowHello::Moved {
                flow: 4,
                token,
                port: 40_001,
            },
        ] {
            let b = h.encode();
            let want = if matches!(h, FlowHello::Moved { .. }) {
                MOVED_LEN
            } else {
                HELLO_LEN
            };
            assert_eq!(b.len(), want);
            assert_eq!(FlowHello::decode(&b), Some(h));
            // A hello is never mistaken for data.
            assert_eq!(read_header(&b), None);
            for cut in 0..b.len() {
                assert_eq!(FlowHello::decode(&b[..cut]), None);
            }
            let mut bad = b.clone();
            bad[5] = 7;
            assert_eq!(FlowHello::decode(&bad), None);
            let mut bad = b.clone();
            bad[4] = 2;
            assert_eq!(FlowHello::decode(&bad), None);
            // A byte too many is not a hello, and a moved ack is not an ack.
            let mut long = b.clone();
            long.push(0);
            assert_eq!(FlowHello::decode(&long), None);
        }
        let moved = FlowHello::Moved {
            flow: 1,
            token,
            port: 9,
        }
        .encode();
        let mut as_ack = moved.clone();
        as_ack[5] = 2;
        assert_eq!(FlowHello::decode(&as_ack), None);
        let mut port0 = moved;
        port0[24..26].copy_from_slice(&[0, 0]);
        assert_eq!(FlowHello::decode(&port0), None);
        assert_eq!(token_bytes("xyz"), None);
        assert_eq!(token_bytes("0011223344556677889900aabbccddzz"), None);
    }
}
