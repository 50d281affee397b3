//! `hakaru plan` over loopback with the `local` launcher: merged results that reconcile with
//! the per-host results, and the faults a plan must name (missing or other-version hakaru,
//! unreachable ssh host, a sender or receiver that dies mid-step, Ctrl-C), each leaving nothing
//! running.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::common::{bin, free_port, hakaru, kill, run, run_cmd, stderr, wait_child};

/// A scratch directory removed at the end.
pub(super) struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("hakaru-plan-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// An executable shell script.
    pub fn script(&self, name: &str, text: &str) -> String {
        let p = self.write(name, text);
        let _ = Command::new("chmod").arg("755").arg(&p).status();
        p.to_string_lossy().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port nothing listens on right now.
/// Runs `hakaru plan run FILE -o OUT` and returns its output and the written document.
pub(super) fn plan_run(
    cmd: &mut Command,
    file: &Path,
    out: &Path,
    limit: Duration,
) -> (Output, Value) {
    let o = run_cmd(
        cmd.args(["plan", "run"]).arg(file).arg("-o").arg(out),
        limit,
    );
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| {
        panic!(
            "no result written ({e}); status {}, stderr: {}",
            o.status,
            stderr(&o)
        )
    });
    (o, serde_json::from_str(&text).expect("the result is JSON"))
}

/// True when nothing answers on the port: the plan's server is gone.
fn port_closed(port: u16) -> bool {
    // The server stops within its accept loop's poll after its stdin closes; give it a moment.
    for _ in 0..50 {
        if TcpStream::connect(("127.0.0.1", port)).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

pub(super) fn local_hosts(port: u16, sender_hakaru: &str, receiver_hakaru: &str) -> String {
    format!(
        r#"
[hosts.rx]
address = "127.0.0.1"
local = true
port = {port}
hakaru = "{receiver_hakaru}"

[hosts.a]
local = true
hakaru = "{sender_hakaru}"

[hosts.b]
local = true
"#
    )
}

/// Writes a plan of the three local hosts (receiver `rx`, senders `a` and `b`) and `steps`,
/// runs it, and returns its output and result.
fn local_plan(
    s: &Scratch,
    port: u16,
    (sender_hakaru, receiver_hakaru): (&str, &str),
    steps: &str,
    limit: Duration,
) -> (Output, Value) {
    let file = s.write(
        "plan.toml",
        &format!(
            "{}\n{steps}",
            local_hosts(port, sender_hakaru, receiver_hakaru)
        ),
    );
    plan_run(&mut hakaru(), &file, &s.0.join("out.json"), limit)
}

fn errors(doc: &Value) -> Vec<String> {
    doc["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn local_plan_merges_what_each_client_measured() {
    let s = Scratch::new("merge");
    let port = free_port();
    let (o, doc) = local_plan(
        &s,
        port,
        (bin(), bin()),
        "[[step]]\nkind = \"pps\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\nparallel = 3\ntime = 1\nno_gso = true\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\nparallel = [1, 2]\ntime = \"500ms\"\nreverse = true\n",
        Duration::from_secs(90),
    );
    assert!(o.status.success(), "plan failed: {}", stderr(&o));
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["test"], "plan");
    assert!(errors(&doc).is_empty(), "{:?}", errors(&doc));
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 3);
    let rx = hosts.iter().find(|h| h["name"] == "rx").unwrap();
    assert_eq!(rx["server"], "started");
    assert_eq!(
        rx["version"],
        format!("hakaru {}", env!("CARGO_PKG_VERSION"))
    );
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3, "one pps step and a two-value sweep");

    // Step 1: two senders of 3 flows each into rx.
    let pps = &steps[0];
    assert_eq!(pps["release"]["clients"], 2);
    let runs = pps["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let mut received = 0;
    let mut received_pps = 0.0;
    for r in runs {
        assert!(r["error"].is_null(), "{}", r["error"]);
        let res = &r["result"];
        assert_eq!(res["test"], "pps");
        assert_eq!(
            res["flows"].as_array().unwrap().len(),
            3,
            "every flow reported"
        );
        received += res["totals"][0]["udp"]["received_datagrams"]
            .as_u64()
            .unwrap();
        received_pps += res["totals"][0]["udp"]["received_pps"].as_f64().unwrap();
        let cmd: Vec<&str> = r["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            cmd.contains(&"--sync-start") && cmd.contains(&"--no-gso"),
            "{cmd:?}"
        );
    }
    assert!(received > 0);
    let agg = &pps["aggregates"][0];
    assert_eq!(agg["receiver"], "rx");
    assert_eq!(agg["dir"], "up");
    assert_eq!(agg["flows"], 6);
    assert_eq!(agg["received_datagrams"].as_u64().unwrap(), received);
    let a_pps = agg["received_pps"].as_f64().unwrap();
    assert!((a_pps - received_pps).abs() < 1e-6 * received_pps.max(1.0));
    assert_eq!(agg["nic_check"]["measure"], "packets");
    // The timeline has each run in every interval, summed per receiver.
    let tl = pps["timeline"].as_array().unwrap();
    assert!(!tl.is_empty());
    for row in tl {
        let per_run: f64 = row["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["bps"].as_f64().unwrap())
            .sum();
        let total = row["receivers"][0]["bps"].as_f64().unwrap();
        assert!((per_run - total).abs() <= 1e-6 * total.max(1.0));
        assert!(
            row["receivers"][0]["nic_rx_pps"].as_f64().is_some(),
            "{row}"
        );
    }
    let tl_runs = tl[0]["runs"].as_array().unwrap();
    assert_eq!(tl_runs.len(), 2);

    // The sweep: -P 1 then -P 2, reverse: data flows out of the receiver.
    for (step, flows) in [(&steps[1], 1), (&steps[2], 2)] {
        assert_eq!(step["sweep"]["parallel"], flows.to_string());
        let agg = &step["aggregates"][0];
        assert_eq!(agg["dir"], "down");
        assert_eq!(agg["flows"], flows);
        let res = &step["runs"][0]["result"];
        assert_eq!(
            agg["received_bytes"].as_u64().unwrap(),
            res["totals"][0]["receiver"]["bytes"].as_u64().unwrap()
        );
    }
    assert!(port_closed(port), "the plan left its server running");
    // Text output names the steps, the release and the receiver's sums.
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("step 1/3: pps") && text.contains("released 2 client(s)"),
        "{text}"
    );
}

#[test]
fn plan_check_names_unknown_keys_and_refused_options() {
    let s = Scratch::new("check");
    let bad_key = s.write(
        "a.toml",
        "[hosts.r]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.s]\nlocal = true\n[[step]]\nkind = \"tcp\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\nparalel = 4\n",
    );
    let o = run(
        &["plan", "check", bad_key.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("paralel"), "{}", stderr(&o));
    let bad_flag = s.write(
        "b.toml",
        "[hosts.r]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.s]\nlocal = true\n[hosts.spare]\nlocal = true\n[[step]]\nkind = \"tcp\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\nrate = 1000\n",
    );
    let o = run(
        &["plan", "check", bad_flag.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("step 1 (tcp)") && e.contains("--rate"), "{e}");
    assert!(e.contains("host `spare` is not used by any step"), "{e}");
    let selfish = s.write(
        "c.toml",
        "[hosts.r]\naddress = \"127.0.0.1\"\nlocal = true\n[[step]]\nkind = \"udp\"\nreceivers = [\"r\"]\nsenders = [\"r\"]\n",
    );
    let o = run(
        &["plan", "check", selfish.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`r` is both a sender and a receiver"));
    let good = s.write(
        "d.toml",
        "[hosts.r]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.s]\nlocal = true\n[[step]]\nkind = \"pps\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\nparallel = [1, 64]\nrepeat = 2\n",
    );
    let o = run(
        &["plan", "check", good.to_str().unwrap(), "--probe"],
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("4 step(s)") && out.contains("host s: hakaru "),
        "{out}"
    );
}

#[test]
fn missing_and_other_version_hakaru_are_named_before_any_traffic() {
    let s = Scratch::new("version");
    let port = free_port();
    let old = s.script("old-hakaru", "#!/bin/sh\necho 'hakaru 0.0.1'\n");
    let (o, doc) = local_plan(
        &s,
        port,
        (&old, "/nonexistent/hakaru"),
        "[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 1\n",
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1));
    let errs = errors(&doc).join("\n");
    assert!(
        errs.contains("host `a`") && errs.contains("hakaru 0.0.1") && errs.contains("push = true"),
        "{errs}"
    );
    assert!(
        errs.contains("host `rx`") && errs.contains("/nonexistent/hakaru"),
        "{errs}"
    );
    assert!(doc["steps"].as_array().unwrap().is_empty(), "no step ran");
    assert!(stderr(&o).contains("error(s)"), "{}", stderr(&o));
}

#[test]
fn an_unreachable_ssh_host_is_named() {
    let s = Scratch::new("ssh");
    if !super::common::peer("ssh", "openssh-client") {
        return;
    }
    let closed = free_port();
    let file = s.write(
        "plan.toml",
        &format!(
            "[hosts.rx]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.far]\nssh = \"root@127.0.0.1\"\naddress = \"127.0.0.1\"\nssh_options = [\"-p\", \"{closed}\", \"-o\", \"ConnectTimeout=5\"]\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"far\"]\n"
        ),
    );
    let (o, doc) = plan_run(
        &mut hakaru(),
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(1));
    let errs = errors(&doc).join("\n");
    assert!(
        errs.contains("host `far`: cannot reach it with ssh root@127.0.0.1"),
        "{errs}"
    );
}

/// A hakaru that runs the real one for `cmd` and kills it after `after` seconds.
fn dying(s: &Scratch, name: &str, cmd: &str, after: &str) -> String {
    s.script(
        name,
        &format!(
            "#!/bin/sh\nif [ \"$1\" != {cmd} ]; then exec {real} \"$@\"; fi\n# A background command reads /dev/null unless given the script's stdin explicitly.\nexec 3<&0\n{real} \"$@\" <&3 &\npid=$!\nsleep {after}\nkill -9 $pid\nwait $pid\nexit 137\n",
            real = bin()
        ),
    )
}

#[test]
fn a_sender_that_dies_mid_step_is_named_and_the_others_kept() {
    let s = Scratch::new("sender-dies");
    let port = free_port();
    let wrapper = dying(&s, "hakaru-a", "tcp", "1.5");
    let (o, doc) = local_plan(
        &s,
        port,
        (&wrapper, bin()),
        "[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 3\n",
        Duration::from_secs(90),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let errs = errors(&doc).join("\n");
    assert!(
        errs.contains("sender `a` -> receiver `rx`") && errs.contains("without a result"),
        "{errs}"
    );
    let runs = doc["steps"][0]["runs"].as_array().unwrap();
    let b = runs.iter().find(|r| r["sender"] == "b").unwrap();
    assert!(b["error"].is_null(), "{}", b["error"]);
    assert_eq!(b["result"]["test"], "tcp");
    assert_eq!(doc["steps"][0]["aggregates"][0]["runs"], 1);
    assert!(port_closed(port), "the plan left its server running");
}

#[test]
fn a_receiver_that_dies_mid_step_is_named() {
    let s = Scratch::new("receiver-dies");
    let port = free_port();
    let wrapper = dying(&s, "hakaru-rx", "server", "1.5");
    let (o, doc) = local_plan(
        &s,
        port,
        (bin(), &wrapper),
        "[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 4\n",
        Duration::from_secs(90),
    );
    assert_eq!(o.status.code(), Some(1));
    let errs = errors(&doc).join("\n");
    assert!(
        errs.contains("receiver `rx`: its hakaru server exited"),
        "{errs}"
    );
    assert!(errs.contains("sender `a` -> receiver `rx`"), "{errs}");
    assert!(port_closed(port));
}

#[test]
fn ctrl_c_stops_the_step_keeps_its_results_and_stops_the_servers() {
    let s = Scratch::new("sigint");
    let port = free_port();
    let file = s.write(
        "plan.toml",
        &format!(
            "{}\n[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 30\nbitrate = \"10M\"\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\n",
            local_hosts(port, bin(), bin())
        ),
    );
    let out = s.0.join("out.json");
    let child = hakaru()
        .args(["plan", "run"])
        .arg(&file)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    kill(child.id(), 2);
    let o = wait_child(child, Duration::from_secs(60));
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["interrupted"], true);
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "the second step did not run");
    for r in steps[0]["runs"].as_array().unwrap() {
        assert_eq!(r["result"]["interrupted"], true, "{r}");
        let secs = r["result"]["totals"][0]["receiver"]["seconds"]
            .as_f64()
            .unwrap();
        assert!(secs < 20.0, "stopped early, not after 30 s: {secs}");
    }
    assert!(port_closed(port));
}

#[test]
fn sync_start_waits_for_go_and_stops_on_end_of_input() {
    let server = super::common::ServerProc::start(&[]);
    let port = server.port_s();
    // Standard input closes at once: the client sets up, says ready, and is called off.
    let o = run_cmd(
        hakaru()
            .args([
                "tcp",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "1",
                "--json-stream",
                "--sync-start",
            ])
            .stdin(Stdio::null()),
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"type\":\"ready\""), "{out}");
    assert!(!out.contains("\"type\":\"interval\""), "{out}");
    assert!(stderr(&o).contains("called off"), "{}", stderr(&o));
    // A held pps client, its standard input and output piped.
    let held = || {
        hakaru()
            .args([
                "pps",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "1",
                "--json-stream",
                "--sync-start",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // With `go`, it runs.
    let mut child = held();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        stdin.write_all(b"go\n").unwrap();
        // Keep stdin open until the test is over.
        let o = wait_child(child, Duration::from_secs(30));
        drop(stdin);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let kinds: Vec<String> = out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["type"].as_str().unwrap_or("").to_string())
            .collect();
        let pos = |k: &str| kinds.iter().position(|x| x == k).unwrap_or(usize::MAX);
        assert!(pos("ready") < pos("released"), "{kinds:?}");
        assert!(pos("released") < pos("interval"), "{kinds:?}");
        assert_eq!(kinds.last().map(String::as_str), Some("end"));
    }
    // With `go AT`, it says how early the line came, and both ends' data threads wait for
    // the instant (the server is told it: `start_at`) and say when they began.
    let mut child = held();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let at = now + 0.4;
        stdin.write_all(format!("go {at:.6}\n").as_bytes()).unwrap();
        let o = wait_child(child, Duration::from_secs(30));
        drop(stdin);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let rel = out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["type"] == "released")
            .expect("a released event");
        let ahead = rel["data"]["go_ahead_ms"].as_f64().unwrap();
        assert!(ahead > 0.0 && ahead <= 400.0, "{rel}");
        let end = out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["type"] == "end")
            .expect("an end event");
        for e in ["client", "server_end"] {
            let began = end["data"][e]["began_unix"].as_f64();
            let began = began.unwrap_or_else(|| panic!("{e} has no began_unix: {end}"));
            // The threads sleep to the instant (timer slack is microseconds).
            assert!(began >= at - 0.001, "{e} began at {began}, before {at}");
            assert!(
                began < at + 0.5,
                "{e} began at {began}, {at} was the instant"
            );
        }
        // The first datagram left at the instant, not when `go` came: nothing was counted
        // before it.
        let start = end["data"]["client"]["window_start_unix"].as_f64().unwrap();
        assert!(
            (start - at).abs() < 0.002,
            "the client's clock started at {start}, not {at}"
        );
    }
    // Refused by name where it cannot work.
    let o = run(&["quick", "--sync-start"], Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--sync-start"));
}

#[test]
fn a_server_already_listening_is_reused_and_left_running() {
    let s = Scratch::new("reuse");
    let mut server = super::common::ServerProc::start(&[]);
    let port = server.port;
    let (o, doc) = local_plan(
        &s,
        port,
        (bin(), bin()),
        "[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\ntime = \"500ms\"\n",
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let rx = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "rx")
        .unwrap()
        .clone();
    assert_eq!(rx["server"], "reused");
    assert!(stderr(&o).contains("already in use"), "{}", stderr(&o));
    assert!(
        doc["steps"][0]["runs"][0]["result"]["totals"][0]["udp"]["received_datagrams"]
            .as_u64()
            .unwrap()
            > 0
    );
    // The test ran on the server that was there, which the plan did not stop.
    assert!(server
        .wait_log("finished", Duration::from_secs(10))
        .is_some());
    assert!(server.alive());
}

#[test]
fn an_exec_prefix_launcher_runs_the_commands() {
    // kubectl and docker are command prefixes like this one: it runs its arguments with stdin
    // and stdout piped, so the plan goes through the same code path.
    let s = Scratch::new("exec");
    let port = free_port();
    let file = s.write(
        "plan.toml",
        &format!(
            "[hosts.rx]\naddress = \"127.0.0.1\"\nexec = [\"env\", \"HAKARU_PLAN_TEST=rx\"]\nhakaru = \"{b}\"\nport = {port}\n\n[hosts.tx]\naddress = \"127.0.0.1\"\nexec = [\"env\", \"HAKARU_PLAN_TEST=tx\"]\nhakaru = \"{b}\"\n\n[[step]]\nkind = \"latency\"\nreceivers = [\"rx\"]\nsenders = [\"tx\"]\ntime = \"300ms\"\n",
            b = bin()
        ),
    );
    let (o, doc) = plan_run(
        &mut hakaru(),
        &file,
        &s.0.join("out.json"),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for h in doc["hosts"].as_array().unwrap() {
        assert!(h["launcher"]
            .as_str()
            .unwrap()
            .starts_with("exec env HAKARU_PLAN_TEST="));
    }
    let run = &doc["steps"][0]["runs"][0];
    assert_eq!(run["command"][0], bin());
    assert!(run["result"]["latency"]["replies"].as_u64().unwrap() > 0);
    assert!(
        doc["steps"][0]["aggregates"][0]["transactions_per_second"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(port_closed(port));
}

/// A `find_max` step: every sender steps its rate together, trial by trial; each trial is a
/// step of the result, the last carries the search, and the steps after it move up.
#[test]
fn find_max_step_searches_with_every_sender_at_once() {
    let s = Scratch::new("find-max");
    let port = free_port();
    let (o, doc) = local_plan(
        &s,
        port,
        (bin(), bin()),
        "[[step]]\nname = \"edge\"\nkind = \"pps\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\nparallel = 2\nomit = \"200ms\"\nfind_max = { loss = 0.1, trial = \"500ms\" }\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\ntime = \"300ms\"\n",
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "plan failed: {}", stderr(&o));
    let steps = doc["steps"].as_array().unwrap();
    let trials: Vec<&Value> = steps.iter().filter(|s| s["trial"].is_object()).collect();
    assert!(!trials.is_empty() && trials.len() <= 44, "{}", trials.len());
    assert_eq!(
        steps.len(),
        trials.len() + 1,
        "the tcp step follows the trials"
    );
    // Indices stay unique and in order.
    for (k, st) in steps.iter().enumerate() {
        assert_eq!(st["index"], k as u64 + 1);
    }
    // Both senders ran every trial, at the rate the search asked: rates double on the ramp.
    let mut last = 0.0;
    for t in &trials {
        assert_eq!(t["runs"].as_array().unwrap().len(), 2, "{}", t["name"]);
        let asked = t["trial"]["asked_per_flow"].as_f64().unwrap();
        if t["trial"]["phase"] == "ramp" {
            assert!(last == 0.0 || asked == last * 2.0, "{asked} after {last}");
            last = asked;
        }
        let flags = t["runs"][0]["command"].as_array().unwrap();
        assert!(flags.iter().any(|f| f == "--rate"), "{flags:?}");
    }
    let fm = &trials.last().unwrap()["find_max"];
    assert_eq!(fm["test"], "find_max");
    assert_eq!(fm["flows"], 4, "2 flows x 2 senders");
    assert!(!fm["outcome"].as_str().unwrap().is_empty());
    assert_eq!(fm["trials"].as_array().unwrap().len(), trials.len());
    // A search on a tcp step, or with a rate of its own, is refused before anything runs.
    let o = run(
        &["plan", "check", s.write("bad.toml", "[hosts.r]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.s]\nlocal = true\n[[step]]\nkind = \"udp\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\nbitrate = \"1G\"\nfind_max = { loss = 0.5 }\n").to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("find_max sets the rate") && stderr(&o).contains("bitrate"),
        "{}",
        stderr(&o)
    );
}

/// `--psk-file -`: the server and a `--sync-start` client take the key from the first line of
/// standard input, and the rest of it still works: the client's `go`, the server's lifeline.
#[test]
fn psk_file_dash_reads_the_key_line_and_leaves_the_rest_of_stdin() {
    use std::io::{BufRead, BufReader, Write};
    let key = "plan-key-0123456789abcdef0123456789abcdef";
    let mut server = hakaru()
        .args([
            "server",
            "-B",
            "127.0.0.1",
            "-p",
            "0",
            "--exit-on-stdin-eof",
            "--psk-file",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lifeline = server.stdin.take().unwrap();
    writeln!(lifeline, "{key}").unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no `listening on` line: {line:?}"));
    let client = |input: &str, hold: bool| {
        let mut c = hakaru()
            .args(["tcp", "127.0.0.1", "-p", &port.to_string(), "-t", "0.5"])
            .args(["--json-stream", "--sync-start", "--psk-file", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = c.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        // Held open until the client is done: its end would stop the test.
        let stdin = hold.then_some(stdin);
        let o = wait_child(c, Duration::from_secs(30));
        drop(stdin);
        o
    };
    // The key and `go` in one write: the key line is taken, `go` is left for the gate.
    let o = client(&format!("{key}\ngo\n"), true);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("\"type\":\"released\"") && out.contains("\"type\":\"end\""),
        "{out}"
    );
    // Another key is refused by the server.
    let o = client("another-key-0123456789abcdef0123456789\ngo\n", true);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("authentication failed"),
        "{}",
        stderr(&o)
    );
    // No key line at all: a usage error naming standard input.
    let o = client("", false);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--psk-file -"), "{}", stderr(&o));
    // The server's lifeline still reads what follows its key: closing it stops the server.
    drop(lifeline);
    let o = wait_child(server, Duration::from_secs(20));
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The FNV-1a digest the old push named its file by (`/tmp/hakaru-VERSION-FNV`).
fn old_push_path(binary: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in binary {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("/tmp/hakaru-{}-{h:016x}", env!("CARGO_PKG_VERSION"))
}

/// Removes a planted file at the end, however the test ends.
struct Planted(String);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An executable that records that it ran (creates `marker`), then behaves as hakaru: a
/// plan that ran it would work, so only the marker tells.
fn impostor(path: &str, marker: &Path) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\ntouch {}\nexec {} \"$@\"\n",
            marker.display(),
            bin()
        ),
    )
    .unwrap();
    let _ = Command::new("chmod").arg("700").arg(path).status();
}

/// `push = true` through an exec launcher on this machine (its cache directory in the
/// scratch directory): an executable planted at the old predictable /tmp path is never run,
/// and one planted under the new name, with the right owner and mode but another digest, is
/// replaced (named as a digest mismatch) and never run; a verified push is reused.
#[test]
fn push_runs_only_a_binary_it_verified_there() {
    let s = Scratch::new("push-verify");
    let port = free_port();
    let cache = s.0.join("cache");
    let marker = s.0.join("impostor-ran");
    let me = std::fs::read(bin()).unwrap();
    let old = Planted(old_push_path(&me));
    impostor(&old.0, &marker);
    let env = format!("\"env\", \"XDG_CACHE_HOME={}\"", cache.display());
    let file = s.write(
        "plan.toml",
        &format!(
            "[defaults]\npush = true\n\n[hosts.rx]\naddress = \"127.0.0.1\"\nexec = [{env}]\nport = {port}\n\n[hosts.tx]\naddress = \"127.0.0.1\"\nexec = [{env}]\n\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"tx\"]\ntime = \"300ms\"\n"
        ),
    );
    let out = s.0.join("out.json");
    let (o, doc) = plan_run(&mut hakaru(), &file, &out, Duration::from_secs(90));
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    let pushed = doc["hosts"][0]["hakaru"].as_str().unwrap().to_string();
    let dir = format!("{}/hakaru/", cache.display());
    let name = pushed
        .strip_prefix(&dir)
        .unwrap_or_else(|| panic!("{pushed}"));
    let digest = name
        .strip_prefix(&format!("hakaru-{}-", env!("CARGO_PKG_VERSION")))
        .unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "named by SHA-256: {name}"
    );
    for h in doc["hosts"].as_array().unwrap() {
        assert_eq!(h["pushed"], true);
        assert_eq!(h["hakaru"], pushed.as_str());
    }
    assert_eq!(std::fs::read(&pushed).unwrap(), me);
    assert!(doc["steps"][0]["runs"][0]["result"].is_object());
    assert!(!marker.exists(), "the file planted at {} ran", old.0);
    // Another file under the verified name, owned by this user, mode 0700: replaced.
    impostor(&pushed, &marker);
    let (o, doc) = plan_run(&mut hakaru(), &file, &out, Duration::from_secs(90));
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    assert!(
        stderr(&o).contains("digest mismatch") && stderr(&o).contains(digest),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists(), "the file planted at {pushed} ran");
    assert_eq!(std::fs::read(&pushed).unwrap(), me);
    // A verified copy is reused: nothing replaced.
    let (o, doc) = plan_run(&mut hakaru(), &file, &out, Duration::from_secs(90));
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    assert!(!stderr(&o).contains("replaced"), "{}", stderr(&o));
    assert!(!marker.exists());
    assert!(port_closed(port));
}

/// The run's key reaches the plan's server and clients on the first line of their standard
/// input only: the command lines and environments the launcher gives them do not hold it, every
/// process got the same key, and the plan runs with it end to end.
#[test]
fn the_run_key_is_given_on_stdin_never_on_a_command_line() {
    let s = Scratch::new("key");
    let port = free_port();
    let seen = s.0.join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    // Records its argv and environment; with `--psk-file -`, also the key line, which it then
    // passes on ahead of the rest of its stdin (through a FIFO, so hakaru is its own process
    // and its output ends when it exits).
    let wrapper = s.script(
        "hakaru-seen",
        &format!(
            "#!/bin/sh\nd={d}\nn=$$\nprintf '%s\\n' \"$@\" > $d/argv.$n\nenv > $d/env.$n\ncase \" $* \" in *\" --psk-file - \"*)\n  IFS= read -r key\n  printf '%s\\n' \"$key\" > $d/key.$n\n  mkfifo $d/fifo.$n\n  exec 3<&0\n  {{ printf '%s\\n' \"$key\"; exec cat <&3; }} > $d/fifo.$n &\n  exec {real} \"$@\" < $d/fifo.$n ;;\nesac\nexec {real} \"$@\"\n",
            d = seen.display(),
            real = bin()
        ),
    );
    let (o, doc) = local_plan(
        &s,
        port,
        (&wrapper, &wrapper),
        "[[step]]\nkind = \"udp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\ntime = \"500ms\"\n\n[[step]]\nkind = \"latency\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\ntime = \"300ms\"\n",
        Duration::from_secs(90),
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), doc["errors"]);
    for st in doc["steps"].as_array().unwrap() {
        assert!(st["runs"][0]["result"].is_object(), "{st}");
    }
    let read = |prefix: &str| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(&seen)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(prefix))
            .map(|n| {
                let t = std::fs::read_to_string(seen.join(&n)).unwrap();
                (n, t)
            })
            .collect();
        v.sort();
        v
    };
    let keys = read("key.");
    // The server and the two clients (the version probe gets no key).
    assert_eq!(keys.len(), 3, "{keys:?}");
    let key = keys[0].1.trim().to_string();
    assert!(
        key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key:?}"
    );
    assert!(keys.iter().all(|(_, k)| k.trim() == key), "{keys:?}");
    let argvs = read("argv.");
    let server = argvs
        .iter()
        .find(|(_, a)| a.starts_with("server\n"))
        .expect("the server's command line");
    let words: Vec<&str> = server.1.lines().collect();
    for pair in [
        ["-B", "127.0.0.1"],
        ["--psk-file", "-"],
        ["--allow", "127.0.0.1"],
        ["--exit-on-stdin-eof", "--psk-file"],
    ] {
        assert!(words.windows(2).any(|w| w == pair), "{words:?}");
    }
    assert!(words.contains(&"--max-duration"), "{words:?}");
    for (n, t) in argvs.iter().chain(read("env.").iter()) {
        assert!(!t.contains(&key), "{n} holds the key:\n{t}");
    }
    let text = std::fs::read_to_string(s.0.join("out.json")).unwrap();
    assert!(!text.contains(&key), "the result holds the key");
    assert!(port_closed(port));
}

#[test]
fn latency_probes_run_from_the_first_sender_or_from_every_one() {
    for (from, probed) in [("first", vec!["a"]), ("all", vec!["a", "b"])] {
        let s = Scratch::new(&format!("probe-{from}"));
        let port = free_port();
        let (o, doc) = local_plan(
            &s,
            port,
            (bin(), bin()),
            &format!(
                "[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\", \"b\"]\ntime = 1\nbitrate = \"100M\"\nlatency_probe = \"{from}\"\nlatency_probe_rate = 50\n"
            ),
            Duration::from_secs(90),
        );
        assert!(o.status.success(), "plan failed: {}", stderr(&o));
        assert!(errors(&doc).is_empty(), "{:?}", errors(&doc));
        let runs = doc["steps"][0]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for r in runs {
            let sender = r["sender"].as_str().unwrap();
            let probe = &r["result"]["probe"];
            if probed.contains(&sender) {
                // The idle baseline before the held start, then probes under the load.
                let idle = probe["idle"]["rtt"]["p50_us"].as_f64();
                let loaded = probe["loaded"]["rtt"]["p50_us"].as_f64();
                assert!(
                    idle.is_some_and(|v| v > 0.0) && loaded.is_some_and(|v| v > 0.0),
                    "{from}: {sender}'s probes: {probe}"
                );
                assert!(
                    probe["loaded"]["replies"].as_u64().unwrap_or(0) >= 20,
                    "{from}: {sender} got few probe replies at 50 a second for 1 s: {probe}"
                );
            } else {
                assert!(probe.is_null(), "{from}: {sender} probed: {probe}");
            }
        }
        assert!(port_closed(port), "the plan left its server running");
        // The runs' lines in the text output carry the probes of the runs that had them.
        let text = String::from_utf8_lossy(&o.stdout);
        let lines = text.lines().filter(|l| l.contains("probe RTT p50")).count();
        assert_eq!(lines, probed.len(), "{from}: {text}");
    }
}
