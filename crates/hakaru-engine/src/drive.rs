//! The one blocking driver of every session machine (after quinn's one driver over
//! quinn-proto's one machine): client and server, native, iperf3, netperf and ntttcp.
//!
//! A turn: carry out the machine's outputs in order; stop once the machine is done; else wait
//! for the next event no longer than the machine's next deadline (the carrier's own events
//! first: a stop, the data plane's end, an arriving data path; then the control connection,
//! through [`Transport`]); act on the deadline if it has come; carry out what that gave.
//!
//! What differs between the sessions is the [`Carrier`]: how an output is carried out, what a
//! read of the control connection means to the machine, which other events there are.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use hakaru_session::Machine;

use crate::control::{Received, Transport};

/// What the driver waits on after the carrier's own events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The carrier handed the machine an event: no read this turn.
    Handled,
    /// Read the control connection for at most this long.
    Read(Duration),
}

/// The I/O half of one session: everything the machine says is done here.
pub trait Carrier<M: Machine> {
    /// The control connection.
    type Conn: Transport;
    /// What the drive gives when it ends.
    type End;

    /// The control connection, for the driver's reads.
    fn conn(&mut self) -> &mut Self::Conn;

    /// Carries out one output (an answer goes back with `m.handle`); `Break` ends the drive.
    fn act(&mut self, m: &mut M, out: M::Output) -> ControlFlow<Self::End>;

    /// What one read of the control connection tells the machine (`None`: nothing).
    fn input(&mut self, got: Received<<Self::Conn as Transport>::Item>) -> Option<M::Input>;

    /// The longest wait of a turn when the machine has no nearer deadline.
    fn tick(&self) -> Duration;

    /// Hands the machine an event besides the control connection, if one is waiting, or says
    /// how long to read the control connection (`left`: until the deadline or the tick).
    fn event(&mut self, _m: &mut M, left: Duration) -> Wait {
        Wait::Read(left)
    }

    /// The drive's end when the machine is done without an output that ended it.
    fn finished(&mut self, m: &mut M) -> Self::End;
}

/// The driver's own state between turns.
#[derive(Debug, Default)]
pub struct Drive {
    /// The control connection is closed or failed: a turn waits without reading it.
    gone: bool,
}

impl Drive {
    /// A driver of a session whose control connection is open.
    pub fn new() -> Drive {
        Drive::default()
    }

    /// Runs the session to its end.
    pub fn run<M: Machine, C: Carrier<M>>(&mut self, m: &mut M, c: &mut C) -> C::End {
        loop {
            if let ControlFlow::Break(end) = self.turn(m, c) {
                return end;
            }
        }
    }

    /// One turn (see the module's text); `Break` once the session is over. For a carrier that
    /// drives several sessions from one thread.
    pub fn turn<M: Machine, C: Carrier<M>>(&mut self, m: &mut M, c: &mut C) -> ControlFlow<C::End> {
        carry_out(m, c)?;
        let now = Instant::now();
        let left = m
            .timeout()
            .map_or(c.tick(), |t| t.saturating_duration_since(now))
            .min(c.tick());
        if let Wait::Read(wait) = c.event(m, left) {
            self.read(m, c, wait);
        }
        let now = Instant::now();
        if m.timeout().is_some_and(|t| now >= t) {
            m.handle_timeout(now);
        }
        carry_out(m, c)
    }

    fn read<M: Machine, C: Carrier<M>>(&mut self, m: &mut M, c: &mut C, wait: Duration) {
        if self.gone {
            return std::thread::sleep(wait);
        }
        let got = c.conn().read(wait);
        self.gone = !matches!(got, Received::Got(_) | Received::Nothing);
        if let Some(input) = c.input(got) {
            m.handle(input, Instant::now());
        }
    }
}

/// Runs the session `m` to its end with `c` doing its I/O.
pub fn drive<M: Machine, C: Carrier<M>>(m: &mut M, c: &mut C) -> C::End {
    Drive::new().run(m, c)
}

/// How a machine that reads raw bytes hears of a reset connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReset {
    /// As the peer closing (iperf3's machines).
    Close,
    /// As a failed read, in the system's words (netperf's and ntttcp's).
    Fail,
}

/// One read of a raw control connection as a machine's input: its bytes, the peer closing, or
/// a failed read in the system's words (`None` for silence). For the iperf3, netperf and ntttcp
/// carriers' [`Carrier::input`].
pub fn raw_input<I>(
    got: Received<Vec<u8>>,
    reset: OnReset,
    bytes: impl FnOnce(Vec<u8>) -> I,
    closed: impl FnOnce() -> I,
    failed: impl FnOnce(String) -> I,
) -> Option<I> {
    Some(match got {
        Received::Got(b) => bytes(b),
        Received::Nothing => return None,
        Received::Closed => closed(),
        Received::Reset(_) if reset == OnReset::Close => closed(),
        Received::Reset(e) | Received::Failed(e) => failed(e),
        Received::Garbage(e) => failed(e.to_string()),
    })
}

