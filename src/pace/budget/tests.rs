//! The budget's law in paused time: each test passes the instants.

use super::pause::SETTLE;
use super::*;
use crate::pace::baseline::MIN_WINDOWS;

/// 0.5% added, a 10% ceiling, at most 4 in flight; no least cost, so that
/// each test of the rest of the law counts its own windows (its own test
/// sets one).
const LIMITS: Limits = Limits {
    target: 0.005,
    ceiling: 0.10,
    max: 4,
    least_cost: 0.0,
    least_cost_per_mib: 0.0,
    batch: 1,
    settle: SETTLE,
};

/// A window of the pacer's timer.
const WINDOW: Duration = Duration::from_millis(250);

fn ms(millis: f64) -> Duration {
    Duration::from_secs_f64(millis / 1000.0)
}

/// `a` and `b` within a microsecond, seconds.
fn assert_close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-6, "{a} is not {b}");
}

/// The verdict is a pay-back within a millisecond of `expected`.
fn assert_pays_back(verdict: Verdict, expected: Duration) {
    let Verdict::PayBack(wait) = verdict else {
        panic!("{verdict:?}, not a pay-back of {expected:?}");
    };
    assert!(
        wait.abs_diff(expected) < Duration::from_millis(1),
        "{wait:?}, not {expected:?}"
    );
}

/// Windows of [`TAIL`]: a finished removal's stall is still its own for
/// that many more.
const TAIL_WINDOWS: u32 = 4;

/// One removal of `kind` in a window of its own that stalls `stalled`, then
/// its [`TAIL`] at the baseline (nothing above it), after which its kind's
/// cost is learned: `now` moves to the last window's end.
fn one_removal(budget: &mut Budget, now: &mut Instant, kind: Kind, stalled: Duration) {
    let ticket = budget.start(kind, Weight::default(), *now);
    budget.finish(ticket);
    *now += WINDOW;
    budget.observe(*now, stalled);
    tail(budget, now);
}

/// The [`TAIL`] of removals finished: windows at the baseline.
fn tail(budget: &mut Budget, now: &mut Instant) {
    assert_eq!(TAIL, WINDOW * TAIL_WINDOWS);
    for _ in 0..TAIL_WINDOWS {
        *now += WINDOW;
        let at_baseline = WINDOW.mul_f64(budget.baseline());
        budget.observe(*now, at_baseline);
    }
}

#[test]
fn the_allowance_grows_with_time_and_no_more_than_the_cap() {
    let t0 = Instant::now();
    let budget = Budget::new(LIMITS, 0.0, t0);
    assert_close(budget.allowance(t0), 0.0);
    assert_close(budget.allowance(t0 + Duration::from_secs(1)), 0.005);
    // An hour of quiet holds what thirty seconds give: 150 ms of stall.
    let cap = LIMITS.target * BANK.as_secs_f64();
    assert_close(budget.allowance(t0 + Duration::from_secs(3600)), cap);
    assert_close(cap, 0.150);
    // Observed, the cap holds too, and a window's stall above it is a
    // deficit however long the quiet before: an hour of windows.
    let mut budget = Budget::new(LIMITS, 0.0, t0);
    let mut t1 = t0;
    quiet(&mut budget, &mut t1, 3600 * 4, Duration::ZERO);
    quiet(&mut budget, &mut t1, 1, ms(200.0));
    assert_close(budget.allowance(t1), -0.050);
}

