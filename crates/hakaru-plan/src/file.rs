//! The plan file (TOML): hosts, how to reach them, and steps; its checks and the expansion of
//! sweeps and repeats into the steps that run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A plan as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Settings every host and step inherits unless it sets its own.
    #[serde(default)]
    pub defaults: Defaults,
    /// The machines, by name.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSpec>,
    /// Hosts from the mesh's peer list, reached through a launcher template; steps select
    /// them with `@fleet` and `@KEY=VALUE` (docs/plan.md, "A fleet's hosts").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSpec>,
    /// The steps, run in order (`[[step]]`).
    #[serde(rename = "step", default)]
    pub steps: Vec<StepSpec>,
    /// Save every run of this plan in the results archive (as `plan run --save`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save: Option<bool>,
    /// Labels saved with the run (as `--label KEY=VALUE`), added to those on the command line.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// The `[fleet]` table: hosts from the mesh's peer list (expanded by the fleet module).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// The peer list the mesh agents probe: a file (relative to the plan file), or
    /// `dns:NAME[:PORT]`. Each peer becomes a host named by its address, with its labels.
    pub peers: String,
    /// The hosts' ssh destination, a template: `{address}`, `{name}` (the peer as the list
    /// writes it) and `{KEY}` for any of its labels are replaced (`root@{address}`).
    pub ssh: Option<String>,
    /// Or an exec prefix, each word a template (`["kubectl", "exec", "-i", "{pod}", "--"]`).
    pub exec: Option<Vec<String>>,
    /// Or a network namespace of this machine, a template (`{ns}`).
    pub netns: Option<String>,
    /// Most hosts taken from the list (default 1000): a longer list is an error.
    pub max_hosts: Option<u32>,
}

/// Plan-wide settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Server port on every receiver (default 5201).
    pub port: Option<u16>,
    /// Path of hakaru on hosts that do not set `hakaru` (default: `hakaru` on the PATH over
    /// ssh and exec, the coordinator's own binary for local and netns hosts).
    pub hakaru: Option<String>,
    /// Copy the coordinator's binary to every ssh and exec host (see the host key).
    pub push: Option<bool>,
    /// Extra arguments for every ssh launcher, before the destination (`["-i", "key"]`).
    pub ssh_options: Option<Vec<String>>,
    /// Longest a step may take to set up every client, seconds or with a unit (default 60).
    pub setup_timeout: Option<Scalar>,
}

/// One machine and the way to run commands on it. Exactly one of `ssh`, `netns`, `local` and
/// `exec` is set.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Address the other hosts test against (needed when the host is a receiver), and the
    /// one its connections come from (needed for an ssh or exec sender: a plan's servers
    /// accept only their senders' addresses).
    pub address: Option<String>,
    /// Reach it with the system `ssh` binary (`user@host`, or a Host of ~/.ssh/config).
    pub ssh: Option<String>,
    /// Extra ssh arguments for this host, before the destination.
    pub ssh_options: Option<Vec<String>>,
    /// Run in this network namespace of the coordinator's machine (`ip netns exec NAME`).
    pub netns: Option<String>,
    /// Run on the coordinator's machine itself.
    pub local: Option<bool>,
    /// Any command prefix that runs a command on the machine with stdin and stdout piped
    /// (`["kubectl", "exec", "-i", "POD", "--"]`, `["docker", "exec", "-i", "CTR"]`).
    pub exec: Option<Vec<String>>,
    /// Path of hakaru there.
    pub hakaru: Option<String>,
    /// Copy the coordinator's own binary there over the launcher before the run (ssh and exec
    /// hosts), into a directory only the remote user may write, where it runs only once its
    /// SHA-256 is checked there (needs `sh` and `sha256sum` or `shasum`).
    pub push: Option<bool>,
    /// Server port when this host is a receiver (default: `defaults.port`, else 5201; for a
    /// netserver host, 12865).
    pub port: Option<u16>,
    /// `true`: a stock netserver (netperf 2.6 or 2.7) listens at `address` on `port`. The plan
    /// starts nothing there (no launcher): the host is only a receiver, and its senders run
    /// their tests with `--netperf`.
    pub netserver: Option<bool>,
}

