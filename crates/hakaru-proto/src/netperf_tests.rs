//! Unit tests of the netperf codec, on messages captured from stock netperf 2.7.1 against
//! stock netserver on loopback (fuzz/corpus/netperf_control/capture-*).
use super::*;

const TCP_STREAM: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_stream-request.bin");
const TCP_STREAM_RESPONSE: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_stream-response.bin");
const TCP_STREAM_RESULTS: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_stream-results.bin");
const TCP_RR_COUNT: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_rr_count-request.bin");
const UDP_STREAM: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-udp_stream_m14-request.bin");
const MAERTS_CPU: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_maerts_cpu-request.bin");
const MAERTS_CPU_RESULTS: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_maerts_cpu-results.bin");
const CRR: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-tcp_crr_passphrase-request.bin");
const PASSPHRASE: &[u8] = include_bytes!(
    "../../../fuzz/corpus/netperf_control/capture-tcp_crr_passphrase-passphrase.bin"
);
const UDP_RR: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-udp_rr-request.bin");
const UDP_RR_RESPONSE: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-udp_rr-response.bin");
const UDP_RR_RESULTS: &[u8] =
    include_bytes!("../../../fuzz/corpus/netperf_control/capture-udp_rr-results.bin");

fn omni(msg: &[u8]) -> OmniRequest {
    match Request::decode(msg).unwrap() {
        Request::Omni(o) => *o,
        other => panic!("not omni: {other:?}"),
    }
}

#[test]
fn captured_tcp_stream_request() {
    let o = omni(TCP_STREAM);
    assert_eq!(o.cpu_binding, -1);
    assert_eq!(o.send_buf_size, -1);
    assert_eq!(o.recv_buf_size, -1);
    assert_eq!(o.test_length, 1);
    assert_eq!(o.ipfamily, NF_INET);
    assert_eq!(o.socket_type, NST_STREAM);
    assert_eq!(o.protocol, PROTO_TCP);
    assert_eq!(o.direction, direction::RECV);
    assert!(o.recv_only() && !o.is_rr() && !o.xmit_only());
    assert!(!o.measure_cpu() && !o.connect_test() && !o.no_delay());
    assert_eq!(o.data_port, 0);
    assert_eq!(o.cong_control, "");
}

#[test]
fn captured_counted_rr_udp_maerts_crr() {
    let rr = omni(TCP_RR_COUNT);
    assert_eq!(rr.test_length, -100);
    assert!(rr.is_rr());
    assert_eq!((rr.request_size, rr.response_size), (1, 1));

    let udp = omni(UDP_STREAM);
    assert_eq!((udp.socket_type, udp.protocol), (NST_DGRAM, PROTO_UDP));
    assert!(udp.recv_only());

    let m = omni(MAERTS_CPU);
    assert!(m.xmit_only() && m.measure_cpu());

    let crr = omni(CRR);
    assert!(crr.is_rr() && crr.connect_test());

    let urr = omni(UDP_RR);
    assert_eq!((urr.request_size, urr.response_size), (32, 64));
    assert_eq!(urr.data_port, 40001);
}

#[test]
fn captured_passphrase() {
    assert_eq!(
        Request::decode(PASSPHRASE).unwrap(),
        Request::Passphrase(b"secretword".to_vec())
    );
}

#[test]
fn housekeeping_and_unknown_types() {
    let mut msg = vec![0u8; MSG_LEN];
    msg[3] = kind::CPU_CALIBRATE as u8;
    assert_eq!(Request::decode(&msg).unwrap(), Request::CpuCalibrate);
    msg[3] = kind::DEBUG_ON as u8;
    assert_eq!(Request::decode(&msg).unwrap(), Request::Debug);
    msg[3] = 10; // DO_TCP_STREAM, the legacy test
    assert_eq!(Request::decode(&msg).unwrap(), Request::Other(10));
    msg[2] = 0x01;
    msg[3] = 0xf4; // 500: DO_SCTP_STREAM
    assert_eq!(Request::decode(&msg).unwrap(), Request::Other(500));
    assert_eq!(
        Request::decode(&msg[..100]),
        Err(NetperfError::Length { got: 100 })
    );
    // A passphrase with no NUL fills the message and still decodes.
    let mut p = vec![b'x'; MSG_LEN];
    p[..4].copy_from_slice(&6i32.to_be_bytes());
    match Request::decode(&p).unwrap() {
        Request::Passphrase(w) => assert_eq!(w.len(), SPEC_BYTES),
        other => panic!("{other:?}"),
    }
}

