//! CPU, NIC and UDP counter snapshots: parsers for Linux `/proc` text and the delta arithmetic.
//!
//! Everything here is pure, so it is compiled on every OS: a snapshot taken by a Linux peer can
//! be parsed and reduced anywhere, and the tests run without a `/proc`.

use hakaru_model::{CpuUsage, NicUsage};

/// Linux's USER_HZ on every mainstream architecture; used until the backend reads the real one.
const DEFAULT_TICKS_PER_SEC: u64 = 100;

/// Opaque snapshot of the machine-wide CPU counters (the `/proc/stat` `cpu ` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSnapshot {
    user: u64,
    nice: u64,
    system: u64,
    idle: u64,
    iowait: u64,
    /// Hard interrupts, soft interrupts and hypervisor steal: `None` where the OS does not
    /// split them out (they are then inside `system`, or not known at all).
    irq: Option<u64>,
    softirq: Option<u64>,
    steal: Option<u64>,
    cpus: u32,
    ticks_per_sec: u64,
}

impl CpuSnapshot {
    /// Replaces the assumed tick rate with the one the OS reported (sysconf(_SC_CLK_TCK)).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn with_ticks_per_sec(mut self, hz: u64) -> Self {
        if hz > 0 {
            self.ticks_per_sec = hz;
        }
        self
    }

    /// A snapshot from an OS that gives only user, kernel and idle time (Windows, macOS):
    /// counters in ticks of `hz`, over `cpus` CPUs. `system` is kernel time without idle.
    #[cfg_attr(not(windows), allow(dead_code))]
    pub(crate) fn from_times(user: u64, system: u64, idle: u64, hz: u64, cpus: u32) -> Self {
        CpuSnapshot {
            user,
            nice: 0,
            system,
            idle,
            iowait: 0,
            irq: None,
            softirq: None,
            steal: None,
            cpus,
            ticks_per_sec: hz.max(1),
        }
    }
}

/// Parses `/proc/stat` text into a [`CpuSnapshot`]; `None` if the aggregate `cpu` line is
/// missing or malformed.
pub fn parse_proc_stat(text: &str) -> Option<CpuSnapshot> {
    let mut total: Option<Vec<u64>> = None;
    let mut cpus: u32 = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(label) = words.next() else { continue };
        let Some(suffix) = label.strip_prefix("cpu") else {
            continue;
        };
        if suffix.is_empty() {
            if total.is_some() {
                // Two aggregate lines: not /proc/stat as we know it.
                return None;
            }
            let fields = words
                .map(|w| w.parse::<u64>().ok())
                .collect::<Option<Vec<u64>>>()?;
            total = Some(fields);
        } else if suffix.bytes().all(|b| b.is_ascii_digit()) {
            cpus = cpus.saturating_add(1);
        }
    }
    let f = total?;
    // user nice system idle have existed since 2.4; later columns appeared over time: iowait
    // counts as zero on kernels that lack it, irq, softirq and steal are then absent.
    if f.len() < 4 {
        return None;
    }
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    let col = |i: usize| f.get(i).copied();
    // Columns 8 and 9 (guest, guest_nice) are already included in user and nice.
    Some(CpuSnapshot {
        user: at(0),
        nice: at(1),
        system: at(2),
        idle: at(3),
        iowait: at(4),
        irq: col(5),
        softirq: col(6),
        steal: col(7),
        cpus,
        ticks_per_sec: DEFAULT_TICKS_PER_SEC,
    })
}

/// CPU use between two snapshots taken `wall_secs` apart; percentages are of all CPUs' time.
pub fn cpu_usage(before: &CpuSnapshot, after: &CpuSnapshot, wall_secs: f64) -> CpuUsage {
    // saturating, not wrapping: iowait and idle are known to step backwards on NO_HZ kernels,
    // and a wrapped delta would report centuries of CPU time.
    // Sums saturate too, so that arbitrary snapshots cannot overflow.
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let sum = |parts: &[u64]| parts.iter().fold(0u64, |acc, &p| acc.saturating_add(p));
    let user = sum(&[d(before.user, after.user), d(before.nice, after.nice)]);
    let system = d(before.system, after.system);
    let idle = sum(&[d(before.idle, after.idle), d(before.iowait, after.iowait)]);
    // A part only one snapshot has is unknown for the interval.
    let part = |a: Option<u64>, b: Option<u64>| Some(d(a?, b?));
    let irq = part(before.irq, after.irq);
    let softirq = part(before.softirq, after.softirq);
    let steal = part(before.steal, after.steal);
    let busy = sum(&[
        user,
        system,
        irq.unwrap_or(0),
        softirq.unwrap_or(0),
        steal.unwrap_or(0),
    ]);
    let total = sum(&[busy, idle]);

    let hz = after.ticks_per_sec.max(1) as f64;
    let secs = |ticks: u64| ticks as f64 / hz;
    let pct = |ticks: u64| {
        if total == 0 {
            0.0
        } else {
            ticks as f64 * 100.0 / total as f64
        }
    };
    CpuUsage {
        seconds: wall_secs,
        cpus: after.cpus.max(before.cpus),
        user_s: secs(user),
        system_s: secs(system),
        irq_s: irq.map(secs),
        softirq_s: softirq.map(secs),
        steal_s: steal.map(secs),
        busy_s: secs(busy),
        user_pct: pct(user),
        system_pct: pct(system),
        softirq_pct: softirq.map(pct),
        busy_pct: pct(busy),
    }
}

