//! OB-UDPST (RFC 9946, the UDP Speed Test Protocol), protocol version 20: the fixed-layout
//! PDUs a server reads and writes, and the server's sending-rate table.
//!
//! Every field is big-endian at a fixed offset (the C structs of OB-UDPST 9.0.0's
//! `udpst_protocol.h` with their natural alignment; docs/protocol-notes.md lists them). The
//! 16-bit header checksum is optional: zero means none, and a non-zero one is checked as an
//! Internet checksum over the whole PDU. Authentication (mode 1: digests on the control PDUs)
//! is in [`auth`].
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use thiserror::Error;

/// The protocol version this server speaks (OB-UDPST 9.0.0).
pub const PROTOCOL_VER: u16 = 20;
/// RFC 9946's control port.
pub const DEFAULT_PORT: u16 = 24601;

/// Whether datagrams to `peer` carry IPv6 headers, so the table's sizes are 20 bytes smaller
/// and each counts 48 header bytes instead of 28. An IPv4-mapped address (`::ffff:a.b.c.d`,
/// how a dual-stack socket names an IPv4 peer) travels over IPv4.
pub fn ipv6_on_wire(peer: std::net::SocketAddr) -> bool {
    match peer {
        std::net::SocketAddr::V4(_) => false,
        std::net::SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_none(),
    }
}

/// Setup request/response PDU id, and its size.
pub const SETUP_ID: u16 = 0xACE1;
/// Size of a setup request or response (version 20).
pub const SETUP_LEN: usize = 56;
/// Null request PDU id (sent from the test port to open a NAT/firewall pinhole).
pub const NULL_ID: u16 = 0xDEAD;
/// Size of a null request.
pub const NULL_LEN: usize = 48;
/// Test activation request/response PDU id.
pub const ACT_ID: u16 = 0xACE2;
/// Size of a test activation request or response (version 20).
pub const ACT_LEN: usize = 104;
/// Load PDU id.
pub const LOAD_ID: u16 = 0xBEEF;
/// Size of the load PDU header (the datagram is at least this long).
pub const LOAD_HDR_LEN: usize = 32;
/// Status feedback PDU id.
pub const STATUS_ID: u16 = 0xFEED;
/// Size of a status feedback PDU (version 20).
pub const STATUS_LEN: usize = 204;

/// Setup command: request, response.
pub const CREQ_SETUP: u8 = 1;
/// Setup command: response.
pub const CRSP_SETUP: u8 = 2;
/// Activation command: upstream test (client sends load).
pub const ACT_UPSTREAM: u8 = 1;
/// Activation command: downstream test (server sends load).
pub const ACT_DOWNSTREAM: u8 = 2;
/// The upstream bit of the setup request's max-bandwidth field.
pub const USDIR_BIT: u16 = 0x8000;
/// Setup modifier: jumbo datagram sizes above 1 Gbit/s.
pub const MOD_JUMBO: u8 = 0x01;
/// Setup modifier: traditional (1500-byte) MTU sizes.
pub const MOD_TRADITIONAL: u8 = 0x02;
/// Activation `srIndexConf` value: no fixed rate, the server searches.
pub const SRIDX_AUTO: u16 = u16::MAX;
/// Activation modifier: the configured index is a starting point, not a fixed rate.
pub const SRIDX_ISSTART: u8 = 0x01;
/// A delay field that holds no value.
pub const NODEL: u32 = u32::MAX;

/// Test action in load and status PDUs.
pub const ACTION_TEST: u8 = 0;
/// The server's local first stop phase (never sent).
pub const ACTION_STOP1: u8 = 1;
/// The stop indication exchanged with the client.
pub const ACTION_STOP2: u8 = 2;

