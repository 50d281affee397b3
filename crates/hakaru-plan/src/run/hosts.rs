//! The plan's hosts: each one's version checked (and this binary pushed where asked), and
//! the addresses its clients connect from, which its receivers' servers allow.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;

use hakaru_model::plan::{PlanHost, PlanResult};

use super::{port_of, Options, PlanObserver, PROBE_LIMIT, PUSH_LIMIT, ROUTE_LIMIT};
use crate::file::{PlanFile, Step};
use crate::launch::{probe_version, push, run_bounded, Image, Launcher};

/// A host ready to run commands.
pub(super) struct Ready {
    pub(super) launcher: Launcher,
    pub(super) hakaru: String,
}

/// The addresses the plan's clients of `receiver` connect from: for each sender of a step
/// with that receiver, the source address of the route to the receiver (local and netns
/// senders: looked up on this machine, `ip route get` in the namespace), else its `address`
/// (an IP, or a name resolved here). One message per sender whose address is unknown.
pub(super) fn sources_of(
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
pub(super) fn local_source(target: IpAddr, port: u16) -> Option<IpAddr> {
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
pub(super) fn netns_source(launcher: &Launcher, target: IpAddr) -> Option<IpAddr> {
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
pub(super) fn route_src(text: &str) -> Option<IpAddr> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "src")
        .and_then(|w| w[1].parse().ok())
}

/// Version checks (and pushes) on every used host, in parallel.
pub(super) fn prepare_hosts(
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
