//! What a run shows while it removes: on a terminal, one line on stderr
//! redrawn after each removal; elsewhere (cron mail, the journal, a pipe),
//! a log line at most every [`LOG_EVERY`], the first only after that long,
//! so a short run logs none (docs/contracts.md, "stdout and stderr").
//!
//! The clock is an argument: the throttle and the rate are tested without
//! waiting.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::execute::Outcome;
use crate::output::eprint_lossy;
use crate::plan::Plan;
use crate::report::human_bytes;

/// How often, at most, a run without a terminal logs its progress.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The target of the progress log lines: shown at the default level
/// (`warn`), which `main` lowers to `info` for this target alone.
pub const LOG_TARGET: &str = "safeprune::progress";

/// Where the progress goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// One line on a terminal's stderr, at most this many columns wide.
    Line { width: usize },
    /// A log line now and then.
    Log,
}

/// The progress of one run's removals.
#[derive(Debug)]
pub struct Progress {
    show: Show,
    planned: usize,
    planned_bytes: u64,
    done: usize,
    done_bytes: u64,
    current: String,
    started: Instant,
    throttle: Throttle,
    drawn: bool,
}

impl Progress {
    /// The progress of removing `plan`'s deletions, from `now`.
    #[must_use]
    pub fn new(show: Show, plan: &Plan, now: Instant) -> Self {
        Self {
            show,
            planned: plan.deletion_count(),
            planned_bytes: plan.reclaimable_bytes(),
            done: 0,
            done_bytes: 0,
            current: String::new(),
            started: now,
            throttle: Throttle::new(LOG_EVERY, now),
            drawn: false,
        }
    }

    /// The progress of a run removing `plan`'s deletions from now: a line
    /// on stderr if `line` (a terminal; one that does not say its width,
    /// a serial console or a pty nobody sized, is taken as 80 columns), else
    /// log lines.
    #[must_use]
    pub fn for_run(line: bool, plan: &Plan) -> Self {
        let show = if line {
            Show::Line {
                width: crate::output::stderr_columns().unwrap_or(80),
            }
        } else {
            Show::Log
        };
        Self::new(show, plan, Instant::now())
    }

    /// Counts `outcome`, the `done`th of the run, and shows the progress
    /// if it is time to.
    pub fn show(&mut self, outcome: &Outcome, done: usize) {
        let Some(line) = self.advance(outcome, done, Instant::now()) else {
            return;
        };
        match self.show {
            Show::Line { .. } => eprint_lossy(&format!("{ERASE_LINE}{line}")),
            Show::Log => {
                tracing::info!(target: LOG_TARGET, done, planned = self.planned, "{line}");
            }
        }
    }

    /// Ends the progress once the removals are over: erases the line.
    pub fn end(&self) {
        if let Some(erase) = self.finish() {
            eprint_lossy(erase);
        }
    }

    /// Counts `outcome`, the `done`th of the run, finished at `now`; the
    /// text to show now, if any.
    pub fn advance(&mut self, outcome: &Outcome, done: usize, now: Instant) -> Option<String> {
        self.done = done;
        self.done_bytes += outcome.bytes.unwrap_or(0);
        self.current = format!("{} {}", outcome.kind.as_str(), outcome.name);
        match self.show {
            Show::Line { width } => {
                self.drawn = true;
                Some(fit(&self.line(now), width))
            }
            Show::Log => self.throttle.due(now).then(|| self.line(now)),
        }
    }

    /// What ends the progress once the removals are over: on a terminal,
    /// what erases the line, if one was drawn.
    #[must_use]
    pub fn finish(&self) -> Option<&'static str> {
        (self.show != Show::Log && self.drawn).then_some(ERASE_LINE)
    }

    /// `removing 12/40 objects, 1.2GB of 3.4GB, 35.0MB/s: image nginx:1.25`.
    fn line(&self, now: Instant) -> String {
        let elapsed = now.saturating_duration_since(self.started).as_secs_f64();
        let (done, planned) = (self.done, self.planned);
        let noun = if planned == 1 { "object" } else { "objects" };
        let mut line = format!("removing {done}/{planned} {noun}");
        // A rate over less than a second is noise.
        let rate = (elapsed >= 1.0).then_some(elapsed);
        if self.planned_bytes > 0 {
            let _ = write!(
                line,
                ", {} of {}",
                human_bytes(self.done_bytes),
                human_bytes(self.planned_bytes)
            );
            if let Some(elapsed) = rate {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss,
                    reason = "a rate shown with one decimal place"
                )]
                let per_second = (self.done_bytes as f64 / elapsed) as u64;
                let _ = write!(line, ", {}/s", human_bytes(per_second));
            }
        } else if let Some(elapsed) = rate {
            #[expect(
                clippy::cast_precision_loss,
                reason = "a rate shown with one decimal place"
            )]
            let per_second = done as f64 / elapsed;
            let _ = write!(line, ", {per_second:.1} objects/s");
        }
        if !self.current.is_empty() {
            line.push_str(": ");
            line.push_str(&self.current);
        }
        line
    }
}

