//! `safeprune daemon`: one cycle per scheduled time until SIGTERM or SIGINT.
//!
//! This file owns the loop and its decisions: when the next cycle is due,
//! what a signal means at each point, how long to back off. A wake after
//! missed slots runs one catch-up cycle, and the next slot counts from its
//! end (see `schedule::next_slot`). SIGHUP re-reads the policy; a bad one is
//! logged and the old one kept. An unreachable engine is retried with
//! backoff until the next scheduled time, never in a tight loop and never
//! fatally.
//!
//! What the loop waits on comes in as inputs (`Inputs`): the wall clock,
//! the timer, the stream of signals, the cycle itself and the jitter's
//! randomness. [`run`] wires the real ones; `tests.rs` drives the same loop
//! with fakes in tokio's paused time, so hours of schedule take no time and
//! every wake-up time can be asserted to the second. The real timer, a
//! `CLOCK_REALTIME` timerfd that costs nothing between cycles, is in
//! `wall_timer.rs`.

mod follow;
mod http;
mod wall_timer;

#[cfg(test)]
mod tests;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::cycle::{CycleOptions, cycle_with_metrics};
use crate::error::AppError;
use crate::output::Chain;
use crate::policy::{Policy, PolicySource};
use crate::report::Report;
use crate::schedule::{self, Slot};
use crate::shutdown::Shutdown;
use follow::Follower;
use http::{Exposition, Phase};
use wall_timer::WallTimer;

/// The longest pause between two attempts to reach an engine that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Runs cycles on the policy's schedule until SIGTERM or SIGINT, serving
/// `/metrics` and `/healthz` at `metrics.listen` if set.
///
/// # Errors
/// Signals, the timer or the listener cannot be set up, or the schedule
/// names no future time. Failed cycles are logged, never returned.
pub async fn run(source: PolicySource, policy: Policy) -> Result<(), AppError> {
    let events = forward_signals().map_err(AppError::Daemon)?;
    let exposition = match policy.metrics.listen.addr() {
        Some(addr) => Some(listen(addr, &policy).await?),
        None => None,
    };
    // Between cycles, the engine's events feed the image usage history.
    let follower = Follower::start(&policy);
    let inputs = Inputs {
        clock: SystemClock,
        timer: WallTimer,
        events,
        cycles: EngineCycles {
            exposition: exposition.clone(),
            follower: &follower,
        },
        random: schedule::random_u64,
    };
    let result = run_with(source, policy, inputs).await;
    follower.stop().await;
    if let Some(exposition) = exposition {
        exposition.set_phase(Phase::Stopped);
    }
    result
}

/// Binds `metrics.listen` and serves it for the daemon's life. Until the
/// first cycle ends, `/metrics` serves the last run's textfile if there is
/// one, so a restart does not blank the figures for a week.
async fn listen(addr: std::net::SocketAddr, policy: &Policy) -> Result<Arc<Exposition>, AppError> {
    // Fails where the address is in use or not this host's, or where only
    // unix sockets are allowed (the systemd units' sandbox).
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Listen { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let last = Some(policy.report.metrics_textfile.as_str())
        .filter(|p| !p.is_empty())
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let exposition = Arc::new(Exposition::new(last));
    tokio::spawn(http::serve(listener, Arc::clone(&exposition)));
    tracing::info!(address = %bound, "serving /metrics and /healthz");
    Ok(exposition)
}

/// Reads the wall clock.
pub(crate) trait Clock {
    fn now(&self) -> DateTime<Utc>;
}

/// Sleeps until a wall-clock time.
pub(crate) trait Timer {
    /// Returns once the wall clock reads `at` or later, or early with
    /// [`TimerWake::ClockChanged`] when the clock is set meanwhile (the
    /// caller then sleeps again for the same time).
    async fn sleep_until(&mut self, at: DateTime<Utc>) -> io::Result<TimerWake>;
}

/// Why a [`Timer`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerWake {
    Expired,
    ClockChanged,
}

/// What the outside asks of the daemon: SIGTERM and SIGINT stop it, SIGHUP
/// reloads its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Stop,
    Reload,
}

/// Runs one cycle of the policy.
pub(crate) trait Cycles {
    /// Once `shutdown` is asked, no new removal starts and the cycle ends
    /// within the stop's grace, its report files written.
    async fn cycle(&self, policy: &Policy, shutdown: &Shutdown) -> Result<Report, AppError>;

    /// A reload put `policy` in force (what runs between cycles follows it).
    fn policy_in_force(&self, _policy: &Policy) {}
}

