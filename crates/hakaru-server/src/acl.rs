//! Access lists: which source addresses the server talks to at all. Checked before any byte
//! of a connection is read and before any datagram is looked at, on every port the server
//! answers (control/data TCP, the UDP port, the sockperf port).

use std::net::IpAddr;

use ipnet::IpNet;

/// `--allow` and `--deny` networks. Deny wins; with any allow entry, only allowed addresses
/// get in; with none, everyone not denied does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl Acl {
    /// An access list from `--allow` and `--deny` values (CIDR, or a bare address for one
    /// host). The error names the value that is not one.
    pub fn parse(allow: &[String], deny: &[String]) -> Result<Acl, String> {
        let parse = |flag: &str, v: &String| -> Result<IpNet, String> {
            let t = v.trim();
            t.parse::<IpNet>()
                .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
                .map(|n| n.trunc())
                .map_err(|_| {
                    format!("{flag} {v}: not an address or network (e.g. 10.0.0.0/8, 2001:db8::/32, 192.0.2.7)")
                })
        };
        Ok(Acl {
            allow: allow
                .iter()
                .map(|v| parse("--allow", v))
                .collect::<Result<_, _>>()?,
            deny: deny
                .iter()
                .map(|v| parse("--deny", v))
                .collect::<Result<_, _>>()?,
        })
    }

    /// True when `ip` may talk to the server. IPv4-mapped IPv6 addresses (a dual-stack socket's
    /// view of an IPv4 client) are checked as the IPv4 address they carry.
    pub fn permits(&self, ip: IpAddr) -> bool {
        if self.is_open() {
            return true;
        }
        let ip = ip.to_canonical();
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }

    /// True when no list was given.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn acl(allow: &[&str], deny: &[&str]) -> Acl {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Acl::parse(&v(allow), &v(deny)).unwrap()
    }

    #[test]
    fn open_by_default() {
        let a = acl(&[], &[]);
        assert!(a.is_open());
        assert!(a.permits(ip("192.0.2.1")));
        assert!(a.permits(ip("::1")));
    }

    #[test]
    fn deny_wins_over_allow() {
        let a = acl(&["10.0.0.0/8"], &["10.1.0.0/16", "10.2.3.4"]);
        assert!(a.permits(ip("10.9.9.9")));
        assert!(!a.permits(ip("10.1.2.3")));
        assert!(!a.permits(ip("10.2.3.4")));
        assert!(a.permits(ip("10.2.3.5")));
        // Not in any allow entry.
        assert!(!a.permits(ip("192.0.2.1")));
        assert!(!a.permits(ip("2001:db8::1")));
    }

    #[test]
    fn deny_only_lets_the_rest_in_and_mapped_v4_is_v4() {
        let a = acl(&[], &["127.0.0.2/32"]);
        assert!(!a.permits(ip("127.0.0.2")));
        assert!(!a.permits(ip("::ffff:127.0.0.2")));
        assert!(a.permits(ip("127.0.0.1")));
        let v6 = acl(&["2001:db8::/32"], &[]);
        assert!(v6.permits(ip("2001:db8:1::5")));
        assert!(!v6.permits(ip("2001:db9::5")));
    }

    #[test]
    fn host_bits_are_ignored_and_bad_values_are_named() {
        let a = acl(&["10.1.2.3/8"], &[]);
        assert!(a.permits(ip("10.200.0.1")));
        let e = Acl::parse(&["10.0.0.0/33".into()], &[]).unwrap_err();
        assert!(e.contains("--allow 10.0.0.0/33"), "{e}");
        let e = Acl::parse(&[], &["example.com".into()]).unwrap_err();
        assert!(e.contains("--deny example.com"), "{e}");
    }
}
