//! Precise waits for the UDP and ping-pong workers: poll with a nanosecond timeout and tight
//! timer slack. (Like the TCP worker's poll these call libc directly; moving them behind
//! `sys` is open work, see docs/architecture.md.)

use std::time::Duration;

/// poll with a nanosecond timeout: a paced sender sharing a worker with receivers must wake
/// for its next datagram, not at the next millisecond.
#[cfg(target_os = "linux")]
pub(crate) fn poll_precise(fds: &mut [libc::pollfd], timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(1) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: fds is a valid array of fds.len() pollfd structures; ts outlives the call; a
    // null signal mask leaves the mask unchanged.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
}

/// poll, with the timeout rounded up to whole milliseconds.
#[cfg(all(unix, not(target_os = "linux")))]
pub(crate) fn poll_precise(fds: &mut [libc::pollfd], timeout: Duration) {
    let ms = timeout.as_micros().div_ceil(1000).clamp(1, 1000) as libc::c_int;
    // SAFETY: fds is a valid array of fds.len() pollfd structures.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// Waits until `fd` is readable (or writable) or `timeout` passes.
#[cfg(unix)]
pub(crate) fn wait_fd(fd: std::os::fd::RawFd, write: bool, timeout: Duration) {
    let mut p = [libc::pollfd {
        fd,
        events: if write { libc::POLLOUT } else { libc::POLLIN },
        revents: 0,
    }];
    poll_precise(&mut p, timeout);
}

/// Asks the kernel for tight timer wake-ups on this thread, so a paced sender's sleeps end
/// within microseconds of the due time (the default slack is 50 us).
#[cfg(target_os = "linux")]
pub(crate) fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
}

/// Nothing to tighten on this OS.
#[cfg(not(target_os = "linux"))]
pub(crate) fn tighten_timer_slack() {}
