//! `hakaru nic`: per-interface packet and byte rates every interval (replaces `sar -n DEV 1`).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_engine::sys::{self, NicSnapshot};
use hakaru_model::{rfc3339_utc, Dur, NicInterval, NicSummary, NicUsage};

use super::common::{self, Formats, UsageError};
use hakaru_report::export::{Document, Live, LiveItem};
use hakaru_report::View;

/// Shortest interval accepted. sar's is 1 s; below 0.1 s the time spent reading the counters
/// and the sleep's timer slack become a visible share of every interval.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How often a sleep wakes to check for Ctrl-C, so a long interval still stops promptly.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Options of `hakaru nic`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Interfaces to report, in this order (default: every interface, in the order the OS
    /// lists them in /proc/net/dev).
    #[arg(value_name = "IFACE")]
    ifaces: Vec<String>,
    /// Seconds between reports (1, 0.5, 200ms); at least 0.1.
    #[arg(short, long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
    interval: Dur,
    /// Stop after this many intervals and print the averages (default: run until Ctrl-C).
    #[arg(short, long, value_name = "COUNT", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// --json: one document at the end (every interval and the averages); --json-stream: an
    /// "interval" line per interval as it ends, then an "end" line (docs/json.md).
    #[command(flatten)]
    formats: Formats,
}

fn parse_interval(s: &str) -> Result<Dur, String> {
    let d: Dur = s
        .parse()
        .map_err(|e: hakaru_model::UnitError| e.to_string())?;
    if d.0 < MIN_INTERVAL {
        return Err(format!("{d} is shorter than the minimum of 0.1 s"));
    }
    Ok(d)
}

/// Which interfaces a run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Watch {
    /// Every interface the OS lists at each sample, in its order (new ones join as they appear).
    All,
    /// These, in this order.
    Named(Vec<String>),
}

impl Watch {
    /// The selection for the names given on the command line; a name that is not among the
    /// `present` interfaces is a usage error that lists the ones there are.
    fn new(named: &[String], present: &[NicSnapshot]) -> Result<Watch, UsageError> {
        if named.is_empty() {
            return Ok(Watch::All);
        }
        let mut names: Vec<String> = Vec::new();
        for n in named {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        let unknown: Vec<String> = names
            .iter()
            .filter(|n| !present.iter().any(|p| &p.interface == *n))
            .map(|n| format!("'{n}'"))
            .collect();
        if !unknown.is_empty() {
            let available: Vec<&str> = present.iter().map(|p| p.interface.as_str()).collect();
            return Err(UsageError(format!(
                "no interface{} named {}; this machine has: {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown.join(", "),
                available.join(", ")
            )));
        }
        Ok(Watch::Named(names))
    }

    /// The names given on the command line (empty for all).
    fn named(&self) -> &[String] {
        match self {
            Watch::All => &[],
            Watch::Named(n) => n,
        }
    }

    /// Names to report for a sample, in report order.
    fn names<'a>(&'a self, now: &'a [NicSnapshot]) -> Vec<&'a str> {
        match self {
            Watch::All => now.iter().map(|n| n.interface.as_str()).collect(),
            Watch::Named(n) => n.iter().map(String::as_str).collect(),
        }
    }
}

/// Turns successive counter snapshots into interval records and keeps each interface's
/// running total for the averages. Pure: times are passed in, nothing is read or printed.
struct Monitor {
    watch: Watch,
    /// The previous sample and when it was taken, seconds after the first.
    prev: Vec<NicSnapshot>,
    prev_t: f64,
    intervals: u64,
    /// Each interface's deltas over every interval so far, in order of first report.
    totals: Vec<NicUsage>,
}

impl Monitor {
    /// Starts from the first sample (time 0).
    fn new(watch: Watch, first: Vec<NicSnapshot>) -> Monitor {
        Monitor {
            watch,
            prev: first,
            prev_t: 0.0,
            intervals: 0,
            totals: Vec::new(),
        }
    }

    /// The interval from the previous sample to `now`, taken `t` seconds after the first
    /// sample at wall-clock `unix`. Rates are over the measured `t - previous t`. An interface
    /// missing from either sample (it came or went) is left out of this interval.
    fn step(&mut self, now: Vec<NicSnapshot>, t: f64, unix: f64) -> NicInterval {
        let secs = t - self.prev_t;
        let find = |list: &[NicSnapshot], name: &str| list.iter().position(|n| n.interface == name);
        let mut interfaces = Vec::new();
        for name in self.watch.names(&now) {
            let (Some(b), Some(a)) = (find(&self.prev, name), find(&now, name)) else {
                continue;
            };
            let u = sys::nic_usage(&self.prev[b], &now[a], secs);
            match self.totals.iter_mut().find(|t| t.interface == u.interface) {
                Some(total) => {
                    if let Some(sum) = sys::nic_average(&[total.clone(), u.clone()]) {
                        *total = sum;
                    }
                }
                None => self.totals.push(u.clone()),
            }
            interfaces.push(u);
        }
        let rec = NicInterval {
            index: self.intervals,
            start: self.prev_t,
            end: t,
            time: rfc3339_utc(unix),
            time_unix: unix,
            interfaces,
        };
        self.prev = now;
        self.prev_t = t;
        self.intervals += 1;
        rec
    }

