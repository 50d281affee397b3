//! The coordinator: prepares every host, starts (or reuses) a server on every receiver, runs
//! each step's clients with a held start and releases them together, merges what they report,
//! and stops everything it started however the run ends. Its parts: `hosts` (versions, pushes,
//! source addresses), `servers` (start, reuse, stop), `step` (one step's clients, release and
//! merge), `search` (a `find_max` step's trials).

mod hosts;
mod search;
mod servers;
mod step;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hakaru_model::plan::{
    PlanHost, PlanResult, Release, StepResult, TimelineRow, PLAN_SCHEMA_VERSION,
};
use hakaru_model::rfc3339_utc;

use crate::check::MAX_SENDERS;
use crate::file::{parse_secs, PlanFile, Step};
use hosts::{prepare_hosts, sources_of, Ready};
use search::run_search;
use servers::{start_server, ServerSpec, Servers, Started};
use step::run_step;

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

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
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
    let set = Setting {
        plan,
        steps: &steps,
        ready: &ready,
        setup,
    };
    let mut servers = start_servers(&set, &used, key, &mut result, obs);
    if result.errors.is_empty() {
        run_steps(&set, &mut servers, opts, &mut result, obs);
    }
    servers.stop_all(&mut result.errors);
    result
}

/// What every step of a run shares once its hosts are prepared.
struct Setting<'a> {
    plan: &'a PlanFile,
    steps: &'a [Step],
    ready: &'a BTreeMap<String, Ready>,
    /// Longest a step's set-up may take.
    setup: Duration,
}

/// Starts a server on every receiver (or reuses the one on its port), open only to the
/// plan's senders and holding the run's key; what fails is in `result.errors`.
fn start_servers(
    set: &Setting<'_>,
    used: &[String],
    key: String,
    result: &mut PlanResult,
    obs: &mut dyn PlanObserver,
) -> Servers {
    let (plan, steps, ready) = (set.plan, set.steps, set.ready);
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
        let allow = match sources_of(plan, steps, name, ready) {
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
            max_duration: server_cap(steps, name, set.setup),
            max_tests: server_tests(steps, name),
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
                set_server(result, name, "started");
                servers.keyed.insert(name.clone());
                servers.procs.push(srv);
            }
            Ok(Started::InUse) => {
                set_server(result, name, "reused");
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
    servers
}

/// Runs the steps in order (a search's trials each a step of the result), until the last or
/// Ctrl-C.
fn run_steps(
    set: &Setting<'_>,
    servers: &mut Servers,
    opts: &Options,
    result: &mut PlanResult,
    obs: &mut dyn PlanObserver,
) {
    let (plan, ready, setup) = (set.plan, set.ready, set.setup);
    // A search runs many trials, each a step of the result: later steps move up.
    let mut shift = 0u32;
    for step in set.steps {
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
            let srs = run_search(plan, step, fm, ready, servers, setup, opts, obs);
            shift += (srs.len() as u32).saturating_sub(1);
            for sr in srs {
                result.errors.extend(sr.errors.iter().cloned());
                result.steps.push(sr);
            }
        } else {
            obs.on_step_start(step, set.steps.len());
            let sr = run_step(plan, step, ready, servers, setup, opts, obs);
            result.errors.extend(sr.errors.iter().cloned());
            obs.on_step_end(&sr);
            result.steps.push(sr);
        }
        if opts.stop.load(Ordering::Acquire) {
            result.interrupted = true;
            break;
        }
    }
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

/// Most tests the plan's server on `receiver` runs at once: a step starts one client per
/// sender against each of its receivers. At least the server's own default (64), at most its
/// flag's limit (`plan check` refuses a step with more senders).
fn server_tests(steps: &[Step], receiver: &str) -> u32 {
    let most = steps
        .iter()
        .filter(|s| s.receivers.iter().any(|r| r == receiver))
        .map(|s| s.senders.len())
        .max()
        .unwrap_or(0);
    u32::try_from(most)
        .unwrap_or(u32::MAX)
        .clamp(64, MAX_SENDERS)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::hosts::{route_src, Ready};
    use super::servers::server_argv;
    use super::step::client_argv;
    use super::*;
    use crate::launch::Launcher;

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
            max_tests: server_tests(&steps, "rx"),
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
                max_tests: server_tests(&steps, "rx"),
            },
        );
        assert_eq!(
            argv.join(" "),
            "/h/hakaru server -B 10.0.0.1 -p 5300 --exit-on-stdin-eof --psk-file - --max-duration 126 --max-tests-per-client 4096 --max-tests 64 --max-pending 512 --max-memory 0 --allow 10.0.0.2 --allow 10.0.0.3"
        );
        // A fleet's step with 100 senders into rx: its server runs 100 tests at once, past
        // the default of 64; a receiver in no step keeps the default.
        let mut wide = steps.clone();
        wide[0].senders = (0..100).map(|i| format!("h{i}")).collect();
        assert_eq!(server_tests(&wide, "rx"), 100);
        assert_eq!(server_tests(&wide, "nobody"), 64);
        wide[0].senders = (0..5000).map(|i| format!("h{i}")).collect();
        assert_eq!(server_tests(&wide, "rx"), MAX_SENDERS);
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
