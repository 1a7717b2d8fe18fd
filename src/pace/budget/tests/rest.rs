//! Rests: removals go at most [`REST`] after the baseline was last
//! measured, whether or not a deficit paused them, and only a rest
//! measures it.

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
