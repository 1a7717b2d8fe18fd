//! `safety.concurrency: auto`: as many removals in flight as the engine
//! keeps up with.
//!
//! The engine's removals are the run's time (BENCHMARKS.md: 2,000
//! container removals are most of a prune), and how many it serves at
//! once with profit depends on the node: its cores, its disk, what else it
//! serves. So the concurrency climbs while it pays: each round (at least
//! two removals per slot, and [`MIN_ROUND`]) measures removals per second;
//! after a round at a raised concurrency that was not at least
//! [`GAIN`] times faster than the round before the raise, the concurrency
//! goes back down to where it was and stays. Settled, two rounds in a row
//! under [`FALL`] of the settled rate halve it (the engine no longer
//! keeps up: another client, a slower disk), and the climb starts again
//! from there. Each kind starts a new climb from where the last ended: a
//! volume's removal costs the engine other work than a container's.

use std::time::Duration;

use tokio::time::Instant;

/// Where a climb starts: `safety.concurrency`'s old default.
pub const START: usize = 4;

/// The most removals in flight `auto` climbs to.
pub const CEILING: usize = 32;

/// A raise must make the removals this much faster to be kept.
pub const GAIN: f64 = 1.15;

/// Settled, a round slower than this share of the settled rate halves the
/// concurrency.
pub const FALL: f64 = 0.6;

/// The shortest round: shorter ones measure the engine's jitter.
pub const MIN_ROUND: Duration = Duration::from_millis(250);

/// Removals per slot in a round.
const PER_SLOT: usize = 3;

/// Settled, this many slow rounds in a row halve the concurrency: one is
/// as often a run of dearer objects (a container with a volume, an image
/// with more layers) as an engine that slowed.
const SLOW_ROUNDS: u32 = 2;

/// Fewest removals in a round.
const MIN_REMOVALS: usize = 8;

/// The climb (see the module).
#[derive(Debug, Clone)]
pub struct Climb {
    limit: usize,
    ceiling: usize,
    round_began: Instant,
    done: usize,
    /// The concurrency before the last raise and its rate; after a raise
    /// that did not pay, the settled concurrency and its rate.
    before: Option<(usize, f64)>,
    settled: bool,
    /// Slow rounds in a row, settled.
    slow: u32,
}

impl Climb {
    /// A climb from `start` to at most `ceiling`, its first round now.
    #[must_use]
    pub fn new(start: usize, ceiling: usize, now: Instant) -> Self {
        let ceiling = ceiling.max(1);
        Self {
            limit: start.clamp(1, ceiling),
            ceiling,
            round_began: now,
            done: 0,
            before: None,
            settled: false,
            slow: 0,
        }
    }

    /// Removals in flight now.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A new kind: its removals cost the engine other work, so the rates
    /// measured so far say nothing of it. Climbs again from here.
    pub fn restart(&mut self, now: Instant) {
        self.before = None;
        self.settled = false;
        self.slow = 0;
        self.new_round(now);
    }

    fn new_round(&mut self, now: Instant) {
        self.round_began = now;
        self.done = 0;
    }

