//! The containerd adapter: containerd's own API for what holds disk
//! (containers, tasks, images, content), CRI on the same socket for what
//! kubelet owns (sandboxes and their READY state, container states and exit
//! times, the sandbox image). An [`Inventory`] out, one removal at a time.
//!
//! Every containerd quirk safeprune has to know lives in this module, next
//! to the code that handles it. "Measured" means: against containerd 1.6.20
//! from Debian 12, see `tests/integration/containerd_adapter.rs`. `transport` reaches
//! containerd, `convert` turns the answers into the inventory's data,
//! `native` and `cri` make the calls; `recheck` reads a batch again before
//! its removal, `remove` removes one object.
//!
//! Ids are `<namespace>/<id>` for containers and `<namespace>/<target
//! digest>` for images (one image per target, whatever names point at it).

mod convert;
mod cri;
mod images;
mod recheck;
mod remove;
mod transport;
mod uses;
mod watch;

use containerd_client::tonic::Status;
use containerd_client::tonic::transport::Channel;
use futures_util::future::try_join_all;
use futures_util::{StreamExt, stream};
use std::time::Duration;

use tokio::time::Instant;

use self::convert::{CriView, containers_of, sandboxes_of, split_qualified};
use self::images::{Pins, images_of};
use self::watch::{Known, Watch};
use super::engine::{Engine, Removal, Target};
use super::error::RuntimeError;
use super::grpc::containerd as native;
use crate::inventory::Kind;
use crate::inventory::{Container, Inventory};

const RUNTIME: &str = "containerd";
/// The namespace the CRI plugin keeps kubelet's objects in.
const CRI_NAMESPACE: &str = "k8s.io";
/// How many CRI `ContainerStatus` calls run at once.
const STATUS_CONCURRENCY: usize = 8;
/// How many snapshots are measured at once: each is a walk of a directory.
const USAGE_CONCURRENCY: usize = 4;
/// How long a removal waits for a barrier that another re-check or
/// removal publishes after it began, before it publishes one of its own:
/// the executor re-checks the next batch once the last of this one has
/// begun, so its barrier serves the batch's removals.
const SHARE_WITHIN: Duration = Duration::from_millis(25);

/// A connection to one containerd, over its unix socket.
pub struct ContainerdRuntime {
    /// One channel for both containerd's API and CRI: both serve the same
    /// socket. Every call on it has a deadline of
    /// [`crate::runtime::grpc::REQUEST_TIMEOUT`].
    channel: Channel,
    /// For the event stream alone, which lives as long as the run: no
    /// deadline. Connects when first used.
    stream_channel: Channel,
    /// The namespaces to prune, in the order configured, without Docker's.
    namespaces: Vec<String>,
    /// The containers and image names since the last inventory, from
    /// containerd's events; `None` when the subscription failed or broke
    /// (re-checks then list everything).
    watch: Box<tokio::sync::Mutex<Option<Watch>>>,
    /// Told each time the watch has synced (or failed to).
    synced: tokio::sync::Notify,
    /// Whether an inventory subscribes to containerd's events for the
    /// re-checks that follow: not for a command that removes nothing.
    follow_events: bool,
    /// Whether the inventory measures the image file system (CRI's
    /// `ImageFsInfo` names it; `images.disk`).
    measure_image_fs: bool,
}

