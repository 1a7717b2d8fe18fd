//! How many removals may be in flight, and when to wait: the policy's
//! `safety.concurrency` (fixed, or `auto`: see [`super::adapt`]) and
//! `safety.pace`, removals that yield to the node's I/O.
//!
//! Before each removal batch the executor asks the [`Pacer`] whether to go
//! on. With `safety.pace`, the pacer reads the node's I/O pressure (PSI
//! `some`: the share of the time since its last reading, at least
//! [`super::psi::MIN_WINDOW`], in which some task waited on I/O; see [`super::psi`])
//! and, while it is above the policy's threshold, halves the removals in
//! flight and waits long enough that the stall it saw, spread over its
//! window and the wait, is at the threshold (at most [`WAIT_STEP`] at a
//! time, then read again: what a removal's window owes is carried over
//! the waits after it until it is paid, within [`STRETCH_MAX`]), up to
//! `max_delay` in all per run; past that the run goes on one removal at a
//! time. Under the threshold the concurrency doubles back. A node without
//! PSI runs unpaced, and says so once.
//!
//! With `added_io_pressure_percent` (issue 38) the pacer follows the stall
//! budget instead ([`super::budget`]): it reads the workloads' stall
//! ([`Signal`]), measures their baseline before the first removal
//! ([`super::baseline`]), observes every [`OBSERVE`] while removals go, and
//! asks the budget before each batch and each removal. Its waits count
//! against `max_delay` as before; once that is spent, `on_max_delay` says
//! whether the rest goes one at a time or is left for the next run.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::adapt::{self, Climb};
use super::baseline;
use super::budget::{Budget, Limits, Ticket, Verdict};
use super::psi::{Averages, MIN_WINDOW, PsiSource, PsiWindow, Reading, Signal, Stall, share};
use crate::inventory::Kind;
use crate::policy::{Concurrency, OnMaxDelay, Pace};
use crate::shutdown::Shutdown;

/// How often the stall budget observes the workloads' stall while removals
/// go: windows short enough that a removal's stall is seen while it lasts.
pub const OBSERVE: Duration = baseline::INTERVAL;

/// The longest single wait: the pressure is read again after it.
pub const WAIT_STEP: Duration = Duration::from_secs(1);

/// The shortest wait: shorter ones are mostly the scheduler's.
pub const MIN_WAIT: Duration = Duration::from_millis(50);

/// The longest stretch of windows a removal's stall is weighed over: older
/// windows drop out of it. A removal that would take longer to pay for at
/// the threshold's margin over the node's own pressure is forgiven then,
/// and a burst of the node's own I/O does not hold the run long after it
/// ended.
pub const STRETCH_MAX: Duration = Duration::from_secs(30);

/// What the pacer says before a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on, with at most this many removals in flight.
    Go(usize),
    /// Wait this long, then ask again.
    Wait(Duration),
    /// No more removals this run: the stall budget's `max_delay` is spent
    /// and `on_max_delay` is `stop` (see [`Pacer::stop_reason`]).
    Stop,
}

/// How a run was paced: the JSON report's `pace`, the table's summary
/// line and the metrics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaceReport {
    /// The file the pressure was read from; `null` when the node has none
    /// (the run was not paced).
    pub source: Option<String>,
    /// The policy's threshold, percent of a window stalled (PSI `some`).
    pub io_pressure_percent: f64,
    /// The policy's most waiting per run, seconds.
    pub max_delay_seconds: u64,
    /// Time spent waiting for the pressure to fall, seconds (3 decimals).
    pub paced_seconds: f64,
    /// How many times the pressure was read.
    pub readings: u64,
    /// The highest pressure read, percent; `null` with no reading.
    pub max_io_pressure_percent: Option<f64>,
    /// The fewest removals in flight it came down to.
    pub lowest_concurrency: usize,
    /// The pressure stayed high past `max_delay`: the rest went one at a
    /// time without waiting.
    pub delay_exhausted: bool,
    /// The stall budget's figures, when `added_io_pressure_percent` set it.
    #[serde(flatten)]
    pub budget: Option<BudgetReport>,
}

/// How the stall budget held a run (issue 38): the JSON report's `pace`
/// fields beside the others.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetReport {
    /// Whose stall was read: `workloads` (the pods' cgroup) or `node`.
    pub signal: &'static str,
    /// The workloads' `cpu.pressure`, read beside `source`: the budget
    /// counts their waits for a CPU with their waits on I/O; `null` when
    /// it is not read (the node's signal, or no such file).
    pub cpu_source: Option<String>,
    /// The workloads' own stall before the first removal, percent of wall
    /// time (3 decimals); `null` when it was not measured (no removal, or
    /// a stop first).
    pub baseline_io_pressure_percent: Option<f64>,
    /// The baseline at the run's end, percent (3 decimals): measured again
    /// in pauses, lowered while removals went; `null` as the first.
    pub last_baseline_io_pressure_percent: Option<f64>,
    /// How many pauses measured the baseline again.
    pub baseline_remeasured: u64,
    /// The policy's target: what the removals may add, percent.
    pub added_io_pressure_percent: f64,
    /// The stall above the baseline observed while the run removed,
    /// seconds (3 decimals).
    pub added_stall_seconds: f64,
    /// What the rest did once `max_delay` was spent.
    pub on_max_delay: OnMaxDelay,
    /// Removals answered per second, from the first start to the last
    /// answer (2 decimals); `null` with none.
    pub objects_per_second: Option<f64>,
}

impl fmt::Display for PaceReport {
    /// The table's summary line, after `paced: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(budget) = &self.budget {
            return self.fmt_budget(budget, f);
        }
        let threshold = self.io_pressure_percent;
        let Some(max) = self.max_io_pressure_percent else {
            return if self.source.is_none() {
                f.write_str("no, the node shows no I/O pressure (PSI)")
            } else {
                f.write_str("no removal batch to pace")
            };
        };
        if self.paced_seconds == 0.0 && max <= threshold {
            return write!(
                f,
                "not needed (I/O pressure up to {max:.1}%, threshold {threshold}%)"
            );
        }
        write!(
            f,
            "waited {:.1}s for I/O pressure (up to {max:.1}%, threshold {threshold}%), \
             concurrency down to {}",
            self.paced_seconds, self.lowest_concurrency
        )?;
        if self.delay_exhausted {
            write!(
                f,
                "; max_delay {}s spent, the rest one at a time",
                self.max_delay_seconds
            )?;
        }
        Ok(())
    }
}

