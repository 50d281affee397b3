//! UDP at one end of a test: paced or unpaced senders, batched receivers with loss, reorder,
//! duplicate and jitter accounting, and the end-of-test [`SideReport`].
//!
//! Threading is as for TCP: one worker per CPU (or per `-A` CPU), each owning a share of the
//! flows on non-blocking sockets. A sender keeps an absolute schedule (datagram `k` is due at
//! `k × gap` after the start), so sleep overshoot never accumulates into a rate error and a
//! late wake-up sends only what is due, up to one batch. Batches go out as one UDP GSO send
//! when the kernel takes it (probed per socket, with fallback on the first EIO/EINVAL), else
//! as one sendmmsg. Receivers take up to a batch per recvmmsg.
//!
//! UDP has no end-of-stream: when a side's senders are done it reports the datagram counts
//! (`on_send_done`), the caller tells the peer over the control connection, and the peer's
//! receivers finish once they have seen that many, once their flow has been quiet for [`QUIET`]
//! (the rest was lost), or after [`LINGER`].

use std::io::{self, IoSlice};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hakaru_model::{FlowDir, IntervalSample, Role, SideReport, UdpPaths, UdpRate, UdpSpec};
use hakaru_proto::datagram::{FlowHello, Framing, Layout};

use crate::seq::SeqTracker;
use crate::side::{spawn_ticker, spawn_workers, Core, DoneFn, FlowMeta, TickerOut};
use crate::sys::{self, AsRawFd};
use crate::tcp::{SideConfig, SideError};

mod worker;
use worker::worker;

/// Longest a receiver waits for stragglers after the peer's senders are done.
pub const LINGER: Duration = Duration::from_secs(2);
/// A receiver whose flow has been quiet this long after the peer's senders are done has seen
/// everything that is coming: the rest was lost (a draining queue keeps datagrams arriving).
pub const QUIET: Duration = Duration::from_millis(100);

/// How long a worker with receivers keeps polling its sockets without sleeping after the last
/// datagram. At high packet rates the queue empties for microseconds at a time; sleeping then
/// means a wake-up per datagram, which the sender's core pays for in the receive softirq
/// (docs/performance-notes.md §3: a spinning receiver was 10-30 % faster). A worker spins
/// only while datagrams come closer together than this: at low rates it sleeps between them,
/// so a hundred slow tests on one server (a fleet's plan step) do not keep every CPU busy
/// polling empty sockets.
const SPIN: Duration = Duration::from_micros(200);

/// Called once when every sender of this side is done, with (flow id, datagrams sent).
pub type SendDoneFn = Box<dyn FnOnce(Vec<(u32, u64)>) + Send>;

/// One UDP flow handed to a side: a socket connected to the peer's socket for the flow.
#[derive(Debug)]
pub struct UdpFlowSocket {
    /// Flow id (unique within the test, under 1024).
    pub id: u32,
    /// Direction the flow carries data.
    pub dir: FlowDir,
    /// This end's role on it.
    pub role: Role,
    /// The connected socket.
    pub socket: UdpSocket,
    /// Exact datagrams to send (senders in -n/-k tests); `None` sends until the deadline.
    pub quota: Option<u64>,
}

/// UDP settings of a side, on top of the common [`SideConfig`].
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Rate of each flow.
    pub rate: UdpRate,
    /// Try UDP GSO on senders.
    pub gso: bool,
    /// Use UDP GRO on receivers.
    pub gro: bool,
    /// Most datagrams per system call.
    pub batch: usize,
    /// Header format of test datagrams.
    pub framing: Framing,
}

impl UdpConfig {
    /// The UDP settings an end whose senders carry direction `sending` takes from the spec
    /// (the client's send up, the server's down).
    pub fn from_spec(spec: &UdpSpec, sending: hakaru_model::FlowDir) -> UdpConfig {
        UdpConfig {
            rate: spec.rate_for(sending),
            gso: spec.gso,
            gro: spec.gro,
            batch: spec.batch as usize,
            framing: Framing::Hakaru,
        }
    }
}

/// A running UDP side of a test.
pub struct UdpRun {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    ticker: Option<JoinHandle<TickerOut>>,
}

