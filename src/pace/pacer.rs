//! The executor's side of pacing: how many removals may be in flight, and
//! when to wait.
//!
//! Unpaced (`safety.pace: null`, `run --no-pace`, or no signal to pace
//! by), the policy's `safety.concurrency` alone: fixed, or `auto`'s climb
//! ([`super::adapt`]). Paced, the stall budget ([`super::budget`]) decides
//! both: the pacer measures the workloads' baseline before the first
//! removal ([`super::baseline`]), observes their stall every [`OBSERVE`]
//! while removals go, and asks the budget before each batch and each
//! removal. Its waits count against `max_delay`; once that is spent,
//! `on_max_delay` says whether the rest goes one at a time or is left for
//! the next run.
//!
//! All its times are tokio's, so that its tests run in paused time.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::adapt::{self, Climb};
use super::baseline;
use super::budget::{Budget, Limits, Ticket, Verdict, Weight};
use super::psi::{MIN_WINDOW, share};
use super::report::ceiling_only_note;
use super::signal::{NoSignal, Signal, Stall};
use crate::inventory::Kind;
use crate::policy::{Concurrency, OnMaxDelay, Pace, Policy};
use crate::shutdown::Shutdown;

/// How often the stall budget observes the workloads' stall while removals
/// go: windows short enough that a removal's stall is seen while it lasts.
pub const OBSERVE: Duration = baseline::INTERVAL;

/// The shortest wait: shorter ones are mostly the scheduler's.
pub const MIN_WAIT: Duration = Duration::from_millis(50);

/// What the pacer says before a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on, with at most this many removals in flight.
    Go(usize),
    /// Wait this long, then ask again.
    Wait(Duration),
    /// No more removals this run: `max_delay` is spent and `on_max_delay`
    /// is `stop` (see [`Pacer::stop_reason`]).
    Stop,
}

/// A removal the pacer let start, to give back when it has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(Option<Ticket>);

/// The stall budget's side of a paced run.
struct Budgeted {
    signal: Signal,
    /// The I/O stall, and the workloads' CPU stall beside it.
    stall: Stall,
    /// The I/O `some total` of the latest reading, and of the last
    /// observation's: the ceiling is the I/O share alone.
    io_read: Option<Duration>,
    last_io: Option<Duration>,
    /// Set once the baseline is measured.
    budget: Option<Budget>,
    /// The measured baseline, 0 to 1.
    baseline: Option<f64>,
    /// The last observation: when, and the stall's total then (I/O and
    /// CPU `some total`s summed).
    last: Option<(Instant, Duration)>,
    /// The kind whose removals go now.
    kind: Kind,
    first_start: Option<Instant>,
    last_answer: Option<Instant>,
    answered: u64,
    warned: bool,
    /// The last reading failed: the budget holds nothing until one reads.
    unreadable: bool,
}

impl Budgeted {
    fn new(signal: Signal) -> Self {
        Self {
            stall: Stall::of(&signal),
            signal,
            io_read: None,
            last_io: None,
            budget: None,
            baseline: None,
            last: None,
            kind: Kind::Container,
            first_start: None,
            last_answer: None,
            answered: 0,
            warned: false,
            unreadable: false,
        }
    }

    /// The stall's total now: the I/O `some total`, plus the CPU's where
    /// it is read; warns once when the I/O's cannot be read.
    fn total(&mut self) -> Option<Duration> {
        match self.stall.read() {
            Ok((io, sum)) => {
                self.io_read = Some(io);
                Some(sum)
            }
            Err(e) => {
                if !self.warned {
                    tracing::warn!(path = %self.stall.io().path().display(), error = %e, "safety.pace: cannot read the I/O stall: the budget sees nothing while it stays unreadable");
                    self.warned = true;
                }
                None
            }
        }
    }
}

/// Decides, before each removal batch and each removal, how many removals
/// may be in flight and whether to wait first (see the module).
pub struct Pacer {
    /// The policy's pace, when the run was to be paced (for its report).
    pace: Option<Pace>,
    /// The most in flight: the policy's fixed concurrency, or `auto`'s
    /// ceiling.
    most: usize,
    /// `auto`'s climb, unpaced; `None` for a fixed concurrency.
    climb: Option<Climb>,
    /// The stall budget; `None`: not paced.
    budgeted: Option<Budgeted>,
    /// Waits counted against `max_delay`.
    waited: Duration,
    /// The wait under way is for the budget's next observation, not for
    /// the stall: it is not counted.
    uncounted: bool,
    readings: u64,
    max_seen: Option<f64>,
    exhausted: bool,
    disk: Disk,
}

/// The image file system against `images.disk.high_percent`.
#[derive(Debug, Clone, Copy, Default)]
struct Disk {
    /// Over it now: the budget yields to the ceiling alone.
    full: bool,
    /// Over it at some point of a paced run, with removals to go.
    emergency: bool,
}

