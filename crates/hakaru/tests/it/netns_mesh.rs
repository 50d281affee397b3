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
    agent_logged(b, i, peers, port, extra).0
}

/// [`agent`], with the log lines up to the one saying the agent is on.
fn agent_logged(
    b: &Bridge,
    i: usize,
    peers: &str,
    port: u16,
    extra: &[&str],
) -> (ServerProc, Vec<String>) {
    let m = &b.members[i];
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &m.ns, bin()]);
    let port = port.to_string();
    let mut args = vec!["--mesh", peers, "--mesh-port", &port];
    args.extend_from_slice(extra);
    let s = ServerProc::start_with(cmd, &m.ip, &args);
    let mut lines = Vec::new();
    while let Ok(l) = s.log.recv_timeout(Duration::from_secs(10)) {
        let on = l.contains("mesh agent on");
        lines.push(l);
        if on {
            return (s, lines);
        }
    }
    panic!("the agent in {} did not start: {lines:?}", m.ns);
}

/// GET `path` from member `i`'s agent, from inside its namespace (curl).
fn http_in(b: &Bridge, i: usize, port: u16, path: &str) -> String {
    let m = &b.members[i];
    let o = run_cmd(
        Command::new("ip")
            .args(["netns", "exec", &m.ns, "curl", "-s"])
            .arg(format!("http://{}:{port}{path}", m.ip)),
        Duration::from_secs(20),
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
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
                // A debug-built agent on a loaded machine may take longer than the default
                // 3 s to answer.
                "--timeout",
                "20s",
                "--json",
            ]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    json(&o)
}

