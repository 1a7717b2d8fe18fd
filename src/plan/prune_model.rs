//! What the cron job safeprune replaces would remove from this node now
//! (issue 13, `plan --compare`): pure functions over the inventory, written
//! from the command's documented behaviour and the engine's source, each
//! case citing it. `tests/integration/compare_prune.rs` holds the model to the real
//! command on twin fixtures.
//!
//! `docker system prune -a -f [--volumes]` (docker/cli
//! `cli/command/system/prune.go`) asks the engine to prune, in this order:
//! containers, networks, volumes (with `--volumes`), images (`all`), build
//! cache (`all`). Each later step sees the node the earlier left: once the
//! stopped containers are gone, only running ones hold anything.

use std::collections::HashMap;

use crate::inventory::uses::{ContainerUse, ImageUses, VolumeAndNetworkUses, image_depths};
use crate::inventory::{ApiVersion, ContainerState, ImageStore, Inventory, Kind};

/// What the command does with one object, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub removes: bool,
    /// Why, in the command's terms: "stopped container", "used by running
    /// container web".
    pub why: String,
    /// The names it takes off an image it keeps, as listed.
    pub untags: Vec<String>,
}

impl Verdict {
    fn removes(why: impl Into<String>) -> Self {
        Self {
            removes: true,
            why: why.into(),
            untags: Vec::new(),
        }
    }

    fn keeps(why: impl Into<String>) -> Self {
        Self {
            removes: false,
            why: why.into(),
            untags: Vec::new(),
        }
    }

