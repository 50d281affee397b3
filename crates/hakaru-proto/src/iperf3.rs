//! iperf3's control protocol and UDP framing, sans-IO (docs/protocol-notes.md, "Wire formats").
//!
//! A control connection carries single state bytes and length-prefixed JSON documents: the
//! client's parameters and, at the end, each side's results. This module turns those into
//! typed values and back, and tells state bytes, cookies and UDP stream greetings apart. It
//! never touches a socket; the server and client feed it bytes.

use hakaru_model::{End, Environment, FlowDir, FlowSide, Role, SideReport, TcpInfo, UdpFlowSide};
use serde_json::{json, Map, Value};

/// Bytes of a cookie on the wire: 36 base32 characters and a NUL.
pub const COOKIE_LEN: usize = 37;
/// Largest parameter document a client may send (iperf3 3.18 and later refuse more).
pub const MAX_PARAMS_JSON: usize = 8 * 1024;
/// Largest results document accepted, by the server from a client and by hakaru's client from
/// a stock server. A document is the CPU figures and one line per stream, 130 bytes for a
/// 3.12 TCP stream to about 320 with every figure at its widest: at most some 80 KiB for 128
/// streams each way. Only a server asked for its output (`--get-server-output`) adds more,
/// its text or JSON output of the test (3.12 with 128 streams: 15 KiB of text or 35 KiB of
/// JSON per second of test). Clients never send that, and hakaru's client never asks for it,
/// so neither end needs more than this.
pub const MAX_RESULTS_JSON: usize = 1 << 20;
/// Datagram a client sends to open a UDP stream (3.12 and later).
pub const UDP_CONNECT: [u8; 4] = *b"9876";
/// Datagram a client sent to open a UDP stream up to 3.11 (123456789, little-endian host).
pub const UDP_CONNECT_LEGACY: [u8; 4] = 123_456_789u32.to_le_bytes();
/// The server's answer to [`UDP_CONNECT`].
pub const UDP_REPLY: [u8; 4] = *b"6789";
/// The answer servers up to 3.11 gave (987654321, little-endian host).
pub const UDP_REPLY_LEGACY: [u8; 4] = 987_654_321u32.to_le_bytes();
/// Default control and data port.
pub const DEFAULT_PORT: u16 = 5201;

/// One-byte control states (signed on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// S→C: every stream is connected.
    TestStart,
    /// S→C: data may flow.
    TestRunning,
    /// C→S: the client decided the test is over.
    TestEnd,
    /// S→C: send the parameters.
    ParamExchange,
    /// S→C: open the data streams now.
    CreateStreams,
    /// S→C: the server is stopping (signal).
    ServerTerminate,
    /// C→S: the client is stopping (signal).
    ClientTerminate,
    /// S→C: results exchange begins.
    ExchangeResults,
    /// S→C: results exchanged; print them.
    DisplayResults,
    /// C→S: the client is finished.
    IperfDone,
    /// S→C: busy, or a data stream with a wrong cookie.
    AccessDenied,
    /// S→C: followed by i_errno and errno (4 bytes each, big-endian).
    ServerError,
    /// Any other value.
    Other(i8),
}

impl State {
    /// Decodes a state byte.
    pub fn from_byte(b: u8) -> State {
        match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            v => State::Other(v),
        }
    }

    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        (match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
            State::Other(v) => v,
        }) as u8
    }
}

/// What was wrong with iperf3 bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Iperf3Error {
    /// The cookie is not 36 base32 characters and a NUL.
    #[error("not an iperf3 cookie (expected 36 base32 characters and a NUL)")]
    BadCookie,
    /// A JSON document longer than allowed (refused on its length, before it is read).
    #[error("iperf3 {what} of {len} bytes refused: over the limit of {}", limit_words(*.max))]
    TooLong {
        /// Which document.
        what: &'static str,
        /// Announced length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// Not JSON, or JSON of the wrong shape.
    #[error("iperf3 {what}: {why}")]
    Json {
        /// Which document.
        what: &'static str,
        /// What was wrong.
        why: String,
    },
}

/// A byte limit in words: `1 MiB (1048576 bytes)`.
fn limit_words(max: usize) -> String {
    match max {
        m if m >= 1 << 20 && m % (1 << 20) == 0 => format!("{} MiB ({m} bytes)", m >> 20),
        m if m >= 1 << 10 && m % (1 << 10) == 0 => format!("{} KiB ({m} bytes)", m >> 10),
        m => format!("{m} bytes"),
    }
}

