//! What the iperf3 renderers share: a [`RunResult`] seen the way an iperf3 client sees its test
//! (the client is "local"; each flow is reported by what the client did on it), with iperf3's
//! clock reset after the omitted warm-up and TCP figures in iperf3's units.

use hakaru_model::{Direction, FlowDir, FlowInterval, FlowResult, IntervalRecord, RunResult};

/// A TCP or UDP result prepared for the iperf3 renderers.
pub(crate) struct View<'a> {
    /// The result.
    pub r: &'a RunResult,
    /// True for UDP results (`udp`, `pps`).
    pub udp: bool,
    /// The direction iperf3 reports in `sum`/`sum_sent`: the client's sending direction, or
    /// server to client under -R.
    pub primary: FlowDir,
    /// True under --bidir (the other direction goes into the `*_bidir_reverse` sums).
    pub bidir: bool,
    /// Seconds of omitted warm-up intervals: iperf3 restarts its clock when the warm-up ends.
    omit_end: f64,
}

/// Per-flow TCP figures over the counted intervals, in iperf3's units.
pub(crate) struct RttStats {
    /// Largest congestion window seen, bytes.
    pub max_cwnd: u64,
    /// Largest smoothed RTT seen, microseconds.
    pub max_rtt: u64,
    /// Smallest smoothed RTT seen, microseconds.
    pub min_rtt: u64,
    /// Mean of the smoothed RTTs, microseconds.
    pub mean_rtt: u64,
}

impl<'a> View<'a> {
    /// Prepares a result; `None` unless it is a TCP or UDP result.
    pub fn new(r: &'a RunResult) -> Option<View<'a>> {
        let udp = match r.test.as_str() {
            "tcp" => false,
            "udp" | "pps" => true,
            _ => return None,
        };
        let direction = r.spec.common().direction;
        let omit_end = r
            .intervals
            .iter()
            .filter(|i| i.omitted)
            .map(|i| i.end)
            .fold(0.0, f64::max);
        Some(View {
            r,
            udp,
            primary: if direction == Direction::Reverse {
                FlowDir::Down
            } else {
                FlowDir::Up
            },
            bidir: direction == Direction::Bidir,
            omit_end,
        })
    }

    /// The directions reported, primary first.
    pub fn dirs(&self) -> Vec<FlowDir> {
        if self.bidir {
            vec![FlowDir::Up, FlowDir::Down]
        } else {
            vec![self.primary]
        }
    }

    /// Interval start and end on iperf3's clock (restarted after the warm-up).
    pub fn times(&self, rec: &IntervalRecord) -> (f64, f64) {
        let off = if rec.omitted { 0.0 } else { self.omit_end };
        ((rec.start - off).max(0.0), (rec.end - off).max(0.0))
    }

    /// The flows of an interval, client-sent flows first, each group by id.
    pub fn interval_flows<'b>(&self, rec: &'b IntervalRecord) -> Vec<&'b FlowInterval> {
        let mut v: Vec<&FlowInterval> = rec.flows.iter().collect();
        v.sort_by_key(|f| (f.dir, f.id));
        v
    }

    /// The final flows, client-sent flows first, each group by id.
    pub fn flows(&self) -> Vec<&'a FlowResult> {
        let mut v: Vec<&FlowResult> = self.r.flows.iter().collect();
        v.sort_by_key(|f| (f.dir, f.id));
        v
    }

    /// The final flow with this id.
    pub fn flow(&self, id: u32) -> Option<&'a FlowResult> {
        self.r.flows.iter().find(|f| f.id == id)
    }

    /// Sending socket's MSS of a flow, to turn a window in segments into bytes.
    pub fn mss(&self, id: u32) -> Option<u64> {
        self.flow(id)
            .and_then(|f| f.tcp_info.as_ref())
            .map(|t| u64::from(t.snd_mss))
            .filter(|&m| m > 0)
    }

    /// Retransmits of a flow after the warm-up: the socket's lifetime count minus what the
    /// omitted intervals saw (iperf3 leaves the warm-up's retransmits out of its summary).
    pub fn retransmits(&self, f: &FlowResult) -> Option<u64> {
        let life = f.tcp_info.as_ref()?.retransmits?;
        let omitted: u64 = self
            .r
            .intervals
            .iter()
            .filter(|i| i.omitted)
            .flat_map(|i| i.flows.iter())
            .filter(|fi| fi.id == f.id)
            .filter_map(|fi| fi.tcp.and_then(|t| t.retransmits))
            .sum();
        Some(life.saturating_sub(omitted))
    }

    /// Window and RTT statistics of a flow over its counted intervals, falling back to the
    /// final TCP_INFO when there were no interval samples (-i 0).
    pub fn rtt_stats(&self, f: &FlowResult) -> Option<RttStats> {
        let mss = self.mss(f.id).unwrap_or(0);
        let ticks: Vec<_> = self
            .r
            .intervals
            .iter()
            .filter(|i| !i.omitted)
            .flat_map(|i| i.flows.iter())
            .filter(|fi| fi.id == f.id)
            .filter_map(|fi| fi.tcp)
            .collect();
        if ticks.is_empty() {
            let t = f.tcp_info.as_ref()?;
            let rtt = u64::from(t.rtt_us);
            return Some(RttStats {
                max_cwnd: u64::from(t.snd_cwnd) * mss,
                max_rtt: rtt,
                min_rtt: rtt,
                mean_rtt: rtt,
            });
        }
        let rtts = || ticks.iter().map(|t| u64::from(t.rtt_us));
        Some(RttStats {
            max_cwnd: ticks
                .iter()
                .map(|t| u64::from(t.snd_cwnd) * mss)
                .max()
                .unwrap_or(0),
            max_rtt: rtts().max().unwrap_or(0),
            min_rtt: rtts().min().unwrap_or(0),
            mean_rtt: rtts().sum::<u64>() / ticks.len() as u64,
        })
    }
}

/// True when the client is the sending end of flows in `dir`.
pub(crate) fn client_sends(dir: FlowDir) -> bool {
    dir == FlowDir::Up
}

/// Bytes the client moved on a flow during an interval (what an iperf3 client reports live).
pub(crate) fn local_bytes(f: &FlowInterval) -> u64 {
    if client_sends(f.dir) {
        f.sender_bytes
    } else {
        f.receiver_bytes
    }
    .unwrap_or(0)
}

/// bytes x 8 / seconds, 0 for an empty span.
pub(crate) fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// `lost` as a percentage of `total` (0 when nothing was expected).
pub(crate) fn percent(lost: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        lost as f64 * 100.0 / total as f64
    }
}
