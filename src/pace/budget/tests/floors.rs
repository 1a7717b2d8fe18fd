//! The budget's floors: how long a deficit holds (its debt, the workloads'
//! noise) and the least a removal costs.

use super::*;

#[test]
fn a_burst_in_a_removals_window_holds_the_run_no_longer_than_the_debt() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.04, now);
    // Containers that add 2 ms each, learned.
    for _ in 0..5 {
        one_removal(&mut budget, &mut now, Kind::Container, ms(12.0));
    }
    // Then a burst of the workloads' own while a container is in flight,
    // three times: 220 ms of 250. At half a point each is 42 s of
    // allowance; a few of them held a run still for minutes.
    for _ in 0..3 {
        let ticket = budget.start(Kind::Container, Weight::default(), now);
        budget.finish(ticket);
        now += WINDOW;
        budget.observe(now, ms(220.0));
    }
    let floor = -LIMITS.target * DEBT.as_secs_f64();
    assert!(budget.cost(Kind::Container).unwrap().as_secs_f64() < -floor);
    assert_close(budget.allowance(now), floor);
    // A window back at the workloads' 4% (under the ceiling again): what
    // is owed is paid back within DEBT.
    quiet(&mut budget, &mut now, 1, ms(10.0));
    assert_pays_back(
        budget.gate(Kind::Container, now),
        DEBT.checked_sub(WINDOW).unwrap(),
    );
    // What it says the removals added is what was measured, all of it.
    let added = budget.accounts().added_stall.as_secs_f64();
    assert!((added - (5.0 * 0.002 + 3.0 * 0.21)).abs() < 1e-6, "{added}");
    now += DEBT;
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
}

#[test]
fn a_removal_dearer_than_the_debt_is_paid_back_in_full() {
    let mut now = Instant::now();
    // At 0.1% the debt holds 30 ms of stall; an image adds 50 ms.
    let limits = Limits {
        target: 0.001,
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.0, now);
    // The first is not known yet when its window is spent: held to DEBT
    // (and credited through its tail).
    let tail_credit = limits.target * TAIL.as_secs_f64();
    one_removal(&mut budget, &mut now, Kind::Image, ms(50.0));
    assert_eq!(budget.cost(Kind::Image), Some(ms(50.0)));
    assert!((budget.allowance(now) + 0.03 - tail_credit).abs() < 1e-6);
    // Known, an image's whole cost is owed: 50 s at 0.1%, not DEBT's 30 s
    // (with which images went one per 30 s, and a run added six times its
    // target).
    now += Duration::from_secs(30);
    one_removal(&mut budget, &mut now, Kind::Image, ms(50.0));
    // Its 50 ms, less what the quiet before and its own windows credited
    // (the bank's cap, the windows' 0.1%).
    let owed = -budget.allowance(now);
    assert!((0.045..0.05).contains(&owed), "{owed}");
    let Verdict::PayBack(wait) = budget.gate(Kind::Image, now) else {
        panic!("no pay-back");
    };
    assert!(wait > DEBT + Duration::from_secs(15), "{wait:?}");
}

#[test]
fn a_steady_workloads_noise_does_not_lower_the_baseline() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.02, now);
    let ticket = budget.start(Kind::Container, Weight::default(), now);
    // 2% on average, in windows of 1.2% to 2.8%: a dozen of them falls
    // under 2% about half the time, never by more than the target.
    for i in 0..48_u32 {
        now += WINDOW;
        let stalled = 5.0 + f64::from(i * 7 % 5) - 2.0;
        budget.observe(now, ms(stalled));
    }
    assert_close(budget.baseline(), 0.02);
    budget.finish(ticket);
}