impl PaceReport {
    /// The table's line for a run held by the stall budget.
    fn fmt_budget(&self, budget: &BudgetReport, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = if budget.signal == "workloads" {
            "the workloads'"
        } else {
            "the node's"
        };
        let Some(baseline) = budget.baseline_io_pressure_percent else {
            return if self.source.is_none() {
                f.write_str("no, the node shows no I/O pressure (PSI)")
            } else {
                f.write_str("no removal batch to pace")
            };
        };
        let stall = if budget.cpu_source.is_some() {
            "I/O and CPU stall"
        } else {
            "I/O stall"
        };
        write!(f, "by {whose} {stall}: baseline {baseline:.2}%")?;
        if let Some(last) = budget.last_baseline_io_pressure_percent
            && (budget.baseline_remeasured > 0 || (last - baseline).abs() >= 0.005)
        {
            write!(f, " ({last:.2}% at the end")?;
            match budget.baseline_remeasured {
                0 => {}
                1 => f.write_str(", measured again in a pause")?,
                n => write!(f, ", measured again in {n} pauses")?,
            }
            f.write_str(")")?;
        }
        write!(
            f,
            ", removals added {:.1}s of stall (target +{}%, ceiling {}%), waited {:.1}s",
            budget.added_stall_seconds,
            budget.added_io_pressure_percent,
            self.io_pressure_percent,
            self.paced_seconds,
        )?;
        // Not the concurrency: the budget's starts at one and climbs, so
        // its lowest says little here (the JSON has it).
        if let Some(rate) = budget.objects_per_second {
            write!(f, ", {rate:.1} objects/s")?;
        }
        if self.delay_exhausted {
            let rest = match budget.on_max_delay {
                OnMaxDelay::Continue => "the rest one at a time",
                OnMaxDelay::Stop => "the rest left for the next run",
            };
            write!(f, "; max_delay {}s spent, {rest}", self.max_delay_seconds)?;
        }
        Ok(())
    }
}

/// A threshold against what the node itself does: `check` and `plan` say
/// it, and a paced run warns when the threshold is at or under it.
///
/// The pacer holds a run's pressure at the threshold, so what the removals
/// may add is its margin over the node's own pressure. At or under that
/// pressure they may add nothing: every batch waits until `max_delay` is
/// spent, and the rest go one at a time (issue 24's runs with a margin of
/// 0.1 point or less crawled at a container every few seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct NodePressure {
    /// The file read.
    source: String,
    /// PSI `some`'s averages there.
    averages: Averages,
    /// The policy's threshold, percent.
    threshold: f64,
    /// The policy's most waiting per run, as written.
    max_delay: crate::policy::Age,
}

/// What a node without PSI is said to show, by `check` and `plan` and by a
/// paced run.
const NO_PSI: &str = "safety.pace: this node shows no I/O pressure (PSI)";

impl NodePressure {
    /// `check`'s and `plan`'s line, after `safeprune: `: the threshold
    /// against the pressure of the node under `root` (`/` on a node), or
    /// that it shows none and what was tried.
    #[must_use]
    pub fn line(pace: &Pace, root: &Path) -> String {
        Self::checked(pace, root).0
    }

    /// [`Self::line`], and whether the node shows its pressure at all
    /// (`check` fails when it does not: the policy asks for pacing).
    #[must_use]
    pub fn checked(pace: &Pace, root: &Path) -> (String, bool) {
        match Self::read(pace, root) {
            Ok(node) => (node.to_string(), true),
            Err(tried) => (
                format!("{NO_PSI}: removals would not be paced (tried {tried})"),
                false,
            ),
        }
    }

    /// The node's pressure under `root` (`/` on a node) against `pace`.
    ///
    /// # Errors
    /// When the node shows no pressure: what was tried.
    fn read(pace: &Pace, root: &Path) -> Result<Self, String> {
        Self::of(pace, &PsiSource::find(root)?)
    }

    /// The pressure `source` shows against `pace`.
    ///
    /// # Errors
    /// When its averages cannot be read: the file and why.
    fn of(pace: &Pace, source: &PsiSource) -> Result<Self, String> {
        let averages = source
            .averages()
            .map_err(|e| format!("{}: {e}", source.path().display()))?;
        Ok(Self {
            source: source.path().display().to_string(),
            averages,
            threshold: pace.io_pressure_percent,
            max_delay: pace.max_delay,
        })
    }

    /// The threshold is at or under the node's own pressure over the last
    /// minute and the last five: not a burst, what the node does.
    fn leaves_no_room(&self) -> bool {
        self.threshold <= self.averages.avg60.min(self.averages.avg300)
    }

    /// What to do about it, when [`Self::leaves_no_room`].
    fn advice(&self) -> String {
        format!(
            "io_pressure_percent {} is at or under this node's own I/O pressure \
             over the last minute and five ({:.2}%, {:.2}%): a run would wait up to \
             max_delay {} and then go on one removal at a time; set it a few tenths \
             of a point above the node's quiet pressure",
            self.threshold, self.averages.avg60, self.averages.avg300, self.max_delay
        )
    }
}

impl fmt::Display for NodePressure {
    /// `check`'s and `plan`'s line, after `safeprune: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Averages {
            avg10,
            avg60,
            avg300,
        } = self.averages;
        write!(
            f,
            "safety.pace: threshold {}%; this node's I/O pressure (PSI some, {}) \
             over the last 10 s, 1 min and 5 min: {avg10:.2}%, {avg60:.2}%, {avg300:.2}%",
            self.threshold, self.source
        )?;
        if self.leaves_no_room() {
            write!(f, "; warning: {}", self.advice())?;
        }
        Ok(())
    }
}

/// The stall budget against what the workloads do now: `check`'s line
/// and `plan`'s (issue 38).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadsStall {
    /// `the workloads'` or `the node's`.
    whose: &'static str,
    /// The file read.
    path: String,
    /// Their `cpu.pressure` is read beside it.
    cpu: bool,
    /// Why not the workloads' (the node's fallback), said after it.
    fallback: Option<String>,
    /// The policy's target and ceiling, percent.
    target: f64,
    ceiling: f64,
    /// Their stall now, 0 to 1: the [`baseline::level`] of
    /// [`baseline::INTERVAL`] windows over [`baseline::SPAN`]; `None` when
    /// not measured.
    baseline: Option<f64>,
}

