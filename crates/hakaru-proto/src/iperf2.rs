//! iperf2 (2.1.x) wire formats, sans-IO: the UDP datagram header, the client's test header
//! (read leniently: a sink only needs to recognise it and learn what the client asked for),
//! the TCP header ack, and the UDP server report the client waits for after its FIN.
//!
//! All integers are 32-bit big-endian. See docs/protocol-notes.md, "Wire formats".

/// Bytes of the UDP datagram header: id, tv_sec, tv_usec, id2.
pub const UDP_HEADER: usize = 16;
/// Bytes of the base test header (`client_hdr_v1`).
pub const BASE_HEADER: usize = 24;
/// Bytes of the extension block (`client_hdrext`).
pub const EXT_HEADER: usize = 36;
/// Bytes of the UDP server report datagram.
pub const SERVER_REPORT: usize = 128;
/// Bytes of the TCP header ack without trip times.
pub const ACK_LEN: usize = 28;
/// Largest test header a LEN_BIT length can announce.
pub const MAX_HEADER: usize = 256;

/// Legacy -d/-r test.
pub const FLAG_VERSION1: u32 = 0x8000_0000;
/// Extension block present.
pub const FLAG_EXTEND: u32 = 0x4000_0000;
/// UDP stateless upper flags valid.
pub const FLAG_UDPTESTS: u32 = 0x2000_0000;
/// Permit key follows.
pub const FLAG_KEYCHECK: u32 = 0x1000_0000;
/// 64-bit UDP sequence numbers.
pub const FLAG_SEQNO64B: u32 = 0x0800_0000;
/// 2.1-style reverse / full duplex, no legacy ack.
pub const FLAG_VERSION2: u32 = 0x0400_0000;
/// Client (`-X`) waits for an ack.
pub const FLAG_V2PEERDETECT: u32 = 0x0200_0000;
/// Header length is in bits 1..8.
pub const FLAG_LEN_BIT: u32 = 0x0001_0000;
/// Upper flag: the client wants the server to send (`-R`).
pub const UPPER_REVERSE: u16 = 0x0400;
/// Upper flag: full duplex.
pub const UPPER_FULLDUPLEX: u16 = 0x0800;
/// Every flag bit 2.1.8 defines in the first word; anything else means "not a header".
const KNOWN_FLAGS: u32 = 0xFF81_FFFF;

/// The version hakaru claims in acks: 2.1.8 final, so clients print nothing unusual.
pub const VERSION_U: u32 = 0x0002_0001;
/// Low version word: patch 8, kind 3 (final).
pub const VERSION_L: u32 = 0x0008_0003;

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let word = b.get(off..)?.first_chunk::<4>()?;
    Some(u32::from_be_bytes(*word))
}

/// Writes `v` big-endian at `off`; nothing when `b` has no room for it there.
fn put_be32(b: &mut [u8], off: usize, v: u32) {
    if let Some(word) = b.get_mut(off..).and_then(|t| t.first_chunk_mut::<4>()) {
        *word = v.to_be_bytes();
    }
}

/// The fixed part of a UDP datagram: sequence id and the sender's wall-clock timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    /// Sequence id; negative marks the FIN (its absolute value is the next id).
    pub seq: i64,
    /// Sender's gettimeofday seconds.
    pub tv_sec: u32,
    /// Sender's gettimeofday microseconds.
    pub tv_usec: u32,
}

impl UdpHeader {
    /// Decodes the header of a datagram. `seq64` says whether id2 holds the upper 32 bits
    /// (SEQNO64B); without it the id is a signed 32-bit value. `None` if the datagram is too
    /// short or the microseconds are impossible (not an iperf2 datagram).
    pub fn decode(b: &[u8], seq64: bool) -> Option<UdpHeader> {
        if b.len() < UDP_HEADER {
            return None;
        }
        let id = be32(b, 0)?;
        let tv_sec = be32(b, 4)?;
        let tv_usec = be32(b, 8)?;
        if tv_usec >= 1_000_000 {
            return None;
        }
        let seq = if seq64 {
            (((be32(b, 12)? as u64) << 32) | id as u64) as i64
        } else {
            i64::from(id as i32)
        };
        Some(UdpHeader {
            seq,
            tv_sec,
            tv_usec,
        })
    }

