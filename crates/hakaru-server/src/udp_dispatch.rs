//! The server's UDP port: hellos that open UDP flows arrive here; everything else is a stray.
//!
//! A flow's hello carries the test's secret token and must come from the test's client
//! address. The session then opens a socket on this same port connected to the sender, so the
//! kernel delivers the flow's datagrams to that socket and only strays reach this one. Strays
//! are counted and dropped. This loop never sends, so the port cannot reflect traffic. The one
//! datagram ever sent from the port is a session's answer to a hello that carried its test's
//! token from its test's client, naming the port the flow moved to (`--port-per-flow`, and
//! every flow on a Windows server).
#![cfg_attr(not(test), deny(clippy::indexing_slicing))]

use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hakaru_proto::datagram::{token_hex, FlowHello};

use crate::registry::{DataConn, Undelivered};
use crate::Ctx;

/// Serves the UDP port until shutdown.
pub(crate) fn run(ctx: Arc<Ctx>, sock: UdpSocket) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; 65_536];
    while !ctx.shutdown.load(Ordering::Acquire) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(v) => v,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // ICMP errors and the like: note and go on serving.
                tracing::debug!("udp port: {e}");
                continue;
            }
        };
        if !ctx.cfg.acl.permits(from.ip()) {
            ctx.denied.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // An iperf3 UDP stream opens with 4 bytes ("9876"; older clients another number) from
        // the address of a test waiting for its streams; stock iperf3 does not check them.
        if n == 4 {
            if let Some(cookie) = ctx.iperf3.udp_test_of(from.ip()) {
                if ctx
                    .registry
                    .deliver(&cookie, from.ip(), DataConn::Udp(0, from))
                    .is_ok()
                {
                    continue;
                }
            }
        }
        let why = match FlowHello::decode(buf.get(..n).unwrap_or_default()) {
            Some(FlowHello::Hello { flow, token }) => {
                match ctx.registry.deliver(
                    &token_hex(&token),
                    from.ip(),
                    DataConn::Udp(u32::from(flow), from),
                ) {
                    Ok(()) => continue,
                    Err((Undelivered::UnknownToken, _)) => "a hello for no running test",
                    Err((Undelivered::WrongPeer(_), _)) => {
                        "a hello from an address that is not the test's client"
                    }
                    Err((Undelivered::Full(_), _)) => "a hello beyond its test's flows",
                    Err((Undelivered::QueueFull, _)) => {
                        "a hello repeated faster than its test takes them (its queue is full)"
                    }
                }
            }
            Some(FlowHello::Ack { .. } | FlowHello::Moved { .. }) => {
                "an acknowledgement (servers do not take those)"
            }
            None => "a datagram that is not part of any test",
        };
        ctx.strays.fetch_add(1, Ordering::AcqRel);
        ctx.log.info("stray", || {
            format!("udp port: ignored {why} from {from} ({n} bytes)")
        });
    }
}