/// Setup response codes (RFC 9946 / `CHSR_CRSP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SetupCode {
    /// Accepted.
    Ack = 1,
    /// Protocol version not supported (the response carries ours).
    BadVersion = 2,
    /// Jumbo setting mismatch.
    BadJumbo = 3,
    /// Authentication asked for but not configured.
    AuthNotConfigured = 4,
    /// This server requires authentication and the request has none.
    AuthRequired = 5,
    /// An authentication mode this server does not know.
    AuthInvalid = 6,
    /// The digest does not verify under the key.
    AuthFail = 7,
    /// The request's timestamp is outside the time window.
    AuthTime = 8,
    /// Required bandwidth over what the server allows.
    CapacityExceeded = 10,
    /// Multi-connection parameters invalid.
    BadMultiConn = 12,
    /// The server could not allocate a test connection.
    ConnFail = 13,
}

/// Activation response codes.
pub const ACT_ACK: u8 = 1;
/// Activation rejected: bad parameters.
pub const ACT_BADPARAM: u8 = 2;

/// What is wrong with a datagram.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UdpstError {
    /// Not the size the PDU has.
    #[error("udpst {what}: {got} bytes, expected {expected}")]
    Size {
        /// Which PDU.
        what: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes expected (the minimum for a load PDU).
        expected: usize,
    },
    /// Another PDU id.
    #[error("udpst {what}: PDU id {got:#06x}, expected {expected:#06x}")]
    Id {
        /// Which PDU.
        what: &'static str,
        /// Id read.
        got: u16,
        /// Id expected.
        expected: u16,
    },
    /// A field out of its range.
    #[error("udpst {what}: {field} is {value}, out of range")]
    Field {
        /// Which PDU.
        what: &'static str,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// The header checksum is set and wrong.
    #[error("udpst {what}: header checksum does not match")]
    Checksum {
        /// Which PDU.
        what: &'static str,
    },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .and_then(|s| s.first_chunk::<2>())
        .map_or(0, |c| u16::from_be_bytes(*c))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.first_chunk::<4>())
        .map_or(0, |c| u32::from_be_bytes(*c))
}
fn u8_at(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}
fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
fn put8(b: &mut [u8], at: usize, v: u8) {
    if let Some(s) = b.get_mut(at) {
        *s = v;
    }
}

/// The Internet checksum OB-UDPST computes (`checksum()`): one's complement of the folded sum
/// of the native 32-bit words. A PDU whose checksum field is right sums to zero. The sum is
/// taken little-endian, as on the x86 and ARM hosts the reference runs on.
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut chunks = b.chunks_exact(4);
    for c in &mut chunks {
        if let Some(w) = c.first_chunk::<4>() {
            sum += u64::from(u32::from_le_bytes(*w));
        }
    }
    let rest = chunks.remainder();
    if let Some(w) = rest.first_chunk::<2>() {
        sum += u64::from(u16::from_le_bytes(*w));
    }
    if rest.len() % 2 == 1 {
        sum += u64::from(rest.last().copied().unwrap_or(0));
    }
    while sum >> 32 != 0 {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn check(
    what: &'static str,
    b: &[u8],
    len: usize,
    id: u16,
    csum_at: usize,
) -> Result<(), UdpstError> {
    if b.len() != len {
        return Err(UdpstError::Size {
            what,
            got: b.len(),
            expected: len,
        });
    }
    let got = u16_at(b, 0);
    if got != id {
        return Err(UdpstError::Id {
            what,
            got,
            expected: id,
        });
    }
    if u16_at(b, csum_at) != 0 && checksum(b) != 0 {
        return Err(UdpstError::Checksum { what });
    }
    Ok(())
}

/// A setup request, as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupRequest {
    /// The client's protocol version.
    pub version: u16,
    /// Multi-connection index, count and identifier.
    pub mc_index: u8,
    /// Multi-connection count.
    pub mc_count: u8,
    /// Multi-connection identifier.
    pub mc_ident: u16,
    /// Required bandwidth (Mbit/s), direction bit removed.
    pub max_bandwidth: u16,
    /// The bandwidth is for upstream.
    pub upstream: bool,
    /// Modifier bitmap ([`MOD_JUMBO`], [`MOD_TRADITIONAL`]).
    pub modifiers: u8,
    /// Authentication mode (0 none).
    pub auth_mode: u8,
    /// The PDU as received: the response is this PDU with a few fields changed.
    pub raw: Vec<u8>,
}

