//! Blocking transport for an iperf3 control connection: state bytes and framed JSON over a
//! socket, every read with a deadline (the codec is `hakaru_proto::iperf3`).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hakaru_proto::iperf3::{encode_json, Inbox, Iperf3Error, Results, State};
use serde_json::Value;

/// Why an iperf3 control read or write failed.
#[derive(Debug, thiserror::Error)]
pub enum Iperf3CtlError {
    /// The peer closed the connection.
    #[error("the peer closed the control connection")]
    Closed,
    /// Nothing complete arrived before the deadline.
    #[error("nothing arrived on the control connection within {0:.1} s")]
    Timeout(f64),
    /// The peer sent something that is not iperf3.
    #[error(transparent)]
    Proto(#[from] Iperf3Error),
    /// The socket failed.
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
}

/// An iperf3 control connection.
#[derive(Debug)]
pub struct Iperf3Ctl {
    stream: TcpStream,
    inbox: Inbox,
}

impl Iperf3Ctl {
    /// Wraps a connected stream; `already` holds bytes read from it before.
    pub fn new(stream: TcpStream, already: &[u8]) -> Iperf3Ctl {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_nodelay(true);
        let mut inbox = Inbox::new();
        inbox.feed(already);
        Iperf3Ctl { stream, inbox }
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), Iperf3CtlError> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Writes one state byte.
    pub fn send_state(&mut self, s: State) -> Result<(), Iperf3CtlError> {
        self.send(&[s.byte()])
    }

    /// Writes one framed JSON document.
    pub fn send_json(&mut self, v: &Value) -> Result<(), Iperf3CtlError> {
        self.send(&encode_json(v))
    }

    /// Reads once, waiting at most `wait`. `Ok(false)` on a timeout.
    fn fill(&mut self, wait: Duration) -> Result<bool, Iperf3CtlError> {
        match self.read_raw(wait)? {
            Some(b) => {
                self.inbox.feed(&b);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Reads what has arrived, waiting at most `wait`; `None` when nothing did. For a driver
    /// whose session machine keeps its own inbox (bytes already in this one stay there).
    pub fn read_raw(&mut self, wait: Duration) -> Result<Option<Vec<u8>>, Iperf3CtlError> {
        let mut buf = [0u8; 16 * 1024];
        self.stream
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        match self.stream.read(&mut buf) {
            Ok(0) => Err(Iperf3CtlError::Closed),
            Ok(n) => Ok(Some(buf.get(..n).unwrap_or_default().to_vec())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(Iperf3CtlError::Closed),
            Err(e) => Err(e.into()),
        }
    }

    /// The next state byte, waiting at most `wait`; `None` when none arrived in time.
    pub fn poll_state(&mut self, wait: Duration) -> Result<Option<State>, Iperf3CtlError> {
        if let Some(s) = self.inbox.take_state() {
            return Ok(Some(s));
        }
        self.fill(wait)?;
        Ok(self.inbox.take_state())
    }

    /// The next state byte; a timeout after `wait` is an error.
    pub fn recv_state(&mut self, wait: Duration) -> Result<State, Iperf3CtlError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(s) = self.inbox.take_state() {
                return Ok(s);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Iperf3CtlError::Timeout(wait.as_secs_f64()));
            }
            self.fill(left)?;
        }
    }

    /// Takes `n` raw bytes (e.g. the errno words after `SERVER_ERROR`).
    pub fn recv_exact(&mut self, n: usize, wait: Duration) -> Result<Vec<u8>, Iperf3CtlError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(b) = self.inbox.take_exact(n) {
                return Ok(b);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Iperf3CtlError::Timeout(wait.as_secs_f64()));
            }
            self.fill(left)?;
        }
    }

    /// The next framed document of at most `max` bytes, as `take` takes it from the inbox; a
    /// larger announced length is an error as soon as the length has arrived.
    fn recv_framed<T>(
        &mut self,
        wait: Duration,
        mut take: impl FnMut(&mut Inbox) -> Result<Option<T>, Iperf3Error>,
    ) -> Result<T, Iperf3CtlError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(v) = take(&mut self.inbox)? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Iperf3CtlError::Timeout(wait.as_secs_f64()));
            }
            self.fill(left)?;
        }
    }

    /// The next framed JSON document of at most `max` bytes.
    pub fn recv_json(
        &mut self,
        what: &'static str,
        max: usize,
        wait: Duration,
    ) -> Result<Value, Iperf3CtlError> {
        self.recv_framed(wait, |inbox| inbox.take_json(what, max))
    }

    /// The next framed results document of at most `max` bytes, read into [`Results`].
    pub fn recv_results(&mut self, max: usize, wait: Duration) -> Result<Results, Iperf3CtlError> {
        self.recv_framed(wait, |inbox| inbox.take_results(max))
    }
}
