//! Connecting to the engine: its unix socket, through a client that keeps
//! its connections open, and the API version both speak.

use std::path::Path;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::{API_DEFAULT_VERSION, Docker};

use super::{DockerRuntime, REQUEST_TIMEOUT_SECS, RUNTIME, convert};
use crate::runtime::error::{RuntimeError, socket_path};

const UNREACHABLE_HINT: &str = "is dockerd running, and is the socket path right?";
/// How long the engine has to answer its first calls (version, ping).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection to the engine may stay open unused.
const IDLE_CONNECTION: Duration = Duration::from_secs(5);

impl DockerRuntime {
    /// Connects to the engine at `endpoint` (`unix:///var/run/docker.sock`
    /// or a bare socket path), agrees on an API version and pings it.
    ///
    /// # Errors
    /// [`RuntimeError::Unreachable`] when the endpoint is not a unix socket,
    /// does not exist, or does not answer.
    pub async fn connect(endpoint: &str) -> Result<Self, RuntimeError> {
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Unreachable {
                runtime: RUNTIME,
                endpoint: endpoint.to_owned(),
                hint: UNREACHABLE_HINT,
                denied: "run as root, or as a member of the docker group",
                source,
            };
        let socket = socket_path(RUNTIME, endpoint)?;
        let docker = pooled_unix(&socket).map_err(|e| unreachable(diagnosed(&socket, e)))?;
        // Any unix socket accepts a connection: a socket whose server never
        // answers must not hold the run for the whole request timeout.
        let answered = tokio::time::timeout(CONNECT_TIMEOUT, async {
            // Talk the engine's own version: bollard's default (1.5x) is
            // newer than what Debian's 20.10 speaks (1.41).
            let docker = docker.negotiate_version().await?;
            docker.ping().await?;
            Ok::<_, BollardError>(docker)
        })
        .await
        .map_err(|_| unreachable(format!("no answer within {CONNECT_TIMEOUT:?}").into()))?;
        let docker = answered.map_err(|e| unreachable(e.into()))?;
        let version = docker.client_version();
        // Unknown (no answer) counts as the graph driver store, where a
        // parent is held: the safe side.
        let containerd_store = tokio::time::timeout(CONNECT_TIMEOUT, docker.info())
            .await
            .ok()
            .and_then(Result::ok)
            .is_some_and(|info| convert::uses_containerd_store(&info));
        tracing::debug!(endpoint, api_version = %version, containerd_store, "connected to docker");
        Ok(Self {
            docker,
            socket,
            containerd_store,
            watch: Box::default(),
            read_build_cache: true,
            measure_image_fs: false,
        })
    }

    /// The engine's version and the API this connection speaks, as
    /// `check` says them: `docker 28.5.2 (API 1.51)`.
    pub async fn describe(&self) -> String {
        let api = self.docker.client_version();
        match tokio::time::timeout(CONNECT_TIMEOUT, self.docker.version()).await {
            Ok(Ok(bollard::models::SystemVersion {
                version: Some(version),
                ..
            })) => format!("{RUNTIME} {version} (API {api})"),
            _ => format!("{RUNTIME} (API {api})"),
        }
    }
}

/// `e` as the cause of an unreachable engine. bollard looks for the
/// socket itself before it connects, and takes a directory it may not
/// search for no socket at all: that is said as the I/O error it is (no
/// such socket, or permission denied), its words kept.
fn diagnosed(socket: &Path, e: BollardError) -> Box<dyn std::error::Error + Send + Sync> {
    use std::io::{Error, ErrorKind};
    match e {
        BollardError::SocketNotFoundError(_) => {
            let kind = match std::fs::metadata(socket) {
                Err(m) if m.kind() == ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
                _ => ErrorKind::NotFound,
            };
            Box::new(Error::new(kind, e))
        }
        other => other.into(),
    }
}

/// A client of the engine's unix socket that keeps its connections open
/// between requests.
///
/// bollard's own unix client pools no connection (`pool_max_idle_per_host(0)`):
/// every request connected anew, and dockerd paid a connection's set-up
/// (accept, a goroutine, its buffers, the garbage they leave) for each of a
/// run's thousands of removals (BENCHMARKS.md, "Kept connections"). dockerd
/// closes no idle connection itself; an idle one is closed here after
/// [`IDLE_CONNECTION`], so that a daemon's connections do not outlive a
/// cycle, and one the engine closed (a restart) leaves the pool when it
/// closes. A request is sent again on a new connection only when the
/// pooled one closed before the request was written (hyper's rule), so no
/// removal is ever sent twice.
fn pooled_unix(socket: &Path) -> Result<Docker, BollardError> {
    let path = socket.to_string_lossy().into_owned();
    if !socket.exists() {
        return Err(BollardError::SocketNotFoundError(path));
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(IDLE_CONNECTION)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(hyperlocal::UnixConnector);
    let transport = move |request: bollard::BollardRequest| {
        let client = client.clone();
        async move { client.request(request).await.map_err(BollardError::from) }
    };
    // hyperlocal's connector reads the socket's path from the host, in
    // hex, as its own URIs write it.
    let uri = hyper::Uri::from(hyperlocal::Uri::new(socket, "/"));
    Docker::connect_with_custom_transport(
        transport,
        Some(format!("unix://{}", uri.host().unwrap_or_default())),
        REQUEST_TIMEOUT_SECS,
        API_DEFAULT_VERSION,
    )
}