#[test]
fn a_deficit_stops_starts_until_time_pays_it_back() {
    let t0 = Instant::now();
    // The workloads stall 1% of the time by themselves.
    let mut budget = Budget::new(LIMITS, 0.01, t0);
    assert_eq!(budget.gate(Kind::Container, t0), Verdict::Start);
    let ticket = budget.start(Kind::Container, Weight::default(), t0);
    budget.finish(ticket);
    // 60 ms stalled in a second: 10 ms the baseline's, 50 ms added.
    // Credited 5 ms: 45 ms short, which at 0.5% takes 9 s to pay back.
    let t1 = t0 + Duration::from_secs(1);
    budget.observe(t1, ms(60.0));
    assert_close(budget.allowance(t1), -0.045);
    assert_pays_back(budget.gate(Kind::Container, t1), ms(9000.0));
    assert_pays_back(budget.gate(Kind::Container, t1 + ms(8250.0)), ms(750.0));
    // Paid back: a removal starts (a volume: the container's kind is not
    // learned until its tail is over).
    let paid = t1 + ms(9001.0);
    assert_eq!(budget.gate(Kind::Volume, paid), Verdict::Start);
    let accounts = budget.accounts();
    assert!(
        accounts.waited.abs_diff(ms(9001.0)) < Duration::from_micros(10),
        "{accounts:?}"
    );
    assert!(
        accounts.added_stall.abs_diff(ms(50.0)) < Duration::from_micros(1),
        "{accounts:?}"
    );
    assert_eq!(accounts.windows, 1);
}

#[test]
fn over_the_ceiling_nothing_starts_even_with_allowance() {
    let t0 = Instant::now();
    // The workloads' own stall is 20%, over the 10% ceiling: a stall
    // budget above it would let the removals add to a node in trouble.
    let mut budget = Budget::new(LIMITS, 0.20, t0);
    let t1 = t0 + Duration::from_secs(1);
    assert!(budget.allowance(t1) > 0.0);
    assert_eq!(
        budget.gate(Kind::Container, t1),
        Verdict::Ceiling,
        "the baseline's share"
    );
    budget.observe(t1, ms(200.0));
    assert!(budget.allowance(t1) > 0.0, "at the baseline: nothing spent");
    assert_eq!(budget.gate(Kind::Container, t1), Verdict::Ceiling);
    // A window under it: removals may start again.
    let t2 = t1 + WINDOW;
    budget.observe(t2, ms(12.5));
    assert_eq!(budget.gate(Kind::Container, t2), Verdict::Start);
    assert_eq!(budget.accounts().waited, WINDOW);
    // At the ceiling is not above it.
    budget.observe(t2 + WINDOW, ms(25.0));
    assert_eq!(budget.gate(Kind::Container, t2 + WINDOW), Verdict::Start);
}

#[test]
fn concurrency_rises_by_one_per_good_window_and_halves_on_a_deficit() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.0, now);
    assert_eq!(budget.concurrency(), 1);
    let ticket = budget.start(Kind::Image, Weight::default(), now);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Full);
    // A removal in flight and no stall: the budget held.
    let mut rises = Vec::new();
    for _ in 0..5 {
        now += WINDOW;
        budget.observe(now, Duration::ZERO);
        rises.push(budget.concurrency());
    }
    assert_eq!(rises, [2, 3, 4, 4, 4], "never above max");
    assert_eq!(budget.accounts().lowest_concurrency, None, "no deficit yet");
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    // Windows over budget halve it, never under one.
    let mut falls = Vec::new();
    for _ in 0..3 {
        now += WINDOW;
        budget.observe(now, ms(40.0));
        falls.push(budget.concurrency());
    }
    assert_eq!(falls, [2, 1, 1]);
    assert_eq!(budget.accounts().lowest_concurrency, Some(1));
    assert_eq!(budget.accounts().highest_concurrency, 4);
    // A window without removals in it says nothing of them: no change,
    // however it went.
    budget.finish(ticket);
    now += WINDOW;
    budget.observe(now, Duration::ZERO);
    let after = budget.concurrency();
    now += Duration::from_secs(10);
    budget.observe(now, Duration::ZERO);
    assert_eq!(budget.concurrency(), after);
    assert_eq!(budget.in_flight(), 0);
}

