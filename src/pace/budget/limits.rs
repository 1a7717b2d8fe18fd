//! The stall budget's constants and what the policy asks of it: how much
//! its accounts hold, how fast it learns, and the least a removal costs.

use std::time::Duration;

use super::pause::{SETTLE, SETTLE_COLLECTED};

/// How much of the target the allowance may hold, as the time it takes to
/// grow it: as much as a deficit may hold ([`DEBT`]), so that the
/// windows' noise about the baseline, as often under it as over, gives
/// back what it took. A long quiet spell pays for at most half a minute's
/// target at once (30 ms at 0.1%), spread by the concurrency's climb.
pub const BANK: Duration = Duration::from_secs(30);

/// How far a removal's measured stall moves its kind's cost: a few
/// removals' weight, so that the cost follows a kind whose objects get
/// dearer (images with more layers) and one odd removal does not swing it.
pub const LEARNING: f64 = 0.3;

/// How long after a removal finished its stall is still watched, shared
/// with whatever else is in flight, before its kind's cost is learned from
/// it: an image's stall comes mostly after its removal returned, within a
/// second (BENCHMARKS.md: at 0.1%, 151 images in 91 s of paced time went
/// in bursts 10 ms apart, each learned from its own window).
pub const TAIL: Duration = Duration::from_secs(1);

/// The least a removal costs, seconds of stall, whatever its windows
/// showed, paid from an account the windows never credit (see the
/// budget's module): on containerd the workloads' tail grew with the removals' rate
/// where their PSI showed nothing added (at 0.1%, 5.27% of the probe's
/// operations past its idle p99 at 9.76 objects a second with 0.0 s
/// added; BENCHMARKS.md), each removal's stall too short for a window to
/// resolve beside the workloads' own, and on Docker a run whose baseline
/// sat high went at 39 a second with 5.01%. At a target of 0.1% it holds
/// the removals to about five a second; at 1%, fifty. At 0.3 ms Docker's
/// busy fixture waited 317 s of 681 s on least costs alone and was not
/// removed in 10 minutes; at 0.2 ms it took 384 and 642 s in two runs
/// (the second held 289 s by deficits), the probe 0.89% and 1.44% past its
/// idle p99 (1.04% on the quiet node). containerd keeps its 0.45 ms
/// (`Engine::removal_weight`).
pub const LEAST_COST: f64 = 0.000_2;

/// What a removal's least cost grows by with the bytes it frees, seconds of
/// stall per MiB: its least cost is the larger of [`LEAST_COST`] and this
/// times its size. A file system mounted with `discard` trims the blocks
/// freed at its journal's next commit, which every workload's `fsync`
/// waits for, in no cgroup's I/O stall: on containerd's quiet node images
/// of 14.6 MiB at 2.5 a second put 3.4-4.1% of the probe's operations
/// past its idle p99, where containers of 2 MiB at the same rate put 1%
/// (BENCHMARKS.md). At 0.07 ms a MiB such an image costs 1 ms, one a
/// second at 0.1%; objects under 4.3 MiB keep [`LEAST_COST`].
pub const LEAST_COST_PER_MIB: f64 = 0.000_07;

/// What a removal weighs beyond what its windows show: what its least cost
/// is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weight {
    /// The bytes it frees: its planned size, 0 when not known.
    pub bytes: u64,
    /// How much more than Docker's the engine's removals cost the
    /// workloads beside what their stall shows (`Engine::removal_weight`):
    /// [`LEAST_COST`] is multiplied by it.
    pub engine: f64,
}

impl Default for Weight {
    /// Nothing known of its size, on an engine that weighs as Docker.
    fn default() -> Self {
        Self {
            bytes: 0,
            engine: 1.0,
        }
    }
}

/// How far ahead of its least costs a run may get, as the time the target
/// takes to pay for it: a burst of a few removals after a pause, never a
/// run's worth. The allowance's own noise, paid back over [`BANK`], went
/// into bursts of hundreds (on containerd's busy node, 352 removals in the
/// first 40 s).
pub const PACE_BANK: Duration = Duration::from_secs(2);

