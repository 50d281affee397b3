//! `--sync-start`: a client that sets its test up, says so, and waits for a coordinator
//! (`hakaru plan`, or any script) to release it by writing `go` on its standard input.
//!
//! Standard input is the coordinator's line: `go` releases the start, `stop` ends the test as
//! Ctrl-C would, and its end (the coordinator or its launcher went away) does the same, so a
//! client never outlives the run that started it.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use hakaru_client::StartGate;
use hakaru_report::export::LiveItem;

use crate::output::{self, Format};

/// Longest a set-up test waits for its `go` (the server's own limit is 120 s).
const HOLD_LIMIT: Duration = Duration::from_secs(110);

/// Starts reading standard input and returns the gate a client passes before it starts.
/// `stop` is the test's stop flag: `stop` or the end of input sets it.
pub fn gate(format: Format, stop: Arc<AtomicBool>) -> StartGate {
    let (tx, rx) = mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("hakaru-sync".into())
        .spawn(move || {
            let mut released = false;
            let mut why = "standard input closed before `go`".to_string();
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match line.trim() {
                    "go" if !released => {
                        released = true;
                        if tx.send(Ok(())).is_err() {
                            break;
                        }
                    }
                    "stop" => {
                        why = "told to stop before `go`".into();
                        break;
                    }
                    "" | "go" => {}
                    other => eprintln!(
                        "hakaru: ignored `{other}` on standard input (--sync-start reads `go` or `stop`)"
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
            Ok(Ok(())) => {
                if let Some(s) = live.item(&LiveItem::Released(hakaru_engine::sys::now_unix())) {
                    output::out(&s);
                }
                Ok(())
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
