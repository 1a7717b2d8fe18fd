//! `nerdctl -n k8s.io system prune -a -f`: the stopped containers of the
//! namespace, then the images none left uses.

use std::collections::HashMap;

use super::{Verdict, in_cri_namespace, stopped};
use crate::inventory::{ContainerState, Inventory, Kind};

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
