//! Between its cycles, the daemon follows the engine's events and records
//! each image use in the usage history: Docker keeps a short
//! event history and containerd none, so a use between two cycles a week
//! apart would otherwise be lost, and a container created and deleted
//! meanwhile leaves no other trace.
//!
//! It follows only while the policy in force orders images by last use
//! (`images.disk` or `images.keep_recent`), from the engine the policy
//! names, into its `state_dir`; a reload that changes any of them starts
//! it again. An engine that is down or restarts is reconnected with
//! backoff. Uses are written in batches at most [`FLUSH_AFTER`] apart, and
//! what is pending is written when the daemon stops.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::history;
use crate::inventory::Use;
use crate::output::Chain;
use crate::policy::{Policy, RuntimeConfig};
use crate::runtime::{Engine, Runtime};

/// The longest a recorded use waits before it is written.
const FLUSH_AFTER: Duration = Duration::from_secs(2);
/// The longest pause between two attempts to follow an engine that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long a stopping daemon waits for the last uses to be written: a
/// write takes milliseconds, and the daemon must exit within 5 s of the
/// signal, its cycle's grace included.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// What is followed, and where it is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    runtime: RuntimeConfig,
    state_dir: PathBuf,
}

impl Target {
    /// What `policy` asks to follow; `None` when it does not order images
    /// by last use.
    fn of(policy: &Policy) -> Option<Self> {
        (policy.images.disk.is_some() || policy.images.keep_recent > 0).then(|| Self {
            runtime: policy.runtime.clone(),
            state_dir: policy.state_dir.clone(),
        })
    }
}

/// The follower task, told of each policy put in force.
pub(super) struct Follower {
    targets: watch::Sender<Option<Target>>,
    task: JoinHandle<()>,
}

impl Follower {
    /// Starts following what `policy` asks.
    pub(super) fn start(policy: &Policy) -> Self {
        let (targets, receiver) = watch::channel(Target::of(policy));
        Self {
            targets,
            task: tokio::spawn(follow(receiver)),
        }
    }

    /// Follows what `policy` asks from now on (nothing changes if that is
    /// what it follows already).
    pub(super) fn policy_in_force(&self, policy: &Policy) {
        self.targets.send_if_modified(|target| {
            let new = Target::of(policy);
            let changed = *target != new;
            *target = new;
            changed
        });
    }

    /// Stops following and writes what is pending.
    pub(super) async fn stop(self) {
        self.targets.send_replace(None);
        drop(self.targets);
        if tokio::time::timeout(STOP_TIMEOUT, self.task).await.is_err() {
            tracing::warn!("the last image uses were not written in time");
        }
    }
}

/// Follows each target in turn until the sender is gone.
async fn follow(mut targets: watch::Receiver<Option<Target>>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let target = targets.borrow_and_update().clone();
        let Some(target) = target else {
            if targets.changed().await.is_err() {
                return;
            }
            continue;
        };
        let started = tokio::time::Instant::now();
        let ended = follow_until_changed(&target, &mut targets).await;
        // A stream that ran a while and broke starts again soon.
        if started.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_secs(1);
        }
        match ended {
            Ok(Ended::Changed) => {
                backoff = Duration::from_secs(1);
                continue;
            }
            Ok(Ended::Stream) => {
                tracing::warn!("the engine's event stream ended: following it again");
            }
            Err(e) => {
                tracing::warn!(error = %Chain(&e), retry_in_seconds = backoff.as_secs(), "cannot follow the engine's events: image uses go unrecorded until it answers");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            changed = targets.changed() => if changed.is_err() {
                return;
            },
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Why following one target ended.
enum Ended {
    /// The policy in force changed, or the daemon stops.
    Changed,
    /// The engine ended its stream.
    Stream,
}

/// Follows `target`'s engine until its stream ends or the target changes,
/// recording uses as they come; what is pending is written before it
/// returns.
async fn follow_until_changed(
    target: &Target,
    targets: &mut watch::Receiver<Option<Target>>,
) -> Result<Ended, crate::runtime::RuntimeError> {
    let runtime = tokio::select! {
        chosen = Runtime::connect(&target.runtime) => chosen?.runtime,
        _ = targets.changed() => return Ok(Ended::Changed),
    };
    tracing::debug!(runtime = %runtime.kind(), dir = %target.state_dir.display(), "connected: following the engine's events");
    let (sender, receiver) = mpsc::channel(1024);
    let following = async move {
        tokio::select! {
            result = runtime.follow_image_uses(&sender) => result.map(|()| Ended::Stream),
            _ = targets.changed() => Ok(Ended::Changed),
        }
        // The sender goes here: the recorder writes what is left and ends.
    };
    let (result, ()) = tokio::join!(following, record(receiver, &target.state_dir));
    result
}

/// Writes the uses `receiver` gets to the history in `dir`, in batches,
/// until it closes.
async fn record(mut receiver: mpsc::Receiver<(String, Use)>, dir: &std::path::Path) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + FLUSH_AFTER;
        loop {
            tokio::select! {
                next = receiver.recv() => match next {
                    Some(used) => batch.push(used),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let dir = dir.to_owned();
        let count = batch.len();
        let written = tokio::task::spawn_blocking(move || {
            history::record_uses(&dir, &batch, chrono::Utc::now())
        })
        .await;
        match written {
            Ok(Ok(())) => tracing::debug!(uses = count, "image uses recorded"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, uses = count, "cannot write the image usage history: these uses are lost");
            }
            Err(e) => tracing::warn!(error = %e, "recording image uses failed"),
        }
    }
}
