//! One step: its clients started with a held start, released together, their live records
//! merged into rows, their results into the step's aggregates.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_model::plan::{
    add_record, aggregate, spread_ms, timeline, PlanRun, Release, RunRef, StepResult, TimelineRow,
};
use hakaru_model::{FlowDir, IntervalRecord, RunResult};

use super::hosts::Ready;
use super::servers::{spawn_piped, tail, Servers};
use super::{port_of, step_limit, Options, PlanObserver, GRACE, SERVER_EXIT_WAIT};
use crate::file::{PlanFile, Step};
use crate::launch::Launcher;

/// What a client's reader thread reports.
pub(super) enum Ev {
    /// Set up; true if it takes `go AT`.
    Ready(bool),
    /// The client's release instant, and how long before the step's instant its `go` came.
    Released(f64, Option<f64>),
    Interval(Box<IntervalRecord>),
    End(Box<RunResult>),
    Error(String),
    Eof,
}

/// One client of a step.
pub(super) struct Client {
    pub(super) sender: String,
    pub(super) receiver: String,
    pub(super) command: Vec<String>,
    pub(super) child: Child,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) stderr: Arc<Mutex<String>>,
    pub(super) ready: bool,
    /// It said it takes `go AT`; a client that did not (an older build) gets a bare `go`.
    pub(super) go_at: bool,
    pub(super) released_at: Option<f64>,
    /// How long before the release instant its `go` arrived (by its clock).
    pub(super) go_ahead_ms: Option<f64>,
    pub(super) ack: Option<Instant>,
    pub(super) result: Option<RunResult>,
    pub(super) error: Option<String>,
    pub(super) eof: bool,
    pub(super) last_index: Option<u32>,
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

pub(super) fn spawn_client(
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
        go_at: false,
        released_at: None,
        go_ahead_ms: None,
        ack: None,
        result: None,
        error: None,
        eof: false,
        last_index: None,
    })
}

/// A client's command line: `HAKARU KIND ADDRESS -p PORT FLAGS --json-stream --sync-start`,
/// and `--psk-file -` when its receiver's server holds the run's key (given on stdin).
pub(super) fn client_argv(
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
pub(super) fn parse_event(line: &str) -> Option<Ev> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(rename = "type")]
        kind: String,
        data: serde_json::Value,
    }
    let env: Envelope = serde_json::from_str(line).ok()?;
    Some(match env.kind.as_str() {
        "ready" => Ev::Ready(
            env.data
                .get("go_at")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        ),
        "released" => Ev::Released(
            env.data.get("at_unix")?.as_f64()?,
            env.data
                .get("go_ahead_ms")
                .and_then(serde_json::Value::as_f64),
        ),
        "interval" => Ev::Interval(Box::new(serde_json::from_value(env.data).ok()?)),
        "end" => match serde_json::from_value(env.data) {
            Ok(r) => Ev::End(Box::new(r)),
            Err(e) => Ev::Error(format!("its result could not be read: {e}")),
        },
        "error" => Ev::Error(env.data.get("message")?.as_str()?.to_string()),
        _ => return None,
    })
}

/// Runs one step: set up every client, release them together, collect, merge.
pub(super) fn run_step(
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
    let (tx, rx) = mpsc::channel::<(usize, Ev)>();
    let mut run = Running {
        step,
        at: format!("step {} ({})", step.index, step.name),
        clients: Vec::new(),
        rx,
        servers,
        opts,
        errors: Vec::new(),
    };
    if run.servers_died() {
        sr.errors = run.errors;
        return sr;
    }
    let t0 = Instant::now();
    run.spawn_clients(plan, ready, &tx);
    drop(tx);
    // 1. Set-up: every client reports ready, or the step is called off.
    let called_off = run.set_up(t0, setup);
    let setup_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut emitted = 0u32;
    if called_off {
        for c in &mut run.clients {
            c.say("stop");
        }
    } else {
        // 2. Release, 3. collect until every client has ended.
        let remote = step
            .senders
            .iter()
            .any(|h| !matches!(ready[h].launcher, Launcher::Local | Launcher::Netns(_)));
        let lead = release_lead(run.clients.len(), remote);
        let (release, shown) = run.release_and_collect(setup_ms, lead, obs);
        sr.release = Some(release);
        emitted = shown;
    }
    finish_clients(&mut run.clients, &run.rx);
    run.await_dead_servers();
    sr.runs = run.runs(called_off);
    sr.errors = run.errors;
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

/// One step's clients while it runs, and what went wrong (each message starts with `at`).
struct Running<'a> {
    step: &'a Step,
    at: String,
    clients: Vec<Client>,
    rx: mpsc::Receiver<(usize, Ev)>,
    servers: &'a mut Servers,
    opts: &'a Options,
    errors: Vec<String>,
}

