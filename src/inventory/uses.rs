//! Who uses what: the one definition of "in use".
//!
//! The planner, every adapter's re-check and every what-if model ask the
//! questions below and nothing else, so that no part of the code knows a
//! kind of use another does not. An image is used by
//!
//! - a container made from it: by the image's id, or by a reference that
//!   names the same image as one of the image's tags or digest references,
//!   in any spelling (`nginx:1`, `library/nginx:1` and
//!   `docker.io/library/nginx:1` are one name: [`canonical`]);
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

use std::collections::HashMap;

use super::refs::canonical;
use super::{Container, Image, Network, Volume};

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
/// image: the id it was made from, the reference it was made from and each
/// image it mounts, each by its canonical name ([`canonical`]: Docker
/// Hub's implicit prefixes set aside, so that every spelling of a
/// reference is one key). A key may come twice. An image is used when one
/// of these is one of its [`image_keys`].
pub fn container_image_keys(c: &Container) -> impl Iterator<Item = (&str, ContainerUse)> {
    [
        (c.image_id.as_str(), ContainerUse::MadeFrom),
        (c.image_ref.as_str(), ContainerUse::MadeFrom),
    ]
    .into_iter()
    .chain(
        c.image_mounts
            .iter()
            .map(|m| (m.as_str(), ContainerUse::Mounts)),
    )
    .filter(|(name, _)| !name.is_empty())
    .map(|(name, how)| (canonical(name), how))
}

/// The keys an image is known by: its id and every reference it has, as
/// listed, each by its canonical name. A container matches when one of
/// its [`container_image_keys`] is one of these.
pub fn image_keys(i: &Image) -> impl Iterator<Item = &str> {
    std::iter::once(i.id.as_str())
        .chain(i.tags.iter().map(String::as_str))
        .chain(i.digests.iter().map(String::as_str))
        .map(canonical)
}

/// How `c` uses `i`, if it does: made from it before mounting it. The
/// definition [`ImageUses`] applies at scale.
#[must_use]
pub fn container_uses_image(c: &Container, i: &Image) -> Option<ContainerUse> {
    let mut found: Option<ContainerUse> = None;
    for key in image_keys(i) {
        for (k, how) in container_image_keys(c) {
            if k == key {
                found = Some(found.map_or(how, |f| f.min(how)));
            }
        }
    }
    found
}

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// An index into the inventory as the indexes below keep it. A node has
/// far fewer than 2^32 objects; one that had more would be refused here
/// rather than matched wrong.
fn index32(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 objects of a kind")
}

/// Each container's place in id order, ties by index: users sorted by it
/// come in container id order without reading an id again. On a large
/// node every such read is a miss in the caches, so the
/// planner finds it once ([`IdOrder::of`]) for all its indexes.
pub struct IdOrder {
    /// Each container's place; `None` when that is its index, as when an
    /// adapter listed them by id (all do).
    places: Option<Vec<usize>>,
}

impl IdOrder {
    #[must_use]
    pub fn of(containers: &[Container]) -> Self {
        if containers.is_sorted_by(|a, b| a.id <= b.id) {
            return Self { places: None };
        }
        let mut order: Vec<usize> = (0..containers.len()).collect();
        // Stable: equal ids (odd engine data) keep their index order.
        order.sort_by(|&a, &b| containers[a].id.cmp(&containers[b].id));
        let mut places = vec![0; containers.len()];
        for (place, n) in order.into_iter().enumerate() {
            places[n] = place;
        }
        Self {
            places: Some(places),
        }
    }

    /// The place of the container at index `n`.
    fn place(&self, n: usize) -> usize {
        self.places.as_ref().map_or(n, |p| p[n])
    }

    /// Whether every place is its index: the containers are in id order.
    #[must_use]
    pub fn is_identity(&self) -> bool {
        self.places.is_none()
    }
}

/// Lists of indexes, one per slot, held in one array (a slot's list is a
/// range of it): built from the pairs in one pass each way, with no
/// allocation per slot, and read in order.
struct Lists<T> {
    /// Where each slot's list starts in `items`; one more than the slots,
    /// the last being `items.len()`.
    starts: Vec<usize>,
    items: Vec<T>,
}

