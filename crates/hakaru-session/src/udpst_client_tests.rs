#![allow(clippy::indexing_slicing)]

use std::collections::VecDeque;

use super::*;
use crate::udpst::{Limits, UdpstTest};
use crate::udpst_pace::{Pacer, CATCH_UP_COARSE};
use hakaru_proto::udpst::{SetupCode, SetupRequest};

fn spec(dir: UdpstDirection) -> UdpstSpec {
    UdpstSpec {
        server: "127.0.0.1:24601".into(),
        direction: dir,
        duration_s: 5,
        jumbo: true,
        traditional: false,
        row: None,
        start_only: false,
        max_mbps: 0,
        algorithm_c: false,
        trial_ms: 50,
        sub_interval_ms: 1000,
    }
}

fn wall_at(t0: Instant, now: Instant) -> Wall {
    let d = now.saturating_duration_since(t0);
    (1000 + d.as_secs() as u32, d.subsec_nanos())
}

#[test]
fn setup_request_says_what_was_asked() {
    let mut s = spec(UdpstDirection::Up);
    s.max_mbps = 300;
    s.traditional = true;
    let (_, req) = UdpstClient::new(&s, 77, false, Instant::now());
    let r = SetupRequest::parse(&req).unwrap();
    assert_eq!(r.version, 20);
    assert_eq!((r.mc_index, r.mc_count, r.mc_ident), (0, 1, 77));
    assert_eq!((r.max_bandwidth, r.upstream), (300, true));
    assert_eq!(r.modifiers, u::MOD_JUMBO | u::MOD_TRADITIONAL);
}

#[test]
fn activation_request_round_trips() {
    let mut s = spec(UdpstDirection::Down);
    s.row = Some(100);
    s.start_only = true;
    s.algorithm_c = true;
    let (c, _) = UdpstClient::new(&s, 1, false, Instant::now());
    let a = Activation::parse(&c.activation_request()).unwrap();
    assert_eq!(a.command, u::ACT_DOWNSTREAM);
    assert_eq!(
        (a.sr_index_conf, a.modifiers, a.rate_adj_algo),
        (100, u::SRIDX_ISSTART, 1)
    );
    assert_eq!(
        (a.trial_int, a.test_int_time, a.sub_int_period),
        (50, 5, 1000)
    );
    assert_eq!(
        (a.low_thresh, a.upper_thresh, a.seq_err_thresh),
        (30, 90, 10)
    );
}

#[test]
fn a_refused_setup_fails_with_the_reason() {
    let t0 = Instant::now();
    let (mut c, req) = UdpstClient::new(&spec(UdpstDirection::Down), 5, false, t0);
    let mut resp = SetupRequest::parse(&req)
        .unwrap()
        .response(SetupCode::BadVersion, 0);
    resp[2..4].copy_from_slice(&21u16.to_be_bytes());
    assert_eq!(c.on_control(&resp, t0), None);
    match c.phase() {
        Phase::Failed(why) => assert!(why.contains("protocol version 20"), "{why}"),
        p => panic!("{p:?}"),
    }
}

#[test]
fn silence_fails_in_each_phase_by_its_deadline() {
    let t0 = Instant::now();
    let (mut c, _) = UdpstClient::new(&spec(UdpstDirection::Down), 5, false, t0);
    assert!(c
        .on_tick(t0 + Duration::from_millis(2900), (0, 0))
        .is_none());
    assert_eq!(c.phase(), &Phase::Setup);
    c.on_tick(t0 + SETUP_WAIT, (0, 0));
    assert!(matches!(c.phase(), Phase::Failed(w) if w.contains("no setup response")));

    let (mut c, req) = UdpstClient::new(&spec(UdpstDirection::Up), 5, false, t0);
    let ok = SetupRequest::parse(&req)
        .unwrap()
        .response(SetupCode::Ack, 4000);
    assert_eq!(c.on_control(&ok, t0), Some(4000));
    c.on_tick(t0 + ACTIVATION_WAIT, (0, 0));
    assert!(matches!(c.phase(), Phase::Failed(w) if w.contains("activation")));

    // Activated, then nothing: the watchdog ends it without a result.
    let (mut c, req) = UdpstClient::new(&spec(UdpstDirection::Down), 5, false, t0);
    let ok = SetupRequest::parse(&req)
        .unwrap()
        .response(SetupCode::Ack, 4000);
    c.on_control(&ok, t0);
    let act = Activation::parse(&c.activation_request()).unwrap();
    c.on_datagram(&act.response(u::ACT_ACK, None), t0, (0, 0));
    assert_eq!(c.phase(), &Phase::Testing);
    for ms in (0..=3000).step_by(10) {
        c.on_tick(t0 + Duration::from_millis(ms), (0, 0));
    }
    assert!(matches!(c.phase(), Phase::Failed(w) if w.contains("silent")));
}