    fn untagging(mut self, names: Vec<String>) -> Self {
        self.untags = names;
        self
    }
}

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
fn untagged_while_in_use(names: &[String]) -> Vec<String> {
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

use crate::inventory::refs::{fullest as full_name, is_digest, repository as repository_of};

/// The namespace kubelet's CRI keeps its objects in, the one both
/// containerd commands act on here.
const CRI_NAMESPACE: &str = "k8s.io";

/// Whether a containerd id (`k8s.io/…`) lies in the CRI namespace.
fn in_cri_namespace(id: &str) -> bool {
    id.strip_prefix(CRI_NAMESPACE)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The verdict of `crictl rmi --prune` on every image of `inv`
/// (kubernetes-sigs/cri-tools `cmd/crictl/image.go`, the `rmi` command's
/// action, v1.30 and later): every image CRI lists, but those CRI reports
/// pinned (skipped since v1.30.0, commit af4707c2; containerd before
/// 1.6.22 and 1.7.3 reports none, so there the sandbox image goes too) and
/// those a CRI container of any state was made from (`ListContainers`
/// unfiltered, each container's image resolved to its id: the one
/// definition's "made from", `inventory::uses`). Pod sandboxes are not
/// containers to CRI, and an image mounted as a volume is no container's
/// image: both go unless pinned, but that CRI-O refuses `RemoveImage` of
/// an image a running container mounts (measured on CRI-O 1.36.3, on a
/// `runtime.kind: cri` node; on `--prune` crictl ignores every refusal).
/// containerd does not refuse, through CRI or natively (measured on 2.1.9
/// and 2.3.4): there the mounted image goes.
/// Containers are left alone, and namespaces other than `k8s.io` are not
/// CRI's. On a CRI node every image and container is CRI's.
#[must_use]
pub fn crictl_rmi_prune(inv: &Inventory) -> HashMap<(Kind, String), Verdict> {
    let uses = ImageUses::new(&inv.containers, &inv.images);
    // On a CRI node (`runtime.kind: cri`) everything listed is CRI's; on
    // containerd, the CRI namespace's objects that CRI made.
    let cri_node = inv.runtime == crate::inventory::RuntimeKind::Cri.as_str();
    // Only CRI-O refuses to remove an image a running container mounts.
    let refuses_mounted = cri_node && inv.cri_runtime == "cri-o";
    let in_cri_namespace = |id: &str| cri_node || in_cri_namespace(id);
    let is_cri_container = |c: &crate::inventory::Container| {
        cri_node
            || (in_cri_namespace(&c.id)
                && c.labels.get(CRI_KIND).map(String::as_str) == Some("container"))
    };
    let mut verdicts = HashMap::new();
    for c in &inv.containers {
        verdicts.insert(
            (Kind::Container, c.id.clone()),
            Verdict::keeps("crictl rmi removes images only"),
        );
    }
    for (m, i) in inv.images.iter().enumerate() {
        let made_from = || {
            uses.containers_of(m)
                .filter(|(_, how)| *how == ContainerUse::MadeFrom)
                .map(|(n, _)| uses.container(n))
                .find(|c| is_cri_container(c))
        };
        let mounted_by_running = || {
            uses.containers_of(m)
                .filter(|(_, how)| *how == ContainerUse::Mounts)
                .map(|(n, _)| uses.container(n))
                .find(|c| c.state == ContainerState::Running)
        };
        let verdict = if !in_cri_namespace(&i.id) {
            Verdict::keeps("not in k8s.io: CRI does not list it")
        } else if i.cri_pinned {
            Verdict::keeps("CRI reports it pinned (skipped since crictl v1.30)")
        } else if let Some(c) = made_from() {
            Verdict::keeps(format!(
                "a CRI container was made from it ({}, {})",
                c.display_name(),
                c.state.as_str()
            ))
        } else if let Some(c) = refuses_mounted.then(mounted_by_running).flatten() {
            Verdict::keeps(format!(
                "crictl tries, CRI-O refuses (a running container mounts it as a volume: {}), and crictl ignores the refusal",
                c.display_name()
            ))
        } else if i.pinned {
            Verdict::removes("no CRI container was made from it, and CRI does not report it pinned")
        } else {
            Verdict::removes("no CRI container was made from it")
        };
        verdicts.insert((Kind::Image, i.id.clone()), verdict);
    }
    verdicts
}

/// The label CRI puts on its containers: `container` or `sandbox`.
const CRI_KIND: &str = "io.cri-containerd.kind";

/// The verdict of `nerdctl -n k8s.io system prune -a -f` on every
/// container and image of `inv` (containerd/nerdctl `pkg/cmd/system/prune.go`
/// `Prune`, read at v2.3.5): first every container of the namespace whose
/// task is not running or paused, CRI's containers and sandboxes included
/// (`pkg/cmd/container/prune.go`; nerdctl 2.1.3 to 2.3.5 fail on CRI's
/// containers and leave them, containerd/nerdctl#5207); then every image
/// record no container left names exactly (`pkg/imgutil/imgutil.go`
/// `GetUnusedImages`, by record name, any state, with no exception for
/// pinned images). An image a container left names loses its other names
/// but keeps its content: it counts as kept. Networks, volumes (without
/// `--volumes`) and the build cache are not safeprune's on containerd.
#[must_use]
pub fn nerdctl_system_prune(inv: &Inventory) -> HashMap<(Kind, String), Verdict> {
    let mut verdicts = HashMap::new();
    let mut left = Vec::new();
    for c in &inv.containers {
        let verdict = if !in_cri_namespace(&c.id) {
            Verdict::keeps("not in k8s.io")
        } else if stopped(c.state) {
            Verdict::removes(format!("{} container", c.state.as_str()))
        } else {
            Verdict::keeps(match c.state {
                ContainerState::Unknown => {
                    "its task's state cannot be read: skipped with a warning".into()
                }
                state => format!("its task is {}", state.as_str()),
            })
        };
        if !verdict.removes {
            left.push(c);
        }
        verdicts.insert((Kind::Container, c.id.clone()), verdict);
    }
    // The containers left by the exact name they record (nerdctl matches
    // record names, not spellings): one pass over the node.
    let mut naming: HashMap<&str, &crate::inventory::Container> = HashMap::new();
    for c in left.iter().filter(|c| in_cri_namespace(&c.id)) {
        naming.entry(c.image_ref.as_str()).or_insert(c);
    }
    for i in &inv.images {
        let verdict = if !in_cri_namespace(&i.id) {
            Verdict::keeps("not in k8s.io")
        } else if let Some(c) = i
            .tags
            .iter()
            .chain(&i.digests)
            .filter_map(|r| naming.get(r.as_str()))
            .min_by(|a, b| a.id.cmp(&b.id))
        {
            Verdict::keeps(format!(
                "container {} names it (its other names go)",
                c.display_name()
            ))
        } else if i.pinned {
            Verdict::removes("no container left names it (pins are not honoured)")
        } else {
            Verdict::removes("no container left names it")
        };
        verdicts.insert((Kind::Image, i.id.clone()), verdict);
    }
    verdicts
}

/// Whether a prune of stopped containers takes a container in `state`:
/// every one that is not running. Paused and restarting ones are running
/// to both engines' prunes; a state the engine did not name is kept (the
/// model does not guess, and nerdctl skips it with a warning).
fn stopped(state: ContainerState) -> bool {
    !matches!(
        state,
        ContainerState::Running
            | ContainerState::Paused
            | ContainerState::Restarting
            | ContainerState::Unknown
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{BuildCacheEntry, Container, Image, Labels, Network, Volume};

    fn container(
        id: &str,
        state: ContainerState,
        image: &str,
        nets: &[&str],
        vols: &[&str],
    ) -> Container {
        Container {
            image_mounts: Vec::new(),
            id: id.into(),
            names: vec![id.into()],
            state,
            labels: Labels::new(),
            image_id: image.into(),
            image_ref: image.into(),
            created: chrono::Utc::now(),
            finished: None,
            volumes: vols.iter().map(|v| (*v).to_owned()).collect(),
            networks: nets.iter().map(|n| (*n).to_owned()).collect(),
            pod: None,
            size: None,
        }
    }

    fn node(api: &str) -> Inventory {
        let volume = |name: &str, anonymous| Volume {
            name: name.into(),
            anonymous,
            labels: Labels::new(),
            created: None,
            size: None,
        };
        let network = |name: &str| Network {
            id: format!("id-{name}"),
            name: name.into(),
            created: None,
            labels: Labels::new(),
        };
        let image = |id: &str| Image {
            id: id.into(),
            ..Image::default()
        };
        Inventory {
            runtime: "docker".into(),
            containers: vec![
                container(
                    "web",
                    ContainerState::Running,
                    "sha256:web",
                    &["front"],
                    &["data"],
                ),
                container("paused", ContainerState::Paused, "sha256:p", &[], &[]),
                container(
                    "old",
                    ContainerState::Exited,
                    "sha256:old",
                    &["back"],
                    &["cache"],
                ),
                container("new", ContainerState::Created, "sha256:old", &[], &[]),
                container("dead", ContainerState::Dead, "sha256:old", &[], &[]),
                container("odd", ContainerState::Unknown, "sha256:odd", &[], &[]),
            ],
            images: vec![
                image("sha256:web"),
                image("sha256:p"),
                image("sha256:old"),
                image("sha256:odd"),
                image("sha256:unused"),
            ],
            volumes: vec![
                volume("data", false),
                volume("cache", false),
                volume(&"a".repeat(64), true),
            ],
            networks: vec![
                network("bridge"),
                network("host"),
                network("front"),
                network("back"),
            ],
            build_cache: vec![
                BuildCacheEntry {
                    parents: Vec::new(),
                    id: "busy".into(),
                    description: String::new(),
                    created: None,
                    last_used: None,
                    size: None,
                    in_use: true,
                },
                BuildCacheEntry {
                    parents: Vec::new(),
                    id: "idle".into(),
                    description: String::new(),
                    created: None,
                    last_used: None,
                    size: None,
                    in_use: false,
                },
            ],
            api_version: crate::inventory::ApiVersion::parse(api),
            ..Inventory::default()
        }
    }

    fn removed(v: &HashMap<(Kind, String), Verdict>) -> Vec<(Kind, String)> {
        let mut r: Vec<(Kind, String)> = v
            .iter()
            .filter(|(_, v)| v.removes)
            .map(|(k, _)| k.clone())
            .collect();
        r.sort();
        r
    }

    fn ids(kind: Kind, list: &[&str]) -> Vec<(Kind, String)> {
        list.iter().map(|i| (kind, (*i).to_owned())).collect()
    }

    fn tagged(id: &str, names: &[&str], parent: Option<&str>) -> Image {
        Image {
            id: id.into(),
            tags: names
                .iter()
                .filter(|n| !n.contains('@'))
                .map(|n| (*n).to_owned())
                .collect(),
            digests: names
                .iter()
                .filter(|n| n.contains('@'))
                .map(|n| (*n).to_owned())
                .collect(),
            parent: parent.map(str::to_owned),
            ..Image::default()
        }
    }

    #[test]
    fn a_parent_of_an_image_in_use_loses_only_its_names() {
        // `docker commit`: base:1 <- committed:1, which runs; an unused
        // chain of three goes whole, its untagged middle with it.
        let inv = Inventory {
            containers: vec![container(
                "web",
                ContainerState::Running,
                "sha256:committed",
                &[],
                &[],
            )],
            images: vec![
                tagged("sha256:base", &["base:1"], None),
                tagged("sha256:committed", &["committed:1"], Some("sha256:base")),
                tagged("sha256:root", &["root:1"], None),
                tagged("sha256:mid", &[], Some("sha256:root")),
                tagged("sha256:tip", &["tip:1"], Some("sha256:mid")),
            ],
            ..Inventory::default()
        };
        let v = docker_system_prune(&inv, false);
        let base = &v[&(Kind::Image, "sha256:base".into())];
        assert!(!base.removes);
        assert_eq!(base.untags, ["base:1"]);
        assert_eq!(
            base.why,
            "image committed:1 is built on it and stays: only its names go"
        );
        assert_eq!(
            removed(&v),
            ids(Kind::Image, &["sha256:mid", "sha256:root", "sha256:tip"])
        );
        assert_eq!(
            v[&(Kind::Image, "sha256:mid".into())].why,
            "dangling parent of a deleted image"
        );
    }

    #[test]
    fn an_image_in_use_loses_its_extra_names_down_to_one_reference() {
        // Lexical order over full names: docker.io/library/app:1,
        // docker.io/library/app:2, docker.io/library/app@sha256:…,
        // docker.io/library/zed:1, docker.io/other/app:1. Each is untagged
        // while the rest are not a single reference (the last tag of a
        // repository takes its digests along): other/app:1 stays.
        let names = ["app:2", "other/app:1", "app:1", "app@sha256:0123", "zed:1"];
        let inv = Inventory {
            containers: vec![container(
                "web",
                ContainerState::Running,
                "sha256:app",
                &[],
                &[],
            )],
            images: vec![tagged("sha256:app", &names, None)],
            ..Inventory::default()
        };
        let v = docker_system_prune(&inv, false);
        let app = &v[&(Kind::Image, "sha256:app".into())];
        assert!(!app.removes);
        assert_eq!(app.untags, ["app:1", "app:2", "app@sha256:0123", "zed:1"]);
        // One tag and its repository's digests are a single reference: a
        // used image keeps them all.
        assert!(untagged_while_in_use(&["app:1".into(), "app@sha256:0123".into()]).is_empty());
        assert!(untagged_while_in_use(&["app:1".into()]).is_empty());
        assert!(untagged_while_in_use(&[]).is_empty());
    }

    #[test]
    fn on_the_containerd_store_only_the_names_containers_were_made_with_stay() {
        // As measured on Docker 29.7.2 (tests/integration/docker28.rs).
        let names = [
            "used:1",
            "used:2",
            "zed/used:1",
            "other:1",
            "used@sha256:d",
            "zed/used@sha256:d",
            "other@sha256:d",
        ];
        let node = |web_made_with: &str| {
            let mut web = container("web", ContainerState::Running, "sha256:used", &[], &[]);
            web.image_ref = web_made_with.to_owned();
            let mut child = container(
                "child",
                ContainerState::Running,
                "sha256:committed",
                &[],
                &[],
            );
            child.image_ref = "committed:1".to_owned();
            Inventory {
                containers: vec![web, child],
                images: vec![
                    tagged("sha256:used", &names, None),
                    tagged("sha256:base", &["base:1"], None),
                    tagged("sha256:committed", &["committed:1"], Some("sha256:base")),
                ],
                image_store: ImageStore::Containerd,
                ..Inventory::default()
            }
        };
        let by_name = docker_system_prune(&node("used:1"), false);
        let used = &by_name[&(Kind::Image, "sha256:used".into())];
        assert!(!used.removes);
        assert_eq!(
            used.untags,
            [
                "used:2",
                "zed/used:1",
                "other:1",
                "zed/used@sha256:d",
                "other@sha256:d"
            ]
        );
        // Parents do not count: base goes whole.
        assert_eq!(removed(&by_name), ids(Kind::Image, &["sha256:base"]));
        let committed = &by_name[&(Kind::Image, "sha256:committed".into())];
        assert!(committed.untags.is_empty());
        // Made by id: the last name in full spelling stays
        // (docker.io/zed/used:1).
        let by_id = docker_system_prune(&node("sha256:used"), false);
        assert_eq!(
            by_id[&(Kind::Image, "sha256:used".into())].untags,
            [
                "used:1",
                "used:2",
                "other:1",
                "used@sha256:d",
                "other@sha256:d"
            ]
        );
    }

    #[test]
    fn the_docker_model_is_linear_in_the_node() {
        // 20,000 images over 100,000 containers (issue 22: the model
        // scanned the running containers once per image, about 10^9
        // steps). Unoptimized, this finishes in well under the test's
        // patience only when each image costs a lookup.
        let containers: Vec<Container> = (0..100_000)
            .map(|n| {
                container(
                    &format!("c{n:06}"),
                    if n % 2 == 0 {
                        ContainerState::Running
                    } else {
                        ContainerState::Exited
                    },
                    &format!("sha256:i{:05}", n % 20_000),
                    &[],
                    &[],
                )
            })
            .collect();
        let images = (0..20_000)
            .map(|n| tagged(&format!("sha256:i{n:05}"), &[], None))
            .collect();
        let inv = Inventory {
            containers,
            images,
            ..Inventory::default()
        };
        let started = std::time::Instant::now();
        let v = docker_system_prune(&inv, false);
        assert_eq!(v.len(), 120_000);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn stopped_containers_then_whatever_no_running_container_holds() {
        let v = docker_system_prune(&node("1.41"), false);
        let mut want = ids(Kind::Container, &["dead", "new", "old"]);
        want.extend(ids(Kind::Image, &["sha256:old", "sha256:unused"]));
        want.extend(ids(Kind::Network, &["id-back"]));
        want.extend(ids(Kind::BuildCache, &["idle"]));
        want.sort();
        assert_eq!(removed(&v), want);
        assert_eq!(
            v[&(Kind::Image, "sha256:web".into())].why,
            "used by running container web"
        );
        assert_eq!(
            v[&(Kind::Network, "id-bridge".into())].why,
            "predefined network"
        );
        assert_eq!(
            v[&(Kind::Volume, "cache".into())].why,
            "volumes are pruned only with --volumes"
        );
    }

    #[test]
    fn volumes_go_with_the_flag_named_ones_only_before_api_1_42() {
        let anonymous = "a".repeat(64);
        let v = docker_system_prune(&node("1.41"), true);
        let gone: Vec<_> = removed(&v)
            .into_iter()
            .filter(|(k, _)| *k == Kind::Volume)
            .collect();
        let mut want = ids(Kind::Volume, &["cache", &anonymous]);
        want.sort();
        assert_eq!(gone, want);
        let v = docker_system_prune(&node("1.43"), true);
        let gone: Vec<_> = removed(&v)
            .into_iter()
            .filter(|(k, _)| *k == Kind::Volume)
            .collect();
        assert_eq!(gone, ids(Kind::Volume, &[&anonymous]));
        assert!(
            v[&(Kind::Volume, "cache".into())]
                .why
                .starts_with("named volume")
        );
        assert_eq!(
            v[&(Kind::Volume, "data".into())].why,
            "mounted by running container web"
        );
    }

    fn cri_node() -> Inventory {
        let cri = |id: &str, kind: &str, state, image: &str| {
            let mut c = container(id, state, image, &[], &[]);
            c.labels.insert(CRI_KIND.into(), kind.into());
            c.image_ref = format!(
                "docker.io/library/{}:1",
                image.trim_start_matches("k8s.io/sha256:")
            );
            c
        };
        let image = |id: &str, pinned| Image {
            id: id.into(),
            tags: vec![format!(
                "docker.io/library/{}:1",
                id.trim_start_matches("k8s.io/sha256:")
            )],
            pinned,
            ..Image::default()
        };
        Inventory {
            runtime: "containerd".into(),
            containers: vec![
                cri(
                    "k8s.io/app",
                    "container",
                    ContainerState::Running,
                    "k8s.io/sha256:app",
                ),
                cri(
                    "k8s.io/init",
                    "container",
                    ContainerState::Exited,
                    "k8s.io/sha256:init",
                ),
                cri(
                    "k8s.io/pod",
                    "sandbox",
                    ContainerState::Running,
                    "k8s.io/sha256:pause",
                ),
                cri(
                    "k8s.io/gone-pod",
                    "sandbox",
                    ContainerState::Exited,
                    "k8s.io/sha256:pause",
                ),
                container(
                    "k8s.io/native",
                    ContainerState::Exited,
                    "k8s.io/sha256:tool",
                    &[],
                    &[],
                ),
                container(
                    "default/other",
                    ContainerState::Exited,
                    "default/sha256:x",
                    &[],
                    &[],
                ),
            ],
            images: vec![
                image("k8s.io/sha256:app", false),
                image("k8s.io/sha256:init", false),
                image("k8s.io/sha256:pause", true),
                image("k8s.io/sha256:tool", false),
                image("k8s.io/sha256:unused", false),
                image("default/sha256:x", false),
            ],
            ..Inventory::default()
        }
    }

    #[test]
    fn on_a_cri_node_crictl_prune_sees_every_image_and_container() {
        // CRI-O: bare ids, no namespace, no CRI kind label.
        let node = Inventory {
            runtime: crate::inventory::RuntimeKind::Cri.as_str().into(),
            containers: vec![crate::inventory::Container {
                id: "c1".into(),
                state: crate::inventory::ContainerState::Exited,
                image_id: "aaaa".into(),
                image_mounts: vec!["vvvv".into()],
                ..crate::inventory::Container::default()
            }],
            images: vec![
                Image {
                    id: "aaaa".into(),
                    ..Image::default()
                },
                Image {
                    id: "pppp".into(),
                    pinned: true,
                    cri_pinned: true,
                    ..Image::default()
                },
                Image {
                    id: "vvvv".into(),
                    ..Image::default()
                },
                Image {
                    id: "uuuu".into(),
                    ..Image::default()
                },
            ],
            ..Inventory::default()
        };
        let v = crictl_rmi_prune(&node);
        let mut want = ids(Kind::Image, &["uuuu", "vvvv"]);
        want.sort();
        assert_eq!(removed(&v), want);
        assert!(
            v[&(Kind::Image, "aaaa".into())]
                .why
                .starts_with("a CRI container was made from it")
        );
    }

    #[test]
    fn crictl_prune_spares_what_cri_pins_and_the_images_of_cri_containers_of_any_state() {
        // The pause image is pinned by its configured name only, as on
        // containerd 1.6.20, whose CRI reports nothing pinned: crictl
        // removes it (issue 22). So too an image mounted as a volume.
        let mut node = cri_node();
        node.images.push(Image {
            id: "k8s.io/sha256:cri-pinned".into(),
            pinned: true,
            cri_pinned: true,
            ..Image::default()
        });
        node.images.push(Image {
            id: "k8s.io/sha256:volume".into(),
            ..Image::default()
        });
        node.containers[0].image_mounts = vec!["k8s.io/sha256:volume".into()];
        let v = crictl_rmi_prune(&node);
        // The native container's image goes: crictl does not see it.
        let mut want = ids(
            Kind::Image,
            &[
                "k8s.io/sha256:pause",
                "k8s.io/sha256:tool",
                "k8s.io/sha256:unused",
                "k8s.io/sha256:volume",
            ],
        );
        want.sort();
        assert_eq!(removed(&v), want);
        assert!(
            v[&(Kind::Image, "k8s.io/sha256:init".into())]
                .why
                .contains("init, exited")
        );
        assert_eq!(
            v[&(Kind::Image, "k8s.io/sha256:pause".into())].why,
            "no CRI container was made from it, and CRI does not report it pinned"
        );
        assert!(
            v[&(Kind::Image, "k8s.io/sha256:cri-pinned".into())]
                .why
                .starts_with("CRI reports it pinned")
        );
    }

    /// A CRI node behind `runtime_name` (`cri-o`, `containerd`): a running
    /// container `web` mounts image `mounted`, an exited one `was-mounted`.
    fn cri_node_with_mounts(runtime_name: &str) -> Inventory {
        let mut node = Inventory {
            runtime: crate::inventory::RuntimeKind::Cri.as_str().into(),
            cri_runtime: runtime_name.into(),
            containers: vec![
                container("web", ContainerState::Running, "app", &[], &[]),
                container("done", ContainerState::Exited, "app", &[], &[]),
            ],
            images: ["app", "mounted", "was-mounted", "unused"]
                .into_iter()
                .map(|id| Image {
                    id: id.into(),
                    ..Image::default()
                })
                .collect(),
            ..Inventory::default()
        };
        node.containers[0].image_mounts = vec!["mounted".into()];
        node.containers[1].image_mounts = vec!["was-mounted".into()];
        node
    }

    /// On a CRI node (CRI-O), crictl tries to remove an image a running
    /// container mounts as a volume, and CRI-O refuses: it stays. One only
    /// an exited container mounts goes, as one no container names.
    #[test]
    fn crictl_prune_on_a_cri_node_cannot_remove_what_a_running_container_mounts() {
        let v = crictl_rmi_prune(&cri_node_with_mounts("cri-o"));
        assert_eq!(
            removed(&v),
            ids(Kind::Image, &["unused", "was-mounted"]),
            "{v:?}"
        );
        assert!(
            v[&(Kind::Image, "mounted".into())]
                .why
                .starts_with("crictl tries, CRI-O refuses"),
            "{v:?}"
        );
    }

    /// containerd through CRI (`runtime.kind: cri` at its socket) does not
    /// refuse: the image a running container mounts goes too.
    #[test]
    fn crictl_prune_through_cri_on_containerd_removes_what_a_running_container_mounts() {
        let v = crictl_rmi_prune(&cri_node_with_mounts("containerd"));
        assert_eq!(
            removed(&v),
            ids(Kind::Image, &["mounted", "unused", "was-mounted"]),
            "{v:?}"
        );
    }

    #[test]
    fn nerdctl_prune_takes_every_stopped_container_of_the_namespace_then_unnamed_images() {
        let v = nerdctl_system_prune(&cri_node());
        let mut want = ids(
            Kind::Container,
            &["k8s.io/gone-pod", "k8s.io/init", "k8s.io/native"],
        );
        want.extend(ids(
            Kind::Image,
            &[
                "k8s.io/sha256:init",
                "k8s.io/sha256:tool",
                "k8s.io/sha256:unused",
            ],
        ));
        want.sort();
        assert_eq!(removed(&v), want);
        // The running sandbox names the pause image: kept, pin or not.
        assert!(
            v[&(Kind::Image, "k8s.io/sha256:pause".into())]
                .why
                .starts_with("container k8s.io/pod names it")
        );
        assert_eq!(
            v[&(Kind::Container, "default/other".into())].why,
            "not in k8s.io"
        );
    }
}
