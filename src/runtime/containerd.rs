//! The containerd adapter: containerd's own API for what holds disk
//! (containers, tasks, images, content), CRI on the same socket for what
//! kubelet owns (sandboxes and their READY state, container states and exit
//! times, the sandbox image). An [`Inventory`] out, one removal at a time.
//!
//! Every containerd quirk safeprune has to know lives in this module, next
//! to the code that handles it. "Measured" means: against containerd 1.6.20
//! from Debian 12, see `tests/containerd_adapter.rs`. `convert` turns the
//! answers into the inventory's data, `native` and `cri` make the calls.
//!
//! Ids are `<namespace>/<id>` for containers and `<namespace>/<target
//! digest>` for images (one image per target, whatever names point at it).

mod convert;
mod cri;
mod images;
mod native;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use containerd_client::services::v1::Container as NativeContainer;
use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Status};
use containerd_client::types::v1::Status as TaskStatus;
use futures_util::future::try_join_all;
use k8s_cri::v1::ContainerState as CriState;

use self::convert::{
    CriView, NamespaceData, containers_of, is_cri_kind, is_cri_sandbox, qualified, sandboxes_of,
    split_qualified, targets_by_name,
};
use self::images::images_of;
use super::{Engine, Kind, Removal, RuntimeError};
use crate::inventory::{Container, Image, Inventory, PodSandbox};
use crate::plan::reference_forms;

const RUNTIME: &str = "containerd";
const UNREACHABLE_HINT: &str = "is containerd running, and is the socket path right?";
/// The namespace the CRI plugin keeps kubelet's objects in.
const CRI_NAMESPACE: &str = "k8s.io";
/// Docker's own namespace: its containers and images belong to dockerd,
/// which keeps its own records of them.
const DOCKER_NAMESPACE: &str = "moby";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request deadline. Listing content on a node with many images is the
/// slowest call we make.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer accepted: tonic's default (4 MiB) is too small for the
/// image and CRI lists of a big node.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// How many CRI `ContainerStatus` calls run at once.
const STATUS_CONCURRENCY: usize = 8;

/// A connection to one containerd, over its unix socket.
pub struct ContainerdRuntime {
    /// One channel for both containerd's API and CRI: both serve the same
    /// socket.
    channel: Channel,
    /// The namespaces to prune, in the order configured, without Docker's.
    namespaces: Vec<String>,
    /// The sandbox image CRI last named, for when it does not answer.
    sandbox_image: Mutex<Option<String>>,
}