#[test]
fn a_rejected_activation_fails() {
    let t0 = Instant::now();
    let (mut c, req) = UdpstClient::new(&spec(UdpstDirection::Up), 5, false, t0);
    let ok = SetupRequest::parse(&req)
        .unwrap()
        .response(SetupCode::Ack, 4000);
    c.on_control(&ok, t0);
    let act = Activation::parse(&c.activation_request()).unwrap();
    c.on_datagram(&act.response(u::ACT_BADPARAM, None), t0, (0, 0));
    assert!(matches!(c.phase(), Phase::Failed(w) if w.contains("rejected")));
}

#[test]
fn garbage_in_every_phase_neither_panics_nor_hangs() {
    let junk: Vec<Vec<u8>> = vec![
        vec![],
        vec![0xff; 3],
        vec![0xAC, 0xE1],
        vec![0u8; u::SETUP_LEN],
        vec![0xffu8; u::ACT_LEN],
        vec![0xffu8; u::STATUS_LEN],
        vec![0xBE, 0xEF, 9, 9, 0, 0, 0, 1],
        {
            let mut b = vec![0u8; 64];
            LoadHdr {
                seq: u32::MAX,
                spdu_time: (u32::MAX, u32::MAX),
                ..Default::default()
            }
            .write(&mut b);
            b
        },
    ];
    for dir in [UdpstDirection::Up, UdpstDirection::Down] {
        let t0 = Instant::now();
        let (mut c, req) = UdpstClient::new(&spec(dir), 0, true, t0);
        for j in &junk {
            c.on_control(j, t0);
            c.on_datagram(j, t0, (0, 0));
        }
        let ok = SetupRequest::parse(&req)
            .unwrap()
            .response(SetupCode::Ack, 1);
        c.on_control(&ok, t0);
        for j in &junk {
            c.on_datagram(j, t0, (u32::MAX, u32::MAX));
        }
        let act = Activation::parse(&c.activation_request()).unwrap();
        c.on_datagram(&act.response(u::ACT_ACK, None), t0, (0, 0));
        let mut ms = 0;
        while matches!(c.phase(), Phase::Testing) && ms < 20_000 {
            for j in &junk {
                c.on_datagram(j, t0 + Duration::from_millis(ms), (u32::MAX, 0));
            }
            c.on_tick(t0 + Duration::from_millis(ms), (0, u32::MAX));
            ms += 7;
        }
        assert!(ms < 20_000, "{dir:?} still testing");
        let _ = c.result();
    }
}

/// A bottleneck: `bps` at L3, a queue of at most `queue`, then `delay`.
struct Link {
    bps: f64,
    queue: Duration,
    delay: Duration,
    free_at: Option<Instant>,
    q: VecDeque<(Instant, Vec<u8>)>,
}

impl Link {
    fn new(bps: f64, queue_ms: u64) -> Self {
        Link {
            bps,
            queue: Duration::from_millis(queue_ms),
            delay: Duration::from_millis(1),
            free_at: None,
            q: VecDeque::new(),
        }
    }
    fn send(&mut self, now: Instant, b: Vec<u8>) {
        let start = self.free_at.map_or(now, |f| f.max(now));
        if start - now > self.queue {
            return; // tail drop
        }
        let tx = Duration::from_secs_f64((b.len() + 28) as f64 * 8.0 / self.bps);
        self.free_at = Some(start + tx);
        self.q.push_back((start + tx + self.delay, b));
    }
    fn recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.q.front()?.0 <= now {
            return self.q.pop_front().map(|x| x.1);
        }
        None
    }
}

