//! The workloads' own stall before the removals: what the stall budget
//! (see [`super::budget`]) measures the removals' added stall above.
//!
//! Before the first removal, and whenever removals pause, the pacer reads
//! PSI `some total` every [`INTERVAL`] for about [`SPAN`]. Each pair of
//! successive readings is a window, with the share of it in which some
//! workload task waited on I/O; the baseline is the MEDIAN of those
//! shares, not their mean: a workload's burst (a compaction, a log
//! rotation) in one window of a dozen would raise a mean for the whole
//! run, and the removals would be let add their stall on top of a burst
//! that has already ended. The median ignores fewer than half the windows
//! being odd, either way, and is the share the workloads stall at most of
//! the time.

use std::time::{Duration, Instant};

/// How often the baseline reads the stall: short windows, so that a burst
/// fills few of them.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// How long a baseline is measured for: a dozen windows, few enough seconds
/// that a run does not wait long to begin.
pub const SPAN: Duration = Duration::from_secs(3);

/// Fewer windows than this give no baseline: the median of two or three
/// is one burst away from the burst.
pub const MIN_WINDOWS: usize = 5;

/// Windows of the workloads' stall, whose median share is the baseline.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    /// The last reading: when, and `some total` then.
    last: Option<(Instant, Duration)>,
    /// Each window's stalled share, 0 to 1.
    shares: Vec<f64>,
}

impl Baseline {
    /// No reading yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `some total` was `total` at `at`: a window since the last reading
    /// ends. A reading under [`super::psi::MIN_WINDOW`] after the last is
    /// dropped (its window would be one task's wait); a total that went
    /// back (a cgroup made anew) begins again from it.
    pub fn sample(&mut self, at: Instant, total: Duration) {
        if let Some((before_at, before)) = self.last {
            let window = at.saturating_duration_since(before_at);
            if window < super::psi::MIN_WINDOW {
                return;
            }
            if let Some(stalled) = total.checked_sub(before) {
                self.shares
                    .push((stalled.as_secs_f64() / window.as_secs_f64()).min(1.0));
            }
        }
        self.last = Some((at, total));
    }

    /// How many windows it has.
    #[must_use]
    pub fn windows(&self) -> usize {
        self.shares.len()
    }

    /// The median window's stalled share, 0 to 1; `None` under
    /// [`MIN_WINDOWS`] windows.
    #[must_use]
    pub fn share(&self) -> Option<f64> {
        if self.shares.len() < MIN_WINDOWS {
            return None;
        }
        median(&self.shares)
    }
}

/// Measures a baseline as a run does before its first removal: `some
/// total` through `read` (`None`: it could not be read) every [`INTERVAL`]
/// for [`SPAN`]. The windows, and the last reading (when, and the total
/// then); `None` when `stop` came first.
pub async fn measure(
    mut read: impl FnMut() -> Option<Duration>,
    stop: impl std::future::Future<Output = ()>,
) -> Option<(Baseline, Option<(tokio::time::Instant, Duration)>)> {
    let mut baseline = Baseline::new();
    let began = tokio::time::Instant::now();
    let mut last = None;
    tokio::pin!(stop);
    loop {
        let now = tokio::time::Instant::now();
        if let Some(total) = read() {
            baseline.sample(now.into_std(), total);
            last = Some((now, total));
        }
        if now.duration_since(began) >= SPAN {
            return Some((baseline, last));
        }
        tokio::select! {
            () = tokio::time::sleep(INTERVAL) => {}
            () = &mut stop => return None,
        }
    }
}

/// The median of `shares`; `None` when there is none.
#[must_use]
pub fn median(shares: &[f64]) -> Option<f64> {
    let mut shares = shares.to_vec();
    shares.sort_by(f64::total_cmp);
    let middle = shares.len() / 2;
    match shares.len() {
        0 => None,
        n if n.is_multiple_of(2) => Some(f64::midpoint(shares[middle - 1], shares[middle])),
        _ => Some(shares[middle]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A baseline read every [`INTERVAL`] from `start`, each window stalled
    /// for the given milliseconds.
    fn windows(start: Instant, stalled_ms: &[u64]) -> Baseline {
        let mut baseline = Baseline::new();
        let mut total = Duration::from_secs(1_000);
        let mut at = start;
        baseline.sample(at, total);
        for ms in stalled_ms {
            at += INTERVAL;
            total += Duration::from_millis(*ms);
            baseline.sample(at, total);
        }
        baseline
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_constant_stall_is_its_share() {
        // 5 ms of every 250: 2%.
        let b = windows(Instant::now(), &[5; 12]);
        assert_eq!(b.windows(), 12);
        assert!(close(b.share().unwrap(), 0.02), "{:?}", b.share());
    }

    #[test]
    fn one_burst_window_is_ignored() {
        // A 200 ms burst in one window of twelve: the mean would be 8.5%.
        let mut stalled = [5; 12];
        stalled[4] = 200;
        let b = windows(Instant::now(), &stalled);
        assert!(close(b.share().unwrap(), 0.02), "{:?}", b.share());
        // An even count: the middle two's mean.
        let b = windows(Instant::now(), &[0, 5, 5, 10, 10, 250]);
        assert!(close(b.share().unwrap(), 0.03), "{:?}", b.share());
    }

    #[test]
    fn too_few_windows_give_no_baseline() {
        let b = windows(Instant::now(), &[5; MIN_WINDOWS - 1]);
        assert_eq!(b.share(), None);
        assert_eq!(Baseline::new().share(), None);
        let b = windows(Instant::now(), &[5; MIN_WINDOWS]);
        assert!(b.share().is_some());
        // A span read at the interval is enough, with room for a few
        // readings dropped.
        let per_span = SPAN.as_millis() / INTERVAL.as_millis();
        assert!(per_span >= 2 * MIN_WINDOWS as u128, "{per_span}");
    }

    #[test]
    fn readings_too_close_or_going_back_make_no_window() {
        let start = Instant::now();
        let mut b = windows(start, &[5; MIN_WINDOWS - 1]);
        let mut at = start + INTERVAL * u32::try_from(MIN_WINDOWS - 1).unwrap();
        let total = Duration::from_secs(1_000) + Duration::from_millis(20);
        // 10 ms after the last: dropped, and the next window spans from
        // the last kept reading.
        b.sample(
            at + Duration::from_millis(10),
            total + Duration::from_millis(10),
        );
        assert_eq!(b.windows(), MIN_WINDOWS - 1);
        // A total that went back: no window, but the next one counts from it.
        at += INTERVAL;
        b.sample(at, Duration::from_millis(3));
        assert_eq!(b.windows(), MIN_WINDOWS - 1);
        at += INTERVAL;
        b.sample(at, Duration::from_millis(8));
        assert_eq!(b.windows(), MIN_WINDOWS);
        assert!(close(b.share().unwrap(), 0.02), "{:?}", b.share());
    }
}
