//! hakaru's native control protocol.
//!
//! A connection starts with the 4-byte [`MAGIC`] from each side, then carries frames: a
//! big-endian u32 length followed by that many bytes of one JSON-encoded [`Message`].
//! Frames over [`MAX_FRAME`] bytes are refused before any allocation, so a peer cannot make
//! the other end buffer an arbitrary amount.

#[cfg(test)]
use hakaru_model::TcpSpec;
use hakaru_model::{IntervalSample, SideReport, TestSpec};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// First bytes of every hakaru connection, in both directions.
pub const MAGIC: [u8; 4] = *b"HKRU";
/// Control protocol version; peers with another version are refused with a clear error.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame accepted (8 MiB: a final report of 2048 flows fits with room to spare).
pub const MAX_FRAME: usize = 8 << 20;
/// Largest frame a server accepts before it has admitted a test: hello, data_hello and
/// test_request are a few hundred bytes, so an unadmitted peer cannot make the server buffer
/// more than this per connection.
pub const MAX_FIRST_FRAMES: usize = 64 << 10;

/// How often each end of a control connection sends a keepalive during a test.
pub const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);
/// The furthest ahead a scheduled start (`start_at`) is waited for: an instant further
/// ahead (a clock behind the coordinator's, or a client that asks for more) starts this far
/// ahead of when it came.
pub const MAX_START_AHEAD: Duration = Duration::from_secs(1);

/// How long a peer may say nothing on the control connection before the path counts as down:
/// the test's stall timeout, but never less than two keepalive periods and a second, so a live
/// peer is never taken for a dead one.
pub fn silence_limit(stall_timeout: Duration) -> Duration {
    stall_timeout.max(KEEPALIVE_EVERY * 2 + Duration::from_secs(1))
}

/// What a server says about itself: in its welcome without a key, after the key proof with
/// one (a stranger learns neither its version, its OS, its clock nor its boot id).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Server software and version.
    pub software: String,
    /// The server's wall clock when it sent this (see `welcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_time: Option<f64>,
    /// The server's kernel boot id (see `welcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The server's OS (see `welcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
}

/// The test a client asks for (the model's [`TestSpec`], tagged by `kind`).
pub type TestKind = TestSpec;

