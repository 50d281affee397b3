//! The command line as people type it: help widths, exit codes over every subcommand, the
//! address grammar, iperf3 habits, output widths, colour, completions, man pages and the
//! progress line on a real terminal (tmux).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{hakaru, json, kill, listening_port, log_lines, peer, run, stderr, ServerProc};

const LIMIT: Duration = Duration::from_secs(60);

/// Every subcommand, as `hakaru --help` lists them.
fn subcommands() -> Vec<String> {
    let o = run(&["--help"], LIMIT);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let mut in_list = false;
    let mut subs = Vec::new();
    for l in text.lines() {
        if l.starts_with("Commands:") {
            in_list = true;
            continue;
        }
        if in_list {
            if l.trim().is_empty() {
                break;
            }
            // Command names start at column 3; wrapped descriptions are indented further.
            if l.starts_with("  ") && !l.starts_with("   ") {
                if let Some(name) = l.split_whitespace().next() {
                    if name != "help" {
                        subs.push(name.to_string());
                    }
                }
            }
        }
    }
    subs
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn help_fits_the_width_it_is_given() {
    let subs = subcommands();
    for expected in [
        "server", "tcp", "udp", "pps", "latency", "quick", "connect", "sink",
    ] {
        assert!(
            subs.iter().any(|s| s == expected),
            "{expected} missing from {subs:?}"
        );
    }
    assert!(subs.len() >= 14, "{subs:?}");
    for sub in std::iter::once(None).chain(subs.iter().map(Some)) {
        for (columns, max) in [(Some("80"), 80), (Some("60"), 60), (None, 100)] {
            let mut cmd = hakaru();
            cmd.args(sub.map(|s| vec![s.as_str()]).unwrap_or_default())
                .arg("--help");
            match columns {
                Some(c) => cmd.env("COLUMNS", c),
                None => cmd.env_remove("COLUMNS"),
            };
            let o = super::common::run_cmd(&mut cmd, LIMIT);
            assert!(o.status.success(), "{sub:?}");
            let text = stdout(&o);
            assert!(
                widest(&text) <= max,
                "{sub:?} --help with COLUMNS={columns:?} is {} wide:\n{text}",
                widest(&text)
            );
            // Every help names the exit codes.
            assert!(text.contains("Exit codes: 0 success"), "{sub:?}");
        }
    }
    // --iperf3 and iperf3-json appear only where they work.
    for sub in ["latency", "connect", "quick"] {
        let text = stdout(&run(&[sub, "--help"], LIMIT));
        assert!(!text.contains("--iperf3"), "{sub}: {text}");
        assert!(!text.contains("iperf3-json"), "{sub}: {text}");
    }
    let text = stdout(&run(&["tcp", "--help"], LIMIT));
    assert!(text.contains("--iperf3") && text.contains("iperf3-json"));
    assert!(text.contains("[default: 10]"), "tcp -t shows its default");
}

#[test]
fn exit_codes_over_every_subcommand() {
    let subs = subcommands();
    // A flag no subcommand has: a parse error, 2.
    for sub in &subs {
        let o = run(&[sub, "--no-such-flag"], LIMIT);
        assert_eq!(o.status.code(), Some(2), "{sub}: {}", stderr(&o));
        assert!(stderr(&o).contains("--no-such-flag"), "{sub}");
    }
    // A value out of range, or a name that does not exist: also 2, and the message names it.
    let cases: &[(&[&str], &str)] = &[
        (&["server", "--max-tests", "0"], "--max-tests"),
        (&["tcp", "-P", "2000"], "-P"),
        (&["udp", "-l", "70000"], "-l"),
        (&["pps", "--batch", "0"], "--batch"),
        (&["latency", "-l", "1"], "-l"),
        (&["quick", "-P", "0"], "-P"),
        (&["connect", "-P", "0"], "-P"),
        (&["sink", "-u", "-l", "70000"], "-l"),
        (&["source", "127.0.0.1:9", "-k", "0"], "-k"),
        (&["source", "127.0.0.1"], "no port"),
        (&["nic", "-i", "0.05"], "0.1"),
        (&["nic", "nosuchif0"], "nosuchif0"),
        (&["plan", "run", "/nonexistent/plan.toml"], "plan.toml"),
        (&["schema", "nosuchkind"], "nosuchkind"),
        (&["completions", "tcsh"], "tcsh"),
        (&["report", "/nonexistent/r.json"], "cannot read"),
        (
            &["compare", "/nonexistent/a.json", "/nonexistent/b.json"],
            "cannot read",
        ),
        (&["compare", "a", "b", "--threshold", "lots"], "--threshold"),
        (&["tcp", "--format", "xml"], "xml"),
        (
            &["tcp", "127.0.0.1:5201", "-p", "5202"],
            "give the port once",
        ),
        (&["tcp", "[::1"], "']'"),
        (&["tcp", "-b", "0.5"], "-b/--bitrate"),
        (&["-s", "-D"], "-D"),
        (&["http", "-P", "0"], "-P"),
        (&["rpm", "--max-connections", "0"], "--max-connections"),
        (&["history", "--since", "3x"], "--since"),
        (&["capacity", "127.0.0.1", "-I", "5000"], "0 to 1152"),
        (
            &["mesh", "report", "--peers", "p", "--loss-above", "2"],
            "a fraction from 0 to 1",
        ),
    ];
    for (args, needle) in cases {
        let o = run(args, LIMIT);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // Covered every subcommand with a value or name check.
    for sub in &subs {
        let covered =
            cases.iter().any(|(a, _)| a[0] == sub.as_str()) || ["man"].contains(&sub.as_str());
        assert!(covered, "no exit-code case for {sub}");
    }
    // A peer that is not there: the test failed, 1.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port().to_string();
    drop(silent);
    for sub in ["tcp", "udp", "latency", "connect"] {
        let o = run(&[sub, "127.0.0.1", "-p", &port, "-t", "0.2"], LIMIT);
        assert_eq!(o.status.code(), Some(1), "{sub}: {}", stderr(&o));
    }
    // Help and version are successes.
    for args in [&["--help"][..], &["--version"], &["tcp", "-h"]] {
        assert_eq!(run(args, LIMIT).status.code(), Some(0), "{args:?}");
    }
}

#[test]
fn one_address_grammar() {
    let srv = ServerProc::start(&[]);
    let port = srv.port_s();
    let host_port = format!("127.0.0.1:{port}");
    for args in [
        vec!["tcp", host_port.as_str(), "-t", "0.2", "--json"],
        vec!["tcp", "127.0.0.1", "-p", &port, "-t", "0.2", "--json"],
        vec!["latency", host_port.as_str(), "-t", "0.2", "--json"],
        vec!["pps", host_port.as_str(), "-t", "0.2", "--json"],
    ] {
        let o = run(&args, LIMIT);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert_eq!(
            json(&o)["server"].as_str(),
            Some(host_port.as_str()),
            "{args:?}"
        );
    }
    // The same port twice is fine; two different ones are named.
    let o = run(&["tcp", &host_port, "-p", &port, "-t", "0.2", "-q"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    // [v6] and [v6]:PORT where the host has IPv6 loopback.
    if super::common::ipv6_loopback() {
        let srv6 = ServerProc::start_with(hakaru(), "::1", &[]);
        let p6 = srv6.port_s();
        let bracketed = format!("[::1]:{p6}");
        for args in [
            vec!["tcp", bracketed.as_str(), "-t", "0.2", "--json"],
            vec!["tcp", "[::1]", "-p", &p6, "-t", "0.2", "--json"],
            vec!["tcp", "::1", "-p", &p6, "-t", "0.2", "--json"],
        ] {
            let o = run(&args, LIMIT);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        }
    }
    // source: HOST:PORT or HOST with -p, to a sink.
    let mut sink = hakaru()
        .args(["sink", "-B", "127.0.0.1", "-p", "0", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sink");
    let log = log_lines(sink.stderr.take().expect("stderr"));
    let sport = listening_port(&log);
    assert!(sport != 0);
    let o = run(
        &[
            "source",
            "127.0.0.1",
            "-p",
            &sport.to_string(),
            "-n",
            "1M",
            "-l",
            "64K",
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = json(&o);
    // -n is bytes: 1 MiB in 64 KiB writes is 16 writes.
    assert_eq!(doc["raw"]["bytes"].as_u64(), Some(1 << 20), "{doc}");
    kill(sink.id(), 9);
    let _ = sink.wait();
}

#[test]
fn iperf3_habits_run_the_native_commands() {
    // `hakaru -s`: a server, as iperf3 -s.
    let mut server = hakaru()
        .args(["-s", "-B", "127.0.0.1", "-p", "0", "-V"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hakaru -s");
    let log = log_lines(server.stderr.take().expect("stderr"));
    let first = log.recv_timeout(Duration::from_secs(10)).expect("a line");
    assert!(
        first.contains("running `hakaru server -B 127.0.0.1 -p 0 -v`"),
        "{first}"
    );
    let port = listening_port(&log);
    assert!(port != 0);
    let p = port.to_string();
    // `hakaru -c HOST -J`: a TCP test, one JSON document.
    let o = run(&["-c", "127.0.0.1", "-p", &p, "-t", "0.3", "-J"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("running `hakaru tcp 127.0.0.1 -p {p} -t 0.3 -J`")),
        "{}",
        stderr(&o)
    );
    let doc = json(&o);
    assert_eq!(doc["test"], "tcp");
    // -u picks udp, -b is its rate, -R reverses.
    let o = run(
        &[
            "-u",
            "-c",
            "127.0.0.1",
            "-p",
            &p,
            "-b",
            "5M",
            "-t",
            "0.3",
            "-R",
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = json(&o);
    assert_eq!(doc["test"], "udp");
    assert_eq!(doc["totals"][0]["dir"], "down");
    // -J on native subcommands too.
    let o = run(
        &["latency", "127.0.0.1", "-p", &p, "-t", "0.2", "-J"],
        LIMIT,
    );
    assert_eq!(json(&o)["test"], "latency");
    kill(server.id(), 9);
    let _ = server.wait();
}

#[test]
fn default_text_fits_100_columns_and_summary_only_is_short() {
    let o = run(&["tcp", "-P", "64", "-t", "1"], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(widest(&text) <= 100, "{} wide:\n{text}", widest(&text));
    // 64 flows: sums only, with a line saying how to see them.
    assert!(text.contains("--per-flow shows them"), "{text}");
    assert!(!text.contains("[ 63]"), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("client -> server: "), "{last}");

    let o = run(&["tcp", "-P", "64", "-t", "1", "--summary-only"], LIMIT);
    let text = stdout(&o);
    assert!(o.status.success() && text.lines().count() < 40, "{text}");
    assert!(
        text.contains("[SUM]") && text.contains("64 flow(s)"),
        "{text}"
    );
    // --per-flow shows all 64 rows.
    let o = run(
        &["tcp", "-P", "64", "-t", "0.5", "-i", "0", "--per-flow"],
        LIMIT,
    );
    assert!(stdout(&o).contains("[ 63]"));
    // --wide keeps the long lines whole.
    let o = run(&["udp", "-t", "0.3", "--wide"], LIMIT);
    assert!(widest(&stdout(&o)) > 100);

    // Every kind ends with its one-line headline, inside 100 columns.
    for (args, start) in [
        (&["udp", "-t", "0.3"][..], "client -> server: "),
        (&["pps", "-t", "0.3", "-P", "12"], "client -> server: "),
        (&["latency", "-t", "0.3"], "latency: TCP RTT p50 "),
        (
            &["latency", "-t", "0.3", "-u", "-q"],
            "latency: UDP RTT p50 ",
        ),
        (&["connect", "-t", "0.3"], "connect: "),
        (&["quick", "-t", "0.2"], "server "),
    ] {
        let o = run(args, LIMIT);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            widest(&text) <= 100,
            "{args:?}: {} wide\n{text}",
            widest(&text)
        );
        let headline = text
            .lines()
            .rfind(|l| !l.starts_with(' ') && !l.starts_with("note:"))
            .unwrap_or_default();
        assert!(headline.starts_with(start), "{args:?}: {text}");
    }
}

#[test]
fn no_escape_codes_when_stderr_is_not_a_terminal() {
    let srv = ServerProc::start(&[]);
    let o = run(
        &["tcp", "127.0.0.1", "-p", &srv.port_s(), "-t", "0.2", "-vv"],
        LIMIT,
    );
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(!err.contains('\u{1b}'), "escape codes in {err:?}");
    assert!(!stdout(&o).contains('\u{1b}'));
    let line = srv
        .wait_log("tcp", Duration::from_secs(10))
        .expect("the server logs the test");
    assert!(
        line.contains("INFO") && !line.contains('\u{1b}'),
        "{line:?}"
    );
    // The server's log (a pipe here) too, and its latency line counts echoes, not bytes.
    let o = run(
        &["latency", "127.0.0.1", "-p", &srv.port_s(), "-t", "0.2"],
        LIMIT,
    );
    assert!(o.status.success());
    let line = srv
        .wait_log("echo replies sent", Duration::from_secs(10))
        .expect("the server logs the latency test's echoes");
    assert!(
        !line.contains('\u{1b}') && !line.contains(" moved"),
        "{line}"
    );
}

#[test]
fn completions_and_man_pages() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = run(&["completions", shell], LIMIT);
        assert!(o.status.success(), "{shell}");
        let s = stdout(&o);
        assert!(
            s.contains("latency") && s.contains("summary-only"),
            "{shell}"
        );
    }
    if peer("bash", "bash") {
        let dir = std::env::temp_dir().join(format!("hakaru-compl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("hakaru.bash");
        std::fs::write(&f, run(&["completions", "bash"], LIMIT).stdout).unwrap();
        // The script parses, and completing `hakaru la` offers latency.
        let script = format!(
            "source {}; COMP_WORDS=(hakaru la); COMP_CWORD=1; COMP_LINE='hakaru la'; COMP_POINT=9; _hakaru hakaru la hakaru; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            f.display()
        );
        let o = super::common::run_cmd(Command::new("bash").args(["-c", &script]), LIMIT);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).lines().any(|l| l == "latency"), "{}", stdout(&o));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let o = run(&["man"], LIMIT);
    let page = stdout(&o);
    assert!(
        page.starts_with(".ie") || page.contains(".TH hakaru"),
        "{page}"
    );
    let dir = std::env::temp_dir().join(format!("hakaru-man-{}", std::process::id()));
    let o = run(&["man", "-o", dir.to_str().unwrap()], LIMIT);
    assert!(o.status.success(), "{}", stderr(&o));
    let tcp = std::fs::read_to_string(dir.join("hakaru-tcp.1")).expect("hakaru-tcp.1");
    assert!(
        tcp.contains(".TH hakaru-tcp") && tcp.contains("parallel"),
        "{tcp}"
    );
    assert!(dir.join("hakaru.1").exists() && dir.join("hakaru-quick.1").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tmux server on its own socket, killed by its PID when dropped.
struct Tmux {
    socket: String,
    pid: Option<u32>,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn capture(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            kill(pid, 9);
        }
    }
}

#[test]
fn quick_shows_progress_on_a_terminal_and_leaves_none() {
    if !peer("tmux", "tmux") {
        return;
    }
    let mut tmux = Tmux {
        socket: format!("hakaru-test-{}", std::process::id()),
        pid: None,
    };
    let shell = format!(
        "{} quick -t 0.6 -P 2; echo QUICK-EXIT=$?; sleep 60",
        super::common::bin()
    );
    let o = tmux
        .cmd()
        .args([
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "110",
            "-y",
            "40",
            &shell,
        ])
        .env_remove("NO_COLOR")
        .output()
        .expect("tmux new-session");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pid = tmux
        .cmd()
        .args(["display-message", "-p", "-t", "t", "#{pid}"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    tmux.pid = pid;
    assert!(tmux.pid.is_some(), "tmux server pid");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = Vec::new();
    let last = loop {
        let screen = tmux.capture();
        for l in screen.lines() {
            if l.contains("test ") && l.contains("/7: ") && !seen.contains(&l.to_string()) {
                seen.push(l.trim().to_string());
            }
        }
        if screen.contains("QUICK-EXIT=") {
            break screen;
        }
        assert!(Instant::now() < deadline, "quick did not finish:\n{screen}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(last.contains("QUICK-EXIT=0"), "{last}");
    // The status line named several of the seven tests while they ran.
    let steps: std::collections::BTreeSet<String> = seen
        .iter()
        .filter_map(|l| l.split("test ").nth(1))
        .filter_map(|r| r.split('/').next().map(String::from))
        .collect();
    assert!(steps.len() >= 3, "progress lines seen: {seen:?}");
    assert!(seen.iter().any(|l| l.contains("s left")), "{seen:?}");
    // The final screen: seven result lines, no status line left over.
    assert!(!last.contains("/7: "), "leftover status line:\n{last}");
    let results = last.lines().filter(|l| l.contains(" [")).count();
    assert_eq!(results, 7, "{last}");
    // Nothing on a pipe: the same run with stderr captured has no status line.
    let o = run(&["quick", "-t", "0.2", "-P", "2"], LIMIT);
    assert!(!stderr(&o).contains("/7: "), "{}", stderr(&o));
}

#[test]
fn an_iperf3_peer_gets_no_placeholder_env_line() {
    let srv = ServerProc::start(&[]);
    let o = run(
        &[
            "tcp",
            "127.0.0.1",
            "-p",
            &srv.port_s(),
            "--iperf3",
            "-t",
            "0.3",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let env: Vec<&str> = text.lines().filter(|l| l.contains(" env ")).collect();
    assert_eq!(env.len(), 2, "{text}");
    assert!(env[1].contains("server env not reported"), "{text}");
    assert!(!text.contains("(0 CPUs)") && !text.contains(" ?"), "{text}");
}

/// The --find-max knobs alone are a usage error that names --find-max (they used to be
/// accepted, and ignored, because their defaults satisfied clap's `requires`).
#[test]
fn find_max_knobs_need_find_max() {
    for args in [
        &["udp", "127.0.0.1:9", "--loss", "1%"][..],
        &["udp", "127.0.0.1:9", "--trial", "0.2"],
        &["pps", "127.0.0.1:9", "--precision", "5%"],
    ] {
        let o = run(args, LIMIT);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--find-max"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    // With --find-max they are accepted (and the run fails later, on the absent peer: 1).
    let o = run(
        &[
            "udp",
            "127.0.0.1:9",
            "--find-max",
            "--loss",
            "1%",
            "--trial",
            "0.2",
        ],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// iperf3's `--format m` (the long form of `-f`) is refused like `-f`, with the same advice,
/// exit 2 (it used to reach clap and fail on "invalid value 'm'").
#[test]
fn iperf3_long_format_is_refused_like_f() {
    let short = run(&["-c", "127.0.0.1", "-f", "m"], LIMIT);
    assert_eq!(short.status.code(), Some(2), "{}", stderr(&short));
    for args in [
        &["-c", "127.0.0.1", "--format", "m"][..],
        &["-c", "127.0.0.1", "--format=K"],
    ] {
        let o = run(args, LIMIT);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("long form of -f"), "{args:?}: {e}");
        assert!(
            e.contains("hakaru picks units itself")
                && stderr(&short).contains("hakaru picks units itself"),
            "{e}"
        );
        assert!(!e.contains("invalid value"), "{e}");
    }
}

/// A malformed HOST:PORT is a usage error naming the address forms (it used to be looked up
/// as a host name and fail with exit 1, "cannot resolve host").
#[test]
fn malformed_host_port_is_a_usage_error() {
    for args in [
        &["tcp", "127.0.0.1:5201:x"][..],
        &["udp", "host:1:2"],
        &["latency", "127.0.0.1:5201:x"],
    ] {
        let o = run(args, LIMIT);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("HOST:PORT") && e.contains("[IPv6]:PORT"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("cannot resolve"), "{e}");
    }
}