    /// Every interface over the intervals so far.
    fn summary(&self, interrupted: bool) -> NicSummary {
        NicSummary {
            intervals: self.intervals,
            seconds: self.prev_t,
            interrupted,
            interfaces: self.totals.clone(),
        }
    }
}

/// The first deadline after `prev` that is still ahead of `now`: deadlines sit on a fixed
/// grid from the start, so intervals do not drift by the time each sample takes, and a stall
/// longer than an interval (a stopped process) skips the missed ones instead of bunching up.
fn next_deadline(prev: Instant, step: Duration, now: Instant) -> Instant {
    let mut d = prev + step;
    if d <= now {
        let behind = (now - d).as_nanos() / step.as_nanos().max(1);
        let skip = u32::try_from(behind + 1).unwrap_or(u32::MAX);
        d = step
            .checked_mul(skip)
            .and_then(|s| d.checked_add(s))
            .unwrap_or(now + step);
    }
    d
}

/// Sleeps until `deadline`; false if `stop` was set first.
fn sleep_until(deadline: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(STOP_POLL));
    }
}

/// Writes to stdout at once; an error (a closed pipe) ends the run.
fn emit(s: &str) -> std::io::Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes())?;
    o.flush()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Samples until COUNT intervals or a stop; true when stopped by a signal. With `--json` the
/// intervals are kept in `kept` for the document at the end.
fn sample(
    a: &Args,
    mon: &mut Monitor,
    t0: Instant,
    stop: &AtomicBool,
    kept: &mut Vec<NicInterval>,
    live: &mut dyn Live,
) -> anyhow::Result<bool> {
    let mut deadline = t0;
    loop {
        if a.count.is_some_and(|c| mon.intervals >= c) {
            return Ok(false);
        }
        deadline = next_deadline(deadline, a.interval.0, Instant::now());
        if !sleep_until(deadline, stop) {
            return Ok(true);
        }
        // Times are taken just before each read, the first one's included, so every interval
        // is measured between like points.
        let t = t0.elapsed().as_secs_f64();
        let unix = unix_now();
        let now = sys::nic_snapshot_all();
        if now.is_empty() {
            anyhow::bail!("the interface counters could no longer be read");
        }
        let rec = mon.step(now, t, unix);
        if let Some(s) = live.item(&LiveItem::NicInterval(&rec)) {
            emit(&s)?;
        }
        if a.formats.format().keeps_intervals() {
            kept.push(rec);
        }
    }
}

