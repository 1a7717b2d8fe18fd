//! The executor: the only code that deletes, and the [`Outcome`] of each
//! removal it attempts.
//!
//! Kinds go in removal order (containers first, so that what they held is
//! free when images, volumes and networks come). Just before removing a
//! batch of objects the executor asks the runtime again about them and runs
//! the planner's rules on the fresh answer: a pod may have restarted since
//! planning. It never forces; an
//! object gone, in use or changed is `skipped`, an engine error `failed`,
//! each with its [`Reason`]. At most `safety.concurrency` removals are in
//! flight. Once a stop is asked no new one starts, and every wait on the
//! engine ends: a re-check at once, a removal already sent and the kind's
//! settling after [`STOP_GRACE`] at most.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use chrono::Utc;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::Serialize;

use crate::inventory::{Inventory, Kind, Use};
use crate::output::Chain;
use crate::plan::{self, Action, Decision, Plan};
use crate::policy::Policy;
use crate::runtime::{Engine, Removal, Target};
use crate::shutdown::Shutdown;

use crate::pace::{Gate, Pacer, Weight};

/// What came of one removal attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RemovalResult {
    Deleted,
    /// Gone, in use, changed since planning, or not attempted.
    Skipped,
    Failed,
}

impl RemovalResult {
    /// Every result, in the order reports list them.
    pub const ALL: [RemovalResult; 3] = [Self::Deleted, Self::Skipped, Self::Failed];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Skipped => "skipped",
            Self::Failed => "failed",
        }
    }
}

/// Why an object was not deleted: what scripts, tests and metrics match on.
/// The outcome's `error` says the same for people, with the engine's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// It no longer existed: removed by someone else since planning (404).
    Gone,
    /// The engine refused: the object is in use or live (409, 403, a task
    /// that runs, a container that uses the image).
    InUse,
    /// The re-check on fresh facts keeps it now (a pod came back, an image
    /// was used again).
    Changed,
    /// A stop signal came before its turn.
    NotAttempted,
    /// The engine failed the re-check or the removal.
    EngineError,
}

impl Reason {
    /// Every reason a removal is skipped for, in the order metrics list them.
    pub const SKIPPED: [Reason; 4] = [Self::Gone, Self::InUse, Self::Changed, Self::NotAttempted];

    /// The code as reports show it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::InUse => "in_use",
            Self::Changed => "changed",
            Self::NotAttempted => "not_attempted",
            Self::EngineError => "engine_error",
        }
    }

    /// The result an attempt that ended for this reason has: only an
    /// engine error is a failure.
    #[must_use]
    pub fn result(self) -> RemovalResult {
        match self {
            Self::EngineError => RemovalResult::Failed,
            Self::Gone | Self::InUse | Self::Changed | Self::NotAttempted => RemovalResult::Skipped,
        }
    }
}

/// One removal attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub kind: Kind,
    pub id: String,
    pub name: String,
    /// Every reference of an image (tags, then digests); absent for other
    /// kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refs: Option<Vec<String>>,
    pub result: RemovalResult,
    /// Bytes freed (deleted), or that would have been (skipped, failed).
    pub bytes: Option<u64>,
    /// Why it was not deleted; `null` when it was.
    pub reason: Option<Reason>,
    /// The same for people, with the engine's words; `null` when deleted.
    pub error: Option<String>,
    /// `changed`: the rule that keeps it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_by: Option<crate::plan::Rule>,
}

impl Outcome {
    /// The outcome of `decision`'s removal: deleted, or not for `reason`.
    #[must_use]
    pub fn of(decision: &Decision, not_deleted: Option<(Reason, String)>) -> Self {
        let (result, reason, error) = match not_deleted {
            None => (RemovalResult::Deleted, None, None),
            Some((reason, why)) => (reason.result(), Some(reason), Some(why)),
        };
        Self {
            kind: decision.kind,
            id: decision.id.clone(),
            name: decision.name.clone(),
            refs: decision.refs.clone(),
            result,
            bytes: decision.bytes,
            reason,
            error,
            kept_by: None,
        }
    }

    /// Skipped because the rules keep it now, by `rule`.
    #[must_use]
    pub fn changed(decision: &Decision, rule: crate::plan::Rule, why: String) -> Self {
        Self {
            kept_by: Some(rule),
            ..Self::of(decision, Some((Reason::Changed, why)))
        }
    }
}