impl ContainerdRuntime {
    /// The namespaces this runtime prunes.
    #[must_use]
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// For a command that removes nothing (`plan`, `explain`, `run
    /// --dry-run`): its inventory does not subscribe to containerd's
    /// events, so it publishes no barrier event on the node.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.follow_events = false;
        self
    }

    /// This runtime, with inventories that measure the file system that
    /// CRI's `ImageFsInfo` names as the image store.
    #[must_use]
    pub fn measuring_image_fs(mut self) -> Self {
        self.measure_image_fs = true;
        self
    }

    /// The image file system CRI names; `None` without CRI, or when it
    /// cannot be measured from here.
    async fn image_fs(&self) -> Option<crate::inventory::FsUsage> {
        match cri::image_fs_mountpoint(&self.channel).await {
            Ok(Some(mountpoint)) => super::fs::fs_usage(std::path::Path::new(&mountpoint)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not say where images are stored");
                None
            }
        }
    }

    /// Whether re-checks follow containerd's events (from an inventory on,
    /// until the stream breaks) rather than list every container.
    pub async fn follows_events(&self) -> bool {
        self.watch.lock().await.is_some()
    }

    fn has_cri_namespace(&self) -> bool {
        self.namespaces.iter().any(|n| n == CRI_NAMESPACE)
    }

    fn call_error(call: &'static str) -> impl FnOnce(Status) -> RuntimeError {
        move |e| RuntimeError::Call {
            runtime: RUNTIME,
            call,
            source: Box::new(e),
        }
    }

    /// What CRI says about the CRI namespace; `None`, with a warning, when
    /// it does not answer (no CRI plugin, or it is failing).
    async fn cri_view(&self) -> Option<CriView> {
        match cri::read(&self.channel).await {
            Ok(view) => Some(view),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "CRI does not answer: reading {CRI_NAMESPACE} natively (sandbox ids from \
                     the OCI spec, states from tasks, exit times unknown); CRI containers \
                     cannot be removed"
                );
                None
            }
        }
    }

    /// The configured namespace of a qualified id, with the id in it.
    fn parse_id<'a>(&self, id: &'a str) -> Result<(&'a str, &'a str), String> {
        let (namespace, local) = split_qualified(id)
            .ok_or_else(|| format!("{id:?} is not a containerd id (<namespace>/<id>)"))?;
        if !self.namespaces.iter().any(|n| n == namespace) {
            return Err(format!(
                "namespace {namespace} of {id} is not one safeprune prunes"
            ));
        }
        Ok((namespace, local))
    }

    /// A live subscription to the pruned namespaces' events; `None`, with
    /// a warning, when containerd will not give one.
    async fn subscribe(&self) -> Option<Watch> {
        if self.namespaces.is_empty() {
            return None;
        }
        match Watch::subscribe(&self.stream_channel, &self.channel, &self.namespaces).await {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot follow containerd's events: each re-check lists every container"
                );
                None
            }
        }
    }

    /// Runs `read` on the watch once it is up to date, for a re-check: see
    /// [`Self::synced_since`]; it publishes a barrier at once when no sync
    /// has since it began, and the removals waiting on the watch then
    /// share it. `None` when there is no watch or it broke.
    async fn synced<R>(&self, read: impl FnOnce(&Known) -> R) -> Option<R> {
        self.synced_since(Instant::now(), Duration::ZERO, read)
            .await
    }

    /// Runs `read` on the watch for a removal that began at `began`: see
    /// [`Self::synced_since`]. It waits up to [`SHARE_WITHIN`] for a
    /// barrier published by another (the next batch's re-check, mostly)
    /// before it publishes its own.
    async fn synced_for_removal<R>(
        &self,
        began: Instant,
        read: impl FnOnce(&Known) -> R,
    ) -> Option<R> {
        self.synced_since(began, SHARE_WITHIN, read).await
    }

    /// Runs `read` on the watch once it holds every event containerd
    /// published before a barrier of its own published at or after
    /// `since`: the last sync's, when it was published late enough, else a
    /// new one, which this publishes once `wait` has passed since `since`
    /// without another sync. So the re-checks and removals waiting on the
    /// watch share barriers, each as fresh as with a barrier of its own.
    /// `None` when there is no watch or it broke (it is then dropped, with
    /// a warning).
    async fn synced_since<R>(
        &self,
        since: Instant,
        wait: Duration,
        read: impl FnOnce(&Known) -> R,
    ) -> Option<R> {
        let deadline = since + wait;
        loop {
            let next_sync = self.synced.notified();
            tokio::pin!(next_sync);
            next_sync.as_mut().enable();
            {
                let mut guard = self.watch.lock().await;
                let watch = guard.as_mut()?;
                if watch.synced_since(since) {
                    return Some(read(watch.known()));
                }
                if Instant::now() >= deadline {
                    // The removals the executor started in the same turn
                    // begin meanwhile, and this barrier, published after
                    // them, serves them too.
                    tokio::task::yield_now().await;
                    let synced = watch.sync(&self.channel).await;
                    self.synced.notify_waiters();
                    return match synced {
                        Ok(()) => Some(read(watch.known())),
                        Err(e) => {
                            tracing::warn!(
                                error = %e,
                                "lost containerd's events: re-checks list every container from now on"
                            );
                            *guard = None;
                            None
                        }
                    };
                }
            }
            // Another's sync, or the end of the wait.
            let _ = tokio::time::timeout_at(deadline, next_sync).await;
        }
    }
}