/// Counters of one network interface, as `/proc/net/dev` reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicSnapshot {
    /// Interface name.
    pub interface: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Received packets dropped.
    pub rx_drops: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Sent packets dropped.
    pub tx_drops: u64,
}

/// Splits one `/proc/net/dev` line into the interface name and its counters; `None` for the
/// two heading lines and for anything malformed.
fn parse_proc_net_dev_line(line: &str) -> Option<NicSnapshot> {
    // Linux refuses ':' in interface names, so the first colon always ends the name; the
    // first counter may be glued to it ("eth0:123") when the byte count is wide.
    let (name, rest) = line.split_once(':')?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) || name.contains('|') {
        return None;
    }
    let fields = rest
        .split_whitespace()
        .map(|w| w.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    // 8 receive columns then at least 4 transmit columns (bytes packets errs drop).
    if fields.len() < 12 {
        return None;
    }
    Some(NicSnapshot {
        interface: name.to_string(),
        rx_bytes: fields[0],
        rx_packets: fields[1],
        rx_errors: fields[2],
        rx_drops: fields[3],
        tx_bytes: fields[8],
        tx_packets: fields[9],
        tx_errors: fields[10],
        tx_drops: fields[11],
    })
}

/// Parses the line of `iface` out of `/proc/net/dev` text; `None` if absent or malformed.
pub fn parse_proc_net_dev(text: &str, iface: &str) -> Option<NicSnapshot> {
    let line = text.lines().find(|line| {
        line.split_once(':')
            .is_some_and(|(name, _)| name.trim() == iface)
    })?;
    parse_proc_net_dev_line(line)
}

/// Parses every interface out of `/proc/net/dev` text, in the file's order; malformed lines
/// (and the two heading lines) are skipped, so one odd line does not hide the others.
pub fn parse_proc_net_dev_all(text: &str) -> Vec<NicSnapshot> {
    text.lines().filter_map(parse_proc_net_dev_line).collect()
}

/// Bytes in the "kB" of `sar -n DEV` rxkB/s and txkB/s: sysstat divides by 1024, and the
/// numbers are meant to be compared side by side with sar's.
const SAR_KILOBYTE: f64 = 1024.0;

/// Interface counter deltas between two snapshots taken `wall_secs` apart, with per-second
/// rates as `sar -n DEV` prints them (kB = 1024 bytes, like sysstat).
pub fn nic_usage(before: &NicSnapshot, after: &NicSnapshot, wall_secs: f64) -> NicUsage {
    // wrapping: the kernel's counters are free-running and wrap at their width.
    let d = |a: u64, b: u64| b.wrapping_sub(a);
    with_rates(NicUsage {
        interface: after.interface.clone(),
        seconds: wall_secs,
        rx_packets: d(before.rx_packets, after.rx_packets),
        tx_packets: d(before.tx_packets, after.tx_packets),
        rx_bytes: d(before.rx_bytes, after.rx_bytes),
        tx_bytes: d(before.tx_bytes, after.tx_bytes),
        rx_drops: d(before.rx_drops, after.rx_drops),
        tx_drops: d(before.tx_drops, after.tx_drops),
        rx_errors: d(before.rx_errors, after.rx_errors),
        tx_errors: d(before.tx_errors, after.tx_errors),
        virtual_interface: super::is_virtual_interface(&after.interface),
        ..NicUsage::default()
    })
}

/// One interface's usage over several consecutive intervals: the deltas added up and the
/// rates over the summed time, which is what sar's `Average:` lines show (the average of the
/// per-interval rates would overweight short intervals). The name is the first sample's;
/// `None` when there are no samples.
pub fn nic_average(samples: &[NicUsage]) -> Option<NicUsage> {
    let first = samples.first()?;
    let mut total = NicUsage {
        interface: first.interface.clone(),
        ..NicUsage::default()
    };
    for u in samples {
        // Saturating: deltas are already unwrapped, and a sum cannot meaningfully wrap.
        let add = |acc: &mut u64, n: u64| *acc = acc.saturating_add(n);
        add(&mut total.rx_packets, u.rx_packets);
        add(&mut total.tx_packets, u.tx_packets);
        add(&mut total.rx_bytes, u.rx_bytes);
        add(&mut total.tx_bytes, u.tx_bytes);
        add(&mut total.rx_drops, u.rx_drops);
        add(&mut total.tx_drops, u.tx_drops);
        add(&mut total.rx_errors, u.rx_errors);
        add(&mut total.tx_errors, u.tx_errors);
        if u.seconds.is_finite() && u.seconds > 0.0 {
            total.seconds += u.seconds;
        }
    }
    Some(with_rates(total))
}