/// One control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Client → server, first frame of a control connection.
    Hello {
        /// Client's protocol version.
        protocol: u32,
        /// Client software and version.
        software: String,
        /// The client's kernel boot id (see [`Message::Welcome`]'s `host`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// The client's nonce for key authentication (crate::auth), hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
    },
    /// Server → client, answer to a compatible `Hello`.
    Welcome {
        /// Server's protocol version.
        protocol: u32,
        /// Server software and version.
        software: String,
        /// The server's wall clock when it sent this, seconds since the Unix epoch: the
        /// client estimates the two clocks' offset from it.
        #[serde(default)]
        unix_time: Option<f64>,
        /// The server's kernel boot id. When it equals the client's, both ends run on one
        /// kernel and share its CPUs (loopback, network namespaces): each side then starts
        /// UDP workers for half of them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// Present when the server requires a pre-shared key: its nonce, hex. The client
        /// answers with `auth` before its test request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<String>,
        /// The server's OS (`linux`, `windows`, `macos`). A client asks only a Linux server
        /// (or one that does not say, which is an older, Linux-only hakaru) to set a
        /// congestion control the user did not name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        os: Option<String>,
    },
    /// Client → server, when the welcome asked for it: the client's key proof (crate::auth).
    Auth {
        /// HMAC-SHA256 proof, hex.
        proof: String,
    },
    /// Server → client: the client's proof checked; the server's own proof follows.
    AuthOk {
        /// HMAC-SHA256 proof, hex.
        proof: String,
        /// What a server with a key leaves out of its welcome, told only to a client that
        /// proved it holds the key (older servers send none, and put it in the welcome).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<ServerInfo>,
    },
    /// Client → server: run this test.
    TestRequest {
        /// The test.
        test: Box<TestKind>,
        /// Held start (synchronised runs, `hakaru plan`): once every data path is set up the
        /// server waits for the client's `flows_ready` before it sends `start` (TCP, latency)
        /// or `connect_port` (connection rate), so the client decides the instant the test
        /// begins. UDP flows always end their set-up with `flows_ready`.
        #[serde(default)]
        held_start: bool,
    },
    /// Server → client: the test is set up; data connections carry `token`.
    Accepted {
        /// Server-side test number (for logs).
        test_id: u64,
        /// Secret that ties data connections to this test (hex).
        token: String,
        /// The test asked for latency probes (`--latency-probe`) and the server runs them:
        /// the flow id the probe flow carries (the one after the bulk flows). The server
        /// starts its echo as soon as that path arrives and holds the start until the
        /// client's `flows_ready`, which follows the probes' idle baseline. A server that
        /// predates probes leaves this out, and the client stops with an error naming the
        /// option instead of waiting for an echo that will not come.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe_flow: Option<u32>,
    },
    /// Server → client: the test will not run, and why.
    Refused {
        /// Reason, naming the offending option.
        reason: String,
    },
    /// Client → server, first frame of a data connection.
    DataHello {
        /// The test's token.
        token: String,
        /// Flow id this connection carries.
        flow: u32,
    },
    /// Client → server, UDP tests: every flow's hello was acknowledged. With a held start,
    /// every test kind: the client is set up and the test may start now.
    FlowsReady,
    /// Client → server, held start of a bulk TCP or UDP test, right before `flows_ready`: both
    /// ends' data threads begin at this wall-clock instant (Unix seconds, each end by its own
    /// clock), so the work of starting them (the server's counters and threads, `start`, the
    /// client's threads) is done before it. A server waits at most 1 s for it; an instant
    /// already past starts at once. `hakaru plan` releases many clients together this way.
    StartAt {
        /// The instant, seconds since the Unix epoch.
        at_unix: f64,
    },
    /// Server → client, connection-rate tests, right after `accepted`: the test's own listener
    /// (on the server's address of the control connection) is up on this port and its counters
    /// run; the client starts connecting at once (there is no `start`).
    ConnectPort {
        /// TCP port of the listener.
        port: u16,
        /// The server closes each connection itself right after its response (FIN tests), as
        /// netserver does in TCP_CRR: TIME_WAIT stays at the server and the client's ports are
        /// free at once. The client then reads to the server's close before it closes. Absent
        /// (a server that waits for the client's close): the client closes first.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        server_closes: bool,
    },
    /// Server → client: every data connection arrived; both ends start now.
    Start,
    /// Server → client: the server's counters for one interval.
    Interval {
        /// The sample.
        sample: IntervalSample,
    },
    /// Either way: still alive (sent every couple of seconds during a test).
    Keepalive,
    /// Client → server: stop sending now (Ctrl-C); finish as usual.
    Stop,
    /// Either way, UDP tests: this end's senders are done; receivers may finish once they
    /// have seen these datagram counts or after a short linger.
    SendDone {
        /// (flow id, datagrams sent in all) for each flow this end sent on.
        sent: Vec<(u32, u64)>,
    },
    /// Either way: this end's final report.
    Finished {
        /// The report.
        report: Box<SideReport>,
    },
    /// Either way: a fatal problem; the sender closes after it.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl Message {
    /// Short name of the message type, for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Welcome { .. } => "welcome",
            Message::Auth { .. } => "auth",
            Message::AuthOk { .. } => "auth_ok",
            Message::TestRequest { .. } => "test_request",
            Message::Accepted { .. } => "accepted",
            Message::Refused { .. } => "refused",
            Message::DataHello { .. } => "data_hello",
            Message::FlowsReady => "flows_ready",
            Message::StartAt { .. } => "start_at",
            Message::ConnectPort { .. } => "connect_port",
            Message::Start => "start",
            Message::Interval { .. } => "interval",
            Message::Keepalive => "keepalive",
            Message::Stop => "stop",
            Message::SendDone { .. } => "send_done",
            Message::Finished { .. } => "finished",
            Message::Error { .. } => "error",
        }
    }

    /// Encodes the message as one frame (length prefix + JSON).
    pub fn encode(&self) -> Vec<u8> {
        let body =
            serde_json::to_vec(self).unwrap_or_else(|_| b"{\"type\":\"keepalive\"}".to_vec());
        let mut out = Vec::with_capacity(4 + body.len());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }
}

/// A protocol violation by the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The connection did not start with hakaru's magic.
    #[error("not a hakaru peer: the connection began with {0:02x?} instead of \"HKRU\"")]
    BadMagic(Vec<u8>),
    /// A frame claimed more bytes than allowed.
    #[error("control message of {len} bytes exceeds the {max}-byte limit")]
    Oversized {
        /// Claimed length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A frame that is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// Incremental decoder: feed bytes as they arrive, take messages as they complete.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    need_magic: bool,
    max: usize,
}

impl Decoder {
    /// A decoder that first expects the 4-byte magic.
    pub fn new() -> Self {
        Decoder {
            buf: Vec::new(),
            need_magic: true,
            max: MAX_FRAME,
        }
    }

    /// A decoder for a stream whose magic was already consumed.
    /// A decoder that refuses frames over `max` bytes (before buffering them).
    pub fn with_max(max: usize) -> Self {
        Decoder {
            max,
            ..Decoder::new()
        }
    }

