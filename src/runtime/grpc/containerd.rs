//! containerd's own API: one namespace's containers, tasks, images and
//! content, the native removals, what content an image reaches, and where
//! a snapshotter keeps its snapshots. Shared by the containerd adapter and
//! by Docker's on its containerd image store (`holds`: what each image
//! holds on disk).
//!
//! Every call names its namespace in the gRPC metadata containerd reads,
//! `containerd-namespace`, and carries a deadline.

use std::collections::{BTreeMap, HashMap};

use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::UsageRequest;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::{
    Container as NativeContainer, CreateRequest, DeleteContainerRequest, DeleteImageRequest,
    DeleteRequest, DeleteTaskRequest, GetContainerRequest, GetImageRequest, GetRequest,
    Image as ImageRecord, Info, InfoRequest, ListContainersRequest, ListContentRequest,
    ListImagesRequest, ListNamespacesRequest, ListTasksRequest,
    containers_client::ContainersClient, content_client::ContentClient,
    images_client::ImagesClient, namespaces_client::NamespacesClient, tasks_client::TasksClient,
    version_client::VersionClient,
};
use containerd_client::tonic::metadata::MetadataValue;
use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Request, Status};
use containerd_client::types::Descriptor;
use containerd_client::types::v1::Process;
use futures_util::TryStreamExt;

use super::{CONNECT_TIMEOUT, MAX_MESSAGE_BYTES, REQUEST_TIMEOUT, channel};
use crate::output::Chain;

mod holds;

pub(crate) use holds::image_holds;

/// The gRPC metadata key containerd takes the namespace from
/// (`pkg/namespaces/grpc.go`).
const NAMESPACE_HEADER: &str = "containerd-namespace";

pub(crate) fn request<T>(namespace: &str, message: T) -> Result<Request<T>, Status> {
    let mut request = Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    let value = MetadataValue::try_from(namespace)
        .map_err(|_| Status::invalid_argument(format!("bad namespace name {namespace:?}")))?;
    request.metadata_mut().insert(NAMESPACE_HEADER, value);
    Ok(request)
}

