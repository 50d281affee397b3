//! One thread that receives every running UDP_STREAM test's datagrams.
//!
//! The guides' packet-rate script starts 64 `netperf -t UDP_STREAM -- -m 1` clients at once,
//! one per port. A blocking receive per test wakes its thread for every few datagrams (3.6 per
//! wake-up against 64 netserver processes' 6, measured in docs/BENCHMARKS.md), and on a receiver
//! with one CPU the switches between 64 threads cost more than the receives. Here one poller
//! thread waits on all the tests' sockets at once and drains the ready ones in rounds, as the
//! sockperf port range does; under load it finds many sockets ready per wait and hardly ever
//! sleeps. Each test's own data thread only waits for its end (the client's empty datagram, the
//! timer, the stop flag or a stall) and reads the counts.
//!
//! One thread is also what the scheduler sees: where the receiver shares its CPUs with many
//! busy threads (64 netperf senders on the same machine, unpinned), it gets one thread's share
//! of them and falls behind, where 64 receiving threads would get 64 shares. So the poller
//! watches how long it waits, runnable, for a CPU (Linux's schedstat): over half of a
//! [`WINDOW`], and it hands the tests back to their own threads ([`SPREAD_FOR`]: new tests
//! receive on their own threads for that long, then try the poller again).
//!
//! A test that starts while no other UDP_STREAM test runs receives on its own thread instead,
//! one blocking read per datagram as netserver does ([`UdpSink::alone`]): with one test there
//! is nothing to share a wait with, and the poller's wait, its reads until the socket is
//! empty and its wake-ups cost about two more system calls per wake-up, which on a receiver
//! sharing one CPU with its sender are datagrams lost (netperf UDP_STREAM -m 1400, both on one
//! CPU: 0.71x and 0.74x of netserver's messages through the poller, 0.93x and 0.91x on its own
//! thread, old and new builds alternated; docs/performance-notes.md, section 12). Tests that
//! start while it runs go to the poller.
//!
//! The poller runs while any test is registered and ends with the last one, so an idle server
//! holds no thread for it. A socket belongs to its entry; the poller drops its copy of a removed
//! entry at its next wait, so a descriptor is never polled after it is closed. A self-connected
//! loopback socket (it accepts datagrams only from itself) wakes the poller when the set changes.
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hakaru_engine::sys::{AsRawFd, Interest, PollSet};

/// Longest the poller waits before it looks at its set again.
const TICK: Duration = Duration::from_millis(100);
/// Datagrams read from one socket before the next ready socket's turn.
const BURST: usize = 32;
/// Receive buffer: the largest UDP payload.
const BUF: usize = 65_536;
/// How often the poller looks at its wait for a CPU.
const WINDOW: Duration = Duration::from_millis(100);
/// Share of a window spent runnable but waiting for a CPU above which the tests are spread.
const STARVED: f64 = 0.5;
/// How long new tests receive on their own threads after the poller was starved.
const SPREAD_FOR: Duration = Duration::from_secs(10);

/// A test's socket and what the poller counted on it.
pub(crate) struct Entry {
    sock: UdpSocket,
    /// Only datagrams from this address count (others are dropped, as before).
    peer: IpAddr,
    /// netserver's receive size: a longer datagram counts this many bytes (it is truncated).
    rsize: usize,
    bytes: AtomicU64,
    calls: AtomicU64,
    /// The client's empty datagram arrived.
    ended: AtomicBool,
    /// The poller gave the socket back (it was starved of CPU) and touches it no more.
    spread: AtomicBool,
}

