//! The Docker Engine adapter: bollard's answers in, an [`Inventory`] out, and
//! one removal at a time, never with force.
//!
//! Every Docker quirk safeprune has to know lives in this module, next to
//! the code that handles it, with where it was seen. "Measured" means:
//! against Docker Engine 20.10.24 (API 1.41) from Debian 12, see
//! `tests/integration/docker_adapter.rs`. `convert` turns Docker's data into the
//! inventory's; `disk_usage` reads the build cache bollard cannot;
//! `recheck` reads a batch again before its removal, `remove` removes one
//! object.

mod buildkit;
mod connect;
mod convert;
mod disk_usage;
mod recheck;
mod remove;
mod store;
mod uses;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerInspectResponse, ContainerSummary, EventMessage, ImageSummary};
use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, ListNetworksOptionsBuilder,
};
use futures_util::future::try_join_all;
use futures_util::{StreamExt, TryStreamExt, stream};

use self::convert::{
    byte_size, container_from_inspect, container_from_summary, image_from_inspect,
    network_from_docker, parse_docker_time, volume_from_docker,
};
use self::watch::{Update, Watch};
use super::engine::{Engine, Removal, Target};
use super::error::RuntimeError;
use crate::inventory::Kind;
use crate::inventory::provenance::Provenance;
use crate::inventory::{
    BuildCacheEntry, Container, ContainerState, Image, Inventory, Network, Volume,
    sandboxes_from_containers,
};

const RUNTIME: &str = "docker";
/// Per-request timeout, in seconds. `/system/df` on a node with large
/// volumes is the slowest call we make.
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How many inspects run at once: enough to hide latency, few enough not to
/// load a busy dockerd.
const INSPECT_CONCURRENCY: usize = 8;

/// A connection to one Docker Engine, over its unix socket.
pub struct DockerRuntime {
    docker: Docker,
    /// The socket path, for the one call bollard cannot make: the build
    /// cache records of `/system/df` (see `disk_usage`).
    socket: PathBuf,
    /// Every container since the snapshot, kept fresh from the event
    /// history: what re-checks read instead of listing (see `watch`).
    /// Boxed: it would make every `Runtime` as large as itself.
    watch: Box<watch::Shared>,
    /// Whether the inventory reads the build cache: on API 1.41 that is a
    /// full `/system/df`, which sizes every container, image and volume.
    read_build_cache: bool,
    /// Whether the inventory measures the file system holding the images
    /// (`images.disk`): see `image_fs`.
    measure_image_fs: bool,
    /// Whether images live in containerd's store (Docker 29's default):
    /// there a parent may be deleted while its child exists, so the parent
    /// chain holds nothing (FACTS, Docker 29).
    containerd_store: bool,
}

impl DockerRuntime {
    /// The same connection, with inventories that measure the file system
    /// holding the engine's images (`DockerRootDir`; on the containerd
    /// image store, containerd's snapshotter root).
    #[must_use]
    pub fn measuring_image_fs(mut self) -> Self {
        self.measure_image_fs = true;
        self
    }

    /// The same connection, with inventories that leave the build cache
    /// unread (the policy does not prune it): no `/system/df`, the
    /// slowest call of an inventory on API 1.41.
    #[must_use]
    pub fn without_build_cache(mut self) -> Self {
        self.read_build_cache = false;
        self
    }

    fn call_error(call: &'static str) -> impl FnOnce(BollardError) -> RuntimeError {
        move |e| RuntimeError::Call {
            runtime: RUNTIME,
            call,
            source: e.into(),
        }
    }

    /// Lists containers of every state matching `filters`.
    async fn list_containers(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .size(false)
            .filters(filters)
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(Self::call_error("list containers"))
    }

    /// Containers matching `filters`, with exit times when `exit_times`.
    ///
    /// `/containers/json` has no exit time, so each stopped container is
    /// inspected for `State.FinishedAt`, a few at a time. A container that
    /// vanishes between the list and its inspect is left out.
    async fn containers(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
        exit_times: bool,
    ) -> Result<Vec<Container>, RuntimeError> {
        let containers: Vec<Container> = self
            .list_containers(filters)
            .await?
            .into_iter()
            .filter_map(container_from_summary)
            .collect();
        if !exit_times {
            return Ok(containers);
        }
        stream::iter(containers)
            .map(|mut container| async move {
                // Only exited and dead containers have run to an end. A
                // `created` one never ran; one whose start failed stays
                // `created` with the zero FinishedAt too (measured).
                if !matches!(
                    container.state,
                    ContainerState::Exited | ContainerState::Dead
                ) {
                    return Ok(Some(container));
                }
                let Some(inspect) = self.inspect_sized(&container.id).await? else {
                    return Ok(None);
                };
                container.size = inspect.size_rw.and_then(byte_size);
                container.finished = inspect
                    .state
                    .and_then(|s| s.finished_at)
                    .as_deref()
                    .and_then(parse_docker_time);
                Ok(Some(container))
            })
            .buffer_unordered(INSPECT_CONCURRENCY)
            .try_filter_map(|c| async move { Ok(c) })
            .try_collect::<Vec<_>>()
            .await
            .map(sorted_by_id)
    }

