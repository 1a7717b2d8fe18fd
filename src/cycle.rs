//! One cycle of `run` or of the daemon: lock, snapshot, plan, check the cap,
//! remove, write the report files. The same code path for both, so a daemon
//! cycle behaves exactly as `safeprune run` does. [`Node`], the connected
//! runtime and its snapshot, lives here because a cycle is what takes one;
//! `plan` and `explain` take one too, without the lock. On a terminal a
//! run asks before it removes (`confirm.rs`); while it removes it shows
//! its progress (`progress.rs`).

mod confirm;
mod progress;

use std::borrow::Cow;
use std::fs::File;
use std::path::Path;
use std::time::Instant;

use chrono::Utc;

use crate::error::AppError;
use crate::execute::{Outcome, execute};
use crate::history::{self, Found, History};
use crate::inventory::{Image, Inventory, RuntimeKind};
use crate::output::Chain;
use crate::pace::Pacer;
use crate::plan::{Plan, plan};
use crate::policy::Policy;
use crate::report::{
    AuditLog, Refusal, Report, RunFacts, last_success_in, render_run_metrics, write_atomically,
};
use crate::reviewed::SavedPlan;
use crate::runtime::{Chosen, Engine, Runtime};
use crate::shutdown::Shutdown;
pub use progress::LOG_TARGET as PROGRESS_LOG_TARGET;

/// A connected runtime and its snapshot, taken once per command or cycle.
pub struct Node {
    pub runtime: Runtime,
    pub inventory: Inventory,
    pub name: String,
    pub started_at: chrono::DateTime<Utc>,
    /// Why this runtime: the policy named it, or what `auto` found.
    pub reason: String,
}

impl Node {
    /// Connects to the runtime the policy names and takes its snapshot;
    /// `removes`: whether the command goes on to remove what it plans.
    ///
    /// # Errors
    /// The runtime does not answer, or a list call fails.
    pub async fn connect(policy: &Policy, removes: bool) -> Result<Self, AppError> {
        let started_at = Utc::now();
        let Chosen { runtime, reason } = Runtime::connect(&policy.runtime).await?;
        let runtime = if policy.build_cache.enabled {
            runtime
        } else {
            runtime.without_build_cache()
        };
        let runtime = if removes {
            runtime
        } else {
            runtime.read_only()
        };
        let runtime = if policy.images.disk.is_some() {
            runtime.measuring_image_fs()
        } else {
            runtime
        };
        let mut inventory = runtime.inventory().await?;
        // An image the runtime says nothing of when it came is as old as
        // its first sighting, which only the history knows.
        let undated = policy.images.enabled && inventory.images.iter().any(Image::arrival_unknown);
        if policy.images.disk.is_some() || policy.images.keep_recent > 0 || undated {
            record_image_uses(&runtime, &mut inventory, &policy.state_dir, started_at).await;
        }
        // Where sizing a container costs a call of its own (containerd),
        // only the containers the policy removes are measured: the plan is
        // the same without sizes, and a kept container's size is unknown.
        // Elsewhere the inventory sized them: no plan to learn which.
        if runtime.measures_containers() {
            let to_measure: Vec<String> = plan(&inventory, policy, started_at)
                .deletions()
                .filter(|d| d.kind == crate::inventory::Kind::Container)
                .map(|d| d.id.clone())
                .collect();
            let to_measure: Vec<&str> = to_measure.iter().map(String::as_str).collect();
            // Boxed: the measuring future is large, and every cycle awaits
            // this.
            Box::pin(runtime.measure_containers(&mut inventory, &to_measure)).await;
        }
        tracing::info!(
            runtime = %runtime.kind(),
            reason = %reason,
            containers = inventory.containers.len(),
            images = inventory.images.len(),
            volumes = inventory.volumes.len(),
            networks = inventory.networks.len(),
            "inventory taken"
        );
        Ok(Self {
            runtime,
            inventory,
            name: node_name(),
            started_at,
            reason,
        })
    }

    /// The plan for this snapshot, as of when it was taken.
    #[must_use]
    pub fn plan(&self, policy: &Policy) -> Plan {
        plan(&self.inventory, policy, self.started_at)
    }

    /// The report of `plan` (made under `policy`) on this node, with what
    /// came of its removals.
    #[must_use]
    pub fn report(
        &self,
        policy: &Policy,
        plan: &Plan,
        dry_run: bool,
        outcomes: Vec<Outcome>,
    ) -> Report {
        let report = Report::new(
            self.runtime.kind().as_str(),
            &self.name,
            self.started_at,
            dry_run,
            plan,
            outcomes,
        )
        .with_runtime_reason(&self.reason)
        .with_not_applicable(self.runtime.not_applicable())
        .with_image_fs_watermarks(policy.images.disk.as_ref());
        if self.runtime.kind() == RuntimeKind::Docker {
            report.with_docker_prune_bytes(&self.inventory)
        } else {
            report
        }
    }
}

