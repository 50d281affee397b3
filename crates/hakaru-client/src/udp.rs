//! The client's half of opening UDP flows: one connected socket per flow (each its own source
//! port, so each flow is its own 5-tuple), a hello to the server's UDP port, and its ack. An
//! ack that names another server port (the flow got a port of its own there: `--port-per-flow`,
//! or a Windows server) moves the socket's connection to that port.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hakaru_engine::sockopt::apply_udp_options;
use hakaru_engine::udp::UdpFlowSocket;
use hakaru_model::{FlowDir, Role, ServerPorts, UdpSpec};
use hakaru_proto::datagram::{token_bytes, FlowHello};
use socket2::{Domain, Protocol, Socket, Type};

use crate::{ClientError, ClientOptions};

/// How long the server has to acknowledge every flow's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an unacknowledged hello is repeated.
const HELLO_REPEAT: Duration = Duration::from_millis(100);

pub(crate) fn open_socket(
    opts: &ClientOptions,
    spec: &UdpSpec,
    server: SocketAddr,
    flow: u32,
) -> Result<UdpSocket, ClientError> {
    let fail = |e: io::Error| ClientError::Data {
        flow,
        reason: e.to_string(),
    };
    let sock = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(fail)?;
    apply_udp_options(&sock, spec, server.is_ipv6())?;
    let local = match (opts.bind, server) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        (None, SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    };
    sock.bind(&local.into()).map_err(|e| ClientError::Data {
        flow,
        reason: format!("-B/--bind {}: {e}", local.ip()),
    })?;
    sock.connect(&server.into()).map_err(fail)?;
    let sock: UdpSocket = sock.into();
    sock.set_nonblocking(true).map_err(fail)?;
    Ok(sock)
}

/// Opens a socket for each flow id, says hello from each and waits until the server has
/// acknowledged every one. The flag is true when the server moved them to ports of their own.
pub(crate) fn open_ids(
    opts: &ClientOptions,
    spec: &UdpSpec,
    server: SocketAddr,
    token: &str,
    ids: &[u32],
) -> Result<(Vec<UdpSocket>, bool), ClientError> {
    let token_b = token_bytes(token).ok_or_else(|| {
        ClientError::Server(format!("the server sent a malformed test token '{token}'"))
    })?;
    let mut socks = Vec::with_capacity(ids.len());
    for fid in ids {
        socks.push(open_socket(opts, spec, server, *fid)?);
    }
    let hello = |flow: u32| {
        FlowHello::Hello {
            flow: flow as u16,
            token: token_b,
        }
        .encode()
    };
    let mut acked = vec![false; ids.len()];
    let mut moved = false;
    let mut left = ids.len();
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let mut next_send = Instant::now();
    let mut buf = [0u8; 64];
    while left > 0 {
        let now = Instant::now();
        if now >= deadline {
            return Err(ClientError::Data {
                flow: ids[acked.iter().position(|a| !a).unwrap_or(0)],
                reason: format!(
                    "the server acknowledged {} of {} UDP flows within {} s (is UDP to {server} blocked?)",
                    ids.len() - left,
                    ids.len(),
                    HELLO_TIMEOUT.as_secs()
                ),
            });
        }
        if now >= next_send {
            for (i, s) in socks.iter().enumerate() {
                if !acked[i] {
                    let _ = s.send(&hello(ids[i]));
                }
            }
            next_send = now + HELLO_REPEAT;
        }
        let mut heard = false;
        for (i, s) in socks.iter().enumerate() {
            if acked[i] {
                continue;
            }
            loop {
                match s.recv(&mut buf) {
                    Ok(n) => {
                        heard = true;
                        let mine =
                            |flow: u16, token: [u8; 16]| flow == ids[i] as u16 && token == token_b;
                        let port = match FlowHello::decode(&buf[..n]) {
                            Some(FlowHello::Ack { flow, token }) if mine(flow, token) => None,
                            Some(FlowHello::Moved { flow, token, port })
                                if mine(flow, token)
                                    && spec.server_ports != ServerPorts::SharedOnly =>
                            {
                                Some(port)
                            }
                            _ => continue,
                        };
                        if let Some(port) = port {
                            moved = true;
                            let to = SocketAddr::new(server.ip(), port);
                            s.connect(to).map_err(|e| ClientError::Data {
                                flow: ids[i],
                                reason: format!("following the flow to server port {port}: {e}"),
                            })?;
                        }
                        acked[i] = true;
                        left -= 1;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        return Err(ClientError::Data {
                            flow: ids[i],
                            reason: format!(
                                "UDP port {} on the server is closed (ICMP port unreachable)",
                                server.port()
                            ),
                        })
                    }
                    Err(_) => break,
                }
            }
        }
        if !heard {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok((socks, moved))
}

/// Opens every flow of the test and waits until the server has acknowledged each one. The
/// flag is true when the server moved the flows to ports of their own.
pub(crate) fn open_flows(
    opts: &ClientOptions,
    spec: &UdpSpec,
    server: SocketAddr,
    token: &str,
) -> Result<(Vec<UdpFlowSocket>, bool), ClientError> {
    let plan = spec.flow_plan();
    let ids: Vec<u32> = plan.iter().map(|(id, _)| *id).collect();
    let (socks, moved) = open_ids(opts, spec, server, token, &ids)?;
    let mut up_i = 0u32;
    let flows = plan
        .iter()
        .zip(socks)
        .map(|((fid, dir), socket)| {
            let (role, quota) = match dir {
                FlowDir::Up => {
                    up_i += 1;
                    (Role::Sender, spec.datagrams_for_flow(up_i - 1))
                }
                FlowDir::Down => (Role::Receiver, None),
            };
            UdpFlowSocket {
                id: *fid,
                dir: *dir,
                role,
                socket,
                quota,
            }
        })
        .collect();
    Ok((flows, moved))
}