/// Carries out every deletion of `plan` and returns what came of each, in
/// removal order. `on_outcome` sees each outcome as it happens (audit log,
/// progress), with the number done so far and the total.
///
/// At most `safety.concurrency` removals are in flight. Objects are
/// re-checked `safety.concurrency` at a time (one call whose cost grows
/// with the batch, not with the node), the next batch while the removals
/// of the last go on, and each starts as a slot frees. An answer older
/// than [`FRESH_FOR`] is not acted on: the object is re-checked again.
///
/// Before each re-check batch it asks `pacer` how many removals may be in
/// flight and whether to wait first (`safety.pace`; a pacer for a policy
/// without it never waits). A wait ends at once on a stop; its time is
/// counted in the pacer's report. With the stall budget
/// (`added_io_pressure_percent`), the pacer first measures the workloads'
/// baseline (a stop ends it at once), is asked again before each removal
/// (one it holds goes back to be re-checked after its next gate), observes
/// the workloads' stall on a timer while removals go, and may end the run's
/// removals (`on_max_delay: stop`: the rest `not_attempted`).
///
/// Once `shutdown` is asked, it returns within [`STOP_GRACE`] whatever the
/// engine does: see [`STOP_GRACE`].
#[expect(
    clippy::too_many_lines,
    reason = "one loop over a run's shared state (re-checks, removals, the pacer's waits, a stop): \
              each part split out would take most of it as arguments"
)]
pub async fn execute<E: Engine>(
    engine: &E,
    plan: &Plan,
    policy: &Policy,
    pacer: &mut Pacer,
    shutdown: &Shutdown,
    mut on_outcome: impl FnMut(&Outcome, usize, usize),
) -> Vec<Outcome> {
    let total = plan.deletion_count();
    let mut outcomes = Vec::with_capacity(total);
    // Why nothing more is asked of the engine in this run, once a re-check
    // could not reach it: a dead or hung engine would fail every later
    // call too, each after its timeout.
    let mut engine_down: Option<String> = None;
    // Why nothing more goes in this run, once the stall budget's max_delay
    // is spent under `on_max_delay: stop`.
    let mut paced_out: Option<String> = None;
    if total > 0 {
        pacer
            .measure_baseline(engine.frees_when_settled(), shutdown)
            .await;
    }
    // While the image file system is over `images.disk.high_percent`, a
    // paced run yields to the ceiling alone: a full disk is an outage too.
    let disk_full = over_high(plan, policy).filter(|_| pacer.reads_pressure());
    for kind in Kind::REMOVAL_ORDER {
        let (targets, limit, disk_target) = removals_of(plan, policy, kind, pacer.begin_kind(kind));
        // Why no more of this kind goes: the disk is down to low_percent.
        let mut target_reached: Option<String> = None;
        let mut unsettled = Unsettled::new(pacer.reads_pressure() && engine.frees_when_settled());
        let mut done_here = Vec::with_capacity(targets.len());
        let mut report = |outcome: Outcome| {
            on_outcome(&outcome, outcomes.len() + done_here.len() + 1, total);
            done_here.push(outcome);
        };
        // Children before parents: the engine refuses a parent while a
        // child exists, so each wave is over before the next is re-checked
        // (which then sees whether the children went).
        for wave in waves(targets) {
            // Objects not yet re-checked, in order; re-checked ones waiting for
            // a free slot, with when their re-check answered.
            let mut pending: VecDeque<&Decision> = wave.into_iter().collect();
            let mut ready: VecDeque<(&Decision, Target, Instant)> = VecDeque::new();
            let mut checking = FuturesUnordered::new();
            let mut in_flight = FuturesUnordered::new();
            let mut pause = Pause::default();
            let mut settling = FuturesUnordered::new();
            loop {
                if let Some((path, high)) = &disk_full {
                    pacer.disk_over_high(
                        crate::runtime::fs_usage(path)
                            .is_some_and(|u| u.percent() > f64::from(*high)),
                    );
                }
                let limit = limit.min(pacer.limit());
                // Fill free slots from the re-checked, while their answer is
                // fresh; a stale one goes back to be re-checked again.
                while in_flight.len() < limit {
                    let Some((d, target, at)) = ready.pop_front() else {
                        break;
                    };
                    if target_reached.is_none()
                        && let Some((path, low)) = &disk_target
                    {
                        target_reached = reached(path, *low);
                    }
                    if shutdown.is_stopped() {
                        report(not_attempted(d, ASKED_TO_STOP));
                    } else if let Some(why) = engine_down
                        .as_ref()
                        .or(target_reached.as_ref())
                        .or(paced_out.as_ref())
                    {
                        report(not_attempted(d, why));
                    } else if let Some(slot) = (at.elapsed() <= FRESH_FOR)
                        .then(|| {
                            pacer.start(Weight {
                                bytes: d.bytes.unwrap_or(0),
                                engine: engine.removal_weight(),
                            })
                        })
                        .flatten()
                    {
                        in_flight
                            .push(async move { (remove(engine, d, target, shutdown).await, slot) });
                    } else {
                        // Stale, or held by the stall budget: re-checked
                        // again after the pacer's next gate.
                        let stale: Vec<&Decision> = std::iter::once(d)
                            .chain(ready.drain(..).map(|(d, _, _)| d))
                            .collect();
                        for d in stale.into_iter().rev() {
                            pending.push_front(d);
                        }
                    }
                }
                // Re-check the next batch while removals go on, so that a slot
                // that frees finds an object ready.
                if let Some(why) = engine_down
                    .as_ref()
                    .or(target_reached.as_ref())
                    .or(paced_out.as_ref())
                {
                    for d in pending.drain(..).chain(ready.drain(..).map(|(d, _, _)| d)) {
                        report(not_attempted(d, why));
                    }
                }
                let next_batch = checking.is_empty()
                    && ready.is_empty()
                    && !pending.is_empty()
                    && settling.is_empty()
                    && !pause.on();
                if next_batch && unsettled.step_due(engine_down.is_some() || shutdown.is_stopped())
                {
                    settling.push(settle(engine, kind, shutdown));
                } else if next_batch {
                    match pause.gate(pacer, shutdown, limit) {
                        Next::Batch(size) => {
                            let batch: Vec<&Decision> =
                                pending.drain(..size.min(pending.len())).collect();
                            checking.push(async move {
                                let (checked, failed) =
                                    recheck(engine, kind, &batch, (policy, plan), shutdown).await;
                                (checked, failed, Instant::now())
                            });
                        }
                        Next::Wait => {}
                        Next::Stop => {
                            paced_out = Some(pacer.stop_reason());
                            // The rest is reported at the top of the loop.
                            continue;
                        }
                    }
                }
                if checking.is_empty() && in_flight.is_empty() && !pause.on() && settling.is_empty()
                {
                    break;
                }
                // The stall budget observes while removals go and in their
                // tails, not only at batch edges.
                let observe_at = pacer
                    .observe_at()
                    .filter(|_| !in_flight.is_empty() || pacer.watching());
                tokio::select! {
                    () = pause.wait(pacer, shutdown), if pause.on() => {}
                    () = tokio::time::sleep_until(observe_at.unwrap_or_else(Instant::now)), if observe_at.is_some() => {
                        pacer.observe_due(Instant::now());
                    }
                    Some(()) = settling.next(), if !settling.is_empty() => {}
                    Some(answer) = checking.next(), if !checking.is_empty() => {
                        if let Some(down) = take_rechecked(answer, &mut ready, &mut report) {
                            engine_down = Some(down);
                        }
                    }
                    Some((outcome, slot)) = in_flight.next(), if !in_flight.is_empty() => {
                        pacer.completed(slot);
                        unsettled.removed(&outcome);
                        report(outcome);
                    }
                }
            }
        }
        // Even after a stop: what was removed is freed now, not later (not
        // by an engine that stopped answering, nor past the stop's grace).
        if engine_down.is_none() && unsettled.any {
            settle(engine, kind, shutdown).await;
        }
        // Completion order is noise; the report lists outcomes by id.
        done_here.sort_by(|a, b| a.id.cmp(&b.id));
        outcomes.extend(done_here);
    }
    outcomes
}

