//! Receive buffers placed at a chosen offset within their page.
//!
//! How fast the kernel copies received data into a buffer (`copy_to_user`, `rep movsb` on
//! x86) depends on where the buffer starts within its 4 KiB page relative to where the data
//! sits in the kernel's pages: with the destination 8 to 24 bytes past the source, or 24 to 48
//! bytes before it, in the low twelve address bits, each load waits on a store made a moment
//! earlier at an address that looks the same to the CPU (4K aliasing), and the copy runs at a
//! third (data in page-cache pages, iperf3 `-Z`) to three quarters (data the sender copied)
//! of its speed. Where an allocator puts a buffer is chance: glibc serves 128 KiB and more from
//! a fresh `mmap` (the data then starts 16 bytes into a page: the slow case for data the kernel
//! holds from the start of a page, as page-cache pages and page fragments), smaller ones from a
//! thread's arena at any offset. [`RecvBuf`] takes the chance away and starts on a page, where
//! `iperf3 -s` (which maps its buffers) has its own; the measurements are in
//! docs/performance-notes.md, section 13, and `bench/recv_offset.py` shows the kernel's side
//! with no hakaru in it.

use std::ops::{Deref, DerefMut};

/// The size of a page, as far as the copy's aliasing goes (the low twelve address bits).
pub const PAGE: usize = 4096;

/// Where a receive buffer starts within its page: on the page, clear of both slow bands, and
/// where the stock iperf3 server's buffers start, so that no comparison with it turns on this.
pub const DEFAULT_OFFSET: usize = 0;

/// A zeroed byte buffer whose first byte lies `offset` bytes into a page.
#[derive(Debug)]
pub struct RecvBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl RecvBuf {
    /// A buffer of `len` bytes starting [`DEFAULT_OFFSET`] bytes into a page (on the page).
    pub fn new(len: usize) -> Self {
        Self::at(len, DEFAULT_OFFSET)
    }

    /// A buffer for reads of `len` bytes placed by stream position ([`at_stream_pos`]): `len`
    /// bytes and a page less one, starting on a page.
    pub fn for_stream(len: usize) -> Self {
        Self::new(len.saturating_add(PAGE - 1))
    }

    /// A buffer of `len` bytes starting `offset % PAGE` bytes into a page.
    pub fn at(len: usize, offset: usize) -> Self {
        let offset = offset % PAGE;
        let raw = vec![0u8; len + PAGE];
        let here = raw.as_ptr() as usize % PAGE;
        let start = (offset + PAGE - here) % PAGE;
        Self { raw, start, len }
    }
}

impl Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl DerefMut for RecvBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// Where a read of `len` bytes, `pos` bytes into a stream, goes in `buf` (at least
/// `len + PAGE - 1` bytes long): `len` bytes from `pos % PAGE`, so each byte lands at its
/// stream position's offset within a page (and within a cache line) however the reads before
/// it were cut. A sender's bytes sit in the kernel's pages at offsets that follow the stream
/// (page-cache pages for `sendfile`, page fragments filled in order for a copying sender), so
/// source and destination of the kernel's copy keep one distance for the whole test. A buffer
/// read from its start would, after a short read of a length not a multiple of 64, meet every
/// later byte at a new distance within its cache line, where `rep movsb` copies up to 5 %
/// slower (docs/performance-notes.md, section 19). An empty `buf` (a discarding read) stays
/// empty; a shorter one yields what it holds from that offset, and a non-empty one never
/// yields an empty slice (which would read as a discard).
pub fn at_stream_pos(buf: &mut [u8], pos: u64, len: usize) -> &mut [u8] {
    if buf.is_empty() {
        return buf;
    }
    // pos % PAGE < PAGE, so it fits a usize; the clamps keep any length a non-panic.
    let at = ((pos % PAGE as u64) as usize).min(buf.len() - 1);
    let end = at.saturating_add(len.max(1)).min(buf.len());
    &mut buf[at..end]
}

