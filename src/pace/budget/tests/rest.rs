//! Rests: removals go at most [`REST`] after the baseline was last
//! measured, whether or not a deficit paused them, and only a rest
//! measures it; its windows join the pool, which a lowering leaves alone.

use super::*;
use crate::pace::budget::limits::RESTED;

/// [`removals_until`] `REST` has passed since `since`.
fn removals_until_the_rest(budget: &mut Budget, now: &mut Instant, since: Instant) {
    removals_until(budget, now, since + REST);
}

#[test]
fn removals_rest_a_minute_after_the_baseline_was_measured_and_the_rest_measures_it() {
    let mut now = Instant::now();
    let began = now;
    // 3% measured before the first removal.
    let mut budget = Budget::new(LIMITS, 0.03, now);
    removals_until_the_rest(&mut budget, &mut now, began);
    assert_close(budget.baseline(), 0.03);
    assert!(budget.allowance(now) >= 0.0, "{}", budget.allowance(now));
    // A minute on: a rest, though the budget holds.
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    // The workloads stall 2% now. The rest lasts until its pause has
    // RESTED windows from SETTLE on (a pause's level is taken from
    // MIN_WINDOWS on, but a rest waits for more).
    let settle = settling_windows();
    let rest_began = now;
    quiet(&mut budget, &mut now, settle + RESTED - 1, ms(5.0));
    assert_close(budget.baseline(), 0.02);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    quiet(&mut budget, &mut now, 1, ms(5.0));
    let rested = now;
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    assert_eq!(budget.accounts().remeasured, 1);
    // The rest counts as time held back, from its first verdict to the
    // one that let removals go.
    assert_eq!(budget.accounts().waited, rested - rest_began);
    // The next comes a minute after this one's measure, not sooner.
    removals_until_the_rest(&mut budget, &mut now, rested);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
}

#[test]
fn a_deficits_pause_measures_nothing_and_puts_no_rest_off() {
    let mut now = Instant::now();
    let began = now;
    let mut budget = Budget::new(LIMITS, 0.02, now);
    // Half a minute of removals, then a pause as long as a rest with the
    // workloads at 6%: a deficit, and no measure. The pause ends when its
    // windows pay the deficit back, so when they stood under the
    // baseline: pooled, such windows drew it under the workloads' level.
    removals_until(&mut budget, &mut now, began + REST / 2);
    let settle = settling_windows();
    quiet(&mut budget, &mut now, settle + RESTED, ms(15.0));
    assert!(matches!(
        budget.gate(Kind::Container, now),
        Verdict::PayBack(_)
    ));
    assert_close(budget.baseline(), 0.02);
    assert_eq!(budget.accounts().remeasured, 0);
    // Nor does it put the rest off: a minute after the first measure,
    // whatever holds the removals then, they rest.
    while now < began + REST {
        assert_ne!(budget.gate(Kind::Container, now), Verdict::Rest);
        quiet(&mut budget, &mut now, 1, ms(5.0));
    }
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    // And the rest measures the workloads' 6% once more.
    quiet(&mut budget, &mut now, MIN_WINDOWS, ms(15.0));
    assert_close(budget.baseline(), 0.06);
    assert_eq!(budget.accounts().remeasured, 1);
}

#[test]
fn the_time_the_pacer_was_stopped_does_not_bring_the_rest_sooner() {
    let mut now = Instant::now();
    let began = now;
    let mut budget = Budget::new(LIMITS, 0.02, now);
    // Half a minute of removals, then the process stopped for 40 s (one
    // window of that length, with nothing in flight), then removals again.
    removals_until(&mut budget, &mut now, began + REST / 2);
    let stop = Duration::from_secs(40);
    now += stop;
    budget.observe(now, stop.mul_f64(0.02));
    // The rest comes a minute of going after the measure, the stop aside.
    removals_until_the_rest(&mut budget, &mut now, began + stop);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
}

/// `n` shares, `low` and `high` by turns.
fn by_turns(n: usize, low: f64, high: f64) -> Vec<f64> {
    (0..n)
        .map(|i| if i % 2 == 0 { low } else { high })
        .collect()
}