struct Shared {
    core: Arc<Core>,
    ucfg: UdpConfig,
    sockets: Vec<UdpSocket>,
    senders_left: AtomicUsize,
    on_send_done: Mutex<Option<SendDoneFn>>,
    /// Set once the peer's senders are done; `peer_sent` then holds their counts.
    peer_done: AtomicBool,
    peer_sent: Mutex<Vec<Option<u64>>>,
    peer_done_at: Mutex<Option<Instant>>,
    paths: Mutex<PathsSeen>,
}

impl std::ops::Deref for Shared {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

/// Which paths the workers ended up using, merged into [`UdpPaths`] at the end.
#[derive(Default)]
struct PathsSeen {
    gso: bool,
    mmsg_send: bool,
    plain_send: bool,
    gro: bool,
    mmsg_recv: bool,
    kernel_ts: bool,
    fallback: Option<String>,
}

impl UdpRun {
    /// Starts workers and the ticker now. `on_interval` gets each sample, `on_done` is called
    /// once every flow has finished, `on_send_done` once every sender has.
    pub fn start(
        cfg: SideConfig,
        ucfg: UdpConfig,
        flows: Vec<UdpFlowSocket>,
        on_interval: Box<dyn FnMut(IntervalSample) + Send>,
        on_done: DoneFn,
        on_send_done: SendDoneFn,
    ) -> Result<UdpRun, SideError> {
        let mut sockets = Vec::with_capacity(flows.len());
        let mut meta = Vec::with_capacity(flows.len());
        for f in flows {
            f.socket
                .set_nonblocking(true)
                .map_err(|source| SideError::Socket { flow: f.id, source })?;
            sockets.push(f.socket);
            meta.push(FlowMeta {
                id: f.id,
                dir: f.dir,
                role: f.role,
                quota: f.quota,
            });
        }
        let n = sockets.len();
        let senders = meta.iter().filter(|m| m.role == Role::Sender).count();
        let core = Arc::new(Core::new(cfg, meta, on_done, true));
        let shared = Arc::new(Shared {
            core: Arc::clone(&core),
            ucfg: UdpConfig {
                batch: ucfg.batch.clamp(1, sys::MAX_GSO_SEGMENTS.max(1)),
                ..ucfg
            },
            sockets,
            senders_left: AtomicUsize::new(senders),
            on_send_done: Mutex::new(Some(on_send_done)),
            peer_done: AtomicBool::new(false),
            peer_sent: Mutex::new(vec![None; n]),
            peer_done_at: Mutex::new(None),
            paths: Mutex::new(PathsSeen::default()),
        });
        if senders == 0 {
            shared.report_send_done();
        }
        let ticker = spawn_ticker(core, on_interval, None).map_err(SideError::Thread)?;
        let s = Arc::clone(&shared);
        let workers = spawn_workers(&shared.core, "hakaru-udp", 512 << 10, move |mine, pin| {
            worker(&s, mine, pin)
        })
        .map_err(SideError::Thread)?;
        Ok(UdpRun {
            shared,
            workers,
            ticker: Some(ticker),
        })
    }

    /// Asks senders to finish now (Ctrl-C or the peer's stop).
    pub fn stop_sending(&self) {
        self.shared.stop_send.store(true, Ordering::Release);
    }

    /// The peer's senders are done and sent these (flow id, datagram) counts.
    pub fn peer_done(&self, sent: &[(u32, u64)]) {
        let s = &self.shared;
        if let Ok(mut v) = s.peer_sent.lock() {
            let ids: Vec<u32> = s.meta.iter().map(|m| m.id).collect();
            record_peer_sent(&ids, &mut v, sent);
        }
        if let Ok(mut t) = s.peer_done_at.lock() {
            t.get_or_insert_with(Instant::now);
        }
        s.peer_done.store(true, Ordering::Release);
    }

    /// The peer ended the test (iperf3's TEST_END): the measured window closes now.
    pub fn peer_ended(&self) {
        self.shared.core.peer_ended();
    }

    /// Stops everything now.
    pub fn abort(&self) {
        self.shared.set_abort();
    }

    /// The first flow error so far, if any.
    pub fn first_error(&self) -> Option<String> {
        self.shared.first_error()
    }

    /// True once every flow has finished.
    pub fn is_done(&self) -> bool {
        self.shared.all_done()
    }

    /// Bytes moved so far (warm-up included) on the flows where this end has `role`.
    pub fn moved(&self, role: Role) -> u64 {
        self.shared.core.moved(role)
    }