    /// A container inspected with the size of its writable layer
    /// (`SizeRw`: what removing it frees); `None` when it does not exist.
    ///
    /// A 404 there is not always a missing container. On Docker 29's
    /// containerd store, a container whose removal was cut short (dockerd
    /// killed between deleting its snapshot and its record) comes back
    /// `dead` with no snapshot, and `?size=1` answers 404 "rw layer snapshot
    /// not found" while the plain inspect and `DELETE` work (measured). So
    /// a 404 is asked again without the size: the container is kept, its
    /// size unknown, and removed like any other.
    async fn inspect_sized(
        &self,
        id: &str,
    ) -> Result<Option<ContainerInspectResponse>, RuntimeError> {
        let sized = InspectContainerOptionsBuilder::default().size(true).build();
        match self.docker.inspect_container(id, Some(sized)).await {
            Ok(inspect) => return Ok(Some(inspect)),
            Err(e) if status_code(&e) == Some(404) => {}
            Err(e) => return Err(Self::call_error("inspect container")(e)),
        }
        match self.docker.inspect_container(id, None).await {
            Ok(inspect) => Ok(Some(inspect)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect container")(e)),
        }
    }

    /// One container by id, with its exit time; `None` when it does not
    /// exist. Docker takes a prefix or a name too: only the exact id counts.
    async fn container(&self, id: &str) -> Result<Option<Container>, RuntimeError> {
        match self.docker.inspect_container(id, None).await {
            Ok(inspect) => Ok(container_from_inspect(inspect).filter(|c| c.id == id)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect container")(e)),
        }
    }

    /// The watch, brought up to date: the events since its last read, each
    /// container they name inspected again; or, with no watch yet or a
    /// history that may have lost events, every container listed again.
    async fn synced_watch(&self) -> Result<tokio::sync::MutexGuard<'_, Watch>, RuntimeError> {
        let mut watch = self.watch.watch.lock().await;
        let until = SystemTime::now();
        let update = match watch.since() {
            None => Update::Relist,
            Some(since) => match self.events(since, until, &HashMap::new()).await {
                Ok(events) => watch::update_from(&events),
                // An engine that does not answer would not answer a list
                // either.
                Err(e @ BollardError::RequestTimeoutError) => {
                    return Err(Self::call_error("read events")(e));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read docker events; listing containers again");
                    Update::Relist
                }
            },
        };
        match update {
            Update::Relist => {
                tracing::debug!("re-check lists every container");
                let taken = SystemTime::now();
                let containers = self.containers(&HashMap::new(), false).await?;
                *watch = Watch::new(containers, taken, false);
            }
            Update::Containers {
                gone,
                changed,
                volumes,
                images,
            } => {
                let found = try_join_all(changed.iter().map(|id| self.container(id))).await?;
                watch.apply(
                    &gone,
                    changed.into_iter().zip(found),
                    &volumes,
                    images.as_ref(),
                    until,
                );
            }
        }
        // After the read: what it found of a container removed meanwhile
        // (an inspect answered just before the removal) does not bring it
        // back.
        self.watch.forget_removed(&mut watch);
        Ok(watch)
    }

    /// Makes the watch read no event made before now, as when dockerd
    /// appends its events to its history after a read took it: for tests
    /// of what re-checks do when the watch missed an event.
    #[doc(hidden)]
    pub async fn skip_events_until_now(&self) {
        self.watch.watch.lock().await.skip_until(SystemTime::now());
    }

    /// The events dockerd still holds from `since` to `until`.
    ///
    /// bollard's request timeout does not bind a streamed answer: a hung
    /// dockerd would hold the read forever without this one.
    async fn events(
        &self,
        since: SystemTime,
        until: SystemTime,
        filters: &HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<EventMessage>, BollardError> {
        let options = EventsOptionsBuilder::default()
            .since(&watch::api_time(since))
            .until(&watch::api_time(until))
            .filters(filters)
            .build();
        let read = self.docker.events(Some(options)).try_collect();
        tokio::time::timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS), read)
            .await
            .unwrap_or(Err(BollardError::RequestTimeoutError))
    }

