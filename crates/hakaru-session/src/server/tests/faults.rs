//! Keys, refusals, silence, limits and peers that leave.

use std::time::{Duration, Instant};

use hakaru_model::{Dur, TestSpec};
use hakaru_proto::auth::Psk;
use hakaru_proto::{Message, PROTOCOL_VERSION};

use super::*;

#[test]
fn the_key_proof_is_checked_and_a_keyed_welcome_says_only_hakaru() {
    let mut t = T::new(config(true));
    let Message::Welcome {
        software,
        unix_time,
        host,
        auth,
        os,
        ..
    } = welcome_of(&t.out)
    else {
        panic!("not a welcome")
    };
    assert_eq!(software, "hakaru");
    assert_eq!((unix_time, host, os), (None, None, None));
    assert_eq!(auth.as_deref(), Some(SERVER_NONCE));
    let psk = Psk::from_text(KEY, "test").expect("key");
    let proof = psk.client_proof(SERVER_NONCE, CLIENT_NONCE);
    let said = t.msg(Message::Auth { proof });
    let [Output::Send(Message::AuthOk { proof, server })] = said.as_slice() else {
        panic!("{said:?}")
    };
    assert!(psk.verify_server(CLIENT_NONCE, SERVER_NONCE, proof));
    assert_eq!(server.as_ref(), Some(&info()));
    assert!(matches!(
        t.request(tcp(1), false).as_slice(),
        [Output::Admit { .. }]
    ));
}

#[test]
fn a_wrong_key_is_answered_after_the_delay_whatever_went_wrong() {
    let wrong = Psk::from_text("another key, long enough as well", "test")
        .expect("key")
        .client_proof(SERVER_NONCE, CLIENT_NONCE);
    let cases = [
        (Message::Auth { proof: wrong }, "wrong key"),
        (
            Message::TestRequest {
                test: Box::new(tcp(1)),
                held_start: false,
            },
            "no key (the server requires --psk-file or HAKARU_PSK)",
        ),
        (Message::Keepalive, "expected auth, got keepalive"),
    ];
    for (m, why) in cases {
        let mut t = T::new(config(true));
        assert!(t.msg(m).is_empty(), "the verdict waits");
        assert!(t
            .advance(AUTH_FAIL_DELAY - Duration::from_millis(1))
            .is_empty());
        // Whatever the client sends meanwhile changes nothing.
        assert!(t.msg(Message::Auth { proof: "x".into() }).is_empty());
        let said = t.advance(Duration::from_millis(1));
        assert!(
            t.told().unwrap_or("").starts_with("authentication failed"),
            "{said:?}"
        );
        assert_eq!(t.ended(), Some(&Ending::AuthFailed(why.into())));
    }
}

#[test]
fn a_client_nonce_that_is_not_one_fails_the_proof() {
    let mut cfg = config(true);
    cfg.info.software = "x".into();
    let now = Instant::now();
    let mut s = Session::new(
        cfg,
        Hello {
            nonce: Some("not hex".into()),
            ..hello()
        },
        now,
    );
    while s.poll_output().is_some() {}
    let proof = Psk::from_text(KEY, "t")
        .expect("key")
        .client_proof(SERVER_NONCE, "not hex");
    s.handle(Input::Message(Message::Auth { proof }), now);
    s.handle_timeout(now + AUTH_FAIL_DELAY);
    let mut out = vec![];
    while let Some(o) = s.poll_output() {
        out.push(o);
    }
    assert!(out.contains(&Output::End(Ending::AuthFailed("wrong key".into()))));
}

#[test]
fn another_protocol_version_is_refused_with_magic_and_an_error() {
    let s = &mut Session::new(
        config(false),
        Hello {
            protocol: PROTOCOL_VERSION + 1,
            ..hello()
        },
        Instant::now(),
    );
    let out: Vec<Output> = std::iter::from_fn(|| s.poll_output()).collect();
    assert_eq!(
        out.first(),
        Some(&Output::SendRaw(hakaru_proto::MAGIC.to_vec()))
    );
    let Some(Output::Send(Message::Error { message })) = out.get(1) else {
        panic!("{out:?}")
    };
    assert!(message.contains("protocol version mismatch"), "{message}");
    assert!(s.is_done());
}