impl SetupRequest {
    /// Reads a setup request. The version is not checked here (a wrong one gets an answer).
    pub fn parse(b: &[u8]) -> Result<Self, UdpstError> {
        const W: &str = "setup request";
        check(W, b, SETUP_LEN, SETUP_ID, 54)?;
        let cmd = u8_at(b, 8);
        if cmd != CREQ_SETUP {
            return Err(UdpstError::Field {
                what: W,
                field: "command",
                value: cmd.into(),
            });
        }
        let bw = u16_at(b, 10);
        Ok(SetupRequest {
            version: u16_at(b, 2),
            mc_index: u8_at(b, 4),
            mc_count: u8_at(b, 5),
            mc_ident: u16_at(b, 6),
            max_bandwidth: bw & !USDIR_BIT,
            upstream: bw & USDIR_BIT != 0,
            modifiers: u8_at(b, 14),
            auth_mode: u8_at(b, 15),
            raw: b.to_vec(),
        })
    }

    /// The setup response: the request with the command, the response code and the test port
    /// set (and our version when the client's is refused), checksum cleared.
    pub fn response(&self, code: SetupCode, test_port: u16) -> Vec<u8> {
        let mut r = self.raw.clone();
        put8(&mut r, 8, CRSP_SETUP);
        put8(&mut r, 9, code as u8);
        put16(&mut r, 12, test_port);
        if code == SetupCode::BadVersion {
            put16(&mut r, 2, PROTOCOL_VER);
        }
        put16(&mut r, 54, 0);
        r
    }
}

#[path = "udpst_setup.rs"]
mod setup;
pub use setup::{SetupParams, SetupResponse};

/// The null request the server sends from a new test port (version 20).
pub fn null_request(version: u16) -> [u8; NULL_LEN] {
    let mut b = [0u8; NULL_LEN];
    put16(&mut b, 0, NULL_ID);
    put16(&mut b, 2, version);
    put8(&mut b, 4, 1);
    b
}

#[path = "udpst_auth.rs"]
pub mod auth;

#[path = "udpst_rates.rs"]
mod rates;
pub use rates::{sending_rates, SendingRate, L3DG_OVERHEAD, MAX_SENDING_RATES, RAND_BIT};

/// A test activation request, as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// [`ACT_UPSTREAM`] or [`ACT_DOWNSTREAM`].
    pub command: u8,
    /// Low delay-variation threshold (ms).
    pub low_thresh: u16,
    /// Upper delay-variation threshold (ms).
    pub upper_thresh: u16,
    /// Status feedback / trial interval (ms).
    pub trial_int: u16,
    /// Test duration (s).
    pub test_int_time: u16,
    /// Sending rate index, [`SRIDX_AUTO`] for the search.
    pub sr_index_conf: u16,
    /// Use one-way delay variation instead of RTT variation.
    pub use_ow_del_var: u8,
    /// Rows to jump while below the high-speed threshold.
    pub high_speed_delta: u8,
    /// Congestion count before the big step back.
    pub slow_adj_thresh: u16,
    /// Sequence errors per trial that count as congestion.
    pub seq_err_thresh: u16,
    /// Ignore out-of-order and duplicates.
    pub ignore_ooo_dup: u8,
    /// Modifier bitmap ([`SRIDX_ISSTART`], random payload 0x02).
    pub modifiers: u8,
    /// 0 algorithm B, 1 algorithm C.
    pub rate_adj_algo: u8,
    /// Sub-interval period (ms).
    pub sub_int_period: u16,
    /// Rate adjustment suppression count (sub-intervals).
    pub sr_adj_supp: u16,
    /// Authentication mode.
    pub auth_mode: u8,
    /// Response code (0 in a request, [`ACT_ACK`] accepted).
    pub code: u8,
    /// The first sending rate an upstream response carries.
    pub start_rate: SendingRate,
    /// The PDU as received (the response echoes it with the accepted values).
    pub raw: Vec<u8>,
}

