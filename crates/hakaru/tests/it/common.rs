//! Helpers: running the hakaru binary and a server process stopped by its PID.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_hakaru")
}

/// A `hakaru` command.
pub fn hakaru() -> Command {
    let mut c = Command::new(bin());
    c.env_remove("RUST_LOG");
    // A developer's own archive settings must not reach the tests.
    for v in ["HAKARU_SAVE", "HAKARU_DB", "HAKARU_PUSH_GATEWAY"] {
        c.env_remove(v);
    }
    c
}

/// Runs hakaru with args, with a hard time limit, and returns its output.
pub fn run(args: &[&str], limit: Duration) -> Output {
    run_cmd(hakaru().args(args), limit)
}

/// Runs a command with a hard time limit (killed by PID when over).
pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_child(child, limit)
}

/// Waits for a started child with a hard time limit (killed by PID when over).
pub fn wait_child(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            kill(pid, libc_sigkill());
            panic!("command did not finish within {limit:?}");
        }
    }
}

fn libc_sigkill() -> i32 {
    9
}

/// Sends a signal to a PID (with kill(1), Debian's procps, which .ci/run installs).
pub fn kill(pid: u32, sig: i32) {
    let sent = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
    // Not a panic: this runs in Drop, also while a failed test unwinds.
    if let Err(e) = sent {
        eprintln!("cannot run `kill -{sig} {pid}`: {e}");
    }
}

/// The threads of process `pid` whose name begins with `prefix` (the kernel keeps 15 bytes of a
/// thread's name), as /proc/PID/task/TID paths.
#[cfg(target_os = "linux")]
pub fn threads_named(pid: u32, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(Vec::new(), |d| {
        d.flatten()
            .map(|t| t.path())
            .filter(|t| {
                std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.starts_with(prefix))
            })
            .collect()
    })
}

/// Pins every thread of process `pid` to CPU `cpu` (`taskset -a -p`); threads it creates later
/// inherit their creator's CPU.
#[cfg(target_os = "linux")]
pub fn pin_all_threads(pid: u32, cpu: u32) {
    let pinned = Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset runs");
    assert!(pinned.success(), "taskset -a -p -c {cpu} {pid} failed");
}

/// Parses stdout as one JSON document.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The number at JSON pointer `ptr` in `v`; fails the test when there is none.
pub fn num(v: &serde_json::Value, ptr: &str) -> f64 {
    v.pointer(ptr)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {ptr} in {v}"))
}

/// The count (unsigned integer) at JSON pointer `ptr` in `v`; fails the test when there is none.
pub fn count(v: &serde_json::Value, ptr: &str) -> u64 {
    v.pointer(ptr)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| panic!("no count at {ptr} in {v}"))
}

