//! The netperf client machine on virtual time, fed the messages a stock netserver sends
//! (built with the codec, whose own tests match them to captures).
#![allow(clippy::indexing_slicing)] // a test may index: a panic there is a failed assertion
use crate::Machine as _;
use std::time::{Duration, Instant};

use hakaru_proto::netperf::{
    encode_error, kind, OmniResponse, OmniResults, Request, ERRNO_UNKNOWN_TEST, MSG_LEN,
};

use super::client::{errno_text, Error, Input, Output, Session, RESPONSE_TIMEOUT, RESULTS_TIMEOUT};
use super::request::plan;
use hakaru_model::{TcpSpec, TestSpec};

fn request() -> hakaru_proto::netperf::OmniRequest {
    let p = plan(&TestSpec::Tcp(TcpSpec::default()), false).expect("plan");
    p.requests.into_iter().next().expect("one")
}

fn response(port: u16) -> Vec<u8> {
    OmniResponse {
        recv_buf_size: 131072,
        receive_size: 131072,
        recv_width: 2,
        send_buf_size: 16384,
        send_size: 16384,
        send_width: 2,
        flags: 0,
        cpu_rate: 0.0,
        data_port: port,
        socket_prio: -1,
        socket_tos: -1,
    }
    .encode()
}

fn results(bytes: u64) -> Vec<u8> {
    OmniResults {
        bytes_received: bytes,
        recv_calls: 7,
        elapsed_time: 10.0,
        ..OmniResults::default()
    }
    .encode()
}

fn drain(s: &mut Session) -> Vec<Output> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

/// A session past the response: the request went out, `Ready` came.
fn running(now: Instant) -> Session {
    let mut s = Session::new(&request(), None, now);
    let sent = drain(&mut s);
    assert!(matches!(sent.as_slice(), [Output::Send(m)] if m.len() == MSG_LEN));
    s.handle(Input::Bytes(response(40000)), now);
    let out = drain(&mut s);
    assert!(
        matches!(out.as_slice(), [Output::Ready(r)] if r.data_port == 40000),
        "{out:?}"
    );
    assert!(s.is_running() && s.timeout().is_none());
    s
}

