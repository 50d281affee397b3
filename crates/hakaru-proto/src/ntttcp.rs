//! ntttcp-for-linux's sender/receiver sync protocol (ntttcp 1.4.x), sans-IO.
//!
//! A stock `ntttcp -r` whose first data port is P listens for sync connections on P - 1. Every
//! message either way is one 4-byte big-endian signed integer (a "word"); a word is either a
//! command letter (its ASCII code) or a number. What the stock binaries put on the wire (captured
//! on loopback, docs/protocol-notes.md "ntttcp 1.4.3"):
//!
//! ```text
//! sender                         receiver
//! 'X' (query state)        ->
//!                          <-    11 (not started) | 12 (running: busy) | 13 (finished)
//! seconds (W + t + C)      ->
//!                          <-    negotiated seconds (0: run until stopped)
//!   ... data connections to P, P+1, ... ...
//! 'R' (run) | 'L' (last)   ->
//!                          <-    'R' | 'W' (wait for the last sender, then 'R') | 'E' (refused)
//!   ... data for the negotiated time ...
//! 'E' (stopped early)      ->    (only when the sender ran less than the negotiated time)
//!                          <-    the receiver's state
//! ```
//!
//! The receiver tells commands from durations only by value, so a proposed duration of 69, 76,
//! 82 or 88 seconds reads as 'E', 'L', 'R' or 'X' ([`command_duration`]). No results travel over
//! the wire; each side prints its own. Windows NTttcp syncs differently (see the notes) and is
//! not spoken here.
//!
//! Nothing here indexes into peer bytes: words are read with `first_chunk`.

/// The first data port of a stock receiver; its sync port is this minus one.
pub const DEFAULT_PORT: u16 = 5001;
/// Data ports a stock receiver listens on by default (`-P`).
pub const DEFAULT_PORTS: u16 = 16;
/// Most data ports a stock receiver listens on (`-P`, `-m`).
pub const MAX_PORTS: u16 = 512;
/// Most senders in one multi-sender test (`-M` on the receiver; the last seat is kept for
/// the sender with `-L`).
pub const MAX_SENDERS: usize = 8;
/// Bytes of one word.
pub const WORD_LEN: usize = 4;

/// Receiver states, the answers to [`Request::Query`] and [`Request::Exit`].
pub mod state {
    /// The receiver does not know (stock: before its first test).
    pub const UNKNOWN: i32 = 10;
    /// No test is running: a sender may start one.
    pub const NOT_STARTED: i32 = 11;
    /// A test is running: the sender gives up ("receiver is busy").
    pub const RUNNING: i32 = 12;
    /// The test has finished.
    pub const FINISHED: i32 = 13;
}

/// 'E': from the sender, it stopped before the negotiated time; from the receiver, a refusal.
pub const EXIT: i32 = b'E' as i32;
/// 'X': the sender asks the receiver's state.
pub const QUERY: i32 = b'X' as i32;
/// 'R': the sender asks to start; the receiver's go.
pub const RUN: i32 = b'R' as i32;
/// 'L': the last of several senders asks to start (`-L`).
pub const LAST: i32 = b'L' as i32;
/// 'W': the receiver's "wait for the last sender".
pub const WAIT: i32 = b'W' as i32;

/// A word from a sender, as a receiver reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// 'E': the sender stopped before the negotiated time.
    Exit,
    /// 'X': what is the receiver's state?
    Query,
    /// 'R': start (or, with several senders, wait for the last one).
    Run,
    /// 'L': the last sender: start everyone.
    Last,
    /// Any other value: the sender's proposed test cycle in seconds (warm-up + time +
    /// cool-down; 0 runs until stopped).
    Duration(i32),
}

impl Request {
    /// How a receiver reads `word`.
    pub fn from_word(word: i32) -> Request {
        match word {
            EXIT => Request::Exit,
            QUERY => Request::Query,
            RUN => Request::Run,
            LAST => Request::Last,
            n => Request::Duration(n),
        }
    }

    /// The word on the wire.
    pub fn word(self) -> i32 {
        match self {
            Request::Exit => EXIT,
            Request::Query => QUERY,
            Request::Run => RUN,
            Request::Last => LAST,
            Request::Duration(n) => n,
        }
    }

    /// The bytes on the wire.
    pub fn encode(self) -> [u8; WORD_LEN] {
        encode(self.word())
    }
}

/// A duration a receiver would read as a command: `Some(letter)` for 69, 76, 82 and 88 s.
pub fn command_duration(secs: i32) -> Option<char> {
    match Request::from_word(secs) {
        Request::Duration(_) => None,
        r => char::from_u32(r.word() as u32),
    }
}

/// One word, big-endian.
pub fn encode(word: i32) -> [u8; WORD_LEN] {
    word.to_be_bytes()
}

/// The first word of `bytes`, if it holds four.
pub fn decode(bytes: &[u8]) -> Option<i32> {
    bytes
        .first_chunk::<WORD_LEN>()
        .map(|b| i32::from_be_bytes(*b))
}

/// Words from a byte stream that arrives in pieces. Holds at most three bytes between words.
#[derive(Debug, Default, Clone)]
pub struct Words {
    partial: Vec<u8>,
}

impl Words {
    /// An empty reader.
    pub fn new() -> Words {
        Words::default()
    }

