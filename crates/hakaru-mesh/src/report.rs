//! `hakaru mesh report`: every agent's view as pairs, and the suspects: hosts whose pairs are
//! bad while the pairs without them are not (Pingmesh's reading of a mesh), with the evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use crate::view::AgentView;

pub use hakaru_model::mesh::{Host, MeshReport, Pair, Suspect};

/// What makes a pair bad.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Loss over this fraction.
    pub loss: f64,
    /// RTT p99 over this, µs (none: RTT alone makes no pair bad).
    pub rtt_p99_us: Option<f64>,
}

/// One host as the report asks it: its name and labels in the list, and its agent's view or
/// why there is none.
pub struct Asked {
    /// The name.
    pub host: String,
    /// The address its agent was asked at (its mesh port), which the other agents probe.
    pub addr: Option<std::net::SocketAddr>,
    /// The labels.
    pub labels: Vec<(String, String)>,
    /// The view.
    pub view: Result<AgentView, String>,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// Builds the report from every host's view (or the error).
pub fn build(asked: Vec<Asked>, t: Thresholds) -> MeshReport {
    let mut hosts = Vec::new();
    let mut pairs = Vec::new();
    // The agents may name a peer otherwise than the report's list does (`IP:PORT` from DNS,
    // `IP` in a file): pairs are joined on the address probed.
    let by_addr: HashMap<String, String> = asked
        .iter()
        .filter_map(|a| Some((a.addr?.to_string(), a.host.clone())))
        .collect();
    for a in asked {
        let (answered, error) = match a.view {
            Ok(v) => {
                for p in v.peers {
                    let dst = by_addr.get(&p.addr).cloned().unwrap_or(p.dst);
                    // A host listed by an address it probes itself at: not a pair.
                    if dst == a.host {
                        continue;
                    }
                    let probes = p.window_replied + p.window_lost;
                    let bad = probes > 0
                        && (p.loss.is_some_and(|l| l > t.loss)
                            || matches!((p.rtt_p99_us, t.rtt_p99_us), (Some(a), Some(b)) if a > b));
                    pairs.push(Pair {
                        src: a.host.clone(),
                        dst,
                        rtt_p50_us: p.rtt_p50_us,
                        rtt_p99_us: p.rtt_p99_us,
                        loss: p.loss,
                        probes,
                        sent: p.sent,
                        bad,
                        connect_p50_us: p.connect.as_ref().and_then(|c| c.p50_us),
                        connect_p99_us: p.connect.as_ref().and_then(|c| c.p99_us),
                        connect_loss: p.connect.as_ref().and_then(|c| c.loss),
                        // A path whose last slice failed has no rate now.
                        slice_bps: p
                            .slice
                            .as_ref()
                            .filter(|s| s.error.is_none())
                            .and_then(|s| s.bps),
                    });
                }
                (true, None)
            }
            Err(e) => (false, Some(e)),
        };
        hosts.push(Host {
            host: a.host,
            answered,
            error,
            labels: a.labels.into_iter().collect(),
        });
    }
    let mut suspects = group_suspects(&hosts, &pairs);
    // A suspect group explains its hosts' bad pairs: they are listed one by one only when
    // their agent did not answer.
    let grouped: BTreeSet<String> = suspects.iter().flat_map(|s| s.members.clone()).collect();
    suspects.extend(host_suspects(&hosts, &pairs).into_iter().filter(|s| {
        !grouped.contains(&s.host) || s.reason.starts_with("its agent did not answer")
    }));
    MeshReport {
        test: "mesh".into(),
        schema_version: hakaru_model::SCHEMA_VERSION,
        at_unix: hakaru_sys::now_unix(),
        loss_threshold: t.loss,
        rtt_p99_threshold_us: t.rtt_p99_us,
        hosts,
        pairs,
        suspects,
    }
}

fn frac(b: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        b as f64 / n as f64
    }
}

fn pct_or(x: Option<f64>) -> String {
    x.map(pct).unwrap_or_else(|| "unmeasured".into())
}

/// Whether `bad` of `with` pairs stand out against `bad_out` of `without`: at least two and
/// at least half of them bad, while under half of the others are.
fn stands_out(bad: usize, with: usize, bad_out: usize, without: usize) -> bool {
    bad >= 2 && frac(bad, with) >= 0.5 && frac(bad_out, without) < 0.5
}

