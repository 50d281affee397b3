//! `--netperf`: which netperf test a hakaru test is, and the omni request that asks a stock
//! netserver for it (docs/protocol-notes.md, "netperf 2.7.1").
//!
//! | hakaru | netperf |
//! |---|---|
//! | `tcp` | TCP_STREAM; `-R`: TCP_MAERTS |
//! | `udp`, `pps` | UDP_STREAM (`-l`: the message size) |
//! | `latency` | TCP_RR; `--udp`: UDP_RR (`-l`: request and response size) |
//! | `connect` | TCP_CRR |
//!
//! `-P N` runs N netperf tests side by side, each on its own control connection, as the cloud
//! guides start N netperf processes. What netperf cannot ask of netserver is refused by name.

use std::time::Duration;

use hakaru_model::{
    Amount, ConnectSpec, Direction, Dur, LatencySpec, LatencyTransport, TcpSpec, TestSpec, UdpSpec,
};
use hakaru_proto::netperf::{self as wire, direction, flag, OmniRequest};

/// Most netperf tests one hakaru run starts (each is a control connection and a data path).
pub const MAX_TESTS: u32 = 256;

/// The netperf tests that make up one hakaru test.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// netperf's name of the test (TCP_STREAM, ...), for the notes.
    pub name: &'static str,
    /// One request per netperf test, in flow order (test i carries flow i).
    pub requests: Vec<OmniRequest>,
}

/// The netperf tests for `spec` against a server reached over IPv6 (`ipv6`) or IPv4; `Err`
/// names the option netperf cannot express.
pub fn plan(spec: &TestSpec, ipv6: bool) -> Result<Plan, String> {
    let (name, base, tests, cpus) = match spec {
        TestSpec::Tcp(t) => tcp(t)?,
        TestSpec::Udp(u) => udp(u)?,
        TestSpec::Latency(l) => latency(l)?,
        TestSpec::Connect(c) => connect(c)?,
        other => {
            return Err(format!(
            "`hakaru {}` has no netperf test (--netperf runs tcp, udp, pps, latency and connect)",
            other.name()
        ))
        }
    };
    if tests > MAX_TESTS {
        return Err(format!(
            "-P {tests}: each flow is a netperf test with a control connection of its own; at most {MAX_TESTS}"
        ));
    }
    let family = if ipv6 { wire::NF_INET6 } else { wire::NF_INET };
    let requests = (0..tests)
        .map(|i| {
            let mut r = base.clone();
            r.ipfamily = family;
            // netperf -T ,N: netserver binds its data loop to one CPU; round robin over the
            // tests.
            if !cpus.is_empty() {
                let cpu = cpus.get(i as usize % cpus.len()).copied().unwrap_or(0);
                r.cpu_binding = i32::try_from(cpu).unwrap_or(-1);
            }
            r
        })
        .collect::<Vec<_>>();
    let mut requests = requests;
    if let TestSpec::Tcp(t) = spec {
        counted(t, &mut requests)?;
    }
    Ok(Plan { name, requests })
}

