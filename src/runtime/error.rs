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
                source,
            } => {
                let at = socket_of(endpoint);
                let (cause, todo) = match source.downcast_ref::<NoneAnswered>() {
                    Some(each) => (each.brief(), (*hint).to_owned()),
                    None => unanswered(runtime, hint, source.as_ref()),
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
        DOCKER => "Docker",
        "cri" => "a CRI runtime",
        other => other,
    }
}

/// What to do when the socket refuses safeprune: Docker's socket also
/// admits its group.
fn denied_hint(runtime: &str) -> &'static str {
    if runtime == DOCKER {
        "run as root, or as a member of the docker group"
    } else {
        "run as root"
    }
}

/// Docker's name in [`RuntimeError`]s, as its adapter gives it.
const DOCKER: &str = "docker";

/// Why `runtime` did not answer, in a few words, and what to do about it:
/// `hint`, unless the cause says better (no permission on the socket). An
/// adapter says a cause of its own client's as the I/O error it is (see
/// `docker::diagnosed`).
fn unanswered(
    runtime: &str,
    hint: &str,
    source: &(dyn std::error::Error + 'static),
) -> (String, String) {
    use std::io::ErrorKind;
    let mut next = Some(source);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::NotFound => ("no such socket".to_owned(), hint.to_owned()),
                ErrorKind::PermissionDenied => (
                    "permission denied".to_owned(),
                    denied_hint(runtime).to_owned(),
                ),
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
                    source,
                    ..
                } => {
                    let (cause, _) = unanswered(runtime, hint, source.as_ref());
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
