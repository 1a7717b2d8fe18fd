//! `safeprune daemon`: one cycle per scheduled time until SIGTERM or SIGINT.
//!
//! Between cycles it costs nothing: it sleeps on a `CLOCK_REALTIME` timerfd
//! armed for the absolute start time, so it wakes once, at the wall-clock
//! time the crontab line names, even after the machine slept (a monotonic
//! sleep would wake late) and notices the clock being set
//! (`TFD_TIMER_CANCEL_ON_SET`). A wake after missed slots runs one
//! catch-up cycle, and the next slot counts from its end (see
//! `schedule::next_slot`). SIGHUP re-reads the policy; a bad one is logged
//! and the old one kept. An unreachable engine is retried with backoff
//! until the next scheduled time, never in a tight loop and never fatally.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::cycle::{CycleOptions, cycle};
use crate::error::AppError;
use crate::execute::RemovalResult;
use crate::output::Chain;
use crate::policy::{Policy, PolicySource};
use crate::schedule::{self, Slot};

/// The longest pause between two attempts to reach an engine that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Runs cycles on the policy's schedule until SIGTERM or SIGINT.
///
/// # Errors
/// Signals or the timer cannot be set up, or the schedule names no future
/// time. Failed cycles are logged, never returned.
pub async fn run(source: PolicySource, policy: Policy) -> Result<(), AppError> {
    let mut signals = Signals::new().map_err(AppError::Daemon)?;
    let timer = WallTimer::new().map_err(AppError::Daemon)?;
    let mut daemon = Daemon {
        source,
        policy,
        cycles: 0,
    };
    let mut after = Utc::now();
    loop {
        let slot = daemon.next_slot(after)?;
        tracing::info!(next_run = %slot.start, scheduled = %slot.scheduled, "next cycle scheduled");
        match wait(&timer, &mut signals, slot.start).await? {
            Wake::Due => {}
            Wake::Stop => {
                daemon.stopping();
                return Ok(());
            }
            Wake::Reload => {
                daemon.reload();
                after = Utc::now();
                continue;
            }
        }
        if daemon.cycle_with_retries(&mut signals, slot).await {
            daemon.stopping();
            return Ok(());
        }
        after = Utc::now();
    }
}

struct Daemon {
    source: PolicySource,
    policy: Policy,
    cycles: u64,
}

impl Daemon {
    fn next_slot(&self, after: DateTime<Utc>) -> Result<Slot, AppError> {
        schedule::next_slot(&self.policy, after, schedule::random_u64()).ok_or_else(|| {
            AppError::Usage(format!(
                "schedule \"{}\" names no time after {after}",
                self.policy.schedule.as_str()
            ))
        })
    }

    fn stopping(&self) {
        tracing::info!(cycles = self.cycles, "daemon stopping");
    }

    /// Re-reads the policy; a bad one is logged and the current one kept.
    fn reload(&mut self) {
        match self.source.load() {
            Ok(policy) => {
                self.policy = policy;
                tracing::info!(source = ?self.source, "policy reloaded");
            }
            Err(e) => {
                tracing::error!(error = %Chain(&e), "policy not reloaded: keeping the current one");
            }
        }
    }

    /// One cycle for `slot`, retried with backoff while the engine cannot
    /// be reached, until the next scheduled time. Returns whether a stop
    /// signal came.
    async fn cycle_with_retries(&mut self, signals: &mut Signals, slot: Slot) -> bool {
        let deadline = schedule::next_scheduled(&self.policy, slot.scheduled);
        let stop = AtomicBool::new(false);
        let options = CycleOptions::default();
        let mut reload = false;
        let mut backoff = Duration::from_secs(1);
        loop {
            let result = {
                let run = cycle(&self.policy, &options, &stop);
                tokio::pin!(run);
                loop {
                    tokio::select! {
                        result = &mut run => break result,
                        event = signals.next() => match event {
                            Event::Stop => {
                                tracing::warn!("signal received: finishing the removals in flight");
                                stop.store(true, Ordering::SeqCst);
                            }
                            Event::Reload => reload = true,
                        },
                    }
                }
            };
            let stopping = stop.load(Ordering::SeqCst);
            match result {
                Ok(report) => tracing::info!(
                    deleted = report
                        .outcomes
                        .iter()
                        .filter(|o| o.result == RemovalResult::Deleted)
                        .count(),
                    failed = report.summary.failed,
                    reclaimed_bytes = report.summary.reclaimed_bytes,
                    "cycle finished"
                ),
                Err(AppError::Runtime(e)) if !stopping => {
                    let retry_at = Utc::now()
                        + chrono::Duration::from_std(backoff).unwrap_or(chrono::Duration::MAX);
                    if deadline.is_some_and(|d| retry_at >= d) {
                        tracing::error!(error = %Chain(&e), "cycle failed: engine unreachable; trying again at the next scheduled time");
                    } else {
                        tracing::warn!(error = %Chain(&e), retry_in_seconds = backoff.as_secs(), "engine unreachable; retrying");
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            event = signals.next() => match event {
                                Event::Stop => return true,
                                Event::Reload => reload = true,
                            },
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
                Err(AppError::Locked(path)) => tracing::warn!(
                    lock = %path.display(),
                    "another safeprune run holds the lock: this cycle is skipped"
                ),
                Err(e) => tracing::error!(error = %Chain(&e), "cycle failed"),
            }
            self.cycles += 1;
            if reload {
                self.reload();
            }
            return stopping;
        }
    }
}

/// What woke the daemon.
enum Wake {
    Due,
    Stop,
    Reload,
}

/// Sleeps until `at` by the wall clock, or until a signal.
async fn wait(
    timer: &WallTimer,
    signals: &mut Signals,
    at: DateTime<Utc>,
) -> Result<Wake, AppError> {
    loop {
        tokio::select! {
            woke = timer.sleep_until(at) => match woke.map_err(AppError::Daemon)? {
                TimerWake::Expired => return Ok(Wake::Due),
                // The clock was set: re-arm for the same wall-clock time,
                // which may now be past (then it fires at once) or further.
                TimerWake::ClockChanged => {
                    tracing::info!(now = %Utc::now(), "system clock changed");
                }
            },
            event = signals.next() => return Ok(match event {
                Event::Stop => Wake::Stop,
                Event::Reload => Wake::Reload,
            }),
        }
    }
}

enum Event {
    Stop,
    Reload,
}

/// SIGTERM, SIGINT and SIGHUP, listened to for the daemon's whole life.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn new() -> io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Event {
        tokio::select! {
            _ = self.term.recv() => Event::Stop,
            _ = self.int.recv() => Event::Stop,
            _ = self.hup.recv() => Event::Reload,
        }
    }
}

/// A timerfd on `CLOCK_REALTIME`, driven by tokio.
struct WallTimer(AsyncFd<Timer>);

/// `AsyncFd` wants `AsRawFd`; nix's `TimerFd` offers `AsFd`.
struct Timer(TimerFd);

impl AsRawFd for Timer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

enum TimerWake {
    Expired,
    ClockChanged,
}

impl WallTimer {
    fn new() -> io::Result<Self> {
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
        let registered = AsyncFd::new(Timer(fd))?;
        Ok(Self(registered))
    }

    async fn sleep_until(&self, at: DateTime<Utc>) -> io::Result<TimerWake> {
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
