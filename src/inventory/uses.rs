//! Who uses what: the one definition of "in use" (issue 22).
//!
//! The planner, every adapter's re-check and every what-if model ask the
//! questions below and nothing else, so that no part of the code knows a
//! kind of use another does not. An image is used by
//!
//! - a container made from it: by the image's id, or by a reference that,
//!   in any spelling, is one of the image's tags or digest references;
//! - a container that mounts it as an image volume (CRI `Mount.image`,
//!   KEP-4639), named the same ways: the running pod survives the image's
//!   removal, but its container's next start fails;
//! - an image built on it, where the engine keeps that chain
//!   ([`Image::parent`]).
//!
//! A pod sandbox's container is a container like the others: the image it
//! was made from is the node's sandbox image. What the runtime pins is the
//! image's own fact ([`Image::pinned`]), not a use.
//!
//! Volumes are used by the containers that mount them, networks by the
//! containers attached to them (by id or name).

use std::borrow::Cow;
use std::collections::HashMap;

use super::refs::other_forms;
use super::{Container, Image};

/// How a container uses an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContainerUse {
    /// It was made from the image.
    MadeFrom,
    /// It mounts the image as a volume.
    Mounts,
}

impl ContainerUse {
    /// As details say it: "used by", "mounted as a volume by".
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MadeFrom => "used by",
            Self::Mounts => "mounted as a volume by",
        }
    }
}