    /// Takes `bytes` and gives the whole words they complete, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<i32> {
        let mut out = Vec::with_capacity((self.partial.len() + bytes.len()) / WORD_LEN);
        let mut rest = bytes;
        if !self.partial.is_empty() {
            let need = WORD_LEN - self.partial.len();
            let (head, tail) = rest.split_at(need.min(rest.len()));
            self.partial.extend_from_slice(head);
            rest = tail;
            match decode(&self.partial) {
                Some(w) => {
                    out.push(w);
                    self.partial.clear();
                }
                None => return out,
            }
        }
        let mut chunks = rest.chunks_exact(WORD_LEN);
        for c in chunks.by_ref() {
            if let Some(w) = decode(c) {
                out.push(w);
            }
        }
        self.partial.extend_from_slice(chunks.remainder());
        out
    }

    /// Bytes of an unfinished word held.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }
}

/// How a sender reads the receiver's answer to its 'R' or 'L'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartReply {
    /// 'R': go.
    Run,
    /// 'W': wait for the last sender's 'L'; an 'R' follows.
    Wait,
    /// Anything else ('E' from a stock receiver): refused.
    Refused(i32),
}

impl StartReply {
    /// The reply `word`.
    pub fn from_word(word: i32) -> StartReply {
        match word {
            RUN => StartReply::Run,
            WAIT => StartReply::Wait,
            n => StartReply::Refused(n),
        }
    }
}

/// A receiver state in words, for messages.
pub fn state_name(state: i32) -> String {
    match state {
        state::UNKNOWN => "unknown".into(),
        state::NOT_STARTED => "not started".into(),
        state::RUNNING => "running".into(),
        state::FINISHED => "finished".into(),
        n => format!("{n} (not an ntttcp state)"),
    }
}

/// A word in words: a command letter when it is one, else the number.
pub fn word_name(word: i32) -> String {
    match word {
        EXIT | QUERY | RUN | LAST | WAIT => {
            format!("'{}'", char::from_u32(word as u32).unwrap_or('?'))
        }
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stock sender's sync bytes, captured with strace on loopback (`ntttcp -s -t 2 -m
    /// 2,*,127.0.0.1` against `ntttcp -r -t 3`): 'X', 2 s, 'R', then 'E' after its 2 s
    /// (shorter than the negotiated 3).
    const SENDER: [u8; 16] = [0, 0, 0, 0x58, 0, 0, 0, 0x02, 0, 0, 0, 0x52, 0, 0, 0, 0x45];
    /// The stock receiver's answers to it: not started, 3 s, 'R'.
    const RECEIVER: [u8; 12] = [0, 0, 0, 0x0b, 0, 0, 0, 0x03, 0, 0, 0, 0x52];

    #[test]
    fn reads_a_captured_sender() {
        let words = Words::new().feed(&SENDER);
        let reqs: Vec<Request> = words.into_iter().map(Request::from_word).collect();
        assert_eq!(
            reqs,
            vec![
                Request::Query,
                Request::Duration(2),
                Request::Run,
                Request::Exit
            ]
        );
        let enc: Vec<u8> = reqs.iter().flat_map(|r| r.encode()).collect();
        assert_eq!(enc, SENDER);
    }

    #[test]
    fn reads_a_captured_receiver() {
        let w = Words::new().feed(&RECEIVER);
        assert_eq!(w, vec![state::NOT_STARTED, 3, RUN]);
        assert_eq!(StartReply::from_word(RUN), StartReply::Run);
        assert_eq!(StartReply::from_word(WAIT), StartReply::Wait);
        assert_eq!(StartReply::from_word(EXIT), StartReply::Refused(EXIT));
        // A multi-sender receiver's 'W' then 'R', as captured.
        assert_eq!(
            Words::new().feed(&[0, 0, 0, 0x57, 0, 0, 0, 0x52]),
            vec![WAIT, RUN]
        );
    }

    #[test]
    fn words_split_anywhere_come_out_whole() {
        for cut in 0..=SENDER.len() {
            let (a, b) = SENDER.split_at(cut);
            let mut w = Words::new();
            let mut got = w.feed(a);
            got.extend(w.feed(b));
            assert_eq!(got, vec![QUERY, 2, RUN, EXIT], "cut at {cut}");
            assert_eq!(w.pending(), 0);
        }
        let mut w = Words::new();
        for &b in &SENDER[..6] {
            let _ = w.feed(&[b]);
        }
        assert_eq!(w.pending(), 2);
        assert_eq!(w.feed(&[]), Vec::<i32>::new());
    }

    #[test]
    fn short_input_is_none_and_negative_numbers_survive() {
        assert_eq!(decode(&[0, 0, 1]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&encode(-1)), Some(-1));
        assert_eq!(Request::from_word(-5), Request::Duration(-5));
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff, 9]), Some(-1));
    }

    #[test]
    fn durations_that_read_as_commands_are_named() {
        assert_eq!(command_duration(82), Some('R'));
        assert_eq!(command_duration(69), Some('E'));
        assert_eq!(command_duration(76), Some('L'));
        assert_eq!(command_duration(88), Some('X'));
        assert_eq!(command_duration(60), None);
        assert_eq!(command_duration(87), None);
    }

    #[test]
    fn names_are_readable() {
        assert_eq!(state_name(state::RUNNING), "running");
        assert_eq!(state_name(99), "99 (not an ntttcp state)");
        assert_eq!(word_name(WAIT), "'W'");
        assert_eq!(word_name(-3), "-3");
    }
}
