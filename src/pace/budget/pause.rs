//! The budget's pauses: where, in a rest, the workloads' own stall is
//! measured again beside the removals, and the pool of earlier rests'
//! windows that the baseline is the level of while the workloads stay as
//! they were.
//!
//! Only a rest measures (see `limits::REST`): it begins on the clock and
//! takes a fixed count of windows, whatever they show. A pause a deficit
//! made ends when its windows have paid the deficit back, that is when
//! they stood under the baseline: pooled, such windows drew the baseline
//! under the workloads' level pause after pause (0.1-0.3 points under
//! the idle blocks' on both engines' busy node, two to three times a
//! target of 0.1%, and each window with removals in flight was charged
//! that: the runs went at 1.1-1.8 objects a second and took 643-680 s).

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

/// [`SETTLE`] where the engine frees what its removals unreferenced when
/// they settle (containerd's garbage collector: see `Limits::batch`): the
/// collection, its metadata database's commit and the file system's own
/// commit after it show for some 10 s after the last removal. From 5 s,
/// containerd's busy node's rests stood 0.3 points over the idle blocks'
/// beside them (six rests of one run at 0.1%), and the removals added
/// 5.7 times the target (+0.572%, 95% CI +0.213 to +0.910); from 12 s,
/// 1.49 times (+0.149%, -0.299 to +0.605), its 750 objects in 516 s.
pub const SETTLE_COLLECTED: Duration = Duration::from_secs(12);

/// The most settling windows a pause keeps: windows are at least
/// `psi::MIN_WINDOW` (100 ms) long, so [`SETTLE_COLLECTED`] holds at most
/// 120, and a deficit's pause before a rest, at most
/// [`REST`](super::limits::REST) and [`SETTLE_COLLECTED`] long, 720: all
/// of them are charged again at what the rest measures, and a writer that
/// started while the removals waited is given back (kept to [`SETTLE`]'s,
/// a drift's minute stood charged to the removals, 2.2 s of stall where
/// they added 0.24).
const SETTLING: usize = 1024;

/// How many quiet windows, of this rest and the earlier ones since the
/// workloads last changed (and the measuring before the first removal),
/// the baseline is the level of: two minutes of them. A rest's own
/// dozen windows (3 s) put its level 0.4-0.7% off beside the benchmark's
/// probe (windows of 1.4-2.4% spread), four to seven times a target of
/// 0.1%, charged to (or left to) the removals until the next pause:
/// containerd's busy fixture counted 2.44 s added where its workloads'
/// PSI, read from outside, showed 0.03 s, and took 664 s. Pooled over
/// 480 windows the level is within about 0.1%.
pub const POOL: usize = 480;

/// How many standard errors a pause's own level must stand from the
/// pool's before the workloads count as changed and its windows replace
/// the pool. More than the budget's [`NOISE`](super::limits::NOISE): the
/// test is made again at each of a pause's windows, and a pause tends to
/// end on a level that stands high by chance, since what its windows
/// were charged above it is then given back and the next removal may
/// start; taken alone, such a level is the baseline until the next shift.
/// A writer starting moves the level by many times that (the benchmark's
/// drift case: 1% to 6.7%, some eight errors of a dozen windows); a
/// smaller change joins the pool pause by pause.
pub const SHIFT: f64 = 4.0;

/// How many of the latest rests' windows, with a rest's own, are tested
/// together against the older ones for a change (see [`Pool`]): the
/// workloads drift by tenths of a point within minutes, which no dozen
/// windows show at [`SHIFT`] errors (0.6 points at the benchmark's quiet
/// Docker node, windows of 0.5% spread), while a pool of
/// [`POOL`] windows that only rests add to spans half an hour. Tested on
/// one rest alone, a lull that lowered the baseline (the 30-s mean,
/// while removals went) stood 0.5 points under the idle blocks' for the
/// next 20 minutes of a Docker quiet run, and no removal went in them.
pub const LATEST: usize = 4;

/// How many sets of windows (the first measure, rests) there must be
/// before how far their levels move apart counts in [`SHIFT`]'s errors
/// (see [`between`]): on fewer, the figure rests on one or two
/// differences, and a rest that stood apart by chance makes it (a writer
/// starting at the third rest, 6% beside the first measure's 2.5% and
/// rests at 2% and 3.5%, stood within four such errors of them).
const BETWEEN: usize = 4;

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
    /// Its stalled share, 0 to 1.
    pub fn share(&self) -> f64 {
        (self.stalled / self.window).min(1.0)
    }

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
    /// How long its windows settle: [`SETTLE`] or [`SETTLE_COLLECTED`].
    settle: Duration,
    /// Its rest's windows: from `settle` after `since` and from when the
    /// rest began.
    windows: Vec<Quiet>,
    /// Its other windows: within `settle` after `since`, or before the
    /// rest began.
    settling: Vec<Quiet>,
    /// It has measured the baseline again.
    measured: bool,
    /// Its level, alone or with the latest sets of the pool's (`Some` of
    /// how many), stood beyond the noise from the older ones': the
    /// workloads changed, and its windows and those sets are the pool.
    shifted: Option<usize>,
}