/// Pairs counted for a host or a group: how many, how many bad, and the loss summed (with
/// its count) of those into it and out of it.
#[derive(Debug, Clone, Default)]
struct Tally {
    n: usize,
    bad: usize,
    into: (f64, usize),
    out_of: (f64, usize),
}

impl Tally {
    fn add(&mut self, p: &Pair, into: bool) {
        self.n += 1;
        self.bad += usize::from(p.bad);
        if let Some(l) = p.loss {
            let s = if into {
                &mut self.into
            } else {
                &mut self.out_of
            };
            s.0 += l;
            s.1 += 1;
        }
    }

    fn mean(s: (f64, usize)) -> Option<f64> {
        (s.1 > 0).then(|| s.0 / s.1 as f64)
    }
}

/// Hosts whose agent did not answer, then hosts whose pairs stand out; worst first. One pass
/// over the pairs (a fleet of 1,000 hosts has a million).
fn host_suspects(hosts: &[Host], pairs: &[Pair]) -> Vec<Suspect> {
    let index: HashMap<&str, usize> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.host.as_str(), i))
        .collect();
    let mut t = vec![Tally::default(); hosts.len()];
    let (mut total, mut all_bad) = (0, 0);
    for p in pairs.iter().filter(|p| p.probes > 0) {
        total += 1;
        all_bad += usize::from(p.bad);
        for (name, into) in [(&p.src, false), (&p.dst, true)] {
            if let Some(&i) = index.get(name.as_str()) {
                t[i].add(p, into);
            }
        }
    }
    let mut out = Vec::new();
    let mut ranked = Vec::new();
    for (h, t) in hosts.iter().zip(&t) {
        let (without, bad_without) = (total - t.n, all_bad.saturating_sub(t.bad));
        let evidence = format!(
            "{} of {} pairs with it are bad (mean loss to it {}, from it {}); pairs without it: {bad_without} of {without} bad",
            t.bad,
            t.n,
            pct_or(Tally::mean(t.into)),
            pct_or(Tally::mean(t.out_of)),
        );
        let suspect = |reason| Suspect {
            host: h.host.clone(),
            members: Vec::new(),
            reason,
        };
        if let Some(e) = &h.error {
            out.push(suspect(format!(
                "its agent did not answer ({e}); {evidence}"
            )));
        } else if stands_out(t.bad, t.n, bad_without, without) {
            ranked.push((frac(t.bad, t.n), suspect(evidence)));
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.extend(ranked.into_iter().map(|r| r.1));
    out
}

/// Label groups (every `key=value` with two hosts or more, and two or more pairs without
/// it) whose pairs with the other hosts stand out against the pairs without the group: a
/// rack's uplink, a zone's link, where no single host does. One pass over the pairs per
/// label name.
fn group_suspects(hosts: &[Host], pairs: &[Pair]) -> Vec<Suspect> {
    let keys: BTreeSet<&str> = hosts
        .iter()
        .flat_map(|h| h.labels.keys().map(String::as_str))
        .collect();
    let measured: Vec<&Pair> = pairs.iter().filter(|p| p.probes > 0).collect();
    let all_bad = measured.iter().filter(|p| p.bad).count();
    let mut ranked = Vec::new();
    for k in keys {
        let value: HashMap<&str, &str> = hosts
            .iter()
            .filter_map(|h| Some((h.host.as_str(), h.labels.get(k)?.as_str())))
            .collect();
        let mut members: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for h in hosts {
            if let Some(v) = value.get(h.host.as_str()) {
                members.entry(v).or_default().push(&h.host);
            }
        }
        // Per value: the pairs crossing its edge, and those inside it.
        let mut crossing: HashMap<&str, Tally> = HashMap::new();
        let mut inside: HashMap<&str, Tally> = HashMap::new();
        for p in &measured {
            let (vs, vd) = (value.get(p.src.as_str()), value.get(p.dst.as_str()));
            match (vs, vd) {
                (Some(a), Some(b)) if a == b => inside.entry(a).or_default().add(p, true),
                _ => {
                    if let Some(a) = vs {
                        crossing.entry(a).or_default().add(p, false);
                    }
                    if let Some(b) = vd {
                        crossing.entry(b).or_default().add(p, true);
                    }
                }
            }
        }
        for (v, hosts_in) in members {
            if hosts_in.len() < 2 {
                continue;
            }
            let c = crossing.get(v).cloned().unwrap_or_default();
            let i = inside.get(v).cloned().unwrap_or_default();
            let outside = measured.len().saturating_sub(c.n + i.n);
            let bad_outside = all_bad.saturating_sub(c.bad + i.bad);
            // Against nothing (a group of all hosts but one) a group cannot stand out: the one
            // host outside it would be the suspect.
            if outside < 2 || !stands_out(c.bad, c.n, bad_outside, outside) {
                continue;
            }
            let reason = format!(
                "group {k}={v} ({} hosts): {} of {} pairs between it and the other hosts are bad (mean loss into it {}, out of it {}); pairs inside it: {} of {} bad; pairs without it: {bad_outside} of {outside} bad",
                hosts_in.len(),
                c.bad,
                c.n,
                pct_or(Tally::mean(c.into)),
                pct_or(Tally::mean(c.out_of)),
                i.bad,
                i.n,
            );
            ranked.push((
                frac(c.bad, c.n),
                Suspect {
                    host: format!("{k}={v}"),
                    members: hosts_in.iter().map(|m| m.to_string()).collect(),
                    reason,
                },
            ));
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked.into_iter().map(|r| r.1).collect()
}

fn cell(p: Option<&Pair>) -> String {
    match p {
        None => "-".into(),
        Some(p) if p.probes == 0 => "?".into(),
        Some(p) => {
            let l = p.loss.unwrap_or(0.0);
            let rtt = p
                .rtt_p50_us
                .map(|u| format!("{u:.0}"))
                .unwrap_or_else(|| "-".into());
            if l > 0.0 {
                format!("{rtt}/{:.1}%", l * 100.0)
            } else {
                rtt
            }
        }
    }
}

/// The report as text: the matrix (RTT p50 µs, and loss where any) for up to 16 hosts, else
/// the 20 worst pairs; then the suspects.
pub fn text(r: &MeshReport) -> String {
    let mut s = String::new();
    let answered = r.hosts.iter().filter(|h| h.answered).count();
    let _ = writeln!(
        s,
        "mesh: {} hosts, {answered} agents answered, {} pairs; a pair is bad over {} loss{}",
        r.hosts.len(),
        r.pairs.len(),
        pct(r.loss_threshold),
        r.rtt_p99_threshold_us
            .map(|u| format!(" or {u:.0} us RTT p99"))
            .unwrap_or_default()
    );
    if r.hosts.len() <= 16 {
        let _ = writeln!(s, "\nRTT p50 us (/loss) from row to column:");
        let w = r
            .hosts
            .iter()
            .map(|h| h.host.len())
            .max()
            .unwrap_or(4)
            .max(12);
        let _ = write!(s, "{:w$}", "");
        for h in &r.hosts {
            let _ = write!(s, " {:>14}", trunc(&h.host, 14));
        }
        s.push('\n');
        for src in &r.hosts {
            let _ = write!(s, "{:w$}", src.host);
            for dst in &r.hosts {
                let c = if src.host == dst.host {
                    "".to_string()
                } else if !src.answered {
                    "x".to_string()
                } else {
                    cell(
                        r.pairs
                            .iter()
                            .find(|p| p.src == src.host && p.dst == dst.host),
                    )
                };
                let _ = write!(s, " {c:>14}");
            }
            s.push('\n');
        }
    } else {
        let mut worst: Vec<&Pair> = r.pairs.iter().filter(|p| p.probes > 0).collect();
        worst.sort_by(|a, b| {
            (b.loss.unwrap_or(0.0), b.rtt_p99_us.unwrap_or(0.0))
                .partial_cmp(&(a.loss.unwrap_or(0.0), a.rtt_p99_us.unwrap_or(0.0)))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let _ = writeln!(s, "\nworst pairs:");
        for p in worst.iter().take(20) {
            let _ = writeln!(
                s,
                "  {} -> {}: loss {}, RTT p50 {} us, p99 {} us",
                p.src,
                p.dst,
                p.loss.map(pct).unwrap_or_else(|| "-".into()),
                p.rtt_p50_us
                    .map(|u| format!("{u:.0}"))
                    .unwrap_or_else(|| "-".into()),
                p.rtt_p99_us
                    .map(|u| format!("{u:.0}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
    }
    if r.suspects.is_empty() {
        let _ = writeln!(s, "\nsuspects: none");
    } else {
        let _ = writeln!(s, "\nsuspects:");
        for x in &r.suspects {
            let _ = writeln!(s, "  {}: {}", x.host, x.reason);
        }
    }
    s
}

fn trunc(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::PeerView;

    fn pv(dst: &str, loss: f64) -> PeerView {
        let lost = (loss * 100.0).round() as u64;
        PeerView {
            dst: dst.into(),
            addr: String::new(),
            labels: Default::default(),
            sent: 100,
            lost,
            late: 0,
            window_replied: 100 - lost,
            window_lost: lost,
            loss: Some(loss),
            rtt_p50_us: Some(50.0),
            rtt_p99_us: Some(90.0),
            connect: None,
            slice: None,
        }
    }

    fn view(peers: Vec<PeerView>) -> AgentView {
        AgentView {
            agent: "0".into(),
            cycle_s: 1.0,
            window_s: 60.0,
            uptime_s: 100.0,
            peers_error: None,
            peers,
        }
    }

    const T: Thresholds = Thresholds {
        loss: 0.02,
        rtt_p99_us: None,
    };

    /// Five hosts; everything towards `bad` loses `loss`.
    fn mesh(bad: &str, loss: f64) -> Vec<Asked> {
        let hosts = ["a", "b", "c", "d", "e"];
        hosts
            .iter()
            .map(|&h| {
                let peers = hosts
                    .iter()
                    .filter(|&&d| d != h)
                    .map(|&d| pv(d, if d == bad { loss } else { 0.0 }))
                    .collect();
                Asked {
                    addr: None,
                    host: h.to_string(),
                    labels: Vec::new(),
                    view: Ok(view(peers)),
                }
            })
            .collect()
    }

    /// A thousand hosts (a million pairs), one losing 10 % of what it receives: the report names
    /// it and no other, in one pass. In a release build (`cargo test --release -p hakaru-mesh
    /// thousand -- --nocapture`) it prints the figures docs/fleet.md extrapolates from: a
    /// view's bytes, the parse and the analysis time.
    #[test]
    fn a_thousand_hosts_are_read_in_one_pass() {
        let n = 1000;
        let name = |h: usize| format!("10.{}.{}.{}", h / 65536, (h / 256) % 256, h % 256);
        let t0 = std::time::Instant::now();
        let mut bytes = 0;
        let mut parse = std::time::Duration::ZERO;
        let asked: Vec<Asked> = (0..n)
            .map(|h| {
                let peers = (0..n)
                    .filter(|&d| d != h)
                    .map(|d| pv(&name(d), if d == 500 { 0.1 } else { 0.0 }))
                    .collect();
                // Through JSON, as `mesh report` reads it.
                let text = serde_json::to_string(&view(peers)).unwrap();
                bytes += text.len();
                let t = std::time::Instant::now();
                let v: AgentView = serde_json::from_str(&text).unwrap();
                parse += t.elapsed();
                Asked {
                    addr: None,
                    host: name(h),
                    labels: vec![("rack".into(), format!("r{}", h / 40))],
                    view: Ok(v),
                }
            })
            .collect();
        let made = t0.elapsed();
        let t = std::time::Instant::now();
        let r = build(asked, T);
        let analysis = t.elapsed();
        eprintln!(
            "mesh report at {n} hosts: {} pairs, views {} bytes each ({} per peer), parse {parse:?} in all, analysis {analysis:?} (made in {made:?})",
            r.pairs.len(),
            bytes / n,
            bytes / n / (n - 1),
        );
        assert_eq!(r.pairs.len(), n * (n - 1));
        let names: Vec<&str> = r.suspects.iter().map(|s| s.host.as_str()).collect();
        assert_eq!(names, [name(500).as_str()], "{:?}", r.suspects);
    }

    #[test]
    fn a_rack_whose_uplink_loses_is_named_where_no_host_stands_out() {
        // Three racks of three; every pair into or out of rack r1 loses 10 %.
        let rack = |h: usize| format!("r{}", h / 3);
        let name = |h: usize| format!("h{h}");
        let asked: Vec<Asked> = (0..9)
            .map(|h| {
                let peers = (0..9)
                    .filter(|&d| d != h)
                    .map(|d| {
                        pv(
                            &name(d),
                            if (rack(h) == "r1") != (rack(d) == "r1") {
                                0.1
                            } else {
                                0.0
                            },
                        )
                    })
                    .collect();
                Asked {
                    addr: None,
                    host: name(h),
                    labels: vec![("rack".into(), rack(h))],
                    view: Ok(view(peers)),
                }
            })
            .collect();
        let r = build(asked, T);
        assert_eq!(r.suspects.len(), 1, "{:?}", r.suspects);
        let s = &r.suspects[0];
        assert_eq!(s.host, "rack=r1");
        assert_eq!(s.members, ["h3", "h4", "h5"]);
        assert!(s.reason.contains("(3 hosts): 36 of 36 pairs between it and the other hosts are bad (mean loss into it 10.0 %, out of it 10.0 %); pairs inside it: 0 of 6 bad; pairs without it: 0 of 30 bad"), "{}", s.reason);
    }

    #[test]
    fn a_host_that_loses_inbound_is_the_one_suspect() {
        let r = build(mesh("c", 0.1), T);
        assert_eq!(r.pairs.len(), 20);
        assert_eq!(r.pairs.iter().filter(|p| p.bad).count(), 4);
        assert_eq!(r.suspects.len(), 1, "{:?}", r.suspects);
        assert_eq!(r.suspects[0].host, "c");
        assert!(r.suspects[0].reason.contains("4 of 8 pairs with it are bad (mean loss to it 10.0 %, from it 0.0 %); pairs without it: 0 of 12 bad"), "{}", r.suspects[0].reason);
        let t = text(&r);
        assert!(t.contains("50/10.0%"), "{t}");
        assert!(t.contains("suspects:\n  c: "), "{t}");
    }

    #[test]
    fn a_healthy_mesh_has_no_suspect_and_loss_under_the_threshold_is_not_bad() {
        let r = build(mesh("c", 0.01), T);
        assert!(r.suspects.is_empty());
        assert!(text(&r).contains("suspects: none"));
    }

    #[test]
    fn an_agent_that_does_not_answer_is_named_with_its_error() {
        let mut m = mesh("e", 1.0);
        m[4].view = Err("connection refused".into());
        let r = build(m, T);
        assert_eq!(r.suspects[0].host, "e");
        assert!(
            r.suspects[0]
                .reason
                .starts_with("its agent did not answer (connection refused); 4 of 4 pairs"),
            "{}",
            r.suspects[0].reason
        );
        assert!(!r.hosts[4].answered);
    }

    #[test]
    fn views_are_joined_on_the_address_whatever_the_agents_call_their_peers() {
        // The agents name their peers `IP:PORT` (DNS), the report's list `IP`; host b is
        // also listed by its own agent (a self pair), which is no pair.
        let addr = |h: &str| -> std::net::SocketAddr {
            format!("10.0.0.{}:5209", h.as_bytes()[0] - b'a' + 1)
                .parse()
                .unwrap()
        };
        let hosts = ["a", "b", "c"];
        let asked = hosts
            .iter()
            .map(|&h| {
                let peers = hosts
                    .iter()
                    .filter(|&&d| d != h || h == "b")
                    .map(|&d| PeerView {
                        addr: addr(d).to_string(),
                        dst: addr(d).to_string(),
                        ..pv(d, if d == "c" { 0.5 } else { 0.0 })
                    })
                    .collect();
                Asked {
                    host: h.to_string(),
                    addr: Some(addr(h)),
                    labels: Vec::new(),
                    view: Ok(view(peers)),
                }
            })
            .collect();
        let r = build(asked, T);
        assert_eq!(r.pairs.len(), 6, "{:?}", r.pairs);
        assert!(r
            .pairs
            .iter()
            .all(|p| hosts.contains(&p.src.as_str()) && hosts.contains(&p.dst.as_str())));
        assert_eq!(r.suspects.len(), 1);
        assert_eq!(r.suspects[0].host, "c");
    }

    #[test]
    fn rtt_makes_a_pair_bad_only_with_a_threshold() {
        let t = Thresholds {
            loss: 0.02,
            rtt_p99_us: Some(80.0),
        };
        let r = build(mesh("c", 0.0), t);
        assert!(r.pairs.iter().all(|p| p.bad));
        // Everyone is bad: nobody stands out.
        assert!(r.suspects.is_empty());
    }
}