/// How much a discarding read (`MSG_TRUNC`), `pos` bytes into a stream read in blocks of
/// `len`, asks for: the rest of the block it is in, as `iperf3 -s`'s receive loop does, so a
/// short read is followed by one that finishes its block rather than one that asks for a whole
/// block. A discarding read costs little, and which of the two it makes decides how much the
/// socket holds between reads and so the ACKs the sender sees: with whole-block asks a stock
/// iperf3 3.21 `--skip-rx-copy` client, BBR pacing on loopback, read 0.79x of what it reads
/// into `iperf3 -s` with client and server on two CPUs (docs/performance-notes.md, section 20).
/// Never 0 (a zero-length read would read as the end of the stream); `len` 0 asks for 1.
pub fn block_rest(pos: u64, len: usize) -> usize {
    let len = len.max(1);
    // pos % len < len, so it fits a usize.
    len - (pos % len as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discarding_read_asks_for_the_rest_of_its_block() {
        let block = 128 << 10;
        assert_eq!(block_rest(0, block), block);
        assert_eq!(block_rest(block as u64, block), block);
        assert_eq!(block_rest(5 * block as u64, block), block);
        assert_eq!(block_rest(1, block), block - 1);
        assert_eq!(block_rest(block as u64 - 1, block), 1);
        assert_eq!(block_rest(3 * block as u64 + 100, block), block - 100);
        // Never 0, never over the block, and no panic on any position or length.
        for pos in [0, 1, 4095, 65_483, u64::MAX - 1, u64::MAX] {
            for len in [0, 1, 7, block, usize::MAX] {
                let n = block_rest(pos, len);
                assert!(n >= 1 && n <= len.max(1), "pos {pos} len {len}: {n}");
            }
        }
    }

    #[test]
    fn the_buffer_starts_at_its_offset_in_a_page_and_has_its_length() {
        for len in [0, 1, 14, 4096, 128 << 10, 1 << 20] {
            for off in [0, 16, 2048, 4095, 4096 + 100] {
                let mut b = RecvBuf::at(len, off);
                assert_eq!(b.len(), len);
                assert_eq!(
                    b.as_ptr() as usize % PAGE,
                    off % PAGE,
                    "len {len} offset {off}"
                );
                assert!(b.iter().all(|&x| x == 0));
                if len > 0 {
                    b[len - 1] = 7;
                    assert_eq!(b[len - 1], 7);
                }
            }
        }
    }

    #[test]
    fn a_read_lands_each_byte_at_its_stream_offset_in_a_page() {
        let len = 128 << 10;
        let mut b = RecvBuf::for_stream(len);
        let base = b.as_ptr() as usize;
        for pos in [
            0u64,
            7,
            4095,
            4096 + 33,
            128 << 10,
            (128 << 10) * 5 + 100,
            u64::MAX,
        ] {
            let at = at_stream_pos(&mut b, pos, len);
            assert_eq!(at.len(), len, "pos {pos}: a read of the whole length");
            let off = at.as_ptr() as usize - base;
            assert_eq!(off as u64, pos % PAGE as u64, "pos {pos}");
            // The buffer starts on a page, so the byte's page offset is its stream offset's.
            assert_eq!((at.as_ptr() as usize) % PAGE, (pos % PAGE as u64) as usize);
        }
        // A buffer with no slack gives what it holds; an empty one stays empty.
        let mut short = RecvBuf::new(100);
        assert_eq!(at_stream_pos(&mut short, 40, 100).len(), 60);
        assert_eq!(at_stream_pos(&mut short, 4095, 100).len(), 1);
        assert_eq!(at_stream_pos(&mut short, 7, 0).len(), 1);
        let mut empty = RecvBuf::new(0);
        assert!(at_stream_pos(&mut empty, 12345, 100).is_empty());
    }

    #[test]
    fn a_new_buffer_starts_at_the_default_offset() {
        let b = RecvBuf::new(128 << 10);
        assert_eq!(b.as_ptr() as usize % PAGE, DEFAULT_OFFSET);
    }
}