/// `share` joins `shares`, of which the latest `most` are kept.
pub fn keep_latest(shares: &mut VecDeque<f64>, share: f64, most: usize) {
    if shares.len() == most {
        shares.pop_front();
    }
    shares.push_back(share);
}

/// The quiet windows' shares of earlier rests since the workloads last
/// changed, the latest [`POOL`], a set for each rest (the first, those
/// measured before the first removal): each rest's windows join them when
/// it ends. Only what nothing chose by their level: a rest begins on the
/// clock and takes a fixed count of windows.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    /// Oldest first.
    sets: VecDeque<Vec<f64>>,
    /// How far the sets' levels moved apart ([`between`]) before the
    /// workloads last changed, for as long as fewer than [`BETWEEN`] sets
    /// have been pooled since: how far a rest's level moves is the
    /// workloads' way, which a change of their level seldom changes. Begun
    /// again on one set, a containerd quiet run's pool took two rests
    /// alone within minutes, each within how far the rests had moved
    /// before, the last 0.2-0.4 points under the idle blocks' level for
    /// the rest of the run, and the removals were charged that.
    apart: Option<f64>,
}

impl Pool {
    /// `pause` has ended: its rest's windows join the pool, or, when the
    /// workloads had changed, replace all but the sets that changed with
    /// them.
    pub fn fold(&mut self, pause: &Pause) {
        if let Some(latest) = pause.shifted {
            let older = self.sets.len().saturating_sub(latest);
            self.apart = self.apart_before(older);
            self.sets.drain(..older);
        }
        self.extend(pause.windows.iter().map(Quiet::share));
    }

    /// `shares` join the pool as a set: the windows measured before the
    /// first removal, chosen by nothing they showed, or a rest's. The
    /// oldest go beyond [`POOL`].
    pub fn extend(&mut self, shares: impl IntoIterator<Item = f64>) {
        let set: Vec<f64> = shares.into_iter().collect();
        if !set.is_empty() {
            self.sets.push_back(set);
        }
        let mut over = self
            .sets
            .iter()
            .map(Vec::len)
            .sum::<usize>()
            .saturating_sub(POOL);
        while over > 0 {
            let Some(oldest) = self.sets.front_mut() else {
                break;
            };
            if oldest.len() <= over {
                over -= oldest.len();
                self.sets.pop_front();
            } else {
                oldest.drain(..over);
                over = 0;
            }
        }
    }

    /// How far the pooled sets' levels move apart, as a window's spread
    /// would move them ([`between`]), or how far they moved before the
    /// workloads last changed; `None` before [`BETWEEN`] sets.
    pub fn apart(&self) -> Option<f64> {
        self.apart_before(self.sets.len())
    }

    /// [`Self::apart`] of the sets before the `n`th alone.
    fn apart_before(&self, n: usize) -> Option<f64> {
        between(self.sets.range(..n)).or(self.apart)
    }

    /// The level and spread of a pause's `own` windows' shares pooled
    /// with these, and whether the workloads changed: `Some` of how many
    /// of the latest sets changed with them, when `own`, alone or with up
    /// to [`LATEST`] of the latest sets, stands further from the older
    /// windows than [`SHIFT`] times the largest spread allows for their
    /// counts (a writer started, the workloads drifted); their level is
    /// then the baseline. The largest of the two sets' and `noise`, the
    /// workloads' (`Budget::noise`): the pool may be only the dozen
    /// windows before the first removal, which mostly miss the workloads'
    /// bursts (they spread 0.2-0.33% where the settled quiet windows
    /// spread 1.7%), and on their spread alone a rest whose 3 s happened
    /// to be calm stood four errors off and replaced the pool: Docker's
    /// quiet node went on at 1.45% beside idle blocks at 3.8-4.6%, and its
    /// run waited 358 s of 556. And, from [`BETWEEN`] older sets on, how
    /// far their levels move apart ([`between`]; before that, how far they
    /// moved before the workloads last changed): a rest's dozen windows
    /// are not drawn afresh one by one.
    fn with(&self, own: &[f64], noise: f64) -> Option<(f64, f64, Option<usize>)> {
        let (level_own, spread_own) = (level(own)?, spread(own).unwrap_or(0.0));
        let pooled: Vec<f64> = self.sets.iter().flatten().copied().collect();
        if pooled.len() < MIN_WINDOWS {
            return Some((level_own, spread_own, None));
        }
        let mut latest = own.to_vec();
        for changed in 0..=LATEST.min(self.sets.len()) {
            if changed > 0 {
                latest.extend(&self.sets[self.sets.len() - changed]);
            }
            let older = &pooled[..pooled.len() - (latest.len() - own.len())];
            if older.len() < MIN_WINDOWS {
                break;
            }
            let rests_apart = self.apart_before(self.sets.len() - changed);
            if stand_apart(&latest, older, noise.max(rests_apart.unwrap_or(0.0)))? {
                return Some((
                    level(&latest)?,
                    spread(&latest).unwrap_or(0.0),
                    Some(changed),
                ));
            }
        }
        let keep = POOL.saturating_sub(own.len());
        let union: Vec<f64> = pooled[pooled.len().saturating_sub(keep)..]
            .iter()
            .chain(own)
            .copied()
            .collect();
        Some((level(&union)?, spread(&union).unwrap_or(0.0), None))
    }
}

