//! `crictl rmi --prune`: the images no container of CRI's uses, as CRI
//! lists them.

use std::collections::HashMap;

use super::{CRI_KIND, Verdict, in_cri_namespace};
use crate::inventory::uses::{ContainerUse, ImageUses};
use crate::inventory::{ContainerState, Inventory, Kind};

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
