//! What every accept loop does when `accept` fails with something other than "nothing
//! waiting": out of descriptors (EMFILE, ENFILE), out of buffers (ENOBUFS, ENOMEM), a
//! connection reset in the queue. The connection that caused it usually stays queued, so an
//! accept retried at once fails again at once: the loop would spin and log thousands of lines
//! a second. Instead it backs off (10 ms, growing to 100 ms while the errors go on; back to
//! nothing after an accept succeeds), and logs at most one line a second per port, saying how
//! many errors it left out.

use std::io;
use std::time::{Duration, Instant};

/// The first back-off after an error.
const FIRST: Duration = Duration::from_millis(10);
/// The longest back-off.
const MOST: Duration = Duration::from_millis(100);
/// How often a port's accept errors are logged.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// Whether an accept error just means "nothing to accept now" (a non-blocking listener, a
/// signal, a receive timeout on the listener): not worth a back-off or a line.
pub(crate) fn is_idle(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::TimedOut
    )
}

/// One accept loop's errors: the back-off and the log's pace.
#[derive(Debug)]
pub(crate) struct AcceptErrors {
    /// The port, as log lines name it ("ntttcp data", "http").
    what: &'static str,
    /// The next back-off (zero: the last accept succeeded).
    delay: Duration,
    /// When a line was last written.
    logged: Option<Instant>,
    /// Errors since that line, not logged.
    left_out: u64,
}

impl AcceptErrors {
    pub(crate) fn new(what: &'static str) -> AcceptErrors {
        AcceptErrors {
            what,
            delay: Duration::ZERO,
            logged: None,
            left_out: 0,
        }
    }

    /// An accept succeeded: the next error backs off from the start again.
    pub(crate) fn accepted(&mut self) {
        self.delay = Duration::ZERO;
    }

    /// An accept failed with `e` (not [`is_idle`]): logs it if no line was written in the
    /// last second, then sleeps the back-off.
    pub(crate) fn failed(&mut self, e: &io::Error) {
        let (line, pause) = self.note(e, Instant::now());
        if let Some(l) = line {
            tracing::warn!("{l}");
        }
        std::thread::sleep(pause);
    }

    /// [`AcceptErrors::failed`] at `now`, without the side effects: the line to write (if
    /// any) and how long to back off.
    fn note(&mut self, e: &io::Error, now: Instant) -> (Option<String>, Duration) {
        self.delay = (self.delay * 2).clamp(FIRST, MOST);
        let due = self
            .logged
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_EVERY);
        if !due {
            self.left_out += 1;
            return (None, self.delay);
        }
        let more = std::mem::take(&mut self.left_out);
        self.logged = Some(now);
        let hint = if is_out_of_descriptors(e) {
            " (out of file descriptors: raise the limit, e.g. ulimit -n, or lower --max-pending)"
        } else {
            ""
        };
        let tail = if more > 0 {
            format!("; {more} more accept error(s) in the last second, not logged")
        } else {
            String::new()
        };
        (
            Some(format!(
                "{}: accept failed: {e}{hint}; backing off {} ms{tail}",
                self.what,
                self.delay.as_millis()
            )),
            self.delay,
        )
    }
}

/// EMFILE or ENFILE, as far as std names them.
fn is_out_of_descriptors(e: &io::Error) -> bool {
    // "Too many open files" (EMFILE: 24, ENFILE: 23 on Linux and the BSDs).
    e.to_string().contains("open files") || matches!(e.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emfile() -> io::Error {
        io::Error::from_raw_os_error(24)
    }

    #[test]
    fn errors_back_off_growing_and_log_once_a_second_with_a_count() {
        let mut a = AcceptErrors::new("ntttcp data");
        let t0 = Instant::now();
        let (line, pause) = a.note(&emfile(), t0);
        let line = line.expect("the first error is logged");
        assert!(line.starts_with("ntttcp data: accept failed: "), "{line}");
        assert!(line.contains("out of file descriptors"), "{line}");
        assert_eq!(pause, FIRST);
        let mut pauses = Vec::new();
        for i in 1..=500u64 {
            let (line, pause) = a.note(&emfile(), t0 + Duration::from_millis(i));
            assert!(
                line.is_none(),
                "a second error within the second is not logged"
            );
            pauses.push(pause);
        }
        assert_eq!(pauses.first(), Some(&Duration::from_millis(20)));
        assert!(pauses.iter().all(|&p| p <= MOST && p >= FIRST));
        assert_eq!(pauses.last(), Some(&MOST));
        let (line, _) = a.note(&emfile(), t0 + Duration::from_millis(1000));
        let line = line.expect("a line a second");
        assert!(
            line.ends_with("500 more accept error(s) in the last second, not logged"),
            "{line}"
        );
        // Success starts the back-off over; the log's pace is kept.
        a.accepted();
        let (line, pause) = a.note(&emfile(), t0 + Duration::from_millis(1001));
        assert!(line.is_none());
        assert_eq!(pause, FIRST);
    }

    #[test]
    fn idle_is_not_an_error() {
        assert!(is_idle(&io::ErrorKind::WouldBlock.into()));
        assert!(is_idle(&io::ErrorKind::Interrupted.into()));
        assert!(!is_idle(&emfile()));
        let other = AcceptErrors::new("http")
            .note(&io::ErrorKind::ConnectionAborted.into(), Instant::now())
            .0
            .unwrap();
        assert!(!other.contains("descriptors"), "{other}");
    }
}
