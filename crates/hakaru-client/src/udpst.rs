//! `hakaru capacity`: the OB-UDPST (RFC 9946) client's socket and clocks around
//! `session::udpst_client`. One UDP socket sends the setup request to the control port, is
//! connected to the test port the answer names, activates the test, then sends load at the
//! server's sending-rate row (`session::udpst_pace`) or counts the server's load and sends
//! status feedback, until the stop exchange, the watchdog or the stop flag ends it.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_model::{KindDetail, RunResult, TestSpec, UdpstResult, UdpstSpec, UdpstSubInterval};
use hakaru_proto::udpst as u;
use hakaru_session::udpst_client::{summarize, Phase, UdpstClient, Wall};
use hakaru_session::udpst_pace::{self, Pacer};

/// What one test gave.
#[derive(Debug)]
struct Outcome {
    /// The figures.
    pub result: UdpstResult,
    /// This end's address.
    pub local: String,
    /// The server's test port.
    pub remote: String,
}

fn wall() -> Wall {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as u32, d.subsec_nanos())
}

fn io_err(what: &str, e: io::Error) -> String {
    format!("{what}: {e}")
}

/// Runs one test against the control port at `to` and gives its whole result; `on_sub` sees
/// each sub-interval as the receiver completes it. `embedded` says the server is this
/// process's own loopback one.
pub fn run(
    spec: &UdpstSpec,
    to: SocketAddr,
    embedded: bool,
    stop: &AtomicBool,
    on_sub: &mut dyn FnMut(&UdpstSubInterval),
) -> Result<RunResult, String> {
    let started_unix = hakaru_engine::sys::now_unix();
    let x = measure(spec, to, stop, on_sub)?;
    Ok(RunResult {
        embedded_server: embedded,
        local_address: x.local,
        remote_address: x.remote,
        interrupted: stop.load(Ordering::Relaxed),
        notes: vec![
            "rates count UDP payload plus 28 bytes of UDP/IPv4 header per datagram (48 over IPv6), as the receiver counted them".into(),
        ],
        detail: KindDetail::Udpst(Box::new(x.result)),
        server_on_this_host: embedded,
        ..RunResult::begin(TestSpec::Udpst(spec.clone()), started_unix, spec.server.clone())
    })
}

/// The test itself: this end's socket, from the setup request to the stop exchange.
fn measure(
    spec: &UdpstSpec,
    to: SocketAddr,
    stop: &AtomicBool,
    on_sub: &mut dyn FnMut(&UdpstSubInterval),
) -> Result<Outcome, String> {
    let any: SocketAddr = if to.is_ipv6() {
        "[::]:0".parse().map_err(|_| "address".to_string())?
    } else {
        "0.0.0.0:0".parse().map_err(|_| "address".to_string())?
    };
    let sock = socket(any)?;
    let seed = u64::from(wall().1) ^ u64::from(std::process::id()) << 20;
    // `::ffff:a.b.c.d` needs an IPv6 socket but travels over IPv4: IPv4's sizes.
    let v6 = u::ipv6_on_wire(to);
    let (mut c, req) = UdpstClient::new(spec, (seed % 65535) as u16 + 1, v6, Instant::now());
    sock.send_to(&req, to)
        .map_err(|e| io_err(&format!("sending the setup request to {to}"), e))?;
    let port = setup(&sock, &mut c, to, stop)?;
    let test = SocketAddr::new(to.ip(), port);
    sock.connect(test)
        .map_err(|e| io_err(&format!("connecting to the test port {test}"), e))?;
    sock.send(&c.activation_request())
        .map_err(|e| io_err("sending the test activation", e))?;
    sock.set_nonblocking(true)
        .map_err(|e| io_err("socket", e))?;
    test_loop(&sock, &mut c, stop, on_sub, (seed, v6))?;
    let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    match c.phase() {
        Phase::Failed(why) => Err(why.clone()),
        _ if c.sub_intervals().is_empty() => {
            Err("interrupted before a sub-interval completed".into())
        }
        _ => Ok(Outcome {
            result: c.result(),
            local,
            remote: test.to_string(),
        }),
    }
}

fn socket(any: SocketAddr) -> Result<UdpSocket, String> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(any),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .map_err(|e| io_err("UDP socket", e))?;
    // Best effort: a bigger buffer rides out the gaps between polls at high rates.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(4 << 20);
    s.bind(&any.into())
        .map_err(|e| io_err("binding the UDP socket", e))?;
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| io_err("socket", e))?;
    Ok(s)
}

/// Waits for the setup response (from the control port's host) and gives the test port.
fn setup(
    sock: &UdpSocket,
    c: &mut UdpstClient,
    to: SocketAddr,
    stop: &AtomicBool,
) -> Result<u16, String> {
    let mut buf = [0u8; 2048];
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted during setup".into());
        }
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            if from.ip() == to.ip() {
                if let Some(port) = c.on_control(buf.get(..n).unwrap_or_default(), Instant::now()) {
                    return Ok(port);
                }
            }
        }
        c.on_tick(Instant::now(), wall());
        if let Phase::Failed(why) = c.phase() {
            return Err(format!("{why} ({to})"));
        }
    }
}

// hot loop: the load, the receiver's datagrams and the status feedback of one test.
fn test_loop(
    sock: &UdpSocket,
    c: &mut UdpstClient,
    stop: &AtomicBool,
    on_sub: &mut dyn FnMut(&UdpstSubInterval),
    (seed, v6): (u64, bool),
) -> Result<(), String> {
    let mut buf = vec![0u8; 65536];
    let mut pacer = Pacer::new(
        Instant::now() + Duration::from_millis(5),
        seed,
        udpst_pace::CATCH_UP_COARSE,
    );
    let mut sizes = Vec::with_capacity(128);
    let mut shown = 0;
    while matches!(c.phase(), Phase::Activating | Phase::Testing) && !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if c.sending() {
            sizes.clear();
            pacer.due(&c.rate(), now, v6, c.stopping(), &mut sizes);
            for &s in &sizes {
                let len = (s as usize).clamp(u::LOAD_HDR_LEN, buf.len());
                c.next_load(len as u16, Instant::now(), wall())
                    .write(&mut buf);
                if sock.send(buf.get(..len).unwrap_or_default()).is_err() {
                    c.unsent();
                }
            }
        }
        for _ in 0..4096 {
            match sock.recv(&mut buf) {
                Ok(n) => c.on_datagram(buf.get(..n).unwrap_or_default(), Instant::now(), wall()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break, // an ICMP error from an earlier send: the watchdog decides
            }
        }
        if let Some(b) = c.on_tick(Instant::now(), wall()) {
            let _ = sock.send(&b);
        }
        let subs = c.sub_intervals();
        if subs.len() > shown {
            let rows = summarize(subs, v6).sub_intervals;
            for r in rows.iter().skip(shown) {
                on_sub(r);
            }
            shown = subs.len();
        }
        let wake = if c.sending() {
            pacer.next_wake()
        } else {
            now + Duration::from_millis(1)
        };
        let now = Instant::now();
        if wake > now {
            std::thread::sleep((wake - now).min(Duration::from_millis(1)));
        }
    }
    Ok(())
}