/// Fills the per-second rates of `u` from its deltas and `seconds`.
fn with_rates(u: NicUsage) -> NicUsage {
    let secs = u.seconds;
    // A zero, negative or NaN interval has no meaningful rate; report none rather than inf.
    let rate = |n: u64| {
        if secs.is_finite() && secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    };
    NicUsage {
        rx_pps: rate(u.rx_packets),
        tx_pps: rate(u.tx_packets),
        rx_kib_per_s: rate(u.rx_bytes) / SAR_KILOBYTE,
        tx_kib_per_s: rate(u.tx_bytes) / SAR_KILOBYTE,
        rx_drops_ps: rate(u.rx_drops),
        tx_drops_ps: rate(u.tx_drops),
        rx_errors_ps: rate(u.rx_errors),
        tx_errors_ps: rate(u.tx_errors),
        ..u
    }
}

/// System-wide UDP counters: `/proc/net/snmp` "Udp:" plus `/proc/net/snmp6` "Udp6*", summed
/// by [`UdpSnmp::add`]. The kernel's counters are free-running, so arithmetic on them wraps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpSnmp {
    /// Datagrams delivered to a socket (InDatagrams).
    pub in_datagrams: u64,
    /// Datagrams for a port nobody listens on (NoPorts).
    pub no_ports: u64,
    /// Datagrams that could not be delivered, other than for lack of a port (InErrors); this
    /// includes the receive-buffer drops counted again in `rcvbuf_errors`.
    pub in_errors: u64,
    /// Datagrams dropped because the receiving socket's buffer was full (RcvbufErrors).
    pub rcvbuf_errors: u64,
    /// Datagrams not sent because the sending socket's buffer was full (SndbufErrors).
    pub sndbuf_errors: u64,
    /// Datagrams sent (OutDatagrams).
    pub out_datagrams: u64,
}

impl UdpSnmp {
    /// Counts from `self` to `later`; wrapping, like the kernel's free-running counters.
    pub fn delta(&self, later: &UdpSnmp) -> UdpSnmp {
        let d = |a: u64, b: u64| b.wrapping_sub(a);
        UdpSnmp {
            in_datagrams: d(self.in_datagrams, later.in_datagrams),
            no_ports: d(self.no_ports, later.no_ports),
            in_errors: d(self.in_errors, later.in_errors),
            rcvbuf_errors: d(self.rcvbuf_errors, later.rcvbuf_errors),
            sndbuf_errors: d(self.sndbuf_errors, later.sndbuf_errors),
            out_datagrams: d(self.out_datagrams, later.out_datagrams),
        }
    }

    /// Field-wise sum (IPv4 plus IPv6); wrapping, so that the delta of two sums equals the
    /// sum of the deltas even when one family's counter wrapped.
    pub fn add(&self, other: &UdpSnmp) -> UdpSnmp {
        UdpSnmp {
            in_datagrams: self.in_datagrams.wrapping_add(other.in_datagrams),
            no_ports: self.no_ports.wrapping_add(other.no_ports),
            in_errors: self.in_errors.wrapping_add(other.in_errors),
            rcvbuf_errors: self.rcvbuf_errors.wrapping_add(other.rcvbuf_errors),
            sndbuf_errors: self.sndbuf_errors.wrapping_add(other.sndbuf_errors),
            out_datagrams: self.out_datagrams.wrapping_add(other.out_datagrams),
        }
    }

    /// Stores `value` under the SNMP MIB name `name` (without a family prefix); unknown names
    /// are ignored, so counters added by newer kernels (InCsumErrors, MemErrors) do no harm.
    /// Returns whether the name was one of ours.
    fn set(&mut self, name: &str, value: u64) -> bool {
        let field = match name {
            "InDatagrams" => &mut self.in_datagrams,
            "NoPorts" => &mut self.no_ports,
            "InErrors" => &mut self.in_errors,
            "RcvbufErrors" => &mut self.rcvbuf_errors,
            "SndbufErrors" => &mut self.sndbuf_errors,
            "OutDatagrams" => &mut self.out_datagrams,
            _ => return false,
        };
        *field = value;
        true
    }
}

/// The counters every kernel since 2.6 reports; RcvbufErrors and SndbufErrors came later
/// (2.6.18) and read as 0 where absent.
const UDP_REQUIRED: [&str; 4] = ["InDatagrams", "NoPorts", "InErrors", "OutDatagrams"];

/// Parses the IPv4 UDP counters out of `/proc/net/snmp` text, where each protocol has a line
/// of names and then a line of values, both starting with "Udp:". `None` if the pair is
/// missing, the two lines disagree, a value is not a number or a basic counter is absent.
pub fn parse_proc_net_snmp_udp(text: &str) -> Option<UdpSnmp> {
    // "UdpLite:" is a different protocol; split_whitespace makes "Udp:" match only whole.
    let mut lines = text
        .lines()
        .filter(|line| line.split_whitespace().next() == Some("Udp:"));
    let names = lines.next()?;
    let values = lines.next()?;
    if lines.next().is_some() {
        // A second table: not /proc/net/snmp as we know it.
        return None;
    }
    let names: Vec<&str> = names.split_whitespace().skip(1).collect();
    let values = values
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()?;
    if names.len() != values.len() {
        return None;
    }
    let mut out = UdpSnmp::default();
    let mut seen = Vec::new();
    for (name, value) in names.into_iter().zip(values) {
        if out.set(name, value) {
            if seen.contains(&name) {
                return None;
            }
            seen.push(name);
        }
    }
    UDP_REQUIRED.iter().all(|r| seen.contains(r)).then_some(out)
}

