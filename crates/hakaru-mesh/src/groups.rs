//! The metric series of a long peer list: one per group of peers (a label's value), which
//! keep their meaning and never go down as peers come and go.

use std::collections::{BTreeMap, BTreeSet};

use crate::prober::PeerFigures;
use crate::stats::Totals;

/// Most groups remembered (departed peers' totals, groups with a series); past it all go to
/// `other`.
const MAX_GROUPS: usize = 4096;

/// What the group series remember between scrapes.
#[derive(Debug, Default)]
pub struct Groups {
    /// Totals of peers no longer listed, by their group.
    departed: BTreeMap<String, Totals>,
    /// Groups that have a series of their own, once given one.
    named: BTreeSet<String>,
}

impl Groups {
    /// A peer left the list: its totals stay in its group's sum.
    pub fn depart(&mut self, peer: &crate::Peer, totals: &Totals, group_by: &str) {
        let g = peer.label(group_by).unwrap_or("").to_string();
        let key = if self.departed.contains_key(&g) || self.departed.len() < MAX_GROUPS {
            g
        } else {
            "other".to_string()
        };
        self.departed.entry(key).or_default().add(totals);
    }

    /// A peer's own series labels: `peer` and the labels of its line.
    pub fn peer_labels(peer: &crate::Peer) -> Vec<(String, String)> {
        let mut l = vec![("peer".to_string(), peer.name.clone())];
        l.extend(peer.labels.iter().cloned());
        l
    }

    /// The label sets and their totals: each peer (`peer` and its labels) when there are at
    /// most `per_peer` of them, else one set per value of `group_by` (`group`): the first
    /// `per_peer` values seen keep a series of their own for good, later ones are summed as
    /// `other`, and departed peers stay in their group's sum, so no counter goes down.
    pub fn series(
        &mut self,
        figures: &[PeerFigures],
        per_peer: usize,
        group_by: &str,
    ) -> Vec<(Vec<(String, String)>, Totals)> {
        if figures.len() <= per_peer {
            return figures
                .iter()
                .map(|f| (Self::peer_labels(&f.peer), f.totals.clone()))
                .collect();
        }
        let mut sums: BTreeMap<String, Totals> = BTreeMap::new();
        let pairs = figures
            .iter()
            .map(|f| (f.peer.label(group_by).unwrap_or("").to_string(), &f.totals))
            .chain(self.departed.iter().map(|(g, t)| (g.clone(), t)));
        for (g, t) in pairs {
            if !self.named.contains(&g) && self.named.len() < per_peer.clamp(1, MAX_GROUPS) {
                self.named.insert(g.clone());
            }
            let key = if self.named.contains(&g) {
                g
            } else {
                "other".to_string()
            };
            sums.entry(key).or_default().add(t);
        }
        sums.into_iter()
            .map(|(g, t)| (vec![("group".to_string(), g)], t))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Peer;
    use crate::stats::WindowFigures;

    fn fig(i: u8, zone: &str, sent: u64) -> PeerFigures {
        PeerFigures {
            peer: Peer {
                name: format!("h{i}"),
                addr: std::net::SocketAddr::from(([10, 0, 0, i], 1)),
                labels: vec![("zone".into(), zone.into())],
            },
            totals: Totals {
                sent,
                ..Default::default()
            },
            window: WindowFigures::default(),
        }
    }

    #[test]
    fn series_per_peer_then_per_group() {
        let f = vec![fig(1, "a", 1), fig(2, "a", 2), fig(3, "b", 4)];
        let s = Groups::default().series(&f, 3, "zone");
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0].0,
            vec![("peer".into(), "h1".into()), ("zone".into(), "a".into())]
        );
        let s = Groups::default().series(&f, 2, "zone");
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].0[0].1.as_str(), s[0].1.sent), ("a", 3));
        assert_eq!((s[1].0[0].1.as_str(), s[1].1.sent), ("b", 4));
        // Past the limit in groups too: the rest is `other`.
        let mut g = Groups::default();
        let s = g.series(&f, 1, "zone");
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].0[0].1.as_str(), s[1].1.sent), ("other", 4));
        // Group a's peers leave and b's stay: a's sum holds (no counter goes down), and b
        // does not take a's place (no series changes meaning).
        g.depart(&f[0].peer, &f[0].totals, "zone");
        g.depart(&f[1].peer, &f[1].totals, "zone");
        let s = g.series(&[fig(3, "b", 5), fig(4, "b", 1)], 1, "zone");
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].0[0].1.as_str(), s[0].1.sent), ("a", 3));
        assert_eq!((s[1].0[0].1.as_str(), s[1].1.sent), ("other", 6));
    }
}