#[test]
fn response_matches_the_captured_layout() {
    let (errno, r) = decode_response(TCP_STREAM_RESPONSE).unwrap();
    assert_eq!(errno, 0);
    assert_eq!(r.recv_buf_size, 131072);
    assert_eq!(r.send_buf_size, 16384);
    // Encoding what was decoded gives the captured header and words back.
    let ours = r.encode();
    assert_eq!(ours.len(), MSG_LEN);
    assert_eq!(
        ours[..8 + RESPONSE_CUTOFF * 4],
        TCP_STREAM_RESPONSE[..8 + RESPONSE_CUTOFF * 4]
    );
}

#[test]
fn results_match_the_captured_layout() {
    let r = decode_results(TCP_STREAM_RESULTS).unwrap();
    assert_eq!(r.bytes_received, 1_614_236_543);
    assert_eq!(r.recv_calls, 13328);
    assert!((r.elapsed_time - 1.002).abs() < 0.01);
    let ours = r.encode();
    // The type word as stock sends it, and the counted words.
    assert_eq!(ours[..8], TCP_STREAM_RESULTS[..8]);
    assert_eq!(ours[8..8 + 4 * 11], TCP_STREAM_RESULTS[8..8 + 4 * 11]);
    assert_eq!(decode_results(&ours).unwrap().cong_control, "bbr");

    let cpu = decode_results(MAERTS_CPU_RESULTS).unwrap();
    assert_eq!(cpu.bytes_sent, 1_934_147_584);
    assert_eq!(cpu.cpu_method, 8);
    assert_eq!(cpu.num_cpus, 2);
    assert!((cpu.cpu_util - 100.0).abs() < 0.001);
}

#[test]
fn wide_counts_split_in_halves() {
    let r = OmniResults {
        bytes_received: (7u64 << 32) | 5,
        bytes_sent: u64::MAX,
        ..OmniResults::default()
    };
    let back = decode_results(&r.encode()).unwrap();
    assert_eq!(back.bytes_received, r.bytes_received);
    assert_eq!(back.bytes_sent, u64::MAX);
}

#[test]
fn answers_are_whole_messages() {
    let e = encode_error(0, ERRNO_UNKNOWN_TEST);
    assert_eq!(e.len(), MSG_LEN);
    assert_eq!(e[4..8], 998i32.to_be_bytes());
    let c = encode_cpu_calibrate(100.0, 2);
    assert_eq!(c[..4], 5i32.to_be_bytes());
    assert_eq!(c[8..12], 100f32.to_bits().to_be_bytes());
    assert_eq!(c[12..16], 2u32.to_be_bytes());
    assert_eq!(encode_debug_ok()[..4], 3i32.to_be_bytes());
    assert!(encode_sysinfo()[8..].starts_with(b",Deprecated"));
}

#[test]
fn no_input_panics() {
    // Every length up to two messages, every fill byte of interest.
    for fill in [0u8, 0xff, 0x61, 0x80] {
        for len in 0..=2 * MSG_LEN {
            let buf = vec![fill; len];
            let _ = Request::decode(&buf);
            let _ = decode_response(&buf);
            let _ = decode_results(&buf);
        }
    }
}

#[test]
fn client_requests_encode_as_stock_netperf_sends_them() {
    // The client direction: every captured request, decoded and encoded again, is the
    // captured message byte for byte (the defaults the struct does not carry included).
    for msg in [
        TCP_STREAM,
        TCP_RR_COUNT,
        UDP_STREAM,
        MAERTS_CPU,
        CRR,
        UDP_RR,
    ] {
        let o = omni(msg);
        assert_eq!(o.encode(), msg, "{o:?}");
    }
    let mut o = omni(TCP_STREAM);
    o.cong_control = "cubic".into();
    o.test_length = -1_000_000;
    assert_eq!(omni(&o.encode()), o);
}

#[test]
fn client_passphrase_is_the_captured_message() {
    assert_eq!(encode_passphrase(b"secretword"), PASSPHRASE);
    // A word longer than the message is cut, and still ends in a NUL.
    let long = encode_passphrase(&[b'a'; 2 * MSG_LEN]);
    assert_eq!(long.len(), MSG_LEN);
    assert_eq!(long[MSG_LEN - 1], 0);
}

#[test]
fn client_reads_a_refusal_and_the_captured_answers() {
    let (errno, _) = decode_response(&encode_error(kind::OMNI_RESPONSE, 93)).unwrap();
    assert_eq!(errno, 93);
    let (errno, _) = decode_response(&encode_error(0, ERRNO_UNKNOWN_TEST)).unwrap();
    assert_eq!(errno, ERRNO_UNKNOWN_TEST);
    let (errno, r) = decode_response(UDP_RR_RESPONSE).unwrap();
    assert_eq!(errno, 0);
    assert_ne!(r.data_port, 0);
    let res = decode_results(UDP_RR_RESULTS).unwrap();
    assert!(res.trans_received > 0);
    assert_eq!(u64::from(res.trans_received) * 32, res.bytes_received);
    assert_eq!(decode_response(&UDP_RR_RESPONSE[1..]), None);
}