    /// Every top-level image, dangling ones included, each with its size
    /// as the list gives it.
    ///
    /// Each image is inspected too: `Metadata.LastTagTime` (when it was
    /// last pulled, tagged or loaded) exists only there, and without it an
    /// image built long ago but pulled a minute ago would look old. A node
    /// holds tens to a few hundred images and an inspect is a metadata read,
    /// so a bounded fan-out is cheap.
    async fn images(&self) -> Result<Vec<Image>, RuntimeError> {
        let summaries = self.list_images(false).await?;
        stream::iter(summaries)
            .map(|summary| async move { self.image(&summary.id, Some(&summary)).await })
            .buffer_unordered(INSPECT_CONCURRENCY)
            .try_filter_map(|i| async move { Ok(i) })
            .try_collect::<Vec<_>>()
            .await
            .map(|mut images| {
                images.sort_by(|a, b| a.id.cmp(&b.id));
                images
            })
    }

    /// The image list: the top-level images, or with `all` the hidden
    /// ones too (the graph driver store's untagged parents).
    async fn list_images(&self, all: bool) -> Result<Vec<ImageSummary>, RuntimeError> {
        let options = ListImagesOptionsBuilder::default().all(all).build();
        self.docker
            .list_images(Some(options))
            .await
            .map_err(Self::call_error("list images"))
    }

    /// Image `id`, inspected (whether it exists, its references, its last
    /// tag time), with the size and parent of its entry in the image list
    /// (`listed`); `None` when it does not exist.
    ///
    /// The size is the list's, never inspect's own (see
    /// `image_from_inspect`): an image the list missed (made between the two
    /// calls) has none. The parent is the entry's `ParentId` (set by `docker
    /// commit` and classic builds, empty for pulls; inspect no longer
    /// carries it from API 1.52 on), and none on the containerd store,
    /// where the engine deletes a parent while its child exists.
    async fn image(
        &self,
        id: &str,
        listed: Option<&ImageSummary>,
    ) -> Result<Option<Image>, RuntimeError> {
        let inspect = match self.docker.inspect_image(id).await {
            Ok(inspect) => inspect,
            Err(e) if status_code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(Self::call_error("inspect image")(e)),
        };
        let Some(mut image) = image_from_inspect(inspect, listed.and_then(|s| byte_size(s.size)))
        else {
            return Ok(None);
        };
        let parent = listed.map_or("", |s| s.parent_id.as_str());
        image.parent = (!self.containerd_store && !parent.is_empty()).then(|| parent.to_owned());
        // On the graph driver store a repo digest is a pull's (or a push's)
        // record; on the containerd image store every tagged image has one,
        // and containerd's labels say instead (`with_provenances`).
        image.provenance = if self.containerd_store {
            Provenance::Unknown {
                why: store::CONTAINERD_STORE_UNREAD.into(),
            }
        } else {
            Provenance::from_repo_digests(&image.digests)
        };
        Ok(Some(image))
    }

    async fn volumes(&self) -> Result<Vec<Volume>, RuntimeError> {
        let listed = self
            .docker
            .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
            .await
            .map_err(Self::call_error("list volumes"))?;
        let mut volumes: Vec<Volume> = listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(volume_from_docker)
            .collect();
        volumes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(volumes)
    }

    async fn networks(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<Network>, RuntimeError> {
        let options = ListNetworksOptionsBuilder::default()
            .filters(filters)
            .build();
        let mut networks: Vec<Network> = self
            .docker
            .list_networks(Some(options))
            .await
            .map_err(Self::call_error("list networks"))?
            .into_iter()
            .filter_map(network_from_docker)
            .collect();
        networks.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(networks)
    }

    /// Build cache records; empty (with a warning) when the engine will not
    /// say. Missing records mean nothing is pruned from the cache, the safe
    /// side.
    async fn build_cache(&self) -> Vec<BuildCacheEntry> {
        if !self.read_build_cache {
            return Vec::new();
        }
        match self.build_cache_records().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list docker build cache; leaving it alone");
                Vec::new()
            }
        }
    }

    /// Gives each image what removing it alone frees, where `/system/df`
    /// says: the disk rules project with it (`images.disk`), and `explain`
    /// shows it beside the size. Never more than the image's size (the
    /// list's, read a moment apart).
    ///
    /// Without it (the engine does not answer, or its answer gives no
    /// `SharedSize`: the legacy `Images` list the API announces it drops),
    /// every unique size is unknown and each image's full size stands in,
    /// which over-counts what shared layers free: one warning per inventory
    /// says so.
    async fn with_unique_sizes(&self, images: &mut [Image]) {
        let version = self.docker.client_version().to_string();
        let timeout = Duration::from_secs(REQUEST_TIMEOUT_SECS);
        let sizes = disk_usage::image_unique_sizes(&self.socket, &version, timeout).await;
        disk_usage::apply_unique_sizes(images, sizes);
    }

    /// The build cache records: from `/system/df?type=build-cache` on API
    /// 1.42 and later; before that `/system/df` sizes everything, so from
    /// dockerd's `BuildKit` (`buildkit`), and from `/system/df` only when
    /// `BuildKit` does not answer.
    async fn build_cache_records(&self) -> Result<Vec<BuildCacheEntry>, String> {
        let version = self.docker.client_version().to_string();
        let timeout = Duration::from_secs(REQUEST_TIMEOUT_SECS);
        let records = if df_sizes_everything(&version) {
            match buildkit::build_cache(&self.socket, timeout).await {
                Ok(records) => records,
                Err(e) => {
                    tracing::debug!(error = %e, "BuildKit does not answer: build cache from /system/df");
                    disk_usage::build_cache(&self.socket, &version, timeout).await?
                }
            }
        } else {
            disk_usage::build_cache(&self.socket, &version, timeout).await?
        };
        if records.is_empty() {
            tracing::debug!("docker reports no build cache records");
        }
        Ok(records)
    }
}

