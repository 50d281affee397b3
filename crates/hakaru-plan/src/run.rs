//! The coordinator: prepares every host, starts (or reuses) a server on every receiver, runs
//! each step's clients with a held start and releases them together, merges what they report,
//! and stops everything it started however the run ends.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_model::plan::{
    add_record, aggregate, spread_ms, timeline, PlanHost, PlanResult, PlanRun, Release, RunRef,
    StepResult, TimelineRow, PLAN_SCHEMA_VERSION,
};
use hakaru_model::{rfc3339_utc, FlowDir, IntervalRecord, RunResult};

use crate::file::{parse_secs, PlanFile, Step};
use crate::launch::{last_line, probe_version, push, run_bounded, Image, Launcher};

/// Default server port on receivers.
pub const DEFAULT_PORT: u16 = 5201;
const PROBE_LIMIT: Duration = Duration::from_secs(30);
const PUSH_LIMIT: Duration = Duration::from_secs(120);
const SERVER_START_LIMIT: Duration = Duration::from_secs(20);
/// Longest a route lookup (`ip route get`) in a sender's namespace may take.
const ROUTE_LIMIT: Duration = Duration::from_secs(10);
/// Longest step a bytes step without a `timeout` may run (as in `run_step`).
const UNBOUNDED_STEP: Duration = Duration::from_secs(3600);
const DEFAULT_SETUP: Duration = Duration::from_secs(60);
/// Time past a step's expected end before its clients are told to stop.
const STEP_MARGIN: Duration = Duration::from_secs(60);
/// Time after a stop before clients (and servers at the end) are killed.
const GRACE: Duration = Duration::from_secs(15);
/// How long a step whose clients failed waits to see whether a receiver's server exited.
const SERVER_EXIT_WAIT: Duration = Duration::from_millis(500);
/// Most stderr kept per process for error messages.
const STDERR_KEEP: usize = 16 << 10;

/// Checks a client command line; the error says what the parser refused.
pub type Validate = dyn Fn(&[String]) -> Result<(), String>;

/// What the coordinator needs besides the plan.
pub struct Options {
    /// The plan file as given (for the result).
    pub plan_path: String,
    /// The coordinator's own binary: run as is on local and netns hosts, copied by `push`.
    pub self_binary: std::path::PathBuf,
    /// The coordinator's version line (`hakaru 0.1.0`); every host must report the same.
    pub version: String,
    /// Checks a client command line (the subcommand and its flags) before anything runs.
    pub validate: Box<Validate>,
    /// Set on Ctrl-C: stop the running step (its results are kept) and run no more.
    pub stop: Arc<AtomicBool>,
}

/// Checks every step's client command line (the subcommand and its flags, against a
/// documentation address) with `validate`; one message per refused step.
pub fn invalid_commands(steps: &[Step], validate: &Validate) -> Vec<String> {
    steps
        .iter()
        .filter_map(|step| {
            let mut argv = vec![step.kind.name().to_string(), "192.0.2.1".into()];
            // The first client's flags: with probes, it always has them.
            argv.extend(step.client_flags(0, 0));
            // The key is the plan's: a client of a server the plan started reads it from its
            // standard input, so a --psk-file of the step's own is refused here.
            argv.extend(["--psk-file".to_string(), "-".to_string()]);
            validate(&argv).err().map(|e| {
                format!(
                    "step {} ({}): the options make an invalid `hakaru {}` command: {e}",
                    step.index,
                    step.name,
                    step.kind.name()
                )
            })
        })
        .collect()
}

/// Live progress of a run; every method has a no-op default.
pub trait PlanObserver {
    /// A host is prepared (or failed: `version` is None).
    fn on_host(&mut self, _host: &PlanHost) {}
    /// Something worth a line (a reused server, a warning).
    fn on_note(&mut self, _message: &str) {}
    /// A step starts setting up.
    fn on_step_start(&mut self, _step: &Step, _of: usize) {}
    /// Every client of the step is set up and released.
    fn on_release(&mut self, _step: &Step, _release: &Release) {}
    /// One interval merged across every run of the step.
    fn on_row(&mut self, _step: &Step, _row: &TimelineRow) {}
    /// A step is over.
    fn on_step_end(&mut self, _step: &StepResult) {}
}

