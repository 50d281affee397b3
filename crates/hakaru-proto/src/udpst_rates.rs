//! The server's sending-rate table of OB-UDPST (`udpst_srates.c`), row by row.

use super::{put32, u32_at};

/// One row of the sending-rate table: two transmitters, the first every `tx_interval1` µs
/// sending `burst1` datagrams of `payload1` bytes, the second every `tx_interval2` µs sending
/// `burst2` of `payload2` and one add-on datagram of `addon2` bytes (the top bit of a size
/// means "random up to this size").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendingRate {
    /// Transmitter 1 interval (µs), 0 off.
    pub tx_interval1: u32,
    /// Transmitter 1 UDP payload.
    pub payload1: u32,
    /// Transmitter 1 datagrams per interval.
    pub burst1: u32,
    /// Transmitter 2 interval (µs), 0 off.
    pub tx_interval2: u32,
    /// Transmitter 2 UDP payload.
    pub payload2: u32,
    /// Transmitter 2 datagrams per interval.
    pub burst2: u32,
    /// Transmitter 2 add-on datagram size.
    pub addon2: u32,
}

/// The size bit meaning "random up to".
pub const RAND_BIT: u32 = 0x8000_0000;

impl SendingRate {
    pub(crate) fn read(b: &[u8], at: usize) -> Self {
        SendingRate {
            tx_interval1: u32_at(b, at),
            payload1: u32_at(b, at + 4),
            burst1: u32_at(b, at + 8),
            tx_interval2: u32_at(b, at + 12),
            payload2: u32_at(b, at + 16),
            burst2: u32_at(b, at + 20),
            addon2: u32_at(b, at + 24),
        }
    }
    pub(crate) fn write(&self, b: &mut [u8], at: usize) {
        let f = [
            self.tx_interval1,
            self.payload1,
            self.burst1,
            self.tx_interval2,
            self.payload2,
            self.burst2,
            self.addon2,
        ];
        for (i, v) in f.iter().enumerate() {
            put32(b, at + 4 * i, *v);
        }
    }

    /// The row's L3 rate in bit/s over IPv4 (random sizes counted at their maximum / 2).
    pub fn l3_bps(&self) -> f64 {
        let dg = |p: u32| {
            let size = p & !RAND_BIT;
            let size = if p & RAND_BIT != 0 { size / 2 } else { size };
            f64::from(size + L3DG_OVERHEAD) * 8.0
        };
        let mut bps = 0.0;
        if self.tx_interval1 > 0 {
            bps += dg(self.payload1) * f64::from(self.burst1) * 1e6 / f64::from(self.tx_interval1);
        }
        if self.tx_interval2 > 0 {
            let mut per = dg(self.payload2) * f64::from(self.burst2);
            if self.addon2 != 0 {
                per += dg(self.addon2);
            }
            bps += per * 1e6 / f64::from(self.tx_interval2);
        }
        bps
    }
}

/// UDP + IPv4 header bytes.
pub const L3DG_OVERHEAD: u32 = 28;
/// Rows in the table.
pub const MAX_SENDING_RATES: usize = 1153;
const MAX_L3_PACKET: u32 = 1250;
const MAX_JL3_PACKET: u32 = 9000;
const MAX_TL3_PACKET: u32 = 1500;
const MAX_BURST: u32 = 100;

/// The server's sending-rate table (OB-UDPST's `def_sending_rates`): rows 0..=1000 step by
/// about 1 Mbit/s with 1250-byte packets (1500 with `traditional`), then bigger bursts (jumbo
/// payloads first when `jumbo`). Returns the table and the high-speed threshold row.
pub fn sending_rates(jumbo: bool, traditional: bool) -> (Vec<SendingRate>, usize) {
    let (jmax, kmax, payload) = if traditional {
        (11, 8, MAX_TL3_PACKET - L3DG_OVERHEAD)
    } else {
        (9, 10, MAX_L3_PACKET - L3DG_OVERHEAD)
    };
    let mut t: Vec<SendingRate> = Vec::with_capacity(MAX_SENDING_RATES);
    'outer: for k in 0..=kmax {
        for i in 0..10u32 {
            let mut sr = first_transmitter(k, payload);
            if i > 0 {
                sr.tx_interval2 = 1000;
                sr.payload2 = payload;
                sr.burst2 = i;
            }
            let stop_here = k == 0 && i == 0;
            if stop_here {
                sr.tx_interval2 = 50_000;
                sr.addon2 = payload | RAND_BIT;
            }
            t.push(sr);
            if !stop_here && !traditional && k == kmax {
                break;
            }
            for j in 1..=jmax {
                let mut sr = first_transmitter(k, payload);
                sr.tx_interval2 = 1000;
                if i > 0 {
                    sr.payload2 = payload;
                    sr.burst2 = i;
                }
                sr.addon2 = (j * 1000) / 8 - L3DG_OVERHEAD;
                t.push(sr);
                if t.len() > 1000 {
                    break 'outer;
                }
            }
        }
    }
    let hs = t.len() - 1;
    let (jstart, payload) = if jumbo {
        let mut i = MAX_L3_PACKET + 125;
        while i <= MAX_JL3_PACKET {
            t.push(SendingRate {
                tx_interval1: 100,
                payload1: i - L3DG_OVERHEAD,
                burst1: 10,
                ..Default::default()
            });
            i += 125;
        }
        (11, MAX_JL3_PACKET - L3DG_OVERHEAD)
    } else if traditional {
        (9, MAX_TL3_PACKET - L3DG_OVERHEAD)
    } else {
        (11, MAX_L3_PACKET - L3DG_OVERHEAD)
    };
    let mut j = jstart;
    while t.len() < MAX_SENDING_RATES {
        t.push(SendingRate {
            tx_interval1: 100,
            payload1: payload,
            burst1: j.min(MAX_BURST),
            ..Default::default()
        });
        j += 1;
    }
    (t, hs)
}

/// A row's first transmitter: `k` datagrams of `payload` bytes every 100 us (none for k = 0).
fn first_transmitter(k: u32, payload: u32) -> SendingRate {
    if k == 0 {
        return SendingRate::default();
    }
    SendingRate {
        tx_interval1: 100,
        payload1: payload,
        burst1: k,
        ..SendingRate::default()
    }
}
