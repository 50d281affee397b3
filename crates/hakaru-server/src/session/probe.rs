//! The latency probes' path of a bulk test (`--latency-probe`): one more data path, on the
//! flow after the bulk flows, over UDP (a hello answered from the flow's own socket, as a UDP
//! test's flows are) or TCP (a data connection with the token). Its echo starts as soon as it
//! arrives, before the client's idle baseline, and runs until the session ends.

use std::net::SocketAddr;

use hakaru_engine::ping::{Echo, PingFlow, PingSocket};
use hakaru_engine::sys;
use hakaru_engine::tcp::SideConfig;
use hakaru_model::{End, LatencyProbe, LatencyTransport, ServerPorts, TestSpec};
use hakaru_proto::datagram::{token_bytes, FlowHello};

use super::data::open_udp_flow_with;
use crate::registry::DataConn;
use crate::Ctx;

/// The probe flow of one test: its socket until the echo starts, then the echo.
pub(super) struct ProbePath {
    flow: u32,
    probe: LatencyProbe,
    /// The bulk test's stall timeout: the echo's too (a TCP probe in retransmission back-off
    /// on a loaded path is slow, not dead).
    stall: std::time::Duration,
    token: [u8; 16],
    /// UDP: the flow's server socket binds a port of its own (as the test's UDP flows do).
    own_port: bool,
    socket: Option<PingSocket>,
    /// UDP: the server port of the flow's socket, once the echo has it.
    echo_port: Option<u16>,
    echo: Option<Echo>,
}

impl ProbePath {
    /// The probe path the test waits for, if it asked for probes.
    pub(super) fn of(spec: &TestSpec, token: &str) -> Result<Option<ProbePath>, String> {
        let Some(probe) = spec.latency_probe() else {
            return Ok(None);
        };
        let ports = spec
            .udp()
            .map_or(ServerPorts::default(), |u| u.server_ports);
        let own_port = ports
            .per_flow_on(!sys::UDP_SHARED_PORT_DEMUX)
            .map_err(|e| e.to_string())?;
        Ok(Some(ProbePath {
            flow: spec.probe_flow(),
            probe: probe.clone(),
            stall: spec.common().stall_timeout.0,
            token: token_bytes(token).ok_or("internal error: bad token")?,
            own_port,
            socket: None,
            echo_port: None,
            echo: None,
        }))
    }

    /// The path is the probe flow's.
    pub(super) fn is_mine(&self, c: &DataConn) -> bool {
        matches!(c, DataConn::Tcp(f, ..) | DataConn::Udp(f, _) if *f == self.flow)
    }

    /// Takes the probe flow's path: `Ok(Some(flow))` the first time. A repeated UDP hello is
    /// answered again; a path of the other transport is ignored.
    pub(super) fn take(&mut self, ctx: &Ctx, id: u64, c: DataConn) -> Result<Option<u32>, String> {
        let (flow, first) = (self.flow, self.socket.is_none() && self.echo.is_none());
        match (self.probe.transport, c) {
            (LatencyTransport::Tcp, DataConn::Tcp(_, stream, early)) if first => {
                let _ = stream.set_nodelay(true);
                // Requests that came with the hello: the echo's first answers.
                if !early.is_empty() {
                    std::io::Write::write_all(&mut &stream, &early).map_err(|e| {
                        format!("answering the latency probes' first requests: {e}")
                    })?;
                }
                self.socket = Some(PingSocket::Tcp(stream));
                Ok(Some(flow))
            }
            (LatencyTransport::Udp, DataConn::Udp(_, from)) => {
                if first {
                    let s = open_udp_flow_with(ctx, from, self.own_port, |_, _| Ok(()))
                        .map_err(|e| format!("opening the latency probes' UDP flow: {e}"))?;
                    self.ack(ctx, id, &s, from);
                    self.socket = Some(PingSocket::Udp(s));
                    return Ok(Some(flow));
                }
                // Its answer was lost: a flow on a port of its own hears it again from the
                // server's port (a flow sharing the port, from its echo).
                if let Some(PingSocket::Udp(s)) = &self.socket {
                    self.ack(ctx, id, s, from);
                } else if self.own_port {
                    ctx.udp_port
                        .send_to(&self.moved(self.echo_port()), from)
                        .ok();
                }
                Ok(None)
            }
            _ => {
                tracing::warn!("test {id}: ignored a repeated or mismatched latency probe path");
                Ok(None)
            }
        }
    }

    fn moved(&self, port: u16) -> Vec<u8> {
        FlowHello::Moved {
            flow: self.flow as u16,
            token: self.token,
            port,
        }
        .encode()
    }

    fn ack_bytes(&self) -> Vec<u8> {
        FlowHello::Ack {
            flow: self.flow as u16,
            token: self.token,
        }
        .encode()
    }

    fn echo_port(&self) -> u16 {
        self.echo_port.unwrap_or(0)
    }

    fn ack(&self, ctx: &Ctx, id: u64, s: &std::net::UdpSocket, to: SocketAddr) {
        let sent = if self.own_port {
            let port = s.local_addr().map(|a| a.port()).unwrap_or(0);
            ctx.udp_port.send_to(&self.moved(port), to)
        } else {
            s.send(&self.ack_bytes())
        };
        if let Err(e) = sent {
            tracing::debug!("test {id}: answering the latency probes' hello: {e}");
        }
    }

    /// Starts the echo on the path that arrived.
    pub(super) fn start(&mut self) -> Result<(), String> {
        let socket = self
            .socket
            .take()
            .ok_or("internal error: the latency probes' path is not here")?;
        let spec = TestSpec::Latency(self.probe.as_latency());
        let mut cfg = SideConfig::for_spec(End::Server, &spec, Vec::new(), None);
        cfg.stall_timeout = self.stall;
        // A hello repeated on a shared port lands on this socket: the echo answers it.
        let ack =
            (!self.own_port && matches!(socket, PingSocket::Udp(_))).then(|| self.ack_bytes());
        if let PingSocket::Udp(s) = &socket {
            self.echo_port = s.local_addr().ok().map(|a| a.port());
        }
        let flow = PingFlow {
            id: self.flow,
            socket,
        };
        let echo = Echo::start_probe(cfg, flow, ack)
            .map_err(|e| format!("starting the latency probes' echo: {e}"))?;
        self.echo = Some(echo);
        Ok(())
    }

    /// Stops the echo without waiting for its thread: the caller joins it (`Echo::wait`)
    /// once the test's slot and memory are given back.
    pub(super) fn stop(&mut self) -> Option<Echo> {
        let echo = self.echo.take()?;
        echo.stop();
        Some(echo)
    }

    /// Why the echo failed, if it did (the client stopped reading the probes' replies).
    pub(super) fn failed(&self) -> Option<String> {
        self.echo
            .as_ref()
            .and_then(Echo::first_error)
            .map(|e| format!("latency probes: {e} (--stall-timeout)"))
    }
}
