use super::*;

fn setup_bytes(version: u16, bw: u16) -> Vec<u8> {
    let mut b = vec![0u8; SETUP_LEN];
    b[0..2].copy_from_slice(&SETUP_ID.to_be_bytes());
    b[2..4].copy_from_slice(&version.to_be_bytes());
    b[4] = 0;
    b[5] = 1;
    b[6..8].copy_from_slice(&7u16.to_be_bytes());
    b[8] = CREQ_SETUP;
    b[10..12].copy_from_slice(&bw.to_be_bytes());
    b[14] = MOD_JUMBO;
    b
}

#[test]
fn setup_request_reads_and_answers() {
    let r = SetupRequest::parse(&setup_bytes(20, USDIR_BIT | 300)).unwrap();
    assert_eq!((r.version, r.mc_count, r.mc_ident), (20, 1, 7));
    assert_eq!(
        (r.max_bandwidth, r.upstream, r.modifiers),
        (300, true, MOD_JUMBO)
    );
    let resp = r.response(SetupCode::Ack, 40000);
    assert_eq!(resp.len(), SETUP_LEN);
    assert_eq!((resp[8], resp[9]), (CRSP_SETUP, 1));
    assert_eq!(u16::from_be_bytes([resp[12], resp[13]]), 40000);
    let old = SetupRequest::parse(&setup_bytes(9, 0)).unwrap();
    let resp = old.response(SetupCode::BadVersion, 0);
    assert_eq!(u16::from_be_bytes([resp[2], resp[3]]), PROTOCOL_VER);
    assert_eq!(resp[9], SetupCode::BadVersion as u8);
}

#[test]
fn short_long_and_foreign_input_is_an_error() {
    let b = setup_bytes(20, 0);
    for n in [0, 1, 2, 10, SETUP_LEN - 1] {
        assert!(matches!(
            SetupRequest::parse(&b[..n]),
            Err(UdpstError::Size { .. })
        ));
    }
    let mut long = b.clone();
    long.push(0);
    assert!(SetupRequest::parse(&long).is_err());
    let mut bad = b.clone();
    bad[0] = 0x12;
    assert!(matches!(
        SetupRequest::parse(&bad),
        Err(UdpstError::Id { .. })
    ));
    let mut cmd = b.clone();
    cmd[8] = 9;
    assert!(matches!(
        SetupRequest::parse(&cmd),
        Err(UdpstError::Field { .. })
    ));
    assert!(Activation::parse(&[0xAC, 0xE2]).is_err());
    assert!(LoadHdr::parse(&[0xBE, 0xEF, 0, 0]).is_err());
    assert!(Status::parse(&[0u8; STATUS_LEN - 36]).is_err());
    // Every prefix of every PDU: an error, never a panic.
    let st = Status::default().encode();
    for n in 0..STATUS_LEN {
        assert!(Status::parse(&st[..n]).is_err());
        let _ = Activation::parse(&st[..n.min(ACT_LEN)]);
        let _ = LoadHdr::parse(&st[..n]);
    }
}

#[test]
fn checksum_set_is_checked_zero_is_skipped() {
    let mut b = setup_bytes(20, 0);
    assert!(SetupRequest::parse(&b).is_ok());
    let c = checksum(&b);
    b[54..56].copy_from_slice(&c.to_le_bytes());
    assert_eq!(checksum(&b), 0);
    assert!(SetupRequest::parse(&b).is_ok());
    b[20] ^= 1;
    assert!(matches!(
        SetupRequest::parse(&b),
        Err(UdpstError::Checksum { .. })
    ));
}

#[test]
fn activation_round_trip() {
    let mut b = vec![0u8; ACT_LEN];
    b[0..2].copy_from_slice(&ACT_ID.to_be_bytes());
    b[2..4].copy_from_slice(&20u16.to_be_bytes());
    b[4] = ACT_UPSTREAM;
    b[10..12].copy_from_slice(&50u16.to_be_bytes());
    b[12..14].copy_from_slice(&5u16.to_be_bytes());
    b[16..18].copy_from_slice(&SRIDX_AUTO.to_be_bytes());
    b[56..58].copy_from_slice(&1000u16.to_be_bytes());
    let a = Activation::parse(&b).unwrap();
    assert_eq!(
        (a.command, a.trial_int, a.test_int_time),
        (ACT_UPSTREAM, 50, 5)
    );
    assert_eq!((a.sr_index_conf, a.sub_int_period), (SRIDX_AUTO, 1000));
    let (t, _) = sending_rates(true, false);
    let r = a.response(ACT_ACK, Some(t[5]));
    assert_eq!(r[5], ACT_ACK);
    assert_eq!(SendingRate::read(&r, 28), t[5]);
    let again = Activation::parse(&{
        let mut x = r.clone();
        x[5] = 0;
        x
    })
    .unwrap();
    assert_eq!(again.trial_int, 50);
    b[4] = 3;
    assert!(Activation::parse(&b).is_err());
}

