//! The client machine from `start` to the end: interval pairing, keepalives, silence, the
//! results deadline and the final reports.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use hakaru_model::{merge_interval, FlowDir, IntervalRecord, IntervalSample, SideReport, TestSpec};
use hakaru_proto::Message;

use super::{Config, Fault, Input, Output, Session, SessionError, State, RESULTS_TIMEOUT};

/// How a test ended: what `run_test` assembles the result from.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// This end's report.
    pub local: SideReport,
    /// The server's report.
    pub remote: SideReport,
    /// Every interval record, both ends' samples merged, in order.
    pub intervals: Vec<IntervalRecord>,
    /// The user stopped the test (Ctrl-C).
    pub interrupted: bool,
}

/// A running test.
#[derive(Debug)]
pub(super) struct Test {
    dirs: BTreeMap<u32, FlowDir>,
    local_s: BTreeMap<u32, IntervalSample>,
    remote_s: BTreeMap<u32, IntervalSample>,
    records: Vec<IntervalRecord>,
    remote: Option<SideReport>,
    local_done: bool,
    pub(super) interrupted: bool,
    /// A latency test: intervals are this end's alone, and the echo runs until `stop`.
    pub(super) ping: bool,
    last_heard: Instant,
    last_sent: Instant,
    results_deadline: Option<Instant>,
}

impl Test {
    pub(super) fn new(spec: &TestSpec, now: Instant) -> Test {
        Test {
            dirs: spec.flow_plan().into_iter().collect(),
            local_s: BTreeMap::new(),
            remote_s: BTreeMap::new(),
            records: Vec::new(),
            remote: None,
            local_done: false,
            interrupted: false,
            ping: matches!(spec, TestSpec::Latency(_)),
            last_heard: now,
            last_sent: now,
            results_deadline: None,
        }
    }

    /// The earliest of the next keepalive, the silence limit and the results deadline.
    pub(super) fn next_deadline(&self, cfg: &Config) -> Instant {
        let keepalive = self.last_sent + cfg.keepalive_every;
        let d = match self.silence_deadline(cfg.silence) {
            Some(s) => keepalive.min(s),
            None => keepalive,
        };
        match self.results_deadline {
            Some(r) if self.remote.is_none() => d.min(r),
            _ => d,
        }
    }

    /// When the server's silence calls it gone. A latency test's echo has said its last word
    /// once its report is in: from then on its silence is no fault.
    fn silence_deadline(&self, silence: Duration) -> Option<Instant> {
        (!(self.ping && self.remote.is_some())).then_some(self.last_heard + silence)
    }

    /// Merges every interval both ends have reported.
    fn pair(&mut self, out: &mut Vec<IntervalRecord>) {
        while let Some((&k, _)) = self.local_s.first_key_value() {
            if !self.remote_s.contains_key(&k) {
                break;
            }
            let (l, r) = (self.local_s.remove(&k), self.remote_s.remove(&k));
            out.push(merge_interval(l.as_ref(), r.as_ref(), &self.dirs));
        }
    }

    /// Merges what is left: intervals only one end reported.
    fn pair_rest(&mut self, out: &mut Vec<IntervalRecord>) {
        let keys: BTreeSet<u32> = self
            .local_s
            .keys()
            .chain(self.remote_s.keys())
            .copied()
            .collect();
        for k in keys {
            out.push(merge_interval(
                self.local_s.get(&k),
                self.remote_s.get(&k),
                &self.dirs,
            ));
        }
        self.local_s.clear();
        self.remote_s.clear();
    }
}

impl Session {
    fn test(&mut self) -> Option<&mut Test> {
        match &mut self.state {
            State::Running(t) | State::Collecting(t) => Some(t),
            _ => None,
        }
    }

    pub(super) fn on_test(&mut self, input: Input, now: Instant) {
        let collecting = matches!(self.state, State::Collecting(_));
        match input {
            Input::LocalSample(s) => {
                if let Some(t) = self.test() {
                    t.local_s.insert(s.index, s);
                }
            }
            Input::LocalInterval(rec) if !collecting => {
                if let Some(t) = self.test().filter(|t| t.ping) {
                    t.records.push((*rec).clone());
                    self.out.push_back(Output::Interval(*rec));
                }
            }
            Input::LocalReport(r) if collecting => return self.finish(*r),
            // The server's report is in: nothing it says or fails to say matters now.
            Input::Message(_) | Input::Failed(_) | Input::LocalDone { .. } if collecting => {}
            Input::Message(m) => self.on_message(m, now),
            Input::Failed(Fault::Closed) => {
                let e = self.gone("closed the control connection mid-test (did it exit?)".into());
                self.end(e)
            }
            Input::Failed(f) => self.end(self.gone(format!("failed mid-test: {f}"))),
            Input::LocalSendDone(sent) => self.send(Message::SendDone { sent }),
            Input::LocalDone { error: Some(e) } if self.test().is_some_and(|t| t.ping) => {
                self.ping_failed(e)
            }
            Input::LocalDone { error: Some(e) } => self.end(SessionError::Flow(e)),
            Input::LocalDone { error: None } => {
                let stop = self.test().is_some_and(|t| {
                    t.local_done = true;
                    t.results_deadline = Some(now + RESULTS_TIMEOUT);
                    t.ping && t.remote.is_none()
                });
                // The echo has not seen this end's flows close: tell it to stop.
                if stop {
                    self.send(Message::Stop);
                }
            }
            other => return self.out_of_turn(&other),
        }
        self.emit_pairs();
        self.check_done();
    }

