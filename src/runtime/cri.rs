//! The CRI adapter: any Kubernetes node runtime (CRI-O, or containerd's
//! CRI plugin) through the CRI v1 `RuntimeService` and `ImageService`
//! alone (`runtime.kind: cri`).
//!
//! What CRI shows is what kubelet sees: pod sandboxes with their READY
//! state, containers of every state, and images. It has no volumes,
//! networks or build cache; sandboxes are kubelet's and never removed; no
//! image has a pull or tag time (an image is dated by safeprune's first
//! sighting, kept in `state_dir`), and sizes are whole images (a shared
//! layer counts in each: what a removal frees is measured on the file
//! system, before and after). Every quirk measured on CRI-O 1.36.3 is in
//! docs/engines.md, "CRI".

mod convert;

pub(crate) use convert::THROUGH_CRI;

use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Status};
use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_cri::v1::{ContainerEventType, ContainerState as CriState};

use self::convert::ImageIndex;
use super::engine::{Engine, Removal, Target};
use super::error::{RUN_AS_ROOT, RuntimeError, socket_path};
use super::grpc::cri as api;
use super::grpc::{CONNECT_TIMEOUT, channel, channel_without_deadline};
use crate::inventory::{Inventory, Kind, RuntimeKind, Use, UseSource};

const RUNTIME: &str = "cri";
/// How many `ContainerStatus` calls run at once.
const STATUS_CONCURRENCY: usize = 8;
const UNREACHABLE_HINT: &str =
    "is the CRI runtime (CRI-O) running, and is runtime.cri.endpoint its socket?";

/// A connection to one CRI runtime, over its unix socket.
pub struct CriRuntime {
    /// Every call but the event stream; each has the transport's deadline.
    channel: Channel,
    /// For the event stream alone, which lives as long as the daemon: no
    /// deadline. Connects when first used.
    stream_channel: Channel,
    /// What `Version` answered: `cri-o 1.36.3`.
    name: String,
    /// Its `RuntimeName` alone: `cri-o`, `containerd`.
    runtime_name: String,
    /// Whether the inventory measures the image file system.
    measure_image_fs: bool,
}

