//! A TCP or UDP result printed the way iperf3 3.12's human output prints it (the client's
//! view): the `[ ID] Interval Transfer Bitrate Retr Cwnd` table and the sender/receiver
//! summary, with UDP's `Jitter Lost/Total Datagrams`. Stream ids are hakaru's flow ids.

use hakaru_model::{FlowDir, IntervalRecord, RunResult, UdpTick};

use crate::iperf3_view::{bps, client_sends, local_bytes, percent, View};

const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -\n";

/// The whole client output: the connecting lines, [`report`] and `iperf Done.`.
pub fn render(r: &RunResult) -> String {
    let (host, port) = r.server.rsplit_once(':').unwrap_or((&r.server, "0"));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut s = format!("Connecting to host {host}, port {port}\n");
    if r.spec.common().direction == hakaru_model::Direction::Reverse {
        s += &format!("Reverse mode, remote host {host} is sending\n");
    }
    s += &report(r);
    s += "\niperf Done.\n";
    s
}

/// The interval table and the summary only (what iperf3's `--get-server-output` carries).
pub fn report(r: &RunResult) -> String {
    let Some(v) = View::new(r) else {
        return format!("iperf3: error - a '{}' test has no iperf3 form\n", r.test);
    };
    let mut s = String::new();
    let multi = v.bidir || r.spec.common().flows > 1;
    for (n, rec) in r.intervals.iter().enumerate() {
        if n == 0 {
            s += &interval_header(&v);
        } else if multi {
            s += SEPARATOR;
        }
        s += &interval_lines(&v, rec);
    }
    s += SEPARATOR;
    s += &summary(&v);
    s
}

/// iperf3's `unit_snprintf`: 1024-based bytes (`upper`) or 1000-based bits, fitted in 4 places.
fn units(value: f64, bits: bool) -> String {
    const BYTES: [&str; 5] = ["Byte", "KByte", "MByte", "GByte", "TByte"];
    const BITS: [&str; 5] = ["bit", "Kbit", "Mbit", "Gbit", "Tbit"];
    let (base, labels) = if bits {
        (1000.0, BITS)
    } else {
        (1024.0, BYTES)
    };
    let mut n = value;
    let mut conv = 0;
    while n >= base && conv < 4 {
        n /= base;
        conv += 1;
    }
    if n < 9.995 {
        format!("{n:4.2} {}", labels[conv])
    } else if n < 99.95 {
        format!("{n:4.1} {}", labels[conv])
    } else {
        format!("{n:4.0} {}", labels[conv])
    }
}

