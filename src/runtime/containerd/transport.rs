//! Reaching containerd: the unix socket, the gRPC channels on it with their
//! deadlines and message size, the version check that tells containerd from
//! any other socket, and the namespaces it would accept.

use std::sync::Mutex;
use std::time::Duration;

use containerd_client::tonic::transport::{Channel, Endpoint};

use super::{ContainerdRuntime, RUNTIME, native};
use crate::output::Chain;
use crate::runtime::RuntimeError;

const UNREACHABLE_HINT: &str = "is containerd running, and is the socket path right?";
/// Docker's own namespace: its containers and images belong to dockerd,
/// which keeps its own records of them.
const DOCKER_NAMESPACE: &str = "moby";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request deadline. Listing content on a node with many images is the
/// slowest call we make.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer accepted: tonic's default (4 MiB) is too small for the
/// image and CRI lists of a big node.
pub(super) const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// An endpoint for containerd's unix socket at `socket`, every call on it
/// failing after [`REQUEST_TIMEOUT`] without an answer. The `grpc-timeout`
/// each request also carries binds only a server that honours it: a hung
/// containerd would not.
fn channel(socket: &std::path::Path) -> UnixEndpoint {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: Some(REQUEST_TIMEOUT),
    }
}

/// A channel to `socket` with no deadline, connected on first use: for the
/// event stream, which lives as long as the run.
fn channel_without_deadline(socket: &std::path::Path) -> Channel {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: None,
    }
    .lazy()
}

/// How to reach containerd: its socket, and the deadline of each call.
struct UnixEndpoint {
    socket: std::path::PathBuf,
    deadline: Option<Duration>,
}

impl UnixEndpoint {
    fn endpoint(&self) -> Endpoint {
        // tonic wants a URI; the connector below ignores it.
        let endpoint = Endpoint::from_static("http://[::]").connect_timeout(CONNECT_TIMEOUT);
        match self.deadline {
            Some(deadline) => endpoint.timeout(deadline),
            None => endpoint,
        }
    }

    fn connector(
        &self,
    ) -> impl tower::Service<
        containerd_client::tonic::transport::Uri,
        Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>,
        Error = std::io::Error,
        Future = impl Send,
    > + Clone
    + Send
    + 'static {
        let socket = self.socket.clone();
        tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        })
    }

    async fn connect(&self) -> Result<Channel, containerd_client::tonic::transport::Error> {
        self.endpoint()
            .connect_with_connector(self.connector())
            .await
    }

    fn lazy(&self) -> Channel {
        self.endpoint()
            .connect_with_connector_lazy(self.connector())
    }
}

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
                source,
            };
        let socket = crate::runtime::socket_path(RUNTIME, endpoint)?;
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, channel(&socket).connect())
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| unreachable(e.into()))?;
        let stream_channel = channel_without_deadline(&socket);
        // Any unix socket accepts a connection; only containerd answers this.
        let version = tokio::time::timeout(CONNECT_TIMEOUT, native::version(&channel))
            .await
            .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?
            .map_err(|e| unreachable(e.into()))?;
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
            sandbox_image: Mutex::new(None),
            watch: Box::new(tokio::sync::Mutex::new(None)),
            follow_events: true,
            measure_image_fs: false,
        })
    }
}

/// The plugin type of containerd's snapshotters.
const SNAPSHOTTER_PLUGIN: &str = "io.containerd.snapshotter.v1";

/// The directory containerd's snapshotter `snapshotter` (`overlayfs`) keeps
/// its snapshots in, as the plugin exports it (`root`, measured on 2.3.4:
/// `<containerd root>/io.containerd.snapshotter.v1.overlayfs`), asked of
/// the containerd at `socket` with one Introspection `Plugins` call. For
/// Docker's containerd image store, whose images lie there, not under
/// `DockerRootDir`.
///
/// # Errors
/// Why it is not known: containerd does not answer, has no such
/// snapshotter, or the snapshotter exports no root.
pub(crate) async fn snapshotter_root(
    socket: &std::path::Path,
    snapshotter: &str,
) -> Result<String, String> {
    use containerd_client::services::v1::PluginsRequest;
    use containerd_client::services::v1::introspection_client::IntrospectionClient;
    let at = socket.display();
    let ask = async {
        let channel = channel(socket)
            .connect()
            .await
            .map_err(|e| format!("cannot connect to containerd at {at}: {}", Chain(&e)))?;
        let mut request = containerd_client::tonic::Request::new(PluginsRequest {
            filters: vec![format!("type=={SNAPSHOTTER_PLUGIN},id=={snapshotter}")],
        });
        request.set_timeout(CONNECT_TIMEOUT);
        IntrospectionClient::new(channel)
            .plugins(request)
            .await
            .map_err(|e| {
                format!(
                    "containerd at {at} does not list its plugins: {}",
                    Chain(&e)
                )
            })
    };
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, ask)
        .await
        .map_err(|_| format!("containerd at {at} gave no answer within {CONNECT_TIMEOUT:?}"))??;
    // Checked here too: the filter is the server's to honour.
    let plugin = answer
        .into_inner()
        .plugins
        .into_iter()
        .find(|p| p.r#type == SNAPSHOTTER_PLUGIN && p.id == snapshotter)
        .ok_or_else(|| format!("containerd at {at} has no snapshotter {snapshotter}"))?;
    plugin
        .exports
        .get("root")
        .filter(|root| !root.is_empty())
        .cloned()
        .ok_or_else(|| format!("containerd's snapshotter {snapshotter} at {at} names no root"))
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
