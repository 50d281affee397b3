//! Plans across hosts in network namespaces on one bridge, with known truth: the seeds'
//! packet-rate scenario (3 senders x 64 flows into 1) against the receiver's own veth
//! counter, and the dedicated-line scenario (8 into 1, then 1 into 8) on tbf-shaped links;
//! and a plan through real sshd servers with the coordinator's binary pushed over ssh. After
//! every plan no hakaru process is left in any namespace.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{bin, kill, run_cmd, stderr};
use super::netns_bridge::Bridge;
use super::plan::{plan_run, Scratch};

/// tbf rate of the shaped links, bits per second, and as tc spells it.
const SHAPED_BPS: f64 = 200e6;
const SHAPED_TC: &str = "200mbit";
/// Goodput of a full segment over its frame as tbf charges it (see netns.rs).
const TCP_EFFICIENCY: f64 = 1448.0 / 1514.0;

fn hosts_toml(b: &Bridge, names: &[&str]) -> String {
    names
        .iter()
        .zip(&b.members)
        .map(|(n, m)| {
            format!(
                "[hosts.{n}]\naddress = \"{}\"\nnetns = \"{}\"\n",
                m.ip, m.ns
            )
        })
        .collect()
}

fn no_hakaru_left(b: &Bridge) {
    for i in 0..b.members.len() {
        let progs = b.programs_in(i);
        assert!(
            !progs.iter().any(|p| p.starts_with("hakaru")),
            "hakaru still runs in {}: {progs:?}",
            b.members[i].ns
        );
    }
}

fn agg<'a>(step: &'a Value, receiver: &str) -> &'a Value {
    step["aggregates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["receiver"] == receiver)
        .unwrap_or_else(|| panic!("no aggregate for {receiver}: {step}"))
}

