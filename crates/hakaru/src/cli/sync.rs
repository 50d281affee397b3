//! `--sync-start`: a client that sets its test up, says so, and waits for a coordinator
//! (`hakaru plan`, or any script) to release it by writing `go` on its standard input.
//!
//! Standard input is the coordinator's line: `go` releases the start, `go AT` releases it at
//! the wall-clock instant AT (Unix seconds, waited for at most a second), `stop` ends the
//! test as Ctrl-C would, and its end (the coordinator or its launcher went away) does the
//! same, so a client never outlives the run that started it.
//!
//! `go AT` is how `hakaru plan` releases many clients together. Writing `go` to a hundred
//! clients and having each woken in turn spreads their starts over tens of milliseconds on a
//! busy machine; with `go AT` a bulk test's instant goes to the server (`start_at`), every
//! thread of both ends is started before it, and at AT only the data threads wake
//! (hakaru_client::StartGate).

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hakaru_client::StartGate;
use hakaru_report::export::LiveItem;

use crate::output::{self, Format};

/// Longest a set-up test waits for its `go` (the server's own limit is 120 s).
const HOLD_LIMIT: Duration = Duration::from_secs(110);

/// A line of standard input: `go`, `go AT`, `stop`, or something else (None).
#[derive(Debug, PartialEq)]
enum Line {
    Go(Option<f64>),
    Stop,
    Blank,
}

fn parse_line(line: &str) -> Option<Line> {
    let mut words = line.split_whitespace();
    let line = match (words.next(), words.next(), words.next()) {
        (None, ..) => Line::Blank,
        (Some("go"), None, _) => Line::Go(None),
        (Some("go"), Some(at), None) => Line::Go(Some(
            at.parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0)?,
        )),
        (Some("stop"), None, _) => Line::Stop,
        _ => return None,
    };
    Some(line)
}

/// Starts reading standard input and returns the gate a client passes before it starts.
/// `stop` is the test's stop flag: `stop` or the end of input sets it.
pub fn gate(format: Format, stop: Arc<AtomicBool>) -> StartGate {
    let (tx, rx) = mpsc::channel::<Result<Option<f64>, String>>();
    std::thread::Builder::new()
        .name("hakaru-sync".into())
        .spawn(move || {
            let mut released = false;
            let mut why = "standard input closed before `go`".to_string();
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match parse_line(&line) {
                    Some(Line::Go(at)) if !released => {
                        released = true;
                        if tx.send(Ok(at)).is_err() {
                            break;
                        }
                    }
                    Some(Line::Stop) => {
                        why = "told to stop before `go`".into();
                        break;
                    }
                    Some(Line::Blank | Line::Go(_)) => {}
                    None => eprintln!(
                        "hakaru: ignored `{}` on standard input (--sync-start reads `go`, `go UNIX_SECONDS` or `stop`)",
                        line.trim()
                    ),
                }
            }
            if !released {
                let _ = tx.send(Err(why));
            }
            stop.store(true, Ordering::Release);
        })
        .ok();
    let rx = Mutex::new(rx);
    StartGate(Arc::new(move || {
        let mut live = format.live(hakaru_report::View::default());
        match live.item(&LiveItem::Ready(hakaru_engine::sys::now_unix())) {
            Some(s) => output::out(&s),
            None => eprintln!("hakaru: the test is set up; waiting for `go` on standard input"),
        }
        let rx = rx
            .lock()
            .map_err(|_| "the start gate is poisoned".to_string())?;
        match rx.recv_timeout(HOLD_LIMIT) {
            Ok(Ok(at)) => {
                // The instant is the client's to wait for (hakaru_client::StartGate): a bulk
                // test's data threads wait for it, after the set-up `start` needs.
                let now = hakaru_engine::sys::now_unix();
                let ahead = at.map(|at| (at - now) * 1000.0);
                if let Some(s) = live.item(&LiveItem::Released(now, ahead)) {
                    output::out(&s);
                }
                Ok(at)
            }
            Ok(Err(why)) => Err(why),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "no `go` on standard input within {} s",
                HOLD_LIMIT.as_secs()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err("standard input could not be read".into())
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_coordinator() {
        assert_eq!(parse_line("go"), Some(Line::Go(None)));
        assert_eq!(parse_line(" go \r"), Some(Line::Go(None)));
        assert_eq!(
            parse_line("go 1764000000.125"),
            Some(Line::Go(Some(1_764_000_000.125)))
        );
        assert_eq!(parse_line("stop"), Some(Line::Stop));
        assert_eq!(parse_line("  "), Some(Line::Blank));
        for bad in [
            "go now", "go -1", "go NaN", "go inf", "go 1 2", "gone", "stop 3",
        ] {
            assert_eq!(parse_line(bad), None, "{bad}");
        }
    }
}