impl Activation {
    /// Reads a test activation request.
    pub fn parse(b: &[u8]) -> Result<Self, UdpstError> {
        const W: &str = "test activation request";
        check(W, b, ACT_LEN, ACT_ID, 102)?;
        let cmd = u8_at(b, 4);
        if cmd != ACT_UPSTREAM && cmd != ACT_DOWNSTREAM {
            return Err(UdpstError::Field {
                what: W,
                field: "command",
                value: cmd.into(),
            });
        }
        Ok(Activation {
            command: cmd,
            low_thresh: u16_at(b, 6),
            upper_thresh: u16_at(b, 8),
            trial_int: u16_at(b, 10),
            test_int_time: u16_at(b, 12),
            sr_index_conf: u16_at(b, 16),
            use_ow_del_var: u8_at(b, 18),
            high_speed_delta: u8_at(b, 19),
            slow_adj_thresh: u16_at(b, 20),
            seq_err_thresh: u16_at(b, 22),
            ignore_ooo_dup: u8_at(b, 24),
            modifiers: u8_at(b, 25),
            rate_adj_algo: u8_at(b, 26),
            sub_int_period: u16_at(b, 56),
            sr_adj_supp: u16_at(b, 60),
            auth_mode: u8_at(b, 63),
            code: u8_at(b, 5),
            start_rate: SendingRate::read(b, 28),
            raw: b.to_vec(),
        })
    }

    /// A client's request with these parameters (`raw` is not read).
    pub fn encode(&self) -> [u8; ACT_LEN] {
        let mut r = [0u8; ACT_LEN];
        put16(&mut r, 0, ACT_ID);
        put16(&mut r, 2, PROTOCOL_VER);
        put8(&mut r, 4, self.command);
        put16(&mut r, 6, self.low_thresh);
        put16(&mut r, 8, self.upper_thresh);
        put16(&mut r, 10, self.trial_int);
        put16(&mut r, 12, self.test_int_time);
        put16(&mut r, 16, self.sr_index_conf);
        put8(&mut r, 18, self.use_ow_del_var);
        put8(&mut r, 19, self.high_speed_delta);
        put16(&mut r, 20, self.slow_adj_thresh);
        put16(&mut r, 22, self.seq_err_thresh);
        put8(&mut r, 24, self.ignore_ooo_dup);
        put8(&mut r, 25, self.modifiers);
        put8(&mut r, 26, self.rate_adj_algo);
        put16(&mut r, 56, self.sub_int_period);
        put16(&mut r, 60, self.sr_adj_supp);
        put8(&mut r, 63, self.auth_mode);
        r
    }

    /// The response: the request with the accepted parameters written back, the response
    /// code, and (upstream) the first sending rate.
    pub fn response(&self, code: u8, start: Option<SendingRate>) -> Vec<u8> {
        let mut r = self.raw.clone();
        put8(&mut r, 5, code);
        put16(&mut r, 6, self.low_thresh);
        put16(&mut r, 8, self.upper_thresh);
        put16(&mut r, 10, self.trial_int);
        put16(&mut r, 12, self.test_int_time);
        put8(&mut r, 15, 0); // DSCP/ECN: this server marks nothing
        put16(&mut r, 16, self.sr_index_conf);
        put8(&mut r, 18, self.use_ow_del_var);
        put8(&mut r, 19, self.high_speed_delta);
        put16(&mut r, 20, self.slow_adj_thresh);
        put16(&mut r, 22, self.seq_err_thresh);
        put8(&mut r, 24, self.ignore_ooo_dup);
        put8(&mut r, 25, self.modifiers & SRIDX_ISSTART);
        put8(&mut r, 26, self.rate_adj_algo);
        put8(&mut r, 27, 0); // ECN CE threshold: not supported
        start.unwrap_or_default().write(&mut r, 28);
        put16(&mut r, 56, self.sub_int_period);
        put16(&mut r, 60, self.sr_adj_supp);
        put16(&mut r, 102, 0);
        r
    }
}

