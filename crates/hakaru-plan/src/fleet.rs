//! `[fleet]`: a plan's hosts from the mesh's peer list (the file or `dns:NAME` the agents
//! probe, docs/mesh.md), each reached through a launcher written as a template, and `@fleet`
//! and `@KEY=VALUE` in a step's `receivers` and `senders` for all of them or those with a
//! label. Applied to the parsed file before it is checked, so the rest of the plan code sees
//! ordinary hosts.

use std::collections::BTreeMap;
use std::path::Path;

pub use crate::file::FleetSpec;
use crate::file::{HostSpec, PlanFile};

/// Most hosts a fleet brings in unless `max_hosts` says otherwise.
pub const DEFAULT_MAX_HOSTS: u32 = 1000;

/// Fills `{address}`, `{name}` and `{KEY}` (a label) in `t`; a placeholder left over is an
/// error naming it.
fn fill(t: &str, address: &str, name: &str, labels: &[(String, String)]) -> Result<String, String> {
    let mut out = t.replace("{address}", address).replace("{name}", name);
    for (k, v) in labels {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    match (out.find('{'), out.find('}')) {
        (Some(a), Some(b)) if a < b => Err(format!(
            "`{}` in `{t}` is neither {{address}}, {{name}} nor a label of {name}",
            &out[a..=b]
        )),
        _ => Ok(out),
    }
}

/// Expands the plan's `[fleet]` into hosts and its steps' `@...` selectors into host names.
/// `base` is the plan file's directory (a relative peers file is read from there).
pub fn apply(plan: &mut PlanFile, base: &Path) -> Result<(), String> {
    let uses = plan
        .steps
        .iter()
        .flat_map(|s| s.receivers.iter().chain(&s.senders))
        .any(|h| h.starts_with('@'));
    let Some(f) = plan.fleet.clone() else {
        if uses {
            return Err("a step names hosts with `@`, which needs a [fleet] table".into());
        }
        return Ok(());
    };
    let launchers = usize::from(f.ssh.is_some())
        + usize::from(f.exec.is_some())
        + usize::from(f.netns.is_some());
    if launchers != 1 {
        return Err(format!(
            "[fleet] needs exactly one of ssh, exec and netns (a template for every host), not {launchers}"
        ));
    }
    let source = hakaru_mesh::PeerSource::parse(&f.peers, hakaru_mesh::DEFAULT_PORT)
        .map_err(|e| format!("[fleet] peers: {e}"))?;
    let source = match source {
        hakaru_mesh::PeerSource::File(p) if p.is_relative() => {
            hakaru_mesh::PeerSource::File(base.join(p))
        }
        s => s,
    };
    let max = f.max_hosts.unwrap_or(DEFAULT_MAX_HOSTS) as usize;
    let peers = source
        .load(hakaru_mesh::DEFAULT_PORT, max)
        .map_err(|e| format!("[fleet] {e}"))?;
    let mut labels: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut order = Vec::new();
    for p in peers {
        let address = p.addr.ip().to_string();
        if plan.hosts.contains_key(&address) || labels.contains_key(&address) {
            return Err(format!(
                "[fleet]: host {address} is also a host of the plan, or listed twice"
            ));
        }
        let t =
            |s: &str| fill(s, &address, &p.name, &p.labels).map_err(|e| format!("[fleet]: {e}"));
        let host = HostSpec {
            address: Some(address.clone()),
            ssh: f.ssh.as_deref().map(t).transpose()?,
            exec: f
                .exec
                .as_ref()
                .map(|words| words.iter().map(|w| t(w)).collect::<Result<Vec<_>, _>>())
                .transpose()?,
            netns: f.netns.as_deref().map(t).transpose()?,
            ..HostSpec::default()
        };
        plan.hosts.insert(address.clone(), host);
        labels.insert(address.clone(), p.labels);
        order.push(address);
    }
    for (i, s) in plan.steps.iter_mut().enumerate() {
        for (role, list) in [("receivers", &mut s.receivers), ("senders", &mut s.senders)] {
            let mut out = Vec::new();
            for h in list.iter() {
                let Some(sel) = h.strip_prefix('@') else {
                    out.push(h.clone());
                    continue;
                };
                let chosen: Vec<&String> = match sel.split_once('=') {
                    None if sel == "fleet" => order.iter().collect(),
                    None => {
                        return Err(format!(
                            "step {}: {role} `{h}`: `@fleet` or `@KEY=VALUE`",
                            i + 1
                        ))
                    }
                    Some((k, v)) => order
                        .iter()
                        .filter(|a| labels[*a].iter().any(|(lk, lv)| lk == k && lv == v))
                        .collect(),
                };
                if chosen.is_empty() {
                    return Err(format!(
                        "step {}: {role} `{h}` selects no host of the fleet",
                        i + 1
                    ));
                }
                out.extend(chosen.into_iter().cloned());
            }
            *list = out;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "hakaru-fleet-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_fleet_brings_its_hosts_and_steps_select_them_by_label() {
        let d = dir();
        std::fs::write(
            d.join("peers.txt"),
            "10.0.0.1 role=rx ns=n1\n10.0.0.2 role=tx ns=n2\n10.0.0.3 role=tx ns=n3\n",
        )
        .unwrap();
        let mut p = crate::parse(
            "[fleet]\npeers = \"peers.txt\"\nexec = [\"ip\", \"netns\", \"exec\", \"{ns}\"]\n\
             [hosts.here]\nlocal = true\n\
             [[step]]\nkind = \"tcp\"\nreceivers = [\"@role=rx\"]\nsenders = [\"@role=tx\"]\n\
             [[step]]\nkind = \"tcp\"\nreceivers = [\"@fleet\"]\nsenders = [\"here\"]\n",
        )
        .unwrap();
        apply(&mut p, &d).unwrap();
        assert_eq!(p.hosts.len(), 4);
        let h = &p.hosts["10.0.0.2"];
        assert_eq!(h.address.as_deref(), Some("10.0.0.2"));
        assert_eq!(
            h.exec.as_deref(),
            Some(&["ip".to_string(), "netns".into(), "exec".into(), "n2".into()][..])
        );
        assert_eq!(p.steps[0].receivers, ["10.0.0.1"]);
        assert_eq!(p.steps[0].senders, ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(p.steps[1].receivers, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        assert_eq!(p.steps[1].senders, ["here"]);
        assert!(
            crate::check(&p).iter().all(|x| !x.fatal),
            "{:?}",
            crate::check(&p)
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn fleet_mistakes_are_named() {
        let d = dir();
        std::fs::write(d.join("peers.txt"), "10.0.0.1 role=rx\n10.0.0.2\n").unwrap();
        let err = |text: &str| {
            let mut p = crate::parse(text).unwrap();
            apply(&mut p, &d).unwrap_err()
        };
        let step =
            "[[step]]\nkind = \"tcp\"\nreceivers = [\"@role=rx\"]\nsenders = [\"@role=tx\"]\n";
        assert!(err(&format!(
            "[fleet]\npeers = \"peers.txt\"\nssh = \"root@{{address}}\"\n{step}"
        ))
        .contains("step 1: senders `@role=tx` selects no host of the fleet"));
        assert!(err(&format!(
            "[fleet]\npeers = \"peers.txt\"\nssh = \"{{user}}@{{address}}\"\n{step}"
        ))
        .contains("`{user}` in `{user}@{address}` is neither"));
        assert!(err(&format!("[fleet]\npeers = \"peers.txt\"\n{step}"))
            .contains("exactly one of ssh, exec and netns"));
        assert!(err(&format!(
            "[fleet]\npeers = \"nope.txt\"\nssh = \"{{address}}\"\n{step}"
        ))
        .contains("nope.txt"));
        assert!(err(&format!(
            "[fleet]\npeers = \"peers.txt\"\nssh = \"{{address}}\"\nmax_hosts = 1\n{step}"
        ))
        .contains("more than 1 peers"));
        assert!(err(&format!("[hosts.a]\nlocal = true\n{step}")).contains("needs a [fleet] table"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