/// `n` windows as [`quiet`], stalled `low` and `high` by turns.
fn quiet_by_turns(budget: &mut Budget, now: &mut Instant, n: usize, low: f64, high: f64) {
    for stalled in by_turns(n, low, high) {
        quiet(budget, now, 1, ms(stalled));
    }
}

#[test]
fn rests_pool_their_windows_until_the_workloads_change() {
    let mut now = Instant::now();
    // Measured before the first removal: 40 windows of 1.5% and 3.5% by
    // turns, 2.5%.
    let mut budget = Budget::new(LIMITS, 0.025, now).with_windows(&by_turns(40, 0.015, 0.035));
    // A first rest, of 12 windows at 1% and 3%: 2% alone, within their
    // noise of the first's 2.5%. The baseline is the 52 windows' level,
    // not the last few's (a dozen windows' level moves by a third of their
    // spread, several times a low target).
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 2.5, 7.5);
    assert_close(budget.baseline(), (40.0 * 0.025 + 12.0 * 0.02) / 52.0);
    // A second, of 12 windows at 2.5% and 4.5%: 3.5%, some three and a
    // half errors (0.32%) over the pool's 2.38%, as a rest's level
    // stands by chance now and then. Pooled too, not taken alone.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 6.25, 11.25);
    assert_close(
        budget.baseline(),
        (40.0 * 0.025 + 12.0 * 0.02 + 12.0 * 0.035) / 64.0,
    );
    // A writer starts: the third rest's windows stand at 6%, far beyond
    // the noise of the pool's 2.56%, from its fifth on. Its own level is
    // the baseline.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, 6, 12.5, 17.5);
    assert_close(budget.baseline(), 0.06);
    quiet_by_turns(&mut budget, &mut now, RESTED - 6, 12.5, 17.5);
    assert_close(budget.baseline(), 0.06);
    // And the pool begins again from its windows: a fourth rest at 5.5%
    // is pooled with them alone.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, 6, 11.25, 16.25);
    assert_close(budget.baseline(), (12.0 * 0.06 + 6.0 * 0.055) / 18.0);
    assert_eq!(budget.accounts().remeasured, 4);
}

/// A budget measured at 4%, on 40 windows of 3% and 5% by turns; then
/// the workloads' stall falls to `lull` as a removal goes: [`RECENT`]
/// windows a point under and over it by turns lower the baseline to their
/// mean. `now` moves to the removal's tail's end.
fn lowered(now: &mut Instant, lull: f64) -> Budget {
    let first = by_turns(40, 0.03, 0.05);
    let mut budget = Budget::new(Limits { max: 1, ..LIMITS }, 0.04, *now).with_windows(&first);
    let ticket = budget.start(Kind::Image, Weight::default(), *now);
    let window = WINDOW.as_secs_f64() * 1000.0;
    for share in by_turns(RECENT, lull - 0.01, lull + 0.01) {
        *now += WINDOW;
        budget.observe(*now, ms(window * share));
    }
    assert_close(budget.baseline(), lull);
    budget.finish(ticket);
    tail(&mut budget, now);
    budget
}

#[test]
fn a_lull_lowers_the_baseline_only_until_the_next_rest() {
    let mut now = Instant::now();
    // Half a minute at 3% lowered it: a lull, and a mean chosen for
    // standing low measures no level.
    let mut budget = lowered(&mut now, 0.03);
    // The workloads are back at 4% (3% and 5%). The next rest is pooled
    // with the rests' windows, not with the lull's: pooled with those 120
    // windows, within its noise of them (3.3 errors), the baseline stayed
    // at 3.1%, and the rests after it were pooled there too (0.4 points
    // under the workloads' level held a containerd busy run for 11
    // minutes).
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 7.5, 12.5);
    assert_close(budget.baseline(), 0.04);
    assert_eq!(budget.accounts().remeasured, 1);
}

#[test]
fn a_drop_the_next_rest_confirms_is_the_workloads_level() {
    let mut now = Instant::now();
    // The workloads' stall falls from 4% to 2% (a writer stopped) as a
    // removal goes: the baseline is lowered to it.
    let mut budget = lowered(&mut now, 0.02);
    // The next rest's windows stand there too, six errors under the
    // rests' 4%: the workloads changed, and the rest's level is the
    // baseline.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 2.5, 7.5);
    assert_close(budget.baseline(), 0.02);
    // And the pool begins again from its windows: a second rest at 2.5%
    // (1.5% and 3.5%) is pooled with them alone.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 3.75, 8.75);
    assert_close(budget.baseline(), (12.0 * 0.02 + 12.0 * 0.025) / 24.0);
    assert_eq!(budget.accounts().remeasured, 2);
}

