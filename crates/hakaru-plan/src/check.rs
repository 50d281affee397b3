//! The checks of a plan file (`hakaru plan check`, and before every run): hosts and their
//! launchers, steps, sweeps, latency probes and netserver receivers.

use crate::file::{parse_secs, sweeps, HostSpec, Kind, PlanFile, StepSpec, Sweep};

/// Most senders in one step: each runs a test against every receiver at once, and a server
/// runs at most this many (its `--max-tests` limit).
pub const MAX_SENDERS: u32 = 4096;

/// A finding of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// True for problems that stop the plan; false for warnings.
    pub fatal: bool,
    /// What is wrong, naming the host or step.
    pub message: String,
}

/// A step's latency probe keys.
fn check_probe(s: &StepSpec, at: &str, fatal: &mut impl FnMut(String)) {
    if s.latency_probe.is_none() && s.latency_probe_rate.is_none() {
        return;
    }
    if !matches!(s.kind, Kind::Tcp | Kind::Udp | Kind::Pps) {
        fatal(format!(
            "{at}: latency_probe runs beside bulk flows: tcp, udp and pps steps"
        ));
    }
    if s.find_max.is_some() {
        fatal(format!(
            "{at}: latency_probe and find_max exclude each other (each trial is a test of its own)"
        ));
    }
    if s.latency_probe.is_none() {
        fatal(format!("{at}: latency_probe_rate needs latency_probe"));
    }
}

/// Checks a parsed plan for what TOML alone cannot catch. Fatal problems stop a run.
pub fn check(plan: &PlanFile) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut fatal = |m: String| {
        out.push(Problem {
            fatal: true,
            message: m,
        })
    };
    if plan.steps.is_empty() {
        fatal("the plan has no steps ([[step]] with kind, receivers and senders)".into());
    }
    for (name, h) in &plan.hosts {
        if let Some(m) = launcher_problem(name, h) {
            fatal(m);
        }
        if h.exec.as_ref().is_some_and(Vec::is_empty) {
            fatal(format!("host `{name}`: exec is an empty command prefix"));
        }
        if h.address.as_deref().is_some_and(|a| a.trim().is_empty()) {
            fatal(format!("host `{name}`: address is empty"));
        }
    }
    if let Some(t) = &plan.defaults.setup_timeout {
        if parse_secs(&t.to_string()).is_none() {
            fatal(format!(
                "defaults.setup_timeout `{t}` is not a time (10, 30s, 500ms)"
            ));
        }
    }
    for (i, s) in plan.steps.iter().enumerate() {
        let at = format!("step {} ({})", i + 1, s.kind.name());
        step_hosts(plan, s, &at, &mut fatal);
        netserver_step(plan, s, &at, &mut fatal);
        both_sides(s, &at, &mut fatal);
        if s.repeat == Some(0) {
            fatal(format!("{at}: repeat must be at least 1"));
        }
        if s.reverse == Some(true) && s.bidir == Some(true) {
            fatal(format!("{at}: reverse and bidir exclude each other"));
        }
        if s.time.is_some() && s.bytes.is_some() {
            fatal(format!("{at}: time and bytes exclude each other"));
        }
        check_probe(s, &at, &mut fatal);
        check_find_max(s, &at, &mut fatal);
        for (key, t) in [
            ("time", &s.time),
            ("omit", &s.omit),
            ("timeout", &s.timeout),
        ] {
            if let Some(t) = t {
                if parse_secs(&t.to_string()).is_none() {
                    fatal(format!("{at}: {key} `{t}` is not a time (10, 30s, 500ms)"));
                }
            }
        }
        for (key, v) in sweeps(s) {
            if let Some(Sweep::Many(vs)) = v {
                if vs.is_empty() {
                    fatal(format!("{at}: {key} is an empty list"));
                }
            }
        }
    }
    for name in plan.hosts.keys() {
        let used = plan
            .steps
            .iter()
            .any(|s| s.receivers.contains(name) || s.senders.contains(name));
        if !used {
            out.push(Problem {
                fatal: false,
                message: format!("host `{name}` is not used by any step"),
            });
        }
    }
    out
}

