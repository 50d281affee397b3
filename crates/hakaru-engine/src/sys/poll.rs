//! Waiting for sockets: a poll set with readiness, a one-descriptor wait, and tight timer slack.
//!
//! Unix uses poll(2) (ppoll(2) on Linux, for a nanosecond timeout: a paced sender sharing a
//! worker with receivers must wake for its next datagram, not at the next millisecond). Other
//! targets sleep for a millisecond and report every entry ready, so callers, whose sockets are
//! non-blocking, simply try them all.

use std::time::Duration;

use super::RawFd;

/// What to wait for on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Readable (data, a connection to accept, end of stream, an error).
    Read,
    /// Writable (room in the send buffer).
    Write,
    /// Nothing: the entry keeps its index but is not waited on.
    Skip,
}

/// Descriptors to wait on together, reusable across waits.
#[derive(Debug, Default)]
pub struct PollSet {
    #[cfg(unix)]
    fds: Vec<libc::pollfd>,
    #[cfg(not(unix))]
    n: usize,
}

impl PollSet {
    /// An empty set.
    pub fn new() -> PollSet {
        PollSet::default()
    }

    /// Empties the set, keeping its memory.
    pub fn clear(&mut self) {
        #[cfg(unix)]
        self.fds.clear();
        #[cfg(not(unix))]
        {
            self.n = 0;
        }
    }

    /// Adds a descriptor; its index is the number of entries added before it.
    pub fn push(&mut self, fd: RawFd, interest: Interest) {
        #[cfg(unix)]
        self.fds.push(libc::pollfd {
            // poll skips negative descriptors.
            fd: if interest == Interest::Skip { -1 } else { fd },
            events: match interest {
                Interest::Read => libc::POLLIN,
                Interest::Write => libc::POLLOUT,
                Interest::Skip => 0,
            },
            revents: 0,
        });
        #[cfg(not(unix))]
        {
            let _ = (fd, interest);
            self.n += 1;
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        #[cfg(unix)]
        return self.fds.len();
        #[cfg(not(unix))]
        return self.n;
    }

    /// True when the set has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until an entry is ready or `timeout` passes (at most 1 s per call).
    pub fn wait(&mut self, timeout: Duration) {
        #[cfg(target_os = "linux")]
        {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(1) as libc::time_t,
                tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
            };
            // SAFETY: fds is a valid array of fds.len() pollfd structures; ts outlives the
            // call; a null signal mask leaves the mask unchanged.
            unsafe {
                libc::ppoll(
                    self.fds.as_mut_ptr(),
                    self.fds.len() as libc::nfds_t,
                    &ts,
                    std::ptr::null(),
                )
            };
        }
        #[cfg(all(unix, not(target_os = "linux")))]
        {
            let ms = timeout.as_micros().div_ceil(1000).clamp(1, 1000) as libc::c_int;
            // SAFETY: fds is a valid array of fds.len() pollfd structures.
            unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        }
        #[cfg(not(unix))]
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }

    /// Whether entry `i` had an event after the last wait (errors and hang-ups included).
    pub fn ready(&self, i: usize) -> bool {
        #[cfg(unix)]
        return self.fds.get(i).is_some_and(|f| f.revents != 0);
        #[cfg(not(unix))]
        return i < self.n;
    }
}

/// Waits until `fd` is ready for `interest` or `timeout` passes.
pub fn wait_fd(fd: RawFd, interest: Interest, timeout: Duration) {
    let mut p = PollSet::new();
    p.push(fd, interest);
    p.wait(timeout);
}

/// Asks for tight timer wake-ups on this thread (1 us slack instead of Linux's default 50 us),
/// so a paced sender's sleeps end close to the due time. Elsewhere: nothing to do.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    #[test]
    fn readiness_follows_data_and_timeouts_end_waits() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut p = PollSet::new();
        p.push(a.as_raw_fd(), Interest::Read);
        p.push(b.as_raw_fd(), Interest::Skip);
        p.push(b.as_raw_fd(), Interest::Write);
        let t0 = Instant::now();
        p.wait(Duration::from_millis(30));
        assert!(!p.ready(0), "nothing was sent yet");
        assert!(!p.ready(1), "skipped entries are never ready");
        assert!(p.ready(2), "an empty send buffer is writable");
        assert!(t0.elapsed() < Duration::from_secs(1));
        b.send_to(b"x", a.local_addr().unwrap()).unwrap();
        p.clear();
        p.push(a.as_raw_fd(), Interest::Read);
        p.wait(Duration::from_secs(1));
        assert!(p.ready(0));
        assert_eq!(p.len(), 1);
    }
}