#[test]
fn twenty_agents_find_the_host_losing_a_tenth_of_its_inbound_probes() {
    const N: usize = 20;
    let Some(b) = Bridge::setup(N, &[("nft", "nftables")]) else {
        return;
    };
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("hakaru-netns-mesh-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peers.txt");
    let lines: String = b
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| format!("{} rack=r{}\n", m.ip, i / 5))
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
        "100ms",
        "--mesh-window",
        "10s",
        "--mesh-timeout",
        "1s",
        "--mesh-max-rate",
        "1000",
    ];
    let _agents: Vec<ServerProc> = (0..N).map(|i| agent(&b, i, &peers, port, &fast)).collect();
    let ips: Vec<String> = b.members.iter().map(|m| m.ip.clone()).collect();
    // The window then holds no probe sent while some agent was still starting.
    std::thread::sleep(Duration::from_secs(12));
    // A window in which the busy machine held an agent off the CPU past the timeout can read
    // loss the path does not have; the next window (10 s on) is judged again, up to three.
    // A mesh that misreads the path fails all three, each printing why.
    let mut why = Vec::new();
    for round in 0..3 {
        if round > 0 {
            std::thread::sleep(Duration::from_secs(11));
        }
        match lossy_host_verdict(&report(&b, 0, &peers, port), &ips) {
            Ok(()) => break,
            Err(e) => {
                eprintln!("mesh: window {round}: {e}");
                why.push(e);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(why.len() < 3, "three windows misread: {why:?}");
}

/// Whether a report reads the truth of the lossy-host test: every pair probed, member 2
/// losing ~10 % of what comes in and nothing else losing anything, member 2 the one suspect.
fn lossy_host_verdict(r: &Value, ip: &[String]) -> Result<(), String> {
    let n = ip.len();
    let pairs = r["pairs"].as_array().ok_or(format!("no pairs: {r}"))?;
    if pairs.len() != n * (n - 1) {
        return Err(format!("{} pairs, not {}: {r}", pairs.len(), n * (n - 1)));
    }
    if let Some(h) = r["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["answered"] != true)
    {
        return Err(format!("a host did not answer: {h}"));
    }
    let mut to_bad = Vec::new();
    for p in pairs {
        let loss = p["loss"].as_f64().unwrap_or(f64::NAN);
        let probes = p["probes"].as_u64().unwrap_or(0);
        if probes < 70 {
            return Err(format!("a pair with under 70 probes: {p}"));
        }
        if p["dst"] == ip[2].as_str() {
            to_bad.push((loss, probes));
        } else if loss.is_nan() || loss > 0.02 {
            // Nothing drops them; a CPU stall past the timeout could cost a probe or two,
            // not a pair's verdict.
            return Err(format!("loss on a clean pair: {p}"));
        }
    }
    // The truth is 10 %: 19 pairs of ~100 probes each put the mean within 2.5 % of it
    // (over three standard deviations).
    let lost: f64 = to_bad.iter().map(|(l, n)| l * *n as f64).sum();
    let sent: f64 = to_bad.iter().map(|(_, n)| *n as f64).sum();
    let mean = lost / sent;
    eprintln!(
        "mesh: loss to the lossy host {:.2} % over {sent} probes (truth 10 %)",
        mean * 100.0
    );
    if !(0.075..=0.125).contains(&mean) {
        return Err(format!("mean loss to the lossy host {mean}, truth 0.10"));
    }
    let s = r["suspects"].as_array().cloned().unwrap_or_default();
    if s.len() != 1 || s[0]["host"] != ip[2].as_str() {
        return Err(format!("suspects {s:?}, not only {}", ip[2]));
    }
    let why = s[0]["reason"].as_str().unwrap_or("");
    if !why.contains("pairs with it are bad (mean loss to it ") {
        return Err(format!("the suspect's reason: {why}"));
    }
    Ok(())
}

/// dnsmasq in the bridge's hub namespace answering one name from a hosts file, and every
/// member's /etc/netns/NS/resolv.conf pointing at it (`ip netns exec` puts that file in place
/// of /etc/resolv.conf); stopped by its PID and the files removed when dropped.
struct Dns {
    child: std::process::Child,
    hosts: PathBuf,
    dirs: Vec<PathBuf>,
}

impl Dns {
    fn start(b: &Bridge) -> Dns {
        let x = b.members[0].ip.rsplit_once('.').unwrap().0.to_string();
        let server = format!("{x}.254");
        in_ns_must(
            &b.hub,
            &["ip", "addr", "add", &format!("{server}/24"), "dev", "br0"],
        );
        let dir =
            std::env::temp_dir().join(format!("hakaru-dns-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, "").unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &b.hub,
                "dnsmasq",
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
            ])
            .arg(format!("--addn-hosts={}", hosts.display()))
            .arg(format!("--listen-address={server}"))
            .args([
                "--bind-interfaces",
                "--port=53",
                "--user=root",
                "--pid-file",
                "--log-facility=-",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dnsmasq");
        let mut dirs = vec![dir];
        for m in &b.members {
            let d = PathBuf::from("/etc/netns").join(&m.ns);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("resolv.conf"),
                format!("nameserver {server}\noptions timeout:1 attempts:2\n"),
            )
            .unwrap();
            dirs.push(d);
        }
        // Up once it answers a name it has (its own hosts file is empty; try a query).
        std::thread::sleep(Duration::from_millis(500));
        Dns { child, hosts, dirs }
    }

    /// The name `mesh.hakaru.test` now has these addresses; dnsmasq reads its file again.
    fn set(&self, ips: &[&str]) {
        let text: String = ips
            .iter()
            .map(|ip| format!("{ip} mesh.hakaru.test\n"))
            .collect();
        std::fs::write(&self.hosts, text).unwrap();
        super::common::kill(self.child.id(), 1);
        std::thread::sleep(Duration::from_millis(300));
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        super::common::kill(self.child.id(), 9);
        let _ = self.child.wait();
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn dns_members_from_dnsmasq_are_probed_and_followed_as_the_name_changes() {
    let Some(b) = Bridge::setup(3, &[("dnsmasq", "dnsmasq-base")]) else {
        return;
    };
    let dns = Dns::start(&b);
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
    // The name does not resolve yet: the agents start anyway, with no peers, and say why.
    let a: Vec<ServerProc> = (0..3)
        .map(|i| agent(&b, i, "dns:mesh.hakaru.test", port, &extra))
        .collect();
    let v = http_in(&b, 1, port, "/mesh");
    assert!(
        v.contains("\"peers\":[]") && v.contains("dns:mesh.hakaru.test: "),
        "{v}"
    );
    let ip = |i: usize| b.members[i].ip.as_str();
    dns.set(&[ip(0), ip(1)]);
    std::thread::sleep(Duration::from_secs(3));
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
    dns.set(&[ip(0), ip(1), ip(2)]);
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
    assert!(r["suspects"].as_array().unwrap().is_empty(), "{r}");
    // A member the name has no more is dropped.
    dns.set(&[ip(0), ip(2)]);
    std::thread::sleep(Duration::from_secs(3));
    let r = report(&b, 0, "dns:mesh.hakaru.test", port);
    assert_eq!(dsts(&r, &at(0)), [at(2)], "{r}");
    // The failed lookups at the start are counted.
    let body = http_in(&b, 1, port, "/metrics");
    let errors = super::mesh::sample(&body, "hakaru_mesh_peer_list_errors_total").unwrap_or(0.0);
    assert!(errors >= 1.0, "{body}");
    drop(a);
}