impl Pacer {
    /// The pacer `policy` asks for on this node, the signal found under
    /// `/`; says once in the log what a run should know (no signal, a
    /// policy written for the absolute threshold).
    ///
    /// # Errors
    /// When `workloads_cgroup` names a cgroup whose `io.pressure` cannot
    /// be read: what to say (a path written in the policy is not silently
    /// replaced, and the run removes nothing).
    pub fn for_policy(policy: &Policy) -> Result<Self, String> {
        Self::for_policy_under(policy, Path::new("/"))
    }

    /// [`Self::for_policy`] on the node whose root is `root`.
    fn for_policy_under(policy: &Policy, root: &Path) -> Result<Self, String> {
        let concurrency = policy.safety.concurrency;
        let Some(pace) = &policy.safety.pace else {
            return Ok(Self::unpaced(concurrency));
        };
        if let Some(note) = ceiling_only_note(pace) {
            tracing::warn!("safety.pace: {note}");
        }
        match Signal::find(root, &pace.workloads_cgroup) {
            Ok(signal) => Ok(Self::paced(pace.clone(), concurrency, signal)),
            Err(no) if no.runs_unpaced() => {
                if matches!(no, NoSignal::NoPodsCgroup(_)) {
                    // The default on a plain Docker host: nothing to warn of.
                    tracing::info!("safety.pace: {}", no.for_run());
                } else {
                    tracing::warn!("safety.pace: {}", no.for_run());
                }
                let mut pacer = Self::unpaced(concurrency);
                pacer.pace = Some(pace.clone());
                Ok(pacer)
            }
            Err(no) => Err(no.for_run()),
        }
    }

    /// A pacer that never paces: `safety.concurrency` alone.
    #[must_use]
    pub fn unpaced(concurrency: Concurrency) -> Self {
        let (most, climb) = match concurrency {
            Concurrency::Fixed(n) => (n.max(1), None),
            Concurrency::Auto => (
                adapt::CEILING,
                Some(Climb::new(adapt::START, adapt::CEILING, Instant::now())),
            ),
        };
        Self {
            pace: None,
            most,
            climb,
            budgeted: None,
            waited: Duration::ZERO,
            uncounted: false,
            readings: 0,
            max_seen: None,
            exhausted: false,
            disk: Disk::default(),
        }
    }

    /// A pacer that holds the removals by the stall budget over `signal`.
    #[must_use]
    pub fn paced(pace: Pace, concurrency: Concurrency, signal: Signal) -> Self {
        let mut pacer = Self::unpaced(concurrency);
        // The budget's concurrency rises and falls by its windows: `auto`
        // is its ceiling, not a climb of its own.
        pacer.climb = None;
        pacer.pace = Some(pace);
        pacer.budgeted = Some(Budgeted::new(signal));
        pacer
    }

    /// Whether it reads the workloads' stall: a paced run.
    #[must_use]
    pub fn reads_pressure(&self) -> bool {
        self.budgeted.is_some()
    }

    /// The most removals in flight this pacer ever allows.
    #[must_use]
    pub fn most(&self) -> usize {
        self.most
    }

    /// Whether the image file system is over `images.disk.high_percent`
    /// now (the executor measures it before each batch and each removal):
    /// while it is, the stall budget yields to the ceiling alone, and the
    /// report says so.
    pub fn disk_over_high(&mut self, over: bool) {
        if over && !self.disk.full && self.budgeted.is_some() {
            tracing::warn!(
                "safety.pace: the image file system is over images.disk.high_percent: the \
                 removals are held by the ceiling alone until it is under it"
            );
        }
        self.disk.full = over;
        self.disk.emergency |= over && self.budgeted.is_some();
    }

    /// At most this many removals in flight now.
    #[must_use]
    pub fn limit(&self) -> usize {
        if let Some(b) = &self.budgeted {
            if self.disk.full && !self.exhausted {
                return self.most;
            }
            return match &b.budget {
                // A kind not yet learned goes one at a time (see `Budget::gate`).
                Some(budget) if !self.exhausted && budget.cost(b.kind).is_some() => {
                    budget.concurrency().min(self.most)
                }
                Some(_) => 1,
                None => self.most,
            };
        }
        self.climb.as_ref().map_or(self.most, Climb::limit)
    }

    /// A kind's removals begin: `auto` climbs again for them. Returns the
    /// most removals in flight this pacer ever allows.
    pub fn begin_kind(&mut self, kind: Kind) -> usize {
        if let Some(b) = &mut self.budgeted {
            b.kind = kind;
        }
        if let Some(climb) = &mut self.climb {
            climb.restart(Instant::now());
        }
        self.most
    }