impl<T: Copy> Lists<T> {
    /// `slots` lists of the `pairs`' items, each in the pairs' order.
    fn of(slots: usize, pairs: &[(u32, T)]) -> Self {
        let mut starts = vec![0_usize; slots + 1];
        for &(slot, _) in pairs {
            starts[slot as usize + 1] += 1;
        }
        for s in 0..slots {
            starts[s + 1] += starts[s];
        }
        let Some(&(_, fill)) = pairs.first() else {
            return Self {
                starts,
                items: Vec::new(),
            };
        };
        let mut next = starts.clone();
        let mut items = vec![fill; pairs.len()];
        for &(slot, item) in pairs {
            let slot = slot as usize;
            items[next[slot]] = item;
            next[slot] += 1;
        }
        Self { starts, items }
    }

    fn get(&self, slot: usize) -> &[T] {
        &self.items[self.starts[slot]..self.starts[slot + 1]]
    }

    /// Each list in container id order, each container once: `container`
    /// names an item's container. The pairs came in container index order,
    /// which is id order unless `order` says otherwise; the sort is stable,
    /// so of one container's items the first stays.
    fn in_id_order(mut self, order: &IdOrder, container: impl Fn(&T) -> u32) -> Self {
        let mut kept = 0;
        let mut start = 0;
        for slot in 0..self.starts.len() - 1 {
            let end = self.starts[slot + 1];
            if !order.is_identity() {
                self.items[start..end].sort_by_key(|item| order.place(container(item) as usize));
            }
            let first = kept;
            for i in start..end {
                if kept == first || container(&self.items[kept - 1]) != container(&self.items[i]) {
                    self.items[kept] = self.items[i];
                    kept += 1;
                }
            }
            self.starts[slot] = first;
            start = end;
        }
        let slots = self.starts.len() - 1;
        self.starts[slots] = kept;
        self.items.truncate(kept);
        self
    }
}

/// Every image's users in one inventory, gathered once so that asking
/// about an image costs a look, not a scan of every container: the
/// planner decides 20,000 images over 100,000 containers this way.
pub struct ImageUses<'a> {
    /// For each image (by index into `images`), the containers that use
    /// it, each once with how (made from it before mounting it), as
    /// indexes into `containers`, in container id order.
    users: Lists<(u32, ContainerUse)>,
    /// Images by the id of their parent (indexes into `images`).
    children: Map<&'a str, Vec<usize>>,
    containers: &'a [Container],
    images: &'a [Image],
}

impl<'a> ImageUses<'a> {
    /// Gathers the uses of `images` by `containers` and by each other.
    #[must_use]
    pub fn new(containers: &'a [Container], images: &'a [Image]) -> Self {
        Self::in_order(containers, images, &IdOrder::of(containers))
    }

