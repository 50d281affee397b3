//! A stock client's parameters checked against iperf3's rules and the server's limits, and
//! turned into a hakaru test: the first thing the server machine does with them.

use std::time::Duration;

use hakaru_model::{
    Amount, BitRate, Bytes, Direction, Dur, FlowDir, TcpSpec, TestSpec, UdpRate, UdpSpec,
};
use hakaru_proto::iperf3::{errno, Params, Protocol};

/// A rule broken: the i_errno the client hears with SERVER_ERROR, and why.
pub type Fail = (i32, String);

/// What the server allows, and what this host offers, as the checks read them.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `--max-duration`: the longest `-t` plus `-O` the server runs.
    pub max_duration: Option<Duration>,
    /// `--max-rate`: what the server sends at most, bits per second of payload.
    pub max_rate: Option<f64>,
    /// `--max-flows`: streams per test.
    pub max_flows: u32,
    /// The congestion control algorithms this host has (empty: not known, `-C` not checked).
    pub congestion: Vec<String>,
}

impl Default for Limits {
    /// No limits but iperf3's own, and the server's default of 1024 streams.
    fn default() -> Limits {
        Limits {
            max_duration: None,
            max_rate: None,
            max_flows: 1024,
            congestion: Vec::new(),
        }
    }
}

/// The test a client asked for, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The client's parameters.
    pub params: Params,
    /// The test as hakaru's own spec.
    pub spec: TestSpec,
    /// A UDP test.
    pub udp: bool,
    /// (hakaru flow id, direction), in iperf3's stream creation order.
    pub flows: Vec<(u32, FlowDir)>,
}

/// The amount of a test in words, for the log.
pub fn amount_words(p: &Params) -> String {
    if p.time > 0.0 {
        format!("{} s", p.time)
    } else if p.num > 0 {
        format!("{} bytes", p.num)
    } else {
        format!("{} blocks", p.blockcount)
    }
}

/// The client's receive and transport choices, for the log: empty when it made none.
pub fn mode_words(p: &Params, udp: bool) -> String {
    let mut s = String::new();
    if p.skip_rx_copy {
        s += if udp {
            "; --skip-rx-copy: UDP receivers still read each datagram (its header is counted)"
        } else {
            "; --skip-rx-copy: receiving with MSG_TRUNC (no copy)"
        };
    }
    if p.mptcp {
        s += if udp {
            "; -m/--mptcp has no effect on UDP"
        } else {
            "; -m/--mptcp: data streams over MPTCP"
        };
    }
    s
}

/// Checks the parameters as iperf3 3.18+ does, and against the server's limits, and turns
/// them into a hakaru test spec. What the test would hold (memory, a slot) is the driver's to
/// admit.
pub fn check(p: &Params, limits: &Limits) -> Result<Plan, Fail> {
    let (udp, length) = check_params(p, limits)?;
    let spec = spec_of(p, udp, length);
    check_send_rate(p, &spec, limits)?;
    let flows = spec.flow_plan();
    Ok(Plan {
        params: p.clone(),
        spec,
        udp,
        flows,
    })
}

/// The parameters' own checks and the server's limits on them: whether the test is UDP, and
/// its block length.
fn check_params(p: &Params, limits: &Limits) -> Result<(bool, u64), Fail> {
    let max_duration = limits.max_duration;
    let tell = |code: i32, why: String| Err((code, why));
    if p.authtoken.is_some() {
        return tell(
            errno::IEAUTHTEST,
            "the client sent credentials; hakaru does not support iperf3 authentication".into(),
        );
    }
    let udp = match p.protocol {
        Some(Protocol::Tcp) => false,
        Some(Protocol::Udp) => true,
        Some(Protocol::Sctp) => return tell(errno::IEPROTOCOL, "SCTP is not supported".into()),
        None => return tell(errno::IEPROTOCOL, "the parameters name no protocol".into()),
    };
    if !(1..=128).contains(&p.parallel) {
        return tell(errno::IENUMSTREAMS, format!("-P {} (1 to 128)", p.parallel));
    }
    if p.parallel > limits.max_flows {
        return tell(
            errno::IENUMSTREAMS,
            format!(
                "-P {}: the server allows {} (--max-flows)",
                p.parallel, limits.max_flows
            ),
        );
    }
    // Params::from_json refuses negative and non-finite numbers; checked again here because
    // these become Durations, which panic on them.
    if !(p.time.is_finite() && p.omit.is_finite() && p.time >= 0.0 && p.omit >= 0.0) {
        return tell(
            errno::IEDURATION,
            format!("-t {} -O {}: not a duration", p.time, p.omit),
        );
    }
    if p.time > 86_400.0 {
        return tell(errno::IEDURATION, format!("-t {} (at most 86400)", p.time));
    }
    if p.omit > 600.0 {
        return tell(errno::IEOMIT, format!("-O {} (at most 600)", p.omit));
    }
    if let Some(max) = max_duration {
        if p.time + p.omit > max.as_secs_f64() {
            return tell(
                errno::IEDURATION,
                format!(
                    "-t {} -O {}: the server runs tests of at most {:.0} s (--max-duration)",
                    p.time,
                    p.omit,
                    max.as_secs_f64()
                ),
            );
        }
    }
    if p.window.is_some_and(|w| w > 512 << 20) {
        return tell(errno::IEBUFSIZE, format!("-w {:?}", p.window));
    }
    if p.mss.is_some_and(|m| m > 9216) {
        return tell(errno::IEMSS, format!("-M {:?} (at most 9216)", p.mss));
    }
    if p.tos.is_some_and(|t| t > 255) {
        return tell(errno::IEBADTOS, format!("-S {:?}", p.tos));
    }
    if p.time == 0.0 && p.num == 0 && p.blockcount == 0 {
        return tell(
            errno::IEDURATION,
            "no -t, -n or -k: the test would never end".into(),
        );
    }
    let length = block_length(p, udp)?;
    if let Some(cc) = &p.congestion {
        let avail = &limits.congestion;
        if !avail.is_empty() && !avail.iter().any(|a| a == cc) {
            return tell(
                errno::IESETCONGESTION,
                format!(
                    "-C {cc}: not available here (available: {})",
                    avail.join(" ")
                ),
            );
        }
    }
    Ok((udp, length))
}

