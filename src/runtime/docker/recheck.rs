//! Re-checks, a batch of one kind at a time: the objects as they are now,
//! with what uses them, from the watch brought up to date and an inspect of
//! whatever it does not know.

use std::collections::{HashMap, HashSet};

use bollard::models::ImageSummary;
use futures_util::future::try_join_all;

use super::convert::{LABEL_DOCKER_TYPE, TYPE_SANDBOX, volume_from_docker};
use super::{DockerRuntime, RUNTIME, status_code};
use crate::inventory::pods::pod_is_live;
use crate::inventory::{Image, Inventory, Kind, Volume, sandboxes_from_containers};
use crate::runtime::error::RuntimeError;

impl DockerRuntime {
    /// A batch of `kind`, re-checked: see `Engine::recheck`.
    pub(super) async fn recheck_batch(
        &self,
        kind: Kind,
        ids: &[&str],
    ) -> Result<Inventory, RuntimeError> {
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
                // An image no event has named since the snapshot keeps the
                // snapshot's size and parent, but its names and last tag
                // time are read again: a delete by id takes the image's tag
                // with it, and a tag event appended to dockerd's history
                // after a read took it is read by no later read (see
                // `Watch::forget`). Any other image is read now in full.
                let watch = self.synced_watch().await?;
                let (known, unknown) = split_known(ids, |id| watch.unchanged_image(id));
                let mut images = self.names_read_again(known).await?;
                images.extend(self.images_read(&unknown).await?);
                fresh.images = images;
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
            known_or_read(ids, |id| watch.complete(id), |id| self.container(id)).await?;
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
        drop(watch);
        // The watch learns of a new sandbox from its events, and an event
        // dockerd appends to its history after a read took it is read by
        // no later read (see `Watch::forget`). A pod container whose pod
        // the watch finds dead would go on that word alone: the engine's
        // own list of sandboxes decides, one call for the batch.
        let dead_pod = fresh.containers.iter().any(|c| {
            c.pod
                .as_ref()
                .is_some_and(|p| !p.is_sandbox && !pod_is_live(p, &fresh.sandboxes))
        });
        if dead_pod {
            let sandbox_label = format!("{LABEL_DOCKER_TYPE}={TYPE_SANDBOX}");
            let filters = HashMap::from([("label", vec![sandbox_label.as_str()])]);
            let listed = sandboxes_from_containers(&self.containers(&filters, false).await?);
            for sandbox in listed.into_iter().filter(|s| {
                sandbox_ids.contains(s.id.as_str())
                    || s.pod_uid.as_deref().is_some_and(|u| pod_uids.contains(u))
            }) {
                fresh.sandboxes.retain(|s| s.id != sandbox.id);
                fresh.sandboxes.push(sandbox);
            }
            fresh.sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        }
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

    /// The images built directly on one of `parents`, listed and read now:
    /// after an image event the watch no longer knows every image.
    async fn children_listed(&self, parents: &HashSet<&str>) -> Result<Vec<Image>, RuntimeError> {
        let summaries = self.list_images(false).await?;
        let mut children = Vec::new();
        for summary in summaries
            .iter()
            .filter(|s| parents.contains(s.parent_id.as_str()))
        {
            children.extend(self.image(&summary.id, Some(summary)).await?);
        }
        Ok(children)
    }

    /// Images `ids` as they are now (`DockerRuntime::image`), against one
    /// listing of every image (`all`: an image may have become a hidden
    /// parent since).
    async fn images_read(&self, ids: &[&str]) -> Result<Vec<Image>, RuntimeError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let listed: HashMap<String, ImageSummary> = self
            .list_images(true)
            .await?
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let read = try_join_all(ids.iter().map(|&id| self.image(id, listed.get(id)))).await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// `images` as the snapshot read them, with their names and last tag
    /// time as an inspect reads them now; those gone since are left out.
    async fn names_read_again(&self, images: Vec<Image>) -> Result<Vec<Image>, RuntimeError> {
        let read = try_join_all(images.into_iter().map(|mut image| async move {
            let now = self.image(&image.id, None).await?;
            Ok::<_, RuntimeError>(now.map(|now| {
                image.tags = now.tags;
                image.digests = now.digests;
                image.last_tagged = now.last_tagged;
                image
            }))
        }))
        .await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// One volume by name; `None` when it does not exist.
    async fn volume(&self, name: &str) -> Result<Option<Volume>, RuntimeError> {
        match self.docker.inspect_volume(name).await {
            Ok(volume) => Ok(Some(volume_from_docker(volume))),
            Err(e) if status_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(Self::call_error("inspect volume")(e)),
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
    let (mut found, unknown) = split_known(ids, known);
    let read = try_join_all(unknown.into_iter().map(read)).await?;
    found.extend(read.into_iter().flatten());
    Ok(found)
}

/// `ids` parted into the objects `known` has, and the ids it does not.
fn split_known<'a, 'id, T: Clone + 'a>(
    ids: &[&'id str],
    known: impl Fn(&str) -> Option<&'a T>,
) -> (Vec<T>, Vec<&'id str>) {
    let mut found = Vec::with_capacity(ids.len());
    let mut unknown = Vec::new();
    for id in ids {
        match known(id) {
            Some(object) => found.push(object.clone()),
            None => unknown.push(*id),
        }
    }
    (found, unknown)
}
