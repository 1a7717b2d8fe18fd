//! Which pods are live: a container's pod is live while one of its
//! sandboxes is READY, its own or another of the same pod uid. The
//! planner's `live_pod_sandbox` rule and the adapters that must know
//! before a re-check answers read it here.

use std::collections::HashMap;

use super::{PodIdentity, PodSandbox};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// READY sandboxes by id and by pod uid; the first by id wins a tie.
pub struct ReadySandboxes<'a> {
    by_id: Map<&'a str, &'a PodSandbox>,
    by_uid: Map<&'a str, &'a PodSandbox>,
}

impl<'a> ReadySandboxes<'a> {
    /// The READY ones of `sandboxes`, sorted so that the sandbox named in a
    /// detail does not depend on the order the runtime listed them in.
    #[must_use]
    pub fn of(sandboxes: &'a [PodSandbox]) -> Self {
        let mut ready: Vec<&PodSandbox> = sandboxes.iter().filter(|s| s.ready).collect();
        ready.sort_by(|a, b| a.id.cmp(&b.id));
        let mut index = Self {
            by_id: Map::default(),
            by_uid: Map::default(),
        };
        for s in ready {
            index.by_id.entry(s.id.as_str()).or_insert(s);
            if let Some(uid) = s.pod_uid.as_deref() {
                index.by_uid.entry(uid).or_insert(s);
            }
        }
        index
    }

    /// The READY sandbox of a container's pod: its own sandbox, or any
    /// sandbox of the same pod uid (a recreated sandbox still means a live
    /// pod).
    #[must_use]
    pub fn live(&self, pod: &PodIdentity) -> Option<&'a PodSandbox> {
        let by_id = pod
            .sandbox_id
            .as_deref()
            .filter(|id| !id.is_empty())
            .and_then(|id| self.by_id.get(id));
        let by_pod_uid = || {
            pod.pod_uid
                .as_deref()
                .filter(|uid| !uid.is_empty())
                .and_then(|uid| self.by_uid.get(uid))
        };
        by_id.or_else(by_pod_uid).copied()
    }
}

/// Whether the pod `pod` names is live among `sandboxes`, as
/// the planner's `live_pod_sandbox` rule judges it: for an adapter that
/// must know before its re-check answers.
#[must_use]
pub fn pod_is_live(pod: &PodIdentity, sandboxes: &[PodSandbox]) -> bool {
    ReadySandboxes::of(sandboxes).live(pod).is_some()
}
