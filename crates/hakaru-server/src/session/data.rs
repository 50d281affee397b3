//! An admitted test's data paths as they arrive: TCP connections handed over by the
//! dispatcher, UDP flows' hellos answered from the flow's own socket; and the flows they make
//! for the engine once every path is here. The session machine decides when that is; this
//! module holds the sockets.

use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hakaru_engine::sockopt::{apply_tcp_options, apply_udp_options};
use hakaru_engine::sys;
use hakaru_engine::tcp::FlowSocket;
use hakaru_engine::udp::UdpFlowSocket;
use hakaru_model::{FlowDir, Role, TcpSpec, UdpSpec};
use hakaru_proto::datagram::{token_bytes, FlowHello};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::registry::DataConn;
use crate::Ctx;

/// Hellos repeated after a flow's socket was connected land on that socket; the client
/// repeats every 100 ms, so looking every 50 ms is enough.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// The paths of one test, by flow.
pub(super) enum Paths {
    Tcp(Vec<Option<TcpStream>>),
    Udp(UdpPaths),
}

pub(super) struct UdpPaths {
    socks: Vec<Option<UdpSocket>>,
    spec: Box<UdpSpec>,
    token: [u8; 16],
    /// Each flow has a server port of its own (`--port-per-flow`, or a server whose OS cannot
    /// share one port between connected sockets).
    own_ports: bool,
    last_drain: Instant,
}

impl Paths {
    pub(super) fn tcp(count: usize) -> Paths {
        Paths::Tcp((0..count).map(|_| None).collect())
    }

    pub(super) fn udp(spec: &UdpSpec, count: usize, token: &str) -> Result<Paths, String> {
        let token = token_bytes(token).ok_or("internal error: bad token")?;
        let own_ports = spec
            .server_ports
            .per_flow_on(!sys::UDP_SHARED_PORT_DEMUX)
            .map_err(|e| e.to_string())?;
        Ok(Paths::Udp(UdpPaths {
            socks: (0..count).map(|_| None).collect(),
            spec: Box::new(spec.clone()),
            token,
            own_ports,
            last_drain: Instant::now(),
        }))
    }

    /// Takes a path the registry handed over. `Ok(Some(flow))` for a flow's first path;
    /// repeats, unknown flows and paths of the wrong protocol are answered or logged here.
    pub(super) fn take(&mut self, ctx: &Ctx, id: u64, c: DataConn) -> Result<Option<u32>, String> {
        match (self, c) {
            (Paths::Tcp(socks), DataConn::Tcp(flow, stream, early)) => {
                if !early.is_empty() {
                    tracing::warn!(
                        "flow {flow}: {} byte(s) sent before the test started, ignored",
                        early.len()
                    );
                }
                match socks.get_mut(flow as usize) {
                    Some(slot @ None) => {
                        *slot = Some(stream);
                        Ok(Some(flow))
                    }
                    _ => {
                        tracing::warn!(
                        "test {id}: ignored a data connection for unknown or repeated flow {flow}"
                    );
                        Ok(None)
                    }
                }
            }
            (Paths::Tcp(_), DataConn::Udp(flow, from)) => {
                tracing::warn!(
                    "test {id}: ignored a UDP hello for flow {flow} from {from} in a TCP test"
                );
                Ok(None)
            }
            (Paths::Udp(u), DataConn::Udp(flow, from)) => u.hello(ctx, id, flow, from),
            (Paths::Udp(_), DataConn::Tcp(flow, ..)) => {
                tracing::warn!(
                    "test {id}: closed a TCP data connection for flow {flow} in a UDP test"
                );
                Ok(None)
            }
        }
    }

    /// Answers hellos repeated on flows' own sockets (UDP sharing the server's port).
    pub(super) fn drain(&mut self, ctx: &Ctx, id: u64) {
        if let Paths::Udp(u) = self {
            u.drain(ctx, id);
        }
    }

    /// Every flow's first path is here.
    pub(super) fn all_here(&self) -> bool {
        match self {
            Paths::Tcp(s) => s.iter().all(Option::is_some),
            Paths::Udp(u) => u.socks.iter().all(Option::is_some),
        }
    }

    pub(super) fn is_udp(&self) -> bool {
        matches!(self, Paths::Udp(_))
    }

    /// The TCP flows, with the test's socket options applied.
    pub(super) fn tcp_flows(self, spec: &TcpSpec) -> Result<Vec<FlowSocket>, String> {
        let Paths::Tcp(socks) = self else {
            return Err("internal error: not a TCP test".into());
        };
        let mut flows = Vec::with_capacity(socks.len());
        let mut down_index = 0u32;
        for ((fid, dir), s) in spec.flow_plan().iter().zip(socks) {
            let stream = s.ok_or("internal error: missing data connection")?;
            let ipv6 = stream.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
            apply_tcp_options(&SockRef::from(&stream), spec, ipv6, false)
                .map_err(|e| e.to_string())?;
            let (role, quota) = match dir {
                FlowDir::Up => (Role::Receiver, None),
                FlowDir::Down => {
                    down_index += 1;
                    (Role::Sender, spec.bytes_for_flow(down_index - 1))
                }
            };
            flows.push(FlowSocket {
                id: *fid,
                dir: *dir,
                role,
                stream,
                quota,
            });
        }
        Ok(flows)
    }