/// iperf3 `i_errno` codes this crate sends or names.
pub mod errno {
    /// Bad duration (`-t`).
    pub const IEDURATION: i32 = 5;
    /// Bad number of streams (`-P`).
    pub const IENUMSTREAMS: i32 = 6;
    /// Bad block size (`-l`).
    pub const IEBLOCKSIZE: i32 = 7;
    /// Bad socket buffer size (`-w`).
    pub const IEBUFSIZE: i32 = 8;
    /// Bad MSS (`-M`).
    pub const IEMSS: i32 = 10;
    /// Bad omit (`-O`).
    pub const IEOMIT: i32 = 12;
    /// Bad UDP block size.
    pub const IEUDPBLOCKSIZE: i32 = 20;
    /// Bad TOS.
    pub const IEBADTOS: i32 = 21;
    /// The total rate asked for is over the server's limit (iperf3's
    /// `--server-bitrate-limit`; hakaru's `--max-rate`).
    pub const IETOTALRATE: i32 = 27;
    /// Unknown protocol.
    pub const IEPROTOCOL: i32 = 102;
    /// Could not receive the parameters.
    pub const IERECVPARAMS: i32 = 114;
    /// Could not set the congestion control algorithm.
    pub const IESETCONGESTION: i32 = 134;
    /// Could not receive the client's results.
    pub const IERECVRESULTS: i32 = 117;
    /// Could not set the socket buffer size (SO_SNDBUF/SO_RCVBUF).
    pub const IESETBUF2: i32 = 141;
    /// Could not create a stream.
    pub const IECREATESTREAM: i32 = 200;
    /// Unable to start the stream listener (here: no MPTCP listener for `-m`).
    pub const IESTREAMLISTEN: i32 = 202;
    /// Could not connect a stream.
    pub const IESTREAMCONNECT: i32 = 203;
    /// Authentication failed (not supported here).
    pub const IEAUTHTEST: i32 = 142;
    /// The server's test timer expired.
    pub const IESERVERTESTDURATIONEXPIRED: i32 = 160;
    /// Unknown stream id in results.
    pub const IESTREAMID: i32 = 208;
}

/// Words for an `i_errno` a server sent, like iperf3's own messages.
pub fn error_text(i_errno: i32) -> String {
    let s = match i_errno {
        errno::IEDURATION => "test duration too long (maximum = 86400 seconds)",
        errno::IENUMSTREAMS => "number of parallel streams too large (maximum = 128)",
        errno::IEBLOCKSIZE => "block size too large (maximum = 1048576 bytes)",
        errno::IEBUFSIZE => "socket buffer size too large (maximum = 536870912 bytes)",
        errno::IEMSS => "TCP MSS too large (maximum = 9216 bytes)",
        errno::IEOMIT => "bogus value for --omit",
        errno::IEUDPBLOCKSIZE => "block size invalid (minimum = 16 bytes, maximum = 65507 bytes)",
        errno::IEBADTOS => "bad TOS value (must be between 0 and 255 inclusive)",
        27 => "total required bandwidth is larger than server limit",
        errno::IEPROTOCOL => "protocol does not exist",
        errno::IERECVPARAMS => "unable to receive parameters from client",
        121 => "the server is busy running a test. try again later",
        errno::IESETCONGESTION => "unable to set TCP_CONGESTION: supplied congestion control algorithm not supported on this host",
        errno::IEAUTHTEST => "test authorization failed",
        errno::IESERVERTESTDURATIONEXPIRED => "server test duration expired",
        errno::IESTREAMID => "stream has an invalid id",
        _ => "",
    };
    if s.is_empty() {
        format!("iperf3 error {i_errno}")
    } else {
        format!("{s} (iperf3 error {i_errno})")
    }
}

/// Makes a cookie from 36 random bytes (the caller supplies randomness).
pub fn make_cookie(random: &[u8; 36]) -> [u8; COOKIE_LEN] {
    let mut c = [0u8; COOKIE_LEN];
    for (o, r) in c.iter_mut().zip(random) {
        // The RFC 4648 base32 alphabet, lowercase: a to z, then 2 to 7.
        *o = match r % 32 {
            v @ 0..26 => b'a' + v,
            v => b'2' + (v - 26),
        };
    }
    c
}

/// Reads a cookie: 36 characters of the base32 alphabet, then a NUL.
pub fn parse_cookie(buf: &[u8]) -> Result<String, Iperf3Error> {
    let Some((0, body)) = buf.get(..COOKIE_LEN).and_then(<[u8]>::split_last) else {
        return Err(Iperf3Error::BadCookie);
    };
    if !body
        .iter()
        .all(|&b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
    {
        return Err(Iperf3Error::BadCookie);
    }
    Ok(String::from_utf8_lossy(body).into_owned())
}

/// Stream id of the `i`th stream created (from 0): 1, 3, 4, 5, ... as iperf3 numbers them.
pub fn stream_id(i: usize) -> u32 {
    if i == 0 {
        1
    } else {
        i as u32 + 2
    }
}

/// Frames a JSON document: 4-byte big-endian length, then compact JSON.
pub fn encode_json(v: &Value) -> Vec<u8> {
    let body = v.to_string();
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body.as_bytes());
    out
}

