//! The node's containers, their tasks and image names, kept current from
//! containerd's event stream, so that a re-check costs the same on a node
//! of ten containers as on one of ten thousand, and reads nothing again
//! that no event has named.
//!
//! containerd keeps no history of events: a subscriber sees what is
//! published while it listens. So the watch subscribes before the
//! inventory lists anything, and every event after that names a container,
//! a container's task or an image name that the watch reads again by
//! itself (`Get`, whose cost does not grow with the node). To know it has seen every event published
//! before a re-check, it publishes a barrier event of its own
//! (`/safeprune/barrier`, in the first pruned namespace, carrying a token)
//! and reads until that token comes back: containerd's exchange hands
//! events to a subscriber in the order they were published.
//!
//! Any fault (the stream ends, the barrier does not come back in time)
//! ends the watch; the adapter then lists everything, as it did without
//! one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use containerd_client::services::v1::events_client::EventsClient;
use containerd_client::services::v1::{
    Container as NativeContainer, Image as ImageRecord, PublishRequest, SubscribeRequest,
};
use containerd_client::tonic::codec::Streaming;
use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Request, Status};
use containerd_client::types::Envelope;
use containerd_client::types::v1::Process;
use prost::Message;
use prost_types::Any;

use k8s_cri::v1::{
    Container as CriContainer, ContainerState as CriState, ContainerStatus, PodSandbox as CriPod,
    PodSandboxState,
};

use super::convert::{
    CriView, NamespaceData, image_mounts, plain_container, qualified, slim_record,
    tasks_by_container,
};
use super::images;
use super::native;
use crate::inventory::{Container, Image, uses};

/// The topic of the watch's own barrier events.
pub(super) const BARRIER_TOPIC: &str = "/safeprune/barrier";
/// The type of a barrier event's payload: the token, as bytes.
const BARRIER_TYPE: &str = "safeprune.dev/barrier";
/// How long a barrier may take to come back before the watch gives up.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(5);
/// While subscribing: how long to wait for the first barrier before
/// publishing another (one published before the subscription was
/// registered is never delivered).
const SUBSCRIBE_RETRY: Duration = Duration::from_millis(20);

/// `{"id": …}` of `ContainerCreate`, `ContainerUpdate` and
/// `ContainerDelete`, `{"name": …}` of `ImageCreate`, `ImageUpdate` and
/// `ImageDelete`, and `{"container_id": …}` of every task event (create,
/// start, exit, delete, OOM, exec, pause, resume, checkpoint): field 1 of
/// each (containerd `api/events`).
#[derive(Clone, PartialEq, Message)]
struct Named {
    #[prost(string, tag = "1")]
    name: String,
}

/// A subscription to the events of the pruned namespaces, with what has
/// been read from it.
pub(super) struct Watch {
    events: Streaming<Envelope>,
    /// Where barriers are published.
    barrier_namespace: String,
    /// This watch's barrier tokens start with this; the counter follows.
    token_prefix: String,
    next_token: u64,
    /// When the last sync that completed published its barrier: every
    /// event published before then has been read.
    synced_at: Option<Instant>,
    known: Known,
}

/// The containers and image names of the pruned namespaces: what a
/// listing found, kept current by a [`Watch`]. Who uses an image is decided
/// here, for re-checks and removals alike.
#[derive(Default)]
pub(super) struct Known {
    namespaces: HashMap<String, Namespace>,
    /// What CRI said at the inventory that cannot change.
    settled: Settled,
}

/// What CRI said at the inventory that no later event can change, by
/// local id: its exited containers (CRI never starts a container again:
/// kubelet makes a new one) with their status, and its sandboxes that are
/// not ready (never ready again: a pod that comes back gets a new
/// sandbox). A re-check takes these as they are; the watch says whether
/// the container is still there.
#[derive(Default)]
struct Settled {
    containers: HashMap<String, (CriContainer, Option<ContainerStatus>)>,
    sandboxes: HashMap<String, CriPod>,
}

/// One namespace as the watch knows it.
#[derive(Default)]
struct Namespace {
    /// By local id.
    containers: HashMap<String, Watched>,
    /// Each container's task, by container id.
    tasks: HashMap<String, Process>,
    /// By name.
    images: HashMap<String, ImageRecord>,
}