#[test]
fn learned_costs_converge_toward_the_stall_per_removal_of_a_kind() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.0, now);
    assert_eq!(budget.cost(Kind::Image), None);
    one_removal(&mut budget, &mut now, Kind::Image, ms(30.0));
    assert_eq!(
        budget.cost(Kind::Image),
        Some(ms(30.0)),
        "the first sets it"
    );
    let mut costs = Vec::new();
    for _ in 0..15 {
        one_removal(&mut budget, &mut now, Kind::Image, ms(10.0));
        costs.push(budget.cost(Kind::Image).unwrap());
    }
    assert!(costs.is_sorted_by(|a, b| a > b), "{costs:?}");
    let last = costs.last().unwrap();
    assert!(last.abs_diff(ms(10.0)) < ms(0.2), "{last:?}");
    assert_eq!(budget.cost(Kind::Container), None, "per kind");
}

#[test]
fn a_window_is_shared_by_the_removals_in_flight_during_it() {
    let mut now = Instant::now();
    let mut budget = Budget::new(Limits { max: 8, ..LIMITS }, 0.0, now);
    // A container over two windows, an image in the second only.
    let container = budget.start(Kind::Container, Weight::default(), now);
    now += WINDOW;
    budget.observe(now, ms(6.0));
    let image = budget.start(Kind::Image, Weight::default(), now);
    budget.finish(container);
    budget.finish(image);
    now += WINDOW;
    budget.observe(now, ms(8.0));
    assert_eq!(budget.cost(Kind::Container), None, "in its tail");
    tail(&mut budget, &mut now);
    assert_eq!(budget.cost(Kind::Container), Some(ms(10.0)));
    assert_eq!(budget.cost(Kind::Image), Some(ms(4.0)));
}

/// A budget that has learned an image costs 20 ms and a container 2 ms,
/// and is in deficit (so that the cap does not blur what is charged).
fn learned(now: &mut Instant) -> Budget {
    let mut budget = Budget::new(LIMITS, 0.0, *now);
    one_removal(&mut budget, now, Kind::Image, ms(20.0));
    one_removal(&mut budget, now, Kind::Container, ms(2.0));
    assert!(budget.allowance(*now) < 0.0);
    budget
}

#[test]
fn a_kind_with_a_large_cost_is_charged_more_at_start() {
    let mut now = Instant::now();
    let mut budget = learned(&mut now);
    let before = budget.allowance(now);
    budget.start(Kind::Container, Weight::default(), now);
    assert_close(budget.allowance(now), before - 0.002);
    budget.start(Kind::Image, Weight::default(), now);
    assert_close(budget.allowance(now), before - 0.022);
    // A kind not yet learned is charged nothing: its first removals are
    // how it is learned.
    budget.start(Kind::Volume, Weight::default(), now);
    assert_close(budget.allowance(now), before - 0.022);
}

#[test]
fn a_correction_refunds_an_over_charge_and_charges_an_under_charge() {
    let mut now = Instant::now();
    let mut budget = learned(&mut now);
    let before = budget.allowance(now);
    let credit = LIMITS.target * WINDOW.as_secs_f64();
    let credits = |windows: u32| f64::from(windows) * credit;
    // Charged 20 ms; the window shows 2 ms: 18 ms back once its tail is
    // over (held meanwhile: its late stall may still come).
    let image = budget.start(Kind::Image, Weight::default(), now);
    assert_close(budget.allowance(now), before - 0.020);
    budget.finish(image);
    now += WINDOW;
    budget.observe(now, ms(2.0));
    assert_close(budget.allowance(now), before + credit - 0.020);
    tail(&mut budget, &mut now);
    assert_close(
        budget.allowance(now),
        before + credits(1 + TAIL_WINDOWS) - 0.002,
    );
    // Charged what it has learned since (14.6 ms); the window shows 30
    // ms: the difference more.
    let before = budget.allowance(now);
    let charge = budget.cost(Kind::Image).unwrap().as_secs_f64();
    assert_close(charge, 0.0146);
    let image = budget.start(Kind::Image, Weight::default(), now);
    assert_close(budget.allowance(now), before - charge);
    budget.finish(image);
    now += WINDOW;
    budget.observe(now, ms(30.0));
    tail(&mut budget, &mut now);
    assert_close(
        budget.allowance(now),
        before + credits(1 + TAIL_WINDOWS) - 0.030,
    );
}