#[test]
fn whole_test_results_after_the_data() {
    let now = Instant::now();
    let mut s = running(now);
    s.handle(Input::DataDone, now + Duration::from_secs(10));
    assert!(drain(&mut s).is_empty());
    assert_eq!(
        s.timeout(),
        Some(now + Duration::from_secs(10) + RESULTS_TIMEOUT)
    );
    // The results in two pieces, as TCP may deliver them.
    let r = results(123_456);
    s.handle(Input::Bytes(r[..100].to_vec()), now);
    assert!(drain(&mut s).is_empty());
    s.handle(Input::Bytes(r[100..].to_vec()), now);
    let out = drain(&mut s);
    assert!(
        matches!(out.as_slice(), [Output::Results(r), Output::End(Ok(()))] if r.bytes_received == 123_456),
        "{out:?}"
    );
    assert!(s.is_done());
    s.handle(Input::Bytes(results(1)), now);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn the_request_goes_out_after_the_passphrase() {
    let now = Instant::now();
    let mut s = Session::new(&request(), Some(b"word"), now);
    let out = drain(&mut s);
    let [Output::Send(p), Output::Send(r)] = out.as_slice() else {
        panic!("{out:?}");
    };
    assert_eq!(
        Request::decode(p).expect("a message"),
        Request::Passphrase(b"word".to_vec())
    );
    assert!(matches!(Request::decode(r), Ok(Request::Omni(_))));
}

#[test]
fn results_before_the_end_of_the_data_are_kept() {
    // TCP_MAERTS: netserver's timer ends its sending and its results can overtake our last
    // reads; a close after them changes nothing.
    let now = Instant::now();
    let mut s = running(now);
    s.handle(Input::Bytes(results(99)), now);
    s.handle(Input::Closed, now);
    assert!(drain(&mut s).is_empty());
    s.handle(Input::DataDone, now);
    let out = drain(&mut s);
    assert!(
        matches!(out.as_slice(), [Output::Results(r), Output::End(Ok(()))] if r.bytes_received == 99),
        "{out:?}"
    );
}

#[test]
fn a_refusal_names_the_errno() {
    let now = Instant::now();
    let mut s = Session::new(&request(), None, now);
    drain(&mut s);
    s.handle(Input::Bytes(encode_error(0, ERRNO_UNKNOWN_TEST)), now);
    assert_eq!(
        drain(&mut s),
        vec![Output::End(Err(Error::Refused(ERRNO_UNKNOWN_TEST)))]
    );
    assert!(errno_text(ERRNO_UNKNOWN_TEST).contains("998"));
    assert!(errno_text(98).contains("in use"));
}

#[test]
fn an_error_during_the_data_phase_aborts_it() {
    let now = Instant::now();
    let mut s = running(now);
    s.handle(Input::Bytes(encode_error(kind::OMNI_RESPONSE, 104)), now);
    assert_eq!(
        drain(&mut s),
        vec![Output::AbortData, Output::End(Err(Error::DataFailed(104)))]
    );
}

#[test]
fn every_silence_times_out() {
    let now = Instant::now();
    let mut s = Session::new(&request(), None, now);
    drain(&mut s);
    s.handle_timeout(now + RESPONSE_TIMEOUT - Duration::from_millis(1));
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(now + RESPONSE_TIMEOUT);
    let out = drain(&mut s);
    assert!(
        matches!(out.as_slice(), [Output::End(Err(Error::Gone(w)))] if w.contains("test request")),
        "{out:?}"
    );

    let mut s = running(now);
    s.handle(Input::DataDone, now);
    s.handle_timeout(now + RESULTS_TIMEOUT);
    let out = drain(&mut s);
    assert!(
        matches!(out.as_slice(), [Output::End(Err(Error::Gone(w)))] if w.contains("no results")),
        "{out:?}"
    );
}

#[test]
fn closes_and_failures_in_every_phase() {
    let now = Instant::now();
    let mut s = Session::new(&request(), None, now);
    drain(&mut s);
    s.handle(Input::Closed, now);
    assert!(matches!(
        drain(&mut s).as_slice(),
        [Output::End(Err(Error::Gone(_)))]
    ));

    let mut s = running(now);
    s.handle(Input::ReadFailed("reset".into()), now);
    assert_eq!(
        drain(&mut s),
        vec![
            Output::AbortData,
            Output::End(Err(Error::Gone("control connection: reset".into())))
        ]
    );

    let mut s = running(now);
    s.handle(Input::Failed("flow 0: refused".into()), now);
    assert_eq!(
        drain(&mut s),
        vec![
            Output::AbortData,
            Output::End(Err(Error::Flow("flow 0: refused".into())))
        ]
    );

    let mut s = running(now);
    s.handle(Input::DataDone, now);
    s.handle(Input::Closed, now);
    assert!(matches!(
        drain(&mut s).as_slice(),
        [Output::End(Err(Error::Gone(_)))]
    ));
}

#[test]
fn no_input_in_any_phase_panics() {
    let now = Instant::now();
    let inputs = || {
        vec![
            Input::Bytes(vec![0xff; 3 * MSG_LEN + 5]),
            Input::Bytes(vec![0; MSG_LEN]),
            Input::DataDone,
            Input::Bytes(results(1)),
            Input::Failed("x".into()),
            Input::Closed,
            Input::ReadFailed("y".into()),
        ]
    };
    for skip in 0..7 {
        for start in [Session::new(&request(), None, now), running(now)] {
            let mut s = start;
            for (i, input) in inputs().into_iter().enumerate() {
                if i != skip {
                    s.handle(input, now);
                    s.handle_timeout(now + Duration::from_secs(3600));
                    drain(&mut s);
                }
            }
            assert!(s.is_done());
        }
    }
}

#[test]
fn every_input_in_every_state_keeps_the_conventions() {
    let path = || {
        vec![
            Input::Bytes(response(40000)),
            Input::DataDone,
            Input::Bytes(results(123_456)),
        ]
    };
    let inputs = || {
        vec![
            Input::Bytes(vec![0xee; 9]),
            Input::Bytes(vec![0; MSG_LEN]),
            Input::Bytes(response(40000)),
            Input::Bytes(response(40000)[..100].to_vec()),
            Input::Bytes(results(1)),
            Input::Bytes(encode_error(kind::OMNI_RESPONSE, ERRNO_UNKNOWN_TEST)),
            Input::Closed,
            Input::ReadFailed("reset".into()),
            Input::DataDone,
            Input::Failed("data".into()),
        ]
    };
    let answers = || vec![Input::DataDone];
    let n = crate::sweep::Sweep {
        make: &|now| Session::new(&request(), Some(b"secret"), now),
        path: &path,
        inputs: &inputs,
        answers: &answers,
    }
    .run();
    assert_eq!(n, 4 * 10);
}