impl CriRuntime {
    /// Connects to the CRI runtime at `endpoint` (`unix:///var/run/crio/
    /// crio.sock` or a path) and asks its version.
    ///
    /// # Errors
    /// [`RuntimeError::Unreachable`] when the endpoint is not a unix socket,
    /// does not exist, or does not answer CRI v1.
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        let unreachable = |hint: &'static str, source: Box<dyn std::error::Error + Send + Sync>| {
            RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint,
                denied: RUN_AS_ROOT,
                source,
            }
        };
        let socket = socket_path(RUNTIME, endpoint)?;
        let no_answer = || format!("no answer within {CONNECT_TIMEOUT:?}").into();
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, channel(&socket).connect())
            .await
            .map_err(|_| unreachable(UNREACHABLE_HINT, no_answer()))?
            .map_err(|e| unreachable(UNREACHABLE_HINT, e.into()))?;
        // Any unix socket accepts a connection; only a CRI runtime answers
        // this.
        let version = tokio::time::timeout(CONNECT_TIMEOUT, api::version(&channel))
            .await
            .map_err(|_| unreachable(UNREACHABLE_HINT, no_answer()))?
            .map_err(|e| {
                let hint = if e.code() == Code::Unimplemented {
                    "this socket answers gRPC but not CRI v1: is it a CRI runtime's socket?"
                } else {
                    UNREACHABLE_HINT
                };
                unreachable(hint, e.into())
            })?;
        let name = format!("{} {}", version.runtime_name, version.runtime_version);
        tracing::debug!(endpoint, runtime = %name, api = %version.runtime_api_version, "connected to a CRI runtime");
        Ok(Self {
            channel,
            stream_channel: channel_without_deadline(&socket),
            name,
            runtime_name: version.runtime_name,
            measure_image_fs: false,
        })
    }

    /// Its name, version and CRI API, as `check` says them: `cri-o 1.36.3
    /// (CRI v1)`.
    pub async fn describe(&self) -> String {
        match tokio::time::timeout(CONNECT_TIMEOUT, api::version(&self.channel)).await {
            Ok(Ok(v)) => format!(
                "{} {} (CRI {})",
                v.runtime_name, v.runtime_version, v.runtime_api_version
            ),
            _ => self.name.clone(),
        }
    }

    /// The runtime's name and version, as it answered: `cri-o 1.36.3`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This runtime, with inventories that measure the file system CRI's
    /// `ImageFsInfo` names as the image store.
    #[must_use]
    pub fn measuring_image_fs(mut self) -> Self {
        self.measure_image_fs = true;
        self
    }

    fn call_error(call: &'static str) -> impl FnOnce(Status) -> RuntimeError {
        move |e| RuntimeError::Call {
            runtime: RUNTIME,
            call,
            source: Box::new(e),
        }
    }

    /// The image file system: `statvfs(2)` of the directory `ImageFsInfo`
    /// names for images (its `usedBytes` counts the store's metadata only,
    /// measured on CRI-O). Where images and containers are on file systems
    /// of their own (KEP-4191), the image one. `None` when CRI names none,
    /// or it cannot be measured from here.
    async fn image_fs(&self) -> Option<crate::inventory::FsUsage> {
        match api::image_fs_mountpoint(&self.channel).await {
            Ok(Some(mountpoint)) => super::fs::fs_usage(std::path::Path::new(&mountpoint)),
            Ok(None) => {
                tracing::warn!(
                    "CRI names no image file system: its usage is unknown, and nothing is pruned by disk pressure"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not say where images are stored");
                None
            }
        }
    }

    /// Every container CRI lists, each with its status, as the inventory
    /// has them; a container gone between the list and its status is left
    /// out.
    async fn containers(
        &self,
        index: &ImageIndex,
    ) -> Result<Vec<crate::inventory::Container>, Status> {
        let listed = api::containers(&self.channel, None).await?;
        let mut containers: Vec<_> = stream::iter(listed)
            .map(|listed| {
                let mut cri = api::client(self.channel.clone());
                async move {
                    let status = api::status_of(&mut cri, &listed.id).await?;
                    Ok::<_, Status>(status.map(|s| (listed, s)))
                }
            })
            .buffer_unordered(STATUS_CONCURRENCY)
            .try_filter_map(|c| async move { Ok(c) })
            .map_ok(|(listed, status)| convert::container(&listed, Some(&status), index))
            .try_collect()
            .await?;
        containers.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(containers)
    }

    /// One container by id, exactly, with its status; `None` when CRI no
    /// longer knows it.
    async fn one_container(
        &self,
        id: &str,
        index: &ImageIndex,
    ) -> Result<Option<crate::inventory::Container>, Status> {
        let (listed, status) = tokio::try_join!(api::containers(&self.channel, Some(id)), async {
            api::status_of(&mut api::client(self.channel.clone()), id).await
        })?;
        Ok(match (listed.into_iter().next(), status) {
            (Some(listed), Some(status)) => Some(convert::container(&listed, Some(&status), index)),
            _ => None,
        })
    }

    /// Every container with its status, and every pod sandbox: what
    /// decides who uses an image and which pods are live.
    async fn pods(
        &self,
        index: &ImageIndex,
    ) -> Result<
        (
            Vec<crate::inventory::Container>,
            Vec<crate::inventory::PodSandbox>,
        ),
        RuntimeError,
    > {
        tokio::try_join!(
            async {
                self.containers(index)
                    .await
                    .map_err(Self::call_error("list containers"))
            },
            async {
                self.sandboxes()
                    .await
                    .map_err(Self::call_error("list pod sandboxes"))
            },
        )
    }

    async fn sandboxes(&self) -> Result<Vec<crate::inventory::PodSandbox>, Status> {
        let mut sandboxes: Vec<_> = api::sandboxes(&self.channel)
            .await?
            .iter()
            .filter(|s| !s.id.is_empty())
            .map(convert::sandbox)
            .collect();
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(sandboxes)
    }

    /// Removes a container once CRI shows this exact id exited: CRI's
    /// `RemoveContainer` stops a running container and answers OK for an
    /// unknown id, so it is never trusted to refuse.
    async fn remove_container(&self, id: &str) -> Removal {
        match api::status_of(&mut api::client(self.channel.clone()), id).await {
            Err(e) => {
                return Removal::Failed(format!(
                    "CRI does not answer ContainerStatus ({}): the container is not removed unchecked",
                    e.message()
                ));
            }
            Ok(None) => return Removal::Gone,
            Ok(Some(status)) if status.state != CriState::ContainerExited as i32 => {
                let state =
                    CriState::try_from(status.state).map_or("in a state CRI cannot name", |s| {
                        match s {
                            CriState::ContainerCreated => "created, not yet started",
                            CriState::ContainerRunning => "running",
                            _ => "in an unknown state",
                        }
                    });
                return Removal::InUse(format!(
                    "CRI shows the container {state}: only an exited container is removed"
                ));
            }
            Ok(Some(_)) => {}
        }
        match api::remove_container(&self.channel, id).await {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_status(&e),
        }
    }

    /// Removes an image by its full id: every name goes with it (by a name,
    /// CRI-O would only untag). The runtime refuses while a container uses
    /// it, which the re-check already saw.
    async fn remove_image(&self, id: &str) -> Removal {
        match api::image_status(&self.channel, id).await {
            Ok(None) => return Removal::Gone,
            Ok(Some(image)) if image.pinned => {
                return Removal::InUse("CRI now reports the image pinned".to_owned());
            }
            Ok(Some(_)) => {}
            Err(e) => {
                return Removal::Failed(format!(
                    "CRI does not answer ImageStatus ({})",
                    e.message()
                ));
            }
        }
        match api::remove_image(&self.channel, id).await {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_status(&e),
        }
    }

    /// The id of the image `name` names, as `ListImages` gives it; `None`
    /// when CRI does not know it.
    async fn image_id(&self, name: &str) -> Option<String> {
        match api::image_status(&self.channel, name).await {
            Ok(image) => image.map(|i| i.id).filter(|id| !id.is_empty()),
            Err(e) => {
                tracing::debug!(image = name, error = %e, "CRI does not answer ImageStatus");
                None
            }
        }
    }
}