    /// Encodes the header into the first 16 bytes of `b` (id2 always written); a shorter `b`
    /// is left alone.
    pub fn encode(&self, b: &mut [u8]) {
        if b.len() < UDP_HEADER {
            return;
        }
        let s = self.seq as u64;
        put_be32(b, 0, s as u32);
        put_be32(b, 4, self.tv_sec);
        put_be32(b, 8, self.tv_usec);
        put_be32(b, 12, (s >> 32) as u32);
    }

    /// True for the end-of-test datagram.
    pub fn is_fin(&self) -> bool {
        self.seq < 0
    }

    /// Send time in seconds of the sender's wall clock.
    pub fn sent_secs(&self) -> f64 {
        f64::from(self.tv_sec) + f64::from(self.tv_usec) / 1e6
    }
}

/// What a client's test header says, as far as a sink cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestHeader {
    /// The first word: flag bits.
    pub flags: u32,
    /// Total header length the flags announce, bytes.
    pub len: usize,
    /// Client threads (`-P`).
    pub threads: u32,
    /// Port in the header (the server port, or the client's `-L` port).
    pub port: u32,
    /// Buffer length the client gave with `-l`, 0 when not given.
    pub buf_len: u32,
    /// Negative: duration in 10 ms units; positive: bytes (`-n`).
    pub amount: i32,
    /// Upper flags from the extension (0 without one).
    pub upper_flags: u16,
    /// Client version as `major.minor.patch`, when the extension carries it.
    pub version: Option<String>,
    /// Rate the client asked for, bits/s, when the extension carries one.
    pub rate: Option<u64>,
}

impl TestHeader {
    /// Header length announced by a flags word: LEN_BIT's encoded length, else the base
    /// plus the extension when EXTEND or VERSION2 is set.
    pub fn len_from_flags(flags: u32) -> usize {
        if flags & FLAG_LEN_BIT != 0 {
            ((flags & 0x1FE) >> 1) as usize
        } else if flags & (FLAG_EXTEND | FLAG_VERSION2) != 0 {
            BASE_HEADER + EXT_HEADER
        } else {
            BASE_HEADER
        }
    }

    /// True if `flags` could start an iperf2 test header: it has a header flag, no unknown
    /// bits, and a length that covers the base header.
    pub fn plausible_flags(flags: u32) -> bool {
        let header_bit =
            flags & (FLAG_VERSION1 | FLAG_EXTEND | FLAG_VERSION2 | FLAG_LEN_BIT | FLAG_UDPTESTS);
        header_bit != 0
            && flags & !KNOWN_FLAGS == 0
            && (BASE_HEADER..=MAX_HEADER).contains(&Self::len_from_flags(flags))
    }

    /// Parses a header at the start of `b`, leniently: `None` if `b` does not start with a
    /// plausible header or is shorter than the base header. Fields past the end of `b` or of
    /// the announced length are left at their defaults.
    pub fn parse(b: &[u8]) -> Option<TestHeader> {
        let flags = be32(b, 0)?;
        if !Self::plausible_flags(flags) {
            return None;
        }
        let len = Self::len_from_flags(flags);
        let threads = be32(b, 4)?;
        let port = be32(b, 8)?;
        let buf_len = be32(b, 12)?;
        let amount = be32(b, 20)? as i32;
        let mut h = TestHeader {
            flags,
            len,
            threads,
            port,
            buf_len,
            amount,
            upper_flags: 0,
            version: None,
            rate: None,
        };
        let ext = BASE_HEADER;
        if flags & FLAG_EXTEND != 0 && len >= BASE_HEADER + EXT_HEADER {
            if let Some(w) = be32(b, ext + 8) {
                h.upper_flags = (w >> 16) as u16;
            }
            if let (Some(vu), Some(vl)) = (be32(b, ext + 12), be32(b, ext + 16)) {
                if vu != 0 {
                    h.version = Some(format!("{}.{}.{}", vu >> 16, vu & 0xFFFF, vl >> 16));
                }
            }
            if let (Some(lo), Some(hi)) = (be32(b, ext + 24), be32(b, ext + 28)) {
                let rate = u64::from(lo) | (u64::from(hi >> 8) << 32);
                h.rate = (rate != 0).then_some(rate);
            }
        }
        Some(h)
    }

