//! The mesh with known truth: agents in namespaces on one bridge, nftables dropping a known
//! share of the probes to one host; and members found through DNS (the namespaces' own hosts
//! files, which `ip netns exec` puts in place of /etc/hosts), followed as they change.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::common::{bin, free_port, json, run_cmd, stderr, ServerProc};
use super::netns_bridge::{in_ns_must, Bridge};

/// Starts an agent in member `i`'s namespace.
fn agent(b: &Bridge, i: usize, peers: &str, port: u16, extra: &[&str]) -> ServerProc {
    let m = &b.members[i];
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &m.ns, bin()]);
    let port = port.to_string();
    let mut args = vec!["--mesh", peers, "--mesh-port", &port];
    args.extend_from_slice(extra);
    let s = ServerProc::start_with(cmd, &m.ip, &args);
    assert!(
        s.wait_log("mesh agent on", Duration::from_secs(10))
            .is_some(),
        "the agent in {} did not start",
        m.ns
    );
    s
}

/// `hakaru mesh report --json` run in member `i`'s namespace.
fn report(b: &Bridge, i: usize, peers: &str, port: u16) -> Value {
    let o = run_cmd(
        Command::new("ip")
            .args(["netns", "exec", &b.members[i].ns, bin()])
            .args([
                "mesh",
                "report",
                "--peers",
                peers,
                "--port",
                &port.to_string(),
                "--json",
            ]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    json(&o)
}

#[test]
fn a_host_losing_a_tenth_of_its_inbound_probes_is_found_and_measured() {
    let Some(b) = Bridge::setup(5, &[("nft", "nftables")]) else {
        return;
    };
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("hakaru-netns-mesh-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peers.txt");
    let lines: String = b
        .members
        .iter()
        .map(|m| format!("{} rack=r{}\n", m.ip, m.ip.len() % 2))
        .collect();
    std::fs::write(&file, lines).unwrap();
    let peers = file.display().to_string();
    // Member 2 drops 10 % of the probes it receives (UDP to the mesh port, type byte 1: the
    // sixth byte of the payload), and none of the replies to its own probes.
    let ns = &b.members[2].ns;
    in_ns_must(ns, &["nft", "add table inet hkmesh"]);
    in_ns_must(
        ns,
        &[
            "nft",
            "add chain inet hkmesh in { type filter hook input priority 0; }",
        ],
    );
    let rule = format!(
        "add rule inet hkmesh in udp dport {port} @th,104,8 1 numgen random mod 100 < 10 drop"
    );
    in_ns_must(ns, &["nft", &rule]);
    let fast = [
        "--mesh-interval",
        "50ms",
        "--mesh-window",
        "10s",
        "--mesh-timeout",
        "500ms",
    ];
    let _agents: Vec<ServerProc> = (0..5).map(|i| agent(&b, i, &peers, port, &fast)).collect();
    // The window then holds no probe sent while some agent was still starting.
    std::thread::sleep(Duration::from_secs(12));
    let r = report(&b, 0, &peers, port);
    let _ = std::fs::remove_dir_all(&dir);
    let ip = |i: usize| b.members[i].ip.clone();
    let pairs = r["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 20, "{r}");
    let mut to_bad = Vec::new();
    for p in pairs {
        let loss = p["loss"].as_f64().unwrap();
        let probes = p["probes"].as_u64().unwrap();
        assert!(probes >= 150, "{p}");
        if p["dst"] == ip(2) {
            to_bad.push((loss, probes));
            assert!((0.03..=0.20).contains(&loss), "{p}");
        } else {
            assert_eq!(loss, 0.0, "{p}");
        }
    }
    // The truth is 10 %: four pairs of ~200 probes each put the mean within 3.5 % of it
    // (three standard deviations).
    let lost: f64 = to_bad.iter().map(|(l, n)| l * *n as f64).sum();
    let sent: f64 = to_bad.iter().map(|(_, n)| *n as f64).sum();
    let mean = lost / sent;
    eprintln!(
        "mesh: loss to the lossy host {:.2} % over {sent} probes (truth 10 %)",
        mean * 100.0
    );
    assert!((0.065..=0.135).contains(&mean), "{mean}");
    let s = r["suspects"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{r}");
    assert_eq!(s[0]["host"], ip(2));
    let why = s[0]["reason"].as_str().unwrap();
    assert!(
        why.contains("4 of 8 pairs with it are bad") && why.contains("from it 0.0 %"),
        "{why}"
    );
}

/// /etc/netns/NS/hosts for each namespace, removed when dropped.
struct HostsFiles(Vec<PathBuf>);

impl HostsFiles {
    fn write(&self, text: &str) {
        for d in &self.0 {
            std::fs::write(d.join("hosts"), text).unwrap();
        }
    }
}

impl Drop for HostsFiles {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn dns_members_are_probed_and_followed_as_the_name_changes() {
    let Some(b) = Bridge::setup(3, &[]) else {
        return;
    };
    let hosts = HostsFiles(
        b.members
            .iter()
            .map(|m| {
                let d = PathBuf::from("/etc/netns").join(&m.ns);
                std::fs::create_dir_all(&d).unwrap();
                d
            })
            .collect(),
    );
    let name_for = |n: usize| -> String {
        let mut t = String::from("127.0.0.1 localhost\n");
        for m in &b.members[..n] {
            t.push_str(&format!("{} mesh.hakaru.test\n", m.ip));
        }
        t
    };
    hosts.write(&name_for(2));
    let port = free_port();
    // A short window: a member is answered only once the others' lookups list it (no
    // reflection), so its first probes after a change may go unanswered for a refresh.
    let extra = [
        "--mesh-refresh",
        "1s",
        "--mesh-interval",
        "100ms",
        "--mesh-window",
        "2s",
    ];
    let _a: Vec<ServerProc> = (0..3)
        .map(|i| agent(&b, i, "dns:mesh.hakaru.test", port, &extra))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let dsts = |r: &Value, src: &str| -> Vec<String> {
        r["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["src"] == src)
            .map(|p| p["dst"].as_str().unwrap().to_string())
            .collect()
    };
    let at = |i: usize| format!("{}:{port}", b.members[i].ip);
    let r = report(&b, 0, "dns:mesh.hakaru.test", port);
    assert_eq!(r["hosts"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(dsts(&r, &at(0)), [at(1)], "{r}");
    // The name gains the third member: every agent probes it after its next lookup.
    hosts.write(&name_for(3));
    std::thread::sleep(Duration::from_secs(5));
    let r = report(&b, 2, "dns:mesh.hakaru.test", port);
    assert_eq!(dsts(&r, &at(0)), [at(1), at(2)], "{r}");
    assert_eq!(dsts(&r, &at(2)), [at(0), at(1)], "{r}");
    let p = r["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["src"] == at(2) && p["dst"] == at(0))
        .unwrap();
    assert!(p["probes"].as_u64().unwrap() >= 5, "{p}");
    assert_eq!(p["loss"].as_f64(), Some(0.0), "{p}");
    // A member the name has no more is dropped.
    let mut t = String::from("127.0.0.1 localhost\n");
    t.push_str(&format!(
        "{} mesh.hakaru.test\n{} mesh.hakaru.test\n",
        b.members[0].ip, b.members[2].ip
    ));
    hosts.write(&t);
    std::thread::sleep(Duration::from_secs(3));
    let r = report(&b, 0, "dns:mesh.hakaru.test", port);
    assert_eq!(dsts(&r, &at(0)), [at(2)], "{r}");
    drop(hosts);
}
