//! What kubelet owns, read and removed through CRI on containerd's socket.
//!
//! The CRI plugin keeps its containers and sandboxes in memory and does not
//! notice containers deleted through containerd's own API: kubelet would
//! keep seeing them until containerd restarts (docs/engines.md). So CRI's
//! containers are read and removed only here.

use std::collections::HashMap;

use containerd_client::tonic::transport::Channel;
use containerd_client::tonic::{Code, Request, Status};
use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    Container, ContainerState as CriState, ContainerStatus, ContainerStatusRequest,
    ImageFsInfoRequest, ImageSpec, ImageStatusRequest, ListContainersRequest, ListImagesRequest,
    ListPodSandboxRequest, PodSandbox, PodSandboxStatusRequest, RemoveContainerRequest,
    StatusRequest,
};

use super::STATUS_CONCURRENCY;
use super::convert::{CriView, sandbox_image_of};
use super::transport::{MAX_MESSAGE_BYTES, REQUEST_TIMEOUT};

/// Where CRI stores images: the mount point of its first image file system
/// (`ImageFsInfo`); `None` when it names none.
pub(super) async fn image_fs_mountpoint(channel: &Channel) -> Result<Option<String>, Status> {
    let answer = ImageServiceClient::new(channel.clone())
        .image_fs_info(request(ImageFsInfoRequest {}))
        .await?
        .into_inner();
    Ok(answer
        .image_filesystems
        .into_iter()
        .filter_map(|fs| fs.fs_id.map(|id| id.mountpoint))
        .find(|mountpoint| !mountpoint.is_empty()))
}

/// A CRI runtime client on containerd's channel.
pub(super) fn client(channel: Channel) -> RuntimeServiceClient<Channel> {
    RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

fn request<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(REQUEST_TIMEOUT);
    request
}

/// Every sandbox and container CRI knows, exit times of exited containers,
/// and the sandbox image.
///
/// `ListContainers` has no exit time; `ContainerStatus` has it, in
/// nanoseconds, so each exited container is asked, a few at a time. A
/// container removed between the list and its status is left out.
pub(super) async fn read(channel: &Channel) -> Result<CriView, Status> {
    let (sandboxes, containers, sandbox_image, pinned) = tokio::try_join!(
        sandboxes(channel),
        async {
            let listed = client(channel.clone())
                .list_containers(request(ListContainersRequest { filter: None }))
                .await?;
            Ok(listed.into_inner().containers)
        },
        sandbox_image(channel),
        async {
            // The pins CRI reports are one source of several (the label,
            // the sandbox image's name): a failure here costs only this one.
            Ok(pinned_images(channel).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "CRI does not list its images: its pins are read from their labels only");
                Vec::new()
            }))
        },
    )?;
    let containers = stream::iter(containers)
        .map(|listed| {
            let mut cri = client(channel.clone());
            async move {
                if listed.state != CriState::ContainerExited as i32 {
                    return Ok::<_, Status>(Some((listed.id.clone(), (listed, None))));
                }
                match status_of(&mut cri, &listed.id).await? {
                    Some(status) => Ok(Some((listed.id.clone(), (listed, Some(status))))),
                    None => Ok(None),
                }
            }
        })
        .buffer_unordered(STATUS_CONCURRENCY)
        .try_filter_map(|c| async move { Ok(c) })
        .try_collect::<HashMap<_, _>>()
        .await?;
    Ok(CriView {
        sandboxes,
        containers,
        sandbox_image,
        pinned,
    })
}

/// One container as CRI knows it, with its status when it has exited;
/// `None` when CRI does not know it.
///
/// Read by `ContainerStatus`, whose cost does not grow with the node (CRI's
/// `ListContainers` builds every container before it filters). The status
/// has no sandbox id: the caller takes it from CRI's record on the
/// containerd container.
pub(super) async fn container(
    channel: &Channel,
    id: &str,
) -> Result<Option<(Container, Option<ContainerStatus>)>, Status> {
    let Some(status) = status_of(&mut client(channel.clone()), id).await? else {
        return Ok(None);
    };
    let listed = Container {
        id: status.id.clone(),
        pod_sandbox_id: String::new(),
        metadata: status.metadata.clone(),
        image: status.image.clone(),
        image_ref: status.image_ref.clone(),
        state: status.state,
        created_at: status.created_at,
        labels: status.labels.clone(),
        annotations: status.annotations.clone(),
        ..Container::default()
    };
    let exited = status.state == CriState::ContainerExited as i32;
    Ok(Some((listed, exited.then_some(status))))
}

/// One pod sandbox, by `PodSandboxStatus`; `None` when CRI does not know
/// it. CRI resolves ids by prefix, so the answer is checked to be about
/// exactly this sandbox.
pub(super) async fn sandbox(channel: &Channel, id: &str) -> Result<Option<PodSandbox>, Status> {
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

/// The sandbox image, from the plugin's config in its verbose status.
/// The names of every image CRI reports `pinned`: its id (`sha256:<config
/// digest>`), tags and digest references. What crictl and kubelet honour;
/// containerd before 1.6.22 and 1.7.3 reports none, 2.x its
/// `pinned_images` and the sandbox image (measured on 1.6.20 and 2.3.4).
pub(super) async fn pinned_images(channel: &Channel) -> Result<Vec<String>, Status> {
    let listed = ImageServiceClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .list_images(request(ListImagesRequest { filter: None }))
        .await?;
    Ok(listed
        .into_inner()
        .images
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
pub(super) async fn image_pinned(channel: &Channel, name: &str) -> Result<bool, Status> {
    let answer = ImageServiceClient::new(channel.clone())
        .image_status(request(ImageStatusRequest {
            image: Some(ImageSpec {
                image: name.to_owned(),
                ..ImageSpec::default()
            }),
            verbose: false,
        }))
        .await;
    match answer {
        Ok(answer) => Ok(answer.into_inner().image.is_some_and(|i| i.pinned)),
        Err(status) if status.code() == Code::NotFound => Ok(false),
        Err(status) => Err(status),
    }
}

pub(super) async fn sandbox_image(channel: &Channel) -> Result<Option<String>, Status> {
    let status = client(channel.clone())
        .status(request(StatusRequest { verbose: true }))
        .await?;
    Ok(sandbox_image_of(&status.into_inner().info))
}

/// Every pod sandbox CRI knows, READY or not.
pub(super) async fn sandboxes(channel: &Channel) -> Result<Vec<PodSandbox>, Status> {
    let listed = client(channel.clone())
        .list_pod_sandbox(request(ListPodSandboxRequest { filter: None }))
        .await?;
    Ok(listed.into_inner().items)
}

/// The status of one container; `None` when CRI does not know it.
///
/// CRI resolves ids by unique prefix (its `truncindex`), so the answer is
/// checked to be about exactly this container.
pub(super) async fn status_of(
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

/// Removes one container through CRI.
///
/// CRI's `RemoveContainer` answers OK for a container it does not know,
/// and stops a running one first (the CRI contract says "forcibly
/// removed"), so callers check both with [`status_of`] just before.
pub(super) async fn remove_container(channel: &Channel, id: &str) -> Result<(), Status> {
    client(channel.clone())
        .remove_container(request(RemoveContainerRequest {
            container_id: id.to_owned(),
        }))
        .await
        .map(|_| ())
}
