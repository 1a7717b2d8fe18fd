//! The Docker Engine adapter: bollard's answers in, an [`Inventory`] out, and
//! one removal at a time, never with force.
//!
//! Every Docker quirk safeprune has to know lives here, next to the code that
//! handles it, with where it was seen. "Measured" means: against Docker Engine
//! 20.10.24 (API 1.41) from Debian 12, see `tests/docker_adapter.rs`.
//!
//! Timestamps arrive as strings (bollard is built without its `chrono` or
//! `time` feature) and are parsed here, so one odd value costs one field, not
//! the whole listing.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerSummary, ContainerSummaryStateEnum, ImageInspect, Network as DockerNetwork,
    Volume as DockerVolume,
};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptionsBuilder,
    PruneBuildOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker};
use chrono::{DateTime, Datelike, Utc};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Engine, Kind, Removal, RuntimeError};
use crate::inventory::{
    BuildCacheEntry, Container, ContainerState, Image, Inventory, Labels, Network, PodIdentity,
    PodSandbox, Volume,
};

const RUNTIME: &str = "docker";
const UNREACHABLE_HINT: &str = "is dockerd running, and is the socket path right?";
/// Per-request timeout, in seconds. `/system/df` on a node with large
/// volumes is the slowest call we make.
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How many inspects run at once: enough to hide latency, few enough not to
/// load a busy dockerd.
const INSPECT_CONCURRENCY: usize = 8;

/// cri-dockerd's labels (`core/docker_service.go`, `core/sandbox_helpers.go`).
const LABEL_DOCKER_TYPE: &str = "io.kubernetes.docker.type";
const LABEL_SANDBOX_ID: &str = "io.kubernetes.sandbox.id";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const TYPE_SANDBOX: &str = "podsandbox";
const TYPE_CONTAINER: &str = "container";
/// API 1.42+ labels anonymous volumes; 1.41 does not (moby#44216).
const LABEL_ANONYMOUS_VOLUME: &str = "com.docker.volume.anonymous";

