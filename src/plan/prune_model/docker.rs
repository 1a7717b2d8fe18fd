//! `docker system prune -a -f [--volumes]` (docker/cli
//! `cli/command/system/prune.go`) asks the engine to prune, in this order:
//! containers, networks, volumes (with `--volumes`), images (`all`), build
//! cache (`all`). Each later step sees the node the earlier left: once the
//! stopped containers are gone, only running ones hold anything.
//!
//! The image prune it ends with is modelled on each of Docker's image
//! stores.

use std::collections::HashMap;

use super::{Verdict, stopped};
use crate::inventory::refs::{fullest as full_name, is_digest, repository as repository_of};
use crate::inventory::uses::{ContainerUse, ImageUses, VolumeAndNetworkUses, image_depths};
use crate::inventory::{ApiVersion, ContainerState, ImageStore, Inventory, Kind};

/// The networks `docker network prune` never removes (moby
/// `daemon/prune.go`, `localNetworksPrune`: `runconfig.IsPreDefinedNetwork`).
const PREDEFINED_NETWORKS: [&str; 3] = ["bridge", "host", "none"];

/// The verdict of `docker system prune -a -f` (with `--volumes` when
/// `volumes`) on every object of `inv`, by kind and id.
#[must_use]
pub fn docker_system_prune(inv: &Inventory, volumes: bool) -> HashMap<(Kind, String), Verdict> {
    let mut verdicts = HashMap::new();
    // Containers (moby `daemon/prune.go`, `ContainersPrune`): every
    // container that is not running goes (`State.IsRunning`).
    let mut left = Vec::new();
    for c in &inv.containers {
        let verdict = if stopped(c.state) {
            Verdict::removes(format!("{} container", c.state.as_str()))
        } else {
            left.push(c);
            Verdict::keeps(match c.state {
                ContainerState::Unknown => "container in a state the engine did not name".into(),
                state => format!("{} container", state.as_str()),
            })
        };
        verdicts.insert((Kind::Container, c.id.clone()), verdict);
    }
    // Who uses each volume and network: the one index of
    // `inventory::uses`, asked for the first container left.
    let uses = VolumeAndNetworkUses::new(&inv.containers, &inv.volumes, &inv.networks);
    let left_ids: std::collections::HashSet<&str> = left.iter().map(|c| c.id.as_str()).collect();
    let left_container =
        |n: usize| Some(&inv.containers[n]).filter(|c| left_ids.contains(c.id.as_str()));
    // Networks (`localNetworksPrune`): predefined ones stay, and those with
    // an endpoint, which only a running container has.
    for (m, n) in inv.networks.iter().enumerate() {
        let verdict = if PREDEFINED_NETWORKS.contains(&n.name.as_str()) {
            Verdict::keeps("predefined network")
        } else if let Some(c) = uses.of_network(m).find_map(left_container) {
            Verdict::keeps(format!("used by running container {}", c.display_name()))
        } else {
            Verdict::removes("network with no running container")
        };
        verdicts.insert((Kind::Network, n.id.clone()), verdict);
    }
    // Volumes (moby `volume/service/service.go`, `Prune`): only with
    // `--volumes`; those a container left mounts stay. From API 1.42 the
    // CLI's prune removes anonymous volumes only unless `--all` (moby
    // `api/server/router/volume/volume_routes.go`, `postVolumesPrune`:
    // before 1.42 the `all` filter is implied); 1.41 removes named ones too.
    let named_too = inv.api_version.is_none_or(|v| v < ApiVersion::new(1, 42));
    for (m, v) in inv.volumes.iter().enumerate() {
        let verdict = if !volumes {
            Verdict::keeps("volumes are pruned only with --volumes")
        } else if let Some(c) = uses.of_volume(m).find_map(left_container) {
            Verdict::keeps(format!("mounted by running container {}", c.display_name()))
        } else if !v.anonymous && !named_too {
            Verdict::keeps("named volume: from API 1.42 only anonymous volumes are pruned")
        } else {
            Verdict::removes("volume no running container mounts")
        };
        verdicts.insert((Kind::Volume, v.name.clone()), verdict);
    }
    // Images: `docker_images_prune`, on the containers left.
    verdicts.extend(docker_images_prune(inv, |c| {
        left_ids.contains(c.id.as_str())
    }));
    // Build cache (`docker builder prune -a`: BuildKit's `Prune` with
    // `all`): every record not in use by a build.
    for b in &inv.build_cache {
        let verdict = if b.in_use {
            Verdict::keeps("in use by a running build")
        } else {
            Verdict::removes("build cache record not in use")
        };
        verdicts.insert((Kind::BuildCache, b.id.clone()), verdict);
    }
    verdicts
}