#[test]
fn a_removals_late_stall_is_learned_from_its_tail() {
    let mut now = Instant::now();
    let mut budget = Budget::new(Limits { max: 8, ..LIMITS }, 0.0, now);
    // An image whose removal stalls little while in flight and much after
    // it returned, in windows with nothing in flight: its cost is the
    // whole of it.
    let image = budget.start(Kind::Image, Weight::default(), now);
    budget.finish(image);
    now += WINDOW;
    budget.observe(now, ms(5.0));
    let before = budget.concurrency();
    for stalled in [30.0, 30.0, 30.0, 0.0] {
        now += WINDOW;
        budget.observe(now, ms(stalled));
    }
    assert_eq!(budget.cost(Kind::Image), Some(ms(95.0)));
    // Windows with only a tail in them halved the concurrency (the budget
    // is in deficit), and none raised it.
    assert!(budget.concurrency() <= before, "{}", budget.concurrency());
    // A window of tails where the budget holds does not raise it either.
    let mut quiet_budget = Budget::new(Limits { max: 8, ..LIMITS }, 0.0, now);
    let container = quiet_budget.start(Kind::Container, Weight::default(), now);
    quiet_budget.finish(container);
    now += WINDOW;
    quiet_budget.observe(now, Duration::ZERO);
    assert_eq!(quiet_budget.concurrency(), 2, "the removal's own window");
    tail(&mut quiet_budget, &mut now);
    assert_eq!(quiet_budget.concurrency(), 2, "its tail");
    assert_eq!(quiet_budget.cost(Kind::Container), Some(Duration::ZERO));
}

#[test]
fn removals_go_no_faster_than_their_least_costs_while_the_workloads_stall() {
    let mut now = Instant::now();
    let limits = Limits {
        least_cost: 0.001,
        ..LIMITS
    };
    // The workloads stall 1% by themselves: 2.5 ms a window.
    let mut budget = Budget::new(limits, 0.01, now);
    // A removal pays its least cost when it starts: 1 ms, which a 0.5%
    // target pays back in 200 ms. The allowance is not charged it.
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    let ticket = budget.start(Kind::Container, Weight::default(), now);
    assert_close(budget.allowance(now), 0.0);
    assert_pays_back(budget.gate(Kind::Volume, now), ms(200.0));
    budget.finish(ticket);
    // Its windows show nothing above the workloads' own: its kind's cost
    // is learned as nothing, and nothing is added.
    for _ in 0..=TAIL_WINDOWS {
        now += WINDOW;
        budget.observe(now, ms(2.5));
    }
    assert_eq!(budget.cost(Kind::Container), Some(Duration::ZERO));
    assert_eq!(budget.accounts().added_stall, Duration::ZERO);
    let credited = f64::from(TAIL_WINDOWS + 1) * WINDOW.as_secs_f64() * LIMITS.target;
    assert_close(budget.allowance(now), credited);
    // However much the windows give back, the least costs' account holds
    // at most PACE_BANK of the target: after 50 s of windows under the
    // baseline, ten removals of 1 ms at once (10 ms) and one more on
    // credit, then one per 200 ms.
    for _ in 0..200 {
        now += WINDOW;
        budget.observe(now, ms(1.0));
    }
    assert!(budget.allowance(now) > 0.1, "{}", budget.allowance(now));
    let mut started = 0;
    while budget.gate(Kind::Container, now) == Verdict::Start {
        let ticket = budget.start(Kind::Container, Weight::default(), now);
        budget.finish(ticket);
        started += 1;
        assert!(started <= 20, "no end to the burst");
    }
    // 0.5% of 2 s: ten removals of 1 ms.
    assert_close(LIMITS.target * PACE_BANK.as_secs_f64(), 0.010);
    assert_eq!(started, 11, "PACE_BANK's worth and no more");
    // The 50 s went by with no removal held for its least costs: what the
    // account earned beyond its bank is its lag, and the next removals go
    // at twice the pace (see the next test).
    assert_pays_back(budget.gate(Kind::Container, now), ms(100.0));

    // Where the workloads stall nothing, any stall a removal makes shows
    // in its windows: no least cost, no wait.
    let now = Instant::now();
    let mut idle = Budget::new(limits, 0.0, now);
    assert_eq!(idle.gate(Kind::Container, now), Verdict::Start);
    let ticket = idle.start(Kind::Container, Weight::default(), now);
    idle.finish(ticket);
    // Where the first part had to pay 200 ms back, another starts at once.
    assert_eq!(idle.gate(Kind::Volume, now), Verdict::Start);
}