/// A CRI error as a removal: gone, in use (CRI-O says "image is in use by
/// a container"), or failed.
fn removal_from_status(e: &Status) -> Removal {
    let message = e.message();
    match e.code() {
        Code::NotFound => Removal::Gone,
        _ if message.contains("in use") => Removal::InUse(message.to_owned()),
        Code::FailedPrecondition => Removal::InUse(message.to_owned()),
        _ => Removal::Failed(format!("CRI: {message} ({:?})", e.code())),
    }
}

impl Engine for CriRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Cri
    }

    fn not_applicable(&self) -> &'static [Kind] {
        &[Kind::Volume, Kind::Network, Kind::BuildCache]
    }

    /// Not measured beside a probe (CRI-O is in no registry here): a
    /// removal keeps the 0.3 ms least cost it was paced at before
    /// Docker's went to 0.2 ms, 1.5 times Docker's.
    fn removal_weight(&self) -> f64 {
        1.5
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        let images = api::list_images(&self.channel)
            .await
            .map_err(Self::call_error("list images"))?;
        let index = ImageIndex::new(&images);
        let (containers, sandboxes) = self.pods(&index).await?;
        let mut images: Vec<_> = images
            .into_iter()
            .filter(|i| !i.id.is_empty())
            .map(convert::image)
            .collect();
        images.sort_by(|a, b| a.id.cmp(&b.id));
        let image_fs = if self.measure_image_fs {
            self.image_fs().await
        } else {
            None
        };
        Ok(Inventory {
            runtime: RUNTIME.to_owned(),
            containers,
            images,
            sandboxes,
            image_fs,
            cri_runtime: self.runtime_name.clone(),
            ..Inventory::default()
        })
    }

    /// Containers: each by id (`ListContainers` filtered, and its status),
    /// and every pod sandbox. Images: each by `ImageStatus`, and every
    /// container with its status: an image's users are any container's
    /// image or image volume, and only the status names the volumes.
    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        let mut inventory = Inventory {
            runtime: RUNTIME.to_owned(),
            cri_runtime: self.runtime_name.clone(),
            ..Inventory::default()
        };
        match kind {
            Kind::Container => {
                let index = ImageIndex::default();
                let (containers, sandboxes) = tokio::try_join!(
                    async {
                        futures_util::future::try_join_all(
                            ids.iter().map(|id| self.one_container(id, &index)),
                        )
                        .await
                        .map_err(Self::call_error("container status"))
                    },
                    async {
                        self.sandboxes()
                            .await
                            .map_err(Self::call_error("list pod sandboxes"))
                    },
                )?;
                inventory.containers = containers.into_iter().flatten().collect();
                inventory.sandboxes = sandboxes;
            }
            Kind::Image => {
                let images = futures_util::future::try_join_all(
                    ids.iter().map(|id| api::image_status(&self.channel, id)),
                )
                .await
                .map_err(Self::call_error("image status"))?;
                // Exactly the images asked for: CRI resolves a name.
                let images: Vec<_> = images
                    .into_iter()
                    .flatten()
                    .filter(|i| ids.contains(&i.id.as_str()))
                    .collect();
                let index = ImageIndex::new(&images);
                let (containers, sandboxes) = self.pods(&index).await?;
                inventory.images = images.into_iter().map(convert::image).collect();
                inventory.containers = containers;
                inventory.sandboxes = sandboxes;
            }
            Kind::Volume | Kind::Network | Kind::BuildCache => {}
        }
        Ok(inventory)
    }

    async fn remove(&self, target: &Target) -> Removal {
        match target {
            Target::Container(c) => self.remove_container(&c.id).await,
            Target::Image(i) => self.remove_image(&i.id).await,
            Target::Volume(_) | Target::Network(_) | Target::BuildCache(_) => Removal::Failed(
                "CRI has no volumes, networks or build cache: nothing to remove".to_owned(),
            ),
        }
    }

    /// CRI keeps no history of uses: they are what the inventory's
    /// containers show, each creation and each exit.
    async fn image_uses(
        &self,
        inventory: &Inventory,
        _since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, Use)> {
        convert::uses_of(&inventory.containers)
    }

    /// Follows `GetContainerEvents`: each container's creation, start and
    /// stop is a use of its image. A runtime that does not serve the
    /// stream (CRI-O without `enable_pod_events = true` ends it at once;
    /// others answer Unimplemented) is followed no further: the uses are
    /// then recorded from each cycle's containers.
    async fn follow_image_uses(
        &self,
        uses: &tokio::sync::mpsc::Sender<(String, Use)>,
    ) -> Result<(), RuntimeError> {
        let broke = Self::call_error("follow container events");
        // CRI-O sends the stream's headers with its first event: opening
        // it waits for one. A stream that is not served ends at once; one
        // that is stays open (or brings an event) past the first 2 s.
        let opening = async {
            let mut events = api::container_events(&self.stream_channel).await?;
            let first = events.message().await?;
            Ok::<_, Status>((events, first))
        };
        tokio::pin!(opening);
        let mut said = false;
        let opened = if let Ok(opened) =
            tokio::time::timeout(std::time::Duration::from_secs(2), &mut opening).await
        {
            opened
        } else {
            following(&self.name, &mut said);
            opening.await
        };
        let (mut events, mut pending) = match opened {
            Ok((_, None)) => return not_served(&self.name).await,
            Err(e) if e.code() == Code::Unimplemented => return not_served(&self.name).await,
            Err(e) => return Err(broke(e)),
            Ok((events, Some(first))) => (events, Some(first)),
        };
        following(&self.name, &mut said);
        loop {
            let event = match pending.take() {
                Some(event) => event,
                None => match events.message().await {
                    Ok(Some(event)) => event,
                    Ok(None) => return Err(broke(Status::unavailable("the event stream ended"))),
                    Err(e) => return Err(broke(e)),
                },
            };
            let Some((images, this_use)) = use_of_event(&event) else {
                continue;
            };
            let mut ids: Vec<String> = Vec::new();
            for name in images {
                if let Some(id) = self.image_id(&name).await
                    && !ids.contains(&id)
                {
                    ids.push(id);
                }
            }
            for id in ids {
                if uses.send((id, this_use)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// The image names a container event uses, and when and how: `None` for
/// a sandbox's event (CRI-O sends one at `RunPodSandbox`, naming no
/// container of its list) and for a deletion.
///
/// The time is the container's own, from the status the event carries:
/// its creation, start or exit. The event's `created_at` is when CRI-O
/// sent it, and CRI-O sends a fast container's start after its exit (its
/// exit monitor races `StartContainer`): timed by the events, that start
/// would be the image's last use. A status that shows the container
/// exited makes any of its events its exit.
fn use_of_event(event: &k8s_cri::v1::ContainerEventResponse) -> Option<(Vec<String>, Use)> {
    let mut source = match ContainerEventType::try_from(event.container_event_type) {
        Ok(ContainerEventType::ContainerCreatedEvent) => UseSource::ContainerCreate,
        Ok(ContainerEventType::ContainerStartedEvent) => UseSource::ContainerStart,
        Ok(ContainerEventType::ContainerStoppedEvent) => UseSource::ContainerExit,
        Ok(ContainerEventType::ContainerDeletedEvent) | Err(_) => return None,
    };
    let status = event
        .containers_statuses
        .iter()
        .find(|s| s.id == event.container_id)?;
    if status.state == CriState::ContainerExited as i32 && status.finished_at > 0 {
        source = UseSource::ContainerExit;
    }
    let own = match source {
        UseSource::ContainerCreate => status.created_at,
        UseSource::ContainerStart => status.started_at,
        _ => status.finished_at,
    };
    let at = convert::from_unix_nanos(own)
        .or_else(|| convert::from_unix_nanos(event.created_at))
        .unwrap_or_else(chrono::Utc::now);
    let images = std::iter::once(status.image_id.clone())
        .chain(status.image.as_ref().map(|i| i.image.clone()))
        .chain(
            status
                .mounts
                .iter()
                .filter_map(|m| m.image.as_ref().map(|i| i.image.clone())),
        )
        .filter(|name| !name.is_empty())
        .collect();
    Some((images, Use { at, source }))
}

/// Says, once per stream (`said`), that the runtime's events are followed.
fn following(name: &str, said: &mut bool) {
    if !std::mem::replace(said, true) {
        tracing::info!(
            runtime = name,
            "following the CRI runtime's container events: image uses are recorded as they come"
        );
    }
}

/// Where the runtime serves no container events: said once, then nothing
/// more to follow (uses are recorded at each cycle).
async fn not_served(name: &str) -> Result<(), RuntimeError> {
    tracing::info!(
        runtime = name,
        "the CRI runtime serves no container events (CRI-O: enable_pod_events = true): image uses are recorded at each cycle"
    );
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_errors_say_gone_in_use_or_failed() {
        assert_eq!(
            removal_from_status(&Status::not_found("no such image")),
            Removal::Gone
        );
        assert_eq!(
            removal_from_status(&Status::unknown(
                "image used by 0123: image is in use by a container"
            )),
            Removal::InUse("image used by 0123: image is in use by a container".to_owned())
        );
        assert!(matches!(
            removal_from_status(&Status::internal("disk on fire")),
            Removal::Failed(m) if m.contains("disk on fire")
        ));
    }

    fn event(
        kind: ContainerEventType,
        sent: i64,
        state: CriState,
        times: [i64; 3],
    ) -> k8s_cri::v1::ContainerEventResponse {
        k8s_cri::v1::ContainerEventResponse {
            container_id: "c1".to_owned(),
            container_event_type: kind as i32,
            created_at: sent,
            containers_statuses: vec![k8s_cri::v1::ContainerStatus {
                id: "c1".to_owned(),
                state: state as i32,
                created_at: times[0],
                started_at: times[1],
                finished_at: times[2],
                image_id: "sha256:app".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn an_event_is_timed_by_its_containers_own_times() {
        let (images, created) = use_of_event(&event(
            ContainerEventType::ContainerCreatedEvent,
            9 * SECOND,
            CriState::ContainerCreated,
            [SECOND, 0, 0],
        ))
        .unwrap();
        assert_eq!(images, ["sha256:app"]);
        assert_eq!(created.source, UseSource::ContainerCreate);
        assert_eq!(created.at, convert::from_unix_nanos(SECOND).unwrap());
        let (_, started) = use_of_event(&event(
            ContainerEventType::ContainerStartedEvent,
            9 * SECOND,
            CriState::ContainerRunning,
            [SECOND, 2 * SECOND, 0],
        ))
        .unwrap();
        assert_eq!(started.source, UseSource::ContainerStart);
        assert_eq!(started.at, convert::from_unix_nanos(2 * SECOND).unwrap());
    }

    /// CRI-O sends a fast container's start after its exit: that start,
    /// whose status shows the exit, is the exit again, never a later use.
    #[test]
    fn a_start_sent_after_the_exit_is_the_exit() {
        let (_, stopped) = use_of_event(&event(
            ContainerEventType::ContainerStoppedEvent,
            4 * SECOND,
            CriState::ContainerExited,
            [SECOND, 2 * SECOND, 3 * SECOND],
        ))
        .unwrap();
        let (_, late_start) = use_of_event(&event(
            ContainerEventType::ContainerStartedEvent,
            5 * SECOND,
            CriState::ContainerExited,
            [SECOND, 2 * SECOND, 3 * SECOND],
        ))
        .unwrap();
        assert_eq!(stopped.source, UseSource::ContainerExit);
        assert_eq!(stopped.at, convert::from_unix_nanos(3 * SECOND).unwrap());
        assert_eq!(late_start, stopped);
    }

    #[test]
    fn a_sandboxs_event_or_a_deletion_is_no_use() {
        let mut sandbox = event(
            ContainerEventType::ContainerStartedEvent,
            SECOND,
            CriState::ContainerRunning,
            [SECOND, SECOND, 0],
        );
        sandbox.container_id = "sandbox".to_owned();
        assert_eq!(use_of_event(&sandbox), None);
        let deleted = event(
            ContainerEventType::ContainerDeletedEvent,
            SECOND,
            CriState::ContainerExited,
            [SECOND, SECOND, SECOND],
        );
        assert_eq!(use_of_event(&deleted), None);
    }

    /// A status without times (never seen from CRI-O) falls back to when
    /// the event was sent.
    #[test]
    fn without_its_own_time_an_event_is_timed_when_sent() {
        let (_, started) = use_of_event(&event(
            ContainerEventType::ContainerStartedEvent,
            7 * SECOND,
            CriState::ContainerRunning,
            [0, 0, 0],
        ))
        .unwrap();
        assert_eq!(started.at, convert::from_unix_nanos(7 * SECOND).unwrap());
    }
}
