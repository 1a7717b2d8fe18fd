//! Reaching containerd: the unix socket, the gRPC channels on it with their
//! deadlines and message size, the version check that tells containerd from
//! any other socket, and the namespaces it would accept.

use super::{ContainerdRuntime, RUNTIME, native};
use crate::runtime::error::{RUN_AS_ROOT, RuntimeError, socket_path};

const UNREACHABLE_HINT: &str = "is containerd running, and is the socket path right?";
const NOT_CONTAINERD_HINT: &str = "this socket answers gRPC but not containerd's API: for CRI-O or another CRI runtime, use runtime.kind: cri with runtime.cri.endpoint";
/// Docker's own namespace: its containers and images belong to dockerd,
/// which keeps its own records of them.
const DOCKER_NAMESPACE: &str = "moby";
use crate::runtime::grpc::{CONNECT_TIMEOUT, channel, channel_without_deadline};

impl ContainerdRuntime {
    /// Connects to containerd at `endpoint` (`/run/containerd/containerd.sock`
    /// or `unix:///run/containerd/containerd.sock`) and asks its version.
    /// `namespaces` are the namespaces to prune; Docker's `moby` is left
    /// out with a warning, and so is a name containerd would refuse.
    ///
    /// # Errors
    /// [`RuntimeError::Unreachable`] when the endpoint is not a unix socket,
    /// does not exist, or does not answer as containerd.
    pub async fn connect(endpoint: &str, namespaces: &[String]) -> Result<Self, RuntimeError> {
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: UNREACHABLE_HINT,
                denied: RUN_AS_ROOT,
                source,
            };
        let socket = socket_path(RUNTIME, endpoint)?;
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, channel(&socket).connect())
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| unreachable(e.into()))?;
        let stream_channel = channel_without_deadline(&socket);
        // Any unix socket accepts a connection; only containerd answers this.
        let version = tokio::time::timeout(CONNECT_TIMEOUT, native::version(&channel))
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| {
                if e.code() == containerd_client::tonic::Code::Unimplemented {
                    // CRI-O's socket: gRPC, but not containerd's services.
                    RuntimeError::Unreachable {
                        runtime: RUNTIME,
                        endpoint: endpoint.to_owned(),
                        hint: NOT_CONTAINERD_HINT,
                        denied: RUN_AS_ROOT,
                        source: e.into(),
                    }
                } else {
                    unreachable(e.into())
                }
            })?;
        tracing::debug!(endpoint, version, "connected to containerd");
        let namespaces = usable_namespaces(namespaces);
        match native::namespaces(&channel).await {
            Ok(existing) => {
                for missing in namespaces.iter().filter(|n| !existing.contains(n)) {
                    tracing::warn!(
                        namespace = %missing,
                        "containerd has no such namespace (yet): nothing to prune there"
                    );
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot list containerd namespaces"),
        }
        Ok(Self {
            channel,
            stream_channel,
            namespaces,
            watch: Box::new(tokio::sync::Mutex::new(None)),
            synced: tokio::sync::Notify::new(),
            follow_events: true,
            measure_image_fs: false,
        })
    }
}

impl ContainerdRuntime {
    /// Its version, as `check` says it: `containerd v2.3.4`.
    pub async fn describe(&self) -> String {
        match tokio::time::timeout(CONNECT_TIMEOUT, native::version(&self.channel)).await {
            Ok(Ok(version)) => format!("{RUNTIME} {version}"),
            _ => RUNTIME.to_owned(),
        }
    }
}

/// The configured namespaces safeprune may prune: each once, without
/// Docker's `moby` and without names containerd would refuse.
fn usable_namespaces(configured: &[String]) -> Vec<String> {
    let mut usable: Vec<String> = Vec::new();
    for namespace in configured {
        if namespace == DOCKER_NAMESPACE {
            tracing::warn!(
                namespace = DOCKER_NAMESPACE,
                "skipping Docker's own containerd namespace: dockerd keeps its own records of \
                 those containers and images; prune Docker with runtime.kind: docker"
            );
        } else if !is_valid_namespace(namespace) {
            tracing::warn!(namespace = %namespace, "skipping a namespace name containerd would refuse");
        } else if !usable.contains(namespace) {
            usable.push(namespace.clone());
        }
    }
    usable
}

/// containerd's namespace rule (`pkg/identifiers`): letters and digits in
/// parts joined by `.`, `_` or `-`, at most 76 characters.
fn is_valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 76
        && name
            .split(['.', '_', '-'])
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_namespace_duplicates_and_bad_names_are_skipped() {
        let configured: Vec<String> = ["k8s.io", "moby", "k8s.io", "bad/name", "", "other_ns-1"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(usable_namespaces(&configured), ["k8s.io", "other_ns-1"]);
    }

    #[test]
    fn namespace_names_follow_containerd() {
        for good in ["k8s.io", "default", "a-b_c.d", "x1"] {
            assert!(is_valid_namespace(good), "{good}");
        }
        for bad in ["", ".a", "a.", "a..b", "a/b", "ä", &"a".repeat(77)] {
            assert!(!is_valid_namespace(bad), "{bad}");
        }
    }
}