/// Parses the IPv6 UDP counters out of `/proc/net/snmp6` text, one "Udp6InDatagrams  123"
/// line per counter. `None` if a basic counter is missing, a Udp6 value is not a number or a
/// counter appears twice.
pub fn parse_proc_net_snmp6_udp(text: &str) -> Option<UdpSnmp> {
    let mut out = UdpSnmp::default();
    let mut seen: Vec<&str> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(key) = words.next() else { continue };
        // "UdpLite6..." does not start with "Udp6", so it is skipped here.
        let Some(name) = key.strip_prefix("Udp6") else {
            continue;
        };
        let value = words.next()?.parse::<u64>().ok()?;
        if words.next().is_some() {
            return None;
        }
        if out.set(name, value) {
            if seen.contains(&name) {
                return None;
            }
            seen.push(name);
        }
    }
    UDP_REQUIRED.iter().all(|r| seen.contains(r)).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "\
cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0
cpu1 1335205 39826 511590 11679393 4074 0 5053 0 38302 0
cpu2 1287425 29808 468960 11901584 3414 0 1280 0 53681 0
cpu3 6116242 188095 1532112 9904213 3063 0 985 0 59711 0
intr 1462898 0 0 0 0 0 0 0 0
ctxt 2883418
btime 1700000000
processes 18817
procs_running 2
procs_blocked 0
softirq 123 1 2 3 4 5 6 7 8 9 10
";

    #[test]
    fn proc_stat_parses_aggregate_and_counts_cpus() {
        let s = parse_proc_stat(PROC_STAT).expect("parses");
        assert_eq!(s.user, 10132153);
        assert_eq!(s.nice, 290696);
        assert_eq!(s.system, 3084719);
        assert_eq!(s.idle, 46828483);
        assert_eq!(s.iowait, 16683);
        assert_eq!(s.irq, Some(0));
        assert_eq!(s.softirq, Some(25195));
        assert_eq!(s.steal, Some(0));
        assert_eq!(s.cpus, 4);
        assert_eq!(s.ticks_per_sec, 100);
    }

    #[test]
    fn proc_stat_accepts_old_kernels_with_four_columns() {
        let s = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").expect("parses");
        assert_eq!((s.user, s.nice, s.system, s.idle), (1, 2, 3, 4));
        assert_eq!(s.iowait, 0);
        assert_eq!((s.irq, s.softirq, s.steal), (None, None, None));
        assert_eq!(s.cpus, 1);
    }

    #[test]
    fn proc_stat_rejects_garbage() {
        for text in [
            "",
            "\n\n",
            "cpu0 1 2 3 4 5 6 7 8\n",
            "cpu 1 2 3\n",
            "cpu 1 2 x 4 5\n",
            "cpu -1 2 3 4\n",
            "cpu 99999999999999999999999 2 3 4\n",
            "cpu 1 2 3 4\ncpu 1 2 3 4\n",
            "cpux 1 2 3 4\n",
            "\u{0}\u{ffff} cpu",
        ] {
            assert_eq!(parse_proc_stat(text), None, "{text:?}");
        }
    }

    #[test]
    fn proc_stat_ignores_cpu_like_labels() {
        let s = parse_proc_stat("cpu 1 2 3 4\ncpu0 1\ncpufreq 9\ncpu1 2\n").expect("parses");
        assert_eq!(s.cpus, 2);
    }

    fn cpu(user: u64, system: u64, idle: u64, softirq: u64) -> CpuSnapshot {
        CpuSnapshot {
            user,
            nice: 0,
            system,
            idle,
            iowait: 0,
            irq: Some(0),
            softirq: Some(softirq),
            steal: Some(0),
            cpus: 2,
            ticks_per_sec: 100,
        }
    }

    #[test]
    fn cpu_usage_arithmetic() {
        let a = CpuSnapshot {
            nice: 5,
            irq: Some(1),
            steal: Some(2),
            iowait: 7,
            ..cpu(100, 50, 1000, 10)
        };
        // Over 1 s on 2 CPUs (200 ticks): user 30+5, system 20, irq 4, softirq 10, steal 6,
        // idle 100 + iowait 25.
        let b = CpuSnapshot {
            nice: 10,
            irq: Some(5),
            steal: Some(8),
            iowait: 32,
            ..cpu(130, 70, 1100, 20)
        };
        let u = cpu_usage(&a, &b, 1.0);
        assert_eq!(u.seconds, 1.0);
        assert_eq!(u.cpus, 2);
        assert!((u.user_s - 0.35).abs() < 1e-9);
        assert!((u.system_s - 0.20).abs() < 1e-9);
        assert!((u.irq_s.unwrap() - 0.04).abs() < 1e-9);
        assert!((u.softirq_s.unwrap() - 0.10).abs() < 1e-9);
        assert!((u.steal_s.unwrap() - 0.06).abs() < 1e-9);
        assert!((u.busy_s - 0.75).abs() < 1e-9);
        assert!((u.user_pct - 17.5).abs() < 1e-9);
        assert!((u.system_pct - 10.0).abs() < 1e-9);
        assert!((u.softirq_pct.unwrap() - 5.0).abs() < 1e-9);
        assert!((u.busy_pct - 37.5).abs() < 1e-9);
    }

    #[test]
    fn parts_an_os_does_not_split_out_are_absent_not_zero() {
        // Windows and macOS give user, kernel and idle time only.
        let a = CpuSnapshot::from_times(100, 50, 1000, 100, 2);
        let b = CpuSnapshot::from_times(130, 70, 1150, 100, 2);
        let u = cpu_usage(&a, &b, 1.0);
        assert_eq!(
            (u.irq_s, u.softirq_s, u.steal_s, u.softirq_pct),
            (None, None, None, None)
        );
        assert!((u.busy_s - 0.50).abs() < 1e-9);
        assert!((u.busy_pct - 25.0).abs() < 1e-9);
        // A kernel without the irq, softirq and steal columns: absent too.
        let old = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(cpu_usage(&old, &old, 1.0).softirq_s, None);
        // A part one snapshot lacks is unknown for the interval.
        let lin = cpu(100, 50, 1000, 10);
        assert_eq!(cpu_usage(&a, &lin, 1.0).softirq_s, None);
    }

    #[test]
    fn cpu_usage_uses_real_tick_rate_and_survives_odd_input() {
        let a = cpu(0, 0, 0, 0).with_ticks_per_sec(1000);
        let b = cpu(500, 0, 500, 0).with_ticks_per_sec(1000);
        let u = cpu_usage(&a, &b, 0.5);
        assert!((u.user_s - 0.5).abs() < 1e-9);
        assert!((u.busy_pct - 50.0).abs() < 1e-9);

        // No ticks elapsed, and counters that went backwards: zeros, not NaN or huge numbers.
        let same = cpu_usage(&b, &b, 0.0);
        assert_eq!(same.busy_pct, 0.0);
        let back = cpu_usage(&b, &a, 1.0);
        assert_eq!(back.busy_s, 0.0);
        assert_eq!(back.busy_pct, 0.0);

        let zero = cpu(0, 0, 0, 0);
        let max = CpuSnapshot {
            nice: u64::MAX,
            steal: Some(u64::MAX),
            ..cpu(u64::MAX, u64::MAX, u64::MAX, u64::MAX)
        };
        let huge = cpu_usage(&zero, &max, 1.0);
        assert!(huge.busy_pct.is_finite() && huge.busy_pct <= 100.0);
    }

    const PROC_NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1234 25 0 0 0 0 0 0 1234 25 0 0 0 0 0 0
  eth0:18446744073709551000 3915 1 2 0 0 0 7 224602 2200 3 4 0 0 0 0
