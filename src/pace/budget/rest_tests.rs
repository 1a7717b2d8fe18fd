//! The rests, the charging of a removal period against the baselines on
//! either side of it, and the least cost, in paused time.

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

/// A budget whose baseline was measured at `before`, three removals that
/// add nothing over workloads at `workloads` (a rest every 3 s), then the
/// rest, at `after`: the stall it counts as added.
fn period_between(before: f64, workloads: f64, after: f64) -> Duration {
    let mut now = Instant::now();
    let limits = Limits {
        rest_every: Duration::from_secs(3),
        ..LIMITS
    };
    let mut budget = Budget::new(limits, before, now);
    for _ in 0..3 {
        assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
        removal_at(&mut budget, &mut now, WINDOW.mul_f64(workloads));
    }
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    let at = WINDOW.mul_f64(after);
    quiet(&mut budget, &mut now, settle_windows() + MIN_WINDOWS, at);
    assert_close(budget.baseline(), after);
    budget.accounts().added_stall
}

#[test]
fn a_removal_period_is_charged_against_the_baselines_on_either_side() {
    // Measured at 1% before, the workloads at 1.5% all along: fifteen
    // windows of removals charged 1.25 ms each above 1%. The rest measures
    // 1.5%: charged against their mean, 1.25%, they added 0.625 ms a
    // window, half of what a baseline measured once would have said.
    let added = period_between(0.01, 0.015, 0.015);
    assert!(
        added.abs_diff(ms(15.0 * 0.625)) < Duration::from_micros(1),
        "{added:?}"
    );
    // Measured too high, the same: the removals are charged what the mean
    // says, not nothing.
    let added = period_between(0.02, 0.015, 0.015);
    assert!(
        added.abs_diff(Duration::ZERO) < Duration::from_micros(1),
        "{added:?}"
    );
    let added = period_between(0.0175, 0.02, 0.02);
    assert!(
        added.abs_diff(ms(15.0 * 0.3125)) < Duration::from_micros(1),
        "{added:?}"
    );
}

#[test]
fn a_step_between_the_baselines_leaves_the_period_as_charged() {
    // The workloads at 1% while the removals go (adding nothing), then a
    // writer takes them to 4% in the rest: not a measurement that was off
    // but a change, which the mean (2.5%) would give the removals 22.5 ms
    // for. They stand as charged, nothing added; the rest's own windows
    // are charged again at the writer's 4%.
    let added = period_between(0.01, 0.01, 0.04);
    assert!(added < Duration::from_micros(1), "{added:?}");
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