impl Entry {
    /// Bytes and receive calls so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Acquire),
            self.calls.load(Ordering::Acquire),
        )
    }

    /// True once the client's empty datagram arrived.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// True once the poller has given the socket back: the test's own thread receives on it
    /// from now on ([`Entry::socket`]).
    pub fn spread(&self) -> bool {
        self.spread.load(Ordering::Acquire)
    }

    /// The test's socket (non-blocking while the poller has it).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// Reads what is waiting, up to [`BURST`] datagrams; true when the socket may hold more.
    fn drain(&self, buf: &mut [u8]) -> bool {
        for _ in 0..BURST {
            match hakaru_engine::sys::udp_recv_from(&self.sock, buf) {
                Ok((_, from)) if from.ip().to_canonical() != self.peer.to_canonical() => {}
                Ok((0, _)) => {
                    self.ended.store(true, Ordering::Release);
                    return false;
                }
                Ok((n, _)) => {
                    self.bytes
                        .fetch_add(n.min(self.rsize) as u64, Ordering::Relaxed);
                    self.calls.fetch_add(1, Ordering::Release);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // An ICMP error from a client that has gone, and the like: the test's own
                // thread sees the stall or the timer.
                Err(_) => return false,
            }
        }
        true
    }
}

#[derive(Default)]
struct State {
    entries: Vec<Arc<Entry>>,
    /// Bumped on every change of `entries`.
    generation: u64,
    running: bool,
    /// Set when the poller was starved of CPU: until then, tests receive on their own threads
    /// (those registered take their sockets back).
    spread_until: Option<Instant>,
    /// A test receives on its own thread because it started alone ([`UdpSink::alone`]).
    alone: bool,
}

/// The lone test's claim ([`UdpSink::alone`]); given back when dropped.
pub(crate) struct Alone(UdpSink);