/// A host ready to run commands.
struct Ready {
    launcher: Launcher,
    hakaru: String,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Keeps the tail of a stream for error messages.
fn drain_to(buf: Arc<Mutex<String>>, mut r: impl Read + Send + 'static) {
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

fn tail(buf: &Arc<Mutex<String>>) -> String {
    buf.lock().map(|b| last_line(&b)).unwrap_or_default()
}

/// Runs a plan that `check::check` passed.
pub fn run(plan: &PlanFile, opts: &Options, obs: &mut dyn PlanObserver) -> PlanResult {
    let started_at_unix = now_unix();
    let steps = crate::file::expand(plan);
    let mut result = PlanResult {
        schema_version: PLAN_SCHEMA_VERSION,
        tool: "hakaru".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        test: "plan".into(),
        plan: opts.plan_path.clone(),
        started_at: rfc3339_utc(started_at_unix),
        started_at_unix,
        hosts: Vec::new(),
        steps: Vec::new(),
        interrupted: false,
        errors: Vec::new(),
    };
    // Every client command line is checked before any host is touched.
    result.errors = invalid_commands(&steps, &*opts.validate);
    if !result.errors.is_empty() {
        return result;
    }
    // A netserver host runs nothing of the plan's: it is never contacted.
    let used: Vec<String> = plan
        .hosts
        .iter()
        .filter(|(_, spec)| !spec.is_netserver())
        .map(|(h, _)| h)
        .filter(|h| {
            steps
                .iter()
                .any(|s| s.senders.contains(h) || s.receivers.contains(h))
        })
        .cloned()
        .collect();
    let ready = prepare_hosts(plan, opts, &used, &mut result, obs);
    if !result.errors.is_empty() {
        return result;
    }
    let setup = plan
        .defaults
        .setup_timeout
        .as_ref()
        .and_then(|t| parse_secs(&t.to_string()))
        .unwrap_or(DEFAULT_SETUP);
    let key = match run_key() {
        Ok(k) => k,
        Err(e) => {
            result.errors.push(e);
            return result;
        }
    };
    let mut servers = Servers {
        procs: Vec::new(),
        key,
        keyed: BTreeSet::new(),
    };
    for name in used
        .iter()
        .filter(|h| steps.iter().any(|s| s.receivers.contains(h)))
    {
        let port = port_of(plan, name);
        let allow = match sources_of(plan, &steps, name, &ready) {
            Ok(a) => a,
            Err(e) => {
                result.errors.extend(e);
                continue;
            }
        };
        let address = plan.hosts[name].address.clone().unwrap_or_default();
        let bind = address.parse::<IpAddr>().ok();
        if bind.is_none() {
            obs.on_note(&format!(
                "receiver `{name}`: its address `{address}` is not an IP address, so its server listens on every address (still only for the plan's senders, and with the run's key)"
            ));
        }
        let server = ServerSpec {
            port,
            bind,
            allow,
            max_duration: server_cap(&steps, name, setup),
        };
        let mut started = start_server(name, &ready[name], &server, &servers.key);
        if let (Ok(Started::NotHere(why)), Some(ip)) = (&started, bind) {
            obs.on_note(&format!(
                "receiver `{name}`: {ip} is not one of its own addresses ({why}; NAT?), so its server listens on every address (still only for the plan's senders, and with the run's key)"
            ));
            let every = ServerSpec {
                bind: None,
                ..server
            };
            started = start_server(name, &ready[name], &every, &servers.key);
        }
        match started {
            Ok(Started::Running(srv)) => {
                set_server(&mut result, name, "started");
                servers.keyed.insert(name.clone());
                servers.procs.push(srv);
            }
            Ok(Started::InUse) => {
                set_server(&mut result, name, "reused");
                obs.on_note(&format!(
                    "receiver `{name}`: port {port} is already in use there; using the server that listens on it (not stopped at the end; the plan's clients give it no key)"
                ));
            }
            Ok(Started::NotHere(why)) => result.errors.push(format!(
                "receiver `{name}`: its hakaru server did not start: {why}"
            )),
            Err(e) => result.errors.push(e),
        }
    }
    if result.errors.is_empty() {
        // A search runs many trials, each a step of the result: later steps move up.
        let mut shift = 0u32;
        for step in &steps {
            if opts.stop.load(Ordering::Acquire) {
                result.interrupted = true;
                break;
            }
            let shifted;
            let step = if shift > 0 {
                shifted = Step {
                    index: step.index + shift,
                    ..step.clone()
                };
                &shifted
            } else {
                step
            };
            if let Some(fm) = &step.find_max {
                let srs = run_search(plan, step, fm, &ready, &mut servers, setup, opts, obs);
                shift += (srs.len() as u32).saturating_sub(1);
                for sr in srs {
                    result.errors.extend(sr.errors.iter().cloned());
                    result.steps.push(sr);
                }
                if opts.stop.load(Ordering::Acquire) {
                    result.interrupted = true;
                    break;
                }
                continue;
            }
            obs.on_step_start(step, steps.len());
            let sr = run_step(plan, step, &ready, &mut servers, setup, opts, obs);
            result.errors.extend(sr.errors.iter().cloned());
            obs.on_step_end(&sr);
            result.steps.push(sr);
            if opts.stop.load(Ordering::Acquire) {
                result.interrupted = true;
                break;
            }
        }
    }
    servers.stop_all(&mut result.errors);
    result
}

fn set_server(result: &mut PlanResult, name: &str, how: &str) {
    if let Some(h) = result.hosts.iter_mut().find(|h| h.name == name) {
        h.server = Some(how.into());
    }
}

fn port_of(plan: &PlanFile, host: &str) -> u16 {
    match plan.hosts.get(host) {
        Some(h) if h.is_netserver() => h.port.unwrap_or(NETSERVER_PORT),
        h => h
            .and_then(|h| h.port)
            .or(plan.defaults.port)
            .unwrap_or(DEFAULT_PORT),
    }
}

/// A stock netserver's control port.
const NETSERVER_PORT: u16 = 12865;

/// The run's key: 32 bytes from the OS, as hex (64 characters). Every server the plan starts
/// and every client of those servers reads it from the first line of its standard input
/// (`--psk-file -`); it is on no command line and in no environment.
fn run_key() -> Result<String, String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| format!("cannot draw the run's key from the OS: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Longest a step runs once released before its clients are told to stop: `timeout`, else
/// the test's time and warm-up plus a margin, else (a `bytes` step) an hour.
fn step_limit(step: &Step) -> Duration {
    step.timeout
        .unwrap_or_else(|| step.expected.map_or(UNBOUNDED_STEP, |e| e + STEP_MARGIN))
}

/// `--max-duration` of a receiver's server: the longest of its steps (the coordinator's own
/// limit for it, or the test's time if longer) plus the set-up time (a held UDP test counts
/// from its set-up on the server).
fn server_cap(steps: &[Step], receiver: &str, setup: Duration) -> Duration {
    steps
        .iter()
        .filter(|s| s.receivers.iter().any(|r| r == receiver))
        .map(|s| step_limit(s).max(s.expected.unwrap_or_default()))
        .max()
        .unwrap_or(UNBOUNDED_STEP)
        + setup
}

/// The addresses the plan's clients of `receiver` connect from: for each sender of a step
/// with that receiver, the source address of the route to the receiver (local and netns
/// senders: looked up on this machine, `ip route get` in the namespace), else its `address`
/// (an IP, or a name resolved here). One message per sender whose address is unknown.
fn sources_of(
    plan: &PlanFile,
    steps: &[Step],
    receiver: &str,
    ready: &BTreeMap<String, Ready>,
) -> Result<Vec<IpAddr>, Vec<String>> {
    let port = port_of(plan, receiver);
    let raddr = plan.hosts[receiver].address.clone().unwrap_or_default();
    let targets: Vec<IpAddr> = match raddr.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => (raddr.as_str(), port)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default(),
    };
    let mut senders: Vec<&String> = Vec::new();
    for s in steps
        .iter()
        .filter(|s| s.receivers.iter().any(|r| r == receiver))
    {
        for h in &s.senders {
            if !senders.contains(&h) {
                senders.push(h);
            }
        }
    }
    let mut out = BTreeSet::new();
    let mut errors = Vec::new();
    for s in senders {
        let routed: Vec<IpAddr> = match &ready[s].launcher {
            Launcher::Local => targets
                .iter()
                .filter_map(|t| local_source(*t, port))
                .collect(),
            Launcher::Netns(_) => targets
                .iter()
                .filter_map(|t| netns_source(&ready[s].launcher, *t))
                .collect(),
            _ => Vec::new(),
        };
        if !routed.is_empty() {
            out.extend(routed);
            continue;
        }
        match plan.hosts[s].address.as_deref().map(str::trim) {
            Some(a) => match a.parse::<IpAddr>() {
                Ok(ip) => {
                    out.insert(ip);
                }
                Err(_) => match (a, 0).to_socket_addrs() {
                    Ok(addrs) => out.extend(addrs.map(|a| a.ip())),
                    Err(e) => errors.push(format!(
                        "receiver `{receiver}`: cannot resolve the address `{a}` of sender `{s}` here ({e}); its server accepts only the plan's senders: give an IP address"
                    )),
                },
            },
            None => errors.push(format!(
                "receiver `{receiver}`: cannot tell which address sender `{s}` connects from; its server accepts only the plan's senders: set the sender's address (as the receivers see its connections)"
            )),
        }
    }
    if errors.is_empty() {
        Ok(out.into_iter().collect())
    } else {
        Err(errors)
    }
}

/// This machine's source address towards `target` (a route lookup: nothing is sent).
fn local_source(target: IpAddr, port: u16) -> Option<IpAddr> {
    let any: IpAddr = if target.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = UdpSocket::bind((any, 0)).ok()?;
    s.connect((target, port.max(1))).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// The source address towards `target` in a network namespace (`ip route get`).
fn netns_source(launcher: &Launcher, target: IpAddr) -> Option<IpAddr> {
    let cmd = launcher.command(&[
        "ip".to_string(),
        "route".to_string(),
        "get".to_string(),
        target.to_string(),
    ]);
    let o = run_bounded(cmd, None, ROUTE_LIMIT).ok()?;
    if o.code != Some(0) {
        return None;
    }
    route_src(&o.stdout)
}

/// The `src` of an `ip route get` answer.
fn route_src(text: &str) -> Option<IpAddr> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "src")
        .and_then(|w| w[1].parse().ok())
}

/// How a plan's server runs on a receiver.
#[derive(Debug, Clone, PartialEq)]
struct ServerSpec {
    port: u16,
    /// `-B`: the receiver's address (None: every address).
    bind: Option<IpAddr>,
    /// `--allow` each: the addresses the plan's senders connect from.
    allow: Vec<IpAddr>,
    /// `--max-duration`.
    max_duration: Duration,
}

/// The server's command line: bound to the receiver's address, open only to the plan's
/// senders, with a cap on a test's length, and the key from the first line of standard input.
fn server_argv(hakaru: &str, spec: &ServerSpec) -> Vec<String> {
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
    ]);
    for ip in &spec.allow {
        argv.extend(["--allow".into(), ip.to_string()]);
    }
    argv
}