#[test]
fn a_removal_still_in_flight_keeps_what_its_stall_has_not_yet_used() {
    let mut now = Instant::now();
    let mut budget = learned(&mut now);
    let before = budget.allowance(now);
    let credit = LIMITS.target * WINDOW.as_secs_f64();
    let image = budget.start(Kind::Image, Weight::default(), now);
    now += WINDOW;
    budget.observe(now, ms(5.0));
    // 5 ms measured, 15 ms of its charge still held: not refunded yet.
    assert_close(budget.allowance(now), before + credit - 0.020);
    budget.finish(image);
    now += WINDOW;
    budget.observe(now, ms(1.0));
    assert_close(budget.allowance(now), before + 2.0 * credit - 0.020);
    // Its tail over, what it did not stall is refunded.
    tail(&mut budget, &mut now);
    assert_close(
        budget.allowance(now),
        before + f64::from(2 + TAIL_WINDOWS) * credit - 0.006,
    );
}

/// How many windows of [`WINDOW`] a pause's [`SETTLE`] holds.
fn settling_windows() -> usize {
    usize::try_from(SETTLE.as_millis() / WINDOW.as_millis()).unwrap()
}

/// `n` windows of [`WINDOW`] from `now`, each stalled `stalled`, with
/// nothing in flight: `now` moves to the last one's end.
fn quiet(budget: &mut Budget, now: &mut Instant, n: usize, stalled: Duration) {
    for _ in 0..n {
        *now += WINDOW;
        budget.observe(*now, stalled);
    }
}

/// Windows at the baseline with nothing in flight until the budget says
/// removals rest: the windows from then on measure (see the module).
fn rest(budget: &mut Budget, now: &mut Instant) {
    while budget.gate(Kind::Container, *now) != Verdict::Rest {
        let at_baseline = WINDOW.mul_f64(budget.baseline());
        quiet(budget, now, 1, at_baseline);
    }
}

/// Removals one after another from `now` until `until`, each window at
/// the baseline: nothing spent, no deficit. Each may start.
fn removals_until(budget: &mut Budget, now: &mut Instant, until: Instant) {
    while *now < until {
        let left = until.duration_since(*now);
        assert_eq!(
            budget.gate(Kind::Container, *now),
            Verdict::Start,
            "{left:?} before {until:?}"
        );
        let at_baseline = WINDOW.mul_f64(budget.baseline());
        one_removal(budget, now, Kind::Container, at_baseline);
    }
}