    fn on_message(&mut self, m: Message, now: Instant) {
        let Some(t) = self.test() else { return };
        t.last_heard = now;
        match m {
            Message::Interval { sample } if !t.ping => {
                t.remote_s.insert(sample.index, sample);
            }
            Message::Keepalive => {}
            Message::SendDone { sent } => self.out.push_back(Output::PeerSendDone(sent)),
            Message::Finished { report } if t.remote.is_none() => t.remote = Some(*report),
            Message::Error { message } => self.end(SessionError::Server(message)),
            other => {
                let e = SessionError::Unexpected {
                    addr: self.cfg.peer.clone(),
                    what: format!("{} message during the test", other.name()),
                };
                self.end(e)
            }
        }
    }

    fn emit_pairs(&mut self) {
        let mut recs = Vec::new();
        if let State::Running(t) = &mut self.state {
            t.pair(&mut recs);
            t.records.extend(recs.iter().cloned());
        }
        self.out.extend(recs.into_iter().map(Output::Interval));
    }

    /// Both ends done: ask the driver for this end's report.
    fn check_done(&mut self) {
        let State::Running(t) = &self.state else {
            return;
        };
        if t.local_done && t.remote.is_some() {
            if let State::Running(t) = std::mem::replace(&mut self.state, State::Ended) {
                self.state = State::Collecting(t);
            }
            self.out.push_back(Output::CollectLocal);
        }
    }

    pub(super) fn test_timeout(&mut self, now: Instant) {
        let silence = self.cfg.silence;
        let keepalive = self.cfg.keepalive_every;
        let Some(t) = self.test() else { return };
        let e = if t.silence_deadline(silence).is_some_and(|d| now >= d) {
            // Latency tests call their stall limit --timeout.
            let flag = if t.ping {
                "--timeout"
            } else {
                "--stall-timeout"
            };
            format!(
                "sent nothing for {:.0} s ({flag}): the path or the server is down",
                silence.as_secs_f64()
            )
        } else if t.remote.is_none() && t.results_deadline.is_some_and(|d| now >= d) {
            format!(
                "sent no results within {} s of the end",
                RESULTS_TIMEOUT.as_secs()
            )
        } else {
            if now >= t.last_sent + keepalive {
                t.last_sent = now;
                self.send(Message::Keepalive);
            }
            return;
        };
        self.end(self.gone(e));
    }

    /// This end's report is in: the intervals left, `finished`, and the end.
    fn finish(&mut self, local: SideReport) {
        let State::Collecting(mut t) = std::mem::replace(&mut self.state, State::Ended) else {
            return;
        };
        let mut recs = Vec::new();
        t.pair_rest(&mut recs);
        t.records.extend(recs.iter().cloned());
        self.out.extend(recs.into_iter().map(Output::Interval));
        self.send(Message::Finished {
            report: Box::new(local.clone()),
        });
        let remote = t.remote.take().unwrap_or_else(|| local.clone());
        // A latency test's flow errors are the pinger's, already handled (`ping_failed`).
        let flow_error = (!t.ping)
            .then(|| {
                local
                    .flows
                    .iter()
                    .chain(remote.flows.iter())
                    .find_map(|f| f.error.clone())
            })
            .flatten();
        let end = match flow_error {
            Some(e) => Err(SessionError::Flow(e)),
            None => Ok(Box::new(Ended {
                local,
                remote,
                intervals: std::mem::take(&mut t.records),
                interrupted: t.interrupted,
            })),
        };
        self.out.push_back(Output::End(end));
    }

    /// The pinger failed (a TCP flow got no reply within --timeout): the path is as good as
    /// down, so the server is told the pinger's own words and the session ends without
    /// waiting for a report that may never cross it.
    fn ping_failed(&mut self, e: String) {
        self.out.clear();
        self.send(Message::Error { message: e.clone() });
        self.state = State::Ended;
        self.out.push_back(Output::End(Err(SessionError::Flow(e))));
    }
}