/// The answer of a re-check batch: its objects to remove, the outcomes it
/// came to, why the engine could not be asked (`None`: it answered), and
/// when it answered.
type Rechecked<'a> = (
    Vec<Result<(&'a Decision, Target), Outcome>>,
    Option<String>,
    Instant,
);

/// Takes a re-check's answer: what stays eligible is ready, with when it
/// was read; the rest is reported. Returns why nothing more goes when the
/// re-check could not reach the engine.
fn take_rechecked<'a>(
    (checked, failed, at): Rechecked<'a>,
    ready: &mut VecDeque<(&'a Decision, Target, Instant)>,
    report: &mut impl FnMut(Outcome),
) -> Option<String> {
    for checked in checked {
        match checked {
            Ok((d, target)) => ready.push_back((d, target, at)),
            Err(outcome) => report(outcome),
        }
    }
    failed.map(|cause| format!("not attempted: a re-check could not reach the engine ({cause})"))
}

/// Whether a kind's removals are settled yet. Where the bytes go only when
/// the kind settles, a paced run settles before each batch that follows a
/// removal, so that the pacer's next reading weighs the freeing too (see
/// [`Engine::frees_when_settled`]); otherwise once, at the end.
struct Unsettled {
    in_steps: bool,
    /// A removal deleted something since the last settle.
    any: bool,
}