/// How far behind the pace of its least costs a run may fall and still
/// catch up, as the time the target takes to pay for it: what the least
/// costs' account earns beyond [`PACE_BANK`] (times the batch) while
/// removals do not spend it (held by a deficit, a rest or the ceiling, or
/// none ready to go) is kept up to this, and credits the account again at
/// the target's rate on top of time's, so that the removals catch up at
/// twice the pace their least costs allow, never faster. Without it a deficit's wait was time lost to the least costs
/// too: Docker's busy fixture waited 289 s on deficits and 284 s on least
/// costs, one after the other, and took 642 s (BENCHMARKS.md). Kept to a
/// minute, the lag stood at its cap on a third of that fixture's waits,
/// which held it 407 and 428 s by deficits and still 156 and 137 s on
/// least costs (616 and 618 s): five minutes of it, a busy node's
/// deficits are caught up within the run, and a run held longer than that
/// (the ceiling, a rest of the workloads' own) still goes no faster than
/// twice its least costs' pace for more than five minutes.
pub const LAG: Duration = Duration::from_secs(300);

/// How many removals go together on an engine that frees what they
/// unreferenced when they settle (containerd, see
/// `Engine::frees_when_settled`): containerd's garbage collector runs after
/// every delete as soon as its pause threshold allows, so removals a second
/// apart had one collection each (20 deletes 1 s apart: 20; back to back: 5),
/// and what its scan and commit cost was paid per object. In batches of 8,
/// each let go once the allowance covers it whole and settled once, its busy
/// node's fixture went at 1.28 and 0.77 objects a second (two runs) where
/// one at a time went at 0.69-0.78, and added less stall (-0.03 and +0.06
/// points, against +0.04 to +0.24; BENCHMARKS.md, pacing).
pub const BATCH: usize = 8;

/// The most a deficit holds, as the time it takes to pay back (see the
/// budget's module): half a minute, long enough to pay back a burst and short
/// enough that a run held by one never looks hung.
pub const DEBT: Duration = Duration::from_secs(30);

/// How many standard deviations of the workloads' own noise a deficit must
/// pass before it holds removals: within [`NOISE`] times the spread of
/// what their windows sum to over [`DEBT`] (`baseline::spread` of a
/// window's share, times `sqrt(window × DEBT)`), a deficit is not told from
/// their ups and downs. At 0.1% the allowance grows 30 ms over [`DEBT`],
/// and the workloads' windows sum to a spread of 56 to 81 ms over it
/// (the benchmark's probe alone and with its writer, 250-ms windows of
/// 1.4-2.4% spread): held at every deficit, a run waited on that noise
/// half its time, and containerd's busy fixture took 748 s. Two, as a
/// test of the mean against its noise; the floor is as much deeper, so
/// that a deficit beyond the noise is still paid back over [`DEBT`].
pub const NOISE: f64 = 2.0;

/// The longest window whose stall is charged: eight of the pacer's 250-ms
/// windows. A longer one means the pacer was not running (its process
/// stopped or starved of CPU): what the workloads stalled then is taken as
/// their own, charged to no removal and learned by no kind. The benchmark
/// stops a run (SIGSTOP) for 40 s between its blocks; charged, each stop
/// put the workloads' noise over those 40 s (and a baseline's error 160
/// times over) on the one removal then in flight or in its tail.
pub const STOPPED: Duration = Duration::from_secs(2);

/// How many of the latest windows while removals go are a mean that may
/// lower the baseline: 30 s of `baseline::INTERVAL`. A dozen (3 s, as
/// many as the first measuring has) lowered it on the workloads' own
/// noise, whose windows are bursty (a writer's fsyncs), so that a dozen's
/// mean is far from normal about their level: it lowered the baseline
/// up to seven times in one 40-s block of removals of Docker's busy
/// fixture, to 5.31% where its idle blocks stood at 6.46%, and each time
/// the pool began again from a pause's few windows. A workload that
/// drops by points still shows within seconds, the mean of 120 windows
/// moving by a 120th of the drop with each one.
pub const RECENT: usize = 120;