/// Bytes received on a control connection, taken out as state bytes or JSON documents.
#[derive(Debug, Default)]
pub struct Inbox {
    buf: Vec<u8>,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Inbox {
        Inbox::default()
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes waiting.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes `n` bytes if that many are here.
    pub fn take_exact(&mut self, n: usize) -> Option<Vec<u8>> {
        (self.buf.len() >= n).then(|| self.buf.drain(..n).collect())
    }

    /// Takes one state byte if one is here.
    pub fn take_state(&mut self) -> Option<State> {
        self.take_exact(1)
            .and_then(|b| b.first().copied())
            .map(State::from_byte)
    }

    /// Takes one framed document once all of it is here, read by `parse` where it lies; an
    /// announced length over `max` is an error at once, before any of it is buffered (the
    /// peer is not sending what it should).
    pub fn take_framed<T>(
        &mut self,
        what: &'static str,
        max: usize,
        parse: impl FnOnce(&[u8]) -> Result<T, Iperf3Error>,
    ) -> Result<Option<T>, Iperf3Error> {
        let Some((len, rest)) = self.buf.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > max {
            return Err(Iperf3Error::TooLong { what, len, max });
        }
        let Some(body) = rest.get(..len) else {
            return Ok(None);
        };
        let doc = parse(body);
        self.buf.drain(..4 + len);
        doc.map(Some)
    }

    /// Takes one framed JSON document (see [`Inbox::take_framed`]) as a JSON value.
    pub fn take_json(
        &mut self,
        what: &'static str,
        max: usize,
    ) -> Result<Option<Value>, Iperf3Error> {
        self.take_framed(what, max, |b| {
            serde_json::from_slice(b).map_err(|e| Iperf3Error::Json {
                what,
                why: e.to_string(),
            })
        })
    }

    /// Takes one framed results document (see [`Inbox::take_framed`]) as [`Results`].
    pub fn take_results(&mut self, max: usize) -> Result<Option<Results>, Iperf3Error> {
        self.take_framed("results", max, Results::parse)
    }
}

/// Transport a test runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP streams.
    Tcp,
    /// UDP streams.
    Udp,
    /// SCTP (not served by hakaru).
    Sctp,
}

/// A client's parameters (the `PARAM_EXCHANGE` document). Flags are enabled by presence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params {
    /// Transport; `None` when the document named none.
    pub protocol: Option<Protocol>,
    /// Seconds omitted at the start.
    pub omit: f64,
    /// Seconds to run; 0 when `num` or `blockcount` ends the test.
    pub time: f64,
    /// Bytes to send (`-n`), 0 when unused.
    pub num: u64,
    /// Blocks to send (`-k`), 0 when unused.
    pub blockcount: u64,
    /// Streams per direction.
    pub parallel: u32,
    /// Server sends (`-R`).
    pub reverse: bool,
    /// Both send (`--bidir`).
    pub bidirectional: bool,
    /// Socket buffer size (`-w`).
    pub window: Option<u64>,
    /// Block (TCP write) or datagram size (`-l`).
    pub len: Option<u64>,
    /// Bits per second per stream (`-b`); 0 or absent is unlimited for TCP.
    pub bandwidth: Option<u64>,
    /// TCP_MAXSEG (`-M`).
    pub mss: Option<u32>,
    /// TCP_NODELAY (`-N`).
    pub nodelay: bool,
    /// IP TOS (`-S`).
    pub tos: Option<u32>,
    /// Congestion control (`-C`).
    pub congestion: Option<String>,
    /// Title (`-T`).
    pub title: Option<String>,
    /// Extra data (`--extra-data`).
    pub extra_data: Option<String>,
    /// The client wants the server's output.
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    pub udp_counters_64bit: bool,
    /// Payload is `0123456789` repeated.
    pub repeating_payload: bool,
    /// The sender uses sendfile (`-Z`).
    pub zerocopy: bool,
    /// An authentication token (not supported by hakaru).
    pub authtoken: Option<String>,
    /// The client's version, e.g. `3.12`.
    pub client_version: Option<String>,
    /// CPU for the server (`--affinity n,m`).
    pub server_affinity: Option<u32>,
    /// Pacing timer, microseconds.
    pub pacing_timer: Option<u64>,
    /// Receivers drop the data with MSG_TRUNC instead of copying it (`--skip-rx-copy`, 3.17).
    pub skip_rx_copy: bool,
    /// Data streams over Multipath TCP (`-m/--mptcp`, 3.16); the control connection stays TCP.
    pub mptcp: bool,
}

/// An integer from iperf3 JSON: 3.12 and 3.13 print negative numbers as unsigned 64-bit.
pub fn int_of(v: &Value) -> Option<i64> {
    wire::Num::of(v).int()
}

fn bad(what: &'static str, why: impl Into<String>) -> Iperf3Error {
    Iperf3Error::Json {
        what,
        why: why.into(),
    }
}

