//! The Docker Engine adapter: bollard's answers in, an [`Inventory`] out, and
//! one removal at a time, never with force.
//!
//! Every Docker quirk safeprune has to know lives in this module, next to
//! the code that handles it, with where it was seen. "Measured" means:
//! against Docker Engine 20.10.24 (API 1.41) from Debian 12, see
//! `tests/docker_adapter.rs`. `convert` turns Docker's data into the
//! inventory's; `disk_usage` reads the build cache bollard cannot.

mod buildkit;
mod convert;
mod disk_usage;
mod uses;
mod watch;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bollard::errors::Error as BollardError;
use bollard::models::{ContainerSummary, EventMessage};
use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, ListNetworksOptionsBuilder, PruneBuildOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder, RemoveVolumeOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker};
use futures_util::future::try_join_all;
use futures_util::{StreamExt, TryStreamExt, stream};

use self::convert::{
    byte_size, container_from_inspect, container_from_summary, image_from_inspect,
    network_from_docker, parse_docker_time, real_refs, volume_from_docker,
};
use self::watch::{Update, Watch};
use super::{Engine, Removal, RuntimeError};
use crate::inventory::Kind;
use crate::inventory::{
    BuildCacheEntry, Container, ContainerState, Image, Inventory, Network, Volume,
    sandboxes_from_containers,
};

const RUNTIME: &str = "docker";
const UNREACHABLE_HINT: &str = "is dockerd running, and is the socket path right?";
/// Per-request timeout, in seconds. `/system/df` on a node with large
/// volumes is the slowest call we make.
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How long the engine has to answer its first calls (version, ping).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
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
    watch: Box<tokio::sync::Mutex<Watch>>,
    /// Whether the inventory reads the build cache: on API 1.41 that is a
    /// full `/system/df`, which sizes every container, image and volume.
    read_build_cache: bool,
    /// Whether the inventory measures the file system of `DockerRootDir`
    /// (`images.disk`).
    measure_image_fs: bool,
    /// Whether images live in containerd's store (Docker 29's default):
    /// there a parent may be deleted while its child exists, so the parent
    /// chain holds nothing (FACTS, Docker 29).
    containerd_store: bool,
    /// The references of each image as its last re-check read them: what
    /// its removal untags.
    rechecked_refs: std::sync::Mutex<HashMap<String, Vec<String>>>,
}