/// C's `%.2g`, as iperf3 prints a loss percentage.
fn g2(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".into();
    }
    let exp = x.abs().log10().floor() as i32;
    // Rounding to two digits can carry into the next power of ten.
    let rounded: f64 = format!("{x:.1e}").parse().unwrap_or(x);
    let exp = if rounded.abs() >= 10f64.powi(exp + 1) {
        exp + 1
    } else {
        exp
    };
    if !(-4..2).contains(&exp) {
        let m = format!("{:.1}", rounded / 10f64.powi(exp));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (1 - exp).max(0) as usize;
    let s = format!("{rounded:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn role(v: &View, dir: FlowDir) -> &'static str {
    match (v.bidir, client_sends(dir)) {
        (false, _) => "",
        (true, true) => "[TX-C]",
        (true, false) => "[RX-C]",
    }
}

fn id(id: Option<u32>) -> String {
    match id {
        Some(i) => format!("[{i:3}]"),
        None => "[SUM]".into(),
    }
}

fn interval_header(v: &View) -> String {
    let idcol = if v.bidir { "[ ID][Role]" } else { "[ ID]" };
    let sends = client_sends(v.primary);
    let tail = match (v.udp, sends) {
        (false, true) => "         Retr  Cwnd",
        (false, false) => "",
        (true, true) => "         Total Datagrams",
        (true, false) => "         Jitter    Lost/Total Datagrams",
    };
    format!("{idcol} Interval           Transfer     Bitrate{tail}\n")
}

/// One line's common head: id, role, interval, transfer and bitrate.
fn head(tag: &str, start: f64, end: f64, bytes: u64) -> String {
    format!(
        "{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec",
        units(bytes as f64, false),
        units(bps(bytes, end - start), true)
    )
}

fn udp_loss(t: &UdpTick) -> String {
    let total = t.datagrams + t.lost;
    format!(
        "  {:5.3} ms  {}/{} ({}%)",
        t.jitter_ms.unwrap_or(0.0),
        t.lost,
        total,
        g2(percent(t.lost, total))
    )
}

fn interval_lines(v: &View, rec: &IntervalRecord) -> String {
    let (start, end) = v.times(rec);
    let note = if rec.omitted { "(omitted)" } else { "" };
    let flows = v.interval_flows(rec);
    let mut s = String::new();
    for dir in v.dirs() {
        let of: Vec<_> = flows.iter().filter(|f| f.dir == dir).copied().collect();
        let sends = client_sends(dir);
        let mss_of = |fid| v.mss(fid).unwrap_or(0);
        let line = |tag: String, bytes: u64, retr: Option<u64>, cwnd: Option<u64>, udp: String| {
            let h = head(&format!("{tag}{}", role(v, dir)), start, end, bytes);
            match (v.udp, retr) {
                (true, _) => format!("{h}{udp}  {note}\n"),
                (false, Some(r)) => match cwnd {
                    Some(c) => format!("{h}  {r:3}   {}s       {note}\n", units(c as f64, false)),
                    None => format!("{h}  {r:3}             {note}\n"),
                },
                (false, None) => format!("{h}                  {note}\n"),
            }
        };
        let udp_cols = |ticks: &[UdpTick], sent: u64| {
            if sends {
                format!("  {sent}")
            } else {
                udp_loss(&UdpTick::sum(ticks.iter()))
            }
        };
        for f in &of {
            let tcp = f.tcp.filter(|_| sends);
            s += &line(
                id(Some(f.id)),
                local_bytes(f),
                tcp.and_then(|t| t.retransmits),
                tcp.map(|t| u64::from(t.snd_cwnd) * mss_of(f.id)),
                udp_cols(
                    &f.udp.into_iter().collect::<Vec<_>>(),
                    f.sender_datagrams.unwrap_or(0),
                ),
            );
        }
        if of.len() > 1 {
            let tcp: Vec<_> = of.iter().filter_map(|f| f.tcp).filter(|_| sends).collect();
            let ticks: Vec<UdpTick> = of.iter().filter_map(|f| f.udp).collect();
            s += &line(
                id(None),
                of.iter().map(|f| local_bytes(f)).sum(),
                if tcp.is_empty() {
                    None
                } else {
                    tcp.iter().map(|t| t.retransmits).sum()
                },
                None,
                udp_cols(&ticks, of.iter().filter_map(|f| f.sender_datagrams).sum()),
            );
        }
    }
    s
}

fn summary(v: &View) -> String {
    let tail = if v.udp {
        "         Jitter    Lost/Total Datagrams"
    } else {
        "         Retr"
    };
    let idcol = if v.bidir { "[ ID][Role]" } else { "[ ID]" };
    let mut s = format!("{idcol} Interval           Transfer     Bitrate{tail}\n");
    for dir in v.dirs() {
        let flows: Vec<_> = v.flows().into_iter().filter(|f| f.dir == dir).collect();
        let mut pairs: Vec<(String, SummaryPair)> = flows
            .iter()
            .map(|f| {
                let u = f.udp.unwrap_or_default();
                (
                    id(Some(f.id)),
                    SummaryPair {
                        sent: (f.sender.bytes, f.sender.seconds),
                        received: (f.receiver.bytes, f.receiver.seconds),
                        retransmits: v.retransmits(f),
                        udp: (u.jitter_ms.unwrap_or(0.0), u.lost, u.sent_datagrams),
                    },
                )
            })
            .collect();
        if flows.len() > 1 {
            if let Some(t) = v.r.totals.iter().find(|t| t.dir == dir) {
                let u = t.udp.unwrap_or_default();
                let retr = flows.iter().filter_map(|f| v.retransmits(f)).sum();
                pairs.push((
                    id(None),
                    SummaryPair {
                        sent: (t.sender.bytes, t.sender.seconds),
                        received: (t.receiver.bytes, t.receiver.seconds),
                        retransmits: flows.iter().any(|f| f.tcp_info.is_some()).then_some(retr),
                        udp: (u.jitter_ms.unwrap_or(0.0), u.lost, u.sent_datagrams),
                    },
                ));
            }
        }
        for (tag, p) in pairs {
            s += &p.lines(v, &format!("{tag}{}", role(v, dir)));
        }
    }
    s
}

/// One stream's (or the sum's) final figures at both ends.
struct SummaryPair {
    sent: (u64, f64),
    received: (u64, f64),
    retransmits: Option<u64>,
    /// Jitter (ms), datagrams lost, datagrams sent.
    udp: (f64, u64, u64),
}

impl SummaryPair {
    fn lines(&self, v: &View, tag: &str) -> String {
        let (sb, ss) = self.sent;
        let (rb, rs) = self.received;
        let snd = head(tag, 0.0, ss, sb);
        let rcv = head(tag, 0.0, rs, rb);
        if v.udp {
            let (jitter, lost, total) = self.udp;
            let pct = g2(percent(lost, total));
            format!(
                "{snd}  {:5.3} ms  0/{total} (0%)  sender\n{rcv}  {jitter:5.3} ms  {lost}/{total} ({pct}%)  receiver\n",
                0.0
            )
        } else {
            let retr = match self.retransmits {
                Some(r) => format!("  {r:3}             sender"),
                None => "                  sender".into(),
            };
            format!("{snd}{retr}\n{rcv}                  receiver\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_fit_four_places_like_iperf3() {
        assert_eq!(units(3.79 * 1024.0 * 1024.0 * 1024.0, false), "3.79 GByte");
        assert_eq!(units(438.0 * 1024.0 * 1024.0, false), " 438 MByte");
        assert_eq!(units(11.9 * 1024.0 * 1024.0, false), "11.9 MByte");
        assert_eq!(units(50.1e6, true), "50.1 Mbit");
        assert_eq!(units(1023.0 * 1024.0, false), "1023 KByte");
        assert_eq!(units(0.0, true), "0.00 bit");
    }

    #[test]
    fn percent_prints_like_c_g2() {
        assert_eq!(g2(0.0), "0");
        assert_eq!(g2(0.5), "0.5");
        assert_eq!(g2(12.34), "12");
        assert_eq!(g2(99.96), "1e+02");
        assert_eq!(g2(100.0), "1e+02");
        assert_eq!(g2(0.0123), "0.012");
        assert_eq!(g2(0.00001), "1e-05");
        assert_eq!(g2(3.0), "3");
    }
}