    /// The same, with the containers' id order already found.
    ///
    /// The images are indexed by their keys and the containers read once,
    /// in order, each asking that index for its own keys: the index is
    /// the smaller side and stays in the caches, and no container is read
    /// twice (on a large node, each read out of order is a miss).
    #[must_use]
    pub fn in_order(containers: &'a [Container], images: &'a [Image], order: &IdOrder) -> Self {
        let count = images
            .iter()
            .map(|i| 1 + i.tags.len() + i.digests.len())
            .sum();
        let mut keys = Slots::with_capacity(count);
        for (m, i) in images.iter().enumerate() {
            for key in image_keys(i) {
                keys.add(key, m);
            }
        }
        // Indexes as u32: the lists are read and written out of order, and
        // half the bytes is half the misses on a large node.
        let mut pairs: Vec<(u32, (u32, ContainerUse))> = Vec::with_capacity(containers.len());
        for (n, c) in containers.iter().enumerate() {
            for (key, how) in container_image_keys(c) {
                keys.each(key, |m| pairs.push((index32(m), (index32(n), how))));
            }
        }
        // A container's made-from keys come before its mounts: of each
        // container, its first use (made from it before mounting it) stays.
        let users = Lists::of(images.len(), &pairs).in_id_order(order, |&(n, _)| n);
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
    pub fn containers_of(
        &self,
        image: usize,
    ) -> impl ExactSizeIterator<Item = (usize, ContainerUse)> + Clone + '_ {
        self.users
            .get(image)
            .iter()
            .map(|&(n, how)| (n as usize, how))
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
            .map(|(n, how)| ImageUser::Container(&self.containers[n], how))
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
pub struct VolumeAndNetworkUses {
    /// For each volume (by index), the containers that mount it.
    volumes: Lists<u32>,
    /// For each network (by index), the containers attached to it.
    networks: Lists<u32>,
}

impl VolumeAndNetworkUses {
    #[must_use]
    pub fn new(containers: &[Container], volumes: &[Volume], networks: &[Network]) -> Self {
        Self::in_order(containers, volumes, networks, &IdOrder::of(containers))
    }

    /// The same, with the containers' id order already found. Like
    /// [`ImageUses::in_order`], the volumes and networks (the smaller
    /// side) are indexed and each container read once, in order.
    #[must_use]
    pub fn in_order(
        containers: &[Container],
        volumes: &[Volume],
        networks: &[Network],
        order: &IdOrder,
    ) -> Self {
        let mut volume_slots = Slots::with_capacity(volumes.len());
        for (m, v) in volumes.iter().enumerate() {
            volume_slots.add(&v.name, m);
        }
        let mut network_slots = Slots::with_capacity(networks.len() * 2);
        for (m, n) in networks.iter().enumerate() {
            network_slots.add(&n.id, m);
            if n.name != n.id {
                network_slots.add(&n.name, m);
            }
        }
        let mut mounts = Vec::new();
        let mut attached = Vec::new();
        for (n, c) in containers.iter().enumerate() {
            for v in &c.volumes {
                volume_slots.each(v, |slot| mounts.push((index32(slot), index32(n))));
            }
            for k in &c.networks {
                network_slots.each(k, |slot| attached.push((index32(slot), index32(n))));
            }
        }
        Self {
            volumes: Lists::of(volumes.len(), &mounts).in_id_order(order, |&n| n),
            networks: Lists::of(networks.len(), &attached).in_id_order(order, |&n| n),
        }
    }

    /// The containers (indexes) that mount the volume at index `volume`,
    /// in container id order.
    pub fn of_volume(&self, volume: usize) -> impl Iterator<Item = usize> + '_ {
        self.volumes.get(volume).iter().map(|&n| n as usize)
    }

    /// The containers (indexes) attached to the network at index
    /// `network`, by its id or its name, in container id order.
    pub fn of_network(&self, network: usize) -> impl Iterator<Item = usize> + '_ {
        self.networks.get(network).iter().map(|&n| n as usize)
    }
}

/// Objects by the names they are known by (an image's keys, a volume's
/// name, a network's id and name), each name to every object it names.
struct Slots<'a> {
    /// Each name to its first entry of `named`.
    by_name: Map<&'a str, usize>,
    /// (object, next entry of the same name).
    named: Vec<(usize, usize)>,
}

impl<'a> Slots<'a> {
    const END: usize = usize::MAX;

    fn with_capacity(names: usize) -> Self {
        Self {
            by_name: Map::with_capacity_and_hasher(names, foldhash::fast::RandomState::default()),
            named: Vec::with_capacity(names),
        }
    }

    fn add(&mut self, name: &'a str, object: usize) {
        let at = self.named.len();
        let next = self.by_name.insert(name, at).unwrap_or(Self::END);
        self.named.push((object, next));
    }

    /// Calls `found` with each object `name` names.
    fn each(&self, name: &str, mut found: impl FnMut(usize)) {
        let mut at = self.by_name.get(name).copied().unwrap_or(Self::END);
        while at != Self::END {
            let (object, next) = self.named[at];
            found(object);
            at = next;
        }
    }
}

/// For each image, its depth in the parent chains: 0 for an image no
/// other image of `images` is built on, one more than its deepest child
/// otherwise. Removing images in order of rising depth removes every child
/// before its parent.
#[must_use]
pub fn image_depths(images: &[Image]) -> Vec<u32> {
    // Most nodes keep no chains (containerd, Docker's containerd store):
    // then no image's id need be read again.
    if images.iter().all(|i| i.parent.is_none()) {
        return vec![0; images.len()];
    }
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
    if records.iter().all(|r| r.parents.is_empty()) {
        return vec![0; records.len()];
    }
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
