//! The Kubernetes manifest as shipped, played for real: deploy/Containerfile builds the image
//! from the static binary, and podman (`podman kube play`, which has Deployments but no
//! DaemonSet) runs deploy/kubernetes/mesh-deployment.yaml's three replicas on a network of
//! the test's own. They find each other the way they do in a cluster: through one DNS name
//! with every agent's address (dnsmasq on the network's gateway stands in for the cluster
//! DNS and the headless Service), and each agent's /metrics then shows its two peers.
//!
//! podman here needs runc, the cgroupfs manager, catatonit (the pods' infra containers) and
//! rlimits below the machine's hard limits: a containers.conf of the test's own, named by
//! CONTAINERS_CONF (docs/mesh.md, "Containers and Kubernetes").

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{
    is_root, kill, netns_unavailable, peer, run_cmd, skip, stderr, NetnsMode, PeerMode, SkipKind,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The static (musl) hakaru the image is built from: `HAKARU_STATIC_BIN` (.ci/run builds it
/// before the tests), else the debug build of the musl target if it is there.
fn static_bin() -> Option<PathBuf> {
    let p = std::env::var_os("HAKARU_STATIC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/x86_64-unknown-linux-musl/debug/hakaru"));
    if p.exists() {
        return Some(p);
    }
    let why = format!(
        "no static hakaru at {} (cargo build -p hakaru --target x86_64-unknown-linux-musl; .ci/run builds it)",
        p.display()
    );
    if PeerMode::from_env() == PeerMode::Required {
        panic!("{why}");
    }
    skip(SkipKind::Tool, &why);
    None
}

/// Everything the test made, undone by PID and name when dropped.
struct Podman {
    dir: PathBuf,
    conf: PathBuf,
    net: String,
    image: String,
    manifest: PathBuf,
    played: bool,
    dnsmasq: Option<std::process::Child>,
}

impl Podman {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf).args(args);
        c
    }

    fn must(&self, args: &[&str], limit: Duration) -> Output {
        let o = run_cmd(&mut self.cmd(args), limit);
        assert!(
            o.status.success(),
            "podman {}: {}",
            args.join(" "),
            stderr(&o)
        );
        o
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if self.played {
            let m = self.manifest.display().to_string();
            let _ = run_cmd(
                &mut self.cmd(&["kube", "play", "--down", &m]),
                Duration::from_secs(60),
            );
        }
        let _ = run_cmd(
            &mut self.cmd(&["network", "rm", "-f", &self.net]),
            Duration::from_secs(30),
        );
        let _ = run_cmd(
            &mut self.cmd(&["rmi", "-f", &self.image]),
            Duration::from_secs(30),
        );
        if let Some(c) = &mut self.dnsmasq {
            kill(c.id(), 9);
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// GET `path` from `ip:port`, or "" while it does not answer.
fn get(ip: &str, port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::new(ip.parse().unwrap(), port),
        Duration::from_secs(2),
    ) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn the_deployment_manifest_forms_a_mesh_under_podman() {
    if !is_root() {
        netns_unavailable(
            NetnsMode::from_env(),
            SkipKind::Root,
            "rootful podman needs root",
        );
        return;
    }
    let tools = [
        ("podman", "podman"),
        ("runc", "runc"),
        ("catatonit", "catatonit"),
        ("dnsmasq", "dnsmasq-base"),
    ];
    if !tools.iter().all(|(p, pkg)| peer(p, pkg)) {
        return;
    }
    let Some(bin) = static_bin() else { return };
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("hakaru-podman-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ctx")).unwrap();
    let conf = dir.join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = [\"nofile=10000:10000\", \"nproc=10000:10000\"]\n\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n",
    )
    .unwrap();
    std::fs::copy(&bin, dir.join("ctx/hakaru")).unwrap();
    let octet = 100 + pid % 100;
    let gw = format!("10.89.{octet}.1");
    let mut p = Podman {
        dir: dir.clone(),
        conf,
        net: format!("hk-mesh-{pid}"),
        image: format!("localhost/hakaru-mesh-test:{pid}"),
        manifest: dir.join("mesh-deployment.yaml"),
        played: false,
        dnsmasq: None,
    };
    let containerfile = repo().join("deploy/Containerfile").display().to_string();
    let ctx = dir.join("ctx").display().to_string();
    p.must(
        &[
            "build",
            "-q",
            "-f",
            &containerfile,
            "-t",
            &p.image.clone(),
            &ctx,
        ],
        Duration::from_secs(300),
    );
    p.must(
        &[
            "network",
            "create",
            "--subnet",
            &format!("10.89.{octet}.0/24"),
            &p.net.clone(),
        ],
        Duration::from_secs(60),
    );
    // The cluster DNS's part: one name, every agent's address (written once they have
    // addresses), nothing else (`--local`: no upstream, and no AAAA is a plain "no data").
    let hosts = dir.join("dns-hosts");
    std::fs::write(&hosts, "").unwrap();
    p.dnsmasq = Some(
        Command::new("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--local=/hakaru-mesh/",
            ])
            .arg(format!("--addn-hosts={}", hosts.display()))
            .arg(format!("--listen-address={gw}"))
            .args(["--bind-dynamic", "--port=53", "--user=root", "--pid-file"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq"),
    );
    // The manifest as shipped, with this image, this DNS server and a short refresh.
    let shipped =
        std::fs::read_to_string(repo().join("deploy/kubernetes/mesh-deployment.yaml")).unwrap();
    let mut m = shipped.clone();
    for (from, to) in [
        ("image: hakaru:latest", format!("image: {}", p.image)),
        ("\"--mesh-refresh\", \"10s\"]", "\"--mesh-refresh\", \"1s\", \"--mesh-interval\", \"200ms\"]".to_string()),
        ("    spec:\n      containers:", format!("    spec:\n      dnsPolicy: None\n      dnsConfig:\n        nameservers: [{gw}]\n      containers:")),
    ] {
        assert!(m.contains(from), "the manifest no longer has `{from}`");
        m = m.replacen(from, &to, 1);
    }
    assert!(m.contains("replicas: 3"));
    std::fs::write(&p.manifest, m).unwrap();
    let manifest = p.manifest.display().to_string();
    p.played = true;
    p.must(
        &["kube", "play", "--network", &p.net.clone(), &manifest],
        Duration::from_secs(300),
    );
    let ips: Vec<String> = (0..3)
        .map(|i| {
            let infra = p.must(
                &[
                    "pod",
                    "inspect",
                    &format!("hakaru-mesh-pod-{i}"),
                    "--format",
                    "{{.InfraContainerID}}",
                ],
                Duration::from_secs(30),
            );
            let id = String::from_utf8_lossy(&infra.stdout).trim().to_string();
            let o = p.must(
                &[
                    "inspect",
                    &id,
                    "--format",
                    "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                ],
                Duration::from_secs(30),
            );
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect();
    assert!(
        ips.iter()
            .all(|ip| ip.starts_with(&format!("10.89.{octet}."))),
        "{ips:?}"
    );
    std::fs::write(
        &hosts,
        ips.iter()
            .map(|ip| format!("{ip} hakaru-mesh\n"))
            .collect::<String>(),
    )
    .unwrap();
    kill(p.dnsmasq.as_ref().unwrap().id(), 1);
    // Each agent finds the other two at its next lookup, drops itself, and measures them.
    let count = |body: &str, ip: &str| -> f64 {
        super::mesh::sample(
            body,
            &format!("hakaru_mesh_rtt_seconds_count{{peer=\"{ip}:5209\"}}"),
        )
        .unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last: Vec<String>;
    loop {
        last = ips
            .iter()
            .map(|ip| get(ip, 5209, "/metrics"))
            .collect::<Vec<_>>();
        let formed = ips.iter().enumerate().all(|(i, me)| {
            let body = &last[i];
            super::mesh::sample(body, "hakaru_mesh_peers") == Some(2.0)
                && ips
                    .iter()
                    .filter(|ip| *ip != me)
                    .all(|ip| count(body, ip) >= 5.0)
                && !body.contains(&format!("peer=\"{me}:5209\""))
        });
        if formed || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for (i, me) in ips.iter().enumerate() {
        let body = &last[i];
        assert_eq!(
            super::mesh::sample(body, "hakaru_mesh_peers"),
            Some(2.0),
            "{me}: {body}"
        );
        for ip in ips.iter().filter(|ip| *ip != me) {
            assert!(count(body, ip) >= 5.0, "{me} -> {ip}: {body}");
        }
    }
    // And the report over the three agents from outside the pods.
    let file = dir.join("peers.txt");
    std::fs::write(
        &file,
        ips.iter().map(|ip| format!("{ip}\n")).collect::<String>(),
    )
    .unwrap();
    let o = super::common::run(
        &[
            "mesh",
            "report",
            "--peers",
            &file.display().to_string(),
            "--json",
        ],
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r = super::common::json(&o);
    assert_eq!(r["pairs"].as_array().unwrap().len(), 6, "{r}");
    // The agents name their peers `IP:5209` (from DNS), the report's file `IP`: the pairs
    // are joined on the address, so every pair is between two of the report's hosts.
    for p in r["pairs"].as_array().unwrap() {
        for end in ["src", "dst"] {
            assert!(ips.iter().any(|ip| p[end] == ip.as_str()), "{p}");
        }
    }
    assert!(
        r["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["answered"] == true),
        "{r}"
    );
    drop(p);
}
