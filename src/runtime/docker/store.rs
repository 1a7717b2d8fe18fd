//! Where the engine keeps its images and what each holds on disk: the
//! image file system of `images.disk`, and the layers and blobs `plan
//! --compare` counts once. On the containerd image store both are
//! containerd's, asked of Docker's own containerd.

use std::path::Path;

use bollard::Docker;
use futures_util::{StreamExt, stream};

use super::{DockerRuntime, convert};
use crate::inventory::provenance::Provenance;
use crate::inventory::{FsUsage, Image};
use crate::runtime::error::{RuntimeError, socket_path};

impl DockerRuntime {
    /// What each image holds on disk, resource by resource, for `plan
    /// --compare`, so that a layer two images share counts once: on the
    /// containerd image store its blobs and snapshots as its containerd
    /// lists them; on the graph driver store its layers with the sizes its
    /// history gives them. When containerd cannot be read, a warning says
    /// so, and each image counts whole.
    pub async fn image_holds(
        &self,
        images: &[crate::inventory::Image],
    ) -> crate::inventory::ImageHolds {
        if !self.containerd_store {
            return graph_holds(&self.docker, images).await;
        }
        let read = match self.docker.info().await {
            Ok(info) => containerd_store_holds(&info, images).await,
            Err(e) => Err(format!("docker's /info: {}", crate::output::Chain(&e))),
        };
        read.unwrap_or_else(|why| {
            tracing::warn!(
                reason = %why,
                "docker's containerd image store could not be itemized: each image counts whole in the bytes the command frees"
            );
            crate::inventory::ImageHolds::default()
        })
    }

    /// On the containerd image store, where each of `images` was pulled
    /// from, as Docker's containerd labels its content: there Docker
    /// makes up a repo digest for every tagged image (moby#45122, #48747),
    /// so only the labels say. When that containerd cannot be read, each
    /// stays unknown, with a warning. Nothing to do on the graph driver
    /// store, where the repo digests say (`image`).
    pub(super) async fn with_provenances(&self, images: &mut [Image]) {
        if !self.containerd_store || images.is_empty() {
            return;
        }
        let read = match self.docker.info().await {
            Ok(info) => containerd_store_provenances(&info, images).await,
            Err(e) => Err(format!("docker's /info: {}", crate::output::Chain(&e))),
        };
        match read {
            Ok(mut found) => {
                for image in images {
                    if let Some(provenance) = found.remove(&image.id) {
                        image.provenance = provenance;
                    }
                }
            }
            Err(why) => {
                tracing::warn!(
                    reason = %why,
                    "docker's containerd image store: its containerd cannot be read, so no image is known to be one no registry can give back"
                );
                for image in images {
                    image.provenance = Provenance::Unknown {
                        why: format!("{CONTAINERD_STORE_UNREAD}: {why}").into(),
                    };
                }
            }
        }
    }

    /// What says which images no registry can give back here, as
    /// `check` says it: the repo digests on the graph driver store, the
    /// labels of Docker's containerd on its containerd image store.
    ///
    /// # Errors
    /// On the containerd image store, Docker's containerd cannot be read:
    /// why, in words.
    pub async fn pull_evidence(&self) -> Result<String, String> {
        if !self.containerd_store {
            return Ok("the repo digests a pull or a push records".to_owned());
        }
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| format!("docker's /info: {}", crate::output::Chain(&e)))?;
        let (socket, namespace, _) =
            containerd_of(&info).map_err(|why| format!("{CONTAINERD_STORE_UNREAD}: {why}"))?;
        crate::runtime::grpc::containerd::provenances(&socket, namespace, &[])
            .await
            .map_err(|why| format!("{CONTAINERD_STORE_UNREAD}: {why}"))?;
        Ok(format!(
            "the distribution-source labels in Docker's containerd at {}",
            socket.display()
        ))
    }

    /// The file system where the engine keeps its images; `None` when it
    /// cannot be measured from here.
    ///
    /// On the graph driver store that is `DockerRootDir`. On the containerd
    /// image store the images lie in containerd's snapshotter and content
    /// store, under containerd's root, which `/info` does not name; it
    /// names containerd's address (`Containerd.Address`) and the
    /// snapshotter (`Driver`, `overlayfs`), and containerd names that
    /// snapshotter's root (measured on Docker 29.7.2,
    /// `tests/integration/docker28.rs`). When that root cannot be found or
    /// measured, `DockerRootDir` stands in, with a warning and a note in
    /// the rules' details: never unnoticed.
    pub(super) async fn image_fs(&self) -> Result<Option<FsUsage>, RuntimeError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(Self::call_error("read engine info"))?;
        let docker_root = info.docker_root_dir.clone().filter(|r| !r.is_empty());
        let docker_root_usage = || {
            docker_root
                .as_deref()
                .and_then(|root| crate::runtime::fs::fs_usage(Path::new(root)))
        };
        if !convert::uses_containerd_store(&info) {
            return Ok(docker_root_usage());
        }
        let why = match containerd_store_root(&info).await {
            Ok(root) => match crate::runtime::fs::fs_usage(Path::new(&root)) {
                Some(usage) => {
                    tracing::debug!(
                        root,
                        "docker's containerd image store: measuring its snapshotter's root"
                    );
                    return Ok(Some(usage));
                }
                None => format!("its snapshotter's root {root} cannot be measured from here"),
            },
            Err(why) => why,
        };
        tracing::warn!(
            reason = %why,
            docker_root = docker_root.as_deref().unwrap_or("(not named)"),
            "cannot measure the file system of docker's containerd image store: \
             DockerRootDir stands in for it"
        );
        Ok(docker_root_usage().map(|usage| FsUsage {
            stand_in: Some(
                "measured at DockerRootDir: containerd's image store could not be measured"
                    .to_owned(),
            ),
            ..usage
        }))
    }
}