/// A load PDU header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadHdr {
    /// Test action ([`ACTION_TEST`], [`ACTION_STOP2`]).
    pub test_action: u8,
    /// The sender sees no traffic from its peer.
    pub rx_stopped: bool,
    /// Sequence number (from 1).
    pub seq: u32,
    /// The datagram's UDP payload size, as the sender says.
    pub udp_payload: u16,
    /// Status PDUs the sender found missing.
    pub spdu_seq_err: u16,
    /// Send time of the last status PDU the sender received (echoed for RTT).
    pub spdu_time: (u32, u32),
    /// Send time of this PDU.
    pub lpdu_time: (u32, u32),
    /// Milliseconds between receiving that status PDU and sending this.
    pub rtt_resp_delay: u16,
}

impl LoadHdr {
    /// Reads the header of a load datagram (at least [`LOAD_HDR_LEN`] bytes).
    pub fn parse(b: &[u8]) -> Result<Self, UdpstError> {
        const W: &str = "load PDU";
        let h = b.get(..LOAD_HDR_LEN).ok_or(UdpstError::Size {
            what: W,
            got: b.len(),
            expected: LOAD_HDR_LEN,
        })?;
        check(W, h, LOAD_HDR_LEN, LOAD_ID, 30)?;
        let action = u8_at(h, 2);
        if action > ACTION_STOP2 {
            return Err(UdpstError::Field {
                what: W,
                field: "test action",
                value: action.into(),
            });
        }
        let rx = u8_at(h, 3);
        if rx > 1 {
            return Err(UdpstError::Field {
                what: W,
                field: "rx stopped",
                value: rx.into(),
            });
        }
        Ok(LoadHdr {
            test_action: action,
            rx_stopped: rx == 1,
            seq: u32_at(h, 4),
            udp_payload: u16_at(h, 8),
            spdu_seq_err: u16_at(h, 10),
            spdu_time: (u32_at(h, 12), u32_at(h, 16)),
            lpdu_time: (u32_at(h, 20), u32_at(h, 24)),
            rtt_resp_delay: u16_at(h, 28),
        })
    }

    /// The header's bytes (checksum 0).
    pub fn to_bytes(&self) -> [u8; LOAD_HDR_LEN] {
        let mut b = [0u8; LOAD_HDR_LEN];
        put16(&mut b, 0, LOAD_ID);
        put8(&mut b, 2, self.test_action);
        put8(&mut b, 3, u8::from(self.rx_stopped));
        put32(&mut b, 4, self.seq);
        put16(&mut b, 8, self.udp_payload);
        put16(&mut b, 10, self.spdu_seq_err);
        put32(&mut b, 12, self.spdu_time.0);
        put32(&mut b, 16, self.spdu_time.1);
        put32(&mut b, 20, self.lpdu_time.0);
        put32(&mut b, 24, self.lpdu_time.1);
        put16(&mut b, 28, self.rtt_resp_delay);
        b
    }

    /// Writes the header into the first [`LOAD_HDR_LEN`] bytes of `b` (checksum 0; nothing
    /// when `b` is shorter).
    pub fn write(&self, b: &mut [u8]) {
        if let Some(h) = b.get_mut(..LOAD_HDR_LEN) {
            h.copy_from_slice(&self.to_bytes());
        }
    }