/// Everything the loop waits on or asks for, besides the policy.
pub(crate) struct Inputs<K, T, C, R> {
    pub clock: K,
    pub timer: T,
    /// A closed channel counts as [`Event::Stop`]: nobody is left to stop
    /// the daemon otherwise (as mini-redis's shutdown listener does).
    pub events: mpsc::Receiver<Event>,
    pub cycles: C,
    /// A random number for each slot's jitter.
    pub random: R,
}

/// The loop of [`run`], over any inputs.
pub(crate) async fn run_with<K, T, C, R>(
    source: PolicySource,
    policy: Policy,
    inputs: Inputs<K, T, C, R>,
) -> Result<(), AppError>
where
    K: Clock,
    T: Timer,
    C: Cycles,
    R: FnMut() -> u64,
{
    let Inputs {
        clock,
        timer,
        events,
        cycles: runner,
        random,
    } = inputs;
    let mut daemon = Daemon {
        source,
        policy,
        cycles: 0,
        clock,
        timer,
        events: Events {
            receiver: events,
            closed: false,
        },
        runner,
        random,
    };
    let mut after = daemon.clock.now();
    loop {
        let slot = daemon.next_slot(after)?;
        tracing::info!(next_run = %slot.start, scheduled = %slot.scheduled, "next cycle scheduled");
        match daemon.wait(slot.start).await? {
            Wake::Due => {}
            Wake::Stop => {
                daemon.stopping();
                return Ok(());
            }
            Wake::Reload => {
                daemon.reload();
                after = daemon.clock.now();
                continue;
            }
        }
        if daemon.cycle_with_retries(slot).await {
            daemon.stopping();
            return Ok(());
        }
        after = daemon.clock.now();
    }
}

struct Daemon<K, T, C, R> {
    source: PolicySource,
    policy: Policy,
    /// Cycles run so far, for the last log line.
    cycles: u64,
    clock: K,
    timer: T,
    events: Events,
    runner: C,
    random: R,
}

/// What ended a wait for the next slot.
enum Wake {
    Due,
    Stop,
    Reload,
}

