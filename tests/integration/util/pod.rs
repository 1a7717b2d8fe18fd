//! A pod as kubelet names it, shared by both engines' fixtures (cri-dockerd
//! labels on Docker, CRI calls on containerd), and what safeprune must read
//! back about it whichever engine made it.

use safeprune::inventory::{PodIdentity, PodSandbox};

/// A pod as kubelet names it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The sandbox attempt, the last part of its name.
    pub attempt: u32,
}

impl Pod {
    /// A pod with a uid derived from its name (unique within a test).
    pub fn new(name: &str, namespace: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            uid: format!("uid-{namespace}-{name}"),
            attempt: 0,
        }
    }

    /// The `io.kubernetes.pod.*` labels.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        vec![
            ("io.kubernetes.pod.uid", self.uid.clone()),
            ("io.kubernetes.pod.name", self.name.clone()),
            ("io.kubernetes.pod.namespace", self.namespace.clone()),
        ]
    }

    /// The identity an adapter must read off this pod's sandbox container.
    pub fn sandbox_identity(&self) -> PodIdentity {
        PodIdentity {
            sandbox_id: None,
            is_sandbox: true,
            ..self.identity()
        }
    }

    /// The identity an adapter must read off one of this pod's containers,
    /// in the sandbox the adapter calls `sandbox_id`.
    pub fn container_identity(&self, sandbox_id: &str) -> PodIdentity {
        PodIdentity {
            sandbox_id: Some(sandbox_id.to_owned()),
            is_sandbox: false,
            ..self.identity()
        }
    }

    /// Asserts that an inventory's sandbox is this pod's.
    pub fn assert_owns(&self, sandbox: &PodSandbox) {
        let owner = (
            sandbox.pod_uid.as_deref(),
            sandbox.pod_name.as_deref(),
            sandbox.pod_namespace.as_deref(),
        );
        assert_eq!(
            owner,
            (
                Some(self.uid.as_str()),
                Some(self.name.as_str()),
                Some(self.namespace.as_str())
            ),
            "the pod of sandbox {}",
            sandbox.id
        );
    }

    fn identity(&self) -> PodIdentity {
        PodIdentity {
            sandbox_id: None,
            pod_uid: Some(self.uid.clone()),
            pod_name: Some(self.name.clone()),
            pod_namespace: Some(self.namespace.clone()),
            is_sandbox: false,
        }
    }
}