/// The verdict of `docker image prune -a` on every image of `inv`, the
/// containers for which `left` holds still existing (moby
/// `daemon/images/image_prune.go`, `ImagesPrune` with `dangling=false`,
/// on the graph driver store). It takes every top image: an untagged image
/// with children is not one, and goes only as the dangling parent of a
/// deleted child (`imageDeleteHelper` with `prune`). A tagged image is
/// deleted name by name (`ImageDelete` of each reference, never forced):
///
/// - an image a container left uses loses each name while another of
///   another repository is left (`isSingleReference`), then the last one
///   is refused: its extra names go, the image stays;
/// - an image other images are built on loses every name and stays (the
///   soft conflict, dependent child images, is ignored after an untag);
/// - any other loses every name and goes, with its dangling parents.
///
/// Who uses an image is the one definition (`inventory::uses`). The order
/// in which dockerd visits images (a map's) changes nothing of this.
fn docker_images_prune(
    inv: &Inventory,
    left: impl Fn(&crate::inventory::Container) -> bool,
) -> Vec<((Kind, String), Verdict)> {
    if inv.image_store == ImageStore::Containerd {
        return containerd_store_images_prune(inv, left);
    }
    let uses = ImageUses::new(&inv.containers, &inv.images);
    let depths = image_depths(&inv.images);
    let mut order: Vec<usize> = (0..inv.images.len()).collect();
    order.sort_by(|&a, &b| (depths[a], &inv.images[a].id).cmp(&(depths[b], &inv.images[b].id)));
    // Children first: whether a parent goes depends on its children.
    let mut removed = vec![false; inv.images.len()];
    let mut verdicts: Vec<Option<Verdict>> = vec![None; inv.images.len()];
    for n in order {
        let i = &inv.images[n];
        let names: Vec<String> = i.tags.iter().chain(&i.digests).cloned().collect();
        let holder = uses
            .containers_of(n)
            .map(|(c, _)| uses.container(c))
            .find(|c| left(c));
        let children = uses.children_of(n);
        let child_left = children.iter().find(|&&c| !removed[c]).copied();
        let verdict = if let Some(holder) = holder {
            Verdict::keeps(format!(
                "used by running container {}",
                holder.display_name()
            ))
            .untagging(untagged_while_in_use(&names))
        } else if let Some(child) = child_left {
            let child = inv.images[child].display_name();
            if names.is_empty() {
                Verdict::keeps(format!("untagged parent of image {child}, which stays"))
            } else {
                Verdict::keeps(format!(
                    "image {child} is built on it and stays: only its names go"
                ))
                .untagging(names)
            }
        } else {
            removed[n] = true;
            if names.is_empty() && !children.is_empty() {
                Verdict::removes("dangling parent of a deleted image")
            } else {
                Verdict::removes("image no running container uses")
            }
        };
        verdicts[n] = Some(verdict);
    }
    inv.images
        .iter()
        .zip(verdicts)
        .filter_map(|(i, v)| Some(((Kind::Image, i.id.clone()), v?)))
        .collect()
}

