//! The UDP tests' data loops: UDP_STREAM through the server's shared receiver or on the test's
//! own thread (napping while datagrams keep coming, [`super::nap`]), and UDP_RR; on the test's
//! own thread with no receive timeout under the watchdog of `watch.rs` where the OS lets
//! another thread end a blocked receive.

use std::io;
use std::net::{Shutdown, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use hakaru_engine::sys;
use hakaru_session::netperf::server::UDP_RR_FREE_RESPONSE;
use socket2::SockRef;

use super::watch::{watch, WATCH};
use super::{is_tick, nap, over, Counts, Job, Limits, Pacer, TICK};

/// UDP_STREAM through the server's shared receiver ([`crate::netperf::sink`]): this thread waits for
/// the client's empty datagram, the timer, the stop flag or a stall, and reads the counts. A
/// test that starts while no other runs receives here instead ([`crate::netperf::UdpSink::alone`]).
pub(super) fn sink_loop(
    sink: &crate::netperf::UdpSink,
    u: UdpSocket,
    job: &Job,
    lim: Limits,
    rsize: usize,
    ssize: usize,
) -> io::Result<Counts> {
    if let Some(_alone) = sink.alone() {
        return udp_recv(&u, job, lim, rsize, ssize, Counts::default());
    }
    let entry = match sink.add(u, job.peer_ip, rsize)? {
        Ok(e) => e,
        // Spread: the poller was starved of CPU lately.
        Err(u) => return udp_recv(&u, job, lim, rsize, ssize, Counts::default()),
    };
    let mut c = Counts::default();
    // Bounded by the client's empty datagram, the timer or the stop flag, each seen within a
    // TICK (the timer at once).
    loop {
        (c.bytes_received, c.recv_calls) = entry.counts();
        if entry.ended() || entry.spread() || over(job, &lim, &mut c) {
            break;
        }
        let now = Instant::now();
        let wait = lim
            .deadline
            .map_or(TICK, |d| d.saturating_duration_since(now).min(TICK));
        sink.wait_end(&entry, wait);
    }
    sink.remove(&entry);
    (c.bytes_received, c.recv_calls) = entry.counts();
    if entry.spread() && !entry.ended() && !c.timed_out && !c.stalled {
        // The poller gave the socket back: receive on it here, counting on.
        let u = entry.socket();
        u.set_nonblocking(false)?;
        return udp_recv(u, job, lim, rsize, ssize, c);
    }
    Ok(c)
}

/// UDP_STREAM and UDP_RR on this thread: with no receive timeout and a watchdog where another
/// thread can end a blocked receive ([`udp_untimed`]), else [`udp_loop`] with its tick.
pub(super) fn udp_recv(
    u: &UdpSocket,
    job: &Job,
    lim: Limits,
    rsize: usize,
    ssize: usize,
    c: Counts,
) -> io::Result<Counts> {
    if sys::SHUTDOWN_WAKES_BLOCKED_RECV {
        udp_untimed(u, job, lim, (rsize, ssize), c)
    } else {
        udp_loop(u, job, lim, (rsize, ssize), c, None)
    }
}

/// UDP_STREAM and UDP_RR: datagrams from the test's client until its empty datagrams (or the
/// timer). Each receive waits at most a [`TICK`], unless `cut` is given: then it waits with no
/// timeout, and a receive that fails once `cut` is set (a watchdog shut the socket's receive
/// side, [`udp_untimed`]) ends the loop. UDP_STREAM takes what is queued without
/// waiting and, once the socket is empty, naps while datagrams keep coming ([`nap`]).
pub(super) fn udp_loop(
    u: &UdpSocket,
    job: &Job,
    lim: Limits,
    (rsize, ssize): (usize, usize),
    mut c: Counts,
    cut: Option<&AtomicBool>,
) -> io::Result<Counts> {
    u.set_read_timeout(cut.is_none().then_some(TICK))?;
    let cut_off = || cut.is_some_and(|k| k.load(Ordering::Acquire));
    let mut buf = vec![0u8; rsize.max(1)];
    let resp = vec![b'r'; ssize];
    let rr = job.req.is_rr();
    let mut pacer = Pacer::new(job.max_rate);
    let mut nap = (!rr).then(|| {
        // Naps of tens of microseconds: Linux's default slack would add up to 50 us to each.
        sys::tighten_timer_slack();
        nap::Nap::new(SockRef::from(u).recv_buffer_size().unwrap_or(0) as u64)
    });
    // With `nap`: the next receive waits on the socket (the last nap found nothing).
    let mut on_socket = false;
    // Bounded by the client's empty datagram, the timer or the stop flag (with `cut`, the
    // watchdog's shutdown ends a wait for them; a nap is at most nap::LONGEST).
    while !over(job, &lim, &mut c) {
        let got = match nap.as_mut() {
            Some(n) if !on_socket => match sys::udp_recv_from_now(u, &mut buf) {
                // A receive that does not wait sees no shutdown: the flag says it.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && cut_off() => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match n.empty(Instant::now()) {
                        Some(d) => std::thread::sleep(d),
                        None => on_socket = true,
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    nap = None;
                    continue;
                }
                r => r,
            },
            _ => {
                on_socket = false;
                sys::udp_recv_from(u, &mut buf)
            }
        };
        if let (Some(n), Ok((len, _))) = (nap.as_mut(), &got) {
            n.took(*len);
        }
        match got {
            Ok((_, from)) if from.ip().to_canonical() != job.peer_ip.to_canonical() => {}
            Ok((0, _)) => break,
            // The watchdog's shutdown wakes the receive with 0 bytes from no address.
            _ if cut_off() => break,
            Ok((n, from)) => {
                c.bytes_received += n as u64;
                c.recv_calls += 1;
                c.show();
                // One small datagram never buys a larger answer than the fixed allowance.
                if rr && resp.len() > n.max(UDP_RR_FREE_RESPONSE) {
                    c.unanswered += 1;
                    continue;
                }
                if rr
                    && pacer
                        .as_mut()
                        .is_some_and(|p| !p.wait(resp.len(), job, &lim, &mut c))
                {
                    break;
                }
                if rr {
                    match sys::udp_send_to(u, &resp, from) {
                        Ok(k) => {
                            c.bytes_sent += k as u64;
                            c.send_calls += 1;
                        }
                        Err(e) if sys::is_out_of_buffers(&e) => {}
                        Err(e) => return Err(e),
                    }
                    c.trans += 1;
                }
            }
            Err(e) if is_tick(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(c)
}

/// Receives a UDP test on `u` (as [`udp_loop`], counting on from `c`) with no receive
/// timeout, a watchdog ending the wait at a stop, at the server's timer or at a stall by
/// shutting the socket's receive side. Linux does that for an unconnected UDP socket too: the
/// call answers ENOTCONN, but the side is shut and the blocked receive returns (0 bytes, from
/// no address), which the loop reads as the end once the watchdog's flag is set. Where no
/// watchdog thread can be had, the loop keeps its timeout.
fn udp_untimed(
    u: &UdpSocket,
    job: &Job,
    lim: Limits,
    sizes: (usize, usize),
    mut c: Counts,
) -> io::Result<Counts> {
    let shown = Arc::new(AtomicU64::new(
        c.bytes_received.saturating_add(c.bytes_sent),
    ));
    let cut = AtomicBool::new(false);
    let (end, ended) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let (seen, flag, lim_ref) = (&shown, &cut, &lim);
        let end_wait = move || {
            flag.store(true, Ordering::Release);
            let _ = SockRef::from(u).shutdown(Shutdown::Read);
        };
        let dog = std::thread::Builder::new()
            .name(WATCH.into())
            .spawn_scoped(scope, move || watch(end_wait, job, lim_ref, seen, &ended));
        let Ok(dog) = dog else {
            return udp_loop(u, job, lim, sizes, c, None);
        };
        c.shown = Some(Arc::clone(&shown));
        let r = udp_loop(u, job, lim, sizes, c, Some(&cut));
        // The loop is over: the watchdog returns at once.
        drop(end);
        let why = dog.join().unwrap_or_default();
        r.map(|mut c| {
            c.shown = None;
            c.timed_out |= why.timed_out;
            c.stalled |= why.stalled;
            c
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn udp_job(stall: Option<Duration>) -> Job {
        use hakaru_proto::netperf::{direction, PROTO_UDP};
        super::super::tests::job(
            super::super::tests::req(direction::RECV, PROTO_UDP, 30),
            stall,
        )
    }

    fn udp_pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        (a, b)
    }

    /// UDP_STREAM on its own thread: the receive waits with no timeout, counts the client's
    /// datagrams and ends at its empty one, the watchdog with it.
    #[test]
    fn a_udp_test_counts_with_no_timeout_and_ends_at_the_empty_datagram() {
        let (a, b) = udp_pair();
        let j = udp_job(None);
        let lim = super::super::limits(&j.req, Instant::now(), None);
        let client = std::thread::spawn(move || {
            for _ in 0..50 {
                a.send(&[7u8; 100]).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            a.send(&[]).unwrap();
        });
        let c = udp_untimed(&b, &j, lim, (65_536, 0), Counts::default()).unwrap();
        client.join().unwrap();
        assert_eq!((c.bytes_received, c.recv_calls), (5_000, 50));
        assert!(!c.stalled && !c.timed_out && c.shown.is_none(), "{c:?}");
        // It waited with no receive timeout.
        assert_eq!(b.read_timeout().unwrap(), None);
    }

    /// A UDP receive blocked with no timeout is ended by the watchdog: at a stall (marked, the
    /// datagrams before it counted) and at a stop.
    #[test]
    fn a_blocked_udp_receive_ends_at_a_stall_and_at_a_stop() {
        let (a, b) = udp_pair();
        let j = udp_job(Some(Duration::from_millis(400)));
        let lim = super::super::limits(&j.req, Instant::now(), None);
        for _ in 0..3 {
            a.send(&[1u8; 10]).unwrap();
        }
        let t0 = Instant::now();
        let c = udp_untimed(&b, &j, lim, (65_536, 0), Counts::default()).unwrap();
        assert!(c.stalled && !c.timed_out, "{c:?}");
        assert_eq!(c.bytes_received, 30);
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");

        let (_a, b) = udp_pair();
        let j = udp_job(None);
        let lim = super::super::limits(&j.req, Instant::now(), None);
        let stop = Arc::clone(&j.stop);
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, Ordering::Release);
        });
        let t0 = Instant::now();
        let c = udp_untimed(&b, &j, lim, (65_536, 0), Counts::default()).unwrap();
        stopper.join().unwrap();
        assert!(!c.stalled && !c.timed_out, "{c:?}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
