//! netperf's control messages (netperf and netserver 2.6 to 2.7.1), sans-IO.
//!
//! Every control message, either way, is one fixed 656-byte record: a type word, a word that
//! carries the CPU to bind to in requests and the server's errno in answers, then 162 words of
//! test data. Words travel in network order only up to a cutoff that depends on the message
//! (the sender swaps the first 2 + n words in place); what lies beyond is the sender's memory
//! as it was: strings, or little-endian words from an x86 host. Floats travel as their IEEE
//! bit patterns, swapped like the words around them. A request's type is a small integer
//! (housekeeping) or a test; netperf 2.7 sends every classic test (TCP_STREAM, TCP_RR, ...) as
//! DO_OMNI, answered by an omni response and, after the data phase, the results.
//! docs/protocol-notes.md ("netperf 2.7.1") has what was captured on loopback from stock
//! netperf against stock netserver, which is what the tests below replay.
//!
//! Reads of peer bytes go through `get`, so no input can panic the decoder.

/// Bytes of every control message.
pub const MSG_LEN: usize = 656;
/// netserver's default control port.
pub const DEFAULT_PORT: u16 = 12865;
/// Words of test data after the two header words.
pub const SPEC_WORDS: usize = 162;
/// Bytes of test data (what a passphrase may fill, NUL included).
pub const SPEC_BYTES: usize = SPEC_WORDS * 4;
/// Words of an omni request in network order (after the header words).
pub const REQUEST_CUTOFF: usize = 38;
/// Words of an omni response in network order.
pub const RESPONSE_CUTOFF: usize = 18;
/// Words of omni results in network order.
pub const RESULTS_CUTOFF: usize = 27;
/// The errno netserver answers a request type it does not know with.
pub const ERRNO_UNKNOWN_TEST: i32 = 998;
/// What netserver adds to a timed test's timer when it is not only sending (seconds).
pub const PAD_TIME_SECS: u32 = 4;

/// Message types (netlib.h).
pub mod kind {
    /// Turn the server's debug output on.
    pub const DEBUG_ON: i32 = 1;
    /// Turn it off.
    pub const DEBUG_OFF: i32 = 2;
    /// The answer to both.
    pub const DEBUG_OK: i32 = 3;
    /// Asks the server to calibrate its CPU measurement; answered with a rate and a CPU count.
    pub const CPU_CALIBRATE: i32 = 5;
    /// The `-Z` passphrase, in plaintext.
    pub const PASSPHRASE: i32 = 6;
    /// An omni test request.
    pub const DO_OMNI: i32 = 97;
    /// The answer to it (and the type of the results).
    pub const OMNI_RESPONSE: i32 = 98;
    /// Deprecated system information request.
    pub const DO_SYSINFO: i32 = 600;
    /// Its answer.
    pub const SYSINFO_RESPONSE: i32 = 601;
}

/// Omni request flags (nettest_bsd.h).
pub mod flag {
    /// TCP_NODELAY on the data connection (`-- -D`).
    pub const NO_DELAY: u32 = 0x1;
    /// sendfile (TCP_SENDFILE).
    pub const USE_SENDFILE: u32 = 0x2;
    /// A connection per transaction (TCP_CRR).
    pub const CONNECT_TEST: u32 = 0x4;
    /// Measure the server's CPU (`-C`).
    pub const MEASURE_CPU: u32 = 0x8;
    /// The server should name its congestion control in the results.
    pub const WANT_REM_CONG: u32 = 0x20;
    /// TCP fast open.
    pub const FASTOPEN: u32 = 0x800;
    /// Connected UDP sockets.
    pub const USE_CONNECTED: u32 = 0x4000;
}

/// Direction bits, seen from the server.
pub mod direction {
    /// The server sends.
    pub const XMIT: u32 = 0x2;
    /// The server receives.
    pub const RECV: u32 = 0x4;
}

/// netperf's own address family codes.
pub const NF_UNSPEC: u32 = 0;
/// IPv4.
pub const NF_INET: u32 = 4;
/// IPv6.
pub const NF_INET6: u32 = 6;
/// netperf's socket types.
pub const NST_STREAM: u32 = 1;
/// Datagram sockets.
pub const NST_DGRAM: u32 = 2;
/// IP protocol numbers netperf sends.
pub const PROTO_TCP: u32 = 6;
/// UDP.
pub const PROTO_UDP: u32 = 17;
/// SCTP (refused: not served).
pub const PROTO_SCTP: u32 = 132;