    /// Writes a burst's shared header bytes (`template`, from [`LoadHdr::to_bytes`]) into
    /// `b` with one datagram's sequence number and size: the fields that differ within a
    /// burst, so a sender builds the rest once per burst.
    pub fn stamp(template: &[u8; LOAD_HDR_LEN], seq: u32, udp_payload: u16, b: &mut [u8]) {
        if let Some(h) = b.get_mut(..LOAD_HDR_LEN) {
            h.copy_from_slice(template);
            put32(h, 4, seq);
            put16(h, 8, udp_payload);
        }
    }
}

/// Sub-interval statistics as a receiver reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubIntStats {
    /// Datagrams received.
    pub rx_datagrams: u32,
    /// Payload bytes received.
    pub rx_bytes: u64,
    /// Measured sub-interval length (µs).
    pub delta_time: u32,
    /// Lost datagrams.
    pub loss: u32,
    /// Out-of-order datagrams.
    pub ooo: u32,
    /// Duplicate datagrams.
    pub dup: u32,
    /// Delay variation minimum (ms).
    pub delay_var_min: u32,
    /// Delay variation maximum (ms).
    pub delay_var_max: u32,
    /// Delay variation sum (ms).
    pub delay_var_sum: u32,
    /// Delay variation samples.
    pub delay_var_cnt: u32,
    /// RTT variation minimum (ms).
    pub rtt_var_min: u32,
    /// RTT variation maximum (ms).
    pub rtt_var_max: u32,
    /// Time since the test started (ms).
    pub accum_time: u32,
}

impl SubIntStats {
    fn read(b: &[u8], at: usize) -> Self {
        let hi = u64::from(u32_at(b, at + 4));
        let lo = u64::from(u32_at(b, at + 8));
        SubIntStats {
            rx_datagrams: u32_at(b, at),
            rx_bytes: (hi << 32) | lo,
            delta_time: u32_at(b, at + 12),
            loss: u32_at(b, at + 16),
            ooo: u32_at(b, at + 20),
            dup: u32_at(b, at + 24),
            delay_var_min: u32_at(b, at + 28),
            delay_var_max: u32_at(b, at + 32),
            delay_var_sum: u32_at(b, at + 36),
            delay_var_cnt: u32_at(b, at + 40),
            rtt_var_min: u32_at(b, at + 44),
            rtt_var_max: u32_at(b, at + 48),
            accum_time: u32_at(b, at + 52),
        }
    }
    fn write(&self, b: &mut [u8], at: usize) {
        put32(b, at, self.rx_datagrams);
        put32(b, at + 4, (self.rx_bytes >> 32) as u32);
        put32(b, at + 8, self.rx_bytes as u32);
        let rest = [
            self.delta_time,
            self.loss,
            self.ooo,
            self.dup,
            self.delay_var_min,
            self.delay_var_max,
            self.delay_var_sum,
            self.delay_var_cnt,
            self.rtt_var_min,
            self.rtt_var_max,
            self.accum_time,
        ];
        for (i, v) in rest.iter().enumerate() {
            put32(b, at + 12 + 4 * i, *v);
        }
    }
}

/// A status feedback PDU (version 20).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// Test action.
    pub test_action: u8,
    /// The sender sees no load from its peer.
    pub rx_stopped: bool,
    /// Sequence number (from 1).
    pub seq: u32,
    /// The sending rate the server tells an upstream client to use.
    pub rate: SendingRate,
    /// Sequence number of the saved sub-interval.
    pub sub_int_seq: u32,
    /// The last completed sub-interval.
    pub sis: SubIntStats,
    /// Loss in this trial interval.
    pub loss: u32,
    /// Out-of-order in this trial interval.
    pub ooo: u32,
    /// Duplicates in this trial interval.
    pub dup: u32,
    /// Smallest one-way clock delta seen (ms).
    pub clock_delta_min: u32,
    /// Trial delay variation minimum (ms).
    pub delay_var_min: u32,
    /// Trial delay variation maximum (ms).
    pub delay_var_max: u32,
    /// Trial delay variation sum (ms).
    pub delay_var_sum: u32,
    /// Trial delay variation samples.
    pub delay_var_cnt: u32,
    /// Minimum RTT (ms).
    pub rtt_min: u32,
    /// Last RTT variation sample (ms).
    pub rtt_var_sample: u32,
    /// A minimum was updated.
    pub delay_min_upd: bool,
    /// Trial interval length (µs).
    pub ti_delta_time: u32,
    /// Datagrams in this trial interval.
    pub ti_rx_datagrams: u32,
    /// Bytes in this trial interval.
    pub ti_rx_bytes: u32,
    /// Send time of this PDU.
    pub spdu_time: (u32, u32),
    /// Authentication mode (echoed).
    pub auth_mode: u8,
}