impl Params {
    /// Reads a parameter document; unknown keys are ignored, numbers must be numbers.
    pub fn from_json(v: &Value) -> Result<Params, Iperf3Error> {
        const W: &str = "parameters";
        let o = v.as_object().ok_or_else(|| bad(W, "not a JSON object"))?;
        let num = |k: &str| -> Result<Option<f64>, Iperf3Error> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => match (x.as_f64(), int_of(x)) {
                    (_, Some(i)) if i < 0 => Err(bad(W, format!("\"{k}\" is negative"))),
                    // Every number in the parameters is a count, a size or seconds: a
                    // negative fraction is as wrong as a negative integer.
                    (Some(f), _) if f < 0.0 => Err(bad(W, format!("\"{k}\" is negative"))),
                    (Some(f), _) if f.is_finite() => Ok(Some(f)),
                    _ => Err(bad(W, format!("\"{k}\" is not a number"))),
                },
            }
        };
        let int = |k: &str| -> Result<Option<u64>, Iperf3Error> { Ok(num(k)?.map(|f| f as u64)) };
        let string = |k: &str| -> Result<Option<String>, Iperf3Error> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(W, format!("\"{k}\" is not a string"))),
            }
        };
        let has = |k: &str| o.contains_key(k);
        let protocol = if has("tcp") {
            Some(Protocol::Tcp)
        } else if has("udp") {
            Some(Protocol::Udp)
        } else if has("sctp") {
            Some(Protocol::Sctp)
        } else {
            None
        };
        Ok(Params {
            protocol,
            omit: num("omit")?.unwrap_or(0.0),
            time: num("time")?.unwrap_or(0.0),
            num: int("num")?.unwrap_or(0),
            blockcount: int("blockcount")?.unwrap_or(0),
            parallel: int("parallel")?.unwrap_or(1).min(u32::MAX as u64) as u32,
            reverse: has("reverse"),
            bidirectional: has("bidirectional"),
            window: int("window")?,
            len: int("len")?,
            bandwidth: int("bandwidth")?,
            mss: int("MSS")?.map(|m| m.min(u32::MAX as u64) as u32),
            nodelay: has("nodelay"),
            tos: int("TOS")?.map(|t| t.min(u32::MAX as u64) as u32),
            congestion: string("congestion")?,
            title: string("title")?,
            extra_data: string("extra_data")?,
            get_server_output: has("get_server_output"),
            udp_counters_64bit: has("udp_counters_64bit"),
            repeating_payload: has("repeating_payload"),
            zerocopy: has("zerocopy"),
            authtoken: string("authtoken")?,
            client_version: string("client_version")?,
            server_affinity: int("server_affinity")?.map(|a| a.min(u32::MAX as u64) as u32),
            pacing_timer: int("pacing_timer")?,
            // iperf3 sends the number 1; a key whose value is 0 asks for nothing.
            skip_rx_copy: int("skip_rx_copy")?.is_some_and(|v| v > 0),
            // iperf3 reads only `true` (its type check), so nothing else turns MPTCP on.
            mptcp: o.get("mptcp") == Some(&Value::Bool(true)),
        })
    }

    /// The document a client sends: keys in iperf3's order, disabled flags left out (a stock
    /// server takes a present key as enabled, whatever its value).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        match self.protocol {
            Some(Protocol::Udp) => o.insert("udp".into(), json!(true)),
            Some(Protocol::Sctp) => o.insert("sctp".into(), json!(true)),
            _ => o.insert("tcp".into(), json!(true)),
        };
        o.insert("omit".into(), whole(self.omit));
        if let Some(a) = self.server_affinity {
            o.insert("server_affinity".into(), json!(a));
        }
        o.insert("time".into(), whole(self.time));
        o.insert("num".into(), json!(self.num));
        o.insert("blockcount".into(), json!(self.blockcount));
        if let Some(m) = self.mss {
            o.insert("MSS".into(), json!(m));
        }
        if self.nodelay {
            o.insert("nodelay".into(), json!(true));
        }
        o.insert("parallel".into(), json!(self.parallel));
        if self.reverse {
            o.insert("reverse".into(), json!(true));
        }
        if self.bidirectional {
            o.insert("bidirectional".into(), json!(true));
        }
        if let Some(w) = self.window {
            o.insert("window".into(), json!(w));
        }
        if let Some(l) = self.len {
            o.insert("len".into(), json!(l));
        }
        if let Some(b) = self.bandwidth.filter(|&b| b > 0) {
            o.insert("bandwidth".into(), json!(b));
        }
        o.insert(
            "pacing_timer".into(),
            json!(self.pacing_timer.unwrap_or(1000)),
        );
        if let Some(t) = self.tos {
            o.insert("TOS".into(), json!(t));
        }
        for (k, v) in [
            ("title", &self.title),
            ("extra_data", &self.extra_data),
            ("congestion", &self.congestion),
        ] {
            if let Some(s) = v {
                o.insert(k.into(), json!(s));
            }
        }
        for (k, on) in [
            ("get_server_output", self.get_server_output),
            ("udp_counters_64bit", self.udp_counters_64bit),
            ("repeating_payload", self.repeating_payload),
            ("zerocopy", self.zerocopy),
            ("skip_rx_copy", self.skip_rx_copy),
        ] {
            if on {
                o.insert(k.into(), json!(1));
            }
        }
        if self.mptcp {
            o.insert("mptcp".into(), json!(true));
        }
        if let Some(v) = &self.client_version {
            o.insert("client_version".into(), json!(v));
        }
        Value::Object(o)
    }
}

/// Seconds as iperf3 writes them: an integer when whole.
fn whole(x: f64) -> Value {
    if x.fract() == 0.0 && (0.0..1e15).contains(&x) {
        json!(x as u64)
    } else {
        json!(x)
    }
}

