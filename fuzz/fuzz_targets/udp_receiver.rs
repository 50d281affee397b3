//! A UDP receiver's sequence accounting (`hakaru_engine::seq`), fed datagram headers as the
//! receive path reads them (hakaru's 48-bit, iperf3's 32- and 64-bit framing), with huge
//! jumps, duplicates, reordering and the top of each number space, against a model that
//! keeps every sequence number seen.
#![no_main]

use std::collections::HashSet;

use hakaru_engine::seq::{SeqCounts, SeqTracker, WINDOW};
use hakaru_proto::datagram::Framing;
use libfuzzer_sys::fuzz_target;

/// What the tracker must count, with a set for the bitmap.
#[derive(Default)]
struct Model {
    seen: HashSet<u64>,
    c: SeqCounts,
}

impl Model {
    fn on(&mut self, seq: u64) {
        let c = &mut self.c;
        c.received += 1;
        if seq >= c.next_seq {
            c.lost += seq - c.next_seq;
            c.next_seq = seq + 1;
            self.seen.insert(seq);
        } else if c.next_seq - seq > WINDOW {
            c.out_of_order += 1;
            c.lost = c.lost.saturating_sub(1);
        } else if !self.seen.insert(seq) {
            c.duplicates += 1;
        } else {
            c.out_of_order += 1;
            c.lost = c.lost.saturating_sub(1);
        }
    }
}

const LENGTH: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut ops)) = data.split_first() else {
        return;
    };
    let framing = match mode % 3 {
        0 => Framing::Hakaru,
        1 => Framing::Iperf3 { seq64: false },
        _ => Framing::Iperf3 { seq64: true },
    };
    let mut t = SeqTracker::new();
    let mut m = Model::default();
    let mut unsequenced = 0u64;
    let mut last = 0u64;
    let arrival: i128 = 1_700_000_000_000_000_000;
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        let take = |n: usize, ops: &mut &[u8]| -> u64 {
            let n = n.min(ops.len());
            let v = ops[..n].iter().fold(0u64, |s, &b| (s << 8) | u64::from(b));
            *ops = &ops[n..];
            v
        };
        let seq = match op % 8 {
            0 => last.saturating_add(1),
            1 => last.saturating_add(take(1, &mut ops)),
            2 => last.saturating_sub(take(1, &mut ops)),
            3 => last,
            4 => take(8, &mut ops),
            // Just under the top of a number space: 2^32 and 2^48 wrap on the wire.
            5 => [1u64 << 32, 1 << 48, u64::MAX][usize::from(mode / 3 % 3)]
                .saturating_sub(take(1, &mut ops)),
            6 => last.saturating_add(WINDOW - 2 + take(1, &mut ops) % 4),
            _ => {
                t.on_unsequenced();
                unsequenced += 1;
                continue;
            }
        };
        // A sender's own count never reaches the top of 64 bits.
        let seq = seq.min(u64::MAX - 1);
        last = seq;
        let sent_ns = take(2, &mut ops) * 1_000_003;
        // The datagram as the sender frames it, read as the receiver does.
        let mut buf = [0u8; LENGTH];
        framing.write(&mut buf, 0, seq, sent_ns);
        let on_wire = match framing {
            Framing::Hakaru => seq & ((1 << 48) - 1),
            Framing::Iperf3 { seq64: false } => u64::from((seq + 1) as u32).wrapping_sub(1),
            Framing::Iperf3 { seq64: true } => seq,
        };
        let Some(h) = framing.read(&buf, 0) else {
            // iperf3's 32-bit number wrapped to 0, which no sender sends: ignored.
            assert_eq!(on_wire, u64::MAX, "{seq} did not read back");
            continue;
        };
        assert_eq!(h.seq, on_wire);
        let transit = h.sent_ns.map(|sent| {
            (arrival - i128::from(sent)).clamp(i64::MIN as i128, i64::MAX as i128) as i64
        });
        t.on_datagram(h.seq, transit);
        m.on(h.seq);
    }
    let c = t.counts();
    assert_eq!(c.received, m.c.received + unsequenced);
    assert_eq!(
        (c.lost, c.out_of_order, c.duplicates, c.next_seq),
        (m.c.lost, m.c.out_of_order, m.c.duplicates, m.c.next_seq)
    );
    assert!(c.lost <= c.next_seq);
    assert!(c.duplicates + c.out_of_order <= c.received);
    assert!(c.lost + (c.received - unsequenced - c.duplicates) >= c.next_seq);
    if let Some(j) = c.jitter_ns {
        assert!(j.is_finite() && j >= 0.0, "{j}");
    }
});