/// Removals of 1 ms least cost, each finished as it starts, going as soon
/// as `budget` lets them over `secs` seconds from `now` (10-ms steps, a
/// window at the 1% baseline every 250 ms): when each started, seconds
/// from `now`.
fn go(budget: &mut Budget, now: &mut Instant, secs: u32) -> Vec<f64> {
    let from = *now;
    let mut starts = Vec::new();
    for step in 1..=secs * 100 {
        while budget.gate(Kind::Container, *now) == Verdict::Start {
            let ticket = budget.start(Kind::Container, Weight::default(), *now);
            budget.finish(ticket);
            starts.push(now.duration_since(from).as_secs_f64());
        }
        *now += ms(10.0);
        if step % 25 == 0 {
            budget.observe(*now, ms(2.5));
        }
    }
    starts
}

/// How many of `starts` fall in `[from, to)` seconds.
fn within(starts: &[f64], from: f64, to: f64) -> usize {
    starts.iter().filter(|&&t| t >= from && t < to).count()
}

#[test]
fn held_removals_catch_up_at_twice_their_least_costs_pace_and_no_faster() {
    let mut now = Instant::now();
    let limits = Limits {
        least_cost: 0.001,
        ..LIMITS
    };
    // 1 ms each at 0.5%: five a second. The workloads stall 1%.
    let mut budget = Budget::new(limits, 0.01, now);
    // Removals held 40 s (no removal could go: as in a deficit or a rest).
    quiet(&mut budget, &mut now, 160, ms(2.5));
    let starts = go(&mut budget, &mut now, 80);
    // The 40 s are caught up: in the 120 s since the budget began, as
    // many removals as the target pays for (600) and the bank (10) allow,
    // less the rest the run made at 60 s, which it caught up too.
    assert!(
        (590..=611).contains(&starts.len()),
        "{} removals in 120 s",
        starts.len()
    );
    // The first removal goes alone until its tail is over (a kind not yet
    // learned), then the bank's burst: eleven at 1.25 s.
    assert_eq!(within(&starts, 1.25, 1.3), 11);
    // Never faster than twice the pace, one per 100 ms, but for the bank's
    // burst after a pause (the first removal's tail, the rest at 60 s).
    let mut burst = 0;
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        if gap > 1.0 {
            burst = 10;
        } else if gap < 0.1 - 1e-9 {
            assert!(burst > 0, "{gap} s apart at {} s", pair[1]);
            burst -= 1;
        }
    }
    // Twice the pace while the lag lasts: 100 in the first 10 s after the
    // burst.
    let caught_up = within(&starts, 1.3, 11.3);
    assert!((99..=101).contains(&caught_up), "{caught_up} in 10 s");
    // Held 600 s: the lag holds at most LAG of the target, 300 s of twice
    // the pace (and what the rests earn, a dozen seconds a minute): 200 s
    // on, the run still catches up, at twice the pace but for a rest or
    // two; the rest of the hold is lost, and from 400 s it goes five a
    // second.
    quiet(&mut budget, &mut now, 2400, ms(2.5));
    let starts = go(&mut budget, &mut now, 600);
    assert_eq!(LAG, Duration::from_secs(300));
    let catching_up = within(&starts, 200.0, 300.0);
    assert!(
        (800..=1000).contains(&catching_up),
        "{catching_up} in 100 s from 200 s"
    );
    let late = within(&starts, 400.0, 600.0);
    assert!((980..=1020).contains(&late), "{late} in 200 s past the lag");
}