/// Whether `/system/df` in API `version` ignores `type=build-cache` and
/// sizes every image, container and volume: before 1.42.
fn df_sizes_everything(version: &str) -> bool {
    crate::inventory::ApiVersion::parse(version)
        .is_some_and(|v| v < crate::inventory::ApiVersion::new(1, 42))
}

impl Engine for DockerRuntime {
    fn kind(&self) -> crate::inventory::RuntimeKind {
        crate::inventory::RuntimeKind::Docker
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        let no_filter = HashMap::new();
        let taken = SystemTime::now();
        // The build cache read runs alongside: on API 1.41 it is a full
        // `/system/df`, the slowest call here.
        let (listed, build_cache) = tokio::join!(
            async {
                tokio::try_join!(
                    self.containers(&no_filter, true),
                    self.images(),
                    self.volumes(),
                    self.networks(&no_filter),
                )
            },
            self.build_cache(),
        );
        let (containers, mut images, volumes, networks) = listed?;
        self.with_provenances(&mut images).await;
        // After the lists: what they show is on the disk measured.
        let image_fs = if self.measure_image_fs {
            self.with_unique_sizes(&mut images).await;
            self.image_fs().await?
        } else {
            None
        };
        let sandboxes = sandboxes_from_containers(&containers);
        *self.watch.watch.lock().await = Watch::new(containers.clone(), taken, true)
            .with_volumes(volumes.clone())
            .with_images(images.clone());
        tracing::debug!(
            containers = containers.len(),
            images = images.len(),
            volumes = volumes.len(),
            networks = networks.len(),
            build_cache = build_cache.len(),
            sandboxes = sandboxes.len(),
            "docker inventory taken"
        );
        Ok(Inventory {
            runtime: RUNTIME.to_owned(),
            containers,
            images,
            volumes,
            networks,
            build_cache,
            sandboxes,
            image_fs,
            api_version: crate::inventory::ApiVersion::parse(
                &self.docker.client_version().to_string(),
            ),
            image_store: if self.containerd_store {
                crate::inventory::ImageStore::Containerd
            } else {
                crate::inventory::ImageStore::Graph
            },
            cri_runtime: String::new(),
        })
    }

    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        self.recheck_batch(kind, ids).await
    }

    /// Containers created, started and exited, from dockerd's event
    /// history (it holds its last 256 events or so): each with the image it
    /// was made from, as the creator named it.
    async fn image_uses(
        &self,
        _inventory: &Inventory,
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, crate::inventory::Use)> {
        let since = since.map_or(SystemTime::UNIX_EPOCH, SystemTime::from);
        let events = match self
            .events(since, SystemTime::now(), &uses::filters())
            .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read docker's events: no image use recorded from them");
                return Vec::new();
            }
        };
        events
            .into_iter()
            .filter_map(uses::parse)
            .map(|e| (e.image, e.used))
            .collect()
    }

    async fn follow_image_uses(
        &self,
        uses: &tokio::sync::mpsc::Sender<(String, crate::inventory::Use)>,
    ) -> Result<(), RuntimeError> {
        uses::follow(&self.docker, uses)
            .await
            .map_err(Self::call_error("follow events"))
    }

    async fn remove(&self, target: &Target) -> Removal {
        self.remove_one(target).await
    }
}

fn sorted_by_id(mut containers: Vec<Container>) -> Vec<Container> {
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    containers
}

/// The HTTP status of an error Docker answered with; `None` when it did
/// not answer.
fn status_code(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}