impl Engine for ContainerdRuntime {
    fn kind(&self) -> crate::inventory::RuntimeKind {
        crate::inventory::RuntimeKind::Containerd
    }

    fn not_applicable(&self) -> &'static [Kind] {
        &[Kind::Volume, Kind::Network, Kind::BuildCache]
    }

    async fn follow_image_uses(
        &self,
        uses: &tokio::sync::mpsc::Sender<(String, crate::inventory::Use)>,
    ) -> Result<(), RuntimeError> {
        uses::follow(&self.stream_channel, &self.channel, &self.namespaces, uses)
            .await
            .map_err(Self::call_error("follow events"))
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        // Subscribed before anything is listed: whatever changes from here
        // on reaches the watch.
        let mut watch = if self.follow_events {
            self.subscribe().await
        } else {
            None
        };
        let (cri, data) = tokio::join!(
            async {
                if self.has_cri_namespace() {
                    self.cri_view().await
                } else {
                    None
                }
            },
            try_join_all(
                self.namespaces
                    .iter()
                    .map(|namespace| native::read_namespace(&self.channel, namespace)),
            ),
        );
        let data = data.map_err(Self::call_error("read namespace"))?;
        if let Some(watch) = watch.as_mut() {
            watch.fill(&data, cri.as_ref());
        }
        *self.watch.lock().await = watch;
        let mut inventory = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        for namespace in &data {
            let is_cri = namespace.namespace == CRI_NAMESPACE;
            let view = cri.as_ref().filter(|_| is_cri);
            let containers = containers_of(namespace, view);
            // Where CRI does not answer, `pins` takes the sandboxes' own
            // images instead.
            let sandbox_image = view.and_then(|v| v.sandbox_image.clone());
            let pinned = pins(
                &namespace.namespace,
                sandbox_image.as_ref(),
                view.map_or(&[][..], |v| &v.pinned),
                view.is_some(),
                &containers,
            );
            inventory.images.extend(images_of(namespace, &pinned));
            if is_cri {
                inventory
                    .sandboxes
                    .extend(sandboxes_of(CRI_NAMESPACE, view, &containers));
            }
            inventory.containers.extend(containers);
        }
        inventory.containers.sort_by(|a, b| a.id.cmp(&b.id));
        inventory.images.sort_by(|a, b| a.id.cmp(&b.id));
        images::with_unique_sizes(&mut inventory.images, &data);
        if self.measure_image_fs {
            inventory.image_fs = self.image_fs().await;
        }
        tracing::debug!(
            namespaces = ?self.namespaces,
            containers = inventory.containers.len(),
            images = inventory.images.len(),
            sandboxes = inventory.sandboxes.len(),
            cri = cri.is_some(),
            "containerd inventory taken"
        );
        Ok(inventory)
    }

    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        self.recheck_batch(kind, ids).await
    }

    fn measures_containers(&self) -> bool {
        true
    }

    /// Each stopped container of `ids` with what removing it frees: its
    /// writable snapshot, measured by the snapshotter (on overlayfs, a walk
    /// of its upper directory), one call each, a few at once. containerd
    /// has no call that sizes more than one snapshot, so the inventory
    /// leaves this to the containers a plan removes. Live containers are
    /// not measured: they are not removed. A snapshot that cannot be
    /// measured leaves the size unknown.
    async fn measure_containers(&self, inventory: &mut Inventory, ids: &[&str]) {
        let ids: std::collections::HashSet<&str> = ids.iter().copied().collect();
        let wanted: Vec<(usize, String, String, String)> = inventory
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.state.is_live() && ids.contains(c.id.as_str()))
            .filter_map(|(at, c)| {
                let (namespace, _) = split_qualified(&c.id)?;
                let layer = c.layer.as_ref()?;
                Some((
                    at,
                    namespace.to_owned(),
                    layer.snapshotter.clone(),
                    layer.key.clone(),
                ))
            })
            .collect();
        let sizes: Vec<(usize, Option<u64>)> = stream::iter(wanted)
            .map(|(at, namespace, snapshotter, key)| async move {
                match native::snapshot_usage(&self.channel, &namespace, &snapshotter, &key).await {
                    Ok(size) => (at, size),
                    Err(e) => {
                        tracing::debug!(%namespace, %key, error = %e, "cannot measure snapshot");
                        (at, None)
                    }
                }
            })
            .buffer_unordered(USAGE_CONCURRENCY)
            .collect()
            .await;
        for (at, size) in sizes {
            inventory.containers[at].size = size;
        }
    }

    /// Runs the garbage collector once: it frees the content of the images
    /// removed, and the snapshots of the containers removed.
    async fn settle(&self, kind: Kind) {
        let Some(namespace) = self.namespaces.first() else {
            return;
        };
        if let Err(e) = native::collect_garbage(&self.channel, namespace).await {
            tracing::warn!(
                %kind,
                error = %e,
                "cannot run containerd's garbage collector: it frees what was removed on its own schedule"
            );
        }
    }

    fn frees_when_settled(&self) -> bool {
        true
    }

    /// Measured (BENCHMARKS.md, pacing): beside a probe in a cgroup of its
    /// own on a quiet node, at a target of 0.1%, runs on containerd put
    /// 1.85-2.36% of its operations past its idle p99 (four of six runs
    /// over 1.8%) where its PSI showed nothing added; the first 40-s
    /// blocks of container removals, at 2.6-2.9 a second, 1.7-3.8%. On
    /// Docker's quiet node under the same law, 1.24%. Hence 0.45 ms a
    /// removal: 2.25 times Docker's 0.2 ms.
    fn removal_weight(&self) -> f64 {
        2.25
    }

    async fn remove(&self, target: &Target) -> Removal {
        match target {
            Target::Container(container) => self.remove_container(container).await,
            Target::Image(image) => self.remove_image(&image.id).await,
            other => Removal::Failed(format!("{} is not applicable on containerd", other.kind())),
        }
    }
}