#[test]
fn a_rest_measures_the_baseline_again_and_gives_back_what_it_charged() {
    let mut now = Instant::now();
    let began = now;
    // The workloads stalled 1% when the run began.
    let mut budget = Budget::new(LIMITS, 0.01, now).with_windows(&[0.01; 12]);
    removals_until(&mut budget, &mut now, began + REST);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    let before = budget.allowance(now);
    // Then a writer among them starts: 4% of every window, with no removal
    // in flight. Until SETTLE has passed and MIN_WINDOWS windows after it
    // came, that is charged: 7.5 ms a window above the old 1%.
    let settle = settling_windows();
    quiet(&mut budget, &mut now, settle + MIN_WINDOWS - 1, ms(10.0));
    assert_close(budget.baseline(), 0.01);
    assert!(
        budget.allowance(now) < before - 0.1,
        "{}",
        budget.allowance(now)
    );
    // The rest's fifth window: the baseline is the writer's 4% now, and
    // what the windows after SETTLE were charged above it is given back.
    // The settling windows are charged again at 4%: what they stalled
    // above it would stand (they may hold the removal's late stall), and
    // at 4% they stalled nothing above it. Every window since the rest
    // began credited, none spent, within the cap.
    quiet(&mut budget, &mut now, 1, ms(10.0));
    assert_close(budget.baseline(), 0.04);
    assert_eq!(budget.accounts().remeasured, 1);
    let credit = LIMITS.target * WINDOW.as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a few windows")]
    let expected = (before + (settle + MIN_WINDOWS) as f64 * credit).min(budget.cap());
    assert_close(budget.allowance(now), expected);
    // The rest goes on to RESTED windows, whatever they show.
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Rest);
    quiet(&mut budget, &mut now, RESTED - MIN_WINDOWS, ms(10.0));
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    assert_eq!(budget.accounts().remeasured, 1, "one rest");
    // A removal, and a pause with nothing in flight: windows at 2% then
    // measure nothing. The next rest does.
    one_removal(&mut budget, &mut now, Kind::Container, ms(10.0));
    quiet(&mut budget, &mut now, settle + RESTED, ms(5.0));
    assert_close(budget.baseline(), 0.04);
    rest(&mut budget, &mut now);
    quiet(&mut budget, &mut now, MIN_WINDOWS, ms(5.0));
    assert_close(budget.baseline(), 0.02);
    assert_eq!(budget.accounts().remeasured, 2);
}

#[test]
fn the_workloads_noise_while_removals_go_lowers_nothing() {
    let mut now = Instant::now();
    // 2% measured, windows moving by 1%; RECENT windows with removals in
    // flight at 1.6% on average are within their noise (their mean's
    // error is 0.09%: lowering needs a mean under 2% less the target 0.5%
    // and twice that, 1.32%), and lowering on them would charge the
    // removals the difference.
    let mut budget = Budget::new(Limits { max: 1, ..LIMITS }, 0.02, now).with_spread(0.01);
    let ticket = budget.start(Kind::Image, Weight::default(), now);
    for _ in 0..RECENT {
        now += WINDOW;
        budget.observe(now, ms(4.0));
    }
    assert_close(budget.baseline(), 0.02);
    // Then at 0.5%: the 30th such window leaves the mean at 1.325%,
    // within; the 31st at 1.316%, beyond. The baseline is lowered to that
    // mean, and the windows at 0.5% after it, within the noise of that
    // (the mean at 1.23% by the 40th), do not ratchet it down further.
    #[expect(clippy::cast_precision_loss, reason = "RECENT windows")]
    let recent = RECENT as f64;
    for i in 1..=40 {
        now += WINDOW;
        budget.observe(now, ms(1.25));
        if i == 30 {
            assert_close(budget.baseline(), 0.02);
        }
    }
    assert_close(
        budget.baseline(),
        (31.0 * 0.005 + (recent - 31.0) * 0.016) / recent,
    );
    budget.finish(ticket);
}

#[test]
fn a_quieter_workload_lowers_the_baseline_while_removals_go() {
    let mut now = Instant::now();
    // Measured at 4%; the workloads drop to 1% as the removals begin.
    let mut budget = Budget::new(Limits { max: 1, ..LIMITS }, 0.04, now);
    let ticket = budget.start(Kind::Image, Weight::default(), now);
    for i in 1..=RECENT {
        now += WINDOW;
        budget.observe(now, ms(2.5));
        if i < RECENT {
            assert_close(budget.baseline(), 0.04);
        }
    }
    // RECENT windows at 1%: that is the workloads' stall now, and a
    // removal's stall above it is spent, not hidden under the old 4%.
    assert_close(budget.baseline(), 0.01);
    // The windows under the old baseline gave back what they did not
    // stall under it (7.5 ms each) with their credit, up to the cap; the
    // next window's 5 ms above 1% is spent.
    let before = budget.allowance(now);
    assert!(before > 0.09, "{before}");
    now += WINDOW;
    budget.observe(now, ms(7.5));
    let credit = LIMITS.target * WINDOW.as_secs_f64();
    let cap = LIMITS.target * BANK.as_secs_f64();
    assert_close(budget.allowance(now), (before + credit).min(cap) - 0.005);
    budget.finish(ticket);
    assert_eq!(budget.accounts().remeasured, 0, "not a pause");
}