#[test]
fn a_removal_pays_a_least_cost_by_its_size_and_its_engine() {
    let now = Instant::now();
    let limits = Limits {
        least_cost: 0.001,
        least_cost_per_mib: 0.000_1,
        ..LIMITS
    };
    let mib = |n: u64| Weight {
        bytes: n << 20,
        ..Weight::default()
    };
    let mut budget = Budget::new(limits, 0.01, now);
    // 4 MiB: 0.4 ms by its size, under the least cost of 1 ms, which a
    // 0.5% target pays back in 200 ms.
    let ticket = budget.start(Kind::Image, mib(4), now);
    budget.finish(ticket);
    assert_pays_back(budget.gate(Kind::Image, now), ms(200.0));
    // 30 MiB: 3 ms, paid back in 600 ms (after the 200 ms above).
    let later = now + ms(200.0);
    let ticket = budget.start(Kind::Image, mib(30), later);
    budget.finish(ticket);
    assert_pays_back(budget.gate(Kind::Image, later), ms(600.0));
    // A size not known pays the least cost.
    let later = later + ms(600.0);
    let ticket = budget.start(Kind::Image, Weight::default(), later);
    budget.finish(ticket);
    assert_pays_back(budget.gate(Kind::Volume, later), ms(200.0));
    // On an engine whose removals weigh half as much again, the least cost
    // is 1.5 ms (300 ms to pay back); the size's, when more, as it was.
    let later = later + ms(200.0);
    let heavier = |n: u64| Weight {
        engine: 1.5,
        ..mib(n)
    };
    let ticket = budget.start(Kind::Image, heavier(4), later);
    budget.finish(ticket);
    assert_pays_back(budget.gate(Kind::Image, later), ms(300.0));
    let later = later + ms(300.0);
    let ticket = budget.start(Kind::Image, heavier(30), later);
    budget.finish(ticket);
    assert_pays_back(budget.gate(Kind::Image, later), ms(600.0));

    // Where the workloads stall nothing, no least cost, whatever the size.
    let mut idle = Budget::new(limits, 0.0, now);
    let ticket = idle.start(Kind::Container, heavier(1 << 10), now);
    idle.finish(ticket);
    assert_eq!(idle.gate(Kind::Volume, now), Verdict::Start);
}

/// The deficit a spread of `spread` (a window's share) is told from: its
/// [`NOISE`] over [`DEBT`], seconds.
fn tolerance(spread: f64) -> f64 {
    NOISE * spread * (WINDOW.as_secs_f64() * DEBT.as_secs_f64()).sqrt()
}

#[test]
fn a_deficit_within_the_workloads_noise_holds_nothing() {
    let mut now = Instant::now();
    // Two runs over the same workloads at 4%: one budget knows their
    // windows move by 1% from one to the next, the other knows nothing of
    // it.
    let mut noisy = Budget::new(LIMITS, 0.04, now).with_spread(0.01);
    let mut steady = Budget::new(LIMITS, 0.04, now);
    // A removal whose window stalled 40 ms above their 10 ms: what the
    // noise of 1% a window sums to over DEBT may explain (55 ms at two
    // deviations).
    let (mut at, started) = (now, now);
    one_removal(&mut noisy, &mut now, Kind::Container, ms(50.0));
    one_removal(&mut steady, &mut at, Kind::Container, ms(50.0));
    let credit = LIMITS.target * (now - started).as_secs_f64();
    assert_close(noisy.allowance(now), credit - 0.04);
    assert_close(steady.allowance(now), credit - 0.04);
    assert!(tolerance(0.01) > 0.04 - credit);
    // The steady workloads' budget holds the next; the noisy one's does
    // not: within the noise, the deficit is not told from it.
    assert!(matches!(
        steady.gate(Kind::Container, now),
        Verdict::PayBack(_)
    ));
    assert_eq!(noisy.gate(Kind::Container, now), Verdict::Start);
    // Nor does it halve the concurrency, as a deficit does.
    assert_eq!(noisy.concurrency(), 2);
    assert_eq!(steady.concurrency(), 1);
    // Charged its kind's 40 ms when it starts, the next is beyond the
    // noise: paid back to within it.
    noisy.start(Kind::Container, Weight::default(), now);
    let owed = 0.04 - credit + 0.04 - tolerance(0.01);
    assert_pays_back(
        noisy.gate(Kind::Container, now),
        Duration::from_secs_f64(owed / LIMITS.target),
    );
}