impl DockerRuntime {
    /// Connects to the engine at `endpoint` (`unix:///var/run/docker.sock`
    /// or a bare socket path), agrees on an API version and pings it.
    ///
    /// # Errors
    /// [`RuntimeError::Unreachable`] when the endpoint is not a unix socket,
    /// does not exist, or does not answer.
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: UNREACHABLE_HINT,
                source,
            };
        let socket = super::socket_path(RUNTIME, endpoint)?;
        let docker = Docker::connect_with_socket(
            &socket.to_string_lossy(),
            REQUEST_TIMEOUT_SECS,
            API_DEFAULT_VERSION,
        )
        .map_err(|e| unreachable(e.into()))?;
        // Any unix socket accepts a connection: a socket whose server never
        // answers must not hold the run for the whole request timeout.
        let answered = tokio::time::timeout(CONNECT_TIMEOUT, async {
            // Talk the engine's own version: bollard's default (1.5x) is
            // newer than what Debian's 20.10 speaks (1.41).
            let docker = docker.negotiate_version().await?;
            docker.ping().await?;
            Ok::<_, BollardError>(docker)
        })
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?;
        let docker = answered.map_err(|e| unreachable(e.into()))?;
        let version = docker.client_version();
        // Unknown (no answer) counts as the graph driver store, where a
        // parent is held: the safe side.
        let containerd_store = tokio::time::timeout(CONNECT_TIMEOUT, docker.info())
            .await
            .ok()
            .and_then(Result::ok)
            .is_some_and(|info| convert::uses_containerd_store(&info));
        tracing::debug!(endpoint, api_version = %version, containerd_store, "connected to docker");
        Ok(Self {
            docker,
            socket,
            containerd_store,
            watch: Box::default(),
            read_build_cache: true,
            measure_image_fs: false,
            rechecked_refs: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The same connection, with inventories that measure the file system
    /// holding the engine's data (`DockerRootDir`).
    #[must_use]
    pub fn measuring_image_fs(mut self) -> Self {
        self.measure_image_fs = true;
        self
    }

    /// The file system of `DockerRootDir`, where images live; `None` when
    /// it cannot be measured from here.
    async fn image_fs(&self) -> Result<Option<crate::inventory::FsUsage>, RuntimeError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(Self::call_error("read engine info"))?;
        Ok(info
            .docker_root_dir
            .and_then(|root| super::fs_usage(Path::new(&root))))
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
                // With `size`, the engine adds the writable layer's size
                // (`SizeRw`): what removing the container frees.
                let options = InspectContainerOptionsBuilder::default().size(true).build();
                match self
                    .docker
                    .inspect_container(&container.id, Some(options))
                    .await
                {
                    Ok(inspect) => {
                        container.size = inspect.size_rw.and_then(byte_size);
                        container.finished = inspect
                            .state
                            .and_then(|s| s.finished_at)
                            .as_deref()
                            .and_then(parse_docker_time);
                        Ok(Some(container))
                    }
                    Err(e) if status_code(&e) == Some(404) => Ok(None),
                    Err(e) => Err(Self::call_error("inspect container")(e)),
                }
            })
            .buffer_unordered(INSPECT_CONCURRENCY)
            .try_filter_map(|c| async move { Ok(c) })
            .try_collect::<Vec<_>>()
            .await
            .map(sorted_by_id)
    }

    /// One container by id, with its exit time (and the size of its
    /// writable layer when `size`); `None` when it does not exist. Docker
    /// takes a prefix or a name too: only the exact id counts.
    async fn container(&self, id: &str, size: bool) -> Result<Option<Container>, RuntimeError> {
        let options = InspectContainerOptionsBuilder::default().size(size).build();
        match self.docker.inspect_container(id, Some(options)).await {
            Ok(inspect) => Ok(container_from_inspect(inspect).filter(|c| c.id == id)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect container")(e)),
        }
    }

    /// The watch, brought up to date: the events since its last read, each
    /// container they name inspected again; or, with no watch yet or a
    /// history that may have lost events, every container listed again.
    async fn synced_watch(&self) -> Result<tokio::sync::MutexGuard<'_, Watch>, RuntimeError> {
        let mut watch = self.watch.lock().await;
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
                let found =
                    try_join_all(changed.iter().map(|id| self.container(id, false))).await?;
                watch.apply(
                    &gone,
                    changed.into_iter().zip(found),
                    &volumes,
                    images.as_ref(),
                    until,
                );
            }
        }
        Ok(watch)
    }

    /// A batch of containers, re-checked: see `Engine::recheck`.
    async fn recheck_containers(
        &self,
        ids: &[&str],
        fresh: &mut Inventory,
    ) -> Result<(), RuntimeError> {
        // A container the watch read in full (the snapshot, or an inspect
        // after an event) has not changed since: no event names it. Any
        // other is inspected now.
        let watch = self.synced_watch().await?;
        fresh.containers =
            known_or_read(ids, |id| watch.complete(id), |id| self.container(id, false)).await?;
        let sandbox_ids: HashSet<&str> = fresh
            .containers
            .iter()
            .filter_map(|c| c.pod.as_ref()?.sandbox_id.as_deref())
            .collect();
        let pod_uids: HashSet<&str> = fresh
            .containers
            .iter()
            .filter_map(|c| c.pod.as_ref()?.pod_uid.as_deref())
            .collect();
        fresh.sandboxes = watch.sandboxes_of(&sandbox_ids, &pod_uids);
        Ok(())
    }

    /// A batch of volumes, re-checked: see `Engine::recheck`.
    async fn recheck_volumes(
        &self,
        ids: &[&str],
        fresh: &mut Inventory,
    ) -> Result<(), RuntimeError> {
        // A volume no event named since the snapshot is as the snapshot
        // read it; any other is inspected now.
        let watch = self.synced_watch().await?;
        fresh.volumes =
            known_or_read(ids, |id| watch.unchanged_volume(id), |id| self.volume(id)).await?;
        let names: HashSet<&str> = fresh.volumes.iter().map(|v| v.name.as_str()).collect();
        fresh.containers = watch.users_of_volumes(&names);
        Ok(())
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

    /// Every top-level image, dangling ones included.
    ///
    /// Each image is inspected too: `Metadata.LastTagTime` (when it was
    /// last pulled, tagged or loaded) exists only there, and without it an
    /// image built long ago but pulled a minute ago would look old. A node
    /// holds tens to a few hundred images and an inspect is a metadata read,
    /// so a bounded fan-out is cheap.
    async fn images(&self) -> Result<Vec<Image>, RuntimeError> {
        let options = ListImagesOptionsBuilder::default().all(false).build();
        let summaries = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(Self::call_error("list images"))?;
        stream::iter(summaries)
            .map(|summary| async move {
                let image = self.image(&summary.id).await?;
                Ok(image.map(|i| self.with_parent(i, &summary.parent_id)))
            })
            .buffer_unordered(INSPECT_CONCURRENCY)
            .try_filter_map(|i| async move { Ok(i) })
            .try_collect::<Vec<_>>()
            .await
            .map(|mut images| {
                images.sort_by(|a, b| a.id.cmp(&b.id));
                images
            })
    }

    /// The images built directly on one of `parents`, listed and read now:
    /// after an image event the watch no longer knows every image.
    async fn children_listed(&self, parents: &HashSet<&str>) -> Result<Vec<Image>, RuntimeError> {
        let options = ListImagesOptionsBuilder::default().all(false).build();
        let summaries = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(Self::call_error("list images"))?;
        let mut children = Vec::new();
        for summary in summaries
            .iter()
            .filter(|s| parents.contains(s.parent_id.as_str()))
        {
            let child = self.image(&summary.id).await?;
            children.extend(child.map(|i| self.with_parent(i, &summary.parent_id)));
        }
        Ok(children)
    }

    /// `image` with the parent its list entry names (`ParentId`: set by
    /// `docker commit` and classic builds, empty for pulls; inspect no
    /// longer carries it from API 1.52 on). None on the containerd store,
    /// where the engine deletes a parent while its child exists.
    fn with_parent(&self, mut image: Image, parent_id: &str) -> Image {
        image.parent =
            (!self.containerd_store && !parent_id.is_empty()).then(|| parent_id.to_owned());
        image
    }

    /// One image by id; `None` when it does not exist.
    async fn image(&self, id: &str) -> Result<Option<Image>, RuntimeError> {
        match self.docker.inspect_image(id).await {
            Ok(inspect) => Ok(image_from_inspect(inspect)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect image")(e)),
        }
    }

    /// One volume by name; `None` when it does not exist.
    async fn volume(&self, name: &str) -> Result<Option<Volume>, RuntimeError> {
        match self.docker.inspect_volume(name).await {
            Ok(volume) => Ok(Some(volume_from_docker(volume))),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect volume")(e)),
        }
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
    /// says: the disk rules project with it (`images.disk`). Without it,
    /// an image's full size stands in.
    async fn with_unique_sizes(&self, images: &mut [Image]) {
        let version = self.docker.client_version().to_string();
        let timeout = Duration::from_secs(REQUEST_TIMEOUT_SECS);
        match disk_usage::image_unique_sizes(&self.socket, &version, timeout).await {
            Ok(sizes) => {
                for image in images {
                    image.unique_size = sizes.get(&image.id).copied();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the images' unique sizes: their sizes stand in");
            }
        }
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

    /// Removes an image without force.
    ///
    /// By id, Docker deletes an image whose references all name one
    /// repository with at most one tag (`app:1` and `app@sha256:…`) together
    /// with them, and refuses (409) while any container, running or
    /// stopped, uses it: one call, the check made by the engine itself.
    /// An image with more references is refused by id (409 "must be
    /// forced"), so it loses them one by one and the last untag deletes it.
    /// An untag succeeds even while a container uses the image; only the
    /// last one is refused (409, measured), which would leave the image
    /// stripped of all but one name. So first make sure, from the watch,
    /// that no container uses it.
    async fn remove_image(&self, id: &str) -> Removal {
        let rechecked = self
            .rechecked_refs
            .lock()
            .ok()
            .and_then(|mut r| r.remove(id));
        let (id, refs) = match rechecked {
            Some(refs) => (id.to_owned(), refs),
            None => match self.docker.inspect_image(id).await {
                // Containers name their image by its full id.
                Ok(inspect) => {
                    let mut refs = real_refs(inspect.repo_tags.unwrap_or_default());
                    refs.extend(real_refs(inspect.repo_digests.unwrap_or_default()));
                    (inspect.id.unwrap_or_else(|| id.to_owned()), refs)
                }
                Err(e) => return removal_from_error(e),
            },
        };
        let id = id.as_str();
        let options = || {
            RemoveImageOptionsBuilder::default()
                .force(false)
                .noprune(false)
                .build()
        };
        let by_tags = !convert::is_single_repository(&refs);
        if by_tags {
            let keys: HashSet<&str> = std::iter::once(id)
                .chain(refs.iter().map(String::as_str))
                .collect();
            match self.synced_watch().await {
                Ok(watch) => {
                    if let Some(user) = watch.users_of_images(&keys).first() {
                        return Removal::InUse(format!("image is used by container {}", user.id));
                    }
                }
                Err(e) => return super::failed(&e),
            }
            for reference in &refs {
                // A tag may have moved to another image since the re-check
                // (a pull of `app:latest`): untag only what still names
                // this one.
                match self.docker.inspect_image(reference).await {
                    Ok(now) if now.id.as_deref() == Some(id) => {}
                    Ok(_) => continue,
                    Err(e) if status_code(&e) == Some(404) => continue,
                    Err(e) => return removal_from_error(e),
                }
                match self
                    .docker
                    .remove_image(reference, Some(options()), None)
                    .await
                {
                    // 404: removing a tag may also drop the digest references
                    // of its repository.
                    Ok(_) => {}
                    Err(e) if status_code(&e) == Some(404) => {}
                    Err(e) => return removal_from_error(e),
                }
            }
            // The last untag normally deleted the image. If it is still
            // there (a child image holds it), delete it by id below, unless
            // it was tagged again meanwhile.
            match self.docker.inspect_image(id).await {
                Err(e) if status_code(&e) == Some(404) => return Removal::Removed,
                Err(e) => return removal_from_error(e),
                Ok(now) => {
                    let tags = real_refs(now.repo_tags.unwrap_or_default());
                    if !tags.is_empty() {
                        return Removal::InUse(format!(
                            "image was tagged again while being removed: {}",
                            tags.join(", ")
                        ));
                    }
                }
            }
        }
        match self.docker.remove_image(id, Some(options()), None).await {
            Ok(_) => Removal::Removed,
            // We untagged it and someone else deleted it meanwhile: removed.
            Err(e) if status_code(&e) == Some(404) && by_tags => Removal::Removed,
            Err(e) => removal_from_error(e),
        }
    }

    /// Removes one build cache record with `/build/prune`, the only way
    /// Docker offers.
    ///
    /// Its `id` filter is not an equality: `BuildKit` matches `id~=<value>`,
    /// so `p7pv` pruned `p7pvls5mii8ajxkkv9eqzw17s` (measured). We refuse an
    /// id that would match another record, and check what was pruned.
    async fn remove_build_cache(&self, id: &str) -> Removal {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Removal::Failed(format!("unexpected build cache id {id:?}"));
        }
        let records = match self.build_cache_records().await {
            Ok(records) => records,
            Err(e) => return Removal::Failed(e),
        };
        // A record missing from one listing is not trusted to be gone: a
        // listing taken while BuildKit prunes may leave records out
        // (measured: a chain's record reported gone, still there after).
        // The prune by id says, and the listing after it.
        let listed = records.iter().any(|r| r.id == id);
        if let Some(other) = records.iter().find(|r| r.id != id && r.id.contains(id)) {
            // Unlisted, it is no record but a piece of another's id, which
            // the prune's filter would match: gone, and nothing pruned.
            if !listed {
                return Removal::Gone;
            }
            return Removal::Failed(format!(
                "the prune filter for {id} would also match build cache record {}",
                other.id
            ));
        }
        let filters = HashMap::from([("id", vec![id])]);
        // `all`: without it BuildKit prunes only records it deems dangling.
        let options = PruneBuildOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let pruned = match self.docker.prune_build(Some(options)).await {
            Ok(response) => response.caches_deleted.unwrap_or_default(),
            Err(e) => return removal_from_error(e),
        };
        let others: Vec<&String> = pruned.iter().filter(|p| *p != id).collect();
        if !others.is_empty() {
            tracing::warn!(id, ?others, "build cache prune removed more than asked");
        }
        if pruned.iter().any(|p| p == id) {
            return Removal::Removed;
        }
        match self.build_cache_records().await {
            Ok(now) if now.iter().any(|r| r.id == id) => Removal::InUse(format!(
                "build cache record {id} was not pruned: in use or shared"
            )),
            Ok(_) => Removal::Gone,
            Err(e) => Removal::Failed(e),
        }
    }
}

/// Whether `/system/df` in API `version` ignores `type=build-cache` and
/// sizes every image, container and volume: before 1.42.
fn df_sizes_everything(version: &str) -> bool {
    let mut parts = version.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) < (1, 42),
        _ => false,
    }
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
        // After the lists: what they show is on the disk measured.
        let image_fs = if self.measure_image_fs {
            self.with_unique_sizes(&mut images).await;
            self.image_fs().await?
        } else {
            None
        };
        let sandboxes = sandboxes_from_containers(&containers);
        *self.watch.lock().await = Watch::new(containers.clone(), taken, true)
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
            api_version: Some(self.docker.client_version().to_string()),
        })
    }

    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        let mut fresh = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        // What the rules depend on comes from the watch, brought up to date
        // now. Images and networks are read by id first, so that a
        // container made from them meanwhile is seen.
        match kind {
            Kind::Container => self.recheck_containers(ids, &mut fresh).await?,
            Kind::Image => {
                // An image no event has named since the snapshot is as the
                // snapshot read it; any other is inspected now.
                let watch = self.synced_watch().await?;
                fresh.images =
                    known_or_read(ids, |id| watch.unchanged_image(id), |id| self.image(id)).await?;
                if let Ok(mut refs) = self.rechecked_refs.lock() {
                    for image in &fresh.images {
                        let all = image.tags.iter().chain(&image.digests).cloned().collect();
                        refs.insert(image.id.clone(), all);
                    }
                }
                // An image built on one of the batch holds it (the one
                // definition of use, `inventory::uses`).
                if watch.has_chains() {
                    let parents: HashSet<&str> = ids.iter().copied().collect();
                    let children = match watch.children_of(&parents) {
                        Some(children) => children,
                        None => self.children_listed(&parents).await?,
                    };
                    fresh.images.extend(
                        children
                            .into_iter()
                            .filter(|c| !ids.contains(&c.id.as_str())),
                    );
                }
                let keys: HashSet<&str> = fresh
                    .images
                    .iter()
                    .flat_map(crate::inventory::uses::image_keys)
                    .collect();
                fresh.containers = watch.users_of_images(&keys);
            }
            Kind::Volume => self.recheck_volumes(ids, &mut fresh).await?,
            Kind::Network => {
                // A node has a handful of networks: one list for the batch.
                let by_id = HashMap::from([("id", ids.to_vec())]);
                fresh.networks = self
                    .networks(&by_id)
                    .await?
                    .into_iter()
                    .filter(|n| ids.contains(&n.id.as_str()))
                    .collect();
                let keys: HashSet<&str> = fresh
                    .networks
                    .iter()
                    .flat_map(|n| [n.id.as_str(), n.name.as_str()])
                    .collect();
                fresh.containers = self.synced_watch().await?.users_of_networks(&keys);
            }
            Kind::BuildCache => {
                // Unlike the inventory, a failed read must not look like
                // "gone".
                fresh.build_cache = self
                    .build_cache_records()
                    .await
                    .map_err(|e| RuntimeError::Call {
                        runtime: RUNTIME,
                        call: "read build cache",
                        source: e.into(),
                    })?
                    .into_iter()
                    .filter(|b| ids.contains(&b.id.as_str()))
                    .collect();
            }
        }
        Ok(fresh)
    }

    /// Containers created, started and exited, from dockerd's event
    /// history (it holds its last 256 events or so): each with the image it
    /// was made from, as the creator named it.
    async fn image_uses(
        &self,
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

    async fn remove(&self, kind: Kind, id: &str) -> Removal {
        let result = match kind {
            Kind::Container => {
                let options = RemoveContainerOptionsBuilder::default()
                    .force(false)
                    .v(false)
                    .build();
                self.docker.remove_container(id, Some(options)).await
            }
            Kind::Image => return self.remove_image(id).await,
            Kind::Volume => {
                let options = RemoveVolumeOptionsBuilder::default().force(false).build();
                self.docker.remove_volume(id, Some(options)).await
            }
            Kind::Network => match self.docker.remove_network(id).await {
                // A network with endpoints (and a predefined one) is refused
                // with 403, not 409 (measured): in use, not a failure.
                Err(BollardError::DockerResponseServerError {
                    status_code: 403,
                    message,
                }) => return Removal::InUse(message),
                other => other,
            },
            Kind::BuildCache => return self.remove_build_cache(id).await,
        };
        match result {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_error(e),
        }
    }
}