    /// True when the client waits for a 28-byte ack before sending (`-X`), or 2.1's
    /// extended header without VERSION2, where the stock server acks too.
    pub fn wants_ack(&self) -> bool {
        (self.flags & FLAG_EXTEND != 0 && self.flags & FLAG_VERSION2 == 0)
            || self.flags & FLAG_V2PEERDETECT != 0
    }

    /// True when the client asks the server to send (`-R`, full duplex, or legacy -d/-r),
    /// which a sink does not do.
    pub fn wants_server_send(&self) -> bool {
        self.flags & FLAG_VERSION1 != 0
            || self.upper_flags & (UPPER_REVERSE | UPPER_FULLDUPLEX) != 0
    }

    /// Test length the client asked for, in words (`10.00 s` or `1048576 bytes`).
    pub fn amount_words(&self) -> String {
        if self.amount < 0 {
            format!("{:.2} s", -(self.amount as f64) / 100.0)
        } else {
            format!("{} bytes", self.amount)
        }
    }
}

/// The 28-byte ack a TCP server sends after the test header.
pub fn encode_ack() -> [u8; ACK_LEN] {
    let mut b = [0u8; ACK_LEN];
    let words = [2u32, ACK_LEN as u32, 0, VERSION_U, VERSION_L, 0, 0];
    for (word, w) in b.chunks_exact_mut(4).zip(words) {
        word.copy_from_slice(&w.to_be_bytes());
    }
    b
}

/// The figures a server reports back to a UDP client after its FIN.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerReport {
    /// Bytes received, the FIN included.
    pub bytes: u64,
    /// Seconds from the first to the last datagram.
    pub seconds: f64,
    /// Datagrams lost.
    pub lost: u64,
    /// Datagrams out of order.
    pub out_of_order: u64,
    /// Datagrams: the highest id seen (the FIN's included).
    pub datagrams: u64,
    /// Jitter, seconds.
    pub jitter: f64,
}

fn split_secs(s: f64) -> (u32, u32) {
    let s = s.max(0.0);
    let whole = s.floor();
    let us = ((s - whole) * 1e6).round().min(999_999.0);
    (whole as u32, us as u32)
}

impl ServerReport {
    /// Encodes the 128-byte report datagram: zero datagram header, flags VERSION1|SEQNO64B
    /// (no latency extension), 64-bit counts split into low and high words.
    pub fn encode(&self) -> [u8; SERVER_REPORT] {
        let mut b = [0u8; SERVER_REPORT];
        let mut put = |off: usize, v: u32| put_be32(&mut b, off, v);
        let (ss, sus) = split_secs(self.seconds);
        let (js, jus) = split_secs(self.jitter);
        put(16, FLAG_VERSION1 | FLAG_SEQNO64B);
        put(20, (self.bytes >> 32) as u32);
        put(24, self.bytes as u32);
        put(28, ss);
        put(32, sus);
        put(36, self.lost as u32);
        put(40, self.out_of_order as u32);
        put(44, self.datagrams as u32);
        put(48, js);
        put(52, jus);
        put(116, (self.lost >> 32) as u32);
        put(120, (self.out_of_order >> 32) as u32);
        put(124, (self.datagrams >> 32) as u32);
        b
    }

    /// Decodes a report (what a client reads), `None` if too short.
    pub fn decode(b: &[u8]) -> Option<ServerReport> {
        if b.len() < SERVER_REPORT {
            return None;
        }
        let w = |off| be32(b, off).map(u64::from).unwrap_or(0);
        let pair = |hi: usize, lo: usize| (w(hi) << 32) | w(lo);
        Some(ServerReport {
            bytes: pair(20, 24),
            seconds: w(28) as f64 + w(32) as f64 / 1e6,
            lost: pair(116, 36),
            out_of_order: pair(120, 40),
            datagrams: pair(124, 44),
            jitter: w(48) as f64 + w(52) as f64 / 1e6,
        })
    }
}