    /// Changes the largest frame accepted from now on.
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    pub fn after_magic() -> Self {
        Decoder {
            need_magic: false,
            ..Decoder::new()
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the bytes buffered past the last decoded message (a data connection's first
    /// bytes after its hello, read with it).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Returns the next complete message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, ProtoError> {
        if self.need_magic {
            let got = self.buf.get(..4).unwrap_or(&self.buf);
            if !MAGIC.starts_with(got) {
                return Err(ProtoError::BadMagic(got.to_vec()));
            }
            if got.len() < 4 {
                return Ok(None);
            }
            self.buf.drain(..4);
            self.need_magic = false;
        }
        let Some((len, rest)) = self.buf.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > self.max {
            return Err(ProtoError::Oversized { len, max: self.max });
        }
        let Some(body) = rest.get(..len) else {
            return Ok(None);
        };
        let msg = serde_json::from_slice::<Message>(body)
            .map_err(|e| ProtoError::Malformed(e.to_string()));
        self.buf.drain(..4 + len);
        msg.map(Some)
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

/// The magic followed by one encoded message: what opens a connection.
pub fn opening(msg: &Message) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&msg.encode());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hakaru_model::{Amount, Bytes, Direction, FlowTick};

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello {
                protocol: 1,
                software: "hakaru 0.1.0".into(),
                host: Some("5d2c1f0e-3b0a-4c55-9f43-2f1b6a7c8d90".into()),
                nonce: Some("ab".repeat(32)),
            },
            Message::Auth {
                proof: "cd".repeat(32),
            },
            Message::AuthOk {
                proof: "ef".repeat(32),
                server: None,
            },
            Message::AuthOk {
                proof: "ef".repeat(32),
                server: Some(ServerInfo {
                    software: "hakaru 0.1.0".into(),
                    unix_time: Some(1.5e9),
                    host: Some("b00t".into()),
                    os: Some("linux".into()),
                }),
            },
            Message::Hello {
                protocol: 1,
                software: "hakaru 0.1.0".into(),
                host: None,
                nonce: None,
            },
            Message::TestRequest {
                held_start: true,
                test: Box::new(TestKind::Tcp(TcpSpec {
                    flows: 8,
                    direction: Direction::Bidir,
                    amount: Amount::Bytes(Bytes(12345)),
                    congestion: Some("cubic".into()),
                    ..TcpSpec::default()
                })),
            },
            Message::Accepted {
                test_id: 7,
                token: "00ff".into(),
                probe_flow: None,
            },
            Message::Accepted {
                test_id: 8,
                token: "00ff".into(),
                probe_flow: Some(4),
            },
            Message::DataHello {
                token: "00ff".into(),
                flow: 3,
            },
            Message::Start,
            Message::StartAt {
                at_unix: 1_764_000_000.125,
            },
            Message::ConnectPort {
                port: 40123,
                server_closes: true,
            },
            Message::Interval {
                sample: IntervalSample {
                    index: 2,
                    start: 2.0,
                    end: 3.0,
                    omitted: false,
                    flows: vec![FlowTick {
                        id: 0,
                        bytes: 99,
                        calls: 1,
                        tcp: None,
                        udp: None,
                    }],
                    nic: None,
                    probe: None,
                },
            },
            Message::Stop,
            Message::Error {
                message: "boom".into(),
            },
        ]
    }

    #[test]
    fn messages_round_trip_in_one_stream() {
        let mut wire = MAGIC.to_vec();
        for m in samples() {
            wire.extend(m.encode());
        }
        let mut d = Decoder::new();
        let mut got = Vec::new();
        // Feed one byte at a time: framing must survive any split.
        for b in wire {
            d.feed(&[b]);
            while let Some(m) = d.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, samples());
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn bytes_after_a_message_are_handed_over_whole() {
        let first = samples().remove(0);
        let mut wire = MAGIC.to_vec();
        wire.extend(first.encode());
        wire.extend(b"probe request");
        let mut d = Decoder::new();
        d.feed(&wire);
        assert_eq!(d.next_message().unwrap(), Some(first));
        assert_eq!(d.take_buffered(), b"probe request".to_vec());
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn wrong_magic_is_rejected_early() {
        let mut d = Decoder::new();
        d.feed(b"GE");
        assert!(matches!(d.next_message(), Err(ProtoError::BadMagic(_))));
        let mut d = Decoder::new();
        d.feed(b"HK");
        assert_eq!(d.next_message(), Ok(None));
    }

    #[test]
    fn oversized_frame_is_rejected_before_buffering() {
        let mut d = Decoder::after_magic();
        d.feed(&(100u32 << 20).to_be_bytes());
        let e = d.next_message().unwrap_err();
        assert!(matches!(e, ProtoError::Oversized { len, .. } if len == 100 << 20));
        assert!(e.to_string().contains("exceeds"));
    }

    #[test]
    fn garbage_json_is_malformed() {
        for body in [
            &b"{not json"[..],
            b"{\"type\":\"launch_missiles\"}",
            b"[]",
            b"",
        ] {
            let mut d = Decoder::after_magic();
            d.feed(&(body.len() as u32).to_be_bytes());
            d.feed(body);
            assert!(
                matches!(d.next_message(), Err(ProtoError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn opening_starts_with_magic() {
        let o = opening(&Message::Keepalive);
        assert_eq!(&o[..4], b"HKRU");
        let mut d = Decoder::new();
        d.feed(&o);
        assert_eq!(d.next_message().unwrap(), Some(Message::Keepalive));
    }
}
