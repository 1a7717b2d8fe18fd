//! Batches, where the engine frees what removals unreferenced when they
//! settle together (containerd): each begins once the allowance covers it
//! whole, then goes whole.

use super::*;

/// At most 8 in flight, removals in batches of `batch`, containers learned to
/// cost 2 ms: `now` moves past the one removal that taught it.
fn learned_in_batches(now: &mut Instant, batch: usize) -> Budget {
    let limits = Limits {
        max: 8,
        batch,
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.0, *now);
    one_removal(&mut budget, now, Kind::Container, ms(2.0));
    assert_eq!(budget.cost(Kind::Container), Some(ms(2.0)));
    budget
}

#[test]
fn a_batch_begins_once_the_allowance_covers_it_whole_then_goes_whole() {
    let t0 = Instant::now();
    let (mut now, mut same) = (t0, t0);
    let mut budget = learned_in_batches(&mut now, 4);
    let mut one_by_one = learned_in_batches(&mut same, 1);
    assert_eq!(now, same);
    // The allowance holds one removal's cost and more, not four's: one at
    // a time goes now; the batch waits until time pays for the other
    // three (6 ms beyond what one needs).
    let allowance = budget.allowance(now);
    assert!(allowance > 0.002 && allowance < 0.006, "{allowance}");
    assert_eq!(one_by_one.gate(Kind::Container, now), Verdict::Start);
    let wait = Duration::from_secs_f64((0.006 - allowance) / LIMITS.target);
    assert_pays_back(budget.gate(Kind::Container, now), wait);
    assert!(!budget.in_batch());
    now += wait + Duration::from_millis(1);
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    assert!(budget.in_batch());
    assert_eq!(budget.concurrency(), 4);
    // All four go, whatever each one's charge leaves; a fifth does not.
    for n in 0..4 {
        assert_eq!(budget.gate(Kind::Container, now), Verdict::Start, "{n}");
        budget.start(Kind::Container, Weight::default(), now);
    }
    assert!(
        matches!(budget.gate(Kind::Container, now), Verdict::PayBack(_)),
        "a fifth"
    );
    // What the four are charged leaves no more than one's cost owed.
    assert!(budget.allowance(now) > -0.002, "{}", budget.allowance(now));
}

#[test]
fn a_batch_is_never_more_than_the_allowance_holds() {
    let mut now = Instant::now();
    // An image learned at 100 ms, where the allowance holds 150 ms at
    // most: two go together, never four.
    let limits = Limits {
        max: 8,
        batch: 4,
        ..LIMITS
    };
    let mut budget = Budget::new(limits, 0.0, now);
    one_removal(&mut budget, &mut now, Kind::Image, ms(100.0));
    // Time pays the allowance up to its cap, short of a rest.
    now += Duration::from_secs(55);
    assert_close(budget.allowance(now), 0.150);
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Start);
    assert_eq!(budget.concurrency(), 2);
}

#[test]
fn a_kind_not_yet_learned_goes_alone_and_a_batch_stays_with_its_kind() {
    let mut now = Instant::now();
    let mut budget = learned_in_batches(&mut now, 4);
    now += Duration::from_secs(30);
    // A batch of containers begins, and none of them starts (each went
    // otherwise): images, not yet learned, still go one at a time.
    assert_eq!(budget.gate(Kind::Container, now), Verdict::Start);
    assert!(budget.in_batch());
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Start);
    assert!(!budget.in_batch());
    budget.start(Kind::Image, Weight::default(), now);
    assert_eq!(budget.gate(Kind::Image, now), Verdict::Full);
}

#[test]
fn a_batch_goes_whole_even_one_at_a_time_and_no_further() {
    let mut now = Instant::now();
    let mut budget = learned_in_batches(&mut now, 4);
    // Just enough for a batch of four, whose removals go one after
    // another (as images do by disk pressure, or when some of a batch
    // were gone): each finishes before the next starts, and the next
    // still goes at once, the allowance having covered all four.
    let allowance = budget.allowance(now);
    now += Duration::from_secs_f64((0.0061 - allowance) / LIMITS.target);
    for n in 0..4 {
        assert_eq!(budget.gate(Kind::Container, now), Verdict::Start, "{n}");
        let ticket = budget.start(Kind::Container, Weight::default(), now);
        budget.finish(ticket);
        now += WINDOW;
        budget.observe(now, ms(2.0));
    }
    // All four started: the batch is over, and the next waits for its
    // own allowance.
    assert!(!budget.in_batch());
    assert!(matches!(
        budget.gate(Kind::Container, now),
        Verdict::PayBack(_)
    ));
}