impl Unsettled {
    fn new(in_steps: bool) -> Self {
        Self {
            in_steps,
            any: false,
        }
    }

    fn removed(&mut self, outcome: &Outcome) {
        self.any |= outcome.result == RemovalResult::Deleted;
    }

    /// Before a batch: settle first (and count it settled)? Not once the
    /// engine is down or a stop is asked (`halted`).
    fn step_due(&mut self, halted: bool) -> bool {
        let due = self.in_steps && self.any && !halted;
        self.any &= !due;
        due
    }
}

/// Lets `engine` settle `kind`'s removals, within [`STOP_GRACE`] of a stop.
async fn settle<E: Engine>(engine: &E, kind: Kind, shutdown: &Shutdown) {
    tokio::select! {
        () = engine.settle(kind) => {}
        () = shutdown.wait_past(STOP_GRACE) => tracing::warn!(
            %kind,
            "stopping: settling cut short; the engine frees what was removed at its next garbage collection"
        ),
    }
}

/// What comes before the next batch.
enum Next {
    /// Re-check this many.
    Batch(usize),
    /// A wait is under way.
    Wait,
    /// No more removals this run (the stall budget's `on_max_delay: stop`).
    Stop,
}

/// The pacer's wait before the next batch, while one is under way, with
/// when it began.
#[derive(Default)]
struct Pause(Option<(std::pin::Pin<Box<tokio::time::Sleep>>, Instant)>);

impl Pause {
    fn on(&self) -> bool {
        self.0.is_some()
    }

    /// Before a batch, unless a wait is under way: the batch's size (at
    /// most `limit`), or a wait when the pacer asks for one first (and the
    /// wait begins), or no more removals this run. After a stop nothing
    /// waits: the re-check reports the rest.
    fn gate(&mut self, pacer: &mut Pacer, shutdown: &Shutdown, limit: usize) -> Next {
        if self.on() {
            return Next::Wait;
        }
        if shutdown.is_stopped() {
            return Next::Batch(limit);
        }
        match pacer.gate() {
            Gate::Go(most) => Next::Batch(limit.min(most)),
            Gate::Wait(d) => {
                self.0 = Some((Box::pin(tokio::time::sleep(d)), Instant::now()));
                Next::Wait
            }
            Gate::Stop => Next::Stop,
        }
    }

    /// Ends the wait under way, at its end or on a stop, counting it in
    /// `pacer`. Dropped before then (another branch won), it goes on at
    /// the next call.
    async fn wait(&mut self, pacer: &mut Pacer, shutdown: &Shutdown) {
        let Some((sleep, began)) = self.0.as_mut() else {
            return;
        };
        tokio::select! {
            () = sleep.as_mut() => {}
            () = shutdown.wait() => {}
        }
        pacer.waited(began.elapsed());
        self.0 = None;
    }
}

/// `targets` in waves of rising [`Decision::wave`], each in its given order.
fn waves(targets: Vec<&Decision>) -> Vec<Vec<&Decision>> {
    let mut waves: std::collections::BTreeMap<u32, Vec<&Decision>> =
        std::collections::BTreeMap::new();
    for d in targets {
        waves.entry(d.wave).or_default().push(d);
    }
    waves.into_values().collect()
}

/// How long a re-check's answer may wait for a free removal slot. A
/// removal starts at most this long, plus the re-check call, after the
/// facts it acts on were read: shorter than one listing of a large node's
/// containers took when each object was re-checked that way.
pub const FRESH_FOR: Duration = Duration::from_millis(20);

