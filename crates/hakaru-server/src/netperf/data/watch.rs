//! TCP_RR and the UDP tests received on their own thread (UDP_STREAM alone, UDP_RR) without a
//! kernel timer per wait, where another thread can end a blocked receive
//! ([`hakaru_engine::sys::SHUTDOWN_WAKES_BLOCKED_RECV`]: Linux). The watchdog and TCP_RR's
//! wait are here; the UDP tests' wait under the watchdog is `udp_untimed` in `udp.rs`.
//!
//! The other loops of the data phase wait at most a [`TICK`] in a receive with SO_RCVTIMEO, so
//! they see the stop flag, the server's timer and `--stall-timeout` themselves. A receive with
//! a timeout arms a kernel timer each time it sleeps, and a TCP_RR server sleeps once per
//! transaction: 55,000 timers in 3 s with netperf and the server on one CPU, where netserver's
//! receive has no timeout (docs/performance-notes.md, section 6); a UDP_STREAM receiver that
//! keeps up sleeps about once per datagram (section 18). Here the test's receive has
//! none either, and a watchdog thread of the test's own does the looking: every tick, or at
//! once when the loop ends, it reads the bytes the loop has shown it and asks the same question
//! the loop would ([`over`]); when the test must end it shuts the socket's receive side,
//! which ends the blocked receive, and says why (the timer or a stall). The loop pays
//! two relaxed stores per TCP_RR transaction, one per UDP datagram.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use super::{over, rr_on, Counts, Job, Limits, Pacer, TICK};

/// The watchdog's thread name (within the kernel's 15 bytes; the tests look for it).
pub(super) const WATCH: &str = "hakaru-np-watch";

/// Runs TCP_RR transactions on `s` (as [`rr_on`]) with no receive timeout, a watchdog thread
/// ending the wait at a stop, at the server's timer or at a stall. Where the watchdog cannot be
/// had (no second handle on the socket, no thread), the loop keeps its timeout.
pub(super) fn rr_untimed(
    s: &mut TcpStream,
    job: &Job,
    lim: &Limits,
    sizes: (usize, usize),
    pacer: &mut Option<Pacer>,
    c: &mut Counts,
) -> io::Result<()> {
    let Ok(cut) = s.try_clone() else {
        return rr_on(s, job, lim, sizes, pacer, c, false);
    };
    let shown = Arc::new(AtomicU64::new(0));
    let (end, ended) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let seen = &shown;
        let end_wait = move || {
            let _ = cut.shutdown(Shutdown::Read);
        };
        let dog = std::thread::Builder::new()
            .name(WATCH.into())
            .spawn_scoped(scope, move || watch(end_wait, job, lim, seen, &ended));
        let Ok(dog) = dog else {
            return rr_on(s, job, lim, sizes, pacer, c, false);
        };
        c.shown = Some(Arc::clone(&shown));
        let r = s
            .set_read_timeout(None)
            .and_then(|()| rr_on(s, job, lim, sizes, pacer, c, false));
        c.shown = None;
        // The loop is over: the watchdog returns at once.
        drop(end);
        if let Ok(why) = dog.join() {
            c.timed_out |= why.timed_out;
            c.stalled |= why.stalled;
        }
        r
    })
}

/// Why the watchdog ended the test (neither: the loop ended first).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Why {
    pub timed_out: bool,
    pub stalled: bool,
}

/// Looks every tick until the loop ends (`ended` disconnects) or the test must end, which it
/// makes happen through `end_wait` (shutting the socket's receive side).
pub(super) fn watch(
    end_wait: impl FnOnce(),
    job: &Job,
    lim: &Limits,
    shown: &AtomicU64,
    ended: &mpsc::Receiver<()>,
) -> Why {
    let mut m = Counts {
        quiet_since: Some(Instant::now()),
        ..Counts::default()
    };
    // Bounded by the loop's end, the stop flag, the timer or a stall (checked every tick).
    loop {
        if !matches!(
            ended.recv_timeout(TICK),
            Err(mpsc::RecvTimeoutError::Timeout)
        ) {
            return Why::default();
        }
        m.bytes_received = shown.load(Ordering::Relaxed);
        if over(job, lim, &mut m) {
            end_wait();
            return Why {
                timed_out: m.timed_out,
                stalled: m.stalled,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    fn job(stall: Option<Duration>) -> Job {
        let mut req = super::super::tests::req(
            hakaru_proto::netperf::direction::XMIT | hakaru_proto::netperf::direction::RECV,
            hakaru_proto::netperf::PROTO_TCP,
            30,
        );
        req.request_size = 1;
        req.response_size = 1;
        super::super::tests::job(req, stall)
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// The loop answers with no receive timeout, and a client gone quiet is ended by the
    /// watchdog at the stall timeout, marked as a stall, its transactions counted.
    #[test]
    fn a_quiet_client_is_cut_at_the_stall_timeout() {
        let (mut a, mut b) = pair();
        let j = job(Some(Duration::from_millis(400)));
        let lim = super::super::limits(&j.req, Instant::now(), None);
        let t0 = Instant::now();
        let client = std::thread::spawn(move || {
            let mut one = [0u8; 1];
            for _ in 0..5 {
                a.write_all(b"q").unwrap();
                a.read_exact(&mut one).unwrap();
            }
            // Then silence, the connection open, until the server ends it.
            let n = a.read(&mut one).unwrap_or(0);
            (n, a)
        });
        let mut c = Counts::default();
        rr_untimed(&mut b, &j, &lim, (1, 1), &mut None, &mut c).unwrap();
        assert!(c.stalled && !c.timed_out, "{c:?}");
        assert_eq!(c.trans, 5);
        assert!(c.shown.is_none());
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        // No receive timeout was left on the socket while it ran: the loop cleared it.
        assert_eq!(b.read_timeout().unwrap(), None);
        drop(b);
        assert_eq!(client.join().unwrap().0, 0);
    }

    /// A stop ends a receive blocked with no timeout, not marked as a stall or the timer.
    #[test]
    fn a_stop_ends_the_blocked_receive() {
        let (_a, mut b) = pair();
        let j = job(None);
        let lim = super::super::limits(&j.req, Instant::now(), None);
        let stop = Arc::clone(&j.stop);
        let t0 = Instant::now();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Release);
        });
        let mut c = Counts::default();
        rr_untimed(&mut b, &j, &lim, (1, 1), &mut None, &mut c).unwrap();
        stopper.join().unwrap();
        assert!(!c.stalled && !c.timed_out, "{c:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    /// A client that closes ends the test at once, the watchdog with it.
    #[test]
    fn the_clients_close_ends_the_loop_and_the_watchdog_at_once() {
        let (mut a, mut b) = pair();
        let j = job(None);
        let lim = super::super::limits(&j.req, Instant::now(), None);
        let client = std::thread::spawn(move || {
            let mut one = [0u8; 1];
            for _ in 0..100 {
                a.write_all(b"q").unwrap();
                a.read_exact(&mut one).unwrap();
            }
        });
        let mut c = Counts::default();
        rr_untimed(&mut b, &j, &lim, (1, 1), &mut None, &mut c).unwrap();
        client.join().unwrap();
        assert_eq!(c.trans, 100);
        assert_eq!((c.bytes_received, c.bytes_sent), (100, 100));
        assert!(!c.stalled && !c.timed_out, "{c:?}");
    }
}