impl WorkloadsStall {
    /// Whose stall a run would read under `root` (`/` on a node), with
    /// `pace`'s budget (`None` without `added_io_pressure_percent`).
    ///
    /// # Errors
    /// When no stall can be read: the configured cgroup's error, or what
    /// was tried.
    #[must_use]
    pub fn find(pace: &Pace, root: &Path) -> Option<Result<(Self, Signal), String>> {
        let target = pace.added_io_pressure_percent?;
        Some(
            Signal::find(root, pace.workloads_cgroup.as_deref()).map(|signal| {
                let (whose, fallback) = match &signal {
                    Signal::Workloads(_) => ("the workloads'", None),
                    Signal::Node(..) => ("the node's", signal.fallback_note()),
                };
                let stall = Self {
                    whose,
                    path: signal.source().path().display().to_string(),
                    cpu: signal.cpu().is_some(),
                    fallback,
                    target,
                    ceiling: pace.io_pressure_percent,
                    baseline: None,
                };
                (stall, signal)
            }),
        )
    }

    /// Measures their stall now as a run would before its first removal:
    /// `some total` every [`baseline::INTERVAL`] for [`baseline::SPAN`].
    pub async fn measure(&mut self, signal: &Signal) {
        let mut stall = Stall::of(signal);
        let read = || stall.read().ok().map(|(_, sum)| sum);
        self.baseline = baseline::measure(read, std::future::pending())
            .await
            .and_then(|(baseline, _)| baseline.share());
    }

    /// `check`'s line (after `safeprune: `) when no stall can be read,
    /// from what [`Self::find`] said, and what to do.
    #[must_use]
    pub fn unreadable(pace: &Pace, error: &str) -> String {
        if pace.workloads_cgroup.is_some() {
            unreadable_workloads(error, "a run would remove nothing")
        } else {
            format!(
                "{NO_PSI}: removals would not be paced (tried {error}); to pace them, turn \
                 PSI on (a kernel with CONFIG_PSI, booted with psi=1), or remove safety.pace"
            )
        }
    }
}