#[test]
fn load_and_status_round_trip() {
    let h = LoadHdr {
        test_action: ACTION_STOP2,
        rx_stopped: true,
        seq: 123_456,
        udp_payload: 1222,
        spdu_seq_err: 2,
        spdu_time: (1, 2),
        lpdu_time: (3, 4),
        rtt_resp_delay: 5,
    };
    let mut b = vec![0u8; 1222];
    h.write(&mut b);
    assert_eq!(LoadHdr::parse(&b).unwrap(), h);
    b[2] = 7;
    assert!(LoadHdr::parse(&b).is_err());
    // A burst's template stamped with another datagram's sequence number and size reads
    // as that datagram, every other field the template's; a short buffer is left alone.
    LoadHdr::stamp(&h.to_bytes(), 123_457, 1000, &mut b);
    let next = LoadHdr {
        seq: 123_457,
        udp_payload: 1000,
        ..h
    };
    assert_eq!(LoadHdr::parse(&b).unwrap(), next);
    let mut short = [9u8; 31];
    LoadHdr::stamp(&h.to_bytes(), 1, 1, &mut short);
    h.write(&mut short);
    assert_eq!(short, [9u8; 31]);
    let s = Status {
        seq: 9,
        rate: sending_rates(true, false).0[700],
        sub_int_seq: 3,
        sis: SubIntStats {
            rx_bytes: (5u64 << 32) | 7,
            accum_time: 3000,
            ..Default::default()
        },
        rtt_min: NODEL,
        ti_rx_bytes: 99,
        spdu_time: (10, 11),
        ..Default::default()
    };
    assert_eq!(Status::parse(&s.encode()).unwrap(), s);
}

#[test]
fn sending_rate_table_matches_the_reference() {
    for (j, t) in [(true, false), (false, false), (false, true), (true, true)] {
        let (rows, hs) = sending_rates(j, t);
        assert_eq!(rows.len(), MAX_SENDING_RATES);
        assert_eq!(hs, 1000);
    }
    let (rows, _) = sending_rates(true, false);
    // Row 0: one random add-on datagram every 50 ms; row N (N <= 1000) about N Mbit/s.
    assert_eq!(rows[0].tx_interval2, 50_000);
    assert_eq!(rows[1].l3_bps(), 1e6);
    assert!(
        (rows[100].l3_bps() - 100e6).abs() < 1e6,
        "{}",
        rows[100].l3_bps()
    );
    assert!(
        (rows[1000].l3_bps() - 1000e6).abs() < 1e6,
        "{}",
        rows[1000].l3_bps()
    );
    assert_eq!(rows[1001].payload1, 1375 - 28);
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A stock udpst 9.0.0 server's answers, captured on loopback: the setup response to a
/// request (jumbo, ident 0x1234) and the activation response to an upstream
/// test at fixed row 100 (5 s, trial 50 ms, sub-interval 1000 ms).
const STOCK_SETUP_RESPONSE: &str = "ace100140001123402010000e6b6010000000000000000000000000000000000000000000000000000000000000000000000000000000000";
const STOCK_ACT_RESPONSE: &str = "ace200140101001e005a0032000500000064000a0003000a0100000000000064000004c6000000010000000000000000000000000000000003e800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn a_stock_servers_answers_parse() {
    let r = SetupResponse::parse(&unhex(STOCK_SETUP_RESPONSE)).unwrap();
    assert_eq!((r.version, r.code, r.test_port), (20, 1, 0xe6b6));
    assert_eq!(r.refusal(), None);
    let a = Activation::parse(&unhex(STOCK_ACT_RESPONSE)).unwrap();
    assert_eq!((a.command, a.code), (ACT_UPSTREAM, ACT_ACK));
    assert_eq!(
        (a.trial_int, a.test_int_time, a.sub_int_period),
        (50, 5, 1000)
    );
    assert_eq!(a.sr_index_conf, 100);
    let (rows, _) = sending_rates(true, false);
    assert_eq!(a.start_rate, rows[100]);
}

#[test]
fn client_requests_round_trip() {
    let p = SetupParams {
        version: PROTOCOL_VER,
        mc_ident: 0x1234,
        max_bandwidth: 500,
        upstream: true,
        modifiers: MOD_JUMBO,
    };
    let r = SetupRequest::parse(&p.encode()).unwrap();
    assert_eq!((r.version, r.mc_count, r.mc_ident), (20, 1, 0x1234));
    assert_eq!(
        (r.max_bandwidth, r.upstream, r.modifiers),
        (500, true, MOD_JUMBO)
    );
    // A setup request is not a response, and a refusal is told in words.
    assert!(SetupResponse::parse(&p.encode()).is_err());
    let no = SetupResponse::parse(&r.response(SetupCode::CapacityExceeded, 0)).unwrap();
    assert!(no.refusal().unwrap().contains("capacity"));
    let mut act = Activation::parse(&unhex(STOCK_ACT_RESPONSE)).unwrap();
    act.code = 0;
    act.start_rate = SendingRate::default();
    act.raw = Vec::new();
    let back = Activation::parse(&act.encode()).unwrap();
    assert_eq!(
        (back.command, back.sr_index_conf, back.trial_int, back.code),
        (ACT_UPSTREAM, 100, 50, 0)
    );
    assert_eq!(back.start_rate, SendingRate::default());
}

#[test]
fn ipv4_mapped_peers_are_ipv4_on_the_wire() {
    use super::ipv6_on_wire;
    let at = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
    assert!(!ipv6_on_wire(at("192.0.2.7:24601")));
    assert!(!ipv6_on_wire(at("[::ffff:192.0.2.7]:24601")));
    assert!(ipv6_on_wire(at("[2001:db8::7]:24601")));
    assert!(ipv6_on_wire(at("[::1]:24601")));
    // The deprecated IPv4-compatible form is an IPv6 address on the wire.
    assert!(ipv6_on_wire(at("[::c000:207]:24601")));
}