/// `None` for `NotFound`, the error for anything else.
fn found<T>(answer: Result<T, Status>) -> Result<Option<T>, Status> {
    match answer {
        Ok(value) => Ok(Some(value)),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// containerd's version, to make sure the socket is containerd's.
pub(crate) async fn version(channel: &Channel) -> Result<String, Status> {
    let mut request = Request::new(());
    request.set_timeout(REQUEST_TIMEOUT);
    let answer = VersionClient::new(channel.clone()).version(request).await?;
    Ok(answer.into_inner().version)
}

/// The names of every namespace.
pub(crate) async fn namespaces(channel: &Channel) -> Result<Vec<String>, Status> {
    let mut request = Request::new(ListNamespacesRequest {
        filter: String::new(),
    });
    request.set_timeout(REQUEST_TIMEOUT);
    let answer = NamespacesClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list(request)
        .await?;
    Ok(answer
        .into_inner()
        .namespaces
        .into_iter()
        .map(|n| n.name)
        .collect())
}

/// Everything of one namespace the inventory needs, read concurrently.
pub(crate) async fn read_namespace(
    channel: &Channel,
    namespace: &str,
) -> Result<NamespaceData, Status> {
    let (containers, tasks, images, content) = tokio::try_join!(
        containers(channel, namespace),
        tasks(channel, namespace),
        images(channel, namespace),
        content(channel, namespace),
    )?;
    Ok(NamespaceData {
        namespace: namespace.to_owned(),
        containers,
        tasks,
        images,
        content,
    })
}

/// Every container, streamed one by one: with their OCI specs a node's
/// containers may not fit one message.
pub(crate) async fn containers(
    channel: &Channel,
    namespace: &str,
) -> Result<Vec<NativeContainer>, Status> {
    let stream = ContainersClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list_stream(request(
            namespace,
            ListContainersRequest {
                filters: Vec::new(),
            },
        )?)
        .await?
        .into_inner();
    stream
        .try_filter_map(|message| async move { Ok(message.container) })
        .try_collect()
        .await
}

/// One container; `None` when it does not exist.
pub(crate) async fn container(
    channel: &Channel,
    namespace: &str,
    id: &str,
) -> Result<Option<NativeContainer>, Status> {
    let answer = ContainersClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .get(request(
            namespace,
            GetContainerRequest { id: id.to_owned() },
        )?)
        .await;
    Ok(found(answer)?.and_then(|a| a.into_inner().container))
}

/// Every task (see `convert::tasks_by_container` for how to read them).
pub(crate) async fn tasks(channel: &Channel, namespace: &str) -> Result<Vec<Process>, Status> {
    let answer = TasksClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list(request(
            namespace,
            ListTasksRequest {
                filter: String::new(),
            },
        )?)
        .await?;
    Ok(answer.into_inner().tasks)
}

/// The task of one container; `None` when it has none.
pub(crate) async fn task(
    channel: &Channel,
    namespace: &str,
    id: &str,
) -> Result<Option<Process>, Status> {
    let answer = TasksClient::new(channel.clone())
        .get(request(
            namespace,
            GetRequest {
                container_id: id.to_owned(),
                exec_id: String::new(),
            },
        )?)
        .await;
    Ok(found(answer)?.and_then(|a| a.into_inner().process))
}

/// Every image record.
pub(crate) async fn images(channel: &Channel, namespace: &str) -> Result<Vec<ImageRecord>, Status> {
    let answer = ImagesClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list(request(
            namespace,
            ListImagesRequest {
                filters: Vec::new(),
            },
        )?)
        .await?;
    Ok(answer.into_inner().images)
}

/// One image record by name; `None` when there is none.
pub(crate) async fn image(
    channel: &Channel,
    namespace: &str,
    name: &str,
) -> Result<Option<ImageRecord>, Status> {
    let answer = ImagesClient::new(channel.clone())
        .get(request(
            namespace,
            GetImageRequest {
                name: name.to_owned(),
            },
        )?)
        .await;
    Ok(found(answer)?.and_then(|a| a.into_inner().image))
}

/// Every content blob's size and labels, by digest: one streamed call,
/// from which every image's size follows without reading a blob.
pub(crate) async fn content(
    channel: &Channel,
    namespace: &str,
) -> Result<HashMap<String, Info>, Status> {
    let stream = ContentClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list(request(
            namespace,
            ListContentRequest {
                filters: Vec::new(),
            },
        )?)
        .await?
        .into_inner();
    listed(
        stream,
        |message| message.info,
        |info| (info.digest.clone(), info),
    )
    .await
}

/// One content blob's size and labels; `None` when the store does not
/// hold it.
pub(crate) async fn content_info(
    channel: &Channel,
    namespace: &str,
    digest: &str,
) -> Result<Option<Info>, Status> {
    let answer = ContentClient::new(channel.clone())
        .info(request(
            namespace,
            InfoRequest {
                digest: digest.to_owned(),
            },
        )?)
        .await;
    Ok(found(answer)?.and_then(|a| a.into_inner().info))
}

/// Where each image of `targets` (its target digest; Docker's image id on
/// its containerd image store) in `namespace` of the containerd at
/// `socket` was pulled from, as the labels on its target blob say
/// ([`Provenance::from_labels`](crate::inventory::provenance::Provenance::from_labels));
/// a target the content store does not hold is unknown. Asked blob by
/// blob, a few at once.
///
/// # Errors
/// containerd cannot be reached, or a blob's labels cannot be read: why,
/// in words.
pub(crate) async fn provenances(
    socket: &std::path::Path,
    namespace: &str,
    targets: &[&str],
) -> Result<HashMap<String, crate::inventory::provenance::Provenance>, String> {
    use futures_util::StreamExt;
    let at = socket.display();
    let channel = &tokio::time::timeout(CONNECT_TIMEOUT, channel(socket).connect())
        .await
        .map_err(|_| format!("containerd at {at} gave no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot connect to containerd at {at}: {}", Chain(&e)))?;
    futures_util::stream::iter(targets)
        .map(|target| async move {
            let info = content_info(channel, namespace, target)
                .await
                .map_err(|e| format!("the labels of {target}: {}", Chain(&e)))?;
            Ok::<_, String>(((*target).to_owned(), provenance_of(info.as_ref())))
        })
        .buffer_unordered(CONTENT_INFO_CALLS)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// How many content blobs [`provenances`] asks about at once.
const CONTENT_INFO_CALLS: usize = 8;

/// Where an image was pulled from, as its target blob's labels say
/// (every blob a pull fetches is labelled); unknown when the content store
/// does not hold the target.
pub(crate) fn provenance_of(target: Option<&Info>) -> crate::inventory::provenance::Provenance {
    use crate::inventory::provenance::Provenance;
    match target {
        Some(info) => Provenance::from_labels(&info.labels),
        None => Provenance::Unknown {
            why: "its target is not in the content store".into(),
        },
    }
}

/// The items of a streamed listing, every message's in turn (`items`
/// takes them out of one), each made a `(key, value)` by `entry`.
async fn listed<M, I, K: Eq + std::hash::Hash, V>(
    stream: containerd_client::tonic::Streaming<M>,
    items: impl Fn(M) -> Vec<I>,
    entry: impl Fn(I) -> (K, V),
) -> Result<HashMap<K, V>, Status> {
    stream
        .map_ok(|message| {
            futures_util::stream::iter(items(message).into_iter().map(Ok::<_, Status>))
        })
        .try_flatten()
        .map_ok(entry)
        .try_collect()
        .await
}

/// Deletes a container's task; it must have stopped.
pub(crate) async fn delete_task(
    channel: &Channel,
    namespace: &str,
    id: &str,
) -> Result<(), Status> {
    TasksClient::new(channel.clone())
        .delete(request(
            namespace,
            DeleteTaskRequest {
                container_id: id.to_owned(),
            },
        )?)
        .await
        .map(|_| ())
}

/// Deletes a container record. containerd does not check for a task here
/// (the Go client does, on its side): callers delete the task first.
pub(crate) async fn delete_container(
    channel: &Channel,
    namespace: &str,
    id: &str,
) -> Result<(), Status> {
    ContainersClient::new(channel.clone())
        .delete(request(
            namespace,
            DeleteContainerRequest { id: id.to_owned() },
        )?)
        .await
        .map(|_| ())
}

/// The bytes a snapshot holds of its own (for a container: its writable
/// layer); `None` when it does not exist.
pub(crate) async fn snapshot_usage(
    channel: &Channel,
    namespace: &str,
    snapshotter: &str,
    key: &str,
) -> Result<Option<u64>, Status> {
    let answer = SnapshotsClient::new(channel.clone())
        .usage(request(
            namespace,
            UsageRequest {
                snapshotter: snapshotter.to_owned(),
                key: key.to_owned(),
            },
        )?)
        .await;
    Ok(found(answer)?.and_then(|a| u64::try_from(a.into_inner().size).ok()))
}

/// Runs containerd's garbage collector and waits for it: deleting a lease
/// with `sync` does that (containerd has no call of its own for it). The
/// lease holds nothing, and expires by itself should the delete not
/// happen.
pub(crate) async fn collect_garbage(channel: &Channel, namespace: &str) -> Result<(), Status> {
    let id = format!(
        "safeprune-gc-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    );
    let expires = (chrono::Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut leases = LeasesClient::new(channel.clone());
    leases
        .create(request(
            namespace,
            CreateRequest {
                id: id.clone(),
                labels: [("containerd.io/gc.expire".to_owned(), expires)].into(),
            },
        )?)
        .await?;
    leases
        .delete(request(namespace, DeleteRequest { id, sync: true })?)
        .await
        .map(|_| ())
}

/// Deletes one image record. With `target`, containerd 1.7+ deletes it only
/// if it still points there (1.6 ignores the field). Not `sync`: that would
/// run the garbage collector over the whole store for each record
/// ([`collect_garbage`] runs it once, after the last).
pub(crate) async fn delete_image(
    channel: &Channel,
    namespace: &str,
    name: &str,
    target: Option<Descriptor>,
) -> Result<(), Status> {
    ImagesClient::new(channel.clone())
        .delete(request(
            namespace,
            DeleteImageRequest {
                name: name.to_owned(),
                sync: false,
                target,
            },
        )?)
        .await
        .map(|_| ())
}

/// Every snapshot of `snapshotter`, by key, with its parent's key (empty
/// for a base layer): one streamed call.
pub(crate) async fn snapshot_parents(
    channel: &Channel,
    namespace: &str,
    snapshotter: &str,
) -> Result<HashMap<String, String>, Status> {
    use containerd_client::services::v1::snapshots::ListSnapshotsRequest;
    let stream = SnapshotsClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list(request(
            namespace,
            ListSnapshotsRequest {
                snapshotter: snapshotter.to_owned(),
                filters: Vec::new(),
            },
        )?)
        .await?
        .into_inner();
    listed(
        stream,
        |message| message.info,
        |info| (info.name, info.parent),
    )
    .await
}

/// containerd's own answers for one namespace.
#[derive(Debug, Default)]
pub(crate) struct NamespaceData {
    pub namespace: String,
    pub containers: Vec<NativeContainer>,
    pub tasks: Vec<Process>,
    pub images: Vec<ImageRecord>,
    /// Every content blob, by digest.
    pub content: HashMap<String, Info>,
}

/// Labels by which containerd's garbage collector follows an image's
/// content: index to manifests, manifest to config and layers.
pub(crate) const LABEL_GC_CONTENT: &str = "containerd.io/gc.ref.content.";

/// Each blob of the store reachable from `target` (itself included), with
/// its size, once.
pub(crate) fn reachable<'a>(
    target: &'a str,
    content: &'a HashMap<String, Info>,
) -> BTreeMap<&'a str, u64> {
    let mut seen = BTreeMap::new();
    let mut pending = vec![target];
    while let Some(digest) = pending.pop() {
        // A child missing from the store (another platform's manifest)
        // takes no space here.
        let Some(info) = content.get(digest) else {
            continue;
        };
        if seen.contains_key(digest) {
            continue;
        }
        seen.insert(digest, u64::try_from(info.size).unwrap_or(0));
        pending.extend(
            info.labels
                .iter()
                .filter(|(key, _)| key.starts_with(LABEL_GC_CONTENT))
                .map(|(_, child)| child.as_str()),
        );
    }
    seen
}

/// The plugin type of containerd's snapshotters.
const SNAPSHOTTER_PLUGIN: &str = "io.containerd.snapshotter.v1";

/// The directory containerd's snapshotter `snapshotter` (`overlayfs`) keeps
/// its snapshots in, as the plugin exports it (`root`, measured on 2.3.4:
/// `<containerd root>/io.containerd.snapshotter.v1.overlayfs`), asked of
/// the containerd at `socket` with one Introspection `Plugins` call. For
/// Docker's containerd image store, whose images lie there, not under
/// `DockerRootDir`.
///
/// # Errors
/// Why it is not known: containerd does not answer, has no such
/// snapshotter, or the snapshotter exports no root.
pub(crate) async fn snapshotter_root(
    socket: &std::path::Path,
    snapshotter: &str,
) -> Result<String, String> {
    use containerd_client::services::v1::PluginsRequest;
    use containerd_client::services::v1::introspection_client::IntrospectionClient;
    let at = socket.display();
    let ask = async {
        let channel = channel(socket)
            .connect()
            .await
            .map_err(|e| format!("cannot connect to containerd at {at}: {}", Chain(&e)))?;
        let mut request = containerd_client::tonic::Request::new(PluginsRequest {
            filters: vec![format!("type=={SNAPSHOTTER_PLUGIN},id=={snapshotter}")],
        });
        request.set_timeout(CONNECT_TIMEOUT);
        IntrospectionClient::new(channel)
            .plugins(request)
            .await
            .map_err(|e| {
                format!(
                    "containerd at {at} does not list its plugins: {}",
                    Chain(&e)
                )
            })
    };
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, ask)
        .await
        .map_err(|_| format!("containerd at {at} gave no answer within {CONNECT_TIMEOUT:?}"))??;
    // Checked here too: the filter is the server's to honour.
    let plugin = answer
        .into_inner()
        .plugins
        .into_iter()
        .find(|p| p.r#type == SNAPSHOTTER_PLUGIN && p.id == snapshotter)
        .ok_or_else(|| format!("containerd at {at} has no snapshotter {snapshotter}"))?;
    plugin
        .exports
        .get("root")
        .filter(|root| !root.is_empty())
        .cloned()
        .ok_or_else(|| format!("containerd's snapshotter {snapshotter} at {at} names no root"))
}
