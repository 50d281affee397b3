//! The servers a plan starts on its receivers: their command line, their start (or the reuse
//! of one already on the port), their lifelines, and their stop however the run ends.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::hosts::Ready;
use super::{GRACE, SERVER_START_LIMIT, STDERR_KEEP};
use crate::launch::last_line;

/// Keeps the tail of a stream for error messages.
pub(super) fn drain_to(buf: Arc<Mutex<String>>, mut r: impl Read + Send + 'static) {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if let Ok(mut b) = buf.lock() {
                b.push_str(&String::from_utf8_lossy(&chunk[..n]));
                if b.len() > STDERR_KEEP {
                    let cut = b.len() - STDERR_KEEP;
                    let cut = (cut..b.len()).find(|&i| b.is_char_boundary(i)).unwrap_or(0);
                    b.drain(..cut);
                }
            }
        }
    });
}

pub(super) fn tail(buf: &Arc<Mutex<String>>) -> String {
    buf.lock().map(|b| last_line(&b)).unwrap_or_default()
}

/// How a plan's server runs on a receiver.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ServerSpec {
    pub(super) port: u16,
    /// `-B`: the receiver's address (None: every address).
    pub(super) bind: Option<IpAddr>,
    /// `--allow` each: the addresses the plan's senders connect from.
    pub(super) allow: Vec<IpAddr>,
    /// `--max-duration`.
    pub(super) max_duration: Duration,
    /// `--max-tests`: the most clients one step runs against this receiver at once.
    pub(super) max_tests: u32,
}

/// The server's command line: bound to the receiver's address, open only to the plan's
/// senders, with a cap on a test's length, and the key from the first line of standard input.
pub(super) fn server_argv(hakaru: &str, spec: &ServerSpec) -> Vec<String> {
    let mut argv = vec![hakaru.to_string(), "server".into()];
    if let Some(ip) = spec.bind {
        argv.extend(["-B".into(), ip.to_string()]);
    }
    argv.extend([
        "-p".into(),
        spec.port.to_string(),
        "--exit-on-stdin-eof".into(),
        "--psk-file".into(),
        "-".into(),
        "--max-duration".into(),
        spec.max_duration.as_secs_f64().ceil().to_string(),
        // Several sender hosts may share an address (local and exec launchers); the plan
        // decides how many tests this server runs, not the per-address default.
        "--max-tests-per-client".into(),
        "4096".into(),
        // A step runs one client per sender against each receiver: a fleet's step may run
        // more than the server's default of 64 at once.
        "--max-tests".into(),
        spec.max_tests.to_string(),
        // ... and their connections set up at once, and their buffers together: the server
        // runs only the plan's own tests (its senders, with the run's key), each still under
        // the server's per-test memory cap (--max-test-memory).
        "--max-pending".into(),
        (spec.max_tests.saturating_mul(8))
            .clamp(512, 65536)
            .to_string(),
        "--max-memory".into(),
        "0".into(),
    ]);
    for ip in &spec.allow {
        argv.extend(["--allow".into(), ip.to_string()]);
    }
    argv
}

/// A server the coordinator started; its stdin is the server's lifeline.
pub(super) struct ServerProc {
    pub(super) host: String,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) stderr: Arc<Mutex<String>>,
    /// Set once its death has been reported.
    pub(super) reported: bool,
}

/// The servers the plan started, and the run's key they hold.
pub(super) struct Servers {
    pub(super) procs: Vec<ServerProc>,
    /// The run's key (hex); never on a command line.
    pub(super) key: String,
    /// Receivers whose server the plan started with the key (not a reused one).
    pub(super) keyed: BTreeSet<String>,
}

impl Servers {
    /// Receivers whose server has exited since the last call, with why.
    pub(super) fn newly_dead(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &mut self.procs {
            if s.reported {
                continue;
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                s.reported = true;
                out.push(format!(
                    "receiver `{}`: its hakaru server exited ({st}){}",
                    s.host,
                    match tail(&s.stderr) {
                        t if t.is_empty() => String::new(),
                        t => format!(": {t}"),
                    }
                ));
            }
        }
        out
    }

    /// Closes every lifeline, waits for the servers to go, kills what does not.
    pub(super) fn stop_all(&mut self, errors: &mut Vec<String>) {
        for s in &mut self.procs {
            s.stdin.take();
        }
        let deadline = Instant::now() + GRACE;
        for s in &mut self.procs {
            loop {
                match s.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = s.child.kill();
                        let _ = s.child.wait();
                        errors.push(format!(
                            "receiver `{}`: its server did not stop within {} s of its launcher closing; killed the launcher",
                            s.host,
                            GRACE.as_secs()
                        ));
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for s in &mut self.procs {
            s.stdin.take();
            if matches!(s.child.try_wait(), Ok(None)) {
                let _ = s.child.kill();
                let _ = s.child.wait();
            }
        }
    }
}

/// Starts `argv` on a host with stdin, stdout and stderr piped; stderr's tail is kept for
/// error messages. `who` names the host's role in the error.
pub(super) fn spawn_piped(
    r: &Ready,
    argv: &[String],
    who: &str,
) -> Result<(Child, Arc<Mutex<String>>), String> {
    let mut child = r
        .launcher
        .command(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{who}: cannot start {}: {e}", r.launcher.describe()))?;
    let stderr = Arc::new(Mutex::new(String::new()));
    if let Some(e) = child.stderr.take() {
        drain_to(Arc::clone(&stderr), e);
    }
    Ok((child, stderr))
}

/// How starting a plan's server went.
pub(super) enum Started {
    /// Listening.
    Running(ServerProc),
    /// The port is taken there: the server already on it is used.
    InUse,
    /// The bind address is not one of the receiver's own (the server's error).
    NotHere(String),
}

/// Starts `hakaru server` on a receiver as `spec` says, and gives it the run's key on the
/// first line of its standard input (the rest of which is its lifeline).
pub(super) fn start_server(
    host: &str,
    r: &Ready,
    spec: &ServerSpec,
    key: &str,
) -> Result<Started, String> {
    let argv = server_argv(&r.hakaru, spec);
    let (mut child, stderr) = spawn_piped(r, &argv, &format!("receiver `{host}`"))?;
    let mut stdin = child.stdin.take();
    if let Some(s) = stdin.as_mut() {
        // A server that exits at once (port in use) may close its end first: what it printed
        // says why, below.
        if s.write_all(format!("{key}\n").as_bytes())
            .and_then(|()| s.flush())
            .is_err()
        {
            stdin = None;
        }
    }
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let deadline = Instant::now() + SERVER_START_LIMIT;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(l) if l.starts_with("listening on") => {
                return Ok(Started::Running(ServerProc {
                    host: host.into(),
                    child,
                    stdin,
                    stderr,
                    reported: false,
                }))
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = child.wait();
                // Let the stderr reader catch up with what the server printed before exiting.
                std::thread::sleep(Duration::from_millis(50));
                let why = stderr.lock().map(|s| s.clone()).unwrap_or_default();
                if why.contains("in use") {
                    return Ok(Started::InUse);
                }
                if why.contains("assign requested address") && spec.bind.is_some() {
                    return Ok(Started::NotHere(last_line(&why)));
                }
                return Err(format!(
                    "receiver `{host}`: its hakaru server did not start: {}",
                    last_line(&why)
                ));
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "receiver `{host}`: its hakaru server did not report listening within {} s: {}",
                SERVER_START_LIMIT.as_secs(),
                tail(&stderr)
            ));
        }
    }
}