/// A number from /proc/PID/status (`Threads:`, `VmRSS:` in KiB); 0 when it cannot be read.
fn status_value(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Threads of process `pid` (0 when it cannot be read).
pub fn threads_of(pid: u32) -> usize {
    status_value(pid, "Threads:") as usize
}

/// Resident memory of process `pid`, KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    status_value(pid, "VmRSS:")
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The lines a child writes to stderr, as they come.
pub fn log_lines(err: ChildStderr) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The port of the first "listening on ADDR:PORT" line within 10 s; 0 if none came.
pub fn listening_port(log: &mpsc::Receiver<String>) -> u16 {
    listening_port_or_log(log).unwrap_or(0)
}

/// [`listening_port`], or the log lines read before the log ended or went quiet for 10 s
/// (a server that failed to start says why there).
pub fn listening_port_or_log(log: &mpsc::Receiver<String>) -> Result<u16, Vec<String>> {
    let mut seen = Vec::new();
    while let Ok(line) = log.recv_timeout(Duration::from_secs(10)) {
        if let Some(rest) = line.split("listening on ").nth(1) {
            return Ok(rest
                .trim()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("port in log line"));
        }
        seen.push(line);
    }
    Err(seen)
}

/// A `hakaru server` child process on a free loopback port; killed by PID when dropped.
pub struct ServerProc {
    pub child: Child,
    pub port: u16,
    pub log: mpsc::Receiver<String>,
}

impl ServerProc {
    /// Starts `hakaru server` with extra args, bound to 127.0.0.1 on a free port.
    pub fn start(extra: &[&str]) -> ServerProc {
        Self::start_with(hakaru(), "127.0.0.1", extra)
    }

    /// Starts a server from a prepared command (e.g. inside a network namespace).
    pub fn start_with(cmd: Command, bind: &str, extra: &[&str]) -> ServerProc {
        Self::start_on(cmd, bind, "0", extra)
    }

    /// The same on test port `port` (several servers on one port number, each on its own
    /// address).
    pub fn start_on(mut cmd: Command, bind: &str, port: &str, extra: &[&str]) -> ServerProc {
        let mut child = cmd
            .args(["server", "-B", bind, "-p", port, "-v"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn server");
        let rx = log_lines(child.stderr.take().expect("stderr"));
        let port = match listening_port_or_log(&rx) {
            Ok(p) => p,
            Err(seen) => panic!("server did not report its port; its log: {seen:?}"),
        };
        ServerProc {
            child,
            port,
            log: rx,
        }
    }

    /// Port as text.
    pub fn port_s(&self) -> String {
        self.port.to_string()
    }

    /// Collects log lines for up to `wait`, returning when one contains `needle`.
    pub fn wait_log(&self, needle: &str, wait: Duration) -> Option<String> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.log.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        // SIGKILL without kill(1): the wait below must not hang when that is missing.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True when running as root (namespace tests need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// True if a program is on PATH or in /usr/sbin, /sbin.
pub fn have(prog: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| std::path::Path::new(d).join(prog).exists())
}

/// A loopback TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// GET `path` from `127.0.0.1:port` with a bare HTTP/1.1 request; the whole answer, or the
/// error while nothing listens there yet (a server still starting).
pub fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Why a test returns early, or leaves a check out: the kind its SKIPPED line names.
/// `.ci/run` run as root allows only [`SkipKind::Steal`]; a line of any other kind fails CI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipKind {
    /// Not root: no network namespaces.
    Root,
    /// A network namespace set-up failed (`ip netns add`).
    Netns,
    /// A program the test runs is not installed or not built (a peer).
    Tool,
    /// No IPv6 loopback (`::1`) here.
    Ipv6,
    /// The hypervisor stole CPU time during a run, so its rate check is not made.
    Steal,
}

impl SkipKind {
    /// The kind as the SKIPPED line spells it.
    pub fn name(self) -> &'static str {
        match self {
            SkipKind::Root => "root",
            SkipKind::Netns => "netns",
            SkipKind::Tool => "tool",
            SkipKind::Ipv6 => "ipv6",
            SkipKind::Steal => "steal",
        }
    }
}

/// The one line a skip writes: `SKIPPED: <test>: <kind>: <reason>`, on one line whatever the
/// reason holds (a command's stderr may have several).
pub fn skip_line(test: &str, kind: SkipKind, reason: &str) -> String {
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("SKIPPED: {test}: {}: {reason}", kind.name())
}

/// The running test's name: libtest runs each test on a thread named after it.
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed thread)")
        .to_string()
}

/// Says why the running test returns early (or leaves a check out), right before it does: one
/// SKIPPED line on stderr and, when `HAKARU_TEST_SKIP_LOG` names a file, the same line appended
/// to it, since cargo test hides the output of a passing test (`.ci/run` counts and lists the
/// lines of that file).
pub fn skip(kind: SkipKind, reason: &str) {
    let log = SKIP_LOG_HERE.with(|l| l.borrow().clone()).or_else(|| {
        std::env::var_os("HAKARU_TEST_SKIP_LOG")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
    });
    skip_to(log.as_deref(), kind, reason);
}