#[test]
fn a_calm_rest_within_the_workloads_noise_is_pooled_not_taken_alone() {
    let mut now = Instant::now();
    // Measured before the first removal: a dozen windows that missed the
    // workloads' bursts, 3.9% and 4.1% by turns.
    let mut budget = Budget::new(LIMITS, 0.04, now).with_windows(&by_turns(12, 0.039, 0.041));
    // The workloads stall 2% and 6% by turns, 4% on average, in the
    // pause's settled windows until removals rest: their spread is 2%.
    while budget.gate(Kind::Container, now) != Verdict::Rest {
        quiet_by_turns(&mut budget, &mut now, 2, 5.0, 15.0);
    }
    // The rest's 3 s happen to be calm: 1.4% and 1.6%, 1.5%. Sixty errors
    // off on the first dozen windows' spread, barely three on the
    // workloads': pooled with them, not taken as a change.
    quiet_by_turns(&mut budget, &mut now, settling_windows() + RESTED, 3.5, 4.0);
    assert_close(budget.baseline(), (12.0 * 0.04 + 12.0 * 0.015) / 24.0);
    assert_eq!(budget.accounts().remeasured, 1);
}

#[test]
fn a_drift_no_rest_shows_alone_shows_in_the_latest_rests_together() {
    let mut now = Instant::now();
    // Measured at 2% before the first removal, on 120 windows of 1% and
    // 3% by turns.
    let mut budget = Budget::new(LIMITS, 0.02, now).with_windows(&by_turns(RECENT, 0.01, 0.03));
    // The workloads come back to 3% (2% and 4%). One rest's dozen
    // windows stand about three errors over the pool: pooled, as a rest
    // stands by chance.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 5.0, 10.0);
    #[expect(clippy::cast_precision_loss, reason = "a few hundred windows")]
    let (recent, rested) = (RECENT as f64, RESTED as f64);
    assert_close(
        budget.baseline(),
        (recent * 0.02 + rested * 0.03) / (recent + rested),
    );
    // The next rest's, with the last one's, stand beyond SHIFT errors of
    // the first windows: the workloads changed, and the two rests' level
    // is the baseline. Pooled on, a level half a point under the workloads'
    // held a Docker run for 20 minutes.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 5.0, 10.0);
    assert_close(budget.baseline(), 0.03);
    // And the pool is those two rests' windows: a third at 3.5% (2.5% and
    // 4.5%) is pooled with them alone.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 6.25, 11.25);
    assert_close(budget.baseline(), (2.0 * 0.03 + 0.035) / 3.0);
    assert_eq!(budget.accounts().remeasured, 3);
}

#[test]
fn where_removals_settle_later_a_rest_waits_out_their_late_stall() {
    let mut now = Instant::now();
    let began = now;
    // An engine that frees when its removals settle (containerd): its
    // collector's stall shows for some 10 s after the last removal.
    let limits = Limits {
        settle: LIMITS.frees_when_settled(true).settle,
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.02, now);
    removals_until_the_rest(&mut budget, &mut now, began);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    // The workloads stall 2%; the collection adds 4 points for the
    // pause's first 12 s. Measured from 5 s, as on Docker, the rest
    // would take that for the workloads' level.
    let collecting = usize::try_from(limits.settle.as_millis() / WINDOW.as_millis()).unwrap();
    assert_eq!(collecting, 48);
    assert!(collecting > settling_windows());
    quiet(&mut budget, &mut now, collecting, ms(15.0));
    assert_eq!(budget.accounts().remeasured, 0);
    quiet(&mut budget, &mut now, RESTED, ms(5.0));
    assert_close(budget.baseline(), 0.02);
    assert_eq!(budget.accounts().remeasured, 1);
}

/// The levels of [`moving`]'s rests: 4% on average, moving by half a
/// point (their windows' spread) and as much again from rest to rest.
const MOVING: [f64; 5] = [0.043, 0.037, 0.046, 0.034, 0.040];

