//! A pod as kubelet names it, shared by both engines' fixtures (cri-dockerd
//! labels on Docker, CRI calls on containerd).

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
}
