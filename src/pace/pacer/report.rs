//! What a paced run says of itself: [`Pacer::report`].

use super::Pacer;
use crate::pace::budget::Budget;
use crate::pace::report::{BudgetReport, PaceReport};

impl Pacer {
    /// How the run was paced; `None` when it was not to be (`safety.pace:
    /// null`, `run --no-pace`).
    #[must_use]
    pub fn report(&self) -> Option<PaceReport> {
        let pace = self.pace.as_ref()?;
        let round = |x: f64, places: i32| {
            let scale = 10f64.powi(places);
            (x * scale).round() / scale
        };
        let b = self.budgeted.as_ref();
        let budget = b.and_then(|b| b.budget.as_ref());
        let accounts = budget.map(Budget::accounts);
        let report = BudgetReport {
            signal: b.map(|b| b.signal.whose()),
            cpu_source: b
                .and_then(|b| b.stall.cpu())
                .map(|source| source.path().display().to_string()),
            baseline_io_pressure_percent: b.and_then(|b| b.baseline).map(|s| round(s * 100.0, 3)),
            last_baseline_io_pressure_percent: budget
                .map(|budget| round(budget.baseline() * 100.0, 3)),
            baseline_remeasured: accounts.map_or(0, |a| a.remeasured),
            added_io_pressure_percent: pace.added_io_pressure_percent,
            added_stall_seconds: round(accounts.map_or(0.0, |a| a.added_stall.as_secs_f64()), 3),
            on_max_delay: pace.on_max_delay,
            objects_per_second: b.and_then(|b| match (b.first_start, b.last_answer) {
                (Some(first), Some(last)) if last > first => {
                    #[expect(clippy::cast_precision_loss, reason = "removals, far under 2^52")]
                    let answered = b.answered as f64;
                    Some(round(answered / (last - first).as_secs_f64(), 2))
                }
                _ => None,
            }),
        };
        let lowest = match budget {
            Some(_) if self.exhausted => 1,
            Some(budget) => budget.accounts().lowest_concurrency.unwrap_or(self.most),
            None => self.most,
        };
        Some(PaceReport {
            source: b.map(|b| b.signal.source().path().display().to_string()),
            workloads_cgroup: pace.workloads_cgroup.to_string(),
            io_pressure_percent: pace.io_pressure_percent,
            max_delay_seconds: self.max_delay().as_secs(),
            paced_seconds: round(self.waited.as_secs_f64(), 3),
            readings: self.readings,
            max_io_pressure_percent: self.max_seen.map(|p| round(p, 1)),
            lowest_concurrency: lowest,
            delay_exhausted: self.exhausted,
            disk_emergency: self.disk.emergency,
            budget: report,
        })
    }
}