/// How long removals go, at most, after the baseline was last measured
/// (before the first removal, or by a rest of [`RESTED`] windows) before
/// they rest for a pause to measure it again: the last removal's tail,
/// [`SETTLE`](super::pause::SETTLE) and [`RESTED`] windows, about 9 s.
/// Only a rest measures: a pause a deficit makes ends when its windows
/// paid the deficit back, stood low (see `pause`). Before the rests, such
/// pauses alone measured, and on containerd's busy node a run made none
/// in 400 s: its baseline was
/// what 3 s before the first removal showed, 8.02% where the idle blocks
/// stood at 6.4%, until the mean of its windows lowered it, and its first
/// two 40-s blocks put 3.5% and 3.9% of the probe's operations past its
/// idle p99 (BENCHMARKS.md). A rest comes whatever the workloads did:
/// what it measures is as often under their level as over. The time the
/// pacer was stopped ([`STOPPED`]) does not count: removals did not go.
/// Counted, the benchmark's 40-s stops made a rest at each resume: 19
/// rests, a quarter of containerd's busy run's 680 s of paced blocks.
pub const REST: Duration = Duration::from_secs(60);

/// How many windows a rest measures (see [`REST`]), whatever they show:
/// 3 s of them, as many as the measuring before the first removal has.
/// A rest's windows join the pool of earlier ones, which the
/// baseline is the level of: on 5, the least a level is taken on, a
/// rest's level on containerd's busy node (windows of 2.3% spread) has a
/// standard error of a point, and the pool fills slower.
pub const RESTED: usize = 12;

/// What the policy asks of the budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The share of wall time (0 to 1: 0.005 is 0.5%) the removals may add
    /// to the time some workload task waits on I/O, above the baseline.
    /// Above 0.
    pub target: f64,
    /// The share of a window stalled (0 to 1) above which no removal
    /// starts, whatever the baseline: `io_pressure_percent / 100`.
    pub ceiling: f64,
    /// The most removals in flight: the policy's concurrency.
    pub max: usize,
    /// The least a removal is charged, seconds: [`LEAST_COST`].
    pub least_cost: f64,
    /// What the least cost grows by per MiB freed, seconds:
    /// [`LEAST_COST_PER_MIB`].
    pub least_cost_per_mib: f64,
    /// At most this many removals of a learned kind go together, each
    /// batch once the allowance covers it whole: [`BATCH`] on an engine
    /// that frees when its removals settle, 1 (each as the allowance
    /// allows) elsewhere.
    pub batch: usize,
    /// How long after the last removal in flight a pause's windows begin
    /// to count as the workloads' own: [`SETTLE_COLLECTED`] on an engine
    /// that frees when its removals settle, [`SETTLE`] elsewhere.
    pub settle: Duration,
}

impl Limits {
    /// The policy's target, ceiling and concurrency (see the fields), with
    /// the law's [`LEAST_COST`] and [`LEAST_COST_PER_MIB`].
    #[must_use]
    pub fn new(target: f64, ceiling: f64, max: usize) -> Self {
        Self {
            target,
            ceiling,
            max,
            least_cost: LEAST_COST,
            least_cost_per_mib: LEAST_COST_PER_MIB,
            batch: 1,
            settle: SETTLE,
        }
    }

    /// How many removals of a kind that costs `cost` (`None`: not yet
    /// learned) go together now, and what the allowance must hold beyond
    /// one removal's room for them all: the cost of each of the others. A
    /// kind not yet learned goes alone; a batch is never more than the
    /// allowance holds at most (`cap`), nor than the most in flight.
    #[must_use]
    pub fn batch_of(&self, cost: Option<f64>, cap: f64) -> (usize, f64) {
        let Some(cost) = cost.map(|c| c.max(0.0)) else {
            return (1, 0.0);
        };
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a positive count, at most the batch"
        )]
        let fits = 1 + (cap / cost.max(f64::EPSILON)).min(1e6) as usize;
        let size = self.batch.min(self.max).min(fits).max(1);
        #[expect(clippy::cast_precision_loss, reason = "a handful")]
        let need = (size - 1) as f64 * cost;
        (size, need)
    }

    /// The same limits for an engine that frees what its removals
    /// unreferenced when they settle (`settled`: containerd's collector),
    /// or not: removals in batches of [`BATCH`] (see [`Limits::batch`]) and
    /// pauses settling for [`SETTLE_COLLECTED`], or one by one and
    /// [`SETTLE`].
    #[must_use]
    pub fn frees_when_settled(self, settled: bool) -> Self {
        Self {
            batch: if settled { BATCH } else { 1 },
            settle: if settled { SETTLE_COLLECTED } else { SETTLE },
            ..self
        }
    }
}