    /// A removal answered (removed or refused): `auto` measures the rate;
    /// the stall budget gives its slot back.
    pub fn completed(&mut self, slot: Slot) {
        if let Some(b) = &mut self.budgeted {
            b.answered += 1;
            b.last_answer = Some(Instant::now());
            if let (Some(budget), Slot(Some(ticket))) = (&mut b.budget, slot) {
                budget.finish(ticket);
            }
            return;
        }
        if let Some(climb) = &mut self.climb {
            climb.completed(Instant::now());
        }
    }

    /// Before a batch: go on (with how many in flight), or wait first.
    pub fn gate(&mut self) -> Gate {
        let now = Instant::now();
        self.observe_due(now);
        let most = self.limit();
        let left = self.max_delay().saturating_sub(self.waited);
        let Some(b) = self.budgeted.as_mut() else {
            return Gate::Go(most);
        };
        let on_max_delay = self
            .pace
            .as_ref()
            .map_or_else(OnMaxDelay::default, |p| p.on_max_delay);
        if self.exhausted {
            return match on_max_delay {
                OnMaxDelay::Continue => Gate::Go(1),
                OnMaxDelay::Stop => Gate::Stop,
            };
        }
        let Some(budget) = b.budget.as_mut().filter(|_| !b.unreadable) else {
            // Unreadable: nothing to hold the removals by (warned once).
            return Gate::Go(most);
        };
        let verdict = if self.disk.full {
            budget.gate_ceiling(most, now)
        } else {
            budget.gate(b.kind, now)
        };
        let wait = match verdict {
            // Nothing in flight and still full: a kind not yet learned
            // waits for the window that takes its last removal in. Not a
            // wait for the stall: it does not count against max_delay.
            Verdict::Full if budget.in_flight() == 0 => {
                let next = b.last.map_or(now, |(at, _)| at + OBSERVE);
                self.uncounted = true;
                return Gate::Wait(next.saturating_duration_since(now).max(MIN_WAIT));
            }
            // The limit as the verdict left it: a batch it began goes whole.
            Verdict::Start | Verdict::Full => return Gate::Go(self.limit()),
            Verdict::PayBack(d) => d.clamp(MIN_WAIT, OBSERVE),
            Verdict::Ceiling | Verdict::Rest => OBSERVE,
        };
        if left.is_zero() {
            tracing::warn!(
                on_max_delay = on_max_delay.as_str(),
                "safety.pace: the removals' added I/O stall still over budget after max_delay: {}",
                match on_max_delay {
                    OnMaxDelay::Continue => "going on one removal at a time",
                    OnMaxDelay::Stop => "no more removals this run",
                }
            );
            self.exhausted = true;
            return match on_max_delay {
                OnMaxDelay::Continue => Gate::Go(1),
                OnMaxDelay::Stop => Gate::Stop,
            };
        }
        let (tolerance, least, lag) = budget.held_by();
        tracing::debug!(
            wait_ms = wait.as_millis(),
            allowance_ms = budget.allowance(now) * 1000.0,
            tolerance_ms = tolerance * 1000.0,
            least_ms = least * 1000.0,
            lag_ms = lag * 1000.0,
            baseline_percent = budget.baseline() * 100.0,
            "safety.pace: the removals' added I/O stall over budget, waiting"
        );
        Gate::Wait(wait.min(left))
    }

    /// Counts a wait that lasted `d` (not one for an observation: see
    /// [`Self::gate`]).
    pub fn waited(&mut self, d: Duration) {
        if !std::mem::take(&mut self.uncounted) {
            self.waited += d;
        }
    }

    /// The policy's `max_delay`.
    fn max_delay(&self) -> Duration {
        self.pace.as_ref().map_or(Duration::ZERO, |pace| {
            pace.max_delay
                .as_duration()
                .to_std()
                .unwrap_or(Duration::ZERO)
        })
    }

    /// What the removals not attempted after a [`Gate::Stop`] say.
    #[must_use]
    pub fn stop_reason(&self) -> String {
        let max_delay = self
            .pace
            .as_ref()
            .map_or_else(|| "0s".to_owned(), |p| p.max_delay.to_string());
        format!(
            "not attempted: safety.pace waited max_delay {max_delay} with the removals' added I/O \
             stall over budget (on_max_delay: stop): left for the next run"
        )
    }