struct Watched {
    /// Its record (see [`slim_record`]): what a re-check converts.
    record: NativeContainer,
    /// The record converted without task or CRI state: what decides an
    /// image's users and a pod's sandboxes needs no more.
    container: Container,
}

/// What a sync found changed: container ids and image names, by namespace,
/// `true` when the last event about one was its deletion (nothing to read
/// again); and the containers whose task an event named.
#[derive(Default)]
struct Dirty {
    containers: BTreeMap<(String, String), bool>,
    images: BTreeMap<(String, String), bool>,
    tasks: BTreeSet<(String, String)>,
}

impl Watch {
    /// Subscribes to the events of `namespaces` and waits until the
    /// subscription is live (its first barrier came back). Call before
    /// listing, then [`Watch::fill`] with what the listing found. The
    /// stream goes over `stream_channel`, which has no deadline; the
    /// barriers over `channel`.
    pub(super) async fn subscribe(
        stream_channel: &Channel,
        channel: &Channel,
        namespaces: &[String],
    ) -> Result<Self, Status> {
        let barrier_namespace = namespaces
            .first()
            .cloned()
            .ok_or_else(|| Status::invalid_argument("no namespace to watch"))?;
        let filters = namespaces
            .iter()
            .map(|n| format!("namespace=={n}"))
            .collect();
        let token_prefix = format!("{}-{}", std::process::id(), unique_nanos());
        let events = subscribe_live(
            stream_channel,
            channel,
            filters,
            &barrier_namespace,
            &token_prefix,
        )
        .await?;
        Ok(Self {
            events,
            barrier_namespace,
            token_prefix,
            next_token: 0,
            synced_at: None,
            known: Known::default(),
        })
    }

    /// Takes in what the inventory listed, after subscribing, and what CRI
    /// said then.
    pub(super) fn fill(&mut self, data: &[NamespaceData], cri: Option<&CriView>) {
        self.known = Known::listed(data);
        if let Some(cri) = cri {
            self.known.settled = Settled::of(cri);
        }
    }

    /// What the watch knows, as of its last sync.
    pub(super) fn known(&self) -> &Known {
        &self.known
    }

    /// Whether the last completed sync published its barrier at or after
    /// `since`: then the watch holds every event containerd published
    /// before that barrier, which it served after `since`.
    pub(super) fn synced_since(&self, since: Instant) -> bool {
        self.synced_at.is_some_and(|at| at >= since)
    }

    /// Brings the watch up to date: publishes a barrier, reads every event
    /// up to it, and reads again by id or name what those events named.
    ///
    /// # Errors
    /// When the stream ends or fails, the barrier does not come back in
    /// time, or a read fails: the watch is then unusable.
    pub(super) async fn sync(&mut self, channel: &Channel) -> Result<(), Status> {
        let token = format!("{}-{}", self.token_prefix, self.next_token);
        self.next_token += 1;
        let published_at = Instant::now();
        publish(channel, &self.barrier_namespace, &token).await?;
        let mut dirty = Dirty::default();
        tokio::time::timeout(BARRIER_TIMEOUT, async {
            loop {
                let Some(envelope) = self.events.message().await? else {
                    return Err(Status::unavailable("containerd's event stream ended"));
                };
                if envelope.topic == BARRIER_TOPIC {
                    if envelope.event.is_some_and(|e| e.value == token.as_bytes()) {
                        return Ok(());
                    }
                    continue;
                }
                dirty.note(&envelope);
            }
        })
        .await
        .map_err(|_| {
            Status::deadline_exceeded("containerd did not deliver the watch's barrier")
        })??;
        self.reread(channel, dirty).await?;
        self.synced_at = Some(published_at);
        Ok(())
    }

    async fn reread(&mut self, channel: &Channel, dirty: Dirty) -> Result<(), Status> {
        for ((namespace, name), deleted) in dirty.images {
            let found = if deleted {
                None
            } else {
                native::image(channel, &namespace, &name).await?
            };
            let state = self.known.namespaces.entry(namespace).or_default();
            match found {
                Some(record) => state.images.insert(name, record),
                None => state.images.remove(&name),
            };
        }
        for (namespace, id) in dirty.tasks {
            let found = native::task(channel, &namespace, &id).await?;
            let state = self.known.namespaces.entry(namespace).or_default();
            match found {
                Some(task) => state.tasks.insert(id, task),
                None => state.tasks.remove(&id),
            };
        }
        for ((namespace, id), deleted) in dirty.containers {
            let found = if deleted {
                None
            } else {
                native::container(channel, &namespace, &id).await?
            };
            let state = self.known.namespaces.entry(namespace.clone()).or_default();
            match found.map(|native| watched(&namespace, &native)) {
                Some(entry) => state.containers.insert(id, entry),
                None => state.containers.remove(&id),
            };
        }
        Ok(())
    }
}