type Base = (&'static str, OmniRequest, u32, Vec<usize>);

/// A request with stock netperf's defaults: sizes left to netserver, no flags.
fn blank(socket_type: u32, protocol: u32, dir: u32, secs: i32) -> OmniRequest {
    OmniRequest {
        cpu_binding: -1,
        send_buf_size: -1,
        send_size: -1,
        send_width: 0,
        request_size: -1,
        recv_buf_size: -1,
        receive_size: -1,
        recv_width: 0,
        response_size: -1,
        flags: flag::WANT_REM_CONG,
        cpu_rate: 0.0,
        test_length: secs,
        data_port: 0,
        ipfamily: wire::NF_INET,
        socket_type,
        protocol,
        direction: dir,
        netperf_port: 0,
        interval_burst: 0,
        interval_usecs: 0,
        socket_prio: -1,
        socket_tos: -1,
        cong_control: String::new(),
    }
}

/// netperf's `-l SECONDS`: whole seconds, at least 1, the warm-up included.
pub fn whole_seconds(d: Duration) -> Result<i32, String> {
    let secs = d.as_secs_f64().ceil().max(1.0);
    if secs > f64::from(i32::MAX) {
        return Err(format!(
            "a test of {secs} s is longer than netperf can ask for"
        ));
    }
    Ok(secs as i32)
}

fn no_warmup(omit: Dur) -> Result<(), String> {
    if omit.0.is_zero() {
        Ok(())
    } else {
        Err("-O/--omit: netserver counts from the first byte (netperf has no warm-up)".into())
    }
}

fn size(what: &str, v: u64) -> Result<i32, String> {
    i32::try_from(v)
        .map_err(|_| format!("{what} {v}: netperf sizes are at most {} bytes", i32::MAX))
}

fn buffers(r: &mut OmniRequest, window: Option<hakaru_model::Bytes>) -> Result<(), String> {
    if let Some(w) = window {
        let w = size("-w/--window", w.0)?;
        r.send_buf_size = w;
        r.recv_buf_size = w;
    }
    Ok(())
}

fn tcp(t: &TcpSpec) -> Result<Base, String> {
    no_warmup(t.omit)?;
    if t.mptcp {
        return Err("--mptcp: netserver's data sockets are plain TCP".into());
    }
    let (name, dir) =
        match t.direction {
            Direction::Forward => ("TCP_STREAM", direction::RECV),
            Direction::Reverse => ("TCP_MAERTS", direction::XMIT),
            Direction::Bidir => return Err(
                "--bidir: a netperf test moves data one way (TCP_STREAM, or TCP_MAERTS with -R)"
                    .into(),
            ),
        };
    if t.rate_down.is_some() {
        return Err(
            "--bitrate-down: netserver sends as fast as it can (netperf cannot pace it)".into(),
        );
    }
    if t.direction == Direction::Reverse && t.rate.is_some() {
        return Err(
            "-b with -R: netserver sends as fast as it can (netperf cannot pace it)".into(),
        );
    }
    let secs = match t.amount {
        Amount::Time(d) => whole_seconds(d.0)?,
        // Set per test from its share of the count (`counted`).
        Amount::Bytes(_) | Amount::Blocks(_) => -1,
    };
    let mut r = blank(wire::NST_STREAM, wire::PROTO_TCP, dir, secs);
    let len = size("-l/--length", t.length.0)?;
    r.send_size = len;
    r.receive_size = len;
    buffers(&mut r, t.window)?;
    if t.nodelay {
        r.flags |= flag::NO_DELAY;
    }
    if let Some(tos) = t.tos {
        r.socket_tos = i32::from(tos);
    }
    if let Some(cc) = &t.congestion {
        if cc.len() > 15 {
            return Err(format!(
                "-C {cc}: netperf names a congestion control in at most 15 bytes"
            ));
        }
        r.cong_control = cc.clone();
    }
    Ok((name, r, t.flows, t.server_affinity.clone()))
}

/// `-n`/`-k`: each test's share of the count, as netperf's `-l -BYTES`.
fn counted(t: &TcpSpec, requests: &mut [OmniRequest]) -> Result<(), String> {
    for (i, r) in (0u32..).zip(requests.iter_mut()) {
        let Some(bytes) = t.bytes_for_flow(i) else {
            return Ok(());
        };
        let n = i32::try_from(bytes).ok().filter(|&n| n > 0).ok_or_else(|| {
            format!(
                "-n/-k: flow {i} would move {bytes} bytes; a netperf test counts 1 to {} bytes (use more flows or -t)",
                i32::MAX
            )
        })?;
        r.test_length = -n;
    }
    Ok(())
}

fn udp(u: &UdpSpec) -> Result<Base, String> {
    no_warmup(u.omit)?;
    if u.direction != Direction::Forward {
        return Err(
            "-R/--bidir: netperf's UDP_STREAM only sends to netserver (a hakaru server runs UDP both ways)"
                .into(),
        );
    }
    let Amount::Time(d) = u.amount else {
        return Err(
            "-n/-k: netserver ends a UDP_STREAM at netperf's empty datagrams or its timer, never at a count (use -t)"
                .into(),
        );
    };
    let mut r = blank(
        wire::NST_DGRAM,
        wire::PROTO_UDP,
        direction::RECV,
        whole_seconds(d.0)?,
    );
    let len = size("-l/--length", u.length.0)?;
    r.send_size = len;
    r.receive_size = len;
    buffers(&mut r, u.window)?;
    if let Some(tos) = u.tos {
        r.socket_tos = i32::from(tos);
    }
    r.flags = 0;
    Ok(("UDP_STREAM", r, u.flows, u.server_affinity.clone()))
}

fn latency(l: &LatencySpec) -> Result<Base, String> {
    let udp = l.transport == LatencyTransport::Udp;
    if udp && l.rate.is_some() {
        return Err(
            "--rate with --udp: netserver's replies carry no sequence number, so an open loop could not tell a late reply from a lost one (drop --rate, or measure over TCP)"
                .into(),
        );
    }
    let secs = whole_seconds(l.warmup.0 + l.duration.0)?;
    let (name, mut r) = if udp {
        (
            "UDP_RR",
            blank(
                wire::NST_DGRAM,
                wire::PROTO_UDP,
                direction::XMIT | direction::RECV,
                secs,
            ),
        )
    } else {
        let mut r = blank(
            wire::NST_STREAM,
            wire::PROTO_TCP,
            direction::XMIT | direction::RECV,
            secs,
        );
        // hakaru's round trips always run with TCP_NODELAY at both ends (netperf -- -D).
        r.flags |= flag::NO_DELAY;
        ("TCP_RR", r)
    };
    if udp {
        r.flags &= !flag::WANT_REM_CONG;
    }
    let len = size("-l/--length", l.length.0)?;
    r.request_size = len;
    r.response_size = len;
    r.send_width = 1;
    r.recv_width = 1;
    Ok((name, r, l.flows, l.server_affinity.clone()))
}

fn connect(c: &ConnectSpec) -> Result<Base, String> {
    if c.connectors != 1 {
        return Err(format!(
            "-P {}: a netperf TCP_CRR test is one connection at a time; --netperf runs one (-P 1)",
            c.connectors
        ));
    }
    let mut r = blank(
        wire::NST_STREAM,
        wire::PROTO_TCP,
        direction::XMIT | direction::RECV,
        whole_seconds(c.duration.0)?,
    );
    r.flags |= flag::CONNECT_TEST;
    r.request_size = size("--request", c.request.0.max(1))?;
    r.response_size = size("--response", c.response.0.max(1))?;
    r.send_width = 1;
    r.recv_width = 1;
    Ok(("TCP_CRR", r, 1, c.server_affinity.clone()))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // a test may index: a panic there is a failed assertion
mod tests {
    use super::*;
    use hakaru_model::Bytes;

    fn one(spec: &TestSpec) -> OmniRequest {
        let p = plan(spec, false).expect("a plan");
        assert_eq!(p.requests.len(), 1);
        p.requests.into_iter().next().expect("one request")
    }

    #[test]
    fn tcp_maps_to_stream_and_maerts() {
        let t = TcpSpec {
            amount: Amount::Time(Dur(Duration::from_millis(2500))),
            length: Bytes(131072),
            nodelay: true,
            ..TcpSpec::default()
        };
        let r = one(&TestSpec::Tcp(t.clone()));
        assert!(r.recv_only() && !r.is_rr());
        assert_eq!(
            (r.test_length, r.send_size, r.receive_size),
            (3, 131072, 131072)
        );
        assert!(r.no_delay());
        assert_eq!(r.protocol, wire::PROTO_TCP);
        let rev = one(&TestSpec::Tcp(TcpSpec {
            direction: Direction::Reverse,
            ..t
        }));
        assert!(rev.xmit_only());
    }

    #[test]
    fn parallel_flows_are_tests_with_their_share_of_a_count() {
        let t = TcpSpec {
            flows: 2,
            amount: Amount::Bytes(Bytes(3_000_001)),
            server_affinity: vec![1],
            ..TcpSpec::default()
        };
        let p = plan(&TestSpec::Tcp(t), true).expect("a plan");
        assert_eq!(p.name, "TCP_STREAM");
        let lens: Vec<i32> = p.requests.iter().map(|r| r.test_length).collect();
        assert_eq!(-(lens[0] as i64) - (lens[1] as i64), 3_000_001);
        assert!(p
            .requests
            .iter()
            .all(|r| r.ipfamily == wire::NF_INET6 && r.cpu_binding == 1));
    }

    #[test]
    fn udp_latency_and_connect() {
        let u = one(&TestSpec::Udp(UdpSpec {
            length: Bytes(64),
            ..UdpSpec::default()
        }));
        assert_eq!(
            (u.protocol, u.socket_type, u.send_size),
            (wire::PROTO_UDP, wire::NST_DGRAM, 64)
        );
        assert!(u.recv_only());
        let l = one(&TestSpec::Latency(LatencySpec {
            length: Bytes(32),
            ..LatencySpec::default()
        }));
        assert!(l.is_rr() && l.no_delay() && l.protocol == wire::PROTO_TCP);
        assert_eq!((l.request_size, l.response_size), (32, 32));
        let ul = one(&TestSpec::Latency(LatencySpec {
            transport: LatencyTransport::Udp,
            ..LatencySpec::default()
        }));
        assert_eq!(ul.protocol, wire::PROTO_UDP);
        let c = one(&TestSpec::Connect(ConnectSpec {
            connectors: 1,
            ..ConnectSpec::default()
        }));
        assert!(c.connect_test() && c.is_rr());
    }

    #[test]
    fn what_netperf_cannot_express_is_named() {
        let refusal = |s: TestSpec| plan(&s, false).expect_err("refused");
        let e = refusal(TestSpec::Tcp(TcpSpec {
            direction: Direction::Bidir,
            ..TcpSpec::default()
        }));
        assert!(e.contains("--bidir"), "{e}");
        let e = refusal(TestSpec::Tcp(TcpSpec {
            omit: Dur(Duration::from_secs(1)),
            ..TcpSpec::default()
        }));
        assert!(e.contains("-O"), "{e}");
        let e = refusal(TestSpec::Udp(UdpSpec {
            amount: Amount::Blocks(10),
            ..UdpSpec::default()
        }));
        assert!(e.contains("-n/-k"), "{e}");
        let e = refusal(TestSpec::Udp(UdpSpec {
            direction: Direction::Reverse,
            ..UdpSpec::default()
        }));
        assert!(e.contains("-R"), "{e}");
        let e = refusal(TestSpec::Latency(LatencySpec {
            transport: LatencyTransport::Udp,
            rate: Some(100.0),
            ..LatencySpec::default()
        }));
        assert!(e.contains("--rate"), "{e}");
        let e = refusal(TestSpec::Connect(ConnectSpec {
            connectors: 4,
            ..ConnectSpec::default()
        }));
        assert!(e.contains("-P 4"), "{e}");
        let e = refusal(TestSpec::Tcp(TcpSpec {
            amount: Amount::Bytes(Bytes(1 << 40)),
            ..TcpSpec::default()
        }));
        assert!(e.contains("-n/-k"), "{e}");
        let e = refusal(TestSpec::Tcp(TcpSpec {
            flows: 300,
            ..TcpSpec::default()
        }));
        assert!(e.contains("-P 300"), "{e}");
    }
}