impl ContainerdRuntime {
    /// Connects to containerd at `endpoint` (`/run/containerd/containerd.sock`
    /// or `unix:///run/containerd/containerd.sock`) and asks its version.
    /// `namespaces` are the namespaces to prune; Docker's `moby` is left
    /// out with a warning, and so is a name containerd would refuse.
    ///
    /// # Errors
    /// [`RuntimeError::Unreachable`] when the endpoint is not a unix socket,
    /// does not exist, or does not answer as containerd.
    pub async fn connect(endpoint: &str, namespaces: &[String]) -> Result<Self, RuntimeError> {
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: UNREACHABLE_HINT,
                source,
            };
        let Some(socket) = socket_path(endpoint) else {
            return Err(RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: "only unix sockets are supported: unix:///path or /path",
                source: "unsupported endpoint scheme".into(),
            });
        };
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, containerd_client::connect(&socket))
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| unreachable(e.into()))?;
        // Any unix socket accepts a connection; only containerd answers this.
        let version = native::version(&channel)
            .await
            .map_err(|e| unreachable(e.into()))?;
        tracing::debug!(endpoint, version, "connected to containerd");
        let namespaces = usable_namespaces(namespaces);
        match native::namespaces(&channel).await {
            Ok(existing) => {
                for missing in namespaces.iter().filter(|n| !existing.contains(n)) {
                    tracing::warn!(
                        namespace = %missing,
                        "containerd has no such namespace (yet): nothing to prune there"
                    );
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot list containerd namespaces"),
        }
        Ok(Self {
            channel,
            namespaces,
            sandbox_image: Mutex::new(None),
        })
    }

    /// The namespaces this runtime prunes.
    #[must_use]
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
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
            Ok(view) => {
                if let Ok(mut cached) = self.sandbox_image.lock() {
                    cached.clone_from(&view.sandbox_image);
                }
                Some(view)
            }
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

    /// The image names to pin in the CRI namespace: CRI's sandbox image
    /// (or the last one it named), and, when CRI does not answer, the image
    /// of every sandbox container.
    fn pinned_names(&self, cri: Option<&CriView>, containers: &[Container]) -> Vec<String> {
        let mut names: Vec<String> = match cri {
            Some(view) => view.sandbox_image.iter().cloned().collect(),
            None => self
                .sandbox_image
                .lock()
                .ok()
                .and_then(|cached| cached.clone())
                .into_iter()
                .collect(),
        };
        if cri.is_none() {
            names.extend(
                containers
                    .iter()
                    .filter(|c| c.pod.as_ref().is_some_and(|p| p.is_sandbox))
                    .map(|c| c.image_ref.clone()),
            );
        }
        names
    }

    /// The pod sandboxes, when the CRI namespace is configured.
    async fn sandboxes(&self) -> Result<Vec<PodSandbox>, RuntimeError> {
        if !self.has_cri_namespace() {
            return Ok(Vec::new());
        }
        match cri::sandboxes(&self.channel).await {
            Ok(listed) => {
                let view = CriView {
                    sandboxes: listed,
                    ..CriView::default()
                };
                Ok(sandboxes_of(CRI_NAMESPACE, Some(&view), &[]))
            }
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: sandboxes read natively");
                let data = NamespaceData {
                    namespace: CRI_NAMESPACE.to_owned(),
                    containers: native::containers(&self.channel, CRI_NAMESPACE)
                        .await
                        .map_err(Self::call_error("list containers"))?
                        .into_iter()
                        .filter(|c| is_cri_sandbox(&c.labels))
                        .collect(),
                    tasks: native::tasks(&self.channel, CRI_NAMESPACE)
                        .await
                        .map_err(Self::call_error("list tasks"))?,
                    ..NamespaceData::default()
                };
                Ok(sandboxes_of(
                    CRI_NAMESPACE,
                    None,
                    &containers_of(&data, None),
                ))
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

    /// Fresh facts about one container: itself, with its state, and every
    /// sandbox.
    async fn recheck_container(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<(Vec<Container>, Vec<PodSandbox>), RuntimeError> {
        let (found, task, sandboxes) = tokio::try_join!(
            async {
                native::container(&self.channel, namespace, id)
                    .await
                    .map_err(Self::call_error("get container"))
            },
            async {
                native::task(&self.channel, namespace, id)
                    .await
                    .map_err(Self::call_error("get task"))
            },
            self.sandboxes(),
        )?;
        let Some(found) = found else {
            return Ok((Vec::new(), sandboxes));
        };
        let view = if namespace == CRI_NAMESPACE && is_cri_kind(&found.labels) {
            match cri::container(&self.channel, id).await {
                Ok(known) => {
                    let mut view = CriView::default();
                    view.containers.extend(known.map(|c| (id.to_owned(), c)));
                    view.sandboxes = cri::sandboxes(&self.channel).await.unwrap_or_default();
                    Some(view)
                }
                Err(e) => {
                    tracing::warn!(error = %e, id, "CRI does not answer: container read natively");
                    None
                }
            }
        } else {
            None
        };
        let data = NamespaceData {
            namespace: namespace.to_owned(),
            containers: vec![found],
            tasks: task.into_iter().collect(),
            ..NamespaceData::default()
        };
        Ok((containers_of(&data, view.as_ref()), sandboxes))
    }

    /// Every container of every configured namespace, with the image records
    /// of each namespace (what an image removal must check against).
    async fn all_containers(&self) -> Result<Vec<NamespaceData>, RuntimeError> {
        try_join_all(self.namespaces.iter().map(|namespace| async move {
            let (containers, images) = tokio::try_join!(
                native::containers(&self.channel, namespace),
                native::images(&self.channel, namespace),
            )
            .map_err(Self::call_error("list containers and images"))?;
            Ok(NamespaceData {
                namespace: namespace.clone(),
                containers,
                images,
                ..NamespaceData::default()
            })
        }))
        .await
    }

    /// Removes one container, never a sandbox, never a live one.
    async fn remove_container(&self, id: &str) -> Removal {
        let (namespace, local) = match self.parse_id(id) {
            Ok(parts) => parts,
            Err(e) => return Removal::Failed(e),
        };
        let found = match native::container(&self.channel, namespace, local).await {
            Ok(Some(found)) => found,
            Ok(None) => return Removal::Gone,
            Err(e) => return removal_from_status("get container", &e),
        };
        if is_cri_sandbox(&found.labels) {
            return Removal::Conflict(format!(
                "{id} is a pod sandbox: kubelet owns it, and safeprune never removes one"
            ));
        }
        if namespace == CRI_NAMESPACE && is_cri_kind(&found.labels) {
            return self.remove_cri_container(local).await;
        }
        self.remove_native_container(namespace, &found).await
    }

    /// Removes a CRI container through CRI, after checking that CRI knows
    /// it and that it is not running: CRI would answer OK for an unknown
    /// container and stop a running one.
    async fn remove_cri_container(&self, id: &str) -> Removal {
        let mut client = cri::client(self.channel.clone());
        match cri::status_of(&mut client, id).await {
            Err(e) => {
                return Removal::Failed(format!(
                    "CRI does not answer ({}): a CRI container is removed only through CRI",
                    e.message()
                ));
            }
            Ok(None) => {
                return Removal::Conflict(
                    "CRI does not know this container; it is not removed behind kubelet's back"
                        .to_owned(),
                );
            }
            Ok(Some(status))
                if matches!(
                    CriState::try_from(status.state),
                    Ok(CriState::ContainerRunning | CriState::ContainerUnknown) | Err(_)
                ) =>
            {
                return Removal::Conflict("container is running".to_owned());
            }
            Ok(Some(_)) => {}
        }
        match cri::remove_container(&self.channel, id).await {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_status("CRI remove container", &e),
        }
    }

    /// Removes a plain container: a stopped task first, then the container,
    /// then its snapshot. A live task (running, paused, created) is a
    /// conflict: deleting the container would orphan it (measured).
    async fn remove_native_container(&self, namespace: &str, found: &NativeContainer) -> Removal {
        let id = found.id.as_str();
        match native::task(&self.channel, namespace, id).await {
            Ok(None) => {}
            Ok(Some(task)) if task.status == TaskStatus::Stopped as i32 => {
                match native::delete_task(&self.channel, namespace, id).await {
                    Ok(()) => {}
                    // Deleted meanwhile by someone else: fine.
                    Err(e) if e.code() == Code::NotFound => {}
                    Err(e) => return removal_from_status("delete task", &e),
                }
            }
            Ok(Some(task)) => {
                let state = TaskStatus::try_from(task.status)
                    .map_or("unknown", |s| s.as_str_name())
                    .to_lowercase();
                return Removal::Conflict(format!("container has a live task ({state})"));
            }
            Err(e) => return removal_from_status("get task", &e),
        }
        match native::delete_container(&self.channel, namespace, id).await {
            Ok(()) => {}
            Err(e) => return removal_from_status("delete container", &e),
        }
        if !found.snapshot_key.is_empty()
            && let Err(e) = native::remove_snapshot(
                &self.channel,
                namespace,
                &found.snapshotter,
                &found.snapshot_key,
            )
            .await
            && e.code() != Code::NotFound
        {
            // The container is gone; containerd's garbage collector takes
            // an unreferenced snapshot in time.
            tracing::warn!(namespace, id, error = %e, "cannot remove container snapshot");
        }
        Removal::Removed
    }

    /// Removes every name of one image, after a fresh check that no
    /// container of any configured namespace refers to it by name or by
    /// target: containerd deletes an image in use without a word
    /// (measured).
    async fn remove_image(&self, id: &str) -> Removal {
        let (namespace, digest) = match self.parse_id(id) {
            Ok(parts) => parts,
            Err(e) => return Removal::Failed(e),
        };
        let everyone = match self.all_containers().await {
            Ok(all) => all,
            Err(e) => return Removal::Failed(e.to_string()),
        };
        let Some(records) = everyone
            .iter()
            .find(|d| d.namespace == namespace)
            .map(|d| images::records_of(&d.images, digest))
            .filter(|r| !r.is_empty())
        else {
            return Removal::Gone;
        };
        let names: BTreeSet<String> = records
            .iter()
            .flat_map(|r| reference_forms(&r.name))
            .collect();
        for data in &everyone {
            let targets = targets_by_name(&data.images);
            let user = data.containers.iter().find(|c| {
                (data.namespace == namespace && targets.get(c.image.as_str()) == Some(&digest))
                    || reference_forms(&c.image).iter().any(|f| names.contains(f))
            });
            if let Some(user) = user {
                return Removal::Conflict(format!(
                    "image is used by container {}",
                    qualified(&data.namespace, &user.id)
                ));
            }
        }
        let last = records.len() - 1;
        let mut deleted = 0;
        for (i, record) in records.iter().enumerate() {
            // `sync` on the last name only: that is when content goes.
            match native::delete_image(
                &self.channel,
                namespace,
                &record.name,
                record.target.clone(),
                i == last,
            )
            .await
            {
                Ok(()) => deleted += 1,
                Err(e) if e.code() == Code::NotFound => {}
                Err(e) => return removal_from_status("delete image", &e),
            }
        }
        if deleted == 0 {
            Removal::Gone
        } else {
            Removal::Removed
        }
    }
}

impl Engine for ContainerdRuntime {
    fn name(&self) -> &'static str {
        RUNTIME
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
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
        let mut inventory = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        for namespace in &data {
            let is_cri = namespace.namespace == CRI_NAMESPACE;
            let view = cri.as_ref().filter(|_| is_cri);
            let containers = containers_of(namespace, view);
            let pinned = if is_cri {
                self.pinned_names(view, &containers)
            } else {
                Vec::new()
            };
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

    async fn recheck(&self, kind: Kind, id: &str) -> Result<Inventory, RuntimeError> {
        let mut fresh = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        let (namespace, local) = self.parse_id(id).map_err(|e| RuntimeError::Call {
            runtime: RUNTIME,
            call: "recheck",
            source: e.into(),
        })?;
        match kind {
            Kind::Container => {
                (fresh.containers, fresh.sandboxes) =
                    self.recheck_container(namespace, local).await?;
            }
            Kind::Image => {
                let everyone = self.all_containers().await?;
                let cri = if namespace == CRI_NAMESPACE {
                    self.cri_view().await
                } else {
                    None
                };
                for data in &everyone {
                    let containers = containers_of(data, None);
                    if data.namespace == namespace {
                        let pinned = if namespace == CRI_NAMESPACE {
                            self.pinned_names(cri.as_ref(), &containers)
                        } else {
                            Vec::new()
                        };
                        fresh.images = images_of(data, &pinned)
                            .into_iter()
                            .filter(|i| i.id == id)
                            .collect::<Vec<Image>>();
                    }
                    fresh.containers.extend(containers);
                }
            }
            // Not on containerd: nothing to find.
            Kind::Volume | Kind::Network | Kind::BuildCache => {}
        }
        Ok(fresh)
    }

    async fn remove(&self, kind: Kind, id: &str) -> Removal {
        match kind {
            Kind::Container => self.remove_container(id).await,
            Kind::Image => self.remove_image(id).await,
            Kind::Volume | Kind::Network | Kind::BuildCache => {
                Removal::Failed(format!("{kind} is not applicable on containerd"))
            }
        }
    }
}

/// The socket path of a `unix://` endpoint or a bare path; `None` for any
/// other scheme.
fn socket_path(endpoint: &str) -> Option<PathBuf> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return (!path.is_empty()).then(|| PathBuf::from(path));
    }
    (!endpoint.contains("://") && !endpoint.is_empty()).then(|| PathBuf::from(endpoint))
}

/// The configured namespaces safeprune may prune: each once, without
/// Docker's `moby` and without names containerd would refuse.
fn usable_namespaces(configured: &[String]) -> Vec<String> {
    let mut usable: Vec<String> = Vec::new();
    for namespace in configured {
        if namespace == DOCKER_NAMESPACE {
            tracing::warn!(
                namespace = DOCKER_NAMESPACE,
                "skipping Docker's own containerd namespace: dockerd keeps its own records of \
                 those containers and images; prune Docker with runtime.kind: docker"
            );
        } else if !is_valid_namespace(namespace) {
            tracing::warn!(namespace = %namespace, "skipping a namespace name containerd would refuse");
        } else if !usable.contains(namespace) {
            usable.push(namespace.clone());
        }
    }
    usable
}

/// containerd's namespace rule (`pkg/identifiers`): letters and digits in
/// parts joined by `.`, `_` or `-`, at most 76 characters.
fn is_valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 76
        && name
            .split(['.', '_', '-'])
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// `NotFound` is gone, `FailedPrecondition` is in use or changed, anything
/// else failed.
fn removal_from_status(call: &str, e: &Status) -> Removal {
    match e.code() {
        Code::NotFound => Removal::Gone,
        Code::FailedPrecondition => Removal::Conflict(e.message().to_owned()),
        _ => Removal::Failed(format!(
            "containerd {call} failed: {} ({:?})",
            e.message(),
            e.code()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets_only() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock"),
            Some(PathBuf::from("/run/containerd/containerd.sock"))
        );
        assert_eq!(
            socket_path("/run/containerd/containerd.sock"),
            Some(PathBuf::from("/run/containerd/containerd.sock"))
        );
        assert_eq!(socket_path("unix://"), None);
        assert_eq!(socket_path("tcp://10.0.0.1:2375"), None);
        assert_eq!(socket_path(""), None);
    }

    #[test]
    fn docker_namespace_duplicates_and_bad_names_are_skipped() {
        let configured: Vec<String> = ["k8s.io", "moby", "k8s.io", "bad/name", "", "other_ns-1"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(usable_namespaces(&configured), ["k8s.io", "other_ns-1"]);
    }

    #[test]
    fn namespace_names_follow_containerd() {
        for good in ["k8s.io", "default", "a-b_c.d", "x1"] {
            assert!(is_valid_namespace(good), "{good}");
        }
        for bad in ["", ".a", "a.", "a..b", "a/b", "ä", &"a".repeat(77)] {
            assert!(!is_valid_namespace(bad), "{bad}");
        }
    }

    #[test]
    fn not_found_is_gone_and_precondition_is_conflict() {
        assert_eq!(
            removal_from_status("x", &Status::not_found("no such")),
            Removal::Gone
        );
        assert_eq!(
            removal_from_status("x", &Status::failed_precondition("running")),
            Removal::Conflict("running".to_owned())
        );
        assert!(matches!(
            removal_from_status("x", &Status::unavailable("down")),
            Removal::Failed(_)
        ));
    }
}
