//! The stall budget: how much I/O stall the removals may add to what the
//! workloads feel, and so when a removal may start and how many may be in
//! flight.
//!
//! A threshold on the pressure itself (safeprune's first pacing law)
//! includes whatever the workloads stall on by themselves, which drifts by
//! tenths of a point within minutes: a threshold close above it crawls, a
//! wider one lets the removals add several times the stall it was meant
//! for. The systems that protect latency bound the *added* delay over a
//! base they measure (LEDBAT, BBR; Linux `io.latency` protects a victim
//! relative to its own baseline), charge work when it is issued (Linux
//! `io.cost`), sum stall over short intervals against a small target
//! (senpai), back off fast and probe slowly. So:
//!
//! - The allowance grows by `target × elapsed` and is spent by the stall
//!   above the baseline in each observed window, `stalled − baseline ×
//!   window`: a window under the baseline gives back what it did not
//!   stall, so that the workloads' own ups and downs around their baseline
//!   cost nothing on the whole (counting only the ups would charge the
//!   removals for noise: at a target of half a point, most of it). It
//!   holds at most [`BANK`](limits::BANK) of the target, as much as a deficit may
//!   ([`DEBT`](limits::DEBT)): a window's noise is then paid back as far as it is
//!   charged, and a run goes at the pace its removals' cost sets, where a
//!   cap of 2 s against a floor of 30 s turned that zero-mean noise into
//!   waits (on a busy node at 0.1%, a third of the rate the cost set).
//! - The baseline is measured again in rests: removals rest [`REST`]
//!   after it was last measured, and the windows in which no removal was
//!   in flight, from `SETTLE` after the last one was taken in and from
//!   when the rest began, are the workloads' own; once a rest has
//!   `MIN_WINDOWS` of them their level (`baseline::level`) pooled with
//!   earlier rests' windows and those measured before the first removal,
//!   two minutes of them (`pause::POOL`), is the baseline; a rest whose
//!   own level, alone or with the latest rests' ([`LATEST`](pause::LATEST)),
//!   stands [`SHIFT`](pause::SHIFT) errors from the older windows' (the
//!   workloads changed) replaces them. What the pause's windows were charged
//!   above it is given back: a workload that got busier while the
//!   removals waited is not the removals' doing. The settling windows are
//!   charged again at the new baseline: what they stalled above it stands
//!   (a removal's late stall shows there). A rest ends at
//!   [`RESTED`](limits::RESTED) windows, whatever they showed; a pause a
//!   deficit made measures nothing, its end chosen by its windows (see
//!   `pause`). And while
//!   removals go, the mean of the latest [`RECENT`] windows lowers the
//!   baseline when it falls under it by more than the target and its
//!   noise (removals only add stall), until the next rest, which is pooled
//!   as ever: a workload that got quieter does not leave the removals its
//!   old stall to add on top of the target, and a lull (a mean chosen for
//!   standing low) is no measure of their level.
//! - A deficit holds at most [`DEBT`](limits::DEBT) of the target, or the dearest
//!   kind's learned cost when that is more: what a window's burst cost,
//!   the removals' or the workloads' own (in a window with a removal in
//!   flight the two cannot be told apart), is paid back within that. Without
//!   it one burst of the workloads' own, 200 ms of a 250 ms window, was 40
//!   s of allowance at half a point, and a few of them held a run still
//!   for minutes (measured: 0 objects/s in 220 s). The learned cost: a
//!   removal's known cost is paid back in full, whatever the target. With
//!   [`DEBT`](limits::DEBT) alone, at 0.1% (30 ms of stall) images that cost more went
//!   one per 30 s, and a run added 1.53 s in about 240 s, six times its
//!   target.
//! - A deficit holds removals only beyond the workloads' own noise: the
//!   spread of their windows (measured with the baseline and again in
//!   each rest, or that of the latest settled quiet windows when more)
//!   summed over [`DEBT`](limits::DEBT), [`NOISE`](limits::NOISE) times; the floor is
//!   as much deeper (what the walk goes past it is forgiven: see
//!   `Budget::floor`). At a low target the allowance is a walk on that
//!   noise (at 0.1%, 30 ms credited against 56-81 ms of the workloads' own
//!   spread over 30 s): held at every deficit, a run waited half its time
//!   on nothing the removals did, and its pace was set by chance.
//! - A removal starts only while the allowance, less what the removals in
//!   flight are expected to cost and more the noise's tolerance, is not negative, and while the last
//!   window's share is not above the ceiling (the policy's absolute
//!   `io_pressure_percent`), whatever the baseline.
//! - What a removal costs is learned per kind: each observed window's stall
//!   above baseline is shared among the removals in flight during it and
//!   those in their [`TAIL`], and a removal's total, once its tail is over,
//!   moves its kind's cost by [`LEARNING`]. The tail: much of a removal's
//!   stall comes after the engine answered (an image's freed layers
//!   written back, the journal's commit), in windows with nothing in
//!   flight; learned from its own window alone, an image's cost stayed a
//!   fraction of what it stalled, its concurrency climbed, and runs at
//!   0.1% spent three to five times their target. A removal is charged its
//!   kind's cost when it starts; as windows come, its measured stall
//!   replaces the charge, and what was charged beyond it is refunded once
//!   its tail is over (a removal that stalls more than its charge is
//!   charged the difference as measured).
//! - While the workloads stall by themselves (their baseline is above
//!   zero: a short removal's stall is lost in theirs), every removal also
//!   pays its least cost ([`LEAST_COST`](limits::LEAST_COST) times its engine's [`Weight`],
//!   or [`LEAST_COST_PER_MIB`](limits::LEAST_COST_PER_MIB) of what it frees when that is more) from an
//!   account of its own,
//!   credited by the target with time up to [`PACE_BANK`](limits::PACE_BANK) of it (times the
//!   batch) and never
//!   by the windows: removals go no faster than the target pays for their
//!   least costs (at 0.1%, about five small objects a second, one image
//!   of 14 MiB), however the windows' noise runs. What the account earns
//!   beyond its bank while removals do not spend it (held, or none ready)
//!   is its lag, up to [`LAG`](limits::LAG) of the target, which credits
//!   it again as fast as time does: removals catch up at twice that pace,
//!   never faster, where a deficit's wait was lost to the least costs too.
//!   A kind not yet learned goes one at a time until one of its removals
//!   was observed.
//! - Where the engine frees what removals unreferenced only when they
//!   settle (containerd's garbage collector, which otherwise runs after
//!   each delete), a learned kind's removals go in batches of up to
//!   [`Limits::batch`]: a batch begins once the allowance holds its
//!   kind's cost for each removal in it beyond the first, then goes whole,
//!   in flight together, and settles once (one after another where the
//!   executor allows one at a time). One collection then frees what
//!   many removals unreferenced, where removals paced one by one paid one
//!   each. A batch is never more than the allowance can hold.
//! - Concurrency starts at one, rises by one after each window with
//!   removals in flight where the budget held, and halves after one that
//!   ended in deficit, within `1..=max`. A window with only tails in it
//!   may halve it, not raise it: the late stall of removals that finished
//!   says they weighed too much, its absence nothing of those to come. A
//!   window without removals says nothing of how they weigh and changes
//!   nothing.
//!
//! - A window longer than [`STOPPED`] (the pacer's process was stopped or
//!   starved) is charged nothing, teaches nothing and credits nothing: no
//!   removal can be told from the workloads over it, and none could go.
//!
//! The budget holds no clock: every call takes the time it happens at, so
//! that its tests pass the times.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::inventory::Kind;
use crate::pace::baseline;
use flight::Flight;
pub use flight::Ticket;
#[cfg(test)]
use limits::{BANK, DEBT, LAG, NOISE, PACE_BANK, RESTED};
use limits::{LEARNING, RECENT, REST, STOPPED, TAIL};
pub use limits::{Limits, Weight};
use pause::{Pause, Pool, Quiet, keep_latest};
pub use verdict::{Accounts, Verdict};

