//! Who an agent probes: a peers file (one peer a line, with labels) or a DNS name with many
//! records (a Kubernetes headless Service), read again every refresh so members that come
//! and go are followed (docs/mesh.md, "Peers").

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// One peer: the name it is reported by, where its agent listens, its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// As written in the peers file (`HOST[:PORT]`), or the address for a DNS member.
    pub name: String,
    /// The agent's mesh port.
    pub addr: SocketAddr,
    /// `key=value` labels from the file, in order.
    pub labels: Vec<(String, String)>,
}

impl Peer {
    /// The value of label `key`, if the peer has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Where the peer list comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSource {
    /// A file of peers.
    File(PathBuf),
    /// Every address a DNS name resolves to, at `port`.
    Dns {
        /// The name.
        name: String,
        /// The agents' mesh port.
        port: u16,
    },
}

/// Most labels on one peer.
pub const MAX_LABELS: usize = 16;
/// Longest label value.
pub const MAX_LABEL_VALUE: usize = 64;
/// Label names the agent's own series use.
const RESERVED: &[&str] = &["peer", "le", "group"];

impl PeerSource {
    /// `dns:NAME[:PORT]` or a file path; `port` is the mesh port when none is written.
    pub fn parse(spec: &str, port: u16) -> Result<PeerSource, String> {
        let Some(rest) = spec.strip_prefix("dns:") else {
            if spec.is_empty() {
                return Err("the peers file name is empty".into());
            }
            return Ok(PeerSource::File(PathBuf::from(spec)));
        };
        let (name, port) = match rest.rsplit_once(':') {
            Some((n, p)) if !n.contains(':') => (
                n,
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| format!("dns:{rest}: `{p}` is not a port (1-65535)"))?,
            ),
            _ => (rest, port),
        };
        if name.is_empty() || name.len() > 253 {
            return Err(format!(
                "dns:{rest}: a DNS name has 1 to 253 characters, this one {}",
                name.len()
            ));
        }
        Ok(PeerSource::Dns {
            name: name.into(),
            port,
        })
    }

    /// The peers now, at most `max` of them (an error past that, naming the limit).
    pub fn load(&self, port: u16, max: usize) -> Result<Vec<Peer>, String> {
        let peers = match self {
            PeerSource::File(p) => {
                let meta =
                    std::fs::metadata(p).map_err(|e| format!("peers file {}: {e}", p.display()))?;
                // A peers file of 10,000 labelled lines is well under this.
                if meta.len() > 16 << 20 {
                    return Err(format!(
                        "peers file {}: {} bytes; at most 16 MiB are read",
                        p.display(),
                        meta.len()
                    ));
                }
                let text = std::fs::read_to_string(p)
                    .map_err(|e| format!("peers file {}: {e}", p.display()))?;
                parse_list(&text, port, max, &system_resolve)
                    .map_err(|e| format!("peers file {}: {e}", p.display()))?
            }
            PeerSource::Dns { name, port } => {
                let mut addrs: Vec<SocketAddr> = (name.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| format!("dns:{name}: {e}"))?
                    .collect();
                addrs.sort();
                addrs.dedup();
                if addrs.len() > max {
                    return Err(format!(
                        "dns:{name}: {} addresses; at most {max} peers (--mesh-max-peers)",
                        addrs.len()
                    ));
                }
                addrs
                    .into_iter()
                    .map(|addr| Peer {
                        name: addr.to_string(),
                        addr,
                        labels: Vec::new(),
                    })
                    .collect()
            }
        };
        Ok(peers)
    }
}

fn system_resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| "the name has no address".to_string())
}

/// Splits `HOST[:PORT]` (IPv6 in brackets, or bare without a port).
fn split_host(s: &str, port: u16) -> Result<(String, u16), String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip.to_string(), port));
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        if sa.port() == 0 {
            return Err("`0` is not a port (1-65535)".into());
        }
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Ok((inner.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            let p = p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("`{p}` is not a port (1-65535)"))?;
            Ok((h.to_string(), p))
        }
        _ => Ok((s.to_string(), port)),
    }
}

fn check_label(k: &str, v: &str) -> Result<(), String> {
    let key_ok = k
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !key_ok {
        return Err(format!(
            "label name `{k}`: letters, digits and _ only, not starting with a digit"
        ));
    }
    if RESERVED.contains(&k) || k.starts_with("__") {
        return Err(format!(
            "label name `{k}` is the agent's own (or Prometheus's)"
        ));
    }
    if v.is_empty()
        || v.len() > MAX_LABEL_VALUE
        || !v
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
    {
        return Err(format!(
            "label {k}: the value has 1 to {MAX_LABEL_VALUE} printable characters without quotes or backslashes"
        ));
    }
    Ok(())
}

