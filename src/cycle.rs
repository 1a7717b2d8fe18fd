//! One cycle of `run` or of the daemon: lock, snapshot, plan, check the cap,
//! remove, write the report files. The same code path for both, so a daemon
//! cycle behaves exactly as `safeprune run` does.

use std::borrow::Cow;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use chrono::Utc;

use crate::app::{AppError, Node, node_name};
use crate::execute::execute;
use crate::plan::Plan;
use crate::policy::Policy;
use crate::report::{AuditLog, RemovalResult, Report, render_metrics, write_atomically};
use crate::runtime::Engine;

/// What a cycle is asked to do beyond the policy.
#[derive(Debug, Clone, Default)]
pub struct CycleOptions {
    /// Decide and report, remove nothing.
    pub dry_run: bool,
    /// Overrides `safety.max_deletions`.
    pub max_deletions: Option<u64>,
    /// Show removal progress on stderr.
    pub progress: bool,
}

/// Runs one cycle and returns its report; removal failures are in the
/// report, not an error. Once `stop` is set, no new removal starts. The
/// metrics textfile, if configured, is written whatever came of it, except
/// when another run holds the lock: that run owns the file.
///
/// # Errors
/// The lock is held elsewhere, a report file cannot be opened or written,
/// the runtime is unreachable, or the plan exceeds the deletion limit (the
/// error then carries the refused plan's report).
pub async fn cycle(
    policy: &Policy,
    options: &CycleOptions,
    stop: &AtomicBool,
) -> Result<Report, AppError> {
    let started = Instant::now();
    let started_at = Utc::now();
    let result = locked_cycle(policy, options, stop).await;
    let Some(path) = configured(&policy.report.metrics_textfile) else {
        return result;
    };
    let (report, success) = match &result {
        Err(AppError::Locked(_)) => return result,
        Ok(report) => (Cow::Borrowed(report), report.summary.failed == 0),
        Err(AppError::OverLimit { report, .. }) => (Cow::Borrowed(report.as_ref()), false),
        // No inventory: the run still failed, and an alert must see it.
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
    if path.extension().is_none_or(|e| e != "prom") {
        tracing::warn!(path = %path.display(), "node_exporter reads only *.prom textfiles");
    }
    let text = render_metrics(&report, started.elapsed(), success);
    match write_atomically(path, text.as_bytes()) {
        Ok(()) => result,
        Err(source) => {
            let error = AppError::File {
                path: path.to_owned(),
                source,
            };
            if result.is_ok() {
                return Err(error);
            }
            tracing::error!(%error, "cannot write the metrics textfile");
            result
        }
    }
}

async fn locked_cycle(
    policy: &Policy,
    options: &CycleOptions,
    stop: &AtomicBool,
) -> Result<Report, AppError> {
    // Every run holds the lock, a dry one too (DESIGN.md): its report is
    // "the last run's", and it must not interleave with a real run.
    let _lock = lock(&policy.lock_file)?;
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
    let node = Node::connect(policy).await?;
    let plan = node.plan(policy);
    let limit = options.max_deletions.unwrap_or(policy.safety.max_deletions);
    let planned = plan.deletion_count();
    if !options.dry_run && u64::try_from(planned).unwrap_or(u64::MAX) > limit {
        return Err(AppError::OverLimit {
            planned,
            limit,
            report: Box::new(node.report(&plan, true, vec![])),
        });
    }
    let outcomes = if options.dry_run {
        Vec::new()
    } else {
        let outcomes = execute(&node.runtime, &plan, policy, stop, |o, done, total| {
            if let Some(log) = audit.as_mut()
                && let Err(e) = log.record(&node.name, node.runtime.name(), o)
            {
                tracing::error!(path = %log.path().display(), error = %e, "cannot append to the audit log");
            }
            if options.progress {
                eprint!("\rremoved {done}/{total}  ");
                if done == total {
                    eprintln!();
                }
            }
        })
        .await;
        if stop.load(Ordering::SeqCst) {
            tracing::warn!(
                "stopped by a signal: removals in flight finished, the rest not attempted"
            );
        }
        outcomes
    };
    let report = node.report(&plan, options.dry_run, outcomes);
    tracing::info!(
        deleted = report
            .outcomes
            .iter()
            .filter(|o| o.result == RemovalResult::Deleted)
            .count(),
        skipped = report.summary.skipped,
        failed = report.summary.failed,
        reclaimed_bytes = report.summary.reclaimed_bytes,
        "run finished"
    );
    if let Some(path) = configured(&policy.report.json_path) {
        write_atomically(path, report.to_json().as_bytes()).map_err(|source| AppError::File {
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(report)
}

/// Takes the exclusive, non-blocking flock of DESIGN.md, held while the
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