mod account;
mod flight;
mod level;
mod limits;
mod pause;
mod verdict;

/// The budget (see the module).
#[derive(Debug, Clone)]
pub struct Budget {
    limits: Limits,
    /// The workloads' own stalled share, 0 to 1.
    baseline: f64,
    /// How far their stall moves from window to window (its standard
    /// deviation, a share): measured with the baseline.
    spread: f64,
    /// The same over the latest [`RECENT`] settled quiet windows (of
    /// pauses, from `SETTLE` after the last removal), once there are that
    /// many; 0 before.
    quiet_spread: f64,
    /// The latest [`RECENT`] settled quiet windows' shares.
    quiet: VecDeque<f64>,
    /// Seconds of added stall allowed, credited by time and debited by the
    /// stall measured above baseline, charges aside. Negative: a deficit.
    measured: f64,
    /// The least costs' account (see the module): credited by the target
    /// with time up to [`PACE_BANK`](limits::PACE_BANK) of it, debited [`Self::least_cost`] by
    /// each removal that starts, never touched by the windows. Negative:
    /// the removals are ahead of the pace their least costs allow.
    least_paid: f64,
    /// What the least costs' account earned beyond its bank while removals
    /// did not spend it, up to [`LAG`](limits::LAG) of the target: it
    /// credits the account again, as fast as time does (see
    /// [`Self::credit`]).
    lag: f64,
    /// Until when time is credited.
    credited_at: Instant,
    /// When the last window ended.
    observed_at: Instant,
    /// The last window's stalled share (at first the baseline's).
    last_share: f64,
    flights: Vec<Flight>,
    next_ticket: u64,
    /// Each kind's learned stall above baseline per removal, seconds.
    costs: BTreeMap<Kind, f64>,
    concurrency: usize,
    /// Since when a verdict has held removals back.
    held_since: Option<Instant>,
    /// Removals paused, since when, and the pause's windows.
    pause: Option<Pause>,
    /// When the baseline was last measured (before the first removal, or
    /// by a rest's [`RESTED`](limits::RESTED) windows), moved on by the windows longer
    /// than [`STOPPED`]: removals rest [`REST`] after it.
    measured_at: Instant,
    /// Since when removals rest: the first verdict that said so.
    rest_from: Option<Instant>,
    /// Earlier rests' windows, the baseline's with the rest's.
    pool: Pool,
    /// The latest [`RECENT`] windows' shares, removals or not.
    recent: VecDeque<f64>,
    /// The stall above baseline, in all, seconds (see [`Accounts`]).
    added: f64,
    accounts: Accounts,
    /// The batch under way (see [`Limits::batch`]): its kind, and how many
    /// of it may still start whatever the allowance, which covered it
    /// whole when it began (never 0: a batch all started is over).
    batch: Option<(Kind, usize)>,
}

