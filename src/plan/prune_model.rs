//! What the cron job safeprune replaces would remove from this node now
//! (issue 13, `plan --compare`): pure functions over the inventory, written
//! from the command's documented behaviour and the engine's source, each
//! case citing it. `tests/compare_prune.rs` holds the model to the real
//! command on twin fixtures.
//!
//! `docker system prune -a -f [--volumes]` (docker/cli
//! `cli/command/system/prune.go`) asks the engine to prune, in this order:
//! containers, networks, volumes (with `--volumes`), images (`all`), build
//! cache (`all`). Each later step sees the node the earlier left: once the
//! stopped containers are gone, only running ones hold anything.

use std::collections::HashMap;

use crate::inventory::{ContainerState, Inventory, Kind};

/// What the command does with one object, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub removes: bool,
    /// Why, in the command's terms: "stopped container", "used by running
    /// container web".
    pub why: String,
}

impl Verdict {
    fn removes(why: impl Into<String>) -> Self {
        Self {
            removes: true,
            why: why.into(),
        }
    }

    fn keeps(why: impl Into<String>) -> Self {
        Self {
            removes: false,
            why: why.into(),
        }
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
    let user = |uses: &dyn Fn(&crate::inventory::Container) -> bool| {
        left.iter().find(|c| uses(c)).map(|c| c.display_name())
    };
    // Networks (`localNetworksPrune`): predefined ones stay, and those with
    // an endpoint, which only a running container has.
    for n in &inv.networks {
        let verdict = if PREDEFINED_NETWORKS.contains(&n.name.as_str()) {
            Verdict::keeps("predefined network")
        } else if let Some(name) = user(&|c| c.networks.iter().any(|k| *k == n.id || *k == n.name))
        {
            Verdict::keeps(format!("used by running container {name}"))
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
    let named_too = inv
        .api_version
        .as_deref()
        .is_none_or(|v| !at_least(v, 1, 42));
    for v in &inv.volumes {
        let verdict = if !volumes {
            Verdict::keeps("volumes are pruned only with --volumes")
        } else if let Some(name) = user(&|c| c.volumes.contains(&v.name)) {
            Verdict::keeps(format!("mounted by running container {name}"))
        } else if !v.anonymous && !named_too {
            Verdict::keeps("named volume: from API 1.42 only anonymous volumes are pruned")
        } else {
            Verdict::removes("volume no running container mounts")
        };
        verdicts.insert((Kind::Volume, v.name.clone()), verdict);
    }
    // Images (`daemon/images/image_prune.go`, `ImagesPrune` with
    // `dangling=false`): every image no container left was made from, by
    // id; the delete without force refuses the others.
    for i in &inv.images {
        let verdict = if let Some(name) = user(&|c| {
            c.image_id == i.id || i.tags.iter().chain(&i.digests).any(|r| *r == c.image_ref)
        }) {
            Verdict::keeps(format!("used by running container {name}"))
        } else {
            Verdict::removes("image no running container uses")
        };
        verdicts.insert((Kind::Image, i.id.clone()), verdict);
    }
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
/// action, v1.30 and later): every image CRI lists, but those pinned
/// (skipped since v1.30.0, commit af4707c2: the sandbox image and
/// `io.cri-containerd.pinned` ones) and those a CRI container of any state
/// was made from (`ListContainers` unfiltered, each container's image
/// resolved to its id). Pod sandboxes are not containers to CRI: their
/// image is kept by its pin alone. Containers are left alone, and
/// namespaces other than `k8s.io` are not CRI's.
#[must_use]
pub fn crictl_rmi_prune(inv: &Inventory) -> HashMap<(Kind, String), Verdict> {
    let cri_containers: Vec<&crate::inventory::Container> = inv
        .containers
        .iter()
        .filter(|c| {
            in_cri_namespace(&c.id)
                && c.labels.get(CRI_KIND).map(String::as_str) == Some("container")
        })
        .collect();
    let mut verdicts = HashMap::new();
    for c in &inv.containers {
        verdicts.insert(
            (Kind::Container, c.id.clone()),
            Verdict::keeps("crictl rmi removes images only"),
        );
    }
    for i in &inv.images {
        let verdict = if !in_cri_namespace(&i.id) {
            Verdict::keeps("not in k8s.io: CRI does not list it")
        } else if i.pinned {
            Verdict::keeps("pinned (skipped since crictl v1.30)")
        } else if let Some(c) = cri_containers.iter().find(|c| made_from(c, i)) {
            Verdict::keeps(format!(
                "a CRI container was made from it ({}, {})",
                c.display_name(),
                c.state.as_str()
            ))
        } else {
            Verdict::removes("no CRI container was made from it")
        };
        verdicts.insert((Kind::Image, i.id.clone()), verdict);
    }
    verdicts
}

/// The label CRI puts on its containers: `container` or `sandbox`.
const CRI_KIND: &str = "io.cri-containerd.kind";

/// Whether `c` was made from `i`: by the target its image name resolved to,
/// or by that name.
fn made_from(c: &crate::inventory::Container, i: &crate::inventory::Image) -> bool {
    (!c.image_id.is_empty() && c.image_id == i.id)
        || i.tags.iter().chain(&i.digests).any(|r| *r == c.image_ref)
}

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
    for i in &inv.images {
        let verdict = if !in_cri_namespace(&i.id) {
            Verdict::keeps("not in k8s.io")
        } else if let Some(c) = left.iter().find(|c| {
            in_cri_namespace(&c.id) && i.tags.iter().chain(&i.digests).any(|r| *r == c.image_ref)
        }) {
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

/// Whether API `version` (`1.41`) is at least `major.minor`.
fn at_least(version: &str, major: u32, minor: u32) -> bool {
    let mut parts = version.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b) >= (major, minor),
        _ => false,
    }
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
            api_version: Some(api.into()),
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
    fn crictl_prune_spares_pinned_images_and_those_of_cri_containers_of_any_state() {
        let v = crictl_rmi_prune(&cri_node());
        // The native container's image goes: crictl does not see it.
        let mut want = ids(Kind::Image, &["k8s.io/sha256:tool", "k8s.io/sha256:unused"]);
        want.sort();
        assert_eq!(removed(&v), want);
        assert!(
            v[&(Kind::Image, "k8s.io/sha256:init".into())]
                .why
                .contains("init, exited")
        );
        assert!(
            v[&(Kind::Image, "k8s.io/sha256:pause".into())]
                .why
                .starts_with("pinned")
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

    #[test]
    fn api_versions_compare_by_number() {
        assert!(at_least("1.42", 1, 42) && at_least("1.100", 1, 42) && at_least("2.0", 1, 42));
        assert!(!at_least("1.41", 1, 42) && !at_least("1.9", 1, 42) && !at_least("x", 1, 42));
    }
}