impl Status {
    /// Reads a status PDU.
    pub fn parse(b: &[u8]) -> Result<Self, UdpstError> {
        const W: &str = "status PDU";
        check(W, b, STATUS_LEN, STATUS_ID, 202)?;
        let action = u8_at(b, 2);
        if action > ACTION_STOP2 {
            return Err(UdpstError::Field {
                what: W,
                field: "test action",
                value: action.into(),
            });
        }
        let rx = u8_at(b, 3);
        if rx > 1 {
            return Err(UdpstError::Field {
                what: W,
                field: "rx stopped",
                value: rx.into(),
            });
        }
        Ok(Status {
            test_action: action,
            rx_stopped: rx == 1,
            seq: u32_at(b, 4),
            rate: SendingRate::read(b, 8),
            sub_int_seq: u32_at(b, 36),
            sis: SubIntStats::read(b, 40),
            loss: u32_at(b, 96),
            ooo: u32_at(b, 100),
            dup: u32_at(b, 104),
            clock_delta_min: u32_at(b, 108),
            delay_var_min: u32_at(b, 112),
            delay_var_max: u32_at(b, 116),
            delay_var_sum: u32_at(b, 120),
            delay_var_cnt: u32_at(b, 124),
            rtt_min: u32_at(b, 128),
            rtt_var_sample: u32_at(b, 132),
            delay_min_upd: u8_at(b, 136) != 0,
            ti_delta_time: u32_at(b, 140),
            ti_rx_datagrams: u32_at(b, 144),
            ti_rx_bytes: u32_at(b, 148),
            spdu_time: (u32_at(b, 152), u32_at(b, 156)),
            auth_mode: u8_at(b, 163),
        })
    }

    /// Writes the PDU (checksum 0, no ECN counts).
    pub fn encode(&self) -> [u8; STATUS_LEN] {
        let mut b = [0u8; STATUS_LEN];
        put16(&mut b, 0, STATUS_ID);
        put8(&mut b, 2, self.test_action);
        put8(&mut b, 3, u8::from(self.rx_stopped));
        put32(&mut b, 4, self.seq);
        self.rate.write(&mut b, 8);
        put32(&mut b, 36, self.sub_int_seq);
        self.sis.write(&mut b, 40);
        let f = [
            self.loss,
            self.ooo,
            self.dup,
            self.clock_delta_min,
            self.delay_var_min,
            self.delay_var_max,
            self.delay_var_sum,
            self.delay_var_cnt,
            self.rtt_min,
            self.rtt_var_sample,
        ];
        for (i, v) in f.iter().enumerate() {
            put32(&mut b, 96 + 4 * i, *v);
        }
        put8(&mut b, 136, u8::from(self.delay_min_upd));
        put32(&mut b, 140, self.ti_delta_time);
        put32(&mut b, 144, self.ti_rx_datagrams);
        put32(&mut b, 148, self.ti_rx_bytes);
        put32(&mut b, 152, self.spdu_time.0);
        put32(&mut b, 156, self.spdu_time.1);
        put8(&mut b, 163, self.auth_mode);
        b
    }
}

#[cfg(test)]
#[path = "udpst_tests.rs"]
mod tests;