/// A connection to one Docker Engine, over its unix socket.
pub struct DockerRuntime {
    docker: Docker,
    /// The socket path, for the one call bollard cannot make (`/system/df`
    /// on API < 1.52, see [`DockerRuntime::build_cache`]).
    socket: PathBuf,
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
        let Some(socket) = socket_path(endpoint) else {
            return Err(RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: "only unix sockets are supported: unix:///path or /path",
                source: "unsupported endpoint scheme".into(),
            });
        };
        let docker = Docker::connect_with_socket(
            &socket.to_string_lossy(),
            REQUEST_TIMEOUT_SECS,
            API_DEFAULT_VERSION,
        )
        .map_err(|e| unreachable(e.into()))?
        // Talk the engine's own version: bollard's default (1.5x) is newer
        // than what Debian's 20.10 speaks (1.41).
        .negotiate_version()
        .await
        .map_err(|e| unreachable(e.into()))?;
        docker.ping().await.map_err(|e| unreachable(e.into()))?;
        let version = docker.client_version();
        tracing::debug!(endpoint, api_version = %version, "connected to docker");
        Ok(Self { docker, socket })
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
                match self.docker.inspect_container(&container.id, None).await {
                    Ok(inspect) => {
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

    /// Every pod sandbox, from its container's labels and state.
    async fn sandboxes(&self) -> Result<Vec<PodSandbox>, RuntimeError> {
        let label = format!("{LABEL_DOCKER_TYPE}={TYPE_SANDBOX}");
        let filters = HashMap::from([("label", vec![label.as_str()])]);
        let containers = self.containers(&filters, false).await?;
        Ok(sandboxes_of(&containers))
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
            .map(|summary| async move { self.image(&summary.id).await })
            .buffer_unordered(INSPECT_CONCURRENCY)
            .try_filter_map(|i| async move { Ok(i) })
            .try_collect::<Vec<_>>()
            .await
            .map(|mut images| {
                images.sort_by(|a, b| a.id.cmp(&b.id));
                images
            })
    }

    /// One image by id; `None` when it does not exist.
    async fn image(&self, id: &str) -> Result<Option<Image>, RuntimeError> {
        match self.docker.inspect_image(id).await {
            Ok(inspect) => Ok(image_from_inspect(inspect)),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect image")(e)),
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
        match self.build_cache_records().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list docker build cache; leaving it alone");
                Vec::new()
            }
        }
    }

    /// Reads `/system/df` itself, because bollard cannot: its
    /// `SystemDataUsageResponse` models only API 1.52's shape
    /// (`BuildCacheUsage.Items`), so on older engines every field of
    /// `Docker::df()` is `None` (measured on 1.41, which answers with a
    /// top-level `BuildCache` array). bollard has no raw-request API, so
    /// this is one plain HTTP/1.0 GET on the same socket; HTTP/1.0 keeps the
    /// answer unchunked and the connection closes after it.
    ///
    /// `type=build-cache` spares 1.42+ engines from sizing images and
    /// volumes; 1.41 ignores it and computes everything (measured).
    async fn build_cache_records(&self) -> Result<Vec<BuildCacheEntry>, String> {
        let version = self.docker.client_version();
        let path = format!("/v{version}/system/df?type=build-cache&verbose=1");
        let request = async {
            let mut stream = tokio::net::UnixStream::connect(&self.socket).await?;
            let head = format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        let raw = tokio::time::timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS), request)
            .await
            .map_err(|_| format!("GET {path} timed out"))?
            .map_err(|e| format!("GET {path}: {e}"))?;
        let body = http_body(&raw).map_err(|e| format!("GET {path}: {e}"))?;
        let records = build_cache_from_df(body).map_err(|e| format!("GET {path}: {e}"))?;
        if records.is_empty() {
            tracing::debug!("docker reports no build cache records");
        }
        Ok(records)
    }

    /// Removes an image without force.
    ///
    /// Docker refuses to delete by id an image referenced from several
    /// repositories (409 "must be forced"), so an image with more than one
    /// reference loses them one by one and the last untag deletes it. An
    /// untag succeeds even while a container uses the image; only the last
    /// one is refused (409, measured), which would leave the image stripped
    /// of all but one name. So first make sure no container uses it.
    async fn remove_image(&self, id: &str) -> Removal {
        let inspect = match self.docker.inspect_image(id).await {
            Ok(inspect) => inspect,
            Err(e) => return removal_from_error(e),
        };
        // Containers name their image by its full id.
        let id = inspect.id.clone().unwrap_or_else(|| id.to_owned());
        let id = id.as_str();
        match self.list_containers(&HashMap::new()).await {
            Ok(all) => {
                if let Some(user) = all.iter().find(|c| c.image_id.as_deref() == Some(id)) {
                    return Removal::Conflict(format!(
                        "image is used by container {}",
                        user.id.as_deref().unwrap_or("?")
                    ));
                }
            }
            Err(e) => return Removal::Failed(e.to_string()),
        }
        let mut refs = real_refs(inspect.repo_tags.unwrap_or_default());
        refs.extend(real_refs(inspect.repo_digests.unwrap_or_default()));
        let options = || {
            RemoveImageOptionsBuilder::default()
                .force(false)
                .noprune(false)
                .build()
        };
        if refs.len() > 1 {
            for reference in &refs {
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
            // there (a child image holds it), delete it by id below.
            match self.docker.inspect_image(id).await {
                Err(e) if status_code(&e) == Some(404) => return Removal::Removed,
                Err(e) => return removal_from_error(e),
                Ok(_) => {}
            }
        }
        match self.docker.remove_image(id, Some(options()), None).await {
            Ok(_) => Removal::Removed,
            // We untagged it and someone else deleted it meanwhile: removed.
            Err(e) if status_code(&e) == Some(404) && refs.len() > 1 => Removal::Removed,
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
        if !records.iter().any(|r| r.id == id) {
            return Removal::Gone;
        }
        if let Some(other) = records.iter().find(|r| r.id != id && r.id.contains(id)) {
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
            Ok(now) if now.iter().any(|r| r.id == id) => Removal::Conflict(format!(
                "build cache record {id} was not pruned: in use or shared"
            )),
            Ok(_) => Removal::Gone,
            Err(e) => Removal::Failed(e),
        }
    }
}

impl Engine for DockerRuntime {
    fn name(&self) -> &'static str {
        RUNTIME
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        let no_filter = HashMap::new();
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
        let (containers, images, volumes, networks) = listed?;
        let sandboxes = sandboxes_of(&containers);
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
        })
    }

    async fn recheck(&self, kind: Kind, id: &str) -> Result<Inventory, RuntimeError> {
        let mut fresh = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        // Docker's `id` and `name` list filters match substrings; keep the
        // exact match only.
        let by_id = HashMap::from([("id", vec![id])]);
        match kind {
            Kind::Container => {
                let (container, sandboxes) =
                    tokio::try_join!(self.containers(&by_id, true), self.sandboxes())?;
                fresh.containers = container.into_iter().filter(|c| c.id == id).collect();
                fresh.sandboxes = sandboxes;
                return Ok(fresh);
            }
            Kind::Image => fresh.images = self.image(id).await?.into_iter().collect(),
            Kind::Volume => match self.docker.inspect_volume(id).await {
                Ok(volume) => fresh.volumes = vec![volume_from_docker(volume)],
                Err(e) if status_code(&e) == Some(404) => {}
                Err(e) => return Err(Self::call_error("inspect volume")(e)),
            },
            Kind::Network => {
                fresh.networks = self
                    .networks(&by_id)
                    .await?
                    .into_iter()
                    .filter(|n| n.id == id)
                    .collect();
            }
            Kind::BuildCache => {
                fresh.build_cache = self
                    .build_cache()
                    .await
                    .into_iter()
                    .filter(|b| b.id == id)
                    .collect();
            }
        }
        // What uses an image, volume or network is any container left.
        fresh.containers = self.containers(&HashMap::new(), false).await?;
        Ok(fresh)
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
                }) => return Removal::Conflict(message),
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