impl Budget {
    /// A budget under `limits` over the workloads' `baseline` share (0 to
    /// 1), its first window beginning `now`, one removal in flight at most.
    #[must_use]
    pub fn new(limits: Limits, baseline: f64, now: Instant) -> Self {
        let limits = Limits {
            max: limits.max.max(1),
            ..limits
        };
        Self {
            limits,
            baseline,
            spread: 0.0,
            quiet_spread: 0.0,
            quiet: VecDeque::with_capacity(RECENT),
            measured: 0.0,
            least_paid: 0.0,
            lag: 0.0,
            credited_at: now,
            observed_at: now,
            last_share: baseline,
            flights: Vec::new(),
            next_ticket: 0,
            costs: BTreeMap::new(),
            concurrency: 1,
            held_since: None,
            pause: None,
            measured_at: now,
            rest_from: None,
            pool: Pool::default(),
            recent: VecDeque::with_capacity(RECENT),
            added: 0.0,
            accounts: Accounts {
                highest_concurrency: 1,
                ..Accounts::default()
            },
            batch: None,
        }
    }

    /// The same budget, the workloads' stall moving by `spread` (a
    /// window's share's standard deviation: `baseline::spread`) from window
    /// to window: a deficit within its [`NOISE`](limits::NOISE) holds nothing.
    #[cfg(test)]
    #[must_use]
    pub fn with_spread(mut self, spread: f64) -> Self {
        self.spread = spread.max(0.0);
        self
    }