/// The node's name, as reports give it: `$SAFEPRUNE_NODE_NAME` when set and
/// not empty (in a pod, whose host name is the pod's, the `DaemonSet` sets it
/// from `spec.nodeName`), else this machine's host name.
#[must_use]
pub fn node_name() -> String {
    if let Some(name) = std::env::var_os(NODE_NAME_VAR).filter(|n| !n.is_empty()) {
        return name.to_string_lossy().into_owned();
    }
    hostname::get().map_or_else(|_| "unknown".into(), |h| h.to_string_lossy().into())
}

/// The environment variable that names the node in reports.
pub const NODE_NAME_VAR: &str = "SAFEPRUNE_NODE_NAME";

/// What a cycle is asked to do beyond the policy.
#[derive(Debug, Clone, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the flags of `run`, each its own question: not a state machine"
)]
pub struct CycleOptions {
    /// Decide and report, remove nothing.
    pub dry_run: bool,
    /// Overrides `safety.max_deletions`.
    pub max_deletions: Option<u64>,
    /// Show removal progress as one line redrawn on stderr, a terminal;
    /// else as a log line (target [`PROGRESS_LOG_TARGET`], `info`) at most
    /// every 10 s, the first after 10 s.
    pub progress_line: bool,
    /// Ask on stderr, and read the answer from stdin, before removing
    /// anything (`run` on a terminal, without `--yes`). Not asked for a dry
    /// run, nor when the plan deletes nothing.
    pub confirm: bool,
    /// `run --no-pace`: this run is not paced, whatever `safety.pace`
    /// says.
    pub no_pace: bool,
    /// `run --plan`: the reviewed plan, and its file.
    pub reviewed: Option<(std::path::PathBuf, SavedPlan)>,
    /// A daemon's schedule's period, for the metrics
    /// (`safeprune_schedule_period_seconds`); `None` for `run`.
    pub schedule_period: Option<std::time::Duration>,
    /// The figures of the run before, where a daemon holds them (what its
    /// `/metrics` serves): a failed run carries their last success
    /// forward. `None`: the textfile's, if one is configured.
    pub previous_metrics: Option<String>,
}

/// Runs one cycle and returns its report; removal failures are in the
/// report, not an error. Once `shutdown` is asked, no new removal starts
/// and every wait on the engine ends (see [`crate::execute::STOP_GRACE`]).
/// The metrics textfile, if configured, is written whatever came of it,
/// except when another run holds the lock: that run owns the file.
///
/// # Errors
/// The lock is held elsewhere, a report file cannot be opened or written,
/// the runtime is unreachable, the plan exceeds the deletion limit (the
/// error then carries the refused plan's report), or the stop came before
/// the inventory was taken.
pub async fn cycle(
    policy: &Policy,
    options: &CycleOptions,
    shutdown: &Shutdown,
) -> Result<Report, AppError> {
    cycle_with_metrics(policy, options, shutdown).await.0
}

/// [`cycle`], also returning the metrics text of the cycle (the textfile's
/// content, whether or not one is configured); `None` when another run
/// held the lock, whose figures these are not.
pub async fn cycle_with_metrics(
    policy: &Policy,
    options: &CycleOptions,
    shutdown: &Shutdown,
) -> (Result<Report, AppError>, Option<String>) {
    let started = Instant::now();
    let started_at = Utc::now();
    // A report file that cannot be written fails the run, but the metrics
    // still tell what it removed.
    let (result, unwritten) = match locked_cycle(policy, options, shutdown).await {
        Ok((report, unwritten)) => (Ok(report), unwritten),
        Err(e) => (Err(e), None),
    };
    let (report, success) = match &result {
        // Nothing was done: the figures of the run before still hold.
        Err(AppError::Locked(_) | AppError::NotConfirmed(_)) => return (result, None),
        Ok(report) => (
            Cow::Borrowed(report),
            report.summary.failed == 0 && unwritten.is_none(),
        ),
        Err(AppError::OverLimit { report, .. }) => (Cow::Borrowed(report.as_ref()), false),
        // No inventory (also when a stop cut it short): the run still
        // failed, and an alert must see it.
        Err(_) => (
            Cow::Owned(Report::new(
                policy.runtime.kind.as_str(),
                &node_name(),
                started_at,
                options.dry_run,
                &Plan::default(),
                Vec::new(),
            )),
            false,
        ),
    };
    // A failed run does not end the last success: the figures before it
    // say when that was.
    let last_success = if success {
        Some(report.started_at)
    } else {
        let previous = match &options.previous_metrics {
            Some(text) => Some(Cow::Borrowed(text.as_str())),
            None => configured(&policy.report.metrics_textfile)
                .and_then(|path| std::fs::read_to_string(path).ok())
                .map(Cow::Owned),
        };
        previous.as_deref().and_then(last_success_in)
    };
    let facts = RunFacts {
        duration: started.elapsed(),
        success,
        last_success,
        schedule_period: options.schedule_period,
    };
    let text = render_run_metrics(&report, &facts);
    let result = unwritten.map_or(result, Err);
    let Some(path) = configured(&policy.report.metrics_textfile) else {
        return (result, Some(text));
    };
    if path.extension().is_none_or(|e| e != "prom") {
        tracing::warn!(path = %path.display(), "node_exporter reads only *.prom textfiles");
    }
    let result = match write_atomically(path, text.as_bytes()) {
        Ok(()) => result,
        Err(source) => {
            let error = AppError::File {
                path: path.to_owned(),
                source,
            };
            if result.is_ok() {
                Err(error)
            } else {
                tracing::error!(error = %Chain(&error), "cannot write the metrics textfile");
                result
            }
        }
    };
    (result, Some(text))
}

