//! Why a runtime could not be used, said so that a person can act on it.

use std::path::PathBuf;

use crate::output::Chain;

/// Why a runtime could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine did not answer at its endpoint.
    #[error("cannot reach {runtime} at {endpoint} ({hint})")]
    Unreachable {
        runtime: &'static str,
        endpoint: String,
        hint: &'static str,
        /// What to do when the socket refuses safeprune (permission
        /// denied): [`RUN_AS_ROOT`], or more where the engine's socket
        /// admits a group.
        denied: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The engine answered, but a call failed.
    #[error("{runtime} {call} failed")]
    Call {
        runtime: &'static str,
        call: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RuntimeError {
    /// This error as one short line a person can act on: what failed, the
    /// cause in a few words and what to do (`cannot reach Docker at
    /// /var/run/docker.sock: permission denied (run as root, or as a
    /// member of the docker group)`). [`Chain`] says every cause, for `-v`.
    #[must_use]
    pub fn brief(&self) -> String {
        match self {
            Self::Unreachable {
                runtime,
                endpoint,
                hint,
                denied,
                source,
            } => {
                let at = socket_of(endpoint);
                let (cause, todo) = match source.downcast_ref::<NoneAnswered>() {
                    Some(each) => (each.brief(), (*hint).to_owned()),
                    None => unanswered(hint, denied, source.as_ref()),
                };
                format!("cannot reach {} at {at}: {cause} ({todo})", shown(runtime))
            }
            Self::Call { source, .. } => {
                let root = crate::output::root_cause(source.as_ref());
                let cause = crate::output::io_cause(source.as_ref())
                    .map_or_else(|| root.to_string(), crate::output::io_words);
                format!("{self}: {cause}")
            }
        }
    }
}

/// An endpoint as a person names the socket: without `unix://`.
fn socket_of(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

/// A runtime's name as a sentence gives it.
fn shown(runtime: &str) -> &str {
    match runtime {
        "docker" => "Docker",
        "cri" => "a CRI runtime",
        other => other,
    }
}

/// What to do when a runtime's socket refuses safeprune, where only root
/// may use it.
pub(crate) const RUN_AS_ROOT: &str = "run as root";

/// Why the engine did not answer, in a few words, and what to do about it:
/// `hint`, or `denied` when the socket refused safeprune. An adapter says
/// a cause of its own client's as the I/O error it is (see
/// `docker::diagnosed`).
fn unanswered(
    hint: &str,
    denied: &str,
    source: &(dyn std::error::Error + 'static),
) -> (String, String) {
    use std::io::ErrorKind;
    let mut next = Some(source);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::NotFound => ("no such socket".to_owned(), hint.to_owned()),
                ErrorKind::PermissionDenied => ("permission denied".to_owned(), denied.to_owned()),
                ErrorKind::ConnectionRefused => (
                    "connection refused: nothing listens on the socket".to_owned(),
                    hint.to_owned(),
                ),
                _ => (crate::output::io_words(io), hint.to_owned()),
            };
        }
        next = e.source();
    }
    let root = crate::output::root_cause(source);
    (root.to_string(), hint.to_owned())
}

/// Why `auto` found no runtime: each one's error, in the order asked.
#[derive(Debug)]
pub struct NoneAnswered(pub Vec<RuntimeError>);

impl NoneAnswered {
    /// Each runtime's cause, short: `docker: no such socket; containerd: …`.
    fn brief(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|e| match e {
                RuntimeError::Unreachable {
                    runtime,
                    hint,
                    denied,
                    source,
                    ..
                } => {
                    let (cause, _) = unanswered(hint, denied, source.as_ref());
                    format!("{runtime}: {cause}")
                }
                call @ RuntimeError::Call { .. } => call.brief(),
            })
            .collect();
        each.join("; ")
    }
}

impl std::fmt::Display for NoneAnswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let each: Vec<String> = self.0.iter().map(|e| Chain(e).to_string()).collect();
        write!(f, "{}", each.join("; "))
    }
}

impl std::error::Error for NoneAnswered {}

/// The socket path of an endpoint written `unix:///path` or `/path`.
///
/// # Errors
/// [`RuntimeError::Unreachable`] for any other scheme (`tcp://`) or an empty
/// path: both runtimes are reached through their unix socket only.
pub(crate) fn socket_path(runtime: &'static str, endpoint: &str) -> Result<PathBuf, RuntimeError> {
    let path = socket_of(endpoint);
    if path.is_empty() || path.contains("://") {
        return Err(RuntimeError::Unreachable {
            runtime,
            endpoint: endpoint.to_owned(),
            hint: "only unix sockets are supported: unix:///path or /path",
            denied: RUN_AS_ROOT,
            source: "unsupported endpoint scheme".into(),
        });
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets_only() {
        let path = |e| socket_path("docker", e).ok();
        assert_eq!(
            path("unix:///var/run/docker.sock"),
            Some(PathBuf::from("/var/run/docker.sock"))
        );
        assert_eq!(
            path("/run/containerd/containerd.sock"),
            Some(PathBuf::from("/run/containerd/containerd.sock"))
        );
        for bad in ["unix://", "tcp://10.0.0.1:2375", ""] {
            let e = socket_path("docker", bad).unwrap_err().to_string();
            assert!(e.contains("only unix sockets"), "{bad}: {e}");
        }
    }
}