impl fmt::Display for WorkloadsStall {
    /// `check`'s and `plan`'s line, after `safeprune: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (stall, cpu) = if self.cpu {
            ("I/O and CPU stall", " and cpu.pressure")
        } else {
            ("I/O stall", "")
        };
        write!(
            f,
            "safety.pace: by {} {stall} (PSI some, {}{cpu}): removals may add +{}% above \
             their own, ceiling {}%",
            self.whose, self.path, self.target, self.ceiling
        )?;
        if let Some(share) = self.baseline {
            write!(
                f,
                "; their own now: {:.2}% (mean of {} ms windows over {} s, less the highest)",
                share * 100.0,
                baseline::INTERVAL.as_millis(),
                baseline::SPAN.as_secs()
            )?;
        }
        if let Some(note) = &self.fallback {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// A `workloads_cgroup` whose `io.pressure` cannot be read (`error`): what
/// comes of it (`outcome`) and what to do. A path written in the policy is
/// not silently replaced.
fn unreadable_workloads(error: &str, outcome: &str) -> String {
    format!(
        "safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure ({error}): \
         {outcome}; fix the path, or remove it to use kubelet's pods' cgroup"
    )
}

/// What the window of the next reading holds.
#[derive(Debug, Clone, Copy, Default)]
struct NextWindow {
    /// A wait the last gate asked for: such a window says nothing of how
    /// the removals weigh.
    waited: bool,
    /// A batch that went: the window has removals in it.
    removals: bool,
}

/// Windows of readings, each with its stall (seconds), spanning at most
/// [`STRETCH_MAX`] (the last window alone may be longer).
#[derive(Debug, Default)]
struct Stretch {
    windows: std::collections::VecDeque<(f64, Duration)>,
    stalled: f64,
    span: Duration,
}

impl Stretch {
    fn begin(&mut self, stall: f64, window: Duration) {
        *self = Self::default();
        self.add(stall, window);
    }

    /// Adds a window to a stretch begun; none is begun before the first
    /// removal.
    fn extend(&mut self, stall: f64, window: Duration) {
        if !self.windows.is_empty() {
            self.add(stall, window);
        }
    }

    fn add(&mut self, stall: f64, window: Duration) {
        self.windows.push_back((stall, window));
        self.stalled += stall;
        self.span += window;
        while self.span > STRETCH_MAX && self.windows.len() > 1 {
            let (stall, window) = self.windows.pop_front().expect("more than one");
            self.stalled -= stall;
            self.span -= window;
        }
    }

    /// The share of the stretch stalled, percent; `None` when empty.
    fn share(&self) -> Option<f64> {
        (!self.span.is_zero()).then(|| (100.0 * self.stalled / self.span.as_secs_f64()).max(0.0))
    }
}

/// Reads the pressure: a PSI file on a node, a list of readings in tests.
pub type Reader = Box<dyn FnMut() -> Reading + Send>;

/// A removal the pacer let start, to give back when it has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot(Option<Ticket>);

/// The stall budget's side of a pacer (`added_io_pressure_percent`).
struct Budgeted {
    /// `workloads` or `node`.
    signal: &'static str,
    /// The I/O stall, and the workloads' CPU stall beside it.
    stall: Stall,
    /// The I/O `some total` of the latest reading, and of the last
    /// observation's: the ceiling is the I/O share alone.
    io_read: Option<Duration>,
    last_io: Option<Duration>,
    /// The policy's target, percent.
    target: f64,
    on_max_delay: OnMaxDelay,
    /// Set once the baseline is measured.
    budget: Option<Budget>,
    /// The measured baseline, 0 to 1.
    baseline: Option<f64>,
    /// The last observation: when, and the stall's total then (I/O and
    /// CPU `some total`s summed).
    last: Option<(tokio::time::Instant, Duration)>,
    /// The kind whose removals go now.
    kind: Kind,
    first_start: Option<tokio::time::Instant>,
    last_answer: Option<tokio::time::Instant>,
    answered: u64,
    warned: bool,
    /// The last reading failed: the budget holds nothing until one reads.
    unreadable: bool,
}

impl Budgeted {
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

/// Decides, before each removal batch, how many removals may be in flight
/// and whether to wait first (see the module).
pub struct Pacer {
    pace: Option<Pace>,
    source: Option<String>,
    read: Option<Reader>,
    /// The most in flight: the policy's fixed concurrency, or `auto`'s
    /// ceiling.
    most: usize,
    /// `auto`'s climb; `None` for a fixed concurrency.
    climb: Option<Climb>,
    /// What the pressure allows now (`most` while it is low).
    cap: usize,
    /// The last reading was above the threshold.
    pressed: bool,
    /// What the next reading's window holds.
    next: NextWindow,
    /// The windows read since the last one with removals in it, that
    /// window first, each with its stall (seconds), at most
    /// [`STRETCH_MAX`] of them: a wait pays for the removals' stall only
    /// when the whole stretch comes to the threshold. Empty before the
    /// first removal.
    stretch: Stretch,
    lowest: usize,
    waited: Duration,
    readings: u64,
    max_seen: Option<f64>,
    exhausted: bool,
    /// The stall budget, with `added_io_pressure_percent`; `None`: the
    /// threshold law.
    budgeted: Option<Budgeted>,
    /// The wait under way is for the stall budget's next observation, not
    /// for the stall: it is not counted.
    uncounted: bool,
}

impl Pacer {
    /// The pacer `policy` asks for, reading this node's PSI; a node
    /// without it is warned about once, here. With
    /// `added_io_pressure_percent`, the stall budget over the workloads'
    /// stall (the node's where no pods' cgroup is found, said once).
    ///
    /// # Errors
    /// When `workloads_cgroup` is set and its `io.pressure` cannot be read:
    /// a path written in the policy is not silently replaced.
    pub fn for_policy(policy: &crate::policy::Policy) -> Result<Self, String> {
        let concurrency = policy.safety.concurrency;
        let Some(pace) = &policy.safety.pace else {
            return Ok(Self::new(None, concurrency, None, None));
        };
        if pace.added_io_pressure_percent.is_some() {
            return match Signal::find(Path::new("/"), pace.workloads_cgroup.as_deref()) {
                Ok(signal) => {
                    if let Some(note) = signal.fallback_note() {
                        tracing::warn!("safety.pace: {note}");
                    }
                    Ok(Self::with_budget(pace.clone(), concurrency, &signal))
                }
                Err(e) if pace.workloads_cgroup.is_some() => {
                    Err(unreadable_workloads(&e, "nothing removed"))
                }
                Err(tried) => {
                    tracing::warn!(tried = %tried, "{NO_PSI}: removals are not paced");
                    Ok(Self::new(Some(pace.clone()), concurrency, None, None))
                }
            };
        }
        match PsiSource::find(Path::new("/")) {
            Ok(source) => {
                if let Ok(node) = NodePressure::of(pace, &source)
                    && node.leaves_no_room()
                {
                    tracing::warn!(source = %node.source, "safety.pace: {}", node.advice());
                }
                let path = source.path().display().to_string();
                let mut window = PsiWindow::new(source);
                Ok(Self::new(
                    Some(pace.clone()),
                    concurrency,
                    Some(path),
                    Some(Box::new(move || window.read())),
                ))
            }
            Err(tried) => {
                tracing::warn!(tried = %tried, "{NO_PSI}: removals are not paced");
                Ok(Self::new(Some(pace.clone()), concurrency, None, None))
            }
        }
    }

    /// A pacer that holds the removals by the stall budget over `signal`
    /// (`pace.added_io_pressure_percent` set; without it, never pacing).
    #[must_use]
    pub(super) fn with_budget(pace: Pace, concurrency: Concurrency, signal: &Signal) -> Self {
        let Some(target) = pace.added_io_pressure_percent else {
            return Self::new(None, concurrency, None, None);
        };
        let on_max_delay = pace.on_max_delay;
        let path = signal.source().path().display().to_string();
        let stall = Stall::of(signal);
        let whose = match signal {
            Signal::Workloads(_) => "workloads",
            Signal::Node(..) => "node",
        };
        let mut pacer = Self::new(Some(pace), concurrency, Some(path), None);
        pacer.budgeted = Some(Budgeted {
            signal: whose,
            stall,
            io_read: None,
            last_io: None,
            target,
            on_max_delay,
            budget: None,
            baseline: None,
            last: None,
            kind: Kind::Container,
            first_start: None,
            last_answer: None,
            answered: 0,
            warned: false,
            unreadable: false,
        });
        pacer
    }

    /// A pacer over `read`; `pace` `None`: never pacing.
    #[must_use]
    pub fn new(
        pace: Option<Pace>,
        concurrency: Concurrency,
        source: Option<String>,
        read: Option<Reader>,
    ) -> Self {
        let (most, climb) = match concurrency {
            Concurrency::Fixed(n) => (n.max(1), None),
            Concurrency::Auto => (
                adapt::CEILING,
                Some(Climb::new(adapt::START, adapt::CEILING, Instant::now())),
            ),
        };
        let start = climb.as_ref().map_or(most, Climb::limit);
        Self {
            pace,
            source,
            read,
            most,
            climb,
            cap: most,
            pressed: false,
            next: NextWindow::default(),
            stretch: Stretch::default(),
            lowest: start,
            waited: Duration::ZERO,
            readings: 0,
            max_seen: None,
            exhausted: false,
            budgeted: None,
            uncounted: false,
        }
    }

    /// Whether it reads the node's I/O pressure: `safety.pace` on a node
    /// with PSI.
    #[must_use]
    pub fn reads_pressure(&self) -> bool {
        self.pace.is_some() && (self.read.is_some() || self.budgeted.is_some())
    }

    /// The most removals in flight this pacer ever allows.
    #[must_use]
    pub fn most(&self) -> usize {
        self.most
    }

    /// At most this many removals in flight now.
    #[must_use]
    pub fn limit(&self) -> usize {
        if let Some(b) = &self.budgeted
            && let Some(budget) = &b.budget
        {
            // A kind not yet learned goes one at a time (see `Budget::gate`).
            return if self.exhausted || budget.cost(b.kind).is_none() {
                1
            } else {
                budget.concurrency().min(self.most)
            };
        }
        let climbed = self.climb.as_ref().map_or(self.most, Climb::limit);
        climbed.min(self.cap)
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
            b.last_answer = Some(tokio::time::Instant::now());
            if let (Some(budget), Slot(Some(ticket))) = (&mut b.budget, slot) {
                budget.finish(ticket);
            }
            return;
        }
        let capped = self.cap < self.climb.as_ref().map_or(0, Climb::limit);
        if let Some(climb) = &mut self.climb {
            if capped {
                climb.discard_round(Instant::now());
            } else {
                climb.completed(Instant::now());
            }
        }
        self.lowest = self.lowest.min(self.limit());
    }

    /// Before a batch: go on (with how many in flight), or wait first.
    pub fn gate(&mut self) -> Gate {
        let gate = self.decide();
        if let Gate::Go(_) = gate {
            self.next.removals = true;
        }
        gate
    }

    fn decide(&mut self) -> Gate {
        if self.budgeted.is_some() {
            return self.decide_by_budget();
        }
        let (Some(pace), Some(read)) = (self.pace.as_ref(), self.read.as_mut()) else {
            return Gate::Go(self.limit());
        };
        let (threshold, most_delay) = (pace.io_pressure_percent, max_delay(pace));
        let (pressure, window) = match read() {
            Reading::Share(pressure, window) => (pressure, window),
            // Down to one at a time under pressure, one removal's weight
            // is read before the next goes: it waits out the window.
            // That window has the removal in it: its reading counts.
            Reading::TooSoon(left) if self.pressed && self.cap == 1 && !self.exhausted => {
                return Gate::Wait(left);
            }
            Reading::TooSoon(_) | Reading::Unreadable => return Gate::Go(self.limit()),
        };
        self.readings += 1;
        self.max_seen = Some(self.max_seen.map_or(pressure, |m| m.max(pressure)));
        let NextWindow {
            waited: after_wait,
            removals,
        } = std::mem::take(&mut self.next);
        // A window with removals in it begins a stretch, and each window
        // after it (a wait) adds to it: the removals' stall is paid for
        // only when the whole stretch comes to the threshold, however many
        // waits that takes. Before any removal (the first reading is what
        // the node was doing) a window is weighed alone.
        let stall = window.as_secs_f64() * pressure / 100.0;
        if removals {
            self.stretch.begin(stall, window);
        } else {
            self.stretch.extend(stall, window);
        }
        let (pressure, span) = match self.stretch.share() {
            Some(share) => (share, self.stretch.span),
            None => (pressure, window),
        };
        if pressure <= threshold {
            // A window that was mostly a wait is low by its making: only
            // one with removals in it says they weigh little enough.
            if !after_wait {
                self.pressed = false;
                self.cap = (self.cap * 2).min(self.most);
            }
            return Gate::Go(self.limit());
        }
        self.pressed = true;
        self.cap = (self.limit() / 2).max(1);
        self.lowest = self.lowest.min(self.cap);
        let budget = most_delay.saturating_sub(self.waited);
        if budget.is_zero() {
            if !self.exhausted {
                tracing::warn!(
                    pressure,
                    threshold,
                    "safety.pace: I/O pressure still high after max_delay: going on one removal at a time"
                );
            }
            self.exhausted = true;
            self.cap = 1;
            self.lowest = 1;
            return Gate::Go(1);
        }
        // Long enough that the stall seen, spread over the stretch and the
        // wait, is at the threshold.
        let wait = span
            .mul_f64(pressure / threshold - 1.0)
            .clamp(MIN_WAIT, WAIT_STEP)
            .min(budget);
        tracing::debug!(
            pressure,
            threshold,
            concurrency = self.cap,
            wait_ms = wait.as_millis(),
            "safety.pace: I/O pressure high, waiting"
        );
        self.next.waited = true;
        Gate::Wait(wait)
    }

    /// Counts a wait that lasted `d` (not one for an observation: see
    /// [`Self::decide_by_budget`]).
    pub fn waited(&mut self, d: Duration) {
        if !std::mem::take(&mut self.uncounted) {
            self.waited += d;
        }
    }

    /// The stall budget's gate before a batch (see the module).
    fn decide_by_budget(&mut self) -> Gate {
        let now = tokio::time::Instant::now();
        self.observe_due(now);
        let Some(b) = self.budgeted.as_mut() else {
            return Gate::Go(self.limit());
        };
        let on_max_delay = b.on_max_delay;
        if self.exhausted {
            return match on_max_delay {
                OnMaxDelay::Continue => Gate::Go(1),
                OnMaxDelay::Stop => Gate::Stop,
            };
        }
        let Some(budget) = b.budget.as_mut().filter(|_| !b.unreadable) else {
            // Unreadable: nothing to hold the removals by (warned once).
            return Gate::Go(self.limit());
        };
        let wait = match budget.gate(b.kind, now.into_std()) {
            // Nothing in flight and still full: a kind not yet learned
            // waits for the window that takes its last removal in. Not a
            // wait for the stall: it does not count against max_delay.
            Verdict::Full if budget.in_flight() == 0 => {
                let next = b.last.map_or(now, |(at, _)| at + OBSERVE);
                self.uncounted = true;
                return Gate::Wait(next.saturating_duration_since(now).max(MIN_WAIT));
            }
            Verdict::Start | Verdict::Full => return Gate::Go(self.limit()),
            Verdict::PayBack(d) => d.clamp(MIN_WAIT, OBSERVE),
            Verdict::Ceiling => OBSERVE,
        };
        let max = self.pace.as_ref().map_or(Duration::ZERO, max_delay);
        let left = max.saturating_sub(self.waited);
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
        tracing::debug!(
            wait_ms = wait.as_millis(),
            allowance_ms = budget.allowance(now.into_std()) * 1000.0,
            baseline_percent = budget.baseline() * 100.0,
            "safety.pace: the removals' added I/O stall over budget, waiting"
        );
        Gate::Wait(wait.min(left))
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

    /// Measures the workloads' baseline before the first removal, with the
    /// stall budget (else does nothing): reads `some total` every
    /// [`baseline::INTERVAL`] for [`baseline::SPAN`]; a stop ends it at
    /// once.
    pub async fn measure_baseline(&mut self, shutdown: &Shutdown) {
        let most = self.most;
        let Some(pace) = self.pace.as_ref() else {
            return;
        };
        let ceiling = pace.io_pressure_percent / 100.0;
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
        tracing::info!(
            signal = b.signal,
            path = %b.stall.io().path().display(),
            cpu = b.stall.cpu().is_some(),
            baseline_percent = share * 100.0,
            "safety.pace: the workloads' own I/O stall before the removals"
        );
        let now = tokio::time::Instant::now();
        b.baseline = Some(share);
        b.last = last;
        b.last_io = b.io_read;
        b.budget = Some(Budget::new(
            Limits {
                target: b.target / 100.0,
                ceiling,
                max: most,
            },
            share,
            now.into_std(),
        ));
    }

    /// When the stall budget observes next, while removals go; `None`
    /// under the threshold law or before the baseline.
    #[must_use]
    pub fn observe_at(&self) -> Option<tokio::time::Instant> {
        let b = self.budgeted.as_ref()?;
        b.budget.as_ref()?;
        // Without a last reading (the file could not be read), after
        // OBSERVE too, not at once: an unreadable file must not busy the
        // executor's loop.
        let now = tokio::time::Instant::now();
        Some(b.last.map_or(now + OBSERVE, |(at, _)| at + OBSERVE))
    }

    /// Observes the workloads' stall when [`OBSERVE`] has passed since the
    /// last observation (the stall budget only).
    pub fn observe_due(&mut self, now: tokio::time::Instant) {
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
                    budget.observe_with_io(now.into_std(), stalled, io_stalled);
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

    /// Whether a removal may start now: a slot to give back through
    /// [`Self::completed`], or `None` when the stall budget holds it (the
    /// executor asks [`Self::gate`] again before the next batch).
    pub fn start(&mut self) -> Option<Slot> {
        let now = tokio::time::Instant::now();
        self.observe_due(now);
        let Some(b) = self.budgeted.as_mut() else {
            return Some(Slot(None));
        };
        let Some(budget) = b.budget.as_mut() else {
            return Some(Slot(None));
        };
        if b.unreadable && !(self.exhausted && b.on_max_delay == OnMaxDelay::Stop) {
            return Some(Slot(None));
        }
        let go = if self.exhausted {
            b.on_max_delay == OnMaxDelay::Continue
        } else {
            budget.gate(b.kind, now.into_std()) == Verdict::Start
        };
        if !go {
            return None;
        }
        b.first_start.get_or_insert(now);
        Some(Slot(Some(budget.start(b.kind, now.into_std()))))
    }

    /// How the run was paced; `None` when `safety.pace` is off.
    #[must_use]
    pub fn report(&self) -> Option<PaceReport> {
        let pace = self.pace.as_ref()?;
        let round = |x: f64, places: i32| {
            let scale = 10f64.powi(places);
            (x * scale).round() / scale
        };
        let budget = self.budgeted.as_ref().map(|b| {
            let accounts = b.budget.as_ref().map(Budget::accounts);
            BudgetReport {
                signal: b.signal,
                cpu_source: b
                    .stall
                    .cpu()
                    .map(|source| source.path().display().to_string()),
                baseline_io_pressure_percent: b.baseline.map(|s| round(s * 100.0, 3)),
                last_baseline_io_pressure_percent: b
                    .budget
                    .as_ref()
                    .map(|budget| round(budget.baseline() * 100.0, 3)),
                baseline_remeasured: accounts.map_or(0, |a| a.remeasured),
                added_io_pressure_percent: b.target,
                added_stall_seconds: round(
                    accounts.map_or(0.0, |a| a.added_stall.as_secs_f64()),
                    3,
                ),
                on_max_delay: b.on_max_delay,
                objects_per_second: match (b.first_start, b.last_answer) {
                    (Some(first), Some(last)) if last > first => {
                        #[expect(clippy::cast_precision_loss, reason = "removals, far under 2^52")]
                        let answered = b.answered as f64;
                        Some(round(answered / (last - first).as_secs_f64(), 2))
                    }
                    _ => None,
                },
            }
        });
        let lowest = match self.budgeted.as_ref().and_then(|b| b.budget.as_ref()) {
            Some(_) if self.exhausted => 1,
            Some(budget) => budget.accounts().lowest_concurrency.unwrap_or(self.most),
            None => self.lowest,
        };
        Some(PaceReport {
            source: self.source.clone(),
            io_pressure_percent: pace.io_pressure_percent,
            max_delay_seconds: max_delay(pace).as_secs(),
            paced_seconds: (self.waited.as_secs_f64() * 1000.0).round() / 1000.0,
            readings: self.readings,
            max_io_pressure_percent: self.max_seen.map(|p| (p * 10.0).round() / 10.0),
            lowest_concurrency: lowest,
            delay_exhausted: self.exhausted,
            budget,
        })
    }
}

fn max_delay(pace: &Pace) -> Duration {
    pace.max_delay
        .as_duration()
        .to_std()
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Age;

    fn pace(threshold: f64, max_delay_secs: &str) -> Pace {
        Pace {
            io_pressure_percent: threshold,
            max_delay: max_delay_secs.parse::<Age>().unwrap(),
            ..Pace::default()
        }
    }

    /// A node root whose `/proc/pressure/io` says `some`.
    fn node_with(some: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("proc/pressure")).unwrap();
        std::fs::write(
            root.path().join("proc/pressure/io"),
            format!("some {some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"),
        )
        .unwrap();
        root
    }

    #[test]
    fn check_says_the_threshold_against_the_nodes_own_pressure() {
        let root = node_with("avg10=2.50 avg60=1.35 avg300=1.37 total=99");
        let node = NodePressure::read(&pace(1.6, "10m"), root.path()).unwrap();
        assert!(!node.leaves_no_room());
        let line = node.to_string();
        assert!(
            line.contains("threshold 1.6%")
                && line.contains("proc/pressure/io")
                && line.contains("2.50%, 1.35%, 1.37%"),
            "{line}"
        );
        assert!(!line.contains("warning"), "{line}");
    }

    #[test]
    fn a_threshold_at_or_under_what_the_node_does_is_warned_of() {
        // Over the last minute and five, not a burst: avg10 alone high
        // says nothing of the node's own pressure.
        let burst = node_with("avg10=9.00 avg60=1.20 avg300=1.10 total=99");
        let node = NodePressure::read(&pace(1.5, "10m"), burst.path()).unwrap();
        assert!(!node.leaves_no_room());
        let under = node_with("avg10=1.00 avg60=1.62 avg300=1.50 total=99");
        let node = NodePressure::read(&pace(1.5, "10m"), under.path()).unwrap();
        assert!(node.leaves_no_room());
        let line = node.to_string();
        assert!(
            line.contains("warning: io_pressure_percent 1.5 is at or under")
                && line.contains("(1.62%, 1.50%)")
                && line.contains("max_delay 10m and then")
                && line.contains("a few tenths of a point above"),
            "{line}"
        );
        // One average under it is a node that has just quietened or
        // just got busy: no warning.
        let quietened = node_with("avg10=0.20 avg60=0.90 avg300=1.80 total=99");
        let node = NodePressure::read(&pace(1.5, "10m"), quietened.path()).unwrap();
        assert!(!node.leaves_no_room());
    }

    #[test]
    fn without_psi_it_says_what_it_tried() {
        let root = tempfile::tempdir().unwrap();
        let tried = NodePressure::read(&pace(1.5, "10m"), root.path()).unwrap_err();
        assert!(tried.contains("proc/pressure/io"), "{tried}");
        let no_averages = node_with("total=99");
        let tried = NodePressure::read(&pace(1.5, "10m"), no_averages.path()).unwrap_err();
        assert!(tried.contains("proc/pressure/io"), "{tried}");
    }

    /// The window every test reading covers.
    const WINDOW: Duration = Duration::from_millis(200);

    /// A pacer of a fixed concurrency reading `figures` in turn, each over
    /// [`WINDOW`] (`None`: an unreadable file).
    fn reading(pace: Pace, most: usize, figures: Vec<Option<f64>>) -> Pacer {
        let readings = figures
            .into_iter()
            .map(|f| f.map_or(Reading::Unreadable, |f| Reading::Share(f, WINDOW)))
            .collect();
        reading_all(pace, most, readings)
    }

    /// A pacer of a fixed concurrency getting `readings` in turn.
    fn reading_all(pace: Pace, most: usize, readings: Vec<Reading>) -> Pacer {
        let mut readings = readings.into_iter();
        Pacer::new(
            Some(pace),
            Concurrency::Fixed(most),
            Some("/proc/pressure/io".into()),
            Some(Box::new(move || readings.next().expect("a reading left"))),
        )
    }

    #[test]
    fn under_the_threshold_nothing_waits() {
        let mut p = reading(pace(10.0, "1m"), 4, vec![Some(2.0), Some(10.0)]);
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.gate(), Gate::Go(4), "at the threshold is not above it");
        let r = p.report().unwrap();
        assert!(r.paced_seconds.abs() < f64::EPSILON);
        assert_eq!(r.readings, 2);
        assert_eq!(r.max_io_pressure_percent, Some(10.0));
        assert_eq!(r.lowest_concurrency, 4);
        assert!(!r.delay_exhausted);
        assert_eq!(
            r.to_string(),
            "not needed (I/O pressure up to 10.0%, threshold 10%)"
        );
    }

    #[test]
    fn above_it_the_concurrency_halves_and_it_waits_then_climbs_back() {
        let ms = Duration::from_millis;
        let mut p = reading_all(
            pace(10.0, "1m"),
            8,
            vec![
                Reading::Share(5.0, WINDOW),
                Reading::Share(40.0, WINDOW),
                Reading::Share(10.0, ms(600)),
                Reading::Share(10.0, ms(600)),
                Reading::Share(0.0, ms(600)),
                Reading::Share(5.0, WINDOW),
                Reading::Share(5.0, WINDOW),
                Reading::Share(5.0, WINDOW),
            ],
        );
        assert_eq!(p.gate(), Gate::Go(8));
        // The first batch's window: 40% of 200 ms is 80 ms stalled, which
        // at 10% is 800 ms in all, so 600 ms more.
        assert_eq!(p.gate(), Gate::Wait(ms(600)));
        assert_eq!(p.limit(), 4);
        p.waited(ms(600));
        // The wait was not quiet enough to pay for it: 140 ms stalled in
        // 800, 600 ms more.
        assert_eq!(p.gate(), Gate::Wait(ms(600)));
        assert_eq!(p.limit(), 2);
        p.waited(ms(600));
        // 200 ms in 1.4 s.
        assert_eq!(p.gate(), Gate::Wait(ms(600)));
        assert_eq!(p.limit(), 1);
        p.waited(ms(600));
        // 200 ms in 2 s: paid. Low over a stretch of waits: one goes, and
        // its own window decides whether more may.
        assert_eq!(p.gate(), Gate::Go(1));
        assert_eq!(p.gate(), Gate::Go(2));
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.gate(), Gate::Go(8));
        let r = p.report().unwrap();
        assert!((r.paced_seconds - 1.8).abs() < 1e-9, "{r:?}");
        assert_eq!(r.max_io_pressure_percent, Some(40.0));
        assert_eq!(r.lowest_concurrency, 1);
        assert_eq!(
            r.to_string(),
            "waited 1.8s for I/O pressure (up to 40.0%, threshold 10%), concurrency down to 1"
        );
    }

    #[test]
    fn a_removals_stall_is_paid_for_over_as_many_waits_as_it_takes() {
        // A threshold just above the node's own idle pressure (1%): a
        // removal window 40% stalled over 200 ms owes 80 ms, which at
        // 2% is 4 s, and idle waits pay only 1 point of it, so the
        // stretch must reach 7.8 s (78 ms + 1% of it = 2% of it).
        // Readings: before the first batch, then its window, then the waits.
        let last_wait = std::sync::Arc::new(std::sync::Mutex::new((0, None::<Duration>)));
        let seen = std::sync::Arc::clone(&last_wait);
        let mut p = Pacer::new(
            Some(pace(2.0, "1h")),
            Concurrency::Fixed(1),
            Some("/proc/pressure/io".into()),
            Some(Box::new(move || match *seen.lock().unwrap() {
                (0, _) => Reading::Share(1.0, WINDOW),
                (_, None) => Reading::Share(40.0, WINDOW),
                (_, Some(wait)) => Reading::Share(1.0, wait),
            })),
        );
        assert_eq!(p.gate(), Gate::Go(1));
        last_wait.lock().unwrap().0 = 1;
        let mut waits = Vec::new();
        while let Gate::Wait(wait) = p.gate() {
            assert!(wait <= WAIT_STEP, "{wait:?}");
            waits.push(wait);
            p.waited(wait);
            last_wait.lock().unwrap().1 = Some(wait);
            assert!(waits.len() < 100, "never paid: {waits:?}");
        }
        let waited: Duration = waits.iter().sum();
        assert!(
            waited + WINDOW >= Duration::from_millis(7_800),
            "went after {waited:?} in {} waits",
            waits.len()
        );
        assert!(waited < Duration::from_secs(9), "{waited:?}");
        assert!(waits.len() > 5, "{waits:?}");
    }

    #[test]
    fn a_burst_of_the_nodes_own_io_is_weighed_only_over_the_last_stretch() {
        // A removal, then a minute of the node's own I/O at 50% while the
        // pacer waits, then quiet: paying for the whole minute at 10%
        // would take four more; only the last STRETCH_MAX counts.
        let second = Duration::from_secs(1);
        let mut readings = vec![Reading::Share(1.0, WINDOW), Reading::Share(50.0, WINDOW)];
        readings.extend([Reading::Share(50.0, second)].repeat(60));
        readings.extend([Reading::Share(0.0, second)].repeat(60));
        let mut p = reading_all(pace(10.0, "1h"), 1, readings);
        assert_eq!(p.gate(), Gate::Go(1));
        for _ in 0..61 {
            assert!(matches!(p.gate(), Gate::Wait(_)));
        }
        let mut quiet = 0;
        while let Gate::Wait(wait) = p.gate() {
            assert_eq!(wait, WAIT_STEP);
            quiet += 1;
        }
        // The last 30 s at most 10% stalled: 6 s of the burst and 24
        // quiet (the 24th reading lets it go; floating point may ask for
        // one more).
        assert!(
            (23..=24).contains(&quiet),
            "went after {quiet} quiet seconds"
        );
    }

    #[test]
    fn a_wait_is_never_longer_than_a_step_nor_shorter_than_the_least() {
        let mut p = reading(pace(10.0, "1m"), 4, vec![Some(10.5), Some(100.0)]);
        // Barely over: 10 ms, raised to the least wait.
        assert_eq!(p.gate(), Gate::Wait(MIN_WAIT));
        // 221 ms stalled in 400 would ask for 1.8 s more.
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
    }

    #[test]
    fn past_max_delay_it_goes_on_one_at_a_time_without_waiting() {
        let mut p = reading(
            pace(10.0, "2s"),
            4,
            vec![Some(100.0), Some(100.0), Some(100.0), Some(1.0)],
        );
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
        p.waited(Duration::from_millis(1500));
        // What is left of the budget, not a whole step.
        assert_eq!(p.gate(), Gate::Wait(Duration::from_millis(500)));
        p.waited(Duration::from_millis(500));
        assert_eq!(p.gate(), Gate::Go(1));
        assert!(p.report().unwrap().delay_exhausted);
        // Once the pressure falls it climbs back, without waiting again.
        assert_eq!(p.gate(), Gate::Go(2));
        let r = p.report().unwrap();
        assert!((r.paced_seconds - 2.0).abs() < f64::EPSILON);
        assert!(
            r.to_string()
                .ends_with("; max_delay 2s spent, the rest one at a time"),
            "{r}"
        );
    }

    #[test]
    fn an_unreadable_pressure_does_not_pace() {
        let mut p = reading(pace(10.0, "1m"), 4, vec![None, Some(50.0)]);
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.report().unwrap().readings, 0);
        assert!(matches!(p.gate(), Gate::Wait(_)));
    }

    #[test]
    fn too_soon_to_read_goes_on_as_it_was() {
        let mut p = reading_all(
            pace(10.0, "1m"),
            4,
            vec![
                Reading::Share(50.0, WINDOW),
                Reading::TooSoon(Duration::from_millis(30)),
            ],
        );
        assert!(matches!(p.gate(), Gate::Wait(_)));
        assert_eq!(p.gate(), Gate::Go(2));
        assert_eq!(p.report().unwrap().readings, 1);
    }

    #[test]
    fn one_at_a_time_under_pressure_each_removal_is_weighed_before_the_next() {
        let mut p = reading_all(
            pace(10.0, "1m"),
            2,
            vec![
                Reading::Share(50.0, WINDOW),
                Reading::Share(50.0, WINDOW),
                Reading::TooSoon(Duration::from_millis(30)),
                Reading::TooSoon(Duration::from_millis(30)),
                Reading::Share(2.0, WINDOW),
                Reading::TooSoon(Duration::from_millis(40)),
                Reading::Share(2.0, WINDOW),
                Reading::TooSoon(Duration::from_millis(40)),
            ],
        );
        assert!(matches!(p.gate(), Gate::Wait(_)));
        assert_eq!(p.limit(), 1);
        assert!(matches!(p.gate(), Gate::Wait(_)));
        // Too soon for a window: the next does not go until one is read.
        assert_eq!(p.gate(), Gate::Wait(Duration::from_millis(30)));
        assert_eq!(p.gate(), Gate::Wait(Duration::from_millis(30)));
        assert_eq!(
            p.gate(),
            Gate::Go(1),
            "low over a wait: no more at once yet"
        );
        // Still weighing each one: that removal's own window is read first.
        assert_eq!(p.gate(), Gate::Wait(Duration::from_millis(40)));
        // Low over a window with a removal in it: more at once, unweighed.
        assert_eq!(p.gate(), Gate::Go(2));
        assert_eq!(p.gate(), Gate::Go(2), "too soon, and no longer pressed");
    }

    #[test]
    fn off_it_never_reads() {
        let mut p = Pacer::new(
            None,
            Concurrency::Fixed(3),
            None,
            Some(Box::new(|| panic!("read while off"))),
        );
        assert_eq!(p.gate(), Gate::Go(3));
        assert_eq!(p.report(), None);
    }

    #[test]
    fn no_psi_says_so() {
        let p = Pacer::new(Some(pace(10.0, "1m")), Concurrency::Fixed(4), None, None);
        let r = p.report().unwrap();
        assert_eq!(r.source, None);
        assert_eq!(r.to_string(), "no, the node shows no I/O pressure (PSI)");
    }

    #[test]
    fn auto_starts_at_four_under_its_ceiling_and_pace_caps_it() {
        let mut p = Pacer::new(
            Some(pace(10.0, "1m")),
            Concurrency::Auto,
            Some("/proc/pressure/io".into()),
            Some(Box::new(|| Reading::Share(80.0, WINDOW))),
        );
        assert_eq!(p.most(), adapt::CEILING);
        assert_eq!(p.limit(), adapt::START);
        assert!(matches!(p.gate(), Gate::Wait(_)));
        assert_eq!(p.limit(), adapt::START / 2);
        // Removals under the cap measure the cap, not the climb: no raise.
        for _ in 0..1000 {
            p.completed(Slot(None));
        }
        assert_eq!(p.limit(), adapt::START / 2);
    }
}