/// Why bytes are not a netperf message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetperfError {
    /// Not exactly one message.
    #[error("a netperf control message is {MSG_LEN} bytes; got {got}")]
    Length {
        /// Bytes given.
        got: usize,
    },
}

/// Word `i` (0 = type) of a message, read in network order.
fn be(msg: &[u8], i: usize) -> u32 {
    let at = i * 4;
    msg.get(at..at + 4)
        .and_then(|b| b.first_chunk::<4>())
        .map_or(0, |b| u32::from_be_bytes(*b))
}

/// A NUL-terminated string in `msg[from..from + len]`, lossily as UTF-8.
fn c_string(msg: &[u8], from: usize, len: usize) -> String {
    let raw = msg.get(from..from + len).unwrap_or_default();
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(raw.get(..end).unwrap_or_default()).into_owned()
}

/// An omni test request (the fields netserver reads; sizes of -1 mean "the default").
#[derive(Debug, Clone, PartialEq)]
pub struct OmniRequest {
    /// CPU the server should bind to (-1: none; `-T`).
    pub cpu_binding: i32,
    /// SO_SNDBUF asked (`-- -s`/`-S`); -1 or 0: leave the system's.
    pub send_buf_size: i32,
    /// Bytes per send call (-1: choose).
    pub send_size: i32,
    /// Send buffers in the ring.
    pub send_width: u32,
    /// Request size of an RR test (the server receives this much per transaction).
    pub request_size: i32,
    /// SO_RCVBUF asked.
    pub recv_buf_size: i32,
    /// Bytes per receive call (-1: choose).
    pub receive_size: i32,
    /// Receive buffers in the ring.
    pub recv_width: u32,
    /// Response size of an RR test (the server sends this much per transaction).
    pub response_size: i32,
    /// [`flag`] bits.
    pub flags: u32,
    /// The CPU rate netperf already knows (0: calibrate).
    pub cpu_rate: f32,
    /// Seconds; negative: a byte count (stream) or transaction count (RR).
    pub test_length: i32,
    /// Data port asked (`-- -P`); 0: any.
    pub data_port: u32,
    /// [`NF_INET`], [`NF_INET6`] or [`NF_UNSPEC`].
    pub ipfamily: u32,
    /// [`NST_STREAM`] or [`NST_DGRAM`].
    pub socket_type: u32,
    /// IP protocol number.
    pub protocol: u32,
    /// [`direction`] bits, from the server's side.
    pub direction: u32,
    /// netperf's data port (UDP tests that would have the server send first).
    pub netperf_port: u32,
    /// Burst size (`-b`), when netperf was built with intervals.
    pub interval_burst: u32,
    /// Interval in microseconds (`-w`).
    pub interval_usecs: u32,
    /// Socket priority asked (-1: none).
    pub socket_prio: i32,
    /// IP TOS asked (-1: none).
    pub socket_tos: i32,
    /// Congestion control asked (`-- -K`), empty for the default.
    pub cong_control: String,
}

impl OmniRequest {
    /// The server only sends (TCP_MAERTS, omni `-d recv`).
    pub fn xmit_only(&self) -> bool {
        self.direction & direction::XMIT != 0 && self.direction & direction::RECV == 0
    }

    /// The server only receives (TCP_STREAM, UDP_STREAM, omni `-d send`).
    pub fn recv_only(&self) -> bool {
        self.direction & direction::RECV != 0 && self.direction & direction::XMIT == 0
    }

    /// A request/response test (TCP_RR, UDP_RR, TCP_CRR, omni `-d rr`).
    pub fn is_rr(&self) -> bool {
        let both = direction::XMIT | direction::RECV;
        self.direction & both == both || self.direction & both == 0
    }

    /// A new connection per transaction (TCP_CRR).
    pub fn connect_test(&self) -> bool {
        self.flags & flag::CONNECT_TEST != 0
    }

    /// The server's CPU should be measured (`-C`).
    pub fn measure_cpu(&self) -> bool {
        self.flags & flag::MEASURE_CPU != 0
    }

    /// TCP_NODELAY asked (`-- -D`).
    pub fn no_delay(&self) -> bool {
        self.flags & flag::NO_DELAY != 0
    }