    /// The same budget, its baseline measured over windows of these
    /// stalled `shares` before the first removal: how far they move (see
    /// [`Self::with_spread`]), and the first of the windows the rests'
    /// are pooled with.
    #[must_use]
    pub fn with_windows(mut self, shares: &[f64]) -> Self {
        self.spread = baseline::spread(shares).unwrap_or(0.0).max(0.0);
        self.pool.extend(shares.iter().copied());
        self
    }

    /// The workloads' own stalled share, 0 to 1: measured before the
    /// first removal, then again in rests (see the module).
    #[must_use]
    pub fn baseline(&self) -> f64 {
        self.baseline
    }

    /// The least a removal of `weight` costs now: the larger of
    /// [`Limits::least_cost`] times its engine's weight and
    /// [`Limits::least_cost_per_mib`] times its size while the workloads
    /// stall by themselves, when a window cannot tell a short removal's
    /// stall from theirs; nothing where they stall nothing, and any stall
    /// a removal makes shows in its windows.
    fn least_cost(&self, weight: Weight) -> f64 {
        if self.baseline > 0.0 {
            #[expect(
                clippy::cast_precision_loss,
                reason = "an object's size, far under 2^52 bytes"
            )]
            let mib = weight.bytes as f64 / f64::from(1_u32 << 20);
            (self.limits.least_cost * weight.engine).max(self.limits.least_cost_per_mib * mib)
        } else {
            0.0
        }
    }

    /// The most removals in flight now: a batch under way's whole.
    #[must_use]
    pub fn concurrency(&self) -> usize {
        let batch = self.batch.map_or(0, |(_, left)| self.in_flight() + left);
        self.concurrency.max(batch)
    }

    /// Removals in flight or in their [`TAIL`]: while there are, the
    /// windows must come every 250 ms (a longer one than [`STOPPED`] is
    /// charged nothing).
    #[must_use]
    pub fn watching(&self) -> bool {
        !self.flights.is_empty()
    }

    /// Whether a batch is under way (see [`Limits::batch`]).
    #[cfg(test)]
    #[must_use]
    pub fn in_batch(&self) -> bool {
        self.batch.is_some()
    }

    /// Removals started and not finished.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.flights.iter().filter(|f| !f.finished).count()
    }

    /// A kind's learned cost: stall above baseline per removal; `None`
    /// before one of its removals was observed.
    #[must_use]
    pub fn cost(&self, kind: Kind) -> Option<Duration> {
        self.costs
            .get(&kind)
            .map(|secs| Duration::from_secs_f64(secs.max(0.0)))
    }

    /// The allowance at `now`, seconds of added stall: what time has
    /// credited, less the stall measured and what the removals in flight
    /// are still charged. Negative: a deficit.
    #[must_use]
    pub fn allowance(&self, now: Instant) -> f64 {
        self.credited(now) - self.reserved()
    }

    /// What a deficit must pass before it holds removals, seconds (the
    /// workloads' noise: see the module), the least costs' account as the
    /// last gate credited it (negative: removals ahead of their pace) and
    /// its lag: the balances a wait is for, for its trace.
    #[must_use]
    pub fn held_by(&self) -> (f64, f64, f64) {
        (self.tolerance(), self.least_paid, self.lag)
    }

    /// How the run was held so far.
    #[must_use]
    pub fn accounts(&self) -> Accounts {
        self.accounts
    }

    /// Whether a removal of `kind` may start at `now`. A kind not yet
    /// learned goes one at a time, whatever the concurrency another kind
    /// rose to, until one of its removals was observed: charged nothing,
    /// several at once could spend the budget many times over before a
    /// window says so. Nor one after another: one that has finished holds
    /// the next until a window has taken it in, or quick removals charged
    /// nothing would all go before the first window ends.
    pub fn gate(&mut self, kind: Kind, now: Instant) -> Verdict {
        self.credit(now);
        if self.batch.is_some_and(|(of, _)| of != kind) {
            self.batch = None;
        }
        let (size, need) = self
            .limits
            .batch_of(self.costs.get(&kind).copied(), self.cap());
        let measured = self.measured - self.reserved() + self.tolerance();
        let verdict = if self.last_share > self.limits.ceiling {
            Verdict::Ceiling
        } else if now.saturating_duration_since(self.measured_at) >= REST {
            Verdict::Rest
        } else if self.batch.is_some() {
            Verdict::Start
        } else if measured < need || self.least_paid < 0.0 {
            let wait = ((need - measured).max(0.0) / self.limits.target).max(self.least_wait());
            Verdict::PayBack(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
        } else if self.in_flight() >= self.concurrency
            || (!self.costs.contains_key(&kind) && self.flights.iter().any(|f| f.kind == kind))
        {
            Verdict::Full
        } else {
            Verdict::Start
        };
        if verdict == Verdict::Rest {
            self.rest_from.get_or_insert(now);
        }
        // A batch begins once the last has all started, its removals
        // possibly still in flight.
        if verdict == Verdict::Start && size > 1 && self.batch.is_none() {
            self.batch = Some((kind, size));
        }
        self.held(verdict, now);
        verdict
    }

    /// Whether a removal may start at `now` while the disk is over
    /// `images.disk.high_percent`: the ceiling alone holds it, with at most
    /// `most` in flight (a full disk is an outage too). The windows are
    /// still observed and charged: once the disk is under it again, the
    /// budget holds as before, its deficit bounded as ever.
    pub fn gate_ceiling(&mut self, most: usize, now: Instant) -> Verdict {
        self.credit(now);
        let verdict = if self.last_share > self.limits.ceiling {
            Verdict::Ceiling
        } else if self.in_flight() >= most {
            Verdict::Full
        } else {
            Verdict::Start
        };
        self.held(verdict, now);
        verdict
    }

    /// Counts the time removals were held back, from a verdict that held
    /// them (a deficit, the ceiling, a rest) to the next that did not.
    fn held(&mut self, verdict: Verdict, now: Instant) {
        match verdict {
            Verdict::Ceiling | Verdict::PayBack(_) | Verdict::Rest => {
                self.held_since.get_or_insert(now);
            }
            Verdict::Start | Verdict::Full => {
                if let Some(since) = self.held_since.take() {
                    self.accounts.waited += now.saturating_duration_since(since);
                }
            }
        }
    }

    /// A removal of `kind` and `weight` starts at `now`: it is charged its
    /// kind's cost (nothing before one was learned: see [`Self::gate`]),
    /// and pays its least cost.
    pub fn start(&mut self, kind: Kind, weight: Weight, now: Instant) -> Ticket {
        self.credit(now);
        self.least_paid -= self.least_cost(weight);
        // A batch is over once all of it started. One that goes one at a
        // time (the executor's limit for images by disk pressure) or whose
        // objects went otherwise (gone, changed) stays open for the rest:
        // the allowance covered it whole.
        if let Some((_, left)) = &mut self.batch {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.batch = None;
            }
        }
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        self.flights.push(Flight {
            ticket,
            kind,
            charged: self.costs.get(&kind).copied().unwrap_or(0.0).max(0.0),
            stall: 0.0,
            finished: false,
            tail_from: None,
        });
        ticket
    }

    /// The removal of `ticket` has finished (removed or refused): the
    /// window under way is its last.
    pub fn finish(&mut self, ticket: Ticket) {
        if let Some(flight) = self.flights.iter_mut().find(|f| f.ticket == ticket) {
            flight.finished = true;
        }
    }

    /// A window ends at `now`, `stalled` of it (PSI `some total`'s growth
    /// since the last) with some workload task waiting on I/O (the
    /// pacer passes the I/O and CPU stall apart: [`Self::observe_with_io`]).
    #[cfg(test)]
    pub fn observe(&mut self, now: Instant, stalled: Duration) {
        self.observe_with_io(now, stalled, stalled);
    }

    /// A window ends at `now`: `stalled` of it the stall the budget spends
    /// (the workloads' I/O and CPU waits, summed), `io` of it their I/O
    /// waits alone, which the ceiling (`io_pressure_percent`) is about.
    pub fn observe_with_io(&mut self, now: Instant, stalled: Duration, io: Duration) {
        let window = now.saturating_duration_since(self.observed_at);
        let stopped = window > STOPPED;
        if stopped {
            // The pacer was not running: removals could not go, and the
            // time earns nothing (the benchmark stops a run 80 s between
            // its pairs of blocks; credited, each resume spent the stop's
            // in a burst the paced blocks alone were judged on).
            self.credited_at = self.credited_at.max(now);
        }
        self.credit(now);
        if window.is_zero() {
            return;
        }
        let began = self.observed_at;
        self.observed_at = now;
        let (window, stalled) = (window.as_secs_f64(), stalled.as_secs_f64());
        let share = (stalled / window).min(1.0);
        self.last_share = (io.as_secs_f64() / window).min(1.0);
        if stopped {
            // The pacer was not running: the workloads' own, whatever
            // they stalled. Nor did removals go: the rest's clock stops.
            self.accounts.windows += 1;
            self.measured_at += now.saturating_duration_since(began);
            return;
        }
        keep_latest(&mut self.recent, share, RECENT);
        let excess = stalled - self.baseline * window;
        self.spend(excess);
        self.accounts.windows += 1;
        if self.flights.is_empty() {
            self.paused(
                began,
                Quiet {
                    stalled,
                    window,
                    charged: excess,
                },
            );
            return;
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "removals in flight, far under 2^52"
        )]
        let each = excess / self.flights.len() as f64;
        // In flight during this window, finished in it or not; the rest
        // are tails.
        let live = self.flights.iter().any(|f| f.tail_from.is_none());
        for flight in &mut self.flights {
            flight.stall += each;
            if flight.finished && flight.tail_from.is_none() {
                flight.tail_from = Some(now);
            }
        }
        let (done, going) = std::mem::take(&mut self.flights)
            .into_iter()
            .partition(|f| {
                f.tail_from
                    .is_some_and(|from| now.duration_since(from) >= TAIL)
            });
        self.flights = going;
        for flight in done {
            self.learn(flight.kind, flight.stall);
        }
        // The last in flight taken in: a pause may begin; one that had
        // begun has ended.
        if let Some(pause) = self.pause.take() {
            self.pool.fold(&pause);
        }
        self.pause = self
            .flights
            .is_empty()
            .then(|| Pause::new(now, self.limits.settle));
        self.lower_baseline();
        let in_deficit = self.measured + self.tolerance() < 0.0;
        let accounts = &mut self.accounts;
        if in_deficit {
            self.concurrency = (self.concurrency / 2).max(1);
            accounts.lowest_concurrency = Some(
                accounts
                    .lowest_concurrency
                    .map_or(self.concurrency, |l| l.min(self.concurrency)),
            );
        } else if live {
            self.concurrency = (self.concurrency + 1).min(self.limits.max);
            accounts.highest_concurrency = accounts.highest_concurrency.max(self.concurrency);
        }
    }

    /// A finished removal of `kind` stalled the workloads `stall` seconds
    /// above baseline: the first sets its kind's cost, later ones move it.
    fn learn(&mut self, kind: Kind, stall: f64) {
        self.costs
            .entry(kind)
            .and_modify(|cost| *cost += LEARNING * (stall - *cost))
            .or_insert(stall);
    }

    /// What removals in flight are still charged, seconds.
    fn reserved(&self) -> f64 {
        self.flights.iter().map(Flight::reserved).sum()
    }
}

#[cfg(test)]
mod tests;
