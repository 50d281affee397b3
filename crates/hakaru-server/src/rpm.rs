//! The responsiveness port (`--rpm-port`): bound with the server's other ports and admitted by
//! the server's own rules (its access list, its client prefixes, its `/metrics` counts); the
//! HTTP/2 and TLS service itself, with its async runtime, is hakaru-rpm's.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use crate::metrics::MetricsSink;
use crate::Ctx;

/// What `--rpm-port` and its companions ask.
#[derive(Debug, Clone, Default)]
pub struct RpmConfig {
    /// The port (TCP); 0 picks a free one.
    pub port: u16,
    /// PEM files of the certificate chain and its key (`--tls-cert`, `--tls-key`); `None`
    /// makes a self-signed certificate at start.
    pub files: Option<(String, String)>,
    /// TCP congestion control of the port's connections (`--rpm-congestion`); `None`: the
    /// system's default.
    pub congestion: Option<String>,
    /// The port's bounds (`--rpm-max-connections`, `--rpm-max-per-client`,
    /// `--rpm-max-memory`, `--rpm-head-timeout`). Its client prefixes are replaced by the
    /// server's (`--client-prefix-v4`, `--client-prefix-v6`), so a client is the same client
    /// on every port.
    pub limits: hakaru_rpm::Limits,
}

/// Starts the port on `ip` when the configuration has one: it serves from here on, and stops
/// when the returned server is dropped.
pub(crate) fn start(ctx: &Arc<Ctx>, ip: IpAddr) -> io::Result<Option<hakaru_rpm::RpmServer>> {
    let Some(r) = &ctx.cfg.rpm else {
        return Ok(None);
    };
    let acl = ctx.cfg.acl.clone();
    let sink = MetricsSink(Arc::clone(ctx));
    let opts = hakaru_rpm::ServerOptions {
        files: r.files.clone(),
        permit: Some(Arc::new(move |ip| acl.permits(ip))),
        congestion: r.congestion.clone(),
        limits: hakaru_rpm::Limits {
            prefix_v4: ctx.cfg.limits.prefix_v4,
            prefix_v6: ctx.cfg.limits.prefix_v6,
            ..r.limits
        },
        events: Some(Arc::new(move |e| match e {
            hakaru_rpm::Event::Accepted => sink.connection("rpm"),
            hakaru_rpm::Event::Refused(reason) => sink.refused(reason),
        })),
    };
    // hakaru-rpm's errors name the flag (`--rpm-port N: ...`, `--rpm-congestion ...`).
    hakaru_rpm::start(ip, r.port, &opts)
        .map(Some)
        .map_err(io::Error::other)
}

/// The line that says where the port listens (scripts read the port from it).
pub(crate) fn describe(rpm: &hakaru_rpm::RpmServer, self_signed: bool) -> String {
    format!(
        "rpm test served on {} (https://{}/.well-known/nq, HTTP/2 or HTTP/1.1); certificate SHA-256 {}{}",
        rpm.local_addr(),
        rpm.local_addr(),
        rpm.fingerprint(),
        if self_signed {
            " (self-signed, made at start)"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{Ipv4Addr, TcpStream};
    use std::time::Duration;

    use crate::{Acl, Server, ServerConfig};

    use super::*;

    /// The rpm port follows the server's access list: a denied client is closed before its
    /// TLS handshake, an allowed one is left waiting for its ClientHello.
    #[test]
    fn the_rpm_port_follows_the_servers_access_list() {
        for (deny, closed) in [(vec!["127.0.0.0/8".to_string()], true), (vec![], false)] {
            let server = Server::bind(ServerConfig {
                bind: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                port: 0,
                acl: Acl::parse(&[], &deny).expect("acl"),
                rpm: Some(RpmConfig::default()),
                ..ServerConfig::default()
            })
            .expect("bind");
            let addr = server.rpm_addr().expect("an rpm port");
            let mut c = TcpStream::connect(addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_millis(1500)))
                .expect("timeout");
            let mut buf = [0u8; 16];
            let got = c.read(&mut buf);
            let waited = matches!(&got, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
            let shut = matches!(&got, Ok(0))
                || matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
            assert!(
                if closed { shut } else { waited },
                "deny {deny:?}: read gave {got:?}"
            );
        }
    }
}