#[test]
fn a_silent_client_before_its_request_is_dropped_without_a_word() {
    let mut t = T::new(config(false));
    let said = t.advance(REQUEST_TIMEOUT);
    assert_eq!(
        said,
        vec![Output::End(Ending::Rejected(
            "no test request within 10 s".into()
        ))]
    );
}

#[test]
fn a_refused_test_is_told_and_local_kinds_never_reach_admission() {
    let mut t = T::new(config(false));
    t.request(tcp(1), false);
    let said = t.input(Input::Refused("too many flows (--max-flows)".into()));
    assert_eq!(
        said,
        vec![
            Output::Send(Message::Refused {
                reason: "too many flows (--max-flows)".into()
            }),
            Output::End(Ending::Rejected("too many flows (--max-flows)".into()))
        ]
    );

    let mut t = T::new(config(false));
    let said = t.request(
        TestSpec::Http(hakaru_model::HttpSpec {
            urls: vec!["http://h/f".into()],
            method: hakaru_model::HttpMethod::Get,
            parallel: 1,
            duration: None,
            bytes: None,
            upload: None,
            range: false,
            headers: vec![],
            insecure: false,
            cacert: None,
            max_redirects: 10,
            interval: Dur::from_secs(1),
            connect_timeout: Dur::from_secs(5),
            stall_timeout: Dur::from_secs(10),
            ip_version: None,
        }),
        false,
    );
    assert!(!said.iter().any(|o| matches!(o, Output::Admit { .. })));
    assert!(matches!(
        said.first(),
        Some(Output::Send(Message::Refused { .. }))
    ));
}

#[test]
fn a_silent_client_mid_test_is_declared_down_and_the_side_torn_down() {
    let mut t = T::running(tcp(1));
    let silence = silence_limit(tcp(1).common().stall_timeout.0);
    let said = t.advance(silence);
    assert!(said.contains(&Output::AbortSide), "{said:?}");
    assert!(t.told().unwrap_or("").contains("(--stall-timeout)"));
}

#[test]
fn a_byte_count_past_max_duration_is_cut_off() {
    let mut cfg = config(false);
    cfg.max_duration = Some(Duration::from_secs(30));
    let mut t = T::new(cfg);
    t.request(tcp(1), false);
    t.admit();
    t.input(Input::PathArrived { flow: 0 });
    for _ in 0..40 {
        t.advance(Duration::from_secs(1));
        t.msg(Message::Keepalive);
    }
    assert_eq!(
        t.told(),
        Some("the test ran past the server's limit of 30 s (--max-duration)")
    );
    assert!(t.out.contains(&Output::AbortSide));
}

#[test]
fn the_client_closing_or_erring_mid_test_tears_the_side_down_quietly() {
    let mut t = T::running(tcp(1));
    t.input(Input::Closed);
    assert_eq!(
        t.ended(),
        Some(&Ending::Aborted {
            why: "the client closed the control connection mid-test".into(),
            told: false
        })
    );
    assert!(t.out.contains(&Output::AbortSide));
    assert_eq!(t.told(), None);

    let mut t = T::running(udp(1));
    t.msg(Message::Error {
        message: "gave up".into(),
    });
    assert_eq!(
        t.ended(),
        Some(&Ending::Aborted {
            why: "the client reported: gave up".into(),
            told: false
        })
    );
}

#[test]
fn shutdown_and_a_failed_start_are_told_to_the_client() {
    let mut t = T::running(tcp(1));
    t.input(Input::Shutdown);
    assert_eq!(t.told(), Some("the server is shutting down"));
    assert!(t.out.contains(&Output::AbortSide));

    let mut t = T::running(tcp(1));
    t.input(Input::Failed("binding CPU 3: no such CPU".into()));
    assert_eq!(t.told(), Some("on the server: binding CPU 3: no such CPU"));
}

#[test]
fn results_are_awaited_for_a_bounded_time() {
    let mut t = T::running(tcp(1));
    t.input(Input::SideDone(report()));
    t.msg(Message::Keepalive);
    assert!(t.ended().is_none());
    t.advance(RESULTS_TIMEOUT);
    assert_eq!(t.ended(), Some(&Ending::Finished));
}
