//! What pacing says: the JSON report's `pace` ([`PaceReport`]), the
//! table's `paced:` line (its `Display`), and `check`'s and `plan`'s line
//! ([`StallCheck`]).

use std::fmt;

use serde::Serialize;

use super::baseline;
use super::signal::{NoSignal, Signal, Stall};
use crate::policy::{OnMaxDelay, Pace};

/// How a run was paced: the JSON report's `pace`, the table's summary
/// line and the metrics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaceReport {
    /// The `io.pressure` file the stall was read from; `null` when the run
    /// was not paced (no pods' cgroup under `auto`, no PSI under `node`).
    pub source: Option<String>,
    /// The policy's `workloads_cgroup`: `auto`, `node` or a path.
    pub workloads_cgroup: String,
    /// The policy's ceiling, percent of a window stalled on I/O.
    pub io_pressure_percent: f64,
    /// The policy's most waiting per run, seconds.
    pub max_delay_seconds: u64,
    /// How long pacing held removals back: its waits, counted against
    /// `max_delay`, seconds (3 decimals).
    pub paced_seconds: f64,
    /// How many windows of the stall were observed.
    pub readings: u64,
    /// The highest window's I/O share, percent; `null` with none.
    pub max_io_pressure_percent: Option<f64>,
    /// The fewest removals in flight a deficit brought the budget to.
    pub lowest_concurrency: usize,
    /// `max_delay` was spent: the rest went as `on_max_delay` says.
    pub delay_exhausted: bool,
    /// The image file system was over `images.disk.high_percent` while
    /// removals were to go: meanwhile the ceiling alone held them.
    pub disk_emergency: bool,
    /// The stall budget's figures.
    #[serde(flatten)]
    pub budget: BudgetReport,
}

/// How the stall budget held a run: the JSON report's `pace` fields beside
/// the others.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetReport {
    /// Whose stall was read: `workloads` (a cgroup) or `node`; `null` when
    /// the run was not paced.
    pub signal: Option<&'static str>,
    /// The workloads' `cpu.pressure`, read beside `source`: the budget
    /// counts their waits for a CPU with their waits on I/O; `null` when
    /// it is not read (the node's signal, or no such file).
    pub cpu_source: Option<String>,
    /// The workloads' own stall before the first removal, percent of wall
    /// time (3 decimals); `null` when it was not measured (not paced, no
    /// removal, or a stop first).
    pub baseline_io_pressure_percent: Option<f64>,
    /// The baseline at the run's end, percent (3 decimals): measured again
    /// in rests, lowered while removals went; `null` as the first.
    pub last_baseline_io_pressure_percent: Option<f64>,
    /// How many rests measured the baseline again.
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
        let budget = &self.budget;
        if self.source.is_none() {
            return write!(f, "no, {}", NoSignal::for_table(&self.workloads_cgroup));
        }
        let Some(baseline) = budget.baseline_io_pressure_percent else {
            return f.write_str("no removal batch to pace");
        };
        let whose = if budget.signal == Some("node") {
            "the node's"
        } else {
            "the workloads'"
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
                1 => f.write_str(", measured again in a rest")?,
                n => write!(f, ", measured again in {n} rests")?,
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
        if self.disk_emergency {
            f.write_str(
                "; the image file system over images.disk.high_percent: held by the ceiling alone",
            )?;
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

/// What a policy written for the absolute threshold means now, said once
/// by `check` and by every run (after `safety.pace: `); `None` for any
/// other.
#[must_use]
pub fn ceiling_only_note(pace: &Pace) -> Option<String> {
    pace.ceiling_only.then(|| {
        format!(
            "io_pressure_percent {} is now the stall budget's ceiling; the removals may add \
             added_io_pressure_percent {} (the default) to the workloads' own stall: write \
             added_io_pressure_percent to choose it",
            pace.io_pressure_percent, pace.added_io_pressure_percent
        )
    })
}

/// The stall budget against what the workloads do now: `check`'s line
/// and `plan`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct StallCheck {
    /// Whose stall, as said.
    signal: String,
    /// The node's: it counts the engines' work too, said after it.
    node: bool,
    /// The policy's target and ceiling, percent.
    target: f64,
    ceiling: f64,
    /// Their stall now, 0 to 1: the [`baseline::level`] of
    /// [`baseline::INTERVAL`] windows over [`baseline::SPAN`]; `None` when
    /// not measured.
    baseline: Option<f64>,
}

impl StallCheck {
    /// The line for `pace` over `signal`, not yet measured.
    #[must_use]
    pub fn new(pace: &Pace, signal: &Signal) -> Self {
        Self {
            signal: signal.to_string(),
            node: matches!(signal, Signal::Node(_)),
            target: pace.added_io_pressure_percent,
            ceiling: pace.io_pressure_percent,
            baseline: None,
        }
    }

    /// Measures their stall now as a run does before its first removal:
    /// `some total` every [`baseline::INTERVAL`] for [`baseline::SPAN`].
    pub async fn measure(&mut self, signal: &Signal) {
        let mut stall = Stall::of(signal);
        let read = || stall.read().ok().map(|(_, sum)| sum);
        self.baseline = baseline::measure(read, std::future::pending())
            .await
            .and_then(|(baseline, _)| baseline.share());
    }
}

impl fmt::Display for StallCheck {
    /// `check`'s and `plan`'s line, after `safeprune: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let own = if self.node { "its" } else { "their" };
        write!(
            f,
            "safety.pace: by {}: removals may add +{}% above {own} own, ceiling {}%",
            self.signal, self.target, self.ceiling
        )?;
        if let Some(share) = self.baseline {
            write!(
                f,
                "; {own} own now: {:.2}% (mean of {} ms windows over {} s, one burst clipped)",
                share * 100.0,
                baseline::INTERVAL.as_millis(),
                baseline::SPAN.as_secs()
            )?;
        }
        if self.node {
            f.write_str(
                "; the node's stall counts the engines' own work on the removals too: a run \
                 goes slower than by the workloads'",
            )?;
        }
        Ok(())
    }
}