/// How long, once a stop is asked, a removal already sent may take to
/// answer, and the kind's settling to end. A half-done removal (an image
/// losing its tags one by one, a containerd container whose task went) is
/// worse than a later exit, but the exit must come within 5 s of the
/// signal whatever the engine does: a pod's grace period and systemd's
/// stop timeout end in a SIGKILL, and the report, the audit log and the
/// metrics are written after the removals.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Re-checks `batch` (objects of `kind`) on fresh facts: each decision
/// that its rules still find eligible, or the outcome it has already come
/// to (stop, re-check failed, gone, changed); and, when the engine could
/// not be asked, why. A stop ends the re-check at once: it only reads.
/// `decided` is the policy and the plan the batch came from.
async fn recheck<'a, E: Engine>(
    engine: &E,
    kind: Kind,
    batch: &[&'a Decision],
    decided: (&Policy, &Plan),
    shutdown: &Shutdown,
) -> (Vec<Result<(&'a Decision, Target), Outcome>>, Option<String>) {
    let known = Err;
    let not_deleted = |d: &Decision, reason, why: String| Outcome::of(d, Some((reason, why)));
    let ids: Vec<&str> = batch.iter().map(|d| d.id.as_str()).collect();
    let answer = tokio::select! {
        // A stop asked already wins before the engine is asked anything.
        biased;
        () = shutdown.wait() => None,
        answer = engine.recheck(kind, &ids) => Some(answer),
    };
    let Some(answer) = answer else {
        return (
            batch
                .iter()
                .map(|d| known(not_attempted(d, ASKED_TO_STOP)))
                .collect(),
            None,
        );
    };
    let mut fresh = match answer {
        Ok(fresh) => fresh,
        Err(e) => {
            let cause = Chain(&e).to_string();
            tracing::error!(error = %cause, "re-check failed: nothing more is attempted in this run");
            let why = format!("cannot re-check before removal: {cause}");
            let failed = batch
                .iter()
                .map(|d| known(not_deleted(d, Reason::EngineError, why.clone())))
                .collect();
            return (failed, Some(cause));
        }
    };
    keep_planned_uses(&mut fresh, batch);
    let now = plan::recheck(kind, &ids, &fresh, decided, Utc::now());
    let checked = batch
        .iter()
        .zip(now)
        .map(|(&d, now)| match now {
            None => known(not_deleted(d, Reason::Gone, "gone since planning".to_owned())),
            Some(now) if now.decision == Action::Keep => {
                tracing::info!(kind = %d.kind, id = %d.id, rule = now.rule.as_str(), "changed since planning, kept");
                known(Outcome::changed(
                    d,
                    now.rule,
                    format!(
                        "changed since planning, now kept by {}: {}",
                        now.rule.as_str(),
                        now.detail
                    ),
                ))
            }
            // What the removal acts on: the object as this re-check found it.
            Some(_) => Target::find(&fresh, kind, &d.id).map_or_else(
                || known(not_deleted(d, Reason::Gone, "gone since planning".to_owned())),
                |target| Ok((d, target)),
            ),
        })
        .collect();
    (checked, None)
}

/// Gives each image of a re-check where its plan saw it pulled from, and
/// the last use its plan saw, as a floor:
/// what the usage history in `state_dir` adds (recorded uses, the first
/// sighting of an image the runtime gives no time for) is not re-read by an
/// engine's re-check, and an image without it would look unknown, so young.
/// A later use the re-check finds still wins.
fn keep_planned_uses(fresh: &mut Inventory, batch: &[&Decision]) {
    for image in &mut fresh.images {
        // Where it was pulled from: the plan's evidence, against the names
        // read now (`Decision::provenance`).
        if let Some(provenance) = batch
            .iter()
            .find(|d| d.kind == Kind::Image && d.id == image.id)
            .and_then(|d| d.provenance.as_deref())
        {
            image.provenance = provenance.clone();
        }
        let planned = batch
            .iter()
            .find(|d| d.kind == Kind::Image && d.id == image.id)
            .and_then(|d| {
                Some(Use {
                    at: d.last_used?,
                    source: d.last_used_source?,
                })
            });
        if let Some(planned) = planned
            && image
                .recorded_use
                .is_none_or(|u| (u.at, u.source) < (planned.at, planned.source))
        {
            image.recorded_use = Some(planned);
        }
    }
}

/// The deletions of `kind` in the order they go, how many may be in flight
/// at once, and the disk to watch. Under `images.disk`, images go least
/// recently used first and one at a time, so that each removal is measured
/// before the next starts, and none once the file system is down to
/// `low_percent`.
fn removals_of<'a>(
    plan: &'a Plan,
    policy: &Policy,
    kind: Kind,
    most: usize,
) -> (Vec<&'a Decision>, usize, Option<(std::path::PathBuf, u8)>) {
    let mut targets: Vec<&Decision> = plan.deletions().filter(|d| d.kind == kind).collect();
    let disk = (kind == Kind::Image)
        .then(|| disk_target(plan, policy))
        .flatten();
    if disk.is_none() {
        // BuildKit prunes one request at a time, and a listing taken while
        // it prunes may leave records out: one build cache record at a
        // time costs nothing and keeps each removal's checks true.
        let limit = if kind == Kind::BuildCache { 1 } else { most };
        return (targets, limit, None);
    }
    targets.sort_by(|a, b| a.last_used.cmp(&b.last_used).then_with(|| a.id.cmp(&b.id)));
    (targets, 1, disk)
}

