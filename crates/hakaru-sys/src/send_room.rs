//! Waiting, in an async task, for a TCP socket's unsent bytes to fall under a mark (the
//! socket's TCP_NOTSENT_LOWAT): [`SendRoom`]. A writer that hands its next bytes to a layer
//! above the socket (TLS) only once the socket has room keeps that layer empty, so what waits
//! above the socket is the write in progress and nothing more (the rpm server's load
//! connections, hakaru-rpm's `shallow.rs`).
//!
//! The kernel reports a socket writable while fewer bytes than its unsent mark wait, but it
//! wakes a waiter only when the socket was seen full first (SOCK_NOSPACE, set when a write
//! blocks or a poll finds no room). A registration that stays in epoll across successful
//! writes is never woken when the socket drains: the first version of this stalled the load
//! at a tenth of its rate. So each wait registers the socket afresh (tokio's `AsyncFd` on a
//! second descriptor of it), which polls it once, and deregisters when woken.

use std::io;
use std::task::{Context, Poll};

use crate::RawFd;

/// Watches one TCP socket's unsent bytes (module doc). Linux only: elsewhere [`SendRoom::new`]
/// answers `None` and the caller writes as it would without one.
pub struct SendRoom {
    #[cfg(target_os = "linux")]
    inner: linux::Room,
}

impl SendRoom {
    /// A watcher of `fd` (borrowed for this call only: the watcher holds a second descriptor
    /// of the socket, closed on drop, so it keeps the socket open while it lives). `None` where the OS has no unsent
    /// mark or the descriptor could not be duplicated.
    pub fn new(fd: RawFd) -> Option<SendRoom> {
        #[cfg(target_os = "linux")]
        {
            linux::Room::new(fd).map(|inner| SendRoom { inner })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = fd;
            None
        }
    }