/// One user of an image.
#[derive(Debug, Clone, Copy)]
pub enum ImageUser<'a> {
    /// A container, made from it or mounting it.
    Container(&'a Container, ContainerUse),
    /// An image built on it.
    Child(&'a Image),
}

/// The keys a container names images by, each with how it uses that
/// image: the id it was made from, every spelling of the reference it was
/// made from, and every spelling of each image it mounts. Sorted, each key
/// and use once.
#[must_use]
pub fn container_image_keys(c: &Container) -> Vec<(Cow<'_, str>, ContainerUse)> {
    let mut keys: Vec<(Cow<'_, str>, ContainerUse)> = Vec::new();
    if !c.image_id.is_empty() {
        keys.push((Cow::Borrowed(c.image_id.as_str()), ContainerUse::MadeFrom));
    }
    for (name, how) in std::iter::once((&c.image_ref, ContainerUse::MadeFrom))
        .chain(c.image_mounts.iter().map(|m| (m, ContainerUse::Mounts)))
    {
        if name.is_empty() {
            continue;
        }
        keys.push((Cow::Borrowed(name.as_str()), how));
        keys.extend(
            other_forms(name)
                .into_iter()
                .filter(|f| f != name)
                .map(|f| (Cow::Owned(f), how)),
        );
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The keys an image is known by: its id and every reference it has, as
/// listed. A container matches when one of its
/// [`container_image_keys`] is one of these.
pub fn image_keys(i: &Image) -> impl Iterator<Item = &str> {
    std::iter::once(i.id.as_str())
        .chain(i.tags.iter().map(String::as_str))
        .chain(i.digests.iter().map(String::as_str))
}

/// How `c` uses `i`, if it does: made from it before mounting it. The
/// definition [`ImageUses`] applies at scale.
#[must_use]
pub fn container_uses_image(c: &Container, i: &Image) -> Option<ContainerUse> {
    let keys = container_image_keys(c);
    let mut found: Option<ContainerUse> = None;
    for key in image_keys(i) {
        for (k, how) in &keys {
            if k.as_ref() == key {
                found = Some(found.map_or(*how, |f| f.min(*how)));
            }
        }
    }
    found
}

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Each container's place in id order, ties by index: users sorted by it
/// come in container id order without reading an id again. On a large
/// node every such read is a miss in the caches (issue 24).
fn id_ranks(containers: &[Container]) -> Vec<usize> {
    // Adapters list containers by id: each one's place is then its index.
    if containers.is_sorted_by(|a, b| a.id <= b.id) {
        return (0..containers.len()).collect();
    }
    let mut order: Vec<usize> = (0..containers.len()).collect();
    // Stable: equal ids (odd engine data) keep their index order.
    order.sort_by(|&a, &b| containers[a].id.cmp(&containers[b].id));
    let mut ranks = vec![0; containers.len()];
    for (place, n) in order.into_iter().enumerate() {
        ranks[n] = place;
    }
    ranks
}

/// Every image's users in one inventory, gathered once so that asking
/// about an image costs a look, not a scan of every container: the
/// planner decides 20,000 images over 100,000 containers this way.
pub struct ImageUses<'a> {
    /// For each image (by index into `images`), the containers that use
    /// it, each once with how (made from it before mounting it), as
    /// indexes into `containers`, in container id order.
    users: Vec<Vec<(usize, ContainerUse)>>,
    /// Images by the id of their parent (indexes into `images`).
    children: Map<&'a str, Vec<usize>>,
    containers: &'a [Container],
    images: &'a [Image],
}

impl<'a> ImageUses<'a> {
    /// Gathers the uses of `images` by `containers` and by each other.
    ///
    /// The images are indexed by their keys and the containers read once,
    /// in order, each asking that index for its own keys: the index is
    /// the smaller side and stays in the caches, and no container is read
    /// twice (on a large node, each read out of order is a miss).
    #[must_use]
    pub fn new(containers: &'a [Container], images: &'a [Image]) -> Self {
        let mut by_key: Map<&'a str, Vec<usize>> = Map::default();
        for (m, i) in images.iter().enumerate() {
            for key in image_keys(i) {
                by_key.entry(key).or_default().push(m);
            }
        }
        let mut users: Vec<Vec<(usize, ContainerUse)>> = vec![Vec::new(); images.len()];
        for (n, c) in containers.iter().enumerate() {
            for (key, how) in container_image_keys(c) {
                for &m in by_key.get(key.as_ref()).into_iter().flatten() {
                    users[m].push((n, how));
                }
            }
        }
        let ranks = id_ranks(containers);
        for found in &mut users {
            // By id, then made from before mounting: the first of each
            // container stays.
            found.sort_unstable_by_key(|&(n, how)| (ranks[n], how));
            found.dedup_by_key(|u| u.0);
        }
        let mut children: Map<&'a str, Vec<usize>> = Map::default();
        for (n, i) in images.iter().enumerate() {
            if let Some(parent) = i.parent.as_deref().filter(|p| !p.is_empty() && *p != i.id) {
                children.entry(parent).or_default().push(n);
            }
        }
        Self {
            users,
            children,
            containers,
            images,
        }
    }

    /// The containers that use the image at index `image` of those
    /// gathered, each once with how (made from it before mounting it), as
    /// indexes into the containers, in container id order.
    #[must_use]
    pub fn containers_of(&self, image: usize) -> &[(usize, ContainerUse)] {
        &self.users[image]
    }

    /// The container at index `n` of those indexed.
    #[must_use]
    pub fn container(&self, n: usize) -> &'a Container {
        &self.containers[n]
    }

    /// The images built directly on the image at index `image`, as
    /// indexes into the images, in id order.
    #[must_use]
    pub fn children_of(&self, image: usize) -> Vec<usize> {
        let mut found = self
            .children
            .get(self.images[image].id.as_str())
            .cloned()
            .unwrap_or_default();
        found.sort_by(|&a, &b| self.images[a].id.cmp(&self.images[b].id).then(a.cmp(&b)));
        found
    }

    /// Every user of the image at index `image`: its containers (in id
    /// order), then its children (in id order).
    #[must_use]
    pub fn users_of(&self, image: usize) -> Vec<ImageUser<'a>> {
        self.containers_of(image)
            .iter()
            .map(|&(n, how)| ImageUser::Container(&self.containers[n], how))
            .chain(
                self.children_of(image)
                    .into_iter()
                    .map(|n| ImageUser::Child(&self.images[n])),
            )
            .collect()
    }
}

/// The containers that use each volume (by name) and network (by id or
/// name), indexed once: deciding one costs a lookup, not a scan of every
/// container.
pub struct VolumeAndNetworkUses<'a> {
    volumes: Map<&'a str, Vec<usize>>,
    networks: Map<&'a str, Vec<usize>>,
    /// Each container's place in id order.
    ranks: Vec<usize>,
}

