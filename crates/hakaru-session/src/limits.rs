//! The server's limits that need no I/O to check, shared by every protocol's machine and
//! driver.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which sources are one client: IPv4 and IPv6 addresses in one network of these lengths
/// (`--client-prefix-v4`, `--client-prefix-v6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefixes {
    pub v4: u8,
    pub v6: u8,
}

impl Default for Prefixes {
    /// An IPv4 address, an IPv6 /64.
    fn default() -> Self {
        Prefixes { v4: 32, v6: 64 }
    }
}

impl Prefixes {
    /// The client `ip` belongs to: its network under the prefix lengths (IPv4-mapped IPv6
    /// addresses as IPv4).
    pub fn client_of(&self, ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let len = self.v4.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                Client {
                    net: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask)),
                    len,
                    full: 32,
                }
            }
            IpAddr::V6(v6) => {
                let len = self.v6.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                Client {
                    net: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)),
                    len,
                    full: 128,
                }
            }
        }
    }
}

/// A client as the limits count it: an address, or a network of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client {
    net: IpAddr,
    len: u8,
    full: u8,
}

impl Client {
    /// "one address", or "one /64 network", for refusals.
    pub fn one(&self) -> String {
        if self.len == self.full {
            "one address".into()
        } else {
            format!("one /{} network", self.len)
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.len == self.full {
            write!(f, "{}", self.net)
        } else {
            write!(f, "{}/{}", self.net, self.len)
        }
    }
}

/// Checks the rate a test asks the server to send against `--max-rate` (bits per second of
/// payload, all flows together). `rate` is per flow; `None` asks for as fast as possible.
pub fn check_send_rate(
    max: Option<f64>,
    server_sends: bool,
    rate: Option<f64>,
    flows: u32,
) -> Result<(), String> {
    let (Some(max), true) = (max, server_sends) else {
        return Ok(());
    };
    let words = |b: f64| hakaru_model::BitRate(b).to_string();
    match rate {
        None => Err(format!(
            "an unlimited rate asks the server to send as fast as it can; it sends at most {} (--max-rate): give -b",
            words(max)
        )),
        Some(r) if r * f64::from(flows) > max => Err(format!(
            "{} flow(s) at {} ask the server to send {}; it sends at most {} (--max-rate)",
            flows,
            words(r),
            words(r * f64::from(flows)),
            words(max)
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_send_rate;

    #[test]
    fn send_rate_limit() {
        assert!(check_send_rate(None, true, None, 8).is_ok());
        assert!(check_send_rate(Some(1e9), false, None, 8).is_ok());
        assert!(check_send_rate(Some(1e9), true, Some(1e8), 10).is_ok());
        let e = check_send_rate(Some(1e9), true, Some(1e8), 11).unwrap_err();
        assert!(e.contains("--max-rate") && e.contains("11 flow(s)"), "{e}");
        let e = check_send_rate(Some(1e9), true, None, 1).unwrap_err();
        assert!(e.contains("unlimited"), "{e}");
    }
}
