//! `--mesh`: the server as a fleet agent (hakaru-mesh). The mesh port is one UDP socket, on
//! which the agent probes its peers and answers theirs, and a TCP listener on the same port
//! number that serves the agent's view at `/mesh` and the server's `/metrics`, with the
//! limits and access list of `--metrics` (docs/mesh.md).

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::{bind_udp, Ctx, ServerConfig, FREE_PORT_TRIES};

/// The mesh port, bound, with its agent ready.
pub(crate) struct MeshPort {
    pub(crate) agent: hakaru_mesh::Agent,
    listener: TcpListener,
}

/// The mesh socket's receive buffer asked for (bytes).
const MESH_RCVBUF: usize = 1 << 20;

impl MeshPort {
    /// Binds the mesh port on `ip` and reads the peer list, when the server has a mesh.
    pub(crate) fn bind(cfg: &ServerConfig, ip: IpAddr) -> io::Result<Option<MeshPort>> {
        let Some(m) = &cfg.mesh else { return Ok(None) };
        let named = |e: io::Error| io::Error::new(e.kind(), format!("--mesh-port {}: {e}", m.port));
        let mut tries = 0;
        let (udp, listener) = loop {
            let udp = bind_udp(SocketAddr::new(ip, m.port), cfg.family).map_err(named)?;
            let at = udp.local_addr()?;
            match TcpListener::bind(at) {
                Ok(l) => break (udp, l),
                Err(_) if m.port == 0 && tries < FREE_PORT_TRIES => tries += 1,
                Err(e) => return Err(named(e)),
            }
        };
        listener.set_nonblocking(true)?;
        // Room for a few seconds of probes and replies while the agent is held off the CPU
        // (a busy host), so they wait instead of being dropped and read as loss. The kernel
        // caps it at net.core.rmem_max; what it allows is enough.
        let _ = socket2::SockRef::from(&udp).set_recv_buffer_size(MESH_RCVBUF);
        let acl = cfg.acl.clone();
        let permits = Box::new(move |ip| acl.permits(ip));
        let agent = hakaru_mesh::Agent::new(m.clone(), udp, permits)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("--mesh: {e}")))?;
        Ok(Some(MeshPort { agent, listener }))
    }

    /// Starts the agent and the port's HTTP side.
    pub(crate) fn spawn(self, ctx: Arc<Ctx>) -> io::Result<Vec<JoinHandle<()>>> {
        let mut threads = self.agent.spawn(Arc::clone(&ctx.shutdown))?;
        threads.push(crate::metrics::spawn(ctx, self.listener)?);
        Ok(threads)
    }
}