/// The socket path of a `unix://` endpoint or a bare path; `None` for any
/// other scheme.
fn socket_path(endpoint: &str) -> Option<PathBuf> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return Some(PathBuf::from(path));
    }
    (!endpoint.contains("://") && !endpoint.is_empty()).then(|| PathBuf::from(endpoint))
}

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
        } => Removal::Conflict(message),
        other => Removal::Failed(other.to_string()),
    }
}

/// Parses a Docker timestamp (RFC 3339). Docker's zero time
/// `0001-01-01T00:00:00Z` ("never"), an empty string and junk are `None`.
fn parse_docker_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| t.year() > 1)
}

fn from_unix_seconds(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

/// A size in bytes; Docker says -1 for "not computed".
fn byte_size(n: i64) -> Option<u64> {
    u64::try_from(n).ok()
}

fn labels_of(map: Option<HashMap<String, String>>) -> Labels {
    map.unwrap_or_default().into_iter().collect()
}

/// A label's value, with an empty value read as absent.
fn label<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    labels
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Which pod a container belongs to, from cri-dockerd's labels; `None` for a
/// container kubelet did not make.
fn pod_identity(labels: &Labels) -> Option<PodIdentity> {
    let kind = label(labels, LABEL_DOCKER_TYPE);
    let pod_uid = label(labels, LABEL_POD_UID);
    if !matches!(kind, Some(TYPE_SANDBOX | TYPE_CONTAINER)) && pod_uid.is_none() {
        return None;
    }
    let is_sandbox = kind == Some(TYPE_SANDBOX);
    let owned = |key| label(labels, key).map(str::to_owned);
    Some(PodIdentity {
        sandbox_id: if is_sandbox {
            None
        } else {
            owned(LABEL_SANDBOX_ID)
        },
        pod_uid: pod_uid.map(str::to_owned),
        pod_name: owned(LABEL_POD_NAME),
        pod_namespace: owned(LABEL_POD_NAMESPACE),
        is_sandbox,
    })
}

/// Whether a volume is anonymous: named by Docker with 64 lowercase hex
/// characters, or (API 1.42+) labelled so.
fn is_anonymous_volume(name: &str, labels: &Labels) -> bool {
    labels.contains_key(LABEL_ANONYMOUS_VOLUME)
        || (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Container names without the leading `/`. Legacy links add names like
/// `/web/db` (the alias `db` inside `web`) to the list; those name another
/// container's view, not this one, and are dropped.
fn container_names(names: Option<Vec<String>>) -> Vec<String> {
    names
        .unwrap_or_default()
        .into_iter()
        .map(|n| n.strip_prefix('/').map(str::to_owned).unwrap_or(n))
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .collect()
}

/// Image references without API 1.41's placeholders for "none"
/// (`<none>:<none>`, `<none>@<none>`).
fn real_refs(refs: Vec<String>) -> Vec<String> {
    refs.into_iter()
        .filter(|r| !r.is_empty() && !r.starts_with("<none>"))
        .collect()
}

fn container_state(state: Option<&ContainerSummaryStateEnum>) -> ContainerState {
    match state {
        Some(state) => ContainerState::from_docker(state.as_ref()),
        None => ContainerState::Unknown,
    }
}

/// A container from its list entry, exit time not yet known. `None` when
/// the entry has no id.
fn container_from_summary(summary: ContainerSummary) -> Option<Container> {
    let id = summary.id.filter(|id| !id.is_empty())?;
    let labels = labels_of(summary.labels);
    let volumes: BTreeSet<String> = summary
        .mounts
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.typ.as_deref() == Some("volume"))
        .filter_map(|m| m.name.filter(|n| !n.is_empty()))
        .collect();
    // Both names and ids: a policy or a report may speak of either. With
    // the default bridge disabled, Docker still lists `bridge` with an empty
    // NetworkID (measured).
    let mut networks = BTreeSet::new();
    for (name, endpoint) in summary
        .network_settings
        .and_then(|s| s.networks)
        .unwrap_or_default()
    {
        if let Some(network_id) = endpoint.network_id.filter(|i| !i.is_empty()) {
            networks.insert(network_id);
        }
        networks.insert(name);
    }
    Some(Container {
        names: container_names(summary.names),
        state: container_state(summary.state.as_ref()),
        pod: pod_identity(&labels),
        labels,
        image_id: summary.image_id.unwrap_or_default(),
        image_ref: summary.image.unwrap_or_default(),
        // Docker always sends `Created`; were it missing, "just now" keeps
        // the container for a while instead of making it look ancient.
        created: summary
            .created
            .and_then(from_unix_seconds)
            .unwrap_or_else(Utc::now),
        finished: None,
        volumes: volumes.into_iter().collect(),
        networks: networks.into_iter().collect(),
        id,
    })
}

fn sorted_by_id(mut containers: Vec<Container>) -> Vec<Container> {
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    containers
}

/// One sandbox per pod sandbox container.
///
/// cri-dockerd reports a sandbox READY when `State.Running` is true, and
/// Docker keeps `Running` true while a container is paused or restarting.
/// So every live state counts as READY here: calling a sandbox ready keeps
/// its pod's containers, the safe side.
fn sandboxes_of(containers: &[Container]) -> Vec<PodSandbox> {
    containers
        .iter()
        .filter_map(|c| {
            let pod = c.pod.as_ref().filter(|p| p.is_sandbox)?;
            Some(PodSandbox {
                id: c.id.clone(),
                pod_uid: pod.pod_uid.clone(),
                pod_name: pod.pod_name.clone(),
                pod_namespace: pod.pod_namespace.clone(),
                ready: c.state.is_live(),
            })
        })
        .collect()
}

fn image_from_inspect(inspect: ImageInspect) -> Option<Image> {
    let id = inspect.id.filter(|id| !id.is_empty())?;
    // Sorted: the first tag is the image's display name, and the same image
    // should read the same on every run.
    let sorted = |mut refs: Vec<String>| {
        refs.sort();
        refs
    };
    Some(Image {
        id,
        tags: sorted(real_refs(inspect.repo_tags.unwrap_or_default())),
        digests: sorted(real_refs(inspect.repo_digests.unwrap_or_default())),
        created: inspect.created.as_deref().and_then(parse_docker_time),
        // Zero for an image never tagged (a build's intermediate image).
        last_tagged: inspect
            .metadata
            .and_then(|m| m.last_tag_time)
            .as_deref()
            .and_then(parse_docker_time),
        size: inspect.size.and_then(byte_size),
        // Docker pins nothing; the policy's `images.keep` covers the pause
        // image.
        pinned: false,
    })
}

fn volume_from_docker(volume: DockerVolume) -> Volume {
    let labels: Labels = volume.labels.into_iter().collect();
    Volume {
        anonymous: is_anonymous_volume(&volume.name, &labels),
        created: volume.created_at.as_deref().and_then(parse_docker_time),
        // Only `/system/df` fills UsageData; the list leaves it out.
        size: volume.usage_data.and_then(|u| byte_size(u.size)),
        labels,
        name: volume.name,
    }
}

fn network_from_docker(network: DockerNetwork) -> Option<Network> {
    let id = network.id.filter(|id| !id.is_empty())?;
    Some(Network {
        name: network.name.unwrap_or_default(),
        created: network.created.as_deref().and_then(parse_docker_time),
        labels: labels_of(network.labels),
        id,
    })
}

/// The body of a raw HTTP/1.x response, if its status is 2xx.
fn http_body(raw: &[u8]) -> Result<&[u8], String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers in the response")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let body = &raw[split + 4..];
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(body).trim()
        ))
    }
}