/// Version checks (and pushes) on every used host, in parallel.
fn prepare_hosts(
    plan: &PlanFile,
    opts: &Options,
    used: &[String],
    result: &mut PlanResult,
    obs: &mut dyn PlanObserver,
) -> BTreeMap<String, Ready> {
    let default_ssh = plan.defaults.ssh_options.clone().unwrap_or_default();
    let needs_push = used.iter().any(|h| {
        let spec = &plan.hosts[h];
        let same = Launcher::of(spec, &default_ssh).same_machine();
        plan.binary_of(spec, same, "").is_none()
    });
    let image: Option<Arc<Image>> = if needs_push {
        match std::fs::read(&opts.self_binary) {
            Ok(b) => Some(Arc::new(Image::new(b))),
            Err(e) => {
                result.errors.push(format!(
                    "push: cannot read this hakaru binary ({}): {e}",
                    opts.self_binary.display()
                ));
                return BTreeMap::new();
            }
        }
    } else {
        None
    };
    let self_path = opts.self_binary.to_string_lossy().to_string();
    let handles: Vec<_> = used
        .iter()
        .map(|name| {
            let spec = plan.hosts[name].clone();
            let launcher = Launcher::of(&spec, &default_ssh);
            let at = plan.binary_of(&spec, launcher.same_machine(), &self_path);
            let pushed = at.is_none();
            let image = image.clone();
            // Until the push names the verified file, the name it will have.
            let hakaru = at.unwrap_or_else(|| image.as_deref().map_or(String::new(), Image::file_name));
            let name = name.clone();
            let want = opts.version.clone();
            std::thread::spawn(move || {
                let mut host = PlanHost {
                    name: name.clone(),
                    address: spec.address.clone(),
                    launcher: launcher.describe(),
                    hakaru,
                    version: None,
                    pushed,
                    server: None,
                };
                let mut notes = Vec::new();
                let outcome = (|| {
                    if pushed {
                        let Some(image) = image.as_deref() else {
                            return Err(format!("host `{name}`: nothing to push"));
                        };
                        // Only a file the far host verified is ever run.
                        let p = push(&name, &launcher, image, PUSH_LIMIT)?;
                        notes = p.notes;
                        host.hakaru = p.path;
                    }
                    let hakaru = &host.hakaru;
                    let v = probe_version(&name, &launcher, hakaru, PROBE_LIMIT)?;
                    host.version = Some(v.clone());
                    if v != want {
                        return Err(format!(
                            "host `{name}`: {hakaru} there is {v}, the coordinator is {want}; run the same version (push = true copies this one)"
                        ));
                    }
                    Ok(())
                })();
                let hakaru = host.hakaru.clone();
                (host, Ready { launcher, hakaru }, outcome, notes)
            })
        })
        .collect();
    let mut ready = BTreeMap::new();
    for h in handles {
        match h.join() {
            Ok((host, r, outcome, notes)) => {
                for n in &notes {
                    obs.on_note(n);
                }
                obs.on_host(&host);
                if let Err(e) = outcome {
                    result.errors.push(e);
                }
                ready.insert(host.name.clone(), r);
                result.hosts.push(host);
            }
            Err(_) => result
                .errors
                .push("internal error: a host preparation thread panicked".into()),
        }
    }
    ready
}

