//! The blocking control transports every driver reads its peer through: one contract,
//! [`Transport`], and two framings: [`ControlConn`] (the native protocol's frames, decoded into
//! messages) and [`RawConn`] (the bytes as they come, for the iperf3, netperf and ntttcp
//! machines, which keep their own inbox).
//!
//! Every read has a deadline, so a silent or stuck peer turns into an error instead of a
//! hang; writes have a timeout for the same reason.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hakaru_proto::{Decoder, Message, ProtoError};

use crate::raw::is_retry;

/// Why a control read or write failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The peer closed the connection.
    #[error("the peer closed the control connection")]
    Closed,
    /// Nothing complete arrived before the deadline.
    #[error("no control message within {0:.1} s")]
    Timeout(f64),
    /// The peer broke the protocol.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The socket failed.
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
}

pub use hakaru_proto::native::{silence_limit, KEEPALIVE_EVERY};

/// A control connection.
#[derive(Debug)]
pub struct ControlConn {
    stream: TcpStream,
    decoder: Decoder,
    buf: Vec<u8>,
}

impl ControlConn {
    /// Wraps a stream whose first bytes (the magic) are still unread.
    pub fn new(stream: TcpStream) -> Self {
        Self::with_decoder(stream, Decoder::new())
    }

    /// Changes the largest control frame accepted from now on.
    pub fn set_max_frame(&mut self, max: usize) {
        self.decoder.set_max(max);
    }

    /// Wraps a stream with a decoder that may already hold bytes.
    pub fn with_decoder(stream: TcpStream, decoder: Decoder) -> Self {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_nodelay(true);
        ControlConn {
            stream,
            decoder,
            buf: vec![0u8; 64 << 10],
        }
    }

    /// The underlying socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Takes the decoder with whatever it has buffered, leaving an empty one (for handing the
    /// read side to another thread without losing bytes already received).
    pub fn take_decoder(&mut self) -> Decoder {
        std::mem::replace(&mut self.decoder, Decoder::after_magic())
    }