impl Running<'_> {
    /// Notes every receiver whose server exited since the last look; true if any did.
    fn servers_died(&mut self) -> bool {
        let dead = self.servers.newly_dead();
        let any = !dead.is_empty();
        for e in dead {
            self.errors.push(format!("{}: {e}", self.at));
        }
        any
    }

    /// Starts one client per sender and receiver, each with the run's key where its
    /// receiver's server holds it.
    fn spawn_clients(
        &mut self,
        plan: &PlanFile,
        ready: &BTreeMap<String, Ready>,
        tx: &mpsc::Sender<(usize, Ev)>,
    ) {
        let step = self.step;
        for (si, s) in step.senders.iter().enumerate() {
            for (ri, r) in step.receivers.iter().enumerate() {
                // A server the plan started asks for the run's key: the first line of stdin.
                let key = self
                    .servers
                    .keyed
                    .contains(r)
                    .then_some(self.servers.key.as_str());
                let argv = client_argv(plan, step, &ready[s].hakaru, (si, ri), key.is_some());
                match spawn_client(self.clients.len(), s, r, &ready[s], argv, key, tx) {
                    Ok(c) => self.clients.push(c),
                    Err(e) => self.errors.push(format!("{}: {e}", self.at)),
                }
            }
        }
    }

    /// Waits until every client is ready; true if the step is called off instead (a client
    /// failed or ended, a server died, Ctrl-C, or the set-up time ran out).
    fn set_up(&mut self, t0: Instant, setup: Duration) -> bool {
        let mut called_off = !self.errors.is_empty();
        while !called_off && !self.clients.iter().all(|c| c.ready) {
            if self.opts.stop.load(Ordering::Acquire) {
                self.errors
                    .push(format!("{}: interrupted during set-up", self.at));
                return true;
            }
            if t0.elapsed() > setup {
                let slow: Vec<String> = self
                    .clients
                    .iter()
                    .filter(|c| !c.ready)
                    .map(Client::name)
                    .collect();
                self.errors.push(format!(
                    "{}: not set up within {} s: {}",
                    self.at,
                    setup.as_secs(),
                    slow.join(", ")
                ));
                return true;
            }
            called_off |= self.servers_died();
            if let Ok((i, ev)) = self.rx.recv_timeout(Duration::from_millis(50)) {
                handle(&mut self.clients[i], ev, None);
                let c = &self.clients[i];
                if !c.ready && (c.eof || c.error.is_some()) {
                    called_off = true;
                }
            }
        }
        called_off
    }

    /// Says `go AT` to every client back to back, AT being `lead` from now by the wall clock,
    /// then collects their records until every one has ended (or been told to stop and had
    /// its grace time), showing each interval's row once every client still running has
    /// reported past it. Returns the release and the number of rows shown.
    fn release_and_collect(
        &mut self,
        setup_ms: f64,
        lead: Duration,
        obs: &mut dyn PlanObserver,
    ) -> (Release, u32) {
        let w0 = Instant::now();
        let at = unix_now() + lead.as_secs_f64();
        let go = format!("go {at:.6}");
        for c in &mut self.clients {
            c.say(if c.go_at { &go } else { "go" });
        }
        let write_ms = w0.elapsed().as_secs_f64() * 1000.0;
        let sent = Sent { lead, write_ms };
        let limit = step_limit(self.step);
        let started = Instant::now();
        let mut stopped_at: Option<Instant> = None;
        let mut released: Option<Release> = None;
        let mut rows: BTreeMap<u32, TimelineRow> = BTreeMap::new();
        let mut emitted = 0u32;
        while !self.clients.iter().all(|c| c.eof) {
            let over = started.elapsed() > limit;
            if stopped_at.is_none() && (self.opts.stop.load(Ordering::Acquire) || over) {
                if over {
                    self.errors.push(format!(
                        "{}: still running {} s after its start; told every client to stop",
                        self.at,
                        limit.as_secs()
                    ));
                }
                for c in &mut self.clients {
                    c.say("stop");
                }
                stopped_at = Some(Instant::now());
            }
            if stopped_at.is_some_and(|t| t.elapsed() > GRACE) {
                break;
            }
            self.servers_died();
            if let Ok((i, ev)) = self.rx.recv_timeout(Duration::from_millis(50)) {
                if let Ev::Interval(rec) = &ev {
                    let c = &self.clients[i];
                    add_record(&mut rows, &c.sender, &c.receiver, rec);
                }
                handle(&mut self.clients[i], ev, Some(Instant::now()));
            }
            if released.is_none() && self.clients.iter().all(|c| c.ack.is_some() || c.eof) {
                let rel = release(&self.clients, setup_ms, &sent);
                obs.on_release(self.step, &rel);
                released = Some(rel);
            }
            // A row is complete once every client still running has reported past it.
            let live_min = self
                .clients
                .iter()
                .filter(|c| !c.eof && c.result.is_none())
                .map(|c| c.last_index.map_or(0, |i| i + 1))
                .min();
            let complete = live_min.unwrap_or(u32::MAX);
            while emitted < complete {
                match rows.get(&emitted) {
                    Some(row) => obs.on_row(self.step, &in_plan_order(row, &self.clients)),
                    None if rows.keys().any(|&k| k > emitted) => {}
                    None => break,
                }
                emitted += 1;
            }
        }
        let mut release = released.unwrap_or_else(|| release(&self.clients, setup_ms, &sent));
        let results: Vec<Option<&RunResult>> =
            self.clients.iter().map(|c| c.result.as_ref()).collect();
        (release.start_skew_ms, release.start_late_ms) = data_start(&results, at);
        (release, emitted)
    }

    /// A receiver that died made its clients fail first; gives its launcher a moment to exit
    /// so the step names the receiver, not only the clients.
    fn await_dead_servers(&mut self) {
        let any_failed = self
            .clients
            .iter()
            .any(|c| c.result.is_none() || c.error.is_some());
        let until = Instant::now()
            + if any_failed {
                SERVER_EXIT_WAIT
            } else {
                Duration::ZERO
            };
        loop {
            self.servers_died();
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every client's run: its command, its result or why it has none.
    fn runs(&mut self, called_off: bool) -> Vec<PlanRun> {
        let mut runs = Vec::new();
        for c in &self.clients {
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
                    self.errors.push(format!("{}: {}: {e}", self.at, c.name()));
                }
            }
            runs.push(PlanRun {
                sender: c.sender.clone(),
                receiver: c.receiver.clone(),
                command: c.command.clone(),
                result: c.result.clone(),
                error,
            });
        }
        runs
    }
}

