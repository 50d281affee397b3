//! The coordinator: prepares every host, starts (or reuses) a server on every receiver, runs
//! each step's clients with a held start and releases them together, merges what they report,
//! and stops everything it started however the run ends.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
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
use crate::launch::{last_line, probe_version, push, Image, Launcher};

/// Default server port on receivers.
pub const DEFAULT_PORT: u16 = 5201;
const PROBE_LIMIT: Duration = Duration::from_secs(30);
const PUSH_LIMIT: Duration = Duration::from_secs(120);
const SERVER_START_LIMIT: Duration = Duration::from_secs(20);
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
            argv.extend(step.flags.iter().cloned());
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

/// Runs a plan that `file::check` passed.
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
    let used: Vec<String> = plan
        .hosts
        .keys()
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
    let mut servers = Servers::default();
    for name in used
        .iter()
        .filter(|h| steps.iter().any(|s| s.receivers.contains(h)))
    {
        let port = port_of(plan, name);
        match start_server(name, &ready[name], port) {
            Ok(Some(srv)) => {
                set_server(&mut result, name, "started");
                servers.0.push(srv);
            }
            Ok(None) => {
                set_server(&mut result, name, "reused");
                obs.on_note(&format!(
                    "receiver `{name}`: port {port} is already in use there; using the server that listens on it (not stopped at the end)"
                ));
            }
            Err(e) => result.errors.push(e),
        }
    }
    if result.errors.is_empty() {
        let setup = plan
            .defaults
            .setup_timeout
            .as_ref()
            .and_then(|t| parse_secs(&t.to_string()))
            .unwrap_or(DEFAULT_SETUP);
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
    plan.hosts
        .get(host)
        .and_then(|h| h.port)
        .or(plan.defaults.port)
        .unwrap_or(DEFAULT_PORT)
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

#[derive(Default)]
struct Servers(Vec<ServerProc>);

impl Servers {
    /// Receivers whose server has exited since the last call, with why.
    fn newly_dead(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &mut self.0 {
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
        for s in &mut self.0 {
            s.stdin.take();
        }
        let deadline = Instant::now() + GRACE;
        for s in &mut self.0 {
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
        for s in &mut self.0 {
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

/// Starts `hakaru server` on a receiver. `Ok(None)`: the port is taken there, and the server
/// already on it is used.
fn start_server(host: &str, r: &Ready, port: u16) -> Result<Option<ServerProc>, String> {
    let argv = vec![
        r.hakaru.clone(),
        "server".into(),
        "-p".into(),
        port.to_string(),
        "--exit-on-stdin-eof".into(),
        // Several sender hosts may share an address (local and exec launchers); the plan
        // decides how many tests this server runs, not the per-address default.
        "--max-tests-per-client".into(),
        "4096".into(),
    ];
    let (mut child, stderr) = spawn_piped(r, &argv, &format!("receiver `{host}`"))?;
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
    let stdin = child.stdin.take();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(l) if l.starts_with("listening on") => {
                return Ok(Some(ServerProc {
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
                    return Ok(None);
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
    tx: &mpsc::Sender<(usize, Ev)>,
) -> Result<Client, String> {
    let (mut child, stderr) = spawn_piped(r, &argv, &format!("sender `{sender}`"))?;
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
        stdin: child.stdin.take(),
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
    for s in &step.senders {
        for r in &step.receivers {
            let addr = plan.hosts[r].address.clone().unwrap_or_default();
            let mut argv = vec![
                ready[s].hakaru.clone(),
                step.kind.name().into(),
                addr,
                "-p".into(),
                port_of(plan, r).to_string(),
            ];
            argv.extend(step.flags.iter().cloned());
            argv.push("--json-stream".into());
            argv.push("--sync-start".into());
            match spawn_client(clients.len(), s, r, &ready[s], argv, &tx) {
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
        let limit = step.timeout.unwrap_or_else(|| {
            step.expected
                .map_or(Duration::from_secs(3600), |e| e + STEP_MARGIN)
        });
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