/// Reports every interval until COUNT or Ctrl-C/SIGTERM, then the averages.
pub fn run(a: Args) -> anyhow::Result<()> {
    let stop = common::stop_flag()?;
    let t0 = Instant::now();
    let first = sys::nic_snapshot_all();
    if first.is_empty() {
        anyhow::bail!(
            "interface counters are not available on {} (hakaru reads them from /proc/net/dev on Linux)",
            std::env::consts::OS
        );
    }
    let watch = Watch::new(&a.ifaces, &first)?;
    let format = a.formats.format();
    let mut live = format.live(View::default());
    if let Some(s) = live.item(&LiveItem::NicStart {
        interfaces: watch.named(),
        interval: a.interval,
        count: a.count,
    }) {
        emit(&s)?;
    }
    let mut mon = Monitor::new(watch, first);
    let mut kept = Vec::new();
    let interrupted = match sample(&a, &mut mon, t0, &stop, &mut kept, live.as_mut()) {
        Ok(i) => i,
        Err(e) => {
            let closed_pipe = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if !closed_pipe {
                if let Some(s) = live.item(&LiveItem::Error(&format!("{e:#}"))) {
                    let _ = emit(&s);
                }
            }
            return Err(e);
        }
    };
    let summary = mon.summary(interrupted);
    let doc = Document::Nic {
        intervals: &kept,
        summary: &summary,
    };
    emit(&format.write(&doc, &View::default())?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(name: &str, rx_packets: u64, rx_bytes: u64) -> NicSnapshot {
        NicSnapshot {
            interface: name.into(),
            rx_packets,
            rx_bytes,
            tx_packets: rx_packets,
            tx_bytes: rx_bytes,
            ..NicSnapshot::default()
        }
    }

    #[test]
    fn interval_must_be_at_least_a_tenth_of_a_second() {
        assert_eq!(parse_interval("1"), Ok(Dur::from_secs(1)));
        assert_eq!(parse_interval("0.1"), Ok(Dur(MIN_INTERVAL)));
        assert_eq!(parse_interval("250ms"), Ok(Dur(Duration::from_millis(250))));
        assert!(parse_interval("0.05").unwrap_err().contains("0.1 s"));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("soon").is_err());
    }

    #[test]
    fn unknown_interfaces_are_named_with_the_available_ones() {
        let present = [snap("lo", 0, 0), snap("eth0", 0, 0)];
        assert_eq!(Watch::new(&[], &present).unwrap(), Watch::All);
        let w = Watch::new(&["eth0".into(), "lo".into(), "eth0".into()], &present).unwrap();
        assert_eq!(w, Watch::Named(vec!["eth0".into(), "lo".into()]));
        let e = Watch::new(&["lo".into(), "nosuchif0".into()], &present).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no interface named 'nosuchif0'; this machine has: lo, eth0"
        );
        let e = Watch::new(&["a".into(), "b".into()], &present).unwrap_err();
        assert!(e.to_string().starts_with("no interfaces named 'a', 'b';"));
    }

    #[test]
    fn monitor_reports_intervals_and_averages_over_measured_time() {
        let mut m = Monitor::new(Watch::All, vec![snap("lo", 0, 0), snap("eth0", 0, 0)]);
        // 0.5 s measured (not the nominal interval): 100 packets is 200/s.
        let r = m.step(vec![snap("lo", 100, 1024), snap("eth0", 0, 0)], 0.5, 1000.5);
        assert_eq!((r.index, r.start, r.end), (0, 0.0, 0.5));
        assert_eq!(r.time, "1970-01-01T00:16:40.500Z");
        assert_eq!(r.interfaces.len(), 2);
        assert_eq!(r.interfaces[0].interface, "lo");
        assert_eq!(r.interfaces[0].rx_pps, 200.0);
        assert_eq!(r.interfaces[0].rx_kib_per_s, 2.0);
        // eth0 went away, veth0 appeared: neither has two samples, so neither is reported.
        let r = m.step(
            vec![snap("lo", 400, 1024), snap("veth0", 5, 5)],
            2.0,
            1002.0,
        );
        assert_eq!((r.index, r.start, r.end), (1, 0.5, 2.0));
        let names: Vec<&str> = r.interfaces.iter().map(|u| u.interface.as_str()).collect();
        assert_eq!(names, ["lo"]);
        assert_eq!(r.interfaces[0].rx_pps, 200.0);
        let r = m.step(
            vec![snap("lo", 400, 1024), snap("veth0", 15, 5)],
            3.0,
            1003.0,
        );
        assert_eq!(r.interfaces.len(), 2);

        let s = m.summary(false);
        assert_eq!((s.intervals, s.seconds, s.interrupted), (3, 3.0, false));
        let names: Vec<&str> = s.interfaces.iter().map(|u| u.interface.as_str()).collect();
        assert_eq!(names, ["lo", "eth0", "veth0"]);
        // lo: 400 packets over 3 s; eth0: nothing over the 0.5 s it was seen; veth0: 10 in 1 s.
        assert_eq!(
            (s.interfaces[0].rx_packets, s.interfaces[0].seconds),
            (400, 3.0)
        );
        assert!((s.interfaces[0].rx_pps - 400.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            (s.interfaces[1].seconds, s.interfaces[1].rx_pps),
            (0.5, 0.0)
        );
        assert_eq!(
            (s.interfaces[2].seconds, s.interfaces[2].rx_pps),
            (1.0, 10.0)
        );
    }

    #[test]
    fn named_interfaces_keep_their_order() {
        let w = Watch::Named(vec!["eth0".into(), "lo".into()]);
        let mut m = Monitor::new(w, vec![snap("lo", 0, 0), snap("eth0", 0, 0)]);
        let r = m.step(vec![snap("lo", 1, 1), snap("eth0", 2, 2)], 1.0, 0.0);
        let names: Vec<&str> = r.interfaces.iter().map(|u| u.interface.as_str()).collect();
        assert_eq!(names, ["eth0", "lo"]);
        assert!(m.summary(true).interrupted);
        assert_eq!(Monitor::new(Watch::All, vec![]).summary(true).intervals, 0);
    }

    #[test]
    fn deadlines_stay_on_the_grid() {
        let t0 = Instant::now();
        let step = Duration::from_millis(100);
        // On time or a little late: the next grid point.
        assert_eq!(next_deadline(t0, step, t0), t0 + step);
        let late = t0 + Duration::from_millis(30);
        assert_eq!(next_deadline(t0 + step, step, late + step), t0 + 2 * step);
        // Stalled past several grid points: the first one still ahead, none in the past.
        let stalled = t0 + Duration::from_millis(450);
        assert_eq!(next_deadline(t0, step, stalled), t0 + 5 * step);
        let exact = t0 + 3 * step;
        assert_eq!(next_deadline(t0, step, exact), t0 + 4 * step);
    }
}
