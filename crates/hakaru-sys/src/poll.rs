//! Waiting for sockets: a poll set with readiness, a one-descriptor wait, and tight timer slack.
//!
//! Unix uses poll(2) (ppoll(2) on Linux, for a nanosecond timeout: a paced sender sharing a
//! worker with receivers must wake for its next datagram, not at the next millisecond).
//! Windows uses WSAPoll (millisecond timeouts). Other targets sleep for a millisecond and report
//! every entry ready, so callers, whose sockets are non-blocking, simply try them all.

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
#[derive(Default)]
pub struct PollSet {
    #[cfg(unix)]
    fds: Vec<libc::pollfd>,
    #[cfg(windows)]
    fds: Vec<windows_sys::Win32::Networking::WinSock::WSAPOLLFD>,
    #[cfg(not(any(unix, windows)))]
    n: usize,
}

impl std::fmt::Debug for PollSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollSet").field("len", &self.len()).finish()
    }
}

impl PollSet {
    /// An empty set.
    pub fn new() -> PollSet {
        PollSet::default()
    }

    /// Empties the set, keeping its memory.
    pub fn clear(&mut self) {
        #[cfg(any(unix, windows))]
        self.fds.clear();
        #[cfg(not(any(unix, windows)))]
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
        #[cfg(windows)]
        {
            use windows_sys::Win32::Networking::WinSock as ws;
            self.fds.push(ws::WSAPOLLFD {
                // WSAPoll ignores INVALID_SOCKET entries and clears their revents.
                fd: if interest == Interest::Skip {
                    ws::INVALID_SOCKET
                } else {
                    fd as ws::SOCKET
                },
                events: match interest {
                    Interest::Read => ws::POLLRDNORM,
                    Interest::Write => ws::POLLWRNORM,
                    Interest::Skip => 0,
                },
                revents: 0,
            });
        }
        #[cfg(not(any(unix, windows)))]
        {
            let _ = (fd, interest);
            self.n += 1;
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        #[cfg(any(unix, windows))]
        return self.fds.len();
        #[cfg(not(any(unix, windows)))]
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
                // `as _`: libc deprecates naming time_t on musl (it becomes 64-bit there).
                tv_sec: timeout.as_secs().min(1) as _,
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
        #[cfg(windows)]
        {
            use windows_sys::Win32::Networking::WinSock as ws;
            let ms = timeout.as_micros().div_ceil(1000).clamp(0, 1000) as i32;
            if self.fds.iter().all(|f| f.fd == ws::INVALID_SOCKET) {
                // WSAPoll refuses a set with nothing to wait on.
                std::thread::sleep(Duration::from_millis(ms as u64));
                return;
            }
            // Skipped entries are left out of the call: Wine answers them with POLLNVAL at
            // once, which would turn every wait into a spin.
            let skips = self.fds.iter().any(|f| f.fd == ws::INVALID_SOCKET);
            let mut active: Vec<ws::WSAPOLLFD> = if skips {
                self.fds
                    .iter()
                    .filter(|f| f.fd != ws::INVALID_SOCKET)
                    .map(|f| ws::WSAPOLLFD { ..*f })
                    .collect()
            } else {
                Vec::new()
            };
            let set = if skips { &mut active } else { &mut self.fds };
            // SAFETY: set is a valid array of set.len() WSAPOLLFD structures.
            let rc = unsafe { ws::WSAPoll(set.as_mut_ptr(), set.len() as u32, ms) };
            if skips {
                let mut got = active.iter();
                for f in self.fds.iter_mut() {
                    f.revents = if f.fd == ws::INVALID_SOCKET {
                        0
                    } else {
                        got.next().map_or(0, |a| a.revents)
                    };
                }
            }
            if rc == ws::SOCKET_ERROR {
                // Never spin: an error (a socket closed meanwhile) waits out the time.
                for f in &mut self.fds {
                    f.revents = 0;
                }
                std::thread::sleep(Duration::from_millis(ms.max(1) as u64));
            }
        }
        #[cfg(not(any(unix, windows)))]
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }

    /// Whether entry `i` had an event after the last wait (errors and hang-ups included).
    pub fn ready(&self, i: usize) -> bool {
        #[cfg(unix)]
        return self.fds.get(i).is_some_and(|f| f.revents != 0);
        // Skipped entries are never ready (Wine reports POLLNVAL for them).
        #[cfg(windows)]
        return self.fds.get(i).is_some_and(|f| {
            f.revents != 0 && f.fd != windows_sys::Win32::Networking::WinSock::INVALID_SOCKET
        });
        #[cfg(not(any(unix, windows)))]
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

#[cfg(all(test, any(unix, windows)))]
mod tests {
    use super::super::AsRawFd;
    use super::*;
    use std::net::UdpSocket;
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