/// What pins the images of `namespace`: nothing outside the CRI
/// namespace; in it, what CRI reports pinned, the sandbox image, and, when
/// CRI did not answer, the image of every sandbox container of
/// `containers` (CRI may name a sandbox image we have not seen).
fn pins(
    namespace: &str,
    sandbox_image: Option<&String>,
    cri_pinned: &[String],
    cri_answered: bool,
    containers: &[Container],
) -> Pins {
    if namespace != CRI_NAMESPACE {
        return Pins::default();
    }
    let mut names: Vec<String> = sandbox_image.cloned().into_iter().collect();
    if !cri_answered {
        names.extend(
            containers
                .iter()
                .filter(|c| c.pod.as_ref().is_some_and(|p| p.is_sandbox))
                .map(|c| c.image_ref.clone()),
        );
    }
    Pins {
        names,
        cri: cri_pinned.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::remove::removal_from_status;
    use super::*;

    #[test]
    fn not_found_is_gone_and_precondition_is_conflict() {
        assert_eq!(
            removal_from_status("x", &Status::not_found("no such")),
            Removal::Gone
        );
        assert_eq!(
            removal_from_status("x", &Status::failed_precondition("running")),
            Removal::InUse("running".to_owned())
        );
        assert!(matches!(
            removal_from_status("x", &Status::unavailable("down")),
            Removal::Failed(_)
        ));
    }
}