/// A server the coordinator started; its stdin is the server's lifeline.
struct ServerProc {
    host: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
    /// Set once its death has been reported.
    reported: bool,
}

/// The servers the plan started, and the run's key they hold.
struct Servers {
    procs: Vec<ServerProc>,
    /// The run's key (hex); never on a command line.
    key: String,
    /// Receivers whose server the plan started with the key (not a reused one).
    keyed: BTreeSet<String>,
}

impl Servers {
    /// Receivers whose server has exited since the last call, with why.
    fn newly_dead(&mut self) -> Vec<String> {
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
    fn stop_all(&mut self, errors: &mut Vec<String>) {
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
fn spawn_piped(
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
enum Started {
    /// Listening.
    Running(ServerProc),
    /// The port is taken there: the server already on it is used.
    InUse,
    /// The bind address is not one of the receiver's own (the server's error).
    NotHere(String),
}

/// Starts `hakaru server` on a receiver as `spec` says, and gives it the run's key on the
/// first line of its standard input (the rest of which is its lifeline).
fn start_server(host: &str, r: &Ready, spec: &ServerSpec, key: &str) -> Result<Started, String> {
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

/// What a client's reader thread reports.
enum Ev {
    Ready,
    Released(f64),
    Interval(Box<IntervalRecord>),
    End(Box<RunResult>),
    Error(String),
    Eof,
}

/// One client of a step.
struct Client {
    sender: String,
    receiver: String,
    command: Vec<String>,
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
    ready: bool,
    released_at: Option<f64>,
    ack: Option<Instant>,
    result: Option<RunResult>,
    error: Option<String>,
    eof: bool,
    last_index: Option<u32>,
}

impl Client {
    fn say(&mut self, word: &str) {
        if let Some(s) = self.stdin.as_mut() {
            if s.write_all(format!("{word}\n").as_bytes())
                .and_then(|()| s.flush())
                .is_err()
            {
                self.stdin = None;
            }
        }
    }

    fn name(&self) -> String {
        format!("sender `{}` -> receiver `{}`", self.sender, self.receiver)
    }
}

fn spawn_client(
    idx: usize,
    sender: &str,
    receiver: &str,
    r: &Ready,
    argv: Vec<String>,
    key: Option<&str>,
    tx: &mpsc::Sender<(usize, Ev)>,
) -> Result<Client, String> {
    let (mut child, stderr) = spawn_piped(r, &argv, &format!("sender `{sender}`"))?;
    let mut stdin = child.stdin.take();
    if let (Some(k), Some(s)) = (key, stdin.as_mut()) {
        // Written before anything else; a client that is already gone says why on stderr.
        if s.write_all(
            format!(
                "{k}
"
            )
            .as_bytes(),
        )
        .and_then(|()| s.flush())
        .is_err()
        {
            stdin = None;
        }
    }
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(ev) = parse_event(&line) {
                    if tx.send((idx, ev)).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send((idx, Ev::Eof));
        });
    }
    Ok(Client {
        sender: sender.into(),
        receiver: receiver.into(),
        command: argv,
        stdin,
        child,
        stderr,
        ready: false,
        released_at: None,
        ack: None,
        result: None,
        error: None,
        eof: false,
        last_index: None,
    })
}

/// A client's command line: `HAKARU KIND ADDRESS -p PORT FLAGS --json-stream --sync-start`,
/// and `--psk-file -` when its receiver's server holds the run's key (given on stdin).
fn client_argv(
    plan: &PlanFile,
    step: &Step,
    hakaru: &str,
    (sender, receiver): (usize, usize),
    keyed: bool,
) -> Vec<String> {
    let name = step.receivers.get(receiver).map_or("", String::as_str);
    let mut argv = vec![
        hakaru.to_string(),
        step.kind.name().into(),
        plan.hosts
            .get(name)
            .and_then(|h| h.address.clone())
            .unwrap_or_default(),
        "-p".into(),
        port_of(plan, name).to_string(),
    ];
    if plan.hosts.get(name).is_some_and(|h| h.is_netserver()) {
        argv.push("--netperf".into());
    }
    argv.extend(step.client_flags(sender, receiver));
    argv.push("--json-stream".into());
    argv.push("--sync-start".into());
    if keyed {
        argv.extend(["--psk-file".into(), "-".into()]);
    }
    argv
}

/// One line of a client's `--json-stream` output.
fn parse_event(line: &str) -> Option<Ev> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(rename = "type")]
        kind: String,
        data: serde_json::Value,
    }
    let env: Envelope = serde_json::from_str(line).ok()?;
    Some(match env.kind.as_str() {
        "ready" => Ev::Ready,
        "released" => Ev::Released(env.data.get("at_unix")?.as_f64()?),
        "interval" => Ev::Interval(Box::new(serde_json::from_value(env.data).ok()?)),
        "end" => match serde_json::from_value(env.data) {
            Ok(r) => Ev::End(Box::new(r)),
            Err(e) => Ev::Error(format!("its result could not be read: {e}")),
        },
        "error" => Ev::Error(env.data.get("message")?.as_str()?.to_string()),
        _ => return None,
    })
}