    /// Measures the workloads' baseline before the first removal, when
    /// paced (else does nothing): reads `some total` every
    /// [`baseline::INTERVAL`] for [`baseline::SPAN`]; a stop ends it at
    /// once. Removals go in batches where the engine `frees_when_settled`
    /// (see [`Limits::batch`]).
    pub async fn measure_baseline(&mut self, frees_when_settled: bool, shutdown: &Shutdown) {
        let most = self.most;
        let Some(pace) = self.pace.as_ref() else {
            return;
        };
        let limits = Limits::new(
            pace.added_io_pressure_percent / 100.0,
            pace.io_pressure_percent / 100.0,
            most,
        )
        .frees_when_settled(frees_when_settled);
        let Some(b) = self.budgeted.as_mut() else {
            return;
        };
        if b.budget.is_some() {
            return;
        }
        let Some((baseline, last)) = baseline::measure(|| b.total(), shutdown.wait()).await else {
            return;
        };
        let share = baseline.share().unwrap_or_else(|| {
            tracing::warn!(
                windows = baseline.windows(),
                "safety.pace: too few readings of the I/O stall for a baseline: taking 0"
            );
            0.0
        });
        let spread = baseline.spread().unwrap_or(0.0);
        tracing::info!(
            signal = b.signal.whose(),
            path = %b.stall.io().path().display(),
            cpu = b.stall.cpu().is_some(),
            baseline_percent = share * 100.0,
            spread_percent = spread * 100.0,
            "safety.pace: the workloads' own I/O stall before the removals"
        );
        b.baseline = Some(share);
        b.last = last;
        b.last_io = b.io_read;
        b.budget = Some(Budget::new(limits, share, Instant::now()).with_windows(baseline.shares()));
    }

    /// When the stall budget observes next, while removals go; `None`
    /// unpaced or before the baseline.
    #[must_use]
    pub fn observe_at(&self) -> Option<Instant> {
        let b = self.budgeted.as_ref()?;
        b.budget.as_ref()?;
        // Without a last reading (the file could not be read), after
        // OBSERVE too, not at once: an unreadable file must not busy the
        // executor's loop.
        let now = Instant::now();
        Some(b.last.map_or(now + OBSERVE, |(at, _)| at + OBSERVE))
    }

    /// Whether removals are in flight or in their tail, whose windows the
    /// budget must observe every [`OBSERVE`], in flight or not.
    #[must_use]
    pub fn watching(&self) -> bool {
        self.budgeted
            .as_ref()
            .and_then(|b| b.budget.as_ref())
            .is_some_and(Budget::watching)
    }

    /// Observes the workloads' stall when [`OBSERVE`] has passed since the
    /// last observation.
    pub fn observe_due(&mut self, now: Instant) {
        let Some(b) = self.budgeted.as_mut() else {
            return;
        };
        if b.budget.is_none()
            || b.last
                .is_some_and(|(at, _)| now.duration_since(at) < OBSERVE)
        {
            return;
        }
        let Some(total) = b.total() else {
            b.last = None;
            b.unreadable = true;
            return;
        };
        let io = b.io_read.unwrap_or_default();
        b.unreadable = false;
        let Some(budget) = b.budget.as_mut() else {
            return;
        };
        match b.last {
            Some((at, before)) if now.duration_since(at) >= MIN_WINDOW => {
                // A total that went back (a cgroup made anew): begin from it.
                if let Some(stalled) = total.checked_sub(before) {
                    // The ceiling is the I/O share's; the budget spends
                    // the I/O and CPU stall.
                    let io_stalled = b
                        .last_io
                        .and_then(|before| io.checked_sub(before))
                        .unwrap_or(stalled);
                    budget.observe_with_io(now, stalled, io_stalled);
                    let pressure = share(io_stalled, now.duration_since(at));
                    self.readings += 1;
                    self.max_seen = Some(self.max_seen.map_or(pressure, |m| m.max(pressure)));
                }
            }
            Some(_) => return,
            None => {}
        }
        b.last = Some((now, total));
        b.last_io = Some(io);
    }

    /// Whether a removal of `weight` may start now: a slot to give back
    /// through [`Self::completed`], or `None` when the stall budget holds
    /// it (the executor asks [`Self::gate`] again before the next batch).
    pub fn start(&mut self, weight: Weight) -> Option<Slot> {
        let now = Instant::now();
        self.observe_due(now);
        let stop = self.pace.as_ref().map(|p| p.on_max_delay) == Some(OnMaxDelay::Stop);
        let Some(b) = self.budgeted.as_mut() else {
            return Some(Slot(None));
        };
        let Some(budget) = b.budget.as_mut() else {
            return Some(Slot(None));
        };
        if b.unreadable && !(self.exhausted && stop) {
            return Some(Slot(None));
        }
        let go = if self.exhausted {
            !stop
        } else if self.disk.full {
            budget.gate_ceiling(self.most, now) == Verdict::Start
        } else {
            budget.gate(b.kind, now) == Verdict::Start
        };
        if !go {
            return None;
        }
        b.first_start.get_or_insert(now);
        Some(Slot(Some(budget.start(b.kind, weight, now))))
    }
}

mod report;

#[cfg(test)]
mod tests;