impl Known {
    /// What a listing of every pruned namespace found.
    pub(super) fn listed(data: &[NamespaceData]) -> Self {
        let namespaces = data
            .iter()
            .map(|namespace| {
                let state = Namespace {
                    tasks: tasks_by_container(&namespace.tasks)
                        .into_iter()
                        .filter(|(id, _)| !id.is_empty())
                        .map(|(id, task)| (id.to_owned(), task.clone()))
                        .collect(),
                    images: namespace
                        .images
                        .iter()
                        .filter(|i| !i.name.is_empty())
                        .map(|i| (i.name.clone(), i.clone()))
                        .collect(),
                    containers: namespace
                        .containers
                        .iter()
                        .filter(|c| !c.id.is_empty())
                        .map(|c| (c.id.clone(), watched(&namespace.namespace, c)))
                        .collect(),
                };
                (namespace.namespace.clone(), state)
            })
            .collect();
        Self {
            namespaces,
            settled: Settled::default(),
        }
    }

    /// An exited CRI container of the CRI namespace, by local id, as CRI
    /// gave it at the inventory (its exit is final), if CRI did.
    pub(super) fn exited_cri_container(
        &self,
        local: &str,
    ) -> Option<(CriContainer, Option<ContainerStatus>)> {
        self.settled.containers.get(local).cloned()
    }

    /// The sandboxes of `ids` (local ids of `namespace`, the CRI one) that
    /// CRI said at the inventory were not ready (they never are again), and
    /// whose container is still there.
    pub(super) fn stopped_sandboxes(&self, namespace: &str, ids: &BTreeSet<String>) -> Vec<CriPod> {
        let Some(state) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        ids.iter()
            .filter(|id| state.containers.contains_key(id.as_str()))
            .filter_map(|id| self.settled.sandboxes.get(id).cloned())
            .collect()
    }

    /// What containerd says of one container of `namespace`, by local id:
    /// its record and its task, as a re-check converts them (no image
    /// records: a container's rules do not read its image id). `None` when
    /// it no longer exists.
    pub(super) fn container_facts(&self, namespace: &str, local: &str) -> Option<NamespaceData> {
        let state = self.namespaces.get(namespace)?;
        let entry = state.containers.get(local)?;
        Some(NamespaceData {
            namespace: namespace.to_owned(),
            containers: vec![entry.record.clone()],
            tasks: state.tasks.get(local).cloned().into_iter().collect(),
            ..NamespaceData::default()
        })
    }

    /// The pod uid of one container of `namespace`, by local id, if it
    /// has one.
    pub(super) fn pod_uid_of(&self, namespace: &str, local: &str) -> Option<&str> {
        self.namespaces
            .get(namespace)?
            .containers
            .get(local)?
            .container
            .pod
            .as_ref()?
            .pod_uid
            .as_deref()
    }