/// The block length the test asks for (`-l`), or iperf3's default, within iperf3's bounds.
fn block_length(p: &Params, udp: bool) -> Result<u64, Fail> {
    let tell = |code: i32, why: String| Err((code, why));
    Ok(match (udp, p.len) {
        (false, None | Some(0)) => 128 * 1024,
        (false, Some(l)) if l > 1 << 20 => {
            return tell(errno::IEBLOCKSIZE, format!("-l {l} (at most 1048576)"))
        }
        (true, None | Some(0)) => 1460,
        (true, Some(l)) => {
            let min = if p.udp_counters_64bit { 16 } else { 12 };
            if !(min..=65_507).contains(&l) {
                return tell(
                    errno::IEUDPBLOCKSIZE,
                    format!("-l {l} ({min} to 65507 for UDP)"),
                );
            }
            l
        }
        (false, Some(l)) => l,
    })
}

/// The test the parameters describe, as hakaru's own spec.
fn spec_of(p: &Params, udp: bool, length: u64) -> TestSpec {
    let direction = if p.bidirectional {
        Direction::Bidir
    } else if p.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let amount = if p.time > 0.0 {
        Amount::Time(Dur(
            Duration::try_from_secs_f64(p.time).unwrap_or(Duration::from_secs(86_400))
        ))
    } else if p.num > 0 {
        Amount::Bytes(Bytes(p.num))
    } else {
        Amount::Blocks(p.blockcount)
    };
    let omit = Dur(Duration::try_from_secs_f64(p.omit).unwrap_or_default());
    let window = p.window.map(Bytes);
    let tos = p.tos.map(|t| t as u8);
    if udp {
        TestSpec::Udp(UdpSpec {
            flows: p.parallel,
            direction,
            amount,
            omit,
            length: Bytes(length),
            rate: match p.bandwidth {
                Some(0) => UdpRate::Unlimited,
                Some(b) => UdpRate::Bits(BitRate(b as f64)),
                None => UdpRate::Bits(BitRate(1_048_576.0)),
            },
            window,
            tos,
            ..UdpSpec::default()
        })
    } else {
        TestSpec::Tcp(TcpSpec {
            flows: p.parallel,
            direction,
            amount,
            omit,
            length: Bytes(length),
            window,
            mss: p.mss,
            congestion: p.congestion.clone(),
            nodelay: p.nodelay,
            tos,
            zerocopy: p.zerocopy,
            // --skip-rx-copy: the server's receivers drop the data with MSG_TRUNC as stock
            // iperf3 does (hakaru's --discard); its senders are unchanged.
            discard: p.skip_rx_copy,
            mptcp: p.mptcp,
            ..TcpSpec::default()
        })
    }
}

/// What the server allows this test to send: `--max-rate`.
fn check_send_rate(p: &Params, spec: &TestSpec, limits: &Limits) -> Result<(), Fail> {
    let max_rate = limits.max_rate;
    let server_sends = p.reverse || p.bidirectional;
    if let TestSpec::Udp(u) = spec {
        let rate = match u.rate {
            UdpRate::Bits(b) if b.0 > 0.0 => Some(b.0),
            _ => None,
        };
        crate::limits::check_send_rate(max_rate, server_sends, rate, u.flows)
            .map_err(|why| (errno::IEUDPBLOCKSIZE, why))
    } else {
        // TCP: -b paces each stream; without it the server sends as fast as it can.
        let rate = p.bandwidth.filter(|&b| b > 0).map(|b| b as f64);
        crate::limits::check_send_rate(max_rate, server_sends, rate, p.parallel)
            .map_err(|why| (errno::IETOTALRATE, why))
    }
}