/// A value written as a number or a string with a unit (`10`, `2.5`, `"500ms"`, `"10G"`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    /// A whole number.
    Int(i64),
    /// A number with a fraction.
    Float(f64),
    /// Text, passed on as written.
    Text(String),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Text(s) => f.write_str(s),
        }
    }
}

/// One value, or a list to sweep over (one step per value).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Sweep {
    /// A single value.
    One(Scalar),
    /// One step per value, in order.
    Many(Vec<Scalar>),
}

impl Sweep {
    fn values(&self) -> Vec<String> {
        match self {
            Sweep::One(v) => vec![v.to_string()],
            Sweep::Many(vs) => vs.iter().map(Scalar::to_string).collect(),
        }
    }
}

/// Test kinds a step can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `hakaru tcp`.
    Tcp,
    /// `hakaru udp`.
    Udp,
    /// `hakaru pps`.
    Pps,
    /// `hakaru latency`.
    Latency,
    /// `hakaru connect`.
    Connect,
}

impl Kind {
    /// The subcommand's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::Pps => "pps",
            Kind::Latency => "latency",
            Kind::Connect => "connect",
        }
    }
}

/// One step as written: which hosts, what test, which options. Options are the subcommand's
/// flags by their long names; those marked "sweepable" take a list.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// A name for the output (default: the kind and the sweep values).
    pub name: Option<String>,
    /// The test.
    pub kind: Kind,
    /// Hosts that run `hakaru server`.
    pub receivers: Vec<String>,
    /// Hosts that run the clients: each sender runs one client against each receiver.
    pub senders: Vec<String>,
    /// Run the step this many times (default 1).
    pub repeat: Option<u32>,
    /// `-t`: test length.
    pub time: Option<Scalar>,
    /// `-n`: bytes (tcp) or bytes of datagrams (udp, pps) per direction instead of a time.
    pub bytes: Option<Scalar>,
    /// `-P`: flows per client (sweepable).
    pub parallel: Option<Sweep>,
    /// `-b`: rate per flow (sweepable).
    pub bitrate: Option<Sweep>,
    /// `-l`: write or datagram size (sweepable).
    pub length: Option<Sweep>,
    /// `--rate`: datagrams (pps) or requests (latency) per second per flow (sweepable).
    pub rate: Option<Sweep>,
    /// `-w`: socket buffer size (sweepable).
    pub window: Option<Sweep>,
    /// `--bitrate-up`: client -> server rate per flow instead of `bitrate` (udp, tcp).
    pub bitrate_up: Option<Scalar>,
    /// `--bitrate-down`: server -> client rate per flow instead of `bitrate` (udp, tcp).
    pub bitrate_down: Option<Scalar>,
    /// `--rate-up`: client -> server datagrams per second per flow instead of `rate` (pps).
    pub rate_up: Option<Scalar>,
    /// `--rate-down`: server -> client datagrams per second per flow instead of `rate` (pps).
    pub rate_down: Option<Scalar>,
    /// `-R`: the receivers send.
    pub reverse: Option<bool>,
    /// `--bidir`: both directions at once.
    pub bidir: Option<bool>,
    /// `-O`: warm-up not counted.
    pub omit: Option<Scalar>,
    /// `-i`: seconds between intervals (default 1).
    pub interval: Option<Scalar>,
    /// `-C`: congestion control.
    pub congestion: Option<String>,
    /// `-M`: TCP maximum segment size.
    pub mss: Option<u32>,
    /// `-N`: TCP_NODELAY.
    pub no_delay: Option<bool>,
    /// `--tos`.
    pub tos: Option<u8>,
    /// `--dscp`.
    pub dscp: Option<u8>,
    /// `--no-gso` (udp, pps).
    pub no_gso: Option<bool>,
    /// `--udp` (latency).
    pub udp: Option<bool>,
    /// `--rst` (connect).
    pub rst: Option<bool>,
    /// `-A`: CPUs for the clients' workers.
    pub affinity: Option<String>,
    /// `--server-affinity`: CPUs for the servers' workers.
    pub server_affinity: Option<String>,
    /// Further flags of the subcommand, verbatim (`["--histogram"]`).
    pub args: Option<Vec<String>>,
    /// Longest the step may run once started, seconds or with a unit (default: the test's
    /// time and warm-up plus 60 s; set it for `bytes` steps that may run long).
    pub timeout: Option<Scalar>,
    /// udp, pps: search for the highest rate per flow whose loss, at the receivers together,
    /// stays within the target; every sender steps its rate at once, trial by trial
    /// (`find_max = { loss = 0.5, trial = 2, precision = 1 }`). `omit` is each trial's warm-up
    /// (default 0.5 s); `time`, `bytes` and the rate keys are the search's to set.
    pub find_max: Option<FindMaxKeys>,
    /// tcp, udp: latency probes beside the bulk flows (`--latency-probe`): from every
    /// client (`"all"`) or from the first sender's client of the first receiver alone
    /// (`"first"`: one probe flow, so the probes do not load the path themselves).
    pub latency_probe: Option<ProbeFrom>,
    /// Probes a second with `latency_probe` (10 to 100, default 20).
    pub latency_probe_rate: Option<Scalar>,
}

