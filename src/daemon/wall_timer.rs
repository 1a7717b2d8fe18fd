//! The daemon's real [`Timer`]: a `CLOCK_REALTIME` timerfd armed for the
//! absolute start time, waited on by a blocking thread.
//!
//! A wall-clock timer wakes at the time the crontab line names even after
//! the machine slept (a monotonic sleep would wake late), and with
//! `TFD_TIMER_CANCEL_ON_SET` it notices the clock being set. Between cycles
//! it costs nothing: one thread sits in `poll(2)` with no timeout.
//!
//! Why a thread and not tokio's reactor: `AsyncFd::new` is deprecated as
//! unsound (tokio-rs/tokio#8587) and its replacement, `AsyncFd::register`,
//! is `unsafe`, which this crate forbids. The thread polls the timerfd and
//! the read end of a pipe whose write end the waiting future holds: when
//! the future is dropped (a signal won the daemon's `select!`), the write
//! end closes, `poll` reports POLLHUP and the thread returns at once, so no
//! thread outlives its wait and the runtime shuts down without waiting.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use super::{Timer, TimerWake};

/// Sleeps on the wall clock; see the module documentation.
pub(crate) struct WallTimer;

impl Timer for WallTimer {
    async fn sleep_until(&mut self, at: DateTime<Utc>) -> io::Result<TimerWake> {
        // A timerfd per wait, owned by the thread that waits on it: a thread
        // left over from a dropped wait can then never read, and so swallow,
        // the expiry of the next one.
        let timer = arm(at)?;
        let (abandoned, waiting) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let woke = tokio::task::spawn_blocking(move || wait(&timer, &abandoned))
            .await
            .map_err(io::Error::other)?;
        // Held until here: dropping it, with this future, ends the thread.
        drop(waiting);
        woke?.ok_or_else(|| io::Error::other("the timer's wake-up pipe closed while waiting"))
    }
}

/// A timerfd that expires once at `at` by the wall clock, or is cancelled
/// when the clock is set.
fn arm(at: DateTime<Utc>) -> io::Result<TimerFd> {
    // Non-blocking, so that reading after a spurious POLLIN cannot hang: the
    // waiting is poll's.
    let timer = TimerFd::new(
        ClockId::CLOCK_REALTIME,
        TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
    )?;
    // An all-zero time disarms a timerfd; every real slot is after 1970.
    let when = TimeSpec::new(
        at.timestamp().max(1),
        i64::from(at.timestamp_subsec_nanos()),
    );
    timer.set(
        Expiration::OneShot(when),
        TimerSetTimeFlags::TFD_TIMER_ABSTIME | TimerSetTimeFlags::TFD_TIMER_CANCEL_ON_SET,
    )?;
    Ok(timer)
}

/// Blocks until `timer` expires or is cancelled by a clock change, or until
/// the write end of `abandoned` closes (`None`: nobody waits any more).
fn wait(timer: &TimerFd, abandoned: &OwnedFd) -> io::Result<Option<TimerWake>> {
    loop {
        let mut fds = [
            PollFd::new(timer.as_fd(), PollFlags::POLLIN),
            PollFd::new(abandoned.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        // The pipe first: once the future is gone the answer is unwanted.
        if fds[1].any().unwrap_or(true) {
            return Ok(None);
        }
        if !fds[0].any().unwrap_or(true) {
            continue;
        }
        let mut expirations = [0u8; 8];
        match nix::unistd::read(timer, &mut expirations) {
            Ok(_) => return Ok(Some(TimerWake::Expired)),
            Err(Errno::ECANCELED) => return Ok(Some(TimerWake::ClockChanged)),
            Err(Errno::EAGAIN | Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}