async fn locked_cycle(
    policy: &Policy,
    options: &CycleOptions,
    shutdown: &Shutdown,
) -> Result<(Report, Option<AppError>), AppError> {
    // A run holds the lock (docs/contracts.md, "The lock"). A dry one takes it
    // when it can, so that its report files never interleave with a real
    // run's, and goes on without it when the file cannot be opened (not
    // root): it removes nothing.
    let (_lock, reread) = lock_and_reread(policy, options.dry_run)?;
    let policy = reread.as_deref().unwrap_or(policy);
    // Open the audit log before anything is removed: a bad path stops the
    // cycle while nothing has happened yet.
    let mut audit = match configured(&policy.report.audit_log) {
        Some(path) if !options.dry_run => {
            Some(AuditLog::open(path).map_err(|source| AppError::File {
                path: path.to_owned(),
                source,
            })?)
        }
        _ => None,
    };
    // Reaching the engine, its inventory and the image uses it remembers
    // are waits on the engine: a stop ends them (an engine that never
    // answers holds each for its deadline, 10 s to 120 s).
    let node = tokio::select! {
        biased;
        () = shutdown.wait() => {
            return Err(AppError::Stopped {
                runtime: policy.runtime.kind.as_str(),
            });
        }
        node = Node::connect(policy, !options.dry_run) => node?,
    };
    // `run --plan`: only what the reviewed plan deletes, if it is this
    // node's, under this policy, and recent enough.
    let (plan, mut skipped) = match &options.reviewed {
        None => (node.plan(policy), Vec::new()),
        Some((path, saved)) => {
            if let Some(why) = saved.refusal(&node.name, node.runtime.kind(), policy, Utc::now()) {
                return Err(AppError::Usage(format!(
                    "refusing the plan {}: {why}; nothing removed",
                    path.display()
                )));
            }
            let plan =
                crate::plan::plan_within(&node.inventory, policy, node.started_at, &saved.within());
            let skipped = saved.skipped(&plan);
            (plan, skipped)
        }
    };
    within_limit(&node, policy, &plan, options)?;
    // Asked once the plan is known and allowed by the cap: a refused run
    // is refused without a question.
    if options.confirm && !options.dry_run && plan.deletion_count() > 0 {
        confirm::ask(&plan, shutdown).await?;
    }
    let (outcomes, pace) = if options.dry_run {
        (Vec::new(), None)
    } else {
        // A workloads' cgroup written in the policy that cannot be read
        // fails the run before anything is removed.
        let mut pacer = if options.no_pace && policy.safety.pace.is_some() {
            tracing::warn!("safety.pace: off for this run (--no-pace)");
            Pacer::unpaced(policy.safety.concurrency)
        } else {
            Pacer::for_policy(policy).map_err(AppError::Usage)?
        };
        let mut progress = progress::Progress::for_run(options.progress_line, &plan);
        let mut outcomes = execute(&node.runtime, &plan, policy, &mut pacer, shutdown, |o, done, _| {
            if let Some(log) = audit.as_mut()
                && let Err(e) = log.record(&node.name, node.runtime.kind().as_str(), o)
            {
                tracing::error!(path = %log.path().display(), error = %e, "cannot append to the audit log");
            }
            progress.show(o, done);
        })
        .await;
        progress.end();
        if shutdown.is_stopped() {
            tracing::warn!(
                "stopped by a signal: removals in flight answered or were given up, the rest not attempted"
            );
        }
        outcomes.append(&mut skipped);
        (outcomes, pacer.report())
    };
    let after = if options.dry_run {
        None
    } else {
        plan.image_fs
            .as_ref()
            .and_then(|fs| crate::runtime::fs_usage(Path::new(&fs.path)))
    };
    let report = node
        .report(policy, &plan, options.dry_run, outcomes)
        .with_image_fs_after(after.as_ref())
        .with_pace(pace);
    tracing::info!(
        deleted = report.deleted_count(),
        skipped = report.summary.skipped,
        failed = report.summary.failed,
        reclaimed_bytes = report.summary.reclaimed_bytes,
        "run finished"
    );
    let unwritten = configured(&policy.report.json_path).and_then(|path| {
        write_atomically(path, report.to_json().as_bytes())
            .err()
            .map(|source| AppError::File {
                path: path.to_owned(),
                source,
            })
    });
    Ok((report, unwritten))
}

