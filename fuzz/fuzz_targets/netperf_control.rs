//! netperf's 656-byte control messages as hakaru's netperf port reads them: the decoder on
//! any bytes, and the session machine fed the bytes in two reads split where the first byte
//! says (so a message may arrive in pieces), then the peer closing; and the same bytes as a
//! netserver's answers to `--netperf`'s client machine, before and during the data phase.
#![no_main]

use std::time::{Duration, Instant};

use hakaru_proto::netperf::{decode_response, decode_results, Request};
use hakaru_session::netperf::client as np_client;
use hakaru_session::netperf::server::{Config, Input, Session};
use hakaru_session::Machine as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for chunk in data.chunks(hakaru_proto::netperf::MSG_LEN) {
        let _ = Request::decode(chunk);
        let _ = decode_response(chunk);
        let _ = decode_results(chunk);
    }
    let now = Instant::now();
    let cfg = Config {
        passphrase: data.first().filter(|&&b| b & 1 == 1).map(|_| b"pass".to_vec()),
        ..Config::default()
    };
    let mut m = Session::new(cfg, now);
    let cut = data.first().map_or(0, |&c| (c as usize * 8).min(data.len()));
    for part in [&data[..cut], &data[cut..]] {
        m.handle(Input::Bytes(part.to_vec()), now);
        while m.poll_output().is_some() {}
    }
    m.handle_timeout(now + Duration::from_secs(3600));
    m.handle(Input::PeerClosed, now);
    while m.poll_output().is_some() {}

    // The client direction: the bytes as netserver's answers.
    let spec = hakaru_model::TestSpec::Tcp(hakaru_model::TcpSpec::default());
    if let Ok(p) = hakaru_session::netperf::request::plan(&spec, false) {
        for req in &p.requests {
            let mut c = np_client::Session::new(req, None, now);
            for part in [&data[..cut], &data[cut..]] {
                c.handle(np_client::Input::Bytes(part.to_vec()), now);
                if c.is_running() {
                    c.handle(np_client::Input::DataDone, now);
                }
                while c.poll_output().is_some() {}
            }
            c.handle_timeout(now + Duration::from_secs(3600));
            c.handle(np_client::Input::Closed, now);
            while c.poll_output().is_some() {}
        }
    }
});
