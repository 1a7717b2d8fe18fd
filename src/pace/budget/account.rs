//! The allowance's account: credited by the target with time up to the
//! cap, spent by each window's stall above the baseline down to the floor.

use std::time::Duration;

use tokio::time::Instant;

use super::Budget;
use super::limits::{BANK, DEBT, LAG, PACE_BANK};

impl Budget {
    /// `excess` seconds of stall above the baseline (negative: under it)
    /// spent, within the cap and [`Self::floor`]. What a clamp leaves out
    /// is traced: stall forgiven at the floor, credit lost at the cap.
    pub(super) fn spend(&mut self, excess: f64) {
        let (floor, cap) = (self.floor(), self.cap());
        let unclamped = self.measured - excess;
        self.measured = unclamped.clamp(floor, cap);
        if unclamped < floor || unclamped > cap {
            tracing::trace!(
                forgiven_ms = (floor - unclamped).max(0.0) * 1e3,
                lost_ms = (unclamped - cap).max(0.0) * 1e3,
                "safety.pace: clamped"
            );
        }
        self.added += excess;
        self.accounts.added_stall = Duration::from_secs_f64(self.added.max(0.0));
    }

    /// The deepest the allowance goes, seconds: [`DEBT`] of the target,
    /// or the dearest kind's learned cost when more, under the line where
    /// a deficit holds removals (the noise's tolerance). The workloads'
    /// own noise walks the allowance past it, and what it walks past is
    /// forgiven: at 0.1% on a quiet containerd node, 1.5 s of stall in a
    /// run, 2.7 times its target. One tolerance deeper, that was paid
    /// back (0.94x and -0.01x in two runs), but wherever the baseline
    /// stood under the workloads' level (0.4 points on containerd's busy
    /// node) the allowance sank to the floor and stayed, and the run made
    /// no removal in 11 minutes: the walk past this floor is what lets
    /// removals through a baseline that stands low.
    pub(super) fn floor(&self) -> f64 {
        let dearest = self.costs.values().copied().fold(0.0, f64::max);
        -(self.limits.target * DEBT.as_secs_f64()).max(dearest) - self.tolerance()
    }

    /// The most the allowance holds, seconds.
    pub(super) fn cap(&self) -> f64 {
        self.limits.target * BANK.as_secs_f64()
    }

    /// [`Self::measured`] with the time until `now` credited.
    pub(super) fn credited(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.credited_at);
        (self.measured + self.limits.target * elapsed.as_secs_f64()).min(self.cap())
    }

    /// Time until `now` credited, to the allowance and to the least
    /// costs' account (up to [`PACE_BANK`] of the target times the batch).
    /// What the account earns beyond that goes to its lag (up to [`LAG`]
    /// of the target), which credits it again as fast as time does while
    /// it is under its bank: held removals catch up at twice the pace
    /// their least costs allow, never faster.
    pub(super) fn credit(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.credited_at);
        self.measured = self.credited(now);
        #[expect(clippy::cast_precision_loss, reason = "a handful")]
        let bank = self.limits.target * PACE_BANK.as_secs_f64() * self.limits.batch as f64;
        let earned = self.limits.target * elapsed.as_secs_f64();
        let room = (bank - self.least_paid).max(0.0);
        let by_time = earned.min(room);
        let by_lag = self.lag.min(earned).min(room - by_time);
        self.least_paid += by_time + by_lag;
        self.lag =
            (self.lag - by_lag + earned - by_time).min(self.limits.target * LAG.as_secs_f64());
        self.credited_at = self.credited_at.max(now);
    }

    /// How long the least costs' account takes to be paid back to nothing,
    /// seconds: at twice the target's rate while its lag lasts, then at
    /// the target's.
    pub(super) fn least_wait(&self) -> f64 {
        let owed = (-self.least_paid).max(0.0);
        let lag = self.lag.min(owed / 2.0);
        (owed - lag) / self.limits.target
    }
}