    /// Ready once fewer than `mark` bytes wait unsent in the socket (at once if so already);
    /// pending otherwise, with `cx`'s waker woken when the kernel signals room. Must be called
    /// within a tokio runtime. `mark` should be the socket's TCP_NOTSENT_LOWAT: the kernel's
    /// signal comes when the unsent bytes fall under that, and a lower `mark` would wait again.
    pub fn poll_room(&mut self, cx: &mut Context<'_>, mark: u32) -> Poll<io::Result<()>> {
        #[cfg(target_os = "linux")]
        {
            self.inner.poll_room(cx, mark)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (cx, mark);
            Poll::Ready(Ok(()))
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::task::{ready, Context, Poll};

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    use crate::RawFd;

    /// Registrations one wait may go through before it says room anyway (a mark that
    /// disagrees with the socket's would otherwise spin: the kernel says "room", the count
    /// says none).
    const MAX_REARMS: u32 = 4;

    /// Bytes a TCP socket holds that it has not sent yet (SIOCOUTQNSD, Linux 2.6.38).
    pub(super) fn notsent(fd: RawFd) -> io::Result<u32> {
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQNSD writes one int through the pointer; `fd` is a socket the caller
        // keeps open.
        let r = unsafe { libc::ioctl(fd, libc::SIOCOUTQNSD as _, &mut n) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n.max(0) as u32)
        }
    }

    /// A second descriptor of the socket `fd` (dup, close-on-exec), owned by the caller.
    fn dup_socket(fd: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: the caller's `fd` is an open descriptor for the duration of this call; the
        // borrow ends before it returns, and the clone is a new descriptor this process owns.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
    }

    pub(super) struct Room {
        /// The second descriptor's number (open while the watcher lives, in `idle` or
        /// `waiting`): the socket is read through it, so the caller's may close first.
        fd: RawFd,
        /// The second descriptor while no wait is registered.
        idle: Option<OwnedFd>,
        /// The registration of the wait in progress.
        waiting: Option<AsyncFd<OwnedFd>>,
        /// Wake-ups of this wait that found no room, across polls.
        rearms: u32,
    }

    impl Room {
        pub(super) fn new(fd: RawFd) -> Option<Room> {
            use std::os::fd::AsRawFd;
            let own = dup_socket(fd).ok()?;
            Some(Room {
                fd: own.as_raw_fd(),
                idle: Some(own),
                waiting: None,
                rearms: 0,
            })
        }

        fn has_room(&self, mark: u32) -> bool {
            // Unreadable: say yes, and the writer writes as it would without a watcher.
            notsent(self.fd).map_or(true, |n| n < mark)
        }

        fn disarm(&mut self) {
            if let Some(w) = self.waiting.take() {
                self.idle = Some(w.into_inner());
            }
        }

        pub(super) fn poll_room(
            &mut self,
            cx: &mut Context<'_>,
            mark: u32,
        ) -> Poll<io::Result<()>> {
            loop {
                if self.has_room(mark) || self.rearms >= MAX_REARMS {
                    // Room; or the count and the kernel disagree (a mark other than the
                    // socket's): say room rather than spin, and the writer writes as it would
                    // without a watcher. The next wait starts afresh.
                    self.rearms = 0;
                    self.disarm();
                    return Poll::Ready(Ok(()));
                }
                if self.waiting.is_none() {
                    let Some(fd) = self.idle.take() else {
                        return Poll::Ready(Ok(()));
                    };
                    // Registering polls the socket: it is full, so the kernel marks it to
                    // signal when room comes.
                    // SAFETY: the descriptor is an `OwnedFd`: open, and the same one, for as
                    // long as the registration holds it (until `into_inner` or drop).
                    match unsafe { AsyncFd::register_with_interest(fd, Interest::WRITABLE) } {
                        Ok(w) => self.waiting = Some(w),
                        Err(e) => {
                            let (fd, e) = e.into_parts();
                            self.idle = Some(fd);
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                let Some(w) = self.waiting.as_ref() else {
                    return Poll::Ready(Ok(()));
                };
                let mut guard = ready!(w.poll_write_ready(cx))?;
                guard.clear_ready();
                // Woken (or already writable at registration): look again, with a fresh
                // registration if there is still no room.
                self.disarm();
                self.rearms += 1;
            }
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    /// A connected pair whose sender has `mark` as its unsent mark and a small receive window
    /// at the reader, so what is written beyond it stays unsent.
    fn pair(mark: u32) -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let r = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        r.set_recv_buffer_size(4096).unwrap();
        r.connect(&l.local_addr().unwrap().into()).unwrap();
        let (w, _) = l.accept().unwrap();
        crate::set_notsent_lowat(&socket2::SockRef::from(&w), mark).unwrap();
        w.set_nonblocking(true).unwrap();
        (w, r.into())
    }

    /// Runs `f` on a one-thread runtime with its I/O and timers.
    fn block_on<F: std::future::Future<Output = ()>>(f: F) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// `room`'s wait for room under `mark`, within `limit` (`Err` when it did not end).
    async fn wait(
        room: &mut SendRoom,
        mark: u32,
        limit: Duration,
    ) -> Result<io::Result<()>, tokio::time::error::Elapsed> {
        tokio::time::timeout(limit, std::future::poll_fn(|cx| room.poll_room(cx, mark))).await
    }

    #[test]
    fn a_mark_under_the_sockets_own_says_room_rather_than_spin() {
        block_on(async {
            let (mut w, _r) = pair(1024);
            // The kernel's mark far above the caller's, and memory to spare: the kernel says
            // "room" while a few KiB wait unsent behind the reader's closed window, which the
            // caller's mark calls none.
            let sock = socket2::SockRef::from(&w);
            sock.set_send_buffer_size(1 << 20).unwrap();
            crate::set_notsent_lowat(&sock, 1 << 20).unwrap();
            let chunk = [7u8; 2 << 10];
            for _ in 0..1000 {
                if linux::notsent(w.as_raw_fd()).unwrap() >= 4096 {
                    break;
                }
                let _ = w.write(&chunk);
                std::thread::sleep(Duration::from_millis(1));
            }
            let unsent = linux::notsent(w.as_raw_fd()).unwrap();
            assert!(unsent >= 4096, "{unsent}");
            let mut room = SendRoom::new(w.as_raw_fd()).expect("a watcher on Linux");
            wait(&mut room, 1024, Duration::from_secs(2))
                .await
                .expect("room said, not a spin")
                .unwrap();
            assert!(linux::notsent(w.as_raw_fd()).unwrap() >= 1024);
        });
    }

    #[test]
    fn waits_while_the_socket_is_full_and_wakes_when_it_drains() {
        block_on(async {
            let (mut w, mut r) = pair(1024);
            let mut room = SendRoom::new(w.as_raw_fd()).expect("a watcher on Linux");
            // Empty: room at once.
            wait(&mut room, 1024, Duration::from_secs(2))
                .await
                .expect("room at once")
                .unwrap();
            // Fill: the reader's window takes a few KiB, the rest waits unsent.
            let mut sent = 0usize;
            let chunk = [7u8; 16 << 10];
            while sent < 4 << 20 {
                match w.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            assert!(linux::notsent(w.as_raw_fd()).unwrap() >= 1024);
            let full = wait(&mut room, 1024, Duration::from_millis(200)).await;
            assert!(full.is_err(), "no room while {sent} bytes wait");
            // Drain on another thread: the wait must be woken, not time out.
            let reader = std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                let mut got = 0usize;
                while got < sent {
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
                got
            });
            wait(&mut room, 1024, Duration::from_secs(10))
                .await
                .expect("woken when the socket drained")
                .unwrap();
            assert!(linux::notsent(w.as_raw_fd()).unwrap() < 1024);
            drop(w);
            assert_eq!(reader.join().unwrap(), sent);
        });
    }
}