/// Each of `ids` that still exists: as `known` has it, else as `read`
/// finds it now (all of those at once).
async fn known_or_read<'a, 'id, T: Clone + 'a, F, Fut>(
    ids: &[&'id str],
    known: impl Fn(&str) -> Option<&'a T>,
    read: F,
) -> Result<Vec<T>, RuntimeError>
where
    F: Fn(&'id str) -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, RuntimeError>>,
{
    let mut found = Vec::with_capacity(ids.len());
    let mut unknown = Vec::new();
    for id in ids {
        match known(id) {
            Some(object) => found.push(object.clone()),
            None => unknown.push(*id),
        }
    }
    let read = try_join_all(unknown.into_iter().map(read)).await?;
    found.extend(read.into_iter().flatten());
    Ok(found)
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

/// 404 is gone, 409 is in use or changed, anything else failed.
fn removal_from_error(e: BollardError) -> Removal {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => Removal::Gone,
        BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        } => Removal::InUse(message),
        // With every cause: "docker read events failed" alone says nothing.
        other => super::failed(&other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_404_and_409_are_not_failures() {
        let server = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        };
        assert_eq!(removal_from_error(server(404, "no such")), Removal::Gone);
        assert_eq!(
            removal_from_error(server(409, "in use")),
            Removal::InUse("in use".to_owned())
        );
        assert!(matches!(
            removal_from_error(server(500, "boom")),
            Removal::Failed(_)
        ));
    }
}