impl Drop for Alone {
    fn drop(&mut self) {
        self.0.state().alone = false;
    }
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when an entry ends (its test's thread waits on it).
    ended: Condvar,
    /// Self-connected loopback socket: a datagram to it wakes the poller.
    waker: UdpSocket,
}

/// The server's UDP_STREAM receiver (one per server; cheap to clone).
#[derive(Clone)]
pub(crate) struct UdpSink(Arc<Shared>);

impl UdpSink {
    /// A sink with its waker; `Err` where no loopback address can be bound (tests then use a
    /// receive loop of their own).
    pub fn new() -> io::Result<UdpSink> {
        let waker = [
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ]
        .into_iter()
        .find_map(|ip| {
            let s = UdpSocket::bind(SocketAddr::new(ip, 0)).ok()?;
            s.connect(s.local_addr().ok()?).ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        })
        .ok_or_else(|| io::Error::other("no loopback address for the UDP sink's waker"))?;
        Ok(UdpSink(Arc::new(Shared {
            state: Mutex::new(State::default()),
            ended: Condvar::new(),
            waker,
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands a test's socket to the poller (starting it if it is not running); gives it back
    /// (`Err`) while tests are spread over their own threads.
    pub fn add(
        &self,
        sock: UdpSocket,
        peer: IpAddr,
        rsize: usize,
    ) -> io::Result<Result<Arc<Entry>, UdpSocket>> {
        if self.spread() {
            return Ok(Err(sock));
        }
        sock.set_nonblocking(true)?;
        let entry = Arc::new(Entry {
            sock,
            peer,
            rsize: rsize.max(1),
            bytes: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            spread: AtomicBool::new(false),
        });
        let mut st = self.state();
        st.entries.push(Arc::clone(&entry));
        st.generation += 1;
        if !st.running {
            let me = self.clone();
            std::thread::Builder::new()
                // Short enough for the kernel's 15-byte thread name (the tests look for it).
                .name("hakaru-np-sink".into())
                .spawn(move || me.poll_loop())?;
            st.running = true;
        }
        drop(st);
        self.wake();
        Ok(Ok(entry))
    }

    /// Claims the lone test's place when no other UDP_STREAM test runs (none registered, none
    /// alone): the caller receives on its own thread while it holds the claim, and tests that
    /// start meanwhile go to the poller.
    pub fn alone(&self) -> Option<Alone> {
        let mut st = self.state();
        if st.alone || !st.entries.is_empty() {
            return None;
        }
        st.alone = true;
        Some(Alone(self.clone()))
    }

    /// True while new tests receive on their own threads (the poller was starved of CPU).
    fn spread(&self) -> bool {
        self.state()
            .spread_until
            .is_some_and(|t| Instant::now() < t)
    }

    /// Takes a test's socket out of the poller (it stops with the last one).
    pub fn remove(&self, entry: &Arc<Entry>) {
        let mut st = self.state();
        st.entries.retain(|e| !Arc::ptr_eq(e, entry));
        st.generation += 1;
        drop(st);
        self.wake();
    }

    /// Waits up to `wait` for `entry` to end (or the tests to be spread).
    pub fn wait_end(&self, entry: &Entry, wait: Duration) {
        let st = self.state();
        if !entry.ended() && !entry.spread() {
            let _ = self
                .0
                .ended
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn wake(&self) {
        let _ = self.0.waker.send(&[1]);
    }

    /// Number of tests registered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether the poller thread runs.
    #[cfg(test)]
    fn running(&self) -> bool {
        self.state().running
    }

    /// The poller: bounded by its set, which empties when the last test ends; each wait is at
    /// most [`TICK`].
    fn poll_loop(self) {
        let mut buf = vec![0u8; BUF];
        let mut seen = u64::MAX;
        let mut entries: Vec<Arc<Entry>> = Vec::new();
        let mut set = PollSet::new();
        let mut busy: Vec<bool> = Vec::new();
        let mut window = (Instant::now(), hakaru_engine::sys::thread_sched_times());
        loop {
            {
                let mut st = self.state();
                if st.entries.is_empty() {
                    st.running = false;
                    return;
                }
                if window.0.elapsed() >= WINDOW {
                    let now = (Instant::now(), hakaru_engine::sys::thread_sched_times());
                    if starved(window, now) {
                        // Under the lock, and this thread touches no socket after it.
                        st.spread_until = Some(Instant::now() + SPREAD_FOR);
                        for e in &st.entries {
                            e.spread.store(true, Ordering::Release);
                        }
                        tracing::debug!(
                            "netperf: the UDP receiver waits for a CPU over half the time; {} test(s) receive on their own threads",
                            st.entries.len()
                        );
                        st.entries.clear();
                        st.generation += 1;
                        st.running = false;
                        self.0.ended.notify_all();
                        return;
                    }
                    window = now;
                }
                if st.generation != seen {
                    seen = st.generation;
                    entries.clone_from(&st.entries);
                    set.clear();
                    set.push(self.0.waker.as_raw_fd(), Interest::Read);
                    for e in &entries {
                        set.push(e.sock.as_raw_fd(), Interest::Read);
                    }
                }
            }
            set.wait(TICK);
            if set.ready(0) {
                let mut b = [0u8; 16];
                while self.0.waker.recv(&mut b).is_ok() {}
            }
            busy.clear();
            busy.extend((0..entries.len()).map(|i| set.ready(i + 1)));
            let start = Instant::now();
            let mut any_ended = false;
            // Round after round over the ready sockets until all are drained; a round is
            // bounded by the time, so a change of the set is seen within a TICK.
            while busy.iter().any(|&b| b) && start.elapsed() < TICK {
                for (e, b) in entries.iter().zip(busy.iter_mut()) {
                    if *b {
                        *b = e.drain(&mut buf);
                        any_ended |= e.ended();
                    }
                }
            }
            if any_ended {
                // Under the lock, so a test's thread cannot miss it between its check and
                // its wait.
                let _st = self.state();
                self.0.ended.notify_all();
            }
        }
    }
}

type Sample = (Instant, Option<(u64, u64)>);

/// True when the thread waited, runnable, for a CPU over [`STARVED`] of the time between two
/// samples.
fn starved(a: Sample, b: Sample) -> bool {
    let wall = b.0.saturating_duration_since(a.0).as_nanos() as f64;
    match (a.1, b.1) {
        (Some((_, w0)), Some((_, w1))) if wall > 0.0 => {
            w1.saturating_sub(w0) as f64 / wall > STARVED
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        (rx, tx)
    }

    fn until(what: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn counts_each_tests_datagrams_until_its_empty_one_and_stops_with_the_last() {
        let sink = UdpSink::new().unwrap();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (rx_a, tx_a) = pair();
        let (rx_b, tx_b) = pair();
        let a = sink.add(rx_a, local, 65_536).unwrap().unwrap();
        // A receive size of 10: a longer datagram counts 10 bytes, as a truncated read.
        let b = sink.add(rx_b, local, 10).unwrap().unwrap();
        assert!(sink.running());
        for _ in 0..100 {
            tx_a.send(&[7u8; 100]).unwrap();
        }
        for _ in 0..50 {
            tx_b.send(&[7u8; 100]).unwrap();
        }
        assert!(until(|| a.counts() == (10_000, 100)), "{:?}", a.counts());
        assert!(until(|| b.counts() == (500, 50)), "{:?}", b.counts());
        assert!(!a.ended() && !b.ended());
        tx_a.send(&[]).unwrap();
        let t = Instant::now();
        sink.wait_end(&a, Duration::from_secs(5));
        assert!(a.ended(), "the empty datagram ends the test");
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(!b.ended());
        sink.remove(&a);
        assert_eq!(sink.len(), 1);
        assert!(sink.running());
        sink.remove(&b);
        assert!(
            until(|| !sink.running()),
            "the poller ends with the last test"
        );
        // And starts again with the next one.
        let (rx_c, tx_c) = pair();
        let c = sink.add(rx_c, local, 65_536).unwrap().unwrap();
        tx_c.send(&[1u8; 3]).unwrap();
        assert!(until(|| c.counts() == (3, 1)));
        sink.remove(&c);
    }

    #[test]
    fn a_test_alone_receives_on_its_own_thread_and_those_beside_it_share_the_poller() {
        let sink = UdpSink::new().unwrap();
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let first = sink.alone().expect("no other test: alone");
        assert!(sink.alone().is_none(), "one test alone at a time");
        let (rx, _tx) = pair();
        let beside = sink.add(rx, local, 65_536).unwrap().unwrap();
        assert!(
            sink.running(),
            "a test beside the lone one goes to the poller"
        );
        drop(first);
        assert!(
            sink.alone().is_none(),
            "a test is registered with the poller"
        );
        sink.remove(&beside);
        assert!(sink.alone().is_some(), "nothing runs: alone again");
    }

    #[test]
    fn starved_is_over_half_the_window_spent_waiting_for_a_cpu() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(250);
        assert!(starved(
            (t0, Some((5, 1_000))),
            (t1, Some((9, 130_001_000)))
        ));
        assert!(!starved(
            (t0, Some((5, 1_000))),
            (t1, Some((9, 120_001_000)))
        ));
        // No figures (not Linux), or no time: never starved.
        assert!(!starved((t0, None), (t1, None)));
        assert!(!starved((t0, Some((0, 0))), (t0, Some((0, 99)))));
    }

    #[test]
    fn datagrams_from_another_address_are_not_counted() {
        let sink = UdpSink::new().unwrap();
        let (rx, tx) = pair();
        // The test's client is "elsewhere": nothing from 127.0.0.1 counts, not even an empty
        // datagram.
        let e = sink
            .add(rx, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 65_536)
            .unwrap()
            .unwrap();
        tx.send(&[1u8; 50]).unwrap();
        tx.send(&[]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(e.counts(), (0, 0));
        assert!(!e.ended());
        sink.remove(&e);
    }

    #[test]
    fn strangers_cannot_wake_the_poller_through_its_waker() {
        let sink = UdpSink::new().unwrap();
        let addr = sink.0.waker.local_addr().unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(b"x", addr).unwrap();
        let mut b = [0u8; 4];
        // Connected to itself: the stranger's datagram is dropped by the kernel.
        assert!(sink.0.waker.recv(&mut b).is_err());
    }
}