docker0:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
 wlan0: 5 6 7 8 0 0 0 0 9 10 11 12 0 0 0 0
";

    #[test]
    fn proc_net_dev_parses_each_interface() {
        let lo = parse_proc_net_dev(PROC_NET_DEV, "lo").expect("lo");
        assert_eq!(
            lo,
            NicSnapshot {
                interface: "lo".into(),
                rx_bytes: 1234,
                rx_packets: 25,
                tx_bytes: 1234,
                tx_packets: 25,
                ..NicSnapshot::default()
            }
        );
        let eth0 = parse_proc_net_dev(PROC_NET_DEV, "eth0").expect("eth0");
        assert_eq!(eth0.rx_bytes, 18446744073709551000);
        assert_eq!(eth0.rx_packets, 3915);
        assert_eq!((eth0.rx_errors, eth0.rx_drops), (1, 2));
        assert_eq!((eth0.tx_bytes, eth0.tx_packets), (224602, 2200));
        assert_eq!((eth0.tx_errors, eth0.tx_drops), (3, 4));
        let w = parse_proc_net_dev(PROC_NET_DEV, "wlan0").expect("wlan0");
        assert_eq!(
            (w.rx_bytes, w.rx_packets, w.rx_errors, w.rx_drops),
            (5, 6, 7, 8)
        );
        assert_eq!(
            (w.tx_bytes, w.tx_packets, w.tx_errors, w.tx_drops),
            (9, 10, 11, 12)
        );
        assert!(parse_proc_net_dev(PROC_NET_DEV, "docker0").is_some());
    }

    #[test]
    fn proc_net_dev_misses_and_garbage() {
        // A name is matched whole, never as a prefix or suffix.
        assert_eq!(parse_proc_net_dev(PROC_NET_DEV, "eth"), None);
        assert_eq!(parse_proc_net_dev(PROC_NET_DEV, "th0"), None);
        assert_eq!(parse_proc_net_dev(PROC_NET_DEV, ""), None);
        assert_eq!(parse_proc_net_dev(PROC_NET_DEV, "face |bytes"), None);
        for text in [
            "",
            "eth0:",
            "eth0: 1 2 3 4 5 6 7 8 9 10 11",
            "eth0: 1 2 3 4 5 6 7 8 9 10 11 x",
            "eth0: 1 2 3 4 5 6 7 8 9 10 11 -12",
            "eth0 1 2 3 4 5 6 7 8 9 10 11 12",
            ":::::",
        ] {
            assert_eq!(parse_proc_net_dev(text, "eth0"), None, "{text:?}");
        }
        // Only the transmit columns sar uses are required.
        assert!(parse_proc_net_dev("eth0: 1 2 3 4 5 6 7 8 9 10 11 12", "eth0").is_some());
    }

    #[test]
    fn nic_usage_arithmetic_and_wrap() {
        let a = parse_proc_net_dev(PROC_NET_DEV, "eth0").expect("eth0");
        let b = NicSnapshot {
            // Wrapped past 2^64 by 1000 + 616 bytes.
            rx_bytes: 1000,
            rx_packets: 3915 + 2000,
            rx_drops: 2 + 10,
            tx_bytes: 224602 + 2048 * 2,
            tx_packets: 2200 + 40,
            tx_errors: 3 + 1,
            ..a.clone()
        };
        let u = nic_usage(&a, &b, 2.0);
        assert_eq!(u.interface, "eth0");
        assert_eq!(u.seconds, 2.0);
        assert_eq!(u.rx_bytes, 1616);
        assert_eq!(u.rx_packets, 2000);
        assert_eq!(u.tx_bytes, 4096);
        assert_eq!(u.tx_packets, 40);
        assert_eq!((u.rx_drops, u.tx_drops), (10, 0));
        assert_eq!((u.rx_errors, u.tx_errors), (0, 1));
        assert_eq!(u.rx_pps, 1000.0);
        assert_eq!(u.tx_pps, 20.0);
        assert_eq!(u.tx_kib_per_s, 2.0);
        assert!((u.rx_kib_per_s - 808.0 / 1024.0).abs() < 1e-12);
        assert_eq!(u.rx_drops_ps, 5.0);
        assert_eq!(u.tx_drops_ps, 0.0);
        assert_eq!((u.rx_errors_ps, u.tx_errors_ps), (0.0, 0.5));

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let z = nic_usage(&a, &b, bad);
            assert_eq!(z.rx_bytes, 1616);
            assert_eq!((z.rx_pps, z.rx_kib_per_s, z.tx_drops_ps), (0.0, 0.0, 0.0));
            assert_eq!(z.tx_errors_ps, 0.0);
        }
    }

    /// /proc/net/snmp of a 6.x kernel (Ip, Icmp and Tcp tables abridged), with UdpLite right
    /// after Udp as the kernel prints it.
    const PROC_NET_SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors
