#![allow(clippy::indexing_slicing)]

use super::*;
use hakaru_proto::udpst::{Activation, ACT_ID, ACT_LEN};

fn act(cmd: u8, secs: u16) -> Activation {
    let mut b = vec![0u8; ACT_LEN];
    b[0..2].copy_from_slice(&ACT_ID.to_be_bytes());
    b[2..4].copy_from_slice(&20u16.to_be_bytes());
    b[4] = cmd;
    b[12..14].copy_from_slice(&secs.to_be_bytes());
    b[16..18].copy_from_slice(&u::SRIDX_AUTO.to_be_bytes());
    Activation::parse(&b).unwrap()
}

const LIM: Limits = Limits {
    max_duration_s: 60,
    max_row: 1152,
};

#[test]
fn defaults_and_limits_are_applied() {
    let t0 = Instant::now();
    let (t, resp) = UdpstTest::new(
        act(u::ACT_UPSTREAM, 3600),
        true,
        false,
        Limits {
            max_duration_s: 5,
            max_row: 50,
        },
        t0,
    );
    let a = Activation::parse(&{
        let mut r = resp.clone();
        r[5] = 0;
        r
    })
    .unwrap();
    assert_eq!(
        (a.trial_int, a.test_int_time, a.sub_int_period, a.low_thresh),
        (50, 5, 1000, 30)
    );
    assert_eq!(t.dir, Dir::Up);
}

#[test]
fn upstream_clean_load_climbs_and_stops() {
    let t0 = Instant::now();
    let (mut t, _) = UdpstTest::new(act(u::ACT_UPSTREAM, 5), true, false, LIM, t0);
    let mut seq = 0;
    let mut statuses = 0;
    let mut echo = (0, 0);
    for ms in 0..5600u64 {
        let now = t0 + Duration::from_millis(ms);
        let wall = (1000 + (ms / 1000) as u32, ((ms % 1000) * 1_000_000) as u32);
        seq += 1;
        let h = LoadHdr {
            seq,
            udp_payload: 1222,
            lpdu_time: wall,
            spdu_time: echo,
            ..Default::default()
        };
        t.on_load(&h, now, wall);
        if let Some(s) = t.on_tick(now, wall) {
            statuses += 1;
            let s = Status::parse(&s).unwrap();
            assert_eq!(s.seq, statuses);
            echo = s.spdu_time;
        }
    }
    assert!(t.row() > 100, "row {}", t.row());
    assert!(t.stopping());
    assert!(statuses > 100);
    t.on_load(
        &LoadHdr {
            seq: seq + 1,
            test_action: ACTION_STOP2,
            ..Default::default()
        },
        t0,
        (0, 0),
    );
    assert!(t.ended());
}

#[test]
fn downstream_loss_backs_off_and_silence_ends() {
    let t0 = Instant::now();
    let (mut t, _) = UdpstTest::new(act(u::ACT_DOWNSTREAM, 10), true, false, LIM, t0);
    for i in 1..=20 {
        let s = Status {
            seq: i,
            rtt_var_sample: 1,
            ..Default::default()
        };
        t.on_status(&s, t0);
    }
    let high = t.row();
    assert!(high >= 200, "{high}");
    for i in 21..=30 {
        let s = Status {
            seq: i,
            loss: 100,
            rtt_var_sample: 1,
            ..Default::default()
        };
        t.on_status(&s, t0);
    }
    assert!(t.row() < high);
    let h = t.next_load(1222, t0, (1, 2));
    assert_eq!((h.seq, h.udp_payload), (1, 1222));
    assert!(t.on_tick(t0 + WATCHDOG, (0, 0)).is_none());
    assert!(t.ended());
}