/// The client machine against the server machine over a `cap_bps` bottleneck in the load's
/// direction; gives the client's result.
fn pair(dir: UdpstDirection, cap_bps: f64, row: Option<u16>) -> UdpstResult {
    let t0 = Instant::now();
    let mut s = spec(dir);
    s.row = row;
    let (mut c, req) = UdpstClient::new(&s, 9, false, t0);
    let req = SetupRequest::parse(&req).unwrap();
    assert_eq!(
        c.on_control(&req.response(SetupCode::Ack, 5000), t0),
        Some(5000)
    );
    let lim = Limits {
        max_duration_s: 60,
        max_row: 1152,
    };
    let act = Activation::parse(&c.activation_request()).unwrap();
    let (mut srv, resp) = UdpstTest::new(act, true, false, lim, t0);
    c.on_datagram(&resp, t0, wall_at(t0, t0));
    assert_eq!(c.phase(), &Phase::Testing);
    let mut fwd = Link::new(cap_bps, 20);
    let mut rev = Link::new(1e10, 1000);
    let mut pacer = Pacer::new(t0 + Duration::from_millis(5), 7, CATCH_UP_COARSE);
    let mut sizes = Vec::new();
    let step = Duration::from_micros(100);
    let mut now = t0;
    while now < t0 + Duration::from_secs(15) {
        now += step;
        let wall = wall_at(t0, now);
        sizes.clear();
        match dir {
            UdpstDirection::Up if c.sending() => {
                pacer.due(&c.rate(), now, false, c.stopping(), &mut sizes);
                for &n in &sizes {
                    let mut b = vec![0u8; n as usize];
                    c.next_load(n as u16, now, wall).write(&mut b);
                    fwd.send(now, b);
                }
            }
            UdpstDirection::Down if !srv.ended() => {
                pacer.due(&srv.rate(), now, false, srv.stopping(), &mut sizes);
                for &n in &sizes {
                    let mut b = vec![0u8; n as usize];
                    srv.next_load(n as u16, now, wall).write(&mut b);
                    fwd.send(now, b);
                }
            }
            _ => {}
        }
        while let Some(b) = fwd.recv(now) {
            match dir {
                UdpstDirection::Up => srv.on_load(&LoadHdr::parse(&b).unwrap(), now, wall),
                UdpstDirection::Down => c.on_datagram(&b, now, wall),
            }
        }
        while let Some(b) = rev.recv(now) {
            match dir {
                UdpstDirection::Up => c.on_datagram(&b, now, wall),
                UdpstDirection::Down => srv.on_status(&Status::parse(&b).unwrap(), now),
            }
        }
        if let Some(st) = srv.on_tick(now, wall) {
            rev.send(now, st.to_vec());
        }
        if let Some(b) = c.on_tick(now, wall) {
            match dir {
                UdpstDirection::Up => fwd.send(now, b),
                UdpstDirection::Down => rev.send(now, b),
            }
        }
        if matches!(c.phase(), Phase::Done | Phase::Failed(_)) && srv.ended() {
            break;
        }
    }
    assert_eq!(c.phase(), &Phase::Done, "{dir:?}");
    assert!(srv.ended(), "{dir:?}: the server saw the stop confirmed");
    c.result()
}

#[test]
fn the_search_finds_a_bottleneck_in_both_directions() {
    for dir in [UdpstDirection::Up, UdpstDirection::Down] {
        let r = pair(dir, 50e6, None);
        eprintln!(
            "{dir:?}: max {:.2} Mbit/s (sub-interval {}), mean {:.2}, loss {}",
            r.max_ip_capacity_mbps, r.max_index, r.mean_ip_mbps, r.loss
        );
        assert_eq!(r.sub_intervals.len(), 5, "{dir:?}");
        assert!(!r.ended_by_watchdog);
        assert!(
            r.max_ip_capacity_mbps > 42.0 && r.max_ip_capacity_mbps <= 50.5,
            "{dir:?}: {} Mbit/s over a 50 Mbit/s bottleneck",
            r.max_ip_capacity_mbps
        );
        assert!(r.max_l1_mbps > r.max_l2_mbps && r.max_l2_mbps > r.max_ip_capacity_mbps);
        assert!(r.rtt_min_ms.is_some(), "{dir:?}: RTT from the echo");
    }
}

#[test]
fn a_fixed_row_gives_its_rate_without_loss() {
    for dir in [UdpstDirection::Up, UdpstDirection::Down] {
        let r = pair(dir, 1e9, Some(100));
        assert_eq!(r.loss, 0, "{dir:?}");
        assert!(
            (r.max_ip_capacity_mbps - 100.0).abs() < 2.0,
            "{dir:?}: row 100 gave {}",
            r.max_ip_capacity_mbps
        );
        assert!((r.delivered_percent - 100.0).abs() < 1e-9);
    }
}
