//! A removal in flight, from the budget's side.

use tokio::time::Instant;

use crate::inventory::Kind;

/// One removal started, to say when it has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(pub(super) u64);

/// A removal started and not yet accounted for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Flight {
    pub(super) ticket: Ticket,
    pub(super) kind: Kind,
    /// What it was charged when it started, seconds of stall.
    pub(super) charged: f64,
    /// Its share of the stall above baseline of the windows it was in
    /// flight during, seconds.
    pub(super) stall: f64,
    /// It has finished; its last window is observed next.
    pub(super) finished: bool,
    /// When its last window ended: its [`super::TAIL`] runs from then.
    pub(super) tail_from: Option<Instant>,
}

impl Flight {
    /// What of its charge its measured stall has not yet replaced.
    pub(super) fn reserved(&self) -> f64 {
        (self.charged - self.stall.max(0.0)).max(0.0)
    }
}