/// How many images [`graph_holds`] reads at once.
const HOLDS_READS: usize = 8;

/// What each image of `images` holds on the graph driver store (overlay2):
/// its layers, each by its chain id (the diff ids up to it, as Docker's
/// layer store keys them), with the size `docker history` gives it. An
/// image whose history does not line up with its layers (one non-zero size
/// per layer, summing to its size: an empty layer breaks that) is left out,
/// and counts whole; so is one that cannot be read.
async fn graph_holds(
    docker: &Docker,
    images: &[crate::inventory::Image],
) -> crate::inventory::ImageHolds {
    let read = |image: &crate::inventory::Image| {
        let id = image.id.clone();
        async move {
            let (inspect, history) =
                tokio::try_join!(docker.inspect_image(&id), docker.image_history(&id)).ok()?;
            let layers = inspect.root_fs?.layers?;
            // Newest first: the oldest layer's size comes last.
            let sizes: Vec<u64> = history
                .iter()
                .rev()
                .filter(|h| h.size > 0)
                .filter_map(|h| u64::try_from(h.size).ok())
                .collect();
            let size = inspect.size.and_then(|s| u64::try_from(s).ok())?;
            if sizes.len() != layers.len() || sizes.iter().sum::<u64>() != size {
                tracing::debug!(image = %id, "its history does not line up with its layers: counted whole");
                return None;
            }
            let chains = convert::chain_ids(&layers);
            Some((id, chains.into_iter().zip(sizes).collect::<Vec<_>>()))
        }
    };
    crate::inventory::ImageHolds(
        stream::iter(images)
            .map(read)
            .buffer_unordered(HOLDS_READS)
            .filter_map(|held| async move { held })
            .collect()
            .await,
    )
}

/// Docker's containerd, as `/info` names it: its socket (`Containerd.Address`),
/// the namespace dockerd keeps its objects in
/// (`Containerd.Namespaces.Containers`, `moby` by default) and the
/// snapshotter of the containerd image store (`Driver`). Why not, when
/// `/info` does not say.
fn containerd_of(
    info: &bollard::models::SystemInfo,
) -> Result<(std::path::PathBuf, &str, &str), String> {
    let containerd = info.containerd.as_ref();
    let address = containerd
        .and_then(|c| c.address.as_deref())
        .filter(|a| !a.is_empty())
        .ok_or("/info names no containerd address (Containerd.Address)")?;
    let namespace = containerd
        .and_then(|c| c.namespaces.as_ref())
        .and_then(|n| n.containers.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("moby");
    let snapshotter = info
        .driver
        .as_deref()
        .filter(|d| !d.is_empty())
        .ok_or("/info names no snapshotter (Driver)")?;
    let socket = socket_path("containerd", address).map_err(|e| e.to_string())?;
    Ok((socket, namespace, snapshotter))
}

/// What each image of `images` holds on Docker's containerd image store,
/// from its containerd ([`containerd_of`]). Why not, when it cannot be read.
async fn containerd_store_holds(
    info: &bollard::models::SystemInfo,
    images: &[crate::inventory::Image],
) -> Result<crate::inventory::ImageHolds, String> {
    let (socket, namespace, snapshotter) = containerd_of(info)?;
    let targets: Vec<&str> = images.iter().map(|i| i.id.as_str()).collect();
    crate::runtime::grpc::containerd::image_holds(&socket, namespace, snapshotter, &targets).await
}

/// Where each image of `images` was pulled from, as the labels of its
/// content in Docker's containerd ([`containerd_of`]) say. Why not, when
/// they cannot be read.
async fn containerd_store_provenances(
    info: &bollard::models::SystemInfo,
    images: &[Image],
) -> Result<std::collections::HashMap<String, Provenance>, String> {
    let (socket, namespace, _) = containerd_of(info)?;
    let targets: Vec<&str> = images.iter().map(|i| i.id.as_str()).collect();
    crate::runtime::grpc::containerd::provenances(&socket, namespace, &targets).await
}

/// Why an image's provenance is unknown on Docker's containerd image store
/// until its containerd's labels are read.
pub(super) const CONTAINERD_STORE_UNREAD: &str = "Docker's containerd image store makes up repo digests for every tagged image, \
     and its containerd's labels were not read";

/// The root of the snapshotter Docker's containerd image store keeps its
/// images in: containerd ([`containerd_of`]) names that snapshotter's
/// root. Why not, when it cannot be found.
async fn containerd_store_root(info: &bollard::models::SystemInfo) -> Result<String, String> {
    let (socket, _, snapshotter) = containerd_of(info)?;
    crate::runtime::grpc::containerd::snapshotter_root(&socket, snapshotter).await
}