/// Which clients of a step run latency probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeFrom {
    /// Every client.
    All,
    /// The first sender's client of the first receiver.
    First,
}

/// The settings of a `find_max` step.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindMaxKeys {
    /// Most loss a rate may have, percent (default 0.1).
    pub loss: Option<f64>,
    /// Measured time of each trial (default 2 s).
    pub trial: Option<Scalar>,
    /// Stop when the best rate and the first miss are this close, percent (default 1).
    pub precision: Option<f64>,
}

/// A `find_max` step's settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FindMaxSettings {
    /// Loss target, percent.
    pub loss: f64,
    /// Measured time per trial.
    pub trial: std::time::Duration,
    /// Warm-up per trial.
    pub warmup: std::time::Duration,
    /// Precision, a fraction.
    pub precision: f64,
}

/// A step ready to run: sweeps and repeats expanded, flags built.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Position in the run, from 1.
    pub index: u32,
    /// Position of the step in the file, from 1.
    pub source: u32,
    /// Name for the output.
    pub name: String,
    /// Test kind.
    pub kind: Kind,
    /// Repetition, from 1.
    pub repeat: u32,
    /// Sweep values of this step.
    pub sweep: BTreeMap<String, String>,
    /// Client hosts.
    pub senders: Vec<String>,
    /// Server hosts.
    pub receivers: Vec<String>,
    /// The subcommand's flags (without host, port and output flags).
    pub flags: Vec<String>,
    /// Expected length once started (time + warm-up), when known.
    pub expected: Option<std::time::Duration>,
    /// Limit once started, from `timeout`.
    pub timeout: Option<std::time::Duration>,
    /// A `find_max` step: the search's settings (each trial adds its rate and time flags).
    pub find_max: Option<FindMaxSettings>,
    /// Which clients run latency probes, and the flags that ask for them.
    pub probe: Option<(ProbeFrom, Vec<String>)>,
}

impl Step {
    /// The flags of the client from `sender` (its index in `senders`) to `receiver` (its
    /// index): the step's, and the probe flags if that client probes.
    pub fn client_flags(&self, sender: usize, receiver: usize) -> Vec<String> {
        let mut f = self.flags.clone();
        if let Some((from, flags)) = &self.probe {
            if *from == ProbeFrom::All || (sender == 0 && receiver == 0) {
                f.extend(flags.iter().cloned());
            }
        }
        f
    }
}

/// Why a plan cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Not valid TOML, or keys the plan does not know.
    #[error("{0}")]
    Parse(String),
}

/// Reads a plan from TOML text.
pub fn parse(text: &str) -> Result<PlanFile, PlanError> {
    toml::from_str(text).map_err(|e| PlanError::Parse(e.to_string().trim_end().to_string()))
}