Ip: 1 64 4821 0
Icmp: InMsgs InErrors InCsumErrors
Icmp: 12 0 0
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens
Tcp: 1 200 120000 -1 77
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 18446744073709551615 7 42 1234 40 3 0 5 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 999 999 999 999 999 999 999 999 999
";

    /// /proc/net/snmp6 (abridged), tab- and space-aligned like the kernel's output.
    const PROC_NET_SNMP6: &str = "\
Ip6InReceives                   \t1022
Ip6InHdrErrors                  \t0
Icmp6InMsgs                     \t3
Udp6InDatagrams                 \t500
Udp6NoPorts                     \t2
Udp6InErrors                    \t9
Udp6OutDatagrams                \t600
Udp6RcvbufErrors                \t8
Udp6SndbufErrors                \t1
Udp6InCsumErrors                \t0
Udp6IgnoredMulti                \t0
Udp6MemErrors                   \t0
UdpLite6InDatagrams             \t777
UdpLite6NoPorts                 \t777
UdpLite6InErrors                \t777
UdpLite6OutDatagrams            \t777
";

    #[test]
    fn proc_net_snmp_udp_reads_the_udp_table_only() {
        let u = parse_proc_net_snmp_udp(PROC_NET_SNMP).expect("parses");
        assert_eq!(
            u,
            UdpSnmp {
                in_datagrams: u64::MAX,
                no_ports: 7,
                in_errors: 42,
                rcvbuf_errors: 40,
                sndbuf_errors: 3,
                out_datagrams: 1234,
            }
        );
        // Columns are matched by name, not by position.
        let shuffled = "Udp: OutDatagrams InErrors NoPorts InDatagrams\nUdp: 4 3 2 1\n";
        let u = parse_proc_net_snmp_udp(shuffled).expect("parses");
        assert_eq!(
            (u.in_datagrams, u.no_ports, u.in_errors, u.out_datagrams),
            (1, 2, 3, 4)
        );
        // A kernel without the buffer-error columns.
        assert_eq!((u.rcvbuf_errors, u.sndbuf_errors), (0, 0));
    }

    #[test]
    fn proc_net_snmp_udp_rejects_garbage() {
        let header = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors";
        for text in [
            String::new(),
            "\n\n".to_string(),
            // Header without values, values without header.
            format!("{header}\n"),
            "Udp: 1 2 3 4 5 6\n".to_string(),
            // Column count mismatch, either way.
            format!("{header}\nUdp: 1 2 3 4 5\n"),
            format!("{header}\nUdp: 1 2 3 4 5 6 7\n"),
            // Not numbers, negative, too wide.
            format!("{header}\nUdp: 1 2 x 4 5 6\n"),
            format!("{header}\nUdp: 1 2 -3 4 5 6\n"),
            format!("{header}\nUdp: 1 2 99999999999999999999999 4 5 6\n"),
            // A basic counter missing.
            "Udp: InDatagrams NoPorts InErrors\nUdp: 1 2 3\n".to_string(),
            // The same counter twice.
            "Udp: InDatagrams InDatagrams NoPorts InErrors OutDatagrams\nUdp: 1 1 2 3 4\n"
                .to_string(),
            // A third Udp: line.
            format!("{header}\nUdp: 1 2 3 4 5 6\nUdp: 1 2 3 4 5 6\n"),
            // UdpLite alone is not Udp.
            "UdpLite: InDatagrams NoPorts InErrors OutDatagrams\nUdpLite: 1 2 3 4\n".to_string(),
            "Udp:\nUdp:\n".to_string(),
            "\u{0}\u{ffff} Udp:".to_string(),
        ] {
            assert_eq!(parse_proc_net_snmp_udp(&text), None, "{text:?}");
        }
    }

    #[test]
    fn proc_net_snmp6_udp_reads_udp6_lines_only() {
        let u = parse_proc_net_snmp6_udp(PROC_NET_SNMP6).expect("parses");
        assert_eq!(
            u,
            UdpSnmp {
                in_datagrams: 500,
                no_ports: 2,
                in_errors: 9,
                rcvbuf_errors: 8,
                sndbuf_errors: 1,
                out_datagrams: 600,
            }
        );
    }

    #[test]
    fn proc_net_snmp6_udp_rejects_garbage() {
        let base = "Udp6InDatagrams 1\nUdp6NoPorts 2\nUdp6InErrors 3\nUdp6OutDatagrams 4\n";
        assert!(parse_proc_net_snmp6_udp(base).is_some());
        for text in [
            String::new(),
            "\n".to_string(),
            // IPv6 disabled leaves only other protocols; UdpLite6 is not Udp6.
            "Ip6InReceives 5\nUdpLite6InDatagrams 1\nUdpLite6NoPorts 2\n".to_string(),
            "Udp6InDatagrams 1\nUdp6NoPorts 2\nUdp6InErrors 3\n".to_string(),
            format!("{base}Udp6RcvbufErrors\n"),
            format!("{base}Udp6RcvbufErrors x\n"),
            format!("{base}Udp6RcvbufErrors -1\n"),
            format!("{base}Udp6RcvbufErrors 1 2\n"),
            format!("{base}Udp6InDatagrams 9\n"),
            "Udp6InDatagrams:1\nUdp6NoPorts:2\nUdp6InErrors:3\nUdp6OutDatagrams:4\n".to_string(),
            "\u{0}\u{ffff} Udp6".to_string(),
        ] {
            assert_eq!(parse_proc_net_snmp6_udp(&text), None, "{text:?}");
        }
        // The IPv4 file is not the IPv6 file, and the other way round.
        assert_eq!(parse_proc_net_snmp6_udp(PROC_NET_SNMP), None);
        assert_eq!(parse_proc_net_snmp_udp(PROC_NET_SNMP6), None);
    }

    #[test]
    fn udp_snmp_delta_and_sum_wrap() {
        let v4 = parse_proc_net_snmp_udp(PROC_NET_SNMP).expect("v4");
        let v6 = parse_proc_net_snmp6_udp(PROC_NET_SNMP6).expect("v6");
        let sum = v4.add(&v6);
        // in_datagrams was u64::MAX: the sum wraps to 499.
        assert_eq!(sum.in_datagrams, 499);
        assert_eq!(
            (sum.no_ports, sum.in_errors, sum.rcvbuf_errors),
            (9, 51, 48)
        );
        assert_eq!((sum.sndbuf_errors, sum.out_datagrams), (4, 1834));

        let later4 = UdpSnmp {
            in_datagrams: 10, // wrapped past 2^64 by 11
            rcvbuf_errors: 45,
            out_datagrams: 1300,
            ..v4
        };
        let d = v4.delta(&later4);
        assert_eq!(
            d,
            UdpSnmp {
                in_datagrams: 11,
                rcvbuf_errors: 5,
                out_datagrams: 66,
                ..UdpSnmp::default()
            }
        );
        // The delta of the sums is the sum of the deltas.
        assert_eq!(sum.delta(&later4.add(&v6)), d.add(&v6.delta(&v6)));
        assert_eq!(v4.delta(&v4), UdpSnmp::default());
    }

    #[test]
    fn proc_net_dev_all_lists_every_interface_in_order() {
        let all = parse_proc_net_dev_all(PROC_NET_DEV);
        let names: Vec<&str> = all.iter().map(|n| n.interface.as_str()).collect();
        assert_eq!(names, ["lo", "eth0", "docker0", "wlan0"]);
        // The same figures as the one-interface parser, glued first counter included.
        for n in &all {
            assert_eq!(
                Some(n),
                parse_proc_net_dev(PROC_NET_DEV, &n.interface).as_ref()
            );
        }
        assert_eq!(all[1].rx_bytes, 18446744073709551000);
        assert_eq!((all[3].tx_errors, all[3].tx_drops), (11, 12));
    }

    #[test]
    fn proc_net_dev_all_skips_malformed_lines() {
        let text = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
  eth0:100 2 0 0 0 0 0 0 300 4 0 0 0 0 0 0
  bad1: 1 2 3 4 5 6 7 8 9 10 11
  bad2: 1 2 3 4 5 6 7 8 9 10 11 x
  bad3 1 2 3 4 5 6 7 8 9 10 11 12
: 1 2 3 4 5 6 7 8 9 10 11 12
two words: 1 2 3 4 5 6 7 8 9 10 11 12

veth1a2b:5 6 7 8 0 0 0 0 9 10 11 12 0 0 0 0
";
        let all = parse_proc_net_dev_all(text);
        let names: Vec<&str> = all.iter().map(|n| n.interface.as_str()).collect();
        assert_eq!(names, ["eth0", "veth1a2b"]);
        assert_eq!((all[0].rx_bytes, all[0].tx_packets), (100, 4));
        assert_eq!((all[1].rx_bytes, all[1].rx_packets), (5, 6));
        for text in ["", "\n", ":::::", "Inter-|   Receive\n face |bytes\n"] {
            assert!(parse_proc_net_dev_all(text).is_empty(), "{text:?}");
        }
    }

    fn usage(secs: f64, rx_packets: u64, rx_bytes: u64, tx_errors: u64) -> NicUsage {
        let a = NicSnapshot {
            interface: "eth0".into(),
            ..NicSnapshot::default()
        };
        let b = NicSnapshot {
            rx_packets,
            rx_bytes,
            tx_errors,
            ..a.clone()
        };
        nic_usage(&a, &b, secs)
    }

    #[test]
    fn average_is_total_over_total_time() {
        assert_eq!(nic_average(&[]), None);
        // 100 packets in 1 s, then 500 in 4 s: 120/s over the run, not (100 + 125) / 2.
        let avg =
            nic_average(&[usage(1.0, 100, 1024, 0), usage(4.0, 500, 4096, 10)]).expect("average");
        assert_eq!(avg.interface, "eth0");
        assert_eq!(avg.seconds, 5.0);
        assert_eq!(
            (avg.rx_packets, avg.rx_bytes, avg.tx_errors),
            (600, 5120, 10)
        );
        assert_eq!(avg.rx_pps, 120.0);
        assert_eq!(avg.rx_kib_per_s, 1.0);
        assert_eq!(avg.tx_errors_ps, 2.0);
        assert_eq!((avg.tx_pps, avg.rx_drops_ps), (0.0, 0.0));

        // One interval is its own average.
        let one = usage(0.25, 7, 2048, 1);
        assert_eq!(nic_average(std::slice::from_ref(&one)), Some(one));

        // A bad interval adds its counts but no time; no time at all means no rates.
        let avg = nic_average(&[usage(2.0, 10, 0, 0), usage(f64::NAN, 10, 0, 0)]).unwrap();
        assert_eq!((avg.seconds, avg.rx_packets, avg.rx_pps), (2.0, 20, 10.0));
        let none = nic_average(&[usage(0.0, 10, 0, 0)]).unwrap();
        assert_eq!((none.seconds, none.rx_pps), (0.0, 0.0));

        // Sums saturate instead of wrapping.
        let big = nic_average(&[usage(1.0, u64::MAX, 0, 0), usage(1.0, 5, 0, 0)]).unwrap();
        assert_eq!(big.rx_packets, u64::MAX);
    }
}