    /// The message netperf sends for this request (the client direction). Fields the struct
    /// does not carry go out as stock netperf sends them: buffer alignment 8 at offset 0, no
    /// copy avoidance, dirty and clean counts -1 (off), the addresses zero (netserver binds
    /// its data socket to any address and learns netperf's from the data), no fill file.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Builder::new(kind::DO_OMNI, self.cpu_binding);
        let i = |v: i32| v as u32;
        let mut words = [0u32; REQUEST_CUTOFF];
        words[0] = i(self.send_buf_size);
        words[1] = i(self.send_size);
        words[2] = ALIGNMENT;
        words[4] = self.send_width;
        words[5] = i(self.request_size);
        words[6] = i(self.recv_buf_size);
        words[7] = i(self.receive_size);
        words[8] = ALIGNMENT;
        words[10] = self.recv_width;
        words[11] = i(self.response_size);
        words[12] = self.flags;
        words[13] = self.cpu_rate.to_bits();
        words[14] = i(self.test_length);
        // 15, 16: copy avoidance off; 17 to 19: dirty and clean counts off.
        words[17] = u32::MAX;
        words[18] = u32::MAX;
        words[19] = u32::MAX;
        words[20] = self.data_port;
        words[21] = self.ipfamily;
        words[22] = self.socket_type;
        words[23] = self.protocol;
        words[24] = self.direction;
        words[25] = self.netperf_port;
        words[26] = self.interval_burst;
        words[27] = self.interval_usecs;
        // 28 to 35: netperf's and netserver's data addresses, zero (see above).
        words[36] = i(self.socket_prio);
        words[37] = i(self.socket_tos);
        b.data(&words);
        b.raw((2 + REQUEST_CUTOFF) * 4, self.cong_control.as_bytes(), 15);
        b.bytes
    }

    fn decode(msg: &[u8]) -> OmniRequest {
        let w = |i: usize| be(msg, 2 + i);
        let s = |i: usize| w(i) as i32;
        OmniRequest {
            cpu_binding: be(msg, 1) as i32,
            send_buf_size: s(0),
            send_size: s(1),
            send_width: w(4),
            request_size: s(5),
            recv_buf_size: s(6),
            receive_size: s(7),
            recv_width: w(10),
            response_size: s(11),
            flags: w(12),
            cpu_rate: f32::from_bits(w(13)),
            test_length: s(14),
            data_port: w(20),
            ipfamily: w(21),
            socket_type: w(22),
            protocol: w(23),
            direction: w(24),
            netperf_port: w(25),
            interval_burst: w(26),
            interval_usecs: w(27),
            socket_prio: s(36),
            socket_tos: s(37),
            cong_control: c_string(msg, (2 + REQUEST_CUTOFF) * 4, 16),
        }
    }
}

/// Buffer alignment stock netperf asks of netserver (its default `-a`/`-A`).
const ALIGNMENT: u32 = 8;

/// A request, as netserver tells them apart.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `-Z`: the passphrase's bytes up to the first NUL.
    Passphrase(Vec<u8>),
    /// Asks for the CPU rate and count.
    CpuCalibrate,
    /// Debug on or off (answered DEBUG_OK; the server's logging is not changed).
    Debug,
    /// The deprecated system information request.
    Sysinfo,
    /// An omni test.
    Omni(Box<OmniRequest>),
    /// Any other type: a legacy test, SCTP, DLPI, XTI, ... (answered errno 998).
    Other(i32),
}

impl Request {
    /// Decodes one whole message.
    pub fn decode(msg: &[u8]) -> Result<Request, NetperfError> {
        if msg.len() != MSG_LEN {
            return Err(NetperfError::Length { got: msg.len() });
        }
        let t = be(msg, 0) as i32;
        Ok(match t {
            kind::PASSPHRASE => {
                let data = msg.get(8..).unwrap_or_default();
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                Request::Passphrase(data.get(..end).unwrap_or_default().to_vec())
            }
            kind::CPU_CALIBRATE => Request::CpuCalibrate,
            kind::DEBUG_ON | kind::DEBUG_OFF => Request::Debug,
            kind::DO_SYSINFO => Request::Sysinfo,
            kind::DO_OMNI => Request::Omni(Box::new(OmniRequest::decode(msg))),
            other => Request::Other(other),
        })
    }
}

/// A message being built: words in network order up to a cutoff, raw bytes after it.
struct Builder {
    bytes: Vec<u8>,
}

impl Builder {
    fn new(kind: i32, errno: i32) -> Builder {
        let mut b = Builder {
            bytes: vec![0; MSG_LEN],
        };
        b.word(0, kind as u32);
        b.word(1, errno as u32);
        b
    }