/// A budget measured at 4% before the first removal (3.5% and 4.5% by
/// turns), then rested once at each of [`MOVING`]'s levels, a dozen
/// windows half a point under and over it by turns: the workloads' stall
/// comes in runs of windows, and a rest's level moves further than its
/// windows' spread says (the square root of the six sets' mean square
/// between, 1.47%, against 0.5%).
fn moving(limits: Limits, now: &mut Instant) -> Budget {
    let mut budget = Budget::new(limits, 0.04, *now).with_windows(&by_turns(RESTED, 0.035, 0.045));
    let window = WINDOW.as_secs_f64() * 1000.0;
    for level in MOVING {
        rest(&mut budget, now);
        let (low, high) = ((level - 0.005) * window, (level + 0.005) * window);
        quiet_by_turns(&mut budget, now, RESTED, low, high);
    }
    assert_close(budget.baseline(), 0.04);
    budget
}

#[test]
fn a_rest_stands_apart_only_beyond_how_far_rests_levels_move() {
    let mut now = Instant::now();
    let mut budget = moving(LIMITS, &mut now);
    // A rest at 5.2%: some five errors over the pool on the windows'
    // spread, under three on the rests' own moves (a dozen windows' level
    // moves by 0.42 points). Pooled, not taken alone: taken alone, such a
    // rest held the baseline over the workloads' level until rests pooled
    // it away, and the removals spent the difference.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 11.75, 14.25);
    #[expect(clippy::cast_precision_loss, reason = "a few sets")]
    let sets = (MOVING.len() + 1) as f64;
    assert_close(budget.baseline(), (sets * 0.04 + 0.052) / (sets + 1.0));
    // A writer starts: the next rest at 8% stands beyond the rests' moves
    // too, and its own level is the baseline.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 18.75, 21.25);
    assert_close(budget.baseline(), 0.08);
    // The pool begins again from its windows alone, but how far the rests
    // moved before still counts: a rest at 9.5%, seven errors over them
    // on their spread, under two on how far the rests moved, is pooled
    // with them. Taken alone on one set's spread, rests within those
    // moves took a containerd quiet run's baseline 0.2-0.4 points under
    // the idle blocks' level.
    rest(&mut budget, &mut now);
    quiet_by_turns(&mut budget, &mut now, RESTED, 22.5, 25.0);
    assert_close(budget.baseline(), 0.0875);
    assert_eq!(budget.accounts().remeasured, 8);
}

#[test]
fn the_30_s_mean_lowers_the_baseline_only_beyond_how_far_rests_levels_move() {
    let mut now = Instant::now();
    // At the default target, 0.1%, one removal at a time.
    let limits = Limits {
        target: 0.001,
        max: 1,
        ..LIMITS
    };
    let mut budget = moving(limits, &mut now);
    // Removals go, and the workloads stall 3.7% in their windows: 0.3
    // points under the baseline, 0.2 beyond the target, over four
    // standard errors of a 30-s mean on the windows' spread (0.046%),
    // 1.5 on the rests' moves (0.134%). Lowering needs two: the baseline
    // stays. Lowered on the windows' spread, it stood 0.2-0.4 points under
    // the idle blocks' level on Docker's busy node, 12 times in 22
    // minutes, and the removals were charged that.
    let ticket = budget.start(Kind::Image, Weight::default(), now);
    let window = WINDOW.as_secs_f64() * 1000.0;
    for _ in 0..RECENT {
        now += WINDOW;
        budget.observe(now, ms(window * 0.037));
    }
    assert_close(budget.baseline(), 0.04);
    // A writer stops: the windows stall 3% now, each taking a 120th of
    // 0.7 points off the mean, which the baseline is lowered to once it
    // and twice its error are under it by more than the target: at the
    // 12th such window, 3.63%.
    #[expect(clippy::cast_precision_loss, reason = "RECENT windows")]
    let recent = RECENT as f64;
    for i in 1..=12 {
        now += WINDOW;
        budget.observe(now, ms(window * 0.03));
        if i == 11 {
            assert_close(budget.baseline(), 0.04);
        }
    }
    assert_close(
        budget.baseline(),
        (12.0 * 0.03 + (recent - 12.0) * 0.037) / recent,
    );
    budget.finish(ticket);
}