#[test]
fn a_deficit_beyond_the_noise_is_paid_back_over_the_debt() {
    let mut now = Instant::now();
    let mut budget = Budget::new(LIMITS, 0.04, now).with_spread(0.01);
    // Bursts while removals are in flight, far beyond the noise: the
    // floor is DEBT of the target below the noise's tolerance, so that
    // once the workloads are back at their level the run waits DEBT, as
    // where they stall steadily.
    for _ in 0..4 {
        let ticket = budget.start(Kind::Container, Weight::default(), now);
        budget.finish(ticket);
        now += WINDOW;
        budget.observe(now, ms(220.0));
    }
    let floor = -LIMITS.target * DEBT.as_secs_f64() - tolerance(0.01);
    assert_close(budget.allowance(now), floor);
    quiet(&mut budget, &mut now, 1, ms(10.0));
    assert_pays_back(
        budget.gate(Kind::Container, now),
        DEBT.checked_sub(WINDOW).unwrap(),
    );
}

#[test]
fn a_rest_measures_how_far_the_workloads_stall_moves() {
    let mut now = Instant::now();
    // Steady at 4% when the run began: every deficit holds.
    let mut budget = Budget::new(LIMITS, 0.04, now);
    // In the rest their windows move between 2% and 6%: 2% about their
    // 4%.
    rest(&mut budget, &mut now);
    for _ in 0..RESTED / 2 {
        quiet(&mut budget, &mut now, 1, ms(5.0));
        quiet(&mut budget, &mut now, 1, ms(15.0));
    }
    assert_close(budget.baseline(), 0.04);
    assert_eq!(budget.accounts().remeasured, 1);
    // Within what that noise explains (110 ms at two deviations).
    assert_eq!(budget.gate(Kind::Volume, now), Verdict::Start);
    a_deficit_of_100_ms_holds_nothing(&mut budget, &mut now);
}

/// A removal of a 4% baseline spends the allowance; another 100 ms above
/// it leaves a deficit that holds nothing, under a noise of 2%.
fn a_deficit_of_100_ms_holds_nothing(budget: &mut Budget, now: &mut Instant) {
    let allowance = budget.allowance(*now);
    one_removal(budget, now, Kind::Volume, ms(10.0 + allowance * 1000.0));
    assert_eq!(budget.gate(Kind::Container, *now), Verdict::Start);
    one_removal(budget, now, Kind::Container, ms(110.0));
    let deficit = -budget.allowance(*now);
    assert!((0.05..tolerance(0.02)).contains(&deficit), "{deficit}");
    assert_eq!(budget.gate(Kind::Container, *now), Verdict::Start);
}

#[test]
fn the_quiet_windows_bursts_widen_the_noise_the_baseline_missed() {
    let mut now = Instant::now();
    // The baseline was measured on windows that showed no noise: 4%.
    let mut budget = Budget::new(LIMITS, 0.04, now).with_windows(&[0.04; 12]);
    // Then removals pause, and past SETTLE the workloads' windows go 2%
    // and 6% by turns, 4% on average: a spread of 2%. Under RECENT of them
    // the budget goes by what it measured.
    one_removal(&mut budget, &mut now, Kind::Container, ms(10.0));
    quiet(&mut budget, &mut now, settling_windows(), ms(10.0));
    for _ in 0..(RECENT - 2) / 2 {
        quiet(&mut budget, &mut now, 1, ms(5.0));
        quiet(&mut budget, &mut now, 1, ms(15.0));
    }
    assert_close(budget.tolerance(), 0.0);
    quiet(&mut budget, &mut now, 1, ms(5.0));
    quiet(&mut budget, &mut now, 1, ms(15.0));
    assert_close(budget.tolerance(), tolerance(0.02));
    // Within that noise (110 ms), a deficit of 100 ms holds nothing.
    a_deficit_of_100_ms_holds_nothing(&mut budget, &mut now);
    // Windows with removals in flight widen nothing: their stall is the
    // removals' to pay for.
    let mut steady = Budget::new(LIMITS, 0.04, now).with_windows(&[0.04; 12]);
    for i in 0..2 * RECENT {
        let ticket = steady.start(Kind::Container, Weight::default(), now);
        steady.finish(ticket);
        now += WINDOW;
        steady.observe(now, ms(if i % 2 == 0 { 5.0 } else { 15.0 }));
    }
    assert_close(steady.tolerance(), 0.0);
}
