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
mod remove;
mod uses;
mod watch;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use containerd_client::services::v1::{Container as NativeContainer, Image as ImageRecord};
use containerd_client::tonic::Status;
use containerd_client::tonic::transport::{Channel, Endpoint};
use containerd_client::types::v1::Process;
use futures_util::future::{join_all, try_join_all};
use futures_util::{StreamExt, stream};
use k8s_cri::v1::PodSandbox as CriPod;

use self::convert::{
    CriView, NamespaceData, containers_of, is_cri_kind, is_cri_sandbox, qualified, sandboxes_of,
    split_qualified,
};
use self::images::{Pins, images_of};
use self::watch::{Known, Watch};
use super::{Engine, Removal, RuntimeError};
use crate::inventory::Kind;
use crate::inventory::{Container, Image, Inventory, PodSandbox};

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
/// How many snapshots are measured at once: each is a walk of a directory.
const USAGE_CONCURRENCY: usize = 4;

/// An endpoint for containerd's unix socket at `socket`, every call on it
/// failing after [`REQUEST_TIMEOUT`] without an answer. The `grpc-timeout`
/// each request also carries binds only a server that honours it: a hung
/// containerd would not.
fn channel(socket: &std::path::Path) -> UnixEndpoint {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: Some(REQUEST_TIMEOUT),
    }
}

/// A channel to `socket` with no deadline, connected on first use: for the
/// event stream, which lives as long as the run.
fn channel_without_deadline(socket: &std::path::Path) -> Channel {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: None,
    }
    .lazy()
}

/// How to reach containerd: its socket, and the deadline of each call.
struct UnixEndpoint {
    socket: std::path::PathBuf,
    deadline: Option<Duration>,
}

impl UnixEndpoint {
    fn endpoint(&self) -> Endpoint {
        // tonic wants a URI; the connector below ignores it.
        let endpoint = Endpoint::from_static("http://[::]").connect_timeout(CONNECT_TIMEOUT);
        match self.deadline {
            Some(deadline) => endpoint.timeout(deadline),
            None => endpoint,
        }
    }

    fn connector(
        &self,
    ) -> impl tower::Service<
        containerd_client::tonic::transport::Uri,
        Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>,
        Error = std::io::Error,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let socket = self.socket.clone();
        tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        })
    }

    async fn connect(&self) -> Result<Channel, containerd_client::tonic::transport::Error> {
        self.endpoint()
            .connect_with_connector(self.connector())
            .await
    }

    fn lazy(&self) -> Channel {
        self.endpoint()
            .connect_with_connector_lazy(self.connector())
    }
}

