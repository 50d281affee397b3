//! Several hosts on one switch: a bridge in a hub namespace and one namespace per host, each
//! joined to the bridge by a veth pair, for the plan tests (many senders, one receiver).
//!
//! Addresses are 198.19.X.N/24 (RFC 2544 benchmarking space) inside namespaces the test
//! creates; nothing reaches the root namespace. Dropping the bridge kills what its tests
//! started there (by PID) and deletes every namespace, which removes the veths, qdiscs and the
//! bridge with them.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::MutexGuard;
use std::time::Duration;

use super::common::{run_cmd, stderr};
use super::netns_link::{ip, must, netns_setup, SERIAL};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One host on the bridge.
pub(super) struct Member {
    /// Its namespace.
    pub ns: String,
    /// Its address (no prefix).
    pub ip: String,
    /// Its end of the veth, inside `ns`.
    pub dev: &'static str,
    /// The bridge's end of its veth, inside the hub namespace (egress = traffic to it).
    pub port: String,
}

/// A bridge with `n` member namespaces.
pub(super) struct Bridge {
    pub hub: String,
    pub members: Vec<Member>,
    created: Vec<String>,
    _serial: MutexGuard<'static, ()>,
}

impl Bridge {
    /// Builds the bridge, or says why this machine cannot and returns `None` (the test then
    /// returns early; under HAKARU_TEST_NETNS=required it fails instead: `netns_setup`).
    /// `tools` are the programs the test needs besides `ip`, each with the Debian package
    /// `.ci/run` installs it from.
    pub fn setup(n: usize, tools: &[(&str, &str)]) -> Option<Bridge> {
        netns_setup(tools, || Bridge::create(n))
    }

    fn create(n: usize) -> Result<Bridge, String> {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let x = (pid + k) % 256;
        let mut b = Bridge {
            hub: format!("hk-hub-{pid}-{k}"),
            members: Vec::new(),
            created: Vec::new(),
            _serial: serial,
        };
        let o = ip(&["netns", "add", &b.hub]);
        if !o.status.success() {
            return Err(format!(
                "`ip netns add {}` failed: {}",
                b.hub,
                stderr(&o).trim()
            ));
        }
        b.created.push(b.hub.clone());
        let hub = b.hub.clone();
        must(&["-n", &hub, "link", "add", "br0", "type", "bridge"]);
        must(&["-n", &hub, "link", "set", "br0", "up"]);
        must(&["-n", &hub, "link", "set", "lo", "up"]);
        for i in 0..n {
            let ns = format!("hk-m{i}-{pid}-{k}");
            must(&["netns", "add", &ns]);
            b.created.push(ns.clone());
            let port = format!("p{i}");
            must(&[
                "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]);
            must(&["-n", &hub, "link", "set", &port, "master", "br0", "up"]);
            let ip_addr = format!("198.19.{x}.{}", i + 1);
            must(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{ip_addr}/24"),
                "dev",
                "eth0",
            ]);
            must(&["-n", &ns, "link", "set", "lo", "up"]);
            // Single packets on the wire, as a real NIC sends them: the kernel splits GSO
            // batches before this veth, so packet counters count datagrams and segments.
            must(&[
                "-n",
                &ns,
                "link",
                "set",
                "dev",
                "eth0",
                "gso_max_segs",
                "1",
                "up",
            ]);
            b.members.push(Member {
                ns,
                ip: ip_addr,
                dev: "eth0",
                port,
            });
        }
        Ok(b)
    }

    /// Shapes the traffic the bridge sends to member `i` (tbf on its bridge port).
    pub fn shape_to(&self, i: usize, rate: &str) {
        self.tbf_to(i, &["rate", rate, "burst", "64kb", "latency", "50ms"]);
    }

    /// Makes the bridge's port toward member `i` a bottleneck of `rate` with a FIFO of `limit`
    /// bytes (tbf): a box in the middle, as a router is. A tbf on a sender's own interface
    /// would hold far less, since TCP keeps each socket's bytes in its host's qdisc small (TCP
    /// small queues).
    pub fn queue_to(&self, i: usize, rate: &str, limit: u32) {
        let limit = limit.to_string();
        self.tbf_to(i, &["rate", rate, "burst", "16kb", "limit", &limit]);
    }

    /// A tbf with `params` as the root qdisc of the bridge's port toward member `i`.
    fn tbf_to(&self, i: usize, params: &[&str]) {
        let port = &self.members[i].port;
        let mut argv = vec!["tc", "qdisc", "replace", "dev", port, "root", "tbf"];
        argv.extend_from_slice(params);
        in_ns_must(&self.hub, &argv);
    }

    /// Bytes waiting now in the queue of the bridge's port toward member `i` (its root qdisc's
    /// backlog, from `tc -s -j`: exact bytes, where the text form rounds to Kb).
    #[cfg(target_os = "linux")] // its one user, netns_rpm, is Linux-only
    pub fn backlog_to(&self, i: usize) -> u64 {
        let o = in_ns_must(
            &self.hub,
            &[
                "tc",
                "-s",
                "-j",
                "qdisc",
                "show",
                "dev",
                &self.members[i].port,
            ],
        );
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("`tc -s -j qdisc show`: {e}"));
        doc.as_array()
            .and_then(|q| q.iter().find(|q| q["root"] == true))
            .and_then(|q| q["backlog"].as_u64())
            .unwrap_or_else(|| panic!("no root qdisc's backlog in `tc -s -j qdisc show`: {doc}"))
    }

    /// Shapes the traffic member `i` sends (tbf on its own veth end).
    pub fn shape_from(&self, i: usize, rate: &str) {
        let m = &self.members[i];
        in_ns_must(
            &m.ns,
            &[
                "tc", "qdisc", "add", "dev", m.dev, "root", "tbf", "rate", rate, "burst", "64kb",
                "latency", "50ms",
            ],
        );
    }

    /// Packets member `i`'s veth end has received so far.
    pub fn rx_packets(&self, i: usize) -> u64 {
        let m = &self.members[i];
        let o = in_ns_must(
            &m.ns,
            &[
                "cat",
                &format!("/sys/class/net/{}/statistics/rx_packets", m.dev),
            ],
        );
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    }

    /// Names of the programs running in member `i`'s namespace (from /proc/PID/comm).
    pub fn programs_in(&self, i: usize) -> Vec<String> {
        let o = ip(&["netns", "pids", &self.members[i].ns]);
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
            .map(|c| c.trim().to_string())
            .collect()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for ns in &self.created {
            // Whatever a failed test left running in the namespaces is stopped by its PID.
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            match Command::new("ip").args(["netns", "del", ns]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("netns: could not delete {ns}: {}", stderr(&o).trim()),
                Err(e) => eprintln!("netns: could not run `ip netns del {ns}`: {e}"),
            }
        }
    }
}

/// Runs a program in a namespace and fails the test if it fails.
pub(super) fn in_ns_must(ns: &str, argv: &[&str]) -> Output {
    let o = run_cmd(
        Command::new("ip").args(["netns", "exec", ns]).args(argv),
        Duration::from_secs(20),
    );
    assert!(
        o.status.success(),
        "`{}` in {ns} failed: {}",
        argv.join(" "),
        stderr(&o).trim()
    );
    o
}
