//! What the cron job safeprune replaces would remove from this node now
//! (`plan --compare`): pure functions over the inventory, written
//! from the command's documented behaviour and the engine's source, each
//! case citing it. `tests/integration/compare_prune.rs` holds the model to the real
//! command on twin fixtures. One module per command: `docker`, `crictl`,
//! `nerdctl`.

use crate::inventory::ContainerState;

mod crictl;
mod docker;
mod nerdctl;

pub use crictl::crictl_rmi_prune;
pub use docker::docker_system_prune;
pub use nerdctl::nerdctl_system_prune;

/// The namespace kubelet's CRI keeps its objects in, the one both
/// containerd commands act on here.
const CRI_NAMESPACE: &str = "k8s.io";

/// Whether a containerd id (`k8s.io/…`) lies in the CRI namespace.
fn in_cri_namespace(id: &str) -> bool {
    id.strip_prefix(CRI_NAMESPACE)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The label CRI puts on its containers: `container` or `sandbox`.
const CRI_KIND: &str = "io.cri-containerd.kind";

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
mod tests;