    /// Sends raw bytes (an opening with the magic, for instance).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ControlError> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<(), ControlError> {
        self.send_raw(&msg.encode())
    }

    /// Receives one message, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Message, ControlError> {
        match self.poll(timeout)? {
            Some(m) => Ok(m),
            None => Err(ControlError::Timeout(timeout.as_secs_f64())),
        }
    }

    /// Receives one message if one completes within `timeout`, `Ok(None)` otherwise. A zero
    /// timeout still reads what has already arrived (waiting at most a millisecond).
    pub fn poll(&mut self, timeout: Duration) -> Result<Option<Message>, ControlError> {
        let deadline = Instant::now() + timeout;
        let mut first = true;
        loop {
            if let Some(m) = self.decoder.next_message()? {
                return Ok(Some(m));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && !first {
                return Ok(None);
            }
            first = false;
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
            match self.stream.read(&mut self.buf) {
                Ok(0) => return Err(ControlError::Closed),
                Ok(n) => self.decoder.feed(self.buf.get(..n).unwrap_or_default()),
                Err(e) if is_retry(&e) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ControlError::Closed)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What one bounded read of a control connection gave.
#[derive(Debug, PartialEq)]
pub enum Received<T> {
    /// A whole message (framed), or the bytes that arrived (raw).
    Got(T),
    /// Nothing within the wait.
    Nothing,
    /// The peer closed the connection.
    Closed,
    /// The peer reset the connection, in the system's words (a raw connection tells this
    /// apart; a framed one reads it as closed).
    Reset(String),
    /// The peer broke the framing (framed only).
    Garbage(ProtoError),
    /// The socket failed, in the system's words.
    Failed(String),
}

/// A control connection as a driver uses it, whatever its framing: write bytes, read what
/// comes within a wait.
pub trait Transport {
    /// What one read gives: a message, or bytes.
    type Item;
    /// Writes all of `bytes` (within the connection's write timeout).
    fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Waits at most `wait` (at least a millisecond) for the next item.
    fn read(&mut self, wait: Duration) -> Received<Self::Item>;
    /// The socket (addresses, options).
    fn stream(&self) -> &TcpStream;
}

impl Transport for ControlConn {
    type Item = Message;

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    fn read(&mut self, wait: Duration) -> Received<Message> {
        match self.poll(wait) {
            Ok(Some(m)) => Received::Got(m),
            Ok(None) => Received::Nothing,
            Err(ControlError::Closed) => Received::Closed,
            Err(ControlError::Proto(e)) => Received::Garbage(e),
            Err(ControlError::Io(e)) => Received::Failed(e.to_string()),
            Err(e) => Received::Failed(e.to_string()),
        }
    }

    fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// A control connection that carries raw bytes (iperf3's state bytes and JSON, netperf's
/// messages, ntttcp's sync words): each read hands over what arrived.
#[derive(Debug)]
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    /// Wraps `stream`; a write may take `write_timeout`, a read hands over at most `read_max`
    /// bytes.
    pub fn new(stream: TcpStream, write_timeout: Duration, read_max: usize) -> RawConn {
        let _ = stream.set_write_timeout(Some(write_timeout));
        RawConn {
            stream,
            buf: vec![0u8; read_max.max(1)],
        }
    }
}

impl Transport for RawConn {
    type Item = Vec<u8>;

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    fn read(&mut self, wait: Duration) -> Received<Vec<u8>> {
        let _ = self
            .stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        match self.stream.read(&mut self.buf) {
            Ok(0) => Received::Closed,
            Ok(n) => Received::Got(self.buf.get(..n).unwrap_or_default().to_vec()),
            Err(e) if is_retry(&e) => Received::Nothing,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Received::Reset(e.to_string()),
            Err(e) => Received::Failed(e.to_string()),
        }
    }

    fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    /// A raw connection hands over what came, says nothing within the wait, and tells a close
    /// from a reset (which the netperf and ntttcp machines report in the system's words).
    #[test]
    fn a_raw_connection_tells_bytes_silence_close_and_reset_apart() {
        let (c, s) = pair();
        let mut raw = RawConn::new(s, Duration::from_secs(1), 4);
        let mut c2 = c.try_clone().expect("clone");
        c2.write_all(b"abcdef").expect("write");
        assert_eq!(
            raw.read(Duration::from_secs(1)),
            Received::Got(b"abcd".to_vec())
        );
        assert_eq!(
            raw.read(Duration::from_secs(1)),
            Received::Got(b"ef".to_vec())
        );
        assert_eq!(raw.read(Duration::from_millis(20)), Received::Nothing);
        Transport::send(&mut raw, b"xy").expect("send");
        let mut got = [0u8; 2];
        c2.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"xy");
        drop((c, c2));
        assert_eq!(raw.read(Duration::from_secs(1)), Received::Closed);

        let (c, s) = pair();
        let mut raw = RawConn::new(s, Duration::from_secs(1), 64);
        socket2::SockRef::from(&c)
            .set_linger(Some(Duration::ZERO))
            .expect("linger");
        drop(c);
        let got = raw.read(Duration::from_secs(1));
        // Under Wine (where CI runs this test for Windows) an abortive close arrives as a plain
        // one; Linux gives the reset.
        let reset = matches!(got, Received::Reset(_)) || (cfg!(windows) && got == Received::Closed);
        assert!(reset, "a reset reads as one: {got:?}");
    }

    /// A framed connection decodes whole messages and reads broken framing as garbage.
    #[test]
    fn a_framed_connection_gives_messages_and_garbage() {
        let (mut c, s) = pair();
        let mut conn = ControlConn::with_decoder(s, Decoder::after_magic());
        c.write_all(
            &Message::Error {
                message: "x".into(),
            }
            .encode(),
        )
        .expect("write");
        assert!(matches!(
            conn.read(Duration::from_secs(1)),
            Received::Got(Message::Error { .. })
        ));
        c.write_all(&[0xff; 64]).expect("write");
        assert!(matches!(
            conn.read(Duration::from_secs(1)),
            Received::Garbage(_)
        ));
    }
}