thread_local! {
    /// Where this thread's skips go instead of HAKARU_TEST_SKIP_LOG (set by [`skips_of`]).
    static SKIP_LOG_HERE: std::cell::RefCell<Option<std::path::PathBuf>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the skips it makes going to a file of its own rather than to
/// HAKARU_TEST_SKIP_LOG, and returns what `f` returned with those SKIPPED lines: for the tests
/// of the skip helpers, whose skips are not the suite's (`.ci/run` would count them).
pub fn skips_of<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("hakaru-skips-{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    SKIP_LOG_HERE.with(|l| *l.borrow_mut() = Some(path.clone()));
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    SKIP_LOG_HERE.with(|l| *l.borrow_mut() = None);
    let lines = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    let _ = std::fs::remove_file(&path);
    match got {
        Ok(r) => (r, lines),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// The message of a caught panic.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// [`skip`] with the log file given rather than read from the environment.
pub fn skip_to(log: Option<&std::path::Path>, kind: SkipKind, reason: &str) {
    use std::io::Write;
    let line = skip_line(&test_name(), kind, reason);
    eprintln!("{line}");
    let Some(path) = log else { return };
    // One write of a whole line in append mode: the lines of tests running at once, in this
    // and in other test binaries, do not mix.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    // A skip the log cannot show would pass unseen: that fails the test instead.
    if let Err(e) = written {
        panic!(
            "cannot append to HAKARU_TEST_SKIP_LOG {}: {e} ({line})",
            path.display()
        );
    }
}

/// What a network set-up this machine cannot make (no root, a failing `ip netns add`, no
/// IPv6 loopback) does to its test: `HAKARU_TEST_NETNS=required` (set by `.ci/run` as root,
/// where every one can be made) makes it a failure naming why; otherwise the test is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsMode {
    /// A set-up that cannot be made skips the test, saying why.
    Optional,
    /// A set-up that cannot be made fails the test.
    Required,
}

impl NetnsMode {
    /// The mode `HAKARU_TEST_NETNS` asks for.
    pub fn from_env() -> NetnsMode {
        NetnsMode::parse(std::env::var("HAKARU_TEST_NETNS").ok().as_deref())
    }

    /// The mode a value of `HAKARU_TEST_NETNS` asks for. A value that is neither `required`
    /// nor `optional` (nor unset or empty) is a typo that would silently allow skips: refused.
    pub fn parse(value: Option<&str>) -> NetnsMode {
        match value {
            Some("required") => NetnsMode::Required,
            None | Some("" | "optional") => NetnsMode::Optional,
            Some(other) => panic!(
                "HAKARU_TEST_NETNS is {other:?}: only `required` or `optional` (the default) mean something"
            ),
        }
    }
}

/// The network set-up the running test needs cannot be made here, for `why` (the command and
/// what it printed, where one failed): under [`NetnsMode::Required`] a failure, otherwise a
/// SKIPPED line of `kind`. The test returns early after this.
pub fn netns_unavailable(mode: NetnsMode, kind: SkipKind, why: &str) {
    if mode == NetnsMode::Required {
        panic!("{why}; HAKARU_TEST_NETNS=required (.ci/run as root) requires this set-up");
    }
    skip(kind, why);
}

/// True when this machine has IPv6 loopback (`::1`). Where it does not, the IPv6 part of a
/// test is left out with a SKIPPED line, or fails it under HAKARU_TEST_NETNS=required.
pub fn ipv6_loopback() -> bool {
    ipv6_loopback_with(NetnsMode::from_env())
}

/// [`ipv6_loopback`] with the mode given.
pub fn ipv6_loopback_with(mode: NetnsMode) -> bool {
    match std::net::TcpListener::bind("[::1]:0") {
        Ok(_) => true,
        Err(e) => {
            let why = format!("no IPv6 loopback here (binding [::1]:0: {e})");
            netns_unavailable(mode, SkipKind::Ipv6, &why);
            false
        }
    }
}

/// What a missing peer does to its test: `HAKARU_TEST_PEERS=required` (set by `.ci/run` as
/// root, where every peer is installed) makes it a failure; otherwise the test is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMode {
    /// A missing peer skips the test, saying so.
    Optional,
    /// A missing peer fails the test: it means a missing install step.
    Required,
}

impl PeerMode {
    /// The mode `HAKARU_TEST_PEERS` asks for.
    pub fn from_env() -> PeerMode {
        match std::env::var("HAKARU_TEST_PEERS").as_deref() {
            Ok("required") => PeerMode::Required,
            _ => PeerMode::Optional,
        }
    }
}

/// The CI script, whose install list every peer must be on.
const CI_RUN: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run"));

/// Whether the real component `prog` (a Debian package `.ci/run` installs: `package`) is
/// here. Where it is not: a loud SKIPPED line on a developer's machine, but a failure under
/// `.ci/run` (HAKARU_TEST_PEERS=required), where a missing peer means a missing install step.
/// Every test that runs an external program checks it through here first.
pub fn peer(prog: &str, package: &str) -> bool {
    peer_with(PeerMode::from_env(), prog, package)
}

/// [`peer`] with the mode given rather than read from the environment.
pub fn peer_with(mode: PeerMode, prog: &str, package: &str) -> bool {
    // A peer .ci/run does not install would skip (or fail) there for good: name the fix.
    assert!(
        CI_RUN.contains(&format!("need+=({package})"))
            || CI_RUN.starts_with(&format!("#!/usr/bin/env {package}\n")),
        "{prog}: .ci/run does not install the Debian package {package}; add it there"
    );
    if have(prog) {
        return true;
    }
    if mode == PeerMode::Required {
        panic!("{prog} is not installed, and .ci/run requires it (Debian package {package})");
    }
    skip(
        SkipKind::Tool,
        &format!("{prog} is not installed (.ci/run installs the Debian package {package})"),
    );
    false
}

#[test]
fn a_missing_peer_fails_when_peers_are_required() {
    let missing = "hakaru-no-such-peer-program";
    assert!(!have(missing));
    let (here, lines) = skips_of(|| peer_with(PeerMode::Optional, missing, "iperf3"));
    assert!(!here);
    assert_eq!(
        lines,
        [format!(
            "SKIPPED: {}: tool: {missing} is not installed (.ci/run installs the Debian package iperf3)",
            test_name()
        )]
    );
    let got = std::panic::catch_unwind(|| peer_with(PeerMode::Required, missing, "iperf3"));
    let msg = got.expect_err("a missing peer must fail the test when required");
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .unwrap_or_default();
    assert!(
        msg.contains(missing) && msg.contains("Debian package iperf3"),
        "{msg}"
    );
    // A peer that is here passes in either mode, whatever PATH holds: the binary under test,
    // by its full path (the package only has to be one .ci/run provides).
    assert!(peer_with(PeerMode::Required, bin(), "bash"));
    assert!(peer_with(PeerMode::Optional, bin(), "bash"));
}

#[test]
fn a_peer_that_ci_does_not_install_is_a_test_bug() {
    let got = std::panic::catch_unwind(|| {
        peer_with(PeerMode::Optional, "bash", "hakaru-no-such-package")
    });
    assert!(
        got.is_err(),
        "a package .ci/run does not install must be refused"
    );
}

/// The path of a peer built from the shared sources by `../shared/peers/build.sh NAME` into
/// /opt/hakaru-peers/NAME (netperf 2.7.1: `bin/netperf`, `bin/netserver`), if it is there.
/// Like [`peer`]: a missing build fails under HAKARU_TEST_PEERS=required (.ci/run builds it).
pub fn built_peer(name: &str, prog: &str) -> Option<std::path::PathBuf> {
    built_peer_with(PeerMode::from_env(), name, prog)
}

/// [`built_peer`] with the mode given.
pub fn built_peer_with(mode: PeerMode, name: &str, prog: &str) -> Option<std::path::PathBuf> {
    assert!(
        CI_RUN.contains(&format!("build.sh {name}")),
        "{prog}: .ci/run does not build {name} with ../shared/peers/build.sh; add it there"
    );
    let path = std::path::Path::new("/opt/hakaru-peers")
        .join(name)
        .join("bin")
        .join(prog);
    if path.exists() {
        return Some(path);
    }
    if mode == PeerMode::Required {
        panic!(
            "{} is not built, and .ci/run requires it (../shared/peers/build.sh {name})",
            path.display()
        );
    }
    skip(
        SkipKind::Tool,
        &format!(
            "{} is not built (../shared/peers/build.sh {name})",
            path.display()
        ),
    );
    None
}

#[test]
fn a_missing_built_peer_fails_when_peers_are_required() {
    let got = std::panic::catch_unwind(|| {
        built_peer_with(PeerMode::Required, "netperf", "hakaru-no-such-program")
    });
    assert!(
        got.is_err(),
        "a missing built peer must fail the test when required"
    );
    let (path, lines) =
        skips_of(|| built_peer_with(PeerMode::Optional, "netperf", "hakaru-no-such-program"));
    assert!(path.is_none());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0]
        .contains(": tool: /opt/hakaru-peers/netperf/bin/hakaru-no-such-program is not built"));
}