/// A connection to one containerd, over its unix socket.
pub struct ContainerdRuntime {
    /// One channel for both containerd's API and CRI: both serve the same
    /// socket. Every call on it has a deadline of [`REQUEST_TIMEOUT`].
    channel: Channel,
    /// For the event stream alone, which lives as long as the run: no
    /// deadline. Connects when first used.
    stream_channel: Channel,
    /// The namespaces to prune, in the order configured, without Docker's.
    namespaces: Vec<String>,
    /// The sandbox image CRI last named, for when it does not answer.
    sandbox_image: Mutex<Option<String>>,
    /// The containers and image names since the last inventory, from
    /// containerd's events; `None` when the subscription failed or broke
    /// (re-checks then list everything).
    watch: Box<tokio::sync::Mutex<Option<Watch>>>,
    /// Container records a re-check just read, by id, for their removal:
    /// which snapshot is theirs and whether CRI made them do not change.
    rechecked: Mutex<HashMap<String, NativeContainer>>,
    /// Whether an inventory subscribes to containerd's events for the
    /// re-checks that follow: not for a command that removes nothing.
    follow_events: bool,
    /// Whether the inventory measures the image file system (CRI's
    /// `ImageFsInfo` names it; `images.disk`).
    measure_image_fs: bool,
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
        let socket = super::socket_path(RUNTIME, endpoint)?;
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, channel(&socket).connect())
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| unreachable(e.into()))?;
        let stream_channel = channel_without_deadline(&socket);
        // Any unix socket accepts a connection; only containerd answers this.
        let version = tokio::time::timeout(CONNECT_TIMEOUT, native::version(&channel))
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
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
            stream_channel,
            namespaces,
            sandbox_image: Mutex::new(None),
            watch: Box::new(tokio::sync::Mutex::new(None)),
            rechecked: Mutex::new(HashMap::new()),
            follow_events: true,
            measure_image_fs: false,
        })
    }

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
            Ok(Some(mountpoint)) => super::fs_usage(std::path::Path::new(&mountpoint)),
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

    /// The sandbox image CRI names now, or the last one it named when it
    /// does not answer.
    async fn sandbox_image(&self) -> (Option<String>, bool) {
        match cri::sandbox_image(&self.channel).await {
            Ok(image) => {
                if let Ok(mut cached) = self.sandbox_image.lock() {
                    cached.clone_from(&image);
                }
                (image, true)
            }
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: no fresh sandbox image");
                (self.cached_sandbox_image(), false)
            }
        }
    }

    /// Marks the images of a re-check's batch that CRI reports pinned,
    /// asking CRI about each by one of its names (`ImageStatus`: a call per
    /// image, not a listing of the node). An image CRI cannot be asked
    /// about keeps the pins its records carry.
    async fn with_cri_pins(&self, images: &mut [Image]) {
        let asked = images.iter().map(|image| async move {
            let in_cri = image
                .id
                .strip_prefix(CRI_NAMESPACE)
                .is_some_and(|rest| rest.starts_with('/'));
            let name = image.tags.iter().chain(&image.digests).next()?;
            if !in_cri {
                return None;
            }
            match cri::image_pinned(&self.channel, name).await {
                Ok(pinned) => Some(pinned),
                Err(e) => {
                    tracing::warn!(image = %image.id, error = %e, "CRI does not say whether the image is pinned: its labels alone say");
                    None
                }
            }
        });
        let answers = futures_util::future::join_all(asked).await;
        for (image, pinned) in images.iter_mut().zip(answers) {
            if pinned == Some(true) {
                image.cri_pinned = true;
                image.pinned = true;
            }
        }
    }

    fn cached_sandbox_image(&self) -> Option<String> {
        self.sandbox_image.lock().ok().and_then(|c| c.clone())
    }

    /// Every pod sandbox, when the CRI namespace is configured: CRI's list,
    /// or the sandbox containers and their tasks when CRI does not answer.
    async fn sandboxes(&self) -> Result<Vec<PodSandbox>, RuntimeError> {
        if !self.has_cri_namespace() {
            return Ok(Vec::new());
        }
        match cri::sandboxes(&self.channel).await {
            Ok(listed) => Ok(cri_sandboxes(listed)),
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: sandboxes read natively");
                let (containers, tasks) = tokio::try_join!(
                    native::containers(&self.channel, CRI_NAMESPACE),
                    native::tasks(&self.channel, CRI_NAMESPACE),
                )
                .map_err(Self::call_error("list sandbox containers"))?;
                Ok(native_sandboxes(containers, tasks))
            }
        }
    }

    /// `containers` of one namespace with what removing each stopped one
    /// frees: its writable snapshot, measured by the snapshotter (on
    /// overlayfs, a walk of its upper directory). Live containers are not
    /// measured: they are not removed. A snapshot that cannot be measured
    /// leaves the size unknown.
    async fn with_writable_sizes(
        &self,
        data: &NamespaceData,
        containers: Vec<Container>,
    ) -> Vec<Container> {
        let snapshots: HashMap<String, (&str, &str)> = data
            .containers
            .iter()
            .filter(|c| !c.snapshot_key.is_empty() && !c.snapshotter.is_empty())
            .map(|c| {
                let id = qualified(&data.namespace, &c.id);
                (id, (c.snapshotter.as_str(), c.snapshot_key.as_str()))
            })
            .collect();
        stream::iter(containers)
            .map(|mut container| {
                let snapshot = snapshots
                    .get(&container.id)
                    .filter(|_| !container.state.is_live())
                    .copied();
                async move {
                    if let Some((snapshotter, key)) = snapshot {
                        match native::snapshot_usage(&self.channel, &data.namespace, snapshotter, key)
                            .await
                        {
                            Ok(size) => container.size = size,
                            Err(e) => {
                                tracing::debug!(id = %container.id, error = %e, "cannot measure snapshot");
                            }
                        }
                    }
                    container
                }
            })
            .buffered(USAGE_CONCURRENCY)
            .collect()
            .await
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

    /// `parse_id` for a re-check: a bad id fails the re-check.
    fn recheck_id<'i>(&self, id: &'i str) -> Result<(&'i str, &'i str), RuntimeError> {
        self.parse_id(id).map_err(|e| RuntimeError::Call {
            runtime: RUNTIME,
            call: "recheck",
            source: e.into(),
        })
    }

    /// Fresh facts about one container, read by id: containerd's record
    /// and task. Without a watch.
    async fn read_container(&self, id: &str) -> Result<Vec<Container>, RuntimeError> {
        let (namespace, local) = self.recheck_id(id)?;
        let (found, task) = tokio::try_join!(
            async {
                native::container(&self.channel, namespace, local)
                    .await
                    .map_err(Self::call_error("get container"))
            },
            async {
                native::task(&self.channel, namespace, local)
                    .await
                    .map_err(Self::call_error("get task"))
            },
        )?;
        let Some(found) = found else {
            return Ok(Vec::new());
        };
        let data = NamespaceData {
            namespace: namespace.to_owned(),
            containers: vec![found],
            tasks: task.into_iter().collect(),
            ..NamespaceData::default()
        };
        Ok(self.rechecked_container(id, data).await)
    }

    /// One container as a re-check finds it, from what containerd says of
    /// it (`data`: its record and task), with CRI's status when it is a CRI
    /// container and CRI answers: the only place with an exited CRI
    /// container's state and exit time (CRI deletes its task). Its record
    /// is kept for its removal.
    async fn rechecked_container(&self, id: &str, data: NamespaceData) -> Vec<Container> {
        let Some(found) = data.containers.first() else {
            return Vec::new();
        };
        // Its removal, which follows at once, acts on this record.
        if let Ok(mut rechecked) = self.rechecked.lock() {
            rechecked.insert(id.to_owned(), found.clone());
        }
        let view = if data.namespace == CRI_NAMESPACE && is_cri_kind(&found.labels) {
            match cri::container(&self.channel, &found.id).await {
                Ok(known) => Some(CriView {
                    containers: known.map(|c| (found.id.clone(), c)).into_iter().collect(),
                    ..CriView::default()
                }),
                Err(e) => {
                    tracing::warn!(error = %e, id = %found.id, "CRI does not answer: container read natively");
                    None
                }
            }
        } else {
            None
        };
        containers_of(&data, view.as_ref())
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

    /// Runs `read` on the watch once it is up to date; `None` when there is
    /// no watch or it broke (it is then dropped, with a warning).
    async fn synced<R>(&self, read: impl FnOnce(&Known) -> R) -> Option<R> {
        let mut guard = self.watch.lock().await;
        let watch = guard.as_mut()?;
        match watch.sync(&self.channel).await {
            Ok(()) => Some(read(watch.known())),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "lost containerd's events: re-checks list every container from now on"
                );
                *guard = None;
                None
            }
        }
    }

    /// Fresh facts about a batch of containers, and the sandboxes of their
    /// pods. With a watch: each container as the watch, brought up to
    /// date, knows it (no call for one that no event has named since the
    /// inventory), and its pod's sandboxes by id (the one it names, and any
    /// other sandbox of the same pod the watch knows). Without one: each
    /// container read by id, and every sandbox listed.
    async fn recheck_containers(
        &self,
        ids: &[&str],
    ) -> Result<(Vec<Container>, Vec<PodSandbox>), RuntimeError> {
        let wanted = ids
            .iter()
            .map(|id| Ok((*id, self.recheck_id(id)?)))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let watched = self
            .synced(|known| {
                let facts: Vec<(&str, NamespaceData)> = wanted
                    .iter()
                    .filter_map(|(id, (ns, local))| Some((*id, known.container_facts(ns, local)?)))
                    .collect();
                let uids: HashSet<&str> = wanted
                    .iter()
                    .filter(|(_, (ns, _))| *ns == CRI_NAMESPACE)
                    .filter_map(|(_, (ns, local))| known.pod_uid_of(ns, local))
                    .collect();
                (facts, known.sandboxes_of_pods(CRI_NAMESPACE, &uids))
            })
            .await;
        let (containers, of_pods) = match watched {
            Some((facts, of_pods)) => {
                let found = join_all(
                    facts
                        .into_iter()
                        .map(|(id, data)| self.rechecked_container(id, data)),
                )
                .await;
                (found, Some(of_pods))
            }
            None => (
                try_join_all(ids.iter().map(|id| self.read_container(id))).await?,
                None,
            ),
        };
        let containers: Vec<Container> = containers.into_iter().flatten().collect();
        let in_cri = wanted.iter().any(|(_, (ns, _))| *ns == CRI_NAMESPACE);
        if !in_cri {
            return Ok((containers, Vec::new()));
        }
        let Some(of_pods) = of_pods else {
            return Ok((containers, self.sandboxes().await?));
        };
        let mut sandbox_ids: BTreeSet<String> = of_pods.into_iter().collect();
        sandbox_ids.extend(
            containers
                .iter()
                .filter_map(|c| c.pod.as_ref()?.sandbox_id.as_deref())
                .filter_map(split_qualified)
                .map(|(_, local)| local.to_owned()),
        );
        let sandboxes = self.sandboxes_by_id(&sandbox_ids).await?;
        Ok((containers, sandboxes))
    }

    /// The CRI namespace's sandboxes with these local ids: their state from
    /// CRI, or from their tasks when CRI does not answer. One that exists
    /// in neither is left out.
    async fn sandboxes_by_id(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<PodSandbox>, RuntimeError> {
        let from_cri = try_join_all(ids.iter().map(|id| cri::sandbox(&self.channel, id))).await;
        match from_cri {
            Ok(found) => Ok(cri_sandboxes(found.into_iter().flatten().collect())),
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: sandboxes read natively");
                let found = try_join_all(ids.iter().map(|id| async move {
                    tokio::try_join!(
                        native::container(&self.channel, CRI_NAMESPACE, id),
                        native::task(&self.channel, CRI_NAMESPACE, id),
                    )
                }))
                .await
                .map_err(Self::call_error("get sandbox container"))?;
                let (containers, tasks): (Vec<_>, Vec<_>) = found.into_iter().unzip();
                Ok(native_sandboxes(
                    containers.into_iter().flatten().collect(),
                    tasks.into_iter().flatten().collect(),
                ))
            }
        }
    }

    /// Fresh facts about a batch of images (`(namespace, target digest)`):
    /// the images, and every container made from one of them. From the
    /// watch when there is one, else from a listing of every namespace.
    async fn recheck_images(
        &self,
        wanted: &[(&str, &str)],
    ) -> Result<(Vec<Image>, Vec<Container>), RuntimeError> {
        let cri_batch = wanted.iter().any(|(ns, _)| *ns == CRI_NAMESPACE);
        let (watched, (sandbox_image, cri_answered)) = tokio::join!(
            self.synced(|known| {
                let records: Vec<(&str, Vec<ImageRecord>)> = wanted
                    .iter()
                    .map(|(ns, digest)| (*ns, known.records_of(ns, digest)))
                    .collect();
                let sandboxes = known.sandbox_containers(CRI_NAMESPACE);
                (records, known.users_of_images(wanted), sandboxes)
            }),
            async {
                if cri_batch {
                    self.sandbox_image().await
                } else {
                    (None, false)
                }
            },
        );
        let Some((records, users, cri_containers)) = watched else {
            let (mut images, users) = self
                .recheck_images_listed(wanted, sandbox_image, cri_answered)
                .await?;
            self.with_cri_pins(&mut images).await;
            return Ok((images, users));
        };
        let mut images = Vec::new();
        for (namespace, records) in records {
            let pinned = pins(
                namespace,
                sandbox_image.as_ref(),
                &[],
                cri_answered,
                &cri_containers,
            );
            let data = NamespaceData {
                namespace: namespace.to_owned(),
                images: records,
                ..NamespaceData::default()
            };
            images.extend(images_of(&data, &pinned));
        }
        self.with_cri_pins(&mut images).await;
        Ok((images, users))
    }

    /// [`Self::recheck_images`] without a watch: every container and image
    /// record of every namespace, listed.
    async fn recheck_images_listed(
        &self,
        wanted: &[(&str, &str)],
        sandbox_image: Option<String>,
        cri_answered: bool,
    ) -> Result<(Vec<Image>, Vec<Container>), RuntimeError> {
        let mut images = Vec::new();
        let mut users = Vec::new();
        for data in &self.all_containers().await? {
            let containers = containers_of(data, None);
            if wanted.iter().any(|(ns, _)| *ns == data.namespace) {
                let pinned = pins(
                    &data.namespace,
                    sandbox_image.as_ref(),
                    &[],
                    cri_answered,
                    &containers,
                );
                images.extend(images_of(data, &pinned));
            }
            users.extend(containers);
        }
        Ok((images, users))
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
            watch.fill(&data);
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
            let sandbox_image = match view {
                Some(v) => v.sandbox_image.clone(),
                None if is_cri => self.cached_sandbox_image(),
                None => None,
            };
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
            inventory
                .containers
                .extend(self.with_writable_sizes(namespace, containers).await);
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
        let mut fresh = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        match kind {
            Kind::Container => {
                let (containers, sandboxes) = self.recheck_containers(ids).await?;
                fresh.containers = containers;
                fresh.sandboxes = sandboxes;
            }
            Kind::Image => {
                let wanted = ids
                    .iter()
                    .map(|id| self.recheck_id(id))
                    .collect::<Result<Vec<_>, _>>()?;
                let (images, users) = self.recheck_images(&wanted).await?;
                fresh.images = images
                    .into_iter()
                    .filter(|i| ids.contains(&i.id.as_str()))
                    .collect();
                fresh.containers = users;
            }
            // Not on containerd: nothing to find.
            Kind::Volume | Kind::Network | Kind::BuildCache => {}
        }
        Ok(fresh)
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

/// The CRI namespace's sandboxes as CRI gave them.
fn cri_sandboxes(listed: Vec<CriPod>) -> Vec<PodSandbox> {
    let view = CriView {
        sandboxes: listed,
        ..CriView::default()
    };
    sandboxes_of(CRI_NAMESPACE, Some(&view), &[])
}

/// The CRI namespace's sandboxes read natively, from `containers` (those
/// CRI made as sandboxes) and their `tasks`: READY while the task runs.
fn native_sandboxes(containers: Vec<NativeContainer>, tasks: Vec<Process>) -> Vec<PodSandbox> {
    let data = NamespaceData {
        namespace: CRI_NAMESPACE.to_owned(),
        containers: containers
            .into_iter()
            .filter(|c| is_cri_sandbox(&c.labels))
            .collect(),
        tasks,
        ..NamespaceData::default()
    };
    sandboxes_of(CRI_NAMESPACE, None, &containers_of(&data, None))
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

#[cfg(test)]
mod tests {
    use super::remove::removal_from_status;
    use super::*;

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
            Removal::InUse("running".to_owned())
        );
        assert!(matches!(
            removal_from_status("x", &Status::unavailable("down")),
            Removal::Failed(_)
        ));
    }
}
