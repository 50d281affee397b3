//! Blocking transport for control messages: a socket, a [`Decoder`] and deadlines.
//!
//! Every read has a deadline, so a silent or stuck peer turns into an error instead of a
//! hang; writes have a timeout for the same reason.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hakaru_proto::{Decoder, Message, ProtoError};

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
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ControlError::Closed)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What one bounded read of a control socket that carries raw bytes (ntttcp's sync words,
/// netperf's messages) gave.
#[derive(Debug, PartialEq)]
pub enum RawRead {
    /// Bytes that arrived.
    Bytes(Vec<u8>),
    /// The peer closed the connection.
    Closed,
    /// Nothing within the wait.
    Nothing,
    /// The socket failed, in the system's words.
    Failed(String),
}

/// Reads what arrives on `s` within `wait`, at most `buf`'s length.
pub fn read_raw(s: &mut TcpStream, wait: Duration, buf: &mut [u8]) -> RawRead {
    let _ = s.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
    match s.read(buf) {
        Ok(0) => RawRead::Closed,
        Ok(n) => RawRead::Bytes(buf.get(..n).unwrap_or_default().to_vec()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) =>
        {
            RawRead::Nothing
        }
        Err(e) => RawRead::Failed(e.to_string()),
    }
}