#[test]
fn netns_mode_is_required_only_when_asked_and_a_typo_is_refused() {
    assert_eq!(NetnsMode::parse(None), NetnsMode::Optional);
    assert_eq!(NetnsMode::parse(Some("")), NetnsMode::Optional);
    assert_eq!(NetnsMode::parse(Some("optional")), NetnsMode::Optional);
    assert_eq!(NetnsMode::parse(Some("required")), NetnsMode::Required);
    let got = std::panic::catch_unwind(|| NetnsMode::parse(Some("requried")));
    let msg = panic_text(&*got.expect_err("a misspelt mode must not mean optional"));
    assert!(msg.contains("\"requried\""), "{msg}");
}

#[test]
fn a_skip_is_one_line_naming_the_test_kind_and_reason() {
    // libtest names the test's thread after it: the line says which test skipped.
    assert_eq!(
        test_name(),
        "common::a_skip_is_one_line_naming_the_test_kind_and_reason"
    );
    let ((), lines) = skips_of(|| {
        skip(
            SkipKind::Netns,
            "`ip netns add x` failed:\n  Cannot create\n",
        );
        skip(SkipKind::Steal, "the rate check of x");
    });
    assert_eq!(
        lines,
        [
            "SKIPPED: common::a_skip_is_one_line_naming_the_test_kind_and_reason: netns: `ip netns add x` failed: Cannot create",
            "SKIPPED: common::a_skip_is_one_line_naming_the_test_kind_and_reason: steal: the rate check of x",
        ]
    );
}

