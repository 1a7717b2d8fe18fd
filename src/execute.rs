//! The executor: the only code that deletes.
//!
//! Kinds go in removal order (containers first, so that what they held is
//! free when images, volumes and networks come). Before each removal the
//! executor asks the runtime again and runs the planner's rules on the fresh
//! answer: a pod may have restarted since planning. It never forces; a 404 or
//! 409 is `skipped`, anything else `failed`. At most `safety.concurrency`
//! removals are in flight, and once `stop` is set no new one starts.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::Utc;
use futures_util::{StreamExt, stream};

use crate::plan::{self, Action, Decision, Plan};
use crate::policy::Policy;
use crate::report::{Outcome, RemovalResult};
use crate::runtime::{Engine, Kind, Removal};

/// Carries out every deletion of `plan` and returns what came of each, in
/// removal order. `on_outcome` sees each outcome as it happens (audit log,
/// progress), with the number done so far and the total.
pub async fn execute<E: Engine>(
    engine: &E,
    plan: &Plan,
    policy: &Policy,
    stop: &AtomicBool,
    mut on_outcome: impl FnMut(&Outcome, usize, usize),
) -> Vec<Outcome> {
    let total = plan.deletion_count();
    let mut outcomes = Vec::with_capacity(total);
    for kind in Kind::REMOVAL_ORDER {
        let targets: Vec<&Decision> = plan.deletions().filter(|d| d.kind == kind).collect();
        let mut results = stream::iter(targets)
            .map(|d| attempt(engine, d, policy, stop))
            .buffer_unordered(policy.safety.concurrency.0);
        let mut done_here = Vec::new();
        while let Some(outcome) = results.next().await {
            on_outcome(&outcome, outcomes.len() + done_here.len() + 1, total);
            done_here.push(outcome);
        }
        // Completion order is noise; the report lists outcomes by id.
        done_here.sort_by(|a, b| a.id.cmp(&b.id));
        outcomes.extend(done_here);
    }
    outcomes
}

async fn attempt<E: Engine>(
    engine: &E,
    d: &Decision,
    policy: &Policy,
    stop: &AtomicBool,
) -> Outcome {
    let outcome = |result, error: Option<String>| Outcome {
        kind: d.kind,
        id: d.id.clone(),
        name: d.name.clone(),
        result,
        bytes: d.bytes,
        error,
    };
    let skipped = |why: String| outcome(RemovalResult::Skipped, Some(why));
    if stop.load(Ordering::SeqCst) {
        return skipped("not attempted: safeprune was asked to stop".to_owned());
    }
    let fresh = match engine.recheck(d.kind, &d.id).await {
        Ok(fresh) => fresh,
        Err(e) => {
            return outcome(
                RemovalResult::Failed,
                Some(format!("cannot re-check before removal: {e}")),
            );
        }
    };
    match plan::recheck(d.kind, &d.id, &fresh, policy, Utc::now()) {
        None => return skipped("gone since planning".to_owned()),
        Some(now) if now.decision == Action::Keep => {
            tracing::info!(kind = %d.kind, id = %d.id, rule = now.rule.as_str(), "changed since planning, kept");
            return skipped(format!(
                "changed since planning, now kept by {}: {}",
                now.rule.as_str(),
                now.detail
            ));
        }
        Some(_) => {}
    }
    match engine.remove(d.kind, &d.id).await {
        Removal::Removed => {
            tracing::info!(kind = %d.kind, id = %d.id, name = %d.name, "removed");
            outcome(RemovalResult::Deleted, None)
        }
        Removal::Gone => skipped("already gone".to_owned()),
        Removal::Conflict(msg) => skipped(format!("in use or changed: {msg}")),
        Removal::Failed(msg) => {
            tracing::warn!(kind = %d.kind, id = %d.id, error = %msg, "removal failed");
            outcome(RemovalResult::Failed, Some(msg))
        }
    }
}

#[cfg(test)]
mod tests;
