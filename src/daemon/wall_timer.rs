//! The daemon's real [`Timer`]: a `CLOCK_REALTIME` timerfd armed for the
//! absolute start time, driven by tokio.
//!
//! A wall-clock timer wakes at the time the crontab line names even after
//! the machine slept (a monotonic sleep would wake late), and with
//! `TFD_TIMER_CANCEL_ON_SET` it notices the clock being set. Between cycles
//! it costs nothing.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

use super::{Timer, TimerWake};

/// A timerfd on `CLOCK_REALTIME`, driven by tokio.
pub(crate) struct WallTimer(AsyncFd<Fd>);

/// `AsyncFd` wants `AsRawFd`; nix's `TimerFd` offers `AsFd`.
struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl WallTimer {
    pub(crate) fn new() -> io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_REALTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // Deprecated because a borrowed fd could be closed while
        // registered; here `AsyncFd` owns the `TimerFd` that owns the fd, so
        // it lives exactly as long as the registration. `register`, the
        // replacement, is `unsafe`, which this crate forbids.
        #[expect(
            deprecated,
            reason = "AsyncFd owns the fd: the I/O-safety hole does not apply"
        )]
        let registered = AsyncFd::new(Fd(fd))?;
        Ok(Self(registered))
    }
}

impl Timer for WallTimer {
    async fn sleep_until(&mut self, at: DateTime<Utc>) -> io::Result<TimerWake> {
        // An all-zero time disarms a timerfd; every real slot is after 1970.
        let when = TimeSpec::new(
            at.timestamp().max(1),
            i64::from(at.timestamp_subsec_nanos()),
        );
        self.0.get_ref().0.set(
            Expiration::OneShot(when),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME | TimerSetTimeFlags::TFD_TIMER_CANCEL_ON_SET,
        )?;
        loop {
            let mut ready = self.0.readable().await?;
            let mut expirations = [0u8; 8];
            match nix::unistd::read(self.0.get_ref().0.as_fd(), &mut expirations) {
                Ok(_) => return Ok(TimerWake::Expired),
                Err(Errno::EAGAIN | Errno::EINTR) => ready.clear_ready(),
                Err(Errno::ECANCELED) => return Ok(TimerWake::ClockChanged),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