/// A UDP receiver's accounting the way the stock iperf2 server does it, so the report a
/// client prints matches what a stock server would have said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UdpAccount {
    /// Highest id seen.
    pub last: u64,
    /// Gaps seen (before subtracting late arrivals).
    pub gaps: u64,
    /// Datagrams that arrived after a higher id.
    pub out_of_order: u64,
    /// Datagrams accounted (id 0 excluded).
    pub received: u64,
    /// RFC 1889 jitter, seconds.
    pub jitter: f64,
    prev_transit: Option<f64>,
}

impl UdpAccount {
    /// Accounts one datagram with absolute id `id` (a FIN passes its |id|), sent at
    /// `sent` and received at `arrived` (both seconds; only differences matter).
    pub fn add(&mut self, id: u64, sent: f64, arrived: f64) {
        if id == 0 {
            return;
        }
        self.received += 1;
        if id != self.last + 1 {
            if id < self.last + 1 {
                self.out_of_order += 1;
            } else {
                self.gaps += id - self.last - 1;
            }
        }
        self.last = self.last.max(id);
        let transit = arrived - sent;
        if let Some(prev) = self.prev_transit {
            let d = (transit - prev).abs();
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.prev_transit = Some(transit);
    }

    /// Datagrams lost: gaps minus late arrivals that filled them.
    pub fn lost(&self) -> u64 {
        self.gaps.saturating_sub(self.out_of_order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The first 120 bytes of a datagram `iperf -c -u -b 10M -t 1` (2.1.8) sent.
    const UDP_FIRST: &str = "000000016b0361e8000e8c5b0000000048010098000000010000bea4\
        0000000000000000ffffff9c00000000000000000000000000020001000800030000000000a00000\
        000000000000000000000000";

    /// The 60-byte header `iperf -c -t 1` (2.1.8) sent on TCP.
    const TCP_HDR: &str = "4001007800000001000092630000000000000000ffffff9c00000000\
        0000000000000000000200010008000300000000000000000000000000000000";

    #[test]
    fn udp_header_of_a_real_datagram() {
        let b = hex(UDP_FIRST);
        let h = UdpHeader::decode(&b, true).unwrap();
        assert_eq!(h.seq, 1);
        assert_eq!(h.tv_sec, 0x6b03_61e8);
        assert_eq!(h.tv_usec, 0x000e_8c5b);
        assert!(!h.is_fin());
        let t = TestHeader::parse(&b[UDP_HEADER..]).unwrap();
        assert_eq!(t.flags, 0x4801_0098);
        assert_eq!(t.len, 76);
        assert_eq!(t.threads, 1);
        assert_eq!(t.amount, -100);
        assert_eq!(t.version.as_deref(), Some("2.1.8"));
        assert_eq!(t.rate, Some(10_485_760));
        assert!(!t.wants_server_send());
        assert_eq!(t.amount_words(), "1.00 s");
    }

    #[test]
    fn fin_sequence_round_trips_with_64_bit_ids() {
        // Data 1..181, FIN -182: id ffffff4a, id2 ffffffff.
        let h = UdpHeader {
            seq: -182,
            tv_sec: 5,
            tv_usec: 6,
        };
        let mut b = [0u8; 16];
        h.encode(&mut b);
        assert_eq!(&b[0..4], &[0xff, 0xff, 0xff, 0x4a]);
        assert_eq!(&b[12..16], &[0xff; 4]);
        assert_eq!(UdpHeader::decode(&b, true), Some(h));
        // An old client without SEQNO64B: 32-bit signed id, id2 ignored.
        b[12..16].copy_from_slice(&[0; 4]);
        assert_eq!(UdpHeader::decode(&b, false).unwrap().seq, -182);
        assert!(UdpHeader::decode(&b, false).unwrap().is_fin());
    }

    #[test]
    fn a_buffer_too_short_for_a_header_is_left_alone() {
        let h = UdpHeader {
            seq: 1,
            tv_sec: 2,
            tv_usec: 3,
        };
        let mut b = [0xaau8; UDP_HEADER - 1];
        h.encode(&mut b);
        assert_eq!(b, [0xaa; UDP_HEADER - 1]);
    }

    #[test]
    fn garbage_is_not_a_datagram_or_header() {
        assert_eq!(UdpHeader::decode(b"short", true), None);
        let mut b = [0u8; 16];
        b[8..12].copy_from_slice(&2_000_000u32.to_be_bytes());
        assert_eq!(UdpHeader::decode(&b, true), None);
        assert_eq!(TestHeader::parse(b"0123456789012345678901234567"), None);
        assert_eq!(TestHeader::parse(&[0x40, 0x01]), None);
        // LEN_BIT with a length under the base header.
        assert_eq!(
            TestHeader::parse(&[0x40, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
    }

    #[test]
    fn tcp_header_of_a_real_client() {
        let b = hex(TCP_HDR);
        assert_eq!(b.len(), 60);
        let t = TestHeader::parse(&b).unwrap();
        assert_eq!(t.flags, 0x4001_0078);
        assert_eq!(t.len, 60);
        assert_eq!(t.port, 0x9263);
        assert!(t.wants_ack());
        assert!(!t.wants_server_send());
        let mut x = b.clone();
        x[0] = 0x46; // -X: VERSION2 | V2PEERDETECT
        assert!(TestHeader::parse(&x).unwrap().wants_ack());
        x[0] = 0x44; // -R: VERSION2 without peer detect
        x[BASE_HEADER + 8..BASE_HEADER + 10].copy_from_slice(&UPPER_REVERSE.to_be_bytes());
        let r = TestHeader::parse(&x).unwrap();
        assert!(!r.wants_ack());
        assert!(r.wants_server_send());
        // Without LEN_BIT the length comes from EXTEND.
        assert_eq!(TestHeader::len_from_flags(FLAG_EXTEND), 60);
        assert_eq!(TestHeader::len_from_flags(FLAG_VERSION1), 24);
    }

    #[test]
    fn ack_layout() {
        let a = encode_ack();
        assert_eq!(&a[0..8], &[0, 0, 0, 2, 0, 0, 0, 28]);
        assert_eq!(&a[12..20], &[0, 2, 0, 1, 0, 8, 0, 3]);
    }

    #[test]
    fn server_report_round_trips() {
        let r = ServerReport {
            bytes: (5u64 << 32) + 1_315_650,
            seconds: 1.005,
            lost: 3,
            out_of_order: 1,
            datagrams: 895,
            jitter: 0.000_012,
        };
        let b = r.encode();
        assert_eq!(&b[0..16], &[0; 16]);
        assert_eq!(&b[16..20], &[0x88, 0, 0, 0]);
        assert_eq!(&b[20..24], &[0, 0, 0, 5]);
        assert_eq!(&b[44..48], &895u32.to_be_bytes());
        assert_eq!(&b[52..56], &12u32.to_be_bytes());
        let d = ServerReport::decode(&b).unwrap();
        assert_eq!(
            (d.bytes, d.lost, d.out_of_order, d.datagrams),
            (r.bytes, 3, 1, 895)
        );
        assert!((d.seconds - 1.005).abs() < 1e-9);
        assert!((d.jitter - 0.000_012).abs() < 1e-9);
        assert_eq!(ServerReport::decode(&b[..100]), None);
    }

    #[test]
    fn accounting_matches_the_stock_server() {
        let mut a = UdpAccount::default();
        for id in [1, 2, 4, 5, 3, 7, 8] {
            a.add(id, id as f64 * 0.001, id as f64 * 0.001 + 0.0001);
        }
        // FIN -9 is accounted as 9.
        a.add(9, 0.009, 0.0091);
        assert_eq!(a.last, 9);
        assert_eq!(a.received, 8);
        assert_eq!(a.out_of_order, 1);
        // Gaps at 3 (filled later) and 6: two gaps, one late arrival, one lost.
        assert_eq!(a.gaps, 2);
        assert_eq!(a.lost(), 1);
        assert!(a.jitter.abs() < 1e-9, "constant transit has no jitter");
        a.add(0, 0.0, 0.0);
        assert_eq!(a.received, 8);
    }
}
