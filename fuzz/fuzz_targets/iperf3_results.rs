//! iperf3's results as hakaru's server reads them: the document parsed into typed fields, and
//! the control bytes after the parameters (state bytes until TEST_END, the framed results,
//! the server's answer with its output, IPERF_DONE), split where the input says.
#![no_main]

use hakaru_proto::iperf3::Results;
use libfuzzer_sys::fuzz_target;

/// The integers of a document, as hakaru writes them back.
fn counts(r: &Results) -> Vec<i64> {
    let mut v = vec![r.sender_has_retransmits, r.streams.len() as i64];
    for s in &r.streams {
        v.extend([
            s.id,
            s.bytes as i64,
            s.retransmits,
            s.errors,
            s.packets,
            s.omitted_errors.unwrap_or(0),
            s.omitted_packets.unwrap_or(0),
        ]);
    }
    v
}

fuzz_target!(|data: &[u8]| {
    // The message's body.
    if let Ok(r) = Results::parse(data) {
        assert!(r.streams.iter().all(|s| s.bytes <= i64::MAX as u64));
        let again = Results::parse(r.to_json().to_string().as_bytes())
            .expect("hakaru reads what it writes");
        assert_eq!(counts(&again), counts(&r));
    }
    // A session: two bytes pick the test, one where the bytes are split.
    if let [a, b, cut, rest @ ..] = data {
        let cut = (*cut as usize).min(rest.len());
        if let Some(v) =
            hakaru_server::fuzzing::iperf3_session([*a, *b], &[&rest[..cut], &rest[cut..]])
        {
            // What the server answers, hakaru's client reads.
            Results::parse(v.to_string().as_bytes()).expect("the server's results read back");
        }
    }
});