/// Refuses a run whose plan deletes more than the cap
/// (`safety.max_deletions`, or `--max-deletions`); the error carries the
/// refused plan's report. A dry run is never refused.
fn within_limit(
    node: &Node,
    policy: &Policy,
    plan: &Plan,
    options: &CycleOptions,
) -> Result<(), AppError> {
    let limit = options.max_deletions.unwrap_or(policy.safety.max_deletions);
    let planned = plan.deletion_count();
    if options.dry_run || u64::try_from(planned).unwrap_or(u64::MAX) <= limit {
        return Ok(());
    }
    Err(AppError::OverLimit {
        planned,
        limit,
        report: Box::new(
            node.report(policy, plan, true, vec![])
                .refused(Refusal { planned, limit }),
        ),
    })
}

/// Takes the lock, then reads kubelet's configuration again
/// (`images.disk.from_kubelet`): kubelet applies its file when it
/// restarts, so each run and daemon cycle follows it. The policy with what
/// changed, if anything did.
fn lock_and_reread(
    policy: &Policy,
    dry_run: bool,
) -> Result<(Option<File>, Option<Box<Policy>>), AppError> {
    let lock = match lock(&policy.lock_file) {
        Ok(file) => Some(file),
        Err(AppError::File { path, source }) if dry_run => {
            tracing::info!(
                path = %path.display(),
                error = %crate::output::io_words(&source),
                "a dry run goes on without the lock, which it cannot open"
            );
            None
        }
        Err(e) => return Err(e),
    };
    Ok((lock, policy.kubelet_reread()?))
}

/// Takes the exclusive, non-blocking flock of docs/contracts.md, held while the
/// returned file lives.
fn lock(path: &Path) -> Result<File, AppError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|source| AppError::File {
            path: path.to_owned(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(AppError::Locked(path.to_owned())),
        Err(std::fs::TryLockError::Error(source)) => Err(AppError::File {
            path: path.to_owned(),
            source,
        }),
    }
}

/// A non-empty report path from the policy.
fn configured(path: &str) -> Option<&Path> {
    (!path.is_empty()).then(|| Path::new(path))
}

/// Brings the usage history in `state_dir` up to date with the image uses
/// the engine still remembers, and gives the inventory's images the uses
/// recorded (`images.disk` and `images.keep_recent` order images by last
/// use). A history that cannot be read or written costs precision, never
/// the run: it is logged.
///
/// `seen_at` is when the inventory was taken: what it sees for the first
/// time is first seen then, not later, or a plan made as of that moment
/// would find it younger than `min_age: 0`.
async fn record_image_uses(
    runtime: &Runtime,
    inventory: &mut Inventory,
    state_dir: &Path,
    seen_at: chrono::DateTime<Utc>,
) {
    // What the engine still remembers since the last record, read before
    // the history's own lock (`state_dir/image-usage.lock`) is taken: the
    // engine may take its time, and the daemon's follower writes meanwhile.
    let (history, _) = History::load(state_dir);
    let read_from = Utc::now();
    let uses = runtime.image_uses(inventory, history.events_until).await;
    let now = seen_at;
    let (history, found, written) = history::update(state_dir, |recorded| {
        for (reference, used) in uses {
            if let Some(id) = history::image_id_of(inventory, &reference) {
                recorded.record(id, used, now);
            }
        }
        // From where this read began: what came during it is read again,
        // which records nothing twice.
        recorded.events_until = Some(read_from);
        recorded.prune(inventory, now);
    });
    if found == Found::Missing {
        // Said once per node, at its first run: warn, so that it is seen.
        tracing::warn!(
            dir = %state_dir.display(),
            "no image usage history yet: images are ordered by what the engine reports (pulls, tags, the containers and events it still has)"
        );
    }
    history.apply(inventory);
    if let Err(e) = written {
        tracing::warn!(dir = %state_dir.display(), error = %e, "cannot write the image usage history");
    }
}