/// Back to the line's start, then erase it: what draws each line (the
/// next may be shorter) and what clears the last.
pub const ERASE_LINE: &str = "\r\x1b[K";

/// `line` cut to fit `width` columns with room for the cursor, so that it
/// never wraps (a wrapped line is not redrawn by a carriage return).
#[must_use]
pub fn fit(line: &str, width: usize) -> String {
    let room = width.saturating_sub(1).max(1);
    if line.chars().count() <= room {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(room.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// At most one event every `every`, the first only `every` after the start.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    next: Instant,
}

impl Throttle {
    /// A throttle started at `now`.
    #[must_use]
    pub fn new(every: Duration, now: Instant) -> Self {
        Self {
            every,
            next: now + every,
        }
    }

    /// Whether an event at `now` may show; if so, the next may only
    /// `every` later.
    pub fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + self.every;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execute::RemovalResult;
    use crate::inventory::Kind;
    use crate::plan::{Action, Decision};

    fn decision(kind: Kind, name: &str, bytes: u64) -> Decision {
        let d = Decision::saved(kind, &format!("id-{name}"), name, None, Some(bytes));
        assert_eq!(d.decision, Action::Delete);
        d
    }

    fn plan() -> (Plan, Vec<Outcome>) {
        let decisions = vec![
            decision(Kind::Container, "old-job", 1_000_000),
            decision(Kind::Image, "nginx:1.25", 2_400_000_000),
            decision(Kind::Image, "redis:7", 1_000_000_000),
        ];
        let outcomes = decisions.iter().map(|d| Outcome::of(d, None)).collect();
        (
            Plan {
                decisions,
                ..Plan::default()
            },
            outcomes,
        )
    }

    #[test]
    fn the_line_says_objects_and_bytes_done_of_planned_the_rate_and_the_object() {
        let (plan, outcomes) = plan();
        let start = Instant::now();
        let mut progress = Progress::new(Show::Line { width: 200 }, &plan, start);
        assert_eq!(outcomes[0].result, RemovalResult::Deleted);
        // No rate in the first second.
        assert_eq!(
            progress.advance(&outcomes[0], 1, start + Duration::from_millis(300)),
            Some("removing 1/3 objects, 1.0MB of 3.4GB: container old-job".to_owned())
        );
        assert_eq!(
            progress.advance(&outcomes[1], 2, start + Duration::from_secs(2)),
            Some("removing 2/3 objects, 2.4GB of 3.4GB, 1.2GB/s: image nginx:1.25".to_owned())
        );
        assert_eq!(progress.finish(), Some(ERASE_LINE));
    }

    #[test]
    fn sizes_unknown_give_a_rate_in_objects() {
        let (mut plan, mut outcomes) = plan();
        for d in &mut plan.decisions {
            d.bytes = None;
        }
        outcomes[0].bytes = None;
        let start = Instant::now();
        let mut progress = Progress::new(Show::Line { width: 200 }, &plan, start);
        assert_eq!(
            progress.advance(&outcomes[0], 1, start + Duration::from_secs(4)),
            Some("removing 1/3 objects, 0.2 objects/s: container old-job".to_owned())
        );
    }

    #[test]
    fn the_line_never_wraps() {
        let (plan, outcomes) = plan();
        let start = Instant::now();
        let mut progress = Progress::new(Show::Line { width: 40 }, &plan, start);
        let line = progress.advance(&outcomes[1], 2, start).unwrap();
        assert_eq!(line, "removing 2/3 objects, 2.4GB of 3.4GB: …");
        assert_eq!(line.chars().count(), 39);
        assert_eq!(fit("short", 40), "short");
        assert_eq!(fit("abc", 1), "…");
    }

    #[test]
    fn a_log_line_comes_only_after_ten_seconds_then_at_most_every_ten() {
        let (plan, outcomes) = plan();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut progress = Progress::new(Show::Log, &plan, start);
        // A short run logs nothing.
        assert_eq!(progress.advance(&outcomes[0], 1, at(1)), None);
        assert_eq!(progress.advance(&outcomes[0], 1, at(9)), None);
        let first = progress.advance(&outcomes[1], 2, at(10)).unwrap();
        assert!(first.starts_with("removing 2/3 objects"), "{first}");
        assert_eq!(progress.advance(&outcomes[2], 3, at(19)), None);
        assert!(progress.advance(&outcomes[2], 3, at(20)).is_some());
        // Nothing to erase in a log.
        assert_eq!(progress.finish(), None);
    }

    #[test]
    fn the_throttle_counts_from_the_last_event_shown() {
        let start = Instant::now();
        let mut throttle = Throttle::new(LOG_EVERY, start);
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert!(!throttle.due(at(9_999)));
        assert!(throttle.due(at(12_500)));
        assert!(!throttle.due(at(22_499)));
        assert!(throttle.due(at(22_500)));
    }

    #[test]
    fn nothing_drawn_nothing_erased() {
        let (plan, _) = plan();
        let progress = Progress::new(Show::Line { width: 80 }, &plan, Instant::now());
        assert_eq!(progress.finish(), None);
    }
}
