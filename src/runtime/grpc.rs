//! gRPC over a unix socket, as containerd and every CRI runtime serve it:
//! the channels, their deadlines and the largest answer accepted, the CRI
//! client (`cri`) and containerd's own API (`containerd`). Shared by the containerd adapter and the CRI
//! adapter, which sit on it side by side.

pub(crate) mod containerd;
pub(crate) mod cri;

use std::time::Duration;

use containerd_client::tonic::transport::{Channel, Endpoint};

/// How long a connection, and the first call that proves the engine, may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-request deadline. Listing content on a node with many images is the
/// slowest call we make.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest answer accepted: tonic's default (4 MiB) is too small for the
/// image and CRI lists of a big node.
pub(crate) const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// An endpoint for the unix socket at `socket`, every call on it
/// failing after [`REQUEST_TIMEOUT`] without an answer. The `grpc-timeout`
/// each request also carries binds only a server that honours it: a hung
/// engine would not.
pub(crate) fn channel(socket: &std::path::Path) -> UnixEndpoint {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: Some(REQUEST_TIMEOUT),
    }
}

/// A channel to `socket` with no deadline, connected on first use: for the
/// event stream, which lives as long as the run.
pub(crate) fn channel_without_deadline(socket: &std::path::Path) -> Channel {
    UnixEndpoint {
        socket: socket.to_owned(),
        deadline: None,
    }
    .lazy()
}

/// How to reach the engine: its socket, and the deadline of each call.
pub(crate) struct UnixEndpoint {
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

    pub(crate) async fn connect(
        &self,
    ) -> Result<Channel, containerd_client::tonic::transport::Error> {
        self.endpoint()
            .connect_with_connector(self.connector())
            .await
    }

    fn lazy(&self) -> Channel {
        self.endpoint()
            .connect_with_connector_lazy(self.connector())
    }
}

/// A protobuf timestamp, as containerd's and `BuildKit`'s gRPC answers carry
/// them. Unset (the Unix epoch) and Go's zero time (`0001-01-01`, what Go
/// services send for "never") are `None`.
pub(crate) fn protobuf_time(
    t: Option<&prost_types::Timestamp>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = t?;
    let nanos = u32::try_from(t.nanos).ok()?;
    chrono::DateTime::from_timestamp(t.seconds, nanos).filter(|t| t.timestamp() > 0)
}