/// A `find_max` step: every sender steps its rate together, trial by trial, as the search
/// proposes; each trial is a whole step (set up, synchronised start, merge) judged on the
/// receivers' aggregates: the worst receiver's loss, and whether any client's senders fell
/// short of the asked rate. Returns one step result per trial; the last carries the search.
#[allow(clippy::too_many_arguments)]
fn run_search(
    plan: &PlanFile,
    step: &Step,
    fm: &crate::file::FindMaxSettings,
    ready: &BTreeMap<String, Ready>,
    servers: &mut Servers,
    setup: Duration,
    opts: &Options,
    obs: &mut dyn PlanObserver,
) -> Vec<StepResult> {
    use hakaru_model::capacity::{
        min_datagrams, DirFigures, FindMaxResult, Outcome, Search, Trial,
    };
    let pps = step.kind == crate::file::Kind::Pps;
    let flag_value = |flag: &str| {
        step.flags
            .iter()
            .position(|f| f == flag)
            .and_then(|i| step.flags.get(i + 1))
            .cloned()
    };
    let per_client: u32 = flag_value("-P").and_then(|v| v.parse().ok()).unwrap_or(1);
    let flows = per_client * (step.senders.len() * step.receivers.len()) as u32;
    let length: f64 = flag_value("-l")
        .and_then(|v| v.parse::<hakaru_model::Bytes>().ok())
        .map_or(if pps { 14.0 } else { 1472.0 }, |b| b.0 as f64);
    let floor_pps =
        min_datagrams(fm.loss) / (fm.trial.as_secs_f64().max(1e-3) * f64::from(flows.max(1)));
    let (start, ceiling, floor, unit) = if pps {
        (1e4, 1e8, floor_pps, "datagrams/s")
    } else {
        (10e6, 100e9, floor_pps * length * 8.0, "bit/s")
    };
    let mut search = Search::new(start, ceiling, fm.precision).with_floor(floor);
    let mut out: Vec<StepResult> = Vec::new();
    let mut trials: Vec<Trial> = Vec::new();
    let mut index = step.index;
    while let Some((phase, rate)) = search.next() {
        if opts.stop.load(Ordering::Acquire) {
            search.stop("interrupted".into());
            break;
        }
        let n = trials.len() as u32 + 1;
        let mut t = step.clone();
        t.index = index;
        index += 1;
        t.name = format!("{}: find-max trial {n}", step.name);
        t.flags.extend([
            if pps { "--rate" } else { "-b" }.to_string(),
            format!("{rate}"),
            "-t".into(),
            format!("{}ms", fm.trial.as_millis()),
        ]);
        if !t.flags.iter().any(|f| f == "-O") {
            t.flags
                .extend(["-O".into(), format!("{}ms", fm.warmup.as_millis())]);
        }
        obs.on_step_start(&t, 0);
        let mut sr = run_step(plan, &t, ready, servers, setup, opts, obs);
        let mut trial = Trial::new(n, phase, rate, flows);
        trial.sender_limited = sr.runs.iter().any(|r| {
            r.result.as_ref().is_some_and(|res| {
                res.totals
                    .iter()
                    .any(|d| d.rate_target.as_ref().is_some_and(|rt| rt.missed))
            })
        });
        trial.error = sr.errors.first().cloned();
        // Per direction, like `asked`: each direction's receivers summed, the worst receiver's
        // loss.
        let dirs: Vec<DirFigures> = [FlowDir::Up, FlowDir::Down]
            .into_iter()
            .filter_map(|dir| {
                let of: Vec<_> = sr.aggregates.iter().filter(|a| a.dir == dir).collect();
                (!of.is_empty()).then(|| DirFigures {
                    sent_bps: of.iter().map(|a| a.sent_bps).sum(),
                    sent_pps: of.iter().filter_map(|a| a.sent_pps).sum(),
                    received_bps: of.iter().map(|a| a.received_bps).sum(),
                    received_pps: of.iter().filter_map(|a| a.received_pps).sum(),
                    loss_percent: of.iter().filter_map(|a| a.lost_percent).fold(0.0, f64::max),
                    jitter_ms: None,
                })
            })
            .collect();
        trial.set_directions(&dirs, fm.loss);
        trial.met = trial.error.is_none() && trial.loss_percent <= fm.loss;
        if trial.error.is_some() {
            search.stop(format!("trial {n} failed"));
        } else {
            search.record(
                rate,
                Outcome {
                    met: trial.met,
                    sender_limited: trial.sender_limited,
                },
            );
        }
        (trial.best_so_far, trial.miss_so_far) = search.bracket();
        sr.trial = Some(trial.clone());
        trials.push(trial);
        obs.on_step_end(&sr);
        out.push(sr);
    }
    let best = search.confirmed_best();
    let first_miss = trials
        .iter()
        .filter(|t| !t.met && t.error.is_none())
        .map(|t| t.asked_per_flow)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    let result = FindMaxResult {
        schema_version: hakaru_model::SCHEMA_VERSION,
        test: "find_max".into(),
        kind: step.kind.name().into(),
        unit: unit.into(),
        server: step.receivers.join(", "),
        flows,
        directions: Vec::new(),
        length: length as u64,
        loss_target_percent: fm.loss,
        precision_percent: fm.precision * 100.0,
        trial_seconds: fm.trial.as_secs_f64(),
        warmup_seconds: fm.warmup.as_secs_f64(),
        best_per_flow: best,
        best: best.map(|b| b * f64::from(flows)),
        best_trial: best.and_then(|b| {
            trials
                .iter()
                .rev()
                .find(|t| t.met && t.asked_per_flow == b)
                .map(|t| t.index)
        }),
        first_miss_per_flow: first_miss,
        first_miss_trial: first_miss
            .and_then(|m| trials.iter().find(|t| !t.met && t.asked_per_flow == m))
            .map(|t| t.index),
        outcome: search.outcome().to_string(),
        sender_limited: search.sender_limited(),
        interrupted: opts.stop.load(Ordering::Acquire),
        trials,
    };
    obs.on_note(&format!(
        "step {} ({}): {}",
        step.index,
        step.name,
        search_note(&result)
    ));
    if let Some(last) = out.last_mut() {
        last.find_max = Some(result);
    }
    out
}