/// The verdict of `docker image prune -a` on Docker's containerd image
/// store (moby v29 `daemon/containerd/image_prune.go`, `pruneUnused`;
/// measured on 29.7.2 in `tests/integration/docker28.rs`): it deletes every
/// image name no container left was created with. Of an image a container
/// left was made from, the name that container's config names stays; one
/// made by id keeps the last of its names in the order of their full
/// spelling; every other name goes, with the digest references of a
/// repository left without a tag. Parents do not count: an image no
/// container left uses goes whole, children or not.
///
/// Not modelled: a container whose config names a name untagged since
/// (the command then deletes the image it runs, measured); the inventory
/// reads the name the engine lists now, which is then the image's id.
fn containerd_store_images_prune(
    inv: &Inventory,
    left: impl Fn(&crate::inventory::Container) -> bool,
) -> Vec<((Kind, String), Verdict)> {
    let uses = ImageUses::new(&inv.containers, &inv.images);
    inv.images
        .iter()
        .enumerate()
        .map(|(m, i)| {
            let holders: Vec<&crate::inventory::Container> = uses
                .containers_of(m)
                .filter(|(_, how)| *how == ContainerUse::MadeFrom)
                .map(|(n, _)| uses.container(n))
                .filter(|c| left(c))
                .collect();
            let verdict = if let Some(first) = holders.first() {
                // The names the containers were made with, else (made by
                // id) the last name in full spelling.
                let mut kept: Vec<&String> = holders
                    .iter()
                    .filter_map(|c| {
                        let given = full_name(&c.image_ref);
                        i.tags.iter().find(|t| full_name(t) == given)
                    })
                    .collect();
                if kept.len() < holders.len() {
                    kept.extend(i.tags.iter().max_by_key(|t| full_name(t)));
                }
                let kept_repositories: Vec<String> = kept
                    .iter()
                    .map(|t| repository_of(&full_name(t)).to_owned())
                    .collect();
                let untags: Vec<String> = i
                    .tags
                    .iter()
                    .filter(|t| !kept.contains(t))
                    .chain(i.digests.iter().filter(|d| {
                        !kept_repositories
                            .iter()
                            .any(|r| r == repository_of(&full_name(d)))
                    }))
                    .cloned()
                    .collect();
                Verdict::keeps(format!(
                    "used by running container {}: only the names containers were made with stay",
                    first.display_name()
                ))
                .untagging(untags)
            } else {
                Verdict::removes("image no running container uses (parents do not count)")
            };
            ((Kind::Image, i.id.clone()), verdict)
        })
        .collect()
}

/// The names `docker image prune -a` takes off an image a container still
/// uses, in the order it tries them (moby `reference/store.go`,
/// `References`: lexical over full names), as listed. Each is untagged
/// unless the names left are a single reference (one tag, and digests of
/// its repository only: `isSingleReference`), which a used image keeps;
/// untagging a repository's last tag takes its digests too.
pub(super) fn untagged_while_in_use(names: &[String]) -> Vec<String> {
    let mut left: Vec<(String, &String)> = names.iter().map(|n| (full_name(n), n)).collect();
    left.sort();
    let tried: Vec<String> = left.iter().map(|(full, _)| full.clone()).collect();
    let mut untagged = Vec::new();
    for full in tried {
        let Some(at) = left.iter().position(|(f, _)| *f == full) else {
            continue;
        };
        if is_single_reference(&left) {
            continue;
        }
        let (name, listed) = left.remove(at);
        untagged.push(listed.clone());
        let repo = repository_of(&name);
        if !is_digest(&name)
            && !left
                .iter()
                .any(|(f, _)| !is_digest(f) && repository_of(f) == repo)
        {
            left.retain(|(f, listed)| {
                let same = is_digest(f) && repository_of(f) == repo;
                if same {
                    untagged.push((*listed).clone());
                }
                !same
            });
        }
    }
    untagged
}

/// moby's `isSingleReference`: at most one tag, and every digest
/// reference of the tag's repository (or, without a tag, of one).
fn is_single_reference(names: &[(String, &String)]) -> bool {
    if names.len() <= 1 {
        return names.len() == 1;
    }
    let mut tag: Option<&str> = None;
    let mut repositories: Vec<&str> = Vec::new();
    for (name, _) in names {
        if is_digest(name) {
            repositories.push(repository_of(name));
        } else if tag.is_none() {
            repositories.push(repository_of(name));
            tag = Some(name);
        } else {
            return false;
        }
    }
    let single = repository_of(tag.unwrap_or(&names[0].0));
    repositories.sort_unstable();
    repositories.dedup();
    repositories == [single]
}