    /// Waits for workers and the ticker and builds this end's report.
    pub fn wait(mut self) -> SideReport {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.shared.set_abort();
        let n = self.shared.meta.len();
        let t = self
            .ticker
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_else(|| TickerOut::empty(n));
        let s = &self.shared;
        let mut report = s.core.report(t, |_| None);
        let p = s
            .paths
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let has = |r: Role| s.meta.iter().any(|m| m.role == r);
        let label = |cond: bool, name: &str| cond.then(|| name.to_string());
        report.udp_paths = Some(UdpPaths {
            send: if has(Role::Sender) {
                label(p.gso, "gso")
                    .or(label(p.mmsg_send, sys::BATCH_SEND))
                    .or(label(p.plain_send, "send"))
                    .unwrap_or_else(|| "none".into())
            } else {
                "none".into()
            },
            recv: if has(Role::Receiver) {
                label(p.gro, "gro")
                    .or(label(p.mmsg_recv, sys::BATCH_RECV))
                    .unwrap_or_else(|| "recv".into())
            } else {
                "none".into()
            },
            batch: s.ucfg.batch as u32,
            kernel_timestamps: p.kernel_ts,
            fallback: p.fallback,
        });
        report.send_mode = report
            .udp_paths
            .as_ref()
            .map(|u| u.send.clone())
            .unwrap_or_default();
        report.recv_mode = report
            .udp_paths
            .as_ref()
            .map(|u| u.recv.clone())
            .unwrap_or_default();
        report
    }
}

impl Drop for UdpRun {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.shared.set_abort();
            for w in self.workers.drain(..) {
                let _ = w.join();
            }
            if let Some(t) = self.ticker.take() {
                let _ = t.join();
            }
        }
    }
}

impl Shared {
    /// Called as each sender finishes; the last one reports the counts.
    fn sender_finished(&self) {
        if self.senders_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.report_send_done();
        }
    }

    fn report_send_done(&self) {
        let cb = self.on_send_done.lock().ok().and_then(|mut g| g.take());
        if let Some(cb) = cb {
            let sent = self
                .meta
                .iter()
                .enumerate()
                .filter(|(_, m)| m.role == Role::Sender)
                .map(|(i, m)| (m.id, self.counters[i].snapshot().next_seq))
                .collect();
            cb(sent);
        }
    }

    fn note_fallback(&self, why: String) {
        if let Ok(mut p) = self.paths.lock() {
            p.fallback.get_or_insert(why);
        }
    }
}

/// Records a peer's `send_done` counts in `slots`, one per flow in the order of `ids`:
/// counts for flows this end does not have are ignored, and a flow named twice keeps its last
/// count. Flows are looked up in a sorted index, so a peer's frame of a million pairs costs
/// a million lookups, not a million scans of every flow.
pub fn record_peer_sent(ids: &[u32], slots: &mut [Option<u64>], sent: &[(u32, u64)]) {
    let mut index: Vec<(u32, usize)> = ids.iter().copied().zip(0..).collect();
    index.sort_unstable();
    for &(id, count) in sent {
        if let Ok(k) = index.binary_search_by_key(&id, |&(i, _)| i) {
            if let Some(slot) = slots.get_mut(index[k].1) {
                *slot = Some(count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::record_peer_sent;

    #[test]
    fn peer_sent_counts_land_on_their_flows() {
        let ids = [4, 0, 2];
        let mut slots = vec![None; 3];
        record_peer_sent(&ids, &mut slots, &[(2, 7), (9, 1), (4, 3), (2, 8)]);
        assert_eq!(slots, [Some(3), None, Some(8)]);
        record_peer_sent(&ids, &mut slots, &[]);
        assert_eq!(slots, [Some(3), None, Some(8)]);
    }

    #[test]
    fn a_million_pairs_against_2048_flows_is_one_lookup_each() {
        // What an 8 MiB send_done frame holds at most; a scan per pair took seconds.
        let ids: Vec<u32> = (0..2048).rev().collect();
        let mut slots = vec![None; ids.len()];
        let sent: Vec<(u32, u64)> = (0..1_000_000u32).map(|i| (i % 4096, 1)).collect();
        let t = std::time::Instant::now();
        record_peer_sent(&ids, &mut slots, &sent);
        assert!(slots.iter().all(|s| *s == Some(1)));
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
    }
}