/// One line for the plan's live output: the search's best rate and why it ended.
fn search_note(r: &hakaru_model::capacity::FindMaxResult) -> String {
    match r.best {
        Some(b) => format!(
            "find-max: best {b:.0} {} in total ({:.0} per flow) with at most {} % loss; {}",
            r.unit,
            r.best_per_flow.unwrap_or(0.0),
            r.loss_target_percent,
            r.outcome
        ),
        None => format!("find-max: {}", r.outcome),
    }
}

/// Runs one step: set up every client, release them together, collect, merge.
fn run_step(
    plan: &PlanFile,
    step: &Step,
    ready: &BTreeMap<String, Ready>,
    servers: &mut Servers,
    setup: Duration,
    opts: &Options,
    obs: &mut dyn PlanObserver,
) -> StepResult {
    let mut sr = StepResult {
        index: step.index,
        name: step.name.clone(),
        kind: step.kind.name().into(),
        repeat: step.repeat,
        sweep: step.sweep.clone(),
        senders: step.senders.clone(),
        receivers: step.receivers.clone(),
        release: None,
        aggregates: Vec::new(),
        timeline: Vec::new(),
        runs: Vec::new(),
        errors: Vec::new(),
        trial: None,
        find_max: None,
    };
    let at = format!("step {} ({})", step.index, step.name);
    for e in servers.newly_dead() {
        sr.errors.push(format!("{at}: {e}"));
    }
    if !sr.errors.is_empty() {
        return sr;
    }
    let (tx, rx) = mpsc::channel::<(usize, Ev)>();
    let mut clients: Vec<Client> = Vec::new();
    let t0 = Instant::now();
    for (si, s) in step.senders.iter().enumerate() {
        for (ri, r) in step.receivers.iter().enumerate() {
            // A server the plan started asks for the run's key: the first line of stdin.
            let key = servers.keyed.contains(r).then_some(servers.key.as_str());
            let argv = client_argv(plan, step, &ready[s].hakaru, (si, ri), key.is_some());
            match spawn_client(clients.len(), s, r, &ready[s], argv, key, &tx) {
                Ok(c) => clients.push(c),
                Err(e) => sr.errors.push(format!("{at}: {e}")),
            }
        }
    }
    drop(tx);
    // 1. Set-up: every client reports ready, or the step is called off.
    let mut called_off = !sr.errors.is_empty();
    while !called_off && !clients.iter().all(|c| c.ready) {
        if opts.stop.load(Ordering::Acquire) {
            sr.errors.push(format!("{at}: interrupted during set-up"));
            called_off = true;
            break;
        }
        if t0.elapsed() > setup {
            let slow: Vec<String> = clients
                .iter()
                .filter(|c| !c.ready)
                .map(Client::name)
                .collect();
            sr.errors.push(format!(
                "{at}: not set up within {} s: {}",
                setup.as_secs(),
                slow.join(", ")
            ));
            called_off = true;
            break;
        }
        for e in servers.newly_dead() {
            sr.errors.push(format!("{at}: {e}"));
            called_off = true;
        }
        if let Ok((i, ev)) = rx.recv_timeout(Duration::from_millis(50)) {
            handle(&mut clients[i], ev, None);
            let c = &clients[i];
            if !c.ready && (c.eof || c.error.is_some()) {
                called_off = true;
            }
        }
    }
    let setup_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut rows: BTreeMap<u32, TimelineRow> = BTreeMap::new();
    let mut emitted = 0u32;
    if called_off {
        for c in &mut clients {
            c.say("stop");
        }
    } else {
        // 2. Release: `go` to every client back to back.
        let w0 = Instant::now();
        for c in &mut clients {
            c.say("go");
        }
        let write_ms = w0.elapsed().as_secs_f64() * 1000.0;
        let limit = step_limit(step);
        let started = Instant::now();
        let mut stopped_at: Option<Instant> = None;
        let mut released_reported = false;
        // 3. Collect until every client has ended.
        while !clients.iter().all(|c| c.eof) {
            let over = started.elapsed() > limit;
            if stopped_at.is_none() && (opts.stop.load(Ordering::Acquire) || over) {
                if over {
                    sr.errors.push(format!(
                        "{at}: still running {} s after its start; told every client to stop",
                        limit.as_secs()
                    ));
                }
                for c in &mut clients {
                    c.say("stop");
                }
                stopped_at = Some(Instant::now());
            }
            if stopped_at.is_some_and(|t| t.elapsed() > GRACE) {
                break;
            }
            for e in servers.newly_dead() {
                sr.errors.push(format!("{at}: {e}"));
            }
            if let Ok((i, ev)) = rx.recv_timeout(Duration::from_millis(50)) {
                if let Ev::Interval(rec) = &ev {
                    let (s, r) = (clients[i].sender.clone(), clients[i].receiver.clone());
                    add_record(&mut rows, &s, &r, rec);
                }
                handle(&mut clients[i], ev, Some(Instant::now()));
            }
            if !released_reported && clients.iter().all(|c| c.ack.is_some() || c.eof) {
                released_reported = true;
                let rel = release(&clients, setup_ms, write_ms);
                obs.on_release(step, &rel);
                sr.release = Some(rel);
            }
            // A row is complete once every client still running has reported past it.
            let live_min = clients
                .iter()
                .filter(|c| !c.eof && c.result.is_none())
                .map(|c| c.last_index.map_or(0, |i| i + 1))
                .min();
            let complete = live_min.unwrap_or(u32::MAX);
            while emitted < complete {
                match rows.get(&emitted) {
                    Some(row) => obs.on_row(step, &in_plan_order(row, &clients)),
                    None if rows.keys().any(|&k| k > emitted) => {}
                    None => break,
                }
                emitted += 1;
            }
        }
        if sr.release.is_none() {
            sr.release = Some(release(&clients, setup_ms, write_ms));
        }
    }
    finish_clients(&mut clients, &rx);
    // A receiver that died made its clients fail first; give its launcher a moment to exit
    // so the step names the receiver, not only the clients.
    let any_failed = clients
        .iter()
        .any(|c| c.result.is_none() || c.error.is_some());
    let until = Instant::now()
        + if any_failed {
            SERVER_EXIT_WAIT
        } else {
            Duration::ZERO
        };
    loop {
        for e in servers.newly_dead() {
            sr.errors.push(format!("{at}: {e}"));
        }
        if Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in &clients {
        let error = c.error.clone().or_else(|| {
            if c.result.is_some() {
                None
            } else {
                let st = tail(&c.stderr);
                Some(if called_off && c.ready {
                    "called off before the start".to_string()
                } else if st.is_empty() {
                    "the client ended without a result".to_string()
                } else {
                    format!("the client ended without a result: {st}")
                })
            }
        });
        if let Some(e) = &error {
            if !(called_off && c.ready && c.error.is_none()) {
                sr.errors.push(format!("{at}: {}: {e}", c.name()));
            }
        }
        sr.runs.push(PlanRun {
            sender: c.sender.clone(),
            receiver: c.receiver.clone(),
            command: c.command.clone(),
            result: c.result.clone(),
            error,
        });
    }
    let refs: Vec<RunRef<'_>> = sr
        .runs
        .iter()
        .filter_map(|r| {
            r.result.as_ref().map(|result| RunRef {
                sender: &r.sender,
                receiver: &r.receiver,
                result,
            })
        })
        .collect();
    let agg = aggregate(&refs);
    let tl = timeline(&refs);
    // Rows not shown live (clients that ended first) are shown now, from the results.
    for row in tl.iter().filter(|r| r.index >= emitted) {
        obs.on_row(step, row);
    }
    sr.aggregates = agg;
    sr.timeline = tl;
    sr
}

/// A live row with its runs in the order of the plan (they arrive in any order).
fn in_plan_order(row: &TimelineRow, clients: &[Client]) -> TimelineRow {
    let pos = |s: &str, r: &str| {
        clients
            .iter()
            .position(|c| c.sender == s && c.receiver == r)
            .unwrap_or(usize::MAX)
    };
    let mut row = row.clone();
    row.runs
        .sort_by_key(|t| (pos(&t.sender, &t.receiver), t.dir == FlowDir::Down));
    row
}

fn handle(c: &mut Client, ev: Ev, at: Option<Instant>) {
    match ev {
        Ev::Ready => c.ready = true,
        Ev::Released(t) => {
            c.released_at = Some(t);
            c.ack = at.or(Some(Instant::now()));
        }
        Ev::Interval(rec) => c.last_index = Some(rec.index),
        Ev::End(r) => c.result = Some(*r),
        Ev::Error(e) => c.error = Some(e),
        Ev::Eof => c.eof = true,
    }
}

fn release(clients: &[Client], setup_ms: f64, write_ms: f64) -> Release {
    let at: Vec<f64> = clients.iter().filter_map(|c| c.released_at).collect();
    let first = clients.iter().filter_map(|c| c.ack).min();
    let acks: Vec<f64> = clients
        .iter()
        .filter_map(|c| c.ack)
        .map(|a| first.map_or(0.0, |f| a.duration_since(f).as_secs_f64()))
        .collect();
    Release {
        clients: at.len() as u32,
        setup_ms,
        write_ms,
        skew_ms: spread_ms(&at),
        ack_spread_ms: spread_ms(&acks),
    }
}

/// Waits for every client process to exit (they do once their stdout ended), killing any
/// that does not within the grace time; drains what their readers still send.
fn finish_clients(clients: &mut [Client], rx: &mpsc::Receiver<(usize, Ev)>) {
    let deadline = Instant::now() + GRACE;
    loop {
        while let Ok((i, ev)) = rx.try_recv() {
            handle(&mut clients[i], ev, None);
        }
        let mut running = false;
        for c in clients.iter_mut() {
            if matches!(c.child.try_wait(), Ok(None)) {
                running = true;
                if Instant::now() > deadline {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    if c.error.is_none() && c.result.is_none() {
                        c.error = Some(format!(
                            "did not stop within {} s of being told to; killed",
                            GRACE.as_secs()
                        ));
                    }
                }
            }
        }
        if !running {
            break;
        }
        if Instant::now() > deadline + Duration::from_secs(1) {
            break;
        }
        // Closing stdin tells a client that ended its test but waits on nothing more to go.
        for c in clients.iter_mut().filter(|c| c.eof) {
            c.stdin.take();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Readers may still hold the last events of clients that just exited.
    while let Ok((i, ev)) = rx.recv_timeout(Duration::from_millis(20)) {
        handle(&mut clients[i], ev, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> PlanFile {
        crate::file::parse(
            r#"
[hosts.rx]
address = "10.0.0.1"
ssh = "root@rx"
[hosts.other]
address = "10.0.0.9"
ssh = "root@other"
[hosts.tx]
address = "10.0.0.2"
ssh = "root@tx"
[hosts.pod]
address = "10.0.0.3"
exec = ["kubectl", "exec", "-i", "pod", "--"]

[[step]]
kind = "tcp"
receivers = ["rx"]
senders = ["tx", "pod"]
time = 5
omit = 1

[[step]]
kind = "udp"
receivers = ["other"]
senders = ["tx"]
bytes = "1G"

[[step]]
kind = "pps"
receivers = ["rx"]
senders = ["tx"]
time = 30
timeout = 10
"#,
        )
        .unwrap()
    }

    fn ready(plan: &PlanFile) -> BTreeMap<String, Ready> {
        plan.hosts
            .iter()
            .map(|(n, h)| {
                (
                    n.clone(),
                    Ready {
                        launcher: Launcher::of(h, &[]),
                        hakaru: "/h/hakaru".into(),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn the_key_is_on_no_command_line_and_goes_to_stdin() {
        let key = run_key().unwrap();
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(key, run_key().unwrap(), "a key of its own for every run");
        let plan = plan();
        let steps = crate::file::expand(&plan);
        let ready = ready(&plan);
        let allow = sources_of(&plan, &steps, "rx", &ready).unwrap();
        let spec = ServerSpec {
            port: 5201,
            bind: Some("10.0.0.1".parse().unwrap()),
            allow,
            max_duration: server_cap(&steps, "rx", DEFAULT_SETUP),
        };
        let server = server_argv("/h/hakaru", &spec);
        let client = client_argv(&plan, &steps[0], "/h/hakaru", (0, 0), true);
        for (argv, kind) in [(&server, "server"), (&client, "tcp")] {
            assert_eq!(argv[1], kind);
            let at = argv.iter().position(|a| a == "--psk-file").unwrap();
            assert_eq!(argv[at + 1], "-", "{argv:?}");
            // Every launcher's full command line, and the environment it is given.
            for l in [
                Launcher::Local,
                Launcher::Netns("n".into()),
                Launcher::of(&plan.hosts["tx"], &["-i".into(), "k".into()]),
                Launcher::of(&plan.hosts["pod"], &[]),
            ] {
                let full = l.argv(argv);
                assert!(!full.iter().any(|w| w.contains(&key)), "{full:?}");
                let cmd = l.command(argv);
                assert!(
                    !cmd.get_envs()
                        .any(|(_, v)| v.is_some_and(|v| v.to_string_lossy().contains(&key))),
                    "{cmd:?}"
                );
            }
        }
        // A client of a server the plan did not start (reused) gets no key.
        let plain = client_argv(&plan, &steps[0], "/h/hakaru", (0, 0), false);
        assert!(!plain.iter().any(|a| a == "--psk-file"), "{plain:?}");
        assert_eq!(
            plain[..5],
            ["/h/hakaru", "tcp", "10.0.0.1", "-p", "5201"].map(String::from)[..]
        );
    }

    #[test]
    fn servers_bind_the_receiver_allow_its_senders_and_cap_a_test() {
        let plan = plan();
        let steps = crate::file::expand(&plan);
        let ready = ready(&plan);
        // rx: both senders of step 1 and the one of step 3; other: only tx.
        let rx = sources_of(&plan, &steps, "rx", &ready).unwrap();
        assert_eq!(
            rx,
            ["10.0.0.2", "10.0.0.3"].map(|a| a.parse::<IpAddr>().unwrap())
        );
        let other = sources_of(&plan, &steps, "other", &ready).unwrap();
        assert_eq!(other, ["10.0.0.2".parse::<IpAddr>().unwrap()]);
        // The longest step of rx: tcp, 5 + 1 s with the 60 s margin, plus 60 s of set-up.
        let cap = server_cap(&steps, "rx", Duration::from_secs(60));
        assert_eq!(cap, Duration::from_secs(126));
        // The pps step alone: 30 s asked, longer than its timeout, plus set-up.
        assert_eq!(
            server_cap(&steps[2..], "rx", Duration::from_secs(60)),
            Duration::from_secs(90)
        );
        // A bytes step without a timeout: an hour.
        assert_eq!(
            server_cap(&steps, "other", Duration::from_secs(60)),
            Duration::from_secs(3660)
        );
        let argv = server_argv(
            "/h/hakaru",
            &ServerSpec {
                port: 5300,
                bind: Some("10.0.0.1".parse().unwrap()),
                allow: rx,
                max_duration: cap,
            },
        );
        assert_eq!(
            argv.join(" "),
            "/h/hakaru server -B 10.0.0.1 -p 5300 --exit-on-stdin-eof --psk-file - --max-duration 126 --max-tests-per-client 4096 --allow 10.0.0.2 --allow 10.0.0.3"
        );
        // A sender with no address that is not on this machine cannot be placed.
        let mut p = plan.clone();
        p.hosts.get_mut("pod").unwrap().address = None;
        let e = sources_of(&p, &steps, "rx", &ready).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("sender `pod`"), "{e:?}");
    }

    #[test]
    fn local_senders_are_placed_by_their_route() {
        let p = crate::file::parse(
            "[hosts.rx]\naddress = \"127.0.0.1\"\nlocal = true\n[hosts.a]\nlocal = true\n[[step]]\nkind = \"tcp\"\nreceivers = [\"rx\"]\nsenders = [\"a\"]\n",
        )
        .unwrap();
        let steps = crate::file::expand(&p);
        let got = sources_of(&p, &steps, "rx", &ready(&p)).unwrap();
        assert_eq!(got, ["127.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            route_src("10.0.0.1 dev eth0 src 10.0.0.2 uid 0 \n    cache \n"),
            Some("10.0.0.2".parse().unwrap())
        );
        assert_eq!(
            route_src("local 127.0.0.1 dev lo src 127.0.0.1 uid 0"),
            Some("127.0.0.1".parse().unwrap())
        );
        assert_eq!(route_src("unreachable"), None);
    }
}