#[test]
fn an_unavailable_network_set_up_fails_when_namespaces_are_required() {
    let why = "`ip netns add hk-x` failed: Permission denied";
    let (got, lines) = skips_of(|| {
        std::panic::catch_unwind(|| netns_unavailable(NetnsMode::Required, SkipKind::Netns, why))
    });
    let msg = panic_text(&*got.expect_err("required: a failed set-up fails the test"));
    assert!(
        msg.contains(why) && msg.contains("HAKARU_TEST_NETNS=required"),
        "{msg}"
    );
    assert!(lines.is_empty(), "a failure is not also a skip: {lines:?}");
    let ((), lines) = skips_of(|| netns_unavailable(NetnsMode::Optional, SkipKind::Root, why));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with(&format!(": root: {why}")), "{lines:?}");
}

/// Version line of a peer tool (`iperf3`, `sockperf`, `iperf`, ...), e.g. "3.12".
pub fn peer_version(tool: &str) -> String {
    if tool == "udpst" {
        // `udpst -v` prints its version and then serves: the build's source tarball names it
        // (obudpst-9.0.0-....tar.gz).
        let from =
            std::fs::read_to_string("/opt/hakaru-peers/udpst/BUILT_FROM").unwrap_or_default();
        return from
            .split('-')
            .nth(1)
            .filter(|v| v.contains('.'))
            .unwrap_or("?")
            .to_string();
    }
    let flag = match tool {
        "iperf" => "-v",
        _ => "--version",
    };
    // Peers built from the shared sources live in /opt/hakaru-peers (netperf: `-V`; mach).
    let built = std::path::Path::new("/opt/hakaru-peers")
        .join(tool)
        .join("bin")
        .join(tool);
    let (prog, flag) = match tool {
        "netperf" => (built.as_os_str(), "-V"),
        "mach" => (built.as_os_str(), flag),
        _ => (std::ffi::OsStr::new(tool), flag),
    };
    let out = Command::new(prog).arg(flag).output();
    let text = match out {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(_) => return "?".into(),
    };
    // The first token that looks like a version number (digits and dots, at least one dot).
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '-' || c == '(')
        .find(|w| {
            w.contains('.')
                && w.chars().next().is_some_and(|c| c.is_ascii_digit())
                && w.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
        .unwrap_or("?")
        .to_string()
}

/// Records one passed interoperability case for docs/compatibility.md. Call it at the very
/// end of a test, after every assertion: a case that failed leaves no record.
/// `role` is hakaru's role ("server", "client", "sink", "source"), `mode` what ran
/// (e.g. "TCP -P 4 -R"), `direction` which way data went in words.
pub fn compat_pass(peer: &str, role: &str, mode: &str, direction: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/compat");
    let _ = std::fs::create_dir_all(&dir);
    let rec = serde_json::json!({
        "peer": peer,
        "version": peer_version(peer),
        "hakaru_role": role,
        "mode": mode,
        "direction": direction,
        "status": "pass",
    });
    let name: String = format!("{peer}-{role}-{mode}-{direction}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let _ = std::fs::write(dir.join(format!("{name}.json")), rec.to_string());
}

/// Reads control messages from a raw connection until one arrives or `wait` passes.
pub fn read_msg(
    s: &mut std::net::TcpStream,
    dec: &mut hakaru_proto::Decoder,
    wait: Duration,
) -> Option<hakaru_proto::Message> {
    let deadline = std::time::Instant::now() + wait;
    let mut buf = [0u8; 65536];
    loop {
        if let Ok(Some(m)) = dec.next_message() {
            return Some(m);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match std::io::Read::read(s, &mut buf) {
            Ok(0) | Err(_) => return dec.next_message().ok().flatten(),
            Ok(n) => dec.feed(&buf[..n]),
        }
    }
}

/// A test CA and a certificate for `ip` and localhost signed by it (`ca.pem`, `cert.pem`,
/// `key.pem` in `dir`), made by openssl.
pub fn make_certs(dir: &std::path::Path, ip: &str) {
    let sh = format!(
        "set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=hakaru-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout key.pem -out cert.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:{ip}\\nbasicConstraints=CA:FALSE\\n' > ext.cnf
openssl x509 -req -in cert.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf 2>/dev/null",
        d = dir.display()
    );
    let o = run_cmd(
        Command::new("sh").args(["-c", &sh]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "openssl: {}", stderr(&o));
}