/// Parses a time as the CLI does: a number of seconds or a number with `s`, `ms`, `us`.
pub fn parse_secs(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0).then(|| std::time::Duration::from_secs_f64(v * mul))
}

impl HostSpec {
    /// A stock netserver the plan only sends to (`netserver = true`).
    pub fn is_netserver(&self) -> bool {
        self.netserver == Some(true)
    }

    /// The launchers set on this host, by key.
    pub fn launchers(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.ssh.is_some() {
            v.push("ssh");
        }
        if self.netns.is_some() {
            v.push("netns");
        }
        if self.local == Some(true) {
            v.push("local");
        }
        if self.exec.is_some() {
            v.push("exec");
        }
        v
    }
}

impl PlanFile {
    /// Where hakaru runs on a host: `None` when the coordinator pushes its own binary there
    /// (`push`, on hosts that are not this machine); otherwise the host's `hakaru`, the
    /// plan's default, this binary (`self_path`) on this machine, or `hakaru` on the PATH.
    pub fn binary_of(
        &self,
        spec: &HostSpec,
        same_machine: bool,
        self_path: &str,
    ) -> Option<String> {
        if spec.push.or(self.defaults.push) == Some(true) && !same_machine {
            return None;
        }
        Some(match (&spec.hakaru, &self.defaults.hakaru) {
            (Some(p), _) | (None, Some(p)) => p.clone(),
            (None, None) if same_machine => self_path.to_string(),
            (None, None) => "hakaru".into(),
        })
    }
}

pub(crate) fn sweeps(s: &StepSpec) -> [(&'static str, &Option<Sweep>); 5] {
    [
        ("parallel", &s.parallel),
        ("bitrate", &s.bitrate),
        ("length", &s.length),
        ("rate", &s.rate),
        ("window", &s.window),
    ]
}

/// Flag of each sweepable key.
fn sweep_flag(key: &str) -> &'static str {
    match key {
        "parallel" => "-P",
        "bitrate" => "-b",
        "length" => "-l",
        "rate" => "--rate",
        _ => "-w",
    }
}

/// The flags of a step's fixed (not swept) options.
fn fixed_flags(s: &StepSpec) -> Vec<String> {
    let mut f: Vec<String> = Vec::new();
    let mut val = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            f.push(flag.into());
            f.push(v);
        }
    };
    val("-t", s.time.as_ref().map(Scalar::to_string));
    val("-n", s.bytes.as_ref().map(Scalar::to_string));
    val("-O", s.omit.as_ref().map(Scalar::to_string));
    val("-i", s.interval.as_ref().map(Scalar::to_string));
    val("--bitrate-up", s.bitrate_up.as_ref().map(Scalar::to_string));
    val(
        "--bitrate-down",
        s.bitrate_down.as_ref().map(Scalar::to_string),
    );
    val("--rate-up", s.rate_up.as_ref().map(Scalar::to_string));
    val("--rate-down", s.rate_down.as_ref().map(Scalar::to_string));
    val("-C", s.congestion.clone());
    val("-M", s.mss.map(|m| m.to_string()));
    val("--tos", s.tos.map(|m| m.to_string()));
    val("--dscp", s.dscp.map(|m| m.to_string()));
    val("-A", s.affinity.clone());
    val("--server-affinity", s.server_affinity.clone());
    for (flag, on) in [
        ("-R", s.reverse),
        ("--bidir", s.bidir),
        ("-N", s.no_delay),
        ("--no-gso", s.no_gso),
        ("--udp", s.udp),
        ("--rst", s.rst),
    ] {
        if on == Some(true) {
            f.push(flag.into());
        }
    }
    f.extend(s.args.iter().flatten().cloned());
    f
}

