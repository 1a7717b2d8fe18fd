//! The budget's measure of the workloads' own level: a rest's windows
//! (see [`pause`](super::pause)), the 30-s mean that lowers it while
//! removals go, and the noise a deficit is told from.

use tokio::time::Instant;

use super::limits::{DEBT, NOISE, RECENT, RESTED};
use super::pause::{Quiet, keep_latest};
use super::{Budget, Pause};
use crate::pace::baseline;

impl Budget {
    /// A window begun at `began` with no removal in flight during it: the
    /// pause's (see [`Pause::take`]); once a rest in it measures the
    /// workloads' level, it is the baseline, and at [`RESTED`] windows the
    /// rest is over.
    pub(super) fn paused(&mut self, began: Instant, quiet: Quiet) {
        if self
            .pause
            .get_or_insert_with(|| Pause::new(began, self.limits.settle))
            .settled(began)
        {
            keep_latest(&mut self.quiet, quiet.share(), RECENT);
            if self.quiet.len() == RECENT {
                self.quiet_spread = baseline::spread(self.quiet.make_contiguous()).unwrap_or(0.0);
            }
        }
        // With this window's share in the quiet windows' spread.
        let noise = self.noise();
        let pause = self
            .pause
            .get_or_insert_with(|| Pause::new(began, self.limits.settle));
        let Some(measured) = pause.take(began, quiet, &self.pool, noise, self.rest_from) else {
            return;
        };
        let rested = (measured.windows >= RESTED).then(|| pause.rested());
        if measured.first {
            self.accounts.remeasured += 1;
        }
        tracing::trace!(
            baseline_percent = measured.baseline * 100.0,
            spread_percent = measured.spread * 100.0,
            own_percent = measured.own * 100.0,
            shifted = measured.shifted.is_some(),
            latest_rests = measured.shifted.unwrap_or(0),
            first = measured.first,
            "safety.pace: the workloads' level measured again in a rest"
        );
        if measured.shifted.is_some() {
            // The windows before the workloads changed: not theirs now.
            self.recent.clear();
        }
        self.baseline = measured.baseline;
        self.spread = measured.spread;
        self.spend(-measured.back);
        if let Some(rested) = rested {
            // Its windows join the pool now: the pause may go on (a
            // deficit), and what it shows then measures nothing.
            self.measured_at = self.observed_at;
            self.rest_from = None;
            if let Some(done) = self.pause.replace(rested) {
                self.pool.fold(&done);
            }
        }
    }

    /// While removals go, the mean of the latest windows, when it is
    /// under the baseline by more than the target and [`NOISE`] times its
    /// own error, lowers it to that mean until the next rest: removals only
    /// add stall, so the workloads themselves stall less now. The pool is
    /// left as the rests made it, and the next rest is pooled with it (or,
    /// where the workloads changed, replaces it: see [`Pool`]). The mean
    /// is chosen for standing low, so it measures no level: the pool begun
    /// again from its windows stood under the workloads' level for the
    /// rest of a run, the rests pooled with it (0.4 points under the idle
    /// blocks' on containerd's busy node, 6.2-6.3% beside rests at
    /// 6.4-6.85%, and no removal went for 11 minutes; 0.5 points on
    /// Docker's quiet node; left to the rests, it went at 1.63 objects a
    /// second where it had gone at 0.69, and added -0.02%). The rests must
    /// then measure the workloads alone: on containerd from 12 s after the
    /// last removal ([`SETTLE_COLLECTED`](super::pause::SETTLE_COLLECTED)),
    /// or its busy node's rests took the collector's late stall for theirs
    /// and pooled the baseline back up over their falling level (5.7 times
    /// the target added). Their mean, not their level, and only beyond
    /// their noise, over [`RECENT`] of them: on less (the target alone, or
    /// a dozen windows' noise) the workloads' own noise ratcheted the
    /// baseline down, charging it to the removals. To the mean, not that
    /// error above it: the mean holds what the removals added too, and
    /// the error left the baseline 0.4 points over the workloads' level
    /// on containerd's busy node (windows of 2.3% spread), the removals
    /// adding that on top of the target. Its error from how far the
    /// rests' levels move too ([`Pool::apart`]), where that is more than
    /// the windows' noise: the workloads' windows are not drawn afresh,
    /// and on their noise alone Docker's busy node lowered the baseline 12
    /// times in 22 minutes, 0.2-0.4 points under the idle blocks' level
    /// each time until the next rest (the removals were charged that, and
    /// went at 1.65 objects a second).
    ///
    /// [`Pool`]: super::pause::Pool
    /// [`Pool::apart`]: super::pause::Pool::apart
    pub(super) fn lower_baseline(&mut self) {
        if self.recent.len() < RECENT {
            return;
        }
        let noise = self.noise().max(self.pool.apart().unwrap_or(0.0));
        #[expect(clippy::cast_precision_loss, reason = "RECENT windows")]
        let (mean, error) = (
            self.recent.iter().sum::<f64>() / self.recent.len() as f64,
            NOISE * noise / (RECENT as f64).sqrt(),
        );
        if mean + error < self.baseline - self.limits.target {
            tracing::trace!(
                from_percent = self.baseline * 100.0,
                to_percent = mean * 100.0,
                error_percent = error * 100.0,
                "safety.pace: the workloads' level lowered while removals go"
            );
            self.baseline = mean;
        }
    }

    /// How far the workloads' stall moves from window to window: the
    /// larger of the spread measured with the baseline and that of the
    /// latest [`RECENT`] settled quiet windows, a deficit's pauses' too.
    /// The workloads' stall comes in bursts, and the dozen windows a
    /// baseline is first measured on mostly miss them: on containerd's
    /// busy node they spread 0.5-0.8% where the run's settled quiet
    /// windows spread 1.5% (all its windows 2.1%), so that a deficit held
    /// removals on a third of the workloads' own noise and the 30-s mean
    /// lowered the baseline on a third of its. Not the windows with
    /// removals in flight: their stall is the removals' to pay for, not
    /// noise to forgive.
    pub(super) fn noise(&self) -> f64 {
        self.spread.max(self.quiet_spread)
    }

    /// The deficit the workloads' own noise explains, seconds: [`NOISE`]
    /// times the spread of their windows' sum over [`DEBT`].
    pub(super) fn tolerance(&self) -> f64 {
        NOISE * self.noise() * (baseline::INTERVAL.as_secs_f64() * DEBT.as_secs_f64()).sqrt()
    }
}