/// The image file system to watch and its `low_percent`, when the plan
/// weighed images by disk pressure.
fn disk_target(plan: &Plan, policy: &Policy) -> Option<(std::path::PathBuf, u8)> {
    image_fs(plan, policy).map(|(path, disk)| (path, disk.low_percent))
}

/// The image file system to watch and its `high_percent`, when the policy
/// prunes images by disk pressure and the plan measured it.
fn over_high(plan: &Plan, policy: &Policy) -> Option<(std::path::PathBuf, u8)> {
    image_fs(plan, policy).map(|(path, disk)| (path, disk.high_percent))
}

/// The image file system the plan measured, and the policy's watermarks.
fn image_fs<'a>(
    plan: &Plan,
    policy: &'a Policy,
) -> Option<(std::path::PathBuf, &'a crate::policy::DiskWatermarks)> {
    let disk = policy.images.disk.as_ref()?;
    let fs = plan.image_fs.as_ref()?;
    Some((std::path::PathBuf::from(&fs.path), disk))
}

/// Why no more images need to go, if the file system at `path` is at or
/// under `low` percent full now. Shared layers make the plan's projection
/// wrong either way, so the executor measures before each removal.
fn reached(path: &std::path::Path, low: u8) -> Option<String> {
    let now = crate::runtime::fs_usage(path)?;
    (now.percent() <= f64::from(low)).then(|| {
        format!(
            "not attempted: the image file system is {:.0}% full, at or under low_percent {low}",
            now.percent()
        )
    })
}

const ASKED_TO_STOP: &str = "not attempted: safeprune was asked to stop";

/// The outcome of an object whose turn did not come, and why: a stop
/// signal, an engine that stopped answering, a disk target met.
fn not_attempted(d: &Decision, why: &str) -> Outcome {
    Outcome::of(d, Some((Reason::NotAttempted, why.to_owned())))
}

/// Removes `d`; once a stop is asked, waits [`STOP_GRACE`] at most for the
/// engine's answer.
async fn remove<E: Engine>(
    engine: &E,
    d: &Decision,
    target: Target,
    shutdown: &Shutdown,
) -> Outcome {
    let not_deleted = |reason, why: String| Outcome::of(d, Some((reason, why)));
    let removal = tokio::select! {
        removal = engine.remove(&target) => removal,
        () = shutdown.wait_past(STOP_GRACE) => {
            // Sent, so not `not_attempted`: the engine may still carry it
            // out, and the next run sees whether it did.
            tracing::warn!(kind = %d.kind, id = %d.id, "stopping: no answer to the removal in time");
            return not_deleted(
                Reason::EngineError,
                format!(
                    "no answer within {}s of the stop signal: the engine may still remove it",
                    STOP_GRACE.as_secs()
                ),
            );
        }
    };
    match removal {
        Removal::Removed => {
            tracing::info!(kind = %d.kind, id = %d.id, name = %d.name, "removed");
            Outcome::of(d, None)
        }
        Removal::Gone => not_deleted(Reason::Gone, "already gone".to_owned()),
        Removal::InUse(msg) => not_deleted(Reason::InUse, format!("in use: {msg}")),
        Removal::Failed(msg) => {
            tracing::warn!(kind = %d.kind, id = %d.id, error = %msg, "removal failed");
            not_deleted(Reason::EngineError, msg)
        }
    }
}

#[cfg(test)]
mod tests;