impl<K, T, C, R> Daemon<K, T, C, R>
where
    K: Clock,
    T: Timer,
    C: Cycles,
    R: FnMut() -> u64,
{
    fn next_slot(&mut self, after: DateTime<Utc>) -> Result<Slot, AppError> {
        schedule::next_slot(&self.policy, after, (self.random)()).ok_or_else(|| {
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
                if policy.metrics.listen != self.policy.metrics.listen {
                    tracing::warn!(
                        listen = %self.policy.metrics.listen,
                        "metrics.listen changed: the listener moves only when the daemon restarts"
                    );
                }
                self.policy = policy;
                self.runner.policy_in_force(&self.policy);
                tracing::info!(source = ?self.source, "policy reloaded");
            }
            Err(e) => {
                tracing::error!(error = %Chain(&e), "policy not reloaded: keeping the current one");
            }
        }
    }

    /// Sleeps until `at` by the wall clock, or until an event.
    async fn wait(&mut self, at: DateTime<Utc>) -> Result<Wake, AppError> {
        loop {
            tokio::select! {
                woke = self.timer.sleep_until(at) => match woke.map_err(AppError::Daemon)? {
                    TimerWake::Expired => return Ok(Wake::Due),
                    // The clock was set: sleep again for the same wall-clock
                    // time, which may now be past (then it fires at once) or
                    // further.
                    TimerWake::ClockChanged => {
                        tracing::info!(now = %self.clock.now(), "system clock changed");
                    }
                },
                event = self.events.next() => return Ok(match event {
                    Event::Stop => Wake::Stop,
                    Event::Reload => Wake::Reload,
                }),
            }
        }
    }

    /// One cycle for `slot`, retried with backoff while the engine cannot
    /// be reached, until the next scheduled time. Returns whether a stop
    /// came.
    async fn cycle_with_retries(&mut self, slot: Slot) -> bool {
        // Retries end at the next scheduled time after this cycle's own,
        // or after now for a catch-up cycle: right after a resume the
        // engine is likely still starting, and the slot after the missed
        // one is already past.
        let deadline = schedule::next_scheduled(&self.policy, slot.scheduled.max(self.clock.now()));
        let shutdown = Shutdown::new();
        let mut reload = false;
        let mut backoff = Duration::from_secs(1);
        loop {
            let result = {
                let run = self.runner.cycle(&self.policy, &shutdown);
                tokio::pin!(run);
                loop {
                    tokio::select! {
                        result = &mut run => break result,
                        // The cycle itself ends its waits on the engine,
                        // giving removals in flight the stop's grace (a
                        // half-removed image is worse than a later exit),
                        // and writes its report files: it is not dropped.
                        event = self.events.next() => match event {
                            Event::Stop => {
                                tracing::warn!(
                                    grace_seconds = crate::execute::STOP_GRACE.as_secs(),
                                    "signal received: stopping the cycle; removals in flight get the grace to answer"
                                );
                                shutdown.stop();
                            }
                            Event::Reload => reload = true,
                        },
                    }
                }
            };
            let stopping = shutdown.is_stopped();
            match result {
                Ok(report) => tracing::info!(
                    deleted = report.deleted_count(),
                    failed = report.summary.failed,
                    reclaimed_bytes = report.summary.reclaimed_bytes,
                    "cycle finished"
                ),
                Err(AppError::Runtime(e)) if !stopping => {
                    let retry_at = self.clock.now()
                        + chrono::Duration::from_std(backoff).unwrap_or(chrono::Duration::MAX);
                    if deadline.is_some_and(|d| retry_at >= d) {
                        tracing::error!(error = %Chain(&e), "cycle failed: engine unreachable; trying again at the next scheduled time");
                    } else {
                        tracing::warn!(error = %Chain(&e), retry_in_seconds = backoff.as_secs(), "engine unreachable; retrying");
                        // Nothing is in flight: a stop ends the daemon now.
                        // A reload waits for the end of the cycle, and does
                        // not cut the backoff short: a burst of SIGHUPs must
                        // not hammer an engine that is down.
                        let retry = tokio::time::sleep(backoff);
                        tokio::pin!(retry);
                        loop {
                            tokio::select! {
                                () = &mut retry => break,
                                event = self.events.next() => match event {
                                    Event::Stop => return true,
                                    Event::Reload => reload = true,
                                },
                            }
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
                Err(e @ AppError::Stopped { .. }) => {
                    tracing::warn!(error = %e, "cycle cut short");
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

/// The events, as the loop reads them.
struct Events {
    receiver: mpsc::Receiver<Event>,
    closed: bool,
}

impl Events {
    /// The next event. A closed channel is one stop, then silence: a
    /// closed receiver answers at once every time, and a `select!` over it
    /// would spin while a cycle finishes.
    async fn next(&mut self) -> Event {
        if self.closed {
            return std::future::pending().await;
        }
        self.receiver.recv().await.unwrap_or_else(|| {
            self.closed = true;
            Event::Stop
        })
    }
}

/// The real clock.
struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The real cycle: the same as `safeprune run`; with a listener, it also
/// tells `/healthz` that a cycle runs and `/metrics` what it found.
struct EngineCycles<'a> {
    exposition: Option<Arc<Exposition>>,
    follower: &'a Follower,
}

impl Cycles for EngineCycles<'_> {
    fn policy_in_force(&self, policy: &Policy) {
        self.follower.policy_in_force(policy);
    }

    async fn cycle(&self, policy: &Policy, shutdown: &Shutdown) -> Result<Report, AppError> {
        let mut options = CycleOptions {
            schedule_period: crate::schedule::longest_gap(policy, Utc::now()),
            ..CycleOptions::default()
        };
        let Some(exposition) = &self.exposition else {
            return crate::cycle::cycle(policy, &options, shutdown).await;
        };
        options.previous_metrics = Some(exposition.metrics());
        exposition.set_phase(Phase::Cycle(tokio::time::Instant::now()));
        let (result, metrics) = cycle_with_metrics(policy, &options, shutdown).await;
        if let Some(text) = metrics {
            exposition.set_metrics(text);
        }
        exposition.set_phase(Phase::Waiting);
        result
    }
}

/// Listens for SIGTERM, SIGINT and SIGHUP for the daemon's whole life and
/// forwards them as events. The handlers are installed before this returns,
/// so a signal sent once the daemon has started is never lost (nor kills
/// it by the default action).
fn forward_signals() -> io::Result<mpsc::Receiver<Event>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let (sender, receiver) = mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                _ = term.recv() => Event::Stop,
                _ = int.recv() => Event::Stop,
                _ = hup.recv() => Event::Reload,
            };
            if sender.send(event).await.is_err() {
                return; // The daemon has ended.
            }
        }
    });
    Ok(receiver)
}