/// A step's receivers and senders: listed, hosts of the plan, once each, with the addresses
/// the step needs.
fn step_hosts(plan: &PlanFile, s: &StepSpec, at: &str, fatal: &mut impl FnMut(String)) {
    if s.receivers.is_empty() {
        fatal(format!("{at}: no receivers"));
    }
    if s.senders.is_empty() {
        fatal(format!("{at}: no senders"));
    }
    if s.senders.len() > MAX_SENDERS as usize {
        fatal(format!(
            "{at}: {} senders, more than the {MAX_SENDERS} tests a receiver's server runs at once (--max-tests); split the step",
            s.senders.len()
        ));
    }
    for (role, list) in [("receiver", &s.receivers), ("sender", &s.senders)] {
        for (j, h) in list.iter().enumerate() {
            if list[..j].contains(h) {
                fatal(format!("{at}: {role} `{h}` is listed twice"));
            }
            match plan.hosts.get(h) {
                None => fatal(format!(
                    "{at}: {role} `{h}` is not a host of the plan (hosts: {})",
                    plan.hosts.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
                Some(spec) if role == "receiver" && spec.address.is_none() => fatal(format!(
                    "{at}: receiver `{h}` has no address for the senders to test against"
                )),
                // A plan's server accepts only its senders' addresses; those of local and
                // netns senders are looked up on this machine.
                Some(spec)
                    if role == "sender"
                        && spec.address.is_none()
                        && (spec.ssh.is_some() || spec.exec.is_some()) =>
                {
                    fatal(format!(
                        "{at}: sender `{h}` has no address: the plan's servers accept only its senders, so set its address (the one its connections come from, as the receivers see it)"
                    ))
                }
                Some(_) => {}
            }
        }
    }
}

/// No host on both sides of a step.
fn both_sides(s: &StepSpec, at: &str, fatal: &mut impl FnMut(String)) {
    for h in &s.senders {
        if s.receivers.contains(h) {
            fatal(format!(
                "{at}: `{h}` is both a sender and a receiver; a host does not test against itself in a plan"
            ));
        }
    }
}

/// A find_max step: a udp or pps step that leaves the rate and time to the search, with a
/// loss, precision and trial that make sense.
fn check_find_max(s: &StepSpec, at: &str, fatal: &mut impl FnMut(String)) {
    let Some(fm) = &s.find_max else {
        return;
    };
    if !matches!(s.kind, Kind::Udp | Kind::Pps) {
        fatal(format!("{at}: find_max searches udp and pps steps"));
    }
    let set: Vec<&str> = [
        ("time", s.time.is_some()),
        ("bytes", s.bytes.is_some()),
        ("bitrate", s.bitrate.is_some()),
        ("rate", s.rate.is_some()),
        ("bitrate_up", s.bitrate_up.is_some()),
        ("bitrate_down", s.bitrate_down.is_some()),
        ("rate_up", s.rate_up.is_some()),
        ("rate_down", s.rate_down.is_some()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(k, _)| *k)
    .collect();
    if !set.is_empty() {
        fatal(format!(
            "{at}: find_max sets the rate and the time of each trial; drop {}",
            set.join(", ")
        ));
    }
    if fm.loss.is_some_and(|l| !(0.0..=100.0).contains(&l)) {
        fatal(format!("{at}: find_max.loss must be 0 to 100 (percent)"));
    }
    if fm.precision.is_some_and(|p| !(p > 0.0 && p <= 100.0)) {
        fatal(format!(
            "{at}: find_max.precision must be more than 0 and at most 100 (percent)"
        ));
    }
    if let Some(t) = &fm.trial {
        if parse_secs(&t.to_string()).is_none_or(|d| d.is_zero()) {
            fatal(format!(
                "{at}: find_max.trial `{t}` is not a time (2, 3s, 500ms)"
            ));
        }
    }
}

/// What is wrong with a host's launchers: none or several, or any on a netserver host.
fn launcher_problem(name: &str, h: &HostSpec) -> Option<String> {
    match h.launchers().as_slice() {
        [] if h.is_netserver() && h.address.is_none() => Some(format!(
            "host `{name}` is a netserver (netserver = true) without an address: set the address its netserver listens on"
        )),
        [] if h.is_netserver() => None,
        some if h.is_netserver() => Some(format!(
            "host `{name}` is a netserver (netserver = true): the plan starts nothing there, so it takes no launcher; drop {}",
            some.join(", ")
        )),
        [_] => None,
        [] => Some(format!(
            "host `{name}` has no launcher: set one of ssh, netns, local = true or exec"
        )),
        many => Some(format!(
            "host `{name}` sets {} launchers ({}): set exactly one",
            many.len(),
            many.join(", ")
        )),
    }
}

/// What a step with a netserver among its receivers cannot ask (netperf cannot express it).
fn netserver_step(plan: &PlanFile, s: &StepSpec, at: &str, fatal: &mut impl FnMut(String)) {
    let is_ns = |h: &String| plan.hosts.get(h).is_some_and(HostSpec::is_netserver);
    for h in s.senders.iter().filter(|h| is_ns(h)) {
        fatal(format!(
            "{at}: sender `{h}` is a netserver (netserver = true): the plan runs nothing there, so it can only be a receiver"
        ));
    }
    let Some(ns) = s.receivers.iter().find(|h| is_ns(h)) else {
        return;
    };
    let udp = matches!(s.kind, Kind::Udp | Kind::Pps);
    let refused = [
        (
            "bidir",
            s.bidir == Some(true),
            "a netperf test moves data one way",
        ),
        (
            "omit",
            s.omit.is_some(),
            "netserver counts from the first byte",
        ),
        (
            "find_max",
            s.find_max.is_some(),
            "the search needs hakaru servers",
        ),
        (
            "reverse",
            udp && s.reverse == Some(true),
            "netperf's UDP_STREAM only sends to netserver",
        ),
        (
            "bytes",
            udp && s.bytes.is_some(),
            "netserver ends UDP tests by time",
        ),
    ];
    for (key, set, why) in refused {
        if set {
            fatal(format!(
                "{at}: receiver `{ns}` is a netserver, and {key} cannot be run against one ({why})"
            ));
        }
    }
}
