//! The budget's pauses: where the workloads' own stall is measured again
//! beside the removals.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::pace::baseline::{MIN_WINDOWS, level, spread};

/// How long after the last removal in flight was taken in a pause's
/// windows begin to count as the workloads' own: what a removal leaves
/// behind shows within it. ext4 commits its journal every 5 s (`commit=`,
/// its default): a removal's metadata reaches the disk within that, and a
/// workload's writes wait on the commit. With 1 s, the baseline rose
/// pause after pause with no writer starting (3.6% to 4.4% over one
/// Docker run of the benchmark), as a tail taken for the workloads' own
/// would make it, and what the removals added was then given back.
pub const SETTLE: Duration = Duration::from_secs(5);

/// The most settling windows a pause keeps: windows are at least
/// `psi::MIN_WINDOW` (100 ms) long, so [`SETTLE`] holds at most 50.
const SETTLING: usize = 64;

/// How many of the latest windows a baseline measured again is the level
/// of: as many as the first measuring has (`baseline::SPAN` read every
/// `baseline::INTERVAL`).
pub const RECENT: usize = 12;

/// A window of a pause: what it stalled and what it was charged for it.
#[derive(Debug, Clone, Copy)]
pub struct Quiet {
    /// Seconds stalled.
    pub stalled: f64,
    /// Seconds long.
    pub window: f64,
    /// Seconds charged above the baseline (negative: given back).
    pub charged: f64,
}

impl Quiet {
    /// Charges it again at `baseline`: what it was charged beyond that.
    fn recharge(&mut self, baseline: f64) -> f64 {
        let charged = self.stalled - baseline * self.window;
        let back = self.charged - charged;
        self.charged = charged;
        back
    }
}

/// Removals paused: no removal in flight since `since`.
#[derive(Debug, Clone)]
pub struct Pause {
    since: Instant,
    /// Its windows from [`SETTLE`] after `since`, the latest [`RECENT`].
    windows: VecDeque<Quiet>,
    /// Its windows within [`SETTLE`] after `since`.
    settling: Vec<Quiet>,
    /// It has measured the baseline again.
    measured: bool,
}

/// What a pause's window measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The workloads' level now, 0 to 1.
    pub baseline: f64,
    /// How far their windows move about it (`baseline::spread`).
    pub spread: f64,
    /// What the pause's windows were charged beyond it, seconds: to give
    /// back (negative: to take again).
    pub back: f64,
    /// It is the pause's first measurement.
    pub first: bool,
}

impl Pause {
    /// A pause since `since`.
    pub fn new(since: Instant) -> Self {
        Self {
            since,
            windows: VecDeque::with_capacity(RECENT),
            settling: Vec::new(),
            measured: false,
        }
    }

    /// A window begun at `began` with no removal in flight during it;
    /// once the pause has [`MIN_WINDOWS`] from [`SETTLE`] on, their level
    /// is the baseline, and its windows, the settling ones too, are
    /// charged again at it (the budget's module says why).
    pub fn take(&mut self, began: Instant, quiet: Quiet) -> Option<Measured> {
        if began.saturating_duration_since(self.since) < SETTLE {
            if self.settling.len() < SETTLING {
                self.settling.push(quiet);
            }
            return None;
        }
        if self.windows.len() == RECENT {
            self.windows.pop_front();
        }
        self.windows.push_back(quiet);
        if self.windows.len() < MIN_WINDOWS {
            return None;
        }
        let shares: Vec<f64> = self
            .windows
            .iter()
            .map(|q| (q.stalled / q.window).min(1.0))
            .collect();
        let baseline = level(&shares)?;
        let spread = spread(&shares).unwrap_or(0.0);
        let first = !std::mem::replace(&mut self.measured, true);
        let back = self
            .windows
            .iter_mut()
            .chain(&mut self.settling)
            .map(|quiet| quiet.recharge(baseline))
            .sum();
        Some(Measured {
            baseline,
            spread,
            back,
            first,
        })
    }
}
