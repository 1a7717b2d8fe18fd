//! What kubelet owns, read and removed through CRI on containerd's socket.
//!
//! The CRI plugin keeps its containers and sandboxes in memory and does not
//! notice containers deleted through containerd's own API: kubelet would
//! keep seeing them until containerd restarts (docs/engines.md). So CRI's
//! containers are read and removed only here.

use std::collections::HashMap;

use containerd_client::tonic::Status;
use containerd_client::tonic::transport::Channel;
use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_cri::v1::{Container, ContainerState as CriState, ContainerStatus, StatusRequest};

use super::STATUS_CONCURRENCY;
use super::convert::{CriView, sandbox_image_of};
pub(super) use crate::runtime::grpc::cri::{
    client, image_fs_mountpoint, image_pinned, pinned_images, remove_container, sandbox, sandboxes,
    status_of,
};
use crate::runtime::grpc::cri::{containers, request};

/// Every sandbox and container CRI knows, exit times of exited containers,
/// and the sandbox image.
///
/// `ListContainers` has no exit time; `ContainerStatus` has it, in
/// nanoseconds, so each exited container is asked, a few at a time. A
/// container removed between the list and its status is left out.
pub(super) async fn read(channel: &Channel) -> Result<CriView, Status> {
    let (sandboxes, containers, sandbox_image, pinned) = tokio::try_join!(
        sandboxes(channel),
        containers(channel, None),
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

/// The sandbox image, from the plugin's config in its verbose status.
pub(super) async fn sandbox_image(channel: &Channel) -> Result<Option<String>, Status> {
    let status = client(channel.clone())
        .status(request(StatusRequest { verbose: true }))
        .await?;
    Ok(sandbox_image_of(&status.into_inner().info))
}