/// How far whole sets' levels move about the level of all their windows,
/// as a window's spread would move a set's of its count (the square root
/// of their mean square between), once there are [`BETWEEN`] sets of
/// [`MIN_WINDOWS`] windows or more. The workloads' windows are not each
/// drawn afresh: beside the benchmark's busy writer successive windows
/// correlate 0.68, and a dozen windows' level moved by 0.41% where their
/// spread allows 0.16% (`benches/pacing/workload_noise.sh`; quiet, 0.41%
/// against 0.36%); the workloads also drift within minutes. So a rest's
/// level moves further than the windows' spread says, and on that alone
/// a rest that stood high by chance was taken alone: at containerd's
/// busy node a rest at 8.40% beside idle blocks at 7.2-7.6%, the baseline
/// held over the workloads' level until rests pooled it away.
fn between<'a>(sets: impl Iterator<Item = &'a Vec<f64>>) -> Option<f64> {
    let levels: Vec<(f64, f64)> = sets
        .filter(|set| set.len() >= MIN_WINDOWS)
        .filter_map(|set| {
            #[expect(clippy::cast_precision_loss, reason = "at most POOL windows")]
            let count = set.len() as f64;
            Some((count, level(set)?))
        })
        .collect();
    if levels.len() < BETWEEN {
        return None;
    }
    let windows: f64 = levels.iter().map(|(count, _)| count).sum();
    let all = levels.iter().map(|(count, set)| count * set).sum::<f64>() / windows;
    let squares: f64 = levels
        .iter()
        .map(|(count, set)| count * (set - all).powi(2))
        .sum();
    #[expect(clippy::cast_precision_loss, reason = "at most POOL sets")]
    let freedom = (levels.len() - 1) as f64;
    Some((squares / freedom).sqrt())
}

/// Whether the levels of two sets of windows' shares stand further apart
/// than [`SHIFT`] times the largest of their spreads and `noise` allows
/// for their counts.
fn stand_apart(a: &[f64], b: &[f64], noise: f64) -> Option<bool> {
    let spread_most = spread(a)
        .unwrap_or(0.0)
        .max(spread(b).unwrap_or(0.0))
        .max(noise);
    #[expect(clippy::cast_precision_loss, reason = "at most POOL windows")]
    let error = spread_most * (1.0 / a.len() as f64 + 1.0 / b.len() as f64).sqrt();
    Some((level(a)? - level(b)?).abs() > SHIFT * error)
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
    /// It is the rest's first measurement.
    pub first: bool,
    /// How many of the rest's windows it is the level of (the pool's
    /// aside).
    pub windows: usize,
    /// The level of those windows alone, 0 to 1 (traced: a rest against
    /// the pool it joins).
    pub own: f64,
    /// The workloads changed: the level of the pause's own windows and of
    /// so many of the pool's latest sets (see [`Pool`]), not the pool's.
    pub shifted: Option<usize>,
}

impl Pause {
    /// A pause since `since`, its windows settling for `settle`.
    pub fn new(since: Instant, settle: Duration) -> Self {
        Self {
            since,
            settle,
            windows: Vec::new(),
            settling: Vec::new(),
            measured: false,
            shifted: None,
        }
    }

    /// Whether a window begun at `began` is past its settle: what a
    /// removal left behind has shown.
    pub fn settled(&self, began: Instant) -> bool {
        began.saturating_duration_since(self.since) >= self.settle
    }

    /// The same pause, its rest over: its windows measure nothing until
    /// another rest begins in it.
    #[must_use]
    pub fn rested(&self) -> Self {
        Self::new(self.since, self.settle)
    }

    /// A window begun at `began` with no removal in flight during it, a
    /// rest under way since `rest` (`None`: none); once the rest has
    /// [`MIN_WINDOWS`] from [`SETTLE`] on, their level pooled with
    /// `pool`'s (see [`Pool`]; `noise`, the workloads' spread, for
    /// whether they changed) is the baseline, and the pause's windows, the
    /// settling ones too, are charged again at it (the budget's module
    /// says why).
    pub fn take(
        &mut self,
        began: Instant,
        quiet: Quiet,
        pool: &Pool,
        noise: f64,
        rest: Option<Instant>,
    ) -> Option<Measured> {
        let resting = rest.is_some_and(|from| began >= from);
        if !resting || !self.settled(began) {
            if self.settling.len() < SETTLING {
                self.settling.push(quiet);
            }
            return None;
        }
        self.windows.push(quiet);
        if self.windows.len() < MIN_WINDOWS {
            return None;
        }
        let shares: Vec<f64> = self.windows.iter().map(Quiet::share).collect();
        let (baseline, spread, shifted) = pool.with(&shares, noise)?;
        self.shifted = shifted;
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
            windows: self.windows.len(),
            own: level(&shares).unwrap_or(0.0),
            shifted,
        })
    }
}
