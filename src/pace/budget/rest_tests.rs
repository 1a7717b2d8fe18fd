//! The rests, the baseline pooled over pauses, and the least cost, in
//! paused time.

use super::pause::POOLED;
use super::tests::{LIMITS, TAIL_WINDOWS, WINDOW, assert_close, ms, one_removal, quiet};
use super::*;
use crate::pace::baseline::MIN_WINDOWS;

/// Windows of [`SETTLE`].
fn settle_windows() -> usize {
    usize::try_from(SETTLE.as_millis() / WINDOW.as_millis()).unwrap()
}

/// One removal in a window of its own, then its tail, every window
/// stalled `stalled`: `now` moves to the last one's end.
fn removal_at(budget: &mut Budget, now: &mut Instant, stalled: Duration) {
    let ticket = budget.start(Kind::Container, *now);
    budget.finish(ticket);
    for _ in 0..=TAIL_WINDOWS {
        *now += WINDOW;
        budget.observe(*now, stalled);
    }
}

#[test]
fn removals_rest_every_so_often_until_the_baseline_is_measured_again() {
    let mut now = Instant::now();
    let limits = Limits {
        rest_every: Duration::from_secs(3),
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.01, now);
    // Removals that add nothing, 1.25 s apiece with their tails: three
    // start within 3 s of the first, then the removals rest.
    let mut removals = 0;
    while budget.gate(Kind::Container, now) == Verdict::Start {
        one_removal(&mut budget, &mut now, Kind::Container, ms(2.5));
        removals += 1;
    }
    assert_eq!(removals, 3);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    // The rest is a pause: SETTLE, then MIN_WINDOWS windows of the
    // workloads' own, which measure them again.
    quiet(
        &mut budget,
        &mut now,
        settle_windows() + MIN_WINDOWS - 1,
        ms(2.5),
    );
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    assert_eq!(budget.accounts().remeasured, 0);
    quiet(&mut budget, &mut now, 1, ms(2.5));
    assert_eq!(budget.accounts().remeasured, 1);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    // The rest held the removals back: the report counts it.
    assert!(
        budget.accounts().waited >= SETTLE,
        "{:?}",
        budget.accounts()
    );
    // A new period begins with the next removal: 3 s more before a rest.
    one_removal(&mut budget, &mut now, Kind::Container, ms(2.5));
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
}

/// A budget at 1% whose removals add nothing: a pause at 1%, one removal
/// then a pause at `second` whose windows begin `gap` after it: the
/// baseline that pause measures.
fn after_two_pauses(gap: Duration, second: f64) -> f64 {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.01, now);
    removal_at(&mut budget, &mut now, ms(2.5));
    quiet(
        &mut budget,
        &mut now,
        settle_windows() + MIN_WINDOWS,
        ms(2.5),
    );
    assert_eq!(budget.accounts().remeasured, 1);
    removal_at(&mut budget, &mut now, WINDOW.mul_f64(second));
    now += gap;
    let at = WINDOW.mul_f64(second);
    quiet(&mut budget, &mut now, settle_windows() + MIN_WINDOWS, at);
    assert_eq!(budget.accounts().remeasured, 2);
    budget.baseline()
}

#[test]
fn a_pause_measures_with_the_windows_of_the_pauses_before_it() {
    // Five windows at 1% and five at 1.5%: their level (the highest left
    // out) is the baseline, not the second pause's five alone.
    assert_close(after_two_pauses(Duration::ZERO, 0.015), 0.011 / 0.9);
    // A step of more than two points is the workloads changing: the new
    // level alone.
    assert_close(after_two_pauses(Duration::ZERO, 0.04), 0.04);
    // Windows more than two minutes old no longer count.
    assert_close(
        after_two_pauses(POOLED + Duration::from_secs(1), 0.015),
        0.015,
    );
}

#[test]
fn a_removal_is_charged_at_least_the_least_cost() {
    let mut now = Instant::now();
    let limits = Limits {
        least_cost: 0.001,
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.0, now);
    // A kind not yet learned is charged the least cost when it starts:
    // 1 ms, 200 ms of a 0.5% target to pay back.
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    let ticket = budget.start(Kind::Container, now);
    assert_close(budget.allowance(now), -0.001);
    assert!(matches!(
        budget.gate(Kind::Volume, now),
        Verdict::PayBack(d) if d.abs_diff(ms(200.0)) < Duration::from_micros(10)
    ));
    budget.finish(ticket);
    // Its windows show nothing: once its tail is over, it has cost the
    // least cost all the same, and its kind's learned cost is nothing.
    quiet_in_flight(&mut budget, &mut now);
    assert_eq!(budget.cost(Kind::Container), Some(Duration::ZERO));
    let credited = f64::from(TAIL_WINDOWS + 1) * WINDOW.as_secs_f64() * LIMITS.target;
    assert_close(budget.allowance(now), credited - 0.001);
    // A removal of a learned kind that costs less is charged it too.
    let ticket = budget.start(Kind::Container, now);
    assert_close(budget.allowance(now), credited - 0.002);
    budget.finish(ticket);
}

/// The window of a removal finished in it and its tail, stalling nothing.
fn quiet_in_flight(budget: &mut Budget, now: &mut Instant) {
    for _ in 0..=TAIL_WINDOWS {
        *now += WINDOW;
        budget.observe(*now, Duration::ZERO);
    }
}