/// Expands sweeps (every combination, in the order parallel, bitrate, length, rate, window)
/// and repeats into the steps that run. Call after [`check`] found nothing fatal.
pub fn expand(plan: &PlanFile) -> Vec<Step> {
    let mut out = Vec::new();
    for (i, s) in plan.steps.iter().enumerate() {
        let mut combos: Vec<Vec<(&'static str, String)>> = vec![Vec::new()];
        for (key, v) in sweeps(s) {
            let Some(v) = v else { continue };
            let mut next = Vec::new();
            for c in &combos {
                for value in v.values() {
                    let mut c = c.clone();
                    c.push((key, value));
                    next.push(c);
                }
            }
            combos = next;
        }
        let swept: Vec<&str> = sweeps(s)
            .iter()
            .filter(|(_, v)| matches!(v, Some(Sweep::Many(_))))
            .map(|(k, _)| *k)
            .collect();
        let time = s
            .time
            .as_ref()
            .map_or(Some(std::time::Duration::from_secs(10)), |t| {
                parse_secs(&t.to_string())
            });
        let omit = s
            .omit
            .as_ref()
            .and_then(|t| parse_secs(&t.to_string()))
            .unwrap_or_default();
        let expected = if s.bytes.is_some() {
            None
        } else {
            time.map(|t| t + omit)
        };
        let timeout = s.timeout.as_ref().and_then(|t| parse_secs(&t.to_string()));
        let find_max = s.find_max.as_ref().map(|fm| FindMaxSettings {
            loss: fm.loss.unwrap_or(0.1),
            trial: fm
                .trial
                .as_ref()
                .and_then(|t| parse_secs(&t.to_string()))
                .unwrap_or(std::time::Duration::from_secs(2)),
            warmup: if s.omit.is_some() {
                omit
            } else {
                std::time::Duration::from_millis(500)
            },
            precision: fm.precision.unwrap_or(1.0) / 100.0,
        });
        let expected = match &find_max {
            Some(f) => Some(f.trial + f.warmup),
            None => expected,
        };
        let probe = s.latency_probe.map(|from| {
            let mut f = vec!["--latency-probe".to_string()];
            f.extend(s.latency_probe_rate.as_ref().map(Scalar::to_string));
            (from, f)
        });
        for combo in combos {
            let mut flags = Vec::new();
            let mut sweep = BTreeMap::new();
            for (k, v) in &combo {
                flags.push(sweep_flag(k).to_string());
                flags.push(v.clone());
                if swept.contains(k) {
                    sweep.insert(k.to_string(), v.clone());
                }
            }
            flags.extend(fixed_flags(s));
            let name = match (&s.name, sweep.is_empty()) {
                (Some(n), true) => n.clone(),
                (Some(n), false) => format!("{n} ({})", describe(&sweep)),
                (None, true) => s.kind.name().to_string(),
                (None, false) => format!("{} ({})", s.kind.name(), describe(&sweep)),
            };
            for r in 1..=s.repeat.unwrap_or(1) {
                out.push(Step {
                    index: out.len() as u32 + 1,
                    source: i as u32 + 1,
                    name: name.clone(),
                    kind: s.kind,
                    repeat: r,
                    sweep: sweep.clone(),
                    senders: s.senders.clone(),
                    receivers: s.receivers.clone(),
                    flags: flags.clone(),
                    expected,
                    timeout,
                    find_max: find_max.clone(),
                    probe: probe.clone(),
                });
            }
        }
    }
    out
}

fn describe(sweep: &BTreeMap<String, String>) -> String {
    sweep
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{check, Problem};

    const SEED: &str = r#"
[defaults]
port = 5201

[hosts.dut]
address = "10.0.0.1"
netns = "dut"

[hosts.a]
ssh = "root@10.0.0.2"
address = "10.0.0.2"
ssh_options = ["-i", "/tmp/key"]
push = true

[hosts.b]
exec = ["kubectl", "exec", "-i", "pod-b", "--"]
address = "10.0.0.3"

[[step]]
kind = "pps"
receivers = ["dut"]
senders = ["a", "b"]
parallel = 64
time = "10s"

[[step]]
name = "sweep"
kind = "tcp"
receivers = ["dut"]
senders = ["a"]
parallel = [1, 2, 4]
bitrate = ["1G", "2G"]
repeat = 2
reverse = true
"#;

    #[test]
    fn parses_and_expands_sweeps_and_repeats() {
        let p = parse(SEED).unwrap();
        assert!(check(&p).is_empty(), "{:?}", check(&p));
        let steps = expand(&p);
        // 1 + 3 x 2 sweep values x 2 repeats.
        assert_eq!(steps.len(), 13);
        assert_eq!(
            steps[0].flags,
            ["-P", "64", "-t", "10s"].map(String::from).to_vec()
        );
        assert!(steps[0].sweep.is_empty());
        assert_eq!(steps[0].expected, Some(std::time::Duration::from_secs(10)));
        let s = &steps[1];
        assert_eq!(s.name, "sweep (bitrate 1G, parallel 1)");
        assert_eq!(s.repeat, 1);
        assert_eq!(
            s.flags,
            ["-P", "1", "-b", "1G", "-R"].map(String::from).to_vec()
        );
        assert_eq!(steps[2].repeat, 2);
        assert_eq!(steps[3].sweep["bitrate"], "2G");
        assert_eq!(steps[12].sweep["parallel"], "4");
        assert_eq!(steps[12].index, 13);
        assert_eq!(steps[12].source, 2);
    }

    #[test]
    fn per_direction_rates_become_flags() {
        let p = parse("[hosts.a]\nlocal = true\n[hosts.b]\nlocal = true\n[[step]]\nkind = \"udp\"\nreceivers = [\"a\"]\nsenders = [\"b\"]\nbidir = true\nbitrate_up = \"40M\"\nbitrate_down = \"10M\"\n")
            .unwrap();
        let steps = expand(&p);
        let f = &steps[0].flags;
        let at = |flag: &str| f.iter().position(|x| x == flag).map(|i| f[i + 1].as_str());
        assert_eq!(at("--bitrate-up"), Some("40M"), "{f:?}");
        assert_eq!(at("--bitrate-down"), Some("10M"), "{f:?}");
        assert!(f.iter().any(|x| x == "--bidir"));
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let e = parse("[hosts.a]\nlocal = true\n[[step]]\nkind = \"tcp\"\nreceivers = []\nsenders = []\nparalel = 4\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("paralel") && e.contains("line 7"), "{e}");
        let e = parse("[hosts.a]\nlocal = true\nadress = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("adress"), "{e}");
        let e = parse(
            "[hosts.a]\nlocal = true\n[[step]]\nkind = \"ftp\"\nreceivers = []\nsenders = []\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ftp"), "{e}");
    }

    fn fatal(text: &str) -> Vec<String> {
        check(&parse(text).unwrap())
            .into_iter()
            .filter(|p| p.fatal)
            .map(|p| p.message)
            .collect()
    }

    #[test]
    fn netserver_hosts_are_receivers_without_launchers() {
        let base =
            "[hosts.n]\naddress = \"10.1.1.9\"\nnetserver = true\n[hosts.s]\nnetns = \"s\"\n";
        let ok =
            format!("{base}[[step]]\nkind = \"latency\"\nreceivers = [\"n\"]\nsenders = [\"s\"]\n");
        assert!(fatal(&ok).is_empty(), "{:?}", fatal(&ok));
        let f = fatal(&format!(
            "{base}[[step]]\nkind = \"udp\"\nreceivers = [\"n\"]\nsenders = [\"s\"]\nreverse = true\nomit = 1\n[[step]]\nkind = \"tcp\"\nreceivers = [\"s\"]\nsenders = [\"n\"]\n"
        ));
        for want in ["reverse cannot", "omit cannot", "can only be a receiver"] {
            assert!(f.iter().any(|m| m.contains(want)), "{want}: {f:?}");
        }
        let f = fatal(
            "[hosts.n]\nnetserver = true\nssh = \"n\"\n[[step]]\nkind = \"tcp\"\nreceivers = [\"n\"]\nsenders = [\"n\"]\n",
        );
        assert!(
            f.iter().any(|m| m.contains("takes no launcher; drop ssh")),
            "{f:?}"
        );
        let f = fatal("[hosts.n]\nnetserver = true\n");
        assert!(f.iter().any(|m| m.contains("without an address")), "{f:?}");
    }

    #[test]
    fn a_step_has_at_most_as_many_senders_as_a_server_runs_tests() {
        let n = crate::check::MAX_SENDERS as usize;
        let hosts: String = (0..=n)
            .map(|i| {
                format!(
                    "[hosts.h{i}]\naddress = \"10.9.{}.{}\"\nnetns = \"h{i}\"\n",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect();
        let step = |k: usize| {
            let senders: Vec<String> = (1..=k).map(|i| format!("\"h{i}\"")).collect();
            format!(
                "[[step]]\nkind = \"pps\"\nreceivers = [\"h0\"]\nsenders = [{}]\n",
                senders.join(", ")
            )
        };
        let ok = fatal(&format!("{hosts}{}", step(n)));
        assert!(ok.is_empty(), "{:?}", ok.first());
        let f = fatal(&format!("{hosts}{}", step(n + 1)));
        assert!(
            f.iter()
                .any(|m| m.contains("4097 senders, more than the 4096")),
            "{:?}",
            f.first()
        );
    }

    #[test]
    fn check_names_each_problem() {
        let base = "[hosts.r]\naddress = \"10.1.1.1\"\nnetns = \"r\"\n[hosts.s]\nnetns = \"s\"\n";
        let f = fatal(&format!(
            "{base}[[step]]\nkind = \"tcp\"\nreceivers = [\"r\"]\nsenders = [\"r\", \"x\"]\n"
        ));
        assert!(
            f.iter()
                .any(|m| m.contains("`r` is both a sender and a receiver")),
            "{f:?}"
        );
        assert!(f.iter().any(|m| m.contains("`x` is not a host")), "{f:?}");
        let f = fatal(&format!(
            "{base}[[step]]\nkind = \"tcp\"\nreceivers = [\"s\"]\nsenders = [\"r\"]\n"
        ));
        assert!(
            f.iter().any(|m| m.contains("receiver `s` has no address")),
            "{f:?}"
        );
        let f = fatal(&format!(
            "{base}[hosts.far]\nssh = \"far\"\n[hosts.pod]\nexec = [\"kubectl\", \"exec\", \"-i\", \"p\", \"--\"]\n[[step]]\nkind = \"tcp\"\nreceivers = [\"r\"]\nsenders = [\"s\", \"far\", \"pod\"]\n"
        ));
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f[0].contains("sender `far` has no address") && f[1].contains("sender `pod`"),
            "{f:?}"
        );
        let f = fatal("[hosts.r]\naddress = \"1.1.1.1\"\nnetns = \"r\"\nlocal = true\n");
        assert!(f.iter().any(|m| m.contains("sets 2 launchers")), "{f:?}");
        assert!(f.iter().any(|m| m.contains("no steps")), "{f:?}");
        let f = fatal(&format!(
            "{base}[[step]]\nkind = \"udp\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\ntime = \"ten\"\nparallel = []\nrepeat = 0\n"
        ));
        assert_eq!(f.len(), 3, "{f:?}");
        let all = check(
            &parse(&format!(
                "{base}[hosts.idle]\nlocal = true\n[[step]]\nkind = \"tcp\"\nreceivers = [\"r\"]\nsenders = [\"s\"]\n"
            ))
            .unwrap(),
        );
        assert_eq!(
            all,
            vec![Problem {
                fatal: false,
                message: "host `idle` is not used by any step".into()
            }]
        );
    }

    #[test]
    fn times_parse_like_the_cli() {
        assert_eq!(parse_secs("10"), Some(std::time::Duration::from_secs(10)));
        assert_eq!(
            parse_secs("500ms"),
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(
            parse_secs("2.5s"),
            Some(std::time::Duration::from_millis(2500))
        );
        assert_eq!(parse_secs("-1"), None);
        assert_eq!(parse_secs("x"), None);
    }
}