    /// The UDP flows.
    pub(super) fn udp_flows(self) -> Result<Vec<UdpFlowSocket>, String> {
        let Paths::Udp(u) = self else {
            return Err("internal error: not a UDP test".into());
        };
        let mut flows = Vec::with_capacity(u.socks.len());
        let mut down_index = 0u32;
        for ((fid, dir), s) in u.spec.flow_plan().iter().zip(u.socks) {
            let socket = s.ok_or("internal error: missing UDP flow")?;
            let (role, quota) = match dir {
                FlowDir::Up => (Role::Receiver, None),
                FlowDir::Down => {
                    down_index += 1;
                    (Role::Sender, u.spec.datagrams_for_flow(down_index - 1))
                }
            };
            flows.push(UdpFlowSocket {
                id: *fid,
                dir: *dir,
                role,
                socket,
                quota,
            });
        }
        Ok(flows)
    }
}

impl UdpPaths {
    /// A flow's hello: the first opens the flow's socket and answers; a repeat (its answer
    /// was lost, or it reached the port before the flow's socket existed) is answered again.
    fn hello(
        &mut self,
        ctx: &Ctx,
        id: u64,
        flow: u32,
        from: SocketAddr,
    ) -> Result<Option<u32>, String> {
        match self.socks.get(flow as usize) {
            Some(None) => {
                let s = open_udp_flow(ctx, &self.spec, from, self.own_ports)
                    .map_err(|e| format!("opening UDP flow {flow}: {e}"))?;
                self.ack(ctx, id, flow, &s, from);
                if let Some(slot) = self.socks.get_mut(flow as usize) {
                    *slot = Some(s);
                }
                Ok(Some(flow))
            }
            Some(Some(s)) => {
                self.ack(ctx, id, flow, s, from);
                Ok(None)
            }
            None => {
                tracing::warn!("test {id}: ignored a UDP hello for unknown flow {flow}");
                Ok(None)
            }
        }
    }

    /// A flow sharing the port answers from its own socket (on that port); a flow on a port of
    /// its own answers from the server's port, where the client's socket is still connected.
    fn ack(&self, ctx: &Ctx, id: u64, flow: u32, s: &UdpSocket, to: SocketAddr) {
        let f = flow as u16;
        let sent = if self.own_ports {
            let port = s.local_addr().map(|a| a.port()).unwrap_or(0);
            let moved = FlowHello::Moved {
                flow: f,
                token: self.token,
                port,
            };
            ctx.udp_port.send_to(&moved.encode(), to)
        } else {
            s.send(
                &FlowHello::Ack {
                    flow: f,
                    token: self.token,
                }
                .encode(),
            )
        };
        if let Err(e) = sent {
            tracing::debug!("test {id}: answering the hello of UDP flow {flow}: {e}");
        }
    }

    fn drain(&mut self, ctx: &Ctx, id: u64) {
        if self.own_ports || self.last_drain.elapsed() < DRAIN_EVERY {
            return;
        }
        self.last_drain = Instant::now();
        let mut buf = [0u8; 64];
        for (flow, s) in self.socks.iter().enumerate() {
            let Some(s) = s else { continue };
            while let Ok(n) = s.recv(&mut buf) {
                let hello = buf.get(..n).and_then(FlowHello::decode);
                if matches!(hello, Some(FlowHello::Hello { .. })) {
                    if let Ok(to) = s.peer_addr() {
                        self.ack(ctx, id, flow as u32, s, to);
                    }
                }
            }
        }
    }
}

/// Opens the server's socket for one UDP flow, connected to the client's socket for the flow:
/// on the server's UDP port, or with `own_port` on a port of its own.
fn open_udp_flow(
    ctx: &Ctx,
    spec: &UdpSpec,
    to: SocketAddr,
    own_port: bool,
) -> std::io::Result<UdpSocket> {
    open_udp_flow_with(ctx, to, own_port, |sock, v6| {
        apply_udp_options(sock, spec, v6).map_err(|e| std::io::Error::other(e.to_string()))
    })
}

/// Opens a socket connected to `to` on the server's UDP port (sharing it) or, with
/// `own_port`, on a free port of the same address, with socket options applied by `options`
/// (given the socket and whether the path is IPv6) before it is bound.
pub(crate) fn open_udp_flow_with(
    ctx: &Ctx,
    to: SocketAddr,
    own_port: bool,
    options: impl FnOnce(&Socket, bool) -> std::io::Result<()>,
) -> std::io::Result<UdpSocket> {
    let local = if own_port {
        SocketAddr::new(ctx.udp_addr.ip(), 0)
    } else {
        ctx.udp_addr
    };
    let sock = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    if !own_port {
        sock.set_reuse_address(true)?;
    }
    if local.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    options(&sock, to.is_ipv6() && to.ip().to_canonical().is_ipv6())?;
    sock.bind(&local.into())?;
    let to = match (local, to) {
        (SocketAddr::V6(_), SocketAddr::V4(v4)) => {
            SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port())
        }
        _ => to,
    };
    sock.connect(&to.into())?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}
