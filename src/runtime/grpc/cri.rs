//! The CRI v1 calls safeprune makes, on any channel that serves CRI:
//! containerd's socket (its CRI plugin) or a CRI runtime's own (CRI-O),
//! and what their answers' times, states and sandboxes mean to the
//! inventory. Shared by the CRI adapter and the containerd adapter.
//! Each call has the transport's deadline; each answer about one object is
//! checked to be about exactly that object (CRI resolves ids by unique
//! prefix, its `truncindex`).

use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Request, Status, Streaming};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    Container, ContainerEventResponse, ContainerFilter, ContainerStatus, ContainerStatusRequest,
    FilesystemUsage, GetEventsRequest, Image, ImageFsInfoRequest, ImageSpec, ImageStatusRequest,
    ListContainersRequest, ListImagesRequest, ListPodSandboxRequest, PodSandbox,
    PodSandboxStatusRequest, RemoveContainerRequest, RemoveImageRequest, VersionRequest,
    VersionResponse,
};

use chrono::{DateTime, Utc};
use k8s_cri::v1::{ContainerState as CriState, PodSandboxState};

use super::{MAX_MESSAGE_BYTES, REQUEST_TIMEOUT};
use crate::inventory::{self, ContainerState};

/// A CRI runtime client on `channel`.
pub(crate) fn client(channel: Channel) -> RuntimeServiceClient<Channel> {
    RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

/// A CRI image client on `channel`.
pub(crate) fn images(channel: Channel) -> ImageServiceClient<Channel> {
    ImageServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

pub(crate) fn request<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    request
}

/// The runtime's name and version (`cri-o 1.36.3`, `containerd v2.3.4`):
/// what tells a CRI socket from any other.
pub(crate) async fn version(channel: &Channel) -> Result<VersionResponse, Status> {
    Ok(client(channel.clone())
        .version(request(VersionRequest {
            version: String::new(),
        }))
        .await?
        .into_inner())
}

/// Where CRI stores images and containers (`ImageFsInfo`): the image file
/// systems, then the container file systems (KEP-4191's split; empty where
/// the runtime keeps both on one).
pub(crate) async fn filesystems(
    channel: &Channel,
) -> Result<(Vec<FilesystemUsage>, Vec<FilesystemUsage>), Status> {
    let answer = images(channel.clone())
        .image_fs_info(request(ImageFsInfoRequest {}))
        .await?
        .into_inner();
    Ok((answer.image_filesystems, answer.container_filesystems))
}

/// The mount point of the first image file system CRI names; `None` when
/// it names none.
pub(crate) async fn image_fs_mountpoint(channel: &Channel) -> Result<Option<String>, Status> {
    let (image_filesystems, _) = filesystems(channel).await?;
    Ok(image_filesystems
        .into_iter()
        .filter_map(|fs| fs.fs_id.map(|id| id.mountpoint))
        .find(|mountpoint| !mountpoint.is_empty()))
}

/// Every image CRI lists.
pub(crate) async fn list_images(channel: &Channel) -> Result<Vec<Image>, Status> {
    Ok(images(channel.clone())
        .list_images(request(ListImagesRequest { filter: None }))
        .await?
        .into_inner()
        .images)
}

/// The image `name` (an id, a tag or a digest reference) names; `None` for
/// one CRI does not know.
pub(crate) async fn image_status(channel: &Channel, name: &str) -> Result<Option<Image>, Status> {
    let answer = images(channel.clone())
        .image_status(request(ImageStatusRequest {
            image: Some(spec(name)),
            verbose: false,
        }))
        .await;
    match answer {
        Ok(answer) => Ok(answer.into_inner().image),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// The names of every image CRI reports `pinned`: its id, tags and digest
/// references. What crictl and kubelet honour; containerd before 1.6.22 and
/// 1.7.3 reports none, 2.x its `pinned_images` and the sandbox image, CRI-O
/// its `pause_image` and `pinned_images` (measured on 1.6.20, 2.3.4 and
/// CRI-O 1.36.3).
pub(crate) async fn pinned_images(channel: &Channel) -> Result<Vec<String>, Status> {
    Ok(list_images(channel)
        .await?
        .into_iter()
        .filter(|i| i.pinned)
        .flat_map(|i| {
            std::iter::once(i.id)
                .chain(i.repo_tags)
                .chain(i.repo_digests)
        })
        .filter(|name| !name.is_empty())
        .collect())
}

/// Whether CRI reports the image named `name` pinned; false for an image it
/// does not know. One call whatever the node's size: a re-check's.
pub(crate) async fn image_pinned(channel: &Channel, name: &str) -> Result<bool, Status> {
    Ok(image_status(channel, name).await?.is_some_and(|i| i.pinned))
}

/// Every pod sandbox CRI knows, READY or not.
pub(crate) async fn sandboxes(channel: &Channel) -> Result<Vec<PodSandbox>, Status> {
    let listed = client(channel.clone())
        .list_pod_sandbox(request(ListPodSandboxRequest { filter: None }))
        .await?;
    Ok(listed.into_inner().items)
}

/// One pod sandbox, by `PodSandboxStatus`; `None` when CRI does not know
/// it.
pub(crate) async fn sandbox(channel: &Channel, id: &str) -> Result<Option<PodSandbox>, Status> {
    let answer = client(channel.clone())
        .pod_sandbox_status(request(PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        }))
        .await;
    let status = match answer {
        Ok(answer) => answer.into_inner().status.filter(|s| s.id == id),
        Err(status) if status.code() == Code::NotFound => None,
        Err(status) => return Err(status),
    };
    Ok(status.map(|s| PodSandbox {
        id: s.id,
        metadata: s.metadata,
        state: s.state,
        created_at: s.created_at,
        labels: s.labels,
        annotations: s.annotations,
        runtime_handler: s.runtime_handler,
    }))
}

/// Every container CRI knows, of any state; with `id`, only that one
/// (exactly: a prefix match is dropped).
pub(crate) async fn containers(
    channel: &Channel,
    id: Option<&str>,
) -> Result<Vec<Container>, Status> {
    let filter = id.map(|id| ContainerFilter {
        id: id.to_owned(),
        ..ContainerFilter::default()
    });
    let listed = client(channel.clone())
        .list_containers(request(ListContainersRequest { filter }))
        .await?
        .into_inner()
        .containers;
    Ok(match id {
        Some(id) => listed.into_iter().filter(|c| c.id == id).collect(),
        None => listed,
    })
}

/// The status of one container; `None` when CRI does not know it. Only
/// the status has a container's exit time, exit code, image id and mounts.
pub(crate) async fn status_of(
    cri: &mut RuntimeServiceClient<Channel>,
    id: &str,
) -> Result<Option<ContainerStatus>, Status> {
    let answer = cri
        .container_status(request(ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: false,
        }))
        .await;
    match answer {
        Ok(answer) => Ok(answer.into_inner().status.filter(|s| s.id == id)),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

/// Removes one container.
///
/// CRI's `RemoveContainer` answers OK for a container it does not know,
/// and stops a running one first (the CRI contract says "forcibly
/// removed"; measured on CRI-O 1.36.3), so callers check both with
/// [`status_of`] just before.
pub(crate) async fn remove_container(channel: &Channel, id: &str) -> Result<(), Status> {
    client(channel.clone())
        .remove_container(request(RemoveContainerRequest {
            container_id: id.to_owned(),
        }))
        .await
        .map(|_| ())
}

/// Removes one image by `name`. By its full id the image goes with every
/// name; by a name, CRI-O only takes that name off (measured on 1.36.3).
pub(crate) async fn remove_image(channel: &Channel, name: &str) -> Result<(), Status> {
    images(channel.clone())
        .remove_image(request(RemoveImageRequest {
            image: Some(spec(name)),
        }))
        .await
        .map(|_| ())
}

/// The stream of container events (`GetContainerEvents`), with no
/// deadline: `channel` must have none. Runtimes that do not serve it end
/// the stream at once (CRI-O unless `enable_pod_events = true`).
pub(crate) async fn container_events(
    channel: &Channel,
) -> Result<Streaming<ContainerEventResponse>, Status> {
    Ok(client(channel.clone())
        .get_container_events(Request::new(GetEventsRequest {}))
        .await?
        .into_inner())
}

fn spec(name: &str) -> ImageSpec {
    ImageSpec {
        image: name.to_owned(),
        ..ImageSpec::default()
    }
}

/// CRI's nanoseconds since the epoch; 0 means "never".
pub(crate) fn from_unix_nanos(nanos: i64) -> Option<DateTime<Utc>> {
    (nanos > 0).then(|| DateTime::from_timestamp_nanos(nanos))
}

/// A CRI container state as the inventory's.
pub(crate) fn state(state: i32) -> ContainerState {
    match CriState::try_from(state) {
        Ok(CriState::ContainerCreated) => ContainerState::Created,
        Ok(CriState::ContainerRunning) => ContainerState::Running,
        Ok(CriState::ContainerExited) => ContainerState::Exited,
        Ok(CriState::ContainerUnknown) | Err(_) => ContainerState::Unknown,
    }
}

/// One pod sandbox, READY as CRI says, by CRI's id.
pub(crate) fn sandbox_of(s: &PodSandbox) -> inventory::PodSandbox {
    let meta = s.metadata.as_ref();
    let field = |f: fn(&k8s_cri::v1::PodSandboxMetadata) -> &String| {
        meta.map(f).filter(|v| !v.is_empty()).cloned()
    };
    inventory::PodSandbox {
        id: s.id.clone(),
        pod_uid: field(|m| &m.uid),
        pod_name: field(|m| &m.name),
        pod_namespace: field(|m| &m.namespace),
        ready: s.state == PodSandboxState::SandboxReady as i32,
    }
}