/// Carries out the machine's outputs, in order; `Break` once the session is over.
pub fn carry_out<M: Machine, C: Carrier<M>>(m: &mut M, c: &mut C) -> ControlFlow<C::End> {
    while let Some(out) = m.poll_output() {
        c.act(m, out)?;
    }
    if m.is_done() {
        return ControlFlow::Break(c.finished(m));
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::control::RawConn;

    /// A machine that answers each byte with the byte + 1, gives up at its deadline, and ends
    /// when the peer closes.
    struct Echo {
        out: Vec<Out>,
        deadline: Option<Instant>,
        done: bool,
    }

    #[derive(Debug, PartialEq)]
    enum Out {
        Send(Vec<u8>),
        End(&'static str),
    }

    impl Machine for Echo {
        type Input = Option<Vec<u8>>;
        type Output = Out;
        fn handle(&mut self, input: Option<Vec<u8>>, _now: Instant) {
            if self.done {
                return;
            }
            match input {
                Some(b) => self
                    .out
                    .push(Out::Send(b.iter().map(|x| x.wrapping_add(1)).collect())),
                None => {
                    self.done = true;
                    self.out.push(Out::End("closed"));
                }
            }
        }
        fn handle_timeout(&mut self, now: Instant) {
            if !self.done && self.deadline.is_some_and(|d| now >= d) {
                self.done = true;
                self.out.push(Out::End("deadline"));
            }
        }
        fn timeout(&self) -> Option<Instant> {
            self.deadline.filter(|_| !self.done)
        }
        fn poll_output(&mut self) -> Option<Out> {
            (!self.out.is_empty()).then(|| self.out.remove(0))
        }
        fn is_done(&self) -> bool {
            self.done && self.out.is_empty()
        }
    }

    struct Io {
        conn: RawConn,
        events: usize,
    }

    impl Carrier<Echo> for Io {
        type Conn = RawConn;
        type End = &'static str;
        fn conn(&mut self) -> &mut RawConn {
            &mut self.conn
        }
        fn act(&mut self, _m: &mut Echo, out: Out) -> ControlFlow<&'static str> {
            match out {
                Out::Send(b) => {
                    let _ = self.conn.send(&b);
                    ControlFlow::Continue(())
                }
                Out::End(how) => ControlFlow::Break(how),
            }
        }
        fn input(&mut self, got: Received<Vec<u8>>) -> Option<Option<Vec<u8>>> {
            match got {
                Received::Got(b) => Some(Some(b)),
                Received::Nothing => None,
                _ => Some(None),
            }
        }
        fn tick(&self) -> Duration {
            Duration::from_millis(20)
        }
        fn event(&mut self, _m: &mut Echo, left: Duration) -> Wait {
            self.events += 1;
            Wait::Read(left)
        }
        fn finished(&mut self, _m: &mut Echo) -> &'static str {
            "done"
        }
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    fn session(s: TcpStream, deadline: Option<Instant>) -> (Echo, Io) {
        let m = Echo {
            out: Vec::new(),
            deadline,
            done: false,
        };
        let io = Io {
            conn: RawConn::new(s, Duration::from_secs(1), 64),
            events: 0,
        };
        (m, io)
    }

    /// What arrives goes to the machine, what it says goes out, and the peer's close ends the
    /// drive with the machine's own end.
    #[test]
    fn the_driver_carries_reads_in_and_sends_out_to_the_end() {
        let (mut c, s) = pair();
        let (mut m, mut io) = session(s, None);
        let t = std::thread::spawn(move || {
            c.write_all(b"abc").expect("write");
            let mut got = [0u8; 3];
            c.read_exact(&mut got).expect("read");
            got
        });
        let end = drive(&mut m, &mut io);
        assert_eq!(&t.join().expect("peer"), b"bcd");
        assert_eq!(end, "closed");
        assert!(
            io.events > 0,
            "the carrier's events are asked for each turn"
        );
    }

    /// A silent peer: the machine's deadline ends the drive, and not much after it.
    #[test]
    fn the_machines_deadline_is_kept_while_the_peer_says_nothing() {
        let (_c, s) = pair();
        let (mut m, mut io) = session(s, Some(Instant::now() + Duration::from_millis(50)));
        assert_eq!(drive(&mut m, &mut io), "deadline");
    }

    /// A reset reads as a close or as a failure, as the machine takes it; broken framing and a
    /// failed socket as a failure in the system's words; silence as nothing.
    #[test]
    fn raw_reads_become_the_machines_inputs() {
        #[derive(Debug, PartialEq)]
        enum In {
            Bytes(Vec<u8>),
            Closed,
            Failed(String),
        }
        let map = |got, reset| raw_input(got, reset, In::Bytes, || In::Closed, In::Failed);
        assert_eq!(
            map(Received::Got(b"x".to_vec()), OnReset::Fail),
            Some(In::Bytes(b"x".to_vec()))
        );
        assert_eq!(map(Received::Nothing, OnReset::Fail), None);
        assert_eq!(map(Received::Closed, OnReset::Fail), Some(In::Closed));
        let reset = || Received::Reset("Connection reset by peer".into());
        assert_eq!(map(reset(), OnReset::Close), Some(In::Closed));
        assert_eq!(
            map(reset(), OnReset::Fail),
            Some(In::Failed("Connection reset by peer".into()))
        );
        assert_eq!(
            map(Received::Failed("Broken pipe".into()), OnReset::Close),
            Some(In::Failed("Broken pipe".into()))
        );
    }
}