impl<'a> VolumeAndNetworkUses<'a> {
    #[must_use]
    pub fn new(containers: &'a [Container]) -> Self {
        let mut index = Self {
            volumes: Map::default(),
            networks: Map::default(),
            ranks: id_ranks(containers),
        };
        for (n, c) in containers.iter().enumerate() {
            for v in &c.volumes {
                index.volumes.entry(v).or_default().push(n);
            }
            for k in &c.networks {
                index.networks.entry(k).or_default().push(n);
            }
        }
        index
    }

    /// The containers (indexes) that mount `volume`, in container id order.
    #[must_use]
    pub fn of_volume(&self, volume: &super::Volume) -> Vec<usize> {
        self.sorted(self.volumes.get(volume.name.as_str()).into_iter().flatten())
    }

    /// The containers (indexes) attached to `network`, by its id or its
    /// name, in container id order.
    #[must_use]
    pub fn of_network(&self, network: &super::Network) -> Vec<usize> {
        self.sorted(
            [network.id.as_str(), network.name.as_str()]
                .into_iter()
                .filter_map(|k| self.networks.get(k))
                .flatten(),
        )
    }

    fn sorted<'i>(&self, found: impl Iterator<Item = &'i usize>) -> Vec<usize> {
        let mut found: Vec<usize> = found.copied().collect();
        found.sort_unstable_by_key(|&n| self.ranks[n]);
        found.dedup();
        found
    }
}

/// For each image, its depth in the parent chains: 0 for an image no
/// other image of `images` is built on, one more than its deepest child
/// otherwise. Removing images in order of rising depth removes every child
/// before its parent.
#[must_use]
pub fn image_depths(images: &[Image]) -> Vec<u32> {
    let index: Map<&str, usize> = images
        .iter()
        .enumerate()
        .map(|(n, i)| (i.id.as_str(), n))
        .collect();
    depths(
        images.len(),
        |n| images[n].id.as_str(),
        |n| {
            images[n]
                .parent
                .as_deref()
                .and_then(|p| index.get(p).copied())
                .into_iter()
                .collect()
        },
    )
}

/// The same for build cache records, each with the ids of its parents:
/// `BuildKit` refuses to prune a record while a child is left.
#[must_use]
pub fn build_cache_depths(records: &[super::BuildCacheEntry]) -> Vec<u32> {
    let index: Map<&str, usize> = records
        .iter()
        .enumerate()
        .map(|(n, r)| (r.id.as_str(), n))
        .collect();
    depths(
        records.len(),
        |n| records[n].id.as_str(),
        |n| {
            records[n]
                .parents
                .iter()
                .filter_map(|p| index.get(p.as_str()).copied())
                .collect()
        },
    )
}

/// Passes over chains before [`depths`] gives up: far more than any build
/// has steps. A chain that loops (engine data gone wrong) or is longer
/// leaves some parent no deeper than a child: the two then go in one wave,
/// and the engine refuses the parent (skipped, in use), never worse.
const MAX_CHAIN: usize = 1024;

/// Depths of `count` objects whose parents `parents_of` gives: each parent
/// lifted above its children until nothing changes. Objects are visited
/// in `id` order, so that even a loop gets the same depths whatever order
/// the engine listed them in.
fn depths<'a>(
    count: usize,
    id: impl Fn(usize) -> &'a str,
    parents_of: impl Fn(usize) -> Vec<usize>,
) -> Vec<u32> {
    let by_id = |a: &usize, b: &usize| id(*a).cmp(id(*b)).then(a.cmp(b));
    let parents: Vec<Vec<usize>> = (0..count)
        .map(|n| {
            let mut of = parents_of(n);
            of.sort_by(by_id);
            of
        })
        .collect();
    let mut depth = vec![0_u32; count];
    if parents.iter().all(Vec::is_empty) {
        return depth;
    }
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by(by_id);
    for _ in 0..MAX_CHAIN.min(count) {
        let mut changed = false;
        for &n in &order {
            for &parent in &parents[n] {
                if parent != n && depth[parent] <= depth[n] {
                    depth[parent] = depth[n] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    depth
}