/// A live row with its runs in the order of the plan (they arrive in any order).
pub(super) fn in_plan_order(row: &TimelineRow, clients: &[Client]) -> TimelineRow {
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

pub(super) fn handle(c: &mut Client, ev: Ev, at: Option<Instant>) {
    match ev {
        Ev::Ready(go_at) => {
            c.ready = true;
            c.go_at = go_at;
        }
        Ev::Released(t, ahead) => {
            c.released_at = Some(t);
            c.go_ahead_ms = ahead;
            c.ack = at.or(Some(Instant::now()));
        }
        Ev::Interval(rec) => c.last_index = Some(rec.index),
        Ev::End(r) => c.result = Some(*r),
        Ev::Error(e) => c.error = Some(e),
        Ev::Eof => c.eof = true,
    }
}

/// How far ahead of the `go` lines a step's release instant is: time for the last client to
/// have read its line (each is woken in turn, a fraction of a millisecond apart on a busy
/// machine) and, for a bulk test, for both ends to have started their threads before it
/// (`start_at`: the client's word, the server's counters and threads, `start`, the client's
/// threads: about a millisecond of CPU a client, all on one receiver in a many-to-one step),
/// and for a remote launcher's channel to carry it. Clients wait at most a second
/// for an instant (a host whose clock is behind holds its start back no longer).
pub(super) fn release_lead(clients: usize, remote: bool) -> Duration {
    let lead = Duration::from_millis(20)
        + Duration::from_millis(1) * u32::try_from(clients).unwrap_or(u32::MAX).min(2000)
        + if remote {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        };
    lead.min(Duration::from_secs(1))
}

/// What the coordinator said at a release: how far ahead the instant was, and how long the
/// writing took.
pub(super) struct Sent {
    pub(super) lead: Duration,
    pub(super) write_ms: f64,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// When each sender's data began (`began_unix` of the sending ends; the earlier of the two
/// in a bidirectional test), against the release instant `at`: their spread and the latest
/// after `at`, milliseconds. `None` unless every client has a result that says.
pub(super) fn data_start(results: &[Option<&RunResult>], at: f64) -> (Option<f64>, Option<f64>) {
    let began: Option<Vec<f64>> = results
        .iter()
        .map(|r| {
            let r = (*r)?;
            let dirs = r.spec.flow_plan();
            let sends = |d: FlowDir| dirs.iter().any(|&(_, x)| x == d);
            [
                (FlowDir::Up, r.client.began_unix),
                (FlowDir::Down, r.server_end.began_unix),
            ]
            .into_iter()
            .filter(|&(d, _)| sends(d))
            .map(|(_, b)| b)
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .min_by(f64::total_cmp)
        })
        .collect();
    let began = began.filter(|b| !b.is_empty());
    let Some(began) = began else {
        return (None, None);
    };
    let latest = began.iter().copied().fold(f64::MIN, f64::max);
    (
        Some(spread_ms(&began)),
        Some(((latest - at) * 1000.0).max(0.0)),
    )
}

pub(super) fn release(clients: &[Client], setup_ms: f64, sent: &Sent) -> Release {
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
        write_ms: sent.write_ms,
        lead_ms: sent.lead.as_secs_f64() * 1000.0,
        go_margin_ms: clients
            .iter()
            .filter_map(|c| c.go_ahead_ms)
            .min_by(f64::total_cmp),
        late: clients
            .iter()
            .filter(|c| c.go_ahead_ms.is_some_and(|a| a < 0.0))
            .count() as u32,
        skew_ms: spread_ms(&at),
        ack_spread_ms: spread_ms(&acks),
        start_skew_ms: None,
        start_late_ms: None,
    }
}

/// Waits for every client process to exit (they do once their stdout ended), killing any
/// that does not within the grace time; drains what their readers still send.
pub(super) fn finish_clients(clients: &mut [Client], rx: &mpsc::Receiver<(usize, Ev)>) {
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
    use hakaru_model::{Direction, TcpSpec, TestSpec};

    fn began(dir: Direction, client: Option<f64>, server: Option<f64>) -> RunResult {
        let spec = TestSpec::Tcp(TcpSpec {
            direction: dir,
            ..TcpSpec::default()
        });
        let mut r = RunResult::begin(spec, 100.0, "s".into());
        r.client.began_unix = client;
        r.server_end.began_unix = server;
        r
    }

    #[test]
    fn the_data_start_is_the_sending_ends_and_needs_every_client() {
        let (a, b, c) = (
            began(Direction::Forward, Some(100.002), Some(100.9)),
            began(Direction::Reverse, Some(100.9), Some(100.005)),
            began(Direction::Bidir, Some(100.004), Some(100.003)),
        );
        let (skew, late) = data_start(&[Some(&a), Some(&b), Some(&c)], 100.0);
        assert!((skew.unwrap() - 3.0).abs() < 1e-6, "{skew:?}");
        assert!((late.unwrap() - 5.0).abs() < 1e-6, "{late:?}");
        // A sender that did not say (an older build, a latency step), or a client without a
        // result: no figure rather than a partial one.
        let d = began(Direction::Forward, None, Some(100.0));
        assert_eq!(data_start(&[Some(&a), Some(&d)], 100.0), (None, None));
        assert_eq!(data_start(&[Some(&a), None], 100.0), (None, None));
        assert_eq!(data_start(&[], 100.0), (None, None));
        // Early by the client's clock is not late.
        let e = began(Direction::Forward, Some(99.99), None);
        assert_eq!(data_start(&[Some(&e)], 100.0), (Some(0.0), Some(0.0)));
    }

    #[test]
    fn a_client_that_does_not_say_it_takes_go_at_gets_a_bare_go() {
        let ready = |l: &str| match parse_event(l) {
            Some(Ev::Ready(go_at)) => go_at,
            _ => panic!("not a ready event: {l}"),
        };
        assert!(ready(
            r#"{"type":"ready","data":{"at_unix":1.5,"go_at":true}}"#
        ));
        // An older build of the same version: no `go_at`.
        assert!(!ready(r#"{"type":"ready","data":{"at_unix":1.5}}"#));
        // What this build's client prints says it.
        assert!(ready(&hakaru_report::jsonl::ready(1.5)));
        match parse_event(&hakaru_report::jsonl::released(2.5, Some(20.25))) {
            Some(Ev::Released(at, ahead)) => assert_eq!((at, ahead), (2.5, Some(20.25))),
            _ => panic!("not a released event"),
        }
    }

    #[test]
    fn the_lead_grows_with_the_clients_and_remote_launchers_and_stops_at_a_second() {
        assert_eq!(release_lead(3, false), Duration::from_millis(23));
        assert_eq!(release_lead(99, false), Duration::from_millis(119));
        assert_eq!(release_lead(3, true), Duration::from_millis(123));
        assert_eq!(release_lead(4096, true), Duration::from_secs(1));
    }
}