    /// Word `i` of the whole message (0 = type), in network order.
    fn word(&mut self, i: usize, v: u32) {
        let at = i * 4;
        if let Some(dst) = self.bytes.get_mut(at..at + 4) {
            dst.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Test-data words from 0, in network order.
    fn data(&mut self, words: &[u32]) {
        for (i, &v) in words.iter().enumerate() {
            self.word(2 + i, v);
        }
    }

    /// Raw bytes at `offset` of the message (cut to fit).
    fn raw(&mut self, offset: usize, src: &[u8], room: usize) {
        let n = src.len().min(room);
        if let (Some(dst), Some(s)) = (self.bytes.get_mut(offset..offset + n), src.get(..n)) {
            dst.copy_from_slice(s);
        }
    }
}

/// The answer to a request the server cannot serve: `errno` in the errno word. `kind` is the
/// type word netserver would leave there (the request's answer type, or 0 for an unknown test).
pub fn encode_error(kind: i32, errno: i32) -> Vec<u8> {
    Builder::new(kind, errno).bytes
}

/// The answer to DEBUG_ON and DEBUG_OFF.
pub fn encode_debug_ok() -> Vec<u8> {
    Builder::new(kind::DEBUG_OK, 0).bytes
}

/// The answer to the deprecated DO_SYSINFO (netserver's own text).
pub fn encode_sysinfo() -> Vec<u8> {
    let mut b = Builder::new(kind::SYSINFO_RESPONSE, 0);
    b.raw(
        8,
        b",Deprecated,Deprecated,Deprecated,Deprecated",
        SPEC_BYTES - 1,
    );
    b.bytes
}

/// A passphrase message (`netperf -Z WORD`): the word, NUL-terminated, cut to fit (the
/// second word -1, as netperf sends it: no CPU to bind).
pub fn encode_passphrase(word: &[u8]) -> Vec<u8> {
    let mut b = Builder::new(kind::PASSPHRASE, -1);
    b.raw(8, word, SPEC_BYTES - 1);
    b.bytes
}

/// The answer to CPU_CALIBRATE: the rate and the CPU count as its first two words.
pub fn encode_cpu_calibrate(rate: f32, cpus: u32) -> Vec<u8> {
    let mut b = Builder::new(kind::CPU_CALIBRATE, 0);
    b.data(&[rate.to_bits(), cpus]);
    b.bytes
}

/// What the server set up for an omni test.
#[derive(Debug, Clone, PartialEq)]
pub struct OmniResponse {
    /// SO_RCVBUF of the data socket.
    pub recv_buf_size: i32,
    /// Bytes per receive call.
    pub receive_size: i32,
    /// Receive buffers.
    pub recv_width: i32,
    /// SO_SNDBUF of the data socket.
    pub send_buf_size: i32,
    /// Bytes per send call.
    pub send_size: i32,
    /// Send buffers.
    pub send_width: i32,
    /// [`flag`] bits the server honours (NO_DELAY, MEASURE_CPU).
    pub flags: u32,
    /// CPU rate when measuring (netserver's /proc/stat method says 100.0), else 0.
    pub cpu_rate: f32,
    /// The data port netperf connects or sends to.
    pub data_port: u16,
    /// Socket priority in effect.
    pub socket_prio: i32,
    /// IP TOS in effect.
    pub socket_tos: i32,
}

impl OmniResponse {
    /// The message.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Builder::new(kind::OMNI_RESPONSE, 0);
        let i = |v: i32| v as u32;
        let mut words = [0u32; RESPONSE_CUTOFF];
        words[0] = i(self.recv_buf_size);
        words[1] = i(self.receive_size);
        words[2] = i(self.recv_width);
        words[3] = i(self.send_buf_size);
        words[4] = i(self.send_size);
        words[5] = i(self.send_width);
        words[6] = self.flags;
        words[7] = self.cpu_rate.to_bits();
        words[11] = u32::from(self.data_port);
        words[16] = i(self.socket_prio);
        words[17] = i(self.socket_tos);
        b.data(&words);
        b.bytes
    }
}

/// What the server counted in an omni test.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OmniResults {
    /// Bytes received.
    pub bytes_received: u64,
    /// Receive calls that returned data.
    pub recv_calls: u32,
    /// SO_RCVBUF at the end.
    pub recv_buf_size: i32,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Send calls.
    pub send_calls: u32,
    /// SO_SNDBUF at the end.
    pub send_buf_size: i32,
    /// Sends that failed without ending the test (ENOBUFS).
    pub failed_sends: u32,
    /// Transactions completed.
    pub trans_received: u32,
    /// Seconds the data phase took.
    pub elapsed_time: f32,
    /// CPU utilisation in percent of all CPUs, when measured.
    pub cpu_util: f32,
    /// Its user, system, iowait, irq and soft-irq parts.
    pub cpu_parts: [f32; 5],
    /// netserver's code for how CPU was measured (8: /proc/stat), 0 when not measured.
    pub cpu_method: u32,
    /// CPUs the utilisation is over.
    pub num_cpus: u32,
    /// Retransmissions (-1: unknown).
    pub transport_retrans: i32,
    /// Congestion control of the data connection.
    pub cong_control: String,
}

