//! What the budget says of a removal that would start, and how it held a
//! run.

use std::time::Duration;

/// Whether a removal may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// One may start now (then ask again before the next).
    Start,
    /// As many are in flight as the concurrency allows (for a kind not
    /// yet learned, one): one must finish.
    Full,
    /// The budget is in deficit: it is paid back after this long, if
    /// nothing more stalls (observe in the meantime; a removal in flight
    /// that costs less than charged pays it back sooner).
    PayBack(Duration),
    /// The last window's share was above the ceiling: wait for a window
    /// under it.
    Ceiling,
    /// The baseline was last measured [`REST`](super::limits::REST) ago
    /// or more: removals rest until a pause has measured it again.
    Rest,
}

/// How a run was held, for its report.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Accounts {
    /// Time between a verdict that held a removal back (a deficit, the
    /// ceiling, a rest) and the next that did not.
    pub waited: Duration,
    /// The stall above baseline observed, in all (windows under it taking
    /// away): what the removals added, and what the workloads stalled on
    /// beyond their baseline meanwhile; none while removals paused.
    pub added_stall: Duration,
    /// How many rests measured the baseline again.
    pub remeasured: u64,
    /// Windows observed.
    pub windows: u64,
    /// The most removals in flight the concurrency rose to.
    pub highest_concurrency: usize,
    /// The fewest a deficit brought it down to; `None` when none did (it
    /// starts at one, which says nothing).
    pub lowest_concurrency: Option<usize>,
}
