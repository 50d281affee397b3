//! `hakaru mesh report`: every agent's view as pairs, and the suspects: hosts whose pairs are
//! bad while the pairs without them are not (Pingmesh's reading of a mesh), with the evidence.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::view::AgentView;

/// What makes a pair bad.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Loss over this fraction.
    pub loss: f64,
    /// RTT p99 over this, µs (none: RTT alone makes no pair bad).
    pub rtt_p99_us: Option<f64>,
}

/// One direction between two hosts, as the source's agent saw it over its window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// The probing host.
    pub src: String,
    /// The probed host.
    pub dst: String,
    /// Median RTT, µs.
    pub rtt_p50_us: Option<f64>,
    /// 99th percentile RTT, µs.
    pub rtt_p99_us: Option<f64>,
    /// Lost over probed in the window.
    pub loss: Option<f64>,
    /// Probes that ended in the window (replied or lost).
    pub probes: u64,
    /// Over a threshold.
    pub bad: bool,
}

/// A host each agent was asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Its name in the list.
    pub host: String,
    /// Whether its agent answered.
    pub answered: bool,
    /// Why it did not.
    pub error: Option<String>,
}

/// A host the mesh points at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    /// Its name.
    pub host: String,
    /// Why, with the evidence.
    pub reason: String,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshReport {
    /// Always `mesh`.
    pub test: String,
    /// Loss above which a pair is bad.
    pub loss_threshold: f64,
    /// RTT p99 above which a pair is bad, µs.
    pub rtt_p99_threshold_us: Option<f64>,
    /// Every listed host.
    pub hosts: Vec<Host>,
    /// Every pair some agent reported.
    pub pairs: Vec<Pair>,
    /// The hosts to look at first, worst first.
    pub suspects: Vec<Suspect>,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// Builds the report from `views`: each host's name with its agent's view (or the error).
pub fn build(views: Vec<(String, Result<AgentView, String>)>, t: Thresholds) -> MeshReport {
    let mut hosts = Vec::new();
    let mut pairs = Vec::new();
    for (host, v) in views {
        match v {
            Ok(v) => {
                hosts.push(Host {
                    host: host.clone(),
                    answered: true,
                    error: None,
                });
                for p in v.peers {
                    let probes = p.window_replied + p.window_lost;
                    let bad = probes > 0
                        && (p.loss.is_some_and(|l| l > t.loss)
                            || matches!((p.rtt_p99_us, t.rtt_p99_us), (Some(a), Some(b)) if a > b));
                    pairs.push(Pair {
                        src: host.clone(),
                        dst: p.dst,
                        rtt_p50_us: p.rtt_p50_us,
                        rtt_p99_us: p.rtt_p99_us,
                        loss: p.loss,
                        probes,
                        bad,
                    });
                }
            }
            Err(e) => hosts.push(Host {
                host,
                answered: false,
                error: Some(e),
            }),
        }
    }
    let suspects = suspects(&hosts, &pairs);
    MeshReport {
        test: "mesh".into(),
        loss_threshold: t.loss,
        rtt_p99_threshold_us: t.rtt_p99_us,
        hosts,
        pairs,
        suspects,
    }
}

/// Hosts whose agent did not answer, then hosts with at least two bad pairs that are at
/// least half of their pairs, while under half of the pairs without them are bad; worst first.
fn suspects(hosts: &[Host], pairs: &[Pair]) -> Vec<Suspect> {
    let mut out = Vec::new();
    let measured: Vec<&Pair> = pairs.iter().filter(|p| p.probes > 0).collect();
    let mut ranked = Vec::new();
    for h in hosts {
        let with: Vec<&&Pair> = measured
            .iter()
            .filter(|p| p.src == h.host || p.dst == h.host)
            .collect();
        let without = measured.len() - with.len();
        let bad_with = with.iter().filter(|p| p.bad).count();
        let bad_without = measured.iter().filter(|p| p.bad).count() - bad_with;
        let loss_of = |sel: &dyn Fn(&Pair) -> bool| {
            let v: Vec<f64> = with
                .iter()
                .filter(|p| sel(p))
                .filter_map(|p| p.loss)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let to = loss_of(&|p| p.dst == h.host);
        let from = loss_of(&|p| p.src == h.host);
        let evidence = format!(
            "{bad_with} of {} pairs with it are bad (mean loss to it {}, from it {}); pairs without it: {bad_without} of {without} bad",
            with.len(),
            to.map(pct).unwrap_or_else(|| "unmeasured".into()),
            from.map(pct).unwrap_or_else(|| "unmeasured".into()),
        );
        if let Some(e) = &h.error {
            out.push(Suspect {
                host: h.host.clone(),
                reason: format!("its agent did not answer ({e}); {evidence}"),
            });
            continue;
        }
        let frac = |b: usize, n: usize| if n == 0 { 0.0 } else { b as f64 / n as f64 };
        if bad_with >= 2 && frac(bad_with, with.len()) >= 0.5 && frac(bad_without, without) < 0.5 {
            ranked.push((
                frac(bad_with, with.len()),
                Suspect {
                    host: h.host.clone(),
                    reason: evidence,
                },
            ));
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.extend(ranked.into_iter().map(|r| r.1));
    out
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
            labels: Default::default(),
            sent: 100,
            lost,
            late: 0,
            window_replied: 100 - lost,
            window_lost: lost,
            loss: Some(loss),
            rtt_p50_us: Some(50.0),
            rtt_p99_us: Some(90.0),
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
    fn mesh(bad: &str, loss: f64) -> Vec<(String, Result<AgentView, String>)> {
        let hosts = ["a", "b", "c", "d", "e"];
        hosts
            .iter()
            .map(|&h| {
                let peers = hosts
                    .iter()
                    .filter(|&&d| d != h)
                    .map(|&d| pv(d, if d == bad { loss } else { 0.0 }))
                    .collect();
                (h.to_string(), Ok(view(peers)))
            })
            .collect()
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
        m[4].1 = Err("connection refused".into());
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