/// The bytes after a `SERVER_ERROR` state: i_errno and errno, 4 bytes each, big-endian.
pub fn server_error(i_errno: i32, errno: i32) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = State::ServerError.byte();
    b[1..5].copy_from_slice(&i_errno.to_be_bytes());
    b[5..9].copy_from_slice(&errno.to_be_bytes());
    b
}

/// The results documents: each side's streams, and how they map to and from a report.
mod results;
pub use results::{report_from_results, results_from_report, Results, StreamResult};

/// The results document as serde reads it (`iperf3/wire.rs`).
mod wire;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bytes_round_trip() {
        for b in 0..=255u8 {
            assert_eq!(State::from_byte(b).byte(), b);
        }
        assert_eq!(State::from_byte(0xff), State::AccessDenied);
        assert_eq!(State::from_byte(0xfe), State::ServerError);
        assert_eq!(State::IperfDone.byte(), 16);
        assert_eq!(State::from_byte(3), State::Other(3));
    }

    #[test]
    fn cookies() {
        let c = make_cookie(&[200; 36]);
        assert_eq!(c[36], 0);
        let s = parse_cookie(&c).unwrap();
        assert_eq!(s.len(), 36);
        // Each random byte picks a letter of the base32 alphabet by its value modulo 32.
        let mut r = [0u8; 36];
        for (i, b) in r.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(97);
        }
        let want: Vec<u8> = r
            .iter()
            .map(|b| b"abcdefghijklmnopqrstuvwxyz234567"[usize::from(b % 32)])
            .chain([0])
            .collect();
        assert_eq!(make_cookie(&r).to_vec(), want);
        assert_eq!(&make_cookie(&[31; 36])[..2], b"77");
        // A cookie one byte short, or without its NUL, is refused.
        assert_eq!(parse_cookie(&c[..36]), Err(Iperf3Error::BadCookie));
        assert_eq!(parse_cookie(b""), Err(Iperf3Error::BadCookie));
        assert_eq!(
            parse_cookie(b"oxg63pysxsbdr2y7icmoceumwoldlei6heyr\0").unwrap(),
            "oxg63pysxsbdr2y7icmoceumwoldlei6heyr"
        );
        assert_eq!(
            parse_cookie(b"oxg63pysxsbdr2y7icmoceumwoldlei6heyrX"),
            Err(Iperf3Error::BadCookie)
        );
        assert_eq!(
            parse_cookie(b"OXG63pysxsbdr2y7icmoceumwoldlei6heyr\0"),
            Err(Iperf3Error::BadCookie)
        );
        assert_eq!(parse_cookie(b"short\0"), Err(Iperf3Error::BadCookie));
    }

    #[test]
    fn stream_ids_skip_two() {
        let ids: Vec<u32> = (0..5).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5, 6]);
    }

    #[test]
    fn inbox_reads_split_json_and_states() {
        let mut inbox = Inbox::new();
        let framed = encode_json(&json!({"a": 1}));
        inbox.feed(&[9]);
        inbox.feed(&framed[..3]);
        assert_eq!(inbox.take_state(), Some(State::ParamExchange));
        assert_eq!(inbox.take_json("x", 100), Ok(None));
        inbox.feed(&framed[3..]);
        inbox.feed(&[4]);
        assert_eq!(inbox.take_json("x", 100), Ok(Some(json!({"a": 1}))));
        assert_eq!(inbox.take_state(), Some(State::TestEnd));
        assert_eq!(inbox.take_state(), None);
        inbox.feed(&[0, 1, 0, 0]);
        assert_eq!(
            inbox.take_json("x", 100),
            Err(Iperf3Error::TooLong {
                what: "x",
                len: 65536,
                max: 100
            })
        );
        let mut inbox = Inbox::new();
        inbox.feed(&[0, 0, 0, 3]);
        inbox.feed(b"{x}");
        assert!(matches!(
            inbox.take_json("x", 100),
            Err(Iperf3Error::Json { .. })
        ));
    }

    #[test]
    fn params_from_a_real_312_client() {
        let v: Value = serde_json::from_str(
            r#"{"udp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":1,"reverse":true,"len":1000,"bandwidth":10000000,"pacing_timer":1000,"udp_counters_64bit":1,"client_version":"3.12"}"#,
        )
        .unwrap();
        let p = Params::from_json(&v).unwrap();
        assert_eq!(p.protocol, Some(Protocol::Udp));
        assert!(p.reverse && p.udp_counters_64bit && !p.bidirectional && !p.nodelay);
        assert_eq!(p.len, Some(1000));
        assert_eq!(p.bandwidth, Some(10_000_000));
        assert_eq!(p.time, 2.0);
        assert_eq!(p.client_version.as_deref(), Some("3.12"));
    }

    #[test]
    fn presence_enables_a_flag_whatever_its_value() {
        let p = Params::from_json(&json!({"tcp": true, "reverse": false, "parallel": 2})).unwrap();
        assert!(p.reverse);
        assert!(Params::from_json(&json!({"tcp": true, "len": "big"})).is_err());
        assert!(Params::from_json(&json!({"tcp": true, "parallel": -1})).is_err());
        assert!(Params::from_json(&json!([1])).is_err());
        // Negative fractions would become panicking Durations.
        for k in ["omit", "time"] {
            let e = Params::from_json(&json!({"tcp": true, k: -1.5})).unwrap_err();
            assert!(
                e.to_string().contains(&format!("\"{k}\" is negative")),
                "{e}"
            );
        }
        // Huge values parse; the server's range checks refuse them.
        assert_eq!(
            Params::from_json(&json!({"tcp": true, "time": 1e300}))
                .unwrap()
                .time,
            1e300
        );
        // Unknown keys from newer clients are ignored.
        assert!(Params::from_json(&json!({"udp": true, "gso": 1, "mptcp": true})).is_ok());
    }

    #[test]
    fn params_skip_rx_copy_and_mptcp_as_iperf3_sends_them() {
        let p = Params::from_json(&json!({"tcp": true, "skip_rx_copy": 1, "mptcp": true})).unwrap();
        assert!(p.skip_rx_copy && p.mptcp);
        let p = Params::from_json(&json!({"tcp": true, "skip_rx_copy": 0, "mptcp": 1})).unwrap();
        assert!(!p.skip_rx_copy && !p.mptcp);
        assert!(Params::from_json(&json!({"tcp": true, "skip_rx_copy": "yes"})).is_err());
        let back = Params::from_json(
            &Params {
                skip_rx_copy: true,
                mptcp: true,
                ..Params::default()
            }
            .to_json(),
        )
        .unwrap();
        assert!(back.skip_rx_copy && back.mptcp);
    }

    #[test]
    fn params_to_json_leaves_disabled_flags_out() {
        let p = Params {
            protocol: Some(Protocol::Tcp),
            time: 3.0,
            parallel: 2,
            len: Some(131072),
            ..Params::default()
        };
        let v = p.to_json();
        let o = v.as_object().unwrap();
        for k in [
            "reverse",
            "bidirectional",
            "nodelay",
            "zerocopy",
            "bandwidth",
            "udp",
        ] {
            assert!(!o.contains_key(k), "{k} present in {v}");
        }
        assert_eq!(o["tcp"], json!(true));
        assert_eq!(o["time"], json!(3));
        let back = Params::from_json(&v).unwrap();
        assert_eq!(back.parallel, 2);
        assert_eq!(back.len, Some(131072));
        let q = Params {
            reverse: true,
            udp_counters_64bit: true,
            protocol: Some(Protocol::Udp),
            ..Params::default()
        };
        let v = q.to_json();
        assert_eq!(v["reverse"], json!(true));
        assert_eq!(v["udp_counters_64bit"], json!(1));
    }

    #[test]
    fn results_with_312_unsigned_negatives() {
        let r = Results::parse(
            br#"{"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1.0,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":1000,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":2.0}]}"#,
        )
        .unwrap();
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.streams[0].retransmits, -1);
        assert_eq!(r.streams[0].bytes, 1000);
        assert_eq!(r.streams[0].omitted_packets, None);
        let back = Results::parse(r.to_json().to_string().as_bytes()).unwrap();
        assert_eq!(back.streams[0].omitted_packets, Some(0));
        assert_eq!(back.sender_has_retransmits, -1);
        assert!(Results::parse(br#"{"streams": []}"#).is_err());
    }

    /// The results parser before the typed one: a `Value` tree read key by key. Kept as the
    /// reference the typed parse must agree with.
    fn results_from_value(v: &Value) -> Result<Results, Iperf3Error> {
        const W: &str = "results";
        let o = v.as_object().ok_or_else(|| bad(W, "not a JSON object"))?;
        let f = |o: &Map<String, Value>, k: &str| -> Result<f64, Iperf3Error> {
            o.get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(W, format!("\"{k}\" missing or not a number")))
        };
        let i = |o: &Map<String, Value>, k: &str| -> Result<i64, Iperf3Error> {
            o.get(k)
                .and_then(int_of)
                .ok_or_else(|| bad(W, format!("\"{k}\" missing or not a number")))
        };
        let streams = o
            .get("streams")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(W, "\"streams\" missing or not an array"))?
            .iter()
            .map(|s| {
                let s = s
                    .as_object()
                    .ok_or_else(|| bad(W, "a stream is not an object"))?;
                Ok(StreamResult {
                    id: i(s, "id")?,
                    bytes: i(s, "bytes")?.max(0) as u64,
                    retransmits: i(s, "retransmits")?,
                    jitter: f(s, "jitter")?,
                    errors: i(s, "errors")?,
                    packets: i(s, "packets")?,
                    omitted_errors: s.get("omitted_errors").and_then(int_of),
                    omitted_packets: s.get("omitted_packets").and_then(int_of),
                    start_time: s.get("start_time").and_then(Value::as_f64).unwrap_or(0.0),
                    end_time: s.get("end_time").and_then(Value::as_f64).unwrap_or(0.0),
                })
            })
            .collect::<Result<Vec<_>, Iperf3Error>>()?;
        Ok(Results {
            cpu_util_total: f(o, "cpu_util_total")?,
            cpu_util_user: f(o, "cpu_util_user")?,
            cpu_util_system: f(o, "cpu_util_system")?,
            sender_has_retransmits: i(o, "sender_has_retransmits")?,
            congestion_used: o
                .get("congestion_used")
                .and_then(Value::as_str)
                .map(str::to_string),
            streams,
            // Read before, but never used: the typed parse leaves them out.
            server_output_text: None,
            server_output_json: None,
        })
    }

    /// Both parsers on one document: the same figures, or both an error with the same words.
    fn same_as_before(doc: &str) -> Result<Results, Iperf3Error> {
        let typed = Results::parse(doc.as_bytes());
        let before = serde_json::from_str::<Value>(doc)
            .map_err(|e| bad("results", e.to_string()))
            .and_then(|v| results_from_value(&v));
        assert_eq!(typed, before, "{doc}");
        typed
    }

    /// Results documents a stock iperf3 3.12 client sent hakaru's server
    /// (fuzz/corpus/iperf3_control/capture-00 and -03: TCP with BBR, and UDP with two streams).
    const CAPTURED_TCP: &str = r#"{"cpu_util_total":47.076204980123023,"cpu_util_user":0.52619607998259521,"cpu_util_system":46.550107790589585,"sender_has_retransmits":1,"congestion_used":"bbr","streams":[{"id":1,"bytes":1988362240,"retransmits":8,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1.000161}]}"#;
    const CAPTURED_UDP: &str = r#"{"cpu_util_total":4.2902259228355062,"cpu_util_user":1.1858335157996067,"cpu_util_system":3.1041951461998689,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":655360,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":20,"start_time":0,"end_time":1.000107},{"id":3,"bytes":655360,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":20,"start_time":0,"end_time":1.000109}]}"#;

    #[test]
    fn typed_results_of_real_iperf3_documents_match_the_value_parse() {
        let r = same_as_before(CAPTURED_TCP).unwrap();
        assert_eq!(r.cpu_util_total, 47.076_204_980_123_02);
        assert_eq!(r.cpu_util_system, 46.550_107_790_589_585);
        assert_eq!(r.sender_has_retransmits, 1);
        assert_eq!(r.congestion_used.as_deref(), Some("bbr"));
        assert_eq!(r.streams.len(), 1);
        let s = &r.streams[0];
        assert_eq!((s.id, s.bytes, s.retransmits), (1, 1_988_362_240, 8));
        assert_eq!((s.end_time, s.omitted_packets), (1.000161, None));
        let r = same_as_before(CAPTURED_UDP).unwrap();
        assert_eq!(r.congestion_used, None);
        assert_eq!(
            r.streams
                .iter()
                .map(|s| (s.id, s.bytes, s.retransmits, s.packets))
                .collect::<Vec<_>>(),
            [(1, 655_360, -1, 20), (3, 655_360, -1, 20)]
        );
        // The report built from it is the one built before.
        let plan = [(0, FlowDir::Up), (1, FlowDir::Up)];
        let rep = report_from_results(End::Client, &r, &plan, |_| true, true, "iperf3").unwrap();
        assert_eq!(rep.flows[1].udp.as_ref().unwrap().datagrams, 20);
        // What hakaru's server sends (3.14+ keys, server output), read back.
        let mut mine = r.clone();
        mine.streams[0].omitted_packets = Some(3);
        mine.server_output_text = Some("Server listening on 5201\n".repeat(100));
        mine.server_output_json = Some(json!({"start": {"connected": [{"socket": 5}]}}));
        let back = same_as_before(&mine.to_json().to_string()).unwrap();
        assert_eq!(back.streams[0].omitted_packets, Some(3));
        assert_eq!(back.streams[1].omitted_packets, Some(0));
        assert_eq!(back.streams[1].end_time, 1.000109);
        assert_eq!(back.server_output_text, None);
    }

    #[test]
    fn typed_results_refuse_what_the_value_parse_refused() {
        for doc in [
            "",
            "[1,2,3,4,5,6]",
            "null",
            r#"{"cpu_util_total":1"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":{}}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[[1]]}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[{"id":1}]}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[{"id":"1","bytes":1,"retransmits":1,"jitter":0,"errors":0,"packets":0}]}"#,
            r#"{"cpu_util_total":"1","cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[]}"#,
            r#"{"cpu_util_total":null,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[]}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1.5e300,"streams":[{"id":1,"bytes":1,"retransmits":1,"jitter":[],"errors":0,"packets":0}]}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1,"streams":[]} x"#,
        ] {
            assert!(same_as_before(doc).is_err(), "{doc}");
        }
        // Wrong types where a figure is optional, unknown keys, floats for integers, huge
        // numbers: read as before.
        for doc in [
            r#"{"cpu_util_total":1,"cpu_util_user":-1,"cpu_util_system":1e3,"sender_has_retransmits":-1,"congestion_used":7,"gso":[{"a":[]}],"streams":[]}"#,
            r#"{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":1,"sender_has_retransmits":1.8446744073709552e19,"streams":[{"id":1.9,"bytes":-5,"retransmits":1e30,"jitter":-0.5,"errors":-1,"packets":1e19,"omitted_errors":"x","omitted_packets":null,"start_time":"0","end_time":{"a":1},"extra":[1,{"b":2}]}]}"#,
            r#"{"streams":[],"cpu_util_total":0,"cpu_util_user":0,"cpu_util_system":0,"sender_has_retransmits":9223372036854775808}"#,
        ] {
            assert!(same_as_before(doc).is_ok(), "{doc}");
        }
    }

    #[test]
    fn a_results_message_at_the_limit_is_read_and_one_byte_over_is_refused() {
        // A real document padded with spaces to exactly the limit.
        let mut doc = CAPTURED_TCP.as_bytes().to_vec();
        doc.resize(MAX_RESULTS_JSON, b' ');
        let mut inbox = Inbox::new();
        inbox.feed(&(doc.len() as u32).to_be_bytes());
        inbox.feed(&doc[..doc.len() / 2]);
        assert_eq!(inbox.take_results(MAX_RESULTS_JSON), Ok(None));
        inbox.feed(&doc[doc.len() / 2..]);
        inbox.feed(&[State::IperfDone.byte()]);
        let r = inbox.take_results(MAX_RESULTS_JSON).unwrap().unwrap();
        assert_eq!(r.streams[0].bytes, 1_988_362_240);
        assert_eq!(inbox.take_state(), Some(State::IperfDone));
        // One byte more is refused on the length alone: nothing of the body is here.
        let mut inbox = Inbox::new();
        inbox.feed(&(MAX_RESULTS_JSON as u32 + 1).to_be_bytes());
        let e = inbox.take_results(MAX_RESULTS_JSON).unwrap_err();
        assert_eq!(
            e.to_string(),
            "iperf3 results of 1048577 bytes refused: over the limit of 1 MiB (1048576 bytes)"
        );
        // 64 MiB, as a client could declare before the limit was lowered.
        let mut inbox = Inbox::new();
        inbox.feed(&(64u32 << 20).to_be_bytes());
        let e = inbox
            .take_results(MAX_RESULTS_JSON)
            .unwrap_err()
            .to_string();
        assert!(e.contains("67108864 bytes") && e.contains("1 MiB"), "{e}");
        // The parameters' limit in the same words.
        let mut inbox = Inbox::new();
        inbox.feed(&(MAX_PARAMS_JSON as u32 + 1).to_be_bytes());
        let e = inbox.take_json("parameters", MAX_PARAMS_JSON).unwrap_err();
        assert_eq!(
            e.to_string(),
            "iperf3 parameters of 8193 bytes refused: over the limit of 8 KiB (8192 bytes)"
        );
    }

    #[test]
    fn results_of_128_streams_each_way_fit_the_limit_many_times_over() {
        // The largest figures each key can hold, 256 streams: what a stock server sends
        // hakaru's client (which never asks for the server's output) at worst.
        let line = StreamResult {
            id: 258,
            bytes: u64::MAX,
            retransmits: i64::MIN,
            jitter: -1.234_567_890_123_456_7e-300,
            errors: i64::MIN,
            packets: i64::MIN,
            omitted_errors: Some(i64::MIN),
            omitted_packets: Some(i64::MIN),
            start_time: -1.234_567_890_123_456_7e-300,
            end_time: -1.234_567_890_123_456_7e-300,
        };
        let r = Results {
            cpu_util_total: -1.234_567_890_123_456_7e-300,
            cpu_util_user: -1.234_567_890_123_456_7e-300,
            cpu_util_system: -1.234_567_890_123_456_7e-300,
            sender_has_retransmits: 1,
            congestion_used: Some("x".repeat(16)),
            streams: vec![line; 256],
            ..Results::default()
        };
        let n = r.to_json().to_string().len();
        assert!(n * 10 < MAX_RESULTS_JSON, "{n} bytes");
    }

    /// An iperf3 client with 64-bit counters that sends sequence number 2^64 - 1 twice leaves
    /// the server's receiver with `lost` near 2^64 and a duplicate: `datagrams + lost`
    /// overflowed when the server built its results.
    #[test]
    fn results_of_a_receiver_that_saw_the_largest_sequence_number() {
        let r = same_as_before(CAPTURED_UDP).unwrap();
        let plan = [(0, FlowDir::Up)];
        let mut rep =
            report_from_results(End::Server, &r, &plan, |_| false, true, "hakaru").unwrap();
        let u = rep.flows[0].udp.as_mut().unwrap();
        (u.datagrams, u.lost, u.duplicates, u.next_seq) = (2, u64::MAX - 1, 1, u64::MAX);
        let s = &results_from_report(&rep, false).streams[0];
        assert_eq!((s.packets, s.omitted_packets), (-1, Some(1)));
    }

    #[test]
    fn server_error_bytes() {
        assert_eq!(
            server_error(errno::IEAUTHTEST, 0),
            [0xfe, 0, 0, 0, 142, 0, 0, 0, 0]
        );
        assert!(error_text(121).contains("busy"));
        assert_eq!(error_text(9999), "iperf3 error 9999");
    }
}
