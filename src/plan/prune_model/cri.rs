//! `crictl rmi --prune` and `nerdctl -n k8s.io system prune -a -f`: the
//! containerd commands, over CRI's namespace.

use std::collections::HashMap;

use super::{Verdict, stopped};
use crate::inventory::uses::{ContainerUse, ImageUses};
use crate::inventory::{ContainerState, Inventory, Kind};

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
pub(super) const CRI_KIND: &str = "io.cri-containerd.kind";

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