    /// A removal answered at `now`.
    pub fn completed(&mut self, now: Instant) {
        self.done += 1;
        let elapsed = now.saturating_duration_since(self.round_began);
        if self.done < (PER_SLOT * self.limit).max(MIN_REMOVALS) || elapsed < MIN_ROUND {
            return;
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "a round's removals, far under 2^52"
        )]
        let rate = self.done as f64 / elapsed.as_secs_f64();
        self.new_round(now);
        match self.before {
            None => self.raise(rate),
            Some((before, before_rate)) if !self.settled => {
                if rate >= before_rate * GAIN {
                    self.raise(rate);
                } else {
                    tracing::debug!(
                        concurrency = before,
                        rate,
                        before_rate,
                        "concurrency auto: the raise did not pay, back down"
                    );
                    self.limit = before;
                    self.settled = true;
                }
            }
            Some((settled, settled_rate)) => {
                self.slow = if rate < settled_rate * FALL {
                    self.slow + 1
                } else {
                    0
                };
                if self.slow >= SLOW_ROUNDS && settled > 1 {
                    self.slow = 0;
                    self.limit = (settled / 2).max(1);
                    tracing::debug!(
                        concurrency = self.limit,
                        rate,
                        settled_rate,
                        "concurrency auto: the engine slowed, halving"
                    );
                    self.before = None;
                    self.settled = false;
                }
            }
        }
    }

    fn raise(&mut self, rate: f64) {
        if self.limit >= self.ceiling {
            self.before = Some((self.limit, rate));
            self.settled = true;
            return;
        }
        self.before = Some((self.limit, rate));
        self.limit = (self.limit * 2).min(self.ceiling);
        tracing::debug!(concurrency = self.limit, rate, "concurrency auto: raising");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `climb` one round at its limit, the engine serving `rate(limit)`
    /// removals a second; returns the limit after it.
    fn round(climb: &mut Climb, now: &mut Instant, rate: impl Fn(usize) -> f64) -> usize {
        let rate = rate(climb.limit());
        // Enough removals to fill the round, and no more than one over.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a positive count of a few thousand"
        )]
        let long_enough = (MIN_ROUND.as_secs_f64() * rate).ceil() as usize;
        let n = (PER_SLOT * climb.limit())
            .max(MIN_REMOVALS)
            .max(long_enough);
        let per = Duration::from_secs_f64(1.0 / rate);
        for _ in 0..n {
            *now += per;
            climb.completed(*now);
        }
        climb.limit()
    }

    #[test]
    fn it_climbs_while_the_engine_keeps_up_and_stops_where_it_does_not() {
        let mut now = Instant::now();
        let mut climb = Climb::new(START, CEILING, now);
        // Scales to 16 in flight, flat above.
        let rate = |l: usize| 100.0 * f64::from(u32::try_from(l.min(16)).unwrap());
        assert_eq!(round(&mut climb, &mut now, rate), 8);
        assert_eq!(round(&mut climb, &mut now, rate), 16);
        assert_eq!(round(&mut climb, &mut now, rate), 32);
        // 32 was no faster than 16: back to 16, and it stays.
        assert_eq!(round(&mut climb, &mut now, rate), 16);
        assert_eq!(round(&mut climb, &mut now, rate), 16);
        assert_eq!(round(&mut climb, &mut now, rate), 16);
    }

    #[test]
    fn an_engine_that_does_not_scale_keeps_the_start() {
        let mut now = Instant::now();
        let mut climb = Climb::new(START, CEILING, now);
        assert_eq!(round(&mut climb, &mut now, |_| 200.0), 8);
        assert_eq!(round(&mut climb, &mut now, |_| 200.0), START);
        assert_eq!(round(&mut climb, &mut now, |_| 200.0), START);
    }

    #[test]
    fn an_engine_that_slows_halves_it_and_the_climb_starts_again() {
        let mut now = Instant::now();
        let mut climb = Climb::new(8, CEILING, now);
        assert_eq!(round(&mut climb, &mut now, |_| 400.0), 16);
        assert_eq!(round(&mut climb, &mut now, |_| 400.0), 8);
        // Another client takes the engine: a third of the rate. One slow
        // round may be dearer objects; two in a row halve it.
        assert_eq!(round(&mut climb, &mut now, |_| 130.0), 8);
        assert_eq!(round(&mut climb, &mut now, |_| 130.0), 4);
        assert_eq!(round(&mut climb, &mut now, |_| 130.0), 8);
    }

    #[test]
    fn it_never_passes_the_ceiling_nor_goes_under_one() {
        let mut now = Instant::now();
        let mut climb = Climb::new(2, 4, now);
        let scaling = |l: usize| 100.0 * f64::from(u32::try_from(l).unwrap());
        assert_eq!(round(&mut climb, &mut now, scaling), 4);
        assert_eq!(round(&mut climb, &mut now, scaling), 4);
        let mut one = Climb::new(1, 1, now);
        assert_eq!(round(&mut one, &mut now, |_| 1.0), 1);
        assert_eq!(round(&mut one, &mut now, |_| 0.01), 1);
    }

    #[test]
    fn a_round_is_never_shorter_than_min_round() {
        let now = Instant::now();
        let mut climb = Climb::new(START, CEILING, now);
        for i in 1..=100 {
            climb.completed(now + Duration::from_millis(i));
        }
        assert_eq!(climb.limit(), START, "100 removals in 100 ms: no round yet");
        climb.completed(now + MIN_ROUND);
        assert_eq!(climb.limit(), 8);
    }
}
