//! The client machine for a connection-rate test from `connect_port` to the end: this end's
//! interval records, keepalives, the server's silence under --connect-timeout and Ctrl-C;
//! then, unlike a bulk test, this end sends its report first and the server answers with its
//! own (its listener's counts) within [`RESULTS_TIMEOUT`].

use std::time::Instant;

use hakaru_model::{IntervalRecord, SideReport};
use hakaru_proto::Message;

use super::{Ended, Fault, Input, Output, Session, SessionError, State, RESULTS_TIMEOUT};

/// A running connection-rate test.
#[derive(Debug)]
pub(super) struct Run {
    records: Vec<IntervalRecord>,
    pub(super) interrupted: bool,
    last_heard: Instant,
    last_sent: Instant,
    /// The connectors are done; this end's report is on its way.
    local_done: bool,
    /// This end's report, sent, and when the server's answer is due.
    sent: Option<(SideReport, Instant)>,
}

impl Run {
    pub(super) fn new(now: Instant) -> Run {
        Run {
            records: Vec::new(),
            interrupted: false,
            last_heard: now,
            last_sent: now,
            local_done: false,
            sent: None,
        }
    }

    /// The results deadline once this end's report is out; before, the earlier of the next
    /// keepalive and the silence limit.
    pub(super) fn next_deadline(&self, m: &super::Config) -> Instant {
        match &self.sent {
            Some((_, due)) => *due,
            None => (self.last_sent + m.keepalive_every).min(self.last_heard + m.silence),
        }
    }
}

impl Session {
    fn connect_run(&mut self) -> Option<&mut Run> {
        match &mut self.state {
            State::Connecting(r) => Some(r),
            _ => None,
        }
    }

    pub(super) fn on_connect(&mut self, input: Input, now: Instant) {
        let Some(r) = self.connect_run() else { return };
        let waiting = r.sent.is_some();
        match input {
            Input::LocalInterval(rec) if !r.local_done => {
                r.records.push((*rec).clone());
                self.out.push_back(Output::Interval(*rec));
            }
            Input::Message(m) => {
                r.last_heard = now;
                self.on_connect_message(m, waiting);
            }
            Input::Failed(Fault::Closed) => {
                let what = if waiting {
                    "closed the control connection before sending results"
                } else {
                    "closed the control connection mid-test (did it exit?)"
                };
                self.end(self.gone(what.into()));
            }
            Input::Failed(f) if waiting => {
                self.end(self.gone(format!("failed sending results: {f}")))
            }
            Input::Failed(f) => self.end(self.gone(format!("failed mid-test: {f}"))),
            Input::LocalDone { error: Some(e) } if !r.local_done => self.end(SessionError::Flow(e)),
            Input::LocalDone { error: None } if !r.local_done => {
                r.local_done = true;
                self.out.push_back(Output::CollectLocal);
            }
            Input::LocalReport(report) if r.local_done && !waiting => {
                r.sent = Some(((*report).clone(), now + RESULTS_TIMEOUT));
                self.send(Message::Finished { report });
            }
            other => self.out_of_turn(&other),
        }
    }

    fn on_connect_message(&mut self, m: Message, waiting: bool) {
        match m {
            Message::Keepalive => {}
            Message::Error { message } => self.end(SessionError::Server(message)),
            Message::Finished { report } if waiting => self.connect_finished(*report),
            other => {
                let when = if waiting {
                    "instead of results"
                } else {
                    "during the test"
                };
                self.end(SessionError::Server(format!(
                    "unexpected {} message {when}",
                    other.name()
                )))
            }
        }
    }

    pub(super) fn connect_timeout(&mut self, now: Instant) {
        let (silence, keepalive) = (self.cfg.silence, self.cfg.keepalive_every);
        let Some(r) = self.connect_run() else { return };
        let e = match &r.sent {
            Some((_, due)) if now >= *due => format!(
                "sent no results within {} s of the end",
                RESULTS_TIMEOUT.as_secs()
            ),
            Some(_) => return,
            None if now >= r.last_heard + silence => format!(
                "sent nothing for {:.0} s (--connect-timeout): the path or the server is down",
                silence.as_secs_f64()
            ),
            None => {
                if now >= r.last_sent + keepalive {
                    r.last_sent = now;
                    self.send(Message::Keepalive);
                }
                return;
            }
        };
        self.end(self.gone(e));
    }

    /// The server's report is in: the test is over.
    fn connect_finished(&mut self, remote: SideReport) {
        let State::Connecting(r) = std::mem::replace(&mut self.state, State::Ended) else {
            return;
        };
        let Run {
            records,
            interrupted,
            sent,
            ..
        } = *r;
        let Some((local, _)) = sent else { return };
        self.out.push_back(Output::End(Ok(Box::new(Ended {
            local,
            remote,
            intervals: records,
            interrupted,
        }))));
    }
}