/// Parses a peers file: `HOST[:PORT] [key=value ...]` a line, `#` comments, blank lines;
/// `resolve` turns a host name into an address. Duplicates (by address) are an error.
pub fn parse_list(
    text: &str,
    port: u16,
    max: usize,
    resolve: &dyn Fn(&str, u16) -> Result<SocketAddr, String>,
) -> Result<Vec<Peer>, String> {
    let mut out: Vec<Peer> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let mut words = line.split_whitespace();
        let host = words.next().unwrap_or_default();
        let (h, p) = split_host(host, port).map_err(at)?;
        if p == 0 {
            return Err(at(format!(
                "{host} has no port, and the mesh port is 0: write HOST:PORT"
            )));
        }
        let addr = match h.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, p),
            Err(_) => resolve(&h, p).map_err(|e| at(format!("{h}: {e}")))?,
        };
        let mut labels = Vec::new();
        for w in words {
            if labels.len() == MAX_LABELS {
                return Err(at(format!("more than {MAX_LABELS} labels")));
            }
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| at(format!("`{w}` is not a key=value label")))?;
            check_label(k, v).map_err(at)?;
            if labels.iter().any(|(lk, _): &(String, String)| lk == k) {
                return Err(at(format!("label {k} given twice")));
            }
            labels.push((k.to_string(), v.to_string()));
        }
        if let Some(dup) = out.iter().find(|q| q.addr == addr) {
            return Err(at(format!("{addr} is listed twice (also as {})", dup.name)));
        }
        if out.len() == max {
            return Err(format!(
                "more than {max} peers (--mesh-max-peers); line {} is one too many",
                i + 1
            ));
        }
        out.push(Peer {
            name: host.to_string(),
            addr,
            labels,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_dns(h: &str, _: u16) -> Result<SocketAddr, String> {
        Err(format!("no resolver in tests ({h})"))
    }

    #[test]
    fn a_file_with_ports_labels_and_comments() {
        let text = "# fleet\n10.0.0.1 zone=a rack=r3\n10.0.0.2:6000 zone=b\n\n[::1]:7000\n::2  # bare v6\n";
        let p = parse_list(text, 5209, 100, &no_dns).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].addr, "10.0.0.1:5209".parse().unwrap());
        assert_eq!(p[0].label("rack"), Some("r3"));
        assert_eq!(p[1].addr, "10.0.0.2:6000".parse().unwrap());
        assert_eq!(p[1].name, "10.0.0.2:6000");
        assert_eq!(p[2].addr, "[::1]:7000".parse().unwrap());
        assert_eq!(p[3].addr, "[::2]:5209".parse().unwrap());
    }

    #[test]
    fn bad_lines_are_named() {
        let e = |t: &str| parse_list(t, 1, 3, &no_dns).unwrap_err();
        assert!(e("10.0.0.1\n10.0.0.1\n").contains("line 2: 10.0.0.1:1 is listed twice"));
        assert!(e("10.0.0.1 zone\n").contains("line 1: `zone` is not a key=value label"));
        assert!(e("10.0.0.1 9z=a\n").contains("label name `9z`"));
        assert!(e("10.0.0.1 peer=a\n").contains("the agent's own"));
        assert!(e("10.0.0.1 __name__=a\n").contains("the agent's own"));
        let many: String = (0..17).map(|i| format!(" k{i}=v")).collect();
        assert!(e(&format!("10.0.0.1{many}\n")).contains("line 1: more than 16 labels"));
        assert!(e("10.0.0.1 a=\"x\"\n").contains("without quotes"));
        assert!(e("10.0.0.1:0\n").contains("`0` is not a port"));
        let p0 = parse_list("10.0.0.1\n", 0, 3, &no_dns).unwrap_err();
        assert!(
            p0.contains("line 1: 10.0.0.1 has no port, and the mesh port is 0"),
            "{p0}"
        );
        assert!(e("host.example\n").contains("line 1: host.example: no resolver"));
        assert!(e("1.1.1.1\n1.1.1.2\n1.1.1.3\n1.1.1.4\n").contains("more than 3 peers"));
    }

    #[test]
    fn names_resolve_through_the_resolver() {
        let fake = |h: &str, p: u16| -> Result<SocketAddr, String> {
            assert_eq!(h, "agent-1.mesh");
            Ok(SocketAddr::new("10.1.1.1".parse().unwrap(), p))
        };
        let p = parse_list("agent-1.mesh:6000 zone=a\n", 5209, 10, &fake).unwrap();
        assert_eq!(p[0].addr, "10.1.1.1:6000".parse().unwrap());
        assert_eq!(p[0].name, "agent-1.mesh:6000");
    }

    #[test]
    fn sources_parse() {
        assert_eq!(
            PeerSource::parse("dns:mesh.default.svc:6000", 5209).unwrap(),
            PeerSource::Dns {
                name: "mesh.default.svc".into(),
                port: 6000
            }
        );
        assert_eq!(
            PeerSource::parse("dns:mesh", 5209).unwrap(),
            PeerSource::Dns {
                name: "mesh".into(),
                port: 5209
            }
        );
        assert!(PeerSource::parse("dns:mesh:x", 1)
            .unwrap_err()
            .contains("not a port"));
        assert!(PeerSource::parse("dns:", 1)
            .unwrap_err()
            .contains("1 to 253"));
        assert_eq!(
            PeerSource::parse("peers.txt", 1).unwrap(),
            PeerSource::File("peers.txt".into())
        );
    }

    #[test]
    fn dns_members_come_from_the_resolver() {
        let p = PeerSource::Dns {
            name: "localhost".into(),
            port: 5209,
        }
        .load(5209, 10)
        .unwrap();
        assert!(!p.is_empty());
        assert!(p
            .iter()
            .all(|q| q.addr.ip().is_loopback() && q.addr.port() == 5209));
    }
}