/// This process's own use of the machine, for `hakaru server --metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUsage {
    /// CPU seconds in user and kernel mode since the process started.
    pub cpu_seconds: f64,
    /// Resident memory, bytes.
    pub rss_bytes: u64,
    /// Open file descriptors (handles on Windows); `None` where the OS does not tell.
    pub open_fds: Option<u64>,
}

/// CPU seconds (utime + stime, in ticks of `hz`) from the text of `/proc/self/stat`. The
/// command name in parentheses may hold spaces, so fields are counted after its `)`.
pub fn parse_proc_self_stat(text: &str, hz: u64) -> Option<f64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), utime 14 and stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    (hz > 0).then(|| (utime + stime) as f64 / hz as f64)
}

/// Resident memory in bytes from the text of `/proc/self/status` (its `VmRSS:` line, kB).
pub fn parse_vm_rss(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Nanoseconds a thread has run and has waited, runnable, for a CPU, from the text of
/// `/proc/thread-self/schedstat` (its first two fields).
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_whitespace().map(str::parse::<u64>);
    Some((f.next()?.ok()?, f.next()?.ok()?))
}

/// The calling thread's run and wait-for-a-CPU times, in nanoseconds ([`parse_schedstat`]);
/// `None` off Linux or where the kernel keeps no such figures.
pub fn thread_sched_times() -> Option<(u64, u64)> {
    #[cfg(target_os = "linux")]
    return std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|t| parse_schedstat(&t));
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod process_tests {
    use super::*;

    #[test]
    fn schedstat_parses_and_the_own_thread_has_run() {
        assert_eq!(parse_schedstat("1243707 55 1\n"), Some((1_243_707, 55)));
        assert_eq!(parse_schedstat("12"), None);
        assert_eq!(parse_schedstat("x 1 1"), None);
        #[cfg(target_os = "linux")]
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            // Figures that are there and read (a new thread may not have been charged yet).
            assert!(thread_sched_times().is_some());
        }
    }

    #[test]
    fn own_cpu_and_memory_parse() {
        let stat = "4242 (hakaru (x) y) S 1 4242 4242 0 -1 4194560 2406 0 0 0 150 50 0 0 20 0 9 0";
        assert_eq!(parse_proc_self_stat(stat, 100), Some(2.0));
        assert_eq!(parse_proc_self_stat(stat, 0), None);
        assert_eq!(parse_proc_self_stat("garbage", 100), None);
        let status = "Name:\thakaru\nVmPeak:\t  9000 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(parse_vm_rss(status), Some(2 << 20));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }
}
