//! How a TCP receiver reads: whether a worker waits in its reads, one read of a flow, and when
//! the kernel wakes a lone receiver ([`Wake`]).

use std::time::{Duration, Instant};

use hakaru_model::Role;

use super::{classify, Shared, Step};
use crate::arrival::FlowStamps;
use crate::recvbuf::{at_stream_pos, block_rest};
use crate::sys::{self, AsRawFd};
use crate::wake::Wake;

/// A lone receiver's longest wait in a read: a polling worker's longest wait.
const BLOCKING_READ_WAIT: Duration = Duration::from_millis(100);

/// Whether a worker waits in its reads (blocking, [`BLOCKING_READ_WAIT`] at most): its one flow
/// is a receiver on a side with a thread per flow, as the peer's own server reads. One system
/// call per wait where polling takes three (docs/performance-notes.md, section 14).
pub(super) fn lone_receiver_blocks(s: &Shared, mine: &[usize]) -> bool {
    let [i] = mine else {
        return false;
    };
    if !sys::RECV_TIMEOUT_KEEPS_STREAM
        || !s.cfg.thread_per_flow
        || s.meta[*i].role != Role::Receiver
    {
        return false;
    }
    let stream = &s.streams[*i];
    if stream.set_read_timeout(Some(BLOCKING_READ_WAIT)).is_ok()
        && stream.set_nonblocking(false).is_ok()
    {
        return true;
    }
    let _ = stream.set_nonblocking(true);
    false
}

/// One read of flow `i`, `read` bytes in, placed by [`at_stream_pos`] or sized by [`block_rest`].
/// With `waited` (a blocking stream, [`lone_receiver_blocks`]) the read waits in the call and says
/// so; the reads after the window, which look at each read's stamp, do not wait.
pub(super) fn recv_step(
    s: &Shared,
    i: usize,
    stamps: FlowStamps,
    buf: &mut [u8],
    read: u64,
    waited: Option<&mut bool>,
) -> Step {
    let (stream, counters, blk) = (&s.streams[i], &s.counters[i], s.cfg.length);
    let discard = s.cfg.discard && sys::DISCARD_SUPPORTED;
    let len = if discard { block_rest(read, blk) } else { blk };
    // A discarding read has no buffer; an empty one stays empty.
    let buf = at_stream_pos(if discard { &mut [][..] } else { buf }, read, len);
    // Once the window is closed (read before the read, so these bytes are not in the window's
    // snapshot), each read says when its bytes reached the host.
    if let Some(end) = s.window_end_unix_ns().filter(|_| stamps.on()) {
        let r = stamps.read_after_window(stream, buf, len, end, counters);
        return classify(r, Role::Receiver);
    }
    let Some(waited) = waited else {
        let r = if discard {
            sys::recv_discard(stream.as_raw_fd(), len)
        } else {
            sys::stream_recv(stream, buf)
        };
        return classify(r, Role::Receiver);
    };
    *waited = true;
    let r = if stamps.on() {
        stamps.read_waiting(stream, buf, len, || s.window_end_unix_ns(), counters)
    } else if discard {
        sys::recv_discard_wait(stream.as_raw_fd(), len)
    } else {
        sys::stream_recv_wait(stream, buf)
    };
    classify(r, Role::Receiver)
}

/// The wake-up rule for a flow of a worker that waits in its reads (`block`), when its reads
/// copy ([`Wake`]: a read that skips the copy keeps the default). Arrival stamps near a window's
/// end ([`crate::arrival`]) are the kernel's, per segment: when the reader is woken does not
/// change them.
pub(super) fn wake_for(s: &Shared, block: bool, now: Instant) -> Option<Wake> {
    let copies = !(s.cfg.discard && sys::DISCARD_SUPPORTED);
    (block && copies).then(|| Wake::new(now))
}

/// The bytes a read moved, for [`Wake::after_read`] (0 for one that moved none).
pub(super) fn moved(step: &Step) -> u64 {
    match step {
        Step::Moved(n) => *n as u64,
        _ => 0,
    }
}