impl OmniResults {
    /// The message. The type word goes out in the byte order stock netserver sends it in:
    /// netserver swaps its answer record in place, so the type it set for the response is
    /// swapped twice by the time the results go out (captured: `62 00 00 00`).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Builder::new(0, 0);
        b.raw(0, &(kind::OMNI_RESPONSE as u32).to_le_bytes(), 4);
        let hi = |v: u64| (v >> 32) as u32;
        let lo = |v: u64| v as u32;
        let mut words = [0u32; RESULTS_CUTOFF];
        words[0] = hi(self.bytes_received);
        words[1] = lo(self.bytes_received);
        words[2] = self.recv_calls;
        words[3] = self.recv_buf_size as u32;
        words[4] = hi(self.bytes_sent);
        words[5] = lo(self.bytes_sent);
        words[6] = self.send_calls;
        words[7] = self.send_buf_size as u32;
        words[8] = self.failed_sends;
        words[9] = self.trans_received;
        words[10] = self.elapsed_time.to_bits();
        words[11] = self.cpu_util.to_bits();
        let [user, system, iowait, irq, softirq] = self.cpu_parts;
        words[12] = user.to_bits();
        words[13] = system.to_bits();
        words[14] = iowait.to_bits();
        words[15] = irq.to_bits();
        words[16] = softirq.to_bits();
        // 17: service demand, computed by netperf.
        words[18] = self.cpu_method;
        words[19] = self.num_cpus;
        words[20] = u32::MAX; // peak CPU id: unknown
        words[26] = self.transport_retrans as u32;
        b.data(&words);
        // The strings after the cutoff: ifname 16, driver 32, version 32, firmware 32, bus 32,
        // ifslot 16, then the congestion control's 16.
        let cong_at = (2 + RESULTS_CUTOFF) * 4 + 16 + 32 * 4 + 16;
        b.raw(cong_at, self.cong_control.as_bytes(), 15);
        b.bytes
    }
}

/// Reads an omni response (the client direction): the server's errno (0: the test is set up)
/// and what it set up. `None` unless `msg` is one whole message.
pub fn decode_response(msg: &[u8]) -> Option<(i32, OmniResponse)> {
    if msg.len() != MSG_LEN {
        return None;
    }
    let w = |i: usize| be(msg, 2 + i);
    Some((
        be(msg, 1) as i32,
        OmniResponse {
            recv_buf_size: w(0) as i32,
            receive_size: w(1) as i32,
            recv_width: w(2) as i32,
            send_buf_size: w(3) as i32,
            send_size: w(4) as i32,
            send_width: w(5) as i32,
            flags: w(6),
            cpu_rate: f32::from_bits(w(7)),
            data_port: w(11) as u16,
            socket_prio: w(16) as i32,
            socket_tos: w(17) as i32,
        },
    ))
}

/// Reads omni results (the client direction). netperf does not look at the type word, which
/// stock netserver sends byte-swapped, and neither does this.
pub fn decode_results(msg: &[u8]) -> Option<OmniResults> {
    if msg.len() != MSG_LEN {
        return None;
    }
    let w = |i: usize| be(msg, 2 + i);
    let wide = |i: usize| (u64::from(w(i)) << 32) | u64::from(w(i + 1));
    let f = |i: usize| f32::from_bits(w(i));
    let cong_at = (2 + RESULTS_CUTOFF) * 4 + 16 + 32 * 4 + 16;
    Some(OmniResults {
        bytes_received: wide(0),
        recv_calls: w(2),
        recv_buf_size: w(3) as i32,
        bytes_sent: wide(4),
        send_calls: w(6),
        send_buf_size: w(7) as i32,
        failed_sends: w(8),
        trans_received: w(9),
        elapsed_time: f(10),
        cpu_util: f(11),
        cpu_parts: [f(12), f(13), f(14), f(15), f(16)],
        cpu_method: w(18),
        num_cpus: w(19),
        transport_retrans: w(26) as i32,
        cong_control: c_string(msg, cong_at, 16),
    })
}

#[cfg(test)]
#[path = "netperf_tests.rs"]
mod tests;