#[test]
fn three_senders_by_64_flows_reconcile_with_the_receiver_veth() {
    let Some(b) = Bridge::setup(4, &[]) else {
        return;
    };
    let s = Scratch::new("netns-pps");
    // Paced below what two shared CPUs forward, so every datagram the veth delivers reaches a
    // socket and the two counts must agree (3 x 64 flows x 400/s = 76,800 datagrams/s).
    let file = s.write(
        "plan.toml",
        &format!(
            "{}\n[[step]]\nkind = \"pps\"\nreceivers = [\"rx\"]\nsenders = [\"s1\", \"s2\", \"s3\"]\nparallel = 64\nrate = 400\ntime = 3\n",
            hosts_toml(&b, &["rx", "s1", "s2", "s3"])
        ),
    );
    let before = b.rx_packets(0);
    let (o, doc) = plan_run(
        &mut Command::new(bin()),
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(120),
    );
    let after = b.rx_packets(0);
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    let step = &doc["steps"][0];
    let runs = step["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let mut received = 0u64;
    for r in runs {
        let flows = r["result"]["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 64, "every flow reported");
        for f in flows {
            assert!(
                f["udp"]["received_datagrams"].as_u64().unwrap() > 0,
                "flow {} of {} received nothing",
                f["id"],
                r["sender"]
            );
        }
        received += r["result"]["totals"][0]["udp"]["received_datagrams"]
            .as_u64()
            .unwrap();
    }
    let a = agg(step, "rx");
    assert_eq!(a["flows"], 192);
    assert_eq!(a["received_datagrams"].as_u64().unwrap(), received);
    // The veth also carried the control connections, hellos and ARP: a few hundred packets.
    let veth = after - before;
    let diff = (veth as f64 - received as f64).abs() / received as f64;
    eprintln!(
        "datagrams received {received}, receiver veth rx_packets {veth} ({:.3} %)",
        diff * 100.0
    );
    assert!(
        veth >= received,
        "the veth delivered fewer packets ({veth}) than the sockets received ({received})"
    );
    assert!(diff < 0.005, "received {received} vs veth {veth}");
    assert_eq!(a["nic_check"]["agrees"], true, "{}", a["nic_check"]);
    let rel = &step["release"];
    assert_eq!(rel["clients"], 3);
    assert!(rel["skew_ms"].as_f64().unwrap() >= 0.0);
    // Released at an instant 20 ms + 1 ms a client ahead; the clients said how early their
    // `go` came: within the lead (a netns launcher delivers in well under 23 ms).
    assert_eq!(rel["lead_ms"].as_f64(), Some(23.0), "{rel}");
    let margin = rel["go_margin_ms"].as_f64().expect("go_margin_ms");
    assert!(margin > 0.0 && margin <= 23.0, "{rel}");
    assert_eq!(rel["late"], 0, "{rel}");
    // The instant went to the servers (`start_at`): every sender's data began at it, and
    // said when (began_unix), both ends of each run.
    let late = rel["start_late_ms"].as_f64().expect("start_late_ms");
    let spread = rel["start_skew_ms"].as_f64().expect("start_skew_ms");
    assert!(late >= 0.0 && spread >= 0.0, "{rel}");
    for r in step["runs"].as_array().unwrap() {
        let res = &r["result"];
        let began = res["client"]["began_unix"]
            .as_f64()
            .expect("client began_unix");
        let start = res["client"]["window_start_unix"].as_f64().unwrap();
        assert!(
            began >= start,
            "began {began} before the side's start {start}"
        );
        assert!(res["server_end"]["began_unix"].as_f64().is_some(), "{res}");
    }
    no_hakaru_left(&b);
}

#[test]
fn eight_into_one_then_one_into_eight_on_shaped_links() {
    let Some(b) = Bridge::setup(9, &[("tc", "iproute2")]) else {
        return;
    };
    let s = Scratch::new("netns-8x1");
    // The dedicated line: 200 Mbit/s each way at the DUT (member 0).
    b.shape_to(0, SHAPED_TC);
    b.shape_from(0, SHAPED_TC);
    let names = ["dut", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"];
    let aux: Vec<String> = names[1..].iter().map(|n| format!("\"{n}\"")).collect();
    let file = s.write(
        "plan.toml",
        &format!(
            "{}\n[[step]]\nname = \"8 into 1\"\nkind = \"tcp\"\nreceivers = [\"dut\"]\nsenders = [{aux}]\nparallel = 2\ntime = 5\nomit = 1\ncongestion = \"cubic\"\n\n[[step]]\nname = \"1 into 8\"\nkind = \"tcp\"\nreceivers = [{aux}]\nsenders = [\"dut\"]\nparallel = 2\ntime = 5\nomit = 1\ncongestion = \"cubic\"\n",
            hosts_toml(&b, &names),
            aux = aux.join(", ")
        ),
    );
    let steal = super::netns_link::StealWatch::start();
    let (o, doc) = plan_run(
        &mut Command::new(bin()),
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(180),
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    let expected = SHAPED_BPS * TCP_EFFICIENCY;
    // 8 into 1: one aggregate at the DUT.
    let into = agg(&doc["steps"][0], "dut");
    assert_eq!(into["runs"], 8);
    assert_eq!(into["flows"], 16);
    let got = into["received_bps"].as_f64().unwrap();
    eprintln!("8 into 1: {got:.0} bit/s, expected {expected:.0}");
    if steal.spoiled("eight_into_one_then_one_into_eight_on_shaped_links") {
        return;
    }
    assert!(
        (got - expected).abs() / expected < 0.02,
        "8 into 1: {got} vs {expected}"
    );
    // 1 into 8: eight receivers share the DUT's shaped egress.
    let step = &doc["steps"][1];
    let total: f64 = names[1..]
        .iter()
        .map(|n| agg(step, n)["received_bps"].as_f64().unwrap())
        .sum();
    eprintln!("1 into 8: {total:.0} bit/s, expected {expected:.0}");
    assert!(
        (total - expected).abs() / expected < 0.02,
        "1 into 8: {total} vs {expected}"
    );
    assert_eq!(step["runs"].as_array().unwrap().len(), 8);
    assert_eq!(step["release"]["clients"], 8);
    no_hakaru_left(&b);
}

/// An sshd started in a namespace, stopped by its PID.
struct Sshd(Child);

impl Drop for Sshd {
    fn drop(&mut self) {
        kill(self.0.id(), 9);
        let _ = self.0.wait();
    }
}

#[test]
fn a_plan_through_real_sshd_with_the_binary_pushed() {
    // Started by its full path, where Debian's openssh-server puts it (and .ci/run looks).
    let sshd = "/usr/sbin/sshd";
    let Some(b) = Bridge::setup(
        3,
        &[
            ("sshd", "openssh-server"),
            ("ssh", "openssh-client"),
            ("ssh-keygen", "openssh-client"),
        ],
    ) else {
        return;
    };
    let s = Scratch::new("netns-ssh");
    let dir = s.0.to_string_lossy().to_string();
    for key in ["id", "hostkey"] {
        let o = run_cmd(
            Command::new("ssh-keygen").args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-f",
                &format!("{dir}/{key}"),
            ]),
            Duration::from_secs(20),
        );
        assert!(o.status.success(), "ssh-keygen: {}", stderr(&o));
    }
    std::fs::copy(format!("{dir}/id.pub"), format!("{dir}/authorized_keys")).unwrap();
    // sshd's privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let mut daemons = Vec::new();
    for m in &b.members[1..] {
        let cfg = s.write(
            &format!("sshd-{}.conf", m.ip),
            &format!(
                "ListenAddress {ip}\nPort 22\nHostKey {dir}/hostkey\nPidFile {dir}/sshd-{ip}.pid\nAuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
                ip = m.ip
            ),
        );
        let child = Command::new("ip")
            .args(["netns", "exec", &m.ns, sshd, "-D", "-e", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        daemons.push(Sshd(child));
    }
    let ssh_opts = format!(
        "[\"-i\", \"{dir}/id\", \"-o\", \"StrictHostKeyChecking=no\", \"-o\", \"UserKnownHostsFile=/dev/null\", \"-o\", \"LogLevel=ERROR\", \"-o\", \"ConnectTimeout=10\"]"
    );
    // The coordinator runs in member 0, which reaches the others over the bridge.
    let ctl = b.members[0].ns.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    for m in &b.members[1..] {
        loop {
            let o = run_cmd(
                Command::new("ip").args([
                    "netns",
                    "exec",
                    &ctl,
                    "ssh",
                    "-i",
                    &format!("{dir}/id"),
                    "-o",
                    "StrictHostKeyChecking=no",
                    "-o",
                    "UserKnownHostsFile=/dev/null",
                    "-o",
                    "LogLevel=ERROR",
                    "-o",
                    "BatchMode=yes",
                    &format!("root@{}", m.ip),
                    "true",
                ]),
                Duration::from_secs(20),
            );
            if o.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sshd at {} never answered: {}",
                m.ip,
                stderr(&o)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let (rx, tx) = (&b.members[1], &b.members[2]);
    let file = s.write(
        "plan.toml",
        &format!(
            "[defaults]\npush = true\nssh_options = {ssh_opts}\n\n[hosts.rx]\naddress = \"{}\"\nssh = \"root@{}\"\n\n[hosts.tx]\naddress = \"{}\"\nssh = \"root@{}\"\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"tx\"]\nparallel = 2\ntime = 2\n\n[[step]]\nkind = \"pps\"\nreceivers = [\"rx\"]\nsenders = [\"tx\"]\nparallel = 4\ntime = 1\nreverse = true\n",
            rx.ip, rx.ip, tx.ip, tx.ip
        ),
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ctl, bin()]);
    let (o, doc) = plan_run(
        &mut cmd,
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(240),
    );
    // The pushed binary is removed whatever the outcome.
    let pushed: Vec<String> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["pushed"] == true)
        .map(|h| h["hakaru"].as_str().unwrap().to_string())
        .collect();
    for p in &pushed {
        let _ = std::fs::remove_file(p);
    }
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    assert_eq!(
        pushed.len(),
        2,
        "both hosts got the pushed binary: {}",
        doc["hosts"]
    );
    for h in doc["hosts"].as_array().unwrap() {
        assert_eq!(
            h["version"],
            format!("hakaru {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(h["launcher"].as_str().unwrap().starts_with("ssh root@"));
    }
    let tcp = agg(&doc["steps"][0], "rx");
    assert_eq!(tcp["flows"], 2);
    assert!(tcp["received_bps"].as_f64().unwrap() > 0.0);
    let pps = agg(&doc["steps"][1], "rx");
    assert_eq!(pps["dir"], "down");
    assert!(pps["received_datagrams"].as_u64().unwrap() > 0);
    // Nothing of the plan is left on the far hosts (only their sshd).
    std::thread::sleep(Duration::from_millis(500));
    for i in 1..3 {
        let progs = b.programs_in(i);
        assert!(
            !progs.iter().any(|p| p.starts_with("hakaru")),
            "left running: {progs:?}"
        );
        assert!(progs.iter().any(|p| p == "sshd"), "sshd is gone: {progs:?}");
    }
    drop(daemons);
}

/// The server a plan starts in a namespace listens on the receiver's address only, takes
/// tests only with the run's key, and only from the plan's senders: while the plan runs, a
/// client in the sender's namespace without the key is refused by authentication, one in
/// another namespace is closed on before a byte is read, and the receiver's own loopback
/// finds nothing listening. The plan itself runs to its end.
#[test]
fn a_plans_server_refuses_addresses_that_are_not_its_senders() {
    let Some(b) = Bridge::setup(3, &[]) else {
        return;
    };
    let s = Scratch::new("netns-acl");
    let (rx, tx, stranger) = (&b.members[0], &b.members[1], &b.members[2]);
    let file = s.write(
        "plan.toml",
        &format!(
            "{}\n[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"tx\"]\nbitrate = \"10M\"\ntime = 8\n",
            hosts_toml(&b, &["rx", "tx"])
        ),
    );
    let out = s.0.join("out.json");
    let plan = Command::new(bin())
        .args(["plan", "run"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let probe = |ns: &str, addr: &str| {
        run_cmd(
            Command::new("ip").args([
                "netns",
                "exec",
                ns,
                bin(),
                "tcp",
                addr,
                "-t",
                "1",
                "--connect-timeout",
                "3",
            ]),
            Duration::from_secs(30),
        )
    };
    // From the sender's address, without the key: the server is there and asks for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = probe(&tx.ns, &rx.ip);
        if stderr(&o).contains("authentication failed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the plan's server never asked for its key: {}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // From any other address: closed before a byte is read, not asked for a key.
    let o = probe(&stranger.ns, &rx.ip);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("closed the connection without a greeting") && !e.contains("authentication"),
        "{e}"
    );
    // Bound to the receiver's address: nothing on its loopback.
    let o = probe(&rx.ns, "127.0.0.1");
    assert!(!o.status.success());
    assert!(
        stderr(&o).to_lowercase().contains("refused"),
        "{}",
        stderr(&o)
    );
    // The server's command line, as the kernel has it.
    let pids = run_cmd(
        Command::new("ip").args(["netns", "pids", &rx.ns]),
        Duration::from_secs(10),
    );
    let cmdlines: Vec<Vec<String>> = String::from_utf8_lossy(&pids.stdout)
        .split_whitespace()
        .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
        .map(|c| {
            c.split(|b| *b == 0)
                .map(|w| String::from_utf8_lossy(w).to_string())
                .collect()
        })
        .collect();
    let server = cmdlines
        .iter()
        .find(|c| c.iter().any(|w| w == "server"))
        .unwrap_or_else(|| panic!("no server in {}: {cmdlines:?}", rx.ns));
    for pair in [
        ["-B", rx.ip.as_str()],
        ["--allow", tx.ip.as_str()],
        ["--psk-file", "-"],
    ] {
        assert!(
            server
                .windows(2)
                .any(|w| w[0] == pair[0] && w[1] == pair[1]),
            "{server:?}"
        );
    }
    assert_eq!(
        server.iter().filter(|w| *w == "--allow").count(),
        1,
        "{server:?}"
    );
    assert!(server.iter().any(|w| w == "--max-duration"), "{server:?}");
    let o = super::common::wait_child(plan, Duration::from_secs(120));
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let a = agg(&doc["steps"][0], "rx");
    assert!(a["received_datagrams"].as_u64().unwrap() > 0, "{a}");
    no_hakaru_left(&b);
}

#[test]
fn a_plan_takes_its_hosts_from_the_mesh_peer_list() {
    let Some(b) = Bridge::setup(3, &[]) else {
        return;
    };
    let s = Scratch::new("netns-fleet");
    // The peers file the mesh agents would probe, with labels: the plan's hosts and its
    // step's roles come from it, each host reached through its namespace.
    let roles = ["rx", "tx", "tx"];
    let peers: String = b
        .members
        .iter()
        .zip(roles)
        .map(|(m, r)| format!("{} role={r} ns={}\n", m.ip, m.ns))
        .collect();
    s.write("peers.txt", &peers);
    let file = s.write(
        "plan.toml",
        "[fleet]\npeers = \"peers.txt\"\nnetns = \"{ns}\"\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"@role=rx\"]\nsenders = [\"@role=tx\"]\ntime = 2\n",
    );
    let (o, doc) = plan_run(
        &mut Command::new(bin()),
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    let step = &doc["steps"][0];
    let senders: Vec<&str> = step["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["sender"].as_str().unwrap())
        .collect();
    assert_eq!(
        senders,
        [b.members[1].ip.as_str(), b.members[2].ip.as_str()]
    );
    let a = agg(step, &b.members[0].ip);
    assert_eq!(a["runs"], 2, "{a}");
    assert!(a["received_bytes"].as_u64().unwrap() > 0, "{a}");
    no_hakaru_left(&b);
}