/// One build cache record as `/system/df` gives it: the same fields in the
/// 1.41 array and in 1.52's `BuildCacheUsage.Items`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BuildCacheRecord {
    #[serde(rename = "ID")]
    id: Option<String>,
    description: Option<String>,
    in_use: Option<bool>,
    size: Option<i64>,
    created_at: Option<String>,
    last_used_at: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DiskUsage {
    /// API < 1.52.
    build_cache: Option<Vec<BuildCacheRecord>>,
    /// API 1.52+.
    build_cache_usage: Option<BuildCacheUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BuildCacheUsage {
    items: Option<Vec<BuildCacheRecord>>,
}

/// Build cache entries from a `/system/df` body of either API shape.
fn build_cache_from_df(body: &[u8]) -> Result<Vec<BuildCacheEntry>, serde_json::Error> {
    let usage: DiskUsage = serde_json::from_slice(body)?;
    let records = usage
        .build_cache
        .or_else(|| usage.build_cache_usage.and_then(|u| u.items))
        .unwrap_or_default();
    let mut entries: Vec<BuildCacheEntry> = records
        .into_iter()
        .filter_map(|r| {
            Some(BuildCacheEntry {
                id: r.id.filter(|id| !id.is_empty())?,
                description: r.description.unwrap_or_default(),
                created: r.created_at.as_deref().and_then(parse_docker_time),
                last_used: r.last_used_at.as_deref().and_then(parse_docker_time),
                size: r.size.and_then(byte_size),
                in_use: r.in_use.unwrap_or(false),
            })
        })
        .collect();
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn zero_empty_and_junk_times_are_none() {
        assert_eq!(parse_docker_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_docker_time(""), None);
        assert_eq!(parse_docker_time("yesterday"), None);
        let t = parse_docker_time("2026-11-22T16:23:05.838801127Z").unwrap();
        assert_eq!(t.timestamp(), 1_795_364_585);
        let offset = parse_docker_time("2026-11-22T17:23:05+01:00").unwrap();
        assert_eq!(offset.timestamp(), 1_795_364_585);
    }

    #[test]
    fn negative_sizes_mean_unknown() {
        assert_eq!(byte_size(-1), None);
        assert_eq!(byte_size(0), Some(0));
        assert_eq!(byte_size(1_982_270), Some(1_982_270));
    }

    #[test]
    fn anonymous_volumes_by_name_or_label() {
        let hex = "a3370ccf827bc78b9677d5ae60d92d1a5002f6d6d61ee13807aca435019b14e3";
        assert!(is_anonymous_volume(hex, &Labels::new()));
        assert!(!is_anonymous_volume(&hex.to_uppercase(), &Labels::new()));
        assert!(!is_anonymous_volume(&hex[1..], &Labels::new()));
        assert!(!is_anonymous_volume("pgdata", &Labels::new()));
        assert!(is_anonymous_volume(
            "pgdata",
            &labels(&[(LABEL_ANONYMOUS_VOLUME, "")])
        ));
    }

    #[test]
    fn sandbox_labels_make_a_sandbox_identity() {
        let pod = pod_identity(&labels(&[
            (LABEL_DOCKER_TYPE, "podsandbox"),
            (LABEL_POD_UID, "uid-1"),
            (LABEL_POD_NAME, "web"),
            (LABEL_POD_NAMESPACE, "default"),
            (LABEL_SANDBOX_ID, "ignored-for-a-sandbox"),
        ]))
        .unwrap();
        assert!(pod.is_sandbox);
        assert_eq!(pod.sandbox_id, None);
        assert_eq!(pod.pod_uid.as_deref(), Some("uid-1"));
        assert_eq!(pod.pod_name.as_deref(), Some("web"));
        assert_eq!(pod.pod_namespace.as_deref(), Some("default"));
    }

    #[test]
    fn container_labels_name_their_sandbox() {
        let pod = pod_identity(&labels(&[
            (LABEL_DOCKER_TYPE, "container"),
            (LABEL_SANDBOX_ID, "abc"),
            (LABEL_POD_UID, "uid-1"),
        ]))
        .unwrap();
        assert!(!pod.is_sandbox);
        assert_eq!(pod.sandbox_id.as_deref(), Some("abc"));
        assert_eq!(pod.pod_name, None);
    }

    #[test]
    fn empty_or_missing_kube_labels_are_no_pod() {
        assert_eq!(pod_identity(&Labels::new()), None);
        assert_eq!(pod_identity(&labels(&[(LABEL_DOCKER_TYPE, "")])), None);
        assert_eq!(pod_identity(&labels(&[(LABEL_DOCKER_TYPE, "other")])), None);
        // A pod uid alone is enough to belong to a pod; empty values are absent.
        let pod =
            pod_identity(&labels(&[(LABEL_POD_UID, "uid-1"), (LABEL_SANDBOX_ID, "")])).unwrap();
        assert_eq!(pod.sandbox_id, None);
        assert!(!pod.is_sandbox);
    }

    #[test]
    fn names_lose_slash_and_link_aliases() {
        let names = container_names(Some(vec![
            "/web".to_owned(),
            "/web/db".to_owned(),
            "/".to_owned(),
            "plain".to_owned(),
        ]));
        assert_eq!(names, ["web", "plain"]);
        assert!(container_names(None).is_empty());
    }

    #[test]
    fn none_placeholders_are_not_references() {
        let refs = real_refs(vec![
            "<none>:<none>".to_owned(),
            "<none>@<none>".to_owned(),
            String::new(),
            "busybox:1.36".to_owned(),
        ]);
        assert_eq!(refs, ["busybox:1.36"]);
    }

    #[test]
    fn endpoints_are_unix_sockets_only() {
        assert_eq!(
            socket_path("unix:///var/run/docker.sock"),
            Some(PathBuf::from("/var/run/docker.sock"))
        );
        assert_eq!(
            socket_path("/run/docker.sock"),
            Some(PathBuf::from("/run/docker.sock"))
        );
        assert_eq!(socket_path("tcp://10.0.0.1:2375"), None);
        assert_eq!(socket_path(""), None);
    }

    #[test]
    fn a_summary_with_odd_data_still_converts() {
        let summary = ContainerSummary {
            id: Some("c1".to_owned()),
            ..ContainerSummary::default()
        };
        let c = container_from_summary(summary).unwrap();
        assert!(c.names.is_empty());
        assert_eq!(c.state, ContainerState::Unknown);
        assert_eq!(c.pod, None);
        assert_eq!(c.display_name(), "c1");
        assert!(container_from_summary(ContainerSummary::default()).is_none());
    }

    #[test]
    fn paused_sandboxes_are_ready() {
        let summary = |id: &str, state| ContainerSummary {
            id: Some(id.to_owned()),
            state: Some(state),
            labels: Some(HashMap::from([(
                LABEL_DOCKER_TYPE.to_owned(),
                TYPE_SANDBOX.to_owned(),
            )])),
            ..ContainerSummary::default()
        };
        let containers: Vec<Container> = [
            summary("running", ContainerSummaryStateEnum::RUNNING),
            summary("paused", ContainerSummaryStateEnum::PAUSED),
            summary("exited", ContainerSummaryStateEnum::EXITED),
        ]
        .into_iter()
        .filter_map(container_from_summary)
        .collect();
        let ready: Vec<(String, bool)> = sandboxes_of(&containers)
            .into_iter()
            .map(|s| (s.id, s.ready))
            .collect();
        assert_eq!(
            ready,
            [
                ("running".to_owned(), true),
                ("paused".to_owned(), true),
                ("exited".to_owned(), false)
            ]
        );
    }

    #[test]
    fn http_body_needs_a_2xx_status() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}";
        assert_eq!(http_body(ok).unwrap(), b"{\"a\":1}");
        let err = b"HTTP/1.0 400 Bad Request\r\n\r\n{\"message\":\"bad\"}";
        assert!(http_body(err).unwrap_err().contains("400"));
        assert!(http_body(b"garbage").is_err());
    }

    #[test]
    fn build_cache_from_both_df_shapes() {
        // API 1.41, as measured: a top-level array.
        let legacy = br#"{"LayersSize":3,"Images":[],"BuildCache":[
            {"ID":"xfzro1bqaozbipmoy0gch83dw","Parent":"","Type":"regular",
             "Description":"fileop target","InUse":false,"Shared":true,"Size":3,
             "CreatedAt":"2026-11-22T16:35:16.226165852Z",
             "LastUsedAt":"2026-11-22T16:35:16.245494149Z","UsageCount":1},
            {"ID":"","Size":1}],"BuilderSize":29}"#;
        let entries = build_cache_from_df(legacy).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].id, "xfzro1bqaozbipmoy0gch83dw");
        assert_eq!(entries[0].size, Some(3));
        assert!(entries[0].last_used.is_some());
        // API 1.52: under BuildCacheUsage.Items; LastUsedAt may be null.
        let new = br#"{"BuildCacheUsage":{"TotalSize":5,"Items":[
            {"ID":"b2","Type":"source.local","InUse":true,"LastUsedAt":null}]}}"#;
        let entries = build_cache_from_df(new).unwrap();
        assert_eq!(entries[0].id, "b2");
        assert!(entries[0].in_use);
        assert_eq!(entries[0].last_used, None);
        // Nothing at all: no records.
        assert!(build_cache_from_df(b"{}").unwrap().is_empty());
        assert!(
            build_cache_from_df(br#"{"BuildCache":null}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn only_404_and_409_are_not_failures() {
        let server = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        };
        assert_eq!(removal_from_error(server(404, "no such")), Removal::Gone);
        assert_eq!(
            removal_from_error(server(409, "in use")),
            Removal::Conflict("in use".to_owned())
        );
        assert!(matches!(
            removal_from_error(server(500, "boom")),
            Removal::Failed(_)
        ));
    }
}