#[test]
fn the_workloads_ups_and_downs_around_their_baseline_cost_nothing() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.02, now);
    let ticket = budget.start(Kind::Container, Weight::default(), now);
    // 2% on the whole, in windows of 1% and 3% by turns: what is above
    // the baseline in one is given back by the next.
    for i in 0..40 {
        now += WINDOW;
        budget.observe(now, ms(if i % 2 == 0 { 7.5 } else { 2.5 }));
        assert!(
            budget.allowance(now) >= -LIMITS.target * WINDOW.as_secs_f64(),
            "window {i}: {}",
            budget.allowance(now)
        );
    }
    // Only the windows' credit is left: 10 s of the target.
    assert_close(budget.allowance(now), LIMITS.target * 10.0);
    assert_eq!(budget.accounts().added_stall, Duration::ZERO);
    assert_eq!(budget.concurrency(), 4, "the budget held");
    budget.finish(ticket);
}

#[test]
fn a_kind_not_yet_learned_goes_one_at_a_time() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.0, now);
    let container = budget.start(Kind::Container, Weight::default(), now);
    for _ in 0..3 {
        now += WINDOW;
        budget.observe(now, Duration::ZERO);
    }
    budget.finish(container);
    now += WINDOW;
    budget.observe(now, Duration::ZERO);
    assert_eq!(budget.concurrency(), 4);
    tail(&mut budget, &mut now);
    // Containers are learned: as many as the concurrency.
    budget.start(Kind::Container, Weight::default(), now);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    // Images are not: one, until it was observed.
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Start);
    let image = budget.start(Kind::Image, Weight::default(), now);
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Full);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    budget.finish(image);
    // Finished but not yet observed: what it cost is not known yet, and
    // the next waits for the windows that say, its tail's too.
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Full, "finished");
    now += WINDOW;
    budget.observe(now, Duration::ZERO);
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Full, "in its tail");
    tail(&mut budget, &mut now);
    budget.start(Kind::Image, Weight::default(), now);
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Start, "learned");
}

mod batch;
mod floors;

#[test]
fn a_window_the_pacer_was_stopped_through_is_charged_to_no_removal() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.04, now);
    let ticket = budget.start(Kind::Container, Weight::default(), now);
    budget.finish(ticket);
    // The process stopped for 40 s (the benchmark's SIGSTOP, a starved
    // node) while the workloads stalled 10%: theirs, not the removal's.
    // Nor did it earn anything: removals could not go (credited, each of
    // the benchmark's stops gave a run up to 80 ms more on resuming).
    now += Duration::from_secs(40);
    budget.observe(now, Duration::from_secs(4));
    assert_close(budget.allowance(now), 0.0);
    assert_eq!(budget.accounts().added_stall, Duration::ZERO);
    assert_eq!(budget.accounts().windows, 1);
    // Its window and tail at the baseline: it taught its kind nothing.
    now += WINDOW;
    budget.observe(now, WINDOW.mul_f64(0.04));
    tail(&mut budget, &mut now);
    assert_eq!(budget.cost(Kind::Container), Some(Duration::ZERO));
    // The same stall in a window of the pacer's own is the removal's.
    let mut charged = Budget::new(LIMITS, 0.04, now);
    let ticket = charged.start(Kind::Container, Weight::default(), now);
    charged.finish(ticket);
    now += STOPPED;
    charged.observe(now, STOPPED.mul_f64(0.10));
    assert_close(
        charged.accounts().added_stall.as_secs_f64(),
        STOPPED.as_secs_f64() * 0.06,
    );
}

mod rest;