    /// The records of one namespace that point at `digest`, sorted by name.
    pub(super) fn records_of(&self, namespace: &str, digest: &str) -> Vec<ImageRecord> {
        self.namespaces
            .get(namespace)
            .map(|n| {
                images::records_of(n.images.values(), digest)
                    .into_iter()
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every container, of any watched namespace, that uses one of
    /// `images` (`(namespace, target digest)`) by the one definition
    /// (`inventory::uses`): made from it or mounting it, by a name that
    /// points at that target in its own namespace, or by any spelling of
    /// one of the image's names. Image ids and mounted images are resolved
    /// from the names as they are now.
    pub(super) fn users_of_images(&self, images: &[(&str, &str)]) -> Vec<Container> {
        // Each image by the keys the inventory knows it by: its id and
        // every name pointing at it.
        let wanted: Vec<Image> = images
            .iter()
            .map(|(namespace, digest)| Image {
                id: qualified(namespace, digest),
                tags: self
                    .records_of(namespace, digest)
                    .into_iter()
                    .map(|r| r.name)
                    .collect(),
                ..Image::default()
            })
            .collect();
        let mut found = Vec::new();
        for (namespace, state) in &self.namespaces {
            let target = |name: &str| {
                state
                    .images
                    .get(name)
                    .and_then(|r| r.target.as_ref())
                    .map(|t| t.digest.as_str())
                    .filter(|d| !d.is_empty())
            };
            for entry in state.containers.values() {
                let mut container = entry.container.clone();
                container.image_id = target(&entry.container.image_ref)
                    .map(|t| qualified(namespace, t))
                    .unwrap_or_default();
                container.image_mounts = image_mounts(namespace, &entry.record, target);
                if wanted
                    .iter()
                    .any(|image| uses::container_uses_image(&container, image).is_some())
                {
                    found.push(container);
                }
            }
        }
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }

    /// The sandbox containers of `namespace` with one of these pod uids,
    /// by local id.
    pub(super) fn sandboxes_of_pods(
        &self,
        namespace: &str,
        pod_uids: &HashSet<&str>,
    ) -> Vec<String> {
        let Some(state) = self.namespaces.get(namespace) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = state
            .containers
            .iter()
            .filter(|(_, e)| {
                e.container.pod.as_ref().is_some_and(|p| {
                    p.is_sandbox && p.pod_uid.as_deref().is_some_and(|u| pod_uids.contains(u))
                })
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The sandbox containers of `namespace`, without state.
    pub(super) fn sandbox_containers(&self, namespace: &str) -> Vec<Container> {
        let mut sandboxes: Vec<Container> = self
            .namespaces
            .get(namespace)
            .map(|n| {
                n.containers
                    .values()
                    .map(|e| &e.container)
                    .filter(|c| c.pod.as_ref().is_some_and(|p| p.is_sandbox))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        sandboxes
    }
}

impl Settled {
    fn of(cri: &CriView) -> Self {
        Self {
            containers: cri
                .containers
                .iter()
                .filter(|(_, (listed, status))| {
                    listed.state == CriState::ContainerExited as i32 && status.is_some()
                })
                .map(|(id, entry)| (id.clone(), entry.clone()))
                .collect(),
            sandboxes: cri
                .sandboxes
                .iter()
                .filter(|s| !s.id.is_empty() && s.state == PodSandboxState::SandboxNotready as i32)
                .map(|s| (s.id.clone(), s.clone()))
                .collect(),
        }
    }
}

impl Dirty {
    /// Notes what one event names; events of other topics name nothing the
    /// watch keeps.
    fn note(&mut self, envelope: &Envelope) {
        let Some(event) = envelope.event.as_ref() else {
            return;
        };
        let target = if envelope.topic.starts_with("/containers/") {
            &mut self.containers
        } else if envelope.topic.starts_with("/images/") {
            &mut self.images
        } else if envelope.topic.starts_with("/tasks/") {
            match Named::decode(event.value.as_slice()) {
                Ok(named) if !named.name.is_empty() => {
                    self.tasks.insert((envelope.namespace.clone(), named.name));
                }
                _ => {
                    tracing::debug!(topic = %envelope.topic, "task event without a container, ignored");
                }
            }
            return;
        } else {
            return;
        };
        match Named::decode(event.value.as_slice()) {
            Ok(named) if !named.name.is_empty() => {
                let deleted = envelope.topic.ends_with("/delete");
                target.insert((envelope.namespace.clone(), named.name), deleted);
            }
            _ => tracing::debug!(topic = %envelope.topic, "event without a name, ignored"),
        }
    }
}

/// A container as the watch keeps it.
fn watched(namespace: &str, native: &NativeContainer) -> Watched {
    Watched {
        record: slim_record(native),
        container: plain_container(namespace, native),
    }
}

/// Subscribes with `filters`, which must let the barrier events of
/// `barrier_namespace` through, and returns once the subscription is live:
/// its first barrier came back (containerd sends the stream's headers with
/// its first event, and an event published before the subscription was
/// registered is never delivered). The stream goes over `stream_channel`,
/// which has no deadline; the barriers over `channel`.
pub(super) async fn subscribe_live(
    stream_channel: &Channel,
    channel: &Channel,
    filters: Vec<String>,
    barrier_namespace: &str,
    token_prefix: &str,
) -> Result<Streaming<Envelope>, Status> {
    // No deadline: the stream lives as long as its reader. Its start is
    // bounded below. Spawned, so that the request is on its way before
    // the first barrier is.
    let mut client = EventsClient::new(stream_channel.clone());
    let mut subscribing = tokio::spawn(async move {
        client
            .subscribe(Request::new(SubscribeRequest { filters }))
            .await
    });
    let mut published = 0_u64;
    let deadline = tokio::time::Instant::now() + BARRIER_TIMEOUT;
    loop {
        let token = format!("{token_prefix}-s{published}");
        if let Err(e) = publish(channel, barrier_namespace, &token).await {
            subscribing.abort();
            return Err(e);
        }
        published += 1;
        match tokio::time::timeout(SUBSCRIBE_RETRY, &mut subscribing).await {
            Ok(Ok(answer)) => return Ok(answer?.into_inner()),
            Ok(Err(e)) => return Err(Status::internal(format!("subscribing failed: {e}"))),
            Err(_) if tokio::time::Instant::now() < deadline => {}
            Err(_) => {
                subscribing.abort();
                return Err(Status::deadline_exceeded(
                    "containerd's event subscription did not start",
                ));
            }
        }
    }
}

async fn publish(channel: &Channel, namespace: &str, token: &str) -> Result<(), Status> {
    let request = native::request(
        namespace,
        PublishRequest {
            topic: BARRIER_TOPIC.to_owned(),
            event: Some(Any {
                type_url: BARRIER_TYPE.to_owned(),
                value: token.as_bytes().to_vec(),
            }),
        },
    )?;
    EventsClient::new(channel.clone())
        .publish(request)
        .await
        .map(|_| ())
}

pub(super) fn unique_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, state: CriState) -> CriContainer {
        CriContainer {
            id: id.to_owned(),
            state: state as i32,
            ..CriContainer::default()
        }
    }

    fn sandbox(id: &str, state: PodSandboxState) -> CriPod {
        CriPod {
            id: id.to_owned(),
            state: state as i32,
            ..CriPod::default()
        }
    }

    #[test]
    fn only_what_cri_cannot_change_again_is_settled() {
        let status = ContainerStatus::default();
        let cri = CriView {
            containers: [
                (
                    "exited",
                    (listed("exited", CriState::ContainerExited), Some(status)),
                ),
                (
                    "running",
                    (listed("running", CriState::ContainerRunning), None),
                ),
                (
                    "created",
                    (listed("created", CriState::ContainerCreated), None),
                ),
                // Exited, but its status (its exit time) was not read.
                (
                    "unread",
                    (listed("unread", CriState::ContainerExited), None),
                ),
            ]
            .into_iter()
            .map(|(id, entry)| (id.to_owned(), entry))
            .collect(),
            sandboxes: vec![
                sandbox("stopped", PodSandboxState::SandboxNotready),
                sandbox("ready", PodSandboxState::SandboxReady),
            ],
            ..CriView::default()
        };
        let settled = Settled::of(&cri);
        let mut containers: Vec<&str> = settled.containers.keys().map(String::as_str).collect();
        containers.sort_unstable();
        assert_eq!(containers, ["exited"]);
        let sandboxes: Vec<&str> = settled.sandboxes.keys().map(String::as_str).collect();
        assert_eq!(sandboxes, ["stopped"]);
    }

    #[test]
    fn a_stopped_sandbox_whose_container_is_gone_is_not_answered() {
        let mut known = Known::listed(&[NamespaceData {
            namespace: "k8s.io".to_owned(),
            containers: vec![NativeContainer {
                id: "stopped".to_owned(),
                ..NativeContainer::default()
            }],
            ..NamespaceData::default()
        }]);
        known.settled = Settled::of(&CriView {
            sandboxes: vec![
                sandbox("stopped", PodSandboxState::SandboxNotready),
                sandbox("removed", PodSandboxState::SandboxNotready),
            ],
            ..CriView::default()
        });
        let ids: BTreeSet<String> = ["stopped", "removed", "unknown"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let found: Vec<String> = known
            .stopped_sandboxes("k8s.io", &ids)
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(found, ["stopped"]);
    }
}
